//! Unit tests of the chooser, on routes built by the real merge and routing.

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use super::*;
use crate::merge::merge;
use crate::model::SessionAffinity;
use crate::routing::RouteTable;
use crate::testing::{ServiceBuilder, cluster_set, ip};

const SECOND: Duration = Duration::from_secs(1);

pub(super) fn rng() -> fastrand::Rng {
    fastrand::Rng::with_seed(7)
}

pub(super) fn table(clusters: &[(&str, &str, ServiceBuilder)]) -> RouteTable {
    let set = cluster_set(clusters);
    RouteTable::build(&set, &merge(&set), "c1").expect("c1 is in the set")
}

pub(super) fn service_with(endpoints: &[&str]) -> ServiceBuilder {
    endpoints.iter().fold(
        ServiceBuilder::new().port("tcp", 42, 8042).exported_at(1),
        |service, address| service.endpoint(address),
    )
}

/// One cluster, c1 on net-a, with these endpoints.
fn one_cluster(endpoints: &[&str]) -> RouteTable {
    table(&[("c1", "net-a", service_with(endpoints))])
}

/// c1 and c2 on net-a, c3 on net-b; one endpoint each, viewed from c1.
fn three_clusters() -> RouteTable {
    table(&[
        ("c1", "net-a", service_with(&["10.1.0.1"])),
        ("c2", "net-a", service_with(&["10.1.0.2"])),
        ("c3", "net-b", service_with(&["10.1.0.3"])),
    ])
}

pub(super) fn cart(table: &RouteTable) -> (&ServiceRoutes, &PortRoute) {
    let service = table.service("shop", "cart").expect("shop/cart is routed");
    (service, service.port(Protocol::Tcp, 42).expect("port 42"))
}

pub(super) fn chooser(balancer: Balancer, locality: Locality) -> Chooser {
    Chooser::new(
        balancer,
        locality,
        ClusterId::new("c1").expect("cluster id"),
        NetworkId::new("net-a").expect("network id"),
        OutlierPolicy::default(),
    )
}

pub(super) fn id(network: &str, address: &str) -> BackendId {
    BackendId {
        network: NetworkId::new(network).expect("network id"),
        address: SocketAddr::new(ip(address), 8042),
    }
}

pub(super) fn client(n: u32) -> IpAddr {
    IpAddr::from(std::net::Ipv4Addr::from(0x0a63_0000 + n))
}

/// The address picked, or "-" for none.
pub(super) fn pick_at(
    chooser: &Chooser,
    table: &RouteTable,
    from: IpAddr,
    tried: &[BackendId],
    now: Instant,
    rng: &mut fastrand::Rng,
) -> String {
    let (service, route) = cart(table);
    chooser
        .pick(service, route, from, tried, now, rng)
        .map_or_else(
            || "-".to_owned(),
            |routed| routed.backend.address.to_string(),
        )
}

/// How often each address is picked in `n` picks.
pub(super) fn tally(
    chooser: &Chooser,
    table: &RouteTable,
    tried: &[BackendId],
    now: Instant,
    n: u32,
) -> HashMap<String, u32> {
    let mut rng = rng();
    let mut counts = HashMap::new();
    for i in 0..n {
        let picked = pick_at(chooser, table, client(i), tried, now, &mut rng);
        *counts.entry(picked).or_default() += 1;
    }
    counts
}

pub(super) fn fail(chooser: &Chooser, backend: &BackendId, times: u32, now: Instant) {
    for _ in 0..times {
        chooser.report_failure(backend, now);
    }
}

/// The time left of `backend`'s ejection, if it is ejected.
fn ejection_left(chooser: &Chooser, backend: &BackendId, now: Instant) -> Option<Duration> {
    chooser
        .ejected(now)
        .into_iter()
        .find(|(ejected, _)| ejected == backend)
        .map(|(_, left)| left)
}

pub(super) fn sticky(mut service: ServiceBuilder, timeout: Option<u32>) -> ServiceBuilder {
    service.spec.session_affinity = SessionAffinity::ClientIp;
    service.spec.session_affinity_timeout = timeout;
    service
}

#[test]
fn backend_ids_tell_networks_apart() {
    let table = table(&[
        ("c1", "net-a", service_with(&["10.1.0.1"])),
        ("c3", "net-b", service_with(&["10.1.0.1"])),
    ]);
    let (_, route) = cart(&table);
    let ids: Vec<BackendId> = route.backends.iter().map(BackendId::of).collect();
    assert_eq!(ids, vec![id("net-a", "10.1.0.1"), id("net-b", "10.1.0.1")]);
    assert!(ids[0].matches(route.backends.get(0).expect("backend")));
    assert!(!ids[0].matches(route.backends.get(1).expect("backend")));
    assert_eq!(ids[1].to_string(), "net-b/10.1.0.1:8042");
}

#[test]
fn outlier_policy_defaults_and_backoff() {
    let policy = OutlierPolicy::default();
    assert_eq!(policy.consecutive_failures, 3);
    assert_eq!(policy.base_ejection, 5 * SECOND);
    assert_eq!(policy.max_ejection, 300 * SECOND);
    let times: Vec<u64> = (1..=8).map(|n| policy.ejection_time(n).as_secs()).collect();
    assert_eq!(times, vec![5, 10, 20, 40, 80, 160, 300, 300]);
    assert_eq!(policy.ejection_time(u32::MAX), 300 * SECOND);
}

#[test]
fn chooser_is_shared_across_threads() {
    fn shared<T: Send + Sync>() {}
    shared::<Chooser>();
    shared::<ActiveGuard>();
}

#[test]
fn no_backends_means_no_pick() {
    let table = one_cluster(&[]);
    let chooser = chooser(Balancer::P2c, Locality::None);
    assert_eq!(
        pick_at(&chooser, &table, client(1), &[], Instant::now(), &mut rng()),
        "-"
    );
}

#[test]
fn p2c_avoids_the_loaded_backend() {
    let table = one_cluster(&["10.0.0.1", "10.0.0.2", "10.0.0.3"]);
    let chooser = chooser(Balancer::P2c, Locality::None);
    let loaded = id("net-a", "10.0.0.1");
    let _guards: Vec<ActiveGuard> = (0..10).map(|_| chooser.start(&loaded)).collect();
    let counts = tally(&chooser, &table, &[], Instant::now(), 3000);
    // Two distinct candidates are compared, so the loaded one always meets
    // a less loaded rival.
    assert_eq!(counts.get("10.0.0.1"), None, "{counts:?}");
    for other in ["10.0.0.2", "10.0.0.3"] {
        let n = counts.get(other).copied().unwrap_or_default();
        assert!((1300..=1700).contains(&n), "{other}: {counts:?}");
    }
}

#[test]
fn p2c_prefers_the_less_loaded_of_two() {
    let table = one_cluster(&["10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4"]);
    let chooser = chooser(Balancer::P2c, Locality::None);
    // 10.0.0.1 holds 10 connections, 10.0.0.2 holds 5, the others none.
    let _busy: Vec<ActiveGuard> = (0..10)
        .map(|_| chooser.start(&id("net-a", "10.0.0.1")))
        .chain((0..5).map(|_| chooser.start(&id("net-a", "10.0.0.2"))))
        .collect();
    let counts = tally(&chooser, &table, &[], Instant::now(), 4000);
    let n = |address: &str| counts.get(address).copied().unwrap_or_default();
    assert_eq!(n("10.0.0.1"), 0, "{counts:?}");
    // 10.0.0.2 wins only against 10.0.0.1: 2 of the 12 ordered pairs.
    assert!((450..=900).contains(&n("10.0.0.2")), "{counts:?}");
    // 10.0.0.3 and 10.0.0.4 win 5 of the 12 pairs each.
    assert!(n("10.0.0.3") > 2 * n("10.0.0.2"), "{counts:?}");
    assert!(n("10.0.0.4") > 2 * n("10.0.0.2"), "{counts:?}");
}

#[test]
fn p2c_splits_equal_load_evenly() {
    let table = one_cluster(&["10.0.0.1", "10.0.0.2", "10.0.0.3"]);
    let chooser = chooser(Balancer::P2c, Locality::None);
    let counts = tally(&chooser, &table, &[], Instant::now(), 3000);
    assert_eq!(counts.len(), 3, "{counts:?}");
    for n in counts.values() {
        assert!((850..=1150).contains(n), "{counts:?}");
    }
}

#[test]
fn active_guards_count_until_dropped() {
    let chooser = chooser(Balancer::P2c, Locality::None);
    let backend = id("net-a", "10.0.0.1");
    assert_eq!(chooser.active(&backend), 0);
    let first = chooser.start(&backend);
    let second = chooser.start(&backend);
    assert_eq!(chooser.active(&backend), 2);
    drop(first);
    assert_eq!(chooser.active(&backend), 1);
    drop(second);
    assert_eq!(chooser.active(&backend), 0);
    // Same address on another network: another backend.
    let _other = chooser.start(&id("net-b", "10.0.0.1"));
    assert_eq!(chooser.active(&backend), 0);
}

#[test]
fn round_robin_cycles_through_every_backend_in_order() {
    let table = one_cluster(&["10.0.0.1", "10.0.0.2", "10.0.0.3"]);
    let chooser = chooser(Balancer::RoundRobin, Locality::None);
    let now = Instant::now();
    let mut rng = rng();
    let picks: Vec<String> = (0..7)
        .map(|i| pick_at(&chooser, &table, client(i), &[], now, &mut rng))
        .collect();
    assert_eq!(
        picks,
        [
            "10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.1"
        ]
    );
}

#[test]
fn round_robin_keeps_one_position_per_service_port() {
    let service = ServiceBuilder::new()
        .port("a", 42, 8042)
        .port("b", 43, 8043)
        .exported_at(1)
        .endpoint("10.0.0.1")
        .endpoint("10.0.0.2")
        .endpoint("10.0.0.3");
    let table = table(&[("c1", "net-a", service)]);
    let routes = table.service("shop", "cart").expect("routed");
    let (a, b) = (
        routes.port(Protocol::Tcp, 42).expect("port 42"),
        routes.port(Protocol::Tcp, 43).expect("port 43"),
    );
    let chooser = chooser(Balancer::RoundRobin, Locality::None);
    let now = Instant::now();
    let mut rng = rng();
    let mut pick = |route: &PortRoute| {
        chooser
            .pick(routes, route, client(1), &[], now, &mut rng)
            .map(|routed| routed.backend.address.to_string())
            .expect("a backend")
    };
    assert_eq!(pick(a), "10.0.0.1");
    assert_eq!(pick(a), "10.0.0.2");
    assert_eq!(pick(b), "10.0.0.1");
    assert_eq!(pick(a), "10.0.0.3");
    assert_eq!(pick(b), "10.0.0.2");
}

#[test]
fn round_robin_covers_routes_too_big_for_the_stack_buffer() {
    let addresses: Vec<String> = (0..300)
        .map(|n| format!("10.0.{}.{}", n / 200, n % 200 + 1))
        .collect();
    let endpoints: Vec<&str> = addresses.iter().map(String::as_str).collect();
    let table = one_cluster(&endpoints);
    assert_eq!(cart(&table).1.backends.len(), 300);
    let chooser = chooser(Balancer::RoundRobin, Locality::None);
    let now = Instant::now();
    let mut rng = rng();
    let picks: Vec<String> = (0..300)
        .map(|i| pick_at(&chooser, &table, client(i), &[], now, &mut rng))
        .collect();
    assert_eq!(picks, addresses);
    let tried = [id("net-a", &addresses[299])];
    let p2c = self::chooser(Balancer::P2c, Locality::None);
    let counts = tally(&p2c, &table, &tried, now, 3000);
    assert_eq!(counts.get(&addresses[299]), None);
    assert!(counts.len() > 250, "{}", counts.len());
}

#[test]
fn tried_backends_are_skipped() {
    let table = one_cluster(&["10.0.0.1", "10.0.0.2", "10.0.0.3"]);
    let tried = [id("net-a", "10.0.0.1"), id("net-a", "10.0.0.3")];
    for balancer in [Balancer::P2c, Balancer::RoundRobin] {
        let chooser = chooser(balancer, Locality::None);
        let counts = tally(&chooser, &table, &tried, Instant::now(), 100);
        assert_eq!(counts, HashMap::from([("10.0.0.2".to_owned(), 100)]));
    }
}

#[test]
fn a_tried_address_on_another_network_is_not_skipped() {
    let table = table(&[
        ("c1", "net-a", service_with(&["10.1.0.1"])),
        ("c3", "net-b", service_with(&["10.1.0.1"])),
    ]);
    let chooser = chooser(Balancer::P2c, Locality::None);
    let mut rng = rng();
    let (service, route) = cart(&table);
    let tried = [id("net-a", "10.1.0.1")];
    let picked = chooser
        .pick(service, route, client(1), &tried, Instant::now(), &mut rng)
        .expect("the net-b backend");
    assert_eq!(picked.network().as_str(), "net-b");
}

#[test]
fn no_pick_when_every_backend_was_tried() {
    let table = one_cluster(&["10.0.0.1", "10.0.0.2"]);
    let tried = [id("net-a", "10.0.0.1"), id("net-a", "10.0.0.2")];
    for balancer in [Balancer::P2c, Balancer::RoundRobin] {
        let chooser = chooser(balancer, Locality::None);
        let now = Instant::now();
        // Even with every backend ejected (panic mode), tried ones stay out.
        for backend in &tried {
            fail(&chooser, backend, 3, now);
        }
        assert_eq!(
            pick_at(&chooser, &table, client(1), &tried, now, &mut rng()),
            "-"
        );
    }
}

#[test]
fn consecutive_failures_eject_until_the_backoff_passes() {
    let table = one_cluster(&["10.0.0.1", "10.0.0.2"]);
    let chooser = chooser(Balancer::RoundRobin, Locality::None);
    let bad = id("net-a", "10.0.0.1");
    let t0 = Instant::now();
    fail(&chooser, &bad, 2, t0);
    assert!(chooser.ejected(t0).is_empty());
    assert_eq!(tally(&chooser, &table, &[], t0, 10).len(), 2);

    chooser.report_failure(&bad, t0);
    assert_eq!(chooser.ejected(t0), vec![(bad.clone(), 5 * SECOND)]);
    assert_eq!(
        ejection_left(&chooser, &bad, t0 + 2 * SECOND),
        Some(3 * SECOND)
    );
    let during = tally(&chooser, &table, &[], t0 + 4 * SECOND, 20);
    assert_eq!(during, HashMap::from([("10.0.0.2".to_owned(), 20)]));

    let after = t0 + 5 * SECOND;
    assert!(chooser.ejected(after).is_empty());
    let counts = tally(&chooser, &table, &[], after, 20);
    assert_eq!(counts.get("10.0.0.1"), Some(&10), "{counts:?}");
}

#[test]
fn a_success_resets_the_failures_in_a_row() {
    let chooser = chooser(Balancer::P2c, Locality::None);
    let backend = id("net-a", "10.0.0.1");
    let now = Instant::now();
    fail(&chooser, &backend, 2, now);
    chooser.report_success(&backend);
    fail(&chooser, &backend, 2, now);
    assert!(chooser.ejected(now).is_empty());
    chooser.report_failure(&backend, now);
    assert_eq!(ejection_left(&chooser, &backend, now), Some(5 * SECOND));
}

#[test]
fn ejections_grow_and_are_capped() {
    let mut chooser = chooser(Balancer::P2c, Locality::None);
    chooser.outliers.max_ejection = 30 * SECOND;
    let backend = id("net-a", "10.0.0.1");
    let mut now = Instant::now();
    let mut lengths = Vec::new();
    for _ in 0..6 {
        fail(&chooser, &backend, 3, now);
        let left = ejection_left(&chooser, &backend, now).expect("ejected");
        lengths.push(left.as_secs());
        // Failures while ejected change nothing.
        fail(&chooser, &backend, 5, now + SECOND);
        assert_eq!(ejection_left(&chooser, &backend, now), Some(left));
        now += left;
    }
    assert_eq!(lengths, vec![5, 10, 20, 30, 30, 30]);
}

#[test]
fn the_ejection_count_decays_after_holding_up_for_max_ejection() {
    let policy = OutlierPolicy::default();
    let backend = id("net-a", "10.0.0.1");
    // Ejected once at t0 (5 s), back at t0 + 5 s; the next ejection lasts
    // 10 s unless the backend succeeded and held for `max_ejection`.
    let next_ejection = |success: bool, fail_after_return: Duration| {
        let chooser = chooser(Balancer::P2c, Locality::None);
        let t0 = Instant::now();
        fail(&chooser, &backend, 3, t0);
        let returned = t0 + 5 * SECOND;
        if success {
            chooser.report_success(&backend);
        }
        let at = returned + fail_after_return;
        fail(&chooser, &backend, 3, at);
        ejection_left(&chooser, &backend, at).map(|left| left.as_secs())
    };
    assert_eq!(next_ejection(true, policy.max_ejection), Some(5));
    assert_eq!(next_ejection(true, policy.max_ejection - SECOND), Some(10));
    assert_eq!(next_ejection(false, policy.max_ejection * 2), Some(10));
}

#[test]
fn zero_consecutive_failures_turns_ejection_off() {
    let mut chooser = chooser(Balancer::P2c, Locality::None);
    chooser.outliers.consecutive_failures = 0;
    let backend = id("net-a", "10.0.0.1");
    let now = Instant::now();
    fail(&chooser, &backend, 100, now);
    assert!(chooser.ejected(now).is_empty());
}

#[test]
fn panic_mode_uses_ejected_backends_when_nothing_else_is_left() {
    let table = one_cluster(&["10.0.0.1", "10.0.0.2", "10.0.0.3"]);
    let chooser = chooser(Balancer::P2c, Locality::None);
    let now = Instant::now();
    for address in ["10.0.0.1", "10.0.0.2"] {
        fail(&chooser, &id("net-a", address), 3, now);
    }
    let counts = tally(&chooser, &table, &[], now, 50);
    assert_eq!(counts, HashMap::from([("10.0.0.3".to_owned(), 50)]));

    fail(&chooser, &id("net-a", "10.0.0.3"), 3, now);
    assert_eq!(chooser.ejected(now).len(), 3);
    let counts = tally(&chooser, &table, &[], now, 300);
    assert_eq!(counts.len(), 3, "all ejected: any will do, {counts:?}");

    // The healthy one was tried: the ejected ones are all that is left.
    let table = one_cluster(&["10.0.0.1", "10.0.0.2", "10.0.0.4"]);
    let tried = [id("net-a", "10.0.0.4"), id("net-a", "10.0.0.1")];
    let counts = tally(&chooser, &table, &tried, now, 50);
    assert_eq!(counts, HashMap::from([("10.0.0.2".to_owned(), 50)]));
}

#[test]
fn locality_none_uses_every_backend() {
    let table = three_clusters();
    let chooser = chooser(Balancer::RoundRobin, Locality::None);
    let counts = tally(&chooser, &table, &[], Instant::now(), 30);
    assert_eq!(counts.len(), 3, "{counts:?}");
}

#[test]
fn locality_cluster_prefers_the_cluster_then_the_network() {
    let table = three_clusters();
    let chooser = chooser(Balancer::P2c, Locality::Cluster);
    let now = Instant::now();
    let only = |address: &str, n| HashMap::from([(address.to_owned(), n)]);
    assert_eq!(tally(&chooser, &table, &[], now, 30), only("10.1.0.1", 30));

    let c1 = id("net-a", "10.1.0.1");
    let c2 = id("net-a", "10.1.0.2");
    let tried = [c1.clone()];
    assert_eq!(
        tally(&chooser, &table, &tried, now, 30),
        only("10.1.0.2", 30)
    );
    let tried = [c1.clone(), c2.clone()];
    assert_eq!(
        tally(&chooser, &table, &tried, now, 30),
        only("10.1.0.3", 30)
    );

    // An ejected local backend yields to a healthy one further away.
    fail(&chooser, &c1, 3, now);
    assert_eq!(tally(&chooser, &table, &[], now, 30), only("10.1.0.2", 30));
    fail(&chooser, &c2, 3, now);
    assert_eq!(tally(&chooser, &table, &[], now, 30), only("10.1.0.3", 30));
}

#[test]
fn locality_network_prefers_the_network() {
    let table = three_clusters();
    let chooser = chooser(Balancer::RoundRobin, Locality::Network);
    let now = Instant::now();
    let counts = tally(&chooser, &table, &[], now, 30);
    assert_eq!(
        counts,
        HashMap::from([("10.1.0.1".to_owned(), 15), ("10.1.0.2".to_owned(), 15)])
    );
    let tried = [id("net-a", "10.1.0.1"), id("net-a", "10.1.0.2")];
    let counts = tally(&chooser, &table, &tried, now, 10);
    assert_eq!(counts, HashMap::from([("10.1.0.3".to_owned(), 10)]));
}

#[test]
fn locality_falls_back_to_every_backend_when_none_is_local() {
    let table = table(&[
        ("c1", "net-a", service_with(&[])),
        ("c3", "net-b", service_with(&["10.1.0.3"])),
        ("c4", "net-c", service_with(&["10.1.0.4"])),
    ]);
    for locality in [Locality::Cluster, Locality::Network] {
        let chooser = chooser(Balancer::RoundRobin, locality);
        let counts = tally(&chooser, &table, &[], Instant::now(), 10);
        assert_eq!(counts.len(), 2, "{locality:?}: {counts:?}");
    }
}

#[test]
fn affinity_sticks_to_a_clients_backend() {
    let service = sticky(service_with(&["10.0.0.1", "10.0.0.2", "10.0.0.3"]), None);
    let table = table(&[("c1", "net-a", service)]);
    let chooser = chooser(Balancer::P2c, Locality::None);
    let mut rng = rng();
    let t0 = Instant::now();
    let first = pick_at(&chooser, &table, client(1), &[], t0, &mut rng);
    // Even heavily loaded, the remembered backend keeps its client.
    let _load: Vec<ActiveGuard> = (0..10)
        .map(|_| chooser.start(&id("net-a", &first)))
        .collect();
    for minute in 1..=100 {
        let now = t0 + 60 * minute * SECOND;
        assert_eq!(
            pick_at(&chooser, &table, client(1), &[], now, &mut rng),
            first
        );
    }
    // Other clients are balanced as usual, each remembered; of clients
    // 0..300, only client 1 still gets the loaded backend.
    let counts = tally(&chooser, &table, &[], t0, 300);
    assert_eq!(counts.get(first.as_str()), Some(&1), "{counts:?}");
    assert_eq!(chooser.affinity_len(), 300);
}

#[test]
fn affinity_expires_after_the_timeout_since_last_use() {
    let service = sticky(service_with(&["10.0.0.1", "10.0.0.2"]), Some(60));
    let table = table(&[("c1", "net-a", service)]);
    let chooser = chooser(Balancer::RoundRobin, Locality::None);
    let mut rng = rng();
    let t0 = Instant::now();
    let mut pick = |now| pick_at(&chooser, &table, client(1), &[], now, &mut rng);
    assert_eq!(pick(t0), "10.0.0.1");
    // Each use refreshes the timeout.
    assert_eq!(pick(t0 + 50 * SECOND), "10.0.0.1");
    assert_eq!(pick(t0 + 100 * SECOND), "10.0.0.1");
    assert_eq!(pick(t0 + 159 * SECOND), "10.0.0.1");
    // Idle for the full timeout: forgotten, the rotation moves on.
    assert_eq!(pick(t0 + 219 * SECOND), "10.0.0.2");
    assert_eq!(pick(t0 + 220 * SECOND), "10.0.0.2");
}

#[test]
fn affinity_lasts_three_hours_by_default() {
    let service = sticky(service_with(&["10.0.0.1", "10.0.0.2"]), None);
    let table = table(&[("c1", "net-a", service)]);
    let chooser = chooser(Balancer::RoundRobin, Locality::None);
    let mut rng = rng();
    let t0 = Instant::now();
    let mut pick = |now| pick_at(&chooser, &table, client(1), &[], now, &mut rng);
    assert_eq!(pick(t0), "10.0.0.1");
    assert_eq!(pick(t0 + 10_799 * SECOND), "10.0.0.1");
    assert_eq!(pick(t0 + (10_799 + 10_800) * SECOND), "10.0.0.2");
}

#[test]
fn affinity_moves_off_an_ejected_or_tried_backend() {
    let service = sticky(service_with(&["10.0.0.1", "10.0.0.2", "10.0.0.3"]), None);
    let table = table(&[("c1", "net-a", service)]);
    let chooser = chooser(Balancer::RoundRobin, Locality::None);
    let mut rng = rng();
    let t0 = Instant::now();
    assert_eq!(
        pick_at(&chooser, &table, client(1), &[], t0, &mut rng),
        "10.0.0.1"
    );

    fail(&chooser, &id("net-a", "10.0.0.1"), 3, t0);
    let moved = pick_at(&chooser, &table, client(1), &[], t0, &mut rng);
    assert_ne!(moved, "10.0.0.1");
    // The new backend is remembered, and kept once the old one returns.
    let later = t0 + 10 * SECOND;
    assert!(chooser.ejected(later).is_empty());
    for _ in 0..5 {
        assert_eq!(
            pick_at(&chooser, &table, client(1), &[], later, &mut rng),
            moved
        );
    }

    // A retry skips the remembered backend, and remembers the new one.
    let tried = [id("net-a", &moved)];
    let retried = pick_at(&chooser, &table, client(1), &tried, later, &mut rng);
    assert_ne!(retried, moved);
    for _ in 0..5 {
        assert_eq!(
            pick_at(&chooser, &table, client(1), &[], later, &mut rng),
            retried
        );
    }
}

#[test]
fn affinity_moves_off_a_backend_gone_from_the_route() {
    let before = table(&[(
        "c1",
        "net-a",
        sticky(service_with(&["10.0.0.1", "10.0.0.2"]), None),
    )]);
    let after = table(&[("c1", "net-a", sticky(service_with(&["10.0.0.2"]), None))]);
    let chooser = chooser(Balancer::RoundRobin, Locality::None);
    let mut rng = rng();
    let now = Instant::now();
    assert_eq!(
        pick_at(&chooser, &before, client(1), &[], now, &mut rng),
        "10.0.0.1"
    );
    assert_eq!(
        pick_at(&chooser, &after, client(1), &[], now, &mut rng),
        "10.0.0.2"
    );
}

#[test]
fn affinity_tables_are_bounded() {
    let service = sticky(service_with(&["10.0.0.1", "10.0.0.2"]), Some(60));
    let table = table(&[("c1", "net-a", service)]);
    let chooser = chooser(Balancer::P2c, Locality::None);
    let mut rng = rng();
    let now = Instant::now();
    let scan = AFFINITY_CAPACITY as u32 + 5_000;
    for n in 0..scan {
        pick_at(&chooser, &table, client(n), &[], now, &mut rng);
        if n % 1000 == 0 {
            assert!(chooser.affinity_len() <= AFFINITY_CAPACITY);
        }
    }
    let len = chooser.affinity_len();
    assert!(len <= AFFINITY_CAPACITY, "{len}");
    // The most recent clients are still remembered.
    assert!(len > AFFINITY_CAPACITY / 2 - 1, "{len}");
}

#[test]
fn expired_affinities_are_swept() {
    let service = sticky(service_with(&["10.0.0.1", "10.0.0.2"]), Some(60));
    let table = table(&[("c1", "net-a", service)]);
    let chooser = chooser(Balancer::RoundRobin, Locality::None).with_affinity_capacity(4_000);
    let mut rng = rng();
    let t0 = Instant::now();
    for n in 0..1_500 {
        pick_at(&chooser, &table, client(n), &[], t0, &mut rng);
    }
    // Once the first 1500 have expired, the next sweep drops them.
    let t1 = t0 + 61 * SECOND;
    for n in 1_500..4_000 {
        pick_at(&chooser, &table, client(n), &[], t1, &mut rng);
        assert!(chooser.affinity_len() <= 4_000);
    }
    assert!(
        chooser.affinity_len() <= 2_500,
        "{}",
        chooser.affinity_len()
    );

    // Full of live clients: the table stays within its capacity.
    for n in 4_000..10_000 {
        let now = t1 + Duration::from_millis(u64::from(n));
        pick_at(&chooser, &table, client(n), &[], now, &mut rng);
        assert!(chooser.affinity_len() <= 4_000);
    }
}

#[test]
fn retain_forgets_vanished_backends() {
    let service = sticky(service_with(&["10.0.0.1", "10.0.0.2"]), None);
    let table = table(&[("c1", "net-a", service)]);
    let chooser = chooser(Balancer::RoundRobin, Locality::None);
    let mut rng = rng();
    let now = Instant::now();
    let gone = id("net-a", "10.0.0.1");
    let kept = id("net-a", "10.0.0.2");
    assert_eq!(
        pick_at(&chooser, &table, client(1), &[], now, &mut rng),
        "10.0.0.1"
    );
    assert_eq!(
        pick_at(&chooser, &table, client(2), &[], now, &mut rng),
        "10.0.0.2"
    );
    let guard = chooser.start(&gone);
    let _kept_guard = chooser.start(&kept);
    fail(&chooser, &gone, 3, now);
    assert_eq!(chooser.ejected(now).len(), 1);

    chooser.retain(|backend| backend != &gone);
    assert!(chooser.ejected(now).is_empty());
    assert_eq!(chooser.active(&gone), 0);
    assert_eq!(chooser.active(&kept), 1);
    assert_eq!(chooser.affinity_len(), 1);
    drop(guard);
    assert_eq!(chooser.active(&kept), 1);
    // With no ejection left, picks skip health lookups again.
    assert_eq!(chooser.marked.load(Ordering::Acquire), 0);

    chooser.retain_routes(|_, _, _| false);
    assert_eq!(chooser.affinity_len(), 0);
}

#[test]
fn passed_ejections_stop_slowing_picks() {
    let table = one_cluster(&["10.0.0.1", "10.0.0.2"]);
    let chooser = chooser(Balancer::P2c, Locality::None);
    let now = Instant::now();
    fail(&chooser, &id("net-a", "10.0.0.1"), 3, now);
    assert_eq!(chooser.marked.load(Ordering::Acquire), 1);
    pick_at(
        &chooser,
        &table,
        client(1),
        &[],
        now + 5 * SECOND,
        &mut rng(),
    );
    assert_eq!(chooser.marked.load(Ordering::Acquire), 0);
}

#[test]
fn health_checks_take_a_backend_out_of_rotation_and_bring_it_back() {
    let table = three_clusters();
    let chooser = chooser(Balancer::P2c, Locality::None);
    let now = Instant::now();
    let thresholds = ProbeThresholds {
        unhealthy: 2,
        healthy: 2,
    };
    let c3 = id("net-b", "10.1.0.3");
    assert_eq!(
        chooser.report_probe(&c3, false, thresholds),
        None,
        "one failure"
    );
    assert_eq!(chooser.report_probe(&c3, false, thresholds), Some(true));
    assert!(chooser.probed_down(&c3));
    assert_eq!(chooser.probed_down_count(), 1);
    let counts = tally(&chooser, &table, &[], now, 300);
    assert!(!counts.contains_key("10.1.0.3"), "{counts:?}");
    assert!(counts.contains_key("10.1.0.1") && counts.contains_key("10.1.0.2"));
    let (service, route) = cart(&table);
    let report = chooser.tier_shares(service, route, now);
    assert_eq!(report.down_by_health_check, ["net-b/10.1.0.3:8042"]);

    // Passive outlier detection is apart: successes on the traffic path
    // do not bring it back, answered checks do, as many as asked for.
    chooser.report_success(&c3);
    assert!(chooser.probed_down(&c3));
    assert_eq!(
        chooser.report_probe(&c3, true, thresholds),
        None,
        "one answer"
    );
    assert_eq!(chooser.report_probe(&c3, true, thresholds), Some(false));
    assert_eq!(chooser.probed_down_count(), 0);
    let counts = tally(&chooser, &table, &[], now, 300);
    assert!(counts.contains_key("10.1.0.3"), "{counts:?}");
}
