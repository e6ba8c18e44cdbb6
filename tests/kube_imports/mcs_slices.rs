//! MCS EndpointSlices (KEP-1645 "Using EndpointSlice objects to track
//! endpoints"; mcs-api `conformance/endpoint_slice.go`): one per exporting
//! cluster, with the MCS labels and not the EndpointSlice controller's
//! manager, holding addresses that work from this cluster, deleted when the
//! export goes.

use super::*;

/// The MCS slices of `shop/<name>` the local server holds, by source cluster.
fn mcs_slices(world: &World, name: &str) -> std::collections::BTreeMap<String, Value> {
    world
        .local
        .objects("EndpointSlice", "shop")
        .into_iter()
        .filter(|slice| {
            slice["metadata"]["labels"]["multicluster.kubernetes.io/service-name"] == name
        })
        .filter_map(|slice| {
            let source = slice["metadata"]["labels"]["multicluster.kubernetes.io/source-cluster"]
                .as_str()?
                .to_owned();
            Some((source, slice))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_exporting_cluster_gets_an_mcs_slice_that_goes_with_its_export() {
    let world = World::new().await;
    let _gateway = world.gateway("gw-a", PortRange::default()).await;
    let import = world
        .import_until("cart", "a ready ClusterSetIP import", is_ready)
        .await;
    until(
        "an MCS slice of each exporting cluster",
        || mcs_slices(&world, "cart").len() == 2,
        || format!("{:#?}", mcs_slices(&world, "cart")),
    )
    .await;
    let slices = mcs_slices(&world, "cart");
    for (source, slice) in &slices {
        let labels = &slice["metadata"]["labels"];
        assert_eq!(
            labels["endpointslice.kubernetes.io/managed-by"], "imports.strait.dev",
            "{source}: not the EndpointSlice controller's"
        );
        assert!(
            labels.get("kubernetes.io/service-name").is_none(),
            "{source}: kube-proxy must not program it"
        );
        assert_eq!(
            slice["metadata"]["ownerReferences"][0]["uid"], import["metadata"]["uid"],
            "{source}: owned by the import"
        );
        assert_eq!(slice["addressType"], "IPv4");
    }
    // c1 is this cluster: its pod, on the pod's port.
    assert_eq!(slice_addresses(&slices["c1"]), ["10.1.0.1"]);
    assert_eq!(slices["c1"]["ports"][0]["port"], 8080);
    // c2 is on another network: this cluster's gateway pods, on the
    // import port the derived Service forwards to.
    let derived = world.derived("cart").expect("the derived Service");
    assert_eq!(slice_addresses(&slices["c2"]), ["10.1.0.50", "10.1.0.51"]);
    assert_eq!(
        slices["c2"]["ports"][0]["port"],
        derived["spec"]["ports"][0]["targetPort"]
    );

    // Imported endpoints are not read back as c1's own: nothing else is
    // exported under c1's name, and the slices settle.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(mcs_slices(&world, "cart"), slices, "the slices settle");

    // c2 unexports: its slice goes, c1's stays.
    world.remote.delete("ServiceExport", "shop", "cart");
    until(
        "c2's MCS slice to go",
        || mcs_slices(&world, "cart").keys().eq(["c1"]),
        || format!("{:#?}", mcs_slices(&world, "cart")),
    )
    .await;
    // The last export goes: every MCS slice goes with the import.
    world.local.delete("ServiceExport", "shop", "cart");
    world.gone("cart", "the import to be deleted").await;
    until(
        "every MCS slice to go",
        || mcs_slices(&world, "cart").is_empty(),
        || format!("{:#?}", mcs_slices(&world, "cart")),
    )
    .await;
}
