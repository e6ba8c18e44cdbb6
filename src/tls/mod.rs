//! Transport security of the tunnel between gateways: gateway identities
//! (SPIFFE-style URI SANs), certificate generation for a cluster set, the
//! key material and rustls configurations (TLS 1.3, ALPN `h2`, mutual
//! authentication against the cluster set's CA) and their live reload.
//!
//! This module owns the error type shared by its parts, [`TlsError`].

mod config;
mod generate;
mod identity;
#[cfg(test)]
mod identity_tests;
pub mod lifetime;
mod reload;
mod revocation;
mod trust;

pub use revocation::CRL_FILE;

use std::path::PathBuf;

use crate::model::{ClusterId, IdError};

pub use config::{ALPN_H2, TlsMaterial, certificate_not_after, peer_identity};
pub use generate::{
    CA_FILE, CERT_FILE, CertificateAuthority, DEFAULT_LEAF_VALIDITY, KEY_FILE, LeafPem,
    cluster_set_files, generate_ca, generate_cluster_ca, generate_leaf, generate_leaf_valid_for,
    revocation_list, write_cluster_set, write_cluster_set_valid_for,
};
pub use identity::{Identity, MAX_TRUST_DOMAIN_LEN, identity_of};
pub use reload::ReloadingTls;
pub use trust::{AuthorityError, PeerAuthority, peer_authority};

/// Why key material, an identity or a TLS configuration was refused.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A problem with one file (or, for in-memory PEM, the file it stands for).
    #[error("{}: {problem}", file.display())]
    File { file: PathBuf, problem: FileProblem },
    #[error(transparent)]
    Identity(#[from] IdentityError),
    #[error("peer {peer} is not in trust domain {expected:?}")]
    ForeignTrustDomain {
        peer: Box<Identity>,
        expected: String,
    },
    #[error("the peer presented no certificate")]
    NoPeerCertificate,
    #[error(
        "no CA of ca.crt may issue {0}: its cluster has no CA here, and no CA issues for every cluster"
    )]
    NoIssuer(Box<Identity>),
    #[error("cluster {0} is listed more than once")]
    DuplicateCluster(ClusterId),
    #[error("invalid cluster set id {value:?}: {error}")]
    InvalidClusterSet { value: String, error: IdError },
    #[error("generating certificates: {0}")]
    Generate(#[from] rcgen::Error),
    #[error("building the tls configuration: {0}")]
    Config(#[from] rustls::Error),
    #[error("the peer's certificate is no longer trusted: {0}")]
    NoLongerTrusted(rustls::Error),
}

/// What is wrong with one file of the key material.
#[derive(Debug, thiserror::Error)]
pub enum FileProblem {
    #[error("missing")]
    Missing,
    #[error("cannot read: {0}")]
    Unreadable(std::io::Error),
    #[error("cannot write: {0}")]
    Unwritable(std::io::Error),
    #[error("already exists; remove it or choose another directory")]
    Exists,
    #[error("malformed pem: {0}")]
    Pem(rustls_pki_types::pem::Error),
    #[error("no certificate in it")]
    NoCertificate,
    #[error("unusable certificate: {0}")]
    BadCertificate(rustls::Error),
    #[error("no private key in it")]
    NoPrivateKey,
    #[error("unusable private key: {0}")]
    BadPrivateKey(rustls::Error),
    #[error("private key does not match the certificate in {}", cert.display())]
    KeyMismatch { cert: PathBuf },
    #[error("certificate is not trusted by {}: {error}", ca.display())]
    Untrusted { ca: PathBuf, error: rustls::Error },
    #[error("no revocation list (X509 CRL) in it")]
    NoCrl,
    #[error("unusable revocation list: {0}")]
    BadCrl(String),
    #[error("{0}")]
    Identity(IdentityError),
    #[error("a CA here names {identity}, which is not of this gateway's trust domain {expected:?}")]
    ForeignAnchor {
        identity: Box<Identity>,
        expected: String,
    },
}

/// Why a gateway identity could not be read from a URI or a certificate.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdentityError {
    #[error("{uri:?} is not a gateway identity: {reason}")]
    Malformed { uri: String, reason: String },
    #[error("certificate cannot be parsed: {0}")]
    BadCertificate(String),
    #[error("certificate has no spiffe uri san")]
    Missing,
    #[error("certificate has {0} spiffe uri sans; expected exactly one")]
    Several(usize),
}

impl TlsError {
    pub(crate) fn file(file: impl Into<PathBuf>, problem: FileProblem) -> Self {
        TlsError::File {
            file: file.into(),
            problem,
        }
    }
}
