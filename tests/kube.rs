//! The Kubernetes source against live API servers.
//!
//! No Kubernetes API server can be installed on these machines, so these
//! tests run `kube_api::ApiServer`, an in-process server that stands in for
//! one: it speaks the API's real list/watch wire protocol over HTTP
//! (discovery documents, resourceVersion, ADDED/MODIFIED/DELETED/BOOKMARK
//! events, `410 Gone`), and the real kube-rs client reaches it through
//! ordinary kubeconfig files. What only a real server shows (authentication,
//! TLS, RBAC, API priority and fairness, real EndpointSlice controllers) is
//! not covered here.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on what they set up

#[path = "kube/cli.rs"]
mod cli;
#[path = "kube/isolation.rs"]
mod isolation;
mod kube_api;
#[path = "kube/link.rs"]
mod link;
#[path = "kube/link_feed.rs"]
mod link_feed;
#[path = "kube/rebuild.rs"]
mod rebuild;
#[path = "kube/resilience.rs"]
mod resilience;
#[path = "kube/secrets.rs"]
mod secrets;
#[path = "support/mod.rs"]
mod support;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use kube_api::ApiServer;
use kube_api::admin::{get, get_until};
use kube_api::fixtures::{
    export, gateway, import, populate, property, remote_secret, service, slice,
};
use serde_json::{Value, json};
use strait::discovery::kube::{
    AccessScope, KubeHandle, KubeOptions, SourceSnapshot, SyncState, WATCH_VERBS,
    WATCHED_RESOURCES, load_once,
};
use strait::merge::merge;
use strait::model::ServiceKey;
use strait::routing::RouteTable;

/// Longest wait for one expected change.
const WAIT: Duration = Duration::from_secs(10);

fn options(local: &Path, remotes: &[&Path]) -> KubeOptions {
    kube_api::fixtures::kube_options(local, remotes)
}

// ---- reading snapshots ---------------------------------------------------

async fn until(
    handle: &KubeHandle,
    what: &str,
    mut done: impl FnMut(&SourceSnapshot) -> bool,
) -> Arc<SourceSnapshot> {
    let snapshot = handle.wait_for(WAIT, |s| done(s)).await;
    assert!(
        done(&snapshot),
        "timed out waiting for {what}; last snapshot: {:#?}\nset: {:?}",
        snapshot.clusters,
        snapshot
            .set
            .as_ref()
            .map(|s| s.clusters.keys().collect::<Vec<_>>())
    );
    snapshot
}

/// The backends of `shop/<service>:80` seen from `viewer`, as
/// `cluster address:port`, sorted; empty when the set is invalid.
fn backends(snapshot: &SourceSnapshot, viewer: &str, service: &str) -> Vec<String> {
    match &snapshot.set {
        Ok(set) => routed(set, viewer, service, 80),
        Err(_) => Vec::new(),
    }
}

/// The backends of `shop/<service>:<port>` in `set` seen from `viewer`, as
/// `cluster address:port`, sorted.
fn routed(set: &strait::model::ClusterSet, viewer: &str, service: &str, port: u16) -> Vec<String> {
    let merged = merge(set);
    let Ok(table) = RouteTable::build(set, &merged, viewer) else {
        return Vec::new();
    };
    let mut found: Vec<String> = table
        .service("shop", service)
        .and_then(|s| s.port(strait::model::Protocol::Tcp, port))
        .map(|route| {
            route
                .backends
                .iter()
                .map(|b| {
                    format!(
                        "{} {}:{}",
                        b.backend.cluster, b.backend.address, b.backend.port
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    found.sort();
    found
}

fn state_of(snapshot: &SourceSnapshot, id: &str) -> Option<SyncState> {
    snapshot
        .clusters
        .iter()
        .find(|c| c.id.as_deref() == Some(id))
        .map(|c| c.state)
}

fn cluster_network(snapshot: &SourceSnapshot, id: &str) -> Option<String> {
    let set = snapshot.set.as_ref().ok()?;
    Some(set.cluster(id)?.network.to_string())
}

// ---- tests -----------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn initial_sync_reads_both_crd_versions_and_every_kind() {
    let dir = tempfile::tempdir().expect("temp dir");
    let local = ApiServer::start(&["v1beta1", "v1alpha1"]).await;
    let remote = ApiServer::start(&["v1alpha1"]).await;
    populate(&local, "c1", "net-a", "v1beta1", "198.51.100.1", "10.1.0.1");
    local.apply(import("cart", "10.200.0.1", "v1beta1"));
    populate(
        &remote,
        "c2",
        "net-b",
        "v1alpha1",
        "198.51.100.2",
        "10.2.0.1",
    );
    let handle = KubeHandle::start(options(
        &local.write_kubeconfig(dir.path(), "local"),
        &[&remote.write_kubeconfig(dir.path(), "remote")],
    ))
    .await
    .expect("source starts");

    let snapshot = until(&handle, "both clusters synced", |s| s.all_synced()).await;
    assert_eq!(snapshot.local.as_deref(), Some("c1"));
    let set = snapshot.set.as_ref().expect("a valid set");
    assert_eq!(set.clusters.len(), 2);
    let c1 = set.cluster("c1").expect("c1");
    assert_eq!(c1.network.to_string(), "net-a");
    assert_eq!(c1.gateways.len(), 1);
    assert_eq!(c1.source, "cluster local API");
    let key = ServiceKey::new("shop", "cart");
    assert_eq!(
        c1.imports.get(&key).map(|ips| ips.len()),
        Some(1),
        "the local ServiceImport's VIP"
    );
    let c2 = set.cluster("c2").expect("c2");
    assert!(
        c2.imports.is_empty(),
        "ServiceImports are read locally only"
    );
    assert_eq!(
        backends(&snapshot, "c1", "cart"),
        ["c1 10.1.0.1:8080", "c2 10.2.0.1:8080"]
    );
    // The CRDs are read in the best version each server offers.
    let versions = |source: &str| {
        snapshot
            .clusters
            .iter()
            .find(|c| c.source.starts_with(source))
            .and_then(|c| c.versions.get("ServiceExport").cloned())
    };
    assert_eq!(
        versions("local").as_deref(),
        Some("multicluster.x-k8s.io/v1beta1")
    );
    assert_eq!(
        versions("kubeconfig").as_deref(),
        Some("multicluster.x-k8s.io/v1alpha1")
    );
    assert!(local.lists("serviceimports") >= 1);
    assert_eq!(remote.lists("serviceimports"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn added_modified_and_deleted_objects_of_every_kind_change_the_set() {
    let dir = tempfile::tempdir().expect("temp dir");
    let server = ApiServer::start(&["v1alpha1"]).await;
    server.apply(property("cluster.clusterset.k8s.io", "c1", "v1alpha1"));
    let handle = KubeHandle::start(options(&server.write_kubeconfig(dir.path(), "c1"), &[]))
        .await
        .expect("source starts");
    until(&handle, "c1 synced", |s| s.all_synced()).await;
    let gateways = |s: &SourceSnapshot| {
        s.set
            .as_ref()
            .ok()
            .and_then(|set| set.cluster("c1").map(|c| c.gateways.len()))
    };
    let vip = |s: &SourceSnapshot| {
        s.set.as_ref().ok().and_then(|set| {
            set.cluster("c1")?
                .imports
                .get(&ServiceKey::new("shop", "cart"))
                .map(|ips| ips.iter().map(ToString::to_string).collect::<Vec<_>>())
        })
    };

    // ADDED, kind by kind.
    server.apply(property("network.clusterset.k8s.io", "net-a", "v1alpha1"));
    until(&handle, "network added", |s| {
        cluster_network(s, "c1").as_deref() == Some("net-a")
    })
    .await;
    server.apply(gateway("198.51.100.1"));
    until(&handle, "gateway added", |s| gateways(s) == Some(1)).await;
    server.apply(service("cart", &[("http", 80)]));
    server.apply(export("cart", "v1alpha1"));
    until(&handle, "service exported", |s| {
        s.set
            .as_ref()
            .is_ok_and(|set| set.cluster("c1").is_some_and(|c| c.services.len() == 1))
    })
    .await;
    server.apply(slice("cart", "cart-1", &[("10.1.0.1", true)]));
    until(&handle, "endpoint added", |s| {
        backends(s, "c1", "cart") == ["c1 10.1.0.1:8080"]
    })
    .await;
    server.apply(import("cart", "10.200.0.1", "v1alpha1"));
    until(&handle, "import added", |s| {
        vip(s) == Some(vec!["10.200.0.1".to_owned()])
    })
    .await;

    // MODIFIED.
    server.apply(property("network.clusterset.k8s.io", "net-b", "v1alpha1"));
    until(&handle, "network modified", |s| {
        cluster_network(s, "c1").as_deref() == Some("net-b")
    })
    .await;
    server.apply(slice(
        "cart",
        "cart-1",
        &[("10.1.0.1", false), ("10.1.0.2", true)],
    ));
    until(&handle, "endpoints modified", |s| {
        backends(s, "c1", "cart") == ["c1 10.1.0.2:8080"]
    })
    .await;
    server.apply(service("cart", &[("http", 80), ("admin", 9000)]));
    until(&handle, "service ports modified", |s| {
        s.set.as_ref().is_ok_and(|set| {
            set.cluster("c1")
                .and_then(|c| c.services.get(&ServiceKey::new("shop", "cart")))
                .is_some_and(|svc| svc.spec.ports.len() == 2)
        })
    })
    .await;
    let mut labelled = export("cart", "v1alpha1");
    labelled["spec"] = json!({"exportedLabels": {"tier": "web"}});
    server.apply(labelled);
    until(&handle, "export modified", |s| {
        s.set.as_ref().is_ok_and(|set| {
            set.cluster("c1")
                .and_then(|c| c.services.get(&ServiceKey::new("shop", "cart")))
                .and_then(|svc| svc.export.as_ref())
                .is_some_and(|e| e.exported_labels.get("tier").map(String::as_str) == Some("web"))
        })
    })
    .await;
    server.apply(import("cart", "10.200.0.2", "v1alpha1"));
    until(&handle, "import modified", |s| {
        vip(s) == Some(vec!["10.200.0.2".to_owned()])
    })
    .await;
    server.apply(gateway("198.51.100.9"));
    until(&handle, "gateway modified", |s| {
        s.set.as_ref().is_ok_and(|set| {
            set.cluster("c1").is_some_and(|c| {
                c.gateways
                    .iter()
                    .any(|g| g.to_string().starts_with("198.51.100.9"))
            })
        })
    })
    .await;

    // DELETED.
    server.delete("EndpointSlice", "shop", "cart-1");
    until(&handle, "endpoints deleted", |s| {
        backends(s, "c1", "cart").is_empty() && s.set.is_ok()
    })
    .await;
    server.delete("ServiceImport", "shop", "cart");
    until(&handle, "import deleted", |s| {
        s.set.is_ok() && vip(s).is_none()
    })
    .await;
    server.delete("ServiceExport", "shop", "cart");
    until(&handle, "export deleted", |s| {
        s.set
            .as_ref()
            .is_ok_and(|set| set.cluster("c1").is_some_and(|c| c.services.is_empty()))
    })
    .await;
    server.delete("Service", "shop", "cart");
    server.delete("Service", "strait-system", "strait-gateway");
    until(&handle, "gateway deleted", |s| gateways(s) == Some(0)).await;
    server.delete("ClusterProperty", "", "network.clusterset.k8s.io");
    until(&handle, "network deleted", |s| {
        cluster_network(s, "c1").as_deref() == Some("default")
    })
    .await;
    server.delete("ClusterProperty", "", "cluster.clusterset.k8s.io");
    let snapshot = until(&handle, "the cluster id deleted", |s| s.set.is_err()).await;
    let errors = snapshot
        .set
        .as_ref()
        .expect_err("no cluster id")
        .to_string();
    assert!(
        errors.contains("cluster local API") && errors.contains("cluster.clusterset.k8s.io"),
        "{errors}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_watch_resumes_without_relisting() {
    let dir = tempfile::tempdir().expect("temp dir");
    let server = ApiServer::start(&["v1beta1"]).await;
    populate(
        &server,
        "c1",
        "net-a",
        "v1beta1",
        "198.51.100.1",
        "10.1.0.1",
    );
    let handle = KubeHandle::start(options(&server.write_kubeconfig(dir.path(), "c1"), &[]))
        .await
        .expect("source starts");
    until(&handle, "c1 synced", |s| s.all_synced()).await;
    let lists = server.lists("endpointslices");
    let watches = server.watches("endpointslices");

    server.drop_watches();
    server.apply(slice("cart", "cart-1", &[("10.1.0.7", true)]));
    let snapshot = until(&handle, "the change after the drop", |s| {
        backends(s, "c1", "cart") == ["c1 10.1.0.7:8080"]
    })
    .await;
    assert!(server.watches("endpointslices") > watches, "watched again");
    assert_eq!(
        server.lists("endpointslices"),
        lists,
        "resumed from its resource version, not relisted"
    );
    assert_eq!(server.gone("endpointslices"), 0);
    assert_eq!(state_of(&snapshot, "c1"), Some(SyncState::Synced));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_resource_version_relists() {
    let dir = tempfile::tempdir().expect("temp dir");
    let server = ApiServer::start(&["v1beta1"]).await;
    populate(
        &server,
        "c1",
        "net-a",
        "v1beta1",
        "198.51.100.1",
        "10.1.0.1",
    );
    let handle = KubeHandle::start(options(&server.write_kubeconfig(dir.path(), "c1"), &[]))
        .await
        .expect("source starts");
    until(&handle, "c1 synced", |s| s.all_synced()).await;
    let lists = server.lists("endpointslices");

    // A change whose event is lost: only a relist can find it.
    server.apply_silently(slice("cart", "cart-1", &[("10.1.0.9", true)]));
    server.compact_and_drop_watches();
    let snapshot = until(&handle, "the relisted change", |s| {
        backends(s, "c1", "cart") == ["c1 10.1.0.9:8080"]
    })
    .await;
    assert!(server.gone("endpointslices") >= 1, "the resume was refused");
    assert!(
        server.lists("endpointslices") > lists,
        "410 Gone made the watcher list again"
    );
    assert_eq!(state_of(&snapshot, "c1"), Some(SyncState::Synced));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_api_keeps_its_state_then_goes_stale_and_resyncs() {
    let dir = tempfile::tempdir().expect("temp dir");
    let local = ApiServer::start(&["v1beta1"]).await;
    let remote = ApiServer::start(&["v1beta1"]).await;
    populate(&local, "c1", "net-a", "v1beta1", "198.51.100.1", "10.1.0.1");
    populate(
        &remote,
        "c2",
        "net-b",
        "v1beta1",
        "198.51.100.2",
        "10.2.0.1",
    );
    let mut options = options(
        &local.write_kubeconfig(dir.path(), "local"),
        &[&remote.write_kubeconfig(dir.path(), "remote")],
    );
    options.stale_after = Duration::from_secs(1);
    let handle = KubeHandle::start(options).await.expect("source starts");
    until(&handle, "both synced", |s| s.all_synced()).await;

    remote.stop().await;
    let unsynced = until(&handle, "c2 unsynced", |s| {
        state_of(s, "c2") == Some(SyncState::Unsynced)
    })
    .await;
    assert_eq!(
        backends(&unsynced, "c1", "cart"),
        ["c1 10.1.0.1:8080", "c2 10.2.0.1:8080"],
        "an unsynced cluster keeps its last known backends"
    );
    let stale = until(&handle, "c2 stale", |s| {
        state_of(s, "c2") == Some(SyncState::Stale)
    })
    .await;
    assert_eq!(backends(&stale, "c1", "cart"), ["c1 10.1.0.1:8080"]);
    let status = stale
        .clusters
        .iter()
        .find(|c| c.id.as_deref() == Some("c2"))
        .expect("c2 status");
    assert_eq!(status.stale_count, 1);
    assert!(status.last_error.is_some());
    assert_eq!(state_of(&stale, "c1"), Some(SyncState::Synced));
    let set = stale.set.as_ref().expect("still valid");
    assert!(
        set.cluster("c2").is_some_and(|c| !c.gateways.is_empty()),
        "a stale cluster keeps its identity and gateways, not its backends"
    );

    // It changed while away; coming back, it resyncs from a full list.
    remote.apply(slice("cart", "cart-1", &[("10.2.0.5", true)]));
    remote.restart().await;
    let back = until(&handle, "c2 resynced", |s| {
        state_of(s, "c2") == Some(SyncState::Synced)
            && backends(s, "c1", "cart") == ["c1 10.1.0.1:8080", "c2 10.2.0.5:8080"]
    })
    .await;
    assert!(back.all_synced());
}

/// Waits until `count` (requests the server saw) is at least one.
async fn until_requested(what: &str, count: impl Fn() -> usize) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while count() == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watchers_use_exactly_the_watched_resources() {
    // The stand-in server answers list and watch requests only (anything
    // else is a 404 and the cluster would not sync), so the verbs are
    // WATCH_VERBS; this checks that every resource of WATCHED_RESOURCES is
    // listed and watched, where the constant says.
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
    local.apply(remote_secret("c2", &remote.kubeconfig("c2"), true));
    let handle = KubeHandle::start(options(&local.write_kubeconfig(dir.path(), "local"), &[]))
        .await
        .expect("source starts");
    until(&handle, "c1 and c2 synced", |s| {
        s.all_synced() && s.clusters.len() == 2
    })
    .await;

    for access in WATCHED_RESOURCES {
        assert_eq!(access.verbs, WATCH_VERBS, "{}", access.resource);
        let resource = access.resource;
        until_requested(
            &format!("a list of {resource} in the local cluster"),
            || local.lists(resource),
        )
        .await;
        until_requested(
            &format!("a watch of {resource} in the local cluster"),
            || local.watches(resource),
        )
        .await;
        // A remote cluster is read for its exports and endpoints; its
        // imports and Secrets are not Strait's business.
        let in_remote = access.scope == AccessScope::Cluster && resource != "serviceimports";
        if in_remote {
            until_requested(&format!("a list of {resource} in c2"), || {
                remote.lists(resource)
            })
            .await;
            until_requested(&format!("a watch of {resource} in c2"), || {
                remote.watches(resource)
            })
            .await;
        } else {
            assert_eq!(remote.lists(resource), 0, "{resource} listed in c2");
            assert_eq!(remote.watches(resource), 0, "{resource} watched in c2");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn load_once_reads_the_set_or_names_the_clusters_that_did_not_sync() {
    let dir = tempfile::tempdir().expect("temp dir");
    let local = ApiServer::start(&["v1beta1"]).await;
    populate(&local, "c1", "net-a", "v1beta1", "198.51.100.1", "10.1.0.1");
    let kubeconfig = local.write_kubeconfig(dir.path(), "local");
    let loaded = load_once(options(&kubeconfig, &[]), WAIT)
        .await
        .expect("loads");
    assert_eq!(loaded.local.as_deref(), Some("c1"));
    assert_eq!(loaded.loaded.set.clusters.len(), 1);

    let gone = ApiServer::start(&["v1beta1"]).await;
    let unreachable = gone.write_kubeconfig(dir.path(), "gone");
    gone.stop().await;
    let error = load_once(
        options(&kubeconfig, &[&unreachable]),
        Duration::from_secs(1),
    )
    .await
    .expect_err("one cluster cannot sync");
    let message = error.to_string();
    assert!(
        message.contains("not synced") && message.contains("gone.yaml"),
        "{message}"
    );
}

// ---- the gateway and the commands ------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_routes_from_the_api_and_reports_cluster_sync() {
    use strait::gateway::{Gateway, GatewayOptions, Listeners};
    use strait::state::DialOverrides;

    let dir = tempfile::tempdir().expect("temp dir");
    let local = ApiServer::start(&["v1beta1"]).await;
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
    let mut source = options(
        &local.write_kubeconfig(dir.path(), "local"),
        &[&remote.write_kubeconfig(dir.path(), "remote")],
    );
    source.stale_after = Duration::from_secs(1);
    let handle = KubeHandle::start(source).await.expect("source starts");
    until(&handle, "both synced", |s| s.all_synced()).await;

    let certs = dir.path().join("certs");
    let ids = ["c1", "c2"].map(|id| strait::model::ClusterId::new(id).expect("cluster id"));
    strait::tls::write_cluster_set(&certs, "test.strait.dev", &ids).expect("certificates");
    let bind = || async {
        tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind")
    };
    let listeners = Listeners {
        connect: bind().await,
        tunnel: bind().await,
        admin: bind().await,
        cluster_set_ip: Vec::new(),
        dns: None,
    };
    let options = GatewayOptions {
        config_dir: dir.path().to_owned(),
        settings: strait::config::GatewaySettings::default(),
        cluster: "c1".to_owned(),
        tls_dir: certs.join("c1"),
        dial_source: None,
        overrides: DialOverrides::default(),
        tunnel: strait::tunnel::TunnelSettings::default(),
        kube: Some(handle.clone()),
        controller: None,
    };
    let gateway = Gateway::start(options, listeners)
        .await
        .expect("gateway starts");
    let admin = gateway.addresses().admin;

    let routes = get(admin, "/debug/routes").await;
    assert!(
        routes.contains("10.1.0.1") && routes.contains("10.2.0.1"),
        "{routes}"
    );
    let metrics = get(admin, "/metrics").await;
    for needle in [
        r#"strait_cluster_synced{cluster="c1"} 1"#,
        r#"strait_cluster_synced{cluster="c2"} 1"#,
        r#"strait_cluster_stale{cluster="c2"} 0"#,
    ] {
        assert!(metrics.contains(needle), "missing {needle}:\n{metrics}");
    }
    let clusters: Value = serde_json::from_str(&get(admin, "/debug/clusters").await).expect("JSON");
    let states: Vec<(&str, &str)> = clusters["clusters"]
        .as_array()
        .expect("clusters")
        .iter()
        .map(|c| {
            (
                c["id"].as_str().unwrap_or(""),
                c["state"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(states, [("c1", "synced"), ("c2", "synced")]);
    assert_eq!(clusters["valid"], true);

    // A change in the remote cluster reaches the running gateway's routes.
    remote.apply(slice("cart", "cart-1", &[("10.2.0.5", true)]));
    get_until(admin, "/debug/routes", "the new remote endpoint", |body| {
        body.contains("10.2.0.5") && !body.contains("10.2.0.1")
    })
    .await;

    // The remote API goes away: past staleAfter its backends are dropped.
    remote.stop().await;
    get_until(admin, "/metrics", "c2 stale", |body| {
        body.contains(r#"strait_cluster_stale{cluster="c2"} 1"#)
            && body.contains(r#"strait_cluster_went_stale_total{cluster="c2"} 1"#)
            && body.contains(r#"strait_cluster_synced{cluster="c2"} 0"#)
    })
    .await;
    get_until(admin, "/debug/routes", "c2's backends dropped", |body| {
        body.contains("10.1.0.1") && !body.contains("10.2.0.5")
    })
    .await;
    let clusters = get(admin, "/debug/clusters").await;
    assert!(clusters.contains("\"stale\""), "{clusters}");

    remote.restart().await;
    get_until(admin, "/debug/routes", "c2 back", |body| {
        body.contains("10.2.0.5")
    })
    .await;
    gateway.shutdown(Duration::from_secs(1)).await;
}
