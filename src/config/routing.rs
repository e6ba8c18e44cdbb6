//! `routing` in `gateway.yaml`: this cluster's admin's layer of the
//! routing policy of the services it imports. Each entry overrides, field
//! by field, what the service's exporter says in its ServiceExport's
//! annotations. It lives in the gateway's own settings (the ConfigMap in
//! Strait's namespace, or the file), which only the cluster's admin writes:
//! no tenant's object can set it.

use std::collections::BTreeSet;

use serde::Deserialize;

use crate::model::{
    ClusterId, Fence, Locality, NetworkId, RoutingPolicy, ServiceKey, is_dns_label,
};

/// One service's policy as the admin sets it.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ServiceRouting {
    /// `namespace/name` of the imported service.
    pub service: String,
    #[serde(default)]
    pub locality: Option<Locality>,
    #[serde(default)]
    pub locality_minimum_healthy: Option<u32>,
    #[serde(default)]
    pub fence: Option<FenceSettings>,
}

/// The only clusters and networks whose backends may serve the service.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FenceSettings {
    #[serde(default)]
    pub clusters: Vec<String>,
    #[serde(default)]
    pub networks: Vec<String>,
}

/// The entries as policies by service, checked; an error is the field at
/// fault (`routing[1].fence.networks`) and what is wrong with it.
pub fn admin_policies(
    entries: &[ServiceRouting],
) -> Result<Vec<(ServiceKey, RoutingPolicy)>, (String, String)> {
    let mut seen = BTreeSet::new();
    let mut policies = Vec::with_capacity(entries.len());
    for (index, entry) in entries.iter().enumerate() {
        let field = |name: &str| format!("routing[{index}].{name}");
        let key = entry
            .service
            .split_once('/')
            .filter(|(namespace, name)| is_dns_label(namespace) && is_dns_label(name))
            .map(|(namespace, name)| ServiceKey::new(namespace, name))
            .ok_or_else(|| {
                (
                    field("service"),
                    format!("{:?} is not namespace/name", entry.service),
                )
            })?;
        if !seen.insert(key.clone()) {
            return Err((
                field("service"),
                format!("{key} has an earlier entry; one entry per service"),
            ));
        }
        if entry.locality_minimum_healthy == Some(0) {
            return Err((
                field("localityMinimumHealthy"),
                "must be at least 1 (1: a tier with any backend takes every connection)".to_owned(),
            ));
        }
        let fence = match &entry.fence {
            None => None,
            Some(fence) => {
                let mut clusters = BTreeSet::new();
                for cluster in &fence.clusters {
                    clusters.insert(ClusterId::new(cluster).map_err(|e| {
                        (field("fence.clusters"), format!("cluster {cluster:?}: {e}"))
                    })?);
                }
                let mut networks = BTreeSet::new();
                for network in &fence.networks {
                    networks.insert(NetworkId::new(network).map_err(|e| {
                        (field("fence.networks"), format!("network {network:?}: {e}"))
                    })?);
                }
                if clusters.is_empty() && networks.is_empty() {
                    return Err((
                        field("fence"),
                        "lists nothing; remove it to leave the fence to the exporter, or name the clusters or networks".to_owned(),
                    ));
                }
                Some(Fence { clusters, networks })
            }
        };
        policies.push((
            key,
            RoutingPolicy {
                locality: entry.locality,
                locality_minimum_healthy: entry.locality_minimum_healthy,
                fence,
            },
        ));
    }
    Ok(policies)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries(yaml: &str) -> Vec<ServiceRouting> {
        let value = crate::discovery::yaml::parse_single(yaml).expect("YAML");
        serde_json::from_value(value).expect("entries")
    }

    #[test]
    fn entries_become_policies_by_service() {
        let policies = admin_policies(&entries(
            "- service: shop/cart\n  locality: network\n  localityMinimumHealthy: 2\n  fence:\n    networks: [net-a]\n",
        ))
        .expect("valid");
        let (key, policy) = &policies[0];
        assert_eq!(key.to_string(), "shop/cart");
        assert_eq!(
            policy.to_string(),
            "locality network; minimum 2; fence networks net-a"
        );
    }

    #[test]
    fn each_refusal_names_its_field() {
        let refused = |yaml: &str| admin_policies(&entries(yaml)).expect_err("refused").0;
        assert_eq!(refused("- service: cart\n"), "routing[0].service");
        assert_eq!(
            refused("- service: shop/cart\n- service: shop/cart\n"),
            "routing[1].service"
        );
        assert_eq!(
            refused("- service: a/b\n  localityMinimumHealthy: 0\n"),
            "routing[0].localityMinimumHealthy"
        );
        assert_eq!(refused("- service: a/b\n  fence: {}\n"), "routing[0].fence");
        assert_eq!(
            refused("- service: a/b\n  fence:\n    networks: [Net_A]\n"),
            "routing[0].fence.networks"
        );
    }
}
