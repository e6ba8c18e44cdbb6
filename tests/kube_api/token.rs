//! The TokenRequest subresource (`POST
//! /api/v1/namespaces/{ns}/serviceaccounts/{name}/token`), as a real server
//! answers it for a token bound to a Secret: the token is JWT-shaped with
//! `exp` and `kubernetes.io.secret.{name,uid}` claims (unsigned: only this
//! server checks it), and it authenticates only while it has not expired
//! and the Secret it is bound to still exists with that uid — deleting the
//! Secret revokes it.

use std::time::{Duration, SystemTime};

use data_encoding::BASE64URL_NOPAD;
use http_body_util::BodyExt;
use hyper::{Method, Request, Response, StatusCode};
use serde_json::{Value, json};

use super::{Body, Shared, State, json_response, status};

/// A minted token's binding.
#[derive(Debug, Clone)]
pub(super) struct BoundToken {
    namespace: String,
    secret: String,
    uid: String,
    expires: SystemTime,
}

/// The account a request asks a token of, if it is a TokenRequest.
fn account<B>(request: &Request<B>) -> Option<(String, String)> {
    if request.method() != Method::POST {
        return None;
    }
    let segments: Vec<&str> = request.uri().path().trim_matches('/').split('/').collect();
    match segments.as_slice() {
        [
            "api",
            "v1",
            "namespaces",
            namespace,
            "serviceaccounts",
            name,
            "token",
        ] => Some(((*namespace).to_owned(), (*name).to_owned())),
        _ => None,
    }
}

/// Whether this module answers the request.
pub(super) fn handles<B>(request: &Request<B>) -> bool {
    account(request).is_some()
}

/// Whether `token` is a bound token that still authenticates.
pub(super) fn authenticates(state: &State, token: &str) -> bool {
    let Some(bound) = state.bound_tokens.get(token) else {
        return false;
    };
    let secret = state
        .objects
        .get(&("secrets", bound.namespace.clone(), bound.secret.clone()));
    SystemTime::now() < bound.expires
        && secret.is_some_and(|s| s["metadata"]["uid"].as_str() == Some(&bound.uid))
}

fn failure(code: StatusCode, reason: &str, message: &str) -> Response<Body> {
    json_response(code, &status(code, reason, message))
}

pub(super) async fn respond(
    shared: &Shared,
    request: Request<hyper::body::Incoming>,
) -> Response<Body> {
    let Some((namespace, account)) = account(&request) else {
        return failure(StatusCode::NOT_FOUND, "NotFound", "not a TokenRequest");
    };
    let body = request
        .into_body()
        .collect()
        .await
        .map(|c| c.to_bytes())
        .unwrap_or_default();
    let Ok(body) = serde_json::from_slice::<Value>(&body) else {
        return failure(StatusCode::BAD_REQUEST, "BadRequest", "invalid JSON");
    };
    let mut state = shared.state();
    if !state.token_requests {
        return failure(
            StatusCode::NOT_FOUND,
            "NotFound",
            "the server could not find the requested resource",
        );
    }
    if !state
        .objects
        .contains_key(&("serviceaccounts", namespace.clone(), account.clone()))
    {
        return failure(
            StatusCode::NOT_FOUND,
            "NotFound",
            &format!("serviceaccounts \"{account}\" not found"),
        );
    }
    let spec = &body["spec"];
    let seconds = spec["expirationSeconds"].as_u64().unwrap_or(3600);
    if seconds < 600 {
        return failure(
            StatusCode::UNPROCESSABLE_ENTITY,
            "Invalid",
            "spec.expirationSeconds: Invalid value: may not specify a duration less than 10 minutes",
        );
    }
    let bound = &spec["boundObjectRef"];
    let (Some("Secret"), Some(secret), Some(uid)) = (
        bound["kind"].as_str(),
        bound["name"].as_str(),
        bound["uid"].as_str(),
    ) else {
        return failure(
            StatusCode::UNPROCESSABLE_ENTITY,
            "Invalid",
            "this stand-in mints only tokens bound to a Secret",
        );
    };
    let current = state
        .objects
        .get(&("secrets", namespace.clone(), secret.to_owned()))
        .and_then(|s| s["metadata"]["uid"].as_str());
    if current != Some(uid) {
        return failure(
            StatusCode::CONFLICT,
            "Conflict",
            &format!(
                "the UID in the bound object reference ({uid}) does not match the UID in record"
            ),
        );
    }
    let expires = SystemTime::now() + Duration::from_secs(seconds);
    let exp = expires
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    state.minted_tokens += 1;
    let claims = json!({"exp": exp, "jti": state.minted_tokens,
        "sub": format!("system:serviceaccount:{namespace}:{account}"),
        "kubernetes.io": {"namespace": namespace,
            "secret": {"name": secret, "uid": uid},
            "serviceaccount": {"name": account}}});
    let encode = |value: &Value| BASE64URL_NOPAD.encode(value.to_string().as_bytes());
    let token = format!(
        "{}.{}.c3RhbmQtaW4",
        encode(&json!({"alg": "none"})),
        encode(&claims)
    );
    state.bound_tokens.insert(
        token.clone(),
        BoundToken {
            namespace: namespace.clone(),
            secret: secret.to_owned(),
            uid: uid.to_owned(),
            expires,
        },
    );
    let timestamp = humantime::format_rfc3339_seconds(expires).to_string();
    json_response(
        StatusCode::CREATED,
        &json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
            "metadata": {"name": account, "namespace": namespace},
            "spec": spec,
            "status": {"token": token, "expirationTimestamp": timestamp}}),
    )
}
