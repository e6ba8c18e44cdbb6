//! The accept loop every TCP listener runs: admission against the
//! descriptor budget, socket options, one task per connection on a tracker
//! a drain waits for, and a backoff when the process is out of descriptors.

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use std::sync::Arc;

use super::overload::Overload;
use super::sources::{SourceRefusal, SourceTable};
use super::splice::SpliceEnd;
use tracing::Instrument;

use crate::admin::metrics::{ClosedResult, Limit, Listener, Metrics, Transport};
use crate::logging::connection::{ConnectionId, connection_span};

/// What a listener admits new connections against, and counts them in.
#[derive(Clone, Copy)]
pub struct Admission<'a> {
    pub overload: &'a Overload,
    pub metrics: &'a Metrics,
    /// The listener's connections by source address, when it caps them.
    pub sources: Option<&'a Arc<SourceTable>>,
}

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
/// own task on `tracker` (so a drain can wait for them) inside its own
/// `connection` span (named by its id, passed to `serve`), with TCP_NODELAY
/// and keep-alive set. A connection accepted while descriptors are within
/// the reserve, or past its listener's caps per source address and in
/// total, or past its listener's share of the descriptors
/// ([`super::sources`]), is closed at once. Accept errors are counted; when the
/// process is out of descriptors the loop backs off (10 ms doubling to 1 s)
/// instead of spinning.
pub async fn accept_until<F, Fut>(
    listener: TcpListener,
    which: Listener,
    admission: Admission<'_>,
    shutdown: CancellationToken,
    tracker: TaskTracker,
    mut serve: F,
) where
    F: FnMut(TcpStream, SocketAddr, ConnectionId) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    // Set once on the listener, the options come with every accepted
    // connection; otherwise each connection is tuned on its own.
    let inherited = super::dial::tune_listener(&listener).is_ok();
    let mut backoff = ACCEPT_BACKOFF_FIRST;
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, remote)) => {
                    backoff = ACCEPT_BACKOFF_FIRST;
                    if let Err(short) = admission.overload.admit() {
                        admission.metrics.limited(short.limit(), Transport::None);
                        drop(stream);
                        continue;
                    }
                    // Held by the connection's task until it ends.
                    let share = admission.overload.listener_share();
                    let slot = match admission.sources.map(|table| table.admit(remote.ip(), share)) {
                        Some(Err(refusal)) => {
                            admission.metrics.limited(limit_of(refusal), Transport::None);
                            drop(stream);
                            continue;
                        }
                        Some(Ok(slot)) => Some(slot),
                        None => None,
                    };
                    if !inherited {
                        let _ = super::dial::tune_accepted(&stream);
                    }
                    // The connection's span, entered whenever its task runs.
                    let id = ConnectionId::next();
                    let span = connection_span(id, which.as_str(), remote);
                    let served = serve(stream, remote, id);
                    tracker.spawn(
                        async move {
                            let _slot = slot;
                            served.await;
                        }
                        .instrument(span),
                    );
                }
                Err(error) => {
                    admission.metrics.accept_error(which);
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

fn limit_of(refusal: SourceRefusal) -> Limit {
    match refusal {
        SourceRefusal::PerSource => Limit::PerSource,
        SourceRefusal::Total => Limit::ListenerConnections,
        SourceRefusal::Share => Limit::ListenerShare,
    }
}

/// How a splice's end counts in `strait_connections_closed_total`.
pub fn closed_result(end: &SpliceEnd) -> ClosedResult {
    match end {
        SpliceEnd::Closed => ClosedResult::Ok,
        SpliceEnd::IdleTimeout | SpliceEnd::Stalled => ClosedResult::Timeout,
        SpliceEnd::OverBudget | SpliceEnd::Error(_) => ClosedResult::Error,
    }
}
