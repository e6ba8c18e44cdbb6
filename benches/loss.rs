//! Tunnel latency and bulk throughput under 1% random packet loss on the
//! WAN, HTTP/2 and QUIC side by side: real `strait run` gateways in Linux
//! network namespaces, built with the harness of `tests/netns/`.
//!
//! ```text
//! client 10.10.0.11 ── 10.10.0.201 near (c1, net-a) 172.31.0.11 ══ WAN ══
//!     172.31.0.21 far (c2, net-b) 10.20.0.201 ── 10.20.0.11 pod (echo)
//! ```
//!
//! Five namespaces `slNNNN-*` joined by veth pairs. c2 exports `app/echo` on
//! the pod; the client sends `CONNECT echo.app.svc.clusterset.local:42` to
//! the near gateway, which tunnels to the far one. Loss: an iptables
//! `statistic` DROP rule (probability 0.01) on INPUT of `wan0` in both
//! gateway namespaces, so 1% each way; `wan0` has `gso_max_segs 1`
//! throughout, so a WAN packet is one segment (checked: drop ratio, average
//! packet size).
//!
//! For `tunnel.transport: h2`, then `quic` (both gateways restarted), each
//! without loss and then with 1% loss:
//! - **latency**: 100 connections open at once through one tunnel, each
//!   doing 50 (`--quick`: 5) rounds of a 1 KiB write and its echo, all at
//!   the same time: p50/p99/p99.9/max of one exchange;
//! - **bulk**: one connection echoing 256 MiB (`--quick`: 16 MiB), checked
//!   byte for byte: Gbit/s one way, and each gateway's CPU.
//!
//! The run fails unless both gateways counted exactly these connections, all
//! with the transport measured (`strait_connections_opened_total`, paths
//! `tunnel` and `inbound`).
//!
//! `cargo bench --bench loss` (under a minute), `-- --quick`, `--json PATH`
//! (`[{"scenario","workload","value","unit"}]` rows). Needs root (or
//! CAP_SYS_ADMIN and CAP_NET_ADMIN), `ip` and `iptables`. Under `cargo test`
//! (no `--bench`) it runs the quick variant, or prints `SKIPPED: …` and
//! passes when it cannot; with `CI=true` and root it must run. Namespaces
//! and gateways go away on every exit (Drop guards, also on panic and
//! Ctrl-C); `STRAIT_BENCH_KEEP=1` keeps the gateways' logs. What limits the
//! figures: docs/performance.md.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on what they set up

#[path = "../tests/netns/mod.rs"]
#[allow(dead_code)]
mod netns;
#[path = "../tests/support/mod.rs"]
mod support;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use netns::backend::{Backend, POD_PORT};
use netns::client;
use netns::gateway::{GatewayProcess, GatewaySpec, Scrape};
use netns::scenario::{EARLY, ECHO, TCP_42, wan_counters};
use netns::sys;
use support::{Pod, ServiceSpec};
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::task::JoinSet;

type Result<T> = std::result::Result<T, String>;

const TRANSPORTS: [&str; 2] = ["h2", "quic"];
const STREAMS: usize = 100;
const MESSAGE: usize = 1024;
const LOSS: &str = "0.01";
const MIB: u64 = 1024 * 1024;
/// Client write and read size of the bulk flow.
const CHUNK: usize = 256 * 1024;
/// Longest any one measurement may take.
const PHASE_LIMIT: Duration = Duration::from_secs(180);
const CLIENT: Ipv4Addr = Ipv4Addr::new(10, 10, 0, 11);
const NEAR_POD: Ipv4Addr = Ipv4Addr::new(10, 10, 0, 201);
const NEAR_WAN: Ipv4Addr = Ipv4Addr::new(172, 31, 0, 11);
const FAR_WAN: Ipv4Addr = Ipv4Addr::new(172, 31, 0, 21);
const FAR_POD: Ipv4Addr = Ipv4Addr::new(10, 20, 0, 201);
const POD: Ipv4Addr = Ipv4Addr::new(10, 20, 0, 11);
const OPENED: &str = "strait_connections_opened_total";

struct Options {
    quick: bool,
    /// Run by `cargo test` (no `--bench` argument): the quick variant.
    as_test: bool,
    json: Option<PathBuf>,
}

impl Options {
    fn parse() -> Result<Options> {
        let (mut quick, mut as_test, mut json) = (false, true, None);
        let mut args = std::env::args().skip(1);
        while let Some(arg) = args.next() {
            match arg.as_str() {
                "--quick" => quick = true,
                // `cargo bench` passes it; `cargo test` runs benches without it.
                "--bench" => as_test = false,
                "--json" => json = Some(args.next().ok_or("--json needs a PATH")?.into()),
                other => json = other.strip_prefix("--json=").map(PathBuf::from).or(json),
            }
        }
        let quick = quick || as_test;
        Ok(Options {
            quick,
            as_test,
            json,
        })
    }

    fn rounds(&self) -> usize {
        if self.quick { 5 } else { 50 }
    }

    fn bulk_bytes(&self) -> u64 {
        if self.quick { 16 * MIB } else { 256 * MIB }
    }
}

/// Why this process cannot build namespaces and drop packets, if it cannot.
fn cannot_run() -> Option<String> {
    let ip = || sys::ip(&["-V"]).map_err(|e| format!("no usable `ip` (install iproute2): {e}"));
    let iptables = || {
        sys::run("iptables", &["-V"])
            .map_err(|e| format!("no usable `iptables` (install iptables): {e}"))
    };
    sys::privileged()
        .and_then(|()| ip())
        .and_then(|_| iptables())
        .err()
}

fn main() -> ExitCode {
    start().unwrap_or_else(|error| {
        eprintln!("loss bench: error: {error}");
        ExitCode::FAILURE
    })
}

fn start() -> Result<ExitCode> {
    let options = Options::parse()?;
    if let Some(reason) = cannot_run() {
        let ci = std::env::var("CI").is_ok_and(|v| v == "true");
        if options.as_test && !(ci && sys::privileged().is_ok()) {
            eprintln!("SKIPPED: loss bench (benches/loss.rs): {reason}");
            return Ok(ExitCode::SUCCESS);
        }
        return Err(format!("cannot run: {reason}"));
    }
    if options.as_test {
        println!(
            "loss bench: no --bench argument, so running as a test (the quick variant); \
             `cargo bench --bench loss` measures"
        );
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the tokio runtime: {e}"))?;
    let limit = Duration::from_secs(if options.quick { 120 } else { 1200 });
    // Whatever ends the run, `run`'s future is dropped inside `block_on`,
    // and with it the lab: gateways killed, namespaces deleted.
    let outcome = runtime.block_on(async {
        tokio::select! {
            outcome = tokio::time::timeout(limit, run(&options)) => outcome
                .unwrap_or_else(|_| Err(format!("the whole run took longer than {limit:?}"))),
            _ = tokio::signal::ctrl_c() => Err("interrupted".to_owned()),
        }
    });
    runtime.shutdown_timeout(Duration::from_secs(2));
    outcome.map(|()| ExitCode::SUCCESS)
}

/// The namespaces of one run; deleted (with any process inside) on drop.
struct Namespaces {
    names: Vec<String>,
}

impl Namespaces {
    fn add(&mut self, name: String) -> Result<()> {
        sys::ip(&["netns", "add", &name])?;
        self.names.push(name.clone());
        sys::ip(&["-n", &name, "link", "set", "lo", "up"]).map(drop)
    }

    fn teardown(&mut self) -> Result<()> {
        for pid in self.names.iter().flat_map(|ns| sys::pids_in(ns)) {
            if let Ok(pid) = u32::try_from(pid) {
                let _ = sys::signal(pid, sys::SIGKILL);
            }
        }
        let errors: Vec<String> = self
            .names
            .iter()
            .filter_map(|ns| sys::ip(&["netns", "del", ns]).err())
            .collect();
        let left: Vec<String> = sys::namespaces()?
            .into_iter()
            .filter(|ns| self.names.contains(ns))
            .collect();
        self.names.clear();
        if left.is_empty() && errors.is_empty() {
            return Ok(());
        }
        Err(format!("namespaces left: {left:?}; {}", errors.join("; ")))
    }
}

impl Drop for Namespaces {
    fn drop(&mut self) {
        if let Err(error) = self.teardown() {
            eprintln!("loss bench: CLEANUP FAILED: {error}");
        }
    }
}

/// A veth pair: `a_if` with `a_ip`/24 in `a`, `b_if` with `b_ip`/24 in `b`.
fn link(a: &str, a_if: &str, a_ip: Ipv4Addr, b: &str, b_if: &str, b_ip: Ipv4Addr) -> Result<()> {
    sys::ip(&[
        "-n", a, "link", "add", a_if, "type", "veth", "peer", "name", b_if, "netns", b,
    ])?;
    for (ns, interface, address) in [(a, a_if, a_ip), (b, b_if, b_ip)] {
        let address = format!("{address}/24");
        sys::ip(&["-n", ns, "addr", "add", &address, "dev", interface])?;
        sys::ip(&["-n", ns, "link", "set", interface, "up"])?;
    }
    Ok(())
}

/// `sl` and the pid modulo 10000, moved on past namespaces already there.
fn prefix() -> Result<String> {
    let existing = sys::namespaces()?;
    let pid = std::process::id();
    (0..10_000)
        .map(|k| format!("sl{:04}", (pid + k) % 10_000))
        .find(|p| !existing.iter().any(|ns| ns.starts_with(&format!("{p}-"))))
        .ok_or_else(|| "no free namespace prefix sl0000..sl9999".to_owned())
}

/// The `strait` binary `cargo bench` built; built here if it is missing.
fn strait_binary() -> Result<&'static str> {
    let binary = env!("CARGO_BIN_EXE_strait");
    if !Path::new(binary).exists() {
        let manifest = concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml");
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
        let args: Vec<&str> = "build --release --bin strait --manifest-path"
            .split(' ')
            .collect();
        sys::run(&cargo, &[&args[..], &[manifest]].concat())?;
    }
    if !Path::new(binary).exists() {
        return Err(format!("{binary} is missing after `cargo build --release`"));
    }
    Ok(binary)
}

/// The running topology (fields drop in order: gateways, pod, namespaces, files).
struct Lab {
    near: GatewayProcess,
    far: GatewayProcess,
    _pod: Backend,
    net: Namespaces,
    client: String,
    gateway_ns: [String; 2],
    config: PathBuf,
    _dir: tempfile::TempDir,
}

impl Lab {
    async fn build() -> Result<Lab> {
        let prefix = prefix()?;
        let ns = |role: &str| format!("{prefix}-{role}");
        let mut net = Namespaces { names: Vec::new() };
        for role in ["client", "near", "far", "pod"] {
            net.add(ns(role))?;
        }
        let (client, near, far, pod) = (ns("client"), ns("near"), ns("far"), ns("pod"));
        link(&client, "eth0", CLIENT, &near, "pod0", NEAR_POD)?;
        link(&near, "wan0", NEAR_WAN, &far, "wan0", FAR_WAN)?;
        link(&far, "pod0", FAR_POD, &pod, "eth0", POD)?;
        for gateway in [&near, &far] {
            sys::ip(&["-n", gateway, "link", "set", "wan0", "gso_max_segs", "1"])?;
            sys::iptables(gateway, &["-A", "INPUT", "-i", "wan0"])?;
        }

        let mut dir = tempfile::Builder::new()
            .prefix(&format!("{prefix}-"))
            .tempdir()
            .map_err(|e| format!("temporary directory: {e}"))?;
        if std::env::var("STRAIT_BENCH_KEEP").is_ok_and(|v| !v.is_empty() && v != "0") {
            dir.disable_cleanup(true);
            println!("loss bench: keeping {}", dir.path().display());
        }
        let certs = dir.path().join("certs");
        let out = certs.display().to_string();
        let mut args: Vec<&str> = "certs --cluster c1 --cluster c2 --out".split(' ').collect();
        args.extend([&out, "--clusterset", netns::world::CLUSTERSET]);
        sys::run(strait_binary()?, &args)?;
        let config = dir.path().join("config");
        let echo = ServiceSpec {
            namespace: "app",
            name: "echo",
            ports: TCP_42,
            exported_at: EARLY,
            pods: vec![Pod::ready(IpAddr::V4(POD))],
            proxy_protocol: false,
            udp_ports: &[],
        };
        for (id, network, wan, services) in [
            ("c1", "net-a", NEAR_WAN, Vec::new()),
            ("c2", "net-b", FAR_WAN, vec![echo]),
        ] {
            let (gateways, port) = ([IpAddr::V4(wan)], netns::gateway::TUNNEL_PORT);
            let yaml = support::cluster_yaml_with_gateways(id, network, &gateways, port, &services);
            support::write_cluster(&config, id, &yaml);
        }
        let gateway = |name: &str, cluster: &str, namespace: &str, pod_side, wan| {
            let (connect, tunnel, admin) = GatewayProcess::addresses(pod_side, wan);
            GatewayProcess::new(GatewaySpec {
                name: name.to_owned(),
                namespace: namespace.to_owned(),
                cluster,
                config: &config,
                tls_dir: certs.join(cluster),
                connect,
                tunnel,
                admin,
                log_dir: dir.path(),
            })
        };
        Ok(Lab {
            near: gateway("near", "c1", &near, NEAR_POD, NEAR_WAN),
            far: gateway("far", "c2", &far, FAR_POD, FAR_WAN),
            _pod: Backend::start("c2-pod1", &pod, SocketAddr::from((POD, POD_PORT)))?,
            net,
            client,
            gateway_ns: [near, far],
            config,
            _dir: dir,
        })
    }

    /// (Re)starts both gateways with `tunnel.transport: transport` and
    /// waits until one connection got through.
    async fn start_gateways(&mut self, transport: &str) -> Result<()> {
        self.near.kill();
        self.far.kill();
        let settings =
            format!("tuning: {{connectTimeout: 2s}}\ntunnel: {{transport: {transport}}}\n");
        std::fs::write(self.config.join("gateway.yaml"), settings)
            .map_err(|e| format!("gateway.yaml: {e}"))?;
        self.near.spawn()?;
        self.far.spawn()?;
        self.near.wait_ready(Duration::from_secs(20)).await?;
        self.far.wait_ready(Duration::from_secs(20)).await?;
        let started = Instant::now();
        loop {
            match self.open().await {
                Ok(_) => return Ok(()),
                Err(error) if started.elapsed() > Duration::from_secs(15) => {
                    return Err(format!("no connection through the tunnel in 15 s: {error}"));
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    }

    /// Adds or removes the 1% DROP rule on both gateways' `wan0`.
    fn loss(&self, on: bool) -> Result<()> {
        let rule = "INPUT -i wan0 -m statistic --mode random --probability";
        for ns in &self.gateway_ns {
            let mut args = vec![if on { "-A" } else { "-D" }];
            args.extend(rule.split(' ').chain([LOSS, "-j", "DROP"]));
            sys::iptables(ns, &args)?;
        }
        Ok(())
    }

    fn zero_wan_counters(&self) -> Result<()> {
        for ns in &self.gateway_ns {
            sys::iptables(ns, &["-Z", "INPUT"])?;
        }
        Ok(())
    }

    /// WAN packets, dropped packets and bytes since the last zeroing (both
    /// directions); fails unless about 1% of single-segment packets were dropped.
    fn wan(&self, what: &str) -> Result<Wan> {
        let mut wan = Wan::default();
        for (all, dropped, bytes) in self.gateway_ns.iter().map(|ns| wan_counters(ns)) {
            wan.packets += all;
            wan.dropped += dropped;
            wan.bytes += bytes;
        }
        let average = wan.bytes / wan.packets.max(1);
        if (0.003..0.03).contains(&wan.ratio()) && average <= 1600 {
            return Ok(wan);
        }
        Err(format!(
            "{what}: the WAN dropped {} of {} packets ({:.2}%, average {average} bytes): \
             not 1% random loss of single segments",
            wan.dropped,
            wan.packets,
            wan.ratio() * 100.0
        ))
    }

    /// A CONNECT through the near gateway; the pod must have been dialled by the far one.
    async fn open(&self) -> Result<BufReader<TcpStream>> {
        let (greeting, stream) = client::open(&self.client, self.near.connect, ECHO).await?;
        if greeting.peer != IpAddr::V4(FAR_POD) {
            return Err(format!("not dialled by the far gateway: {greeting:?}"));
        }
        Ok(stream)
    }

    fn print_logs(&self) {
        for gateway in [&self.near, &self.far] {
            eprintln!("---- last lines of the {} gateway's log ----", gateway.name);
            eprintln!("{}", gateway.log_tail(15));
        }
    }
}

#[derive(Default, Clone, Copy)]
struct Wan {
    packets: u64,
    dropped: u64,
    bytes: u64,
}

impl Wan {
    fn ratio(&self) -> f64 {
        self.dropped as f64 / self.packets.max(1) as f64
    }
}

struct Latency {
    /// Every exchange's latency, sorted.
    micros: Vec<u64>,
    elapsed: Duration,
    /// `strait_tunnel_pool_connections` of the near gateway while all streams were open.
    tunnels: f64,
    wan: Option<Wan>,
}

impl Latency {
    /// Exchanges that took 50 ms or more: stalls, not queueing.
    fn slow(&self) -> usize {
        self.micros.iter().filter(|&&us| us >= 50_000).count()
    }

    /// Nearest-rank percentile.
    fn percentile(&self, q: f64) -> u64 {
        let rank = (q * self.micros.len() as f64).ceil() as usize;
        self.micros[rank.clamp(1, self.micros.len()) - 1]
    }
}

/// The bytes of message `round` of stream `index`.
fn message(index: usize, round: usize) -> Vec<u8> {
    (0..MESSAGE)
        .map(|i| (i * 7 + index * 13 + round) as u8)
        .collect()
}

/// 100 connections at once, then `rounds` timed 1 KiB echoes on each, all together.
async fn latency(lab: &Lab, rounds: usize) -> Result<Latency> {
    let opening = (0..STREAMS).map(|_| lab.open());
    let streams = futures_util::future::try_join_all(opening).await?;
    let scrape = lab.near.metrics().await?;
    let tunnels = scrape.sum("strait_tunnel_pool_connections", &[]);
    let barrier = Arc::new(tokio::sync::Barrier::new(STREAMS + 1));
    let mut running = JoinSet::new();
    for (index, mut stream) in streams.into_iter().enumerate() {
        let barrier = barrier.clone();
        running.spawn(async move {
            barrier.wait().await;
            let mut micros = Vec::with_capacity(rounds);
            let mut back = vec![0u8; MESSAGE];
            for round in 0..rounds {
                let sent = message(index, round);
                let started = Instant::now();
                let failed = |e| format!("stream {index} round {round}: {e}");
                stream.get_mut().write_all(&sent).await.map_err(failed)?;
                stream.read_exact(&mut back).await.map_err(failed)?;
                micros.push(started.elapsed().as_micros() as u64);
                if back != sent {
                    return Err(format!("stream {index} round {round}: echo differs"));
                }
            }
            Ok::<_, String>(micros)
        });
    }
    barrier.wait().await;
    let started = Instant::now();
    let mut micros = Vec::with_capacity(STREAMS * rounds);
    while let Some(joined) = running.join_next().await {
        micros.extend(joined.map_err(|e| format!("stream task: {e}"))??);
    }
    let elapsed = started.elapsed();
    micros.sort_unstable();
    let wan = None;
    Ok(Latency {
        micros,
        elapsed,
        tunnels,
        wan,
    })
}

struct Bulk {
    bytes: u64,
    elapsed: Duration,
    /// % of one core: near gateway, far gateway, this process.
    cpu: [f64; 3],
    wan: Option<Wan>,
}

impl Bulk {
    fn gbps(&self) -> f64 {
        self.bytes as f64 * 8.0 / self.elapsed.as_secs_f64() / 1e9
    }
}

/// User plus system CPU time of a process (`None`: this one), in seconds.
fn cpu_seconds(pid: Option<u32>) -> f64 {
    let path = pid.map_or("/proc/self/stat".to_owned(), |p| format!("/proc/{p}/stat"));
    let stat = std::fs::read_to_string(path).unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest)
        .map_or(Vec::new(), |rest| rest.split_whitespace().collect());
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok());
    // utime and stime are fields 14 and 15 of stat(5); USER_HZ is 100 on Linux.
    ticks(11)
        .zip(ticks(12))
        .map_or(f64::NAN, |(u, s)| (u + s) / 100.0)
}

/// One connection echoing `total` bytes, written and read at the same time;
/// byte `i` of the flow is `i % 251`.
async fn bulk(lab: &Lab, total: u64) -> Result<Bulk> {
    let stream = lab.open().await?;
    if !stream.buffer().is_empty() {
        return Err("bytes after the greeting before anything was sent".to_owned());
    }
    let (mut read, mut write) = stream.into_inner().into_split();
    let pids = [lab.near.pid(), lab.far.pid(), None];
    let cpu_before = pids.map(cpu_seconds);
    let pattern: Arc<Vec<u8>> = Arc::new((0..CHUNK + 251).map(|i| (i % 251) as u8).collect());
    let started = Instant::now();
    let sent = pattern.clone();
    let writer = tokio::spawn(async move {
        let mut offset = 0u64;
        while offset < total {
            let n = (total - offset).min(CHUNK as u64) as usize;
            let start = (offset % 251) as usize;
            write.write_all(&sent[start..start + n]).await?;
            offset += n as u64;
        }
        write.shutdown().await
    });
    let mut buffer = vec![0u8; CHUNK];
    let mut received = 0u64;
    loop {
        let n = read
            .read(&mut buffer)
            .await
            .map_err(|e| format!("read the echo after {received} bytes: {e}"))?;
        if n == 0 {
            break;
        }
        let start = (received % 251) as usize;
        if buffer[..n] != pattern[start..start + n] {
            return Err(format!("the echo differs within bytes {received}..+{n}"));
        }
        received += n as u64;
    }
    let elapsed = started.elapsed();
    let written = writer.await.map_err(|e| format!("writer task: {e}"))?;
    written.map_err(|e| format!("write the flow: {e}"))?;
    if received != total {
        return Err(format!("{received} bytes echoed, not {total}"));
    }
    let cpu_after = pids.map(cpu_seconds);
    let cpu = [0, 1, 2].map(|i| (cpu_after[i] - cpu_before[i]) / elapsed.as_secs_f64() * 100.0);
    let (bytes, wan) = (total, None);
    Ok(Bulk {
        bytes,
        elapsed,
        cpu,
        wan,
    })
}
/// What one transport measured with or without loss.
struct Phase {
    transport: &'static str,
    lossy: bool,
    latency: Latency,
    bulk: Bulk,
}

impl Phase {
    fn label(&self) -> String {
        let transport = if self.transport == "quic" {
            "QUIC"
        } else {
            "h2"
        };
        format!("{transport}, {}", self.loss())
    }

    fn loss(&self) -> &'static str {
        if self.lossy { "1% WAN loss" } else { "no loss" }
    }

    fn latency_cells(&self) -> Vec<String> {
        let latency = &self.latency;
        let rate = latency.micros.len() as f64 / latency.elapsed.as_secs_f64();
        let mut cells: Vec<String> = QUANTILES
            .iter()
            .map(|(_, q)| latency.percentile(*q).to_string())
            .collect();
        cells.extend([
            format!("{rate:.0}"),
            latency.slow().to_string(),
            latency.tunnels.to_string(),
            dropped(latency.wan),
        ]);
        cells
    }

    fn bulk_cells(&self) -> Vec<String> {
        let bulk = &self.bulk;
        let mut cells = vec![
            format!("{:.2}", bulk.gbps()),
            format!("{:.2} s", bulk.elapsed.as_secs_f64()),
        ];
        cells.extend(bulk.cpu.iter().map(|cpu| format!("{cpu:.0}%")));
        cells.push(dropped(bulk.wan));
        cells
    }
}

const QUANTILES: [(&str, f64); 4] = [("p50", 0.5), ("p99", 0.99), ("p99.9", 0.999), ("max", 1.0)];
const LATENCY_ROWS: &str = "p50 (µs)|p99 (µs)|p99.9 (µs)|max (µs)|exchanges/s|exchanges ≥ 50 ms|\
                            tunnel connections|WAN packets dropped";
const BULK_ROWS: &str = "Gbit/s one way|time|CPU near gateway|CPU far gateway|\
                         CPU client + pod (bench)|WAN packets dropped";

async fn phase<T>(what: &str, future: impl Future<Output = Result<T>>) -> Result<T> {
    match tokio::time::timeout(PHASE_LIMIT, future).await {
        Ok(result) => result.map_err(|e| format!("{what}: {e}")),
        Err(_) => Err(format!("{what}: took longer than {PHASE_LIMIT:?}")),
    }
}

/// The tunnel connections a gateway counted, by transport.
fn by_transport(scrape: &Scrape, path: &str) -> [f64; 2] {
    TRANSPORTS.map(|t| scrape.sum(OPENED, &[("path", path), ("transport", t)]))
}

/// Both phases of one transport, and the check that it was that transport.
async fn measure(lab: &mut Lab, transport: &'static str, options: &Options) -> Result<Vec<Phase>> {
    lab.start_gateways(transport).await?;
    let before = (lab.near.metrics().await?, lab.far.metrics().await?);
    let mut phases = Vec::new();
    for lossy in [false, true] {
        let label = |what: &str| format!("{transport}, loss {lossy}, {what}");
        let wan = |what| lossy.then(|| lab.wan(&label(what))).transpose();
        if lossy {
            lab.loss(true)?;
        }
        lab.zero_wan_counters()?;
        let mut latency = phase(&label("latency"), latency(lab, options.rounds())).await?;
        latency.wan = wan("latency")?;
        lab.zero_wan_counters()?;
        let mut bulk = phase(&label("bulk"), bulk(lab, options.bulk_bytes())).await?;
        bulk.wan = wan("bulk")?;
        if lossy {
            lab.loss(false)?;
        }
        phases.push(Phase {
            transport,
            lossy,
            latency,
            bulk,
        });
    }
    let after = (lab.near.metrics().await?, lab.far.metrics().await?);
    let expected = 2.0 * (STREAMS as f64 + 1.0);
    let wanted = TRANSPORTS.map(|t| if t == transport { expected } else { 0.0 });
    for (who, path, before, after) in [
        ("near", "tunnel", &before.0, &after.0),
        ("far", "inbound", &before.1, &after.1),
    ] {
        let (b, a) = (by_transport(before, path), by_transport(after, path));
        let delta = [a[0] - b[0], a[1] - b[1]];
        if delta != wanted {
            return Err(format!(
                "measuring {transport}: the {who} gateway counted {} path=\"{path}\" connections \
                 over h2 and {} over quic, not {expected} over {transport} only",
                delta[0], delta[1]
            ));
        }
    }
    Ok(phases)
}

async fn run(options: &Options) -> Result<()> {
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let load: Vec<&str> = load.split_whitespace().take(3).collect();
    println!(
        "loss bench: {} cores, load average {}",
        cores(),
        load.join(" ")
    );
    let mut lab = Lab::build().await?;
    let mut phases = Vec::new();
    for transport in TRANSPORTS {
        match measure(&mut lab, transport, options).await {
            Ok(measured) => phases.extend(measured),
            Err(error) => {
                lab.print_logs();
                return Err(error);
            }
        }
    }
    lab.near.kill();
    lab.far.kill();
    lab.net.teardown()?;
    // Columns: no loss first, h2 before QUIC.
    phases.sort_by_key(|p| p.lossy);
    print_report(options, &phases);
    if let Some(path) = &options.json {
        write_json(path, &rows(options, &phases))?;
    }
    Ok(())
}

fn cores() -> usize {
    std::thread::available_parallelism().map_or(0, |n| n.get())
}

fn dropped(wan: Option<Wan>) -> String {
    wan.map_or("-".to_owned(), |w| {
        format!("{:.2}% of {}", w.ratio() * 100.0, w.packets)
    })
}

fn print_table(title: &str, header: &[String], rows: &str, columns: &[Vec<String>]) {
    println!("\n### {title}\n\n| | {} |", header.join(" | "));
    println!("|---|{}", "---:|".repeat(header.len()));
    for (index, label) in rows.split('|').enumerate() {
        let cells: Vec<&str> = columns.iter().map(|c| c[index].as_str()).collect();
        println!("| {label} | {} |", cells.join(" | "));
    }
}

fn print_report(options: &Options, phases: &[Phase]) {
    let header: Vec<String> = phases.iter().map(Phase::label).collect();
    let variant = if options.quick { " (--quick)" } else { "" };
    let title = format!(
        "Latency: {STREAMS} concurrent streams through one tunnel, {MESSAGE} B echo × {} \
         rounds each{variant}",
        options.rounds()
    );
    let latency: Vec<Vec<String>> = phases.iter().map(Phase::latency_cells).collect();
    print_table(&title, &header, LATENCY_ROWS, &latency);
    let title = format!(
        "Bulk: one connection, {} MiB echoed{variant}",
        options.bulk_bytes() / MIB
    );
    let bulk: Vec<Vec<String>> = phases.iter().map(Phase::bulk_cells).collect();
    print_table(&title, &header, BULK_ROWS, &bulk);
    println!(
        "\nCPU: % of one core while the flow ran (the host has {} cores).",
        cores()
    );
}

/// `{scenario, workload, value, unit}` rows of every figure.
fn rows(options: &Options, phases: &[Phase]) -> Vec<serde_json::Value> {
    let mut rows = Vec::new();
    for p in phases {
        let (rounds, loss) = (options.rounds(), p.loss());
        let exchanges = format!("{STREAMS} concurrent streams, {MESSAGE} B echo × {rounds} rounds");
        let mut figures: Vec<(String, f64, &str)> = QUANTILES
            .iter()
            .map(|(name, q)| (name.to_string(), p.latency.percentile(*q) as f64, "µs"))
            .chain([("≥ 50 ms".to_owned(), p.latency.slow() as f64, "exchanges")])
            .map(|(what, value, unit)| (format!("{exchanges}, {loss}: {what}"), value, unit))
            .collect();
        let bulk = format!("bulk echo, one connection, {} MiB", p.bulk.bytes / MIB);
        figures.push((format!("{bulk}, {loss}"), p.bulk.gbps(), "Gbit/s"));
        for (workload, value, unit) in figures {
            let scenario = format!("tunnel-{}", p.transport);
            rows.push(serde_json::json!({
                "scenario": scenario, "workload": workload, "value": value, "unit": unit,
            }));
        }
    }
    rows
}

fn write_json(path: &Path, rows: &[serde_json::Value]) -> Result<()> {
    let text = serde_json::to_string_pretty(rows).map_err(|e| format!("json: {e}"))?;
    std::fs::write(path, text + "\n").map_err(|e| format!("{}: {e}", path.display()))?;
    println!(
        "\nloss bench: wrote {} rows to {}",
        rows.len(),
        path.display()
    );
    Ok(())
}
