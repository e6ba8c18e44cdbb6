//! Every manifest parses, the two kustomizations apply them all (the CRDs
//! apart from the rest), the namespaced ones live in the gateway's
//! namespace, and the gateway image is set in one place, the
//! kustomization's `images:`.

use std::collections::BTreeSet;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::Value;

use crate::gateway::gateway;
use crate::manifests::{
    CRD_FILES, CRDS_DIR, deploy_dir, documents, kustomization, manifests, relative, string_at,
    yaml_files,
};

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
    count("NetworkPolicy", m.network_policies.len());
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
    // The Role that reads remote-cluster Secrets, and its binding, live in
    // their namespace: the gateway reads no Secret of its own namespace.
    let remotes = crate::checks_rbac::remote_secret_namespace(&gateway);
    let apart = |meta: &ObjectMeta| meta.namespace.as_deref() == Some(remotes.as_str());
    let mut metas: Vec<(&str, &ObjectMeta)> = Vec::new();
    metas.extend(
        m.service_accounts
            .iter()
            .map(|f| (f.origin.as_str(), &f.object.metadata)),
    );
    metas.extend(
        m.roles
            .iter()
            .filter(|f| !apart(&f.object.metadata))
            .map(|f| (f.origin.as_str(), &f.object.metadata)),
    );
    metas.extend(
        m.role_bindings
            .iter()
            .filter(|f| !apart(&f.object.metadata))
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
    metas.extend(
        m.network_policies
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

/// An image reference read from a string: (repository, tag, digest).
/// `None` for strings that cannot be one (empty, or holding whitespace).
fn image_reference(text: &str) -> Option<(&str, Option<&str>, Option<&str>)> {
    if text.is_empty() || text.contains(char::is_whitespace) {
        return None;
    }
    let (named, digest) = match text.split_once('@') {
        Some((named, digest)) => (named, Some(digest)),
        None => (text, None),
    };
    // A tag follows the last '/' (a registry's ":port" comes before it).
    let last = named.rfind('/').map_or(0, |slash| slash + 1);
    match named[last..].split_once(':') {
        Some((_, tag)) => Some((&named[..named.len() - tag.len() - 1], Some(tag), digest)),
        None => Some((named, None, digest)),
    }
}

/// Every string value of a document, with its path ("spec.template...").
fn strings<'a>(value: &'a Value, path: &str, out: &mut Vec<(String, &'a str)>) {
    match value {
        Value::String(text) => out.push((path.to_owned(), text)),
        Value::Array(items) => {
            for (index, item) in items.iter().enumerate() {
                strings(item, &format!("{path}[{index}]"), out);
            }
        }
        Value::Object(map) => {
            for (key, item) in map {
                let path = if path.is_empty() {
                    key.clone()
                } else {
                    format!("{path}.{key}")
                };
                strings(item, &path, out);
            }
        }
        _ => {}
    }
}

#[test]
fn the_image_is_set_in_the_kustomization_only() {
    let kustomization = kustomization("");
    let shown = &kustomization.shown;
    let images = kustomization
        .value
        .get("images")
        .and_then(Value::as_array)
        .unwrap_or_else(|| panic!("{shown}: no images list; it is where the gateway image is set"));
    assert_eq!(
        images.len(),
        1,
        "{shown}: images should hold one entry, the gateway's"
    );
    let image = &images[0];
    let keys: BTreeSet<&str> = image
        .as_object()
        .unwrap_or_else(|| panic!("{shown}: images[0] is a mapping"))
        .keys()
        .map(String::as_str)
        .collect();
    let known = BTreeSet::from(["name", "newName", "newTag", "digest"]);
    assert!(
        keys.is_subset(&known),
        "{shown}: images[0] has {keys:?}; kustomize reads {known:?}"
    );
    for key in ["name", "newName", "newTag", "digest"] {
        assert!(
            image.get(key).is_none_or(Value::is_string),
            "{shown}: images[0].{key} is not a string (quote it: YAML reads 1.0 as a number)"
        );
    }
    let name =
        string_at(image, &["name"]).unwrap_or_else(|| panic!("{shown}: images[0] has no name"));
    assert_eq!(
        image_reference(name),
        Some((name, None, None)),
        "{shown}: images[0].name {name:?} is the bare placeholder the Deployment names, without a tag or digest"
    );
    let new_name = string_at(image, &["newName"]).unwrap_or_else(|| {
        panic!("{shown}: images[0] has no newName, the registry and repository to pull from")
    });
    assert_eq!(
        image_reference(new_name),
        Some((new_name, None, None)),
        "{shown}: images[0].newName {new_name:?} names a repository only; the tag goes in newTag, a digest in digest"
    );
    let tag = string_at(image, &["newTag"]);
    let digest = string_at(image, &["digest"]);
    assert!(
        tag.is_some() || digest.is_some(),
        "{shown}: images[0] sets neither newTag nor digest; the image would be pulled as :latest"
    );
    if let Some(tag) = tag {
        // The Dockerfile's and docs/kubernetes.md's build commands tag the
        // image with this version.
        assert_eq!(
            tag,
            env!("CARGO_PKG_VERSION"),
            "{shown}: images[0].newTag should be this release's version (Cargo.toml)"
        );
    }
    if let Some(digest) = digest {
        let hex = digest.strip_prefix("sha256:").unwrap_or_default();
        assert!(
            hex.len() == 64
                && hex
                    .bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)),
            "{shown}: images[0].digest {digest:?} should be sha256: and 64 lowercase hex digits"
        );
    }

    let gateway = gateway();
    assert_eq!(
        gateway.container.image.as_deref(),
        Some(name),
        "{}: container {} should name the image {name:?}, which {shown}'s images entry replaces (its tag or digest is set there only)",
        gateway.origin(),
        gateway.container.name
    );

    // No other file under deploy/ (examples and observability included)
    // names a tag or digest of the gateway image: one would drift from the
    // kustomization's.
    let short = name.rsplit('/').next().unwrap_or(name);
    let mut paths = Vec::new();
    yaml_files(&deploy_dir(), &mut paths);
    let mut read = 0;
    for path in &paths {
        let file = relative(path);
        if file == "kustomization.yaml" {
            continue;
        }
        let shown = format!("deploy/{file}");
        let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{shown}: {e}"));
        for (index, value) in documents(&shown, &text) {
            read += 1;
            let mut found = Vec::new();
            strings(&value, "", &mut found);
            for (at, text) in found {
                let Some((repository, tag, digest)) = image_reference(text) else {
                    continue;
                };
                let last = repository.rsplit('/').next().unwrap_or(repository);
                let gateway_image = repository == name || repository == new_name || last == short;
                assert!(
                    !gateway_image || (tag.is_none() && digest.is_none()),
                    "{shown}, document {index}: {at} is {text:?}; the gateway image's tag and digest are set only in deploy/kustomization.yaml's images"
                );
            }
        }
    }
    assert!(read > 0, "deploy/ holds no YAML documents");
}
