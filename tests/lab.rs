//! Strait in the cluster lab (tests/lab/): three real control planes
//! (etcd, kube-apiserver with RBAC, kube-controller-manager), real
//! kube-proxy in each node's namespace and real CoreDNS, c1 and c2 on net-a
//! and c3 on net-b with overlapping pod CIDRs. Strait is installed as a
//! user installs it (`kubectl apply -k deploy/crds/` and `deploy/`,
//! `strait certs`, `strait link` between every pair: by feed, each node
//! and its pods walled off from the other clusters' API servers) and its
//! gateway pods
//! run `strait run --kube` with their ServiceAccount's token, so the API
//! server enforces exactly `deploy/rbac.yaml`.
//!
//! One test starts the lab once and runs every scenario against it, each
//! in a namespace of its own, then stops the lab; a failed scenario does
//! not stop the others, and the test fails naming each. Needs root and the
//! tools of tests/lab/README.md; without them it prints `SKIPPED: …`, and
//! under `CI=true` it fails. `STRAIT_KEEP_LAB=1` leaves the lab running
//! afterwards (`tests/lab/lab.sh down` stops it).

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on what they set up

#[path = "lab/mod.rs"]
mod lab;

use std::panic::{AssertUnwindSafe, catch_unwind};

use lab::Lab;

type Scenario = fn(&Lab);

#[test]
fn strait_in_a_real_cluster_set() {
    let Some(lab) = Lab::start() else {
        return;
    };
    let scenarios: &[(&str, Scenario)] = &[
        (
            "a pod reaches a service of another network by its clusterset.local name",
            lab::transparent::across_networks,
        ),
        (
            "a port goes only to the clusters whose Service declares it, both ways",
            lab::transparent::per_port_rule,
        ),
        (
            "a headless service's pods are named and reached across networks",
            lab::transparent::headless_across_networks,
        ),
        (
            "stock CoreDNS's multicluster option answers from Strait's ServiceImports and MCS EndpointSlices",
            lab::coredns::multicluster_answers_from_mcs_objects,
        ),
        (
            "strait check names what is wrong (a stale CoreDNS target) and passes when mended",
            lab::check::check_names_what_is_wrong_and_passes_when_mended,
        ),
        (
            "strait check judges the links through the gateway's view and fails when a peer's gateway stops or its network map differs",
            lab::check::check_judges_the_links_and_fails_when_a_peer_breaks,
        ),
        (
            "an export's Ready message names the clusters that import it and those that cannot (no namespace)",
            lab::check::export_status_names_the_clusters_that_cannot_import,
        ),
        (
            "a tenant's exported annotations claim no import port",
            lab::tenant::a_tenants_exported_annotations_claim_no_import_port,
        ),
        (
            "connections go on when a gateway pod is deleted",
            lab::transparent::gateway_pod_deleted,
        ),
        (
            "traffic to a ClusterSetIP flows while Strait takes over from a previous MCS controller",
            lab::migrate::traffic_flows_while_strait_takes_over,
        ),
        (
            "private clusters: peer documents, no credential, no API server of another cluster reachable",
            lab::feed::private_clusters_reach_each_other_by_feed_alone,
        ),
        (
            "strait unlink and link, both ways, against the real API servers",
            lab::link::unlink_and_link_again,
        ),
        (
            "a cluster moves to an API link and back under traffic, its token rotated on the way",
            lab::feed::a_cluster_moves_to_an_api_link_and_back_under_traffic,
        ),
        // After the others, whose requests it reads; before a right is taken away.
        (
            "every right of deploy/rbac.yaml is used and none is missing",
            lab::rbac::every_right_is_used_and_none_is_missing,
        ),
        (
            "an import needs create on ServiceImports, not only patch",
            lab::rbac::an_import_needs_create,
        ),
        (
            "the gateway reads no Secret where a CA key lives",
            lab::rbac::the_gateway_reads_no_secret_where_a_ca_key_lives,
        ),
        // After the audit log's reading: its denials are refusals of the
        // gateway's user.
        (
            "the admission policy denies the gateway anything but its own objects",
            lab::rbac::the_admission_policy_denies_the_gateway_anything_but_its_own_objects,
        ),
        // Last: c2 is uninstalled and installed afresh.
        (
            "docs/kubernetes.md's uninstall, Helm install and link blocks, run as written, bring c2 back into the set",
            lab::docs::install_and_link_as_the_docs_say,
        ),
        // Then c3, installed with kustomize, likewise.
        (
            "docs/kubernetes.md's kustomize uninstall, steps 2 to 6 and link, run as written, bring c3 back into the set",
            lab::docs::install_with_kustomize_as_the_docs_say,
        ),
    ];
    // `STRAIT_LAB_SCENARIOS=TEXT` runs only the scenarios whose name
    // holds TEXT, for working on one; CI runs them all.
    let only = std::env::var("STRAIT_LAB_SCENARIOS").ok();
    let mut failed = Vec::new();
    for (name, scenario) in scenarios {
        if let Some(only) = only.as_deref().filter(|only| !name.contains(only)) {
            lab::loud(&format!(
                "lab scenario skipped (STRAIT_LAB_SCENARIOS={only}): {name}"
            ));
            continue;
        }
        lab::loud(&format!("lab scenario: {name}"));
        if catch_unwind(AssertUnwindSafe(|| scenario(&lab))).is_err() {
            failed.push(*name);
        }
    }
    lab.stop();
    assert!(failed.is_empty(), "lab scenarios failed: {failed:#?}");
}
