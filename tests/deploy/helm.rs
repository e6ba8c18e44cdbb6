//! The Helm chart `deploy/helm/strait/` against `deploy/`, with the pinned
//! Helm CLI (tests/lab/build-helm.sh builds it with Go on first use):
//! `helm lint --strict` passes; with default values `helm template`
//! renders exactly the objects of `deploy/kustomization.yaml` (its
//! resources, the image as its `images:` entry sets it), field by field
//! once parsed (`gateway.yaml` as YAML, not text), but for the four labels
//! Helm adds to each object's metadata, which must be there; the optional
//! parts render `deploy/crds/` and `deploy/observability/` as they are;
//! and a missing required value is refused naming it. Without Go the tests
//! print `SKIPPED: …`; under `CI=true` they fail.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

use serde_json::Value;

use super::manifests::{deploy_dir, documents, kustomization};

/// The labels the chart adds to every object it renders, and nothing else.
const HELM_LABELS: [&str; 4] = [
    "helm.sh/chart",
    "app.kubernetes.io/managed-by",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
];

/// The Kubernetes version the chart is rendered for (the lab's).
const KUBE_VERSION: &str = "1.36.3";

fn chart() -> PathBuf {
    deploy_dir().join("helm/strait")
}

/// The pinned helm, built on first use; `None` (said loudly) without Go.
fn helm() -> Option<&'static PathBuf> {
    static HELM: OnceLock<Option<PathBuf>> = OnceLock::new();
    HELM.get_or_init(|| {
        let ci = std::env::var("CI").is_ok_and(|v| v == "true");
        if Command::new("go").arg("version").output().is_err() {
            assert!(!ci, "the Helm chart tests must run under CI=true: no Go to build helm");
            eprintln!("SKIPPED: the Helm chart tests (tests/deploy/helm.rs): no Go to build the pinned helm (tests/lab/build-helm.sh)");
            return None;
        }
        let script = deploy_dir().join("../tests/lab/build-helm.sh");
        let built = Command::new("bash")
            .arg(&script)
            .output()
            .expect("tests/lab/build-helm.sh runs");
        assert!(
            built.status.success(),
            "tests/lab/build-helm.sh failed: {}",
            String::from_utf8_lossy(&built.stderr)
        );
        let path = String::from_utf8_lossy(&built.stdout).trim().to_owned();
        Some(PathBuf::from(path))
    })
    .as_ref()
}

/// `helm template strait deploy/helm/strait` with `sets`: its stdout, or
/// its stderr as the error.
fn template(helm: &PathBuf, sets: &[&str]) -> Result<String, String> {
    let mut command = Command::new(helm);
    command.args(["template", "strait"]).arg(chart()).args([
        "--namespace",
        "strait-helm",
        "--kube-version",
        KUBE_VERSION,
    ]);
    for set in sets {
        command.args(["--set", set]);
    }
    let output = command.output().expect("helm runs");
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&output.stderr).into_owned())
    }
}

/// (kind, namespace, name) of an object.
type Key = (String, String, String);

fn key(object: &Value) -> Key {
    let at = |path: &[&str]| {
        path.iter()
            .try_fold(object, |v, k| v.get(*k))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    (
        at(&["kind"]),
        at(&["metadata", "namespace"]),
        at(&["metadata", "name"]),
    )
}

/// Parses `gateway.yaml` inside a ConfigMap, so that it compares as data.
fn with_parsed_config(mut object: Value) -> Value {
    if object["kind"] == "ConfigMap"
        && let Some(text) = object["data"]["gateway.yaml"].as_str()
    {
        let parsed = strait::discovery::yaml::parse_single(text)
            .unwrap_or_else(|e| panic!("gateway.yaml of {:?}: {e}", key(&object)));
        object["data"]["gateway.yaml"] = parsed;
    }
    object
}

/// The rendered objects by key, each with Helm's labels checked present
/// and taken off (and `labels` dropped when nothing else is left).
fn rendered(text: &str) -> BTreeMap<Key, Value> {
    let mut objects = BTreeMap::new();
    for (number, mut object) in documents("helm template", text) {
        let at = key(&object);
        let labels = object["metadata"]["labels"]
            .as_object_mut()
            .unwrap_or_else(|| panic!("document {number}, {at:?}: no labels"));
        for label in HELM_LABELS {
            assert!(
                labels.remove(label).is_some(),
                "document {number}, {at:?}: no {label} label"
            );
        }
        if labels.is_empty() {
            object["metadata"]
                .as_object_mut()
                .expect("metadata")
                .remove("labels");
        }
        let previous = objects.insert(at.clone(), with_parsed_config(object));
        assert!(previous.is_none(), "{at:?} rendered twice");
    }
    objects
}

/// What `kubectl apply -k deploy/` applies: the kustomization's resources,
/// the `strait` image replaced as its `images:` entry says.
fn kustomized() -> BTreeMap<Key, Value> {
    let kustomization = kustomization("");
    let image = &kustomization.value["images"][0];
    assert_eq!(image["name"], "strait", "{}", kustomization.shown);
    let name = image["newName"].as_str().expect("images[0].newName");
    let replaced = match (image["newTag"].as_str(), image["digest"].as_str()) {
        (Some(tag), _) => format!("{name}:{tag}"),
        (None, Some(digest)) => format!("{name}@{digest}"),
        (None, None) => name.to_owned(),
    };
    let mut objects = BTreeMap::new();
    for resource in &kustomization.resources {
        let path = deploy_dir().join(resource);
        let text = std::fs::read_to_string(&path).expect("a listed resource");
        for (_, mut object) in documents(resource, &text) {
            if object["kind"] == "Deployment" {
                for container in object["spec"]["template"]["spec"]["containers"]
                    .as_array_mut()
                    .into_iter()
                    .flatten()
                {
                    if container["image"] == "strait" {
                        container["image"] = replaced.clone().into();
                    }
                }
            }
            objects.insert(key(&object), with_parsed_config(object));
        }
    }
    objects
}

/// Every object of `files` (under `deploy/`) by key.
fn objects_of(files: &[&str]) -> BTreeMap<Key, Value> {
    files
        .iter()
        .flat_map(|file| {
            let text = std::fs::read_to_string(deploy_dir().join(file)).expect("a file");
            documents(file, &text)
        })
        .filter(|(_, object)| object["kind"] != "Kustomization")
        .map(|(_, object)| (key(&object), object))
        .collect()
}

fn assert_same(chart: &BTreeMap<Key, Value>, deploy: &BTreeMap<Key, Value>, what: &str) {
    let chart_keys: Vec<&Key> = chart.keys().collect();
    let deploy_keys: Vec<&Key> = deploy.keys().collect();
    assert_eq!(chart_keys, deploy_keys, "{what}: the same objects");
    for (at, object) in deploy {
        assert_eq!(
            &chart[at], object,
            "{what}: {at:?} differs (left: the chart's, right: deploy/'s)"
        );
    }
}

#[test]
fn the_chart_lints_clean() {
    let Some(helm) = helm() else { return };
    let output = Command::new(helm)
        .args(["lint", "--strict", "--kube-version", KUBE_VERSION])
        .arg(chart())
        .output()
        .expect("helm runs");
    assert!(
        output.status.success(),
        "helm lint --strict: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn default_values_render_what_kustomize_applies() {
    let Some(helm) = helm() else { return };
    let text = template(helm, &[]).unwrap_or_else(|e| panic!("helm template: {e}"));
    assert_same(&rendered(&text), &kustomized(), "default values");
}

#[test]
fn the_optional_parts_render_the_crds_and_the_monitoring_objects_as_they_are() {
    let Some(helm) = helm() else { return };
    let text = template(
        helm,
        &[
            "crds.install=true",
            "crds.keep=false",
            "podMonitor.enabled=true",
            "prometheusRule.enabled=true",
            "dashboard.enabled=true",
        ],
    )
    .unwrap_or_else(|e| panic!("helm template: {e}"));
    let mut all = rendered(&text);
    for key in kustomized().keys() {
        all.remove(key);
    }
    let dashboard = all
        .remove(&(
            "ConfigMap".to_owned(),
            "strait-system".to_owned(),
            "strait-dashboard".to_owned(),
        ))
        .expect("the dashboard's ConfigMap");
    let shipped: Value = serde_json::from_str(
        &std::fs::read_to_string(deploy_dir().join("observability/dashboard.json"))
            .expect("the dashboard"),
    )
    .expect("JSON");
    let held: Value = serde_json::from_str(
        dashboard["data"]["dashboard.json"]
            .as_str()
            .expect("data.dashboard.json"),
    )
    .expect("the ConfigMap holds JSON");
    assert_eq!(held, shipped, "the dashboard as shipped");
    assert_same(
        &all,
        &objects_of(&[
            "crds/clusterproperties.yaml",
            "crds/serviceexports.yaml",
            "crds/serviceimports.yaml",
            "observability/podmonitor.yaml",
            "observability/alerts.yaml",
        ]),
        "CRDs and monitoring",
    );
}

#[test]
fn cert_manager_certificates_need_the_cluster_id() {
    let Some(helm) = helm() else { return };
    let refused = template(helm, &["tls.source=certManager"]).expect_err("refused");
    assert!(
        refused.contains("tls.certManager.clusterId"),
        "the error names the value: {refused}"
    );
    let text = template(
        helm,
        &[
            "tls.source=certManager",
            "tls.certManager.clusterId=c1",
            "tls.certManager.clusterSet=set.example",
        ],
    )
    .unwrap_or_else(|e| panic!("helm template: {e}"));
    assert!(
        text.contains("spiffe://set.example/cluster/c1/gateway"),
        "the certificate names c1's gateway in set.example: {text}"
    );
}

/// The chart's `appVersion` (its default image tag) is the crate's version,
/// as the kustomization's `newTag` is (checks_objects): one version in
/// three places, kept equal.
#[test]
fn the_charts_app_version_is_the_crates() {
    let text = std::fs::read_to_string(chart().join("Chart.yaml")).expect("Chart.yaml");
    let chart: Value = strait::discovery::yaml::parse_single(&text).expect("Chart.yaml is YAML");
    assert_eq!(
        chart["appVersion"],
        env!("CARGO_PKG_VERSION"),
        "Chart.yaml appVersion"
    );
    assert_eq!(chart["name"], "strait");
}
