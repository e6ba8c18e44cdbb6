//! `strait check --pre` and `strait check --kube` against a real cluster:
//! c1, installed, passes; with its CoreDNS block pointed at another address
//! than `cluster-edge-dns`'s (what a re-created Service leaves behind), the
//! check fails naming both addresses; mended, it passes again.

use std::process::Command;

use super::Lab;

/// `strait check ARGS --kubeconfig <c1>`: whether it succeeded, and its
/// stdout and stderr.
fn check(lab: &Lab, args: &[&str]) -> (bool, String) {
    let kubeconfig = lab.kubeconfig("c1");
    let output = Command::new(env!("CARGO_BIN_EXE_strait"))
        .arg("check")
        .args(args)
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .output()
        .expect("strait runs");
    (
        output.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ),
    )
}

fn corefile(lab: &Lab) -> String {
    lab.field(
        "c1",
        "kube-system",
        &["configmap", "coredns"],
        "{.data.Corefile}",
    )
}

fn set_corefile(lab: &Lab, corefile: &str) {
    let patch = serde_json::json!({"data": {"Corefile": corefile}}).to_string();
    lab.kubectl(
        "c1",
        &[
            "-n",
            "kube-system",
            "patch",
            "configmap",
            "coredns",
            "--type",
            "merge",
            "-p",
            &patch,
        ],
    );
}

pub fn check_names_what_is_wrong_and_passes_when_mended(lab: &Lab) {
    let (passed, said) = check(lab, &["--pre"]);
    assert!(passed, "--pre on an installed cluster: {said}");
    for line in [
        "✓ the API server is Kubernetes 1.",
        "✓ serviceimports.multicluster.x-k8s.io is mcs-api v0.5.2",
        "✓ the cluster id is c1",
    ] {
        assert!(said.contains(line), "{line:?} in:\n{said}");
    }
    let (passed, said) = check(lab, &["--kube"]);
    assert!(passed, "check --kube on the lab's c1: {said}");
    let dns_ip = lab.field(
        "c1",
        "strait-system",
        &["service", "cluster-edge-dns"],
        "{.spec.clusterIP}",
    );
    for line in [
        "✓ cluster-edge has 2 of 2 replicas available",
        "holds the Lease strait-export-status",
        &format!("✓ CoreDNS forwards clusterset.local to cluster-edge-dns ({dns_ip})"),
        "✓ the gateway's certificate is spiffe://clusterset.lab/cluster/c1/gateway",
    ] {
        assert!(said.contains(line), "{line:?} in:\n{said}");
    }

    let kept = corefile(lab);
    assert!(
        kept.contains(&dns_ip),
        "the lab's Corefile forwards to {dns_ip}"
    );
    let stale = "10.96.255.254";
    set_corefile(lab, &kept.replace(&dns_ip, stale));
    let (passed, said) = check(lab, &["--kube"]);
    set_corefile(lab, &kept);
    assert!(!passed, "a stale CoreDNS target fails the check: {said}");
    assert!(
        said.contains(&format!(
            "✗ CoreDNS forwards clusterset.local to {stale}, but cluster-edge-dns is {dns_ip}"
        )),
        "{said}"
    );
    let (passed, said) = check(lab, &["--kube"]);
    assert!(passed, "mended: {said}");
}
