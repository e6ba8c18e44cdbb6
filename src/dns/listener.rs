//! The DNS listener: UDP and TCP on one address, a thin I/O layer around
//! [`respond`](super::message::respond). Every query reads the route
//! snapshot current at that moment (`state.routes.load()`), so answers
//! follow each route swap with no lock and no cache to invalidate.
//!
//! Bounds: a few UDP worker threads share the socket and answer in batches
//! ([`super::udp`]); TCP takes at most [`MAX_TCP_CONNECTIONS`] clients at
//! once, [`MAX_TCP_PER_SOURCE`] of one address (past either the idlest
//! client, of all or of that address, is closed for a newcomer), each
//! with an idle timeout between queries, a read and a write timeout per
//! message, and a maximum age, so slow or idle clients cannot hold slots.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use socket2::{Domain, Socket, Type};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use tracing::Instrument;

use super::counted::answer;
use super::message::Transport;
use super::zone::Zone;
use crate::logging::connection::{ConnectionId, connection_span};
use crate::net::slots::{AtSourceCap, Slot, Slots};
use crate::state::GatewayState;

/// Concurrent TCP clients; past them, the idlest is closed for a newcomer
/// ([`crate::net::slots`]).
pub const MAX_TCP_CONNECTIONS: usize = 256;
/// Open TCP connections of one source address.
pub const MAX_TCP_PER_SOURCE: usize = 32;
/// How long a TCP client may stay silent between queries (RFC 7766 §6.2.3
/// asks for seconds, not minutes).
const TCP_IDLE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the rest of a message may take once its length has arrived,
/// and how long writing an answer may take.
const TCP_IO_TIMEOUT: Duration = Duration::from_secs(5);
/// A TCP connection is closed after this long, busy or not.
const TCP_MAX_AGE: Duration = Duration::from_secs(120);
/// The kernel caps this at net.core.rmem_max; a smaller buffer still works.
const UDP_SOCKET_BUFFER: usize = 1 << 20;
/// UDP workers sharing the socket (at most one per CPU).
const MAX_UDP_WORKERS: usize = 4;
/// Pause after an accept or receive error that is not about one client.
const ERROR_BACKOFF: Duration = Duration::from_millis(100);
/// Tries at binding UDP on the port the kernel picked for TCP (port 0).
const BIND_ATTEMPTS: usize = 8;

/// The DNS listener's sockets: TCP and UDP on the same address and port.
#[derive(Debug)]
pub struct DnsSockets {
    pub udp: std::net::UdpSocket,
    pub tcp: TcpListener,
}

impl DnsSockets {
    /// Binds TCP and UDP on `address`; with port 0, on one port the kernel
    /// picks that is free for both.
    pub async fn bind(address: SocketAddr) -> io::Result<Self> {
        let mut last_error = None;
        for _ in 0..BIND_ATTEMPTS {
            let tcp = crate::net::listen::bind(address)?;
            match udp_socket(tcp.local_addr()?) {
                Ok(udp) => return Ok(Self { udp, tcp }),
                Err(error) if address.port() == 0 => last_error = Some(error),
                Err(error) => return Err(error),
            }
        }
        Err(last_error.unwrap_or_else(|| io::Error::other("no port free for both TCP and UDP")))
    }

    /// Where the listener answers (the same port on UDP and TCP).
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.tcp.local_addr()
    }
}

fn udp_socket(address: SocketAddr) -> io::Result<std::net::UdpSocket> {
    let socket = Socket::new(
        Domain::for_address(address),
        Type::DGRAM,
        Some(socket2::Protocol::UDP),
    )?;
    // Best effort: bursts of queries queue here rather than being dropped.
    let _ = socket.set_recv_buffer_size(UDP_SOCKET_BUFFER);
    socket.bind(&address.into())?;
    Ok(socket.into())
}

/// Serves DNS on `sockets` until `stop` is cancelled.
pub async fn serve(
    sockets: DnsSockets,
    state: Arc<GatewayState>,
    zone: Arc<Zone>,
    stop: CancellationToken,
) {
    let local = sockets.local_addr().ok();
    tracing::info!(?local, zone = %zone.origin(), "dns listener serving");
    let workers = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, MAX_UDP_WORKERS);
    let stop_udp = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let udp = super::udp::spawn(
        Arc::new(sockets.udp),
        state.clone(),
        zone.clone(),
        stop_udp.clone(),
        workers,
    );
    let udp = match udp {
        Ok(threads) => threads,
        Err(error) => {
            tracing::error!(%error, "dns: udp workers did not start; answering over TCP only");
            Vec::new()
        }
    };
    let tcp = tokio::spawn(serve_tcp(sockets.tcp, state, zone, stop.clone()));
    stop.cancelled().await;
    tcp.abort();
    let _ = tcp.await;
    stop_udp.store(true, std::sync::atomic::Ordering::Relaxed);
    // Each worker sees the flag within its read timeout.
    let _ = tokio::task::spawn_blocking(move || {
        for thread in udp {
            let _ = thread.join();
        }
    })
    .await;
    tracing::info!(?local, "dns listener stopped");
}

async fn serve_tcp(
    listener: TcpListener,
    state: Arc<GatewayState>,
    zone: Arc<Zone>,
    stop: CancellationToken,
) {
    let slots = Slots::with(
        MAX_TCP_CONNECTIONS,
        MAX_TCP_PER_SOURCE,
        AtSourceCap::EvictOwnIdlest,
    );
    let mut connections = JoinSet::new();
    loop {
        let (stream, peer) = tokio::select! {
            () = stop.cancelled() => return,
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    tracing::debug!(%error, "dns: tcp accept failed");
                    tokio::time::sleep(ERROR_BACKOFF).await;
                    continue;
                }
            },
        };
        let Some(slot) = slots.admit(peer.ip()) else {
            state.metrics.dns_tcp_refused();
            tracing::debug!(%peer, limit = MAX_TCP_PER_SOURCE, "dns: tcp connections of this source at their cap; closing");
            continue;
        };
        let (state, zone) = (state.clone(), zone.clone());
        let span = connection_span(ConnectionId::next(), "dns", peer);
        connections.spawn(
            async move {
                let served = tokio::time::timeout(
                    TCP_MAX_AGE,
                    serve_connection(stream, &state, &zone, &slot),
                );
                // Past the maximum age the connection is simply dropped.
                tokio::select! {
                    served = served => if let Ok(Err(error)) = served {
                        tracing::debug!(%peer, %error, "dns: tcp connection ended");
                    },
                    () = slot.client().evicted() => {
                        state.metrics.dns_tcp_refused();
                        tracing::debug!(%peer, "dns: idlest tcp connection closed for a new client");
                    }
                }
            }
            .instrument(span),
        );
    }
}

/// Answers length-prefixed queries (RFC 1035 §4.2.2) in order until the
/// client closes, stays idle too long, or sends something unanswerable.
async fn serve_connection(
    mut stream: TcpStream,
    state: &GatewayState,
    zone: &Zone,
    slot: &Slot,
) -> io::Result<()> {
    let _ = stream.set_nodelay(true);
    let mut query = Vec::new();
    loop {
        let length = match tokio::time::timeout(TCP_IDLE_TIMEOUT, stream.read_u16()).await {
            Ok(Ok(length)) => usize::from(length),
            // A client that closes between queries is done.
            Ok(Err(error)) if error.kind() == io::ErrorKind::UnexpectedEof => return Ok(()),
            Ok(Err(error)) => return Err(error),
            Err(_) => return Ok(()),
        };
        if length == 0 {
            return Ok(());
        }
        query.resize(length, 0);
        timed(stream.read_exact(&mut query)).await?;
        slot.touch();
        let Some(reply) = answer(state, zone, &query, Transport::Tcp) else {
            return Ok(());
        };
        let length = u16::try_from(reply.len())
            .map_err(|_| io::Error::other("an answer longer than 65,535 bytes"))?;
        let mut framed = Vec::with_capacity(reply.len() + 2);
        framed.extend_from_slice(&length.to_be_bytes());
        framed.extend_from_slice(&reply);
        timed(stream.write_all(&framed)).await?;
    }
}

async fn timed<T>(io: impl Future<Output = io::Result<T>>) -> io::Result<T> {
    tokio::time::timeout(TCP_IO_TIMEOUT, io)
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "dns: tcp client too slow"))?
}
