//! Resilience scenarios, each run once per tunnel transport (`h2`,
//! `quic`) by a test of tests/multinetwork.rs: a replica killed during
//! traffic, a killed replica restarted, and 1% packet loss on the WAN.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::client::{self, Held, Pinger, Traffic};
use super::scenario::*;
use super::world::{Options, World};
use super::{Env, loud, sys};

/// Killing replica 1 of net-b's only gateway during traffic: new connections
/// succeed through replica 2 within 2 s (the measured time is printed), and
/// connections already carried by replica 2 keep working; those carried by
/// the killed replica break (the control that the kill was real).
pub async fn failover(env: Env, transport: &'static str) {
    let mut world = World::start(
        &env,
        Options {
            stopped: &["c3g1"],
            transport: Some(transport),
            ..Options::services(|id| match id {
                "c3" => vec![service("echo", TCP_42, EARLY, &[("c3", 1)])],
                _ => Vec::new(),
            })
        },
    )
    .await;
    world.start_pod("c3", 1);
    let (client, gateway) = (world.ns("c1p1"), world.connect_address("c1"));
    let (first, second) = (gw("c3", 1), gw("c3", 2));

    // While replica 1 is down, connections to net-b ride on replica 2.
    let mut on_second = Vec::new();
    for _ in 0..3 {
        let held = Held::open(&client, gateway, ECHO)
            .await
            .expect("through c3g2");
        assert_eq!(held.greeting.peer, second);
        on_second.push(held);
    }
    // Replica 1 starts; being listed first, new connections move to it.
    world
        .gateway_mut("c3g1")
        .start()
        .await
        .expect("c3g1 starts");
    let moved = until_peer(&client, gateway, first, Duration::from_secs(40)).await;
    assert!(
        moved.is_some(),
        "new connections never moved to the started c3g1"
    );
    let mut on_first = Vec::new();
    for _ in 0..30 {
        let held = Held::open(&client, gateway, ECHO)
            .await
            .expect("through c3");
        if held.greeting.peer == first {
            on_first.push(held);
        } else {
            on_second.push(held);
        }
        if on_first.len() == 3 {
            break;
        }
    }
    assert_eq!(on_first.len(), 3, "connections through c3g1");

    let pings_second = Pinger::start(on_second, Duration::from_millis(50));
    let pings_first = Pinger::start(on_first, Duration::from_millis(50));
    let traffic = Traffic::start(&client, gateway, ECHO, Duration::from_millis(10));
    tokio::time::sleep(Duration::from_secs(1)).await;
    let killed_at = Instant::now();
    world.gateway_mut("c3g1").kill();
    tokio::time::sleep(Duration::from_secs(4)).await;
    let samples = traffic.stop().await;
    let second_held = pings_second.stop().await;
    let first_held = pings_first.stop().await;

    let steady: Vec<_> = samples.iter().filter(|s| s.finished < killed_at).collect();
    assert!(steady.len() > 20, "traffic flowed before the kill");
    for sample in &steady {
        let greeting = sample.result.as_ref().expect("no failure before the kill");
        assert_eq!(
            greeting.peer, first,
            "before the kill, c3g1 carries new connections"
        );
    }
    let after: Vec<_> = samples.iter().filter(|s| s.started >= killed_at).collect();
    let failover = after
        .iter()
        .find(|s| s.result.is_ok())
        .map(|s| s.finished - killed_at);
    let ending: Vec<_> = samples.iter().filter(|s| s.finished >= killed_at).collect();
    let failed: Vec<&String> = ending
        .iter()
        .filter_map(|s| s.result.as_ref().err())
        .collect();
    loud(&format!(
        "FAILOVER ({transport}): first new connection through c3g2 {} after SIGKILL of c3g1; \
         {} of {} connections ending after the kill failed{}",
        failover.map_or("never".to_owned(), |f| format!(
            "{:.1} ms",
            f.as_secs_f64() * 1000.0
        )),
        failed.len(),
        ending.len(),
        failed
            .first()
            .map_or(String::new(), |e| format!(" (first: {e})"))
    ));
    let failover = failover.expect("a new connection succeeded after the kill");
    assert!(
        after.len() > 50,
        "traffic flowed after the kill: {}",
        after.len()
    );
    assert!(
        failover <= Duration::from_secs(2),
        "failover took {failover:?}"
    );
    for sample in &after {
        match &sample.result {
            Ok(greeting) => assert_eq!(greeting.peer, second, "only c3g2 is alive"),
            Err(error) => assert!(
                sample.started < killed_at + Duration::from_secs(2),
                "a new connection failed {:?} after the kill: {error}",
                sample.started - killed_at
            ),
        }
    }
    for (mut held, errors) in second_held {
        assert!(errors.is_empty(), "a connection on c3g2 broke: {errors:?}");
        held.ping()
            .await
            .expect("a connection on c3g2 still echoes");
    }
    assert!(
        first_held.iter().all(|(_, errors)| !errors.is_empty()),
        "connections carried by the killed c3g1 broke"
    );
}

/// A killed replica, once restarted, carries new connections again: while
/// it is down everything goes through replica 2; after the restart c1's
/// gateway dials it again when its backoff for that peer ends. (How fast
/// traffic leaves the killed replica is the failover test's business; here
/// it may take up to 45 s, and the time is printed.)
pub async fn restart(env: Env, transport: &'static str) {
    let mut world = World::start(
        &env,
        Options {
            transport: Some(transport),
            ..Options::services(|id| match id {
                "c3" => vec![service("echo", TCP_42, EARLY, &[("c3", 1)])],
                _ => Vec::new(),
            })
        },
    )
    .await;
    world.start_pod("c3", 1);
    let (client, gateway) = (world.ns("c1p1"), world.connect_address("c1"));
    let (first, second) = (gw("c3", 1), gw("c3", 2));
    let warm = client::many(&client, gateway, ECHO, 5)
        .await
        .expect("warm-up");
    assert!(warm.iter().all(|g| g.peer == first), "{warm:?}");

    world.gateway_mut("c3g1").kill();
    let moved = until_peer(&client, gateway, second, Duration::from_secs(45))
        .await
        .expect("after the kill, connections go through c3g2 within 45 s");
    let twenty = Instant::now();
    let down = client::many(&client, gateway, ECHO, 20)
        .await
        .expect("through c3g2");
    let twenty = twenty.elapsed();
    assert!(down.iter().all(|g| g.peer == second), "{:?}", tally(&down));
    tokio::time::sleep(Duration::from_secs(2)).await;
    let down = client::many(&client, gateway, ECHO, 5)
        .await
        .expect("through c3g2");
    assert!(down.iter().all(|g| g.peer == second), "{:?}", tally(&down));

    world
        .gateway_mut("c3g1")
        .start()
        .await
        .expect("c3g1 restarts");
    let back = until_peer(&client, gateway, first, Duration::from_secs(40))
        .await
        .expect("the restarted c3g1 carries connections again within 40 s");
    loud(&format!(
        "RESTART ({transport}): after SIGKILL of c3g1, connections went through c3g2 after \
         {:.2} s, the next 20 took {:.2} s; the restarted c3g1 carried a new connection \
         {:.2} s after it was ready",
        moved.as_secs_f64(),
        twenty.as_secs_f64(),
        back.as_secs_f64()
    ));
    let again = client::many(&client, gateway, ECHO, 10)
        .await
        .expect("after restart");
    assert!(again.iter().all(|g| g.peer == first), "{:?}", tally(&again));
}

/// 1% random packet loss on the WAN (an iptables `statistic` rule on the
/// WAN interface of every gateway namespace, with segmentation offload
/// capped so a packet is one segment): 200 transfers of 1 MiB through the
/// tunnel all come back byte-exact. The control: the rules did drop about
/// 1% of the WAN packets.
pub async fn loss(env: Env, transport: &'static str) {
    let mut world = World::start(
        &env,
        Options {
            transport: Some(transport),
            ..Options::services(|id| match id {
                "c3" => vec![service("echo", TCP_42, EARLY, &[("c3", 1), ("c3", 2)])],
                _ => Vec::new(),
            })
        },
    )
    .await;
    world.start_pod("c3", 1);
    world.start_pod("c3", 2);
    let namespaces: Vec<String> = ALL_GATEWAYS.iter().map(|g| world.ns(g)).collect();
    for ns in &namespaces {
        sys::ip(&["-n", ns, "link", "set", "wan0", "gso_max_segs", "1"]).expect("gso off");
        sys::iptables(ns, &["-A", "INPUT", "-i", "wan0"]).expect("counting rule");
        let drop = [
            "-A",
            "INPUT",
            "-i",
            "wan0",
            "-m",
            "statistic",
            "--mode",
            "random",
            "--probability",
            "0.01",
            "-j",
            "DROP",
        ];
        sys::iptables(ns, &drop).expect("drop rule");
    }
    let (client, gateway) = (world.ns("c1p1"), world.connect_address("c1"));
    let before = world.gateway("c1g1").metrics().await.expect("c1g1 metrics");
    let started = Instant::now();
    let limit = Arc::new(tokio::sync::Semaphore::new(25));
    let failures = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for index in 0..200u32 {
        let (limit, failures, client) = (limit.clone(), failures.clone(), client.clone());
        tasks.push(tokio::spawn(async move {
            let _permit = limit.acquire().await.expect("semaphore");
            let sent = payload(index);
            let outcome = match client::open(&client, gateway, ECHO).await {
                Ok((_, stream)) => client::echo(stream, sent.clone()).await,
                Err(error) => Err(error),
            };
            let problem = match outcome {
                Ok(received) if received == sent => return,
                Ok(received) => {
                    format!("{} bytes back, not the {} sent", received.len(), sent.len())
                }
                Err(error) => error,
            };
            if let Ok(mut failures) = failures.lock() {
                failures.push(format!("transfer {index}: {problem}"));
            }
        }));
    }
    for task in tasks {
        task.await.expect("transfer task");
    }
    let elapsed = started.elapsed();
    let failures = failures.lock().expect("failures").clone();
    assert!(
        failures.is_empty(),
        "{} transfers failed: {failures:?}",
        failures.len()
    );

    let after = world.gateway("c1g1").metrics().await.expect("c1g1 metrics");
    let labels = [("path", "tunnel"), ("transport", transport)];
    let opened = "strait_connections_opened_total";
    let carried = after.sum(opened, &labels) - before.sum(opened, &labels);
    assert_eq!(
        carried, 200.0,
        "c1g1 tunnelled every transfer over {transport}"
    );

    let (mut all, mut dropped, mut bytes) = (0, 0, 0);
    for ns in &namespaces {
        let (a, d, b) = wan_counters(ns);
        (all, dropped, bytes) = (all + a, dropped + d, bytes + b);
    }
    let ratio = dropped as f64 / all.max(1) as f64;
    loud(&format!(
        "LOSS ({transport}): 200 × 1 MiB echoed byte-exact in {:.1} s; the WAN dropped {dropped} of {all} \
         packets ({:.2}%, average {} bytes)",
        elapsed.as_secs_f64(),
        ratio * 100.0,
        bytes / all.max(1)
    ));
    assert!(
        bytes >= 400 * 1024 * 1024,
        "the transfers crossed the WAN: {bytes} bytes"
    );
    assert!(
        bytes / all.max(1) <= 1600,
        "WAN packets are single segments"
    );
    assert!(
        (0.005..0.02).contains(&ratio),
        "about 1% of WAN packets dropped: {ratio}"
    );
}
