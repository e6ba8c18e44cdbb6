//! `strait imports`: the objects the import reconciler would write for one
//! cluster (ServiceImports, derived Services, their EndpointSlices), from
//! the same pure plan, so they can be reviewed before the controller is
//! turned on; from files, the import ports a file-mode gateway listens on.

use std::io::Write;

use clap::ValueEnum;
use k8s_openapi::jiff::Timestamp;

use crate::discovery::objects::{CRD_VERSIONS, MCS_GROUP};
use crate::discovery::observed::Observed;
use crate::imports::render::{Owners, as_list, desired_objects};
use crate::imports::{PlanInputs, plan, remote_pods, source_backends};
use crate::model::ClusterId;
use crate::routing::RouteTable;

use super::load::{SourceArgs, Strictness, load_as};
use super::{Refused, emit};

/// How the objects are printed.
#[derive(Debug, Clone, Copy, ValueEnum, Default)]
pub enum ObjectsOutput {
    /// A multi-document YAML stream.
    #[default]
    Yaml,
    /// One `v1` `List`, as `kubectl get -o json` prints it.
    Json,
}

pub(super) fn run(
    source: &SourceArgs,
    cluster: Option<&str>,
    output: ObjectsOutput,
    out: &mut dyn Write,
) -> Result<(), Refused> {
    let loaded = load_as(source, Strictness::LeaveOut)?;
    for warning in &loaded.warnings {
        eprintln!("{warning}");
    }
    let viewer = cluster
        .map(str::to_owned)
        .or_else(|| loaded.settings.cluster.clone())
        .or_else(|| loaded.local.clone())
        .ok_or_else(|| {
            Refused("no cluster: pass --cluster ID or set `cluster` in gateway.yaml".to_owned())
        })?;
    let viewer_id = ClusterId::new(&viewer).map_err(|e| Refused(format!("--cluster: {e}")))?;
    if !loaded.set.clusters.contains_key(&viewer_id) {
        let known: Vec<&str> = loaded.set.clusters.keys().map(ClusterId::as_str).collect();
        return Err(Refused(format!(
            "unknown cluster {viewer:?}; {} holds {}",
            loaded.label,
            known.join(", ")
        )));
    }
    // From files nothing is recorded yet; from the API, what the cluster holds.
    let from_files = loaded.observed.is_none();
    let mut observed = loaded.observed.clone().unwrap_or_else(Observed::default);
    observed.adopt_from = loaded.settings.kube.adopt_imports.clone();
    let table = RouteTable::build(&loaded.set, &loaded.merged, &viewer).ok();
    let pods = table
        .as_ref()
        .map(|table| remote_pods(table, loaded.settings.dns.max_headless_endpoints))
        .unwrap_or_default();
    let sources = table.as_ref().map(source_backends).unwrap_or_default();
    // From files, remote pods' addresses come from `imports.podAddresses`;
    // from the API, the API server allocates them.
    let pod_ranges = from_files.then_some(loaded.settings.imports.pod_addresses.as_slice());
    let plan = plan(&PlanInputs {
        recorded: None,
        merged: &loaded.merged,
        observed: &observed,
        range: &loaded.settings.imports.port_range,
        released: &Default::default(),
        refused_families: &Default::default(),
        settling: &Default::default(),
        pods: &pods,
        sources: &sources,
        pod_ranges,
        quota: loaded.settings.imports.namespace_quota.into(),
    });
    let api_version = loaded
        .import_api_version
        .clone()
        .unwrap_or_else(|| format!("{MCS_GROUP}/{}", CRD_VERSIONS[0]));
    let objects = desired_objects(
        &plan,
        &loaded.merged,
        &observed,
        &api_version,
        Owners::Optional,
        Timestamp::now(),
    );
    for (key, why) in &plan.skipped {
        eprintln!(
            "{key}: no import ({})",
            serde_json::to_value(why).unwrap_or_default()
        );
    }
    for key in &plan.allocation.exhausted {
        eprintln!("{key}: no import port, imports.portRange is full");
    }
    if plan.pod_addresses_exhausted > 0 {
        eprintln!(
            "{} remote headless pods have no address: imports.podAddresses is full",
            plan.pod_addresses_exhausted
        );
    }
    for import in plan.imports.iter().filter(|i| i.pods_over_cap > 0) {
        eprintln!(
            "{}: {} remote pods have no address (dns.maxHeadlessEndpoints, imports.podAddresses)",
            import.key, import.pods_over_cap
        );
    }
    let list = as_list(&objects);
    let text = match output {
        ObjectsOutput::Json => {
            let mut text = serde_json::to_string_pretty(&list)
                .map_err(|e| Refused(format!("cannot encode: {e}")))?;
            text.push('\n');
            text
        }
        ObjectsOutput::Yaml => {
            let mut text = String::new();
            for item in list["items"].as_array().into_iter().flatten() {
                text.push_str("---\n");
                text.push_str(
                    &crate::discovery::yaml::to_string(item)
                        .map_err(|e| Refused(format!("cannot encode: {e}")))?,
                );
            }
            text
        }
    };
    emit(out, &text)
}
