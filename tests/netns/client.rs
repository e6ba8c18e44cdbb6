//! Clients in pod namespaces: HTTP CONNECT to the cluster's gateway, or
//! plain dials as an unmodified pod makes them (the transparent path), the
//! backend's greeting, echoes, long-lived connections and a steady stream of
//! new connections whose every outcome is recorded.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::task::JoinHandle;

use super::sys;

const STEP: Duration = Duration::from_secs(10);

/// A backend's greeting: who answered, and the address that dialled it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Greeting {
    pub name: String,
    pub peer: IpAddr,
}

impl Greeting {
    fn parse(line: &str) -> Result<Greeting, String> {
        let (name, peer) = line
            .trim_end()
            .split_once(' ')
            .ok_or_else(|| format!("not a greeting: {line:?}"))?;
        Ok(Greeting {
            name: name.to_owned(),
            peer: peer
                .parse()
                .map_err(|e| format!("greeting {line:?}: {e}"))?,
        })
    }
}

/// What a CONNECT gave: the status, and on 200 the open stream and greeting.
pub struct Connected {
    pub status: u16,
    /// The error body when the status is not 200.
    pub body: String,
    pub stream: Option<BufReader<TcpStream>>,
    pub greeting: Option<Greeting>,
}

/// Sends `CONNECT authority` from namespace `ns` to the connect listener at
/// `gateway` and, on 200, reads the backend's greeting.
pub async fn connect(ns: &str, gateway: SocketAddr, authority: &str) -> Result<Connected, String> {
    let stream = sys::connect_in(ns, gateway, Duration::from_secs(3))
        .await
        .map_err(|e| format!("connect listener {gateway} from {ns}: {e}"))?;
    let exchange = async {
        let mut stream = BufReader::new(stream);
        let request = format!("CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n");
        stream
            .get_mut()
            .write_all(request.as_bytes())
            .await
            .map_err(|e| format!("send CONNECT: {e}"))?;
        let mut status_line = String::new();
        stream
            .read_line(&mut status_line)
            .await
            .map_err(|e| format!("status line: {e}"))?;
        let status = status_line
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| format!("no status in {status_line:?}"))?;
        let mut length = 0usize;
        loop {
            let mut line = String::new();
            let read = stream
                .read_line(&mut line)
                .await
                .map_err(|e| format!("header line: {e}"))?;
            if read == 0 || line == "\r\n" {
                break;
            }
            if let Some((name, value)) = line.trim_end().split_once(':')
                && name.eq_ignore_ascii_case("content-length")
            {
                length = value.trim().parse().unwrap_or(0);
            }
        }
        if status != 200 {
            let mut body = vec![0u8; length];
            let _ = stream.read_exact(&mut body).await;
            return Ok(Connected {
                status,
                body: String::from_utf8_lossy(&body).trim_end().to_owned(),
                stream: None,
                greeting: None,
            });
        }
        let mut line = String::new();
        stream
            .read_line(&mut line)
            .await
            .map_err(|e| format!("greeting: {e}"))?;
        Ok(Connected {
            status,
            body: String::new(),
            greeting: Some(Greeting::parse(&line)?),
            stream: Some(stream),
        })
    };
    tokio::time::timeout(STEP, exchange)
        .await
        .map_err(|_| format!("CONNECT {authority} via {gateway} timed out"))?
}

/// Dials a pod directly from namespace `ns`, without any gateway, and
/// reads its greeting.
pub async fn direct(ns: &str, pod: SocketAddr) -> Result<Greeting, String> {
    let stream = sys::connect_in(ns, pod, Duration::from_secs(2))
        .await
        .map_err(|e| format!("dial {pod} from {ns}: {e}"))?;
    let mut line = String::new();
    tokio::time::timeout(STEP, BufReader::new(stream).read_line(&mut line))
        .await
        .map_err(|_| format!("no greeting from {pod}"))?
        .map_err(|e| format!("greeting from {pod}: {e}"))?;
    Greeting::parse(&line)
}

/// Dials `address` from `ns` as an unmodified pod does: no proxy, no
/// CONNECT, just TCP to the address (a ClusterSetIP, say). Returns the
/// backend's greeting and the open stream.
pub async fn dial(
    ns: &str,
    address: SocketAddr,
) -> Result<(Greeting, BufReader<TcpStream>), String> {
    let stream = sys::connect_in(ns, address, Duration::from_secs(3))
        .await
        .map_err(|e| format!("dial {address} from {ns}: {e}"))?;
    let mut stream = BufReader::new(stream);
    let mut line = String::new();
    let read = tokio::time::timeout(STEP, stream.read_line(&mut line))
        .await
        .map_err(|_| format!("no greeting via {address}"))?
        .map_err(|e| format!("greeting via {address}: {e}"))?;
    if read == 0 {
        return Err(format!("{address} closed without a greeting"));
    }
    Ok((Greeting::parse(&line)?, stream))
}

/// One short plain connection: dial, greeting, a small echo, close.
pub async fn plain(ns: &str, address: SocketAddr) -> Result<Greeting, String> {
    let (greeting, stream) = dial(ns, address).await?;
    let payload = format!("hello from {ns}").into_bytes();
    let back = tokio::time::timeout(STEP, echo(stream, payload.clone()))
        .await
        .map_err(|_| "echo timed out".to_owned())??;
    if back == payload {
        Ok(greeting)
    } else {
        Err(format!("echo differs: {back:?}"))
    }
}

/// `count` sequential plain connections; every one must succeed.
pub async fn plain_many(
    ns: &str,
    address: SocketAddr,
    count: usize,
) -> Result<Vec<Greeting>, String> {
    let mut greetings = Vec::with_capacity(count);
    for index in 0..count {
        greetings.push(
            plain(ns, address)
                .await
                .map_err(|e| format!("connection {index}: {e}"))?,
        );
    }
    Ok(greetings)
}

/// A CONNECT that must succeed: the greeting and the open stream.
pub async fn open(
    ns: &str,
    gateway: SocketAddr,
    authority: &str,
) -> Result<(Greeting, BufReader<TcpStream>), String> {
    let connected = connect(ns, gateway, authority).await?;
    match (connected.greeting, connected.stream) {
        (Some(greeting), Some(stream)) => Ok((greeting, stream)),
        _ => Err(format!(
            "CONNECT {authority} via {gateway}: {} {}",
            connected.status, connected.body
        )),
    }
}

/// Writes `payload`, half-closes, and reads everything back.
pub async fn echo(stream: BufReader<TcpStream>, payload: Vec<u8>) -> Result<Vec<u8>, String> {
    let (mut read, mut write) = tokio::io::split(stream);
    let writer = tokio::spawn(async move {
        write
            .write_all(&payload)
            .await
            .map_err(|e| format!("write: {e}"))?;
        write
            .shutdown()
            .await
            .map_err(|e| format!("half-close: {e}"))
    });
    let mut received = Vec::new();
    read.read_to_end(&mut received)
        .await
        .map_err(|e| format!("read echo: {e}"))?;
    writer.await.map_err(|e| format!("writer: {e}"))??;
    Ok(received)
}

/// One short connection: CONNECT, greeting, a small echo, close.
pub async fn once(ns: &str, gateway: SocketAddr, authority: &str) -> Result<Greeting, String> {
    let (greeting, stream) = open(ns, gateway, authority).await?;
    let payload = format!("hello from {ns}").into_bytes();
    let back = tokio::time::timeout(STEP, echo(stream, payload.clone()))
        .await
        .map_err(|_| "echo timed out".to_owned())??;
    if back == payload {
        Ok(greeting)
    } else {
        Err(format!("echo differs: {back:?}"))
    }
}

/// `count` sequential short connections; every one must succeed.
pub async fn many(
    ns: &str,
    gateway: SocketAddr,
    authority: &str,
    count: usize,
) -> Result<Vec<Greeting>, String> {
    let mut greetings = Vec::with_capacity(count);
    for index in 0..count {
        greetings.push(
            once(ns, gateway, authority)
                .await
                .map_err(|e| format!("connection {index}: {e}"))?,
        );
    }
    Ok(greetings)
}

/// A connection kept open to show it survives what happens around it.
pub struct Held {
    pub greeting: Greeting,
    stream: BufReader<TcpStream>,
    sequence: u64,
}

impl Held {
    pub async fn open(ns: &str, gateway: SocketAddr, authority: &str) -> Result<Held, String> {
        let (greeting, stream) = open(ns, gateway, authority).await?;
        Ok(Held {
            greeting,
            stream,
            sequence: 0,
        })
    }

    /// A plain connection (see [`dial`]) kept open.
    pub async fn dial(ns: &str, address: SocketAddr) -> Result<Held, String> {
        let (greeting, stream) = dial(ns, address).await?;
        Ok(Held {
            greeting,
            stream,
            sequence: 0,
        })
    }

    /// The client's end of the connection, as the gateway sees it.
    pub fn local_address(&self) -> SocketAddr {
        self.stream
            .get_ref()
            .local_addr()
            .expect("a connected socket has a local address")
    }

    /// Sends a numbered line and checks that the same line comes back.
    pub async fn ping(&mut self) -> Result<(), String> {
        self.sequence += 1;
        let line = format!("ping {}\n", self.sequence);
        let exchange = async {
            self.stream
                .get_mut()
                .write_all(line.as_bytes())
                .await
                .map_err(|e| format!("write: {e}"))?;
            let mut back = String::new();
            let read = self
                .stream
                .read_line(&mut back)
                .await
                .map_err(|e| format!("read: {e}"))?;
            if read == 0 {
                return Err("closed".to_owned());
            }
            if back == line {
                Ok(())
            } else {
                Err(format!("echo {back:?} for {line:?}"))
            }
        };
        tokio::time::timeout(Duration::from_secs(5), exchange)
            .await
            .map_err(|_| format!("ping {} timed out", self.sequence))?
    }
}

/// The outcome of one connection of a [`Traffic`] loop.
#[derive(Debug, Clone)]
pub struct Sample {
    pub started: Instant,
    pub finished: Instant,
    pub result: Result<Greeting, String>,
}

/// New connections, one every `interval`, until stopped.
pub struct Traffic {
    stop: Arc<AtomicBool>,
    task: JoinHandle<Vec<Sample>>,
}

impl Traffic {
    pub fn start(ns: &str, gateway: SocketAddr, authority: &str, interval: Duration) -> Traffic {
        let stop = Arc::new(AtomicBool::new(false));
        let (flag, ns, authority) = (stop.clone(), ns.to_owned(), authority.to_owned());
        let task = tokio::spawn(async move {
            let mut samples = Vec::new();
            while !flag.load(Ordering::SeqCst) {
                let started = Instant::now();
                let result = once(&ns, gateway, &authority).await;
                samples.push(Sample {
                    started,
                    finished: Instant::now(),
                    result,
                });
                tokio::time::sleep(interval).await;
            }
            samples
        });
        Traffic { stop, task }
    }

    /// Stops the loop and returns every sample.
    pub async fn stop(self) -> Vec<Sample> {
        self.stop.store(true, Ordering::SeqCst);
        self.task.await.expect("the traffic task does not panic")
    }
}

/// Pings every held connection every `interval` until stopped; returns
/// each one, with the errors it saw.
pub struct Pinger {
    stop: Arc<AtomicBool>,
    task: JoinHandle<Vec<(Held, Vec<String>)>>,
}

impl Pinger {
    pub fn start(held: Vec<Held>, interval: Duration) -> Pinger {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let task = tokio::spawn(async move {
            let mut held: Vec<(Held, Vec<String>)> =
                held.into_iter().map(|h| (h, Vec::new())).collect();
            while !flag.load(Ordering::SeqCst) {
                for (connection, errors) in &mut held {
                    if errors.is_empty()
                        && let Err(error) = connection.ping().await
                    {
                        errors.push(error);
                    }
                }
                tokio::time::sleep(interval).await;
            }
            held
        });
        Pinger { stop, task }
    }

    pub async fn stop(self) -> Vec<(Held, Vec<String>)> {
        self.stop.store(true, Ordering::SeqCst);
        self.task.await.expect("the pinger task does not panic")
    }
}
