//! Binding a TCP listener: address reuse, so a port freed by a restart can
//! be bound again at once; on `::` both families (kube-proxy sends a
//! derived Service's IPv4 and IPv6 ClusterIPs to one port); and an accept
//! queue as long as the host allows (`net.core.somaxconn`), so a burst of
//! connections opened back to back waits in the queue instead of losing
//! its SYNs and waiting out a retransmission (1 s, then 3 s). tokio's own
//! `bind` asks for 128.

use std::io;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::sync::OnceLock;

use socket2::{Domain, Protocol, Socket, Type};
use tokio::net::TcpListener;

/// The accept queue asked for when the host's limit cannot be read; the
/// kernel caps it at `net.core.somaxconn` anyway.
const FALLBACK_BACKLOG: i32 = 4096;

/// The host's longest accept queue, `net.core.somaxconn`.
pub fn host_backlog() -> i32 {
    static BACKLOG: OnceLock<i32> = OnceLock::new();
    *BACKLOG.get_or_init(|| {
        std::fs::read_to_string("/proc/sys/net/core/somaxconn")
            .ok()
            .and_then(|text| text.trim().parse::<i32>().ok())
            .filter(|backlog| *backlog > 0)
            .unwrap_or(FALLBACK_BACKLOG)
    })
}

/// Binds a listener on `address` with the host's longest accept queue.
pub fn bind(address: SocketAddr) -> io::Result<TcpListener> {
    let socket = Socket::new(
        Domain::for_address(address),
        Type::STREAM,
        Some(Protocol::TCP),
    )?;
    if address.ip() == IpAddr::V6(Ipv6Addr::UNSPECIFIED) {
        socket.set_only_v6(false)?;
    }
    socket.set_reuse_address(true)?;
    socket.set_nonblocking(true)?;
    socket.bind(&address.into())?;
    socket.listen(host_backlog())?;
    TcpListener::from_std(socket.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_backlog_is_the_hosts() {
        let expected = std::fs::read_to_string("/proc/sys/net/core/somaxconn")
            .ok()
            .and_then(|text| text.trim().parse::<i32>().ok())
            .unwrap_or(FALLBACK_BACKLOG);
        assert_eq!(host_backlog(), expected);
        assert!(host_backlog() > 128, "longer than tokio's own 128");
    }
}
