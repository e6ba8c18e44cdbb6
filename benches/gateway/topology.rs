//! The `strait` binary, the certificates and the configuration the gateways read:
//! building or finding `target/release/strait`, listener addresses, cluster
//! folders and `gateway.yaml`, and the open-files limit.

use crate::CLUSTERSET;
use crate::Result;
use crate::backend_ip;
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

/// `target/release/strait`, built if missing.
pub(crate) fn strait_binary(as_test: bool) -> Result<PathBuf> {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .map(|dir| {
            if dir.is_absolute() {
                dir
            } else {
                manifest.join(dir)
            }
        })
        .unwrap_or_else(|| manifest.join("target"));
    let binary = target.join("release").join("strait");
    if binary.is_file() {
        return Ok(binary);
    }
    // Under a debug `cargo test`, cargo has just built this profile's binary
    // next to this harness (target/debug/deps/gateway-* → target/debug/strait).
    if as_test {
        let sibling = std::env::current_exe()
            .ok()
            .and_then(|exe| Some(exe.parent()?.parent()?.join("strait")));
        if let Some(sibling) = sibling.filter(|path| path.is_file()) {
            println!(
                "gateway bench: {} is missing; smoke-testing {} instead",
                binary.display(),
                sibling.display()
            );
            return Ok(sibling);
        }
    }
    println!(
        "gateway bench: {} is missing; running `cargo build --release --bin strait`",
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

/// Runs `strait ARGS` to completion; its stderr on failure.
pub(crate) fn run_strait(binary: &Path, args: &[&std::ffi::OsStr], what: &str) -> Result<()> {
    let mut child = Command::new(binary)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", binary.display()))?;
    // The messages are short: read them before waiting, so a full pipe cannot block.
    let mut stderr = String::new();
    if let Some(mut pipe) = child.stderr.take() {
        let _ = pipe.read_to_string(&mut stderr);
    }
    let status = wait_child(&mut child, Duration::from_secs(30))
        .map_err(|e| format!("`strait {what}`: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!(
            "`strait {what}` failed ({status}):\n{}",
            stderr.trim()
        ))
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
    run_strait(binary, &args, "certs")
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

/// The objects of one cluster folder: its identity, its gateway Service and,
/// when `echo_target` is given, the exported Service `app/echo` (port `tcp`
/// 42) with one ready endpoint on the backend.
pub(crate) fn cluster_yaml(
    id: &str,
    network: &str,
    tunnel: SocketAddr,
    echo_target: Option<u16>,
) -> String {
    let mut yaml = format!(
        "apiVersion: about.k8s.io/v1beta1
kind: ClusterProperty
metadata: {{name: cluster.clusterset.k8s.io}}
spec: {{value: {id}}}
---
apiVersion: about.k8s.io/v1beta1
kind: ClusterProperty
metadata: {{name: network.clusterset.k8s.io}}
spec: {{value: {network}}}
---
apiVersion: v1
kind: Service
metadata:
  name: cluster-edge
  namespace: strait-system
  labels: {{strait.dev/gateway: \"true\"}}
spec:
  type: LoadBalancer
  ports: [{{name: tunnel, port: {port}}}]
  externalIPs: [\"{ip}\"]
",
        port = tunnel.port(),
        ip = tunnel.ip()
    );
    if let Some(target) = echo_target {
        yaml.push_str(&format!(
            "---
apiVersion: v1
kind: Service
metadata: {{name: echo, namespace: app}}
spec:
  ports: [{{name: tcp, port: 42, targetPort: {target}}}]
---
apiVersion: multicluster.x-k8s.io/v1alpha1
kind: ServiceExport
metadata: {{name: echo, namespace: app, creationTimestamp: \"2026-01-01T00:00:00Z\"}}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: echo-slice
  namespace: app
  labels: {{kubernetes.io/service-name: echo}}
addressType: IPv4
ports: [{{name: tcp, port: {target}}}]
endpoints:
- addresses: [\"{backend}\"]
  conditions: {{ready: true}}
",
            backend = backend_ip(),
        ));
    }
    yaml
}

/// A configuration directory: c1 and c3 with their gateways' tunnel
/// addresses, and a `gateway.yaml` that admits the loopback endpoint and
/// picks the tunnel transport.
pub(crate) fn write_config(
    config: &Path,
    transport: &str,
    c1_tunnel: SocketAddr,
    c3_tunnel: SocketAddr,
    target: u16,
) -> Result<()> {
    let write = |path: &Path, text: &str| {
        std::fs::write(path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))
    };
    for (id, yaml) in [
        ("c1", cluster_yaml("c1", "net-a", c1_tunnel, None)),
        ("c3", cluster_yaml("c3", "net-b", c3_tunnel, Some(target))),
    ] {
        let folder = config.join("clusters").join(id);
        std::fs::create_dir_all(&folder)
            .map_err(|e| format!("cannot create {}: {e}", folder.display()))?;
        write(&folder.join("objects.yaml"), &yaml)?;
    }
    write(
        &config.join("gateway.yaml"),
        &format!("allowLoopbackEndpoints: true\ntunnel:\n  transport: {transport}\n"),
    )
}

/// `strait check` of a configuration, so a mistake shows as a clear error
/// before any gateway starts.
pub(crate) fn check_config(binary: &Path, config: &Path) -> Result<()> {
    let args = ["check".as_ref(), "--config".as_ref(), config.as_os_str()];
    run_strait(
        binary,
        &args,
        &format!("check --config {}", config.display()),
    )
}

/// Makes sure this process (and the gateways it starts, which inherit the
/// limit) may open `needed` files, raising the soft limit with `prlimit` if
/// it is lower.
pub(crate) fn ensure_open_files(needed: u64) -> Result<()> {
    let limits = || -> Option<(u64, String)> {
        let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
        let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
        let mut fields = line["Max open files".len()..].split_whitespace();
        let soft = fields.next()?;
        let hard = fields.next()?.to_owned();
        Some((soft.parse().unwrap_or(u64::MAX), hard))
    };
    let Some((soft, hard)) = limits() else {
        return Ok(()); // No /proc: hope for the best.
    };
    if soft >= needed {
        return Ok(());
    }
    let _ = Command::new("prlimit")
        .arg(format!("--pid={}", std::process::id()))
        .arg(format!("--nofile={hard}:{hard}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    match limits() {
        Some((raised, _)) if raised >= needed => Ok(()),
        _ => Err(format!(
            "the open-file limit is {soft} but this run needs about {needed}; \
             raise it (`ulimit -n {needed}`) or use --quick"
        )),
    }
}
