//! What is kept of an object from an API server: what translation and the
//! status writer read, and nothing else. The API server sends whole objects
//! (selectors, owner references, statuses); a large cluster set holds
//! hundreds of thousands of them, so what no one reads is dropped before
//! they are decoded. `managedFields` and the `kubectl apply` copy of the
//! object are gone already: they are dropped as the object arrives
//! (`arrived`).

use crate::model::names::GATEWAY_LABEL;

/// The annotation `kubectl apply` keeps a copy of the whole object in.
pub(super) const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// The fields of a Service that translation reads (`translate::service`):
/// the rest of it (its selector, node ports, cluster IPs, uid, owner
/// references, labels but the gateway label, status unless it is the
/// gateway's) is dropped on arrival.
const SERVICE_METADATA_READ: &[&str] = &["name", "namespace", "labels"];
const SERVICE_SPEC_READ: &[&str] = &[
    "type",
    "clusterIP",
    "clusterIPs",
    "ports",
    "sessionAffinity",
    "sessionAffinityConfig",
    "ipFamilies",
    "internalTrafficPolicy",
    "trafficDistribution",
    "externalIPs",
];
/// The metadata of a ServiceExport that translation (its access policy,
/// its age) and the status writer (generation, resource version) read.
const EXPORT_METADATA_READ: &[&str] = &[
    "name",
    "namespace",
    "annotations",
    "creationTimestamp",
    "generation",
    "resourceVersion",
];

/// Drops what no translation reads of an arrived object: of Services and
/// ServiceExports every field outside what is read. The EndpointSlice
/// decoder keeps only what it reads by itself; of that, a remote cluster's
/// endpoints lose `nodeName` and `zone` here (read only from the local
/// cluster's gateway pods).
pub(super) fn slim(json: &mut serde_json::Value, kind: &str, local: bool) {
    let Some(object) = json.as_object_mut() else {
        return;
    };
    if let Some(metadata) = object.get_mut("metadata").and_then(|m| m.as_object_mut()) {
        match kind {
            "Service" => metadata.retain(|key, _| SERVICE_METADATA_READ.contains(&key.as_str())),
            "ServiceExport" => {
                metadata.retain(|key, _| EXPORT_METADATA_READ.contains(&key.as_str()))
            }
            _ => {}
        }
    }
    if kind == "Service" {
        let gateway = object
            .get("metadata")
            .and_then(|m| m.get("labels"))
            .and_then(|l| l.get(GATEWAY_LABEL))
            .is_some_and(|v| v == "true");
        if !gateway {
            // Of another Service's status only its load balancer addresses
            // are read: machinery a peer must never have dialled.
            let addresses: Vec<serde_json::Value> = object
                .get("status")
                .and_then(|s| s.get("loadBalancer"))
                .and_then(|b| b.get("ingress"))
                .and_then(|i| i.as_array())
                .into_iter()
                .flatten()
                .filter_map(|ingress| ingress.get("ip").cloned())
                .map(|ip| serde_json::json!({ "ip": ip }))
                .collect();
            object.remove("status");
            if !addresses.is_empty() {
                object.insert(
                    "status".to_owned(),
                    serde_json::json!({"loadBalancer": {"ingress": addresses}}),
                );
            }
        }
        // Of a Service's labels only the gateway label is read.
        if let Some(labels) = object
            .get_mut("metadata")
            .and_then(|m| m.get_mut("labels"))
            .and_then(|l| l.as_object_mut())
        {
            labels.retain(|key, _| key == GATEWAY_LABEL);
        }
        if let Some(spec) = object.get_mut("spec").and_then(|s| s.as_object_mut()) {
            spec.retain(|key, _| SERVICE_SPEC_READ.contains(&key.as_str()));
        }
    }
    if local {
        return;
    }
    if let Some(endpoints) = object.get_mut("endpoints").and_then(|e| e.as_array_mut()) {
        for endpoint in endpoints.iter_mut().filter_map(|e| e.as_object_mut()) {
            endpoint.remove("nodeName");
            endpoint.remove("zone");
        }
    }
}
