//! `discovery.k8s.io/v1` EndpointSlice, decoded straight into the form the
//! translation shares: each endpoint becomes a model [`Endpoint`] as it is
//! read, so a cluster's endpoints are held once (by the stored object and,
//! through an `Arc`, by its translation) and none of the fields Strait does
//! not read (`targetRef`, `hints`, ...) is ever kept. An endpoint whose
//! first address is not an IP address is kept aside, with its index, for
//! the translation to report. Of the metadata only the name, namespace and
//! the two labels read are kept.

use std::net::IpAddr;
use std::sync::Arc;

use k8s_openapi::api::discovery::v1::{EndpointConditions, EndpointPort};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Deserialize;

use crate::discovery::translate::{
    MCS_SERVICE_NAME_LABEL, MCS_SOURCE_CLUSTER_LABEL, SERVICE_NAME_LABEL,
};
use crate::model::{Endpoint, Placement};

/// The fields of an EndpointSlice that Strait reads.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct EndpointSlice {
    #[serde(default)]
    pub metadata: SliceMetadata,
    pub address_type: String,
    #[serde(default)]
    pub ports: Option<Vec<EndpointPort>>,
    #[serde(default)]
    pub endpoints: SliceEndpoints,
}

/// What Strait reads of an EndpointSlice's metadata: a large cluster has
/// hundreds of thousands of slices, and a whole `ObjectMeta` with its
/// labels is most of a slice's size.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(from = "ObjectMeta")]
pub struct SliceMetadata {
    pub name: Option<String>,
    pub namespace: Option<String>,
    /// The Service it belongs to: its `kubernetes.io/service-name` label,
    /// else its `multicluster.kubernetes.io/service-name` one.
    pub service_name: Option<String>,
    /// Its `multicluster.kubernetes.io/source-cluster` label.
    pub source_cluster: Option<String>,
}

impl From<ObjectMeta> for SliceMetadata {
    fn from(metadata: ObjectMeta) -> Self {
        let mut labels = metadata.labels.unwrap_or_default();
        let service_name = labels
            .remove(SERVICE_NAME_LABEL)
            .or_else(|| labels.remove(MCS_SERVICE_NAME_LABEL));
        Self {
            name: metadata.name,
            namespace: metadata.namespace,
            service_name,
            source_cluster: labels.remove(MCS_SOURCE_CLUSTER_LABEL),
        }
    }
}

/// A slice's endpoints: those whose first address parsed, in order, and
/// the others with their place among all of them.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(from = "Vec<ReadEndpoint>")]
pub struct SliceEndpoints {
    pub parsed: Arc<[Endpoint]>,
    /// In index order.
    pub unparsed: Vec<UnparsedEndpoint>,
}

/// An endpoint without a usable first address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnparsedEndpoint {
    /// Its index among all of the slice's endpoints.
    pub index: usize,
    /// The first address as written; `None` when `addresses` is empty.
    pub address: Option<String>,
}

impl SliceEndpoints {
    fn len(&self) -> usize {
        self.parsed.len() + self.unparsed.len()
    }

    /// Every endpoint, in the slice's order, with its index.
    pub fn iter(&self) -> impl Iterator<Item = (usize, Result<&Endpoint, &UnparsedEndpoint>)> {
        let mut parsed = self.parsed.iter();
        let mut unparsed = self.unparsed.iter().peekable();
        (0..self.len()).filter_map(move |index| {
            let endpoint = match unparsed.next_if(|u| u.index == index) {
                Some(unparsed) => Err(unparsed),
                None => Ok(parsed.next()?),
            };
            Some((index, endpoint))
        })
    }
}

/// One endpoint as written, only for as long as it takes to read it.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ReadEndpoint {
    addresses: Vec<String>,
    #[serde(default)]
    conditions: Option<EndpointConditions>,
    #[serde(default)]
    hostname: Option<String>,
    #[serde(default)]
    node_name: Option<String>,
    #[serde(default)]
    zone: Option<String>,
}

impl From<Vec<ReadEndpoint>> for SliceEndpoints {
    fn from(read: Vec<ReadEndpoint>) -> Self {
        let mut parsed = Vec::with_capacity(read.len());
        let mut unparsed = Vec::new();
        for (index, endpoint) in read.into_iter().enumerate() {
            let Some(first) = endpoint.addresses.into_iter().next() else {
                unparsed.push(UnparsedEndpoint {
                    index,
                    address: None,
                });
                continue;
            };
            let Ok(address) = first.parse::<IpAddr>() else {
                unparsed.push(UnparsedEndpoint {
                    index,
                    address: Some(first),
                });
                continue;
            };
            // EndpointSlice semantics: an unknown readiness means ready,
            // and serving defaults to readiness.
            let conditions = endpoint.conditions.unwrap_or_default();
            let ready = conditions.ready.unwrap_or(true);
            let placement = (endpoint.node_name.is_some() || endpoint.zone.is_some()).then(|| {
                Box::new(Placement {
                    node_name: endpoint.node_name,
                    zone: endpoint.zone,
                })
            });
            parsed.push(Endpoint {
                address,
                ready,
                serving: conditions.serving.unwrap_or(ready),
                terminating: conditions.terminating.unwrap_or(false),
                hostname: endpoint.hostname.map(Arc::from),
                placement,
            });
        }
        Self {
            parsed: parsed.into(),
            unparsed,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(endpoints: serde_json::Value) -> SliceEndpoints {
        serde_json::from_value(endpoints).expect("endpoints decode")
    }

    #[test]
    fn endpoints_keep_their_order_and_index_whether_parsed_or_not() {
        let endpoints = read(serde_json::json!([
            {"addresses": []},
            {"addresses": ["10.0.0.1"], "hostname": "a", "zone": "z1", "nodeName": "n1",
                "targetRef": {"kind": "Pod", "name": "a"}},
            {"addresses": ["ten"]},
            {"addresses": ["10.0.0.2"], "conditions": {"ready": false}},
        ]));
        let order: Vec<(usize, Option<String>)> = endpoints
            .iter()
            .map(|(index, endpoint)| (index, endpoint.ok().map(|e| e.address.to_string())))
            .collect();
        assert_eq!(
            order,
            [
                (0, None),
                (1, Some("10.0.0.1".to_owned())),
                (2, None),
                (3, Some("10.0.0.2".to_owned()))
            ]
        );
        assert_eq!(endpoints.unparsed[1].address.as_deref(), Some("ten"));
        let first = &endpoints.parsed[0];
        assert_eq!(first.hostname.as_deref(), Some("a"));
        let placement = first.placement.as_deref().expect("placement kept");
        assert_eq!(placement.zone.as_deref(), Some("z1"));
        assert_eq!(placement.node_name.as_deref(), Some("n1"));
        let second = &endpoints.parsed[1];
        assert!(!second.ready && !second.serving && !second.terminating);
        assert!(second.placement.is_none());
    }

    #[test]
    fn an_endpoint_without_addresses_field_is_a_decode_error() {
        let error = serde_json::from_value::<SliceEndpoints>(serde_json::json!([{}]))
            .expect_err("addresses is required");
        assert!(error.to_string().contains("addresses"), "{error}");
    }
}
