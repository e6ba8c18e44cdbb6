//! The tunnel server against hostile peers: raw HTTP/2 (the `h2` crate, and
//! frames written by hand over TLS) and raw QUIC (quinn) clients holding a
//! valid certificate of the cluster set, doing what a well-behaved gateway
//! never does. Each scenario checks the attack is cut short and, beside
//! it, that a legitimate caller still gets through.
//!
//! One real gateway (c3, net-b) on loopback; c1 and c2 (net-a) are its
//! callers. c3 exports `echo` (an echo backend) and `hole`, whose endpoint
//! is a listener whose accept queue is full, so a dial to it hangs until
//! the connect timeout: the stand-in for a black-holed backend.
//!
//! The scenarios run one at a time (they count the process's descriptors).
//! Last, 130 idle connections to the admin listener leave `/healthz` working.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on what they set up

mod support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls_pki_types::pem::PemObject;
use strait::gateway::Gateway;
use strait::model::ClusterId;
use strait::tls::TlsMaterial;
use strait::tunnel::frames::ControlFrameLimit;
use strait::tunnel::limits::PeerLimits;
use strait::tunnel::{TransportMode, TunnelSettings};
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

#[path = "hostile/handshakes.rs"]
mod handshakes;
#[path = "hostile/lifetime.rs"]
mod lifetime;
#[path = "hostile/memory.rs"]
mod memory;

static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const ECHO: &str = "echo.app.svc.clusterset.local:42";
const HOLE: &str = "hole.app.svc.clusterset.local:42";

struct Site {
    _dir: tempfile::TempDir,
    certs: std::path::PathBuf,
    /// Each cluster's CA, to sign a revocation list with.
    cas: std::collections::HashMap<String, strait::tls::CertificateAuthority>,
    gateway: Gateway,
    tunnel: SocketAddr,
    _echo: Backend,
    /// Kept open: its full accept queue is what makes dials to it hang.
    _hole: (socket2::Socket, Vec<std::net::TcpStream>),
}

/// A listener that accepts nothing and whose queue is already full.
fn black_hole(ip: std::net::IpAddr) -> (socket2::Socket, Vec<std::net::TcpStream>, SocketAddr) {
    use socket2::{Domain, Socket, Type};
    let socket = Socket::new(Domain::IPV4, Type::STREAM, None).expect("socket");
    socket
        .bind(&SocketAddr::new(ip, 0).into())
        .expect("bind black hole");
    socket.listen(0).expect("listen");
    let address = socket
        .local_addr()
        .expect("address")
        .as_socket()
        .expect("inet");
    // Fill the queue; connections past it get no SYN-ACK.
    let fillers = (0..4)
        .filter_map(|_| {
            std::net::TcpStream::connect_timeout(&address, Duration::from_millis(200)).ok()
        })
        .collect();
    (socket, fillers, address)
}

fn service_yaml(name: &str, target: SocketAddr) -> String {
    exported_yaml(name, "tcp", 42, "TCP", target)
}

/// A UDP Service `name` on port 53 whose one endpoint is `target`.
fn udp_service_yaml(name: &str, target: SocketAddr) -> String {
    exported_yaml(name, "dns", 53, "UDP", target)
}

/// An exported Service `name` with one port, and one endpoint `target`.
fn exported_yaml(
    name: &str,
    port_name: &str,
    port: u16,
    protocol: &str,
    target: SocketAddr,
) -> String {
    format!(
        "---
apiVersion: v1
kind: Service
metadata: {{name: {name}, namespace: app}}
spec:
  ports: [{{name: {port_name}, port: {port}, protocol: {protocol}, targetPort: {target_port}}}]
---
apiVersion: multicluster.x-k8s.io/v1alpha1
kind: ServiceExport
metadata: {{name: {name}, namespace: app, creationTimestamp: \"2026-01-01T00:00:00Z\"}}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: {name}-slice
  namespace: app
  labels: {{kubernetes.io/service-name: {name}}}
addressType: IPv4
ports: [{{name: {port_name}, port: {target_port}, protocol: {protocol}}}]
endpoints:
- addresses: [\"{ip}\"]
",
        target_port = target.port(),
        ip = target.ip()
    )
}

impl Site {
    async fn start(tunnel: TunnelSettings, descriptor_headroom: Option<u64>) -> Site {
        let dir = tempfile::tempdir().expect("temp dir");
        let config = dir.path().join("config");
        let (certs, cas) = certificates_keeping_cas(dir.path(), &["c1", "c2", "c3"]);
        let echo = Backend::start("c3-echo", SocketAddr::new(pod_ip(3, 0), 0)).await;
        let (socket, fillers, hole) = black_hole(pod_ip(3, 1));
        let bound = bind_gateway(3).await;
        let tunnel_address = bound.tunnel.local_addr().expect("tunnel address");
        // c1 and c2 are callers only: their gateways are never dialled.
        for (n, network) in [(1u8, "net-a"), (2, "net-a")] {
            let gateway = SocketAddr::new(gateway_ip(n), 1);
            write_cluster(
                &config,
                &format!("c{n}"),
                &cluster_yaml(&format!("c{n}"), network, gateway, &[]),
            );
        }
        let c3 = cluster_yaml("c3", "net-b", tunnel_address, &[])
            + &service_yaml("echo", echo.address)
            + &service_yaml("hole", hole);
        write_cluster(&config, "c3", &c3);
        // The reserve leaves `headroom` descriptors above what is open now.
        let reserve = descriptor_headroom.map(|headroom| {
            let limit = descriptor_limit();
            limit.saturating_sub(open_descriptors() + headroom)
        });
        let gateway = start_gateway_tuned(&config, &certs, "c3", 3, bound, tunnel, |settings| {
            settings.tuning.descriptor_reserve = reserve;
        })
        .await;
        Site {
            _dir: dir,
            certs,
            cas,
            gateway,
            tunnel: tunnel_address,
            _echo: echo,
            _hole: (socket, fillers),
        }
    }

    fn material(&self, cluster: &str) -> TlsMaterial {
        TlsMaterial::load(&self.certs.join(cluster)).expect("client certificate")
    }

    /// A TLS connection to the tunnel listener as `cluster`, ALPN h2.
    async fn tls(&self, cluster: &str) -> TlsStream<TcpStream> {
        let connector = TlsConnector::from(self.material(cluster).client_config());
        let tcp = TcpStream::connect(self.tunnel).await.expect("reach tunnel");
        connector
            .connect("gateway".try_into().expect("name"), tcp)
            .await
            .expect("tls handshake")
    }

    /// An HTTP/2 connection as `cluster`, driven in the background.
    async fn h2(&self, cluster: &str, window: u32) -> h2::client::SendRequest<bytes::Bytes> {
        let tls = self.tls(cluster).await;
        let (send, connection) = h2::client::Builder::new()
            .initial_window_size(window)
            .handshake(tls)
            .await
            .expect("h2 handshake");
        tokio::spawn(async move {
            let _ = connection.await;
        });
        send.ready().await.expect("ready")
    }

    /// A QUIC connection as `cluster`.
    async fn quic(&self, cluster: &str) -> (quinn::Endpoint, quinn::Connection) {
        let config = strait::tunnel::quic::client_config(
            &self.material(cluster),
            &TunnelSettings::default(),
        )
        .expect("quic client config");
        let mut endpoint =
            quinn::Endpoint::client(SocketAddr::new(gateway_ip(1), 0)).expect("endpoint");
        endpoint.set_default_client_config(config);
        let connection = endpoint
            .connect(self.tunnel, "gateway")
            .expect("connect")
            .await
            .expect("quic handshake");
        (endpoint, connection)
    }

    /// Lists `cluster`'s certificate in the gateway's `tls.crl` and has it
    /// read the change now.
    fn revoke(&self, cluster: &str) {
        let leaf = std::fs::read(self.certs.join(cluster).join(strait::tls::CERT_FILE))
            .expect("the cluster's certificate");
        let leaf = rustls_pki_types::CertificateDer::from_pem_slice(&leaf).expect("pem");
        let crl = strait::tls::revocation_list(&self.cas[cluster], &[&leaf]).expect("crl");
        std::fs::write(self.certs.join("c3").join(strait::tls::CRL_FILE), crl).expect("tls.crl");
        assert!(
            self.gateway
                .state()
                .tls
                .reload_now()
                .expect("the list is valid"),
            "the gateway took the new list"
        );
    }

    fn usage(&self, cluster: &str) -> (usize, usize) {
        let cluster = ClusterId::new(cluster).expect("id");
        self.gateway.state().peer_budgets.usage(&cluster)
    }

    /// Whether every one of the 200 flood streams was decided: 50 dialling
    /// (at the cap) and 150 refused. Until then some are still queued, and
    /// a reset would let them take the slots the reset frees.
    fn flood_decided(&self) -> bool {
        let metrics = self.gateway.state().metrics.encode();
        self.usage("c1") == (50, 50)
            && metric(
                &metrics,
                "strait_tunnel_requests_refused_total{reason=\"over_limit\"}",
            ) == 150
    }

    async fn metrics(&self) -> String {
        admin_get(self.gateway.addresses().admin, "/metrics").await
    }
}

/// A UDP backend that answers every datagram with itself, until dropped.
fn udp_echo(ip: std::net::IpAddr) -> (SocketAddr, tokio::task::JoinHandle<()>) {
    let socket = std::net::UdpSocket::bind(SocketAddr::new(ip, 0)).expect("bind udp echo");
    socket.set_nonblocking(true).expect("nonblocking");
    let socket = tokio::net::UdpSocket::from_std(socket).expect("tokio socket");
    let address = socket.local_addr().expect("address");
    let task = tokio::spawn(async move {
        let mut buffer = vec![0u8; 65_536];
        while let Ok((length, from)) = socket.recv_from(&mut buffer).await {
            let _ = socket.send_to(&buffer[..length], from).await;
        }
    });
    (address, task)
}

fn connect_request(authority: &str) -> http::Request<()> {
    http::Request::builder()
        .method(http::Method::CONNECT)
        .uri(authority)
        .body(())
        .expect("request")
}

/// A legitimate CONNECT to echo over HTTP/2: status 200 and the greeting.
async fn echo_over_h2(send: &mut h2::client::SendRequest<bytes::Bytes>) -> String {
    let (response, _stream) = send
        .send_request(connect_request(ECHO), false)
        .expect("send CONNECT");
    let response = tokio::time::timeout(Duration::from_secs(5), response)
        .await
        .expect("answered in time")
        .expect("response");
    assert_eq!(response.status(), 200);
    let mut body = response.into_body();
    let chunk = body.data().await.expect("greeting").expect("data");
    String::from_utf8_lossy(&chunk).trim_end().to_owned()
}

/// A sample of one counter (or gauge) line; 0 when absent.
fn metric(metrics: &str, series: &str) -> u64 {
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|value| value.trim().parse::<f64>().ok())
        .map_or(0, |value| value as u64)
}

fn open_descriptors() -> u64 {
    std::fs::read_dir("/proc/self/fd").map_or(0, |entries| entries.count() as u64)
}

fn descriptor_limit() -> u64 {
    let status = std::fs::read_to_string("/proc/self/limits").unwrap_or_default();
    status
        .lines()
        .find(|line| line.starts_with("Max open files"))
        .and_then(|line| line.split_whitespace().nth(3))
        .and_then(|soft| soft.parse().ok())
        .unwrap_or(1024)
}

async fn until(deadline: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let started = Instant::now();
    while started.elapsed() < deadline {
        if condition() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    condition()
}

fn settings() -> TunnelSettings {
    // `auto`: the gateway serves both HTTP/2 and QUIC.
    TunnelSettings {
        transport: TransportMode::Auto,
        peer_limits: PeerLimits {
            max_streams: 1_000,
            max_pending_dials: 50,
            max_buffered: None,
        },
        ..TunnelSettings::default()
    }
}

/// 200 streams to a black-holed backend, then every one reset: the dials
/// stop at the cap (the rest are refused at once), the resets cancel the
/// pending dials long before their timeout, and no descriptor is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resets_cancel_pending_dials_which_stop_at_the_cap_over_h2() {
    let _serial = SERIAL.lock().await;
    let site = Site::start(settings(), None).await;
    let mut legit = site.h2("c2", 1 << 20).await;
    let baseline = open_descriptors();
    let mut attacker = site.h2("c1", 1 << 20).await;
    let mut streams = Vec::new();
    for _ in 0..200 {
        attacker = attacker.ready().await.expect("ready");
        streams.push(
            attacker
                .send_request(connect_request(HOLE), false)
                .expect("send CONNECT"),
        );
    }
    assert!(
        until(Duration::from_secs(2), || site.flood_decided()).await,
        "50 dials pending, 150 refused: {:?}",
        site.usage("c1")
    );
    // Beside the attack, another cluster is served.
    assert_eq!(echo_over_h2(&mut legit).await, "c3-echo 127.0.3.1");
    let reset_at = Instant::now();
    drop(streams);
    assert!(
        until(Duration::from_secs(1), || site.usage("c1") == (0, 0)).await,
        "resets cancel the dials: {:?}",
        site.usage("c1")
    );
    assert!(
        reset_at.elapsed() < Duration::from_secs(2),
        "before the connect timeout"
    );
    let metrics = site.metrics().await;
    assert_eq!(
        metric(
            &metrics,
            "strait_tunnel_requests_refused_total{reason=\"over_limit\"}"
        ),
        150,
        "{metrics}"
    );
    assert_eq!(
        metric(
            &metrics,
            "strait_tunnel_streams_cancelled_total{transport=\"h2\"}"
        ),
        50,
        "{metrics}"
    );
    assert!(
        until(Duration::from_secs(2), || open_descriptors()
            <= baseline + 2)
        .await,
        "descriptors back to {baseline}: {}",
        open_descriptors()
    );
    assert_eq!(echo_over_h2(&mut legit).await, "c3-echo 127.0.3.1");
}

/// The same over QUIC: streams opened and reset; the caps and the
/// cancellation hold the same way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resets_cancel_pending_dials_which_stop_at_the_cap_over_quic() {
    let _serial = SERIAL.lock().await;
    let site = Site::start(settings(), None).await;
    let (_endpoint, connection) = site.quic("c1").await;
    let mut streams = Vec::new();
    for _ in 0..200 {
        let (mut send, recv) = connection.open_bi().await.expect("open stream");
        let request = strait::tunnel::quic::encode_request(HOLE).expect("request");
        send.write_all(&request).await.expect("write request");
        streams.push((send, recv));
    }
    assert!(
        until(Duration::from_secs(2), || site.flood_decided()).await,
        "50 dials pending, 150 refused: {:?}",
        site.usage("c1")
    );
    for (mut send, mut recv) in streams {
        let _ = send.reset(0u32.into());
        let _ = recv.stop(0u32.into());
    }
    assert!(
        until(Duration::from_secs(1), || site.usage("c1") == (0, 0)).await,
        "{:?}",
        site.usage("c1")
    );
    let metrics = site.metrics().await;
    assert_eq!(
        metric(
            &metrics,
            "strait_tunnel_streams_cancelled_total{transport=\"quic\"}"
        ),
        50,
        "{metrics}"
    );
    // The connection itself still serves.
    let (mut send, mut recv) = connection.open_bi().await.expect("open stream");
    send.write_all(&strait::tunnel::quic::encode_request(ECHO).expect("request"))
        .await
        .expect("write request");
    let (status, _) = strait::tunnel::quic::read_response(&mut recv)
        .await
        .expect("response");
    assert_eq!(status, 200);
}

/// Streams whose peer advertises a zero window hold the backend's bytes;
/// the stall timeout closes them, long before the idle timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_whose_peer_never_reads_are_closed_by_the_stall_timeout() {
    let _serial = SERIAL.lock().await;
    let site = Site::start(
        TunnelSettings {
            stream_stall_timeout: Duration::from_millis(500),
            ..settings()
        },
        None,
    )
    .await;
    let baseline = open_descriptors();
    let mut stalled = site.h2("c1", 0).await;
    let mut responses = Vec::new();
    for _ in 0..20 {
        stalled = stalled.ready().await.expect("ready");
        let (response, stream) = stalled
            .send_request(connect_request(ECHO), false)
            .expect("send CONNECT");
        responses.push((response.await.expect("response"), stream));
    }
    assert!(
        responses
            .iter()
            .all(|(response, _)| response.status() == 200)
    );
    assert!(
        until(Duration::from_secs(5), || site.usage("c1") == (0, 0)).await,
        "stalled streams closed: {:?}",
        site.usage("c1")
    );
    let metrics = site.metrics().await;
    assert_eq!(
        metric(
            &metrics,
            "strait_limited_total{limit=\"stalled_stream\",transport=\"h2\"}"
        ),
        20,
        "{metrics}"
    );
    drop(responses);
    assert!(
        until(Duration::from_secs(2), || open_descriptors()
            <= baseline + 2)
        .await,
        "backend sockets closed: {} > {baseline}",
        open_descriptors()
    );
}

/// HTTP/2 frames written by hand: the preface, SETTINGS, then PINGs with
/// no pause. Returns the GOAWAY error code the server sent, if any.
async fn ping_flood(tls: TlsStream<TcpStream>, pings: usize, wait: Duration) -> Option<u32> {
    let (mut read, mut write) = tokio::io::split(tls);
    let writer = tokio::spawn(async move {
        let mut bytes = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
        bytes.extend_from_slice(&[0, 0, 0, 0x4, 0, 0, 0, 0, 0]);
        for i in 0..pings {
            bytes.extend_from_slice(&[0, 0, 8, 0x6, 0, 0, 0, 0, 0]);
            bytes.extend_from_slice(&(i as u64).to_be_bytes());
        }
        // The server may stop reading half-way: that is the point.
        let _ = write.write_all(&bytes).await;
        write
    });
    let goaway = tokio::time::timeout(wait, async {
        loop {
            let mut header = [0u8; 9];
            read.read_exact(&mut header).await.ok()?;
            let length = u32::from_be_bytes([0, header[0], header[1], header[2]]) as usize;
            let mut payload = vec![0u8; length];
            read.read_exact(&mut payload).await.ok()?;
            if header[3] == 0x7 && payload.len() >= 8 {
                return Some(u32::from_be_bytes([
                    payload[4], payload[5], payload[6], payload[7],
                ]));
            }
        }
    })
    .await
    .ok()
    .flatten();
    writer.abort();
    goaway
}

/// A PING flood is ended with GOAWAY ENHANCE_YOUR_CALM; a reset-and-reopen
/// flood over QUIC closes the connection. Legitimate callers keep working.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_frame_floods_end_the_connection() {
    let _serial = SERIAL.lock().await;
    let site = Site::start(
        TunnelSettings {
            control_frames: ControlFrameLimit {
                per_second: 100,
                burst: 500,
            },
            ..settings()
        },
        None,
    )
    .await;
    let mut legit = site.h2("c2", 1 << 20).await;
    let code = ping_flood(site.tls("c1").await, 2_000, Duration::from_secs(5)).await;
    assert_eq!(code, Some(0xb), "GOAWAY ENHANCE_YOUR_CALM");
    assert_eq!(echo_over_h2(&mut legit).await, "c3-echo 127.0.3.1");
    // Below the limit nothing happens: a few PINGs get PONGs, no GOAWAY.
    let quiet = ping_flood(site.tls("c1").await, 50, Duration::from_secs(1)).await;
    assert_eq!(quiet, None);

    // Opened and reset until the server closes the connection: two
    // control frames a stream, the burst spent within the first 250.
    let (_endpoint, connection) = site.quic("c1").await;
    let started = Instant::now();
    while connection.close_reason().is_none() && started.elapsed() < Duration::from_secs(10) {
        let Ok((mut send, mut recv)) = connection.open_bi().await else {
            break;
        };
        let _ = send.reset(0u32.into());
        let _ = recv.stop(0u32.into());
        tokio::task::yield_now().await;
    }
    let closed = tokio::time::timeout(Duration::from_secs(5), connection.closed())
        .await
        .expect("the connection is closed");
    // Closed with code 2; or, when the client's flood outran the server's
    // CONNECTION_CLOSE, answered with a stateless reset once the server had
    // dropped the connection. The metric below says which limit closed it.
    assert!(
        matches!(&closed, quinn::ConnectionError::ApplicationClosed(close) if close.error_code == 2u32.into())
            || matches!(&closed, quinn::ConnectionError::Reset),
        "{closed:?}"
    );
    let metrics = site.metrics().await;
    assert_eq!(
        metric(
            &metrics,
            "strait_limited_total{limit=\"control_frames\",transport=\"h2\"}"
        ),
        1,
        "{metrics}"
    );
    assert_eq!(
        metric(
            &metrics,
            "strait_limited_total{limit=\"control_frames\",transport=\"quic\"}"
        ),
        1,
        "{metrics}"
    );
    assert_eq!(echo_over_h2(&mut legit).await, "c3-echo 127.0.3.1");
}

/// With descriptors short (a reserve that leaves ~60 for new work), a QUIC
/// stream flood to the black hole takes what is left and is refused past
/// it, while `/healthz` answers and a stream opened before keeps relaying.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_descriptor_reserve_keeps_health_and_open_streams_working() {
    let _serial = SERIAL.lock().await;
    let site = Site::start(
        TunnelSettings {
            peer_limits: PeerLimits {
                max_streams: 10_000,
                max_pending_dials: 10_000,
                max_buffered: None,
            },
            ..settings()
        },
        Some(160),
    )
    .await;
    // Opened before the flood: a relaying stream.
    let mut legit = site.h2("c2", 1 << 20).await;
    let (response, mut upload) = legit
        .send_request(connect_request(ECHO), false)
        .expect("send CONNECT");
    let response = response.await.expect("response");
    assert_eq!(response.status(), 200);
    let mut download = response.into_body();
    let greeting = download.data().await.expect("greeting").expect("data");
    assert!(greeting.starts_with(b"c3-echo"));

    let (_endpoint, connection) = site.quic("c1").await;
    let mut streams = Vec::new();
    for _ in 0..1_000 {
        let (mut send, recv) = connection.open_bi().await.expect("open stream");
        let request = strait::tunnel::quic::encode_request(HOLE).expect("request");
        send.write_all(&request).await.expect("write request");
        streams.push((send, recv));
    }
    let site = Arc::new(site);
    let refused = |metrics: &str| {
        metric(
            metrics,
            "strait_limited_total{limit=\"descriptors\",transport=\"quic\"}",
        )
    };
    let mut metrics = String::new();
    for _ in 0..100 {
        metrics = site.metrics().await;
        if refused(&metrics) > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        refused(&metrics) > 0,
        "new work refused near the limit: {metrics}"
    );
    let (_, dials) = site.usage("c1");
    assert!(
        dials < 300,
        "dials stop at the reserve, not the flood: {dials}"
    );
    let health = admin_get(site.gateway.addresses().admin, "/healthz").await;
    assert!(health.starts_with("HTTP/1.1 200"), "{health}");
    upload
        .send_data(bytes::Bytes::from_static(b"still here"), false)
        .expect("send");
    let echoed = download.data().await.expect("echo").expect("data");
    assert_eq!(&echoed[..], b"still here");
    for (mut send, _) in streams {
        let _ = send.reset(0u32.into());
    }
}

/// 130 idle connections to the admin listener (its cap is 128) do not
/// switch `/healthz` off: at the cap the oldest idle one makes room.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_admin_connections_cannot_starve_the_health_probe() {
    let _serial = SERIAL.lock().await;
    let site = Site::start(settings(), None).await;
    let admin = site.gateway.addresses().admin;
    let mut idle = Vec::new();
    for _ in 0..130 {
        idle.push(TcpStream::connect(admin).await.expect("reach admin"));
    }
    for _ in 0..5 {
        let health = admin_get(admin, "/healthz").await;
        assert!(health.starts_with("HTTP/1.1 200"), "{health}");
    }
    drop(idle);
}

fn resident_kib() -> u64 {
    resident_kib_of("self")
}

/// `VmRSS` of process `pid` (a number, or `self`), in KiB; 0 when unknown.
fn resident_kib_of(pid: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|kib| kib.parse().ok())
        .unwrap_or(0)
}

/// A CONNECT from `source` to echo: the status line, and then the greeting.
async fn connect_from(source: std::net::IpAddr, listener: SocketAddr) -> Result<String, String> {
    let socket = tokio::net::TcpSocket::new_v4().map_err(|e| e.to_string())?;
    socket
        .bind(SocketAddr::new(source, 0))
        .map_err(|e| e.to_string())?;
    let mut stream = socket.connect(listener).await.map_err(|e| e.to_string())?;
    let request = format!("CONNECT {ECHO} HTTP/1.1\r\nHost: {ECHO}\r\n\r\n");
    stream
        .write_all(request.as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let mut answer = vec![0; 256];
    let read = stream.read(&mut answer).await.map_err(|e| e.to_string())?;
    Ok(String::from_utf8_lossy(&answer[..read]).into_owned())
}

/// 2,000 connections of one pod address, each opened with `head` and held.
async fn hold_heads(flooder: std::net::IpAddr, connect: SocketAddr, head: &str) -> Vec<TcpStream> {
    let mut held = Vec::new();
    for _ in 0..2_000 {
        let socket = tokio::net::TcpSocket::new_v4().expect("socket");
        socket.bind(SocketAddr::new(flooder, 0)).expect("bind");
        let Ok(mut stream) = socket.connect(connect).await else {
            continue;
        };
        // A write may fail once the gateway has answered or closed.
        let _ = tokio::time::timeout(
            Duration::from_millis(200),
            stream.write_all(head.as_bytes()),
        )
        .await;
        held.push(stream);
    }
    held
}

/// One pod address floods the CONNECT listener twice with heads that never
/// end: 2,000 connections sending 64 KiB of one header with no blank line,
/// then 2,000 sending 1 KiB of it and waiting. The head cap (8 KiB) answers
/// the first 431 and closes them instead of buffering each head; past
/// `tuning.maxConnectionsPerSource` (1,024) the second are refused at
/// accept. The process grows less than 64 MiB, and a client of another pod
/// gets its CONNECT answered within a second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn never_ending_connect_heads_cost_a_bounded_amount() {
    let _serial = SERIAL.lock().await;
    let site = Site::start(settings(), None).await;
    let connect = site.gateway.addresses().connect;
    let flooder = pod_ip(1, 7);
    let before = resident_kib();
    let head = |pad: usize| format!("CONNECT {ECHO} HTTP/1.1\r\nX-Pad: {}", "a".repeat(pad));
    let long = hold_heads(flooder, connect, &head(64 * 1024)).await;
    let slow = hold_heads(flooder, connect, &head(1024)).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let grown_mib = resident_kib().saturating_sub(before) / 1024;
    let started = Instant::now();
    let answer = tokio::time::timeout(Duration::from_secs(1), connect_from(pod_ip(2, 7), connect))
        .await
        .expect("answered within a second")
        .expect("a CONNECT of another pod");
    let answered_in = started.elapsed();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let metrics = site.metrics().await;
    let per_source = metric(
        &metrics,
        "strait_limited_total{limit=\"per_source\",transport=\"none\"}",
    );
    println!(
        "CONNECT HEADS: 4,000 from one pod; process grew {grown_mib} MiB; {per_source} refused \
         at accept; another pod answered in {answered_in:?}"
    );
    assert!(grown_mib < 64, "the process grew {grown_mib} MiB");
    assert!(
        per_source >= 900,
        "the source cap refused the slow heads past it: {per_source}"
    );
    drop((long, slow));
}

/// Opens `count` connections to `listener` at once (every SYN sent before
/// the gateway has accepted many), holding them, and returns the longest
/// any took to connect and how many took a SYN retransmission's second.
async fn burst(listener: SocketAddr, count: usize) -> (Duration, usize) {
    let connects = (0..count).map(|_| async move {
        let started = Instant::now();
        let stream = TcpStream::connect(listener).await.expect("connects");
        (started.elapsed(), stream)
    });
    let done = futures_util::future::join_all(connects).await;
    let longest = done.iter().map(|(took, _)| *took).max().unwrap_or_default();
    let slow = done
        .iter()
        .filter(|(took, _)| *took >= Duration::from_millis(900))
        .count();
    (longest, slow)
}

/// 1,000 connections opened at once to the CONNECT listener, and
/// 1,000 to the tunnel port: each listener's accept queue is the host's
/// longest (`net.core.somaxconn`), so none loses its SYN and waits out a
/// retransmission, though the gateway accepts slower than they arrive.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_connections_waits_for_no_syn_retransmission() {
    let _serial = SERIAL.lock().await;
    let site = Site::start(settings(), None).await;
    for (name, listener) in [
        ("connect", site.gateway.addresses().connect),
        ("tunnel", site.tunnel),
    ] {
        let (longest, slow) = burst(listener, 1_000).await;
        println!("BURST {name}: 1,000 at once, longest connect {longest:?}, {slow} ≥ 0.9 s");
        assert_eq!(
            slow, 0,
            "{name}: {slow} connections waited for a SYN retransmission"
        );
    }
}
