//! Authorising what a peer gateway asks this gateway to dial. The tunnel
//! server is never an open relay: it dials only backends of exported services
//! on its own network, on target ports their constituents declare, and it
//! decides before any socket is opened. Pure: the route table decides.

use std::net::SocketAddr;

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

/// Why a request was refused; each maps to one HTTP status.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InboundRefusal {
    /// 400: the request is not a well-formed tunnel request.
    #[error("malformed: {0}")]
    Malformed(String),
    /// 403: well-formed, but not something this gateway dials.
    #[error("forbidden: {0}")]
    Forbidden(String),
    /// 404: no exported service (or pod) of that name.
    #[error("unknown service: {0}")]
    UnknownService(String),
    /// 503: the service port exists but has no ready backend on this network.
    #[error("no ready backend: {0}")]
    NoBackend(String),
}

impl InboundRefusal {
    pub fn status(&self) -> u16 {
        match self {
            InboundRefusal::Malformed(_) => 400,
            InboundRefusal::Forbidden(_) => 403,
            InboundRefusal::UnknownService(_) => 404,
            InboundRefusal::NoBackend(_) => 503,
        }
    }
}

/// Decides a tunnel request for `authority`. `own_listeners` are the
/// gateway's own sockets, refused even if a backend claims one of them.
pub fn authorize<'a>(
    table: &'a RouteTable,
    authority: Option<&str>,
    own_listeners: &[SocketAddr],
) -> Result<InboundPlan<'a>, InboundRefusal> {
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
            .find(|p| p.protocol == crate::model::Protocol::Tcp && p.port == port)
            .ok_or_else(|| {
                InboundRefusal::Forbidden(format!("{service} does not expose port {port}/TCP"))
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
                    own_or_wildcard(&SocketAddr::new(own.ip(), address.port()), &address)
                });
            if import_listener
                || own_listeners
                    .iter()
                    .any(|own| own_or_wildcard(own, &address))
            {
                return Err(InboundRefusal::Forbidden(format!(
                    "{address} is this gateway's own listener"
                )));
            }
            // Defence in depth: translation already refuses these as endpoints.
            if let Some(class) =
                crate::discovery::translate::unroutable_endpoint(&address.ip(), true)
            {
                return Err(InboundRefusal::Forbidden(format!(
                    "{address} is a {class} address"
                )));
            }
            if table.is_local_backend(&address) {
                Ok(InboundPlan::Dial(address))
            } else {
                Err(InboundRefusal::Forbidden(format!(
                    "{address} is not a ready backend of an exported service port on network {}",
                    table.network()
                )))
            }
        }
        Target::Service { service, port } => {
            let (service, route) = lookup(&service, port)?;
            if route.backends.iter().any(|b| b.path == Path::Direct) {
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
            let pod = route.pod(&hostname, &cluster).ok_or_else(|| {
                InboundRefusal::UnknownService(format!(
                    "{} has no ready pod {hostname} in cluster {cluster}",
                    routes.key
                ))
            })?;
            if pod.path != Path::Direct {
                return Err(InboundRefusal::Forbidden(format!(
                    "pod {hostname} of cluster {cluster} is not on network {}",
                    table.network()
                )));
            }
            Ok(InboundPlan::Dial(SocketAddr::new(
                pod.backend.address,
                pod.backend.port,
            )))
        }
    }
}

/// Whether `target` reaches the listener `own`. A listener bound to a
/// wildcard address also answers on loopback; a backend elsewhere that
/// happens to use the same port number is not the gateway.
fn own_or_wildcard(own: &SocketAddr, target: &SocketAddr) -> bool {
    own.port() == target.port()
        && (own.ip() == target.ip()
            || (own.ip().is_unspecified()
                && (target.ip().is_loopback() || target.ip().is_unspecified())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::merge::merge;
    use crate::model::{ClusterSet, ServiceKey};
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
            cluster.services.insert(hidden.key.clone(), hidden);
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

    fn decide(authority: &str) -> Result<String, InboundRefusal> {
        let table = table();
        authorize(&table, Some(authority), &OWN).map(|plan| match plan {
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
    fn a_backend_elsewhere_on_the_tunnel_port_number_is_not_the_gateway() {
        let own = [SocketAddr::from(([0, 0, 0, 0], 8042))];
        let table = table();
        let plan = authorize(&table, Some("10.0.0.1:8042"), &own).expect("a real backend");
        assert!(matches!(plan, InboundPlan::Dial(_)));
        let refusal = authorize(&table, Some("127.0.0.1:8042"), &own).expect_err("own port");
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
        let missing = authorize(&table, None, &OWN).expect_err("no authority");
        assert_eq!(missing.status(), 400);
    }
}
