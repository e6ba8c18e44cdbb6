//! Strait as the cluster's MCS controller, at scale: the reconciler's pure
//! plan for a cluster set of 5,000 services, and a gateway replica opening
//! 10,000 import listeners, side by side with HAProxy binding the same ports.
//!
//! `cargo bench --bench imports -- [--quick] [--only plan|listeners]
//! [--rounds N] [--services N] [--listeners N] [--threads N] [--json PATH]`
//!
//! - **plan** (`imports/plan.rs`): 10 clusters on 3 networks, 5,000
//!   services exported by every cluster, 2 ports each (10,000 import ports
//!   in `20000-39999`), 3 gateway pods. Timed per round: `merge::merge`
//!   (reported apart), then `imports::plan`, `render::desired_objects`
//!   (`Owners::Required`, as the reconciler writes) and `diff::changes`,
//!   against an empty cluster (its namespaces and gateway pods only) and
//!   against a converged one (what a server holds after applying every
//!   change until none is left: uids, ClusterIPs and server defaults added,
//!   built by feeding the changes back). Checked: the empty cluster gets
//!   every import, the converged one needs no write at all.
//! - **listeners** (`imports/listeners.rs`): a file-mode `strait run` (the
//!   real binary) whose configuration exports 10,000 one-port services,
//!   `imports.portRange: 30000-49999`, `imports.address` on loopback; the
//!   time from spawning it until `/readyz` (the import listeners are bound
//!   before it turns ready) and its RSS (`/proc/PID/status`). Beside it in
//!   each round: the same gateway with `imports.listen: false` (what the
//!   listeners add is the difference) and HAProxy with one `listen` section
//!   per port, binding the same port numbers (time until they all listen),
//!   and HAProxy with one section binding them all (its cheapest form).
//!   Checked: every port `strait imports` prints listens, and a sample of
//!   them accepts connections.
//!
//! Rounds are interleaved (Strait, HAProxy, Strait without listeners,
//! HAProxy with one section, then again); medians and spread are reported.
//! Under `cargo test` (no `--bench` argument) this runs `--quick`: one
//! round each, 1,000 services and 1,000 listeners; it checks results, never
//! speed. HAProxy is installed with
//! apt-get when missing and root, else its rows are skipped, except under
//! `CI=true`. `STRAIT_BENCH_KEEP=1` keeps the configurations and logs.
//! Figures and what limits them: docs/performance.md.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on what they set up

#[path = "common/flags.rs"]
mod flags;
#[path = "e2e/haproxy.rs"]
#[allow(dead_code)]
mod haproxy;
#[path = "imports/listeners.rs"]
mod listeners;
#[path = "imports/plan.rs"]
mod plan;
#[path = "../tests/support/mod.rs"]
mod support;
#[path = "e2e/topology.rs"]
#[allow(dead_code)]
mod topology;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// The cluster set the certificates (`strait certs`) are made for.
const CLUSTERSET: &str = "bench.strait.dev";

type Result<T> = std::result::Result<T, String>;

const PARTS: [&str; 2] = ["plan", "listeners"];

struct Options {
    quick: bool,
    /// Run by `cargo test` (no `--bench` argument): the quick variant.
    as_test: bool,
    only: Vec<String>,
    rounds: Option<usize>,
    listeners: Option<usize>,
    services: Option<u32>,
    threads: usize,
    json: Option<PathBuf>,
}

impl Options {
    fn parse() -> Result<Options> {
        let mut options = Options {
            quick: false,
            as_test: true,
            only: Vec::new(),
            rounds: None,
            listeners: None,
            services: None,
            threads: std::thread::available_parallelism().map_or(2, |n| n.get()),
            json: None,
        };
        flags::parse(|flag, value| {
            match flag {
                "--quick" => options.quick = true,
                // `cargo bench` passes it; `cargo test` runs benches without it.
                "--bench" => options.as_test = false,
                "--only" => options.only.extend(value.list("--only PART")?),
                "--rounds" => options.rounds = Some(value.number("--rounds N")?),
                "--listeners" => options.listeners = Some(value.number("--listeners N")?),
                "--services" => {
                    let n = value.number("--services N")?;
                    options.services = Some(u32::try_from(n).map_err(|_| "--services: too many")?);
                }
                "--threads" => options.threads = value.number("--threads N")?,
                "--json" => options.json = Some(PathBuf::from(value.text("--json PATH")?)),
                _ => {}
            }
            Ok(())
        })?;
        if let Some(unknown) = options.only.iter().find(|p| !PARTS.contains(&p.as_str())) {
            return Err(format!(
                "--only: no part {unknown:?} (known: {})",
                PARTS.join(", ")
            ));
        }
        options.quick |= options.as_test;
        Ok(options)
    }

    fn selected(&self, part: &str) -> bool {
        self.only.is_empty() || self.only.iter().any(|p| p == part)
    }

    /// Measured rounds of each part.
    fn rounds(&self) -> usize {
        self.rounds.unwrap_or(if self.quick { 1 } else { 5 })
    }

    /// Services in the planned cluster set.
    fn services(&self) -> u32 {
        self.services
            .unwrap_or(if self.quick { 1_000 } else { 5_000 })
    }

    fn listeners(&self) -> usize {
        self.listeners
            .unwrap_or(if self.quick { 1_000 } else { 10_000 })
    }
}

/// One `--json` row, as the other benches write them.
pub(crate) struct Row {
    pub(crate) scenario: String,
    pub(crate) workload: String,
    pub(crate) value: f64,
    pub(crate) unit: &'static str,
}

/// The median of `values` (the upper one of an even count) and their range.
pub(crate) fn median_and_range(values: &[f64]) -> Option<(f64, f64, f64)> {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let median = *sorted.get(sorted.len() / 2)?;
    Some((median, sorted[0], sorted[sorted.len() - 1]))
}

/// "median (min–max)" with `digits` decimals; just the value for one round.
pub(crate) fn spread(values: &[f64], digits: usize) -> String {
    match median_and_range(values) {
        None => "-".to_owned(),
        Some((median, _, _)) if values.len() == 1 => format!("{median:.digits$}"),
        Some((median, low, high)) => format!("{median:.digits$} ({low:.digits$}–{high:.digits$})"),
    }
}

fn write_json(path: &std::path::Path, rows: &[Row]) -> Result<()> {
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
    std::fs::write(path, format!("{text}\n"))
        .map_err(|e| format!("cannot write {}: {e}", path.display()))
}

fn run(options: &Options) -> Result<()> {
    let started = Instant::now();
    let mut rows = Vec::new();
    println!(
        "imports bench: {} cores, load average {}{}",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        std::fs::read_to_string("/proc/loadavg")
            .ok()
            .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
            .unwrap_or_else(|| "?".to_owned()),
        if options.quick { ", --quick" } else { "" }
    );
    if options.selected("plan") {
        plan::run(
            options.services(),
            options.rounds(),
            !options.quick,
            &mut rows,
        )?;
    }
    if options.selected("listeners") {
        let plan = listeners::ListenerPlan {
            count: options.listeners(),
            rounds: options.rounds(),
            threads: options.threads,
            as_test: options.as_test,
            settle: Duration::from_millis(if options.quick { 250 } else { 1_000 }),
        };
        listeners::run(&plan, &mut rows)?;
    }
    if let Some(path) = &options.json {
        write_json(path, &rows)?;
        println!("\nwrote {} rows to {}", rows.len(), path.display());
    }
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
            eprintln!("imports bench: {error}");
            return ExitCode::FAILURE;
        }
    };
    if options.as_test {
        println!(
            "imports bench: no --bench argument, so running as a test (the quick variant); \
             `cargo bench --bench imports` measures"
        );
    }
    match run(&options) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("imports bench: error: {error}");
            ExitCode::FAILURE
        }
    }
}
