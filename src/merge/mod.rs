//! The MCS merge (KEP-1645): turns the constituents of each exported service
//! into one multi-cluster service with merged ports, raised conflicts and, per
//! port, the backends that may carry its traffic. Pure: no I/O, no clock.
//!
//! The rules, all resolved in favour of the oldest export (ServiceExport
//! `creationTimestamp`, ties broken by cluster id, exports without a timestamp
//! last):
//! - ports merge by name first, then by (protocol, number); the service exposes
//!   the union and raises `PortConflict` when the constituents' ports differ;
//! - a port's traffic goes only to constituents whose Service declares that
//!   (protocol, number); the target port is resolved inside each cluster by the
//!   Service port's name, as Kubernetes does;
//! - the oldest export's access policy (`strait.dev/allowed-*`) is the
//!   service's, `AccessPolicyConflict` when another constituent's differs;
//! - not-ready endpoints carry no traffic; serving-and-terminating endpoints
//!   are used only when a port has no ready backend at all.

mod backends;
mod conflict;

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::net::IpAddr;
use std::sync::Arc;

use serde::Serialize;

pub use backends::{Backend, BackendRun, BackendState, Backends, Iter as BackendsIter};
pub use conflict::{Conflict, ConflictReason};

use crate::model::{
    AccessPolicy, Cluster, ClusterId, ClusterService, ClusterSet, EndpointsBuilder, IpFamily,
    Protocol, RoutingPolicy, ServiceKey, ServicePort, ServiceType, SessionAffinity, Shared,
};

/// Every multi-cluster service of the set, by key. Each service is shared:
/// a merge that finds a service's holders unchanged hands on the same
/// allocation, and whoever built something from it (a route table) can
/// tell it is unchanged by its address (`Arc::ptr_eq`).
#[derive(Debug, Clone, Default)]
pub struct MergedSet {
    pub services: Shared<ServiceKey, Arc<MergedService>>,
}

/// One multi-cluster service: what its constituents agree on, or what the oldest said.
#[derive(Debug, Clone)]
pub struct MergedService {
    pub key: ServiceKey,
    pub service_type: ServiceType,
    pub ports: Vec<MergedPort>,
    pub conflicts: Vec<Conflict>,
    pub session_affinity: SessionAffinity,
    pub session_affinity_timeout: Option<u32>,
    /// Empty when no constituent says.
    pub ip_families: Vec<IpFamily>,
    /// The oldest export's Service's `internalTrafficPolicy`.
    pub internal_traffic_policy: String,
    /// The oldest export's Service's `trafficDistribution`.
    pub traffic_distribution: Option<String>,
    /// The oldest export's `exportedLabels`: the labels of the ServiceImport.
    pub exported_labels: BTreeMap<String, String>,
    /// The oldest export's `exportedAnnotations`: the ServiceImport's annotations.
    pub exported_annotations: BTreeMap<String, String>,
    /// Who may call: the oldest export's policy (`strait.dev/allowed-*`
    /// annotations); `None` admits every cluster of the set. Shared: every
    /// route table built from this merge holds it.
    pub access: Option<Arc<AccessPolicy>>,
    /// Whether backend connections start with a PROXY protocol v2 header:
    /// the oldest export's `strait.dev/proxy-protocol`.
    pub proxy_protocol: bool,
    /// Where importers' connections may go: the oldest export's
    /// `strait.dev/locality`, `locality-minimum-healthy` and `fence-*`.
    pub routing: RoutingPolicy,
    /// The exporting clusters, oldest export first.
    pub constituents: Vec<ClusterId>,
    /// Clusters that hold the Service without exporting it.
    pub not_exported: Vec<ClusterId>,
    /// What it was merged from: every cluster holding the Service, in
    /// cluster id order, and its translation there. A later merge whose
    /// holders are these very allocations reuses this service.
    holders: Vec<(ClusterId, Arc<ClusterService>)>,
}

impl MergedService {
    /// Whether `cluster`'s own export of this service asks for the PROXY
    /// protocol: its backends' ports speak it whatever the oldest export
    /// says (a conflict, a rollout), so a header is owed to them.
    pub fn proxy_protocol_of(&self, cluster: &ClusterId) -> bool {
        self.holders.iter().any(|(holder, service)| {
            holder == cluster && service.export.as_ref().is_some_and(|e| e.proxy_protocol)
        })
    }

    pub fn port(&self, protocol: Protocol, port: u16) -> Option<&MergedPort> {
        self.ports
            .iter()
            .find(|p| p.protocol == protocol && p.port == port)
    }

    /// The `Conflict` condition's reason: reasons comma-joined, or `NoConflicts`.
    pub fn conflict_condition_reason(&self) -> String {
        if self.conflicts.is_empty() {
            return "NoConflicts".to_owned();
        }
        let reasons: Vec<String> = self
            .conflicts
            .iter()
            .map(|c| c.reason.to_string())
            .collect();
        reasons.join(",")
    }
}

/// One port of the merged service and the backends that may carry it.
#[derive(Debug, Clone)]
pub struct MergedPort {
    pub name: String,
    pub protocol: Protocol,
    pub port: u16,
    pub app_protocol: Option<String>,
    /// Shared: a route of this port holds the same allocation.
    pub backends: Backends,
    pub excluded: Vec<Exclusion>,
}

impl MergedService {
    /// The ports `cluster`'s Service declares that the merged service does
    /// not expose as declared: each lost a collision (by name, or by
    /// protocol and number) with an older export's port. Empty for a
    /// cluster that does not hold the Service.
    pub fn dropped_ports(&self, cluster: &ClusterId) -> Vec<&crate::model::ServicePort> {
        let Some((_, holder)) = self.holders.iter().find(|(id, _)| id == cluster) else {
            return Vec::new();
        };
        holder
            .spec
            .ports
            .iter()
            .filter(|declared| {
                !self.ports.iter().any(|exposed| {
                    exposed.name == declared.name
                        && exposed.protocol == declared.protocol
                        && exposed.port == declared.port
                })
            })
            .collect()
    }

    /// How many ready endpoints `cluster`'s Service has; `None` for a
    /// cluster that does not hold the Service.
    pub fn ready_endpoints(&self, cluster: &ClusterId) -> Option<usize> {
        let (_, holder) = self.holders.iter().find(|(id, _)| id == cluster)?;
        Some(
            holder
                .endpoint_groups
                .iter()
                .map(|group| group.endpoints.iter().filter(|e| e.ready).count())
                .sum(),
        )
    }
}

/// Why a cluster or an endpoint carries no traffic for a port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ExclusionReason {
    /// The cluster exports the service, but its Service does not declare this port.
    PortNotDeclared,
    /// The endpoint is neither ready nor (as a last resort) serving.
    NotReady,
    /// No gateway is known for the backend's network (set by routing).
    NoGateway,
    /// The endpoint's address family is not one the merged service uses.
    IpFamily,
    /// The cluster has the Service but no ServiceExport.
    NotExported,
    /// The cluster declares the port, but no EndpointSlice port matches its name.
    NoEndpoints,
}

impl ExclusionReason {
    pub fn as_str(self) -> &'static str {
        match self {
            ExclusionReason::PortNotDeclared => "port-not-declared",
            ExclusionReason::NotReady => "not-ready",
            ExclusionReason::NoGateway => "no-gateway",
            ExclusionReason::IpFamily => "ip-family",
            ExclusionReason::NotExported => "not-exported",
            ExclusionReason::NoEndpoints => "no-endpoints",
        }
    }
}

/// A cluster, or one endpoint address of it, left out of a port's backends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exclusion {
    pub cluster: ClusterId,
    pub address: Option<IpAddr>,
    pub reason: ExclusionReason,
}

/// Merges every exported service of the set.
pub fn merge(set: &ClusterSet) -> MergedSet {
    merge_reusing(set, &MergedSet::default())
}

/// Merges every exported service of the set like [`merge`], reusing
/// `previous`'s merge of each service whose holders are unchanged: the same
/// clusters holding the same shared translations. A change in one cluster
/// merges again only the services it touched.
pub fn merge_reusing(set: &ClusterSet, previous: &MergedSet) -> MergedSet {
    let mut holders: BTreeMap<&ServiceKey, Vec<(&Cluster, &Arc<ClusterService>)>> = BTreeMap::new();
    for cluster in set.clusters.values() {
        for service in cluster.services.values() {
            holders
                .entry(&service.key)
                .or_default()
                .push((cluster, service));
        }
    }
    let services = holders
        .into_iter()
        .filter_map(|(key, holders)| {
            if let Some(earlier) = previous.services.get(key)
                && earlier.merged_from(&holders)
            {
                return Some((key.clone(), earlier.clone()));
            }
            let merged = merge_service(key, &holders)?;
            Some((key.clone(), Arc::new(merged)))
        })
        .collect();
    MergedSet { services }
}

/// [`merge_reusing`] when only the `changed` services' holders may differ
/// from those `previous` was merged from (the same clusters, the others'
/// translations shared): merges those alone and shares the rest of
/// `previous` as it is, so a change costs its services, not the set.
pub fn merge_changed(
    set: &ClusterSet,
    previous: &MergedSet,
    changed: &BTreeSet<ServiceKey>,
) -> MergedSet {
    let mut services = previous.services.clone();
    for key in changed {
        let holders: Vec<(&Cluster, &Arc<ClusterService>)> = set
            .clusters
            .values()
            .filter_map(|cluster| cluster.services.get(key).map(|service| (cluster, service)))
            .collect();
        let earlier = previous
            .services
            .get(key)
            .filter(|earlier| earlier.merged_from(&holders));
        let merged = match earlier {
            Some(earlier) => Some(earlier.clone()),
            None if holders.is_empty() => None,
            None => merge_service(key, &holders).map(Arc::new),
        };
        match merged {
            Some(merged) => services.insert(key.clone(), merged),
            None => services.remove(key),
        };
    }
    MergedSet { services }
}

impl MergedService {
    /// Whether `holders` are exactly the clusters and translations this
    /// service was merged from.
    fn merged_from(&self, holders: &[(&Cluster, &Arc<ClusterService>)]) -> bool {
        self.holders.len() == holders.len()
            && self
                .holders
                .iter()
                .zip(holders)
                .all(|((id, held), (cluster, service))| {
                    *id == cluster.id && Arc::ptr_eq(held, service)
                })
    }
}

/// Orders constituents oldest export first; exports without a timestamp come
/// last, and equal ages fall back to the cluster id so the result never
/// depends on the order clusters were read in.
fn oldest_first(a: &(&Cluster, &ClusterService), b: &(&Cluster, &ClusterService)) -> Ordering {
    let created = |(_, s): &(&Cluster, &ClusterService)| s.export.as_ref().and_then(|e| e.created);
    match (created(a), created(b)) {
        (Some(x), Some(y)) => x.cmp(&y),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => Ordering::Equal,
    }
    .then_with(|| a.0.id.cmp(&b.0.id))
}

fn merge_service(
    key: &ServiceKey,
    holders: &[(&Cluster, &Arc<ClusterService>)],
) -> Option<MergedService> {
    let is_constituent =
        |s: &ClusterService| s.export.is_some() && s.spec.service_type != ServiceType::ExternalName;
    let (mut constituents, others): (Vec<_>, Vec<_>) = holders
        .iter()
        .map(|(cluster, service)| (*cluster, service.as_ref()))
        .partition(|(_, s)| is_constituent(s));
    if constituents.is_empty() {
        return None;
    }
    constituents.sort_by(oldest_first);
    let not_exported: Vec<ClusterId> = others
        .iter()
        .filter(|(_, s)| s.export.is_none())
        .map(|(c, _)| c.id.clone())
        .collect();

    let oldest = constituents[0].1;
    let merged_ports = merge_ports(&constituents);
    let mut conflicts = Vec::new();
    let disagreeing_ports = constituents
        .iter()
        .filter(|(_, s)| !same_port_set(&s.spec.ports, &oldest.spec.ports))
        .count();
    if disagreeing_ports > 0 {
        conflicts.push(conflict::port_conflict(
            &constituents[0].0.id,
            disagreeing_ports,
            constituents.len(),
        ));
    }
    conflicts.extend(property_conflicts(&constituents));

    // Unspecified IP families neither conflict nor filter: the oldest export
    // that names its families decides.
    let ip_families = constituents
        .iter()
        .map(|(_, s)| &s.spec.ip_families)
        .find(|families| !families.is_empty())
        .cloned()
        .unwrap_or_default();

    let ports = merged_ports
        .into_iter()
        .map(|port| resolve_port(port, &constituents, &not_exported, &ip_families))
        .collect();

    Some(MergedService {
        key: key.clone(),
        service_type: oldest.spec.service_type,
        ports,
        conflicts,
        session_affinity: oldest.spec.session_affinity,
        session_affinity_timeout: oldest.spec.session_affinity_timeout,
        ip_families,
        internal_traffic_policy: oldest.spec.internal_traffic_policy.clone(),
        traffic_distribution: oldest.spec.traffic_distribution.clone(),
        exported_labels: oldest
            .export
            .as_ref()
            .map(|e| e.exported_labels.clone())
            .unwrap_or_default(),
        exported_annotations: oldest
            .export
            .as_ref()
            .map(|e| e.exported_annotations.clone())
            .unwrap_or_default(),
        access: oldest
            .export
            .as_ref()
            .and_then(|e| e.access.clone())
            .map(Arc::new),
        proxy_protocol: oldest.export.as_ref().is_some_and(|e| e.proxy_protocol),
        routing: oldest
            .export
            .as_ref()
            .map(|e| e.routing.clone())
            .unwrap_or_default(),
        constituents: constituents.iter().map(|(c, _)| c.id.clone()).collect(),
        not_exported,
        holders: holders
            .iter()
            .map(|(cluster, service)| (cluster.id.clone(), Arc::clone(service)))
            .collect(),
    })
}

fn same_port_set(a: &[ServicePort], b: &[ServicePort]) -> bool {
    a.len() == b.len() && a.iter().all(|p| b.contains(p))
}

/// The union of ports, oldest export first: a port whose name, or whose
/// (protocol, number), is already taken by an older export is dropped.
fn merge_ports(constituents: &[(&Cluster, &ClusterService)]) -> Vec<ServicePort> {
    let mut merged: Vec<ServicePort> = Vec::new();
    for (_, service) in constituents {
        for port in &service.spec.ports {
            let taken = merged.iter().any(|m| {
                m.name == port.name || (m.protocol == port.protocol && m.port == port.port)
            });
            if !taken {
                merged.push(port.clone());
            }
        }
    }
    merged
}

fn property_conflicts(constituents: &[(&Cluster, &ClusterService)]) -> Vec<Conflict> {
    use ConflictReason::*;
    let values = |pick: &dyn Fn(&ClusterService) -> String| -> Vec<(&ClusterId, String)> {
        constituents.iter().map(|(c, s)| (&c.id, pick(s))).collect()
    };
    let quoted = |v: &String| format!("\"{v}\"");
    let mut conflicts = Vec::new();
    let mut check = |reason, pick: &dyn Fn(&ClusterService) -> String| {
        conflicts.extend(conflict::compare(reason, &values(pick), quoted));
    };
    check(TypeConflict, &|s| s.spec.service_type.to_string());
    check(SessionAffinityConflict, &|s| {
        s.spec.session_affinity.to_string()
    });
    check(
        SessionAffinityConfigConflict,
        &|s| match s.spec.session_affinity_timeout {
            Some(seconds) => format!("timeoutSeconds={seconds}"),
            None => "default timeout".to_owned(),
        },
    );
    check(InternalTrafficPolicyConflict, &|s| {
        s.spec.internal_traffic_policy.clone()
    });
    check(TrafficDistributionConflict, &|s| {
        s.spec
            .traffic_distribution
            .clone()
            .unwrap_or_else(|| "unset".to_owned())
    });
    check(LabelsConflict, &|s| {
        describe_map(s.export.as_ref().map(|e| &e.exported_labels))
    });
    check(AnnotationsConflict, &|s| {
        describe_map(s.export.as_ref().map(|e| &e.exported_annotations))
    });
    check(
        AccessPolicyConflict,
        &|s| match s.export.as_ref().and_then(|e| e.access.as_ref()) {
            Some(policy) => policy.to_string(),
            None => "every cluster of the cluster set".to_owned(),
        },
    );
    check(RoutingPolicyConflict, &|s| {
        s.export
            .as_ref()
            .map_or_else(|| "none".to_owned(), |e| e.routing.to_string())
    });
    check(ProxyProtocolConflict, &|s| {
        if s.export.as_ref().is_some_and(|e| e.proxy_protocol) {
            "v2".to_owned()
        } else {
            "none".to_owned()
        }
    });

    let specified_families: Vec<(&ClusterId, String)> = constituents
        .iter()
        .filter(|(_, s)| !s.spec.ip_families.is_empty())
        .map(|(c, s)| {
            let mut families = s.spec.ip_families.clone();
            families.sort();
            (&c.id, format!("{families:?}"))
        })
        .collect();
    conflicts.extend(conflict::compare(
        IPFamilyConflict,
        &specified_families,
        |v| v.clone(),
    ));
    conflicts.sort_by_key(|c| c.reason);
    conflicts
}

fn describe_map(map: Option<&BTreeMap<String, String>>) -> String {
    let entries: Vec<String> = map
        .into_iter()
        .flatten()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    format!("{{{}}}", entries.join(","))
}

/// Finds the backends of one merged port in every constituent that declares it.
fn resolve_port(
    port: ServicePort,
    constituents: &[(&Cluster, &ClusterService)],
    not_exported: &[ClusterId],
    ip_families: &[IpFamily],
) -> MergedPort {
    let mut ready: Vec<BackendRun> = Vec::new();
    let mut serving_terminating: Vec<BackendRun> = Vec::new();
    let mut not_ready: Vec<(ClusterId, IpAddr)> = Vec::new();
    let mut excluded = Vec::new();
    for (cluster, service) in constituents {
        let Some(declared) = service.spec.port_by_number(port.protocol, port.port) else {
            excluded.push(Exclusion {
                cluster: cluster.id.clone(),
                address: None,
                reason: ExclusionReason::PortNotDeclared,
            });
            continue;
        };
        let mut found_target = false;
        // An endpoint may sit in two slices while the EndpointSlice
        // controller moves it: keep it once. One slice holds no duplicates,
        // so the (costly) check runs only when there are several.
        let several_slices = service.endpoint_groups.len() > 1;
        let mut seen = HashSet::new();
        for group in &service.endpoint_groups {
            let Some(target) = group
                .ports
                .iter()
                .find(|p| p.name == declared.name && p.protocol == declared.protocol)
            else {
                continue;
            };
            found_target = true;
            // The slice's endpoints are shared as they are while every one
            // is a ready backend; from the first that is not, the ready
            // ones are copied.
            let endpoints = &group.endpoints;
            let mut kept: Option<EndpointsBuilder> = None;
            let mut terminating = EndpointsBuilder::default();
            for (index, endpoint) in endpoints.iter().enumerate() {
                let duplicate = several_slices && !seen.insert((endpoint.address, target.port));
                let family_fits = ip_families.is_empty()
                    || ip_families.contains(&IpFamily::of(&endpoint.address));
                if kept.is_none() && (duplicate || !family_fits || !endpoint.ready) {
                    kept = Some(endpoints.copy_first(index));
                }
                if duplicate {
                    continue;
                }
                if !family_fits {
                    excluded.push(Exclusion {
                        cluster: cluster.id.clone(),
                        address: Some(endpoint.address),
                        reason: ExclusionReason::IpFamily,
                    });
                } else if endpoint.ready {
                    if let Some(kept) = &mut kept {
                        kept.push(endpoint, endpoints.details(index).cloned());
                    }
                } else if endpoint.serving && endpoint.terminating {
                    terminating.push(endpoint, endpoints.details(index).cloned());
                } else {
                    not_ready.push((cluster.id.clone(), endpoint.address));
                }
            }
            let run = |state, endpoints| BackendRun {
                cluster: cluster.id.clone(),
                port: target.port,
                state,
                endpoints,
            };
            let ready_endpoints = match kept {
                Some(kept) => kept.build(),
                None => endpoints.clone(),
            };
            ready.push(run(BackendState::Ready, ready_endpoints));
            if !terminating.is_empty() {
                serving_terminating
                    .push(run(BackendState::ServingTerminating, terminating.build()));
            }
        }
        if !found_target {
            excluded.push(Exclusion {
                cluster: cluster.id.clone(),
                address: None,
                reason: ExclusionReason::NoEndpoints,
            });
        }
    }
    // As kube-proxy does: terminating endpoints that still serve are a last
    // resort, used only when no endpoint of the port is ready.
    let backends = if ready.iter().all(|run| run.endpoints.is_empty()) {
        Backends::new(serving_terminating)
    } else {
        for run in &serving_terminating {
            not_ready.extend(
                run.endpoints
                    .iter()
                    .map(|e| (run.cluster.clone(), e.address)),
            );
        }
        Backends::new(ready)
    };
    excluded.extend(not_ready.into_iter().map(|(cluster, address)| Exclusion {
        cluster,
        address: Some(address),
        reason: ExclusionReason::NotReady,
    }));
    excluded.extend(not_exported.iter().map(|cluster| Exclusion {
        cluster: cluster.clone(),
        address: None,
        reason: ExclusionReason::NotExported,
    }));
    MergedPort {
        name: port.name,
        protocol: port.protocol,
        port: port.port,
        app_protocol: port.app_protocol,
        backends,
        excluded,
    }
}

#[cfg(test)]
mod tests;
