//! A cluster's machinery, by address: what no endpoint may make a tunnel
//! server dial (Service ClusterIPs, external and load balancer addresses,
//! the API server's endpoints, the gateway's own pods). Pure.

use std::net::IpAddr;

use super::service;
use crate::discovery::objects::{KubeObject, SourcedObject};
use crate::model::{Infrastructure, InfrastructureAddresses};

/// The Service whose endpoints are the cluster's API servers: namespace
/// and name.
pub const API_SERVER_SERVICE: (&str, &str) = ("default", "kubernetes");

/// The addresses of a cluster's own machinery among `objects` (all of one
/// cluster), sorted: every Service's cluster IPs, external IPs and load
/// balancer addresses, the API server's endpoints (`default/kubernetes`),
/// and the endpoints of the gateway Service (the one labelled so in
/// `gateway_namespace`). Read from
/// every Service, exported or not: an endpoint naming any of them would
/// make a tunnel server dial what no peer may reach.
pub fn infrastructure<'a>(
    objects: impl Iterator<Item = &'a SourcedObject> + Clone,
    gateway_namespace: &str,
) -> InfrastructureAddresses {
    let mut found: Vec<(IpAddr, Infrastructure)> = Vec::new();
    let mut gateways: Vec<&str> = Vec::new();
    for sourced in objects.clone() {
        if let KubeObject::Service(service) = &sourced.object {
            if let Some(spec) = &service.spec {
                found.extend(
                    spec.cluster_ips
                        .iter()
                        .map(|ip| (*ip, Infrastructure::ServiceIp)),
                );
                let external = spec.external_ips.iter().flatten();
                found.extend(
                    external
                        .filter_map(|ip| ip.parse::<IpAddr>().ok())
                        .map(|ip| (ip.to_canonical(), Infrastructure::ExternalIp)),
                );
            }
            let ingress = service
                .status
                .as_ref()
                .and_then(|status| status.load_balancer.as_ref())
                .and_then(|balancer| balancer.ingress.as_ref());
            found.extend(
                ingress
                    .into_iter()
                    .flatten()
                    .filter_map(|ingress| ingress.ip.as_deref()?.parse::<IpAddr>().ok())
                    .map(|ip| (ip.to_canonical(), Infrastructure::LoadBalancerIp)),
            );
            if sourced.object.namespace() == Some(gateway_namespace)
                && service::labelled_gateway(service)
            {
                gateways.push(sourced.object.name());
            }
        }
    }
    for sourced in objects {
        if let KubeObject::EndpointSlice(slice) = &sourced.object
            && slice.metadata.namespace.as_deref() == Some(API_SERVER_SERVICE.0)
            && slice.metadata.service_name.as_deref() == Some(API_SERVER_SERVICE.1)
        {
            found.extend(
                slice
                    .endpoints
                    .parsed
                    .iter()
                    .map(|endpoint| (endpoint.address.to_canonical(), Infrastructure::ApiServer)),
            );
            continue;
        }
        if let KubeObject::EndpointSlice(slice) = &sourced.object
            && slice.metadata.namespace.as_deref() == Some(gateway_namespace)
            && slice
                .metadata
                .service_name
                .as_deref()
                .is_some_and(|service| gateways.contains(&service))
        {
            found.extend(
                slice
                    .endpoints
                    .parsed
                    .iter()
                    .map(|endpoint| (endpoint.address.to_canonical(), Infrastructure::GatewayPod)),
            );
        }
    }
    found.sort_unstable();
    found.dedup_by_key(|(address, _)| *address);
    found.into()
}
