//! The transparent path on loopback: a client that speaks no proxy
//! protocol connects to a gateway's import port, as kube-proxy's DNAT of a
//! ClusterSetIP would make it, and reaches the right backend. The import
//! port comes from `strait imports` on the same files, the way a user of a
//! file setup finds it.

use std::net::SocketAddr;
use std::process::Command;

use serde_json::Value;

use super::*;

/// Hands each run of the test its own import port range.
static NEXT_RANGE: std::sync::atomic::AtomicU16 = std::sync::atomic::AtomicU16::new(0);

/// The import port of `namespace/name:port` that `strait imports` prints
/// for `cluster` (the derived Service's `targetPort`).
pub fn import_port(config: &std::path::Path, cluster: &str, name: &str, port: u16) -> u16 {
    let output = Command::new(env!("CARGO_BIN_EXE_strait"))
        .args(["imports", "--config"])
        .arg(config)
        .args(["--cluster", cluster, "--output", "json"])
        .output()
        .expect("strait imports runs");
    assert!(
        output.status.success(),
        "strait imports: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let list: Value = serde_json::from_slice(&output.stdout).expect("a JSON List");
    assert_eq!(list["kind"], "List");
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
