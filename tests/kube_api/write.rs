//! Writes to the stand-in API server, with a real server's semantics for
//! what Strait's export status writer and its leader election send:
//!
//! - `GET .../{plural}/{name}`: one object, or `404 NotFound`;
//! - `POST .../namespaces/{ns}/{plural}`: creates, `409 AlreadyExists` when
//!   the name is taken;
//! - `PUT .../{plural}/{name}`: replaces; `409 Conflict` when the body's
//!   `metadata.resourceVersion` is not the current one;
//! - `PATCH .../{plural}/{name}/status` with a JSON merge patch
//!   (`application/merge-patch+json`, RFC 7386): only `status` changes, and
//!   a `metadata.resourceVersion` in the patch is a precondition (`409
//!   Conflict`). Other patch types get `415 Unsupported Media Type`.
//!
//! Every write changes the global resource version and is seen by watches;
//! every write request is recorded with its response code.

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::{Method, Request, Response, StatusCode};
use serde_json::{Value, json};

use super::{
    ApiServer, Body, RESOURCES, Resource, Selection, Shared, json_response, not_found,
    resource_of_kind, served_versions, status,
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

fn failure(code: StatusCode, reason: &str, message: String) -> Response<Body> {
    json_response(code, &status(code, reason, &message))
}

pub(super) async fn respond(
    shared: &Shared,
    request: Request<hyper::body::Incoming>,
) -> Response<Body> {
    let method = request.method().clone();
    let path = request.uri().path().to_owned();
    let content_type = request
        .headers()
        .get(hyper::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let body = match request.into_body().collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(_) => Bytes::new(),
    };
    let body: Value = if body.is_empty() {
        Value::Null
    } else {
        match serde_json::from_slice(&body) {
            Ok(value) => value,
            Err(error) => {
                return failure(
                    StatusCode::BAD_REQUEST,
                    "BadRequest",
                    format!("invalid JSON: {error}"),
                );
            }
        }
    };
    let response = answer(shared, &method, &path, &content_type, &body);
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
    content_type: &str,
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
    let api_version = if target.group.is_empty() {
        target.version.to_owned()
    } else {
        format!("{}/{}", target.group, target.version)
    };
    let selection = Selection {
        resource,
        api_version,
        namespace: target.namespace.map(str::to_owned),
        labels: Vec::new(),
    };
    let key = |name: &str| {
        (
            resource.plural,
            target.namespace.unwrap_or("").to_owned(),
            name.to_owned(),
        )
    };
    match (method, target.name, target.status) {
        (&Method::GET, Some(name), _) => match shared.state().objects.get(&key(name)) {
            Some(object) => json_response(StatusCode::OK, &selection.render(object, false)),
            None => missing(&resource, name),
        },
        (&Method::POST, None, false) => {
            let Some(name) = body["metadata"]["name"].as_str() else {
                return failure(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "Invalid",
                    "metadata.name: Required value".to_owned(),
                );
            };
            if shared.state().objects.contains_key(&key(name)) {
                return failure(
                    StatusCode::CONFLICT,
                    "AlreadyExists",
                    format!(
                        "{}.{} \"{name}\" already exists",
                        resource.plural, resource.group
                    ),
                );
            }
            let stored = shared.store(in_place(body, &resource, target.namespace), true);
            json_response(StatusCode::CREATED, &selection.render(&stored, false))
        }
        (&Method::PUT, Some(name), false) => {
            if body["metadata"]["name"].as_str() != Some(name) {
                return failure(
                    StatusCode::BAD_REQUEST,
                    "BadRequest",
                    "the name of the object does not match the name on the URL".to_owned(),
                );
            }
            let current = shared.state().objects.get(&key(name)).cloned();
            let Some(current) = current else {
                return missing(&resource, name);
            };
            if let Some(conflict) = precondition(&resource, name, body, &current) {
                return conflict;
            }
            let stored = shared.store(in_place(body, &resource, target.namespace), true);
            json_response(StatusCode::OK, &selection.render(&stored, false))
        }
        (&Method::PATCH, Some(name), true) => {
            if !content_type.starts_with("application/merge-patch+json") {
                return failure(
                    StatusCode::UNSUPPORTED_MEDIA_TYPE,
                    "UnsupportedMediaType",
                    format!("the test server takes merge patches only, not {content_type:?}"),
                );
            }
            patch_status(shared, &selection, key(name), name, body)
        }
        _ => failure(
            StatusCode::METHOD_NOT_ALLOWED,
            "MethodNotAllowed",
            format!("{method} is not supported on {path} by the test server"),
        ),
    }
}

fn missing(resource: &Resource, name: &str) -> Response<Body> {
    failure(
        StatusCode::NOT_FOUND,
        "NotFound",
        format!(
            "{}.{} \"{name}\" not found",
            resource.plural, resource.group
        ),
    )
}

/// The body as the object to store: its kind and namespace from the URL.
fn in_place(body: &Value, resource: &Resource, namespace: Option<&str>) -> Value {
    let mut object = body.clone();
    object["kind"] = resource.kind.into();
    if let Some(namespace) = namespace {
        object["metadata"]["namespace"] = namespace.into();
    }
    object
}

/// `409 Conflict` when the body names a resource version that is not the
/// current one.
fn precondition(
    resource: &Resource,
    name: &str,
    body: &Value,
    current: &Value,
) -> Option<Response<Body>> {
    let wanted = body["metadata"]["resourceVersion"].as_str()?;
    let actual = current["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or("");
    (wanted != actual).then(|| {
        failure(
            StatusCode::CONFLICT,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {}.{} \"{name}\": the object has been modified; please apply your changes to the latest version and try again",
                resource.plural, resource.group
            ),
        )
    })
}

/// Applies a JSON merge patch (RFC 7386) to `target`.
fn merge_patch(target: &mut Value, patch: &Value) {
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

fn patch_status(
    shared: &Shared,
    selection: &Selection,
    key: (&'static str, String, String),
    name: &str,
    patch: &Value,
) -> Response<Body> {
    let resource = &selection.resource;
    let mut state = shared.state();
    let Some(current) = state.objects.get(&key).cloned() else {
        return missing(resource, name);
    };
    if let Some(conflict) = precondition(resource, name, patch, &current) {
        return conflict;
    }
    // The status subresource changes the status and nothing else.
    let mut object = current;
    let mut status = object.get("status").cloned().unwrap_or(Value::Null);
    if let Some(patched) = patch.get("status") {
        merge_patch(&mut status, patched);
    }
    object["status"] = status;
    state.revision += 1;
    object["metadata"]["resourceVersion"] = state.revision.to_string().into();
    state.objects.insert(key, object.clone());
    shared.record(&mut state, resource.plural, "MODIFIED", object.clone());
    json_response(StatusCode::OK, &selection.render(&object, false))
}

impl Shared {
    /// Creates or replaces an object, stamping its metadata as a server
    /// does; with `notify`, watches see `ADDED` or `MODIFIED`. Returns the
    /// object stored.
    pub(super) fn store(&self, mut object: Value, notify: bool) -> Value {
        let kind = object["kind"].as_str().expect("object kind").to_owned();
        let resource = resource_of_kind(&kind);
        let name = object["metadata"]["name"]
            .as_str()
            .expect("object name")
            .to_owned();
        let namespace = if resource.namespaced {
            let namespace = object["metadata"]["namespace"]
                .as_str()
                .unwrap_or("default")
                .to_owned();
            object["metadata"]["namespace"] = namespace.clone().into();
            namespace
        } else {
            String::new()
        };
        let key = (resource.plural, namespace, name.clone());
        let mut state = self.state();
        state.revision += 1;
        let revision = state.revision;
        let existing = state.objects.get(&key).cloned();
        // A CRD's status is written through its status subresource only.
        if resource.crd
            && let Some(existing) = &existing
            && let Some(map) = object.as_object_mut()
        {
            match existing.get("status") {
                Some(status) if !status.is_null() => {
                    map.insert("status".to_owned(), status.clone());
                }
                _ => {
                    map.remove("status");
                }
            }
        }
        let generation = match &existing {
            Some(existing) => {
                let old = existing["metadata"]["generation"].as_i64().unwrap_or(1);
                if existing.get("spec") == object.get("spec") {
                    old
                } else {
                    old + 1
                }
            }
            None => 1,
        };
        let metadata = &mut object["metadata"];
        metadata["resourceVersion"] = revision.to_string().into();
        metadata["generation"] = generation.into();
        let created = existing.as_ref().and_then(|e| {
            e["metadata"]["creationTimestamp"]
                .as_str()
                .map(str::to_owned)
        });
        if metadata["creationTimestamp"].is_null() {
            metadata["creationTimestamp"] = created
                .unwrap_or_else(|| "2025-01-01T00:00:00Z".to_owned())
                .into();
        }
        if metadata["uid"].is_null() {
            metadata["uid"] = format!("uid-{}-{name}", resource.plural).into();
        }
        state.objects.insert(key, object.clone());
        if notify {
            let event = if existing.is_some() {
                "MODIFIED"
            } else {
                "ADDED"
            };
            self.record(&mut state, resource.plural, event, object.clone());
        }
        object
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

    /// An object as the server holds it now.
    pub fn object(&self, kind: &str, namespace: &str, name: &str) -> Option<Value> {
        let resource = resource_of_kind(kind);
        let namespace = if resource.namespaced { namespace } else { "" };
        self.shared
            .state()
            .objects
            .get(&(resource.plural, namespace.to_owned(), name.to_owned()))
            .cloned()
    }

    /// The `status.conditions` of the ServiceExport `shop/<name>`.
    pub fn export_conditions(&self, name: &str) -> Vec<Value> {
        self.object("ServiceExport", "shop", name)
            .and_then(|export| export["status"]["conditions"].as_array().cloned())
            .unwrap_or_default()
    }
}
