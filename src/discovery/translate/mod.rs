//! The one translation from Kubernetes objects to the model. The file source
//! and the Kubernetes API source both hand their objects here, so a folder of
//! YAML and a live cluster mean exactly the same thing. Pure: no I/O.

mod infrastructure;
mod service;

pub use infrastructure::{API_SERVER_SERVICE, infrastructure};
pub use service::labelled_gateway;

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::Arc;

use crate::diagnostics::{Diagnostic, Origin};
use crate::model::names::{
    ALT_CLUSTER_ID_PROPERTY, CLUSTER_ID_PROPERTY, CLUSTERSET_PROPERTY, GATEWAY_LABEL,
    GATEWAY_NAMESPACE, MCS_SERVICE_NAME_LABEL, NETWORK_PROPERTY, SERVICE_NAME_LABEL,
    TUNNEL_PORT_NAME,
};
use crate::model::unroutable_endpoint;
use crate::model::{
    AccessPolicy, Cluster, ClusterId, ClusterService, ClusterSet, EndpointGroup, EndpointPort,
    EndpointsBuilder, Export, NetworkId, Protocol, ServiceKey,
};

use super::objects::SourcedObject;
use super::objects::{AddressType, ClusterProperty, EndpointSlice, KubeObject, UnparsedEndpoint};

/// Settings that change how objects are read.
#[derive(Debug, Clone)]
pub struct TranslateOptions {
    /// The ClusterProperty whose value is the cluster's network.
    pub network_property: String,
    /// Strait's own namespace, the only one whose Service may name the
    /// cluster's gateway: a tenant may label its own Services, but only a
    /// cluster admin writes here.
    pub gateway_namespace: String,
    /// The network map: each cluster's network as this cluster's admin
    /// attests it (`networks` in `gateway.yaml`). With it, a cluster's
    /// network is the map's whatever its ClusterProperty says, and a
    /// cluster the map leaves out is left out of the set; without it,
    /// networks are what clusters say of themselves and grant nothing.
    pub networks: Option<Arc<BTreeMap<ClusterId, NetworkId>>>,
    /// Accept loopback endpoint addresses (single-host setups and tests).
    /// Kubernetes refuses them, and a gateway must never be steered at its
    /// own host by a configuration.
    pub allow_loopback_endpoints: bool,
}

impl Default for TranslateOptions {
    fn default() -> Self {
        Self {
            network_property: NETWORK_PROPERTY.to_owned(),
            gateway_namespace: GATEWAY_NAMESPACE.to_owned(),
            networks: None,
            allow_loopback_endpoints: false,
        }
    }
}

/// Collects findings about the objects of one cluster.
struct Findings<'a> {
    diagnostics: Vec<Diagnostic>,
    current: Option<&'a SourcedObject>,
}

impl<'a> Findings<'a> {
    fn at(&mut self, object: &'a SourcedObject) -> &mut Self {
        self.current = Some(object);
        self
    }

    fn located(&self, diagnostic: Diagnostic) -> Diagnostic {
        match self.current {
            Some(sourced) => diagnostic.object(sourced.object.display_name()),
            None => diagnostic,
        }
    }

    fn origin(&self) -> Origin {
        self.current
            .map(|o| Origin::clone(&o.origin))
            .unwrap_or_default()
    }

    fn error(&mut self, field: &str, message: impl Into<String>) {
        let diagnostic = self.located(Diagnostic::error(self.origin(), message).field(field));
        self.diagnostics.push(diagnostic);
    }

    fn warning(&mut self, message: impl Into<String>) {
        let diagnostic = self.located(Diagnostic::warning(self.origin(), message));
        self.diagnostics.push(diagnostic);
    }

    fn warning_at(&mut self, field: &str, message: impl Into<String>) {
        let diagnostic = self.located(Diagnostic::warning(self.origin(), message).field(field));
        self.diagnostics.push(diagnostic);
    }
}

/// Translates the objects of one cluster. `source` names where they came from
/// (a folder, an API server). Returns the cluster when its id could be read,
/// and every finding; any error finding makes the input invalid.
pub fn translate_cluster(
    source: &str,
    objects: &[&SourcedObject],
    options: &TranslateOptions,
) -> (Option<Cluster>, Vec<Diagnostic>) {
    let (cluster, findings) = translate_objects(source, objects, options);
    // Each finding names its cluster: the id once read, else the source.
    let label = cluster
        .as_ref()
        .map_or(source, |cluster| cluster.id.as_str())
        .to_owned();
    let findings = findings
        .into_iter()
        .map(|finding| finding.in_cluster(&label))
        .collect();
    (cluster, findings)
}

fn translate_objects(
    source: &str,
    objects: &[&SourcedObject],
    options: &TranslateOptions,
) -> (Option<Cluster>, Vec<Diagnostic>) {
    let mut findings = Findings {
        diagnostics: Vec::new(),
        current: None,
    };
    let objects = without_duplicates(objects, &mut findings);

    let properties = read_properties(&objects, options, &mut findings);
    let Some(id) = properties.cluster_id else {
        if properties.invalid_cluster_id {
            // Already reported on the property's spec.value.
            return (None, findings.diagnostics);
        }
        findings.diagnostics.push(Diagnostic::error(
            Origin::file(source),
            format!(
                "no ClusterProperty {CLUSTER_ID_PROPERTY} (nor {ALT_CLUSTER_ID_PROPERTY}) found; every cluster must name itself"
            ),
        ));
        return (None, findings.diagnostics);
    };
    let (network, attested) = match options.networks.as_deref() {
        None => (properties.network, false),
        Some(map) => match map.get(&id) {
            Some(mapped) => {
                if properties.network_stated && *mapped != properties.network {
                    findings.diagnostics.push(
                        Diagnostic::warning(
                            Origin::file(source),
                            format!(
                                "states network {:?}, but the network map (networks in gateway.yaml) puts cluster {id} on {:?}, which is used",
                                properties.network.as_str(),
                                mapped.as_str()
                            ),
                        )
                        .object(format!("ClusterProperty {}", options.network_property))
                        .field("spec.value"),
                    );
                }
                (mapped.clone(), true)
            }
            None => {
                findings.diagnostics.push(
                    Diagnostic::error(
                        Origin::file(source),
                        format!(
                            "cluster {id} is not in the network map (networks in gateway.yaml); a cluster's network is attested there, so this cluster is left out"
                        ),
                    )
                    .object(format!("ClusterProperty {CLUSTER_ID_PROPERTY}"))
                    .field("spec.value"),
                );
                return (None, findings.diagnostics);
            }
        },
    };
    let mut cluster = Cluster::new(id, network, source);
    cluster.network_attested = attested;
    cluster.clusterset = properties.clusterset;

    // Services that exist but carry no routes: the gateway's own, and those
    // already reported as invalid. Their exports and slices need no second error.
    let mut unroutable: HashMap<ServiceKey, Unroutable> = HashMap::new();
    for sourced in &objects {
        if let KubeObject::Service(service) = &sourced.object {
            findings.at(sourced);
            if service::is_gateway(service, &options.gateway_namespace, &mut findings) {
                cluster
                    .gateways
                    .extend(service::gateway_addresses(service, &mut findings));
                unroutable.insert(key_of(&sourced.object), Unroutable::Gateway);
            } else if let Some(spec) = service::translate_spec(service, &mut findings) {
                let key = key_of(&sourced.object);
                cluster.services.insert(
                    key.clone(),
                    Arc::new(ClusterService {
                        key,
                        spec,
                        export: None,
                        endpoint_groups: Vec::new(),
                    }),
                );
            } else {
                unroutable.insert(key_of(&sourced.object), Unroutable::Invalid);
            }
        }
    }
    for sourced in &objects {
        findings.at(sourced);
        match &sourced.object {
            KubeObject::ServiceExport(export) => {
                attach_export(&mut cluster, sourced, export, &unroutable, &mut findings)
            }
            KubeObject::EndpointSlice(slice) => attach_slice(
                &mut cluster,
                slice,
                &unroutable,
                options.allow_loopback_endpoints,
                &mut findings,
            ),
            KubeObject::ServiceImport(import) => {
                let mut addresses = Vec::new();
                for (index, ip) in import.spec.ips.iter().enumerate() {
                    match ip.parse::<IpAddr>() {
                        Ok(address) => addresses.push(address),
                        Err(_) => findings.error(
                            &format!("spec.ips[{index}]"),
                            format!("{ip:?} is not an IP address"),
                        ),
                    }
                }
                cluster.imports.insert(key_of(&sourced.object), addresses);
            }
            KubeObject::ClusterProperty(_) | KubeObject::Service(_) => {}
        }
    }
    cluster.infrastructure = infrastructure(objects.iter().copied(), &options.gateway_namespace);
    // A service's groups were pushed one slice at a time: the spare room
    // of the growth would be held for as long as the translation is.
    let keys: Vec<ServiceKey> = cluster.services.keys().cloned().collect();
    for key in keys {
        if let Some(service) = cluster.services.get_mut(&key).and_then(Arc::get_mut) {
            service.endpoint_groups.shrink_to_fit();
        }
    }
    (Some(cluster), findings.diagnostics)
}

/// Joins translated clusters into a set: cluster ids must be unique and
/// clusters that state a cluster set id must agree on it. A cluster that
/// breaks a rule leaves the set, and only it: every cluster claiming an id
/// more than one claims (none of them can be told from the others), and a
/// cluster stating another cluster set id than the first one stated. The
/// findings say which and why.
pub fn assemble(clusters: Vec<Cluster>) -> (ClusterSet, Vec<Diagnostic>) {
    let mut diagnostics = Vec::new();
    let mut clusterset: Option<(String, String)> = None;
    let mut by_id: BTreeMap<ClusterId, Vec<Cluster>> = BTreeMap::new();
    for cluster in clusters {
        if let Some(stated) = &cluster.clusterset {
            match &clusterset {
                Some((first, first_source)) if first != stated => {
                    diagnostics.push(
                        Diagnostic::error(
                            Origin::file(&cluster.source),
                            format!(
                                "cluster set id {stated:?} differs from {first:?} stated by {first_source}; this cluster is left out"
                            ),
                        )
                        .object(format!("ClusterProperty {CLUSTERSET_PROPERTY}"))
                        .field("spec.value")
                        .in_cluster(cluster.id.as_str()),
                    );
                    continue;
                }
                Some(_) => {}
                None => clusterset = Some((stated.clone(), cluster.source.clone())),
            }
        }
        by_id.entry(cluster.id.clone()).or_default().push(cluster);
    }
    let mut set = ClusterSet::default();
    for (id, mut claimants) in by_id {
        if claimants.len() == 1
            && let Some(cluster) = claimants.pop()
        {
            set.clusters.insert(id, cluster);
            continue;
        }
        let sources: Vec<&str> = claimants.iter().map(|c| c.source.as_str()).collect();
        for cluster in &claimants {
            diagnostics.push(
                Diagnostic::error(
                    Origin::file(&cluster.source),
                    format!(
                        "cluster id {:?} is claimed by {}; cluster ids must be unique in the cluster set, so none of them is used",
                        id.as_str(),
                        sources.join(" and ")
                    ),
                )
                .object(format!("ClusterProperty {CLUSTER_ID_PROPERTY}"))
                .field("spec.value")
                .in_cluster(id.as_str()),
            );
        }
    }
    (set, diagnostics)
}

fn key_of(object: &KubeObject) -> ServiceKey {
    ServiceKey::new(object.namespace().unwrap_or("default"), object.name())
}

/// Drops objects defined twice (same kind, namespace and name), with an error
/// that points at both places, and objects without a name.
fn without_duplicates<'a>(
    objects: &[&'a SourcedObject],
    findings: &mut Findings<'a>,
) -> Vec<&'a SourcedObject> {
    let mut seen: HashMap<(&str, Option<&str>, &str), &Origin> = HashMap::new();
    let mut kept = Vec::with_capacity(objects.len());
    for &sourced in objects {
        let object = &sourced.object;
        findings.at(sourced);
        if object.name().is_empty() {
            findings.error("metadata.name", "is missing");
            continue;
        }
        let identity = (object.kind(), object.namespace(), object.name());
        if let Some(first) = seen.get(&identity) {
            findings.error(
                "metadata.name",
                format!("duplicate object; first defined in {first}"),
            );
            continue;
        }
        seen.insert(identity, &sourced.origin);
        kept.push(sourced);
    }
    kept
}

struct Properties {
    cluster_id: Option<ClusterId>,
    /// The cluster id property is present but its value was refused.
    invalid_cluster_id: bool,
    network: NetworkId,
    /// The cluster states a network (else it is on the default one).
    network_stated: bool,
    clusterset: Option<String>,
}

fn read_properties<'a>(
    objects: &[&'a SourcedObject],
    options: &TranslateOptions,
    findings: &mut Findings<'a>,
) -> Properties {
    let mut properties = Properties {
        cluster_id: None,
        invalid_cluster_id: false,
        network: NetworkId::default_network(),
        network_stated: false,
        clusterset: None,
    };
    let mut alternate = None;
    let mut alternate_error = None;
    for sourced in objects {
        let KubeObject::ClusterProperty(property) = &sourced.object else {
            continue;
        };
        let ClusterProperty { metadata, spec } = property.as_ref();
        findings.at(sourced);
        let value = spec.value.as_str();
        match metadata.name.as_deref() {
            Some(name @ (CLUSTER_ID_PROPERTY | ALT_CLUSTER_ID_PROPERTY)) => {
                match ClusterId::new(value) {
                    Ok(id) if name == CLUSTER_ID_PROPERTY => properties.cluster_id = Some(id),
                    Ok(id) => alternate = Some((id, *sourced)),
                    Err(error) if name == CLUSTER_ID_PROPERTY => {
                        properties.invalid_cluster_id = true;
                        findings.error("spec.value", format!("invalid cluster id: {error}"));
                    }
                    Err(error) => alternate_error = Some((error, *sourced)),
                }
            }
            Some(CLUSTERSET_PROPERTY) => properties.clusterset = Some(value.to_owned()),
            Some(name) if name == options.network_property => match NetworkId::new(value) {
                Ok(network) => {
                    properties.network = network;
                    properties.network_stated = true;
                }
                Err(error) => findings.error("spec.value", format!("invalid network id: {error}")),
            },
            _ => {}
        }
    }
    // `id.k8s.io` names the cluster only where `cluster.clusterset.k8s.io`
    // does not; both, disagreeing, is reported and the latter is used.
    match (&properties.cluster_id, alternate, alternate_error) {
        (Some(id), Some((other, sourced)), _) if *id != other => {
            findings.at(sourced);
            findings.warning(format!(
                "names the cluster {:?}, but {CLUSTER_ID_PROPERTY} names it {:?}, which is used",
                other.as_str(),
                id.as_str()
            ));
        }
        (None, Some((id, _)), _) if !properties.invalid_cluster_id => {
            properties.cluster_id = Some(id);
        }
        (None, None, Some((error, sourced))) if !properties.invalid_cluster_id => {
            findings.at(sourced);
            properties.invalid_cluster_id = true;
            findings.error("spec.value", format!("invalid cluster id: {error}"));
        }
        _ => {}
    }
    properties
}

/// Why a Service defined in the cluster has no entry in its services.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Unroutable {
    Gateway,
    Invalid,
}

fn attach_export<'a>(
    cluster: &mut Cluster,
    sourced: &'a SourcedObject,
    export: &super::objects::ServiceExport,
    unroutable: &HashMap<ServiceKey, Unroutable>,
    findings: &mut Findings<'a>,
) {
    let key = key_of(&sourced.object);
    // Not shared yet: `make_mut` never copies here.
    let Some(service) = cluster.services.get_mut(&key).map(Arc::make_mut) else {
        match unroutable.get(&key) {
            Some(Unroutable::Gateway) => findings.error(
                "metadata.name",
                format!("exports Service {key}, which is this cluster's gateway ({GATEWAY_LABEL}) and cannot be exported"),
            ),
            // The Service's own error says what is wrong.
            Some(Unroutable::Invalid) => {}
            None => findings.error(
            "metadata.name",
            format!("exports Service {key}, which this cluster does not define"),
        ),
        }
        return;
    };
    if service.spec.service_type == crate::model::ServiceType::ExternalName {
        findings.error(
            "metadata.name",
            format!(
                "exports Service {key} of type ExternalName, which cannot be exported (InvalidServiceType)"
            ),
        );
    }
    // A policy that cannot be read fails closed: the export is left out,
    // never read as admitting everyone.
    let annotations = export.metadata.annotations.clone().unwrap_or_default();
    let access = match AccessPolicy::from_annotations(&annotations) {
        Ok(access) => access,
        Err((annotation, error)) => {
            findings.error(
                &format!("metadata.annotations[{annotation:?}]"),
                format!("{error}; the export is left out until it is mended"),
            );
            return;
        }
    };
    // A value that cannot be read leaves the export out too: a backend
    // must get the header it expects, or none.
    let proxy_protocol = match crate::model::proxy_protocol(&annotations) {
        Ok(wanted) => wanted,
        Err(error) => {
            findings.error(
                &format!(
                    "metadata.annotations[{:?}]",
                    crate::model::PROXY_PROTOCOL_ANNOTATION
                ),
                format!("{error}; the export is left out until it is mended"),
            );
            return;
        }
    };
    // So does a routing policy: a fence read as absent would let the
    // connections it keeps in leave.
    let routing = match crate::model::RoutingPolicy::from_annotations(&annotations) {
        Ok(routing) => routing,
        Err((annotation, error)) => {
            findings.error(
                &format!("metadata.annotations[{annotation:?}]"),
                format!("{error}; the export is left out until it is mended"),
            );
            return;
        }
    };
    service.export = Some(Export {
        created: export.metadata.creation_timestamp.as_ref().map(|t| t.0),
        exported_labels: unreserved(
            &export.spec.exported_labels,
            "spec.exportedLabels",
            findings,
        ),
        exported_annotations: unreserved(
            &export.spec.exported_annotations,
            "spec.exportedAnnotations",
            findings,
        ),
        access,
        proxy_protocol,
        routing,
    });
}

/// `exported` without its reserved keys
/// ([`reserved_metadata_key`](crate::model::names::reserved_metadata_key)),
/// each dropped key reported at `field`: the export stays valid, and the
/// import's reserved metadata stays Strait's record.
fn unreserved(
    exported: &BTreeMap<String, String>,
    field: &str,
    findings: &mut Findings<'_>,
) -> BTreeMap<String, String> {
    let mut kept = BTreeMap::new();
    for (key, value) in exported {
        if crate::model::names::reserved_metadata_key(key) {
            findings.warning_at(
                &format!("{field}[{key:?}]"),
                format!("{key:?} is a reserved key (Strait's, Kubernetes' or the MCS API's); dropped from the import"),
            );
        } else {
            kept.insert(key.clone(), value.clone());
        }
    }
    kept
}

fn attach_slice(
    cluster: &mut Cluster,
    slice: &EndpointSlice,
    unroutable: &HashMap<ServiceKey, Unroutable>,
    allow_loopback: bool,
    findings: &mut Findings<'_>,
) {
    // What Strait imported into this cluster is not what it exports: read
    // back, another cluster's endpoints would count as this one's.
    if slice.metadata.imported {
        return;
    }
    let Some(service_name) = slice.metadata.service_name.as_deref() else {
        findings.warning(format!(
            "has neither a {SERVICE_NAME_LABEL} nor a {MCS_SERVICE_NAME_LABEL} label; ignored"
        ));
        return;
    };
    if let Some(source_cluster) = slice.metadata.source_cluster.as_deref()
        && source_cluster != cluster.id.as_str()
    {
        findings.warning(format!(
            "holds endpoints of cluster {source_cluster:?}, not of {}; a cluster's endpoints are read from that cluster; ignored",
            cluster.id
        ));
        return;
    }
    let Some(mut group) = endpoint_group(slice, allow_loopback, findings) else {
        return;
    };
    let namespace = slice.metadata.namespace.as_deref().unwrap_or("default");
    let key = ServiceKey::new(namespace, service_name);
    match cluster.services.get_mut(&key).map(Arc::make_mut) {
        Some(service) => {
            // A service's slices usually list the same ports: they share
            // one allocation of them.
            if let Some(last) = service.endpoint_groups.last()
                && last.ports == group.ports
            {
                group.ports = Arc::clone(&last.ports);
            }
            service.endpoint_groups.push(group)
        }
        None if unroutable.contains_key(&key) => {}
        None => findings.warning(format!(
            "belongs to Service {key}, which this cluster does not define; ignored"
        )),
    }
}

fn endpoint_group(
    slice: &EndpointSlice,
    allow_loopback: bool,
    findings: &mut Findings<'_>,
) -> Option<EndpointGroup> {
    let want_v6 = match &slice.address_type {
        AddressType::IPv4 => false,
        AddressType::IPv6 => true,
        AddressType::Fqdn => {
            findings.warning("has addressType FQDN, which Strait does not route; ignored");
            return None;
        }
        AddressType::Other(other) => {
            findings.error(
                "addressType",
                format!("{other:?} is not an address type; expected IPv4, IPv6 or FQDN"),
            );
            return None;
        }
    };
    let mut ports = Vec::with_capacity(slice.ports.as_ref().map_or(0, |ports| ports.len()));
    for (index, port) in slice
        .ports
        .iter()
        .flat_map(|ports| ports.iter())
        .enumerate()
    {
        let field = format!("ports[{index}]");
        let Some(number) = port.port else {
            findings.warning(format!(
                "{field}.port is unset (meaning every port), which Strait does not route; port skipped"
            ));
            continue;
        };
        let Some(number) = port_number(number, &format!("{field}.port"), findings) else {
            continue;
        };
        let Some(protocol) = protocol(
            port.protocol.as_deref(),
            &format!("{field}.protocol"),
            findings,
        ) else {
            continue;
        };
        ports.push(EndpointPort {
            name: port.name.as_deref().unwrap_or_default().to_owned(),
            protocol,
            port: number,
        });
    }
    let mut group = EndpointGroup {
        ports: ports.into(),
        ..EndpointGroup::default()
    };
    let endpoints = &slice.endpoints;
    let problem = |address: &IpAddr| endpoint_problem(address, want_v6, allow_loopback, slice);
    // The usual slice has nothing to report: its translation shares the
    // decoded endpoints instead of copying them.
    if endpoints.unparsed.is_empty()
        && endpoints
            .parsed
            .iter()
            .all(|endpoint| problem(&endpoint.address).is_none())
    {
        group.endpoints = endpoints.parsed.clone();
        return Some(group);
    }
    let mut kept = EndpointsBuilder::with_capacity(endpoints.parsed.len());
    for (index, endpoint) in endpoints.iter() {
        // Named only when there is something to say.
        let field = || format!("endpoints[{index}].addresses");
        match endpoint {
            Err(UnparsedEndpoint { address: None, .. }) => {
                findings.error(&field(), "is empty; an endpoint needs an address")
            }
            Err(UnparsedEndpoint {
                address: Some(first),
                ..
            }) => findings.error(
                &format!("{}[0]", field()),
                format!("{first:?} is not an IP address"),
            ),
            Ok((endpoint, details)) => match problem(&endpoint.address) {
                Some(message) => findings.error(&format!("{}[0]", field()), message),
                None => kept.push(endpoint, details.cloned()),
            },
        }
    }
    group.endpoints = kept.build();
    Some(group)
}

/// Why an endpoint's address cannot be a backend of this slice, as
/// Kubernetes' EndpointSlice validation decides; `None` when it can.
fn endpoint_problem(
    address: &IpAddr,
    want_v6: bool,
    allow_loopback: bool,
    slice: &EndpointSlice,
) -> Option<String> {
    if let IpAddr::V6(v6) = address
        && v6.to_ipv4_mapped().is_some()
    {
        // One address, two spellings: every check (loopback, own
        // listeners, backends) would have to know both.
        return Some(format!(
            "{address} is an IPv4-mapped IPv6 address; list {} in an IPv4 slice instead",
            v6.to_canonical()
        ));
    }
    if address.is_ipv6() != want_v6 {
        return Some(format!(
            "{address} does not match addressType {}",
            slice.address_type
        ));
    }
    unroutable_endpoint(address, allow_loopback)
        .map(|class| format!("{address} is a {class} address, which cannot be a backend"))
}

/// A port number in 1..=65535, or an error on `field`.
fn port_number(value: i32, field: &str, findings: &mut Findings<'_>) -> Option<u16> {
    match u16::try_from(value) {
        Ok(port) if port != 0 => Some(port),
        _ => {
            findings.error(field, format!("{value} is not a port number (1-65535)"));
            None
        }
    }
}

/// A protocol as Kubernetes spells it, TCP when unset, or an error on `field`.
fn protocol(value: Option<&str>, field: &str, findings: &mut Findings<'_>) -> Option<Protocol> {
    match value
        .map(str::parse::<Protocol>)
        .unwrap_or(Ok(Protocol::Tcp))
    {
        Ok(protocol) => Some(protocol),
        Err(error) => {
            findings.error(field, error.to_string());
            None
        }
    }
}

#[cfg(test)]
mod tests;
