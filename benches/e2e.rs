//! Side-by-side end-to-end benchmark: Strait against plain TCP and against
//! HAProxy, every proxy a real process on loopback, in one run.
//!
//! `cargo bench --bench e2e -- [--quick] [--json PATH] [--svg PATH]
//! [--only SCENARIO[,SCENARIO]] [--threads N]`
//!
//! Scenarios (client → echo backend; the backend is an in-process tokio echo
//! server on 127.0.3.10):
//! - `direct`: plain TCP to the backend (the limit);
//! - `strait-direct`: `CONNECT` to one `strait run` gateway (c3), which dials
//!   the backend;
//! - `strait-tunnel-h2`: `CONNECT` to c1, which tunnels over HTTP/2 + mTLS
//!   to c3 (another process), which dials the backend
//!   (`tunnel: {transport: h2}`);
//! - `strait-vip`: the client connects straight to c1-h2's import port for
//!   `app/echo:42` (what kube-proxy's DNAT of the ClusterSetIP hands a pod;
//!   the port is the one `strait imports` prints), no `CONNECT`, and goes
//!   through the same HTTP/2 tunnel as `strait-tunnel-h2`;
//! - `strait-tunnel-quic`: the same over QUIC (`transport: quic`);
//! - `haproxy-tcp`: HAProxy `mode tcp`, one hop (the peer of `strait-direct`);
//! - `haproxy-tls-tunnel`: two HAProxy processes, mutual TLS between them
//!   with the certificates Strait uses (the peer of the tunnels).
//!
//! Workloads, interleaved (each round runs every scenario in turn, so slow
//! drifts of the host's load hit all scenarios alike):
//! - bulk throughput over 1 and over 8 connections (echo checked byte for
//!   byte), Gbit/s, median of the rounds, with CPU per process;
//! - 1 KiB request/response at a fixed rate over a fixed set of connections,
//!   open loop, p50/p99/p99.9 from the scheduled send time (`latency.rs`);
//! - connection rate: connect, 1-byte echo, close, by a few connectors;
//! - idle memory: RSS growth of each proxy process per idle connection, with
//!   10,000 connections open (`--quick`: 1,000).
//!
//! Every proxy process gets the same number of worker threads (`--threads`,
//! default: the host's cores): `TOKIO_WORKER_THREADS` for Strait, `nbthread`
//! for HAProxy. Output: markdown tables on stdout (ratios against `direct`
//! and the HAProxy peer), `--json PATH` rows `{scenario, workload, value,
//! unit}`, an SVG chart (`--svg PATH`; else next to the JSON file; else
//! `target/e2e.svg`, or `target/e2e-quick.svg` for `--quick`).
//!
//! HAProxy comes from Debian's package: installed with apt-get when missing
//! and root; otherwise its scenarios are skipped with a `SKIPPED:` line, but
//! under `CI=true` a missing HAProxy fails the run. Under `cargo test`
//! (no `--bench` argument) this runs `--quick` as a smoke test, which fails
//! unless every scenario produced every figure; it checks no speed.
//! `STRAIT_BENCH_KEEP=1` keeps the temporary directory (configurations,
//! logs). What limits the figures: docs/performance.md.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on what they set up

#[path = "e2e/bulk.rs"]
mod bulk;
#[path = "e2e/clients.rs"]
mod clients;
#[path = "e2e/connrate.rs"]
mod connrate;
#[path = "e2e/cpu.rs"]
mod cpu;
#[path = "common/flags.rs"]
mod flags;
#[path = "e2e/haproxy.rs"]
mod haproxy;
#[path = "e2e/idle.rs"]
mod idle;
#[path = "e2e/latency.rs"]
mod latency;
#[path = "e2e/mixed.rs"]
mod mixed;
#[path = "e2e/processes.rs"]
mod processes;
#[path = "e2e/report.rs"]
mod report;
#[path = "e2e/run.rs"]
mod run;
#[path = "e2e/soak.rs"]
mod soak;
#[path = "../tests/support/mod.rs"]
mod support;
#[path = "e2e/svg.rs"]
mod svg;
#[path = "e2e/topology.rs"]
mod topology;

use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

const AUTHORITY: &str = "echo.app.svc.clusterset.local:42";
const CLUSTERSET: &str = "bench.strait.dev";
const MIB: u64 = 1024 * 1024;
/// Client write and read size of the bulk flows.
const CHUNK: usize = 1024 * 1024;
/// The echo backend's largest buffer (it starts small so idle connections stay cheap).
const ECHO_BUFFER: usize = 256 * 1024;
/// Connections opened at once while setting up the idle ones.
const OPEN_CONCURRENCY: usize = 32;

type Result<T> = std::result::Result<T, String>;

/// One Strait gateway process: its name, the cluster it serves, its address
/// and the configuration directory (`config-h2` or `config-quic`) it reads.
struct GatewaySpec {
    name: &'static str,
    cluster: &'static str,
    ip: Ipv4Addr,
    config: &'static str,
}

const GATEWAYS: [GatewaySpec; 5] = [
    GatewaySpec {
        name: "c3-direct",
        cluster: "c3",
        ip: Ipv4Addr::new(127, 0, 3, 3),
        config: "h2",
    },
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
];

/// The HAProxy processes' addresses: `haproxy-tcp`, hop 1 and hop 2.
const HAPROXY_IPS: [Ipv4Addr; 3] = [
    Ipv4Addr::new(127, 0, 4, 1),
    Ipv4Addr::new(127, 0, 4, 2),
    Ipv4Addr::new(127, 0, 4, 3),
];

fn backend_ip() -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, 3, 10))
}

/// Where a scenario's client connects.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Entry {
    Backend,
    /// `CONNECT` to this Strait gateway.
    Strait(&'static str),
    /// Plain TCP to this Strait gateway's import port for `app/echo:42`.
    Import(&'static str),
    /// Plain TCP to this HAProxy process's frontend.
    HAProxy(&'static str),
}

struct Scenario {
    name: &'static str,
    path: &'static str,
    entry: Entry,
    /// The proxy processes a connection passes, with their role.
    processes: &'static [(&'static str, &'static str)],
    /// The HAProxy scenario this one is compared with.
    peer: Option<&'static str>,
    /// An earlier scenario through the same processes: when it runs too,
    /// idle memory is measured there only (measured again, the processes
    /// would reuse the memory the first measurement freed).
    idle_with: Option<&'static str>,
}

impl Scenario {
    fn haproxy(&self) -> bool {
        matches!(self.entry, Entry::HAProxy(_))
    }
}

const SCENARIOS: [Scenario; 7] = [
    Scenario {
        name: "direct",
        path: "client → backend (plain TCP)",
        entry: Entry::Backend,
        processes: &[],
        peer: None,
        idle_with: None,
    },
    Scenario {
        name: "strait-direct",
        path: "client → CONNECT → c3 → backend",
        entry: Entry::Strait("c3-direct"),
        processes: &[("c3-direct", "gateway")],
        peer: Some("haproxy-tcp"),
        idle_with: None,
    },
    Scenario {
        name: "strait-tunnel-h2",
        path: "client → CONNECT → c1 → HTTP/2+mTLS → c3 → backend",
        entry: Entry::Strait("c1-h2"),
        processes: &[("c1-h2", "tunnel client"), ("c3-h2", "tunnel server")],
        peer: Some("haproxy-tls-tunnel"),
        idle_with: None,
    },
    Scenario {
        name: "strait-vip",
        path: "client → c1 import port → HTTP/2+mTLS → c3 → backend",
        entry: Entry::Import("c1-h2"),
        processes: &[("c1-h2", "tunnel client"), ("c3-h2", "tunnel server")],
        peer: Some("haproxy-tls-tunnel"),
        idle_with: Some("strait-tunnel-h2"),
    },
    Scenario {
        name: "strait-tunnel-quic",
        path: "client → CONNECT → c1 → QUIC → c3 → backend",
        entry: Entry::Strait("c1-quic"),
        processes: &[("c1-quic", "tunnel client"), ("c3-quic", "tunnel server")],
        peer: Some("haproxy-tls-tunnel"),
        idle_with: None,
    },
    Scenario {
        name: "haproxy-tcp",
        path: "client → HAProxy (mode tcp) → backend",
        entry: Entry::HAProxy("haproxy-tcp"),
        processes: &[("haproxy-tcp", "proxy")],
        peer: None,
        idle_with: None,
    },
    Scenario {
        name: "haproxy-tls-tunnel",
        path: "client → HAProxy hop 1 → mTLS → HAProxy hop 2 → backend",
        entry: Entry::HAProxy("haproxy-hop1"),
        processes: &[
            ("haproxy-hop1", "TLS client hop"),
            ("haproxy-hop2", "TLS server hop"),
        ],
        peer: None,
        idle_with: None,
    },
];

/// The scenarios the soak runs unless `--only` says otherwise: the paths
/// through Strait's tunnels.
const SOAKED: [&str; 2] = ["strait-tunnel-h2", "strait-tunnel-quic"];

#[derive(Clone)]
struct Options {
    quick: bool,
    /// Run the soak (`soak.rs`) instead of the measurements.
    soak: bool,
    /// Run by `cargo test` (no `--bench` argument): the quick variant as a smoke test.
    as_test: bool,
    json: Option<PathBuf>,
    svg: Option<PathBuf>,
    /// Scenario names to run; empty: all.
    only: Vec<String>,
    threads: usize,
}

impl Options {
    fn parse() -> Result<Options> {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        let mut options = Options {
            quick: false,
            soak: false,
            as_test: true,
            json: None,
            svg: None,
            only: Vec::new(),
            threads: cores,
        };
        flags::parse(|flag, value| {
            match flag {
                "--quick" => options.quick = true,
                "--soak" => options.soak = true,
                // `cargo bench` passes it; `cargo test` runs benches without it.
                "--bench" => options.as_test = false,
                "--json" => options.json = Some(PathBuf::from(value.text("--json PATH")?)),
                "--svg" => options.svg = Some(PathBuf::from(value.text("--svg PATH")?)),
                "--only" => options.only.extend(value.list("--only SCENARIO")?),
                "--threads" => options.threads = value.number("--threads N")?,
                _ => {}
            }
            Ok(())
        })?;
        for name in &options.only {
            if !SCENARIOS.iter().any(|s| s.name == name) {
                let known: Vec<&str> = SCENARIOS.iter().map(|s| s.name).collect();
                return Err(format!(
                    "--only: no scenario {name:?} (known: {})",
                    known.join(", ")
                ));
            }
        }
        if options.as_test {
            options.quick = true;
        }
        if options.soak && options.only.is_empty() {
            options.only = SOAKED.iter().map(|name| (*name).to_owned()).collect();
        }
        Ok(options)
    }

    /// The soak with this run's other settings, through the Strait tunnels.
    fn soak_variant(&self) -> Options {
        Options {
            soak: true,
            only: SOAKED.iter().map(|name| (*name).to_owned()).collect(),
            ..self.clone()
        }
    }

    /// Rounds of the soak, each through every scenario.
    fn soak_rounds(&self) -> usize {
        if self.quick { 2 } else { 10 }
    }

    fn selected(&self, scenario: &Scenario) -> bool {
        self.only.is_empty() || self.only.iter().any(|name| name == scenario.name)
    }

    /// Bytes echoed per bulk round (split over the streams).
    fn bulk_bytes(&self) -> u64 {
        if self.quick { 16 * MIB } else { 512 * MIB }
    }

    /// Measured rounds of each workload.
    fn rounds(&self) -> usize {
        if self.quick { 1 } else { 3 }
    }

    fn latency(&self) -> latency::LatencyPlan {
        latency::LatencyPlan {
            connections: 50,
            rate: 5_000,
            duration: if self.quick {
                Duration::from_millis(500)
            } else {
                Duration::from_secs(2)
            },
            stall: None,
        }
    }

    fn connectors(&self) -> usize {
        8
    }

    fn rate_duration(&self) -> Duration {
        if self.quick {
            Duration::from_millis(300)
        } else {
            Duration::from_secs(2)
        }
    }

    fn idle_connections(&self) -> usize {
        if self.quick { 1_000 } else { 10_000 }
    }

    fn idle_settle(&self) -> Duration {
        if self.quick {
            Duration::from_millis(500)
        } else {
            Duration::from_secs(2)
        }
    }

    /// Where the chart goes.
    fn svg_path(&self) -> PathBuf {
        if let Some(path) = &self.svg {
            return path.clone();
        }
        if let Some(json) = &self.json {
            return json.with_extension("svg");
        }
        let name = if self.quick {
            "e2e-quick.svg"
        } else {
            "e2e.svg"
        };
        topology::target_dir().join(name)
    }
}

fn main() -> ExitCode {
    let options = match Options::parse() {
        Ok(options) => options,
        Err(error) => {
            eprintln!("e2e bench: {error}");
            return ExitCode::FAILURE;
        }
    };
    if options.as_test {
        println!(
            "e2e bench: no --bench argument, so running as a test (the quick variant); \
             `cargo bench --bench e2e` measures"
        );
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("e2e bench: cannot start the tokio runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    let limit = if options.quick {
        Duration::from_secs(180)
    } else {
        Duration::from_secs(900)
    };
    let outcome = runtime.block_on(async {
        let timed = |options: Options| async move {
            match tokio::time::timeout(limit, run::run(&options)).await {
                Ok(outcome) => outcome,
                Err(_) => Err(format!("the whole run took longer than {limit:?}")),
            }
        };
        timed(options.clone()).await?;
        // As a test, the quick soak follows the quick measurements.
        if options.as_test && !options.soak {
            timed(options.soak_variant()).await?;
        }
        Ok::<_, String>(())
    });
    runtime.shutdown_timeout(Duration::from_secs(2));
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("e2e bench: error: {error}");
            ExitCode::FAILURE
        }
    }
}
