//! A peer's connection ends when its certificate is revoked, and at its
//! maximum age: new streams are refused at once (GOAWAY; 421 on QUIC), the
//! open ones run on for the grace, and then the connection is closed. A
//! peer that is still trusted is not touched.

use super::*;

/// Whether `send` can open a stream now: `Ok(status)` when the gateway
/// answered, `Err` when the connection refused it (GOAWAY or a reset).
async fn try_h2(send: &mut h2::client::SendRequest<bytes::Bytes>) -> Result<u16, String> {
    let ready = tokio::time::timeout(Duration::from_secs(2), send.clone().ready())
        .await
        .map_err(|_| "not ready in time".to_owned())?
        .map_err(|e| e.to_string())?;
    let mut ready = ready;
    let (response, _stream) = ready
        .send_request(connect_request(ECHO), false)
        .map_err(|e| e.to_string())?;
    let response = tokio::time::timeout(Duration::from_secs(2), response)
        .await
        .map_err(|_| "no answer".to_owned())?
        .map_err(|e| e.to_string())?;
    Ok(response.status().as_u16())
}

/// The status a new QUIC stream to echo gets.
async fn try_quic(connection: &quinn::Connection) -> Result<u16, String> {
    let (mut send, mut recv) = connection.open_bi().await.map_err(|e| e.to_string())?;
    let request = strait::tunnel::quic::encode_request(ECHO).map_err(|e| e.to_string())?;
    send.write_all(&request).await.map_err(|e| e.to_string())?;
    let (status, _) = strait::tunnel::quic::read_response(&mut recv)
        .await
        .map_err(|e| e.to_string())?;
    Ok(status)
}

/// An echo stream open over HTTP/2: sends `text`, returns what came back.
struct OpenH2 {
    upload: h2::SendStream<bytes::Bytes>,
    download: h2::RecvStream,
}

impl OpenH2 {
    async fn open(send: &mut h2::client::SendRequest<bytes::Bytes>) -> OpenH2 {
        let (response, upload) = send
            .send_request(connect_request(ECHO), false)
            .expect("send CONNECT");
        let response = response.await.expect("response");
        assert_eq!(response.status(), 200);
        let mut download = response.into_body();
        let greeting = download.data().await.expect("greeting").expect("data");
        assert!(greeting.starts_with(b"c3-echo"));
        OpenH2 { upload, download }
    }

    async fn echo(&mut self, text: &'static str) -> Result<String, String> {
        self.upload
            .send_data(bytes::Bytes::from_static(text.as_bytes()), false)
            .map_err(|e| e.to_string())?;
        let data = tokio::time::timeout(Duration::from_secs(2), self.download.data())
            .await
            .map_err(|_| "no echo".to_owned())?
            .ok_or_else(|| "stream ended".to_owned())?
            .map_err(|e| e.to_string())?;
        let _ = self.download.flow_control().release_capacity(data.len());
        Ok(String::from_utf8_lossy(&data).into_owned())
    }
}

/// The same over QUIC.
struct OpenQuic {
    send: quinn::SendStream,
    recv: quinn::RecvStream,
}

impl OpenQuic {
    async fn open(connection: &quinn::Connection) -> OpenQuic {
        let (mut send, mut recv) = connection.open_bi().await.expect("open stream");
        let request = strait::tunnel::quic::encode_request(ECHO).expect("request");
        send.write_all(&request).await.expect("write request");
        let (status, _) = strait::tunnel::quic::read_response(&mut recv)
            .await
            .expect("response");
        assert_eq!(status, 200);
        let mut greeting = [0u8; 64];
        let read = recv.read(&mut greeting).await.expect("greeting");
        assert!(read.is_some_and(|n| greeting[..n].starts_with(b"c3-echo")));
        OpenQuic { send, recv }
    }

    async fn echo(&mut self, text: &'static str) -> Result<String, String> {
        self.send
            .write_all(text.as_bytes())
            .await
            .map_err(|e| e.to_string())?;
        let mut buffer = [0u8; 64];
        let read = tokio::time::timeout(Duration::from_secs(2), self.recv.read(&mut buffer))
            .await
            .map_err(|_| "no echo".to_owned())?
            .map_err(|e| e.to_string())?
            .ok_or_else(|| "stream ended".to_owned())?;
        Ok(String::from_utf8_lossy(&buffer[..read]).into_owned())
    }
}

fn lifetime_settings(max_age: Duration) -> TunnelSettings {
    TunnelSettings {
        close_grace: Duration::from_secs(2),
        max_connection_age: max_age,
        ..settings()
    }
}

/// c1's certificate is listed in c3's `tls.crl` while c1 has an HTTP/2 and
/// a QUIC connection open, each with an echo stream: within a second
/// neither takes a new stream, the open streams keep echoing during the
/// grace (2 s), and then both connections are closed. c2, not listed,
/// keeps opening streams on its connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_peer_loses_its_live_connections_after_a_grace() {
    let _serial = SERIAL.lock().await;
    let site = Site::start(lifetime_settings(Duration::from_secs(3600)), None).await;
    let mut c1_h2 = site.h2("c1", 1 << 20).await;
    let mut open_h2 = OpenH2::open(&mut c1_h2).await;
    let (_endpoint, c1_quic) = site.quic("c1").await;
    let mut open_quic = OpenQuic::open(&c1_quic).await;
    let mut c2 = site.h2("c2", 1 << 20).await;
    assert_eq!(try_h2(&mut c2).await, Ok(200));

    let revoked_at = Instant::now();
    site.revoke("c1");
    // Within a second neither connection takes a new stream.
    let mut h2_new = Ok(0);
    let mut quic_new = Ok(0);
    while revoked_at.elapsed() < Duration::from_secs(1) {
        h2_new = try_h2(&mut c1_h2).await;
        quic_new = try_quic(&c1_quic).await;
        if h2_new.is_err() && quic_new == Ok(421) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        h2_new.is_err(),
        "a new h2 stream after revocation: {h2_new:?}"
    );
    assert_eq!(quic_new, Ok(421), "a new QUIC stream is sent away");
    // The open streams finish their work within the grace.
    assert_eq!(open_h2.echo("h2 still").await.as_deref(), Ok("h2 still"));
    assert_eq!(
        open_quic.echo("quic still").await.as_deref(),
        Ok("quic still")
    );
    // c2 is untouched.
    assert_eq!(try_h2(&mut c2).await, Ok(200));
    // After the grace both connections are gone with their streams.
    let closed = tokio::time::timeout(Duration::from_secs(5), c1_quic.closed()).await;
    assert!(
        matches!(closed, Ok(quinn::ConnectionError::ApplicationClosed(ref close)) if close.error_code == 3u32.into()),
        "the QUIC connection is closed after the grace: {closed:?}"
    );
    let ended = revoked_at.elapsed();
    assert!(
        ended >= Duration::from_millis(1900),
        "not before the grace: {ended:?}"
    );
    // The h2 connection's grace began when it saw the change, a moment
    // apart from the QUIC one's.
    let mut h2_gone = false;
    for _ in 0..20 {
        if open_h2.echo("gone").await.is_err() {
            h2_gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(h2_gone, "the h2 stream ends with its connection");
    let metrics = site.metrics().await;
    for transport in ["h2", "quic"] {
        let series = format!("strait_limited_total{{limit=\"revoked\",transport=\"{transport}\"}}");
        assert_eq!(metric(&metrics, &series), 1, "{series}\n{metrics}");
    }
    assert_eq!(try_h2(&mut c2).await, Ok(200));
    // And c1 cannot come back.
    let connector = TlsConnector::from(site.material("c1").client_config());
    let tcp = TcpStream::connect(site.tunnel).await.expect("reach tunnel");
    let again = connector
        .connect("gateway".try_into().expect("name"), tcp)
        .await;
    let refused_again = match again {
        Err(_) => true,
        // TLS 1.3: the client's certificate is judged after the client
        // finished; the refusal arrives as the first read.
        Ok(mut tls) => {
            let mut byte = [0u8; 1];
            !matches!(tls.read(&mut byte).await, Ok(n) if n > 0)
        }
    };
    assert!(
        refused_again,
        "a revoked certificate is refused at the handshake"
    );
}

/// With `tunnel.maxConnectionAge` at 2 s, a connection is told to move on
/// between 1.8 and 2 s: HTTP/2 gets GOAWAY and QUIC answers 421, the open
/// streams keep going for the grace, a QUIC connection closes as soon as
/// its last stream is done, and a new connection serves at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_move_on_at_their_maximum_age() {
    let _serial = SERIAL.lock().await;
    let site = Site::start(lifetime_settings(Duration::from_secs(2)), None).await;
    let opened = Instant::now();
    let mut c1_h2 = site.h2("c1", 1 << 20).await;
    let mut open_h2 = OpenH2::open(&mut c1_h2).await;
    let (_endpoint, c1_quic) = site.quic("c1").await;
    assert_eq!(try_h2(&mut c1_h2).await, Ok(200), "young: serves");
    assert_eq!(try_quic(&c1_quic).await, Ok(200), "young: serves");
    // An idle connection is closed at its age; this one has a stream open.
    let mut open_quic = OpenQuic::open(&c1_quic).await;
    tokio::time::sleep(Duration::from_millis(2_300).saturating_sub(opened.elapsed())).await;
    assert!(try_h2(&mut c1_h2).await.is_err(), "old: GOAWAY");
    assert_eq!(try_quic(&c1_quic).await, Ok(421), "old: sent away");
    assert_eq!(open_h2.echo("still").await.as_deref(), Ok("still"));
    assert_eq!(open_quic.echo("still").await.as_deref(), Ok("still"));
    drop(open_quic);
    let closed = tokio::time::timeout(Duration::from_secs(1), c1_quic.closed()).await;
    assert!(
        closed.is_ok(),
        "closed once its last stream is done, before the grace"
    );
    let mut fresh = site.h2("c1", 1 << 20).await;
    assert_eq!(try_h2(&mut fresh).await, Ok(200), "a new connection serves");
    let metrics = site.metrics().await;
    assert_eq!(
        metric(
            &metrics,
            "strait_limited_total{limit=\"max_connection_age\",transport=\"h2\"}"
        ),
        1,
        "{metrics}"
    );
}

/// The gateway's own tunnel clients (HTTP/2 pool and QUIC pool, as c1)
/// keep a stream open across c3's maximum age (1 s) and open a new stream
/// every 100 ms for 3 s: each new stream after a GOAWAY or a 421 goes on a
/// new connection, none fails, and the long stream finishes in the grace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tunnel_clients_ride_over_maximum_age_without_a_failed_stream() {
    let _serial = SERIAL.lock().await;
    let site = Site::start(
        TunnelSettings {
            close_grace: Duration::from_secs(5),
            max_connection_age: Duration::from_secs(1),
            ..settings()
        },
        None,
    )
    .await;
    let tls =
        Arc::new(strait::tls::ReloadingTls::load(&site.certs.join("c1")).expect("c1 certificate"));
    let metrics = Arc::new(strait::admin::Metrics::new());
    let h2_pool = strait::tunnel::client::TunnelPool::new(
        TunnelSettings::default(),
        tls.clone(),
        strait::net::dial::DialOptions {
            timeout: Duration::from_secs(2),
            source: None,
        },
        metrics.clone(),
    );
    let quic_pool = strait::tunnel::quic::client::QuicPool::new(
        SocketAddr::new(gateway_ip(1), 0),
        tls,
        TunnelSettings::default(),
        metrics,
    )
    .expect("quic pool");
    let gateway = strait::model::GatewayAddress {
        host: strait::model::GatewayHost::Ip(site.tunnel.ip()),
        port: site.tunnel.port(),
    };
    let allowed = [ClusterId::new("c3").expect("id")];
    let mut long_h2 = h2_pool
        .connect(&gateway, None, &allowed, ECHO)
        .await
        .expect("a long h2 stream");
    let mut long_quic = quic_pool
        .connect(&gateway, None, &allowed, ECHO)
        .await
        .expect("a long quic stream");
    let started = Instant::now();
    let mut opened = 0;
    while started.elapsed() < Duration::from_secs(3) {
        let mut h2 = h2_pool
            .connect(&gateway, None, &allowed, ECHO)
            .await
            .unwrap_or_else(|e| panic!("h2 stream at {:?}: {e}", started.elapsed()));
        let mut quic = quic_pool
            .connect(&gateway, None, &allowed, ECHO)
            .await
            .unwrap_or_else(|e| panic!("quic stream at {:?}: {e}", started.elapsed()));
        let mut greeting = [0u8; 7];
        h2.read_exact(&mut greeting).await.expect("h2 greeting");
        quic.read_exact(&mut greeting).await.expect("quic greeting");
        opened += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for stream in [
        &mut long_h2 as &mut dyn ReadWrite,
        &mut long_quic as &mut dyn ReadWrite,
    ] {
        let mut greeting = vec![0u8; 64];
        let read = stream.read(&mut greeting).await.expect("greeting");
        assert!(greeting[..read].starts_with(b"c3-echo"));
        stream.write_all(b"long lived\n").await.expect("write");
        let mut echoed = vec![0u8; 11];
        stream
            .read_exact(&mut echoed)
            .await
            .expect("the long stream still echoes");
        assert_eq!(&echoed, b"long lived\n");
    }
    let metrics = site.metrics().await;
    let rotated = metric(
        &metrics,
        "strait_limited_total{limit=\"max_connection_age\",transport=\"h2\"}",
    ) + metric(
        &metrics,
        "strait_limited_total{limit=\"max_connection_age\",transport=\"quic\"}",
    );
    println!("MAX AGE: {opened} rounds of 2 new streams, {rotated} connections rotated");
    assert!(
        rotated >= 4,
        "connections reached their age: {rotated}\n{metrics}"
    );
}

trait ReadWrite: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send> ReadWrite for T {}

/// The client side: a pooled connection to a peer gateway whose certificate
/// this gateway's own material stops trusting (c3's leaf listed in c1's
/// `tls.crl`) is retired within a second, and the pool opens no new one to
/// that peer (the handshake now fails): a revoked server is not used.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pooled_connection_to_a_revoked_server_is_retired() {
    let _serial = SERIAL.lock().await;
    let site = Site::start(lifetime_settings(Duration::from_secs(3600)), None).await;
    let c1 = site.certs.join("c1");
    let tls = Arc::new(strait::tls::ReloadingTls::load(&c1).expect("c1's material"));
    let pool = strait::tunnel::client::TunnelPool::new(
        lifetime_settings(Duration::from_secs(3600)),
        tls.clone(),
        strait::net::dial::DialOptions {
            timeout: Duration::from_secs(2),
            source: None,
        },
        Arc::new(strait::admin::metrics::Metrics::new()),
    );
    let gateway = strait::model::GatewayAddress {
        host: strait::model::GatewayHost::Ip(site.tunnel.ip()),
        port: site.tunnel.port(),
    };
    let c3 = [ClusterId::new("c3").expect("id")];
    pool.connect(&gateway, None, &c3, ECHO)
        .await
        .expect("a stream through the pool");
    let pooled = |pool: &strait::tunnel::client::TunnelPool| -> usize {
        pool.connection_counts().iter().map(|(_, n)| n).sum()
    };
    assert_eq!(pooled(&pool), 1);
    // c3's leaf, revoked by its issuer, in c1's own list.
    let leaf =
        std::fs::read(site.certs.join("c3").join(strait::tls::CERT_FILE)).expect("c3's leaf");
    let leaf = rustls_pki_types::CertificateDer::from_pem_slice(&leaf).expect("pem");
    let crl = strait::tls::revocation_list(&site.cas["c3"], &[&leaf]).expect("crl");
    std::fs::write(c1.join(strait::tls::CRL_FILE), crl).expect("tls.crl");
    assert!(tls.reload_now().expect("a valid list"), "c1 took the list");
    let revoked_at = Instant::now();
    while pooled(&pool) > 0 && revoked_at.elapsed() < Duration::from_secs(1) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(pooled(&pool), 0, "the pooled connection is retired");
    assert!(
        pool.connect(&gateway, None, &c3, ECHO).await.is_err(),
        "no stream reaches the revoked server"
    );
}
