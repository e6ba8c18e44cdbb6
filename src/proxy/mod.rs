//! The egress listeners that accept local clients (HTTP CONNECT,
//! ClusterSetIP VIPs and import ports), and opening their upstreams: a
//! backend dialled directly or a stream through a peer gateway's tunnel.

pub mod connect;
pub mod imports;
pub mod upstream;
pub mod vip;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::admin::metrics::ConnectionMetrics;
use crate::logging::connection::{ConnectionId, record_backend};
use crate::model::ServiceKey;
use crate::net::accept::closed_result;
use crate::net::splice::{Flow, SpliceOutcome, StallWatch};
use crate::routing::balancer::ActiveGuard;
use upstream::{Opened, Reached, Upstream};

/// What a relayed connection's access-log line and metrics need once its
/// splice ends. Kept apart from the upstream so a connection's task stores
/// each of these once, beside the splice, rather than once per nested future.
pub(crate) struct Finish {
    connection: ConnectionId,
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
        connection: ConnectionId,
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
        record_backend(backend.address, backend.path);
        let finish = Finish {
            connection,
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
            connection,
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
            connection = connection.get(),
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
