//! Desired against observed: which objects to apply and which to delete.
//! An object is applied when a field Strait sets differs from what the
//! server holds (someone edited it, or the plan changed), or when the
//! digest of what Strait last applied differs (a field Strait no longer
//! sets must go). Fields others set are not compared: server-side apply
//! keeps them. Strait deletes only objects it created. Pure.

use std::collections::{HashMap, HashSet};

use serde_json::Value;

use super::render::DesiredObject;
use crate::discovery::observed::{Observed, ObservedObject};
use crate::model::applied_digest::APPLIED_DIGEST_ANNOTATION;
use crate::model::names::{MCS_SERVICE_NAME_LABEL, SERVICE_NAME_LABEL};

/// One write the reconciler should make.
#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    /// Server-side apply `object` (its `status` subresource when `status`).
    Apply { object: Value, status: bool },
    /// Delete an object Strait created that the plan no longer holds.
    Delete {
        api_version: String,
        kind: String,
        namespace: String,
        name: String,
    },
}

impl Change {
    /// The kind, namespace and name of the object written.
    pub fn identity(&self) -> (String, String, String) {
        match self {
            Change::Apply { object, .. } => identity(object),
            Change::Delete {
                kind,
                namespace,
                name,
                ..
            } => (kind.clone(), namespace.clone(), name.clone()),
        }
    }

    /// `Kind namespace/name`, for logs.
    pub fn describe(&self) -> String {
        match self {
            Change::Apply { object, status } => format!(
                "apply {}{} {}/{}",
                object["kind"].as_str().unwrap_or_default(),
                if *status { " status" } else { "" },
                object["metadata"]["namespace"].as_str().unwrap_or_default(),
                object["metadata"]["name"].as_str().unwrap_or_default(),
            ),
            Change::Delete {
                kind,
                namespace,
                name,
                ..
            } => format!("delete {kind} {namespace}/{name}"),
        }
    }
}

/// Whether every field of `want` holds the same value in `have`. Maps may
/// hold more keys; lists must match element by element (they are replaced
/// whole by an apply of Strait's lists). An empty list or map is held by a
/// field the server left out or stored as null, as a real API server
/// stores an EndpointSlice's empty `endpoints` (else every round would
/// apply it again).
pub fn contains(have: &Value, want: &Value) -> bool {
    match (want, have) {
        (Value::Object(want), Value::Object(have)) => want.iter().all(|(key, value)| {
            have.get(key)
                .map_or_else(|| is_empty(value), |held| contains(held, value))
        }),
        (Value::Array(want), Value::Array(have)) => {
            want.len() == have.len() && want.iter().zip(have).all(|(w, h)| contains(h, w))
        }
        (want, Value::Null) if is_empty(want) => true,
        (Value::Number(want), Value::Number(have)) => want.as_f64() == have.as_f64(),
        (want, have) => want == have,
    }
}

/// An empty list or map.
fn is_empty(value: &Value) -> bool {
    match value {
        Value::Array(items) => items.is_empty(),
        Value::Object(fields) => fields.is_empty(),
        _ => false,
    }
}

fn identity(object: &Value) -> (String, String, String) {
    let text = |value: &Value| value.as_str().unwrap_or_default().to_owned();
    (
        text(&object["kind"]),
        text(&object["metadata"]["namespace"]),
        text(&object["metadata"]["name"]),
    )
}

fn needs_apply(desired: &DesiredObject, held: Option<&ObservedObject>) -> bool {
    let Some(held) = held else {
        return true;
    };
    let Some(raw) = held.raw() else {
        // Held as its digest: it holds what Strait applied with that one.
        let wanted = desired.object["metadata"]["annotations"][APPLIED_DIGEST_ANNOTATION].as_str();
        return desired.status || held.intact_digest() != wanted;
    };
    if desired.status {
        return !contains(&raw["status"], &desired.object["status"]);
    }
    // The desired object carries the digest annotation, so a dropped field
    // shows as a differing annotation here.
    !contains(raw, &desired.object)
}

/// The applies `desired` needs, and no deletion: for a `desired` that is
/// only part of the plan (some services' objects), where what it leaves
/// out is not thereby unwanted. The objects move into the changes: a
/// pass over a whole cluster renders a great many.
pub fn applies(desired: Vec<DesiredObject>, observed: &Observed) -> Vec<Change> {
    desired
        .into_iter()
        .filter(|object| needs_apply(object, observed.get(&object.object)))
        .map(|object| Change::Apply {
            object: object.object,
            status: object.status,
        })
        .collect()
}

/// The writes that make `observed` hold `desired`: applies first (an
/// import before its derived Service before its slices, as `desired`
/// orders them), then deletions.
pub fn changes(desired: Vec<DesiredObject>, observed: &Observed) -> Vec<Change> {
    let held = observed
        .imports
        .values()
        .chain(observed.derived.values())
        .chain(observed.pod_services.values())
        .chain(observed.slices.values());
    changes_among(desired, observed, held)
}

/// The writes that make `observed` hold `desired` for some services only:
/// `desired` holds every object of those services, and `held` the objects
/// the cluster holds for them ([`Observed::by_service`]); nothing else is
/// compared or deleted.
pub fn changes_of<'a>(
    desired: Vec<DesiredObject>,
    observed: &'a Observed,
    held: impl Iterator<Item = &'a ObservedObject>,
) -> Vec<Change> {
    changes_among(desired, observed, held)
}

fn changes_among<'a>(
    desired: Vec<DesiredObject>,
    observed: &'a Observed,
    held: impl Iterator<Item = &'a ObservedObject>,
) -> Vec<Change> {
    let wanted: HashSet<(String, String, String)> = desired
        .iter()
        .map(|object| identity(&object.object))
        .collect();
    // A held object that is not desired goes, unless its owner is desired
    // without its children (an owner whose uid is not known yet): the
    // child is only missing from this plan, and must not be deleted for it.
    let complete_by_identity: HashMap<(String, String, String), bool> = desired
        .iter()
        .filter(|d| !d.status)
        .map(|d| (identity(&d.object), d.complete))
        .collect();
    let owner_complete = |kind: &str, namespace: &str, name: Option<&str>| {
        let key = (
            kind.to_owned(),
            namespace.to_owned(),
            name.unwrap_or_default().to_owned(),
        );
        complete_by_identity.get(&key).copied()
    };
    let stale = |held: &ObservedObject| {
        let identity = (
            held.kind().to_owned(),
            held.namespace().to_owned(),
            held.name().to_owned(),
        );
        if wanted.contains(&identity) {
            return false;
        }
        let namespace = held.namespace();
        let import = || {
            owner_complete(
                "ServiceImport",
                namespace,
                held.label(MCS_SERVICE_NAME_LABEL),
            )
            .unwrap_or(true)
        };
        match held.kind() {
            "Service" => import(),
            // A derived Service's slice belongs to the import its Service
            // stands for; an MCS slice names its import itself.
            "EndpointSlice" => {
                let service = held.label(SERVICE_NAME_LABEL);
                owner_complete("Service", namespace, service).unwrap_or_else(|| {
                    let derived_for = observed
                        .all_derived()
                        .find(|(_, _, d)| d.namespace() == namespace && Some(d.name()) == service)
                        .map(|(key, _, _)| key.name.as_str());
                    match derived_for.or(held.label(MCS_SERVICE_NAME_LABEL)) {
                        Some(import) => {
                            owner_complete("ServiceImport", namespace, Some(import)).unwrap_or(true)
                        }
                        None => true,
                    }
                })
            }
            _ => true,
        }
    };
    // A previous implementation's slices of a derived Service Strait took
    // over, once Strait's own slices of it are held: until then they are
    // all kube-proxy has for the Service, and deleting them first would
    // refuse its callers until Strait's arrive.
    let superseded: Vec<&ObservedObject> = desired
        .iter()
        .filter(|d| !d.status && d.object["kind"] == "Service")
        .flat_map(|d| {
            let metadata = &d.object["metadata"];
            let namespace = metadata["namespace"].as_str().unwrap_or_default();
            let name = metadata["name"].as_str().unwrap_or_default();
            let previous: Vec<&ObservedObject> =
                observed.adoptable_slices_of(namespace, name).collect();
            let listed = !previous.is_empty()
                && observed.slices.values().any(|slice| {
                    slice.namespace() == namespace && slice.label(SERVICE_NAME_LABEL) == Some(name)
                });
            if listed { previous } else { Vec::new() }
        })
        .collect();
    // Only Strait's own objects and those it takes over: another
    // controller's ServiceImport of the same name is never deleted.
    let ours = held
        .filter(|held| held.kind() != "ServiceImport" || held.ours() || observed.adoptable(held))
        .chain(superseded);
    let stale: Vec<&ObservedObject> = ours.filter(|held| stale(held)).collect();
    let mut changes = applies(desired, observed);
    for held in stale {
        changes.push(Change::Delete {
            api_version: held.api_version().to_owned(),
            kind: held.kind().to_owned(),
            namespace: held.namespace().to_owned(),
            name: held.name().to_owned(),
        });
    }
    changes
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn containment_ignores_other_fields_but_not_list_lengths() {
        let have = json!({"a": 1, "b": {"c": "x", "d": true}, "l": [{"p": 80, "q": 1}]});
        assert!(contains(&have, &json!({"b": {"c": "x"}})));
        assert!(contains(&have, &json!({"l": [{"p": 80}]})));
        assert!(contains(&have, &json!({"a": 1.0})));
        assert!(!contains(&have, &json!({"b": {"c": "y"}})));
        assert!(!contains(&have, &json!({"l": [{"p": 80}, {"p": 81}]})));
        assert!(!contains(&have, &json!({"z": null})));
    }

    /// A real API server stores an EndpointSlice without endpoints as
    /// `"endpoints": null`; the slice Strait wants lists none. Held, it
    /// is not applied again (it was, every round, against a real server).
    #[test]
    fn an_empty_list_is_held_by_a_null_or_missing_field_and_only_an_empty_one() {
        let stored = json!({"endpoints": null, "ports": [{"port": 80}]});
        assert!(contains(&stored, &json!({"endpoints": []})));
        assert!(contains(
            &json!({"ports": []}),
            &json!({"endpoints": [], "labels": {}})
        ));
        assert!(!contains(
            &stored,
            &json!({"endpoints": [{"addresses": ["10.0.0.1"]}]})
        ));
        assert!(!contains(
            &json!({"endpoints": []}),
            &json!({"endpoints": null})
        ));
    }
}
