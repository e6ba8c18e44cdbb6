//! By name: an unmodified client that knows only a service's
//! `clusterset.local` name reaches it on another network. The system
//! resolver (glibc) of the client's namespace asks the gateway's DNS
//! responder (`listeners.dns`), which answers with the ClusterSetIP of the
//! client cluster's ServiceImport; the connection to that VIP takes the
//! transparent path ([`super::transparent`]).
//!
//! Two stand-ins, as in Kubernetes: the client namespace's resolv.conf
//! names the gateway replica's pod-side address as its only nameserver,
//! where a pod's resolv.conf names CoreDNS and CoreDNS forwards
//! `clusterset.local` to the `cluster-edge-dns` Service; and an iptables
//! DNAT rule ([`KubeProxy`]) stands in for kube-proxy, sending the VIP to
//! the replica's import port.
//!
//! `ip netns exec NS` bind-mounts `/etc/netns/NS/resolv.conf` over
//! `/etc/resolv.conf` for the commands it runs, so [`Resolver`] writes that
//! file, and removes it when dropped (also when the test fails). The
//! system resolver asks port 53 only: every gateway of this world listens
//! for DNS on `0.0.0.0:53` inside its own namespace.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, Instant};

use crate::support::{Pod, ServiceSpec};

use super::backend::POD_PORT;
use super::gateway::Scrape;
use super::scenario::*;
use super::transparent::{
    self, KubeProxy, curl_in, import_of, import_ports_in, replica, service_ports, vip,
};
use super::world::{Options, World};
use super::{Env, loud};

/// The service's name, as the client knows it.
pub const CART: &str = "cart.shop.svc.clusterset.local";

/// A name in the zone that no cluster exports.
pub const NOTHERE: &str = "nothere.shop.svc.clusterset.local";

/// `cart`'s ClusterSetIP in c1 (its ServiceImport's `spec.ips`).
pub const CART_VIP: Ipv4Addr = Ipv4Addr::new(10, 96, 0, 81);

/// Where `ip netns exec` finds per-namespace files for `/etc`.
const ETC_NETNS: &str = "/etc/netns";

/// The namespace's resolv.conf: `ip netns exec NS` bind-mounts it over
/// `/etc/resolv.conf`, so every resolver run there asks `nameserver` only.
/// Dropping it removes the file and its folder (and `/etc/netns` when this
/// made it and it is empty), unless `STRAIT_KEEP_NETNS` keeps them.
pub struct Resolver {
    dir: PathBuf,
    made_etc_netns: bool,
}

impl Resolver {
    pub fn point(ns: &str, nameserver: IpAddr) -> Resolver {
        let made_etc_netns = !Path::new(ETC_NETNS).exists();
        let dir = Path::new(ETC_NETNS).join(ns);
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        let resolver = Resolver {
            dir,
            made_etc_netns,
        };
        let file = resolver.dir.join("resolv.conf");
        let text = format!("nameserver {nameserver}\noptions timeout:2 attempts:1\n");
        std::fs::write(&file, text).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        resolver
    }
}

impl Drop for Resolver {
    fn drop(&mut self) {
        if super::keep() {
            loud(&format!(
                "STRAIT_KEEP_NETNS: kept {}; remove it with: rm -r {}",
                self.dir.join("resolv.conf").display(),
                self.dir.display()
            ));
            return;
        }
        let _ = std::fs::remove_file(self.dir.join("resolv.conf"));
        let _ = std::fs::remove_dir(&self.dir);
        if self.made_etc_netns {
            // Fails, harmlessly, when something else uses it meanwhile.
            let _ = std::fs::remove_dir(ETC_NETNS);
        }
    }
}

/// Runs `program args…` in `ns` through `ip netns exec` (so with the
/// namespace's resolv.conf), with no proxy variables.
pub(crate) async fn exec_in(ns: &str, program: &str, args: &[&str]) -> Output {
    let mut command = tokio::process::Command::new("ip");
    command.args(["netns", "exec", ns, program]).args(args);
    for variable in ["http_proxy", "https_proxy", "all_proxy", "no_proxy"] {
        command
            .env_remove(variable)
            .env_remove(variable.to_ascii_uppercase());
    }
    command
        .output()
        .await
        .unwrap_or_else(|e| panic!("`{program}` did not start in {ns}: {e}"))
}

pub(crate) fn text(output: &Output) -> String {
    format!(
        "({}) {}{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// `dig +short @server TYPE name` in `ns`: the answer's records, sorted.
pub(crate) async fn dig_short(ns: &str, server: IpAddr, kind: &str, name: &str) -> Vec<String> {
    let at = format!("@{server}");
    let args = ["+short", "+time=2", "+tries=1", &at, kind, name];
    let output = exec_in(ns, "dig", &args).await;
    assert!(output.status.success(), "dig {args:?}: {}", text(&output));
    let mut lines: Vec<String> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(str::to_owned)
        .collect();
    lines.sort();
    lines
}

/// `strait_dns_queries_total{rcode}` of `name` in `scrapes`.
fn queries(scrapes: &BTreeMap<String, Scrape>, name: &str, rcode: &str) -> f64 {
    scrapes.get(name).map_or(0.0, |s| {
        s.sum("strait_dns_queries_total", &[("rcode", rcode)])
    })
}

/// c3 (net-b) exports `shop/cart` port `http` 80 on c3-pod1, an HTTP
/// responder; c1's folder holds cart's ServiceImport with [`CART_VIP`]. In
/// c1's pod, whose resolv.conf names only c1g1 ([`Resolver`]):
/// `getent hosts` (glibc) resolves [`CART`] to the VIP and fails for
/// [`NOTHERE`], answered `noerror` and `nxdomain` by c1g1 (and no other
/// gateway answers anything); the real `curl http://cart…/`, with the VIP
/// DNATed to c1g1's import port of `cart:80` by kube-proxy's stand-in, gets
/// `200` from c3-pod1, dialled by a c3 gateway, with `Host` the name; and
/// `dig SRV _http._tcp.cart…` names port 80.
pub async fn by_name(env: Env) {
    let settings = format!("{}listeners:\n  dns: 0.0.0.0:53\n", transparent::SETTINGS);
    let mut world = World::start(
        &env,
        Options {
            settings: Box::leak(settings.into_boxed_str()),
            ..Options::services(|id| match id {
                "c3" => vec![ServiceSpec {
                    namespace: "shop",
                    name: "cart",
                    ports: &[("http", 80, POD_PORT)],
                    exported_at: EARLY,
                    pods: vec![Pod::ready(World::pod_ip("c3", 1))],
                    proxy_protocol: false,
                    udp_ports: &[],
                }],
                _ => Vec::new(),
            })
        },
    )
    .await;
    world.start_http_pod("c3", 1);
    // cart's ServiceImport in c1 (the viewer), in a file of its own beside
    // objects.yaml, landed atomically like World::write_cluster's.
    let import = format!(
        "apiVersion: multicluster.x-k8s.io/v1alpha1
kind: ServiceImport
metadata: {{name: cart, namespace: shop}}
spec: {{type: ClusterSetIP, ips: [\"{CART_VIP}\"]}}
"
    );
    let folder = world.config.join("clusters").join("c1");
    std::fs::write(folder.join(".imports.yaml.tmp"), import).expect("write the ServiceImport");
    std::fs::rename(
        folder.join(".imports.yaml.tmp"),
        folder.join("imports.yaml"),
    )
    .expect("rename the ServiceImport");
    let ports = import_ports_in(&world, "c1", "shop");
    assert_eq!(service_ports(&ports), BTreeSet::from([("cart", 80)]));

    let client = world.ns("c1p1");
    let dns = gw("c1", 1);
    let cart = vip(CART_VIP, 80);
    let mut proxy = KubeProxy::new(&world, "c1p1");
    proxy.forward(cart, replica("c1", 1, import_of(&ports, "cart", 80)));
    let _resolver = Resolver::point(&client, dns);

    // c1g1 answers with the ServiceImport once it has reloaded c1's folder.
    let started = Instant::now();
    let expected = vec![CART_VIP.to_string()];
    loop {
        let answer = dig_short(&client, dns, "A", CART).await;
        if answer == expected {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "c1g1 answers {answer:?} for {CART} A, not {expected:?}, 10 s after the ServiceImport"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let before = world.scrape().await;
    let found = exec_in(&client, "getent", &["hosts", CART]).await;
    assert!(
        found.status.success(),
        "getent hosts {CART}: {}",
        text(&found)
    );
    let printed = String::from_utf8_lossy(&found.stdout).into_owned();
    let fields: Vec<&str> = printed.split_whitespace().collect();
    assert_eq!(fields, [CART_VIP.to_string().as_str(), CART], "{printed}");
    let middle = world.scrape().await;
    let asked = Instant::now();
    let missing = exec_in(&client, "getent", &["hosts", NOTHERE]).await;
    assert_eq!(
        missing.status.code(),
        Some(2),
        "getent hosts {NOTHERE} (2: not found): {}",
        text(&missing)
    );
    assert!(
        asked.elapsed() < Duration::from_secs(1),
        "told at once, not timed out: {:?}",
        asked.elapsed()
    );
    let after = world.scrape().await;
    let moved = |from, to, rcode| queries(to, "c1g1", rcode) - queries(from, "c1g1", rcode);
    assert!(
        moved(&before, &middle, "noerror") >= 1.0,
        "c1g1 answered {CART}"
    );
    assert_eq!(moved(&before, &middle, "nxdomain"), 0.0);
    assert!(
        moved(&middle, &after, "nxdomain") >= 1.0,
        "c1g1 denied {NOTHERE}"
    );
    for name in ALL_GATEWAYS.iter().filter(|name| **name != "c1g1") {
        let asked: f64 = ["noerror", "nxdomain", "refused"]
            .iter()
            .map(|rcode| queries(&after, name, rcode) - queries(&before, name, rcode))
            .sum();
        assert_eq!(asked, 0.0, "{name} was asked: the resolver names c1g1 only");
    }

    let url = format!("http://{CART}/");
    for _ in 0..3 {
        let (status, body) = curl_in(&client, &url).await.expect("curl by name");
        assert_eq!(status, 200, "{body}");
        let lines: Vec<&str> = body.lines().collect();
        let greeting = lines.first().and_then(|l| l.split_once(' '));
        let (name, peer) = greeting.unwrap_or_else(|| panic!("no greeting: {body}"));
        assert_eq!(name, "c3-pod1", "{body}");
        let peer: IpAddr = peer.parse().expect("the dialling address");
        assert!(gateways_of("c3").contains(&peer), "{body}");
        assert_eq!(lines.get(1), Some(&"GET / HTTP/1.1"), "{body}");
        let host = format!("host: {CART}");
        assert_eq!(lines.get(2), Some(&host.as_str()), "{body}");
    }
    assert_eq!(proxy.hits(cart), 3, "curl dialled the VIP the name gave");
    assert_eq!(world.pod("c3-pod1").accepted(), 3);

    let srv = dig_short(&client, dns, "SRV", &format!("_http._tcp.{CART}")).await;
    assert_eq!(srv, [format!("0 100 80 {CART}.")]);
}
