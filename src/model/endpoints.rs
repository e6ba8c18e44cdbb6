//! A list of endpoints as a slice and everything made from it share it:
//! the endpoints themselves, 20 bytes each, and beside them the details
//! (hostname, placement) of the few that have any. A large cluster set
//! holds millions of endpoints and few hostnames, so a pointer per endpoint
//! for them would cost more than the addresses.

use std::ops::Deref;
use std::sync::Arc;

use super::{Endpoint, EndpointDetails};

/// The details of the endpoint at an index of the list.
type Indexed = (u32, Arc<EndpointDetails>);

/// Endpoints and their details. Cheap to clone: both parts are shared.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Endpoints {
    list: Arc<[Endpoint]>,
    /// `(index, details)` in index order; `None` when no endpoint has any.
    details: Option<Arc<[Indexed]>>,
}

impl Endpoints {
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
    pub fn with_details(&self) -> impl Iterator<Item = (&Endpoint, Option<&Arc<EndpointDetails>>)> {
        let mut details = self
            .details
            .as_deref()
            .unwrap_or_default()
            .iter()
            .peekable();
        self.list.iter().enumerate().map(move |(index, endpoint)| {
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
            builder.push(endpoint.clone(), details.cloned());
        }
        builder
    }

    /// The same endpoints followed by `endpoint` (a copy: for builders and tests).
    pub fn with(&self, endpoint: Endpoint, details: Option<Arc<EndpointDetails>>) -> Self {
        let mut builder = self.copy_first(self.len());
        builder.push(endpoint, details);
        builder.build()
    }
}

impl Deref for Endpoints {
    type Target = [Endpoint];

    fn deref(&self) -> &[Endpoint] {
        &self.list
    }
}

/// Endpoints without details.
impl From<Vec<Endpoint>> for Endpoints {
    fn from(list: Vec<Endpoint>) -> Self {
        Self {
            list: list.into(),
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
            list: self.list.into(),
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
    fn endpoints_without_details_hold_none() {
        let endpoints = Endpoints::from(vec![endpoint(1), endpoint(2)]);
        assert_eq!(endpoints.details, None);
        assert_eq!(endpoints.hostname(0), None);
        assert_eq!(std::mem::size_of::<Endpoint>(), 20);
    }
}
