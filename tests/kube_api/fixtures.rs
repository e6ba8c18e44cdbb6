//! The objects the tests put into the stand-in API server: Namespace,
//! ClusterProperty, gateway and exported Services, ServiceExport,
//! ServiceImport, EndpointSlice and remote-cluster Secrets, as JSON a real
//! server would hold.

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use serde_json::{Value, json};

use std::sync::Arc;
use std::time::Duration;

use strait::backoff::Retry;
use strait::controller::{Controller, ControllerOptions, ExportStatusReport, ImportsReport};
use strait::discovery::kube::{KubeError, KubeHandle, KubeOptions};
use strait::discovery::translate::TranslateOptions;

use super::ApiServer;

/// A Namespace as a real server holds it once created.
pub fn namespace(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": name, "labels": {"kubernetes.io/metadata.name": name}},
        "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}})
}

pub fn property(name: &str, value: &str, version: &str) -> Value {
    json!({"apiVersion": format!("about.k8s.io/{version}"), "kind": "ClusterProperty",
        "metadata": {"name": name}, "spec": {"value": value}})
}

pub fn gateway(ip: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "strait-gateway", "namespace": "strait-system",
            "labels": {"strait.dev/gateway": "true"}},
        "spec": {"type": "LoadBalancer", "ports": [{"name": "tunnel", "port": 15008}]},
        "status": {"loadBalancer": {"ingress": [{"ip": ip}]}}})
}

pub fn service(name: &str, ports: &[(&str, u16)]) -> Value {
    let ports: Vec<Value> = ports
        .iter()
        .map(|(n, p)| json!({"name": n, "port": p, "protocol": "TCP"}))
        .collect();
    json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": "shop"},
        "spec": {"type": "ClusterIP", "clusterIP": "10.96.0.10", "ports": ports}})
}

pub fn export(name: &str, version: &str) -> Value {
    json!({"apiVersion": format!("multicluster.x-k8s.io/{version}"), "kind": "ServiceExport",
        "metadata": {"name": name, "namespace": "shop"}})
}

pub fn import(name: &str, ip: &str, version: &str) -> Value {
    json!({"apiVersion": format!("multicluster.x-k8s.io/{version}"), "kind": "ServiceImport",
        "metadata": {"name": name, "namespace": "shop"},
        "spec": {"type": "ClusterSetIP", "ips": [ip], "ports": [{"port": 80, "protocol": "TCP"}]}})
}

/// An EndpointSlice of `service` with one port named `http` on 8080.
pub fn slice(service: &str, name: &str, endpoints: &[(&str, bool)]) -> Value {
    let endpoints: Vec<Value> = endpoints
        .iter()
        .map(|(ip, ready)| json!({"addresses": [ip], "conditions": {"ready": ready}}))
        .collect();
    json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": name, "namespace": "shop",
            "labels": {"kubernetes.io/service-name": service}},
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
        "endpoints": endpoints})
}

pub fn remote_secret(name: &str, kubeconfig: &str, labelled: bool) -> Value {
    let mut secret = Secret::default();
    secret.metadata.name = Some(name.to_owned());
    secret.metadata.namespace = Some("strait-system".to_owned());
    if labelled {
        secret.metadata.labels =
            Some([("strait.dev/remote-cluster".to_owned(), "true".to_owned())].into());
    }
    secret.data = Some(
        [(
            "kubeconfig".to_owned(),
            ByteString(kubeconfig.as_bytes().to_vec()),
        )]
        .into(),
    );
    let mut value = serde_json::to_value(secret).expect("secret encodes");
    value["apiVersion"] = "v1".into();
    value["kind"] = "Secret".into();
    value
}

/// A peer Secret in `strait-system`: `cluster` followed by its feed at
/// `gateways`, on `network`, its CA (`ca`, PEM) trusted for it when given.
pub fn peer_secret(
    name: &str,
    cluster: &str,
    network: &str,
    gateways: &str,
    ca: Option<&str>,
) -> Value {
    let mut secret = Secret::default();
    secret.metadata.name = Some(name.to_owned());
    secret.metadata.namespace = Some("strait-system".to_owned());
    secret.metadata.labels =
        Some([("strait.dev/remote-cluster".to_owned(), "true".to_owned())].into());
    let mut data: std::collections::BTreeMap<String, ByteString> = [
        ("cluster", cluster),
        ("network", network),
        ("gateways", gateways),
    ]
    .into_iter()
    .map(|(key, value)| (key.to_owned(), ByteString(value.as_bytes().to_vec())))
    .collect();
    if let Some(ca) = ca {
        data.insert("ca.crt".to_owned(), ByteString(ca.as_bytes().to_vec()));
    }
    secret.data = Some(data);
    let mut value = serde_json::to_value(secret).expect("secret encodes");
    value["apiVersion"] = "v1".into();
    value["kind"] = "Secret".into();
    value
}

/// A cluster `id` on `network` with a gateway and `shop/cart` exported,
/// with one ready endpoint `pod`; the namespaces `strait-system` and `shop`
/// exist.
pub fn populate(server: &ApiServer, id: &str, network: &str, version: &str, gw: &str, pod: &str) {
    server.apply(namespace("strait-system"));
    server.apply(namespace("shop"));
    server.apply(property("cluster.clusterset.k8s.io", id, version));
    server.apply(property("network.clusterset.k8s.io", network, version));
    server.apply(gateway(gw));
    server.apply(service("cart", &[("http", 80)]));
    server.apply(export("cart", version));
    server.apply(slice("cart", "cart-1", &[(pod, true)]));
}

/// The Kubernetes source's options for tests: the local cluster and the
/// remote ones from kubeconfig files, remote-cluster Secrets watched in
/// `strait-system`, short debounce and retries; nothing written.
pub fn kube_options(local: &std::path::Path, remotes: &[&std::path::Path]) -> KubeOptions {
    KubeOptions {
        local_kubeconfig: Some(local.to_owned()),
        remote_kubeconfigs: remotes.iter().map(|p| p.to_path_buf()).collect(),
        remote_secrets: true,
        remote_secret_namespace: Some("strait-system".to_owned()),
        translate: TranslateOptions::default(),
        stale_after: Duration::from_secs(300),
        debounce: Duration::from_millis(30),
        retry: Retry {
            initial: Duration::from_millis(100),
            max: Duration::from_millis(400),
        },
        watch_timeout: Duration::from_secs(30),
        // Short, so that a stopped server is unsynced within a test's wait;
        // the tests of outages ridden out set their own.
        outage_grace: Duration::from_secs(1),
        rediscover_every: Duration::from_secs(30),
        local_exports: false,
        adopt_from: None,
        peers: Vec::new(),
        follow_peer_secrets: true,
    }
}

/// What a test starts, as `strait run` does: a source (`reads`) and the
/// controller that follows it (`writes`, nothing by default).
pub struct Setup {
    pub reads: KubeOptions,
    pub writes: ControllerOptions,
}

impl Setup {
    pub fn reading(reads: KubeOptions) -> Self {
        Self {
            reads,
            writes: ControllerOptions {
                retry: reads_retry(),
                ..ControllerOptions::default()
            },
        }
    }
}

fn reads_retry() -> Retry {
    kube_options(std::path::Path::new(""), &[]).retry
}

/// A started source and, when the setup writes, its controller. Derefs
/// to the source's handle.
#[derive(Clone)]
pub struct Started {
    pub source: KubeHandle,
    pub controller: Option<Arc<Controller>>,
}

impl Started {
    /// Starts the source with what the controller reads, then the
    /// controller, as `strait run` wires them.
    pub async fn start(setup: Setup) -> Result<Self, KubeError> {
        let Setup { mut reads, writes } = setup;
        writes.request_inputs(&mut reads);
        let source = KubeHandle::start(reads).await?;
        let controller = Controller::start(writes, &source).map(Arc::new);
        Ok(Self { source, controller })
    }

    pub fn export_status(&self) -> Option<tokio::sync::watch::Receiver<ExportStatusReport>> {
        self.controller.as_ref()?.export_status()
    }

    pub fn imports(&self) -> Option<tokio::sync::watch::Receiver<ImportsReport>> {
        self.controller.as_ref()?.imports()
    }

    pub async fn release_leadership(&self, timeout: Duration) {
        if let Some(controller) = &self.controller {
            controller.release_leadership(timeout).await;
        }
    }
}

impl std::ops::Deref for Started {
    type Target = KubeHandle;

    fn deref(&self) -> &KubeHandle {
        &self.source
    }
}
