//! `kube.peers`: the clusters whose exported state this gateway reads from
//! their feed over the tunnel, not from their API servers. Each entry is
//! the local admin's word for a peer's identity, network and first
//! gateway addresses; checked here, with errors naming the entry's field.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::feed::FeedPeer;
use crate::feed::record::{Said, check};
use crate::model::{ClusterId, NetworkId};

/// One peer as `gateway.yaml` names it.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PeerSettings {
    /// The peer's cluster id: its gateway's certificate and its feed must
    /// name it.
    pub cluster: String,
    /// Its network, as this cluster's admin attests it. May be left out
    /// when `networks` names the cluster (the map's then); must agree with
    /// it otherwise.
    #[serde(default)]
    pub network: Option<String>,
    /// Its gateways' tunnel addresses (`host:port`): where its feed is
    /// read, tried in turn.
    pub gateways: Vec<String>,
}

/// Checks every entry against the network map and the local cluster's id;
/// an error is the field (`kube.peers[N].…`) and what is wrong with it.
pub(super) fn feed_peers(
    peers: &[PeerSettings],
    networks: Option<&BTreeMap<ClusterId, NetworkId>>,
    local: Option<&str>,
) -> Result<Vec<FeedPeer>, (String, String)> {
    let mut checked: Vec<FeedPeer> = Vec::with_capacity(peers.len());
    for (index, peer) in peers.iter().enumerate() {
        let field = |name: &str| format!("kube.peers[{index}].{name}");
        let said = Said {
            cluster: &peer.cluster,
            network: peer.network.as_deref(),
            gateways: peer.gateways.iter().map(String::as_str).collect(),
        };
        let peer = check(&said, networks, local, &field)?;
        if checked.iter().any(|p| p.cluster == peer.cluster) {
            return Err((
                field("cluster"),
                format!("{} is listed twice", peer.cluster),
            ));
        }
        checked.push(peer);
    }
    Ok(checked)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(cluster: &str, network: Option<&str>, gateways: &[&str]) -> PeerSettings {
        PeerSettings {
            cluster: cluster.to_owned(),
            network: network.map(str::to_owned),
            gateways: gateways.iter().map(|g| (*g).to_owned()).collect(),
        }
    }

    fn id(text: &str) -> ClusterId {
        ClusterId::new(text).unwrap()
    }

    fn net(text: &str) -> NetworkId {
        NetworkId::new(text).unwrap()
    }

    #[test]
    fn a_peer_takes_its_network_from_the_admin_and_its_gateways_parsed() {
        let peers = [peer(
            "c3",
            Some("net-b"),
            &["10.0.3.1:15443", "[fd00::3]:15443"],
        )];
        let checked = feed_peers(&peers, None, Some("c1")).unwrap();
        assert_eq!(checked[0].cluster, id("c3"));
        assert_eq!(checked[0].network, net("net-b"));
        assert_eq!(
            checked[0]
                .gateways
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>(),
            ["10.0.3.1:15443", "[fd00::3]:15443"]
        );
        // The network map's word stands in for a network left out.
        let map = BTreeMap::from([(id("c3"), net("net-b"))]);
        let checked = feed_peers(&[peer("c3", None, &["gw.example:15443"])], Some(&map), None);
        assert_eq!(checked.unwrap()[0].network, net("net-b"));
    }

    /// Peers, the network map, and the field the error must name.
    type Case<'a> = (
        Vec<PeerSettings>,
        Option<&'a BTreeMap<ClusterId, NetworkId>>,
        &'static str,
    );

    #[test]
    fn each_mistake_names_its_field() {
        let map = BTreeMap::from([(id("c3"), net("net-b"))]);
        let cases: [Case<'_>; 8] = [
            (
                vec![peer("C3!", Some("n"), &["a:1"])],
                None,
                "kube.peers[0].cluster",
            ),
            (
                vec![peer("c1", Some("n"), &["a:1"])],
                None,
                "kube.peers[0].cluster",
            ),
            (
                vec![
                    peer("c3", Some("n"), &["a:1"]),
                    peer("c3", Some("n"), &["a:1"]),
                ],
                None,
                "kube.peers[1].cluster",
            ),
            (
                vec![peer("c3", None, &["a:1"])],
                None,
                "kube.peers[0].network",
            ),
            (
                vec![peer("c3", Some("net-a"), &["a:1"])],
                Some(&map),
                "kube.peers[0].network",
            ),
            (
                vec![peer("c4", Some("net-b"), &["a:1"])],
                Some(&map),
                "kube.peers[0].cluster",
            ),
            (
                vec![peer("c3", Some("n"), &[])],
                None,
                "kube.peers[0].gateways",
            ),
            (
                vec![peer("c3", Some("n"), &["a:1", "a"])],
                None,
                "kube.peers[0].gateways[1]",
            ),
        ];
        for (peers, networks, field) in cases {
            let error = feed_peers(&peers, networks, Some("c1")).unwrap_err();
            assert_eq!(error.0, field, "{peers:?}: {}", error.1);
        }
    }
}
