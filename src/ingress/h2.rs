//! The tunnel server: accepts peer gateways over mutual TLS, learns the
//! caller's cluster from its certificate, authorises every CONNECT target
//! against the route table before any dial, then splices the stream to the
//! backend.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use h2::server::SendResponse;
use h2::{Reason, RecvStream};
use http::{HeaderValue, Method, Request, Response, StatusCode};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

use tracing::Instrument;

use super::inbound::{self, Asked};
use crate::admin::metrics::{Limit, Listener, RefusedReason, Transport};
use crate::backoff::sleep_until;
use crate::logging::connection::{ConnectionId, record_peer, stream_span};
use crate::net::buffer::Chunk;
use crate::routing::inbound::InboundRefusal;
use crate::state::GatewayState;
use crate::tls::lifetime::PeerLifetime;
use crate::tls::{Identity, peer_identity};
use crate::tunnel::capsule::CONNECT_UDP;
use crate::tunnel::frames::{GOAWAY_GRACE, Guarded};
use crate::tunnel::keepalive::keep_alive;
use crate::tunnel::stream::H2Stream;
use crate::tunnel::{CLIENT_HEADER, ERROR_HEADER, TLS_SEND_BUFFER};

/// Accepts peer gateways until `shutdown`, then lets open streams finish.
pub async fn serve(listener: TcpListener, state: Arc<GatewayState>, shutdown: CancellationToken) {
    let tracker = state.connections.clone();
    crate::net::accept::accept_until(
        listener,
        Listener::Tunnel,
        state.clone().admission(Listener::Tunnel),
        shutdown.clone(),
        tracker,
        move |stream, remote, _| serve_connection(stream, remote, state.clone(), shutdown.clone()),
    )
    .await;
}

async fn serve_connection(
    stream: TcpStream,
    remote: SocketAddr,
    state: Arc<GatewayState>,
    shutdown: CancellationToken,
) {
    // Until it has authenticated, a client holds one of the handshake
    // slots: a source at its cap is refused, and when all are taken the
    // oldest handshake is closed for this one.
    let Some(slot) = state.handshakes.tls.admit(remote.ip()) else {
        state
            .metrics
            .limited(Limit::HandshakesPerSource, Transport::H2);
        if state.quiet.tunnel_handshakes.check("per_source") {
            tracing::info!(%remote, "tunnel handshakes of this source at their cap; closed");
        }
        return;
    };
    let acceptor = TlsAcceptor::from(state.tls.current().server_config());
    let handshake = tokio::time::timeout(state.tunnel.handshake_timeout, acceptor.accept(stream));
    let outcome = tokio::select! {
        outcome = handshake => outcome,
        () = slot.client().evicted() => {
            state.metrics.limited(Limit::HandshakeShed, Transport::H2);
            if state.quiet.tunnel_handshakes.check("shed") {
                tracing::info!(%remote, "oldest tunnel handshake closed for a newer one");
            }
            return;
        }
    };
    drop(slot);
    let tls = match outcome {
        Ok(Ok(mut tls)) => {
            tls.get_mut().1.set_buffer_limit(Some(TLS_SEND_BUFFER));
            tls
        }
        Ok(Err(error)) => {
            state.metrics.refused(RefusedReason::Unauthenticated);
            if state.quiet.tunnel_handshakes.check("tls") {
                tracing::info!(%remote, %error, "tunnel handshake refused");
            }
            return;
        }
        Err(_) => {
            state.metrics.refused(RefusedReason::Unauthenticated);
            if state.quiet.tunnel_handshakes.check("timeout") {
                tracing::info!(%remote, "tunnel handshake timed out");
            }
            return;
        }
    };
    let caller = match peer_identity(tls.get_ref().1).and_then(|identity| {
        state.tls.current().check_trust_domain(&identity)?;
        Ok(identity)
    }) {
        Ok(identity) => Arc::new(identity),
        Err(error) => {
            state.metrics.refused(RefusedReason::Unauthenticated);
            if state.quiet.tunnel_handshakes.check("identity") {
                tracing::info!(%remote, %error, "tunnel peer has no gateway identity");
            }
            return;
        }
    };
    record_peer(&caller);
    tracing::debug!(%remote, caller = %caller, "tunnel peer connected");
    let Some(leaf) = tls
        .get_ref()
        .1
        .peer_certificates()
        .and_then(<[_]>::first)
        .map(|leaf| leaf.clone().into_owned())
    else {
        return;
    };
    let mut lifetime = PeerLifetime::new(leaf, &state.tls, state.tunnel.max_connection_age);
    let settings = &state.tunnel;
    let (tls, tripped) = Guarded::new(tls, settings.control_frames);
    let handshake = h2::server::Builder::new()
        .max_concurrent_streams(settings.server_max_concurrent_streams)
        .max_header_list_size(settings.max_header_list_size)
        .initial_window_size(settings.stream_window)
        .initial_connection_window_size(settings.connection_window())
        .max_frame_size(settings.max_frame_size)
        // UDP flows come as extended CONNECT (`:protocol connect-udp`).
        .enable_connect_protocol()
        .handshake::<_, Chunk>(tls);
    let mut connection = match tokio::time::timeout(settings.handshake_timeout, handshake).await {
        Ok(Ok(connection)) => connection,
        Ok(Err(error)) => {
            tracing::debug!(%remote, caller = %caller, %error, "tunnel http/2 handshake failed");
            return;
        }
        Err(_) => {
            tracing::debug!(%remote, caller = %caller, "tunnel http/2 handshake timed out");
            return;
        }
    };
    let keepalive = keep_alive(
        connection.ping_pong(),
        settings.keepalive_interval,
        settings.keepalive_timeout,
    );
    tokio::pin!(keepalive);
    let retired = lifetime.retired(&state.tls);
    tokio::pin!(retired);
    let mut draining = false;
    // When a connection being ended drops the streams still open on it.
    let mut grace_ends = None;
    loop {
        tokio::select! {
            () = tripped.wait() => {
                state.metrics.limited(Limit::ControlFrames, Transport::H2);
                if state.quiet.tunnel_requests.check("control_frames") {
                    tracing::info!(%remote, caller = %caller, "tunnel peer sent control frames past its limit; GOAWAY");
                }
                connection.abrupt_shutdown(Reason::ENHANCE_YOUR_CALM);
                // Drive the connection until the GOAWAY is out (the peer's
                // bytes are no longer read), then drop it.
                let _ = tokio::time::timeout(GOAWAY_GRACE, async {
                    while let Some(Ok(_)) = connection.accept().await {}
                })
                .await;
                return;
            }
            accepted = connection.accept() => match accepted {
                Some(Ok((request, respond))) => serve_request(request, respond, &caller, remote, &state, &shutdown),
                Some(Err(error)) => {
                    tracing::debug!(%remote, caller = %caller, %error, "tunnel connection ended");
                    return;
                }
                // Closed by the peer, or drained after GOAWAY.
                None => return,
            },
            error = &mut keepalive => {
                tracing::debug!(%remote, caller = %caller, %error, "tunnel connection dropped");
                return;
            }
            retirement = &mut retired, if !draining => {
                // GOAWAY: the peer opens new streams on a new connection
                // (and authenticates again); the open ones get the grace.
                draining = true;
                state.metrics.limited(super::retirement_limit(&retirement), Transport::H2);
                tracing::info!(%remote, caller = %caller, reason = %retirement, "ending a tunnel connection; GOAWAY");
                connection.graceful_shutdown();
                grace_ends = Some(tokio::time::Instant::now() + settings.close_grace);
            }
            () = sleep_until(grace_ends) => {
                tracing::debug!(%remote, caller = %caller, "grace over; closing the tunnel connection with its open streams");
                return;
            }
            () = shutdown.cancelled(), if !draining => {
                // GOAWAY: no new streams, the open ones run to completion
                // (accept keeps driving the connection until they are done).
                draining = true;
                connection.graceful_shutdown();
            }
        }
    }
}

fn respond_with(status: StatusCode, reason: &str) -> Response<()> {
    let mut response = Response::new(());
    *response.status_mut() = status;
    if let Ok(value) = HeaderValue::from_str(reason) {
        response.headers_mut().insert(ERROR_HEADER, value);
    }
    response
}

/// Checks one request and hands it to its own task. Only what the stream
/// needs from here on is kept: a request's headers are not held for the
/// connection's lifetime.
fn serve_request(
    request: Request<RecvStream>,
    mut respond: SendResponse<Chunk>,
    caller: &Arc<Identity>,
    remote: SocketAddr,
    state: &Arc<GatewayState>,
    shutdown: &CancellationToken,
) {
    let (parts, recv) = request.into_parts();
    let authority = parts.uri.authority().map(|a| a.as_str().to_owned());
    if parts.method == Method::GET && parts.uri.path() == crate::feed::FEED_PATH {
        super::feed::serve(parts.uri.query(), respond, caller, state, shutdown);
        return;
    }
    if parts.method == Method::GET && parts.uri.path() == super::about::ABOUT_PATH {
        super::about::serve(respond, caller, state);
        return;
    }
    if parts.method != Method::CONNECT {
        let malformed =
            InboundRefusal::Malformed(format!("method {} is not CONNECT", parts.method));
        let refusal = inbound::refuse(state, caller, authority.as_deref(), malformed);
        let status = StatusCode::from_u16(refusal.status).unwrap_or(StatusCode::FORBIDDEN);
        let _ = respond.send_response(respond_with(status, &refusal.reason), true);
        return;
    }
    // A CONNECT request has no body of its own: its DATA is the tunnel.
    let body = parts
        .headers
        .get(http::header::CONTENT_LENGTH)
        .is_some_and(|length| length.as_bytes() != b"0");
    if body {
        respond.send_reset(Reason::INTERNAL_ERROR);
        return;
    }
    let datagrams = match parts.extensions.get::<h2::ext::Protocol>() {
        None => false,
        Some(protocol) if protocol.as_str() == CONNECT_UDP => true,
        Some(protocol) => {
            let malformed = InboundRefusal::Malformed(format!(
                "extended CONNECT protocol {:?} is not {CONNECT_UDP}",
                protocol.as_str()
            ));
            let refusal = inbound::refuse(state, caller, authority.as_deref(), malformed);
            let status = StatusCode::from_u16(refusal.status).unwrap_or(StatusCode::BAD_REQUEST);
            let _ = respond.send_response(respond_with(status, &refusal.reason), true);
            return;
        }
    };
    let client = match parts.headers.get(CLIENT_HEADER).map(client_address) {
        None => None,
        Some(Ok(client)) => Some(client),
        Some(Err(malformed)) => {
            let refusal = inbound::refuse(state, caller, authority.as_deref(), malformed);
            let status = StatusCode::from_u16(refusal.status).unwrap_or(StatusCode::BAD_REQUEST);
            let _ = respond.send_response(respond_with(status, &refusal.reason), true);
            return;
        }
    };
    let id = ConnectionId::next();
    state.connections.spawn(
        serve_stream(
            recv,
            respond,
            Asked {
                authority,
                client,
                datagrams,
            },
            caller.clone(),
            remote,
            id,
            state.clone(),
        )
        .instrument(stream_span(id)),
    );
}

/// The original client's address a peer gateway sends with a request for
/// a service that asks for the PROXY protocol.
fn client_address(value: &HeaderValue) -> Result<SocketAddr, InboundRefusal> {
    value
        .to_str()
        .ok()
        .and_then(|text| text.parse().ok())
        .ok_or_else(|| {
            InboundRefusal::Malformed(format!("{CLIENT_HEADER} {value:?} is not ip:port"))
        })
}

/// Authorises and dials the target, answers, then splices until done. Not
/// an `async fn`: that would keep a second copy of its arguments for the
/// stream's lifetime.
#[expect(
    clippy::manual_async_fn,
    reason = "an async fn would store its arguments twice"
)]
fn serve_stream(
    recv: RecvStream,
    mut respond: SendResponse<Chunk>,
    asked: Asked,
    caller: Arc<Identity>,
    remote: SocketAddr,
    id: ConnectionId,
    state: Arc<GatewayState>,
) -> impl Future<Output = ()> + Send {
    async move {
        // Held for the stream's lifetime, whatever ends it.
        let _stream = match inbound::stream_slot(&state, &caller, asked.authority.as_deref()) {
            Ok(permit) => permit,
            Err(refusal) => {
                let status = StatusCode::from_u16(refusal.status).unwrap_or(StatusCode::FORBIDDEN);
                let _ = respond.send_response(respond_with(status, &refusal.reason), true);
                return;
            }
        };
        // Boxed: the dial's state is large and over once the backend
        // answers, so the long-lived splice does not carry its space. No
        // `match` spans the splice either: its scrutinee would be kept.
        let opened = Box::pin(inbound::open(
            &state,
            asked,
            &caller,
            remote,
            id,
            Transport::H2,
        ));
        // A peer that resets the stream while the backend is being dialled
        // cancels the dial: dropping it closes the half-open socket.
        let raced = {
            let reset = std::future::poll_fn(|cx| respond.poll_reset(cx));
            tokio::select! {
                biased;
                reason = reset => Err(reason),
                opened = opened => Ok(opened),
            }
        };
        let accepted = match raced {
            Ok(Ok(accepted)) => accepted,
            Ok(Err(refusal)) => {
                let status = StatusCode::from_u16(refusal.status).unwrap_or(StatusCode::FORBIDDEN);
                let _ = respond.send_response(respond_with(status, &refusal.reason), true);
                return;
            }
            Err(reason) => {
                state.metrics.stream_cancelled(Transport::H2);
                tracing::debug!(caller = %caller, ?reason, "tunnel stream reset while dialling");
                return;
            }
        };
        let send = match respond.send_response(Response::new(()), false) {
            Ok(send) => send,
            Err(error) => {
                accepted.abandon(&error.to_string());
                return;
            }
        };
        accepted
            .relay(H2Stream::new(send, recv), &state, Transport::H2)
            .await;
    }
}
