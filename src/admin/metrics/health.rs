//! Active health checks (`health` in `gateway.yaml`): how many were
//! answered and how many failed, and how many backends they hold out of
//! rotation now.

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

label_enum! {
    /// How a health check ended.
    CheckResult {
        /// The backend was reached through the tunnel.
        Answered => "answered",
        /// It was not, within the timeout.
        Failed => "failed",
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct CheckLabels {
    result: CheckResult,
}

/// `strait_health_checks_total{result}`, `strait_health_checks_down`.
#[derive(Debug, Default)]
pub(super) struct HealthMetrics {
    checks: Family<CheckLabels, Counter>,
    down: Gauge,
}

impl HealthMetrics {
    pub(super) fn register(&self, registry: &mut Registry) {
        registry.register(
            "health_checks",
            "Active health checks of backends through the tunnel, by result",
            self.checks.clone(),
        );
        registry.register(
            "health_checks_down",
            "Backends held out of rotation by active health checks now",
            self.down.clone(),
        );
    }

    pub(super) fn checked(&self, result: CheckResult) {
        self.checks.get_or_create(&CheckLabels { result }).inc();
    }

    pub(super) fn set_down(&self, backends: usize) {
        self.down.set(i64::try_from(backends).unwrap_or(i64::MAX));
    }
}
