//! Clients that never finish a handshake, against a `strait run` process
//! whose descriptors are limited to 1,024 (`ulimit -n 1024`): TLS
//! ClientHellos sent in part and held, from many source addresses, and
//! QUIC Initials replayed from many. Beside each flood, a tunnel peer, a
//! pod's CONNECT and the health probe must keep getting through.

use std::process::{Child, Command, Stdio};

use super::*;

/// One `strait run` process serving c3 on loopback.
pub(super) struct Process {
    child: Child,
    connect: SocketAddr,
    tunnel: SocketAddr,
    admin: SocketAddr,
    _dir: tempfile::TempDir,
    certs: std::path::PathBuf,
    _echo: Backend,
    /// A backend that accepts and never reads.
    pub sink: Sink,
    /// A UDP backend answering every datagram (`udpecho`, port 53).
    _udp_echo: tokio::task::JoinHandle<()>,
}

/// A listener whose accepted connections are held and never read, with
/// small receive buffers: a backend that stopped reading.
pub struct Sink {
    pub address: SocketAddr,
    pub accepted: Arc<std::sync::atomic::AtomicUsize>,
    _task: tokio::task::JoinHandle<()>,
}

impl Sink {
    fn start(ip: std::net::IpAddr) -> Sink {
        use socket2::{Domain, Socket, Type};
        let socket = Socket::new(Domain::IPV4, Type::STREAM, None).expect("socket");
        socket.set_recv_buffer_size(4096).expect("rcvbuf");
        socket.set_reuse_address(true).expect("reuse");
        socket
            .bind(&SocketAddr::new(ip, 0).into())
            .expect("bind sink");
        socket.listen(4096).expect("listen");
        socket.set_nonblocking(true).expect("nonblocking");
        let listener = tokio::net::TcpListener::from_std(socket.into()).expect("tokio listener");
        let address = listener.local_addr().expect("address");
        let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = accepted.clone();
        let task = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((stream, _)) = listener.accept().await {
                counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                held.push(stream);
            }
        });
        Sink {
            address,
            accepted,
            _task: task,
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A free port on `ip` (bound and let go: the process binds it next).
fn free_port(ip: std::net::IpAddr) -> SocketAddr {
    let listener = std::net::TcpListener::bind(SocketAddr::new(ip, 0)).expect("bind");
    let udp = std::net::UdpSocket::bind(listener.local_addr().expect("address"));
    let address = listener.local_addr().expect("address");
    drop((listener, udp));
    address
}

impl Process {
    /// Starts c3's gateway with `tunnel_yaml` as its `tunnel:` settings,
    /// under `ulimit -n 1024`, and waits until it is ready.
    pub(super) async fn start(tunnel_yaml: &str) -> Process {
        let dir = tempfile::tempdir().expect("temp dir");
        let config = dir.path().join("config");
        let certs = certificates(dir.path(), &["c1", "c2", "c3"]);
        let ip = gateway_ip(9);
        let echo = Backend::start("c3-echo", SocketAddr::new(pod_ip(3, 0), 0)).await;
        let (connect, tunnel, admin) = (free_port(ip), free_port(ip), free_port(ip));
        for (n, network) in [(1u8, "net-a"), (2, "net-a")] {
            let gateway = SocketAddr::new(gateway_ip(n), 1);
            write_cluster(
                &config,
                &format!("c{n}"),
                &cluster_yaml(&format!("c{n}"), network, gateway, &[]),
            );
        }
        let sink = Sink::start(pod_ip(3, 2));
        let (udp_echo, udp_echo_task) = super::udp_echo(pod_ip(3, 3));
        let c3 = cluster_yaml("c3", "net-b", tunnel, &[])
            + &service_yaml("echo", echo.address)
            + &service_yaml("sink", sink.address)
            + &super::udp_service_yaml("udpecho", udp_echo);
        write_cluster(&config, "c3", &c3);
        std::fs::write(
            config.join("gateway.yaml"),
            format!("allowLoopbackEndpoints: true\ntunnel:\n{tunnel_yaml}"),
        )
        .expect("gateway.yaml");
        let log = std::fs::File::create(dir.path().join("gateway.log")).expect("log");
        let child = Command::new("sh")
            .arg("-c")
            .arg("ulimit -n 1024 && exec \"$0\" \"$@\"")
            .arg(env!("CARGO_BIN_EXE_strait"))
            .args(["run", "--config"])
            .arg(&config)
            .args(["--cluster", "c3", "--tls-dir"])
            .arg(certs.join("c3"))
            .args(["--connect-listen", &connect.to_string()])
            .args(["--tunnel-listen", &tunnel.to_string()])
            .args(["--admin-listen", &admin.to_string()])
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("strait run starts");
        let process = Process {
            child,
            connect,
            tunnel,
            admin,
            _dir: dir,
            certs,
            _echo: echo,
            sink,
            _udp_echo: udp_echo_task,
        };
        let started = Instant::now();
        while TcpStream::connect(admin).await.is_err()
            || !admin_get(admin, "/readyz")
                .await
                .starts_with("HTTP/1.1 200")
        {
            assert!(
                started.elapsed() < Duration::from_secs(15),
                "the gateway is not ready"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        process
    }

    pub(super) fn pid(&self) -> u32 {
        self.child.id()
    }

    pub(super) fn resident_kib(&self) -> u64 {
        resident_kib_of(&self.pid().to_string())
    }

    pub(super) async fn metrics(&self) -> String {
        admin_get(self.admin, "/metrics").await
    }

    /// An HTTP/2 connection to the tunnel port as `cluster`, driven in the
    /// background, with a 1 MiB window of its own.
    pub(super) async fn h2(&self, cluster: &str) -> h2::client::SendRequest<bytes::Bytes> {
        self.h2_with_window(cluster, 1 << 20).await
    }

    /// The same with a stream window of `window` bytes (0: the gateway may
    /// send nothing on a stream).
    pub(super) async fn h2_with_window(
        &self,
        cluster: &str,
        window: u32,
    ) -> h2::client::SendRequest<bytes::Bytes> {
        let material = TlsMaterial::load(&self.certs.join(cluster)).expect("certificate");
        let connector = TlsConnector::from(material.client_config());
        let tcp = TcpStream::connect(self.tunnel).await.expect("reach tunnel");
        let tls = connector
            .connect("gateway".try_into().expect("name"), tcp)
            .await
            .expect("tls handshake");
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

    /// A full TLS handshake to the tunnel port as `cluster`, then an h2
    /// CONNECT to echo: the greeting.
    pub(super) async fn tunnel_peer(&self, cluster: &str) -> Result<String, String> {
        let material = TlsMaterial::load(&self.certs.join(cluster)).map_err(|e| e.to_string())?;
        let connector = TlsConnector::from(material.client_config());
        let tcp = TcpStream::connect(self.tunnel)
            .await
            .map_err(|e| e.to_string())?;
        let tls = connector
            .connect("gateway".try_into().map_err(|_| "name")?, tcp)
            .await
            .map_err(|e| e.to_string())?;
        let (send, connection) = h2::client::handshake(tls)
            .await
            .map_err(|e| e.to_string())?;
        tokio::spawn(async move {
            let _ = connection.await;
        });
        let mut send = send.ready().await.map_err(|e| e.to_string())?;
        Ok(echo_over_h2(&mut send).await)
    }
}

/// The test process needs a descriptor per held connection.
pub(super) fn raise_own_descriptor_limit() {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    if let Ok((_, hard)) = getrlimit(Resource::RLIMIT_NOFILE) {
        let _ = setrlimit(Resource::RLIMIT_NOFILE, hard.min(65_536), hard);
    }
}

/// The first bytes of a TLS ClientHello: a record header announcing 512
/// bytes, and the handshake header; the rest never comes.
const PARTIAL_CLIENT_HELLO: [u8; 9] = [0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc];

/// `count` connections to `tunnel`, spread over 100 source addresses
/// (12 each, under the per-source cap), each sending a partial ClientHello
/// and held open.
async fn hold_half_handshakes(tunnel: SocketAddr, count: usize) -> Vec<TcpStream> {
    let mut held = Vec::with_capacity(count);
    for index in 0..count {
        let source =
            std::net::IpAddr::from([127, 0, 90, u8::try_from(index % 100).unwrap_or(0) + 1]);
        let socket = tokio::net::TcpSocket::new_v4().expect("socket");
        socket.bind(SocketAddr::new(source, 0)).expect("bind");
        let Ok(mut stream) = socket.connect(tunnel).await else {
            continue;
        };
        let _ = stream.write_all(&PARTIAL_CLIENT_HELLO).await;
        held.push(stream);
    }
    held
}

/// 1,200 half-handshakes on the tunnel port of a gateway limited to 1,024
/// descriptors: at most `tunnel.maxHandshakes` (256) are held, the oldest
/// shed for newer ones, so the process keeps descriptors for its other
/// listeners. A pod's CONNECT and `/healthz` answer within a second, a
/// peer gateway completes its handshake and is served, and the process
/// grows less than 64 MiB.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_handshakes_cannot_starve_the_gateway_of_descriptors() {
    let _serial = SERIAL.lock().await;
    raise_own_descriptor_limit();
    let process = Process::start("  transport: auto\n").await;
    let before = process.resident_kib();
    let held = hold_half_handshakes(process.tunnel, 1_200).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let grown_mib = process.resident_kib().saturating_sub(before) / 1024;

    let started = Instant::now();
    let answer = tokio::time::timeout(
        Duration::from_secs(1),
        connect_from(pod_ip(2, 7), process.connect),
    )
    .await
    .expect("a CONNECT answered within a second")
    .expect("a CONNECT of a pod");
    let connect_in = started.elapsed();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let started = Instant::now();
    let health = tokio::time::timeout(Duration::from_secs(1), admin_get(process.admin, "/healthz"))
        .await
        .expect("/healthz within a second");
    let health_in = started.elapsed();
    assert!(health.starts_with("HTTP/1.1 200"), "{health}");
    let peer = tokio::time::timeout(Duration::from_secs(5), process.tunnel_peer("c1"))
        .await
        .expect("the peer is served in time");
    assert!(
        peer.as_ref()
            .is_ok_and(|greeting| greeting.starts_with("c3-echo")),
        "a peer gets through: {peer:?}"
    );

    let metrics = process.metrics().await;
    let shed = metric(
        &metrics,
        "strait_limited_total{limit=\"handshake_shed\",transport=\"h2\"}",
    );
    println!(
        "HALF HANDSHAKES: {} held by the flood; gateway grew {grown_mib} MiB; {shed} shed; \
         CONNECT answered in {connect_in:?}, /healthz in {health_in:?}",
        held.len()
    );
    for line in metrics
        .lines()
        .filter(|l| l.starts_with("strait_limited_total"))
    {
        println!("  {line}");
    }
    assert!(grown_mib < 64, "the gateway grew {grown_mib} MiB");
    // Past the cap each newcomer sheds the oldest handshake, unless the
    // tunnel listener's share of the descriptors refused it first (which
    // of the two depends on how many descriptors the host has left).
    let refused = metric(
        &metrics,
        "strait_limited_total{limit=\"listener_share\",transport=\"none\"}",
    );
    assert!(
        shed >= 600 && shed + refused >= 900,
        "handshakes past the cap were shed ({shed}) or refused for the listener's share ({refused})"
    );
    drop(held);
}

/// The first datagrams of `count` QUIC clients (each its own Initial,
/// padded to at least 1,200 bytes, with its own connection id), caught on
/// a socket of our own.
async fn captured_initials(certs: &std::path::Path, count: usize) -> Vec<Vec<u8>> {
    let catcher = tokio::net::UdpSocket::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let config = strait::tunnel::quic::client_config(
        &TlsMaterial::load(&certs.join("c1")).expect("c1"),
        &TunnelSettings::default(),
    )
    .expect("quic client config");
    let mut endpoint =
        quinn::Endpoint::client("127.0.0.1:0".parse().expect("addr")).expect("endpoint");
    endpoint.set_default_client_config(config);
    let target = catcher.local_addr().expect("address");
    let mut initials = Vec::with_capacity(count);
    // A retransmission repeats its connection's id: one datagram per id.
    let mut seen = std::collections::HashSet::new();
    let mut datagram = vec![0u8; 65_536];
    let mut connecting = Vec::with_capacity(count);
    // In batches the catcher's receive buffer holds.
    while initials.len() < count {
        let batch = (count - initials.len()).min(50);
        connecting
            .extend((0..batch).map(|_| endpoint.connect(target, "gateway").expect("connect")));
        let wanted = initials.len() + batch;
        while initials.len() < wanted {
            let (length, _) =
                tokio::time::timeout(Duration::from_secs(5), catcher.recv_from(&mut datagram))
                    .await
                    .expect("Initials in time")
                    .expect("recv");
            // Long header: flags, version (4 bytes), id length, id.
            let id_length = usize::from(datagram[5]);
            if seen.insert(datagram[6..6 + id_length].to_vec()) {
                initials.push(datagram[..length].to_vec());
            }
        }
    }
    drop(connecting);
    initials
}

/// 1,000 QUIC Initials, each from its own address (100 source IPs, ten
/// ports each), as a flood with forged sources would arrive: past a few
/// pending handshakes, each is answered with a Retry, smaller than the
/// Initial and holding no state, so the flood is not amplified and a real
/// peer still connects at once and is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quic_initial_flood_is_answered_with_retries_not_state() {
    let _serial = SERIAL.lock().await;
    raise_own_descriptor_limit();
    let process = Process::start("  transport: auto\n").await;
    let initials = captured_initials(&process.certs, 1_000).await;
    let before = process.resident_kib();
    let mut flood = Vec::new();
    for (index, initial) in initials.iter().enumerate() {
        let source =
            std::net::IpAddr::from([127, 0, 91, u8::try_from(index / 10).unwrap_or(0) + 1]);
        let socket = tokio::net::UdpSocket::bind(SocketAddr::new(source, 0))
            .await
            .expect("bind");
        socket.send_to(initial, process.tunnel).await.expect("send");
        flood.push(socket);
        // Paced as a link would pace them, so that the receive buffer
        // of the gateway's socket drops none.
        if index % 50 == 49 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut reflected = 0usize;
    let mut buffer = vec![0u8; 65_536];
    for socket in &flood {
        while let Ok(length) = socket.try_recv(&mut buffer) {
            reflected += length;
        }
    }
    let sent: usize = initials.iter().map(Vec::len).sum();
    let grown_mib = process.resident_kib().saturating_sub(before) / 1024;

    // A real peer over QUIC, beside the flood.
    let config = strait::tunnel::quic::client_config(
        &TlsMaterial::load(&process.certs.join("c2")).expect("c2"),
        &TunnelSettings::default(),
    )
    .expect("quic client config");
    let mut endpoint =
        quinn::Endpoint::client(SocketAddr::new(gateway_ip(2), 0)).expect("endpoint");
    endpoint.set_default_client_config(config);
    let started = Instant::now();
    let connection = tokio::time::timeout(
        Duration::from_secs(1),
        endpoint
            .connect(process.tunnel, "gateway")
            .expect("connect"),
    )
    .await
    .expect("the peer connects within a second")
    .expect("quic handshake");
    let connected_in = started.elapsed();
    let (mut send, mut recv) = connection.open_bi().await.expect("stream");
    send.write_all(&strait::tunnel::quic::encode_request(ECHO).expect("request"))
        .await
        .expect("request");
    let (status, _) = strait::tunnel::quic::read_response(&mut recv)
        .await
        .expect("answer");
    assert_eq!(status, 200, "the peer is served");

    let metrics = process.metrics().await;
    let retries = metric(
        &metrics,
        "strait_limited_total{limit=\"quic_retry\",transport=\"quic\"}",
    );
    println!(
        "QUIC INITIALS: {} from 1,000 addresses ({sent} bytes); {reflected} bytes answered \
         ({:.2}x); {retries} Retries; gateway grew {grown_mib} MiB; a peer connected in {connected_in:?}",
        flood.len(),
        reflected as f64 / sent as f64
    );
    for line in metrics
        .lines()
        .filter(|l| l.starts_with("strait_limited_total"))
    {
        println!("  {line}");
    }
    assert!(
        retries >= 900,
        "past a few pending handshakes, Retries: {retries}"
    );
    assert!(
        reflected < sent,
        "answers ({reflected} bytes) are smaller than the flood ({sent} bytes)"
    );
    assert!(grown_mib < 64, "the gateway grew {grown_mib} MiB");
}
