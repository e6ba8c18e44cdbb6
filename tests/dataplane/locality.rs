//! Locality through real gateways. Graded spillover: c1 prefers its own pods, then
//! its network's (c2), then the other network's (c3, through the tunnel),
//! with `tuning.localityMinimumHealthy: 4`. c1's tier short of its minimum
//! keeps only its share of new connections (as its `/debug/routes` says),
//! and takes them all back once it is scaled up to the minimum again.

use std::collections::HashMap;

use super::*;

const SAMPLE: usize = 400;

impl World {
    /// As `start`, with c1's `gateway.yaml` tuned by `tune_c1`.
    pub(super) async fn start_tuned(
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

/// `locality: none`: c1 spreads over every cluster alike.
pub(super) fn spread_evenly(settings: &mut strait::config::GatewaySettings) {
    settings.tuning.locality = strait::routing::balancer::Locality::None;
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

/// With `locality: none`, c1 reaches c2's pod (its network) directly and
/// c3's through c3's gateway.
pub(super) async fn same_network_goes_direct_and_other_networks_through_the_gateway(
    transport: TransportMode,
) {
    let backends =
        backends_on_one_port(&[("c2-pod", pod_ip(2, 0)), ("c3-pod", pod_ip(3, 0))]).await;
    let target = backends[0].address.port();
    let ports: &'static [(&str, u16, u16)] = Box::leak(Box::new([("tcp", 42, target)]));
    // Spread evenly, so that both paths are taken (local first would
    // keep every connection on c1's network).
    let world = World::start_tuned(
        transport,
        |n| match n {
            2 => vec![echo_service(
                ports,
                EXPORTED_EARLY,
                vec![Pod::ready(pod_ip(2, 0))],
            )],
            3 => vec![echo_service(
                ports,
                EXPORTED_LATE,
                vec![Pod::ready(pod_ip(3, 0))],
            )],
            _ => Vec::new(),
        },
        spread_evenly,
    )
    .await;

    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..40 {
        let connected = connect(world.connect_address(1), "echo.app.svc.clusterset.local:42").await;
        assert_eq!(connected.status, 200);
        seen.insert(connected.greeting);
    }
    // c2's pod was dialled by c1's gateway itself; c3's pod by c3's gateway.
    assert_eq!(
        seen.into_iter().collect::<Vec<_>>(),
        vec!["c2-pod 127.0.1.1".to_owned(), "c3-pod 127.0.3.1".to_owned()]
    );
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

fn fenced_to_c3(settings: &mut strait::config::GatewaySettings) {
    settings.routing = vec![strait::config::ServiceRouting {
        service: "app/echo".to_owned(),
        locality: Some(strait::routing::balancer::Locality::Cluster),
        locality_minimum_healthy: None,
        fence: Some(strait::config::FenceSettings {
            clusters: vec!["c3".to_owned()],
            networks: Vec::new(),
        }),
    }];
}

/// A CONNECT through `gateway` refused: its status and the reason in its body.
async fn refusal(gateway: std::net::SocketAddr, authority: &str) -> (u16, String) {
    use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};
    let stream = tokio::net::TcpStream::connect(gateway)
        .await
        .expect("connect listener");
    let mut stream = tokio::io::BufReader::new(stream);
    let request = format!("CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n");
    stream
        .get_mut()
        .write_all(request.as_bytes())
        .await
        .expect("send");
    let mut status = String::new();
    stream.read_line(&mut status).await.expect("status line");
    let mut length = 0;
    loop {
        let mut line = String::new();
        if stream.read_line(&mut line).await.expect("header") == 0 || line == "\r\n" {
            break;
        }
        if let Some((name, value)) = line.trim_end().split_once(':')
            && name.eq_ignore_ascii_case("content-length")
        {
            length = value.trim().parse().expect("a length");
        }
    }
    let mut body = vec![0; length];
    stream.read_exact(&mut body).await.expect("body");
    let code = status
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok());
    (
        code.unwrap_or(0),
        String::from_utf8_lossy(&body).into_owned(),
    )
}

/// c1's admin fences `app/echo` to c3 (and asks for its own cluster
/// first): every connection from c1 crosses to c3 although c1 and c2 have
/// ready pods, and once c3 has none, c1 refuses with the fence named
/// rather than serve from outside it.
pub(super) async fn a_fenced_service_is_served_only_inside_its_fence(transport: TransportMode) {
    let named = [
        ("c1-pod0", pod_ip(1, 0)),
        ("c2-pod0", pod_ip(2, 0)),
        ("c3-pod0", pod_ip(3, 0)),
        ("c3-pod1", pod_ip(3, 1)),
    ];
    let backends = backends_on_one_port(&named).await;
    let target = backends[0].address.port();
    let ports: &'static [(&str, u16, u16)] = Box::leak(Box::new([("tcp", 42, target)]));
    let service = |n: u8, count: u8| echo_service(ports, EXPORTED_EARLY, pods(n, count));
    let world = World::start_tuned(
        transport,
        |n| vec![service(n, if n == 3 { 2 } else { 1 })],
        fenced_to_c3,
    )
    .await;
    let got = shares(&world).await;
    assert_eq!(got.get("c3"), Some(&1.0), "only c3 serves: {got:?}");

    // c3 scaled to nothing: refused with the reason, never c1 or c2.
    let yaml = cluster_yaml("c3", "net-b", world.tunnels[2], &[service(3, 0)]);
    write_cluster(&world.config, "c3", &yaml);
    let started = std::time::Instant::now();
    let authority = "echo.app.svc.clusterset.local:42";
    loop {
        let (status, body) = refusal(world.connect_address(1), authority).await;
        if status == 503 {
            assert!(
                body.contains("app/echo is fenced to clusters c3 (this cluster's policy)"),
                "{body}"
            );
            break;
        }
        assert_eq!(status, 200, "served from c3 until it has no pod: {body}");
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "c3's pods leave c1's routes"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for _ in 0..20 {
        let (status, _) = refusal(world.connect_address(1), authority).await;
        assert_eq!(status, 503, "no connection leaves the fence");
    }
}
