//! The DNS responder against the real `dig` (BIND's dnsutils): a gateway on
//! loopback answers A, AAAA, SRV, headless and per-pod names, NXDOMAIN,
//! NODATA and REFUSED, truncates over UDP so that dig retries over TCP, and
//! follows a route swap. Without `dig` each test prints a loud skip line,
//! and fails under `CI=true` (`.ci/run` installs dnsutils).
//!
//! Topology: c41 (net-a, the gateway under test on 127.0.41.1) and c42
//! (net-b, only in the configuration: its pods are on another network).

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on what they set up

mod support;

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use strait::dns::DnsSockets;
use strait::gateway::Gateway;
use strait::tunnel::TransportMode;
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Pods of `big/many`: 80 A records do not fit in 512 bytes, nor in dig's
/// default 1232-byte EDNS payload.
const MANY: u8 = 80;

/// `dig`, or `None` after a loud skip line (a failure under CI=true).
fn dig_binary() -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join("dig"))
            .find(|candidate| candidate.is_file())
    });
    if found.is_none() {
        // Straight to the process's stderr: the test harness captures
        // eprintln!, and a skip must be seen.
        let _ = std::io::Write::write_all(
            &mut std::io::stderr(),
            b"\n**********\nSKIPPED tests/dns.rs: `dig` not found on PATH (apt-get install dnsutils)\n**********\n",
        );
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "dig is required under CI=true: .ci/run installs dnsutils"
        );
    }
    found
}

/// A running gateway with DNS, and what the tests need to reach it.
struct Running {
    _dir: tempfile::TempDir,
    config: PathBuf,
    dig: PathBuf,
    gateway: Gateway,
    dns: SocketAddr,
    tunnel: SocketAddr,
}

impl Running {
    /// Starts c41's gateway (number `n`, one per test) with DNS on its address.
    async fn start(n: u8) -> Option<Running> {
        Self::start_importing(
            n,
            strait::config::ImportSettings {
                listen: false,
                ..Default::default()
            },
        )
        .await
    }

    /// As [`Running::start`], with these import settings.
    async fn start_importing(n: u8, imports: strait::config::ImportSettings) -> Option<Running> {
        let dig = dig_binary()?;
        let dir = tempfile::tempdir().expect("temp dir");
        let config = dir.path().join("config");
        let certs = certificates(dir.path(), &["c41", "c42"]);
        let mut listeners = bind_gateway(n).await;
        listeners.dns = Some(
            DnsSockets::bind(SocketAddr::new(gateway_ip(n), 0))
                .await
                .expect("bind dns"),
        );
        let tunnel = listeners.tunnel.local_addr().expect("tunnel address");
        write_cluster(&config, "c41", &local_yaml(n, tunnel, true));
        write_cluster(&config, "c42", &remote_yaml());
        let gateway = start_gateway_importing(
            &config,
            &certs,
            "c41",
            n,
            listeners,
            TransportMode::H2,
            imports,
        )
        .await;
        let dns = gateway.addresses().dns.expect("dns is on");
        Some(Running {
            _dir: dir,
            config,
            dig,
            gateway,
            dns,
            tunnel,
        })
    }

    /// Runs `dig @gateway -p port ARGS` and returns what it printed.
    async fn dig(&self, args: &[&str]) -> String {
        let output = tokio::process::Command::new(&self.dig)
            .arg(format!("@{}", self.dns.ip()))
            .args(["-p", &self.dns.port().to_string(), "+time=2", "+tries=1"])
            .args(args)
            .output()
            .await
            .expect("dig runs");
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        assert!(
            output.status.success(),
            "dig {args:?} failed: {stdout}{}",
            String::from_utf8_lossy(&output.stderr)
        );
        stdout
    }

    /// `dig +short`: the answer's data, one record per line, sorted.
    async fn short(&self, args: &[&str]) -> Vec<String> {
        let mut all = vec!["+short"];
        all.extend_from_slice(args);
        let mut lines: Vec<String> = self.dig(&all).await.lines().map(str::to_owned).collect();
        lines.sort();
        lines
    }
}

/// c41: `app/echo` (ClusterSetIP, imported here as 240.0.0.10 and
/// fd00::10; exported when `exported`), `db/postgres` (headless, two pods)
/// and `big/many` (headless, [`MANY`] pods).
fn local_yaml(n: u8, tunnel: SocketAddr, exported: bool) -> String {
    let echo = ServiceSpec {
        namespace: "app",
        name: "echo",
        ports: &[("http", 80, 8080)],
        exported_at: exported.then_some("2026-01-01T00:00:00Z"),
        pods: vec![Pod::ready(pod_ip(n, 0))],
        proxy_protocol: false,
        udp_ports: &[],
    };
    let mut yaml = cluster_yaml("c41", "net-a", tunnel, &[echo]);
    yaml.push_str(
        "---
apiVersion: multicluster.x-k8s.io/v1alpha1
kind: ServiceImport
metadata: {name: echo, namespace: app}
spec: {type: ClusterSetIP, ips: [\"240.0.0.10\", \"fd00::10\"]}
",
    );
    let postgres = [("postgres-0", pod_ip(n, 50)), ("postgres-1", pod_ip(n, 51))];
    yaml.push_str(&headless("db", "postgres", &postgres));
    let many: Vec<(String, IpAddr)> = (0..MANY)
        .map(|i| (format!("many-{i}"), pod_ip(n, 100 + i)))
        .collect();
    let many: Vec<(&str, IpAddr)> = many.iter().map(|(h, ip)| (h.as_str(), *ip)).collect();
    yaml.push_str(&headless("big", "many", &many));
    yaml
}

/// c42 on net-b: a third postgres pod, on another network.
fn remote_yaml() -> String {
    let gateway = SocketAddr::new(gateway_ip(42), 15008);
    let mut yaml = cluster_yaml("c42", "net-b", gateway, &[]);
    yaml.push_str(&headless(
        "db",
        "postgres",
        &[("postgres-2", pod_ip(42, 50))],
    ));
    yaml
}

/// An exported headless Service on port `postgres` 5432 with these pods.
fn headless(namespace: &str, name: &str, pods: &[(&str, IpAddr)]) -> String {
    headless_yaml(namespace, name, ("postgres", 5432, 5432), pods)
}

/// The `status:` of dig's header line.
fn status(output: &str) -> &str {
    output
        .split("status: ")
        .nth(1)
        .and_then(|rest| rest.split(',').next())
        .unwrap_or_else(|| panic!("no status in dig output:\n{output}"))
}

/// dig's `;; flags: ...;` list.
fn flags(output: &str) -> Vec<&str> {
    output
        .split(";; flags: ")
        .nth(1)
        .and_then(|rest| rest.split(';').next())
        .unwrap_or_else(|| panic!("no flags in dig output:\n{output}"))
        .split_whitespace()
        .collect()
}

/// The number after `NAME: ` in dig's counts line (ANSWER, AUTHORITY).
fn count(output: &str, section: &str) -> usize {
    output
        .split(&format!("{section}: "))
        .nth(1)
        .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no {section} count in dig output:\n{output}"))
}

#[tokio::test]
async fn dig_resolves_cluster_set_ip_services_and_their_srv_records() {
    let Some(run) = Running::start(41).await else {
        return;
    };
    let full = run.dig(&["echo.app.svc.clusterset.local"]).await;
    assert_eq!(status(&full), "NOERROR", "{full}");
    let flags = flags(&full);
    assert!(flags.contains(&"aa") && !flags.contains(&"ra"), "{full}");
    assert_eq!(
        run.short(&["Echo.App.SVC.clusterset.local."]).await,
        ["240.0.0.10"]
    );
    assert_eq!(
        run.short(&["AAAA", "echo.app.svc.clusterset.local"]).await,
        ["fd00::10"]
    );
    assert_eq!(
        run.short(&["SRV", "_http._tcp.echo.app.svc.clusterset.local"])
            .await,
        ["0 100 80 echo.app.svc.clusterset.local."]
    );
    // The bare name's SRV, as CoreDNS answers it; the schema version.
    assert_eq!(
        run.short(&["SRV", "echo.app.svc.clusterset.local"]).await,
        ["0 100 80 echo.app.svc.clusterset.local."]
    );
    assert_eq!(
        run.short(&["TXT", "dns-version.clusterset.local"]).await,
        ["\"1.0.0\""]
    );
    // Over TCP as well.
    assert_eq!(
        run.short(&["+tcp", "echo.app.svc.clusterset.local"]).await,
        ["240.0.0.10"]
    );
    run.gateway.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test]
async fn dig_resolves_headless_services_and_per_pod_names_on_this_network() {
    let Some(run) = Running::start(43).await else {
        return;
    };
    assert_eq!(
        run.short(&["postgres.db.svc.clusterset.local"]).await,
        ["127.0.43.60", "127.0.43.61"]
    );
    assert_eq!(
        run.short(&["postgres-1.c41.postgres.db.svc.clusterset.local"])
            .await,
        ["127.0.43.61"]
    );
    assert_eq!(
        run.short(&["SRV", "_postgres._tcp.postgres.db.svc.clusterset.local"])
            .await,
        [
            "0 50 5432 postgres-0.c41.postgres.db.svc.clusterset.local.",
            "0 50 5432 postgres-1.c41.postgres.db.svc.clusterset.local."
        ]
    );
    assert_eq!(
        run.short(&["SRV", "postgres.db.svc.clusterset.local"])
            .await,
        [
            "0 50 5432 postgres-0.c41.postgres.db.svc.clusterset.local.",
            "0 50 5432 postgres-1.c41.postgres.db.svc.clusterset.local."
        ]
    );
    // postgres-2 is on net-b: its address would not work here, so no address.
    let remote = run
        .dig(&["postgres-2.c42.postgres.db.svc.clusterset.local"])
        .await;
    assert_eq!(status(&remote), "NOERROR", "{remote}");
    assert_eq!(count(&remote, "ANSWER"), 0, "{remote}");
    assert_eq!(count(&remote, "AUTHORITY"), 1, "{remote}");
    run.gateway.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test]
async fn dig_resolves_a_remote_pod_to_its_address_on_this_side() {
    let imports = strait::config::ImportSettings {
        listen: false,
        pod_addresses: vec!["240.0.9.0/24".parse().expect("a range")],
        ..Default::default()
    };
    let Some(run) = Running::start_importing(49, imports).await else {
        return;
    };
    let remote = run
        .short(&["postgres-2.c42.postgres.db.svc.clusterset.local"])
        .await;
    assert_eq!(remote.len(), 1, "{remote:?}");
    let address: IpAddr = remote[0].parse().expect("an address");
    let range: ipnet::IpNet = "240.0.9.0/24".parse().expect("a range");
    assert!(range.contains(&address), "{address}");
    // The service name answers it beside the local pods, never 127.0.42.60.
    assert_eq!(
        run.short(&["postgres.db.svc.clusterset.local"]).await,
        ["127.0.49.60", "127.0.49.61", remote[0].as_str()]
    );
    let srv = run
        .short(&["SRV", "_postgres._tcp.postgres.db.svc.clusterset.local"])
        .await;
    assert!(
        srv.contains(&"0 33 5432 postgres-2.c42.postgres.db.svc.clusterset.local.".to_owned()),
        "{srv:?}"
    );
    // What `strait imports` prints for the same files: the pod's derived
    // Service asks for that very address.
    std::fs::write(
        run.config.join("gateway.yaml"),
        "allowLoopbackEndpoints: true\nimports:\n  podAddresses: [240.0.9.0/24]\n",
    )
    .expect("write gateway.yaml");
    let list = strait_imports(&run.config, "c41");
    let printed = per_pod_services(&list, "postgres");
    assert_eq!(
        printed["postgres-2"].cluster_ip,
        Some(address),
        "{printed:?}"
    );
    let metrics = admin_get(run.gateway.addresses().admin, "/metrics").await;
    assert!(
        metrics.contains("strait_headless_remote_pods_addressed 1\n")
            && metrics.contains("strait_headless_remote_pods_unaddressed 0\n"),
        "{metrics}"
    );
    run.gateway.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test]
async fn dig_gets_nxdomain_nodata_and_refused() {
    let Some(run) = Running::start(44).await else {
        return;
    };
    let nx = run.dig(&["nope.app.svc.clusterset.local"]).await;
    assert_eq!(status(&nx), "NXDOMAIN", "{nx}");
    assert!(flags(&nx).contains(&"aa"), "{nx}");
    assert!(
        nx.contains(
            "IN\tSOA\tns.dns.clusterset.local. hostmaster.clusterset.local. 1 7200 1800 86400 5"
        ),
        "{nx}"
    );
    let nodata = run.dig(&["TXT", "echo.app.svc.clusterset.local"]).await;
    assert_eq!(status(&nodata), "NOERROR", "{nodata}");
    assert_eq!(count(&nodata, "ANSWER"), 0, "{nodata}");
    assert_eq!(count(&nodata, "AUTHORITY"), 1, "{nodata}");
    let refused = run.dig(&["example.com"]).await;
    assert_eq!(status(&refused), "REFUSED", "{refused}");
    assert!(!flags(&refused).contains(&"ra"), "{refused}");
    assert_eq!(count(&refused, "ANSWER"), 0, "{refused}");
    run.gateway.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test]
async fn a_large_answer_is_truncated_over_udp_and_dig_retries_over_tcp() {
    let Some(run) = Running::start(45).await else {
        return;
    };
    for edns in ["+noedns", "+edns=0"] {
        // +ignore: take the truncated UDP answer as it is.
        let cut = run
            .dig(&["+ignore", edns, "many.big.svc.clusterset.local"])
            .await;
        assert!(flags(&cut).contains(&"tc"), "{edns}: {cut}");
        assert_eq!(count(&cut, "ANSWER"), 0, "{edns}: {cut}");
        // dig's default: on TC, ask again over TCP, which carries it all.
        let retried = run.dig(&[edns, "many.big.svc.clusterset.local"]).await;
        assert!(
            retried.contains("Truncated, retrying in TCP mode"),
            "{edns}: {retried}"
        );
        assert!(!flags(&retried).contains(&"tc"), "{edns}: {retried}");
        assert_eq!(
            count(&retried, "ANSWER"),
            usize::from(MANY),
            "{edns}: {retried}"
        );
    }
    // A payload big enough for the whole answer gets it over UDP.
    let fits = run
        .dig(&[
            "+ignore",
            "+bufsize=1232",
            "postgres.db.svc.clusterset.local",
        ])
        .await;
    assert!(!flags(&fits).contains(&"tc"), "{fits}");
    run.gateway.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test]
async fn answers_follow_a_route_swap_and_are_counted() {
    let Some(run) = Running::start(46).await else {
        return;
    };
    assert_eq!(
        run.short(&["echo.app.svc.clusterset.local"]).await,
        ["240.0.0.10"]
    );
    // c41 stops exporting echo: the next answers are NXDOMAIN.
    write_cluster(&run.config, "c41", &local_yaml(46, run.tunnel, false));
    let mut last = String::new();
    for _ in 0..100 {
        last = run.dig(&["echo.app.svc.clusterset.local"]).await;
        if status(&last) == "NXDOMAIN" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(status(&last), "NXDOMAIN", "{last}");

    let admin = run.gateway.addresses().admin;
    let metrics = admin_get(admin, "/metrics").await;
    assert!(
        metrics.contains(r#"strait_dns_queries_total{type="a",rcode="noerror"}"#),
        "{metrics}"
    );
    assert!(
        metrics.contains(r#"strait_dns_queries_total{type="a",rcode="nxdomain"}"#),
        "{metrics}"
    );
    let debug = admin_get(
        admin,
        "/debug/dns?name=postgres.db.svc.clusterset.local&type=A",
    )
    .await;
    assert!(debug.contains("\"rcode\": \"NOERROR\""), "{debug}");
    assert!(debug.contains("\"service\": \"db/postgres\""), "{debug}");
    run.gateway.shutdown(Duration::from_secs(1)).await;
}

/// One query over an open TCP connection; the answer, or `None` when the
/// server closed the connection instead.
async fn tcp_query(stream: &mut tokio::net::TcpStream, qname: &str) -> Option<Vec<u8>> {
    use hickory_proto::op::{Message, MessageType, OpCode, Query};
    use hickory_proto::rr::{Name, RecordType};
    let mut message = Message::new(7, MessageType::Query, OpCode::Query);
    message.add_query(Query::query(
        Name::from_ascii(qname).expect("name"),
        RecordType::A,
    ));
    let query = message.to_vec().expect("query encodes");
    let mut framed = u16::try_from(query.len())
        .expect("small")
        .to_be_bytes()
        .to_vec();
    framed.extend_from_slice(&query);
    stream.write_all(&framed).await.ok()?;
    let length = stream.read_u16().await.ok()?;
    let mut answer = vec![0; usize::from(length)];
    stream.read_exact(&mut answer).await.ok()?;
    Some(answer)
}

/// A TCP DNS client from `source`, answered once (proof it holds a slot).
async fn tcp_client_from(source: std::net::IpAddr, dns: SocketAddr) -> tokio::net::TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket.bind(SocketAddr::new(source, 0)).expect("bind");
    let mut stream = socket.connect(dns).await.expect("connect");
    assert!(
        tcp_query(&mut stream, "echo.app.svc.clusterset.local.")
            .await
            .is_some(),
        "answered"
    );
    stream
}

/// One address holds at most `MAX_TCP_PER_SOURCE` (32) TCP clients: its
/// 33rd is answered, and that address's own idlest client (its first) is
/// closed for it; no other address pays. Eight addresses then hold all 256
/// slots, idle: a 257th client of another address is answered, and the
/// client idle the longest is the one closed for it.
#[tokio::test]
async fn tcp_slots_are_capped_per_source_and_the_idlest_makes_room() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = dir.path().join("config");
    let certs = certificates(dir.path(), &["c41", "c42"]);
    let n = 47;
    let mut listeners = bind_gateway(n).await;
    listeners.dns = Some(
        DnsSockets::bind(SocketAddr::new(gateway_ip(n), 0))
            .await
            .expect("bind dns"),
    );
    let tunnel = listeners.tunnel.local_addr().expect("tunnel address");
    write_cluster(&config, "c41", &local_yaml(n, tunnel, true));
    write_cluster(&config, "c42", &remote_yaml());
    let gateway = start_gateway(&config, &certs, "c41", n, listeners, TransportMode::H2).await;
    let dns = gateway.addresses().dns.expect("dns is on");
    let per_source = strait::dns::MAX_TCP_PER_SOURCE;
    let sources = strait::dns::MAX_TCP_CONNECTIONS / per_source;
    let source = |k: usize| pod_ip(50, u8::try_from(k).expect("a few sources"));

    let mut held = Vec::new();
    for k in 0..sources {
        for _ in 0..per_source {
            held.push(tcp_client_from(source(k), dns).await);
        }
        if k == 0 {
            // Over its source's cap: answered, and the source's own
            // idlest client (its first) closed for it.
            let over = tcp_client_from(source(0), dns).await;
            let first = tokio::time::timeout(
                Duration::from_secs(5),
                tcp_query(&mut held[0], "echo.app.svc.clusterset.local."),
            )
            .await
            .expect("closed, not left hanging");
            assert!(first.is_none(), "the source's own idlest client made room");
            held[0] = over;
        }
        // Later clients are more recently active than earlier ones.
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(held.len(), strait::dns::MAX_TCP_CONNECTIONS);
    // Every slot is taken: a newcomer is answered all the same.
    let _newcomer = tcp_client_from(source(sources), dns).await;
    // The oldest client left, idle the longest (source 0's second), was
    // closed for it.
    let first = tokio::time::timeout(
        Duration::from_secs(5),
        tcp_query(&mut held[1], "echo.app.svc.clusterset.local."),
    )
    .await
    .expect("closed, not left hanging");
    assert!(first.is_none(), "the idlest client made room");
    let last = held.last_mut().expect("clients");
    assert!(
        tcp_query(last, "echo.app.svc.clusterset.local.")
            .await
            .is_some(),
        "a recently active client keeps its slot"
    );
    let metrics = admin_get(gateway.addresses().admin, "/metrics").await;
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("strait_dns_tcp_refused_total ") && !l.ends_with(" 0")),
        "{metrics}"
    );
    drop(held);
    gateway.shutdown(Duration::from_secs(1)).await;
}

/// One address floods the UDP listener with one question whose answer is
/// larger than it (1,000 queries, as fast as they go): past the burst
/// (`RESPONSE_BURST`, 40) its answers slip to the question alone with TC,
/// no larger than the query, and are counted as truncated; `dig` from
/// another address meanwhile gets the full answer.
#[tokio::test]
async fn a_udp_flood_from_one_address_gets_truncated_answers_and_others_full_ones() {
    use hickory_proto::op::{Message, MessageType, OpCode, Query};
    use hickory_proto::rr::{Name, RecordType};
    let Some(run) = Running::start(48).await else {
        return;
    };
    let flooder = tokio::net::UdpSocket::bind(SocketAddr::new(pod_ip(50, 201), 0))
        .await
        .expect("bind");
    let mut message = Message::new(3, MessageType::Query, OpCode::Query);
    message.add_query(Query::query(
        Name::from_ascii("echo.app.svc.clusterset.local.").expect("name"),
        RecordType::A,
    ));
    let query = message.to_vec().expect("encodes");
    let (mut full, mut slipped, mut larger) = (0, 0, 0);
    let mut buffer = [0u8; 2048];
    for _ in 0..1_000 {
        flooder.send_to(&query, run.dns).await.expect("send");
        let Ok(Ok((length, _))) =
            tokio::time::timeout(Duration::from_secs(1), flooder.recv_from(&mut buffer)).await
        else {
            continue;
        };
        let answer = Message::from_vec(&buffer[..length]).expect("an answer");
        if answer.metadata.truncation {
            slipped += 1;
            assert!(answer.answers.is_empty());
        } else {
            full += 1;
        }
        if length > query.len() && answer.metadata.truncation {
            larger += 1;
        }
    }
    println!(
        "UDP FLOOD: 1,000 queries of {} bytes: {full} full answers, {slipped} truncated",
        query.len()
    );
    assert!(full >= 40, "the burst is answered in full: {full}");
    assert!(full <= 100, "past the burst, the rate: {full} full answers");
    assert!(slipped >= 900, "the rest slip: {slipped}");
    assert_eq!(larger, 0, "no slipped answer is larger than its query");
    assert_eq!(
        run.short(&["echo.app.svc.clusterset.local"]).await,
        ["240.0.0.10"],
        "another address is answered in full"
    );
    let metrics = admin_get(run.gateway.addresses().admin, "/metrics").await;
    assert!(
        metrics.lines().any(
            |l| l.starts_with("strait_dns_truncated_total{transport=\"udp\"}")
                && !l.ends_with(" 0")
        ),
        "{metrics}"
    );
}
