//! The gateway processes: spawning `strait run` children, killing them on drop,
//! their logs, and waiting until they are ready and a scenario's route works.

use crate::AUTHORITY;
use crate::GatewaySpec;
use crate::Result;
use crate::clients::close;
use crate::clients::{connect_through, ping};
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

pub(crate) struct Gateway {
    pub(crate) name: &'static str,
    pub(crate) child: Child,
    pub(crate) connect: SocketAddr,
    pub(crate) admin: SocketAddr,
    pub(crate) log: PathBuf,
}

/// The running gateways; dropping this (also while unwinding from a panic)
/// kills them.
#[derive(Default)]
pub(crate) struct Gateways {
    pub(crate) children: Vec<Gateway>,
}

impl Gateways {
    pub(crate) fn spawn(
        &mut self,
        binary: &Path,
        dir: &Path,
        config: &Path,
        certs: &Path,
        spec: &GatewaySpec,
        ports: &GatewayPorts,
    ) -> Result<()> {
        let log = dir.join(format!("{}.log", spec.name));
        let file = std::fs::File::create(&log)
            .map_err(|e| format!("cannot create {}: {e}", log.display()))?;
        let stderr = file
            .try_clone()
            .map_err(|e| format!("cannot duplicate a log handle: {e}"))?;
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
            .env(
                "RUST_LOG",
                std::env::var("RUST_LOG").unwrap_or_else(|_| "info".to_owned()),
            )
            .stdin(Stdio::null())
            .stdout(file)
            .stderr(stderr)
            .spawn()
            .map_err(|e| format!("cannot start {} run: {e}", binary.display()))?;
        self.children.push(Gateway {
            name: spec.name,
            child,
            connect: ports.connect,
            admin: ports.admin,
            log,
        });
        Ok(())
    }

    pub(crate) fn get(&self, name: &str) -> &Gateway {
        self.children
            .iter()
            .find(|g| g.name == name)
            .expect("a started gateway")
    }

    /// An error if any gateway has exited, with the end of its log.
    pub(crate) fn check_alive(&mut self) -> Result<()> {
        for gateway in &mut self.children {
            if let Ok(Some(status)) = gateway.child.try_wait() {
                return Err(format!(
                    "gateway {} exited ({status}); end of {}:\n{}",
                    gateway.name,
                    gateway.log.display(),
                    log_tail(&gateway.log)
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
            .filter(|g| wanted(g.name))
            .map(|g| {
                format!(
                    "--- end of {} ({}):\n{}\n",
                    g.name,
                    g.log.display(),
                    log_tail(&g.log)
                )
            })
            .collect()
    }
}

impl Drop for Gateways {
    fn drop(&mut self) {
        for gateway in &mut self.children {
            let _ = gateway.child.kill();
            let _ = gateway.child.wait();
        }
    }
}

/// The last lines of a gateway's log, without the routine lines (route
/// reloads, one access line per connection) that would otherwise fill it.
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

/// Polls `GET /readyz` on the gateway's admin listener until it answers 200.
pub(crate) async fn wait_ready(
    gateways: &mut Gateways,
    index: usize,
    limit: Duration,
) -> Result<()> {
    let deadline = Instant::now() + limit;
    let (name, admin) = {
        let gateway = &gateways.children[index];
        (gateway.name, gateway.admin)
    };
    loop {
        gateways.check_alive()?;
        let last = match tokio::time::timeout(Duration::from_secs(2), http_status(admin, "/readyz"))
            .await
        {
            Ok(Ok(200)) => return Ok(()),
            Ok(Ok(status)) => format!("status {status}"),
            Ok(Err(error)) => error.to_string(),
            Err(_) => "request timed out".to_owned(),
        };
        if Instant::now() >= deadline {
            return Err(format!(
                "gateway {name} was not ready within {limit:?} (GET http://{admin}/readyz: {last});\n{}",
                gateways.logs()
            ));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The status of `GET path`, over a raw HTTP/1.1 connection.
pub(crate) async fn http_status(address: SocketAddr, path: &str) -> std::io::Result<u16> {
    let mut stream = TcpStream::connect(address).await?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await?;
    let text = String::from_utf8_lossy(&response);
    text.split_whitespace()
        .nth(1)
        .and_then(|status| status.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("not an HTTP response: {text:?}")))
}

/// The first connection of a scenario, retried until routes and tunnel work.
pub(crate) async fn warm_up(
    gateways: &Gateways,
    scenario: &str,
    connect: SocketAddr,
) -> Result<()> {
    let limit = Duration::from_secs(15);
    let deadline = Instant::now() + limit;
    loop {
        let attempt = async {
            let mut stream = connect_through(connect, AUTHORITY).await?;
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
                "{scenario}: no working connection through {connect} within {limit:?}: {error};\n{}",
                gateways.logs()
            ));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
