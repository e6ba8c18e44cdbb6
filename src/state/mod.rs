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

use crate::admin::metrics::Metrics;
use crate::model::GatewayAddress;
use crate::net::accept::Admission;
use crate::net::dial::DialOptions;
use crate::net::overload::Overload;
use crate::routing::RouteTable;
use crate::routing::balancer::Chooser;
use crate::routing::inbound::InboundGuard;
use crate::tls::ReloadingTls;
use crate::tunnel::TunnelSettings;
use crate::tunnel::client::TunnelPool;
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
}

impl GatewayState {
    /// What the listeners admit new connections against.
    pub fn admission(&self) -> Admission<'_> {
        Admission {
            overload: &self.overload,
            metrics: &self.metrics,
        }
    }
}
