//! `strait check --pre` and the installation part of `strait check --kube`:
//! checks of a cluster before and after Strait is installed, in the manner
//! of `linkerd check`: grouped, each ✓, ⚠ or ✗ with what was found, a hint
//! and a docs anchor; a ✗ makes the command exit non-zero.
//!
//! Before: the API server's version, the MCS and About CRDs and their
//! release, the cluster's ClusterProperties, the caller's rights to create
//! what an install makes, whether the cluster gives LoadBalancer Services
//! an address, and whether CoreDNS sends `clusterset.local` anywhere.
//! After (once `strait-system/cluster-edge` exists): the Deployment's
//! replicas, the Lease holder that writes, the gateway Service's
//! load-balancer address, the TLS Secret (the leaf names this cluster, its
//! expiry, a CA naming this cluster in `ca.crt`), and that CoreDNS's
//! `clusterset.local` block forwards to the current address of
//! `cluster-edge-dns` (a re-created Service gets a new one, and every name
//! then fails); the checks of the gateway's own view are
//! [`linked`](super::linked)'s. The judgements are pure functions of what
//! was read; reading is below them.

use std::fmt::Write as _;
use std::time::{Duration, SystemTime};

use serde::Serialize;

/// How many days before a certificate expires the check warns.
const EXPIRY_WARNING: Duration = Duration::from_secs(7 * 86_400);
/// The MCS API release whose CRDs `deploy/crds/` holds.
pub const MCS_RELEASE: &str = "v0.5.2";
/// The oldest Kubernetes minor version Strait's manifests run on.
const MIN_MINOR: u32 = 30;
/// A Lease not renewed for this long has no live holder.
const LEASE_STALE: Duration = Duration::from_secs(60);

/// How a check came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    Ok,
    Warning,
    Failed,
}

impl Outcome {
    fn mark(self) -> &'static str {
        match self {
            Outcome::Ok => "✓",
            Outcome::Warning => "⚠",
            Outcome::Failed => "✗",
        }
    }
}

/// One line of the report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Check {
    pub group: &'static str,
    pub outcome: Outcome,
    /// What was found.
    pub message: String,
    /// What to do about it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
    /// Where docs/kubernetes.md explains it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub docs: Option<&'static str>,
}

impl Check {
    pub(super) fn new(group: &'static str, outcome: Outcome, message: impl Into<String>) -> Check {
        Check {
            group,
            outcome,
            message: message.into(),
            hint: None,
            docs: None,
        }
    }

    pub(super) fn hint(mut self, hint: impl Into<String>, docs: &'static str) -> Check {
        self.hint = Some(hint.into());
        self.docs = Some(docs);
        self
    }
}

const DOCS_CRDS: &str = "docs/kubernetes.md#2-install-the-crds";
const DOCS_PROPERTIES: &str =
    "docs/kubernetes.md#3-name-the-cluster-its-cluster-set-and-its-network";
const DOCS_CERTS: &str = "docs/kubernetes.md#4-issue-the-gateway-certificates";
const DOCS_DEPLOY: &str = "docs/kubernetes.md#6-deploy";
const DOCS_DNS: &str = "docs/kubernetes.md#names-clustersetlocal-through-coredns";
const DOCS_LEADER: &str = "docs/kubernetes.md#export-status-and-leader-election";

/// The API server's version, `major.minor` as `/version` says it (a
/// trailing `+` on the minor is a provider's mark).
pub fn version_check(major: &str, minor: &str) -> Check {
    let minor_number = minor.trim_end_matches('+').parse::<u32>().ok();
    match (major, minor_number) {
        ("1", Some(m)) if m >= MIN_MINOR => Check::new(
            "kubernetes",
            Outcome::Ok,
            format!("the API server is Kubernetes 1.{m}"),
        ),
        _ => Check::new(
            "kubernetes",
            Outcome::Failed,
            format!("the API server is Kubernetes {major}.{minor}"),
        )
        .hint(
            format!("Strait's manifests need 1.{MIN_MINOR} or later (the preStop sleep hook, ValidatingAdmissionPolicy)"),
            "docs/kubernetes.md#before-you-start",
        ),
    }
}

/// One CRD: present, and which mcs-api release its labels name
/// (`release` is `None` for ClusterProperty, which carries none).
/// `slice_objects` says, for the ServiceImport CRD, whether a served
/// version's schema holds `status.endpointSliceObjects` (which Strait
/// writes, and the API server prunes where the schema lacks it): the
/// schema decides, the label only names the release.
pub fn crd_check(
    name: &str,
    found: Option<Option<&str>>,
    mcs: bool,
    slice_objects: Option<bool>,
) -> Check {
    let upgrade = "upgrade the CRDs the way the implementation that installed them says, or kubectl apply -k deploy/crds/ if Strait's";
    let labelled = |release: Option<&str>| {
        release.map_or_else(
            || "no release label".to_owned(),
            |r| format!("labelled mcs-api {r}"),
        )
    };
    match found {
        None => Check::new("crds", Outcome::Failed, format!("{name} is not installed")).hint(
            "kubectl apply -k deploy/crds/ (unless another MCS implementation installs them)",
            DOCS_CRDS,
        ),
        Some(_) if !mcs => Check::new("crds", Outcome::Ok, format!("{name} is installed")),
        Some(release) if slice_objects == Some(false) => Check::new(
            "crds",
            Outcome::Warning,
            format!(
                "{name} ({}) has no status.endpointSliceObjects in its schema: the API server drops what Strait writes there",
                labelled(release)
            ),
        )
        .hint(upgrade, DOCS_CRDS),
        Some(Some(release)) if release == MCS_RELEASE => Check::new(
            "crds",
            Outcome::Ok,
            format!("{name} is mcs-api {release}"),
        ),
        Some(release) if slice_objects == Some(true) => Check::new(
            "crds",
            Outcome::Ok,
            format!(
                "{name} serves status.endpointSliceObjects ({})",
                labelled(release)
            ),
        ),
        Some(release) => Check::new(
            "crds",
            Outcome::Warning,
            format!(
                "{name} is mcs-api {}, not {MCS_RELEASE}: ServiceImport status.endpointSliceObjects is dropped",
                release.unwrap_or("before v0.4.0 (no release label)")
            ),
        )
        .hint(upgrade, DOCS_CRDS),
    }
}

/// The cluster's id, cluster set and network, as its ClusterProperties say.
pub fn properties_check(
    id: Option<&str>,
    clusterset: Option<&str>,
    network: Option<(&str, &str)>,
) -> Vec<Check> {
    let missing = |what: &str| {
        Check::new(
            "cluster",
            Outcome::Failed,
            format!("no ClusterProperty {what}"),
        )
        .hint(
            "apply this cluster's ClusterProperties (deploy/examples/clusterproperties.yaml)",
            DOCS_PROPERTIES,
        )
    };
    let mut checks = Vec::new();
    match id {
        Some(id) => match crate::model::ClusterId::new(id) {
            Ok(_) => checks.push(Check::new(
                "cluster",
                Outcome::Ok,
                format!("the cluster id is {id}"),
            )),
            Err(e) => checks.push(
                Check::new(
                    "cluster",
                    Outcome::Failed,
                    format!("the cluster id {id:?}: {e}"),
                )
                .hint("a cluster id is an RFC 1123 DNS subdomain", DOCS_PROPERTIES),
            ),
        },
        None => checks.push(missing("cluster.clusterset.k8s.io (the cluster id)")),
    }
    match clusterset {
        Some(set) => checks.push(Check::new(
            "cluster",
            Outcome::Ok,
            format!("the cluster set is {set}"),
        )),
        None => checks.push(missing("clusterset.k8s.io (the cluster set)")),
    }
    match network {
        Some((property, value)) => checks.push(Check::new(
            "cluster",
            Outcome::Ok,
            format!("the network is {value} ({property})"),
        )),
        None => checks.push(missing("naming the network (networkProperty)")),
    }
    checks
}

/// What installing Strait creates (deploy/ and the Helm chart), as
/// `(verb, API group, resource, namespace)`: what `--pre` asks the API
/// server whether the caller may do.
pub const INSTALL_RIGHTS: &[(&str, &str, &str, Option<&str>)] = &[
    ("create", "", "namespaces", None),
    ("create", "rbac.authorization.k8s.io", "clusterroles", None),
    (
        "create",
        "rbac.authorization.k8s.io",
        "clusterrolebindings",
        None,
    ),
    (
        "create",
        "admissionregistration.k8s.io",
        "validatingadmissionpolicies",
        None,
    ),
    (
        "create",
        "admissionregistration.k8s.io",
        "validatingadmissionpolicybindings",
        None,
    ),
    ("create", "apps", "deployments", Some("strait-system")),
    ("create", "", "services", Some("strait-system")),
    ("create", "", "configmaps", Some("strait-system")),
    ("create", "", "secrets", Some("strait-system")),
    ("create", "", "serviceaccounts", Some("strait-system")),
    (
        "create",
        "rbac.authorization.k8s.io",
        "roles",
        Some("strait-system"),
    ),
    (
        "create",
        "rbac.authorization.k8s.io",
        "rolebindings",
        Some("strait-system"),
    ),
    (
        "create",
        "networking.k8s.io",
        "networkpolicies",
        Some("strait-system"),
    ),
    (
        "create",
        "policy",
        "poddisruptionbudgets",
        Some("strait-system"),
    ),
];

/// The caller's rights to install, from the answers to [`INSTALL_RIGHTS`]:
/// `denied` names each refused as `resource (group) in namespace`.
pub fn rights_check(denied: &[String]) -> Check {
    if denied.is_empty() {
        Check::new(
            "access",
            Outcome::Ok,
            "you may create every object an install makes",
        )
    } else {
        Check::new(
            "access",
            Outcome::Failed,
            format!("you may not create: {}", denied.join(", ")),
        )
        .hint(
            "install as a cluster admin (kubectl auth can-i create <resource> says the same)",
            DOCS_DEPLOY,
        )
    }
}

/// Whether the cluster gives LoadBalancer Services an address: `gateway`
/// is the gateway Service's addresses once installed (`None` before);
/// `others` counts the cluster's LoadBalancer Services (with an address,
/// without one).
pub fn load_balancer_check(gateway: Option<&[String]>, others: (usize, usize)) -> Check {
    let hint = "peers reach this gateway at its Service's load-balancer address: install a LoadBalancer implementation (a cloud's, MetalLB, Cilium's), or give peers another address in the peer document (strait link export --gateway)";
    match gateway {
        Some([]) => Check::new(
            "gateway",
            Outcome::Failed,
            "the gateway Service cluster-edge has no load-balancer address: no peer can reach this gateway",
        )
        .hint(hint, DOCS_DEPLOY),
        Some(addresses) => Check::new(
            "gateway",
            Outcome::Ok,
            format!(
                "the gateway Service cluster-edge is at {}",
                addresses.join(", ")
            ),
        ),
        None => match others {
            (0, 0) => Check::new(
                "gateway",
                Outcome::Warning,
                "no Service of type LoadBalancer here yet: whether this cluster gives one an address shows once the gateway's asks",
            )
            .hint(hint, DOCS_DEPLOY),
            (0, waiting) => Check::new(
                "gateway",
                Outcome::Warning,
                format!("{waiting} Service(s) of type LoadBalancer and none has an address: this cluster may have no LoadBalancer implementation"),
            )
            .hint(hint, DOCS_DEPLOY),
            (addressed, _) => Check::new(
                "gateway",
                Outcome::Ok,
                format!("a LoadBalancer implementation answers: {addressed} Service(s) of type LoadBalancer have an address"),
            ),
        },
    }
}

/// The `forward` targets of the Corefile's `clusterset.local` server
/// block (each address without a port); `None` when there is no such
/// block.
pub fn clusterset_forwards(corefile: &str) -> Option<Vec<String>> {
    let mut depth = 0usize;
    let mut in_block = false;
    let mut found = None::<Vec<String>>;
    for line in corefile.lines() {
        let line = line.split('#').next().unwrap_or_default().trim();
        if line.is_empty() {
            continue;
        }
        if depth == 0 && line.ends_with('{') {
            let zones = line.trim_end_matches('{');
            in_block = zones.split_whitespace().any(|zone| {
                let zone = zone.trim_start_matches("dns://");
                let zone = zone.split(':').next().unwrap_or_default();
                zone.trim_end_matches('.') == "clusterset.local"
            });
            if in_block {
                found.get_or_insert_with(Vec::new);
            }
        } else if in_block && depth == 1 {
            let mut words = line.trim_end_matches('{').split_whitespace();
            if words.next() == Some("forward")
                && let Some(targets) = found.as_mut()
            {
                for target in words.skip(1) {
                    let target = target.trim_start_matches("dns://");
                    let address = match target.rsplit_once(':') {
                        Some((host, port)) if port.chars().all(|c| c.is_ascii_digit()) => host,
                        _ => target,
                    };
                    targets.push(address.trim_matches(['[', ']']).to_owned());
                }
            }
        }
        depth += line.matches('{').count();
        depth = depth.saturating_sub(line.matches('}').count());
        if depth == 0 {
            in_block = false;
        }
    }
    found
}

/// CoreDNS's Corefile against the gateway's DNS Service (`dns_ip`: its
/// ClusterIP, once Strait is installed).
pub fn coredns_check(corefile: Option<&str>, dns_ip: Option<&str>) -> Check {
    let Some(corefile) = corefile else {
        return Check::new(
            "dns",
            Outcome::Warning,
            "no ConfigMap kube-system/coredns: clusterset.local names are not checked",
        )
        .hint(
            "where another DNS server serves the cluster, send the clusterset.local zone to cluster-edge-dns",
            DOCS_DNS,
        );
    };
    let stock_multicluster = corefile.lines().any(|line| {
        let mut words = line.split_whitespace();
        words.next() == Some("multicluster")
            && words.any(|zone| zone.trim_end_matches('.') == "clusterset.local")
    });
    match (clusterset_forwards(corefile), dns_ip) {
        (None, _) if stock_multicluster => Check::new(
            "dns",
            Outcome::Ok,
            "CoreDNS answers clusterset.local itself (the kubernetes plugin's multicluster option, from Strait's ServiceImports)",
        ),
        (None, _) => Check::new(
            "dns",
            Outcome::Warning,
            "CoreDNS has no clusterset.local server block: pods cannot resolve clusterset.local names",
        )
        .hint(
            "add deploy/examples/coredns/clusterset.server's block, forwarding to cluster-edge-dns's ClusterIP",
            DOCS_DNS,
        ),
        (Some(targets), None) => Check::new(
            "dns",
            Outcome::Ok,
            format!(
                "CoreDNS forwards clusterset.local to {}",
                targets.join(", ")
            ),
        ),
        (Some(targets), Some(ip)) if targets.iter().any(|t| t == ip) => Check::new(
            "dns",
            Outcome::Ok,
            format!("CoreDNS forwards clusterset.local to cluster-edge-dns ({ip})"),
        ),
        (Some(targets), Some(ip)) => Check::new(
            "dns",
            Outcome::Failed,
            format!(
                "CoreDNS forwards clusterset.local to {}, but cluster-edge-dns is {ip}: every clusterset.local name fails",
                if targets.is_empty() { "nothing".to_owned() } else { targets.join(", ") }
            ),
        )
        .hint(
            format!("point the block's forward at {ip} (a re-created Service gets a new ClusterIP)"),
            DOCS_DNS,
        ),
    }
}

/// The gateway Deployment's replicas.
pub fn deployment_check(wanted: i32, available: i32) -> Check {
    if available >= wanted && wanted > 0 {
        Check::new(
            "gateway",
            Outcome::Ok,
            format!("cluster-edge has {available} of {wanted} replicas available"),
        )
    } else {
        Check::new(
            "gateway",
            if available == 0 {
                Outcome::Failed
            } else {
                Outcome::Warning
            },
            format!("cluster-edge has {available} of {wanted} replicas available"),
        )
        .hint(
            "kubectl -n strait-system describe deployment cluster-edge, and the pods' logs",
            DOCS_DEPLOY,
        )
    }
}

/// The Lease that elects the replica writing export status and imports.
pub fn lease_check(holder: Option<&str>, renewed: Option<SystemTime>, now: SystemTime) -> Check {
    let fresh = renewed
        .and_then(|at| now.duration_since(at).ok().or(Some(Duration::ZERO)))
        .is_some_and(|age| age <= LEASE_STALE);
    match holder {
        Some(holder) if fresh => Check::new(
            "gateway",
            Outcome::Ok,
            format!("{holder} holds the Lease strait-export-status and writes"),
        ),
        _ => Check::new(
            "gateway",
            Outcome::Warning,
            "no replica has renewed the Lease strait-export-status in the last minute: no export status or imports are written",
        )
        .hint(
            "the gateway's log says why (RBAC on leases, or the replicas are down)",
            DOCS_LEADER,
        ),
    }
}

/// The gateway's TLS Secret: its leaf, its expiry, and a CA naming this
/// cluster in `ca.crt` (what a peer document carries).
pub fn tls_checks(cluster: &str, tls_crt: &[u8], ca_crt: &[u8], now: SystemTime) -> Vec<Check> {
    use rustls_pki_types::CertificateDer;
    use rustls_pki_types::pem::PemObject;
    let mut checks = Vec::new();
    let fix = "issue it again (strait certs, or your cert-manager Issuer) and update Secret strait-system/cluster-edge-tls";
    let Some(Ok(leaf)) = CertificateDer::pem_slice_iter(tls_crt).next() else {
        checks.push(
            Check::new("tls", Outcome::Failed, "tls.crt holds no PEM certificate")
                .hint(fix, DOCS_CERTS),
        );
        return checks;
    };
    match crate::tls::identity_of(&leaf) {
        Ok(identity) if identity.cluster.as_str() == cluster => checks.push(Check::new(
            "tls",
            Outcome::Ok,
            format!("the gateway's certificate is {}", identity.uri()),
        )),
        Ok(identity) => checks.push(
            Check::new(
                "tls",
                Outcome::Failed,
                format!(
                    "the gateway's certificate is {}, not this cluster's ({cluster}): peers refuse it",
                    identity.uri()
                ),
            )
            .hint(fix, DOCS_CERTS),
        ),
        Err(e) => checks.push(
            Check::new("tls", Outcome::Failed, format!("tls.crt: {e}")).hint(fix, DOCS_CERTS),
        ),
    }
    if let Ok(expires) = crate::tls::certificate_not_after(&leaf) {
        let at = humantime::format_rfc3339_seconds(expires);
        match expires.duration_since(now) {
            Err(_) => checks.push(
                Check::new(
                    "tls",
                    Outcome::Failed,
                    format!("the certificate expired at {at}"),
                )
                .hint(fix, DOCS_CERTS),
            ),
            Ok(left) if left < EXPIRY_WARNING => checks.push(
                Check::new(
                    "tls",
                    Outcome::Warning,
                    format!("the certificate expires at {at}, within a week"),
                )
                .hint(fix, DOCS_CERTS),
            ),
            Ok(_) => checks.push(Check::new(
                "tls",
                Outcome::Ok,
                format!("the certificate is valid until {at}"),
            )),
        }
    }
    // The same pick `strait link export` makes for a peer document.
    checks.push(match super::peer::own_ca(ca_crt, cluster, "ca.crt") {
        Ok(_) => Check::new(
            "tls",
            Outcome::Ok,
            format!("ca.crt holds the CA naming {cluster}"),
        ),
        Err(refused) => Check::new(
            "tls",
            Outcome::Warning,
            format!(
                "{}: `strait link` cannot hand peers this cluster's CA",
                refused.0.trim_start_matches("error: ")
            ),
        )
        .hint(
            "strait certs issues one CA per cluster; or give strait link export --ca FILE",
            DOCS_CERTS,
        ),
    });
    checks
}

/// The report as text, by group in order of appearance.
pub fn render(checks: &[Check]) -> String {
    let mut text = String::new();
    let mut group = "";
    for check in checks {
        if check.group != group {
            group = check.group;
            let _ = writeln!(text, "{group}");
        }
        let _ = writeln!(text, "  {} {}", check.outcome.mark(), check.message);
        if let Some(hint) = &check.hint {
            let _ = writeln!(
                text,
                "      {hint}{}",
                check
                    .docs
                    .map(|d| format!(" (see {d})"))
                    .unwrap_or_default()
            );
        }
    }
    let failed = checks
        .iter()
        .filter(|c| c.outcome == Outcome::Failed)
        .count();
    let warned = checks
        .iter()
        .filter(|c| c.outcome == Outcome::Warning)
        .count();
    let _ = writeln!(
        text,
        "{} checks: {} failed, {} warnings",
        checks.len(),
        failed,
        warned
    );
    text
}

#[cfg(test)]
#[path = "installation_tests.rs"]
mod tests;
