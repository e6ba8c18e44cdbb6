//! Well-known names: the ClusterProperties of KEP-2149, the labels of
//! Kubernetes and the MCS API that Strait reads and writes, and Strait's
//! own label, namespace and port name. Shared by discovery (which reads
//! them), the import planner (which writes them) and settings.

/// ClusterProperty naming the cluster (KEP-2149).
pub const CLUSTER_ID_PROPERTY: &str = "cluster.clusterset.k8s.io";
/// The other name KEP-2149 gives the cluster id property (the mcs-api DNS
/// specification's), read when the first is absent: which one the KEP
/// settles on is still debated.
pub const ALT_CLUSTER_ID_PROPERTY: &str = "id.k8s.io";
/// ClusterProperty naming the cluster set (KEP-2149).
pub const CLUSTERSET_PROPERTY: &str = "clusterset.k8s.io";
/// The default ClusterProperty naming the cluster's network.
pub const NETWORK_PROPERTY: &str = "network.clusterset.k8s.io";
/// Label marking a cluster's gateway Service: honoured only on a Service in
/// the gateway namespace, which tenants cannot write to.
pub const GATEWAY_LABEL: &str = "strait.dev/gateway";
/// Strait's own namespace by default: where the gateway Service lives.
pub const GATEWAY_NAMESPACE: &str = "strait-system";
/// Name of the gateway Service port that peers tunnel to.
pub const TUNNEL_PORT_NAME: &str = "tunnel";
/// Label tying an EndpointSlice to its Service.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
/// Labels of MCS-imported EndpointSlices.
pub const MCS_SERVICE_NAME_LABEL: &str = "multicluster.kubernetes.io/service-name";
pub const MCS_SOURCE_CLUSTER_LABEL: &str = "multicluster.kubernetes.io/source-cluster";
/// The EndpointSlice label naming the controller that manages a slice.
pub const ENDPOINTSLICE_MANAGED_BY_LABEL: &str = "endpointslice.kubernetes.io/managed-by";
/// Its value on every slice Strait's import reconciler writes (derived
/// Services' slices and MCS slices of imported endpoints): never a
/// cluster's own endpoints.
pub const IMPORTED_SLICE_MANAGER: &str = "imports.strait.dev";

/// Annotation on a ServiceImport naming its derived Service (mcs-api).
pub const DERIVED_SERVICE_ANNOTATION: &str = "multicluster.kubernetes.io/derived-service";
/// Label marking every object Strait's import reconciler created: what it
/// deletes when the last export goes, and nothing else.
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
pub const MANAGED_BY_VALUE: &str = "strait";
/// Annotations of a per-pod derived Service naming its pod (annotations:
/// a cluster id may be longer than a label value may be).
pub const POD_CLUSTER_ANNOTATION: &str = "strait.dev/pod-cluster";
pub const POD_ANNOTATION: &str = "strait.dev/pod";
/// How every derived Service's name starts (the mcs-api reference
/// controller's scheme): a Service of such a name that Strait did not make
/// is read too, so that the import writer never writes over it.
pub const DERIVED_NAME_PREFIX: &str = "derived-";
/// The ServiceImport annotation holding its service's import ports.
pub const IMPORT_PORTS_ANNOTATION: &str = "strait.dev/import-ports";

/// Whether a label or annotation key is reserved: Strait's own
/// (`strait.dev/`), the MCS API's and Kubernetes' (`kubernetes.io/`,
/// `k8s.io/` and their subdomains, `multicluster.kubernetes.io/` among
/// them), and `app.kubernetes.io/managed-by`, which marks what Strait
/// created. The rest of `app.kubernetes.io/` is the recommended labels a
/// team sets on its own objects, and stays the exporter's. Such keys in a
/// ServiceExport's `exportedLabels`/`exportedAnnotations` are dropped: an
/// import's reserved metadata is Strait's record (its import ports, its
/// derived Service, its ownership), never a tenant's word.
pub fn reserved_metadata_key(key: &str) -> bool {
    let Some((prefix, name)) = key.split_once('/') else {
        return false;
    };
    let prefix = prefix.to_ascii_lowercase();
    let under = |domain: &str| {
        prefix == domain
            || prefix
                .strip_suffix(domain)
                .is_some_and(|sub| sub.ends_with('.'))
    };
    if prefix == "app.kubernetes.io" {
        return name == "managed-by";
    }
    under("strait.dev") || under("kubernetes.io") || under("k8s.io")
}

#[cfg(test)]
mod tests {
    use super::reserved_metadata_key;

    #[test]
    fn reserved_keys_are_straits_kubernetes_and_the_mcs_apis() {
        for key in [
            "strait.dev/import-ports",
            "imports.strait.dev/anything",
            "multicluster.kubernetes.io/derived-service",
            "multicluster.kubernetes.io/source-cluster",
            "kubernetes.io/service-name",
            "endpointslice.kubernetes.io/managed-by",
            "app.kubernetes.io/managed-by",
            "k8s.io/x",
            "about.k8s.io/x",
            "Strait.Dev/import-ports",
        ] {
            assert!(reserved_metadata_key(key), "{key} is reserved");
        }
        for key in [
            "tier",
            "app.kubernetes.io/name",
            "app.kubernetes.io/part-of",
            "example.com/owner",
            "notstrait.dev/x",
            "mykubernetes.io/x",
            "strait.dev",
        ] {
            assert!(!reserved_metadata_key(key), "{key} is the exporter's");
        }
    }
}
