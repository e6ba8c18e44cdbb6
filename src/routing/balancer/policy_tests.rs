//! Per-service routing policies in a pick: the fence, and which layer
//! (admin, export, `trafficDistribution`, gateway) decides. Routes built by
//! the real merge and routing, viewed from c1 (net-a) beside c2 (net-a)
//! and c3 (net-b).

use std::collections::{BTreeSet, HashMap};
use std::time::Instant;

use super::tests::{cart, chooser, fail, id, table, tally};
use super::*;
use crate::merge::merge;
use crate::model::Fence;
use crate::routing::RouteTable;
use crate::testing::{ServiceBuilder, cluster_set};

const PICKS: u32 = 2_000;

fn exported(endpoints: &[&str], policy: &RoutingPolicy) -> ServiceBuilder {
    endpoints.iter().fold(
        ServiceBuilder::new()
            .port("tcp", 42, 8042)
            .exported_at(1)
            .routing(policy.clone()),
        |service, address| service.endpoint(address),
    )
}

/// c1 and c2 on net-a, c3 on net-b, two endpoints each, every export
/// stating `policy`.
fn three(policy: &RoutingPolicy) -> RouteTable {
    table(&[
        ("c1", "net-a", exported(&["10.1.0.1", "10.1.0.2"], policy)),
        ("c2", "net-a", exported(&["10.2.0.1", "10.2.0.2"], policy)),
        ("c3", "net-b", exported(&["10.3.0.1", "10.3.0.2"], policy)),
    ])
}

fn fence(clusters: &[&str], networks: &[&str]) -> RoutingPolicy {
    RoutingPolicy {
        fence: Some(Fence {
            clusters: clusters
                .iter()
                .map(|c| ClusterId::new(c).expect("id"))
                .collect::<BTreeSet<_>>(),
            networks: networks
                .iter()
                .map(|n| NetworkId::new(n).expect("id"))
                .collect::<BTreeSet<_>>(),
        }),
        ..RoutingPolicy::default()
    }
}

fn locality(locality: Locality) -> RoutingPolicy {
    RoutingPolicy {
        locality: Some(locality),
        ..RoutingPolicy::default()
    }
}

/// The clusters picked (by address prefix), with their counts.
fn by_cluster(counts: &HashMap<String, u32>) -> HashMap<&'static str, u32> {
    let mut clusters = HashMap::new();
    for (address, n) in counts {
        let cluster = match address.get(..5) {
            Some("10.1.") => "c1",
            Some("10.2.") => "c2",
            Some("10.3.") => "c3",
            _ => "none",
        };
        *clusters.entry(cluster).or_default() += n;
    }
    clusters
}

#[test]
fn a_fenced_service_never_leaves_its_fence_even_with_every_backend_inside_ejected() {
    let table = three(&fence(&[], &["net-b"]));
    let chooser = chooser(Balancer::P2c, Locality::Cluster);
    let now = Instant::now();
    let picked = by_cluster(&tally(&chooser, &table, &[], now, PICKS));
    assert_eq!(
        picked.get("c3"),
        Some(&PICKS),
        "only net-b serves: {picked:?}"
    );

    // Both of c3's backends ejected: panic mode picks among them, never
    // a backend outside the fence.
    for address in ["10.3.0.1", "10.3.0.2"] {
        fail(&chooser, &id("net-b", address), 5, now);
    }
    let picked = by_cluster(&tally(&chooser, &table, &[], now, PICKS));
    assert_eq!(
        picked.get("c3"),
        Some(&PICKS),
        "panic stays inside: {picked:?}"
    );

    // Tried both: no pick at all, and the reason names the fence.
    let tried = [id("net-b", "10.3.0.1"), id("net-b", "10.3.0.2")];
    let picked = by_cluster(&tally(&chooser, &table, &tried, now, 10));
    assert_eq!(picked.get("none"), Some(&10));
    let (service, route) = cart(&table);
    assert_eq!(
        chooser.fenced_out(service, route),
        None,
        "backends are inside"
    );
}

#[test]
fn a_fence_with_nothing_inside_says_why() {
    let policy = fence(&["c9"], &["net-z"]);
    let table = three(&policy);
    let chooser = chooser(Balancer::P2c, Locality::Cluster);
    let picked = by_cluster(&tally(&chooser, &table, &[], Instant::now(), 10));
    assert_eq!(picked.get("none"), Some(&10));
    let (service, route) = cart(&table);
    let why = chooser.fenced_out(service, route).expect("fenced out");
    assert_eq!(
        why,
        "shop/cart is fenced to clusters c9; networks net-z (its exporter's policy); none of port 42's backends is inside: c1 on net-a, c2 on net-a, c3 on net-b"
    );
    let backend = route.backends.iter().next().expect("a backend");
    assert!(!chooser.fence_admits(service, backend));
}

#[test]
fn a_network_fence_admits_only_attested_networks() {
    let policy = fence(&[], &["net-a"]);
    let mut set = cluster_set(&[
        ("c1", "net-a", exported(&["10.1.0.1"], &policy)),
        ("c2", "net-a", exported(&["10.2.0.1"], &policy)),
    ]);
    // c2 only says it is on net-a; no network map puts it there.
    for cluster in set.clusters.values_mut() {
        if cluster.id.as_str() == "c2" {
            cluster.network_attested = false;
        }
    }
    let table = RouteTable::build(&set, &merge(&set), "c1").expect("routes");
    let chooser = chooser(Balancer::P2c, Locality::None);
    let picked = by_cluster(&tally(&chooser, &table, &[], Instant::now(), PICKS));
    assert_eq!(picked.get("c1"), Some(&PICKS), "{picked:?}");
    // Named by cluster, it is inside whatever it says.
    let table_by_cluster = {
        let policy = fence(&["c2"], &["net-a"]);
        let mut set = cluster_set(&[
            ("c1", "net-a", exported(&["10.1.0.1"], &policy)),
            ("c2", "net-a", exported(&["10.2.0.1"], &policy)),
        ]);
        for cluster in set.clusters.values_mut() {
            cluster.network_attested = cluster.id.as_str() != "c2";
        }
        RouteTable::build(&set, &merge(&set), "c1").expect("routes")
    };
    let picked = by_cluster(&tally(
        &chooser,
        &table_by_cluster,
        &[],
        Instant::now(),
        PICKS,
    ));
    assert!(picked.get("c2").is_some_and(|n| *n > 0), "{picked:?}");
}

#[test]
fn the_admins_layer_overrides_the_exporters_field_by_field() {
    // The exporter fences to net-a and spreads evenly; the admin asks for
    // this cluster first and lifts the fence to net-b only.
    let exporter = RoutingPolicy {
        locality: Some(Locality::None),
        ..fence(&[], &["net-a"])
    };
    let table = three(&exporter);
    let now = Instant::now();
    let plain = chooser(Balancer::P2c, Locality::None);
    let picked = by_cluster(&tally(&plain, &table, &[], now, PICKS));
    assert_eq!(picked.get("c3"), None, "the exporter's fence: {picked:?}");
    assert!(
        picked.get("c2").is_some_and(|n| *n > PICKS / 3),
        "{picked:?}"
    );

    let key = ServiceKey::new("shop", "cart");
    let local = chooser(Balancer::P2c, Locality::None)
        .with_admin_policies([(key.clone(), locality(Locality::Cluster))]);
    let picked = by_cluster(&tally(&local, &table, &[], now, PICKS));
    assert_eq!(
        picked.get("c1"),
        Some(&PICKS),
        "the admin's locality: {picked:?}"
    );

    let elsewhere =
        chooser(Balancer::P2c, Locality::None).with_admin_policies([(key, fence(&[], &["net-b"]))]);
    let picked = by_cluster(&tally(&elsewhere, &table, &[], now, PICKS));
    assert_eq!(
        picked.get("c3"),
        Some(&PICKS),
        "the admin's fence: {picked:?}"
    );
    let (service, route) = cart(&table);
    let report = elsewhere.tier_shares(service, route, now);
    assert_eq!(report.locality, Locality::None);
    assert_eq!(report.locality_from, PolicySource::Export);
    assert_eq!(report.fence.as_deref(), Some("networks net-b"));
    assert_eq!(report.fence_from, Some(PolicySource::Admin));
    assert_eq!(report.outside_fence, 4);
    assert_eq!(report.tiers[0].backends, 2, "inside the fence only");
}

#[test]
fn traffic_distribution_asks_for_the_callers_cluster_unless_the_export_says_otherwise() {
    let now = Instant::now();
    let close = |policy: &RoutingPolicy| {
        let service =
            |endpoints: &[&str]| exported(endpoints, policy).traffic_distribution("PreferClose");
        table(&[
            ("c1", "net-a", service(&["10.1.0.1"])),
            ("c2", "net-a", service(&["10.2.0.1"])),
            ("c3", "net-b", service(&["10.3.0.1"])),
        ])
    };
    let gateway_says_none = chooser(Balancer::P2c, Locality::None);
    let table = close(&RoutingPolicy::default());
    let picked = by_cluster(&tally(&gateway_says_none, &table, &[], now, PICKS));
    assert_eq!(picked.get("c1"), Some(&PICKS), "{picked:?}");
    let (service, route) = cart(&table);
    assert_eq!(
        gateway_says_none
            .tier_shares(service, route, now)
            .locality_from,
        PolicySource::TrafficDistribution
    );

    let table = close(&locality(Locality::None));
    let picked = by_cluster(&tally(&gateway_says_none, &table, &[], now, PICKS));
    assert_eq!(
        picked.len(),
        3,
        "the export's annotation spreads: {picked:?}"
    );
}
