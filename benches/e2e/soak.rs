//! The soak (`--soak`): round after round, the request/response, bulk and
//! connection-rate workloads at once through each Strait tunnel
//! (`mixed.rs`), while a CPU hog starves the gateways: spinning threads in
//! this process, twice as many as the host has cores, at the gateways'
//! priority. A stall shows only when tasks are starved: a lost wake-up or a
//! window never reopened is hidden while every task runs at once.
//!
//! The run fails if any connection waits for bytes longer than [`STALL`]
//! (a bulk echo, a request's echo, a whole short connection), if any byte
//! differs, or if a gateway counted a stall itself
//! (`strait_connection_stalls_total`, with `tuning.stallReport` at
//! [`STALL`] in the bench's configuration).

use crate::clients::Target;
use crate::latency::LatencyPlan;
use crate::mixed::{Beside, mixed_round};
use crate::processes::{Proxies, http_get};
use crate::{Options, Result, Scenario};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// The longest any connection may wait for bytes that are owed to it: the
/// gateways' `tuning.stallReport` too.
const STALL: Duration = crate::topology::STALL_REPORT;

/// Spinning threads that compete with the gateways for every core.
struct Hog {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<u64>>,
}

impl Hog {
    fn start(count: usize) -> Hog {
        let stop = Arc::new(AtomicBool::new(false));
        let threads = (0..count)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    let mut spins: u64 = 0;
                    while !stop.load(Ordering::Relaxed) {
                        for _ in 0..10_000 {
                            spins = std::hint::black_box(spins.wrapping_add(1));
                        }
                    }
                    spins
                })
            })
            .collect();
        Hog { stop, threads }
    }
}

impl Drop for Hog {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

fn plan(options: &Options) -> LatencyPlan {
    LatencyPlan {
        connections: 50,
        rate: 2_000,
        duration: if options.quick {
            Duration::from_secs(1)
        } else {
            Duration::from_secs(3)
        },
        stall: Some(STALL),
    }
}

/// Runs the soak through every selected scenario; an error names each
/// failed round.
pub(crate) async fn soak(
    options: &Options,
    scenarios: &[&Scenario],
    targets: &[Target],
    proxies: &Proxies,
    pids: &[(String, u32)],
) -> Result<()> {
    let started = Instant::now();
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    let rounds = options.soak_rounds();
    let plan = plan(options);
    let beside = Beside {
        bulk_streams: 8,
        bulk_rate: None,
        connectors: 4,
        stall: Some(STALL),
    };
    println!(
        "\n### Soak: {rounds} round(s) per scenario; each {} B request/response at {}/s over {} connections for {:.0} s, \
         beside {} bulk flows and {} connection-rate loops, while {} spinning threads starve the gateways; \
         any connection waiting over {STALL:?} for its bytes fails\n",
        crate::latency::MESSAGE,
        plan.rate,
        plan.connections,
        plan.duration.as_secs_f64(),
        beside.bulk_streams,
        beside.connectors,
        2 * cores,
    );
    println!(
        "| round | scenario | requests | p50 µs | p99 µs | max µs | bulk Gbit/s | connections | result |"
    );
    println!("|---:|---|---:|---:|---:|---:|---:|---:|---|");
    let mut failures = Vec::new();
    {
        let _hog = Hog::start(2 * cores);
        for round in 1..=rounds {
            for (scenario, target) in scenarios.iter().zip(targets) {
                match mixed_round(*target, plan, beside, pids).await {
                    Ok(run) => {
                        let micros =
                            |q: f64| run.latency.latency.value_at_quantile(q) as f64 / 1000.0;
                        println!(
                            "| {round} | {} | {} | {:.0} | {:.0} | {:.0} | {:.2} | {} | ok |",
                            scenario.name,
                            run.latency.latency.len(),
                            micros(0.5),
                            micros(0.99),
                            micros(1.0),
                            run.bulk_gbps,
                            run.connections,
                        );
                    }
                    Err(error) => {
                        println!(
                            "| {round} | {} | - | - | - | - | - | - | {error} |",
                            scenario.name
                        );
                        failures.push(format!("round {round}, {}: {error}", scenario.name));
                    }
                }
            }
        }
    }
    for proxy in &proxies.children {
        let Some(admin) = proxy.admin else { continue };
        match counted_stalls(admin).await {
            Ok(0) => {}
            Ok(n) => failures.push(format!(
                "{}: the gateway counted {n} stalled connection(s) (strait_connection_stalls_total); see its log",
                proxy.name
            )),
            Err(error) => failures.push(format!("{}: /metrics: {error}", proxy.name)),
        }
    }
    println!("\n(soak run time {:.1} s)", started.elapsed().as_secs_f64());
    if failures.is_empty() {
        println!("soak: no stall and no byte error in {rounds} round(s)");
        return Ok(());
    }
    println!("\n### Soak failures\n");
    for failure in &failures {
        println!("- {failure}");
    }
    println!("\n{}", proxies.logs());
    Err(format!("the soak failed: {}", failures.join("; ")))
}

/// The gateway's `strait_connection_stalls_total`, summed over its labels.
async fn counted_stalls(admin: std::net::SocketAddr) -> Result<u64> {
    let body = http_get(admin, "/metrics")
        .await
        .map_err(|e| e.to_string())?;
    let mut total = 0.0;
    for line in body.lines() {
        if let Some(rest) = line.strip_prefix("strait_connection_stalls_total") {
            let value = rest.rsplit(' ').next().unwrap_or("0");
            total += value.parse::<f64>().map_err(|e| format!("{line:?}: {e}"))?;
        }
    }
    Ok(total as u64)
}
