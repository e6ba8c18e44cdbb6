//! Active health checks through the tunnel (`health` in `gateway.yaml`),
//! on real gateway processes in network namespaces: c3's pod (net-b) is
//! cut off by a firewall rule in its own namespace while every cluster
//! still lists it Ready, and c1 stops sending it connections within the
//! detection time, then sends them again once it answers.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use crate::netns;
use crate::netns::backend::POD_PORT;
use crate::netns::client;
use crate::netns::scenario::{EARLY, ECHO, LATE, TCP_42, service};
use crate::netns::sys;
use crate::netns::world::{Options, World};

/// Each gateway probes each backend it tunnels to every 300 ms; two
/// missed probes in a row (300 ms each) take it out.
const HEALTH: &str = "health:\n  interval: 300ms\n  timeout: 300ms\n  unhealthyThreshold: 2\n  healthyThreshold: 1\n  maxProbesPerSecond: 20\n";

/// The pods that answered `count` connections from c1's pod.
async fn answered(world: &World, count: usize) -> Vec<String> {
    client::many(&world.ns("c1p1"), world.connect_address("c1"), ECHO, count)
        .await
        .expect("every connection succeeds")
        .into_iter()
        .map(|greeting| greeting.name)
        .collect()
}

#[test]
fn a_backend_cut_off_while_still_ready_leaves_rotation_and_returns() {
    netns::run(
        "a_backend_cut_off_while_still_ready_leaves_rotation_and_returns",
        true,
        |env| async move {
            let mut world = World::start(
                &env,
                Options {
                    settings: HEALTH,
                    ..Options::services(|id| match id {
                        "c3" => vec![service("echo", TCP_42, EARLY, &[("c3", 1)])],
                        "c4" => vec![service("echo", TCP_42, LATE, &[("c4", 1)])],
                        _ => Vec::new(),
                    })
                },
            )
            .await;
            world.start_pod("c3", 1);
            world.start_pod("c4", 1);
            let both: BTreeSet<String> = ["c3-pod1", "c4-pod1"].map(str::to_owned).into();
            let seen: BTreeSet<String> = answered(&world, 30).await.into_iter().collect();
            assert_eq!(seen, both, "both pods answer at first");

            // The probes' cost, counted where they land: every gateway of
            // another network (c1's, c2's, c4's) probes c3's pod at most
            // once per 300 ms, and does probe it.
            let probing = world
                .gateways
                .keys()
                .filter(|name| !name.starts_with("c3"))
                .count();
            let window = Duration::from_secs(3);
            let before = world.pod("c3-pod1").accepted();
            tokio::time::sleep(window).await;
            let probes = world.pod("c3-pod1").accepted() - before;
            let rounds = usize::try_from(window.as_millis() / 300).unwrap_or(0) + 1;
            assert!(
                (probing..=probing * rounds).contains(&probes),
                "c3's pod took {probes} probes in {window:?} from {probing} gateways, at most {} allowed",
                probing * rounds
            );

            // Cut off: c3's gateways can no longer reach it; c3 still lists it Ready.
            let pod_ns = world.ns("c3p1");
            let port = POD_PORT.to_string();
            let rule = ["INPUT", "-p", "tcp", "--dport", port.as_str(), "-j", "DROP"];
            let mut add = vec!["-I"];
            add.extend(rule);
            sys::iptables(&pod_ns, &add).unwrap_or_else(|e| panic!("{e}"));
            let cut = Instant::now();
            // Out after two missed probes: 2 × 300 ms, a timeout and a
            // round's spacing, given a few seconds on a busy machine.
            loop {
                let down = world.scrape().await["c1g1"].sum("strait_health_checks_down", &[]);
                if down >= 1.0 {
                    break;
                }
                assert!(
                    cut.elapsed() < Duration::from_secs(5),
                    "c1g1 holds c3's pod out of rotation"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            println!("c3's pod out of rotation {:?} after the cut", cut.elapsed());
            let started = Instant::now();
            let got = answered(&world, 20).await;
            assert!(
                got.iter().all(|name| name == "c4-pod1"),
                "only c4's pod, {:?} after the cut: {got:?}",
                cut.elapsed()
            );
            assert!(
                started.elapsed() < Duration::from_secs(2),
                "no connection waited on the cut pod ({:?} for 20)",
                started.elapsed()
            );

            // Reachable again: back in rotation after one answered probe.
            let mut delete = vec!["-D"];
            delete.extend(rule);
            sys::iptables(&pod_ns, &delete).unwrap_or_else(|e| panic!("{e}"));
            let healed = Instant::now();
            loop {
                if answered(&world, 10)
                    .await
                    .iter()
                    .any(|name| name == "c3-pod1")
                {
                    break;
                }
                assert!(
                    healed.elapsed() < Duration::from_secs(5),
                    "c3's pod back in rotation once it answers"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        },
    );
}
