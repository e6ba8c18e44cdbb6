//! Whether a service's backends are told who called: the optional
//! `strait.dev/proxy-protocol` annotation of a ServiceExport. With `v2`, the
//! gateway that dials a backend of the service writes a PROXY protocol v2
//! header first (`net::proxy_header`); without it, nothing is written. Pure.

use std::collections::BTreeMap;

/// ServiceExport annotation: `v2` to have each backend connection start
/// with a PROXY protocol version 2 header.
pub const PROXY_PROTOCOL_ANNOTATION: &str = "strait.dev/proxy-protocol";

/// The one value the annotation takes.
const V2: &str = "v2";

/// Why the annotation was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{value:?} is not a PROXY protocol version this gateway writes; the one value is \"v2\"")]
pub struct ProxyProtocolError {
    pub value: String,
}

/// Reads the annotation: `Ok(true)` for `v2`, `Ok(false)` when it is not
/// there. Any other value is an error: a backend that expects a header
/// must not get bare bytes, nor one that does not expect it a header.
pub fn proxy_protocol(annotations: &BTreeMap<String, String>) -> Result<bool, ProxyProtocolError> {
    match annotations.get(PROXY_PROTOCOL_ANNOTATION) {
        None => Ok(false),
        Some(value) if value.trim() == V2 => Ok(true),
        Some(value) => Err(ProxyProtocolError {
            value: value.clone(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn annotations(value: Option<&str>) -> BTreeMap<String, String> {
        value
            .map(|v| (PROXY_PROTOCOL_ANNOTATION.to_owned(), v.to_owned()))
            .into_iter()
            .collect()
    }

    #[test]
    fn v2_asks_for_the_header_and_nothing_else_is_read_as_yes() {
        assert_eq!(proxy_protocol(&annotations(None)), Ok(false));
        assert_eq!(proxy_protocol(&annotations(Some("v2"))), Ok(true));
        assert_eq!(proxy_protocol(&annotations(Some(" v2 "))), Ok(true));
        for bad in ["v1", "true", "", "V2"] {
            assert!(proxy_protocol(&annotations(Some(bad))).is_err(), "{bad:?}");
        }
    }
}
