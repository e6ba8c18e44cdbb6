//! The hub's peers followed by their feed (`kube.peers` and peer Secrets):
//! each is a member of the set from the start (the admin named it, its
//! network and its gateways), with the services its feed last synced. A feed that fails
//! keeps the peer's last good state; unsynced for `staleAfter`, the peer
//! keeps its services but loses its backends, as a cluster whose API
//! server is unreachable does.

use std::collections::{BTreeMap, BTreeSet};

use tokio::time::Instant;

use super::{Hub, now_text};
use crate::diagnostics::{Diagnostic, Origin};
use crate::discovery::kube::report::PeerReport;
use crate::discovery::kube::{ClusterStatus, SyncState};
use crate::feed::peer::without_endpoints;
use crate::feed::{FeedPeer, PeerOrigin};
use crate::model::{Cluster, ClusterId, ServiceKey};

/// One peer's state in the hub.
pub(super) struct PeerEntry {
    peer: FeedPeer,
    state: SyncState,
    since: Instant,
    since_text: String,
    last_synced: Option<String>,
    last_error: Option<String>,
    stale_count: u64,
    /// Feed connections that failed since the gateway started.
    failures: u64,
    /// Batches applied.
    batches: u64,
    /// The peer as its feed last said (before its first batch: the
    /// configured peer with no services).
    cluster: Cluster,
    /// `cluster` without endpoints, while the peer is stale.
    stale: Option<Cluster>,
    /// The services changed since the last rebuild; `None`: all of them.
    changed: Option<BTreeSet<ServiceKey>>,
    /// What its last batch's hello said that could not be used.
    findings: Vec<Diagnostic>,
}

impl PeerEntry {
    pub(super) fn new(peer: FeedPeer) -> Self {
        Self {
            cluster: peer.cluster(),
            peer,
            state: SyncState::Connecting,
            since: Instant::now(),
            since_text: now_text(),
            last_synced: None,
            last_error: None,
            stale_count: 0,
            failures: 0,
            batches: 0,
            stale: None,
            changed: None,
            findings: Vec::new(),
        }
    }

    fn set_state(&mut self, state: SyncState) {
        let was = std::mem::replace(&mut self.state, state);
        self.since = Instant::now();
        self.since_text = now_text();
        // Whether it is stale decides whether its endpoints count; its
        // first batch replaced every service.
        if was == SyncState::Connecting || (was == SyncState::Stale) != (state == SyncState::Stale)
        {
            self.changed = None;
        }
        self.stale = (state == SyncState::Stale).then(|| without_endpoints(&self.cluster));
    }

    /// The peer's status, beside the API-read clusters'.
    pub(super) fn status(&self) -> ClusterStatus {
        ClusterStatus {
            source: self.peer.source(),
            id: Some(self.peer.cluster.to_string()),
            state: self.state,
            since: self.since_text.clone(),
            last_synced: self.last_synced.clone(),
            last_error: self.last_error.clone(),
            stale_count: self.stale_count,
            watch_errors: self.failures,
            translations: self.batches,
            objects: BTreeMap::from([("Service".to_owned(), self.cluster.services.len())]),
            versions: BTreeMap::from([("feed".to_owned(), "v1".to_owned())]),
            feed: true,
        }
    }

    /// Its feed has synced and is not stale.
    fn speaks(&self) -> bool {
        matches!(self.state, SyncState::Synced | SyncState::Unsynced)
    }

    /// Whether the snapshot may count the peer as settled: synced once, or
    /// failed once (its absence is then known, not awaited).
    pub(super) fn settled(&self) -> bool {
        self.state != SyncState::Connecting || self.last_error.is_some()
    }
}

impl Hub {
    /// The peers as the admin names them now: `kube.peers`, then the valid
    /// peer Secrets by name; a cluster named twice is followed as named
    /// first, and each other naming is a finding, as is each peer Secret
    /// that cannot be followed. A peer added starts connecting, one gone
    /// leaves the set, one changed starts again; the gateway's followers
    /// are told.
    pub(super) fn refresh_peers(&mut self) {
        let mut wanted: BTreeMap<ClusterId, FeedPeer> = BTreeMap::new();
        let mut findings = Vec::new();
        let from_secrets = self.options.follow_peer_secrets;
        let named = self
            .options
            .peers
            .iter()
            .map(|peer| Ok(Box::new(peer.clone())));
        // A peer Secret followed now keeps its cluster against one applied
        // later (then by name): a second naming never takes over.
        let followed = |name: &str| {
            self.peers.values().any(|entry| {
                matches!(&entry.peer.origin, PeerOrigin::Secret { name: followed, .. } if followed == name)
            })
        };
        let mut secrets: Vec<_> = self.peer_secrets.iter().collect();
        secrets.sort_by_key(|(name, _)| !followed(name));
        let secrets = secrets
            .into_iter()
            .map(|(name, peer)| peer.clone().map_err(|error| (name.clone(), error)));
        for peer in named.chain(secrets) {
            let origin =
                |name: &str| Origin::file(format!("Secret {}/{name}", self.secret_namespace()));
            let peer = match peer {
                Ok(peer) => peer,
                Err((name, error)) => {
                    findings.push(Diagnostic::error(
                        origin(&name),
                        format!("{error}: this peer is not followed"),
                    ));
                    continue;
                }
            };
            if !from_secrets && peer.origin != PeerOrigin::Config {
                findings.push(
                    Diagnostic::warning(
                        Origin::file(peer.origin.to_string()),
                        format!(
                            "{} is read from its feed by the gateway (a peer Secret), not by this command: only what a link named after it reads is in this view",
                            peer.cluster
                        ),
                    )
                    .in_cluster(peer.cluster.as_str()),
                );
                continue;
            }
            if let Some(first) = wanted.get(&peer.cluster) {
                findings.push(
                    Diagnostic::error(
                        Origin::file(peer.origin.to_string()),
                        format!(
                            "names {}, already a peer by {}: left out",
                            peer.cluster, first.origin
                        ),
                    )
                    .in_cluster(peer.cluster.as_str()),
                );
                continue;
            }
            wanted.insert(peer.cluster.clone(), *peer);
        }
        // New findings alone are published too.
        let findings_changed = self.peer_findings != findings;
        self.peer_findings = findings;
        let before = self.peers.len();
        let held = std::mem::take(&mut self.peers);
        for (cluster, entry) in held {
            if wanted.get(&cluster) == Some(&entry.peer) {
                self.peers.insert(cluster, entry);
                continue;
            }
            tracing::info!(peer = %cluster, origin = %entry.peer.origin, "peer removed or changed");
            // Removed, not changed, while a link to the same cluster
            // through its API server is still connecting: its last state
            // serves until that link has listed (the way from a feed to a
            // link, without a gap).
            let connecting = self.clusters.iter().any(|(source, link)| {
                source.is_named(cluster.as_str()) && link.state == SyncState::Connecting
            });
            if connecting && !wanted.contains_key(&cluster) {
                tracing::info!(peer = %cluster, "its last state serves until its link through the API server has listed");
                self.departing.insert(cluster, (entry, Instant::now()));
            }
        }
        let mut changed = self.peers.len() != before;
        for (cluster, peer) in wanted {
            if let std::collections::btree_map::Entry::Vacant(vacant) = self.peers.entry(cluster) {
                tracing::info!(peer = %vacant.key(), origin = %peer.origin, network = %peer.network, "peer added; following its feed");
                vacant.insert(PeerEntry::new(peer));
                changed = true;
            }
        }
        self.set_dirty |= findings_changed;
        if changed {
            self.set_dirty = true;
            let links: Vec<FeedPeer> = self
                .peers
                .values()
                .map(|entry| entry.peer.clone())
                .collect();
            self.peer_links.send_replace(std::sync::Arc::new(links));
        }
    }

    fn secret_namespace(&self) -> &str {
        self.secrets.as_ref().map_or("", |s| s.namespace.as_str())
    }

    /// Applies one report of a peer's follower.
    pub(super) fn peer_report(&mut self, cluster: &ClusterId, report: PeerReport) {
        let Some(entry) = self.peers.get_mut(cluster) else {
            return;
        };
        match report {
            PeerReport::Synced { state, changed } => {
                let (gateways, clusterset) = (
                    entry.cluster.gateways.clone(),
                    entry.cluster.clusterset.clone(),
                );
                entry.findings = entry.peer.apply(&mut entry.cluster, &state, &changed);
                entry.batches += 1;
                entry.last_error = None;
                // A batch empty of changes that says nothing new (a bare
                // `synced`) rebuilds nothing.
                let said = !changed.is_empty()
                    || entry.cluster.gateways != gateways
                    || entry.cluster.clusterset != clusterset;
                // Before any change of state: a batch after a reconnect
                // changes services as any other does.
                if let Some(dirty) = &mut entry.changed {
                    dirty.extend(changed);
                }
                let was = entry.state;
                if was != SyncState::Synced {
                    match was {
                        SyncState::Stale => tracing::warn!(peer = %cluster,
                            "peer's feed is back; its backends are restored"),
                        _ => tracing::info!(peer = %cluster, "peer's feed synced"),
                    }
                    entry.set_state(SyncState::Synced);
                }
                entry.last_synced = Some(now_text());
                // Synced from unsynced changes nothing of the set but its
                // batch; from connecting or stale, the peer's whole place.
                self.set_dirty |= said || !matches!(was, SyncState::Synced | SyncState::Unsynced);
            }
            PeerReport::Failed(error) => {
                entry.failures += 1;
                if entry.state == SyncState::Synced {
                    tracing::warn!(peer = %cluster, %error,
                        "peer's feed failing; keeping its last known state for {}",
                        humantime::format_duration(self.options.stale_after));
                    entry.set_state(SyncState::Unsynced);
                } else if entry.failures == 1 {
                    // Said once at WARN: a peer named wrongly (its address,
                    // its id, this cluster not in its set) shows here.
                    tracing::warn!(peer = %cluster, %error,
                        "peer's feed cannot be read yet; retrying");
                } else {
                    tracing::debug!(peer = %cluster, %error, "peer's feed failing");
                }
                entry.last_error = Some(error);
            }
        }
    }

    /// The last state of each peer no longer followed whose link through
    /// the API server is still connecting; a peer whose link has listed
    /// (or failed to, for `staleAfter`) is let go here.
    pub(super) fn departing_clusters(&mut self) -> Vec<Cluster> {
        let now = Instant::now();
        let stale_after = self.options.stale_after;
        let clusters = &self.clusters;
        self.departing.retain(|cluster, (_, since)| {
            let connecting = clusters.iter().any(|(source, link)| {
                source.is_named(cluster.as_str()) && link.state == SyncState::Connecting
            });
            let keep = connecting && *since + stale_after > now;
            if !keep {
                tracing::info!(peer = %cluster, "its last state let go: its link through the API server has listed, or failed to");
            }
            keep
        });
        self.departing
            .values()
            .map(|(entry, _)| entry.stale.clone().unwrap_or_else(|| entry.cluster.clone()))
            .collect()
    }

    /// When the oldest departing peer is let go whatever its link does.
    pub(super) fn next_departure_deadline(&self) -> Option<Instant> {
        self.departing
            .values()
            .map(|(_, since)| *since + self.options.stale_after)
            .min()
    }

    /// The earliest time an unsynced peer goes stale.
    pub(super) fn next_peer_stale_deadline(&self) -> Option<Instant> {
        self.peers
            .values()
            .filter(|entry| entry.state == SyncState::Unsynced)
            .map(|entry| entry.since + self.options.stale_after)
            .min()
    }

    /// Marks peers unsynced for longer than `staleAfter` as stale.
    pub(super) fn expire_peers(&mut self) {
        let now = Instant::now();
        // A departing peer whose link has not listed in `staleAfter` is let
        // go: the set is built again without it.
        let departing = self.departing.len();
        let stale_after = self.options.stale_after;
        self.departing.retain(|cluster, (_, since)| {
            let keep = *since + stale_after > now;
            if !keep {
                tracing::warn!(peer = %cluster, "its link through the API server has not listed in {}: its last state let go", humantime::format_duration(stale_after));
            }
            keep
        });
        self.set_dirty |= self.departing.len() != departing;
        for (cluster, entry) in &mut self.peers {
            if entry.state == SyncState::Unsynced && entry.since + self.options.stale_after <= now {
                entry.set_state(SyncState::Stale);
                entry.stale_count += 1;
                self.set_dirty = true;
                tracing::warn!(
                    peer = %cluster,
                    error = entry.last_error.as_deref().unwrap_or("unknown"),
                    "peer's feed unread for {}; its backends are dropped until it syncs again",
                    humantime::format_duration(self.options.stale_after)
                );
            }
        }
    }

    /// The peers whose feed has synced and is not stale: each speaks for
    /// itself, and the same cluster read through an API server (a link
    /// being replaced by the feed) steps aside meanwhile.
    pub(super) fn fed_peers(&self) -> BTreeSet<ClusterId> {
        self.peers
            .iter()
            .filter(|(_, entry)| entry.speaks())
            .map(|(cluster, _)| cluster.clone())
            .collect()
    }

    /// Each peer's cluster for the set, its findings, and the services
    /// changed since the last rebuild (`None`: every service of some peer).
    /// A peer whose feed has not synced yet is a member with no services
    /// (a stale one, without endpoints), unless the same cluster is
    /// `read_from_api`: that one serves until the feed has synced, and
    /// again while it is stale.
    /// A peer with the `local` cluster's id is left out, with a finding:
    /// the gateway's own cluster is read from its own API server.
    pub(super) fn peer_clusters(
        &mut self,
        read_from_api: &BTreeSet<ClusterId>,
        local: Option<&ClusterId>,
    ) -> (Vec<Cluster>, Vec<Diagnostic>, Option<BTreeSet<ServiceKey>>) {
        let mut clusters = Vec::with_capacity(self.peers.len());
        let mut findings = self.peer_findings.clone();
        let mut dirty = Some(BTreeSet::new());
        for (id, entry) in &mut self.peers {
            if Some(id) == local {
                findings.push(
                    Diagnostic::error(
                        Origin::file(entry.peer.source()),
                        format!("{id} is this gateway's own cluster; a peer is another cluster (kube.peers): left out"),
                    )
                    .in_cluster(id.as_str()),
                );
                continue;
            }
            if !entry.speaks() && read_from_api.contains(id) {
                continue;
            }
            clusters.push(entry.stale.clone().unwrap_or_else(|| entry.cluster.clone()));
            findings.extend(entry.findings.iter().cloned());
            match (&mut dirty, entry.changed.replace(BTreeSet::new())) {
                (Some(dirty), Some(changed)) => dirty.extend(changed),
                _ => dirty = None,
            }
        }
        (clusters, findings, dirty)
    }

    /// The services every peer exports, for the set's exported services.
    pub(super) fn peer_exports(&self) -> impl Iterator<Item = &ServiceKey> {
        self.peers
            .values()
            .flat_map(|entry| entry.cluster.services.keys())
    }
}
