//! The HTTP CONNECT egress listener: a local client asks for
//! `<svc>.<ns>.svc.clusterset.local:<port>` (or one pod of a headless
//! service), Strait opens the upstream, answers 200 and splices; or it
//! answers with a clear 4xx/5xx saying why not.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

use tracing::Instrument;

use super::Finish;
use super::upstream::{Carry, OpenError, Selection, open};
use crate::admin::metrics::{Limit, Listener, Transport};
use crate::logging::connection::{ConnectionId, record_service};
use crate::model::Protocol;
use crate::net::splice::{SpliceEnd, splice};
use crate::routing::target::{Target, parse_authority};
use crate::state::GatewayState;

/// How long a client may take to send its CONNECT request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// The most a CONNECT request head may take in memory: hyper's smallest
/// read buffer. A real one is a few hundred bytes; a longer one is refused
/// (431) instead of growing to hyper's default of about 400 KB.
const MAX_REQUEST_HEAD: usize = 8 * 1024;
/// Header fields of one CONNECT request; more are refused.
const MAX_REQUEST_HEADERS: usize = 32;

/// Accepts local clients until `shutdown`.
pub async fn serve(listener: TcpListener, state: Arc<GatewayState>, shutdown: CancellationToken) {
    let tracker = state.connections.clone();
    crate::net::accept::accept_until(
        listener,
        Listener::Connect,
        state.clone().admission(Listener::Connect),
        shutdown,
        tracker,
        move |stream, remote, id| serve_connection(stream, remote, id, state.clone()),
    )
    .await;
}

async fn serve_connection(
    stream: TcpStream,
    remote: SocketAddr,
    id: ConnectionId,
    state: Arc<GatewayState>,
) {
    let service = service_fn(move |request| {
        let state = state.clone();
        async move { Ok::<_, Infallible>(handle(request, remote, id, state).await) }
    });
    let result = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(REQUEST_TIMEOUT)
        .max_buf_size(MAX_REQUEST_HEAD)
        .max_headers(MAX_REQUEST_HEADERS)
        .serve_connection(TokioIo::new(stream), service)
        .with_upgrades()
        .await;
    if let Err(error) = result {
        tracing::debug!(%remote, %error, "connect client ended");
    }
}

fn respond(status: StatusCode, message: impl Into<String>) -> Response<Full<Bytes>> {
    let mut body = message.into();
    body.push('\n');
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response
}

async fn handle(
    mut request: Request<Incoming>,
    remote: SocketAddr,
    id: ConnectionId,
    state: Arc<GatewayState>,
) -> Response<Full<Bytes>> {
    let started = Instant::now();
    if request.method() != Method::CONNECT {
        return respond(
            StatusCode::METHOD_NOT_ALLOWED,
            "only CONNECT is served here; ask for <service>.<namespace>.svc.clusterset.local:<port>",
        );
    }
    let Some(authority) = request.uri().authority().map(|a| a.as_str().to_owned()) else {
        return respond(StatusCode::BAD_REQUEST, "CONNECT needs host:port");
    };
    let target = match parse_authority(&authority) {
        Ok(target) => target,
        Err(error) => return respond(StatusCode::BAD_REQUEST, error.to_string()),
    };
    let (key, port, pod) = match &target {
        Target::Address(address) => {
            return respond(
                StatusCode::FORBIDDEN,
                format!("{address}: clients name a service, not an address"),
            );
        }
        Target::Service { service, port } => (service, *port, None),
        Target::Pod {
            hostname,
            cluster,
            service,
            port,
        } => (service, *port, Some((hostname.as_str(), cluster))),
    };
    record_service(key, port);
    let table = state.routes.load_full();
    let Some(service) = table.service(&key.namespace, &key.name) else {
        return respond(
            StatusCode::NOT_FOUND,
            format!("{key} is not an exported service"),
        );
    };
    let Some(route) = service.port(Protocol::Tcp, port) else {
        let exposed: Vec<String> = service
            .ports
            .iter()
            .map(|p| format!("{}/{}", p.port, p.protocol))
            .collect();
        return respond(
            StatusCode::FORBIDDEN,
            format!(
                "{key} does not expose port {port}/TCP; it exposes {}",
                exposed.join(", ")
            ),
        );
    };
    let selection = match pod {
        Some((hostname, cluster)) => {
            if route.pod(hostname, cluster).is_none() {
                return respond(
                    StatusCode::NOT_FOUND,
                    format!("{key} has no ready pod {hostname} in cluster {cluster}"),
                );
            }
            Selection::Pod {
                label: hostname,
                cluster,
            }
        }
        None => Selection::Port,
    };
    // Boxed: opening (a dial, maybe a tunnel handshake) needs several KiB
    // of state that would otherwise be moved with this request's future.
    let opened = Box::pin(open(
        &state,
        &table,
        service,
        route,
        selection,
        remote,
        Carry::Stream,
    ));
    let opened = match opened.await {
        Ok(opened) => opened,
        Err(error) => {
            let status = match &error {
                OpenError::NotAdmitted(_) => StatusCode::FORBIDDEN,
                // No backend it may use: unavailable, with the fence named.
                OpenError::NoBackend(_) | OpenError::Fenced(_) => StatusCode::SERVICE_UNAVAILABLE,
                OpenError::Failed(_) => StatusCode::BAD_GATEWAY,
                OpenError::TimedOut(_) => StatusCode::GATEWAY_TIMEOUT,
            };
            if state.quiet.local_connections.check(error.kind()) {
                tracing::info!(client = %remote, %authority, %error, "connect refused");
            }
            return respond(status, error.to_string());
        }
    };
    let on_upgrade = hyper::upgrade::on(&mut request);
    let charge = super::EgressCharge::of(&state);
    let (upstream, finish) = Finish::split(opened, id, remote, key.clone(), port, started, charge);
    let (idle_timeout, stall_report) = (state.idle_timeout, state.stall_report);
    let limits = state.metrics.clone();
    // This task lives as long as the connection: it holds the splice, and
    // the splice what the log line needs (see `Finish`).
    state.connections.spawn(
        async move {
            // Not a `match` around the splice: its scrutinee would be kept
            // beside the splice for the connection's lifetime.
            let upgraded = match on_upgrade.await {
                Ok(upgraded) => upgraded,
                Err(error) => {
                    tracing::debug!(client = %remote, %error, "connect upgrade failed");
                    return;
                }
            };
            let mut splice =
                splice(TokioIo::new(upgraded), upstream, idle_timeout).watch(stall_report, finish);
            // By reference: awaiting by value would move it into a second slot.
            let outcome = (&mut splice).await;
            if matches!(outcome.end, SpliceEnd::OverBudget) {
                limits.limited(Limit::Memory, Transport::None);
            }
            splice.into_watch().done(outcome);
        }
        .instrument(tracing::Span::current()),
    );
    Response::new(Full::new(Bytes::new()))
}
