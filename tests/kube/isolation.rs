//! One bad object excludes only itself, read from API servers: c3 gains,
//! at once, an exported `ExternalName` Service, an EndpointSlice with a
//! loopback address beside a good one, and an exported Service with port
//! 70000 (the stand-in server seeds them as written; a real one would
//! refuse the port, not the others), while c2's `cart` gains an endpoint.
//! c2's change arrives, c3's other services keep their backends, and each
//! bad object is reported once, naming its cluster, object and field.

use super::*;

/// `shop/<service>:<port>`'s backends in the usable set (the one the
/// gateway routes with), as `cluster address:port`, sorted.
fn usable(snapshot: &SourceSnapshot, service: &str, port: u16) -> Vec<String> {
    snapshot
        .usable_set
        .as_ref()
        .map(|set| routed(set, "c1", service, port))
        .unwrap_or_default()
}

fn findings(snapshot: &SourceSnapshot) -> Vec<String> {
    match &snapshot.set {
        Ok(_) => Vec::new(),
        Err(diagnostics) => diagnostics.0.iter().map(ToString::to_string).collect(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_object_in_one_cluster_stops_only_itself() {
    let dir = tempfile::tempdir().expect("temp dir");
    let local = ApiServer::start(&["v1beta1"]).await;
    let second = ApiServer::start(&["v1beta1"]).await;
    let third = ApiServer::start(&["v1beta1"]).await;
    populate(&local, "c1", "net-a", "v1beta1", "198.51.100.1", "10.1.0.1");
    populate(
        &second,
        "c2",
        "net-b",
        "v1beta1",
        "198.51.100.2",
        "10.2.0.1",
    );
    populate(&third, "c3", "net-c", "v1beta1", "198.51.100.3", "10.3.0.1");
    third.apply(service("far", &[("http", 80)]));
    third.apply(export("far", "v1beta1"));
    third.apply(slice("far", "far-1", &[("10.3.0.7", true)]));
    let third_config = third.write_kubeconfig(dir.path(), "c3");
    let handle = KubeHandle::start(options(
        &local.write_kubeconfig(dir.path(), "local"),
        &[&second.write_kubeconfig(dir.path(), "c2"), &third_config],
    ))
    .await
    .expect("source starts");
    until(&handle, "all synced", |s| {
        s.all_synced() && usable(s, "far", 80) == ["c3 10.3.0.7:8080"]
    })
    .await;

    // The mistakes in c3 and a good change in c2, at once.
    let mut external = service("db", &[("http", 80)]);
    external["spec"] = json!({"type": "ExternalName", "externalName": "db.example.com"});
    third.apply(external);
    third.apply(export("db", "v1beta1"));
    third.apply(slice(
        "far",
        "far-extra",
        &[("127.0.0.1", true), ("10.3.0.8", true)],
    ));
    let mut wide = service("wide", &[("http", 80)]);
    wide["spec"]["ports"][0]["port"] = 70_000.into();
    third.apply(wide);
    third.apply(export("wide", "v1beta1"));
    second.apply(slice("cart", "cart-2", &[("10.2.0.9", true)]));

    let snapshot = until(&handle, "c2's new endpoint and c3's findings", |s| {
        usable(s, "cart", 80).contains(&"c2 10.2.0.9:8080".to_owned()) && findings(s).len() >= 3
    })
    .await;
    assert_eq!(
        usable(&snapshot, "cart", 80),
        [
            "c1 10.1.0.1:8080",
            "c2 10.2.0.1:8080",
            "c2 10.2.0.9:8080",
            "c3 10.3.0.1:8080"
        ],
        "every cluster's cart, c3's included"
    );
    assert_eq!(
        usable(&snapshot, "far", 80),
        ["c3 10.3.0.7:8080", "c3 10.3.0.8:8080"],
        "c3's far keeps its endpoints, the good one beside the loopback one included"
    );
    assert!(usable(&snapshot, "wide", 80).is_empty() && usable(&snapshot, "db", 80).is_empty());
    let findings = findings(&snapshot);
    let source = format!("cluster kubeconfig {} API", third_config.display());
    for (object, field) in [
        ("ServiceExport shop/db", "InvalidServiceType"),
        ("EndpointSlice shop/far-extra", "endpoints[0].addresses[0]"),
        ("Service shop/wide", "spec.ports[0].port"),
    ] {
        let matching: Vec<&String> = findings
            .iter()
            .filter(|f| f.contains(object) && f.contains(field))
            .collect();
        assert_eq!(
            matching.len(),
            1,
            "{object} {field} once in:\n{}",
            findings.join("\n")
        );
        assert!(
            matching[0].contains(&source),
            "{} names its cluster",
            matching[0]
        );
    }
    assert!(
        !snapshot
            .usable_set
            .as_ref()
            .expect("usable")
            .clusters
            .is_empty()
            && snapshot.all_synced()
    );
}
