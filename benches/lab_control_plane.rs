//! Control-plane latency and cost in the cluster lab (tests/lab/): real
//! API servers, kube-proxy and CoreDNS, Strait installed from `deploy/`.
//!
//! `cargo bench --bench lab_control_plane -- [--services N] [--held N] [--then N]`
//! (root; the lab must be able to start)
//!
//! Latency, for each of `--services` (default 300) Services of c3 (net-b),
//! exported one at a time: from the `ServiceExport`'s creation in c3 to
//!   1. its ServiceImport in c1 (net-a) `Ready`,
//!   2. then a DNS answer with its ClusterSetIP, asked from a pod of c1:
//!      for every other service of c1's CoreDNS (what a pod asks, with
//!      CoreDNS's cache in between), for the others straight of Strait's
//!      responder (`cluster-edge-dns`),
//!   3. then the first HTTP answer through that address from the same pod
//!      (kube-proxy's rules for the derived Service, c1's gateway, the
//!      tunnel, c3's gateway, the pod).
//!
//! Each is polled every 10 ms; p50, p90, p99 and the maximum are printed.
//!
//! Cost: with `--held` (default 1,000) Services exported in all (half in
//! c3, half in c2), once c1 imports all of them Ready and a minute has
//! passed, c1's two gateway pods' resident memory and the CPU time they
//! use over 60 s of quiet (no change), then over 60 s in which c2's echo
//! Deployment scales between 1 and 2 pods every 10 s (the endpoints of
//! all 500 of c2's held services change each time). Anchor (not run here: no other
//! MCS implementation runs on these machines): Istio's ambient
//! multicluster figures, about 1% of a core and 180 MB of istiod per added
//! remote cluster at 300 services × 4,000 endpoints.
//!
//! Then, with `--then N` (default 0), N more Services of c3 (in `bench-then`:
//! the held ones fill `bench`'s import port quota) are exported
//! one at a time with the held ones in place and timed as above: export →
//! Ready with 1,000 held.
//!
//! The lab links its clusters by feed (each gateway follows the others'
//! exported-state feeds); `LAB_LINKS=api cargo bench --bench
//! lab_control_plane -- …` measures the same with each cluster reading the
//! others' API servers instead (tests/lab/lab.sh).
//!
//! Under `cargo test` (no `--bench` argument) it runs 3 services and holds
//! none, and checks that each step arrives, never how fast.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a bench may panic on what it set up

#[path = "../tests/lab/mod.rs"]
#[allow(dead_code)]
mod lab;

use std::fs::File;
use std::io::{Read as _, Write as _};
use std::net::{Ipv4Addr, SocketAddr, TcpStream, UdpSocket};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use hickory_proto::op::{Message, MessageType, OpCode, Query};
use hickory_proto::rr::{Name, RData, RecordType};
use kube::api::{Api, DynamicObject, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::core::{ApiResource, GroupVersionKind};
use lab::Lab;
use nix::sched::CloneFlags;

const NAMESPACE: &str = "bench";
/// Where `--then` exports: the held services fill `bench`'s import port
/// quota (`imports.namespaceQuota.importPorts`, 1,000 by default).
const THEN_NAMESPACE: &str = "bench-then";
const POLL: Duration = Duration::from_millis(10);
const GIVE_UP: Duration = Duration::from_secs(120);
/// c1's cluster DNS (the `kube-dns` Service).
const CLUSTER_DNS: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(Ipv4Addr::new(10, 96, 0, 10)), 53);

struct Options {
    services: usize,
    held: usize,
    then: usize,
    as_test: bool,
}

impl Options {
    fn parse() -> Result<Self, String> {
        let args: Vec<String> = std::env::args().skip(1).collect();
        let as_test = !args.iter().any(|a| a == "--bench");
        let mut options = Options {
            services: if as_test { 3 } else { 300 },
            held: if as_test { 0 } else { 1000 },
            then: 0,
            as_test,
        };
        let mut words = args.iter();
        while let Some(word) = words.next() {
            let mut number = |what: &str| -> Result<usize, String> {
                words
                    .next()
                    .and_then(|n| n.parse().ok())
                    .ok_or_else(|| format!("{what} takes a number"))
            };
            match word.as_str() {
                "--services" => options.services = number("--services")?,
                "--held" => options.held = number("--held")?,
                "--then" => options.then = number("--then")?,
                _ => {}
            }
        }
        Ok(options)
    }
}

fn service_export() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("multicluster.x-k8s.io", "v1alpha1", "ServiceExport"),
        "serviceexports",
    )
}

fn service_import() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("multicluster.x-k8s.io", "v1alpha1", "ServiceImport"),
        "serviceimports",
    )
}

async fn client(lab: &Lab, cluster: &str) -> kube::Client {
    let kubeconfig = Kubeconfig::read_from(lab.kubeconfig(cluster)).expect("a kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .expect("a client configuration");
    kube::Client::try_from(config).expect("a client")
}

/// Services `s-<first>`… of `count`, each selecting the echo pods, as YAML.
fn services(first: usize, count: usize) -> String {
    services_in(NAMESPACE, first, count)
}

fn services_in(namespace: &str, first: usize, count: usize) -> String {
    (first..first + count)
        .map(|i| {
            format!(
                "apiVersion: v1\nkind: Service\nmetadata: {{name: s-{i:04}, namespace: {namespace}}}\n\
                 spec:\n  selector: {{app: echo}}\n  ports: [{{name: http, port: 80, targetPort: 8080}}]\n---\n"
            )
        })
        .collect()
}

fn exports(first: usize, count: usize) -> String {
    (first..first + count)
        .map(|i| {
            format!(
                "apiVersion: multicluster.x-k8s.io/v1alpha1\nkind: ServiceExport\n\
                 metadata: {{name: s-{i:04}, namespace: {NAMESPACE}}}\n---\n"
            )
        })
        .collect()
}

/// One DNS question for `name`'s A record to `server`; its first address,
/// if any.
fn resolve(socket: &UdpSocket, server: SocketAddr, name: &str, id: u16) -> Option<Ipv4Addr> {
    let mut query = Message::new(id, MessageType::Query, OpCode::Query);
    query.metadata.recursion_desired = true;
    query.add_query(Query::query(Name::from_ascii(name).ok()?, RecordType::A));
    socket.send_to(&query.to_vec().ok()?, server).ok()?;
    let mut buffer = [0u8; 1500];
    let (length, _) = socket.recv_from(&mut buffer).ok()?;
    let answer = Message::from_vec(&buffer[..length]).ok()?;
    answer.answers.iter().find_map(|record| match &record.data {
        RData::A(a) => Some(a.0),
        _ => None,
    })
}

/// One HTTP GET to `address`; whether an answer came.
fn answered(address: Ipv4Addr) -> bool {
    let Ok(mut stream) =
        TcpStream::connect_timeout(&SocketAddr::from((address, 80)), Duration::from_millis(500))
    else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    if stream.write_all(b"GET / HTTP/1.0\r\n\r\n").is_err() {
        return false;
    }
    let mut reply = String::new();
    let _ = stream.read_to_string(&mut reply);
    reply.starts_with("HTTP/1.0 200") || reply.starts_with("HTTP/1.1 200")
}

fn poll<T>(what: &str, mut step: impl FnMut() -> Option<T>) -> T {
    let started = Instant::now();
    loop {
        if let Some(value) = step() {
            return value;
        }
        assert!(started.elapsed() < GIVE_UP, "gave up waiting for {what}");
        std::thread::sleep(POLL);
    }
}

struct Sample {
    ready: Duration,
    dns: Duration,
    /// Whether the DNS answer came from CoreDNS (as a pod asks), else
    /// straight from Strait's responder (`cluster-edge-dns`), with no
    /// cache between.
    through_coredns: bool,
    connection: Duration,
}

/// Runs on a thread inside c1's client pod's network namespace: the DNS
/// and HTTP sockets are the pod's, the API calls leave through its node.
/// Exports `s-<first>`… of `count` one at a time in c3 and times each.
fn measure(
    lab: &Lab,
    namespace: &str,
    first: usize,
    count: usize,
    strait_dns: SocketAddr,
) -> Vec<Sample> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let (c3, c1) = runtime.block_on(async { (client(lab, "c3").await, client(lab, "c1").await) });
    let exports: Api<DynamicObject> = Api::namespaced_with(c3, namespace, &service_export());
    let imports: Api<DynamicObject> = Api::namespaced_with(c1, namespace, &service_import());
    let socket = UdpSocket::bind("0.0.0.0:0").expect("a DNS socket");
    socket
        .set_read_timeout(Some(Duration::from_millis(200)))
        .expect("a timeout");
    let mut samples = Vec::with_capacity(count);
    for i in first..first + count {
        let name = format!("s-{i:04}");
        let export = DynamicObject::new(&name, &service_export()).within(namespace);
        let started = Instant::now();
        runtime
            .block_on(exports.create(&PostParams::default(), &export))
            .expect("the export is created");
        poll("the import to be Ready", || {
            let import = runtime.block_on(imports.get_opt(&name)).ok()??;
            let conditions = import.data["status"]["conditions"].as_array()?.clone();
            conditions
                .iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
                .then_some(())
        });
        let ready = started.elapsed();
        let fqdn = format!("{name}.{namespace}.svc.clusterset.local.");
        // Every other service asks Strait's responder directly: CoreDNS
        // caches a negative answer (`cache 5`), so a name asked too early
        // stays unanswered there for up to 5 s.
        let through_coredns = i % 2 == 0;
        let server = if through_coredns {
            CLUSTER_DNS
        } else {
            strait_dns
        };
        let address = poll("a DNS answer", || resolve(&socket, server, &fqdn, i as u16));
        let dns = started.elapsed();
        poll("an HTTP answer", || answered(address).then_some(()));
        samples.push(Sample {
            ready,
            dns,
            through_coredns,
            connection: started.elapsed(),
        });
    }
    samples
}

fn percentiles(label: &str, mut values: Vec<Duration>) {
    if values.is_empty() {
        println!("  {label:<34} no samples");
        return;
    }
    values.sort();
    let at = |q: f64| {
        let index = ((values.len() as f64 - 1.0) * q).round() as usize;
        values[index].as_secs_f64() * 1000.0
    };
    println!(
        "  {label:<34} p50 {:>7.0} ms   p90 {:>7.0} ms   p99 {:>7.0} ms   max {:>7.0} ms",
        at(0.5),
        at(0.9),
        at(0.99),
        at(1.0)
    );
}

/// (resident KiB, CPU ticks used so far) of a process.
fn usage(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let rss = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0);
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after_name = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let ticks = fields
        .get(11..13)
        .map_or(0, |f| f.iter().filter_map(|t| t.parse::<u64>().ok()).sum());
    (rss, ticks)
}

/// CPU ticks (user and system) of every process on the host, summed by
/// command name: the lab's components and Strait's gateways all run here.
fn ticks_by_command() -> std::collections::BTreeMap<String, u64> {
    let mut ticks = std::collections::BTreeMap::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let Some((head, _)) = stat.rsplit_once(')') else {
            continue;
        };
        let command = head
            .split_once('(')
            .map_or("?", |(_, name)| name)
            .to_owned();
        *ticks.entry(command).or_default() += usage(pid).1;
    }
    ticks
}

/// Prints the CPU each command used between two readings, busiest first.
fn print_cpu(before: &std::collections::BTreeMap<String, u64>, seconds: f64) {
    let after = ticks_by_command();
    let mut used: Vec<(u64, &String)> = after
        .iter()
        .map(|(command, ticks)| {
            (
                ticks.saturating_sub(*before.get(command).unwrap_or(&0)),
                command,
            )
        })
        .filter(|(ticks, _)| *ticks > 0)
        .collect();
    used.sort_by(|a, b| b.cmp(a));
    let total: u64 = used.iter().map(|(ticks, _)| ticks).sum();
    println!(
        "  CPU over those {seconds:.0} s, by command (all processes: {:.0}% of a core):",
        total as f64 / 100.0 / seconds * 100.0
    );
    for (ticks, command) in used.iter().take(12) {
        println!(
            "    {command:<24} {:>6.1}% of a core",
            *ticks as f64 / 100.0 / seconds * 100.0
        );
    }
}

fn cost(lab: &Lab, held: usize, already: usize) {
    // c3 holds half, c2 the rest: c1 reads both.
    let in_c3 = held / 2;
    let in_c2 = held - in_c3;
    if in_c3 > already {
        lab.apply("c3", &services(already, in_c3 - already));
        lab.apply("c3", &exports(already, in_c3 - already));
    }
    lab.apply("c2", &lab::echo_deployment(NAMESPACE, "echo", 1));
    lab.apply("c2", &services(in_c3, in_c2));
    lab.apply("c2", &exports(in_c3, in_c2));
    let started = Instant::now();
    let ready =
        r#"jsonpath={range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}"#;
    lab::wait_until(&format!("c1 imports all {held}, Ready"), 900, || {
        lab.try_kubectl(
            "c1",
            &["-n", NAMESPACE, "get", "serviceimports", "-o", ready],
        )
        .is_ok_and(|listing| listing.lines().filter(|l| *l == "True").count() >= held)
    });
    println!(
        "  c1 imports all {held} services, Ready, {:.1} s after the last export was applied",
        started.elapsed().as_secs_f64()
    );
    // Let the last writes and kube-proxy's resyncs pass before measuring.
    std::thread::sleep(Duration::from_secs(60));
    // Which replica writes the imports: the Lease holder plans, the
    // other follows.
    let holders = lab
        .try_kubectl(
            "c1",
            &[
                "-n",
                "strait-system",
                "get",
                "leases",
                "-o",
                "jsonpath={.items[*].spec.holderIdentity}",
            ],
        )
        .unwrap_or_default();
    let gateways: Vec<(u32, &'static str)> = lab
        .pods("c1", "strait-system", "cluster-edge-")
        .iter()
        .map(|pod| {
            let role = if holders.split_whitespace().any(|holder| holder == pod) {
                "leader"
            } else {
                "follower"
            };
            (lab.pod_pid("c1", "strait-system", pod), role)
        })
        .collect();
    let ticks_per_second = 100.0;
    // One of c2's held services, to see its endpoints move.
    let sample_service = format!("kubernetes.io/service-name=s-{in_c3:04}");
    let ready_endpoints = || {
        lab.try_kubectl(
            "c2",
            &[
                "-n",
                NAMESPACE,
                "get",
                "endpointslices",
                "-l",
                &sample_service,
                "-o",
                "jsonpath={range .items[*].endpoints[?(@.conditions.ready==true)]}x{end}",
            ],
        )
        .map_or(0, |x| x.len())
    };
    let window = |what: &str, churn: bool| {
        let before: Vec<(u64, u64)> = gateways.iter().map(|&(p, _)| usage(p)).collect();
        let started = Instant::now();
        let mut seen = Vec::new();
        let mut toggles = 0;
        while started.elapsed() < Duration::from_secs(60) {
            if churn {
                // Scale c2's echo between 1 and 2 pods: the endpoints of
                // every held service of c2 change, a pod's start apart.
                seen.push(ready_endpoints());
                let replicas = if toggles % 2 == 0 { "2" } else { "1" };
                lab.kubectl(
                    "c2",
                    &[
                        "-n",
                        NAMESPACE,
                        "scale",
                        "deployment/echo",
                        "--replicas",
                        replicas,
                    ],
                );
                toggles += 1;
            }
            std::thread::sleep(Duration::from_secs(if churn { 10 } else { 1 }));
        }
        let seconds = started.elapsed().as_secs_f64();
        for ((pid, role), (_, ticks_before)) in gateways.iter().zip(before) {
            let (rss, ticks) = usage(*pid);
            println!(
                "  {what:<34} gateway pid {pid} ({role:<8}): RSS {:>6.1} MiB, CPU {:>5.1}% of a core",
                rss as f64 / 1024.0,
                (ticks - ticks_before) as f64 / ticks_per_second / seconds * 100.0
            );
        }
        if churn {
            println!("  ready endpoints of s-{in_c3:04} in c2 before each scaling: {seen:?}");
        }
    };
    window("quiet, 60 s:", false);
    window("c2 scaled 1↔2 every 10 s, 60 s:", true);
}

/// Exports `count` Services from `s-<first>` one at a time, asking from
/// the pod whose network namespace `netns` is, and prints each and the
/// percentiles.
fn timed(
    lab: &Lab,
    netns: &str,
    namespace: &str,
    first: usize,
    count: usize,
    strait_dns: SocketAddr,
    held: &str,
) {
    let cpu_before = ticks_by_command();
    let started = Instant::now();
    let samples = std::thread::scope(|scope| {
        scope
            .spawn(|| {
                let handle = File::open(netns).expect("the pod's namespace");
                nix::sched::setns(&handle, CloneFlags::CLONE_NEWNET).expect("setns");
                measure(lab, namespace, first, count, strait_dns)
            })
            .join()
            .expect("the measuring thread")
    });
    println!(
        "lab_control_plane: {} services exported one at a time in c3 (net-b), seen from c1 (net-a){held}",
        samples.len()
    );
    for (i, sample) in (first..).zip(&samples) {
        println!(
            "  s-{i:04}: Ready {:>5} ms, DNS ({}) {:>5} ms, HTTP {:>5} ms",
            sample.ready.as_millis(),
            if sample.through_coredns {
                "CoreDNS"
            } else {
                "Strait "
            },
            sample.dns.as_millis(),
            sample.connection.as_millis()
        );
    }
    percentiles(
        "export → import Ready in c1",
        samples.iter().map(|s| s.ready).collect(),
    );
    percentiles(
        "export → answer of c1's CoreDNS",
        samples
            .iter()
            .filter(|s| s.through_coredns)
            .map(|s| s.dns)
            .collect(),
    );
    percentiles(
        "export → answer of Strait's DNS",
        samples
            .iter()
            .filter(|s| !s.through_coredns)
            .map(|s| s.dns)
            .collect(),
    );
    percentiles(
        "export → first HTTP answer",
        samples.iter().map(|s| s.connection).collect(),
    );
    print_cpu(&cpu_before, started.elapsed().as_secs_f64());
}

fn main() -> ExitCode {
    let options = match Options::parse() {
        Ok(options) => options,
        Err(error) => {
            eprintln!("lab_control_plane bench: {error}");
            return ExitCode::FAILURE;
        }
    };
    if options.as_test {
        println!(
            "lab_control_plane bench: no --bench argument, so running as a test ({} services, none held)",
            options.services
        );
    }
    let Some(lab) = Lab::start() else {
        return ExitCode::SUCCESS;
    };
    // The measuring thread's API calls leave through c1's node, which the
    // lab walls off from the other API servers when it links by feed
    // (tests/lab/lab.sh): down while the bench runs. Linked by feed, no
    // gateway reads another cluster's API server, wall or not.
    let _wall = (std::env::var("LAB_LINKS").as_deref() != Ok("api")).then(|| lab.wall_down());
    lab.namespace(NAMESPACE);
    lab.apply("c3", &lab::echo_deployment(NAMESPACE, "echo", 1));
    lab.apply("c3", &services(0, options.services));
    lab.client_pod("c1", NAMESPACE);
    lab::wait_until("c3's echo pod is ready", 120, || {
        !lab.pod_ips("c3", NAMESPACE, "echo-").is_empty()
    });
    let netns = format!("/run/netns/{}", lab.pod_netns("c1", NAMESPACE, "client"));
    let strait_dns: Ipv4Addr = lab
        .kubectl(
            "c1",
            &[
                "-n",
                "strait-system",
                "get",
                "service",
                "cluster-edge-dns",
                "-o",
                "jsonpath={.spec.clusterIP}",
            ],
        )
        .parse()
        .expect("cluster-edge-dns has a ClusterIP");
    let strait_dns = SocketAddr::from((strait_dns, 53));
    timed(&lab, &netns, NAMESPACE, 0, options.services, strait_dns, "");
    if options.held > 0 {
        cost(&lab, options.held, options.services);
    }
    if options.then > 0 {
        let first = options.held.max(options.services);
        lab.namespace(THEN_NAMESPACE);
        lab.apply("c3", &lab::echo_deployment(THEN_NAMESPACE, "echo", 1));
        lab.apply("c3", &services_in(THEN_NAMESPACE, first, options.then));
        lab::wait_until(
            "c3's echo pod of the --then namespace is ready",
            120,
            || !lab.pod_ips("c3", THEN_NAMESPACE, "echo-").is_empty(),
        );
        timed(
            &lab,
            &netns,
            THEN_NAMESPACE,
            first,
            options.then,
            strait_dns,
            &format!(", with {} held", options.held.max(options.services)),
        );
    }
    lab.stop();
    ExitCode::SUCCESS
}
