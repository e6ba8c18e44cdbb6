//! Which services a pass must render again. For each service whose objects
//! a pass found as desired (nothing to write), the reconciler keeps what
//! they were made from: its merge and the objects the cluster held for it
//! (both shared with the snapshot, compared by identity), its planned
//! import, its import ports, and whether it was skipped, refused or
//! settling; and, for all services, the digest of what they share
//! ([`Observed::shared_fingerprint`]). The next pass renders and diffs only
//! the services whose inputs differ, so one change costs that change
//! whatever the number of services held. Pure.
//!
//! Identity is safe to compare because a settled service keeps its inputs
//! alive: an address cannot be reused for another object while it is held
//! here. An object held anew (a write's result laid over the snapshot,
//! then the same object arriving by the watch) is the same when its uid
//! and resource version are.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use super::{ImportPlan, PlannedImport, Skipped};
use crate::discovery::observed::{Observed, ObservedObject};
use crate::merge::{MergedService, MergedSet};
use crate::model::{PortKey, ServiceKey};

/// The services a pass renders.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// Every service: the first pass, one after a shared input changed,
    /// and the periodic full pass.
    Every,
    /// Only these.
    Services(BTreeSet<ServiceKey>),
}

impl Scope {
    /// The services of a partial scope; `None` for every service.
    pub fn services(&self) -> Option<&BTreeSet<ServiceKey>> {
        match self {
            Scope::Every => None,
            Scope::Services(services) => Some(services),
        }
    }
}

/// One pass's inputs, indexed by service.
pub struct PassView<'a> {
    shared: u64,
    merged: &'a MergedSet,
    planned: HashMap<&'a ServiceKey, &'a PlannedImport>,
    skipped: &'a std::collections::BTreeMap<ServiceKey, Skipped>,
    ports: HashMap<&'a ServiceKey, Vec<(&'a PortKey, u16)>>,
    held: HashMap<ServiceKey, Vec<&'a ObservedObject>>,
    refused: &'a BTreeSet<ServiceKey>,
    settling: &'a BTreeSet<ServiceKey>,
}

impl<'a> PassView<'a> {
    /// `held` is `observed`'s objects by service ([`Observed::by_service`]),
    /// read once for the pass's plan and this view.
    pub fn new(
        plan: &'a ImportPlan,
        merged: &'a MergedSet,
        observed: &'a Observed,
        held: HashMap<ServiceKey, Vec<&'a ObservedObject>>,
        refused: &'a BTreeSet<ServiceKey>,
        settling: &'a BTreeSet<ServiceKey>,
    ) -> Self {
        let mut ports: HashMap<&ServiceKey, Vec<(&PortKey, u16)>> = HashMap::new();
        for (key, port) in &plan.allocation.ports {
            ports.entry(&key.service).or_default().push((key, *port));
        }
        Self {
            shared: observed.shared_fingerprint(),
            merged,
            planned: plan.imports.iter().map(|p| (&p.key, &**p)).collect(),
            skipped: &plan.skipped,
            ports,
            held,
            refused,
            settling,
        }
    }

    /// The objects held for the services of `scope`.
    pub fn held_in<'s>(
        &'s self,
        services: &'s BTreeSet<ServiceKey>,
    ) -> impl Iterator<Item = &'a ObservedObject> + 's {
        services
            .iter()
            .filter_map(|key| self.held.get(key))
            .flatten()
            .copied()
    }

    /// Every service this pass or `settled` knows of.
    fn keys<'s>(&'s self, settled: &'s Settled) -> BTreeSet<&'s ServiceKey> {
        self.planned
            .keys()
            .copied()
            .chain(self.skipped.keys())
            .chain(self.held.keys())
            .chain(settled.services.keys())
            .collect()
    }

    fn matches(&self, key: &ServiceKey, inputs: &ServiceInputs) -> bool {
        let merged = self.merged.services.get(key);
        let same_merge = match (&inputs.merged, merged) {
            (None, None) => true,
            (Some(was), Some(is)) => Arc::ptr_eq(was, is),
            _ => false,
        };
        let held = self.held.get(key).map(Vec::as_slice).unwrap_or_default();
        let same_objects = inputs.objects.len() == held.len()
            && inputs
                .objects
                .iter()
                .zip(held)
                .all(|(was, is)| was.same_version(is));
        let ports = self.ports.get(key).map(Vec::as_slice).unwrap_or_default();
        let same_ports = inputs.ports.len() == ports.len()
            && inputs
                .ports
                .iter()
                .zip(ports)
                .all(|((was_key, was), (is_key, is))| was == is && was_key == *is_key);
        same_merge
            && same_objects
            && same_ports
            && inputs.planned.as_ref() == self.planned.get(key).copied()
            && inputs.skipped == self.skipped.get(key).copied()
            && inputs.refused == self.refused.contains(key)
            && inputs.settling == self.settling.contains(key)
    }

    fn inputs_of(&self, key: &ServiceKey) -> ServiceInputs {
        ServiceInputs {
            merged: self.merged.services.get(key).cloned(),
            planned: self.planned.get(key).map(|p| (*p).clone()),
            skipped: self.skipped.get(key).copied(),
            ports: self
                .ports
                .get(key)
                .into_iter()
                .flatten()
                .map(|(key, port)| ((*key).clone(), *port))
                .collect(),
            refused: self.refused.contains(key),
            settling: self.settling.contains(key),
            objects: self
                .held
                .get(key)
                .into_iter()
                .flatten()
                .map(|&held| held.clone())
                .collect(),
        }
    }
}

/// What one settled service's objects were made from.
struct ServiceInputs {
    merged: Option<Arc<MergedService>>,
    planned: Option<PlannedImport>,
    skipped: Option<Skipped>,
    ports: Vec<(PortKey, u16)>,
    refused: bool,
    settling: bool,
    /// What the server returned for a write, which a pass lays over its
    /// snapshot, is the same as the object arriving by the watch: one
    /// object at one resource version.
    objects: Vec<ObservedObject>,
}

/// The services found as desired, with the inputs they were found so with.
#[derive(Default)]
pub struct Settled {
    shared: Option<u64>,
    services: HashMap<ServiceKey, ServiceInputs>,
}

impl Settled {
    /// The services `view` must render: every one when the shared inputs
    /// changed (or `every`), else those whose own inputs did.
    pub fn scope(&self, view: &PassView<'_>, every: bool) -> Scope {
        if every || self.shared != Some(view.shared) {
            return Scope::Every;
        }
        let dirty = view
            .keys(self)
            .into_iter()
            .filter(|key| {
                self.services
                    .get(*key)
                    .is_none_or(|inputs| !view.matches(key, inputs))
            })
            .cloned()
            .collect();
        Scope::Services(dirty)
    }

    /// Records the outcome of rendering `scope`: each service of it without
    /// a write in `unsettled` is settled with its inputs in `view`; the
    /// others must be rendered again.
    pub fn settle(&mut self, view: &PassView<'_>, scope: &Scope, unsettled: &BTreeSet<ServiceKey>) {
        let rendered: Vec<ServiceKey> = match scope {
            Scope::Every => {
                self.shared = Some(view.shared);
                view.keys(self).into_iter().cloned().collect()
            }
            Scope::Services(services) => services.iter().cloned().collect(),
        };
        for key in rendered {
            let known = view.planned.contains_key(&key)
                || view.skipped.contains_key(&key)
                || view.held.contains_key(&key);
            if known && !unsettled.contains(&key) {
                let inputs = view.inputs_of(&key);
                self.services.insert(key, inputs);
            } else {
                self.services.remove(&key);
            }
        }
    }

    /// How many services of `view` are not settled: the next pass renders
    /// them again.
    pub fn unsettled(&self, view: &PassView<'_>) -> usize {
        view.keys(self)
            .into_iter()
            .filter(|key| !self.services.contains_key(*key))
            .count()
    }
}
