//! The slim forms the store keeps of Services and of every kind's metadata.
//! Each is decoded as the whole k8s-openapi type (so a file with a bad value
//! in a field Strait does not read is still reported) and then keeps only
//! the fields the translation and the status writer read: a large cluster
//! set holds tens of thousands of Services and ServiceExports, and a whole
//! `ObjectMeta` and `ServiceSpec` are most of their size.

use std::borrow::Cow;
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
    /// Read for the gateway Service's load balancer addresses (boxed: the
    /// other Services have none kept).
    pub status: Option<Box<core::ServiceStatus>>,
}

/// A value of a field Kubernetes defines a handful of (a Service type, an
/// affinity, a protocol, an IP family): those it defines are held as
/// static strings, only another value is allocated.
pub type Known = Cow<'static, str>;

/// The values of [`Known`] fields that Kubernetes defines.
const KNOWN_VALUES: &[&str] = &[
    "ClusterIP",
    "NodePort",
    "LoadBalancer",
    "ExternalName",
    "None",
    "ClientIP",
    "Cluster",
    "Local",
    "TCP",
    "UDP",
    "SCTP",
    "IPv4",
    "IPv6",
];

fn known(value: String) -> Known {
    match KNOWN_VALUES.iter().find(|known| **known == value) {
        Some(known) => Cow::Borrowed(known),
        None => Cow::Owned(value),
    }
}

/// The fields of a Service's spec that the translation reads, named as
/// k8s-openapi names them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ServiceSpec {
    pub type_: Option<Known>,
    /// Only `None` (a headless Service) is kept here; addresses are in
    /// `cluster_ips`.
    pub cluster_ip: Option<Known>,
    /// The Service's cluster IPs (`clusterIPs`, else `clusterIP`): never a
    /// backend, whoever lists one as an endpoint.
    pub cluster_ips: Vec<std::net::IpAddr>,
    pub ports: Option<Vec<ServicePort>>,
    pub session_affinity: Option<Known>,
    pub session_affinity_config: Option<core::SessionAffinityConfig>,
    pub ip_families: Option<Vec<Known>>,
    pub internal_traffic_policy: Option<Known>,
    pub traffic_distribution: Option<String>,
    pub external_ips: Option<Vec<String>>,
}

/// The fields of a Service port that the translation reads (not its
/// target port: the EndpointSlices say where each port goes).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServicePort {
    pub name: Option<String>,
    pub port: i32,
    pub protocol: Option<Known>,
    pub app_protocol: Option<String>,
}

impl From<core::ServicePort> for ServicePort {
    fn from(port: core::ServicePort) -> Self {
        Self {
            name: port.name,
            port: port.port,
            protocol: port.protocol.map(known),
            app_protocol: port.app_protocol,
        }
    }
}

impl From<core::Service> for Service {
    fn from(service: core::Service) -> Self {
        Self {
            metadata: service.metadata.into(),
            spec: service.spec.map(|spec| ServiceSpec {
                type_: spec.type_.map(known),
                cluster_ips: spec
                    .cluster_ips
                    .iter()
                    .flatten()
                    .chain(&spec.cluster_ip)
                    .filter_map(|ip| ip.parse().ok())
                    .fold(Vec::new(), |mut ips, ip| {
                        if !ips.contains(&ip) {
                            ips.push(ip);
                        }
                        ips
                    }),
                cluster_ip: spec.cluster_ip.filter(|ip| ip == "None").map(known),
                ports: spec
                    .ports
                    .map(|ports| ports.into_iter().map(ServicePort::from).collect()),
                session_affinity: spec.session_affinity.map(known),
                session_affinity_config: spec.session_affinity_config,
                ip_families: spec
                    .ip_families
                    .map(|families| families.into_iter().map(known).collect()),
                internal_traffic_policy: spec.internal_traffic_policy.map(known),
                traffic_distribution: spec.traffic_distribution,
                external_ips: spec.external_ips,
            }),
            status: service.status.map(Box::new),
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
    fn defined_values_are_static_and_others_are_kept_as_written() {
        let service: Service = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "cart"},
            "spec": {"type": "ClusterIP", "clusterIP": "10.96.0.7", "sessionAffinity": "Sticky",
                "ports": [{"name": "http", "port": 80, "protocol": "TCP", "targetPort": 8080}]},
        }))
        .expect("service decodes");
        let spec = service.spec.expect("spec");
        assert!(matches!(spec.type_, Some(Cow::Borrowed("ClusterIP"))));
        assert_eq!(spec.cluster_ip, None, "only `None` is kept as text");
        assert_eq!(
            spec.cluster_ips,
            vec!["10.96.0.7".parse::<std::net::IpAddr>().expect("address")],
            "the address is kept as one, never to be dialled"
        );
        assert!(matches!(spec.session_affinity, Some(Cow::Owned(ref other)) if other == "Sticky"));
        let ports = spec.ports.expect("ports");
        assert!(matches!(ports[0].protocol, Some(Cow::Borrowed("TCP"))));
        assert_eq!(
            (ports[0].name.as_deref(), ports[0].port),
            (Some("http"), 80)
        );
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
        assert_eq!(spec.ip_families, Some(vec!["IPv4".into()]));
    }
}
