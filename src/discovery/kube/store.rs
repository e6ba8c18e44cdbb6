//! One cluster's current objects, by kind, as its watchers last reported
//! them, and whether each kind is synced (listed, with its watch running).
//! A relist is buffered and swapped in whole when it completes, so a
//! cluster never shows half a list. Objects arrive already decoded into
//! [`KubeObject`]s, or as the finding that says why they could not be.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::client::Kind;
pub(super) use super::stored::{ObjectKey, Stored};
use crate::discovery::objects::KubeObject;
use crate::model::names::{ALT_CLUSTER_ID_PROPERTY, CLUSTER_ID_PROPERTY};

/// One change reported by a kind's watcher.
#[derive(Debug)]
pub(super) enum StoreEvent {
    /// A (re)list starts: the objects that follow replace the kind's objects.
    Init,
    InitApply(ObjectKey, Stored),
    InitDone,
    Apply(ObjectKey, Stored),
    Delete(ObjectKey),
}

#[derive(Debug, Default)]
struct KindStore {
    objects: BTreeMap<ObjectKey, Stored>,
    /// The list in progress, swapped in at `InitDone`.
    listing: Option<BTreeMap<ObjectKey, Stored>>,
    synced: bool,
}

/// What changed in a store since the hub last took its changes: what a
/// translation of the cluster must redo.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(super) enum Changes {
    #[default]
    Nothing,
    /// Only the Services, EndpointSlices, ServiceExports and
    /// ServiceImports of these services (none of them a gateway Service).
    Services(ServiceChanges),
    /// Anything else: a relist, a property, a gateway Service.
    All,
}

/// The services whose objects changed, and every EndpointSlice written or
/// deleted (its findings name it, whichever service it belongs to now).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(super) struct ServiceChanges {
    /// By namespace and Service name.
    pub(super) services: BTreeSet<ObjectKey>,
    /// By namespace and EndpointSlice name.
    pub(super) slices: BTreeSet<ObjectKey>,
}

impl Changes {
    fn all(&mut self) {
        *self = Changes::All;
    }

    fn service(&mut self, namespace: &str, service: Option<&str>, slice: Option<&str>) {
        let changes = match self {
            Changes::All => return,
            Changes::Nothing => {
                *self = Changes::Services(ServiceChanges::default());
                let Changes::Services(changes) = self else {
                    return;
                };
                changes
            }
            Changes::Services(changes) => changes,
        };
        if let Some(service) = service {
            changes.services.insert((namespace.into(), service.into()));
        }
        if let Some(slice) = slice {
            changes.slices.insert((namespace.into(), slice.into()));
        }
    }
}

/// The objects of one cluster.
#[derive(Debug, Default)]
pub(super) struct ClusterStore {
    kinds: BTreeMap<Kind, KindStore>,
    /// The kinds being watched; `None` until the server's APIs are known.
    watched: Option<BTreeSet<Kind>>,
    /// EndpointSlice names by namespace and the Service they belong to.
    slices: BTreeMap<ObjectKey, SliceNames>,
    changes: Changes,
    /// Counts the events applied and the kinds dropped: an object may
    /// change (a status, a resource version) without changing what the
    /// cluster set reads of it, and readers of the objects themselves
    /// need to know.
    events: u64,
}

impl ClusterStore {
    /// Sets the kinds the server offers. Kinds no longer offered lose their
    /// objects; they have nothing to list, so they count as synced.
    pub(super) fn set_watched(&mut self, watched: BTreeSet<Kind>) -> bool {
        self.events += 1;
        let mut changed = false;
        for kind in Kind::ALL {
            if !watched.contains(&kind)
                && let Some(store) = self.kinds.remove(&kind)
            {
                changed |= !store.objects.is_empty();
                if kind == Kind::EndpointSlice {
                    self.slices.clear();
                }
            }
        }
        self.watched = Some(watched);
        if changed {
            self.changes.all();
        }
        changed
    }

    /// What changed since the last call.
    pub(super) fn take_changes(&mut self) -> Changes {
        std::mem::take(&mut self.changes)
    }

    /// Marks everything changed: what the translation reads changed outside
    /// the objects (the cluster's sync state).
    pub(super) fn all_changed(&mut self) {
        self.changes.all();
    }

    /// Increases whenever an object may have changed, whether or not the
    /// cluster set reads the change.
    pub(super) fn events(&self) -> u64 {
        self.events
    }

    /// The EndpointSlices of one Service, by name.
    pub(super) fn slices_of(&self, namespace: &str, service: &str) -> Vec<(&ObjectKey, &Stored)> {
        let (Some(((namespace, _), names)), Some(store)) = (
            self.slices
                .get_key_value(&(namespace.into(), service.into())),
            self.kinds.get(&Kind::EndpointSlice),
        ) else {
            return Vec::new();
        };
        names
            .iter()
            .filter_map(|name| {
                store
                    .objects
                    .get_key_value(&(Arc::clone(namespace), Arc::clone(name)))
            })
            .collect()
    }

    /// One object, by kind and key.
    pub(super) fn get_key_value(
        &self,
        kind: Kind,
        key: &ObjectKey,
    ) -> Option<(&ObjectKey, &Stored)> {
        self.kinds.get(&kind)?.objects.get_key_value(key)
    }

    /// Applies one event; true when the current objects changed.
    pub(super) fn apply(&mut self, kind: Kind, event: StoreEvent) -> bool {
        self.events += 1;
        let store = self.kinds.entry(kind).or_default();
        match event {
            StoreEvent::Init => {
                store.listing = Some(BTreeMap::new());
                false
            }
            StoreEvent::InitApply(key, object) => {
                store.listing.get_or_insert_default().insert(key, object);
                false
            }
            StoreEvent::InitDone => {
                store.synced = true;
                let listed = store.listing.take().unwrap_or_default();
                // A relist that found exactly what was there changes nothing.
                let changed = !same_objects(&store.objects, &listed);
                // A list arrives in key order, which leaves a map's nodes
                // about half full; built again from its sorted entries they
                // are full (a large cluster's EndpointSlices are most of
                // what a gateway holds).
                store.objects = listed.into_iter().collect();
                // Even when nothing changed: the index holds the names of
                // the listed keys, not of those they replaced.
                if kind == Kind::EndpointSlice {
                    self.slices = slice_index(&store.objects);
                }
                if changed {
                    self.changes.all();
                }
                changed
            }
            StoreEvent::Apply(key, object) => {
                // A write to a ServiceExport's status (Strait's own, when it
                // writes export status) leaves the cluster set as it was.
                let changed = store
                    .objects
                    .get(&key)
                    .is_none_or(|old| !same_content(old, &object));
                let new = Belongs::of(&object);
                // A change is removed first: an insert over an equal key
                // keeps the old key, and the slice index is about to hold
                // this one. Otherwise the index keeps holding the old one.
                let old = if changed {
                    store.objects.remove(&key)
                } else {
                    None
                };
                store.objects.insert(key.clone(), object);
                if changed {
                    self.note_change(kind, &key, old.as_ref().map(Belongs::of), Some(new));
                }
                changed
            }
            StoreEvent::Delete(key) => {
                let old = store.objects.remove(&key);
                let changed = old.is_some();
                if changed {
                    self.note_change(kind, &key, old.as_ref().map(Belongs::of), None);
                }
                changed
            }
        }
    }

    /// Records what one object's change means for the translation, and keeps
    /// the slice index current.
    fn note_change(
        &mut self,
        kind: Kind,
        key: &ObjectKey,
        old: Option<Belongs>,
        new: Option<Belongs>,
    ) {
        let namespace = &*key.0;
        let gateway =
            old.as_ref().is_some_and(|o| o.gateway) || new.as_ref().is_some_and(|n| n.gateway);
        match kind {
            Kind::EndpointSlice => {
                let services = [&old, &new].map(|o| o.as_ref().and_then(|o| o.service.as_deref()));
                if let Some(service) = services[0] {
                    let index_key = (Arc::clone(&key.0), service.into());
                    if let Some(names) = self.slices.get_mut(&index_key) {
                        names.remove(&key.1);
                        if names.is_empty() {
                            self.slices.remove(&index_key);
                        }
                    }
                }
                if let Some(service) = services[1] {
                    self.slices
                        .entry((Arc::clone(&key.0), service.into()))
                        .or_default()
                        .insert(&key.1);
                }
                for service in services.into_iter().flatten() {
                    self.changes.service(namespace, Some(service), None);
                }
                self.changes.service(namespace, None, Some(&key.1));
            }
            // An import's ClusterSetIPs are its service's alone: a
            // ServiceImport changed is that service changed.
            Kind::Service | Kind::ServiceExport | Kind::ServiceImport if !gateway => {
                self.changes.service(namespace, Some(&key.1), None);
            }
            _ => self.changes.all(),
        }
    }

    /// A kind's watcher failed (`None`: the whole API): its list in
    /// progress is dropped, its objects stay, it is no longer synced.
    pub(super) fn failed(&mut self, kind: Option<Kind>) {
        for (each, store) in &mut self.kinds {
            if kind.is_none_or(|kind| kind == *each) {
                store.listing = None;
                store.synced = false;
            }
        }
        if kind.is_none() {
            self.watched = None;
        }
    }

    /// Every watched kind is synced.
    pub(super) fn synced(&self) -> bool {
        self.watched.as_ref().is_some_and(|watched| {
            watched
                .iter()
                .all(|kind| self.kinds.get(kind).is_some_and(|store| store.synced))
        })
    }

    /// Every object held, kind by kind.
    pub(super) fn objects(&self) -> impl Iterator<Item = (Kind, &ObjectKey, &Stored)> {
        self.kinds.iter().flat_map(|(kind, store)| {
            store
                .objects
                .iter()
                .map(move |(key, object)| (*kind, key, object))
        })
    }

    /// The objects held of one kind.
    pub(super) fn objects_of(&self, kind: Kind) -> impl Iterator<Item = (&ObjectKey, &Stored)> {
        self.kinds
            .get(&kind)
            .into_iter()
            .flat_map(|store| store.objects.iter())
    }

    /// How many objects are held, by kind name.
    pub(super) fn counts(&self) -> BTreeMap<String, usize> {
        self.kinds
            .iter()
            .map(|(kind, store)| (kind.name().to_owned(), store.objects.len()))
            .collect()
    }

    /// The value of the `cluster.clusterset.k8s.io` ClusterProperty, else
    /// of `id.k8s.io`, if held.
    pub(super) fn cluster_id(&self) -> Option<&str> {
        let store = self.kinds.get(&Kind::ClusterProperty)?;
        // A few properties at most: a walk, rather than two allocations
        // for a key on every call (one per slice in a translation).
        let property = |wanted: &str| {
            let (_, stored) = store
                .objects
                .iter()
                .find(|((namespace, name), _)| namespace.is_empty() && &**name == wanted)?;
            match &stored.item.as_ref().ok()?.object {
                KubeObject::ClusterProperty(property) => Some(property.spec.value.as_str()),
                _ => None,
            }
        };
        property(CLUSTER_ID_PROPERTY).or_else(|| property(ALT_CLUSTER_ID_PROPERTY))
    }
}

/// What service an object belongs to, and whether it is a gateway Service.
struct Belongs {
    service: Option<String>,
    gateway: bool,
}

impl Belongs {
    fn of(stored: &Stored) -> Self {
        Self {
            service: stored.service().map(str::to_owned),
            gateway: stored.gateway,
        }
    }
}

/// EndpointSlice names by namespace and Service, for a kind's objects.
fn slice_index(objects: &BTreeMap<ObjectKey, Stored>) -> BTreeMap<ObjectKey, SliceNames> {
    let mut index: BTreeMap<ObjectKey, SliceNames> = BTreeMap::new();
    for ((namespace, name), stored) in objects {
        if let Some(service) = stored.service() {
            index
                .entry((Arc::clone(namespace), service.into()))
                .or_default()
                .insert(name);
        }
    }
    index
}

/// The names of one Service's EndpointSlices, sorted: a few per Service,
/// for tens of thousands of Services, so a sorted list rather than a set
/// (whose first node alone is a few hundred bytes).
#[derive(Debug, Default)]
struct SliceNames(Vec<Arc<str>>);

impl SliceNames {
    /// Holds `name`, the allocation its store key holds.
    fn insert(&mut self, name: &Arc<str>) {
        if let Err(at) = self.0.binary_search(name) {
            self.0.insert(at, Arc::clone(name));
        }
    }

    fn remove(&mut self, name: &Arc<str>) {
        if let Ok(at) = self.0.binary_search(name) {
            self.0.remove(at);
        }
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn iter(&self) -> impl Iterator<Item = &Arc<str>> {
        self.0.iter()
    }
}

/// Whether two versions of an object mean the same to the cluster set:
/// equal, apart from the `resourceVersion` every write changes in a
/// ServiceExport, whose status is not decoded (`managedFields` were dropped
/// on arrival).
fn same_content(a: &Stored, b: &Stored) -> bool {
    match (&a.item, &b.item) {
        (Ok(x), Ok(y)) => match (&x.object, &y.object) {
            (KubeObject::ServiceExport(x), KubeObject::ServiceExport(y)) => {
                let bare = |export: &crate::discovery::objects::ServiceExport| {
                    let mut export = export.clone();
                    export.metadata.resource_version = None;
                    export
                };
                bare(x) == bare(y)
            }
            // Likewise a write to a ServiceImport's status (Strait's own,
            // as the import reconciler): what the set reads of an import
            // (its spec and metadata) is as it was. The reconciler still
            // sees the new object, which the store keeps.
            (KubeObject::ServiceImport(x), KubeObject::ServiceImport(y)) => {
                let bare = |import: &crate::discovery::objects::ServiceImport| {
                    let mut import = import.clone();
                    import.metadata.resource_version = None;
                    import
                };
                bare(x) == bare(y)
            }
            (x, y) => x == y,
        },
        (Err(x), Err(y)) => x == y,
        _ => false,
    }
}

fn same_objects(a: &BTreeMap<ObjectKey, Stored>, b: &BTreeMap<ObjectKey, Stored>) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|((ka, va), (kb, vb))| {
            ka == kb
                && match (&va.item, &vb.item) {
                    (Ok(x), Ok(y)) => x.object == y.object,
                    (Err(x), Err(y)) => x == y,
                    _ => false,
                }
        })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use kube::core::ApiResource;

    use super::super::arrived::Arrived;
    use super::super::stored::decode;
    use super::*;
    use crate::diagnostics::Origin;

    fn property(name: &str, value: &str) -> Arrived {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "resourceVersion": "1"},
            "spec": {"value": value},
        }))
        .expect("object arrives")
    }

    fn resource() -> ApiResource {
        ApiResource {
            group: "about.k8s.io".into(),
            version: "v1alpha1".into(),
            api_version: "about.k8s.io/v1alpha1".into(),
            kind: "ClusterProperty".into(),
            plural: "clusterproperties".into(),
        }
    }

    #[test]
    fn a_relist_replaces_the_kind_only_when_done() {
        let origin = Arc::new(Origin::file("cluster t API"));
        let mut store = ClusterStore::default();
        store.set_watched([Kind::ClusterProperty].into());
        let (key, object) = decode(
            &resource(),
            &property(CLUSTER_ID_PROPERTY, "c1"),
            &origin,
            false,
        );
        store.apply(Kind::ClusterProperty, StoreEvent::Init);
        store.apply(Kind::ClusterProperty, StoreEvent::InitApply(key, object));
        assert_eq!(store.cluster_id(), None, "not before InitDone");
        assert!(!store.synced());
        assert!(store.apply(Kind::ClusterProperty, StoreEvent::InitDone));
        assert_eq!(store.cluster_id(), Some("c1"));
        assert!(store.synced());

        store.failed(Some(Kind::ClusterProperty));
        assert!(!store.synced());
        assert_eq!(store.cluster_id(), Some("c1"), "objects outlive a failure");
        store.apply(Kind::ClusterProperty, StoreEvent::Init);
        assert!(store.apply(Kind::ClusterProperty, StoreEvent::InitDone));
        assert_eq!(store.cluster_id(), None, "an empty relist empties the kind");
    }

    #[test]
    fn a_status_write_changes_the_conditions_not_the_set() {
        let resource = ApiResource {
            group: "multicluster.x-k8s.io".into(),
            version: "v1beta1".into(),
            api_version: "multicluster.x-k8s.io/v1beta1".into(),
            kind: "ServiceExport".into(),
            plural: "serviceexports".into(),
        };
        let export = |version: &str, spec: serde_json::Value, conditions: serde_json::Value| {
            let object: Arrived = serde_json::from_value(serde_json::json!({
                "metadata": {"name": "cart", "namespace": "shop", "resourceVersion": version,
                    "generation": 1},
                "spec": spec,
                "status": {"conditions": conditions},
            }))
            .expect("object arrives");
            decode(
                &resource,
                &object,
                &Arc::new(Origin::file("cluster t API")),
                true,
            )
        };
        let condition = serde_json::json!({"type": "Valid", "status": "True", "reason": "Valid",
            "message": "", "lastTransitionTime": "2025-01-01T00:00:00Z"});
        let mut store = ClusterStore::default();
        store.set_watched([Kind::ServiceExport].into());
        let (key, first) = export("1", serde_json::json!({}), serde_json::json!([]));
        assert!(store.apply(Kind::ServiceExport, StoreEvent::Apply(key, first)));
        let (key, written) = export(
            "2",
            serde_json::json!({}),
            serde_json::json!([condition.clone()]),
        );
        assert!(
            !store.apply(Kind::ServiceExport, StoreEvent::Apply(key, written)),
            "a status write leaves the cluster set as it was"
        );
        let held: Vec<&Stored> = store.objects().map(|(_, _, stored)| stored).collect();
        assert_eq!(held.len(), 1);
        assert_eq!(held[0].conditions().len(), 1);
        assert_eq!(held[0].conditions()[0], condition);
        let (key, relabelled) = export(
            "3",
            serde_json::json!({"exportedLabels": {"tier": "web"}}),
            serde_json::json!([condition]),
        );
        assert!(store.apply(Kind::ServiceExport, StoreEvent::Apply(key, relabelled)));

        let remote: Arrived = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "cart", "namespace": "shop", "resourceVersion": "4"},
            "status": {"conditions": [condition]},
        }))
        .expect("object arrives");
        let (_, remote) = decode(
            &resource,
            &remote,
            &Arc::new(Origin::file("cluster r API")),
            false,
        );
        assert!(
            remote.conditions().is_empty(),
            "a remote export's status is never written, so not kept"
        );
    }

    #[test]
    fn an_object_of_the_wrong_shape_is_a_finding() {
        let object: Arrived = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "x"},
            "spec": {"value": 7},
        }))
        .expect("object arrives");
        let (_, stored) = decode(
            &resource(),
            &object,
            &Arc::new(Origin::file("cluster t API")),
            false,
        );
        let Err(diagnostic) = stored.item else {
            panic!("a number is not a property value");
        };
        assert_eq!(diagnostic.field.as_deref(), Some("spec.value"));
        assert_eq!(diagnostic.object.as_deref(), Some("ClusterProperty x"));
    }
}
