//! The PROXY protocol version 2 header a gateway writes to a backend before
//! the first byte of a connection, when the backend's export asks for it
//! (`strait.dev/proxy-protocol: v2`): the original client's address and
//! port, the address it reached, and two TLVs naming the caller: its
//! cluster id and its gateway's SPIFFE identity, both taken from
//! certificates or from this gateway itself, never from a request header.
//!
//! TLV types (the range PROXY protocol keeps for custom use, 0xE0-0xEF):
//! - `0xE0`: the caller's cluster id (UTF-8);
//! - `0xE1`: the SPIFFE identity of the gateway the connection came from
//!   (UTF-8, `spiffe://<cluster set>/cluster/<id>/gateway`).

use std::io;
use std::net::{IpAddr, SocketAddr};

use ppp::v2::{Builder, Command, Protocol, Version};

/// The caller's cluster id.
pub const TLV_CALLER_CLUSTER: u8 = 0xE0;
/// The SPIFFE identity of the gateway the connection came from.
pub const TLV_CALLER_GATEWAY: u8 = 0xE1;

/// Who called, as the backend is told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller<'a> {
    /// The original client's address and port.
    pub source: SocketAddr,
    pub cluster: &'a str,
    pub gateway: &'a str,
}

/// A stream (TCP) header from `caller` to `destination`. Addresses of two
/// families are both written as IPv6 (an IPv4 one mapped), the one form
/// that holds them both.
pub fn stream_header(caller: &Caller<'_>, destination: SocketAddr) -> io::Result<Vec<u8>> {
    let (source, destination) = same_family(caller.source, destination);
    Builder::with_addresses(
        Version::Two | Command::Proxy,
        Protocol::Stream,
        (source, destination),
    )
    .write_tlv(TLV_CALLER_CLUSTER, caller.cluster.as_bytes())?
    .write_tlv(TLV_CALLER_GATEWAY, caller.gateway.as_bytes())?
    .build()
}

fn same_family(source: SocketAddr, destination: SocketAddr) -> (SocketAddr, SocketAddr) {
    let v6 = |address: SocketAddr| match address.ip() {
        IpAddr::V4(ip) => SocketAddr::new(IpAddr::V6(ip.to_ipv6_mapped()), address.port()),
        IpAddr::V6(_) => address,
    };
    if source.is_ipv4() == destination.is_ipv4() {
        (source, destination)
    } else {
        (v6(source), v6(destination))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ppp::v2::{Addresses, Header};

    fn caller(source: &str) -> Caller<'static> {
        Caller {
            source: source.parse().expect("address"),
            cluster: "c1",
            gateway: "spiffe://set/cluster/c1/gateway",
        }
    }

    #[test]
    fn the_header_names_the_client_and_the_caller() {
        let bytes = stream_header(
            &caller("10.1.0.7:43210"),
            "10.3.0.9:8080".parse().expect("addr"),
        )
        .expect("header");
        let header = Header::try_from(bytes.as_slice()).expect("a valid header");
        assert_eq!(header.len(), bytes.len(), "nothing after it");
        match header.addresses {
            Addresses::IPv4(ip) => {
                assert_eq!(ip.source_address.to_string(), "10.1.0.7");
                assert_eq!(ip.source_port, 43210);
                assert_eq!(ip.destination_address.to_string(), "10.3.0.9");
                assert_eq!(ip.destination_port, 8080);
            }
            other => panic!("{other:?}"),
        }
        let tlvs: Vec<(u8, Vec<u8>)> = header
            .tlvs()
            .map(|tlv| {
                let tlv = tlv.expect("a valid TLV");
                (tlv.kind, tlv.value.to_vec())
            })
            .collect();
        assert_eq!(
            tlvs,
            [
                (TLV_CALLER_CLUSTER, b"c1".to_vec()),
                (
                    TLV_CALLER_GATEWAY,
                    b"spiffe://set/cluster/c1/gateway".to_vec()
                ),
            ]
        );
    }

    #[test]
    fn mixed_families_are_written_as_ipv6() {
        let bytes = stream_header(&caller("10.1.0.7:1"), "[fd00::9]:80".parse().expect("addr"))
            .expect("header");
        let header = Header::try_from(bytes.as_slice()).expect("a valid header");
        match header.addresses {
            Addresses::IPv6(ip) => {
                assert_eq!(ip.source_address.to_string(), "::ffff:10.1.0.7");
                assert_eq!(ip.destination_address.to_string(), "fd00::9");
            }
            other => panic!("{other:?}"),
        }
    }
}
