//! What a caller gets beside TCP bytes, measured side by side in one run on
//! loopback, with in-process gateways (the harness of `tests/support/`):
//!
//! - **UDP request/response**: one flow (one client socket) sending a
//!   64-byte datagram and waiting for its echo, 2,000 times (`--quick`:
//!   200): p50 and p99 of one exchange, on four paths: straight to the
//!   backend (the peer: no gateway), through c1's UDP import port to c2's
//!   pod (same network: a UDP socket), and to c3's pod through the tunnel
//!   over QUIC and over HTTP/2 (a second c1 gateway with
//!   `tunnel.transport: h2`), the datagrams as capsules on a stream.
//! - **UDP throughput**: one flow keeping 32 datagrams of 1,200 bytes in
//!   flight for 2 s (`--quick`: 0.3 s): echoed datagrams per second, on the
//!   same paths.
//! - **PROXY header cost**: CONNECT connections opened and closed one after
//!   another through c1's egress listener to a c2 pod (direct path), to a
//!   service that asks for the PROXY protocol and one that does not, in
//!   alternating blocks of 100: connections per second, 1,000 each per
//!   round (`--quick`: 200).
//!
//! Every measurement runs in 3 interleaved rounds (path A, B, … then again),
//! so drift on this shared machine hits all paths alike; each row prints
//! the median of the rounds and its ratio to the peer row.
//!
//! `cargo bench --bench callers` (under a minute), `-- --quick`. Under
//! `cargo test` (no `--bench`) it runs the quick variant.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a bench may panic on what it set up

#[path = "../tests/support/mod.rs"]
mod support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use strait::config::ImportSettings;
use strait::tunnel::TransportMode;
use support::{Pod, ServiceSpec, bind_gateway, certificates, pod_ip, start_gateway_importing};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};

const ROUNDS: usize = 3;
const EXPORTED: Option<&str> = Some("2026-01-01T00:00:00Z");
/// Where the bench's pods listen (UDP and TCP).
const POD_PORT: u16 = 18_053;

struct Sizes {
    exchanges: usize,
    flood: Duration,
    connections: usize,
}

fn udp_service(name: &'static str) -> ServiceSpec<'static> {
    ServiceSpec {
        namespace: "app",
        name,
        ports: &[],
        exported_at: EXPORTED,
        pods: Vec::new(),
        proxy_protocol: false,
        udp_ports: &[("dns", 53, POD_PORT)],
    }
}

fn tcp_service(name: &'static str, proxy_protocol: bool) -> ServiceSpec<'static> {
    ServiceSpec {
        namespace: "app",
        name,
        ports: &[("tcp", 80, POD_PORT)],
        exported_at: EXPORTED,
        pods: vec![Pod::ready(pod_ip(2, 0))],
        proxy_protocol,
        udp_ports: &[],
    }
}

/// A UDP echo server on `address`.
async fn udp_echo(address: SocketAddr) {
    let socket = UdpSocket::bind(address).await.expect("bind udp echo");
    tokio::spawn(async move {
        let mut buffer = vec![0u8; 65_536];
        while let Ok((length, from)) = socket.recv_from(&mut buffer).await {
            let _ = socket.send_to(&buffer[..length], from).await;
        }
    });
}

/// A TCP server on `address` that reads each connection to its end.
async fn tcp_sink(address: SocketAddr) {
    let listener = TcpListener::bind(address).await.expect("bind tcp sink");
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buffer = [0u8; 1024];
                while matches!(stream.read(&mut buffer).await, Ok(n) if n > 0) {}
            });
        }
    });
}

/// p50 and p99 of `exchanges` request/response rounds on one flow.
async fn round_trips(to: SocketAddr, exchanges: usize) -> (Duration, Duration) {
    let socket = UdpSocket::bind("127.0.0.1:0").await.expect("bind client");
    socket.connect(to).await.expect("connect");
    let request = [7u8; 64];
    let mut buffer = [0u8; 256];
    let mut samples = Vec::with_capacity(exchanges);
    // The first exchange opens the flow (and maybe a tunnel stream).
    for _ in 0..exchanges + 1 {
        let started = Instant::now();
        loop {
            socket.send(&request).await.expect("send");
            match tokio::time::timeout(Duration::from_secs(1), socket.recv(&mut buffer)).await {
                Ok(Ok(64)) => break,
                _ => continue,
            }
        }
        samples.push(started.elapsed());
    }
    samples.remove(0);
    samples.sort();
    (
        samples[samples.len() / 2],
        samples[samples.len() * 99 / 100],
    )
}

/// Echoed datagrams per second with 32 of 1,200 bytes in flight.
async fn throughput(to: SocketAddr, lasting: Duration) -> f64 {
    let socket = Arc::new(UdpSocket::bind("127.0.0.1:0").await.expect("bind client"));
    socket.connect(to).await.expect("connect");
    let payload = [9u8; 1200];
    // Open the flow first.
    round_trips(to, 1).await;
    let _ = socket.send(&payload).await;
    let mut buffer = vec![0u8; 2048];
    let mut in_flight = 0usize;
    let mut echoed = 0u64;
    let started = Instant::now();
    while started.elapsed() < lasting {
        while in_flight < 32 {
            socket.send(&payload).await.expect("send");
            in_flight += 1;
        }
        match tokio::time::timeout(Duration::from_millis(50), socket.recv(&mut buffer)).await {
            Ok(Ok(_)) => {
                echoed += 1;
                in_flight -= 1;
            }
            // A lost datagram frees its slot.
            _ => in_flight = 0,
        }
    }
    echoed as f64 / started.elapsed().as_secs_f64()
}

/// CONNECT connections per second to `authority` through `connect`.
async fn connection_rate(connect: SocketAddr, authority: &str, count: usize) -> f64 {
    let request = format!("CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n");
    let started = Instant::now();
    for _ in 0..count {
        let mut stream = TcpStream::connect(connect).await.expect("connect listener");
        stream.write_all(request.as_bytes()).await.expect("request");
        let mut head = [0u8; 12];
        stream.read_exact(&mut head).await.expect("status line");
        assert_eq!(&head[9..12], b"200", "{}", String::from_utf8_lossy(&head));
    }
    count as f64 / started.elapsed().as_secs_f64()
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn main() {
    let quick =
        !std::env::args().any(|a| a == "--bench") || std::env::args().any(|a| a == "--quick");
    let sizes = if quick {
        Sizes {
            exchanges: 200,
            flood: Duration::from_millis(300),
            connections: 200,
        }
    } else {
        Sizes {
            exchanges: 2_000,
            flood: Duration::from_secs(2),
            connections: 1_000,
        }
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(run(sizes));
}

async fn run(sizes: Sizes) {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = dir.path().join("config");
    let certs = certificates(dir.path(), &["c1", "c2", "c3"]);
    let direct_backend = SocketAddr::new(pod_ip(3, 0), POD_PORT);
    udp_echo(SocketAddr::new(pod_ip(2, 0), POD_PORT)).await;
    udp_echo(direct_backend).await;
    tcp_sink(SocketAddr::new(pod_ip(2, 0), POD_PORT)).await;

    // c1 twice (QUIC and HTTP/2 clients), c2 on c1's network, c3 on another.
    let (l1, l4, l2, l3) = (
        bind_gateway(1).await,
        bind_gateway(4).await,
        bind_gateway(2).await,
        bind_gateway(3).await,
    );
    let tunnel = |l: &strait::gateway::Listeners| l.tunnel.local_addr().expect("tunnel");
    let near = ServiceSpec {
        pods: vec![Pod::ready(pod_ip(2, 0))],
        ..udp_service("near")
    };
    let far = ServiceSpec {
        pods: vec![Pod::ready(pod_ip(3, 0))],
        ..udp_service("far")
    };
    let c2_services = [near, tcp_service("plain", false), tcp_service("told", true)];
    support::write_cluster(
        &config,
        "c1",
        &support::cluster_yaml("c1", "net-a", tunnel(&l1), &[]),
    );
    support::write_cluster(
        &config,
        "c2",
        &support::cluster_yaml("c2", "net-a", tunnel(&l2), &c2_services),
    );
    support::write_cluster(
        &config,
        "c3",
        &support::cluster_yaml("c3", "net-b", tunnel(&l3), &[far]),
    );
    let imports = ImportSettings {
        port_range: strait::imports::PortRange::new(34_000, 34_099).expect("range"),
        ..Default::default()
    };
    let c1_connect = l1.connect.local_addr().expect("connect");
    let c1 = start_gateway_importing(
        &config,
        &certs,
        "c1",
        1,
        l1,
        TransportMode::Quic,
        imports.clone(),
    )
    .await;
    let c1_h2 = start_gateway_importing(
        &config,
        &certs,
        "c1",
        4,
        l4,
        TransportMode::H2,
        imports.clone(),
    )
    .await;
    let _c2 = start_gateway_importing(
        &config,
        &certs,
        "c2",
        2,
        l2,
        TransportMode::Auto,
        imports.clone(),
    )
    .await;
    let _c3 =
        start_gateway_importing(&config, &certs, "c3", 3, l3, TransportMode::Auto, imports).await;
    let import_port = |gateway: &strait::gateway::Gateway, name: &str| {
        let table = gateway.state().routes.load_full();
        let port = table
            .import_ports()
            .find(|(_, key)| key.service.name == name && key.port == 53)
            .map(|(port, _)| port)
            .unwrap_or_else(|| panic!("no import port for {name}:53"));
        SocketAddr::new(gateway.addresses().connect.ip(), port)
    };
    let paths: [(&str, SocketAddr); 4] = [
        ("udp: straight to the backend (peer)", direct_backend),
        (
            "udp: import port, direct (same network)",
            import_port(&c1, "near"),
        ),
        (
            "udp: import port, tunnel over QUIC",
            import_port(&c1, "far"),
        ),
        (
            "udp: import port, tunnel over HTTP/2",
            import_port(&c1_h2, "far"),
        ),
    ];

    let mut latency: Vec<(Vec<f64>, Vec<f64>)> = vec![(Vec::new(), Vec::new()); paths.len()];
    let mut rate: Vec<Vec<f64>> = vec![Vec::new(); paths.len()];
    for _ in 0..ROUNDS {
        for (index, (_, to)) in paths.iter().enumerate() {
            let (p50, p99) = round_trips(*to, sizes.exchanges).await;
            latency[index].0.push(p50.as_secs_f64() * 1e6);
            latency[index].1.push(p99.as_secs_f64() * 1e6);
            rate[index].push(throughput(*to, sizes.flood).await);
        }
    }
    println!(
        "callers bench: {} rounds, medians; ratio to the peer row",
        ROUNDS
    );
    println!(
        "{:<44} {:>10} {:>10} {:>14} {:>8}",
        "path", "p50 µs", "p99 µs", "datagrams/s", "ratio"
    );
    let peer_rate = median(&mut rate[0].clone());
    for (index, (name, _)) in paths.iter().enumerate() {
        let per_second = median(&mut rate[index]);
        println!(
            "{:<44} {:>10.0} {:>10.0} {:>14.0} {:>8.2}",
            name,
            median(&mut latency[index].0),
            median(&mut latency[index].1),
            per_second,
            per_second / peer_rate
        );
    }

    let authorities = [
        (
            "tcp: CONNECT, no PROXY header (peer)",
            "plain.app.svc.clusterset.local:80",
        ),
        (
            "tcp: CONNECT, PROXY v2 header",
            "told.app.svc.clusterset.local:80",
        ),
    ];
    // Blocks of 100 connections alternate between the two services, so
    // drift (and the TIME_WAIT sockets each connection leaves) falls on
    // both alike.
    let mut connections: Vec<Vec<f64>> = vec![Vec::new(); authorities.len()];
    for _ in 0..ROUNDS {
        let mut spent = [Duration::ZERO; 2];
        for _ in 0..sizes.connections / 100 {
            for (index, (_, authority)) in authorities.iter().enumerate() {
                let started = Instant::now();
                connection_rate(c1_connect, authority, 100).await;
                spent[index] += started.elapsed();
            }
        }
        for (index, spent) in spent.iter().enumerate() {
            connections[index].push(sizes.connections as f64 / spent.as_secs_f64());
        }
    }
    let plain = median(&mut connections[0].clone());
    println!("{:<44} {:>14} {:>8}", "connection rate", "conn/s", "ratio");
    for (index, (name, _)) in authorities.iter().enumerate() {
        let per_second = median(&mut connections[index]);
        println!(
            "{:<44} {:>14.0} {:>8.2}",
            name,
            per_second,
            per_second / plain
        );
    }
}
