//! Authorising what a peer gateway asks this gateway to dial. The tunnel
//! server is never an open relay: it serves only callers whose certificate
//! names a cluster of the current cluster set, dials only backends of
//! exported services on its own network, on target ports their constituents
//! declare, for callers the service's access policy admits, and it decides
//! before any socket is opened. Pure: the route table decides.

use std::net::{IpAddr, SocketAddr};

use crate::model::{ClusterId, NetworkId, Protocol};

use super::target::{Target, parse_authority};
use super::{Path, PortRoute, RouteTable, ServiceRoutes};

/// What the tunnel server may do for one request.
#[derive(Debug)]
pub enum InboundPlan<'a> {
    /// Dial exactly this backend.
    Dial(SocketAddr),
    /// Pick a backend of this service port on the local network.
    Pick {
        service: &'a ServiceRoutes,
        route: &'a PortRoute,
    },
}

impl InboundPlan<'_> {
    /// Whether the backend is to be told who called (a PROXY protocol v2
    /// header): its service asks for it, or for a backend named by
    /// address, a service it serves for `caller` does.
    pub fn proxy_protocol(&self, table: &RouteTable, caller: &ClusterId) -> bool {
        match self {
            InboundPlan::Pick { service, .. } => service.proxy_protocol(),
            InboundPlan::Dial(address) => {
                table.local_backend_proxy_protocol(address, caller, table.attested_network(caller))
            }
        }
    }
}

/// Why a request was refused; each maps to one HTTP status.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InboundRefusal {
    /// 400: the request is not a well-formed tunnel request.
    #[error("malformed: {0}")]
    Malformed(String),
    /// 403: the caller's cluster is not in the cluster set.
    #[error("unknown caller: {0}")]
    UnknownCaller(String),
    /// 403: the caller presents this gateway's own cluster, which is not served.
    #[error("own cluster: {0}")]
    OwnCluster(String),
    /// 403: the service's access policy does not admit the caller.
    #[error("not admitted: {0}")]
    NotAdmitted(String),
    /// 403: well-formed, but not something this gateway dials.
    #[error("forbidden: {0}")]
    Forbidden(String),
    /// 404: no exported service (or pod) of that name.
    #[error("unknown service: {0}")]
    UnknownService(String),
    /// 503: the service port exists but has no ready backend on this network.
    #[error("no ready backend: {0}")]
    NoBackend(String),
    /// 503: the caller, or the gateway as a whole, is at a limit.
    #[error("over limit: {0}")]
    OverLimit(String),
}

impl InboundRefusal {
    pub fn status(&self) -> u16 {
        match self {
            InboundRefusal::Malformed(_) => 400,
            InboundRefusal::UnknownCaller(_)
            | InboundRefusal::OwnCluster(_)
            | InboundRefusal::NotAdmitted(_)
            | InboundRefusal::Forbidden(_) => 403,
            InboundRefusal::UnknownService(_) => 404,
            InboundRefusal::NoBackend(_) | InboundRefusal::OverLimit(_) => 503,
        }
    }
}

/// What the tunnel server guards besides the route table.
#[derive(Debug, Clone, Default)]
pub struct InboundGuard {
    /// The gateway's own sockets, refused even if a backend claims one.
    pub own_listeners: Vec<SocketAddr>,
    /// The host's interface addresses: a listener bound to a wildcard
    /// address answers on each of them too.
    pub interface_addresses: Vec<IpAddr>,
    /// Networks never dialled for a peer (`tunnel.deniedNetworks`: the
    /// service CIDRs, the nodes' addresses), beside what the route table
    /// knows of its network's machinery.
    pub denied_networks: Vec<ipnet::IpNet>,
    /// Whether a caller presenting this gateway's own cluster is served.
    /// Off by default: a gateway never tunnels to its own network, so such
    /// a caller holds a copy of this cluster's key, or is a test harness.
    pub admit_own_cluster: bool,
}

/// Why the tunnel server never dials `address` for a peer, whichever
/// service lists it; `None` when it may. The route table's backends are
/// what tenants and member clusters say: a Service's ClusterIP, a gateway
/// pod, a node or a cloud's metadata address listed as an endpoint would
/// let a peer reach what is not a pod of an exported service.
pub fn never_dialled(table: &RouteTable, guard: &InboundGuard, address: &IpAddr) -> Option<String> {
    let address = address.to_canonical();
    if let Some(class) = crate::model::unroutable_endpoint(&address, true) {
        return Some(format!("{address} is a {class} address"));
    }
    if let Some((cluster, what)) = table.infrastructure_at(&address) {
        return Some(format!(
            "{address} is {} of cluster {cluster}",
            what.describe()
        ));
    }
    guard
        .denied_networks
        .iter()
        .find(|network| network.contains(&address))
        .map(|network| format!("{address} is in {network}, which tunnel.deniedNetworks refuses"))
}

/// The caller's attested network (`None`: only its own word, which grants
/// nothing) when the cluster set admits it at all.
fn known_caller<'a>(
    table: &'a RouteTable,
    caller: &ClusterId,
    guard: &InboundGuard,
) -> Result<Option<&'a NetworkId>, InboundRefusal> {
    if table.cluster_network(caller).is_none() {
        return Err(InboundRefusal::UnknownCaller(format!(
            "cluster {caller} is not in the cluster set"
        )));
    }
    let network = table.attested_network(caller);
    if caller == table.viewer() && !guard.admit_own_cluster {
        return Err(InboundRefusal::OwnCluster(format!(
            "{caller} is this gateway's own cluster; tunnel.admitOwnCluster is off"
        )));
    }
    Ok(network)
}

fn admitted(
    routes: &ServiceRoutes,
    caller: &ClusterId,
    network: Option<&NetworkId>,
) -> Result<(), InboundRefusal> {
    match routes.not_admitted(caller, network) {
        Some(why) => Err(InboundRefusal::NotAdmitted(why)),
        None => Ok(()),
    }
}

/// Decides a tunnel request from `caller` (the cluster its certificate
/// names) for a TCP stream to `authority`.
pub fn authorize<'a>(
    table: &'a RouteTable,
    caller: &ClusterId,
    authority: Option<&str>,
    guard: &InboundGuard,
) -> Result<InboundPlan<'a>, InboundRefusal> {
    authorize_for(table, caller, authority, Protocol::Tcp, guard)
}

/// Decides a tunnel request from `caller` for `authority` on a `protocol`
/// port (a UDP flow asks for UDP ports and backends only).
pub fn authorize_for<'a>(
    table: &'a RouteTable,
    caller: &ClusterId,
    authority: Option<&str>,
    protocol: Protocol,
    guard: &InboundGuard,
) -> Result<InboundPlan<'a>, InboundRefusal> {
    let network = known_caller(table, caller, guard)?;
    let own_listeners = guard.own_listeners.as_slice();
    let authority =
        authority.ok_or_else(|| InboundRefusal::Malformed("no :authority".to_owned()))?;
    let target =
        parse_authority(authority).map_err(|e| InboundRefusal::Malformed(e.to_string()))?;
    let lookup = |service: &crate::model::ServiceKey, port: u16| {
        let routes = table
            .service(&service.namespace, &service.name)
            .ok_or_else(|| {
                InboundRefusal::UnknownService(format!("{service} is not an exported service"))
            })?;
        let route = routes
            .ports
            .iter()
            .find(|p| p.protocol == protocol && p.port == port)
            .ok_or_else(|| {
                InboundRefusal::Forbidden(format!(
                    "{service} does not expose port {port}/{protocol}"
                ))
            })?;
        Ok((routes, route))
    };
    match target {
        Target::Address(address) => {
            // `[::ffff:127.0.0.1]:15021` is `127.0.0.1:15021`: every check
            // below, and the dial, sees the one spelling.
            let address = SocketAddr::new(address.ip().to_canonical(), address.port());
            // The import listeners bind where the others do, on ports the
            // table names.
            let import_listener = table.lookup_import_port(address.port()).is_some()
                && own_listeners.iter().any(|own| {
                    own_or_wildcard(
                        &SocketAddr::new(own.ip(), address.port()),
                        &address,
                        &guard.interface_addresses,
                    )
                });
            if import_listener
                || own_listeners
                    .iter()
                    .any(|own| own_or_wildcard(own, &address, &guard.interface_addresses))
            {
                return Err(InboundRefusal::Forbidden(format!(
                    "{address} is this gateway's own listener"
                )));
            }
            if let Some(why) = never_dialled(table, guard, &address.ip()) {
                return Err(InboundRefusal::Forbidden(why));
            }
            match table.local_backend_admits(&address, protocol, caller, network) {
                Some(true) => Ok(InboundPlan::Dial(address)),
                Some(false) => Err(InboundRefusal::NotAdmitted(format!(
                    "{address} serves no service that admits cluster {caller}{}",
                    network.map_or(" (network not attested)".to_owned(), |n| format!(
                        " on network {n}"
                    ))
                ))),
                None => Err(InboundRefusal::Forbidden(format!(
                    "{address} is not a ready backend of an exported {protocol} service port on network {}",
                    table.network()
                ))),
            }
        }
        Target::Service { service, port } => {
            let (service, route) = lookup(&service, port)?;
            admitted(service, caller, network)?;
            if route.backends.iter().any(|b| *b.path() == Path::Direct) {
                Ok(InboundPlan::Pick { service, route })
            } else {
                Err(InboundRefusal::NoBackend(format!(
                    "{}:{port} has no ready backend on network {}",
                    service.key,
                    table.network()
                )))
            }
        }
        Target::Pod {
            hostname,
            cluster,
            service,
            port,
        } => {
            let (routes, route) = lookup(&service, port)?;
            admitted(routes, caller, network)?;
            let pod = route.pod(&hostname, &cluster).ok_or_else(|| {
                InboundRefusal::UnknownService(format!(
                    "{} has no ready pod {hostname} in cluster {cluster}",
                    routes.key
                ))
            })?;
            if *pod.path() != Path::Direct {
                return Err(InboundRefusal::Forbidden(format!(
                    "pod {hostname} of cluster {cluster} is not on network {}",
                    table.network()
                )));
            }
            if let Some(why) = never_dialled(table, guard, &pod.backend.address) {
                return Err(InboundRefusal::Forbidden(why));
            }
            Ok(InboundPlan::Dial(SocketAddr::new(
                pod.backend.address,
                pod.backend.port,
            )))
        }
    }
}

/// Whether `target` reaches the listener `own`. A listener bound to a
/// wildcard address also answers on loopback and on every address of the
/// host's interfaces; a backend elsewhere that happens to use the same port
/// number is not the gateway.
fn own_or_wildcard(own: &SocketAddr, target: &SocketAddr, interfaces: &[IpAddr]) -> bool {
    own.port() == target.port()
        && (own.ip() == target.ip()
            || (own.ip().is_unspecified()
                && (target.ip().is_loopback()
                    || target.ip().is_unspecified()
                    || interfaces.contains(&target.ip()))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::merge::merge;
    use crate::model::{ClusterId, ClusterSet, Infrastructure, ServiceKey};
    use crate::testing::{ServiceBuilder, cluster_set};

    /// c1 (viewer) and c2 on net-a, c3 on net-b; shop/cart declares tcp:42 → 8042.
    fn set() -> ClusterSet {
        let mut set = cluster_set(&[
            (
                "c1",
                "net-a",
                ServiceBuilder::new()
                    .port("tcp", 42, 8042)
                    .exported_at(1)
                    .endpoint("10.0.0.1")
                    .endpoint_with("10.0.0.9", false, false, false),
            ),
            (
                "c2",
                "net-a",
                ServiceBuilder::new()
                    .port("tcp", 42, 8042)
                    .exported_at(2)
                    .endpoint("10.0.0.2"),
            ),
            (
                "c3",
                "net-b",
                ServiceBuilder::new()
                    .port("tcp", 42, 8042)
                    .exported_at(3)
                    .endpoint("10.9.0.3"),
            ),
        ]);
        // An unexported Service with a listening pod in the viewer's cluster.
        let mut hidden = ServiceBuilder::new()
            .port("tcp", 42, 9000)
            .endpoint("10.0.0.5");
        hidden.key = ServiceKey::new("shop", "hidden");
        if let Some(cluster) = set.clusters.values_mut().next() {
            cluster.services.insert(hidden.key.clone(), hidden.into());
        }
        set
    }

    fn table() -> RouteTable {
        let set = set();
        RouteTable::build(&set, &merge(&set), "c1").expect("viewer")
    }

    const OWN: [SocketAddr; 2] = [
        SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED), 15008),
        SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 15021),
    ];

    fn guard(own: &[SocketAddr]) -> InboundGuard {
        InboundGuard {
            own_listeners: own.to_vec(),
            interface_addresses: Vec::new(),
            denied_networks: Vec::new(),
            admit_own_cluster: false,
        }
    }

    fn cluster(id: &str) -> ClusterId {
        ClusterId::new(id).expect("valid test id")
    }

    /// The request as c3's gateway (net-b) makes it.
    fn decide(authority: &str) -> Result<String, InboundRefusal> {
        decide_for(&table(), "c3", authority)
    }

    fn decide_for(
        table: &RouteTable,
        caller: &str,
        authority: &str,
    ) -> Result<String, InboundRefusal> {
        authorize(table, &cluster(caller), Some(authority), &guard(&OWN)).map(|plan| match plan {
            InboundPlan::Dial(address) => format!("dial {address}"),
            InboundPlan::Pick { service, route } => format!("pick {}:{}", service.key, route.port),
        })
    }

    #[test]
    fn local_backends_and_services_are_allowed() {
        assert_eq!(decide("10.0.0.1:8042"), Ok("dial 10.0.0.1:8042".to_owned()));
        // A mapped spelling of a backend is that backend, dialled as IPv4.
        assert_eq!(
            decide("[::ffff:10.0.0.1]:8042"),
            Ok("dial 10.0.0.1:8042".to_owned())
        );
        assert_eq!(decide("10.0.0.2:8042"), Ok("dial 10.0.0.2:8042".to_owned()));
        assert_eq!(
            decide("cart.shop.svc.clusterset.local:42"),
            Ok("pick shop/cart:42".to_owned())
        );
    }

    #[test]
    fn a_backend_is_told_who_called_only_when_its_service_asks() {
        let told = |builder: ServiceBuilder| builder.proxy_protocol();
        let mut set = cluster_set(&[
            (
                "c1",
                "net-a",
                told(ServiceBuilder::new().port("tcp", 42, 8042).exported_at(1))
                    .endpoint("10.0.0.1"),
            ),
            (
                "c3",
                "net-b",
                told(ServiceBuilder::new().port("tcp", 42, 8042).exported_at(3)),
            ),
        ]);
        let mut plain = ServiceBuilder::new()
            .port("tcp", 42, 8042)
            .exported_at(2)
            .endpoint("10.0.0.7");
        plain.key = ServiceKey::new("shop", "plain");
        if let Some(cluster) = set.clusters.get_mut(&cluster("c1")) {
            cluster.services.insert(plain.key.clone(), plain.into());
        }
        let table = RouteTable::build(&set, &merge(&set), "c1").expect("viewer");
        let c3 = cluster("c3");
        let plan = |authority: &str| {
            authorize(&table, &c3, Some(authority), &guard(&OWN)).expect("allowed")
        };
        assert!(plan("cart.shop.svc.clusterset.local:42").proxy_protocol(&table, &c3));
        assert!(plan("10.0.0.1:8042").proxy_protocol(&table, &c3));
        assert!(!plan("plain.shop.svc.clusterset.local:42").proxy_protocol(&table, &c3));
        assert!(!plan("10.0.0.7:8042").proxy_protocol(&table, &c3));
    }

    #[test]
    fn a_backend_elsewhere_on_the_tunnel_port_number_is_not_the_gateway() {
        let own = guard(&[SocketAddr::from(([0, 0, 0, 0], 8042))]);
        let table = table();
        let c3 = cluster("c3");
        let plan = authorize(&table, &c3, Some("10.0.0.1:8042"), &own).expect("a real backend");
        // Unless that address is one of this host's.
        assert!(matches!(plan, InboundPlan::Dial(_)));
        let refusal = authorize(&table, &c3, Some("127.0.0.1:8042"), &own).expect_err("own port");
        assert_eq!(refusal.status(), 403);
    }

    #[test]
    fn everything_else_is_refused_with_its_status() {
        let cases: &[(&str, u16)] = &[
            ("127.0.0.1:22", 403),
            ("127.0.0.1:15021", 403),
            ("127.0.0.1:15008", 403),
            ("0.0.0.0:8042", 403),
            ("224.0.0.1:8042", 403),
            ("169.254.169.254:80", 403),
            ("10.0.0.1:42", 403),
            ("10.0.0.1:9000", 403),
            ("10.0.0.5:9000", 403),
            ("10.0.0.9:8042", 403),
            ("10.9.0.3:8042", 403),
            ("[::1]:8042", 403),
            // IPv4-mapped spellings of the same addresses.
            ("[::ffff:127.0.0.1]:15021", 403),
            ("[::ffff:127.0.0.1]:15008", 403),
            ("[::ffff:7f00:1]:22", 403),
            ("[::ffff:169.254.169.254]:80", 403),
            ("[::ffff:0.0.0.0]:8042", 403),
            ("[::ffff:10.9.0.3]:8042", 403),
            // IPv4-compatible spellings (deprecated): refused outright.
            ("[::127.0.0.1]:15021", 403),
            ("[::169.254.169.254]:80", 403),
            ("[::10.0.0.1]:8042", 403),
            ("cart.shop.svc.clusterset.local:43", 403),
            ("hidden.shop.svc.clusterset.local:42", 404),
            ("nope.shop.svc.clusterset.local:42", 404),
            ("pod-0.c3.cart.shop.svc.clusterset.local:42", 404),
            ("example.com:443", 400),
            ("10.0.0.1", 400),
            ("10.0.0.1:0", 400),
            ("", 400),
        ];
        for (authority, status) in cases {
            let refusal = decide(authority).expect_err(authority);
            assert_eq!(refusal.status(), *status, "{authority}: {refusal}");
        }
        let table = table();
        let missing =
            authorize(&table, &cluster("c3"), None, &guard(&OWN)).expect_err("no authority");
        assert_eq!(missing.status(), 400);
    }

    #[test]
    fn only_clusters_of_the_set_may_call_and_not_this_one() {
        let table = table();
        let target = "cart.shop.svc.clusterset.local:42";
        let refusal = decide_for(&table, "evil", target).expect_err("unknown cluster");
        assert!(
            matches!(refusal, InboundRefusal::UnknownCaller(_)),
            "{refusal}"
        );
        assert_eq!(refusal.status(), 403);
        // Refused before the target is even read.
        let refusal = decide_for(&table, "evil", "nonsense").expect_err("unknown cluster");
        assert!(
            matches!(refusal, InboundRefusal::UnknownCaller(_)),
            "{refusal}"
        );
        let refusal = decide_for(&table, "c1", target).expect_err("own cluster");
        assert!(
            matches!(refusal, InboundRefusal::OwnCluster(_)),
            "{refusal}"
        );
        let admitting = InboundGuard {
            admit_own_cluster: true,
            ..guard(&OWN)
        };
        assert!(authorize(&table, &cluster("c1"), Some(target), &admitting).is_ok());
        // c2 shares the viewer's network and may call too.
        assert_eq!(
            decide_for(&table, "c2", target),
            Ok("pick shop/cart:42".to_owned())
        );
    }

    /// shop/cart as `set()` has it, with c1's (oldest) export admitting `policy`.
    fn table_with_policy(pairs: &[(&str, &str)]) -> RouteTable {
        let set = set_with_policy(pairs);
        RouteTable::build(&set, &merge(&set), "c1").expect("viewer")
    }

    /// `set()` with every export admitting `policy`.
    fn set_with_policy(pairs: &[(&str, &str)]) -> ClusterSet {
        let mut set = set();
        let annotations = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        let access = crate::model::AccessPolicy::from_annotations(&annotations).expect("valid");
        for cluster in set.clusters.values_mut() {
            for service in cluster.services.values_mut() {
                if let Some(export) = std::sync::Arc::make_mut(service).export.as_mut() {
                    export.access = access.clone();
                }
            }
        }
        set
    }

    #[test]
    fn a_udp_flow_reaches_only_udp_ports_and_backends_under_the_same_policy() {
        use crate::model::ALLOWED_CLUSTERS_ANNOTATION;
        // c1 declares 53/UDP (→ 5353) beside tcp:42; c2 declares 42 only.
        let mut set = set();
        let c1 = ServiceBuilder::new()
            .port("tcp", 42, 8042)
            .port_with("dns", Protocol::Udp, 53, 5353)
            .exported_at(1)
            .endpoint("10.0.0.1");
        if let Some(cluster) = set.clusters.get_mut(&cluster("c1")) {
            cluster.services.insert(c1.key.clone(), c1.into());
        }
        let table = RouteTable::build(&set, &merge(&set), "c1").expect("viewer");
        let udp = |caller: &str, authority: &str| {
            authorize_for(
                &table,
                &cluster(caller),
                Some(authority),
                Protocol::Udp,
                &guard(&OWN),
            )
            .map(|_| ())
        };
        assert!(udp("c3", "cart.shop.svc.clusterset.local:53").is_ok());
        assert!(udp("c3", "10.0.0.1:5353").is_ok());
        // A TCP port, or a TCP backend, is not a UDP one.
        let refusal = udp("c3", "cart.shop.svc.clusterset.local:42").expect_err("TCP port");
        assert_eq!(refusal.status(), 403, "{refusal}");
        let refusal = udp("c3", "10.0.0.1:8042").expect_err("TCP backend");
        assert_eq!(refusal.status(), 403, "{refusal}");
        // Nor the other way round.
        let tcp = authorize(&table, &cluster("c3"), Some("10.0.0.1:5353"), &guard(&OWN));
        assert!(tcp.is_err(), "a UDP backend is not dialled over TCP");

        // The service's policy binds UDP as it binds TCP.
        let mut closed = set_with_policy(&[(ALLOWED_CLUSTERS_ANNOTATION, "c2")]);
        let policy = |set: &ClusterSet| {
            set.clusters
                .values()
                .flat_map(|c| c.services.values())
                .find_map(|s| s.export.as_ref().map(|e| e.access.clone()))
                .flatten()
        };
        let access = policy(&closed);
        let mut c1 = ServiceBuilder::new()
            .port("tcp", 42, 8042)
            .port_with("dns", Protocol::Udp, 53, 5353)
            .exported_at(1)
            .endpoint("10.0.0.1");
        if let Some(export) = c1.export.as_mut() {
            export.access = access;
        }
        if let Some(cluster) = closed.clusters.get_mut(&cluster("c1")) {
            cluster.services.insert(c1.key.clone(), c1.into());
        }
        let table = RouteTable::build(&closed, &merge(&closed), "c1").expect("viewer");
        let refusal = authorize_for(
            &table,
            &cluster("c3"),
            Some("cart.shop.svc.clusterset.local:53"),
            Protocol::Udp,
            &guard(&OWN),
        )
        .map(|_| ())
        .expect_err("not admitted");
        assert!(
            matches!(refusal, InboundRefusal::NotAdmitted(_)),
            "{refusal}"
        );
    }

    #[test]
    fn a_service_policy_admits_only_whom_it_names() {
        use crate::model::{ALLOWED_CLUSTERS_ANNOTATION, ALLOWED_NETWORKS_ANNOTATION};
        let table = table_with_policy(&[(ALLOWED_CLUSTERS_ANNOTATION, "c2")]);
        for target in [
            "cart.shop.svc.clusterset.local:42",
            "10.0.0.1:8042",
            "[::ffff:10.0.0.1]:8042",
        ] {
            let refusal = decide_for(&table, "c3", target).expect_err(target);
            assert!(
                matches!(refusal, InboundRefusal::NotAdmitted(_)),
                "{target}: {refusal}"
            );
            assert_eq!(refusal.status(), 403);
            assert!(decide_for(&table, "c2", target).is_ok(), "{target}");
        }
        let refusal = decide_for(&table, "c3", "cart.shop.svc.clusterset.local:42")
            .expect_err("not admitted");
        assert_eq!(
            refusal.to_string(),
            "not admitted: shop/cart admits clusters c2; cluster c3 on network net-b is not one of them"
        );
        // A network admits every cluster on it.
        let table = table_with_policy(&[(ALLOWED_NETWORKS_ANNOTATION, "net-b")]);
        assert!(decide_for(&table, "c3", "10.0.0.2:8042").is_ok());
        assert!(decide_for(&table, "c2", "10.0.0.2:8042").is_err());
    }

    /// Without a network map, c3 saying it is on net-b is its own word:
    /// `allowed-networks: net-b` admits it no more than any other cluster.
    #[test]
    fn a_network_only_its_cluster_states_admits_no_one() {
        use crate::model::ALLOWED_NETWORKS_ANNOTATION;
        let mut set = set_with_policy(&[(ALLOWED_NETWORKS_ANNOTATION, "net-b")]);
        for cluster in set.clusters.values_mut() {
            cluster.network_attested = false;
        }
        let table = RouteTable::build(&set, &merge(&set), "c1").expect("viewer");
        for target in ["10.0.0.2:8042", "cart.shop.svc.clusterset.local:42"] {
            let refusal = decide_for(&table, "c3", target).expect_err(target);
            assert!(
                matches!(&refusal, InboundRefusal::NotAdmitted(why) if why.contains("not attested")),
                "{target}: {refusal}"
            );
        }
    }

    #[test]
    fn an_address_of_an_open_service_stays_open_beside_a_closed_one() {
        use crate::model::ALLOWED_CLUSTERS_ANNOTATION;
        let mut set = set();
        // shop/till, open to all, shares c1's backend 10.0.0.1:8042 with shop/cart.
        let mut till = ServiceBuilder::new()
            .port("tcp", 7, 8042)
            .exported_at(1)
            .endpoint("10.0.0.1");
        till.key = ServiceKey::new("shop", "till");
        let closed = crate::model::AccessPolicy::from_annotations(
            &[(ALLOWED_CLUSTERS_ANNOTATION.to_owned(), "c2".to_owned())].into(),
        )
        .expect("valid");
        for cluster in set.clusters.values_mut() {
            for service in cluster.services.values_mut() {
                if let Some(export) = std::sync::Arc::make_mut(service).export.as_mut() {
                    export.access = closed.clone();
                }
            }
        }
        if let Some(c1) = set.clusters.values_mut().next() {
            c1.services.insert(till.key.clone(), till.into());
        }
        let table = RouteTable::build(&set, &merge(&set), "c1").expect("viewer");
        assert!(decide_for(&table, "c3", "10.0.0.1:8042").is_ok());
        // c2's own backend serves only the closed service.
        assert!(decide_for(&table, "c3", "10.0.0.2:8042").is_err());
    }

    /// c2, on the viewer's network, lists as endpoints of its export the
    /// viewer's machinery: the API server's ClusterIP, a replica of the
    /// viewer's own gateway, a node, and the clouds' metadata addresses.
    #[test]
    fn machinery_listed_as_an_endpoint_is_never_dialled() {
        let mut set = cluster_set(&[
            (
                "c1",
                "net-a",
                ServiceBuilder::new()
                    .port("tcp", 42, 8042)
                    .exported_at(1)
                    .endpoint("10.0.0.1"),
            ),
            (
                "c2",
                "net-a",
                ServiceBuilder::new()
                    .port("tcp", 42, 8042)
                    .exported_at(2)
                    .endpoint("10.96.0.1")
                    .endpoint("10.0.0.50")
                    .endpoint("10.200.0.5")
                    .endpoint("100.100.100.200")
                    .endpoint("fd00:ec2::254"),
            ),
            ("c3", "net-b", ServiceBuilder::new().port("tcp", 42, 8042)),
        ]);
        if let Some(c1) = set.clusters.get_mut(&cluster("c1")) {
            c1.infrastructure = vec![
                ("10.0.0.50".parse().expect("ip"), Infrastructure::GatewayPod),
                ("10.96.0.1".parse().expect("ip"), Infrastructure::ServiceIp),
            ]
            .into();
        }
        let table = RouteTable::build(&set, &merge(&set), "c1").expect("viewer");
        let mut denying = guard(&OWN);
        denying.denied_networks = vec!["10.200.0.0/16".parse().expect("cidr")];
        let decide = |authority: &str| {
            authorize(&table, &cluster("c3"), Some(authority), &denying).map(|plan| match plan {
                InboundPlan::Dial(address) => address.to_string(),
                InboundPlan::Pick { .. } => "pick".to_owned(),
            })
        };
        let refused = [
            ("10.96.0.1:8042", "a Service ClusterIP of cluster c1"),
            ("10.0.0.50:8042", "a gateway pod of cluster c1"),
            ("[::ffff:10.0.0.50]:8042", "a gateway pod of cluster c1"),
            ("10.200.0.5:8042", "tunnel.deniedNetworks"),
            ("100.100.100.200:8042", "cloud metadata"),
            ("[fd00:ec2::254]:8042", "cloud metadata"),
        ];
        for (authority, why) in refused {
            let refusal = decide(authority).expect_err(authority);
            assert!(
                matches!(&refusal, InboundRefusal::Forbidden(message) if message.contains(why)),
                "{authority}: {refusal}"
            );
        }
        // The real backend of the same service is still dialled.
        assert_eq!(decide("10.0.0.1:8042"), Ok("10.0.0.1:8042".to_owned()));
        // By name the service is picked from: the tunnel server skips the
        // machinery among its backends (`never_dialled`) as it picks.
        assert_eq!(
            decide("cart.shop.svc.clusterset.local:42"),
            Ok("pick".to_owned())
        );
        for address in ["10.96.0.1", "10.0.0.50", "10.200.0.5", "100.100.100.200"] {
            let address: IpAddr = address.parse().expect("ip");
            assert!(
                never_dialled(&table, &denying, &address).is_some(),
                "{address}"
            );
        }
        let backend: IpAddr = "10.0.0.1".parse().expect("ip");
        assert_eq!(never_dialled(&table, &denying, &backend), None);
    }
}
