//! The backends on the viewer's own network, each with the access policy
//! of the service it serves: the only addresses a tunnel server may dial
//! for a peer. Searched per request; built once for a first table, and for
//! every later one patched with the direct backends of the services that
//! changed (or shared whole when those are the same), so a change to one
//! service costs the gateway no walk and no sort of every backend.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use super::{Path, ServiceRoutes};
use crate::model::{AccessPolicy, ClusterId, NetworkId};

/// A backend address (its target port included) and the access policy of
/// a service it serves (`None`: open to the whole set).
pub(super) type Entry = (SocketAddr, Option<Arc<AccessPolicy>>);

/// Every direct backend of every service port, sorted by address.
#[derive(Debug, Clone, Default)]
pub(super) struct LocalBackends(Arc<Vec<Entry>>);

/// The direct backends of one service, one entry per port and backend.
pub(super) fn entries(routes: &ServiceRoutes) -> impl Iterator<Item = Entry> + '_ {
    routes
        .ports
        .iter()
        .flat_map(|port| &port.backends)
        .filter(|routed| *routed.path() == Path::Direct)
        .map(|routed| {
            (
                SocketAddr::new(routed.backend.address, routed.backend.port),
                routes.access.clone(),
            )
        })
}

fn sort(entries: &mut [Entry]) {
    entries.sort_unstable_by(|a, b| {
        a.0.cmp(&b.0).then_with(|| {
            let pointer = |e: &Entry| e.1.as_ref().map(Arc::as_ptr);
            pointer(a).cmp(&pointer(b))
        })
    });
}

impl LocalBackends {
    pub(super) fn build<'a>(services: impl Iterator<Item = &'a ServiceRoutes>) -> Self {
        let mut all: Vec<Entry> = services.flat_map(entries).collect();
        sort(&mut all);
        Self(Arc::new(all))
    }

    /// This index without `removed` and with `added` (the entries of the
    /// services that changed, as they were and as they are).
    pub(super) fn patched(&self, mut removed: Vec<Entry>, mut added: Vec<Entry>) -> Self {
        sort(&mut removed);
        sort(&mut added);
        if removed == added {
            return self.clone();
        }
        let mut removing: HashMap<SocketAddr, Vec<Option<Arc<AccessPolicy>>>> = HashMap::new();
        for (address, access) in removed {
            removing.entry(address).or_default().push(access);
        }
        let mut patched = Vec::with_capacity(self.0.len() + added.len());
        let mut added = added.into_iter().peekable();
        for entry in self.0.iter() {
            if let Some(policies) = removing.get_mut(&entry.0)
                && let Some(index) = policies.iter().position(|access| access == &entry.1)
            {
                policies.swap_remove(index);
                continue;
            }
            while let Some(new) = added.next_if(|new| new.0 < entry.0) {
                patched.push(new);
            }
            patched.push(entry.clone());
        }
        patched.extend(added);
        Self(Arc::new(patched))
    }

    /// Whether `address` is a direct backend: `None` when it is not, else
    /// whether a service it serves admits a caller of `cluster` on `network`.
    pub(super) fn admits(
        &self,
        address: &SocketAddr,
        cluster: &ClusterId,
        network: &NetworkId,
    ) -> Option<bool> {
        let first = self.0.partition_point(|(backend, _)| backend < address);
        let mut entries = self.0[first..]
            .iter()
            .take_while(|(backend, _)| backend == address)
            .peekable();
        entries.peek()?;
        Some(entries.any(|(_, access)| {
            access
                .as_ref()
                .is_none_or(|policy| policy.admits(cluster, network))
        }))
    }

    #[cfg(test)]
    pub(super) fn addresses(&self) -> Vec<SocketAddr> {
        self.0.iter().map(|(address, _)| *address).collect()
    }

    #[cfg(test)]
    pub(super) fn shares(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}
