//! The `imports` section of `gateway.yaml`: the transparent path, where a
//! pod dials a ClusterSetIP and kube-proxy (or a DNAT rule) sends the
//! connection to one of the gateway's import ports.

use std::net::IpAddr;
use std::time::Duration;

use serde::Deserialize;

use crate::controller::writes::WriteLimits;
use crate::imports::{NamespaceQuota, PortRange};

/// `imports` in `gateway.yaml`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ImportSettings {
    /// Listen on the import ports of this cluster's imports.
    #[serde(default = "default_enabled")]
    pub listen: bool,
    /// Where the import listeners bind; default: the CONNECT listener's
    /// address, its IPv4 wildcard widened to `::` (both families) on a host
    /// with IPv6.
    #[serde(default)]
    pub address: Option<IpAddr>,
    /// The gateway ports import ports are taken from.
    #[serde(default)]
    pub port_range: PortRange,
    /// How long a released import port is not handed out again, so that a
    /// kube-proxy or gateway still acting on the old mapping cannot send a
    /// connection to the wrong service.
    #[serde(default = "default_release_grace", with = "humantime_serde")]
    pub release_grace: Duration,
    /// A file setup's addresses for headless pods on other networks (one
    /// from each range per pod): what DNS answers for such a pod, and what
    /// the per-pod derived Services of `strait imports` ask for as their
    /// `clusterIPs`. Unused with the Kubernetes source, whose API server
    /// allocates them; without it, a file setup names no remote pod.
    #[serde(default)]
    pub pod_addresses: Vec<ipnet::IpNet>,
    /// What one namespace may hold of the shared import ports and
    /// per-pod derived Services.
    #[serde(default)]
    pub namespace_quota: NamespaceQuotaSettings,
    /// How wide and fast the import reconciler writes (`kube.manageImports`).
    #[serde(default)]
    pub writes: ImportWriteSettings,
}

/// `imports.writes`.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ImportWriteSettings {
    /// Writes in flight at once (at least 1).
    #[serde(default = "default_write_concurrency")]
    pub concurrency: std::num::NonZeroUsize,
    /// Writes per second, sustained (at least 1).
    #[serde(default = "default_write_qps")]
    pub qps: std::num::NonZeroU32,
    /// Writes that may go at once after a quiet spell (at least 1).
    #[serde(default = "default_write_burst")]
    pub burst: std::num::NonZeroU32,
    /// How long one write may take before it counts as failed (and is
    /// retried after a backoff).
    #[serde(default = "default_write_timeout", with = "humantime_serde")]
    pub timeout: Duration,
}

fn default_write_concurrency() -> std::num::NonZeroUsize {
    std::num::NonZeroUsize::new(WriteLimits::default().concurrency)
        .unwrap_or(std::num::NonZeroUsize::MIN)
}

fn default_write_qps() -> std::num::NonZeroU32 {
    std::num::NonZeroU32::new(WriteLimits::default().qps).unwrap_or(std::num::NonZeroU32::MIN)
}

fn default_write_burst() -> std::num::NonZeroU32 {
    std::num::NonZeroU32::new(WriteLimits::default().burst).unwrap_or(std::num::NonZeroU32::MIN)
}

fn default_write_timeout() -> Duration {
    WriteLimits::default().timeout
}

impl Default for ImportWriteSettings {
    fn default() -> Self {
        Self {
            concurrency: default_write_concurrency(),
            qps: default_write_qps(),
            burst: default_write_burst(),
            timeout: default_write_timeout(),
        }
    }
}

impl From<ImportWriteSettings> for WriteLimits {
    fn from(settings: ImportWriteSettings) -> Self {
        WriteLimits {
            concurrency: settings.concurrency.get(),
            qps: settings.qps.get(),
            burst: settings.burst.get(),
            timeout: settings.timeout,
        }
    }
}

/// `imports.namespaceQuota`.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NamespaceQuotaSettings {
    #[serde(default = "default_quota_import_ports")]
    pub import_ports: usize,
    #[serde(default = "default_quota_pod_services")]
    pub pod_services: usize,
}

fn default_quota_import_ports() -> usize {
    NamespaceQuota::default().import_ports
}

fn default_quota_pod_services() -> usize {
    NamespaceQuota::default().pod_services
}

impl Default for NamespaceQuotaSettings {
    fn default() -> Self {
        Self {
            import_ports: default_quota_import_ports(),
            pod_services: default_quota_pod_services(),
        }
    }
}

impl From<NamespaceQuotaSettings> for NamespaceQuota {
    fn from(settings: NamespaceQuotaSettings) -> Self {
        NamespaceQuota {
            import_ports: settings.import_ports,
            pod_services: settings.pod_services,
        }
    }
}

fn default_enabled() -> bool {
    true
}

fn default_release_grace() -> Duration {
    Duration::from_secs(300)
}

impl Default for ImportSettings {
    fn default() -> Self {
        Self {
            listen: default_enabled(),
            address: None,
            port_range: PortRange::default(),
            release_grace: default_release_grace(),
            pod_addresses: Vec::new(),
            namespace_quota: NamespaceQuotaSettings::default(),
            writes: ImportWriteSettings::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::config::GatewaySettings;

    #[test]
    fn the_section_parses_and_a_bad_range_names_its_field() {
        let settings = GatewaySettings::parse(
            "g.yaml",
            "imports:\n  portRange: 30000-30099\n  address: 10.0.0.1\n  releaseGrace: 1m\n",
        )
        .expect("valid settings");
        assert_eq!(settings.imports.port_range.to_string(), "30000-30099");
        assert_eq!(settings.imports.release_grace.as_secs(), 60);
        assert!(settings.imports.listen);
        assert!(settings.imports.pod_addresses.is_empty());
        let settings = GatewaySettings::parse(
            "g.yaml",
            "imports:\n  podAddresses: [10.97.0.0/24, \"fd00:97::/112\"]\n",
        )
        .expect("valid ranges");
        assert_eq!(settings.imports.pod_addresses.len(), 2);
        let error = GatewaySettings::parse("g.yaml", "imports:\n  podAddresses: [10.97.0.0]\n")
            .expect_err("not a range");
        assert_eq!(error.0.field.as_deref(), Some("imports.podAddresses[0]"));
        let error = GatewaySettings::parse("g.yaml", "imports:\n  portRange: 3-2\n")
            .expect_err("an empty range");
        assert_eq!(error.0.field.as_deref(), Some("imports.portRange"));
        assert!(error.0.message.contains("is empty"), "{}", error.0.message);
        let settings = GatewaySettings::parse(
            "g.yaml",
            "imports:\n  writes:\n    concurrency: 4\n    qps: 50\n    timeout: 3s\n",
        )
        .expect("write limits");
        let limits = crate::controller::writes::WriteLimits::from(settings.imports.writes);
        assert_eq!(
            (limits.concurrency, limits.qps, limits.burst),
            (4, 50, 1000)
        );
        assert_eq!(limits.timeout.as_secs(), 3);
        let error = GatewaySettings::parse("g.yaml", "imports:\n  writes:\n    concurrency: 0\n")
            .expect_err("no writes at all");
        assert_eq!(error.0.field.as_deref(), Some("imports.writes.concurrency"));
    }
}
