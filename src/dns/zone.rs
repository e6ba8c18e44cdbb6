//! The zone the responder is authoritative for: its origin, TTLs and SOA,
//! and where a query name sits in it. Names are matched case-insensitively;
//! a name outside the zone is `None`, which the answer turns into REFUSED.
//! Pure: no I/O.

use hickory_proto::ProtoError;
use hickory_proto::rr::rdata::SOA;
use hickory_proto::rr::{Name, RData, Record};

use crate::model::Protocol;

/// The SOA's timers. Nothing transfers this zone (AXFR and IXFR are
/// refused), so only `minimum` matters: with the SOA record's own TTL it
/// bounds how long resolvers cache a negative answer (RFC 2308).
const SOA_REFRESH: i32 = 7200;
const SOA_RETRY: i32 = 1800;
const SOA_EXPIRE: i32 = 86400;
/// The zone is never transferred, so its serial is not a version: it stays 1.
const SOA_SERIAL: u32 = 1;
/// The name under the origin that holds the schema version.
const VERSION_LABEL: &str = "dns-version";
/// The version of the multicluster DNS specification the zone follows
/// (KEP-1645 `specification.md` §1).
pub const SCHEMA_VERSION: &str = "1.0.0";

#[derive(Debug, thiserror::Error)]
pub enum ZoneError {
    #[error("zone {zone:?} is not a domain name")]
    BadName {
        zone: String,
        #[source]
        source: ProtoError,
    },
}

/// The zone and the TTLs of its answers.
#[derive(Debug, Clone)]
pub struct Zone {
    /// Lower case, fully qualified.
    origin: Name,
    labels: usize,
    ttl: u32,
    negative_ttl: u32,
    soa: SOA,
}

impl Zone {
    pub fn new(zone: &str, ttl: u32, negative_ttl: u32) -> Result<Self, ZoneError> {
        let bad = |source| ZoneError::BadName {
            zone: zone.to_owned(),
            source,
        };
        let mut origin = Name::from_ascii(zone).map_err(bad)?.to_lowercase();
        origin.set_fqdn(true);
        let mname = Name::from_ascii("ns.dns")
            .and_then(|n| n.append_domain(&origin))
            .map_err(bad)?;
        let rname = Name::from_ascii("hostmaster")
            .and_then(|n| n.append_domain(&origin))
            .map_err(bad)?;
        Ok(Self {
            labels: usize::from(origin.num_labels()),
            soa: SOA::new(
                mname,
                rname,
                SOA_SERIAL,
                SOA_REFRESH,
                SOA_RETRY,
                SOA_EXPIRE,
                negative_ttl,
            ),
            origin,
            ttl,
            negative_ttl,
        })
    }

    pub fn origin(&self) -> &Name {
        &self.origin
    }

    pub fn ttl(&self) -> u32 {
        self.ttl
    }

    pub fn negative_ttl(&self) -> u32 {
        self.negative_ttl
    }

    /// The SOA as the answer to an SOA query at the apex.
    pub fn soa_answer(&self) -> Record {
        Record::from_rdata(self.origin.clone(), self.ttl, RData::SOA(self.soa.clone()))
    }

    /// The SOA as the authority of a negative answer (RFC 2308: its TTL
    /// and its minimum are the negative TTL).
    pub fn soa_authority(&self) -> Record {
        Record::from_rdata(
            self.origin.clone(),
            self.negative_ttl,
            RData::SOA(self.soa.clone()),
        )
    }

    /// `labels` (left to right, relative to nothing) followed by the origin.
    pub fn name(&self, labels: &[&str]) -> Result<Name, ProtoError> {
        Name::from_labels(labels.iter().map(|l| l.as_bytes()))?.append_domain(&self.origin)
    }

    /// Where `name` sits in the zone; `None` when it is outside.
    pub fn locate(&self, name: &Name) -> Option<Owner> {
        let labels: Vec<&[u8]> = name.iter().collect();
        let inside = labels.len().checked_sub(self.labels)?;
        let in_zone = labels[inside..]
            .iter()
            .zip(self.origin.iter())
            .all(|(a, b)| a.eq_ignore_ascii_case(b));
        if !in_zone {
            return None;
        }
        // Labels below the origin, lower-cased; one that is not UTF-8 names
        // nothing the zone holds.
        let mut relative = Vec::with_capacity(inside);
        for label in &labels[..inside] {
            match String::from_utf8(label.to_ascii_lowercase()) {
                Ok(label) => relative.push(label),
                Err(_) => return Some(Owner::Unknown),
            }
        }
        Some(Owner::of(relative))
    }
}

/// A name of the zone, by the shape of its labels.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Owner {
    /// The zone itself.
    Apex,
    /// `svc.<zone>`.
    Svc,
    /// `dns-version.<zone>`: the schema version's TXT record (mcs-api DNS
    /// specification §2.2).
    Version,
    /// `<ns>.svc.<zone>`.
    Namespace { namespace: String },
    /// `<svc>.<ns>.svc.<zone>`.
    Service { namespace: String, name: String },
    /// `_<proto>.<svc>.<ns>.svc.<zone>`.
    Protocol {
        namespace: String,
        name: String,
        protocol: Protocol,
    },
    /// `_<port>._<proto>.<svc>.<ns>.svc.<zone>`: a port's SRV records.
    Port {
        namespace: String,
        name: String,
        port: String,
        protocol: Protocol,
    },
    /// `<labels>.<svc>.<ns>.svc.<zone>` without a leading `_`: a cluster
    /// (`<cluster-id>`, which may hold dots) or one pod
    /// (`<hostname>.<cluster-id>`) of a headless service.
    Below {
        namespace: String,
        name: String,
        labels: Vec<String>,
    },
    /// In the zone, but no name the zone can hold.
    Unknown,
}

impl Owner {
    /// Classifies the labels below the origin, given left to right.
    fn of(mut labels: Vec<String>) -> Owner {
        // Right to left: svc, namespace, service, then the rest.
        let Some(svc) = labels.pop() else {
            return Owner::Apex;
        };
        if svc == VERSION_LABEL && labels.is_empty() {
            return Owner::Version;
        }
        if svc != "svc" {
            return Owner::Unknown;
        }
        let Some(namespace) = labels.pop() else {
            return Owner::Svc;
        };
        let Some(name) = labels.pop() else {
            return Owner::Namespace { namespace };
        };
        let Some(last) = labels.last() else {
            return Owner::Service { namespace, name };
        };
        if let Some(protocol) = last.strip_prefix('_') {
            let protocol = match protocol {
                "tcp" => Protocol::Tcp,
                "udp" => Protocol::Udp,
                "sctp" => Protocol::Sctp,
                _ => return Owner::Unknown,
            };
            return match labels.as_slice() {
                [_] => Owner::Protocol {
                    namespace,
                    name,
                    protocol,
                },
                [port, _] => match port.strip_prefix('_') {
                    Some(port) if !port.is_empty() => Owner::Port {
                        namespace,
                        name,
                        port: port.to_owned(),
                        protocol,
                    },
                    _ => Owner::Unknown,
                },
                _ => Owner::Unknown,
            };
        }
        if labels.iter().any(|label| label.starts_with('_')) {
            return Owner::Unknown;
        }
        Owner::Below {
            namespace,
            name,
            labels,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zone() -> Zone {
        Zone::new("clusterset.local", 5, 5).expect("zone")
    }

    fn locate(name: &str) -> Option<Owner> {
        zone().locate(&Name::from_ascii(name).expect("name"))
    }

    #[test]
    fn names_are_located_case_insensitively_with_or_without_the_root() {
        let cart = Some(Owner::Service {
            namespace: "shop".into(),
            name: "cart".into(),
        });
        assert_eq!(locate("cart.shop.svc.clusterset.local."), cart);
        assert_eq!(locate("CART.Shop.SVC.ClusterSet.LOCAL"), cart);
        assert_eq!(locate("clusterset.local."), Some(Owner::Apex));
        assert_eq!(locate("svc.clusterset.local."), Some(Owner::Svc));
        assert_eq!(
            locate("shop.svc.clusterset.local."),
            Some(Owner::Namespace {
                namespace: "shop".into()
            })
        );
    }

    #[test]
    fn names_outside_the_zone_are_not_located() {
        for name in [
            "example.com.",
            "local.",
            ".",
            "cart.shop.svc.cluster.local.",
            "clusterset.local.example.",
            "xclusterset.local.",
        ] {
            assert_eq!(locate(name), None, "{name}");
        }
    }

    #[test]
    fn srv_and_per_pod_names_have_their_shapes() {
        assert_eq!(
            locate("_HTTP._tcp.cart.shop.svc.clusterset.local."),
            Some(Owner::Port {
                namespace: "shop".into(),
                name: "cart".into(),
                port: "http".into(),
                protocol: Protocol::Tcp,
            })
        );
        assert_eq!(
            locate("_udp.cart.shop.svc.clusterset.local."),
            Some(Owner::Protocol {
                namespace: "shop".into(),
                name: "cart".into(),
                protocol: Protocol::Udp,
            })
        );
        assert_eq!(
            locate("pg-0.west.prod.postgres.db.svc.clusterset.local."),
            Some(Owner::Below {
                namespace: "db".into(),
                name: "postgres".into(),
                labels: vec!["pg-0".into(), "west".into(), "prod".into()],
            })
        );
        for unknown in [
            "cart.shop.pods.clusterset.local.",
            "_http._quic.cart.shop.svc.clusterset.local.",
            "http._tcp.cart.shop.svc.clusterset.local.",
            "_._tcp.cart.shop.svc.clusterset.local.",
            "a._http._tcp.cart.shop.svc.clusterset.local.",
            "_x.pod.cart.shop.svc.clusterset.local.",
        ] {
            assert_eq!(locate(unknown), Some(Owner::Unknown), "{unknown}");
        }
    }

    #[test]
    fn another_zone_can_be_configured() {
        let zone = Zone::new("CS.Example.", 30, 2).expect("zone");
        assert_eq!(zone.origin().to_ascii(), "cs.example.");
        assert_eq!(
            zone.locate(&Name::from_ascii("svc.cs.example.").expect("name")),
            Some(Owner::Svc)
        );
        assert_eq!(
            zone.locate(&Name::from_ascii("svc.clusterset.local.").expect("name")),
            None
        );
        let soa = zone.soa_authority();
        assert_eq!(soa.ttl, 2);
        assert_eq!(
            soa.to_string(),
            "cs.example. 2 IN SOA ns.dns.cs.example. hostmaster.cs.example. 1 7200 1800 86400 2"
        );
    }
}
