//! A headless service with pods on two networks, reached by per-pod name
//! from an unmodified client (KEP-1645's
//! `<hostname>.<cluster-id>.<svc>.<ns>.svc.clusterset.local`).
//!
//! c2 (net-a, the client's network) runs `pg-0`; c3 (net-b) runs `pg-1`
//! at 10.10.0.12, which on net-a is c1-pod2's address, and `pg-2`. The
//! client's resolv.conf names c1g1 only ([`Resolver`]). c1g1 answers pg-0
//! with its own address (same network), and pg-1 and pg-2 with their
//! addresses on this side, taken from `imports.podAddresses` (a file
//! setup's stand-in for the per-pod derived Services' ClusterIPs), never
//! with their own. kube-proxy's stand-in ([`KubeProxy`]) sends each such
//! address, at the pod's own port, to c1g1's import port for that pod, as
//! `strait imports` prints the per-pod derived Service.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use crate::support::{headless_yaml, per_pod_services, strait_imports};

use super::Env;
use super::backend::POD_PORT;
use super::by_name::{Resolver, dig_short, exec_in, text};
use super::client::{self, Greeting};
use super::scenario::*;
use super::transparent::{self, IMPORT_RANGE, KubeProxy, replica};
use super::world::{Options, World};

/// The addresses c1's gateways give remote pods (inside the CIDR
/// [`KubeProxy`] routes to the pod interface).
const POD_ADDRESSES: &str = "10.96.7.0/24";

/// The headless service's port: 5432 on the pods' [`POD_PORT`].
const PG: (&str, u16, u16) = ("pg", 5432, POD_PORT);

fn pod_name(hostname: &str, cluster: &str) -> String {
    format!("{hostname}.{cluster}.pg.db.svc.clusterset.local")
}

/// Each per-pod name resolves (system resolver) to an address that
/// connects to that very pod; see the module docs.
pub async fn per_pod_names(env: Env) {
    let settings = format!(
        "{}  podAddresses: [{POD_ADDRESSES}]\nlisteners:\n  dns: 0.0.0.0:53\n",
        transparent::SETTINGS
    );
    let mut world = World::start(
        &env,
        Options {
            settings: Box::leak(settings.into_boxed_str()),
            ..Options::services(|_| Vec::new())
        },
    )
    .await;
    for (cluster, n) in [("c2", 1), ("c3", 1), ("c3", 2), ("c1", 2)] {
        world.start_pod(cluster, n);
    }
    // The headless service, in a file of its own in each cluster folder.
    for (cluster, pods) in [
        ("c2", vec![("pg-0", World::pod_ip("c2", 1))]),
        (
            "c3",
            vec![
                ("pg-1", World::pod_ip("c3", 1)),
                ("pg-2", World::pod_ip("c3", 2)),
            ],
        ),
    ] {
        let folder = world.config.join("clusters").join(cluster);
        let yaml = headless_yaml("db", "pg", PG, &pods);
        std::fs::write(folder.join(".pg.yaml.tmp"), yaml).expect("write the service");
        std::fs::rename(folder.join(".pg.yaml.tmp"), folder.join("pg.yaml"))
            .expect("rename the service");
    }

    let client = world.ns("c1p1");
    let dns = gw("c1", 1);
    let _resolver = Resolver::point(&client, dns);
    // c1g1 answers once it has reloaded the folders: three pods by name.
    let started = Instant::now();
    loop {
        let answer = dig_short(&client, dns, "A", "pg.db.svc.clusterset.local").await;
        if answer.len() == 3 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "c1g1 answers {answer:?} for the service 10 s after it was written"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let printed = per_pod_services(&strait_imports(&world.config, "c1"), "pg");
    assert_eq!(
        printed.keys().map(String::as_str).collect::<Vec<_>>(),
        ["pg-1", "pg-2"],
        "one per-pod derived Service per pod on another network: {printed:?}"
    );
    let range: ipnet::IpNet = POD_ADDRESSES.parse().expect("a range");
    let mut proxy = KubeProxy::new(&world, "c1p1");
    let mut addresses = BTreeMap::new();
    for (pod, service) in &printed {
        let ip = service
            .cluster_ip
            .unwrap_or_else(|| panic!("{pod} has an address: {printed:?}"));
        assert!(range.contains(&ip), "{pod}: {ip}");
        assert_eq!(service.port, POD_PORT, "{pod} exposes the pod's own port");
        let import = service.import_port;
        assert!(IMPORT_RANGE.contains(&import), "{pod}: {import}");
        proxy.forward(SocketAddr::new(ip, POD_PORT), replica("c1", 1, import));
        addresses.insert(pod.as_str(), ip);
    }

    // The system resolver, and the connection to what it gave.
    let expected = [
        ("pg-0", "c2", "c2-pod1", None),
        ("pg-1", "c3", "c3-pod1", Some(addresses["pg-1"])),
        ("pg-2", "c3", "c3-pod2", Some(addresses["pg-2"])),
    ];
    for (hostname, cluster, pod, through) in expected {
        let name = pod_name(hostname, cluster);
        let found = exec_in(&client, "getent", &["hosts", &name]).await;
        assert!(
            found.status.success(),
            "getent hosts {name}: {}",
            text(&found)
        );
        let printed = String::from_utf8_lossy(&found.stdout).into_owned();
        let address: IpAddr = printed
            .split_whitespace()
            .next()
            .and_then(|a| a.parse().ok())
            .unwrap_or_else(|| panic!("no address for {name}: {printed}"));
        match through {
            // Same network: the pod's own address, dialled directly.
            None => {
                assert_eq!(address, World::pod_ip(cluster, 1), "{name}");
                let greeting = client::direct(&client, SocketAddr::new(address, POD_PORT))
                    .await
                    .unwrap_or_else(|e| panic!("{name} at {address}: {e}"));
                assert_eq!(
                    greeting,
                    Greeting {
                        name: pod.to_owned(),
                        peer: World::pod_ip("c1", 1),
                    }
                );
            }
            // Another network: its address on this side, through c1g1
            // and a c3 gateway, never its own (pg-1's is c1-pod2's here).
            Some(ip) => {
                assert_eq!(address, ip, "{name}");
                for _ in 0..3 {
                    let greeting = client::plain(&client, SocketAddr::new(address, POD_PORT))
                        .await
                        .unwrap_or_else(|e| panic!("{name} at {address}: {e}"));
                    assert_eq!(greeting.name, pod, "{name} reached another pod");
                    assert!(
                        gateways_of("c3").contains(&greeting.peer),
                        "{name}: dialled by {}",
                        greeting.peer
                    );
                }
                assert_eq!(proxy.hits(SocketAddr::new(ip, POD_PORT)), 3, "{name}");
            }
        }
    }
    assert_eq!(world.pod("c1-pod2").accepted(), 0, "pg-1's own address");
    assert_eq!(world.pod("c3-pod1").accepted(), 3);
    assert_eq!(world.pod("c3-pod2").accepted(), 3);

    // SRV names every pod, on the pods' own port.
    let srv = dig_short(&client, dns, "SRV", "_pg._tcp.pg.db.svc.clusterset.local").await;
    let mut targets: Vec<String> = srv
        .iter()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            (fields.get(2) == Some(&POD_PORT.to_string().as_str()))
                .then(|| fields.get(3).map(|t| (*t).to_owned()))
                .flatten()
        })
        .collect();
    targets.sort();
    assert_eq!(
        targets,
        [
            format!("{}.", pod_name("pg-0", "c2")),
            format!("{}.", pod_name("pg-1", "c3")),
            format!("{}.", pod_name("pg-2", "c3")),
        ],
        "{srv:?}"
    );
}
