//! The reader's credential: a bound, expiring token from the remote
//! server's TokenRequest API. It is bound to the link's anchor Secret in
//! the remote cluster, so deleting the anchor (as `strait unlink` does)
//! revokes every token minted for the link at once, and it expires after
//! `--token-lifetime`. Linking again keeps a token it minted while more
//! than half of its life is left, so a periodic `strait link` renews it
//! without rewriting the local Secret on every run. A server that does
//! not serve TokenRequest gets the legacy never-expiring token Secret.

use std::time::{Duration, SystemTime};

use data_encoding::BASE64;
use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Secret, ServiceAccount};
use kube::Client;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

use super::{
    LinkError, LinkOptions, Remote, RemoteServer, api_error, apply, delete, labels,
    linked_kubeconfig,
};
use crate::discovery::kube::bearer::token_claims;

/// How long the remote token controller may take to fill in a legacy token.
const TOKEN_WAIT: Duration = Duration::from_secs(30);
/// The shortest lifetime the API server mints (`expirationSeconds` ≥ 600).
pub const MIN_TOKEN_LIFETIME: Duration = Duration::from_secs(600);

/// The anchor Secret's name: tokens are bound to it.
pub fn anchor_name(reader: &str) -> String {
    format!("{reader}-anchor")
}

/// The legacy token Secret's name (servers without TokenRequest, and links
/// made before bound tokens).
pub fn legacy_token_name(reader: &str) -> String {
    format!("{reader}-token")
}

/// The anchor: an empty Secret whose only job is to exist. Its uid is in
/// every token of the link; deleting it revokes them.
pub fn anchor_secret(namespace: &str, reader: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
        "metadata": {"name": anchor_name(reader), "namespace": namespace, "labels": labels(),
            "annotations": {"strait.dev/revokes": "deleting this Secret revokes every token strait link minted for this reader"}}})
}

/// The legacy token Secret the token controller fills in.
pub fn legacy_token_secret(namespace: &str, reader: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/service-account-token",
        "metadata": {"name": legacy_token_name(reader), "namespace": namespace, "labels": labels(),
            "annotations": {"kubernetes.io/service-account.name": reader}}})
}

/// What kind of token a link holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenKind {
    /// Minted now, bound to the anchor.
    Bound,
    /// The bound token the local Secret already held, kept.
    Kept,
    /// A legacy token Secret's: the server does not serve TokenRequest.
    Legacy,
}

/// The reader's credential.
#[derive(Debug, Clone)]
pub struct Credential {
    pub token: String,
    /// The cluster CA (base64 PEM) the server published with it, if any.
    pub ca: Option<String>,
    pub expires: Option<SystemTime>,
    pub kind: TokenKind,
}

/// When `held` expires, if it may be kept: bound to the current anchor,
/// with more than half of `lifetime` left at `now`. Its claims are read
/// unverified; a token that lies about them only fails to work, as it
/// would anyway.
pub fn keepable(
    held: &str,
    anchor_uid: &str,
    lifetime: Duration,
    now: SystemTime,
) -> Option<SystemTime> {
    let claims = token_claims(held)?;
    let expires = claims.expires?;
    let left = expires.duration_since(now).ok()?;
    (claims.bound_secret_uid.as_deref() == Some(anchor_uid) && left > lifetime / 2)
        .then_some(expires)
}

/// The reader's credential in the remote cluster: `held` if it may be
/// kept, else a new bound token, else (TokenRequest not served) the
/// legacy token Secret's. The anchor must have been applied.
pub async fn credential(
    client: &Client,
    namespace: &str,
    reader: &str,
    lifetime: Duration,
    held: Option<&str>,
    cluster: &str,
) -> Result<Credential, LinkError> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let anchor = anchor_name(reader);
    let anchor_uid = secrets
        .get(&anchor)
        .await
        .map_err(|source| api_error(format!("read Secret {namespace}/{anchor}"), cluster, source))?
        .metadata
        .uid
        .unwrap_or_default();
    if let Some(held) = held
        && let Some(expires) = keepable(held, &anchor_uid, lifetime, SystemTime::now())
    {
        return Ok(Credential {
            token: held.to_owned(),
            ca: None,
            expires: Some(expires),
            kind: TokenKind::Kept,
        });
    }
    let request = TokenRequest {
        spec: TokenRequestSpec {
            // Empty: the API server's own audience.
            audiences: Vec::new(),
            expiration_seconds: Some(i64::try_from(lifetime.as_secs()).unwrap_or(i64::MAX)),
            bound_object_ref: Some(BoundObjectReference {
                api_version: Some("v1".to_owned()),
                kind: Some("Secret".to_owned()),
                name: Some(anchor.clone()),
                uid: Some(anchor_uid),
            }),
        },
        ..TokenRequest::default()
    };
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), namespace);
    match accounts
        .create_token_request(reader, &PostParams::default(), &request)
        .await
    {
        Ok(issued) => {
            let status = issued.status.ok_or_else(|| LinkError::NoIssuedToken {
                cluster: cluster.to_owned(),
                account: format!("{namespace}/{reader}"),
            })?;
            Ok(Credential {
                expires: token_claims(&status.token)
                    .and_then(|c| c.expires)
                    .or_else(|| Some(SystemTime::from(status.expiration_timestamp.0))),
                token: status.token,
                ca: None,
                kind: TokenKind::Bound,
            })
        }
        // Not served (the subresource is older than any server Strait
        // supports, but an aggregated or trimmed server may lack it).
        Err(kube::Error::Api(status)) if status.code == 404 => {
            apply(client, &legacy_token_secret(namespace, reader), cluster).await?;
            let (token, ca) = wait_for_legacy_token(client, namespace, reader, cluster).await?;
            Ok(Credential {
                token,
                ca,
                expires: None,
                kind: TokenKind::Legacy,
            })
        }
        Err(source) => Err(api_error(
            format!("request a token for ServiceAccount {namespace}/{reader}"),
            cluster,
            source,
        )),
    }
}

/// The token and CA (base64 PEM) the token controller put in the legacy
/// token Secret, once it has.
async fn wait_for_legacy_token(
    client: &Client,
    namespace: &str,
    reader: &str,
    cluster: &str,
) -> Result<(String, Option<String>), LinkError> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let name = legacy_token_name(reader);
    let deadline = tokio::time::Instant::now() + TOKEN_WAIT;
    loop {
        let secret = secrets.get(&name).await.map_err(|source| {
            api_error(format!("read Secret {namespace}/{name}"), cluster, source)
        })?;
        let data = secret.data.unwrap_or_default();
        if let Some(token) = data
            .get("token")
            .and_then(|t| String::from_utf8(t.0.clone()).ok())
            && !token.is_empty()
        {
            let ca = data.get("ca.crt").map(|pem| BASE64.encode(&pem.0));
            return Ok((token, ca));
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(LinkError::NoToken {
                namespace: namespace.to_owned(),
                name,
                waited: TOKEN_WAIT,
            });
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The token the local Secret `name` holds, if `strait link` wrote it for
/// `server` (the kubeconfig a link writes has one user and one token).
pub(super) async fn held_token(
    local: &Client,
    namespace: &str,
    name: &str,
    server: &RemoteServer,
) -> Result<Option<String>, LinkError> {
    use secrecy::ExposeSecret;
    let secrets: Api<Secret> = Api::namespaced(local.clone(), namespace);
    let existing = secrets.get_opt(name).await.map_err(|source| {
        api_error(
            format!("read Secret {namespace}/{name}"),
            "the local cluster",
            source,
        )
    })?;
    let Some(kubeconfig) = existing.as_ref().and_then(linked_kubeconfig) else {
        return Ok(None);
    };
    let links_server = kubeconfig
        .clusters
        .first()
        .and_then(|c| c.cluster.as_ref())
        .and_then(|c| c.server.as_deref())
        == Some(server.server.as_str());
    Ok(kubeconfig
        .auth_infos
        .into_iter()
        .next()
        .and_then(|user| user.auth_info)
        .and_then(|auth| auth.token)
        .filter(|_| links_server)
        .map(|token| token.expose_secret().to_owned()))
}

/// Deletes the legacy never-expiring token Secret of the reader, if a link
/// made before bound tokens left one: run once the local Secret holds the
/// bound token. Whether one was deleted.
pub async fn retire_legacy_token(
    remote: &Remote,
    options: &LinkOptions,
) -> Result<bool, LinkError> {
    let namespace = &options.remote_namespace;
    let secrets = Api::<Secret>::namespaced(remote.client.clone(), namespace);
    let name = legacy_token_name(&options.reader);
    let present = secrets.get_opt(&name).await.map_err(|source| {
        api_error(
            format!("read Secret {namespace}/{name}"),
            &remote.label,
            source,
        )
    })?;
    if present.is_none() {
        return Ok(false);
    }
    delete(secrets, &name, &remote.label).await?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::discovery::kube::bearer::jwt_for_tests;

    fn token(uid: &str, expires: SystemTime) -> String {
        let exp = expires
            .duration_since(SystemTime::UNIX_EPOCH)
            .expect("after the epoch")
            .as_secs();
        jwt_for_tests(&json!({"exp": exp,
            "kubernetes.io": {"secret": {"name": "r-anchor", "uid": uid}}}))
    }

    #[test]
    fn a_held_token_is_kept_only_while_bound_to_the_anchor_with_half_its_life_left() {
        let now = SystemTime::now();
        let day = Duration::from_secs(86_400);
        let lifetime = 365 * day;
        let kept = token("u1", now + 200 * day);
        assert!(keepable(&kept, "u1", lifetime, now).is_some());
        assert!(
            keepable(&token("u1", now + 100 * day), "u1", lifetime, now).is_none(),
            "past half its life: renewed"
        );
        assert!(
            keepable(&token("u0", now + 200 * day), "u1", lifetime, now).is_none(),
            "bound to an anchor since deleted: renewed"
        );
        assert!(keepable("opaque-legacy-token", "u1", lifetime, now).is_none());
        let unbound = jwt_for_tests(&json!({"exp": 4_000_000_000u64}));
        assert!(keepable(&unbound, "u1", lifetime, now).is_none());
    }
}
