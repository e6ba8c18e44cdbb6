//! `strait link` and `strait unlink`, the real binary against two
//! in-process API servers. The remote one authenticates (bearer tokens:
//! the admin kubeconfig's and those its token controller mints), so the
//! linked Secret is shown to work by a source reading the remote cluster
//! through it, no kubectl involved. RBAC itself is not evaluated by the
//! stand-in server; the ClusterRole's rules are checked as written.

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

/// The claims of the token a linked Secret's kubeconfig holds (read
/// unverified, as the token's own issuer would decode them).
fn token_claims(kubeconfig: &str) -> Value {
    use data_encoding::BASE64URL_NOPAD;
    use secrecy::ExposeSecret;
    let parsed = kube::config::Kubeconfig::from_yaml(kubeconfig).expect("a kubeconfig");
    let token = parsed.auth_infos[0]
        .auth_info
        .as_ref()
        .and_then(|auth| auth.token.as_ref())
        .expect("a token in the kubeconfig")
        .expose_secret()
        .to_owned();
    let payload = token
        .split('.')
        .nth(1)
        .unwrap_or_else(|| panic!("a JWT-shaped token: {token}"));
    let bytes = BASE64URL_NOPAD
        .decode(payload.as_bytes())
        .expect("base64url claims");
    serde_json::from_slice(&bytes).expect("JSON claims")
}

fn secret_kubeconfig(secret: &Value) -> String {
    use data_encoding::BASE64;
    let data = secret["data"]["kubeconfig"]
        .as_str()
        .expect("data.kubeconfig");
    String::from_utf8(BASE64.decode(data.as_bytes()).expect("base64")).expect("utf-8")
}

/// c1's API server, and c2's over TLS: the linking and the linked cluster.
async fn local_c1_and_remote_c2() -> (ApiServer, ApiServer) {
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
    (local, remote)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strait_link_makes_a_reader_whose_secret_works_as_a_remote_cluster() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (local, remote) = local_c1_and_remote_c2().await;
    remote.require_tokens();
    // Where deploy/namespace.yaml keeps the remote-cluster Secrets.
    local.apply(kube_api::fixtures::namespace("strait-remotes"));
    let remote_admin = remote.write_kubeconfig(dir.path(), "remote-admin");
    let local_admin = local.write_kubeconfig(dir.path(), "local-admin");

    // Without --apply, a dry run: what would be made, and nothing made.
    let dry = strait(
        &[
            "link".as_ref(),
            "--api".as_ref(),
            "--kubeconfig".as_ref(),
            remote_admin.as_os_str(),
        ],
        &local_admin,
        dir.path(),
    )
    .await;
    assert!(dry.status.success(), "{}", text(&dry));
    let stdout = String::from_utf8_lossy(&dry.stdout);
    assert!(
        stdout.contains("kind: ServiceAccount") && stdout.contains("strait-remote-reader-c1"),
        "{}",
        text(&dry)
    );
    assert!(
        !stdout.contains("kubeconfig") && String::from_utf8_lossy(&dry.stderr).contains("dry run"),
        "{}",
        text(&dry)
    );
    assert!(
        remote
            .object("ServiceAccount", "strait-system", "strait-remote-reader-c1")
            .is_none(),
        "a dry run creates no reader"
    );

    // Printed: the Secret, named after the remote cluster's id.
    let printed = strait(
        &[
            "link".as_ref(),
            "--api".as_ref(),
            "--print-secret".as_ref(),
            "--kubeconfig".as_ref(),
            remote_admin.as_os_str(),
        ],
        &local_admin,
        dir.path(),
    )
    .await;
    assert!(printed.status.success(), "{}", text(&printed));
    let stdout = String::from_utf8_lossy(&printed.stdout);
    assert!(
        stdout.contains("name: c2") && stdout.contains("strait.dev/remote-cluster"),
        "{}",
        text(&printed)
    );

    // Applied, twice: the second run changes nothing.
    let apply: [&std::ffi::OsStr; 7] = [
        "link".as_ref(),
        "--api".as_ref(),
        "--kubeconfig".as_ref(),
        remote_admin.as_os_str(),
        "--apply".as_ref(),
        "--local-kubeconfig".as_ref(),
        local_admin.as_os_str(),
    ];
    let first = strait(&apply, &local_admin, dir.path()).await;
    assert!(first.status.success(), "{}", text(&first));
    let secret = local
        .object("Secret", "strait-remotes", "c2")
        .expect("the local Secret");
    let second = strait(&apply, &local_admin, dir.path()).await;
    assert!(second.status.success(), "{}", text(&second));
    let again = local
        .object("Secret", "strait-remotes", "c2")
        .expect("the local Secret");
    assert_eq!(
        again["metadata"]["resourceVersion"], secret["metadata"]["resourceVersion"],
        "linking again rewrote the Secret"
    );
    assert_eq!(
        secret["metadata"]["labels"]["strait.dev/remote-cluster"],
        "true"
    );

    // Another cluster whose ClusterProperty also says c2 cannot take the
    // link's place, nor one naming itself what no cluster id may be.
    let impostor = ApiServer::start_tls(&["v1beta1"]).await;
    populate(
        &impostor,
        "c2",
        "net-a",
        "v1beta1",
        "198.51.100.66",
        "10.2.0.66",
    );
    let impostor_admin = impostor.write_kubeconfig(dir.path(), "impostor-admin");
    let mut taking = apply;
    taking[3] = impostor_admin.as_os_str();
    let refused = strait(&taking, &local_admin, dir.path()).await;
    assert!(!refused.status.success(), "{}", text(&refused));
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("already links"),
        "{}",
        text(&refused)
    );
    let kept = local
        .object("Secret", "strait-remotes", "c2")
        .expect("the local Secret");
    assert_eq!(
        kept["metadata"]["resourceVersion"], secret["metadata"]["resourceVersion"],
        "the impostor rewrote c2's Secret"
    );
    impostor.apply(
        json!({"apiVersion": "about.k8s.io/v1beta1", "kind": "ClusterProperty",
        "metadata": {"name": "cluster.clusterset.k8s.io"}, "spec": {"value": "../Evil"}}),
    );
    let refused = strait(&taking, &local_admin, dir.path()).await;
    assert!(
        !refused.status.success()
            && String::from_utf8_lossy(&refused.stderr).contains("cannot name a linked cluster"),
        "{}",
        text(&refused)
    );
    let kubeconfig = secret_kubeconfig(&secret);
    assert!(
        !kubeconfig.contains("test-token"),
        "the Secret carries the reader's own token:\n{kubeconfig}"
    );
    // A bound token: of the reader, tied to the link's anchor Secret,
    // expiring after the default lifetime (365 days).
    let claims = token_claims(&kubeconfig);
    assert_eq!(
        claims["kubernetes.io"]["serviceaccount"]["name"],
        "strait-remote-reader-c1"
    );
    let anchor = remote
        .object("Secret", "strait-system", "strait-remote-reader-c1-anchor")
        .expect("the anchor Secret");
    assert_eq!(
        claims["kubernetes.io"]["secret"]["uid"],
        anchor["metadata"]["uid"]
    );
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after the epoch")
        .as_secs();
    let lifetime = claims["exp"].as_u64().expect("exp") - now;
    assert!(
        (364 * 86_400..=365 * 86_400).contains(&lifetime),
        "lifetime {lifetime} s"
    );
    assert!(
        remote
            .object("Secret", "strait-system", "strait-remote-reader-c1-token")
            .is_none(),
        "no legacy never-expiring token is made where TokenRequest is served"
    );
    let stdout = String::from_utf8_lossy(&first.stdout);
    assert!(
        stdout.contains("a new bound token, valid until"),
        "{}",
        text(&first)
    );
    assert!(
        String::from_utf8_lossy(&second.stdout).contains("the token already held is kept"),
        "{}",
        text(&second)
    );

    // The reader in the remote cluster: list and watch of what is read there.
    let role = remote
        .object("ClusterRole", "", "strait-remote-reader-c1")
        .expect("ClusterRole");
    let mut granted: Vec<String> = Vec::new();
    for rule in role["rules"].as_array().expect("rules") {
        assert_eq!(rule["verbs"], json!(["list", "watch"]));
        for resource in rule["resources"].as_array().expect("resources") {
            granted.push(format!(
                "{}/{}",
                rule["apiGroups"][0].as_str().unwrap(),
                resource.as_str().unwrap()
            ));
        }
    }
    granted.sort();
    assert_eq!(
        granted,
        [
            "/services",
            "about.k8s.io/clusterproperties",
            "discovery.k8s.io/endpointslices",
            "multicluster.x-k8s.io/serviceexports"
        ]
    );
    let binding = remote
        .object("ClusterRoleBinding", "", "strait-remote-reader-c1")
        .expect("binding");
    assert_eq!(
        binding["subjects"],
        json!([{"kind": "ServiceAccount", "name": "strait-remote-reader-c1", "namespace": "strait-system"}])
    );
    assert!(
        remote
            .object("ServiceAccount", "strait-system", "strait-remote-reader-c1")
            .is_some()
    );

    // The Secret works: the local cluster's source reads c2 through it.
    let handle = KubeHandle::start(KubeOptions {
        remote_secret_namespace: Some("strait-remotes".to_owned()),
        ..options(&local_admin, &[])
    })
    .await
    .expect("source starts");
    until(&handle, "c2 read through the linked Secret", |s| {
        s.all_synced() && backends(s, "c1", "cart") == ["c1 10.1.0.1:8080", "c2 10.2.0.1:8080"]
    })
    .await;

    // Unlinked: both sides gone, and c2 leaves the set.
    let unlinked = strait(
        &[
            "unlink".as_ref(),
            "--api".as_ref(),
            "--kubeconfig".as_ref(),
            remote_admin.as_os_str(),
            "--local-kubeconfig".as_ref(),
            local_admin.as_os_str(),
        ],
        &local_admin,
        dir.path(),
    )
    .await;
    assert!(unlinked.status.success(), "{}", text(&unlinked));
    assert!(local.object("Secret", "strait-remotes", "c2").is_none());
    for (kind, namespace) in [
        ("ClusterRole", ""),
        ("ClusterRoleBinding", ""),
        ("ServiceAccount", "strait-system"),
    ] {
        assert!(
            remote
                .object(kind, namespace, "strait-remote-reader-c1")
                .is_none(),
            "{kind} left"
        );
    }
    assert!(
        remote
            .object("Secret", "strait-system", "strait-remote-reader-c1-anchor")
            .is_none(),
        "the anchor is deleted, revoking the token"
    );
    until(&handle, "c2 gone", |s| {
        backends(s, "c1", "cart") == ["c1 10.1.0.1:8080"]
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strait_link_refuses_a_cluster_without_the_crds_or_the_rights() {
    let dir = tempfile::tempdir().expect("temp dir");
    let bare = ApiServer::start_tls(&[]).await;
    let config = bare.write_kubeconfig(dir.path(), "bare");
    let refused = strait(
        &[
            "link".as_ref(),
            "--api".as_ref(),
            "--kubeconfig".as_ref(),
            config.as_os_str(),
            "--name".as_ref(),
            "c9".as_ref(),
            // No ClusterProperty names the local cluster either.
            "--local-cluster".as_ref(),
            "c8".as_ref(),
        ],
        &config,
        dir.path(),
    )
    .await;
    assert_eq!(refused.status.code(), Some(2), "{}", text(&refused));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("lacks the CRDs of ClusterProperty, ServiceExport")
            && stderr.contains("deploy/crds/"),
        "{}",
        text(&refused)
    );
    assert!(
        bare.object("ServiceAccount", "strait-system", "strait-remote-reader-c8")
            .is_none()
    );

    let limited = ApiServer::start_tls(&["v1beta1"]).await;
    populate(
        &limited,
        "c3",
        "net-c",
        "v1beta1",
        "198.51.100.3",
        "10.3.0.1",
    );
    limited.forbid("PATCH", "clusterroles");
    let config = limited.write_kubeconfig(dir.path(), "limited");
    let refused = strait(
        &[
            "link".as_ref(),
            "--api".as_ref(),
            "--print-secret".as_ref(),
            "--kubeconfig".as_ref(),
            config.as_os_str(),
        ],
        &config,
        dir.path(),
    )
    .await;
    assert_eq!(refused.status.code(), Some(2), "{}", text(&refused));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("not allowed to apply ClusterRole strait-remote-reader-c3")
            && stderr.contains("clusterroles is forbidden"),
        "{}",
        text(&refused)
    );
    assert!(
        limited
            .object("ClusterRole", "", "strait-remote-reader-c3")
            .is_none()
    );
}

/// A server without TokenRequest gets the legacy token Secret, and says
/// so; once the server serves TokenRequest, linking again replaces the
/// legacy token with a bound one and deletes the legacy Secret (revoking
/// its never-expiring token) only after the local Secret holds the new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strait_link_falls_back_to_a_legacy_token_and_replaces_it_when_it_can() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (local, remote) = local_c1_and_remote_c2().await;
    local.apply(kube_api::fixtures::namespace("strait-remotes"));
    remote.serve_token_requests(false);
    let remote_admin = remote.write_kubeconfig(dir.path(), "remote-admin");
    let local_admin = local.write_kubeconfig(dir.path(), "local-admin");
    let apply: [&std::ffi::OsStr; 7] = [
        "link".as_ref(),
        "--api".as_ref(),
        "--kubeconfig".as_ref(),
        remote_admin.as_os_str(),
        "--apply".as_ref(),
        "--local-kubeconfig".as_ref(),
        local_admin.as_os_str(),
    ];
    let legacy = strait(&apply, &local_admin, dir.path()).await;
    assert!(legacy.status.success(), "{}", text(&legacy));
    assert!(
        String::from_utf8_lossy(&legacy.stdout).contains("a legacy token that never expires"),
        "{}",
        text(&legacy)
    );
    let secret = local
        .object("Secret", "strait-remotes", "c2")
        .expect("the local Secret");
    assert!(
        secret_kubeconfig(&secret).contains("sa-strait-system-strait-remote-reader-c1-"),
        "the legacy Secret's token"
    );
    assert!(
        remote
            .object("Secret", "strait-system", "strait-remote-reader-c1-token")
            .is_some()
    );

    remote.serve_token_requests(true);
    let bound = strait(&apply, &local_admin, dir.path()).await;
    assert!(bound.status.success(), "{}", text(&bound));
    let stdout = String::from_utf8_lossy(&bound.stdout);
    assert!(
        stdout.contains("a new bound token") && stdout.contains("legacy token Secret is deleted"),
        "{}",
        text(&bound)
    );
    let secret = local
        .object("Secret", "strait-remotes", "c2")
        .expect("the local Secret");
    let claims = token_claims(&secret_kubeconfig(&secret));
    assert_eq!(
        claims["kubernetes.io"]["secret"]["name"],
        "strait-remote-reader-c1-anchor"
    );
    assert!(
        remote
            .object("Secret", "strait-system", "strait-remote-reader-c1-token")
            .is_none(),
        "the legacy token Secret is gone"
    );

    // A lifetime the API server would refuse is refused before any write.
    let mut short = apply.to_vec();
    short.extend([
        std::ffi::OsStr::new("--token-lifetime"),
        std::ffi::OsStr::new("5m"),
    ]);
    let refused = strait(&short, &local_admin, dir.path()).await;
    assert_eq!(refused.status.code(), Some(2), "{}", text(&refused));
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("--token-lifetime 5m"),
        "{}",
        text(&refused)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strait_unlink_api_says_what_it_leaves_and_both_removes_the_other_way() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (local, remote) = local_c1_and_remote_c2().await;
    remote.require_tokens();
    local.apply(kube_api::fixtures::namespace("strait-remotes"));
    let remote_admin = remote.write_kubeconfig(dir.path(), "remote-admin");
    let local_admin = local.write_kubeconfig(dir.path(), "local-admin");
    let args = |extra: &[&'static str]| {
        let mut args: Vec<std::ffi::OsString> = vec![
            "--api".into(),
            "--kubeconfig".into(),
            remote_admin.clone().into(),
            "--local-kubeconfig".into(),
            local_admin.clone().into(),
        ];
        args.extend(extra.iter().map(Into::into));
        args
    };
    // c2 reads c1 too: its Secret naming c1 there, its reader here (as
    // `strait link --api` run from c2's side leaves them).
    let the_other_way = || {
        remote.apply(kube_api::fixtures::namespace("strait-remotes"));
        remote.apply(serde_json::json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "c1", "namespace": "strait-remotes",
                         "labels": {"strait.dev/remote-cluster": "true"}},
            "data": {},
        }));
        local.apply(kube_api::fixtures::namespace("strait-system"));
        local.apply(serde_json::json!({
            "apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": "strait-remote-reader-c2", "namespace": "strait-system"},
        }));
        local.apply(serde_json::json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": "strait-remote-reader-c2"}, "rules": [],
        }));
    };
    let link = |extra: &[&'static str]| {
        let mut all: Vec<std::ffi::OsString> = vec!["link".into()];
        all.extend(args(extra));
        all
    };
    let unlink = |extra: &[&'static str]| {
        let mut all: Vec<std::ffi::OsString> = vec!["unlink".into()];
        all.extend(args(extra));
        all
    };
    let run = |all: Vec<std::ffi::OsString>| {
        let local_admin = local_admin.clone();
        let dir = dir.path().to_owned();
        async move {
            let refs: Vec<&std::ffi::OsStr> = all.iter().map(|a| a.as_os_str()).collect();
            strait(&refs, &local_admin, &dir).await
        }
    };

    let linked = run(link(&["--apply"])).await;
    assert!(linked.status.success(), "{}", text(&linked));
    the_other_way();
    let unlinked = run(unlink(&[])).await;
    assert!(unlinked.status.success(), "{}", text(&unlinked));
    assert!(
        String::from_utf8_lossy(&unlinked.stdout).contains(
            "a link the other way (c2 reading this cluster's API server), if any, is left: add --both"
        ),
        "{}",
        text(&unlinked)
    );
    assert!(remote.object("Secret", "strait-remotes", "c1").is_some());
    assert!(local.object("Secret", "strait-remotes", "c2").is_none());

    let linked = run(link(&["--apply"])).await;
    assert!(linked.status.success(), "{}", text(&linked));
    let unlinked = run(unlink(&["--both"])).await;
    assert!(unlinked.status.success(), "{}", text(&unlinked));
    assert!(
        String::from_utf8_lossy(&unlinked.stdout).contains(
            "and the other way: Secret strait-remotes/c1 in c2 and the reader strait-remote-reader-c2 here deleted"
        ),
        "{}",
        text(&unlinked)
    );
    assert!(local.object("Secret", "strait-remotes", "c2").is_none());
    assert!(
        remote.object("Secret", "strait-remotes", "c1").is_none(),
        "c2's link to c1 is gone"
    );
    for kind in ["ServiceAccount", "ClusterRole"] {
        assert!(
            local
                .object(kind, "strait-system", "strait-remote-reader-c2")
                .is_none(),
            "c2's reader {kind} here is gone"
        );
    }
    let refused = run(link(&["--both"])).await;
    assert!(!refused.status.success(), "{}", text(&refused));
}
