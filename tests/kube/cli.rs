//! The commands that read the live clusters (`check`, `explain --kube`)
//! as the `strait` binary, against in-process API servers.

use std::path::Path;

use serde_json::Value;

use super::kube_api;
use super::kube_api::ApiServer;
use super::kube_api::fixtures::{populate, remote_secret};

/// Runs the binary with `kubeconfig` as `$KUBECONFIG`, no `$POD_NAMESPACE`.
pub(crate) async fn strait<S: AsRef<std::ffi::OsStr>>(
    args: &[S],
    kubeconfig: &Path,
    home: &Path,
) -> std::process::Output {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_strait"))
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .env("HOME", home)
        .env_remove("POD_NAMESPACE")
        .output()
        .await
        .expect("the strait binary runs")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_and_explain_read_live_clusters() {
    let dir = tempfile::tempdir().expect("temp dir");
    let local = ApiServer::start(&["v1beta1", "v1alpha1"]).await;
    let remote = ApiServer::start(&["v1alpha1"]).await;
    populate(&local, "c1", "net-a", "v1beta1", "198.51.100.1", "10.1.0.1");
    populate(
        &remote,
        "c2",
        "net-b",
        "v1alpha1",
        "198.51.100.2",
        "10.2.0.1",
    );
    let kubeconfig = local.write_kubeconfig(dir.path(), "local");
    // gateway.yaml names the remote cluster's kubeconfig, relative to itself.
    remote.write_kubeconfig(dir.path(), "remote");
    std::fs::write(
        dir.path().join("gateway.yaml"),
        "kube:\n  kubeconfigs: [remote.yaml]\n",
    )
    .expect("gateway.yaml");
    let config = dir.path().to_str().expect("utf-8 path");

    let output = strait(
        &["check", "--kube", "--config", config, "--output", "json"],
        &kubeconfig,
        dir.path(),
    )
    .await;
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: Value = serde_json::from_slice(&output.stdout).expect("JSON report");
    assert_eq!(report["valid"], true);
    let ids: Vec<&str> = report["clusters"]
        .as_array()
        .expect("clusters")
        .iter()
        .filter_map(|c| c["id"].as_str())
        .collect();
    assert_eq!(ids, ["c1", "c2"]);

    // No --from: the local cluster's id decides.
    let output = strait(
        &["explain", "--kube", "--config", config, "shop/cart:80"],
        &kubeconfig,
        dir.path(),
    )
    .await;
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(text.contains("from c1 on network net-a"), "{text}");
    assert!(
        text.contains("10.1.0.1:8080") && text.contains("direct"),
        "{text}"
    );
    assert!(
        text.contains("10.2.0.1:8080") && text.contains("tunnel via 198.51.100.2:15008"),
        "{text}"
    );

    // A tenant's ServiceExport without a Service in the remote cluster
    // leaves itself out, as the gateway leaves it out: the check says so
    // as a warning, and explain still answers for every other service.
    remote.apply(kube_api::fixtures::export("ghost", "v1alpha1"));
    let output = strait(
        &["check", "--kube", "--config", config],
        &kubeconfig,
        dir.path(),
    )
    .await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(
        stderr.contains("warning") && stderr.contains("ghost") && stderr.contains("left out"),
        "{stderr}"
    );
    let output = strait(
        &["explain", "--kube", "--config", config, "shop/cart:80"],
        &kubeconfig,
        dir.path(),
    )
    .await;
    assert!(
        output.status.success()
            && String::from_utf8_lossy(&output.stdout).contains("10.2.0.1:8080"),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );

    // A cluster that cannot be reached fails the check, by name.
    remote.stop().await;
    let output = strait(
        &[
            "check",
            "--kube",
            "--config",
            config,
            "--kube-timeout",
            "1s",
        ],
        &kubeconfig,
        dir.path(),
    )
    .await;
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("not synced") && stderr.contains("remote.yaml"),
        "{stderr}"
    );
}

/// Run by hand, with no `$POD_NAMESPACE`: `check --kube` reads the
/// remote-cluster Secrets where `strait link` writes them
/// (`strait-remotes`), never the kubeconfig's namespace, and `--namespace`
/// and `--kubeconfig` say otherwise.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_reads_remote_cluster_secrets_where_strait_link_writes_them() {
    let dir = tempfile::tempdir().expect("temp dir");
    let local = ApiServer::start(&["v1alpha1"]).await;
    let remote = ApiServer::start_tls(&["v1alpha1"]).await;
    populate(
        &local,
        "c1",
        "net-a",
        "v1alpha1",
        "198.51.100.1",
        "10.1.0.1",
    );
    populate(
        &remote,
        "c2",
        "net-b",
        "v1alpha1",
        "198.51.100.2",
        "10.2.0.1",
    );
    local.apply(kube_api::fixtures::namespace("strait-remotes"));
    let mut secret = remote_secret("c2", &remote.kubeconfig("c2"), true);
    secret["metadata"]["namespace"] = "strait-remotes".into();
    local.apply(secret);
    let kubeconfig = local.write_kubeconfig(dir.path(), "local");
    let nowhere = dir.path().join("no-such-kubeconfig");
    let check = |extra: &'static [&'static str]| {
        let mut args = vec!["check", "--kube", "--output", "json", "--kubeconfig"];
        args.push(kubeconfig.to_str().expect("utf-8 path"));
        args.extend_from_slice(extra);
        let args: Vec<String> = args.into_iter().map(str::to_owned).collect();
        let (nowhere, home) = (nowhere.clone(), dir.path().to_owned());
        async move { strait(&args, &nowhere, &home).await }
    };
    let ids = |output: &std::process::Output| -> Vec<String> {
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        let report: Value = serde_json::from_slice(&output.stdout).expect("JSON report");
        report["clusters"]
            .as_array()
            .expect("clusters")
            .iter()
            .filter_map(|c| c["id"].as_str().map(str::to_owned))
            .collect()
    };
    let output = check(&[]).await;
    assert_eq!(ids(&output), ["c1", "c2"]);
    assert!(String::from_utf8_lossy(&output.stderr).contains("namespace strait-remotes"));
    assert_eq!(ids(&check(&["--namespace", "elsewhere"]).await), ["c1"]);
}
