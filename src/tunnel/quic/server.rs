//! The QUIC side of the tunnel listener: the same port number as the HTTP/2
//! listener, on UDP. Each peer connection is authenticated by certificate;
//! each bidirectional stream carries one request, authorised and dialled
//! exactly as an HTTP/2 CONNECT stream is.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use quinn::{Endpoint, RecvStream, SendStream};
use tokio_util::sync::CancellationToken;

use super::{QuicStream, encode_response, peer_certificate, read_request, server_config};
use crate::admin::metrics::{RefusedReason, Transport};
use crate::gateway::state::GatewayState;
use crate::routing::inbound::InboundRefusal;
use crate::tls::{Identity, identity_of};
use crate::tunnel::inbound;

/// How long a peer may take to send its request frame.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// How often the TLS material is checked for renewal.
const TLS_CHECK_INTERVAL: Duration = Duration::from_secs(5);

/// Serves QUIC peers on `endpoint` until `shutdown`; open streams finish.
pub async fn serve(endpoint: Endpoint, state: Arc<GatewayState>, shutdown: CancellationToken) {
    let mut material = state.tls.current();
    let mut tls_check = tokio::time::interval(TLS_CHECK_INTERVAL);
    loop {
        let incoming = tokio::select! {
            incoming = endpoint.accept() => match incoming {
                Some(incoming) => incoming,
                None => return,
            },
            _ = tls_check.tick() => {
                // Renewed certificates apply to new connections only.
                let current = state.tls.current();
                if !Arc::ptr_eq(&current, &material) {
                    match server_config(&current, &state.tunnel) {
                        Ok(config) => endpoint.set_server_config(Some(config)),
                        Err(error) => tracing::warn!(%error, "renewed certificate unusable for quic"),
                    }
                    material = current;
                }
                continue;
            }
            () = shutdown.cancelled() => {
                // No new connections; the open ones keep their streams.
                endpoint.set_server_config(None);
                return;
            }
        };
        let state = state.clone();
        let shutdown = shutdown.clone();
        state
            .connections
            .clone()
            .spawn(serve_connection(incoming, state, shutdown));
    }
}

async fn serve_connection(
    incoming: quinn::Incoming,
    state: Arc<GatewayState>,
    shutdown: CancellationToken,
) {
    let remote = incoming.remote_address();
    let connection = match tokio::time::timeout(state.tunnel.handshake_timeout, incoming).await {
        Ok(Ok(connection)) => connection,
        Ok(Err(error)) => {
            state.metrics.refused(RefusedReason::Unauthenticated);
            if state.quiet.tunnel_handshakes.check("tls") {
                tracing::info!(%remote, %error, "quic handshake refused");
            }
            return;
        }
        Err(_) => {
            state.metrics.refused(RefusedReason::Unauthenticated);
            if state.quiet.tunnel_handshakes.check("timeout") {
                tracing::info!(%remote, "quic handshake timed out");
            }
            return;
        }
    };
    let caller = match peer_certificate(&connection)
        .ok_or_else(|| "no peer certificate".to_owned())
        .and_then(|cert| identity_of(&cert).map_err(|e| e.to_string()))
        .and_then(|identity| {
            state
                .tls
                .current()
                .check_trust_domain(&identity)
                .map_err(|e| e.to_string())?;
            Ok(identity)
        }) {
        // Shared by the connection's streams rather than copied to each.
        Ok(identity) => Arc::new(identity),
        Err(error) => {
            state.metrics.refused(RefusedReason::Unauthenticated);
            if state.quiet.tunnel_handshakes.check("identity") {
                tracing::info!(%remote, %error, "quic peer has no gateway identity");
            }
            connection.close(1u32.into(), b"unauthenticated");
            return;
        }
    };
    tracing::debug!(%remote, caller = %caller, "quic tunnel peer connected");
    loop {
        let (send, recv) = tokio::select! {
            stream = connection.accept_bi() => match stream {
                Ok(stream) => stream,
                Err(error) => {
                    tracing::debug!(%remote, caller = %caller, %error, "quic tunnel connection ended");
                    return;
                }
            },
            () = shutdown.cancelled() => return,
        };
        state.connections.spawn(serve_stream(
            send,
            recv,
            caller.clone(),
            remote,
            state.clone(),
        ));
    }
}

/// Serves one stream: reads the request, authorises and dials, answers,
/// then splices. Not an `async fn`: this task lives as long as the stream,
/// and an `async fn` would keep a second copy of its arguments.
#[expect(
    clippy::manual_async_fn,
    reason = "an async fn would store its arguments twice"
)]
fn serve_stream(
    mut send: SendStream,
    mut recv: RecvStream,
    caller: Arc<Identity>,
    remote: SocketAddr,
    state: Arc<GatewayState>,
) -> impl Future<Output = ()> + Send {
    async move {
        let authority = match tokio::time::timeout(REQUEST_TIMEOUT, read_request(&mut recv)).await {
            Ok(Ok(authority)) => authority,
            Ok(Err(error)) => {
                let refusal = inbound::refuse(
                    &state,
                    &caller,
                    None,
                    InboundRefusal::Malformed(error.to_string()),
                );
                let _ = send
                    .write_all(&encode_response(refusal.status, &refusal.reason))
                    .await;
                let _ = send.finish();
                return;
            }
            Err(_) => {
                let _ = send.reset(1u32.into());
                return;
            }
        };
        // Boxed: the dial's state is large and over once the backend answers,
        // so the long-lived splice does not carry its space.
        let opened = Box::pin(inbound::open(
            &state,
            Some(authority),
            &caller,
            remote,
            Transport::Quic,
        ));
        // No `match` spans the splice: its scrutinee would be kept beside it.
        let accepted = match opened.await {
            Ok(accepted) => accepted,
            Err(refusal) => {
                let _ = send
                    .write_all(&encode_response(refusal.status, &refusal.reason))
                    .await;
                let _ = send.finish();
                return;
            }
        };
        if let Err(error) = send.write_all(&encode_response(200, "")).await {
            accepted.abandon(&error.to_string());
            return;
        }
        accepted
            .relay(QuicStream::new(send, recv), state.idle_timeout)
            .await;
    }
}
