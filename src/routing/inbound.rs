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
    /// Whether the backend at `address` (the plan's, or the one it picked)
    /// is to be told who called (a PROXY protocol v2 header): decided per
    /// backend, never per request, so a client can never have its first
    /// bytes read as a header. The picked service asks for it, or any
    /// service that lists the backend does (its own cluster's export among
    /// them), whatever their policies admit.
    pub fn proxy_protocol(&self, table: &RouteTable, address: &SocketAddr) -> bool {
        let service = match self {
            InboundPlan::Pick { service, .. } => service.proxy_protocol(),
            InboundPlan::Dial(_) => false,
        };
        service || table.local_backend_proxy_protocol(address)
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

/// Why `target` is never dialled, for a peer or for this gateway's own
/// clients on the direct path, whoever lists it: this gateway's own
/// listener (its import ports among them, on every spelling of its
/// addresses, an embedded IPv4 too), or machinery ([`never_dialled`]).
/// Every target form is checked, and so is every backend a pick chose.
pub fn refused_target(
    table: &RouteTable,
    guard: &InboundGuard,
    target: &SocketAddr,
) -> Option<String> {
    let ip = target.ip().to_canonical();
    let spellings = std::iter::once(ip).chain(crate::model::embedded_ipv4(&ip).map(IpAddr::V4));
    for ip in spellings {
        let address = SocketAddr::new(ip, target.port());
        // The import listeners bind where the others do, on ports the
        // table names.
        let import_listener = table.lookup_import_port(address.port()).is_some()
            && guard.own_listeners.iter().any(|own| {
                own_or_wildcard(
                    &SocketAddr::new(own.ip(), address.port()),
                    &address,
                    &guard.interface_addresses,
                )
            });
        if import_listener
            || guard
                .own_listeners
                .iter()
                .any(|own| own_or_wildcard(own, &address, &guard.interface_addresses))
        {
            return Some(format!("{target} is this gateway's own listener"));
        }
    }
    never_dialled(table, guard, &ip)
}

/// Why the tunnel server never dials `address` for a peer, whichever
/// service lists it; `None` when it may. The route table's backends are
/// what tenants and member clusters say: a Service's ClusterIP, a gateway
/// pod, a node or a cloud's metadata address listed as an endpoint would
/// let a peer reach what is not a pod of an exported service.
pub fn never_dialled(table: &RouteTable, guard: &InboundGuard, address: &IpAddr) -> Option<String> {
    let address = address.to_canonical();
    // A NAT64 or 6to4 spelling reaches the IPv4 address it embeds.
    if let Some(v4) = crate::model::embedded_ipv4(&address)
        && let Some(why) = judged(table, guard, &IpAddr::V4(v4))
    {
        return Some(format!("{address} embeds {v4}: {why}"));
    }
    judged(table, guard, &address)
}

fn judged(table: &RouteTable, guard: &InboundGuard, address: &IpAddr) -> Option<String> {
    let address = *address;
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
/// nothing), if it is a cluster of the set and not this gateway's own
/// (unless `tunnel.admitOwnCluster`).
pub fn known_caller<'a>(
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
            if let Some(why) = refused_target(table, guard, &address) {
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
                    "{address} is not a ready backend of an exported {protocol} service port of a cluster this gateway dials for peers (its own, or one the network map attests on network {})",
                    table.network()
                ))),
            }
        }
        Target::Service { service, port } => {
            let (service, route) = lookup(&service, port)?;
            admitted(service, caller, network)?;
            if route.backends.iter().any(|b| b.peer_dialable()) {
                Ok(InboundPlan::Pick { service, route })
            } else {
                Err(InboundRefusal::NoBackend(format!(
                    "{}:{port} has no ready backend this gateway dials for peers on network {} (its own cluster's, or an attested cluster's)",
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
            if !pod.peer_dialable() {
                return Err(InboundRefusal::Forbidden(format!(
                    "pod {hostname} of cluster {cluster} is not this gateway's to dial: no network map attests cluster {cluster} on network {}",
                    table.network()
                )));
            }
            let address = SocketAddr::new(pod.backend.address, pod.backend.port);
            if let Some(why) = refused_target(table, guard, &address) {
                return Err(InboundRefusal::Forbidden(why));
            }
            Ok(InboundPlan::Dial(address))
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
#[path = "inbound_tests.rs"]
mod tests;
