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

use crate::admin::metrics::{ClosedResult, ConnectionMetrics, Limit, Listener, Transport};
use crate::gateway::state::GatewayState;
use crate::model::ServiceKey;
use crate::routing::balancer::ActiveGuard;
use splice::{Flow, SpliceEnd, SpliceOutcome, StallWatch};
use upstream::{Opened, Reached, Upstream};

/// The first and the longest pause of an accept loop that failed for want
/// of descriptors or memory: it must neither spin nor stay deaf for long.
const ACCEPT_BACKOFF_FIRST: Duration = Duration::from_millis(10);
const ACCEPT_BACKOFF_MAX: Duration = Duration::from_secs(1);

/// Whether an accept error means the process is out of a resource (and
/// the next accept would fail the same way), rather than one connection
/// going wrong before it was accepted.
fn out_of_resources(error: &std::io::Error) -> bool {
    use nix::errno::Errno;
    error.raw_os_error().is_some_and(|code| {
        [Errno::EMFILE, Errno::ENFILE, Errno::ENOBUFS, Errno::ENOMEM]
            .iter()
            .any(|errno| *errno as i32 == code)
    })
}

/// Accepts connections on `listener` until `shutdown`, serving each in its
/// own task on `tracker` (so a drain can wait for them), with TCP_NODELAY
/// and keep-alive set. A connection accepted while descriptors are within
/// the reserve is closed at once. Accept errors are counted; when the
/// process is out of descriptors the loop backs off (10 ms doubling to 1 s)
/// instead of spinning.
pub(crate) async fn accept_until<F, Fut>(
    listener: TcpListener,
    which: Listener,
    state: &GatewayState,
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
    let mut backoff = ACCEPT_BACKOFF_FIRST;
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, remote)) => {
                    backoff = ACCEPT_BACKOFF_FIRST;
                    if !state.overload.admit() {
                        state.metrics.limited(Limit::Descriptors, Transport::None);
                        drop(stream);
                        continue;
                    }
                    if !inherited {
                        let _ = dial::tune_accepted(&stream);
                    }
                    tracker.spawn(serve(stream, remote));
                }
                Err(error) => {
                    state.metrics.accept_error(which);
                    if !out_of_resources(&error) {
                        tracing::debug!(%error, listener = which.as_str(), "accept failed");
                        continue;
                    }
                    if backoff == ACCEPT_BACKOFF_FIRST {
                        tracing::warn!(%error, listener = which.as_str(), "accept failed; backing off");
                    }
                    tokio::select! {
                        () = tokio::time::sleep(backoff) => {}
                        () = shutdown.cancelled() => return,
                    }
                    backoff = (backoff * 2).min(ACCEPT_BACKOFF_MAX);
                }
            },
            () = shutdown.cancelled() => return,
        }
    }
}

/// How a splice's end counts in `strait_connections_closed_total`.
pub(crate) fn closed_result(end: &SpliceEnd) -> ClosedResult {
    match end {
        SpliceEnd::Closed => ClosedResult::Ok,
        SpliceEnd::IdleTimeout | SpliceEnd::Stalled => ClosedResult::Timeout,
        SpliceEnd::Error(_) => ClosedResult::Error,
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
        let result = closed_result(&outcome.end);
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

impl StallWatch for Finish {
    fn stalled(&mut self, flow: Flow, held: usize) {
        self.metrics.stall_began();
        tracing::warn!(
            client = %self.client_address,
            service = %self.service,
            port = self.port,
            backend = %self.backend.address,
            path = self.backend.path,
            direction = flow.as_str(),
            held_bytes = held,
            "connection stalled: it holds bytes the other side does not take"
        );
    }

    fn resumed(&mut self, stalled_for: Duration) {
        self.metrics.stall_ended();
        tracing::info!(
            client = %self.client_address,
            service = %self.service,
            port = self.port,
            backend = %self.backend.address,
            stalled_ms = u64::try_from(stalled_for.as_millis()).unwrap_or(u64::MAX),
            "stalled connection moved again"
        );
    }
}
