//! Serialisable views of routing decisions: the shape `strait explain`
//! prints and the admin endpoint `/debug/routes` serves.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;

use super::balancer::{Chooser, LocalityReport};
use super::{Path as RoutePath, PortRoute, RouteTable, ServiceRoutes};
use crate::merge::{BackendState, Exclusion};
use crate::model::{ClusterId, GatewayAddress, NetworkId, Protocol, ServiceType};

#[derive(Debug, Serialize)]
pub struct Viewer {
    pub cluster: ClusterId,
    pub network: NetworkId,
}

#[derive(Debug, Serialize)]
pub struct BackendReport {
    pub cluster: ClusterId,
    pub network: NetworkId,
    pub address: IpAddr,
    pub port: u16,
    pub path: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gateways: Option<Vec<GatewayAddress>>,
    pub state: BackendState,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hostname: Option<Arc<str>>,
    /// What a pod of the viewer's cluster dials for this remote pod of a
    /// headless service: its per-pod derived Service's ClusterIPs (what
    /// DNS answers for it there); empty when it has none (yet), and for a
    /// ClusterSetIP service, whose pods dial the import's address.
    #[serde(rename = "dialHere", skip_serializing_if = "Vec::is_empty")]
    pub dial_here: Vec<IpAddr>,
}

#[derive(Debug, Serialize)]
pub struct ExcludedReport {
    pub cluster: ClusterId,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub address: Option<IpAddr>,
    pub reason: &'static str,
}

#[derive(Debug, Serialize)]
pub struct PortReport {
    pub service: String,
    pub port: u16,
    pub protocol: Protocol,
    #[serde(rename = "portName")]
    pub port_name: String,
    pub from: Viewer,
    pub conflicts: Vec<String>,
    /// The service's access policy, when it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub access: Option<String>,
    /// Why a connection from the viewer is refused whatever the backends:
    /// the service's access policy does not admit it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
    /// What each backend is told of who called, when the service asks for
    /// it (`strait.dev/proxy-protocol`).
    #[serde(rename = "proxyProtocol", skip_serializing_if = "Option::is_none")]
    pub proxy_protocol: Option<String>,
    pub backends: Vec<BackendReport>,
    pub excluded: Vec<ExcludedReport>,
    /// How the gateway spreads new connections over the locality tiers
    /// now; only a running gateway knows (`/debug/routes`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub locality: Option<LocalityReport>,
}

impl PortReport {
    /// The decision for one service port, as `strait explain` prints it.
    pub fn new(table: &RouteTable, service: &ServiceRoutes, route: &PortRoute) -> Self {
        Self {
            service: service.key.to_string(),
            port: route.port,
            protocol: route.protocol,
            port_name: route.name.clone(),
            from: Viewer {
                cluster: table.viewer().clone(),
                network: table.network().clone(),
            },
            conflicts: service
                .conflicts
                .iter()
                .map(|c| c.reason.to_string())
                .collect(),
            access: service
                .access
                .as_ref()
                .map(|policy| format!("admits {policy}")),
            refused: service.not_admitted(table.viewer(), table.attested_network(table.viewer())),
            proxy_protocol: service.proxy_protocol().then(|| {
                format!(
                    "v2: each backend reads a PROXY header first, with the client's address, TLV 0xE0 (caller cluster {}) and TLV 0xE1 (its gateway's SPIFFE identity)",
                    table.viewer()
                )
            }),
            backends: route
                .backends
                .iter()
                .map(|routed| BackendReport {
                    cluster: routed.backend.cluster.clone(),
                    network: routed.network().clone(),
                    address: routed.backend.address,
                    port: routed.backend.port,
                    path: routed.path().as_str(),
                    gateways: match routed.path() {
                        RoutePath::Direct => None,
                        RoutePath::Tunnel { gateways } => Some(gateways.to_vec()),
                    },
                    state: routed.backend.state,
                    hostname: routed.backend.hostname().map(Arc::from),
                    dial_here: match routed.path() {
                        RoutePath::Tunnel { .. } if service.service_type == ServiceType::Headless => {
                            table
                                .pod_addresses(&service.key, &routed.backend.pod_ref())
                                .to_vec()
                        }
                        _ => Vec::new(),
                    },
                })
                .collect(),
            excluded: route.excluded.iter().map(excluded).collect(),
            locality: None,
        }
    }
}

/// Adds to each report the chooser's view of its port now: the locality
/// tiers, what each takes of new connections, the ejected backends.
pub fn add_locality(
    reports: &mut [PortReport],
    table: &RouteTable,
    chooser: &Chooser,
    now: Instant,
) {
    for report in reports {
        let service = report
            .service
            .split_once('/')
            .and_then(|(namespace, name)| table.service(namespace, name));
        report.locality = service.and_then(|service| {
            let route = service.port(report.protocol, report.port)?;
            Some(chooser.tier_shares(service, route, now))
        });
    }
}

fn excluded(exclusion: &Exclusion) -> ExcludedReport {
    ExcludedReport {
        cluster: exclusion.cluster.clone(),
        address: exclusion.address,
        reason: exclusion.reason.as_str(),
    }
}

/// The ports of one service (none when the table has no such service).
pub fn service_ports(table: &RouteTable, namespace: &str, name: &str) -> Vec<PortReport> {
    table
        .service(namespace, name)
        .map(|service| {
            service
                .ports
                .iter()
                .map(|route| PortReport::new(table, service, route))
                .collect()
        })
        .unwrap_or_default()
}

/// Why a `/debug/routes` query cannot be answered.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RoutesQueryError {
    #[error("unknown query parameter {0:?}: only service=NAMESPACE/NAME")]
    Unknown(String),
    #[error("service={0:?} is not NAMESPACE/NAME")]
    Service(String),
}

/// Answers a `/debug/routes` query: every port, or with
/// `service=NAMESPACE/NAME` those of that one service, which at tens of
/// thousands of services is what a person (or a probe) wants.
pub fn query(table: &RouteTable, query: &str) -> Result<Vec<PortReport>, RoutesQueryError> {
    let mut service = None;
    for (key, value) in form_urlencoded::parse(query.as_bytes()) {
        match key.as_ref() {
            "service" => service = Some(value.into_owned()),
            other => return Err(RoutesQueryError::Unknown(other.to_owned())),
        }
    }
    let Some(service) = service else {
        return Ok(all_ports(table));
    };
    match service.split_once('/') {
        Some((namespace, name)) if !namespace.is_empty() && !name.is_empty() => {
            Ok(service_ports(table, namespace, name))
        }
        _ => Err(RoutesQueryError::Service(service)),
    }
}

/// Every service port of a table, in service then port order.
pub fn all_ports(table: &RouteTable) -> Vec<PortReport> {
    let mut services: Vec<&ServiceRoutes> = table.services().collect();
    services.sort_by(|a, b| a.key.cmp(&b.key));
    services
        .into_iter()
        .flat_map(|service| {
            service
                .ports
                .iter()
                .map(move |route| PortReport::new(table, service, route))
        })
        .collect()
}
