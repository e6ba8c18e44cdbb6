//! One cluster's translation, as the hub keeps it: made whole from the
//! store's objects (through `translate_cluster`, as the file source does),
//! or, when only some services' objects changed since the last one, made
//! again for those services alone and spliced into the last one. A change
//! of one EndpointSlice then costs the objects of its own service, not of
//! its whole cluster.
//!
//! Only what the cluster set needs goes to the translation: every
//! ClusterProperty, ServiceExport and ServiceImport, the gateway Services,
//! and the Services and EndpointSlices of services exported by some cluster
//! (slices that an MCS implementation imported from another cluster are
//! left out, and a stale cluster's slices too).

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Arc;

use super::KubeOptions;
use super::client::{ClusterSource, Kind};
use super::store::{Changes, ClusterStore, ObjectKey, ServiceChanges, Stored};
use crate::diagnostics::Diagnostic;
use crate::discovery::export_validity::{Validity, export_validity};
use crate::discovery::objects::SourcedObject;
use crate::discovery::translate::{API_SERVER_SERVICE, infrastructure, translate_cluster};
use crate::model::{Cluster, InfrastructureAddresses, ServiceKey};

/// Exported service names by namespace.
pub(super) type Exported = BTreeMap<Arc<str>, BTreeSet<Arc<str>>>;

/// One cluster's translation, and what it was made from.
pub(super) struct Translation {
    /// The entry's revision and the set's exports revision it was made at.
    pub(super) revision: u64,
    pub(super) exports: u64,
    pub(super) cluster: Option<Cluster>,
    /// The cluster's findings, undecoded objects included.
    pub(super) findings: Vec<Diagnostic>,
    /// For the local cluster when export status is written.
    pub(super) validity: Option<BTreeMap<ServiceKey, Validity>>,
    /// Made for the changed services only (for the rebuild log).
    pub(super) partial: bool,
    /// The services a partial translation made again (the others are
    /// the translation before's); `None` for a whole one.
    pub(super) changed: Option<BTreeSet<ServiceKey>>,
}

/// What a cluster's translation is made from.
pub(super) struct Inputs<'a> {
    pub(super) source: &'a ClusterSource,
    pub(super) store: &'a ClusterStore,
    /// A stale cluster's EndpointSlices are left out.
    pub(super) stale: bool,
    pub(super) revision: u64,
    pub(super) exported: &'a Exported,
    pub(super) exports: u64,
    /// The services whose export came or went (in any cluster) at the
    /// exports revision `exports`, since the one before it.
    pub(super) exports_changed: &'a BTreeSet<ObjectKey>,
    pub(super) options: &'a KubeOptions,
}

impl Inputs<'_> {
    fn exported(&self, namespace: &str, service: Option<&str>) -> bool {
        service.is_some_and(|service| {
            self.exported
                .get(namespace)
                .is_some_and(|names| names.contains(service))
        })
    }

    /// Whether the set needs this object.
    fn wanted(&self, kind: Kind, key: &ObjectKey, stored: &Stored) -> bool {
        let exported_service = self.exported(&key.0, stored.service());
        match kind {
            Kind::Service => stored.gateway || exported_service,
            Kind::EndpointSlice => {
                let own_id = self.store.cluster_id();
                !self.stale
                    && exported_service
                    && stored
                        .source_cluster()
                        .is_none_or(|cluster| Some(cluster) == own_id)
            }
            Kind::ClusterProperty | Kind::ServiceExport | Kind::ServiceImport => true,
        }
    }

    /// The decoded objects the set needs among `candidates`, and the
    /// findings of those that did not decode.
    fn select<'s>(
        &self,
        candidates: impl IntoIterator<Item = (Kind, &'s ObjectKey, &'s Stored)>,
    ) -> (Vec<&'s SourcedObject>, Vec<Diagnostic>) {
        let mut objects = Vec::new();
        let mut undecoded = Vec::new();
        for (kind, key, stored) in candidates {
            if !self.wanted(kind, key, stored) {
                continue;
            }
            match &stored.item {
                Ok(object) => objects.push(object),
                Err(finding) => undecoded.push(Diagnostic::clone(finding)),
            }
        }
        (objects, undecoded)
    }

    fn label(&self) -> String {
        format!("cluster {} API", self.source)
    }
}

/// Translates a cluster: only its changed services when `changes` allows
/// (with those whose export came or went since `previous`), else whole.
pub(super) fn translate(
    inputs: &Inputs<'_>,
    previous: Option<&Translation>,
    changes: &Changes,
) -> Translation {
    // The local cluster's export validity is spliced like its services:
    // a partial translation needs the validity of the one before.
    let validity_needed = inputs.source.is_local() && inputs.options.local_exports;
    if let Some(previous) = previous
        && (!validity_needed || previous.validity.is_some())
        && let Some(changed) = services_changed(inputs, previous, changes)
        && let Some(translation) = translate_changed(inputs, previous, &changed)
    {
        return translation;
    }
    translate_whole(inputs, previous)
}

/// The services to translate again since `previous`: those whose objects
/// changed, and those whose export came or went since it was made. `None`
/// when the whole cluster must be: anything else changed (a relist, a
/// property, its state), or the exports moved on by more than one revision.
fn services_changed<'c>(
    inputs: &Inputs<'_>,
    previous: &Translation,
    changes: &'c Changes,
) -> Option<Cow<'c, ServiceChanges>> {
    let own = match changes {
        Changes::Services(changed) => Cow::Borrowed(changed),
        // Nothing of the store, and the cluster's state as it was: only
        // the exports moved.
        Changes::Nothing if previous.revision == inputs.revision => {
            Cow::Owned(ServiceChanges::default())
        }
        _ => return None,
    };
    if previous.exports == inputs.exports {
        return Some(own);
    }
    if previous.exports.checked_add(1) != Some(inputs.exports) {
        return None;
    }
    let mut changed = own.into_owned();
    changed
        .services
        .extend(inputs.exports_changed.iter().cloned());
    Some(Cow::Owned(changed))
}

/// Translates every object of the cluster; each service that translated
/// as before keeps its earlier allocation.
fn translate_whole(inputs: &Inputs<'_>, previous: Option<&Translation>) -> Translation {
    let (objects, undecoded) = inputs.select(inputs.store.objects());
    let label = inputs.label();
    let (mut cluster, cluster_findings) =
        translate_cluster(&label, &objects, &inputs.options.translate);
    if let Some(now) = cluster.as_mut() {
        now.infrastructure = store_infrastructure(inputs);
    }
    if let (Some(now), Some(before)) = (cluster.as_mut(), previous.and_then(|t| t.cluster.as_ref()))
    {
        now.share_unchanged(before);
    }
    // Objects that did not decode name their cluster too.
    let named = cluster.as_ref().map_or(label.as_str(), |c| c.id.as_str());
    let mut findings: Vec<Diagnostic> =
        undecoded.into_iter().map(|f| f.in_cluster(named)).collect();
    let validity = match &cluster {
        Some(cluster) if inputs.source.is_local() && inputs.options.local_exports => {
            Some(export_validity(
                &objects,
                cluster,
                &cluster_findings,
                &inputs.options.translate.gateway_namespace,
            ))
        }
        _ => None,
    };
    findings.extend(cluster_findings);
    Translation {
        revision: inputs.revision,
        exports: inputs.exports,
        cluster,
        findings,
        validity,
        partial: false,
        changed: None,
    }
}

/// Translates the changed services' objects (with the ClusterProperties
/// and gateway Services they are read against) and splices them into
/// `previous`: their services replace the earlier ones, and their findings
/// (each names its object) the earlier findings of the same objects.
/// `None` when the result cannot be spliced (the cluster's id no longer
/// reads the same): the caller translates the whole cluster.
fn translate_changed(
    inputs: &Inputs<'_>,
    previous: &Translation,
    changed: &ServiceChanges,
) -> Option<Translation> {
    let before = previous.cluster.as_ref()?;
    let store = inputs.store;
    let mut chosen: Vec<(Kind, &ObjectKey, &Stored)> = Vec::new();
    for kind in [Kind::ClusterProperty, Kind::Service] {
        chosen.extend(
            store
                .objects_of(kind)
                .filter(|(_, stored)| kind == Kind::ClusterProperty || stored.gateway)
                .map(|(key, stored)| (kind, key, stored)),
        );
    }
    // The objects whose findings this translation replaces, by the name
    // findings give them.
    let mut names: HashSet<String> = HashSet::new();
    for key in &changed.services {
        for kind in [Kind::Service, Kind::ServiceExport, Kind::ServiceImport] {
            names.insert(display(kind, key));
            // A gateway Service is chosen above already: twice would read
            // as a duplicate object.
            if let Some((key, stored)) = store.get_key_value(kind, key)
                && !(kind == Kind::Service && stored.gateway)
            {
                chosen.push((kind, key, stored));
            }
        }
        for (key, stored) in store.slices_of(&key.0, &key.1) {
            names.insert(display(Kind::EndpointSlice, key));
            chosen.push((Kind::EndpointSlice, key, stored));
        }
    }
    for key in &changed.slices {
        names.insert(display(Kind::EndpointSlice, key));
    }
    let (objects, undecoded) = inputs.select(chosen);
    let label = inputs.label();
    let (cluster, cluster_findings) =
        translate_cluster(&label, &objects, &inputs.options.translate);
    let mut translated = cluster.filter(|c| c.id == before.id && c.network == before.network)?;
    // A service's validity reads its own Service, export, translation and
    // the findings on them: all among the objects chosen here.
    let validity = previous.validity.as_ref().map(|earlier| {
        let mut validity = earlier.clone();
        for (namespace, name) in &changed.services {
            validity.remove(&ServiceKey::new(&**namespace, &**name));
        }
        validity.extend(export_validity(
            &objects,
            &translated,
            &cluster_findings,
            &inputs.options.translate.gateway_namespace,
        ));
        validity
    });

    let mut cluster = before.clone();
    cluster.infrastructure = store_infrastructure(inputs);
    for (namespace, name) in &changed.services {
        let key = ServiceKey::new(&**namespace, &**name);
        match translated.imports.remove(&key) {
            Some(addresses) => cluster.imports.insert(key.clone(), addresses),
            None => cluster.imports.remove(&key),
        };
        match translated.services.remove(&key) {
            Some(service) => {
                let unchanged = cluster
                    .services
                    .get(&key)
                    .filter(|earlier| **earlier == service);
                if unchanged.is_none() {
                    cluster.services.insert(key, service);
                }
            }
            None => {
                cluster.services.remove(&key);
            }
        }
    }
    let own = |finding: &Diagnostic| {
        finding
            .object
            .as_ref()
            .is_some_and(|object| names.contains(object))
    };
    let mut findings: Vec<Diagnostic> = previous
        .findings
        .iter()
        .filter(|f| !own(f))
        .cloned()
        .collect();
    let named = cluster.id.as_str();
    findings.extend(
        undecoded
            .into_iter()
            .map(|f| f.in_cluster(named))
            .chain(cluster_findings)
            .filter(own),
    );
    Some(Translation {
        revision: inputs.revision,
        exports: inputs.exports,
        cluster: Some(cluster),
        findings,
        validity,
        partial: true,
        changed: Some(
            changed
                .services
                .iter()
                .map(|(namespace, name)| ServiceKey::new(&**namespace, &**name))
                .collect(),
        ),
    })
}

/// The cluster's infrastructure addresses, read from every Service the
/// store holds and the gateway namespace's slices: the translation is
/// given only exported Services, but no Service's cluster IP may be dialled.
fn store_infrastructure(inputs: &Inputs<'_>) -> InfrastructureAddresses {
    let namespace = inputs.options.translate.gateway_namespace.as_str();
    let store = inputs.store;
    let objects: Vec<&SourcedObject> = store
        .objects_of(Kind::Service)
        .chain(
            store
                .objects_of(Kind::EndpointSlice)
                .filter(|(key, _)| &*key.0 == namespace || &*key.0 == API_SERVER_SERVICE.0),
        )
        .filter_map(|(_, stored)| stored.item.as_ref().ok())
        .collect();
    infrastructure(objects.iter().copied(), namespace)
}

/// An object's name as findings give it: `Kind namespace/name`.
fn display(kind: Kind, (namespace, name): &ObjectKey) -> String {
    format!("{} {namespace}/{name}", kind.name())
}

#[cfg(test)]
#[path = "translation_tests.rs"]
mod tests;
