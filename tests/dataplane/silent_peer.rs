//! A peer gateway that keeps the HTTP/2 connection alive (it answers PINGs
//! and SETTINGS, as h2's server does while it is polled) but never answers
//! a CONNECT. The client must give the stream up after its handshake
//! timeout, as the QUIC client does, so the caller can try another
//! gateway, and must not send new streams into the same connection.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use super::*;

/// Serves TLS + HTTP/2 with `certificate`'s identity on `listener`,
/// holding every request unanswered; counts connections and requests.
fn silent_peer(
    listener: tokio::net::TcpListener,
    certificate: &std::path::Path,
    connections: Arc<AtomicUsize>,
    requests: Arc<AtomicUsize>,
) {
    let material = strait::tls::TlsMaterial::load(certificate).expect("peer certificate");
    let acceptor = tokio_rustls::TlsAcceptor::from(material.server_config());
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            connections.fetch_add(1, Ordering::SeqCst);
            let (acceptor, requests) = (acceptor.clone(), requests.clone());
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let Ok(mut connection) = h2::server::handshake(tls).await else {
                    return;
                };
                let mut held = Vec::new();
                while let Some(Ok((_request, respond))) = connection.accept().await {
                    requests.fetch_add(1, Ordering::SeqCst);
                    held.push(respond);
                }
            });
        }
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_that_never_answers_connect_is_given_up_after_the_handshake_timeout() {
    let dir = tempfile::tempdir().expect("temp dir");
    let certs = certificates(dir.path(), &["c1", "c3"]);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let address = listener.local_addr().expect("address");
    let (connections, requests) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    silent_peer(
        listener,
        &certs.join("c3"),
        connections.clone(),
        requests.clone(),
    );

    let settings = TunnelSettings {
        handshake_timeout: Duration::from_millis(400),
        ..TunnelSettings::default()
    };
    let tls = Arc::new(ReloadingTls::load(&certs.join("c1")).expect("client certificate"));
    let dial = DialOptions {
        timeout: Duration::from_secs(2),
        source: None,
    };
    let pool = TunnelPool::new(settings, tls, dial, Arc::new(Metrics::new()));
    let allowed = [ClusterId::new("c3").expect("id")];
    let gateway = gateway_of(address);
    for attempt in 1..=2 {
        let started = Instant::now();
        let connecting = pool.connect(&gateway, None, &allowed, "echo.app.svc.clusterset.local:42");
        // Without a response timeout this would wait forever.
        let result = tokio::time::timeout(Duration::from_secs(10), connecting)
            .await
            .unwrap_or_else(|_| panic!("attempt {attempt} still waits after 10 s"));
        let waited = started.elapsed();
        match result {
            Err(error @ TunnelError::ResponseTimeout { .. }) => {
                assert!(error.is_gateway_failure() && error.is_timeout(), "{error}");
            }
            Err(other) => panic!("attempt {attempt}: unexpected error {other}"),
            Ok(_) => panic!("attempt {attempt}: a stream with no answer"),
        }
        assert!(
            waited >= Duration::from_millis(400) && waited < Duration::from_secs(3),
            "attempt {attempt} gave up after {waited:?}"
        );
        assert_eq!(
            requests.load(Ordering::SeqCst),
            attempt,
            "the CONNECT was sent"
        );
        // The silent connection takes no new stream: each attempt dials.
        assert_eq!(connections.load(Ordering::SeqCst), attempt);
    }
}
