//! The egress listeners that accept local clients (HTTP CONNECT,
//! ClusterSetIP VIPs and import ports), and opening their upstreams: a
//! backend dialled directly or a stream through a peer gateway's tunnel.

pub mod connect;
pub mod health_check;
pub mod imports;
pub mod udp;
pub mod upstream;
pub mod vip;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::admin::metrics::ConnectionMetrics;
use crate::logging::connection::{ConnectionId, record_backend};
use crate::model::ServiceKey;
use crate::net::accept::closed_result;
use crate::net::buffer::BUFFER_SIZE;
use crate::net::memory::MemoryBudget;
use crate::net::splice::{Flow, MemoryCharge, SpliceOutcome, StallWatch};
use crate::routing::Path;
use crate::routing::balancer::ActiveGuard;
use crate::state::GatewayState;
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
    /// The gateway's memory budget, charged while the connection holds bytes.
    memory: Arc<MemoryBudget>,
    /// What it is charged: a copy buffer, and through a tunnel its
    /// stream's receive window, which the peer may fill while the client
    /// does not read.
    hold: u64,
}

/// The budget egress connections are charged to, and a tunnel stream's window.
pub(crate) struct EgressCharge {
    pub budget: Arc<MemoryBudget>,
    pub tunnel_window: u32,
}

impl EgressCharge {
    pub(crate) fn of(state: &GatewayState) -> Self {
        Self {
            budget: state.overload.memory().clone(),
            tunnel_window: state.tunnel.stream_window,
        }
    }
}

impl MemoryCharge for Finish {
    fn holding(&mut self, holds: bool) -> bool {
        if !holds {
            self.memory.release(self.hold);
            return true;
        }
        self.memory.charge(self.hold)
    }
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
        charge: EgressCharge,
    ) -> (Upstream, Finish) {
        let Opened {
            upstream,
            backend,
            metrics,
            active,
        } = opened;
        record_backend(backend.address, backend.path);
        let window = if backend.path == Path::Direct.as_str() {
            0
        } else {
            u64::from(charge.tunnel_window)
        };
        let finish = Finish {
            connection,
            client_address,
            service,
            port,
            started,
            backend,
            metrics,
            active,
            memory: charge.budget,
            hold: BUFFER_SIZE as u64 + window,
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
            memory: _,
            hold: _,
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
