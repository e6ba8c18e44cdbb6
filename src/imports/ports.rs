//! Import ports: each (service, port) of a multi-cluster ClusterSetIP
//! service gets one port of the gateway, so that kube-proxy's DNAT
//! (ClusterSetIP:port → gateway pod:import port) still tells the gateway
//! which service port a connection is for. Pure.
//!
//! The allocation is deterministic and needs no storage of its own: ports
//! already recorded (on Strait's ServiceImports, [`crate::model::import_record`]) keep their
//! number; a new service port prefers the slot its name hashes to and probes
//! upwards from there, in service order, skipping ports that are taken or
//! were released too recently to be handed out again. Two replicas, or a
//! restarted leader, that read the same records compute the same table; a
//! file setup, which records nothing, computes the same table from the same
//! files.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::str::FromStr;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::model::PortKey;

/// The gateway ports import ports are taken from, both ends included.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortRange {
    first: u16,
    last: u16,
}

/// Why a port range was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PortRangeError {
    #[error("{0:?} is not FIRST-LAST (for example 20000-29999)")]
    Syntax(String),
    #[error("{0:?} is not a port number (1-65535)")]
    Port(String),
    #[error("the range {first}-{last} is empty: the first port is above the last")]
    Empty { first: u16, last: u16 },
}

impl PortRange {
    pub fn new(first: u16, last: u16) -> Result<Self, PortRangeError> {
        if first == 0 {
            return Err(PortRangeError::Port("0".to_owned()));
        }
        if first > last {
            return Err(PortRangeError::Empty { first, last });
        }
        Ok(Self { first, last })
    }

    pub fn first(&self) -> u16 {
        self.first
    }

    pub fn last(&self) -> u16 {
        self.last
    }

    /// How many ports the range holds.
    pub fn len(&self) -> usize {
        usize::from(self.last - self.first) + 1
    }

    pub fn is_empty(&self) -> bool {
        false
    }

    pub fn contains(&self, port: u16) -> bool {
        (self.first..=self.last).contains(&port)
    }

    fn offset(&self, port: u16) -> usize {
        usize::from(port - self.first)
    }

    fn port_at(&self, offset: usize) -> u16 {
        // `offset < len()`, so the sum stays within `first..=last`.
        self.first + u16::try_from(offset).unwrap_or(0)
    }
}

impl Default for PortRange {
    fn default() -> Self {
        Self {
            first: 20000,
            last: 29999,
        }
    }
}

impl FromStr for PortRange {
    type Err = PortRangeError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let (first, last) = text
            .split_once('-')
            .ok_or_else(|| PortRangeError::Syntax(text.to_owned()))?;
        let number = |part: &str| {
            part.trim()
                .parse::<u16>()
                .map_err(|_| PortRangeError::Port(part.trim().to_owned()))
        };
        PortRange::new(number(first)?, number(last)?)
    }
}

impl fmt::Display for PortRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.first, self.last)
    }
}

impl Serialize for PortRange {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for PortRange {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// The import port of every service port that has one, and the service
/// ports the range had no room for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Allocation {
    pub ports: BTreeMap<PortKey, u16>,
    /// Service ports left without an import port: the range is full.
    pub exhausted: Vec<PortKey>,
    /// Service ports left without an import port: their namespace holds
    /// its quota already ([`NamespaceQuota`](super::NamespaceQuota)).
    pub over_quota: Vec<PortKey>,
}

impl Allocation {
    /// The service port behind each import port.
    pub fn by_import_port(&self) -> impl Iterator<Item = (u16, &PortKey)> {
        self.ports.iter().map(|(key, port)| (*port, key))
    }
}

/// Import ports released within their grace period, each with the port
/// key that held it last.
pub type Released = BTreeMap<u16, PortKey>;

/// Import ports that left the records recently: not handed out to another
/// key for a grace period, so a kube-proxy or gateway still acting on the
/// old mapping cannot send a connection to the service (or pod) that would
/// get the port next. The key that held one may take it back (its derived
/// Service was edited, say). Pure: the caller says what is recorded now and
/// when "now" is.
#[derive(Debug, Clone, Default)]
pub struct ReleasedPorts {
    recorded: BTreeMap<u16, PortKey>,
    released: BTreeMap<u16, (PortKey, Instant)>,
}

impl ReleasedPorts {
    /// Notes the ports recorded now and returns those still in their grace
    /// period (released less than `grace` before `now`) with their last
    /// holder.
    pub fn observe(
        &mut self,
        recorded: &BTreeMap<PortKey, u16>,
        now: Instant,
        grace: Duration,
    ) -> Released {
        let current: BTreeMap<u16, PortKey> = recorded
            .iter()
            .map(|(key, port)| (*port, key.clone()))
            .collect();
        for (port, key) in &self.recorded {
            if !current.contains_key(port) {
                self.released.insert(*port, (key.clone(), now));
            }
        }
        for back in current.keys() {
            self.released.remove(back);
        }
        self.released
            .retain(|_, (_, at)| now.saturating_duration_since(*at) < grace);
        self.recorded = current;
        self.released
            .iter()
            .map(|(port, (key, _))| (*port, key.clone()))
            .collect()
    }
}

/// Stable across builds and platforms (FNV-1a), unlike std's hasher: the
/// preferred slot of a service port must never change with the binary.
fn preferred_offset(key: &PortKey, range: &PortRange) -> usize {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let protocol = key.protocol.as_str();
    let port = key.port.to_be_bytes();
    // A service port hashes as it always has; a pod's adds its name.
    let (cluster, label) = key.pod.as_ref().map_or((&b""[..], &b""[..]), |pod| {
        (pod.cluster.as_str().as_bytes(), pod.label.as_bytes())
    });
    let parts: [&[u8]; 9] = [
        key.service.namespace.as_bytes(),
        b"/",
        key.service.name.as_bytes(),
        b":",
        &port,
        b"/",
        protocol.as_bytes(),
        cluster,
        label,
    ];
    for byte in parts.into_iter().flatten() {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    // The range holds at most 65535 ports, so the remainder fits.
    usize::try_from(hash % range.len() as u64).unwrap_or(0)
}

/// The recorded ports alone, as a replica's data plane uses them: a port
/// outside the range is left out, and so is a port claimed twice.
/// [`Observed::recorded_claims`](crate::discovery::observed::Observed::recorded_claims)
/// settles those before; one that still reaches here goes to no claimant,
/// never to the first in key order (a tenant names its namespace).
pub fn recorded_allocation<'a>(
    recorded: impl IntoIterator<Item = (&'a PortKey, &'a u16)>,
    range: &PortRange,
) -> Allocation {
    let recorded: Vec<(&PortKey, u16)> = recorded
        .into_iter()
        .filter(|(_, port)| range.contains(**port))
        .map(|(key, port)| (key, *port))
        .collect();
    let mut claims = vec![0_u8; range.len()];
    for (_, port) in &recorded {
        let count = &mut claims[range.offset(*port)];
        *count = count.saturating_add(1);
    }
    let mut allocation = Allocation::default();
    for (key, port) in recorded {
        if claims[range.offset(port)] == 1 {
            allocation.ports.insert(key.clone(), port);
        }
    }
    allocation
}

/// Allocates import ports for `wanted` (every service port that needs one).
/// `recorded` are the ports already handed out (from the derived Services);
/// a recorded port outside the range, or claimed twice, is allocated anew.
/// `released` ports (within their grace period) go to no key but the one
/// that held them last.
pub fn allocate<'a>(
    wanted: impl IntoIterator<Item = &'a PortKey>,
    recorded: &BTreeMap<PortKey, u16>,
    released: &Released,
    range: &PortRange,
) -> Allocation {
    let wanted: BTreeSet<&PortKey> = wanted.into_iter().collect();
    let mut allocation = recorded_allocation(
        recorded.iter().filter(|(key, _)| wanted.contains(key)),
        range,
    );
    // Every recorded port is held, also one whose key is no longer wanted:
    // its derived Service still exists (it is deleted after this pass's
    // applies), and once it is gone the port waits out its grace period in
    // `released`. Handing it out now would skip that.
    let mut held = vec![false; range.len()];
    for port in recorded
        .values()
        .chain(allocation.ports.values())
        .filter(|p| range.contains(**p))
    {
        held[range.offset(*port)] = true;
    }
    // A key takes back the port it held last.
    for (port, holder) in released {
        if range.contains(*port)
            && !held[range.offset(*port)]
            && wanted.contains(holder)
            && !allocation.ports.contains_key(holder)
        {
            held[range.offset(*port)] = true;
            allocation.ports.insert(holder.clone(), *port);
        }
    }
    let mut taken = held;
    for port in released.keys().filter(|p| range.contains(**p)) {
        taken[range.offset(*port)] = true;
    }
    for key in wanted {
        if allocation.ports.contains_key(key) {
            continue;
        }
        let start = preferred_offset(key, range);
        let free = (0..range.len())
            .map(|step| (start + step) % range.len())
            .find(|offset| !taken[*offset]);
        match free {
            Some(offset) => {
                taken[offset] = true;
                allocation.ports.insert(key.clone(), range.port_at(offset));
            }
            None => allocation.exhausted.push(key.clone()),
        }
    }
    allocation
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Protocol, ServiceKey};

    fn key(name: &str, port: u16) -> PortKey {
        PortKey::service_port(ServiceKey::new("shop", name), Protocol::Tcp, port)
    }

    #[test]
    fn ranges_parse_and_refuse_nonsense() {
        let range: PortRange = "20000-29999".parse().expect("a range");
        assert_eq!(
            (range.first(), range.last(), range.len()),
            (20000, 29999, 10000)
        );
        assert_eq!(
            "20000".parse::<PortRange>(),
            Err(PortRangeError::Syntax("20000".to_owned()))
        );
        assert_eq!(
            "2-70000".parse::<PortRange>(),
            Err(PortRangeError::Port("70000".to_owned()))
        );
        assert_eq!(
            "30000-20000".parse::<PortRange>(),
            Err(PortRangeError::Empty {
                first: 30000,
                last: 20000
            })
        );
        assert!("0-10".parse::<PortRange>().is_err());
    }

    #[test]
    fn the_same_inputs_give_the_same_ports_whatever_the_order() {
        let range = PortRange::default();
        let keys = [key("cart", 80), key("cart", 443), key("checkout", 80)];
        let forward = allocate(&keys, &BTreeMap::new(), &Released::new(), &range);
        let reversed: Vec<PortKey> = keys.iter().rev().cloned().collect();
        let backward = allocate(&reversed, &BTreeMap::new(), &Released::new(), &range);
        assert_eq!(forward, backward);
        assert_eq!(forward.ports.len(), 3);
        let distinct: BTreeSet<u16> = forward.ports.values().copied().collect();
        assert_eq!(
            distinct.len(),
            3,
            "every service port has its own import port"
        );
        assert!(forward.ports.values().all(|p| range.contains(*p)));
    }

    #[test]
    fn recorded_ports_are_kept_and_new_ones_avoid_them() {
        let range = PortRange::new(20000, 20002).expect("range");
        let mut recorded = BTreeMap::new();
        recorded.insert(key("cart", 80), 20001);
        let wanted = [key("cart", 80), key("a", 1), key("b", 2)];
        let allocation = allocate(&wanted, &recorded, &Released::new(), &range);
        assert_eq!(allocation.ports[&key("cart", 80)], 20001);
        let others: BTreeSet<u16> = [&key("a", 1), &key("b", 2)]
            .iter()
            .map(|k| allocation.ports[*k])
            .collect();
        assert_eq!(others, BTreeSet::from([20000, 20002]));
        assert!(allocation.exhausted.is_empty());
    }

    #[test]
    fn a_port_claimed_twice_goes_to_neither_and_one_outside_moves() {
        let range = PortRange::new(20000, 20009).expect("range");
        let mut recorded = BTreeMap::new();
        // "a" sorts first: key order must not decide.
        recorded.insert(key("a", 1), 20005);
        recorded.insert(key("b", 1), 20005);
        recorded.insert(key("c", 1), 31000);
        let wanted = [key("a", 1), key("b", 1), key("c", 1)];
        let allocation = allocate(&wanted, &recorded, &Released::new(), &range);
        assert_ne!(allocation.ports[&key("a", 1)], 20005);
        assert_ne!(allocation.ports[&key("b", 1)], 20005);
        assert!(range.contains(allocation.ports[&key("c", 1)]));
        let replica = recorded_allocation(&recorded, &range);
        assert!(replica.ports.is_empty(), "{replica:?}");
    }

    #[test]
    fn a_blocked_port_claimed_twice_goes_to_neither() {
        let range = PortRange::new(20000, 20009).expect("range");
        let mut recorded = BTreeMap::new();
        recorded.insert(key("a", 1), 20005);
        recorded.insert(key("b", 1), 20005);
        let released = Released::from([(20005, key("a", 1))]);
        let allocation = allocate(&[key("a", 1), key("b", 1)], &recorded, &released, &range);
        assert_ne!(allocation.ports[&key("a", 1)], 20005);
        assert_ne!(allocation.ports[&key("b", 1)], 20005);
    }

    #[test]
    fn blocked_ports_are_not_handed_out_and_a_full_range_says_so() {
        let range = PortRange::new(20000, 20001).expect("range");
        let released = Released::from([(20000, key("gone", 1))]);
        let wanted = [key("a", 1), key("b", 1)];
        let allocation = allocate(&wanted, &BTreeMap::new(), &released, &range);
        assert_eq!(
            allocation.ports.values().copied().collect::<Vec<_>>(),
            [20001]
        );
        assert_eq!(allocation.exhausted.len(), 1, "{allocation:?}");
        // Never a wrong mapping: the exhausted port has no import port at all.
        let left = &allocation.exhausted[0];
        assert!(!allocation.ports.contains_key(left));
    }

    #[test]
    fn a_released_port_waits_out_its_grace_period() {
        let start = Instant::now();
        let grace = Duration::from_secs(300);
        let mut released = ReleasedPorts::default();
        let both = BTreeMap::from([(key("a", 1), 20001), (key("b", 1), 20002)]);
        let one = BTreeMap::from([(key("a", 1), 20001)]);
        assert!(released.observe(&both, start, grace).is_empty());
        // 20002 leaves the records: released for the grace period, b's.
        let blocked = released.observe(&one, start, grace);
        assert_eq!(blocked, Released::from([(20002, key("b", 1))]));
        let later = start + Duration::from_secs(299);
        assert_eq!(released.observe(&one, later, grace).len(), 1);
        let after = start + Duration::from_secs(300);
        assert!(released.observe(&one, after, grace).is_empty());
        // A port recorded again is not released.
        released.observe(&BTreeMap::new(), after, grace);
        assert!(released.observe(&one, after, grace).is_empty());
    }

    #[test]
    fn a_released_port_goes_back_to_its_holder_only() {
        let range = PortRange::new(20000, 20009).expect("range");
        let released = Released::from([(20007, key("a", 1))]);
        // Someone edited a's derived Service: a gets 20007 back.
        let allocation = allocate(&[key("a", 1)], &BTreeMap::new(), &released, &range);
        assert_eq!(allocation.ports[&key("a", 1)], 20007);
        // Nobody else gets it, whatever its preferred slot.
        let others: Vec<PortKey> = (0..9).map(|n| key(&format!("s{n}"), 1)).collect();
        let allocation = allocate(&others, &BTreeMap::new(), &released, &range);
        assert!(allocation.ports.values().all(|p| *p != 20007));
        assert_eq!(allocation.ports.len(), 9);
    }

    #[test]
    fn a_port_no_longer_wanted_is_not_handed_out_while_it_is_recorded() {
        let range = PortRange::new(20000, 20000).expect("range");
        let recorded = BTreeMap::from([(key("gone", 1), 20000)]);
        // Its derived Service still names it: not handed out yet.
        let allocation = allocate(&[key("new", 1)], &recorded, &Released::new(), &range);
        assert!(allocation.ports.is_empty(), "{allocation:?}");
        assert_eq!(allocation.exhausted, [key("new", 1)]);
        // Gone from the records, it waits out the grace period.
        let mut released = ReleasedPorts::default();
        let start = Instant::now();
        let grace = Duration::from_secs(60);
        released.observe(&recorded, start, grace);
        let blocked = released.observe(&BTreeMap::new(), start, grace);
        let allocation = allocate(&[key("new", 1)], &BTreeMap::new(), &blocked, &range);
        assert!(allocation.ports.is_empty(), "{allocation:?}");
        // After it, the port is free again.
        let blocked = released.observe(&BTreeMap::new(), start + grace, grace);
        let allocation = allocate(&[key("new", 1)], &BTreeMap::new(), &blocked, &range);
        assert_eq!(allocation.ports[&key("new", 1)], 20000);
    }
}
