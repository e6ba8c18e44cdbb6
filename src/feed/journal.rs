//! What a cluster publishes, by revision: its exported services as last
//! translated, each with the revision it last changed at, and the
//! services withdrawn since, so a subscriber resuming from a revision gets
//! only what changed after it. A catch-up costs the changes since the
//! subscriber's revision (an index by revision), not the services held.
//! Each subscriber sees only the services whose access policy admits it.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use super::wire::{
    FEED_VERSION, FeedLimits, Hello, Message, WireError, WireKey, WireService, within,
};
use crate::model::{AccessPolicy, Cluster, ClusterId, ClusterService, NetworkId, ServiceKey};

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
    audience: Audience,
}

/// Who may have been sent a service's name since the journal has known
/// it: every version's access policy, joined. A subscriber outside it is
/// never told the service is withdrawn, since it never learnt the name.
#[derive(Debug, Clone, PartialEq)]
enum Audience {
    Everyone,
    Only(AccessPolicy),
}

impl Audience {
    fn of(service: &ClusterService) -> Self {
        match service.export.as_ref().and_then(|e| e.access.as_ref()) {
            None => Audience::Everyone,
            Some(access) => Audience::Only(access.clone()),
        }
    }

    /// This audience and `other`'s.
    fn join(self, other: Audience) -> Self {
        match (self, other) {
            (Audience::Only(mut a), Audience::Only(b)) => {
                a.clusters.extend(b.clusters);
                a.networks.extend(b.networks);
                Audience::Only(a)
            }
            _ => Audience::Everyone,
        }
    }

    fn includes(&self, subscriber: &Subscriber) -> bool {
        match self {
            Audience::Everyone => true,
            Audience::Only(access) => {
                access.admits(&subscriber.cluster, subscriber.network.as_ref())
            }
        }
    }
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
    /// Withdrawn services, the revision they went at and who may have
    /// learnt their names.
    tombstones: BTreeMap<ServiceKey, (u64, Audience)>,
    /// The same, oldest first, to forget the oldest (entries a later
    /// change replaced are skipped).
    tombstone_order: VecDeque<(u64, ServiceKey)>,
    max_tombstones: usize,
    /// Every service's latest change, present or withdrawn, by revision.
    index: BTreeMap<u64, ServiceKey>,
    /// The lowest revision changes can still be given since.
    horizon: u64,
    limits: FeedLimits,
    /// Exported services left out for being larger than a subscriber
    /// takes ([`FeedLimits`]), each with why.
    oversized: BTreeMap<ServiceKey, WireError>,
}

impl Journal {
    /// An empty journal of a publisher instance `epoch` (random per
    /// process, so revisions of two instances are never confused).
    pub fn new(epoch: u64, max_tombstones: usize, limits: FeedLimits) -> Self {
        Self {
            limits,
            oversized: BTreeMap::new(),
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
        self.oversized.clear();
        let mut published: std::collections::BTreeSet<&ServiceKey> =
            std::collections::BTreeSet::new();
        for (key, service) in &cluster.services {
            if service.export.is_none() {
                continue;
            }
            // A service no subscriber would take would make each refuse
            // the whole feed: it is left out here, and said.
            if let Err(error) = within(service, &self.limits) {
                self.oversized.insert(key.clone(), error);
                continue;
            }
            published.insert(key);
            if let Some(held) = self.services.get(key)
                && (Arc::ptr_eq(&held.service, service) || held.service == *service)
            {
                continue;
            }
            self.revision += 1;
            let revision = self.revision;
            let (previous, audience) = match self.services.remove(key) {
                Some(held) => (Some(held.changed), held.audience),
                None => match self.tombstones.remove(key) {
                    Some((changed, audience)) => (Some(changed), audience),
                    None => (None, Audience::of(service)),
                },
            };
            if let Some(previous) = previous {
                self.index.remove(&previous);
            }
            self.services.insert(
                key.clone(),
                Published {
                    service: Arc::clone(service),
                    changed: revision,
                    audience: audience.join(Audience::of(service)),
                },
            );
            self.index.insert(revision, key.clone());
        }
        let gone: Vec<ServiceKey> = self
            .services
            .keys()
            .filter(|key| !published.contains(key))
            .cloned()
            .collect();
        for key in gone {
            let Some(held) = self.services.remove(&key) else {
                continue;
            };
            self.index.remove(&held.changed);
            self.revision += 1;
            self.index.insert(self.revision, key.clone());
            self.tombstones
                .insert(key.clone(), (self.revision, held.audience));
            self.tombstone_order.push_back((self.revision, key));
        }
        while self.tombstones.len() > self.max_tombstones {
            let Some((revision, key)) = self.tombstone_order.pop_front() else {
                break;
            };
            if self.tombstones.get(&key).map(|(at, _)| *at) == Some(revision) {
                self.tombstones.remove(&key);
                self.index.remove(&revision);
                self.horizon = self.horizon.max(revision);
            }
        }
        // Entries a later change replaced are skipped when the oldest are
        // forgotten; a service exported and withdrawn again and again
        // must not grow the queue past twice the tombstones held.
        if self.tombstone_order.len() > 2 * self.max_tombstones {
            let tombstones = &self.tombstones;
            self.tombstone_order
                .retain(|(at, key)| tombstones.get(key).map(|(t, _)| *t) == Some(*at));
        }
        self.revision != before
    }

    /// The exported services left out of the feed for their size.
    pub fn oversized(&self) -> &BTreeMap<ServiceKey, WireError> {
        &self.oversized
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
                    .filter_map(|(_, key)| self.item_for(key, subscriber))
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
    /// admitting it, else withdrawn if it may have learnt the name, else
    /// nothing (a subscriber never admitted never hears of it).
    fn item_for(&self, key: &ServiceKey, subscriber: &Subscriber) -> Option<Item> {
        let audience = match (self.services.get(key), self.tombstones.get(key)) {
            (Some(held), _) if admits(&held.service, subscriber) => {
                return Some(Item::Service(Arc::clone(&held.service)));
            }
            (Some(held), _) => &held.audience,
            (None, Some((_, audience))) => audience,
            (None, None) => return None,
        };
        audience
            .includes(subscriber)
            .then(|| Item::Withdrawn(key.clone()))
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
