//! Graded spillover between locality tiers (`tuning.localityMinimumHealthy`):
//! shares measured over many picks, on routes built by the real merge and
//! routing, viewed from c1 (net-a) beside c2 (net-a) and c3 (net-b).

use std::collections::HashMap;
use std::time::Instant;

use super::tests::{chooser, client, fail, id, pick_at, rng, service_with, sticky, table, tally};
use super::*;
use crate::routing::RouteTable;

const PICKS: u32 = 20_000;

/// c1 with `local` endpoints (10.1.0.x), c2 with three (10.2.0.x), c3 with
/// three (10.3.0.x).
fn tiers(local: usize) -> RouteTable {
    let c1: Vec<String> = (1..=local).map(|n| format!("10.1.0.{n}")).collect();
    let c1: Vec<&str> = c1.iter().map(String::as_str).collect();
    table(&[
        ("c1", "net-a", service_with(&c1)),
        (
            "c2",
            "net-a",
            service_with(&["10.2.0.1", "10.2.0.2", "10.2.0.3"]),
        ),
        (
            "c3",
            "net-b",
            service_with(&["10.3.0.1", "10.3.0.2", "10.3.0.3"]),
        ),
    ])
}

/// The share of `PICKS` picks each cluster got, by its address prefix.
fn shares(counts: &HashMap<String, u32>) -> [f64; 3] {
    let share = |prefix: &str| {
        let picked: u32 = counts
            .iter()
            .filter(|(address, _)| address.starts_with(prefix))
            .map(|(_, n)| n)
            .sum();
        f64::from(picked) / f64::from(PICKS)
    };
    [share("10.1."), share("10.2."), share("10.3.")]
}

fn assert_near(got: [f64; 3], want: [f64; 3], what: &str) {
    for (g, w) in got.iter().zip(want) {
        assert!(
            (g - w).abs() < 0.02,
            "{what}: shares {got:?}, expected {want:?}"
        );
    }
}

#[test]
fn a_local_tier_short_of_its_minimum_sheds_load_in_proportion() {
    let chooser = chooser(Balancer::P2c, Locality::Cluster).with_locality_minimum(4);
    let now = Instant::now();
    // Scaled down step by step, then back: c1 keeps count/4 of the
    // connections; c2 (3 of its minimum 4) three quarters of the rest; c3
    // the remainder.
    for (local, want) in [
        (5, [1.0, 0.0, 0.0]),
        (4, [1.0, 0.0, 0.0]),
        (3, [0.75, 0.1875, 0.0625]),
        (2, [0.5, 0.375, 0.125]),
        (1, [0.25, 0.5625, 0.1875]),
        (0, [0.0, 0.75, 0.25]),
        (2, [0.5, 0.375, 0.125]),
        (4, [1.0, 0.0, 0.0]),
    ] {
        let counts = tally(&chooser, &tiers(local), &[], now, PICKS);
        assert_near(shares(&counts), want, &format!("{local} local backends"));
    }
}

#[test]
fn an_ejected_backend_counts_against_its_tiers_minimum() {
    let chooser = chooser(Balancer::P2c, Locality::Cluster).with_locality_minimum(4);
    let now = Instant::now();
    let table = tiers(4);
    fail(&chooser, &id("net-a", "10.1.0.1"), 3, now);
    fail(&chooser, &id("net-a", "10.1.0.2"), 3, now);
    let counts = tally(&chooser, &table, &[], now, PICKS);
    assert_near(shares(&counts), [0.5, 0.375, 0.125], "two of four ejected");
    assert!(
        !counts.contains_key("10.1.0.1") && !counts.contains_key("10.1.0.2"),
        "ejected backends take nothing: {counts:?}"
    );
}

#[test]
fn a_minimum_of_one_is_all_or_nothing() {
    let chooser = chooser(Balancer::P2c, Locality::Cluster);
    let now = Instant::now();
    let counts = tally(&chooser, &tiers(1), &[], now, PICKS);
    assert_near(shares(&counts), [1.0, 0.0, 0.0], "one local backend");
    let counts = tally(&chooser, &tiers(0), &[], now, PICKS);
    assert_near(shares(&counts), [0.0, 1.0, 0.0], "none local");
}

#[test]
fn network_locality_spills_from_the_network_to_the_others() {
    let chooser = chooser(Balancer::RoundRobin, Locality::Network).with_locality_minimum(8);
    let now = Instant::now();
    // net-a has c1's two and c2's three: 5 of 8.
    let counts = tally(&chooser, &tiers(2), &[], now, PICKS);
    let [c1, c2, c3] = shares(&counts);
    assert!(((c1 + c2) - 0.625).abs() < 0.02, "{counts:?}");
    assert!((c3 - 0.375).abs() < 0.02, "{counts:?}");
}

#[test]
fn a_sticky_client_keeps_its_backend_whatever_the_draw() {
    let chooser = chooser(Balancer::P2c, Locality::Cluster).with_locality_minimum(4);
    let service = |endpoints: &[&str]| sticky(service_with(endpoints), None);
    let table = table(&[
        ("c1", "net-a", service(&["10.1.0.1"])),
        ("c2", "net-a", service(&["10.2.0.1", "10.2.0.2"])),
        ("c3", "net-b", service(&["10.3.0.1"])),
    ]);
    let now = Instant::now();
    let mut rng = rng();
    for n in 0..50 {
        let first = pick_at(&chooser, &table, client(n), &[], now, &mut rng);
        for _ in 0..20 {
            let again = pick_at(&chooser, &table, client(n), &[], now, &mut rng);
            assert_eq!(again, first, "client {n} moved");
        }
    }
}

#[test]
fn tier_shares_say_what_each_tier_takes_now() {
    let chooser = chooser(Balancer::P2c, Locality::Cluster).with_locality_minimum(4);
    let now = Instant::now();
    let table = tiers(4);
    fail(&chooser, &id("net-a", "10.1.0.1"), 3, now);
    fail(&chooser, &id("net-a", "10.1.0.2"), 3, now);
    let service = table.service("shop", "cart").expect("shop/cart is routed");
    let route = service.port(Protocol::Tcp, 42).expect("port 42");
    let report = chooser.tier_shares(service, route, now);
    let view: Vec<(&str, usize, usize, f64)> = report
        .tiers
        .iter()
        .map(|tier| (tier.tier, tier.backends, tier.candidates, tier.share))
        .collect();
    assert_eq!(
        view,
        [
            ("this cluster", 4, 2, 0.5),
            ("this network", 3, 3, 0.375),
            ("other networks", 3, 3, 0.125),
        ]
    );
    assert_eq!(
        report.ejected,
        ["net-a/10.1.0.1:8042", "net-a/10.1.0.2:8042"]
    );
    // The shares are what picks measure.
    let counts = tally(&chooser, &table, &[], now, PICKS);
    assert_near(shares(&counts), [0.5, 0.375, 0.125], "as reported");

    let none =
        super::tests::chooser(Balancer::P2c, Locality::None).tier_shares(service, route, now);
    assert_eq!(none.tiers.len(), 1);
    assert_eq!((none.tiers[0].backends, none.tiers[0].share), (10, 1.0));
}
