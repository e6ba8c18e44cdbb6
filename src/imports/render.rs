//! The planned imports as Kubernetes objects (JSON, as `kubectl get -o
//! json` shows them): the ServiceImport and its status, the derived
//! Services (a ClusterSetIP service's own, a remote headless pod's) and
//! their EndpointSlices. What the reconciler applies and what `strait
//! imports` prints are the same objects. Pure: the clock comes in.

use std::collections::BTreeMap;
use std::net::IpAddr;

use k8s_openapi::jiff::Timestamp;
use serde_json::{Map, Value, json};

use super::naming::{
    DERIVED_SERVICE_ANNOTATION, ENDPOINTSLICE_MANAGED_BY_LABEL, ENDPOINTSLICE_MANAGED_BY_VALUE,
    MANAGED_BY_LABEL, MANAGED_BY_VALUE, POD_ANNOTATION, POD_CLUSTER_ANNOTATION, gateway_slice_name,
    mcs_slice_name,
};
use super::{ImportPlan, PlannedImport, PlannedPod, PlannedPort, READY_CONDITION};
use crate::discovery::observed::Observed;
use crate::export_status::{Wanted, WantedCondition, updated_conditions};
use crate::merge::{MergedService, MergedSet};
use crate::model::PortKey;
use crate::model::applied_digest::applied_digest;
use crate::model::import_record as record;
use crate::model::names::{IMPORT_PORTS_ANNOTATION, reserved_metadata_key};
use crate::model::names::{MCS_SERVICE_NAME_LABEL, MCS_SOURCE_CLUSTER_LABEL, SERVICE_NAME_LABEL};
use crate::model::{IpFamily, ServiceKey, ServiceType, SessionAffinity};

/// Annotation holding a digest of what Strait last applied to an object:
/// a field Strait stopped setting shows up as a changed digest, which a
/// comparison of the fields it sets cannot see.
pub use crate::model::applied_digest::APPLIED_DIGEST_ANNOTATION;

/// One object to hold, and whether it is the `status` subresource.
#[derive(Debug, Clone, PartialEq)]
pub struct DesiredObject {
    pub object: Value,
    pub status: bool,
    /// Whether every object it owns is in the plan's objects too: an owner
    /// whose uid is not known yet (a watch that lags) has its children left
    /// out, and a child held but not desired must then not be deleted.
    pub complete: bool,
}

impl DesiredObject {
    fn leaf(object: Value, status: bool) -> Self {
        Self {
            object,
            status,
            complete: true,
        }
    }
}

/// What one derived Service stands for: the service itself (its
/// ClusterSetIP), or one remote pod of a headless service.
#[derive(Debug, Clone, Copy)]
pub struct Derived<'a> {
    pub key: &'a ServiceKey,
    pub name: &'a str,
    pub ports: &'a [PlannedPort],
    pub pod: Option<&'a PlannedPod>,
}

impl<'a> Derived<'a> {
    /// The service's own derived Service, when it has one.
    pub fn of_service(planned: &'a PlannedImport) -> Option<Self> {
        Some(Self {
            key: &planned.key,
            name: planned.derived_service.as_deref()?,
            ports: &planned.ports,
            pod: None,
        })
    }

    /// The derived Services of the service's remote pods.
    pub fn of_pods(planned: &'a PlannedImport) -> impl Iterator<Item = Self> + 'a {
        planned.pods.iter().filter_map(|pod| {
            Some(Self {
                key: &planned.key,
                name: pod.derived_service.as_deref()?,
                ports: &pod.ports,
                pod: Some(pod),
            })
        })
    }

    fn uid<'o>(&self, observed: &'o Observed) -> Option<&'o str> {
        match self.pod {
            None => observed.derived_of(self.key),
            Some(pod) => observed
                .pod_services
                .get(&(self.key.clone(), pod.pod.clone())),
        }
        .and_then(|held| held.uid())
    }
}

/// Whether owner references must be complete: the reconciler leaves out an
/// object whose owner has no uid yet (it is applied once the owner exists);
/// a printed plan shows it without the reference.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Owners {
    Required,
    Optional,
}

/// Every object of the plan. `api_version` is the ServiceImport version
/// the server offers.
pub fn desired_objects(
    plan: &ImportPlan,
    merged: &MergedSet,
    observed: &Observed,
    api_version: &str,
    owners: Owners,
    now: Timestamp,
) -> Vec<DesiredObject> {
    desired_objects_of(plan, merged, observed, api_version, owners, now, None)
}

/// The objects of the plan's imports of the services in `only` (every
/// import when `None`): a round that follows writes renders only the
/// services those writes touched.
pub fn desired_objects_of(
    plan: &ImportPlan,
    merged: &MergedSet,
    observed: &Observed,
    api_version: &str,
    owners: Owners,
    now: Timestamp,
    only: Option<&std::collections::BTreeSet<ServiceKey>>,
) -> Vec<DesiredObject> {
    let mut objects = Vec::new();
    // Each service's import ports, recorded on its ServiceImport.
    let mut allocated: BTreeMap<&ServiceKey, Vec<(&PortKey, u16)>> = BTreeMap::new();
    for (key, port) in &plan.allocation.ports {
        allocated
            .entry(&key.service)
            .or_default()
            .push((key, *port));
    }
    for planned in &plan.imports {
        if only.is_some_and(|only| !only.contains(&planned.key)) {
            continue;
        }
        let Some(service) = merged.services.get(&planned.key) else {
            continue;
        };
        let current = observed.imports.get(&planned.key);
        let import_uid = current.and_then(|c| c.uid());
        let derived: Vec<Derived<'_>> = Derived::of_service(planned)
            .into_iter()
            .chain(Derived::of_pods(planned))
            .collect();
        let children_rendered = owners == Owners::Optional || import_uid.is_some();
        let has_children = !derived.is_empty() || !planned.slices.is_empty();
        objects.push(DesiredObject {
            object: import(
                planned,
                service,
                api_version,
                allocated
                    .get(&planned.key)
                    .map(Vec::as_slice)
                    .unwrap_or_default(),
            ),
            status: false,
            complete: !has_children || children_rendered,
        });
        // The status goes after the children, so a consumer never reads
        // `Ready` before the slices that make the ClusterSetIP answer are
        // written in the same round.
        let status = DesiredObject::leaf(
            import_status(
                planned,
                api_version,
                current.and_then(|c| c.raw()).map(|raw| &**raw),
                now,
                !planned.slices.is_empty(),
            ),
            true,
        );
        if !children_rendered {
            objects.push(status);
            continue;
        }
        for slice in mcs_slices(planned, api_version, import_uid) {
            objects.push(DesiredObject::leaf(slice, false));
        }
        for derived in derived {
            let derived_uid = derived.uid(observed);
            let slices_rendered = owners == Owners::Optional || derived_uid.is_some();
            objects.push(DesiredObject {
                object: derived_service(&derived, service, api_version, import_uid),
                status: false,
                complete: slices_rendered,
            });
            if !slices_rendered {
                continue;
            }
            for slice in gateway_slices(&derived, service, derived_uid, observed) {
                objects.push(DesiredObject::leaf(slice, false));
            }
        }
        objects.push(status);
    }
    objects
}

/// Sets the applied-digest annotation of `object` to the digest of the rest.
fn with_digest(mut object: Value) -> Value {
    let digest = applied_digest(&object);
    if let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        let annotations = metadata
            .entry("annotations")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Some(annotations) = annotations.as_object_mut() {
            annotations.insert(APPLIED_DIGEST_ANNOTATION.to_owned(), digest.into());
        }
    }
    object
}

/// `map` without its reserved keys, as JSON strings.
fn unreserved_map(map: &BTreeMap<String, String>) -> Map<String, Value> {
    map.iter()
        .filter(|(key, _)| !reserved_metadata_key(key))
        .map(|(k, v)| (k.clone(), Value::String(v.clone())))
        .collect()
}

fn families(families: &[IpFamily]) -> Vec<&'static str> {
    families
        .iter()
        .map(|family| match family {
            IpFamily::IPv4 => "IPv4",
            IpFamily::IPv6 => "IPv6",
        })
        .collect()
}

/// The ServiceImport without its status, recording `ports`, the import
/// ports of its service (`record`).
pub fn import(
    planned: &PlannedImport,
    service: &MergedService,
    api_version: &str,
    ports: &[(&PortKey, u16)],
) -> Value {
    // Translation drops reserved keys from what an export asks for; they are
    // left out here too, so the reserved metadata below is Strait's alone.
    let mut labels = unreserved_map(&service.exported_labels);
    labels.insert(MANAGED_BY_LABEL.to_owned(), MANAGED_BY_VALUE.into());
    let mut annotations = unreserved_map(&service.exported_annotations);
    // Always written, `[]` when the import has no import port: the record
    // is Strait's, and an absent one would leave room for another's.
    annotations.insert(
        IMPORT_PORTS_ANNOTATION.to_owned(),
        record::encode(ports.iter().copied()).into(),
    );
    if let Some(derived) = &planned.derived_service {
        annotations.insert(
            DERIVED_SERVICE_ANNOTATION.to_owned(),
            derived.clone().into(),
        );
    }
    let ports: Vec<Value> = planned
        .ports
        .iter()
        .map(|port| {
            let mut rendered = Map::new();
            if !port.name.is_empty() {
                rendered.insert("name".to_owned(), port.name.clone().into());
            }
            rendered.insert("protocol".to_owned(), port.protocol.as_str().into());
            rendered.insert("port".to_owned(), port.port.into());
            if let Some(app) = &port.app_protocol {
                rendered.insert("appProtocol".to_owned(), app.clone().into());
            }
            Value::Object(rendered)
        })
        .collect();
    let mut spec = Map::new();
    spec.insert(
        "type".to_owned(),
        match planned.service_type {
            ServiceType::Headless => "Headless",
            _ => "ClusterSetIP",
        }
        .into(),
    );
    spec.insert("ports".to_owned(), ports.into());
    if !planned.ips.is_empty() {
        let ips: Vec<String> = planned.ips.iter().map(IpAddr::to_string).collect();
        spec.insert("ips".to_owned(), ips.into());
    }
    spec.insert(
        "sessionAffinity".to_owned(),
        service.session_affinity.to_string().into(),
    );
    if service.session_affinity == SessionAffinity::ClientIp
        && let Some(seconds) = service.session_affinity_timeout
    {
        spec.insert(
            "sessionAffinityConfig".to_owned(),
            json!({"clientIP": {"timeoutSeconds": seconds}}),
        );
    }
    // The families this cluster gave the ClusterSetIPs, in their order
    // (IPs[i] is of ipFamilies[i]); until it has, the service's.
    let import_families: Vec<IpFamily> = if planned.ips.is_empty() {
        service.ip_families.clone()
    } else {
        planned.ips.iter().map(IpFamily::of).collect()
    };
    if !import_families.is_empty() {
        spec.insert("ipFamilies".to_owned(), families(&import_families).into());
    }
    spec.insert(
        "internalTrafficPolicy".to_owned(),
        service.internal_traffic_policy.clone().into(),
    );
    if let Some(distribution) = &service.traffic_distribution {
        spec.insert(
            "trafficDistribution".to_owned(),
            distribution.clone().into(),
        );
    }
    with_digest(json!({
        "apiVersion": api_version,
        "kind": "ServiceImport",
        "metadata": {
            "name": planned.key.name,
            "namespace": planned.key.namespace,
            "labels": labels,
            "annotations": annotations,
        },
        "spec": spec,
    }))
}

/// The ServiceImport's status: the exporting clusters, once it is Ready
/// whether it has MCS EndpointSlices (`endpointSliceObjects`, mcs-api
/// v0.5.2), and
/// `Ready`, whose `lastTransitionTime` moves only when its status flips.
pub fn import_status(
    planned: &PlannedImport,
    api_version: &str,
    current: Option<&Value>,
    now: Timestamp,
    slices_present: bool,
) -> Value {
    let clusters: Vec<Value> = planned
        .clusters
        .iter()
        .map(|cluster| json!({"cluster": cluster.as_str()}))
        .collect();
    let held: Vec<Value> = current
        .and_then(|c| c["status"]["conditions"].as_array())
        .cloned()
        .unwrap_or_default();
    // Only the Ready condition is Strait's; others' are not written back.
    let held_ready: Vec<Value> = held
        .into_iter()
        .filter(|c| c["type"].as_str() == Some(READY_CONDITION))
        .collect();
    let wanted = Wanted {
        set: vec![WantedCondition {
            type_: READY_CONDITION,
            status: planned.ready,
            reason: planned.reason.as_str().to_owned(),
            message: planned.message.clone(),
        }],
        remove: Vec::new(),
    };
    // No `observedGeneration`: the import's generation moves with every
    // write of its spec (its ips, say), and Ready would be rewritten after
    // each one for nothing.
    let conditions = updated_conditions(&held_ready, &wanted, None, now).unwrap_or(held_ready);
    let mut status = json!({"clusters": clusters, "conditions": conditions});
    // Said once the import is Ready, and left unsaid before: an import's
    // slices may come a snapshot after its export (they are read from
    // another watch), and in the round that creates it they follow its
    // status (they need its uid). Said earlier, it would flip while the
    // import becomes Ready and cost every new import one more write.
    if planned.ready {
        status["endpointSliceObjects"] = if slices_present { "Present" } else { "Absent" }.into();
    }
    json!({
        "apiVersion": api_version,
        "kind": "ServiceImport",
        "metadata": {"name": planned.key.name, "namespace": planned.key.namespace},
        "status": status,
    })
}

fn owner_reference(api_version: &str, kind: &str, name: &str, uid: Option<&str>) -> Value {
    let mut reference = json!({
        "apiVersion": api_version,
        "kind": kind,
        "name": name,
        "controller": true,
        "blockOwnerDeletion": true,
    });
    if let Some(uid) = uid {
        reference["uid"] = uid.into();
    }
    reference
}

/// A derived Service: the ClusterSetIP (or a remote pod's address),
/// forwarding each port to the gateway's import port for it.
pub fn derived_service(
    derived: &Derived<'_>,
    service: &MergedService,
    import_api_version: &str,
    import_uid: Option<&str>,
) -> Value {
    let ports: Vec<Value> = derived
        .ports
        .iter()
        .filter_map(|port| {
            let target = port.import_port?;
            let mut rendered = Map::new();
            if !port.name.is_empty() {
                rendered.insert("name".to_owned(), port.name.clone().into());
            }
            rendered.insert("protocol".to_owned(), port.protocol.as_str().into());
            rendered.insert("port".to_owned(), port.port.into());
            rendered.insert("targetPort".to_owned(), target.into());
            if let Some(app) = &port.app_protocol {
                rendered.insert("appProtocol".to_owned(), app.clone().into());
            }
            Some(Value::Object(rendered))
        })
        .collect();
    let mut spec = json!({"type": "ClusterIP", "ports": ports});
    let mut annotations = Map::new();
    match derived.pod {
        None => {
            // kube-proxy keeps a client on one gateway replica, whose
            // chooser keeps it on one backend.
            spec["sessionAffinity"] = service.session_affinity.to_string().into();
            if service.session_affinity == SessionAffinity::ClientIp
                && let Some(seconds) = service.session_affinity_timeout
            {
                spec["sessionAffinityConfig"] = json!({"clientIP": {"timeoutSeconds": seconds}});
            }
        }
        Some(pod) => {
            // One pod: nothing to keep a client on.
            spec["sessionAffinity"] = "None".into();
            annotations.insert(
                POD_CLUSTER_ANNOTATION.to_owned(),
                pod.pod.cluster.as_str().into(),
            );
            annotations.insert(POD_ANNOTATION.to_owned(), pod.pod.label.clone().into());
        }
    }
    let fixed: &[IpAddr] = match derived.pod {
        Some(pod) if pod.fixed_ips => &pod.ips,
        _ => &[],
    };
    if fixed.is_empty() {
        set_families(&mut spec, &service.ip_families);
    } else {
        // Addresses chosen here (a file setup): the families are theirs,
        // and both are required.
        let ips: Vec<String> = fixed.iter().map(IpAddr::to_string).collect();
        let chosen: Vec<IpFamily> = fixed.iter().map(IpFamily::of).collect();
        spec["clusterIP"] = ips[0].clone().into();
        spec["clusterIPs"] = ips.into();
        spec["ipFamilies"] = families(&chosen).into();
        spec["ipFamilyPolicy"] = if chosen.len() > 1 {
            "RequireDualStack"
        } else {
            "SingleStack"
        }
        .into();
    }
    let mut metadata = json!({
        "name": derived.name,
        "namespace": derived.key.namespace,
        "labels": {
            MANAGED_BY_LABEL: MANAGED_BY_VALUE,
            MCS_SERVICE_NAME_LABEL: derived.key.name,
        },
        "ownerReferences": [owner_reference(
            import_api_version, "ServiceImport", &derived.key.name, import_uid)],
    });
    if !annotations.is_empty() {
        metadata["annotations"] = Value::Object(annotations);
    }
    with_digest(json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata,
        "spec": spec,
    }))
}

/// `ipFamilyPolicy` and `ipFamilies` for the families asked for. None: the
/// cluster's default, single-stack. One: that family. Both: whatever this
/// cluster allocates of them (`PreferDualStack` without `ipFamilies`, so
/// the API server picks its own families in its own order): a single-stack
/// importing cluster gets the one address it can give, where
/// `RequireDualStack` would be refused and leave the service without one
/// (KEP-1645 lets an import carry only the families the cluster supports).
fn set_families(spec: &mut Value, asked: &[IpFamily]) {
    match asked.len() {
        0 => spec["ipFamilyPolicy"] = "SingleStack".into(),
        1 => {
            spec["ipFamilyPolicy"] = "SingleStack".into();
            spec["ipFamilies"] = families(asked).into();
        }
        _ => spec["ipFamilyPolicy"] = "PreferDualStack".into(),
    }
}

/// One EndpointSlice per address family: this cluster's gateway pods, on
/// the import ports.
pub fn gateway_slices(
    derived: &Derived<'_>,
    service: &MergedService,
    derived_uid: Option<&str>,
    observed: &Observed,
) -> Vec<Value> {
    let derived_name = derived.name;
    let ports: Vec<Value> = derived
        .ports
        .iter()
        .filter_map(|port| {
            let target = port.import_port?;
            let mut rendered = json!({
                "name": port.name, "protocol": port.protocol.as_str(), "port": target});
            if let Some(app) = &port.app_protocol {
                rendered["appProtocol"] = app.clone().into();
            }
            Some(rendered)
        })
        .collect();
    let mut slices = Vec::new();
    for family in [IpFamily::IPv4, IpFamily::IPv6] {
        if !service.ip_families.is_empty() && !service.ip_families.contains(&family) {
            continue;
        }
        let endpoints: Vec<Value> = observed
            .gateway_endpoints
            .iter()
            .filter(|gateway| IpFamily::of(&gateway.address) == family)
            .map(|gateway| {
                slice_endpoint(
                    gateway.address,
                    [gateway.ready, gateway.serving, gateway.terminating],
                    [
                        ("nodeName", gateway.node_name.as_deref()),
                        ("zone", gateway.zone.as_deref()),
                    ],
                )
            })
            .collect();
        // A family without gateways needs no slice, except the service's
        // first: an empty slice says "no endpoints" rather than "unknown".
        let first = family
            == service
                .ip_families
                .first()
                .copied()
                .unwrap_or(IpFamily::IPv4);
        if endpoints.is_empty() && !first {
            continue;
        }
        let family_name = families(&[family])[0];
        slices.push(with_digest(json!({
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {
                "name": gateway_slice_name(derived_name, family_name),
                "namespace": derived.key.namespace,
                // No multicluster.kubernetes.io/service-name: readers of
                // MCS slices (CoreDNS's multicluster option) would take the
                // gateways for endpoints of the service.
                "labels": {
                    SERVICE_NAME_LABEL: derived_name,
                    ENDPOINTSLICE_MANAGED_BY_LABEL: ENDPOINTSLICE_MANAGED_BY_VALUE,
                    MANAGED_BY_LABEL: MANAGED_BY_VALUE,
                },
                "ownerReferences": [owner_reference("v1", "Service", derived_name, derived_uid)],
            },
            "addressType": family_name,
            "endpoints": endpoints,
            "ports": ports,
        })));
    }
    slices
}

/// One endpoint of a slice Strait writes: one address, its `ready`,
/// `serving` and `terminating` conditions, and the optional fields it has.
fn slice_endpoint(
    address: IpAddr,
    conditions: [bool; 3],
    optional: [(&str, Option<&str>); 2],
) -> Value {
    let [ready, serving, terminating] = conditions;
    let mut endpoint = json!({
        "addresses": [address.to_string()],
        "conditions": {"ready": ready, "serving": serving, "terminating": terminating},
    });
    for (field, value) in optional {
        if let Some(value) = value {
            endpoint[field] = value.into();
        }
    }
    endpoint
}

/// The import's MCS EndpointSlices ([`sources`](super::sources)), owned
/// by the ServiceImport. They carry no `kubernetes.io/service-name` label:
/// kube-proxy and the EndpointSlice controller leave them alone, and the
/// derived Service's own slices carry its traffic.
pub fn mcs_slices(
    planned: &PlannedImport,
    import_api_version: &str,
    import_uid: Option<&str>,
) -> Vec<Value> {
    let mut groups: BTreeMap<(&str, IpFamily), usize> = BTreeMap::new();
    planned
        .slices
        .iter()
        .map(|slice| {
            let family_name = families(&[slice.family])[0];
            let group = groups
                .entry((slice.cluster.as_str(), slice.family))
                .or_default();
            let name = mcs_slice_name(&planned.key, slice.cluster.as_str(), family_name, *group);
            *group += 1;
            let ports: Vec<Value> = slice
                .ports
                .iter()
                .map(|port| {
                    let mut rendered = json!({
                        "name": port.name, "protocol": port.protocol.as_str(), "port": port.port});
                    if let Some(app) = &port.app_protocol {
                        rendered["appProtocol"] = app.clone().into();
                    }
                    rendered
                })
                .collect();
            let endpoints: Vec<Value> = slice
                .endpoints
                .iter()
                .map(|endpoint| {
                    slice_endpoint(
                        endpoint.address,
                        [endpoint.ready, endpoint.serving, endpoint.terminating],
                        [
                            ("hostname", endpoint.hostname.as_deref()),
                            ("zone", endpoint.zone.as_deref()),
                        ],
                    )
                })
                .collect();
            with_digest(json!({
                "apiVersion": "discovery.k8s.io/v1",
                "kind": "EndpointSlice",
                "metadata": {
                    "name": name,
                    "namespace": planned.key.namespace,
                    "labels": {
                        MCS_SERVICE_NAME_LABEL: planned.key.name,
                        MCS_SOURCE_CLUSTER_LABEL: slice.cluster.as_str(),
                        ENDPOINTSLICE_MANAGED_BY_LABEL: ENDPOINTSLICE_MANAGED_BY_VALUE,
                        MANAGED_BY_LABEL: MANAGED_BY_VALUE,
                    },
                    "ownerReferences": [owner_reference(
                        import_api_version, "ServiceImport", &planned.key.name, import_uid)],
                },
                "addressType": family_name,
                "endpoints": endpoints,
                "ports": ports,
            }))
        })
        .collect()
}

/// The objects as one `kubectl get -o json` List, a ServiceImport's
/// status folded into it.
pub fn as_list(objects: &[DesiredObject]) -> Value {
    let mut items: Vec<Value> = Vec::new();
    for desired in objects {
        if desired.status {
            if let Some(import) = items.iter_mut().rev().find(|item| {
                item["kind"] == desired.object["kind"]
                    && item["metadata"]["name"] == desired.object["metadata"]["name"]
                    && item["metadata"]["namespace"] == desired.object["metadata"]["namespace"]
            }) {
                import["status"] = desired.object["status"].clone();
            }
            continue;
        }
        items.push(desired.object.clone());
    }
    json!({"apiVersion": "v1", "kind": "List", "metadata": {}, "items": items})
}
