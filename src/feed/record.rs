//! A peer as the admin records it: an entry of `gateway.yaml`'s
//! `kube.peers` (`config::peers`) or a peer Secret, the document `strait
//! link export` prints. Checked here, each error naming its field. Pure.

use std::collections::BTreeMap;

use super::{FeedPeer, PeerOrigin};
use crate::model::{ClusterId, GatewayAddress, NetworkId};

/// The data keys of a peer Secret: a remote-cluster Secret that links its
/// cluster by its feed (`strait link export` writes one).
pub const PEER_CLUSTER_KEY: &str = "cluster";
pub const PEER_NETWORK_KEY: &str = "network";
/// Comma- or whitespace-separated `host:port` tunnel addresses.
pub const PEER_GATEWAYS_KEY: &str = "gateways";
/// The CA that issues the peer's gateway identity (one certificate naming
/// its cluster); optional when `ca.crt` of the gateway already trusts it.
pub const PEER_CA_KEY: &str = "ca.crt";

/// What one peer Secret holds, by data key (`None`: the key is absent).
#[derive(Debug, Clone, Default)]
pub struct PeerSecretData<'a> {
    pub cluster: Option<&'a [u8]>,
    pub network: Option<&'a [u8]>,
    pub gateways: Option<&'a [u8]>,
    pub ca: Option<&'a [u8]>,
}

/// Checks a peer Secret as [`feed_peers`] checks an entry of `gateway.yaml`,
/// and its CA (which must name the peer's cluster); an error is the data
/// field (`data.network`) and what is wrong with it.
pub fn peer_from_secret(
    namespace: &str,
    name: &str,
    data: &PeerSecretData<'_>,
    networks: Option<&BTreeMap<ClusterId, NetworkId>>,
    local: Option<&str>,
) -> Result<FeedPeer, (String, String)> {
    fn field(key: &str) -> String {
        format!("data.{key}")
    }
    fn text<'a>(key: &str, value: Option<&'a [u8]>) -> Result<Option<&'a str>, (String, String)> {
        value
            .map(|bytes| std::str::from_utf8(bytes).map(str::trim))
            .transpose()
            .map_err(|_| (field(key), "not UTF-8 text".to_owned()))
    }
    let cluster = text(PEER_CLUSTER_KEY, data.cluster)?.ok_or_else(|| {
        (
            field(PEER_CLUSTER_KEY),
            "required: the peer's cluster id".to_owned(),
        )
    })?;
    let said = Said {
        cluster,
        network: text(PEER_NETWORK_KEY, data.network)?,
        gateways: text(PEER_GATEWAYS_KEY, data.gateways)?
            .map(|list| {
                list.split(|c: char| c == ',' || c.is_whitespace())
                    .filter(|g| !g.is_empty())
                    .collect()
            })
            .unwrap_or_default(),
    };
    let mut peer = check(&said, networks, local, &field)?;
    peer.authority = data
        .ca
        .map(|pem| crate::tls::peer_authority(pem, &peer.cluster))
        .transpose()
        .map_err(|e| (field(PEER_CA_KEY), e.to_string()))?
        .map(|authority| authority.certificate);
    peer.origin = PeerOrigin::Secret {
        namespace: namespace.to_owned(),
        name: name.to_owned(),
    };
    Ok(peer)
}

/// One peer as the admin wrote it, wherever.
pub(crate) struct Said<'a> {
    pub(crate) cluster: &'a str,
    pub(crate) network: Option<&'a str>,
    pub(crate) gateways: Vec<&'a str>,
}

/// Checks one peer as the admin wrote it against the network map and
/// the local cluster's id; an error is the field (as `field` names it)
/// and what is wrong with it.
pub(crate) fn check(
    peer: &Said<'_>,
    networks: Option<&BTreeMap<ClusterId, NetworkId>>,
    local: Option<&str>,
    field: &dyn Fn(&str) -> String,
) -> Result<FeedPeer, (String, String)> {
    let cluster = ClusterId::new(peer.cluster)
        .map_err(|e| (field("cluster"), format!("invalid cluster id: {e}")))?;
    if local == Some(cluster.as_str()) {
        return Err((
            field("cluster"),
            format!("{cluster} is this cluster; a peer is another cluster"),
        ));
    }
    let stated = peer
        .network
        .map(NetworkId::new)
        .transpose()
        .map_err(|e| (field("network"), format!("invalid network: {e}")))?;
    let mapped = networks.map(|map| map.get(&cluster));
    let network = match (stated, mapped) {
        (Some(stated), Some(Some(mapped))) if stated != *mapped => {
            return Err((
                field("network"),
                format!("{stated}, but `networks` puts {cluster} on {mapped}"),
            ));
        }
        (_, Some(Some(mapped))) => mapped.clone(),
        (_, Some(None)) => {
            return Err((
                field("cluster"),
                format!(
                    "{cluster} is not in `networks`; with a network map, every cluster of the set is in it"
                ),
            ));
        }
        (Some(stated), None) => stated,
        (None, None) => {
            return Err((
                field("network"),
                format!(
                    "required: the network this cluster's admin attests for {cluster} (or `networks` naming it)"
                ),
            ));
        }
    };
    if peer.gateways.is_empty() {
        return Err((
            field("gateways"),
            "at least one gateway address (host:port) is needed to read its feed".to_owned(),
        ));
    }
    let mut gateways = Vec::with_capacity(peer.gateways.len());
    for (at, text) in peer.gateways.iter().enumerate() {
        let address: GatewayAddress = text
            .parse()
            .map_err(|e| (format!("{}[{at}]", field("gateways")), format!("{e}")))?;
        gateways.push(address);
    }
    Ok(FeedPeer::configured(cluster, network, gateways))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(text: &str) -> ClusterId {
        ClusterId::new(text).unwrap()
    }

    fn net(text: &str) -> NetworkId {
        NetworkId::new(text).unwrap()
    }

    /// A Secret's data, the network map, the field the error must name and
    /// what it must say.
    type SecretCase<'a> = (
        PeerSecretData<'a>,
        Option<&'a BTreeMap<ClusterId, NetworkId>>,
        &'static str,
        &'static str,
    );

    fn data<'a>(
        cluster: &'a str,
        network: Option<&'a str>,
        gateways: Option<&'a str>,
        ca: Option<&'a str>,
    ) -> PeerSecretData<'a> {
        PeerSecretData {
            cluster: Some(cluster.as_bytes()),
            network: network.map(str::as_bytes),
            gateways: gateways.map(str::as_bytes),
            ca: ca.map(str::as_bytes),
        }
    }

    #[test]
    fn a_peer_secret_names_its_peer_and_carries_its_own_ca() {
        let ca = crate::tls::generate_cluster_ca("set.example", &id("c3")).unwrap();
        let pem = ca.cert_pem();
        let said = data(
            "c3",
            Some("net-b"),
            Some("10.0.3.1:15443, gw.c3.example:15443\n"),
            Some(&pem),
        );
        let peer = peer_from_secret("strait-remotes", "c3", &said, None, Some("c1")).unwrap();
        assert_eq!(peer.cluster, id("c3"));
        assert_eq!(peer.network, net("net-b"));
        assert_eq!(peer.gateways.len(), 2, "{:?}", peer.gateways);
        assert!(peer.authority.is_some());
        assert_eq!(peer.origin.to_string(), "Secret strait-remotes/c3");
        // Without a CA, the gateway's ca.crt alone must trust it.
        let said = data("c3", Some("net-b"), Some("10.0.3.1:15443"), None);
        let peer = peer_from_secret("strait-remotes", "c3", &said, None, None).unwrap();
        assert!(peer.authority.is_none());
    }

    #[test]
    fn a_peer_secrets_mistakes_name_its_data_field() {
        let c3_ca = crate::tls::generate_cluster_ca("set.example", &id("c3"))
            .unwrap()
            .cert_pem();
        let c2_ca = crate::tls::generate_cluster_ca("set.example", &id("c2"))
            .unwrap()
            .cert_pem();
        let shared = crate::tls::generate_ca("set.example").unwrap().cert_pem();
        let both = format!("{c3_ca}{c3_ca}");
        let map = BTreeMap::from([(id("c3"), net("net-b"))]);
        let gateway = Some("10.0.3.1:15443");
        let cases: [SecretCase<'_>; 8] = [
            (
                data("c3", None, gateway, None),
                None,
                "data.network",
                "required",
            ),
            (
                data("c3", Some("net-a"), gateway, None),
                Some(&map),
                "data.network",
                "networks",
            ),
            (
                data("c3", Some("net-b"), None, None),
                None,
                "data.gateways",
                "at least one",
            ),
            (
                data("c3", Some("net-b"), Some("a:1 nope"), None),
                None,
                "data.gateways[1]",
                "",
            ),
            (
                data("c1", Some("net-b"), gateway, None),
                None,
                "data.cluster",
                "this cluster",
            ),
            (
                data("c3", Some("net-b"), gateway, Some(&c2_ca)),
                None,
                "data.ca.crt",
                "names spiffe://set.example/cluster/c2",
            ),
            (
                data("c3", Some("net-b"), gateway, Some(&shared)),
                None,
                "data.ca.crt",
                "names no cluster",
            ),
            (
                data("c3", Some("net-b"), gateway, Some(&both)),
                None,
                "data.ca.crt",
                "holds 2 certificates",
            ),
        ];
        for (said, networks, field, says) in cases {
            let error = peer_from_secret("ns", "name", &said, networks, Some("c1")).unwrap_err();
            assert_eq!(error.0, field, "{}", error.1);
            assert!(error.1.contains(says), "{field}: {}", error.1);
        }
        let missing = PeerSecretData::default();
        let error = peer_from_secret("ns", "name", &missing, None, None).unwrap_err();
        assert_eq!(error.0, "data.cluster");
    }
}
