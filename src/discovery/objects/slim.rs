//! The slim forms the store keeps of Services and of every kind's metadata.
//! Each is decoded as the whole k8s-openapi type (so a file with a bad value
//! in a field Strait does not read is still reported) and then keeps only
//! the fields the translation and the status writer read: a large cluster
//! set holds tens of thousands of Services and ServiceExports, and a whole
//! `ObjectMeta` and `ServiceSpec` are most of their size.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use serde::{Deserialize, Serialize};

/// The metadata fields Strait reads.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(from = "ObjectMeta", into = "ObjectMeta")]
pub struct Metadata {
    pub name: Option<String>,
    pub namespace: Option<String>,
    pub labels: Option<BTreeMap<String, String>>,
    pub annotations: Option<BTreeMap<String, String>>,
    pub creation_timestamp: Option<Time>,
    pub generation: Option<i64>,
    pub resource_version: Option<String>,
}

impl From<ObjectMeta> for Metadata {
    fn from(metadata: ObjectMeta) -> Self {
        Self {
            name: metadata.name,
            namespace: metadata.namespace,
            labels: metadata.labels,
            annotations: metadata.annotations,
            creation_timestamp: metadata.creation_timestamp,
            generation: metadata.generation,
            resource_version: metadata.resource_version,
        }
    }
}

impl From<Metadata> for ObjectMeta {
    fn from(metadata: Metadata) -> Self {
        Self {
            name: metadata.name,
            namespace: metadata.namespace,
            labels: metadata.labels,
            annotations: metadata.annotations,
            creation_timestamp: metadata.creation_timestamp,
            generation: metadata.generation,
            resource_version: metadata.resource_version,
            ..ObjectMeta::default()
        }
    }
}

/// `v1` Service: the fields the translation reads.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(from = "core::Service")]
pub struct Service {
    pub metadata: Metadata,
    pub spec: Option<ServiceSpec>,
    /// Read for the gateway Service's load balancer addresses.
    pub status: Option<core::ServiceStatus>,
}

/// The fields of a Service's spec that the translation reads, named as
/// k8s-openapi names them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ServiceSpec {
    pub type_: Option<String>,
    pub cluster_ip: Option<String>,
    pub ports: Option<Vec<core::ServicePort>>,
    pub session_affinity: Option<String>,
    pub session_affinity_config: Option<core::SessionAffinityConfig>,
    pub ip_families: Option<Vec<String>>,
    pub internal_traffic_policy: Option<String>,
    pub traffic_distribution: Option<String>,
    pub external_ips: Option<Vec<String>>,
}

impl From<core::Service> for Service {
    fn from(service: core::Service) -> Self {
        Self {
            metadata: service.metadata.into(),
            spec: service.spec.map(|spec| ServiceSpec {
                type_: spec.type_,
                cluster_ip: spec.cluster_ip,
                ports: spec.ports,
                session_affinity: spec.session_affinity,
                session_affinity_config: spec.session_affinity_config,
                ip_families: spec.ip_families,
                internal_traffic_policy: spec.internal_traffic_policy,
                traffic_distribution: spec.traffic_distribution,
                external_ips: spec.external_ips,
            }),
            status: service.status,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_value_in_an_unread_field_is_still_an_error() {
        let service = serde_json::json!({
            "metadata": {"name": "cart", "uid": 5},
            "spec": {"selector": {"app": "cart"}},
        });
        let error = serde_json::from_value::<Service>(service).expect_err("uid is a string");
        assert!(error.to_string().contains("invalid type"), "{error}");
    }

    #[test]
    fn the_read_fields_are_kept() {
        let service: Service = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "cart", "namespace": "shop", "labels": {"a": "b"},
                "uid": "u", "finalizers": ["x"]},
            "spec": {"type": "ClusterIP", "clusterIP": "None", "selector": {"app": "cart"},
                "ports": [{"name": "http", "port": 80}], "ipFamilies": ["IPv4"]},
        }))
        .expect("service decodes");
        assert_eq!(service.metadata.name.as_deref(), Some("cart"));
        assert_eq!(service.metadata.namespace.as_deref(), Some("shop"));
        assert_eq!(
            service.metadata.labels.and_then(|l| l.get("a").cloned()),
            Some("b".to_owned())
        );
        let spec = service.spec.expect("spec");
        assert_eq!(spec.type_.as_deref(), Some("ClusterIP"));
        assert_eq!(spec.cluster_ip.as_deref(), Some("None"));
        assert_eq!(spec.ports.map(|p| p.len()), Some(1));
        assert_eq!(spec.ip_families, Some(vec!["IPv4".to_owned()]));
    }
}
