//! A subscriber's side of one peer's feed: the messages applied in order,
//! each batch (a snapshot or the changes since the last `synced`) only
//! once it is complete, so what the peer said last stays in force while a
//! batch arrives, and a refused batch leaves it untouched. The peer speaks
//! only for the cluster it was subscribed as (the one its certificate
//! names) and only within [`FeedLimits`].

use std::collections::BTreeMap;
use std::sync::Arc;

use super::journal::Resume;
use super::wire::{FEED_VERSION, FeedLimits, Hello, Message, WireError};
use crate::model::{ClusterId, ClusterService, ServiceKey, Shared, check_dns_subdomain};

/// Gateway addresses a hello may name.
pub const MAX_GATEWAYS: usize = 16;
/// The longest gateway address a hello may name (a DNS name and a port).
const MAX_GATEWAY_TEXT: usize = 260;

/// Why a peer's feed was refused; the connection is dropped and the
/// cluster keeps its last good state until it goes stale.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FeedError {
    #[error("the feed speaks for cluster {claimed:?}, but was subscribed as {expected}")]
    WrongCluster {
        expected: ClusterId,
        claimed: String,
    },
    #[error("feed version {0} is not supported (this gateway speaks version {FEED_VERSION})")]
    Version(u32),
    #[error("a {0} before the feed's hello")]
    BeforeHello(&'static str),
    #[error("a resumed feed (no snapshot) for another epoch or from before the revision held")]
    CannotResume,
    #[error("{count} services, more than the limit of {limit}")]
    TooManyServices { count: usize, limit: usize },
    #[error("{bytes} bytes of services, more than the limit of {limit}")]
    TooManyBytes { bytes: usize, limit: usize },
    #[error("revision {got} after {held}: a feed's revisions only grow")]
    Backwards { held: u64, got: u64 },
    #[error("hello.{field}: {reason}")]
    Hello { field: &'static str, reason: String },
    #[error(transparent)]
    Wire(#[from] WireError),
}

/// The peer's state as last synced.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PeerState {
    pub clusterset: Option<String>,
    pub gateways: Vec<String>,
    /// Shared between the states a feed goes through: a batch costs the
    /// services it changes, not a copy of every one.
    pub services: Shared<ServiceKey, Arc<ClusterService>>,
}

/// A batch being received.
#[derive(Debug, Default)]
struct Batch {
    hello: Option<Hello>,
    /// A snapshot replaces everything at `synced`.
    snapshot: bool,
    /// `None`: withdrawn.
    changes: BTreeMap<ServiceKey, Option<Arc<ClusterService>>>,
    /// The length of each changed service's message.
    sizes: BTreeMap<ServiceKey, usize>,
    /// Bytes of every message of the batch.
    bytes: usize,
}

impl Batch {
    /// Counts a message of the batch; a batch may carry no more bytes than
    /// the whole feed may hold, so what arrives is bounded before the
    /// rest is read.
    fn count_bytes(&mut self, frame_bytes: usize, limit: usize) -> Result<(), FeedError> {
        self.bytes = self.bytes.saturating_add(frame_bytes);
        if self.bytes > limit {
            return Err(FeedError::TooManyBytes {
                bytes: self.bytes,
                limit,
            });
        }
        Ok(())
    }
}

/// What applying one message did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Applied {
    /// Part of a batch, held until its `synced`.
    Pending,
    /// A batch completed: the services it changed (every one held before
    /// or after, for a snapshot).
    Synced(Vec<ServiceKey>),
    /// A heartbeat.
    Alive,
}

/// One peer's feed as its subscriber follows it.
#[derive(Debug)]
pub struct Follower {
    expected: ClusterId,
    limits: FeedLimits,
    /// The publisher instance and revision last synced.
    at: Option<Resume>,
    state: Arc<PeerState>,
    batch: Option<Batch>,
    /// This connection's hello arrived: after a `synced`, changes come
    /// without another.
    greeted: bool,
    /// The length of the message of each service held, and their sum:
    /// what the peer makes this gateway hold, in the feed's bytes.
    held_sizes: BTreeMap<ServiceKey, usize>,
    held_bytes: usize,
}

impl Follower {
    pub fn new(expected: ClusterId, limits: FeedLimits) -> Self {
        Self {
            expected,
            limits,
            at: None,
            state: Arc::new(PeerState::default()),
            batch: None,
            greeted: false,
            held_sizes: BTreeMap::new(),
            held_bytes: 0,
        }
    }

    /// The bytes of the services held (their messages' lengths).
    pub fn held_bytes(&self) -> usize {
        self.held_bytes
    }

    /// Where a new connection resumes from.
    pub fn resume_from(&self) -> Option<Resume> {
        self.at
    }

    /// The peer's state as last synced; `None` before the first sync.
    pub fn state(&self) -> Option<&Arc<PeerState>> {
        self.at.is_some().then_some(&self.state)
    }

    /// A connection ended: a batch it left half-sent is dropped, so the
    /// next connection starts with a hello.
    pub fn disconnected(&mut self) {
        self.batch = None;
        self.greeted = false;
    }

    /// The batch a change belongs to: the current one, or after a
    /// `synced` of this connection, a new batch of changes.
    fn batch(&mut self, what: &'static str) -> Result<&mut Batch, FeedError> {
        if !self.greeted {
            return Err(FeedError::BeforeHello(what));
        }
        Ok(self.batch.get_or_insert_with(Batch::default))
    }

    /// Applies one message, in the order received; `frame_bytes` is the
    /// length of the frame it came in, counted against the byte limit.
    pub fn apply(&mut self, message: Message, frame_bytes: usize) -> Result<Applied, FeedError> {
        match message {
            Message::Hello(hello) => {
                self.hello(hello)?;
                Ok(Applied::Pending)
            }
            Message::Service(service) => {
                let service = service.into_model(&self.limits)?;
                let limit = self.limits.max_held_bytes;
                let batch = self.batch("service")?;
                batch.count_bytes(frame_bytes, limit)?;
                batch.sizes.insert(service.key.clone(), frame_bytes);
                batch
                    .changes
                    .insert(service.key.clone(), Some(Arc::new(service)));
                self.check_size()?;
                Ok(Applied::Pending)
            }
            Message::Withdrawn(key) => {
                let key = key.to_key()?;
                let limit = self.limits.max_held_bytes;
                let batch = self.batch("withdrawn")?;
                batch.count_bytes(frame_bytes, limit)?;
                batch.sizes.remove(&key);
                batch.changes.insert(key, None);
                self.check_size()?;
                Ok(Applied::Pending)
            }
            Message::Synced { revision } => self.synced(revision),
            Message::Heartbeat { revision } => {
                if !self.greeted || self.at.is_none() {
                    return Err(FeedError::BeforeHello("heartbeat"));
                }
                if let Some(at) = self.at
                    && revision < at.revision
                {
                    return Err(FeedError::Backwards {
                        held: at.revision,
                        got: revision,
                    });
                }
                Ok(Applied::Alive)
            }
        }
    }

    fn hello(&mut self, hello: Hello) -> Result<(), FeedError> {
        if hello.version != FEED_VERSION {
            return Err(FeedError::Version(hello.version));
        }
        if hello.cluster != self.expected.as_str() {
            return Err(FeedError::WrongCluster {
                expected: self.expected.clone(),
                claimed: hello.cluster,
            });
        }
        if !hello.snapshot && self.at.is_none_or(|at| at.epoch != hello.epoch) {
            return Err(FeedError::CannotResume);
        }
        // What the hello says is held and repeated in findings: bounded
        // like every other field a peer sends.
        if hello.gateways.len() > MAX_GATEWAYS {
            return Err(FeedError::Hello {
                field: "gateways",
                reason: format!(
                    "{} addresses, more than the limit of {MAX_GATEWAYS}",
                    hello.gateways.len()
                ),
            });
        }
        if let Some(long) = hello.gateways.iter().find(|g| g.len() > MAX_GATEWAY_TEXT) {
            return Err(FeedError::Hello {
                field: "gateways",
                reason: format!(
                    "an address of {} bytes, longer than {MAX_GATEWAY_TEXT}",
                    long.len()
                ),
            });
        }
        if let Some(clusterset) = &hello.clusterset {
            check_dns_subdomain(clusterset, 253).map_err(|e| FeedError::Hello {
                field: "clusterset",
                reason: e.to_string(),
            })?;
        }
        self.batch = Some(Batch {
            snapshot: hello.snapshot,
            hello: Some(hello),
            ..Batch::default()
        });
        self.greeted = true;
        Ok(())
    }

    /// Refuses a batch longer than any a publisher within the limit
    /// sends (a snapshot of every service; changes of every service held
    /// and as many withdrawn), as it arrives: what it holds is bounded
    /// before the rest of it is read. What it would leave is checked at
    /// its `synced`.
    fn check_size(&self) -> Result<(), FeedError> {
        let Some(batch) = &self.batch else {
            return Ok(());
        };
        let limit = if batch.snapshot {
            self.limits.max_services
        } else {
            2 * self.limits.max_services
        };
        if batch.changes.len() > limit {
            return Err(FeedError::TooManyServices {
                count: batch.changes.len(),
                limit,
            });
        }
        Ok(())
    }

    fn synced(&mut self, revision: u64) -> Result<Applied, FeedError> {
        if !self.greeted {
            return Err(FeedError::BeforeHello("synced"));
        }
        let batch = self.batch.take().unwrap_or_default();
        let epoch = match (&batch.hello, self.at) {
            (Some(hello), _) => hello.epoch,
            (None, Some(at)) => at.epoch,
            (None, None) => return Err(FeedError::BeforeHello("synced")),
        };
        if let Some(at) = self.at
            && at.epoch == epoch
            && revision < at.revision
            && !batch.snapshot
        {
            return Err(FeedError::Backwards {
                held: at.revision,
                got: revision,
            });
        }
        let mut state = PeerState::clone(&self.state);
        if let Some(hello) = batch.hello {
            state.clusterset = hello.clusterset;
            state.gateways = hello.gateways;
        }
        let changed: Vec<ServiceKey> = if batch.snapshot {
            let mut changed: Vec<ServiceKey> = state
                .services
                .keys()
                .filter(|key| !batch.changes.contains_key(*key))
                .cloned()
                .collect();
            state.services = batch
                .changes
                .into_iter()
                .filter_map(|(key, change)| {
                    changed.push(key.clone());
                    change.map(|service| (key, service))
                })
                .collect();
            changed.sort();
            changed
        } else {
            let changed = batch.changes.keys().cloned().collect();
            for (key, change) in batch.changes {
                match change {
                    Some(service) => {
                        state.services.insert(key, service);
                    }
                    None => {
                        state.services.remove(&key);
                    }
                }
            }
            changed
        };
        if state.services.len() > self.limits.max_services {
            return Err(FeedError::TooManyServices {
                count: state.services.len(),
                limit: self.limits.max_services,
            });
        }
        // Checked before anything is kept; a batch costs the services it
        // changes, not a walk over every one held.
        let added = batch
            .sizes
            .values()
            .fold(0usize, |sum, size| sum.saturating_add(*size));
        let bytes = if batch.snapshot {
            added
        } else {
            let replaced: usize = changed
                .iter()
                .filter_map(|key| self.held_sizes.get(key))
                .sum();
            self.held_bytes
                .saturating_sub(replaced)
                .saturating_add(added)
        };
        if bytes > self.limits.max_held_bytes {
            return Err(FeedError::TooManyBytes {
                bytes,
                limit: self.limits.max_held_bytes,
            });
        }
        if batch.snapshot {
            self.held_sizes.clear();
        } else {
            for key in &changed {
                self.held_sizes.remove(key);
            }
        }
        self.held_sizes.extend(batch.sizes);
        self.held_bytes = bytes;
        self.state = Arc::new(state);
        self.at = Some(Resume { epoch, revision });
        Ok(Applied::Synced(changed))
    }
}
