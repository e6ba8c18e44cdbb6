//! One run: start the processes the selected scenarios need, measure every
//! workload in interleaved rounds (round r runs every scenario in turn
//! before round r + 1), then report and check that nothing is missing.

use crate::bulk::bulk_round;
use crate::clients::{Target, start_echo_backend};
use crate::connrate::connection_rate;
use crate::cpu::host_cpu;
use crate::haproxy;
use crate::idle::idle_memory;
use crate::latency::latency_round;
use crate::mixed::{Beside, mixed_round};
use crate::processes::{Proxies, wait_ready, warm_up};
use crate::report::{
    Outcome, Series, Shape, missing, print_report, print_summary, rows, write_json,
};
use crate::soak::soak;
use crate::svg::write_chart;
use crate::topology::{
    GatewayPorts, check_config, import_ports, raise_open_files, strait_binary, write_certificates,
    write_config,
};
use crate::{Entry, GATEWAYS, HAPROXY_IPS, MIB, Options, Result, SCENARIOS, Scenario, backend_ip};
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

/// The bulk flows beside the mixed workload's requests.
pub(crate) const MIXED_BULK_STREAMS: usize = 8;
/// Bytes a second of each of them: 50 Mbit/s, 400 Mbit/s in all.
pub(crate) const MIXED_BULK_RATE: u64 = 50_000_000 / 8;

/// How long one connection of the connection-rate workload may take.
const RATE_EACH: Duration = Duration::from_secs(5);

pub(crate) async fn run(options: &Options) -> Result<()> {
    let started = Instant::now();
    let when = utc_now();
    let ci = std::env::var("CI").is_ok_and(|v| v == "true" || v == "1");
    let mut scenarios: Vec<&Scenario> = SCENARIOS.iter().filter(|s| options.selected(s)).collect();
    let mut haproxy_binary = None;
    let mut haproxy_version = "not used".to_owned();
    if scenarios.iter().any(|s| s.haproxy()) {
        match haproxy::find_or_install() {
            Ok((binary, version)) => {
                haproxy_binary = Some(binary);
                haproxy_version = version;
            }
            Err(why) if ci => return Err(format!("CI=true needs haproxy: {why}")),
            Err(why) => {
                println!("SKIPPED: haproxy scenarios (haproxy-tcp, haproxy-tls-tunnel): {why}");
                scenarios.retain(|s| !s.haproxy());
            }
        }
    }
    if scenarios.is_empty() {
        return Err("no scenario left to run".to_owned());
    }
    let binary = strait_binary(options.as_test)?;
    // This process holds both ends of every idle connection, as does a
    // one-hop proxy; without the right to raise the hard limit, fewer
    // connections than asked fit.
    let wanted = options.idle_connections();
    let files = raise_open_files(2 * wanted as u64 + 1024);
    let idle_count =
        wanted.min(usize::try_from(files.saturating_sub(1024) / 2).unwrap_or(usize::MAX));
    if idle_count < wanted {
        println!(
            "e2e bench: NOTE: {idle_count} idle connections instead of {wanted}: the open-file limit \
             is {files} and cannot be raised here (a one-hop proxy needs two files per connection)"
        );
    }
    if idle_count < 100 {
        return Err(format!(
            "the open-file limit ({files}) is too low for this bench"
        ));
    }
    let threads = options.threads;
    let (ulimit_n, maxconn) = haproxy::limits(files);
    let cores = host_cpu().map_or(0, |cpu| cpu.cores);
    println!(
        "e2e bench: {}, {cores} cores, load average {}; {threads} worker thread(s) per proxy \
         process (Strait: TOKIO_WORKER_THREADS={threads}; HAProxy: nbthread {threads}, maxconn {maxconn}, ulimit-n {ulimit_n}); \
         {haproxy_version}",
        when,
        std::fs::read_to_string("/proc/loadavg")
            .ok()
            .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| "?".to_owned()),
    );

    let mut dir =
        tempfile::tempdir().map_err(|e| format!("cannot create a temporary directory: {e}"))?;
    if std::env::var_os("STRAIT_BENCH_KEEP").is_some() {
        dir.disable_cleanup(true);
        println!(
            "e2e bench: keeping {} (certificates, configurations, logs)",
            dir.path().display()
        );
    }
    let certs = dir.path().join("certs");
    write_certificates(&binary, &certs)?;
    let backend = start_echo_backend(SocketAddr::new(backend_ip(), 0)).await?;

    let needed = |name: &str| {
        scenarios
            .iter()
            .any(|s| s.processes.iter().any(|(p, _)| *p == name))
    };
    let ports = GATEWAYS
        .iter()
        .map(|spec| GatewayPorts::pick(IpAddr::V4(spec.ip)))
        .collect::<Result<Vec<_>>>()?;
    let ports_of = |name: &str| {
        &ports[GATEWAYS
            .iter()
            .position(|g| g.name == name)
            .expect("a gateway of GATEWAYS")]
    };
    for transport in ["h2", "quic"] {
        let config = dir.path().join(format!("config-{transport}"));
        let c1 = ports_of(&format!("c1-{transport}")).tunnel;
        let c3 = ports_of(&format!("c3-{transport}")).tunnel;
        write_config(&config, transport, c1, c3, backend)?;
        check_config(&binary, &config)?;
    }
    let mut proxies = Proxies::default();
    for (spec, ports) in GATEWAYS.iter().zip(&ports) {
        if needed(spec.name) {
            let config = dir.path().join(format!("config-{}", spec.config));
            proxies.spawn_strait(&binary, dir.path(), &config, &certs, spec, ports, threads)?;
        }
    }
    if let Some(haproxy_binary) = &haproxy_binary {
        let [tcp, hop1, hop2] = HAPROXY_IPS.map(|ip| free_port(IpAddr::V4(ip)));
        let layout = haproxy::Layout {
            tcp: tcp?,
            hop1: hop1?,
            hop2: hop2?,
            backend,
        };
        let configs = haproxy::write_configs(
            haproxy_binary,
            &dir.path().join("haproxy"),
            &certs,
            threads,
            files,
            &layout,
        )?;
        for (name, config) in configs {
            let entry = match name {
                "haproxy-tcp" => layout.tcp,
                "haproxy-hop1" => layout.hop1,
                _ => layout.hop2,
            };
            if needed(name) {
                proxies.spawn_haproxy(haproxy_binary, dir.path(), name, &config, entry)?;
            }
        }
    }
    for index in 0..proxies.children.len() {
        wait_ready(&mut proxies, index, Duration::from_secs(30)).await?;
    }
    let targets: Vec<Target> = scenarios
        .iter()
        .map(|s| match s.entry {
            Entry::Backend => Ok(Target::Tcp(backend)),
            Entry::Strait(name) => Ok(Target::Connect(proxies.get(name).entry)),
            Entry::Import(name) => import_address(&binary, dir.path(), name).map(Target::Tcp),
            Entry::HAProxy(name) => Ok(Target::Tcp(proxies.get(name).entry)),
        })
        .collect::<Result<_>>()?;
    for (scenario, target) in scenarios.iter().zip(&targets) {
        warm_up(&proxies, scenario.name, *target).await?;
    }
    let pids = proxies.pids();
    if options.soak {
        return soak(options, &scenarios, &targets, &proxies, &pids).await;
    }
    warn_if_busy().await;

    let mut outcomes: Vec<Outcome<'_>> = scenarios.iter().map(|s| Outcome::new(s)).collect();
    let phase = |what: &str| {
        println!(
            "e2e bench: {what} ({:.0} s)",
            started.elapsed().as_secs_f64()
        )
    };

    // Idle memory first, while the proxies' heaps hold nothing from bulk flows.
    let measured_elsewhere = |scenario: &Scenario| {
        scenario
            .idle_with
            .is_some_and(|other| scenarios.iter().any(|s| s.name == other))
    };
    for (outcome, target) in outcomes.iter_mut().zip(&targets) {
        if outcome.scenario.processes.is_empty() || measured_elsewhere(outcome.scenario) {
            continue;
        }
        let members: Vec<u32> = outcome
            .scenario
            .processes
            .iter()
            .map(|(name, _)| proxies.get(name).child.id())
            .collect();
        outcome.idle = Some(
            idle_memory(
                outcome.scenario,
                *target,
                &members,
                idle_count,
                options.idle_settle(),
            )
            .await,
        );
    }
    phase("idle memory measured");

    let plan = options.latency();
    for round in 0..options.rounds() {
        for (outcome, target) in outcomes.iter_mut().zip(&targets) {
            let latency = &mut outcome.latency;
            if latency.error.is_some() {
                continue;
            }
            match latency_round(*target, plan, &pids).await {
                Ok(measured) => latency.record(measured),
                Err(error) => latency.error = Some(format!("round {}: {error}", round + 1)),
            }
        }
    }
    phase("latency measured");

    let beside = Beside {
        bulk_streams: MIXED_BULK_STREAMS,
        bulk_rate: Some(MIXED_BULK_RATE),
        connectors: 0,
        stall: None,
    };
    for round in 0..options.rounds() {
        for (outcome, target) in outcomes.iter_mut().zip(&targets) {
            let mixed = &mut outcome.mixed;
            if mixed.latency.error.is_some() {
                continue;
            }
            match mixed_round(*target, plan, beside, &pids).await {
                Ok(run) => {
                    mixed.bulk_gbps.push(run.bulk_gbps);
                    mixed.latency.record(run.latency);
                }
                Err(error) => mixed.latency.error = Some(format!("round {}: {error}", round + 1)),
            }
        }
    }
    phase(&format!(
        "latency beside {MIXED_BULK_STREAMS} bulk flows measured"
    ));

    let streams = [1, 8];
    for (index, streams) in streams.iter().enumerate() {
        let total = options.bulk_bytes();
        let warm = (total / 8).clamp(*streams as u64 * MIB, 64 * MIB);
        for (outcome, target) in outcomes.iter_mut().zip(&targets) {
            if let Err(error) = bulk_round(*target, *streams, warm, &pids).await {
                outcome.bulk[index].error = Some(format!("warm-up: {error}"));
            }
        }
        for round in 0..options.rounds() {
            for (outcome, target) in outcomes.iter_mut().zip(&targets) {
                let series: &mut Series = &mut outcome.bulk[index];
                if series.error.is_some() {
                    continue;
                }
                match bulk_round(*target, *streams, total, &pids).await {
                    Ok(run) => series.runs.push((run.gbps, run.cpu)),
                    Err(error) => series.error = Some(format!("round {}: {error}", round + 1)),
                }
            }
        }
        phase(&format!(
            "bulk throughput over {streams} connection(s) measured"
        ));
    }

    let connectors = options.connectors();
    for (outcome, target) in outcomes.iter_mut().zip(&targets) {
        if let Err(error) = connection_rate(
            *target,
            connectors,
            Duration::from_millis(100),
            RATE_EACH,
            &pids,
        )
        .await
        {
            outcome.rate.error = Some(format!("warm-up: {error}"));
        }
    }
    for round in 0..options.rounds() {
        for (outcome, target) in outcomes.iter_mut().zip(&targets) {
            if outcome.rate.error.is_some() {
                continue;
            }
            match connection_rate(
                *target,
                connectors,
                options.rate_duration(),
                RATE_EACH,
                &pids,
            )
            .await
            {
                Ok(run) => outcome.rate.runs.push((run.per_second, run.cpu)),
                Err(error) => outcome.rate.error = Some(format!("round {}: {error}", round + 1)),
            }
        }
    }
    phase("connection rate measured");

    let shape = Shape {
        quick: options.quick,
        rounds: options.rounds(),
        bulk_bytes: options.bulk_bytes(),
        streams,
        latency: plan,
        mixed_bulk_streams: MIXED_BULK_STREAMS,
        connectors,
        rate_duration: options.rate_duration(),
        idle_count,
        idle_settle: options.idle_settle(),
    };
    println!("\n### Scenarios\n");
    println!("| scenario | path | proxy processes | compared with |");
    println!("|---|---|---|---|");
    for scenario in &scenarios {
        let processes: Vec<&str> = scenario.processes.iter().map(|(name, _)| *name).collect();
        println!(
            "| {} | {} | {} | {} |",
            scenario.name,
            scenario.path,
            if processes.is_empty() {
                "-".to_owned()
            } else {
                processes.join(", ")
            },
            scenario.peer.unwrap_or("-")
        );
    }
    print_report(&shape, &outcomes);
    print_summary(&outcomes);

    let mut failures = missing(&outcomes);
    if let Err(error) = proxies.check_alive() {
        failures.push(error);
    }
    if let Some(path) = &options.json {
        let rows = rows(threads, &outcomes);
        write_json(path, &rows)?;
        println!("\nwrote {} rows to {}", rows.len(), path.display());
    }
    let svg = options.svg_path();
    let subtitle = format!(
        "{}{}; {cores} cores, {threads} worker thread(s) per proxy process; {haproxy_version}",
        when,
        if options.quick { ", --quick" } else { "" }
    );
    write_chart(&svg, &subtitle, &outcomes)?;
    println!("wrote the chart to {}", svg.display());
    println!(
        "\n(total run time {:.1} s)",
        started.elapsed().as_secs_f64()
    );
    if failures.is_empty() {
        return Ok(());
    }
    println!("\n### Failures\n");
    for failure in &failures {
        println!("- {failure}");
    }
    let involved = |name: &str| {
        outcomes.iter().any(|o| {
            o.scenario.processes.iter().any(|(p, _)| *p == name)
                && failures
                    .iter()
                    .any(|f| f.starts_with(&format!("{}:", o.scenario.name)))
        })
    };
    println!("\n{}", proxies.logs_of(involved));
    Err(format!(
        "{} figure(s) missing: {}",
        failures.len(),
        failures.join("; ")
    ))
}

/// Where gateway `name` listens for `app/echo:42` behind a ClusterSetIP:
/// its import port, as `strait imports` prints it for the gateway's
/// configuration and cluster, on the gateway's address (the CONNECT
/// listener's, the default of `imports.address`; all of a gateway's
/// listeners share it here).
fn import_address(
    binary: &std::path::Path,
    dir: &std::path::Path,
    name: &str,
) -> Result<SocketAddr> {
    let spec = GATEWAYS
        .iter()
        .find(|g| g.name == name)
        .expect("a gateway of GATEWAYS");
    let config = dir.join(format!("config-{}", spec.config));
    let ports = import_ports(binary, &config, spec.cluster)?;
    let echo = ports
        .iter()
        .find(|p| p.namespace == "app" && p.service == "echo" && p.port == 42)
        .ok_or_else(|| {
            format!(
                "`strait imports` for {} gives app/echo:42 no import port",
                spec.cluster
            )
        })?;
    Ok(SocketAddr::new(IpAddr::V4(spec.ip), echo.import_port))
}

/// A free TCP port on `ip` (bound to port 0, then released for a proxy).
fn free_port(ip: IpAddr) -> Result<SocketAddr> {
    std::net::TcpListener::bind(SocketAddr::new(ip, 0))
        .and_then(|listener| listener.local_addr())
        .map_err(|e| format!("cannot find a free port on {ip}: {e}"))
}

/// The current time in UTC, as `date -u` says it.
fn utc_now() -> String {
    std::process::Command::new("date")
        .args(["-u", "+%Y-%m-%d %H:%M UTC"])
        .output()
        .ok()
        .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_owned())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown date".to_owned())
}

/// Other work on the host (a build, another benchmark) takes cores from the
/// proxies: say so, since the figures would be too low.
async fn warn_if_busy() {
    let Some(before) = host_cpu() else { return };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let Some(after) = host_cpu() else { return };
    let busy = after.busy_since(&before);
    if busy > 25.0 {
        println!(
            "e2e bench: WARNING: the host was {busy:.0}% busy (% of one core) before the \
             measurement started; other load makes these figures too low"
        );
    }
}
