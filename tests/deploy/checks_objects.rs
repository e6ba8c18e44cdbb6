//! Every manifest parses, kustomize applies them all, and the namespaced
//! ones live in the gateway's namespace.

use std::collections::BTreeSet;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::Value;

use crate::gateway::gateway;
use crate::manifests::{deploy_dir, manifests, string_at};

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
    assert_eq!(m.crds.len(), 3, "deploy/ should define three CRDs");
    gateway();
}

#[test]
fn kustomization_lists_every_manifest() {
    let path = deploy_dir().join("kustomization.yaml");
    let text = std::fs::read_to_string(&path).expect("deploy/kustomization.yaml exists");
    let value: Value =
        strait::discovery::yaml::parse_single(&text).expect("deploy/kustomization.yaml is YAML");
    assert_eq!(
        string_at(&value, &["kind"]),
        Some("Kustomization"),
        "deploy/kustomization.yaml: kind"
    );
    let listed: BTreeSet<String> = value
        .get("resources")
        .and_then(Value::as_array)
        .expect("deploy/kustomization.yaml: resources is a list")
        .iter()
        .map(|r| {
            r.as_str()
                .expect("deploy/kustomization.yaml: resources are paths")
                .trim_start_matches("./")
                .to_owned()
        })
        .collect();
    let files = &manifests().files;
    let missing: Vec<_> = files.difference(&listed).collect();
    let absent: Vec<_> = listed.difference(files).collect();
    assert!(
        missing.is_empty(),
        "deploy/kustomization.yaml: resources leave out {missing:?}"
    );
    assert!(
        absent.is_empty(),
        "deploy/kustomization.yaml: resources name files that are not manifests in deploy/: {absent:?}"
    );
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
