//! Loopback integration tests of the data plane: real gateways with real TLS
//! on 127.0.0.0/8 addresses, echo backends standing in for pods, clients
//! speaking HTTP CONNECT. Cluster `cN`'s gateway dials from 127.0.N.1, so a
//! backend's view of its peer tells whether a connection came direct or
//! through a tunnel.
//!
//! Topology: c1 and c2 share network net-a; c3 is alone on net-b.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on what they set up

mod support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use strait::admin::Metrics;
use strait::gateway::Gateway;
use strait::model::{ClusterId, GatewayAddress, GatewayHost, Protocol};
use strait::net::dial::DialOptions;
use strait::tls::ReloadingTls;
use strait::tunnel::client::{TunnelError, TunnelPool};
use strait::tunnel::quic::client::QuicPool;
use strait::tunnel::{TransportMode, TunnelSettings};
use support::*;

#[path = "dataplane/authorization.rs"]
mod authorization;
#[path = "dataplane/head_of_line.rs"]
mod head_of_line;
#[path = "dataplane/import_ports.rs"]
mod import_ports;
#[path = "dataplane/isolation.rs"]
mod isolation;
#[path = "dataplane/locality.rs"]
mod locality;
#[path = "dataplane/silent_peer.rs"]
mod silent_peer;
#[path = "dataplane/tunnel_server.rs"]
mod tunnel_server;
use authorization::{
    a_caller_of_another_certificate_authority_is_refused,
    callers_are_authorised_by_their_certificate,
};
use head_of_line::stuck_readers_do_not_stall_the_other_streams_of_their_connection;
use import_ports::{
    a_remote_pods_import_port_and_address_reach_that_pod, an_import_port_selects_service_and_port,
};
use isolation::a_bad_object_stops_only_itself_under_traffic;
use locality::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tunnel_server::the_tunnel_server_dials_nothing_it_should_not;

const EXPORTED_EARLY: Option<&str> = Some("2026-01-01T00:00:00Z");
const EXPORTED_LATE: Option<&str> = Some("2026-02-01T00:00:00Z");

struct World {
    _dir: tempfile::TempDir,
    config: std::path::PathBuf,
    certs: std::path::PathBuf,
    gateways: Vec<Gateway>,
    tunnels: Vec<SocketAddr>,
}

impl World {
    /// Starts c1, c2 (net-a) and c3 (net-b) with the services `services(n)`
    /// gives for cluster number n, using the tunnel addresses it is handed.
    async fn start(
        transport: TransportMode,
        services: impl Fn(u8) -> Vec<ServiceSpec<'static>>,
    ) -> World {
        Self::start_with(|_| transport, services, |_| String::new(), Vec::new()).await
    }

    /// As `start`, with more YAML per cluster and ClusterSetIP listeners for c1.
    async fn start_with(
        transport_of: impl Fn(u8) -> TransportMode,
        services: impl Fn(u8) -> Vec<ServiceSpec<'static>>,
        extra_yaml: impl Fn(u8) -> String,
        c1_vips: Vec<SocketAddr>,
    ) -> World {
        Self::start_inner(transport_of, services, extra_yaml, c1_vips, None, None).await
    }

    /// As `start`, with import listeners on c1 (`imports`).
    async fn start_importing(
        transport: TransportMode,
        services: impl Fn(u8) -> Vec<ServiceSpec<'static>>,
        imports: strait::config::ImportSettings,
    ) -> World {
        Self::start_inner(
            |_| transport,
            services,
            |_| String::new(),
            Vec::new(),
            Some(imports),
            None,
        )
        .await
    }

    async fn start_inner(
        transport_of: impl Fn(u8) -> TransportMode,
        services: impl Fn(u8) -> Vec<ServiceSpec<'static>>,
        extra_yaml: impl Fn(u8) -> String,
        c1_vips: Vec<SocketAddr>,
        c1_imports: Option<strait::config::ImportSettings>,
        c1_tune: Option<fn(&mut strait::config::GatewaySettings)>,
    ) -> World {
        let dir = tempfile::tempdir().expect("temp dir");
        let config = dir.path().join("config");
        // `outsider`: signed by the cluster set's CA, but no cluster of the set.
        let certs = certificates(dir.path(), &["c1", "c2", "c3", "outsider"]);
        let mut listeners = Vec::new();
        let mut tunnels = Vec::new();
        for n in 1..=3u8 {
            let mut bound = bind_gateway(n).await;
            if n == 1 {
                for vip in &c1_vips {
                    bound
                        .cluster_set_ip
                        .push(tokio::net::TcpListener::bind(vip).await.expect("bind vip"));
                }
            }
            tunnels.push(bound.tunnel.local_addr().expect("tunnel address"));
            listeners.push(bound);
        }
        for n in 1..=3u8 {
            let network = if n == 3 { "net-b" } else { "net-a" };
            let id = format!("c{n}");
            let yaml = cluster_yaml(&id, network, tunnels[usize::from(n - 1)], &services(n))
                + &extra_yaml(n);
            write_cluster(&config, &id, &yaml);
        }
        let mut gateways = Vec::new();
        for (index, bound) in listeners.into_iter().enumerate() {
            let n = u8::try_from(index + 1).expect("few clusters");
            let id = format!("c{n}");
            let gateway = match (&c1_imports, c1_tune.filter(|_| n == 1)) {
                (_, Some(tune)) => {
                    let tunnel = TunnelSettings {
                        transport: transport_of(n),
                        ..TunnelSettings::default()
                    };
                    start_gateway_tuned(&config, &certs, &id, n, bound, tunnel, tune).await
                }
                (Some(imports), None) if n == 1 => {
                    let imports = imports.clone();
                    start_gateway_importing(
                        &config,
                        &certs,
                        &id,
                        n,
                        bound,
                        transport_of(n),
                        imports,
                    )
                    .await
                }
                _ => start_gateway(&config, &certs, &id, n, bound, transport_of(n)).await,
            };
            gateways.push(gateway);
        }
        World {
            _dir: dir,
            config,
            certs,
            gateways,
            tunnels,
        }
    }

    /// c1, c2 and c3 with `app/echo` port 42 exported by c3 alone, served
    /// by one echo pod of c3 (tunnelled from c1 and c2).
    async fn with_one_c3_echo_pod(transport: TransportMode) -> (World, Vec<Backend>) {
        let backends = backends_on_one_port(&[("c3-pod", pod_ip(3, 0))]).await;
        let target = backends[0].address.port();
        let ports: &'static [(&str, u16, u16)] = Box::leak(Box::new([("tcp", 42, target)]));
        let world = World::start(transport, |n| match n {
            3 => vec![echo_service(
                ports,
                EXPORTED_EARLY,
                vec![Pod::ready(pod_ip(3, 0))],
            )],
            _ => Vec::new(),
        })
        .await;
        (world, backends)
    }

    fn connect_address(&self, n: u8) -> SocketAddr {
        self.gateways[usize::from(n - 1)].addresses().connect
    }
}

fn echo_service(
    ports: &'static [(&'static str, u16, u16)],
    exported_at: Option<&'static str>,
    pods: Vec<Pod>,
) -> ServiceSpec<'static> {
    ServiceSpec {
        namespace: "app",
        name: "echo",
        ports,
        exported_at,
        pods,
        proxy_protocol: false,
        udp_ports: &[],
    }
}

/// Backends share one port number across clusters so that EndpointSlices can name it.
async fn backends_on_one_port(names_and_ips: &[(&str, std::net::IpAddr)]) -> Vec<Backend> {
    let mut backends = Vec::new();
    let mut port = 0;
    for (name, ip) in names_and_ips {
        let backend = Backend::start(name, SocketAddr::new(*ip, port)).await;
        port = backend.address.port();
        backends.push(backend);
    }
    backends
}

async fn ports_go_only_to_clusters_that_declare_them(transport: TransportMode) {
    let backends =
        backends_on_one_port(&[("c2-pod", pod_ip(2, 0)), ("c3-pod", pod_ip(3, 0))]).await;
    let target = backends[0].address.port();
    // (c): c2 declares tcp:42; c3 declares tcp:4242 whose pods listen on the
    // same target port. (d): c3's port has another name, so both are exposed.
    let c2_ports: &'static [(&str, u16, u16)] = Box::leak(Box::new([("tcp", 42, target)]));
    let c3_ports: &'static [(&str, u16, u16)] = Box::leak(Box::new([("tcp2", 4242, target)]));
    let world = World::start(transport, |n| match n {
        2 => vec![echo_service(
            c2_ports,
            EXPORTED_EARLY,
            vec![Pod::ready(pod_ip(2, 0))],
        )],
        3 => vec![echo_service(
            c3_ports,
            EXPORTED_LATE,
            vec![Pod::ready(pod_ip(3, 0))],
        )],
        _ => Vec::new(),
    })
    .await;
    for _ in 0..20 {
        let to_42 = connect(world.connect_address(1), "echo.app.svc.clusterset.local:42").await;
        assert_eq!(to_42.greeting, "c2-pod 127.0.1.1");
        let to_4242 = connect(
            world.connect_address(1),
            "echo.app.svc.clusterset.local:4242",
        )
        .await;
        assert_eq!(to_4242.greeting, "c3-pod 127.0.3.1");
    }
    let undeclared = connect(world.connect_address(1), "echo.app.svc.clusterset.local:43").await;
    assert_eq!(undeclared.status, 403);
    let unknown = connect(world.connect_address(1), "nope.app.svc.clusterset.local:42").await;
    assert_eq!(unknown.status, 404);
    let address = connect(world.connect_address(1), &backends[0].address.to_string()).await;
    assert_eq!(
        address.status, 403,
        "clients name services, never addresses"
    );
}

async fn two_hundred_tunnelled_connections_echo_a_mebibyte_each(transport: TransportMode) {
    let (world, _backends) = World::with_one_c3_echo_pod(transport).await;
    let connect_address = world.connect_address(1);
    let mut tasks = Vec::new();
    for index in 0..200u32 {
        tasks.push(tokio::spawn(async move {
            let payload: Vec<u8> = (0..1024 * 1024u32)
                .map(|i| (i.wrapping_mul(31).wrapping_add(index) % 251) as u8)
                .collect();
            let connected = connect(connect_address, "echo.app.svc.clusterset.local:42").await;
            assert_eq!(connected.status, 200);
            assert_eq!(connected.greeting, "c3-pod 127.0.3.1");
            let stream = connected.stream.expect("open stream");
            let received = echo(stream, &payload).await;
            assert!(received == payload, "connection {index}: echo differs");
        }));
    }
    for task in tasks {
        task.await.expect("transfer task");
    }
    let pools = tunnel_connections(&world.gateways[0], transport);
    let connections: usize = pools.iter().map(|(_, open)| open).sum();
    // HTTP/2 bounds streams per connection and opens more when full; QUIC
    // carries every stream on one connection per peer.
    let expected = match transport {
        TransportMode::Quic => 1..=1,
        _ => 2..=10,
    };
    assert!(
        expected.contains(&connections),
        "200 streams share {expected:?} pooled connections, got {pools:?}"
    );
}

/// A tunnel client holding `cluster`'s certificate from `certs`, speaking
/// the transport under test, as a peer gateway would.
enum TestClient {
    H2(TunnelPool),
    Quic(QuicPool),
}

/// A tunnelled stream of either transport.
trait Stream: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send> Stream for T {}

impl TestClient {
    fn new(certs: &std::path::Path, cluster: &str, transport: TransportMode) -> TestClient {
        let tls = Arc::new(ReloadingTls::load(&certs.join(cluster)).expect("client certificate"));
        let settings = TunnelSettings::default();
        let metrics = Arc::new(Metrics::new());
        match transport {
            TransportMode::Quic => TestClient::Quic(
                QuicPool::new("127.0.0.1:0".parse().expect("addr"), tls, settings, metrics)
                    .expect("quic client"),
            ),
            _ => TestClient::H2(TunnelPool::new(
                settings,
                tls,
                DialOptions {
                    timeout: Duration::from_secs(2),
                    source: None,
                },
                metrics,
            )),
        }
    }

    async fn connect(
        &self,
        gateway: &GatewayAddress,
        allowed: &[ClusterId],
        authority: &str,
    ) -> Result<Box<dyn Stream>, TunnelError> {
        match self {
            TestClient::H2(pool) => pool
                .connect(gateway, None, allowed, authority)
                .await
                .map(|s| Box::new(s) as Box<dyn Stream>),
            TestClient::Quic(pool) => pool
                .connect(gateway, None, allowed, authority)
                .await
                .map(|s| Box::new(s) as Box<dyn Stream>),
        }
    }
}

/// Open tunnel connections per peer of a gateway, for the transport under test.
fn tunnel_connections(gateway: &Gateway, transport: TransportMode) -> Vec<(String, usize)> {
    let state = gateway.state();
    match (transport, &state.quic) {
        (TransportMode::Quic, Some(quic)) => quic.connection_counts(),
        _ => state.pool.connection_counts(),
    }
}

fn gateway_of(address: SocketAddr) -> GatewayAddress {
    GatewayAddress {
        host: GatewayHost::Ip(address.ip()),
        port: address.port(),
    }
}

async fn a_reload_keeps_open_connections_and_moves_new_ones(transport: TransportMode) {
    let backends =
        backends_on_one_port(&[("c3-pod", pod_ip(3, 0)), ("c2-pod", pod_ip(2, 0))]).await;
    let target = backends[0].address.port();
    let ports: &'static [(&str, u16, u16)] = Box::leak(Box::new([("tcp", 42, target)]));
    let world = World::start(transport, |n| match n {
        3 => vec![echo_service(
            ports,
            EXPORTED_EARLY,
            vec![Pod::ready(pod_ip(3, 0))],
        )],
        _ => Vec::new(),
    })
    .await;
    let connected = connect(world.connect_address(1), "echo.app.svc.clusterset.local:42").await;
    assert_eq!(connected.greeting, "c3-pod 127.0.3.1");
    let mut open = connected.stream.expect("open stream");
    open.write_all(b"before").await.expect("write");
    let mut buffer = [0u8; 6];
    open.read_exact(&mut buffer)
        .await
        .expect("echo before reload");

    // The service moves from c3 to c2 while the connection stays open.
    write_cluster(
        &world.config,
        "c3",
        &cluster_yaml("c3", "net-b", world.tunnels[2], &[]),
    );
    write_cluster(
        &world.config,
        "c2",
        &cluster_yaml(
            "c2",
            "net-a",
            world.tunnels[1],
            &[echo_service(
                ports,
                EXPORTED_EARLY,
                vec![Pod::ready(pod_ip(2, 0))],
            )],
        ),
    );
    let c1 = world.gateways[0].state().clone();
    let moved = eventually(Duration::from_secs(10), || {
        c1.routes
            .load()
            .lookup("app", "echo", Protocol::Tcp, 42)
            .is_some_and(|route| {
                route
                    .backends
                    .iter()
                    .all(|b| b.backend.cluster.as_str() == "c2")
            })
    })
    .await;
    assert!(moved, "c1 reloaded its routes");
    let fresh = connect(world.connect_address(1), "echo.app.svc.clusterset.local:42").await;
    assert_eq!(fresh.greeting, "c2-pod 127.0.1.1");

    // A broken viewer (c1's own folder) leaves nothing usable: the update
    // is refused and the last good routes stay.
    let c1_file = world.config.join("clusters/c1/objects.yaml");
    let c1_yaml = std::fs::read_to_string(&c1_file).expect("c1's objects");
    write_cluster(&world.config, "c1", "apiVersion: v1\nkind: [broken\n");
    tokio::time::sleep(Duration::from_millis(600)).await;
    let still = connect(world.connect_address(1), "echo.app.svc.clusterset.local:42").await;
    assert_eq!(still.greeting, "c2-pod 127.0.1.1");
    let metric = |name: &str| {
        c1.metrics
            .encode()
            .lines()
            .filter_map(|line| line.strip_prefix(name))
            .filter_map(|value| value.trim().parse::<f64>().ok())
            .sum::<f64>()
    };
    assert!(
        metric("strait_reloads_total{kind=\"routes\",result=\"error\"}") >= 1.0,
        "the unusable update is counted as refused"
    );

    // A broken c2 leaves out c2 alone: c3 exporting echo again is picked
    // up, and the exclusion is counted.
    write_cluster(&world.config, "c1", &c1_yaml);
    write_cluster(&world.config, "c2", "apiVersion: v1\nkind: [broken\n");
    write_cluster(
        &world.config,
        "c3",
        &cluster_yaml(
            "c3",
            "net-b",
            world.tunnels[2],
            &[echo_service(
                ports,
                EXPORTED_EARLY,
                vec![Pod::ready(pod_ip(3, 0))],
            )],
        ),
    );
    let back = eventually(Duration::from_secs(10), || {
        c1.routes
            .load()
            .lookup("app", "echo", Protocol::Tcp, 42)
            .is_some_and(|route| {
                !route.backends.is_empty()
                    && route
                        .backends
                        .iter()
                        .all(|b| b.backend.cluster.as_str() == "c3")
            })
    })
    .await;
    assert!(back, "c1 follows c3 while c2 is broken");
    let fresh = connect(world.connect_address(1), "echo.app.svc.clusterset.local:42").await;
    assert_eq!(fresh.greeting, "c3-pod 127.0.3.1");
    let invalid: Vec<String> = c1
        .metrics
        .encode()
        .lines()
        .filter(|line| line.starts_with("strait_invalid_objects{"))
        .map(str::to_owned)
        .collect();
    assert!(
        invalid.iter().any(|line| line.contains("clusters/c2")),
        "c2's broken file is counted: {invalid:?}"
    );
    let clusters = admin_get(world.gateways[0].addresses().admin, "/debug/clusters").await;
    assert!(
        clusters.contains("\"excluded\"") && clusters.contains("clusters/c2"),
        "/debug/clusters names the exclusion: {clusters}"
    );

    // The connection opened before both reloads still carries bytes both ways.
    open.write_all(b"after!").await.expect("write after reload");
    open.read_exact(&mut buffer)
        .await
        .expect("echo after reload");
    assert_eq!(&buffer, b"after!");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_dial_retries_another_backend_and_the_dead_one_is_ejected() {
    let backends = backends_on_one_port(&[("c2-pod", pod_ip(2, 0))]).await;
    let target = backends[0].address.port();
    let dead = SocketAddr::new(pod_ip(2, 1), target);
    let ports: &'static [(&str, u16, u16)] = Box::leak(Box::new([("tcp", 42, target)]));
    let world = World::start(TransportMode::Auto, |n| match n {
        2 => vec![echo_service(
            ports,
            EXPORTED_EARLY,
            vec![Pod::ready(pod_ip(2, 0)), Pod::ready(dead.ip())],
        )],
        _ => Vec::new(),
    })
    .await;
    for _ in 0..30 {
        let connected = connect(world.connect_address(1), "echo.app.svc.clusterset.local:42").await;
        assert_eq!(
            connected.greeting, "c2-pod 127.0.1.1",
            "every connection reaches the live pod"
        );
    }
    let ejected = world.gateways[0]
        .state()
        .chooser
        .ejected(std::time::Instant::now());
    assert!(
        ejected.iter().any(|(id, _)| id.address == dead),
        "the dead pod is ejected: {ejected:?}"
    );
}

async fn a_failing_gateway_of_a_network_is_skipped(transport: TransportMode) {
    let backends = backends_on_one_port(&[("c3-pod", pod_ip(3, 0))]).await;
    let ports: &'static [(&str, u16, u16)] =
        Box::leak(Box::new([("tcp", 42, backends[0].address.port())]));
    let services = |n: u8| match n {
        3 => vec![echo_service(
            ports,
            EXPORTED_EARLY,
            vec![Pod::ready(pod_ip(3, 0))],
        )],
        _ => Vec::new(),
    };
    let world = World::start(transport, services).await;
    // c3's gateway Service now lists a dead replica first.
    let dead_replica = "127.0.3.2".parse().expect("ip");
    write_cluster(
        &world.config,
        "c3",
        &cluster_yaml_with_gateways(
            "c3",
            "net-b",
            &[dead_replica, gateway_ip(3)],
            world.tunnels[2].port(),
            &services(3),
        ),
    );
    let c1 = world.gateways[0].state().clone();
    let updated = eventually(Duration::from_secs(10), || {
        c1.routes
            .load()
            .lookup("app", "echo", Protocol::Tcp, 42)
            .and_then(|route| route.backends.first())
            .is_some_and(|backend| match backend.path() {
                strait::routing::Path::Tunnel { gateways } => gateways.len() == 2,
                strait::routing::Path::Direct => false,
            })
    })
    .await;
    assert!(updated, "c1 learned both replicas");
    for _ in 0..10 {
        let connected = connect(world.connect_address(1), "echo.app.svc.clusterset.local:42").await;
        assert_eq!(connected.greeting, "c3-pod 127.0.3.1");
    }
    let pools = tunnel_connections(&world.gateways[0], transport);
    assert!(
        pools
            .iter()
            .any(|(peer, open)| peer.starts_with("127.0.3.1:") && *open > 0),
        "{pools:?}"
    );
    assert!(
        pools
            .iter()
            .all(|(peer, open)| !peer.starts_with("127.0.3.2:") || *open == 0),
        "{pools:?}"
    );
}

async fn a_cluster_set_ip_selects_service_and_port(transport: TransportMode) {
    let backends = backends_on_one_port(&[("c3-pod", pod_ip(3, 0))]).await;
    let ports: &'static [(&str, u16, u16)] =
        Box::leak(Box::new([("tcp", 4242, backends[0].address.port())]));
    let vip: std::net::IpAddr = "127.0.1.100".parse().expect("ip");
    let world = World::start_with(
        |_| transport,
        |n| match n {
            3 => vec![echo_service(
                ports,
                EXPORTED_EARLY,
                vec![Pod::ready(pod_ip(3, 0))],
            )],
            _ => Vec::new(),
        },
        |n| {
            if n == 1 {
                import_yaml("echo", vip)
            } else {
                String::new()
            }
        },
        vec![SocketAddr::new(vip, 4242)],
    )
    .await;
    let stream = tokio::net::TcpStream::connect(SocketAddr::new(vip, 4242))
        .await
        .expect("dial the VIP");
    let mut stream = tokio::io::BufReader::new(stream);
    let mut greeting = String::new();
    tokio::io::AsyncBufReadExt::read_line(&mut stream, &mut greeting)
        .await
        .expect("greeting");
    assert_eq!(greeting, "c3-pod 127.0.3.1\n");
    let echoed = echo(stream, b"through the vip").await;
    assert_eq!(echoed, b"through the vip");
    drop(world);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_stops_accepting_and_drains_open_connections() {
    let backends = backends_on_one_port(&[("c2-pod", pod_ip(2, 0))]).await;
    let ports: &'static [(&str, u16, u16)] =
        Box::leak(Box::new([("tcp", 42, backends[0].address.port())]));
    let mut world = World::start(TransportMode::Auto, |n| match n {
        2 => vec![echo_service(
            ports,
            EXPORTED_EARLY,
            vec![Pod::ready(pod_ip(2, 0))],
        )],
        _ => Vec::new(),
    })
    .await;
    let connect_address = world.connect_address(1);
    let connected = connect(connect_address, "echo.app.svc.clusterset.local:42").await;
    let mut open = connected.stream.expect("open stream");

    let gateway = world.gateways.remove(0);
    let started = std::time::Instant::now();
    let shutdown = tokio::spawn(gateway.shutdown(Duration::from_secs(20)));
    let refused = eventually(Duration::from_secs(5), || {
        std::net::TcpStream::connect(connect_address).is_err()
    })
    .await;
    assert!(refused, "the connect listener closed");

    open.write_all(b"draining")
        .await
        .expect("write while draining");
    let mut buffer = [0u8; 8];
    open.read_exact(&mut buffer)
        .await
        .expect("echo while draining");
    assert_eq!(&buffer, b"draining");
    assert!(
        !shutdown.is_finished(),
        "shutdown waits for the open connection"
    );
    drop(open);
    shutdown.await.expect("shutdown task");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "shutdown ended when the last connection closed, not at the deadline"
    );
}

/// Runs each tunnel scenario once over HTTP/2 and once over QUIC.
macro_rules! over_both_transports {
    ($($scenario:ident),* $(,)?) => {
        mod over_h2 {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $scenario() {
                    super::$scenario(strait::tunnel::TransportMode::H2).await
                }
            )*
        }
        mod over_quic {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $scenario() {
                    super::$scenario(strait::tunnel::TransportMode::Quic).await
                }
            )*
        }
    };
}

over_both_transports!(
    same_network_goes_direct_and_other_networks_through_the_gateway,
    ports_go_only_to_clusters_that_declare_them,
    two_hundred_tunnelled_connections_echo_a_mebibyte_each,
    stuck_readers_do_not_stall_the_other_streams_of_their_connection,
    the_tunnel_server_dials_nothing_it_should_not,
    a_caller_of_another_certificate_authority_is_refused,
    a_reload_keeps_open_connections_and_moves_new_ones,
    a_failing_gateway_of_a_network_is_skipped,
    a_cluster_set_ip_selects_service_and_port,
    an_import_port_selects_service_and_port,
    a_remote_pods_import_port_and_address_reach_that_pod,
    a_bad_object_stops_only_itself_under_traffic,
    callers_are_authorised_by_their_certificate,
    a_local_tier_short_of_its_minimum_keeps_only_its_share,
    a_fenced_service_is_served_only_inside_its_fence,
);

/// `auto` tries QUIC first; a peer that does not answer over UDP (here: a
/// gateway serving HTTP/2 only, so nothing listens on its UDP port) is
/// reached over HTTP/2 instead, and QUIC is not retried on every connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_falls_back_to_http2_when_the_peer_does_not_answer_quic() {
    let backends = backends_on_one_port(&[("c3-pod", pod_ip(3, 0))]).await;
    let ports: &'static [(&str, u16, u16)] =
        Box::leak(Box::new([("tcp", 42, backends[0].address.port())]));
    let world = World::start_with(
        |n| {
            if n == 3 {
                TransportMode::H2
            } else {
                TransportMode::Auto
            }
        },
        |n| match n {
            3 => vec![echo_service(
                ports,
                EXPORTED_EARLY,
                vec![Pod::ready(pod_ip(3, 0))],
            )],
            _ => Vec::new(),
        },
        |_| String::new(),
        Vec::new(),
    )
    .await;
    let first = connect(world.connect_address(1), "echo.app.svc.clusterset.local:42").await;
    assert_eq!(first.greeting, "c3-pod 127.0.3.1");
    let started = std::time::Instant::now();
    for _ in 0..5 {
        let again = connect(world.connect_address(1), "echo.app.svc.clusterset.local:42").await;
        assert_eq!(again.greeting, "c3-pod 127.0.3.1");
    }
    assert!(
        started.elapsed() < Duration::from_millis(900),
        "once QUIC failed, HTTP/2 is used without waiting for QUIC again"
    );
    let metrics = world.gateways[0].state().metrics.encode();
    assert!(
        metrics.contains("strait_connections_opened_total{path=\"tunnel\",transport=\"h2\"} 6"),
        "{metrics}"
    );
    assert!(!metrics.contains("transport=\"quic\"} 1"), "{metrics}");
}
