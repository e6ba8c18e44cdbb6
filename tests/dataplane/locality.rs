//! Graded spillover through real gateways: c1 prefers its own pods, then
//! its network's (c2), then the other network's (c3, through the tunnel),
//! with `tuning.localityMinimumHealthy: 4`. c1's tier short of its minimum
//! keeps only its share of new connections (as its `/debug/routes` says),
//! and takes them all back once it is scaled up to the minimum again.

use std::collections::HashMap;

use super::*;

const SAMPLE: usize = 400;

impl World {
    /// As `start`, with c1's `gateway.yaml` tuned by `tune_c1`.
    async fn start_tuned(
        transport: TransportMode,
        services: impl Fn(u8) -> Vec<ServiceSpec<'static>>,
        tune_c1: fn(&mut strait::config::GatewaySettings),
    ) -> World {
        let none = |_| String::new();
        Self::start_inner(
            |_| transport,
            services,
            none,
            Vec::new(),
            None,
            Some(tune_c1),
        )
        .await
    }
}

fn local_first(settings: &mut strait::config::GatewaySettings) {
    settings.tuning.locality = strait::routing::balancer::Locality::Cluster;
    settings.tuning.locality_minimum_healthy = 4;
}

/// `count` ready pods of cluster `n`.
fn pods(n: u8, count: u8) -> Vec<Pod> {
    (0..count).map(|pod| Pod::ready(pod_ip(n, pod))).collect()
}

/// The share of `SAMPLE` CONNECTs through c1 that each cluster's pods answered.
async fn shares(world: &World) -> HashMap<String, f64> {
    let mut counts: HashMap<String, usize> = HashMap::new();
    for _ in 0..SAMPLE {
        let connected = connect(world.connect_address(1), "echo.app.svc.clusterset.local:42").await;
        assert_eq!(connected.status, 200);
        let cluster = connected.greeting.get(..2).unwrap_or_default().to_owned();
        *counts.entry(cluster).or_default() += 1;
    }
    counts
        .into_iter()
        .map(|(cluster, n)| (cluster, n as f64 / SAMPLE as f64))
        .collect()
}

pub(super) async fn a_local_tier_short_of_its_minimum_keeps_only_its_share(
    transport: TransportMode,
) {
    let mut names = Vec::new();
    for (n, count) in [(1u8, 4u8), (2, 3), (3, 3)] {
        for pod in 0..count {
            names.push((format!("c{n}-pod{pod}"), pod_ip(n, pod)));
        }
    }
    let named: Vec<(&str, std::net::IpAddr)> = names
        .iter()
        .map(|(name, ip)| (name.as_str(), *ip))
        .collect();
    let backends = backends_on_one_port(&named).await;
    let target = backends[0].address.port();
    let ports: &'static [(&str, u16, u16)] = Box::leak(Box::new([("tcp", 42, target)]));
    let service = |n: u8, count: u8| echo_service(ports, EXPORTED_EARLY, pods(n, count));
    // c1 runs two of its four pods: half its minimum.
    let world = World::start_tuned(
        transport,
        |n| match n {
            1 => vec![service(1, 2)],
            n => vec![service(n, 3)],
        },
        local_first,
    )
    .await;

    // c1 keeps 2/4; c2 (3 of 4) three quarters of the rest; c3 the remainder.
    let got = shares(&world).await;
    for (cluster, want) in [("c1", 0.5), ("c2", 0.375), ("c3", 0.125)] {
        let share = got.get(cluster).copied().unwrap_or(0.0);
        assert!(
            (share - want).abs() < 0.08,
            "{cluster}: {share:.3} of connections, expected about {want}: {got:?}"
        );
    }

    // The gateway says the same of the port (`/debug/routes`, what
    // `strait explain --kube` prints).
    let admin = world.gateways[0].addresses().admin;
    let answer = admin_get(admin, "/debug/routes?service=app/echo").await;
    let body = answer.split_once("\r\n\r\n").map_or("", |(_, body)| body);
    let ports: serde_json::Value = serde_json::from_str(body).expect("routes as JSON");
    let tiers = &ports[0]["locality"]["tiers"];
    for (index, (tier, backends, share)) in [
        ("this cluster", 2, 0.5),
        ("this network", 3, 0.375),
        ("other networks", 3, 0.125),
    ]
    .into_iter()
    .enumerate()
    {
        assert_eq!(tiers[index]["tier"], tier, "{ports}");
        assert_eq!(tiers[index]["candidates"], backends, "{ports}");
        assert_eq!(tiers[index]["share"], share, "{ports}");
    }

    // Scaled up to its minimum, c1 takes every new connection again.
    let yaml = cluster_yaml("c1", "net-a", world.tunnels[0], &[service(1, 4)]);
    write_cluster(&world.config, "c1", &yaml);
    let started = std::time::Instant::now();
    loop {
        let got = shares(&world).await;
        if got.get("c1").copied() == Some(1.0) {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "c1 scaled to its minimum takes every connection: {got:?}"
        );
    }
}
