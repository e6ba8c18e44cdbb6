//! The cost of a change: only the cluster whose objects changed is
//! translated again; a change of the set's exported services translates
//! every cluster (their Services and EndpointSlices are read only for
//! exported services).

use super::*;

fn translations(snapshot: &SourceSnapshot, id: &str) -> u64 {
    snapshot
        .clusters
        .iter()
        .find(|c| c.id.as_deref() == Some(id))
        .map(|c| c.translations)
        .unwrap_or_else(|| panic!("no cluster {id}: {:#?}", snapshot.clusters))
}

/// c1 (local) and c2 (remote), populated, read by a source until both
/// have synced.
struct Synced {
    local: ApiServer,
    remote: ApiServer,
    handle: KubeHandle,
    synced: std::sync::Arc<SourceSnapshot>,
    _dir: tempfile::TempDir,
}

impl Synced {
    async fn start() -> Synced {
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
        let handle = KubeHandle::start(options(
            &local.write_kubeconfig(dir.path(), "local"),
            &[&remote.write_kubeconfig(dir.path(), "remote")],
        ))
        .await
        .expect("source starts");
        let synced = until(&handle, "both synced", |s| s.all_synced()).await;
        Synced {
            local,
            remote,
            handle,
            synced,
            _dir: dir,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endpoint_change_translates_only_its_own_cluster() {
    let Synced {
        local: _local,
        remote,
        handle,
        synced,
        _dir,
    } = Synced::start().await;
    let (c1, c2) = (translations(&synced, "c1"), translations(&synced, "c2"));
    assert!(c1 >= 1 && c2 >= 1, "each was translated");

    remote.apply(slice("cart", "cart-1", &[("10.2.0.5", true)]));
    let changed = until(&handle, "c2's new endpoint", |s| {
        backends(s, "c1", "cart") == ["c1 10.1.0.1:8080", "c2 10.2.0.5:8080"]
    })
    .await;
    assert_eq!(translations(&changed, "c1"), c1, "c1 did not change");
    assert!(translations(&changed, "c2") > c2, "c2 was translated again");

    // A new export anywhere changes what every cluster's objects mean.
    let before = (translations(&changed, "c1"), translations(&changed, "c2"));
    remote.apply(service("cart-v2", &[("http", 80)]));
    remote.apply(export("cart-v2", "v1beta1"));
    let exported = until(&handle, "cart-v2 exported", |s| {
        s.set.as_ref().is_ok_and(|set| {
            set.cluster("c2")
                .is_some_and(|c| c.services.contains_key(&ServiceKey::new("shop", "cart-v2")))
        })
    })
    .await;
    assert!(
        translations(&exported, "c1") > before.0,
        "c1 translated for the new export"
    );
    assert!(translations(&exported, "c2") > before.1);
}

/// `reloadDebounce` bounds how often the set is rebuilt; it does not hold
/// back a change that follows a quiet spell. With a debounce longer than
/// the wait, an endpoint change made after a quiet spell still arrives
/// (the old trailing debounce held every change for the whole period), and
/// a second change right after it waits out the period, then arrives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_after_a_quiet_spell_is_published_without_the_debounce() {
    const DEBOUNCE: Duration = Duration::from_secs(8);
    // Shorter than the debounce: what arrives within it was not held.
    const PROMPT: Duration = Duration::from_secs(4);
    let dir = tempfile::tempdir().expect("temp dir");
    let local = ApiServer::start(&["v1beta1"]).await;
    populate(&local, "c1", "net-a", "v1beta1", "198.51.100.1", "10.1.0.1");
    let mut options = options(&local.write_kubeconfig(dir.path(), "local"), &[]);
    options.debounce = DEBOUNCE;
    let handle = KubeHandle::start(options).await.expect("source starts");
    // Syncing takes several reports: the first is published at once, the
    // rest one debounce later.
    let synced = handle
        .wait_for(DEBOUNCE + WAIT, |s| {
            backends(s, "c1", "cart") == ["c1 10.1.0.1:8080"]
        })
        .await;
    assert_eq!(backends(&synced, "c1", "cart"), ["c1 10.1.0.1:8080"]);
    let quiet = tokio::time::Instant::now();
    tokio::time::sleep(DEBOUNCE + Duration::from_secs(1)).await;

    local.apply(slice("cart", "cart-1", &[("10.1.0.5", true)]));
    let changed = handle
        .wait_for(PROMPT, |s| {
            backends(s, "c1", "cart") == ["c1 10.1.0.5:8080"]
        })
        .await;
    assert_eq!(
        backends(&changed, "c1", "cart"),
        ["c1 10.1.0.5:8080"],
        "a change after {:?} of quiet arrives within {PROMPT:?}, though the debounce is {DEBOUNCE:?}",
        quiet.elapsed()
    );

    // Within the period of that publication: held, then published.
    local.apply(slice("cart", "cart-1", &[("10.1.0.6", true)]));
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        backends(&handle.snapshot(), "c1", "cart"),
        ["c1 10.1.0.5:8080"],
        "a change right after a publication waits for the debounce"
    );
    let held = handle
        .wait_for(DEBOUNCE + WAIT, |s| {
            backends(s, "c1", "cart") == ["c1 10.1.0.6:8080"]
        })
        .await;
    assert_eq!(backends(&held, "c1", "cart"), ["c1 10.1.0.6:8080"]);
}

/// Another cluster's Strait writes import objects into its own cluster (a
/// derived Service, the EndpointSlices it manages): they are never read
/// from a remote cluster, so none of those writes reaches this source,
/// while that cluster's other Services and slices still do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_clusters_import_objects_are_not_read() {
    let Synced {
        local,
        remote,
        handle,
        synced,
        _dir,
    } = Synced::start().await;
    let counts = |s: &SourceSnapshot, id: &str, kind: &str| {
        s.clusters
            .iter()
            .find(|c| c.id.as_deref() == Some(id))
            .and_then(|c| c.objects.get(kind).copied())
            .unwrap_or_default()
    };
    let before = (
        counts(&synced, "c2", "Service"),
        counts(&synced, "c2", "EndpointSlice"),
    );
    // c2's Strait imports a service into c2: its derived Service and slice.
    let mut derived = service("derived-0123456789", &[("http", 80)]);
    derived["metadata"]["labels"] = json!({"app.kubernetes.io/managed-by": "strait",
        "multicluster.kubernetes.io/service-name": "elsewhere"});
    remote.apply(derived);
    let mut imported = slice(
        "derived-0123456789",
        "derived-0123456789-a",
        &[("10.2.9.9", true)],
    );
    imported["metadata"]["labels"]["endpointslice.kubernetes.io/managed-by"] =
        json!("imports.strait.dev");
    remote.apply(imported);
    // Then a Service and a slice of its own, on the same watches: once they
    // arrive, the import objects would have too.
    remote.apply(service("later", &[("http", 80)]));
    remote.apply(slice("later", "later-1", &[("10.2.0.7", true)]));
    let after = until(&handle, "c2's own objects", |s| {
        counts(s, "c2", "Service") > before.0 && counts(s, "c2", "EndpointSlice") > before.1
    })
    .await;
    assert_eq!(
        (
            counts(&after, "c2", "Service"),
            counts(&after, "c2", "EndpointSlice")
        ),
        (before.0 + 1, before.1 + 1),
        "only c2's own Service and slice were read"
    );
    // The local cluster's import objects are read: they are its own.
    let local_before = counts(&after, "c1", "Service");
    let mut own = service("derived-abcdef0123", &[("http", 80)]);
    own["metadata"]["labels"] = json!({"app.kubernetes.io/managed-by": "strait"});
    local.apply(own);
    until(&handle, "c1's derived Service", |s| {
        counts(s, "c1", "Service") == local_before + 1
    })
    .await;
}

/// One of Strait's own import objects in the local cluster (a derived
/// Service, a slice it manages) changing, as each of its writes echoes
/// back: the snapshot says so (`imports_revision`, which the routes'
/// import ports follow) but the set is not rebuilt; a Service of the
/// same namespace that is not Strait's still rebuilds it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_local_import_objects_changing_rebuild_no_set() {
    let Synced {
        local,
        remote: _remote,
        handle,
        synced,
        _dir,
    } = Synced::start().await;
    let mut derived = service("derived-0123456789", &[("http", 80)]);
    derived["metadata"]["labels"] = json!({"app.kubernetes.io/managed-by": "strait",
        "multicluster.kubernetes.io/service-name": "cart"});
    local.apply(derived.clone());
    let echoed = until(&handle, "the derived Service", |s| {
        s.imports_revision > synced.imports_revision
    })
    .await;
    assert_eq!(echoed.set_revision, synced.set_revision, "no set rebuilt");
    assert_eq!(
        echoed.translations, synced.translations,
        "nothing translated"
    );
    let mut slice_of_it = slice(
        "derived-0123456789",
        "derived-0123456789-a",
        &[("10.1.0.9", true)],
    );
    slice_of_it["metadata"]["labels"]["endpointslice.kubernetes.io/managed-by"] =
        json!("imports.strait.dev");
    slice_of_it["metadata"]["labels"]["app.kubernetes.io/managed-by"] = json!("strait");
    local.apply(slice_of_it);
    let sliced = until(&handle, "its slice", |s| {
        s.imports_revision > echoed.imports_revision
    })
    .await;
    assert_eq!(sliced.set_revision, synced.set_revision, "no set rebuilt");
    // A ServiceImport's status written (as the reconciler writes `Ready`):
    // published, not rebuilt; its spec changed: rebuilt.
    local.apply(import("cart", "10.96.1.1", "v1beta1"));
    let imported = until(&handle, "the import", |s| {
        s.set_revision > sliced.set_revision
    })
    .await;
    let mut ready = import("cart", "10.96.1.1", "v1beta1");
    ready["status"] = json!({"conditions": [{"type": "Ready", "status": "True"}]});
    local.apply(ready);
    let status = until(&handle, "the import's status", |s| {
        s.generation > imported.generation
    })
    .await;
    assert_eq!(status.set_revision, imported.set_revision, "no set rebuilt");
    local.apply(import("cart", "10.96.1.2", "v1beta1"));
    until(&handle, "the import's new address", |s| {
        s.set_revision > imported.set_revision
    })
    .await;
    // Not Strait's: the set is rebuilt as before.
    local.apply(service("mine", &[("http", 80)]));
    until(&handle, "a tenant's Service", |s| {
        s.set_revision > synced.set_revision
    })
    .await;
}
