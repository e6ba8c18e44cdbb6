//! What every listener of one gateway shares, below the listeners and apart
//! from the wiring that starts them: the current route table
//! (swapped atomically on reload), the backend chooser, the tunnel pool, TLS
//! material, metrics and settings.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use tokio_util::task::TaskTracker;

use crate::admin::metrics::{Listener, Metrics};
use crate::model::GatewayAddress;
use crate::net::accept::Admission;
use crate::net::dial::DialOptions;
use crate::net::overload::Overload;
use crate::net::slots::Slots;
use crate::net::sources::{SourceLimits, SourceTable};
use crate::routing::RouteTable;
use crate::routing::balancer::Chooser;
use crate::routing::inbound::InboundGuard;
use crate::tls::ReloadingTls;
use crate::tunnel::TunnelSettings;
use crate::tunnel::client::TunnelPool;
use crate::tunnel::limits::HandshakeLimits;
use crate::tunnel::quic::client::QuicPool;

/// Where to really dial an address the configuration names. Empty in
/// production; `strait demo` maps its pretend pod and gateway addresses onto
/// loopback with it.
#[derive(Debug, Clone, Default)]
pub struct DialOverrides {
    pub backends: HashMap<SocketAddr, SocketAddr>,
    pub gateways: HashMap<GatewayAddress, SocketAddr>,
}

impl DialOverrides {
    pub fn backend(&self, address: SocketAddr) -> SocketAddr {
        self.backends.get(&address).copied().unwrap_or(address)
    }

    pub fn gateway(&self, gateway: &GatewayAddress) -> Option<SocketAddr> {
        self.gateways.get(gateway).copied()
    }
}

/// The state one gateway's listeners share.
pub struct GatewayState {
    pub routes: ArcSwap<RouteTable>,
    pub chooser: Chooser,
    pub pool: TunnelPool,
    /// QUIC connections to peers; `None` when this gateway tunnels over HTTP/2 only.
    pub quic: Option<QuicPool>,
    pub tls: Arc<ReloadingTls>,
    pub metrics: Arc<Metrics>,
    pub dial: DialOptions,
    pub idle_timeout: Duration,
    /// `tuning.stallReport`: how long a connection may hold bytes and
    /// write none before it is reported as stalled.
    pub stall_report: Duration,
    pub dial_attempts: u8,
    pub tunnel: TunnelSettings,
    /// What the tunnel server refuses besides the route table: the
    /// gateway's own sockets, its own cluster as a caller.
    pub inbound: InboundGuard,
    pub overrides: DialOverrides,
    /// Every proxied connection's task, so shutdown can wait for them.
    pub connections: TaskTracker,
    /// Signalled after every route swap (the import listeners follow it).
    pub route_updates: tokio::sync::Notify,
    /// The findings of the configuration in use (invalid objects left out,
    /// warnings), as last reported: each is logged when it appears, not at
    /// every reload.
    pub findings: std::sync::Mutex<Vec<crate::diagnostics::Diagnostic>>,
    /// The descriptor budget new work is admitted against.
    pub overload: Overload,
    /// What each caller cluster has in flight on the tunnel server.
    pub peer_budgets: Arc<crate::tunnel::limits::PeerBudgets>,
    /// Budgets of the lines a peer or a client can cause at will.
    pub quiet: crate::logging::QuietLogs,
    /// Each listener's connections by source address.
    pub sources: ListenerSources,
    /// Tunnel handshakes in flight, by transport.
    pub handshakes: Handshakes,
    /// UDP flows of the import listeners.
    pub udp: UdpFlows,
    /// The local cluster's exported-state feed, served on the tunnel
    /// port; `None` when this gateway serves none (no Kubernetes source).
    pub feed: Option<Arc<crate::feed::Publication>>,
    /// `networks` of gateway.yaml, the network map, by cluster (empty
    /// without one): what this gateway says of it to a peer that asks
    /// (docs/tunnel-protocol.md §11), and compares a peer's with.
    pub network_map: std::collections::BTreeMap<String, String>,
    /// Which of an asking exporter's services this cluster imports (the
    /// about answer's `imports`); `None` when this gateway does not write
    /// imports (no Kubernetes source, or `kube.manageImports` off).
    pub import_account: Option<crate::export_status::AccountOf>,
}

/// What bounds the UDP flows: how long an idle one lives, and how many
/// each source and the gateway may hold.
#[derive(Debug)]
pub struct UdpFlows {
    pub idle_timeout: Duration,
    /// Flows by source address.
    pub flows: Arc<SourceTable>,
    /// Flows by source prefix ([`crate::net::sources::prefix_of`]).
    pub prefixes: Arc<SourceTable>,
    /// How a flow's client earns answers and shows it is there.
    pub answers: crate::net::datagram::AnswerRule,
}

/// The tunnel port's handshakes in flight: the slots of clients that have
/// not authenticated yet ([`crate::net::slots`]), one table per transport.
#[derive(Debug)]
pub struct Handshakes {
    pub tls: Arc<Slots>,
    pub quic: Arc<Slots>,
}

impl Handshakes {
    pub fn new(limits: HandshakeLimits) -> Self {
        Self {
            tls: Slots::new(limits.max, limits.per_source),
            quic: Slots::new(limits.max, limits.per_source),
        }
    }
}

/// The per-source tables of the TCP listeners, one per kind (every
/// ClusterSetIP listener shares one, every import port another).
#[derive(Debug)]
pub struct ListenerSources {
    pub connect: Arc<SourceTable>,
    pub tunnel: Arc<SourceTable>,
    pub cluster_set_ip: Arc<SourceTable>,
    pub import: Arc<SourceTable>,
}

impl ListenerSources {
    pub fn new(limits: SourceLimits) -> Self {
        Self {
            connect: SourceTable::new(limits),
            tunnel: SourceTable::new(limits),
            cluster_set_ip: SourceTable::new(limits),
            import: SourceTable::new(limits),
        }
    }

    pub fn of(&self, listener: Listener) -> &Arc<SourceTable> {
        match listener {
            Listener::Connect => &self.connect,
            Listener::Tunnel => &self.tunnel,
            Listener::ClusterSetIp => &self.cluster_set_ip,
            Listener::Import => &self.import,
        }
    }
}

impl GatewayState {
    /// What `listener` admits new connections against.
    pub fn admission(&self, listener: Listener) -> Admission<'_> {
        Admission {
            overload: &self.overload,
            metrics: &self.metrics,
            sources: Some(self.sources.of(listener)),
        }
    }
}
