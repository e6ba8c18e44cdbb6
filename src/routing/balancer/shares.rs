//! What a port's locality tiers are and take of new connections now, for
//! `/debug/routes` and `strait explain`: the numbers a pick uses.

use std::time::Instant;

use serde::Serialize;

use super::policy::{self, PolicySource};
use super::{BackendId, Chooser, HEALTHY, MAX_TIERS, OUTSIDE, health_of, read, tier_of};
use crate::model::Locality;
use crate::routing::{PortRoute, ServiceRoutes};

/// How a port's new connections are spread over the locality tiers now.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct LocalityReport {
    pub locality: Locality,
    /// Which layer of the service's policy chose the locality.
    pub locality_from: PolicySource,
    pub minimum_healthy: u32,
    pub tiers: Vec<TierShare>,
    /// Backends out of rotation now (`network/address:port`): ejected by
    /// outlier detection, or down by active health checks.
    pub ejected: Vec<String>,
    /// Of those, the ones active health checks hold out.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub down_by_health_check: Vec<String>,
    /// The service's fence (`clusters …; networks …`), if it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fence: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fence_from: Option<PolicySource>,
    /// Backends outside the fence: never used.
    pub outside_fence: usize,
}

/// One locality tier: its backends inside the fence, those a new
/// connection may go to (not ejected), and the fraction of new connections
/// it takes now.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct TierShare {
    pub tier: &'static str,
    pub backends: usize,
    pub candidates: usize,
    pub share: f64,
}

impl Chooser {
    /// What each locality tier of `service`'s `route` is and takes of new
    /// connections now, before any connection has tried anything.
    pub fn tier_shares(
        &self,
        service: &ServiceRoutes,
        route: &PortRoute,
        now: Instant,
    ) -> LocalityReport {
        let resolved = self.policies.resolve(service);
        let slots = read(&self.slots);
        let flags: Vec<u8> = route
            .backends
            .iter()
            .map(|routed| self.classify(&slots, routed, &resolved, &[], now, true))
            .collect();
        let tiers = policy::tiers(resolved.locality);
        let health = health_of(&flags).unwrap_or(super::UNTRIED);
        let counts: [usize; MAX_TIERS] =
            std::array::from_fn(|index| tier_of(&flags, health, tiers, index).count);
        let shares = policy::spread(&counts, resolved.minimum_healthy)
            .map_or([0.0; MAX_TIERS], |(_, shares)| shares);
        let report_tiers = tiers
            .iter()
            .enumerate()
            .map(|(index, (_, name))| TierShare {
                tier: name,
                // Inside the fence: an outside backend has no other flag.
                backends: tier_of(&flags, 0, tiers, index).count_without(OUTSIDE),
                candidates: counts[index],
                share: shares[index],
            })
            .collect();
        let ejected = route
            .backends
            .iter()
            .zip(&flags)
            .filter(|(_, flag)| *flag & (HEALTHY | OUTSIDE) == 0)
            .map(|(routed, _)| BackendId::of(routed).to_string())
            .collect();
        let down_by_health_check = route
            .backends
            .iter()
            .filter(|routed| {
                super::slot_of(&slots, *routed)
                    .is_some_and(|slot| super::lock(&slot.health).probe_down())
            })
            .map(|routed| BackendId::of(routed).to_string())
            .collect();
        LocalityReport {
            locality: resolved.locality,
            locality_from: resolved.locality_from,
            minimum_healthy: resolved.minimum_healthy,
            tiers: report_tiers,
            ejected,
            down_by_health_check,
            fence: resolved.fence.map(ToString::to_string),
            fence_from: resolved.fence.map(|_| resolved.fence_from),
            outside_fence: flags.iter().filter(|flag| **flag == OUTSIDE).count(),
        }
    }
}
