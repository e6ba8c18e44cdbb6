//! A gateway's key material (Kubernetes secret layout: `tls.crt`, `tls.key`,
//! `ca.crt`), validated at load time, and the rustls server and client
//! configurations built from it: TLS 1.3 only, ALPN `h2`, mutual
//! authentication against the cluster set's CA, peers identified by their
//! SPIFFE URI SAN rather than by DNS name.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::{ParsedCertificate, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls::{
    CertificateError, ClientConfig, CommonState, DigitallySignedStruct, DistinguishedName,
    InconsistentKeys, OtherError, RootCertStore, ServerConfig, SignatureScheme,
};
use rustls_pki_types::pem::{self, PemObject};
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};

use super::generate::{CA_FILE, CERT_FILE, KEY_FILE};
use super::identity::{Identity, identity_of};
use super::revocation::{CRL_FILE, Revocations};
use super::trust::{Anchors, ByIssuer, PeerAuthority};
use super::{FileProblem, TlsError};

/// The one application protocol of the tunnel, offered and required by both sides.
pub const ALPN_H2: &[u8] = b"h2";

/// A gateway's validated key material and the TLS configurations built from it.
pub struct TlsMaterial {
    identity: Identity,
    not_after: SystemTime,
    /// When the first CA of `ca.crt` expires (none parsed: `None`).
    ca_not_after: Option<SystemTime>,
    server: Arc<ServerConfig>,
    client: Arc<ClientConfig>,
    /// What the server checks a peer's certificate with, kept to check a
    /// live connection's peer again when the material changes.
    client_verifier: Arc<GatewayClientVerifier>,
}

impl fmt::Debug for TlsMaterial {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsMaterial")
            .field("identity", &self.identity.uri())
            .field("not_after", &self.not_after)
            .finish_non_exhaustive()
    }
}

/// The paths of the three files of the secret layout.
#[derive(Debug, Clone)]
pub(super) struct SecretPaths {
    cert: PathBuf,
    key: PathBuf,
    ca: PathBuf,
    /// Optional: the revocation list.
    crl: PathBuf,
}

impl SecretPaths {
    pub(super) fn in_dir(dir: &Path) -> Self {
        SecretPaths {
            cert: dir.join(CERT_FILE),
            key: dir.join(KEY_FILE),
            ca: dir.join(CA_FILE),
            crl: dir.join(CRL_FILE),
        }
    }

    /// Reads the three files; a failure is kept (by kind) so that snapshots compare.
    pub(super) fn read(&self) -> SecretFiles {
        let read = |path: &Path| std::fs::read(path).map_err(|e| e.kind());
        SecretFiles {
            cert: read(&self.cert),
            key: read(&self.key),
            ca: read(&self.ca),
            crl: read(&self.crl),
        }
    }
}

/// The contents of the three files at one moment, compared to detect changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct SecretFiles {
    cert: Result<Vec<u8>, io::ErrorKind>,
    key: Result<Vec<u8>, io::ErrorKind>,
    ca: Result<Vec<u8>, io::ErrorKind>,
    crl: Result<Vec<u8>, io::ErrorKind>,
}

impl TlsMaterial {
    /// Loads `dir/tls.crt` (leaf first, then an optional chain), `dir/tls.key`
    /// and `dir/ca.crt`, checks them, and builds both configurations.
    pub fn load(dir: &Path) -> Result<TlsMaterial, TlsError> {
        let paths = SecretPaths::in_dir(dir);
        Self::from_files(&paths, &paths.read(), &[])
    }

    /// Builds the material from PEM held in memory; errors name the file each
    /// argument stands for (`tls.crt`, `tls.key`, `ca.crt`).
    pub fn from_pem(
        cert_pem: impl AsRef<[u8]>,
        key_pem: impl AsRef<[u8]>,
        ca_pem: impl AsRef<[u8]>,
    ) -> Result<TlsMaterial, TlsError> {
        let paths = SecretPaths::in_dir(Path::new(""));
        Self::build(
            &paths,
            cert_pem.as_ref(),
            key_pem.as_ref(),
            ca_pem.as_ref(),
            None,
            &[],
        )
    }

    /// Builds the material from the files' contents and the CAs recorded
    /// for peers (each trusted for its own cluster alone).
    pub(super) fn from_files(
        paths: &SecretPaths,
        files: &SecretFiles,
        peers: &[PeerAuthority],
    ) -> Result<TlsMaterial, TlsError> {
        let contents = |path: &Path, read: &Result<Vec<u8>, io::ErrorKind>| match read {
            Ok(bytes) => Ok(bytes.clone()),
            Err(io::ErrorKind::NotFound) => Err(TlsError::file(path, FileProblem::Missing)),
            Err(kind) => Err(TlsError::file(
                path,
                FileProblem::Unreadable(io::Error::from(*kind)),
            )),
        };
        let cert = contents(&paths.cert, &files.cert)?;
        let key = contents(&paths.key, &files.key)?;
        let ca = contents(&paths.ca, &files.ca)?;
        let crl = match &files.crl {
            Ok(bytes) => Some(bytes.as_slice()),
            Err(io::ErrorKind::NotFound) => None,
            Err(kind) => {
                let error = FileProblem::Unreadable(io::Error::from(*kind));
                return Err(TlsError::file(&paths.crl, error));
            }
        };
        Self::build(paths, &cert, &key, &ca, crl, peers)
    }

    fn build(
        paths: &SecretPaths,
        cert_pem: &[u8],
        key_pem: &[u8],
        ca_pem: &[u8],
        crl_pem: Option<&[u8]>,
        peers: &[PeerAuthority],
    ) -> Result<TlsMaterial, TlsError> {
        let revocations = Arc::new(Revocations::parse(&paths.crl, crl_pem)?);
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let chain = certificates(&paths.cert, cert_pem)?;
        let leaf = &chain[0];
        let identity = identity_of(leaf).map_err(|e| in_file(&paths.cert, e))?;
        let not_after = not_after(leaf).map_err(|e| in_file(&paths.cert, e))?;
        let key = private_key(&paths.key, key_pem)?;
        check_key_matches(paths, &provider, &chain, &key)?;

        let authorities = certificates(&paths.ca, ca_pem)?;
        // An unreadable validity is the anchors' to refuse, not this.
        let ca_not_after = authorities
            .iter()
            .filter_map(|ca| certificate_not_after(ca).ok())
            .min();
        let mut anchors = Anchors::sort(&paths.ca, authorities, &identity.trust_domain)?;
        for refused in anchors.add_peers(peers, &identity.trust_domain) {
            tracing::warn!(
                peer = %refused.cluster,
                trust_domain = %identity.trust_domain,
                "a peer's recorded CA names another trust domain than this gateway's; not trusted"
            );
        }
        let bad_ca = |e| TlsError::file(&paths.ca, FileProblem::BadCertificate(e));
        let all_roots = Arc::new(anchors.all().map_err(bad_ca)?);
        let untrusted = |error| {
            TlsError::file(
                &paths.cert,
                FileProblem::Untrusted {
                    ca: paths.ca.clone(),
                    error,
                },
            )
        };

        let algorithms = provider.signature_verification_algorithms;
        let parsed = ParsedCertificate::try_from(leaf)
            .map_err(|e| TlsError::file(&paths.cert, FileProblem::BadCertificate(e)))?;
        let now = UnixTime::now();
        // Issued by ca.crt itself (peers accept no intermediate either), by
        // a CA that may issue this cluster's identity: a peer would refuse
        // it otherwise.
        let own_roots = anchors
            .for_cluster(&identity.cluster)
            .map_err(bad_ca)?
            .ok_or_else(|| TlsError::NoIssuer(Box::new(identity.clone())))?;
        rustls::client::verify_server_cert_signed_by_trust_anchor(
            &parsed,
            &own_roots,
            &[],
            now,
            algorithms.all,
        )
        .map_err(untrusted)?;
        let webpki_client_verifier = |roots: Arc<RootCertStore>| {
            let mut verifier = WebPkiClientVerifier::builder_with_provider(roots, provider.clone());
            if !revocations.is_empty() {
                // Leaves only: there is no intermediate. A leaf whose issuer
                // has no list here is not refused for it.
                verifier = verifier
                    .with_crls(revocations.ders())
                    .only_check_end_entity_revocation()
                    .allow_unknown_revocation_status();
            }
            verifier
                .build()
                .map_err(|_| TlsError::file(&paths.ca, FileProblem::NoCertificate))
        };
        let client_verifier = Arc::new(GatewayClientVerifier {
            hints: webpki_client_verifier(all_roots)?,
            by_issuer: ByIssuer::build(&anchors, webpki_client_verifier)?,
            trust_domain: identity.trust_domain.clone(),
        });
        client_verifier
            .verify_client_cert(leaf, &[], now)
            .map_err(untrusted)?;

        let mut server = ServerConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(&[&rustls::version::TLS13])?
            .with_client_cert_verifier(client_verifier.clone())
            .with_single_cert(chain.clone(), key.clone_key())?;
        server.alpn_protocols = vec![ALPN_H2.to_vec()];

        let server_verifier = Arc::new(GatewayServerVerifier {
            roots: ByIssuer::build(&anchors, Ok)?,
            revocations,
            algorithms,
            trust_domain: identity.trust_domain.clone(),
        });
        let mut client = ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13])?
            .dangerous()
            .with_custom_certificate_verifier(server_verifier)
            .with_client_auth_cert(chain, key)?;
        client.alpn_protocols = vec![ALPN_H2.to_vec()];

        Ok(TlsMaterial {
            identity,
            not_after,
            ca_not_after,
            server: Arc::new(server),
            client: Arc::new(client),
            client_verifier,
        })
    }

    /// Our own identity, from the leaf of `tls.crt`.
    pub fn identity(&self) -> &Identity {
        &self.identity
    }

    /// When our leaf certificate expires.
    pub fn not_after(&self) -> SystemTime {
        self.not_after
    }

    /// When the first CA of `ca.crt` expires.
    pub fn ca_not_after(&self) -> Option<SystemTime> {
        self.ca_not_after
    }

    /// For accepting tunnel connections: TLS 1.3, ALPN `h2`, a client
    /// certificate required, chaining to `ca.crt` and naming a gateway of our
    /// trust domain.
    pub fn server_config(&self) -> Arc<ServerConfig> {
        self.server.clone()
    }

    /// For dialling peer gateways: TLS 1.3, ALPN `h2`, presents our
    /// certificate; the server's chain is checked against `ca.crt` and its
    /// identity must be a gateway of our trust domain. The server name given
    /// to the connector is NOT checked (dial by IP or any hostname): check
    /// [`peer_identity`] after the handshake to learn which cluster answered.
    pub fn client_config(&self) -> Arc<ClientConfig> {
        self.client.clone()
    }

    /// Refuses a peer outside our trust domain (cluster set).
    pub fn check_trust_domain(&self, peer: &Identity) -> Result<(), TlsError> {
        check_trust_domain(&self.identity.trust_domain, peer)
    }

    /// Checks a connected peer's certificate again, as a handshake would
    /// now: against this material's CAs and revocation list, at this
    /// moment. A live connection whose peer fails it is ended.
    pub fn still_trusts(&self, leaf: &CertificateDer<'_>) -> Result<(), TlsError> {
        self.client_verifier
            .verify_client_cert(leaf, &[], UnixTime::now())
            .map(|_| ())
            .map_err(TlsError::NoLongerTrusted)
    }
}

/// When a certificate expires.
pub fn certificate_not_after(cert: &CertificateDer<'_>) -> Result<SystemTime, TlsError> {
    not_after(cert)
}

/// The identity of the peer of an established connection (either side),
/// from the end-entity certificate it presented.
pub fn peer_identity(conn: &CommonState) -> Result<Identity, TlsError> {
    let leaf = conn
        .peer_certificates()
        .and_then(<[_]>::first)
        .ok_or(TlsError::NoPeerCertificate)?;
    identity_of(leaf)
}

fn check_trust_domain(trust_domain: &str, peer: &Identity) -> Result<(), TlsError> {
    if peer.trust_domain == trust_domain {
        Ok(())
    } else {
        Err(TlsError::ForeignTrustDomain {
            peer: Box::new(peer.clone()),
            expected: trust_domain.to_owned(),
        })
    }
}

fn in_file(path: &Path, error: TlsError) -> TlsError {
    match error {
        TlsError::Identity(e) => TlsError::file(path, FileProblem::Identity(e)),
        other => other,
    }
}

/// Every certificate in a PEM file; at least one.
fn certificates(path: &Path, pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::file(path, FileProblem::Pem(e)))?;
    if certs.is_empty() {
        return Err(TlsError::file(path, FileProblem::NoCertificate));
    }
    Ok(certs)
}

fn private_key(path: &Path, pem: &[u8]) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_slice(pem).map_err(|e| match e {
        pem::Error::NoItemsFound => TlsError::file(path, FileProblem::NoPrivateKey),
        other => TlsError::file(path, FileProblem::Pem(other)),
    })
}

fn check_key_matches(
    paths: &SecretPaths,
    provider: &CryptoProvider,
    chain: &[CertificateDer<'static>],
    key: &PrivateKeyDer<'static>,
) -> Result<(), TlsError> {
    let signing_key = provider
        .key_provider
        .load_private_key(key.clone_key())
        .map_err(|e| TlsError::file(&paths.key, FileProblem::BadPrivateKey(e)))?;
    match CertifiedKey::new(chain.to_vec(), signing_key).keys_match() {
        Ok(()) | Err(rustls::Error::InconsistentKeys(InconsistentKeys::Unknown)) => Ok(()),
        Err(rustls::Error::InconsistentKeys(_)) => Err(TlsError::file(
            &paths.key,
            FileProblem::KeyMismatch {
                cert: paths.cert.clone(),
            },
        )),
        Err(e) => Err(TlsError::file(&paths.cert, FileProblem::BadCertificate(e))),
    }
}

fn not_after(cert: &CertificateDer<'_>) -> Result<SystemTime, TlsError> {
    let (_, parsed) = x509_parser::parse_x509_certificate(cert.as_ref())
        .map_err(|e| super::IdentityError::BadCertificate(e.to_string()))?;
    let secs = parsed.validity().not_after.timestamp();
    Ok(match u64::try_from(secs) {
        Ok(secs) => UNIX_EPOCH + Duration::from_secs(secs),
        Err(_) => UNIX_EPOCH,
    })
}

/// Turns a refusal of ours into the error rustls reports (a bad_certificate alert).
fn refuse(error: TlsError) -> rustls::Error {
    rustls::Error::InvalidCertificate(CertificateError::Other(OtherError(Arc::new(error))))
}

/// The identity a peer's leaf names, when it is a gateway of `trust_domain`.
fn peer_leaf(trust_domain: &str, leaf: &CertificateDer<'_>) -> Result<Identity, rustls::Error> {
    identity_of(leaf)
        .and_then(|peer| check_trust_domain(trust_domain, &peer).map(|()| peer))
        .map_err(refuse)
}

/// Server side: the client's identity must be a gateway of our trust
/// domain, and its leaf issued (webpki) by a CA of `ca.crt` that may issue
/// that identity.
#[derive(Debug)]
struct GatewayClientVerifier {
    /// One per set of anchors an identity may be issued by.
    by_issuer: ByIssuer<Arc<dyn ClientCertVerifier>>,
    /// Over every anchor: the issuers the server names, and the handshake
    /// signature checks.
    hints: Arc<dyn ClientCertVerifier>,
    trust_domain: String,
}

impl ClientCertVerifier for GatewayClientVerifier {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        true
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.hints.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        let peer = peer_leaf(&self.trust_domain, end_entity)?;
        let verifier = self
            .by_issuer
            .for_cluster(&peer.cluster)
            .ok_or_else(|| refuse(TlsError::NoIssuer(Box::new(peer.clone()))))?;
        // No intermediates: a leaf must be issued by a certificate of
        // ca.crt itself (the CA's path length 0, which webpki does not
        // read from a trust anchor).
        verifier.verify_client_cert(end_entity, &[], now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.hints.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.hints.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.hints.supported_verify_schemes()
    }
}

/// Client side: the server's chain must reach `ca.crt` (webpki, serverAuth)
/// and its identity must be a gateway of our trust domain. The DNS name we
/// dialled is deliberately not checked: peers are reached by IP address or
/// load-balancer hostname, and are named by their SPIFFE identity.
#[derive(Debug)]
struct GatewayServerVerifier {
    /// The anchors each peer identity may be issued by.
    roots: ByIssuer<Arc<RootCertStore>>,
    revocations: Arc<Revocations>,
    algorithms: WebPkiSupportedAlgorithms,
    trust_domain: String,
}

impl ServerCertVerifier for GatewayServerVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let peer = peer_leaf(&self.trust_domain, end_entity)?;
        let roots = self
            .roots
            .for_cluster(&peer.cluster)
            .ok_or_else(|| refuse(TlsError::NoIssuer(Box::new(peer.clone()))))?;
        // No intermediates: issued by ca.crt itself, by a CA that may
        // issue the peer's identity, as the client verifier; and not
        // listed in tls.crl.
        self.revocations
            .verify_server_leaf(end_entity, roots, self.algorithms.all, now)?;
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests;
