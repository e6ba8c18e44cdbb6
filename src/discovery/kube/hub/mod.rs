//! The hub: owns every cluster's store and sync state, starts and stops
//! cluster tasks (remote-cluster Secrets come and go), applies their reports,
//! and publishes a [`SourceSnapshot`] (at once after a quiet spell, then at
//! most once per `reloadDebounce`): the objects
//! of every cluster that has synced at least once, through
//! `translate_cluster` and `assemble` exactly as the file source does
//! (`translation` says which objects, and how a change of a few services
//! is translated alone). A cluster unsynced for longer than `staleAfter`
//! is stale: its EndpointSlices are left out, so it has no backends, until
//! it resyncs.

mod local;
mod peers;
mod secrets;

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Arc;

use kube::Client;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tokio_util::task::AbortOnDropHandle;

use super::client::{ClusterSource, Kind};
use super::report::{ClusterReport, HubMessage, SecretReport};
use super::secrets::watch_secrets;
use super::store::{ClusterStore, ObjectKey};
use super::translation::{Exported, Inputs, Translation, translate};
use super::watch::{Connect, TaskId, run_cluster};
use super::{ClusterStatus, KubeOptions, SecretsStatus, SourceSnapshot, SyncState};
use super::{LocalExports, LocalImports};
use crate::backoff::sleep_until;
use crate::diagnostics::{Diagnostic, Diagnostics};
use crate::discovery::export_validity::{LocalExport, Validity};
use crate::discovery::objects::KubeObject;
use crate::discovery::translate::assemble;
use crate::merge::{MergedSet, merge_changed, merge_reusing};
use crate::model::{ClusterId, ClusterSet, ServiceKey};

/// Reports queued between the cluster tasks and the hub.
pub(super) const QUEUE: usize = 1024;

/// What the hub starts with.
pub(super) struct HubStart {
    pub(super) options: KubeOptions,
    pub(super) local: Client,
    pub(super) remotes: Vec<(ClusterSource, Client)>,
    pub(super) secret_namespace: String,
    pub(super) snapshots: watch::Sender<Arc<SourceSnapshot>>,
    /// The hub's queue: every cluster task, the Secret watcher and the
    /// peers' followers send on it.
    pub(super) sender: mpsc::Sender<HubMessage>,
    pub(super) queue: mpsc::Receiver<HubMessage>,
    /// Where the peers to follow are told to the gateway.
    pub(super) peer_links: watch::Sender<Arc<Vec<crate::feed::FeedPeer>>>,
}

/// The snapshot before anything is known.
pub(super) fn empty_snapshot() -> SourceSnapshot {
    SourceSnapshot {
        generation: 0,
        set_revision: 0,
        translations: 0,
        imports_revision: 0,
        set: Ok(Arc::new(ClusterSet::default())),
        warnings: Vec::new(),
        clusters: Vec::new(),
        local: None,
        settled: false,
        remote_secrets: None,
        local_exports: None,
        usable_set: None,
        usable_merged: None,
        local_imports: None,
    }
}

fn now_text() -> String {
    k8s_openapi::jiff::Timestamp::now().to_string()
}

struct Entry {
    generation: u64,
    connect: Connect,
    _task: AbortOnDropHandle<()>,
    store: ClusterStore,
    state: SyncState,
    since: Instant,
    since_text: String,
    last_synced: Option<String>,
    last_error: Option<String>,
    stale_count: u64,
    /// Watch and list failures since the cluster was added.
    watch_errors: u64,
    versions: BTreeMap<String, String>,
    /// Bumped by every change of the objects or the state: what the
    /// translation depends on.
    revision: u64,
    /// The last translation, reused while nothing it depends on changed.
    translation: Option<Translation>,
    /// How often the cluster was translated.
    translations: u64,
}

impl Entry {
    /// Applies one report of the cluster's task; true when the objects
    /// changed.
    fn apply(&mut self, source: &ClusterSource, report: ClusterReport) -> bool {
        let changed = self.apply_report(source, report);
        if changed {
            self.revision += 1;
        }
        changed
    }

    fn apply_report(&mut self, source: &ClusterSource, report: ClusterReport) -> bool {
        match report {
            ClusterReport::Resources {
                watched,
                versions,
                missing,
            } => {
                if !missing.is_empty() {
                    let kinds: Vec<&str> = missing.iter().map(|k| Kind::name(*k)).collect();
                    tracing::warn!(cluster = %source, missing = ?kinds,
                        "the API server offers neither v1beta1 nor v1alpha1 of these kinds");
                }
                self.versions = versions;
                self.store.set_watched(watched.into_iter().collect())
            }
            ClusterReport::Event(kind, event) => self.store.apply(kind, *event),
            ClusterReport::Trouble { kind, error } => {
                tracing::debug!(cluster = %source, kind = kind.name(), %error,
                    "watch failed; resuming from its resource version");
                self.watch_errors += 1;
                self.last_error = Some(error);
                false
            }
            ClusterReport::Failed { kind, error } => {
                self.watch_errors += 1;
                self.store.failed(kind);
                tracing::debug!(cluster = %source, %error, "cluster watch failing");
                self.last_error = Some(error);
                false
            }
        }
    }

    fn set_state(&mut self, state: SyncState) {
        self.revision += 1;
        // Whether the cluster is stale decides whether its slices count.
        self.store.all_changed();
        self.state = state;
        self.since = Instant::now();
        self.since_text = now_text();
    }

    /// Follows the store's sync state; true when the cluster set changes
    /// because of it (a cluster joins or its backends return).
    fn update_state(&mut self, source: &ClusterSource, options: &KubeOptions) -> bool {
        let synced = self.store.synced();
        let before = self.state;
        match (before, synced) {
            (SyncState::Synced, false) => {
                self.set_state(SyncState::Unsynced);
                tracing::warn!(
                    cluster = %source,
                    error = self.last_error.as_deref().unwrap_or("unknown"),
                    "cluster API unreachable or failing; keeping its last known state for {}",
                    humantime::format_duration(options.stale_after)
                );
                false
            }
            (SyncState::Connecting | SyncState::Unsynced | SyncState::Stale, true) => {
                self.set_state(SyncState::Synced);
                self.last_synced = Some(self.since_text.clone());
                match before {
                    SyncState::Connecting => tracing::info!(cluster = %source, "cluster synced"),
                    SyncState::Stale => tracing::warn!(
                        cluster = %source,
                        "cluster API is back and resynced; its backends are restored"
                    ),
                    _ => tracing::info!(cluster = %source, "cluster resynced"),
                }
                before != SyncState::Unsynced
            }
            _ => false,
        }
    }
}

struct SecretsState {
    namespace: String,
    listed: bool,
    error: Option<String>,
    _task: AbortOnDropHandle<()>,
}

struct Hub {
    options: Arc<KubeOptions>,
    sender: mpsc::Sender<HubMessage>,
    clusters: BTreeMap<ClusterSource, Entry>,
    /// Connections opened for a changed remote-cluster Secret, not synced
    /// yet: the old connection's objects serve until the new one has
    /// synced (make before break), then it takes the old one's place.
    replacements: BTreeMap<ClusterSource, Entry>,
    next_generation: u64,
    secrets: Option<SecretsState>,
    snapshots: watch::Sender<Arc<SourceSnapshot>>,
    generation: u64,
    set_revision: u64,
    set_dirty: bool,
    set: Result<Arc<ClusterSet>, Diagnostics>,
    /// The set built from every object that translated, invalid objects
    /// left out; `None` only when the clusters could not be assembled.
    usable_set: Option<Arc<ClusterSet>>,
    /// `usable_set` merged, reusing the previous merge of every unchanged
    /// service.
    usable_merged: Option<Arc<MergedSet>>,
    warnings: Vec<Diagnostic>,
    /// Findings of the last build, so each is logged once.
    logged: HashSet<String>,
    /// Whether each local ServiceExport's Service can be exported, from the
    /// last build; `None` until the local cluster is translated, and always
    /// when export status is not written.
    local_validity: Option<BTreeMap<ServiceKey, Validity>>,
    /// The services exported by any cluster of the set, as of the last
    /// build: a cluster's Services and EndpointSlices are translated only
    /// for those. `exports` counts its changes.
    exported: Exported,
    exports: u64,
    /// The services whose export came or went at `exports`: a cluster
    /// translated at the revision before translates only those again.
    exports_changed: BTreeSet<ObjectKey>,
    /// Clusters translated since the hub started.
    translations: u64,
    /// Changes of the local cluster's import objects that fed no set.
    imports_revision: u64,
    /// The last `local_imports`, by the local entry's generation and the
    /// store's event count it was read at: a publication that follows a change in
    /// another cluster reads no local object again.
    local_imports: Option<((u64, u64), Arc<LocalImports>)>,
    /// The clusters of the set `usable_merged` was merged from, each with
    /// where it was read: a peer's feed and its link share an id.
    merged_members: Vec<(ClusterId, String)>,
    /// The peers followed by their feed (`kube.peers` and peer Secrets).
    peers: BTreeMap<ClusterId, peers::PeerEntry>,
    /// Peers no longer followed whose cluster a link through its API server
    /// is still connecting to, since when: each serves its last state
    /// until that link has listed (the way from a feed to a link, without
    /// a gap), at most `staleAfter`.
    departing: BTreeMap<ClusterId, (peers::PeerEntry, Instant)>,
    /// The peer Secrets by name, as read (or why each cannot be followed).
    peer_secrets: BTreeMap<String, Result<Box<crate::feed::FeedPeer>, String>>,
    /// What naming the peers found wrong: bad peer Secrets, a cluster named
    /// twice.
    peer_findings: Vec<crate::diagnostics::Diagnostic>,
    /// The peers for the gateway's followers.
    peer_links: watch::Sender<Arc<Vec<crate::feed::FeedPeer>>>,
}

/// Runs the hub until it is aborted.
pub(super) async fn run(start: HubStart) {
    let (sender, mut receiver) = (start.sender, start.queue);
    let options = Arc::new(start.options);
    let mut hub = Hub {
        options: options.clone(),
        sender: sender.clone(),
        clusters: BTreeMap::new(),
        replacements: BTreeMap::new(),
        next_generation: 0,
        secrets: None,
        snapshots: start.snapshots,
        generation: 0,
        set_revision: 0,
        set_dirty: true,
        set: Ok(Arc::new(ClusterSet::default())),
        usable_set: None,
        usable_merged: None,
        warnings: Vec::new(),
        logged: HashSet::new(),
        local_validity: None,
        exported: Exported::new(),
        exports: 0,
        exports_changed: BTreeSet::new(),
        translations: 0,
        imports_revision: 0,
        local_imports: None,
        merged_members: Vec::new(),
        peers: BTreeMap::new(),
        departing: BTreeMap::new(),
        peer_secrets: BTreeMap::new(),
        peer_findings: Vec::new(),
        peer_links: start.peer_links,
    };
    hub.refresh_peers();
    if options.remote_secrets {
        let task = tokio::spawn(watch_secrets(
            start.local.clone(),
            start.secret_namespace.clone(),
            options.clone(),
            sender,
        ));
        hub.secrets = Some(SecretsState {
            namespace: start.secret_namespace,
            listed: false,
            error: None,
            _task: AbortOnDropHandle::new(task),
        });
    }
    hub.add(ClusterSource::Local, Connect::Client(start.local));
    for (source, client) in start.remotes {
        hub.add(source, Connect::Client(client));
    }
    hub.publish();

    let mut publish_at: Option<Instant> = None;
    let mut published: Option<Instant> = None;
    loop {
        let stale_at = [
            hub.next_stale_deadline(),
            hub.next_peer_stale_deadline(),
            hub.next_departure_deadline(),
        ]
        .into_iter()
        .flatten()
        .min();
        tokio::select! {
            message = receiver.recv() => {
                // The hub holds a sender itself: the channel never closes.
                let Some(message) = message else { return };
                let mut changed = hub.handle(message);
                // What is already queued joins this publication.
                for _ in 0..QUEUE {
                    let Ok(message) = receiver.try_recv() else { break };
                    changed |= hub.handle(message);
                }
                if changed && publish_at.is_none() {
                    publish_at = Some(next_publication(published, options.debounce));
                }
            }
            () = sleep_until(publish_at) => {
                publish_at = None;
                hub.publish();
                published = Some(Instant::now());
            }
            () = sleep_until(stale_at) => {
                hub.expire();
                hub.expire_peers();
                hub.publish();
                published = Some(Instant::now());
            }
        }
    }
}

/// The services exported in one of `before` and `after` but not both.
fn exports_changed(before: &Exported, after: &Exported) -> BTreeSet<ObjectKey> {
    let flat = |exported: &Exported| -> BTreeSet<ObjectKey> {
        exported
            .iter()
            .flat_map(|(namespace, names)| {
                names
                    .iter()
                    .map(move |name| (namespace.clone(), name.clone()))
            })
            .collect()
    };
    let (before, after) = (flat(before), flat(after));
    before.symmetric_difference(&after).cloned().collect()
}

/// When a change seen now is published: at once after a quiet spell, else
/// `debounce` after the last publication. Bounded frequency, as kube-proxy
/// syncs its rules: an isolated change (a pod gone) reaches the routes
/// without waiting, and a burst costs one rebuild per `debounce`.
fn next_publication(published: Option<Instant>, debounce: std::time::Duration) -> Instant {
    let now = Instant::now();
    published.map_or(now, |published| (published + debounce).max(now))
}

impl Hub {
    fn add(&mut self, source: ClusterSource, connect: Connect) {
        let entry = self.connect(&source, connect);
        self.clusters.insert(source, entry);
    }

    /// Starts a cluster's task and returns its entry, not yet placed.
    fn connect(&mut self, source: &ClusterSource, connect: Connect) -> Entry {
        self.next_generation += 1;
        let generation = self.next_generation;
        let task = tokio::spawn(run_cluster(
            TaskId {
                source: source.clone(),
                generation,
            },
            connect.clone(),
            self.options.clone(),
            self.sender.clone(),
        ));
        Entry {
            generation,
            connect,
            _task: AbortOnDropHandle::new(task),
            store: ClusterStore::default(),
            state: SyncState::Connecting,
            since: Instant::now(),
            since_text: now_text(),
            last_synced: None,
            last_error: None,
            stale_count: 0,
            watch_errors: 0,
            versions: BTreeMap::new(),
            revision: 0,
            translation: None,
            translations: 0,
        }
    }

    fn remove(&mut self, source: &ClusterSource) {
        self.replacements.remove(source);
        if let Some(entry) = self.clusters.remove(source) {
            tracing::info!(cluster = %source, "remote cluster removed");
            self.set_dirty |= entry.state != SyncState::Connecting;
        }
    }

    /// Applies one message; true when a snapshot should follow.
    fn handle(&mut self, message: HubMessage) -> bool {
        match message {
            HubMessage::Cluster {
                source,
                generation,
                report,
            } => {
                if self
                    .replacements
                    .get(&source)
                    .is_some_and(|entry| entry.generation == generation)
                {
                    self.replacement_report(&source, report);
                    return true;
                }
                let import_object = self.only_import_object(&source, &report);
                let view_change = self.view_change(&source, &report);
                let Some(entry) = self.clusters.get_mut(&source) else {
                    return false;
                };
                if entry.generation != generation {
                    return false;
                }
                let changed = entry.apply(&source, report);
                // Still published: the import reconciler and the routes'
                // import ports read it.
                self.set_dirty |= changed && !import_object;
                self.imports_revision += u64::from(changed && import_object);
                self.set_dirty |= entry.update_state(&source, &self.options);
                if source.is_local() {
                    self.follow_view(view_change);
                }
                true
            }
            HubMessage::Secrets(report) => {
                self.secret(report);
                true
            }
            HubMessage::Peer { cluster, report } => {
                self.peer_report(&cluster, report);
                true
            }
        }
    }

    fn next_stale_deadline(&self) -> Option<Instant> {
        self.clusters
            .values()
            .filter(|entry| entry.state == SyncState::Unsynced)
            .map(|entry| entry.since + self.options.stale_after)
            .min()
    }

    /// Marks clusters unsynced for longer than `staleAfter` as stale.
    fn expire(&mut self) {
        let now = Instant::now();
        for (source, entry) in &mut self.clusters {
            if entry.state == SyncState::Unsynced && entry.since + self.options.stale_after <= now {
                entry.set_state(SyncState::Stale);
                entry.stale_count += 1;
                self.set_dirty = true;
                tracing::warn!(
                    cluster = %source,
                    error = entry.last_error.as_deref().unwrap_or("unknown"),
                    "cluster API unreachable for {}; its backends are dropped until it resyncs",
                    humantime::format_duration(self.options.stale_after)
                );
            }
        }
    }

    fn publish(&mut self) {
        let started = std::time::Instant::now();
        let rebuilt = self.set_dirty;
        if self.set_dirty {
            self.set_dirty = false;
            self.set_revision += 1;
            self.rebuild();
        }
        self.generation += 1;
        let clusters = self
            .clusters
            .iter()
            .map(|(source, entry)| ClusterStatus {
                source: source.to_string(),
                id: entry.store.cluster_id().map(str::to_owned),
                state: entry.state,
                since: entry.since_text.clone(),
                last_synced: entry.last_synced.clone(),
                last_error: entry.last_error.clone(),
                stale_count: entry.stale_count,
                watch_errors: entry.watch_errors,
                translations: entry.translations,
                objects: entry.store.counts(),
                versions: entry.versions.clone(),
                feed: false,
            })
            .chain(self.peers.values().map(peers::PeerEntry::status))
            .collect();
        let remote_secrets = self.secrets.as_ref().map(|s| SecretsStatus {
            namespace: s.namespace.clone(),
            listed: s.listed,
            error: s.error.clone(),
        });
        let settled = remote_secrets
            .as_ref()
            .is_none_or(|s| s.listed || s.error.is_some())
            && self
                .clusters
                .values()
                .all(|e| e.state != SyncState::Connecting || e.last_error.is_some())
            && self.peers.values().all(peers::PeerEntry::settled);
        let snapshot = SourceSnapshot {
            generation: self.generation,
            set_revision: self.set_revision,
            translations: self.translations,
            imports_revision: self.imports_revision,
            set: self.set.clone(),
            warnings: self.warnings.clone(),
            clusters,
            local: self
                .clusters
                .get(&ClusterSource::Local)
                .and_then(|e| e.store.cluster_id().map(str::to_owned)),
            settled,
            remote_secrets,
            local_exports: self.local_exports(),
            usable_set: self.usable_set.clone(),
            usable_merged: self.usable_merged.clone(),
            local_imports: self.cached_local_imports(),
        };
        self.snapshots.send_replace(Arc::new(snapshot));
        tracing::debug!(
            generation = self.generation,
            set_revision = self.set_revision,
            rebuilt,
            took_ms = started.elapsed().as_millis(),
            "snapshot published"
        );
    }

    /// The local cluster's ServiceExports as the server holds them now, with
    /// the validity the last build found; for the export status writer only.
    fn local_exports(&self) -> Option<Arc<LocalExports>> {
        let validity = self.local_validity.as_ref()?;
        let entry = self.clusters.get(&ClusterSource::Local)?;
        let api_version = entry.versions.get(Kind::ServiceExport.name())?.clone();
        let exports = entry
            .store
            .objects()
            .filter(|(kind, _, _)| *kind == Kind::ServiceExport)
            .filter_map(|(_, (namespace, name), stored)| {
                let KubeObject::ServiceExport(export) = &stored.item.as_ref().ok()?.object else {
                    return None;
                };
                let key = ServiceKey::new(&**namespace, &**name);
                let validity = validity.get(&key)?.clone();
                Some(LocalExport {
                    key,
                    generation: export.metadata.generation,
                    resource_version: export.metadata.resource_version.clone(),
                    conditions: stored.conditions().to_vec(),
                    validity,
                })
            })
            .collect();
        Some(Arc::new(LocalExports {
            api_version,
            exports,
        }))
    }

    /// Translates the clusters that have synced at least once into the set.
    /// Only a cluster whose objects or state changed since its last
    /// translation (or every one, when the set's exports changed) is
    /// translated again; the others' translations are reused.
    fn rebuild(&mut self) {
        let started = Instant::now();
        let mut translated_now = 0;
        let mut partial = 0;
        let mut exported = Exported::new();
        for (namespace, name) in self
            .clusters
            .values()
            .filter(|e| e.state != SyncState::Connecting)
            .flat_map(|e| e.store.objects_of(Kind::ServiceExport))
            .map(|(key, _)| key)
        {
            exported
                .entry(namespace.clone())
                .or_default()
                .insert(name.clone());
        }
        for key in self.peer_exports() {
            exported
                .entry(key.namespace.as_str().into())
                .or_default()
                .insert(key.name.as_str().into());
        }
        if exported != self.exported {
            self.exports_changed = exports_changed(&self.exported, &exported);
            self.exported = exported;
            self.exports += 1;
        }
        let mut findings = Vec::new();
        let mut translated = Vec::new();
        // The services whose holders may have changed since the last merge:
        // those the partial translations made again; `None` (merge every
        // service) after a whole translation.
        let mut dirty: Option<BTreeSet<ServiceKey>> = Some(BTreeSet::new());
        self.local_validity = None;
        let local_id = self
            .clusters
            .get(&ClusterSource::Local)
            .and_then(|entry| entry.store.cluster_id())
            .and_then(|id| ClusterId::new(id).ok());
        let fed = self.fed_peers();
        let mut read_from_api = BTreeSet::new();
        for (source, entry) in &mut self.clusters {
            if entry.state == SyncState::Connecting {
                continue;
            }
            let current = entry
                .translation
                .as_ref()
                .is_some_and(|t| t.revision == entry.revision && t.exports == self.exports);
            if !current {
                translated_now += 1;
                self.translations += 1;
                entry.translations += 1;
                let changes = entry.store.take_changes();
                let inputs = Inputs {
                    source,
                    store: &entry.store,
                    stale: entry.state == SyncState::Stale,
                    revision: entry.revision,
                    exported: &self.exported,
                    exports: self.exports,
                    exports_changed: &self.exports_changed,
                    options: &self.options,
                };
                let translation = translate(&inputs, entry.translation.as_ref(), &changes);
                partial += usize::from(translation.partial);
                match (&mut dirty, &translation.changed) {
                    (Some(dirty), Some(changed)) => dirty.extend(changed.iter().cloned()),
                    _ => dirty = None,
                }
                entry.translation = Some(translation);
            }
            let Some(translation) = &entry.translation else {
                continue;
            };
            findings.extend(translation.findings.iter().cloned());
            if let Some(cluster) = &translation.cluster {
                let peer = !source.is_local() && self.peers.contains_key(&cluster.id);
                if peer && !source.is_named(cluster.id.as_str()) {
                    // A member saying it is a peer: a cluster's word is not
                    // an identity (the peer's certificate is).
                    findings.push(
                        Diagnostic::error(
                            crate::diagnostics::Origin::file(source),
                            format!(
                                "says it is {id}, a peer read from its feed (kube.peers); only {id}'s own link (a remote-cluster Secret or kubeconfig file named {id}) may stand in for it: this cluster is left out",
                                id = cluster.id
                            ),
                        )
                        .in_cluster(cluster.id.as_str()),
                    );
                } else {
                    // A peer whose feed has synced speaks for itself: its
                    // own link steps aside (the way from a link to a feed,
                    // without a gap).
                    if !peer || !fed.contains(&cluster.id) {
                        translated.push(cluster.clone());
                    }
                    if peer {
                        read_from_api.insert(cluster.id.clone());
                    }
                }
            }
            if let Some(validity) = &translation.validity {
                self.local_validity = Some(validity.clone());
            }
        }
        let (peer_clusters, peer_findings, peers_changed) =
            self.peer_clusters(&read_from_api, local_id.as_ref());
        translated.extend(peer_clusters);
        translated.extend(self.departing_clusters());
        findings.extend(peer_findings);
        match (&mut dirty, peers_changed) {
            (Some(dirty), Some(changed)) => dirty.extend(changed),
            _ => dirty = None,
        }
        let translate_time = started.elapsed();
        // Each invalid object (or cluster) left itself out of `set`.
        let (set, assembly) = assemble(translated);
        let assemble_time = started.elapsed() - translate_time;
        // Only the same clusters as the last merge's may be merged by the
        // services that changed: one joining or leaving changes the holders
        // of every service it holds, and so does a cluster read from
        // elsewhere (its link stepping aside for its feed, or back).
        let members: Vec<(ClusterId, String)> = set
            .clusters
            .values()
            .map(|cluster| (cluster.id.clone(), cluster.source.clone()))
            .collect();
        let same_members = members == self.merged_members;
        self.merged_members = members;
        let merged = match (self.usable_merged.take(), dirty) {
            (Some(previous), Some(dirty)) if same_members => merge_changed(&set, &previous, &dirty),
            (previous, _) => merge_reusing(&set, &previous.unwrap_or_default()),
        };
        self.usable_merged = Some(Arc::new(merged));
        tracing::debug!(
            translated = translated_now,
            partial,
            translate_ms = translate_time.as_millis(),
            assemble_ms = assemble_time.as_millis(),
            merge_ms = (started.elapsed() - translate_time - assemble_time).as_millis(),
            "cluster set rebuilt"
        );
        findings.extend(assembly);
        let set = Arc::new(set);
        self.usable_set = Some(set.clone());
        self.warnings = findings.iter().filter(|d| !d.is_error()).cloned().collect();
        self.set = if findings.iter().any(Diagnostic::is_error) {
            Err(Diagnostics(findings))
        } else {
            Ok(set)
        };
        self.log_findings();
    }

    fn log_findings(&mut self) {
        let all: Vec<&Diagnostic> = match &self.set {
            Ok(_) => self.warnings.iter().collect(),
            Err(diagnostics) => diagnostics.0.iter().collect(),
        };
        let mut current = HashSet::new();
        for finding in all {
            let text = finding.to_string();
            if !self.logged.contains(&text) {
                if finding.is_error() {
                    tracing::warn!("{text}");
                } else {
                    tracing::info!("{text}");
                }
            }
            current.insert(text);
        }
        self.logged = current;
    }
}
