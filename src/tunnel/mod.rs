//! The mTLS tunnel between gateways: HTTP/2 over TLS 1.3, one `CONNECT`
//! stream per proxied connection (RFC 9113 §8.5). `client` keeps a pool of
//! connections per peer gateway; `server` authenticates peers, authorises
//! each target against the route table and dials it. The wire format is in
//! `docs/tunnel-protocol.md`.

pub mod client;
pub mod server;

use std::time::Duration;

/// Response header carrying a refusal's reason as text.
pub const ERROR_HEADER: &str = "strait-error";

/// HTTP/2 and TLS limits shared by both ends of the tunnel.
#[derive(Debug, Clone)]
pub struct TunnelSettings {
    /// Streams one pooled connection carries before the pool opens another.
    pub max_streams_per_connection: usize,
    /// Streams a server accepts on one connection.
    pub server_max_concurrent_streams: u32,
    pub max_header_list_size: u32,
    /// Per-stream flow-control window: MiB-scale so one bulk flow fills a WAN link.
    pub stream_window: u32,
    /// Per-connection window, several streams' worth.
    pub connection_window: u32,
    pub max_frame_size: u32,
    pub keepalive_interval: Duration,
    pub keepalive_timeout: Duration,
    pub handshake_timeout: Duration,
    /// First and longest wait before redialling a peer that failed.
    pub backoff_base: Duration,
    pub backoff_max: Duration,
}

impl Default for TunnelSettings {
    fn default() -> Self {
        Self {
            max_streams_per_connection: 100,
            server_max_concurrent_streams: 1000,
            max_header_list_size: 16 * 1024,
            stream_window: 4 * 1024 * 1024,
            connection_window: 16 * 1024 * 1024,
            max_frame_size: 64 * 1024,
            keepalive_interval: Duration::from_secs(20),
            keepalive_timeout: Duration::from_secs(10),
            handshake_timeout: Duration::from_secs(10),
            backoff_base: Duration::from_millis(200),
            backoff_max: Duration::from_secs(30),
        }
    }
}
