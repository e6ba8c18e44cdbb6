//! Every record kind and every negative answer, from the fixture set seen
//! from east-1 (see `dns/fixture.rs`).

use super::*;
use crate::dns::fixture::{name, table, zone};
use crate::model::PodRef;

fn ask(qname: &str, qtype: RecordType) -> Answer {
    answer(&table(), &zone(), &name(qname), qtype)
}

/// The answer records in zone-file notation.
fn records(answer: &Answer) -> Vec<String> {
    answer.answers.iter().map(ToString::to_string).collect()
}

fn assert_nxdomain(qname: &str, qtype: RecordType) {
    let answer = ask(qname, qtype);
    assert_eq!(answer.rcode, ResponseCode::NXDomain, "{qname} {qtype}");
    assert!(answer.authoritative, "{qname}");
    assert!(answer.answers.is_empty(), "{qname}");
    assert_soa(&answer, qname);
}

fn assert_nodata(qname: &str, qtype: RecordType) {
    let answer = ask(qname, qtype);
    assert!(answer.is_nodata(), "{qname} {qtype}: {answer:?}");
    assert!(answer.authoritative, "{qname}");
    assert_soa(&answer, qname);
}

/// A negative answer carries the zone's SOA with the negative TTL.
fn assert_soa(answer: &Answer, qname: &str) {
    assert_eq!(
        answer
            .authorities
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>(),
        vec![
            "clusterset.local. 5 IN SOA ns.dns.clusterset.local. hostmaster.clusterset.local. 1 7200 1800 86400 5"
        ],
        "{qname}"
    );
}

#[test]
fn a_cluster_set_ip_service_answers_this_clusters_service_import_ips() {
    let a = ask("cart.shop.svc.clusterset.local.", RecordType::A);
    assert_eq!(a.rcode, ResponseCode::NoError);
    assert!(a.authoritative);
    assert!(a.authorities.is_empty());
    assert_eq!(
        records(&a),
        vec!["cart.shop.svc.clusterset.local. 5 IN A 240.0.0.10"]
    );
    let aaaa = ask("cart.shop.svc.clusterset.local.", RecordType::AAAA);
    assert_eq!(
        records(&aaaa),
        vec!["cart.shop.svc.clusterset.local. 5 IN AAAA fd00::10"]
    );
    let any = ask("cart.shop.svc.clusterset.local.", RecordType::ANY);
    assert_eq!(any.answers.len(), 3, "A, AAAA and the bare name's SRV");
}

/// The bare name's SRV, as CoreDNS answers it and the mcs-api conformance
/// suite asks: one record per port number that can carry traffic, named
/// or not, with the service as its target.
#[test]
fn the_bare_service_name_has_an_srv_record_per_port() {
    let srv = ask("cart.shop.svc.clusterset.local.", RecordType::SRV);
    assert_eq!(
        records(&srv),
        vec!["cart.shop.svc.clusterset.local. 5 IN SRV 0 100 80 cart.shop.svc.clusterset.local."]
    );
    // Without a ClusterSetIP here, the target would not resolve: NODATA.
    let checkout = ask("checkout.shop.svc.clusterset.local.", RecordType::SRV);
    assert!(checkout.is_nodata(), "{checkout:?}");
}

#[test]
fn the_bare_headless_name_has_an_srv_record_per_ready_pod() {
    let srv = ask("postgres.db.svc.clusterset.local.", RecordType::SRV);
    assert_eq!(
        records(&srv),
        vec![
            "postgres.db.svc.clusterset.local. 5 IN SRV 0 33 5432 10-1-0-52.east-1.postgres.db.svc.clusterset.local.",
            "postgres.db.svc.clusterset.local. 5 IN SRV 0 33 5432 postgres-0.east-1.postgres.db.svc.clusterset.local.",
            "postgres.db.svc.clusterset.local. 5 IN SRV 0 33 5432 postgres-1.e2.prod.postgres.db.svc.clusterset.local.",
        ]
    );
}

/// mcs-api DNS specification §2.4.1: a headless service without a ready
/// endpoint is NXDOMAIN, and so is every name under it.
#[test]
fn a_headless_service_without_a_ready_pod_anywhere_is_nxdomain() {
    for qtype in [RecordType::A, RecordType::AAAA, RecordType::SRV] {
        assert_nxdomain("standby.db.svc.clusterset.local.", qtype);
    }
    assert_nxdomain(
        "_postgres._tcp.standby.db.svc.clusterset.local.",
        RecordType::SRV,
    );
    assert_nxdomain(
        "standby-0.e2.prod.standby.db.svc.clusterset.local.",
        RecordType::A,
    );
}

#[test]
fn the_schema_version_is_a_txt_record() {
    let txt = ask("dns-version.clusterset.local.", RecordType::TXT);
    assert_eq!(
        records(&txt),
        vec!["dns-version.clusterset.local. 5 IN TXT 1.0.0"]
    );
    assert_nodata("dns-version.clusterset.local.", RecordType::A);
    assert_nxdomain("x.dns-version.clusterset.local.", RecordType::TXT);
}

#[test]
fn names_match_case_insensitively_and_keep_the_case_asked() {
    let answer = ask("CART.Shop.SVC.clusterSET.local.", RecordType::A);
    assert_eq!(
        records(&answer),
        vec!["CART.Shop.SVC.clusterSET.local. 5 IN A 240.0.0.10"]
    );
    // Without the root label (as a name typed by hand): the same name.
    let relative = Name::from_ascii("cart.shop.svc.clusterset.local").expect("name");
    let answer = super::answer(&table(), &zone(), &relative, RecordType::A);
    assert_eq!(answer.answers.len(), 1);
}

#[test]
fn a_service_without_a_cluster_set_ip_here_exists_without_addresses() {
    // checkout is exported, but east-1 holds no ServiceImport IPs for it.
    assert_nodata("checkout.shop.svc.clusterset.local.", RecordType::A);
    assert_nodata("checkout.shop.svc.clusterset.local.", RecordType::AAAA);
}

#[test]
fn srv_records_name_the_service_for_every_port_this_cluster_can_route_to() {
    let srv = ask(
        "_http._tcp.cart.shop.svc.clusterset.local.",
        RecordType::SRV,
    );
    assert_eq!(
        records(&srv),
        vec![
            "_http._tcp.cart.shop.svc.clusterset.local. 5 IN SRV 0 100 80 cart.shop.svc.clusterset.local."
        ]
    );
    // A port only west-1 declares is reached through the tunnel: it is answered.
    let metrics = ask(
        "_metrics._tcp.checkout.shop.svc.clusterset.local.",
        RecordType::SRV,
    );
    assert_eq!(
        records(&metrics),
        vec![
            "_metrics._tcp.checkout.shop.svc.clusterset.local. 5 IN SRV 0 100 9100 checkout.shop.svc.clusterset.local."
        ]
    );
}

#[test]
fn a_port_conflict_service_has_no_srv_for_a_port_without_backends() {
    // debug is declared only by e2.prod, whose one endpoint is not ready.
    assert_nxdomain(
        "_debug._tcp.checkout.shop.svc.clusterset.local.",
        RecordType::SRV,
    );
    // The merged ports all still exist for the ports that have backends.
    let http = ask(
        "_http._tcp.checkout.shop.svc.clusterset.local.",
        RecordType::SRV,
    );
    assert_eq!(http.answers.len(), 1);
    // Unknown port names and protocols do not exist either.
    assert_nxdomain(
        "_grpc._tcp.checkout.shop.svc.clusterset.local.",
        RecordType::SRV,
    );
    assert_nxdomain(
        "_http._udp.checkout.shop.svc.clusterset.local.",
        RecordType::SRV,
    );
    assert_nxdomain("_udp.checkout.shop.svc.clusterset.local.", RecordType::SRV);
}

#[test]
fn existing_names_asked_for_another_type_are_nodata() {
    assert_nodata("cart.shop.svc.clusterset.local.", RecordType::TXT);
    assert_nodata("cart.shop.svc.clusterset.local.", RecordType::MX);
    assert_nodata("_http._tcp.cart.shop.svc.clusterset.local.", RecordType::A);
    // Empty non-terminals exist: the zone's svc label, a namespace, a protocol.
    assert_nodata("svc.clusterset.local.", RecordType::A);
    assert_nodata("shop.svc.clusterset.local.", RecordType::A);
    assert_nodata("_tcp.cart.shop.svc.clusterset.local.", RecordType::SRV);
    assert_nodata("clusterset.local.", RecordType::A);
    assert_nodata("clusterset.local.", RecordType::NS);
}

#[test]
fn the_apex_answers_its_soa() {
    let answer = ask("ClusterSet.Local.", RecordType::SOA);
    assert_eq!(
        records(&answer),
        vec![
            "ClusterSet.Local. 5 IN SOA ns.dns.clusterset.local. hostmaster.clusterset.local. 1 7200 1800 86400 5"
        ]
    );
    assert!(answer.authorities.is_empty());
}

#[test]
fn names_the_zone_does_not_hold_are_nxdomain() {
    // admin is a Service in east-1, but no cluster exports it.
    assert_nxdomain("admin.shop.svc.clusterset.local.", RecordType::A);
    assert_nxdomain("admin.shop.svc.clusterset.local.", RecordType::SRV);
    // Unknown namespace, unknown service, names of no known shape.
    assert_nxdomain("cart.nowhere.svc.clusterset.local.", RecordType::A);
    assert_nxdomain("nowhere.svc.clusterset.local.", RecordType::A);
    assert_nxdomain("ghost.shop.svc.clusterset.local.", RecordType::AAAA);
    assert_nxdomain("cart.shop.pod.clusterset.local.", RecordType::A);
    assert_nxdomain("www.clusterset.local.", RecordType::A);
    // A ClusterSetIP service has no per-pod names.
    assert_nxdomain("x.east-1.cart.shop.svc.clusterset.local.", RecordType::A);
}

#[test]
fn names_outside_the_zone_are_refused() {
    for qname in [
        "example.com.",
        "cart.shop.svc.cluster.local.",
        "local.",
        ".",
    ] {
        let answer = ask(qname, RecordType::A);
        assert_eq!(answer.rcode, ResponseCode::Refused, "{qname}");
        assert!(!answer.authoritative, "{qname}");
        assert!(answer.answers.is_empty() && answer.authorities.is_empty());
    }
    let transfer = ask("clusterset.local.", RecordType::AXFR);
    assert_eq!(transfer.rcode, ResponseCode::Refused);
}

#[test]
fn a_headless_service_answers_its_ready_pods_on_this_network() {
    let a = ask("postgres.db.svc.clusterset.local.", RecordType::A);
    // east-1 and e2.prod are on net-a; west-1's pods and the not-ready one are left out.
    assert_eq!(
        records(&a),
        vec![
            "postgres.db.svc.clusterset.local. 5 IN A 10.1.0.50",
            "postgres.db.svc.clusterset.local. 5 IN A 10.1.0.52",
            "postgres.db.svc.clusterset.local. 5 IN A 10.1.5.51",
        ]
    );
    let aaaa = ask("postgres.db.svc.clusterset.local.", RecordType::AAAA);
    assert_eq!(
        records(&aaaa),
        vec!["postgres.db.svc.clusterset.local. 5 IN AAAA fd00::50"]
    );
}

#[test]
fn a_headless_service_with_only_remote_pods_is_nodata_not_a_wrong_address() {
    assert_nodata("replica.db.svc.clusterset.local.", RecordType::A);
    assert_nodata(
        "replica-0.west-1.replica.db.svc.clusterset.local.",
        RecordType::A,
    );
    assert_nodata(
        "_postgres._tcp.replica.db.svc.clusterset.local.",
        RecordType::SRV,
    );
    assert_nodata(
        "postgres-2.west-1.postgres.db.svc.clusterset.local.",
        RecordType::A,
    );
}

#[test]
fn per_pod_names_answer_that_pod_when_it_is_on_this_network() {
    let pod = ask(
        "postgres-0.east-1.postgres.db.svc.clusterset.local.",
        RecordType::A,
    );
    assert_eq!(
        records(&pod),
        vec!["postgres-0.east-1.postgres.db.svc.clusterset.local. 5 IN A 10.1.0.50"]
    );
    let v6 = ask(
        "postgres-0.east-1.postgres.db.svc.clusterset.local.",
        RecordType::AAAA,
    );
    assert_eq!(v6.answers.len(), 1);
    // A cluster id with dots: everything between hostname and service.
    let dotted = ask(
        "Postgres-1.E2.Prod.postgres.db.svc.clusterset.local.",
        RecordType::A,
    );
    assert_eq!(
        records(&dotted),
        vec!["Postgres-1.E2.Prod.postgres.db.svc.clusterset.local. 5 IN A 10.1.5.51"]
    );
    // An endpoint without a hostname is named by its address.
    let unnamed = ask(
        "10-1-0-52.east-1.postgres.db.svc.clusterset.local.",
        RecordType::A,
    );
    assert_eq!(unnamed.answers.len(), 1);
    // A cluster of the set is an empty non-terminal; a pod in the wrong
    // cluster, a not-ready pod and an unknown cluster do not exist.
    assert_nodata("east-1.postgres.db.svc.clusterset.local.", RecordType::A);
    assert_nodata("e2.prod.postgres.db.svc.clusterset.local.", RecordType::A);
    assert_nxdomain(
        "postgres-0.e2.prod.postgres.db.svc.clusterset.local.",
        RecordType::A,
    );
    assert_nxdomain(
        "postgres-9.east-1.postgres.db.svc.clusterset.local.",
        RecordType::A,
    );
    assert_nxdomain("north.postgres.db.svc.clusterset.local.", RecordType::A);
}

#[test]
fn headless_srv_names_each_local_pod() {
    let srv = ask(
        "_postgres._tcp.postgres.db.svc.clusterset.local.",
        RecordType::SRV,
    );
    assert_eq!(
        records(&srv),
        vec![
            "_postgres._tcp.postgres.db.svc.clusterset.local. 5 IN SRV 0 33 5432 10-1-0-52.east-1.postgres.db.svc.clusterset.local.",
            "_postgres._tcp.postgres.db.svc.clusterset.local. 5 IN SRV 0 33 5432 postgres-0.east-1.postgres.db.svc.clusterset.local.",
            "_postgres._tcp.postgres.db.svc.clusterset.local. 5 IN SRV 0 33 5432 postgres-1.e2.prod.postgres.db.svc.clusterset.local.",
        ]
    );
}

#[test]
fn explanations_name_the_service_port_and_backends() {
    let (answer, why) = explain(
        &table(),
        &zone(),
        &name("postgres.db.svc.clusterset.local."),
        RecordType::A,
    );
    assert_eq!(answer.answers.len(), 3);
    assert_eq!(why.name_kind, "service");
    assert_eq!(why.service.as_deref(), Some("db/postgres"));
    assert_eq!(why.service_type, Some(ServiceType::Headless));
    let remote: Vec<&ExplainedBackend> = why.backends.iter().filter(|b| !b.answered).collect();
    assert_eq!(remote.len(), 2, "{why:?}");
    assert!(
        remote
            .iter()
            .all(|b| b.cluster == "west-1" && b.path == "tunnel")
    );
    let (_, why) = explain(
        &table(),
        &zone(),
        &name("_debug._tcp.checkout.shop.svc.clusterset.local."),
        RecordType::SRV,
    );
    assert_eq!(why.port.as_deref(), Some("debug 9200/TCP"));
    assert!(
        why.notes.iter().any(|n| n.contains("no backend")),
        "{why:?}"
    );
    let (_, why) = explain(&table(), &zone(), &name("example.com."), RecordType::A);
    assert_eq!(why.name_kind, "outside-zone");
}

#[test]
fn answers_follow_the_route_table_they_are_given() {
    // The same question against a table without the service: NXDOMAIN.
    let mut set = crate::dns::fixture::set();
    for cluster in set.clusters.values_mut() {
        cluster.services = cluster
            .services
            .iter()
            .filter(|(key, _)| key.name != "cart")
            .map(|(key, service)| (key.clone(), service.clone()))
            .collect();
    }
    let table = RouteTable::build(&set, &crate::merge::merge(&set), "east-1").expect("table");
    let answer = super::answer(
        &table,
        &zone(),
        &name("cart.shop.svc.clusterset.local."),
        RecordType::A,
    );
    assert_eq!(answer.rcode, ResponseCode::NXDomain);
}

#[test]
fn the_ttl_is_the_zones() {
    let zone = Zone::new("clusterset.local", 30, 2).expect("zone");
    let answer = super::answer(
        &table(),
        &zone,
        &name("cart.shop.svc.clusterset.local."),
        RecordType::A,
    );
    assert_eq!(answer.answers[0].ttl, 30);
    let negative = super::answer(
        &table(),
        &zone,
        &name("ghost.shop.svc.clusterset.local."),
        RecordType::A,
    );
    assert_eq!(negative.authorities[0].ttl, 2);
}

/// The fixture's table with an address on this side for one of west-1's
/// two postgres pods, as a per-pod derived Service would give it.
fn table_with_remote_address() -> RouteTable {
    let mut table = table();
    let pod = PodRef {
        cluster: crate::model::ClusterId::new("west-1").expect("a cluster id"),
        label: "postgres-2".to_owned(),
    };
    let addresses = std::collections::BTreeMap::from([(
        (crate::model::ServiceKey::new("db", "postgres"), pod),
        vec!["240.0.1.2".parse::<IpAddr>().expect("an address")],
    )]);
    table.set_pod_addresses(&addresses);
    table
}

#[test]
fn a_remote_pod_is_answered_with_its_address_on_this_side() {
    let table = table_with_remote_address();
    let ask = |qname: &str, qtype| answer(&table, &zone(), &name(qname), qtype);
    let a = ask("postgres.db.svc.clusterset.local.", RecordType::A);
    assert_eq!(
        records(&a),
        vec![
            "postgres.db.svc.clusterset.local. 5 IN A 10.1.0.50",
            "postgres.db.svc.clusterset.local. 5 IN A 10.1.0.52",
            "postgres.db.svc.clusterset.local. 5 IN A 10.1.5.51",
            "postgres.db.svc.clusterset.local. 5 IN A 240.0.1.2",
        ],
        "never west-1's own 10.2.0.50"
    );
    let pod = ask(
        "postgres-2.west-1.postgres.db.svc.clusterset.local.",
        RecordType::A,
    );
    assert_eq!(
        records(&pod),
        vec!["postgres-2.west-1.postgres.db.svc.clusterset.local. 5 IN A 240.0.1.2"]
    );
    // The other remote pod has no address here: it exists, unanswered.
    let other = ask(
        "postgres-3.west-1.postgres.db.svc.clusterset.local.",
        RecordType::A,
    );
    assert!(other.is_nodata(), "{other:?}");
    let srv = ask(
        "_postgres._tcp.postgres.db.svc.clusterset.local.",
        RecordType::SRV,
    );
    let targets: Vec<String> = srv.answers.iter().map(ToString::to_string).collect();
    assert_eq!(targets.len(), 4, "{targets:?}");
    assert!(
        targets
            .iter()
            .any(|t| t
                .ends_with("SRV 0 25 5432 postgres-2.west-1.postgres.db.svc.clusterset.local.")),
        "{targets:?}"
    );
    let (_, why) = explain(
        &table,
        &zone(),
        &name("postgres.db.svc.clusterset.local."),
        RecordType::A,
    );
    let through: Vec<&ExplainedBackend> = why
        .backends
        .iter()
        .filter(|b| !b.answered_with.is_empty())
        .collect();
    assert_eq!(through.len(), 1, "{why:?}");
    assert_eq!(through[0].pod, "postgres-2");
    let unanswered: Vec<&ExplainedBackend> = why.backends.iter().filter(|b| !b.answered).collect();
    assert_eq!(unanswered.len(), 1, "{why:?}");
    assert!(
        unanswered[0]
            .reason
            .is_some_and(|r| r.contains("maxHeadlessEndpoints")),
        "{why:?}"
    );
}

#[test]
fn pod_addresses_of_a_cluster_set_ip_service_are_ignored() {
    let mut table = table();
    let addresses = std::collections::BTreeMap::from([(
        (
            crate::model::ServiceKey::new("shop", "cart"),
            PodRef {
                cluster: crate::model::ClusterId::new("west-1").expect("a cluster id"),
                label: "10-2-0-1".to_owned(),
            },
        ),
        vec!["240.0.1.9".parse::<IpAddr>().expect("an address")],
    )]);
    table.set_pod_addresses(&addresses);
    assert!(
        table
            .lookup_pod_vip("240.0.1.9".parse().expect("an address"), Protocol::Tcp, 80)
            .is_none()
    );
}
