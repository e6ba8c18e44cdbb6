//! Translation of a Kubernetes Service: its exportable spec, or, for the
//! Service labelled as the cluster's gateway, the addresses peers tunnel to.

use std::net::IpAddr;

use crate::discovery::objects::Service;

use crate::model::{
    GatewayAddress, GatewayHost, IpFamily, ServicePort, ServiceSpec, ServiceType, SessionAffinity,
    check_dns_subdomain,
};

use super::{Findings, GATEWAY_LABEL, TUNNEL_PORT_NAME, port_number, protocol};

/// The longest session affinity timeout Kubernetes accepts (one day).
const MAX_AFFINITY_TIMEOUT_SECONDS: i32 = 86_400;
/// The timeout the API server fills in for ClientIP affinity (three hours).
const DEFAULT_AFFINITY_TIMEOUT_SECONDS: u32 = 10_800;

/// Whether `service` is the cluster's gateway: labelled so, in the gateway
/// namespace. The label elsewhere is a tenant's claim; it is reported and
/// the Service read as any other.
pub(super) fn is_gateway(
    service: &Service,
    gateway_namespace: &str,
    findings: &mut Findings<'_>,
) -> bool {
    if !labelled_gateway(service) {
        return false;
    }
    let namespace = service.metadata.namespace.as_deref().unwrap_or("default");
    if namespace != gateway_namespace {
        findings.warning(format!(
            "is labelled {GATEWAY_LABEL} but is not in the gateway namespace {gateway_namespace:?}; only a Service there names the cluster's gateway, so this one is read as an ordinary Service"
        ));
        return false;
    }
    true
}

/// Whether `service` carries the gateway label, wherever it is.
pub fn labelled_gateway(service: &Service) -> bool {
    service
        .metadata
        .labels
        .as_ref()
        .and_then(|labels| labels.get(GATEWAY_LABEL))
        .is_some_and(|value| value == "true")
}

/// The gateway's tunnel addresses: load balancer ingress addresses, else
/// external IPs, each with the port named `tunnel`.
pub(super) fn gateway_addresses(
    service: &Service,
    findings: &mut Findings<'_>,
) -> Vec<GatewayAddress> {
    let spec = service.spec.clone().unwrap_or_default();
    let ports = spec.ports.clone().unwrap_or_default();
    let Some((index, tunnel)) = ports
        .iter()
        .enumerate()
        .find(|(_, p)| p.name.as_deref() == Some(TUNNEL_PORT_NAME))
    else {
        findings.error(
            "spec.ports",
            format!("a gateway Service needs a port named {TUNNEL_PORT_NAME:?}"),
        );
        return Vec::new();
    };
    let Some(port) = port_number(tunnel.port, &format!("spec.ports[{index}].port"), findings)
    else {
        return Vec::new();
    };

    let mut hosts = Vec::new();
    let ingress = service
        .status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.clone())
        .unwrap_or_default();
    for (index, entry) in ingress.iter().enumerate() {
        let field = format!("status.loadBalancer.ingress[{index}]");
        if let Some(ip) = &entry.ip {
            match ip.parse::<IpAddr>() {
                Ok(ip) => hosts.push(GatewayHost::Ip(ip)),
                Err(_) => findings.error(
                    &format!("{field}.ip"),
                    format!("{ip:?} is not an IP address"),
                ),
            }
        } else if let Some(hostname) = &entry.hostname {
            match check_dns_subdomain(hostname, 253) {
                Ok(()) => hosts.push(GatewayHost::Dns(hostname.clone())),
                Err(error) => findings.error(&format!("{field}.hostname"), error.to_string()),
            }
        }
    }
    // External IPs stand in only when the load balancer gave no usable address.
    if hosts.is_empty() {
        for (index, ip) in spec.external_ips.iter().flatten().enumerate() {
            match ip.parse::<IpAddr>() {
                Ok(ip) => hosts.push(GatewayHost::Ip(ip)),
                Err(_) => findings.error(
                    &format!("spec.externalIPs[{index}]"),
                    format!("{ip:?} is not an IP address"),
                ),
            }
        }
    }
    if hosts.is_empty() {
        findings.warning(
            "gateway Service has no address yet (status.loadBalancer.ingress and spec.externalIPs are empty); peers cannot tunnel to it",
        );
    }
    hosts
        .into_iter()
        .map(|host| GatewayAddress { host, port })
        .collect()
}

/// The exportable parts of a Service's spec. Problems are reported on their
/// field; the spec is still returned without the offending parts, so that
/// later objects (its ServiceExport, its EndpointSlices) are checked too.
pub(super) fn translate_spec(
    service: &Service,
    findings: &mut Findings<'_>,
) -> Option<ServiceSpec> {
    let Some(spec) = service.spec.as_ref() else {
        findings.error("spec", "is missing");
        return None;
    };
    let headless = spec.cluster_ip.as_deref() == Some("None");
    let service_type = match spec.type_.as_deref() {
        Some("ExternalName") => ServiceType::ExternalName,
        None | Some("ClusterIP" | "NodePort" | "LoadBalancer") if headless => ServiceType::Headless,
        None | Some("ClusterIP" | "NodePort" | "LoadBalancer") => ServiceType::ClusterSetIp,
        Some(other) => {
            findings.error(
                "spec.type",
                format!("{other:?} is not a Service type; expected ClusterIP, NodePort, LoadBalancer or ExternalName"),
            );
            return None;
        }
    };

    let declared = spec.ports.as_deref().unwrap_or_default();
    let mut ports: Vec<ServicePort> = Vec::with_capacity(declared.len());
    for (index, port) in declared.iter().enumerate() {
        let field = format!("spec.ports[{index}]");
        let name = port.name.clone().unwrap_or_default();
        if name.is_empty() && declared.len() > 1 {
            findings.error(
                &format!("{field}.name"),
                "is required when a Service has several ports",
            );
            continue;
        }
        let Some(number) = port_number(port.port, &format!("{field}.port"), findings) else {
            continue;
        };
        let Some(protocol) = protocol(
            port.protocol.as_deref(),
            &format!("{field}.protocol"),
            findings,
        ) else {
            continue;
        };
        if ports.iter().any(|p| p.name == name) {
            findings.error(
                &format!("{field}.name"),
                format!("duplicate port name {name:?}"),
            );
            continue;
        }
        if ports
            .iter()
            .any(|p| p.protocol == protocol && p.port == number)
        {
            findings.error(
                &format!("{field}.port"),
                format!("duplicate port {number}/{protocol}"),
            );
            continue;
        }
        ports.push(ServicePort {
            name,
            protocol,
            port: number,
            app_protocol: port.app_protocol.clone(),
        });
    }

    let session_affinity = match spec.session_affinity.as_deref() {
        None | Some("None") => SessionAffinity::None,
        Some("ClientIP") => SessionAffinity::ClientIp,
        Some(other) => {
            findings.error(
                "spec.sessionAffinity",
                format!("{other:?} is not a session affinity; expected None or ClientIP"),
            );
            SessionAffinity::None
        }
    };
    let timeout = spec
        .session_affinity_config
        .as_ref()
        .and_then(|c| c.client_ip.as_ref())
        .and_then(|c| c.timeout_seconds);
    // Defaulted as the API server does, so that a file that leaves the timeout
    // out and a live cluster that fills it in do not conflict.
    let session_affinity_timeout = match timeout {
        None if session_affinity == SessionAffinity::ClientIp => {
            Some(DEFAULT_AFFINITY_TIMEOUT_SECONDS)
        }
        None => None,
        Some(seconds @ 1..=MAX_AFFINITY_TIMEOUT_SECONDS) => u32::try_from(seconds).ok(),
        Some(seconds) => {
            findings.error(
                "spec.sessionAffinityConfig.clientIP.timeoutSeconds",
                format!("{seconds} is outside 1-{MAX_AFFINITY_TIMEOUT_SECONDS}"),
            );
            None
        }
    };

    let mut ip_families = Vec::new();
    for (index, family) in spec.ip_families.iter().flatten().enumerate() {
        match &**family {
            "IPv4" => ip_families.push(IpFamily::IPv4),
            "IPv6" => ip_families.push(IpFamily::IPv6),
            other => findings.error(
                &format!("spec.ipFamilies[{index}]"),
                format!("{other:?} is not an IP family; expected IPv4 or IPv6"),
            ),
        }
    }

    let internal_traffic_policy = match spec.internal_traffic_policy.as_deref() {
        None => "Cluster".to_owned(),
        Some(policy @ ("Cluster" | "Local")) => policy.to_owned(),
        Some(other) => {
            findings.error(
                "spec.internalTrafficPolicy",
                format!("{other:?} is not a traffic policy; expected Cluster or Local"),
            );
            "Cluster".to_owned()
        }
    };

    Some(ServiceSpec {
        service_type,
        ports,
        session_affinity,
        session_affinity_timeout,
        ip_families,
        internal_traffic_policy,
        traffic_distribution: spec.traffic_distribution.clone(),
    })
}
