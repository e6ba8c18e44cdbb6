//! Server-side apply and field ownership.
//!
//! Each object has a side table of owners: per (manager, operation,
//! subresource) the set of leaf paths it owns. A path is the list of map
//! keys from the root; a leaf is any value that is not a map. Lists are
//! atomic leaves, except `status.conditions`, a `listType=map` list keyed
//! by `type` in every CRD here: its elements are merged by key and owned
//! field by field (`k:{"type":"Valid"}` in paths and in `fieldsV1`), so
//! managers applying different conditions keep each other's. Empty maps
//! and nulls own nothing. The server's own
//! metadata (`name`, `namespace`, `uid`, `resourceVersion`, `generation`,
//! `creationTimestamp`, `managedFields`) and `apiVersion`/`kind` are owned
//! by nobody. `metadata.managedFields` renders the table in the real
//! `FieldsV1` format (`{"f:spec": {"f:ports": {}}}`).

use std::collections::BTreeSet;

use hyper::{Response, StatusCode};
use serde_json::{Map, Value, json};

use super::store::{Commit, commit};
use super::write::{Call, bad_request, create, failure_with, in_place, missing, precondition};
use super::{Body, Resource, Shared, State, defaults, json_response};

/// The map keys from the root of an object to one of its values.
pub(super) type Path = Vec<String>;

/// When every managed-fields entry was written (one fixed time, so that a
/// write that changes nothing leaves the object as it was).
const WRITTEN: &str = "2025-01-01T00:00:00Z";

/// How a manager came to own its fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Operation {
    Apply,
    Update,
}

impl Operation {
    fn name(self) -> &'static str {
        match self {
            Operation::Apply => "Apply",
            Operation::Update => "Update",
        }
    }
}

/// One entry of `metadata.managedFields`.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Owner {
    pub(super) manager: String,
    pub(super) operation: Operation,
    /// Written through the status subresource.
    pub(super) status: bool,
    /// The version the manager wrote in.
    pub(super) api_version: String,
    pub(super) paths: BTreeSet<Path>,
}

impl Owner {
    fn is(&self, other: &Owner) -> bool {
        self.manager == other.manager
            && self.operation == other.operation
            && self.status == other.status
    }

    fn entry(&self) -> Value {
        let mut entry = json!({
            "manager": self.manager, "operation": self.operation.name(),
            "apiVersion": self.api_version, "time": WRITTEN,
            "fieldsType": "FieldsV1", "fieldsV1": fields_v1(&self.paths),
        });
        if self.status {
            entry["subresource"] = "status".into();
        }
        entry
    }
}

/// The part of an object one write may change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Scope {
    /// A kind without a status subresource: everything.
    All,
    /// The object of a kind with a status subresource: all but `status`.
    Main,
    /// The status subresource: `status` only.
    Status,
}

pub(super) fn scope(resource: &Resource, status: bool) -> Scope {
    if status {
        Scope::Status
    } else if resource.has_status {
        Scope::Main
    } else {
        Scope::All
    }
}

/// Metadata nobody owns: the server sets it.
const UNOWNED_METADATA: [&str; 9] = [
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "managedFields",
    "deletionTimestamp",
    "selfLink",
];

/// Whether a write in `scope` may own `path`.
fn in_scope(path: &[String], scope: Scope) -> bool {
    match path.first().map(String::as_str) {
        None | Some("apiVersion" | "kind") => false,
        Some("metadata") => {
            scope != Scope::Status
                && path
                    .get(1)
                    .is_some_and(|field| !UNOWNED_METADATA.contains(&field.as_str()))
        }
        Some("status") => scope != Scope::Main,
        Some(_) => scope != Scope::Status,
    }
}

/// The leaves of `object` a write in `scope` owns.
pub(super) fn leaves(object: &Value, scope: Scope) -> BTreeSet<Path> {
    let mut out = BTreeSet::new();
    collect(object, &mut Vec::new(), &mut out);
    out.retain(|path| in_scope(path, scope));
    out
}

/// The key field of the list at `path` when it is a `listType=map` list
/// (`status.conditions`, keyed by `type`, as in every CRD here): its
/// elements are owned field by field, named `k:{"type":"Valid"}`.
fn list_key(path: &[String]) -> Option<&'static str> {
    (path.len() == 2 && path[0] == "status" && path[1] == "conditions").then_some("type")
}

/// The path segment naming the element of a keyed list with `key: value`.
fn element_segment(key: &str, value: &Value) -> String {
    format!("k:{}", json!({key: value}))
}

/// Whether `element` is the one `segment` names.
fn is_element(element: &Value, segment: &str) -> bool {
    let Some(Ok(Value::Object(wanted))) = segment
        .strip_prefix("k:")
        .map(serde_json::from_str::<Value>)
    else {
        return false;
    };
    wanted.iter().all(|(k, v)| element.get(k) == Some(v))
}

fn collect(value: &Value, prefix: &mut Path, out: &mut BTreeSet<Path>) {
    match value {
        Value::Object(map) => {
            for (key, value) in map {
                prefix.push(key.clone());
                collect(value, prefix, out);
                prefix.pop();
            }
        }
        Value::Array(elements) if let Some(key) = list_key(prefix) => {
            for element in elements {
                match element.get(key) {
                    Some(id) if element.is_object() => {
                        prefix.push(element_segment(key, id));
                        collect(element, prefix, out);
                        prefix.pop();
                    }
                    // An element without its key is owned with the list.
                    _ => {
                        out.insert(prefix.clone());
                    }
                }
            }
        }
        Value::Null => {}
        _ => {
            out.insert(prefix.clone());
        }
    }
}

/// The value at `path`, if there is one.
pub(super) fn get<'a>(value: &'a Value, path: &[String]) -> Option<&'a Value> {
    let mut value = value;
    for key in path {
        value = match value {
            Value::Array(elements) => elements.iter().find(|e| is_element(e, key))?,
            _ => value.as_object()?.get(key)?,
        };
    }
    (!value.is_null()).then_some(value)
}

fn child_mut<'a>(value: &'a mut Value, key: &str) -> Option<&'a mut Value> {
    match value {
        Value::Array(elements) => elements.iter_mut().find(|e| is_element(e, key)),
        _ => value.as_object_mut()?.get_mut(key),
    }
}

/// Removes the value at `path`, and every map (or keyed list element, or
/// keyed list) that removal leaves empty on the way up (never the object
/// itself).
fn remove(value: &mut Value, path: &[String]) {
    remove_below(value, path);
}

/// Removes `path` below `node`; true when `node` is left empty. In a keyed
/// list the element's key fields stay while it has any other field, and an
/// element left with its key alone goes.
fn remove_below(node: &mut Value, path: &[String]) -> bool {
    let Some((first, rest)) = path.split_first() else {
        return false;
    };
    match node {
        Value::Array(elements) => {
            if let Some(index) = elements.iter().position(|e| is_element(e, first)) {
                let keys = segment_keys(first);
                let element = &mut elements[index];
                match rest {
                    [] => {}
                    [field] if keys.contains(field) => {}
                    _ => {
                        remove_below(element, rest);
                    }
                }
                let bare = rest.is_empty()
                    || element
                        .as_object()
                        .is_none_or(|fields| fields.keys().all(|k| keys.contains(k)));
                if bare {
                    elements.remove(index);
                }
            }
            elements.is_empty()
        }
        Value::Object(map) => {
            let emptied = rest.is_empty()
                || map
                    .get_mut(first)
                    .is_some_and(|child| remove_below(child, rest));
            if emptied {
                map.remove(first);
            }
            map.is_empty()
        }
        _ => false,
    }
}

/// The key fields a keyed list element's segment names.
fn segment_keys(segment: &str) -> Vec<String> {
    match segment
        .strip_prefix("k:")
        .map(serde_json::from_str::<Value>)
    {
        Some(Ok(Value::Object(keys))) => keys.keys().cloned().collect(),
        _ => Vec::new(),
    }
}

/// Merges `config` into `target`: maps are merged, keyed lists element by
/// element (by their key), everything else (scalars and other lists)
/// replaced.
fn merge(target: &mut Value, config: &Value) {
    merge_at(target, config, &mut Vec::new());
}

fn merge_at(target: &mut Value, config: &Value, path: &mut Path) {
    match (target, config) {
        (Value::Object(target), Value::Object(config)) => {
            for (key, value) in config {
                path.push(key.clone());
                match target.get_mut(key) {
                    Some(existing)
                        if (existing.is_object() && value.is_object())
                            || (existing.is_array()
                                && value.is_array()
                                && list_key(path).is_some()) =>
                    {
                        merge_at(existing, value, path)
                    }
                    _ => {
                        target.insert(key.clone(), value.clone());
                    }
                }
                path.pop();
            }
        }
        (Value::Array(target), Value::Array(config)) if let Some(key) = list_key(path) => {
            for element in config {
                let existing = element
                    .get(key)
                    .and_then(|id| target.iter_mut().find(|e| e.get(key) == Some(id)));
                match existing {
                    Some(existing) => merge_at(existing, element, path),
                    None => target.push(element.clone()),
                }
            }
        }
        (target, config) => *target = config.clone(),
    }
}

/// `value` without its nulls: an applied null neither sets nor owns.
fn without_nulls(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), without_nulls(v)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// The part of an applied configuration that `scope` may change, without
/// the metadata only the server sets.
fn scoped(config: &Value, scope: Scope) -> Value {
    let mut out = Map::new();
    for (key, value) in config.as_object().into_iter().flatten() {
        match key.as_str() {
            "apiVersion" | "kind" => {}
            "metadata" if scope != Scope::Status => {
                let metadata: Map<String, Value> = value
                    .as_object()
                    .into_iter()
                    .flatten()
                    .filter(|(k, _)| !UNOWNED_METADATA.contains(&k.as_str()))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                out.insert(key.clone(), Value::Object(metadata));
            }
            "metadata" => {}
            "status" if scope != Scope::Main => {
                out.insert(key.clone(), value.clone());
            }
            "status" => {}
            _ if scope != Scope::Status => {
                out.insert(key.clone(), value.clone());
            }
            _ => {}
        }
    }
    Value::Object(out)
}

/// An `Update` by `writer` (its paths unused) from `old` to `new`: the
/// writer owns the leaves in `scope` whose values changed, and every other
/// owner loses them.
pub(super) fn take_changed(
    owners: &mut Vec<Owner>,
    writer: Owner,
    old: &Value,
    new: &Value,
    scope: Scope,
) {
    let changed: BTreeSet<Path> = leaves(new, scope)
        .into_iter()
        .filter(|path| get(old, path) != get(new, path))
        .collect();
    if changed.is_empty() {
        return;
    }
    for owner in owners.iter_mut() {
        owner.paths.retain(|path| !changed.contains(path));
    }
    match owners.iter_mut().find(|o| o.is(&writer)) {
        Some(owner) => {
            owner.paths.extend(changed);
            owner.api_version = writer.api_version;
        }
        None => owners.push(Owner {
            paths: changed,
            ..writer
        }),
    }
}

/// Drops owned paths that are not in `object`, and owners left with none.
pub(super) fn prune(owners: &mut Vec<Owner>, object: &Value) {
    for owner in owners.iter_mut() {
        owner.paths.retain(|path| get(object, path).is_some());
    }
    owners.retain(|owner| !owner.paths.is_empty());
}

/// `metadata.managedFields` for `owners`; `None` when there are none.
pub(super) fn managed_fields(owners: &[Owner]) -> Option<Value> {
    (!owners.is_empty()).then(|| owners.iter().map(Owner::entry).collect())
}

/// The `FieldsV1` of a set of paths: `{"f:spec": {"f:type": {}}}`.
fn fields_v1(paths: &BTreeSet<Path>) -> Value {
    let mut root = Map::new();
    for path in paths {
        let mut node = &mut root;
        for key in path {
            let field = if key.starts_with("k:") {
                key.clone()
            } else {
                format!("f:{key}")
            };
            node = node
                .entry(field)
                .or_insert_with(|| json!({}))
                .as_object_mut()
                .expect("fieldsV1 nodes are maps");
        }
    }
    Value::Object(root)
}

/// `.spec.ports`: a path as conflict messages name it.
fn dotted(path: &[String]) -> String {
    path.iter().map(|key| format!(".{key}")).collect()
}

/// `409 Conflict`, as a real server words an apply's conflicts.
fn conflicts(owners: &[Owner], conflicts: &[(usize, Path)]) -> Response<Body> {
    let mut groups: Vec<(usize, Vec<&Path>)> = Vec::new();
    for (owner, path) in conflicts {
        match groups.iter_mut().find(|(o, _)| o == owner) {
            Some((_, paths)) => paths.push(path),
            None => groups.push((*owner, vec![path])),
        }
    }
    let described: Vec<String> = groups
        .iter()
        .map(|(owner, paths)| {
            let owner = &owners[*owner];
            let who = format!("\"{}\" using {}", owner.manager, owner.api_version);
            match paths.as_slice() {
                [path] => format!("conflict with {who}: {}", dotted(path)),
                paths => {
                    let list: Vec<String> =
                        paths.iter().map(|p| format!("- {}", dotted(p))).collect();
                    format!("conflicts with {who}:\n{}", list.join("\n"))
                }
            }
        })
        .collect();
    let causes: Vec<Value> = conflicts
        .iter()
        .map(|(owner, path)| {
            let owner = &owners[*owner];
            json!({"reason": "FieldManagerConflict",
                "message": format!("conflict with \"{}\" using {}", owner.manager, owner.api_version),
                "field": dotted(path)})
        })
        .collect();
    let count = conflicts.len();
    let plural = if count == 1 { "" } else { "s" };
    failure_with(
        StatusCode::CONFLICT,
        "Conflict",
        format!(
            "Apply failed with {count} conflict{plural}: {}",
            described.join("\n")
        ),
        json!({"causes": causes}),
    )
}

/// `PATCH` with `application/apply-patch+yaml`: creates the object or
/// merges the applied configuration into it, for `fieldManager`.
pub(super) fn apply(
    shared: &Shared,
    state: &mut State,
    call: &Call,
    name: &str,
    body: &Value,
) -> Response<Body> {
    let Some(manager) = call.query.get("fieldManager").filter(|m| !m.is_empty()) else {
        return bad_request("fieldManager is required for apply requests".to_owned());
    };
    let force = match call.query.get("force").map(String::as_str) {
        None | Some("false") => false,
        Some("true") => true,
        Some(other) => return bad_request(format!("invalid force {other:?}: not true or false")),
    };
    let resource = call.resource();
    if let Some(refused) = misfit(call, name, body) {
        return refused;
    }
    let config = without_nulls(body);
    let key = call.key(name);
    let me = Owner {
        manager: manager.clone(),
        operation: Operation::Apply,
        status: call.status,
        api_version: call.api_version().to_owned(),
        paths: BTreeSet::new(),
    };
    let Some(current) = state.objects.get(&key).cloned() else {
        if call.status {
            return missing(&resource, name);
        }
        // `call.manager` is the fieldManager, and `call` is not on /status.
        let object = in_place(&config, call);
        return match create(shared, state, call, name, object, Operation::Apply) {
            Ok(stored) => json_response(StatusCode::CREATED, &call.render(&stored)),
            Err(refused) => *refused,
        };
    };
    if let Some(conflict) = precondition(&resource, name, body, &current) {
        return conflict;
    }
    let scope = scope(&resource, call.status);
    let config = scoped(&config, scope);
    let applied = leaves(&config, scope);
    let mut owners = state.fields.get(&key).cloned().unwrap_or_default();
    let mine = owners.iter().position(|o| o.is(&me));
    let previous = mine.map(|i| owners[i].paths.clone()).unwrap_or_default();
    let mut object = current.clone();
    // What this manager set before and sets no more goes, unless another
    // manager owns it too.
    for path in previous.difference(&applied) {
        let kept = owners
            .iter()
            .enumerate()
            .any(|(i, o)| Some(i) != mine && o.paths.contains(path));
        if !kept {
            remove(&mut object, path);
        }
    }
    merge(&mut object, &config);
    if let Err(refused) = super::schema::admit(&resource, call.api_version(), &mut object) {
        return *refused;
    }
    if !call.status
        && let Err(refused) = defaults::on_update(state, &resource, &key, &current, &mut object)
    {
        return *refused;
    }
    // Another manager's field that this apply changes is a conflict.
    let mut clashes: Vec<(usize, Path)> = Vec::new();
    for (i, owner) in owners.iter().enumerate() {
        if owner.manager == *manager {
            continue;
        }
        for path in &owner.paths {
            let touched = applied
                .iter()
                .any(|p| p.starts_with(path) || path.starts_with(p));
            if touched && get(&current, path) != get(&object, path) {
                clashes.push((i, path.clone()));
            }
        }
    }
    if !clashes.is_empty() {
        if !force {
            return conflicts(&owners, &clashes);
        }
        for (i, path) in &clashes {
            owners[*i].paths.remove(path);
        }
    }
    match mine {
        Some(i) => {
            owners[i].paths = applied;
            owners[i].api_version = me.api_version;
        }
        None => owners.push(Owner {
            paths: applied,
            ..me
        }),
    }
    let stored = commit(shared, state, &resource, key, object, owners, Commit::Write);
    json_response(StatusCode::OK, &call.render(&stored))
}

/// `400` when an applied configuration is not the object of the URL: its
/// apiVersion, kind, name or namespace differ, or it sets managedFields.
fn misfit(call: &Call, name: &str, body: &Value) -> Option<Response<Body>> {
    let resource = call.resource();
    if !body.is_object() {
        return Some(bad_request(
            "the applied configuration must be an object".to_owned(),
        ));
    }
    let api_version = body["apiVersion"].as_str().unwrap_or("");
    if api_version != call.api_version() {
        return Some(bad_request(format!(
            "the API version in the data ({api_version}) does not match the expected API version ({})",
            call.api_version()
        )));
    }
    let kind = body["kind"].as_str().unwrap_or("");
    if kind != resource.kind {
        return Some(bad_request(format!(
            "the kind in the data ({kind}) does not match the expected kind ({})",
            resource.kind
        )));
    }
    let named = body["metadata"]["name"].as_str().unwrap_or("");
    if named != name {
        return Some(bad_request(format!(
            "the name of the object ({named}) does not match the name on the URL ({name})"
        )));
    }
    if let Some(namespace) = body["metadata"]["namespace"].as_str()
        && Some(namespace) != call.namespace
    {
        return Some(bad_request(
            "the namespace of the provided object does not match the namespace sent on the request"
                .to_owned(),
        ));
    }
    if !body["metadata"]["managedFields"].is_null() {
        return Some(bad_request("metadata.managedFields must be nil".to_owned()));
    }
    None
}
