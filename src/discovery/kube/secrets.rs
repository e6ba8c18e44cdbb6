//! Remote clusters added and removed at run time: a watcher on the Secrets
//! labelled `strait.dev/remote-cluster: "true"` in the gateway's namespace
//! of the local cluster. Each holds a kubeconfig under `data.kubeconfig`;
//! the hub starts a cluster task per Secret and stops it when the Secret
//! goes away.

use std::pin::pin;
use std::sync::Arc;

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::api::Api;
use kube::runtime::watcher;
use tokio::sync::mpsc;

use super::report::{HubMessage, RemoteSecret, SecretReport};
use super::{KubeOptions, REMOTE_CLUSTER_LABEL, REMOTE_KUBECONFIG_KEY};
use crate::backoff::Backoff;

fn remote(secret: Secret) -> RemoteSecret {
    let name = secret.metadata.name.unwrap_or_default();
    let kubeconfig = match secret
        .data
        .as_ref()
        .and_then(|data| data.get(REMOTE_KUBECONFIG_KEY))
    {
        Some(bytes) => String::from_utf8(bytes.0.clone())
            .map_err(|_| format!("data.{REMOTE_KUBECONFIG_KEY} is not UTF-8 text")),
        None => Err(format!(
            "has no data.{REMOTE_KUBECONFIG_KEY} holding a kubeconfig"
        )),
    };
    RemoteSecret { name, kubeconfig }
}

/// Watches the remote-cluster Secrets of `namespace` while the hub listens.
pub(super) async fn watch_secrets(
    client: Client,
    namespace: String,
    options: Arc<KubeOptions>,
    hub: mpsc::Sender<HubMessage>,
) {
    let api: Api<Secret> = Api::namespaced(client, &namespace);
    let timeout = u32::try_from(options.watch_timeout.as_secs())
        .unwrap_or(u32::MAX)
        .max(1);
    let config = watcher::Config::default()
        .labels(&format!("{REMOTE_CLUSTER_LABEL}=true"))
        .timeout(timeout);
    let mut backoff = Backoff::new(options.retry);
    let send = |report| hub.send(HubMessage::Secrets(report));
    loop {
        let mut stream = pin!(watcher(api.clone(), config.clone()));
        let mut listing = Vec::new();
        while let Some(item) = stream.next().await {
            let report = match item {
                Ok(watcher::Event::Init) => {
                    listing.clear();
                    continue;
                }
                Ok(watcher::Event::InitApply(secret)) => {
                    listing.push(remote(secret));
                    continue;
                }
                Ok(watcher::Event::InitDone) => SecretReport::Listed(std::mem::take(&mut listing)),
                Ok(watcher::Event::Apply(secret)) => SecretReport::Applied(remote(secret)),
                Ok(watcher::Event::Delete(secret)) => {
                    SecretReport::Deleted(secret.metadata.name.unwrap_or_default())
                }
                Err(watcher::Error::WatchError(status)) if status.code == 410 => continue,
                Err(error) => {
                    if send(SecretReport::Failed(error.to_string())).await.is_err() {
                        return;
                    }
                    // Polled again, the watcher resumes from its resource
                    // version (or lists anew if it had not listed yet).
                    tokio::time::sleep(backoff.next_delay()).await;
                    continue;
                }
            };
            backoff.reset();
            if send(report).await.is_err() {
                return;
            }
        }
        tokio::time::sleep(backoff.next_delay()).await;
    }
}
