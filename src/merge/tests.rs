//! Unit tests of the MCS merge, including the conformance-style cases of
//! KEP-1645's port rules.

use std::net::IpAddr;

use super::*;
use crate::model::{Endpoint, EndpointGroup, EndpointPort, IpFamily, ServicePort, ServiceSpec};
use crate::testing::{ServiceBuilder, cluster_set, exported_http, ip};

fn merged(set: &ClusterSet) -> MergedService {
    merge(set)
        .services
        .get(&ServiceKey::new("shop", "cart"))
        .map(|merged| merged.as_ref().clone())
        .expect("shop/cart is merged")
}

fn port_numbers(service: &MergedService) -> Vec<(String, u16)> {
    service
        .ports
        .iter()
        .map(|p| (p.name.clone(), p.port))
        .collect()
}

fn backend_clusters(port: &MergedPort) -> Vec<&str> {
    let mut clusters: Vec<&str> = port.backends.iter().map(|b| b.cluster.as_str()).collect();
    clusters.dedup();
    clusters
}

fn reasons(service: &MergedService) -> Vec<ConflictReason> {
    service.conflicts.iter().map(|c| c.reason).collect()
}

#[test]
fn identical_constituents_merge_without_conflict() {
    let set = cluster_set(&[
        (
            "c1",
            "net-a",
            ServiceBuilder::new()
                .port("tcp", 42, 8042)
                .exported_at(10)
                .endpoint("10.0.0.1"),
        ),
        (
            "c2",
            "net-a",
            ServiceBuilder::new()
                .port("tcp", 42, 8042)
                .exported_at(20)
                .endpoint("10.0.0.2"),
        ),
    ]);
    let service = merged(&set);
    assert!(service.conflicts.is_empty());
    assert_eq!(service.conflict_condition_reason(), "NoConflicts");
    assert_eq!(port_numbers(&service), vec![("tcp".to_owned(), 42)]);
    assert_eq!(backend_clusters(&service.ports[0]), vec!["c1", "c2"]);
    assert_eq!(
        service.ports[0].backends.get(0).expect("backend").port,
        8042,
        "target port resolved by name"
    );
}

/// (a) cluster 2 adds a port: the union is exposed and PortConflict raised.
#[test]
fn conformance_a_added_port_gives_union_and_port_conflict() {
    let set = cluster_set(&[
        (
            "c1",
            "net-a",
            ServiceBuilder::new()
                .port("tcp", 42, 42)
                .exported_at(10)
                .endpoint("10.0.0.1"),
        ),
        (
            "c2",
            "net-a",
            ServiceBuilder::new()
                .port("tcp", 42, 42)
                .port("extra", 43, 43)
                .exported_at(20)
                .endpoint("10.0.0.2"),
        ),
    ]);
    let service = merged(&set);
    assert_eq!(
        port_numbers(&service),
        vec![("tcp".to_owned(), 42), ("extra".to_owned(), 43)]
    );
    assert_eq!(reasons(&service), vec![ConflictReason::PortConflict]);
    assert_eq!(
        service.conflicts[0].message,
        "Conflicting ports. Exposing the union of ports; where two ports collide by name or by protocol and number, using the port from oldest service export in \"c1\". 1/2 clusters disagree."
    );
    let extra = service.port(Protocol::Tcp, 43).expect("43 exposed");
    assert_eq!(backend_clusters(extra), vec!["c2"]);
    assert_eq!(extra.excluded[0].reason, ExclusionReason::PortNotDeclared);
    assert_eq!(extra.excluded[0].cluster.as_str(), "c1");
}

/// (b) same port name, different number: only the oldest export's number is exposed.
#[test]
fn conformance_b_same_name_other_number_keeps_the_oldest() {
    let set = cluster_set(&[
        (
            "c1",
            "net-a",
            ServiceBuilder::new()
                .port("tcp", 4242, 4242)
                .exported_at(20)
                .endpoint("10.0.0.1"),
        ),
        (
            "c2",
            "net-a",
            ServiceBuilder::new()
                .port("tcp", 42, 42)
                .exported_at(10)
                .endpoint("10.0.0.2"),
        ),
    ]);
    let service = merged(&set);
    assert_eq!(port_numbers(&service), vec![("tcp".to_owned(), 42)]);
    assert_eq!(reasons(&service), vec![ConflictReason::PortConflict]);
    assert!(service.conflicts[0].message.contains("\"c2\""));
    assert_eq!(backend_clusters(&service.ports[0]), vec!["c2"]);
}

/// (c) c1 declares tcp:42, c2 declares tcp:4242 whose pods listen on 42:
/// port 42 goes only to c1.
#[test]
fn conformance_c_listening_pods_without_the_declared_port_get_nothing() {
    let set = cluster_set(&[
        (
            "c1",
            "net-a",
            ServiceBuilder::new()
                .port("tcp", 42, 42)
                .exported_at(10)
                .endpoint("10.0.0.1"),
        ),
        (
            "c2",
            "net-a",
            ServiceBuilder::new()
                .port("tcp", 4242, 42)
                .exported_at(20)
                .endpoint("10.0.0.2"),
        ),
    ]);
    let service = merged(&set);
    let port = service.port(Protocol::Tcp, 42).expect("42 exposed");
    assert_eq!(backend_clusters(port), vec!["c1"]);
    assert!(port.backends.iter().all(|b| b.address != ip("10.0.0.2")));
    assert_eq!(
        port.excluded,
        vec![Exclusion {
            cluster: ClusterId::new("c2").expect("id"),
            address: None,
            reason: ExclusionReason::PortNotDeclared
        }]
    );
    assert!(
        service.port(Protocol::Tcp, 4242).is_none(),
        "same name: oldest wins"
    );
}

/// (d) tcp:42 in c1 and tcp2:4242 in c2: both exposed, each only to its cluster.
#[test]
fn conformance_d_distinct_ports_each_go_to_their_declarer() {
    let set = cluster_set(&[
        (
            "c1",
            "net-a",
            ServiceBuilder::new()
                .port("tcp", 42, 42)
                .exported_at(10)
                .endpoint("10.0.0.1"),
        ),
        (
            "c2",
            "net-a",
            ServiceBuilder::new()
                .port("tcp2", 4242, 4242)
                .exported_at(20)
                .endpoint("10.0.0.2"),
        ),
    ]);
    let service = merged(&set);
    assert_eq!(reasons(&service), vec![ConflictReason::PortConflict]);
    assert_eq!(
        backend_clusters(service.port(Protocol::Tcp, 42).expect("42")),
        vec!["c1"]
    );
    assert_eq!(
        backend_clusters(service.port(Protocol::Tcp, 4242).expect("4242")),
        vec!["c2"]
    );
}

/// (e) headless against ClusterSetIP: TypeConflict, the oldest's type wins.
#[test]
fn conformance_e_type_conflict_uses_the_oldest_type() {
    let set = cluster_set(&[
        (
            "c1",
            "net-a",
            ServiceBuilder::new()
                .port("tcp", 42, 42)
                .exported_at(20)
                .endpoint("10.0.0.1"),
        ),
        (
            "c2",
            "net-a",
            ServiceBuilder::new()
                .headless()
                .port("tcp", 42, 42)
                .exported_at(10)
                .endpoint("10.0.0.2"),
        ),
    ]);
    let service = merged(&set);
    assert_eq!(service.service_type, ServiceType::Headless);
    assert_eq!(reasons(&service), vec![ConflictReason::TypeConflict]);
    assert_eq!(
        service.conflicts[0].message,
        "Conflicting type. Using \"Headless\" from oldest service export in \"c2\". 1/2 clusters disagree."
    );
    assert_eq!(
        backend_clusters(&service.ports[0]).len(),
        2,
        "both still serve"
    );
}

/// (f) the oldest export wins even when its cluster sorts last.
#[test]
fn conformance_f_oldest_wins_regardless_of_cluster_order() {
    let set = cluster_set(&[
        (
            "aaa",
            "net-a",
            ServiceBuilder::new()
                .port("tcp", 1000, 1000)
                .exported_at(30)
                .endpoint("10.0.0.1"),
        ),
        (
            "mmm",
            "net-a",
            ServiceBuilder::new()
                .port("tcp", 2000, 2000)
                .exported_at(20)
                .endpoint("10.0.0.2"),
        ),
        (
            "zzz",
            "net-a",
            ServiceBuilder::new()
                .port("tcp", 3000, 3000)
                .exported_at(10)
                .endpoint("10.0.0.3"),
        ),
    ]);
    let service = merged(&set);
    assert_eq!(port_numbers(&service), vec![("tcp".to_owned(), 3000)]);
    assert_eq!(
        service
            .constituents
            .iter()
            .map(ClusterId::as_str)
            .collect::<Vec<_>>(),
        vec!["zzz", "mmm", "aaa"]
    );
    assert!(
        service.conflicts[0]
            .message
            .contains("\"zzz\". 2/3 clusters disagree.")
    );
}

#[test]
fn equal_ages_break_ties_by_cluster_id_and_missing_timestamps_count_as_youngest() {
    let set = cluster_set(&[
        (
            "c2",
            "net-a",
            ServiceBuilder::new().port("tcp", 2, 2).exported_at(10),
        ),
        (
            "c1",
            "net-a",
            ServiceBuilder::new().port("tcp", 1, 1).exported_at(10),
        ),
        (
            "c0",
            "net-a",
            ServiceBuilder::new()
                .port("tcp", 9, 9)
                .exported_without_timestamp(),
        ),
    ]);
    let service = merged(&set);
    assert_eq!(
        service
            .constituents
            .iter()
            .map(ClusterId::as_str)
            .collect::<Vec<_>>(),
        vec!["c1", "c2", "c0"]
    );
    assert_eq!(port_numbers(&service), vec![("tcp".to_owned(), 1)]);
}

#[test]
fn same_number_under_another_name_is_served_by_both() {
    // Merged by (protocol, number): the younger export declares port 42 too,
    // so it carries 42's traffic, its target port found by its own port name.
    let set = cluster_set(&[
        (
            "c1",
            "net-a",
            ServiceBuilder::new()
                .port("tcp", 42, 42)
                .exported_at(10)
                .endpoint("10.0.0.1"),
        ),
        (
            "c2",
            "net-a",
            ServiceBuilder::new()
                .port("other", 42, 7042)
                .exported_at(20)
                .endpoint("10.0.0.2"),
        ),
    ]);
    let service = merged(&set);
    assert_eq!(port_numbers(&service), vec![("tcp".to_owned(), 42)]);
    assert_eq!(reasons(&service), vec![ConflictReason::PortConflict]);
    let port = &service.ports[0];
    assert_eq!(backend_clusters(port), vec!["c1", "c2"]);
    assert_eq!(port.backends.get(1).expect("backend").port, 7042);
}

#[test]
fn protocol_is_part_of_the_port_identity() {
    let set = cluster_set(&[
        (
            "c1",
            "net-a",
            ServiceBuilder::new()
                .port("dns", 53, 53)
                .port_with("dns-udp", Protocol::Udp, 53, 53)
                .exported_at(10)
                .endpoint("10.0.0.1"),
        ),
        (
            "c2",
            "net-a",
            ServiceBuilder::new()
                .port("dns", 53, 53)
                .exported_at(20)
                .endpoint("10.0.0.2"),
        ),
    ]);
    let service = merged(&set);
    assert_eq!(
        backend_clusters(service.port(Protocol::Tcp, 53).expect("tcp")),
        vec!["c1", "c2"]
    );
    assert_eq!(
        backend_clusters(service.port(Protocol::Udp, 53).expect("udp")),
        vec!["c1"]
    );
}

#[test]
fn every_listed_conflict_is_raised_oldest_wins() {
    let mut young = ServiceBuilder::new().port("tcp", 42, 42).exported_at(20);
    young.spec.session_affinity = SessionAffinity::ClientIp;
    young.spec.session_affinity_timeout = Some(60);
    young.spec.ip_families = vec![IpFamily::IPv6];
    young.spec.internal_traffic_policy = "Local".to_owned();
    young.spec.traffic_distribution = Some("PreferClose".to_owned());
    if let Some(export) = young.export.as_mut() {
        export.exported_labels.insert("team".into(), "b".into());
        export
            .exported_annotations
            .insert("note".into(), "x".into());
    }
    let mut old = ServiceBuilder::new().port("tcp", 42, 42).exported_at(10);
    old.spec.ip_families = vec![IpFamily::IPv4];
    let set = cluster_set(&[("c1", "net-a", old), ("c2", "net-a", young)]);
    let service = merged(&set);
    use ConflictReason::*;
    assert_eq!(
        reasons(&service),
        vec![
            SessionAffinityConflict,
            SessionAffinityConfigConflict,
            IPFamilyConflict,
            InternalTrafficPolicyConflict,
            TrafficDistributionConflict,
            LabelsConflict,
            AnnotationsConflict,
        ]
    );
    assert_eq!(service.session_affinity, SessionAffinity::None);
    assert_eq!(service.ip_families, vec![IpFamily::IPv4]);
    assert_eq!(
        service.conflict_condition_reason(),
        "SessionAffinityConflict,SessionAffinityConfigConflict,IPFamilyConflict,InternalTrafficPolicyConflict,TrafficDistributionConflict,LabelsConflict,AnnotationsConflict"
    );
    for conflict in &service.conflicts {
        assert!(
            conflict
                .message
                .contains("oldest service export in \"c1\". 1/2 clusters disagree.")
        );
    }
}

#[test]
fn unspecified_ip_families_neither_conflict_nor_filter() {
    let set = cluster_set(&[
        (
            "c1",
            "net-a",
            ServiceBuilder::new()
                .port("tcp", 42, 42)
                .exported_at(10)
                .endpoint("fd00::1"),
        ),
        (
            "c2",
            "net-a",
            ServiceBuilder::new()
                .port("tcp", 42, 42)
                .exported_at(20)
                .endpoint("10.0.0.2"),
        ),
    ]);
    let service = merged(&set);
    assert!(service.conflicts.is_empty());
    assert_eq!(service.ports[0].backends.len(), 2);
}

#[test]
fn endpoints_of_another_family_are_excluded() {
    let mut old = ServiceBuilder::new()
        .port("tcp", 42, 42)
        .exported_at(10)
        .endpoint("10.0.0.1");
    old.spec.ip_families = vec![IpFamily::IPv4];
    let set = cluster_set(&[
        ("c1", "net-a", old),
        (
            "c2",
            "net-a",
            ServiceBuilder::new()
                .port("tcp", 42, 42)
                .exported_at(20)
                .endpoint("fd00::2"),
        ),
    ]);
    let port = merged(&set).ports[0].clone();
    assert_eq!(backend_clusters(&port), vec!["c1"]);
    assert_eq!(port.excluded[0].reason, ExclusionReason::IpFamily);
    assert_eq!(port.excluded[0].address, Some(ip("fd00::2")));
}

#[test]
fn not_ready_endpoints_are_excluded() {
    let set = cluster_set(&[(
        "c1",
        "net-a",
        ServiceBuilder::new()
            .port("tcp", 42, 42)
            .exported_at(10)
            .endpoint("10.0.0.1")
            .endpoint_with("10.0.0.2", false, false, false)
            .endpoint_with("10.0.0.3", false, true, true),
    )]);
    let port = merged(&set).ports[0].clone();
    assert_eq!(port.backends.len(), 1);
    assert_eq!(
        port.backends.get(0).expect("backend").address,
        ip("10.0.0.1")
    );
    let not_ready: Vec<IpAddr> = port
        .excluded
        .iter()
        .filter(|e| e.reason == ExclusionReason::NotReady)
        .filter_map(|e| e.address)
        .collect();
    assert_eq!(not_ready, vec![ip("10.0.0.2"), ip("10.0.0.3")]);
}

#[test]
fn serving_terminating_endpoints_are_used_only_without_ready_ones() {
    let set = cluster_set(&[(
        "c1",
        "net-a",
        ServiceBuilder::new()
            .port("tcp", 42, 42)
            .exported_at(10)
            .endpoint_with("10.0.0.2", false, false, true)
            .endpoint_with("10.0.0.3", false, true, true),
    )]);
    let port = merged(&set).ports[0].clone();
    assert_eq!(port.backends.len(), 1);
    assert_eq!(
        port.backends.get(0).expect("backend").address,
        ip("10.0.0.3")
    );
    assert_eq!(
        port.backends.get(0).expect("backend").state,
        BackendState::ServingTerminating
    );
}

#[test]
fn unexported_services_are_excluded_and_not_merged_alone() {
    let set = cluster_set(&[
        (
            "c1",
            "net-a",
            ServiceBuilder::new()
                .port("tcp", 42, 42)
                .exported_at(10)
                .endpoint("10.0.0.1"),
        ),
        (
            "c2",
            "net-a",
            ServiceBuilder::new()
                .port("tcp", 42, 42)
                .endpoint("10.0.0.2"),
        ),
    ]);
    let service = merged(&set);
    assert_eq!(
        service
            .not_exported
            .iter()
            .map(ClusterId::as_str)
            .collect::<Vec<_>>(),
        vec!["c2"]
    );
    let port = &service.ports[0];
    assert_eq!(backend_clusters(port), vec!["c1"]);
    assert!(
        port.excluded
            .iter()
            .any(|e| e.cluster.as_str() == "c2" && e.reason == ExclusionReason::NotExported)
    );

    let only_local = cluster_set(&[("c2", "net-a", ServiceBuilder::new().port("tcp", 42, 42))]);
    assert!(
        merge(&only_local).services.is_empty(),
        "nothing exported, nothing merged"
    );
}

#[test]
fn external_name_constituents_are_left_out() {
    let mut external = ServiceBuilder::new().exported_at(5);
    external.spec.service_type = ServiceType::ExternalName;
    let set = cluster_set(&[
        ("c1", "net-a", external),
        (
            "c2",
            "net-a",
            ServiceBuilder::new()
                .port("tcp", 42, 42)
                .exported_at(10)
                .endpoint("10.0.0.2"),
        ),
    ]);
    let service = merged(&set);
    assert_eq!(
        service
            .constituents
            .iter()
            .map(ClusterId::as_str)
            .collect::<Vec<_>>(),
        vec!["c2"]
    );
    assert!(service.conflicts.is_empty());
}

#[test]
fn a_declared_port_without_a_slice_port_has_no_endpoints() {
    let mut service = ServiceBuilder::new().port("tcp", 42, 42).exported_at(10);
    service.endpoint_groups = vec![EndpointGroup {
        ports: vec![EndpointPort {
            name: "other".into(),
            protocol: Protocol::Tcp,
            port: 1,
        }]
        .into(),
        endpoints: vec![Endpoint::ready(ip("10.0.0.1"))].into(),
    }];
    let set = cluster_set(&[("c1", "net-a", service)]);
    let port = merged(&set).ports[0].clone();
    assert!(port.backends.is_empty());
    assert_eq!(port.excluded[0].reason, ExclusionReason::NoEndpoints);
}

#[test]
fn an_endpoint_in_two_slices_is_kept_once() {
    let mut service = ServiceBuilder::new()
        .port("tcp", 42, 42)
        .exported_at(10)
        .endpoint("10.0.0.1");
    let copy = service.endpoint_groups[0].clone();
    service.endpoint_groups.push(copy);
    let set = cluster_set(&[("c1", "net-a", service)]);
    assert_eq!(merged(&set).ports[0].backends.len(), 1);
}

#[test]
fn services_with_the_same_name_in_other_namespaces_stay_apart() {
    let mut other = ServiceBuilder::new().port("tcp", 99, 99).exported_at(1);
    other.key = ServiceKey::new("other", "cart");
    let mut set = cluster_set(&[(
        "c1",
        "net-a",
        ServiceBuilder::new().port("tcp", 42, 42).exported_at(10),
    )]);
    if let Some(cluster) = set.clusters.values_mut().next() {
        cluster.services.insert(other.key.clone(), other.into());
    }
    let all = merge(&set);
    assert_eq!(all.services.len(), 2);
    assert_eq!(port_numbers(&merged(&set)), vec![("tcp".to_owned(), 42)]);
}

#[test]
fn spec_defaults_match_kubernetes() {
    let spec = ServiceSpec::cluster_set_ip(vec![ServicePort {
        name: "tcp".into(),
        protocol: Protocol::Tcp,
        port: 1,
        app_protocol: None,
    }]);
    assert_eq!(spec.internal_traffic_policy, "Cluster");
    assert_eq!(spec.session_affinity, SessionAffinity::None);
}

#[test]
fn the_oldest_exports_access_policy_wins_and_a_different_one_conflicts() {
    use crate::model::{ALLOWED_CLUSTERS_ANNOTATION, AccessPolicy};
    let policy = |clusters: &str| {
        let annotations = [(ALLOWED_CLUSTERS_ANNOTATION.to_owned(), clusters.to_owned())].into();
        AccessPolicy::from_annotations(&annotations).expect("valid")
    };
    let exported = |seconds, access: Option<AccessPolicy>| {
        let mut service = ServiceBuilder::new()
            .port("tcp", 42, 42)
            .exported_at(seconds);
        if let Some(export) = service.export.as_mut() {
            export.access = access;
        }
        service
    };
    // Both say the same: no conflict, the policy is the service's.
    let set = cluster_set(&[
        ("c1", "net-a", exported(10, policy("c2"))),
        ("c2", "net-a", exported(20, policy("c2"))),
    ]);
    let service = merged(&set);
    assert!(service.conflicts.is_empty(), "{:?}", service.conflicts);
    assert_eq!(service.access.as_deref(), policy("c2").as_ref());
    // The oldest states none: the service is open, and the conflict says so.
    let set = cluster_set(&[
        ("c1", "net-a", exported(10, None)),
        ("c2", "net-a", exported(20, policy("c1"))),
    ]);
    let service = merged(&set);
    assert_eq!(service.access, None);
    assert_eq!(
        reasons(&service),
        vec![ConflictReason::AccessPolicyConflict]
    );
    assert_eq!(
        service.conflicts[0].message,
        "Conflicting access policy. Using \"every cluster of the cluster set\" from oldest service export in \"c1\". 1/2 clusters disagree."
    );
}

#[test]
fn the_oldest_exports_proxy_protocol_wins_and_a_different_one_conflicts() {
    let exported = |seconds, proxy_protocol: bool| {
        let mut service = ServiceBuilder::new()
            .port("tcp", 42, 42)
            .exported_at(seconds);
        if let Some(export) = service.export.as_mut() {
            export.proxy_protocol = proxy_protocol;
        }
        service
    };
    let set = cluster_set(&[
        ("c1", "net-a", exported(10, true)),
        ("c2", "net-a", exported(20, true)),
    ]);
    let service = merged(&set);
    assert!(service.conflicts.is_empty(), "{:?}", service.conflicts);
    assert!(service.proxy_protocol);
    let set = cluster_set(&[
        ("c1", "net-a", exported(10, false)),
        ("c2", "net-a", exported(20, true)),
    ]);
    let service = merged(&set);
    assert!(!service.proxy_protocol, "the oldest export's");
    assert_eq!(
        reasons(&service),
        vec![ConflictReason::ProxyProtocolConflict]
    );
    assert_eq!(
        service.conflicts[0].message,
        "Conflicting PROXY protocol. Using \"none\" from oldest service export in \"c1\". 1/2 clusters disagree."
    );
}

/// c1 and c2, each holding `shop/cart` and `shop/orders`, exported.
fn two_services_in_two_clusters() -> ClusterSet {
    let mut set = cluster_set(&[
        ("c1", "net-a", exported_http("cart", "10.0.0.1")),
        ("c2", "net-b", exported_http("cart", "10.0.0.2")),
    ]);
    for (index, cluster) in set.clusters.values_mut().enumerate() {
        let orders = exported_http("orders", &format!("10.0.1.{}", index + 1));
        cluster
            .services
            .insert(orders.key.clone(), Arc::new(orders));
    }
    set
}

#[test]
fn a_merge_reuses_every_service_whose_holders_did_not_change() {
    let mut set = two_services_in_two_clusters();
    let cart = ServiceKey::new("shop", "cart");
    let orders = ServiceKey::new("shop", "orders");
    let first = merge(&set);
    // c2's cart gains an endpoint: a new allocation, as a new translation is.
    let c2 = ClusterId::new("c2").expect("id");
    let changed = set
        .clusters
        .get_mut(&c2)
        .and_then(|c| c.services.get_mut(&cart))
        .map(Arc::make_mut)
        .expect("c2 holds cart");
    changed.endpoint_groups[0].add_endpoint(Endpoint::ready(ip("10.0.0.3")));
    let second = merge_reusing(&set, &first);
    assert!(Arc::ptr_eq(
        &first.services[&orders],
        &second.services[&orders]
    ));
    assert!(!Arc::ptr_eq(
        &first.services[&cart],
        &second.services[&cart]
    ));
    assert_eq!(second.services[&cart].ports[0].backends.len(), 3);
    assert_eq!(
        format!("{:?}", second.services),
        format!("{:?}", merge(&set).services),
        "the same as merging from scratch"
    );
    // A cluster that leaves changes every service it held.
    set.clusters.remove(&c2);
    let third = merge_reusing(&set, &second);
    assert_eq!(third.services[&orders].constituents.len(), 1);
    assert_eq!(third.services[&orders].ports[0].backends.len(), 1);
}

#[path = "changed_tests.rs"]
mod changed;
