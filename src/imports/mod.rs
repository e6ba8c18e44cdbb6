//! Desired imports: the objects that make a multi-cluster service reachable
//! by unmodified pods of one cluster, as a pure function of the merged
//! cluster set and what the cluster holds already. No I/O, no clock it is
//! not given: `discovery` observes and `controller::imports` writes, `strait
//! imports` prints, and the gateway's import listeners read the allocation.
//!
//! For every multi-cluster service whose namespace exists locally:
//! - a `ServiceImport` with the merged type, ports, session affinity, IP
//!   families, traffic policies, the exporting clusters and a `Ready`
//!   condition, labelled and annotated with the oldest export's
//!   `exportedLabels`/`exportedAnnotations` only;
//! - for a ClusterSetIP service, a derived ClusterIP Service (no selector,
//!   owned by the import) whose ports forward to the gateway's import ports,
//!   and its EndpointSlices listing this cluster's ready gateway pods on
//!   those ports; the import's `ips` are the derived Service's ClusterIPs
//!   once the API server has allocated them;
//! - for a headless service, a per-pod derived Service for each ready pod
//!   on another network (at most `dns.maxHeadlessEndpoints`), forwarding to
//!   the gateway's import ports for that one pod: its ClusterIP is what
//!   DNS answers for the pod (`pods`).
//!
//! | module | owns |
//! |---|---|
//! | `naming` | derived names, labels, the field manager |
//! | `ports` | import port ranges and the deterministic allocation |
//! | `pods` | which remote headless pods get an address here, and file-mode addresses |
//! | `observed` | reading what the cluster holds (ports, IPs, uids) from its objects |
//! | `render` | the objects as JSON, the way `kubectl get -o json` shows them |
//! | `diff` | which objects to apply and which to delete |
//! | `scope` | which services a pass renders again: those whose inputs changed |

pub mod diff;
pub mod naming;
pub mod pods;
pub mod ports;
pub mod render;
mod replan;
mod reuse;
pub mod scope;
pub mod sources;

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::Arc;

use ipnet::IpNet;
use serde::Serialize;

use crate::discovery::observed::Observed;
use crate::merge::{MergedPort, MergedService, MergedSet};
use crate::model::{ClusterId, IpFamily, PodRef, PortKey, Protocol, ServiceKey, ServiceType};
pub use pods::{PodAddresses, RemotePods, remote_pods};
pub use ports::{
    Allocation, PortRange, PortRangeError, Released, ReleasedPorts, recorded_allocation,
};
pub use replan::replan;
pub use reuse::{KeptPlan, MadePlan, plan_reusing};
pub use sources::{
    PlannedSlice, SourceBackends, Sources, source_backends, source_backends_reusing,
};

/// The `Ready` condition of a ServiceImport.
pub const READY_CONDITION: &str = "Ready";

/// Why an import is or is not ready: the mcs-api reasons, and one of
/// Strait's own for a full import port range.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum ReadyReason {
    Ready,
    /// The derived Service has no ClusterIP yet.
    Pending,
    /// The API server refused the derived Service's IP families.
    #[serde(rename = "IPFamilyNotSupported")]
    IpFamilyNotSupported,
    /// Some service port got no import port: `imports.portRange` is full.
    ImportPortsExhausted,
    /// Some service port got no import port: its namespace holds its quota.
    NamespaceQuotaExceeded,
}

impl ReadyReason {
    pub fn as_str(self) -> &'static str {
        match self {
            ReadyReason::Ready => "Ready",
            ReadyReason::Pending => "Pending",
            ReadyReason::IpFamilyNotSupported => "IPFamilyNotSupported",
            ReadyReason::ImportPortsExhausted => "ImportPortsExhausted",
            ReadyReason::NamespaceQuotaExceeded => "NamespaceQuotaExceeded",
        }
    }
}

/// One port of an import and, for a ClusterSetIP service, its import port.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PlannedPort {
    pub name: String,
    pub protocol: Protocol,
    /// The service port; of a remote pod ([`PlannedPod`]), the pod's own
    /// port, which is what its clients dial.
    pub port: u16,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub app_protocol: Option<String>,
    /// `None` for a headless service, and when the range is full.
    pub import_port: Option<u16>,
}

/// One ServiceImport this cluster should hold, and what comes with it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PlannedImport {
    pub key: ServiceKey,
    pub service_type: ServiceType,
    pub ports: Vec<PlannedPort>,
    /// The ClusterSetIPs: the derived Service's ClusterIPs, once allocated.
    pub ips: Vec<IpAddr>,
    /// The exporting clusters, by id.
    pub clusters: Vec<ClusterId>,
    pub ready: bool,
    pub reason: ReadyReason,
    pub message: String,
    /// The derived Service, for a ClusterSetIP service.
    pub derived_service: Option<String>,
    /// A headless service's pods on other networks, each with a derived
    /// Service of its own.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub pods: Vec<PlannedPod>,
    /// Remote pods with no address here: beyond `dns.maxHeadlessEndpoints`,
    /// or in a file setup beyond what `imports.podAddresses` holds.
    #[serde(skip_serializing_if = "is_zero")]
    pub pods_over_cap: usize,
    /// The MCS EndpointSlices: the endpoints of each exporting cluster, as
    /// addresses that work from this cluster ([`sources`]).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub slices: Vec<PlannedSlice>,
    /// Exporting clusters whose id cannot be a label value: no MCS slice
    /// names them.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unlabelled_sources: Vec<ClusterId>,
}

fn is_zero(count: &usize) -> bool {
    *count == 0
}

/// One remote pod of a headless service and the derived Service that
/// reaches it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PlannedPod {
    pub pod: PodRef,
    pub ports: Vec<PlannedPort>,
    /// Its addresses here: the per-pod derived Service's ClusterIPs, once
    /// allocated, or in a file setup the ones from `imports.podAddresses`.
    pub ips: Vec<IpAddr>,
    /// Whether `ips` were chosen here (a file setup) and are written into
    /// the derived Service's `clusterIPs`, rather than allocated by the API.
    pub fixed_ips: bool,
    /// `None` when no port of it got an import port.
    pub derived_service: Option<String>,
}

/// Services for which no import is planned, and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Skipped {
    /// The namespace does not exist in this cluster (namespace sameness:
    /// Strait never creates a namespace).
    NoNamespace,
    /// A ServiceImport that another controller created holds the name.
    ForeignImport,
}

/// Everything this cluster should hold for its imports.
#[derive(Debug, Clone, Default)]
pub struct ImportPlan {
    /// In service order. Shared: the next pass keeps each one whose
    /// inputs did not change ([`plan_reusing`]).
    pub imports: Vec<Arc<PlannedImport>>,
    pub allocation: Allocation,
    pub skipped: BTreeMap<ServiceKey, Skipped>,
    /// Remote pods `imports.podAddresses` had no room for (a file setup).
    pub pod_addresses_exhausted: usize,
}

/// What one namespace may hold of what every namespace shares: import
/// ports, taken from the one `imports.portRange`, and per-pod derived
/// Services, each a ClusterIP of the cluster's service range. Past it, that
/// namespace's imports are `Ready=False` (`NamespaceQuotaExceeded`) or its
/// remote pods get no address; other namespaces are not touched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NamespaceQuota {
    pub import_ports: usize,
    pub pod_services: usize,
}

impl Default for NamespaceQuota {
    fn default() -> Self {
        Self {
            import_ports: 1000,
            pod_services: 256,
        }
    }
}

/// What the plan is computed from besides the merged set.
#[derive(Debug, Clone, Copy)]
pub struct PlanInputs<'a> {
    pub merged: &'a MergedSet,
    pub observed: &'a Observed,
    pub range: &'a PortRange,
    /// Import ports released too recently to be handed out again, except
    /// to the key that held them last.
    pub released: &'a Released,
    /// Services whose derived Service the API server refused for its IP
    /// families.
    pub refused_families: &'a BTreeSet<ServiceKey>,
    /// Services whose ServiceImport was just taken over from a previous
    /// implementation (`kube.adoptImports`): their derived Service, still
    /// the previous implementation's, is not taken over yet, so that every
    /// gateway replica opens the import ports before kube-proxy sends
    /// connections there.
    pub settling: &'a BTreeSet<ServiceKey>,
    /// The remote pods of each headless service that get an address here
    /// ([`remote_pods`]).
    pub pods: &'a BTreeMap<ServiceKey, RemotePods>,
    /// Each service's exporting clusters as this cluster reaches them
    /// ([`source_backends`]): what its MCS EndpointSlices hold.
    pub sources: &'a Sources,
    /// Where remote pods' addresses come from: `None` with the Kubernetes
    /// API, which allocates ClusterIPs; a file setup's
    /// `imports.podAddresses` otherwise, where a pod without an address
    /// (none set, or the ranges full) gets nothing at all.
    pub pod_ranges: Option<&'a [IpNet]>,
    /// What each namespace may hold of the shared ports and addresses.
    pub quota: NamespaceQuota,
    /// `observed`'s recorded import ports when the caller read them already
    /// ([`Observed::recorded_ports`]): read from `observed` when `None`.
    pub recorded: Option<&'a BTreeMap<PortKey, u16>>,
}

/// The import ports a service needs: for a ClusterSetIP service one per
/// merged TCP, UDP or SCTP port (TCP and UDP ones are listened on; see
/// docs/configuration.md), for a headless one the same for each remote pod.
fn wanted_ports<'a>(
    service: &'a MergedService,
    pods: &'a BTreeMap<ServiceKey, RemotePods>,
) -> Vec<PortKey> {
    let key = |port: &MergedPort, pod: Option<&PodRef>| PortKey {
        service: service.key.clone(),
        protocol: port.protocol,
        port: port.port,
        pod: pod.cloned(),
    };
    match service.service_type {
        ServiceType::ClusterSetIp => service.ports.iter().map(|port| key(port, None)).collect(),
        ServiceType::Headless => pods
            .get(&service.key)
            .into_iter()
            .flat_map(|remote| &remote.pods)
            .flat_map(|pod| {
                pod_ports(service, pod)
                    .into_iter()
                    .map(move |(port, _)| key(port, Some(pod)))
            })
            .collect(),
        ServiceType::ExternalName => Vec::new(),
    }
}

/// Whether `key` could be an import port of its merged service: a port of a
/// ClusterSetIP service, or a port of a pod of an exporting cluster of a
/// headless one. A record naming anything else is no import's, and a data
/// plane listens for none of it.
pub fn could_want(merged: &MergedSet, key: &PortKey) -> bool {
    let Some(service) = merged.services.get(&key.service) else {
        return false;
    };
    match (service.service_type, &key.pod) {
        (ServiceType::ClusterSetIp, None) => service.port(key.protocol, key.port).is_some(),
        (ServiceType::Headless, Some(pod)) => {
            service.constituents.contains(&pod.cluster)
                && service.ports.iter().any(|p| p.protocol == key.protocol)
        }
        _ => false,
    }
}

/// The ports one remote pod serves, each with the pod's own port number:
/// a headless service's clients dial a pod's own ports, so its per-pod
/// derived Service exposes those. A merged port the pod does not serve (its
/// cluster does not declare it) is left out, and so is a second service
/// port onto a pod port already listed (a Service may not repeat a port).
fn pod_ports<'s>(service: &'s MergedService, pod: &PodRef) -> Vec<(&'s MergedPort, u16)> {
    let mut seen = BTreeSet::new();
    service
        .ports
        .iter()
        .filter_map(|port| {
            let backend = port
                .backends
                .iter()
                .find(|b| *b.cluster == pod.cluster && b.pod_label() == pod.label)?;
            seen.insert((port.protocol, backend.port))
                .then_some((port, backend.port))
        })
        .collect()
}

/// The services that get an import, and why others do not.
fn importable<'a>(
    merged: &'a MergedSet,
    observed: &Observed,
) -> (Vec<&'a MergedService>, BTreeMap<ServiceKey, Skipped>) {
    let mut services = Vec::new();
    let mut skipped = BTreeMap::new();
    for service in merged.services.values() {
        if service.service_type == ServiceType::ExternalName {
            continue;
        }
        match skipped_for(service, observed) {
            Some(why) => {
                skipped.insert(service.key.clone(), why);
            }
            None => services.push(service.as_ref()),
        }
    }
    (services, skipped)
}

/// Why `service` gets no import here, if it does not.
fn skipped_for(service: &MergedService, observed: &Observed) -> Option<Skipped> {
    if !observed.namespace_exists(&service.key.namespace) {
        Some(Skipped::NoNamespace)
    } else if observed
        .imports
        .get(&service.key)
        .is_some_and(|i| !i.ours() && !observed.adoptable(i))
    {
        Some(Skipped::ForeignImport)
    } else {
        None
    }
}

/// Allocates the import ports of `services` (importable ones) and the
/// remote `pods` among them.
fn allocate_for(
    services: &[&MergedService],
    pods: &BTreeMap<ServiceKey, RemotePods>,
    inputs: &PlanInputs<'_>,
) -> Allocation {
    let wanted: Vec<PortKey> = services
        .iter()
        .flat_map(|s| wanted_ports(s, pods))
        .collect();
    let read;
    let recorded = match inputs.recorded {
        Some(recorded) => recorded,
        None => {
            read = inputs.observed.recorded_ports();
            &read
        }
    };
    let (admitted, over_quota) = within_port_quota(wanted, recorded, inputs.quota.import_ports);
    let mut allocation = ports::allocate(&admitted, recorded, inputs.released, inputs.range);
    allocation.over_quota = over_quota;
    allocation
}

/// The wanted ports each namespace may have allocated, and those past its
/// quota. Ports a namespace holds already (recorded) are kept first: a
/// quota lowered below what a namespace holds takes nothing away, it only
/// gives that namespace nothing new.
fn within_port_quota(
    wanted: Vec<PortKey>,
    recorded: &BTreeMap<PortKey, u16>,
    quota: usize,
) -> (Vec<PortKey>, Vec<PortKey>) {
    let mut held: BTreeMap<&str, usize> = BTreeMap::new();
    for key in wanted.iter().filter(|key| recorded.contains_key(*key)) {
        *held.entry(key.service.namespace.as_str()).or_default() += 1;
    }
    let mut counted = held.clone();
    let (mut admitted, mut over) = (Vec::with_capacity(wanted.len()), Vec::new());
    for key in &wanted {
        if recorded.contains_key(key) {
            admitted.push(key.clone());
            continue;
        }
        let count = counted.entry(key.service.namespace.as_str()).or_default();
        if *count < quota {
            *count += 1;
            admitted.push(key.clone());
        } else {
            over.push(key.clone());
        }
    }
    (admitted, over)
}

/// `pods` with at most `quota` remote pods per namespace (in service, then
/// cluster and label order); the rest count as over the cap.
fn pods_within_quota(
    pods: &BTreeMap<ServiceKey, RemotePods>,
    quota: usize,
) -> BTreeMap<ServiceKey, RemotePods> {
    let mut per_namespace: BTreeMap<&str, usize> = BTreeMap::new();
    let mut kept = pods.clone();
    for (service, remote) in &mut kept {
        let used = per_namespace.entry(service.namespace.as_str()).or_default();
        let room = quota.saturating_sub(*used);
        if remote.pods.len() > room {
            remote.over_cap += remote.pods.len() - room;
            remote.pods.truncate(room);
        }
        *used += remote.pods.len();
    }
    kept
}

/// Allocates the import ports of every importable service.
pub fn allocate_ports(inputs: &PlanInputs<'_>) -> Allocation {
    let (services, _) = importable(inputs.merged, inputs.observed);
    let (pods, _) = addressed_pods(&services, inputs);
    allocate_for(&services, &pods, inputs)
}

/// The remote pods that get anything, and a file setup's addresses for
/// them: with the API every planned pod (it allocates their ClusterIPs);
/// in a file setup only those `imports.podAddresses` has room for.
fn addressed_pods(
    services: &[&MergedService],
    inputs: &PlanInputs<'_>,
) -> (BTreeMap<ServiceKey, RemotePods>, PodAddresses) {
    let within = pods_within_quota(inputs.pods, inputs.quota.pod_services);
    let Some(ranges) = inputs.pod_ranges else {
        return (within, PodAddresses::default());
    };
    let wanted = services.iter().flat_map(|service| {
        within
            .get(&service.key)
            .into_iter()
            .flat_map(|remote| &remote.pods)
            .map(|pod| (&service.key, pod))
    });
    let addresses = pods::allocate_addresses(wanted, ranges);
    let mut pods = within;
    for (service, remote) in &mut pods {
        remote.pods.retain(|pod| {
            addresses
                .addresses
                .contains_key(&(service.clone(), pod.clone()))
        });
    }
    (pods, addresses)
}

/// The imports this cluster should hold.
pub fn plan(inputs: &PlanInputs<'_>) -> ImportPlan {
    let (services, skipped) = importable(inputs.merged, inputs.observed);
    let (pods, addresses) = addressed_pods(&services, inputs);
    let allocation = allocate_for(&services, &pods, inputs);
    let imports = services
        .into_iter()
        .map(|service| Arc::new(plan_import(service, &allocation, &pods, &addresses, inputs)))
        .collect();
    ImportPlan {
        imports,
        allocation,
        skipped,
        pod_addresses_exhausted: addresses.exhausted.len(),
    }
}

/// Holds back `Ready` of each ClusterSetIP import whose ClusterSetIPs
/// `answered` says the gateway's DNS responder does not answer yet: a
/// client asking the moment an import turns Ready gets its address, not a
/// negative answer its resolver would then keep.
pub fn hold_until_answered(
    plan: &mut ImportPlan,
    mut answered: impl FnMut(&ServiceKey, &[IpAddr]) -> bool,
) {
    for planned in &mut plan.imports {
        if planned.ready
            && planned.service_type == ServiceType::ClusterSetIp
            && !planned.ips.is_empty()
            && !answered(&planned.key, &planned.ips)
        {
            let planned = Arc::make_mut(planned);
            planned.ready = false;
            planned.reason = ReadyReason::Pending;
            planned.message =
                "Waiting for the gateway's DNS responder to answer the ClusterSetIPs.".to_owned();
        }
    }
}

/// The remote pods' addresses of a file setup, from the same inputs the
/// plan takes: what a gateway of that setup answers in DNS.
pub fn file_addresses(inputs: &PlanInputs<'_>) -> PodAddresses {
    let (services, _) = importable(inputs.merged, inputs.observed);
    addressed_pods(&services, inputs).1
}

/// The ports of `service` with the import port of each.
fn planned_ports(service: &MergedService, allocation: &Allocation) -> Vec<PlannedPort> {
    service
        .ports
        .iter()
        .map(|port| PlannedPort {
            name: port.name.clone(),
            protocol: port.protocol,
            port: port.port,
            app_protocol: port.app_protocol.clone(),
            import_port: allocation
                .ports
                .get(&PortKey::service_port(
                    service.key.clone(),
                    port.protocol,
                    port.port,
                ))
                .copied(),
        })
        .collect()
}

/// The remote pods of a headless service, each with its import ports,
/// addresses and derived Service.
fn planned_pods(
    service: &MergedService,
    allocation: &Allocation,
    pods: &BTreeMap<ServiceKey, RemotePods>,
    addresses: &PodAddresses,
    inputs: &PlanInputs<'_>,
) -> Vec<PlannedPod> {
    let refused = inputs.refused_families.contains(&service.key);
    let remote = pods.get(&service.key);
    remote
        .into_iter()
        .flat_map(|remote| &remote.pods)
        .map(|pod| {
            let ports: Vec<PlannedPort> = pod_ports(service, pod)
                .into_iter()
                .map(|(port, own)| PlannedPort {
                    name: port.name.clone(),
                    protocol: port.protocol,
                    port: own,
                    app_protocol: port.app_protocol.clone(),
                    import_port: allocation
                        .ports
                        .get(&PortKey {
                            service: service.key.clone(),
                            protocol: port.protocol,
                            port: port.port,
                            pod: Some(pod.clone()),
                        })
                        .copied(),
                })
                .collect();
            let forwards = ports.iter().any(|p| p.import_port.is_some());
            let fixed_ips = inputs.pod_ranges.is_some();
            let ips = if fixed_ips {
                addresses
                    .addresses
                    .get(&(service.key.clone(), pod.clone()))
                    .cloned()
                    .unwrap_or_default()
            } else {
                inputs.observed.pod_cluster_ips(&service.key, pod)
            };
            let derived_service =
                (forwards && !refused).then(|| naming::pod_service_name(&service.key, pod));
            PlannedPod {
                pod: pod.clone(),
                ports,
                ips,
                fixed_ips,
                derived_service,
            }
        })
        .collect()
}

fn plan_import(
    service: &MergedService,
    allocation: &Allocation,
    pods: &BTreeMap<ServiceKey, RemotePods>,
    addresses: &PodAddresses,
    inputs: &PlanInputs<'_>,
) -> PlannedImport {
    let cluster_set_ip = service.service_type == ServiceType::ClusterSetIp;
    // A headless service's own ports have no import port (its pods' do).
    let ports = planned_ports(service, allocation);
    let planned = if cluster_set_ip {
        Vec::new()
    } else {
        planned_pods(service, allocation, pods, addresses, inputs)
    };
    // Beyond the cap, and in a file setup those without an address.
    let wanted = inputs.pods.get(&service.key);
    let pods_over_cap = wanted
        .map_or(0, |remote| remote.over_cap + remote.pods.len())
        .saturating_sub(planned.len());
    let mut clusters = service.constituents.clone();
    clusters.sort();
    // No derived Service while the API refuses its IP families, nor one
    // without a single port to forward (the API refuses a Service with no
    // ports).
    let refused = inputs.refused_families.contains(&service.key);
    let forwards = ports.iter().any(|p| p.import_port.is_some());
    // A derived Service keeps its name: one taken over from a previous
    // implementation keeps its own, and with it its ClusterIPs.
    let held = inputs.observed.derived_of(&service.key);
    let settling = inputs.settling.contains(&service.key) && held.is_some_and(|h| !h.ours());
    let derived_service = (cluster_set_ip && !refused && forwards && !settling).then(|| {
        held.map(|held| held.name().to_owned())
            .unwrap_or_else(|| naming::derived_service_name(&service.key))
    });
    // The ClusterSetIPs are the derived Service's, in the families the
    // merged service asked for (all of them when it did not say).
    let ips: Vec<IpAddr> = if cluster_set_ip {
        inputs
            .observed
            .derived_cluster_ips(&service.key)
            .into_iter()
            .filter(|ip| {
                service.ip_families.is_empty() || service.ip_families.contains(&IpFamily::of(ip))
            })
            .collect()
    } else {
        Vec::new()
    };
    let exhausted = ports.iter().filter(|p| p.import_port.is_none()).count();
    let over_quota = allocation
        .over_quota
        .iter()
        .filter(|key| key.service == service.key)
        .count();
    let (ready, reason, message) = if !cluster_set_ip {
        (
            true,
            ReadyReason::Ready,
            headless_message(&planned, pods_over_cap),
        )
    } else if refused {
        (
            false,
            ReadyReason::IpFamilyNotSupported,
            format!(
                "This cluster cannot allocate a ClusterIP in the IP families {:?}.",
                service.ip_families
            ),
        )
    } else if over_quota > 0 {
        (
            false,
            ReadyReason::NamespaceQuotaExceeded,
            format!(
                "{over_quota} of {} ports have no gateway import port: namespace {} holds its quota of {} (imports.namespaceQuota.importPorts).",
                ports.len(),
                service.key.namespace,
                inputs.quota.import_ports
            ),
        )
    } else if exhausted > 0 {
        (
            false,
            ReadyReason::ImportPortsExhausted,
            format!(
                "{exhausted} of {} ports have no gateway import port: the range {} (imports.portRange) is full, one port per service port and per remote headless pod's port; widen it below the nodes' ephemeral ports (docs/performance.md, import ports at scale).",
                ports.len(),
                inputs.range
            ),
        )
    } else if ips.is_empty() {
        (
            false,
            ReadyReason::Pending,
            "Waiting for the derived Service's ClusterIP.".to_owned(),
        )
    } else {
        (
            true,
            ReadyReason::Ready,
            "The ClusterSetIP forwards to this cluster's gateways.".to_owned(),
        )
    };
    let mut import = PlannedImport {
        key: service.key.clone(),
        service_type: service.service_type,
        ports,
        ips,
        clusters,
        ready,
        reason,
        message,
        derived_service,
        pods: planned,
        pods_over_cap,
        slices: Vec::new(),
        unlabelled_sources: Vec::new(),
    };
    let sources = inputs.sources.get(&service.key);
    let (slices, unlabelled) = sources::planned_slices(
        service,
        &import,
        sources.unwrap_or_default(),
        inputs.observed,
    );
    if !unlabelled.is_empty() {
        let names: Vec<&str> = unlabelled.iter().map(ClusterId::as_str).collect();
        import.message.push_str(&format!(
            " No MCS EndpointSlice lists the endpoints of {}: a cluster id longer than {} characters cannot be the value of the {} label.",
            names.join(", "),
            sources::MAX_LABEL_VALUE_LEN,
            crate::model::names::MCS_SOURCE_CLUSTER_LABEL,
        ));
    }
    import.slices = slices;
    import.unlabelled_sources = unlabelled;
    import
}

/// The `Ready` message of a headless import: how its remote pods fare.
fn headless_message(pods: &[PlannedPod], over_cap: usize) -> String {
    let mut message = "Headless service: clients reach its endpoints' addresses".to_owned();
    if !pods.is_empty() {
        let addressed = pods.iter().filter(|p| !p.ips.is_empty()).count();
        message.push_str(&format!(
            "; {addressed} of {} pods on other networks have an address here",
            pods.len()
        ));
    }
    if over_cap > 0 {
        message.push_str(&format!(
            "; {over_cap} more have none (dns.maxHeadlessEndpoints, imports.namespaceQuota.podServices, imports.podAddresses)"
        ));
    }
    message.push('.');
    message
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod pods_tests;

#[cfg(test)]
mod slices_tests;
