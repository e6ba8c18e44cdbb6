//! Discovery documents: `/api`, `/api/v1`, `/apis` and
//! `/apis/{group}/{version}`, each resource with every verb it serves and
//! `{plural}/status` for the resources with a status subresource.

use hyper::{Response, StatusCode};
use serde_json::{Value, json};

use super::{Body, RESOURCES, Shared, json_response, served_versions};

/// The verbs of every resource: all the server serves.
const VERBS: [&str; 8] = [
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

/// The verbs of a status subresource.
const STATUS_VERBS: [&str; 3] = ["get", "patch", "update"];

pub(super) fn versions(shared: &Shared) -> Response<Body> {
    json_response(
        StatusCode::OK,
        &json!({"kind": "APIVersions", "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0",
                "serverAddress": shared.address.to_string()}]}),
    )
}

pub(super) fn group_list(shared: &Shared) -> Value {
    let mut groups: Vec<(&str, Vec<&str>)> = Vec::new();
    for resource in RESOURCES.iter().filter(|r| !r.group.is_empty()) {
        if !groups.iter().any(|(g, _)| *g == resource.group) {
            groups.push((resource.group, served_versions(shared, resource)));
        }
    }
    let groups: Vec<Value> = groups
        .into_iter()
        .filter(|(_, versions)| !versions.is_empty())
        .map(|(group, versions)| {
            let entries: Vec<Value> = versions
                .iter()
                .map(|v| json!({"groupVersion": format!("{group}/{v}"), "version": v}))
                .collect();
            json!({"name": group, "versions": entries, "preferredVersion": entries[0]})
        })
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

pub(super) fn resource_list(shared: &Shared, group: &str, version: &str) -> Option<Response<Body>> {
    let mut resources = Vec::new();
    for r in RESOURCES
        .iter()
        .filter(|r| r.group == group && served_versions(shared, r).contains(&version))
    {
        resources.push(json!({"name": r.plural, "singularName": r.singular,
            "namespaced": r.namespaced, "kind": r.kind, "verbs": VERBS}));
        if r.has_status {
            resources.push(
                json!({"name": format!("{}/status", r.plural), "singularName": "",
                "namespaced": r.namespaced, "kind": r.kind, "verbs": STATUS_VERBS}),
            );
        }
    }
    if resources.is_empty() {
        return None;
    }
    let group_version = if group.is_empty() {
        version.to_owned()
    } else {
        format!("{group}/{version}")
    };
    Some(json_response(
        StatusCode::OK,
        &json!({"kind": "APIResourceList", "apiVersion": "v1",
            "groupVersion": group_version, "resources": resources}),
    ))
}
