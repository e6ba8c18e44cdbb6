//! Headless services with pods on another network: one per-pod derived
//! Service each (up to the cap), per-pod import ports, file-mode addresses,
//! and the per-pod objects converging and going with their pod.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};

use super::diff::{Change, changes};
use super::render::{DesiredObject, Owners, desired_objects};
use super::*;
use crate::discovery::observed::ObservedObject;
use crate::merge::merge;
use crate::model::ClusterSet;
use crate::routing::RouteTable;
use crate::testing::{ServiceBuilder, cluster_set};

const API: &str = "multicluster.x-k8s.io/v1alpha1";

/// `data/pg` is headless: one pod in east-1 (net-a, the viewer), `remote`
/// pods without hostnames in west-1 (net-b): 10.2.0.10 and up.
fn set(remote: u8) -> ClusterSet {
    let east = ServiceBuilder::new()
        .port("pg", 5432, 5432)
        .headless()
        .endpoint("10.1.0.5")
        .exported_at(10);
    let mut west = ServiceBuilder::new()
        .port("pg", 5432, 5432)
        .headless()
        .exported_at(20);
    for n in 0..remote {
        west = west.endpoint(&format!("10.2.0.{}", 10 + n));
    }
    let mut set = cluster_set(&[("east-1", "net-a", east), ("west-1", "net-b", west)]);
    for cluster in set.clusters.values_mut() {
        cluster.services = cluster
            .services
            .values()
            .map(|service| {
                let mut service = service.as_ref().clone();
                service.key = ServiceKey::new("data", "pg");
                (service.key.clone(), std::sync::Arc::new(service))
            })
            .collect();
    }
    set
}

fn plan_with(
    set: &ClusterSet,
    observed: &Observed,
    cap: usize,
    ranges: Option<&[IpNet]>,
) -> ImportPlan {
    let merged = merge(set);
    let table = RouteTable::build(set, &merged, "east-1").expect("east-1 is known");
    let pods = remote_pods(&table, cap);
    plan(&PlanInputs {
        recorded: None,
        merged: &merged,
        observed,
        range: &PortRange::default(),
        released: &Released::new(),
        refused_families: &BTreeSet::new(),
        settling: &Default::default(),
        pods: &pods,
        sources: &source_backends(&table),
        pod_ranges: ranges,
        quota: Default::default(),
    })
}

fn desired(set: &ClusterSet, observed: &Observed, owners: Owners) -> Vec<DesiredObject> {
    let plan = plan_with(set, observed, 8, None);
    let now = Timestamp::from_second(1_800_000_000).expect("a time");
    desired_objects(&plan, &merge(set), observed, API, owners, now)
}

fn services(objects: &[DesiredObject]) -> Vec<&Value> {
    objects
        .iter()
        .filter(|o| o.object["kind"] == "Service")
        .map(|o| &o.object)
        .collect()
}

#[test]
fn each_remote_pod_gets_a_derived_service_up_to_the_cap() {
    let plan = plan_with(&set(3), &Observed::default(), 2, None);
    let import = &plan.imports[0];
    assert_eq!(import.service_type, ServiceType::Headless);
    assert!(import.derived_service.is_none(), "no ClusterSetIP");
    let labels: Vec<&str> = import.pods.iter().map(|p| p.pod.label.as_str()).collect();
    assert_eq!(
        labels,
        ["10-2-0-10", "10-2-0-11"],
        "the local pod needs none"
    );
    assert_eq!(import.pods_over_cap, 1);
    assert!(import.message.contains("1 more"), "{}", import.message);
    let ports: BTreeSet<u16> = import
        .pods
        .iter()
        .map(|p| p.ports[0].import_port.expect("an import port"))
        .collect();
    assert_eq!(ports.len(), 2, "one import port per pod and port");
    assert!(import.ports.iter().all(|p| p.import_port.is_none()));
    let names: BTreeSet<&str> = import
        .pods
        .iter()
        .map(|p| p.derived_service.as_deref().expect("a derived Service"))
        .collect();
    assert_eq!(names.len(), 2);
    // The import ports map back to their pods.
    let pod_of_port: BTreeMap<u16, &PodRef> = plan
        .allocation
        .by_import_port()
        .filter_map(|(port, key)| Some((port, key.pod.as_ref()?)))
        .collect();
    assert_eq!(pod_of_port.len(), 2);
}

#[test]
fn a_per_pod_service_names_its_pod_and_forwards_to_its_import_ports() {
    let objects = desired(&set(1), &Observed::default(), Owners::Optional);
    let derived = services(&objects);
    assert_eq!(derived.len(), 1);
    let service = derived[0];
    let annotations = &service["metadata"]["annotations"];
    assert_eq!(annotations["strait.dev/pod-cluster"], "west-1");
    assert_eq!(annotations["strait.dev/pod"], "10-2-0-10");
    assert_eq!(
        service["metadata"]["labels"]["multicluster.kubernetes.io/service-name"],
        "pg"
    );
    assert_eq!(service["spec"]["type"], "ClusterIP");
    assert_eq!(service["spec"]["ports"][0]["port"], 5432);
    let target = service["spec"]["ports"][0]["targetPort"]
        .as_u64()
        .expect("a number");
    assert!(PortRange::default().contains(u16::try_from(target).expect("a port")));
    assert!(
        service["spec"].get("clusterIP").is_none(),
        "the API allocates it"
    );
    // Read back, the ServiceImport records that pod's import port.
    let import = objects
        .iter()
        .find(|o| o.object["kind"] == "ServiceImport" && !o.status)
        .map(|o| o.object.clone())
        .expect("the import");
    let mut observed = Observed::default();
    observed.insert(ObservedObject::new(import));
    let recorded = observed.recorded_ports();
    assert_eq!(
        recorded.values().copied().collect::<Vec<_>>(),
        [u16::try_from(target).expect("a port")]
    );
    let key = recorded.keys().next().expect("one recorded port");
    assert_eq!(
        key.pod.as_ref().map(|p| p.label.as_str()),
        Some("10-2-0-10")
    );
    let slices: Vec<&Value> = objects
        .iter()
        .filter(|o| o.object["kind"] == "EndpointSlice")
        .map(|o| &o.object)
        .filter(|s| s["metadata"]["labels"]["kubernetes.io/service-name"].is_string())
        .collect();
    assert_eq!(slices.len(), 1, "the per-pod Service's own slice");
    assert_eq!(slices[0]["ports"][0]["port"], target);
}

#[test]
fn a_file_setup_chooses_the_pod_addresses_and_writes_them() {
    let ranges: Vec<IpNet> = vec!["10.97.0.0/24".parse().expect("a range")];
    let plan = plan_with(&set(2), &Observed::default(), 8, Some(&ranges));
    let ips: Vec<IpAddr> = plan.imports[0]
        .pods
        .iter()
        .flat_map(|p| p.ips.clone())
        .collect();
    assert_eq!(ips.len(), 2);
    assert!(ips.iter().all(|ip| ranges[0].contains(ip)));
    assert_ne!(ips[0], ips[1]);
    let now = Timestamp::from_second(1_800_000_000).expect("a time");
    let objects = desired_objects(
        &plan,
        &merge(&set(2)),
        &Observed::default(),
        API,
        Owners::Optional,
        now,
    );
    let written: BTreeSet<String> = services(&objects)
        .iter()
        .map(|s| s["spec"]["clusterIP"].as_str().expect("chosen").to_owned())
        .collect();
    let chosen: BTreeSet<String> = ips.iter().map(ToString::to_string).collect();
    assert_eq!(written, chosen);

    // A range with room for one: the other pod gets nothing, not even an
    // import port, and is counted.
    let one: Vec<IpNet> = vec!["10.97.0.7/32".parse().expect("a range")];
    let plan = plan_with(&set(2), &Observed::default(), 8, Some(&one));
    assert_eq!(plan.imports[0].pods.len(), 1);
    assert_eq!(plan.imports[0].pods_over_cap, 1);
    assert_eq!(plan.allocation.ports.len(), 1);
    // No range at all: a file setup names no remote pod.
    let plan = plan_with(&set(2), &Observed::default(), 8, Some(&[]));
    assert!(plan.imports[0].pods.is_empty());
    assert!(plan.allocation.ports.is_empty());
}

/// Plays the API server: uids, a ClusterIP per Service.
fn serve(observed: &mut Observed, pending: Vec<Change>) {
    for (n, change) in pending.into_iter().enumerate() {
        match change {
            Change::Apply { object, status } => {
                let mut held = observed
                    .get(&object)
                    .and_then(|held| held.raw().map(|raw| serde_json::Value::clone(raw)))
                    .unwrap_or_else(|| json!({"metadata": {"uid": format!("uid-{n}")}}));
                if status {
                    held["status"] = object["status"].clone();
                } else {
                    let uid = held["metadata"]["uid"].clone();
                    let ips = held["spec"]["clusterIPs"].clone();
                    held = object.clone();
                    held["metadata"]["uid"] = uid;
                    if held["kind"] == "Service" {
                        held["spec"]["clusterIPs"] = if ips.is_null() {
                            json!([format!("10.96.1.{n}")])
                        } else {
                            ips
                        };
                    }
                }
                observed.insert(ObservedObject::new(held));
            }
            Change::Delete {
                kind,
                namespace,
                name,
                ..
            } => observed.remove(&kind, &namespace, &name),
        }
    }
}

fn converge(set: &ClusterSet, observed: &mut Observed) {
    for _ in 0..5 {
        let pending = changes(desired(set, observed, Owners::Required), observed);
        if pending.is_empty() {
            return;
        }
        serve(observed, pending);
    }
    panic!("no convergence");
}

#[test]
fn per_pod_objects_converge_and_go_with_their_pod() {
    let mut observed = Observed::default();
    converge(&set(2), &mut observed);
    assert_eq!(observed.pod_services.len(), 2);
    assert_eq!(observed.pod_addresses().len(), 2, "both have a ClusterIP");
    // Each per-pod Service's slice, and one MCS slice per exporting cluster.
    assert_eq!(observed.slices.len(), 4);
    let plan = plan_with(&set(2), &observed, 8, None);
    assert!(plan.imports[0].pods.iter().all(|p| !p.ips.is_empty()));

    // One pod goes: its Service and slice are deleted, the other's stay.
    let pending: Vec<String> = changes(desired(&set(1), &observed, Owners::Required), &observed)
        .iter()
        .map(Change::describe)
        .collect();
    let deletes: Vec<&String> = pending
        .iter()
        .filter(|c| c.starts_with("delete "))
        .collect();
    assert_eq!(deletes.len(), 2, "its Service and its slice: {pending:?}");
    assert!(
        deletes
            .iter()
            .any(|c| c.starts_with("delete Service data/derived-"))
            && deletes
                .iter()
                .any(|c| c.starts_with("delete EndpointSlice ")),
        "{pending:?}"
    );
    converge(&set(1), &mut observed);
    assert_eq!(observed.pod_services.len(), 1);
}

#[test]
fn a_lagging_import_watch_deletes_no_per_pod_service() {
    let mut observed = Observed::default();
    converge(&set(2), &mut observed);
    // The import's uid is not seen (a watch that lags): its children are
    // not rendered, and must not be deleted for that.
    let key = ServiceKey::new("data", "pg");
    if let Some(import) = observed.imports.get_mut(&key) {
        let mut lagging = serde_json::Value::clone(import.raw().expect("an import is held whole"));
        lagging["metadata"]
            .as_object_mut()
            .expect("metadata")
            .remove("uid");
        *import = ObservedObject::new(lagging);
    }
    let pending = changes(desired(&set(2), &observed, Owners::Required), &observed);
    assert!(
        pending.iter().all(|c| !matches!(c, Change::Delete { .. })),
        "{pending:?}"
    );
}

#[test]
fn a_per_pod_service_exposes_the_pods_own_port() {
    // Port 5432 forwards to 6432 on west-1's pods: clients of a headless
    // service dial the pod's own port, so that is what the Service exposes.
    let mut set = set(1);
    for cluster in set.clusters.values_mut() {
        cluster.edit_services(|service| {
            for group in &mut service.endpoint_groups {
                group.ports = group
                    .ports
                    .iter()
                    .map(|port| crate::model::EndpointPort {
                        port: 6432,
                        ..port.clone()
                    })
                    .collect();
            }
        });
    }
    let objects = desired(&set, &Observed::default(), Owners::Optional);
    let derived = services(&objects);
    assert_eq!(derived.len(), 1);
    assert_eq!(derived[0]["spec"]["ports"][0]["port"], 6432);
    // The import port still stands for service port 5432 of that pod.
    let plan = plan_with(&set, &Observed::default(), 8, None);
    let (_, key) = plan
        .allocation
        .by_import_port()
        .next()
        .expect("one import port");
    assert_eq!(key.port, 5432);
}
