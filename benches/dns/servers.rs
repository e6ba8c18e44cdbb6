//! The two servers: finding (or installing) NSD and dnsperf, writing the
//! file-mode configuration of `strait run` and NSD's zone and
//! configuration for the same names, starting both pinned to one CPU, and
//! checking that both answer every sampled name with its VIP.

use std::fmt::Write as _;
use std::io::{Read as _, Write as _};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::Result;
use crate::support::{self, Pod, ServiceSpec};
use crate::topology::{GatewayPorts, write_certificates};

/// Strait's listeners (connect, tunnel, admin, DNS).
const STRAIT_IP: Ipv4Addr = Ipv4Addr::new(127, 0, 10, 1);
/// NSD's.
const NSD_IP: Ipv4Addr = Ipv4Addr::new(127, 0, 10, 2);
const ZONE: &str = "clusterset.local";
/// Strait's default `dns.ttl` and `dns.negativeTtl`, written into NSD's zone.
const TTL: u32 = 5;
const START_LIMIT: Duration = Duration::from_secs(120);
/// Names asked of both servers before measuring (every n-th, and the last).
const SAMPLES: usize = 200;

/// A binary on PATH or in the sbin folders, installing Debian's `package`
/// when it is missing and this process is root; why not otherwise.
pub(crate) fn find_or_install(binary: &str, package: &str) -> Result<PathBuf> {
    if let Some(found) = find(binary) {
        return Ok(found);
    }
    if !is_root() {
        return Err(format!(
            "`{binary}` is not installed and this is not root, so it cannot be installed \
             (`apt-get install {package}`)"
        ));
    }
    println!("dns bench: {binary} is missing; running `apt-get install -y {package}`");
    let install = || {
        Command::new("apt-get")
            .args(["install", "-y", "-qq", package])
            .env("DEBIAN_FRONTEND", "noninteractive")
            // Asks invoke-rc.d not to start the packaged service.
            .env("RUNLEVEL", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .status()
            .map_err(|e| format!("cannot run apt-get: {e}"))
    };
    let mut status = install()?;
    if !status.success() {
        let _ = Command::new("apt-get")
            .args(["update", "-qq"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .status();
        status = install()?;
    }
    find(binary).ok_or_else(|| {
        format!(
            "`{binary}` is missing and `apt-get install -y {package}` did not install it ({status})"
        )
    })
}

fn find(binary: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/usr/local/sbin", "/sbin"].map(PathBuf::from))
        .map(|dir| dir.join(binary))
        .find(|candidate| candidate.is_file())
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            let line = status.lines().find(|l| l.starts_with("Uid:"))?;
            Some(line.split_whitespace().nth(1)? == "0")
        })
        .unwrap_or(false)
}

/// The CPUs this process may run on (`Cpus_allowed_list`), when `taskset`
/// exists to pin children to them; empty otherwise.
pub(crate) fn allowed_cpus() -> Vec<usize> {
    if find("taskset").is_none() {
        return Vec::new();
    }
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let Some(list) = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
    else {
        return Vec::new();
    };
    let mut cpus = Vec::new();
    for part in list.trim().split(',') {
        let (low, high) = part.split_once('-').unwrap_or((part, part));
        if let (Ok(low), Ok(high)) = (low.trim().parse::<usize>(), high.trim().parse::<usize>()) {
            cpus.extend(low..=high);
        }
    }
    cpus
}

pub(crate) struct Plan {
    pub(crate) strait: PathBuf,
    pub(crate) nsd: PathBuf,
    pub(crate) services: usize,
    /// Both servers run on this CPU.
    pub(crate) server_cpu: Option<usize>,
}

/// A server process, killed when dropped.
pub(crate) struct Server {
    child: Child,
    log: PathBuf,
    pub(crate) address: SocketAddr,
}

impl Server {
    fn spawn(mut command: Command, log: PathBuf, address: SocketAddr) -> Result<Server> {
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
        Ok(Server {
            child,
            log,
            address,
        })
    }

    pub(crate) fn check_alive(&mut self) -> Result<()> {
        match self.child.try_wait() {
            Ok(None) => Ok(()),
            Ok(Some(status)) => Err(format!(
                "{} exited ({status}); end of its log:\n{}",
                self.log.display(),
                tail(&self.log)
            )),
            Err(error) => Err(format!("cannot wait for a child: {error}")),
        }
    }

    /// CPU time of every thread of this process and of its descendants
    /// (NSD forks its server processes).
    pub(crate) fn cpu_time(&self) -> Result<Duration> {
        let mut total = 0u64;
        for pid in descendants(self.child.id()) {
            let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
                continue;
            };
            for task in tasks.flatten() {
                // "on-CPU ns, waiting ns, timeslices"
                let text =
                    std::fs::read_to_string(task.path().join("schedstat")).unwrap_or_default();
                total += text
                    .split_whitespace()
                    .next()
                    .and_then(|ns| ns.parse::<u64>().ok())
                    .unwrap_or(0);
            }
        }
        if total == 0 {
            return Err(format!(
                "no CPU time in /proc/{}/task/*/schedstat",
                self.child.id()
            ));
        }
        Ok(Duration::from_nanos(total))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `root` and every process under it, from the parent ids in `/proc/*/stat`.
fn descendants(root: u32) -> Vec<u32> {
    let mut parents: Vec<(u32, u32)> = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse().ok()) else {
            continue;
        };
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        // "pid (comm) state ppid ...": comm may hold spaces and parentheses.
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse().ok());
        if let Some(ppid) = ppid {
            parents.push((pid, ppid));
        }
    }
    let mut found = vec![root];
    let mut index = 0;
    while index < found.len() {
        let parent = found[index];
        found.extend(
            parents
                .iter()
                .filter(|(_, ppid)| *ppid == parent)
                .map(|(pid, _)| *pid),
        );
        index += 1;
    }
    found
}

fn tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(12)..].join("\n")
}

/// Both servers, running, and the query file.
pub(crate) struct Bench {
    strait: Server,
    nsd: Server,
    nsd_version: String,
    pub(crate) queries: PathBuf,
    /// Kept until the servers are gone.
    _dir: tempfile::TempDir,
}

impl Bench {
    pub(crate) fn servers(&mut self) -> [&mut Server; 2] {
        [&mut self.strait, &mut self.nsd]
    }

    pub(crate) fn strait_label(&self) -> String {
        format!("strait run --dns-listen {}", self.strait.address)
    }

    pub(crate) fn nsd_label(&self) -> String {
        format!("{} ({})", self.nsd_version, self.nsd.address)
    }

    pub(crate) fn start(plan: &Plan) -> Result<Bench> {
        let mut dir =
            tempfile::tempdir().map_err(|e| format!("cannot create a temporary directory: {e}"))?;
        if std::env::var_os("STRAIT_BENCH_KEEP").is_some() {
            dir.disable_cleanup(true);
            println!(
                "dns bench: keeping {} (configurations, zone, logs)",
                dir.path().display()
            );
        }
        let root = dir.path();
        let names: Vec<(String, String, Ipv4Addr)> = (0..plan.services)
            .map(|i| {
                let index = u32::try_from(i).expect("fewer than 2^24 services");
                (
                    format!("ns{}", i % 50),
                    format!("svc{i}"),
                    Ipv4Addr::from((240 << 24) | (index + 1)),
                )
            })
            .collect();
        let queries = root.join("queries.txt");
        let mut text = String::new();
        for (namespace, name, _) in &names {
            let _ = writeln!(text, "{name}.{namespace}.svc.{ZONE} A");
        }
        write(&queries, &text)?;

        let certs = root.join("certs");
        write_certificates(&plan.strait, &certs)?;
        let ports = GatewayPorts::pick(IpAddr::V4(STRAIT_IP))?;
        let config = root.join("config");
        write_strait_config(&config, &names, ports.tunnel)?;
        let strait_dns = SocketAddr::new(IpAddr::V4(STRAIT_IP), free_dns_port(STRAIT_IP)?);
        let mut command = pinned(plan.server_cpu, &plan.strait);
        command
            .arg("run")
            .arg("--config")
            .arg(&config)
            .args(["--cluster", "c1"])
            .arg("--connect-listen")
            .arg(ports.connect.to_string())
            .arg("--tunnel-listen")
            .arg(ports.tunnel.to_string())
            .arg("--admin-listen")
            .arg(ports.admin.to_string())
            .arg("--dns-listen")
            .arg(strait_dns.to_string())
            .arg("--tls-dir")
            .arg(certs.join("c1"))
            .env("TOKIO_WORKER_THREADS", "1")
            .env(
                "RUST_LOG",
                std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".to_owned()),
            );
        let started = Instant::now();
        let mut strait = Server::spawn(command, root.join("strait.log"), strait_dns)?;

        let nsd_dns = SocketAddr::new(IpAddr::V4(NSD_IP), free_dns_port(NSD_IP)?);
        let nsd_dir = root.join("nsd");
        std::fs::create_dir_all(&nsd_dir)
            .map_err(|e| format!("cannot create {}: {e}", nsd_dir.display()))?;
        let nsd_conf = write_nsd(&nsd_dir, nsd_dns, &names)?;
        let checked = Command::new(plan.nsd.with_file_name("nsd-checkconf"))
            .arg(&nsd_conf)
            .output();
        if let Ok(output) = checked
            && !output.status.success()
        {
            return Err(format!(
                "nsd-checkconf {}: {}{}",
                nsd_conf.display(),
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            ));
        }
        let mut command = pinned(plan.server_cpu, &plan.nsd);
        command.arg("-d").arg("-c").arg(&nsd_conf);
        let mut nsd = Server::spawn(command, nsd_dir.join("nsd.out"), nsd_dns)?;
        let nsd_version = nsd_version(&plan.nsd);

        wait_ready(&mut strait, &names[0], started, Some(ports.admin))?;
        wait_ready(&mut nsd, &names[0], started, None)?;
        let step = (names.len() / SAMPLES).max(1);
        for server in [&strait, &nsd] {
            let sample = names.iter().step_by(step).chain(names.last());
            for (namespace, name, vip) in sample {
                let qname = format!("{name}.{namespace}.svc.{ZONE}");
                match query_a(server.address, &qname)? {
                    (0, answers) if answers == [*vip] => {}
                    (rcode, answers) => {
                        return Err(format!(
                            "{}: {qname} A: rcode {rcode}, answers {answers:?}, not {vip}",
                            server.address
                        ));
                    }
                }
            }
        }
        Ok(Bench {
            strait,
            nsd,
            nsd_version,
            queries,
            _dir: dir,
        })
    }
}

fn write(path: &Path, text: &str) -> Result<()> {
    std::fs::write(path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// `binary` run by `taskset -c CPU` (which execs it: same pid).
fn pinned(cpu: Option<usize>, binary: &Path) -> Command {
    match cpu {
        Some(cpu) => {
            let mut command = Command::new("taskset");
            command.args(["-c", &cpu.to_string()]).arg(binary);
            command
        }
        None => Command::new(binary),
    }
}

/// A port free for both UDP and TCP on `ip`.
fn free_dns_port(ip: Ipv4Addr) -> Result<u16> {
    for _ in 0..20 {
        let udp = UdpSocket::bind((ip, 0)).map_err(|e| format!("cannot bind {ip}:0/udp: {e}"))?;
        let port = udp
            .local_addr()
            .map_err(|e| format!("cannot read a bound address: {e}"))?
            .port();
        if std::net::TcpListener::bind((ip, port)).is_ok() {
            return Ok(port);
        }
    }
    Err(format!("no port on {ip} is free for both UDP and TCP"))
}

/// c1 (the viewer, net-a): a ServiceImport with the VIP of each service;
/// c3 (net-b): every service, exported, one ready pod.
fn write_strait_config(
    config: &Path,
    names: &[(String, String, Ipv4Addr)],
    c1_tunnel: SocketAddr,
) -> Result<()> {
    let c3_tunnel = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(127, 0, 10, 3)), 15008);
    let services: Vec<ServiceSpec<'_>> = names
        .iter()
        .zip(0u32..)
        .map(|((namespace, name, _), index)| ServiceSpec {
            namespace,
            name,
            ports: &[("http", 80, 8080)],
            exported_at: Some("2026-01-01T00:00:00Z"),
            pods: vec![Pod::ready(IpAddr::V4(Ipv4Addr::from(
                (10 << 24) | (40 << 16) | index,
            )))],
            proxy_protocol: false,
            udp_ports: &[],
        })
        .collect();
    let mut c1 = support::cluster_yaml("c1", "net-a", c1_tunnel, &[]);
    for (namespace, name, vip) in names {
        let _ = write!(
            c1,
            "---
apiVersion: multicluster.x-k8s.io/v1alpha1
kind: ServiceImport
metadata: {{name: {name}, namespace: {namespace}}}
spec: {{type: ClusterSetIP, ips: [\"{vip}\"], ports: [{{name: http, port: 80, protocol: TCP}}]}}
"
        );
    }
    support::write_cluster(config, "c1", &c1);
    support::write_cluster(
        config,
        "c3",
        &support::cluster_yaml("c3", "net-b", c3_tunnel, &services),
    );
    write(
        &config.join("gateway.yaml"),
        "tunnel:\n  transport: h2\nimports:\n  listen: false\n",
    )
}

/// NSD's zone (Strait's SOA and TTLs, one NS, the same A records) and its
/// configuration: one server process, no response rate limiting (every
/// query comes from 127.0.0.0/24), no database, no remote control,
/// everything in `dir`. Returns the configuration's path.
fn write_nsd(
    dir: &Path,
    address: SocketAddr,
    names: &[(String, String, Ipv4Addr)],
) -> Result<PathBuf> {
    let mut zone = format!(
        "$ORIGIN {ZONE}.
$TTL {TTL}
@ {TTL} IN SOA ns.dns.{ZONE}. hostmaster.{ZONE}. 1 7200 1800 86400 {TTL}
@ {TTL} IN NS ns.dns.{ZONE}.
ns.dns {TTL} IN A {NSD_IP}
"
    );
    for (namespace, name, vip) in names {
        let _ = writeln!(zone, "{name}.{namespace}.svc {TTL} IN A {vip}");
    }
    let zone_file = dir.join(format!("{ZONE}.zone"));
    write(&zone_file, &zone)?;
    let d = dir.display();
    let conf = format!(
        "server:
    ip-address: {ip}
    port: {port}
    server-count: 1
    do-ip6: no
    reuseport: no
    minimal-responses: yes
    # Debian's NSD limits responses to 200/s per /24 (RRL) by default.
    rrl-ratelimit: 0
    rrl-whitelist-ratelimit: 0
    hide-version: yes
    verbosity: 0
    username: \"\"
    chroot: \"\"
    database: \"\"
    zonesdir: \"{d}\"
    zonelistfile: \"{d}/zone.list\"
    xfrdfile: \"{d}/xfrd.state\"
    xfrdir: \"{d}\"
    pidfile: \"{d}/nsd.pid\"
    logfile: \"{d}/nsd.log\"

remote-control:
    control-enable: no

zone:
    name: {ZONE}
    zonefile: \"{zone}\"
",
        ip = address.ip(),
        port = address.port(),
        zone = zone_file.display(),
    );
    let path = dir.join("nsd.conf");
    write(&path, &conf)?;
    Ok(path)
}

fn nsd_version(binary: &Path) -> String {
    Command::new(binary)
        .arg("-v")
        .stdin(Stdio::null())
        .output()
        .ok()
        .and_then(|output| {
            // "NSD version 4.6.1" on stderr.
            let text = String::from_utf8_lossy(&output.stderr).into_owned()
                + &String::from_utf8_lossy(&output.stdout);
            let line = text.lines().find(|l| l.starts_with("NSD version"))?;
            Some(line.replace(" version", ""))
        })
        .unwrap_or_else(|| "NSD".to_owned())
}

/// Waits until `/readyz` says 200 (Strait) and the first name is answered.
fn wait_ready(
    server: &mut Server,
    (namespace, name, _): &(String, String, Ipv4Addr),
    started: Instant,
    admin: Option<SocketAddr>,
) -> Result<()> {
    let qname = format!("{name}.{namespace}.svc.{ZONE}");
    loop {
        server.check_alive()?;
        let ready = admin.is_none_or(|admin| http_status(admin, "/readyz") == Some(200))
            && matches!(query_a(server.address, &qname), Ok((0, answers)) if !answers.is_empty());
        if ready {
            return Ok(());
        }
        if started.elapsed() > START_LIMIT {
            return Err(format!(
                "{} did not answer {qname} within {START_LIMIT:?}; end of {}:\n{}",
                server.address,
                server.log.display(),
                tail(&server.log)
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
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

/// Asks `server` for `name` A over UDP: the response code and the A
/// records of the answer section.
fn query_a(server: SocketAddr, name: &str) -> Result<(u8, Vec<Ipv4Addr>)> {
    let socket = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0))
        .map_err(|e| format!("cannot bind a UDP socket: {e}"))?;
    socket
        .set_read_timeout(Some(Duration::from_millis(500)))
        .map_err(|e| format!("cannot set a timeout: {e}"))?;
    let id = fastrand::u16(..);
    let mut query = Vec::with_capacity(64);
    query.extend_from_slice(&id.to_be_bytes());
    // RD off; one question.
    query.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 0, 0, 0]);
    for label in name.split('.') {
        query.push(u8::try_from(label.len()).map_err(|_| "label too long")?);
        query.extend_from_slice(label.as_bytes());
    }
    query.extend_from_slice(&[0, 0, 1, 0, 1]);
    socket
        .send_to(&query, server)
        .map_err(|e| format!("cannot send to {server}: {e}"))?;
    let mut buffer = [0u8; 1500];
    let (length, _) = socket
        .recv_from(&mut buffer)
        .map_err(|e| format!("{server} did not answer {name} A: {e}"))?;
    parse_a(&buffer[..length], id).ok_or_else(|| format!("{server}: a malformed answer to {name}"))
}

fn parse_a(message: &[u8], id: u16) -> Option<(u8, Vec<Ipv4Addr>)> {
    let word = |at: usize| -> Option<u16> {
        Some(u16::from_be_bytes([
            *message.get(at)?,
            *message.get(at + 1)?,
        ]))
    };
    if word(0)? != id {
        return None;
    }
    let rcode = (word(2)? & 0x0f) as u8;
    let (questions, answers) = (word(4)?, word(6)?);
    // Past a name: labels up to a zero, or a compression pointer.
    let skip_name = |mut at: usize| -> Option<usize> {
        loop {
            let length = *message.get(at)?;
            if length & 0xc0 == 0xc0 {
                return Some(at + 2);
            }
            at += 1 + usize::from(length);
            if length == 0 {
                return Some(at);
            }
        }
    };
    let mut at = 12;
    for _ in 0..questions {
        at = skip_name(at)? + 4;
    }
    let mut found = Vec::new();
    for _ in 0..answers {
        at = skip_name(at)?;
        let (kind, length) = (word(at)?, usize::from(word(at + 8)?));
        let data = message.get(at + 10..at + 10 + length)?;
        if kind == 1 && length == 4 {
            found.push(Ipv4Addr::new(data[0], data[1], data[2], data[3]));
        }
        at += 10 + length;
    }
    Some((rcode, found))
}
