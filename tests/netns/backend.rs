//! Pods: echo servers whose listening socket lives in a pod namespace. Each
//! greets with its own identity and the address that dialled it
//! (`c3-pod1 10.10.0.231\n`), then echoes every byte back, so a client
//! learns which pod answered and by which hop it arrived. A pod may be an
//! HTTP responder instead, for clients that speak HTTP (curl).

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
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
    /// Reads a PROXY protocol v2 header first and records what it says,
    /// then greets and echoes.
    Told,
}

/// What a PROXY protocol v2 header told a pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Told {
    /// The original client.
    pub source: SocketAddr,
    /// TLV 0xE0: the caller's cluster.
    pub cluster: String,
    /// TLV 0xE1: the SPIFFE identity of the caller's gateway.
    pub gateway: String,
}

/// One running pod server.
pub struct Backend {
    peers: Arc<Mutex<Vec<IpAddr>>>,
    /// Each header a `Told` pod read, or why it read none.
    told: Arc<Mutex<Vec<Result<Told, String>>>>,
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

    /// A pod whose port speaks the PROXY protocol: every connection must
    /// start with a v2 header, which it records (see [`Backend::told`]).
    pub fn start_told(name: &str, ns: &str, address: SocketAddr) -> Result<Backend, String> {
        Self::listen(name, ns, address, Speaks::Told)
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
        let told = Arc::new(Mutex::new(Vec::new()));
        let (task_peers, task_told, identity) = (peers.clone(), told.clone(), name.to_owned());
        let task = tokio::spawn(async move {
            while let Ok((stream, peer)) = listener.accept().await {
                let _ = stream.set_nodelay(true);
                if let Ok(mut seen) = task_peers.lock() {
                    seen.push(peer.ip());
                }
                let greeting = format!("{identity} {}", peer.ip());
                let told = task_told.clone();
                tokio::spawn(async move {
                    match speaks {
                        Speaks::Echo => echo(stream, greeting).await,
                        Speaks::Http => http(stream, greeting).await,
                        Speaks::Told => {
                            let mut stream = stream;
                            let header = read_header(&mut stream).await;
                            let ok = header.is_ok();
                            if let Ok(mut seen) = told.lock() {
                                seen.push(header);
                            }
                            if ok {
                                echo(stream, greeting).await;
                            }
                        }
                    }
                });
            }
        });
        Ok(Backend { peers, told, task })
    }

    /// What each connection's PROXY header said, in order (a `Told` pod).
    pub fn told(&self) -> Vec<Result<Told, String>> {
        self.told.lock().map(|t| t.clone()).unwrap_or_default()
    }

    /// How many connections it accepted.
    pub fn accepted(&self) -> usize {
        self.peers.lock().map(|p| p.len()).unwrap_or(0)
    }
}

/// Reads and parses the PROXY protocol v2 header a connection must start
/// with (a 16-byte fixed part whose last two bytes give the rest's length).
async fn read_header(stream: &mut TcpStream) -> Result<Told, String> {
    let read = async {
        let mut header = vec![0u8; 16];
        stream
            .read_exact(&mut header)
            .await
            .map_err(|e| format!("no header: {e}"))?;
        let rest = usize::from(u16::from_be_bytes([header[14], header[15]]));
        header.resize(16 + rest, 0);
        stream
            .read_exact(&mut header[16..])
            .await
            .map_err(|e| format!("a short header: {e}"))?;
        Ok::<_, String>(header)
    };
    let bytes = tokio::time::timeout(Duration::from_secs(5), read)
        .await
        .map_err(|_| "no header within 5 s".to_owned())??;
    let header = ppp::v2::Header::try_from(bytes.as_slice())
        .map_err(|e| format!("not a PROXY v2 header ({e}): {bytes:?}"))?;
    let source = match header.addresses {
        ppp::v2::Addresses::IPv4(ip) => SocketAddr::from((ip.source_address, ip.source_port)),
        ppp::v2::Addresses::IPv6(ip) => SocketAddr::from((ip.source_address, ip.source_port)),
        other => return Err(format!("addresses {other:?}")),
    };
    let mut told = Told {
        source,
        cluster: String::new(),
        gateway: String::new(),
    };
    for tlv in header.tlvs() {
        let tlv = tlv.map_err(|e| format!("a bad TLV: {e}"))?;
        let text = String::from_utf8_lossy(&tlv.value).into_owned();
        match tlv.kind {
            0xE0 => told.cluster = text,
            0xE1 => told.gateway = text,
            _ => {}
        }
    }
    Ok(told)
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
