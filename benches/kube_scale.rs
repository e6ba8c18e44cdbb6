//! The Kubernetes source at scale: a real `strait run --kube` against 20
//! in-process API servers (`tests/kube_api`, the wire protocol kube-rs
//! speaks), each a cluster of 2,000 exported services with 5 EndpointSlices
//! of 10 endpoints (200,000 slices, 2,000,000 endpoints in the set),
//! written as a real server holds them (managedFields, last-applied
//! annotations, targetRefs; `kube_scale/objects.rs`).
//!
//! `cargo bench --bench kube_scale -- [--quick] [--clusters N]
//! [--services N] [--slices N] [--endpoints N] [--changes N]
//! [--debounce DURATION] [--manage-imports] [--feed] [--json PATH]`
//!
//! Measured: the time from spawning the gateway until `/readyz` (every
//! cluster listed, the first routes built); its RSS then, 10 s later, and
//! at its peak (`VmHWM`); and, `--changes` times, the time from one
//! EndpointSlice change in a remote cluster to `/debug/routes?service=…`
//! showing the new address (polled every 10 ms: the answer for a service of 1,000 backends is itself a few hundred KiB of JSON). The changes come one at a
//! time, each in another cluster and service. `--debounce` sets
//! `tuning.reloadDebounce` (the shipped 250 ms by default): it is part of
//! every change's time by design.
//!
//! With `--manage-imports` the gateway is also `c00`'s MCS controller
//! (`kube.manageImports`, writes at 5,000/s): it writes an import, a
//! derived Service and its slices for every service of the set into
//! `c00`'s server. Measured beside the above: the time until every import
//! is `Ready`, and per change the time until `c00`'s MCS EndpointSlice of
//! the service holds the new address, with the control plane's work
//! counters (`/metrics`) per change. The changes are then made in the
//! clusters on `c00`'s network, whose endpoints the MCS slices list (those
//! of other networks list `c00`'s gateway pods, which no change moves).
//!
//! With `--feed`, `c00` reads no other cluster's API server: each other
//! cluster runs its own gateway against its own server, and `c00` follows
//! their exported-state feeds over the tunnel (`kube_scale/feed.rs`).
//! Ready then means every feed synced too; the RSS of those gateways is
//! printed beside `c00`'s, and each change goes through the changed
//! cluster's gateway and its feed. `c00`'s CPU time is printed either way.
//!
//! No peer runs beside it: no other MCS implementation can run on these
//! machines. The objects' own JSON size (what the API servers send in the
//! lists) is printed beside the RSS for scale.
//!
//! Under `cargo test` (no `--bench` argument) this runs `--quick`: 3
//! clusters of 50 services, 2 slices of 5 endpoints, 3 changes; it checks
//! that every cluster syncs, that a sampled service has every backend and
//! that every change arrives, never speed. `STRAIT_BENCH_KEEP=1` keeps the
//! gateway's configuration and log; `KUBE_SCALE_LOG` sets its `RUST_LOG`
//! (`strait::discovery::kube=debug,strait::gateway=debug` logs the time of
//! each rebuild's phases); `KUBE_SCALE_WRAP` names a command to run the
//! gateway under (`heaptrack -o /tmp/gateway` for a heap profile).

#![allow(clippy::unwrap_used, clippy::expect_used)] // a bench may panic on what it set up

#[path = "kube_scale/feed.rs"]
mod feed;
#[path = "common/flags.rs"]
#[allow(dead_code)]
mod flags;
#[path = "../tests/kube_api/mod.rs"]
mod kube_api;
#[path = "kube_scale/objects.rs"]
mod objects;
#[path = "kube_scale/process.rs"]
mod process;
#[path = "../tests/support/mod.rs"]
mod support;
#[path = "e2e/topology.rs"]
#[allow(dead_code)]
mod topology;

use std::io::{Read as _, Write as _};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use kube_api::ApiServer;
use objects::Shape;
use process::{cpu_seconds, memory_kib};

/// The cluster set the certificates are made for (`topology` uses it).
const CLUSTERSET: &str = "bench.strait.dev";
/// Networks the clusters are spread over.
const NETWORKS: usize = 4;
const READY_LIMIT: Duration = Duration::from_secs(900);
const CHANGE_LIMIT: Duration = Duration::from_secs(60);

type Result<T> = std::result::Result<T, String>;

struct Options {
    as_test: bool,
    quick: bool,
    clusters: Option<usize>,
    services: Option<usize>,
    slices: Option<usize>,
    endpoints: Option<usize>,
    changes: Option<usize>,
    debounce: Option<String>,
    manage_imports: bool,
    feed: bool,
    json: Option<PathBuf>,
}

impl Options {
    fn parse() -> Result<Options> {
        let mut options = Options {
            as_test: true,
            quick: false,
            clusters: None,
            services: None,
            slices: None,
            endpoints: None,
            changes: None,
            debounce: None,
            manage_imports: false,
            feed: false,
            json: None,
        };
        flags::parse(|flag, value| {
            match flag {
                "--bench" => options.as_test = false,
                "--quick" => options.quick = true,
                "--clusters" => options.clusters = Some(value.number("--clusters N")?),
                "--services" => options.services = Some(value.number("--services N")?),
                "--slices" => options.slices = Some(value.number("--slices N")?),
                "--endpoints" => options.endpoints = Some(value.number("--endpoints N")?),
                "--changes" => options.changes = Some(value.number("--changes N")?),
                "--debounce" => options.debounce = Some(value.text("--debounce DURATION")?),
                "--manage-imports" => options.manage_imports = true,
                "--feed" => options.feed = true,
                "--json" => options.json = Some(PathBuf::from(value.text("--json PATH")?)),
                _ => {}
            }
            Ok(())
        })?;
        options.quick |= options.as_test;
        if options.clusters.is_some_and(|c| !(2..=200).contains(&c)) {
            return Err("--clusters: from 2 to 200".to_owned());
        }
        if options.manage_imports && options.clusters() <= NETWORKS {
            return Err(format!(
                "--manage-imports: more than {NETWORKS} clusters, so that one shares c00's network"
            ));
        }
        Ok(options)
    }

    fn pick(&self, set: Option<usize>, quick: usize, full: usize) -> usize {
        set.unwrap_or(if self.quick { quick } else { full }).max(1)
    }

    fn clusters(&self) -> usize {
        self.pick(self.clusters, 3, 20)
    }

    fn shape(&self) -> Shape {
        Shape {
            services: self.pick(self.services, 50, 2_000),
            slices: self.pick(self.slices, 2, 5),
            endpoints: self.pick(self.endpoints, 5, 10),
        }
    }

    fn changes(&self) -> usize {
        self.pick(self.changes, 3, 30)
    }
}

fn cluster_id(cluster: usize) -> String {
    format!("c{cluster:02}")
}

fn gateway_ip(cluster: usize) -> String {
    format!("198.51.100.{}", cluster + 1)
}

/// Seeds one cluster; the size of its objects' JSON in bytes.
fn seed(server: &ApiServer, cluster: usize, shape: Shape) -> usize {
    let mut bytes = 0;
    let mut put = |object: serde_json::Value| {
        bytes += object.to_string().len();
        server.apply(object);
    };
    put(objects::namespace("strait-system"));
    for namespace in 0..objects::NAMESPACES {
        put(objects::namespace(&objects::namespace_of(namespace)));
    }
    put(objects::property(
        "cluster.clusterset.k8s.io",
        &cluster_id(cluster),
    ));
    put(objects::property(
        "network.clusterset.k8s.io",
        &format!("net-{}", cluster % NETWORKS),
    ));
    put(objects::gateway(&gateway_ip(cluster)));
    for service in 0..shape.services {
        put(objects::service(cluster, service));
        put(objects::export(service));
        for slice in 0..shape.slices {
            put(objects::slice(cluster, shape, service, slice, None));
        }
    }
    // The seeding history is not needed for watches that start later; a
    // real server compacts it too.
    server.compact_and_drop_watches();
    bytes
}

/// `GET path` on the admin listener: status and body.
fn get(admin: SocketAddr, path: &str) -> Result<(u16, String)> {
    let mut stream = TcpStream::connect_timeout(&admin, Duration::from_secs(2))
        .map_err(|e| format!("connect {admin}: {e}"))?;
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .map_err(|e| e.to_string())?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: admin\r\nConnection: close\r\n\r\n"
    )
    .map_err(|e| format!("write: {e}"))?;
    let mut response = String::new();
    stream
        .read_to_string(&mut response)
        .map_err(|e| format!("read: {e}"))?;
    let status = response
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("no status line in {response:?}"))?;
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_owned())
        .unwrap_or_default();
    Ok((status, body))
}

struct Gateway {
    child: Child,
    admin: SocketAddr,
    /// Run under `KUBE_SCALE_WRAP`: the child is the wrapper.
    wrapped: bool,
}

impl Gateway {
    /// The gateway's own process: the child, or under a wrapper the
    /// `strait` process in the child's process group.
    fn pid(&self) -> Result<u32> {
        let child = self.child.id();
        if !self.wrapped {
            return Ok(child);
        }
        let group = |pid: &str| -> Option<u32> {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let (_, rest) = stat.rsplit_once(") ")?;
            rest.split_whitespace().nth(2)?.parse().ok()
        };
        std::fs::read_dir("/proc")
            .map_err(|e| e.to_string())?
            .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
            .find(|pid| {
                group(pid) == Some(child)
                    && std::fs::read_link(format!("/proc/{pid}/exe")).is_ok_and(|exe| {
                        exe.file_name()
                            .is_some_and(|name| name.to_string_lossy().starts_with("strait"))
                    })
            })
            .and_then(|pid| pid.parse().ok())
            .ok_or_else(|| format!("no strait process under the wrapper {child}"))
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        // A wrapper (a profiler) writes its report when the gateway exits:
        // ask it to, and give it time.
        if self.wrapped
            && let Ok(pid) = self.pid()
            && let Ok(pid) = i32::try_from(pid)
        {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGTERM,
            );
            let asked = Instant::now();
            while asked.elapsed() < Duration::from_secs(600) {
                if matches!(self.child.try_wait(), Ok(Some(_))) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Writes a CA and gateway certificate per cluster under `dir/certs`.
fn write_certs(dir: &Path, clusters: usize) -> Result<PathBuf> {
    let strait = topology::strait_binary(true)?;
    let certs = dir.join("certs");
    let mut args: Vec<std::ffi::OsString> = vec![
        "certs".into(),
        "--out".into(),
        certs.clone().into(),
        "--clusterset".into(),
        CLUSTERSET.into(),
    ];
    for cluster in 0..clusters {
        args.push("--cluster".into());
        args.push(cluster_id(cluster).into());
    }
    let args: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_os_str()).collect();
    topology::output_of(&strait, &args, "strait certs")?;
    Ok(certs)
}

/// `c00`'s gateway, reading the other clusters through their API servers
/// (`kube.kubeconfigs`), or with `peers` (its `gateway.yaml` lines) from
/// their feeds.
fn spawn_gateway(
    dir: &Path,
    servers: &[ApiServer],
    debounce: &str,
    manage_imports: bool,
    peers: Option<(String, topology::GatewayPorts)>,
) -> Result<Gateway> {
    let config = dir.join("config");
    std::fs::create_dir_all(&config).map_err(|e| e.to_string())?;
    let imports = if manage_imports {
        "  manageImports: true\nimports:\n  writes: {qps: 5000, burst: 10000}\n"
    } else {
        ""
    };
    let (links, ports) = match peers {
        Some((peers, ports)) => (peers, ports),
        None => {
            let mut kubeconfigs = Vec::new();
            for (cluster, server) in servers.iter().enumerate().skip(1) {
                let path = server.write_kubeconfig(&config, &cluster_id(cluster));
                kubeconfigs.push(format!("{:?}", path.display().to_string()));
            }
            let ports = topology::GatewayPorts::pick(Ipv4Addr::LOCALHOST.into())?;
            (
                format!("  kubeconfigs: [{}]\n", kubeconfigs.join(", ")),
                ports,
            )
        }
    };
    std::fs::write(
        config.join("gateway.yaml"),
        format!("kube:\n{links}{imports}tuning:\n  reloadDebounce: {debounce}\n"),
    )
    .map_err(|e| e.to_string())?;
    let local = servers[0].write_kubeconfig(dir, &cluster_id(0));
    spawn_strait(
        dir,
        "gateway",
        &config,
        &local,
        &dir.join("certs").join(cluster_id(0)),
        &ports,
        true,
    )
}

/// `strait run --kube` with `config`, reading `kubeconfig`'s cluster, its
/// log in `dir/<name>.log`; `wrappable`: run under `KUBE_SCALE_WRAP`.
fn spawn_strait(
    dir: &Path,
    name: &str,
    config: &Path,
    kubeconfig: &Path,
    tls_dir: &Path,
    ports: &topology::GatewayPorts,
    wrappable: bool,
) -> Result<Gateway> {
    let strait = topology::strait_binary(true)?;
    let log = std::fs::File::create(dir.join(format!("{name}.log"))).map_err(|e| e.to_string())?;
    // `KUBE_SCALE_WRAP="heaptrack -o /tmp/gw"` runs the gateway under a
    // profiler: the words before the binary.
    let wrap = if wrappable {
        std::env::var("KUBE_SCALE_WRAP").unwrap_or_default()
    } else {
        String::new()
    };
    let mut words = wrap.split_whitespace();
    let mut command = match words.next() {
        Some(program) => {
            let mut command = Command::new(program);
            command.args(words).arg(&strait);
            command
        }
        None => Command::new(&strait),
    };
    if !wrap.is_empty() {
        std::os::unix::process::CommandExt::process_group(&mut command, 0);
    }
    let child = command
        .arg("run")
        .arg("--kube")
        .args(["--kube-timeout", "900s"])
        .arg("--config")
        .arg(config)
        .arg("--connect-listen")
        .arg(ports.connect.to_string())
        .arg("--tunnel-listen")
        .arg(ports.tunnel.to_string())
        .arg("--admin-listen")
        .arg(ports.admin.to_string())
        .arg("--tls-dir")
        .arg(tls_dir)
        .env("KUBECONFIG", kubeconfig)
        .env("POD_NAMESPACE", "strait-system")
        .env(
            "RUST_LOG",
            std::env::var("KUBE_SCALE_LOG")
                .unwrap_or_else(|_| "info,strait::access=off".to_owned()),
        )
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", strait.display()))?;
    Ok(Gateway {
        child,
        admin: ports.admin,
        wrapped: !wrap.is_empty(),
    })
}

fn wait_ready(gateway: &mut Gateway, dir: &Path) -> Result<Duration> {
    let start = Instant::now();
    loop {
        if let Some(status) = gateway.child.try_wait().map_err(|e| e.to_string())? {
            let log = std::fs::read_to_string(dir.join("gateway.log")).unwrap_or_default();
            return Err(format!("the gateway exited ({status}):\n{log}"));
        }
        if matches!(get(gateway.admin, "/readyz"), Ok((200, _))) {
            return Ok(start.elapsed());
        }
        if start.elapsed() > READY_LIMIT {
            return Err(format!("not ready after {READY_LIMIT:?}"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The backends `/debug/routes` shows for one service.
fn backends(admin: SocketAddr, service: usize) -> Result<String> {
    let path = format!(
        "/debug/routes?service={}/{}",
        objects::namespace_of(service),
        objects::service_name(service)
    );
    match get(admin, &path)? {
        (200, body) => Ok(body),
        (status, body) => Err(format!("{path}: {status} {body}")),
    }
}

/// With `--manage-imports`: waits until `c00` holds every service's
/// import `Ready`.
fn wait_imports_ready(local: &ApiServer, services: usize, since: Instant) -> Result<Duration> {
    let mut pending: Vec<usize> = (0..services).collect();
    loop {
        pending.retain(|&service| !import_ready(local, service));
        if pending.is_empty() {
            return Ok(since.elapsed());
        }
        if since.elapsed() > READY_LIMIT {
            return Err(format!(
                "{} imports not Ready after {READY_LIMIT:?}, the first {}",
                pending.len(),
                objects::service_name(pending[0])
            ));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn import_ready(local: &ApiServer, service: usize) -> bool {
    local
        .object(
            "ServiceImport",
            &objects::namespace_of(service),
            &objects::service_name(service),
        )
        .and_then(|import| {
            import["status"]["conditions"].as_array().map(|conditions| {
                conditions
                    .iter()
                    .any(|c| c["type"] == "Ready" && c["status"] == "True")
            })
        })
        .unwrap_or(false)
}

/// Whether one of `c00`'s MCS EndpointSlices of `service` lists `address`.
fn mcs_slice_lists(local: &ApiServer, service: usize, address: &str) -> bool {
    let name = objects::service_name(service);
    local
        .objects("EndpointSlice", &objects::namespace_of(service))
        .iter()
        .filter(|slice| {
            slice["metadata"]["labels"]["multicluster.kubernetes.io/service-name"] == *name
        })
        .any(|slice| {
            slice["endpoints"].as_array().is_some_and(|endpoints| {
                endpoints.iter().any(|endpoint| {
                    endpoint["addresses"]
                        .as_array()
                        .is_some_and(|a| a.iter().any(|a| a == address))
                })
            })
        })
}

/// The control plane's work counters from `/metrics`: publications,
/// cluster translations, import passes, imports planned, objects rendered,
/// import writes.
fn work(admin: SocketAddr) -> Result<[f64; 6]> {
    let (_, text) = get(admin, "/metrics")?;
    let sum = |prefix: &str| -> f64 {
        text.lines()
            .filter(|line| line.starts_with(prefix))
            .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    Ok([
        sum("strait_control_plane_work_total{stage=\"publication\"}"),
        sum("strait_control_plane_work_total{stage=\"cluster_translation\"}"),
        sum("strait_control_plane_work_total{stage=\"import_pass\"}"),
        sum("strait_control_plane_work_total{stage=\"import_planned\"}"),
        sum("strait_control_plane_work_total{stage=\"import_object_rendered\"}"),
        sum("strait_import_writes_total"),
    ])
}

fn run(options: &Options) -> Result<()> {
    let clusters = options.clusters();
    let shape = options.shape();
    let debounce = options
        .debounce
        .clone()
        .unwrap_or_else(|| "250ms".to_owned());
    println!(
        "kube_scale bench: {clusters} clusters x {} services x {} slices x {} endpoints{}; reloadDebounce {debounce}",
        shape.services,
        shape.slices,
        shape.endpoints,
        if options.quick { ", --quick" } else { "" }
    );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let seeding = Instant::now();
    let servers: Vec<ApiServer> = (0..clusters)
        .map(|_| runtime.block_on(ApiServer::start(&["v1alpha1"])))
        .collect();
    let json_bytes: usize = servers
        .iter()
        .enumerate()
        .map(|(cluster, server)| seed(server, cluster, shape))
        .sum();
    println!(
        "  seeded {} objects ({:.0} MiB of JSON) in {:.1} s",
        clusters * (shape.services * (2 + shape.slices) + objects::NAMESPACES + 4),
        json_bytes as f64 / 1_048_576.0,
        seeding.elapsed().as_secs_f64()
    );
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    if std::env::var_os("STRAIT_BENCH_KEEP").is_some() {
        println!(
            "  keeping {} (the gateway's log: gateway.log)",
            dir.path().display()
        );
    }
    if options.manage_imports {
        servers[0].apply(objects::gateway_pods());
    }
    write_certs(dir.path(), clusters)?;
    let (peers, links) = if options.feed {
        let ports = topology::GatewayPorts::pick(Ipv4Addr::LOCALHOST.into())?;
        let (peers, lines) = feed::spawn_peers(dir.path(), &servers, &debounce, ports.tunnel)?;
        (peers, Some((lines, ports)))
    } else {
        (Vec::new(), None)
    };
    let spawned = Instant::now();
    let mut gateway = spawn_gateway(
        dir.path(),
        &servers,
        &debounce,
        options.manage_imports,
        links,
    )?;
    let mut ready = wait_ready(&mut gateway, dir.path())?;
    if options.feed {
        ready = feed::wait_feeds_synced(gateway.admin, clusters - 1, Instant::now() - ready)?;
    }
    let pid = gateway.pid()?;
    let cpu_ready = cpu_seconds(pid)?;
    let (rss_ready, _) = memory_kib(pid)?;
    // Every cluster's backends, in one sampled service (by feed, the
    // routes follow the last feed's sync by one publication).
    let sample = shape.services / 2;
    let lacking = |body: &str| {
        (0..clusters).find_map(|cluster| {
            let address = objects::pod_address(
                cluster,
                shape,
                sample,
                shape.slices - 1,
                shape.endpoints - 1,
            );
            (!body.contains(&format!("\"{address}\"")) && !body.contains(&format!("{address}:")))
                .then(|| format!("cluster {cluster}'s backend {address}"))
        })
    };
    let asked = Instant::now();
    loop {
        let body = backends(gateway.admin, sample)?;
        match lacking(&body) {
            None => break,
            Some(missing) if asked.elapsed() > Duration::from_secs(10) => {
                return Err(format!("service {sample} lacks {missing}:\n{body}"));
            }
            Some(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
    let imports_ready = if options.manage_imports {
        Some(wait_imports_ready(&servers[0], shape.services, spawned)?)
    } else {
        None
    };
    std::thread::sleep(Duration::from_secs(if options.quick { 1 } else { 10 }));
    let (rss_settled, _) = memory_kib(pid)?;
    // With imports managed, the clusters on c00's network: their
    // endpoints are what c00's MCS slices list.
    let changing: Vec<usize> = (1..clusters)
        .filter(|cluster| !options.manage_imports || cluster % NETWORKS == 0)
        .collect();
    let work_before = work(gateway.admin)?;
    let mut latencies = Vec::new();
    let mut to_slices = Vec::new();
    for change in 0..options.changes() {
        let cluster = changing[change % changing.len()];
        let service = (change * 7919 + 13) % shape.services;
        let moved = format!("10.250.{}.{}", change / 250, change % 250 + 1);
        let start = Instant::now();
        servers[cluster].apply(objects::slice(cluster, shape, service, 0, Some(&moved)));
        let mut routed = None;
        let mut written = (!options.manage_imports).then_some(Duration::ZERO);
        loop {
            if routed.is_none() && backends(gateway.admin, service)?.contains(&moved) {
                routed = Some(start.elapsed());
            }
            if written.is_none() && mcs_slice_lists(&servers[0], service, &moved) {
                written = Some(start.elapsed());
            }
            if let (Some(routed), Some(written)) = (routed, written) {
                latencies.push(routed.as_secs_f64() * 1000.0);
                to_slices.push(written.as_secs_f64() * 1000.0);
                break;
            }
            if start.elapsed() > CHANGE_LIMIT {
                return Err(format!(
                    "change {change} (cluster {cluster}, service {service}) not live after {CHANGE_LIMIT:?}"
                ));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        // Let the rebuild that carried it finish before the next change.
        std::thread::sleep(Duration::from_millis(300));
    }
    let work_after = work(gateway.admin)?;
    let (rss_end, peak) = memory_kib(pid)?;
    let cpu_end = cpu_seconds(pid)?;
    let peer_rss: Vec<u64> = peers
        .iter()
        .map(|peer| memory_kib(peer.child.id()).map(|(rss, _)| rss))
        .collect::<Result<_>>()?;
    let sorted_of = |values: &[f64]| {
        let mut sorted = values.to_vec();
        sorted.sort_by(f64::total_cmp);
        sorted
    };
    let quantile =
        |sorted: &[f64], q: f64| sorted[((sorted.len() - 1) as f64 * q).round() as usize];
    let sorted = sorted_of(&latencies);
    let at = |q: f64| quantile(&sorted, q);
    let mib = |kib: u64| kib as f64 / 1024.0;
    println!(
        "  ready (every cluster listed, routes built): {:.1} s",
        ready.as_secs_f64()
    );
    println!(
        "  RSS: {:.0} MiB at ready, {:.0} MiB settled, {:.0} MiB after the changes, peak {:.0} MiB",
        mib(rss_ready),
        mib(rss_settled),
        mib(rss_end),
        mib(peak)
    );
    println!(
        "  c00's CPU: {cpu_ready:.1} s until ready, {:.1} s from then to the last change",
        cpu_end - cpu_ready
    );
    if !peer_rss.is_empty() {
        println!(
            "  read by feed: each other cluster's own gateway (reading its cluster, serving its feed, following c00's): RSS {:.0} MiB on average, {:.0} MiB at most",
            mib(peer_rss.iter().sum::<u64>()) / peer_rss.len() as f64,
            mib(peer_rss.iter().copied().max().unwrap_or(0))
        );
    }
    println!(
        "  one endpoint change to live routes ({} changes): median {:.0} ms, p90 {:.0} ms, max {:.0} ms (reloadDebounce {debounce} included)",
        latencies.len(),
        at(0.5),
        at(0.9),
        at(1.0)
    );
    if let Some(imports_ready) = imports_ready {
        let slices = sorted_of(&to_slices);
        let per_change: Vec<String> = work_before
            .iter()
            .zip(work_after)
            .map(|(before, after)| format!("{:.1}", (after - before) / latencies.len() as f64))
            .collect();
        println!(
            "  every import Ready in c00: {:.1} s after the gateway was spawned",
            imports_ready.as_secs_f64()
        );
        println!(
            "  one endpoint change to c00's MCS slice: median {:.0} ms, p90 {:.0} ms, max {:.0} ms",
            quantile(&slices, 0.5),
            quantile(&slices, 0.9),
            quantile(&slices, 1.0)
        );
        println!(
            "  per change: publications / translations / import passes / imports planned / objects rendered / writes: {}",
            per_change.join(" / ")
        );
    }
    if let Some(path) = &options.json {
        let rows = serde_json::json!([
            {"scenario": "strait", "workload": "kube-scale-ready", "value": ready.as_secs_f64(), "unit": "s"},
            {"scenario": "strait", "workload": "kube-scale-rss-settled", "value": mib(rss_settled), "unit": "MiB"},
            {"scenario": "strait", "workload": "kube-scale-rss-peak", "value": mib(peak), "unit": "MiB"},
            {"scenario": "strait", "workload": "kube-scale-change-median", "value": at(0.5), "unit": "ms"},
            {"scenario": "strait", "workload": "kube-scale-change-p90", "value": at(0.9), "unit": "ms"},
        ]);
        std::fs::write(path, format!("{rows:#}\n"))
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    drop(gateway);
    drop(peers);
    drop(servers);
    if std::env::var_os("STRAIT_BENCH_KEEP").is_some() {
        let _ = dir.keep();
    }
    runtime.shutdown_background();
    Ok(())
}

fn main() -> ExitCode {
    let options = match Options::parse() {
        Ok(options) => options,
        Err(error) => {
            eprintln!("kube_scale bench: {error}");
            return ExitCode::FAILURE;
        }
    };
    if options.as_test {
        println!(
            "kube_scale bench: no --bench argument, so running as a test (the quick variant); \
             `cargo bench --bench kube_scale` measures"
        );
    }
    match run(&options) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("kube_scale bench: {error}");
            ExitCode::FAILURE
        }
    }
}
