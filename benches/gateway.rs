//! Measures the data plane end to end with real `strait run` processes on
//! loopback. Cluster c1 is on network `net-a`, c3 on `net-b`; c3 exports
//! `app/echo` (port `tcp` 42), whose one endpoint is an echo server this
//! harness runs in-process (tokio) on 127.0.3.10. Clients send
//! `CONNECT echo.app.svc.clusterset.local:42` to a gateway's connect listener.
//!
//! Scenarios (each gateway process serves one, so every memory figure starts
//! from a fresh heap):
//! - `direct`: the client connects to the backend itself (plain TCP);
//! - `proxy`: through one c3 gateway (`c3-proxy`, 127.0.3.3), no tunnel;
//! - `tunnel-h2`: through `c1-h2` (127.0.1.1), which tunnels over HTTP/2 +
//!   mTLS to `c3-h2` (127.0.3.1), which dials the backend
//!   (`tunnel: {transport: h2}` in `gateway.yaml`);
//! - `tunnel-quic`: the same over QUIC, `c1-quic` (127.0.1.2) to `c3-quic`
//!   (127.0.3.2) (`tunnel: {transport: quic}`; the default, `auto`, is QUIC
//!   with HTTP/2 as fallback).
//!
//! What it reports (markdown tables on stdout; `--json PATH` also writes
//! `[{"scenario","workload","value","unit"}]` rows):
//! - **Bulk throughput of one connection**: 1 GiB (`--quick`: 64 MiB, one
//!   run instead of the median of three) written and read back at the same
//!   time (the echo is checked byte for byte), in Gbit/s of payload one way,
//!   every scenario side by side, with the CPU each process, softirq work and
//!   other load on the host used meanwhile.
//! - **Idle memory**: VmRSS of the scenario's gateways before and after
//!   opening 1,000 (`--quick`: 100) connections at once, each CONNECTed and
//!   having echoed 4 bytes, then idle for 2 s; reported as KiB per idle
//!   connection for each gateway (tunnel client side and server side), with
//!   the RSS before, while open and after closing them.
//!
//! Run with `cargo bench --bench gateway` (under a minute) or
//! `cargo bench --bench gateway -- --quick`. It runs `target/release/strait`
//! (under `CARGO_TARGET_DIR` if set; `cargo bench` builds it), and runs
//! `cargo build --release --bin strait` when it is missing. Under `cargo test`
//! (which runs benches without the `--bench` argument) it runs the quick
//! variant as a smoke test (about 15 s). `STRAIT_BENCH_KEEP=1` keeps the
//! temporary directory with the gateways' logs; `RUST_LOG` is passed to the
//! gateways (default `info`). A measurement that fails (a flow that breaks,
//! connections that cannot all be opened) is reported after the tables and
//! makes the run exit non-zero.
//!
//! What limits the figures: everything runs on loopback (no NIC, no latency
//! or loss, 64 KiB MTU), and the client, the echo backend and every gateway
//! share the host's cores (2 on the reference machine). A gateway path is
//! bounded by CPU, not by a link: on the reference machine a tunnelled flow
//! keeps both cores busy (each gateway near one core: socket copies, TLS,
//! HTTP/2 or QUIC framing; plus the harness and loopback softirq work), so
//! faster or more cores raise it, and the `direct` figure is this host's
//! loopback ceiling, not a network speed. Other load on the host lowers every
//! figure: the harness warns when the host was busy before it started, and
//! the `other load` column shows CPU taken by processes not in the run.
//! Idle memory is user-space RSS (socket buffers are kernel memory) and
//! depends on the allocator: glibc malloc keeps freed memory, so RSS need not
//! fall after closing, and buffers that a connection has filled once stay
//! resident, so connections that moved bulk data cost more than these
//! 4-byte ones.

use std::io::{Read as _, Write as _};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const AUTHORITY: &str = "echo.app.svc.clusterset.local:42";
const CLUSTERSET: &str = "bench.strait.dev";
const MIB: u64 = 1024 * 1024;
const GIB: u64 = 1024 * MIB;
/// Client write and read size of the bulk flows.
const CHUNK: usize = 1024 * 1024;
/// The echo backend's largest buffer (it starts small so idle connections stay cheap).
const ECHO_BUFFER: usize = 256 * 1024;
/// How long the idle connections sit before their gateways' RSS is read.
const IDLE_SETTLE: Duration = Duration::from_secs(2);
/// Connections opened at once while setting up the idle ones.
const OPEN_CONCURRENCY: usize = 32;

type Result<T> = std::result::Result<T, String>;

/// One gateway process: its name, the cluster it serves, its address and the
/// configuration directory (`config-h2` or `config-quic`) it reads.
struct GatewaySpec {
    name: &'static str,
    cluster: &'static str,
    ip: Ipv4Addr,
    config: &'static str,
}

const GATEWAYS: [GatewaySpec; 5] = [
    GatewaySpec {
        name: "c1-h2",
        cluster: "c1",
        ip: Ipv4Addr::new(127, 0, 1, 1),
        config: "h2",
    },
    GatewaySpec {
        name: "c3-h2",
        cluster: "c3",
        ip: Ipv4Addr::new(127, 0, 3, 1),
        config: "h2",
    },
    GatewaySpec {
        name: "c1-quic",
        cluster: "c1",
        ip: Ipv4Addr::new(127, 0, 1, 2),
        config: "quic",
    },
    GatewaySpec {
        name: "c3-quic",
        cluster: "c3",
        ip: Ipv4Addr::new(127, 0, 3, 2),
        config: "quic",
    },
    // Not named in any configuration: nobody tunnels to it.
    GatewaySpec {
        name: "c3-proxy",
        cluster: "c3",
        ip: Ipv4Addr::new(127, 0, 3, 3),
        config: "h2",
    },
];

fn backend_ip() -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, 3, 10))
}

/// How a client reaches the echo backend.
struct Scenario {
    name: &'static str,
    path: &'static str,
    /// The gateway whose connect listener the client asks; `None`: straight to the backend.
    via: Option<&'static str>,
    /// The gateways the connection passes, with their role.
    gateways: &'static [(&'static str, &'static str)],
}

const SCENARIOS: [Scenario; 4] = [
    Scenario {
        name: "direct",
        path: "client → backend (plain TCP)",
        via: None,
        gateways: &[],
    },
    Scenario {
        name: "proxy",
        path: "client → c3 → backend (one gateway)",
        via: Some("c3-proxy"),
        gateways: &[("c3-proxy", "proxy")],
    },
    Scenario {
        name: "tunnel-h2",
        path: "client → c1 → HTTP/2+mTLS → c3 → backend",
        via: Some("c1-h2"),
        gateways: &[("c1-h2", "tunnel client"), ("c3-h2", "tunnel server")],
    },
    Scenario {
        name: "tunnel-quic",
        path: "client → c1 → QUIC → c3 → backend",
        via: Some("c1-quic"),
        gateways: &[("c1-quic", "tunnel client"), ("c3-quic", "tunnel server")],
    },
];

struct Options {
    quick: bool,
    /// Run by `cargo test` (no `--bench` argument): the quick variant as a smoke test.
    as_test: bool,
    json: Option<PathBuf>,
}

impl Options {
    fn parse() -> Result<Options> {
        let mut options = Options {
            quick: false,
            as_test: true,
            json: None,
        };
        let mut args = std::env::args().skip(1);
        while let Some(arg) = args.next() {
            match arg.as_str() {
                "--quick" => options.quick = true,
                // `cargo bench` passes it; `cargo test` runs benches without it.
                "--bench" => options.as_test = false,
                "--json" => {
                    let path = args.next().ok_or("--json needs a PATH")?;
                    options.json = Some(PathBuf::from(path));
                }
                other => {
                    if let Some(path) = other.strip_prefix("--json=") {
                        options.json = Some(PathBuf::from(path));
                    }
                    // Anything else (filters, --nocapture, ...) is cargo's or criterion's.
                }
            }
        }
        if options.as_test {
            options.quick = true;
        }
        Ok(options)
    }

    fn bulk_bytes(&self) -> u64 {
        if self.quick { 64 * MIB } else { GIB }
    }

    /// Measured runs of each bulk flow (the median is reported).
    fn repeats(&self) -> usize {
        if self.quick { 1 } else { 3 }
    }

    fn idle_connections(&self) -> usize {
        if self.quick { 100 } else { 1000 }
    }
}

/// One measured figure.
struct Row {
    scenario: &'static str,
    workload: String,
    value: f64,
    unit: &'static str,
}

fn main() -> ExitCode {
    let options = match Options::parse() {
        Ok(options) => options,
        Err(error) => {
            eprintln!("gateway bench: {error}");
            return ExitCode::FAILURE;
        }
    };
    if options.as_test {
        println!(
            "gateway bench: no --bench argument, so running as a test (the quick variant); \
             `cargo bench --bench gateway` measures"
        );
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("gateway bench: cannot start the tokio runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    let limit = if options.quick {
        Duration::from_secs(120)
    } else {
        Duration::from_secs(300)
    };
    let outcome = runtime.block_on(async {
        match tokio::time::timeout(limit, run(&options)).await {
            Ok(outcome) => outcome,
            Err(_) => Err(format!("the whole run took longer than {limit:?}")),
        }
    });
    runtime.shutdown_timeout(Duration::from_secs(2));
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("gateway bench: error: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn run(options: &Options) -> Result<()> {
    let started = Instant::now();
    let binary = strait_binary(options.as_test)?;
    let idle_count = options.idle_connections();
    // This process holds both ends of every idle connection.
    ensure_open_files(2 * idle_count as u64 + 512)?;

    let mut dir =
        tempfile::tempdir().map_err(|e| format!("cannot create a temporary directory: {e}"))?;
    if std::env::var_os("STRAIT_BENCH_KEEP").is_some() {
        dir.disable_cleanup(true);
        println!(
            "gateway bench: keeping {} (certificates, configuration, gateway logs)",
            dir.path().display()
        );
    }
    let certs = dir.path().join("certs");
    write_certificates(&binary, &certs)?;

    let backend = start_echo_backend(SocketAddr::new(backend_ip(), 0)).await?;
    let ports = GATEWAYS
        .iter()
        .map(|spec| GatewayPorts::pick(IpAddr::V4(spec.ip)))
        .collect::<Result<Vec<_>>>()?;
    let ports_of = |name: &str| {
        let index = GATEWAYS.iter().position(|g| g.name == name);
        &ports[index.expect("a gateway of GATEWAYS")]
    };
    for transport in ["h2", "quic"] {
        let config = dir.path().join(format!("config-{transport}"));
        write_config(
            &config,
            transport,
            ports_of(&format!("c1-{transport}")).tunnel,
            ports_of(&format!("c3-{transport}")).tunnel,
            backend.port(),
        )?;
        check_config(&binary, &config)?;
    }

    let mut gateways = Gateways::default();
    for (spec, ports) in GATEWAYS.iter().zip(&ports) {
        let config = dir.path().join(format!("config-{}", spec.config));
        gateways.spawn(&binary, dir.path(), &config, &certs, spec, ports)?;
    }
    for index in 0..gateways.children.len() {
        wait_ready(&mut gateways, index, Duration::from_secs(30)).await?;
    }
    for scenario in &SCENARIOS {
        if let Some(via) = scenario.via {
            warm_up(&gateways, scenario.name, gateways.get(via).connect).await?;
        }
    }
    warn_if_busy().await;

    // Idle memory first, while the gateways' heaps hold nothing from bulk flows.
    let mut idle = Vec::new();
    for scenario in SCENARIOS.iter().filter(|s| s.via.is_some()) {
        idle.push(idle_memory(&gateways, scenario, idle_count).await?);
    }
    let bulk = options.bulk_bytes();
    let mut flows = Vec::new();
    for scenario in &SCENARIOS {
        flows.push(bulk_flow(&gateways, scenario, backend, bulk, options.repeats()).await);
    }

    print_report(options, bulk, &flows, idle_count, &idle);
    let failed: Vec<(&Scenario, String)> = flows
        .iter()
        .filter_map(|(scenario, flow)| {
            let error = flow.as_ref().err()?;
            Some((*scenario, format!("{}: bulk flow: {error}", scenario.name)))
        })
        .chain(idle.iter().filter_map(|idle| {
            let error = idle.error.as_ref()?;
            Some((
                idle.scenario,
                format!("{}: idle connections: {error}", idle.scenario.name),
            ))
        }))
        .collect();
    let failures: Vec<String> = failed.iter().map(|(_, failure)| failure.clone()).collect();
    if !failures.is_empty() {
        println!("\n### Failures\n");
        for failure in &failures {
            println!("- {failure}");
        }
        let involved = |name: &str| {
            failed
                .iter()
                .any(|(scenario, _)| scenario.gateways.iter().any(|(g, _)| *g == name))
        };
        println!("\n{}", gateways.logs_of(involved));
    }
    if let Some(path) = &options.json {
        let rows = rows(bulk, &flows, idle_count, &idle);
        write_json(path, &rows)?;
        println!("\nwrote {} rows to {}", rows.len(), path.display());
    }
    println!(
        "\n(total run time {:.1} s)",
        started.elapsed().as_secs_f64()
    );
    drop(gateways);
    if failures.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "{} measurement(s) failed: {}",
            failures.len(),
            failures.join("; ")
        ))
    }
}

/// Other work on the host (a build, another benchmark) takes cores from the
/// gateways: say so, since the figures would be too low.
async fn warn_if_busy() {
    let Some(before) = host_cpu() else { return };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let Some(after) = host_cpu() else { return };
    let busy = after.busy_since(&before);
    if busy > 25.0 {
        println!(
            "gateway bench: WARNING: the host was {busy:.0}% busy (% of one core) before the \
             measurement started; other load makes these figures too low"
        );
    }
}

// ---------------------------------------------------------------------------
// The strait binary, certificates and configuration.

/// `target/release/strait`, built if missing.
fn strait_binary(as_test: bool) -> Result<PathBuf> {
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
fn wait_child(child: &mut Child, limit: Duration) -> Result<std::process::ExitStatus> {
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
fn run_strait(binary: &Path, args: &[&std::ffi::OsStr], what: &str) -> Result<()> {
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

fn write_certificates(binary: &Path, out: &Path) -> Result<()> {
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
struct GatewayPorts {
    connect: SocketAddr,
    tunnel: SocketAddr,
    admin: SocketAddr,
}

impl GatewayPorts {
    /// Free ports on `ip`: bound to port 0, then released for the gateway.
    /// The tunnel port must be free for UDP as well (QUIC listens there too).
    fn pick(ip: IpAddr) -> Result<GatewayPorts> {
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
fn cluster_yaml(id: &str, network: &str, tunnel: SocketAddr, echo_target: Option<u16>) -> String {
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
fn write_config(
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
fn check_config(binary: &Path, config: &Path) -> Result<()> {
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
fn ensure_open_files(needed: u64) -> Result<()> {
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

// ---------------------------------------------------------------------------
// The gateway processes.

struct Gateway {
    name: &'static str,
    child: Child,
    connect: SocketAddr,
    admin: SocketAddr,
    log: PathBuf,
}

/// The running gateways; dropping this (also while unwinding from a panic)
/// kills them.
#[derive(Default)]
struct Gateways {
    children: Vec<Gateway>,
}

impl Gateways {
    fn spawn(
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

    fn get(&self, name: &str) -> &Gateway {
        self.children
            .iter()
            .find(|g| g.name == name)
            .expect("a started gateway")
    }

    /// An error if any gateway has exited, with the end of its log.
    fn check_alive(&mut self) -> Result<()> {
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

    fn logs(&self) -> String {
        self.logs_of(|_| true)
    }

    fn logs_of(&self, wanted: impl Fn(&str) -> bool) -> String {
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
fn log_tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text
        .lines()
        .filter(|line| !line.contains("routes reloaded") && !line.contains("strait::access"))
        .collect();
    strip_ansi(&lines[lines.len().saturating_sub(12)..].join("\n"))
}

/// The text without terminal colour sequences (`ESC [ ... letter`).
fn strip_ansi(text: &str) -> String {
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
async fn wait_ready(gateways: &mut Gateways, index: usize, limit: Duration) -> Result<()> {
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
async fn http_status(address: SocketAddr, path: &str) -> std::io::Result<u16> {
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
async fn warm_up(gateways: &Gateways, scenario: &str, connect: SocketAddr) -> Result<()> {
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

// ---------------------------------------------------------------------------
// Clients and the echo backend.

/// An echo server: every byte back, with a buffer that grows from 4 KiB to
/// `ECHO_BUFFER` once a read fills it, so bulk flows move in large reads and
/// idle connections stay small.
async fn start_echo_backend(address: SocketAddr) -> Result<SocketAddr> {
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

async fn echo_connection(stream: TcpStream) {
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

/// `CONNECT authority` to a gateway's connect listener; the open stream on 200.
async fn connect_through(gateway: SocketAddr, authority: &str) -> Result<TcpStream> {
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
async fn ping(stream: &mut TcpStream) -> Result<()> {
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
async fn close(mut stream: TcpStream) -> Result<()> {
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

// ---------------------------------------------------------------------------
// Bulk throughput.

struct Flow {
    bytes: u64,
    elapsed: Duration,
    /// (process, % of one core) while the flow ran: every gateway, the
    /// harness, the host and the host's softirq time.
    cpu: Vec<(String, f64)>,
    /// Gbit/s of every measured run, slowest first; this flow is the median one.
    runs: Vec<f64>,
}

impl Flow {
    fn gbps(&self) -> f64 {
        self.bytes as f64 * 8.0 / self.elapsed.as_secs_f64() / 1e9
    }

    fn cpu_of(&self, process: &str) -> Option<f64> {
        self.cpu
            .iter()
            .find(|(name, _)| name == process)
            .map(|(_, cpu)| *cpu)
    }

    /// Host CPU used by neither this harness, nor a gateway, nor softirq
    /// work: other load on the host, which makes the figure too low.
    fn other_load(&self) -> Option<f64> {
        let ours: f64 = self
            .cpu
            .iter()
            .filter(|(name, _)| !name.starts_with("host"))
            .map(|(_, cpu)| cpu)
            .sum();
        let host = self.cpu_of("host")? - self.cpu_of("host softirq")?;
        Some((host - ours).max(0.0))
    }
}

/// A short warm-up flow, then `repeats` measured ones of `total` bytes; the
/// median one, with the spread.
async fn bulk_flow<'a>(
    gateways: &Gateways,
    scenario: &'a Scenario,
    backend: SocketAddr,
    total: u64,
    repeats: usize,
) -> (&'a Scenario, Result<Flow>) {
    if let Err(error) = one_flow(gateways, scenario, backend, 8 * MIB).await {
        return (scenario, Err(format!("warm-up: {error}")));
    }
    let mut flows = Vec::new();
    for _ in 0..repeats.max(1) {
        match one_flow(gateways, scenario, backend, total).await {
            Ok(flow) => flows.push(flow),
            Err(error) => return (scenario, Err(error)),
        }
    }
    flows.sort_by(|a, b| a.gbps().total_cmp(&b.gbps()));
    let runs: Vec<f64> = flows.iter().map(Flow::gbps).collect();
    let mut median = flows.swap_remove(flows.len() / 2);
    median.runs = runs;
    (scenario, Ok(median))
}

/// Sends `total` bytes through one connection while reading the echo, with
/// the CPU every process used meanwhile.
async fn one_flow(
    gateways: &Gateways,
    scenario: &Scenario,
    backend: SocketAddr,
    total: u64,
) -> Result<Flow> {
    let stream = match scenario.via {
        Some(via) => connect_through(gateways.get(via).connect, AUTHORITY).await?,
        None => {
            let stream = TcpStream::connect(backend)
                .await
                .map_err(|e| format!("cannot reach the backend {backend}: {e}"))?;
            let _ = stream.set_nodelay(true);
            stream
        }
    };
    // At least 30 s, and never slower than 40 MB/s.
    let limit = Duration::from_secs(30).max(Duration::from_secs(total / 40_000_000));
    let processes: Vec<(String, u32)> = gateways
        .children
        .iter()
        .map(|g| (g.name.to_owned(), g.child.id()))
        .chain([("harness".to_owned(), std::process::id())])
        .collect();
    let cpu_before: Vec<Option<Duration>> =
        processes.iter().map(|(_, pid)| cpu_time(*pid)).collect();
    let host_before = host_cpu();
    let elapsed = tokio::time::timeout(limit, echo_bulk(stream, total))
        .await
        .map_err(|_| format!("{} were not echoed within {limit:?}", size_label(total)))??;
    let mut cpu: Vec<(String, f64)> = processes
        .iter()
        .zip(cpu_before)
        .filter_map(|((name, pid), before)| {
            let used = cpu_time(*pid)?.checked_sub(before?)?;
            Some((
                name.clone(),
                used.as_secs_f64() / elapsed.as_secs_f64() * 100.0,
            ))
        })
        .collect();
    if let (Some(before), Some(after)) = (host_before, host_cpu()) {
        cpu.push(("host".to_owned(), after.busy_since(&before)));
        cpu.push(("host softirq".to_owned(), after.interrupts_since(&before)));
    }
    Ok(Flow {
        bytes: total,
        elapsed,
        cpu,
        runs: Vec::new(),
    })
}

/// The pattern the bulk flows send: byte i of every chunk is `i % 251`.
fn pattern() -> Arc<Vec<u8>> {
    Arc::new((0..CHUNK).map(|i| (i % 251) as u8).collect())
}

/// Writes `total` bytes (whole chunks of the pattern) and half-closes, while
/// reading the echo to its end; the time from the first write to the last byte.
async fn echo_bulk(stream: TcpStream, total: u64) -> Result<Duration> {
    let chunk = pattern();
    let (mut read, mut write) = stream.into_split();
    let started = Instant::now();
    let sent = chunk.clone();
    let writer = tokio::spawn(async move {
        let mut left = total;
        while left > 0 {
            let n = usize::try_from(left.min(CHUNK as u64)).unwrap_or(CHUNK);
            write.write_all(&sent[..n]).await?;
            left -= n as u64;
        }
        write.shutdown().await?;
        Ok::<_, std::io::Error>(write)
    });
    let mut buffer = vec![0u8; CHUNK];
    let mut received: u64 = 0;
    loop {
        let n = read
            .read(&mut buffer)
            .await
            .map_err(|e| format!("reading the echo after {received} bytes: {e}"))?;
        if n == 0 {
            break;
        }
        if received + n as u64 > total {
            return Err(format!("echoed more than the {total} bytes sent"));
        }
        // The echo must be the pattern, continued across chunk boundaries.
        let mut checked = 0;
        while checked < n {
            let offset = ((received + checked as u64) % CHUNK as u64) as usize;
            let len = (n - checked).min(CHUNK - offset);
            if buffer[checked..checked + len] != chunk[offset..offset + len] {
                return Err(format!(
                    "the echo differs from what was sent near byte {}",
                    received + checked as u64
                ));
            }
            checked += len;
        }
        received += n as u64;
    }
    let elapsed = started.elapsed();
    let _write = writer
        .await
        .map_err(|e| format!("writer task: {e}"))?
        .map_err(|e| format!("writing: {e}"))?;
    if received != total {
        return Err(format!("sent {total} bytes but {received} came back"));
    }
    Ok(elapsed)
}

/// User plus system CPU time of a process, from /proc/<pid>/stat (clock ticks of 10 ms).
fn cpu_time(pid: u32) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after_name = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    // Fields 14 and 15 of proc(5); field 3 (state) is the first after the name.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(Duration::from_millis((utime + stime) * 10))
}

/// The host's CPU counters: the first line of /proc/stat, in clock ticks.
struct HostCpu {
    busy: u64,
    /// Interrupt and softirq time: on loopback, much of the TCP/UDP receive
    /// path, which no process is billed for.
    interrupts: u64,
    total: u64,
    cores: usize,
}

fn host_cpu() -> Option<HostCpu> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let ticks: Vec<u64> = stat
        .lines()
        .next()?
        .strip_prefix("cpu ")?
        .split_whitespace()
        .map(|field| field.parse().ok())
        .collect::<Option<_>>()?;
    // user nice system idle iowait irq softirq steal (guest time is in user).
    let total: u64 = ticks.iter().take(8).sum();
    let idle = ticks.get(3)? + ticks.get(4)?;
    let cores = stat
        .lines()
        .filter(|l| l.starts_with("cpu") && l.as_bytes().get(3).is_some_and(u8::is_ascii_digit))
        .count();
    Some(HostCpu {
        busy: total - idle,
        interrupts: ticks.get(5)? + ticks.get(6)?,
        total,
        cores,
    })
}

impl HostCpu {
    /// Busy time of all cores since `before`, in % of one core (so 200% is
    /// two cores saturated); includes kernel work billed to no process.
    fn busy_since(&self, before: &HostCpu) -> f64 {
        self.share(self.busy.saturating_sub(before.busy), before)
    }

    /// Interrupt and softirq time since `before`, in % of one core.
    fn interrupts_since(&self, before: &HostCpu) -> f64 {
        self.share(self.interrupts.saturating_sub(before.interrupts), before)
    }

    fn share(&self, ticks: u64, before: &HostCpu) -> f64 {
        let total = self.total.saturating_sub(before.total).max(1) as f64;
        ticks as f64 / total * 100.0 * self.cores.max(1) as f64
    }
}

// ---------------------------------------------------------------------------
// Idle memory.

/// One gateway's RSS, in KiB.
struct GatewayMemory {
    name: &'static str,
    role: &'static str,
    before: u64,
    open: u64,
    closed: u64,
}

/// The idle-connection measurement of one scenario.
struct Idle<'a> {
    scenario: &'a Scenario,
    /// Connections that were open (CONNECTed and echoed) while RSS was read.
    opened: usize,
    gateways: Vec<GatewayMemory>,
    /// Why fewer than all connections opened.
    error: Option<String>,
}

impl GatewayMemory {
    fn per_connection_kib(&self, connections: usize) -> f64 {
        (self.open as f64 - self.before as f64) / connections.max(1) as f64
    }
}

/// VmRSS of a process in KiB.
fn rss_kib(pid: u32) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .map_err(|e| format!("cannot read /proc/{pid}/status: {e}"))?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|value| value.split_whitespace().next()?.parse().ok())
        .ok_or_else(|| format!("no VmRSS in /proc/{pid}/status"))
}

/// RSS of the scenario's gateways before, while and after `count`
/// connections through it are open. Connections that fail to open are
/// reported, not fatal: RSS is read with the ones that did.
async fn idle_memory<'a>(
    gateways: &Gateways,
    scenario: &'a Scenario,
    count: usize,
) -> Result<Idle<'a>> {
    let connect = gateways
        .get(scenario.via.expect("a gateway scenario"))
        .connect;
    let pids: Vec<u32> = scenario
        .gateways
        .iter()
        .map(|(name, _)| gateways.get(name).child.id())
        .collect();
    let rss = || {
        pids.iter()
            .map(|pid| rss_kib(*pid))
            .collect::<Result<Vec<u64>>>()
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = rss()?;

    let permits = Arc::new(tokio::sync::Semaphore::new(OPEN_CONCURRENCY));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..count {
        let permits = permits.clone();
        tasks.spawn(async move {
            let _permit = permits.acquire_owned().await.map_err(|e| e.to_string())?;
            let limit = Duration::from_secs(10);
            let mut stream = tokio::time::timeout(limit, connect_through(connect, AUTHORITY))
                .await
                .map_err(|_| format!("no answer to CONNECT within {limit:?}"))??;
            tokio::time::timeout(limit, ping(&mut stream))
                .await
                .map_err(|_| format!("connected, but no echo within {limit:?}"))??;
            Ok::<_, String>(stream)
        });
    }
    let mut open = Vec::with_capacity(count);
    let mut errors = Vec::new();
    let all = tokio::time::timeout(Duration::from_secs(90), async {
        while let Some(joined) = tasks.join_next().await {
            match joined {
                Ok(Ok(stream)) => open.push(stream),
                Ok(Err(error)) => errors.push(error),
                Err(error) => errors.push(format!("connection task: {error}")),
            }
        }
    })
    .await;
    if all.is_err() {
        errors.push("opening them took over 90 s".to_owned());
    }
    let error = (!errors.is_empty()).then(|| {
        let mut kinds: Vec<String> = errors.clone();
        kinds.sort();
        kinds.dedup();
        format!(
            "{} of {count} connections opened; {} failed: {}",
            open.len(),
            count - open.len(),
            kinds.join("; ")
        )
    });
    tokio::time::sleep(IDLE_SETTLE).await;
    let while_open = rss()?;
    let opened = open.len();
    // Connections must still work after idling.
    let step = opened.div_ceil(10).max(1);
    for stream in open.iter_mut().step_by(step) {
        tokio::time::timeout(Duration::from_secs(5), ping(stream))
            .await
            .map_err(|_| format!("{}: an idle connection's echo timed out", scenario.name))?
            .map_err(|e| format!("{}: an idle connection: {e}", scenario.name))?;
    }
    drop(open);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let closed = rss()?;
    Ok(Idle {
        scenario,
        opened,
        gateways: scenario
            .gateways
            .iter()
            .enumerate()
            .map(|(index, (name, role))| GatewayMemory {
                name,
                role,
                before: before[index],
                open: while_open[index],
                closed: closed[index],
            })
            .collect(),
        error,
    })
}

// ---------------------------------------------------------------------------
// Output.

fn size_label(bytes: u64) -> String {
    if bytes >= GIB && bytes.is_multiple_of(GIB) {
        format!("{} GiB", bytes / GIB)
    } else {
        format!("{} MiB", bytes / MIB)
    }
}

fn mib(kib: u64) -> String {
    format!("{:.1} MiB", kib as f64 / 1024.0)
}

fn percent(value: Option<f64>) -> String {
    value.map_or_else(|| "-".to_owned(), |v| format!("{v:.0}%"))
}

fn print_report(
    options: &Options,
    bulk: u64,
    flows: &[(&Scenario, Result<Flow>)],
    idle_count: usize,
    idle: &[Idle<'_>],
) {
    let variant = if options.quick { " (--quick)" } else { "" };
    let cores = host_cpu().map_or(0, |cpu| cpu.cores);
    let repeats = options.repeats();
    println!(
        "\n### Bulk throughput: one connection, {} echoed{variant}{}\n",
        size_label(bulk),
        if repeats > 1 {
            format!(", median of {repeats} runs (slowest–fastest)")
        } else {
            String::new()
        }
    );
    println!(
        "| scenario | path | Gbit/s one way | vs direct | time | CPU gateways | CPU harness | CPU host | softirq | other load |"
    );
    println!("|---|---|---:|---:|---:|---|---:|---:|---:|---:|");
    let direct = flows
        .iter()
        .find(|(s, _)| s.name == "direct")
        .and_then(|(_, flow)| flow.as_ref().ok())
        .map_or(f64::NAN, Flow::gbps);
    for (scenario, flow) in flows {
        let Ok(flow) = flow else {
            println!(
                "| {} | {} | failed | | | | | | | |",
                scenario.name, scenario.path
            );
            continue;
        };
        let gateways: Vec<String> = scenario
            .gateways
            .iter()
            .map(|(name, _)| format!("{name} {}", percent(flow.cpu_of(name))))
            .collect();
        let spread = match (flow.runs.first(), flow.runs.last()) {
            (Some(slowest), Some(fastest)) if flow.runs.len() > 1 => {
                format!(" ({slowest:.2}–{fastest:.2})")
            }
            _ => String::new(),
        };
        println!(
            "| {} | {} | {:.2}{spread} | {:.0}% | {:.2} s | {} | {} | {} | {} | {} |",
            scenario.name,
            scenario.path,
            flow.gbps(),
            flow.gbps() / direct * 100.0,
            flow.elapsed.as_secs_f64(),
            if gateways.is_empty() {
                "-".to_owned()
            } else {
                gateways.join(", ")
            },
            percent(flow.cpu_of("harness")),
            percent(flow.cpu_of("host")),
            percent(flow.cpu_of("host softirq")),
            percent(flow.other_load()),
        );
    }
    println!(
        "\nCPU: % of one core while the (median) flow ran; the host has {cores} cores ({}% is \
         all of them busy). `CPU host` includes softirq time (much of loopback's receive path, \
         billed to no process); `other load` is host CPU used by none of this run's processes \
         (other work on the host, which makes the figures too low).",
        cores * 100
    );
    println!(
        "\n### Idle memory: {idle_count} connections open at once, each after one 4-byte echo, \
         idle {} s{variant}\n",
        IDLE_SETTLE.as_secs()
    );
    println!(
        "| scenario | gateway | role | open | RSS before | RSS while open | KiB per idle connection | RSS 1 s after close |"
    );
    println!("|---|---|---|---:|---:|---:|---:|---:|");
    for idle in idle {
        for gateway in &idle.gateways {
            println!(
                "| {} | {} | {} | {}{} | {} | {} | {:.1} | {} |",
                idle.scenario.name,
                gateway.name,
                gateway.role,
                idle.opened,
                if idle.error.is_some() { " (!)" } else { "" },
                mib(gateway.before),
                mib(gateway.open),
                gateway.per_connection_kib(idle.opened),
                mib(gateway.closed),
            );
        }
    }
}

fn rows(
    bulk: u64,
    flows: &[(&Scenario, Result<Flow>)],
    idle_count: usize,
    idle: &[Idle<'_>],
) -> Vec<Row> {
    let mut rows = Vec::new();
    let mut push = |scenario: &'static str, workload: String, value: f64, unit: &'static str| {
        rows.push(Row {
            scenario,
            workload,
            value,
            unit,
        });
    };
    let workload = format!("bulk echo, one connection, {}", size_label(bulk));
    for (scenario, flow) in flows {
        let Ok(flow) = flow else { continue };
        push(scenario.name, workload.clone(), flow.gbps(), "Gbit/s");
        if let (Some(slowest), Some(fastest), true) =
            (flow.runs.first(), flow.runs.last(), flow.runs.len() > 1)
        {
            push(
                scenario.name,
                format!("{workload}: slowest run"),
                *slowest,
                "Gbit/s",
            );
            push(
                scenario.name,
                format!("{workload}: fastest run"),
                *fastest,
                "Gbit/s",
            );
        }
        let processes = scenario.gateways.iter().map(|(name, _)| *name).chain([
            "harness",
            "host",
            "host softirq",
        ]);
        for process in processes {
            if let Some(cpu) = flow.cpu_of(process) {
                push(
                    scenario.name,
                    format!("{workload}: CPU of {process}"),
                    cpu,
                    "% of one core",
                );
            }
        }
    }
    let workload = format!("{idle_count} idle connections");
    for idle in idle {
        let scenario = idle.scenario.name;
        push(
            scenario,
            format!("{workload}: opened"),
            idle.opened as f64,
            "connections",
        );
        for gateway in &idle.gateways {
            let who = format!("{workload}: {} ({})", gateway.name, gateway.role);
            push(
                scenario,
                who.clone(),
                gateway.per_connection_kib(idle.opened),
                "KiB/connection",
            );
            for (when, kib) in [
                ("RSS before", gateway.before),
                ("RSS while open", gateway.open),
                ("RSS after close", gateway.closed),
            ] {
                push(scenario, format!("{who}: {when}"), kib as f64, "KiB");
            }
        }
    }
    rows
}

fn write_json(path: &Path, rows: &[Row]) -> Result<()> {
    let rows: Vec<serde_json::Value> = rows
        .iter()
        .map(|row| {
            serde_json::json!({
                "scenario": row.scenario,
                "workload": row.workload,
                "value": row.value,
                "unit": row.unit,
            })
        })
        .collect();
    let text = serde_json::to_string_pretty(&rows).map_err(|e| format!("json: {e}"))?;
    std::fs::File::create(path)
        .and_then(|mut file| file.write_all(format!("{text}\n").as_bytes()))
        .map_err(|e| format!("cannot write {}: {e}", path.display()))
}
