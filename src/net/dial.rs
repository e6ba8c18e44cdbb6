//! Dialling a TCP peer (a backend pod or a peer gateway) with a timeout and
//! the socket options every proxied connection wants.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use socket2::{SockRef, TcpKeepalive};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpSocket, TcpStream};

/// Keep-alive probes find peers that vanished without a FIN (a node lost,
/// a NAT entry expired) long before an idle timeout would.
const KEEPALIVE_TIME: Duration = Duration::from_secs(60);
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(15);
const KEEPALIVE_RETRIES: u32 = 4;

#[derive(Debug, thiserror::Error)]
pub enum DialError {
    #[error("dial {address} timed out after {timeout:?}")]
    Timeout {
        address: SocketAddr,
        timeout: Duration,
    },
    #[error("dial {address} refused: {source}")]
    Refused {
        address: SocketAddr,
        source: io::Error,
    },
    #[error("dial {address} failed: {source}")]
    Failed {
        address: SocketAddr,
        source: io::Error,
    },
    #[error("writing the PROXY protocol header to {address} failed: {source}")]
    ProxyHeader {
        address: SocketAddr,
        source: io::Error,
    },
}

impl DialError {
    pub fn is_timeout(&self) -> bool {
        matches!(self, DialError::Timeout { .. })
    }
}

/// How outgoing connections are made.
#[derive(Debug, Clone, Copy)]
pub struct DialOptions {
    pub timeout: Duration,
    /// Source address for outgoing connections (the gateway's own address on
    /// hosts with several); the kernel picks when `None`.
    pub source: Option<IpAddr>,
}

/// Connects to `address` within the timeout, with TCP_NODELAY and keep-alive.
pub async fn dial(address: SocketAddr, options: DialOptions) -> Result<TcpStream, DialError> {
    let failed = |source: io::Error| {
        if source.kind() == io::ErrorKind::ConnectionRefused {
            DialError::Refused { address, source }
        } else {
            DialError::Failed { address, source }
        }
    };
    let socket = if address.is_ipv4() {
        TcpSocket::new_v4()
    } else {
        TcpSocket::new_v6()
    }
    .map_err(failed)?;
    if let Some(source) = options.source.filter(|s| s.is_ipv4() == address.is_ipv4()) {
        socket.bind(SocketAddr::new(source, 0)).map_err(failed)?;
    }
    socket.set_nodelay(true).map_err(failed)?;
    let keepalive = TcpKeepalive::new()
        .with_time(KEEPALIVE_TIME)
        .with_interval(KEEPALIVE_INTERVAL)
        .with_retries(KEEPALIVE_RETRIES);
    SockRef::from(&socket)
        .set_tcp_keepalive(&keepalive)
        .map_err(failed)?;
    match tokio::time::timeout(options.timeout, socket.connect(address)).await {
        Ok(Ok(stream)) => Ok(stream),
        Ok(Err(error)) => Err(failed(error)),
        Err(_) => Err(DialError::Timeout {
            address,
            timeout: options.timeout,
        }),
    }
}

/// Applies the same options to an accepted connection.
pub fn tune_accepted(stream: &TcpStream) -> io::Result<()> {
    tune(SockRef::from(stream))
}

/// Applies the options to a listening socket instead: Linux copies them to
/// every connection it accepts, which saves five system calls per
/// connection. [`crate::net::accept::accept_until`] falls back to
/// [`tune_accepted`] when this fails.
pub fn tune_listener(listener: &TcpListener) -> io::Result<()> {
    tune(SockRef::from(listener))
}

fn tune(socket: SockRef<'_>) -> io::Result<()> {
    socket.set_tcp_nodelay(true)?;
    let keepalive = TcpKeepalive::new()
        .with_time(KEEPALIVE_TIME)
        .with_interval(KEEPALIVE_INTERVAL)
        .with_retries(KEEPALIVE_RETRIES);
    socket.set_tcp_keepalive(&keepalive)
}

/// Dials `address` like [`dial`], then writes `header` (a PROXY protocol
/// header) before anything else goes on the connection. A fresh socket's
/// send buffer takes it at once; only a backend that reset already fails.
pub async fn dial_announced(
    address: SocketAddr,
    options: DialOptions,
    header: Option<&[u8]>,
) -> Result<TcpStream, DialError> {
    let mut stream = dial(address, options).await?;
    if let Some(header) = header {
        stream
            .write_all(header)
            .await
            .map_err(|source| DialError::ProxyHeader { address, source })?;
    }
    Ok(stream)
}

#[cfg(test)]
mod tests {
    use super::*;

    const OPTIONS: DialOptions = DialOptions {
        timeout: Duration::from_secs(2),
        source: None,
    };

    #[tokio::test]
    async fn dials_a_listener_with_nodelay() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let address = listener.local_addr().expect("addr");
        let stream = dial(address, OPTIONS).await.expect("dial");
        assert!(stream.nodelay().expect("nodelay"));
        assert!(SockRef::from(&stream).keepalive().expect("keepalive"));
    }

    #[tokio::test]
    async fn accepted_connections_inherit_the_listeners_options() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        tune_listener(&listener).expect("tune");
        let address = listener.local_addr().expect("addr");
        let _client = TcpStream::connect(address).await.expect("connect");
        let (accepted, _) = listener.accept().await.expect("accept");
        let socket = SockRef::from(&accepted);
        assert!(accepted.nodelay().expect("nodelay"));
        assert!(socket.keepalive().expect("keepalive"));
        assert_eq!(socket.tcp_keepalive_time().expect("idle"), KEEPALIVE_TIME);
        assert_eq!(
            socket.tcp_keepalive_interval().expect("interval"),
            KEEPALIVE_INTERVAL
        );
        assert_eq!(
            socket.tcp_keepalive_retries().expect("retries"),
            KEEPALIVE_RETRIES
        );
    }

    #[tokio::test]
    async fn a_closed_port_is_refused() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let address = listener.local_addr().expect("addr");
        drop(listener);
        let error = dial(address, OPTIONS).await.expect_err("nothing listens");
        assert!(matches!(error, DialError::Refused { .. }), "{error}");
    }
}
