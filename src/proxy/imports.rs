//! Import listeners: one TCP listener per import port of the current route
//! table, opened and closed as the table changes. kube-proxy's DNAT of a
//! ClusterSetIP (or, in a file setup, any DNAT rule) sends a pod's
//! connection to a gateway pod on the import port of that service port; the
//! port it arrives on selects the service, and from there the connection
//! goes exactly as a CONNECT would (`vip::serve_with`, `upstream::open`).
//!
//! A port that cannot be bound (another process holds it) is logged,
//! counted in `strait_import_listener_failures` and tried again at the next
//! route change; it never stops the other ports.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use socket2::{Domain, Protocol as SocketProtocol, Socket, Type};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::vip::{Selector, serve_with};
use crate::gateway::state::GatewayState;

/// How many connections may wait to be accepted on one import port.
const BACKLOG: i32 = 1024;

/// Binds one import port: address reuse, so a port freed by a restart can
/// be bound again at once, and non-blocking for tokio.
pub fn bind(address: SocketAddr) -> io::Result<TcpListener> {
    let socket = Socket::new(
        Domain::for_address(address),
        Type::STREAM,
        Some(SocketProtocol::TCP),
    )?;
    socket.set_reuse_address(true)?;
    socket.set_nonblocking(true)?;
    socket.bind(&address.into())?;
    socket.listen(BACKLOG)?;
    TcpListener::from_std(socket.into())
}

/// The open import listeners of one gateway.
pub struct ImportListeners {
    address: IpAddr,
    state: Arc<GatewayState>,
    /// Ends every listener (a drain), and each one's own token ends it alone.
    shutdown: CancellationToken,
    open: HashMap<u16, CancellationToken>,
}

impl ImportListeners {
    pub fn new(address: IpAddr, state: Arc<GatewayState>, shutdown: CancellationToken) -> Self {
        Self {
            address,
            state,
            shutdown,
            open: HashMap::new(),
        }
    }

    /// Opens a listener for every import port of the current table that has
    /// none and closes those the table no longer names. Open connections
    /// of a closed port continue.
    pub fn sync(&mut self) {
        let table = self.state.routes.load_full();
        let wanted: HashMap<u16, ()> = table.import_ports().map(|(port, _)| (port, ())).collect();
        self.open.retain(|port, token| {
            let keep = wanted.contains_key(port);
            if !keep {
                token.cancel();
            }
            keep
        });
        let mut failed = 0;
        for port in wanted.keys() {
            if self.open.contains_key(port) {
                continue;
            }
            let address = SocketAddr::new(self.address, *port);
            match bind(address) {
                Ok(listener) => {
                    let token = self.shutdown.child_token();
                    tokio::spawn(serve_with(
                        listener,
                        self.state.clone(),
                        token.clone(),
                        Selector::ImportPort,
                    ));
                    self.open.insert(*port, token);
                }
                Err(error) => {
                    failed += 1;
                    tracing::warn!(%address, %error, "cannot listen on import port");
                }
            }
        }
        self.state
            .metrics
            .set_import_listeners(self.open.len(), failed);
    }

    /// Follows route changes until `shutdown`.
    pub fn spawn(mut self) -> JoinHandle<()> {
        tokio::spawn(async move {
            loop {
                self.sync();
                tokio::select! {
                    () = self.state.route_updates.notified() => {}
                    () = self.shutdown.cancelled() => return,
                }
            }
        })
    }
}
