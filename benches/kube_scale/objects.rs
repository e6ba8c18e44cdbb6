//! The objects of one cluster at scale, as a real API server holds them:
//! Services written with `kubectl apply` (the last-applied annotation, a
//! managedFields entry), EndpointSlices written by the EndpointSlice
//! controller (owner reference, per-endpoint `targetRef`, `nodeName`,
//! `zone`, the three conditions, managedFields), ServiceExports with the
//! conditions another controller wrote, the two ClusterProperties and the
//! gateway Service.

use serde_json::{Value, json};

/// How big each cluster is.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Shape {
    pub(crate) services: usize,
    pub(crate) slices: usize,
    pub(crate) endpoints: usize,
}

/// Namespaces the services are spread over.
pub(crate) const NAMESPACES: usize = 20;

pub(crate) fn namespace_of(service: usize) -> String {
    format!("team-{:02}", service % NAMESPACES)
}

pub(crate) fn service_name(service: usize) -> String {
    format!("svc-{service:05}")
}

/// The address of endpoint `endpoint` of slice `slice` of `service` in
/// cluster `cluster`: unique within a cluster, 10.C.x.y.
pub(crate) fn pod_address(
    cluster: usize,
    shape: Shape,
    service: usize,
    slice: usize,
    endpoint: usize,
) -> String {
    let n = (service * shape.slices + slice) * shape.endpoints + endpoint;
    format!("10.{}.{}.{}", cluster + 1, n / 250 % 250, n % 250 + 1)
}

fn managed_fields(manager: &str, fields: Value) -> Value {
    json!([{
        "manager": manager, "operation": "Update", "apiVersion": "v1",
        "time": "2026-11-30T10:00:00Z", "fieldsType": "FieldsV1", "fieldsV1": fields,
    }])
}

pub(crate) fn namespace(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": name, "labels": {"kubernetes.io/metadata.name": name}},
        "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}})
}

pub(crate) fn property(name: &str, value: &str) -> Value {
    json!({"apiVersion": "about.k8s.io/v1alpha1", "kind": "ClusterProperty",
        "metadata": {"name": name}, "spec": {"value": value}})
}

pub(crate) fn gateway(ip: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "cluster-edge", "namespace": "strait-system",
            "labels": {"strait.dev/gateway": "true"}},
        "spec": {"type": "LoadBalancer", "ports": [{"name": "tunnel", "port": 15008}]},
        "status": {"loadBalancer": {"ingress": [{"ip": ip}]}}})
}

/// The local cluster's gateway pods, as the EndpointSlice of the gateway
/// Service (the MCS slices of a service of another network list them).
pub(crate) fn gateway_pods() -> Value {
    let endpoints: Vec<Value> = ["10.1.0.50", "10.1.0.51"]
        .iter()
        .map(|ip| json!({"addresses": [ip], "conditions": {"ready": true}}))
        .collect();
    json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": "cluster-edge-1", "namespace": "strait-system",
            "labels": {"kubernetes.io/service-name": "cluster-edge"}},
        "addressType": "IPv4", "endpoints": endpoints,
        "ports": [{"name": "tunnel", "port": 15008, "protocol": "TCP"}]})
}

pub(crate) fn service(cluster: usize, index: usize) -> Value {
    let name = service_name(index);
    let namespace = namespace_of(index);
    let applied = json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": name}},
        "spec": {"selector": {"app": name},
            "ports": [{"name": "http", "port": 80, "targetPort": 8080}]}});
    let octets = (cluster * 65_536 + index) % 65_000;
    let cluster_ip = format!("10.96.{}.{}", octets / 250, octets % 250 + 1);
    json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": namespace,
            "uid": format!("5e0f1c2a-{cluster:04x}-4000-8000-{index:012x}"),
            "creationTimestamp": "2026-11-30T10:00:00Z",
            "labels": {"app": name, "app.kubernetes.io/part-of": "shop"},
            "annotations": {
                "kubectl.kubernetes.io/last-applied-configuration": applied.to_string(),
            },
            "managedFields": managed_fields("kubectl-client-side-apply", json!({
                "f:metadata": {"f:annotations": {".": {},
                    "f:kubectl.kubernetes.io/last-applied-configuration": {}},
                    "f:labels": {".": {}, "f:app": {}}},
                "f:spec": {"f:internalTrafficPolicy": {}, "f:ports": {".": {},
                    "k:{\"port\":80,\"protocol\":\"TCP\"}": {".": {}, "f:name": {},
                        "f:port": {}, "f:protocol": {}, "f:targetPort": {}}},
                    "f:selector": {}, "f:sessionAffinity": {}, "f:type": {}}})),
        },
        "spec": {"type": "ClusterIP", "clusterIP": cluster_ip, "clusterIPs": [cluster_ip],
            "selector": {"app": name}, "sessionAffinity": "None",
            "ipFamilies": ["IPv4"], "ipFamilyPolicy": "SingleStack",
            "internalTrafficPolicy": "Cluster",
            "ports": [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"}]},
        "status": {"loadBalancer": {}}})
}

pub(crate) fn export(index: usize) -> Value {
    let condition = |type_: &str, reason: &str| {
        json!({"type": type_, "status": "True", "reason": reason, "message": "",
            "lastTransitionTime": "2026-11-30T10:00:00Z", "observedGeneration": 1})
    };
    json!({"apiVersion": "multicluster.x-k8s.io/v1alpha1", "kind": "ServiceExport",
        "metadata": {"name": service_name(index), "namespace": namespace_of(index),
            "generation": 1},
        "status": {"conditions": [condition("Valid", "Valid"), condition("Ready", "Ready")]}})
}

/// Slice `slice` of `service`, every endpoint ready, or with `moved` the
/// first endpoint at that address instead.
pub(crate) fn slice(
    cluster: usize,
    shape: Shape,
    index: usize,
    slice: usize,
    moved: Option<&str>,
) -> Value {
    let name = service_name(index);
    let namespace = namespace_of(index);
    let endpoints: Vec<Value> = (0..shape.endpoints)
        .map(|endpoint| {
            let address = match (endpoint, moved) {
                (0, Some(moved)) => moved.to_owned(),
                _ => pod_address(cluster, shape, index, slice, endpoint),
            };
            json!({"addresses": [address],
                "conditions": {"ready": true, "serving": true, "terminating": false},
                "nodeName": format!("node-{:03}", (index + endpoint) % 200),
                "zone": format!("zone-{}", ["a", "b", "c"][endpoint % 3]),
                "targetRef": {"kind": "Pod", "namespace": namespace,
                    "name": format!("{name}-7d9f8b6c4-{slice:02}{endpoint:03}"),
                    "uid": format!("9a1b2c3d-{cluster:04x}-4{slice:03x}-8{endpoint:03x}-{index:012x}")}})
        })
        .collect();
    json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": format!("{name}-{slice:05}"), "namespace": namespace,
            "generateName": format!("{name}-"),
            "labels": {"kubernetes.io/service-name": name,
                "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io",
                "app": name},
            "annotations": {"endpoints.kubernetes.io/last-change-trigger-time": "2026-11-30T10:00:00Z"},
            "ownerReferences": [{"apiVersion": "v1", "kind": "Service", "name": name,
                "uid": format!("5e0f1c2a-{cluster:04x}-4000-8000-{index:012x}"),
                "controller": true, "blockOwnerDeletion": true}],
            "managedFields": managed_fields("kube-controller-manager", json!({
                "f:addressType": {}, "f:endpoints": {},
                "f:metadata": {"f:annotations": {".": {},
                    "f:endpoints.kubernetes.io/last-change-trigger-time": {}},
                    "f:generateName": {}, "f:labels": {".": {}, "f:app": {},
                        "f:endpointslice.kubernetes.io/managed-by": {},
                        "f:kubernetes.io/service-name": {}},
                    "f:ownerReferences": {".": {}, "k:{\"uid\":\"...\"}": {}}},
                "f:ports": {}}))},
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
        "endpoints": endpoints})
}
