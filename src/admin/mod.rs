//! The admin listener: liveness, readiness, Prometheus metrics and debug
//! views of the routes and the cluster set, served over plain HTTP/1.1.
//!
//! | path | answer |
//! |---|---|
//! | `/healthz` | 200 `ok` while the process serves requests |
//! | `/readyz` | 200 `ready` once [`AdminState::ready`] is set, else 503 `not ready` |
//! | `/metrics` | 200, OpenMetrics text from [`Metrics`] |
//! | `/debug/routes` | 200, pretty JSON from [`AdminState::routes_json`] (`?service=NS/NAME` for one service); 400 on a bad query |
//! | `/debug/clusters` | 200, pretty JSON from [`AdminState::clusters_json`]; 404 when absent |
//! | `/debug/imports` | 200, pretty JSON from [`AdminState::imports_json`] |
//! | `/debug/status` | 200, pretty JSON from [`AdminState::status_json`]: the cluster set on one screen (`strait status`) |
//! | `/debug/dns?name=NAME&type=TYPE` | 200, pretty JSON from [`AdminState::dns_json`]; 400 with its error for a bad request |
//!
//! Any other path is 404; any method but GET and HEAD is 405 with
//! `allow: GET, HEAD`. The `/debug/*` views list every cluster's endpoints,
//! access policies and import ports, and some cost a walk of the whole
//! table: they answer only clients on loopback (`kubectl port-forward`,
//! `kubectl exec`; anyone else gets 403, whatever the NetworkPolicy
//! admits), one at a time (a request while another renders gets 429).
//! Probes and metrics answer everyone the listener is reachable by. Every connection is bounded: headers must arrive within
//! a timeout (idle keep-alive connections included), a connection is asked to
//! close after a maximum age, and the number of open connections is capped
//! (at the cap a new connection replaces the oldest), so a slow or idle
//! client cannot hold resources for long, nor keep the probes out.

pub mod metrics;

#[cfg(test)]
mod tests;

use std::collections::VecDeque;
use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{Method, Response, StatusCode};
use http_body_util::Full;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::{AbortHandle, JoinSet};

pub use metrics::Metrics;

/// Content type of `/metrics`.
pub const OPENMETRICS_CONTENT_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";

const TEXT_CONTENT_TYPE: &str = "text/plain; charset=utf-8";
const JSON_CONTENT_TYPE: &str = "application/json";

/// A function that renders a debug view as JSON when it is requested.
pub type JsonView = Arc<dyn Fn() -> serde_json::Value + Send + Sync>;

/// Why a [`QueryView`] cannot answer a request: shown as a 400.
pub type QueryError = Box<dyn std::error::Error + Send + Sync>;

/// A debug view that answers a request's query string.
pub type QueryView = Arc<dyn Fn(&str) -> Result<serde_json::Value, QueryError> + Send + Sync>;

/// What the admin endpoints read.
#[derive(Clone)]
pub struct AdminState {
    pub metrics: Arc<Metrics>,
    /// Set once the gateway has routes and can serve traffic.
    pub ready: Arc<AtomicBool>,
    /// The current route table, for `/debug/routes`.
    /// Every service port, or with `service=NS/NAME` that service's only.
    pub routes_json: QueryView,
    /// The cluster set, for `/debug/clusters` (404 when `None`).
    pub clusters_json: Option<JsonView>,
    /// The import ports listened on and, with the Kubernetes source, the
    /// import reconciler's plan, for `/debug/imports`.
    pub imports_json: JsonView,
    /// The cluster set as this gateway sees it, for `/debug/status`.
    pub status_json: JsonView,
    /// The DNS answer for a name and type, and why, for `/debug/dns`.
    pub dns_json: QueryView,
}

/// Who may see a debug view now: the client is on loopback, and no other
/// view is rendering (the lock is held while one does).
struct DebugGate<'a> {
    local_peer: bool,
    rendering: &'a std::sync::Mutex<()>,
}

impl std::fmt::Debug for AdminState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdminState")
            .field("ready", &self.ready.load(Ordering::Relaxed))
            .field("clusters_json", &self.clusters_json.is_some())
            .finish_non_exhaustive()
    }
}

/// Bounds on connections to the admin listener.
#[derive(Debug, Clone, Copy)]
struct Limits {
    /// Time a client has to send a request's headers, also while idle between
    /// keep-alive requests.
    header_read_timeout: Duration,
    /// Age after which a connection is asked to close (after its current request).
    max_connection_age: Duration,
    /// Time a connection has to finish once asked to close.
    drain_grace: Duration,
    /// Open connections at most: at the cap, a new connection takes the
    /// place of the oldest open one (closed at once), so a neighbour holding
    /// every slot with idle connections cannot turn the health probes away.
    max_connections: usize,
}

impl Limits {
    const DEFAULT: Limits = Limits {
        header_read_timeout: Duration::from_secs(10),
        max_connection_age: Duration::from_secs(60),
        drain_grace: Duration::from_secs(5),
        max_connections: 128,
    };
}

/// Pause after an accept error that is not about one connection (for
/// example, out of file descriptors), so the loop does not spin.
const ACCEPT_ERROR_BACKOFF: Duration = Duration::from_millis(100);

/// Serves the admin endpoints on `listener`, one task per connection, until
/// `shutdown` resolves. Then it stops accepting (the listener is closed), asks
/// open connections to finish their current request, waits a few seconds for
/// them, and returns.
///
/// Accept errors are logged and retried; the only error returned is failing
/// to read the listener's local address.
pub async fn serve(
    listener: TcpListener,
    state: AdminState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    serve_with(listener, state, shutdown, Limits::DEFAULT).await
}

async fn serve_with(
    listener: TcpListener,
    state: AdminState,
    shutdown: impl Future<Output = ()> + Send + 'static,
    limits: Limits,
) -> io::Result<()> {
    let local = listener.local_addr()?;
    tracing::info!(%local, "admin listener serving");

    let state = Arc::new(state);
    let rendering = Arc::new(std::sync::Mutex::new(()));
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .keep_alive(true);
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut tasks = JoinSet::new();
    // The open connections, oldest first.
    let mut by_age: VecDeque<AbortHandle> = VecDeque::new();

    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            biased;
            () = &mut shutdown => break,
            Some(joined) = tasks.join_next() => log_join(joined),
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    by_age.retain(|task| !task.is_finished());
                    if by_age.len() >= limits.max_connections.max(1)
                        && let Some(oldest) = by_age.pop_front()
                    {
                        tracing::debug!(%peer, limit = limits.max_connections,
                            "admin connection limit reached; closing the oldest connection");
                        oldest.abort();
                    }
                    if let Err(error) = stream.set_nodelay(true) {
                        tracing::debug!(%peer, %error, "admin: TCP_NODELAY failed");
                    }
                    by_age.push_back(tasks.spawn(serve_connection(
                        builder.clone(),
                        stream,
                        Arc::clone(&state),
                        Arc::clone(&rendering),
                        stop_rx.clone(),
                        limits,
                    )));
                }
                Err(error) if is_connection_error(&error) => {
                    tracing::debug!(%error, "admin: accept failed for one connection");
                }
                Err(error) => {
                    tracing::warn!(%error, "admin: accept failed; pausing");
                    tokio::time::sleep(ACCEPT_ERROR_BACKOFF).await;
                }
            },
        }
    }

    drop(listener);
    tracing::info!(%local, open = tasks.len(), "admin listener stopping");
    // Receivers wait for `true`; an error only means every connection is gone.
    let _ = stop_tx.send(true);
    let drain = async {
        while let Some(joined) = tasks.join_next().await {
            log_join(joined);
        }
    };
    if tokio::time::timeout(limits.drain_grace, drain)
        .await
        .is_err()
    {
        tracing::debug!(
            open = tasks.len(),
            "admin: aborting connections that did not drain"
        );
        tasks.abort_all();
    }
    Ok(())
}

/// Errors that concern one accepted connection, not the listener.
fn is_connection_error(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionRefused
            | io::ErrorKind::Interrupted
    )
}

fn log_join(joined: Result<(), tokio::task::JoinError>) {
    if let Err(error) = joined
        && error.is_panic()
    {
        tracing::error!(%error, "admin connection task panicked");
    }
}

async fn serve_connection(
    builder: http1::Builder,
    stream: TcpStream,
    state: Arc<AdminState>,
    rendering: Arc<std::sync::Mutex<()>>,
    mut stop: watch::Receiver<bool>,
    limits: Limits,
) {
    let local_peer = stream
        .peer_addr()
        .is_ok_and(|peer| peer.ip().to_canonical().is_loopback());
    let service = service_fn(move |request: http::Request<hyper::body::Incoming>| {
        let uri = request.uri();
        let gate = DebugGate {
            local_peer,
            rendering: &rendering,
        };
        let response = respond(&state, request.method(), uri.path(), uri.query(), gate);
        async move { Ok::<_, Infallible>(response) }
    });
    let conn = builder.serve_connection(TokioIo::new(stream), service);
    tokio::pin!(conn);
    // Asked to close: the connection is too old, or the listener is stopping.
    let close = async {
        tokio::select! {
            () = tokio::time::sleep(limits.max_connection_age) => {}
            // An error means the listener is gone: close as well.
            _ = stop.wait_for(|stopping| *stopping) => {}
        }
    };

    let result = tokio::select! {
        result = conn.as_mut() => result,
        () = close => {
            conn.as_mut().graceful_shutdown();
            finish(conn, limits.drain_grace).await
        }
    };
    if let Err(error) = result {
        // Timeouts and clients that hang up are routine; nothing to act on.
        tracing::debug!(%error, "admin connection ended with an error");
    }
}

/// Lets a connection that was asked to close finish, within `grace`.
async fn finish<F>(conn: std::pin::Pin<&mut F>, grace: Duration) -> hyper::Result<()>
where
    F: Future<Output = hyper::Result<()>>,
{
    // Past the grace period the connection is dropped, which closes it.
    tokio::time::timeout(grace, conn).await.unwrap_or(Ok(()))
}

/// Answers one request. Pure apart from reading the state.
fn respond(
    state: &AdminState,
    method: &Method,
    path: &str,
    query: Option<&str>,
    debug: DebugGate<'_>,
) -> Response<Full<Bytes>> {
    if method != Method::GET && method != Method::HEAD {
        let mut response = text(StatusCode::METHOD_NOT_ALLOWED, "method not allowed");
        response
            .headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
        return response;
    }
    if path.starts_with("/debug/") {
        if !debug.local_peer {
            return text(
                StatusCode::FORBIDDEN,
                "debug views answer only on loopback (kubectl port-forward)",
            );
        }
        // Rendered on the connection's own task: one at a time, so a
        // client asking in a loop costs at most one core's share.
        let Ok(_rendering) = debug.rendering.try_lock() else {
            return text(
                StatusCode::TOO_MANY_REQUESTS,
                "another debug view is rendering",
            );
        };
        return debug_view(state, path, query);
    }
    match path {
        "/healthz" => text(StatusCode::OK, "ok"),
        "/readyz" => {
            if state.ready.load(Ordering::Acquire) {
                text(StatusCode::OK, "ready")
            } else {
                text(StatusCode::SERVICE_UNAVAILABLE, "not ready")
            }
        }
        "/metrics" => match state.metrics.try_encode() {
            Ok(body) => with_body(StatusCode::OK, OPENMETRICS_CONTENT_TYPE, body),
            Err(error) => {
                tracing::error!(%error, "admin: rendering /metrics failed");
                text(StatusCode::INTERNAL_SERVER_ERROR, "metrics unavailable")
            }
        },
        _ => text(StatusCode::NOT_FOUND, "not found"),
    }
}

/// A `/debug/*` view.
fn debug_view(state: &AdminState, path: &str, query: Option<&str>) -> Response<Full<Bytes>> {
    match path {
        "/debug/routes" => match (state.routes_json)(query.unwrap_or_default()) {
            Ok(value) => json(&value),
            Err(error) => with_body(
                StatusCode::BAD_REQUEST,
                TEXT_CONTENT_TYPE,
                format!("{error}\n"),
            ),
        },
        "/debug/imports" => json(&(state.imports_json)()),
        "/debug/status" => json(&(state.status_json)()),
        "/debug/dns" => match (state.dns_json)(query.unwrap_or_default()) {
            Ok(value) => json(&value),
            Err(error) => with_body(
                StatusCode::BAD_REQUEST,
                TEXT_CONTENT_TYPE,
                format!("{error}\n"),
            ),
        },
        "/debug/clusters" => match &state.clusters_json {
            Some(view) => json(&view()),
            None => text(StatusCode::NOT_FOUND, "not found"),
        },
        _ => text(StatusCode::NOT_FOUND, "not found"),
    }
}

fn json(value: &serde_json::Value) -> Response<Full<Bytes>> {
    match serde_json::to_vec_pretty(value) {
        Ok(mut body) => {
            body.push(b'\n');
            with_body(StatusCode::OK, JSON_CONTENT_TYPE, body)
        }
        Err(error) => {
            tracing::error!(%error, "admin: rendering JSON failed");
            text(StatusCode::INTERNAL_SERVER_ERROR, "rendering failed")
        }
    }
}

fn text(status: StatusCode, body: &'static str) -> Response<Full<Bytes>> {
    with_body(status, TEXT_CONTENT_TYPE, body)
}

fn with_body(
    status: StatusCode,
    content_type: &'static str,
    body: impl Into<Bytes>,
) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(body.into()));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}
