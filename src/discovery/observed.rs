//! What a cluster holds already, as far as imports go: its namespaces, its
//! ServiceImports (Strait's and other controllers'), the derived Services
//! and EndpointSlices Strait created, and the gateway pods that the derived
//! Services' slices point at. Objects are kept as the API server returned
//! them (JSON), because the diff compares what Strait wants with exactly
//! that; everything the plan needs is read from them here, the fields
//! every pass reads once per object, when it is observed. Pure.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;

use serde::Serialize;
use serde_json::Value;

use super::objects::EndpointSlice;
use crate::model::import_record::decode;
use crate::model::names::{
    DERIVED_SERVICE_ANNOTATION, IMPORT_PORTS_ANNOTATION, MANAGED_BY_LABEL, MANAGED_BY_VALUE,
    MCS_SERVICE_NAME_LABEL, POD_ANNOTATION, POD_CLUSTER_ANNOTATION, SERVICE_NAME_LABEL,
};
use crate::model::{ClusterId, Protocol, ServiceKey};
use crate::model::{PodRef, PortKey};

/// One object as the API server holds it.
#[derive(Debug, Clone)]
pub struct ObservedObject {
    /// Shared with the store that holds it: observing the local cluster
    /// copies no JSON and reads no head again. Read-only: [`ObservedObject::head`] is read out of
    /// it once. Without `metadata.managedFields` (the head keeps the
    /// managers), and `None` for a slice of Strait's held as its digest
    /// ([`super::condensed`]).
    raw: Option<std::sync::Arc<Value>>,
    /// What every pass reads of it, read out of the JSON once (a pass
    /// over thousands of objects would otherwise look each field up in
    /// each object's maps every time).
    head: std::sync::Arc<Head>,
}

impl PartialEq for ObservedObject {
    fn eq(&self, other: &Self) -> bool {
        self.raw == other.raw && self.head.version() == other.head.version()
    }
}

/// The fields of an object the planner and the reconciler read most.
#[derive(Debug, Default)]
struct Head {
    api_version: Box<str>,
    kind: Box<str>,
    namespace: Box<str>,
    name: Box<str>,
    uid: Option<Box<str>>,
    resource_version: Option<Box<str>>,
    /// `multicluster.kubernetes.io/service-name`.
    mcs_service: Option<Box<str>>,
    /// `kubernetes.io/service-name`.
    service_name: Option<Box<str>>,
    ours: bool,
    pod: Option<PodRef>,
    /// A ServiceImport's `Ready=True` condition.
    ready: bool,
    /// A ServiceImport's `spec.ips`, as written.
    ips: Box<[Box<str>]>,
    /// The import ports a ServiceImport records
    /// (`strait.dev/import-ports`), decoded; `None` when it records none.
    recorded: Option<Box<[(PortKey, u16)]>>,
    /// A Service's ClusterIPs (none for `None` or before allocation).
    cluster_ips: Box<[IpAddr]>,
    /// The field managers `metadata.managedFields` names.
    managers: Box<[Box<str>]>,
    /// `metadata.ownerReferences`: kind, name and uid of each.
    owners: Box<[[Box<str>; 3]]>,
    /// The applied digest of a slice of Strait's held without its JSON.
    intact_digest: Option<Box<str>>,
}

impl Head {
    fn of(raw: &Value) -> Self {
        let metadata = &raw["metadata"];
        let text = |value: &Value| value.as_str().map(Box::from);
        let labels = &metadata["labels"];
        let kind = raw["kind"].as_str().unwrap_or_default();
        let import = kind == "ServiceImport";
        Self {
            api_version: raw["apiVersion"].as_str().unwrap_or_default().into(),
            kind: kind.into(),
            namespace: metadata["namespace"].as_str().unwrap_or_default().into(),
            name: metadata["name"].as_str().unwrap_or_default().into(),
            uid: text(&metadata["uid"]),
            resource_version: text(&metadata["resourceVersion"]),
            mcs_service: text(&labels[MCS_SERVICE_NAME_LABEL]),
            service_name: text(&labels[SERVICE_NAME_LABEL]),
            ours: labels[MANAGED_BY_LABEL].as_str() == Some(MANAGED_BY_VALUE),
            pod: pod_of(raw),
            ready: import
                && raw["status"]["conditions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|c| c["type"] == "Ready" && c["status"] == "True"),
            ips: if import {
                raw["spec"]["ips"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|ip| ip.as_str().map(Box::from))
                    .collect()
            } else {
                Box::new([])
            },
            recorded: if import {
                metadata["annotations"][IMPORT_PORTS_ANNOTATION]
                    .as_str()
                    .map(|text| {
                        let service = ServiceKey::new(
                            metadata["namespace"].as_str().unwrap_or_default(),
                            metadata["name"].as_str().unwrap_or_default(),
                        );
                        decode(&service, text)
                            .unwrap_or_default()
                            .into_iter()
                            .collect()
                    })
            } else {
                None
            },
            cluster_ips: if kind == "Service" {
                let spec = &raw["spec"];
                let listed: Vec<&str> = match spec["clusterIPs"].as_array() {
                    Some(ips) => ips.iter().filter_map(Value::as_str).collect(),
                    None => spec["clusterIP"].as_str().into_iter().collect(),
                };
                listed.iter().filter_map(|ip| ip.parse().ok()).collect()
            } else {
                Box::new([])
            },
            managers: metadata["managedFields"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|entry| text(&entry["manager"]))
                .collect(),
            owners: metadata["ownerReferences"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|owner| {
                    ["kind", "name", "uid"]
                        .map(|field| owner[field].as_str().unwrap_or_default().into())
                })
                .collect(),
            intact_digest: None,
        }
    }

    /// The object's identity and version.
    fn version(&self) -> (&str, &str, &str, Option<&str>, Option<&str>) {
        (
            &self.kind,
            &self.namespace,
            &self.name,
            self.uid.as_deref(),
            self.resource_version.as_deref(),
        )
    }
}

impl ObservedObject {
    pub fn new(raw: Value) -> Self {
        Self::read(std::borrow::Cow::Owned(raw))
    }

    /// [`ObservedObject::new`] from a borrowed object: copied only when
    /// it is kept whole (a slice held as its digest is not).
    pub fn of(raw: &Value) -> Self {
        Self::read(std::borrow::Cow::Borrowed(raw))
    }

    fn read(raw: std::borrow::Cow<'_, Value>) -> Self {
        let mut head = Head::of(&raw);
        if head.ours {
            head.intact_digest = super::condensed::intact_slice_digest(&raw);
        }
        let raw = head.intact_digest.is_none().then(|| {
            let mut raw = raw.into_owned();
            // Every field Strait wrote is listed there again: as large as
            // the object, and read only for who wrote it.
            if let Some(metadata) = raw.get_mut("metadata").and_then(Value::as_object_mut) {
                metadata.remove("managedFields");
            }
            std::sync::Arc::new(raw)
        });
        Self {
            raw,
            head: std::sync::Arc::new(head),
        }
    }

    /// The object as the server returned it (without its managed fields);
    /// `None` for a slice of Strait's held as its digest.
    pub fn raw(&self) -> Option<&std::sync::Arc<Value>> {
        self.raw.as_ref()
    }

    /// The applied digest of a slice of Strait's held without its JSON:
    /// its fields make that digest, so it holds what Strait applied with it.
    pub fn intact_digest(&self) -> Option<&str> {
        self.head.intact_digest.as_deref()
    }

    /// `apiVersion`.
    pub fn api_version(&self) -> &str {
        &self.head.api_version
    }

    /// One object at one version: the same uid and resource version (or
    /// the very same object).
    pub fn same_version(&self, other: &Self) -> bool {
        std::sync::Arc::ptr_eq(&self.head, &other.head)
            || (self.uid().is_some_and(|uid| !uid.is_empty())
                && self.resource_version().is_some_and(|v| !v.is_empty())
                && self.head.version() == other.head.version())
    }

    pub fn name(&self) -> &str {
        &self.head.name
    }

    pub fn namespace(&self) -> &str {
        &self.head.namespace
    }

    pub fn uid(&self) -> Option<&str> {
        self.head.uid.as_deref()
    }

    pub fn kind(&self) -> &str {
        &self.head.kind
    }

    pub fn resource_version(&self) -> Option<&str> {
        self.head.resource_version.as_deref()
    }

    /// A label's value. The two service-name labels are read from the
    /// head; any other from the JSON, so a slice held as its digest has
    /// none of them.
    pub fn label(&self, name: &str) -> Option<&str> {
        match name {
            MCS_SERVICE_NAME_LABEL => self.head.mcs_service.as_deref(),
            SERVICE_NAME_LABEL => self.head.service_name.as_deref(),
            _ => self
                .raw
                .as_ref()?
                .get("metadata")?
                .get("labels")?
                .get(name)?
                .as_str(),
        }
    }

    /// A ServiceImport's `Ready=True` condition.
    pub fn ready(&self) -> bool {
        self.head.ready
    }

    /// A ServiceImport's `spec.ips`, as written.
    pub fn ips(&self) -> impl Iterator<Item = &str> {
        self.head.ips.iter().map(|ip| &**ip)
    }

    /// The remote pod a per-pod derived Service stands for; `None` for a
    /// service's own derived Service (or annotations no cluster id fits).
    pub fn pod(&self) -> Option<PodRef> {
        self.head.pod.clone()
    }

    /// Labelled as created by Strait's import reconciler: what the diff
    /// compares and may delete. Not proof of anything on a Service or an
    /// EndpointSlice, which a tenant may label so in its namespace: what
    /// those record is read only through [`Observed::recorded_ports`].
    pub fn ours(&self) -> bool {
        self.head.ours
    }

    /// Feeds the object's kind, namespace, name and resource version to
    /// `hasher`: equal for one object at one version.
    fn hash_version(&self, hasher: &mut impl std::hash::Hasher) {
        use std::hash::Hash;
        self.kind().hash(hasher);
        self.namespace().hash(hasher);
        self.name().hash(hasher);
        self.resource_version().hash(hasher);
    }

    /// Whether the field manager `manager` wrote any of it.
    pub fn written_by(&self, manager: &str) -> bool {
        self.head.managers.iter().any(|m| &**m == manager)
    }

    /// Whether an owner reference names the `kind` called `name` with `uid`.
    pub fn owned_by(&self, kind: &str, name: &str, uid: &str) -> bool {
        self.head
            .owners
            .iter()
            .any(|[k, n, u]| (&**k, &**n, &**u) == (kind, name, uid))
    }
}

/// The import ports Strait's records hold, each with one claimant.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecordedPorts {
    pub ports: BTreeMap<PortKey, u16>,
    /// Ports two or more records claimed.
    pub contested: Vec<ContestedPort>,
}

/// An import port two or more records claim: a fault (Strait writes each
/// port once), reported as an error and settled as
/// [`Observed::recorded_claims`] says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContestedPort {
    pub port: u16,
    pub claimants: Vec<PortKey>,
    /// The claimant whose derived Service forwards to the port; `None`
    /// leaves the port to no one.
    pub winner: Option<PortKey>,
}

/// One gateway pod of this cluster, as its Service's EndpointSlices list it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GatewayEndpoint {
    pub address: IpAddr,
    pub ready: bool,
    pub serving: bool,
    pub terminating: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
}

/// Objects held by a key. Structurally shared: a copy of what the local
/// cluster holds (each snapshot's, each pass's) costs nothing until it is
/// changed, and a change copies only its path.
pub type Held<K> = imbl::OrdMap<K, ObservedObject>;

/// What the local cluster holds.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Observed {
    /// `None` when the namespaces are not known (a file setup): every
    /// namespace then counts as present.
    pub namespaces: Option<BTreeSet<String>>,
    /// Every ServiceImport, Strait's or not, by service.
    pub imports: Held<ServiceKey>,
    /// The derived Services Strait created, by the service they stand for.
    pub derived: Held<ServiceKey>,
    /// The per-pod derived Services Strait created, by service and pod.
    pub pod_services: Held<(ServiceKey, PodRef)>,
    /// The EndpointSlices Strait created, by namespace and name.
    pub slices: Held<(String, String)>,
    /// This cluster's gateway pods, in address order.
    pub gateway_endpoints: Vec<GatewayEndpoint>,
    /// The field manager whose imports Strait takes over
    /// (`kube.adoptImports`).
    pub adopt_from: Option<String>,
    /// Services and EndpointSlices Strait did not create that came with
    /// their whole object (the source keeps those of `adopt_from`), by
    /// namespace and name: what adoption may take over.
    pub foreign_services: Held<(String, String)>,
    pub foreign_slices: Held<(String, String)>,
    /// Derived Services [`Observed::insert`] put in the place of another
    /// claiming the same service (which, of two, is kept depends on the
    /// order they are read in): while any is, a change is not followed in
    /// place ([`Observed::replace`]).
    pub(crate) shadowed: usize,
}

impl Observed {
    /// A digest of what every service's objects depend on besides their
    /// own: the namespaces, the gateway pods, the adopted manager and
    /// other controllers' Services and slices (a derived Service or slices
    /// to take over, a Service squatting a derived name). A pass that
    /// renders only the services whose own inputs changed renders them all
    /// when this changed.
    pub fn shared_fingerprint(&self) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        self.namespaces.hash(&mut hasher);
        self.gateway_endpoints.hash(&mut hasher);
        self.adopt_from.hash(&mut hasher);
        for object in self
            .foreign_services
            .values()
            .chain(self.foreign_slices.values())
        {
            object.hash_version(&mut hasher);
        }
        hasher.finish()
    }

    /// The objects held for each service: its ServiceImport (whoever made
    /// it), its derived Services and the slices Strait manages for it. A
    /// slice belongs to the service its MCS label names, else to the one
    /// whose derived Service its `kubernetes.io/service-name` label names;
    /// a slice naming neither belongs to none, and only a pass over every
    /// service finds it stale.
    pub fn by_service(&self) -> HashMap<ServiceKey, Vec<&ObservedObject>> {
        let mut held: HashMap<ServiceKey, Vec<&ObservedObject>> = HashMap::new();
        let mut derived_names: HashMap<(&str, &str), &ServiceKey> = HashMap::new();
        for (key, _, derived) in self.all_derived() {
            derived_names.insert((derived.namespace(), derived.name()), key);
            held.entry(key.clone()).or_default().push(derived);
        }
        for (key, import) in &self.imports {
            held.entry(key.clone()).or_default().push(import);
        }
        for slice in self.slices.values() {
            let namespace = slice.namespace();
            let key = match slice.label(MCS_SERVICE_NAME_LABEL) {
                Some(service) => Some(ServiceKey::new(namespace, service)),
                None => slice
                    .label(SERVICE_NAME_LABEL)
                    .and_then(|derived| derived_names.get(&(namespace, derived)))
                    .map(|key| (*key).clone()),
            };
            if let Some(key) = key {
                held.entry(key).or_default().push(slice);
            }
        }
        held
    }

    /// Sorts one object into its place; objects of other kinds, and
    /// Services and slices Strait did not create, are ignored.
    pub fn insert(&mut self, object: ObservedObject) {
        if object.kind() == "Namespace" {
            self.namespaces
                .get_or_insert_default()
                .insert(object.name().to_owned());
            return;
        }
        let Some(slot) = Slot::of(&object) else {
            return;
        };
        match slot {
            Slot::Import(key) => {
                self.imports.insert(key, object);
            }
            Slot::Derived(key) => {
                let name = object.name().to_owned();
                let before = self.derived.insert(key, object);
                self.shadowed += usize::from(before.is_some_and(|b| b.name() != name));
            }
            Slot::Pod(key) => {
                let name = object.name().to_owned();
                let before = self.pod_services.insert(key, object);
                self.shadowed += usize::from(before.is_some_and(|b| b.name() != name));
            }
            Slot::Slice(key) => {
                self.slices.insert(key, object);
            }
            Slot::ForeignService(key) => {
                self.foreign_services.insert(key, object);
            }
            Slot::ForeignSlice(key) => {
                self.foreign_slices.insert(key, object);
            }
        }
    }

    /// The held object of the kind, namespace and name `object` names
    /// (a derived Service found by the service its label names).
    pub fn get(&self, object: &Value) -> Option<&ObservedObject> {
        fn text(value: &Value) -> &str {
            value.as_str().unwrap_or_default()
        }
        let metadata = &object["metadata"];
        let (namespace, name) = (text(&metadata["namespace"]), text(&metadata["name"]));
        match text(&object["kind"]) {
            "ServiceImport" => self.imports.get(&ServiceKey::new(namespace, name)),
            "Service" => {
                match (
                    metadata["labels"][MCS_SERVICE_NAME_LABEL].as_str(),
                    pod_of(object),
                ) {
                    (Some(service), None) => self
                        .derived
                        .get(&ServiceKey::new(namespace, service))
                        .filter(|held| held.name() == name),
                    (Some(service), Some(pod)) => self
                        .pod_services
                        .get(&(ServiceKey::new(namespace, service), pod))
                        .filter(|held| held.name() == name),
                    // Without the label, by name (a derived Service is named
                    // after its service, not the other way round).
                    (None, _) => self
                        .derived
                        .values()
                        .chain(self.pod_services.values())
                        .find(|held| held.namespace() == namespace && held.name() == name),
                }
            }
            "EndpointSlice" => self.slices.get(&(namespace.to_owned(), name.to_owned())),
            _ => None,
        }
    }

    /// Forgets the object of that kind, namespace and name.
    pub fn remove(&mut self, kind: &str, namespace: &str, name: &str) {
        match kind {
            "ServiceImport" => {
                self.imports.remove(&ServiceKey::new(namespace, name));
            }
            "Service" => {
                remove_named(&mut self.derived, namespace, name);
                remove_named(&mut self.pod_services, namespace, name);
            }
            _ => {
                self.slices.remove(&(namespace.to_owned(), name.to_owned()));
                self.foreign_slices
                    .remove(&(namespace.to_owned(), name.to_owned()));
            }
        }
        if kind == "Service" {
            self.foreign_services
                .remove(&(namespace.to_owned(), name.to_owned()));
        }
    }

    /// Whether `object` is a previous implementation's that Strait takes
    /// over: not Strait's, and written by the `kube.adoptImports` manager.
    pub fn adoptable(&self, object: &ObservedObject) -> bool {
        !object.ours()
            && self
                .adopt_from
                .as_deref()
                .is_some_and(|manager| object.written_by(manager))
    }

    /// The derived Service of `service`: Strait's, else the one its
    /// ServiceImport (Strait's or one to adopt) names
    /// (`multicluster.kubernetes.io/derived-service`) when the previous
    /// implementation wrote it: taken over, it keeps its name.
    pub fn derived_of(&self, service: &ServiceKey) -> Option<&ObservedObject> {
        if let Some(ours) = self.derived.get(service) {
            return Some(ours);
        }
        let import = self
            .imports
            .get(service)
            .filter(|i| i.ours() || self.adoptable(i))?;
        let name =
            import.raw.as_ref()?["metadata"]["annotations"][DERIVED_SERVICE_ANNOTATION].as_str()?;
        self.foreign_services
            .get(&(service.namespace.clone(), name.to_owned()))
            .filter(|held| self.adoptable(held))
    }

    /// The previous implementation's EndpointSlices of the Service
    /// `namespace/name` (its `kubernetes.io/service-name` label).
    pub fn adoptable_slices_of<'a, 'n>(
        &'a self,
        namespace: &'n str,
        name: &'n str,
    ) -> impl Iterator<Item = &'a ObservedObject> + 'n
    where
        'a: 'n,
    {
        self.foreign_slices.values().filter(move |slice| {
            slice.namespace() == namespace
                && slice.label(SERVICE_NAME_LABEL) == Some(name)
                && self.adoptable(slice)
        })
    }

    pub fn namespace_exists(&self, namespace: &str) -> bool {
        self.namespaces
            .as_ref()
            .is_none_or(|namespaces| namespaces.contains(namespace))
    }

    /// Every derived Service, per-pod ones included, with the service and
    /// pod it stands for.
    pub fn all_derived(
        &self,
    ) -> impl Iterator<Item = (&ServiceKey, Option<&PodRef>, &ObservedObject)> {
        let services = self.derived.iter().map(|(key, held)| (key, None, held));
        let pods = self
            .pod_services
            .iter()
            .map(|((key, pod), held)| (key, Some(pod), held));
        services.chain(pods)
    }

    /// The import ports recorded on Strait's ServiceImports
    /// ([`import_record`](crate::model::import_record)), each claimed by one
    /// service port: see [`Observed::recorded_claims`].
    pub fn recorded_ports(&self) -> BTreeMap<PortKey, u16> {
        self.recorded_claims().ports
    }

    /// The import ports recorded on Strait's ServiceImports. Only a
    /// ServiceImport Strait wrote before it recorded them (an older
    /// version) has its derived Services' `targetPort`s read instead, and
    /// then only of derived Services it owns: a tenant may edit or forge a
    /// Service in its namespace, not a ServiceImport.
    ///
    /// A port two records claim is settled here, for the leader's planner
    /// and every replica's data plane alike: it stays with the one claimant
    /// whose derived Service (owned by its import) forwards to it, which is
    /// what kube-proxy routes, and with none when that does not single one
    /// out. Never by key order, which a tenant chooses by naming its
    /// namespace. Each such port is reported in `contested`.
    pub fn recorded_claims(&self) -> RecordedPorts {
        // Read from the derived Services only when needed (an unrecorded
        // import, a contested port): every import records its ports once
        // Strait has written it, and no port is contested unless forged.
        let forwarded = std::cell::OnceCell::new();
        let forwarded = || forwarded.get_or_init(|| self.forwarded_ports());
        let mut claims: Vec<(PortKey, u16)> = Vec::new();
        let mut unrecorded: BTreeSet<&ServiceKey> = BTreeSet::new();
        for (service, import) in &self.imports {
            if !import.ours() {
                continue;
            }
            match &import.head.recorded {
                Some(recorded) => claims.extend(recorded.iter().cloned()),
                None => {
                    unrecorded.insert(service);
                }
            }
        }
        if !unrecorded.is_empty() {
            claims.extend(
                forwarded()
                    .iter()
                    .filter(|(key, _)| unrecorded.contains(&key.service))
                    .map(|(key, port)| (key.clone(), *port)),
            );
        }
        let mut by_port: BTreeMap<u16, Vec<PortKey>> = BTreeMap::new();
        for (key, port) in claims {
            by_port.entry(port).or_default().push(key);
        }
        let mut recorded = RecordedPorts::default();
        for (port, claimants) in by_port {
            if let [only] = claimants.as_slice() {
                recorded.ports.insert(only.clone(), port);
                continue;
            }
            let mut forwarding = claimants
                .iter()
                .filter(|key| forwarded().get(*key) == Some(&port));
            let winner = match (forwarding.next(), forwarding.next()) {
                (Some(winner), None) => Some(winner.clone()),
                _ => None,
            };
            if let Some(winner) = &winner {
                recorded.ports.insert(winner.clone(), port);
            }
            recorded.contested.push(ContestedPort {
                port,
                claimants,
                winner,
            });
        }
        recorded
    }

    /// The `targetPort` of each port of every derived Service that Strait's
    /// ServiceImport of its service owns (by uid): the import ports
    /// kube-proxy forwards to.
    fn forwarded_ports(&self) -> BTreeMap<PortKey, u16> {
        let mut forwarded = BTreeMap::new();
        for (service, pod, derived) in self.all_derived() {
            let owned = self
                .imports
                .get(service)
                .filter(|import| import.ours())
                .and_then(ObservedObject::uid)
                .is_some_and(|uid| derived.owned_by("ServiceImport", &service.name, uid));
            if !owned {
                continue;
            }
            let ports = derived
                .raw
                .as_ref()
                .and_then(|raw| raw["spec"]["ports"].as_array());
            for port in ports.into_iter().flatten() {
                let protocol = port["protocol"]
                    .as_str()
                    .map_or(Ok(Protocol::Tcp), str::parse::<Protocol>);
                let number = port["port"].as_u64().and_then(|p| u16::try_from(p).ok());
                // A named targetPort is not Strait's: it is not an import port.
                let target = port["targetPort"]
                    .as_u64()
                    .and_then(|p| u16::try_from(p).ok());
                if let (Ok(protocol), Some(port), Some(target)) = (protocol, number, target) {
                    let key = PortKey {
                        service: service.clone(),
                        protocol,
                        port,
                        pod: pod.cloned(),
                    };
                    forwarded.insert(key, target);
                }
            }
        }
        forwarded
    }

    /// The ClusterIPs the API server allocated to the derived Service of
    /// `service`; empty until it has.
    pub fn derived_cluster_ips(&self, service: &ServiceKey) -> Vec<IpAddr> {
        self.derived_of(service)
            .map(cluster_ips)
            .unwrap_or_default()
    }

    /// The ClusterIPs of the per-pod derived Service of one remote pod.
    pub fn pod_cluster_ips(&self, service: &ServiceKey, pod: &PodRef) -> Vec<IpAddr> {
        self.pod_services
            .get(&(service.clone(), pod.clone()))
            .map(cluster_ips)
            .unwrap_or_default()
    }

    /// Every remote pod's ClusterIPs, as the per-pod derived Services hold
    /// them (pods whose Service has none yet are left out).
    pub fn pod_addresses(&self) -> BTreeMap<(ServiceKey, PodRef), Vec<IpAddr>> {
        self.pod_services
            .iter()
            .map(|(key, held)| (key.clone(), cluster_ips(held)))
            .filter(|(_, ips)| !ips.is_empty())
            .collect()
    }

    /// Adds the endpoints of the gateway Service's EndpointSlices.
    pub fn add_gateway_slice(&mut self, slice: &EndpointSlice) {
        for (endpoint, details) in slice.endpoints.parsed.with_details() {
            let gateway = GatewayEndpoint {
                address: endpoint.address,
                ready: endpoint.ready,
                serving: endpoint.serving,
                terminating: endpoint.terminating,
                node_name: details.and_then(|d| d.node_name.clone()),
                zone: details.and_then(|d| d.zone.clone()),
            };
            if !self
                .gateway_endpoints
                .iter()
                .any(|g| g.address == endpoint.address)
            {
                self.gateway_endpoints.push(gateway);
            }
        }
        self.gateway_endpoints.sort();
    }
}

/// The remote pod a per-pod derived Service's annotations name.
fn pod_of(raw: &Value) -> Option<PodRef> {
    let annotations = &raw["metadata"]["annotations"];
    let cluster = ClusterId::new(annotations[POD_CLUSTER_ANNOTATION].as_str()?).ok()?;
    let label = annotations[POD_ANNOTATION].as_str()?.to_owned();
    Some(PodRef { cluster, label })
}

/// A Service's ClusterIPs (none for `None` or before allocation).
fn cluster_ips(service: &ObservedObject) -> Vec<IpAddr> {
    service.head.cluster_ips.to_vec()
}

#[path = "observed_slots.rs"]
mod slots;
use slots::{Slot, remove_named};

#[cfg(test)]
#[path = "observed_tests.rs"]
mod tests;
