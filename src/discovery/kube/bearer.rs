//! What a ServiceAccount bearer token says about itself: when it expires
//! and which object it is bound to. The claims are read **unverified**
//! (only the API server that issued the token can check its signature), so
//! they decide nothing about trust: they tell an operator when a link's
//! token runs out, and let `strait link` keep a token it minted itself
//! instead of minting another on every run.

use std::time::{Duration, SystemTime};

use data_encoding::BASE64URL_NOPAD;
use serde::Deserialize;

/// The claims of a token, as far as they matter here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenClaims {
    /// `exp`; legacy Secret tokens have none.
    pub expires: Option<SystemTime>,
    /// The uid of the Secret the token is bound to (`kubernetes.io.secret.uid`).
    pub bound_secret_uid: Option<String>,
}

#[derive(Deserialize)]
struct RawClaims {
    exp: Option<u64>,
    #[serde(rename = "kubernetes.io")]
    kubernetes: Option<KubernetesClaims>,
}

#[derive(Deserialize)]
struct KubernetesClaims {
    secret: Option<BoundObject>,
}

#[derive(Deserialize)]
struct BoundObject {
    uid: Option<String>,
}

/// The claims of a JWT-shaped token; `None` for anything else (an opaque
/// token, a malformed one).
pub fn token_claims(token: &str) -> Option<TokenClaims> {
    let mut parts = token.split('.');
    let (_header, payload, _signature) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() {
        return None;
    }
    // Some issuers pad; the alphabet is the URL-safe one either way.
    let bytes = BASE64URL_NOPAD
        .decode(payload.trim_end_matches('=').as_bytes())
        .ok()?;
    let raw: RawClaims = serde_json::from_slice(&bytes).ok()?;
    Some(TokenClaims {
        expires: raw
            .exp
            .and_then(|seconds| SystemTime::UNIX_EPOCH.checked_add(Duration::from_secs(seconds))),
        bound_secret_uid: raw.kubernetes.and_then(|k| k.secret).and_then(|s| s.uid),
    })
}

/// How a token's remaining life reads to an operator, if it expires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expiry {
    /// It has expired: the remote server refuses it.
    Expired,
    /// It expires within [`EXPIRY_WARNING`].
    Soon(Duration),
    /// It expires later.
    Later(Duration),
}

/// How long before a token expires the gateway starts to warn.
pub const EXPIRY_WARNING: Duration = Duration::from_secs(30 * 24 * 3600);

impl TokenClaims {
    /// The token's remaining life at `now`; `None` if it never expires.
    pub fn expiry(&self, now: SystemTime) -> Option<Expiry> {
        let expires = self.expires?;
        Some(match expires.duration_since(now) {
            Err(_) => Expiry::Expired,
            Ok(left) if left <= EXPIRY_WARNING => Expiry::Soon(left),
            Ok(left) => Expiry::Later(left),
        })
    }
}

#[cfg(test)]
pub(crate) fn jwt_for_tests(claims: &serde_json::Value) -> String {
    let encode = |value: &serde_json::Value| BASE64URL_NOPAD.encode(value.to_string().as_bytes());
    format!(
        "{}.{}.c2ln",
        encode(&serde_json::json!({"alg": "RS256"})),
        encode(claims)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_bound_tokens_expiry_and_anchor_are_read() {
        let token = jwt_for_tests(&json!({
            "exp": 1_900_000_000u64,
            "kubernetes.io": {"namespace": "strait-system",
                "secret": {"name": "strait-remote-reader-c1-anchor", "uid": "u-1"},
                "serviceaccount": {"name": "strait-remote-reader-c1", "uid": "u-2"}}
        }));
        let claims = token_claims(&token).expect("claims");
        assert_eq!(claims.bound_secret_uid.as_deref(), Some("u-1"));
        let expires = SystemTime::UNIX_EPOCH + Duration::from_secs(1_900_000_000);
        assert_eq!(claims.expires, Some(expires));
        let day = Duration::from_secs(86_400);
        assert_eq!(claims.expiry(expires + day), Some(Expiry::Expired));
        assert_eq!(claims.expiry(expires - day), Some(Expiry::Soon(day)));
        assert_eq!(
            claims.expiry(expires - 60 * day),
            Some(Expiry::Later(60 * day))
        );
    }

    #[test]
    fn opaque_and_malformed_tokens_have_no_claims() {
        for token in ["t0ken", "a.b", "a.%%%.c", "a.b.c.d", ""] {
            assert_eq!(token_claims(token), None, "{token}");
        }
        // A legacy token: a JWT without `exp` or a bound object.
        let legacy = jwt_for_tests(&json!({"sub": "system:serviceaccount:x:y"}));
        let claims = token_claims(&legacy).expect("claims");
        assert_eq!(claims.expiry(SystemTime::now()), None);
        assert_eq!(claims.bound_secret_uid, None);
    }
}
