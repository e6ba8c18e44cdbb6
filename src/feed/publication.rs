//! The journal as the tunnel server's feed streams share it: updated from
//! each snapshot of the local cluster, read by every subscriber's stream
//! under a short lock (a catch-up costs the changes since the
//! subscriber's revision), with a notification per change, and a cap on
//! the streams one caller cluster may hold open.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::watch;

use super::journal::{Batch, Journal, Resume, Subscriber};
use crate::model::{Cluster, ClusterId, ServiceKey};

/// Feed streams one peer cluster may hold open at once (one per replica
/// of it, and a reconnect overlapping the stream it replaces).
pub const DEFAULT_STREAMS_PER_CLUSTER: usize = 8;

/// The local cluster's feed, shared by its streams.
#[derive(Debug)]
pub struct Publication {
    journal: Mutex<Journal>,
    /// The journal's revision after each change.
    changes: watch::Sender<u64>,
    streams: Mutex<HashMap<ClusterId, usize>>,
    streams_per_cluster: usize,
    /// The services left out for their size, as last reported.
    oversized: Mutex<std::collections::BTreeSet<ServiceKey>>,
}

/// One stream's place in its cluster's cap, given back when dropped.
#[derive(Debug)]
pub struct StreamPermit {
    publication: Arc<Publication>,
    cluster: ClusterId,
}

impl Drop for StreamPermit {
    fn drop(&mut self) {
        let mut streams = self
            .publication
            .streams
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(count) = streams.get_mut(&self.cluster) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                streams.remove(&self.cluster);
            }
        }
    }
}

impl Publication {
    pub fn new(journal: Journal, streams_per_cluster: usize) -> Arc<Self> {
        let (changes, _) = watch::channel(journal.revision());
        Arc::new(Self {
            journal: Mutex::new(journal),
            changes,
            streams: Mutex::new(HashMap::new()),
            streams_per_cluster: streams_per_cluster.max(1),
            oversized: Mutex::new(std::collections::BTreeSet::new()),
        })
    }

    fn journal(&self) -> std::sync::MutexGuard<'_, Journal> {
        self.journal.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes the local cluster as translated; wakes the streams if
    /// anything changed.
    pub fn update(&self, cluster: &Cluster) {
        let revision = {
            let mut journal = self.journal();
            let changed = journal.update(cluster);
            let mut reported = self.oversized.lock().unwrap_or_else(|e| e.into_inner());
            for (key, error) in journal.oversized() {
                if !reported.contains(key) {
                    tracing::warn!(service = %key, %error, "an exported service left out of the feed: larger than a subscriber takes");
                }
            }
            *reported = journal.oversized().keys().cloned().collect();
            changed.then(|| journal.revision())
        };
        if let Some(revision) = revision {
            self.changes.send_replace(revision);
        }
    }

    /// What a subscriber at `from` is sent now ([`Journal::catch_up`]).
    pub fn catch_up(
        &self,
        from: Option<Resume>,
        subscriber: &Subscriber,
        greet: bool,
    ) -> Option<Batch> {
        self.journal().catch_up(from, subscriber, greet)
    }

    /// The journal's epoch and revision now.
    pub fn at(&self) -> Resume {
        let journal = self.journal();
        Resume {
            epoch: journal.epoch(),
            revision: journal.revision(),
        }
    }

    /// Notified after every change.
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// A place for one more stream of `cluster`; `None` past its cap.
    pub fn admit(self: &Arc<Self>, cluster: &ClusterId) -> Option<StreamPermit> {
        let mut streams = self.streams.lock().unwrap_or_else(|e| e.into_inner());
        let count = streams.entry(cluster.clone()).or_default();
        if *count >= self.streams_per_cluster {
            return None;
        }
        *count += 1;
        Some(StreamPermit {
            publication: Arc::clone(self),
            cluster: cluster.clone(),
        })
    }
}
