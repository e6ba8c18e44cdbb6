//! Identity tests: names parse and print, and certificates made by
//! [`crate::tls::generate`] carry the identity they were made for.

use rustls_pki_types::CertificateDer;

use super::identity::*;
use super::{IdentityError, TlsError};
use crate::model::ClusterId;
use crate::tls::generate::{generate_ca, generate_leaf};

fn id(trust_domain: &str, cluster: &str) -> Identity {
    Identity {
        trust_domain: trust_domain.to_owned(),
        cluster: ClusterId::new(cluster).expect("valid cluster id"),
    }
}

#[test]
fn uri_round_trips() {
    let identity = id("prod.example", "east-1");
    let uri = identity.uri();
    assert_eq!(uri, "spiffe://prod.example/cluster/east-1/gateway");
    assert_eq!(identity.to_string(), uri);
    assert_eq!(Identity::parse(&uri).expect("parses"), identity);
}

#[test]
fn malformed_uris_are_refused() {
    let bad = [
        "",
        "https://set/cluster/c1/gateway",
        "SPIFFE://set/cluster/c1/gateway",
        "spiffe:set/cluster/c1/gateway",
        "spiffe:///cluster/c1/gateway",
        "spiffe://set",
        "spiffe://Set/cluster/c1/gateway",
        "spiffe://set:443/cluster/c1/gateway",
        "spiffe://user@set/cluster/c1/gateway",
        "spiffe://set/cluster/c1",
        "spiffe://set/cluster//gateway",
        "spiffe://set/cluster/C1/gateway",
        "spiffe://set/cluster/c1/gateway/",
        "spiffe://set/cluster/c1/extra/gateway",
        "spiffe://set/clusters/c1/gateway",
        "spiffe://set//cluster/c1/gateway",
        "spiffe://set/cluster/c1/gateway?x=1",
        "spiffe://set/cluster/c1/gateway#frag",
        "spiffe://set/cluster/c_1/gateway",
        "spiffe://set/cluster/c1/workload",
    ];
    for uri in bad {
        let err = Identity::parse(uri).expect_err(uri);
        assert!(
            matches!(err, TlsError::Identity(IdentityError::Malformed { .. })),
            "{uri:?}: {err}"
        );
    }
}

#[test]
fn new_refuses_a_trust_domain_that_is_not_a_dns_name() {
    let c1 = ClusterId::new("c1").expect("valid");
    assert!(Identity::new("set.example", c1.clone()).is_ok());
    assert!(Identity::new("Not A Domain", c1).is_err());
}

#[test]
fn identity_is_read_from_a_generated_certificate() {
    let ca = generate_ca("set").expect("ca");
    let c1 = ClusterId::new("c1").expect("valid");
    let leaf = generate_leaf(&ca, &c1).expect("leaf");
    let der = leaf.cert_der();
    assert_eq!(identity_of(&der).expect("identity"), id("set", "c1"));
}

#[test]
fn certificates_without_a_spiffe_identity_are_refused() {
    let ca = generate_ca("set").expect("ca");
    let der = ca.cert_der().clone();
    assert!(matches!(
        identity_of(&der),
        Err(TlsError::Identity(IdentityError::Missing))
    ));
    let garbage = CertificateDer::from(vec![0x30, 0x03, 0x01, 0x01, 0xff]);
    assert!(matches!(
        identity_of(&garbage),
        Err(TlsError::Identity(IdentityError::BadCertificate(_)))
    ));
}
