//! Clients and the echo backend: the in-process echo server, how a scenario's
//! client opens a connection ([`Target`]: plain TCP, or `CONNECT` through a
//! Strait gateway), a small echo and a clean close.

use crate::AUTHORITY;
use crate::ECHO_BUFFER;
use crate::Result;
use std::net::SocketAddr;
use tokio::io::AsyncReadExt;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;
use tokio::net::TcpStream;

/// An echo server: every byte back, with a buffer that grows from 4 KiB to
/// `ECHO_BUFFER` once a read fills it, so bulk flows move in large reads and
/// idle connections stay small.
pub(crate) async fn start_echo_backend(address: SocketAddr) -> Result<SocketAddr> {
    let listener = TcpListener::bind(address)
        .await
        .map_err(|e| format!("cannot bind the echo backend on {address}: {e}"))?;
    let address = listener
        .local_addr()
        .map_err(|e| format!("echo backend address: {e}"))?;
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(echo_connection(stream));
        }
    });
    Ok(address)
}

pub(crate) async fn echo_connection(stream: TcpStream) {
    let _ = stream.set_nodelay(true);
    let (mut read, mut write) = stream.into_split();
    let mut buffer = vec![0u8; 4096];
    loop {
        let n = match read.read(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if write.write_all(&buffer[..n]).await.is_err() {
            return;
        }
        if n == buffer.len() && buffer.len() < ECHO_BUFFER {
            buffer.resize(ECHO_BUFFER, 0);
        }
    }
    let _ = write.shutdown().await;
}

/// How a scenario's client reaches the echo backend.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Target {
    /// Plain TCP to this address: the backend itself, or an HAProxy frontend.
    Tcp(SocketAddr),
    /// `CONNECT echo.app.svc.clusterset.local:42` to a Strait gateway's
    /// connect listener at this address; the stream once it answered 200.
    Connect(SocketAddr),
}

impl Target {
    /// A connection to the backend through this target (`TCP_NODELAY` set).
    pub(crate) async fn open(self) -> Result<TcpStream> {
        match self {
            Target::Tcp(address) => {
                let stream = TcpStream::connect(address)
                    .await
                    .map_err(|e| format!("cannot connect to {address}: {e}"))?;
                let _ = stream.set_nodelay(true);
                Ok(stream)
            }
            Target::Connect(gateway) => connect_through(gateway, AUTHORITY).await,
        }
    }
}

/// `CONNECT authority` to a gateway's connect listener; the open stream on 200.
pub(crate) async fn connect_through(gateway: SocketAddr, authority: &str) -> Result<TcpStream> {
    let mut stream = TcpStream::connect(gateway)
        .await
        .map_err(|e| format!("cannot reach the connect listener {gateway}: {e}"))?;
    let _ = stream.set_nodelay(true);
    let request = format!("CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n");
    stream
        .write_all(request.as_bytes())
        .await
        .map_err(|e| format!("cannot send CONNECT to {gateway}: {e}"))?;
    // Byte by byte up to the blank line, so nothing after the head is consumed.
    let mut head = Vec::with_capacity(128);
    while !head.ends_with(b"\r\n\r\n") {
        if head.len() > 8192 {
            return Err(format!(
                "CONNECT response from {gateway} has no end of head"
            ));
        }
        let byte = stream
            .read_u8()
            .await
            .map_err(|e| format!("reading the CONNECT response from {gateway}: {e}"))?;
        head.push(byte);
    }
    let head = String::from_utf8_lossy(&head);
    let status = head.split_whitespace().nth(1).unwrap_or_default();
    if status != "200" {
        return Err(format!(
            "CONNECT {authority} via {gateway} answered {:?}",
            head.lines().next().unwrap_or_default()
        ));
    }
    Ok(stream)
}

/// One small echo.
pub(crate) async fn ping(stream: &mut TcpStream) -> Result<()> {
    stream
        .write_all(b"ping")
        .await
        .map_err(|e| format!("cannot write to the echo connection: {e}"))?;
    let mut answer = [0u8; 4];
    stream
        .read_exact(&mut answer)
        .await
        .map_err(|e| format!("no echo: {e}"))?;
    if &answer != b"ping" {
        return Err(format!("echo answered {answer:?} instead of \"ping\""));
    }
    Ok(())
}

/// Half-closes and waits for the other side to finish: a clean close.
pub(crate) async fn close(mut stream: TcpStream) -> Result<()> {
    stream
        .shutdown()
        .await
        .map_err(|e| format!("cannot half-close: {e}"))?;
    let mut rest = Vec::new();
    stream
        .read_to_end(&mut rest)
        .await
        .map_err(|e| format!("closing: {e}"))?;
    Ok(())
}
