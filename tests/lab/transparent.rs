//! The transparent path for real: a pod resolves a `clusterset.local` name
//! through its cluster's CoreDNS (which forwards the zone to Strait), and
//! its connection goes through the real kube-proxy's rules for the derived
//! Service to a gateway pod's import port, then directly on the pod's own
//! network or through the tunnel from another.

use std::collections::BTreeSet;

use super::{Lab, wait_until};

/// The first word of each answer (the echo pod's `namespace/name`), each once.
fn names(answers: &[String]) -> BTreeSet<String> {
    answers
        .iter()
        .filter_map(|a| a.split_whitespace().next().map(str::to_owned))
        .collect()
}

/// The `namespace/name` of the cluster's pods whose names start with `prefix`.
fn pod_names(lab: &Lab, cluster: &str, namespace: &str, prefix: &str) -> BTreeSet<String> {
    lab.pods(cluster, namespace, prefix)
        .into_iter()
        .map(|name| format!("{namespace}/{name}"))
        .collect()
}

/// `count` answers to `url` from the pod, every one required.
fn answers(
    lab: &Lab,
    cluster: &str,
    namespace: &str,
    pod: &str,
    url: &str,
    count: usize,
) -> Vec<String> {
    (0..count)
        .map(|i| {
            lab.curl(cluster, namespace, pod, url)
                .unwrap_or_else(|e| panic!("request {i} to {url} from {cluster}: {e}"))
        })
        .collect()
}

/// The node's address on its pods' links: where the lab's readiness
/// probes come from, as a kubelet's come from its node.
const PROBES_FROM: &str = "169.254.1.1";

/// The addresses that dialled the pod, from its request log, without the
/// readiness probes.
fn callers(lab: &Lab, cluster: &str, namespace: &str, pod: &str) -> BTreeSet<String> {
    lab.pod_log(cluster, namespace, pod)
        .lines()
        .filter(|line| line.contains("\"GET "))
        .filter_map(|line| line.split_whitespace().next().map(str::to_owned))
        .filter(|caller| caller != PROBES_FROM)
        .collect()
}

/// Each of `pods` (`namespace/name`, in `cluster`) was dialled, and only
/// by the gateway pods of `gateways_of`.
fn assert_dialled_only_by_gateways_of(
    lab: &Lab,
    cluster: &str,
    pods: &BTreeSet<String>,
    gateways_of: &str,
) {
    let gateways: BTreeSet<String> = lab
        .pod_ips(gateways_of, "strait-system", "cluster-edge")
        .into_iter()
        .collect();
    for pod in pods {
        let (namespace, name) = pod.split_once('/').expect("namespace/name");
        let dialled_by = callers(lab, cluster, namespace, name);
        assert!(
            !dialled_by.is_empty() && dialled_by.is_subset(&gateways),
            "{pod} was dialled by {dialled_by:?}, not only by {gateways_of}'s gateway pods {gateways:?}"
        );
    }
}

fn ready_endpoints(lab: &Lab, cluster: &str, namespace: &str, service: &str) -> usize {
    lab.try_kubectl(
        cluster,
        &[
            "-n",
            namespace,
            "get",
            "endpointslices",
            "-l",
            &format!("kubernetes.io/service-name={service}"),
            "-o",
            "jsonpath={range .items[*].endpoints[?(@.conditions.ready==true)]}x{end}",
        ],
    )
    .map(|s| s.len())
    .unwrap_or(0)
}

/// c3 (net-b) exports cart; a c1 pod (net-a) asks for it by name and is
/// answered by both c3 pods, which were dialled by c3's own gateway pods
/// (the tunnel). Then c2 (net-a) exports cart too: its pod is dialled by
/// c1's gateway pods themselves (direct on the shared network).
pub fn across_networks(lab: &Lab) {
    let ns = "cross";
    lab.namespace(ns);
    lab.echo_service("c3", ns, "cart", 2, &[80]);
    let client = lab.client_pod("c1", ns);
    let url = format!("http://cart.{ns}.svc.clusterset.local/");
    wait_until("c1's pod is answered by name", 120, || {
        lab.curl("c1", ns, client, &url).is_ok()
    });
    let c3_pods = pod_names(lab, "c3", ns, "cart-");
    assert_eq!(c3_pods.len(), 2, "{c3_pods:?}");
    let got = answers(lab, "c1", ns, client, &url, 24);
    assert_eq!(names(&got), c3_pods, "both c3 pods answer: {got:?}");

    // The tunnel: c3's own gateway pods dialled them.
    assert_dialled_only_by_gateways_of(lab, "c3", &c3_pods, "c3");

    lab.echo_service("c2", ns, "cart", 1, &[80]);
    let c2_pods = pod_names(lab, "c2", ns, "cart-");
    wait_until("c2's cart pod answers c1 too", 120, || {
        lab.curl("c1", ns, client, &url)
            .is_ok_and(|a| names(&[a]).is_subset(&c2_pods))
    });
    // Direct: c1's gateway pods dialled it themselves.
    assert_dialled_only_by_gateways_of(lab, "c2", &c2_pods, "c1");
}

/// c2's cart declares ports 80 and 81, c3's 80 and 82: from c1, port 81
/// reaches only c2's pod and port 82 only c3's, each over its own path.
/// Port 80 goes to c2 alone: local first (the default) prefers c1's own
/// network, and c3 is the only one on another.
pub fn per_port_rule(lab: &Lab) {
    let ns = "ports";
    lab.namespace(ns);
    lab.echo_service("c2", ns, "cart", 1, &[80, 81]);
    lab.echo_service("c3", ns, "cart", 1, &[80, 82]);
    let client = lab.client_pod("c1", ns);
    let c2_pods = pod_names(lab, "c2", ns, "cart-");
    let c3_pods = pod_names(lab, "c3", ns, "cart-");
    let url = |port: u16| format!("http://cart.{ns}.svc.clusterset.local:{port}/");
    // Both exports have reached c1: c2's pod answers 80, c3's answers 82.
    wait_until("c2 answers port 80 and c3 port 82", 120, || {
        lab.curl("c1", ns, client, &url(80))
            .is_ok_and(|a| names(&[a]).is_subset(&c2_pods))
            && lab.curl("c1", ns, client, &url(82)).is_ok()
    });
    let on_80 = answers(lab, "c1", ns, client, &url(80), 12);
    assert_eq!(
        names(&on_80),
        c2_pods,
        "port 80 stays on c1's network: {on_80:?}"
    );
    let on_81 = answers(lab, "c1", ns, client, &url(81), 12);
    assert_eq!(names(&on_81), c2_pods, "port 81 is c2's alone: {on_81:?}");
    let on_82 = answers(lab, "c1", ns, client, &url(82), 12);
    assert_eq!(names(&on_82), c3_pods, "port 82 is c3's alone: {on_82:?}");
}

/// c3 exports a headless service of two pods with hostnames; a c1 pod
/// reaches each by its per-pod name, `<hostname>.c3.db.<ns>.svc.clusterset.local`.
pub fn headless_across_networks(lab: &Lab) {
    let ns = "headless";
    lab.namespace(ns);
    lab.headless_db("c3", ns);
    let client = lab.client_pod("c1", ns);
    for name in ["db-0", "db-1"] {
        let url = format!("http://{name}.c3.db.{ns}.svc.clusterset.local:8080/");
        wait_until(&format!("{name} answers by its own name"), 120, || {
            lab.curl("c1", ns, client, &url)
                .is_ok_and(|a| a.starts_with(&format!("{ns}/{name} ")))
        });
        let got = answers(lab, "c1", ns, client, &url, 6);
        assert_eq!(
            names(&got),
            BTreeSet::from([format!("{ns}/{name}")]),
            "{name}'s name reaches {name} alone: {got:?}"
        );
    }
    // `strait explain` asks c1's gateway, which follows c3 by its feed:
    // each of c3's pods is shown with the address c1's pods dial for it.
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_strait"))
        .args(["explain", "--kube", "headless/db:8080", "--kubeconfig"])
        .arg(lab.kubeconfig("c1"))
        .output()
        .expect("strait runs");
    let said = String::from_utf8_lossy(&output.stdout);
    let told = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{said}{told}");
    assert!(
        told.contains("explained by the gateway pod strait-system/cluster-edge-"),
        "{told}"
    );
    let dialled: Vec<&str> = said
        .lines()
        .filter(|line| line.trim_start().starts_with("c3 ") && line.contains("pods here dial 10."))
        .collect();
    assert_eq!(
        dialled.len(),
        2,
        "each of c3's pods with its address here:\n{said}"
    );
}

/// A gateway pod of c3 (the tunnel's far end) and then one of c1 (where
/// the client's connections arrive) are deleted; the Deployment replaces
/// them, kube-proxy follows the EndpointSlices, and the client is answered
/// again by every request once the replacement is ready.
pub fn gateway_pod_deleted(lab: &Lab) {
    let ns = "failover";
    lab.namespace(ns);
    lab.echo_service("c3", ns, "cart", 1, &[80]);
    let client = lab.client_pod("c1", ns);
    let url = format!("http://cart.{ns}.svc.clusterset.local/");
    wait_until("c1's pod is answered", 120, || {
        lab.curl("c1", ns, client, &url).is_ok()
    });
    for cluster in ["c3", "c1"] {
        let before = lab.kubectl(
            cluster,
            &["-n", "strait-system", "get", "pods", "-o", "name"],
        );
        let victim = before
            .lines()
            .find(|l| l.starts_with("pod/cluster-edge-"))
            .expect("a gateway pod")
            .to_owned();
        lab.kubectl(
            cluster,
            &["-n", "strait-system", "delete", &victim, "--wait=false"],
        );
        let mut failures = 0;
        let mut in_a_row = 0;
        wait_until(
            &format!("{cluster}: 10 answers in a row after deleting {victim}"),
            120,
            || {
                match lab.curl("c1", ns, client, &url) {
                    Ok(_) => in_a_row += 1,
                    Err(_) => {
                        failures += 1;
                        in_a_row = 0;
                    }
                }
                in_a_row >= 10
                    && ready_endpoints(lab, cluster, "strait-system", "cluster-edge") == 2
            },
        );
        super::loud(&format!(
            "lab: {cluster}'s {victim} deleted: {failures} requests failed before 10 in a row succeeded"
        ));
    }
}
