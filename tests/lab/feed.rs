//! Peers that read each other only from their exported-state feeds over
//! the tunnel (`kube.peers`): each gateway of c1 and c3 is told of the
//! other as a peer (the network its admin attests, its gateway's address),
//! then the links are removed both ways, so neither holds a credential for
//! the other's API server. Afterwards both are linked again as the lab
//! started.

use super::link::{imported_from, strait};
use super::{Lab, wait_until};

/// c3's gateway Service's load-balancer address, and c1's (tests/lab/README.md).
const C1_GATEWAY: &str = "172.31.100.11:15008";
const C3_GATEWAY: &str = "172.31.100.13:15008";

fn gateway_yaml(lab: &Lab, cluster: &str) -> String {
    lab.kubectl(
        cluster,
        &[
            "-n",
            "strait-system",
            "get",
            "configmap",
            "cluster-edge-config",
            "-o",
            "jsonpath={.data.gateway\\.yaml}",
        ],
    )
}

fn set_gateway_yaml(lab: &Lab, cluster: &str, text: &str) {
    let patch = serde_json::json!({"data": {"gateway.yaml": text}}).to_string();
    lab.kubectl(
        cluster,
        &[
            "-n",
            "strait-system",
            "patch",
            "configmap",
            "cluster-edge-config",
            "--type",
            "merge",
            "-p",
            &patch,
        ],
    );
}

/// The gateway pods start again with the ConfigMap as it is now.
fn restart_gateways(lab: &Lab, cluster: &str) {
    lab.kubectl(
        cluster,
        &[
            "-n",
            "strait-system",
            "rollout",
            "restart",
            "deployment",
            "cluster-edge",
        ],
    );
    lab.kubectl(
        cluster,
        &[
            "-n",
            "strait-system",
            "rollout",
            "status",
            "deployment",
            "cluster-edge",
            "--timeout",
            "180s",
        ],
    );
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
/// docs/configuration.md says (peers first, then unlink): c1's import of
/// c3's service and its ClusterSetIP stay, and a pod of c1 reaches it with
/// no credential for c3's API server left anywhere.
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
    let (c1_yaml, c3_yaml) = (gateway_yaml(lab, "c1"), gateway_yaml(lab, "c3"));
    let with_peer = |text: &str, peer: &str, network: &str, gateway: &str| {
        let peers = format!(
            "kube:\n  peers:\n  - cluster: {peer}\n    network: {network}\n    gateways: [\"{gateway}\"]\n"
        );
        assert!(
            text.contains("\nkube:\n"),
            "gateway.yaml has a kube block:\n{text}"
        );
        text.replacen("\nkube:\n", &format!("\n{peers}"), 1)
    };
    set_gateway_yaml(lab, "c1", &with_peer(&c1_yaml, "c3", "net-b", C3_GATEWAY));
    set_gateway_yaml(lab, "c3", &with_peer(&c3_yaml, "c1", "net-a", C1_GATEWAY));
    restart_gateways(lab, "c1");
    restart_gateways(lab, "c3");
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
    let client = lab.client_pod("c1", ns);
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
    link(lab, "c1", "c3", "link");
    link(lab, "c3", "c1", "link");
    set_gateway_yaml(lab, "c1", &c1_yaml);
    set_gateway_yaml(lab, "c3", &c3_yaml);
    restart_gateways(lab, "c1");
    restart_gateways(lab, "c3");
    wait_until("c1 imports c3's later through the link again", 180, || {
        imported_from(lab, "c1", ns, "later") == "c3"
    });
}
