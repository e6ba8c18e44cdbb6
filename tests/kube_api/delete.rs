//! Deletes, and the garbage collection that follows them.
//!
//! - `DELETE .../{plural}/{name}`: `200` with the deleted object, `404`
//!   when it is missing, `409` when `preconditions` (uid, resourceVersion)
//!   in the DeleteOptions body do not hold;
//! - `DELETE .../{plural}?labelSelector=...`: deletes the matching objects
//!   of the namespace, answers with the List of them;
//! - then, at once (a real garbage collector takes a moment), every object
//!   whose `ownerReferences` name only owners that are gone is deleted, and
//!   so on down; an object that still has a live owner loses the references
//!   to the gone ones. `propagationPolicy: Orphan` keeps the dependents of
//!   the deleted object and removes their references to it; `Foreground`
//!   is as `Background`. Deleting a Namespace deletes everything in it.
//!   Finalizers are not honoured: every delete is immediate.

use std::collections::{HashSet, VecDeque};

use hyper::{Response, StatusCode};
use serde_json::{Value, json};

use super::query::parse_selector;
use super::store::{Commit, commit};
use super::write::{Call, bad_request, failure, missing};
use super::{
    ApiServer, Body, ObjectKey, Selection, Shared, State, json_response, resource_of_kind,
};

pub(super) fn delete(
    shared: &Shared,
    state: &mut State,
    call: &Call,
    name: &str,
    options: &Value,
) -> Response<Body> {
    let resource = call.resource();
    let key = call.key(name);
    let Some(current) = state.objects.get(&key) else {
        return missing(&resource, name);
    };
    let preconditions = &options["preconditions"];
    for (field, label) in [("uid", "UID"), ("resourceVersion", "ResourceVersion")] {
        let actual = current["metadata"][field].as_str().unwrap_or("");
        if let Some(wanted) = preconditions[field].as_str()
            && wanted != actual
        {
            return failure(
                StatusCode::CONFLICT,
                "Conflict",
                format!(
                    "Precondition failed: {label} in precondition: {wanted}, {label} in object meta: {actual}"
                ),
            );
        }
    }
    let orphan = match options["propagationPolicy"].as_str() {
        None | Some("Background" | "Foreground") => false,
        Some("Orphan") => true,
        Some(other) => {
            return bad_request(format!(
                "propagationPolicy {other:?} is not Orphan, Background or Foreground"
            ));
        }
    };
    let deleted = remove(shared, state, key, orphan).expect("the object exists");
    json_response(StatusCode::OK, &call.render(&deleted))
}

pub(super) fn delete_collection(shared: &Shared, state: &mut State, call: &Call) -> Response<Body> {
    let resource = call.resource();
    let selection = Selection {
        resource,
        api_version: call.api_version().to_owned(),
        namespace: call.namespace.map(str::to_owned),
        labels: call
            .query
            .get("labelSelector")
            .map(|s| parse_selector(s))
            .unwrap_or_default(),
    };
    let keys: Vec<ObjectKey> = state
        .objects
        .iter()
        .filter(|(key, object)| key.0 == resource.plural && selection.matches(object))
        .map(|(key, _)| key.clone())
        .collect();
    let items: Vec<Value> = keys
        .into_iter()
        .filter_map(|key| remove(shared, state, key, false))
        .map(|object| selection.render(&object, true))
        .collect();
    json_response(
        StatusCode::OK,
        &json!({
            "kind": format!("{}List", resource.kind),
            "apiVersion": call.api_version(),
            "metadata": {"resourceVersion": state.revision.to_string()},
            "items": items,
        }),
    )
}

/// Deletes the object at `key` (`None` if there is none) and what the
/// garbage collector would delete after it; returns the deleted object.
pub(super) fn remove(
    shared: &Shared,
    state: &mut State,
    key: ObjectKey,
    orphan: bool,
) -> Option<Value> {
    let mut first = None;
    let mut queue = VecDeque::from([key]);
    while let Some(key) = queue.pop_front() {
        let Some(deleted) = delete_now(shared, state, &key) else {
            continue;
        };
        let uid = deleted["metadata"]["uid"].as_str().unwrap_or("").to_owned();
        if key.0 == "namespaces" {
            queue.extend(state.objects.keys().filter(|k| k.1 == key.2).cloned());
        }
        let was_first = first.is_none();
        if was_first {
            first = Some(deleted);
        }
        queue.extend(release(shared, state, &uid, was_first && orphan));
    }
    first
}

/// Removes one object, with a `DELETED` event at a new resource version.
fn delete_now(shared: &Shared, state: &mut State, key: &ObjectKey) -> Option<Value> {
    let mut object = state.objects.remove(key)?;
    state.fields.remove(key);
    state.revision += 1;
    object["metadata"]["resourceVersion"] = state.revision.to_string().into();
    shared.record(state, key.0, "DELETED", object.clone());
    Some(object)
}

/// The dependents of the gone owner `uid`: those left without a live owner
/// are returned, to be deleted (unless `orphan`); the others lose their
/// references to owners that are gone.
fn release(shared: &Shared, state: &mut State, uid: &str, orphan: bool) -> Vec<ObjectKey> {
    let live: HashSet<String> = state
        .objects
        .values()
        .filter_map(|o| o["metadata"]["uid"].as_str().map(str::to_owned))
        .collect();
    let dependents: Vec<(ObjectKey, Value)> = state
        .objects
        .iter()
        .filter(|(_, object)| {
            object["metadata"]["ownerReferences"]
                .as_array()
                .is_some_and(|refs| refs.iter().any(|r| r["uid"] == uid))
        })
        .map(|(key, object)| (key.clone(), object.clone()))
        .collect();
    let mut doomed = Vec::new();
    for (key, mut object) in dependents {
        let references = object["metadata"]["ownerReferences"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let kept: Vec<Value> = references
            .into_iter()
            .filter(|r| r["uid"] != uid && r["uid"].as_str().is_some_and(|u| live.contains(u)))
            .collect();
        if kept.is_empty() && !orphan {
            doomed.push(key);
            continue;
        }
        let metadata = object["metadata"].as_object_mut().expect("metadata");
        if kept.is_empty() {
            metadata.remove("ownerReferences");
        } else {
            metadata.insert("ownerReferences".to_owned(), kept.into());
        }
        let resource = resource_of_kind(object["kind"].as_str().unwrap_or(""));
        let owners = state.fields.get(&key).cloned().unwrap_or_default();
        commit(shared, state, &resource, key, object, owners, Commit::Write);
    }
    doomed
}

impl ApiServer {
    /// Deletes an object (`DELETED`), and then what the garbage collector
    /// would; panics if it does not exist.
    pub fn delete(&self, kind: &str, namespace: &str, name: &str) {
        let resource = resource_of_kind(kind);
        let namespace = if resource.namespaced { namespace } else { "" };
        let key = (resource.plural, namespace.to_owned(), name.to_owned());
        let mut state = self.shared.state();
        if remove(&self.shared, &mut state, key, false).is_none() {
            panic!("{kind} {namespace}/{name} does not exist");
        }
    }
}
