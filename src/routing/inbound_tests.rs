//! The tunnel server's authorisation, without I/O: targets, policies,
//! machinery, networks.
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

fn decide_for(table: &RouteTable, caller: &str, authority: &str) -> Result<String, InboundRefusal> {
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
            told(ServiceBuilder::new().port("tcp", 42, 8042).exported_at(1)).endpoint("10.0.0.1"),
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
    let plan =
        |authority: &str| authorize(&table, &c3, Some(authority), &guard(&OWN)).expect("allowed");
    let at = |address: &str| address.parse::<SocketAddr>().expect("address");
    let cart = "cart.shop.svc.clusterset.local:42";
    let plain = "plain.shop.svc.clusterset.local:42";
    assert!(plan(cart).proxy_protocol(&table, &at("10.0.0.1:8042")));
    assert!(plan("10.0.0.1:8042").proxy_protocol(&table, &at("10.0.0.1:8042")));
    assert!(!plan(plain).proxy_protocol(&table, &at("10.0.0.7:8042")));
    assert!(!plan("10.0.0.7:8042").proxy_protocol(&table, &at("10.0.0.7:8042")));
}

/// A pod port that speaks the PROXY protocol for one Service gets a header
/// whichever Service reaches it, whatever that Service's policy or flag,
/// and a backend whose own cluster's export asks gets one while an older
/// export without the flag wins the merge: a client's first bytes are
/// never read as a header.
#[test]
fn the_header_is_decided_per_backend_not_per_request() {
    use crate::model::ALLOWED_CLUSTERS_ANNOTATION;
    let mut set = set();
    let mut told = ServiceBuilder::new()
        .port("tcp", 42, 8042)
        .exported_at(1)
        .endpoint("10.0.0.1")
        .proxy_protocol();
    let only_c2 = [(ALLOWED_CLUSTERS_ANNOTATION.to_owned(), "c2".to_owned())].into();
    if let Some(export) = told.export.as_mut() {
        export.access = crate::model::AccessPolicy::from_annotations(&only_c2).expect("valid");
    }
    let mut shared = ServiceBuilder::new()
        .port("tcp", 7, 8042)
        .exported_at(1)
        .endpoint("10.0.0.1");
    shared.key = ServiceKey::new("shop", "shared");
    if let Some(c1) = set.clusters.get_mut(&cluster("c1")) {
        c1.services.insert(told.key.clone(), told.into());
        c1.services.insert(shared.key.clone(), shared.into());
    }
    // c2's export of cart is younger and asks; the merged flag is c1's.
    let mut rollout = ServiceBuilder::new()
        .port("tcp", 42, 8042)
        .exported_at(5)
        .endpoint("10.0.0.2")
        .proxy_protocol();
    rollout.key = ServiceKey::new("shop", "rollout");
    let oldest = ServiceBuilder::new()
        .port("tcp", 42, 8042)
        .exported_at(1)
        .endpoint("10.0.0.3");
    let mut oldest = oldest;
    oldest.key = rollout.key.clone();
    if let Some(c2) = set.clusters.get_mut(&cluster("c2")) {
        c2.services.insert(rollout.key.clone(), rollout.into());
    }
    if let Some(c1) = set.clusters.get_mut(&cluster("c1")) {
        c1.services.insert(oldest.key.clone(), oldest.into());
    }
    let table = RouteTable::build(&set, &merge(&set), "c1").expect("viewer");
    let c3 = cluster("c3");
    let at = |address: &str| address.parse::<SocketAddr>().expect("address");
    let plan =
        |authority: &str| authorize(&table, &c3, Some(authority), &guard(&OWN)).expect("allowed");
    // shop/shared admits c3 and does not ask; cart (which does) admits c2 only.
    assert!(
        authorize(
            &table,
            &c3,
            Some("cart.shop.svc.clusterset.local:42"),
            &guard(&OWN)
        )
        .is_err()
    );
    let shared = plan("shared.shop.svc.clusterset.local:7");
    assert!(shared.proxy_protocol(&table, &at("10.0.0.1:8042")));
    assert!(plan("10.0.0.1:8042").proxy_protocol(&table, &at("10.0.0.1:8042")));
    let rollout = plan("rollout.shop.svc.clusterset.local:42");
    assert!(rollout.proxy_protocol(&table, &at("10.0.0.2:8042")));
    assert!(!rollout.proxy_protocol(&table, &at("10.0.0.3:8042")));
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
    let missing = authorize(&table, &cluster("c3"), None, &guard(&OWN)).expect_err("no authority");
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
        cluster.edit_services(|service| {
            if let Some(export) = service.export.as_mut() {
                export.access = access.clone();
            }
        });
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
    let refusal =
        decide_for(&table, "c3", "cart.shop.svc.clusterset.local:42").expect_err("not admitted");
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
    for target in ["10.0.0.1:8042", "cart.shop.svc.clusterset.local:42"] {
        let refusal = decide_for(&table, "c3", target).expect_err(target);
        assert!(
            matches!(&refusal, InboundRefusal::NotAdmitted(why) if why.contains("not attested")),
            "{target}: {refusal}"
        );
    }
}

/// Without a network map, c2 saying it is on net-a (c1's network) does
/// not make its endpoints c1's to dial for a peer: c1's gateway dials
/// its own cluster's backends only. With the map, c2's are dialled too.
#[test]
fn a_members_network_claim_opens_no_dial_into_this_network() {
    let mut claimed = set();
    for cluster in claimed.clusters.values_mut() {
        cluster.network_attested = false;
    }
    let table = RouteTable::build(&claimed, &merge(&claimed), "c1").expect("viewer");
    let refusal = decide_for(&table, "c3", "10.0.0.2:8042").expect_err("c2's backend");
    assert!(
        matches!(&refusal, InboundRefusal::Forbidden(why) if why.contains("network map")),
        "{refusal}"
    );
    assert_eq!(refusal.status(), 403);
    assert_eq!(
        decide_for(&table, "c3", "10.0.0.1:8042").as_deref(),
        Ok("dial 10.0.0.1:8042"),
        "its own cluster's backend"
    );
    // `set()`'s clusters are attested, as a network map makes them.
    let attested = set();
    let attested = RouteTable::build(&attested, &merge(&attested), "c1").expect("viewer");
    assert_eq!(
        decide_for(&attested, "c3", "10.0.0.2:8042").as_deref(),
        Ok("dial 10.0.0.2:8042")
    );
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
        cluster.edit_services(|service| {
            if let Some(export) = service.export.as_mut() {
                export.access = closed.clone();
            }
        });
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
                .endpoint("fd00:ec2::254")
                .endpoint("203.0.113.7")
                .endpoint("203.0.113.8")
                .endpoint("192.0.2.10"),
        ),
        ("c3", "net-b", ServiceBuilder::new().port("tcp", 42, 8042)),
    ]);
    if let Some(c1) = set.clusters.get_mut(&cluster("c1")) {
        c1.infrastructure = vec![
            ("10.0.0.50".parse().expect("ip"), Infrastructure::GatewayPod),
            ("10.96.0.1".parse().expect("ip"), Infrastructure::ServiceIp),
            ("192.0.2.10".parse().expect("ip"), Infrastructure::ApiServer),
            (
                "203.0.113.7".parse().expect("ip"),
                Infrastructure::ExternalIp,
            ),
            (
                "203.0.113.8".parse().expect("ip"),
                Infrastructure::LoadBalancerIp,
            ),
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
        ("192.0.2.10:8042", "an API server endpoint"),
        ("203.0.113.7:8042", "a Service external IP"),
        ("203.0.113.8:8042", "a Service load balancer address"),
        // NAT64 and 6to4 spellings reach the IPv4 address they embed.
        (
            "[64:ff9b::a00:32]:8042",
            "embeds 10.0.0.50: 10.0.0.50 is a gateway pod",
        ),
        (
            "[2002:a60:1::]:8042",
            "embeds 10.96.0.1: 10.96.0.1 is a Service ClusterIP",
        ),
        ("[64:ff9b::6464:64c8]:8042", "cloud metadata"),
        ("[64:ff9b::7f00:1]:15021", "this gateway's own listener"),
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
