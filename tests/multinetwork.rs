//! Multi-network tests in Linux network namespaces: real `strait run`
//! gateways (two replicas per cluster) on a shared WAN, pods on isolated pod
//! networks whose addresses overlap, failover, configuration updates and
//! packet loss. See tests/README.md for the topology and how to run one test
//! alone or keep the namespaces for debugging.
//!
//! Clients are pods: every client socket is made inside a pod namespace and
//! speaks HTTP CONNECT to its cluster's gateway (replica 1), except on the
//! transparent path (`transparent_*`), where an unmodified client dials a
//! ClusterSetIP and an iptables DNAT rule stands in for kube-proxy, and by
//! name (`by_name_*`), where it knows only the service's name and its
//! resolver asks the gateway's DNS. Backends greet with their name and the
//! address that dialled them, which tells which hop delivered the
//! connection. Each test needs root (or CAP_SYS_ADMIN and CAP_NET_ADMIN)
//! and `ip`; without them it prints `SKIPPED: …`, and fails under
//! `CI=true`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on what they set up

#[path = "multinetwork/callers.rs"]
mod callers;
#[path = "multinetwork/health.rs"]
mod health;
mod netns;
mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use netns::backend::POD_PORT;
use netns::by_name;
use netns::client::{self, Greeting, Pinger, Traffic};
use netns::gateway::Scrape;
use netns::resilience;
use netns::scenario::*;
use netns::sys;
use netns::transparent;
use netns::world::{Options, World};

/// A pod in c1 cannot dial a pod of c3 (net-b): c3-pod2's 10.10.0.33 does
/// not exist on net-a, and c3-pod1's 10.10.0.12 is c1-pod2 there (the
/// controls). Through c1's and c3's gateways it reaches both c3 pods.
#[test]
fn a_c1_pod_reaches_c3_pods_only_through_the_gateways() {
    netns::run(
        "a_c1_pod_reaches_c3_pods_only_through_the_gateways",
        false,
        |env| async move {
            let mut world = World::start(
                &env,
                Options::services(|id| match id {
                    "c3" => vec![service("echo", TCP_42, EARLY, &[("c3", 1), ("c3", 2)])],
                    _ => Vec::new(),
                }),
            )
            .await;
            world.start_pod("c3", 1);
            world.start_pod("c3", 2);
            // Not in any Service: it just holds c3-pod1's address on net-a.
            world.start_pod("c1", 2);
            let client = world.ns("c1p1");

            let only_on_net_b = SocketAddr::new(World::pod_ip("c3", 2), POD_PORT);
            let direct = sys::connect_in(&client, only_on_net_b, Duration::from_millis(1500)).await;
            assert!(direct.is_err(), "c1p1 dialled {only_on_net_b} directly");
            let overlapping = SocketAddr::new(World::pod_ip("c3", 1), POD_PORT);
            let greeting = client::direct(&client, overlapping)
                .await
                .expect("c1-pod2 holds 10.10.0.12 on net-a");
            assert_eq!(greeting.name, "c1-pod2", "10.10.0.12 on net-a is c1's pod");
            assert_eq!(world.pod("c3-pod1").accepted(), 0);
            assert_eq!(world.pod("c3-pod2").accepted(), 0);

            let greetings = client::many(&client, world.connect_address("c1"), ECHO, 30)
                .await
                .expect("every connection through the gateways succeeds");
            let names: BTreeSet<&str> = greetings.iter().map(|g| g.name.as_str()).collect();
            assert_eq!(
                names,
                BTreeSet::from(["c3-pod1", "c3-pod2"]),
                "{greetings:?}"
            );
            for greeting in &greetings {
                assert!(
                    gateways_of("c3").contains(&greeting.peer),
                    "a c3 pod was dialled by {}, not by a c3 gateway",
                    greeting.peer
                );
            }
            assert_eq!(
                world.pod("c1-pod2").accepted(),
                1,
                "only the control reached c1-pod2"
            );
        },
    );
}

/// One connection from a c1 pod to c3's echo crosses two gateways, and each
/// logs it as one span (`--log-format json`): on c1's, the access-log line
/// is written by the splice's own task inside the `connection` span, whose
/// id it names, with the listener, client, service port, backend and path
/// recorded on it; on the c3 replica that dialled the pod, inside a
/// `stream` span of the peer's `connection` span, which names the calling
/// gateway's identity from its certificate.
/// (Breaking either — the splice task left uninstrumented, or no span at
/// the accept — loses the span fields these lines are checked for.)
#[test]
fn one_connection_is_one_span_on_each_gateway_it_crosses() {
    netns::run(
        "one_connection_is_one_span_on_each_gateway_it_crosses",
        false,
        |env| async move {
            let mut world = World::start(
                &env,
                Options::services(|id| match id {
                    "c3" => vec![service("echo", TCP_42, EARLY, &[("c3", 1)])],
                    _ => Vec::new(),
                }),
            )
            .await;
            world.start_pod("c3", 1);
            let client = world.ns("c1p1");
            let greeting = client::once(&client, world.connect_address("c1"), ECHO)
                .await
                .expect("c1p1 reaches c3's echo");
            let pod = SocketAddr::new(World::pod_ip("c3", 1), POD_PORT).to_string();

            let c1 = world.gateway(&netns::topology::gateway_role("c1", 1));
            let outbound = access_line(|| c1.log_lines(), "outbound").await;
            let id = outbound["connection"]
                .as_u64()
                .expect("the access line names its connection");
            let span = &outbound["span"];
            assert_eq!(span["name"], "connection", "{outbound}");
            assert_eq!(span["id"].as_u64(), Some(id), "{outbound}");
            assert_eq!(span["listener"], "connect", "{outbound}");
            assert_eq!(span["service"], "app/echo", "{outbound}");
            assert_eq!(span["port"], 42, "{outbound}");
            assert_eq!(span["path"], "tunnel", "{outbound}");
            assert_eq!(span["backend"], pod.as_str(), "{outbound}");
            let client_ip = World::pod_ip("c1", 1).to_string();
            assert!(
                span["client"]
                    .as_str()
                    .is_some_and(|c| c.starts_with(&client_ip)),
                "{outbound}"
            );

            let n = (1..=2)
                .find(|n| World::gateway_ip("c3", *n) == greeting.peer)
                .expect("a c3 replica dialled the pod");
            let c3 = world.gateway(&netns::topology::gateway_role("c3", n));
            let inbound = access_line(|| c3.log_lines(), "inbound").await;
            let stream = &inbound["span"];
            assert_eq!(stream["name"], "stream", "{inbound}");
            assert_eq!(stream["id"], inbound["connection"], "{inbound}");
            assert_eq!(stream["backend"], pod.as_str(), "{inbound}");
            // The tunnel request names the pod the c1 gateway chose.
            assert_eq!(stream["authority"], pod.as_str(), "{inbound}");
            let peer = inbound["spans"]
                .as_array()
                .and_then(|spans| spans.first())
                .expect("the stream sits in its peer connection's span");
            assert_eq!(peer["name"], "connection", "{inbound}");
            // `tunnel_quic` or `tunnel` (HTTP/2), whichever carried it.
            assert!(
                peer["listener"]
                    .as_str()
                    .is_some_and(|l| l.starts_with("tunnel")),
                "{inbound}"
            );
            assert!(
                peer["peer"]
                    .as_str()
                    .is_some_and(|p| p.contains("/cluster/c1/")),
                "the peer is named by its certificate: {inbound}"
            );
        },
    );
}

/// Waits for one access-log line of `direction` (`outbound`: the egress
/// side's, which has no direction field) in a gateway's JSON log.
async fn access_line(
    lines: impl Fn() -> Vec<serde_json::Value>,
    direction: &str,
) -> serde_json::Value {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let found = lines().into_iter().find(|line| {
            line["target"] == "strait::access"
                && match direction {
                    "inbound" => line["direction"] == "inbound",
                    _ => line["direction"].is_null(),
                }
        });
        if let Some(line) = found {
            return line;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no {direction} access-log line after 5 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// c1 → c2 (same network) goes direct. In Strait a client always talks to
/// its own gateway's CONNECT listener, so "direct" means c1's gateway dials
/// the c2 pod itself: the pod sees c1's replica address (not a c2 gateway),
/// and no `tunnel` or `inbound` counter moves on any gateway while c2's
/// gateways count nothing at all. The control: one connection to a service
/// of c4 (net-c) moves exactly those counters.
#[test]
fn c1_to_c2_goes_direct_with_no_gateway_hop() {
    netns::run(
        "c1_to_c2_goes_direct_with_no_gateway_hop",
        false,
        |env| async move {
            let mut world = World::start(
                &env,
                Options::services(|id| match id {
                    "c2" => vec![service("echo", TCP_42, EARLY, &[("c2", 1)])],
                    "c4" => vec![service("far", TCP_42, EARLY, &[("c4", 1)])],
                    _ => Vec::new(),
                }),
            )
            .await;
            world.start_pod("c2", 1);
            world.start_pod("c4", 1);
            let client = world.ns("c1p1");
            let before = world.scrape().await;
            let greetings = client::many(&client, world.connect_address("c1"), ECHO, 30)
                .await
                .expect("c1 reaches c2");
            let expected = Greeting {
                name: "c2-pod1".to_owned(),
                peer: gw("c1", 1),
            };
            assert!(greetings.iter().all(|g| *g == expected), "{greetings:?}");
            let after = world.scrape().await;
            assert_eq!(opened_delta(&before, &after, &["c1g1"], "direct"), 30.0);
            for name in ALL_GATEWAYS {
                for path in ["tunnel", "inbound"] {
                    let moved = opened_delta(&before, &after, &[name], path);
                    assert_eq!(moved, 0.0, "{name} counted {moved} {path} connections");
                }
            }
            for name in ["c2g1", "c2g2"] {
                let moved: f64 = ["direct", "tunnel", "inbound"]
                    .iter()
                    .map(|path| opened_delta(&before, &after, &[name], path))
                    .sum();
                assert_eq!(moved, 0.0, "{name} carried c1 → c2 traffic");
            }

            let far = client::once(
                &client,
                world.connect_address("c1"),
                "far.app.svc.clusterset.local:42",
            )
            .await
            .expect("c1 reaches c4");
            assert_eq!(far.name, "c4-pod1");
            assert!(gateways_of("c4").contains(&far.peer), "{far:?}");
            let control = world.scrape().await;
            assert_eq!(opened_delta(&after, &control, &["c1g1"], "tunnel"), 1.0);
            assert_eq!(
                opened_delta(&after, &control, &["c4g1", "c4g2"], "inbound"),
                1.0
            );
        },
    );
}

/// c1 and c3 both export echo on a pod at 10.10.0.12 (net-a and net-b
/// overlap). From c1, c1-pod2 is dialled by c1's gateway (direct) and
/// c3-pod1 through the tunnel, dialled by a c3 gateway; the counters say
/// the same: `path="tunnel"` on c1's gateway, `path="inbound"` on c3's. From
/// c3, the mirror image.
#[test]
fn overlapping_addresses_reach_the_right_network_through_both_gateways() {
    netns::run(
        "overlapping_addresses_reach_the_right_network_through_both_gateways",
        false,
        |env| async move {
            // Spread evenly: local first would keep every connection on
            // the caller's own pod, and both paths are the point here.
            let mut world = World::start(
                &env,
                Options {
                    tuning: "  locality: none\n",
                    ..Options::services(|id| match id {
                        "c1" => vec![service("echo", TCP_42, EARLY, &[("c1", 2)])],
                        "c3" => vec![service("echo", TCP_42, LATE, &[("c3", 1)])],
                        _ => Vec::new(),
                    })
                },
            )
            .await;
            assert_eq!(World::pod_ip("c1", 2), World::pod_ip("c3", 1));
            world.start_pod("c1", 2);
            world.start_pod("c3", 1);

            for (client, local, remote) in [("c1p1", "c1", "c3"), ("c3p2", "c3", "c1")] {
                let local_pod = if local == "c1" { "c1-pod2" } else { "c3-pod1" };
                let remote_pod = if remote == "c1" { "c1-pod2" } else { "c3-pod1" };
                let accepted = |world: &World, pod: &str| world.pod(pod).accepted();
                let (local_before, remote_before) =
                    (accepted(&world, local_pod), accepted(&world, remote_pod));
                let before = world.scrape().await;
                let greetings =
                    client::many(&world.ns(client), world.connect_address(local), ECHO, 40)
                        .await
                        .expect("every connection succeeds");
                let after = world.scrape().await;
                let counts = tally(&greetings);
                let direct = counts
                    .get(&(local_pod.to_owned(), gw(local, 1)))
                    .copied()
                    .unwrap_or(0);
                let tunnelled: usize = gateways_of(remote)
                    .iter()
                    .filter_map(|peer| counts.get(&(remote_pod.to_owned(), *peer)))
                    .sum();
                assert_eq!(direct + tunnelled, 40, "from {client}: {counts:?}");
                assert!(direct > 0 && tunnelled > 0, "from {client}: {counts:?}");
                let own = [format!("{local}g1")];
                let own: Vec<&str> = own.iter().map(String::as_str).collect();
                let peers = [format!("{remote}g1"), format!("{remote}g2")];
                let peers: Vec<&str> = peers.iter().map(String::as_str).collect();
                assert_eq!(opened_delta(&before, &after, &own, "direct"), direct as f64);
                assert_eq!(
                    opened_delta(&before, &after, &own, "tunnel"),
                    tunnelled as f64
                );
                assert_eq!(
                    opened_delta(&before, &after, &peers, "inbound"),
                    tunnelled as f64
                );
                assert_eq!(
                    opened_delta(&before, &after, &["c2g1", "c2g2"], "inbound"),
                    0.0
                );
                assert_eq!(accepted(&world, local_pod) - local_before, direct);
                assert_eq!(accepted(&world, remote_pod) - remote_before, tunnelled);
            }
        },
    );
}

/// The per-port rule across networks. c1 declares `tcp` 42 and c3 declares
/// `tcp` 4242, and both pods listen on the same target port: port names
/// merge first, so only 42 is exposed and it reaches c1's pod alone, from
/// either network, although c3's pod listens on that target port (the
/// control dials it directly inside net-b). When c3 names its port `tcp2`,
/// both ports are exposed, each to its own cluster.
#[test]
fn a_port_reaches_only_the_clusters_that_declare_it() {
    netns::run(
        "a_port_reaches_only_the_clusters_that_declare_it",
        false,
        |env| async move {
            const TCP_4242: &[(&str, u16, u16)] = &[("tcp", 4242, POD_PORT)];
            const TCP2_4242: &[(&str, u16, u16)] = &[("tcp2", 4242, POD_PORT)];
            let mut world = World::start(
                &env,
                Options::services(|id| match id {
                    "c1" => vec![service("echo", TCP_42, EARLY, &[("c1", 2)])],
                    "c3" => vec![service("echo", TCP_4242, LATE, &[("c3", 1)])],
                    _ => Vec::new(),
                }),
            )
            .await;
            world.start_pod("c1", 2);
            world.start_pod("c3", 1);
            let c3_pod = SocketAddr::new(World::pod_ip("c3", 1), POD_PORT);
            let control = client::direct(&world.ns("c3p2"), c3_pod)
                .await
                .expect("c3-pod1 listens on the target port");
            assert_eq!(control.name, "c3-pod1");
            let port_4242 = "echo.app.svc.clusterset.local:4242";
            let clients = [("c1p1", "c1"), ("c3p2", "c3")];

            for (client, cluster) in clients {
                let (ns, gateway) = (world.ns(client), world.connect_address(cluster));
                let greetings = client::many(&ns, gateway, ECHO, 20)
                    .await
                    .expect(":42 works");
                assert!(
                    greetings.iter().all(|g| g.name == "c1-pod2"),
                    "from {client}: {:?}",
                    tally(&greetings)
                );
                let refused = client::connect(&ns, gateway, port_4242)
                    .await
                    .expect("an answer");
                assert_eq!(
                    refused.status, 403,
                    "from {client}: 4242 is not exposed: {}",
                    refused.body
                );
            }
            assert_eq!(
                world.pod("c3-pod1").accepted(),
                1,
                "only the control reached c3-pod1"
            );

            world.write_cluster("c3", &[service("echo", TCP2_4242, LATE, &[("c3", 1)])]);
            let both = [
                "app/echo:42=c1/10.10.0.12:8080",
                "app/echo:4242=c3/10.10.0.12:8080",
            ];
            world.wait_backends(&ALL_GATEWAYS, &both).await;
            for (client, cluster) in clients {
                let (ns, gateway) = (world.ns(client), world.connect_address(cluster));
                let to_42 = client::many(&ns, gateway, ECHO, 20)
                    .await
                    .expect(":42 works");
                assert!(
                    to_42.iter().all(|g| g.name == "c1-pod2"),
                    "{:?}",
                    tally(&to_42)
                );
                let to_4242 = client::many(&ns, gateway, port_4242, 20)
                    .await
                    .expect(":4242 works");
                assert!(
                    to_4242.iter().all(|g| g.name == "c3-pod1"),
                    "{:?}",
                    tally(&to_4242)
                );
                let hops: BTreeSet<IpAddr> = to_42.iter().chain(&to_4242).map(|g| g.peer).collect();
                let own_gateways = BTreeSet::from(gateways_of(cluster));
                assert_eq!(
                    hops.iter().filter(|p| own_gateways.contains(p)).count(),
                    1,
                    "from {client}, one pod is local and dialled by the local gateway: {hops:?}"
                );
            }
        },
    );
}

/// Killing one replica of net-b's gateway during traffic, over HTTP/2
/// tunnels: see [`netns::resilience::failover`].
#[test]
fn killing_a_replica_fails_over_within_two_seconds_over_h2() {
    netns::run(
        "killing_a_replica_fails_over_within_two_seconds_over_h2",
        false,
        |env| resilience::failover(env, "h2"),
    );
}

/// The same over QUIC tunnels. A replica that dies sends no FIN or RST over
/// UDP: the QUIC idle timeout (1 s, with keep-alives every 200 ms) is what
/// gives its connection up, inside the 2 s budget.
#[test]
fn killing_a_replica_fails_over_within_two_seconds_over_quic() {
    netns::run(
        "killing_a_replica_fails_over_within_two_seconds_over_quic",
        false,
        |env| resilience::failover(env, "quic"),
    );
}

/// A killed replica, restarted, is used again (HTTP/2 tunnels): see
/// [`netns::resilience::restart`].
#[test]
fn a_restarted_replica_is_used_again_over_h2() {
    netns::run("a_restarted_replica_is_used_again_over_h2", false, |env| {
        resilience::restart(env, "h2")
    });
}

/// The same over QUIC tunnels.
#[test]
fn a_restarted_replica_is_used_again_over_quic() {
    netns::run(
        "a_restarted_replica_is_used_again_over_quic",
        false,
        |env| resilience::restart(env, "quic"),
    );
}

const C3_POD1: &str = "app/echo:42=c3/10.10.0.12:8080";
const C3_POD2: &str = "app/echo:42=c3/10.10.0.33:8080";
const C4_POD1: &str = "app/echo:42=c4/10.30.0.11:8080";

/// Configuration updates while traffic flows: an endpoint added, one
/// removed, a cluster leaving. After each, new connections follow the new
/// routes; no connection opened before (including those to the removed pod
/// and the departed cluster) is dropped, and no new connection fails.
#[test]
fn configuration_updates_keep_open_connections_and_move_new_ones() {
    netns::run(
        "configuration_updates_keep_open_connections_and_move_new_ones",
        false,
        |env| async move {
            let mut world = World::start(
                &env,
                Options::services(|id| match id {
                    "c3" => vec![service("echo", TCP_42, EARLY, &[("c3", 1)])],
                    "c4" => vec![service("echo", TCP_42, LATE, &[("c4", 1)])],
                    _ => Vec::new(),
                }),
            )
            .await;
            for (cluster, n) in [("c3", 1), ("c3", 2), ("c4", 1)] {
                world.start_pod(cluster, n);
            }
            let (client, gateway) = (world.ns("c1p1"), world.connect_address("c1"));
            follows(&world, &["c3-pod1", "c4-pod1"], 30).await;
            let held = vec![
                held_to(&world, "c3-pod1").await,
                held_to(&world, "c4-pod1").await,
            ];
            let pings = Pinger::start(held, Duration::from_millis(100));
            let traffic = Traffic::start(&client, gateway, ECHO, Duration::from_millis(20));

            // An endpoint is added.
            world.write_cluster(
                "c3",
                &[service("echo", TCP_42, EARLY, &[("c3", 1), ("c3", 2)])],
            );
            world
                .wait_backends(&ALL_GATEWAYS, &[C3_POD1, C3_POD2, C4_POD1])
                .await;
            follows(&world, &["c3-pod1", "c3-pod2", "c4-pod1"], 60).await;
            let added = held_to(&world, "c3-pod2").await;
            let pings_added = Pinger::start(vec![added], Duration::from_millis(100));

            // An endpoint is removed.
            world.write_cluster("c3", &[service("echo", TCP_42, EARLY, &[("c3", 2)])]);
            world
                .wait_backends(&ALL_GATEWAYS, &[C3_POD2, C4_POD1])
                .await;
            follows(&world, &["c3-pod2", "c4-pod1"], 40).await;

            // c3 leaves the cluster set.
            world.remove_cluster("c3");
            let staying = ["c1g1", "c1g2", "c2g1", "c2g2", "c4g1", "c4g2"];
            world.wait_backends(&staying, &[C4_POD1]).await;
            follows(&world, &["c4-pod1"], 20).await;

            let samples = traffic.stop().await;
            let failures: Vec<_> = samples
                .iter()
                .filter_map(|s| s.result.as_ref().err())
                .collect();
            // Three updates take a second or two; at one connection per 20 ms
            // that is dozens of connections opened while routes changed.
            assert!(
                samples.len() > 20,
                "traffic flowed during the updates: {} connections",
                samples.len()
            );
            assert!(
                failures.is_empty(),
                "{} new connections failed: {failures:?}",
                failures.len()
            );
            for (mut connection, errors) in pings
                .stop()
                .await
                .into_iter()
                .chain(pings_added.stop().await)
            {
                let pod = connection.greeting.name.clone();
                assert!(
                    errors.is_empty(),
                    "the connection to {pod} broke: {errors:?}"
                );
                connection
                    .ping()
                    .await
                    .unwrap_or_else(|e| panic!("{pod}: {e}"));
            }
        },
    );
}

/// 1% random loss on the WAN, HTTP/2 tunnels: see [`netns::resilience::loss`].
#[test]
fn one_percent_wan_loss_keeps_200_mebibyte_transfers_exact_over_h2() {
    netns::run(
        "one_percent_wan_loss_keeps_200_mebibyte_transfers_exact_over_h2",
        true,
        |env| resilience::loss(env, "h2"),
    );
}

/// The same over QUIC tunnels.
#[test]
fn one_percent_wan_loss_keeps_200_mebibyte_transfers_exact_over_quic() {
    netns::run(
        "one_percent_wan_loss_keeps_200_mebibyte_transfers_exact_over_quic",
        true,
        |env| resilience::loss(env, "quic"),
    );
}

/// A gateway holding a certificate of another CA (it trusts the real CA as
/// well, so it is the callee that must refuse) asks c3's gateways for a
/// tunnel from the WAN-only `rogue` namespace: every c3 replica refuses the
/// handshake, counts it as `unauthenticated`, and dials nothing. The
/// control: a gateway in the same namespace with the cluster set's own
/// certificate gets through.
#[test]
fn a_tunnel_request_with_a_certificate_of_another_ca_is_refused() {
    netns::run(
        "a_tunnel_request_with_a_certificate_of_another_ca_is_refused",
        false,
        |env| async move {
            let mut world = World::start(
                &env,
                Options {
                    rogue: true,
                    ..Options::services(|id| match id {
                        "c3" => vec![service("echo", TCP_42, EARLY, &[("c3", 1)])],
                        _ => Vec::new(),
                    })
                },
            )
            .await;
            world.start_pod("c3", 1);
            let impostor_tls = world.impostor_certificates("c1");
            let rogue = world.ns("rogue");
            let wan = netns::topology::ROGUE_WAN;
            let impostor = world
                .add_gateway("impostor", "rogue", "c1", impostor_tls, wan, 1)
                .await;
            let genuine_tls = world.certs.join("c1");
            let genuine = world
                .add_gateway("genuine", "rogue", "c1", genuine_tls, wan, 2)
                .await;

            let before = world.scrape().await;
            let refused = client::connect(&rogue, impostor, ECHO)
                .await
                .expect("an answer");
            assert_eq!(
                refused.status, 502,
                "the impostor got through: {}",
                refused.body
            );
            let after = world.scrape().await;
            let unauthenticated = |scrapes: &BTreeMap<String, Scrape>| -> f64 {
                ["c3g1", "c3g2"]
                    .iter()
                    .filter_map(|name| scrapes.get(*name))
                    .map(|s| {
                        s.sum(
                            "strait_tunnel_requests_refused_total",
                            &[("reason", "unauthenticated")],
                        )
                    })
                    .sum()
            };
            let refusals = unauthenticated(&after) - unauthenticated(&before);
            assert!(
                refusals >= 1.0,
                "c3's gateways refused the handshake ({refusals})"
            );
            assert_eq!(
                opened_delta(&before, &after, &["c3g1", "c3g2"], "inbound"),
                0.0
            );
            assert_eq!(world.pod("c3-pod1").accepted(), 0, "nothing was dialled");

            let greeting = client::once(&rogue, genuine, ECHO)
                .await
                .expect("the cluster set's own certificate is accepted from the same place");
            assert_eq!(greeting.name, "c3-pod1");
            assert!(gateways_of("c3").contains(&greeting.peer), "{greeting:?}");
        },
    );
}

/// The transparent path, direct: an unmodified c1 pod dials the
/// ClusterSetIP of a service of c2 (same network); an iptables DNAT rule in
/// its namespace stands in for kube-proxy and sends it to c1g1's import
/// port (from `strait imports --output json`). c2's pod answers, dialled by
/// c1g1 itself. See [`netns::transparent::direct`].
#[test]
fn transparent_clustersetip_goes_direct_on_the_own_network() {
    netns::run_needing(
        "transparent_clustersetip_goes_direct_on_the_own_network",
        &["iptables"],
        transparent::direct,
    );
}

/// The transparent path, tunnelled: the ClusterSetIP of a service of c3
/// (net-b), DNATed by the kube-proxy stand-in (an iptables rule in the
/// client's namespace) to c1g1's import port, reaches c3's pod through c3's
/// gateways, not the pod of the same address on net-a. See
/// [`netns::transparent::tunnelled`].
#[test]
fn transparent_clustersetip_goes_through_the_tunnel_to_another_network() {
    netns::run_needing(
        "transparent_clustersetip_goes_through_the_tunnel_to_another_network",
        &["iptables"],
        transparent::tunnelled,
    );
}

/// The transparent path and the per-port rule, both directions: through
/// ClusterSetIP ports DNATed by an iptables rule standing in for kube-proxy,
/// a port only c3 declares reaches only c3's pod and a port only c1
/// declares only c1's, from c1 and from c3, although each client's local
/// pod listens on both target ports. See [`netns::transparent::per_port`].
#[test]
fn transparent_clustersetip_port_reaches_only_the_clusters_that_declare_it() {
    netns::run_needing(
        "transparent_clustersetip_port_reaches_only_the_clusters_that_declare_it",
        &["iptables"],
        transparent::per_port,
    );
}

/// The transparent path across a replica failure: the ClusterSetIPs are
/// DNATed (an iptables rule standing in for kube-proxy) to c1g1; c1g1 is
/// killed and the rules are replaced by ones to c1g2, as kube-proxy would
/// when c1g1's endpoint goes unready; new connections succeed through c1g2.
/// See [`netns::transparent::failover`].
#[test]
fn transparent_clustersetip_moves_to_the_other_replica_with_the_rule() {
    netns::run_needing(
        "transparent_clustersetip_moves_to_the_other_replica_with_the_rule",
        &["iptables"],
        transparent::failover,
    );
}

/// The transparent path with a real client: `curl http://VIP/` in c1's pod,
/// no proxy settings, the VIP DNATed to c1g1's import port by an iptables
/// rule standing in for kube-proxy, gets `200` from an HTTP responder on
/// net-b. See [`netns::transparent::curl`].
#[test]
fn transparent_plain_curl_gets_an_http_answer_from_another_network() {
    netns::run_needing(
        "transparent_plain_curl_gets_an_http_answer_from_another_network",
        &["iptables", "curl"],
        transparent::curl,
    );
}

/// By name: an unmodified client in c1's pod that knows only
/// `cart.shop.svc.clusterset.local` reaches cart on net-b. Its namespace's
/// resolv.conf names only c1g1, whose DNS responder answers on port 53 (the
/// stand-in for CoreDNS forwarding `clusterset.local` to
/// `cluster-edge-dns`): `getent hosts` gets the VIP of c1's ServiceImport
/// and fails for a name nobody exports; `curl http://cart…/`, the VIP
/// DNATed to c1g1's import port by an iptables rule standing in for
/// kube-proxy, gets `200` from c3's pod; `dig SRV` names port 80. See
/// [`netns::by_name::by_name`].
#[test]
fn by_name_an_unmodified_client_resolves_and_reaches_another_network() {
    netns::run_needing(
        "by_name_an_unmodified_client_resolves_and_reaches_another_network",
        &["iptables", "curl", "getent", "dig"],
        by_name::by_name,
    );
}

/// A headless service with pods on c2 (the client's network) and c3
/// (another): each per-pod name, resolved by the system resolver through
/// c1g1's DNS, gives an address that connects to that very pod: pg-0's
/// own, and for c3's pods their addresses on this side, DNATed to c1g1's
/// per-pod import ports by kube-proxy's stand-in. See
/// [`netns::headless::per_pod_names`].
#[test]
fn headless_per_pod_names_reach_that_pod_on_either_network() {
    netns::run_needing(
        "headless_per_pod_names_reach_that_pod_on_either_network",
        &["iptables", "getent", "dig"],
        netns::headless::per_pod_names,
    );
}

/// The harness itself: a test that panics with a whole world running
/// leaves no namespace and no gateway process behind.
#[test]
fn the_harness_removes_everything_when_a_test_panics() {
    netns::run(
        "the_harness_removes_everything_when_a_test_panics",
        false,
        |env| async move {
            let prefix = env.another_prefix();
            let made: Arc<Mutex<(Vec<String>, Vec<u32>)>> = Arc::default();
            let record = made.clone();
            let failing = tokio::spawn(async move {
                let options = Options {
                    may_keep: false,
                    ..Options::services(|_| Vec::new())
                };
                let mut world = World::try_start(&prefix, options)
                    .await
                    .expect("world starts");
                world.start_pod("c1", 1);
                let pids = world.gateways.values().filter_map(|g| g.pid()).collect();
                *record.lock().expect("record") = (world.topology.namespaces().to_vec(), pids);
                panic!("deliberate panic: the harness must clean up behind it");
            });
            let outcome = failing.await;
            assert!(
                outcome.is_err_and(|e| e.is_panic()),
                "the inner test panicked"
            );
            let (namespaces, pids) = made.lock().expect("record").clone();
            assert_eq!(
                namespaces.len(),
                17,
                "hub, 8 pods and 8 gateways: {namespaces:?}"
            );
            assert_eq!(pids.len(), 8, "8 gateway processes");
            let existing = sys::namespaces().expect("ip netns list");
            let left: Vec<&String> = namespaces
                .iter()
                .filter(|ns| existing.contains(ns))
                .collect();
            assert!(left.is_empty(), "namespaces left behind: {left:?}");
            for pid in pids {
                assert!(
                    !std::path::Path::new(&format!("/proc/{pid}")).exists(),
                    "gateway process {pid} is still there"
                );
            }
        },
    );
}
