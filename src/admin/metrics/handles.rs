//! The handles the data plane holds: a connection's (or a peer pool's)
//! metrics, resolved once when it starts, so the hot path never looks a
//! family up.

use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;

use super::{ClosedLabels, ClosedResult, PathLabels, RoutePath};

/// The metric handles of one connection, resolved once when it starts.
///
/// [`Metrics::connection`] counts the connection as opened and active; the
/// active gauge goes down exactly once: in [`closed`](Self::closed), or on
/// drop if the connection ends without `closed` (a cancelled task, a panic),
/// which is then counted as `result="error"` so that
/// opened = closed + active holds for every path.
#[derive(Debug)]
pub struct ConnectionMetrics {
    pub(super) path: RoutePath,
    pub(super) active: Gauge,
    pub(super) dial: Histogram,
    pub(super) bytes_up: Counter,
    pub(super) bytes_down: Counter,
    pub(super) closed: Family<ClosedLabels, Counter>,
    /// Resolved only when a connection stalls: most never do.
    pub(super) stalled: Family<PathLabels, Gauge>,
    pub(super) stalls: Family<PathLabels, Counter>,
    /// Still counted as active: not yet closed.
    pub(super) open: bool,
    /// Counted in the stalled gauge.
    pub(super) stalling: bool,
}

impl ConnectionMetrics {
    /// Records how long reaching the backend took.
    pub fn dial(&self, duration: Duration) {
        self.dial.observe(duration.as_secs_f64());
    }

    /// Ends the connection: counts its result and the bytes relayed each way
    /// (`bytes_up` client to backend, `bytes_down` backend to client).
    pub fn closed(mut self, result: ClosedResult, bytes_up: u64, bytes_down: u64) {
        self.finish(result);
        self.bytes_up.inc_by(bytes_up);
        self.bytes_down.inc_by(bytes_down);
    }

    /// The connection holds bytes one side does not take, and moved none
    /// for the watch period.
    pub fn stall_began(&mut self) {
        if self.stalling {
            return;
        }
        self.stalling = true;
        let labels = PathLabels { path: self.path };
        self.stalled.get_or_create(&labels).inc();
        self.stalls.get_or_create(&labels).inc();
    }

    /// The stalled connection moved again (or ended).
    pub fn stall_ended(&mut self) {
        if !self.stalling {
            return;
        }
        self.stalling = false;
        self.stalled
            .get_or_create(&PathLabels { path: self.path })
            .dec();
    }

    fn finish(&mut self, result: ClosedResult) {
        self.stall_ended();
        if !self.open {
            return;
        }
        self.open = false;
        self.active.dec();
        self.closed
            .get_or_create(&ClosedLabels {
                path: self.path,
                result,
            })
            .inc();
    }
}

impl Drop for ConnectionMetrics {
    fn drop(&mut self) {
        self.finish(ClosedResult::Error);
    }
}

/// The pool gauges of one peer gateway, resolved once.
#[derive(Debug, Clone)]
pub struct PoolMetrics {
    pub(super) connections: Gauge,
    pub(super) streams: Gauge,
}

impl PoolMetrics {
    /// Adds `delta` (negative to remove) to the peer's pooled connections.
    pub fn connections_add(&self, delta: i64) {
        self.connections.inc_by(delta);
    }

    /// Adds `delta` (negative to remove) to the peer's open streams.
    pub fn streams_add(&self, delta: i64) {
        self.streams.inc_by(delta);
    }
}
