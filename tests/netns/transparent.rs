//! The transparent path (DESIGN.md, "How an unmodified pod reaches a
//! multi-cluster service"): a client pod with no proxy settings dials a
//! ClusterSetIP, and the connection arrives at a gateway replica of its own
//! cluster on the import port of that service port, which sends it on
//! exactly as a CONNECT to that service port would go: direct on its own
//! network, through the tunnel to another network's gateway.
//!
//! In Kubernetes kube-proxy DNATs ClusterSetIP:port to a gateway pod's
//! import port (the derived Service's endpoints). Here [`KubeProxy`] stands
//! in for it: one iptables DNAT rule per VIP and port in the OUTPUT chain of
//! the client's own namespace. The VIPs are the tests' own, in
//! [`SERVICE_CIDR`] (routed to the client's pod interface, as a pod's
//! default route would carry them); the import ports are what the real
//! `strait imports --output json` prints for the test's configuration
//! directory ([`import_ports`]). Every gateway listens for imports on all
//! its addresses and takes the ports from [`IMPORT_RANGE`] ([`SETTINGS`]):
//! kube-proxy sends to a replica's pod-side address, whereas the default
//! import address, the tunnel listener's, is on the WAN in this topology.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::ops::RangeInclusive;
use std::time::Duration;

use crate::support::ServiceSpec;

use super::backend::POD_PORT;
use super::client::{self, Greeting, Held};
use super::scenario::*;
use super::world::{Options, World};
use super::{Env, sys};

/// The `imports` section every gateway of these tests runs with.
pub const SETTINGS: &str = "imports:\n  address: 0.0.0.0\n  portRange: 24000-24099\n";

/// `imports.portRange` of [`SETTINGS`].
pub const IMPORT_RANGE: RangeInclusive<u16> = 24000..=24099;

/// The service CIDR the ClusterSetIPs of these tests come from.
pub const SERVICE_CIDR: &str = "10.96.0.0/16";

/// The ClusterSetIPs of the services `echo`, `far` and `web`.
pub const ECHO_VIP: Ipv4Addr = Ipv4Addr::new(10, 96, 0, 10);
pub const FAR_VIP: Ipv4Addr = Ipv4Addr::new(10, 96, 0, 11);
pub const WEB_VIP: Ipv4Addr = Ipv4Addr::new(10, 96, 0, 80);

/// The label of a derived Service that names its multi-cluster service.
const SERVICE_NAME_LABEL: &str = "multicluster.kubernetes.io/service-name";

/// A world whose gateways listen on import ports ([`SETTINGS`]).
fn options(services: fn(&str) -> Vec<ServiceSpec<'static>>) -> Options {
    Options {
        settings: SETTINGS,
        ..Options::services(services)
    }
}

/// The import port of each `(service, port)` of namespace `app`, as
/// `strait imports --config DIR --cluster ID --output json` prints them:
/// see [`import_ports_in`].
pub fn import_ports(world: &World, cluster: &str) -> BTreeMap<(String, u16), u16> {
    import_ports_in(world, cluster, "app")
}

/// The import port of each `(service, port)` of `cluster`, whose services
/// are all in `namespace`, as `strait imports --config DIR --cluster ID
/// --output json` prints them: the derived Services' `spec.ports[].port` →
/// `targetPort`. Every one is in [`IMPORT_RANGE`], and no two service ports
/// share one.
pub(crate) fn import_ports_in(
    world: &World,
    cluster: &str,
    namespace: &str,
) -> BTreeMap<(String, u16), u16> {
    let list = crate::support::strait_imports(&world.config, cluster);
    let mut ports = BTreeMap::new();
    let services = list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|item| item["kind"] == "Service");
    // A headless service's per-pod derived Services (`strait.dev/pod`)
    // stand for one pod each, not for a service port.
    let services =
        services.filter(|item| item["metadata"]["annotations"]["strait.dev/pod"].is_null());
    for derived in services {
        let metadata = &derived["metadata"];
        let service = metadata["labels"][SERVICE_NAME_LABEL]
            .as_str()
            .unwrap_or_else(|| panic!("a derived Service without {SERVICE_NAME_LABEL}: {derived}"));
        assert_eq!(metadata["namespace"], namespace, "{derived}");
        for port in derived["spec"]["ports"].as_array().into_iter().flatten() {
            let number = |field: &str| {
                port[field]
                    .as_u64()
                    .and_then(|n| u16::try_from(n).ok())
                    .unwrap_or_else(|| panic!("{field} of {port} in {derived}"))
            };
            let (port, import) = (number("port"), number("targetPort"));
            assert!(
                IMPORT_RANGE.contains(&import),
                "{service}:{port} has import port {import}, outside imports.portRange"
            );
            let before = ports.insert((service.to_owned(), port), import);
            assert!(before.is_none(), "{service}:{port} printed twice");
        }
    }
    let distinct: BTreeSet<u16> = ports.values().copied().collect();
    assert_eq!(
        distinct.len(),
        ports.len(),
        "one import port each: {ports:?}"
    );
    ports
}

/// The import port of `service:port` in `ports`.
pub(crate) fn import_of(ports: &BTreeMap<(String, u16), u16>, service: &str, port: u16) -> u16 {
    *ports
        .get(&(service.to_owned(), port))
        .unwrap_or_else(|| panic!("strait imports printed no {service}:{port}: {ports:?}"))
}

/// The service ports `ports` holds.
pub(crate) fn service_ports(ports: &BTreeMap<(String, u16), u16>) -> BTreeSet<(&str, u16)> {
    ports.keys().map(|(s, p)| (s.as_str(), *p)).collect()
}

/// Import port `port` of replica `n` of `cluster`'s gateway, at its
/// pod-side address: where kube-proxy sends a ClusterSetIP's connections.
pub(crate) fn replica(cluster: &str, n: u8, port: u16) -> SocketAddr {
    SocketAddr::new(World::gateway_ip(cluster, n), port)
}

/// kube-proxy's stand-in in one client namespace: a route for
/// [`SERVICE_CIDR`] and one DNAT rule per VIP and port in `nat OUTPUT`.
/// The rules go with the namespace.
pub struct KubeProxy {
    ns: String,
    rules: BTreeMap<SocketAddr, SocketAddr>,
}

impl KubeProxy {
    /// Routes the service CIDR to the pod interface of `role` (`c1p1`).
    pub fn new(world: &World, role: &str) -> KubeProxy {
        let ns = world.ns(role);
        sys::ip(&["-n", &ns, "route", "add", SERVICE_CIDR, "dev", "eth0"])
            .unwrap_or_else(|e| panic!("{e}"));
        KubeProxy {
            ns,
            rules: BTreeMap::new(),
        }
    }

    /// Sends new connections to `vip` to `to` instead of any earlier
    /// target, as kube-proxy rewrites its rules when endpoints change.
    /// Open connections keep their translation (conntrack).
    pub fn forward(&mut self, vip: SocketAddr, to: SocketAddr) {
        if let Some(old) = self.rules.remove(&vip) {
            dnat(&self.ns, "-D", vip, old).unwrap_or_else(|e| panic!("{e}"));
        }
        dnat(&self.ns, "-A", vip, to).unwrap_or_else(|e| panic!("{e}"));
        self.rules.insert(vip, to);
    }

    /// Sends UDP to `vip` to `to`: kube-proxy DNATs a ClusterSetIP's UDP
    /// port as it does TCP (conntrack keeps each flow's translation).
    pub fn forward_udp(&mut self, vip: SocketAddr, to: SocketAddr) {
        dnat_protocol(&self.ns, "-A", "udp", vip, to).unwrap_or_else(|e| panic!("{e}"));
    }

    /// How many connections the current rule for `vip` translated (a NAT
    /// rule sees only the first packet of each connection).
    pub fn hits(&self, vip: SocketAddr) -> u64 {
        let to = self.rules.get(&vip).expect("a rule for this VIP");
        let listing = sys::iptables(&self.ns, &["-t", "nat", "-L", "OUTPUT", "-v", "-x", "-n"])
            .unwrap_or_else(|e| panic!("{e}"));
        let (port, target) = (format!("dpt:{}", vip.port()), format!("to:{to}"));
        listing
            .lines()
            .map(|line| line.split_whitespace().collect::<Vec<_>>())
            .find(|fields| {
                fields.contains(&"DNAT")
                    && fields.contains(&vip.ip().to_string().as_str())
                    && fields.contains(&port.as_str())
                    && fields.contains(&target.as_str())
            })
            .and_then(|fields| fields[0].parse().ok())
            .unwrap_or_else(|| panic!("no DNAT rule {vip} → {to} in:\n{listing}"))
    }
}

/// Appends (`-A`) or deletes (`-D`) the rule `vip` → `to` in `ns`.
fn dnat(ns: &str, action: &str, vip: SocketAddr, to: SocketAddr) -> Result<String, String> {
    dnat_protocol(ns, action, "tcp", vip, to)
}

/// [`dnat`] for `protocol` (`tcp`, `udp`).
fn dnat_protocol(
    ns: &str,
    action: &str,
    protocol: &str,
    vip: SocketAddr,
    to: SocketAddr,
) -> Result<String, String> {
    let (ip, port, to) = (vip.ip().to_string(), vip.port().to_string(), to.to_string());
    let rule = [
        "-t",
        "nat",
        action,
        "OUTPUT",
        "-d",
        &ip,
        "-p",
        protocol,
        "--dport",
        &port,
        "-j",
        "DNAT",
        "--to-destination",
        &to,
    ];
    sys::iptables(ns, &rule)
}

pub(crate) fn vip(ip: Ipv4Addr, port: u16) -> SocketAddr {
    SocketAddr::new(IpAddr::V4(ip), port)
}

/// Case 1, direct: c2 (c1's network) exports `echo`, c4 (net-c) exports
/// `far`. c1's pod dials echo's VIP; kube-proxy's stand-in sends it to
/// c1g1 on echo's import port. Every connection is answered by c2's pod,
/// dialled by c1g1 itself (direct: no c2 gateway in between), c1g1 counts
/// them as `direct` and nobody counts a tunnel; c4's pod (the other
/// import port) gets nothing. The control: before the rule exists nothing
/// answers at the VIP.
pub async fn direct(env: Env) {
    let mut world = World::start(
        &env,
        options(|id| match id {
            "c2" => vec![service("echo", TCP_42, EARLY, &[("c2", 1)])],
            "c4" => vec![service("far", TCP_42, EARLY, &[("c4", 1)])],
            _ => Vec::new(),
        }),
    )
    .await;
    world.start_pod("c2", 1);
    world.start_pod("c4", 1);
    let ports = import_ports(&world, "c1");
    assert_eq!(
        service_ports(&ports),
        BTreeSet::from([("echo", 42), ("far", 42)])
    );
    let client = world.ns("c1p1");
    let echo = vip(ECHO_VIP, 42);
    let mut proxy = KubeProxy::new(&world, "c1p1");
    let unanswered = sys::connect_in(&client, echo, Duration::from_millis(500)).await;
    assert!(unanswered.is_err(), "{echo} answered without a DNAT rule");

    proxy.forward(echo, replica("c1", 1, import_of(&ports, "echo", 42)));
    let before = world.scrape().await;
    let greetings = client::plain_many(&client, echo, 20)
        .await
        .expect("every connection to the ClusterSetIP succeeds");
    let expected = Greeting {
        name: "c2-pod1".to_owned(),
        peer: gw("c1", 1),
    };
    assert!(
        greetings.iter().all(|g| *g == expected),
        "{:?}",
        tally(&greetings)
    );
    let after = world.scrape().await;
    assert_eq!(
        proxy.hits(echo),
        20,
        "every connection went through the rule"
    );
    assert_eq!(opened_delta(&before, &after, &["c1g1"], "direct"), 20.0);
    for name in ALL_GATEWAYS {
        for path in ["tunnel", "inbound"] {
            let moved = opened_delta(&before, &after, &[name], path);
            assert_eq!(moved, 0.0, "{name} counted {moved} {path} connections");
        }
    }
    for name in ["c1g2", "c2g1", "c2g2"] {
        let moved = opened_delta(&before, &after, &[name], "direct");
        assert_eq!(moved, 0.0, "{name} carried {moved} connections");
    }
    assert_eq!(world.pod("c4-pod1").accepted(), 0, "far got nothing");
    assert_eq!(
        after["c1g1"].sum("strait_import_listeners", &[]),
        2.0,
        "c1g1 listens on the two import ports strait imports printed"
    );
}

/// Case 2, tunnelled: only c3 (net-b) exports `echo`, on c3-pod1 at
/// 10.10.0.12, which on net-a is c1-pod2's address (not exported; the
/// control dials it directly from c1's pod). c1's pod dials echo's VIP,
/// DNATed to c1g1's import port: every connection is answered by c3-pod1,
/// dialled by a c3 gateway; c1g1 counts them as `tunnel`, c3's gateways as
/// `inbound`, and c1-pod2 sees only the control.
pub async fn tunnelled(env: Env) {
    let mut world = World::start(
        &env,
        options(|id| match id {
            "c3" => vec![service("echo", TCP_42, EARLY, &[("c3", 1)])],
            _ => Vec::new(),
        }),
    )
    .await;
    world.start_pod("c3", 1);
    world.start_pod("c1", 2);
    let ports = import_ports(&world, "c1");
    assert_eq!(service_ports(&ports), BTreeSet::from([("echo", 42)]));
    let client = world.ns("c1p1");
    let overlapping = SocketAddr::new(World::pod_ip("c3", 1), POD_PORT);
    let control = client::direct(&client, overlapping)
        .await
        .expect("c1-pod2 holds 10.10.0.12 on net-a");
    assert_eq!(control.name, "c1-pod2");

    let echo = vip(ECHO_VIP, 42);
    let mut proxy = KubeProxy::new(&world, "c1p1");
    proxy.forward(echo, replica("c1", 1, import_of(&ports, "echo", 42)));
    let before = world.scrape().await;
    let greetings = client::plain_many(&client, echo, 20)
        .await
        .expect("every connection to the ClusterSetIP succeeds");
    for greeting in &greetings {
        assert_eq!(greeting.name, "c3-pod1", "{:?}", tally(&greetings));
        assert!(
            gateways_of("c3").contains(&greeting.peer),
            "c3-pod1 was dialled by {}, not by a c3 gateway",
            greeting.peer
        );
    }
    let after = world.scrape().await;
    assert_eq!(proxy.hits(echo), 20);
    assert_eq!(opened_delta(&before, &after, &["c1g1"], "tunnel"), 20.0);
    assert_eq!(opened_delta(&before, &after, &["c1g1"], "direct"), 0.0);
    assert_eq!(
        opened_delta(&before, &after, &["c3g1", "c3g2"], "inbound"),
        20.0
    );
    assert_eq!(world.pod("c1-pod2").accepted(), 1, "only the control");
    assert_eq!(world.pod("c3-pod1").accepted(), 20);
}

/// Case 3, the per-port rule in both directions (the "StrictPortConflict"
/// cases): c1 declares `tcp` 42 and c3 declares `tcp2` 4242, both on target
/// port 8080 of a pod at 10.10.0.12 (c1-pod2 on net-a, c3-pod1 on net-b),
/// so the merged service has both ports. From c1's pod and from c3's, each
/// DNATed to replica 1 of its own cluster's gateway: port 42 reaches only
/// c1-pod2 and port 4242 only c3-pod1, although the client's local pod
/// listens on the target port of the port it must not get (the control
/// dials it there directly). The local cluster's port goes direct from the
/// replica the rule names; the remote one through the remote gateways.
pub async fn per_port(env: Env) {
    const TCP2_4242: &[(&str, u16, u16)] = &[("tcp2", 4242, POD_PORT)];
    let mut world = World::start(
        &env,
        options(|id| match id {
            "c1" => vec![service("echo", TCP_42, EARLY, &[("c1", 2)])],
            "c3" => vec![service("echo", TCP2_4242, LATE, &[("c3", 1)])],
            _ => Vec::new(),
        }),
    )
    .await;
    world.start_pod("c1", 2);
    world.start_pod("c3", 1);
    // (port, the only cluster that declares it, its pod)
    let owners = [(42, "c1", "c1-pod2"), (4242, "c3", "c3-pod1")];
    let mut proxies = Vec::new();
    for (client, cluster, local_pod) in [("c1p1", "c1", "c1-pod2"), ("c3p2", "c3", "c3-pod1")] {
        let ns = world.ns(client);
        let ports = import_ports(&world, cluster);
        assert_eq!(
            service_ports(&ports),
            BTreeSet::from([("echo", 42), ("echo", 4242)]),
            "the union of the constituents' ports"
        );
        let target = SocketAddr::new(World::pod_ip("c1", 2), POD_PORT);
        let control = client::direct(&ns, target)
            .await
            .expect("the local pod listens on the target port");
        assert_eq!(control.name, local_pod);
        let mut proxy = KubeProxy::new(&world, client);
        for (port, owner, pod) in owners {
            let address = vip(ECHO_VIP, port);
            proxy.forward(
                address,
                replica(cluster, 1, import_of(&ports, "echo", port)),
            );
            let greetings = client::plain_many(&ns, address, 20)
                .await
                .unwrap_or_else(|e| panic!("from {client}, :{port}: {e}"));
            for greeting in &greetings {
                assert_eq!(
                    greeting.name,
                    pod,
                    "from {client}, :{port} is declared by {owner} alone: {:?}",
                    tally(&greetings)
                );
                if owner == cluster {
                    assert_eq!(greeting.peer, gw(cluster, 1), "direct from the DNAT target");
                } else {
                    assert!(
                        gateways_of(owner).contains(&greeting.peer),
                        "from {client}, {pod} was dialled by {}, not by a {owner} gateway",
                        greeting.peer
                    );
                }
            }
            assert_eq!(proxy.hits(address), 20);
        }
        proxies.push(proxy);
    }
    // 20 from each client, and the one control dial.
    assert_eq!(world.pod("c1-pod2").accepted(), 41);
    assert_eq!(world.pod("c3-pod1").accepted(), 41);
}

/// Case 4, failover between two gateway replicas of the client's cluster.
/// c2 exports `echo` (direct from c1) and c4 exports `far` (tunnelled).
/// Both VIPs are DNATed to c1g1: echo is dialled from c1g1's address, and
/// c1g2 carries nothing. c1g1 is killed: connections held through it break
/// and a new connection to the VIP is refused while the rule still names it
/// (the controls). The rules are replaced by ones to c1g2, as kube-proxy
/// does when c1g1's endpoint goes unready: new connections to both VIPs
/// succeed, echo now dialled from c1g2's address, and c1g2 counts them.
pub async fn failover(env: Env) {
    let mut world = World::start(
        &env,
        options(|id| match id {
            "c2" => vec![service("echo", TCP_42, EARLY, &[("c2", 1)])],
            "c4" => vec![service("far", TCP_42, EARLY, &[("c4", 1)])],
            _ => Vec::new(),
        }),
    )
    .await;
    world.start_pod("c2", 1);
    world.start_pod("c4", 1);
    let ports = import_ports(&world, "c1");
    let client = world.ns("c1p1");
    let mut proxy = KubeProxy::new(&world, "c1p1");
    through_replica(&world, &mut proxy, &ports, 1).await;

    let mut held = Vec::new();
    for ip in [ECHO_VIP, FAR_VIP] {
        let connection = Held::dial(&client, vip(ip, 42)).await;
        held.push(connection.expect("a held connection"));
    }
    for connection in &mut held {
        connection.ping().await.expect("a held connection echoes");
    }
    world.gateway_mut("c1g1").kill();
    for connection in &mut held {
        let pod = connection.greeting.name.clone();
        assert!(
            connection.ping().await.is_err(),
            "the connection to {pod} held through the killed c1g1 still works"
        );
    }
    let refused = client::plain(&client, vip(ECHO_VIP, 42)).await;
    assert!(
        refused.is_err(),
        "the rule still names the killed c1g1, yet {refused:?}"
    );

    through_replica(&world, &mut proxy, &ports, 2).await;
}

/// Points both VIPs of [`failover`] at replica `n` of c1's gateway, then
/// checks that 10 new connections to each go through it, and only it.
async fn through_replica(
    world: &World,
    proxy: &mut KubeProxy,
    ports: &BTreeMap<(String, u16), u16>,
    n: u8,
) {
    let (carrier, idle) = (format!("c1g{n}"), format!("c1g{}", 3 - n));
    let (echo, far) = (vip(ECHO_VIP, 42), vip(FAR_VIP, 42));
    proxy.forward(echo, replica("c1", n, import_of(ports, "echo", 42)));
    proxy.forward(far, replica("c1", n, import_of(ports, "far", 42)));
    let client = world.ns("c1p1");
    let before = world.scrape().await;
    let to_echo = client::plain_many(&client, echo, 10)
        .await
        .unwrap_or_else(|e| panic!("echo through {carrier}: {e}"));
    let expected = Greeting {
        name: "c2-pod1".to_owned(),
        peer: gw("c1", n),
    };
    assert!(
        to_echo.iter().all(|g| *g == expected),
        "through {carrier}: {:?}",
        tally(&to_echo)
    );
    let to_far = client::plain_many(&client, far, 10)
        .await
        .unwrap_or_else(|e| panic!("far through {carrier}: {e}"));
    assert!(
        to_far
            .iter()
            .all(|g| g.name == "c4-pod1" && gateways_of("c4").contains(&g.peer)),
        "through {carrier}: {:?}",
        tally(&to_far)
    );
    let after = world.scrape().await;
    assert_eq!(opened_delta(&before, &after, &[&carrier], "direct"), 10.0);
    assert_eq!(opened_delta(&before, &after, &[&carrier], "tunnel"), 10.0);
    for path in ["direct", "tunnel"] {
        assert_eq!(opened_delta(&before, &after, &[&idle], path), 0.0);
    }
    assert_eq!((proxy.hits(echo), proxy.hits(far)), (10, 10));
}

/// Case 5, plain HTTP: c3 (net-b) exports `web` port 80 on c3-pod1, an HTTP
/// responder at 10.10.0.12:8080; c1-pod2 has the same address and port on
/// net-a and answers too (the control, fetched directly). The real `curl
/// http://10.96.0.80/`, run in c1's pod with no proxy settings and DNATed
/// to c1g1's import port of `web:80`, gets `200` from c3-pod1, dialled by a
/// c3 gateway, with its request line and `Host` header as curl sent them.
pub async fn curl(env: Env) {
    let mut world = World::start(
        &env,
        options(|id| match id {
            "c3" => vec![service(
                "web",
                &[("http", 80, POD_PORT)],
                EARLY,
                &[("c3", 1)],
            )],
            _ => Vec::new(),
        }),
    )
    .await;
    world.start_http_pod("c3", 1);
    world.start_http_pod("c1", 2);
    let ports = import_ports(&world, "c1");
    assert_eq!(service_ports(&ports), BTreeSet::from([("web", 80)]));
    let client = world.ns("c1p1");
    let direct = format!("http://{}:{POD_PORT}/", World::pod_ip("c1", 2));
    let (status, body) = curl_in(&client, &direct).await.expect("curl, directly");
    assert_eq!(status, 200, "{body}");
    assert!(
        body.starts_with(&format!("c1-pod2 {}\n", World::pod_ip("c1", 1))),
        "{body}"
    );

    let web = vip(WEB_VIP, 80);
    let mut proxy = KubeProxy::new(&world, "c1p1");
    proxy.forward(web, replica("c1", 1, import_of(&ports, "web", 80)));
    for _ in 0..5 {
        let (status, body) = curl_in(&client, &format!("http://{WEB_VIP}/"))
            .await
            .expect("curl through the ClusterSetIP");
        assert_eq!(status, 200, "{body}");
        let lines: Vec<&str> = body.lines().collect();
        let greeting = lines.first().and_then(|l| l.split_once(' '));
        let (name, peer) = greeting.unwrap_or_else(|| panic!("no greeting: {body}"));
        assert_eq!(name, "c3-pod1", "{body}");
        let peer: IpAddr = peer.parse().expect("the dialling address");
        assert!(gateways_of("c3").contains(&peer), "{body}");
        assert_eq!(lines.get(1), Some(&"GET / HTTP/1.1"), "{body}");
        let host = format!("host: {WEB_VIP}");
        assert_eq!(lines.get(2), Some(&host.as_str()), "{body}");
    }
    assert_eq!(proxy.hits(web), 5);
    assert_eq!(world.pod("c1-pod2").accepted(), 1, "only the control");
    assert_eq!(world.pod("c3-pod1").accepted(), 5);
}

/// Runs `curl URL` inside `ns` with no proxy (every proxy variable unset
/// and `--noproxy '*'`): the status and the body.
pub(crate) async fn curl_in(ns: &str, url: &str) -> Result<(u16, String), String> {
    let mut command = tokio::process::Command::new("ip");
    command.args(["netns", "exec", ns, "curl", "--silent", "--show-error"]);
    command.args(["--noproxy", "*", "--max-time", "10", "--include", url]);
    for variable in ["http_proxy", "https_proxy", "all_proxy", "no_proxy"] {
        command
            .env_remove(variable)
            .env_remove(variable.to_ascii_uppercase());
    }
    let output = command
        .output()
        .await
        .map_err(|e| format!("curl did not start: {e}"))?;
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    if !output.status.success() {
        return Err(format!(
            "curl {url} in {ns} failed ({}): {} {text}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        ));
    }
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("no end of headers: {text:?}"))?;
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("no status: {head:?}"))?;
    Ok((status, body.to_owned()))
}
