//! Import listeners: one TCP listener per import port of the current route
//! table (a UDP socket for a UDP service port's, served by `super::udp`),
//! opened and closed as the table changes. kube-proxy's DNAT of a
//! ClusterSetIP (or, in a file setup, any DNAT rule) sends a pod's
//! connection to a gateway pod on the import port of that service port; the
//! port it arrives on selects the service, and from there the connection
//! goes exactly as a CONNECT would (`vip::serve_with`, `upstream::open`).
//!
//! A port that cannot be bound (another process holds it) is logged,
//! counted in `strait_import_listener_failures` and tried again at the next
//! route change; it never stops the other ports.

use std::collections::{HashMap, HashSet};
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use socket2::{Domain, Protocol as SocketProtocol, Socket, Type};

use super::vip::{Selector, serve_with};
use crate::model::Protocol;
use crate::state::GatewayState;

/// Binds one import port (see [`crate::net::listen::bind`]).
pub fn bind(address: SocketAddr) -> io::Result<TcpListener> {
    crate::net::listen::bind(address)
}

/// Binds one UDP import port. On an IPv6 wildcard it takes both families,
/// as the TCP listener does.
pub fn bind_udp(address: SocketAddr) -> io::Result<tokio::net::UdpSocket> {
    let socket = Socket::new(
        Domain::for_address(address),
        Type::DGRAM,
        Some(SocketProtocol::UDP),
    )?;
    if address.is_ipv6() {
        socket.set_only_v6(false)?;
    }
    socket.set_nonblocking(true)?;
    socket.bind(&address.into())?;
    tokio::net::UdpSocket::from_std(socket.into())
}

/// Where import listeners bind when `imports.address` is not set: where the
/// CONNECT listener does, except that its IPv4 wildcard becomes `::` (both
/// families) on a host that has IPv6, so that an IPv6 ClusterSetIP works
/// without setting the address by hand.
pub fn default_address(connect: IpAddr) -> IpAddr {
    let dual_stack = || std::net::TcpListener::bind((Ipv6Addr::UNSPECIFIED, 0)).is_ok();
    if connect == IpAddr::V4(Ipv4Addr::UNSPECIFIED) && dual_stack() {
        IpAddr::V6(Ipv6Addr::UNSPECIFIED)
    } else {
        connect
    }
}

/// The open import listeners of one gateway.
pub struct ImportListeners {
    address: IpAddr,
    state: Arc<GatewayState>,
    /// Ends every listener (a drain), and each one's own token ends it alone.
    shutdown: CancellationToken,
    /// By port and protocol: a port whose service port changes protocol
    /// gets a socket of the new kind, not the old one kept.
    open: HashMap<(u16, Protocol), CancellationToken>,
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
        let wanted: HashSet<(u16, Protocol)> = table
            .import_ports()
            .map(|(port, key)| (port, key.protocol))
            .collect();
        let (address, state, shutdown) = (self.address, &self.state, &self.shutdown);
        let failed = reconcile(&mut self.open, &wanted, |port, protocol| {
            let address = SocketAddr::new(address, port);
            let token = shutdown.child_token();
            let bound = if protocol == Protocol::Udp {
                bind_udp(address).map(|socket| {
                    tokio::spawn(super::udp::serve(socket, state.clone(), token.clone()));
                })
            } else {
                bind(address).map(|listener| {
                    tokio::spawn(serve_with(
                        listener,
                        state.clone(),
                        token.clone(),
                        Selector::ImportPort,
                    ));
                })
            };
            bound.map(|()| token).inspect_err(
                |error| tracing::warn!(%address, %error, "cannot listen on import port"),
            )
        });
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

/// Closes the listeners of `open` that `wanted` no longer names and opens
/// those it names that are not open, each by `(port, protocol)`: a port
/// whose service port changes protocol is closed as the old kind and
/// opened as the new one. How many could not be opened.
fn reconcile(
    open: &mut HashMap<(u16, Protocol), CancellationToken>,
    wanted: &HashSet<(u16, Protocol)>,
    mut open_one: impl FnMut(u16, Protocol) -> io::Result<CancellationToken>,
) -> u64 {
    open.retain(|listener, token| {
        let keep = wanted.contains(listener);
        if !keep {
            token.cancel();
        }
        keep
    });
    let mut failed = 0;
    for &(port, protocol) in wanted {
        if open.contains_key(&(port, protocol)) {
            continue;
        }
        match open_one(port, protocol) {
            Ok(token) => {
                open.insert((port, protocol), token);
            }
            Err(_) => failed += 1,
        }
    }
    failed
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Skips (loudly) where the host has no IPv6 loopback.
    fn ipv6_loopback() -> bool {
        let has = std::net::TcpListener::bind((Ipv6Addr::LOCALHOST, 0)).is_ok();
        if !has {
            eprintln!("SKIPPED: no IPv6 loopback on this host");
        }
        has
    }

    /// Opens real sockets, each held by a task until its token is
    /// cancelled, as `sync` does.
    fn open_real(port: u16, protocol: Protocol) -> io::Result<CancellationToken> {
        let address = SocketAddr::new(Ipv4Addr::LOCALHOST.into(), port);
        let token = CancellationToken::new();
        let held = token.clone();
        if protocol == Protocol::Udp {
            let socket = bind_udp(address)?;
            tokio::spawn(async move {
                held.cancelled().await;
                drop(socket);
            });
        } else {
            let listener = bind(address)?;
            tokio::spawn(async move {
                held.cancelled().await;
                drop(listener);
            });
        }
        Ok(token)
    }

    async fn tcp_answers(port: u16) -> bool {
        tokio::net::TcpStream::connect((Ipv4Addr::LOCALHOST, port))
            .await
            .is_ok()
    }

    fn udp_bound(port: u16) -> bool {
        std::net::UdpSocket::bind((Ipv4Addr::LOCALHOST, port)).is_err()
    }

    #[tokio::test]
    async fn a_port_that_changes_protocol_is_reopened_as_the_new_kind() {
        // A free port number for both kinds.
        let port = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let mut open = HashMap::new();
        let tcp = HashSet::from([(port, Protocol::Tcp)]);
        assert_eq!(reconcile(&mut open, &tcp, open_real), 0);
        assert!(tcp_answers(port).await, "the TCP listener is open");
        assert!(!udp_bound(port));

        let udp = HashSet::from([(port, Protocol::Udp)]);
        assert_eq!(reconcile(&mut open, &udp, open_real), 0);
        assert_eq!(
            open.keys().copied().collect::<Vec<_>>(),
            [(port, Protocol::Udp)]
        );
        assert!(udp_bound(port), "a UDP socket is bound on the port");
        // The TCP listener's task drops it once it sees its cancellation.
        let mut closed = false;
        for _ in 0..100 {
            if !tcp_answers(port).await {
                closed = true;
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        assert!(closed, "the old TCP listener is closed");

        // Unchanged: nothing is reopened.
        let mut calls = 0;
        reconcile(&mut open, &udp, |_, _| {
            calls += 1;
            Ok(CancellationToken::new())
        });
        assert_eq!(calls, 0);
    }

    #[tokio::test]
    async fn an_import_port_on_the_ipv6_wildcard_takes_both_families() {
        if !ipv6_loopback() {
            return;
        }
        assert_eq!(
            default_address(IpAddr::V4(Ipv4Addr::UNSPECIFIED)),
            IpAddr::V6(Ipv6Addr::UNSPECIFIED)
        );
        let listener = bind(SocketAddr::new(
            default_address(Ipv4Addr::UNSPECIFIED.into()),
            0,
        ))
        .expect("binds");
        let port = listener.local_addr().expect("address").port();
        for client in [
            IpAddr::V4(Ipv4Addr::LOCALHOST),
            IpAddr::V6(Ipv6Addr::LOCALHOST),
        ] {
            let connected = tokio::net::TcpStream::connect((client, port));
            let (stream, accepted) = tokio::join!(connected, listener.accept());
            stream.unwrap_or_else(|e| panic!("{client} connects: {e}"));
            let (_, peer) = accepted.expect("accepted");
            assert_eq!(peer.ip().to_canonical(), client);
        }
        // A specific address is kept as it is.
        let specific = IpAddr::V4(Ipv4Addr::LOCALHOST);
        assert_eq!(default_address(specific), specific);
    }
}
