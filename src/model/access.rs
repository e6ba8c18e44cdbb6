//! Who may reach a multi-cluster service through a gateway: the optional
//! per-service policy a ServiceExport states in two annotations. Without
//! them every cluster of the cluster set may call; with them only the
//! clusters named, and the clusters of the networks named. Pure: parsing
//! and the decision, nothing else.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::Serialize;

use super::{ClusterId, IdError, NetworkId};

/// ServiceExport annotation: the clusters that may call, comma-separated.
pub const ALLOWED_CLUSTERS_ANNOTATION: &str = "strait.dev/allowed-clusters";
/// ServiceExport annotation: the networks whose clusters may call, comma-separated.
pub const ALLOWED_NETWORKS_ANNOTATION: &str = "strait.dev/allowed-networks";

/// The callers a service admits: a caller is admitted when its cluster is
/// listed or its cluster's network is. At least one of the two is non-empty.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AccessPolicy {
    #[serde(skip_serializing_if = "BTreeSet::is_empty")]
    pub clusters: BTreeSet<ClusterId>,
    #[serde(skip_serializing_if = "BTreeSet::is_empty")]
    pub networks: BTreeSet<NetworkId>,
}

/// Why an access annotation was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AccessPolicyError {
    #[error(
        "lists nothing; remove the annotation to admit every cluster of the cluster set, or name who may call"
    )]
    Empty,
    #[error("entry {entry:?} {source}")]
    InvalidEntry { entry: String, source: IdError },
}

impl AccessPolicy {
    /// Reads the policy from a ServiceExport's annotations: `Ok(None)` when
    /// neither annotation is there. An error names the annotation at fault.
    pub fn from_annotations(
        annotations: &BTreeMap<String, String>,
    ) -> Result<Option<Self>, (&'static str, AccessPolicyError)> {
        let clusters = annotations.get(ALLOWED_CLUSTERS_ANNOTATION);
        let networks = annotations.get(ALLOWED_NETWORKS_ANNOTATION);
        if clusters.is_none() && networks.is_none() {
            return Ok(None);
        }
        let clusters = clusters
            .map(|value| parse_list(value, ClusterId::new))
            .transpose()
            .map_err(|error| (ALLOWED_CLUSTERS_ANNOTATION, error))?
            .unwrap_or_default();
        let networks = networks
            .map(|value| parse_list(value, NetworkId::new))
            .transpose()
            .map_err(|error| (ALLOWED_NETWORKS_ANNOTATION, error))?
            .unwrap_or_default();
        Ok(Some(Self { clusters, networks }))
    }

    /// Whether a caller of `cluster`, on `network`, is admitted. `network`
    /// is `None` when the caller's network is only what its cluster says
    /// of itself (no network map attests it): it then admits by cluster
    /// alone, as a member cluster may not vouch for its own network.
    pub fn admits(&self, cluster: &ClusterId, network: Option<&NetworkId>) -> bool {
        self.clusters.contains(cluster)
            || network.is_some_and(|network| self.networks.contains(network))
    }
}

impl fmt::Display for AccessPolicy {
    /// `clusters c1,c2; networks net-a`, naming only what is listed.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        describe(f, &self.clusters, &self.networks, "nobody")
    }
}

/// `clusters c1,c2; networks net-a`, naming only what is listed; `none`
/// when nothing is.
pub(super) fn describe(
    f: &mut fmt::Formatter<'_>,
    clusters: &BTreeSet<ClusterId>,
    networks: &BTreeSet<NetworkId>,
    none: &str,
) -> fmt::Result {
    let join = |ids: Vec<&str>| ids.join(",");
    let clusters = join(clusters.iter().map(ClusterId::as_str).collect());
    let networks = join(networks.iter().map(NetworkId::as_str).collect());
    match (clusters.is_empty(), networks.is_empty()) {
        (false, false) => write!(f, "clusters {clusters}; networks {networks}"),
        (false, true) => write!(f, "clusters {clusters}"),
        (true, false) => write!(f, "networks {networks}"),
        (true, true) => f.write_str(none),
    }
}

/// A comma-separated list of ids; blanks around entries are ignored.
pub(super) fn parse_list<T: Ord>(
    value: &str,
    parse: impl Fn(&str) -> Result<T, IdError>,
) -> Result<BTreeSet<T>, AccessPolicyError> {
    let mut ids = BTreeSet::new();
    for entry in value.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let id = parse(entry).map_err(|source| AccessPolicyError::InvalidEntry {
            entry: entry.to_owned(),
            source,
        })?;
        ids.insert(id);
    }
    if ids.is_empty() {
        return Err(AccessPolicyError::Empty);
    }
    Ok(ids)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn annotations(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn cluster(id: &str) -> ClusterId {
        ClusterId::new(id).expect("valid test id")
    }

    fn network(id: &str) -> NetworkId {
        NetworkId::new(id).expect("valid test id")
    }

    #[test]
    fn no_annotation_is_no_policy() {
        let unrelated = annotations(&[("example.com/owner", "team-a")]);
        assert_eq!(AccessPolicy::from_annotations(&unrelated), Ok(None));
    }

    #[test]
    fn clusters_or_networks_admit() {
        let policy = AccessPolicy::from_annotations(&annotations(&[
            (ALLOWED_CLUSTERS_ANNOTATION, " c1, c2 ,"),
            (ALLOWED_NETWORKS_ANNOTATION, "net-b"),
        ]))
        .expect("valid")
        .expect("a policy");
        assert!(policy.admits(&cluster("c1"), Some(&network("net-a"))));
        assert!(policy.admits(&cluster("c9"), Some(&network("net-b"))));
        assert!(!policy.admits(&cluster("c3"), Some(&network("net-a"))));
        // A network no map attests admits no one: only the listed cluster.
        assert!(!policy.admits(&cluster("c9"), None));
        assert!(policy.admits(&cluster("c1"), None));
        assert_eq!(policy.to_string(), "clusters c1,c2; networks net-b");
    }

    #[test]
    fn a_clusters_only_policy_ignores_networks() {
        let policy =
            AccessPolicy::from_annotations(&annotations(&[(ALLOWED_CLUSTERS_ANNOTATION, "c2")]))
                .expect("valid")
                .expect("a policy");
        assert!(!policy.admits(&cluster("c1"), Some(&network("default"))));
        assert!(policy.admits(&cluster("c2"), Some(&network("default"))));
        assert_eq!(policy.to_string(), "clusters c2");
    }

    #[test]
    fn bad_values_name_the_annotation_and_the_entry() {
        let (annotation, error) =
            AccessPolicy::from_annotations(&annotations(&[(ALLOWED_NETWORKS_ANNOTATION, " , ")]))
                .expect_err("empty");
        assert_eq!(annotation, ALLOWED_NETWORKS_ANNOTATION);
        assert_eq!(error, AccessPolicyError::Empty);
        let (annotation, error) = AccessPolicy::from_annotations(&annotations(&[(
            ALLOWED_CLUSTERS_ANNOTATION,
            "c1,Evil_Cluster",
        )]))
        .expect_err("not an id");
        assert_eq!(annotation, ALLOWED_CLUSTERS_ANNOTATION);
        assert!(
            error.to_string().starts_with("entry \"Evil_Cluster\" "),
            "{error}"
        );
    }
}
