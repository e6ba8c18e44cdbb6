//! Structural schemas of the CRDs: what a real API server does with an
//! object of a custom resource before storing it, from the very CRDs in
//! `deploy/crds/` (the upstream mcs-api v0.5.2 and about-api files).
//!
//! - **Pruning**: a field the schema does not declare is dropped
//!   silently, unless `x-kubernetes-preserve-unknown-fields` says keep it
//!   (or `additionalProperties` declares the map's values). `metadata`,
//!   `apiVersion` and `kind` are the server's own.
//! - **Validation**: `type` (`x-kubernetes-int-or-string` allows both),
//!   `required`, `enum`, `maxItems`, `minItems`, `maxLength`, `minimum`,
//!   `maximum`; an object that fails is `422 Invalid` with every cause,
//!   worded as a real server words them. Not checked: `pattern`, `format`,
//!   CEL rules (`x-kubernetes-validations`), `oneOf`/`anyOf`.

use std::collections::HashMap;
use std::sync::OnceLock;

use serde_json::{Map, Value, json};

use super::write::failure_with;
use super::{Body, Resource};
use hyper::{Response, StatusCode};

/// The `openAPIV3Schema` of each (group, version, kind) the CRDs define.
fn schemas() -> &'static HashMap<(String, String, String), Value> {
    static SCHEMAS: OnceLock<HashMap<(String, String, String), Value>> = OnceLock::new();
    SCHEMAS.get_or_init(|| {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/crds");
        let mut schemas = HashMap::new();
        for file in [
            "clusterproperties.yaml",
            "serviceexports.yaml",
            "serviceimports.yaml",
        ] {
            let path = dir.join(file);
            let text = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
            let crd = strait::discovery::yaml::parse_single(&text)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let group = crd["spec"]["group"].as_str().unwrap_or_default().to_owned();
            let kind = crd["spec"]["names"]["kind"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            for version in crd["spec"]["versions"].as_array().into_iter().flatten() {
                let name = version["name"].as_str().unwrap_or_default().to_owned();
                let schema = version["schema"]["openAPIV3Schema"].clone();
                schemas.insert((group.clone(), name, kind.clone()), schema);
            }
        }
        schemas
    })
}

/// Prunes and validates `object`, a `resource` object in `api_version`;
/// the `422` a real server answers when it is invalid. Every kind's labels
/// are checked as the real server checks them; kinds without a CRD here
/// (the built-in ones) are otherwise untouched.
pub(super) fn admit(
    resource: &Resource,
    api_version: &str,
    object: &mut Value,
) -> Result<(), Box<Response<Body>>> {
    let mut causes = label_causes(object);
    let version = api_version.rsplit('/').next().unwrap_or(api_version);
    let key = (
        resource.group.to_owned(),
        version.to_owned(),
        resource.kind.to_owned(),
    );
    let schema = schemas().get(&key).filter(|_| resource.crd);
    if let (Some(fields), Some(properties)) = (
        object.as_object_mut(),
        schema.and_then(|s| s["properties"].as_object()),
    ) {
        for (name, value) in fields.iter_mut() {
            if matches!(name.as_str(), "apiVersion" | "kind" | "metadata") {
                continue;
            }
            if let Some(field_schema) = properties.get(name) {
                check(field_schema, value, name, &mut causes);
            }
        }
        fields.retain(|name, _| {
            matches!(name.as_str(), "apiVersion" | "kind" | "metadata")
                || properties.contains_key(name)
        });
    }
    let required = schema.and_then(|s| s["required"].as_array());
    for required in required.into_iter().flatten() {
        if let Some(name) = required.as_str()
            && object.get(name).is_none()
        {
            causes.push((name.to_owned(), "Required value".to_owned()));
        }
    }
    if causes.is_empty() {
        return Ok(());
    }
    let name = object["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let qualified = format!("{}.{}", resource.kind, resource.group);
    let message = causes
        .iter()
        .map(|(field, message)| format!("{field}: {message}"))
        .collect::<Vec<_>>()
        .join(", ");
    let details: Vec<Value> = causes
        .iter()
        .map(|(field, message)| json!({"reason": "FieldValueInvalid", "message": message, "field": field}))
        .collect();
    Err(Box::new(failure_with(
        StatusCode::UNPROCESSABLE_ENTITY,
        "Invalid",
        format!("{qualified} \"{name}\" is invalid: {message}"),
        json!({"name": name, "group": resource.group, "kind": resource.kind, "causes": details}),
    )))
}

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Prunes `value` to `schema` and records why it is invalid, at `field`.
fn check(schema: &Value, value: &mut Value, field: &str, causes: &mut Vec<(String, String)>) {
    let int_or_string = schema["x-kubernetes-int-or-string"] == true;
    if let Some(wanted) = schema["type"].as_str() {
        let actual = type_name(value);
        let fits = actual == wanted
            || (wanted == "number" && actual == "integer")
            || (int_or_string && matches!(actual, "integer" | "string"));
        if !fits {
            causes.push((
                field.to_owned(),
                format!("Invalid value: \"{actual}\": {field} in body must be of type {wanted}: \"{actual}\""),
            ));
            return;
        }
    }
    if let Some(allowed) = schema["enum"].as_array()
        && !allowed.contains(value)
    {
        let supported: Vec<String> = allowed.iter().map(ToString::to_string).collect();
        causes.push((
            field.to_owned(),
            format!(
                "Unsupported value: {value}: supported values: {}",
                supported.join(", ")
            ),
        ));
    }
    let bound = |key: &str| schema[key].as_u64().and_then(|n| usize::try_from(n).ok());
    match value {
        Value::Object(map) => check_object(schema, map, field, causes),
        Value::Array(items) => {
            if let Some(max) = bound("maxItems")
                && items.len() > max
            {
                causes.push((
                    field.to_owned(),
                    format!("Too many: {}: must have at most {max} items", items.len()),
                ));
            }
            if let Some(min) = bound("minItems")
                && items.len() < min
            {
                causes.push((
                    field.to_owned(),
                    format!(
                        "Invalid value: {}: must have at least {min} items",
                        items.len()
                    ),
                ));
            }
            if schema["items"].is_object() {
                for (index, item) in items.iter_mut().enumerate() {
                    check(&schema["items"], item, &format!("{field}[{index}]"), causes);
                }
            }
        }
        Value::String(text) => {
            if let Some(max) = bound("maxLength")
                && text.chars().count() > max
            {
                causes.push((
                    field.to_owned(),
                    format!("Too long: may not be more than {max} bytes"),
                ));
            }
        }
        Value::Number(number) => {
            let n = number.as_f64().unwrap_or_default();
            if let Some(min) = schema["minimum"].as_f64()
                && n < min
            {
                causes.push((field.to_owned(), format!("Invalid value: {number}: {field} in body should be greater than or equal to {min}")));
            }
            if let Some(max) = schema["maximum"].as_f64()
                && n > max
            {
                causes.push((field.to_owned(), format!("Invalid value: {number}: {field} in body should be less than or equal to {max}")));
            }
        }
        _ => {}
    }
}

fn check_object(
    schema: &Value,
    map: &mut Map<String, Value>,
    field: &str,
    causes: &mut Vec<(String, String)>,
) {
    for required in schema["required"].as_array().into_iter().flatten() {
        if let Some(name) = required.as_str()
            && !map.contains_key(name)
        {
            causes.push((format!("{field}.{name}"), "Required value".to_owned()));
        }
    }
    let preserve = schema["x-kubernetes-preserve-unknown-fields"] == true;
    if let Some(properties) = schema["properties"].as_object() {
        for (name, value) in map.iter_mut() {
            if let Some(field_schema) = properties.get(name) {
                check(field_schema, value, &format!("{field}.{name}"), causes);
            }
        }
        if !preserve {
            map.retain(|name, _| properties.contains_key(name));
        }
    } else if schema["additionalProperties"].is_object() {
        for (name, value) in map.iter_mut() {
            check(
                &schema["additionalProperties"],
                value,
                &format!("{field}.{name}"),
                causes,
            );
        }
    } else if !preserve && schema["additionalProperties"] != true {
        // An object with no declared fields keeps none (`type: object` alone).
        map.clear();
    }
}

/// Label keys and values the real API server refuses, as its causes: a
/// value (and a key's name part) is at most 63 characters of
/// alphanumerics, `-`, `_` and `.`, starting and ending alphanumeric; a
/// key's optional prefix is a DNS subdomain.
fn label_causes(object: &Value) -> Vec<(String, String)> {
    fn qualified_name_part(text: &str) -> bool {
        text.len() <= 63
            && text.starts_with(|c: char| c.is_ascii_alphanumeric())
            && text.ends_with(|c: char| c.is_ascii_alphanumeric())
            && text
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    }
    let mut causes = Vec::new();
    let labels = object["metadata"]["labels"].as_object();
    for (key, value) in labels.into_iter().flatten() {
        let (prefix, name) = key.rsplit_once('/').unwrap_or(("", key));
        let prefix_ok = prefix.len() <= 253
            && prefix
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '-' | '.'));
        if !qualified_name_part(name) || !prefix_ok {
            causes.push((
                "metadata.labels".to_owned(),
                format!(
                    "Invalid value: {key:?}: name part must consist of alphanumeric characters"
                ),
            ));
        }
        let text = value.as_str().unwrap_or_default();
        if !text.is_empty() && !qualified_name_part(text) {
            causes.push((
                "metadata.labels".to_owned(),
                format!(
                    "Invalid value: {text:?}: a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"
                ),
            ));
        }
    }
    causes
}
