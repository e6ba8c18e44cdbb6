//! The Kubernetes manifests in `deploy/`: every document parses into its
//! k8s-openapi type (with no field the type does not know), and the objects
//! agree with each other, with the `strait run` flags, with `gateway.yaml`'s
//! schema, with what the kube source reads and writes, and with
//! docs/configuration.md.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{
    ConfigMap, Container, Namespace, PodSpec, Service, ServiceAccount,
};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, Subject,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_yaml_ng::Value;
use strait::config::GatewaySettings;
use strait::tls::Identity;

/// Where a scope of access applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Scope {
    /// Every namespace (or a cluster-scoped resource): a ClusterRole bound by a ClusterRoleBinding.
    Cluster,
    /// The gateway's own namespace only: a Role bound by a RoleBinding.
    OwnNamespace,
}

/// One API group and resource, and the verbs the gateway uses on it.
struct Access {
    scope: Scope,
    group: &'static str,
    resource: &'static str,
    verbs: &'static [&'static str],
}

const READ: &[&str] = &["get", "list", "watch"];

// Keep in step with src/discovery/kube: what the kube source watches and writes.
const KUBE_SOURCE_ACCESS: &[Access] = &[
    Access {
        scope: Scope::Cluster,
        group: "about.k8s.io",
        resource: "clusterproperties",
        verbs: READ,
    },
    Access {
        scope: Scope::Cluster,
        group: "multicluster.x-k8s.io",
        resource: "serviceexports",
        verbs: READ,
    },
    Access {
        scope: Scope::Cluster,
        group: "multicluster.x-k8s.io",
        resource: "serviceexports/status",
        verbs: &["patch", "update"],
    },
    Access {
        scope: Scope::Cluster,
        group: "multicluster.x-k8s.io",
        resource: "serviceimports",
        verbs: READ,
    },
    Access {
        scope: Scope::Cluster,
        group: "",
        resource: "services",
        verbs: READ,
    },
    Access {
        scope: Scope::Cluster,
        group: "discovery.k8s.io",
        resource: "endpointslices",
        verbs: READ,
    },
    // Remote-cluster kubeconfig Secrets (labelled strait.dev/remote-cluster: "true").
    Access {
        scope: Scope::OwnNamespace,
        group: "",
        resource: "secrets",
        verbs: READ,
    },
    // Leader election.
    Access {
        scope: Scope::OwnNamespace,
        group: "coordination.k8s.io",
        resource: "leases",
        verbs: &["get", "list", "watch", "create", "update", "patch"],
    },
];

/// The label that marks a cluster's gateway Service (docs/configuration.md).
const GATEWAY_LABEL: &str = "strait.dev/gateway";

/// The manifest directory.
fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy")
}

/// One parsed object and where it came from: "deploy/x.yaml, document N: Kind ns/name".
struct Found<T> {
    origin: String,
    object: T,
}

#[derive(Default)]
struct Manifests {
    /// Every manifest file read, relative to `deploy/`.
    files: BTreeSet<String>,
    namespaces: Vec<Found<Namespace>>,
    service_accounts: Vec<Found<ServiceAccount>>,
    cluster_roles: Vec<Found<ClusterRole>>,
    cluster_role_bindings: Vec<Found<ClusterRoleBinding>>,
    roles: Vec<Found<Role>>,
    role_bindings: Vec<Found<RoleBinding>>,
    config_maps: Vec<Found<ConfigMap>>,
    deployments: Vec<Found<Deployment>>,
    services: Vec<Found<Service>>,
    pdbs: Vec<Found<PodDisruptionBudget>>,
    crds: Vec<Found<CustomResourceDefinition>>,
}

/// Files under `deploy/` that are not applied as manifests, and why.
fn skipped(relative: &str) -> Option<&'static str> {
    if relative == "kustomization.yaml" {
        Some("the kustomize file lists the manifests; it is checked against them")
    } else if relative.starts_with("examples/") {
        Some("examples are not applied by kustomize; they are checked on their own")
    } else {
        None
    }
}

fn yaml_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .map(|entry| entry.expect("directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
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

fn relative(path: &Path) -> String {
    path.strip_prefix(deploy_dir())
        .expect("under deploy/")
        .to_string_lossy()
        .replace('\\', "/")
}

/// The non-empty documents of a multi-document YAML file, numbered from 1.
fn documents(file: &str, text: &str) -> Vec<(usize, Value)> {
    serde_yaml_ng::Deserializer::from_str(text)
        .enumerate()
        .map(|(index, document)| {
            let value = Value::deserialize(document)
                .unwrap_or_else(|e| panic!("{file}, document {}: not YAML: {e}", index + 1));
            (index + 1, value)
        })
        .filter(|(_, value)| !value.is_null())
        .collect()
}

fn string_at<'a>(value: &'a Value, path: &[&str]) -> Option<&'a str> {
    path.iter()
        .try_fold(value, |value, key| value.get(*key))
        .and_then(Value::as_str)
}

/// Parses `value` as `T` and fails when the typed object, written back,
/// lost a field of the document: a misspelt or misplaced field would be
/// silently ignored by Kubernetes' own decoding of unknown fields.
fn typed<T: DeserializeOwned + serde::Serialize>(origin: &str, value: Value) -> T {
    let original = serde_json::to_value(&value)
        .unwrap_or_else(|e| panic!("{origin}: cannot convert to JSON: {e}"));
    let object: T = serde_yaml_ng::from_value(value)
        .unwrap_or_else(|e| panic!("{origin}: does not parse: {e}"));
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
                ("apiextensions.k8s.io/v1", "CustomResourceDefinition") => add!(crds),
                _ => panic!(
                    "{origin}: unknown kind {api_version}/{kind}; teach tests/deploy.rs to parse it"
                ),
            }
        }
    }
    manifests
}

fn manifests() -> &'static Manifests {
    static MANIFESTS: OnceLock<Manifests> = OnceLock::new();
    MANIFESTS.get_or_init(load)
}

/// The one gateway Deployment, its pod spec and its `strait` container.
struct Gateway<'a> {
    found: &'a Found<Deployment>,
    namespace: &'a str,
    pod: &'a PodSpec,
    container: &'a Container,
    args: &'a [String],
}

fn gateway() -> Gateway<'static> {
    let m = manifests();
    assert_eq!(
        m.deployments.len(),
        1,
        "deploy/ should hold exactly one Deployment (cluster-edge), found: {:?}",
        m.deployments.iter().map(|d| &d.origin).collect::<Vec<_>>()
    );
    let found = &m.deployments[0];
    let origin = &found.origin;
    assert_eq!(
        found.object.metadata.name.as_deref(),
        Some("cluster-edge"),
        "{origin}: the gateway Deployment is called cluster-edge"
    );
    let namespace = found
        .object
        .metadata
        .namespace
        .as_deref()
        .unwrap_or_else(|| panic!("{origin}: no metadata.namespace"));
    let spec = found
        .object
        .spec
        .as_ref()
        .unwrap_or_else(|| panic!("{origin}: no spec"));
    let pod = spec
        .template
        .spec
        .as_ref()
        .unwrap_or_else(|| panic!("{origin}: no spec.template.spec"));
    assert_eq!(
        pod.containers.len(),
        1,
        "{origin}: expected one container, the gateway"
    );
    let container = &pod.containers[0];
    let args = container
        .args
        .as_deref()
        .unwrap_or_else(|| panic!("{origin}: container {} has no args", container.name));
    assert_eq!(
        args.first().map(String::as_str),
        Some("run"),
        "{origin}: args should start with the `run` subcommand (the image's entrypoint is /strait)"
    );
    Gateway {
        found,
        namespace,
        pod,
        container,
        args,
    }
}

impl Gateway<'_> {
    fn origin(&self) -> &str {
        &self.found.origin
    }

    /// The value of `--name VALUE` or `--name=VALUE` in the container's args.
    fn flag(&self, name: &str) -> Option<&str> {
        let mut args = self.args.iter();
        while let Some(arg) = args.next() {
            if arg == name {
                return args.next().map(String::as_str);
            }
            if let Some(value) = arg.strip_prefix(name).and_then(|r| r.strip_prefix('=')) {
                return Some(value);
            }
        }
        None
    }

    fn required_flag(&self, name: &str) -> &str {
        self.flag(name)
            .unwrap_or_else(|| panic!("{}: args have no {name}", self.origin()))
    }

    fn listen(&self, name: &str) -> SocketAddr {
        let value = self.required_flag(name);
        value.parse().unwrap_or_else(|e| {
            panic!("{}: {name} {value:?} is not an address: {e}", self.origin())
        })
    }

    fn pod_labels(&self) -> &BTreeMap<String, String> {
        let spec = self.found.object.spec.as_ref().expect("checked");
        spec.template
            .metadata
            .as_ref()
            .and_then(|m| m.labels.as_ref())
            .unwrap_or_else(|| panic!("{}: the pod template has no labels", self.origin()))
    }

    /// The container port a Service or probe port refers to, by number or by name.
    fn resolve(&self, port: &IntOrString, protocol: &str) -> Option<u16> {
        let ports = self.container.ports.as_deref().unwrap_or_default();
        let protocol_of = |p: &k8s_openapi::api::core::v1::ContainerPort| {
            p.protocol.clone().unwrap_or_else(|| "TCP".to_owned())
        };
        let found = match port {
            IntOrString::Int(number) => ports
                .iter()
                .find(|p| p.container_port == *number && protocol_of(p) == protocol),
            IntOrString::String(name) => ports
                .iter()
                .find(|p| p.name.as_deref() == Some(name) && protocol_of(p) == protocol),
        };
        found.and_then(|p| u16::try_from(p.container_port).ok())
    }

    /// The volume mounted at `path` and its name.
    fn volume_at(&self, path: &str) -> &k8s_openapi::api::core::v1::Volume {
        let mount = self
            .container
            .volume_mounts
            .as_deref()
            .unwrap_or_default()
            .iter()
            .find(|m| m.mount_path.trim_end_matches('/') == path.trim_end_matches('/'))
            .unwrap_or_else(|| panic!("{}: nothing is mounted at {path}", self.origin()));
        assert_eq!(
            mount.read_only,
            Some(true),
            "{}: the volume at {path} should be mounted read-only",
            self.origin()
        );
        self.pod
            .volumes
            .as_deref()
            .unwrap_or_default()
            .iter()
            .find(|v| v.name == mount.name)
            .unwrap_or_else(|| {
                panic!(
                    "{}: volume {} (mounted at {path}) is not defined",
                    self.origin(),
                    mount.name
                )
            })
    }

    /// The ConfigMap mounted at `--config` and its `gateway.yaml`, parsed.
    fn settings(&self) -> (&'static Found<ConfigMap>, GatewaySettings) {
        let config_dir = self.required_flag("--config");
        let volume = self.volume_at(config_dir);
        let name = volume
            .config_map
            .as_ref()
            .map(|c| c.name.as_str())
            .unwrap_or_else(|| {
                panic!(
                    "{}: the volume at --config {config_dir} is not a ConfigMap",
                    self.origin()
                )
            });
        let config_map = manifests()
            .config_maps
            .iter()
            .find(|c| {
                c.object.metadata.name.as_deref() == Some(name)
                    && c.object.metadata.namespace.as_deref() == Some(self.namespace)
            })
            .unwrap_or_else(|| {
                panic!(
                    "{}: mounts ConfigMap {}/{name}, which deploy/ does not define",
                    self.origin(),
                    self.namespace
                )
            });
        let text = config_map
            .object
            .data
            .as_ref()
            .and_then(|d| d.get("gateway.yaml"))
            .unwrap_or_else(|| panic!("{}: no data key gateway.yaml", config_map.origin));
        let source = format!("{}: data.gateway.yaml", config_map.origin);
        let settings = GatewaySettings::parse(&source, text)
            .unwrap_or_else(|e| panic!("{source} is not a valid gateway.yaml: {e}"));
        (config_map, settings)
    }
}

fn selector_matches(selector: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    let match_labels = selector
        .match_labels
        .as_ref()
        .is_some_and(|m| !m.is_empty());
    let expressions = selector
        .match_expressions
        .as_ref()
        .is_some_and(|e| !e.is_empty());
    assert!(
        !expressions,
        "matchExpressions are not checked by this test"
    );
    match_labels
        && selector
            .match_labels
            .iter()
            .flatten()
            .all(|(key, value)| labels.get(key) == Some(value))
}

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
    let value: Value = serde_yaml_ng::from_str(&text).expect("deploy/kustomization.yaml is YAML");
    assert_eq!(
        string_at(&value, &["kind"]),
        Some("Kustomization"),
        "deploy/kustomization.yaml: kind"
    );
    let listed: BTreeSet<String> = value
        .get("resources")
        .and_then(Value::as_sequence)
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

#[test]
fn probes_use_the_admin_port() {
    let gateway = gateway();
    let origin = gateway.origin();
    let admin = gateway.listen("--admin-listen");
    assert!(
        admin.ip().is_unspecified(),
        "{origin}: --admin-listen {admin} must listen on all addresses for the kubelet's probes"
    );
    let container = gateway.container;
    for (what, probe, path) in [
        ("livenessProbe", &container.liveness_probe, "/healthz"),
        ("readinessProbe", &container.readiness_probe, "/readyz"),
    ] {
        let get = probe
            .as_ref()
            .and_then(|p| p.http_get.as_ref())
            .unwrap_or_else(|| {
                panic!(
                    "{origin}: container {} has no {what}.httpGet",
                    container.name
                )
            });
        assert_eq!(
            get.path.as_deref(),
            Some(path),
            "{origin}: {what} should GET {path}"
        );
        assert!(
            get.scheme.as_deref().is_none_or(|s| s == "HTTP"),
            "{origin}: {what}: the admin listener speaks plain HTTP"
        );
        let port = gateway.resolve(&get.port, "TCP").unwrap_or_else(|| {
            panic!(
                "{origin}: {what} port {:?} is not a container port",
                get.port
            )
        });
        assert_eq!(
            port,
            admin.port(),
            "{origin}: {what} probes port {port}, but --admin-listen is {admin}"
        );
    }
}

#[test]
fn container_ports_match_the_listener_flags() {
    let gateway = gateway();
    let origin = gateway.origin();
    for (name, protocol, flag) in [
        ("admin", "TCP", "--admin-listen"),
        ("connect", "TCP", "--connect-listen"),
        ("tunnel", "TCP", "--tunnel-listen"),
        ("tunnel-quic", "UDP", "--tunnel-listen"),
    ] {
        let address = gateway.listen(flag);
        assert!(
            address.ip().is_unspecified(),
            "{origin}: {flag} {address} must listen on all addresses to be reachable through a Service"
        );
        let port = gateway
            .resolve(&IntOrString::String(name.to_owned()), protocol)
            .unwrap_or_else(|| panic!("{origin}: no container port named {name} ({protocol})"));
        assert_eq!(
            port,
            address.port(),
            "{origin}: container port {name}/{protocol} is {port}, but {flag} is {address}"
        );
    }
}

#[test]
fn services_target_the_gateway_pods_and_listeners() {
    let gateway = gateway();
    let labels = gateway.pod_labels();
    let connect = gateway.listen("--connect-listen").port();
    let tunnel = gateway.listen("--tunnel-listen").port();
    let mut connect_service = false;
    for found in &manifests().services {
        let origin = &found.origin;
        let spec = found
            .object
            .spec
            .as_ref()
            .unwrap_or_else(|| panic!("{origin}: no spec"));
        let selector = spec
            .selector
            .as_ref()
            .unwrap_or_else(|| panic!("{origin}: no selector"));
        assert!(
            !selector.is_empty() && selector.iter().all(|(k, v)| labels.get(k) == Some(v)),
            "{origin}: selector {selector:?} does not select the pods of {}",
            gateway.origin()
        );
        for port in spec.ports.as_deref().unwrap_or_default() {
            let protocol = port.protocol.as_deref().unwrap_or("TCP");
            let target = port
                .target_port
                .clone()
                .unwrap_or(IntOrString::Int(port.port));
            let resolved = gateway.resolve(&target, protocol).unwrap_or_else(|| {
                panic!(
                    "{origin}: port {:?} targets {target:?}/{protocol}, which is no container port of {}",
                    port.name,
                    gateway.origin()
                )
            });
            let expected = match port.name.as_deref() {
                Some("tunnel" | "tunnel-quic") => tunnel,
                Some("connect") => {
                    connect_service = true;
                    assert_eq!(
                        spec.type_.as_deref().unwrap_or("ClusterIP"),
                        "ClusterIP",
                        "{origin}: the connect listener is for clients inside the cluster"
                    );
                    connect
                }
                other => panic!("{origin}: unexpected port {other:?}"),
            };
            assert_eq!(
                resolved, expected,
                "{origin}: port {:?} reaches container port {resolved}, not the listener's {expected}",
                port.name
            );
        }
    }
    assert!(
        connect_service,
        "deploy/ has no ClusterIP Service for the connect listener"
    );
}

#[test]
fn the_gateway_service_is_a_load_balancer_with_the_tunnel_ports() {
    let gateway_services: Vec<_> = manifests()
        .services
        .iter()
        .filter(|s| {
            s.object
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(GATEWAY_LABEL))
                .is_some()
        })
        .collect();
    assert_eq!(
        gateway_services.len(),
        1,
        "deploy/ should hold exactly one Service labelled {GATEWAY_LABEL}, found: {:?}",
        gateway_services
            .iter()
            .map(|s| &s.origin)
            .collect::<Vec<_>>()
    );
    let found = gateway_services[0];
    let origin = &found.origin;
    let labels = found.object.metadata.labels.as_ref().expect("filtered");
    assert_eq!(
        labels.get(GATEWAY_LABEL).map(String::as_str),
        Some("true"),
        "{origin}: label {GATEWAY_LABEL} must be \"true\""
    );
    let spec = found.object.spec.as_ref().expect("checked elsewhere");
    assert_eq!(
        spec.type_.as_deref(),
        Some("LoadBalancer"),
        "{origin}: peers reach the gateway through a load balancer"
    );
    let ports: BTreeSet<(String, String, i32)> = spec
        .ports
        .as_deref()
        .unwrap_or_default()
        .iter()
        .map(|p| {
            (
                p.name.clone().unwrap_or_default(),
                p.protocol.clone().unwrap_or_else(|| "TCP".to_owned()),
                p.port,
            )
        })
        .collect();
    let expected: BTreeSet<(String, String, i32)> = [
        ("tunnel".to_owned(), "TCP".to_owned(), 15008),
        ("tunnel-quic".to_owned(), "UDP".to_owned(), 15008),
    ]
    .into();
    assert_eq!(
        ports, expected,
        "{origin}: ports should be tunnel 15008/TCP and tunnel-quic 15008/UDP"
    );
}

#[test]
fn gateway_yaml_is_valid_and_agrees_with_the_flags() {
    let gateway = gateway();
    let (config_map, settings) = gateway.settings();
    let origin = &config_map.origin;
    let cluster = settings.cluster.as_deref().unwrap_or_else(|| {
        panic!("{origin}: gateway.yaml should set `cluster` (strait run needs it)")
    });
    assert!(!cluster.is_empty(), "{origin}: `cluster` is empty");
    for (field, configured, flag) in [
        (
            "listeners.connect",
            settings.listeners.connect,
            "--connect-listen",
        ),
        (
            "listeners.tunnel",
            settings.listeners.tunnel,
            "--tunnel-listen",
        ),
        (
            "listeners.admin",
            settings.listeners.admin,
            "--admin-listen",
        ),
    ] {
        assert_eq!(
            configured,
            gateway.listen(flag),
            "{origin}: gateway.yaml {field} disagrees with {flag} of {}",
            gateway.origin()
        );
    }
    let tls_dir = gateway.required_flag("--tls-dir");
    assert_eq!(
        settings.tls.dir,
        Path::new(tls_dir),
        "{origin}: gateway.yaml tls.dir disagrees with --tls-dir of {}",
        gateway.origin()
    );
    let tls = gateway.volume_at(tls_dir);
    let secret = tls.secret.as_ref().unwrap_or_else(|| {
        panic!(
            "{}: the volume at --tls-dir {tls_dir} is not a Secret",
            gateway.origin()
        )
    });
    assert!(
        secret.items.is_none(),
        "{}: the TLS Secret is mounted whole (tls.crt, tls.key, ca.crt)",
        gateway.origin()
    );
    assert!(
        secret.secret_name.is_some(),
        "{}: the TLS volume names no Secret",
        gateway.origin()
    );
}

#[test]
fn the_deployment_is_locked_down() {
    let gateway = gateway();
    let origin = gateway.origin();
    let pod = gateway.pod;
    let container = gateway.container;
    let pod_security = pod.security_context.clone().unwrap_or_default();
    let security = container.security_context.clone().unwrap_or_else(|| {
        panic!(
            "{origin}: container {} has no securityContext",
            container.name
        )
    });
    assert!(
        security.run_as_non_root.or(pod_security.run_as_non_root) == Some(true),
        "{origin}: runAsNonRoot must be true"
    );
    assert!(
        security.run_as_user.or(pod_security.run_as_user) != Some(0),
        "{origin}: must not run as uid 0"
    );
    assert_eq!(
        security.read_only_root_filesystem,
        Some(true),
        "{origin}: readOnlyRootFilesystem must be true"
    );
    assert_eq!(
        security.allow_privilege_escalation,
        Some(false),
        "{origin}: allowPrivilegeEscalation must be false"
    );
    assert_ne!(
        security.privileged,
        Some(true),
        "{origin}: must not be privileged"
    );
    let capabilities = security.capabilities.clone().unwrap_or_default();
    assert!(
        capabilities
            .drop
            .as_deref()
            .unwrap_or_default()
            .iter()
            .any(|c| c == "ALL"),
        "{origin}: capabilities.drop must hold ALL"
    );
    assert!(
        capabilities.add.as_deref().unwrap_or_default().is_empty(),
        "{origin}: no capability may be added (every port is above 1024)"
    );
    let seccomp = security
        .seccomp_profile
        .or(pod_security.seccomp_profile)
        .map(|s| s.type_);
    assert_eq!(
        seccomp.as_deref(),
        Some("RuntimeDefault"),
        "{origin}: seccompProfile must be RuntimeDefault"
    );
    for (what, set) in [
        ("hostNetwork", pod.host_network),
        ("hostPID", pod.host_pid),
        ("hostIPC", pod.host_ipc),
    ] {
        assert_ne!(set, Some(true), "{origin}: {what} must not be set");
    }
    let resources = container
        .resources
        .as_ref()
        .unwrap_or_else(|| panic!("{origin}: no resources"));
    for (what, map) in [
        ("requests", &resources.requests),
        ("limits", &resources.limits),
    ] {
        let map = map
            .as_ref()
            .unwrap_or_else(|| panic!("{origin}: no resources.{what}"));
        for resource in ["cpu", "memory"] {
            assert!(
                map.contains_key(resource),
                "{origin}: no resources.{what}.{resource}"
            );
        }
    }
    let image = &container.image;
    assert!(
        image
            .as_deref()
            .is_some_and(|i| !i.is_empty() && !i.ends_with(":latest")),
        "{origin}: the image {image:?} should name a release tag"
    );
    let env = container.env.as_deref().unwrap_or_default();
    let namespace_env = env
        .iter()
        .find(|e| e.name == "POD_NAMESPACE")
        .and_then(|e| e.value_from.as_ref())
        .and_then(|v| v.field_ref.as_ref())
        .map(|f| f.field_path.as_str());
    assert_eq!(
        namespace_env,
        Some("metadata.namespace"),
        "{origin}: POD_NAMESPACE must come from the downward API"
    );
}

#[test]
fn replicas_spread_across_nodes_and_a_budget_keeps_one() {
    let gateway = gateway();
    let origin = gateway.origin();
    let spec = gateway.found.object.spec.as_ref().expect("checked");
    assert!(
        spec.replicas.unwrap_or(1) >= 2,
        "{origin}: at least two replicas"
    );
    let labels = gateway.pod_labels();
    assert!(
        selector_matches(&spec.selector, labels),
        "{origin}: the selector does not match the pod template's labels"
    );
    let spread = gateway
        .pod
        .topology_spread_constraints
        .as_deref()
        .unwrap_or_default()
        .iter()
        .any(|c| {
            c.topology_key == "kubernetes.io/hostname"
                && c.label_selector
                    .as_ref()
                    .is_some_and(|s| selector_matches(s, labels))
        });
    let anti_affinity = gateway
        .pod
        .affinity
        .as_ref()
        .and_then(|a| a.pod_anti_affinity.as_ref())
        .is_some_and(|a| {
            let required = a
                .required_during_scheduling_ignored_during_execution
                .iter()
                .flatten();
            let preferred = a
                .preferred_during_scheduling_ignored_during_execution
                .iter()
                .flatten()
                .map(|w| &w.pod_affinity_term);
            required.chain(preferred).any(|term| {
                term.topology_key == "kubernetes.io/hostname"
                    && term
                        .label_selector
                        .as_ref()
                        .is_some_and(|s| selector_matches(s, labels))
            })
        });
    assert!(
        spread || anti_affinity,
        "{origin}: replicas should be spread across nodes (topologySpreadConstraints or podAntiAffinity on kubernetes.io/hostname)"
    );

    let pdbs = &manifests().pdbs;
    assert_eq!(pdbs.len(), 1, "deploy/ should hold one PodDisruptionBudget");
    let pdb = &pdbs[0];
    let pdb_spec = pdb
        .object
        .spec
        .as_ref()
        .unwrap_or_else(|| panic!("{}: no spec", pdb.origin));
    assert_eq!(
        pdb_spec.min_available,
        Some(IntOrString::Int(1)),
        "{}: minAvailable should be 1",
        pdb.origin
    );
    assert!(
        pdb_spec
            .selector
            .as_ref()
            .is_some_and(|s| selector_matches(s, labels)),
        "{}: the selector does not match the pods of {origin}",
        pdb.origin
    );
}

#[test]
fn the_grace_period_outlasts_the_drain() {
    let gateway = gateway();
    let origin = gateway.origin();
    let drain = gateway.required_flag("--drain-timeout");
    let drain: Duration = humantime::parse_duration(drain)
        .unwrap_or_else(|e| panic!("{origin}: --drain-timeout {drain:?}: {e}"));
    let pre_stop = gateway
        .container
        .lifecycle
        .as_ref()
        .and_then(|l| l.pre_stop.as_ref());
    assert!(
        pre_stop.is_none_or(|h| h.exec.is_none()),
        "{origin}: the image has no shell; a preStop exec cannot run"
    );
    let sleep = pre_stop
        .and_then(|h| h.sleep.as_ref())
        .map_or(0, |s| s.seconds);
    let grace = gateway.pod.termination_grace_period_seconds.unwrap_or(30);
    let needed = u64::try_from(sleep).expect("a sleep is not negative") + drain.as_secs();
    assert!(
        u64::try_from(grace).unwrap_or(0) > needed,
        "{origin}: terminationGracePeriodSeconds {grace} should exceed the preStop sleep ({sleep}s) plus --drain-timeout ({}s)",
        drain.as_secs()
    );
}

#[test]
fn the_service_account_is_the_subject_of_every_binding() {
    let m = manifests();
    let gateway = gateway();
    let origin = gateway.origin();
    let account = gateway
        .pod
        .service_account_name
        .as_deref()
        .unwrap_or_else(|| panic!("{origin}: no serviceAccountName"));
    assert_ne!(
        account, "default",
        "{origin}: the gateway needs its own ServiceAccount"
    );
    assert!(
        m.service_accounts.iter().any(|s| {
            s.object.metadata.name.as_deref() == Some(account)
                && s.object.metadata.namespace.as_deref() == Some(gateway.namespace)
        }),
        "{origin}: ServiceAccount {}/{account} is not defined in deploy/",
        gateway.namespace
    );
    assert_ne!(
        gateway.pod.automount_service_account_token,
        Some(false),
        "{origin}: the kube source needs the ServiceAccount token"
    );
    let is_gateway = |subject: &Subject| {
        subject.kind == "ServiceAccount"
            && subject.name == account
            && subject.namespace.as_deref() == Some(gateway.namespace)
    };
    for binding in &m.cluster_role_bindings {
        let subjects = binding.object.subjects.as_deref().unwrap_or_default();
        assert!(
            subjects.iter().any(is_gateway),
            "{}: ServiceAccount {}/{account} is not a subject",
            binding.origin,
            gateway.namespace
        );
        assert!(
            m.cluster_roles.iter().any(|r| {
                binding.object.role_ref.kind == "ClusterRole"
                    && r.object.metadata.name.as_deref() == Some(&binding.object.role_ref.name)
            }),
            "{}: roleRef {} {} is not defined in deploy/",
            binding.origin,
            binding.object.role_ref.kind,
            binding.object.role_ref.name
        );
    }
    for binding in &m.role_bindings {
        let subjects = binding.object.subjects.as_deref().unwrap_or_default();
        assert!(
            subjects.iter().any(is_gateway),
            "{}: ServiceAccount {}/{account} is not a subject",
            binding.origin,
            gateway.namespace
        );
        let role_ref = &binding.object.role_ref;
        let defined = match role_ref.kind.as_str() {
            "Role" => m.roles.iter().any(|r| {
                r.object.metadata.name.as_deref() == Some(&role_ref.name)
                    && r.object.metadata.namespace == binding.object.metadata.namespace
            }),
            "ClusterRole" => m
                .cluster_roles
                .iter()
                .any(|r| r.object.metadata.name.as_deref() == Some(&role_ref.name)),
            _ => false,
        };
        assert!(
            defined,
            "{}: roleRef {} {} is not defined in deploy/",
            binding.origin, role_ref.kind, role_ref.name
        );
    }
}

/// Every (scope, group, resource, verb) the manifests grant the gateway.
fn granted(account: &str, namespace: &str) -> BTreeMap<(Scope, String, String, String), String> {
    let m = manifests();
    let bound = |subjects: &Option<Vec<Subject>>| {
        subjects.iter().flatten().any(|s| {
            s.kind == "ServiceAccount"
                && s.name == account
                && s.namespace.as_deref() == Some(namespace)
        })
    };
    let cluster_role = |name: &str| {
        m.cluster_roles
            .iter()
            .find(|r| r.object.metadata.name.as_deref() == Some(name))
    };
    let mut rules: Vec<(Scope, &str, &PolicyRule)> = Vec::new();
    for binding in m
        .cluster_role_bindings
        .iter()
        .filter(|b| bound(&b.object.subjects))
    {
        if let Some(role) = cluster_role(&binding.object.role_ref.name) {
            for rule in role.object.rules.iter().flatten() {
                rules.push((Scope::Cluster, &role.origin, rule));
            }
        }
    }
    for binding in m.role_bindings.iter().filter(|b| bound(&b.object.subjects)) {
        assert_eq!(
            binding.object.metadata.namespace.as_deref(),
            Some(namespace),
            "{}: binds the gateway in another namespace",
            binding.origin
        );
        let role_ref = &binding.object.role_ref;
        if role_ref.kind == "ClusterRole" {
            if let Some(role) = cluster_role(&role_ref.name) {
                for rule in role.object.rules.iter().flatten() {
                    rules.push((Scope::OwnNamespace, &role.origin, rule));
                }
            }
            continue;
        }
        for role in m.roles.iter().filter(|r| {
            r.object.metadata.name.as_deref() == Some(&role_ref.name)
                && r.object.metadata.namespace.as_deref() == Some(namespace)
        }) {
            for rule in role.object.rules.iter().flatten() {
                rules.push((Scope::OwnNamespace, &role.origin, rule));
            }
        }
    }
    let mut granted = BTreeMap::new();
    for (scope, origin, rule) in rules {
        assert!(
            rule.non_resource_urls
                .as_deref()
                .unwrap_or_default()
                .is_empty(),
            "{origin}: grants nonResourceURLs"
        );
        assert!(
            rule.resource_names
                .as_deref()
                .unwrap_or_default()
                .is_empty(),
            "{origin}: resourceNames are not modelled by this test"
        );
        let groups = rule.api_groups.as_deref().unwrap_or_default();
        let resources = rule.resources.as_deref().unwrap_or_default();
        for group in groups {
            for resource in resources {
                for verb in &rule.verbs {
                    for (what, value) in
                        [("apiGroup", group), ("resource", resource), ("verb", verb)]
                    {
                        assert!(
                            !value.contains('*'),
                            "{origin}: grants the wildcard {what} {value:?}"
                        );
                    }
                    granted.insert(
                        (scope, group.clone(), resource.clone(), verb.clone()),
                        origin.to_owned(),
                    );
                }
            }
        }
    }
    granted
}

#[test]
fn rbac_grants_exactly_what_the_kube_source_uses() {
    let gateway = gateway();
    let account = gateway
        .pod
        .service_account_name
        .as_deref()
        .unwrap_or_else(|| panic!("{}: no serviceAccountName", gateway.origin()));
    let granted = granted(account, gateway.namespace);
    let needed: BTreeSet<(Scope, String, String, String)> = KUBE_SOURCE_ACCESS
        .iter()
        .flat_map(|a| {
            a.verbs.iter().map(move |verb| {
                (
                    a.scope,
                    a.group.to_owned(),
                    a.resource.to_owned(),
                    (*verb).to_owned(),
                )
            })
        })
        .collect();
    for key in &needed {
        let (scope, group, resource, verb) = key;
        let covered = granted.contains_key(key)
            || (*scope == Scope::OwnNamespace
                && granted.contains_key(&(
                    Scope::Cluster,
                    group.clone(),
                    resource.clone(),
                    verb.clone(),
                )));
        assert!(
            covered,
            "deploy/rbac: ServiceAccount {}/{account} may not {verb} {resource} (group {group:?}, {scope:?}); the kube source needs it",
            gateway.namespace
        );
    }
    for (key, origin) in &granted {
        let (scope, group, resource, verb) = key;
        assert!(
            needed.contains(key),
            "{origin}: grants {verb} on {resource} (group {group:?}, {scope:?}), which the kube source does not use; least privilege"
        );
    }
}

/// A row of the "Objects read" table in docs/configuration.md: kind, group, versions.
fn documented_kinds() -> BTreeMap<String, (String, BTreeSet<String>)> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/configuration.md");
    let text = std::fs::read_to_string(&path).expect("docs/configuration.md exists");
    let mut rows = BTreeMap::new();
    let mut in_table = false;
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with("| kind | apiVersion |") {
            in_table = true;
            continue;
        }
        if !in_table {
            continue;
        }
        if !line.starts_with('|') {
            break;
        }
        let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
        if cells.len() < 2 || cells[0].starts_with("---") {
            continue;
        }
        let kind = cells[0].trim_matches('`').to_owned();
        let mut group = String::new();
        let mut versions = BTreeSet::new();
        for (index, entry) in cells[1].split(',').enumerate() {
            let entry = entry.trim().trim_matches('`');
            // The first entry names the group (none for the core group); the
            // others are further versions of it.
            match entry.rsplit_once('/') {
                Some((g, version)) if index == 0 => {
                    group = g.to_owned();
                    versions.insert(version.to_owned());
                }
                _ => {
                    versions.insert(entry.to_owned());
                }
            }
        }
        rows.insert(kind, (group, versions));
    }
    assert!(
        !rows.is_empty(),
        "docs/configuration.md: no \"| kind | apiVersion |\" table found"
    );
    rows
}

/// API groups Kubernetes serves itself: objects of these need no CRD.
const BUILT_IN_GROUPS: &[&str] = &["", "discovery.k8s.io"];

#[test]
fn crds_serve_both_versions_and_match_what_strait_reads() {
    let documented = documented_kinds();
    let custom: BTreeMap<&String, &(String, BTreeSet<String>)> = documented
        .iter()
        .filter(|(_, (group, _))| !BUILT_IN_GROUPS.contains(&group.as_str()))
        .collect();
    let crds = &manifests().crds;
    let defined: BTreeSet<&String> = crds.iter().map(|c| &c.object.spec.names.kind).collect();
    assert_eq!(
        defined,
        custom.keys().copied().collect::<BTreeSet<_>>(),
        "deploy/crds should define exactly the custom kinds docs/configuration.md says Strait reads"
    );
    for found in crds {
        let origin = &found.origin;
        let crd = &found.object;
        let spec = &crd.spec;
        let names = &spec.names;
        let (group, versions) = custom[&names.kind];
        assert_eq!(
            &spec.group, group,
            "{origin}: group differs from docs/configuration.md"
        );
        let kind = names.kind.to_lowercase();
        let plural = match kind.strip_suffix('y') {
            Some(stem) => format!("{stem}ies"),
            None => format!("{kind}s"),
        };
        assert_eq!(names.plural, plural, "{origin}: plural name");
        assert_eq!(
            names.singular.as_deref(),
            Some(kind.as_str()),
            "{origin}: singular name"
        );
        assert_eq!(
            crd.metadata.name.as_deref(),
            Some(format!("{}.{}", names.plural, spec.group).as_str()),
            "{origin}: metadata.name must be <plural>.<group>"
        );
        let scope = if names.kind == "ClusterProperty" {
            "Cluster"
        } else {
            "Namespaced"
        };
        assert_eq!(spec.scope, scope, "{origin}: scope");
        let protected = (spec.group.ends_with(".k8s.io") || spec.group.ends_with(".kubernetes.io"))
            && !spec.group.ends_with(".x-k8s.io");
        if protected {
            let approval = crd
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get("api-approved.kubernetes.io"));
            assert!(
                approval.is_some_and(|a| a.starts_with("https://") || a.starts_with("unapproved")),
                "{origin}: {} is a protected group; the API server refuses the CRD without an api-approved.kubernetes.io annotation",
                spec.group
            );
        }

        let served: BTreeSet<String> = spec
            .versions
            .iter()
            .filter(|v| v.served)
            .map(|v| v.name.clone())
            .collect();
        let expected: BTreeSet<String> = ["v1alpha1", "v1beta1"].map(str::to_owned).into();
        assert_eq!(served, expected, "{origin}: served versions");
        assert_eq!(
            &served, versions,
            "{origin}: served versions differ from docs/configuration.md"
        );
        let storage: Vec<&str> = spec
            .versions
            .iter()
            .filter(|v| v.storage)
            .map(|v| v.name.as_str())
            .collect();
        assert_eq!(
            storage,
            ["v1beta1"],
            "{origin}: exactly one storage version, v1beta1"
        );
        let mut schemas = Vec::new();
        for version in &spec.versions {
            let at = format!("{origin}, version {}", version.name);
            let schema = version
                .schema
                .as_ref()
                .and_then(|s| s.open_api_v3_schema.as_ref())
                .unwrap_or_else(|| panic!("{at}: no openAPIV3Schema"));
            assert_eq!(
                schema.type_.as_deref(),
                Some("object"),
                "{at}: the schema's root type"
            );
            let properties = schema
                .properties
                .as_ref()
                .unwrap_or_else(|| panic!("{at}: the schema has no properties"));
            assert!(
                properties.contains_key("spec"),
                "{at}: the schema has no spec"
            );
            schemas.push(schema);
            assert!(
                !version
                    .additional_printer_columns
                    .as_deref()
                    .unwrap_or_default()
                    .is_empty(),
                "{at}: no additionalPrinterColumns"
            );
            let status = version
                .subresources
                .as_ref()
                .and_then(|s| s.status.as_ref())
                .is_some();
            if names.kind == "ClusterProperty" {
                let value = properties["spec"]
                    .properties
                    .as_ref()
                    .and_then(|p| p.get("value"))
                    .and_then(|v| v.type_.as_deref());
                assert_eq!(value, Some("string"), "{at}: spec.value is a string");
            } else {
                assert!(status, "{at}: the status subresource is required");
                assert!(
                    properties.contains_key("status"),
                    "{at}: the schema has no status"
                );
            }
        }
        assert!(
            schemas.windows(2).all(|pair| pair[0] == pair[1]),
            "{origin}: v1alpha1 and v1beta1 have the same shape, so their schemas must be identical"
        );
    }

    // The RBAC list names the CRDs' resources.
    for access in KUBE_SOURCE_ACCESS {
        let resource = access.resource.split('/').next().expect("split yields one");
        if let Some(crd) = crds.iter().find(|c| c.object.spec.group == access.group) {
            assert!(
                crds.iter().any(|c| c.object.spec.group == access.group
                    && c.object.spec.names.plural == resource),
                "{}: no CRD of group {} has the plural {resource} the kube source uses",
                crd.origin,
                access.group
            );
        }
    }
}

#[test]
fn examples_agree_with_the_manifests() {
    let gateway = gateway();
    let (_, settings) = gateway.settings();
    let cluster = settings.cluster.clone().expect("checked elsewhere");
    let tls_secret = gateway
        .volume_at(gateway.required_flag("--tls-dir"))
        .secret
        .as_ref()
        .and_then(|s| s.secret_name.clone())
        .expect("checked elsewhere");

    let mut paths = Vec::new();
    yaml_files(&deploy_dir().join("examples"), &mut paths);
    let mut trust_domain = None;
    let mut properties = BTreeMap::new();
    for path in &paths {
        let shown = format!("deploy/{}", relative(path));
        let text = std::fs::read_to_string(path).expect("readable");
        for (index, value) in documents(&shown, &text) {
            let api_version = string_at(&value, &["apiVersion"]).unwrap_or_default();
            let kind = string_at(&value, &["kind"]).unwrap_or_default();
            let name = string_at(&value, &["metadata", "name"]).unwrap_or("(unnamed)");
            let origin = format!("{shown}, document {index}: {kind} {name}");
            match (api_version, kind) {
                ("cert-manager.io/v1", "Certificate") => {
                    assert_eq!(
                        string_at(&value, &["metadata", "namespace"]),
                        Some(gateway.namespace),
                        "{origin}: the Secret must be in the gateway's namespace"
                    );
                    assert_eq!(
                        string_at(&value, &["spec", "secretName"]),
                        Some(tls_secret.as_str()),
                        "{origin}: secretName should be the Secret {} mounts",
                        gateway.origin()
                    );
                    let spec = value.get("spec").expect("has spec");
                    let uris: Vec<&str> = spec
                        .get("uris")
                        .and_then(Value::as_sequence)
                        .into_iter()
                        .flatten()
                        .filter_map(Value::as_str)
                        .collect();
                    assert_eq!(uris.len(), 1, "{origin}: one URI SAN, the gateway identity");
                    let identity =
                        Identity::parse(uris[0]).unwrap_or_else(|e| panic!("{origin}: {e}"));
                    assert_eq!(
                        identity.cluster.as_str(),
                        cluster,
                        "{origin}: the identity's cluster differs from gateway.yaml's `cluster`"
                    );
                    trust_domain = Some(identity.trust_domain.clone());
                    let usages: BTreeSet<&str> = spec
                        .get("usages")
                        .and_then(Value::as_sequence)
                        .into_iter()
                        .flatten()
                        .filter_map(Value::as_str)
                        .collect();
                    for usage in ["server auth", "client auth"] {
                        assert!(usages.contains(usage), "{origin}: usages lack {usage:?}");
                    }
                    assert_eq!(
                        string_at(spec, &["privateKey", "algorithm"]),
                        Some("ECDSA"),
                        "{origin}: privateKey.algorithm"
                    );
                    assert_eq!(
                        spec.get("privateKey")
                            .and_then(|k| k.get("size"))
                            .and_then(Value::as_u64),
                        Some(256),
                        "{origin}: privateKey.size"
                    );
                    assert_eq!(
                        string_at(spec, &["issuerRef", "kind"]),
                        Some("ClusterIssuer"),
                        "{origin}: issuerRef.kind"
                    );
                }
                ("about.k8s.io/v1alpha1" | "about.k8s.io/v1beta1", "ClusterProperty") => {
                    let value = string_at(&value, &["spec", "value"])
                        .unwrap_or_else(|| panic!("{origin}: no spec.value"));
                    properties.insert(name.to_owned(), (origin.clone(), value.to_owned()));
                }
                _ => panic!("{origin}: unknown kind {api_version}/{kind} in the examples"),
            }
        }
    }
    let property = |name: &str| {
        properties
            .get(name)
            .unwrap_or_else(|| panic!("deploy/examples: no ClusterProperty {name}"))
    };
    let (origin, value) = property("cluster.clusterset.k8s.io");
    assert_eq!(
        value, &cluster,
        "{origin}: differs from gateway.yaml's `cluster`"
    );
    let (origin, value) = property("clusterset.k8s.io");
    assert_eq!(
        Some(value),
        trust_domain.as_ref(),
        "{origin}: differs from the trust domain of the Certificate's identity"
    );
    property(&settings.network_property);
}
