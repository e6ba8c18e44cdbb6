//! Private clusters: the lab links every pair by feed (`strait link`, each
//! cluster's peer document applied in the other) and walls each node and
//! its pods off from the other clusters' API servers (tests/lab/lab.sh
//! `wall`). Here: what that leaves each cluster, and a cluster moving to a
//! link through the API server and back under traffic, its token rotated
//! on the way, as docs/kubernetes.md says.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use super::link::{imported_from, strait};
use super::{Lab, wait_until};

/// c3's gateway Service's load-balancer address, and c1's (tests/lab/README.md).
const C1_GATEWAY: &str = "172.31.100.11:15008";
const C3_GATEWAY: &str = "172.31.100.13:15008";

/// `cluster`'s peer document, as `strait link export` prints it from
/// what the cluster says of itself (its gateway Service's address, the CA
/// naming it in the gateway's TLS Secret).
fn peer_document(lab: &Lab, cluster: &str) -> String {
    let kubeconfig = lab.kubeconfig(cluster);
    strait(&[
        "link",
        "export",
        "--local-kubeconfig",
        kubeconfig.to_str().expect("path"),
    ])
    .unwrap_or_else(|e| panic!("strait link export in {cluster}: {e}"))
}

/// `strait VERB [--api] --kubeconfig REMOTE --local-kubeconfig LOCAL`
/// (and `--apply` to link).
fn link(lab: &Lab, local: &str, remote: &str, verb: &str, api: bool) -> String {
    let (remote, local) = (lab.kubeconfig(remote), lab.kubeconfig(local));
    let mut args = vec![
        verb,
        "--kubeconfig",
        remote.to_str().expect("path"),
        "--local-kubeconfig",
        local.to_str().expect("path"),
    ];
    if api {
        args.push("--api");
    }
    if verb == "link" {
        args.push("--apply");
    }
    strait(&args).unwrap_or_else(|e| panic!("strait {args:?}: {e}"))
}

fn import_ips(lab: &Lab, cluster: &str, namespace: &str, name: &str) -> String {
    lab.try_kubectl(
        cluster,
        &[
            "-n",
            namespace,
            "get",
            "serviceimport",
            name,
            "-o",
            "jsonpath={.spec.ips}",
        ],
    )
    .unwrap_or_default()
}

/// The remote-cluster Secrets of `cluster`: (name, whether it holds a
/// kubeconfig).
fn remote_records(lab: &Lab, cluster: &str) -> Vec<(String, bool)> {
    let listed = lab.kubectl(
        cluster,
        &[
            "-n",
            "strait-remotes",
            "get",
            "secrets",
            "-l",
            "strait.dev/remote-cluster=true",
            "-o",
            "json",
        ],
    );
    let listed: serde_json::Value = serde_json::from_str(&listed).expect("a list as JSON");
    listed["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|secret| {
            (
                secret["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                secret["data"].get("kubeconfig").is_some(),
            )
        })
        .collect()
}

/// As the lab starts: every cluster holds a peer document for each other
/// and no credential for any, a pod of c1 cannot reach c3's API server (it
/// reaches its own), and a service c3 exports reaches c1's pods through
/// the feed and the tunnel.
pub fn private_clusters_reach_each_other_by_feed_alone(lab: &Lab) {
    for cluster in super::CLUSTERS {
        let records = remote_records(lab, cluster);
        assert_eq!(records.len(), 2, "{cluster}: {records:?}");
        assert!(
            records
                .iter()
                .all(|(name, kubeconfig)| name.ends_with("-peer") && !kubeconfig),
            "{cluster} holds peer documents and no kubeconfig: {records:?}"
        );
    }
    let c3_document = peer_document(lab, "c3");
    for said in [
        "cluster: c3",
        "network: net-b",
        C3_GATEWAY,
        "BEGIN CERTIFICATE",
    ] {
        assert!(c3_document.contains(said), "{said} in:\n{c3_document}");
    }
    assert!(
        peer_document(lab, "c1").contains(C1_GATEWAY),
        "c1's document names its gateway"
    );

    let ns = "private";
    lab.namespace(ns);
    let client = lab.client_pod("c1", ns);
    let reach = |port: &str| {
        lab.exec(
            "c1",
            ns,
            client,
            &[
                "curl",
                "-sk",
                "-m",
                "3",
                &format!("https://10.250.0.1:{port}/version"),
            ],
        )
    };
    assert!(
        reach("6443").is_err(),
        "a c1 pod cannot reach c3's API server"
    );
    assert!(
        reach("6441").is_ok(),
        "it reaches its own: {:?}",
        reach("6441")
    );
    lab.echo_service("c3", ns, "fed", 1, &[80]);
    wait_until("c1 imports c3's fed from c3's feed", 180, || {
        imported_from(lab, "c1", ns, "fed") == "c3"
    });
    let url = format!("http://fed.{ns}.svc.clusterset.local/");
    wait_until("c1's pod reaches c3's fed through the tunnel", 120, || {
        lab.curl("c1", ns, client, &url).is_ok()
    });
    status_agrees_with_the_api(lab);
}

/// `strait status --output json`, run in a c1 gateway pod's network
/// namespace (the admin port answers loopback only), against what the API
/// servers hold: c2 and c3 read from their feeds and synced, each with the
/// network its ClusterProperty names and its exported services, no more
/// than its ServiceExports, in every replica; and the Lease holder's
/// imports no more than c1's ServiceImports (another controller's are not
/// Strait's; the other replica plans none).
fn status_agrees_with_the_api(lab: &Lab) {
    let pids: Vec<String> = lab
        .pods("c1", "strait-system", "cluster-edge-")
        .iter()
        .map(|pod| lab.pod_pid("c1", "strait-system", pod).to_string())
        .collect();
    assert!(!pids.is_empty(), "c1 runs gateway pods");
    let count = |cluster: &str, kind: &str| {
        lab.kubectl(cluster, &["get", kind, "-A", "-o", "name"])
            .lines()
            .count()
    };
    let mut last = String::new();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    // Each replica answers for itself; only the Lease holder plans imports.
    let mut agrees_in = |pid: &str| {
        let output = std::process::Command::new("nsenter")
            .args([
                "-t",
                pid,
                "-n",
                env!("CARGO_BIN_EXE_strait"),
                "status",
                "--output",
                "json",
            ])
            .output()
            .expect("nsenter runs");
        last = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        let Ok(view) = serde_json::from_slice::<serde_json::Value>(&output.stdout) else {
            return (false, false);
        };
        let cluster = |id: &str| {
            view["clusters"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|c| c["id"] == id)
                .cloned()
                .unwrap_or_default()
        };
        let agrees = |id: &str, read_from: &str| {
            let seen = cluster(id);
            let network = lab.field(
                id,
                "default",
                &["clusterproperty", "network.clusterset.k8s.io"],
                "{.spec.value}",
            );
            // Invalid exports (and, from a feed, those not admitting c1)
            // are not counted: at most the cluster's ServiceExports.
            let exports = count(id, "serviceexports");
            seen["readFrom"] == read_from
                && seen["state"] == "synced"
                && seen["network"] == network.as_str()
                && seen["exported"]
                    .as_u64()
                    .is_some_and(|n| n as usize <= exports)
        };
        let imports = count("c1", "serviceimports");
        let leader = view["imports"]["leader"] == true;
        let clusters = view["cluster"] == "c1"
            && agrees("c1", "local")
            && agrees("c2", "feed")
            && agrees("c3", "feed");
        let imported = !leader
            || view["imports"]["total"]
                .as_u64()
                .is_some_and(|n| n >= 1 && n as usize <= imports);
        (clusters && imported, leader)
    };
    let mut agrees = || {
        let views: Vec<(bool, bool)> = pids.iter().map(|pid| agrees_in(pid)).collect();
        views.iter().all(|(agrees, _)| *agrees) && views.iter().any(|(_, leader)| *leader)
    };
    while !agrees() {
        assert!(
            std::time::Instant::now() < deadline,
            "strait status did not agree with the API servers within 60 s; it said:\n{last}"
        );
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
}

/// c1 moves from c3's feed to a link through c3's API server and back
/// while one of its pods keeps asking for a c3 service, as docs/kubernetes.md
/// says (the new record first, then the old one removed): the link made,
/// the peer document removed (a set mixing both kinds: c3 still follows
/// c1's feed), c1's token rotated (the anchor deleted, which makes the real
/// API server refuse it, then linked again), the feed back, the link
/// removed. No request fails, the service keeps its ClusterSetIP, and a
/// service c3 exports at each step reaches c1 by the record of that step.
pub fn a_cluster_moves_to_an_api_link_and_back_under_traffic(lab: &Lab) {
    let ns = "moving";
    lab.namespace(ns);
    lab.echo_service("c3", ns, "steady", 1, &[80]);
    let client = lab.client_pod("c1", ns);
    let url = format!("http://steady.{ns}.svc.clusterset.local/");
    wait_until("c1's pod is answered", 180, || {
        lab.curl("c1", ns, client, &url).is_ok()
    });
    let ips = import_ips(lab, "c1", ns, "steady");
    assert!(!ips.is_empty(), "steady has a ClusterSetIP");
    // c1's gateways may reach c3's API server while they read it.
    let wall = lab.wall_down();
    let stop = AtomicBool::new(false);
    let (answered, failed) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let exported_and_imported = |name: &str, what: &str| {
        lab.echo_service("c3", ns, name, 1, &[80]);
        wait_until(what, 180, || imported_from(lab, "c1", ns, name) == "c3");
    };
    std::thread::scope(|scope| {
        scope.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                match lab.curl("c1", ns, client, &url) {
                    Ok(_) => answered.fetch_add(1, Ordering::Relaxed),
                    Err(why) => {
                        // Said with its time, to be read against the
                        // gateways' logs.
                        super::loud(&format!(
                            "lab: a request of c1's pod failed at {}: {why}",
                            humantime::format_rfc3339_millis(std::time::SystemTime::now())
                        ));
                        failed.fetch_add(1, Ordering::Relaxed)
                    }
                };
            }
        });
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            link(lab, "c1", "c3", "link", true);
            let kubeconfig = lab.kubeconfig("c1");
            strait(&[
                "unlink",
                "peer",
                "c3",
                "--local-kubeconfig",
                kubeconfig.to_str().expect("path"),
            ])
            .unwrap_or_else(|e| panic!("strait unlink peer c3: {e}"));
            exported_and_imported("by-api", "c1 imports c3's by-api through the link");

            lab.kubectl(
                "c3",
                &[
                    "-n",
                    "strait-system",
                    "delete",
                    "secret",
                    "strait-remote-reader-c1-anchor",
                ],
            );
            // Long enough for c1's watches of c3 to be refused.
            std::thread::sleep(std::time::Duration::from_secs(10));
            link(lab, "c1", "c3", "link", true);
            exported_and_imported("fresh", "c1 imports c3's fresh with the new token");

            // Each of c1's gateways says when it has synced c3's feed: only
            // then may the link go.
            let synced_c3 = |pod: &str| {
                lab.pod_log("c1", "strait-system", pod)
                    .lines()
                    .filter(|line| line.contains("peer's feed synced") && line.contains("c3"))
                    .count()
            };
            let gateways = lab.pods("c1", "strait-system", "cluster-edge-");
            let before: Vec<usize> = gateways.iter().map(|pod| synced_c3(pod)).collect();
            let said = link(lab, "c1", "c3", "link", false);
            assert!(
                said.contains("c3-peer") && said.contains("c1-peer"),
                "{said}"
            );
            wait_until("each of c1's gateways follows c3's feed again", 120, || {
                gateways
                    .iter()
                    .zip(&before)
                    .all(|(pod, before)| synced_c3(pod) > *before)
            });
            link(lab, "c1", "c3", "unlink", true);
            exported_and_imported("by-feed", "c1 imports c3's by-feed from its feed");
        }));
        stop.store(true, Ordering::Relaxed);
        if let Err(panic) = result {
            std::panic::resume_unwind(panic);
        }
    });
    drop(wall);
    let (answered, failed) = (
        answered.load(Ordering::Relaxed),
        failed.load(Ordering::Relaxed),
    );
    super::loud(&format!(
        "lab: moved to an API link and back under traffic: {answered} requests answered, {failed} failed"
    ));
    assert!(
        remote_records(lab, "c1")
            .iter()
            .all(|(_, kubeconfig)| !kubeconfig),
        "c1 holds no credential for c3's API server again"
    );
    assert_eq!(
        import_ips(lab, "c1", ns, "steady"),
        ips,
        "the moves kept steady's ClusterSetIP"
    );
    assert!(answered > 10, "requests kept going: {answered}");
    assert_eq!(failed, 0, "no request failed while c1 moved");
}
