//! The `dns` section of `gateway.yaml`: the zone the gateway answers for
//! and the TTLs of its answers. Where the responder listens is
//! `listeners.dns` (or `strait run --dns-listen`); without it there is no
//! DNS listener, though `/debug/dns` still shows what would be answered.

use std::time::Duration;

use serde::Deserialize;

use crate::dns::{Zone, ZoneError};
use crate::model::check_dns_subdomain;

/// The longest TTL accepted: answers follow every route swap, and a long
/// TTL would keep resolvers on old addresses for that long.
pub const MAX_TTL: Duration = Duration::from_secs(24 * 3600);

/// `dns` in `gateway.yaml`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DnsSettings {
    /// The zone answered (KEP-1645's cluster set domain).
    #[serde(default = "default_zone")]
    pub zone: String,
    /// TTL of positive answers.
    #[serde(default = "default_ttl", with = "humantime_serde")]
    pub ttl: Duration,
    /// TTL (and SOA minimum) of NXDOMAIN and NODATA answers.
    #[serde(default = "default_ttl", with = "humantime_serde")]
    pub negative_ttl: Duration,
    /// At most this many pods on other networks per headless service get
    /// an address here (a per-pod derived Service, an import port per
    /// service port); the rest are counted and not answered.
    #[serde(default = "default_max_headless_endpoints")]
    pub max_headless_endpoints: usize,
}

fn default_max_headless_endpoints() -> usize {
    64
}

fn default_zone() -> String {
    "clusterset.local".to_owned()
}

fn default_ttl() -> Duration {
    Duration::from_secs(5)
}

impl Default for DnsSettings {
    fn default() -> Self {
        Self {
            zone: default_zone(),
            ttl: default_ttl(),
            negative_ttl: default_ttl(),
            max_headless_endpoints: default_max_headless_endpoints(),
        }
    }
}

impl DnsSettings {
    /// The zone these settings describe (checked when they were parsed).
    pub fn zone(&self) -> Result<Zone, ZoneError> {
        Zone::new(&self.zone, self.ttl_seconds(), self.negative_ttl_seconds())
    }

    /// Checks the section; the error names the field (under `dns.`) and why.
    pub(super) fn check(&self) -> Result<(), (&'static str, String)> {
        let zone = self.zone.strip_suffix('.').unwrap_or(&self.zone);
        check_dns_subdomain(zone, 253)
            .map_err(|e| ("dns.zone", format!("invalid zone name: {e}")))?;
        for (field, ttl) in [
            ("dns.ttl", self.ttl),
            ("dns.negativeTtl", self.negative_ttl),
        ] {
            if ttl.subsec_nanos() != 0 {
                return Err((field, "must be a whole number of seconds".to_owned()));
            }
            if ttl > MAX_TTL {
                return Err((
                    field,
                    format!("must be at most {}", humantime::format_duration(MAX_TTL)),
                ));
            }
        }
        Ok(())
    }

    /// The positive TTL in seconds (checked to fit when the settings were parsed).
    pub fn ttl_seconds(&self) -> u32 {
        seconds(self.ttl)
    }

    /// The negative TTL in seconds.
    pub fn negative_ttl_seconds(&self) -> u32 {
        seconds(self.negative_ttl)
    }
}

fn seconds(duration: Duration) -> u32 {
    u32::try_from(duration.min(MAX_TTL).as_secs()).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use crate::config::GatewaySettings;

    #[test]
    fn the_section_parses_with_defaults() {
        let settings = GatewaySettings::parse("g.yaml", "").expect("defaults");
        assert_eq!(settings.dns.zone, "clusterset.local");
        assert_eq!(settings.dns.ttl_seconds(), 5);
        assert_eq!(settings.dns.negative_ttl_seconds(), 5);
        assert_eq!(settings.listeners.dns, None);
        let text = "listeners:\n  dns: 0.0.0.0:5353\ndns:\n  zone: cs.example\n  ttl: 30s\n  negativeTtl: 2s\n";
        let settings = GatewaySettings::parse("g.yaml", text).expect("valid settings");
        assert_eq!(
            settings.listeners.dns,
            Some("0.0.0.0:5353".parse().expect("addr"))
        );
        assert_eq!(settings.dns.zone, "cs.example");
        assert_eq!(settings.dns.ttl_seconds(), 30);
        assert_eq!(settings.dns.negative_ttl_seconds(), 2);
    }

    #[test]
    fn bad_values_name_their_field() {
        for (text, field, message) in [
            ("dns:\n  zone: Bad_Zone\n", "dns.zone", "invalid zone name"),
            (
                "dns:\n  ttl: 1500ms\n",
                "dns.ttl",
                "whole number of seconds",
            ),
            (
                "dns:\n  negativeTtl: 2d\n",
                "dns.negativeTtl",
                "at most 1day",
            ),
            ("dns:\n  tll: 5s\n", "dns.tll", "unknown field `tll`"),
        ] {
            let error = GatewaySettings::parse("g.yaml", text).expect_err(text);
            assert_eq!(error.0.field.as_deref(), Some(field), "{text}");
            assert!(error.0.message.contains(message), "{}", error.0.message);
        }
    }
}
