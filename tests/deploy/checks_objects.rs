//! Every manifest parses, the two kustomizations apply them all (the CRDs
//! apart from the rest), and the namespaced ones live in the gateway's
//! namespace.

use std::collections::BTreeSet;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::gateway::gateway;
use crate::manifests::{CRD_FILES, CRDS_DIR, kustomization, manifests};

#[test]
fn every_manifest_parses_into_its_type() {
    let m = manifests();
    assert!(!m.files.is_empty(), "deploy/ holds no manifests");
    let count = |what: &str, n: usize| assert!(n > 0, "deploy/ defines no {what}");
    count("Namespace", m.namespaces.len());
    count("ServiceAccount", m.service_accounts.len());
    count("ClusterRole", m.cluster_roles.len());
    count("ClusterRoleBinding", m.cluster_role_bindings.len());
    count("Role", m.roles.len());
    count("RoleBinding", m.role_bindings.len());
    count("ConfigMap", m.config_maps.len());
    count("Service", m.services.len());
    count("PodDisruptionBudget", m.pdbs.len());
    assert_eq!(
        m.crds.len(),
        CRD_FILES.len(),
        "deploy/{CRDS_DIR} should define three CRDs"
    );
    gateway();
}

#[test]
fn kustomization_lists_every_manifest_but_the_crds() {
    let kustomization = kustomization("");
    let shown = &kustomization.shown;
    let listed = &kustomization.resources;
    let crds: Vec<_> = listed
        .iter()
        .filter(|r| r.starts_with(CRDS_DIR) || format!("{r}/") == CRDS_DIR)
        .collect();
    assert!(
        crds.is_empty(),
        "{shown}: resources name {crds:?}; the CRDs are applied once, on their own, with `kubectl apply -k deploy/{CRDS_DIR}`, so that `kubectl delete -k deploy/` never deletes them"
    );
    let files: BTreeSet<String> = manifests()
        .files
        .iter()
        .filter(|f| !f.starts_with(CRDS_DIR))
        .cloned()
        .collect();
    let missing: Vec<_> = files.difference(listed).collect();
    let absent: Vec<_> = listed.difference(&files).collect();
    assert!(
        missing.is_empty(),
        "{shown}: resources leave out {missing:?}"
    );
    assert!(
        absent.is_empty(),
        "{shown}: resources name files that are not manifests in deploy/: {absent:?}"
    );
}

#[test]
fn crds_kustomization_lists_exactly_the_crds() {
    let kustomization = kustomization(CRDS_DIR);
    let shown = &kustomization.shown;
    let expected: BTreeSet<String> = CRD_FILES.map(str::to_owned).into();
    assert_eq!(
        kustomization.resources, expected,
        "{shown}: resources should be exactly the three CRD files"
    );
    let held: BTreeSet<String> = manifests()
        .files
        .iter()
        .filter_map(|f| f.strip_prefix(CRDS_DIR))
        .map(str::to_owned)
        .collect();
    assert_eq!(
        held, expected,
        "deploy/{CRDS_DIR} should hold the three CRD files and nothing else"
    );
    // Anything else (a namespace, labels, patches) would change upstream's
    // definitions, which other implementations install unchanged.
    let keys: BTreeSet<&str> = kustomization
        .value
        .as_object()
        .unwrap_or_else(|| panic!("{shown}: a mapping"))
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys,
        BTreeSet::from(["apiVersion", "kind", "resources"]),
        "{shown}: only resources, so the CRDs are applied as upstream wrote them"
    );
    for crd in &manifests().crds {
        assert!(
            crd.origin.starts_with(&format!("deploy/{CRDS_DIR}")),
            "{}: CRDs belong in deploy/{CRDS_DIR}, outside deploy/kustomization.yaml",
            crd.origin
        );
    }
}

#[test]
fn namespaced_objects_live_in_the_gateway_namespace() {
    let m = manifests();
    let gateway = gateway();
    let namespace = gateway.namespace;
    assert!(
        m.namespaces
            .iter()
            .any(|n| n.object.metadata.name.as_deref() == Some(namespace)),
        "{}: its namespace {namespace} is not created by a Namespace in deploy/",
        gateway.origin()
    );
    let mut metas: Vec<(&str, &ObjectMeta)> = Vec::new();
    metas.extend(
        m.service_accounts
            .iter()
            .map(|f| (f.origin.as_str(), &f.object.metadata)),
    );
    metas.extend(
        m.roles
            .iter()
            .map(|f| (f.origin.as_str(), &f.object.metadata)),
    );
    metas.extend(
        m.role_bindings
            .iter()
            .map(|f| (f.origin.as_str(), &f.object.metadata)),
    );
    metas.extend(
        m.config_maps
            .iter()
            .map(|f| (f.origin.as_str(), &f.object.metadata)),
    );
    metas.extend(
        m.services
            .iter()
            .map(|f| (f.origin.as_str(), &f.object.metadata)),
    );
    metas.extend(
        m.pdbs
            .iter()
            .map(|f| (f.origin.as_str(), &f.object.metadata)),
    );
    for (origin, meta) in metas {
        assert_eq!(
            meta.namespace.as_deref(),
            Some(namespace),
            "{origin}: should be in the gateway's namespace {namespace}"
        );
    }
}
