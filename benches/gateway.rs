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

use crate::bulk::bulk_flow;
use crate::clients::start_echo_backend;
use crate::cpu::host_cpu;
use crate::idle::idle_memory;
use crate::processes::{Gateways, wait_ready, warm_up};
use crate::report::{print_report, write_json};
use crate::topology::{
    GatewayPorts, check_config, ensure_open_files, strait_binary, write_certificates, write_config,
};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

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

#[path = "gateway/bulk.rs"]
mod bulk;
#[path = "gateway/clients.rs"]
mod clients;
#[path = "gateway/cpu.rs"]
mod cpu;
#[path = "gateway/idle.rs"]
mod idle;
#[path = "gateway/processes.rs"]
mod processes;
#[path = "gateway/report.rs"]
mod report;
#[path = "gateway/topology.rs"]
mod topology;

use crate::report::rows;

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
