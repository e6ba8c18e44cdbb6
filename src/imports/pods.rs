//! Headless pods on another network: their own addresses are not reachable
//! from this cluster, so each one this cluster may name in DNS gets an
//! address on this side that reaches that one pod. In Kubernetes that is
//! the ClusterIP of a derived Service per pod (forwarding to the gateway's
//! import ports for that pod); in a file setup, an address from
//! `imports.podAddresses`. Pure.
//!
//! Which pods: the ready backends of a headless service whose path from
//! this cluster is a tunnel, one per (cluster, per-pod label), in that
//! order, at most `dns.maxHeadlessEndpoints` per service. The rest are
//! counted, reported and not answered: each costs a ClusterIP, an import
//! port per service port and a listener on every gateway replica.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::net::IpAddr;

use ipnet::IpNet;
use serde::Serialize;

use crate::model::{PodRef, ServiceKey};
use crate::routing::RouteTable;

/// The remote pods of one headless service that get an address here.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RemotePods {
    /// In (cluster, label) order, at most the cap.
    pub pods: Vec<PodRef>,
    /// Remote ready pods beyond the cap: no address, not answered.
    pub over_cap: usize,
}

/// The remote pods of every headless service, as `table`'s viewer sees
/// them, at most `cap` per service.
pub fn remote_pods(table: &RouteTable, cap: usize) -> BTreeMap<ServiceKey, RemotePods> {
    let mut all = BTreeMap::new();
    for service in table.services() {
        let pods = service.remote_pods();
        if pods.is_empty() {
            continue;
        }
        let over_cap = pods.len().saturating_sub(cap);
        all.insert(
            service.key.clone(),
            RemotePods {
                pods: pods.into_iter().take(cap).collect(),
                over_cap,
            },
        );
    }
    all
}

/// Addresses handed to remote pods in a file setup, one from each range.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodAddresses {
    pub addresses: BTreeMap<(ServiceKey, PodRef), Vec<IpAddr>>,
    /// Pods a range had no room for.
    pub exhausted: Vec<(ServiceKey, PodRef)>,
}

/// The usable addresses of a range: all of an IPv6 range; an IPv4 range
/// without its network and broadcast addresses when it has them.
fn usable(range: &IpNet) -> (u128, u128) {
    let (first, last) = match range {
        IpNet::V4(v4) => (
            u128::from(u32::from(v4.network())),
            u128::from(u32::from(v4.broadcast())),
        ),
        IpNet::V6(v6) => (u128::from(v6.network()), u128::from(v6.broadcast())),
    };
    if matches!(range, IpNet::V4(_)) && last - first >= 3 {
        (first + 1, last - 1)
    } else {
        (first, last)
    }
}

fn address_at(range: &IpNet, value: u128) -> Option<IpAddr> {
    match range {
        IpNet::V4(_) => u32::try_from(value)
            .ok()
            .map(|v| IpAddr::from(v.to_be_bytes())),
        IpNet::V6(_) => Some(IpAddr::from(value.to_be_bytes())),
    }
}

/// Stable across builds (FNV-1a): the preferred address of a pod must not
/// change with the binary.
fn preferred(service: &ServiceKey, pod: &PodRef) -> u128 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let parts: [&[u8]; 7] = [
        service.namespace.as_bytes(),
        b"/",
        service.name.as_bytes(),
        b"/",
        pod.cluster.as_str().as_bytes(),
        b"/",
        pod.label.as_bytes(),
    ];
    for byte in parts.into_iter().flatten() {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    u128::from(hash)
}

/// Hands each pod one address from each range: the one its name hashes to,
/// else the next free one upwards, in (service, pod) order. Deterministic:
/// two replicas reading the same files compute the same addresses.
pub fn allocate_addresses<'a>(
    pods: impl IntoIterator<Item = (&'a ServiceKey, &'a PodRef)>,
    ranges: &[IpNet],
) -> PodAddresses {
    let pods: BTreeSet<(&ServiceKey, &PodRef)> = pods.into_iter().collect();
    let mut result = PodAddresses::default();
    let mut taken: Vec<HashSet<u128>> = vec![HashSet::new(); ranges.len()];
    for (service, pod) in pods {
        let mut addresses = Vec::new();
        for (range, taken) in ranges.iter().zip(&mut taken) {
            let (first, last) = usable(range);
            let size = last - first + 1;
            // At most one probe per pod already placed, plus one.
            let tries = u128::try_from(taken.len())
                .unwrap_or(u128::MAX)
                .saturating_add(1);
            let start = preferred(service, pod) % size;
            let free = (0..tries.min(size))
                .map(|step| (start + step) % size)
                .find(|offset| !taken.contains(offset));
            match free.and_then(|offset| Some((offset, address_at(range, first + offset)?))) {
                Some((offset, address)) => {
                    taken.insert(offset);
                    addresses.push(address);
                }
                None => {
                    result.exhausted.push((service.clone(), pod.clone()));
                    addresses.clear();
                    break;
                }
            }
        }
        if !addresses.is_empty() {
            result
                .addresses
                .insert((service.clone(), pod.clone()), addresses);
        }
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ClusterId;

    fn pod(cluster: &str, label: &str) -> PodRef {
        PodRef {
            cluster: ClusterId::new(cluster).expect("a cluster id"),
            label: label.to_owned(),
        }
    }

    #[test]
    fn addresses_are_deterministic_distinct_and_inside_the_range() {
        let db = ServiceKey::new("data", "db");
        let pods: Vec<PodRef> = (0..40).map(|n| pod("west-1", &format!("db-{n}"))).collect();
        let ranges: Vec<IpNet> = vec!["10.97.0.0/26".parse().expect("a range")];
        let first = allocate_addresses(pods.iter().map(|p| (&db, p)), &ranges);
        let again = allocate_addresses(pods.iter().rev().map(|p| (&db, p)), &ranges);
        assert_eq!(first, again);
        let all: BTreeSet<IpAddr> = first.addresses.values().flatten().copied().collect();
        assert_eq!(all.len(), 40, "every pod its own address");
        assert!(all.iter().all(|a| ranges[0].contains(a)));
        // Not the network or broadcast address.
        assert!(!all.contains(&"10.97.0.0".parse::<IpAddr>().expect("an address")));
        assert!(!all.contains(&"10.97.0.63".parse::<IpAddr>().expect("an address")));
    }

    #[test]
    fn a_full_range_reports_the_pods_left_over() {
        let db = ServiceKey::new("data", "db");
        let pods: Vec<PodRef> = (0..5).map(|n| pod("west-1", &format!("db-{n}"))).collect();
        let ranges: Vec<IpNet> = vec![
            "10.97.0.0/30".parse().expect("a range"),
            "fd00:97::/120".parse().expect("a range"),
        ];
        let allocated = allocate_addresses(pods.iter().map(|p| (&db, p)), &ranges);
        assert_eq!(allocated.addresses.len(), 2, "a /30 holds two hosts");
        assert_eq!(allocated.exhausted.len(), 3);
        assert!(allocated.addresses.values().all(|a| a.len() == 2));
    }
}
