//! `strait link` and `strait unlink` against the real remote API server
//! (the lab links every pair as it starts).

use std::process::Command;

use super::{Lab, wait_until};

fn strait(args: &[&str]) -> Result<String, String> {
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

fn imported_from(lab: &Lab, cluster: &str, namespace: &str, name: &str) -> String {
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

/// c1 unlinks c3: the remote-cluster Secret and c3's reader go, and c1
/// stops importing c3's service (its ServiceImport is deleted). Linking
/// again brings it back, with the reader's fresh token.
pub fn unlink_and_link_again(lab: &Lab) {
    let ns = "linking";
    lab.namespace(ns);
    lab.echo_service("c3", ns, "solo", 1, &[80]);
    wait_until("c1 imports c3's solo", 120, || {
        imported_from(lab, "c1", ns, "solo") == "c3"
    });
    let remote = lab.kubeconfig("c3");
    let local = lab.kubeconfig("c1");
    let (remote, local) = (
        remote.to_str().expect("path"),
        local.to_str().expect("path"),
    );
    let readers = |lab: &Lab| {
        lab.kubectl(
            "c3",
            &[
                "-n",
                "strait-system",
                "get",
                "serviceaccounts",
                "-o",
                "name",
            ],
        )
        .lines()
        .count()
    };
    let before = readers(lab);
    strait(&[
        "unlink",
        "--kubeconfig",
        remote,
        "--local-kubeconfig",
        local,
    ])
    .unwrap_or_else(|e| panic!("strait unlink: {e}"));
    assert!(
        lab.try_kubectl("c1", &["-n", "strait-system", "get", "secret", "c3"])
            .is_err(),
        "the remote-cluster Secret is gone"
    );
    assert_eq!(readers(lab), before - 1, "c1's reader in c3 is gone");
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
    wait_until("c1 imports c3's solo again", 120, || {
        imported_from(lab, "c1", ns, "solo") == "c3"
    });
}
