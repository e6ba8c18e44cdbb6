//! The exported-state feed's messages as they cross the wire (version 1,
//! docs/tunnel-protocol.md §10), and their conversion to and from the
//! model. What arrives is a member cluster's word about itself: every
//! field is checked here, within [`FeedLimits`], before it becomes a
//! [`ClusterService`], and a reserved metadata key is dropped again
//! whatever the sender filtered.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;

use k8s_openapi::jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::model::names::reserved_metadata_key;
use crate::model::{
    AccessPolicy, ClusterId, ClusterService, Endpoint, EndpointDetails, EndpointGroup,
    EndpointPort, EndpointsBuilder, Export, IpFamily, NetworkId, Protocol, RoutingPolicy,
    ServiceKey, ServicePort, ServiceSpec, ServiceType, SessionAffinity, is_dns_label,
    unroutable_endpoint,
};

/// The longest zone, `appProtocol`, `trafficDistribution` or metadata
/// key a feed may carry (a qualified name's prefix and name, 253 + 1 + 63).
const MAX_TEXT: usize = 317;

/// The feed's version: the last segment of [`FEED_PATH`] and the
/// `version` of every [`Hello`].
pub const FEED_VERSION: u32 = 1;

/// Where a gateway serves its feed on the tunnel port (an HTTP/2 `GET`).
pub const FEED_PATH: &str = "/strait.dev/feed/v1";

/// One message of a feed. Each is one length-prefixed frame.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub enum Message {
    /// The first message: who speaks, and what follows.
    Hello(Hello),
    /// A service the subscriber may import, whole, as it is now.
    Service(Box<WireService>),
    /// A service withdrawn: no longer exported, gone, or no longer
    /// admitting the subscriber.
    Withdrawn(WireKey),
    /// What came since the last `synced` (or the hello) is complete: the
    /// publisher's state at `revision`. A snapshot applies only here.
    Synced { revision: u64 },
    /// Nothing changed; the publisher is alive at `revision`.
    Heartbeat { revision: u64 },
}

/// Who publishes, and whether a snapshot or the changes since the
/// subscriber's revision follow.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Hello {
    pub version: u32,
    /// The publishing cluster's id: the one its certificate names.
    pub cluster: String,
    /// Its cluster set id, if it states one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clusterset: Option<String>,
    /// The publisher's instance: revisions count within it, so a
    /// subscriber resumes only against the same one.
    pub epoch: u64,
    /// `true`: every admitted service follows, then `synced`, and the
    /// subscriber drops what it held. `false`: only the changes since the
    /// revision the subscriber asked from.
    pub snapshot: bool,
    /// Its gateways' tunnel addresses (`host:port`).
    #[serde(default)]
    pub gateways: Vec<String>,
}

/// A service's namespace and name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WireKey {
    pub namespace: String,
    pub name: String,
}

/// One exported service: the inputs of its export and its endpoints.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WireService {
    pub namespace: String,
    pub name: String,
    /// `ClusterSetIP` or `Headless`.
    #[serde(rename = "type")]
    pub service_type: String,
    pub ports: Vec<WirePort>,
    /// `None` or `ClientIP`.
    pub session_affinity: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_affinity_timeout_seconds: Option<u32>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ip_families: Vec<String>,
    pub internal_traffic_policy: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traffic_distribution: Option<String>,
    pub export: WireExport,
    /// One group per EndpointSlice: its ports and its endpoints.
    #[serde(default)]
    pub endpoints: Vec<WireEndpointGroup>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WirePort {
    #[serde(default)]
    pub name: String,
    pub protocol: String,
    pub port: u16,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub app_protocol: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WireExport {
    /// The ServiceExport's creation time (RFC 3339): the oldest wins a
    /// conflict.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    /// `strait.dev/allowed-clusters` and `allowed-networks`; absent: every
    /// cluster of the set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub access: Option<WireAccess>,
    #[serde(default)]
    pub proxy_protocol: bool,
    /// `strait.dev/locality`, `locality-minimum-healthy` and `fence-*`;
    /// absent: the export says nothing of where connections go.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub routing: Option<WireRouting>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WireRouting {
    /// `none`, `cluster` or `network`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub locality: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub locality_minimum_healthy: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fence: Option<WireAccess>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WireAccess {
    #[serde(default)]
    pub clusters: Vec<String>,
    #[serde(default)]
    pub networks: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WireEndpointGroup {
    pub ports: Vec<WirePort>,
    pub endpoints: Vec<WireEndpoint>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WireEndpoint {
    pub address: IpAddr,
    pub ready: bool,
    pub serving: bool,
    #[serde(default)]
    pub terminating: bool,
    /// The pod's hostname: a headless service's pods are named by it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
}

/// What one service of a feed may hold; past it the service is refused
/// (and the feed with it: a publisher that sends more is misbehaving).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FeedLimits {
    /// Bytes of one frame (one message), checked before it is read.
    pub max_message_bytes: usize,
    /// Services one cluster's feed may hold.
    pub max_services: usize,
    /// Endpoints of one service, over all its groups.
    pub max_endpoints_per_service: usize,
    /// Ports of one service or one endpoint group.
    pub max_ports: usize,
    /// Endpoint groups (EndpointSlices) of one service.
    pub max_endpoint_groups: usize,
    /// Exported labels plus annotations of one service.
    pub max_metadata_entries: usize,
    /// Bytes one cluster's feed may make its subscriber hold: the length
    /// of the message of each service held (and of a batch as it
    /// arrives).
    pub max_held_bytes: usize,
    /// Services a subscriber takes per second once it holds a snapshot;
    /// a faster feed is read no faster (flow control holds it back).
    pub max_changes_per_second: u32,
}

impl Default for FeedLimits {
    fn default() -> Self {
        Self {
            max_message_bytes: 4 << 20,
            max_services: 20_000,
            max_endpoints_per_service: 5_000,
            max_ports: 100,
            max_endpoint_groups: 1_000,
            max_metadata_entries: 64,
            max_held_bytes: 256 << 20,
            max_changes_per_second: 5_000,
        }
    }
}

/// Why a message of a feed was refused, naming the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("{service}: {field}: {value:?} is not valid")]
    Invalid {
        service: String,
        field: &'static str,
        value: String,
    },
    #[error("{service}: {field}: {count} entries, more than the limit of {limit}")]
    TooMany {
        service: String,
        field: &'static str,
        count: usize,
        limit: usize,
    },
    #[error("{service}: {bytes} bytes as a message, more than the limit of {limit}")]
    TooLarge {
        service: String,
        bytes: usize,
        limit: usize,
    },
}

/// `count` entries of `field` of `service`, refused past `limit`.
fn bounded(
    service: &str,
    field: &'static str,
    count: usize,
    limit: usize,
) -> Result<(), WireError> {
    if count > limit {
        return Err(WireError::TooMany {
            service: service.to_owned(),
            field,
            count,
            limit,
        });
    }
    Ok(())
}

/// Whether a service of the model fits in what a subscriber takes: a
/// publisher leaves out what every subscriber would refuse (its counts,
/// and its message's size; measured once per changed service).
pub fn within(service: &ClusterService, limits: &FeedLimits) -> Result<(), WireError> {
    let named = service.key.to_string();
    let bounded = |field, count, limit| bounded(&named, field, count, limit);
    bounded("ports", service.spec.ports.len(), limits.max_ports)?;
    bounded(
        "endpoints",
        service.endpoint_groups.len(),
        limits.max_endpoint_groups,
    )?;
    let endpoints = service
        .endpoint_groups
        .iter()
        .map(|group| group.endpoints.len())
        .sum();
    bounded(
        "endpoints[].endpoints",
        endpoints,
        limits.max_endpoints_per_service,
    )?;
    for group in &service.endpoint_groups {
        bounded("endpoints[].ports", group.ports.len(), limits.max_ports)?;
    }
    let export = service.export.clone().unwrap_or_default();
    bounded(
        "export.labels+annotations",
        export.exported_labels.len() + export.exported_annotations.len(),
        limits.max_metadata_entries,
    )?;
    // What a subscriber refuses from the frame's length alone: long
    // annotations or hostnames can pass every count and not the frame.
    let message = Message::Service(Box::new(WireService::of(service, &export)));
    let bytes = serde_json::to_vec(&message).map_or(usize::MAX, |json| json.len());
    if bytes > limits.max_message_bytes {
        return Err(WireError::TooLarge {
            service: named,
            bytes,
            limit: limits.max_message_bytes,
        });
    }
    Ok(())
}

impl WireKey {
    pub fn of(key: &ServiceKey) -> Self {
        Self {
            namespace: key.namespace.clone(),
            name: key.name.clone(),
        }
    }

    /// The service key, if both parts are DNS labels (as Kubernetes
    /// names namespaces and Services).
    pub fn to_key(&self) -> Result<ServiceKey, WireError> {
        for (field, value) in [("namespace", &self.namespace), ("name", &self.name)] {
            if !is_dns_label(value) {
                return Err(WireError::Invalid {
                    service: format!("{}/{}", self.namespace, self.name),
                    field,
                    value: value.clone(),
                });
            }
        }
        Ok(ServiceKey::new(&self.namespace, &self.name))
    }
}

fn wire_port(name: &str, protocol: Protocol, port: u16, app_protocol: Option<&str>) -> WirePort {
    WirePort {
        name: name.to_owned(),
        protocol: protocol.as_str().to_owned(),
        port,
        app_protocol: app_protocol.map(str::to_owned),
    }
}

impl WireService {
    /// What a cluster publishes of one of its exported services.
    pub fn of(service: &ClusterService, export: &Export) -> Self {
        let spec = &service.spec;
        Self {
            namespace: service.key.namespace.clone(),
            name: service.key.name.clone(),
            service_type: spec.service_type.to_string(),
            ports: spec
                .ports
                .iter()
                .map(|p| wire_port(&p.name, p.protocol, p.port, p.app_protocol.as_deref()))
                .collect(),
            session_affinity: spec.session_affinity.to_string(),
            session_affinity_timeout_seconds: spec.session_affinity_timeout,
            ip_families: spec
                .ip_families
                .iter()
                .map(|family| format!("{family:?}"))
                .collect(),
            internal_traffic_policy: spec.internal_traffic_policy.clone(),
            traffic_distribution: spec.traffic_distribution.clone(),
            export: WireExport {
                created: export.created.map(|created| created.to_string()),
                labels: export.exported_labels.clone(),
                annotations: export.exported_annotations.clone(),
                access: export.access.as_ref().map(|access| WireAccess {
                    clusters: access.clusters.iter().map(|c| c.to_string()).collect(),
                    networks: access.networks.iter().map(|n| n.to_string()).collect(),
                }),
                proxy_protocol: export.proxy_protocol,
                routing: (!export.routing.is_empty()).then(|| WireRouting {
                    locality: export.routing.locality.map(|l| l.as_str().to_owned()),
                    locality_minimum_healthy: export.routing.locality_minimum_healthy,
                    fence: export.routing.fence.as_ref().map(|fence| WireAccess {
                        clusters: fence.clusters.iter().map(|c| c.to_string()).collect(),
                        networks: fence.networks.iter().map(|n| n.to_string()).collect(),
                    }),
                }),
            },
            endpoints: service
                .endpoint_groups
                .iter()
                .map(|group| WireEndpointGroup {
                    ports: group
                        .ports
                        .iter()
                        .map(|p| wire_port(&p.name, p.protocol, p.port, None))
                        .collect(),
                    endpoints: group
                        .endpoints
                        .with_details()
                        .map(|(endpoint, details)| WireEndpoint {
                            address: endpoint.address,
                            ready: endpoint.ready,
                            serving: endpoint.serving,
                            terminating: endpoint.terminating,
                            hostname: details
                                .and_then(|d| d.hostname.as_deref())
                                .map(str::to_owned),
                            zone: details.and_then(|d| d.zone.clone()),
                        })
                        .collect(),
                })
                .collect(),
        }
    }

    /// The service as the model holds it, every field checked and bounded
    /// by `limits`.
    pub fn into_model(self, limits: &FeedLimits) -> Result<ClusterService, WireError> {
        let key = WireKey {
            namespace: self.namespace,
            name: self.name,
        }
        .to_key()?;
        let named = key.to_string();
        let invalid = |field: &'static str, value: &str| WireError::Invalid {
            service: named.clone(),
            field,
            value: value.to_owned(),
        };
        let bounded = |field, count, limit| bounded(&named, field, count, limit);
        // A free-text field no longer than a qualified name may be.
        let short = |field: &'static str, value: &str| {
            if value.is_empty() || value.len() > MAX_TEXT {
                Err(invalid(field, value))
            } else {
                Ok(())
            }
        };
        bounded("ports", self.ports.len(), limits.max_ports)?;
        bounded(
            "endpoints",
            self.endpoints.len(),
            limits.max_endpoint_groups,
        )?;
        let endpoint_count: usize = self.endpoints.iter().map(|g| g.endpoints.len()).sum();
        bounded(
            "endpoints[].endpoints",
            endpoint_count,
            limits.max_endpoints_per_service,
        )?;
        let export = self.export;
        bounded(
            "export.labels+annotations",
            export.labels.len() + export.annotations.len(),
            limits.max_metadata_entries,
        )?;
        let service_type = match self.service_type.as_str() {
            "ClusterSetIP" => ServiceType::ClusterSetIp,
            "Headless" => ServiceType::Headless,
            other => return Err(invalid("type", other)),
        };
        let protocol = |field: &'static str, value: &str| {
            value.parse::<Protocol>().map_err(|_| invalid(field, value))
        };
        let mut ports = Vec::with_capacity(self.ports.len());
        for port in self.ports {
            if !port.name.is_empty() && !is_dns_label(&port.name) {
                return Err(invalid("ports[].name", &port.name));
            }
            if port.port == 0 {
                return Err(invalid("ports[].port", "0"));
            }
            if let Some(app_protocol) = &port.app_protocol {
                short("ports[].appProtocol", app_protocol)?;
            }
            ports.push(ServicePort {
                protocol: protocol("ports[].protocol", &port.protocol)?,
                name: port.name,
                port: port.port,
                app_protocol: port.app_protocol,
            });
        }
        if let Some(distribution) = &self.traffic_distribution {
            short("trafficDistribution", distribution)?;
        }
        for key in export.labels.keys().chain(export.annotations.keys()) {
            short("export.labels/annotations key", key)?;
        }
        let session_affinity = match self.session_affinity.as_str() {
            "None" => SessionAffinity::None,
            "ClientIP" => SessionAffinity::ClientIp,
            other => return Err(invalid("sessionAffinity", other)),
        };
        let mut ip_families = Vec::with_capacity(self.ip_families.len());
        for family in &self.ip_families {
            ip_families.push(match family.as_str() {
                "IPv4" => IpFamily::IPv4,
                "IPv6" => IpFamily::IPv6,
                other => return Err(invalid("ipFamilies", other)),
            });
        }
        if !matches!(self.internal_traffic_policy.as_str(), "Cluster" | "Local") {
            return Err(invalid(
                "internalTrafficPolicy",
                &self.internal_traffic_policy,
            ));
        }
        let created = match export.created.as_deref() {
            None => None,
            Some(text) => Some(
                text.parse::<Timestamp>()
                    .map_err(|_| invalid("export.created", text))?,
            ),
        };
        // Lists of ids, each checked; `field` names the list in errors.
        let ids = |lists: &WireAccess, field: &'static str| {
            let mut clusters = std::collections::BTreeSet::new();
            for cluster in &lists.clusters {
                clusters.insert(ClusterId::new(cluster).map_err(|_| invalid(field, cluster))?);
            }
            let mut networks = std::collections::BTreeSet::new();
            for network in &lists.networks {
                networks.insert(NetworkId::new(network).map_err(|_| invalid(field, network))?);
            }
            Ok::<_, WireError>((clusters, networks))
        };
        let access = match &export.access {
            None => None,
            Some(access) => {
                let (clusters, networks) = ids(access, "export.access")?;
                Some(AccessPolicy { clusters, networks })
            }
        };
        let routing = match &export.routing {
            None => RoutingPolicy::default(),
            Some(routing) => {
                let locality = match routing.locality.as_deref() {
                    None => None,
                    Some(text) => Some(
                        crate::model::Locality::of_name(text)
                            .ok_or_else(|| invalid("export.routing.locality", text))?,
                    ),
                };
                if routing.locality_minimum_healthy == Some(0) {
                    return Err(invalid("export.routing.localityMinimumHealthy", "0"));
                }
                let fence = match &routing.fence {
                    None => None,
                    Some(fence) => {
                        let (clusters, networks) = ids(fence, "export.routing.fence")?;
                        if clusters.is_empty() && networks.is_empty() {
                            return Err(invalid("export.routing.fence", "empty"));
                        }
                        Some(crate::model::Fence { clusters, networks })
                    }
                };
                RoutingPolicy {
                    locality,
                    locality_minimum_healthy: routing.locality_minimum_healthy,
                    fence,
                }
            }
        };
        // The publisher filtered these already; a member cluster's word
        // does not make a reserved key its own.
        let unreserved = |map: BTreeMap<String, String>| -> BTreeMap<String, String> {
            map.into_iter()
                .filter(|(key, _)| !reserved_metadata_key(key))
                .collect()
        };
        let mut endpoint_groups = Vec::with_capacity(self.endpoints.len());
        for group in self.endpoints {
            bounded("endpoints[].ports", group.ports.len(), limits.max_ports)?;
            let mut group_ports = Vec::with_capacity(group.ports.len());
            for port in group.ports {
                if !port.name.is_empty() && !is_dns_label(&port.name) {
                    return Err(invalid("endpoints[].ports[].name", &port.name));
                }
                if port.port == 0 {
                    return Err(invalid("endpoints[].ports[].port", "0"));
                }
                group_ports.push(EndpointPort {
                    protocol: protocol("endpoints[].ports[].protocol", &port.protocol)?,
                    name: port.name,
                    port: port.port,
                });
            }
            let mut endpoints = EndpointsBuilder::with_capacity(group.endpoints.len());
            for endpoint in group.endpoints {
                if let Some(hostname) = &endpoint.hostname
                    && !is_dns_label(hostname)
                {
                    return Err(invalid("endpoints[].endpoints[].hostname", hostname));
                }
                // As the API path refuses them: loopback, link-local (a
                // cloud's metadata address), unspecified, multicast.
                if let Some(class) = unroutable_endpoint(&endpoint.address, false) {
                    return Err(invalid(
                        "endpoints[].endpoints[].address",
                        &format!("{} ({class})", endpoint.address),
                    ));
                }
                if let Some(zone) = &endpoint.zone {
                    short("endpoints[].endpoints[].zone", zone)?;
                }
                let details = EndpointDetails {
                    hostname: endpoint.hostname.map(Into::into),
                    node_name: None,
                    zone: endpoint.zone,
                }
                .shared();
                endpoints.push(
                    Endpoint {
                        address: endpoint.address,
                        ready: endpoint.ready,
                        serving: endpoint.serving,
                        terminating: endpoint.terminating,
                    },
                    details,
                );
            }
            endpoint_groups.push(EndpointGroup {
                ports: Arc::from(group_ports),
                endpoints: endpoints.build(),
            });
        }
        Ok(ClusterService {
            key,
            spec: ServiceSpec {
                service_type,
                ports,
                session_affinity,
                session_affinity_timeout: self.session_affinity_timeout_seconds,
                ip_families,
                internal_traffic_policy: self.internal_traffic_policy,
                traffic_distribution: self.traffic_distribution,
            },
            export: Some(Export {
                created,
                exported_labels: unreserved(export.labels),
                exported_annotations: unreserved(export.annotations),
                access,
                proxy_protocol: export.proxy_protocol,
                routing,
            }),
            endpoint_groups,
        })
    }
}
