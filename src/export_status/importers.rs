//! The import account: which of the services a cluster exports another
//! cluster imports, and why not where it does not. The importing cluster
//! says it, for the exporting cluster's gateway only, when that gateway
//! asks (the `imports` of the about answer, docs/tunnel-protocol.md §11);
//! the exporting cluster writes it into its ServiceExports' `Ready`
//! message, and `strait check` names the clusters that do not import.
//! Pure: the merged set, the namespaces and what the cluster holds come
//! in as arguments.
//!
//! An exporter learns nothing here it did not already hold: the services
//! listed are those it exports itself, their namespaces its own names.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::discovery::observed::Observed;
use crate::merge::{MergedService, MergedSet};
use crate::model::{ClusterId, NetworkId, ServiceType};

/// How many bytes of service names one account lists at most; past it the
/// rest are counted in `unlisted`. Keeps an about answer of a cluster that
/// exports thousands of services well under the 256 KiB a peer reads.
pub const LISTED_BYTES: usize = 128 << 10;

/// Why a cluster does not import a service (yet).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NotImported {
    /// Its namespace does not exist in the importing cluster (namespace
    /// sameness: Strait never creates one).
    NoNamespace,
    /// A ServiceImport another controller made holds the name there.
    ForeignImport,
    /// It is to be imported, and the ServiceImport is not written yet (or
    /// this cluster does not write imports: `kube.manageImports` off).
    Pending,
}

impl NotImported {
    /// Why, said of the importing cluster ("there"), for a service of
    /// `namespace`.
    pub fn reason(self, namespace: &str) -> String {
        match self {
            NotImported::NoNamespace => {
                format!("namespace {namespace} does not exist there (Strait never creates one)")
            }
            NotImported::ForeignImport => {
                "a ServiceImport another controller made holds its name there".to_owned()
            }
            NotImported::Pending => {
                "its ServiceImport is not written there yet (or that cluster writes no imports)"
                    .to_owned()
            }
        }
    }
}

/// What one cluster says of the services another cluster exports.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ImportAccount {
    /// Services (`namespace/name`) the asking cluster exports that this
    /// cluster imports: its ServiceImport is Strait's.
    pub imported: BTreeSet<String>,
    /// Those it does not import, and why.
    pub not_imported: BTreeMap<String, NotImported>,
    /// Services left out of both lists past [`LISTED_BYTES`].
    #[serde(default, skip_serializing_if = "is_zero")]
    pub unlisted: usize,
}

fn is_zero(count: &usize) -> bool {
    *count == 0
}

impl ImportAccount {
    /// What this cluster, holding `observed` and the namespaces
    /// `namespaces`, imports of what `exporter` exports in `merged`.
    pub fn of(
        exporter: &ClusterId,
        merged: &MergedSet,
        namespaces: &BTreeSet<String>,
        observed: &Observed,
    ) -> ImportAccount {
        let mut account = ImportAccount::default();
        let mut listed = 0;
        let exported = merged.services.values().filter(|service| {
            service.service_type != ServiceType::ExternalName
                && service.constituents.contains(exporter)
        });
        for service in exported {
            let key = service.key.to_string();
            // The name, its quotes and comma, and at most a reason.
            listed += key.len() + 20;
            if listed > LISTED_BYTES {
                account.unlisted += 1;
                continue;
            }
            match not_imported(service, namespaces, observed) {
                None => {
                    account.imported.insert(key);
                }
                Some(why) => {
                    account.not_imported.insert(key, why);
                }
            }
        }
        account
    }
}

/// Why `service` is not imported here, if it is not (the rules of
/// `imports::plan`: a missing namespace, a ServiceImport another
/// controller holds and Strait may not adopt).
fn not_imported(
    service: &MergedService,
    namespaces: &BTreeSet<String>,
    observed: &Observed,
) -> Option<NotImported> {
    if !namespaces.contains(&service.key.namespace) {
        return Some(NotImported::NoNamespace);
    }
    match observed.imports.get(&service.key) {
        Some(import) if import.ours() => None,
        Some(import) if !observed.adoptable(import) => Some(NotImported::ForeignImport),
        _ => Some(NotImported::Pending),
    }
}

/// Gives the account for an asking exporter, from what this cluster holds
/// at the time of asking; `None` while it does not know.
pub type AccountOf = Arc<dyn Fn(&ClusterId) -> Option<ImportAccount> + Send + Sync>;

/// What each other cluster of the set last said of the local cluster's
/// exports, as this gateway's periodic question gathered it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PeerImports {
    /// Every other cluster of the set, with its network; `None` while it
    /// has given no account (its gateway did not answer yet, or answers
    /// without one).
    pub clusters: BTreeMap<ClusterId, (NetworkId, Option<Arc<ImportAccount>>)>,
}

/// One cluster's part in the account of one exported service.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Importer {
    Imports,
    DoesNot(NotImported),
    /// Its account does not list the service: it has not read it yet.
    NotHeard,
    /// It gave no account.
    Unknown,
}

impl PeerImports {
    /// Each cluster told of `service` (all of them, or those its access
    /// policy admits) and what it does with it.
    pub fn of(&self, service: &MergedService) -> Vec<(&ClusterId, Importer)> {
        let key = service.key.to_string();
        self.clusters
            .iter()
            .filter(|(cluster, (network, _))| {
                service
                    .access
                    .as_deref()
                    .is_none_or(|policy| policy.admits(cluster, Some(network)))
            })
            .map(|(cluster, (_, account))| {
                let importer = match account {
                    None => Importer::Unknown,
                    Some(account) if account.imported.contains(&key) => Importer::Imports,
                    Some(account) => match account.not_imported.get(&key) {
                        Some(why) => Importer::DoesNot(*why),
                        None => Importer::NotHeard,
                    },
                };
                (cluster, importer)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::sync::Arc;

    use serde_json::json;

    use super::*;
    use crate::discovery::observed::ObservedObject;
    use crate::merge::merge;
    use crate::model::ServiceKey;
    use crate::testing::{ServiceBuilder, cluster_set};

    fn id(name: &str) -> ClusterId {
        ClusterId::new(name).expect("id")
    }

    fn service(name: &str) -> crate::model::ClusterService {
        ServiceBuilder::new()
            .named(name)
            .port("http", 80, 8080)
            .exported_at(1)
            .endpoint("10.3.0.5")
    }

    fn import(name: &str, ours: bool) -> ObservedObject {
        let mut labels = serde_json::Map::new();
        if ours {
            labels.insert(
                crate::model::names::MANAGED_BY_LABEL.to_owned(),
                json!(crate::model::names::MANAGED_BY_VALUE),
            );
        }
        ObservedObject::new(json!({
            "kind": "ServiceImport",
            "metadata": {"name": name, "namespace": "shop", "labels": labels},
        }))
    }

    /// c1 and c3, c3 exporting `services` besides `cart`, c1 `mine` besides.
    fn set_with(services: &[String]) -> crate::model::ClusterSet {
        let mut set = cluster_set(&[
            ("c1", "net-a", service("cart")),
            ("c3", "net-b", service("cart")),
        ]);
        let mut add = |cluster: &str, name: &str| {
            let service = service(name);
            if let Some(cluster) = set.clusters.get_mut(&id(cluster)) {
                cluster.services.insert(service.key.clone(), service.into());
            }
        };
        add("c1", "mine");
        for name in services {
            add("c3", name);
        }
        set
    }

    #[test]
    fn each_service_the_asker_exports_is_imported_or_said_why_not() {
        let merged = merge(&set_with(&["web".to_owned(), "db".to_owned()]));
        let mut observed = Observed::default();
        observed.insert(import("cart", true));
        observed.insert(import("web", false));
        let shop = BTreeSet::from(["shop".to_owned()]);
        let account = ImportAccount::of(&id("c3"), &merged, &shop, &observed);
        assert_eq!(account.imported, BTreeSet::from(["shop/cart".to_owned()]));
        assert_eq!(
            account.not_imported,
            BTreeMap::from([
                ("shop/db".to_owned(), NotImported::Pending),
                ("shop/web".to_owned(), NotImported::ForeignImport),
            ])
        );
        // c1's own service is not c3's to hear of.
        assert!(!account.not_imported.contains_key("shop/mine"));
        let none = BTreeSet::new();
        let account = ImportAccount::of(&id("c3"), &merged, &none, &observed);
        assert!(account.imported.is_empty());
        assert_eq!(account.not_imported.len(), 3);
        assert!(
            account
                .not_imported
                .values()
                .all(|why| *why == NotImported::NoNamespace)
        );
    }

    #[test]
    fn a_large_account_lists_up_to_its_bytes_and_counts_the_rest() {
        let names: Vec<String> = (1..6_000)
            .map(|n| format!("service-with-a-long-name-{n:05}"))
            .collect();
        let merged = merge(&set_with(&names));
        let shop = BTreeSet::from(["shop".to_owned()]);
        let account = ImportAccount::of(&id("c3"), &merged, &shop, &Observed::default());
        let listed = account.imported.len() + account.not_imported.len();
        assert_eq!(listed + account.unlisted, 6_000);
        assert!(account.unlisted > 0, "{}", account.unlisted);
        let bytes = serde_json::to_vec(&account).expect("renders").len();
        assert!(bytes <= LISTED_BYTES + 1024, "{bytes}");
    }

    #[test]
    fn peers_are_named_per_service_and_a_scoped_service_only_to_those_admitted() {
        let set = cluster_set(&[("c1", "net-a", service("cart"))]);
        let merged = merge(&set);
        let cart = merged
            .services
            .get(&ServiceKey::new("shop", "cart"))
            .expect("merged")
            .clone();
        let heard = ImportAccount {
            imported: BTreeSet::from(["shop/cart".to_owned()]),
            ..ImportAccount::default()
        };
        let missing = ImportAccount {
            not_imported: BTreeMap::from([("shop/cart".to_owned(), NotImported::NoNamespace)]),
            ..ImportAccount::default()
        };
        let network = |n: &str| NetworkId::new(n).expect("network");
        let peers = PeerImports {
            clusters: BTreeMap::from([
                (id("c2"), (network("net-a"), Some(Arc::new(heard)))),
                (id("c3"), (network("net-b"), Some(Arc::new(missing)))),
                (
                    id("c4"),
                    (network("net-b"), Some(Arc::new(ImportAccount::default()))),
                ),
                (id("c5"), (network("net-b"), None)),
            ]),
        };
        assert_eq!(
            peers.of(&cart),
            [
                (&id("c2"), Importer::Imports),
                (&id("c3"), Importer::DoesNot(NotImported::NoNamespace)),
                (&id("c4"), Importer::NotHeard),
                (&id("c5"), Importer::Unknown),
            ]
        );
        let mut scoped = (*cart).clone();
        scoped.access = Some(Arc::new(crate::model::AccessPolicy {
            clusters: BTreeSet::from([id("c4")]),
            networks: BTreeSet::from([network("net-a")]),
        }));
        let told: Vec<&ClusterId> = peers.of(&scoped).into_iter().map(|(c, _)| c).collect();
        assert_eq!(told, [&id("c2"), &id("c4")]);
    }
}
