//! The hub's remote-cluster Secrets: a Secret listed, applied or deleted
//! adds, replaces (make before break: the old connection serves until the
//! new one has synced) or removes the cluster it links through its API
//! server; a peer Secret adds, replaces or removes a peer followed by its
//! feed (`hub::peers`).

use std::collections::BTreeSet;

use super::{Entry, Hub, SecretReport};
use crate::discovery::kube::SyncState;
use crate::discovery::kube::client::ClusterSource;
use crate::discovery::kube::report::{ClusterReport, RemoteLink, RemoteSecret};
use crate::discovery::kube::watch::Connect;

impl Hub {
    pub(super) fn secret(&mut self, report: SecretReport) {
        let Some(secrets) = &mut self.secrets else {
            return;
        };
        let namespace = secrets.namespace.clone();
        let source = |name: &str| ClusterSource::Secret {
            namespace: namespace.clone(),
            name: name.to_owned(),
        };
        match report {
            SecretReport::Listed(listed) => {
                secrets.listed = true;
                secrets.error = None;
                // Read through an API server: a Secret now linking by feed
                // is gone as an API link.
                let names: BTreeSet<&str> = listed
                    .iter()
                    .filter(|s| matches!(s.link, RemoteLink::Api(_)))
                    .map(|s| s.name.as_str())
                    .collect();
                let gone: Vec<ClusterSource> = self
                    .clusters
                    .keys()
                    .filter(|s| {
                        matches!(s, ClusterSource::Secret { name, .. } if !names.contains(name.as_str()))
                    })
                    .cloned()
                    .collect();
                for source in gone {
                    self.remove(&source);
                }
                self.peer_secrets.clear();
                for secret in listed {
                    self.apply_secret(source(&secret.name), secret);
                }
                self.refresh_peers();
            }
            SecretReport::Applied(secret) => {
                self.apply_secret(source(&secret.name), secret);
                self.refresh_peers();
            }
            SecretReport::Deleted(name) => {
                self.remove(&source(&name));
                self.peer_secrets.remove(&name);
                self.refresh_peers();
            }
            SecretReport::Failed(error) => {
                tracing::warn!(namespace = %namespace, %error, "watching remote-cluster Secrets failed");
                secrets.error = Some(error);
            }
        }
    }

    fn apply_secret(&mut self, source: ClusterSource, secret: RemoteSecret) {
        let kubeconfig = match secret.link {
            RemoteLink::Api(kubeconfig) => kubeconfig,
            RemoteLink::Feed(peer) => {
                // The same Secret may have linked through the API before.
                self.remove(&source);
                self.peer_secrets.insert(secret.name, peer);
                return;
            }
        };
        self.peer_secrets.remove(&secret.name);
        let same =
            |entry: &Entry| matches!(&entry.connect, Connect::Kubeconfig(k) if *k == kubeconfig);
        if self.clusters.get(&source).is_some_and(same) {
            // Back to the kubeconfig in use: a replacement under way is moot.
            if self.replacements.remove(&source).is_some() {
                tracing::info!(cluster = %source, "remote cluster Secret changed back; keeping the connection in use");
            }
            return;
        }
        if self.replacements.get(&source).is_some_and(same) {
            return;
        }
        if self.clusters.contains_key(&source) {
            // Make before break: the old connection's objects keep serving
            // until the new connection has synced.
            tracing::info!(cluster = %source, "remote cluster Secret changed; connecting anew, the current connection serves until the new one has synced");
            let entry = self.connect(&source, Connect::Kubeconfig(kubeconfig));
            self.replacements.insert(source, entry);
        } else {
            tracing::info!(cluster = %source, "remote cluster added");
            self.add(source, Connect::Kubeconfig(kubeconfig));
        }
    }

    /// Applies a report of a replacement connection; once it has synced
    /// it takes the place of the connection in use, whose task ends.
    pub(super) fn replacement_report(&mut self, source: &ClusterSource, report: ClusterReport) {
        let Some(entry) = self.replacements.get_mut(source) else {
            return;
        };
        // Its objects are not in the set yet: what changes is not `set_dirty`.
        entry.apply(source, report);
        if !entry.store.synced() {
            return;
        }
        let Some(mut entry) = self.replacements.remove(source) else {
            return;
        };
        entry.set_state(SyncState::Synced);
        entry.last_synced = Some(entry.since_text.clone());
        tracing::info!(cluster = %source, "remote cluster's new connection synced; it replaces the old one");
        // Dropping the old entry ends its task.
        self.clusters.insert(source.clone(), entry);
        self.set_dirty = true;
    }
}
