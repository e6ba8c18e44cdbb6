//! The data plane's socket layer: dialling, splicing, opening upstreams, and
//! the egress listeners that accept local clients (HTTP CONNECT and
//! ClusterSetIP VIPs).

pub mod connect;
pub mod dial;
pub mod splice;
pub mod upstream;
pub mod vip;

use std::future::Future;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::admin::metrics::ClosedResult;
use crate::model::ServiceKey;
use splice::{SpliceEnd, splice};
use upstream::Opened;

/// Accepts connections on `listener` until `shutdown`, serving each in its
/// own task on `tracker` (so a drain can wait for them). Accept errors (out
/// of file descriptors, say) are logged and retried after a short pause.
pub(crate) async fn accept_until<F, Fut>(
    listener: TcpListener,
    what: &'static str,
    shutdown: CancellationToken,
    tracker: TaskTracker,
    mut serve: F,
) where
    F: FnMut(TcpStream, SocketAddr) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, remote)) => {
                    tracker.spawn(serve(stream, remote));
                }
                Err(error) => {
                    tracing::warn!(%error, listener = what, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            () = shutdown.cancelled() => return,
        }
    }
}

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
