//! Certificate generation for a cluster set: ECDSA P-256 CAs (one for the
//! whole set, [`generate_ca`], or one per cluster that issues only that
//! cluster's identity, [`generate_cluster_ca`]) and gateway leaves
//! ([`generate_leaf`]), in memory or written to disk in the Kubernetes
//! secret layout ([`write_cluster_set`]: a CA per cluster).

use std::collections::BTreeSet;
use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use rcgen::string::Ia5String;
use rcgen::{
    BasicConstraints, Certificate, CertificateParams, DistinguishedName, DnType,
    ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose, PKCS_ECDSA_P256_SHA256,
    SanType,
};
use rustls_pki_types::CertificateDer;
use x509_parser::time::ASN1Time;

use crate::model::{ClusterId, check_dns_subdomain};

use super::identity::{Identity, MAX_TRUST_DOMAIN_LEN};
use super::{FileProblem, TlsError};

/// The certificate chain file of the secret layout (leaf first).
pub const CERT_FILE: &str = "tls.crt";
/// The private key file of the secret layout (PKCS#8 PEM).
pub const KEY_FILE: &str = "tls.key";
/// The trusted CA certificates file of the secret layout.
pub const CA_FILE: &str = "ca.crt";

const HOUR: i64 = 3600;
const DAY: i64 = 24 * HOUR;
/// How long a leaf from `strait certs` is valid unless `--validity` says:
/// short, because nothing revokes a leaf before it expires.
pub const DEFAULT_LEAF_VALIDITY: std::time::Duration = std::time::Duration::from_secs(30 * 86_400);
const CA_LIFETIME: i64 = 10 * 365 * DAY;

/// A cluster set's CA, held in memory to sign gateway leaves.
pub struct CertificateAuthority {
    clusterset: String,
    /// The one cluster a per-cluster CA issues for.
    cluster: Option<ClusterId>,
    params: CertificateParams,
    key: KeyPair,
    cert: Certificate,
}

impl std::fmt::Debug for CertificateAuthority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CertificateAuthority")
            .field("clusterset", &self.clusterset)
            .finish_non_exhaustive()
    }
}

impl CertificateAuthority {
    /// The cluster set id, which is the trust domain of the leaves it signs.
    pub fn clusterset(&self) -> &str {
        &self.clusterset
    }

    pub fn cert_pem(&self) -> String {
        self.cert.pem()
    }

    pub fn cert_der(&self) -> &CertificateDer<'static> {
        self.cert.der()
    }

    /// The CA's private key (PKCS#8 PEM).
    pub fn key_pem(&self) -> String {
        self.key.serialize_pem()
    }
}

/// A gateway leaf certificate and its key, as PEM.
#[derive(Debug, Clone)]
pub struct LeafPem {
    pub identity: Identity,
    pub cert_pem: String,
    /// PKCS#8 PEM.
    pub key_pem: String,
    cert_der: CertificateDer<'static>,
}

impl LeafPem {
    pub fn cert_der(&self) -> CertificateDer<'static> {
        self.cert_der.clone()
    }
}

/// Generates the CA of cluster set `clusterset`: ECDSA P-256, CN
/// "Strait <clusterset> CA", allowed to sign leaves only (path length 0),
/// valid from an hour ago for ten years.
pub fn generate_ca(clusterset: &str) -> Result<CertificateAuthority, TlsError> {
    check_clusterset(clusterset)?;
    self_signed_ca(clusterset, None)
}

/// Generates the CA of one cluster of `clusterset`: as [`generate_ca`],
/// CN "Strait <clusterset> <cluster> CA", and naming the cluster's gateway
/// identity in a URI SAN, so that peers accept from it only that
/// cluster's identity (a leaf it signs for another cluster is refused).
pub fn generate_cluster_ca(
    clusterset: &str,
    cluster: &ClusterId,
) -> Result<CertificateAuthority, TlsError> {
    self_signed_ca(clusterset, Some(cluster))
}

/// A CA for the whole set (`cluster` `None`) or for one cluster of it.
fn self_signed_ca(
    clusterset: &str,
    cluster: Option<&ClusterId>,
) -> Result<CertificateAuthority, TlsError> {
    let mut params = CertificateParams::default();
    let mut name = DistinguishedName::new();
    let common_name = match cluster {
        Some(cluster) => {
            let identity = Identity::new(clusterset, cluster.clone())?;
            params.subject_alt_names = vec![SanType::URI(Ia5String::try_from(identity.uri())?)];
            format!("Strait {clusterset} {cluster} CA")
        }
        None => format!("Strait {clusterset} CA"),
    };
    name.push(DnType::CommonName, common_name);
    params.distinguished_name = name;
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let (not_before, not_after) = validity(CA_LIFETIME)?;
    params.not_before = not_before.to_datetime();
    params.not_after = not_after.to_datetime();
    let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256)?;
    let cert = params.self_signed(&key)?;
    Ok(CertificateAuthority {
        clusterset: clusterset.to_owned(),
        cluster: cluster.cloned(),
        params,
        key,
        cert,
    })
}

/// Generates the gateway leaf of `cluster`, signed by `ca`: ECDSA P-256, URI
/// SAN `spiffe://<clusterset>/cluster/<cluster>/gateway`, DNS SAN
/// `<cluster>.gateway.<clusterset>` when that is a valid DNS name, usable as
/// TLS server and client, valid from an hour ago for
/// [`DEFAULT_LEAF_VALIDITY`].
pub fn generate_leaf(ca: &CertificateAuthority, cluster: &ClusterId) -> Result<LeafPem, TlsError> {
    generate_leaf_valid_for(ca, cluster, DEFAULT_LEAF_VALIDITY)
}

/// As [`generate_leaf`], valid for `validity` from now.
pub fn generate_leaf_valid_for(
    ca: &CertificateAuthority,
    cluster: &ClusterId,
    validity: std::time::Duration,
) -> Result<LeafPem, TlsError> {
    let identity = Identity::new(&ca.clusterset, cluster.clone())?;
    if ca.cluster.as_ref().is_some_and(|own| own != cluster) {
        // Peers would refuse it: a cluster's CA issues its own identity only.
        return Err(TlsError::NoIssuer(Box::new(identity)));
    }
    sign_leaf_valid_for(ca, identity, validity)
}

/// Signs a gateway leaf for `identity`, whatever its trust domain (tests use
/// this to make a certificate that names another cluster set).
#[cfg(test)]
pub(super) fn sign_leaf(
    ca: &CertificateAuthority,
    identity: Identity,
) -> Result<LeafPem, TlsError> {
    sign_leaf_valid_for(ca, identity, DEFAULT_LEAF_VALIDITY)
}

fn sign_leaf_valid_for(
    ca: &CertificateAuthority,
    identity: Identity,
    validity: std::time::Duration,
) -> Result<LeafPem, TlsError> {
    let mut params = CertificateParams::default();
    let mut name = DistinguishedName::new();
    name.push(DnType::CommonName, identity.cluster.as_str());
    params.distinguished_name = name;
    params.subject_alt_names = vec![SanType::URI(Ia5String::try_from(identity.uri())?)];
    let dns = format!("{}.gateway.{}", identity.cluster, identity.trust_domain);
    if check_dns_subdomain(&dns, MAX_TRUST_DOMAIN_LEN).is_ok() {
        params
            .subject_alt_names
            .push(SanType::DnsName(Ia5String::try_from(dns)?));
    }
    params.is_ca = IsCa::ExplicitNoCa;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    params.use_authority_key_identifier_extension = true;
    let lifetime = i64::try_from(validity.as_secs()).unwrap_or(i64::MAX);
    let (not_before, not_after) = self::validity(lifetime)?;
    params.not_before = not_before.to_datetime();
    params.not_after = not_after.to_datetime();
    let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256)?;
    let issuer = Issuer::from_params(&ca.params, &ca.key);
    let cert = params.signed_by(&key, &issuer)?;
    Ok(LeafPem {
        identity,
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
        cert_der: cert.der().clone(),
    })
}

/// Every file [`write_cluster_set`] writes, in order: `out/ca.crt`, then per
/// cluster `out/<cluster>/tls.crt`, `tls.key` and `ca.crt`.
pub fn cluster_set_files(out: &Path, clusters: &[ClusterId]) -> Vec<PathBuf> {
    let mut files = vec![out.join(CA_FILE)];
    for cluster in clusters {
        let dir = out.join(cluster.as_str());
        files.extend([CERT_FILE, KEY_FILE, CA_FILE].map(|name| dir.join(name)));
    }
    files
}

/// Generates a CA for each of `clusters` of cluster set `clusterset`
/// ([`generate_cluster_ca`]) and each cluster's gateway leaf, signed by its
/// own cluster's CA, and writes them under `out` (see
/// [`cluster_set_files`]): every `ca.crt` holds every cluster's CA, each
/// trusted for its own cluster only. Keys are readable by their owner only;
/// the CAs' keys are not kept. Refuses to overwrite any existing file,
/// before writing anything.
pub fn write_cluster_set(
    out: &Path,
    clusterset: &str,
    clusters: &[ClusterId],
) -> Result<(), TlsError> {
    write_cluster_set_valid_for(out, clusterset, clusters, DEFAULT_LEAF_VALIDITY)
}

/// As [`write_cluster_set`], with leaves valid for `leaf_validity`.
pub fn write_cluster_set_valid_for(
    out: &Path,
    clusterset: &str,
    clusters: &[ClusterId],
    leaf_validity: std::time::Duration,
) -> Result<(), TlsError> {
    check_clusterset(clusterset)?;
    let mut seen = BTreeSet::new();
    if let Some(dup) = clusters.iter().find(|c| !seen.insert(*c)) {
        return Err(TlsError::DuplicateCluster(dup.clone()));
    }
    if let Some(existing) = cluster_set_files(out, clusters)
        .into_iter()
        .find(|f| f.symlink_metadata().is_ok())
    {
        return Err(TlsError::file(existing, FileProblem::Exists));
    }
    let cas = clusters
        .iter()
        .map(|cluster| generate_cluster_ca(clusterset, cluster))
        .collect::<Result<Vec<_>, _>>()?;
    let ca_pem: String = cas.iter().map(CertificateAuthority::cert_pem).collect();
    create_dir(out)?;
    write_new(&out.join(CA_FILE), &ca_pem, false)?;
    for (cluster, ca) in clusters.iter().zip(&cas) {
        let leaf = generate_leaf_valid_for(ca, cluster, leaf_validity)?;
        let dir = out.join(cluster.as_str());
        create_dir(&dir)?;
        write_new(&dir.join(CERT_FILE), &leaf.cert_pem, false)?;
        write_new(&dir.join(KEY_FILE), &leaf.key_pem, true)?;
        write_new(&dir.join(CA_FILE), &ca_pem, false)?;
    }
    Ok(())
}

fn check_clusterset(clusterset: &str) -> Result<(), TlsError> {
    check_dns_subdomain(clusterset, MAX_TRUST_DOMAIN_LEN).map_err(|error| {
        TlsError::InvalidClusterSet {
            value: clusterset.to_owned(),
            error,
        }
    })
}

/// From an hour ago (tolerating clock skew between gateways) to `lifetime`
/// seconds from now.
fn validity(lifetime: i64) -> Result<(ASN1Time, ASN1Time), TlsError> {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
        .unwrap_or(0);
    let at = |secs: i64| {
        ASN1Time::from_timestamp(secs).map_err(|_| TlsError::Generate(rcgen::Error::Time))
    };
    Ok((at(now - HOUR)?, at(now.saturating_add(lifetime))?))
}

fn create_dir(dir: &Path) -> Result<(), TlsError> {
    std::fs::create_dir_all(dir).map_err(|e| TlsError::file(dir, FileProblem::Unwritable(e)))
}

/// Writes a file that must not exist yet; `secret` files get mode 0600 on unix.
fn write_new(path: &Path, contents: &str, secret: bool) -> Result<(), TlsError> {
    let mut options = OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    if secret {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    #[cfg(not(unix))]
    let _ = secret;
    let problem = |e: std::io::Error| match e.kind() {
        std::io::ErrorKind::AlreadyExists => FileProblem::Exists,
        _ => FileProblem::Unwritable(e),
    };
    let mut file = options
        .open(path)
        .map_err(|e| TlsError::file(path, problem(e)))?;
    file.write_all(contents.as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(|e| TlsError::file(path, FileProblem::Unwritable(e)))
}

/// An intermediate CA signed by `ca`, for tests of what peers refuse.
#[cfg(test)]
pub(super) fn sign_intermediate(
    ca: &CertificateAuthority,
) -> Result<CertificateAuthority, TlsError> {
    let mut params = CertificateParams::default();
    let mut name = DistinguishedName::new();
    name.push(DnType::CommonName, "intermediate");
    params.distinguished_name = name;
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let (not_before, not_after) = validity(DAY)?;
    params.not_before = not_before.to_datetime();
    params.not_after = not_after.to_datetime();
    let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256)?;
    let issuer = Issuer::from_params(&ca.params, &ca.key);
    let cert = params.signed_by(&key, &issuer)?;
    Ok(CertificateAuthority {
        cluster: None,
        clusterset: ca.clusterset.clone(),
        params,
        key,
        cert,
    })
}

/// A leaf signed by `ca` whose only SANs are these URIs.
#[cfg(test)]
pub(super) fn sign_leaf_with_uris(
    ca: &CertificateAuthority,
    uris: &[&str],
) -> Result<CertificateDer<'static>, TlsError> {
    let mut params = CertificateParams::default();
    params.subject_alt_names = uris
        .iter()
        .map(|uri| Ia5String::try_from(*uri).map(SanType::URI))
        .collect::<Result<_, _>>()?;
    params.is_ca = IsCa::ExplicitNoCa;
    let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256)?;
    let issuer = Issuer::from_params(&ca.params, &ca.key);
    Ok(params.signed_by(&key, &issuer)?.der().clone())
}

/// A revocation list signed by `ca` that lists `revoked`, as PEM: the
/// `tls.crl` of gateways that must refuse those certificates, and end the
/// connections that presented them.
pub fn revocation_list(
    ca: &CertificateAuthority,
    revoked: &[&CertificateDer<'_>],
) -> Result<String, TlsError> {
    let (this_update, next_update) = validity(DAY)?;
    let mut revoked_certs = Vec::new();
    for cert in revoked {
        let (_, parsed) = x509_parser::parse_x509_certificate(cert.as_ref())
            .map_err(|e| TlsError::Identity(super::IdentityError::BadCertificate(e.to_string())))?;
        revoked_certs.push(rcgen::RevokedCertParams {
            serial_number: rcgen::SerialNumber::from_slice(parsed.raw_serial()),
            revocation_time: this_update.to_datetime(),
            reason_code: Some(rcgen::RevocationReason::KeyCompromise),
            invalidity_date: None,
        });
    }
    let issuer = Issuer::from_params(&ca.params, &ca.key);
    let crl = rcgen::CertificateRevocationListParams {
        this_update: this_update.to_datetime(),
        next_update: next_update.to_datetime(),
        crl_number: rcgen::SerialNumber::from(1u64),
        issuing_distribution_point: None,
        revoked_certs,
        key_identifier_method: rcgen::KeyIdMethod::Sha256,
    }
    .signed_by(&issuer)?;
    Ok(crl.pem()?)
}

#[cfg(test)]
mod tests {
    use x509_parser::extensions::GeneralName;

    use super::*;

    fn cluster(id: &str) -> ClusterId {
        ClusterId::new(id).expect("valid cluster id")
    }

    /// The SAN strings (`URI:…`, `DNS:…`), EKU flags and CA flag of a certificate.
    fn inspect(der: &CertificateDer<'_>) -> (Vec<String>, (bool, bool), bool) {
        let (_, cert) = x509_parser::parse_x509_certificate(der.as_ref()).expect("parses");
        let sans = cert
            .subject_alternative_name()
            .expect("valid extension")
            .map(|ext| {
                ext.value
                    .general_names
                    .iter()
                    .map(|name| match name {
                        GeneralName::URI(uri) => format!("URI:{uri}"),
                        GeneralName::DNSName(dns) => format!("DNS:{dns}"),
                        other => format!("{other}"),
                    })
                    .collect()
            })
            .unwrap_or_default();
        let eku = cert
            .extended_key_usage()
            .expect("valid extension")
            .map(|ext| (ext.value.server_auth, ext.value.client_auth))
            .unwrap_or_default();
        (sans, eku, cert.is_ca())
    }

    #[test]
    fn leaves_carry_the_identity_dns_name_and_both_usages() {
        let ca = generate_ca("set.example").expect("ca");
        assert!(inspect(ca.cert_der()).2, "the CA is a CA");
        let leaf = generate_leaf(&ca, &cluster("east-1")).expect("leaf");
        let (sans, eku, is_ca) = inspect(&leaf.cert_der());
        assert_eq!(
            sans,
            [
                "URI:spiffe://set.example/cluster/east-1/gateway",
                "DNS:east-1.gateway.set.example"
            ]
        );
        assert_eq!(eku, (true, true));
        assert!(!is_ca);
    }

    #[test]
    fn the_dns_name_is_left_out_when_it_would_be_too_long() {
        let long = format!("{}.{}", "a".repeat(63), "b".repeat(63));
        let ca = generate_ca(&long).expect("ca");
        let leaf = generate_leaf(&ca, &cluster(&long)).expect("leaf");
        let (sans, _, _) = inspect(&leaf.cert_der());
        assert_eq!(sans.len(), 1, "{sans:?}");
        assert!(sans[0].starts_with("URI:spiffe://"));
    }

    #[test]
    fn invalid_cluster_set_ids_are_refused() {
        for bad in ["", "Set", "a_b", "set."] {
            assert!(
                matches!(generate_ca(bad), Err(TlsError::InvalidClusterSet { .. })),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn write_cluster_set_lays_out_secrets_and_never_overwrites() {
        let out = tempfile::tempdir().expect("tempdir");
        let clusters = [cluster("c1"), cluster("c2")];
        write_cluster_set(out.path(), "set", &clusters).expect("written");
        let files = cluster_set_files(out.path(), &clusters);
        assert_eq!(files.len(), 7);
        for file in &files {
            assert!(file.is_file(), "{} written", file.display());
        }
        assert_eq!(
            std::fs::read(out.path().join("ca.crt")).expect("read"),
            std::fs::read(out.path().join("c2").join("ca.crt")).expect("read")
        );
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = |p: &Path| std::fs::metadata(p).expect("stat").permissions().mode() & 0o777;
            assert_eq!(mode(&out.path().join("c1").join(KEY_FILE)), 0o600);
        }

        let before = std::fs::read(out.path().join("ca.crt")).expect("read");
        let err = write_cluster_set(out.path(), "set", &[cluster("c3"), cluster("c1")])
            .expect_err("c1 exists");
        assert!(
            err.to_string()
                .ends_with("ca.crt: already exists; remove it or choose another directory"),
            "{err}"
        );
        assert!(
            !out.path().join("c3").exists(),
            "nothing written on refusal"
        );
        assert_eq!(
            std::fs::read(out.path().join("ca.crt")).expect("read"),
            before
        );
    }

    #[test]
    fn write_cluster_set_refuses_duplicates() {
        let out = tempfile::tempdir().expect("tempdir");
        let err = write_cluster_set(out.path(), "set", &[cluster("c1"), cluster("c1")])
            .expect_err("duplicate");
        assert_eq!(err.to_string(), "cluster c1 is listed more than once");
    }
}
