//! The control plane's work counters: how much each change costs, as
//! numbers an operator (and a test) can read. A change should cost the
//! change: the publications, cluster translations and writes it causes
//! do not grow with the services held; the objects a pass renders still
//! do (the planner is not incremental yet, docs/performance.md).

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
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
}

impl WorkMetrics {
    pub(super) fn register(&self, registry: &mut Registry) {
        registry.register(
            "control_plane_work",
            "Work of the control plane, by stage: publications of the Kubernetes source, cluster translations, import reconciler passes and the objects they rendered",
            self.work.clone(),
        );
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
