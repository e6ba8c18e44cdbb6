//! Strait's `clusterset.local` DNS responder beside NSD serving the same
//! zone, under the same load from `dnsperf`.
//!
//! `cargo bench --bench dns -- [--quick] [--rounds N] [--services N]
//! [--seconds S] [--clients N] [--outstanding N] [--rate QPS]`
//!
//! - **Strait** (`dns/servers.rs`): a file-mode `strait run` (the real
//!   binary) with `--dns-listen 127.0.10.1:PORT`; its cluster c1 (the viewer)
//!   holds a ServiceImport with one ClusterSetIP (`240.x.y.z`) for each of
//!   the N services `ns<i % 50>/svc<i>` that c3 exports (one ready pod each),
//!   `imports.listen: false` (import listeners play no part in DNS),
//!   `TOKIO_WORKER_THREADS=1`.
//! - **NSD** (`nsd -d`, `server-count: 1`, `minimal-responses: yes`) on
//!   127.0.10.2:PORT, with a zone file the bench writes: Strait's SOA (same
//!   timers and TTLs), one NS, and the same N A records with Strait's TTL.
//! - **Load** (`dns/dnsperf.rs`): `dnsperf` over UDP for a fixed time with
//!   a query file of the N names (type A), `-c` clients and `-q`
//!   outstanding queries, one thread: as fast as the server answers, or
//!   with `--rate` at most that many queries/s (`-Q`: latency at equal load).
//!
//! Both servers are pinned (`taskset`) to the first CPU this process may
//! use and dnsperf to the second, when there are two. Both servers run for
//! the whole bench; rounds are interleaved (Strait, NSD, Strait, NSD, ...),
//! each preceded in the full run by an unmeasured warm-up. Before any round
//! a sample of names is asked of both servers and every answer must be the
//! service's VIP; after each round every response must be NOERROR. Reported
//! per round and as medians: queries/s, lost queries, dnsperf's average and
//! maximum latency and its standard deviation (dnsperf 2.10 has no
//! histogram), and the server's CPU time (`/proc/PID/task/*/schedstat`, NSD's
//! processes included), so queries per CPU-second too; then the ratios
//! Strait ÷ NSD.
//!
//! Under `cargo test` (no `--bench` argument) this runs `--quick`: 200
//! services, one round of 2 s each; it checks answers, never speed. A
//! missing `nsd` or `dnsperf` is installed with apt-get when root, else the
//! bench is skipped with a loud line, except under `CI=true`, where that is
//! an error. `STRAIT_BENCH_KEEP=1` keeps the configurations and logs.
//! Figures and what limits them: docs/performance.md.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on what they set up

#[path = "dns/dnsperf.rs"]
mod dnsperf;
#[path = "common/flags.rs"]
#[allow(dead_code, reason = "each bench uses the readers it needs")]
mod flags;
#[path = "dns/servers.rs"]
mod servers;
#[path = "../tests/support/mod.rs"]
mod support;
#[path = "e2e/topology.rs"]
#[allow(dead_code)]
mod topology;

use std::process::ExitCode;
use std::time::{Duration, Instant};

/// The cluster set the certificates (`strait certs`) are made for.
const CLUSTERSET: &str = "bench.strait.dev";

type Result<T> = std::result::Result<T, String>;

struct Options {
    quick: bool,
    /// Run by `cargo test` (no `--bench` argument): the quick variant.
    as_test: bool,
    rounds: Option<usize>,
    services: Option<usize>,
    seconds: Option<f64>,
    clients: usize,
    outstanding: usize,
    rate: Option<usize>,
}

impl Options {
    fn parse() -> Result<Options> {
        let mut options = Options {
            quick: false,
            as_test: true,
            rounds: None,
            services: None,
            seconds: None,
            clients: 4,
            outstanding: 100,
            rate: None,
        };
        flags::parse(|flag, value| {
            match flag {
                "--quick" => options.quick = true,
                // `cargo bench` passes it; `cargo test` runs benches without it.
                "--bench" => options.as_test = false,
                "--rounds" => options.rounds = Some(value.number("--rounds N")?),
                "--services" => {
                    let n = value.number("--services N")?;
                    if n >= 1 << 24 {
                        return Err("--services: at most 16,777,215 (240.0.0.0/8)".to_owned());
                    }
                    options.services = Some(n);
                }
                "--clients" => options.clients = value.number("--clients N")?,
                "--outstanding" => options.outstanding = value.number("--outstanding N")?,
                "--rate" => options.rate = Some(value.number("--rate QPS")?),
                "--seconds" => {
                    let text = value.text("--seconds S")?;
                    options.seconds = Some(
                        text.parse::<f64>()
                            .ok()
                            .filter(|s| *s >= 0.5)
                            .ok_or_else(|| format!("--seconds wants ≥ 0.5, not {text:?}"))?,
                    );
                }
                _ => {}
            }
            Ok(())
        })?;
        options.quick |= options.as_test;
        Ok(options)
    }
}

/// The median of `values` (the upper one of an even count) and their range.
fn median_and_range(values: &[f64]) -> Option<(f64, f64, f64)> {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let median = *sorted.get(sorted.len() / 2)?;
    Some((median, sorted[0], sorted[sorted.len() - 1]))
}

/// "median (min–max)" with `digits` decimals; just the value for one round.
fn spread(values: &[f64], digits: usize) -> String {
    match median_and_range(values) {
        None => "-".to_owned(),
        Some((median, _, _)) if values.len() == 1 => format!("{median:.digits$}"),
        Some((median, low, high)) => format!("{median:.digits$} ({low:.digits$}–{high:.digits$})"),
    }
}

/// One server's figures for one measured run.
struct Measured {
    run: dnsperf::Report,
    /// CPU time the server's threads (and NSD's processes) used meanwhile.
    cpu: Duration,
}

impl Measured {
    fn per_cpu_second(&self) -> f64 {
        self.run.completed as f64 / self.cpu.as_secs_f64().max(1e-9)
    }
}

fn run(options: &Options) -> Result<()> {
    let started = Instant::now();
    let ci = std::env::var("CI").is_ok_and(|v| v == "true" || v == "1");
    let tools = match (
        servers::find_or_install("nsd", "nsd"),
        servers::find_or_install("dnsperf", "dnsperf"),
    ) {
        (Ok(nsd), Ok(dnsperf)) => (nsd, dnsperf),
        (Err(why), _) | (_, Err(why)) if ci => {
            return Err(format!("CI=true needs nsd and dnsperf: {why}"));
        }
        (Err(why), _) | (_, Err(why)) => {
            println!("\n*** SKIPPED: dns bench: {why} ***\n");
            return Ok(());
        }
    };
    let services = options
        .services
        .unwrap_or(if options.quick { 200 } else { 10_000 });
    let rounds = options.rounds.unwrap_or(if options.quick { 1 } else { 3 });
    let seconds = options
        .seconds
        .unwrap_or(if options.quick { 2.0 } else { 10.0 });
    let warm_up = (!options.quick).then_some(1.0);
    let cpus = servers::allowed_cpus();
    let (server_cpu, client_cpu) = match cpus.as_slice() {
        [] => (None, None),
        [one] => (Some(*one), None),
        [first, second, ..] => (Some(*first), Some(*second)),
    };
    println!(
        "dns bench: {} cores (allowed: {cpus:?}), load average {}{}; {}",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        std::fs::read_to_string("/proc/loadavg")
            .ok()
            .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
            .unwrap_or_else(|| "?".to_owned()),
        if options.quick { ", --quick" } else { "" },
        dnsperf::version(&tools.1),
    );
    match (server_cpu, client_cpu) {
        (Some(server), Some(client)) => {
            println!("dns bench: servers pinned to CPU {server}, dnsperf to CPU {client} (taskset)")
        }
        _ => println!("dns bench: NOTE: fewer than two CPUs: nothing is pinned"),
    }

    let mut bench = servers::Bench::start(&servers::Plan {
        strait: topology::strait_binary(options.as_test)?,
        nsd: tools.0,
        services,
        server_cpu,
    })?;
    let load = dnsperf::Load {
        binary: tools.1,
        queries: bench.queries.clone(),
        clients: options.clients,
        outstanding: options.outstanding,
        rate: options.rate,
        cpu: client_cpu,
    };
    let flags = format!(
        "-c {} -q {} -T 1{}",
        options.clients,
        options.outstanding,
        options
            .rate
            .map(|rate| format!(" -Q {rate}"))
            .unwrap_or_default()
    );
    println!(
        "dns bench: {services} services; both servers answer a sample of them with their VIPs \
         (ready in {:.1} s); {rounds} round(s) of {seconds} s per server, dnsperf {flags}{}",
        started.elapsed().as_secs_f64(),
        if warm_up.is_some() {
            ", each after a 1 s warm-up"
        } else {
            ""
        }
    );

    let names = ["strait", "nsd"];
    let mut results: [Vec<Measured>; 2] = [Vec::new(), Vec::new()];
    for round in 1..=rounds {
        for (index, server) in bench.servers().into_iter().enumerate() {
            if let Some(warm_up) = warm_up {
                load.run(server.address, warm_up)?;
            }
            let before = server.cpu_time()?;
            let run = load.run(server.address, seconds)?;
            let cpu = server.cpu_time()?.saturating_sub(before);
            server.check_alive()?;
            run.check(names[index])?;
            println!(
                "  round {round} {:<6} {:>9.0} queries/s, lost {}, latency avg {:.3} ms max {:.3} ms, \
                 server CPU {:.2} s ({:.0} queries per CPU-s)",
                names[index],
                run.qps,
                run.lost,
                run.avg_latency_ms,
                run.max_latency_ms,
                cpu.as_secs_f64(),
                run.completed as f64 / cpu.as_secs_f64().max(1e-9)
            );
            results[index].push(Measured { run, cpu });
        }
    }

    let label = if rounds > 1 {
        format!("median (min–max) of {rounds} interleaved rounds")
    } else {
        "one round".to_owned()
    };
    println!("\n### {services} names, UDP, dnsperf {flags} for {seconds} s: {label}\n");
    println!(
        "| server | queries/s | lost | latency avg, ms | latency max, ms | latency stddev, ms | \
         server CPU, s | queries per CPU-s |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    let labels = [bench.strait_label(), bench.nsd_label()];
    for (label, measured) in labels.iter().zip(&results) {
        let of = |f: &dyn Fn(&Measured) -> f64| measured.iter().map(f).collect::<Vec<f64>>();
        println!(
            "| {label} | {} | {} | {} | {} | {} | {} | {} |",
            spread(&of(&|m| m.run.qps), 0),
            spread(&of(&|m| m.run.lost as f64), 0),
            spread(&of(&|m| m.run.avg_latency_ms), 3),
            spread(&of(&|m| m.run.max_latency_ms), 2),
            spread(&of(&|m| m.run.stddev_latency_ms), 3),
            spread(&of(&|m| m.cpu.as_secs_f64()), 2),
            spread(&of(&Measured::per_cpu_second), 0),
        );
    }
    let ratio = |f: &dyn Fn(&Measured) -> f64| {
        let per_round: Vec<f64> = results[0]
            .iter()
            .zip(&results[1])
            .map(|(strait, nsd)| f(strait) / f(nsd))
            .collect();
        spread(&per_round, 2)
    };
    println!(
        "\nStrait ÷ NSD, per round: queries/s {}, average latency {}, queries per CPU-s {}.",
        ratio(&|m| m.run.qps),
        ratio(&|m| m.run.avg_latency_ms),
        ratio(&Measured::per_cpu_second)
    );
    println!(
        "\n(total run time {:.1} s)",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

fn main() -> ExitCode {
    let options = match Options::parse() {
        Ok(options) => options,
        Err(error) => {
            eprintln!("dns bench: {error}");
            return ExitCode::FAILURE;
        }
    };
    if options.as_test {
        println!(
            "dns bench: no --bench argument, so running as a test (the quick variant); \
             `cargo bench --bench dns` measures"
        );
    }
    match run(&options) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("dns bench: error: {error}");
            ExitCode::FAILURE
        }
    }
}
