//! Connection targets as clients and peer gateways name them: a backend
//! address, a service port (`<svc>.<ns>.svc.clusterset.local:<port>`) or one
//! pod of a headless service
//! (`<hostname>.<cluster>.<svc>.<ns>.svc.clusterset.local:<port>`). Pure
//! parsing, shared by the CONNECT listener and the tunnel server.

use std::fmt;
use std::net::{IpAddr, SocketAddr};

use crate::model::{ClusterId, ServiceKey, is_dns_label};

/// The DNS suffix of multi-cluster services (KEP-1645).
pub const CLUSTERSET_SUFFIX: &str = ".svc.clusterset.local";

/// The longest authority accepted; DNS names stop at 253 characters.
const MAX_AUTHORITY_LEN: usize = 300;

/// What a connection asks to reach.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// A backend address as seen inside the network that holds it.
    Address(SocketAddr),
    /// A port of a multi-cluster service; the receiver picks the backend.
    Service { service: ServiceKey, port: u16 },
    /// One pod of a headless service, by hostname and cluster.
    Pod {
        hostname: String,
        cluster: ClusterId,
        service: ServiceKey,
        port: u16,
    },
}

impl Target {
    pub fn port(&self) -> u16 {
        match self {
            Target::Address(address) => address.port(),
            Target::Service { port, .. } | Target::Pod { port, .. } => *port,
        }
    }
}

impl fmt::Display for Target {
    /// The authority form, as sent on the wire.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Address(address) => write!(f, "{address}"),
            Target::Service { service, port } => write!(
                f,
                "{}.{}{CLUSTERSET_SUFFIX}:{port}",
                service.name, service.namespace
            ),
            Target::Pod {
                hostname,
                cluster,
                service,
                port,
            } => write!(
                f,
                "{hostname}.{cluster}.{}.{}{CLUSTERSET_SUFFIX}:{port}",
                service.name, service.namespace
            ),
        }
    }
}

/// Why an authority was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TargetError {
    #[error("authority is empty")]
    Empty,
    #[error("authority is longer than {MAX_AUTHORITY_LEN} characters")]
    TooLong,
    #[error("authority {0:?} has no port")]
    NoPort(String),
    #[error("{0:?} is not a port number (1-65535)")]
    BadPort(String),
    #[error("host {0:?} is neither an IP address nor a name under {CLUSTERSET_SUFFIX}")]
    NotClusterSet(String),
    #[error(
        "host {0:?} is not <service>.<namespace>{CLUSTERSET_SUFFIX} or <hostname>.<cluster>.<service>.<namespace>{CLUSTERSET_SUFFIX}"
    )]
    BadName(String),
}

/// Parses `host:port`, `[v6]:port` or a clusterset name with a port.
pub fn parse_authority(authority: &str) -> Result<Target, TargetError> {
    if authority.is_empty() {
        return Err(TargetError::Empty);
    }
    if authority.len() > MAX_AUTHORITY_LEN {
        return Err(TargetError::TooLong);
    }
    let (host, port) = authority
        .rsplit_once(':')
        .ok_or_else(|| TargetError::NoPort(authority.to_owned()))?;
    // `u16::from_str` would also take a leading `+`.
    // Digits only, without leading zeros, so one port has one spelling.
    let digits = !port.is_empty()
        && port.bytes().all(|b| b.is_ascii_digit())
        && !(port.len() > 1 && port.starts_with('0'));
    let port = match port.parse::<u16>() {
        Ok(number) if digits && number != 0 => number,
        _ => return Err(TargetError::BadPort(port.to_owned())),
    };
    if let Some(v6) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        return match v6.parse::<std::net::Ipv6Addr>() {
            Ok(ip) => Ok(Target::Address(SocketAddr::new(IpAddr::V6(ip), port))),
            Err(_) => Err(TargetError::NotClusterSet(host.to_owned())),
        };
    }
    if let Ok(ip) = host.parse::<std::net::Ipv4Addr>() {
        return Ok(Target::Address(SocketAddr::new(IpAddr::V4(ip), port)));
    }
    let lowered = host.trim_end_matches('.').to_ascii_lowercase();
    let Some(prefix) = lowered.strip_suffix(CLUSTERSET_SUFFIX) else {
        return Err(TargetError::NotClusterSet(host.to_owned()));
    };
    let labels: Vec<&str> = prefix.split('.').collect();
    let bad_name = || TargetError::BadName(host.to_owned());
    if !labels.iter().all(|label| is_dns_label(label)) {
        return Err(bad_name());
    }
    match labels.as_slice() {
        [name, namespace] => Ok(Target::Service {
            service: ServiceKey::new(*namespace, *name),
            port,
        }),
        // Cluster ids may hold dots: everything between the hostname and the
        // service name is the cluster.
        [hostname, cluster @ .., name, namespace] if !cluster.is_empty() => {
            let cluster = ClusterId::new(&cluster.join(".")).map_err(|_| bad_name())?;
            Ok(Target::Pod {
                hostname: (*hostname).to_owned(),
                cluster,
                service: ServiceKey::new(*namespace, *name),
                port,
            })
        }
        _ => Err(bad_name()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_parse_in_both_families() {
        assert_eq!(
            parse_authority("10.1.0.7:8080"),
            Ok(Target::Address("10.1.0.7:8080".parse().expect("addr")))
        );
        assert_eq!(
            parse_authority("[fd00::7]:8080"),
            Ok(Target::Address("[fd00::7]:8080".parse().expect("addr")))
        );
    }

    #[test]
    fn service_names_parse_case_insensitively_with_a_trailing_dot() {
        let expected = Target::Service {
            service: ServiceKey::new("shop", "cart"),
            port: 80,
        };
        assert_eq!(
            parse_authority("cart.shop.svc.clusterset.local:80"),
            Ok(expected.clone())
        );
        assert_eq!(
            parse_authority("Cart.Shop.svc.ClusterSet.local.:80"),
            Ok(expected.clone())
        );
        assert_eq!(expected.to_string(), "cart.shop.svc.clusterset.local:80");
    }

    #[test]
    fn pod_names_take_the_middle_labels_as_the_cluster() {
        let target = parse_authority("postgres-0.west.prod.postgres.db.svc.clusterset.local:5432")
            .expect("pod name");
        assert_eq!(
            target,
            Target::Pod {
                hostname: "postgres-0".into(),
                cluster: ClusterId::new("west.prod").expect("id"),
                service: ServiceKey::new("db", "postgres"),
                port: 5432,
            }
        );
        assert_eq!(
            target.to_string(),
            "postgres-0.west.prod.postgres.db.svc.clusterset.local:5432"
        );
    }

    #[test]
    fn malformed_authorities_are_refused() {
        for bad in [
            "",
            "10.0.0.1",
            "10.0.0.1:0",
            "10.0.0.1:65536",
            "10.0.0.1:+80",
            "10.0.0.1:080",
            "10.0.0.1:http",
            "[fd00::1:80",
            "[nope]:80",
            "example.com:80",
            "cart.svc.clusterset.local:80",
            "a.b.c.svc.cluster.local:80",
            "-cart.shop.svc.clusterset.local:80",
            "ca_rt.shop.svc.clusterset.local:80",
            "x..shop.svc.clusterset.local:80",
            "localhost:22",
        ] {
            assert!(parse_authority(bad).is_err(), "{bad:?} should be refused");
        }
        assert_eq!(parse_authority(&"a".repeat(400)), Err(TargetError::TooLong));
    }
}
