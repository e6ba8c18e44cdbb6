//! The backends of one port route: the merged port's backends that the
//! viewer can reach, each with its cluster's way there ([`Via`]).
//!
//! A route shares the merge's allocation of its backends whenever every
//! backend's cluster is reachable (the usual case), and says which way each
//! one goes in runs (one per stretch of backends of a cluster), so a route
//! table costs a few words per port, not a copy of every backend. Only a
//! port with a backend whose network has no gateway holds its own list of
//! the merge's runs (still sharing their endpoints).

use std::sync::Arc;

use crate::merge::{Backend, Backends};
use crate::model::{ClusterId, NetworkId};

use super::{Path, Via};

/// One backend of a route with its way there; a view into the route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RoutedBackend<'a> {
    pub backend: Backend<'a>,
    pub via: &'a Arc<Via>,
}

impl<'a> RoutedBackend<'a> {
    pub fn network(&self) -> &'a NetworkId {
        &self.via.network
    }

    /// Its network, when the admin's network map attests it.
    pub fn attested_network(&self) -> Option<&'a NetworkId> {
        self.via.network_attested.then_some(&self.via.network)
    }

    pub fn path(&self) -> &'a Path {
        &self.via.path
    }

    /// Whether a tunnel server may dial it for a peer ([`Via::peer_dialable`]).
    pub fn peer_dialable(&self) -> bool {
        self.via.path == Path::Direct && self.via.peer_dialable
    }
}

/// The backends of one port route, in the merge's order.
#[derive(Debug, Clone)]
pub struct RoutedBackends {
    backends: Backends,
    /// `(first index, way)` in index order: the backends from a run's first
    /// index up to the next run's go the run's way.
    runs: Vec<(usize, Arc<Via>)>,
}

impl RoutedBackends {
    /// Routes `merged` by each backend's cluster: `way_of` says how to reach
    /// a cluster, or `None` when it cannot be reached; those backends are
    /// left out and their clusters returned, once each.
    pub fn route<'w>(
        merged: &Backends,
        mut way_of: impl FnMut(&ClusterId) -> Option<&'w Arc<Via>>,
    ) -> (Self, Vec<ClusterId>) {
        // Each run's way, asked once: the runs kept are those with one.
        let ways: Vec<Option<&Arc<Via>>> =
            merged.runs().map(|(_, run)| way_of(&run.cluster)).collect();
        let mut unreachable: Vec<ClusterId> = Vec::new();
        let mut asked = ways.iter();
        let backends = merged.retain_clusters(|cluster| {
            let reachable = asked.next().is_some_and(Option::is_some);
            if !reachable && !unreachable.contains(cluster) {
                unreachable.push(cluster.clone());
            }
            reachable
        });
        let mut runs: Vec<(usize, Arc<Via>)> = Vec::new();
        for ((first, _), via) in backends.runs().zip(ways.into_iter().flatten()) {
            if runs.last().is_none_or(|(_, last)| !Arc::ptr_eq(last, via)) {
                runs.push((first, Arc::clone(via)));
            }
        }
        runs.shrink_to_fit();
        (Self { backends, runs }, unreachable)
    }

    pub fn len(&self) -> usize {
        self.backends.len()
    }

    pub fn is_empty(&self) -> bool {
        self.backends.is_empty()
    }

    pub fn get(&self, index: usize) -> Option<RoutedBackend<'_>> {
        let backend = self.backends.get(index)?;
        let run = self.runs.partition_point(|(first, _)| *first <= index);
        let (_, via) = self.runs.get(run.checked_sub(1)?)?;
        Some(RoutedBackend { backend, via })
    }

    pub fn first(&self) -> Option<RoutedBackend<'_>> {
        self.get(0)
    }

    pub fn iter(&self) -> Iter<'_> {
        Iter {
            backends: self.backends.iter(),
            runs: &self.runs,
            index: 0,
            run: 0,
        }
    }

    /// Whether these are the very backends of `merged` (not a copy).
    #[cfg(test)]
    pub fn shares(&self, merged: &Backends) -> bool {
        self.backends.ptr_eq(merged)
    }
}

impl<'a> IntoIterator for &'a RoutedBackends {
    type Item = RoutedBackend<'a>;
    type IntoIter = Iter<'a>;

    fn into_iter(self) -> Iter<'a> {
        self.iter()
    }
}

/// The backends of a route in order, each with its way.
#[derive(Debug, Clone)]
pub struct Iter<'a> {
    backends: crate::merge::BackendsIter<'a>,
    runs: &'a [(usize, Arc<Via>)],
    index: usize,
    run: usize,
}

impl<'a> Iterator for Iter<'a> {
    type Item = RoutedBackend<'a>;

    fn next(&mut self) -> Option<RoutedBackend<'a>> {
        let backend = self.backends.next()?;
        while self
            .runs
            .get(self.run + 1)
            .is_some_and(|(first, _)| *first <= self.index)
        {
            self.run += 1;
        }
        self.index += 1;
        let (_, via) = self.runs.get(self.run)?;
        Some(RoutedBackend { backend, via })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.backends.size_hint()
    }
}

impl ExactSizeIterator for Iter<'_> {}

#[cfg(test)]
mod tests {
    use std::net::{IpAddr, Ipv4Addr};

    use super::*;
    use crate::merge::{BackendRun, BackendState};
    use crate::model::Endpoint;

    fn backends(list: &[(&str, u8)]) -> Backends {
        Backends::new(list.iter().map(|(cluster, last)| BackendRun {
            cluster: ClusterId::new(cluster).expect("cluster id"),
            port: 8080,
            state: BackendState::Ready,
            endpoints: vec![Endpoint::ready(IpAddr::V4(Ipv4Addr::new(10, 0, 0, *last)))].into(),
        }))
    }

    fn via(network: &str) -> Arc<Via> {
        Arc::new(Via {
            network: NetworkId::new(network).expect("network id"),
            path: Path::Direct,
            peer_dialable: true,
            network_attested: true,
        })
    }

    #[test]
    fn a_route_whose_clusters_are_all_reachable_shares_the_merged_backends() {
        let merged = backends(&[("c1", 1), ("c1", 2), ("c2", 3)]);
        let (a, b) = (via("net-a"), via("net-b"));
        let (routed, unreachable) = RoutedBackends::route(&merged, |cluster| {
            Some(if cluster.as_str() == "c1" { &a } else { &b })
        });
        assert!(unreachable.is_empty());
        assert!(routed.shares(&merged));
        let ways: Vec<(u8, &str)> = routed
            .iter()
            .map(|r| (last_octet(r.backend), r.network().as_str()))
            .collect();
        assert_eq!(ways, [(1, "net-a"), (2, "net-a"), (3, "net-b")]);
        assert_eq!(routed.iter().len(), 3);
        assert_eq!(routed.get(2).map(|r| r.network().as_str()), Some("net-b"));
        assert_eq!(routed.get(3), None);
    }

    #[test]
    fn an_unreachable_cluster_is_left_out_and_named_once() {
        let merged = backends(&[("c1", 1), ("c3", 2), ("c2", 3), ("c3", 4), ("c1", 5)]);
        let (a, b) = (via("net-a"), via("net-b"));
        let (routed, unreachable) =
            RoutedBackends::route(&merged, |cluster| match cluster.as_str() {
                "c1" => Some(&a),
                "c2" => Some(&b),
                _ => None,
            });
        assert_eq!(unreachable, [ClusterId::new("c3").expect("id")]);
        assert!(!routed.shares(&merged));
        let ways: Vec<(u8, &str)> = routed
            .iter()
            .map(|r| (last_octet(r.backend), r.network().as_str()))
            .collect();
        assert_eq!(ways, [(1, "net-a"), (3, "net-b"), (5, "net-a")]);
        let by_index: Vec<Option<u8>> = (0..4)
            .map(|i| routed.get(i).map(|r| last_octet(r.backend)))
            .collect();
        assert_eq!(by_index, [Some(1), Some(3), Some(5), None]);
        assert_eq!(routed.get(1).map(|r| r.network().as_str()), Some("net-b"));
    }

    fn last_octet(backend: Backend<'_>) -> u8 {
        match backend.address {
            IpAddr::V4(v4) => v4.octets()[3],
            IpAddr::V6(_) => 0,
        }
    }
}
