//! What the import reconciler reads of the objects it holds and writes:
//! the resource a kind is written to, an object's version and identity,
//! whose a derived Service or slice is, and a write's outcome laid over
//! what the snapshot shows. Pure but for the API types.

use std::collections::HashMap;

use kube::core::ApiResource;
use serde_json::Value;

use crate::discovery::kube::client::Kind;
use crate::discovery::observed::{Observed, ObservedObject};
use crate::imports::diff::Change;
use crate::model::names::SERVICE_NAME_LABEL;

/// The ServiceImport resource in the version the local server offers.
pub(super) fn import_resource(api_version: &str) -> ApiResource {
    let (group, version) = api_version
        .split_once('/')
        .unwrap_or((Kind::ServiceImport.group(), "v1alpha1"));
    ApiResource {
        group: group.to_owned(),
        version: version.to_owned(),
        api_version: api_version.to_owned(),
        kind: Kind::ServiceImport.name().to_owned(),
        plural: Kind::ServiceImport.resource().to_owned(),
    }
}

/// Whether the API server refused a derived Service for its IP families
/// (a cluster that is not dual-stack, say).
pub(super) fn is_family_refusal(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status)
        if status.code == 422 && status.message.to_ascii_lowercase().contains("ipfamil"))
}

pub(super) fn resource_version(held: &ObservedObject) -> Option<String> {
    held.resource_version().map(str::to_owned)
}

/// A stand-in object naming `kind namespace/name`, for [`Observed::get`]
/// (a derived Service is named by its service label, which a written
/// result carries).
pub(super) fn identity_object(kind: &str, namespace: &str, name: &str) -> Value {
    serde_json::json!({"kind": kind, "metadata": {"namespace": namespace, "name": name}})
}

/// The Service (`namespace/name`) that `change` would write over, or write
/// slices for, when a Service of that name exists that Strait neither made
/// nor takes over (`kube.adoptImports`).
pub(super) fn squatted_by_another(change: &Change, observed: &Observed) -> Option<String> {
    let Change::Apply { object, .. } = change else {
        return None;
    };
    let namespace = object["metadata"]["namespace"].as_str().unwrap_or_default();
    let name = match object["kind"].as_str() {
        Some("Service") => object["metadata"]["name"].as_str(),
        Some("EndpointSlice") => object["metadata"]["labels"][SERVICE_NAME_LABEL].as_str(),
        _ => None,
    }?;
    let held = observed
        .foreign_services
        .get(&(namespace.to_owned(), name.to_owned()))?;
    (!held.ours() && !observed.adoptable(held)).then(|| format!("{namespace}/{name}"))
}

/// The service of each derived Service held, by its namespace and name: a
/// gateway slice names only its derived Service, and its import's `Ready`
/// must wait for it as for the others.
pub(super) fn derived_owners(observed: &Observed) -> HashMap<(String, String), String> {
    observed
        .derived
        .iter()
        .chain(
            observed
                .pod_services
                .iter()
                .map(|((key, _), held)| (key, held)),
        )
        .map(|(key, held)| {
            (
                (key.namespace.to_string(), held.name().to_owned()),
                key.name.to_string(),
            )
        })
        .collect()
}

/// Feeds a write's outcome into `observed`, so the next round sees it.
pub(super) fn apply_result(
    observed: &mut Observed,
    change: &Change,
    result: Option<ObservedObject>,
) {
    match change {
        Change::Apply { .. } => {
            if let Some(object) = result {
                observed.insert(object);
            }
        }
        Change::Delete {
            kind,
            namespace,
            name,
            ..
        } => observed.remove(kind, namespace, name),
    }
}

/// Whether the snapshot's cluster set holds the local cluster's import of
/// `service` with all of `ips`: what the routes, and so the DNS responder,
/// answer once built from that snapshot.
pub(super) fn imported_with(
    snapshot: &crate::discovery::kube::SourceSnapshot,
    service: &crate::model::ServiceKey,
    ips: &[std::net::IpAddr],
) -> bool {
    let Some(local) = snapshot.local.as_deref() else {
        return false;
    };
    snapshot
        .usable_set
        .as_ref()
        .and_then(|set| set.clusters.values().find(|c| c.id.as_str() == local))
        .and_then(|cluster| cluster.imports.get(service))
        .is_some_and(|held| ips.iter().all(|ip| held.contains(ip)))
}

/// Whether the held import of `service` is `Ready` with the ClusterSetIPs
/// `ips` already: it was answered when it turned Ready, and is not held
/// back again while the DNS responder follows a newer snapshot.
pub(super) fn ready_with(
    observed: &Observed,
    service: &crate::model::ServiceKey,
    ips: &[std::net::IpAddr],
) -> bool {
    let Some(held) = observed.imports.get(service) else {
        return false;
    };
    let held_ips: Vec<&str> = held.ips().collect();
    held.ready()
        && held_ips.len() == ips.len()
        && ips
            .iter()
            .all(|ip| held_ips.contains(&ip.to_string().as_str()))
}

/// [`derived_owners`] as the lookup [`super::super::writes`] takes: the
/// service of the derived Service `namespace/name`.
pub(super) fn owner_of(
    owners: &HashMap<(String, String), String>,
) -> impl Fn(&str, &str) -> Option<String> + '_ {
    |namespace, derived| {
        owners
            .get(&(namespace.to_owned(), derived.to_owned()))
            .cloned()
    }
}

/// The services `changes` write to.
pub(super) fn services_of(
    changes: &[Change],
    owner: &impl Fn(&str, &str) -> Option<String>,
) -> std::collections::BTreeSet<crate::model::ServiceKey> {
    changes
        .iter()
        .map(|change| {
            let (namespace, name) = super::super::writes::service_of(change, owner);
            crate::model::ServiceKey::new(namespace, name)
        })
        .collect()
}
