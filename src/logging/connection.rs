//! One span per proxied connection, so that every line it causes can be
//! joined: in `--log-format json` each line carries the span's fields
//! (`span.id`, and the enclosing spans under `spans`), and the access-log
//! line names the same id as `connection`.
//!
//! A `connection` span opens where a listener accepts (CONNECT, ClusterSetIP
//! and import-port listeners, the tunnel port, DNS over TCP, a QUIC peer)
//! with its id, listener and client address; the service port, the chosen
//! backend and its path are recorded on it once known. On the tunnel port a
//! peer's connection carries many proxied streams: each gets a `stream`
//! span of its own id inside the connection's. Every task a connection
//! spawns is instrumented with its span.

use std::fmt;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};

use tracing::Span;
use tracing::field::Empty;

/// A proxied connection's (or tunnel stream's) id: unique in this process,
/// increasing, never reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ConnectionId(u64);

static NEXT: AtomicU64 = AtomicU64::new(1);

impl ConnectionId {
    /// The next id.
    pub fn next() -> Self {
        Self(NEXT.fetch_add(1, Ordering::Relaxed))
    }

    pub fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Display for ConnectionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// The span of one accepted connection. `listener` is the listener's
/// metric label (`connect`, `cluster-set-ip`, `import`, `tunnel`, `dns`).
pub fn connection_span(id: ConnectionId, listener: &'static str, client: SocketAddr) -> Span {
    tracing::info_span!(
        "connection",
        id = id.0,
        listener,
        client = %client,
        peer = Empty,
        service = Empty,
        port = Empty,
        backend = Empty,
        path = Empty,
    )
}

/// The span of one proxied stream on a peer's tunnel connection, inside
/// that connection's span.
pub fn stream_span(id: ConnectionId) -> Span {
    tracing::info_span!("stream", id = id.0, authority = Empty, backend = Empty,)
}

/// Records the service port a connection is for on the current span.
pub fn record_service(service: &dyn fmt::Display, port: u16) {
    let span = Span::current();
    span.record("service", tracing::field::display(service));
    span.record("port", port);
}

/// Records the backend a connection reached, and how, on the current span.
pub fn record_backend(backend: SocketAddr, path: &str) {
    let span = Span::current();
    span.record("backend", tracing::field::display(backend));
    span.record("path", path);
}

/// Records the authenticated peer gateway on the current span.
pub fn record_peer(peer: &dyn fmt::Display) {
    Span::current().record("peer", tracing::field::display(peer));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_increase_and_are_never_reused() {
        let first = ConnectionId::next();
        let second = ConnectionId::next();
        assert!(second > first);
        assert_ne!(first.get(), second.get());
    }
}
