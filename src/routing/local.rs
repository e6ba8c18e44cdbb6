//! The backends on the viewer's own network, each with the access policy
//! of the service it serves and whether a tunnel server may dial it for a
//! peer (those of clusters it can attest), and what each is owed (the PROXY
//! protocol). Searched per request; built once for a first table, and for
//! every later one patched with the direct backends of the services that
//! changed (or shared whole when those are the same), so a change to one
//! service costs the gateway no walk and no sort of every backend.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use super::{Path, ServiceRoutes};
use crate::model::{AccessPolicy, ClusterId, NetworkId, Protocol};

/// A backend address (its target port included) and what a service it
/// serves asks of the tunnel server.
pub(super) type Entry = (BackendAddress, Serving);

/// What one service asks of the tunnel server for each of its backends.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Serving {
    /// The protocol of the service port the backend serves.
    protocol: Protocol,
    /// Its access policy (`None`: open to the whole set).
    access: Option<Arc<AccessPolicy>>,
    /// Whether its backends are told who called (`strait.dev/proxy-protocol`).
    proxy_protocol: bool,
    /// Whether a tunnel server may dial the backend for a peer
    /// ([`Via::peer_dialable`](super::Via::peer_dialable)); the others are
    /// here for what this gateway owes them on its own direct path.
    peer_dialable: bool,
}

/// A backend's address and target port: a `SocketAddr` less its IPv6 flow
/// and scope (which no backend has), in 20 bytes rather than 32, as the
/// index holds one per direct backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct BackendAddress {
    ip: IpAddr,
    port: u16,
}

impl From<SocketAddr> for BackendAddress {
    fn from(address: SocketAddr) -> Self {
        Self {
            ip: address.ip(),
            port: address.port(),
        }
    }
}

/// Every direct backend of every service port, sorted by address.
#[derive(Debug, Clone, Default)]
pub(super) struct LocalBackends(Arc<Vec<Entry>>);

/// The direct backends of one service, one entry per port and backend.
pub(super) fn entries(routes: &ServiceRoutes) -> impl Iterator<Item = Entry> + '_ {
    routes
        .ports
        .iter()
        .flat_map(|port| {
            port.backends
                .iter()
                .map(move |routed| (port.protocol, routed))
        })
        .filter(|(_, routed)| *routed.path() == Path::Direct)
        .map(|(protocol, routed)| {
            (
                BackendAddress {
                    ip: routed.backend.address,
                    port: routed.backend.port,
                },
                Serving {
                    protocol,
                    access: routes.access.clone(),
                    proxy_protocol: routes.proxy_protocol_for(&routed.backend),
                    peer_dialable: routed.peer_dialable(),
                },
            )
        })
}

fn sort(entries: &mut [Entry]) {
    entries.sort_unstable_by(|a, b| {
        a.0.cmp(&b.0).then_with(|| {
            let pointer = |e: &Entry| e.1.access.as_ref().map(Arc::as_ptr);
            pointer(a)
                .cmp(&pointer(b))
                .then(a.1.proxy_protocol.cmp(&b.1.proxy_protocol))
                .then(a.1.peer_dialable.cmp(&b.1.peer_dialable))
                .then(a.1.protocol.cmp(&b.1.protocol))
        })
    });
}

/// Appends `kept` (sorted) to `out` with the `added` entries (sorted) that
/// sort among them, or before `bound` when there is one; the rest of `added`
/// waits for a later stretch. An added entry goes after existing entries of
/// the same address.
fn merge_into(
    out: &mut Vec<Entry>,
    mut kept: &[Entry],
    added: &mut std::iter::Peekable<std::vec::IntoIter<Entry>>,
    bound: Option<&BackendAddress>,
) {
    while let Some(new) = added.next_if(|new| bound.is_none_or(|bound| new.0 < *bound)) {
        let before = kept.partition_point(|entry| entry.0 <= new.0);
        out.extend_from_slice(&kept[..before]);
        out.push(new);
        kept = &kept[before..];
    }
    out.extend_from_slice(kept);
}

impl LocalBackends {
    pub(super) fn build<'a>(services: impl Iterator<Item = &'a ServiceRoutes>) -> Self {
        let mut all: Vec<Entry> = services.flat_map(entries).collect();
        sort(&mut all);
        Self(Arc::new(all))
    }

    /// This index without `removed` and with `added` (the entries of the
    /// services that changed, as they were and as they are). A merge of
    /// sorted runs: the unchanged stretches between the addresses that lost
    /// an entry are copied whole, with no lookup per entry.
    pub(super) fn patched(&self, mut removed: Vec<Entry>, mut added: Vec<Entry>) -> Self {
        sort(&mut removed);
        sort(&mut added);
        if removed == added {
            return self.clone();
        }
        let mut patched = Vec::with_capacity(self.0.len() + added.len());
        let mut added = added.into_iter().peekable();
        let mut removed = removed.into_iter().peekable();
        let mut rest: &[Entry] = &self.0;
        while let Some((address, policy)) = removed.next() {
            // Every entry removed at this address, matched against the
            // address's whole group: within a group, entries are in the order
            // they were added, not in the order `removed` is sorted in.
            let mut gone = vec![policy];
            while let Some((_, policy)) = removed.next_if(|(next, _)| *next == address) {
                gone.push(policy);
            }
            let first = rest.partition_point(|entry| entry.0 < address);
            let end = first + rest[first..].partition_point(|entry| entry.0 == address);
            merge_into(&mut patched, &rest[..first], &mut added, Some(&address));
            for entry in &rest[first..end] {
                match gone.iter().position(|policy| *policy == entry.1) {
                    Some(index) => {
                        gone.swap_remove(index);
                    }
                    None => patched.push(entry.clone()),
                }
            }
            rest = &rest[end..];
        }
        merge_into(&mut patched, rest, &mut added, None);
        Self(Arc::new(patched))
    }

    /// Whether `address` is a direct backend of a `protocol` port: `None`
    /// when it is not, else whether a service it serves admits a caller of
    /// `cluster` on `network`.
    pub(super) fn admits(
        &self,
        address: &SocketAddr,
        protocol: Protocol,
        cluster: &ClusterId,
        network: Option<&NetworkId>,
    ) -> Option<bool> {
        let mut entries = self
            .at(BackendAddress::from(*address))
            .filter(|serving| serving.peer_dialable && serving.protocol == protocol)
            .peekable();
        entries.peek()?;
        Some(entries.any(|serving| {
            serving
                .access
                .as_ref()
                .is_none_or(|policy| policy.admits(cluster, network))
        }))
    }

    /// Whether any service `address` serves asks for the PROXY protocol
    /// for it, whatever its policy admits: a pod port speaks it or not
    /// whichever Service selects it.
    pub(super) fn proxy_protocol(&self, address: &SocketAddr) -> bool {
        self.at(BackendAddress::from(*address))
            .any(|serving| serving.proxy_protocol)
    }

    /// What the services `address` serves ask of the tunnel server.
    fn at(&self, address: BackendAddress) -> impl Iterator<Item = &Serving> {
        let first = self.0.partition_point(|(backend, _)| *backend < address);
        self.0[first..]
            .iter()
            .take_while(move |(backend, _)| *backend == address)
            .map(|(_, serving)| serving)
    }

    #[cfg(test)]
    pub(super) fn addresses(&self) -> Vec<SocketAddr> {
        self.0
            .iter()
            .map(|(address, _)| SocketAddr::new(address.ip, address.port))
            .collect()
    }

    #[cfg(test)]
    pub(super) fn shares(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::*;

    fn entry(last: u8, policy: Option<&Arc<AccessPolicy>>) -> Entry {
        (
            SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 0, 0, last)), 8080).into(),
            Serving {
                protocol: Protocol::Tcp,
                access: policy.cloned(),
                proxy_protocol: false,
                peer_dialable: true,
            },
        )
    }

    fn closed_to_all_but_c2() -> Arc<AccessPolicy> {
        Arc::new(AccessPolicy {
            clusters: [ClusterId::new("c2").expect("id")].into(),
            networks: Default::default(),
        })
    }

    /// Each entry as (address, policy allocation), in a canonical order.
    fn canonical(entries: &[Entry]) -> Vec<(BackendAddress, Option<*const AccessPolicy>)> {
        let mut entries = entries.to_vec();
        sort(&mut entries);
        entries
            .iter()
            .map(|(address, serving)| (*address, serving.access.as_ref().map(Arc::as_ptr)))
            .collect()
    }

    #[test]
    fn a_patch_equals_the_index_built_from_its_result() {
        let closed = closed_to_all_but_c2();
        let mut before = vec![
            entry(1, None),
            entry(1, Some(&closed)),
            entry(2, None),
            entry(3, None),
            entry(3, None),
            entry(5, None),
        ];
        sort(&mut before);
        let index = LocalBackends(Arc::new(before.clone()));
        // Gone: one of two policies at .1, one of two equal entries at .3,
        // the last one. New: one before everything, another at .1, one at
        // .3 under the closed policy, one after everything.
        let removed = vec![entry(1, Some(&closed)), entry(3, None), entry(5, None)];
        let added = vec![
            entry(0, None),
            entry(1, None),
            entry(3, Some(&closed)),
            entry(9, None),
        ];
        let patched = index.patched(removed.clone(), added.clone());

        let mut expected = before;
        for gone in &removed {
            let at = expected
                .iter()
                .position(|e| {
                    e.0 == gone.0
                        && e.1.access.as_ref().map(Arc::as_ptr)
                            == gone.1.access.as_ref().map(Arc::as_ptr)
                })
                .expect("removed entries are in the index");
            expected.remove(at);
        }
        expected.extend(added);
        assert_eq!(canonical(&patched.0), canonical(&expected));
        assert!(
            patched.0.is_sorted_by_key(|e| e.0),
            "still sorted by address"
        );
        let c3 = ClusterId::new("c3").expect("id");
        let net = NetworkId::new("net-a").expect("id");
        let at = |last| SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 0, 0, last)), 8080);
        assert_eq!(
            patched.admits(&at(3), Protocol::Tcp, &c3, Some(&net)),
            Some(true),
            "one open entry left"
        );
        assert_eq!(patched.admits(&at(5), Protocol::Tcp, &c3, Some(&net)), None);
        assert_eq!(
            patched.admits(&at(9), Protocol::Tcp, &c3, Some(&net)),
            Some(true)
        );

        let same = index.patched(vec![entry(2, None)], vec![entry(2, None)]);
        assert!(same.shares(&index), "an unchanged patch shares the index");
    }

    #[test]
    fn every_entry_of_an_address_is_removed_whatever_their_order_in_the_index() {
        let closed = closed_to_all_but_c2();
        // As a patch leaves them: an open service's entry added after the
        // closed one's, against the pointer order `removed` is sorted in.
        let index = LocalBackends(Arc::new(vec![
            entry(1, Some(&closed)),
            entry(1, None),
            entry(2, None),
        ]));
        let patched = index.patched(vec![entry(1, None), entry(1, Some(&closed))], Vec::new());
        assert_eq!(canonical(&patched.0), canonical(&[entry(2, None)]));
        let c3 = ClusterId::new("c3").expect("id");
        let net = NetworkId::new("net-a").expect("id");
        let gone = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)), 8080);
        assert_eq!(
            patched.admits(&gone, Protocol::Tcp, &c3, Some(&net)),
            None,
            "no longer dialled"
        );
    }
}
