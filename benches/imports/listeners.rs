//! A gateway replica opening many import listeners: the real `strait run`
//! in file mode with a configuration of `count` one-port services exported
//! by a remote cluster, against the same gateway with `imports.listen:
//! false` and against HAProxy binding the same port numbers, in
//! interleaved rounds.

use std::fmt::Write as _;
use std::io::{Read as _, Write as _};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::{self, Pod, ServiceSpec};
use crate::topology::{
    GatewayPorts, import_ports, raise_open_files, strait_binary, write_certificates,
};
use crate::{Result, Row, haproxy, spread};

/// The gateway's own listeners (connect, tunnel, admin).
const GATEWAY_IP: Ipv4Addr = Ipv4Addr::new(127, 0, 8, 1);
/// `imports.address`: nothing else listens there, so every listening
/// socket on it is an import port.
const IMPORTS_IP: Ipv4Addr = Ipv4Addr::new(127, 0, 9, 1);
/// HAProxy binds the same port numbers here.
const HAPROXY_IP: Ipv4Addr = Ipv4Addr::new(127, 0, 9, 2);
/// HAProxy's servers: nothing listens, so a probe's connection is refused
/// at once (Strait's services have no ready endpoint, so it closes them too).
const NOWHERE: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(127, 0, 9, 3)), 1);
const PORT_RANGE: &str = "30000-49999";
const STRAIT_LOG: &str = "info,strait::access=off";
const START_LIMIT: Duration = Duration::from_secs(120);

pub(crate) struct ListenerPlan {
    pub(crate) count: usize,
    pub(crate) rounds: usize,
    pub(crate) threads: usize,
    pub(crate) as_test: bool,
    /// How long after start-up RSS is read again (every accept loop has run).
    pub(crate) settle: Duration,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Variant {
    Strait,
    StraitWithout,
    HAProxy,
    /// The cheapest HAProxy can do with these ports: one section binding
    /// them all, one server (every port the same service, unlike Strait).
    HAProxyOneSection,
}

impl Variant {
    fn label(self) -> &'static str {
        match self {
            Variant::Strait => "strait run (imports.listen: true)",
            Variant::StraitWithout => "strait run (imports.listen: false)",
            Variant::HAProxy => "haproxy (one listen section per port)",
            Variant::HAProxyOneSection => "haproxy (one section, a bind line per port)",
        }
    }

    fn key(self) -> &'static str {
        match self {
            Variant::Strait => "strait",
            Variant::StraitWithout => "strait-no-listeners",
            Variant::HAProxy => "haproxy",
            Variant::HAProxyOneSection => "haproxy-one-section",
        }
    }
}

/// One start-up.
struct Startup {
    /// Spawn until ready (Strait: `/readyz` answers 200; HAProxy: every
    /// port listens).
    ready: Duration,
    rss_ready_kib: u64,
    rss_settled_kib: u64,
}

/// A child process, killed when dropped.
struct Running {
    child: Child,
    log: PathBuf,
}

impl Running {
    fn spawn(command: &mut Command, log: PathBuf) -> Result<Running> {
        let file = std::fs::File::create(&log)
            .map_err(|e| format!("cannot create {}: {e}", log.display()))?;
        let stderr = file
            .try_clone()
            .map_err(|e| format!("cannot duplicate a log handle: {e}"))?;
        let child = command
            .stdin(Stdio::null())
            .stdout(file)
            .stderr(stderr)
            .spawn()
            .map_err(|e| format!("cannot start {:?}: {e}", command.get_program()))?;
        Ok(Running { child, log })
    }

    fn check_alive(&mut self) -> Result<()> {
        match self.child.try_wait() {
            Ok(None) => Ok(()),
            Ok(Some(status)) => Err(format!(
                "{:?} exited ({status}); end of {}:\n{}",
                self.log.file_stem().unwrap_or_default(),
                self.log.display(),
                tail(&self.log)
            )),
            Err(error) => Err(format!("cannot wait for a child: {error}")),
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(12)..].join("\n")
}

/// VmRSS of a process in KiB.
fn rss_kib(pid: u32) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .map_err(|e| format!("cannot read /proc/{pid}/status: {e}"))?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|value| value.split_whitespace().next()?.parse().ok())
        .ok_or_else(|| format!("no VmRSS in /proc/{pid}/status"))
}

/// The TCP ports listening on `ip` (IPv4), from `/proc/net/tcp`.
fn listening_ports(ip: Ipv4Addr) -> Result<Vec<u16>> {
    let table = std::fs::read_to_string("/proc/net/tcp")
        .map_err(|e| format!("cannot read /proc/net/tcp: {e}"))?;
    // The address as the kernel prints it: the u32 in host (little-endian) order.
    let wanted = format!("{:08X}", u32::from_le_bytes(ip.octets()));
    let mut ports = Vec::new();
    for line in table.lines().skip(1) {
        let mut fields = line.split_whitespace();
        let (Some(local), Some(state)) = (fields.nth(1), fields.nth(1)) else {
            continue;
        };
        let Some((address, port)) = local.split_once(':') else {
            continue;
        };
        // 0A: TCP_LISTEN.
        if state == "0A" && address == wanted {
            ports.extend(u16::from_str_radix(port, 16).ok());
        }
    }
    ports.sort_unstable();
    Ok(ports)
}

/// The status of `GET path`, or `None` when nothing answers yet.
fn http_status(address: SocketAddr, path: &str) -> Option<u16> {
    let mut stream = TcpStream::connect_timeout(&address, Duration::from_secs(1)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    response.split_whitespace().nth(1)?.parse().ok()
}

/// Connects to every `step`-th port and the last one, then resets the
/// connection; the ports that refused or timed out.
fn probe(ip: Ipv4Addr, ports: &[u16], step: usize) -> Vec<u16> {
    let mut failed = Vec::new();
    let sample = ports.iter().step_by(step.max(1)).chain(ports.last());
    for port in sample {
        let address = SocketAddr::new(IpAddr::V4(ip), *port);
        match TcpStream::connect_timeout(&address, Duration::from_secs(2)) {
            // A reset, not a FIN: no TIME_WAIT left behind.
            Ok(stream) => {
                let _ = socket2::SockRef::from(&stream).set_linger(Some(Duration::ZERO));
            }
            Err(_) => failed.push(*port),
        }
    }
    failed
}

/// Writes the configuration: c1 (the gateway's cluster, net-a, nothing
/// exported) and c3 (net-b) exporting `count` services `ns<i % 50>/svc<i>`
/// with one TCP port each and one endpoint that is not ready (so a probe's
/// connection finds no backend and is closed at once; `tests/support`
/// writes invalid YAML for a slice without endpoints).
fn write_config(config: &Path, count: usize, listen: bool, c1_tunnel: SocketAddr) -> Result<()> {
    let c3_tunnel = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(127, 0, 8, 3)), 15008);
    let names: Vec<(String, String)> = (0..count)
        .map(|i| (format!("ns{}", i % 50), format!("svc{i}")))
        .collect();
    let services: Vec<ServiceSpec<'_>> = names
        .iter()
        .zip(0u32..)
        .map(|((namespace, name), index)| ServiceSpec {
            namespace,
            name,
            ports: &[("tcp", 80, 8080)],
            exported_at: Some("2026-01-01T00:00:00Z"),
            pods: vec![Pod {
                address: IpAddr::V4(Ipv4Addr::from((10 << 24) | (30 << 16) | index)),
                ready: false,
            }],
            proxy_protocol: false,
            udp_ports: &[],
        })
        .collect();
    support::write_cluster(
        config,
        "c1",
        &support::cluster_yaml("c1", "net-a", c1_tunnel, &[]),
    );
    support::write_cluster(
        config,
        "c3",
        &support::cluster_yaml("c3", "net-b", c3_tunnel, &services),
    );
    let path = config.join("gateway.yaml");
    let text = format!(
        "tunnel:\n  transport: h2\nimports:\n  listen: {listen}\n  address: {IMPORTS_IP}\n  portRange: {PORT_RANGE}\n"
    );
    std::fs::write(&path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// HAProxy's equivalent: one `listen` section per import port, each with
/// its own server, so each port stands for its own service as in Strait;
/// or (`one_section`) one section with a `bind` line per port.
fn write_haproxy_config(
    path: &Path,
    ports: &[u16],
    threads: usize,
    one_section: bool,
) -> Result<()> {
    let mut text = format!(
        "global
    nbthread {threads}
    maxconn 1000

defaults
    mode tcp
    maxconn 1000
    timeout connect 5s
    timeout client 10m
    timeout server 10m
"
    );
    if one_section {
        text.push_str("\nlisten imports\n");
        for port in ports {
            let _ = writeln!(text, "    bind {HAPROXY_IP}:{port}");
        }
        let _ = writeln!(text, "    server s {NOWHERE}");
    }
    for port in ports.iter().filter(|_| !one_section) {
        let _ = write!(
            text,
            "
listen import_{port}
    bind {HAPROXY_IP}:{port}
    server s {NOWHERE}
"
        );
    }
    std::fs::write(path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

struct Setup {
    strait: PathBuf,
    haproxy: Option<PathBuf>,
    dir: PathBuf,
    certs: PathBuf,
    ports: GatewayPorts,
    /// The import ports `strait imports` prints, sorted.
    imports: Vec<u16>,
    threads: usize,
    settle: Duration,
}

fn start(setup: &Setup, variant: Variant, round: usize) -> Result<Startup> {
    let log = setup
        .dir
        .join(format!("{}-{}.log", variant.key(), round + 1));
    let started = Instant::now();
    let mut running = match variant {
        Variant::Strait | Variant::StraitWithout => {
            let config = setup.dir.join(match variant {
                Variant::Strait => "config-listen",
                _ => "config-no-listen",
            });
            let mut command = Command::new(&setup.strait);
            command
                .arg("run")
                .arg("--config")
                .arg(config)
                .args(["--cluster", "c1"])
                .arg("--connect-listen")
                .arg(setup.ports.connect.to_string())
                .arg("--tunnel-listen")
                .arg(setup.ports.tunnel.to_string())
                .arg("--admin-listen")
                .arg(setup.ports.admin.to_string())
                .arg("--tls-dir")
                .arg(setup.certs.join("c1"))
                .env("TOKIO_WORKER_THREADS", setup.threads.to_string())
                .env(
                    "RUST_LOG",
                    std::env::var("RUST_LOG").unwrap_or_else(|_| STRAIT_LOG.to_owned()),
                );
            Running::spawn(&mut command, log)?
        }
        Variant::HAProxy | Variant::HAProxyOneSection => {
            let binary = setup.haproxy.as_ref().expect("haproxy rounds need haproxy");
            let mut command = Command::new(binary);
            command
                .arg("-db")
                .arg("-f")
                .arg(setup.dir.join(format!("{}.cfg", variant.key())));
            Running::spawn(&mut command, log)?
        }
    };
    let pid = running.child.id();
    let deadline = started + START_LIMIT;
    // HAProxy binds in configuration order: the last port first, then the
    // listening table (whose read costs more) until every port is there.
    let last = SocketAddr::new(
        IpAddr::V4(HAPROXY_IP),
        *setup.imports.last().expect("import ports"),
    );
    let ready = loop {
        running.check_alive()?;
        let ready = match variant {
            Variant::HAProxy | Variant::HAProxyOneSection => {
                TcpStream::connect_timeout(&last, Duration::from_millis(200)).is_ok_and(|s| {
                    let _ = socket2::SockRef::from(&s).set_linger(Some(Duration::ZERO));
                    true
                }) && listening_ports(HAPROXY_IP)?.len() >= setup.imports.len()
            }
            _ => http_status(setup.ports.admin, "/readyz") == Some(200),
        };
        if ready {
            break started.elapsed();
        }
        if Instant::now() > deadline {
            return Err(format!(
                "{} was not ready within {START_LIMIT:?}; end of its log:\n{}",
                variant.label(),
                tail(&running.log)
            ));
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let rss_ready_kib = rss_kib(pid)?;
    std::thread::sleep(setup.settle);
    let rss_settled_kib = rss_kib(pid)?;
    running.check_alive()?;

    // Every port `strait imports` printed listens (and nothing else), and a
    // sample of them accepts.
    let (ip, want): (Ipv4Addr, &[u16]) = match variant {
        Variant::Strait => (IMPORTS_IP, &setup.imports),
        Variant::StraitWithout => (IMPORTS_IP, &[]),
        Variant::HAProxy | Variant::HAProxyOneSection => (HAPROXY_IP, &setup.imports),
    };
    let listening = listening_ports(ip)?;
    if listening != want {
        return Err(format!(
            "{}: {} ports listen on {ip}, not the {} `strait imports` printed",
            variant.label(),
            listening.len(),
            want.len()
        ));
    }
    let failed = probe(ip, want, 100);
    if !failed.is_empty() {
        return Err(format!(
            "{}: {} sampled ports did not accept, e.g. {ip}:{}",
            variant.label(),
            failed.len(),
            failed[0]
        ));
    }
    Ok(Startup {
        ready,
        rss_ready_kib,
        rss_settled_kib,
    })
}

pub(crate) fn run(plan: &ListenerPlan, rows: &mut Vec<Row>) -> Result<()> {
    let ci = std::env::var("CI").is_ok_and(|v| v == "true" || v == "1");
    let strait = strait_binary(plan.as_test)?;
    let haproxy = match haproxy::find_or_install() {
        Ok((binary, version)) => {
            println!("imports bench: listeners: peer {version}");
            Some(binary)
        }
        Err(why) if ci => return Err(format!("CI=true needs haproxy: {why}")),
        Err(why) => {
            println!("SKIPPED: imports bench: the haproxy rows: {why}");
            None
        }
    };
    // Each process holds one file per listener; this process hands its
    // limit down.
    let files = raise_open_files(plan.count as u64 + 4096);
    let count = plan
        .count
        .min(usize::try_from(files.saturating_sub(2048)).unwrap_or(usize::MAX));
    if count < plan.count {
        println!(
            "imports bench: NOTE: {count} listeners instead of {}: the open-file limit is {files}",
            plan.count
        );
    }
    let mut dir =
        tempfile::tempdir().map_err(|e| format!("cannot create a temporary directory: {e}"))?;
    if std::env::var_os("STRAIT_BENCH_KEEP").is_some() {
        dir.disable_cleanup(true);
        println!(
            "imports bench: keeping {} (configurations, logs)",
            dir.path().display()
        );
    }
    let certs = dir.path().join("certs");
    write_certificates(&strait, &certs)?;
    let ports = GatewayPorts::pick(IpAddr::V4(GATEWAY_IP))?;
    let generated = Instant::now();
    for (name, listen) in [("config-listen", true), ("config-no-listen", false)] {
        write_config(&dir.path().join(name), count, listen, ports.tunnel)?;
    }
    let listen_config = dir.path().join("config-listen");
    let mut imports: Vec<u16> = import_ports(&strait, &listen_config, "c1")?
        .iter()
        .map(|p| p.import_port)
        .collect();
    imports.sort_unstable();
    imports.dedup();
    if imports.len() != count {
        return Err(format!(
            "`strait imports` printed {} import ports for {count} one-port services",
            imports.len()
        ));
    }
    if let Some(binary) = &haproxy {
        for variant in [Variant::HAProxy, Variant::HAProxyOneSection] {
            let config = dir.path().join(format!("{}.cfg", variant.key()));
            let one_section = variant == Variant::HAProxyOneSection;
            write_haproxy_config(&config, &imports, plan.threads, one_section)?;
            haproxy::check(binary, &config)?;
        }
    }
    println!(
        "imports bench: listeners: {count} one-port services exported by c3, import ports in \
         {PORT_RANGE} on {IMPORTS_IP} (HAProxy: {HAPROXY_IP}), {} worker thread(s) per process; \
         configurations written and `strait imports` read in {:.1} s",
        plan.threads,
        generated.elapsed().as_secs_f64()
    );
    let setup = Setup {
        strait,
        haproxy,
        dir: dir.path().to_owned(),
        certs,
        ports,
        imports,
        threads: plan.threads,
        settle: plan.settle,
    };

    let mut variants = vec![Variant::Strait];
    if setup.haproxy.is_some() {
        variants.push(Variant::HAProxy);
    }
    variants.push(Variant::StraitWithout);
    if setup.haproxy.is_some() {
        variants.push(Variant::HAProxyOneSection);
    }
    let mut results: Vec<Vec<Startup>> = variants.iter().map(|_| Vec::new()).collect();
    for round in 0..plan.rounds {
        for (index, variant) in variants.iter().enumerate() {
            results[index].push(start(&setup, *variant, round)?);
        }
    }

    let variant_label = if plan.rounds > 1 {
        format!("median (min–max) of {} interleaved rounds", plan.rounds)
    } else {
        "one round".to_owned()
    };
    println!("\n### {count} import listeners: start-up and memory, {variant_label}\n");
    println!(
        "| process | listening ports | spawn → ready, ms | RSS at ready, MiB | RSS after {:?}, MiB |",
        plan.settle
    );
    println!("|---|---:|---:|---:|---:|");
    let mib = |kib: u64| kib as f64 / 1024.0;
    for (variant, startups) in variants.iter().zip(&results) {
        let ready: Vec<f64> = startups
            .iter()
            .map(|s| s.ready.as_secs_f64() * 1000.0)
            .collect();
        let at_ready: Vec<f64> = startups.iter().map(|s| mib(s.rss_ready_kib)).collect();
        let settled: Vec<f64> = startups.iter().map(|s| mib(s.rss_settled_kib)).collect();
        println!(
            "| {} | {} | {} | {} | {} |",
            variant.label(),
            if *variant == Variant::StraitWithout {
                0
            } else {
                count
            },
            spread(&ready, 0),
            spread(&at_ready, 1),
            spread(&settled, 1)
        );
        for (startup, round) in startups.iter().zip(1..) {
            for (workload, value, unit) in [
                ("spawn to ready", startup.ready.as_secs_f64() * 1000.0, "ms"),
                ("RSS at ready", startup.rss_ready_kib as f64, "KiB"),
                ("RSS settled", startup.rss_settled_kib as f64, "KiB"),
            ] {
                rows.push(Row {
                    scenario: format!("listeners: {}", variant.key()),
                    workload: format!("{workload}: round {round}"),
                    value,
                    unit,
                });
            }
        }
    }
    // What the listeners add: each round's difference with the gateway
    // that does not listen.
    let with = &results[0];
    let without = &results[variants
        .iter()
        .position(|v| *v == Variant::StraitWithout)
        .expect("the rounds without listeners")];
    let added_ms: Vec<f64> = with
        .iter()
        .zip(without)
        .map(|(a, b)| (a.ready.as_secs_f64() - b.ready.as_secs_f64()) * 1000.0)
        .collect();
    let added_mib: Vec<f64> = with
        .iter()
        .zip(without)
        .map(|(a, b)| mib(a.rss_settled_kib) - mib(b.rss_settled_kib))
        .collect();
    let per_listener: Vec<f64> = added_mib
        .iter()
        .map(|m| m * 1024.0 / count as f64)
        .collect();
    println!(
        "\nWhat Strait's {count} import listeners add (with − without, per round): {} ms to \
         start, {} MiB of RSS ({} KiB per listener).",
        spread(&added_ms, 0),
        spread(&added_mib, 1),
        spread(&per_listener, 2)
    );
    for ((ms, mib), round) in added_ms.iter().zip(&added_mib).zip(1..) {
        for (workload, value, unit) in [("added start-up", *ms, "ms"), ("added RSS", *mib, "MiB")] {
            rows.push(Row {
                scenario: "listeners: strait".to_owned(),
                workload: format!("{workload}: round {round}"),
                value,
                unit,
            });
        }
    }
    Ok(())
}
