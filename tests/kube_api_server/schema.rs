//! The CRDs' structural schemas: unknown fields pruned, invalid objects
//! refused with `422` naming every cause, as a real server does.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn custom_resources_are_pruned_and_validated_against_the_crds() {
    let (server, client) = start().await;
    // Unknown fields are dropped silently, declared ones kept.
    let mut config = import_config(&[80]);
    config["spec"]["unknownField"] = json!("dropped");
    config["spec"]["ports"][0]["extra"] = json!(1);
    config["surplus"] = json!({"a": 1});
    imports(&client)
        .patch("cart", &apply(), &Patch::Apply(&config))
        .await
        .expect("a valid import");
    let stored = server
        .object("ServiceImport", "shop", "cart")
        .expect("stored");
    assert_eq!(stored["spec"]["type"], "ClusterSetIP");
    assert_eq!(
        stored["spec"]["ports"],
        json!([{"port": 80, "protocol": "TCP"}])
    );
    assert!(stored["spec"].get("unknownField").is_none() && stored.get("surplus").is_none());
    assert_eq!(
        stored["metadata"]["labels"]["app"], "cart",
        "metadata is not pruned"
    );

    // An enum, a type and a list bound, all named at once; nothing stored.
    let mut bad = import_config(&[80]);
    bad["spec"]["type"] = json!("Balanced");
    bad["spec"]["ports"][0]["port"] = json!("eighty");
    bad["spec"]["ipFamilies"] = json!(["IPv4", "IPv6", "IPv4"]);
    let status = refusal(
        imports(&client)
            .patch("cart", &apply(), &Patch::Apply(&bad))
            .await,
    );
    assert_eq!(status.code, 422, "{status:?}");
    assert_eq!(status.reason, "Invalid");
    for cause in [
        "spec.type: Unsupported value: \"Balanced\"",
        "spec.ports[0].port: Invalid value: \"string\": spec.ports[0].port in body must be of type integer",
        "spec.ipFamilies: Too many: 3: must have at most 2 items",
    ] {
        assert!(
            status.message.contains(cause),
            "{cause:?} not in {:?}",
            status.message
        );
    }
    let kept = server
        .object("ServiceImport", "shop", "cart")
        .expect("kept");
    assert_eq!(
        kept["spec"]["type"], "ClusterSetIP",
        "the refused apply changed nothing"
    );

    // A required field of a condition.
    let condition = json!({"apiVersion": "multicluster.x-k8s.io/v1beta1", "kind": "ServiceImport",
        "metadata": {"name": "cart", "namespace": "shop"},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]}});
    let status = refusal(
        imports(&client)
            .patch_status("cart", &apply(), &Patch::Apply(&condition))
            .await,
    );
    assert_eq!(status.code, 422);
    assert!(
        status
            .message
            .contains("status.conditions[0].lastTransitionTime: Required value"),
        "{:?}",
        status.message
    );
}
