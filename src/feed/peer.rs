//! A peer followed by its feed, as a cluster of the set. Who the peer is,
//! its network and where to reach it first are the local admin's word
//! (`kube.peers` in `gateway.yaml`); what it exports, and its gateways once
//! it has said, are the feed's. Pure.

use std::fmt;
use std::sync::Arc;

use rustls_pki_types::CertificateDer;

use super::follow::PeerState;
use crate::diagnostics::{Diagnostic, Origin};
use crate::model::{Cluster, ClusterId, ClusterService, GatewayAddress, NetworkId, ServiceKey};

/// A peer whose exported state comes from its feed, as the admin
/// configured it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FeedPeer {
    pub cluster: ClusterId,
    /// The network the admin attests for it: never the peer's own word.
    pub network: NetworkId,
    /// Where its feed is read (and its traffic sent until its feed names
    /// its gateways).
    pub gateways: Vec<GatewayAddress>,
    /// Where the admin said so.
    pub origin: PeerOrigin,
    /// The CA that issues the peer's gateway identity, when the admin's
    /// record carries it (a peer Secret's `ca.crt`): trusted for that
    /// cluster alone, beside the gateway's own `ca.crt`.
    pub authority: Option<CertificateDer<'static>>,
}

/// Where the admin named a peer.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum PeerOrigin {
    /// `kube.peers` in `gateway.yaml`.
    Config,
    /// A peer Secret of the remote-cluster Secrets' namespace.
    Secret { namespace: String, name: String },
}

impl fmt::Display for PeerOrigin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PeerOrigin::Config => f.write_str("kube.peers"),
            PeerOrigin::Secret { namespace, name } => write!(f, "Secret {namespace}/{name}"),
        }
    }
}

impl FeedPeer {
    /// A peer named in `gateway.yaml`, its trust from `ca.crt` alone.
    pub fn configured(
        cluster: ClusterId,
        network: NetworkId,
        gateways: Vec<GatewayAddress>,
    ) -> Self {
        Self {
            cluster,
            network,
            gateways,
            origin: PeerOrigin::Config,
            authority: None,
        }
    }

    /// How the peer is named as a source in statuses and findings.
    pub fn source(&self) -> String {
        format!("feed {}", self.cluster)
    }

    /// The peer before its feed has synced: a member of the set with the
    /// configured gateways and no services, so it may call this gateway
    /// (and read its feed) from the start.
    pub fn cluster(&self) -> Cluster {
        let mut cluster = Cluster::new(self.cluster.clone(), self.network.clone(), self.source());
        cluster.network_attested = true;
        cluster.gateways = self.gateways.clone();
        cluster
    }

    /// Applies a synced batch to `cluster` (this peer's): the services it
    /// changed replaced or removed, every other one kept as the same
    /// allocation; the cluster set and gateways as the feed says (the
    /// configured gateways while it names none it may). Findings for
    /// gateways it names that cannot be read.
    pub fn apply(
        &self,
        cluster: &mut Cluster,
        state: &PeerState,
        changed: &[ServiceKey],
    ) -> Vec<Diagnostic> {
        for key in changed {
            match state.services.get(key) {
                Some(service) => {
                    cluster.services.insert(key.clone(), Arc::clone(service));
                }
                None => {
                    cluster.services.remove(key);
                }
            }
        }
        cluster.clusterset.clone_from(&state.clusterset);
        let mut findings = Vec::new();
        let mut gateways = Vec::new();
        for (index, text) in state.gateways.iter().enumerate() {
            match text.parse::<GatewayAddress>() {
                Ok(address) => gateways.push(address),
                Err(error) => findings.push(
                    Diagnostic::warning(Origin::file(self.source()), error.to_string())
                        .object("hello")
                        .field(format!("gateways[{index}]"))
                        .in_cluster(self.cluster.as_str()),
                ),
            }
        }
        cluster.gateways = if gateways.is_empty() {
            self.gateways.clone()
        } else {
            gateways
        };
        findings
    }
}

/// `cluster` with no endpoints: a peer whose feed has said nothing for the
/// stale time keeps its services (its imports stay) but no backends, as a
/// cluster whose API server is unreachable does.
pub fn without_endpoints(cluster: &Cluster) -> Cluster {
    let mut stale = cluster.clone();
    stale.edit_services(|service: &mut ClusterService| service.endpoint_groups.clear());
    stale
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Shared;
    use crate::testing::exported_http;

    fn peer() -> FeedPeer {
        FeedPeer::configured(
            ClusterId::new("c3").unwrap(),
            NetworkId::new("net-b").unwrap(),
            vec!["gw.c3.example:15008".parse().unwrap()],
        )
    }

    fn state(services: &[(&str, &str)], gateways: &[&str]) -> PeerState {
        PeerState {
            clusterset: Some("set.example".to_owned()),
            gateways: gateways.iter().map(|g| (*g).to_owned()).collect(),
            services: services
                .iter()
                .map(|(name, address)| {
                    let service = exported_http(name, address);
                    (service.key.clone(), Arc::new(service))
                })
                .collect::<Shared<_, _>>(),
        }
    }

    fn key(name: &str) -> ServiceKey {
        exported_http(name, "10.3.0.1").key
    }

    #[test]
    fn a_peer_is_a_member_with_the_admins_network_before_its_feed_says_anything() {
        let cluster = peer().cluster();
        assert_eq!(cluster.id.as_str(), "c3");
        assert_eq!(cluster.network.as_str(), "net-b");
        assert!(cluster.network_attested, "the admin's word, not the peer's");
        assert_eq!(cluster.gateways, peer().gateways);
        assert!(cluster.services.is_empty());
    }

    #[test]
    fn a_batch_changes_only_the_services_it_names() {
        let peer = peer();
        let mut cluster = peer.cluster();
        let first = state(&[("cart", "10.3.0.7"), ("shop", "10.3.0.9")], &[]);
        peer.apply(&mut cluster, &first, &[key("cart"), key("shop")]);
        let shop_before = Arc::clone(&cluster.services[&key("shop")]);
        // cart changes, shop does not, ledger goes (it was never held).
        let second = state(&[("cart", "10.3.0.8"), ("shop", "10.3.0.9")], &[]);
        peer.apply(&mut cluster, &second, &[key("cart"), key("ledger")]);
        assert_eq!(
            cluster.services[&key("cart")],
            second.services[&key("cart")]
        );
        assert!(
            Arc::ptr_eq(&cluster.services[&key("shop")], &shop_before),
            "an unchanged service stays the same allocation"
        );
        // A withdrawal removes it.
        let third = state(&[("shop", "10.3.0.9")], &[]);
        peer.apply(&mut cluster, &third, &[key("cart")]);
        assert_eq!(
            cluster.services.keys().cloned().collect::<Vec<_>>(),
            [key("shop")]
        );
        assert_eq!(cluster.clusterset.as_deref(), Some("set.example"));
    }

    #[test]
    fn the_feeds_gateways_replace_the_configured_ones_and_bad_ones_are_findings() {
        let peer = peer();
        let mut cluster = peer.cluster();
        let said = state(&[], &["203.0.113.3:15008", "no port", "[fd00::3]:15008"]);
        let findings = peer.apply(&mut cluster, &said, &[]);
        assert_eq!(
            cluster
                .gateways
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>(),
            ["203.0.113.3:15008", "[fd00::3]:15008"]
        );
        assert_eq!(findings.len(), 1, "{findings:?}");
        assert_eq!(findings[0].field.as_deref(), Some("gateways[1]"));
        // A feed naming none leaves the configured ones.
        peer.apply(&mut cluster, &state(&[], &[]), &[]);
        assert_eq!(cluster.gateways, peer.gateways);
    }

    #[test]
    fn a_stale_peer_keeps_its_services_without_endpoints() {
        let peer = peer();
        let mut cluster = peer.cluster();
        peer.apply(
            &mut cluster,
            &state(&[("cart", "10.3.0.7")], &[]),
            &[key("cart")],
        );
        let stale = without_endpoints(&cluster);
        assert!(stale.services[&key("cart")].endpoint_groups.is_empty());
        assert!(
            !cluster.services[&key("cart")].endpoint_groups.is_empty(),
            "the held state keeps them for when the feed is back"
        );
    }
}
