//! What a ServiceExport carries into the model: its creation time, its
//! exported metadata without reserved keys, and its routing annotations.

use super::*;

#[test]
fn an_export_carries_its_creation_time_and_exported_metadata() {
    let created = export(", creationTimestamp: \"2024-01-02T03:04:05Z\"");
    let spec = "spec: {exportedLabels: {tier: web}, exportedAnnotations: {a: b}}";
    let plain = svc("plain", HTTP);
    let cart_svc = svc("cart", HTTP);
    let cluster = clean(&format!("{cart_svc}---\n{created}{spec}\n---\n{plain}"));
    let exported = cart(&cluster).export.clone().expect("cart is exported");
    let time = "2024-01-02T03:04:05Z".parse().expect("timestamp parses");
    assert_eq!(exported.created, Some(time));
    let labels = &exported.exported_labels;
    assert_eq!(labels.get("tier").map(String::as_str), Some("web"));
    let annotations = &exported.exported_annotations;
    assert_eq!(annotations.get("a").map(String::as_str), Some("b"));
    let key = ServiceKey::new("shop", "plain");
    assert!(cluster.services[&key].export.is_none());
    let cluster = clean(&format!("{cart_svc}---\n{}", export("")));
    let untimed = cart(&cluster).export.clone();
    assert_eq!(untimed, Some(Export::default()));
}

#[test]
fn reserved_keys_in_exported_metadata_are_dropped_with_a_warning_and_the_export_stays() {
    let spec = "spec: {exportedAnnotations: {strait.dev/import-ports: \"[]\", note: kept}}";
    let text = format!("{}---\n{}{spec}", svc("cart", HTTP), export(""));
    let cluster = expect_warning(
        &text,
        "3 ServiceExport shop/cart spec.exportedAnnotations[\"strait.dev/import-ports\"]",
        "reserved",
    );
    let exported = cart(&cluster).export.clone().expect("still exported");
    let kept: Vec<&str> = exported
        .exported_annotations
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(kept, ["note"]);
}

#[test]
fn an_exports_routing_annotations_are_read_and_a_bad_one_leaves_the_export_out() {
    let annotated = |annotations: &str| {
        format!(
            "{}---
{}",
            svc("cart", HTTP),
            export(&format!(", annotations: {{{annotations}}}"))
        )
    };
    let cluster = clean(&annotated(
        "strait.dev/locality: network, strait.dev/fence-networks: \"net-a\"",
    ));
    let routing = cart(&cluster).export.clone().expect("exported").routing;
    assert_eq!(
        routing.to_string(),
        "locality network; fence networks net-a"
    );

    let cluster = expect_error(
        &annotated("strait.dev/locality-minimum-healthy: \"0\""),
        "3 ServiceExport shop/cart metadata.annotations[\"strait.dev/locality-minimum-healthy\"]",
        "the export is left out",
    );
    assert!(
        cart(&cluster).export.is_none(),
        "a bad policy is never read as none"
    );
}
