//! The Kubernetes objects Strait reads: the fields of Services and of every
//! kind's metadata that Strait reads ([`slim`]), the fields of EndpointSlice
//! that Strait reads (decoded into the model's endpoints, see
//! [`endpoint_slice`]), the MCS (`multicluster.x-k8s.io`) and About
//! (`about.k8s.io`) CRDs, and the decoding of an untyped document into one
//! of them by `apiVersion` and `kind`.

mod endpoint_slice;
mod slim;

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::diagnostics::{Diagnostic, Origin};

pub use endpoint_slice::{
    AddressType, EndpointSlice, SliceEndpoints, SliceInterner, SliceMetadata, SlicePort,
    UnparsedEndpoint,
};
pub use slim::{Metadata, Service, ServiceSpec};

/// API group of ClusterProperty.
pub const ABOUT_GROUP: &str = "about.k8s.io";
/// API group of ServiceExport and ServiceImport.
pub const MCS_GROUP: &str = "multicluster.x-k8s.io";
/// The versions served for both CRD groups; their shapes are identical.
pub const CRD_VERSIONS: [&str; 2] = ["v1beta1", "v1alpha1"];

/// `about.k8s.io` ClusterProperty: cluster-scoped, the name is the property.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ClusterProperty {
    #[serde(default)]
    pub metadata: Metadata,
    pub spec: ClusterPropertySpec,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
pub struct ClusterPropertySpec {
    pub value: String,
}

/// `multicluster.x-k8s.io` ServiceExport: marks the Service of the same name for export.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ServiceExport {
    #[serde(default)]
    pub metadata: Metadata,
    #[serde(default)]
    pub spec: ServiceExportSpec,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ServiceExportSpec {
    #[serde(default)]
    pub exported_labels: BTreeMap<String, String>,
    #[serde(default)]
    pub exported_annotations: BTreeMap<String, String>,
}

/// `multicluster.x-k8s.io` ServiceImport; Strait reads only the VIPs allocated in its cluster.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ServiceImport {
    #[serde(default)]
    pub metadata: Metadata,
    #[serde(default)]
    pub spec: ServiceImportSpec,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ServiceImportSpec {
    #[serde(default)]
    pub ips: Vec<String>,
    #[serde(default)]
    pub ip_families: Vec<String>,
}

/// One object of a kind Strait reads. Every kind is boxed: the store holds
/// tens of thousands of these, and an inline `ObjectMeta` would make each
/// of them (an EndpointSlice too) the size of the largest kind.
#[derive(Debug, Clone, PartialEq)]
pub enum KubeObject {
    ClusterProperty(Box<ClusterProperty>),
    Service(Box<Service>),
    ServiceExport(Box<ServiceExport>),
    ServiceImport(Box<ServiceImport>),
    EndpointSlice(Box<EndpointSlice>),
}

impl KubeObject {
    pub fn kind(&self) -> &'static str {
        match self {
            KubeObject::ClusterProperty(_) => "ClusterProperty",
            KubeObject::Service(_) => "Service",
            KubeObject::ServiceExport(_) => "ServiceExport",
            KubeObject::ServiceImport(_) => "ServiceImport",
            KubeObject::EndpointSlice(_) => "EndpointSlice",
        }
    }

    /// The name and namespace, as written.
    fn identity(&self) -> (Option<&str>, Option<&str>) {
        fn of(metadata: &Metadata) -> (Option<&str>, Option<&str>) {
            (metadata.name.as_deref(), metadata.namespace.as_deref())
        }
        match self {
            KubeObject::ClusterProperty(o) => of(&o.metadata),
            KubeObject::Service(o) => of(&o.metadata),
            KubeObject::ServiceExport(o) => of(&o.metadata),
            KubeObject::ServiceImport(o) => of(&o.metadata),
            KubeObject::EndpointSlice(o) => {
                (o.metadata.name.as_deref(), o.metadata.namespace.as_deref())
            }
        }
    }

    /// The namespace, defaulted as `kubectl apply` would; `None` for cluster-scoped kinds.
    pub fn namespace(&self) -> Option<&str> {
        match self {
            KubeObject::ClusterProperty(_) => None,
            _ => Some(self.identity().1.unwrap_or("default")),
        }
    }

    pub fn name(&self) -> &str {
        self.identity().0.unwrap_or("")
    }

    /// `Kind namespace/name`, or `Kind name` for cluster-scoped kinds, for messages.
    pub fn display_name(&self) -> String {
        match self.namespace() {
            Some(namespace) => format!("{} {namespace}/{}", self.kind(), self.name()),
            None => format!("{} {}", self.kind(), self.name()),
        }
    }
}

/// The outcome of decoding one document.
#[derive(Debug)]
pub enum Decoded {
    Object(Box<KubeObject>),
    /// A kind Strait does not read; skipped with a warning.
    Unknown {
        api_version: String,
        kind: String,
    },
}

/// A document that claims a known kind but does not have its shape.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct DecodeError {
    /// The object, when its kind and name could be read.
    pub object: Option<String>,
    /// The path of the offending field, when serde could tell.
    pub field: Option<String>,
    pub message: String,
}

/// Decodes a value (read from YAML, or from the API server's JSON) into the object its `apiVersion` and `kind` name.
pub fn decode_value(document: serde_json::Value) -> Result<Decoded, DecodeError> {
    let text = |key: &str| {
        document
            .get(key)
            .and_then(|v| v.as_str())
            .map(str::to_owned)
    };
    let missing = |field: &str| DecodeError {
        object: None,
        field: Some(field.to_owned()),
        message: "is missing or not a string".to_owned(),
    };
    let api_version = text("apiVersion").ok_or_else(|| missing("apiVersion"))?;
    let kind = text("kind").ok_or_else(|| missing("kind"))?;
    let name = document
        .get("metadata")
        .and_then(|m| m.get("name"))
        .and_then(|n| n.as_str())
        .unwrap_or("<unnamed>")
        .to_owned();
    let (group, version) = match api_version.split_once('/') {
        Some((group, version)) => (group, version),
        None => ("", api_version.as_str()),
    };
    let crd_version = CRD_VERSIONS.contains(&version);
    let object = match (group, version, kind.as_str()) {
        ("", "v1", "Service") => {
            typed(document, &kind, &name).map(|s| KubeObject::Service(Box::new(s)))
        }
        ("discovery.k8s.io", "v1", "EndpointSlice") => {
            typed(document, &kind, &name).map(|s| KubeObject::EndpointSlice(Box::new(s)))
        }
        (ABOUT_GROUP, _, "ClusterProperty") if crd_version => {
            typed(document, &kind, &name).map(|p| KubeObject::ClusterProperty(Box::new(p)))
        }
        (MCS_GROUP, _, "ServiceExport") if crd_version => {
            typed(document, &kind, &name).map(|e| KubeObject::ServiceExport(Box::new(e)))
        }
        (MCS_GROUP, _, "ServiceImport") if crd_version => {
            typed(document, &kind, &name).map(|i| KubeObject::ServiceImport(Box::new(i)))
        }
        _ => return Ok(Decoded::Unknown { api_version, kind }),
    }?;
    Ok(Decoded::Object(Box::new(object)))
}

fn typed<T: serde::de::DeserializeOwned>(
    document: serde_json::Value,
    kind: &str,
    name: &str,
) -> Result<T, DecodeError> {
    serde_path_to_error::deserialize(document).map_err(|error| {
        let path = error.path().to_string();
        DecodeError {
            object: Some(format!("{kind} {name}")),
            field: (path != ".").then_some(path),
            message: error.into_inner().to_string(),
        }
    })
}

/// An object and where it was read.
#[derive(Debug, Clone)]
pub struct SourcedObject {
    /// Shared by the objects read from one source (an API server's are
    /// all of one).
    pub origin: Arc<Origin>,
    pub object: KubeObject,
}

/// Splits one file into its documents and decodes each. Pure, so that any
/// byte string can be thrown at it.
pub fn parse_file(source: &str, text: &str) -> (Vec<SourcedObject>, Vec<Diagnostic>) {
    let mut objects = Vec::new();
    let mut diagnostics = Vec::new();
    for document in super::yaml::documents(text) {
        let origin = Origin::document(source, document.number);
        let value = match super::yaml::parse_document(&document) {
            Ok(serde_json::Value::Null) => continue,
            Ok(value) => value,
            Err(error) => {
                // Only this document is lost: the next one starts at its marker.
                diagnostics.push(Diagnostic::error(origin, format!("invalid YAML: {error}")));
                continue;
            }
        };
        if !value.is_object() {
            diagnostics.push(Diagnostic::error(
                origin,
                "is not a Kubernetes object (expected a mapping with apiVersion and kind)",
            ));
            continue;
        }
        match decode_value(value) {
            Ok(Decoded::Object(object)) => objects.push(SourcedObject {
                origin: Arc::new(origin),
                object: *object,
            }),
            Ok(Decoded::Unknown { api_version, kind }) => diagnostics.push(Diagnostic::warning(
                origin,
                format!("{kind} ({api_version}) is not a kind Strait reads; skipped"),
            )),
            Err(error) => {
                let mut diagnostic = Diagnostic::error(origin, error.message);
                diagnostic.object = error.object;
                diagnostic.field = error.field;
                diagnostics.push(diagnostic);
            }
        }
    }
    (objects, diagnostics)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn yaml(text: &str) -> serde_json::Value {
        crate::discovery::yaml::parse_single(text).expect("test yaml parses")
    }

    #[test]
    fn decodes_each_served_version_of_the_crds() {
        for version in CRD_VERSIONS {
            let document = yaml(&format!(
                "apiVersion: multicluster.x-k8s.io/{version}\nkind: ServiceExport\nmetadata: {{name: cart, namespace: shop}}\n"
            ));
            let Ok(Decoded::Object(object)) = decode_value(document) else {
                panic!("{version} ServiceExport should decode");
            };
            let KubeObject::ServiceExport(export) = *object else {
                panic!("{version} should decode as a ServiceExport");
            };
            assert_eq!(export.metadata.name.as_deref(), Some("cart"));
        }
    }

    #[test]
    fn unknown_kinds_and_versions_are_reported_not_failed() {
        let document = yaml("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\n");
        assert!(
            matches!(decode_value(document), Ok(Decoded::Unknown { kind, .. }) if kind == "Deployment")
        );
        let document = yaml("apiVersion: multicluster.x-k8s.io/v2\nkind: ServiceExport\n");
        assert!(matches!(
            decode_value(document),
            Ok(Decoded::Unknown { .. })
        ));
    }

    #[test]
    fn a_wrong_field_type_names_the_field() {
        let document = yaml(
            "apiVersion: v1\nkind: Service\nmetadata: {name: cart}\nspec:\n  ports:\n  - port: high\n",
        );
        let error = decode_value(document).expect_err("port must be a number");
        assert_eq!(error.field.as_deref(), Some("spec.ports[0].port"));
        assert_eq!(error.object.as_deref(), Some("Service cart"));
    }

    #[test]
    fn a_document_without_kind_is_an_error() {
        let error =
            decode_value(yaml("apiVersion: v1\nmetadata: {name: x}\n")).expect_err("no kind");
        assert_eq!(error.field.as_deref(), Some("kind"));
    }
}
