//! A service's routing policy as one pick uses it: the layers resolved
//! into locality, minimum and fence ([`Resolved`]), the locality tiers, and
//! how new connections spread over them.

use std::collections::HashMap;

use crate::model::{Fence, Locality, RoutingPolicy, ServiceKey};
use crate::routing::{PortRoute, RoutedBackend, ServiceRoutes};

use super::{Chooser, IN_CLUSTER, MAX_TIERS, ON_NETWORK};

/// Where a resolved locality came from, nearest the caller first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PolicySource {
    /// This gateway's `routing` entry for the service (its cluster's admin).
    Admin,
    /// The oldest export's `strait.dev/*` annotations.
    Export,
    /// The oldest export's Service's `trafficDistribution`.
    TrafficDistribution,
    /// This gateway's `tuning`.
    Gateway,
}

/// The policy of one service for one pick.
#[derive(Debug, Clone, Copy)]
pub(super) struct Resolved<'p> {
    pub locality: Locality,
    pub locality_from: PolicySource,
    /// At least 1.
    pub minimum_healthy: u32,
    pub fence: Option<&'p Fence>,
    pub fence_from: PolicySource,
}

/// The gateway's defaults and its admin's per-service layers.
#[derive(Debug, Default)]
pub(super) struct Policies {
    pub locality: Locality,
    pub minimum_healthy: u32,
    pub admin: HashMap<ServiceKey, RoutingPolicy>,
}

impl Policies {
    /// `service`'s policy: each field from the nearest layer that sets it
    /// (module documentation of [`crate::model::RoutingPolicy`]).
    pub fn resolve<'p>(&'p self, service: &'p ServiceRoutes) -> Resolved<'p> {
        // No lookup at all while the admin names no service.
        let admin = (!self.admin.is_empty())
            .then(|| self.admin.get(&service.key))
            .flatten();
        let export = service.routing_policy();
        let (locality, locality_from) = admin
            .and_then(|policy| policy.locality)
            .map(|locality| (locality, PolicySource::Admin))
            .or_else(|| export.locality.map(|l| (l, PolicySource::Export)))
            .or_else(|| {
                Locality::of_traffic_distribution(service.traffic_distribution())
                    .map(|l| (l, PolicySource::TrafficDistribution))
            })
            .unwrap_or((self.locality, PolicySource::Gateway));
        let minimum_healthy = admin
            .and_then(|policy| policy.locality_minimum_healthy)
            .or(export.locality_minimum_healthy)
            .unwrap_or(self.minimum_healthy)
            .max(1);
        let (fence, fence_from) = match admin.and_then(|policy| policy.fence.as_ref()) {
            Some(fence) => (Some(fence), PolicySource::Admin),
            None => (export.fence.as_ref(), PolicySource::Export),
        };
        Resolved {
            locality,
            locality_from,
            minimum_healthy,
            fence,
            fence_from,
        }
    }
}

/// Each tier's flag and name, nearest first; a backend of an earlier tier
/// has the later ones' flags too (in the viewer's cluster is on its
/// network), so a tier is its flag without the one before it.
pub(super) fn tiers(locality: Locality) -> &'static [(u8, &'static str)] {
    match locality {
        Locality::None => &[(0, "every backend")],
        Locality::Cluster => &[
            (IN_CLUSTER, "this cluster"),
            (ON_NETWORK, "this network"),
            (0, "other networks"),
        ],
        Locality::Network => &[(ON_NETWORK, "this network"), (0, "other networks")],
    }
}

/// How new connections spread over tiers of `counts` candidates (module
/// documentation of the chooser, step 2): the furthest tier that takes a
/// share (the first at `minimum`, else the last with candidates), and each
/// tier's fraction. `None`: no candidate at all.
pub(super) fn spread(
    counts: &[usize; MAX_TIERS],
    minimum: u32,
) -> Option<(usize, [f64; MAX_TIERS])> {
    let minimum = minimum.max(1) as usize;
    let last = counts.iter().rposition(|count| *count > 0)?;
    let reach = (0..last)
        .find(|index| counts[*index] >= minimum)
        .unwrap_or(last);
    let mut shares = [0.0; MAX_TIERS];
    let mut left = 1.0;
    for (index, count) in counts.iter().enumerate().take(reach) {
        shares[index] = left * *count as f64 / minimum as f64;
        left -= shares[index];
    }
    shares[reach] = left;
    Some((reach, shares))
}

impl Chooser {
    /// Whether `routed` may serve `service`: inside its fence, if it has one.
    pub fn fence_admits(&self, service: &ServiceRoutes, routed: RoutedBackend<'_>) -> bool {
        self.policies
            .resolve(service)
            .fence
            .is_none_or(|fence| fence.admits(routed.backend.cluster, routed.attested_network()))
    }

    /// Why no backend of `route` may serve `service`: every one is outside
    /// its fence. `None` when one is inside, or there is no fence.
    pub fn fenced_out(&self, service: &ServiceRoutes, route: &PortRoute) -> Option<String> {
        let policy = self.policies.resolve(service);
        let fence = policy.fence?;
        if route
            .backends
            .iter()
            .any(|routed| fence.admits(routed.backend.cluster, routed.attested_network()))
        {
            return None;
        }
        let mut outside: Vec<String> = route
            .backends
            .iter()
            .map(|routed| match routed.attested_network() {
                Some(network) => format!("{} on {network}", routed.backend.cluster),
                None => format!(
                    "{} on {} (not attested)",
                    routed.backend.cluster,
                    routed.network()
                ),
            })
            .collect();
        outside.dedup();
        Some(format!(
            "{} is fenced to {fence} ({} policy); none of port {}'s backends is inside{}",
            service.key,
            match policy.fence_from {
                PolicySource::Admin => "this cluster's",
                _ => "its exporter's",
            },
            route.port,
            if outside.is_empty() {
                String::new()
            } else {
                format!(": {}", outside.join(", "))
            }
        ))
    }
}
