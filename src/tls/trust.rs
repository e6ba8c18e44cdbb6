//! Which CA of `ca.crt` may issue whose identity. A CA whose certificate
//! names a cluster (the SPIFFE URI SAN of that cluster's gateway, as
//! `strait certs` makes per-cluster CAs) issues only that cluster's gateway
//! identity: a cluster's own issuer (its cert-manager, say) can then mint
//! no other cluster's, and a leaf for cluster A signed by cluster B's CA is
//! refused at the handshake. A CA that names no cluster may issue for
//! every cluster of the set: one CA for the whole set, to be kept offline.
//!
//! Each peer leaf is verified against exactly the anchors that may issue
//! its identity (webpki, with its signature checks), never against all of
//! `ca.crt` with the issuer looked up afterwards: two CAs may share a
//! subject name, and only the signature tells which one issued a leaf.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use rustls::RootCertStore;
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;

use crate::model::ClusterId;

use super::IdentityError;
use super::identity::identity_of;
use super::{FileProblem, TlsError};

/// The trust anchors of `ca.crt`, by the cluster each may issue for.
#[derive(Debug, Clone)]
pub(super) struct Anchors {
    /// CAs that name no cluster: they issue for every cluster.
    shared: Vec<CertificateDer<'static>>,
    /// CAs that name a cluster: they issue for it alone.
    by_cluster: BTreeMap<ClusterId, Vec<CertificateDer<'static>>>,
}

impl Anchors {
    /// Sorts the certificates of `ca.crt` (at `path`) by what they may
    /// issue. A CA naming a cluster of another trust domain than ours is an
    /// error: it could never vouch for anyone here, so it is a mistake.
    pub(super) fn sort(
        path: &Path,
        certificates: Vec<CertificateDer<'static>>,
        trust_domain: &str,
    ) -> Result<Anchors, TlsError> {
        let mut anchors = Anchors {
            shared: Vec::new(),
            by_cluster: BTreeMap::new(),
        };
        for certificate in certificates {
            // Unusable as an anchor: said so before anything else.
            RootCertStore::empty()
                .add(certificate.clone())
                .map_err(|e| TlsError::file(path, FileProblem::BadCertificate(e)))?;
            match identity_of(&certificate) {
                Ok(identity) if identity.trust_domain == trust_domain => anchors
                    .by_cluster
                    .entry(identity.cluster)
                    .or_default()
                    .push(certificate),
                Ok(identity) => {
                    return Err(TlsError::file(
                        path,
                        FileProblem::ForeignAnchor {
                            identity: Box::new(identity),
                            expected: trust_domain.to_owned(),
                        },
                    ));
                }
                Err(TlsError::Identity(IdentityError::Missing)) => anchors.shared.push(certificate),
                Err(TlsError::Identity(error)) => {
                    return Err(TlsError::file(path, FileProblem::Identity(error)));
                }
                Err(error) => return Err(error),
            }
        }
        Ok(anchors)
    }

    /// Adds the CAs the admin recorded for peers (peer Secrets' `ca.crt`),
    /// each trusted to issue its own cluster's identity alone. One that
    /// does not name its cluster in our trust domain is left out and
    /// returned: it could vouch for no one here.
    pub(super) fn add_peers(
        &mut self,
        peers: &[PeerAuthority],
        trust_domain: &str,
    ) -> Vec<PeerAuthority> {
        let mut refused = Vec::new();
        for peer in peers {
            match identity_of(&peer.certificate) {
                Ok(identity)
                    if identity.cluster == peer.cluster
                        && identity.trust_domain == trust_domain =>
                {
                    let bound = self.by_cluster.entry(peer.cluster.clone()).or_default();
                    if !bound.contains(&peer.certificate) {
                        bound.push(peer.certificate.clone());
                    }
                }
                _ => refused.push(peer.clone()),
            }
        }
        refused
    }

    /// Every anchor: what the server names as acceptable issuers.
    pub(super) fn all(&self) -> Result<RootCertStore, rustls::Error> {
        roots(self.shared.iter().chain(self.by_cluster.values().flatten()))
    }

    /// The anchors that may issue `cluster`'s identity; `None` when none may.
    pub(super) fn for_cluster(
        &self,
        cluster: &ClusterId,
    ) -> Result<Option<RootCertStore>, rustls::Error> {
        let bound = self.by_cluster.get(cluster).into_iter().flatten();
        let store = roots(self.shared.iter().chain(bound))?;
        Ok((!store.is_empty()).then_some(store))
    }

    /// The clusters that have CAs of their own.
    pub(super) fn bound_clusters(&self) -> impl Iterator<Item = &ClusterId> {
        self.by_cluster.keys()
    }

    /// Whether some CA names no cluster (and so issues for all).
    pub(super) fn has_shared(&self) -> bool {
        !self.shared.is_empty()
    }
}

/// A CA the admin recorded for one peer cluster: it may issue that
/// cluster's gateway identity and no other.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerAuthority {
    pub cluster: ClusterId,
    pub certificate: CertificateDer<'static>,
}

/// Why a peer's CA certificate cannot be trusted for it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthorityError {
    #[error("not PEM certificates: {0}")]
    Pem(String),
    #[error("holds {0} certificates; a peer's record holds exactly its cluster's CA")]
    Count(usize),
    #[error("not usable as a trust anchor: {0}")]
    Unusable(String),
    #[error(
        "names no cluster: a CA that names none may issue every cluster's identity, so a peer's record may not carry one (put it in ca.crt if the set shares one CA)"
    )]
    NamesNoCluster,
    #[error("names {named}, not {expected}")]
    OtherCluster { named: String, expected: ClusterId },
    #[error("its identity cannot be read: {0}")]
    Identity(String),
}

/// Checks that `pem` is exactly one CA certificate naming `cluster`'s
/// gateway (its `spiffe://` URI SAN, as `strait certs` makes per-cluster
/// CAs): the only kind a peer's record may add to the trust.
pub fn peer_authority(pem: &[u8], cluster: &ClusterId) -> Result<PeerAuthority, AuthorityError> {
    let certificates = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| AuthorityError::Pem(e.to_string()))?;
    let [certificate] = <[_; 1]>::try_from(certificates)
        .map_err(|certificates: Vec<_>| AuthorityError::Count(certificates.len()))?;
    RootCertStore::empty()
        .add(certificate.clone())
        .map_err(|e| AuthorityError::Unusable(e.to_string()))?;
    match identity_of(&certificate) {
        Ok(identity) if identity.cluster == *cluster => Ok(PeerAuthority {
            cluster: cluster.clone(),
            certificate,
        }),
        Ok(identity) => Err(AuthorityError::OtherCluster {
            named: identity.uri(),
            expected: cluster.clone(),
        }),
        Err(TlsError::Identity(IdentityError::Missing)) => Err(AuthorityError::NamesNoCluster),
        Err(error) => Err(AuthorityError::Identity(error.to_string())),
    }
}

fn roots<'a>(
    certificates: impl Iterator<Item = &'a CertificateDer<'static>>,
) -> Result<RootCertStore, rustls::Error> {
    let mut store = RootCertStore::empty();
    for certificate in certificates {
        store.add(certificate.clone())?;
    }
    Ok(store)
}

/// The verifiers of one side, one per set of anchors a peer's identity
/// may be issued by: per cluster with CAs of its own, and one of the
/// shared CAs alone for every other cluster.
#[derive(Debug)]
pub(super) struct ByIssuer<V> {
    by_cluster: BTreeMap<ClusterId, V>,
    shared: Option<V>,
}

impl<V> ByIssuer<V> {
    /// Builds one verifier per cluster with CAs of its own, and one of the
    /// shared CAs, with `build`.
    pub(super) fn build(
        anchors: &Anchors,
        mut build: impl FnMut(Arc<RootCertStore>) -> Result<V, TlsError>,
    ) -> Result<Self, TlsError> {
        let mut by_cluster = BTreeMap::new();
        for cluster in anchors.bound_clusters() {
            if let Some(roots) = anchors.for_cluster(cluster)? {
                by_cluster.insert(cluster.clone(), build(Arc::new(roots))?);
            }
        }
        let shared = if anchors.has_shared() {
            Some(build(Arc::new(roots(anchors.shared.iter())?))?)
        } else {
            None
        };
        Ok(Self { by_cluster, shared })
    }

    /// The verifier for a leaf naming `cluster`; `None` when no CA of
    /// `ca.crt` may issue its identity.
    pub(super) fn for_cluster(&self, cluster: &ClusterId) -> Option<&V> {
        self.by_cluster.get(cluster).or(self.shared.as_ref())
    }
}
