//! The tunnel client: a pool of HTTP/2-over-mTLS connections per peer
//! gateway. A connection carries a bounded number of CONNECT streams; when
//! all are full the pool opens another, one dial at a time per peer. A peer
//! that fails to connect is skipped for a growing backoff. Every connection
//! checks, after the handshake, that the peer is a gateway of the network the
//! caller meant to reach.
//!
//! Connections speak HTTP/2 through the `h2` crate directly: an opened stream
//! is an [`H2Stream`] over h2's send and receive halves, with no per-stream
//! task or channel in between (see `stream.rs`).

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use h2::client::SendRequest;
use http::{Method, Request, StatusCode};
use rustls_pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_rustls::TlsConnector;
use tokio_util::sync::CancellationToken;

use super::capsule::CONNECT_UDP;
use super::keepalive::keep_alive;
use super::stream::H2Stream;
use super::{CLIENT_HEADER, ERROR_HEADER, TLS_SEND_BUFFER, TunnelRequest, TunnelSettings};
use crate::admin::metrics::{Metrics, PoolMetrics};
use crate::backoff::{Backoff, Retry};
use crate::model::{ClusterId, GatewayAddress, GatewayHost};
use crate::net::buffer::Chunk;
use crate::net::dial::{DialError, DialOptions, dial};
use crate::net::splice::SpliceIo;
use crate::tls::lifetime::PeerLifetime;
use crate::tls::{Identity, ReloadingTls, peer_identity};

#[derive(Debug, thiserror::Error)]
pub enum TunnelError {
    #[error("gateway {gateway} is backing off after failures for another {wait:?}")]
    BackingOff { gateway: String, wait: Duration },
    #[error("cannot resolve gateway {gateway}: {reason}")]
    Resolve { gateway: String, reason: String },
    #[error(transparent)]
    Dial(#[from] DialError),
    #[error("tls handshake with gateway {gateway} failed: {reason}")]
    Handshake { gateway: String, reason: String },
    #[error("gateway {gateway} is {identity}, not a gateway of the network being reached")]
    WrongPeer { gateway: String, identity: String },
    #[error("http/2 with gateway {gateway} failed: {source}")]
    Http { gateway: String, source: h2::Error },
    #[error("quic with gateway {gateway} failed: {reason}")]
    Quic { gateway: String, reason: String },
    #[error("gateway {gateway} did not answer the CONNECT for {authority} within {waited:?}")]
    ResponseTimeout {
        gateway: String,
        authority: String,
        waited: Duration,
    },
    #[error("gateway {gateway} refused {authority}: {status} {reason}")]
    Refused {
        gateway: String,
        authority: String,
        status: StatusCode,
        reason: String,
    },
}

impl TunnelError {
    /// Whether the gateway itself failed (try another gateway), rather than
    /// answering for the backend (try another backend).
    pub fn is_gateway_failure(&self) -> bool {
        !matches!(self, TunnelError::Refused { .. })
    }

    /// Whether the peer gateway reports the backend failing (502/503/504),
    /// rather than refusing the request.
    pub fn is_backend_failure(&self) -> bool {
        matches!(self, TunnelError::Refused { status, .. } if status.is_server_error())
    }

    /// Whether the gateway or backend dial timed out.
    pub fn is_timeout(&self) -> bool {
        match self {
            TunnelError::Dial(error) => error.is_timeout(),
            TunnelError::ResponseTimeout { .. } => true,
            TunnelError::Refused { status, .. } => *status == StatusCode::GATEWAY_TIMEOUT,
            _ => false,
        }
    }
}

/// A peer's feed as it arrives: the identity its certificate names and
/// the stream's bytes, over HTTP/2 or QUIC.
pub struct FeedStream {
    pub peer: Identity,
    body: FeedBody,
}

enum FeedBody {
    H2 {
        body: h2::RecvStream,
        _guard: StreamGuard,
    },
    Quic(quinn::RecvStream),
}

/// How many bytes one read of a QUIC feed stream takes at most.
const QUIC_FEED_READ: usize = 64 * 1024;

impl FeedStream {
    /// A feed read over QUIC from `peer`.
    pub(crate) fn quic(peer: Identity, recv: quinn::RecvStream) -> Self {
        Self {
            peer,
            body: FeedBody::Quic(recv),
        }
    }

    /// The feed's next bytes, as they arrive; `None` once it ended. The
    /// window opens again only for what was taken out of it.
    pub async fn next_bytes(&mut self) -> Option<Result<bytes::Bytes, String>> {
        match &mut self.body {
            FeedBody::H2 { body, .. } => match body.data().await? {
                Ok(data) => {
                    let _ = body.flow_control().release_capacity(data.len());
                    Some(Ok(data))
                }
                Err(error) => Some(Err(error.to_string())),
            },
            FeedBody::Quic(recv) => match recv.read_chunk(QUIC_FEED_READ, true).await {
                Ok(Some(chunk)) => Some(Ok(chunk.bytes)),
                Ok(None) => None,
                Err(error) => Some(Err(error.to_string())),
            },
        }
    }
}

/// Connections to every peer gateway this gateway has tunnelled to.
pub struct TunnelPool {
    peers: Mutex<HashMap<GatewayAddress, Arc<Peer>>>,
    settings: TunnelSettings,
    tls: Arc<ReloadingTls>,
    dial: DialOptions,
    metrics: Arc<Metrics>,
}

struct Peer {
    label: String,
    connections: Mutex<Vec<Arc<PooledConnection>>>,
    /// Held while dialling, so a burst of new streams opens one connection.
    dialing: tokio::sync::Mutex<()>,
    backoff: Mutex<DialBackoff>,
    metrics: PoolMetrics,
}

struct PooledConnection {
    sender: SendRequest<Chunk>,
    streams: AtomicUsize,
    peer: Identity,
    /// Cancelled when the connection ended or failed a request: not reused.
    closed: CancellationToken,
    /// Cancelled when the pool lets go of the connection, which ends it.
    released: CancellationToken,
}

impl PooledConnection {
    fn is_closed(&self) -> bool {
        self.closed.is_cancelled()
    }
}

impl Drop for PooledConnection {
    fn drop(&mut self) {
        self.released.cancel();
    }
}

/// A peer's dial schedule: after a failed dial, new streams are refused
/// until `retry_at` rather than each dialling again.
#[derive(Debug)]
struct DialBackoff {
    schedule: Backoff,
    retry_at: Option<Instant>,
}

impl TunnelPool {
    pub fn new(
        settings: TunnelSettings,
        tls: Arc<ReloadingTls>,
        dial: DialOptions,
        metrics: Arc<Metrics>,
    ) -> Self {
        Self {
            peers: Mutex::new(HashMap::new()),
            settings,
            tls,
            dial,
            metrics,
        }
    }

    /// Opens a CONNECT stream to `authority` through `gateway`, whose peer
    /// must be one of `allowed` (the clusters of the network being reached).
    /// `dial_to` overrides where the gateway is dialled (address mapping).
    pub async fn connect(
        &self,
        gateway: &GatewayAddress,
        dial_to: Option<SocketAddr>,
        allowed: &[ClusterId],
        request: impl Into<TunnelRequest<'_>>,
    ) -> Result<TunnelStream, TunnelError> {
        let request = request.into();
        let peer = self.peer(gateway);
        match self
            .connect_once(&peer, gateway, dial_to, allowed, request)
            .await
        {
            // A GOAWAY (the server is ending that connection: its age, or
            // a certificate) or a stream it refused unprocessed: the
            // connection takes no new streams, and this one goes once
            // more, on another.
            Err(TunnelError::Http { source, .. })
                if source.is_go_away() || source.reason() == Some(h2::Reason::REFUSED_STREAM) =>
            {
                self.connect_once(&peer, gateway, dial_to, allowed, request)
                    .await
            }
            other => other,
        }
    }

    async fn connect_once(
        &self,
        peer: &Arc<Peer>,
        gateway: &GatewayAddress,
        dial_to: Option<SocketAddr>,
        allowed: &[ClusterId],
        request: TunnelRequest<'_>,
    ) -> Result<TunnelStream, TunnelError> {
        let connection = self.connection(peer, gateway, dial_to, allowed).await?;
        let guard = StreamGuard::new(connection.clone(), peer.metrics.clone());
        let authority = request.authority;
        let mut builder = Request::builder().method(Method::CONNECT);
        // A UDP flow is an extended CONNECT (RFC 8441), which needs a
        // scheme and a path; its target is the authority, as for TCP. It
        // is sent without waiting for the server's SETTINGS to say it
        // takes them (a new connection's may not have arrived): a server
        // that does not resets the stream, which fails this flow alone.
        builder = if request.datagrams {
            builder
                .uri(format!("https://{authority}/"))
                .extension(h2::ext::Protocol::from_static(CONNECT_UDP))
        } else {
            builder.uri(authority)
        };
        if let Some(client) = request.client {
            builder = builder.header(CLIENT_HEADER, client.to_string());
        }
        let request = builder.body(()).map_err(|e| TunnelError::Refused {
            gateway: peer.label.clone(),
            authority: authority.to_owned(),
            status: StatusCode::BAD_REQUEST,
            reason: format!("invalid authority: {e}"),
        })?;
        let (response, send) = self
            .exchange(peer, &connection, request, authority, false)
            .await?;
        Ok(TunnelStream {
            io: H2Stream::new(send, response.into_body()),
            guard,
        })
    }

    /// Sends `request` on `connection` and waits for its answer, within
    /// the handshake timeout; anything but `200` is a refusal.
    /// `end_of_stream`: the request has no body (a `GET`).
    async fn exchange(
        &self,
        peer: &Arc<Peer>,
        connection: &Arc<PooledConnection>,
        request: Request<()>,
        authority: &str,
        end_of_stream: bool,
    ) -> Result<(http::Response<h2::RecvStream>, h2::SendStream<Chunk>), TunnelError> {
        let http = |source: h2::Error| {
            // A connection that failed a request (GOAWAY, I/O, a protocol
            // error) takes no new streams; those already open finish on it.
            // A reset of this one stream says nothing about the connection.
            if !source.is_reset() || source.reason() == Some(h2::Reason::REFUSED_STREAM) {
                connection.closed.cancel();
            }
            TunnelError::Http {
                gateway: peer.label.clone(),
                source,
            }
        };
        let sender = connection.sender.clone().ready().await.map_err(http)?;

        let (response, send) = {
            let mut sender = sender;
            sender.send_request(request, end_of_stream).map_err(http)?
        };
        // A peer that keeps the connection alive (it answers PINGs) but
        // never answers the request must not hold the client forever: after
        // the handshake timeout, as over QUIC, the stream is given up (its
        // reset goes with the dropped halves) and so is the connection,
        // which takes no new streams; the caller tries another gateway.
        let waited = self.settings.handshake_timeout;
        let response = match tokio::time::timeout(waited, response).await {
            Ok(response) => response.map_err(http)?,
            Err(_) => {
                connection.closed.cancel();
                return Err(TunnelError::ResponseTimeout {
                    gateway: peer.label.clone(),
                    authority: authority.to_owned(),
                    waited,
                });
            }
        };
        if response.status() != StatusCode::OK {
            let reason = response
                .headers()
                .get(ERROR_HEADER)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_owned();
            return Err(TunnelError::Refused {
                gateway: peer.label.clone(),
                authority: authority.to_owned(),
                status: response.status(),
                reason,
            });
        }
        Ok((response, send))
    }

    /// Opens a peer's exported-state feed (docs/tunnel-protocol.md §10):
    /// a `GET` of `path_and_query` on a pooled connection to `gateway`,
    /// whose certificate must name a cluster of `allowed`. The answer's
    /// body is the feed; the stream counts against the connection's
    /// streams while it lives.
    pub async fn feed(
        &self,
        gateway: &GatewayAddress,
        allowed: &[ClusterId],
        path_and_query: &str,
    ) -> Result<FeedStream, TunnelError> {
        let peer = self.peer(gateway);
        let connection = self.connection(&peer, gateway, None, allowed).await?;
        let guard = StreamGuard::new(connection.clone(), peer.metrics.clone());
        let request = Request::builder()
            .method(Method::GET)
            .uri(format!("https://{gateway}{path_and_query}"))
            .body(())
            .map_err(|e| TunnelError::Refused {
                gateway: peer.label.clone(),
                authority: path_and_query.to_owned(),
                status: StatusCode::BAD_REQUEST,
                reason: format!("invalid feed request: {e}"),
            })?;
        let (response, _send) = self
            .exchange(&peer, &connection, request, path_and_query, true)
            .await?;
        Ok(FeedStream {
            peer: connection.peer.clone(),
            body: FeedBody::H2 {
                body: response.into_body(),
                _guard: guard,
            },
        })
    }

    /// How many pooled connections are open to each peer, for debugging.
    pub fn connection_counts(&self) -> Vec<(String, usize)> {
        let peers = self.peers.lock().unwrap_or_else(|e| e.into_inner());
        peers
            .values()
            .map(|peer| {
                let open = peer
                    .connections
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .iter()
                    .filter(|c| !c.is_closed())
                    .count();
                (peer.label.clone(), open)
            })
            .collect()
    }

    fn peer(&self, gateway: &GatewayAddress) -> Arc<Peer> {
        let mut peers = self.peers.lock().unwrap_or_else(|e| e.into_inner());
        peers
            .entry(gateway.clone())
            .or_insert_with(|| {
                let label = gateway.to_string();
                Arc::new(Peer {
                    metrics: self.metrics.pool(&label),
                    label,
                    connections: Mutex::new(Vec::new()),
                    dialing: tokio::sync::Mutex::new(()),
                    backoff: Mutex::new(DialBackoff {
                        schedule: Backoff::new(Retry {
                            initial: self.settings.backoff_base,
                            max: self.settings.backoff_max,
                        }),
                        retry_at: None,
                    }),
                })
            })
            .clone()
    }

    async fn connection(
        &self,
        peer: &Arc<Peer>,
        gateway: &GatewayAddress,
        dial_to: Option<SocketAddr>,
        allowed: &[ClusterId],
    ) -> Result<Arc<PooledConnection>, TunnelError> {
        let limit = self.settings.max_streams_per_connection;
        if let Some(connection) = peer.available(allowed, limit) {
            return Ok(connection);
        }
        peer.check_backoff()?;
        let _dialing = peer.dialing.lock().await;
        // Another stream may have opened a connection while this one waited.
        if let Some(connection) = peer.available(allowed, limit) {
            return Ok(connection);
        }
        peer.check_backoff()?;
        match self.open(peer, gateway, dial_to, allowed).await {
            Ok(connection) => {
                let mut backoff = peer.backoff.lock().unwrap_or_else(|e| e.into_inner());
                backoff.schedule.reset();
                backoff.retry_at = None;
                drop(backoff);
                peer.connections
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(connection.clone());
                Ok(connection)
            }
            Err(error) => {
                peer.record_failure();
                Err(error)
            }
        }
    }

    async fn open(
        &self,
        peer: &Arc<Peer>,
        gateway: &GatewayAddress,
        dial_to: Option<SocketAddr>,
        allowed: &[ClusterId],
    ) -> Result<Arc<PooledConnection>, TunnelError> {
        let address = match dial_to {
            Some(address) => address,
            None => resolve(gateway).await?,
        };
        let tcp = dial(address, self.dial).await?;
        let server_name = match &gateway.host {
            GatewayHost::Ip(ip) => ServerName::IpAddress((*ip).into()),
            GatewayHost::Dns(name) => {
                ServerName::try_from(name.clone()).map_err(|e| TunnelError::Resolve {
                    gateway: peer.label.clone(),
                    reason: e.to_string(),
                })?
            }
        };
        let connector = TlsConnector::from(self.tls.current().client_config());
        let handshake = |reason: String| TunnelError::Handshake {
            gateway: peer.label.clone(),
            reason,
        };
        let mut tls = tokio::time::timeout(
            self.settings.handshake_timeout,
            connector.connect(server_name, tcp),
        )
        .await
        .map_err(|_| handshake("timed out".to_owned()))?
        .map_err(|e| handshake(e.to_string()))?;
        tls.get_mut().1.set_buffer_limit(Some(TLS_SEND_BUFFER));
        let identity = peer_identity(tls.get_ref().1).map_err(|e| handshake(e.to_string()))?;
        let leaf = tls
            .get_ref()
            .1
            .peer_certificates()
            .and_then(|chain| chain.first())
            .map(|leaf| leaf.clone().into_owned())
            .ok_or_else(|| handshake("no server certificate".to_owned()))?;
        // Used until the server's certificate expires or the material in
        // use stops trusting it (a revocation, a CA taken out); the
        // server retires it by age itself.
        let mut lifetime = PeerLifetime::new(leaf, &self.tls, Duration::MAX);
        if !allowed.contains(&identity.cluster) {
            return Err(TunnelError::WrongPeer {
                gateway: peer.label.clone(),
                identity: identity.to_string(),
            });
        }
        let settings = &self.settings;
        let (sender, mut connection) = h2::client::Builder::new()
            .enable_push(false)
            .initial_window_size(settings.stream_window)
            .initial_connection_window_size(settings.connection_window())
            .max_frame_size(settings.max_frame_size)
            .max_header_list_size(settings.max_header_list_size)
            .handshake::<_, Chunk>(tls)
            .await
            .map_err(|source| TunnelError::Http {
                gateway: peer.label.clone(),
                source,
            })?;
        let ping_pong = connection.ping_pong();
        let (interval, timeout) = (settings.keepalive_interval, settings.keepalive_timeout);
        let closed = CancellationToken::new();
        let released = CancellationToken::new();
        let metrics = peer.metrics.clone();
        let label = peer.label.clone();
        metrics.connections_add(1);
        let (tls_material, grace) = (self.tls.clone(), settings.close_grace);
        tokio::spawn({
            let closed = closed.clone();
            let released = released.clone();
            async move {
                tokio::select! {
                    result = &mut connection => if let Err(error) = result {
                        tracing::debug!(gateway = %label, %error, "tunnel connection ended");
                    },
                    error = keep_alive(ping_pong, interval, timeout) => {
                        tracing::debug!(gateway = %label, %error, "tunnel connection dropped");
                    }
                    () = released.cancelled() => {}
                    retirement = lifetime.retired(&tls_material) => {
                        // No new stream on it; the open ones get a grace.
                        tracing::info!(gateway = %label, reason = %retirement,
                            "retiring a pooled tunnel connection");
                        closed.cancel();
                        let _ = tokio::time::timeout(grace, async {
                            tokio::select! {
                                _ = &mut connection => {}
                                () = released.cancelled() => {}
                            }
                        })
                        .await;
                    }
                }
                closed.cancel();
                metrics.connections_add(-1);
            }
        });
        tracing::debug!(gateway = %peer.label, peer = %identity, "tunnel connection established");
        Ok(Arc::new(PooledConnection {
            sender,
            streams: AtomicUsize::new(0),
            peer: identity,
            closed,
            released,
        }))
    }
}

impl Peer {
    /// A live connection to a permitted peer with room for another stream.
    fn available(&self, allowed: &[ClusterId], limit: usize) -> Option<Arc<PooledConnection>> {
        let mut connections = self.connections.lock().unwrap_or_else(|e| e.into_inner());
        connections.retain(|c| !c.is_closed());
        connections
            .iter()
            .find(|c| {
                c.streams.load(Ordering::Relaxed) < limit && allowed.contains(&c.peer.cluster)
            })
            .cloned()
    }

    fn check_backoff(&self) -> Result<(), TunnelError> {
        let backoff = self.backoff.lock().unwrap_or_else(|e| e.into_inner());
        match backoff.retry_at {
            Some(at) if at > Instant::now() => Err(TunnelError::BackingOff {
                gateway: self.label.clone(),
                wait: at - Instant::now(),
            }),
            _ => Ok(()),
        }
    }

    fn record_failure(&self) {
        let mut backoff = self.backoff.lock().unwrap_or_else(|e| e.into_inner());
        let wait = backoff.schedule.next_delay();
        backoff.retry_at = Some(Instant::now() + wait);
    }
}

/// The address to dial for a gateway: its IP, or its load balancer
/// hostname resolved now (the first address the resolver gives).
pub(crate) async fn resolve(gateway: &GatewayAddress) -> Result<SocketAddr, TunnelError> {
    match &gateway.host {
        GatewayHost::Ip(ip) => Ok(SocketAddr::new(*ip, gateway.port)),
        GatewayHost::Dns(name) => {
            let failed = |reason: String| TunnelError::Resolve {
                gateway: gateway.to_string(),
                reason,
            };
            tokio::net::lookup_host((name.as_str(), gateway.port))
                .await
                .map_err(|e| failed(e.to_string()))?
                .next()
                .ok_or_else(|| failed("no addresses".to_owned()))
        }
    }
}

/// Counts a stream against its connection until the stream is dropped.
struct StreamGuard {
    connection: Arc<PooledConnection>,
    metrics: PoolMetrics,
}

impl StreamGuard {
    fn new(connection: Arc<PooledConnection>, metrics: PoolMetrics) -> Self {
        connection.streams.fetch_add(1, Ordering::Relaxed);
        metrics.streams_add(1);
        Self {
            connection,
            metrics,
        }
    }
}

impl Drop for StreamGuard {
    fn drop(&mut self) {
        self.connection.streams.fetch_sub(1, Ordering::Relaxed);
        self.metrics.streams_add(-1);
    }
}

/// One tunnelled connection: a CONNECT stream to a peer gateway.
pub struct TunnelStream {
    io: H2Stream,
    guard: StreamGuard,
}

impl TunnelStream {
    /// The peer gateway's identity, from its certificate.
    pub fn peer(&self) -> &Identity {
        &self.guard.connection.peer
    }
}

impl SpliceIo for TunnelStream {
    fn poll_fill(
        &mut self,
        cx: &mut Context<'_>,
        slot: &mut Option<Chunk>,
    ) -> Poll<io::Result<usize>> {
        self.io.poll_fill(cx, slot)
    }

    fn poll_send(
        &mut self,
        cx: &mut Context<'_>,
        slot: &mut Option<Chunk>,
    ) -> Poll<io::Result<usize>> {
        self.io.poll_send(cx, slot)
    }
}

impl AsyncRead for TunnelStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl AsyncWrite for TunnelStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}
