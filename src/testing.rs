//! Builders for cluster sets in unit tests and benchmarks, so a test states
//! only what it is about.

use std::net::IpAddr;

use k8s_openapi::jiff::Timestamp;

use crate::model::{
    Cluster, ClusterId, ClusterService, ClusterSet, Endpoint, EndpointDetails, EndpointGroup,
    EndpointPort, Export, GatewayAddress, GatewayHost, NetworkId, Protocol, ServiceKey,
    ServicePort, ServiceSpec, ServiceType,
};

/// Parses an address written in a test.
pub fn ip(text: &str) -> IpAddr {
    text.parse().expect("test address parses")
}

/// A `shop/cart` Service of one cluster, built step by step.
pub type ServiceBuilder = ClusterService;

impl ClusterService {
    /// `shop/cart`, ClusterSetIP, no ports, not exported, one empty EndpointSlice.
    pub fn new() -> Self {
        Self {
            key: ServiceKey::new("shop", "cart"),
            spec: ServiceSpec::cluster_set_ip(Vec::new()),
            export: None,
            endpoint_groups: vec![EndpointGroup::default()],
        }
    }

    /// The same Service named `shop/<name>`.
    pub fn named(mut self, name: &str) -> Self {
        self.key = ServiceKey::new("shop", name);
        self
    }

    /// Adds a TCP port whose EndpointSlice port of the same name is `target`.
    pub fn port(self, name: &str, port: u16, target: u16) -> Self {
        self.port_with(name, Protocol::Tcp, port, target)
    }

    pub fn port_with(mut self, name: &str, protocol: Protocol, port: u16, target: u16) -> Self {
        self.spec.ports.push(ServicePort {
            name: name.to_owned(),
            protocol,
            port,
            app_protocol: None,
        });
        if let Some(group) = self.endpoint_groups.first_mut() {
            let mut ports = group.ports.to_vec();
            ports.push(EndpointPort {
                name: name.to_owned(),
                protocol,
                port: target,
            });
            group.ports = ports.into();
        }
        self
    }

    pub fn headless(mut self) -> Self {
        self.spec.service_type = ServiceType::Headless;
        self
    }

    /// Exports the Service, created `seconds` after the epoch.
    pub fn exported_at(mut self, seconds: i64) -> Self {
        self.export = Some(Export {
            created: Timestamp::from_second(seconds).ok(),
            ..Export::default()
        });
        self
    }

    /// Its export asks for the PROXY protocol (call after `exported_at`).
    pub fn proxy_protocol(mut self) -> Self {
        if let Some(export) = self.export.as_mut() {
            export.proxy_protocol = true;
        }
        self
    }

    /// Its export states this routing policy (call after `exported_at`).
    pub fn routing(mut self, policy: crate::model::RoutingPolicy) -> Self {
        if let Some(export) = self.export.as_mut() {
            export.routing = policy;
        }
        self
    }

    /// The Service's `trafficDistribution`.
    pub fn traffic_distribution(mut self, value: &str) -> Self {
        self.spec.traffic_distribution = Some(value.to_owned());
        self
    }

    pub fn exported_without_timestamp(mut self) -> Self {
        self.export = Some(Export::default());
        self
    }

    /// Adds a ready endpoint.
    pub fn endpoint(self, address: &str) -> Self {
        self.endpoint_with(address, true, true, false)
    }

    /// Adds a ready endpoint with a hostname (a StatefulSet pod's).
    pub fn endpoint_named(mut self, address: &str, hostname: &str) -> Self {
        if let Some(group) = self.endpoint_groups.first_mut() {
            group.endpoints = group.endpoints.with(
                Endpoint::ready(ip(address)),
                EndpointDetails::hostname(hostname),
            );
        }
        self
    }

    pub fn endpoint_with(
        mut self,
        address: &str,
        ready: bool,
        serving: bool,
        terminating: bool,
    ) -> Self {
        if let Some(group) = self.endpoint_groups.first_mut() {
            group.add_endpoint(Endpoint {
                ready,
                serving,
                terminating,
                ..Endpoint::ready(ip(address))
            });
        }
        self
    }
}

/// `shop/<name>`, exported, port `http` 80 to 8080, one ready endpoint.
pub fn exported_http(name: &str, address: &str) -> ClusterService {
    ServiceBuilder::new()
        .named(name)
        .port("http", 80, 8080)
        .exported_at(1)
        .endpoint(address)
}

impl Default for ClusterService {
    fn default() -> Self {
        Self::new()
    }
}

/// A set of clusters `(id, network, service)`, each with one service and one
/// gateway at `192.0.2.<n>:15008`, numbered in the order given.
pub fn cluster_set(clusters: &[(&str, &str, ClusterService)]) -> ClusterSet {
    let mut set = ClusterSet::default();
    for (index, (id, network, service)) in clusters.iter().enumerate() {
        let id = ClusterId::new(id).expect("test cluster id");
        let network = NetworkId::new(network).expect("test network id");
        let mut cluster = Cluster::new(id.clone(), network, format!("test:{id}"));
        // Test clusters are where the test says: as a network map would.
        cluster.network_attested = true;
        let host = u8::try_from(index + 10).expect("few test clusters");
        cluster.gateways.push(GatewayAddress {
            host: GatewayHost::Ip(IpAddr::from([192, 0, 2, host])),
            port: 15008,
        });
        cluster
            .services
            .insert(service.key.clone(), service.clone().into());
        set.clusters.insert(id, cluster);
    }
    set
}
