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

use super::inbound::{self, Asked};
use crate::admin::metrics::{Limit, RefusedReason, Transport};
use crate::backoff::sleep_until;
use crate::logging::connection::{ConnectionId, connection_span, record_peer, stream_span};
use crate::net::slots::Slot;
use crate::routing::inbound::InboundRefusal;
use crate::state::GatewayState;
use crate::tls::lifetime::PeerLifetime;
use crate::tls::{Identity, identity_of};
use crate::token_bucket::TokenBucket;
use crate::tunnel::quic::{
    QuicStream, encode_response, peer_certificate, read_request, server_config, server_streams,
};

/// The application error code of a connection closed for going over a limit.
const OVER_LIMIT: u32 = 2;
/// The application error code of a connection ended with its streams done
/// (or its grace over): its certificate or its age.
const DRAINED: u32 = 3;
/// The status of a stream opened on a connection being ended.
const MISDIRECTED: u16 = 421;
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
        let Some(slot) = admit(incoming, &state) else {
            continue;
        };
        let state = state.clone();
        let shutdown = shutdown.clone();
        let span = connection_span(
            ConnectionId::next(),
            "tunnel_quic",
            slot.incoming.remote_address(),
        );
        state
            .connections
            .clone()
            .spawn(serve_connection(slot, state, shutdown).instrument(span));
    }
}

/// A QUIC client let in to handshake, holding its handshake slot.
struct Admitted {
    incoming: quinn::Incoming,
    slot: Slot,
}

/// Whether a new QUIC client may handshake now. One whose address is not
/// validated is sent a Retry when `tunnel.quicRetry` wants it: no state is
/// kept for it until it answers from that address, and nothing larger than
/// its Initial goes to an address it may have forged. A validated address
/// holds a handshake slot like a TLS client does (at its source's cap it
/// is refused; when every slot is taken the oldest is shed).
fn admit(incoming: quinn::Incoming, state: &GatewayState) -> Option<Admitted> {
    let limits = &state.tunnel.handshakes;
    if !incoming.remote_address_validated()
        && incoming.may_retry()
        && limits.quic_retry_wanted(state.handshakes.quic.held())
    {
        state.metrics.limited(Limit::QuicRetry, Transport::Quic);
        // Fails only when the client already answered a Retry.
        let _ = incoming.retry();
        return None;
    }
    let Some(slot) = state.handshakes.quic.admit(incoming.remote_address().ip()) else {
        state
            .metrics
            .limited(Limit::HandshakesPerSource, Transport::Quic);
        incoming.refuse();
        return None;
    };
    Some(Admitted { incoming, slot })
}

async fn serve_connection(
    admitted: Admitted,
    state: Arc<GatewayState>,
    shutdown: CancellationToken,
) {
    let Admitted { incoming, slot } = admitted;
    let remote = incoming.remote_address();
    let handshake = tokio::time::timeout(state.tunnel.handshake_timeout, incoming);
    let outcome = tokio::select! {
        outcome = handshake => outcome,
        () = slot.client().evicted() => {
            // Dropping the handshake closes the connection.
            state.metrics.limited(Limit::HandshakeShed, Transport::Quic);
            if state.quiet.tunnel_handshakes.check("shed") {
                tracing::info!(%remote, "oldest quic handshake closed for a newer one");
            }
            return;
        }
    };
    drop(slot);
    let connection = match outcome {
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
    let Some(leaf) = peer_certificate(&connection) else {
        state.metrics.refused(RefusedReason::Unauthenticated);
        connection.close(1u32.into(), b"unauthenticated");
        return;
    };
    let caller = match identity_of(&leaf)
        .map_err(|e| e.to_string())
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
    // Authenticated: now it may open streams.
    connection.set_max_concurrent_bi_streams(server_streams(&state.tunnel));
    tracing::debug!(%remote, caller = %caller, "quic tunnel peer connected");
    // quinn counts the frames it receives; the count is sampled here.
    let mut bucket = TokenBucket::new(
        state.tunnel.control_frames.per_second,
        state.tunnel.control_frames.burst,
        Instant::now(),
    );
    let mut counted = control_frames(&connection);
    let mut sample = tokio::time::interval(CONTROL_FRAME_SAMPLE);
    let mut lifetime = PeerLifetime::new(leaf, &state.tls, state.tunnel.max_connection_age);
    let retired = lifetime.retired(&state.tls);
    tokio::pin!(retired);
    // Once the connection is being ended: why, and when its open streams
    // are dropped.
    let mut draining: Option<(&'static str, tokio::time::Instant)> = None;
    // Held by every stream's task: the connection is idle when only this
    // one is left.
    let in_flight = Arc::new(());
    loop {
        let (send, recv) = tokio::select! {
            _ = sample.tick() => {
                let now_counted = control_frames(&connection);
                let spent = now_counted.saturating_sub(counted);
                counted = now_counted;
                if let Some((why, _)) = draining
                    && Arc::strong_count(&in_flight) == 1
                {
                    connection.close(DRAINED.into(), why.as_bytes());
                    return;
                }
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
            retirement = &mut retired, if draining.is_none() => {
                // QUIC has no GOAWAY: new streams are answered 421, which
                // sends the client to a new connection; the open ones get
                // the grace.
                state.metrics.limited(super::retirement_limit(&retirement), Transport::Quic);
                tracing::info!(%remote, caller = %caller, reason = %retirement, "ending a quic tunnel connection");
                draining = Some((
                    retirement.as_str(),
                    tokio::time::Instant::now() + state.tunnel.close_grace,
                ));
                continue;
            }
            () = sleep_until(draining.map(|(_, ends)| ends)) => {
                let why = draining.map_or("", |(why, _)| why);
                connection.close(DRAINED.into(), why.as_bytes());
                return;
            }
            stream = connection.accept_bi() => match stream {
                Ok((send, _)) if draining.is_some() => {
                    let why = draining.map_or("", |(why, _)| why);
                    state.connections.spawn(move_along(send, why));
                    continue;
                }
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
            serve_stream(
                send,
                recv,
                caller.clone(),
                remote,
                id,
                state.clone(),
                Tether {
                    in_flight: in_flight.clone(),
                    shutdown: shutdown.clone(),
                },
            )
            .instrument(stream_span(id)),
        );
    }
}

/// Answers a stream opened on a connection being ended: 421, so the client
/// opens it again on a new connection.
async fn move_along(mut send: SendStream, why: &'static str) {
    let _ = send
        .write_all(&encode_response(
            MISDIRECTED,
            &format!("connection closing: {why}"),
        ))
        .await;
    let _ = send.finish();
}

/// What ties a stream to its connection and gateway: the connection's
/// count of streams in flight, and the gateway's shutdown (which ends a
/// feed stream, the one kind that never ends by itself).
struct Tether {
    in_flight: Arc<()>,
    shutdown: CancellationToken,
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
    tether: Tether,
) -> impl Future<Output = ()> + Send {
    async move {
        let Tether {
            in_flight: _in_flight,
            shutdown,
        } = tether;
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
        let request = match tokio::time::timeout(REQUEST_TIMEOUT, read_request(&mut recv)).await {
            Ok(Ok(request)) => request,
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
        if request.feed {
            // Boxed for the same reason as the dial below.
            // A feed never ends by itself: it ends with the gateway.
            tokio::select! {
                () = Box::pin(super::feed::serve_quic(&request.authority, send, &caller, &state)) => {}
                () = shutdown.cancelled() => {}
            }
            return;
        }
        // Boxed: the dial's state is large and over once the backend answers,
        // so the long-lived splice does not carry its space.
        let opened = Box::pin(inbound::open(
            &state,
            Asked {
                authority: Some(request.authority),
                client: request.client,
                datagrams: request.datagrams,
            },
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
