//! The proxy processes: `strait run` gateways and `haproxy -db` processes as
//! children (killed on drop, also when unwinding), their logs, and waiting
//! until they are ready and a scenario's route works end to end.

use crate::GatewaySpec;
use crate::Result;
use crate::clients::{Target, close, ping};
use crate::topology::GatewayPorts;
use std::net::SocketAddr;
use std::path::Path;
use std::path::PathBuf;
use std::process::Child;
use std::process::Command;
use std::process::Stdio;
use std::time::Duration;
use std::time::Instant;
use tokio::io::AsyncReadExt;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

/// Strait's log filter unless `RUST_LOG` is set: lifecycle lines, but not the
/// one access line per connection (HAProxy logs nothing here either).
const STRAIT_LOG: &str = "info,strait::access=off";

pub(crate) struct Proxy {
    pub(crate) name: &'static str,
    pub(crate) child: Child,
    /// Where clients connect: Strait's CONNECT listener or HAProxy's frontend.
    pub(crate) entry: SocketAddr,
    /// Strait's admin listener (`GET /readyz`); HAProxy has none here.
    pub(crate) admin: Option<SocketAddr>,
    pub(crate) log: PathBuf,
}

/// The running proxies; dropping this kills them.
#[derive(Default)]
pub(crate) struct Proxies {
    pub(crate) children: Vec<Proxy>,
}

fn log_files(dir: &Path, name: &str) -> Result<(PathBuf, std::fs::File, std::fs::File)> {
    let log = dir.join(format!("{name}.log"));
    let file =
        std::fs::File::create(&log).map_err(|e| format!("cannot create {}: {e}", log.display()))?;
    let stderr = file
        .try_clone()
        .map_err(|e| format!("cannot duplicate a log handle: {e}"))?;
    Ok((log, file, stderr))
}

impl Proxies {
    /// `strait run` with `threads` tokio workers (`TOKIO_WORKER_THREADS`).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn spawn_strait(
        &mut self,
        binary: &Path,
        dir: &Path,
        config: &Path,
        certs: &Path,
        spec: &GatewaySpec,
        ports: &GatewayPorts,
        threads: usize,
    ) -> Result<()> {
        let (log, stdout, stderr) = log_files(dir, spec.name)?;
        let child = Command::new(binary)
            .arg("run")
            .arg("--config")
            .arg(config)
            .args(["--cluster", spec.cluster])
            .arg("--connect-listen")
            .arg(ports.connect.to_string())
            .arg("--tunnel-listen")
            .arg(ports.tunnel.to_string())
            .arg("--admin-listen")
            .arg(ports.admin.to_string())
            .arg("--tls-dir")
            .arg(certs.join(spec.cluster))
            .env("TOKIO_WORKER_THREADS", threads.to_string())
            .env(
                "RUST_LOG",
                std::env::var("RUST_LOG").unwrap_or_else(|_| STRAIT_LOG.to_owned()),
            )
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr)
            .spawn()
            .map_err(|e| format!("cannot start {} run: {e}", binary.display()))?;
        self.children.push(Proxy {
            name: spec.name,
            child,
            entry: ports.connect,
            admin: Some(ports.admin),
            log,
        });
        Ok(())
    }

    /// `haproxy -db -f CONFIG`: in the foreground, one process (no master),
    /// whose threads (`nbthread` in the configuration) do all the work.
    pub(crate) fn spawn_haproxy(
        &mut self,
        binary: &Path,
        dir: &Path,
        name: &'static str,
        config: &Path,
        entry: SocketAddr,
    ) -> Result<()> {
        let (log, stdout, stderr) = log_files(dir, name)?;
        let child = Command::new(binary)
            .arg("-db")
            .arg("-f")
            .arg(config)
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr)
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", binary.display()))?;
        self.children.push(Proxy {
            name,
            child,
            entry,
            admin: None,
            log,
        });
        Ok(())
    }

    pub(crate) fn get(&self, name: &str) -> &Proxy {
        self.children
            .iter()
            .find(|p| p.name == name)
            .expect("a started proxy")
    }

    /// (name, pid) of every proxy, for CPU accounting.
    pub(crate) fn pids(&self) -> Vec<(String, u32)> {
        self.children
            .iter()
            .map(|p| (p.name.to_owned(), p.child.id()))
            .collect()
    }

    /// An error if any proxy has exited, with the end of its log.
    pub(crate) fn check_alive(&mut self) -> Result<()> {
        for proxy in &mut self.children {
            if let Ok(Some(status)) = proxy.child.try_wait() {
                return Err(format!(
                    "{} exited ({status}); end of {}:\n{}",
                    proxy.name,
                    proxy.log.display(),
                    log_tail(&proxy.log)
                ));
            }
        }
        Ok(())
    }

    pub(crate) fn logs(&self) -> String {
        self.logs_of(|_| true)
    }

    pub(crate) fn logs_of(&self, wanted: impl Fn(&str) -> bool) -> String {
        self.children
            .iter()
            .filter(|p| wanted(p.name))
            .map(|p| {
                format!(
                    "--- end of {} ({}):\n{}\n",
                    p.name,
                    p.log.display(),
                    log_tail(&p.log)
                )
            })
            .collect()
    }
}

impl Drop for Proxies {
    fn drop(&mut self) {
        for proxy in &mut self.children {
            let _ = proxy.child.kill();
            let _ = proxy.child.wait();
        }
    }
}

/// The last lines of a proxy's log, without routine lines (route reloads,
/// access lines) that would otherwise fill it.
pub(crate) fn log_tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text
        .lines()
        .filter(|line| !line.contains("routes reloaded") && !line.contains("strait::access"))
        .collect();
    strip_ansi(&lines[lines.len().saturating_sub(12)..].join("\n"))
}

/// The text without terminal colour sequences (`ESC [ ... letter`).
pub(crate) fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Waits until proxy `index` is ready: Strait's `GET /readyz` answers 200,
/// or HAProxy's frontend accepts connections.
pub(crate) async fn wait_ready(proxies: &mut Proxies, index: usize, limit: Duration) -> Result<()> {
    let deadline = Instant::now() + limit;
    let (name, admin, entry) = {
        let proxy = &proxies.children[index];
        (proxy.name, proxy.admin, proxy.entry)
    };
    loop {
        proxies.check_alive()?;
        let probe = async {
            match admin {
                Some(admin) => match http_status(admin, "/readyz").await {
                    Ok(200) => Ok(()),
                    Ok(status) => Err(format!("GET http://{admin}/readyz: status {status}")),
                    Err(error) => Err(format!("GET http://{admin}/readyz: {error}")),
                },
                None => TcpStream::connect(entry)
                    .await
                    .map(drop)
                    .map_err(|e| format!("connecting to {entry}: {e}")),
            }
        };
        let last = match tokio::time::timeout(Duration::from_secs(2), probe).await {
            Ok(Ok(())) => return Ok(()),
            Ok(Err(error)) => error,
            Err(_) => "timed out".to_owned(),
        };
        if Instant::now() >= deadline {
            return Err(format!(
                "{name} was not ready within {limit:?} ({last});\n{}",
                proxies.logs()
            ));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The status of `GET path`, over a raw HTTP/1.1 connection.
pub(crate) async fn http_status(address: SocketAddr, path: &str) -> std::io::Result<u16> {
    http_response(address, path).await.map(|(status, _)| status)
}

/// The body of `GET path`, which must answer 200.
pub(crate) async fn http_get(address: SocketAddr, path: &str) -> std::io::Result<String> {
    match http_response(address, path).await? {
        (200, body) => Ok(body),
        (status, body) => Err(std::io::Error::other(format!(
            "GET {path}: status {status}: {body}"
        ))),
    }
}

async fn http_response(address: SocketAddr, path: &str) -> std::io::Result<(u16, String)> {
    let mut stream = TcpStream::connect(address).await?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await?;
    let text = String::from_utf8_lossy(&response);
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|status| status.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("not an HTTP response: {text:?}")))?;
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_owned())
        .unwrap_or_default();
    Ok((status, body))
}

/// The first connection of a scenario, retried until routes, tunnel and
/// backend work.
pub(crate) async fn warm_up(proxies: &Proxies, scenario: &str, target: Target) -> Result<()> {
    let limit = Duration::from_secs(15);
    let deadline = Instant::now() + limit;
    loop {
        let attempt = async {
            let mut stream = target.open().await?;
            ping(&mut stream).await?;
            close(stream).await
        };
        let error = match tokio::time::timeout(Duration::from_secs(5), attempt).await {
            Ok(Ok(())) => return Ok(()),
            Ok(Err(error)) => error,
            Err(_) => "timed out".to_owned(),
        };
        if Instant::now() >= deadline {
            return Err(format!(
                "{scenario}: no working connection within {limit:?}: {error};\n{}",
                proxies.logs()
            ));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
