//! `strait link` and `strait unlink` against the real API servers (the lab
//! links every pair by feed as it starts).

use std::process::Command;

use super::{Lab, wait_until};

pub(super) fn strait(args: &[&str]) -> Result<String, String> {
    let output = Command::new(env!("CARGO_BIN_EXE_strait"))
        .args(args)
        .output()
        .map_err(|e| e.to_string())?;
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&output.stderr).into_owned())
    }
}

pub(super) fn imported_from(lab: &Lab, cluster: &str, namespace: &str, name: &str) -> String {
    lab.try_kubectl(
        cluster,
        &[
            "-n",
            namespace,
            "get",
            "serviceimport",
            name,
            "-o",
            "jsonpath={.status.clusters[*].cluster}",
        ],
    )
    .unwrap_or_default()
}

/// c1 and c3 unlink (`strait unlink`, by feed: both ways): each cluster's
/// peer document goes from the other, and c1 stops importing c3's service
/// (its ServiceImport is deleted), while c2, which follows c3's feed too,
/// keeps importing it. Linking again brings it back.
pub fn unlink_and_link_again(lab: &Lab) {
    let ns = "linking";
    lab.namespace(ns);
    lab.echo_service("c3", ns, "solo", 1, &[80]);
    wait_until("c1 imports c3's solo", 180, || {
        imported_from(lab, "c1", ns, "solo") == "c3"
    });
    let remote = lab.kubeconfig("c3");
    let local = lab.kubeconfig("c1");
    let (remote, local) = (
        remote.to_str().expect("path"),
        local.to_str().expect("path"),
    );
    let said = strait(&[
        "unlink",
        "--kubeconfig",
        remote,
        "--local-kubeconfig",
        local,
    ])
    .unwrap_or_else(|e| panic!("strait unlink: {e}"));
    assert!(
        said.contains("c3-peer deleted in c1") && said.contains("c1-peer deleted in c3"),
        "{said}"
    );
    let record = |cluster: &str, name: &str| {
        lab.try_kubectl(cluster, &["-n", "strait-remotes", "get", "secret", name])
    };
    assert!(record("c1", "c3-peer").is_err(), "c1 follows c3 no more");
    assert!(record("c3", "c1-peer").is_err(), "nor c3 c1");
    assert!(record("c2", "c3-peer").is_ok(), "c2 follows c3 still");
    wait_until("c1 no longer imports c3's solo", 120, || {
        lab.try_kubectl("c1", &["-n", ns, "get", "serviceimport", "solo"])
            .is_err()
    });
    strait(&[
        "link",
        "--kubeconfig",
        remote,
        "--local-kubeconfig",
        local,
        "--apply",
    ])
    .unwrap_or_else(|e| panic!("strait link: {e}"));
    wait_until("c1 imports c3's solo again", 180, || {
        imported_from(lab, "c1", ns, "solo") == "c3"
    });
    // c2 followed c3 all along, and still does: a service exported now reaches it.
    assert_eq!(imported_from(lab, "c2", ns, "solo"), "c3");
    lab.echo_service("c3", ns, "later", 1, &[80]);
    wait_until("c2 imports c3's later", 120, || {
        imported_from(lab, "c2", ns, "later") == "c3"
    });
}
