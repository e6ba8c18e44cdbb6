//! Remote clusters added and removed at run time: a watcher on the Secrets
//! labelled `strait.dev/remote-cluster: "true"` in the remote-cluster
//! Secrets' namespace of the local cluster. Each links one cluster: through
//! its API server (a kubeconfig under `data.kubeconfig`: the hub starts a
//! cluster task) or by its feed (a peer Secret, `data.cluster`,
//! `data.network`, `data.gateways` and `data.ca.crt`: the gateway follows
//! it). The hub stops either when the Secret goes away.

use std::pin::pin;
use std::sync::Arc;

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::api::Api;
use kube::runtime::watcher;
use tokio::sync::mpsc;

use super::report::{HubMessage, RemoteLink, RemoteSecret, SecretReport};
use super::{KubeOptions, REMOTE_CLUSTER_LABEL, REMOTE_KUBECONFIG_KEY};
use crate::backoff::Backoff;
use crate::feed::record::{
    PEER_CA_KEY, PEER_CLUSTER_KEY, PEER_GATEWAYS_KEY, PEER_NETWORK_KEY, PeerSecretData,
    peer_from_secret,
};

fn remote(secret: Secret, namespace: &str, options: &KubeOptions) -> RemoteSecret {
    let name = secret.metadata.name.unwrap_or_default();
    let data = secret.data.unwrap_or_default();
    let get = |key: &str| data.get(key).map(|bytes| bytes.0.as_slice());
    let kubeconfig = get(REMOTE_KUBECONFIG_KEY);
    let link = match (kubeconfig, get(PEER_CLUSTER_KEY)) {
        (Some(_), Some(_)) => RemoteLink::Feed(Err(format!(
            "holds both data.{REMOTE_KUBECONFIG_KEY} and data.{PEER_CLUSTER_KEY}: a remote-cluster Secret links its cluster either through its API server or by its feed"
        ))),
        (None, Some(cluster)) => {
            let said = PeerSecretData {
                cluster: Some(cluster),
                network: get(PEER_NETWORK_KEY),
                gateways: get(PEER_GATEWAYS_KEY),
                ca: get(PEER_CA_KEY),
            };
            let networks = options.translate.networks.as_deref();
            RemoteLink::Feed(
                peer_from_secret(namespace, &name, &said, networks, None)
                    .map(Box::new)
                    .map_err(|(field, error)| format!("{field}: {error}")),
            )
        }
        (Some(bytes), None) => RemoteLink::Api(
            String::from_utf8(bytes.to_vec())
                .map_err(|_| format!("data.{REMOTE_KUBECONFIG_KEY} is not UTF-8 text")),
        ),
        (None, None) => RemoteLink::Api(Err(format!(
            "has no data.{REMOTE_KUBECONFIG_KEY} holding a kubeconfig (nor data.{PEER_CLUSTER_KEY} naming a peer read by its feed)"
        ))),
    };
    RemoteSecret { name, link }
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
                    listing.push(remote(secret, &namespace, &options));
                    continue;
                }
                Ok(watcher::Event::InitDone) => SecretReport::Listed(std::mem::take(&mut listing)),
                Ok(watcher::Event::Apply(secret)) => {
                    SecretReport::Applied(remote(secret, &namespace, &options))
                }
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
