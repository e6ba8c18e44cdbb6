//! Opening the backend side of an egress connection: pick a backend of the
//! service port, reach it directly or through a gateway of its network, and
//! on failure try another backend (bounded), feeding the outcome to passive
//! outlier detection.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use crate::admin::metrics::{ConnectionMetrics, RoutePath, Transport};
use crate::model::{ClusterId, NetworkId};
use crate::net::buffer::Chunk;
use crate::net::datagram::ConnectedUdp;
use crate::net::proxy_header::{Caller, stream_header};
use crate::net::splice::SpliceIo;
use crate::routing::balancer::{ActiveGuard, BackendId};
use crate::routing::inbound::refused_target;
use crate::routing::{Path, PortRoute, RouteTable, RoutedBackend, ServiceRoutes};
use crate::state::GatewayState;
use crate::tunnel::client::{TunnelError, TunnelStream};
use crate::tunnel::quic::QuicStream;
use crate::tunnel::{TransportMode, TunnelRequest};

/// The backend side of a proxied connection. A UDP flow's is a UDP
/// socket on the direct path and a tunnel stream carrying capsules
/// otherwise.
pub enum Upstream {
    Direct(TcpStream),
    Udp(ConnectedUdp),
    Tunnel(Box<TunnelStream>),
    Quic(Box<QuicStream>),
}

impl Upstream {
    pub(crate) fn transport(&self) -> Transport {
        match self {
            Upstream::Direct(_) | Upstream::Udp(_) => Transport::None,
            Upstream::Tunnel(_) => Transport::H2,
            Upstream::Quic(_) => Transport::Quic,
        }
    }
}

/// What an upstream carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Carry {
    /// A TCP connection's bytes.
    Stream,
    /// A UDP flow's datagrams.
    Datagrams,
}

/// An open upstream and what it reaches.
pub struct Opened {
    pub upstream: Upstream,
    pub backend: Reached,
    pub metrics: ConnectionMetrics,
    /// Counts the connection as active on its backend until dropped.
    pub active: ActiveGuard,
}

/// The backend a connection reached, as its access-log line names it: only
/// what the line needs, held for the connection's lifetime.
pub struct Reached {
    pub address: SocketAddr,
    pub cluster: ClusterId,
    pub network: NetworkId,
    pub path: &'static str,
}

impl Reached {
    fn of(backend: RoutedBackend<'_>) -> Self {
        Self {
            address: SocketAddr::new(backend.backend.address, backend.backend.port),
            cluster: backend.backend.cluster.clone(),
            network: backend.network().clone(),
            path: backend.path().as_str(),
        }
    }
}

impl OpenError {
    /// A short name of the kind of failure, for log summaries.
    pub fn kind(&self) -> &'static str {
        match self {
            OpenError::NotAdmitted(_) => "not_admitted",
            OpenError::NoBackend(_) => "no_backend",
            OpenError::Fenced(_) => "fenced",
            OpenError::Failed(_) => "failed",
            OpenError::TimedOut(_) => "timed_out",
        }
    }
}

/// Why no upstream could be opened; each maps to one HTTP status.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// The service's access policy does not admit this cluster: its
    /// gateways would refuse the tunnel, and a direct backend is not dialled
    /// either, so that the policy reads the same from every path.
    #[error("{0}")]
    NotAdmitted(String),
    #[error("no ready backend for {0}")]
    NoBackend(String),
    /// Every backend of the port is outside the service's fence.
    #[error("{0}")]
    Fenced(String),
    #[error("every attempt failed; last: {0}")]
    Failed(String),
    #[error("every attempt timed out; last: {0}")]
    TimedOut(String),
}

/// Which backends a connection may use: the service port's, or one pod's.
pub enum Selection<'a> {
    Port,
    Pod {
        label: &'a str,
        cluster: &'a ClusterId,
    },
}

impl<'a> Selection<'a> {
    /// One pod's backends when a remote pod was named (its address or its
    /// import port), else the service port's.
    pub fn of(pod: Option<&'a crate::model::PodRef>) -> Self {
        match pod {
            Some(pod) => Selection::Pod {
                label: &pod.label,
                cluster: &pod.cluster,
            },
            None => Selection::Port,
        }
    }
}

/// Opens an upstream for a connection from `client` to a service port.
pub async fn open(
    state: &GatewayState,
    table: &RouteTable,
    service: &ServiceRoutes,
    route: &PortRoute,
    selection: Selection<'_>,
    client: SocketAddr,
    carry: Carry,
) -> Result<Opened, OpenError> {
    if let Some(why) = service.not_admitted(table.viewer(), table.attested_network(table.viewer()))
    {
        return Err(OpenError::NotAdmitted(why));
    }
    let mut tried: Vec<BackendId> = Vec::new();
    let mut rng = fastrand::Rng::new();
    let mut last: Option<(String, bool)> = None;
    let mut attempts = 0;
    while attempts < state.dial_attempts.max(1) {
        let picked = match &selection {
            Selection::Port => state.chooser.pick(
                service,
                route,
                client.ip(),
                &tried,
                Instant::now(),
                &mut rng,
            ),
            Selection::Pod { label, cluster } => route
                .pod(label, cluster)
                .filter(|pod| !tried.contains(&BackendId::of(*pod)))
                .filter(|pod| state.chooser.fence_admits(service, *pod)),
        };
        let Some(backend) = picked else {
            break;
        };
        let id = BackendId::of(backend);
        tried.push(id.clone());
        // A same-network backend is dialled from here: what a member lists
        // must not loop this gateway into its own listeners (its import
        // ports) or its cluster's machinery. Skipped without an attempt.
        if *backend.path() == Path::Direct
            && let Some(why) = refused_target(
                table,
                &state.inbound,
                &SocketAddr::new(backend.backend.address, backend.backend.port),
            )
        {
            tracing::debug!(backend = %id.address, %why, "same-network backend refused");
            last = Some((why, false));
            continue;
        }
        attempts += 1;
        let (path, transport) = match backend.path() {
            Path::Direct => (RoutePath::Direct, Transport::None),
            Path::Tunnel { .. } => (RoutePath::Tunnel, Transport::H2),
        };
        let started = Instant::now();
        // Decided per backend: on the direct path any local service that
        // lists it may ask (a shared pod port), and so may its own
        // cluster's export; through a tunnel the peer gateway decides the
        // same way, given the client's address.
        let wants = service.proxy_protocol_for(&backend.backend)
            || (*backend.path() == Path::Direct
                && table.local_backend_proxy_protocol(&SocketAddr::new(
                    backend.backend.address,
                    backend.backend.port,
                )));
        let told = (carry == Carry::Stream && wants).then_some(client);
        match connect(state, table, backend, told, carry).await {
            Ok(upstream) => {
                // Counted once the transport is known: auto mode decides per peer.
                let metrics = state.metrics.connection(path, upstream.transport());
                metrics.dial(started.elapsed());
                state.chooser.report_success(&id);
                return Ok(Opened {
                    upstream,
                    backend: Reached::of(backend),
                    active: state.chooser.start(&id),
                    metrics,
                });
            }
            Err(Failure {
                message: error,
                timed_out,
                backend_at_fault,
            }) => {
                tracing::debug!(backend = %id.address, %error, "upstream attempt failed");
                if backend_at_fault {
                    state.chooser.report_failure(&id, Instant::now());
                }
                state.metrics.connection(path, transport).closed(
                    if timed_out {
                        crate::admin::metrics::ClosedResult::Timeout
                    } else {
                        crate::admin::metrics::ClosedResult::DialError
                    },
                    0,
                    0,
                );
                last = Some((error, timed_out));
            }
        }
    }
    match last {
        None if tried.is_empty()
            && let Some(why) = state.chooser.fenced_out(service, route) =>
        {
            Err(OpenError::Fenced(why))
        }
        None => Err(OpenError::NoBackend(format!(
            "{}:{}",
            service.key, route.port
        ))),
        Some((error, true)) => Err(OpenError::TimedOut(error)),
        Some((error, false)) => Err(OpenError::Failed(error)),
    }
}

/// What one active health check of a backend found.
#[derive(Debug)]
pub enum ProbeOutcome {
    /// A connection to it opened.
    Answered,
    /// It could not be reached, or its gateways could not.
    Failed(String),
    /// The peer gateway refused for another reason than the backend (its
    /// view of the cluster set differs): says nothing of its health.
    NoVerdict(String),
}

/// Opens a connection to `backend` as a connection would (through its
/// network's gateways in order, no PROXY protocol header) and closes it at
/// once: an active health check. Counted by neither the connection metrics
/// nor passive outlier detection.
pub async fn probe(
    state: &GatewayState,
    table: &RouteTable,
    backend: RoutedBackend<'_>,
) -> ProbeOutcome {
    match connect(state, table, backend, None, Carry::Stream).await {
        Ok(upstream) => {
            drop(upstream);
            ProbeOutcome::Answered
        }
        Err(failure) if failure.backend_at_fault => ProbeOutcome::Failed(failure.message),
        Err(failure) => ProbeOutcome::NoVerdict(failure.message),
    }
}

/// Why one attempt failed.
struct Failure {
    message: String,
    timed_out: bool,
    /// Whether the backend itself failed (counts toward its ejection). A peer
    /// gateway refusing the target (400/403/404) says the two gateways' views
    /// of the cluster set differ, not that the backend is unhealthy.
    backend_at_fault: bool,
}

/// Reaches one backend: a dial on the direct path; on the tunnel path, the
/// gateways of its network in order, skipping those that fail. `told` is
/// the client the backend is to learn of (its service asks for the PROXY
/// protocol): on the direct path this gateway writes the header, naming
/// itself as the caller's gateway; through a tunnel the serving gateway
/// does, from the address sent with the request.
async fn connect(
    state: &GatewayState,
    table: &RouteTable,
    backend: RoutedBackend<'_>,
    told: Option<SocketAddr>,
    carry: Carry,
) -> Result<Upstream, Failure> {
    let address = SocketAddr::new(backend.backend.address, backend.backend.port);
    match backend.path() {
        Path::Direct if carry == Carry::Datagrams => {
            ConnectedUdp::connect(state.overrides.backend(address))
                .await
                .map(Upstream::Udp)
                .map_err(|e| Failure {
                    timed_out: false,
                    message: format!("udp to {address}: {e}"),
                    backend_at_fault: true,
                })
        }
        Path::Direct => {
            let header = match told {
                Some(client) => Some(own_header(state, client, address).map_err(|e| Failure {
                    timed_out: false,
                    message: format!("no PROXY protocol header for {address}: {e}"),
                    backend_at_fault: false,
                })?),
                None => None,
            };
            let dialled = crate::net::dial::dial_announced(
                state.overrides.backend(address),
                state.dial,
                header.as_deref(),
            );
            dialled.await.map(Upstream::Direct).map_err(|e| Failure {
                timed_out: e.is_timeout(),
                message: e.to_string(),
                backend_at_fault: true,
            })
        }
        Path::Tunnel { gateways } => {
            let allowed = table.network_clusters(backend.network());
            let authority = address.to_string();
            let request = TunnelRequest {
                authority: &authority,
                client: told,
                datagrams: carry == Carry::Datagrams,
            };
            let mut last = Failure {
                message: format!("no gateway of network {}", backend.network()),
                timed_out: false,
                backend_at_fault: true,
            };
            for gateway in gateways.iter() {
                match through(state, gateway, allowed, request).await {
                    Ok(upstream) => return Ok(upstream),
                    Err(error) => {
                        let gateway_failed = error.is_gateway_failure();
                        last = Failure {
                            message: error.to_string(),
                            timed_out: error.is_timeout(),
                            backend_at_fault: gateway_failed || error.is_backend_failure(),
                        };
                        if !gateway_failed {
                            // The gateway answered for the backend: another
                            // gateway of the same network would say the same.
                            break;
                        }
                        log_gateway_failure(&error);
                    }
                }
            }
            Err(last)
        }
    }
}

/// Opens a tunnel stream through one gateway with the transport configured
/// for it: QUIC, HTTP/2, or (auto) QUIC falling back to HTTP/2 when QUIC does
/// not connect, QUIC being retried once the peer's back-off has passed.
async fn through(
    state: &GatewayState,
    gateway: &crate::model::GatewayAddress,
    allowed: &[ClusterId],
    request: TunnelRequest<'_>,
) -> Result<Upstream, TunnelError> {
    let dial_to = state.overrides.gateway(gateway);
    let mode = state.tunnel.transport_for(gateway);
    if let (Some(quic), TransportMode::Quic | TransportMode::Auto) = (&state.quic, mode) {
        let down = quic.is_down(gateway);
        if down && mode == TransportMode::Quic {
            // QUIC only, and this peer failed lately: try the next gateway now
            // rather than wait out another connect timeout.
            return Err(TunnelError::BackingOff {
                gateway: gateway.to_string(),
                wait: state.tunnel.quic_retry_after,
            });
        }
        if !down {
            match quic.connect(gateway, dial_to, allowed, request).await {
                Ok(stream) => return Ok(Upstream::Quic(Box::new(stream))),
                // The peer answered about the backend: HTTP/2 would hear the same.
                Err(error) if !error.is_gateway_failure() => return Err(error),
                Err(error) if mode == TransportMode::Quic => return Err(error),
                Err(error) => {
                    tracing::info!(%error, "quic to gateway failed; falling back to http/2")
                }
            }
        }
    }
    state
        .pool
        .connect(gateway, dial_to, allowed, request)
        .await
        .map(|stream| Upstream::Tunnel(Box::new(stream)))
}

/// The header this gateway writes on the direct path: the client, and
/// this gateway's own identity (from its certificate) as the caller's.
fn own_header(
    state: &GatewayState,
    client: SocketAddr,
    backend: SocketAddr,
) -> io::Result<Vec<u8>> {
    let material = state.tls.current();
    let own = material.identity();
    let gateway = own.uri();
    stream_header(
        &Caller {
            source: client,
            cluster: own.cluster.as_str(),
            gateway: &gateway,
        },
        backend,
    )
}

fn log_gateway_failure(error: &TunnelError) {
    match error {
        TunnelError::BackingOff { .. } => tracing::debug!(%error, "skipping gateway"),
        _ => tracing::warn!(%error, "gateway failed; trying the next one"),
    }
}

/// A UDP socket read as a byte stream: never done, since a UDP flow's
/// upstream is pumped by datagram, not spliced.
fn not_a_stream() -> io::Error {
    io::Error::new(io::ErrorKind::Unsupported, "a UDP upstream is not a stream")
}

impl SpliceIo for Upstream {
    fn poll_fill(
        &mut self,
        cx: &mut Context<'_>,
        slot: &mut Option<Chunk>,
    ) -> Poll<io::Result<usize>> {
        match self {
            Upstream::Direct(stream) => stream.poll_fill(cx, slot),
            Upstream::Udp(_) => Poll::Ready(Err(not_a_stream())),
            Upstream::Tunnel(stream) => stream.poll_fill(cx, slot),
            Upstream::Quic(stream) => stream.poll_fill(cx, slot),
        }
    }

    fn poll_send(
        &mut self,
        cx: &mut Context<'_>,
        slot: &mut Option<Chunk>,
    ) -> Poll<io::Result<usize>> {
        match self {
            Upstream::Direct(stream) => stream.poll_send(cx, slot),
            Upstream::Udp(_) => Poll::Ready(Err(not_a_stream())),
            Upstream::Tunnel(stream) => stream.poll_send(cx, slot),
            Upstream::Quic(stream) => stream.poll_send(cx, slot),
        }
    }
}

impl AsyncRead for Upstream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Upstream::Direct(stream) => Pin::new(stream).poll_read(cx, buf),
            Upstream::Udp(_) => Poll::Ready(Err(not_a_stream())),
            Upstream::Tunnel(stream) => Pin::new(stream.as_mut()).poll_read(cx, buf),
            Upstream::Quic(stream) => Pin::new(stream.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Upstream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Upstream::Direct(stream) => Pin::new(stream).poll_write(cx, buf),
            Upstream::Udp(_) => Poll::Ready(Err(not_a_stream())),
            Upstream::Tunnel(stream) => Pin::new(stream.as_mut()).poll_write(cx, buf),
            Upstream::Quic(stream) => Pin::new(stream.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Upstream::Direct(stream) => Pin::new(stream).poll_flush(cx),
            Upstream::Udp(_) => Poll::Ready(Err(not_a_stream())),
            Upstream::Tunnel(stream) => Pin::new(stream.as_mut()).poll_flush(cx),
            Upstream::Quic(stream) => Pin::new(stream.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Upstream::Direct(stream) => Pin::new(stream).poll_shutdown(cx),
            Upstream::Udp(_) => Poll::Ready(Err(not_a_stream())),
            Upstream::Tunnel(stream) => Pin::new(stream.as_mut()).poll_shutdown(cx),
            Upstream::Quic(stream) => Pin::new(stream.as_mut()).poll_shutdown(cx),
        }
    }
}
