//! The cluster set as Strait sees it: clusters, their networks and gateways,
//! their services and endpoints. Pure data, no I/O: `discovery` builds it from
//! Kubernetes objects, `merge` and `routing` read it.

mod access;
mod addresses;
pub mod applied_digest;
mod endpoints;
mod ids;
pub mod import_record;
pub mod names;
mod pods;
mod proxy_protocol;
mod routing_policy;

use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;

use k8s_openapi::jiff::Timestamp;
use serde::Serialize;

pub use access::{
    ALLOWED_CLUSTERS_ANNOTATION, ALLOWED_NETWORKS_ANNOTATION, AccessPolicy, AccessPolicyError,
};
pub use addresses::{embedded_ipv4, unroutable_endpoint};
pub use endpoints::{Endpoints, EndpointsBuilder};
pub use ids::{
    ClusterId, DEFAULT_NETWORK, IdError, MAX_CLUSTER_ID_LEN, NetworkId, Protocol, ServiceKey,
    check_dns_subdomain, is_dns_label,
};
pub use pods::{PodRef, PortKey, pod_label};
pub use proxy_protocol::{PROXY_PROTOCOL_ANNOTATION, ProxyProtocolError, proxy_protocol};
pub use routing_policy::{
    FENCE_CLUSTERS_ANNOTATION, FENCE_NETWORKS_ANNOTATION, Fence, LOCALITY_ANNOTATION,
    LOCALITY_MINIMUM_ANNOTATION, Locality, RoutingPolicy, RoutingPolicyError, parse_minimum,
};

/// Every cluster of the set, by id.
#[derive(Debug, Clone, Default)]
pub struct ClusterSet {
    pub clusters: BTreeMap<ClusterId, Cluster>,
}

impl ClusterSet {
    pub fn cluster(&self, id: &str) -> Option<&Cluster> {
        self.clusters
            .values()
            .find(|cluster| cluster.id.as_str() == id)
    }

    /// The gateways of `network`, those of `preferred` first, then the other
    /// clusters' in cluster id order. Duplicates are kept once.
    pub fn network_gateways(
        &self,
        network: &NetworkId,
        preferred: &ClusterId,
    ) -> Vec<GatewayAddress> {
        let mut gateways: Vec<GatewayAddress> = Vec::new();
        let preferred_first = self
            .clusters
            .get(preferred)
            .into_iter()
            .chain(self.clusters.values().filter(|c| &c.id != preferred));
        for cluster in preferred_first.filter(|c| &c.network == network) {
            for gateway in &cluster.gateways {
                if !gateways.contains(gateway) {
                    gateways.push(gateway.clone());
                }
            }
        }
        gateways
    }
}

/// A map shared by structure: a copy (a cluster's translation spliced, a
/// set assembled from the translations kept) costs nothing until it is
/// changed, and a change copies only its path.
pub type Shared<K, V> = imbl::OrdMap<K, V>;

/// One cluster: its network, its gateways and the services it holds.
#[derive(Debug, Clone)]
pub struct Cluster {
    pub id: ClusterId,
    pub network: NetworkId,
    /// Whether `network` is the network map's (`networks` in
    /// `gateway.yaml`), not only the cluster's own ClusterProperty: only an
    /// attested network grants anything (`strait.dev/allowed-networks`).
    pub network_attested: bool,
    /// The cluster set id (`clusterset.k8s.io` ClusterProperty), when the cluster states it.
    pub clusterset: Option<String>,
    /// Where the cluster was read from (a folder, an API server), for messages.
    pub source: String,
    pub gateways: Vec<GatewayAddress>,
    /// Shared, so a cluster's unchanged services are one allocation for
    /// every translation, set and merge that holds them, and a merge can
    /// tell an unchanged service by its address (`Arc::ptr_eq`).
    pub services: Shared<ServiceKey, Arc<ClusterService>>,
    /// ClusterSetIP VIPs allocated in this cluster, from its ServiceImports.
    pub imports: Shared<ServiceKey, Vec<IpAddr>>,
    /// Addresses of the cluster's own machinery, sorted: never a backend a
    /// tunnel server dials for a peer, whatever endpoint lists them.
    pub infrastructure: InfrastructureAddresses,
}

/// A cluster's machinery by address, sorted by address.
pub type InfrastructureAddresses = Arc<[(IpAddr, Infrastructure)]>;

/// What an address of a cluster's own machinery is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Infrastructure {
    /// A ClusterIP of one of its Services (the API server's among them):
    /// kube-proxy forwards it to whatever that Service selects.
    ServiceIp,
    /// A pod of its gateway: dialled by a peer's request it would take the
    /// peer for a local client.
    GatewayPod,
    /// An endpoint of the `default/kubernetes` Service: the API server
    /// itself, wherever it runs.
    ApiServer,
    /// One of a Service's `externalIPs`: nodes forward it to the Service.
    ExternalIp,
    /// A load balancer address of a Service (`status.loadBalancer.ingress`).
    LoadBalancerIp,
}

impl Infrastructure {
    pub fn describe(self) -> &'static str {
        match self {
            Infrastructure::ServiceIp => "a Service ClusterIP",
            Infrastructure::GatewayPod => "a gateway pod",
            Infrastructure::ApiServer => "an API server endpoint (default/kubernetes)",
            Infrastructure::ExternalIp => "a Service external IP",
            Infrastructure::LoadBalancerIp => "a Service load balancer address",
        }
    }
}

impl Cluster {
    pub fn new(id: ClusterId, network: NetworkId, source: impl Into<String>) -> Self {
        Self {
            id,
            network,
            network_attested: false,
            clusterset: None,
            source: source.into(),
            gateways: Vec::new(),
            services: Shared::new(),
            imports: Shared::new(),
            infrastructure: Arc::new([]),
        }
    }
}

impl Cluster {
    /// Edits every service in place (copying those shared with another
    /// holder first).
    pub fn edit_services(&mut self, mut edit: impl FnMut(&mut ClusterService)) {
        let keys: Vec<ServiceKey> = self.services.keys().cloned().collect();
        for key in keys {
            if let Some(service) = self.services.get_mut(&key) {
                edit(Arc::make_mut(service));
            }
        }
    }

    /// Takes over `previous`'s allocation of every service that translated
    /// the same, so an unchanged service stays one shared allocation from
    /// one translation to the next, and what was built from it can be
    /// reused (the merge compares services by address).
    pub fn share_unchanged(&mut self, previous: &Cluster) {
        let shared: Vec<(ServiceKey, Arc<ClusterService>)> = self
            .services
            .iter()
            .filter_map(|(key, service)| {
                let earlier = previous.services.get(key)?;
                (earlier == service && !Arc::ptr_eq(earlier, service))
                    .then(|| (key.clone(), Arc::clone(earlier)))
            })
            .collect();
        for (key, earlier) in shared {
            self.services.insert(key, earlier);
        }
    }
}

/// Where a peer reaches a gateway's tunnel listener.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GatewayAddress {
    pub host: GatewayHost,
    pub port: u16,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum GatewayHost {
    Ip(IpAddr),
    /// A load balancer hostname, resolved when dialled.
    Dns(String),
}

impl fmt::Display for GatewayAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.host {
            GatewayHost::Ip(IpAddr::V6(ip)) => write!(f, "[{ip}]:{}", self.port),
            GatewayHost::Ip(IpAddr::V4(ip)) => write!(f, "{ip}:{}", self.port),
            GatewayHost::Dns(name) => write!(f, "{name}:{}", self.port),
        }
    }
}

/// A gateway address that could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{text:?}: expected host:port, the host an IP address or a DNS name: {reason}")]
pub struct GatewayAddressError {
    pub text: String,
    pub reason: &'static str,
}

impl std::str::FromStr for GatewayAddress {
    type Err = GatewayAddressError;

    /// `host:port`, an IPv6 host in brackets (`[::1]:15443`).
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let refused = |reason| GatewayAddressError {
            text: text.to_owned(),
            reason,
        };
        let (host, port) = text.rsplit_once(':').ok_or_else(|| refused("no port"))?;
        if port.is_empty() || !port.bytes().all(|b| b.is_ascii_digit()) {
            return Err(refused("the port is not a number"));
        }
        let port: u16 = port
            .parse()
            .map_err(|_| refused("the port is past 65535"))?;
        if port == 0 {
            return Err(refused("port 0"));
        }
        let host = match host.strip_prefix('[') {
            Some(bracketed) => {
                let inner = bracketed
                    .strip_suffix(']')
                    .ok_or_else(|| refused("an unclosed bracket"))?;
                let ip: std::net::Ipv6Addr = inner
                    .parse()
                    .map_err(|_| refused("not an IPv6 address in brackets"))?;
                GatewayHost::Ip(IpAddr::V6(ip))
            }
            None => match host.parse::<std::net::Ipv4Addr>() {
                Ok(ip) => GatewayHost::Ip(IpAddr::V4(ip)),
                Err(_) => {
                    check_dns_subdomain(host, 253).map_err(|_| refused("not a DNS name"))?;
                    // Digits and dots alone are a mistyped IPv4 address,
                    // not a name (no top-level domain is numeric).
                    if host.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
                        return Err(refused("not an IPv4 address"));
                    }
                    GatewayHost::Dns(host.to_owned())
                }
            },
        };
        Ok(GatewayAddress { host, port })
    }
}

impl Serialize for GatewayAddress {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// A Service as it exists in one cluster, with its export (if any) and endpoints.
#[derive(Debug, Clone, PartialEq)]
pub struct ClusterService {
    pub key: ServiceKey,
    pub spec: ServiceSpec,
    pub export: Option<Export>,
    /// One group per EndpointSlice: the slice's ports apply to its endpoints.
    pub endpoint_groups: Vec<EndpointGroup>,
}

/// How a Service exports: KEP-1645 maps every ClusterIP-like type to ClusterSetIP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum ServiceType {
    #[serde(rename = "ClusterSetIP")]
    ClusterSetIp,
    Headless,
    /// Not exportable; kept so validation can say so.
    ExternalName,
}

impl fmt::Display for ServiceType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ServiceType::ClusterSetIp => "ClusterSetIP",
            ServiceType::Headless => "Headless",
            ServiceType::ExternalName => "ExternalName",
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
pub enum SessionAffinity {
    #[default]
    None,
    #[serde(rename = "ClientIP")]
    ClientIp,
}

impl fmt::Display for SessionAffinity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SessionAffinity::None => "None",
            SessionAffinity::ClientIp => "ClientIP",
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum IpFamily {
    IPv4,
    IPv6,
}

impl IpFamily {
    pub fn of(address: &IpAddr) -> Self {
        match address {
            IpAddr::V4(_) => IpFamily::IPv4,
            IpAddr::V6(_) => IpFamily::IPv6,
        }
    }
}

/// One port of a Service.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct ServicePort {
    /// Empty for the single unnamed port a Service may have.
    pub name: String,
    pub protocol: Protocol,
    pub port: u16,
    #[serde(rename = "appProtocol", skip_serializing_if = "Option::is_none")]
    pub app_protocol: Option<String>,
}

/// The parts of a Service's spec that the MCS merge compares.
#[derive(Debug, Clone, PartialEq)]
pub struct ServiceSpec {
    pub service_type: ServiceType,
    pub ports: Vec<ServicePort>,
    pub session_affinity: SessionAffinity,
    /// `sessionAffinityConfig.clientIP.timeoutSeconds`.
    pub session_affinity_timeout: Option<u32>,
    /// Empty when the Service does not say.
    pub ip_families: Vec<IpFamily>,
    /// `Cluster` when the Service does not say, as Kubernetes defaults it.
    pub internal_traffic_policy: String,
    pub traffic_distribution: Option<String>,
}

impl ServiceSpec {
    /// A ClusterSetIP service with these ports and Kubernetes' defaults elsewhere.
    pub fn cluster_set_ip(ports: Vec<ServicePort>) -> Self {
        Self {
            service_type: ServiceType::ClusterSetIp,
            ports,
            session_affinity: SessionAffinity::None,
            session_affinity_timeout: None,
            ip_families: Vec::new(),
            internal_traffic_policy: "Cluster".to_owned(),
            traffic_distribution: None,
        }
    }

    pub fn port_by_number(&self, protocol: Protocol, port: u16) -> Option<&ServicePort> {
        self.ports
            .iter()
            .find(|p| p.protocol == protocol && p.port == port)
    }
}

/// A ServiceExport: its age decides conflicts, its exported metadata must agree.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Export {
    /// `metadata.creationTimestamp`; an export without one counts as the youngest.
    pub created: Option<Timestamp>,
    pub exported_labels: BTreeMap<String, String>,
    pub exported_annotations: BTreeMap<String, String>,
    /// Who may call, from the export's own annotations; `None` admits
    /// every cluster of the set.
    pub access: Option<AccessPolicy>,
    /// Whether backend connections start with a PROXY protocol v2 header
    /// (`strait.dev/proxy-protocol: v2`).
    pub proxy_protocol: bool,
    /// Where importers' connections may go (`strait.dev/locality`,
    /// `locality-minimum-healthy`, `fence-*`): the exporter's default.
    pub routing: RoutingPolicy,
}

/// The endpoints of one EndpointSlice and the ports they serve.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EndpointGroup {
    /// Shared by the groups of one service whose slices list the same
    /// ports (a service's slices usually do).
    pub ports: Arc<[EndpointPort]>,
    /// Shared with the decoded EndpointSlice when every endpoint of it is
    /// valid (the usual case), so a large cluster's endpoints are held once.
    pub endpoints: Endpoints,
}

impl EndpointGroup {
    /// Adds one endpoint (a copy of the list: for builders and tests).
    pub fn add_endpoint(&mut self, endpoint: Endpoint) {
        self.endpoints = self.endpoints.with(endpoint, None);
    }
}

/// A port of an EndpointSlice: the target port behind the Service port of the same name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndpointPort {
    pub name: String,
    pub protocol: Protocol,
    pub port: u16,
}

/// One endpoint address with its conditions, as EndpointSlices define them.
/// A value read out of a list: a large cluster set holds millions of them,
/// packed in [`Endpoints`] (5 bytes for an IPv4 endpoint), with what few
/// endpoints have (a hostname, a placement) held beside them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Endpoint {
    pub address: IpAddr,
    pub ready: bool,
    pub serving: bool,
    pub terminating: bool,
}

/// What only some endpoints have.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct EndpointDetails {
    /// The pod's hostname (a headless service's StatefulSet pods have one).
    pub hostname: Option<Box<str>>,
    /// Where it runs, `nodeName` and `zone`: kept only where something
    /// reads them (the local cluster's endpoints: its gateway pods' slices
    /// are copied into the derived Services' slices).
    pub node_name: Option<String>,
    pub zone: Option<String>,
}

impl EndpointDetails {
    /// `None` when there is nothing to hold.
    pub fn shared(self) -> Option<Arc<Self>> {
        (self != Self::default()).then(|| Arc::new(self))
    }

    /// Details holding only a hostname.
    pub fn hostname(hostname: &str) -> Option<Arc<Self>> {
        Self {
            hostname: Some(hostname.into()),
            ..Self::default()
        }
        .shared()
    }
}

impl Endpoint {
    pub fn ready(address: IpAddr) -> Self {
        Self {
            address,
            ready: true,
            serving: true,
            terminating: false,
        }
    }
}

#[cfg(test)]
mod gateway_address_tests {
    use super::*;

    #[test]
    fn gateway_addresses_read_back_as_they_print() {
        for text in ["10.0.3.1:15443", "[fd00::3]:15443", "gw.c3.example:15008"] {
            let address: GatewayAddress = text.parse().unwrap();
            assert_eq!(address.to_string(), text);
        }
        assert_eq!(
            "gw.example:1".parse::<GatewayAddress>().unwrap().host,
            GatewayHost::Dns("gw.example".to_owned())
        );
        for bad in [
            "10.0.3.1",
            "10.0.3.1:0",
            "10.0.3.1:99999",
            "fd00::3:15443",
            "[fd00::3:15443",
            ":15443",
            "under_score:1",
            "10.0.3.1:+1",
            "999.1.1.1:15008",
        ] {
            assert!(bad.parse::<GatewayAddress>().is_err(), "{bad} accepted");
        }
    }
}
