//! What the cluster tasks, the Secret watcher and the peers' feed
//! followers tell the hub: the
//! messages of the one channel they all send on, apart from the tasks that
//! send them and the hub that reads them.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::client::{ClusterSource, Kind};
use super::store::StoreEvent;
use crate::feed::PeerState;
use crate::model::{ClusterId, ServiceKey};

/// A message to the hub.
#[derive(Debug)]
pub(super) enum HubMessage {
    Cluster {
        source: ClusterSource,
        generation: u64,
        report: ClusterReport,
    },
    Secrets(SecretReport),
    /// A peer followed by its feed (`kube.peers`).
    Peer {
        cluster: ClusterId,
        report: PeerReport,
    },
}

/// What a peer's follower tells the hub.
#[derive(Debug)]
pub(super) enum PeerReport {
    /// A batch applied: the peer's state now, and the services it changed.
    Synced {
        state: Arc<PeerState>,
        changed: Vec<ServiceKey>,
    },
    /// The feed could not be read or broke a rule; the last good state
    /// stays until the stale time.
    Failed(String),
}

/// What a cluster task tells the hub.
#[derive(Debug)]
pub(super) enum ClusterReport {
    /// The server's APIs are known; watchers start for these kinds.
    Resources {
        watched: Vec<Kind>,
        /// `group/version` in use, by kind name.
        versions: BTreeMap<String, String>,
        missing: Vec<Kind>,
    },
    Event(Kind, Box<StoreEvent>),
    /// A kind's watcher failed after its list and resumes from its
    /// resource version: the kind stays synced.
    Trouble {
        kind: Kind,
        error: String,
    },
    /// A kind's watcher failed, or (`kind: None`) the API as a whole.
    Failed {
        kind: Option<Kind>,
        error: String,
    },
}

/// One remote-cluster Secret: its name and how it links its cluster.
#[derive(Debug, Clone)]
pub(super) struct RemoteSecret {
    pub(super) name: String,
    pub(super) link: RemoteLink,
}

/// How a remote-cluster Secret links its cluster.
#[derive(Debug, Clone)]
pub(super) enum RemoteLink {
    /// Through its API server: a kubeconfig (or why it has none).
    Api(Result<String, String>),
    /// By its feed over the tunnel: the peer it names (or why it cannot be
    /// followed).
    Feed(Result<Box<crate::feed::FeedPeer>, String>),
}

/// What the Secret watcher tells the hub.
#[derive(Debug)]
pub(super) enum SecretReport {
    /// A full list: Secrets not in it are gone.
    Listed(Vec<RemoteSecret>),
    Applied(RemoteSecret),
    Deleted(String),
    Failed(String),
}
