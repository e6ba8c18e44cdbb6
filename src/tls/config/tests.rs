//! Tests of the key material and of real TLS handshakes between gateways:
//! mutual authentication, identities seen by both sides, refusals of
//! certificates from another CA or another trust domain, and load errors
//! that name the file.

use std::fs;

use rustls_pki_types::ServerName;
use tokio::io::{AsyncReadExt, AsyncWriteExt, duplex};
use tokio_rustls::{TlsAcceptor, TlsConnector};

use super::*;
use crate::model::ClusterId;
use crate::tls::generate::{
    CertificateAuthority, LeafPem, generate_ca, generate_cluster_ca, generate_leaf,
    revocation_list, sign_intermediate, sign_leaf, sign_leaf_with_uris, write_cluster_set,
};

fn cluster(id: &str) -> ClusterId {
    ClusterId::new(id).expect("valid cluster id")
}

/// The verifiers of a gateway of cluster set "set" that trusts `ca` alone.
fn verifiers_trusting(ca: &CertificateAuthority) -> (GatewayClientVerifier, GatewayServerVerifier) {
    let anchors =
        Anchors::sort(Path::new("ca.crt"), vec![ca.cert_der().clone()], "set").expect("anchors");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let build = |roots: Arc<RootCertStore>| {
        WebPkiClientVerifier::builder_with_provider(roots, provider.clone())
            .build()
            .map_err(|_| TlsError::NoPeerCertificate)
    };
    let client = GatewayClientVerifier {
        hints: build(Arc::new(anchors.all().expect("roots"))).expect("verifier"),
        by_issuer: ByIssuer::build(&anchors, build).expect("verifiers"),
        trust_domain: "set".to_owned(),
    };
    let server = GatewayServerVerifier {
        roots: ByIssuer::build(&anchors, Ok).expect("roots"),
        revocations: Arc::new(Revocations::default()),
        algorithms: provider.signature_verification_algorithms,
        trust_domain: "set".to_owned(),
    };
    (client, server)
}

fn material(ca: &CertificateAuthority, leaf: &LeafPem) -> TlsMaterial {
    TlsMaterial::from_pem(&leaf.cert_pem, &leaf.key_pem, ca.cert_pem()).expect("valid material")
}

/// A CA with leaves for c1 and c2, and an unrelated CA of the same cluster
/// set id (so the same subject name: the hardest case, caught by the
/// signature check) with its own leaf for c3.
struct Pki {
    ca: CertificateAuthority,
    c1: LeafPem,
    c2: LeafPem,
    other_ca: CertificateAuthority,
    other_c3: LeafPem,
}

fn pki() -> Pki {
    let ca = generate_ca("set").expect("ca");
    let other_ca = generate_ca("set").expect("other ca");
    Pki {
        c1: generate_leaf(&ca, &cluster("c1")).expect("c1"),
        c2: generate_leaf(&ca, &cluster("c2")).expect("c2"),
        other_c3: generate_leaf(&other_ca, &cluster("c3")).expect("c3"),
        ca,
        other_ca,
    }
}

struct Outcome {
    server: Result<Identity, String>,
    client: Result<Identity, String>,
    /// Whether the client resumed an earlier session.
    resumed: bool,
}

/// Runs one handshake over an in-memory pipe, then exchanges a byte each
/// way; each side reports the peer identity it saw or the error it hit.
async fn handshake(server: &TlsMaterial, client: &TlsMaterial) -> Outcome {
    let (server_io, client_io) = duplex(64 * 1024);
    let acceptor = TlsAcceptor::from(server.server_config());
    let connector = TlsConnector::from(client.client_config());
    // Any name will do: the verifier checks the SPIFFE identity, not the name.
    let name = ServerName::try_from("198.51.100.7").expect("ip server name");
    let server_side = async move {
        let mut tls = acceptor
            .accept(server_io)
            .await
            .map_err(|e| e.to_string())?;
        let (_, conn) = tls.get_ref();
        assert_eq!(conn.alpn_protocol(), Some(ALPN_H2));
        let peer = peer_identity(conn).map_err(|e| e.to_string())?;
        let mut byte = [0u8; 1];
        tls.read_exact(&mut byte).await.map_err(|e| e.to_string())?;
        tls.write_all(b"s").await.map_err(|e| e.to_string())?;
        tls.flush().await.map_err(|e| e.to_string())?;
        Ok(peer)
    };
    let client_side = async move {
        let mut tls = connector
            .connect(name, client_io)
            .await
            .map_err(|e| e.to_string())?;
        let (_, conn) = tls.get_ref();
        assert_eq!(conn.alpn_protocol(), Some(ALPN_H2));
        let peer = peer_identity(conn).map_err(|e| e.to_string())?;
        let resumed = conn.handshake_kind() == Some(rustls::HandshakeKind::Resumed);
        tls.write_all(b"c").await.map_err(|e| e.to_string())?;
        tls.flush().await.map_err(|e| e.to_string())?;
        let mut byte = [0u8; 1];
        tls.read_exact(&mut byte).await.map_err(|e| e.to_string())?;
        Ok((peer, resumed))
    };
    let (server, client) = tokio::join!(server_side, client_side);
    let resumed = client.as_ref().is_ok_and(|(_, resumed)| *resumed);
    Outcome {
        server,
        client: client.map(|(peer, _)| peer),
        resumed,
    }
}

#[tokio::test]
async fn gateways_of_one_cluster_set_authenticate_each_other() {
    let pki = pki();
    let server = material(&pki.ca, &pki.c1);
    let client = material(&pki.ca, &pki.c2);
    let outcome = handshake(&server, &client).await;
    assert_eq!(outcome.server, Ok(pki.c2.identity.clone()));
    assert_eq!(outcome.client, Ok(pki.c1.identity.clone()));
    let seen = outcome.server.expect("server saw the client");
    assert!(server.check_trust_domain(&seen).is_ok());
}

#[tokio::test]
async fn resumed_sessions_still_know_both_identities() {
    let pki = pki();
    let server = material(&pki.ca, &pki.c1);
    let client = material(&pki.ca, &pki.c2);
    let first = handshake(&server, &client).await;
    assert!(!first.resumed);
    let second = handshake(&server, &client).await;
    assert!(second.resumed, "the second handshake resumes");
    assert_eq!(second.server, Ok(pki.c2.identity.clone()));
    assert_eq!(second.client, Ok(pki.c1.identity.clone()));
}

#[tokio::test]
async fn a_client_from_another_ca_is_refused_by_the_server() {
    let pki = pki();
    let server = material(&pki.ca, &pki.c1);
    // Trusts our CA (so it accepts the server) but its own cert is foreign.
    let client = TlsMaterial::from_pem(
        &pki.other_c3.cert_pem,
        &pki.other_c3.key_pem,
        format!("{}{}", pki.other_ca.cert_pem(), pki.ca.cert_pem()),
    )
    .expect("material");
    let outcome = handshake(&server, &client).await;
    let err = outcome.server.expect_err("server must refuse");
    assert!(
        err.contains("invalid peer certificate: BadSignature"),
        "{err}"
    );
    assert!(outcome.client.is_err(), "client must not get through");
}

#[tokio::test]
async fn a_server_from_another_ca_is_refused_by_the_client() {
    let pki = pki();
    let server = material(&pki.other_ca, &pki.other_c3);
    let client = material(&pki.ca, &pki.c2);
    let outcome = handshake(&server, &client).await;
    let err = outcome.client.expect_err("client must refuse");
    assert!(
        err.contains("invalid peer certificate: BadSignature"),
        "{err}"
    );
    assert!(outcome.server.is_err(), "server must not get through");
}

/// c1, c2 and c3 each with a CA of its own, every gateway trusting all
/// three: each CA is trusted for its own cluster's identity only.
struct ClusterPki {
    bundle: String,
    cas: Vec<CertificateAuthority>,
}

fn cluster_pki() -> ClusterPki {
    let cas: Vec<CertificateAuthority> = ["c1", "c2", "c3"]
        .iter()
        .map(|c| generate_cluster_ca("set", &cluster(c)).expect("cluster ca"))
        .collect();
    ClusterPki {
        bundle: cas.iter().map(CertificateAuthority::cert_pem).collect(),
        cas,
    }
}

fn bundled(pki: &ClusterPki, leaf: &LeafPem) -> Result<TlsMaterial, TlsError> {
    TlsMaterial::from_pem(&leaf.cert_pem, &leaf.key_pem, &pki.bundle)
}

#[tokio::test]
async fn per_cluster_cas_authenticate_their_own_clusters() {
    let pki = cluster_pki();
    let c1 = generate_leaf(&pki.cas[0], &cluster("c1")).expect("c1 leaf");
    let c2 = generate_leaf(&pki.cas[1], &cluster("c2")).expect("c2 leaf");
    let server = bundled(&pki, &c1).expect("c1 material");
    let client = bundled(&pki, &c2).expect("c2 material");
    let outcome = handshake(&server, &client).await;
    assert_eq!(outcome.server, Ok(c2.identity.clone()));
    assert_eq!(outcome.client, Ok(c1.identity.clone()));
}

/// Whoever can issue from c2's CA (c2's cert-manager) mints c1's identity:
/// both sides refuse it at the handshake, and the gateway that holds it
/// does not even load.
#[tokio::test]
async fn a_cluster_ca_cannot_issue_another_clusters_identity() {
    let pki = cluster_pki();
    assert!(
        matches!(
            generate_leaf(&pki.cas[1], &cluster("c1")),
            Err(TlsError::NoIssuer(_))
        ),
        "strait's own generator refuses"
    );
    let forged = sign_leaf(
        &pki.cas[1],
        Identity::new("set", cluster("c1")).expect("identity"),
    )
    .expect("a leaf naming c1, signed by c2's CA");
    let error = bundled(&pki, &forged).expect_err("refused at load");
    assert!(error.to_string().contains("not trusted"), "{error}");

    let c3 = bundled(
        &pki,
        &generate_leaf(&pki.cas[2], &cluster("c3")).expect("c3 leaf"),
    )
    .expect("c3 material");
    let forger = presenting(&c3, &forged);
    // Presented by a client: c3's server refuses it.
    let outcome = handshake(&c3, &forger).await;
    let error = outcome
        .server
        .expect_err("c3 refuses a c1 identity from c2's CA");
    assert!(error.contains("invalid peer certificate"), "{error}");
    // Presented by a server: c3's client refuses it.
    let outcome = handshake(&forger, &c3).await;
    let error = outcome
        .client
        .expect_err("c3 refuses a c1 identity from c2's CA");
    assert!(error.contains("invalid peer certificate"), "{error}");
    // The same forger presenting an honest c3 leaf gets through: what is
    // refused is the issuer, not the test's plumbing.
    let honest = generate_leaf(&pki.cas[2], &cluster("c3")).expect("c3 leaf");
    let outcome = handshake(&c3, &presenting(&c3, &honest)).await;
    assert_eq!(outcome.server, Ok(honest.identity.clone()));
}

/// `honest`'s verifiers presenting `leaf`, past the load-time check that
/// a gateway's own leaf is one its CAs may issue: what a forger with
/// another TLS stack would present.
fn presenting(honest: &TlsMaterial, leaf: &LeafPem) -> TlsMaterial {
    let provider = rustls::crypto::ring::default_provider();
    let key = PrivateKeyDer::from_pem_slice(leaf.key_pem.as_bytes()).expect("key");
    let certified =
        CertifiedKey::from_der(vec![leaf.cert_der()], key, &provider).expect("certified key");
    let resolver = Arc::new(rustls::sign::SingleCertAndKey::from(Arc::new(certified)));
    let mut server = (*honest.server).clone();
    server.cert_resolver = resolver.clone();
    let mut client = (*honest.client).clone();
    client.client_auth_cert_resolver = resolver;
    TlsMaterial {
        identity: leaf.identity.clone(),
        not_after: honest.not_after,
        ca_not_after: honest.ca_not_after,
        server: Arc::new(server),
        client: Arc::new(client),
        client_verifier: honest.client_verifier.clone(),
    }
}

#[tokio::test]
async fn a_server_of_another_trust_domain_is_refused_even_by_a_shared_ca() {
    let pki = pki();
    let foreign = Identity {
        trust_domain: "elsewhere".to_owned(),
        cluster: cluster("c9"),
    };
    let leaf = sign_leaf(&pki.ca, foreign).expect("leaf");
    let server = material(&pki.ca, &leaf);
    let client = material(&pki.ca, &pki.c2);
    let outcome = handshake(&server, &client).await;
    let err = outcome.client.expect_err("client must refuse");
    assert!(err.contains("ForeignTrustDomain"), "{err}");
}

#[test]
fn the_server_verifier_refuses_a_client_of_another_trust_domain() {
    let pki = pki();
    let foreign = Identity {
        trust_domain: "elsewhere".to_owned(),
        cluster: cluster("c9"),
    };
    let leaf = sign_leaf(&pki.ca, foreign).expect("leaf");
    let (verifier, _) = verifiers_trusting(&pki.ca);
    let now = UnixTime::now();
    assert!(
        verifier
            .verify_client_cert(&pki.c2.cert_der(), &[], now)
            .is_ok()
    );
    let err = verifier
        .verify_client_cert(&leaf.cert_der(), &[], now)
        .expect_err("foreign trust domain");
    assert!(err.to_string().contains("ForeignTrustDomain"), "{err}");
}

#[test]
fn generated_cluster_set_loads_with_the_right_identities() {
    let out = tempfile::tempdir().expect("tempdir");
    write_cluster_set(out.path(), "set", &[cluster("c1"), cluster("c2")]).expect("written");
    for id in ["c1", "c2"] {
        let material = TlsMaterial::load(&out.path().join(id)).expect("loads");
        assert_eq!(material.identity().cluster, cluster(id));
        assert_eq!(material.identity().trust_domain, "set");
        let days = material
            .not_after()
            .duration_since(SystemTime::now())
            .expect("in the future")
            .as_secs()
            / 86_400;
        // The default leaf validity: 30 days.
        assert!((28..=30).contains(&days), "{days}");
    }
}

fn load_err(dir: &Path) -> String {
    TlsMaterial::load(dir).expect_err("must fail").to_string()
}

#[test]
fn missing_and_garbage_files_are_named_in_errors() {
    let out = tempfile::tempdir().expect("tempdir");
    write_cluster_set(out.path(), "set", &[cluster("c1"), cluster("c2")]).expect("written");
    let dir = out.path().join("c1");
    let path = |name: &str| dir.join(name);
    let good = |name: &str| fs::read(path(name)).expect("read");
    let (cert, key, ca) = (good(CERT_FILE), good(KEY_FILE), good(CA_FILE));
    let restore = || {
        fs::write(path(CERT_FILE), &cert).expect("write");
        fs::write(path(KEY_FILE), &key).expect("write");
        fs::write(path(CA_FILE), &ca).expect("write");
    };
    let expect = |err: String, file: &str, what: &str| {
        let named = format!("{}: {what}", path(file).display());
        assert!(
            err.starts_with(&named),
            "{err:?} should start with {named:?}"
        );
    };

    for file in [CERT_FILE, KEY_FILE, CA_FILE] {
        fs::remove_file(path(file)).expect("remove");
        expect(load_err(&dir), file, "missing");
        restore();
    }
    for file in [CERT_FILE, CA_FILE] {
        fs::write(path(file), "not pem at all\n").expect("write");
        expect(load_err(&dir), file, "no certificate in it");
        restore();
    }
    fs::write(path(KEY_FILE), "garbage").expect("write");
    expect(load_err(&dir), KEY_FILE, "no private key in it");
    fs::write(path(KEY_FILE), "-----BEGIN PRIVATE KEY-----\n!!!\n").expect("write");
    expect(load_err(&dir), KEY_FILE, "malformed pem");
    fs::write(path(KEY_FILE), cert.clone()).expect("write");
    expect(load_err(&dir), KEY_FILE, "no private key in it");

    // Another cluster's key.
    let other_key = fs::read(out.path().join("c2").join(KEY_FILE)).expect("read");
    fs::write(path(KEY_FILE), other_key).expect("write");
    expect(
        load_err(&dir),
        KEY_FILE,
        "private key does not match the certificate in",
    );
    restore();

    // A certificate body that is not x509.
    let junk = "-----BEGIN CERTIFICATE-----\nAAECAw==\n-----END CERTIFICATE-----\n";
    fs::write(path(CERT_FILE), junk).expect("write");
    expect(load_err(&dir), CERT_FILE, "certificate cannot be parsed");
    restore();
    fs::write(path(CA_FILE), junk).expect("write");
    expect(load_err(&dir), CA_FILE, "unusable certificate");
    restore();

    assert!(TlsMaterial::load(&dir).is_ok(), "restored files load again");
}

#[test]
fn a_certificate_without_an_identity_or_trust_is_refused() {
    let pki = pki();
    // The CA's own certificate and key: a valid pair without a URI SAN.
    let err = TlsMaterial::from_pem(pki.ca.cert_pem(), pki.ca.key_pem(), pki.ca.cert_pem())
        .expect_err("no identity");
    assert_eq!(
        err.to_string(),
        "tls.crt: certificate has no spiffe uri san"
    );
    // A leaf that ca.crt does not vouch for.
    let err = TlsMaterial::from_pem(&pki.c1.cert_pem, &pki.c1.key_pem, pki.other_ca.cert_pem())
        .expect_err("untrusted");
    assert!(
        err.to_string()
            .starts_with("tls.crt: certificate is not trusted by ca.crt"),
        "{err}"
    );
}

#[test]
fn peer_identity_needs_a_peer_certificate() {
    let pki = pki();
    let client = material(&pki.ca, &pki.c2);
    let conn = rustls::ClientConnection::new(
        client.client_config(),
        ServerName::try_from("gateway.example").expect("name"),
    )
    .expect("connection");
    assert!(matches!(
        peer_identity(&conn),
        Err(TlsError::NoPeerCertificate)
    ));
}

#[test]
fn foreign_trust_domains_are_refused() {
    let pki = pki();
    let ours = material(&pki.ca, &pki.c1);
    assert!(ours.check_trust_domain(&pki.c2.identity).is_ok());
    let foreign = Identity {
        trust_domain: "elsewhere".to_owned(),
        cluster: cluster("c2"),
    };
    let err = ours.check_trust_domain(&foreign).expect_err("foreign");
    assert_eq!(
        err.to_string(),
        "peer spiffe://elsewhere/cluster/c2/gateway is not in trust domain \"set\""
    );
}

#[tokio::test]
async fn a_gateway_of_another_cluster_set_is_refused() {
    let pki = pki();
    let stranger_ca = generate_ca("other").expect("ca");
    let stranger = generate_leaf(&stranger_ca, &cluster("c1")).expect("leaf");
    // The stranger trusts both CAs, yet is refused for its issuer.
    let client = TlsMaterial::from_pem(
        &stranger.cert_pem,
        &stranger.key_pem,
        format!("{}{}", stranger_ca.cert_pem(), pki.ca.cert_pem()),
    )
    .expect("material");
    let server = material(&pki.ca, &pki.c1);
    let outcome = handshake(&server, &client).await;
    let err = outcome
        .client
        .expect_err("client refuses a foreign trust domain");
    assert!(err.contains("ForeignTrustDomain"), "{err}");
    assert!(outcome.server.is_err());
}

/// The CA's path length 0, enforced: a leaf issued by an intermediate the
/// CA signed is refused at load and by both verifiers, even when the
/// intermediate comes along in the chain.
#[tokio::test]
async fn a_leaf_issued_through_an_intermediate_is_refused() {
    let pki = pki();
    let intermediate = sign_intermediate(&pki.ca).expect("intermediate");
    let leaf = generate_leaf(&intermediate, &cluster("c3")).expect("leaf");
    let chain_pem = format!("{}{}", leaf.cert_pem, intermediate.cert_pem());
    let err = TlsMaterial::from_pem(&chain_pem, &leaf.key_pem, pki.ca.cert_pem())
        .expect_err("refused at load");
    assert!(
        err.to_string()
            .starts_with("tls.crt: certificate is not trusted by ca.crt"),
        "{err}"
    );
    let (verifier, client_side) = verifiers_trusting(&pki.ca);
    let now = UnixTime::now();
    let intermediates = [intermediate.cert_der().clone()];
    assert!(
        verifier
            .verify_client_cert(&leaf.cert_der(), &intermediates, now)
            .is_err(),
        "the server refuses it"
    );
    assert!(
        verifier
            .verify_client_cert(&pki.c2.cert_der(), &[], now)
            .is_ok(),
        "a leaf of the CA itself is accepted"
    );
    let name = ServerName::try_from("198.51.100.7").expect("name");
    assert!(
        client_side
            .verify_server_cert(&leaf.cert_der(), &intermediates, &name, &[], now)
            .is_err(),
        "the client refuses it"
    );
    assert!(
        client_side
            .verify_server_cert(&pki.c2.cert_der(), &[], &name, &[], now)
            .is_ok()
    );
}

#[test]
fn two_identities_that_differ_only_in_case_are_two_and_refused() {
    let pki = pki();
    let both = sign_leaf_with_uris(
        &pki.ca,
        &[
            "spiffe://set/cluster/c1/gateway",
            "SPIFFE://set/cluster/c2/gateway",
        ],
    )
    .expect("leaf");
    let err = identity_of(&both).expect_err("two identities");
    assert!(
        matches!(
            err,
            TlsError::Identity(crate::tls::IdentityError::Several(2))
        ),
        "{err}"
    );
    let upper = sign_leaf_with_uris(&pki.ca, &["SPIFFE://set/cluster/c1/gateway"]).expect("leaf");
    assert!(
        identity_of(&upper).is_err(),
        "the strict parser wants lowercase"
    );
}

/// Writes `leaf`'s secret layout under `dir`, with `tls.crl` when given.
fn write_layout(dir: &Path, ca: &CertificateAuthority, leaf: &LeafPem, crl: Option<&str>) {
    fs::create_dir_all(dir).expect("dir");
    fs::write(dir.join(CERT_FILE), &leaf.cert_pem).expect("cert");
    fs::write(dir.join(KEY_FILE), &leaf.key_pem).expect("key");
    fs::write(dir.join(CA_FILE), ca.cert_pem()).expect("ca");
    if let Some(crl) = crl {
        fs::write(dir.join(CRL_FILE), crl).expect("crl");
    }
}

/// A leaf listed in `tls.crl` is refused as a client by a server that has
/// the list, and as a server by a client that has it; others still pass.
#[tokio::test]
async fn a_revoked_leaf_is_refused_by_both_sides() {
    let pki = pki();
    let c3_leaf = generate_leaf(&pki.ca, &cluster("c3")).expect("c3");
    let crl = revocation_list(&pki.ca, &[&pki.c2.cert_der()]).expect("crl");
    let dir = tempfile::tempdir().expect("dir");
    write_layout(&dir.path().join("c1"), &pki.ca, &pki.c1, Some(&crl));
    let c1 = TlsMaterial::load(&dir.path().join("c1")).expect("c1 loads with its crl");
    let c2 = material(&pki.ca, &pki.c2);
    let c3 = material(&pki.ca, &c3_leaf);

    let outcome = handshake(&c1, &c2).await;
    let err = outcome
        .server
        .expect_err("the server refuses a revoked client");
    assert!(err.contains("Revoked"), "{err}");
    let outcome = handshake(&c2, &c1).await;
    let err = outcome
        .client
        .expect_err("the client refuses a revoked server");
    assert!(err.contains("Revoked"), "{err}");
    let outcome = handshake(&c1, &c3).await;
    assert_eq!(outcome.server, Ok(c3.identity().clone()));
    let outcome = handshake(&c3, &c1).await;
    assert_eq!(outcome.client, Ok(c3.identity().clone()));
    // A live connection's peer is checked again the same way.
    let err = c1
        .still_trusts(&pki.c2.cert_der())
        .expect_err("c2 is listed");
    assert!(err.to_string().contains("Revoked"), "{err}");
    assert!(c1.still_trusts(&c3_leaf.cert_der()).is_ok());
    assert!(
        c2.still_trusts(&pki.c2.cert_der()).is_ok(),
        "no list, no refusal"
    );

    // A tls.crl that is not a CRL is an error naming the file.
    write_layout(&dir.path().join("bad"), &pki.ca, &pki.c1, Some("garbage\n"));
    let err = load_err(&dir.path().join("bad"));
    assert!(
        err.starts_with("tls.crl") || err.contains("tls.crl:"),
        "{err}"
    );
}

#[test]
fn the_material_says_when_its_leaf_and_its_first_ca_expire() {
    let pki = pki();
    let material = material(&pki.ca, &pki.c1);
    let in_days = |at: std::time::SystemTime| {
        at.duration_since(std::time::SystemTime::now())
            .map(|left| left.as_secs() / 86_400)
            .unwrap_or(0)
    };
    let leaf_days = in_days(material.not_after());
    let ca_days = in_days(material.ca_not_after().expect("the CA's expiry"));
    assert!((1..=31).contains(&leaf_days), "leaf: {leaf_days} days");
    assert!(ca_days > 3_000, "the CA lasts ten years: {ca_days} days");
}
