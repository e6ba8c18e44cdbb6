//! Strait's own EndpointSlices held as the digest they record rather than
//! as JSON. They are most of what the import writer owns (an MCS slice per
//! service and source cluster, each listing endpoints), and all it needs
//! of one is whether it holds what it wants: a slice whose fields still
//! make the digest its `strait.dev/applied-digest` annotation records
//! holds exactly what Strait last applied, so comparing that digest with
//! the wanted one answers it. A slice whose fields do not (someone edited
//! or labelled it, or a release that rendered differently wrote it) is
//! kept whole and compared field by field. Pure.

use serde_json::{Map, Value};

use crate::model::applied_digest::{APPLIED_DIGEST_ANNOTATION, applied_digest};

/// The fields of metadata Strait sets on the slices it writes.
const METADATA_FIELDS: [&str; 4] = ["labels", "name", "namespace", "ownerReferences"];

/// The digest `slice` records, when its fields as Strait renders a slice
/// still make it; `None` otherwise (and for anything not a slice).
pub(super) fn intact_slice_digest(slice: &Value) -> Option<Box<str>> {
    if slice.get("kind")?.as_str()? != "EndpointSlice" {
        return None;
    }
    let metadata = slice.get("metadata")?;
    let recorded = metadata
        .get("annotations")?
        .get(APPLIED_DIGEST_ANNOTATION)?
        .as_str()?;
    let rendered_metadata: Map<String, Value> = METADATA_FIELDS
        .iter()
        .filter_map(|&field| Some((field.to_owned(), metadata.get(field)?.clone())))
        .collect();
    // A real API server stores an empty list as null (or leaves it out);
    // Strait rendered it as `[]`.
    let list = |field: &str| match slice.get(field) {
        None | Some(Value::Null) => Value::Array(Vec::new()),
        Some(value) => value.clone(),
    };
    let mut rendered = Map::new();
    for field in ["apiVersion", "kind", "addressType"] {
        if let Some(value) = slice.get(field) {
            rendered.insert(field.to_owned(), value.clone());
        }
    }
    rendered.insert("metadata".to_owned(), Value::Object(rendered_metadata));
    rendered.insert("endpoints".to_owned(), list("endpoints"));
    rendered.insert("ports".to_owned(), list("ports"));
    (applied_digest(&Value::Object(rendered)) == recorded).then(|| recorded.into())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// A slice as Strait renders it, with its digest.
    fn rendered() -> Value {
        let mut slice = json!({
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {
                "name": "cart-c3-ipv4-0",
                "namespace": "shop",
                "labels": {"multicluster.kubernetes.io/service-name": "cart"},
                "ownerReferences": [{"kind": "ServiceImport", "name": "cart", "uid": "u1"}],
            },
            "addressType": "IPv4",
            "endpoints": [{"addresses": ["10.3.0.1"], "conditions": {"ready": true}}],
            "ports": [{"name": "http", "port": 80, "protocol": "TCP"}],
        });
        let digest = applied_digest(&slice);
        slice["metadata"]["annotations"] = json!({ APPLIED_DIGEST_ANNOTATION: digest });
        slice
    }

    /// As a server returns it: its own fields added.
    fn as_served(mut slice: Value) -> Value {
        let metadata = &mut slice["metadata"];
        metadata["uid"] = "s1".into();
        metadata["resourceVersion"] = "42".into();
        metadata["generation"] = 1.into();
        metadata["creationTimestamp"] = "2026-12-06T00:00:00Z".into();
        metadata["managedFields"] = json!([{"manager": "strait", "operation": "Apply"}]);
        metadata["annotations"]["someone.example/note"] = "kept".into();
        slice
    }

    #[test]
    fn a_slice_as_strait_wrote_it_is_its_digest() {
        let slice = as_served(rendered());
        let recorded = slice["metadata"]["annotations"][APPLIED_DIGEST_ANNOTATION].clone();
        assert_eq!(
            intact_slice_digest(&slice).as_deref(),
            recorded.as_str(),
            "the server's own fields and others' annotations do not count"
        );
    }

    #[test]
    fn an_empty_list_stored_as_null_is_the_empty_list_rendered() {
        let mut slice = rendered();
        let metadata = slice["metadata"].as_object_mut().expect("metadata");
        metadata.remove("annotations");
        slice["endpoints"] = json!([]);
        let digest = applied_digest(&slice);
        slice["metadata"]["annotations"] = json!({ APPLIED_DIGEST_ANNOTATION: digest });
        slice["endpoints"] = Value::Null;
        assert_eq!(
            intact_slice_digest(&slice).as_deref(),
            Some(digest.as_str())
        );
        slice.as_object_mut().expect("slice").remove("endpoints");
        assert_eq!(
            intact_slice_digest(&slice).as_deref(),
            Some(digest.as_str())
        );
    }

    #[test]
    fn a_slice_changed_since_is_kept_whole() {
        let edits: [fn(&mut Value); 4] = [
            |s| s["endpoints"][0]["addresses"][0] = "10.9.9.9".into(),
            |s| s["metadata"]["labels"]["tenant.example/x"] = "y".into(),
            |s| s["ports"][0]["port"] = 8080.into(),
            |s| s["metadata"]["ownerReferences"] = json!([]),
        ];
        for edit in edits {
            let mut slice = as_served(rendered());
            edit(&mut slice);
            assert_eq!(intact_slice_digest(&slice), None, "{slice}");
        }
        let mut service = rendered();
        service["kind"] = "Service".into();
        assert_eq!(intact_slice_digest(&service), None, "only slices");
        let mut unrecorded = rendered();
        unrecorded["metadata"]["annotations"] = json!({});
        assert_eq!(intact_slice_digest(&unrecorded), None);
    }
}
