//! A pass's first round planned reusing the last pass's plan: every
//! service whose own inputs are the very ones its kept import was planned
//! from keeps that import, and only the others are planned again. What a
//! service's import is made of (its merge, its source endpoints, its remote
//! pods, its import ports, the objects the cluster holds for it, whether
//! its families are refused or its takeover settling) is compared by
//! identity where it is shared (the merge and the sources are the same
//! `Arc` while unchanged) and by version or value elsewhere; what every
//! service reads (namespaces, gateway pods, other controllers' objects)
//! changing plans them all. The import ports are allocated over every
//! service each time, as [`plan`](super::plan) does: that is integer work,
//! and an import whose ports moved is planned again. Pure.

use std::collections::HashMap;
use std::sync::Arc;

use super::pods::RemotePods;
use super::sources::SourceBackends;
use super::{
    ImportPlan, PlanInputs, PlannedImport, addressed_pods, allocate_for, importable, plan_import,
};
use crate::discovery::observed::ObservedObject;
use crate::merge::MergedService;
use crate::model::{PortKey, ServiceKey};

/// The last pass's plan, each import with what it was planned from.
#[derive(Debug, Default)]
pub struct KeptPlan {
    /// What every service reads ([`Observed::shared_fingerprint`](crate::discovery::observed::Observed::shared_fingerprint)).
    shared: u64,
    imports: HashMap<ServiceKey, (ServiceInputs, Arc<PlannedImport>)>,
}

impl KeptPlan {
    /// The imports of `planned` whose inputs are still those of `made`: an
    /// import planned again later in the pass (or changed to hold back its
    /// `Ready`) is a different `Arc` and is not kept.
    pub fn of(made: MadePlan, planned: &ImportPlan) -> Self {
        let mut imports = made.imports;
        let final_imports: HashMap<&ServiceKey, &Arc<PlannedImport>> =
            planned.imports.iter().map(|p| (&p.key, p)).collect();
        imports.retain(|key, (_, import)| {
            final_imports
                .get(key)
                .is_some_and(|last| Arc::ptr_eq(last, import))
        });
        Self {
            shared: made.shared,
            imports,
        }
    }

    /// How many imports are kept.
    pub fn len(&self) -> usize {
        self.imports.len()
    }

    pub fn is_empty(&self) -> bool {
        self.imports.is_empty()
    }
}

/// A first round's plan with what each of its imports was planned from,
/// to be kept ([`KeptPlan::of`]) once the pass is over.
#[derive(Debug)]
pub struct MadePlan {
    shared: u64,
    imports: HashMap<ServiceKey, (ServiceInputs, Arc<PlannedImport>)>,
    /// How many imports were planned again (the rest were kept).
    pub planned: usize,
}

/// What one service's import is planned from.
#[derive(Debug)]
struct ServiceInputs {
    merged: Arc<MergedService>,
    sources: Option<Arc<[SourceBackends]>>,
    /// Its remote pods that get an address, and how many more it has
    /// (all the import reads of them).
    pods: Option<RemotePods>,
    ports: Vec<(PortKey, u16)>,
    over_quota: usize,
    refused: bool,
    settling: bool,
    held: Vec<ObservedObject>,
}

impl ServiceInputs {
    fn same_as(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.merged, &other.merged)
            && match (&self.sources, &other.sources) {
                (None, None) => true,
                (Some(a), Some(b)) => Arc::ptr_eq(a, b),
                _ => false,
            }
            && self.pods == other.pods
            && self.ports == other.ports
            && self.over_quota == other.over_quota
            && self.refused == other.refused
            && self.settling == other.settling
            && self.held.len() == other.held.len()
            && self
                .held
                .iter()
                .zip(&other.held)
                .all(|(a, b)| a.same_version(b))
    }
}

/// Plans as [`plan`](super::plan) does, keeping each import of `kept`
/// whose service's inputs did not change. `held` is what the cluster
/// holds for each service ([`Observed::by_service`](crate::discovery::observed::Observed::by_service)).
/// A file setup's pod addresses are allocated over every service, so with
/// them nothing is kept.
pub fn plan_reusing(
    inputs: &PlanInputs<'_>,
    kept: Option<KeptPlan>,
    held: &HashMap<ServiceKey, Vec<&ObservedObject>>,
) -> (ImportPlan, MadePlan) {
    let shared = inputs.observed.shared_fingerprint();
    let mut kept = kept
        .filter(|kept| kept.shared == shared && inputs.pod_ranges.is_none())
        .map(|kept| kept.imports)
        .unwrap_or_default();
    let (services, skipped) = importable(inputs.merged, inputs.observed);
    let (pods, addresses) = addressed_pods(&services, inputs);
    let allocation = allocate_for(&services, &pods, inputs);
    let mut ports: HashMap<&ServiceKey, Vec<(PortKey, u16)>> = HashMap::new();
    for (key, port) in &allocation.ports {
        ports
            .entry(&key.service)
            .or_default()
            .push((key.clone(), *port));
    }
    let mut over_quota: HashMap<&ServiceKey, usize> = HashMap::new();
    for key in &allocation.over_quota {
        *over_quota.entry(&key.service).or_default() += 1;
    }
    let mut made = MadePlan {
        shared,
        imports: HashMap::with_capacity(services.len()),
        planned: 0,
    };
    let mut imports = Vec::with_capacity(services.len());
    for service in services {
        let key = &service.key;
        let Some(merged) = inputs.merged.services.get(key) else {
            continue;
        };
        let now = ServiceInputs {
            merged: Arc::clone(merged),
            sources: inputs.sources.get_shared(key).cloned(),
            pods: pods.get(key).cloned(),
            ports: ports.remove(key).unwrap_or_default(),
            over_quota: over_quota.get(key).copied().unwrap_or_default(),
            refused: inputs.refused_families.contains(key),
            settling: inputs.settling.contains(key),
            held: held
                .get(key)
                .into_iter()
                .flatten()
                .map(|&object| object.clone())
                .collect(),
        };
        let import = match kept.remove(key) {
            Some((was, import)) if was.same_as(&now) => import,
            _ => {
                made.planned += 1;
                Arc::new(plan_import(service, &allocation, &pods, &addresses, inputs))
            }
        };
        imports.push(Arc::clone(&import));
        made.imports.insert(key.clone(), (now, import));
    }
    let plan = ImportPlan {
        imports,
        allocation,
        skipped,
        pod_addresses_exhausted: addresses.exhausted.len(),
    };
    (plan, made)
}

#[cfg(test)]
#[path = "reuse_tests.rs"]
mod tests;
