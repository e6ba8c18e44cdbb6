//! Demo pods: small servers on loopback that say who they are. A client that
//! speaks HTTP (curl through the CONNECT listener) gets an HTTP answer; any
//! other client gets a greeting line and then an echo of what it sends.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// How long a pod waits for the client to speak first.
const FIRST_BYTES_WAIT: Duration = Duration::from_millis(300);

/// Starts a pod named `name` on `listener`.
pub(super) fn spawn(listener: TcpListener, name: String) {
    tokio::spawn(async move {
        while let Ok((stream, peer)) = listener.accept().await {
            tokio::spawn(serve(stream, peer, name.clone()));
        }
    });
}

async fn serve(mut stream: TcpStream, peer: SocketAddr, name: String) {
    let greeting = format!("{name} dialled-by {}\n", peer.ip());
    let mut first = vec![0u8; 4096];
    let read = match tokio::time::timeout(FIRST_BYTES_WAIT, stream.read(&mut first)).await {
        Ok(Ok(read)) => read,
        Ok(Err(_)) => return,
        Err(_) => 0,
    };
    first.truncate(read);
    let http = ["GET ", "HEAD ", "POST ", "PUT "]
        .iter()
        .any(|method| first.starts_with(method.as_bytes()));
    if http {
        let response = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{greeting}",
            greeting.len()
        );
        let _ = stream.write_all(response.as_bytes()).await;
        let _ = stream.shutdown().await;
        return;
    }
    if stream.write_all(greeting.as_bytes()).await.is_err()
        || stream.write_all(&first).await.is_err()
    {
        return;
    }
    let (mut read, mut write) = stream.split();
    let _ = tokio::io::copy(&mut read, &mut write).await;
    let _ = write.shutdown().await;
}
