//! Which addresses may never be a backend: Kubernetes' own EndpointSlice
//! validation, and beyond it the clouds' metadata addresses. Used when
//! objects are read and again before the tunnel server dials.

use std::net::{IpAddr, Ipv4Addr};

/// The instance metadata and host agent addresses of the major clouds
/// that are not link-local (169.254.169.254 and the like are refused as
/// link-local): AWS's IPv6 metadata, Alibaba Cloud's metadata and Azure's
/// host agent (WireServer). Whoever reaches them may read the node's
/// credentials.
const CLOUD_METADATA: [IpAddr; 3] = [
    IpAddr::V6(std::net::Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254)),
    IpAddr::V4(std::net::Ipv4Addr::new(100, 100, 100, 200)),
    IpAddr::V4(std::net::Ipv4Addr::new(168, 63, 129, 16)),
];

/// The IPv4 address an IPv6 address reaches through a translator or a
/// relay: NAT64's well-known prefix `64:ff9b::/96` (RFC 6052) and 6to4's
/// `2002::/16` (RFC 3056). Such an address is judged as that IPv4 address
/// too, so `64:ff9b::a9fe:a9fe` is the metadata address it reaches.
pub fn embedded_ipv4(address: &IpAddr) -> Option<Ipv4Addr> {
    let IpAddr::V6(v6) = address.to_canonical() else {
        return None;
    };
    let (segments, octets) = (v6.segments(), v6.octets());
    if segments[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        return Some(Ipv4Addr::new(
            octets[12], octets[13], octets[14], octets[15],
        ));
    }
    if segments[0] == 0x2002 {
        return Some(Ipv4Addr::new(octets[2], octets[3], octets[4], octets[5]));
    }
    None
}

/// Why an endpoint address can never be a backend, as Kubernetes' own
/// EndpointSlice validation decides (and, beyond it, the clouds' metadata
/// addresses, and the IPv4 address a NAT64 or 6to4 spelling reaches);
/// `None` when it can.
pub fn unroutable_endpoint(address: &IpAddr, allow_loopback: bool) -> Option<&'static str> {
    if let Some(v4) = embedded_ipv4(address)
        && let Some(class) = unroutable_endpoint(&IpAddr::V4(v4), allow_loopback)
    {
        return Some(class);
    }
    // An IPv4-mapped IPv6 address (`::ffff:127.0.0.1`) is judged as the
    // IPv4 address it stands for: otherwise it would pass for none of these.
    let address = &address.to_canonical();
    let link_local = match address {
        IpAddr::V4(v4) => v4.is_link_local(),
        IpAddr::V6(v6) => v6.is_unicast_link_local(),
    };
    // `::a.b.c.d` (IPv4-compatible, deprecated by RFC 4291) is not routed
    // as IPv4, but reads as `a.b.c.d` to anyone who forgets that: refused.
    let ipv4_compatible = matches!(address, IpAddr::V6(v6)
        if v6.segments()[..6] == [0; 6] && !v6.is_loopback() && !v6.is_unspecified());
    if address.is_unspecified() {
        Some("unspecified")
    } else if CLOUD_METADATA.contains(address) {
        Some("cloud metadata")
    } else if ipv4_compatible {
        Some("deprecated IPv4-compatible")
    } else if address.is_loopback() && !allow_loopback {
        Some("loopback")
    } else if link_local {
        Some("link-local")
    } else if address.is_multicast() || matches!(address, IpAddr::V4(v4) if v4.is_broadcast()) {
        Some("multicast or broadcast")
    } else {
        None
    }
}
