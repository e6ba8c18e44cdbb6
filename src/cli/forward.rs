//! Reading a gateway pod's admin view through the Kubernetes API: the API
//! server's port-forward to the pod's admin port, which answers loopback
//! only, as `kubectl port-forward` does, but with no local port opened
//! and nothing to run in the pod (the image has no shell). What `strait
//! status --kube` and `strait check --kube` read the gateway's own view
//! with; the caller needs `create` on `pods/portforward` in the gateway's
//! namespace.

use std::time::Duration;

use http_body_util::{BodyExt, Empty, Limited};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, ListParams};
use serde_json::Value;

/// The gateway pods' label (deploy/deployment.yaml, the Helm chart).
const POD_SELECTOR: &str = "app.kubernetes.io/name=cluster-edge";
/// The Lease whose holder writes export status and plans the imports.
use crate::controller::LEASE_NAME as LEASE;
/// The most of a view read.
const MAX_BODY: usize = 4 << 20;

/// The gateway pod to ask: the Lease holder when it is ready (it alone
/// knows the imports it plans), else the first ready one.
pub(super) async fn gateway_pod(client: &Client, namespace: &str) -> Result<String, String> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let listed = pods
        .list(&ListParams::default().labels(POD_SELECTOR))
        .await
        .map_err(|e| format!("cannot list the gateway pods in {namespace}: {e}"))?;
    let ready: Vec<String> = listed
        .items
        .iter()
        .filter(|pod| {
            pod.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|conditions| {
                    conditions
                        .iter()
                        .any(|c| c.type_ == "Ready" && c.status == "True")
                })
        })
        .filter_map(|pod| pod.metadata.name.clone())
        .collect();
    let holder = Api::<Lease>::namespaced(client.clone(), namespace)
        .get_opt(LEASE)
        .await
        .ok()
        .flatten()
        .and_then(|lease| lease.spec?.holder_identity);
    match holder.filter(|holder| ready.contains(holder)) {
        Some(holder) => Ok(holder),
        None => ready
            .into_iter()
            .next()
            .ok_or_else(|| format!("no gateway pod ({POD_SELECTOR}) in {namespace} is ready")),
    }
}

/// `GET path` of the admin listener on `port` of `pod`, as JSON.
pub(super) async fn get_json(
    client: &Client,
    namespace: &str,
    pod: &str,
    port: u16,
    path: &str,
    timeout: Duration,
) -> Result<Value, String> {
    let failed = |e: &dyn std::fmt::Display| format!("{namespace}/{pod}:{port}{path}: {e}");
    tokio::time::timeout(timeout, async {
        let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
        let mut forwarder = pods
            .portforward(pod, &[port])
            .await
            .map_err(|e| failed(&format!("port-forward through the API server: {e}")))?;
        let stream = forwarder
            .take_stream(port)
            .ok_or_else(|| failed(&"the port-forward opened no stream"))?;
        let (mut sender, connection) =
            hyper::client::conn::http1::handshake::<_, Empty<Bytes>>(TokioIo::new(stream))
                .await
                .map_err(|e| failed(&e))?;
        let driver = tokio::spawn(connection);
        let request = hyper::Request::get(path)
            .header(hyper::header::HOST, "127.0.0.1")
            .body(Empty::new())
            .map_err(|e| failed(&e))?;
        let response = sender.send_request(request).await.map_err(|e| failed(&e))?;
        let status = response.status();
        let body = Limited::new(response.into_body(), MAX_BODY)
            .collect()
            .await
            .map_err(|e| failed(&e))?
            .to_bytes();
        driver.abort();
        forwarder.abort();
        if !status.is_success() {
            return Err(failed(&format!(
                "{status}: {}",
                String::from_utf8_lossy(&body).trim()
            )));
        }
        serde_json::from_slice(&body).map_err(|e| failed(&format!("not JSON: {e}")))
    })
    .await
    .unwrap_or_else(|_| Err(failed(&format!("no answer within {timeout:?}"))))
}
