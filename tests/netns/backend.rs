//! Pods: echo servers whose listening socket lives in a pod namespace. Each
//! greets with its own identity and the address that dialled it
//! (`c3-pod1 10.10.0.231\n`), then echoes every byte back, so a client
//! learns which pod answered and by which hop it arrived. A pod may be an
//! HTTP responder instead, for clients that speak HTTP (curl).

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::task::JoinHandle;

use super::sys;

/// The port every pod listens on (the Services' target port).
pub const POD_PORT: u16 = 8080;

/// What a pod says to each connection.
#[derive(Clone, Copy)]
enum Speaks {
    /// The greeting line, then an echo of every byte.
    Echo,
    /// One HTTP/1.1 answer to one request, then close.
    Http,
}

/// One running pod server.
pub struct Backend {
    peers: Arc<Mutex<Vec<IpAddr>>>,
    task: JoinHandle<()>,
}

impl Backend {
    /// An echo server on `address` inside namespace `ns`. Call from a
    /// tokio runtime.
    pub fn start(name: &str, ns: &str, address: SocketAddr) -> Result<Backend, String> {
        Self::listen(name, ns, address, Speaks::Echo)
    }

    /// An HTTP responder on `address` inside `ns`: to any request it
    /// answers `200 OK` with a `text/plain` body of three lines, the
    /// greeting (`c3-pod1 10.10.0.231`), the request line as it arrived
    /// and its `host:` header (`host: 10.96.0.80`).
    pub fn start_http(name: &str, ns: &str, address: SocketAddr) -> Result<Backend, String> {
        Self::listen(name, ns, address, Speaks::Http)
    }

    fn listen(
        name: &str,
        ns: &str,
        address: SocketAddr,
        speaks: Speaks,
    ) -> Result<Backend, String> {
        let listener = sys::listen_in(ns, address)
            .map_err(|e| format!("backend {name} cannot listen on {address} in {ns}: {e}"))?;
        let peers = Arc::new(Mutex::new(Vec::new()));
        let (task_peers, identity) = (peers.clone(), name.to_owned());
        let task = tokio::spawn(async move {
            while let Ok((stream, peer)) = listener.accept().await {
                let _ = stream.set_nodelay(true);
                if let Ok(mut seen) = task_peers.lock() {
                    seen.push(peer.ip());
                }
                let greeting = format!("{identity} {}", peer.ip());
                tokio::spawn(async move {
                    match speaks {
                        Speaks::Echo => echo(stream, greeting).await,
                        Speaks::Http => http(stream, greeting).await,
                    }
                });
            }
        });
        Ok(Backend { peers, task })
    }

    /// How many connections it accepted.
    pub fn accepted(&self) -> usize {
        self.peers.lock().map(|p| p.len()).unwrap_or(0)
    }
}

async fn echo(mut stream: TcpStream, greeting: String) {
    if stream
        .write_all(format!("{greeting}\n").as_bytes())
        .await
        .is_err()
    {
        return;
    }
    let (mut read, mut write) = stream.split();
    let _ = tokio::io::copy(&mut read, &mut write).await;
    let _ = write.shutdown().await;
}

async fn http(stream: TcpStream, greeting: String) {
    let mut stream = BufReader::new(stream);
    let head = async {
        let (mut request, mut host) = (String::new(), String::new());
        for index in 0..100 {
            let mut line = String::new();
            if stream.read_line(&mut line).await.ok()? == 0 {
                return None;
            }
            let line = line.trim_end();
            if line.is_empty() {
                return Some((request, host));
            }
            if index == 0 {
                request = line.to_owned();
            } else if let Some((name, value)) = line.split_once(':')
                && name.eq_ignore_ascii_case("host")
            {
                host = value.trim().to_owned();
            }
        }
        None
    };
    let Ok(Some((request, host))) = tokio::time::timeout(Duration::from_secs(10), head).await
    else {
        return;
    };
    let body = format!("{greeting}\n{request}\nhost: {host}\n");
    let answer = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    );
    let stream = stream.get_mut();
    if stream.write_all(answer.as_bytes()).await.is_ok() {
        let _ = stream.shutdown().await;
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        self.task.abort();
    }
}
