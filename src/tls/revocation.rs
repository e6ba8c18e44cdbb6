//! Revocation: an optional `tls.crl` beside the key material (PEM, one or
//! more `X509 CRL` blocks signed by the cluster set CA), read and reloaded
//! with the other files. A peer whose leaf it lists is refused by both
//! verifiers. Only leaves are checked (the CA issues them directly, with no
//! intermediate), and a leaf whose issuer has no CRL here is not refused
//! for it: without the file, nothing is revoked.

use std::path::Path;
use std::sync::Arc;

use rustls::{CertificateError, OtherError, RootCertStore};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, CertificateRevocationListDer, UnixTime};
use webpki::{
    CertRevocationList, OwnedCertRevocationList, RevocationCheckDepth, RevocationOptionsBuilder,
    UnknownStatusPolicy,
};

use super::{FileProblem, TlsError};

/// The optional revocation list of the secret layout.
pub const CRL_FILE: &str = "tls.crl";

/// The CRLs in force: none when `tls.crl` is absent.
#[derive(Debug, Default)]
pub(super) struct Revocations {
    ders: Vec<CertificateRevocationListDer<'static>>,
    lists: Vec<CertRevocationList<'static>>,
}

impl Revocations {
    /// Reads the PEM of `tls.crl` (`None`: the file is absent).
    pub(super) fn parse(path: &Path, pem: Option<&[u8]>) -> Result<Self, TlsError> {
        let Some(pem) = pem else {
            return Ok(Self::default());
        };
        let ders = CertificateRevocationListDer::pem_slice_iter(pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| TlsError::file(path, FileProblem::Pem(e)))?;
        if ders.is_empty() {
            return Err(TlsError::file(path, FileProblem::NoCrl));
        }
        let lists = ders
            .iter()
            .map(|der| OwnedCertRevocationList::from_der(der).map(CertRevocationList::from))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| TlsError::file(path, FileProblem::BadCrl(e.to_string())))?;
        Ok(Self { ders, lists })
    }

    /// The lists as the client-certificate verifier takes them.
    pub(super) fn ders(&self) -> Vec<CertificateRevocationListDer<'static>> {
        self.ders.clone()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.lists.is_empty()
    }

    /// Checks a server's leaf against `roots` (no intermediates, serverAuth)
    /// and the lists: what the client side verifies.
    pub(super) fn verify_server_leaf(
        &self,
        end_entity: &CertificateDer<'_>,
        roots: &RootCertStore,
        algorithms: &[&'static dyn rustls_pki_types::SignatureVerificationAlgorithm],
        now: UnixTime,
    ) -> Result<(), rustls::Error> {
        let cert = webpki::EndEntityCert::try_from(end_entity).map_err(certificate_error)?;
        let lists: Vec<&CertRevocationList<'_>> = self.lists.iter().collect();
        let revocation = if lists.is_empty() {
            None
        } else {
            let builder = RevocationOptionsBuilder::new(&lists)
                .map_err(|_| rustls::Error::General("no revocation list".to_owned()))?;
            Some(
                builder
                    .with_depth(RevocationCheckDepth::EndEntity)
                    .with_status_policy(UnknownStatusPolicy::Allow)
                    .build(),
            )
        };
        cert.verify_for_usage(
            algorithms,
            &roots.roots,
            &[],
            now,
            webpki::KeyUsage::server_auth(),
            revocation,
            None,
        )
        .map(|_| ())
        .map_err(certificate_error)
    }
}

/// A webpki verdict as rustls reports it.
fn certificate_error(error: webpki::Error) -> rustls::Error {
    use webpki::Error as E;
    let kind = match error {
        E::CertRevoked => CertificateError::Revoked,
        E::UnknownIssuer => CertificateError::UnknownIssuer,
        E::CertExpired { .. } => CertificateError::Expired,
        E::CertNotValidYet { .. } => CertificateError::NotValidYet,
        E::InvalidSignatureForPublicKey => CertificateError::BadSignature,
        other => CertificateError::Other(OtherError(Arc::new(other))),
    };
    rustls::Error::InvalidCertificate(kind)
}
