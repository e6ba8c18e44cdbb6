//! Where a service's connections may go when it has backends in several
//! clusters: the locality tiers, the minimum that grades spillover between
//! them, and the fence no connection leaves. Each is optional in a
//! [`RoutingPolicy`]; what one policy leaves unsaid comes from the next
//! (the importing cluster's admin over the exporter's annotations over the
//! Service's `trafficDistribution` over the gateway's `tuning`). Pure:
//! parsing and layering, nothing else.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::{Deserialize, Serialize};

use super::access::{AccessPolicyError, describe, parse_list};
use super::{ClusterId, NetworkId};

/// ServiceExport annotation: the locality tiers (`none`, `cluster`, `network`).
pub const LOCALITY_ANNOTATION: &str = "strait.dev/locality";
/// ServiceExport annotation: backends a tier needs to take every connection.
pub const LOCALITY_MINIMUM_ANNOTATION: &str = "strait.dev/locality-minimum-healthy";
/// ServiceExport annotation: the only clusters whose backends may serve.
pub const FENCE_CLUSTERS_ANNOTATION: &str = "strait.dev/fence-clusters";
/// ServiceExport annotation: the only networks whose backends may serve.
pub const FENCE_NETWORKS_ANNOTATION: &str = "strait.dev/fence-networks";

/// Which backends are preferred when several may carry a connection.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Locality {
    /// One tier: every backend alike.
    None,
    /// This cluster, then the rest of its network, then other networks:
    /// the default, as cost and latency grow in that order.
    #[default]
    Cluster,
    /// This network, then other networks.
    Network,
}

impl Locality {
    pub fn as_str(self) -> &'static str {
        match self {
            Locality::None => "none",
            Locality::Cluster => "cluster",
            Locality::Network => "network",
        }
    }

    /// The locality of this name (blanks around it ignored).
    pub fn of_name(value: &str) -> Option<Self> {
        match value.trim() {
            "none" => Some(Locality::None),
            "cluster" => Some(Locality::Cluster),
            "network" => Some(Locality::Network),
            _ => None,
        }
    }

    /// What a Service's `trafficDistribution` asks of a gateway: every
    /// value Kubernetes defines prefers what is close, and the closest a
    /// gateway knows is the caller's own cluster (a node or zone preference
    /// inside that cluster is kube-proxy's). `None`: it asks nothing.
    pub fn of_traffic_distribution(value: Option<&str>) -> Option<Self> {
        match value? {
            "PreferClose" | "PreferSameZone" | "PreferSameNode" => Some(Locality::Cluster),
            _ => None,
        }
    }
}

impl fmt::Display for Locality {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The backends a fenced service may use: those of the clusters listed and
/// those on the networks listed, where a backend's network counts only when
/// the network map attests it (a member cluster may not place itself
/// inside a fence by what it says of itself).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Fence {
    #[serde(skip_serializing_if = "BTreeSet::is_empty")]
    pub clusters: BTreeSet<ClusterId>,
    #[serde(skip_serializing_if = "BTreeSet::is_empty")]
    pub networks: BTreeSet<NetworkId>,
}

impl Fence {
    /// Whether a backend of `cluster`, on `network` as attested (`None`:
    /// unattested), is inside.
    pub fn admits(&self, cluster: &ClusterId, network: Option<&NetworkId>) -> bool {
        self.clusters.contains(cluster)
            || network.is_some_and(|network| self.networks.contains(network))
    }
}

impl fmt::Display for Fence {
    /// `clusters c1,c2; networks net-a`, naming only what is listed.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        describe(f, &self.clusters, &self.networks, "nothing")
    }
}

/// One layer of a service's routing policy; `None` fields leave the
/// decision to the layer below.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RoutingPolicy {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub locality: Option<Locality>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub locality_minimum_healthy: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fence: Option<Fence>,
}

/// Why a routing annotation was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RoutingPolicyError {
    #[error("{0:?} is not a locality; one of \"none\", \"cluster\", \"network\"")]
    Locality(String),
    #[error("{0:?} is not a count of at least 1")]
    Minimum(String),
    #[error(transparent)]
    Fence(#[from] AccessPolicyError),
}

impl RoutingPolicy {
    /// Reads the exporter's policy from a ServiceExport's annotations; an
    /// error names the annotation at fault.
    pub fn from_annotations(
        annotations: &BTreeMap<String, String>,
    ) -> Result<Self, (&'static str, RoutingPolicyError)> {
        let locality = annotations
            .get(LOCALITY_ANNOTATION)
            .map(|value| {
                Locality::of_name(value).ok_or_else(|| RoutingPolicyError::Locality(value.clone()))
            })
            .transpose()
            .map_err(|error| (LOCALITY_ANNOTATION, error))?;
        let locality_minimum_healthy = annotations
            .get(LOCALITY_MINIMUM_ANNOTATION)
            .map(|value| parse_minimum(value))
            .transpose()
            .map_err(|error| (LOCALITY_MINIMUM_ANNOTATION, error))?;
        let clusters = annotations.get(FENCE_CLUSTERS_ANNOTATION);
        let networks = annotations.get(FENCE_NETWORKS_ANNOTATION);
        let fence = if clusters.is_none() && networks.is_none() {
            None
        } else {
            let clusters = clusters
                .map(|value| parse_list(value, ClusterId::new))
                .transpose()
                .map_err(|error| (FENCE_CLUSTERS_ANNOTATION, error.into()))?
                .unwrap_or_default();
            let networks = networks
                .map(|value| parse_list(value, NetworkId::new))
                .transpose()
                .map_err(|error| (FENCE_NETWORKS_ANNOTATION, error.into()))?
                .unwrap_or_default();
            Some(Fence { clusters, networks })
        };
        Ok(Self {
            locality,
            locality_minimum_healthy,
            fence,
        })
    }

    pub fn is_empty(&self) -> bool {
        self.locality.is_none() && self.locality_minimum_healthy.is_none() && self.fence.is_none()
    }

    /// This layer over `below`: each field from here when it is set.
    pub fn over(&self, below: &RoutingPolicy) -> RoutingPolicy {
        RoutingPolicy {
            locality: self.locality.or(below.locality),
            locality_minimum_healthy: self
                .locality_minimum_healthy
                .or(below.locality_minimum_healthy),
            fence: self.fence.clone().or_else(|| below.fence.clone()),
        }
    }
}

impl fmt::Display for RoutingPolicy {
    /// `locality cluster; minimum 2; fence networks net-a`, naming only what is set.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        if let Some(locality) = self.locality {
            parts.push(format!("locality {locality}"));
        }
        if let Some(minimum) = self.locality_minimum_healthy {
            parts.push(format!("minimum {minimum}"));
        }
        if let Some(fence) = &self.fence {
            parts.push(format!("fence {fence}"));
        }
        if parts.is_empty() {
            return f.write_str("none");
        }
        f.write_str(&parts.join("; "))
    }
}

/// A count of at least 1.
pub fn parse_minimum(value: &str) -> Result<u32, RoutingPolicyError> {
    value
        .trim()
        .parse::<u32>()
        .ok()
        .filter(|count| *count >= 1)
        .ok_or_else(|| RoutingPolicyError::Minimum(value.to_owned()))
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
    fn no_annotation_is_an_empty_layer() {
        let policy = RoutingPolicy::from_annotations(&annotations(&[("example.com/a", "b")]))
            .expect("valid");
        assert!(policy.is_empty());
        assert_eq!(policy.to_string(), "none");
    }

    #[test]
    fn every_annotation_is_read() {
        let policy = RoutingPolicy::from_annotations(&annotations(&[
            (LOCALITY_ANNOTATION, " network "),
            (LOCALITY_MINIMUM_ANNOTATION, "3"),
            (FENCE_NETWORKS_ANNOTATION, "net-a"),
            (FENCE_CLUSTERS_ANNOTATION, "c9"),
        ]))
        .expect("valid");
        assert_eq!(policy.locality, Some(Locality::Network));
        assert_eq!(policy.locality_minimum_healthy, Some(3));
        let fence = policy.fence.as_ref().expect("a fence");
        assert!(fence.admits(&cluster("c1"), Some(&network("net-a"))));
        assert!(fence.admits(&cluster("c9"), Some(&network("net-b"))));
        assert!(!fence.admits(&cluster("c3"), Some(&network("net-b"))));
        // A network no map attests puts no backend inside the fence.
        assert!(!fence.admits(&cluster("c1"), None));
        assert_eq!(
            policy.to_string(),
            "locality network; minimum 3; fence clusters c9; networks net-a"
        );
    }

    #[test]
    fn bad_values_name_the_annotation() {
        let refused = |pairs: &[(&str, &str)]| {
            RoutingPolicy::from_annotations(&annotations(pairs)).expect_err("refused")
        };
        let (annotation, error) = refused(&[(LOCALITY_ANNOTATION, "zone")]);
        assert_eq!(annotation, LOCALITY_ANNOTATION);
        assert!(error.to_string().contains("\"zone\" is not a locality"));
        for bad in ["0", "-1", "two", ""] {
            let (annotation, _) = refused(&[(LOCALITY_MINIMUM_ANNOTATION, bad)]);
            assert_eq!(annotation, LOCALITY_MINIMUM_ANNOTATION, "{bad:?}");
        }
        let (annotation, error) = refused(&[(FENCE_NETWORKS_ANNOTATION, " , ")]);
        assert_eq!(annotation, FENCE_NETWORKS_ANNOTATION);
        assert_eq!(error, RoutingPolicyError::Fence(AccessPolicyError::Empty));
        let (annotation, _) = refused(&[(FENCE_CLUSTERS_ANNOTATION, "Bad_Id")]);
        assert_eq!(annotation, FENCE_CLUSTERS_ANNOTATION);
    }

    #[test]
    fn a_layer_says_only_what_it_sets() {
        let admin = RoutingPolicy {
            locality: Some(Locality::None),
            ..RoutingPolicy::default()
        };
        let exporter = RoutingPolicy {
            locality: Some(Locality::Network),
            locality_minimum_healthy: Some(4),
            fence: None,
        };
        let layered = admin.over(&exporter);
        assert_eq!(layered.locality, Some(Locality::None));
        assert_eq!(layered.locality_minimum_healthy, Some(4));
        assert_eq!(layered.fence, None);
    }

    #[test]
    fn every_traffic_distribution_prefers_the_callers_cluster() {
        for value in ["PreferClose", "PreferSameZone", "PreferSameNode"] {
            assert_eq!(
                Locality::of_traffic_distribution(Some(value)),
                Some(Locality::Cluster)
            );
        }
        assert_eq!(Locality::of_traffic_distribution(Some("Unknown")), None);
        assert_eq!(Locality::of_traffic_distribution(None), None);
    }
}
