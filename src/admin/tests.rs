//! Loopback tests of the admin listener with a raw HTTP/1.1 client over a
//! real `TcpStream`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::metrics::{ClosedResult, RoutePath, Transport};
use super::{
    AdminState, DebugGate, Limits, Metrics, OPENMETRICS_CONTENT_TYPE, respond, serve, serve_with,
};
use http::{Method, StatusCode};

const WAIT: Duration = Duration::from_secs(5);

/// One parsed response.
#[derive(Debug)]
struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Reply {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

fn parse(raw: &[u8], with_body: bool) -> Reply {
    let text = std::str::from_utf8(raw).expect("response is UTF-8");
    let (head, body) = text.split_once("\r\n\r\n").expect("response has a head");
    let mut lines = head.split("\r\n");
    let status_line = lines.next().expect("status line");
    let status = status_line
        .split(' ')
        .nth(1)
        .expect("status code")
        .parse()
        .expect("numeric status");
    assert!(status_line.starts_with("HTTP/1.1 "), "{status_line}");
    let headers = lines
        .map(|line| {
            let (name, value) = line.split_once(':').expect("header line");
            (name.trim().to_owned(), value.trim().to_owned())
        })
        .collect();
    let reply = Reply {
        status,
        headers,
        body: if with_body {
            body.to_owned()
        } else {
            String::new()
        },
    };
    if with_body {
        let length: usize = reply
            .header("content-length")
            .expect("content-length")
            .parse()
            .expect("numeric content-length");
        assert_eq!(reply.body.len(), length, "body length matches");
    } else {
        assert!(body.is_empty(), "HEAD response carries no body: {body:?}");
    }
    reply
}

/// Sends one request with `connection: close` and reads the whole response.
async fn request(addr: SocketAddr, method: &str, path: &str) -> Reply {
    let exchange = async {
        let mut stream = TcpStream::connect(addr).await.expect("connect");
        let req = format!("{method} {path} HTTP/1.1\r\nhost: admin\r\nconnection: close\r\n\r\n");
        stream
            .write_all(req.as_bytes())
            .await
            .expect("write request");
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).await.expect("read response");
        raw
    };
    let raw = tokio::time::timeout(WAIT, exchange)
        .await
        .expect("response in time");
    parse(&raw, method != "HEAD")
}

fn state(ready: bool, clusters: bool) -> AdminState {
    AdminState {
        imports_json: Arc::new(|| serde_json::json!({"listening": []})),
        status_json: Arc::new(|| serde_json::json!({"cluster": "east"})),
        dns_json: Arc::new(|query| match query {
            "name=cart" => Ok(serde_json::json!({"rcode": "NOERROR"})),
            _ => Err("missing name".into()),
        }),
        metrics: Arc::new(Metrics::new()),
        ready: Arc::new(AtomicBool::new(ready)),
        routes_json: Arc::new(|query| match query {
            "" => Ok(serde_json::json!({"services": [{"name": "web.shop"}]})),
            _ => Err("unknown query".into()),
        }),
        clusters_json: clusters.then(|| {
            Arc::new(|| serde_json::json!({"clusters": ["east", "west"]})) as super::JsonView
        }),
    }
}

struct Running {
    addr: SocketAddr,
    stop: oneshot::Sender<()>,
    task: JoinHandle<std::io::Result<()>>,
}

async fn start(state: AdminState, limits: Option<Limits>) -> Running {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind loopback");
    let addr = listener.local_addr().expect("local addr");
    let (stop, stopped) = oneshot::channel::<()>();
    let shutdown = async move {
        // A dropped sender also means stop.
        let _ = stopped.await;
    };
    let task = match limits {
        None => tokio::spawn(serve(listener, state, shutdown)),
        Some(limits) => tokio::spawn(serve_with(listener, state, shutdown, limits)),
    };
    Running { addr, stop, task }
}

impl Running {
    async fn shut_down(self) -> SocketAddr {
        self.stop.send(()).expect("server still running");
        tokio::time::timeout(WAIT, self.task)
            .await
            .expect("server stops in time")
            .expect("server task did not panic")
            .expect("server returned Ok");
        self.addr
    }
}

#[tokio::test]
async fn endpoints_over_loopback() {
    let state = state(false, false);
    let ready = Arc::clone(&state.ready);
    let conn = state.metrics.connection(RoutePath::Direct, Transport::None);
    conn.closed(ClosedResult::Ok, 10, 20);
    state.metrics.set_route_sizes(3, 9);
    let server = start(state, None).await;
    let addr = server.addr;

    let health = request(addr, "GET", "/healthz").await;
    assert_eq!((health.status, health.body.as_str()), (200, "ok"));

    let not_ready = request(addr, "GET", "/readyz").await;
    assert_eq!(
        (not_ready.status, not_ready.body.as_str()),
        (503, "not ready")
    );
    ready.store(true, Ordering::Release);
    let now_ready = request(addr, "GET", "/readyz").await;
    assert_eq!((now_ready.status, now_ready.body.as_str()), (200, "ready"));

    let metrics = request(addr, "GET", "/metrics").await;
    assert_eq!(metrics.status, 200);
    assert_eq!(
        metrics.header("content-type"),
        Some(OPENMETRICS_CONTENT_TYPE)
    );
    assert!(
        metrics
            .body
            .contains(r#"strait_connections_closed_total{path="direct",result="ok"} 1"#),
        "{}",
        metrics.body
    );
    assert!(metrics.body.contains("strait_routes_backends 9"));
    assert!(metrics.body.ends_with("# EOF\n"));

    let refused = request(addr, "GET", "/debug/routes?verbose=1").await;
    assert_eq!(refused.status, 400, "{}", refused.body);
    let routes = request(addr, "GET", "/debug/routes").await;
    assert_eq!(routes.status, 200);
    assert_eq!(routes.header("content-type"), Some("application/json"));
    let value: serde_json::Value = serde_json::from_str(&routes.body).expect("routes JSON");
    assert_eq!(value["services"][0]["name"], "web.shop");
    assert!(
        routes.body.contains("\n  "),
        "pretty-printed: {}",
        routes.body
    );

    let clusters = request(addr, "GET", "/debug/clusters").await;
    assert_eq!(clusters.status, 404);

    let dns = request(addr, "GET", "/debug/dns?name=cart").await;
    assert_eq!(dns.status, 200);
    assert!(dns.body.contains("NOERROR"), "{}", dns.body);
    let bad = request(addr, "GET", "/debug/dns").await;
    assert_eq!((bad.status, bad.body.as_str()), (400, "missing name\n"));

    let missing = request(addr, "GET", "/nope").await;
    assert_eq!(missing.status, 404);

    for method in ["POST", "PUT", "DELETE"] {
        let refused = request(addr, method, "/healthz").await;
        assert_eq!(refused.status, 405, "{method}");
        assert_eq!(refused.header("allow"), Some("GET, HEAD"), "{method}");
    }

    let head = request(addr, "HEAD", "/healthz").await;
    assert_eq!(head.status, 200);
    assert_eq!(head.header("content-length"), Some("2"));

    let addr = server.shut_down().await;
    let after = tokio::time::timeout(WAIT, TcpStream::connect(addr))
        .await
        .expect("connect attempt finishes");
    assert!(after.is_err(), "listener closed after shutdown");
}

#[tokio::test]
async fn clusters_view_when_present() {
    let server = start(state(true, true), None).await;
    let clusters = request(server.addr, "GET", "/debug/clusters").await;
    assert_eq!(clusters.status, 200);
    let value: serde_json::Value = serde_json::from_str(&clusters.body).expect("clusters JSON");
    assert_eq!(value["clusters"][1], "west");
    server.shut_down().await;
}

#[tokio::test]
async fn shutdown_closes_idle_keep_alive_connection() {
    let server = start(state(true, false), None).await;
    let mut stream = TcpStream::connect(server.addr).await.expect("connect");
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: admin\r\n\r\n")
        .await
        .expect("write request");
    let mut buf = vec![0u8; 1024];
    let mut raw = Vec::new();
    while !raw.ends_with(b"\r\n\r\nok") {
        let n = tokio::time::timeout(WAIT, stream.read(&mut buf))
            .await
            .expect("response in time")
            .expect("read");
        assert_ne!(n, 0, "server kept the connection open");
        raw.extend_from_slice(&buf[..n]);
    }
    assert_eq!(parse(&raw, true).status, 200);

    // The connection is idle and kept alive; shutdown must close it promptly,
    // well inside the drain grace.
    let started = tokio::time::Instant::now();
    server.shut_down().await;
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    let n = tokio::time::timeout(WAIT, stream.read(&mut buf))
        .await
        .expect("EOF in time")
        .expect("read");
    assert_eq!(n, 0, "connection closed by the server");
}

#[tokio::test]
async fn slow_client_is_cut_off_by_header_timeout() {
    let limits = Limits {
        header_read_timeout: Duration::from_millis(200),
        ..Limits::DEFAULT
    };
    let server = start(state(true, false), Some(limits)).await;
    let mut stream = TcpStream::connect(server.addr).await.expect("connect");
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: adm")
        .await
        .expect("write partial request");
    let mut raw = Vec::new();
    let read = tokio::time::timeout(WAIT, stream.read_to_end(&mut raw))
        .await
        .expect("server closes the connection in time");
    // Hyper may answer 408 before closing, or reset; either way it is over.
    if read.is_ok() && !raw.is_empty() {
        let text = String::from_utf8_lossy(&raw);
        assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    }
    server.shut_down().await;
}

#[tokio::test]
async fn at_the_cap_a_new_connection_replaces_the_oldest_so_probes_get_through() {
    let limits = Limits {
        max_connections: 4,
        ..Limits::DEFAULT
    };
    let server = start(state(true, false), Some(limits)).await;
    // A neighbour holds every slot with idle connections.
    let mut idle = Vec::new();
    for _ in 0..4 {
        idle.push(TcpStream::connect(server.addr).await.expect("connect"));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The probe still gets its answer, again and again.
    for _ in 0..3 {
        let reply = request(server.addr, "GET", "/healthz").await;
        assert_eq!(reply.status, 200, "{reply:?}");
    }
    // The oldest idle connection made room: the server closed it.
    let mut raw = Vec::new();
    let read = tokio::time::timeout(WAIT, idle[0].read_to_end(&mut raw))
        .await
        .expect("the oldest connection is closed in time");
    assert!(read.is_err() || raw.is_empty(), "closed without an answer");
    server.shut_down().await;
}

#[test]
fn debug_views_answer_only_loopback_clients_and_one_at_a_time() {
    let state = state(true, true);
    let rendering = std::sync::Mutex::new(());
    let ask = |path: &str, local_peer: bool| {
        let gate = DebugGate {
            local_peer,
            rendering: &rendering,
        };
        respond(&state, &Method::GET, path, None, gate).status()
    };
    for path in [
        "/debug/routes",
        "/debug/clusters",
        "/debug/imports",
        "/debug/status",
        "/debug/nothing",
    ] {
        assert_eq!(ask(path, false), StatusCode::FORBIDDEN, "{path} from a pod");
    }
    assert_eq!(ask("/debug/routes", true), StatusCode::OK);
    assert_eq!(ask("/debug/status", true), StatusCode::OK);
    // Probes and metrics answer whoever reaches the listener.
    for path in ["/healthz", "/readyz", "/metrics"] {
        assert_eq!(ask(path, false), StatusCode::OK, "{path}");
    }
    let held = rendering.lock().expect("not poisoned");
    assert_eq!(ask("/debug/clusters", true), StatusCode::TOO_MANY_REQUESTS);
    drop(held);
    assert_eq!(ask("/debug/clusters", true), StatusCode::OK);
}
