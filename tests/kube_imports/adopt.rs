//! `kube.adoptImports`: Strait takes over the ServiceImport, derived
//! Service and slices a previous MCS implementation left (named by its
//! field manager) without deleting and recreating them, so the ClusterSetIP
//! survives; without the option it leaves them alone.

use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::ApiResource;

use super::*;

/// The previous implementation's field manager.
const PREVIOUS: &str = "mcs-controller";

/// Server-side applies `object` as the previous implementation.
async fn apply_as_previous(world: &World, object: Value) {
    let kubeconfig = world.local.write_kubeconfig(world.dir.path(), "previous");
    let config = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::read_from(&kubeconfig).expect("kubeconfig"),
        &kube::config::KubeConfigOptions::default(),
    )
    .await
    .expect("config");
    let client = kube::Client::try_from(config).expect("client");
    let api_version = object["apiVersion"].as_str().expect("apiVersion");
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let kind = object["kind"].as_str().expect("kind");
    let plural = match kind {
        "ServiceImport" => "serviceimports",
        "Service" => "services",
        _ => "endpointslices",
    };
    let resource = ApiResource {
        group: group.into(),
        version: version.into(),
        api_version: api_version.into(),
        kind: kind.into(),
        plural: plural.into(),
    };
    let api: Api<DynamicObject> = Api::namespaced_with(client, "shop", &resource);
    let name = object["metadata"]["name"].as_str().expect("name");
    api.patch(name, &PatchParams::apply(PREVIOUS), &Patch::Apply(&object))
        .await
        .expect("the previous implementation's apply");
}

/// What the previous implementation left for `shop/cart`: the import, its
/// derived Service `derived-previous` and that Service's slice listing
/// c2's pod. Returns the ClusterSetIP.
async fn previous_implementation(world: &World) -> String {
    apply_as_previous(
        world,
        json!({"apiVersion": "multicluster.x-k8s.io/v1beta1", "kind": "ServiceImport",
            "metadata": {"name": "cart", "namespace": "shop",
                "annotations": {"multicluster.kubernetes.io/derived-service": "derived-previous"}},
            "spec": {"type": "ClusterSetIP", "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}}),
    )
    .await;
    let import = world.import("cart").expect("the previous import");
    apply_as_previous(
        world,
        json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "derived-previous", "namespace": "shop",
                "ownerReferences": [{"apiVersion": "multicluster.x-k8s.io/v1beta1",
                    "kind": "ServiceImport", "name": "cart",
                    "uid": import["metadata"]["uid"], "controller": true}]},
            "spec": {"type": "ClusterIP", "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}}),
    )
    .await;
    apply_as_previous(
        world,
        json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": "derived-previous-x1", "namespace": "shop",
                "labels": {"kubernetes.io/service-name": "derived-previous",
                    "endpointslice.kubernetes.io/managed-by": "mcs-controller.example"}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": ["10.2.0.1"], "conditions": {"ready": true}}],
            "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}]}),
    )
    .await;
    let derived = world
        .local
        .object("Service", "shop", "derived-previous")
        .expect("the previous derived Service");
    let vip = derived["spec"]["clusterIP"]
        .as_str()
        .expect("a ClusterIP")
        .to_owned();
    // The whole import again (a server-side apply drops what its manager
    // leaves out), now with the ClusterSetIP.
    let mut import = import;
    import["spec"]["ips"] = json!([vip]);
    apply_as_previous(
        world,
        json!({"apiVersion": "multicluster.x-k8s.io/v1beta1",
        "kind": "ServiceImport", "metadata": {"name": "cart", "namespace": "shop",
            "annotations": {"multicluster.kubernetes.io/derived-service": "derived-previous"}},
        "spec": import["spec"]}),
    )
    .await;
    vip
}

async fn gateway_adopting(world: &World, adopt_from: Option<&str>) -> Started {
    let local = world.local.write_kubeconfig(world.dir.path(), "local");
    let remote = world.remote.write_kubeconfig(world.dir.path(), "remote");
    let mut options = options(&local, &[&remote], "gw-a", PortRange::default());
    if let Some(imports) = options.writes.imports.as_mut() {
        imports.adopt_from = adopt_from.map(str::to_owned);
    }
    Started::start(options).await.expect("the source starts")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_previous_implementations_import_is_taken_over_and_its_clustersetip_kept() {
    let world = World::new().await;
    let vip = previous_implementation(&world).await;

    // Without adoption: another controller's import, left alone.
    let handle = gateway_adopting(&world, None).await;
    report_until(&handle, "the import skipped as another's", |r| {
        r.skipped.contains_key("shop/cart")
    })
    .await;
    drop(handle);
    assert!(
        world
            .import("cart")
            .is_some_and(|i| i["metadata"]["labels"]["app.kubernetes.io/managed-by"].is_null())
    );

    let _handle = gateway_adopting(&world, Some(PREVIOUS)).await;
    let import = world
        .import_until("cart", "Strait's import, ready", |i| {
            i["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "strait" && is_ready(i)
        })
        .await;
    // The same object, the same ClusterSetIP, the same derived Service.
    assert_eq!(import["spec"]["ips"], json!([vip]), "{import:#}");
    assert_eq!(
        import["metadata"]["annotations"]["multicluster.kubernetes.io/derived-service"],
        "derived-previous"
    );
    // The derived Service is taken over a moment later, once every
    // gateway has opened the import ports.
    until(
        "the derived Service taken over",
        || {
            world
                .local
                .object("Service", "shop", "derived-previous")
                .is_some_and(|d| {
                    d["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "strait"
                })
        },
        || {
            format!(
                "{:#?}",
                world.local.object("Service", "shop", "derived-previous")
            )
        },
    )
    .await;
    let derived = world
        .local
        .object("Service", "shop", "derived-previous")
        .expect("the derived Service is kept");
    assert_eq!(derived["spec"]["clusterIP"], vip.as_str());
    assert_eq!(
        derived["metadata"]["labels"]["app.kubernetes.io/managed-by"],
        "strait"
    );
    let import_port = derived["spec"]["ports"][0]["targetPort"].clone();
    assert!(
        import_port.is_u64(),
        "forwards to an import port: {derived:#}"
    );
    assert!(
        world
            .local
            .object(
                "Service",
                "shop",
                &derived_service_name(&ServiceKey::new("shop", "cart"))
            )
            .is_none(),
        "no second derived Service"
    );
    // Its slices: this cluster's gateways on the import port; the previous
    // slice is gone.
    until(
        "the previous slice to go",
        || {
            world
                .local
                .object("EndpointSlice", "shop", "derived-previous-x1")
                .is_none()
        },
        || format!("{:#?}", world.local.objects("EndpointSlice", "shop")),
    )
    .await;
    let slice = world
        .local
        .object("EndpointSlice", "shop", "derived-previous-ipv4")
        .expect("Strait's slice of the kept Service");
    assert_eq!(slice_addresses(&slice), ["10.1.0.50", "10.1.0.51"]);
    assert_eq!(slice["ports"][0]["port"], import_port);
}
