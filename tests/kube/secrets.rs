//! Remote-cluster Secrets at run time: added and removed, and changed make
//! before break (the old connection's objects serve until the new
//! connection has synced; a new kubeconfig that never syncs changes nothing),
//! also under traffic through a real gateway.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remote_cluster_secrets_are_added_and_removed_at_run_time() {
    let dir = tempfile::tempdir().expect("temp dir");
    let local = ApiServer::start(&["v1beta1"]).await;
    let remote = ApiServer::start_tls(&["v1alpha1"]).await;
    populate(&local, "c1", "net-a", "v1beta1", "198.51.100.1", "10.1.0.1");
    populate(
        &remote,
        "c2",
        "net-b",
        "v1alpha1",
        "198.51.100.2",
        "10.2.0.1",
    );
    // An unlabelled Secret is not a remote cluster.
    local.apply(remote_secret("other", &remote.kubeconfig("c2"), false));
    let handle = KubeHandle::start(options(&local.write_kubeconfig(dir.path(), "local"), &[]))
        .await
        .expect("source starts");
    let snapshot = until(&handle, "c1 synced", |s| s.all_synced()).await;
    assert_eq!(snapshot.clusters.len(), 1);
    assert_eq!(backends(&snapshot, "c1", "cart"), ["c1 10.1.0.1:8080"]);

    local.apply(remote_secret("c2", &remote.kubeconfig("c2"), true));
    let snapshot = until(&handle, "c2 added", |s| {
        s.all_synced() && backends(s, "c1", "cart") == ["c1 10.1.0.1:8080", "c2 10.2.0.1:8080"]
    })
    .await;
    assert!(
        snapshot
            .clusters
            .iter()
            .any(|c| c.source == "secret strait-system/c2" && c.id.as_deref() == Some("c2"))
    );

    local.delete("Secret", "strait-system", "c2");
    let snapshot = until(&handle, "c2 removed", |s| {
        s.clusters.len() == 1 && backends(s, "c1", "cart") == ["c1 10.1.0.1:8080"]
    })
    .await;
    assert!(
        snapshot
            .set
            .as_ref()
            .is_ok_and(|set| set.cluster("c2").is_none())
    );

    // A Secret without a usable kubeconfig is reported, not fatal.
    local.apply(remote_secret("broken", "not: [a kubeconfig", true));
    let snapshot = until(&handle, "the broken Secret reported", |s| {
        s.clusters
            .iter()
            .any(|c| c.source.ends_with("/broken") && c.last_error.is_some())
    })
    .await;
    assert!(snapshot.set.is_ok(), "c1 still routes");

    // Whoever writes a remote-cluster Secret must not make the gateway run
    // a command, read its own token or key files, go through a proxy or
    // talk in plain text: each such kubeconfig is refused, naming the field,
    // and never connects (the server is c2's, which would sync otherwise).
    let good = remote.kubeconfig("c2");
    let owned = dir.path().join("owned");
    let owned_path = owned.display();
    let server = format!("https://{}", remote.address());
    let hostile = [
        (
            "exec",
            good.replace(
                "    token: test-token",
                &format!("    exec: {{apiVersion: client.authentication.k8s.io/v1, command: /bin/sh, args: [-c, 'touch {owned_path}']}}"),
            ),
            "users[0].user.exec",
        ),
        (
            "token-file",
            good.replace(
                "    token: test-token",
                "    tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token",
            ),
            "users[0].user.tokenFile",
        ),
        (
            "plain-http",
            good.replace(&server, &format!("http://{}", remote.address())),
            "clusters[0].cluster.server",
        ),
        (
            "insecure",
            good.replace(
                "    certificate-authority-data:",
                "    insecure-skip-tls-verify: true\n    x-dropped:",
            ),
            "clusters[0].cluster.insecure-skip-tls-verify",
        ),
        (
            "proxied",
            good.replace(
                &server,
                &format!("{server}\n    proxy-url: http://198.51.100.7:3128"),
            ),
            "clusters[0].cluster.proxy-url",
        ),
    ];
    for (name, kubeconfig, _) in &hostile {
        assert_ne!(kubeconfig, &good, "{name}: the test changed nothing");
        local.apply(remote_secret(name, kubeconfig, true));
    }
    let snapshot = until(&handle, "every hostile Secret refused", |s| {
        hostile.iter().all(|(name, _, field)| {
            s.clusters.iter().any(|c| {
                c.source == format!("secret strait-system/{name}")
                    && c.last_error.as_deref().is_some_and(|e| e.contains(field))
            })
        })
    })
    .await;
    for (name, _, _) in &hostile {
        let status = snapshot
            .clusters
            .iter()
            .find(|c| c.source == format!("secret strait-system/{name}"))
            .expect("reported");
        assert_eq!(status.id, None, "{name} never connected: {status:?}");
    }
    assert!(!owned.exists(), "the exec plugin ran");
}

/// A changed Secret (a token rotation, a moved API server) opens the new
/// connection beside the old one and swaps only once it has synced: c2's
/// backends are in every snapshot throughout, first from the old server,
/// then from the new one. A kubeconfig that cannot connect changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_secret_swaps_only_after_the_new_connection_synced() {
    let dir = tempfile::tempdir().expect("temp dir");
    let local = ApiServer::start(&["v1beta1"]).await;
    let old = ApiServer::start_tls(&["v1beta1"]).await;
    let new = ApiServer::start_tls(&["v1beta1"]).await;
    populate(&local, "c1", "net-a", "v1beta1", "198.51.100.1", "10.1.0.1");
    populate(&old, "c2", "net-b", "v1beta1", "198.51.100.2", "10.2.0.1");
    populate(&new, "c2", "net-b", "v1beta1", "198.51.100.2", "10.2.0.9");
    local.apply(remote_secret("c2", &old.kubeconfig("c2"), true));
    let handle = KubeHandle::start(options(&local.write_kubeconfig(dir.path(), "local"), &[]))
        .await
        .expect("source starts");
    let old_backends = ["c1 10.1.0.1:8080", "c2 10.2.0.1:8080"];
    let new_backends = ["c1 10.1.0.1:8080", "c2 10.2.0.9:8080"];
    until(&handle, "c2 through the old server", |s| {
        s.all_synced() && backends(s, "c1", "cart") == old_backends
    })
    .await;

    // A kubeconfig that reaches nothing: the old connection keeps serving.
    let nowhere = old
        .kubeconfig("c2")
        .replace(&format!("https://{}", old.address()), "https://127.0.0.1:9");
    assert_ne!(nowhere, old.kubeconfig("c2"));
    local.apply(remote_secret("c2", &nowhere, true));
    let started = std::time::Instant::now();
    while started.elapsed() < Duration::from_secs(2) {
        let snapshot = handle.snapshot();
        assert_eq!(
            backends(&snapshot, "c1", "cart"),
            old_backends,
            "the old connection serves while the new one cannot sync"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // A kubeconfig that syncs: the swap, and no snapshot without c2.
    local.apply(remote_secret("c2", &new.kubeconfig("c2"), true));
    let started = std::time::Instant::now();
    loop {
        let seen = backends(&handle.snapshot(), "c1", "cart");
        if seen == new_backends {
            break;
        }
        assert_eq!(seen, old_backends, "c2 is never missing during the swap");
        assert!(
            started.elapsed() < WAIT,
            "the new connection never took over"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // The old server's changes no longer count.
    old.delete("EndpointSlice", "shop", "cart-1");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(backends(&handle.snapshot(), "c1", "cart"), new_backends);

    // A deleted Secret removes the cluster.
    local.delete("Secret", "strait-system", "c2");
    until(&handle, "c2 removed", |s| {
        backends(s, "c1", "cart") == ["c1 10.1.0.1:8080"]
    })
    .await;
}

/// A token rotation under traffic: a gateway whose only backend of
/// `shop/cart` is remote cluster c2's pod carries connections, one after
/// another, while c2's Secret changes to another API server (holding c2's
/// objects with the pod at a new address). Every connection is admitted and
/// echoes: there is no moment without c2's backend. (With the hub changed
/// to remove the cluster and add it again, as a check of this test, some
/// CONNECTs were answered 503 while the new connection synced.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_rotation_under_traffic_refuses_no_connection() {
    use std::sync::atomic::{AtomicBool, Ordering};

    use crate::support::{self, Backend};

    let dir = tempfile::tempdir().expect("temp dir");
    let local = ApiServer::start(&["v1beta1"]).await;
    let old = ApiServer::start_tls(&["v1beta1"]).await;
    let new = ApiServer::start_tls(&["v1beta1"]).await;
    // c1 exports cart with no endpoint of its own: c2's pod is its only backend.
    populate(&local, "c1", "net-a", "v1beta1", "198.51.100.1", "10.1.0.1");
    local.delete("EndpointSlice", "shop", "cart-1");
    let (old_pod, new_pod) = (support::pod_ip(62, 10), support::pod_ip(62, 11));
    let old_backend = Backend::start("old", (old_pod, 8080).into()).await;
    let new_backend = Backend::start("new", (new_pod, 8080).into()).await;
    for (server, pod) in [(&old, old_pod), (&new, new_pod)] {
        populate(
            server,
            "c2",
            "net-a",
            "v1beta1",
            "198.51.100.2",
            &pod.to_string(),
        );
    }
    local.apply(remote_secret("c2", &old.kubeconfig("c2"), true));

    let mut kube = options(&local.write_kubeconfig(dir.path(), "local"), &[]);
    kube.translate.allow_loopback_endpoints = true;
    let handle = KubeHandle::start(kube).await.expect("source starts");
    until(&handle, "c2 through the old server", |s| {
        s.all_synced() && backends(s, "c1", "cart") == [format!("c2 {old_pod}:8080")]
    })
    .await;
    let certs = support::certificates(dir.path(), &["c1", "c2"]);
    let listeners = support::bind_gateway(61).await;
    let connect_address = listeners.connect.local_addr().expect("connect address");
    let _gateway =
        support::start_kube_gateway(dir.path(), &certs, "c1", 61, listeners, handle.clone()).await;

    let authority = "cart.shop.svc.clusterset.local:80";
    let stop = Arc::new(AtomicBool::new(false));
    let traffic = tokio::spawn({
        let stop = stop.clone();
        async move {
            // (greeted by, or the status of a refused CONNECT)
            let mut outcomes: Vec<Result<String, u16>> = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let connected = support::connect(connect_address, authority).await;
                match connected.stream {
                    Some(stream) => {
                        assert_eq!(support::echo(stream, b"ping").await, b"ping");
                        let name = connected.greeting.split(' ').next().unwrap_or_default();
                        outcomes.push(Ok(name.to_owned()));
                    }
                    None => outcomes.push(Err(connected.status)),
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            outcomes
        }
    });
    let until_backend = |pod: std::net::IpAddr, what: &'static str| {
        let handle = handle.clone();
        async move {
            until(&handle, what, |s| {
                backends(s, "c1", "cart") == [format!("c2 {pod}:8080")]
            })
            .await;
        }
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    local.apply(remote_secret("c2", &new.kubeconfig("c2"), true));
    until_backend(new_pod, "the new server's c2 in use").await;
    // The old server is gone for good: what serves now is the new one.
    old.stop().await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, Ordering::Relaxed);
    let outcomes = traffic.await.expect("traffic task");

    let refused: Vec<u16> = outcomes.iter().filter_map(|o| o.clone().err()).collect();
    assert!(
        refused.is_empty(),
        "{} of {} connections refused during the rotation: {refused:?}",
        refused.len(),
        outcomes.len()
    );
    let greeted: Vec<&str> = outcomes.iter().filter_map(|o| o.as_deref().ok()).collect();
    assert!(
        greeted.contains(&"old") && greeted.last() == Some(&"new"),
        "{greeted:?}"
    );
    assert!(old_backend.accepted() > 0 && new_backend.accepted() > 0);
}
