//! Planning again only the services a pass's last round wrote.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::{
    ImportPlan, PlanInputs, PodAddresses, RemotePods, plan_import, pods_within_quota, skipped_for,
};
use crate::model::{ServiceKey, ServiceType};

/// Plans `services` again as [`plan`] would from `inputs`, keeping the rest
/// of `plan` and its allocation: for a pass's later rounds, whose writes
/// changed only the services they wrote, with the import ports its first
/// round allocated (and recorded). A file setup's pod addresses are
/// allocated over every service, so with them the plan is made whole.
pub fn replan(plan: &mut ImportPlan, inputs: &PlanInputs<'_>, services: &BTreeSet<ServiceKey>) {
    if inputs.pod_ranges.is_some() {
        *plan = super::plan(inputs);
        return;
    }
    // The per-namespace pod quota, over the namespaces of `services` only.
    let mut pods = BTreeMap::new();
    let namespaces: BTreeSet<&str> = services.iter().map(|k| k.namespace.as_str()).collect();
    for namespace in namespaces {
        let of_namespace: BTreeMap<ServiceKey, RemotePods> = inputs
            .pods
            .range(ServiceKey::new(namespace, "")..)
            .take_while(|(key, _)| key.namespace == namespace)
            .map(|(key, remote)| (key.clone(), remote.clone()))
            .collect();
        pods.extend(pods_within_quota(&of_namespace, inputs.quota.pod_services));
    }
    let addresses = PodAddresses::default();
    for key in services {
        plan.skipped.remove(key);
        let position = plan
            .imports
            .binary_search_by(|planned| planned.key.cmp(key));
        let service = inputs
            .merged
            .services
            .get(key)
            .filter(|service| service.service_type != ServiceType::ExternalName);
        let planned = match service {
            None => None,
            Some(service) => match skipped_for(service, inputs.observed) {
                Some(why) => {
                    plan.skipped.insert(key.clone(), why);
                    None
                }
                None => Some(plan_import(
                    service,
                    &plan.allocation,
                    &pods,
                    &addresses,
                    inputs,
                )),
            },
        };
        match (position, planned) {
            (Ok(at), Some(planned)) => plan.imports[at] = Arc::new(planned),
            (Ok(at), None) => {
                plan.imports.remove(at);
            }
            (Err(at), Some(planned)) => plan.imports.insert(at, Arc::new(planned)),
            (Err(_), None) => {}
        }
    }
}
