//! Unit tests of routes relative to a viewing cluster.

use super::*;
use crate::merge::merge;
use crate::model::{ClusterService, GatewayHost, ServiceKey};
use crate::testing::{ServiceBuilder, cluster_set, exported_http, ip};

fn table(set: &ClusterSet, viewer: &str) -> RouteTable {
    RouteTable::build(set, &merge(set), viewer).expect("viewer is known")
}

fn gateway(last: u8) -> GatewayAddress {
    GatewayAddress {
        host: GatewayHost::Ip(IpAddr::from([192, 0, 2, last])),
        port: 15008,
    }
}

/// c1, c2 on net-a; c3, c4 on net-b; c5 on net-c; gateways at 192.0.2.10+index.
fn three_networks() -> ClusterSet {
    let svc = |address: &str, age| {
        ServiceBuilder::new()
            .port("tcp", 42, 8042)
            .exported_at(age)
            .endpoint(address)
    };
    cluster_set(&[
        ("c1", "net-a", svc("10.1.0.1", 1)),
        ("c2", "net-a", svc("10.1.0.2", 2)),
        ("c3", "net-b", svc("10.1.0.1", 3)),
        ("c4", "net-b", svc("10.1.0.4", 4)),
        ("c5", "net-c", svc("10.1.0.5", 5)),
    ])
}

fn paths(route: &PortRoute) -> Vec<(&str, &str)> {
    route
        .backends
        .iter()
        .map(|b| (b.backend.cluster.as_str(), b.path().as_str()))
        .collect()
}

#[test]
fn same_network_is_direct_and_other_networks_tunnel() {
    let set = three_networks();
    let table = table(&set, "c1");
    let route = table
        .lookup("shop", "cart", Protocol::Tcp, 42)
        .expect("route");
    assert_eq!(
        paths(route),
        vec![
            ("c1", "direct"),
            ("c2", "direct"),
            ("c3", "tunnel"),
            ("c4", "tunnel"),
            ("c5", "tunnel")
        ]
    );
    assert_eq!(table.network().as_str(), "net-a");
}

#[test]
fn tunnels_go_to_the_backends_own_cluster_gateways_first() {
    let set = three_networks();
    let table = table(&set, "c1");
    let route = table
        .lookup("shop", "cart", Protocol::Tcp, 42)
        .expect("route");
    let gateways_of = |cluster: &str| match &route
        .backends
        .iter()
        .find(|b| b.backend.cluster.as_str() == cluster)
        .expect("backend")
        .path()
    {
        Path::Tunnel { gateways } => gateways.to_vec(),
        Path::Direct => Vec::new(),
    };
    assert_eq!(gateways_of("c3"), vec![gateway(12), gateway(13)]);
    assert_eq!(gateways_of("c4"), vec![gateway(13), gateway(12)]);
    assert_eq!(gateways_of("c5"), vec![gateway(14)]);
}

#[test]
fn overlapping_addresses_keep_their_network() {
    let set = three_networks();
    let table = table(&set, "c1");
    let route = table
        .lookup("shop", "cart", Protocol::Tcp, 42)
        .expect("route");
    let same_address: Vec<(&str, &str)> = route
        .backends
        .iter()
        .filter(|b| b.backend.address == ip("10.1.0.1"))
        .map(|b| (b.network().as_str(), b.path().as_str()))
        .collect();
    assert_eq!(same_address, vec![("net-a", "direct"), ("net-b", "tunnel")]);
}

#[test]
fn a_network_without_gateways_is_excluded_with_a_reason() {
    let mut set = three_networks();
    if let Some(cluster) = set.clusters.values_mut().find(|c| c.id.as_str() == "c5") {
        cluster.gateways.clear();
    }
    let table = table(&set, "c1");
    let route = table
        .lookup("shop", "cart", Protocol::Tcp, 42)
        .expect("route");
    assert!(
        route
            .backends
            .iter()
            .all(|b| b.backend.cluster.as_str() != "c5")
    );
    let excluded: Vec<(&str, ExclusionReason)> = route
        .excluded
        .iter()
        .map(|e| (e.cluster.as_str(), e.reason))
        .collect();
    assert_eq!(excluded, vec![("c5", ExclusionReason::NoGateway)]);
}

#[test]
fn direct_paths_need_no_gateway() {
    let mut set = three_networks();
    for cluster in set.clusters.values_mut() {
        cluster.gateways.clear();
    }
    let table = table(&set, "c1");
    let route = table
        .lookup("shop", "cart", Protocol::Tcp, 42)
        .expect("route");
    assert_eq!(paths(route), vec![("c1", "direct"), ("c2", "direct")]);
    assert_eq!(route.excluded.len(), 3);
}

#[test]
fn the_view_depends_on_the_viewer() {
    let set = three_networks();
    let from_c3 = table(&set, "c3");
    let route = from_c3
        .lookup("shop", "cart", Protocol::Tcp, 42)
        .expect("route");
    assert_eq!(
        paths(route),
        vec![
            ("c1", "tunnel"),
            ("c2", "tunnel"),
            ("c3", "direct"),
            ("c4", "direct"),
            ("c5", "tunnel")
        ]
    );
}

#[test]
fn unknown_viewers_services_and_ports_are_misses() {
    let set = three_networks();
    let error = RouteTable::build(&set, &merge(&set), "c9").expect_err("unknown viewer");
    assert_eq!(
        error.to_string(),
        "unknown cluster \"c9\"; the cluster set holds c1, c2, c3, c4, c5"
    );
    let table = table(&set, "c1");
    assert!(table.lookup("shop", "cart", Protocol::Tcp, 43).is_none());
    assert!(table.lookup("shop", "cart", Protocol::Udp, 42).is_none());
    assert!(table.lookup("shop", "nope", Protocol::Tcp, 42).is_none());
    assert!(table.lookup("other", "cart", Protocol::Tcp, 42).is_none());
}

#[test]
fn vips_of_the_viewers_imports_select_service_and_port() {
    let mut set = three_networks();
    let vip = ip("240.0.0.7");
    if let Some(cluster) = set.clusters.values_mut().find(|c| c.id.as_str() == "c1") {
        cluster
            .imports
            .insert(ServiceKey::new("shop", "cart"), vec![vip]);
    }
    let from_c1 = table(&set, "c1");
    let (service, route) = from_c1
        .lookup_vip(vip, Protocol::Tcp, 42)
        .expect("vip routes");
    assert_eq!(service.key, ServiceKey::new("shop", "cart"));
    assert_eq!(route.port, 42);
    assert!(from_c1.lookup_vip(vip, Protocol::Tcp, 43).is_none());
    let from_c2 = table(&set, "c2");
    assert!(
        from_c2.lookup_vip(vip, Protocol::Tcp, 42).is_none(),
        "VIPs are per cluster"
    );
}

#[test]
fn the_routes_query_picks_one_service_or_refuses() {
    let table = table(&three_networks(), "c1");
    let key = table.services().next().expect("a service").key.clone();
    let all = report::query(&table, "").expect("every port");
    let one = report::query(&table, &format!("service={}/{}", key.namespace, key.name))
        .expect("one service");
    assert_eq!(one.len(), all.len(), "the one service is all there is");
    assert!(!one.is_empty());
    assert!(
        report::query(&table, "service=shop/absent")
            .expect("a well-formed query")
            .is_empty()
    );
    assert_eq!(
        report::query(&table, "service=shop").map(|p| p.len()),
        Err(report::RoutesQueryError::Service("shop".to_owned()))
    );
    assert_eq!(
        report::query(&table, "verbose=1").map(|p| p.len()),
        Err(report::RoutesQueryError::Unknown("verbose".to_owned()))
    );
}

#[test]
fn a_table_reuses_the_routes_of_unchanged_services_while_every_path_stays() {
    let mut set = cluster_set(&[
        ("c1", "net-a", exported_http("cart", "10.0.0.1")),
        ("c2", "net-b", exported_http("cart", "10.0.0.2")),
    ]);
    let c2 = ClusterId::new("c2").expect("id");
    let orders = exported_http("orders", "10.0.1.2");
    if let Some(cluster) = set.clusters.get_mut(&c2) {
        cluster
            .services
            .insert(orders.key.clone(), Arc::new(orders));
    }
    let routes = |table: &RouteTable, name: &str| table.services["shop"][name].clone();
    let merged = merge(&set);
    let first = RouteTable::build(&set, &merged, "c1").expect("viewer");
    // c2's cart gains an endpoint.
    if let Some(cart) = set
        .clusters
        .get_mut(&c2)
        .and_then(|c| c.services.get_mut(&ServiceKey::new("shop", "cart")))
    {
        Arc::make_mut(cart).endpoint_groups[0]
            .add_endpoint(crate::model::Endpoint::ready(ip("10.0.0.3")));
    }
    let merged = crate::merge::merge_reusing(&set, &merged);
    let second = RouteTable::build_reusing(&set, &merged, "c1", Some(&first)).expect("viewer");
    assert!(Arc::ptr_eq(
        &routes(&first, "orders"),
        &routes(&second, "orders")
    ));
    assert!(!Arc::ptr_eq(
        &routes(&first, "cart"),
        &routes(&second, "cart")
    ));
    assert_eq!(routes(&second, "cart").ports[0].backends.len(), 3);
    // A new gateway of net-b changes the path to c2: every service is routed again.
    if let Some(cluster) = set.clusters.get_mut(&c2) {
        cluster.gateways.push(gateway(99));
    }
    let third = RouteTable::build_reusing(&set, &merged, "c1", Some(&second)).expect("viewer");
    let now = routes(&third, "orders");
    assert!(!Arc::ptr_eq(&routes(&second, "orders"), &now));
    assert!(matches!(now.ports[0].backends.first().map(|b| b.path()),
        Some(Path::Tunnel { gateways }) if gateways.contains(&gateway(99))));
}

#[test]
fn the_local_backends_of_a_reused_table_match_a_fresh_build() {
    let mut set = cluster_set(&[
        ("c1", "net-a", exported_http("cart", "10.0.0.1")),
        ("c2", "net-a", exported_http("cart", "10.0.0.2")),
        ("c3", "net-b", exported_http("cart", "10.0.0.3")),
    ]);
    let id = |name: &str| ClusterId::new(name).expect("id");
    let add = |set: &mut ClusterSet, cluster: &str, service: ClusterService| {
        if let Some(cluster) = set.clusters.get_mut(&id(cluster)) {
            cluster
                .services
                .insert(service.key.clone(), Arc::new(service));
        }
    };
    add(&mut set, "c2", exported_http("orders", "10.0.1.2"));
    let merged = merge(&set);
    let first = RouteTable::build(&set, &merged, "c1").expect("viewer");
    let backend = |address: &str| SocketAddr::new(ip(address), 8080);
    let (c3, net_b) = (id("c3"), NetworkId::new("net-b").expect("network"));
    assert_eq!(
        first.local_backend_admits(&backend("10.0.1.2"), Protocol::Tcp, &c3, Some(&net_b)),
        Some(true)
    );

    // A direct cluster's service gains an endpoint, another of its
    // services goes, a new one comes, and a tunnelled cluster changes too.
    let more = |set: &mut ClusterSet, cluster: &str, address: &str| {
        if let Some(cart) = set
            .clusters
            .get_mut(&id(cluster))
            .and_then(|c| c.services.get_mut(&ServiceKey::new("shop", "cart")))
        {
            Arc::make_mut(cart).endpoint_groups[0]
                .add_endpoint(crate::model::Endpoint::ready(ip(address)));
        }
    };
    more(&mut set, "c2", "10.0.0.9");
    more(&mut set, "c3", "10.0.0.8");
    if let Some(c2) = set.clusters.get_mut(&id("c2")) {
        c2.services.remove(&ServiceKey::new("shop", "orders"));
    }
    add(&mut set, "c1", exported_http("pay", "10.0.2.1"));
    let merged = crate::merge::merge_reusing(&set, &merged);
    let patched = RouteTable::build_reusing(&set, &merged, "c1", Some(&first)).expect("viewer");
    let fresh = RouteTable::build(&set, &merged, "c1").expect("viewer");
    assert_eq!(
        patched.local_backends.addresses(),
        fresh.local_backends.addresses()
    );
    let admits = |address: &str| {
        patched.local_backend_admits(&backend(address), Protocol::Tcp, &c3, Some(&net_b))
    };
    assert_eq!(admits("10.0.0.9"), Some(true), "the new direct endpoint");
    assert_eq!(admits("10.0.2.1"), Some(true), "the new service's endpoint");
    assert_eq!(admits("10.0.1.2"), None, "the removed service's endpoint");
    assert_eq!(admits("10.0.0.8"), None, "a tunnelled cluster's endpoint");

    // Only a tunnelled cluster changes: the index is shared, not copied.
    more(&mut set, "c3", "10.0.0.7");
    let merged = crate::merge::merge_reusing(&set, &merged);
    let shared = RouteTable::build_reusing(&set, &merged, "c1", Some(&patched)).expect("viewer");
    assert!(shared.local_backends.shares(&patched.local_backends));
}

#[test]
fn a_remote_headless_pod_is_reported_with_the_address_pods_here_dial() {
    let db = |address: &str, hostname: &str| {
        ServiceBuilder::new()
            .named("db")
            .headless()
            .port("tcp", 8080, 8080)
            .exported_at(1)
            .endpoint_named(address, hostname)
    };
    let set = cluster_set(&[
        ("c1", "net-a", db("10.1.0.7", "db-0")),
        ("c3", "net-b", db("10.3.0.5", "db-1")),
    ]);
    let mut table = table(&set, "c1");
    let key = ServiceKey::new("shop", "db");
    let remote = table
        .service("shop", "db")
        .and_then(|s| s.port(Protocol::Tcp, 8080))
        .and_then(|route| {
            route
                .backends
                .iter()
                .find(|b| b.backend.cluster.as_str() == "c3")
        })
        .map(|routed| routed.backend.pod_ref())
        .expect("c3's pod is a backend");
    let addresses =
        std::collections::BTreeMap::from([((key.clone(), remote), vec![ip("10.96.7.7")])]);
    table.set_pod_addresses(addresses.iter());
    let service = table.service("shop", "db").expect("routed");
    let route = service.port(Protocol::Tcp, 8080).expect("port");
    let report = crate::routing::report::PortReport::new(&table, service, route);
    let dialled: Vec<(&str, Vec<std::net::IpAddr>)> = report
        .backends
        .iter()
        .map(|b| (b.cluster.as_str(), b.dial_here.clone()))
        .collect();
    // The local pod is dialled at its own address; the remote one at its
    // per-pod derived Service here.
    assert_eq!(dialled, [("c1", Vec::new()), ("c3", vec![ip("10.96.7.7")])]);
}
