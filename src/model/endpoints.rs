//! A list of endpoints as a slice and everything made from it share it:
//! the endpoints themselves, packed (5 bytes for an IPv4 endpoint, 18 for
//! any other), and beside them the details (hostname, placement) of the few
//! that have any. A large cluster set holds millions of endpoints and few
//! hostnames, so a pointer per endpoint for them would cost more than the
//! addresses; and an [`Endpoint`] as Rust lays it out is 20 bytes, four
//! times what an IPv4 one needs.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use super::{Endpoint, EndpointDetails};

/// The details of the endpoint at an index of the list.
type Indexed = (u32, Arc<EndpointDetails>);

/// The record size of a list of IPv4 endpoints only: the 4 octets and the
/// conditions.
const V4_RECORD: u8 = 5;
/// The record size of any other list: the family (4 or 6), 16 address
/// bytes (an IPv4 address in the first 4) and the conditions.
const ANY_RECORD: u8 = 18;

const READY: u8 = 1;
const SERVING: u8 = 2;
const TERMINATING: u8 = 4;

/// Endpoints and their details. Cheap to clone: both parts are shared.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Endpoints {
    /// Empty, or the record size ([`V4_RECORD`] when every endpoint is
    /// IPv4, else [`ANY_RECORD`]) followed by one record per endpoint.
    list: Arc<[u8]>,
    /// `(index, details)` in index order; `None` when no endpoint has any.
    details: Option<Arc<[Indexed]>>,
}

impl Endpoints {
    pub fn len(&self) -> usize {
        match self.list.split_first() {
            Some((&record, records)) => records.len() / usize::from(record.max(1)),
            None => 0,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The endpoint at `index`.
    pub fn get(&self, index: usize) -> Option<Endpoint> {
        let (&record, records) = self.list.split_first()?;
        let size = usize::from(record);
        let start = index.checked_mul(size)?;
        unpack(record, records.get(start..start.checked_add(size)?)?)
    }

    /// Every endpoint, in order.
    pub fn iter(&self) -> impl Iterator<Item = Endpoint> + '_ {
        let (record, records) = self.list.split_first().unwrap_or((&V4_RECORD, &[]));
        records
            .chunks_exact(usize::from((*record).max(1)))
            .filter_map(|bytes| unpack(*record, bytes))
    }

    /// The details of the endpoint at `index`, when it has any.
    pub fn details(&self, index: usize) -> Option<&Arc<EndpointDetails>> {
        let details = self.details.as_deref()?;
        let index = u32::try_from(index).ok()?;
        let at = details.binary_search_by_key(&index, |(i, _)| *i).ok()?;
        details.get(at).map(|(_, details)| details)
    }

    /// The hostname of the endpoint at `index`, when it has one.
    pub fn hostname(&self, index: usize) -> Option<&str> {
        self.details(index)?.hostname.as_deref()
    }

    /// Each endpoint with its details.
    pub fn with_details(&self) -> impl Iterator<Item = (Endpoint, Option<&Arc<EndpointDetails>>)> {
        let mut details = self
            .details
            .as_deref()
            .unwrap_or_default()
            .iter()
            .peekable();
        self.iter().enumerate().map(move |(index, endpoint)| {
            let own = details
                .next_if(|(at, _)| usize::try_from(*at).is_ok_and(|at| at == index))
                .map(|(_, details)| details);
            (endpoint, own)
        })
    }

    /// A builder holding a copy of the first `count` endpoints, with room
    /// for the rest.
    pub fn copy_first(&self, count: usize) -> EndpointsBuilder {
        let mut builder = EndpointsBuilder::with_capacity(self.len().max(count));
        for (endpoint, details) in self.with_details().take(count) {
            builder.push(endpoint, details.cloned());
        }
        builder
    }

    /// Lets `share` swap each endpoint's details for an equal allocation
    /// held elsewhere; only while the list is not shared yet (as decoded).
    pub fn share_details(&mut self, mut share: impl FnMut(&mut Arc<EndpointDetails>)) {
        if let Some(details) = self.details.as_mut().and_then(Arc::get_mut) {
            for (_, details) in details.iter_mut() {
                share(details);
            }
        }
    }

    /// The same endpoints followed by `endpoint` (a copy: for builders and tests).
    pub fn with(&self, endpoint: Endpoint, details: Option<Arc<EndpointDetails>>) -> Self {
        let mut builder = self.copy_first(self.len());
        builder.push(endpoint, details);
        builder.build()
    }
}

impl fmt::Debug for Endpoints {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Endpoints")
            .field("list", &self.iter().collect::<Vec<_>>())
            .field("details", &self.details)
            .finish()
    }
}

/// The packed form of `list`: IPv4-only lists in 5-byte records.
fn pack(list: &[Endpoint]) -> Arc<[u8]> {
    if list.is_empty() {
        return Arc::default();
    }
    let v4_only = list.iter().all(|endpoint| endpoint.address.is_ipv4());
    let record = if v4_only { V4_RECORD } else { ANY_RECORD };
    let mut bytes = Vec::with_capacity(1 + list.len() * usize::from(record));
    bytes.push(record);
    for endpoint in list {
        let conditions = (u8::from(endpoint.ready) * READY)
            | (u8::from(endpoint.serving) * SERVING)
            | (u8::from(endpoint.terminating) * TERMINATING);
        match (endpoint.address, v4_only) {
            (IpAddr::V4(v4), true) => bytes.extend_from_slice(&v4.octets()),
            (IpAddr::V4(v4), false) => {
                bytes.push(4);
                bytes.extend_from_slice(&v4.octets());
                bytes.extend_from_slice(&[0; 12]);
            }
            (IpAddr::V6(v6), _) => {
                bytes.push(6);
                bytes.extend_from_slice(&v6.octets());
            }
        }
        bytes.push(conditions);
    }
    bytes.into()
}

/// The endpoint in one record of a list of `record`-sized records.
fn unpack(record: u8, bytes: &[u8]) -> Option<Endpoint> {
    let (address, conditions) = match (record, bytes) {
        (V4_RECORD, &[a, b, c, d, conditions]) => {
            (IpAddr::V4(Ipv4Addr::new(a, b, c, d)), conditions)
        }
        (ANY_RECORD, [family, address @ .., conditions]) => {
            let address = match family {
                4 => IpAddr::V4(Ipv4Addr::from(<[u8; 4]>::try_from(address.get(..4)?).ok()?)),
                6 => IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(address).ok()?)),
                _ => return None,
            };
            (address, *conditions)
        }
        _ => return None,
    };
    Some(Endpoint {
        address,
        ready: conditions & READY != 0,
        serving: conditions & SERVING != 0,
        terminating: conditions & TERMINATING != 0,
    })
}

/// Endpoints without details.
impl From<Vec<Endpoint>> for Endpoints {
    fn from(list: Vec<Endpoint>) -> Self {
        Self {
            list: pack(&list),
            details: None,
        }
    }
}

/// Endpoints without details.
impl FromIterator<Endpoint> for Endpoints {
    fn from_iter<I: IntoIterator<Item = Endpoint>>(endpoints: I) -> Self {
        Self::from(endpoints.into_iter().collect::<Vec<_>>())
    }
}

/// Collects endpoints and their details, in order.
#[derive(Debug, Default)]
pub struct EndpointsBuilder {
    list: Vec<Endpoint>,
    details: Vec<Indexed>,
}

impl EndpointsBuilder {
    pub fn with_capacity(capacity: usize) -> Self {
        Self {
            list: Vec::with_capacity(capacity),
            details: Vec::new(),
        }
    }

    pub fn push(&mut self, endpoint: Endpoint, details: Option<Arc<EndpointDetails>>) {
        // A slice holds at most a thousand endpoints: the index always fits.
        if let (Some(details), Ok(index)) = (details, u32::try_from(self.list.len())) {
            self.details.push((index, details));
        }
        self.list.push(endpoint);
    }

    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    pub fn build(self) -> Endpoints {
        Endpoints {
            list: pack(&self.list),
            details: (!self.details.is_empty()).then(|| self.details.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::net::{IpAddr, Ipv4Addr};

    use super::*;

    fn endpoint(last: u8) -> Endpoint {
        Endpoint::ready(IpAddr::V4(Ipv4Addr::new(10, 0, 0, last)))
    }

    fn named(hostname: &str) -> Option<Arc<EndpointDetails>> {
        EndpointDetails::hostname(hostname)
    }

    #[test]
    fn details_stay_with_their_endpoint() {
        let mut builder = EndpointsBuilder::default();
        builder.push(endpoint(1), None);
        builder.push(endpoint(2), named("b"));
        builder.push(endpoint(3), None);
        builder.push(endpoint(4), named("d"));
        let endpoints = builder.build();
        assert_eq!(endpoints.len(), 4);
        let hostnames: Vec<Option<&str>> = (0..5).map(|i| endpoints.hostname(i)).collect();
        assert_eq!(hostnames, [None, Some("b"), None, Some("d"), None]);
        let walked: Vec<Option<&str>> = endpoints
            .with_details()
            .map(|(_, details)| details.and_then(|d| d.hostname.as_deref()))
            .collect();
        assert_eq!(walked, hostnames[..4]);

        let longer = endpoints.with(endpoint(5), named("e"));
        assert_eq!(longer.len(), 5);
        assert_eq!(longer.hostname(1), Some("b"));
        assert_eq!(longer.hostname(4), Some("e"));
    }

    #[test]
    fn endpoints_read_back_as_they_were_put_in_whatever_their_families() {
        let v6 = |last: u16| IpAddr::V6(std::net::Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, last));
        let with_conditions = |address, ready, serving, terminating| Endpoint {
            address,
            ready,
            serving,
            terminating,
        };
        let v4_only = vec![
            endpoint(1),
            with_conditions(endpoint(2).address, false, true, true),
            with_conditions(endpoint(3).address, false, false, false),
        ];
        let mixed = vec![
            with_conditions(v6(1), true, true, false),
            endpoint(7),
            with_conditions(v6(0xffff), false, true, true),
        ];
        for list in [v4_only, mixed, vec![]] {
            let endpoints = Endpoints::from(list.clone());
            assert_eq!(endpoints.len(), list.len());
            assert_eq!(endpoints.iter().collect::<Vec<_>>(), list);
            let by_index: Vec<Endpoint> =
                (0..list.len()).filter_map(|i| endpoints.get(i)).collect();
            assert_eq!(by_index, list);
            assert_eq!(endpoints.get(list.len()), None);
        }
        assert_eq!(
            Endpoints::from(vec![endpoint(1), endpoint(2)]).list.len(),
            11,
            "an IPv4 endpoint is 5 bytes"
        );
    }

    #[test]
    fn endpoints_without_details_hold_none() {
        let endpoints = Endpoints::from(vec![endpoint(1), endpoint(2)]);
        assert_eq!(endpoints.details, None);
        assert_eq!(endpoints.hostname(0), None);
        assert_eq!(std::mem::size_of::<Endpoint>(), 20);
    }
}
