//! The mTLS tunnel between gateways: HTTP/2 over TLS 1.3, one `CONNECT`
//! stream per proxied connection (RFC 9113 §8.5). `client` keeps a pool of
//! connections per peer gateway; `server` authenticates peers, authorises
//! each target against the route table and dials it; `feed` reads a
//! peer's exported-state feed. The wire format is in
//! `docs/tunnel-protocol.md`.

pub mod capsule;
pub mod client;
pub mod feed;
pub mod frames;
pub(crate) mod keepalive;
pub mod limits;
pub mod quic;
pub(crate) mod stream;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use serde::Deserialize;

/// Response header carrying a refusal's reason as text.
pub const ERROR_HEADER: &str = "strait-error";

/// Request header carrying the original client's address (`ip:port`,
/// IPv6 in brackets), sent only when the target's service asks for the
/// PROXY protocol. The server believes it only because the request comes
/// from an authenticated peer gateway, and only for the header's source.
pub const CLIENT_HEADER: &str = "strait-client";

/// One tunnel request: the target authority, and the original client's
/// address when the backend is to learn it (`strait.dev/proxy-protocol`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TunnelRequest<'a> {
    pub authority: &'a str,
    pub client: Option<SocketAddr>,
    /// A UDP flow (datagrams in capsules, [`capsule`]) rather than a byte
    /// stream to a TCP port.
    pub datagrams: bool,
}

impl<'a> From<&'a str> for TunnelRequest<'a> {
    fn from(authority: &'a str) -> Self {
        Self {
            authority,
            client: None,
            datagrams: false,
        }
    }
}

impl<'a> From<&'a String> for TunnelRequest<'a> {
    fn from(authority: &'a String) -> Self {
        Self::from(authority.as_str())
    }
}

/// Bytes rustls may queue for a tunnel connection's socket. Its default,
/// 64 KiB, is 9 bytes short of one full DATA frame (64 KiB of payload and a
/// 9-byte header), so every full frame went out as four TLS records in one
/// system call and a 9-byte record in a second. With room for a few frames
/// each frame takes one call; HTTP/2 flow control bounds what is queued.
pub(crate) const TLS_SEND_BUFFER: usize = 256 * 1024;

/// Which transport carries tunnelled connections to a peer gateway.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TransportMode {
    /// QUIC first; HTTP/2 when QUIC does not connect in time, QUIC retried later.
    #[default]
    Auto,
    H2,
    Quic,
}

/// HTTP/2, QUIC and TLS limits shared by both ends of the tunnel.
#[derive(Debug, Clone)]
pub struct TunnelSettings {
    /// The transport to peers not listed in `peer_transports`.
    pub transport: TransportMode,
    /// Per-peer transport, keyed by gateway address as `host:port`.
    pub peer_transports: HashMap<String, TransportMode>,
    /// How long a QUIC handshake may take before `auto` falls back to HTTP/2.
    pub quic_connect_timeout: Duration,
    /// How long `auto` keeps using HTTP/2 with a peer whose QUIC failed.
    pub quic_retry_after: Duration,
    /// QUIC keep-alive and idle timeout. UDP gives no reset when a peer
    /// dies, so silence is the only signal: short enough that a dead
    /// replica is given up within the failover budget, with enough
    /// keep-alives per idle period that random loss never fakes a death.
    pub quic_keepalive: Duration,
    pub quic_idle_timeout: Duration,
    /// Streams a QUIC server accepts on one connection: the client keeps one
    /// connection per peer, so this bounds concurrent tunnelled connections
    /// to one peer. quinn allocates a small entry for each stream the peer
    /// may open as soon as it may (granted after authentication only, and
    /// never past `tunnel.maxStreamsPerPeer`: [`quic::server_streams`]).
    pub quic_max_concurrent_streams: u32,
    /// Streams one pooled connection carries before the pool opens another.
    pub max_streams_per_connection: usize,
    /// Streams a server accepts on one connection.
    pub server_max_concurrent_streams: u32,
    pub max_header_list_size: u32,
    /// Per-stream flow-control window: MiB-scale so one bulk flow fills a WAN link.
    /// A stream's window is what bounds the bytes it may make a gateway
    /// hold; the connection window is sized from it ([`Self::connection_window`]).
    pub stream_window: u32,
    pub max_frame_size: u32,
    pub keepalive_interval: Duration,
    pub keepalive_timeout: Duration,
    pub handshake_timeout: Duration,
    /// First and longest wait before redialling a peer that failed.
    pub backoff_base: Duration,
    pub backoff_max: Duration,
    /// Whether the tunnel server serves callers presenting its own cluster.
    pub admit_own_cluster: bool,
    /// Networks never dialled for a peer (`tunnel.deniedNetworks`).
    pub denied_networks: Vec<ipnet::IpNet>,
    /// What one caller cluster may have in flight on the tunnel server.
    pub peer_limits: limits::PeerLimits,
    /// What unauthenticated clients may have in flight.
    pub handshakes: limits::HandshakeLimits,
    /// How long a peer's connection to the tunnel server may live (less
    /// up to a tenth at random) before it is asked to move to a new one.
    pub max_connection_age: Duration,
    /// How long the open streams of a connection being ended (maximum
    /// age, an expired or revoked certificate) may still run.
    pub close_grace: Duration,
    /// Control frames one tunnel connection may send the server.
    pub control_frames: frames::ControlFrameLimit,
    /// How long an inbound tunnel stream may hold backend bytes its peer
    /// does not take (a zero window) before it is closed.
    pub stream_stall_timeout: Duration,
}

impl Default for TunnelSettings {
    fn default() -> Self {
        Self {
            transport: TransportMode::Auto,
            peer_transports: HashMap::new(),
            quic_connect_timeout: Duration::from_secs(1),
            quic_retry_after: quic::client::DEFAULT_RETRY_AFTER,
            quic_keepalive: Duration::from_millis(200),
            quic_idle_timeout: Duration::from_millis(1000),
            quic_max_concurrent_streams: 65_536,
            max_streams_per_connection: 100,
            server_max_concurrent_streams: 1000,
            max_header_list_size: 16 * 1024,
            stream_window: 2 * 1024 * 1024,
            max_frame_size: 64 * 1024,
            keepalive_interval: Duration::from_secs(20),
            keepalive_timeout: Duration::from_secs(10),
            handshake_timeout: Duration::from_secs(10),
            backoff_base: Duration::from_millis(200),
            backoff_max: Duration::from_secs(30),
            admit_own_cluster: false,
            denied_networks: Vec::new(),
            peer_limits: limits::PeerLimits::default(),
            handshakes: limits::HandshakeLimits::default(),
            max_connection_age: Duration::from_secs(24 * 3600),
            close_grace: Duration::from_secs(60),
            control_frames: frames::ControlFrameLimit::default(),
            stream_stall_timeout: Duration::from_secs(300),
        }
    }
}

impl TunnelSettings {
    /// The HTTP/2 connection window: every stream the connection may carry
    /// times the stream window (capped at HTTP/2's largest window). h2 gives
    /// a connection's credit back only as its streams' data is taken, so a
    /// smaller window lets a few streams whose readers stopped (a client
    /// that does not read, a backend that does not) hold all of it, and
    /// every other stream of the connection stops with them. Memory is no
    /// less bounded: each stream still holds at most its own window.
    pub fn connection_window(&self) -> u32 {
        const LARGEST: u64 = (1 << 31) - 1;
        let all_streams =
            u64::from(self.stream_window) * u64::from(self.server_max_concurrent_streams);
        u32::try_from(all_streams.min(LARGEST)).unwrap_or(u32::MAX >> 1)
    }

    /// The QUIC connection's receive window, for the same reason: every
    /// stream it may carry times the stream window.
    pub fn quic_receive_window(&self) -> u64 {
        u64::from(self.stream_window).saturating_mul(u64::from(self.quic_max_concurrent_streams))
    }

    /// The transport to use with one peer gateway.
    pub fn transport_for(&self, gateway: &crate::model::GatewayAddress) -> TransportMode {
        if self.peer_transports.is_empty() {
            return self.transport;
        }
        self.peer_transports
            .get(&gateway.to_string())
            .copied()
            .unwrap_or(self.transport)
    }
}
