//! Identifiers of the cluster set: cluster and network ids, service keys and
//! protocols, with the validation rules of KEP-2149 and Kubernetes.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use serde::Serialize;

/// The longest cluster id accepted: KEP-2149 asks for fewer than 128 characters.
pub const MAX_CLUSTER_ID_LEN: usize = 127;

/// The name reported for the network of clusters that declare none.
pub const DEFAULT_NETWORK: &str = "default";

/// Why an identifier was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdError {
    #[error("must not be empty")]
    Empty,
    #[error("is {len} characters long; at most {max} are allowed")]
    TooLong { len: usize, max: usize },
    #[error(
        "{value:?} is not an RFC-1123 DNS subdomain (lowercase letters, digits, '-' and '.', each label starting and ending with a letter or digit)"
    )]
    NotSubdomain { value: String },
    #[error("unknown protocol {value:?}; expected TCP, UDP or SCTP")]
    UnknownProtocol { value: String },
}

/// Checks that `value` is an RFC-1123 DNS subdomain of at most `max_len` characters.
pub fn check_dns_subdomain(value: &str, max_len: usize) -> Result<(), IdError> {
    if value.is_empty() {
        return Err(IdError::Empty);
    }
    if value.len() > max_len {
        return Err(IdError::TooLong {
            len: value.len(),
            max: max_len,
        });
    }
    if value.split('.').all(is_dns_label) {
        Ok(())
    } else {
        Err(IdError::NotSubdomain {
            value: value.to_owned(),
        })
    }
}

/// Whether `label` is one RFC-1123 DNS label: 1-63 lowercase letters,
/// digits and '-', starting and ending with a letter or digit.
pub fn is_dns_label(label: &str) -> bool {
    let bytes = label.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 63
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
        && bytes.first().is_some_and(u8::is_ascii_alphanumeric)
        && bytes.last().is_some_and(u8::is_ascii_alphanumeric)
}

/// A cluster's id: the value of its `cluster.clusterset.k8s.io` ClusterProperty.
/// Shared, not copied: every backend of a route table names its cluster,
/// through a one-word pointer (a cluster set has a few ids and millions of
/// backends).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct ClusterId(Arc<Box<str>>);

impl ClusterId {
    pub fn new(value: &str) -> Result<Self, IdError> {
        check_dns_subdomain(value, MAX_CLUSTER_ID_LEN)?;
        Ok(Self(Arc::new(value.into())))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ClusterId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(&self.0)
    }
}

/// A network's id: the value of the network ClusterProperty, or [`DEFAULT_NETWORK`].
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct NetworkId(Arc<str>);

impl NetworkId {
    /// Network ids follow the cluster id rules, so they can appear in names and labels.
    pub fn new(value: &str) -> Result<Self, IdError> {
        check_dns_subdomain(value, MAX_CLUSTER_ID_LEN)?;
        Ok(Self(Arc::from(value)))
    }

    pub fn default_network() -> Self {
        Self(Arc::from(DEFAULT_NETWORK))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Default for NetworkId {
    fn default() -> Self {
        Self::default_network()
    }
}

impl fmt::Display for NetworkId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(&self.0)
    }
}

/// A namespaced service name: the identity shared by a service's constituents.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ServiceKey {
    pub namespace: String,
    pub name: String,
}

impl ServiceKey {
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
        }
    }
}

impl fmt::Display for ServiceKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

impl Serialize for ServiceKey {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// A transport protocol of a Service or EndpointSlice port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Default)]
pub enum Protocol {
    #[default]
    #[serde(rename = "TCP")]
    Tcp,
    #[serde(rename = "UDP")]
    Udp,
    #[serde(rename = "SCTP")]
    Sctp,
}

impl Protocol {
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Tcp => "TCP",
            Protocol::Udp => "UDP",
            Protocol::Sctp => "SCTP",
        }
    }

    /// Parses a protocol ignoring case, as typed on a command line.
    pub fn parse_loose(value: &str) -> Result<Self, IdError> {
        value.to_ascii_uppercase().parse()
    }
}

impl FromStr for Protocol {
    type Err = IdError;

    /// Parses a protocol as Kubernetes spells it (upper case).
    fn from_str(value: &str) -> Result<Self, IdError> {
        match value {
            "TCP" => Ok(Protocol::Tcp),
            "UDP" => Ok(Protocol::Udp),
            "SCTP" => Ok(Protocol::Sctp),
            _ => Err(IdError::UnknownProtocol {
                value: value.to_owned(),
            }),
        }
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_ids_follow_rfc1123_subdomains() {
        for good in ["c1", "east-1.prod", "a", "0abc"] {
            assert!(ClusterId::new(good).is_ok(), "{good} should be accepted");
        }
        for bad in ["", "C1", "-c1", "c1-", "c_1", "a..b", ".a", "a.", "a b"] {
            assert!(ClusterId::new(bad).is_err(), "{bad:?} should be refused");
        }
    }

    #[test]
    fn cluster_ids_must_be_under_128_characters() {
        let just_fits = format!("{}.{}", "a".repeat(63), "b".repeat(63));
        assert_eq!(just_fits.len(), 127);
        assert!(ClusterId::new(&just_fits).is_ok());
        let too_long = format!("{just_fits}c");
        assert_eq!(
            ClusterId::new(&too_long),
            Err(IdError::TooLong { len: 128, max: 127 })
        );
    }

    #[test]
    fn labels_longer_than_63_characters_are_refused() {
        assert!(ClusterId::new(&"a".repeat(64)).is_err());
    }

    #[test]
    fn protocols_parse_strictly_or_loosely() {
        assert_eq!("TCP".parse::<Protocol>(), Ok(Protocol::Tcp));
        assert!("tcp".parse::<Protocol>().is_err());
        assert_eq!(Protocol::parse_loose("udp"), Ok(Protocol::Udp));
        assert!(Protocol::parse_loose("icmp").is_err());
    }
}
