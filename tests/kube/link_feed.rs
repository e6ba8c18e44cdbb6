//! `strait link` and `strait unlink` by feed, the default: the real binary
//! against two in-process API servers, each cluster's peer document
//! (its id, network, gateway address and its own CA out of
//! `cluster-edge-tls`) applied in the other, no reader and no token made.

use std::path::Path;
use std::process::Output;

use super::cli::strait;
use super::*;

fn text(output: &Output) -> String {
    format!(
        "status {}\nstdout:\n{}\nstderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// The gateway's TLS Secret of `cluster`, as the install creates it from
/// `strait certs`' output: its `ca.crt` is the one the peer document
/// carries.
fn tls_secret(certs: &Path, cluster: &str) -> Value {
    let read = |file: &str| {
        std::fs::read_to_string(certs.join(cluster).join(file))
            .unwrap_or_else(|e| panic!("{cluster}/{file}: {e}"))
    };
    json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "cluster-edge-tls", "namespace": "strait-system"},
        "stringData": {
            "tls.crt": read("tls.crt"),
            "tls.key": read("tls.key"),
            "ca.crt": read("ca.crt"),
        },
    })
}

fn peer_cluster(secret: &Value) -> String {
    use data_encoding::BASE64;
    let said = secret["data"]["cluster"].as_str().unwrap_or_default();
    String::from_utf8(BASE64.decode(said.as_bytes()).expect("base64")).expect("utf-8")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strait_link_by_default_applies_each_peer_document_in_the_other_and_unlink_removes_both() {
    let dir = tempfile::tempdir().expect("temp dir");
    let local = ApiServer::start(&["v1beta1"]).await;
    let remote = ApiServer::start_tls(&["v1beta1"]).await;
    populate(&local, "c1", "net-a", "v1beta1", "198.51.100.1", "10.1.0.1");
    populate(
        &remote,
        "c2",
        "net-b",
        "v1beta1",
        "198.51.100.2",
        "10.2.0.1",
    );
    let certs = dir.path().join("certs");
    let made = std::process::Command::new(env!("CARGO_BIN_EXE_strait"))
        .args(["certs", "--clusterset", "set.example", "--cluster", "c1"])
        .args(["--cluster", "c2", "--out"])
        .arg(&certs)
        .output()
        .expect("strait certs runs");
    assert!(made.status.success(), "{}", text(&made));
    for (server, cluster) in [(&local, "c1"), (&remote, "c2")] {
        server.apply(kube_api::fixtures::namespace("strait-remotes"));
        server.apply(tls_secret(&certs, cluster));
    }
    let remote_admin = remote.write_kubeconfig(dir.path(), "remote-admin");
    let local_admin = local.write_kubeconfig(dir.path(), "local-admin");
    let run = |args: &[&str]| {
        let mut all: Vec<std::ffi::OsString> = args.iter().map(Into::into).collect();
        all.extend(["--kubeconfig".into(), remote_admin.clone().into_os_string()]);
        let (local_admin, home) = (local_admin.clone(), dir.path().to_owned());
        async move { strait(&all, &local_admin, &home).await }
    };

    // Without --apply: the remote cluster's document printed, nothing made.
    let dry = run(&["link"]).await;
    assert!(dry.status.success(), "{}", text(&dry));
    let printed = String::from_utf8_lossy(&dry.stdout);
    for said in [
        "name: c2-peer",
        "cluster: c2",
        "network: net-b",
        "198.51.100.2",
        "BEGIN CERTIFICATE",
    ] {
        assert!(printed.contains(said), "{said}: {}", text(&dry));
    }
    assert!(local.objects("Secret", "strait-remotes").is_empty());
    assert!(remote.objects("Secret", "strait-remotes").is_empty());
    // A token Secret is printed only for a link through the API server.
    let refused = run(&["link", "--print-secret"]).await;
    assert!(!refused.status.success(), "{}", text(&refused));
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("--api"),
        "{}",
        text(&refused)
    );

    // Applied: c2's document in c1, c1's in c2, and no reader anywhere.
    let applied = run(&["link", "--apply", "--local-kubeconfig"]).await;
    assert!(
        !applied.status.success(),
        "--local-kubeconfig needs a value"
    );
    let local_path = local_admin.to_str().expect("path");
    let applied = run(&["link", "--apply", "--local-kubeconfig", local_path]).await;
    assert!(applied.status.success(), "{}", text(&applied));
    let here = local
        .object("Secret", "strait-remotes", "c2-peer")
        .expect("c2's document in c1");
    let there = remote
        .object("Secret", "strait-remotes", "c1-peer")
        .expect("c1's document in c2");
    assert_eq!(peer_cluster(&here), "c2");
    assert_eq!(peer_cluster(&there), "c1");
    assert_eq!(
        here["metadata"]["labels"]["strait.dev/remote-cluster"], "true",
        "{here:#}"
    );
    for server in [&local, &remote] {
        assert!(
            server.objects("ServiceAccount", "strait-system").is_empty(),
            "no reader made"
        );
    }

    // Unlinked: both documents go.
    let unlinked = run(&["unlink", "--local-kubeconfig", local_path]).await;
    assert!(unlinked.status.success(), "{}", text(&unlinked));
    let said = String::from_utf8_lossy(&unlinked.stdout);
    assert!(
        said.contains("c2-peer deleted in c1") && said.contains("c1-peer deleted in c2"),
        "{}",
        text(&unlinked)
    );
    assert!(
        local
            .object("Secret", "strait-remotes", "c2-peer")
            .is_none()
    );
    assert!(
        remote
            .object("Secret", "strait-remotes", "c1-peer")
            .is_none()
    );
    // Nothing left to undo is an error, not a silent success.
    let again = run(&["unlink", "--local-kubeconfig", local_path]).await;
    assert!(!again.status.success(), "{}", text(&again));
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("--api"),
        "{}",
        text(&again)
    );
}
