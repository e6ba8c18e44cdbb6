//! The data plane's socket layer: dialling, splicing, opening upstreams, and
//! the egress listeners that accept local clients (HTTP CONNECT and
//! ClusterSetIP VIPs).

pub mod connect;
pub mod dial;
pub mod splice;
pub mod upstream;
pub mod vip;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncWrite};

use crate::admin::metrics::ClosedResult;
use crate::model::ServiceKey;
use splice::{SpliceEnd, splice};
use upstream::Opened;

/// Splices a client to its opened upstream, then writes the access-log line
/// and closes the connection's metrics.
pub(crate) async fn relay<C>(
    client: C,
    client_address: SocketAddr,
    opened: Opened,
    service: &ServiceKey,
    port: u16,
    started: Instant,
    idle_timeout: Duration,
) where
    C: AsyncRead + AsyncWrite + Unpin,
{
    let Opened {
        upstream,
        backend,
        metrics,
        active,
    } = opened;
    let outcome = splice(client, upstream, idle_timeout).await;
    drop(active);
    let result = match &outcome.end {
        SpliceEnd::Closed => ClosedResult::Ok,
        SpliceEnd::IdleTimeout => ClosedResult::Timeout,
        SpliceEnd::Error(_) => ClosedResult::Error,
    };
    tracing::info!(
        target: "strait::access",
        client = %client_address,
        service = %service,
        port,
        backend = %SocketAddr::new(backend.backend.address, backend.backend.port),
        cluster = %backend.backend.cluster,
        network = %backend.network,
        path = backend.path.as_str(),
        bytes_in = outcome.client_to_backend,
        bytes_out = outcome.backend_to_client,
        duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        result = ?outcome.end,
        "connection"
    );
    metrics.closed(result, outcome.client_to_backend, outcome.backend_to_client);
}
