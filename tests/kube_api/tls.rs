//! The TLS identity of a test API server that stands in for a remote
//! cluster: a remote-cluster Secret's kubeconfig must name an `https`
//! server and carry its CA, as a real one does.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use data_encoding::BASE64;
use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair, SanType};
use rustls_pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// A CA of its own and a certificate for 127.0.0.1 that it signed.
pub(super) struct ServerTls {
    pub(super) acceptor: tokio_rustls::TlsAcceptor,
    /// The CA certificate, PEM, and in base64: `certificate-authority-data`.
    pub(super) ca_pem: String,
    pub(super) ca_data: String,
}

impl ServerTls {
    pub(super) fn generate() -> ServerTls {
        let ca_key = KeyPair::generate().expect("CA key");
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca = ca_params.self_signed(&ca_key).expect("CA certificate");
        let key = KeyPair::generate().expect("server key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("server params");
        params.subject_alt_names = vec![SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST))];
        let issuer = Issuer::from_params(&ca_params, &ca_key);
        let cert = params.signed_by(&key, &issuer).expect("server certificate");
        let chain = vec![CertificateDer::from(cert.der().to_vec())];
        let private = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("protocol versions")
            .with_no_client_auth()
            .with_single_cert(chain, private)
            .expect("server TLS config");
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        ServerTls {
            acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(config)),
            ca_data: BASE64.encode(ca.pem().as_bytes()),
            ca_pem: ca.pem(),
        }
    }
}
