use std::time::{Duration, SystemTime};

use super::*;
use crate::model::ClusterId;
use crate::tls::{generate_cluster_ca, generate_leaf_valid_for};

/// The Corefile kubeadm installs with deploy/examples/coredns/'s block,
/// its address filled in.
fn corefile(dns_ip: &str) -> String {
    let patch = include_str!("../../deploy/examples/coredns/coredns-patch.yaml");
    let start = patch
        .find("Corefile: |")
        .expect("the patch holds a Corefile");
    patch[start..]
        .lines()
        .skip(1)
        .map(|line| line.strip_prefix("    ").unwrap_or(line))
        .collect::<Vec<_>>()
        .join("\n")
        .replace("CLUSTER_EDGE_DNS_IP", dns_ip)
}

#[test]
fn the_clusterset_block_is_found_with_its_forward_targets() {
    assert_eq!(
        clusterset_forwards(&corefile("10.96.0.53")),
        Some(vec!["10.96.0.53".to_owned()])
    );
    let only_root = ".:53 {\n    forward . /etc/resolv.conf\n}\n";
    assert_eq!(clusterset_forwards(only_root), None);
    let with_port = "clusterset.local. {\n  forward . 10.0.0.1:53 [fd00::1]:53\n}\n";
    assert_eq!(
        clusterset_forwards(with_port),
        Some(vec!["10.0.0.1".to_owned(), "fd00::1".to_owned()])
    );
}

#[test]
fn coredns_is_judged_against_the_dns_services_address() {
    let good = coredns_check(Some(&corefile("10.96.0.53")), Some("10.96.0.53"));
    assert_eq!(good.outcome, Outcome::Ok, "{good:?}");
    // The Service re-created with a new ClusterIP: every name fails.
    let stale = coredns_check(Some(&corefile("10.96.0.53")), Some("10.96.7.7"));
    assert_eq!(stale.outcome, Outcome::Failed, "{stale:?}");
    assert!(
        stale
            .hint
            .as_deref()
            .is_some_and(|h| h.contains("10.96.7.7"))
    );
    let none = coredns_check(
        Some(".:53 {\n    forward . /etc/resolv.conf\n}\n"),
        Some("10.96.0.53"),
    );
    assert_eq!(none.outcome, Outcome::Warning, "{none:?}");
    let stock =
        ".:53 {\n    kubernetes cluster.local {\n        multicluster clusterset.local\n    }\n}\n";
    assert_eq!(
        coredns_check(Some(stock), Some("10.96.0.53")).outcome,
        Outcome::Ok
    );
    assert_eq!(coredns_check(None, None).outcome, Outcome::Warning);
}

#[test]
fn crds_kubernetes_and_the_gateway_are_judged() {
    let name = "serviceimports.multicluster.x-k8s.io";
    let outcome = |release: Option<Option<&str>>, fields: Option<bool>| {
        crd_check(name, release, true, fields).outcome
    };
    assert_eq!(outcome(Some(Some(MCS_RELEASE)), Some(true)), Outcome::Ok);
    assert_eq!(outcome(Some(Some("v0.5.0")), Some(false)), Outcome::Warning);
    assert_eq!(outcome(Some(None), Some(false)), Outcome::Warning);
    assert_eq!(outcome(None, None), Outcome::Failed);
    // The schema decides: a v0.5.2 label on a schema without the field
    // warns, a schema with it passes whatever its label.
    let relabelled = crd_check(name, Some(Some(MCS_RELEASE)), true, Some(false));
    assert_eq!(relabelled.outcome, Outcome::Warning);
    assert_eq!(
        relabelled.message,
        "serviceimports.multicluster.x-k8s.io (labelled mcs-api v0.5.2) has no status.endpointSliceObjects in its schema: the API server drops what Strait writes there"
    );
    assert_eq!(outcome(Some(None), Some(true)), Outcome::Ok);
    // ServiceExport: the label alone.
    let exports = "serviceexports.multicluster.x-k8s.io";
    assert_eq!(
        crd_check(exports, Some(Some(MCS_RELEASE)), true, None).outcome,
        Outcome::Ok
    );
    assert_eq!(
        crd_check(exports, Some(Some("v0.5.0")), true, None).outcome,
        Outcome::Warning
    );
    assert_eq!(
        crd_check("clusterproperties.about.k8s.io", Some(None), false, None).outcome,
        Outcome::Ok
    );
    assert_eq!(version_check("1", "36").outcome, Outcome::Ok);
    assert_eq!(version_check("1", "31+").outcome, Outcome::Ok);
    assert_eq!(version_check("1", "29").outcome, Outcome::Failed);
    assert_eq!(deployment_check(2, 2).outcome, Outcome::Ok);
    assert_eq!(deployment_check(2, 1).outcome, Outcome::Warning);
    assert_eq!(deployment_check(2, 0).outcome, Outcome::Failed);
    let now = SystemTime::now();
    assert_eq!(
        lease_check(Some("pod-a"), Some(now), now).outcome,
        Outcome::Ok
    );
    let old = now - Duration::from_secs(600);
    assert_eq!(
        lease_check(Some("pod-a"), Some(old), now).outcome,
        Outcome::Warning
    );
    assert_eq!(lease_check(None, None, now).outcome, Outcome::Warning);
    let missing = properties_check(
        Some("c1"),
        None,
        Some(("network.clusterset.k8s.io", "net-a")),
    );
    let outcomes: Vec<Outcome> = missing.iter().map(|c| c.outcome).collect();
    assert_eq!(outcomes, [Outcome::Ok, Outcome::Failed, Outcome::Ok]);
    assert_eq!(
        properties_check(Some("C1!"), Some("s"), None)[0].outcome,
        Outcome::Failed
    );
}

#[test]
fn the_tls_secret_must_name_this_cluster_and_not_be_expiring() {
    let c1 = ClusterId::new("c1").expect("id");
    let ca = generate_cluster_ca("set.example", &c1).expect("CA");
    let leaf = generate_leaf_valid_for(&ca, &c1, Duration::from_secs(30 * 86_400)).expect("leaf");
    let now = SystemTime::now();
    let checks = tls_checks(
        "c1",
        leaf.cert_pem.as_bytes(),
        ca.cert_pem().as_bytes(),
        now,
    );
    assert!(
        checks.iter().all(|c| c.outcome == Outcome::Ok),
        "{checks:#?}"
    );
    let another = tls_checks(
        "c2",
        leaf.cert_pem.as_bytes(),
        ca.cert_pem().as_bytes(),
        now,
    );
    assert_eq!(another[0].outcome, Outcome::Failed, "{another:#?}");
    assert_eq!(
        another.last().map(|c| c.outcome),
        Some(Outcome::Warning),
        "no CA names c2"
    );
    let soon = now + Duration::from_secs(25 * 86_400);
    assert_eq!(
        tls_checks(
            "c1",
            leaf.cert_pem.as_bytes(),
            ca.cert_pem().as_bytes(),
            soon
        )[1]
        .outcome,
        Outcome::Warning
    );
    let later = now + Duration::from_secs(31 * 86_400);
    assert_eq!(
        tls_checks(
            "c1",
            leaf.cert_pem.as_bytes(),
            ca.cert_pem().as_bytes(),
            later
        )[1]
        .outcome,
        Outcome::Failed
    );
    assert_eq!(tls_checks("c1", b"", b"", now)[0].outcome, Outcome::Failed);
}

#[test]
fn the_report_groups_checks_and_counts_failures() {
    let checks = vec![
        version_check("1", "36"),
        coredns_check(Some(&corefile("10.96.0.53")), Some("10.96.7.7")),
    ];
    let text = render(&checks);
    assert!(text.starts_with("kubernetes\n  ✓ "), "{text}");
    assert!(text.contains("dns\n  ✗ CoreDNS forwards"), "{text}");
    assert!(text.contains("(see docs/kubernetes.md#"), "{text}");
    assert!(text.ends_with("2 checks: 1 failed, 0 warnings\n"), "{text}");
}

#[test]
fn the_rights_to_install_name_each_refused_kind() {
    assert_eq!(rights_check(&[]).outcome, Outcome::Ok);
    let refused = rights_check(&[
        "clusterroles (rbac.authorization.k8s.io)".to_owned(),
        "secrets (core) in strait-system".to_owned(),
    ]);
    assert_eq!(refused.outcome, Outcome::Failed);
    assert_eq!(
        refused.message,
        "you may not create: clusterroles (rbac.authorization.k8s.io), secrets (core) in strait-system"
    );
    // Every kind deploy/ holds is asked about.
    for resource in [
        "namespaces",
        "clusterroles",
        "clusterrolebindings",
        "validatingadmissionpolicies",
        "validatingadmissionpolicybindings",
        "deployments",
        "services",
        "configmaps",
        "serviceaccounts",
        "roles",
        "rolebindings",
        "networkpolicies",
        "poddisruptionbudgets",
    ] {
        assert!(
            INSTALL_RIGHTS.iter().any(|(_, _, r, _)| *r == resource),
            "{resource}"
        );
    }
}

#[test]
fn a_gateway_service_without_an_address_fails_and_a_cluster_giving_none_warns() {
    let addresses = ["172.31.100.11".to_owned()];
    let ok = load_balancer_check(Some(&addresses), (0, 0));
    assert_eq!(
        (ok.outcome, ok.message.as_str()),
        (
            Outcome::Ok,
            "the gateway Service cluster-edge is at 172.31.100.11"
        )
    );
    assert_eq!(
        load_balancer_check(Some(&[]), (5, 0)).outcome,
        Outcome::Failed
    );
    assert_eq!(load_balancer_check(None, (1, 2)).outcome, Outcome::Ok);
    assert_eq!(load_balancer_check(None, (0, 2)).outcome, Outcome::Warning);
    assert_eq!(load_balancer_check(None, (0, 0)).outcome, Outcome::Warning);
}
