//! The control plane as the cluster's MCS controller, at scale, on the
//! in-process API servers (`tests/kube_api`, the wire protocol kube-rs
//! speaks): Strait's source and import reconciler (`kube.manageImports`,
//! two replicas electing a writer by Lease) in this process, against C
//! clusters whose remote ones export services.
//!
//! `cargo bench --bench control_plane -- [--quick] [--clusters N]
//! [--held N,N,..] [--sequential N] [--burst N] [--write-delay MS]
//! [--in-flight N] [--concurrency N,N,..] [--qps N] [--rounds N]`
//!
//! The local API server makes each write take `--write-delay` (5 ms, a
//! real server's round trip for a small apply) and serves at most
//! `--in-flight` (64) at once. Per round, for each `--held` size and each
//! `--concurrency` (`imports.writes.concurrency`; 1 is the serial writer
//! Strait had before), interleaved:
//!
//! - **bootstrap**: the held services (spread over the remote clusters,
//!   each a Service, its export and a slice of 2 ready endpoints) exist
//!   when Strait starts: the time until every import is `Ready`;
//! - **sequential**: `--sequential` more exports, one at a time in c2,
//!   each timed from the export's creation to its import `Ready` (polled
//!   every 2 ms), with the work per export: publications of the source,
//!   cluster translations, import objects rendered and the writes made;
//! - **burst**: `--burst` exports at once in c2: the first, median and last
//!   import `Ready` (polled every 20 ms).
//!
//! Under `cargo test` (no `--bench` argument) it runs `--quick`: 3 clusters,
//! 20 held, 3 sequential, a burst of 20, one round; it checks that every
//! import turns Ready, never how fast.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a bench may panic on what it set up

#[path = "common/flags.rs"]
#[allow(dead_code)]
mod flags;
#[path = "../tests/kube_api/mod.rs"]
mod kube_api;

use std::process::ExitCode;
use std::time::{Duration, Instant};

use kube_api::ApiServer;
use kube_api::fixtures::{Setup, Started};
use serde_json::{Value, json};
use strait::controller::writes::WriteLimits;
use strait::controller::{ControllerOptions, ExportStatusOptions, ImportOptions};
use strait::imports::{NamespaceQuota, PortRange};

// The allocator `strait` runs with (src/main.rs): the replicas here are
// measured as users run them, not with the C library's malloc.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const NAMESPACE: &str = "shop";
const GIVE_UP: Duration = Duration::from_secs(600);
/// How long the replicas may take to settle once every held import is Ready.
const SETTLE_GIVE_UP: Duration = Duration::from_secs(120);

struct Options {
    clusters: usize,
    held: Vec<usize>,
    sequential: usize,
    burst: usize,
    write_delay: Duration,
    in_flight: usize,
    concurrency: Vec<usize>,
    /// `imports.writes.qps` (its burst twice that); `None`: the defaults.
    qps: Option<u32>,
    rounds: usize,
    as_test: bool,
}

impl Options {
    fn parse() -> Result<Self, String> {
        let as_test = !std::env::args().any(|a| a == "--bench");
        let quick = as_test || std::env::args().any(|a| a == "--quick");
        let mut options = Options {
            clusters: if quick { 3 } else { 5 },
            held: if quick { vec![20] } else { vec![0, 1000] },
            sequential: if quick { 3 } else { 30 },
            burst: if quick { 20 } else { 500 },
            write_delay: Duration::from_millis(5),
            in_flight: 64,
            concurrency: if quick { vec![16] } else { vec![1, 16] },
            qps: None,
            rounds: 1,
            as_test,
        };
        let numbers = |value: &mut flags::Value<'_>, usage: &str| -> Result<Vec<usize>, String> {
            value
                .list(usage)?
                .iter()
                .map(|n| {
                    n.parse()
                        .map_err(|_| format!("{usage}: {n:?} is not a number"))
                })
                .collect()
        };
        flags::parse(|flag, value| {
            match flag {
                "--clusters" => options.clusters = value.number("--clusters N")?.max(2),
                "--held" => options.held = numbers(value, "--held N,N")?,
                "--sequential" => options.sequential = value.number("--sequential N")?,
                "--burst" => options.burst = value.number("--burst N")?,
                "--write-delay" => {
                    options.write_delay = Duration::from_millis(
                        value
                            .text("--write-delay MS")?
                            .parse()
                            .map_err(|_| "--write-delay wants milliseconds".to_owned())?,
                    );
                }
                "--in-flight" => options.in_flight = value.number("--in-flight N")?,
                "--concurrency" => options.concurrency = numbers(value, "--concurrency N,N")?,
                "--rounds" => options.rounds = value.number("--rounds N")?,
                "--qps" => {
                    options.qps = Some(u32::try_from(value.number("--qps N")?).unwrap_or(u32::MAX));
                }
                _ => {}
            }
            Ok(())
        })?;
        Ok(options)
    }
}

fn service(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"type": "ClusterIP", "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}})
}

fn export(name: &str) -> Value {
    json!({"apiVersion": "multicluster.x-k8s.io/v1beta1", "kind": "ServiceExport",
        "metadata": {"name": name, "namespace": NAMESPACE}})
}

fn slice(name: &str, cluster: usize, index: usize) -> Value {
    let endpoints: Vec<Value> = (0..2)
        .map(|pod| {
            let host = index * 2 + pod;
            json!({"addresses": [format!("10.{}.{}.{}", 100 + cluster, host / 250, host % 250 + 1)],
                "conditions": {"ready": true}})
        })
        .collect();
    json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": format!("{name}-1"), "namespace": NAMESPACE,
            "labels": {"kubernetes.io/service-name": name}},
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
        "endpoints": endpoints})
}

/// A service of `cluster` (its index), Service and slice first, its export last.
fn export_service(server: &ApiServer, name: &str, cluster: usize, index: usize) {
    server.apply(service(name));
    server.apply(slice(name, cluster, index));
    server.apply(export(name));
}

fn gateway_pods() -> Value {
    let endpoints: Vec<Value> = ["10.1.0.50", "10.1.0.51"]
        .iter()
        .map(|ip| json!({"addresses": [ip], "conditions": {"ready": true}}))
        .collect();
    json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": "strait-gateway-1", "namespace": "strait-system",
            "labels": {"kubernetes.io/service-name": "strait-gateway"}},
        "addressType": "IPv4", "endpoints": endpoints,
        "ports": [{"name": "tunnel", "port": 15443, "protocol": "TCP"}]})
}

fn ready(server: &ApiServer, name: &str) -> bool {
    server
        .object("ServiceImport", NAMESPACE, name)
        .and_then(|import| {
            import["status"]["conditions"].as_array().map(|c| {
                c.iter()
                    .any(|c| c["type"] == "Ready" && c["status"] == "True")
            })
        })
        .unwrap_or(false)
}

/// The work counters of the replicas: publications, cluster
/// translations, import objects rendered, writes.
fn work(replicas: &[Started]) -> [u64; 4] {
    let mut counters = [0; 4];
    for replica in replicas {
        let snapshot = replica.snapshot();
        counters[0] += snapshot.generation;
        counters[1] += snapshot
            .clusters
            .iter()
            .map(|c| c.translations)
            .sum::<u64>();
        if let Some(report) = replica.imports() {
            let report = report.borrow();
            counters[2] += report.rendered;
            counters[3] += report.writes;
        }
    }
    counters
}

struct Figures {
    bootstrap: Duration,
    sequential: Vec<Duration>,
    /// Per export, summed over both replicas.
    work: [f64; 4],
    burst: Vec<Duration>,
}

async fn scenario(options: &Options, held: usize, concurrency: usize) -> Figures {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut servers = Vec::new();
    for n in 1..=options.clusters {
        let server = ApiServer::start(&["v1beta1"]).await;
        let id = format!("c{n}");
        server.apply(kube_api::fixtures::namespace("strait-system"));
        server.apply(kube_api::fixtures::namespace(NAMESPACE));
        server.apply(kube_api::fixtures::property(
            "cluster.clusterset.k8s.io",
            &id,
            "v1beta1",
        ));
        let network = format!("net-{}", n % 2);
        server.apply(kube_api::fixtures::property(
            "network.clusterset.k8s.io",
            &network,
            "v1beta1",
        ));
        server.apply(kube_api::fixtures::gateway(&format!("198.51.100.{n}")));
        servers.push(server);
    }
    servers[0].apply(gateway_pods());
    servers[0].slow_writes(options.write_delay, options.in_flight);
    let remotes = options.clusters - 1;
    for index in 0..held {
        let cluster = 1 + index % remotes;
        export_service(&servers[cluster], &format!("held-{index}"), cluster, index);
    }
    let kubeconfigs: Vec<_> = servers
        .iter()
        .enumerate()
        .map(|(n, s)| s.write_kubeconfig(dir.path(), &format!("c{}", n + 1)))
        .collect();
    let remote_paths: Vec<&std::path::Path> =
        kubeconfigs[1..].iter().map(|p| p.as_path()).collect();
    let started = Instant::now();
    let mut replicas = Vec::new();
    for identity in ["replica-a", "replica-b"] {
        let mut setup = Setup::reading(strait::discovery::kube::KubeOptions {
            remote_secrets: false,
            debounce: Duration::from_millis(250),
            ..kube_api::fixtures::kube_options(&kubeconfigs[0], &remote_paths)
        });
        setup.writes = ControllerOptions {
            export_status: Some(ExportStatusOptions {
                lease_name: "strait-export-status".to_owned(),
                lease_namespace: Some("strait-system".to_owned()),
                identity: Some(identity.to_owned()),
                ..ExportStatusOptions::default()
            }),
            imports: Some(ImportOptions {
                range: PortRange::new(20000, 39999).expect("a range"),
                release_grace: Duration::from_secs(300),
                max_headless_endpoints: 8,
                // Every service is in one namespace here.
                quota: NamespaceQuota {
                    import_ports: 100_000,
                    ..NamespaceQuota::default()
                },
                adopt_from: None,
                writes: WriteLimits {
                    concurrency,
                    qps: options.qps.unwrap_or(WriteLimits::default().qps),
                    burst: options
                        .qps
                        .map_or(WriteLimits::default().burst, |qps| qps.saturating_mul(2)),
                    ..WriteLimits::default()
                },
            }),
            ..setup.writes
        };
        replicas.push(Started::start(setup).await.expect("the source starts"));
    }
    let local = &servers[0];
    let deadline = Instant::now() + GIVE_UP;
    while !(0..held).all(|i| ready(local, &format!("held-{i}"))) {
        assert!(
            Instant::now() < deadline,
            "the held imports never turned Ready"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let bootstrap = started.elapsed();
    // Let the last writes' echoes settle before timing single changes:
    // the leader has found every service as desired and made no pass for
    // a second.
    let mut last = None;
    let settle_deadline = Instant::now() + SETTLE_GIVE_UP;
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        if Instant::now() > settle_deadline {
            let reports: Vec<String> = replicas
                .iter()
                .filter_map(|replica| replica.imports())
                .map(|report| {
                    let report = report.borrow();
                    format!(
                        "leader {} passes {} unsettled {} skipped {} exhausted {} queued {} last error {:?}",
                        report.leader,
                        report.passes,
                        report.unsettled,
                        report.skipped.len(),
                        report.exhausted.len(),
                        report.queued,
                        report.last_error
                    )
                })
                .collect();
            panic!(
                "the leader never settled every service within {SETTLE_GIVE_UP:?} of the last Ready: {reports:#?}"
            );
        }
        let now: Vec<(u64, usize)> = replicas
            .iter()
            .filter_map(|replica| replica.imports())
            .map(|report| {
                let report = report.borrow();
                (report.passes, report.unsettled)
            })
            .collect();
        let settled = now.iter().all(|(_, unsettled)| *unsettled == 0);
        if settled && last.as_ref() == Some(&now) {
            break;
        }
        last = Some(now);
    }

    let before = work(&replicas);
    let mut sequential = Vec::new();
    for n in 0..options.sequential {
        let name = format!("one-{n}");
        servers[1].apply(service(&name));
        servers[1].apply(slice(&name, 1, held + n));
        let exported = Instant::now();
        servers[1].apply(export(&name));
        while !ready(local, &name) {
            assert!(exported.elapsed() < GIVE_UP, "{name} never turned Ready");
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        sequential.push(exported.elapsed());
        // What the export sets off settles before the next.
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let after = work(&replicas);
    let per_export = |i: usize| (after[i] - before[i]) as f64 / options.sequential.max(1) as f64;

    let names: Vec<String> = (0..options.burst).map(|n| format!("burst-{n}")).collect();
    for (n, name) in names.iter().enumerate() {
        servers[1].apply(service(name));
        servers[1].apply(slice(name, 1, held + options.sequential + n));
    }
    let exported = Instant::now();
    for name in &names {
        servers[1].apply(export(name));
    }
    let mut burst: Vec<Option<Duration>> = vec![None; names.len()];
    while burst.iter().any(Option::is_none) {
        assert!(exported.elapsed() < GIVE_UP, "the burst never turned Ready");
        for (name, at) in names.iter().zip(burst.iter_mut()) {
            if at.is_none() && ready(local, name) {
                *at = Some(exported.elapsed());
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut burst: Vec<Duration> = burst.into_iter().flatten().collect();
    burst.sort();
    Figures {
        bootstrap,
        sequential,
        work: [per_export(0), per_export(1), per_export(2), per_export(3)],
        burst,
    }
}

fn ms(duration: Duration) -> String {
    format!("{:.0}", duration.as_secs_f64() * 1000.0)
}

fn quantile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let index = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[index.min(sorted.len() - 1)]
}

fn main() -> ExitCode {
    let options = match Options::parse() {
        Ok(options) => options,
        Err(error) => {
            eprintln!("control_plane bench: {error}");
            return ExitCode::FAILURE;
        }
    };
    if options.as_test {
        println!(
            "control_plane bench: no --bench argument, so running as a test (the quick variant); \
             `cargo bench --bench control_plane` measures"
        );
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    println!(
        "{} clusters, writes of {} ms ({} at once at the server), {} sequential exports, a burst of {}",
        options.clusters,
        options.write_delay.as_millis(),
        options.in_flight,
        options.sequential,
        options.burst
    );
    println!(
        "| round | held | concurrency | bootstrap, ms | sequential p50 / p90 / max, ms | per export: publications / translations / objects rendered / writes | burst first / p50 / last, ms |"
    );
    println!("|---|---:|---:|---:|---|---|---|");
    for round in 1..=options.rounds {
        for &held in &options.held {
            for &concurrency in &options.concurrency {
                let figures = runtime.block_on(scenario(&options, held, concurrency));
                let mut sequential = figures.sequential.clone();
                sequential.sort();
                println!(
                    "| {round} | {held} | {concurrency} | {} | {} / {} / {} | {:.1} / {:.1} / {:.1} / {:.1} | {} / {} / {} |",
                    ms(figures.bootstrap),
                    ms(quantile(&sequential, 0.5)),
                    ms(quantile(&sequential, 0.9)),
                    ms(quantile(&sequential, 1.0)),
                    figures.work[0],
                    figures.work[1],
                    figures.work[2],
                    figures.work[3],
                    ms(quantile(&figures.burst, 0.0)),
                    ms(quantile(&figures.burst, 0.5)),
                    ms(quantile(&figures.burst, 1.0)),
                );
            }
        }
    }
    ExitCode::SUCCESS
}
