//! Peers that read each other only from their exported-state feeds over
//! the tunnel: each of c1 and c3 applies the other's peer document (what
//! `strait link export` prints: its id, network, gateway address and CA;
//! `strait link --feed --apply` applies both), then
//! the links are removed both ways, so neither holds a credential for the
//! other's API server. Afterwards both are linked again as the lab
//! started, and the peers removed (`strait unlink peer`).

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

fn unlink_peer(lab: &Lab, local: &str, peer: &str) {
    let kubeconfig = lab.kubeconfig(local);
    strait(&[
        "unlink",
        "peer",
        peer,
        "--local-kubeconfig",
        kubeconfig.to_str().expect("path"),
    ])
    .unwrap_or_else(|e| panic!("strait unlink peer {peer} in {local}: {e}"));
}

/// While it lives, c1's nodes and pods cannot reach c3's API server and
/// c3's cannot reach c1's (each still reaches its own, and the admin's
/// host every one): private clusters, each reachable only through the
/// gateways. Dropped (a failed assertion too), the rules go.
struct ApiWall;

impl ApiWall {
    fn raise() -> ApiWall {
        wall_api_servers(true);
        ApiWall
    }
}

impl Drop for ApiWall {
    fn drop(&mut self) {
        wall_api_servers(false);
    }
}

fn wall_api_servers(on: bool) {
    for (cluster, other_api) in [("c1", "6443"), ("c3", "6441")] {
        for chain in ["FORWARD", "OUTPUT"] {
            let node = format!("stlab-{cluster}-node");
            let rule = [
                chain,
                "-o",
                "mgmt",
                "-d",
                "10.250.0.1",
                "-p",
                "tcp",
                "--dport",
                other_api,
                "-j",
                "REJECT",
            ];
            let status = std::process::Command::new("ip")
                .args([
                    "netns",
                    "exec",
                    &node,
                    "iptables",
                    if on { "-I" } else { "-D" },
                ])
                .args(rule)
                .status()
                .expect("iptables runs");
            // Taking the rules away may run while a failure unwinds: said,
            // not asserted.
            if on {
                assert!(status.success(), "iptables in {node}: {status}");
            } else if !status.success() {
                eprintln!("iptables in {node} could not remove the API wall: {status}");
            }
        }
    }
}

fn link(lab: &Lab, local: &str, remote: &str, verb: &str) {
    let (remote, local) = (lab.kubeconfig(remote), lab.kubeconfig(local));
    let mut args = vec![
        verb,
        "--kubeconfig",
        remote.to_str().expect("path"),
        "--local-kubeconfig",
        local.to_str().expect("path"),
    ];
    if verb == "link" {
        args.push("--apply");
    }
    strait(&args).unwrap_or_else(|e| panic!("strait {verb}: {e}"));
}

fn import_ips(lab: &Lab, namespace: &str, name: &str) -> String {
    lab.try_kubectl(
        "c1",
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

/// c1 and c3 move from their links to each other's feeds the way
/// docs/kubernetes.md says (peer documents first, then unlink), with no
/// gateway restarted: c1's import of c3's service and its ClusterSetIP
/// stay, and a pod of c1 reaches it with no credential for c3's API server
/// left anywhere.
pub fn peers_read_each_other_from_their_feeds_alone(lab: &Lab) {
    let ns = "feeding";
    lab.namespace(ns);
    lab.echo_service("c3", ns, "fed", 1, &[80]);
    wait_until("c1 imports c3's fed through the link", 180, || {
        imported_from(lab, "c1", ns, "fed") == "c3"
    });
    wait_until("fed's ClusterSetIP recorded", 60, || {
        !import_ips(lab, ns, "fed").is_empty()
    });
    let ips = import_ips(lab, ns, "fed");
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
    // c1's admin, with both kubeconfigs: each cluster's document applied
    // in the other, no token made.
    let (c3_kubeconfig, c1_kubeconfig) = (lab.kubeconfig("c3"), lab.kubeconfig("c1"));
    let said = strait(&[
        "link",
        "--feed",
        "--apply",
        "--kubeconfig",
        c3_kubeconfig.to_str().expect("path"),
        "--local-kubeconfig",
        c1_kubeconfig.to_str().expect("path"),
    ])
    .unwrap_or_else(|e| panic!("strait link --feed: {e}"));
    assert!(
        said.contains("c3-peer") && said.contains("c1-peer"),
        "{said}"
    );
    wait_until("c1's gateways follow c3's feed", 120, || {
        lab.pod_logs("c1", "strait-system", "cluster-edge-")
            .contains("peer's feed synced")
    });
    link(lab, "c1", "c3", "unlink");
    link(lab, "c3", "c1", "unlink");
    assert!(
        lab.try_kubectl("c1", &["-n", "strait-remotes", "get", "secret", "c3"])
            .is_err(),
        "c1 holds no credential for c3's API server"
    );
    // Nor could it use one: from here on c1 and c3 cannot reach each
    // other's API servers at all.
    let wall = ApiWall::raise();
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
    let url = format!("http://fed.{ns}.svc.clusterset.local/");
    wait_until("c1's pod reaches c3's fed through the tunnel", 120, || {
        lab.curl("c1", ns, client, &url).is_ok()
    });
    // A service c3 exports now reaches c1 by the feed alone.
    lab.echo_service("c3", ns, "later", 1, &[80]);
    wait_until("c1 imports c3's later from c3's feed", 180, || {
        imported_from(lab, "c1", ns, "later") == "c3"
    });
    assert_eq!(imported_from(lab, "c1", ns, "fed"), "c3");
    assert_eq!(
        import_ips(lab, ns, "fed"),
        ips,
        "the move kept fed's ClusterSetIP"
    );

    // Back as the lab started: linked both ways, then no peers.
    drop(wall);
    link(lab, "c1", "c3", "link");
    link(lab, "c3", "c1", "link");
    unlink_peer(lab, "c1", "c3");
    unlink_peer(lab, "c3", "c1");
    wait_until("c1 imports c3's later through the link again", 180, || {
        imported_from(lab, "c1", ns, "later") == "c3"
    });
}
