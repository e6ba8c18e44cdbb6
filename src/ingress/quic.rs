//! The QUIC side of the tunnel listener: the same port number as the HTTP/2
//! listener, on UDP. Each peer connection is authenticated by certificate;
//! each bidirectional stream carries one request, authorised and dialled
//! exactly as an HTTP/2 CONNECT stream is.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use quinn::{Endpoint, RecvStream, SendStream};
use tokio_util::sync::CancellationToken;

use tracing::Instrument;

use super::inbound;
use crate::admin::metrics::{Limit, RefusedReason, Transport};
use crate::logging::connection::{ConnectionId, connection_span, record_peer, stream_span};
use crate::routing::inbound::InboundRefusal;
use crate::state::GatewayState;
use crate::tls::{Identity, identity_of};
use crate::token_bucket::TokenBucket;
use crate::tunnel::quic::{
    QuicStream, encode_response, peer_certificate, read_request, server_config,
};

/// The application error code of a connection closed for going over a limit.
const OVER_LIMIT: u32 = 2;
/// How often a connection's received control frames are counted.
const CONTROL_FRAME_SAMPLE: Duration = Duration::from_millis(250);

/// The control frames a peer sent on `connection` so far: everything but
/// stream data, ACKs, crypto and the handshake's own frames.
fn control_frames(connection: &quinn::Connection) -> u64 {
    let frames = connection.stats().frame_rx;
    [
        frames.ping,
        frames.reset_stream,
        frames.stop_sending,
        frames.max_data,
        frames.max_stream_data,
        frames.max_streams_bidi,
        frames.max_streams_uni,
        frames.data_blocked,
        frames.stream_data_blocked,
        frames.streams_blocked_bidi,
        frames.streams_blocked_uni,
        frames.path_challenge,
        frames.new_connection_id,
        frames.retire_connection_id,
    ]
    .iter()
    .sum()
}

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
        let span = connection_span(
            ConnectionId::next(),
            "tunnel_quic",
            incoming.remote_address(),
        );
        state
            .connections
            .clone()
            .spawn(serve_connection(incoming, state, shutdown).instrument(span));
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
    record_peer(&caller);
    tracing::debug!(%remote, caller = %caller, "quic tunnel peer connected");
    // quinn counts the frames it receives; the count is sampled here.
    let mut bucket = TokenBucket::new(
        state.tunnel.control_frames.per_second,
        state.tunnel.control_frames.burst,
        Instant::now(),
    );
    let mut counted = control_frames(&connection);
    let mut sample = tokio::time::interval(CONTROL_FRAME_SAMPLE);
    loop {
        let (send, recv) = tokio::select! {
            _ = sample.tick() => {
                let now_counted = control_frames(&connection);
                let spent = now_counted.saturating_sub(counted);
                counted = now_counted;
                if !bucket.spend(spent, Instant::now()) {
                    state.metrics.limited(Limit::ControlFrames, Transport::Quic);
                    if state.quiet.tunnel_requests.check("control_frames") {
                        tracing::info!(%remote, caller = %caller, "quic peer sent control frames past its limit; closed");
                    }
                    connection.close(OVER_LIMIT.into(), b"control frames over limit");
                    return;
                }
                continue;
            }
            stream = connection.accept_bi() => match stream {
                Ok(stream) => stream,
                Err(error) => {
                    tracing::debug!(%remote, caller = %caller, %error, "quic tunnel connection ended");
                    return;
                }
            },
            () = shutdown.cancelled() => return,
        };
        let id = ConnectionId::next();
        state.connections.spawn(
            serve_stream(send, recv, caller.clone(), remote, id, state.clone())
                .instrument(stream_span(id)),
        );
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
    id: ConnectionId,
    state: Arc<GatewayState>,
) -> impl Future<Output = ()> + Send {
    async move {
        // Held for the stream's lifetime, whatever ends it.
        let _stream = match inbound::stream_slot(&state, &caller, None) {
            Ok(permit) => permit,
            Err(refusal) => {
                let _ = send
                    .write_all(&encode_response(refusal.status, &refusal.reason))
                    .await;
                let _ = send.finish();
                return;
            }
        };
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
            id,
            Transport::Quic,
        ));
        // A peer that resets or stops the stream while the backend is
        // being dialled cancels the dial.
        // Only a reset or STOP_SENDING counts: a peer that finished its
        // side early is still waiting for the answer.
        let stopped = send.stopped();
        let stopped = async {
            // `Ok(None)`: the stream was finished, which this side has not done.
            if let Ok(None) = stopped.await {
                std::future::pending::<()>().await;
            }
        };
        let reset = async {
            match recv.received_reset().await {
                Ok(Some(_)) => (),
                Ok(None) | Err(_) => std::future::pending().await,
            }
        };
        let raced = tokio::select! {
            biased;
            () = stopped => None,
            () = reset => None,
            opened = opened => Some(opened),
        };
        let Some(opened) = raced else {
            state.metrics.stream_cancelled(Transport::Quic);
            tracing::debug!(caller = %caller, "quic tunnel stream reset while dialling");
            return;
        };
        // No `match` spans the splice: its scrutinee would be kept beside it.
        let accepted = match opened {
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
            .relay(QuicStream::new(send, recv), &state, Transport::Quic)
            .await;
    }
}
