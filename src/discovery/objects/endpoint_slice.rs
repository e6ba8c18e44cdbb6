//! `discovery.k8s.io/v1` EndpointSlice, decoded straight into the form the
//! translation shares: each endpoint becomes a model [`Endpoint`] as it is
//! read, so a cluster's endpoints are held once (by the stored object and,
//! through an `Arc`, by its translation) and none of the fields Strait does
//! not read (`targetRef`, `hints`, ...) is ever kept. An endpoint whose
//! first address is not an IP address is kept aside, with its index, for
//! the translation to report. Of the metadata only the name, namespace and
//! the two labels read are kept.

use std::collections::HashSet;
use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;

use k8s_openapi::api::discovery::v1::EndpointConditions;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Deserialize;

use crate::model::names::{
    ENDPOINTSLICE_MANAGED_BY_LABEL, IMPORTED_SLICE_MANAGER, MCS_SERVICE_NAME_LABEL,
    MCS_SOURCE_CLUSTER_LABEL, SERVICE_NAME_LABEL,
};
use crate::model::{Endpoint, EndpointDetails, Endpoints, EndpointsBuilder};

/// The fields of an EndpointSlice that Strait reads.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct EndpointSlice {
    #[serde(default)]
    pub metadata: SliceMetadata,
    pub address_type: AddressType,
    /// Shared with the slices decoded before it that list the same ports
    /// (see [`SliceInterner`]).
    #[serde(default)]
    pub ports: Option<Arc<[SlicePort]>>,
    #[serde(default)]
    pub endpoints: SliceEndpoints,
}

/// What Strait reads of an EndpointSlice's metadata: a large cluster has
/// hundreds of thousands of slices, and a whole `ObjectMeta` with its
/// labels is most of a slice's size.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(from = "ObjectMeta")]
pub struct SliceMetadata {
    pub name: Option<Arc<str>>,
    pub namespace: Option<Arc<str>>,
    /// The Service it belongs to: its `kubernetes.io/service-name` label,
    /// else its `multicluster.kubernetes.io/service-name` one.
    pub service_name: Option<Arc<str>>,
    /// Its `multicluster.kubernetes.io/source-cluster` label.
    pub source_cluster: Option<Box<str>>,
    /// Whether Strait's import reconciler wrote it (its
    /// `endpointslice.kubernetes.io/managed-by` label).
    pub imported: bool,
}

impl From<ObjectMeta> for SliceMetadata {
    fn from(metadata: ObjectMeta) -> Self {
        let mut labels = metadata.labels.unwrap_or_default();
        let service_name = labels
            .remove(SERVICE_NAME_LABEL)
            .or_else(|| labels.remove(MCS_SERVICE_NAME_LABEL));
        let imported = labels
            .get(ENDPOINTSLICE_MANAGED_BY_LABEL)
            .map(String::as_str)
            == Some(IMPORTED_SLICE_MANAGER);
        Self {
            imported,
            name: metadata.name.map(Into::into),
            namespace: metadata.namespace.map(Into::into),
            service_name: service_name.map(Into::into),
            source_cluster: labels.remove(MCS_SOURCE_CLUSTER_LABEL).map(Into::into),
        }
    }
}

/// Shares what repeats between EndpointSlices decoded one after another
/// (the namespace, the Service name, the ports): a list arrives in key
/// order, so a Service's slices come in a row, and a cluster's hundreds of
/// thousands of slices then hold one copy of each per run. Endpoint
/// placements (`nodeName` and `zone`, kept for the local cluster's
/// endpoints) repeat across the whole cluster: one copy of each.
#[derive(Debug, Default)]
pub struct SliceInterner {
    namespace: Option<Arc<str>>,
    service_name: Option<Arc<str>>,
    ports: Option<Arc<[SlicePort]>>,
    placements: HashSet<Arc<EndpointDetails>>,
}

/// Distinct placements remembered before the interner starts over: a
/// cluster's nodes times its zones, with room to spare. Bounded so that
/// the placements of nodes long gone are not held forever.
const PLACEMENTS_REMEMBERED: usize = 16_384;

impl SliceInterner {
    /// Makes `namespace` the held allocation of the last namespace seen.
    pub fn namespace(&mut self, namespace: &mut Arc<str>) {
        let mut shared = Some(Arc::clone(namespace));
        share(&mut shared, &mut self.namespace);
        if let Some(shared) = shared {
            *namespace = shared;
        }
    }

    pub fn intern(&mut self, slice: &mut EndpointSlice) {
        share(&mut slice.metadata.namespace, &mut self.namespace);
        share(&mut slice.metadata.service_name, &mut self.service_name);
        share(&mut slice.ports, &mut self.ports);
        slice.endpoints.parsed.share_details(|details| {
            // A hostname is a pod's own: details with one do not repeat.
            if details.hostname.is_some() {
                return;
            }
            if let Some(held) = self.placements.get(details) {
                *details = Arc::clone(held);
                return;
            }
            if self.placements.len() >= PLACEMENTS_REMEMBERED {
                self.placements.clear();
            }
            self.placements.insert(Arc::clone(details));
        });
    }
}

/// Makes `value` the `last` allocation when they are equal, else
/// remembers it as the last one.
fn share<T: ?Sized + PartialEq>(value: &mut Option<Arc<T>>, last: &mut Option<Arc<T>>) {
    match (value.as_ref(), last.as_ref()) {
        (Some(new), Some(old)) if new == old => *value = Some(Arc::clone(old)),
        (Some(_), _) => last.clone_from(value),
        (None, _) => {}
    }
}

/// An EndpointSlice's `addressType`, as written.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(from = "String")]
pub enum AddressType {
    #[default]
    IPv4,
    IPv6,
    Fqdn,
    /// Not a type Kubernetes defines; the translation reports it.
    Other(Box<str>),
}

impl From<String> for AddressType {
    fn from(value: String) -> Self {
        match value.as_str() {
            "IPv4" => AddressType::IPv4,
            "IPv6" => AddressType::IPv6,
            "FQDN" => AddressType::Fqdn,
            _ => AddressType::Other(value.into()),
        }
    }
}

impl fmt::Display for AddressType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            AddressType::IPv4 => "IPv4",
            AddressType::IPv6 => "IPv6",
            AddressType::Fqdn => "FQDN",
            AddressType::Other(other) => other,
        })
    }
}

/// A port of an EndpointSlice as written.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SlicePort {
    #[serde(default)]
    pub name: Option<Box<str>>,
    #[serde(default)]
    pub port: Option<i32>,
    #[serde(default)]
    pub protocol: Option<Box<str>>,
    /// Not read, but a file's bad value in it is still an error, as it is
    /// for the whole k8s-openapi types.
    #[serde(default)]
    app_protocol: Option<Unread<String>>,
}

/// A field checked to be a `T` as it is decoded, and not kept.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Unread<T>(std::marker::PhantomData<T>);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Unread<T> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        T::deserialize(deserializer).map(|_| Unread(std::marker::PhantomData))
    }
}

/// A slice's endpoints: those whose first address parsed, in order, and
/// the others with their place among all of them.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
// The API server writes a slice without endpoints as `"endpoints": null`.
#[serde(from = "Option<Vec<ReadEndpoint>>")]
pub struct SliceEndpoints {
    pub parsed: Endpoints,
    /// In index order.
    pub unparsed: Box<[UnparsedEndpoint]>,
}

/// A parsed endpoint and its details, if it has any.
pub type ParsedRef<'a> = (Endpoint, Option<&'a Arc<EndpointDetails>>);

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

    /// Every endpoint, in the slice's order, with its index (and, when
    /// parsed, its details).
    pub fn iter(&self) -> impl Iterator<Item = (usize, Result<ParsedRef<'_>, &UnparsedEndpoint>)> {
        let mut parsed = self.parsed.with_details();
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

impl From<Option<Vec<ReadEndpoint>>> for SliceEndpoints {
    fn from(read: Option<Vec<ReadEndpoint>>) -> Self {
        let read = read.unwrap_or_default();
        let mut parsed = EndpointsBuilder::with_capacity(read.len());
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
            let details = EndpointDetails {
                hostname: endpoint.hostname.map(String::into_boxed_str),
                node_name: endpoint.node_name,
                zone: endpoint.zone,
            };
            let endpoint = Endpoint {
                address,
                ready,
                serving: conditions.serving.unwrap_or(ready),
                terminating: conditions.terminating.unwrap_or(false),
            };
            parsed.push(endpoint, details.shared());
        }
        Self {
            parsed: parsed.build(),
            unparsed: unparsed.into(),
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
            .map(|(index, endpoint)| (index, endpoint.ok().map(|(e, _)| e.address.to_string())))
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
        assert_eq!(endpoints.parsed.hostname(0), Some("a"));
        let details = endpoints.parsed.details(0).expect("details kept");
        assert_eq!(details.zone.as_deref(), Some("z1"));
        assert_eq!(details.node_name.as_deref(), Some("n1"));
        let second = endpoints.parsed.get(1).expect("a second endpoint");
        assert!(!second.ready && !second.serving && !second.terminating);
        assert!(endpoints.parsed.details(1).is_none());
    }

    /// What a real API server sends for a slice whose Service has no
    /// ready pods yet: `endpoints` is null, not left out.
    #[test]
    fn a_slice_whose_endpoints_are_null_has_none() {
        let slice: EndpointSlice = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "cart-x", "namespace": "shop"},
            "addressType": "IPv4", "ports": null, "endpoints": null,
        }))
        .expect("a slice with null endpoints decodes");
        assert_eq!(slice.endpoints.iter().count(), 0);
    }

    #[test]
    fn slices_in_a_row_share_what_repeats() {
        let slice = |service: &str, port: i32| -> EndpointSlice {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": format!("{service}-x"), "namespace": "shop",
                    "labels": {SERVICE_NAME_LABEL: service}},
                "addressType": "IPv4",
                "ports": [{"name": "http", "port": port}],
                "endpoints": [],
            }))
            .expect("slice decodes")
        };
        let mut interner = SliceInterner::default();
        let mut slices = [slice("cart", 80), slice("cart", 80), slice("shop", 81)];
        for slice in &mut slices {
            interner.intern(slice);
        }
        let [first, second, third] = &slices;
        let same = |a: &Option<Arc<str>>, b: &Option<Arc<str>>| match (a, b) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            _ => false,
        };
        assert!(same(&first.metadata.namespace, &third.metadata.namespace));
        assert!(same(
            &first.metadata.service_name,
            &second.metadata.service_name
        ));
        assert!(!same(
            &second.metadata.service_name,
            &third.metadata.service_name
        ));
        let ports = |s: &EndpointSlice| s.ports.clone().expect("ports");
        assert!(Arc::ptr_eq(&ports(first), &ports(second)));
        assert!(!Arc::ptr_eq(&ports(second), &ports(third)));
        assert_eq!(ports(third)[0].port, Some(81));
    }

    #[test]
    fn placements_are_held_once_and_hostnames_stay_their_own() {
        let slice = |name: &str| -> EndpointSlice {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": name, "namespace": "shop"},
                "addressType": "IPv4",
                "endpoints": [
                    {"addresses": ["10.0.0.1"], "nodeName": "n1", "zone": "z1"},
                    {"addresses": ["10.0.0.2"], "nodeName": "n1", "zone": "z1", "hostname": "b"},
                ],
            }))
            .expect("slice decodes")
        };
        let mut interner = SliceInterner::default();
        let mut slices = [slice("a"), slice("b")];
        for slice in &mut slices {
            interner.intern(slice);
        }
        let details = |slice: &EndpointSlice, index| {
            Arc::clone(slice.endpoints.parsed.details(index).expect("details"))
        };
        assert!(Arc::ptr_eq(
            &details(&slices[0], 0),
            &details(&slices[1], 0)
        ));
        assert!(!Arc::ptr_eq(
            &details(&slices[0], 1),
            &details(&slices[1], 1)
        ));
        assert_eq!(details(&slices[1], 1).hostname.as_deref(), Some("b"));
        assert_eq!(details(&slices[1], 0).zone.as_deref(), Some("z1"));
    }

    #[test]
    fn a_bad_app_protocol_is_an_error_though_it_is_not_read() {
        let port = |app_protocol: serde_json::Value| {
            serde_json::from_value::<SlicePort>(
                serde_json::json!({"name": "http", "port": 80, "appProtocol": app_protocol}),
            )
        };
        assert!(port(serde_json::json!("h2c")).is_ok());
        let error = port(serde_json::json!(5)).expect_err("appProtocol is a string");
        assert!(error.to_string().contains("invalid type"), "{error}");
    }

    #[test]
    fn an_endpoint_without_addresses_field_is_a_decode_error() {
        let error = serde_json::from_value::<SliceEndpoints>(serde_json::json!([{}]))
            .expect_err("addresses is required");
        assert!(error.to_string().contains("addresses"), "{error}");
    }
}
