//! The NetworkPolicy: it selects exactly the gateway pods, restricts
//! ingress only, and admits every listener to those it serves: the tunnel
//! from anywhere, CONNECT, DNS and the import ports (`imports.portRange`)
//! from pods of any namespace, the admin port only from pods labelled
//! `strait.dev/scrape: "true"` in namespaces labelled so (a tenant can
//! label its pods, not its namespace); nothing but the tunnel is open
//! beyond the cluster's pods.

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;

use k8s_openapi::api::networking::v1::{
    NetworkPolicy, NetworkPolicyIngressRule, NetworkPolicyPeer, NetworkPolicyPort,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::gateway::{Gateway, gateway, selector_matches};
use crate::manifests::{Found, manifests};

/// The pod label that admits a scraper to the admin port
/// (deploy/observability/podmonitor.yaml, docs/kubernetes.md step 11).
const SCRAPE_LABEL: &str = "strait.dev/scrape";

/// Every IPv4 and every IPv6 address: where peer gateways dial the tunnel from.
const ANYWHERE: [&str; 2] = ["0.0.0.0/0", "::/0"];

/// The container ports of the tunnel listener (TCP and UDP).
const TUNNEL_PORTS: [&str; 2] = ["tunnel", "tunnel-quic"];

/// A port of the gateway pod a connection arrives at: its container port
/// name (none for an import or ClusterSetIP listener port), number and
/// protocol.
struct Target<'a> {
    name: Option<&'a str>,
    number: i32,
    protocol: &'a str,
}

impl fmt::Display for Target<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name {
            Some(name) => write!(f, "{name} ({}/{})", self.number, self.protocol),
            None => write!(f, "{}/{}", self.number, self.protocol),
        }
    }
}

/// The one NetworkPolicy of deploy/.
fn policy() -> &'static Found<NetworkPolicy> {
    let policies = &manifests().network_policies;
    assert_eq!(
        policies.len(),
        1,
        "deploy/ should hold one NetworkPolicy (deploy/networkpolicy.yaml), found: {:?}",
        policies.iter().map(|p| &p.origin).collect::<Vec<_>>()
    );
    &policies[0]
}

fn ingress(found: &Found<NetworkPolicy>) -> &[NetworkPolicyIngressRule] {
    found
        .object
        .spec
        .as_ref()
        .and_then(|s| s.ingress.as_deref())
        .unwrap_or_default()
}

fn protocol_of(entry: &NetworkPolicyPort) -> &str {
    entry.protocol.as_deref().unwrap_or("TCP")
}

/// Whether one `ports` entry admits the target: the same protocol, and the
/// same container port name, or a number (up to `endPort`) that holds it;
/// an entry without a port admits every port of its protocol.
fn entry_admits(entry: &NetworkPolicyPort, target: &Target) -> bool {
    if protocol_of(entry) != target.protocol {
        return false;
    }
    match &entry.port {
        None => true,
        Some(IntOrString::Int(first)) => {
            (*first..=entry.end_port.unwrap_or(*first)).contains(&target.number)
        }
        Some(IntOrString::String(name)) => target.name == Some(name.as_str()),
    }
}

/// Whether a rule admits connections to the target (from its sources); a
/// rule without `ports` admits every port.
fn rule_admits(rule: &NetworkPolicyIngressRule, target: &Target) -> bool {
    match rule.ports.as_deref() {
        None | Some([]) => true,
        Some(entries) => entries.iter().any(|entry| entry_admits(entry, target)),
    }
}

/// A rule's sources; `None` when it has no `from`, which admits every source.
fn sources(rule: &NetworkPolicyIngressRule) -> Option<&[NetworkPolicyPeer]> {
    rule.from.as_deref().filter(|from| !from.is_empty())
}

fn is_empty_selector(selector: &LabelSelector) -> bool {
    selector
        .match_labels
        .as_ref()
        .is_none_or(BTreeMap::is_empty)
        && selector
            .match_expressions
            .as_ref()
            .is_none_or(Vec::is_empty)
}

/// `namespaceSelector: {}` with no pod selector: every pod of every namespace.
fn is_any_pod(peer: &NetworkPolicyPeer) -> bool {
    peer.ip_block.is_none()
        && peer
            .namespace_selector
            .as_ref()
            .is_some_and(is_empty_selector)
        && peer.pod_selector.as_ref().is_none_or(is_empty_selector)
}

/// A namespace selector and a pod selector, each of exactly
/// `strait.dev/scrape: "true"`: a pod label alone is a tenant's to set.
fn is_scraper(peer: &NetworkPolicyPeer) -> bool {
    let scrape = BTreeMap::from([(SCRAPE_LABEL.to_owned(), "true".to_owned())]);
    let exactly_scrape = |selector: &LabelSelector| {
        selector.match_labels.as_ref() == Some(&scrape)
            && selector
                .match_expressions
                .as_ref()
                .is_none_or(Vec::is_empty)
    };
    peer.ip_block.is_none()
        && peer.namespace_selector.as_ref().is_some_and(exactly_scrape)
        && peer.pod_selector.as_ref().is_some_and(exactly_scrape)
}

/// An `ipBlock` of all of `cidr`, with no exceptions.
fn is_block(peer: &NetworkPolicyPeer, cidr: &str) -> bool {
    peer.ip_block
        .as_ref()
        .is_some_and(|block| block.cidr == cidr && block.except.as_ref().is_none_or(Vec::is_empty))
}

/// Whether some rule that admits the target admits it from a source `peer` accepts.
fn admitted_from(
    rules: &[NetworkPolicyIngressRule],
    target: &Target,
    peer: impl Fn(&NetworkPolicyPeer) -> bool,
) -> bool {
    rules
        .iter()
        .filter(|rule| rule_admits(rule, target))
        .any(|rule| sources(rule).is_none_or(|peers| peers.iter().any(&peer)))
}

/// The ClusterSetIP listener addresses: `--cluster-set-ip-listen` (repeatable)
/// and `listeners.clusterSetIP` of gateway.yaml.
fn cluster_set_ip_listeners(gateway: &Gateway) -> Vec<SocketAddr> {
    const FLAG: &str = "--cluster-set-ip-listen";
    let mut values = Vec::new();
    let mut args = gateway.args.iter();
    while let Some(arg) = args.next() {
        if arg == FLAG {
            values.extend(args.next().map(String::as_str));
        } else if let Some(value) = arg.strip_prefix(FLAG).and_then(|r| r.strip_prefix('=')) {
            values.push(value);
        }
    }
    let mut addresses: Vec<SocketAddr> = values
        .into_iter()
        .map(|value| {
            value.parse::<SocketAddr>().unwrap_or_else(|e| {
                panic!(
                    "{}: {FLAG} {value:?} is not an address: {e}",
                    gateway.origin()
                )
            })
        })
        .collect();
    addresses.extend(gateway.settings().1.listeners.cluster_set_ip);
    addresses
}

#[test]
fn the_network_policy_guards_the_gateway_pods_ingress_only() {
    let gateway = gateway();
    let found = policy();
    let origin = &found.origin;
    assert_eq!(
        found.object.metadata.namespace.as_deref(),
        Some(gateway.namespace),
        "{origin}: should be in the gateway's namespace"
    );
    let spec = found
        .object
        .spec
        .as_ref()
        .unwrap_or_else(|| panic!("{origin}: no spec"));
    let selector = spec
        .pod_selector
        .as_ref()
        .unwrap_or_else(|| panic!("{origin}: no podSelector"));
    let deployment = &gateway
        .found
        .object
        .spec
        .as_ref()
        .expect("checked")
        .selector;
    assert!(
        selector_matches(selector, gateway.pod_labels()),
        "{origin}: podSelector {selector:?} does not select the pods of {}",
        gateway.origin()
    );
    assert_eq!(
        selector.match_labels,
        deployment.match_labels,
        "{origin}: podSelector should select exactly the pods of {} (its selector's matchLabels)",
        gateway.origin()
    );
    let types: Vec<&str> = spec
        .policy_types
        .iter()
        .flatten()
        .map(String::as_str)
        .collect();
    assert_eq!(
        types,
        ["Ingress"],
        "{origin}: policyTypes should be Ingress only; egress stays open (backends on any port, peer gateways, remote API servers)"
    );
    assert!(
        spec.egress.is_none(),
        "{origin}: egress rules are ignored without Egress in policyTypes; leave them out"
    );
    let rules = ingress(found);
    assert!(
        !rules.is_empty(),
        "{origin}: no ingress rules: every connection to the gateway pods would be refused"
    );
    for rule in rules {
        for entry in rule.ports.iter().flatten() {
            if let Some(end) = entry.end_port {
                assert!(
                    matches!(entry.port, Some(IntOrString::Int(first)) if first <= end),
                    "{origin}: endPort {end} needs a numeric port no greater than it, found {:?}",
                    entry.port
                );
            }
        }
    }
}

#[test]
fn every_container_port_is_admitted_from_whom_it_serves() {
    let gateway = gateway();
    let found = policy();
    let origin = &found.origin;
    let rules = ingress(found);
    let ports = gateway.container.ports.as_deref().unwrap_or_default();
    assert!(
        !ports.is_empty(),
        "{}: no container ports",
        gateway.origin()
    );
    for port in ports {
        let name = port.name.as_deref().unwrap_or_else(|| {
            panic!(
                "{}: container port {} has no name",
                gateway.origin(),
                port.container_port
            )
        });
        let target = Target {
            name: Some(name),
            number: port.container_port,
            protocol: port.protocol.as_deref().unwrap_or("TCP"),
        };
        assert!(
            rules.iter().any(|rule| rule_admits(rule, &target)),
            "{origin}: no ingress rule admits container port {target} of {}",
            gateway.origin()
        );
        match name {
            "tunnel" | "tunnel-quic" => {
                for cidr in ANYWHERE {
                    assert!(
                        admitted_from(rules, &target, |peer| is_block(peer, cidr)),
                        "{origin}: {target} should be admitted from ipBlock {cidr}: peer gateways of other networks dial it from anywhere"
                    );
                }
            }
            "connect" | "dns" | "dns-tcp" => assert!(
                admitted_from(rules, &target, is_any_pod),
                "{origin}: {target} should be admitted from every pod (namespaceSelector: {{}}): clients and CoreDNS run in any namespace"
            ),
            "admin" => {
                for rule in rules.iter().filter(|rule| rule_admits(rule, &target)) {
                    let peers = sources(rule).unwrap_or_else(|| {
                        panic!("{origin}: a rule without `from` admits the admin port from every source; only pods labelled {SCRAPE_LABEL}: \"true\" may read /metrics and /debug")
                    });
                    for peer in peers {
                        assert!(
                            is_scraper(peer),
                            "{origin}: the admin port is admitted from {peer:?}; only from namespaceSelector {{}} with podSelector {SCRAPE_LABEL}: \"true\""
                        );
                    }
                }
            }
            other => panic!(
                "{origin}: container port {other} is new to this test; say who may reach it (tests/deploy/checks_network.rs)"
            ),
        }
    }
}

#[test]
fn import_and_cluster_set_ip_ports_are_admitted_from_every_pod() {
    let gateway = gateway();
    let found = policy();
    let origin = &found.origin;
    let rules = ingress(found);
    let (config_map, settings) = gateway.settings();
    // kube-proxy sends a pod's connection to a ClusterSetIP to a gateway
    // pod's import port (a derived Service's targetPort), keeping the pod's
    // address; a UDP service port's import port is a UDP one.
    if settings.imports.listen {
        let range = &settings.imports.port_range;
        let (first, last) = (i32::from(range.first()), i32::from(range.last()));
        for protocol in ["TCP", "UDP"] {
            for number in first..=last {
                let target = Target {
                    name: None,
                    number,
                    protocol,
                };
                assert!(
                    admitted_from(rules, &target, is_any_pod),
                    "{origin}: import port {number}/{protocol} is not admitted from every pod; imports.portRange of {} is {first}-{last}",
                    config_map.origin
                );
            }
        }
    }
    for address in cluster_set_ip_listeners(&gateway) {
        let target = Target {
            name: None,
            number: i32::from(address.port()),
            protocol: "TCP",
        };
        assert!(
            admitted_from(rules, &target, is_any_pod),
            "{origin}: the ClusterSetIP listener {address} is not admitted from every pod"
        );
    }
}

#[test]
fn only_the_tunnel_is_open_beyond_the_cluster() {
    let gateway = gateway();
    let found = policy();
    let origin = &found.origin;
    let tunnel = gateway.listen("--tunnel-listen").port();
    let tunnel_targets: Vec<Target> = TUNNEL_PORTS
        .into_iter()
        .zip(["TCP", "UDP"])
        .map(|(name, protocol)| Target {
            name: Some(name),
            number: i32::from(tunnel),
            protocol,
        })
        .collect();
    for (index, rule) in ingress(found).iter().enumerate() {
        // A rule without `from` admits every source; an ipBlock admits
        // addresses outside the cluster's pods.
        let beyond = sources(rule).is_none_or(|peers| peers.iter().any(|p| p.ip_block.is_some()));
        if !beyond {
            continue;
        }
        let entries = rule.ports.as_deref().unwrap_or_default();
        assert!(
            !entries.is_empty(),
            "{origin}: ingress[{index}] admits every port from beyond the cluster's pods"
        );
        for entry in entries {
            let tunnel_only = entry.port.is_some()
                && entry.end_port.is_none()
                && tunnel_targets.iter().any(|t| entry_admits(entry, t));
            assert!(
                tunnel_only,
                "{origin}: ingress[{index}] admits {entry:?} from beyond the cluster's pods; only the tunnel ports {TUNNEL_PORTS:?} may be (CONNECT, DNS, admin and the import ports serve this cluster)"
            );
        }
    }
}
