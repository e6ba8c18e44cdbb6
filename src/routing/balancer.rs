//! The backend chooser: which backend of a port route carries a connection.
//!
//! One [`Chooser`] serves a whole gateway. It is shared by every connection
//! and outlives route reloads: it keeps per-backend state (active connections,
//! health) keyed by [`BackendId`], and per service port state (the
//! round-robin position, the session-affinity table) keyed by service,
//! protocol and port. Like the rest of routing it does no I/O and reads no
//! clock: the caller passes `now` and a random number generator.
//!
//! A pick goes:
//! 1. **Candidates**: the route's backends inside the service's fence (if
//!    it has one), minus those this connection has already `tried`, minus
//!    those ejected by outlier detection or held out by active health
//!    checks. If every untried backend is out, those are candidates after
//!    all (panic mode, as Envoy does): a possibly bad backend beats none;
//!    one outside the fence never is. No untried backend at all: no pick.
//! 2. **Locality** narrows the candidates to one tier: `cluster` has three,
//!    the viewer's cluster, then the rest of its network, then the other
//!    networks; `network` has two, the viewer's network, then the others;
//!    `none` has one, every candidate. The first tier with a candidate takes
//!    the connection, unless it has fewer than `minimum_healthy` candidates
//!    (`tuning.localityMinimumHealthy`, 1 by default): then it takes only
//!    that fraction of new connections (2 of a minimum of 5: 40 %) and the
//!    next tier with candidates is asked for the rest the same way, the last
//!    one taking whatever is left. So a local tier losing backends sheds
//!    load gradually, not all at once. Health comes first, so a local
//!    cluster whose backends are all ejected yields to healthy ones
//!    elsewhere.
//! 3. **Session affinity** (`ClientIP` services): a client's remembered
//!    backend is reused while it is still a candidate after steps 1 and 2 and
//!    was last used less than `sessionAffinityConfig.clientIP.timeoutSeconds`
//!    ago (10800 by default); otherwise the pick below is remembered instead.
//!    Each service port remembers at most [`AFFINITY_CAPACITY`] clients.
//! 4. **Balancer**: `p2c` draws two distinct candidates at random and takes
//!    the one with fewer active connections (counted by [`ActiveGuard`]s);
//!    `round-robin` takes the next candidate from a rotating index per
//!    service port.
//!
//! Passive outlier detection follows [`OutlierPolicy`]: after
//! `consecutive_failures` failures in a row a backend is ejected for
//! `base_ejection * 2^(n - 1)`, at most `max_ejection`, where `n` counts its
//! ejections. A success resets the failures in a row. Failures reported
//! while an ejection is in force do not extend it. The ejection count decays
//! back to zero when the backend is next ejected at least `max_ejection`
//! after its previous ejection ended, provided it reported a success in
//! between: a backend that held up that long starts again from
//! `base_ejection`.
//!
//! Cost of a pick: one pass over the route's backends into a flag buffer on
//! the stack (routes of more than 256 backends use a heap buffer), a few
//! passes over those flags, and for p2c two lookups of active counts. Nothing is
//! allocated in the common case; locks are read locks or short mutexes,
//! never held across anything slow. While no backend is ejected, picks look
//! up no health at all.

mod affinity;
mod outlier;
mod policy;
mod shares;

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{Duration, Instant};

use serde::Serialize;

pub use affinity::AFFINITY_CAPACITY;
pub use outlier::{OutlierPolicy, ProbeThresholds};
pub use policy::PolicySource;
pub use shares::{LocalityReport, TierShare};

use self::affinity::AffinityTable;
use self::outlier::Health;
use self::policy::{Policies, Resolved};
use serde::Deserialize;

use super::{PortRoute, RoutedBackend, RoutedBackends, ServiceRoutes};
pub use crate::model::Locality;
use crate::model::{ClusterId, NetworkId, Protocol, RoutingPolicy, ServiceKey, SessionAffinity};

/// How backends are chosen among those a port may use.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Balancer {
    /// Power of two choices on active connections.
    #[default]
    P2c,
    RoundRobin,
}

/// Kubernetes' default `sessionAffinityConfig.clientIP.timeoutSeconds`.
pub const DEFAULT_AFFINITY_TIMEOUT: Duration = Duration::from_secs(10_800);

/// Routes with at most this many backends are picked from with no allocation.
const INLINE_BACKENDS: usize = 256;

/// Identifies a backend for health and load: addresses overlap across
/// networks, so the network is part of it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct BackendId {
    pub network: NetworkId,
    pub address: SocketAddr,
}

impl BackendId {
    pub fn of(routed: RoutedBackend<'_>) -> Self {
        Self {
            network: routed.network().clone(),
            address: SocketAddr::new(routed.backend.address, routed.backend.port),
        }
    }

    /// Whether `routed` is this backend; allocates nothing.
    pub fn matches(&self, routed: RoutedBackend<'_>) -> bool {
        self.address.ip() == routed.backend.address
            && self.address.port() == routed.backend.port
            && self.network == *routed.network()
    }
}

impl fmt::Display for BackendId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.network, self.address)
    }
}

/// Counts one active connection to a backend until dropped.
#[must_use = "the connection counts as active only while the guard lives"]
#[derive(Debug)]
pub struct ActiveGuard {
    slot: Arc<Slot>,
}

impl Drop for ActiveGuard {
    fn drop(&mut self) {
        self.slot.active.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The state of one backend.
#[derive(Debug, Default)]
struct Slot {
    active: AtomicUsize,
    health: Mutex<Health>,
}

/// The state of one service port.
#[derive(Debug)]
struct RouteState {
    next: AtomicUsize,
    affinity: Mutex<AffinityTable>,
}

/// Backend states: network → address → slot, so lookups borrow from the route.
type Slots = HashMap<NetworkId, HashMap<SocketAddr, Arc<Slot>>>;

/// Service port states: service → (protocol, port) → state.
type RouteStates = HashMap<ServiceKey, HashMap<(Protocol, u16), Arc<RouteState>>>;

/// Locality tiers at most (`cluster`: this cluster, this network, the rest).
const MAX_TIERS: usize = 3;

// Flags of one backend during a pick.
const UNTRIED: u8 = 1;
const HEALTHY: u8 = 2;
const IN_CLUSTER: u8 = 4;
const ON_NETWORK: u8 = 8;
/// Outside the service's fence: never a candidate, not even in panic mode.
const OUTSIDE: u8 = 16;

/// Chooses backends for connections; see the module documentation.
///
/// Locks, taken in this order only: `routes` or `slots` (never both), then
/// a route's affinity mutex or a slot's health mutex.
#[derive(Debug)]
pub struct Chooser {
    balancer: Balancer,
    /// The gateway's locality and minimum, and its admin's per-service layers.
    policies: Policies,
    viewer: ClusterId,
    viewer_network: NetworkId,
    outliers: OutlierPolicy,
    slots: RwLock<Slots>,
    /// How many slots have an ejection deadline set (passed or not): while
    /// none do, picks skip health lookups.
    marked: AtomicUsize,
    routes: RwLock<RouteStates>,
    affinity_capacity: usize,
}

impl Chooser {
    pub fn new(
        balancer: Balancer,
        locality: Locality,
        viewer: ClusterId,
        viewer_network: NetworkId,
        outliers: OutlierPolicy,
    ) -> Self {
        Self {
            balancer,
            policies: Policies {
                locality,
                minimum_healthy: 1,
                admin: HashMap::new(),
            },
            viewer,
            viewer_network,
            outliers,
            slots: RwLock::default(),
            marked: AtomicUsize::new(0),
            routes: RwLock::default(),
            affinity_capacity: AFFINITY_CAPACITY,
        }
    }

    /// The same chooser, a locality tier with fewer than `minimum` candidate
    /// backends taking only that fraction of new connections (at least 1).
    pub fn with_locality_minimum(mut self, minimum: u32) -> Self {
        self.policies.minimum_healthy = minimum.max(1);
        self
    }

    /// The same chooser, the admin's layer of these services' policies
    /// over what their exporters say (`routing` in `gateway.yaml`).
    pub fn with_admin_policies(
        mut self,
        policies: impl IntoIterator<Item = (ServiceKey, RoutingPolicy)>,
    ) -> Self {
        self.policies.admin = policies.into_iter().collect();
        self
    }

    /// The same chooser remembering at most `capacity` clients per service port.
    #[cfg(test)]
    fn with_affinity_capacity(mut self, capacity: usize) -> Self {
        self.affinity_capacity = capacity;
        self
    }

    /// Picks a backend of `route` for a connection from `client`, skipping
    /// `tried` (backends this connection already failed on).
    pub fn pick<'r>(
        &self,
        service: &ServiceRoutes,
        route: &'r PortRoute,
        client: IpAddr,
        tried: &[BackendId],
        now: Instant,
        rng: &mut fastrand::Rng,
    ) -> Option<RoutedBackend<'r>> {
        let backends = &route.backends;
        if backends.is_empty() {
            return None;
        }
        let sticky = service.session_affinity == SessionAffinity::ClientIp;
        let route_state = (sticky || self.balancer == Balancer::RoundRobin)
            .then(|| self.route_state(service, route));

        let slots = read(&self.slots);
        let mut inline = [0u8; INLINE_BACKENDS];
        let mut spilled = Vec::new();
        let flags: &mut [u8] = if backends.len() <= INLINE_BACKENDS {
            &mut inline[..backends.len()]
        } else {
            spilled.resize(backends.len(), 0);
            &mut spilled
        };
        let check_health = self.marked.load(Ordering::Acquire) > 0;
        let policy = self.policies.resolve(service);
        for (flag, routed) in flags.iter_mut().zip(backends) {
            *flag = self.classify(&slots, routed, &policy, tried, now, check_health);
        }
        let Tier {
            candidates,
            eligible,
        } = narrow(flags, &policy, rng)?;

        let Some(state) = route_state.as_deref().filter(|_| sticky) else {
            let state = route_state.as_deref();
            let index = self.choose(&slots, &candidates, state, backends, rng)?;
            return backends.get(index);
        };
        let timeout = service
            .session_affinity_timeout
            .map_or(DEFAULT_AFFINITY_TIMEOUT, |seconds| {
                Duration::from_secs(u64::from(seconds))
            });
        let mut table = lock(&state.affinity);
        let reused = table.reuse(client, now, timeout, |id| {
            // One pass: `get` would look up each index's way again.
            backends
                .iter()
                .enumerate()
                .find(|(index, routed)| eligible.contains(*index) && id.matches(*routed))
                .map(|(index, _)| index)
        });
        if let Some(index) = reused {
            return backends.get(index);
        }
        let index = self.choose(&slots, &candidates, Some(state), backends, rng)?;
        let routed = backends.get(index)?;
        table.remember(client, || BackendId::of(routed), now, timeout);
        Some(routed)
    }

    /// Counts an active connection until the guard drops (for p2c "least active").
    pub fn start(&self, id: &BackendId) -> ActiveGuard {
        self.with_slot(id, |slot| {
            slot.active.fetch_add(1, Ordering::Relaxed);
            ActiveGuard {
                slot: Arc::clone(slot),
            }
        })
    }

    /// How many connections to `id` are active.
    pub fn active(&self, id: &BackendId) -> usize {
        read(&self.slots)
            .get(&id.network)
            .and_then(|addresses| addresses.get(&id.address))
            .map_or(0, |slot| slot.active.load(Ordering::Relaxed))
    }

    pub fn report_success(&self, id: &BackendId) {
        let slots = read(&self.slots);
        if let Some(slot) = slots
            .get(&id.network)
            .and_then(|addresses| addresses.get(&id.address))
        {
            self.update_health(slot, Health::succeed);
        }
    }

    /// Counts an active health check of `id` (see [`ProbeThresholds`]):
    /// `Some(true)` when it took the backend out of rotation, `Some(false)`
    /// when it brought it back.
    pub fn report_probe(
        &self,
        id: &BackendId,
        answered: bool,
        thresholds: ProbeThresholds,
    ) -> Option<bool> {
        self.with_slot(id, |slot| {
            self.update_health(slot, |health| health.probe(answered, thresholds))
        })
    }

    /// How many backends active health checks hold out of rotation now.
    pub fn probed_down_count(&self) -> usize {
        read(&self.slots)
            .values()
            .flat_map(HashMap::values)
            .filter(|slot| lock(&slot.health).probe_down())
            .count()
    }

    /// Whether active health checks hold `id` out of rotation now.
    #[cfg(test)]
    pub fn probed_down(&self, id: &BackendId) -> bool {
        read(&self.slots)
            .get(&id.network)
            .and_then(|addresses| addresses.get(&id.address))
            .is_some_and(|slot| lock(&slot.health).probe_down())
    }

    pub fn report_failure(&self, id: &BackendId, now: Instant) {
        let outliers = self.outliers;
        self.with_slot(id, |slot| {
            self.update_health(slot, |health| {
                health.fail(now, &outliers);
            });
        });
    }

    /// For /debug: ejected backends with the time left, by network and address.
    pub fn ejected(&self, now: Instant) -> Vec<(BackendId, Duration)> {
        if self.marked.load(Ordering::Acquire) == 0 {
            return Vec::new();
        }
        let slots = read(&self.slots);
        let mut ejected: Vec<(BackendId, Duration)> = slots
            .iter()
            .flat_map(|(network, addresses)| {
                addresses.iter().filter_map(move |(address, slot)| {
                    let left = lock(&slot.health).remaining(now)?;
                    Some((
                        BackendId {
                            network: network.clone(),
                            address: *address,
                        },
                        left,
                    ))
                })
            })
            .collect();
        ejected.sort_by(|(a, _), (b, _)| {
            (a.network.as_str(), a.address).cmp(&(b.network.as_str(), b.address))
        });
        ejected
    }

    /// How many clients are remembered for session affinity, across service ports.
    pub fn affinity_len(&self) -> usize {
        read(&self.routes)
            .values()
            .flat_map(HashMap::values)
            .map(|state| lock(&state.affinity).len())
            .sum()
    }

    /// Every backend the chooser holds state for: load or health, or a
    /// client remembered as using it. Only backends picked since they were
    /// routed are here, not every routed backend.
    pub fn known(&self) -> HashSet<BackendId> {
        let mut known: HashSet<BackendId> = read(&self.slots)
            .iter()
            .flat_map(|(network, addresses)| {
                addresses.keys().map(move |address| BackendId {
                    network: network.clone(),
                    address: *address,
                })
            })
            .collect();
        for state in read(&self.routes).values().flat_map(HashMap::values) {
            known.extend(lock(&state.affinity).backends().cloned());
        }
        known
    }

    /// Forgets backends that `keep` refuses (call after a reload with the
    /// backends still routed): their load and health state, and the clients
    /// remembered as using them. Guards of forgotten backends stay harmless.
    pub fn retain(&self, keep: impl Fn(&BackendId) -> bool) {
        {
            let mut slots = write(&self.slots);
            for (network, addresses) in slots.iter_mut() {
                addresses.retain(|address, slot| {
                    let id = BackendId {
                        network: network.clone(),
                        address: *address,
                    };
                    if keep(&id) {
                        return true;
                    }
                    if lock(&slot.health).marked() {
                        self.marked.fetch_sub(1, Ordering::AcqRel);
                    }
                    false
                });
            }
            slots.retain(|_, addresses| !addresses.is_empty());
        }
        let routes = read(&self.routes);
        for state in routes.values().flat_map(HashMap::values) {
            lock(&state.affinity).retain(&keep);
        }
    }

    /// Forgets the round-robin position and affinity of service ports that
    /// `keep` refuses (call after a reload with the ports still routed).
    pub fn retain_routes(&self, keep: impl Fn(&ServiceKey, Protocol, u16) -> bool) {
        let mut routes = write(&self.routes);
        for (service, ports) in routes.iter_mut() {
            ports.retain(|(protocol, port), _| keep(service, *protocol, *port));
        }
        routes.retain(|_, ports| !ports.is_empty());
    }

    /// The flags of one backend for this pick.
    fn classify(
        &self,
        slots: &Slots,
        routed: RoutedBackend<'_>,
        policy: &Resolved<'_>,
        tried: &[BackendId],
        now: Instant,
        check_health: bool,
    ) -> u8 {
        if policy
            .fence
            .is_some_and(|fence| !fence.admits(routed.backend.cluster, routed.attested_network()))
        {
            return OUTSIDE;
        }
        let mut flag = 0;
        if !tried.iter().any(|id| id.matches(routed)) {
            flag |= UNTRIED;
        }
        let ejected = check_health
            && slot_of(slots, routed).is_some_and(|slot| {
                self.update_health(slot, |health| {
                    health.ejected(now).is_some() || health.probe_down()
                })
            });
        if !ejected {
            flag |= HEALTHY;
        }
        if policy.locality != Locality::None {
            if *routed.network() == self.viewer_network {
                flag |= ON_NETWORK;
            }
            if *routed.backend.cluster == self.viewer {
                flag |= IN_CLUSTER;
            }
        }
        flag
    }

    /// The index in the route of the balancer's choice among the candidates.
    fn choose(
        &self,
        slots: &Slots,
        candidates: &Candidates<'_>,
        state: Option<&RouteState>,
        backends: &RoutedBackends,
        rng: &mut fastrand::Rng,
    ) -> Option<usize> {
        let count = candidates.count;
        let nth = |n| candidates.nth(n);
        match self.balancer {
            Balancer::RoundRobin => {
                let next = state.map_or(0, |state| state.next.fetch_add(1, Ordering::Relaxed));
                nth(next % count)
            }
            Balancer::P2c if count == 1 => nth(0),
            Balancer::P2c => {
                let first = rng.usize(..count);
                let mut second = rng.usize(..count - 1);
                if second >= first {
                    second += 1;
                }
                let (a, b) = (nth(first)?, nth(second)?);
                let active = |index: usize| {
                    backends
                        .get(index)
                        .and_then(|routed| slot_of(slots, routed))
                        .map_or(0, |slot| slot.active.load(Ordering::Relaxed))
                };
                Some(if active(b) < active(a) { b } else { a })
            }
        }
    }

    /// The state of a service port, created on first use.
    fn route_state(&self, service: &ServiceRoutes, route: &PortRoute) -> Arc<RouteState> {
        let key = (route.protocol, route.port);
        if let Some(state) = read(&self.routes)
            .get(&service.key)
            .and_then(|ports| ports.get(&key))
        {
            return Arc::clone(state);
        }
        let mut routes = write(&self.routes);
        let state = routes
            .entry(service.key.clone())
            .or_default()
            .entry(key)
            .or_insert_with(|| {
                Arc::new(RouteState {
                    next: AtomicUsize::new(0),
                    affinity: Mutex::new(AffinityTable::new(self.affinity_capacity)),
                })
            });
        Arc::clone(state)
    }

    /// Runs `f` on the slot of `id`, created if missing, while the slot
    /// table is locked so [`Chooser::retain`] cannot drop it meanwhile.
    fn with_slot<R>(&self, id: &BackendId, f: impl FnOnce(&Arc<Slot>) -> R) -> R {
        {
            let slots = read(&self.slots);
            if let Some(slot) = slots
                .get(&id.network)
                .and_then(|addresses| addresses.get(&id.address))
            {
                return f(slot);
            }
        }
        let mut slots = write(&self.slots);
        let slot = slots
            .entry(id.network.clone())
            .or_default()
            .entry(id.address)
            .or_default();
        f(slot)
    }

    /// Runs `f` on a backend's health, keeping the count of marked slots.
    fn update_health<R>(&self, slot: &Slot, f: impl FnOnce(&mut Health) -> R) -> R {
        let mut health = lock(&slot.health);
        let before = health.marked();
        let result = f(&mut health);
        match (before, health.marked()) {
            (false, true) => {
                self.marked.fetch_add(1, Ordering::AcqRel);
            }
            (true, false) => {
                self.marked.fetch_sub(1, Ordering::AcqRel);
            }
            _ => {}
        }
        result
    }
}

/// The backends of a route a pick may choose from: those whose flags hold
/// every `required` bit, `count` of them.
struct Candidates<'f> {
    flags: &'f [u8],
    required: u8,
    excluded: u8,
    count: usize,
}

/// The flags a candidate must have, and how many backends have them:
/// untried and healthy (or merely untried in panic mode), then the
/// locality tier this connection goes to (module documentation, step 2).
fn narrow<'f>(flags: &'f [u8], policy: &Resolved<'_>, rng: &mut fastrand::Rng) -> Option<Tier<'f>> {
    let health = health_of(flags)?;
    let tiers = policy::tiers(policy.locality);
    // One pass over the flags per tier, each tier counted once.
    let candidates: [Candidates<'f>; MAX_TIERS] =
        std::array::from_fn(|index| tier_of(flags, health, tiers, index));
    let (reach, shares) = policy::spread(
        &candidates.each_ref().map(|tier| tier.count),
        policy.minimum_healthy,
    )?;
    let flag = |index: usize| tiers.get(index).map_or(0, |(flag, _)| *flag);
    let eligible = Candidates::with(flags, health | flag(reach), 0);
    // A draw only when a nearer tier is short of its minimum.
    let chosen = if shares[reach] >= 1.0 {
        reach
    } else {
        let drawn = rng.f64();
        let mut below = 0.0;
        (0..reach)
            .find(|index| {
                below += shares[*index];
                drawn < below
            })
            .unwrap_or(reach)
    };
    let [near, middle, far] = candidates;
    let candidates = match chosen {
        0 => near,
        1 => middle,
        _ => far,
    };
    Some(Tier {
        candidates,
        eligible,
    })
}

/// The candidates' health flags: untried and healthy, or, when no
/// backend is both, merely untried (panic mode); `None`: no candidate.
fn health_of(flags: &[u8]) -> Option<u8> {
    [UNTRIED | HEALTHY, UNTRIED]
        .into_iter()
        .find(|required| Candidates::with(flags, *required, 0).count > 0)
}

/// Tier `index` of `tiers`: its flag, without the nearer tier's. A tier
/// past the last has no candidate.
fn tier_of<'f>(flags: &'f [u8], health: u8, tiers: &[(u8, &str)], index: usize) -> Candidates<'f> {
    let Some((flag, _)) = tiers.get(index) else {
        // No backend has every flag: contains nothing.
        return Candidates {
            flags,
            required: u8::MAX,
            excluded: 0,
            count: 0,
        };
    };
    let nearer = index.checked_sub(1).and_then(|before| tiers.get(before));
    Candidates::with(flags, health | flag, nearer.map_or(0, |(flag, _)| *flag))
}

/// Where a pick goes: the tier's candidates, and those a client's
/// remembered backend may be one of (every tier that takes a share), so
/// that affinity survives whichever tier this connection's draw chose.
struct Tier<'f> {
    candidates: Candidates<'f>,
    eligible: Candidates<'f>,
}

impl<'f> Candidates<'f> {
    fn with(flags: &'f [u8], required: u8, excluded: u8) -> Self {
        let count = flags
            .iter()
            .filter(|f| *f & required == required && *f & excluded == 0)
            .count();
        Self {
            flags,
            required,
            excluded,
            count,
        }
    }

    fn contains(&self, index: usize) -> bool {
        self.flags
            .get(index)
            .is_some_and(|flag| flag & self.required == self.required && flag & self.excluded == 0)
    }

    /// How many of them lack `flag`.
    fn count_without(&self, flag: u8) -> usize {
        (0..self.flags.len())
            .filter(|index| {
                self.contains(*index) && self.flags.get(*index).is_some_and(|f| f & flag == 0)
            })
            .count()
    }

    /// The route index of the `n`-th candidate (from 0).
    fn nth(&self, n: usize) -> Option<usize> {
        (0..self.flags.len())
            .filter(|index| self.contains(*index))
            .nth(n)
    }
}

/// The state of a routed backend, if it has any; allocates nothing.
fn slot_of<'s>(slots: &'s Slots, routed: RoutedBackend<'_>) -> Option<&'s Arc<Slot>> {
    slots.get(routed.network())?.get(&SocketAddr::new(
        routed.backend.address,
        routed.backend.port,
    ))
}

// A panic while a lock is held leaves plain counters behind, still usable.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

fn read<T>(lock: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    lock.read().unwrap_or_else(PoisonError::into_inner)
}

fn write<T>(lock: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    lock.write().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod spillover_tests;

#[cfg(test)]
mod policy_tests;
