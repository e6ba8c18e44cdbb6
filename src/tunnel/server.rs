//! The tunnel server: accepts peer gateways over mutual TLS, learns the
//! caller's cluster from its certificate, authorises every CONNECT target
//! against the route table before any dial, then splices the stream to the
//! backend.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::Empty;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

use super::{ERROR_HEADER, inbound};
use crate::admin::metrics::{RefusedReason, Transport};
use crate::gateway::state::GatewayState;
use crate::proxy::dial::tune_accepted;
use crate::routing::inbound::InboundRefusal;
use crate::tls::{Identity, peer_identity};

/// Accepts peer gateways until `shutdown`, then lets open streams finish.
pub async fn serve(listener: TcpListener, state: Arc<GatewayState>, shutdown: CancellationToken) {
    let tracker = state.connections.clone();
    crate::proxy::accept_until(
        listener,
        "tunnel",
        shutdown.clone(),
        tracker,
        move |stream, remote| serve_connection(stream, remote, state.clone(), shutdown.clone()),
    )
    .await;
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
    let authority = request.uri().authority().map(|a| a.as_str().to_owned());
    let accepted = if request.method() == Method::CONNECT {
        inbound::open(&state, authority.as_deref(), &caller, remote, Transport::H2).await
    } else {
        let malformed =
            InboundRefusal::Malformed(format!("method {} is not CONNECT", request.method()));
        Err(inbound::refuse(
            &state,
            &caller,
            authority.as_deref(),
            malformed,
        ))
    };
    let accepted = match accepted {
        Ok(accepted) => accepted,
        Err(refusal) => {
            let status = StatusCode::from_u16(refusal.status).unwrap_or(StatusCode::FORBIDDEN);
            return respond(status, &refusal.reason);
        }
    };
    let on_upgrade = hyper::upgrade::on(&mut request);
    let idle_timeout = state.idle_timeout;
    state.connections.spawn(async move {
        match on_upgrade.await {
            Ok(upgraded) => accepted.relay(TokioIo::new(upgraded), idle_timeout).await,
            Err(error) => accepted.abandon(&error.to_string()),
        }
    });
    Response::new(Empty::new())
}
