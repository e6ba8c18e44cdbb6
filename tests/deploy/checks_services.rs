//! The Services: they select the gateway pods and reach its listeners; the
//! gateway Service is the load balancer peers tunnel to, with
//! `externalTrafficPolicy: Local`; `cluster-edge-dns` gives CoreDNS the DNS
//! responder on port 53.

use std::collections::BTreeSet;

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::gateway::gateway;
use crate::manifests::manifests;

/// The label that marks a cluster's gateway Service (docs/configuration.md).
const GATEWAY_LABEL: &str = "strait.dev/gateway";

#[test]
fn services_target_the_gateway_pods_and_listeners() {
    let gateway = gateway();
    let labels = gateway.pod_labels();
    let connect = gateway.listen("--connect-listen").port();
    let tunnel = gateway.listen("--tunnel-listen").port();
    let dns = gateway.listen("--dns-listen").port();
    let mut connect_service = false;
    for found in &manifests().services {
        let origin = &found.origin;
        let spec = found
            .object
            .spec
            .as_ref()
            .unwrap_or_else(|| panic!("{origin}: no spec"));
        let selector = spec
            .selector
            .as_ref()
            .unwrap_or_else(|| panic!("{origin}: no selector"));
        assert!(
            !selector.is_empty() && selector.iter().all(|(k, v)| labels.get(k) == Some(v)),
            "{origin}: selector {selector:?} does not select the pods of {}",
            gateway.origin()
        );
        for port in spec.ports.as_deref().unwrap_or_default() {
            let protocol = port.protocol.as_deref().unwrap_or("TCP");
            let target = port
                .target_port
                .clone()
                .unwrap_or(IntOrString::Int(port.port));
            let resolved = gateway.resolve(&target, protocol).unwrap_or_else(|| {
                panic!(
                    "{origin}: port {:?} targets {target:?}/{protocol}, which is no container port of {}",
                    port.name,
                    gateway.origin()
                )
            });
            let expected = match port.name.as_deref() {
                Some("tunnel" | "tunnel-quic") => tunnel,
                Some("dns" | "dns-tcp") => dns,
                Some("connect") => {
                    connect_service = true;
                    assert_eq!(
                        spec.type_.as_deref().unwrap_or("ClusterIP"),
                        "ClusterIP",
                        "{origin}: the connect listener is for clients inside the cluster"
                    );
                    connect
                }
                other => panic!("{origin}: unexpected port {other:?}"),
            };
            assert_eq!(
                resolved, expected,
                "{origin}: port {:?} reaches container port {resolved}, not the listener's {expected}",
                port.name
            );
        }
    }
    assert!(
        connect_service,
        "deploy/ has no ClusterIP Service for the connect listener"
    );
}

#[test]
fn the_dns_service_offers_port_53_over_udp_and_tcp_inside_the_cluster() {
    let found = manifests()
        .services
        .iter()
        .find(|s| s.object.metadata.name.as_deref() == Some("cluster-edge-dns"))
        .expect(
            "deploy/ has the Service cluster-edge-dns (CoreDNS forwards clusterset.local to it)",
        );
    let origin = &found.origin;
    let spec = found.object.spec.as_ref().expect("checked elsewhere");
    assert_eq!(
        spec.type_.as_deref().unwrap_or("ClusterIP"),
        "ClusterIP",
        "{origin}: the DNS responder is for this cluster's CoreDNS only"
    );
    let ports: BTreeSet<(String, String, i32)> = spec
        .ports
        .as_deref()
        .unwrap_or_default()
        .iter()
        .map(|p| {
            (
                p.name.clone().unwrap_or_default(),
                p.protocol.clone().unwrap_or_else(|| "TCP".to_owned()),
                p.port,
            )
        })
        .collect();
    let expected: BTreeSet<(String, String, i32)> = [
        ("dns".to_owned(), "UDP".to_owned(), 53),
        ("dns-tcp".to_owned(), "TCP".to_owned(), 53),
    ]
    .into();
    assert_eq!(
        ports, expected,
        "{origin}: ports should be dns 53/UDP and dns-tcp 53/TCP (answers that do not fit UDP are retried over TCP)"
    );
}

#[test]
fn the_gateway_service_is_a_load_balancer_with_the_tunnel_ports() {
    let gateway_services: Vec<_> = manifests()
        .services
        .iter()
        .filter(|s| {
            s.object
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(GATEWAY_LABEL))
                .is_some()
        })
        .collect();
    assert_eq!(
        gateway_services.len(),
        1,
        "deploy/ should hold exactly one Service labelled {GATEWAY_LABEL}, found: {:?}",
        gateway_services
            .iter()
            .map(|s| &s.origin)
            .collect::<Vec<_>>()
    );
    let found = gateway_services[0];
    let origin = &found.origin;
    let labels = found.object.metadata.labels.as_ref().expect("filtered");
    assert_eq!(
        labels.get(GATEWAY_LABEL).map(String::as_str),
        Some("true"),
        "{origin}: label {GATEWAY_LABEL} must be \"true\""
    );
    let spec = found.object.spec.as_ref().expect("checked elsewhere");
    assert_eq!(
        spec.type_.as_deref(),
        Some("LoadBalancer"),
        "{origin}: peers reach the gateway through a load balancer"
    );
    let ports: BTreeSet<(String, String, i32)> = spec
        .ports
        .as_deref()
        .unwrap_or_default()
        .iter()
        .map(|p| {
            (
                p.name.clone().unwrap_or_default(),
                p.protocol.clone().unwrap_or_else(|| "TCP".to_owned()),
                p.port,
            )
        })
        .collect();
    let expected: BTreeSet<(String, String, i32)> = [
        ("tunnel".to_owned(), "TCP".to_owned(), 15008),
        ("tunnel-quic".to_owned(), "UDP".to_owned(), 15008),
    ]
    .into();
    assert_eq!(
        ports, expected,
        "{origin}: ports should be tunnel 15008/TCP and tunnel-quic 15008/UDP"
    );
}

#[test]
fn load_balancers_keep_the_callers_address() {
    let balancers: Vec<_> = manifests()
        .services
        .iter()
        .filter(|s| {
            let spec = s.object.spec.as_ref();
            spec.and_then(|spec| spec.type_.as_deref()) == Some("LoadBalancer")
        })
        .collect();
    assert!(!balancers.is_empty(), "deploy/ has no LoadBalancer Service");
    for found in balancers {
        let origin = &found.origin;
        let spec = found.object.spec.as_ref().expect("filtered");
        assert_eq!(
            spec.external_traffic_policy.as_deref(),
            Some("Local"),
            "{origin}: externalTrafficPolicy should be Local: the peer's source address is kept (deploy/networkpolicy.yaml, loadBalancerSourceRanges) with no second hop, and the load balancer's health check sends traffic only to nodes with a ready gateway pod"
        );
        for range in spec.load_balancer_source_ranges.iter().flatten() {
            assert!(
                range.parse::<ipnet::IpNet>().is_ok(),
                "{origin}: loadBalancerSourceRanges: {range:?} is not a CIDR"
            );
        }
    }
}
