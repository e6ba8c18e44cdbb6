//! What a run measured and how it is shown: the per-scenario outcomes, the
//! markdown tables on stdout (with ratios against `direct` and against the
//! HAProxy peer), the goals, the `--json` rows and the list of
//! missing figures that fails the run.

use crate::Result;
use crate::Scenario;
use crate::cpu::Cpu;
use crate::idle::Idle;
use crate::latency::{LatencyRound, histogram};
use hdrhistogram::Histogram;
use std::io::Write as _;
use std::path::Path;

const MIB: u64 = 1024 * 1024;
const GIB: u64 = 1024 * MIB;

/// The measured rounds of one scenario under one workload (bulk throughput
/// or connection rate), or why it stopped.
#[derive(Default)]
pub(crate) struct Series {
    pub(crate) runs: Vec<(f64, Cpu)>,
    pub(crate) error: Option<String>,
}

impl Series {
    /// The median round (the upper one of an even count).
    pub(crate) fn median(&self) -> Option<&(f64, Cpu)> {
        if self.error.is_some() {
            return None;
        }
        let mut sorted: Vec<&(f64, Cpu)> = self.runs.iter().collect();
        sorted.sort_by(|a, b| a.0.total_cmp(&b.0));
        sorted.get(sorted.len() / 2).copied()
    }

    pub(crate) fn value(&self) -> Option<f64> {
        self.median().map(|(value, _)| *value)
    }

    /// "(slowest–fastest)" when there was more than one round.
    fn spread(&self) -> String {
        let values = self.runs.iter().map(|(v, _)| *v);
        let low = values.clone().fold(f64::INFINITY, f64::min);
        let high = values.fold(f64::NEG_INFINITY, f64::max);
        if self.runs.len() > 1 && self.error.is_none() {
            format!("{} – {}", short(low), short(high))
        } else {
            "-".to_owned()
        }
    }
}

/// The latency rounds of one scenario, merged.
pub(crate) struct Latency {
    /// Scheduled send to echo received, ns.
    pub(crate) histogram: Histogram<u64>,
    pub(crate) pacer_late: Histogram<u64>,
    pub(crate) cpu: Vec<Cpu>,
    /// Each round's p99, µs, and run-queue wait, ms per second.
    pub(crate) rounds_p99: Vec<(f64, f64)>,
    pub(crate) error: Option<String>,
}

impl Latency {
    pub(crate) fn new() -> Latency {
        Latency {
            histogram: histogram(),
            pacer_late: histogram(),
            cpu: Vec::new(),
            rounds_p99: Vec::new(),
            error: None,
        }
    }

    /// Adds one round.
    pub(crate) fn record(&mut self, round: LatencyRound) {
        self.rounds_p99.push((
            round.latency.value_at_quantile(0.99) as f64 / 1000.0,
            round.waited,
        ));
        let added = self
            .histogram
            .add(&round.latency)
            .and_then(|()| self.pacer_late.add(&round.pacer_late));
        if let Err(error) = added {
            self.error = Some(format!("histogram: {error}"));
        }
        self.cpu.push(round.cpu);
    }

    fn rounds_label(&self) -> String {
        let rounds: Vec<String> = self
            .rounds_p99
            .iter()
            .map(|(p99, waited)| format!("{} ({})", short(*p99), short(*waited)))
            .collect();
        rounds.join(" / ")
    }

    /// Quantile `q` in µs, if this scenario has figures.
    pub(crate) fn micros(&self, q: f64) -> Option<f64> {
        (self.error.is_none() && !self.histogram.is_empty())
            .then(|| self.histogram.value_at_quantile(q) as f64 / 1000.0)
    }
}

/// The mixed workload's rounds: request/response latency beside bulk flows.
pub(crate) struct Mixed {
    pub(crate) latency: Latency,
    /// What the bulk flows moved in each round, Gbit/s one way.
    pub(crate) bulk_gbps: Vec<f64>,
}

/// Everything measured for one scenario.
pub(crate) struct Outcome<'a> {
    pub(crate) scenario: &'a Scenario,
    /// One stream, then eight.
    pub(crate) bulk: [Series; 2],
    pub(crate) latency: Latency,
    /// The same schedule beside bulk flows (`mixed.rs`).
    pub(crate) mixed: Mixed,
    pub(crate) rate: Series,
    /// `None` for `direct`, which has no proxy process.
    pub(crate) idle: Option<Result<Idle>>,
}

impl<'a> Outcome<'a> {
    pub(crate) fn new(scenario: &'a Scenario) -> Outcome<'a> {
        Outcome {
            scenario,
            bulk: [Series::default(), Series::default()],
            latency: Latency::new(),
            mixed: Mixed {
                latency: Latency::new(),
                bulk_gbps: Vec::new(),
            },
            rate: Series::default(),
            idle: None,
        }
    }

    /// KiB per idle connection of each proxy process, in path order.
    pub(crate) fn idle_kib(&self) -> Vec<(&'static str, f64)> {
        match &self.idle {
            Some(Ok(idle)) if idle.error.is_none() => idle
                .processes
                .iter()
                .map(|p| (p.name, p.per_connection_kib(idle.opened)))
                .collect(),
            _ => Vec::new(),
        }
    }
}

/// The parameters shown in the headings.
pub(crate) struct Shape {
    pub(crate) quick: bool,
    pub(crate) rounds: usize,
    pub(crate) bulk_bytes: u64,
    pub(crate) streams: [usize; 2],
    pub(crate) latency: crate::latency::LatencyPlan,
    pub(crate) mixed_bulk_streams: usize,
    pub(crate) connectors: usize,
    pub(crate) rate_duration: std::time::Duration,
    pub(crate) idle_count: usize,
    pub(crate) idle_settle: std::time::Duration,
}

pub(crate) fn size_label(bytes: u64) -> String {
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

/// A figure with 3–4 significant digits.
pub(crate) fn short(value: f64) -> String {
    if value >= 100.0 {
        format!("{value:.0}")
    } else if value >= 10.0 {
        format!("{value:.1}")
    } else {
        format!("{value:.2}")
    }
}

fn figure(value: Option<f64>) -> String {
    value.map_or_else(|| "failed".to_owned(), short)
}

fn ratio(value: Option<f64>, reference: Option<f64>) -> String {
    match (value, reference) {
        (Some(v), Some(r)) if r > 0.0 => format!("{:.2}×", v / r),
        _ => "-".to_owned(),
    }
}

fn find<'o, 'a>(outcomes: &'o [Outcome<'a>], name: &str) -> Option<&'o Outcome<'a>> {
    outcomes.iter().find(|o| o.scenario.name == name)
}

/// The scenario of this run whose idle memory stands for this one's (same
/// processes), if any.
fn idle_measured_by(outcomes: &[Outcome<'_>], outcome: &Outcome<'_>) -> Option<&'static str> {
    outcome
        .scenario
        .idle_with
        .filter(|other| find(outcomes, other).is_some())
}

/// The figure `get` of this scenario, of `direct` and of its HAProxy peer.
fn with_references(
    outcomes: &[Outcome<'_>],
    outcome: &Outcome<'_>,
    get: impl Fn(&Outcome<'_>) -> Option<f64>,
) -> (Option<f64>, Option<f64>, Option<f64>) {
    let direct = find(outcomes, "direct").and_then(&get);
    let peer = outcome
        .scenario
        .peer
        .and_then(|peer| find(outcomes, peer))
        .and_then(&get);
    (get(outcome), direct, peer)
}

/// "name 85%, name 40%" for the scenario's proxy processes.
fn proxies_cpu(scenario: &Scenario, cpu: &Cpu) -> String {
    if scenario.processes.is_empty() {
        return "-".to_owned();
    }
    scenario
        .processes
        .iter()
        .map(|(name, _)| format!("{name} {}", percent(cpu.of(name))))
        .collect::<Vec<_>>()
        .join(", ")
}

pub(crate) fn print_report(shape: &Shape, outcomes: &[Outcome<'_>]) {
    let variant = if shape.quick { " (--quick)" } else { "" };
    let rounds = if shape.rounds > 1 {
        format!(", median of {} interleaved rounds", shape.rounds)
    } else {
        String::new()
    };
    println!(
        "\n### Bulk throughput: {} echoed per round over 1 and over {} connections{variant}{rounds}\n",
        size_label(shape.bulk_bytes),
        shape.streams[1]
    );
    println!(
        "| scenario | 1 stream, Gbit/s | vs direct | vs HAProxy | 8 streams, Gbit/s | vs direct | vs HAProxy |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for outcome in outcomes {
        let mut cells = Vec::new();
        for index in 0..2 {
            let (value, direct, peer) =
                with_references(outcomes, outcome, |o| o.bulk[index].value());
            cells.push(format!(
                "{} | {} | {}",
                figure(value),
                ratio(value, direct),
                ratio(value, peer)
            ));
        }
        println!("| {} | {} |", outcome.scenario.name, cells.join(" | "));
    }
    println!(
        "\nCPU while the median round ran, % of one core (`harness`: client and echo backend; \
         `host` includes softirq, where much of loopback's receive path runs; `other load`: \
         host CPU used by no process of this run):\n"
    );
    println!(
        "| scenario | streams | Gbit/s spread | proxy processes | harness | host | softirq | other load |"
    );
    println!("|---|---:|---|---|---:|---:|---:|---:|");
    for outcome in outcomes {
        for (index, streams) in shape.streams.iter().enumerate() {
            let series = &outcome.bulk[index];
            let Some((_, cpu)) = series.median() else {
                continue;
            };
            println!(
                "| {} | {streams} | {} | {} | {} | {} | {} | {} |",
                outcome.scenario.name,
                series.spread(),
                proxies_cpu(outcome.scenario, cpu),
                percent(cpu.of("harness")),
                percent(cpu.of("host")),
                percent(cpu.of("host softirq")),
                percent(cpu.other_load()),
            );
        }
    }

    let plan = shape.latency;
    println!(
        "\n### Latency: {} B request/response, {} connections, {} requests/s in all, open loop, \
         {:.1} s per round{variant}\n",
        crate::latency::MESSAGE,
        plan.connections,
        plan.rate,
        plan.duration.as_secs_f64()
    );
    println!(
        "| scenario | p50 µs | p99 µs | p99.9 µs | max µs | vs direct (p50/p99/p99.9) | vs HAProxy (p50/p99/p99.9) | p99 per round µs (run-queue wait ms/s) | requests | pacer late p99 µs | proxy CPU |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---|---:|---:|---|");
    for outcome in outcomes {
        let latency = &outcome.latency;
        let mut versus = [Vec::new(), Vec::new()];
        for q in [0.5, 0.99, 0.999] {
            let (value, direct, peer) = with_references(outcomes, outcome, |o| o.latency.micros(q));
            versus[0].push(ratio(value, direct));
            versus[1].push(ratio(value, peer));
        }
        let cpu = Cpu::mean(&latency.cpu);
        println!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            outcome.scenario.name,
            figure(latency.micros(0.5)),
            figure(latency.micros(0.99)),
            figure(latency.micros(0.999)),
            figure(latency.micros(1.0)),
            versus[0].join(" / "),
            versus[1].join(" / "),
            latency.rounds_label(),
            latency.histogram.len(),
            short(latency.pacer_late.value_at_quantile(0.99) as f64 / 1000.0),
            proxies_cpu(outcome.scenario, &cpu),
        );
    }
    println!(
        "\nLatency runs from each request's scheduled send time to the last byte of its echo; \
         `pacer late` is how late the harness sent (already included in the latency); \
         `run-queue wait` is how long the proxies' and the harness's threads were ready \
         to run but waited for a core, per second of the round."
    );
    print_mixed(shape, outcomes);

    println!(
        "\n### Connection rate: {} connectors, each connect → 1-byte echo → close in a loop, \
         {:.1} s per round{variant}{rounds}\n",
        shape.connectors,
        shape.rate_duration.as_secs_f64()
    );
    println!(
        "| scenario | connections/s | vs direct | vs HAProxy | spread | proxy CPU | harness | other load |"
    );
    println!("|---|---:|---:|---:|---|---|---:|---:|");
    for outcome in outcomes {
        let (value, direct, peer) = with_references(outcomes, outcome, |o| o.rate.value());
        let cpu = outcome
            .rate
            .median()
            .map(|(_, cpu)| cpu.clone())
            .unwrap_or_default();
        println!(
            "| {} | {} | {} | {} | {} | {} | {} | {} |",
            outcome.scenario.name,
            figure(value),
            ratio(value, direct),
            ratio(value, peer),
            outcome.rate.spread(),
            proxies_cpu(outcome.scenario, &cpu),
            percent(cpu.of("harness")),
            percent(cpu.other_load()),
        );
    }

    println!(
        "\n### Idle memory: {} connections open at once, each after one 4-byte echo, idle {:.1} s{variant}\n",
        shape.idle_count,
        shape.idle_settle.as_secs_f64()
    );
    println!(
        "| scenario | process | role | open | RSS before | RSS while open | KiB per idle connection | vs HAProxy (same hop) | RSS after close |"
    );
    println!("|---|---|---|---:|---:|---:|---:|---:|---:|");
    for outcome in outcomes {
        let peer = outcome.scenario.peer.and_then(|p| find(outcomes, p));
        let peer_kib = peer.map(Outcome::idle_kib).unwrap_or_default();
        match &outcome.idle {
            None => {
                if let Some(other) = idle_measured_by(outcomes, outcome) {
                    println!(
                        "| {} | as {other} | same processes, measured once | | | | | | |",
                        outcome.scenario.name
                    );
                }
            }
            Some(Err(error)) => println!(
                "| {} | failed: {error} | | | | | | | |",
                outcome.scenario.name
            ),
            Some(Ok(idle)) => {
                for (hop, process) in idle.processes.iter().enumerate() {
                    let kib = process.per_connection_kib(idle.opened);
                    println!(
                        "| {} | {} | {} | {}{} | {} | {} | {:.1} | {} | {} |",
                        outcome.scenario.name,
                        process.name,
                        process.role,
                        idle.opened,
                        if idle.error.is_some() { " (!)" } else { "" },
                        mib(process.before),
                        mib(process.open),
                        kib,
                        ratio(Some(kib), peer_kib.get(hop).map(|(_, k)| *k)),
                        mib(process.closed),
                    );
                }
            }
        }
    }
}

/// The mixed workload's table: the schedule beside bulk flows, against
/// the same schedule alone.
fn print_mixed(shape: &Shape, outcomes: &[Outcome<'_>]) {
    println!(
        "\n### Latency beside {} bulk flows: the same schedule while {} bulk echo flows of {} Mbit/s each run through the same path\n",
        shape.mixed_bulk_streams,
        shape.mixed_bulk_streams,
        crate::run::MIXED_BULK_RATE * 8 / 1_000_000
    );
    println!(
        "| scenario | p50 µs | p99 µs | p99.9 µs | p99 per round µs | alone p50 / p99 / p99.9 µs | p99 beside / alone | p99 vs HAProxy beside | bulk Gbit/s meanwhile |"
    );
    println!("|---|---:|---:|---:|---|---|---:|---:|---:|");
    for outcome in outcomes {
        let mixed = &outcome.mixed.latency;
        let alone = &outcome.latency;
        let (value, _, peer) = with_references(outcomes, outcome, |o| o.mixed.latency.micros(0.99));
        let mut bulk = outcome.mixed.bulk_gbps.clone();
        bulk.sort_by(f64::total_cmp);
        println!(
            "| {} | {} | {} | {} | {} | {} / {} / {} | {} | {} | {} |",
            outcome.scenario.name,
            figure(mixed.micros(0.5)),
            figure(mixed.micros(0.99)),
            figure(mixed.micros(0.999)),
            mixed.rounds_label(),
            figure(alone.micros(0.5)),
            figure(alone.micros(0.99)),
            figure(alone.micros(0.999)),
            ratio(mixed.micros(0.99), alone.micros(0.99)),
            ratio(value, peer),
            figure(bulk.get(bulk.len() / 2).copied()),
        );
    }
}

/// The summary table (one row per scenario) and the goals of issue 7.
pub(crate) fn print_summary(outcomes: &[Outcome<'_>]) {
    println!("\n### Summary\n");
    println!(
        "| scenario | bulk 1 stream Gbit/s | bulk 8 streams Gbit/s | p50 µs | p99 µs | p99.9 µs | connections/s | idle KiB/connection per process |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---|");
    for outcome in outcomes {
        let idle = outcome.idle_kib();
        println!(
            "| {} | {} | {} | {} | {} | {} | {} | {} |",
            outcome.scenario.name,
            figure(outcome.bulk[0].value()),
            figure(outcome.bulk[1].value()),
            figure(outcome.latency.micros(0.5)),
            figure(outcome.latency.micros(0.99)),
            figure(outcome.latency.micros(0.999)),
            figure(outcome.rate.value()),
            if let Some(other) = idle_measured_by(outcomes, outcome) {
                format!("as {other}")
            } else if outcome.idle.is_none() {
                "-".to_owned()
            } else if idle.is_empty() {
                "failed".to_owned()
            } else {
                idle.iter()
                    .map(|(name, kib)| format!("{name} {kib:.1}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            },
        );
    }
    let goals = goals(outcomes);
    if !goals.is_empty() {
        println!("\nGoals of issues 7 and 15 (informational; nothing here fails the run):\n");
        for goal in goals {
            println!("- {goal}");
        }
    }
}

fn goals(outcomes: &[Outcome<'_>]) -> Vec<String> {
    let mut lines = Vec::new();
    let verdict = |met: bool| if met { "met" } else { "MISSED" };
    let mut compare = |what: &str,
                       ours: &str,
                       theirs: &str,
                       factor: f64,
                       get: &dyn Fn(&Outcome<'_>) -> Option<f64>| {
        let (Some(a), Some(b)) = (
            find(outcomes, ours).and_then(get),
            find(outcomes, theirs).and_then(get),
        ) else {
            return;
        };
        lines.push(format!(
            "{what}: {ours} {} vs {theirs} {} ({:.2}×, goal ≥ {factor}×): {}",
            short(a),
            short(b),
            a / b,
            verdict(a >= factor * b)
        ));
    };
    for tunnel in ["strait-tunnel-h2", "strait-tunnel-quic"] {
        compare("bulk 1 stream", tunnel, "haproxy-tls-tunnel", 1.0, &|o| {
            o.bulk[0].value()
        });
        compare("bulk 8 streams", tunnel, "haproxy-tls-tunnel", 1.0, &|o| {
            o.bulk[1].value()
        });
        compare("connection rate", tunnel, "haproxy-tls-tunnel", 3.0, &|o| {
            o.rate.value()
        });
    }
    compare("bulk 1 stream", "strait-direct", "haproxy-tcp", 0.9, &|o| {
        o.bulk[0].value()
    });
    compare(
        "bulk 8 streams",
        "strait-direct",
        "haproxy-tcp",
        0.9,
        &|o| o.bulk[1].value(),
    );
    for tunnel in ["strait-tunnel-h2", "strait-tunnel-quic"] {
        let Some(outcome) = find(outcomes, tunnel) else {
            continue;
        };
        if let Some(peer) = find(outcomes, "haproxy-tls-tunnel") {
            let ours = &outcome.latency.rounds_p99;
            let theirs = &peer.latency.rounds_p99;
            if !ours.is_empty() && ours.len() == theirs.len() {
                let ratios: Vec<String> = ours
                    .iter()
                    .zip(theirs)
                    .map(|((a, _), (b, _))| format!("{:.2}×", a / b))
                    .collect();
                let every = ours.iter().zip(theirs).all(|((a, _), (b, _))| a <= b);
                lines.push(format!(
                    "latency p99 in every round: {tunnel} vs haproxy-tls-tunnel {} (goal ≤ 1.0× each): {}",
                    ratios.join(" / "),
                    verdict(every)
                ));
            }
        }
        if let (Some(beside), Some(alone)) = (
            outcome.mixed.latency.micros(0.99),
            outcome.latency.micros(0.99),
        ) {
            lines.push(format!(
                "latency p99 beside {} bulk flows: {tunnel} {} vs {} alone ({:.2}×, goal ≤ 3×): {}",
                crate::run::MIXED_BULK_STREAMS,
                short(beside),
                short(alone),
                beside / alone,
                verdict(beside <= 3.0 * alone)
            ));
        }
        for (name, kib) in outcome.idle_kib() {
            lines.push(format!(
                "idle memory: {tunnel} {name} {kib:.1} KiB per connection (goal ≤ 4): {}",
                verdict(kib <= 4.0)
            ));
        }
    }
    lines
}

/// Every figure each scenario must have; what is missing, and why.
pub(crate) fn missing(outcomes: &[Outcome<'_>]) -> Vec<String> {
    let mut missing = Vec::new();
    for outcome in outcomes {
        let name = outcome.scenario.name;
        let mut need = |workload: &str, present: bool, error: Option<&String>| {
            if !present {
                let why = error.map_or_else(|| "no figure".to_owned(), Clone::clone);
                missing.push(format!("{name}: {workload}: {why}"));
            }
        };
        for (index, label) in ["bulk 1 stream", "bulk 8 streams"].iter().enumerate() {
            let series = &outcome.bulk[index];
            need(label, series.value().is_some(), series.error.as_ref());
        }
        let latency = &outcome.latency;
        need(
            "latency",
            latency.micros(0.999).is_some(),
            latency.error.as_ref(),
        );
        need(
            "latency beside bulk flows",
            outcome.mixed.latency.micros(0.999).is_some(),
            outcome.mixed.latency.error.as_ref(),
        );
        need(
            "connection rate",
            outcome.rate.value().is_some(),
            outcome.rate.error.as_ref(),
        );
        match &outcome.idle {
            None if outcome.scenario.processes.is_empty() => {}
            None if idle_measured_by(outcomes, outcome).is_some() => {}
            None => need("idle memory", false, None),
            Some(Err(error)) => need("idle memory", false, Some(error)),
            Some(Ok(idle)) => need("idle memory", idle.error.is_none(), idle.error.as_ref()),
        }
    }
    missing
}

/// One `--json` row.
pub(crate) struct Row {
    pub(crate) scenario: String,
    pub(crate) workload: String,
    pub(crate) value: f64,
    pub(crate) unit: &'static str,
}

pub(crate) fn rows(threads: usize, outcomes: &[Outcome<'_>]) -> Vec<Row> {
    let mut rows = Vec::new();
    let mut push = |scenario: &str, workload: String, value: f64, unit: &'static str| {
        rows.push(Row {
            scenario: scenario.to_owned(),
            workload,
            value,
            unit,
        });
    };
    push(
        "all",
        "worker threads per proxy process".to_owned(),
        threads as f64,
        "threads",
    );
    for outcome in outcomes {
        let scenario = outcome.scenario;
        let name = scenario.name;
        let cpu_rows =
            |push: &mut dyn FnMut(&str, String, f64, &'static str), workload: &str, cpu: &Cpu| {
                let processes = scenario.processes.iter().map(|(p, _)| *p).chain([
                    "harness",
                    "host",
                    "host softirq",
                ]);
                for process in processes {
                    if let Some(value) = cpu.of(process) {
                        push(
                            name,
                            format!("{workload}: CPU of {process}"),
                            value,
                            "% of one core",
                        );
                    }
                }
                if let Some(value) = cpu.other_load() {
                    push(
                        name,
                        format!("{workload}: CPU of other load"),
                        value,
                        "% of one core",
                    );
                }
            };
        for (index, workload) in ["bulk 1 stream", "bulk 8 streams"].iter().enumerate() {
            let series = &outcome.bulk[index];
            if let Some((value, cpu)) = series.median() {
                push(name, (*workload).to_owned(), *value, "Gbit/s");
                for (value, _) in &series.runs {
                    push(name, format!("{workload}: round"), *value, "Gbit/s");
                }
                cpu_rows(&mut push, workload, cpu);
            }
        }
        let latency = &outcome.latency;
        if latency.micros(0.5).is_some() {
            for (label, q) in [("p50", 0.5), ("p99", 0.99), ("p99.9", 0.999), ("max", 1.0)] {
                if let Some(value) = latency.micros(q) {
                    push(name, format!("latency {label}"), value, "µs");
                }
            }
            push(
                name,
                "latency: requests".to_owned(),
                latency.histogram.len() as f64,
                "requests",
            );
            push(
                name,
                "latency: pacer late p99".to_owned(),
                latency.pacer_late.value_at_quantile(0.99) as f64 / 1000.0,
                "µs",
            );
            for (_, waited) in &latency.rounds_p99 {
                push(
                    name,
                    "latency: run-queue wait round".to_owned(),
                    *waited,
                    "ms/s",
                );
            }
            cpu_rows(&mut push, "latency", &Cpu::mean(&latency.cpu));
        }
        let mixed = &outcome.mixed;
        for (label, q) in [("p50", 0.5), ("p99", 0.99), ("p99.9", 0.999), ("max", 1.0)] {
            if let Some(value) = mixed.latency.micros(q) {
                push(name, format!("latency beside bulk {label}"), value, "µs");
            }
        }
        for gbps in &mixed.bulk_gbps {
            push(
                name,
                "latency beside bulk: bulk round".to_owned(),
                *gbps,
                "Gbit/s",
            );
        }
        if let Some((value, cpu)) = outcome.rate.median() {
            push(name, "connection rate".to_owned(), *value, "connections/s");
            for (value, _) in &outcome.rate.runs {
                push(
                    name,
                    "connection rate: round".to_owned(),
                    *value,
                    "connections/s",
                );
            }
            cpu_rows(&mut push, "connection rate", cpu);
        }
        if let Some(Ok(idle)) = &outcome.idle {
            push(
                name,
                "idle memory: connections open".to_owned(),
                idle.opened as f64,
                "connections",
            );
            for process in &idle.processes {
                let who = format!("idle memory: {} ({})", process.name, process.role);
                push(
                    name,
                    who.clone(),
                    process.per_connection_kib(idle.opened),
                    "KiB/connection",
                );
                for (when, kib) in [
                    ("RSS before", process.before),
                    ("RSS while open", process.open),
                    ("RSS after close", process.closed),
                ] {
                    push(name, format!("{who}: {when}"), kib as f64, "KiB");
                }
            }
        }
    }
    rows
}

pub(crate) fn write_json(path: &Path, rows: &[Row]) -> Result<()> {
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
