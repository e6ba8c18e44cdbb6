//! The `strait` binary, the certificates and the configuration the gateways
//! read: building or finding `target/release/strait`, listener addresses,
//! cluster folders (written with `tests/support`'s `cluster_yaml`) and
//! `gateway.yaml`, and the open-files limit.

use crate::CLUSTERSET;
use crate::Result;
use crate::support;
use crate::support::{Pod, ServiceSpec};
use std::io::Read as _;
use std::net::IpAddr;
use std::net::SocketAddr;
use std::path::Path;
use std::path::PathBuf;
use std::process::Child;
use std::process::Command;
use std::process::Stdio;
use std::time::Duration;
use std::time::Instant;

/// Cargo's target directory (`CARGO_TARGET_DIR`, or `target/` of this package).
pub(crate) fn target_dir() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .map(|dir| {
            if dir.is_absolute() {
                dir
            } else {
                manifest.join(dir)
            }
        })
        .unwrap_or_else(|| manifest.join("target"))
}

/// The `strait` binary cargo built along with this bench (same profile), or
/// else `target/release/strait`, built if missing.
pub(crate) fn strait_binary(as_test: bool) -> Result<PathBuf> {
    if let Some(built) = option_env!("CARGO_BIN_EXE_strait").map(PathBuf::from)
        && built.is_file()
    {
        return Ok(built);
    }
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let binary = target_dir().join("release").join("strait");
    if binary.is_file() {
        return Ok(binary);
    }
    // Under a debug `cargo test`, cargo has just built this profile's binary
    // next to this harness (target/debug/deps/e2e-* → target/debug/strait).
    if as_test {
        let sibling = std::env::current_exe()
            .ok()
            .and_then(|exe| Some(exe.parent()?.parent()?.join("strait")));
        if let Some(sibling) = sibling.filter(|path| path.is_file()) {
            println!(
                "e2e bench: {} is missing; smoke-testing {} instead",
                binary.display(),
                sibling.display()
            );
            return Ok(sibling);
        }
    }
    println!(
        "e2e bench: {} is missing; running `cargo build --release --bin strait`",
        binary.display()
    );
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut child = Command::new(&cargo)
        .args(["build", "--release", "--bin", "strait"])
        .current_dir(manifest)
        .stdin(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", Path::new(&cargo).display()))?;
    let status = wait_child(&mut child, Duration::from_secs(900))
        .map_err(|e| format!("`cargo build --release --bin strait`: {e}"))?;
    if !status.success() {
        return Err(format!(
            "`cargo build --release --bin strait` failed ({status})"
        ));
    }
    if binary.is_file() {
        Ok(binary)
    } else {
        Err(format!(
            "`cargo build --release --bin strait` succeeded but {} does not exist",
            binary.display()
        ))
    }
}

/// Waits for a child process, killing it after `limit`.
pub(crate) fn wait_child(child: &mut Child, limit: Duration) -> Result<std::process::ExitStatus> {
    let deadline = Instant::now() + limit;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Ok(status),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(50)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("did not finish within {limit:?}"));
            }
            Err(error) => return Err(format!("cannot wait for it: {error}")),
        }
    }
}

/// Runs `binary ARGS` to completion (`what` names it in errors); its
/// stderr on failure.
pub(crate) fn run_to_completion(
    binary: &Path,
    args: &[&std::ffi::OsStr],
    what: &str,
) -> Result<()> {
    output_of(binary, args, what).map(drop)
}

/// Runs `binary ARGS` to completion (`what` names it in errors): its
/// stdout, or its stderr on failure.
pub(crate) fn output_of(binary: &Path, args: &[&std::ffi::OsStr], what: &str) -> Result<String> {
    let mut child = Command::new(binary)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", binary.display()))?;
    // Both pipes are read before waiting, stdout on its own thread, so
    // that neither can fill up and block the child.
    let stdout = child.stdout.take().map(|mut pipe| {
        std::thread::spawn(move || {
            let mut text = String::new();
            pipe.read_to_string(&mut text).map(|_| text)
        })
    });
    let mut stderr = String::new();
    if let Some(mut pipe) = child.stderr.take() {
        let _ = pipe.read_to_string(&mut stderr);
    }
    let status =
        wait_child(&mut child, Duration::from_secs(30)).map_err(|e| format!("`{what}`: {e}"))?;
    let stdout = match stdout.map(std::thread::JoinHandle::join) {
        Some(Ok(Ok(text))) => text,
        Some(Ok(Err(error))) => return Err(format!("`{what}`: reading its output: {error}")),
        Some(Err(_)) => return Err(format!("`{what}`: the thread reading its output failed")),
        None => String::new(),
    };
    if status.success() {
        Ok(stdout)
    } else {
        Err(format!("`{what}` failed ({status}):\n{}", stderr.trim()))
    }
}

pub(crate) fn write_certificates(binary: &Path, out: &Path) -> Result<()> {
    let args = [
        "certs".as_ref(),
        "--out".as_ref(),
        out.as_os_str(),
        "--clusterset".as_ref(),
        CLUSTERSET.as_ref(),
        "--cluster".as_ref(),
        "c1".as_ref(),
        "--cluster".as_ref(),
        "c3".as_ref(),
    ];
    run_to_completion(binary, &args, "strait certs")
}

/// A gateway's listener addresses.
pub(crate) struct GatewayPorts {
    pub(crate) connect: SocketAddr,
    pub(crate) tunnel: SocketAddr,
    pub(crate) admin: SocketAddr,
}

impl GatewayPorts {
    /// Free ports on `ip`: bound to port 0, then released for the gateway.
    /// The tunnel port must be free for UDP as well (QUIC listens there too).
    pub(crate) fn pick(ip: IpAddr) -> Result<GatewayPorts> {
        let bind = || {
            std::net::TcpListener::bind(SocketAddr::new(ip, 0))
                .map_err(|e| format!("cannot bind {ip}:0 to find a free port: {e}"))
        };
        let address = |listener: &std::net::TcpListener| {
            listener
                .local_addr()
                .map_err(|e| format!("cannot read a bound address: {e}"))
        };
        for _ in 0..20 {
            let (connect, tunnel, admin) = (bind()?, bind()?, bind()?);
            let tunnel_address = address(&tunnel)?;
            if std::net::UdpSocket::bind(tunnel_address).is_err() {
                continue;
            }
            return Ok(GatewayPorts {
                connect: address(&connect)?,
                tunnel: tunnel_address,
                admin: address(&admin)?,
            });
        }
        Err(format!("no port on {ip} is free for both TCP and UDP"))
    }
}

/// The gateways' `tuning.stallReport`: a connection holding bytes and
/// writing none this long is counted as stalled (the soak fails on any).
pub(crate) const STALL_REPORT: Duration = Duration::from_secs(2);

/// A configuration directory: c1 and c3 with their gateways' tunnel
/// addresses, c3 exporting `app/echo` with `backend` as its one endpoint,
/// and a `gateway.yaml` that admits the loopback endpoint and picks the
/// tunnel transport.
pub(crate) fn write_config(
    config: &Path,
    transport: &str,
    c1_tunnel: SocketAddr,
    c3_tunnel: SocketAddr,
    backend: SocketAddr,
) -> Result<()> {
    let echo = ServiceSpec {
        namespace: "app",
        name: "echo",
        ports: &[("tcp", 42, backend.port())],
        exported_at: Some("2026-01-01T00:00:00Z"),
        pods: vec![Pod::ready(backend.ip())],
        proxy_protocol: false,
        udp_ports: &[],
    };
    support::write_cluster(
        config,
        "c1",
        &support::cluster_yaml("c1", "net-a", c1_tunnel, &[]),
    );
    support::write_cluster(
        config,
        "c3",
        &support::cluster_yaml("c3", "net-b", c3_tunnel, &[echo]),
    );
    let path = config.join("gateway.yaml");
    std::fs::write(
        &path,
        format!(
            "allowLoopbackEndpoints: true\ntuning:\n  stallReport: {}s\ntunnel:\n  transport: {transport}\n",
            STALL_REPORT.as_secs()
        ),
    )
    .map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// One import port of a file-mode gateway: the service port it stands for.
pub(crate) struct ImportPort {
    pub(crate) namespace: String,
    pub(crate) service: String,
    pub(crate) port: u16,
    pub(crate) import_port: u16,
}

/// The import ports a file-mode gateway of `cluster` listens on, as
/// `strait imports --config DIR --cluster ID --output json` prints them:
/// the derived Services' `targetPort`s.
pub(crate) fn import_ports(binary: &Path, config: &Path, cluster: &str) -> Result<Vec<ImportPort>> {
    let args = [
        "imports".as_ref(),
        "--config".as_ref(),
        config.as_os_str(),
        "--cluster".as_ref(),
        cluster.as_ref(),
        "--output".as_ref(),
        "json".as_ref(),
    ];
    let what = format!(
        "strait imports --config {} --cluster {cluster} --output json",
        config.display()
    );
    let text = output_of(binary, &args, &what)?;
    let list: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("`{what}` printed no JSON: {e}"))?;
    let mut ports = Vec::new();
    let items = list["items"].as_array().into_iter().flatten();
    for item in items.filter(|item| item["kind"] == "Service") {
        let metadata = &item["metadata"];
        let service = metadata["labels"]["multicluster.kubernetes.io/service-name"].as_str();
        let (Some(namespace), Some(service)) = (metadata["namespace"].as_str(), service) else {
            return Err(format!(
                "`{what}`: a derived Service without namespace or service label"
            ));
        };
        for port in item["spec"]["ports"].as_array().into_iter().flatten() {
            let number = |field: &str| {
                port[field]
                    .as_u64()
                    .and_then(|n| u16::try_from(n).ok())
                    .ok_or_else(|| format!("`{what}`: {namespace}/{service}: no numeric {field}"))
            };
            ports.push(ImportPort {
                namespace: namespace.to_owned(),
                service: service.to_owned(),
                port: number("port")?,
                import_port: number("targetPort")?,
            });
        }
    }
    Ok(ports)
}

/// `strait check` of a configuration, so a mistake shows as a clear error
/// before any gateway starts.
pub(crate) fn check_config(binary: &Path, config: &Path) -> Result<()> {
    let args = ["check".as_ref(), "--config".as_ref(), config.as_os_str()];
    run_to_completion(
        binary,
        &args,
        &format!("strait check --config {}", config.display()),
    )
}

/// Raises this process's open-file soft limit (the proxies it starts inherit
/// it) towards `wanted` with `prlimit`: above the hard limit where allowed
/// (root with CAP_SYS_RESOURCE), else up to the hard limit. The limit now in
/// force.
pub(crate) fn raise_open_files(wanted: u64) -> u64 {
    let limits = || -> Option<(u64, u64)> {
        let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
        let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
        let mut fields = line["Max open files".len()..].split_whitespace();
        let soft = fields.next()?.parse().unwrap_or(u64::MAX);
        let hard = fields.next()?.parse().unwrap_or(u64::MAX);
        Some((soft, hard))
    };
    let Some((soft, hard)) = limits() else {
        return wanted; // No /proc: hope for the best.
    };
    if soft >= wanted {
        return soft;
    }
    let raise = |soft: u64, hard: u64| {
        Command::new("prlimit")
            .arg(format!("--pid={}", std::process::id()))
            .arg(format!("--nofile={soft}:{hard}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
    };
    if hard < wanted {
        let _ = raise(wanted, wanted);
    }
    if limits().is_some_and(|(soft, _)| soft < wanted) {
        let _ = raise(hard.min(wanted), hard);
    }
    limits().map_or(soft, |(soft, _)| soft)
}
