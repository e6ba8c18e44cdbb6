//! The control plane's work counters: how much each change costs, as
//! numbers an operator (and a test) can read. A change should cost the
//! change: the publications, cluster translations, objects rendered and
//! writes it causes do not grow with the services held
//! (docs/performance.md). Beside them, the import reconciler's write queue
//! and the time its writes and passes take.

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

label_enum! {
    /// A unit of control-plane work.
    Stage {
        /// A snapshot the Kubernetes source published.
        Publication => "publication",
        /// One cluster translated again (whole or its changed services).
        ClusterTranslation => "cluster_translation",
        /// A pass of the import reconciler (this replica leads).
        ImportPass => "import_pass",
        /// An object the import reconciler rendered in a pass.
        ImportObjectRendered => "import_object_rendered",
        /// An import the import reconciler planned in a pass (one kept
        /// from the pass before is not planned again).
        ImportPlanned => "import_planned",
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct StageLabels {
    stage: Stage,
}

/// `strait_control_plane_work_total{stage}`.
#[derive(Debug, Default)]
pub(super) struct WorkMetrics {
    work: Family<StageLabels, Counter>,
    writes_queued: Gauge,
    unsettled: Gauge,
    write_seconds: Counter<f64, std::sync::atomic::AtomicU64>,
    pass_seconds: Counter<f64, std::sync::atomic::AtomicU64>,
}

impl WorkMetrics {
    pub(super) fn register(&self, registry: &mut Registry) {
        registry.register(
            "control_plane_work",
            "Work of the control plane, by stage: publications of the Kubernetes source, cluster translations, import reconciler passes, the imports they planned and the objects they rendered",
            self.work.clone(),
        );
        registry.register(
            "import_writes_queued",
            "Writes of the import reconciler's current round not made yet",
            self.writes_queued.clone(),
        );
        registry.register(
            "import_services_unsettled",
            "Services the import reconciler's last pass did not find as desired: its next pass renders them again",
            self.unsettled.clone(),
        );
        registry.register(
            "import_write_seconds",
            "Time the import reconciler's writes took, from a write slot to the server's answer (divide by strait_import_writes_total for the mean)",
            self.write_seconds.clone(),
        );
        registry.register(
            "import_pass_seconds",
            "Time the import reconciler's passes took, writes included (divide by the import_pass work counter for the mean)",
            self.pass_seconds.clone(),
        );
    }

    /// Sets the write queue's depth and the services left to render, and
    /// raises the time counters to the reconciler's running totals.
    pub(super) fn set_import_queue(
        &self,
        queued: usize,
        unsettled: usize,
        write_seconds: f64,
        pass_seconds: f64,
    ) {
        let gauge = |value: usize| i64::try_from(value).unwrap_or(i64::MAX);
        self.writes_queued.set(gauge(queued));
        self.unsettled.set(gauge(unsettled));
        for (counter, total) in [
            (&self.write_seconds, write_seconds),
            (&self.pass_seconds, pass_seconds),
        ] {
            let counted = counter.get();
            if total > counted {
                counter.inc_by(total - counted);
            }
        }
    }

    /// Raises `stage`'s counter to `total` (the source's and the
    /// reconciler's own running totals); never lowers it.
    pub(super) fn set_total(&self, stage: Stage, total: u64) {
        let counter = self.work.get_or_create(&StageLabels { stage });
        let counted = counter.get();
        if total > counted {
            counter.inc_by(total - counted);
        }
    }
}
