//! The transparent path on loopback: a client that speaks no proxy
//! protocol connects to a gateway's import port, as kube-proxy's DNAT of a
//! ClusterSetIP would make it, and reaches the right backend. The import
//! port comes from `strait imports` on the same files, the way a user of a
//! file setup finds it.

use std::net::SocketAddr;

use super::*;

/// Hands each run of the test its own import port range.
static NEXT_RANGE: std::sync::atomic::AtomicU16 = std::sync::atomic::AtomicU16::new(0);

/// The import port of `namespace/name:port` that `strait imports` prints
/// for `cluster` (the derived Service's `targetPort`).
pub fn import_port(config: &std::path::Path, cluster: &str, name: &str, port: u16) -> u16 {
    let list = strait_imports(config, cluster);
    let derived = list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|item| {
            item["kind"] == "Service"
                && item["metadata"]["labels"]["multicluster.kubernetes.io/service-name"] == name
        })
        .unwrap_or_else(|| panic!("no derived Service for {name} in {list:#}"));
    let forwarded = derived["spec"]["ports"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| p["port"] == port)
        .unwrap_or_else(|| panic!("no port {port} in {derived:#}"));
    forwarded["targetPort"]
        .as_u64()
        .and_then(|p| u16::try_from(p).ok())
        .expect("a numeric import port")
}

pub async fn an_import_port_selects_service_and_port(transport: TransportMode) {
    let backends =
        backends_on_one_port(&[("c1-pod", pod_ip(1, 0)), ("c3-pod", pod_ip(3, 0))]).await;
    // Port 42 is declared by c3 only; port 43 by c1 only.
    let remote_port: &'static [(&str, u16, u16)] =
        Box::leak(Box::new([("remote", 42, backends[1].address.port())]));
    let local_port: &'static [(&str, u16, u16)] =
        Box::leak(Box::new([("local", 43, backends[0].address.port())]));
    // A range of this test's own: tests share the loopback addresses.
    let first = 31000 + 100 * NEXT_RANGE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let range = strait::imports::PortRange::new(first, first + 99).expect("a range");
    let imports = strait::config::ImportSettings {
        port_range: range,
        ..Default::default()
    };
    let world = World::start_importing(
        transport,
        |n| match n {
            1 => vec![echo_service(
                local_port,
                EXPORTED_LATE,
                vec![Pod::ready(pod_ip(1, 0))],
            )],
            3 => vec![echo_service(
                remote_port,
                EXPORTED_EARLY,
                vec![Pod::ready(pod_ip(3, 0))],
            )],
            _ => Vec::new(),
        },
        imports,
    )
    .await;
    // The gateways were given loopback pods and the range in code; the
    // command reads them from gateway.yaml.
    std::fs::write(
        world.config.join("gateway.yaml"),
        format!("allowLoopbackEndpoints: true\nimports:\n  portRange: {range}\n"),
    )
    .expect("write gateway.yaml");
    let gateway = world.gateways[0].addresses().tunnel.ip();
    for (port, expected) in [(42, "c3-pod 127.0.3.1"), (43, "c1-pod 127.0.1.1")] {
        let import = import_port(&world.config, "c1", "echo", port);
        let listening: Vec<(u16, String)> = world.gateways[0]
            .state()
            .routes
            .load()
            .import_ports()
            .map(|(p, k)| (p, k.to_string()))
            .collect();
        assert!(
            range.contains(import) && listening.iter().any(|(p, _)| *p == import),
            "strait imports says {import}; the gateway listens on {listening:?}"
        );
        for _ in 0..3 {
            let stream = tokio::net::TcpStream::connect(SocketAddr::new(gateway, import))
                .await
                .expect("dial the import port");
            let mut stream = tokio::io::BufReader::new(stream);
            let mut greeting = String::new();
            tokio::io::AsyncBufReadExt::read_line(&mut stream, &mut greeting)
                .await
                .expect("greeting");
            assert_eq!(
                greeting.trim_end(),
                expected,
                "port {port} via import port {import}"
            );
            let echoed = echo(stream, b"no proxy protocol").await;
            assert_eq!(echoed, b"no proxy protocol");
        }
    }
    let listening = world.gateways[0]
        .state()
        .routes
        .load()
        .import_ports()
        .count();
    assert_eq!(listening, 2, "one import port per service port");
}

/// Reads the first line a backend sends and echoes a payload through.
async fn greeting_at(address: SocketAddr) -> String {
    let stream = tokio::net::TcpStream::connect(address)
        .await
        .unwrap_or_else(|e| panic!("dial {address}: {e}"));
    let mut stream = tokio::io::BufReader::new(stream);
    let mut greeting = String::new();
    tokio::io::AsyncBufReadExt::read_line(&mut stream, &mut greeting)
        .await
        .expect("greeting");
    assert_eq!(echo(stream, b"one pod").await, b"one pod");
    greeting.trim_end().to_owned()
}

/// A headless service whose two pods are on c3's network (net-b): c1's
/// gateway gives each pod an import port of its own, and a connection on
/// it reaches that pod and no other, every time (no balancing). With
/// `imports.podAddresses` a pod's address on this side, dialled at the
/// pod's own port (as a headless service's clients dial it) on a
/// ClusterSetIP listener, reaches it too; the range here is a /30 on
/// loopback, whose two addresses the test's listeners own.
pub async fn a_remote_pods_import_port_and_address_reach_that_pod(transport: TransportMode) {
    let backends =
        backends_on_one_port(&[("c3-pg-0", pod_ip(3, 0)), ("c3-pg-1", pod_ip(3, 1))]).await;
    let target = backends[0].address.port();
    let run = NEXT_RANGE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let first = 31000 + 100 * run;
    let range = strait::imports::PortRange::new(first, first + 99).expect("a range");
    // Two addresses, on loopback so that listeners can own them.
    let base = 4 * (run % 60);
    let pod_range = format!("127.0.77.{base}/30");
    let vips: Vec<std::net::IpAddr> = [1, 2]
        .iter()
        .map(|n| std::net::IpAddr::from([127, 0, 77, u8::try_from(base + n).expect("small")]))
        .collect();
    let imports = strait::config::ImportSettings {
        port_range: range,
        pod_addresses: vec![pod_range.parse().expect("a range")],
        ..Default::default()
    };
    let pods = [("pg-0", pod_ip(3, 0)), ("pg-1", pod_ip(3, 1))];
    let world = World::start_inner(
        |_| transport,
        |_| Vec::new(),
        |n| match n {
            3 => headless_yaml("db", "pg", ("pg", 5432, target), &pods),
            _ => String::new(),
        },
        vips.iter()
            .map(|vip| SocketAddr::new(*vip, target))
            .collect(),
        Some(imports),
        None,
    )
    .await;
    std::fs::write(
        world.config.join("gateway.yaml"),
        format!(
            "allowLoopbackEndpoints: true\nimports:\n  portRange: {range}\n  podAddresses: [{pod_range}]\n"
        ),
    )
    .expect("write gateway.yaml");
    let gateway = world.gateways[0].addresses().tunnel.ip();
    let printed = per_pod_services(&strait_imports(&world.config, "c1"), "pg");
    assert_eq!(printed.len(), 2, "one per remote pod: {printed:?}");
    let mut addresses = std::collections::BTreeSet::new();
    for (pod, service) in &printed {
        let import = service.import_port;
        // The pod's name, and c3's gateway as the one that dialled it.
        let expected = format!("c3-{pod} {}", gateway_ip(3));
        let cluster_ip = service
            .cluster_ip
            .unwrap_or_else(|| panic!("{pod} has an address: {printed:?}"));
        assert_eq!(service.port, target, "{pod} exposes the pod's own port");
        assert!(
            vips.contains(&cluster_ip),
            "{cluster_ip} is from {pod_range}"
        );
        addresses.insert(cluster_ip);
        for _ in 0..3 {
            assert_eq!(
                greeting_at(SocketAddr::new(gateway, import)).await,
                expected,
                "{pod} via its import port {import}"
            );
            assert_eq!(
                greeting_at(SocketAddr::new(cluster_ip, target)).await,
                expected,
                "{pod} via its address on this side"
            );
        }
    }
    assert_eq!(addresses.len(), 2, "two pods, two addresses");
}
