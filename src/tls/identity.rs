//! Gateway identities: the SPIFFE-style URI SAN
//! `spiffe://<trust domain>/cluster/<cluster>/gateway` that names the cluster
//! set (the trust domain) and the gateway's cluster, its strict parser, and
//! its extraction from an end-entity certificate.

use std::fmt;

use rustls_pki_types::CertificateDer;
use x509_parser::extensions::GeneralName;

use crate::model::{ClusterId, check_dns_subdomain};

use super::{IdentityError, TlsError};

const SCHEME: &str = "spiffe://";

/// The longest trust domain accepted: a DNS name (SPIFFE allows 255 octets).
pub const MAX_TRUST_DOMAIN_LEN: usize = 253;

/// A gateway's identity: the cluster set it belongs to and its cluster.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Identity {
    /// The cluster set id.
    pub trust_domain: String,
    pub cluster: ClusterId,
}

impl Identity {
    /// The identity of `cluster`'s gateway in the cluster set `trust_domain`,
    /// refusing a trust domain that is not a DNS subdomain.
    pub fn new(trust_domain: &str, cluster: ClusterId) -> Result<Self, TlsError> {
        check_trust_domain(trust_domain).map_err(|error| TlsError::InvalidClusterSet {
            value: trust_domain.to_owned(),
            error,
        })?;
        Ok(Identity {
            trust_domain: trust_domain.to_owned(),
            cluster,
        })
    }

    /// The URI SAN: `spiffe://<trust domain>/cluster/<cluster>/gateway`.
    pub fn uri(&self) -> String {
        format!(
            "{SCHEME}{}/cluster/{}/gateway",
            self.trust_domain, self.cluster
        )
    }

    /// Parses a URI SAN strictly: scheme `spiffe`, a trust domain that is a
    /// DNS subdomain, exactly the path `/cluster/<cluster>/gateway`, and
    /// nothing else (no port, user, query or fragment).
    pub fn parse(uri: &str) -> Result<Identity, TlsError> {
        let malformed = |reason: String| IdentityError::Malformed {
            uri: uri.to_owned(),
            reason,
        };
        let rest = uri
            .strip_prefix(SCHEME)
            .ok_or_else(|| malformed("scheme must be \"spiffe://\"".to_owned()))?;
        let (trust_domain, path) = rest
            .split_once('/')
            .ok_or_else(|| malformed("no path after the trust domain".to_owned()))?;
        check_trust_domain(trust_domain)
            .map_err(|error| malformed(format!("trust domain: {error}")))?;
        let cluster = path
            .strip_prefix("cluster/")
            .and_then(|p| p.strip_suffix("/gateway"))
            .ok_or_else(|| malformed("path must be /cluster/<cluster>/gateway".to_owned()))?;
        let cluster =
            ClusterId::new(cluster).map_err(|error| malformed(format!("cluster id: {error}")))?;
        Ok(Identity {
            trust_domain: trust_domain.to_owned(),
            cluster,
        })
    }
}

impl fmt::Display for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.uri())
    }
}

fn check_trust_domain(value: &str) -> Result<(), crate::model::IdError> {
    check_dns_subdomain(value, MAX_TRUST_DOMAIN_LEN)
}

/// The identity named by an end-entity certificate: its single `spiffe://`
/// URI SAN. Other URI SANs are ignored; none or several spiffe ones is an
/// error. The scheme is matched without regard to case (URI schemes are
/// case-insensitive), so `SPIFFE://…` beside `spiffe://…` is two identities
/// and refused; a lone `SPIFFE://…` is refused by the strict parser.
pub fn identity_of(cert: &CertificateDer<'_>) -> Result<Identity, TlsError> {
    let (_, parsed) = x509_parser::parse_x509_certificate(cert.as_ref())
        .map_err(|e| IdentityError::BadCertificate(e.to_string()))?;
    let sans = parsed
        .subject_alternative_name()
        .map_err(|e| IdentityError::BadCertificate(e.to_string()))?;
    let uris: Vec<&str> = sans
        .iter()
        .flat_map(|ext| ext.value.general_names.iter())
        .filter_map(|name| match name {
            GeneralName::URI(uri)
                if uri
                    .get(..SCHEME.len())
                    .is_some_and(|scheme| scheme.eq_ignore_ascii_case(SCHEME)) =>
            {
                Some(*uri)
            }
            _ => None,
        })
        .collect();
    match uris.as_slice() {
        [] => Err(IdentityError::Missing.into()),
        [uri] => Identity::parse(uri),
        several => Err(IdentityError::Several(several.len()).into()),
    }
}
