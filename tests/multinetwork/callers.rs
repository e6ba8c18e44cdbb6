//! The multi-network tests of what a caller gets beside TCP bytes: its
//! identity at the backend (`netns/told.rs`) and UDP across networks
//! (`netns/udp.rs`).

use crate::netns;
use crate::netns::{told, udp};

/// A service whose export asks for the PROXY protocol: its backends learn
/// the calling pod's address and port, its cluster and its gateway's
/// identity, on the direct path and through the tunnel (QUIC); HAProxy
/// with `accept-proxy` logs the same client; a service that does not ask
/// gets no header. See [`netns::told`].
#[test]
fn told_backends_learn_the_client_and_the_caller_over_quic() {
    netns::run_needing(
        "told_backends_learn_the_client_and_the_caller_over_quic",
        &["haproxy"],
        |env| told::told_backends_learn_the_client_and_the_caller(env, "quic"),
    );
}

/// The same over the HTTP/2 tunnel.
#[test]
fn told_backends_learn_the_client_and_the_caller_over_h2() {
    netns::run_needing(
        "told_backends_learn_the_client_and_the_caller_over_h2",
        &["haproxy"],
        |env| told::told_backends_learn_the_client_and_the_caller(env, "h2"),
    );
}

/// UDP across networks (`netns/udp.rs`): the real `dig` in c1's pod asks
/// a ClusterSetIP (DNATed to c1g1's UDP import port) and NSD in c3's pod
/// on net-b answers through the gateways, over QUIC; c4's pod, whose
/// Service declares the port only as TCP, is never asked; each flow ends
/// a second after its last datagram.
#[test]
fn udp_dig_reaches_nsd_on_another_network_over_quic() {
    netns::run_needing(
        "udp_dig_reaches_nsd_on_another_network_over_quic",
        &["iptables", "dig", "nsd"],
        |env| udp::dig_across_networks(env, Some("quic"), false),
    );
}

/// The same with UDP dropped on c1's WAN: `auto` falls back to HTTP/2,
/// whose CONNECT stream carries the datagrams as capsules.
#[test]
fn udp_dig_falls_back_to_http2_when_the_wan_drops_udp() {
    netns::run_needing(
        "udp_dig_falls_back_to_http2_when_the_wan_drops_udp",
        &["iptables", "dig", "nsd"],
        |env| udp::dig_across_networks(env, None, true),
    );
}

/// 320 flows from 40 addresses of one /24: the prefix's 64 admitted, the
/// rest refused and counted, and the prefix free again once they end
/// unconfirmed.
#[test]
fn a_udp_flood_from_many_sources_of_one_prefix_stays_bounded() {
    netns::run_needing(
        "a_udp_flood_from_many_sources_of_one_prefix_stays_bounded",
        &["iptables", "dig", "nsd"],
        udp::a_flood_from_many_sources_of_one_prefix_stays_bounded,
    );
}

/// 200 flows from one pod: 8 admitted, the rest refused and counted, and
/// another pod is answered meanwhile.
#[test]
fn a_udp_flood_from_one_source_stays_bounded() {
    netns::run_needing(
        "a_udp_flood_from_one_source_stays_bounded",
        &["iptables", "dig", "nsd"],
        udp::a_flood_from_one_source_stays_bounded,
    );
}
