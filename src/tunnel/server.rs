//! The tunnel server: accepts peer gateways over mutual TLS, learns the
//! caller's cluster from its certificate, authorises every CONNECT target
//! against the route table before any dial, then splices the stream to the
//! backend.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use http::{HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::Empty;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

use super::ERROR_HEADER;
use crate::admin::metrics::{ClosedResult, RefusedReason, RoutePath, Transport};
use crate::gateway::state::GatewayState;
use crate::proxy::dial::{dial, tune_accepted};
use crate::proxy::splice::{SpliceEnd, splice};
use crate::routing::Path;
use crate::routing::balancer::BackendId;
use crate::routing::inbound::{InboundPlan, InboundRefusal, authorize};
use crate::tls::{Identity, peer_identity};

/// Accepts peer gateways until `shutdown`, then lets open streams finish.
pub async fn serve(listener: TcpListener, state: Arc<GatewayState>, shutdown: CancellationToken) {
    loop {
        let (stream, remote) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    tracing::warn!(%error, "tunnel listener accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = shutdown.cancelled() => return,
        };
        let state = state.clone();
        let shutdown = shutdown.clone();
        state
            .connections
            .clone()
            .spawn(serve_connection(stream, remote, state, shutdown));
    }
}

async fn serve_connection(
    stream: TcpStream,
    remote: SocketAddr,
    state: Arc<GatewayState>,
    shutdown: CancellationToken,
) {
    let _ = tune_accepted(&stream);
    let acceptor = TlsAcceptor::from(state.tls.current().server_config());
    let tls =
        match tokio::time::timeout(state.tunnel.handshake_timeout, acceptor.accept(stream)).await {
            Ok(Ok(tls)) => tls,
            Ok(Err(error)) => {
                state.metrics.refused(RefusedReason::Unauthenticated);
                tracing::info!(%remote, %error, "tunnel handshake refused");
                return;
            }
            Err(_) => {
                state.metrics.refused(RefusedReason::Unauthenticated);
                tracing::info!(%remote, "tunnel handshake timed out");
                return;
            }
        };
    let caller = match peer_identity(tls.get_ref().1).and_then(|identity| {
        state.tls.current().check_trust_domain(&identity)?;
        Ok(identity)
    }) {
        Ok(identity) => identity,
        Err(error) => {
            state.metrics.refused(RefusedReason::Unauthenticated);
            tracing::info!(%remote, %error, "tunnel peer has no gateway identity");
            return;
        }
    };
    tracing::debug!(%remote, caller = %caller, "tunnel peer connected");
    let settings = &state.tunnel;
    let service_state = state.clone();
    let service_caller = caller.clone();
    let service = service_fn(move |request| {
        let state = service_state.clone();
        let caller = service_caller.clone();
        async move { Ok::<_, Infallible>(handle(request, caller, remote, state).await) }
    });
    let connection = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
        .timer(TokioTimer::new())
        .max_concurrent_streams(settings.server_max_concurrent_streams)
        .max_header_list_size(settings.max_header_list_size)
        .initial_stream_window_size(settings.stream_window)
        .initial_connection_window_size(settings.connection_window)
        .max_frame_size(settings.max_frame_size)
        .keep_alive_interval(settings.keepalive_interval)
        .keep_alive_timeout(settings.keepalive_timeout)
        .serve_connection(TokioIo::new(tls), service);
    tokio::pin!(connection);
    let result = tokio::select! {
        result = connection.as_mut() => result,
        () = shutdown.cancelled() => {
            // GOAWAY: no new streams, the open ones run to completion.
            connection.as_mut().graceful_shutdown();
            connection.await
        }
    };
    if let Err(error) = result {
        tracing::debug!(%remote, caller = %caller, %error, "tunnel connection ended");
    }
}

fn respond(status: StatusCode, reason: &str) -> Response<Empty<Bytes>> {
    let mut response = Response::new(Empty::new());
    *response.status_mut() = status;
    if let Ok(value) = HeaderValue::from_str(reason) {
        response.headers_mut().insert(ERROR_HEADER, value);
    }
    response
}

async fn handle(
    mut request: Request<Incoming>,
    caller: Identity,
    remote: SocketAddr,
    state: Arc<GatewayState>,
) -> Response<Empty<Bytes>> {
    let started = Instant::now();
    let authority = request.uri().authority().map(|a| a.as_str().to_owned());
    let table = state.routes.load_full();
    let plan = if request.method() == Method::CONNECT {
        authorize(&table, authority.as_deref(), &state.own_listeners)
    } else {
        Err(InboundRefusal::Malformed(format!(
            "method {} is not CONNECT",
            request.method()
        )))
    };
    let plan = match plan {
        Ok(plan) => plan,
        Err(refusal) => {
            state.metrics.refused(match &refusal {
                InboundRefusal::Malformed(_) => RefusedReason::Malformed,
                InboundRefusal::Forbidden(_) => RefusedReason::Forbidden,
                InboundRefusal::UnknownService(_) => RefusedReason::UnknownService,
                InboundRefusal::NoBackend(_) => RefusedReason::NoBackend,
            });
            tracing::info!(caller = %caller, authority = authority.as_deref().unwrap_or(""), %refusal, "tunnel request refused");
            let status = StatusCode::from_u16(refusal.status()).unwrap_or(StatusCode::FORBIDDEN);
            return respond(status, &refusal.to_string());
        }
    };

    let metrics = state.metrics.connection(RoutePath::Inbound, Transport::H2);
    // Candidates in the order they are tried: one fixed address, or picks
    // from the local backends of a service port.
    let mut tried: Vec<BackendId> = Vec::new();
    let mut last_error = None;
    let mut rng = fastrand::Rng::new();
    let mut backend = None;
    let mut attempts = 0;
    while attempts < state.dial_attempts.max(1) {
        let address = match &plan {
            InboundPlan::Dial(address) => *address,
            InboundPlan::Pick { service, route } => {
                // Session affinity keys on the calling gateway: the original
                // client's address does not cross the tunnel.
                let picked = state.chooser.pick(
                    service,
                    route,
                    remote.ip(),
                    &tried,
                    Instant::now(),
                    &mut rng,
                );
                let Some(routed) = picked else { break };
                tried.push(BackendId::of(routed));
                // Only backends of this network are dialled; skip the others
                // without spending an attempt.
                if routed.path != Path::Direct {
                    continue;
                }
                SocketAddr::new(routed.backend.address, routed.backend.port)
            }
        };
        attempts += 1;
        let dial_started = Instant::now();
        match dial(state.overrides.backend(address), state.dial).await {
            Ok(stream) => {
                metrics.dial(dial_started.elapsed());
                backend = Some((address, stream));
                break;
            }
            Err(error) => {
                tracing::debug!(caller = %caller, %address, %error, "inbound dial failed");
                last_error = Some(error);
                if matches!(plan, InboundPlan::Dial(_)) {
                    break;
                }
            }
        }
    }
    let Some((address, backend)) = backend else {
        let (status, result) = match &last_error {
            Some(error) if error.is_timeout() => {
                (StatusCode::GATEWAY_TIMEOUT, ClosedResult::Timeout)
            }
            Some(_) => (StatusCode::BAD_GATEWAY, ClosedResult::DialError),
            None => (StatusCode::SERVICE_UNAVAILABLE, ClosedResult::DialError),
        };
        metrics.closed(result, 0, 0);
        let reason = last_error.map_or_else(
            || "no ready backend left to try".to_owned(),
            |e| e.to_string(),
        );
        return respond(status, &reason);
    };

    let on_upgrade = hyper::upgrade::on(&mut request);
    let idle_timeout = state.idle_timeout;
    state.connections.spawn(async move {
        let upgraded = match on_upgrade.await {
            Ok(upgraded) => upgraded,
            Err(error) => {
                tracing::debug!(caller = %caller, %error, "tunnel stream upgrade failed");
                metrics.closed(ClosedResult::Error, 0, 0);
                return;
            }
        };
        let outcome = splice(TokioIo::new(upgraded), backend, idle_timeout).await;
        let result = match outcome.end {
            SpliceEnd::Closed => ClosedResult::Ok,
            SpliceEnd::IdleTimeout => ClosedResult::Timeout,
            SpliceEnd::Error(_) => ClosedResult::Error,
        };
        tracing::info!(
            target: "strait::access",
            direction = "inbound",
            caller = %caller.cluster,
            authority = authority.as_deref().unwrap_or(""),
            backend = %address,
            bytes_in = outcome.client_to_backend,
            bytes_out = outcome.backend_to_client,
            duration_ms = started.elapsed().as_millis() as u64,
            result = ?outcome.end,
            "connection"
        );
        metrics.closed(result, outcome.client_to_backend, outcome.backend_to_client);
    });
    Response::new(Empty::new())
}
