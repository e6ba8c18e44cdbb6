//! UDP across networks: a real DNS server (NSD) in c3's pod on net-b,
//! exported as `app/dns` port 53/UDP, and queried by the real `dig` in
//! c1's pod at a ClusterSetIP that kube-proxy's stand-in DNATs to c1g1's
//! UDP import port (see `transparent.rs`). c4 exports the same service
//! with a TCP port only, from a pod that runs NSD too and would answer
//! UDP with another address: the per-port rule keeps UDP off it.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::Scrape;
use crate::support::ServiceSpec;

use super::Env;
use super::by_name::{exec_in, text};
use super::scenario::*;
use super::sys;
use super::topology::{gateway_role, pod_role};
use super::transparent::{KubeProxy, SETTINGS, import_of, import_ports, replica, vip};
use super::world::{Options, World};

/// The ClusterSetIP of `app/dns` in these tests.
const DNS_VIP: Ipv4Addr = Ipv4Addr::new(10, 96, 0, 53);
/// Where NSD listens in a pod (the Services' target port).
const NSD_PORT: u16 = 5353;
const UDP_53: &[(&str, u16, u16)] = &[("dns", 53, NSD_PORT)];
const TCP_5300: &[(&str, u16, u16)] = &[("dns-tcp", 5300, NSD_PORT)];
/// The name every NSD serves, answering with its own pod's mark.
const QNAME: &str = "who.example.test";

fn services(id: &str) -> Vec<ServiceSpec<'static>> {
    let dns = |ports, udp_ports, cluster| ServiceSpec {
        udp_ports,
        ..service("dns", ports, EARLY, &[(cluster, 1)])
    };
    match id {
        "c3" => vec![dns(&[], UDP_53, "c3")],
        "c4" => vec![dns(TCP_5300, &[], "c4")],
        _ => Vec::new(),
    }
}

/// The answer NSD in `cluster`'s pod gives for [`QNAME`].
fn mark(cluster: &str) -> String {
    match cluster {
        "c3" => "192.0.2.3".to_owned(),
        _ => "192.0.2.4".to_owned(),
    }
}

/// A world of these tests: UDP flows end after a second of silence, and
/// `tuning` says the rest.
async fn start(env: &Env, transport: Option<&'static str>, tuning: &'static str) -> World {
    World::start(
        env,
        Options {
            settings: SETTINGS,
            tuning,
            transport,
            ..Options::services(services)
        },
    )
    .await
}

/// `dig +short` for [`QNAME`] at `server` from `ns`: the answer's lines.
async fn dig(ns: &str, server: SocketAddr) -> Vec<String> {
    dig_from(ns, server, 0).await
}

/// [`dig`] from a chosen source port (0: the kernel's choice). Queries
/// counted as flows take distinct ports: a kernel-chosen port may repeat
/// one whose flow is still open, and the gateway rightly carries such a
/// query on that flow.
async fn dig_from(ns: &str, server: SocketAddr, source_port: u16) -> Vec<String> {
    let at = format!("@{}", server.ip());
    let port = server.port().to_string();
    let source = format!("0.0.0.0#{source_port}");
    let args = [
        "+short", "+time=3", "+tries=2", "-b", &source, &at, "-p", &port, "A", QNAME,
    ];
    let output = exec_in(ns, "dig", &args).await;
    assert!(output.status.success(), "dig {args:?}: {}", text(&output));
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

/// A client pod's queries to the ClusterSetIP reach c3's NSD and only
/// it, over `transport`; every flow is counted as a tunnel flow on c1g1
/// and an inbound one on c3's gateways, and ends once idle.
pub async fn dig_across_networks(env: Env, transport: Option<&'static str>, block_udp: bool) {
    let world = start(&env, transport, "  udpIdleTimeout: 1s\n").await;
    if block_udp {
        // UDP between the networks is lost: QUIC cannot connect, so
        // `auto` falls back to HTTP/2, which carries the datagrams.
        for n in 1..=2 {
            let ns = world.ns(&gateway_role("c1", n));
            sys::iptables(
                &ns,
                &["-A", "OUTPUT", "-o", "wan0", "-p", "udp", "-j", "DROP"],
            )
            .unwrap_or_else(|e| panic!("{e}"));
        }
    }
    let _c3 = Nsd::start(&world, "c3");
    let _c4 = Nsd::start(&world, "c4");
    let ports = import_ports(&world, "c1");
    let client = world.ns("c1p1");
    let dns = vip(DNS_VIP, 53);
    let mut proxy = KubeProxy::new(&world, "c1p1");
    proxy.forward_udp(dns, replica("c1", 1, import_of(&ports, "dns", 53)));

    let before = world.scrape().await;
    for query in 0..10 {
        assert_eq!(
            dig_from(&client, dns, 41_000 + query).await,
            [mark("c3")],
            "only c3 declares 53/UDP"
        );
    }
    let after = world.scrape().await;
    assert_eq!(opened_delta(&before, &after, &["c1g1"], "tunnel"), 10.0);
    assert_eq!(
        opened_delta(&before, &after, &["c3g1", "c3g2"], "inbound"),
        10.0
    );
    let carried = after["c1g1"].sum(
        "strait_connections_opened_total",
        &[
            ("path", "tunnel"),
            ("transport", if block_udp { "h2" } else { "quic" }),
        ],
    ) - before["c1g1"].sum(
        "strait_connections_opened_total",
        &[
            ("path", "tunnel"),
            ("transport", if block_udp { "h2" } else { "quic" }),
        ],
    );
    assert_eq!(carried, 10.0, "every flow over the expected transport");

    // Flows end after a second of silence (tuning.udpIdleTimeout).
    let closed = |scrapes: &std::collections::BTreeMap<String, super::gateway::Scrape>| {
        scrapes["c1g1"].sum("strait_connections_closed_total", &[("path", "tunnel")])
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let now = world.scrape().await;
        if closed(&now) - closed(&before) >= 10.0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the idle flows did not end: {} closed",
            closed(&now) - closed(&before)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// One pod floods the ClusterSetIP from 200 source ports: it gets no
/// more than its 8 flows, the rest are refused and counted, and another
/// pod's queries are answered meanwhile.
pub async fn a_flood_from_one_source_stays_bounded(env: Env) {
    let world = start(
        &env,
        None,
        "  udpIdleTimeout: 1s\n  maxUdpFlowsPerSource: 8\n",
    )
    .await;
    let flood = Flood::start(&world);
    let dns = flood.dns;

    let before = world.scrape().await;
    let flood_ns = world.ns("c1p1");
    let sockets = sys::in_netns(&flood_ns, move || {
        let mut sockets = Vec::new();
        for _ in 0..200 {
            let socket = std::net::UdpSocket::bind("0.0.0.0:0")?;
            socket.send_to(b"not even dns", dns)?;
            sockets.push(socket);
        }
        Ok(sockets)
    })
    .expect("the flood is sent");
    for _ in 0..3 {
        assert_eq!(dig(&world.ns("c1p2"), dns).await, [mark("c3")]);
    }
    let after = world.scrape().await;
    let refused = after["c1g1"].sum("strait_limited_total", &[("limit", "udp_flows_per_source")])
        - before["c1g1"].sum("strait_limited_total", &[("limit", "udp_flows_per_source")]);
    assert!(
        refused >= 190.0,
        "200 flows of one source, 8 admitted: {refused} refused"
    );
    let opened = opened_delta(&before, &after, &["c1g1"], "tunnel");
    assert!(
        opened <= 8.0 + 3.0,
        "at most 8 flooding flows and the 3 queries: {opened}"
    );
    drop(sockets);
}

/// One pod floods the ClusterSetIP from 40 addresses of its /24, 8
/// source ports each, sending once from each (as a spoofer would, never
/// speaking twice): the prefix holds no more than its 64 flows, the rest
/// are refused and counted, and another pod of that /24 — held back with
/// the flood, as docs/security.md says — is answered again once the
/// flood's flows end unconfirmed (`udpUnconfirmedTimeout`, 1 s here).
pub async fn a_flood_from_many_sources_of_one_prefix_stays_bounded(env: Env) {
    let world = start(
        &env,
        None,
        "  maxUdpFlowsPerSource: 8\n  maxUdpFlowsPerPrefix: 64\n  udpUnconfirmedTimeout: 1s\n",
    )
    .await;
    let flood = Flood::start(&world);
    let dns = flood.dns;
    assert_eq!(dig(&world.ns("c1p2"), dns).await, [mark("c3")]);

    let flood_ns = world.ns("c1p1");
    let sources: Vec<Ipv4Addr> = (100..140).map(|d| Ipv4Addr::new(10, 10, 0, d)).collect();
    for source in &sources {
        sys::ip(&[
            "-n",
            &flood_ns,
            "addr",
            "add",
            &format!("{source}/24"),
            "dev",
            "eth0",
        ])
        .expect("a flood address");
    }
    let before = world.scrape().await;
    let flood = sources.clone();
    let sockets = sys::in_netns(&flood_ns, move || {
        let mut sockets = Vec::new();
        for source in &flood {
            for _ in 0..8 {
                let socket = std::net::UdpSocket::bind((*source, 0))?;
                socket.send_to(b"not even dns", dns)?;
                sockets.push(socket);
            }
        }
        Ok(sockets)
    })
    .expect("the flood is sent");
    // Counted once the gateway has read the 320 datagrams.
    let limited = |scrapes: &BTreeMap<String, Scrape>, limit: &str| {
        scrapes["c1g1"].sum("strait_limited_total", &[("limit", limit)])
    };
    let mut after = world.scrape().await;
    for _ in 0..50 {
        if limited(&after, "udp_flows_per_prefix") - limited(&before, "udp_flows_per_prefix")
            >= 256.0
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        after = world.scrape().await;
    }
    let refused =
        limited(&after, "udp_flows_per_prefix") - limited(&before, "udp_flows_per_prefix");
    assert!(
        refused >= 256.0,
        "320 flows of one /24, at most 64 admitted: {refused} refused"
    );
    let opened = opened_delta(&before, &after, &["c1g1"], "tunnel");
    assert!(opened <= 64.0, "at most 64 flooding flows: {opened}");
    // The flood never speaks twice: its flows end unconfirmed, and the
    // prefix has room again.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(dig(&world.ns("c1p2"), dns).await, [mark("c3")]);
    drop(sockets);
}

/// The flood tests' setting: c3's NSD exported as `app/dns`, and c1's two
/// pods (the flooder c1p1 and the other c1p2) sending to its ClusterSetIP
/// through kube-proxy's stand-in, which DNATs it to c1g1's import port.
struct Flood {
    dns: SocketAddr,
    _c3: Nsd,
    _proxies: [KubeProxy; 2],
}

impl Flood {
    fn start(world: &World) -> Flood {
        let c3 = Nsd::start(world, "c3");
        let ports = import_ports(world, "c1");
        let dns = vip(DNS_VIP, 53);
        let to = replica("c1", 1, import_of(&ports, "dns", 53));
        let mut flooder = KubeProxy::new(world, "c1p1");
        flooder.forward_udp(dns, to);
        let mut other = KubeProxy::new(world, "c1p2");
        other.forward_udp(dns, to);
        Flood {
            dns,
            _c3: c3,
            _proxies: [flooder, other],
        }
    }
}

/// NSD in pod 1 of `cluster`, on the pod's address and [`NSD_PORT`]
/// (UDP and TCP), answering [`QNAME`] with the cluster's [`mark`].
struct Nsd {
    child: Child,
    dir: PathBuf,
}

impl Nsd {
    fn start(world: &World, cluster: &str) -> Nsd {
        let ns = world.ns(&pod_role(cluster, 1));
        let dir = world.dir.join(format!("nsd-{cluster}"));
        std::fs::create_dir_all(&dir).expect("nsd dir");
        let address = World::pod_ip(cluster, 1);
        write_nsd(&dir, address, &mark(cluster));
        let log = std::fs::File::create(dir.join("nsd.out")).expect("nsd.out");
        let err = log.try_clone().expect("nsd.out");
        let child = Command::new("ip")
            .args(["netns", "exec", &ns, "nsd", "-d", "-c"])
            .arg(dir.join("nsd.conf"))
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(err))
            .spawn()
            .expect("nsd starts");
        let nsd = Nsd { child, dir };
        let deadline = Instant::now() + Duration::from_secs(10);
        let listening = format!("{address}:{NSD_PORT}");
        while Instant::now() < deadline {
            let sockets =
                sys::run("ip", &["netns", "exec", &ns, "ss", "-Hlun"]).unwrap_or_default();
            if sockets.contains(&listening) {
                return nsd;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!(
            "NSD is not listening on {listening}: {}",
            std::fs::read_to_string(nsd.dir.join("nsd.out")).unwrap_or_default()
        );
    }
}

impl Drop for Nsd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn write_nsd(dir: &Path, address: IpAddr, answer: &str) {
    let zone = format!(
        "$ORIGIN example.test.
$TTL 60
@ IN SOA ns.example.test. hostmaster.example.test. 1 7200 1800 86400 60
@ IN NS ns.example.test.
ns IN A {address}
who IN A {answer}
"
    );
    std::fs::write(dir.join("example.test.zone"), zone).expect("zone");
    let d = dir.display();
    let conf = format!(
        "server:
    ip-address: {address}
    port: {NSD_PORT}
    server-count: 1
    do-ip6: no
    reuseport: no
    rrl-ratelimit: 0
    rrl-whitelist-ratelimit: 0
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
    name: example.test
    zonefile: example.test.zone
"
    );
    std::fs::write(dir.join("nsd.conf"), conf).expect("nsd.conf");
}
