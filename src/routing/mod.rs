//! Routes as one gateway sees them: for every port of every multi-cluster
//! service, the backends it may use and the path to each: `direct` when the
//! backend's cluster shares the viewer's network, `tunnel` through the
//! gateways of the backend's network otherwise. The table is an immutable
//! snapshot, built off the hot path and read without locks.

pub mod inbound;
pub mod report;
pub mod target;

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use crate::merge::{Conflict, Exclusion, ExclusionReason, MergedPort, MergedService, MergedSet};
use crate::model::{
    AccessPolicy, ClusterId, ClusterSet, GatewayAddress, Infrastructure, InfrastructureAddresses,
    NetworkId, Protocol, ServiceKey, ServiceType, SessionAffinity,
};
use crate::model::{PodRef, PortKey};

pub mod balancer;
mod local;
mod routed;

use local::LocalBackends;
pub use routed::{RoutedBackend, RoutedBackends};

/// How a connection reaches a backend.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Path {
    /// The backend's cluster is on the viewer's network: dial it.
    Direct,
    /// Dial a gateway of the backend's network (its own cluster's first), which dials it.
    Tunnel { gateways: Arc<[GatewayAddress]> },
}

impl Path {
    pub fn as_str(&self) -> &'static str {
        match self {
            Path::Direct => "direct",
            Path::Tunnel { .. } => "tunnel",
        }
    }
}

/// The network a cluster lives on and the path to it from the viewer: the
/// same for every backend of that cluster, so a table holds one per
/// cluster and every routed backend shares it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Via {
    pub network: NetworkId,
    pub path: Path,
    /// Whether a tunnel server may dial this cluster's backends for a
    /// peer: the viewer's own cluster's, or those of a cluster the admin's
    /// network map puts on the viewer's network. A member's own word on its
    /// network routes the viewer's egress, never a peer into this network.
    pub peer_dialable: bool,
    /// Whether the admin's network map attests `network` (else it is what
    /// the cluster says of itself): a fence admits by network only then.
    pub network_attested: bool,
}

/// The routes of one service port.
#[derive(Debug, Clone)]
pub struct PortRoute {
    pub name: String,
    pub protocol: Protocol,
    pub port: u16,
    pub backends: RoutedBackends,
    pub excluded: Vec<Exclusion>,
}

/// The routes of one multi-cluster service.
#[derive(Debug, Clone)]
pub struct ServiceRoutes {
    pub key: ServiceKey,
    pub service_type: ServiceType,
    pub session_affinity: SessionAffinity,
    pub session_affinity_timeout: Option<u32>,
    pub conflicts: Vec<Conflict>,
    pub ports: Vec<PortRoute>,
    /// The viewer's ClusterSetIPs of this service (its local ServiceImport's
    /// `spec.ips`, sorted, no duplicates): what DNS answers for
    /// `<svc>.<ns>.svc.clusterset.local`. Kept here so that a query looks
    /// the service up once.
    pub vips: Vec<IpAddr>,
    /// Who may call through a gateway; `None` admits every cluster of the set.
    pub access: Option<Arc<AccessPolicy>>,
    /// The merged service these routes were made from: a table built from
    /// the same one (and the same paths) reuses them.
    merged: Arc<MergedService>,
}

impl ServiceRoutes {
    /// Whether its backends are told who called: a PROXY protocol v2
    /// header before the first byte (`strait.dev/proxy-protocol`).
    pub fn proxy_protocol(&self) -> bool {
        self.merged.proxy_protocol
    }

    /// Where the exporter says connections may go (the oldest export's
    /// routing annotations).
    pub fn routing_policy(&self) -> &crate::model::RoutingPolicy {
        &self.merged.routing
    }

    /// The oldest export's Service's `trafficDistribution`.
    pub fn traffic_distribution(&self) -> Option<&str> {
        self.merged.traffic_distribution.as_deref()
    }

    /// Whether `backend` is owed a PROXY protocol header through this
    /// service: the service asks for it, or the backend's own cluster's
    /// export does.
    pub fn proxy_protocol_for(&self, backend: &crate::merge::Backend<'_>) -> bool {
        self.merged.proxy_protocol || self.merged.proxy_protocol_of(backend.cluster)
    }

    /// Why the service's policy refuses a caller of `cluster` on `network`;
    /// `None` when it admits it.
    pub fn not_admitted(&self, cluster: &ClusterId, network: Option<&NetworkId>) -> Option<String> {
        let policy = self.access.as_ref()?;
        (!policy.admits(cluster, network)).then(|| match network {
            Some(network) => format!(
                "{} admits {policy}; cluster {cluster} on network {network} is not one of them",
                self.key
            ),
            None if policy.networks.is_empty() => format!(
                "{} admits {policy}; cluster {cluster} is not one of them",
                self.key
            ),
            None => format!(
                "{} admits {policy}; cluster {cluster} is not one of them (its network is not attested: no network map)",
                self.key
            ),
        })
    }

    /// The ready pods of a headless service on other networks than the
    /// viewer's (reached through a tunnel), once each, in (cluster, label)
    /// order: the pods that need an address on the viewer's side. Empty for
    /// a ClusterSetIP service.
    pub fn remote_pods(&self) -> std::collections::BTreeSet<PodRef> {
        if self.service_type != ServiceType::Headless {
            return Default::default();
        }
        self.ports
            .iter()
            .flat_map(|port| &port.backends)
            .filter(|routed| {
                routed.backend.state == crate::merge::BackendState::Ready
                    && matches!(routed.path(), Path::Tunnel { .. })
            })
            .map(|routed| routed.backend.pod_ref())
            .collect()
    }

    pub fn port(&self, protocol: Protocol, port: u16) -> Option<&PortRoute> {
        self.ports
            .iter()
            .find(|p| p.protocol == protocol && p.port == port)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum RouteError {
    #[error("unknown cluster {cluster:?}; the cluster set holds {known}")]
    UnknownCluster { cluster: String, known: String },
}

/// Every route of the cluster set, seen from one cluster's gateway.
#[derive(Debug, Clone)]
pub struct RouteTable {
    viewer: ClusterId,
    network: NetworkId,
    /// namespace → name → routes: two levels so a lookup borrows `&str`s
    /// and allocates nothing. Shared, so the next table reuses what did not
    /// change.
    services: HashMap<String, HashMap<String, Arc<ServiceRoutes>>>,
    /// ClusterSetIP VIP, protocol and port → the service key, from the viewer's ServiceImports.
    vips: HashMap<(IpAddr, Protocol, u16), ServiceKey>,
    /// Gateway import port → the service port it stands for (TCP and UDP:
    /// a TCP listener or a UDP socket; SCTP is not relayed).
    import_ports: HashMap<u16, PortKey>,
    /// service → remote headless pod → its addresses on this side (the
    /// per-pod derived Service's ClusterIPs, or a file setup's
    /// `imports.podAddresses`): what DNS answers for that pod.
    pod_addresses: HashMap<ServiceKey, HashMap<PodRef, Vec<IpAddr>>>,
    /// A remote pod's address → its service and pod: a connection
    /// redirected to a ClusterSetIP listener with that destination goes to
    /// that one pod.
    pod_vips: HashMap<IpAddr, (ServiceKey, PodRef)>,
    /// Every backend address on the viewer's network: the only addresses a
    /// tunnel server may dial for a peer.
    local_backends: LocalBackends,
    /// The machinery of each cluster on the viewer's network (its Services'
    /// cluster IPs, its gateway pods): never dialled for a peer, whatever
    /// endpoint names it.
    infrastructure: Vec<(ClusterId, InfrastructureAddresses)>,
    /// The clusters of each network: who may answer for a network's gateways.
    network_clusters: HashMap<NetworkId, Arc<[ClusterId]>>,
    /// Each cluster's network, and whether the network map attests it: a
    /// caller is known when its cluster is here.
    cluster_networks: HashMap<ClusterId, (NetworkId, bool)>,
    /// Each backend cluster's network and the path to it: what every
    /// service's routes were made with.
    paths: ClusterPaths,
}

/// Each cluster's network and the path from the viewer to it (`None` when
/// no gateway of its network is known).
/// Each cluster's network, and its shared way there: `None` when its
/// network has no gateway the viewer can reach.
type ClusterPaths = HashMap<ClusterId, (NetworkId, Option<Arc<Via>>)>;

impl RouteTable {
    /// Builds the routes seen from `viewer`'s gateway.
    pub fn build(set: &ClusterSet, merged: &MergedSet, viewer: &str) -> Result<Self, RouteError> {
        Self::build_reusing(set, merged, viewer, None)
    }

    /// Builds the routes like [`RouteTable::build`], reusing `previous`'s
    /// routes of every service merged from the same [`MergedService`] when
    /// the viewer and every cluster's path are the same: a change to one
    /// service routes only that service again.
    pub fn build_reusing(
        set: &ClusterSet,
        merged: &MergedSet,
        viewer: &str,
        previous: Option<&RouteTable>,
    ) -> Result<Self, RouteError> {
        let Some(viewing) = set.cluster(viewer) else {
            let known: Vec<&str> = set.clusters.keys().map(ClusterId::as_str).collect();
            return Err(RouteError::UnknownCluster {
                cluster: viewer.to_owned(),
                known: if known.is_empty() {
                    "no clusters".to_owned()
                } else {
                    known.join(", ")
                },
            });
        };
        // Each backend cluster's network and tunnel gateways, computed once per cluster.
        let paths: ClusterPaths = set
            .clusters
            .values()
            .map(|cluster| {
                let path = if cluster.network == viewing.network {
                    Some(Path::Direct)
                } else {
                    let gateways = set.network_gateways(&cluster.network, &cluster.id);
                    (!gateways.is_empty()).then(|| Path::Tunnel {
                        gateways: gateways.into(),
                    })
                };
                let peer_dialable = cluster.id == viewing.id
                    || (cluster.network_attested && cluster.network == viewing.network);
                let via = path.map(|path| {
                    Arc::new(Via {
                        network: cluster.network.clone(),
                        path,
                        peer_dialable,
                        network_attested: cluster.network_attested,
                    })
                });
                (cluster.id.clone(), (cluster.network.clone(), via))
            })
            .collect();
        let previous = previous.filter(|table| table.viewer == viewing.id && table.paths == paths);

        let mut services: HashMap<String, HashMap<String, Arc<ServiceRoutes>>> = HashMap::new();
        // The direct backends of the services routed again, before and now.
        let (mut removed, mut added) = (Vec::new(), Vec::new());
        for service in merged.services.values() {
            let reused = previous
                .and_then(|table| table.services.get(&service.key.namespace))
                .and_then(|names| names.get(&service.key.name))
                .filter(|routes| Arc::ptr_eq(&routes.merged, service));
            let routes = match reused {
                Some(routes) => routes.clone(),
                None => {
                    let routes = Arc::new(route_service(service, &paths));
                    if let Some(table) = previous {
                        let key = &service.key;
                        if let Some(earlier) = table.service(&key.namespace, &key.name) {
                            removed.extend(local::entries(earlier));
                        }
                        added.extend(local::entries(&routes));
                    }
                    routes
                }
            };
            services
                .entry(service.key.namespace.clone())
                .or_default()
                .insert(service.key.name.clone(), routes);
        }

        let mut vips = HashMap::new();
        for (key, addresses) in &viewing.imports {
            let Some(service) = merged.services.get(key) else {
                continue;
            };
            let mut sorted = addresses.clone();
            sorted.sort_unstable();
            sorted.dedup();
            if let Some(routes) = services
                .get_mut(&key.namespace)
                .and_then(|names| names.get_mut(&key.name))
                && routes.vips != sorted
            {
                // Copies only routes reused from the previous table.
                Arc::make_mut(routes).vips = sorted;
            }
            for address in addresses {
                for port in &service.ports {
                    vips.insert((*address, port.protocol, port.port), key.clone());
                }
            }
        }

        // A first table indexes every direct backend; a later one patches
        // its predecessor's index with the services routed again.
        let local_backends = match previous {
            None => LocalBackends::build(
                services
                    .values()
                    .flat_map(HashMap::values)
                    .map(AsRef::as_ref),
            ),
            Some(table) => {
                for routes in table.services() {
                    if !merged.services.contains_key(&routes.key) {
                        removed.extend(local::entries(routes));
                    }
                }
                table.local_backends.patched(removed, added)
            }
        };
        let mut by_network: HashMap<NetworkId, Vec<ClusterId>> = HashMap::new();
        for cluster in set.clusters.values() {
            by_network
                .entry(cluster.network.clone())
                .or_default()
                .push(cluster.id.clone());
        }
        let network_clusters = by_network
            .into_iter()
            .map(|(network, clusters)| (network, clusters.into()))
            .collect();
        let cluster_networks = set
            .clusters
            .values()
            .map(|cluster| {
                let network = (cluster.network.clone(), cluster.network_attested);
                (cluster.id.clone(), network)
            })
            .collect();

        let infrastructure = set
            .clusters
            .values()
            .filter(|cluster| cluster.network == viewing.network)
            .map(|cluster| (cluster.id.clone(), Arc::clone(&cluster.infrastructure)))
            .collect();

        Ok(Self {
            viewer: viewing.id.clone(),
            network: viewing.network.clone(),
            services,
            vips,
            import_ports: HashMap::new(),
            pod_addresses: HashMap::new(),
            pod_vips: HashMap::new(),
            local_backends,
            infrastructure,
            network_clusters,
            cluster_networks,
            paths,
        })
    }

    /// Which cluster of the viewer's network `address` is machinery of,
    /// and what it is there.
    pub fn infrastructure_at(&self, address: &IpAddr) -> Option<(&ClusterId, Infrastructure)> {
        let address = address.to_canonical();
        self.infrastructure.iter().find_map(|(cluster, held)| {
            let index = held.binary_search_by(|(at, _)| at.cmp(&address)).ok()?;
            held.get(index).map(|(_, what)| (cluster, *what))
        })
    }

    pub fn viewer(&self) -> &ClusterId {
        &self.viewer
    }

    pub fn network(&self) -> &NetworkId {
        &self.network
    }

    pub fn service(&self, namespace: &str, name: &str) -> Option<&ServiceRoutes> {
        self.services.get(namespace)?.get(name).map(AsRef::as_ref)
    }

    /// The routes of one service port; `None` when the service or the port is unknown.
    pub fn lookup(
        &self,
        namespace: &str,
        name: &str,
        protocol: Protocol,
        port: u16,
    ) -> Option<&PortRoute> {
        self.service(namespace, name)?.port(protocol, port)
    }

    /// The service and port a client meant by dialling a ClusterSetIP VIP.
    pub fn lookup_vip(
        &self,
        address: IpAddr,
        protocol: Protocol,
        port: u16,
    ) -> Option<(&ServiceRoutes, &PortRoute)> {
        let key = self.vips.get(&(address, protocol, port))?;
        let service = self.service(&key.namespace, &key.name)?;
        Some((service, service.port(protocol, port)?))
    }

    /// The viewer's ClusterSetIPs of a service (its local ServiceImport's
    /// `spec.ips`); empty when the service has none here.
    pub fn vips_of(&self, namespace: &str, name: &str) -> &[IpAddr] {
        self.service(namespace, name)
            .map(|service| service.vips.as_slice())
            .unwrap_or_default()
    }

    /// Whether any multi-cluster service lives in `namespace`.
    pub fn has_namespace(&self, namespace: &str) -> bool {
        self.services.contains_key(namespace)
    }

    /// A remote pod's addresses on this side; empty when it has none.
    pub fn pod_addresses(&self, service: &ServiceKey, pod: &PodRef) -> &[IpAddr] {
        self.pod_addresses
            .get(service)
            .and_then(|pods| pods.get(pod))
            .map(Vec::as_slice)
            .unwrap_or_default()
    }

    /// Sets the remote headless pods' addresses on this side; pods of
    /// services this table does not route as headless are left out.
    pub fn set_pod_addresses<'a>(
        &mut self,
        addresses: impl IntoIterator<Item = (&'a (ServiceKey, PodRef), &'a Vec<IpAddr>)>,
    ) {
        self.pod_addresses.clear();
        self.pod_vips.clear();
        for ((service, pod), ips) in addresses {
            let headless = self
                .service(&service.namespace, &service.name)
                .is_some_and(|routes| routes.service_type == ServiceType::Headless);
            if !headless || ips.is_empty() {
                continue;
            }
            for ip in ips {
                self.pod_vips.insert(*ip, (service.clone(), pod.clone()));
            }
            self.pod_addresses
                .entry(service.clone())
                .or_default()
                .insert(pod.clone(), ips.clone());
        }
    }

    /// The service, port and pod a client meant by dialling a remote pod's
    /// address on this side at `port`: the pod's own port, as a headless
    /// service's clients dial it.
    pub fn lookup_pod_vip(
        &self,
        address: IpAddr,
        protocol: Protocol,
        port: u16,
    ) -> Option<(&ServiceRoutes, &PortRoute, &PodRef)> {
        let (key, pod) = self.pod_vips.get(&address)?;
        let service = self.service(&key.namespace, &key.name)?;
        let route = service.ports.iter().find(|route| {
            route.protocol == protocol
                && route
                    .pod(&pod.label, &pod.cluster)
                    .is_some_and(|routed| routed.backend.port == port)
        })?;
        Some((service, route, pod))
    }

    /// Sets the import ports this gateway listens on: each stands for one
    /// TCP or UDP service port of a service this table routes (or one
    /// remote pod's). SCTP is not relayed.
    pub fn set_import_ports<'a>(&mut self, ports: impl IntoIterator<Item = (u16, &'a PortKey)>) {
        self.import_ports = ports
            .into_iter()
            .filter(|(_, key)| {
                matches!(key.protocol, Protocol::Tcp | Protocol::Udp)
                    && self
                        .lookup(
                            &key.service.namespace,
                            &key.service.name,
                            key.protocol,
                            key.port,
                        )
                        .is_some()
            })
            .map(|(port, key)| (port, key.clone()))
            .collect();
    }

    /// The service port a connection on import port `port` is for, and
    /// the one pod it must reach when the port is a remote pod's.
    pub fn lookup_import_port(
        &self,
        port: u16,
    ) -> Option<(&ServiceRoutes, &PortRoute, Option<&PodRef>)> {
        let key = self.import_ports.get(&port)?;
        let service = self.service(&key.service.namespace, &key.service.name)?;
        Some((
            service,
            service.port(key.protocol, key.port)?,
            key.pod.as_ref(),
        ))
    }

    /// Every import port, with the service port it stands for.
    pub fn import_ports(&self) -> impl Iterator<Item = (u16, &PortKey)> {
        self.import_ports.iter().map(|(port, key)| (*port, key))
    }

    /// Every service's routes as the table shares them: a table built
    /// reusing another holds the very routes of each unchanged service.
    pub fn shared_services(&self) -> impl Iterator<Item = &Arc<ServiceRoutes>> {
        self.services.values().flat_map(HashMap::values)
    }

    pub fn services(&self) -> impl Iterator<Item = &ServiceRoutes> {
        self.services
            .values()
            .flat_map(HashMap::values)
            .map(AsRef::as_ref)
    }

    /// Whether any local service that lists `address` asks for the PROXY
    /// protocol for it, whoever calls: a pod port speaks it or not
    /// whichever Service reaches it, and one that expects a header takes a
    /// client's first bytes for one if none is written.
    pub fn local_backend_proxy_protocol(&self, address: &SocketAddr) -> bool {
        self.local_backends.proxy_protocol(address)
    }

    /// Whether `address` is a backend (with its target port) on the viewer's
    /// network: `None` when it is not, else whether a service it serves
    /// admits a caller of `cluster` on `network`.
    pub fn local_backend_admits(
        &self,
        address: &SocketAddr,
        protocol: Protocol,
        cluster: &ClusterId,
        network: Option<&NetworkId>,
    ) -> Option<bool> {
        self.local_backends
            .admits(address, protocol, cluster, network)
    }

    /// The network of a cluster of the set; `None` for a cluster the set
    /// does not hold.
    pub fn cluster_network(&self, cluster: &ClusterId) -> Option<&NetworkId> {
        self.cluster_networks
            .get(cluster)
            .map(|(network, _)| network)
    }

    /// The network of a cluster of the set as the network map attests it:
    /// `None` when it is only the cluster's own word.
    pub fn attested_network(&self, cluster: &ClusterId) -> Option<&NetworkId> {
        self.cluster_networks
            .get(cluster)
            .and_then(|(network, attested)| attested.then_some(network))
    }

    /// The clusters on `network`; empty when the network is unknown.
    pub fn network_clusters(&self, network: &NetworkId) -> &[ClusterId] {
        self.network_clusters
            .get(network)
            .map(|clusters| &clusters[..])
            .unwrap_or_default()
    }

    /// How many ready pods of headless services on other networks have an
    /// address on this side, and how many have none.
    pub fn remote_pod_counts(&self) -> (usize, usize) {
        let mut counts = (0, 0);
        for service in self.services() {
            for pod in &service.remote_pods() {
                if self.pod_addresses(&service.key, pod).is_empty() {
                    counts.1 += 1;
                } else {
                    counts.0 += 1;
                }
            }
        }
        counts
    }

    /// How many backends the table holds across all service ports.
    pub fn backend_count(&self) -> usize {
        self.services()
            .flat_map(|service| &service.ports)
            .map(|port| port.backends.len())
            .sum()
    }
}

impl PortRoute {
    /// The backend of one pod of a headless service, by its per-pod label
    /// (its hostname, else its address with dashes) and cluster.
    pub fn pod(&self, label: &str, cluster: &ClusterId) -> Option<RoutedBackend<'_>> {
        self.backends
            .iter()
            .find(|routed| routed.backend.cluster == cluster && routed.backend.pod_label() == label)
    }
}

fn route_service(service: &Arc<MergedService>, paths: &ClusterPaths) -> ServiceRoutes {
    ServiceRoutes {
        key: service.key.clone(),
        service_type: service.service_type,
        session_affinity: service.session_affinity,
        session_affinity_timeout: service.session_affinity_timeout,
        conflicts: service.conflicts.clone(),
        vips: Vec::new(),
        access: service.access.clone(),
        ports: service
            .ports
            .iter()
            .map(|port| route_port(port, paths))
            .collect(),
        merged: Arc::clone(service),
    }
}

fn route_port(port: &MergedPort, paths: &ClusterPaths) -> PortRoute {
    let (backends, unreachable) = RoutedBackends::route(&port.backends, |cluster| {
        paths.get(cluster).and_then(|(_, via)| via.as_ref())
    });
    let mut excluded = port.excluded.clone();
    // A cluster with no reachable gateway is excluded once, not per endpoint.
    excluded.extend(unreachable.into_iter().map(|cluster| Exclusion {
        cluster,
        address: None,
        reason: ExclusionReason::NoGateway,
    }));
    PortRoute {
        name: port.name.clone(),
        protocol: port.protocol,
        port: port.port,
        backends,
        excluded,
    }
}

#[cfg(test)]
mod tests;
