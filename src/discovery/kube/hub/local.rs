//! The hub's view of the local cluster's own import objects: which of its
//! events are only the echoes of Strait's writes (they publish without
//! rebuilding the set), and the observed view the import reconciler and the
//! import listeners read, followed one object's change at a time (read
//! whole again only after a relist, a change near the gateway Services or
//! one [`Observed::replace`] cannot follow).

use std::collections::HashSet;
use std::sync::Arc;

use super::Hub;
use crate::discovery::kube::LocalImports;
use crate::discovery::kube::client::{ClusterSource, Kind};
use crate::discovery::kube::report::ClusterReport;
use crate::discovery::kube::store::{ObjectKey, StoreEvent};
use crate::discovery::objects::KubeObject;
use crate::discovery::observed::{Observed, ObservedObject};

impl Hub {
    /// Whether `report` is a change of one of Strait's own import objects
    /// in the local cluster (a derived Service, not exported, or a slice
    /// Strait manages), before and after: those never feed the cluster
    /// set, so their changes (mostly the echoes of Strait's own writes)
    /// publish a snapshot without rebuilding the set.
    pub(super) fn only_import_object(
        &self,
        source: &ClusterSource,
        report: &ClusterReport,
    ) -> bool {
        let ClusterReport::Event(kind, event) = report else {
            return false;
        };
        let Some(entry) = self.clusters.get(source) else {
            return false;
        };
        if !source.is_local() || !matches!(kind, Kind::Service | Kind::EndpointSlice) {
            return false;
        }
        let strait_owned =
            |key: &crate::discovery::kube::store::ObjectKey,
             stored: &crate::discovery::kube::store::Stored| {
                let labelled = stored.observed().is_some_and(ObservedObject::ours);
                let exported = *kind == Kind::Service
                    && self
                        .exported
                        .get(&key.0)
                        .is_some_and(|names| names.contains(&key.1));
                labelled && !exported && !stored.gateway
            };
        let held = |key: &crate::discovery::kube::store::ObjectKey| {
            entry
                .store
                .get_key_value(*kind, key)
                .map(|(key, stored)| strait_owned(key, stored))
        };
        match &**event {
            StoreEvent::Apply(key, new) => strait_owned(key, new) && held(key).unwrap_or(true),
            StoreEvent::Delete(key) => held(key).unwrap_or(false),
            StoreEvent::Init | StoreEvent::InitApply(..) | StoreEvent::InitDone => false,
        }
    }

    /// How `report`, about to be applied, changes the local observed view:
    /// read before the store applies it, so the object it replaces is known.
    pub(super) fn view_change(&self, source: &ClusterSource, report: &ClusterReport) -> ViewChange {
        let Some(entry) = self.clusters.get(source) else {
            return ViewChange::Nothing;
        };
        if !source.is_local() || self.local_imports.is_none() {
            return ViewChange::Nothing;
        }
        // A kind no longer watched drops its objects: read whole.
        let ClusterReport::Event(kind, event) = report else {
            return ViewChange::Whole;
        };
        if !matches!(
            kind,
            Kind::Service | Kind::EndpointSlice | Kind::ServiceImport
        ) {
            return ViewChange::Nothing;
        }
        let key: &ObjectKey = match &**event {
            StoreEvent::Apply(key, _) | StoreEvent::Delete(key) => key,
            StoreEvent::Init | StoreEvent::InitApply(..) | StoreEvent::InitDone => {
                return ViewChange::Whole;
            }
        };
        let old = entry
            .store
            .get_key_value(*kind, key)
            .map(|(_, stored)| stored);
        let new = match &**event {
            StoreEvent::Apply(_, new) => Some(new),
            _ => None,
        };
        // The gateway Services, and the slices of the gateway namespace
        // (theirs among them), make the gateway endpoints: read whole.
        let near_gateway = [old, new]
            .into_iter()
            .flatten()
            .any(|stored| stored.gateway)
            || (*kind == Kind::EndpointSlice
                && *key.0 == *self.options.translate.gateway_namespace);
        if near_gateway {
            return ViewChange::Whole;
        }
        ViewChange::Object {
            old: old.and_then(|stored| stored.observed().cloned()),
            new: new.and_then(|stored| stored.observed().cloned()),
        }
    }

    /// Follows `change`, just applied to the local store, in the observed
    /// view; a view that cannot follow it is dropped, to be read whole.
    pub(super) fn follow_view(&mut self, change: ViewChange) {
        let Some(entry) = self.clusters.get(&ClusterSource::Local) else {
            return;
        };
        let at = (entry.generation, entry.store.events());
        let Some((read_at, held)) = &mut self.local_imports else {
            return;
        };
        let followed = match change {
            ViewChange::Nothing => true,
            ViewChange::Whole => false,
            ViewChange::Object { old, new } => {
                old == new || Arc::make_mut(held).observed.replace(old.as_ref(), new)
            }
        };
        if followed {
            *read_at = at;
        } else {
            self.local_imports = None;
        }
    }

    /// [`Hub::local_imports`], read again only when the local cluster's
    /// objects changed.
    pub(super) fn cached_local_imports(&mut self) -> Option<Arc<LocalImports>> {
        let entry = self.clusters.get(&ClusterSource::Local)?;
        let at = (entry.generation, entry.store.events());
        if let Some((read_at, held)) = &self.local_imports
            && *read_at == at
            && entry.versions.get(Kind::ServiceImport.name()) == Some(&held.api_version)
        {
            return Some(held.clone());
        }
        let read = self.local_imports()?;
        self.local_imports = Some((at, read.clone()));
        Some(read)
    }

    /// What the local cluster holds for its imports, for the import
    /// reconciler, the import listeners and `strait imports --kube`; `None`
    /// until the local server's ServiceImport version is known.
    fn local_imports(&self) -> Option<Arc<LocalImports>> {
        let entry = self.clusters.get(&ClusterSource::Local)?;
        let api_version = entry.versions.get(Kind::ServiceImport.name())?.clone();
        let mut observed = Observed::default();
        let mut gateways: HashSet<(&str, &str)> = HashSet::new();
        for (kind, key, stored) in entry.store.objects() {
            if let Some(held) = stored.observed() {
                observed.insert(held.clone());
            }
            // The label counts only in the gateway namespace: a tenant's
            // labelled Service must not add its pods to derived slices.
            if kind == Kind::Service
                && stored.gateway
                && *key.0 == *self.options.translate.gateway_namespace
            {
                gateways.insert((&*key.0, &*key.1));
            }
        }
        for (kind, key, stored) in entry.store.objects() {
            let gateway_slice = kind == Kind::EndpointSlice
                && stored
                    .service()
                    .is_some_and(|service| gateways.contains(&(&*key.0, service)));
            if let (true, Ok(sourced)) = (gateway_slice, stored.item.as_ref())
                && let KubeObject::EndpointSlice(slice) = &sourced.object
            {
                observed.add_gateway_slice(slice);
            }
        }
        Some(Arc::new(LocalImports {
            api_version,
            observed,
        }))
    }
}

/// How one event of the local cluster changes its observed view.
pub(super) enum ViewChange {
    /// Not at all (another cluster, another kind, no view yet).
    Nothing,
    /// One object replaced: `None` where absent before or after.
    Object {
        old: Option<ObservedObject>,
        new: Option<ObservedObject>,
    },
    /// Only reading every object again tells.
    Whole,
}
