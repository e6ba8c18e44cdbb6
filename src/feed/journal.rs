//! What a cluster publishes, by revision: its exported services as last
//! translated, each with the revision it last changed at, and the
//! services withdrawn since, so a subscriber resuming from a revision gets
//! only what changed after it. A catch-up costs the changes since the
//! subscriber's revision (an index by revision), not the services held.
//! Each subscriber sees only the services whose access policy admits it.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use super::wire::{FEED_VERSION, Hello, Message, WireKey, WireService};
use crate::model::{Cluster, ClusterId, ClusterService, NetworkId, ServiceKey};

/// Withdrawn services remembered for resuming subscribers; one who asks
/// from before the oldest gets a snapshot.
pub const DEFAULT_TOMBSTONES: usize = 10_000;

/// Who subscribes, as the publisher knows it: the cluster its
/// certificate names and, if the publisher's network map attests one,
/// that cluster's network.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subscriber {
    pub cluster: ClusterId,
    pub network: Option<NetworkId>,
}

/// Where a subscriber resumes from: the publisher's instance and the
/// revision it last applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Resume {
    pub epoch: u64,
    pub revision: u64,
}

/// One subscriber's next batch: what it is sent, in order, ending with
/// `synced` at `revision`.
#[derive(Debug)]
pub struct Batch {
    pub hello: Option<Hello>,
    items: Vec<Item>,
    pub revision: u64,
}

#[derive(Debug)]
enum Item {
    Service(Arc<ClusterService>),
    Withdrawn(ServiceKey),
}

impl Batch {
    /// The batch's messages, each made when it is asked for.
    pub fn messages(&self) -> impl Iterator<Item = Message> + '_ {
        let hello = self.hello.clone().map(Message::Hello);
        let items = self.items.iter().map(|item| match item {
            Item::Service(service) => Message::Service(Box::new(service_message(service))),
            Item::Withdrawn(key) => Message::Withdrawn(WireKey::of(key)),
        });
        hello
            .into_iter()
            .chain(items)
            .chain(std::iter::once(Message::Synced {
                revision: self.revision,
            }))
    }
}

#[derive(Debug)]
struct Published {
    service: Arc<ClusterService>,
    changed: u64,
}

/// The exported state of the local cluster, by revision.
#[derive(Debug)]
pub struct Journal {
    epoch: u64,
    revision: u64,
    cluster: Option<ClusterId>,
    clusterset: Option<String>,
    gateways: Vec<String>,
    services: BTreeMap<ServiceKey, Published>,
    /// Withdrawn services and the revision they went at.
    tombstones: BTreeMap<ServiceKey, u64>,
    /// The same, oldest first, to forget the oldest (entries a later
    /// change replaced are skipped).
    tombstone_order: VecDeque<(u64, ServiceKey)>,
    max_tombstones: usize,
    /// Every service's latest change, present or withdrawn, by revision.
    index: BTreeMap<u64, ServiceKey>,
    /// The lowest revision changes can still be given since.
    horizon: u64,
}

impl Journal {
    /// An empty journal of a publisher instance `epoch` (random per
    /// process, so revisions of two instances are never confused).
    pub fn new(epoch: u64, max_tombstones: usize) -> Self {
        Self {
            epoch,
            revision: 0,
            cluster: None,
            clusterset: None,
            gateways: Vec::new(),
            services: BTreeMap::new(),
            tombstones: BTreeMap::new(),
            tombstone_order: VecDeque::new(),
            max_tombstones: max_tombstones.max(1),
            index: BTreeMap::new(),
            horizon: 0,
        }
    }

    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    pub fn revision(&self) -> u64 {
        self.revision
    }

    /// Whether the journal speaks for a cluster yet.
    pub fn cluster(&self) -> Option<&ClusterId> {
        self.cluster.as_ref()
    }

    /// Takes the local cluster as translated: its exported services
    /// (compared by allocation first: an unchanged service is the same
    /// `Arc` from one translation to the next), its gateways and ids. A
    /// change of the cluster's id, cluster set or gateways starts a new
    /// epoch: every subscriber gets a snapshot. Returns whether anything
    /// changed.
    pub fn update(&mut self, cluster: &Cluster) -> bool {
        let gateways: Vec<String> = cluster.gateways.iter().map(|g| g.to_string()).collect();
        if self.cluster.as_ref() != Some(&cluster.id)
            || self.clusterset != cluster.clusterset
            || self.gateways != gateways
        {
            let fresh = self.cluster.is_some();
            self.cluster = Some(cluster.id.clone());
            self.clusterset = cluster.clusterset.clone();
            self.gateways = gateways;
            if fresh {
                self.restart();
            }
            self.take_services(cluster);
            return true;
        }
        self.take_services(cluster)
    }

    /// A new epoch: revisions start over and nothing can be resumed.
    fn restart(&mut self) {
        self.epoch = self.epoch.wrapping_add(1);
        self.revision = 0;
        self.horizon = 0;
        self.services.clear();
        self.tombstones.clear();
        self.tombstone_order.clear();
        self.index.clear();
    }

    fn take_services(&mut self, cluster: &Cluster) -> bool {
        let before = self.revision;
        let exported = cluster
            .services
            .iter()
            .filter(|(_, service)| service.export.is_some());
        for (key, service) in exported {
            if let Some(held) = self.services.get(key)
                && (Arc::ptr_eq(&held.service, service) || held.service == *service)
            {
                continue;
            }
            self.revision += 1;
            let revision = self.revision;
            let previous = self
                .services
                .insert(
                    key.clone(),
                    Published {
                        service: Arc::clone(service),
                        changed: revision,
                    },
                )
                .map(|held| held.changed)
                .or_else(|| self.tombstones.remove(key));
            if let Some(previous) = previous {
                self.index.remove(&previous);
            }
            self.index.insert(revision, key.clone());
        }
        let gone: Vec<ServiceKey> = self
            .services
            .keys()
            .filter(|key| {
                cluster
                    .services
                    .get(*key)
                    .is_none_or(|service| service.export.is_none())
            })
            .cloned()
            .collect();
        for key in gone {
            if let Some(held) = self.services.remove(&key) {
                self.index.remove(&held.changed);
            }
            self.revision += 1;
            self.index.insert(self.revision, key.clone());
            self.tombstones.insert(key.clone(), self.revision);
            self.tombstone_order.push_back((self.revision, key));
        }
        while self.tombstones.len() > self.max_tombstones {
            let Some((revision, key)) = self.tombstone_order.pop_front() else {
                break;
            };
            if self.tombstones.get(&key) == Some(&revision) {
                self.tombstones.remove(&key);
                self.index.remove(&revision);
                self.horizon = self.horizon.max(revision);
            }
        }
        self.revision != before
    }

    /// What `subscriber`, which last applied `from`, is sent now: the
    /// changes since, if the journal still holds them, else a snapshot
    /// (always preceded by a hello). `greet`: the stream is new, so a
    /// hello comes first either way. `None` when a live stream has
    /// nothing new. The batch holds the services, not their messages:
    /// each message is made as it is written.
    pub fn catch_up(
        &self,
        from: Option<Resume>,
        subscriber: &Subscriber,
        greet: bool,
    ) -> Option<Batch> {
        let cluster = self.cluster.as_ref()?;
        let resumable = from.filter(|from| {
            from.epoch == self.epoch
                && from.revision >= self.horizon
                && from.revision <= self.revision
        });
        let hello = |snapshot: bool| Hello {
            version: FEED_VERSION,
            cluster: cluster.to_string(),
            clusterset: self.clusterset.clone(),
            epoch: self.epoch,
            snapshot,
            gateways: self.gateways.clone(),
        };
        let (hello, items) = match resumable {
            Some(from) if from.revision == self.revision && !greet => return None,
            Some(from) => (
                greet.then(|| hello(false)),
                self.index
                    .range(from.revision + 1..)
                    .map(|(_, key)| self.item_for(key, subscriber))
                    .collect(),
            ),
            None => (
                Some(hello(true)),
                self.services
                    .values()
                    .filter(|held| admits(&held.service, subscriber))
                    .map(|held| Item::Service(Arc::clone(&held.service)))
                    .collect(),
            ),
        };
        Some(Batch {
            hello,
            items,
            revision: self.revision,
        })
    }

    /// A service's latest state for `subscriber`: itself if present and
    /// admitting it, else withdrawn.
    fn item_for(&self, key: &ServiceKey, subscriber: &Subscriber) -> Item {
        match self.services.get(key) {
            Some(held) if admits(&held.service, subscriber) => {
                Item::Service(Arc::clone(&held.service))
            }
            _ => Item::Withdrawn(key.clone()),
        }
    }

    /// The services a subscriber would be sent, by key (for status and
    /// tests: what is scoped out of its feed).
    pub fn admitted(&self, subscriber: &Subscriber) -> Vec<ServiceKey> {
        self.services
            .iter()
            .filter(|(_, held)| admits(&held.service, subscriber))
            .map(|(key, _)| key.clone())
            .collect()
    }
}

fn service_message(service: &ClusterService) -> WireService {
    let export = service.export.clone().unwrap_or_default();
    WireService::of(service, &export)
}

/// Whether the export's access policy admits the subscriber: no policy
/// admits every cluster of the set.
fn admits(service: &ClusterService, subscriber: &Subscriber) -> bool {
    service
        .export
        .as_ref()
        .and_then(|export| export.access.as_ref())
        .is_none_or(|access| access.admits(&subscriber.cluster, subscriber.network.as_ref()))
}
