//! Gateway replicas as real `strait run` processes inside their namespaces
//! (`ip netns exec NS strait run …`), and their admin endpoints read from
//! inside the same namespace.

use std::collections::BTreeSet;
use std::fs::File;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::sys;

pub const CONNECT_PORT: u16 = 15001;
pub const TUNNEL_PORT: u16 = 15008;
pub const ADMIN_PORT: u16 = 15021;

/// One `strait run` process and how to start it again.
pub struct GatewayProcess {
    /// `c3g1`: cluster and replica.
    pub name: String,
    pub namespace: String,
    /// The connect listener, where the cluster's pods send CONNECT.
    pub connect: SocketAddr,
    /// The admin listener, reachable from inside `namespace` only.
    pub admin: SocketAddr,
    args: Vec<String>,
    log: PathBuf,
    child: Option<Child>,
}

/// Where and as whom one gateway runs.
pub struct GatewaySpec<'a> {
    pub name: String,
    pub namespace: String,
    pub cluster: &'a str,
    pub config: &'a Path,
    pub tls_dir: PathBuf,
    pub connect: SocketAddr,
    pub tunnel: SocketAddr,
    pub admin: SocketAddr,
    pub log_dir: &'a Path,
}

impl GatewayProcess {
    /// Describes the process; [`GatewayProcess::start`] runs it.
    pub fn new(spec: GatewaySpec<'_>) -> GatewayProcess {
        let args = vec![
            "run".to_owned(),
            "--config".to_owned(),
            spec.config.display().to_string(),
            "--cluster".to_owned(),
            spec.cluster.to_owned(),
            "--connect-listen".to_owned(),
            spec.connect.to_string(),
            "--tunnel-listen".to_owned(),
            spec.tunnel.to_string(),
            "--admin-listen".to_owned(),
            spec.admin.to_string(),
            "--tls-dir".to_owned(),
            spec.tls_dir.display().to_string(),
            "--drain-timeout".to_owned(),
            "5s".to_owned(),
        ];
        GatewayProcess {
            log: spec.log_dir.join(format!("{}.log", spec.name)),
            name: spec.name,
            namespace: spec.namespace,
            connect: spec.connect,
            admin: spec.admin,
            args,
            child: None,
        }
    }

    /// The usual listeners of a replica: connect on its pod-side address,
    /// tunnel on its WAN address, admin on the namespace's loopback.
    pub fn addresses(pod_side: Ipv4Addr, wan: Ipv4Addr) -> (SocketAddr, SocketAddr, SocketAddr) {
        (
            SocketAddr::from((pod_side, CONNECT_PORT)),
            SocketAddr::from((wan, TUNNEL_PORT)),
            SocketAddr::from((Ipv4Addr::LOCALHOST, ADMIN_PORT)),
        )
    }

    /// Starts the process (appending to its log) without waiting for it.
    pub fn spawn(&mut self) -> Result<(), String> {
        if self.child.is_some() {
            return Err(format!("{} is already running", self.name));
        }
        let log = File::options()
            .create(true)
            .append(true)
            .open(&self.log)
            .map_err(|e| format!("{}: {e}", self.log.display()))?;
        let log_err = log
            .try_clone()
            .map_err(|e| format!("{}: {e}", self.log.display()))?;
        let child = Command::new("ip")
            .args([
                "netns",
                "exec",
                &self.namespace,
                env!("CARGO_BIN_EXE_strait"),
            ])
            .args(&self.args)
            .env("RUST_LOG", "info")
            // One JSON object per line: the span tests read them.
            .env("STRAIT_LOG_FORMAT", "json")
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err)
            .spawn()
            .map_err(|e| format!("starting {}: {e}", self.name))?;
        self.child = Some(child);
        Ok(())
    }

    /// Starts the process and waits until `/readyz` answers 200.
    pub async fn start(&mut self) -> Result<(), String> {
        self.spawn()?;
        self.wait_ready(Duration::from_secs(15)).await
    }

    /// Polls `/readyz` until it answers 200; fails early if the process exits.
    pub async fn wait_ready(&mut self, deadline: Duration) -> Result<(), String> {
        let started = Instant::now();
        loop {
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                self.child = None;
                return Err(format!(
                    "{} exited ({status}) before it was ready:\n{}",
                    self.name,
                    self.log_tail(20)
                ));
            }
            if let Ok((200, _)) = self.get("/readyz").await {
                return Ok(());
            }
            if started.elapsed() > deadline {
                return Err(format!(
                    "{} not ready after {deadline:?}:\n{}",
                    self.name,
                    self.log_tail(20)
                ));
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// The process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// SIGKILL, as a crash or an OOM kill would end it.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Lets the process run on after this handle is gone (STRAIT_KEEP_NETNS).
    pub fn detach(&mut self) {
        self.child.take();
    }

    /// Every JSON line of the process's log, parsed (other lines skipped).
    pub fn log_lines(&self) -> Vec<serde_json::Value> {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        text.lines()
            .filter_map(|line| serde_json::from_str(line).ok())
            .collect()
    }

    /// The last `lines` lines of the process's log.
    pub fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// Reads and parses `/metrics`.
    pub async fn metrics(&self) -> Result<Scrape, String> {
        match self.get("/metrics").await {
            Ok((200, body)) => Ok(Scrape::parse(&body)),
            Ok((status, body)) => Err(format!("{} /metrics: {status} {body}", self.name)),
            Err(error) => Err(format!("{} /metrics: {error}", self.name)),
        }
    }

    /// The backends of every route in `/debug/routes`, one string each:
    /// `app/echo:42=c3/10.10.0.12:8080`.
    pub async fn backends(&self) -> Result<BTreeSet<String>, String> {
        let (status, body) = self.get("/debug/routes").await?;
        if status != 200 {
            return Err(format!("{} /debug/routes: {status} {body}", self.name));
        }
        let routes: serde_json::Value =
            serde_json::from_str(&body).map_err(|e| format!("/debug/routes: {e}"))?;
        let mut backends = BTreeSet::new();
        for route in routes.as_array().into_iter().flatten() {
            let service = format!(
                "{}:{}",
                route["service"].as_str().unwrap_or("?"),
                route["port"]
            );
            for backend in route["backends"].as_array().into_iter().flatten() {
                backends.insert(format!(
                    "{service}={}/{}:{}",
                    backend["cluster"].as_str().unwrap_or("?"),
                    backend["address"].as_str().unwrap_or("?"),
                    backend["port"]
                ));
            }
        }
        Ok(backends)
    }

    /// A plain HTTP/1.0 GET to the admin listener from inside the namespace.
    async fn get(&self, path: &str) -> Result<(u16, String), String> {
        let exchange = async {
            let mut stream = sys::connect_in(&self.namespace, self.admin, Duration::from_secs(2))
                .await
                .map_err(|e| e.to_string())?;
            let request = format!("GET {path} HTTP/1.0\r\nHost: admin\r\n\r\n");
            stream
                .write_all(request.as_bytes())
                .await
                .map_err(|e| e.to_string())?;
            let mut response = Vec::new();
            stream
                .read_to_end(&mut response)
                .await
                .map_err(|e| e.to_string())?;
            parse_response(&response)
        };
        tokio::time::timeout(Duration::from_secs(5), exchange)
            .await
            .map_err(|_| format!("GET {path} timed out"))?
    }
}

impl Drop for GatewayProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

fn parse_response(raw: &[u8]) -> Result<(u16, String), String> {
    let text = String::from_utf8_lossy(raw);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("no end of headers in {text:?}"))?;
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("no status in {head:?}"))?;
    let chunked = head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked");
    Ok((
        status,
        if chunked {
            dechunk(body)
        } else {
            body.to_owned()
        },
    ))
}

fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let size = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if size == 0 || rest.len() < size {
            break;
        }
        out.push_str(&rest[..size]);
        body = rest[size..].trim_start_matches("\r\n");
    }
    out
}

/// A sample's labels, as (name, value) pairs.
type Labels = Vec<(String, String)>;

/// One scrape of a gateway's Prometheus text.
pub struct Scrape {
    samples: Vec<(String, Labels, f64)>,
}

impl Scrape {
    pub fn parse(text: &str) -> Scrape {
        let mut samples = Vec::new();
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let Some((series, value)) = line.rsplit_once(' ') else {
                continue;
            };
            let Ok(value) = value.parse::<f64>() else {
                continue;
            };
            let (name, labels) = match series.split_once('{') {
                Some((name, rest)) => (name, rest.trim_end_matches('}')),
                None => (series, ""),
            };
            let labels = labels
                .split(',')
                .filter_map(|pair| pair.split_once('='))
                .map(|(k, v)| (k.to_owned(), v.trim_matches('"').to_owned()))
                .collect();
            samples.push((name.to_owned(), labels, value));
        }
        Scrape { samples }
    }

    /// The sum of every sample of `name` whose labels include `labels`.
    pub fn sum(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.samples
            .iter()
            .filter(|(n, _, _)| n == name)
            .filter(|(_, have, _)| {
                labels
                    .iter()
                    .all(|(k, v)| have.iter().any(|(hk, hv)| hk == k && hv == v))
            })
            .map(|(_, _, value)| value)
            .sum()
    }

    /// `strait_connections_opened_total` for one path.
    pub fn opened(&self, path: &str) -> f64 {
        self.sum("strait_connections_opened_total", &[("path", path)])
    }
}
