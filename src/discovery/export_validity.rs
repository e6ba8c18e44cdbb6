//! Whether each of the local cluster's ServiceExports can be exported, read
//! with the objects: the `Valid` condition's input, and the local exports as
//! the snapshots carry them to the export status writer. Pure.

use std::collections::{BTreeMap, HashMap};

use serde_json::Value;

use super::objects::{KubeObject, Service, SourcedObject};
use super::translate::labelled_gateway;
use crate::diagnostics::Diagnostic;
use crate::model::names::GATEWAY_LABEL;
use crate::model::{Cluster, ServiceKey};

/// Whether one ServiceExport's Service can be exported: the `Valid`
/// condition, with the reasons the MCS API defines (`Valid`, `NoService`,
/// `InvalidServiceType`) and `InvalidService` for a Service that exists but
/// that Strait refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Validity {
    Valid,
    /// No Service of the same namespace and name.
    NoService,
    /// The Service is of type ExternalName.
    InvalidServiceType,
    /// The Service exists but cannot be exported; says why.
    InvalidService(String),
}

impl Validity {
    pub fn is_valid(&self) -> bool {
        *self == Validity::Valid
    }

    /// The `Valid` condition's reason.
    pub fn reason(&self) -> &'static str {
        match self {
            Validity::Valid => "Valid",
            Validity::NoService => "NoService",
            Validity::InvalidServiceType => "InvalidServiceType",
            Validity::InvalidService(_) => "InvalidService",
        }
    }

    /// The `Valid` condition's message for the export of `key`.
    pub fn message(&self, key: &ServiceKey) -> String {
        match self {
            Validity::Valid => format!("Service {key} is exported."),
            Validity::NoService => format!("Service {key} does not exist in this cluster."),
            Validity::InvalidServiceType => {
                format!("Service {key} is of type ExternalName, which cannot be exported.")
            }
            Validity::InvalidService(why) => format!("Service {key} cannot be exported: {why}"),
        }
    }
}

/// One of the local cluster's ServiceExports as the API server holds it,
/// and whether its Service can be exported.
#[derive(Debug, Clone, PartialEq)]
pub struct LocalExport {
    pub key: ServiceKey,
    /// `metadata.generation`: the conditions' `observedGeneration`.
    pub generation: Option<i64>,
    /// `metadata.resourceVersion`: writes are conditional on it.
    pub resource_version: Option<String>,
    /// `status.conditions` as the server holds them, every type.
    pub conditions: Vec<Value>,
    pub validity: Validity,
}

/// Decides, for every ServiceExport among one cluster's `objects`, whether
/// its Service can be exported. `cluster` and `findings` are what
/// `translate_cluster` made of the same objects: a Service is exportable
/// when the translation took it in and attached the export to it.
pub fn export_validity(
    objects: &[&SourcedObject],
    cluster: &Cluster,
    findings: &[Diagnostic],
    gateway_namespace: &str,
) -> BTreeMap<ServiceKey, Validity> {
    let key_of = |object: &KubeObject| {
        ServiceKey::new(object.namespace().unwrap_or("default"), object.name())
    };
    let services: HashMap<ServiceKey, &Service> = objects
        .iter()
        .filter_map(|sourced| match &sourced.object {
            KubeObject::Service(service) => Some((key_of(&sourced.object), &**service)),
            _ => None,
        })
        .collect();
    objects
        .iter()
        .filter(|sourced| matches!(sourced.object, KubeObject::ServiceExport(_)))
        .map(|sourced| {
            let key = key_of(&sourced.object);
            let validity = match services.get(&key) {
                None => Validity::NoService,
                Some(service) => {
                    let gateway = key.namespace == gateway_namespace && labelled_gateway(service);
                    service_validity(&key, service, gateway, cluster, findings)
                }
            };
            (key, validity)
        })
        .collect()
}

fn service_validity(
    key: &ServiceKey,
    service: &Service,
    gateway: bool,
    cluster: &Cluster,
    findings: &[Diagnostic],
) -> Validity {
    let service_type = service.spec.as_ref().and_then(|s| s.type_.as_deref());
    if service_type == Some("ExternalName") {
        return Validity::InvalidServiceType;
    }
    if gateway {
        return Validity::InvalidService(format!(
            "it is this cluster's Strait gateway Service (label {GATEWAY_LABEL})."
        ));
    }
    // Any error the translation found on the Service makes it unexportable,
    // even where the rest of the Service was taken in.
    let object = format!("Service {key}");
    let refused = findings
        .iter()
        .find(|d| d.is_error() && d.object.as_deref() == Some(object.as_str()));
    if let Some(finding) = refused {
        return Validity::InvalidService(match &finding.field {
            Some(field) => format!("field {field}: {}", finding.message),
            None => finding.message.clone(),
        });
    }
    if cluster
        .services
        .get(key)
        .is_some_and(|service| service.export.is_some())
    {
        Validity::Valid
    } else {
        Validity::InvalidService("Strait could not read it.".to_owned())
    }
}
