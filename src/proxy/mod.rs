//! The data plane's socket layer: dialling, splicing, opening upstreams, and
//! the egress listeners that accept local clients (HTTP CONNECT and
//! ClusterSetIP VIPs).

pub mod buffer;
pub mod connect;
pub mod dial;
pub mod imports;
pub mod splice;
pub mod upstream;
pub mod vip;

use std::future::Future;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::admin::metrics::{ClosedResult, ConnectionMetrics};
use crate::model::ServiceKey;
use crate::routing::balancer::ActiveGuard;
use splice::{SpliceEnd, SpliceOutcome};
use upstream::{Opened, Reached, Upstream};

/// Accepts connections on `listener` until `shutdown`, serving each in its
/// own task on `tracker` (so a drain can wait for them), with TCP_NODELAY
/// and keep-alive set. Accept errors (out of file descriptors, say) are
/// logged and retried after a short pause.
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
    // Set once on the listener, the options come with every accepted
    // connection; otherwise each connection is tuned on its own.
    let inherited = dial::tune_listener(&listener).is_ok();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, remote)) => {
                    if !inherited {
                        let _ = dial::tune_accepted(&stream);
                    }
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

/// What a relayed connection's access-log line and metrics need once its
/// splice ends. Kept apart from the upstream so a connection's task stores
/// each of these once, beside the splice, rather than once per nested future.
pub(crate) struct Finish {
    client_address: SocketAddr,
    service: ServiceKey,
    port: u16,
    started: Instant,
    backend: Reached,
    metrics: ConnectionMetrics,
    /// Counts the connection as active on its backend until the splice ends.
    active: ActiveGuard,
}

impl Finish {
    /// Splits an opened upstream into the stream to splice and the rest.
    pub(crate) fn split(
        opened: Opened,
        client_address: SocketAddr,
        service: ServiceKey,
        port: u16,
        started: Instant,
    ) -> (Upstream, Finish) {
        let Opened {
            upstream,
            backend,
            metrics,
            active,
        } = opened;
        let finish = Finish {
            client_address,
            service,
            port,
            started,
            backend,
            metrics,
            active,
        };
        (upstream, finish)
    }

    /// Writes the access-log line and closes the connection's metrics.
    pub(crate) fn done(self, outcome: SpliceOutcome) {
        let Finish {
            client_address,
            service,
            port,
            started,
            backend,
            metrics,
            active,
        } = self;
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
            backend = %backend.address,
            cluster = %backend.cluster,
            network = %backend.network,
            path = backend.path,
            bytes_in = outcome.client_to_backend,
            bytes_out = outcome.backend_to_client,
            duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
            result = ?outcome.end,
            "connection"
        );
        metrics.closed(result, outcome.client_to_backend, outcome.backend_to_client);
    }
}
