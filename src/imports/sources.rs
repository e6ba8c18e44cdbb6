//! Imported endpoints per source cluster: what the MCS EndpointSlices of an
//! import hold (KEP-1645, "Using EndpointSlice objects to track
//! endpoints"). Pure.
//!
//! One slice per (exporting cluster, address family, set of ports), of at
//! most [`MAX_ENDPOINTS_PER_SLICE`] endpoints (more make more slices), each
//! holding addresses that work from this cluster:
//! - a cluster on this cluster's network: its endpoints' own addresses, on
//!   their own (target) ports;
//! - a cluster on another network, headless service: each ready pod's
//!   address here (its per-pod derived Service's ClusterIP, or a file
//!   setup's `imports.podAddresses`), on the pod's own ports, hostname kept;
//! - a cluster on another network, ClusterSetIP service: this cluster's
//!   gateway pods, on the import ports of the ports that cluster declares.
//!   A connection there reaches the service through the gateway, which
//!   balances it over every cluster declaring the port, not only this one:
//!   the slice says which ports and clusters exist, not a private path.
//!
//! Ready endpoints are `ready`; serving-and-terminating ones (the merge's
//! last resort) are listed `ready: false, serving: true, terminating:
//! true`; not-ready endpoints are left out. A cluster whose id cannot be a
//! label value (more than 63 characters) gets no slice: the
//! `multicluster.kubernetes.io/source-cluster` label could not name it.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;

use serde::Serialize;

use super::PlannedImport;
use crate::discovery::observed::Observed;
use crate::merge::{BackendState, MergedService};
use crate::model::{ClusterId, IpFamily, Protocol, ServiceKey, ServiceType};
use crate::routing::{Path, RouteTable, ServiceRoutes};

/// The longest label value Kubernetes accepts.
pub const MAX_LABEL_VALUE_LEN: usize = 63;
/// The most endpoints one MCS slice holds: the EndpointSlice controller's
/// default (`--max-endpoints-per-slice`); the API refuses more than 1,000.
pub const MAX_ENDPOINTS_PER_SLICE: usize = 100;

/// One exporting cluster's endpoints of a service, as the viewer reaches
/// them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceBackends {
    pub cluster: ClusterId,
    /// On the viewer's network: its endpoints are dialled directly.
    pub direct: bool,
    /// In address order.
    pub endpoints: Vec<SourceEndpoint>,
}

/// One endpoint of a source cluster and the service ports it serves.
/// Small: the reconciler holds one for every endpoint of the set it
/// imports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceEndpoint {
    pub address: IpAddr,
    pub hostname: Option<String>,
    pub state: BackendState,
    /// `(protocol, service port)` and its target port, in order.
    ports: Box<[((Protocol, u16), u16)]>,
}

impl SourceEndpoint {
    /// The target port of a service port it serves.
    pub fn target_port(&self, protocol: Protocol, port: u16) -> Option<u16> {
        let at = self
            .ports
            .binary_search_by_key(&(protocol, port), |(key, _)| *key)
            .ok()?;
        self.ports.get(at).map(|(_, target)| *target)
    }
}

/// Every service's source clusters as a route table's viewer reaches them,
/// each with the routes it was read from.
#[derive(Debug, Clone, Default)]
pub struct Sources(BTreeMap<ServiceKey, (Arc<ServiceRoutes>, Arc<[SourceBackends]>)>);

impl Sources {
    /// A service's source clusters, in cluster order; `None` when none
    /// exports it with endpoints.
    pub fn get(&self, service: &ServiceKey) -> Option<&[SourceBackends]> {
        self.0.get(service).map(|(_, sources)| &**sources)
    }

    /// [`Sources::get`] as shared: the same `Arc` while the service's
    /// routes do not change.
    pub fn get_shared(&self, service: &ServiceKey) -> Option<&Arc<[SourceBackends]>> {
        self.0.get(service).map(|(_, sources)| sources)
    }
}

/// Every service's source clusters as `table`'s viewer reaches them, in
/// cluster order.
pub fn source_backends(table: &RouteTable) -> Sources {
    source_backends_reusing(table, None)
}

/// [`source_backends`], reading again only the services whose routes are
/// not those `previous` was read from: a table built reusing the last
/// one shares the routes of every service that did not change, so one
/// change costs its service.
pub fn source_backends_reusing(table: &RouteTable, previous: Option<&Sources>) -> Sources {
    let mut all = BTreeMap::new();
    for routes in table.shared_services() {
        let reused = previous
            .and_then(|previous| previous.0.get(&routes.key))
            .filter(|(read_from, _)| Arc::ptr_eq(read_from, routes));
        let sources = match reused {
            Some((_, sources)) => Arc::clone(sources),
            None => Arc::from(service_sources(routes)),
        };
        all.insert(routes.key.clone(), (Arc::clone(routes), sources));
    }
    Sources(all)
}

/// One service's source clusters, in cluster order.
fn service_sources(service: &ServiceRoutes) -> Vec<SourceBackends> {
    {
        // Per cluster: on the viewer's network, and each endpoint's state and
        // `(protocol, port) -> target` pairs.
        type Serving<'t> = (
            Option<&'t str>,
            BackendState,
            BTreeMap<(Protocol, u16), u16>,
        );
        let mut clusters: BTreeMap<&ClusterId, (bool, BTreeMap<IpAddr, Serving>)> = BTreeMap::new();
        for port in &service.ports {
            for routed in &port.backends {
                let backend = routed.backend;
                let (_, endpoints) = clusters
                    .entry(backend.cluster)
                    .or_insert_with(|| (*routed.path() == Path::Direct, BTreeMap::new()));
                let (_, state, ports) = endpoints
                    .entry(backend.address)
                    .or_insert_with(|| (backend.hostname(), backend.state, BTreeMap::new()));
                // Ready for one port is ready: the merge drops only the
                // endpoints that are neither.
                if backend.state == BackendState::Ready {
                    *state = BackendState::Ready;
                }
                ports.insert((port.protocol, port.port), backend.port);
            }
        }
        clusters
            .into_iter()
            .map(|(cluster, (direct, endpoints))| SourceBackends {
                cluster: cluster.clone(),
                direct,
                endpoints: endpoints
                    .into_iter()
                    .map(|(address, (hostname, state, ports))| SourceEndpoint {
                        address,
                        hostname: hostname.map(str::to_owned),
                        state,
                        ports: ports.into_iter().collect(),
                    })
                    .collect(),
            })
            .collect()
    }
}

/// How a slice's addresses reach the source cluster's endpoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Reached {
    /// The endpoints' own addresses (same network).
    Direct,
    /// Each remote pod's address here (headless, another network).
    PodAddress,
    /// This cluster's gateway pods on the import ports (ClusterSetIP,
    /// another network).
    Gateway,
}

/// One port of a planned slice.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SlicePort {
    pub name: String,
    pub protocol: Protocol,
    pub port: u16,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub app_protocol: Option<String>,
}

/// One endpoint of a planned slice.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SliceEndpoint {
    pub address: IpAddr,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    pub ready: bool,
    pub serving: bool,
    pub terminating: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
}

/// One MCS EndpointSlice an import should have.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PlannedSlice {
    pub cluster: ClusterId,
    pub family: IpFamily,
    pub reached: Reached,
    pub ports: Vec<SlicePort>,
    pub endpoints: Vec<SliceEndpoint>,
}

/// The MCS slices of one import, and the source clusters that get none
/// because their id cannot be a label value.
pub fn planned_slices(
    service: &MergedService,
    planned: &PlannedImport,
    sources: &[SourceBackends],
    observed: &Observed,
) -> (Vec<PlannedSlice>, Vec<ClusterId>) {
    let mut slices = Vec::new();
    let mut unlabelled = Vec::new();
    for source in sources {
        if source.cluster.as_str().len() > MAX_LABEL_VALUE_LEN {
            unlabelled.push(source.cluster.clone());
            continue;
        }
        let (reached, grouped) = match (source.direct, planned.service_type) {
            (true, _) => (Reached::Direct, direct(service, source)),
            (false, ServiceType::Headless) => (Reached::PodAddress, pod_addresses(planned, source)),
            (false, _) => (
                Reached::Gateway,
                gateways(service, planned, source, observed),
            ),
        };
        for ((family, ports), mut endpoints) in grouped {
            if endpoints.is_empty() || ports.is_empty() {
                continue;
            }
            endpoints.sort();
            for chunk in endpoints.chunks(MAX_ENDPOINTS_PER_SLICE) {
                slices.push(PlannedSlice {
                    cluster: source.cluster.clone(),
                    family,
                    reached,
                    ports: ports.clone(),
                    endpoints: chunk.to_vec(),
                });
            }
        }
    }
    (slices, unlabelled)
}

/// Endpoints grouped by address family and the ports they serve: a slice's
/// ports hold for every endpoint in it.
type Grouped = BTreeMap<(IpFamily, Vec<SlicePort>), Vec<SliceEndpoint>>;

fn conditions(state: BackendState) -> (bool, bool, bool) {
    match state {
        BackendState::Ready => (true, true, false),
        BackendState::ServingTerminating => (false, true, true),
    }
}

/// A same-network cluster's endpoints, on their own target ports.
fn direct(service: &MergedService, source: &SourceBackends) -> Grouped {
    let mut grouped = Grouped::new();
    for endpoint in &source.endpoints {
        let mut ports: Vec<SlicePort> = service
            .ports
            .iter()
            .filter_map(|port| {
                let target = endpoint.target_port(port.protocol, port.port)?;
                Some(SlicePort {
                    name: port.name.clone(),
                    protocol: port.protocol,
                    port: target,
                    app_protocol: port.app_protocol.clone(),
                })
            })
            .collect();
        ports.sort();
        let (ready, serving, terminating) = conditions(endpoint.state);
        grouped
            .entry((IpFamily::of(&endpoint.address), ports))
            .or_default()
            .push(SliceEndpoint {
                address: endpoint.address,
                hostname: endpoint.hostname.clone(),
                ready,
                serving,
                terminating,
                zone: None,
            });
    }
    grouped
}

/// A remote headless service's pods by their addresses here, on the pods'
/// own ports (what their per-pod derived Services expose).
fn pod_addresses(planned: &PlannedImport, source: &SourceBackends) -> Grouped {
    let mut grouped = Grouped::new();
    for pod in planned
        .pods
        .iter()
        .filter(|p| p.pod.cluster == source.cluster)
    {
        let mut ports: Vec<SlicePort> = pod
            .ports
            .iter()
            .filter(|port| port.import_port.is_some())
            .map(|port| SlicePort {
                name: port.name.clone(),
                protocol: port.protocol,
                port: port.port,
                app_protocol: port.app_protocol.clone(),
            })
            .collect();
        ports.sort();
        // A pod's label is its hostname when it has one: only such an
        // endpoint carries a hostname to keep (compared without making
        // every endpoint's label).
        let hostname = source
            .endpoints
            .iter()
            .find_map(|endpoint| endpoint.hostname.as_ref().filter(|h| **h == pod.pod.label))
            .cloned();
        for address in &pod.ips {
            grouped
                .entry((IpFamily::of(address), ports.clone()))
                .or_default()
                .push(SliceEndpoint {
                    address: *address,
                    hostname: hostname.clone(),
                    ready: true,
                    serving: true,
                    terminating: false,
                    zone: None,
                });
        }
    }
    grouped
}

/// This cluster's gateway pods of the service's families, on the import
/// ports of the ports the source cluster declares.
fn gateways(
    service: &MergedService,
    planned: &PlannedImport,
    source: &SourceBackends,
    observed: &Observed,
) -> Grouped {
    let mut ports: Vec<SlicePort> = planned
        .ports
        .iter()
        .filter(|port| {
            source
                .endpoints
                .iter()
                .any(|endpoint| endpoint.target_port(port.protocol, port.port).is_some())
        })
        .filter_map(|port| {
            Some(SlicePort {
                name: port.name.clone(),
                protocol: port.protocol,
                port: port.import_port?,
                app_protocol: port.app_protocol.clone(),
            })
        })
        .collect();
    ports.sort();
    let mut grouped = Grouped::new();
    let families = &service.ip_families;
    for gateway in &observed.gateway_endpoints {
        let family = IpFamily::of(&gateway.address);
        if !families.is_empty() && !families.contains(&family) {
            continue;
        }
        grouped
            .entry((family, ports.clone()))
            .or_default()
            .push(SliceEndpoint {
                address: gateway.address,
                hostname: None,
                ready: gateway.ready,
                serving: gateway.serving,
                terminating: gateway.terminating,
                zone: gateway.zone.clone(),
            });
    }
    grouped
}
