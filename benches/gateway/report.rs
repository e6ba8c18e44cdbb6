//! Output: the markdown tables on stdout and the JSON rows of `--json`.

use crate::GIB;
use crate::MIB;
use crate::Options;
use crate::Result;
use crate::Scenario;
use crate::bulk::Flow;
use crate::cpu::host_cpu;
use crate::idle::Idle;
use crate::{IDLE_SETTLE, Row};
use std::io::Write as _;
use std::path::Path;

pub(crate) fn size_label(bytes: u64) -> String {
    if bytes >= GIB && bytes.is_multiple_of(GIB) {
        format!("{} GiB", bytes / GIB)
    } else {
        format!("{} MiB", bytes / MIB)
    }
}

pub(crate) fn mib(kib: u64) -> String {
    format!("{:.1} MiB", kib as f64 / 1024.0)
}

pub(crate) fn percent(value: Option<f64>) -> String {
    value.map_or_else(|| "-".to_owned(), |v| format!("{v:.0}%"))
}

pub(crate) fn print_report(
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

pub(crate) fn rows(
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
