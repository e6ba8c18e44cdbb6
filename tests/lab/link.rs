//! `strait link` and `strait unlink` against the real remote API server
//! (the lab links every pair as it starts).

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

/// c1 unlinks c3: the remote-cluster Secret and c1's reader in c3 go, and
/// c1 stops importing c3's service (its ServiceImport is deleted), while c2,
/// which reads c3 through a reader of its own, keeps importing it. Linking
/// again brings it back, with a fresh token.
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
        lab.try_kubectl("c1", &["-n", "strait-remotes", "get", "secret", "c3"])
            .is_err(),
        "the remote-cluster Secret is gone"
    );
    assert_eq!(readers(lab), before - 1, "c1's reader in c3 is gone");
    assert!(
        lab.try_kubectl(
            "c3",
            &[
                "-n",
                "strait-system",
                "get",
                "serviceaccount",
                "strait-remote-reader-c2"
            ]
        )
        .is_ok(),
        "c2's reader in c3 stays"
    );
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
    // c2 read c3 all along, and still does: a service exported now reaches it.
    assert_eq!(imported_from(lab, "c2", ns, "solo"), "c3");
    lab.echo_service("c3", ns, "later", 1, &[80]);
    wait_until("c2 imports c3's later", 120, || {
        imported_from(lab, "c2", ns, "later") == "c3"
    });
}

/// c1's token for c3 is rotated while a c1 pod keeps asking for a c3
/// service: the anchor Secret in c3 is deleted, which revokes the bound
/// token (the real API server stops accepting it: c1's gateways lose their
/// watch of c3, and keep routing on what they knew), then `strait link`
/// binds a new one to a new anchor and writes it into
/// c1's Secret. No request fails, and a service c3 exports afterwards
/// reaches c1.
pub fn token_rotated_under_traffic(lab: &Lab) {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    let ns = "rotation";
    lab.namespace(ns);
    lab.echo_service("c3", ns, "steady", 1, &[80]);
    let client = lab.client_pod("c1", ns);
    let url = format!("http://steady.{ns}.svc.clusterset.local/");
    wait_until("c1's pod is answered", 120, || {
        lab.curl("c1", ns, client, &url).is_ok()
    });
    let stop = Arc::new(AtomicBool::new(false));
    let (answered, failed) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    std::thread::scope(|scope| {
        scope.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                match lab.curl("c1", ns, client, &url) {
                    Ok(_) => answered.fetch_add(1, Ordering::Relaxed),
                    Err(_) => failed.fetch_add(1, Ordering::Relaxed),
                };
            }
        });
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
        let remote = lab.kubeconfig("c3");
        let local = lab.kubeconfig("c1");
        strait(&[
            "link",
            "--kubeconfig",
            remote.to_str().expect("path"),
            "--local-kubeconfig",
            local.to_str().expect("path"),
            "--apply",
        ])
        .unwrap_or_else(|e| panic!("strait link: {e}"));
        lab.echo_service("c3", ns, "fresh", 1, &[80]);
        wait_until("c1 imports c3's fresh with the new token", 120, || {
            imported_from(lab, "c1", ns, "fresh") == "c3"
        });
        stop.store(true, Ordering::Relaxed);
    });
    let (answered, failed) = (
        answered.load(Ordering::Relaxed),
        failed.load(Ordering::Relaxed),
    );
    super::loud(&format!(
        "lab: token rotated under traffic: {answered} requests answered, {failed} failed"
    ));
    assert!(answered > 10, "requests kept going: {answered}");
    assert_eq!(failed, 0, "no request failed while the token rotated");
}
