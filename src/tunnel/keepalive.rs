//! HTTP/2 keep-alive for tunnel connections, both ends: a `PING` every
//! interval, idle or not, and the connection given up when one goes
//! unanswered for the timeout. A peer that vanished without a FIN (a node
//! lost, a NAT entry expired) is noticed within interval + timeout instead of
//! when the kernel's TCP keep-alive finally fires.

use std::time::Duration;

use h2::{Ping, PingPong};

/// Why a connection's keep-alive gave up.
#[derive(Debug, thiserror::Error)]
pub enum KeepAliveError {
    #[error("no PING acknowledgement within {0:?}")]
    Timeout(Duration),
    #[error("PING failed: {0}")]
    Failed(#[from] h2::Error),
}

/// Pings every `interval` and resolves only when a ping fails or goes
/// unanswered for `timeout`. Without a `PingPong` (h2 hands out one per
/// connection) it never resolves.
pub async fn keep_alive(
    ping_pong: Option<PingPong>,
    interval: Duration,
    timeout: Duration,
) -> KeepAliveError {
    let Some(mut ping_pong) = ping_pong else {
        return std::future::pending().await;
    };
    loop {
        tokio::time::sleep(interval).await;
        match tokio::time::timeout(timeout, ping_pong.ping(Ping::opaque())).await {
            Ok(Ok(_pong)) => {}
            Ok(Err(error)) => return KeepAliveError::Failed(error),
            Err(_) => return KeepAliveError::Timeout(timeout),
        }
    }
}
