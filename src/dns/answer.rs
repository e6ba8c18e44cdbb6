//! What the zone answers, as a pure function of the route snapshot: no I/O,
//! no clock. One question (name and type) in, rcode and records out, and on
//! request an [`Explanation`] of which service, port and backends the
//! answer came from (`/debug/dns`).
//!
//! The records (KEP-1645 and the mcs-api DNS specification):
//! - `dns-version.<zone>` TXT → the schema version, `1.0.0`.
//! - ClusterSetIP service: `<svc>.<ns>.svc.<zone>` A/AAAA → this cluster's
//!   ServiceImport IPs; `_<port>._<proto>.<svc>.<ns>.svc.<zone>` SRV →
//!   `0 100 <port> <svc>.<ns>.svc.<zone>.` for every named port with at
//!   least one backend this gateway can route to; the bare name's SRV →
//!   the same for every such port, named or not, once per port number (as
//!   CoreDNS answers it), while the import has a ClusterSetIP.
//! - Headless service: `<svc>.<ns>.svc.<zone>` A/AAAA → one address per
//!   ready pod this cluster can reach, NXDOMAIN when no cluster has a ready
//!   pod; `<hostname>.<cluster-id>.<svc>.<ns>.svc.<zone>` → that pod; SRV
//!   per such pod with the per-pod name as its target (an endpoint without
//!   a hostname is named by its address with dashes, as Kubernetes DNS
//!   does), and under the bare name one per pod and port number.
//!
//! A pod on this cluster's network is answered with its own address. A pod
//! on **another network** is answered with its address on this side (the
//! ClusterIP of its per-pod derived Service, or a file setup's
//! `imports.podAddresses`), which reaches that one pod through its
//! network's gateway; a remote pod without one (beyond
//! `dns.maxHeadlessEndpoints`, or not allocated yet) is not answered. A
//! name whose pods are all unanswered exists, so it is NODATA (NOERROR
//! with the SOA), never a wrong address.
//!
//! Negative answers: NXDOMAIN for a name the zone does not hold (a service
//! no cluster exports, an unknown namespace, a port no backend serves),
//! NODATA for a name that exists without records of the type asked; both
//! carry the zone's SOA. A name outside the zone is REFUSED: this is no
//! recursive resolver.

use std::collections::BTreeSet;
use std::net::IpAddr;

use hickory_proto::op::ResponseCode;
use hickory_proto::rr::rdata::{A, AAAA, SRV, TXT};
use hickory_proto::rr::{Name, RData, Record, RecordType};
use serde::Serialize;

use super::zone::{Owner, SCHEMA_VERSION, Zone};
use crate::merge::BackendState;
use crate::model::{Protocol, ServiceType};
use crate::routing::{Path, PortRoute, RouteTable, RoutedBackend, ServiceRoutes};

/// The weight of a ClusterSetIP service's one SRV target.
const SRV_WEIGHT: u16 = 100;

/// What one question gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// `NoError` (with or without records), `NXDomain` or `Refused`.
    pub rcode: ResponseCode,
    /// Set for every answer from the zone, negative ones included.
    pub authoritative: bool,
    pub answers: Vec<Record>,
    /// The zone's SOA on NXDOMAIN and NODATA.
    pub authorities: Vec<Record>,
}

impl Answer {
    fn refused() -> Self {
        Self {
            rcode: ResponseCode::Refused,
            authoritative: false,
            answers: Vec::new(),
            authorities: Vec::new(),
        }
    }

    /// NOERROR without an answer for the type asked.
    pub fn is_nodata(&self) -> bool {
        self.rcode == ResponseCode::NoError && self.answers.is_empty()
    }
}

/// Why an answer is what it is, for `/debug/dns`.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Explanation {
    /// What the name is: `outside-zone`, `apex`, `svc`, `namespace`,
    /// `service`, `protocol`, `port`, `cluster`, `pod` or `unknown`.
    pub name_kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub service: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub service_type: Option<ServiceType>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub port: Option<String>,
    /// Backends considered, answered or not.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub backends: Vec<ExplainedBackend>,
    pub notes: Vec<String>,
}

/// One backend considered for an answer.
#[derive(Debug, Clone, Serialize)]
pub struct ExplainedBackend {
    pub cluster: String,
    pub address: IpAddr,
    pub port: u16,
    pub network: String,
    pub path: &'static str,
    /// The per-pod label (`<label>.<cluster-id>.<svc>...`).
    pub pod: String,
    pub answered: bool,
    /// For a pod on another network, the addresses on this side that
    /// reach it (what is answered instead of its own).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub answered_with: Vec<IpAddr>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<&'static str>,
}

/// Collects an [`Explanation`] only when one was asked for, so the query
/// path builds no strings.
struct Trace<'a>(Option<&'a mut Explanation>);

impl Trace<'_> {
    fn with(&mut self, f: impl FnOnce(&mut Explanation)) {
        if let Some(explanation) = self.0.as_deref_mut() {
            f(explanation);
        }
    }

    fn note(&mut self, note: impl FnOnce() -> String) {
        self.with(|e| e.notes.push(note()));
    }
}

/// The records of one name: `None` when the zone does not hold it.
#[derive(Debug, Default)]
struct Node {
    addresses: Vec<IpAddr>,
    srv: Vec<SRV>,
    txt: Option<&'static str>,
    soa: bool,
}

/// Answers one question from the current routes.
pub fn answer(table: &RouteTable, zone: &Zone, name: &Name, qtype: RecordType) -> Answer {
    resolve(table, zone, name, qtype, &mut Trace(None))
}

/// Answers one question and says why.
pub fn explain(
    table: &RouteTable,
    zone: &Zone,
    name: &Name,
    qtype: RecordType,
) -> (Answer, Explanation) {
    let mut explanation = Explanation::default();
    let answer = resolve(table, zone, name, qtype, &mut Trace(Some(&mut explanation)));
    (answer, explanation)
}

fn resolve(
    table: &RouteTable,
    zone: &Zone,
    name: &Name,
    qtype: RecordType,
    trace: &mut Trace<'_>,
) -> Answer {
    let Some(owner) = zone.locate(name) else {
        trace.with(|e| e.name_kind = "outside-zone");
        trace.note(|| format!("not in the zone {}: refused, never resolved", zone.origin()));
        return Answer::refused();
    };
    if matches!(qtype, RecordType::AXFR | RecordType::IXFR) {
        trace.note(|| "zone transfers are refused".to_owned());
        return Answer::refused();
    }
    let Some(node) = node(table, zone, &owner, trace) else {
        return Answer {
            rcode: ResponseCode::NXDomain,
            authoritative: true,
            answers: Vec::new(),
            authorities: vec![zone.soa_authority()],
        };
    };
    let ttl = zone.ttl();
    let mut answers = Vec::new();
    let any = qtype == RecordType::ANY;
    for address in &node.addresses {
        match address {
            IpAddr::V4(v4) if any || qtype == RecordType::A => {
                answers.push(Record::from_rdata(name.clone(), ttl, RData::A(A(*v4))));
            }
            IpAddr::V6(v6) if any || qtype == RecordType::AAAA => {
                answers.push(Record::from_rdata(
                    name.clone(),
                    ttl,
                    RData::AAAA(AAAA(*v6)),
                ));
            }
            _ => {}
        }
    }
    if any || qtype == RecordType::SRV {
        answers.extend(
            node.srv
                .iter()
                .map(|srv| Record::from_rdata(name.clone(), ttl, RData::SRV(srv.clone()))),
        );
    }
    if let Some(text) = node.txt
        && (any || qtype == RecordType::TXT)
    {
        answers.push(Record::from_rdata(
            name.clone(),
            ttl,
            RData::TXT(TXT::new(vec![text.to_owned()])),
        ));
    }
    if node.soa && (any || qtype == RecordType::SOA) {
        let mut soa = zone.soa_answer();
        soa.name = name.clone();
        answers.push(soa);
    }
    if answers.is_empty() {
        trace.note(|| format!("the name exists but has no {qtype} record: NODATA"));
    }
    Answer {
        rcode: ResponseCode::NoError,
        authoritative: true,
        authorities: if answers.is_empty() {
            vec![zone.soa_authority()]
        } else {
            Vec::new()
        },
        answers,
    }
}

fn node(table: &RouteTable, zone: &Zone, owner: &Owner, trace: &mut Trace<'_>) -> Option<Node> {
    match owner {
        Owner::Apex => {
            trace.with(|e| e.name_kind = "apex");
            Some(Node {
                soa: true,
                ..Node::default()
            })
        }
        Owner::Version => {
            trace.with(|e| e.name_kind = "dns-version");
            Some(Node {
                txt: Some(SCHEMA_VERSION),
                ..Node::default()
            })
        }
        Owner::Svc => {
            trace.with(|e| e.name_kind = "svc");
            table.services().next().map(|_| Node::default())
        }
        Owner::Namespace { namespace } => {
            trace.with(|e| e.name_kind = "namespace");
            let exists = table.has_namespace(namespace);
            if !exists {
                trace.note(|| format!("no multi-cluster service in namespace {namespace}"));
            }
            exists.then(Node::default)
        }
        Owner::Service { namespace, name } => {
            trace.with(|e| e.name_kind = "service");
            let service = found(table, namespace, name, trace)?;
            service_node(table, zone, service, trace)
        }
        Owner::Protocol {
            namespace,
            name,
            protocol,
        } => {
            trace.with(|e| e.name_kind = "protocol");
            let service = found(table, namespace, name, trace)?;
            let exists = service
                .ports
                .iter()
                .any(|port| port.protocol == *protocol && has_srv(service, port));
            if !exists {
                trace.note(|| format!("no named {} port with a backend", protocol.as_str()));
            }
            exists.then(Node::default)
        }
        Owner::Port {
            namespace,
            name,
            port,
            protocol,
        } => {
            trace.with(|e| e.name_kind = "port");
            let service = found(table, namespace, name, trace)?;
            port_node(table, zone, service, port, *protocol, trace)
        }
        Owner::Below {
            namespace,
            name,
            labels,
        } => {
            let service = found(table, namespace, name, trace)?;
            below_node(table, service, labels, trace)
        }
        Owner::Unknown => {
            trace.with(|e| e.name_kind = "unknown");
            trace.note(|| "no name of this shape exists in the zone".to_owned());
            None
        }
    }
}

/// The service a name is under, traced; `None` (NXDOMAIN) when no cluster
/// exports it.
fn found<'t>(
    table: &'t RouteTable,
    namespace: &str,
    name: &str,
    trace: &mut Trace<'_>,
) -> Option<&'t ServiceRoutes> {
    trace.with(|e| e.service = Some(format!("{namespace}/{name}")));
    let Some(service) = table.service(namespace, name) else {
        trace
            .note(|| format!("no cluster exports {namespace}/{name}: not a multi-cluster service"));
        return None;
    };
    trace.with(|e| e.service_type = Some(service.service_type));
    Some(service)
}

/// A service's own name: its addresses, and SRV records for every port
/// (named or not) that can carry traffic, one per distinct target and
/// port, as CoreDNS answers the bare name. A headless service without a
/// ready pod anywhere is NXDOMAIN (mcs-api DNS specification §2.4.1).
fn service_node(
    table: &RouteTable,
    zone: &Zone,
    service: &ServiceRoutes,
    trace: &mut Trace<'_>,
) -> Option<Node> {
    match service.service_type {
        ServiceType::Headless => {
            if pods(service).next().is_none() {
                trace.note(|| format!("{} has no ready pod in any cluster: NXDOMAIN", service.key));
                return None;
            }
            let mut addresses = BTreeSet::new();
            let mut targets = BTreeSet::new();
            for routed in pods(service) {
                let reach = reach(table, service, routed);
                addresses.extend(reach.addresses());
                trace_backend(trace, routed, &reach);
                if reach.answered()
                    && let Some(target) = pod_name(zone, service, routed)
                {
                    targets.insert((target, routed.backend.port));
                }
            }
            let weight = weight(targets.len());
            Some(Node {
                addresses: addresses.into_iter().collect(),
                srv: targets
                    .into_iter()
                    .map(|(target, port)| SRV::new(0, weight, port, target))
                    .collect(),
                ..Node::default()
            })
        }
        ServiceType::ClusterSetIp | ServiceType::ExternalName => {
            let key = &service.key;
            let vips = &service.vips;
            if vips.is_empty() {
                trace.note(|| {
                    format!("this cluster's ServiceImport {key} has no ClusterSetIP (spec.ips) yet")
                });
            } else {
                trace.note(|| {
                    let vips: Vec<String> = vips.iter().map(IpAddr::to_string).collect();
                    format!(
                        "ClusterSetIPs of this cluster's ServiceImport {key}: {}",
                        vips.join(", ")
                    )
                });
            }
            // One record per port number: a TCP and a UDP port of one
            // number are one record, as CoreDNS deduplicates them.
            let ports: BTreeSet<u16> = service
                .ports
                .iter()
                .filter(|port| !port.backends.is_empty())
                .map(|port| port.port)
                .collect();
            let srv = match zone.name(&[&key.name, &key.namespace, "svc"]) {
                Ok(target) if !vips.is_empty() => ports
                    .into_iter()
                    .map(|port| SRV::new(0, SRV_WEIGHT, port, target.clone()))
                    .collect(),
                _ => Vec::new(),
            };
            Some(Node {
                addresses: vips.to_vec(),
                srv,
                ..Node::default()
            })
        }
    }
}

fn port_node(
    table: &RouteTable,
    zone: &Zone,
    service: &ServiceRoutes,
    port_name: &str,
    protocol: Protocol,
    trace: &mut Trace<'_>,
) -> Option<Node> {
    let Some(port) = service
        .ports
        .iter()
        .find(|p| p.protocol == protocol && !p.name.is_empty() && p.name == port_name)
    else {
        trace.note(|| {
            format!(
                "{} has no port named {port_name:?} over {}",
                service.key,
                protocol.as_str()
            )
        });
        return None;
    };
    trace.with(|e| {
        e.port = Some(format!(
            "{} {}/{}",
            port.name,
            port.port,
            port.protocol.as_str()
        ))
    });
    if !has_srv(service, port) {
        trace.note(|| "no backend this gateway can route to: no SRV record".to_owned());
        return None;
    }
    let mut srv = Vec::new();
    match service.service_type {
        ServiceType::Headless => {
            // A dual-stack pod is two backends with one name: one target.
            let mut targets = BTreeSet::new();
            for routed in ready(port) {
                let reach = reach(table, service, routed);
                trace_backend(trace, routed, &reach);
                if reach.answered()
                    && let Some(target) = pod_name(zone, service, routed)
                {
                    targets.insert((target, routed.backend.port));
                }
            }
            let weight = weight(targets.len());
            srv.extend(
                targets
                    .into_iter()
                    .map(|(target, port)| SRV::new(0, weight, port, target)),
            );
        }
        ServiceType::ClusterSetIp | ServiceType::ExternalName => {
            trace.note(|| {
                format!(
                    "{} backend(s) can carry this port; the target is the service name",
                    port.backends.len()
                )
            });
            let key = &service.key;
            if let Ok(target) = zone.name(&[&key.name, &key.namespace, "svc"]) {
                srv.push(SRV::new(0, SRV_WEIGHT, port.port, target));
            }
        }
    }
    Some(Node {
        srv,
        ..Node::default()
    })
}

/// `<hostname>.<cluster-id>` (one pod) or `<cluster-id>` (an empty
/// non-terminal) under a headless service.
fn below_node(
    table: &RouteTable,
    service: &ServiceRoutes,
    labels: &[String],
    trace: &mut Trace<'_>,
) -> Option<Node> {
    if service.service_type != ServiceType::Headless {
        trace.with(|e| e.name_kind = "unknown");
        trace.note(|| {
            format!(
                "{} is a ClusterSetIP service: it has no per-pod names",
                service.key
            )
        });
        return None;
    }
    if let [hostname, cluster @ ..] = labels
        && !cluster.is_empty()
    {
        let cluster = cluster.join(".");
        let mut exists = false;
        let mut addresses = BTreeSet::new();
        for routed in pods(service).filter(|r| {
            r.backend.cluster.as_str() == cluster
                && r.backend.pod_label().eq_ignore_ascii_case(hostname)
        }) {
            exists = true;
            let reach = reach(table, service, routed);
            addresses.extend(reach.addresses());
            trace_backend(trace, routed, &reach);
        }
        if exists {
            trace.with(|e| e.name_kind = "pod");
            return Some(Node {
                addresses: addresses.into_iter().collect(),
                ..Node::default()
            });
        }
    }
    let cluster = labels.join(".");
    trace.with(|e| e.name_kind = "cluster");
    let exists = pods(service).any(|r| r.backend.cluster.as_str() == cluster);
    if !exists {
        trace.note(|| format!("no ready pod of {} named {}", service.key, labels.join(".")));
    }
    exists.then(Node::default)
}

/// Whether a port of the service gets an SRV owner name: it is named, and
/// some backend can carry it (for a headless service, some ready pod).
fn has_srv(service: &ServiceRoutes, port: &PortRoute) -> bool {
    !port.name.is_empty()
        && match service.service_type {
            ServiceType::Headless => ready(port).next().is_some(),
            ServiceType::ClusterSetIp | ServiceType::ExternalName => !port.backends.is_empty(),
        }
}

/// Ready backends of one port. DNS names only ready pods; the
/// serving-and-terminating fallback is for connections, not for names.
fn ready(port: &PortRoute) -> impl Iterator<Item = RoutedBackend<'_>> {
    port.backends
        .iter()
        .filter(|r| r.backend.state == BackendState::Ready)
}

/// Ready backends of every port of a service: each pod once per port.
fn pods(service: &ServiceRoutes) -> impl Iterator<Item = RoutedBackend<'_>> {
    service.ports.iter().flat_map(ready)
}

/// How this cluster reaches one pod of a headless service.
enum Reach<'t> {
    /// On this network: its own address.
    Own(IpAddr),
    /// On another network, through its addresses on this side.
    Through(&'t [IpAddr]),
    /// On another network with no address on this side.
    Unreachable,
}

impl Reach<'_> {
    fn addresses(&self) -> impl Iterator<Item = IpAddr> + '_ {
        let (own, through): (Option<IpAddr>, &[IpAddr]) = match self {
            Reach::Own(address) => (Some(*address), &[]),
            Reach::Through(addresses) => (None, addresses),
            Reach::Unreachable => (None, &[]),
        };
        own.into_iter().chain(through.iter().copied())
    }

    fn answered(&self) -> bool {
        !matches!(self, Reach::Unreachable)
    }
}

fn reach<'t>(
    table: &'t RouteTable,
    service: &ServiceRoutes,
    routed: RoutedBackend<'_>,
) -> Reach<'t> {
    if *routed.path() == Path::Direct {
        return Reach::Own(routed.backend.address);
    }
    let through = table.pod_addresses(&service.key, &routed.backend.pod_ref());
    if through.is_empty() {
        Reach::Unreachable
    } else {
        Reach::Through(through)
    }
}

/// `<label>.<cluster-id>.<svc>.<ns>.svc.<zone>.` of one pod; a cluster id
/// with dots is several labels.
fn pod_name(zone: &Zone, service: &ServiceRoutes, routed: RoutedBackend<'_>) -> Option<Name> {
    let label = routed.backend.pod_label();
    let mut labels: Vec<&str> = vec![&label];
    labels.extend(routed.backend.cluster.as_str().split('.'));
    labels.extend([service.key.name.as_str(), &service.key.namespace, "svc"]);
    zone.name(&labels).ok()
}

/// Equal shares of 100 for `count` SRV targets of one priority.
fn weight(count: usize) -> u16 {
    u16::try_from(100 / count.max(1)).unwrap_or(1).max(1)
}

fn trace_backend(trace: &mut Trace<'_>, routed: RoutedBackend<'_>, reach: &Reach<'_>) {
    trace.with(|e| {
        let address = routed.backend.address;
        let answered = reach.answered();
        // A pod of two ports is considered twice; list it once.
        if e.backends.iter().any(|b| {
            b.address == address
                && b.cluster == routed.backend.cluster.as_str()
                && b.answered == answered
        }) {
            return;
        }
        e.backends.push(ExplainedBackend {
            cluster: routed.backend.cluster.to_string(),
            address,
            port: routed.backend.port,
            network: routed.network().to_string(),
            path: routed.path().as_str(),
            pod: routed.backend.pod_label().into_owned(),
            answered,
            answered_with: match reach {
                Reach::Through(addresses) => addresses.to_vec(),
                Reach::Own(_) | Reach::Unreachable => Vec::new(),
            },
            reason: match reach {
                Reach::Own(_) => None,
                Reach::Through(_) => Some(
                    "on another network: answered with its address on this side, which reaches it through its network's gateway",
                ),
                Reach::Unreachable => Some(
                    "on another network, with no address on this side: beyond dns.maxHeadlessEndpoints, its per-pod derived Service has no ClusterIP yet, or (a file setup) imports.podAddresses is not set",
                ),
            },
        });
    });
}

#[cfg(test)]
#[path = "answer_tests.rs"]
mod tests;
