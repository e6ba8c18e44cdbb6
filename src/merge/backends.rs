//! The backends of one merged port, held as runs: a run is one cluster's
//! endpoints of one EndpointSlice, all on one target port and in one state.
//! A run shares the translation's allocation of its endpoints whenever every
//! one of them is a backend (the usual case), so the merge of a large
//! cluster set costs a few words per slice instead of a copy of every
//! endpoint; a [`Backend`] is a view made when it is read.

use std::borrow::Cow;
use std::net::IpAddr;
use std::sync::Arc;

use serde::Serialize;

use crate::model::{ClusterId, EndpointDetails, Endpoints, PodRef, pod_label};

/// Whether a backend is fully ready or only serving while it terminates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum BackendState {
    Ready,
    ServingTerminating,
}

/// One endpoint of one constituent, with the target port resolved for one
/// service port: a view into a [`Backends`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backend<'a> {
    pub cluster: &'a ClusterId,
    pub address: IpAddr,
    pub port: u16,
    pub state: BackendState,
    /// The endpoint's hostname and placement, when it has either.
    pub details: Option<&'a EndpointDetails>,
}

impl<'a> Backend<'a> {
    pub fn hostname(&self) -> Option<&'a str> {
        self.details?.hostname.as_deref()
    }

    /// The backend's per-pod label: its hostname, else its address.
    pub fn pod_label(&self) -> Cow<'a, str> {
        pod_label(self.hostname(), self.address)
    }

    /// The pod this backend is, as DNS names it.
    pub fn pod_ref(&self) -> PodRef {
        PodRef {
            cluster: self.cluster.clone(),
            label: self.pod_label().into_owned(),
        }
    }
}

/// Endpoints of one cluster that are backends on one target port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackendRun {
    pub cluster: ClusterId,
    pub port: u16,
    pub state: BackendState,
    pub endpoints: Endpoints,
}

/// A run and the index of its first backend among the port's.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Run {
    first: usize,
    run: BackendRun,
}

/// The backends of one port, in order. Cheap to clone: the runs are
/// shared, and a route of the port holds the same allocation.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Backends {
    runs: Arc<[Run]>,
}

impl Backends {
    /// The backends of `runs`, in order; empty runs are dropped.
    pub fn new(runs: impl IntoIterator<Item = BackendRun>) -> Self {
        let mut first = 0;
        let runs: Vec<Run> = runs
            .into_iter()
            .filter(|run| !run.endpoints.is_empty())
            .map(|run| {
                let at = first;
                first += run.endpoints.len();
                Run { first: at, run }
            })
            .collect();
        Self { runs: runs.into() }
    }

    pub fn len(&self) -> usize {
        self.runs
            .last()
            .map_or(0, |last| last.first + last.run.endpoints.len())
    }

    pub fn is_empty(&self) -> bool {
        self.runs.is_empty()
    }

    pub fn get(&self, index: usize) -> Option<Backend<'_>> {
        let at = self.runs.partition_point(|run| run.first <= index);
        let Run { first, run } = self.runs.get(at.checked_sub(1)?)?;
        view(run, index - first)
    }

    pub fn iter(&self) -> Iter<'_> {
        Iter {
            runs: self.runs.iter(),
            current: None,
            remaining: self.len(),
        }
    }

    /// The runs, in order, with the index of each one's first backend.
    pub fn runs(&self) -> impl Iterator<Item = (usize, &BackendRun)> {
        self.runs.iter().map(|run| (run.first, &run.run))
    }

    /// Those of the clusters `keep` accepts, in order; the same allocation
    /// when it accepts every one.
    pub fn retain_clusters(&self, mut keep: impl FnMut(&ClusterId) -> bool) -> Self {
        let kept: Vec<bool> = self.runs.iter().map(|run| keep(&run.run.cluster)).collect();
        if kept.iter().all(|kept| *kept) {
            return self.clone();
        }
        Self::new(
            self.runs
                .iter()
                .zip(kept)
                .filter(|(_, kept)| *kept)
                .map(|(run, _)| run.run.clone()),
        )
    }

    /// Whether both are the same allocation.
    pub fn ptr_eq(&self, other: &Backends) -> bool {
        Arc::ptr_eq(&self.runs, &other.runs)
    }
}

/// The backend of the run's endpoint at `index`.
fn view(run: &BackendRun, index: usize) -> Option<Backend<'_>> {
    let endpoint = run.endpoints.get(index)?;
    Some(Backend {
        cluster: &run.cluster,
        address: endpoint.address,
        port: run.port,
        state: run.state,
        details: run.endpoints.details(index).map(|details| &**details),
    })
}

impl<'a> IntoIterator for &'a Backends {
    type Item = Backend<'a>;
    type IntoIter = Iter<'a>;

    fn into_iter(self) -> Iter<'a> {
        self.iter()
    }
}

/// The backends of a port in order.
#[derive(Debug, Clone)]
pub struct Iter<'a> {
    runs: std::slice::Iter<'a, Run>,
    /// The run being read and the index of its next endpoint.
    current: Option<(&'a BackendRun, usize)>,
    remaining: usize,
}

impl<'a> Iterator for Iter<'a> {
    type Item = Backend<'a>;

    fn next(&mut self) -> Option<Backend<'a>> {
        loop {
            if let Some((run, next)) = &mut self.current
                && let Some(backend) = view(run, *next)
            {
                *next += 1;
                self.remaining -= 1;
                return Some(backend);
            }
            let Run { run, .. } = self.runs.next()?;
            self.current = Some((run, 0));
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.remaining, Some(self.remaining))
    }
}

impl ExactSizeIterator for Iter<'_> {}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::*;
    use crate::model::{Endpoint, EndpointsBuilder};

    fn run(cluster: &str, addresses: &[u8]) -> BackendRun {
        let mut endpoints = EndpointsBuilder::default();
        for last in addresses {
            let hostname = EndpointDetails::hostname(&format!("pod-{last}"));
            endpoints.push(
                Endpoint::ready(IpAddr::V4(Ipv4Addr::new(10, 0, 0, *last))),
                hostname,
            );
        }
        BackendRun {
            cluster: ClusterId::new(cluster).expect("cluster id"),
            port: 8080,
            state: BackendState::Ready,
            endpoints: endpoints.build(),
        }
    }

    fn last_octets(backends: &Backends) -> Vec<(String, u8)> {
        backends
            .iter()
            .map(|b| match b.address {
                IpAddr::V4(v4) => (b.cluster.to_string(), v4.octets()[3]),
                IpAddr::V6(_) => unreachable!("v4 only"),
            })
            .collect()
    }

    #[test]
    fn runs_read_as_one_list_by_index_and_in_order() {
        let backends = Backends::new([
            run("c1", &[1, 2]),
            run("c2", &[]),
            run("c2", &[3]),
            run("c3", &[4, 5, 6]),
        ]);
        assert_eq!(backends.len(), 6);
        assert_eq!(backends.iter().len(), 6);
        let expected = [
            ("c1", 1),
            ("c1", 2),
            ("c2", 3),
            ("c3", 4),
            ("c3", 5),
            ("c3", 6),
        ];
        let expected: Vec<(String, u8)> = expected
            .iter()
            .map(|(c, n)| ((*c).to_owned(), *n))
            .collect();
        assert_eq!(last_octets(&backends), expected);
        for (index, backend) in backends.iter().enumerate() {
            assert_eq!(backends.get(index), Some(backend));
            let last = match backend.address {
                IpAddr::V4(v4) => v4.octets()[3],
                IpAddr::V6(_) => unreachable!("v4 only"),
            };
            let hostname = format!("pod-{last}");
            assert_eq!(
                backend.hostname(),
                Some(hostname.as_str()),
                "details follow"
            );
        }
        assert_eq!(backends.get(6), None);
        assert_eq!(backends.runs().count(), 3, "the empty run is dropped");
        assert!(Backends::new([run("c1", &[])]).is_empty());
    }

    #[test]
    fn retaining_every_cluster_shares_and_dropping_one_renumbers() {
        let backends = Backends::new([run("c1", &[1]), run("c2", &[2, 3]), run("c3", &[4])]);
        assert!(backends.retain_clusters(|_| true).ptr_eq(&backends));
        let without_c2 = backends.retain_clusters(|c| c.as_str() != "c2");
        assert_eq!(
            last_octets(&without_c2),
            [("c1".to_owned(), 1), ("c3".to_owned(), 4)]
        );
        assert_eq!(without_c2.get(1).map(|b| b.cluster.as_str()), Some("c3"));
    }
}
