//! Vocabulary shared by the multi-network tests: the services they export,
//! the addresses they expect, and ways to read what happened (greeting
//! tallies, counter deltas, iptables counters).

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use crate::support::{Pod, ServiceSpec};

use super::backend::POD_PORT;
use super::client::{self, Greeting, Held};
use super::gateway::Scrape;
use super::sys;
use super::world::World;

pub const EARLY: Option<&str> = Some("2026-01-01T00:00:00Z");

pub const LATE: Option<&str> = Some("2026-02-01T00:00:00Z");

pub const ECHO: &str = "echo.app.svc.clusterset.local:42";

pub const TCP_42: &[(&str, u16, u16)] = &[("tcp", 42, POD_PORT)];

/// `app/<name>` with `ports`, exported at `exported_at`, on pods `(cluster, n)`.
pub fn service(
    name: &'static str,
    ports: &'static [(&'static str, u16, u16)],
    exported_at: Option<&'static str>,
    pods: &[(&str, u8)],
) -> ServiceSpec<'static> {
    ServiceSpec {
        namespace: "app",
        name,
        ports,
        exported_at,
        pods: pods
            .iter()
            .map(|(cluster, n)| Pod::ready(World::pod_ip(cluster, *n)))
            .collect(),
        proxy_protocol: false,
        udp_ports: &[],
    }
}

pub fn gw(cluster: &str, n: u8) -> IpAddr {
    World::gateway_ip(cluster, n)
}

pub fn gateways_of(cluster: &str) -> [IpAddr; 2] {
    [gw(cluster, 1), gw(cluster, 2)]
}

/// How many connections each (pod, peer) pair answered.
pub fn tally(greetings: &[Greeting]) -> BTreeMap<(String, IpAddr), usize> {
    let mut counts = BTreeMap::new();
    for greeting in greetings {
        *counts
            .entry((greeting.name.clone(), greeting.peer))
            .or_insert(0) += 1;
    }
    counts
}

/// The change of `strait_connections_opened_total{path}` on `gateways`.
pub fn opened_delta(
    before: &BTreeMap<String, Scrape>,
    after: &BTreeMap<String, Scrape>,
    gateways: &[&str],
    path: &str,
) -> f64 {
    gateways
        .iter()
        .map(|name| {
            let at = |scrapes: &BTreeMap<String, Scrape>| {
                scrapes.get(*name).map_or(0.0, |s| s.opened(path))
            };
            at(after) - at(before)
        })
        .sum()
}

pub const ALL_GATEWAYS: [&str; 8] = [
    "c1g1", "c1g2", "c2g1", "c2g2", "c3g1", "c3g2", "c4g1", "c4g2",
];

/// Opens connections until one greets from `peer` (at most `deadline`):
/// how long it took, or `None`.
pub async fn until_peer(
    ns: &str,
    gateway: SocketAddr,
    peer: IpAddr,
    deadline: Duration,
) -> Option<Duration> {
    let started = Instant::now();
    while started.elapsed() < deadline {
        if let Ok(greeting) = client::once(ns, gateway, ECHO).await
            && greeting.peer == peer
        {
            return Some(started.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    None
}

/// Opens `count` connections; all must answer from `expected`, and every
/// pod of `expected` must answer at least once.
pub async fn follows(world: &World, expected: &[&str], count: usize) {
    let greetings = client::many(&world.ns("c1p1"), world.connect_address("c1"), ECHO, count)
        .await
        .expect("new connections succeed");
    let seen: BTreeSet<&str> = greetings.iter().map(|g| g.name.as_str()).collect();
    let expected: BTreeSet<&str> = expected.iter().copied().collect();
    assert_eq!(seen, expected, "{:?}", tally(&greetings));
}

/// A deterministic payload of one mebibyte, different per transfer.
pub fn payload(index: u32) -> Vec<u8> {
    (0..1024 * 1024u32)
        .map(|i| (i.wrapping_mul(31).wrapping_add(index) % 251) as u8)
        .collect()
}

/// iptables counters of the WAN rules of one namespace: (all, dropped)
/// packets and all bytes.
pub fn wan_counters(ns: &str) -> (u64, u64, u64) {
    let listing = sys::iptables(ns, &["-L", "INPUT", "-v", "-x", "-n"]).expect("iptables -L");
    let rules: Vec<Vec<&str>> = listing
        .lines()
        .skip(2)
        .map(|line| line.split_whitespace().collect())
        .filter(|fields: &Vec<&str>| fields.len() > 2)
        .collect();
    let number = |rule: &Vec<&str>, field: usize| rule[field].parse::<u64>().expect("a counter");
    let all = rules
        .iter()
        .find(|r| r[2] != "DROP")
        .expect("the counting rule");
    let dropped = rules
        .iter()
        .find(|r| r[2] == "DROP")
        .expect("the drop rule");
    (number(all, 0), number(dropped, 0), number(all, 1))
}

/// Opens connections until one is answered by `pod` (at most 40 tries) and
/// keeps it open.
pub async fn held_to(world: &World, pod: &str) -> Held {
    let (client, gateway) = (world.ns("c1p1"), world.connect_address("c1"));
    for _ in 0..40 {
        let connection = Held::open(&client, gateway, ECHO)
            .await
            .expect("a new connection");
        if connection.greeting.name == pod {
            return connection;
        }
    }
    panic!("40 connections and none answered by {pod}");
}
