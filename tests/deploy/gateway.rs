//! The gateway Deployment: its pod, its `strait` container and flags, the
//! volumes they name, and the `gateway.yaml` of the ConfigMap at `--config`.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Container, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use strait::config::GatewaySettings;

use crate::manifests::{Found, manifests};

/// The one gateway Deployment, its pod spec and its `strait` container.
pub(crate) struct Gateway<'a> {
    pub(crate) found: &'a Found<Deployment>,
    pub(crate) namespace: &'a str,
    pub(crate) pod: &'a PodSpec,
    pub(crate) container: &'a Container,
    pub(crate) args: &'a [String],
}

pub(crate) fn gateway() -> Gateway<'static> {
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
    pub(crate) fn origin(&self) -> &str {
        &self.found.origin
    }

    /// The value of `--name VALUE` or `--name=VALUE` in the container's args.
    pub(crate) fn flag(&self, name: &str) -> Option<&str> {
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

    pub(crate) fn required_flag(&self, name: &str) -> &str {
        self.flag(name)
            .unwrap_or_else(|| panic!("{}: args have no {name}", self.origin()))
    }

    pub(crate) fn listen(&self, name: &str) -> SocketAddr {
        let value = self.required_flag(name);
        value.parse().unwrap_or_else(|e| {
            panic!("{}: {name} {value:?} is not an address: {e}", self.origin())
        })
    }

    pub(crate) fn pod_labels(&self) -> &BTreeMap<String, String> {
        let spec = self.found.object.spec.as_ref().expect("checked");
        spec.template
            .metadata
            .as_ref()
            .and_then(|m| m.labels.as_ref())
            .unwrap_or_else(|| panic!("{}: the pod template has no labels", self.origin()))
    }

    /// The container port a Service or probe port refers to, by number or by name.
    pub(crate) fn resolve(&self, port: &IntOrString, protocol: &str) -> Option<u16> {
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
    pub(crate) fn volume_at(&self, path: &str) -> &k8s_openapi::api::core::v1::Volume {
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
    pub(crate) fn settings(&self) -> (&'static Found<ConfigMap>, GatewaySettings) {
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

pub(crate) fn selector_matches(
    selector: &LabelSelector,
    labels: &BTreeMap<String, String>,
) -> bool {
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
