//! Reading `deploy/`: every manifest file, each document parsed into its
//! k8s-openapi type, with no field the type does not know.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Service, ServiceAccount};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, JSONSchemaProps, JSONSchemaPropsOrArray,
};
use serde::de::DeserializeOwned;
use serde_json::Value;

/// The manifest directory.
pub(crate) fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy")
}

/// The CRDs' directory under `deploy/`: a kustomization of its own, applied
/// once and apart from `deploy/kustomization.yaml`.
pub(crate) const CRDS_DIR: &str = "crds/";

/// The CRD files of [`CRDS_DIR`], unchanged copies of upstream's.
pub(crate) const CRD_FILES: [&str; 3] = [
    "clusterproperties.yaml",
    "serviceexports.yaml",
    "serviceimports.yaml",
];

/// A kustomization under `deploy/`.
pub(crate) struct Kustomization {
    /// "deploy/<dir>kustomization.yaml", for messages.
    pub(crate) shown: String,
    pub(crate) value: Value,
    /// Its `resources`, relative to its directory, without a leading "./".
    pub(crate) resources: BTreeSet<String>,
}

/// Reads `deploy/<dir>kustomization.yaml`; `dir` is "" or ends in '/'.
pub(crate) fn kustomization(dir: &str) -> Kustomization {
    let shown = format!("deploy/{dir}kustomization.yaml");
    let path = deploy_dir().join(dir).join("kustomization.yaml");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{shown}: {e}"));
    let value: Value = strait::discovery::yaml::parse_single(&text)
        .unwrap_or_else(|e| panic!("{shown}: not YAML: {e}"));
    assert_eq!(
        string_at(&value, &["kind"]),
        Some("Kustomization"),
        "{shown}: kind"
    );
    let resources = value
        .get("resources")
        .and_then(Value::as_array)
        .unwrap_or_else(|| panic!("{shown}: resources is a list"))
        .iter()
        .map(|r| {
            r.as_str()
                .unwrap_or_else(|| panic!("{shown}: resources are paths"))
                .trim_start_matches("./")
                .to_owned()
        })
        .collect();
    Kustomization {
        shown,
        value,
        resources,
    }
}

/// One parsed object and where it came from: "deploy/x.yaml, document N: Kind ns/name".
pub(crate) struct Found<T> {
    pub(crate) origin: String,
    pub(crate) object: T,
}

#[derive(Default)]
pub(crate) struct Manifests {
    /// Every manifest file read, relative to `deploy/`.
    pub(crate) files: BTreeSet<String>,
    pub(crate) namespaces: Vec<Found<Namespace>>,
    pub(crate) service_accounts: Vec<Found<ServiceAccount>>,
    pub(crate) cluster_roles: Vec<Found<ClusterRole>>,
    pub(crate) cluster_role_bindings: Vec<Found<ClusterRoleBinding>>,
    pub(crate) roles: Vec<Found<Role>>,
    pub(crate) role_bindings: Vec<Found<RoleBinding>>,
    pub(crate) config_maps: Vec<Found<ConfigMap>>,
    pub(crate) deployments: Vec<Found<Deployment>>,
    pub(crate) services: Vec<Found<Service>>,
    pub(crate) pdbs: Vec<Found<PodDisruptionBudget>>,
    pub(crate) network_policies: Vec<Found<NetworkPolicy>>,
    pub(crate) crds: Vec<Found<CustomResourceDefinition>>,
    pub(crate) admission_policies: Vec<Found<ValidatingAdmissionPolicy>>,
    pub(crate) admission_bindings: Vec<Found<ValidatingAdmissionPolicyBinding>>,
}

/// Files under `deploy/` that are not applied as manifests, and why.
fn skipped(relative: &str) -> Option<&'static str> {
    if relative == "kustomization.yaml" || relative == format!("{CRDS_DIR}kustomization.yaml") {
        Some("the kustomize files list the manifests; they are checked against them")
    } else if relative.starts_with("examples/") {
        Some("examples are not applied by kustomize; they are checked on their own")
    } else if relative.starts_with("observability/") {
        Some(
            "the monitoring objects need the Prometheus Operator's CRDs and are applied apart; tests/monitoring.rs checks them",
        )
    } else {
        None
    }
}

/// The Helm chart under `deploy/`: Go templates, not manifests, and its
/// `files/` are symlinks to `crds/` and `observability/` (read there).
pub(crate) const HELM_DIR: &str = "helm";

/// The YAML files under `dir`, sorted, `deploy/`[`HELM_DIR`] left out.
pub(crate) fn yaml_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .map(|entry| entry.expect("directory entry").path())
        .collect();
    entries.sort();
    let helm = deploy_dir().join(HELM_DIR);
    for path in entries {
        if path == helm {
            continue;
        }
        if path.is_dir() {
            yaml_files(&path, out);
        } else if matches!(
            path.extension().and_then(|e| e.to_str()),
            Some("yaml" | "yml")
        ) {
            out.push(path);
        }
    }
}

pub(crate) fn relative(path: &Path) -> String {
    path.strip_prefix(deploy_dir())
        .expect("under deploy/")
        .to_string_lossy()
        .replace('\\', "/")
}

/// The non-empty documents of a multi-document YAML file, numbered from 1.
pub(crate) fn documents(file: &str, text: &str) -> Vec<(usize, Value)> {
    strait::discovery::yaml::documents(text)
        .iter()
        .map(|document| {
            let value = strait::discovery::yaml::parse_document(document)
                .unwrap_or_else(|e| panic!("{file}, document {}: not YAML: {e}", document.number));
            (document.number, value)
        })
        .filter(|(_, value)| !value.is_null())
        .collect()
}

pub(crate) fn string_at<'a>(value: &'a Value, path: &[&str]) -> Option<&'a str> {
    path.iter()
        .try_fold(value, |value, key| value.get(*key))
        .and_then(Value::as_str)
}

/// The schema of the property at `path` (object properties, one per key) in a CRD schema.
pub(crate) fn schema_property<'a>(
    schema: &'a JSONSchemaProps,
    path: &[&str],
) -> Option<&'a JSONSchemaProps> {
    path.iter()
        .try_fold(schema, |schema, key| schema.properties.as_ref()?.get(*key))
}

/// The schema of an array's items, when it names one.
pub(crate) fn schema_items(schema: &JSONSchemaProps) -> Option<&JSONSchemaProps> {
    match schema.items.as_ref()? {
        JSONSchemaPropsOrArray::Schema(items) => Some(items),
        JSONSchemaPropsOrArray::Schemas(_) => None,
    }
}

/// Parses `value` as `T` and fails when the typed object, written back,
/// lost a field of the document: a misspelt or misplaced field would be
/// silently ignored by Kubernetes' own decoding of unknown fields.
fn typed<T: DeserializeOwned + serde::Serialize>(origin: &str, value: Value) -> T {
    let original = value.clone();
    let object: T =
        serde_json::from_value(value).unwrap_or_else(|e| panic!("{origin}: does not parse: {e}"));
    let written = serde_json::to_value(&object).expect("k8s-openapi objects serialize");
    let mut lost = Vec::new();
    lost_fields(&original, &written, String::new(), &mut lost);
    assert!(
        lost.is_empty(),
        "{origin}: fields unknown to the type or changed by it: {}",
        lost.join(", ")
    );
    object
}

fn lost_fields(
    original: &serde_json::Value,
    written: &serde_json::Value,
    path: String,
    lost: &mut Vec<String>,
) {
    use serde_json::Value as J;
    match (original, written) {
        (J::Object(original), J::Object(written)) => {
            for (key, value) in original {
                let path = if path.is_empty() {
                    key.clone()
                } else {
                    format!("{path}.{key}")
                };
                match written.get(key) {
                    Some(back) => lost_fields(value, back, path, lost),
                    None => lost.push(path),
                }
            }
        }
        (J::Array(original), J::Array(written)) if original.len() == written.len() => {
            for (index, (value, back)) in original.iter().zip(written).enumerate() {
                lost_fields(value, back, format!("{path}[{index}]"), lost);
            }
        }
        (J::Number(a), J::Number(b)) if a.as_f64() == b.as_f64() => {}
        (a, b) if a == b => {}
        _ => lost.push(path),
    }
}

fn load() -> Manifests {
    let mut paths = Vec::new();
    yaml_files(&deploy_dir(), &mut paths);
    let mut manifests = Manifests::default();
    for path in paths {
        let file = relative(&path);
        if skipped(&file).is_some() {
            continue;
        }
        let shown = format!("deploy/{file}");
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
        let documents = documents(&shown, &text);
        assert!(!documents.is_empty(), "{shown}: holds no document");
        manifests.files.insert(file.clone());
        for (index, value) in documents {
            let api_version = string_at(&value, &["apiVersion"])
                .unwrap_or_else(|| panic!("{shown}, document {index}: no apiVersion"))
                .to_owned();
            let kind = string_at(&value, &["kind"])
                .unwrap_or_else(|| panic!("{shown}, document {index}: no kind"))
                .to_owned();
            let name = string_at(&value, &["metadata", "name"]).unwrap_or("(unnamed)");
            let origin = match string_at(&value, &["metadata", "namespace"]) {
                Some(namespace) => format!("{shown}, document {index}: {kind} {namespace}/{name}"),
                None => format!("{shown}, document {index}: {kind} {name}"),
            };
            macro_rules! add {
                ($list:ident) => {
                    manifests.$list.push(Found {
                        object: typed(&origin, value),
                        origin,
                    })
                };
            }
            match (api_version.as_str(), kind.as_str()) {
                ("v1", "Namespace") => add!(namespaces),
                ("v1", "ServiceAccount") => add!(service_accounts),
                ("v1", "ConfigMap") => add!(config_maps),
                ("v1", "Service") => add!(services),
                ("apps/v1", "Deployment") => add!(deployments),
                ("rbac.authorization.k8s.io/v1", "ClusterRole") => add!(cluster_roles),
                ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding") => {
                    add!(cluster_role_bindings)
                }
                ("rbac.authorization.k8s.io/v1", "Role") => add!(roles),
                ("rbac.authorization.k8s.io/v1", "RoleBinding") => add!(role_bindings),
                ("policy/v1", "PodDisruptionBudget") => add!(pdbs),
                ("networking.k8s.io/v1", "NetworkPolicy") => add!(network_policies),
                ("apiextensions.k8s.io/v1", "CustomResourceDefinition") => add!(crds),
                ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy") => {
                    add!(admission_policies)
                }
                ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicyBinding") => {
                    add!(admission_bindings)
                }
                _ => panic!(
                    "{origin}: unknown kind {api_version}/{kind}; teach tests/deploy/manifests.rs to parse it"
                ),
            }
        }
    }
    manifests
}

pub(crate) fn manifests() -> &'static Manifests {
    static MANIFESTS: OnceLock<Manifests> = OnceLock::new();
    MANIFESTS.get_or_init(load)
}
