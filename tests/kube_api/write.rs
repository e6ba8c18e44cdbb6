//! Writes to the stand-in API server and reads of one object, with a real
//! server's semantics (see the module docs of `kube_api` for the rules):
//!
//! - `GET .../{plural}/{name}`: one object, or `404 NotFound`;
//! - `POST .../{plural}`: creates (an `Update` operation), `409
//!   AlreadyExists` when the name is taken, `404` when the namespace is
//!   missing;
//! - `PUT .../{plural}/{name}[/status]`: replaces; `409 Conflict` when the
//!   body's `metadata.resourceVersion` (or `uid`) is not the current one;
//! - `PATCH .../{plural}/{name}[/status]` with a JSON merge patch
//!   (`application/merge-patch+json`, RFC 7386) or a server-side apply
//!   (`application/apply-patch+yaml`, in `apply`); other patch types get
//!   `415 Unsupported Media Type`;
//! - `DELETE` of one object or of a collection, in `delete`.
//!
//! Every write that changes something changes the global resource version
//! and is seen by watches; every write request is recorded with its
//! response code.

use std::collections::HashMap;

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::{Method, Request, Response, StatusCode};
use serde_json::{Value, json};

use super::apply::{self, Operation, Owner, Scope};
use super::query::parse_query;
use super::store::{Commit, commit};
use super::{
    ApiServer, Body, ObjectKey, RESOURCES, Resource, Selection, Shared, State, defaults, delete,
    json_response, not_found, served_versions, status,
};

/// One write request and how it was answered.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub method: String,
    pub path: String,
    pub code: u16,
    pub body: Value,
}

impl Recorded {
    /// A PATCH of a ServiceExport's status that the server applied.
    pub fn is_status_write(&self) -> bool {
        self.method == "PATCH" && self.path.ends_with("/status") && self.code == 200
    }
}

/// Where a request points: a collection, or one object (and perhaps its
/// status subresource).
#[derive(Debug)]
struct Target<'a> {
    group: &'a str,
    version: &'a str,
    namespace: Option<&'a str>,
    plural: &'a str,
    name: Option<&'a str>,
    status: bool,
}

fn target<'a>(segments: &[&'a str]) -> Option<Target<'a>> {
    let (group, version, rest) = match segments {
        ["api", version, rest @ ..] => ("", *version, rest),
        ["apis", group, version, rest @ ..] => (*group, *version, rest),
        _ => return None,
    };
    let (namespace, rest) = match rest {
        // A Namespace's own status, not a resource named `status`.
        ["namespaces", _, "status"] => (None, rest),
        ["namespaces", namespace, rest @ ..] if !rest.is_empty() => (Some(*namespace), rest),
        _ => (None, rest),
    };
    let (plural, name, status) = match rest {
        [plural] => (*plural, None, false),
        [plural, name] => (*plural, Some(*name), false),
        [plural, name, "status"] => (*plural, Some(*name), true),
        _ => return None,
    };
    Some(Target {
        group,
        version,
        namespace,
        plural,
        name,
        status,
    })
}

fn segments(path: &str) -> Vec<&str> {
    path.trim_matches('/').split('/').collect()
}

/// Whether this module answers the request: any write, and reads of one object.
pub(super) fn handles<B>(request: &Request<B>) -> bool {
    request.method() != Method::GET
        || target(&segments(request.uri().path())).is_some_and(|t| t.name.is_some())
}

pub(super) fn failure(code: StatusCode, reason: &str, message: String) -> Response<Body> {
    json_response(code, &status(code, reason, &message))
}

/// A failure Status with `details`.
pub(super) fn failure_with(
    code: StatusCode,
    reason: &str,
    message: String,
    details: Value,
) -> Response<Body> {
    let mut body = status(code, reason, &message);
    body["details"] = details;
    json_response(code, &body)
}

pub(super) fn bad_request(message: String) -> Response<Body> {
    failure(StatusCode::BAD_REQUEST, "BadRequest", message)
}

/// `422 Invalid`, as a real server's validation answers: `message` is what
/// follows the field, e.g. `Invalid value: "x": may not change once set`.
pub(super) fn invalid(kind: &str, name: &str, field: &str, message: &str) -> Response<Body> {
    failure_with(
        StatusCode::UNPROCESSABLE_ENTITY,
        "Invalid",
        format!("{kind} \"{name}\" is invalid: {field}: {message}"),
        json!({"name": name, "kind": kind, "causes": [
            {"reason": "FieldValueInvalid", "message": message, "field": field}]}),
    )
}

pub(super) fn missing(resource: &Resource, name: &str) -> Response<Body> {
    failure_with(
        StatusCode::NOT_FOUND,
        "NotFound",
        format!("{} \"{name}\" not found", qualified(resource)),
        json!({"name": name, "group": resource.group, "kind": resource.plural}),
    )
}

/// `services`, `leases.coordination.k8s.io`: a resource as messages name it.
pub(super) fn qualified(resource: &Resource) -> String {
    if resource.group.is_empty() {
        resource.plural.to_owned()
    } else {
        format!("{}.{}", resource.plural, resource.group)
    }
}

/// A refused write: the response, boxed (it is large).
pub(super) type Refused = Box<Response<Body>>;

/// One request on a resource: what it points at and who sends it.
pub(super) struct Call<'a> {
    /// The resource, and the version the request speaks.
    pub(super) selection: Selection,
    pub(super) namespace: Option<&'a str>,
    /// On the status subresource.
    pub(super) status: bool,
    pub(super) query: HashMap<String, String>,
    /// `fieldManager`, or what a real server derives from the user agent.
    pub(super) manager: String,
}

impl Call<'_> {
    pub(super) fn resource(&self) -> Resource {
        self.selection.resource
    }

    pub(super) fn api_version(&self) -> &str {
        &self.selection.api_version
    }

    pub(super) fn key(&self, name: &str) -> ObjectKey {
        (
            self.selection.resource.plural,
            self.namespace.unwrap_or("").to_owned(),
            name.to_owned(),
        )
    }

    /// The object as the response carries it.
    pub(super) fn render(&self, object: &Value) -> Value {
        self.selection.render(object, false)
    }

    fn scope(&self) -> Scope {
        apply::scope(&self.selection.resource, self.status)
    }
}

pub(super) async fn respond(
    shared: &Shared,
    request: Request<hyper::body::Incoming>,
) -> Response<Body> {
    let method = request.method().clone();
    let path = request.uri().path().to_owned();
    let query = parse_query(request.uri().query().unwrap_or(""));
    let header = |name| {
        request
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned()
    };
    let content_type = header(hyper::header::CONTENT_TYPE);
    let user_agent = header(hyper::header::USER_AGENT);
    let body = match request.into_body().collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(_) => Bytes::new(),
    };
    let body: Value = if body.is_empty() {
        Value::Null
    } else {
        match serde_json::from_slice(&body) {
            Ok(value) => value,
            Err(error) => return bad_request(format!("invalid JSON: {error}")),
        }
    };
    // A real server names an unnamed writer after its user agent.
    let manager = match query.get("fieldManager") {
        Some(manager) => manager.clone(),
        None => match user_agent.split('/').next() {
            Some(agent) if !agent.is_empty() => agent.to_owned(),
            _ => "unknown".to_owned(),
        },
    };
    let response = answer(shared, &method, &path, query, &content_type, manager, &body);
    if method != Method::GET {
        shared.state().writes.push(Recorded {
            method: method.to_string(),
            path,
            code: response.status().as_u16(),
            body,
        });
    }
    response
}

fn answer(
    shared: &Shared,
    method: &Method,
    path: &str,
    query: HashMap<String, String>,
    content_type: &str,
    manager: String,
    body: &Value,
) -> Response<Body> {
    let segments = segments(path);
    let Some(target) = target(&segments) else {
        return not_found(path);
    };
    let Some(resource) = RESOURCES
        .iter()
        .find(|r| r.group == target.group && r.plural == target.plural)
        .filter(|r| served_versions(shared, r).contains(&target.version))
        .copied()
    else {
        return not_found(path);
    };
    // Cluster-scoped objects live outside namespaces, namespaced ones in one
    // (only lists and watches, not here, may span every namespace).
    if resource.namespaced != target.namespace.is_some() || (target.status && !resource.has_status)
    {
        return not_found(path);
    }
    let api_version = if target.group.is_empty() {
        target.version.to_owned()
    } else {
        format!("{}/{}", target.group, target.version)
    };
    let call = Call {
        selection: Selection {
            resource,
            api_version,
            namespace: target.namespace.map(str::to_owned),
            labels: Vec::new(),
        },
        namespace: target.namespace,
        status: target.status,
        query,
        manager,
    };
    let mut state = shared.state();
    let state = &mut *state;
    match (method, target.name) {
        (&Method::GET, Some(name)) => match state.objects.get(&call.key(name)) {
            Some(object) => json_response(StatusCode::OK, &call.render(object)),
            None => missing(&resource, name),
        },
        (&Method::POST, None) => post(shared, state, &call, body),
        (&Method::PUT, Some(name)) => put(shared, state, &call, name, body),
        (&Method::PATCH, Some(name)) if content_type.starts_with("application/apply-patch") => {
            apply::apply(shared, state, &call, name, body)
        }
        (&Method::PATCH, Some(name))
            if content_type.starts_with("application/merge-patch+json") =>
        {
            merge(shared, state, &call, name, body)
        }
        (&Method::PATCH, Some(_)) => failure(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "UnsupportedMediaType",
            format!(
                "the test server takes merge patches and server-side apply only, not {content_type:?}"
            ),
        ),
        (&Method::DELETE, Some(name)) if !call.status => {
            delete::delete(shared, state, &call, name, body)
        }
        (&Method::DELETE, None) => delete::delete_collection(shared, state, &call),
        _ => failure(
            StatusCode::METHOD_NOT_ALLOWED,
            "MethodNotAllowed",
            format!("{method} is not supported on {path} by the test server"),
        ),
    }
}

/// `400` when the body names another namespace than the URL.
fn wrong_namespace(call: &Call, body: &Value) -> Option<Response<Body>> {
    let named = body["metadata"]["namespace"].as_str()?;
    (Some(named) != call.namespace).then(|| {
        bad_request(
            "the namespace of the provided object does not match the namespace sent on the request"
                .to_owned(),
        )
    })
}

fn post(shared: &Shared, state: &mut State, call: &Call, body: &Value) -> Response<Body> {
    let Some(name) = body["metadata"]["name"].as_str() else {
        return failure(
            StatusCode::UNPROCESSABLE_ENTITY,
            "Invalid",
            "metadata.name: Required value".to_owned(),
        );
    };
    if let Some(refused) = wrong_namespace(call, body) {
        return refused;
    }
    let resource = call.resource();
    if state.objects.contains_key(&call.key(name)) {
        return failure_with(
            StatusCode::CONFLICT,
            "AlreadyExists",
            format!("{} \"{name}\" already exists", qualified(&resource)),
            json!({"name": name, "group": resource.group, "kind": resource.plural}),
        );
    }
    let object = in_place(body, call);
    match create(shared, state, call, name, object, Operation::Update) {
        Ok(stored) => json_response(StatusCode::CREATED, &call.render(&stored)),
        Err(refused) => *refused,
    }
}

fn put(
    shared: &Shared,
    state: &mut State,
    call: &Call,
    name: &str,
    body: &Value,
) -> Response<Body> {
    if body["metadata"]["name"].as_str() != Some(name) {
        return bad_request("the name of the object does not match the name on the URL".to_owned());
    }
    if let Some(refused) = wrong_namespace(call, body) {
        return refused;
    }
    let resource = call.resource();
    let Some(current) = state.objects.get(&call.key(name)).cloned() else {
        return missing(&resource, name);
    };
    if let Some(conflict) = precondition(&resource, name, body, &current) {
        return conflict;
    }
    match update(shared, state, call, name, &current, in_place(body, call)) {
        Ok(stored) => json_response(StatusCode::OK, &call.render(&stored)),
        Err(refused) => *refused,
    }
}

fn merge(
    shared: &Shared,
    state: &mut State,
    call: &Call,
    name: &str,
    patch: &Value,
) -> Response<Body> {
    let resource = call.resource();
    let Some(current) = state.objects.get(&call.key(name)).cloned() else {
        return missing(&resource, name);
    };
    if let Some(conflict) = precondition(&resource, name, patch, &current) {
        return conflict;
    }
    let mut object = current.clone();
    merge_patch(&mut object, patch);
    match update(shared, state, call, name, &current, object) {
        Ok(stored) => json_response(StatusCode::OK, &call.render(&stored)),
        Err(refused) => *refused,
    }
}

/// The body as the object to store: its apiVersion and kind from the URL,
/// and its namespace.
pub(super) fn in_place(body: &Value, call: &Call) -> Value {
    let mut object = body.clone();
    object["apiVersion"] = call.api_version().into();
    object["kind"] = call.resource().kind.into();
    if let Some(namespace) = call.namespace {
        object["metadata"]["namespace"] = namespace.into();
    }
    object
}

/// `409 Conflict` when the body names a resource version or a uid that is
/// not the current one.
pub(super) fn precondition(
    resource: &Resource,
    name: &str,
    body: &Value,
    current: &Value,
) -> Option<Response<Body>> {
    if let Some(uid) = body["metadata"]["uid"].as_str() {
        let actual = current["metadata"]["uid"].as_str().unwrap_or("");
        if uid != actual {
            return Some(failure(
                StatusCode::CONFLICT,
                "Conflict",
                format!(
                    "Precondition failed: UID in precondition: {uid}, UID in object meta: {actual}"
                ),
            ));
        }
    }
    let wanted = body["metadata"]["resourceVersion"].as_str()?;
    let actual = current["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or("");
    (wanted != actual).then(|| {
        failure_with(
            StatusCode::CONFLICT,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": the object has been modified; please apply your changes to the latest version and try again",
                qualified(resource)
            ),
            json!({"name": name, "group": resource.group, "kind": resource.plural}),
        )
    })
}

/// `404 NotFound` when an object would be created in a namespace that does
/// not exist, as a real server's admission answers.
fn namespace_missing(
    state: &State,
    resource: &Resource,
    namespace: &str,
) -> Option<Response<Body>> {
    let exists = state
        .objects
        .contains_key(&("namespaces", String::new(), namespace.to_owned()));
    (resource.namespaced && !exists).then(|| {
        failure_with(
            StatusCode::NOT_FOUND,
            "NotFound",
            format!("namespaces \"{namespace}\" not found"),
            json!({"name": namespace, "kind": "namespaces"}),
        )
    })
}

/// Applies a JSON merge patch (RFC 7386) to `target`.
pub(super) fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(fields) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = json!({});
    }
    if let Value::Object(map) = target {
        for (key, value) in fields {
            if value.is_null() {
                map.remove(key);
            } else {
                merge_patch(map.entry(key.clone()).or_insert(Value::Null), value);
            }
        }
    }
}

/// Metadata only the server sets; what a client sends there is dropped.
const SERVER_SET: [&str; 6] = [
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "managedFields",
    "deletionTimestamp",
];

fn drop_server_metadata(object: &mut Value) {
    if let Some(metadata) = object["metadata"].as_object_mut() {
        for field in SERVER_SET {
            metadata.remove(field);
        }
    }
}

/// Creates `object` (apiVersion, kind and namespace in place) over HTTP:
/// the namespace must exist, the status of a kind with a status
/// subresource is dropped, the server's defaults are filled in, and
/// `call.manager` owns every field the request set, as `operation`.
pub(super) fn create(
    shared: &Shared,
    state: &mut State,
    call: &Call,
    name: &str,
    mut object: Value,
    operation: Operation,
) -> Result<Value, Refused> {
    let resource = call.resource();
    if let Some(refused) = namespace_missing(state, &resource, call.namespace.unwrap_or("")) {
        return Err(Box::new(refused));
    }
    drop_server_metadata(&mut object);
    if resource.has_status
        && let Some(map) = object.as_object_mut()
    {
        map.remove("status");
    }
    super::schema::admit(&resource, call.api_version(), &mut object)?;
    let paths = apply::leaves(&object, call.scope());
    let key = call.key(name);
    defaults::on_create(state, &resource, &key, &mut object)?;
    let owners = vec![Owner {
        manager: call.manager.clone(),
        operation,
        status: false,
        api_version: call.api_version().to_owned(),
        paths,
    }];
    Ok(commit(
        shared,
        state,
        &resource,
        key,
        object,
        owners,
        Commit::Write,
    ))
}

/// Replaces the existing `current` with `object` as an `Update` by
/// `call.manager`: on the status subresource only `status` changes,
/// otherwise everything but the status of a kind with a status subresource;
/// the server's defaults are filled in and allocated values kept; the
/// manager takes the fields it changed from every other manager.
pub(super) fn update(
    shared: &Shared,
    state: &mut State,
    call: &Call,
    name: &str,
    current: &Value,
    mut object: Value,
) -> Result<Value, Refused> {
    let resource = call.resource();
    let key = call.key(name);
    drop_server_metadata(&mut object);
    if call.status {
        let status = object.get("status").cloned();
        object = current.clone();
        set_or_remove(&mut object, "status", status);
    } else if resource.has_status {
        set_or_remove(&mut object, "status", current.get("status").cloned());
    }
    super::schema::admit(&resource, call.api_version(), &mut object)?;
    let written = object.clone();
    if !call.status {
        defaults::on_update(state, &resource, &key, current, &mut object)?;
    }
    let mut owners = state.fields.get(&key).cloned().unwrap_or_default();
    apply::take_changed(
        &mut owners,
        Owner {
            manager: call.manager.clone(),
            operation: Operation::Update,
            status: call.status,
            api_version: call.api_version().to_owned(),
            paths: Default::default(),
        },
        current,
        &written,
        call.scope(),
    );
    Ok(commit(
        shared,
        state,
        &resource,
        key,
        object,
        owners,
        Commit::Write,
    ))
}

/// The body of a response built here (always complete).
pub(super) fn text_of(response: Response<Body>) -> String {
    use futures_util::FutureExt;
    let body = response.into_body().collect().now_or_never();
    match body {
        Some(Ok(collected)) => String::from_utf8_lossy(&collected.to_bytes()).into_owned(),
        _ => String::new(),
    }
}

pub(super) fn set_or_remove(object: &mut Value, field: &str, value: Option<Value>) {
    let Some(map) = object.as_object_mut() else {
        return;
    };
    match value {
        Some(value) if !value.is_null() => {
            map.insert(field.to_owned(), value);
        }
        _ => {
            map.remove(field);
        }
    }
}

impl ApiServer {
    /// Every write request so far, in order.
    pub fn writes(&self) -> Vec<Recorded> {
        self.shared.state().writes.clone()
    }

    /// ServiceExport status writes the server applied.
    pub fn status_writes(&self) -> usize {
        self.writes().iter().filter(|w| w.is_status_write()).count()
    }

    /// PATCH requests on a status subresource, applied or not.
    pub fn status_requests(&self) -> usize {
        self.writes()
            .iter()
            .filter(|w| w.method == "PATCH" && w.path.ends_with("/status"))
            .count()
    }
}
