//! Writing export status: the `Valid`, `Conflict` and `Ready` conditions on the local
//! cluster's ServiceExports, by the one replica that holds the Lease
//! (`lease`).
//!
//! The writer follows the source's snapshots, the same ones the routes are
//! built from, and their merge of the cluster set: for every
//! local export `export_status` says which conditions are wanted and whether
//! the ones the server holds already say so. Only a change is written: a
//! server-side apply (field manager `strait`, forced) of the `Valid`,
//! `Conflict` and `Ready` conditions on the `status` subresource, in the API version
//! the server offers. `status.conditions` is a `listType=map` list keyed by
//! `type` in the MCS CRDs, so Strait owns those three conditions only and
//! other controllers' conditions are untouched. Nothing is written before every cluster
//! has synced or failed once, so a cluster still connecting does not make a
//! conflict come and go.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::ApiResource;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::ImportOptions;
use super::imports::ImportsReport;
use super::lease::{Elector, Leadership, LeaseSettings};
use crate::backoff::Backoff;
use crate::backoff::Retry;
use crate::discovery::kube::client::{ClusterSource, Kind};
use crate::discovery::kube::{
    LocalExports, POD_NAME_ENV, POD_NAMESPACE_ENV, SourceSnapshot, SyncState,
};

use crate::export_status::{
    CONFLICT_CONDITION, LocalExport, PeerImports, READY_CONDITION, VALID_CONDITION,
    updated_conditions, wanted,
};
use crate::model::{ClusterId, ServiceKey};
use tokio_util::task::AbortOnDropHandle;

/// The field manager named on every status write.
/// The Lease that elects the replica writing export status and imports
/// (`strait check` and `strait status` read its holder too).
pub const LEASE_NAME: &str = "strait-export-status";

const FIELD_MANAGER: &str = "strait";
/// The ServiceExport conditions Strait writes and owns.
const OWNED_CONDITIONS: [&str; 3] = [VALID_CONDITION, CONFLICT_CONDITION, READY_CONDITION];
/// Longest wait for one status write.
const WRITE_TIMEOUT: Duration = Duration::from_secs(15);

/// How export status is written and the Lease held.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportStatusOptions {
    /// The Lease that elects the writer.
    pub lease_name: String,
    /// Its namespace (default: `POD_NAMESPACE`, else the local kubeconfig's
    /// namespace).
    pub lease_namespace: Option<String>,
    /// This replica's holder identity (default: `POD_NAME`, else the host
    /// name with a random suffix).
    pub identity: Option<String>,
    /// How long a Lease that is not renewed stays held.
    pub lease_duration: Duration,
    /// How long a leader that cannot renew keeps writing; shorter than
    /// `lease_duration`.
    pub renew_deadline: Duration,
    /// How often the Lease is renewed, or tried for.
    pub retry_period: Duration,
}

impl Default for ExportStatusOptions {
    fn default() -> Self {
        Self {
            lease_name: LEASE_NAME.to_owned(),
            lease_namespace: None,
            identity: None,
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

/// What the writer has done so far, for metrics and tests.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExportStatusReport {
    /// This replica's holder identity.
    pub identity: String,
    /// This replica holds the Lease and writes.
    pub leader: bool,
    /// Status writes the server accepted.
    pub writes: u64,
    /// Status writes that failed (a `409 Conflict` included).
    pub failed_writes: u64,
    /// The generation of the last snapshot evaluated as leader (0: none).
    pub evaluated: u64,
}

/// Why a status write failed.
#[derive(Debug, thiserror::Error)]
pub enum StatusError {
    #[error("serviceexport {export}: status not written: {source}")]
    Write {
        export: ServiceKey,
        source: kube::Error,
    },
    #[error("serviceexport api version {0:?} is not group/version")]
    ApiVersion(String),
}

/// The Lease and the tasks that write as its holder; dropping them stops all.
pub(super) struct StatusTasks {
    _lease: AbortOnDropHandle<()>,
    _writer: Option<AbortOnDropHandle<()>>,
    imports: Option<super::imports::ImportTasks>,
    reports: watch::Receiver<ExportStatusReport>,
    /// What the other clusters last said of the local exports (the probe
    /// sends it): the `Ready` messages name who imports.
    peer_imports: watch::Sender<Arc<PeerImports>>,
    stop: CancellationToken,
    /// True once the Lease task has ended (and released the Lease).
    lease_done: watch::Receiver<bool>,
}

impl StatusTasks {
    pub(super) fn reports(&self) -> watch::Receiver<ExportStatusReport> {
        self.reports.clone()
    }

    /// The import reconciler's reports, when it runs.
    pub(super) fn imports(&self) -> Option<watch::Receiver<ImportsReport>> {
        self.imports.as_ref().map(|tasks| tasks.reports.clone())
    }

    /// The local cluster's namespaces, when the import reconciler runs.
    pub(super) fn namespaces(&self) -> Option<watch::Receiver<Option<BTreeSet<String>>>> {
        self.imports.as_ref().map(|tasks| tasks.namespaces.clone())
    }

    /// Takes what the other clusters last said of the local exports.
    pub(super) fn peer_imports_answered(&self, imports: Arc<PeerImports>) {
        self.peer_imports.send_if_modified(|held| {
            let changed = **held != *imports;
            if changed {
                *held = imports;
            }
            changed
        });
    }

    /// Stops the election, which frees the Lease if held; waits at most
    /// `timeout` for that.
    pub(super) async fn release(&self, timeout: Duration) {
        self.stop.cancel();
        let mut done = self.lease_done.clone();
        let _ = tokio::time::timeout(timeout, done.wait_for(|done| *done)).await;
    }
}

/// The holder identity: `POD_NAME`, else the host name and a random suffix
/// (two processes on one host must not share an identity).
fn default_identity() -> String {
    if let Ok(name) = std::env::var(POD_NAME_ENV)
        && !name.trim().is_empty()
    {
        return name.trim().to_owned();
    }
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "strait".to_owned());
    format!("{host}_{:08x}", fastrand::u32(..))
}

/// Starts the Lease on the local cluster's `client`, and as its holder the
/// export status writer (`write_status`) and the import reconciler
/// (`imports`): one elected replica does both.
pub(super) fn start(
    options: ExportStatusOptions,
    write_status: bool,
    imports: Option<ImportOptions>,
    client: Client,
    (snapshots, names_answered): (
        watch::Receiver<Arc<SourceSnapshot>>,
        watch::Receiver<Option<u64>>,
    ),
    retry: Retry,
) -> StatusTasks {
    let settings = LeaseSettings {
        namespace: options
            .lease_namespace
            .clone()
            .or_else(|| std::env::var(POD_NAMESPACE_ENV).ok())
            .unwrap_or_else(|| client.default_namespace().to_owned()),
        name: options.lease_name.clone(),
        identity: options.identity.clone().unwrap_or_else(default_identity),
        duration: options.lease_duration,
        renew_deadline: options.renew_deadline.min(options.lease_duration),
        retry_period: options.retry_period,
    };
    let (reports, reports_receiver) = watch::channel(ExportStatusReport {
        identity: settings.identity.clone(),
        ..ExportStatusReport::default()
    });
    let reports = Arc::new(reports);
    let leadership = Leadership::new();
    let stop = CancellationToken::new();
    let (done, lease_done) = watch::channel(false);
    let lease = {
        let elector = Elector::new(client.clone(), settings);
        let leadership = leadership.clone();
        let reports = reports.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            let report_leader = |leader: bool| {
                reports.send_if_modified(|report| {
                    let changed = report.leader != leader;
                    report.leader = leader;
                    changed
                });
            };
            super::lease::run(elector, leadership, report_leader, stop).await;
            let _ = done.send(true);
        })
    };
    let imports = imports.map(|imports| {
        super::imports::start(
            imports,
            client.clone(),
            (snapshots.clone(), names_answered),
            leadership.clone(),
            retry,
        )
    });
    let (peer_imports, peer_imports_receiver) = watch::channel(Arc::default());
    let writer = write_status.then(|| {
        AbortOnDropHandle::new(tokio::spawn(
            Writer {
                client,
                leadership,
                reports,
                written: HashMap::new(),
            }
            .run(snapshots, peer_imports_receiver, retry),
        ))
    });
    StatusTasks {
        _lease: AbortOnDropHandle::new(lease),
        _writer: writer,
        imports,
        peer_imports,
        reports: reports_receiver,
        stop,
        lease_done,
    }
}

struct Writer {
    client: Client,
    leadership: Arc<Leadership>,
    reports: Arc<watch::Sender<ExportStatusReport>>,
    /// Exports written, by the resource version the write was based on:
    /// while a snapshot still shows that version, the write is not in it yet.
    written: HashMap<ServiceKey, String>,
}

impl Writer {
    async fn run(
        mut self,
        mut snapshots: watch::Receiver<Arc<SourceSnapshot>>,
        mut peer_imports: watch::Receiver<Arc<PeerImports>>,
        retry: Retry,
    ) {
        let mut leader = self.leadership.subscribe();
        let mut backoff = Backoff::new(retry);
        loop {
            let snapshot = snapshots.borrow_and_update().clone();
            let peers = peer_imports.borrow_and_update().clone();
            leader.borrow_and_update();
            let retry_at = if self.leadership.is_leader() {
                let failed = self.evaluate(&snapshot, &peers).await;
                self.reports.send_if_modified(|report| {
                    let changed = report.evaluated != snapshot.generation;
                    report.evaluated = snapshot.generation;
                    changed
                });
                if failed {
                    Some(Instant::now() + backoff.next_delay())
                } else {
                    backoff.reset();
                    None
                }
            } else {
                self.written.clear();
                None
            };
            tokio::select! {
                changed = snapshots.changed() => if changed.is_err() { return },
                changed = leader.changed() => if changed.is_err() { return },
                changed = peer_imports.changed() => if changed.is_err() { return },
                () = crate::backoff::sleep_until(retry_at) => {}
            }
        }
    }

    /// Writes what changed for the snapshot; true when a write failed and
    /// should be tried again.
    async fn evaluate(&mut self, snapshot: &SourceSnapshot, peers: &PeerImports) -> bool {
        let Some(exports) = snapshot.local_exports.clone() else {
            return false;
        };
        let local_synced = snapshot
            .clusters
            .iter()
            .any(|c| c.source == ClusterSource::Local.to_string() && c.state == SyncState::Synced);
        if !snapshot.settled || !local_synced {
            return false;
        }
        let Some(local) = snapshot
            .local
            .as_deref()
            .and_then(|id| ClusterId::new(id).ok())
        else {
            return false;
        };
        let resource = match export_resource(&exports) {
            Ok(resource) => resource,
            Err(error) => {
                tracing::warn!(%error, "export status not written");
                return false;
            }
        };
        // The usable set (invalid objects left out, so one bad object does
        // not stop Conflict from being judged for every other service).
        let merged = snapshot.usable_merged.clone();
        let mut failed = false;
        let present: HashSet<&ServiceKey> = exports.exports.iter().map(|e| &e.key).collect();
        self.written.retain(|key, _| present.contains(key));
        for export in &exports.exports {
            if let Some(base) = self.written.get(&export.key) {
                if Some(base) == export.resource_version.as_ref() {
                    continue;
                }
                self.written.remove(&export.key);
            }
            let wanted = wanted(export, &local, merged.as_deref(), Some(peers));
            let Some(conditions) = updated_conditions(
                &export.conditions,
                &wanted,
                export.generation,
                Timestamp::now(),
            ) else {
                continue;
            };
            if !self.leadership.is_leader() {
                return false;
            }
            match self.write(&resource, export, conditions).await {
                Ok(()) => {
                    self.count(true);
                    if let Some(version) = &export.resource_version {
                        self.written.insert(export.key.clone(), version.clone());
                    }
                    let summary: Vec<String> = wanted
                        .set
                        .iter()
                        .map(|c| format!("{}={} ({})", c.type_, c.status, c.reason))
                        .collect();
                    tracing::info!(export = %export.key, conditions = %summary.join(", "),
                        "export status written");
                }
                Err(StatusError::Write {
                    source: kube::Error::Api(status),
                    ..
                }) if status.is_not_found() => {
                    // Deleted meanwhile: the watch will say so.
                }
                Err(StatusError::Write {
                    source: kube::Error::Api(status),
                    export,
                }) if status.is_conflict() => {
                    // A newer version is on its way through the watch.
                    self.count(false);
                    failed = true;
                    tracing::debug!(%export, "export status write conflicted; trying again");
                }
                Err(error) => {
                    self.count(false);
                    failed = true;
                    tracing::warn!(%error, "export status not written");
                }
            }
        }
        failed
    }

    fn count(&self, ok: bool) {
        self.reports.send_modify(|report| {
            if ok {
                report.writes += 1;
            } else {
                report.failed_writes += 1;
            }
        });
    }

    /// Server-side applies the conditions Strait owns (`Valid`, `Conflict`
    /// and `Ready`) to the export's status, as field manager `strait`.
    /// `status.conditions` is a `listType=map` list keyed by `type` in the
    /// MCS CRDs, so other controllers' conditions are theirs and stay; a
    /// condition Strait owned and no longer applies is removed by the
    /// server. Forced: these three conditions are Strait's to say.
    async fn write(
        &self,
        resource: &ApiResource,
        export: &LocalExport,
        conditions: Vec<serde_json::Value>,
    ) -> Result<(), StatusError> {
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), &export.key.namespace, resource);
        let ours: Vec<serde_json::Value> = conditions
            .into_iter()
            .filter(|c| {
                c.get("type")
                    .and_then(serde_json::Value::as_str)
                    .is_some_and(|t| OWNED_CONDITIONS.contains(&t))
            })
            .collect();
        let object = serde_json::json!({
            "apiVersion": resource.api_version,
            "kind": resource.kind,
            "metadata": {"name": export.key.name, "namespace": export.key.namespace},
            "status": {"conditions": ours},
        });
        let params = PatchParams::apply(FIELD_MANAGER).force();
        tokio::time::timeout(
            WRITE_TIMEOUT,
            api.patch_status(&export.key.name, &params, &Patch::Apply(&object)),
        )
        .await
        .unwrap_or_else(|elapsed| Err(kube::Error::Service(Box::new(elapsed))))
        .map(|_| ())
        .map_err(|source| StatusError::Write {
            export: export.key.clone(),
            source,
        })
    }
}

/// The ServiceExport resource in the version the local server offers.
fn export_resource(exports: &LocalExports) -> Result<ApiResource, StatusError> {
    let Some((group, version)) = exports.api_version.split_once('/') else {
        return Err(StatusError::ApiVersion(exports.api_version.clone()));
    };
    Ok(ApiResource {
        group: group.to_owned(),
        version: version.to_owned(),
        api_version: exports.api_version.clone(),
        kind: Kind::ServiceExport.name().to_owned(),
        plural: Kind::ServiceExport.resource().to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_export_resource_is_in_the_offered_version() {
        let exports = |api_version: &str| LocalExports {
            api_version: api_version.to_owned(),
            exports: Vec::new(),
        };
        let resource =
            export_resource(&exports("multicluster.x-k8s.io/v1alpha1")).expect("a group/version");
        assert_eq!(resource.group, "multicluster.x-k8s.io");
        assert_eq!(resource.version, "v1alpha1");
        assert_eq!(resource.plural, "serviceexports");
        let error = export_resource(&exports("v1")).expect_err("no group");
        assert_eq!(
            error.to_string(),
            "serviceexport api version \"v1\" is not group/version"
        );
    }

    #[test]
    fn the_renew_deadline_defaults_below_the_lease_duration() {
        let options = ExportStatusOptions::default();
        assert!(options.renew_deadline < options.lease_duration);
        assert!(options.retry_period < options.renew_deadline);
    }
}
