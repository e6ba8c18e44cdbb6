//! The controller: everything Strait writes to the local cluster's API
//! server, apart from the reading it follows. One replica at a time, the
//! holder of a Lease in the gateway's namespace (`lease`), writes the
//! ServiceExport conditions that [`crate::export_status`] plans from each
//! discovery snapshot (`status`) and reconciles the ServiceImports, derived
//! Services and EndpointSlices that [`crate::imports`] plans (`imports`).
//! `link` is `strait link`/`unlink`: the reader a remote cluster grants and
//! the Secret that names it.
//!
//! | module | owns |
//! |---|---|
//! | `lease` | leader election on a `coordination.k8s.io` Lease |
//! | `status` | the elected tasks; writing `Valid`, `Conflict` and `Ready` |
//! | `imports` | applying and deleting the import objects, as planned |
//! | `link` | `strait link`/`unlink`: a remote cluster's reader and its Secret |
//!
//! `strait run` wires it: discovery starts first and reads, the controller
//! follows its snapshots (never the other way round).

mod imports;
mod lease;
pub mod link;
mod status;
pub mod writes;

use std::time::Duration;

use tokio::sync::watch;

pub use imports::ImportsReport;
pub use lease::LeaseError;
pub use status::{ExportStatusOptions, ExportStatusReport, LEASE_NAME, StatusError};

use crate::backoff::Retry;
use crate::discovery::kube::{AccessScope, KubeHandle, KubeOptions, ResourceAccess, WATCH_VERBS};
use crate::discovery::objects::MCS_GROUP;

/// Every resource the gateway writes with `--write-export-status`, and how:
/// the local cluster's ServiceExport status (a JSON merge patch of
/// `status.conditions`, conditional on the resource version) and the Lease
/// that elects the one replica that writes it (read, created, then renewed
/// by replacing it, conditional on the resource version). What the
/// gateway's RBAC must grant on top of [`WATCHED_RESOURCES`](crate::discovery::kube::WATCHED_RESOURCES).
pub const WRITTEN_RESOURCES: &[ResourceAccess] = &[
    ResourceAccess {
        scope: AccessScope::Cluster,
        group: MCS_GROUP,
        resource: "serviceexports/status",
        verbs: &["patch"],
    },
    ResourceAccess {
        scope: AccessScope::LeaseNamespace,
        group: "coordination.k8s.io",
        resource: "leases",
        verbs: &["get", "create", "update"],
    },
];

/// Everything the gateway uses on top of [`WATCHED_RESOURCES`](crate::discovery::kube::WATCHED_RESOURCES) with
/// `kube.manageImports`: the namespaces of the local cluster (an import
/// goes only where its namespace exists), server-side applies (`patch`)
/// and deletions of the ServiceImports (and their status), derived
/// Services and EndpointSlices it creates, and the Lease that elects the
/// one replica that writes them.
/// What writing an object by server-side apply and deleting it takes: the
/// API server authorizes an apply that creates the object as `create` too,
/// not only as `patch`.
const APPLY_VERBS: &[&str] = &["create", "patch", "delete"];

pub const IMPORT_RESOURCES: &[ResourceAccess] = &[
    ResourceAccess {
        scope: AccessScope::Cluster,
        group: "",
        resource: "namespaces",
        verbs: WATCH_VERBS,
    },
    ResourceAccess {
        scope: AccessScope::Cluster,
        group: MCS_GROUP,
        resource: "serviceimports",
        verbs: APPLY_VERBS,
    },
    ResourceAccess {
        scope: AccessScope::Cluster,
        group: MCS_GROUP,
        resource: "serviceimports/status",
        verbs: &["patch"],
    },
    ResourceAccess {
        scope: AccessScope::Cluster,
        group: "",
        resource: "services",
        verbs: APPLY_VERBS,
    },
    ResourceAccess {
        scope: AccessScope::Cluster,
        group: "discovery.k8s.io",
        resource: "endpointslices",
        verbs: APPLY_VERBS,
    },
    ResourceAccess {
        scope: AccessScope::LeaseNamespace,
        group: "coordination.k8s.io",
        resource: "leases",
        verbs: &["get", "create", "update"],
    },
];

/// How the import reconciler allocates import ports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImportOptions {
    pub range: crate::imports::PortRange,
    /// How long a released import port is not handed out again.
    pub release_grace: Duration,
    /// At most this many remote pods per headless service get a per-pod
    /// derived Service (`dns.maxHeadlessEndpoints`).
    pub max_headless_endpoints: usize,
    /// What one namespace may hold (`imports.namespaceQuota`).
    pub quota: crate::imports::NamespaceQuota,
    /// The field manager of a previous MCS implementation whose
    /// ServiceImports, derived Services and their slices Strait takes over
    /// (`kube.adoptImports`); `None`: another controller's import is left
    /// alone.
    pub adopt_from: Option<String>,
    /// How wide and fast the writes go (`imports.writes`).
    pub writes: writes::WriteLimits,
}

/// What the controller writes; with neither, it does not run.
#[derive(Debug, Clone, Default)]
pub struct ControllerOptions {
    /// Write `Valid`, `Conflict` and `Ready` on the local cluster's
    /// ServiceExports (`--write-export-status`); `None` writes nothing. Its
    /// Lease settings elect the writer of imports too.
    pub export_status: Option<ExportStatusOptions>,
    /// Act as the local cluster's MCS controller (`kube.manageImports`):
    /// the Lease holder writes the ServiceImports and derived Services.
    pub imports: Option<ImportOptions>,
    pub retry: Retry,
}

impl ControllerOptions {
    /// Nothing to write: no controller runs.
    pub fn is_empty(&self) -> bool {
        self.export_status.is_none() && self.imports.is_none()
    }

    /// Asks discovery for what these writers read: the local exports and
    /// their validity, and the managers of objects to adopt.
    pub fn request_inputs(&self, discovery: &mut KubeOptions) {
        discovery.local_exports |= self.export_status.is_some();
        if let Some(imports) = &self.imports {
            discovery.adopt_from.clone_from(&imports.adopt_from);
        }
    }
}

/// The running controller; dropping it stops the Lease and the writers
/// (without releasing the Lease: see [`Controller::release_leadership`]).
pub struct Controller {
    tasks: status::StatusTasks,
    /// The generation of the newest snapshot this replica's DNS responder
    /// answers from; `None` until a gateway serving DNS says.
    names_answered: watch::Sender<Option<u64>>,
}

impl std::fmt::Debug for Controller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Controller").finish_non_exhaustive()
    }
}

impl Controller {
    /// Starts the Lease and, as its holder, the writers `options` asks
    /// for, on the local cluster of `discovery`, following its snapshots.
    /// `None` when there is nothing to write. The discovery source must
    /// have been started with [`ControllerOptions::request_inputs`].
    pub fn start(options: ControllerOptions, discovery: &KubeHandle) -> Option<Self> {
        if options.is_empty() {
            return None;
        }
        let (names_answered, answered) = watch::channel(None);
        let tasks = status::start(
            options.export_status.clone().unwrap_or_default(),
            options.export_status.is_some(),
            options.imports,
            discovery.local_client(),
            (discovery.subscribe(), answered),
            options.retry,
        );
        Some(Self {
            tasks,
            names_answered,
        })
    }

    /// What the export status writer does, when it runs: leadership and
    /// writes, updated as they happen.
    pub fn export_status(&self) -> Option<watch::Receiver<ExportStatusReport>> {
        Some(self.tasks.reports())
    }

    /// What the import reconciler knows, when it runs: its plan, leadership
    /// and writes, updated as they happen.
    pub fn imports(&self) -> Option<watch::Receiver<ImportsReport>> {
        self.tasks.imports()
    }

    /// The local cluster's namespaces as this replica watches them, when
    /// the import reconciler runs (`None` inside until listed).
    pub fn namespaces(
        &self,
    ) -> Option<watch::Receiver<Option<std::collections::BTreeSet<String>>>> {
        self.tasks.namespaces()
    }

    /// Takes what the other clusters of the set last said of the local
    /// cluster's exports (the gateway's periodic question): the export
    /// status writer names in each `Ready` message who imports it.
    pub fn peer_imports_answered(
        &self,
        imports: std::sync::Arc<crate::export_status::PeerImports>,
    ) {
        self.tasks.peer_imports_answered(imports);
    }

    /// Says that this replica's DNS responder answers from the routes of
    /// the snapshot of `generation` (or a newer one). From the first call
    /// on, the import reconciler turns an import `Ready` only once the
    /// snapshot its ClusterSetIPs arrived in is answered; a gateway that
    /// serves no DNS never calls it, and imports turn `Ready` as soon as
    /// they are written.
    pub fn names_answered_from(&self, generation: u64) {
        self.names_answered.send_if_modified(|answered| {
            let newer = answered.is_none_or(|answered| answered < generation);
            if newer {
                *answered = Some(generation);
            }
            newer
        });
    }

    /// Stops writing and, if this replica holds the Lease, gives it up so
    /// that another replica takes over at once instead of after the lease
    /// duration. For a graceful shutdown; waits at most `timeout`.
    pub async fn release_leadership(&self, timeout: Duration) {
        self.tasks.release(timeout).await;
    }
}

#[cfg(test)]
mod tests {
    use kube::Resource;

    use super::*;
    use crate::discovery::kube::client::Kind;

    #[test]
    fn written_resources_are_what_the_status_writer_and_lease_use() {
        use k8s_openapi::api::coordination::v1::Lease;

        let written: Vec<(AccessScope, &str, &str)> = WRITTEN_RESOURCES
            .iter()
            .map(|a| (a.scope, a.group, a.resource))
            .collect();
        let status = format!("{}/status", Kind::ServiceExport.resource());
        assert_eq!(
            written,
            [
                (
                    AccessScope::Cluster,
                    Kind::ServiceExport.group(),
                    status.as_str()
                ),
                (
                    AccessScope::LeaseNamespace,
                    &*Lease::group(&()),
                    &*Lease::plural(&())
                ),
            ]
        );
    }
}
