//! `health` in `gateway.yaml`: active health checks of the backends this
//! gateway reaches through a tunnel. Off unless `interval` is set: each
//! probe is a connection to the backend (made by the peer gateway), and
//! the operator chooses what that may cost.

use std::time::Duration;

use serde::Deserialize;

/// The longest `interval` and `timeout` accepted.
const MAX_INTERVAL: Duration = Duration::from_secs(3600);
const MAX_TIMEOUT: Duration = Duration::from_secs(60);

/// `health` in `gateway.yaml`.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HealthSettings {
    /// How often each backend on another network is probed (`0s`: off).
    #[serde(default, with = "humantime_serde")]
    pub interval: Duration,
    /// A probe not answered within this long failed.
    #[serde(default = "default_timeout", with = "humantime_serde")]
    pub timeout: Duration,
    /// Failed probes in a row that take a backend out of rotation.
    #[serde(default = "default_unhealthy_threshold")]
    pub unhealthy_threshold: u32,
    /// Answered probes in a row that bring it back.
    #[serde(default = "default_healthy_threshold")]
    pub healthy_threshold: u32,
    /// Probes this gateway starts per second at most, over every backend:
    /// past it, each backend is probed less often than `interval`.
    #[serde(default = "default_max_probes_per_second")]
    pub max_probes_per_second: u32,
}

fn default_timeout() -> Duration {
    Duration::from_secs(1)
}

fn default_unhealthy_threshold() -> u32 {
    2
}

fn default_healthy_threshold() -> u32 {
    1
}

fn default_max_probes_per_second() -> u32 {
    20
}

impl Default for HealthSettings {
    fn default() -> Self {
        Self {
            interval: Duration::ZERO,
            timeout: default_timeout(),
            unhealthy_threshold: default_unhealthy_threshold(),
            healthy_threshold: default_healthy_threshold(),
            max_probes_per_second: default_max_probes_per_second(),
        }
    }
}

impl HealthSettings {
    pub fn enabled(&self) -> bool {
        !self.interval.is_zero()
    }

    /// The field at fault and why, if any.
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        if !self.enabled() {
            return Ok(());
        }
        // Bounded so that a round's deadlines stay well inside a clock's range.
        if self.interval > MAX_INTERVAL {
            return Err(("health.interval", "must be at most 1h (0s: off)".to_owned()));
        }
        if self.timeout.is_zero() || self.timeout > MAX_TIMEOUT {
            return Err((
                "health.timeout",
                "must be more than 0s and at most 1m".to_owned(),
            ));
        }
        for (field, value) in [
            ("health.unhealthyThreshold", self.unhealthy_threshold),
            ("health.healthyThreshold", self.healthy_threshold),
            ("health.maxProbesPerSecond", self.max_probes_per_second),
        ] {
            if value == 0 {
                return Err((field, "must be at least 1".to_owned()));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::GatewaySettings;
    use super::*;

    #[test]
    fn health_checks_are_off_by_default_and_checked_when_on() {
        let off = GatewaySettings::parse("g.yaml", "").expect("defaults");
        assert!(!off.health.enabled());
        let on = GatewaySettings::parse("g.yaml", "health:\n  interval: 2s\n").expect("valid");
        assert!(on.health.enabled());
        assert_eq!(on.health.timeout, Duration::from_secs(1));
        let zero = "health:\n  interval: 2s\n  unhealthyThreshold: 0\n";
        let error = GatewaySettings::parse("g.yaml", zero).expect_err("refused");
        assert_eq!(error.0.field.as_deref(), Some("health.unhealthyThreshold"));
        let centuries = "health:\n  interval: 300years\n";
        let error = GatewaySettings::parse("g.yaml", centuries).expect_err("refused");
        assert_eq!(error.0.field.as_deref(), Some("health.interval"));
    }
}
