//! The Kubernetes source: the same objects as the file source, read live
//! from the API servers of the cluster set with kube-rs watchers, and handed
//! to the one translation (`translate_cluster` + `assemble`).
//!
//! One task per cluster discovers which versions of the MCS and About APIs
//! the server offers and watches `ClusterProperty`, `ServiceExport`,
//! `Service`, `EndpointSlice` (and in the local cluster `ServiceImport`); a
//! hub task owns every cluster's objects, debounces changes and publishes an
//! immutable [`SourceSnapshot`] on a watch channel. A cluster whose API is
//! unreachable keeps its last known objects for `staleAfter`, then its
//! backends are dropped until it resyncs.
//!
//! | module | owns |
//! |---|---|
//! | `client` | where clusters come from, building their clients, API discovery |
//! | `connect` | the HTTP stack of every client: timeouts, keepalive, gzip, retries |
//! | `store` | one cluster's current objects and their sync state |
//! | `watch` | the per-cluster task and its per-kind watchers |
//! | `secrets` | the remote-cluster Secrets of the local cluster |
//! | `hub` | all clusters, debouncing, TTL, translation into snapshots |
//! | `report` | what the cluster tasks and the Secret watcher tell the hub |
//!
//! This module only reads: what Strait writes to the local cluster (export
//! status, imports, the Lease, `strait link`) is the [`crate::controller`]'s,
//! which follows these snapshots.

mod arrived;
pub(crate) mod bearer;
mod bounded;
pub(crate) mod client;
pub(crate) mod connect;
mod hub;
pub(crate) mod kubeconfig;
mod report;
mod secrets;
mod slim;
mod store;
mod stored;
mod translation;
mod watch;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use tokio::sync::watch as channel;
use tokio::task::JoinHandle;

use crate::backoff::Retry;
use crate::diagnostics::{Diagnostic, Diagnostics};
use crate::discovery::export_validity::LocalExport;
use crate::model::ClusterSet;

use super::files::Loaded;
use super::objects::{ABOUT_GROUP, MCS_GROUP};
use super::translate::TranslateOptions;

pub use client::ClusterSource;

/// How long watch failures are ridden out before a cluster that had
/// synced counts as unsynced: an API server restart or a load balancer
/// reset fits well within it.
pub const DEFAULT_OUTAGE_GRACE: Duration = Duration::from_secs(30);

/// Label marking a Secret that holds a remote cluster's kubeconfig.
pub const REMOTE_CLUSTER_LABEL: &str = "strait.dev/remote-cluster";
/// The key of a remote-cluster Secret's data that holds the kubeconfig.
pub const REMOTE_KUBECONFIG_KEY: &str = "kubeconfig";
/// The environment variable naming the gateway's own namespace.
pub const POD_NAMESPACE_ENV: &str = "POD_NAMESPACE";
/// The environment variable naming the gateway's pod: its identity as the
/// holder of the export status Lease.
pub const POD_NAME_ENV: &str = "POD_NAME";

/// Where in a cluster the source uses a resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum AccessScope {
    /// Every namespace (or a cluster-scoped resource), in each cluster of
    /// the set; ServiceImports only in the local cluster.
    Cluster,
    /// The remote-cluster Secret namespace of the local cluster only.
    SecretNamespace,
    /// The namespace of the export status Lease (the gateway's own, from
    /// `POD_NAMESPACE`), in the local cluster only.
    LeaseNamespace,
}

/// One API resource the source uses and the verbs it needs on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResourceAccess {
    pub scope: AccessScope,
    /// The API group; empty for the core group.
    pub group: &'static str,
    /// The resource name (plural), as RBAC rules spell it.
    pub resource: &'static str,
    pub verbs: &'static [&'static str],
}

/// What a kube-rs watcher asks for: a list, then watches from its
/// resource version (no `get`).
pub const WATCH_VERBS: &[&str] = &["list", "watch"];

/// Every resource the Kubernetes source uses, and how: what the gateway's
/// RBAC must grant (deploy/rbac.yaml; tests/deploy checks it). A remote
/// cluster's credentials need the `Cluster` entries except ServiceImports.
/// The watchers start exactly these (a unit test below keeps them in step).
pub const WATCHED_RESOURCES: &[ResourceAccess] = &[
    ResourceAccess {
        scope: AccessScope::Cluster,
        group: ABOUT_GROUP,
        resource: "clusterproperties",
        verbs: WATCH_VERBS,
    },
    ResourceAccess {
        scope: AccessScope::Cluster,
        group: MCS_GROUP,
        resource: "serviceexports",
        verbs: WATCH_VERBS,
    },
    ResourceAccess {
        scope: AccessScope::Cluster,
        group: MCS_GROUP,
        resource: "serviceimports",
        verbs: WATCH_VERBS,
    },
    ResourceAccess {
        scope: AccessScope::Cluster,
        group: "",
        resource: "services",
        verbs: WATCH_VERBS,
    },
    ResourceAccess {
        scope: AccessScope::Cluster,
        group: "discovery.k8s.io",
        resource: "endpointslices",
        verbs: WATCH_VERBS,
    },
    // Remote-cluster kubeconfigs, labelled strait.dev/remote-cluster: "true".
    ResourceAccess {
        scope: AccessScope::SecretNamespace,
        group: "",
        resource: "secrets",
        verbs: WATCH_VERBS,
    },
];

/// Everything the Kubernetes source needs.
#[derive(Debug, Clone)]
pub struct KubeOptions {
    /// The local cluster's kubeconfig; `None` infers it as kubectl does
    /// (`KUBECONFIG`, `~/.kube/config`, then the in-cluster service account).
    pub local_kubeconfig: Option<PathBuf>,
    /// Kubeconfig files of remote clusters.
    pub remote_kubeconfigs: Vec<PathBuf>,
    /// Watch remote-cluster Secrets in the local cluster.
    pub remote_secrets: bool,
    /// Namespace of those Secrets (default: `POD_NAMESPACE`, else the local
    /// kubeconfig's namespace).
    pub remote_secret_namespace: Option<String>,
    pub translate: TranslateOptions,
    /// How long an unreachable cluster keeps its last known state.
    pub stale_after: Duration,
    /// Settle time between a change and the snapshot that includes it.
    pub debounce: Duration,
    pub retry: Retry,
    /// Server-side timeout of one watch request; a silent connection is
    /// noticed within this plus a few seconds, and no response may stay
    /// silent for longer than this plus 10 s (the clients' read timeout).
    pub watch_timeout: Duration,
    /// How long watch failures after a kind's first complete list are
    /// ridden out (resumed from the resource version, the cluster still
    /// synced) before the cluster counts as unsynced and is relisted.
    pub outage_grace: Duration,
    /// How often the served API versions are checked again.
    pub rediscover_every: Duration,
    /// Publish the local cluster's ServiceExports, with whether each can
    /// be exported, in the snapshots: what the export status writer reads.
    pub local_exports: bool,
    /// The field manager of a previous MCS implementation whose local
    /// objects the import reconciler takes over (`kube.adoptImports`):
    /// their managers are kept when they arrive, so it can tell them apart.
    pub adopt_from: Option<String>,
    /// Clusters whose exported state comes from their feed over the tunnel
    /// (`kube.peers`): the gateway follows them and reports to the hub
    /// ([`KubeHandle::peer_reports`]).
    pub peers: Vec<crate::feed::FeedPeer>,
    /// Follow the peers that peer Secrets name (a gateway does); a command
    /// that reads the set once reports them as warnings instead.
    pub follow_peer_secrets: bool,
}

impl Default for KubeOptions {
    /// The local cluster only (its kubeconfig inferred as kubectl does), its
    /// remote-cluster Secrets watched, and `gateway.yaml`'s default timings.
    fn default() -> Self {
        Self {
            local_kubeconfig: None,
            remote_kubeconfigs: Vec::new(),
            remote_secrets: true,
            remote_secret_namespace: None,
            translate: TranslateOptions::default(),
            stale_after: Duration::from_secs(300),
            debounce: Duration::from_millis(250),
            retry: Retry::default(),
            watch_timeout: Duration::from_secs(60),
            outage_grace: DEFAULT_OUTAGE_GRACE,
            rediscover_every: Duration::from_secs(60),
            local_exports: false,
            adopt_from: None,
            peers: Vec::new(),
            follow_peer_secrets: true,
        }
    }
}

/// Why the source could not start.
#[derive(Debug, thiserror::Error)]
pub enum KubeError {
    #[error(
        "cannot find the local cluster's configuration (KUBECONFIG, ~/.kube/config or in-cluster): {0}"
    )]
    Infer(#[from] kube::config::InferConfigError),
    #[error("cannot read kubeconfig {}: {source}", path.display())]
    Kubeconfig {
        path: PathBuf,
        source: kube::config::KubeconfigError,
    },
    #[error("cannot build a client for {what}: {source}")]
    Client { what: String, source: kube::Error },
    #[error("refused kubeconfig {what}: {source}")]
    Unsafe {
        what: String,
        source: kubeconfig::UnsafeKubeconfig,
    },
}

/// Why a one-shot load failed.
#[derive(Debug, thiserror::Error)]
pub enum KubeLoadError {
    #[error("{0}")]
    Start(#[from] KubeError),
    #[error("clusters not synced after {}: {}", humantime::format_duration(*waited), pending.join("; "))]
    NotSynced {
        waited: Duration,
        pending: Vec<String>,
    },
    #[error("{0}")]
    Invalid(Diagnostics),
}

/// Where one cluster stands with its API server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SyncState {
    /// Not synced yet since the cluster was added; it has no objects.
    Connecting,
    /// Every watched kind is listed and its watch is running.
    Synced,
    /// The API failed; the last known objects are still used.
    Unsynced,
    /// Unsynced for longer than `staleAfter`: its backends are dropped.
    Stale,
}

/// One cluster's sync state, for `/metrics`, `/debug/clusters` and errors.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterStatus {
    /// Where the cluster comes from: `local`, `kubeconfig PATH`, `secret NS/NAME`.
    pub source: String,
    /// The cluster id, once its `cluster.clusterset.k8s.io` property was read.
    pub id: Option<String>,
    pub state: SyncState,
    /// When the state last changed.
    pub since: String,
    /// When the cluster was last fully synced.
    pub last_synced: Option<String>,
    pub last_error: Option<String>,
    /// How often the cluster went stale.
    pub stale_count: u64,
    /// Failed list and watch requests, ridden out or not, since the
    /// cluster was added.
    pub watch_errors: u64,
    /// How often the cluster's objects were translated: once per change of
    /// its own objects or state, or of the set's exported services.
    pub translations: u64,
    /// Objects held, by kind.
    pub objects: std::collections::BTreeMap<String, usize>,
    /// The API versions in use, as `group/version` by kind.
    pub versions: std::collections::BTreeMap<String, String>,
    /// A peer read from its feed (`kube.peers`), not its API server: the
    /// gateway's follower syncs it once the gateway runs.
    pub feed: bool,
}

impl ClusterStatus {
    /// The cluster's name in metrics: its id when known, else its source.
    pub fn label(&self) -> &str {
        self.id.as_deref().unwrap_or(&self.source)
    }
}

/// What the source knows at one moment.
#[derive(Debug, Clone)]
pub struct SourceSnapshot {
    /// Increases with every snapshot.
    pub generation: u64,
    /// Increases when the cluster set may have changed (not on sync-state changes alone).
    pub set_revision: u64,
    /// Clusters translated (whole or their changed services) since the
    /// source started, removed clusters' included.
    pub translations: u64,
    /// Increases when one of Strait's own import objects in the local
    /// cluster changed (a derived Service, a slice it manages): they feed
    /// no cluster set, but the recorded import ports and remote pods'
    /// addresses the routes read from `local_imports`.
    pub imports_revision: u64,
    /// The cluster set, or every finding when the objects are invalid.
    pub set: Result<Arc<ClusterSet>, Diagnostics>,
    pub warnings: Vec<Diagnostic>,
    pub clusters: Vec<ClusterStatus>,
    /// The local cluster's id, once read.
    pub local: Option<String>,
    /// Every known cluster has synced or failed at least once, and the
    /// remote-cluster Secrets have been listed (or failed).
    pub settled: bool,
    /// The remote-cluster Secret watch, when there is one.
    pub remote_secrets: Option<SecretsStatus>,
    /// The local cluster's ServiceExports, when export status is written
    /// and the local cluster has been translated.
    pub local_exports: Option<Arc<LocalExports>>,
    /// The cluster set built from every object that translated, each
    /// invalid object (or cluster) left out, so one bad object stops only
    /// itself: the routes, export status and the import reconciler work
    /// from it. `None` until the clusters have been assembled once.
    pub usable_set: Option<Arc<ClusterSet>>,
    /// `usable_set` merged (KEP-1645), once per set revision for every
    /// reader: the routes, export status and the import reconciler.
    pub usable_merged: Option<Arc<crate::merge::MergedSet>>,
    /// What the local cluster holds for its imports.
    pub local_imports: Option<Arc<LocalImports>>,
}

/// The local cluster's imports as the server holds them.
#[derive(Debug, Clone)]
pub struct LocalImports {
    /// The ServiceImport API version the local server offers, as
    /// `multicluster.x-k8s.io/VERSION`.
    pub api_version: String,
    /// ServiceImports, the derived Services and slices Strait created, and
    /// the gateway pods (namespaces are read by the reconciler itself).
    pub observed: crate::discovery::observed::Observed,
}

/// The local cluster's ServiceExports as the export status writer needs them.
#[derive(Debug, Clone)]
pub struct LocalExports {
    /// The ServiceExport API version the local server offers, as
    /// `multicluster.x-k8s.io/VERSION`.
    pub api_version: String,
    pub exports: Vec<LocalExport>,
}

/// The watch of remote-cluster Secrets.
#[derive(Debug, Clone, Serialize)]
pub struct SecretsStatus {
    pub namespace: String,
    pub listed: bool,
    pub error: Option<String>,
}

impl SourceSnapshot {
    /// Every cluster is synced and the Secrets, if watched, listed.
    pub fn all_synced(&self) -> bool {
        self.settled
            && self.remote_secrets.as_ref().is_none_or(|s| s.listed)
            && self.clusters.iter().all(|c| c.state == SyncState::Synced)
    }

    /// Every cluster read from an API server has synced (and the
    /// remote-cluster Secrets are listed): what a gateway waits for before
    /// it starts. The peers read from their feed sync only once it runs.
    pub fn api_synced(&self) -> bool {
        self.usable_set.is_some()
            && !self.clusters.is_empty()
            && self.remote_secrets.as_ref().is_none_or(|s| s.listed)
            && self
                .clusters
                .iter()
                .all(|c| c.feed || c.state == SyncState::Synced)
    }

    /// The view served at `/debug/clusters`.
    pub fn clusters_json(&self) -> serde_json::Value {
        serde_json::json!({
            "generation": self.generation,
            "settled": self.settled,
            "valid": self.set.is_ok(),
            "errors": match &self.set {
                Ok(_) => Vec::new(),
                Err(diagnostics) => diagnostics.errors().map(ToString::to_string).collect(),
            },
            "clusters": self.clusters,
            "remoteSecrets": self.remote_secrets,
        })
    }
}

/// The running source; dropping it stops every watcher.
pub struct KubeSource {
    hub: JoinHandle<()>,
    /// The hub's queue, for the peers' feed followers.
    reports: tokio::sync::mpsc::Sender<report::HubMessage>,
    /// The peers to follow by their feed (`kube.peers` and peer Secrets),
    /// as the hub names them now.
    peers: tokio::sync::watch::Receiver<Arc<Vec<crate::feed::FeedPeer>>>,
    /// The local cluster's client, for the controller that writes there.
    local: kube::Client,
}

impl std::fmt::Debug for KubeSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeSource").finish_non_exhaustive()
    }
}

impl Drop for KubeSource {
    fn drop(&mut self) {
        self.hub.abort();
    }
}

impl KubeSource {
    /// Builds the clients of the configured clusters and starts watching.
    /// Errors only for configuration that can never work (no local cluster
    /// config, an unreadable kubeconfig file); unreachable servers are
    /// retried and reported in the snapshots.
    pub async fn start(
        options: KubeOptions,
    ) -> Result<(KubeSource, channel::Receiver<Arc<SourceSnapshot>>), KubeError> {
        let local =
            client::local_client(options.local_kubeconfig.as_deref(), options.watch_timeout)
                .await?;
        let mut remotes = Vec::new();
        for path in &options.remote_kubeconfigs {
            remotes.push((
                ClusterSource::Kubeconfig(path.clone()),
                client::file_client(path, options.watch_timeout).await?,
            ));
        }
        let secret_namespace = options
            .remote_secret_namespace
            .clone()
            .or_else(|| std::env::var(POD_NAMESPACE_ENV).ok())
            .unwrap_or_else(|| local.default_namespace().to_owned());
        let (sender, receiver) = channel::channel(Arc::new(hub::empty_snapshot()));
        let (reports, queue) = tokio::sync::mpsc::channel(hub::QUEUE);
        let (peer_links, peers) = tokio::sync::watch::channel(Arc::new(Vec::new()));
        let hub = tokio::spawn(hub::run(hub::HubStart {
            options,
            local: local.clone(),
            remotes,
            secret_namespace,
            snapshots: sender,
            sender: reports.clone(),
            queue,
            peer_links,
        }));
        Ok((
            KubeSource {
                hub,
                reports,
                peers,
                local,
            },
            receiver,
        ))
    }
}

/// Where a peer's feed follower reports to the hub: each batch applied,
/// and each failure to read the feed.
#[derive(Clone)]
pub struct PeerReports {
    sender: tokio::sync::mpsc::Sender<report::HubMessage>,
}

impl PeerReports {
    /// `cluster`'s feed synced a batch: its state now and the services it
    /// changed. Waits while the hub's queue is full.
    pub async fn synced(
        &self,
        cluster: crate::model::ClusterId,
        state: Arc<crate::feed::PeerState>,
        changed: Vec<crate::model::ServiceKey>,
    ) {
        let report = report::PeerReport::Synced { state, changed };
        // The hub outlives the gateway's tasks: a send fails only at exit.
        let _ = self
            .sender
            .send(report::HubMessage::Peer { cluster, report })
            .await;
    }

    /// `cluster`'s feed could not be read, or broke a rule.
    pub async fn failed(&self, cluster: crate::model::ClusterId, error: String) {
        let report = report::PeerReport::Failed(error);
        let _ = self
            .sender
            .send(report::HubMessage::Peer { cluster, report })
            .await;
    }
}

/// A running source and its snapshots, cheap to clone; the gateway keeps
/// one in its options.
#[derive(Clone)]
pub struct KubeHandle {
    source: Arc<KubeSource>,
    snapshots: channel::Receiver<Arc<SourceSnapshot>>,
}

impl std::fmt::Debug for KubeHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeHandle")
            .field("generation", &self.snapshots.borrow().generation)
            .finish_non_exhaustive()
    }
}

impl KubeHandle {
    pub fn new(source: KubeSource, snapshots: channel::Receiver<Arc<SourceSnapshot>>) -> Self {
        Self {
            source: Arc::new(source),
            snapshots,
        }
    }

    /// Starts a source and wraps it.
    pub async fn start(options: KubeOptions) -> Result<Self, KubeError> {
        let (source, snapshots) = KubeSource::start(options).await?;
        Ok(Self::new(source, snapshots))
    }

    /// The peers to follow by their feed (`kube.peers` and peer
    /// Secrets), changing as the admin adds, changes and removes them.
    pub fn peers(&self) -> tokio::sync::watch::Receiver<Arc<Vec<crate::feed::FeedPeer>>> {
        self.source.peers.clone()
    }

    /// Where the followers of `kube.peers`' feeds report.
    pub fn peer_reports(&self) -> PeerReports {
        PeerReports {
            sender: self.source.reports.clone(),
        }
    }

    /// The latest snapshot.
    pub fn snapshot(&self) -> Arc<SourceSnapshot> {
        self.snapshots.borrow().clone()
    }

    /// A receiver of every future snapshot.
    pub fn subscribe(&self) -> channel::Receiver<Arc<SourceSnapshot>> {
        self.snapshots.clone()
    }

    /// The local cluster's client.
    pub fn local_client(&self) -> kube::Client {
        self.source.local.clone()
    }

    /// Waits up to `timeout` for a snapshot that satisfies `done`, and
    /// returns the latest snapshot either way.
    pub async fn wait_for(
        &self,
        timeout: Duration,
        done: impl FnMut(&Arc<SourceSnapshot>) -> bool,
    ) -> Arc<SourceSnapshot> {
        let mut receiver = self.snapshots.clone();
        let _ = tokio::time::timeout(timeout, receiver.wait_for(done)).await;
        self.snapshot()
    }
}

/// A cluster set read once from the API servers.
#[derive(Debug)]
pub struct KubeLoaded {
    /// The set and its warnings, as the file source returns them.
    pub loaded: Loaded,
    /// The local cluster's id.
    pub local: Option<String>,
    pub clusters: Vec<ClusterStatus>,
    /// What the local cluster holds for its imports.
    pub local_imports: Option<Arc<LocalImports>>,
    /// The local cluster's ServiceExports with their status, when
    /// `options.local_exports` asked for them.
    pub local_exports: Option<Arc<LocalExports>>,
}

/// Reads the cluster set once: starts the source, waits until every cluster
/// is synced (at most `timeout`), and returns the set like the file source.
pub async fn load_once(
    options: KubeOptions,
    timeout: Duration,
) -> Result<KubeLoaded, KubeLoadError> {
    let handle = KubeHandle::start(options).await?;
    let snapshot = handle
        .wait_for(timeout, |snapshot| snapshot.all_synced())
        .await;
    if !snapshot.all_synced() {
        let mut pending: Vec<String> = snapshot
            .clusters
            .iter()
            .filter(|c| c.state != SyncState::Synced)
            .map(|c| match &c.last_error {
                Some(error) => format!("{} ({}: {error})", c.label(), c.source),
                None => format!("{} ({})", c.label(), c.source),
            })
            .collect();
        if let Some(secrets) = snapshot.remote_secrets.as_ref().filter(|s| !s.listed) {
            pending.push(match &secrets.error {
                Some(error) => format!("remote-cluster Secrets in {} ({error})", secrets.namespace),
                None => format!("remote-cluster Secrets in {}", secrets.namespace),
            });
        }
        return Err(KubeLoadError::NotSynced {
            waited: timeout,
            pending,
        });
    }
    match &snapshot.set {
        Ok(set) => Ok(KubeLoaded {
            loaded: Loaded {
                set: ClusterSet::clone(set),
                warnings: snapshot.warnings.clone(),
            },
            local: snapshot.local.clone(),
            clusters: snapshot.clusters.clone(),
            local_imports: snapshot.local_imports.clone(),
            local_exports: snapshot.local_exports.clone(),
        }),
        // Each invalid object left itself out, as the gateway leaves it
        // out: one tenant's mistake does not switch off the operator's
        // view of every other service. Its finding is told as a warning.
        Err(diagnostics) => match &snapshot.usable_set {
            Some(usable) => Ok(KubeLoaded {
                loaded: Loaded {
                    set: ClusterSet::clone(usable),
                    warnings: diagnostics.0.iter().cloned().map(left_out).collect(),
                },
                local: snapshot.local.clone(),
                clusters: snapshot.clusters.clone(),
                local_imports: snapshot.local_imports.clone(),
                local_exports: snapshot.local_exports.clone(),
            }),
            None => Err(KubeLoadError::Invalid(diagnostics.clone())),
        },
    }
}

/// An error about an object the set left out, told as a warning that
/// says so.
fn left_out(mut finding: Diagnostic) -> Diagnostic {
    if finding.is_error() {
        finding.severity = crate::diagnostics::Severity::Warning;
        finding
            .message
            .push_str(" (left out, as a running gateway leaves it out)");
    }
    finding
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use k8s_openapi::api::core::v1::{Secret, Service};
    use k8s_openapi::api::discovery::v1::EndpointSlice;
    use kube::Resource;
    use kube::core::ApiResource;

    use super::client::Kind;
    use super::*;

    #[test]
    fn watched_resources_are_what_the_watchers_start() {
        let listed: Vec<(&str, &str)> = WATCHED_RESOURCES
            .iter()
            .filter(|a| a.scope == AccessScope::Cluster)
            .map(|a| (a.group, a.resource))
            .collect();
        let watched: Vec<(&str, &str)> = Kind::ALL
            .iter()
            .map(|kind| (kind.group(), kind.resource()))
            .collect();
        assert_eq!(
            listed.iter().collect::<BTreeSet<_>>(),
            watched.iter().collect::<BTreeSet<_>>(),
            "WATCHED_RESOURCES and the kinds the cluster watchers start differ"
        );
        assert_eq!(listed.len(), watched.len(), "no kind is listed twice");

        // The core kinds are watched through their k8s-openapi types.
        for (kind, resource) in [
            (Kind::Service, ApiResource::erase::<Service>(&())),
            (
                Kind::EndpointSlice,
                ApiResource::erase::<EndpointSlice>(&()),
            ),
        ] {
            assert_eq!(
                (kind.group(), kind.resource()),
                (resource.group.as_str(), resource.plural.as_str()),
                "{kind:?}"
            );
        }

        // The remote-cluster Secrets, watched in one namespace.
        let secrets: Vec<(&str, &str)> = WATCHED_RESOURCES
            .iter()
            .filter(|a| a.scope == AccessScope::SecretNamespace)
            .map(|a| (a.group, a.resource))
            .collect();
        assert_eq!(
            secrets,
            [(&*Secret::group(&()), &*Secret::plural(&()))],
            "the secret watcher reads Secrets and nothing else"
        );

        // Every resource is read by a kube-rs watcher: list, then watch.
        for access in WATCHED_RESOURCES {
            assert_eq!(access.verbs, WATCH_VERBS, "{}", access.resource);
        }
    }
}
