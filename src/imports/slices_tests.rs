//! MCS EndpointSlices: one per exporting cluster and family, with the MCS
//! labels, holding addresses that work from the viewing cluster, owned by
//! the import and deleted with it.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};

use super::diff::{Change, changes};
use super::render::{DesiredObject, Owners, desired_objects};
use super::*;
use crate::discovery::observed::{GatewayEndpoint, ObservedObject};
use crate::merge::merge;
use crate::model::{ClusterService, ClusterSet};
use crate::routing::RouteTable;
use crate::testing::{ServiceBuilder, cluster_set, ip};

const API: &str = "multicluster.x-k8s.io/v1alpha1";

/// `shop/cart` from east-1 and east-2 (net-a, east-1 views) and west-1
/// (net-b).
fn three(east1: ClusterService, east2: ClusterService, west: ClusterService) -> ClusterSet {
    cluster_set(&[
        ("east-1", "net-a", east1),
        ("east-2", "net-a", east2),
        ("west-1", "net-b", west),
    ])
}

fn desired_with(set: &ClusterSet, observed: &Observed) -> (ImportPlan, Vec<DesiredObject>) {
    let merged = merge(set);
    let table = RouteTable::build(set, &merged, "east-1").expect("east-1 is known");
    let pods = remote_pods(&table, 8);
    let plan = plan(&PlanInputs {
        recorded: None,
        merged: &merged,
        observed,
        range: &PortRange::default(),
        released: &Released::new(),
        refused_families: &BTreeSet::new(),
        settling: &Default::default(),
        pods: &pods,
        sources: &source_backends(&table),
        pod_ranges: None,
        quota: Default::default(),
    });
    let now = Timestamp::from_second(1_800_000_000).expect("a time");
    let objects = desired_objects(&plan, &merged, observed, API, Owners::Optional, now);
    (plan, objects)
}

/// The MCS slices among `objects`, by source cluster.
fn mcs_slices(objects: &[DesiredObject]) -> BTreeMap<String, Vec<Value>> {
    let mut by_cluster: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for object in objects.iter().map(|o| &o.object) {
        let labels = &object["metadata"]["labels"];
        if object["kind"] == "EndpointSlice"
            && let Some(cluster) = labels["multicluster.kubernetes.io/source-cluster"].as_str()
        {
            by_cluster
                .entry(cluster.to_owned())
                .or_default()
                .push(object.clone());
        }
    }
    by_cluster
}

fn addresses(slice: &Value) -> Vec<&str> {
    slice["endpoints"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| e["addresses"][0].as_str())
        .collect()
}

/// This cluster's gateway pods, as the gateway Service's slices list them.
fn with_gateways(observed: &mut Observed) {
    for address in ["10.1.9.1", "10.1.9.2"] {
        observed.gateway_endpoints.push(GatewayEndpoint {
            address: ip(address),
            ready: true,
            serving: true,
            terminating: false,
            node_name: Some("node-1".to_owned()),
            zone: Some("zone-a".to_owned()),
        });
    }
}

/// What the cluster holds once Strait wrote `set`'s objects (twice: the
/// second time with the owners' uids known), as a server returns them.
fn held_as_written(set: &ClusterSet) -> Observed {
    let mut observed = Observed::default();
    for _ in 0..2 {
        let (_, objects) = desired_with(set, &observed);
        for object in objects.iter().filter(|o| !o.status) {
            let mut held = object.object.clone();
            held["metadata"]["uid"] = "u".into();
            held["metadata"]["resourceVersion"] = "1".into();
            held["metadata"]["managedFields"] = json!([{"manager": "strait"}]);
            observed.insert(ObservedObject::new(held));
        }
    }
    observed
}

#[test]
fn a_clustersetip_service_gets_one_slice_per_source_cluster_with_addresses_that_work_here() {
    let east1 = ServiceBuilder::new()
        .port("http", 80, 8080)
        .port("admin", 9000, 9090)
        .exported_at(10)
        .endpoint("10.1.0.5");
    let east2 = ServiceBuilder::new()
        .port("http", 80, 8081)
        .exported_at(20)
        .endpoint("10.2.0.5")
        .endpoint("10.2.0.6");
    let west = ServiceBuilder::new()
        .port("http", 80, 8080)
        .exported_at(30)
        .endpoint("10.1.0.5");
    let mut observed = Observed::default();
    with_gateways(&mut observed);
    let (plan, objects) = desired_with(&three(east1, east2, west), &observed);
    let slices = mcs_slices(&objects);
    assert_eq!(
        slices.keys().collect::<Vec<_>>(),
        ["east-1", "east-2", "west-1"]
    );
    for (cluster, held) in &slices {
        assert_eq!(held.len(), 1, "{cluster}: one family, one port set");
        let labels = &held[0]["metadata"]["labels"];
        assert_eq!(labels["multicluster.kubernetes.io/service-name"], "cart");
        assert_eq!(
            labels["endpointslice.kubernetes.io/managed-by"],
            "imports.strait.dev"
        );
        assert_eq!(labels["app.kubernetes.io/managed-by"], "strait");
        assert!(
            labels.get("kubernetes.io/service-name").is_none(),
            "kube-proxy must not read it: {labels}"
        );
        assert_eq!(held[0]["addressType"], "IPv4");
        let owner = &held[0]["metadata"]["ownerReferences"][0];
        assert_eq!(owner["kind"], "ServiceImport");
        assert_eq!(owner["name"], "cart");
    }
    // Same network: the pods themselves, on their own target ports.
    assert_eq!(addresses(&slices["east-1"][0]), ["10.1.0.5"]);
    assert_eq!(
        slices["east-1"][0]["ports"],
        json!([{"name": "admin", "protocol": "TCP", "port": 9090},
            {"name": "http", "protocol": "TCP", "port": 8080}])
    );
    assert_eq!(addresses(&slices["east-2"][0]), ["10.2.0.5", "10.2.0.6"]);
    assert_eq!(
        slices["east-2"][0]["ports"],
        json!([{"name": "http", "protocol": "TCP", "port": 8081}])
    );
    assert_eq!(
        slices["east-2"][0]["endpoints"][0]["conditions"],
        json!({"ready": true, "serving": true, "terminating": false})
    );
    // Another network (whose pod address means nothing here): this
    // cluster's gateways, on the import port of the one port it declares.
    let west = &slices["west-1"][0];
    assert_eq!(addresses(west), ["10.1.9.1", "10.1.9.2"]);
    assert_eq!(west["endpoints"][0]["zone"], "zone-a");
    let http = plan.imports[0]
        .ports
        .iter()
        .find(|p| p.name == "http")
        .and_then(|p| p.import_port)
        .expect("http has an import port");
    assert_eq!(
        west["ports"],
        json!([{"name": "http", "protocol": "TCP", "port": http}])
    );
}

#[test]
fn a_headless_service_keeps_hostnames_and_reaches_remote_pods_by_their_address_here() {
    let east = ServiceBuilder::new()
        .port("pg", 5432, 5432)
        .headless()
        .exported_at(10)
        .endpoint_named("10.1.0.5", "pg-0");
    let west = ServiceBuilder::new()
        .port("pg", 5432, 5433)
        .headless()
        .exported_at(20)
        .endpoint_named("10.2.0.7", "pg-1")
        .endpoint_named("10.2.0.8", "pg-2");
    let set = cluster_set(&[("east-1", "net-a", east), ("west-1", "net-b", west)]);
    // Before the API allocates the per-pod ClusterIPs, west-1 has no slice.
    let (_, objects) = desired_with(&set, &Observed::default());
    let slices = mcs_slices(&objects);
    assert_eq!(slices.keys().collect::<Vec<_>>(), ["east-1"]);
    let local = &slices["east-1"][0];
    assert_eq!(addresses(local), ["10.1.0.5"]);
    assert_eq!(local["endpoints"][0]["hostname"], "pg-0");

    // Once allocated, each pod is its per-pod derived Service's ClusterIP,
    // on the pod's own port, with its hostname.
    let mut observed = Observed::default();
    for object in &objects {
        let service = &object.object;
        if service["kind"] == "Service" {
            let mut held = service.clone();
            let pod = held["metadata"]["annotations"]["strait.dev/pod"].clone();
            let address = if pod == "pg-1" {
                "10.96.0.71"
            } else {
                "10.96.0.72"
            };
            held["spec"]["clusterIP"] = address.into();
            held["spec"]["clusterIPs"] = json!([address]);
            observed.insert(ObservedObject::new(held));
        }
    }
    let (_, objects) = desired_with(&set, &observed);
    let slices = mcs_slices(&objects);
    let west = &slices["west-1"][0];
    assert_eq!(addresses(west), ["10.96.0.71", "10.96.0.72"]);
    let hostnames: Vec<&str> = west["endpoints"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| e["hostname"].as_str())
        .collect();
    assert_eq!(hostnames, ["pg-1", "pg-2"]);
    assert_eq!(west["ports"][0]["port"], 5433, "the pod's own port");
}

#[test]
fn a_serving_terminating_endpoint_is_listed_as_such_and_a_not_ready_one_is_not() {
    let east = ServiceBuilder::new()
        .port("http", 80, 8080)
        .exported_at(10)
        .endpoint_with("10.1.0.5", false, true, true)
        .endpoint_with("10.1.0.6", false, false, false);
    let set = cluster_set(&[("east-1", "net-a", east)]);
    let (_, objects) = desired_with(&set, &Observed::default());
    let slices = mcs_slices(&objects);
    let endpoints = slices["east-1"][0]["endpoints"].clone();
    assert_eq!(
        endpoints,
        json!([{"addresses": ["10.1.0.5"],
            "conditions": {"ready": false, "serving": true, "terminating": true}}])
    );
}

/// A slice holds at most 100 endpoints (the API refuses more than 1,000):
/// a large cluster's endpoints are split, every one listed once.
#[test]
fn a_large_clusters_endpoints_are_split_into_slices_of_at_most_100() {
    let mut east = ServiceBuilder::new().port("http", 80, 8080).exported_at(10);
    for n in 0..250 {
        east = east.endpoint(&format!("10.1.{}.{}", n / 200, n % 200 + 1));
    }
    let set = cluster_set(&[("east-1", "net-a", east)]);
    let (_, objects) = desired_with(&set, &Observed::default());
    let slices = &mcs_slices(&objects)["east-1"];
    let sizes: Vec<usize> = slices.iter().map(|s| addresses(s).len()).collect();
    assert_eq!(sizes, [100, 100, 50]);
    let names: BTreeSet<&str> = slices
        .iter()
        .filter_map(|s| s["metadata"]["name"].as_str())
        .collect();
    assert_eq!(names.len(), 3, "each its own name: {names:?}");
    let listed: BTreeSet<&str> = slices.iter().flat_map(addresses).collect();
    assert_eq!(listed.len(), 250);
}

#[test]
fn a_cluster_id_that_cannot_be_a_label_value_gets_no_slice_and_the_import_says_so() {
    let long = format!("{}.example", "c".repeat(60));
    let east = ServiceBuilder::new()
        .port("http", 80, 8080)
        .exported_at(10)
        .endpoint("10.1.0.5");
    let far = ServiceBuilder::new()
        .port("http", 80, 8080)
        .exported_at(20)
        .endpoint("10.1.0.6");
    let set = cluster_set(&[("east-1", "net-a", east), (&long, "net-a", far)]);
    let (plan, objects) = desired_with(&set, &Observed::default());
    let slices = mcs_slices(&objects);
    assert_eq!(slices.keys().collect::<Vec<_>>(), ["east-1"]);
    let import = &plan.imports[0];
    assert_eq!(import.unlabelled_sources.len(), 1);
    assert!(
        import.message.contains(&long) && import.message.contains("63"),
        "{}",
        import.message
    );
}

#[test]
fn slices_go_with_the_last_export_and_are_not_touched_while_held() {
    let east = ServiceBuilder::new()
        .port("http", 80, 8080)
        .exported_at(10)
        .endpoint("10.1.0.5");
    let set = cluster_set(&[("east-1", "net-a", east.clone())]);
    let observed = held_as_written(&set);
    let (_, again) = desired_with(&set, &observed);
    let pending: Vec<String> = changes(again, &observed)
        .iter()
        .map(Change::describe)
        .filter(|c| c.contains("EndpointSlice"))
        .collect();
    assert!(
        pending.is_empty(),
        "held slices are left alone: {pending:?}"
    );

    let mut unexported = ClusterSet::default();
    let mut cluster = set.clusters.values().next().expect("one").clone();
    cluster.services.clear();
    unexported.clusters.insert(cluster.id.clone(), cluster);
    let (_, gone) = desired_with(&unexported, &observed);
    let deleted: Vec<String> = changes(gone, &observed)
        .iter()
        .filter(|c| matches!(c, Change::Delete { kind, .. } if kind == "EndpointSlice"))
        .map(Change::describe)
        .collect();
    // The MCS slice and the derived Service's own.
    assert_eq!(deleted.len(), 2, "{deleted:?}");
    assert!(
        deleted
            .iter()
            .any(|d| d.starts_with("delete EndpointSlice shop/cart-")),
        "{deleted:?}"
    );
}

/// Strait's slices as it wrote them are held as their digest alone, and
/// are still written again when what Strait wants of them changes or when
/// someone edited them.
#[test]
fn slices_held_as_their_digest_are_written_again_when_wanted_or_edited() {
    let service = |address: &str| {
        ServiceBuilder::new()
            .port("http", 80, 8080)
            .exported_at(10)
            .endpoint(address)
    };
    let set = cluster_set(&[("east-1", "net-a", service("10.1.0.5"))]);
    let mut observed = held_as_written(&set);
    assert!(!observed.slices.is_empty());
    assert!(
        observed.slices.values().all(|s| s.raw().is_none()),
        "held as their digest"
    );
    let slice_writes = |set: &ClusterSet, observed: &Observed| -> Vec<String> {
        let (_, wanted) = desired_with(set, observed);
        changes(wanted, observed)
            .iter()
            .map(Change::describe)
            .filter(|c| c.contains("EndpointSlice"))
            .collect()
    };
    assert_eq!(slice_writes(&set, &observed), Vec::<String>::new());

    let moved = cluster_set(&[("east-1", "net-a", service("10.1.0.6"))]);
    let writes = slice_writes(&moved, &observed);
    assert_eq!(
        writes.len(),
        1,
        "the MCS slice lists the new address: {writes:?}"
    );

    let (name, edited) = observed
        .slices
        .iter()
        .find(|(_, s)| s.label("multicluster.kubernetes.io/service-name").is_some())
        .map(|(key, _)| key.clone())
        .and_then(|key| {
            let (_, objects) = desired_with(&set, &observed);
            let mut held = objects
                .into_iter()
                .find(|o| o.object["metadata"]["name"] == key.1.as_str())?
                .object;
            held["metadata"]["uid"] = "u".into();
            held["endpoints"][0]["addresses"][0] = "10.9.9.9".into();
            Some((key, held))
        })
        .expect("an MCS slice");
    let edited = ObservedObject::new(edited);
    assert!(edited.raw().is_some(), "an edited slice is held whole");
    observed.slices.insert(name, edited);
    let writes = slice_writes(&set, &observed);
    assert_eq!(writes.len(), 1, "the edit is put back: {writes:?}");
}

/// `kube.adoptImports`: a previous implementation's import and the derived
/// Service it names are taken over under their names, so the ClusterSetIP
/// stays; that Service's old slices go once Strait's list the gateways.
#[test]
fn an_adopted_import_keeps_its_derived_service_and_clustersetip() {
    let east = ServiceBuilder::new()
        .port("http", 80, 8080)
        .exported_at(10)
        .endpoint("10.1.0.5");
    let set = cluster_set(&[("east-1", "net-a", east)]);
    let previous = |raw: Value| {
        let mut raw = raw;
        raw["metadata"]["managedFields"] = json!([{"manager": "mcs-controller"}]);
        ObservedObject::new(raw)
    };
    let mut observed = Observed {
        adopt_from: Some("mcs-controller".to_owned()),
        ..Observed::default()
    };
    observed.insert(previous(json!({"kind": "ServiceImport",
        "metadata": {"name": "cart", "namespace": "shop", "uid": "i1",
            "annotations": {"multicluster.kubernetes.io/derived-service": "derived-previous"}},
        "spec": {"type": "ClusterSetIP", "ips": ["10.96.0.77"]}})));
    observed.insert(previous(json!({"kind": "Service",
        "metadata": {"name": "derived-previous", "namespace": "shop", "uid": "s1"},
        "spec": {"clusterIPs": ["10.96.0.77"], "ports": []}})));
    observed.insert(previous(
        json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": "derived-previous-x1", "namespace": "shop",
            "labels": {"kubernetes.io/service-name": "derived-previous"}}}),
    ));
    let (plan, objects) = desired_with(&set, &observed);
    let import = &plan.imports[0];
    assert_eq!(import.derived_service.as_deref(), Some("derived-previous"));
    assert_eq!(import.ips, [ip("10.96.0.77")]);
    let pending = |observed: &Observed| -> Vec<String> {
        changes(objects.clone(), observed)
            .iter()
            .map(Change::describe)
            .collect()
    };
    let first = pending(&observed);
    assert!(
        first.contains(&"apply Service shop/derived-previous".to_owned()),
        "{first:?}"
    );
    // The old slice is all kube-proxy has until Strait's own is held.
    assert!(
        !first.contains(&"delete EndpointSlice shop/derived-previous-x1".to_owned()),
        "{first:?}"
    );
    let mut listed = observed.clone();
    listed.insert(ObservedObject::new(
        json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": "derived-previous-s1", "namespace": "shop",
            "labels": {"kubernetes.io/service-name": "derived-previous",
                "app.kubernetes.io/managed-by": "strait"}}}),
    ));
    let then = pending(&listed);
    assert!(
        then.contains(&"delete EndpointSlice shop/derived-previous-x1".to_owned()),
        "{then:?}"
    );

    // Just taken over: the derived Service is left as it is for a moment
    // (every gateway opens the import ports first), the ClusterSetIP kept.
    let merged = merge(&set);
    let table = RouteTable::build(&set, &merged, "east-1").expect("east-1 is known");
    let settling = BTreeSet::from([ServiceKey::new("shop", "cart")]);
    let held_back = super::plan(&PlanInputs {
        recorded: None,
        merged: &merged,
        observed: &observed,
        range: &PortRange::default(),
        released: &Released::new(),
        refused_families: &BTreeSet::new(),
        settling: &settling,
        pods: &BTreeMap::new(),
        sources: &source_backends(&table),
        pod_ranges: None,
        quota: Default::default(),
    });
    assert_eq!(held_back.imports[0].derived_service, None);
    assert_eq!(held_back.imports[0].ips, [ip("10.96.0.77")]);
    assert!(
        held_back.imports[0].ports[0].import_port.is_some(),
        "its import ports are recorded, for the gateways to open"
    );

    // Written once, the import is Strait's, and names the same Service.
    let mut written = observed.clone();
    for object in objects
        .iter()
        .filter(|o| !o.status && o.object["kind"] == "ServiceImport")
    {
        let mut held = object.object.clone();
        held["metadata"]["uid"] = "i1".into();
        written.insert(ObservedObject::new(held));
    }
    let (plan, _) = desired_with(&set, &written);
    assert_eq!(
        plan.imports[0].derived_service.as_deref(),
        Some("derived-previous")
    );

    // Without adoption, the import is another controller's.
    observed.adopt_from = None;
    let (plan, _) = desired_with(&set, &observed);
    assert!(plan.imports.is_empty());
}

#[test]
fn an_imports_status_is_written_after_its_slices_so_ready_never_comes_first() {
    let east1 = ServiceBuilder::new()
        .port("http", 80, 8080)
        .exported_at(10)
        .endpoint("10.1.0.5");
    let east2 = ServiceBuilder::new()
        .port("http", 80, 8080)
        .exported_at(20)
        .endpoint("10.2.0.5");
    let west = ServiceBuilder::new()
        .port("http", 80, 8080)
        .exported_at(30)
        .endpoint("10.1.0.5");
    let mut observed = Observed::default();
    with_gateways(&mut observed);
    let (_, objects) = desired_with(&three(east1, east2, west), &observed);
    let status = objects
        .iter()
        .position(|o| o.status)
        .expect("the import's status is desired");
    let last_slice = objects
        .iter()
        .rposition(|o| o.object["kind"] == "EndpointSlice")
        .expect("slices are desired");
    assert!(
        status > last_slice,
        "status at {status}, a slice at {last_slice}"
    );
    // mcs-api v0.5.2's field: unset until the import is Ready, then
    // whether it has MCS slices (with no endpoint anywhere, none).
    assert!(
        objects[status].object["status"]
            .get("endpointSliceObjects")
            .is_none(),
        "not said before Ready: {}",
        objects[status].object
    );
    let field = |set: &ClusterSet| {
        let (plan, _) = desired_with(set, &Observed::default());
        let mut planned = (*plan.imports[0]).clone();
        planned.ready = true;
        let at = Timestamp::from_second(1_800_000_000).expect("a time");
        let slices = !planned.slices.is_empty();
        super::render::import_status(&planned, API, None, at, slices)["status"]
            ["endpointSliceObjects"]
            .clone()
    };
    let served = ServiceBuilder::new()
        .port("http", 80, 8080)
        .exported_at(10)
        .endpoint("10.1.0.5");
    assert_eq!(
        field(&three(served.clone(), served.clone(), served)),
        "Present"
    );
    let empty = ServiceBuilder::new().port("http", 80, 8080).exported_at(10);
    let (_, none) = desired_with(
        &three(empty.clone(), empty.clone(), empty.clone()),
        &Observed::default(),
    );
    assert!(mcs_slices(&none).is_empty(), "no MCS slice");
    assert_eq!(field(&three(empty.clone(), empty.clone(), empty)), "Absent");
    let changes = changes(objects, &observed);
    assert!(
        matches!(changes.last(), Some(Change::Apply { status: true, .. })),
        "the status is the last write"
    );
}

/// A route table built reusing the last one shares the routes of each
/// service that did not change, and so does the reading of its sources:
/// one change reads one service again.
#[test]
fn an_unchanged_services_sources_are_shared_and_a_changed_ones_read_again() {
    let set_with = |address: &str| {
        cluster_set(&[(
            "east-1",
            "net-a",
            ServiceBuilder::new()
                .port("http", 80, 8080)
                .exported_at(10)
                .endpoint(address),
        )])
    };
    let key = ServiceKey::new("shop", "cart");
    let addresses_of = |sources: &Sources| -> Vec<IpAddr> {
        sources
            .get(&key)
            .expect("cart has sources")
            .iter()
            .flat_map(|source| source.endpoints.iter().map(|e| e.address))
            .collect()
    };
    let set = set_with("10.1.0.5");
    let merged = merge(&set);
    let first = RouteTable::build(&set, &merged, "east-1").expect("east-1 is known");
    let read = source_backends(&first);
    let again =
        RouteTable::build_reusing(&set, &merged, "east-1", Some(&first)).expect("east-1 is known");
    let reread = source_backends_reusing(&again, Some(&read));
    let shared = |a: &Sources, b: &Sources| {
        std::ptr::eq(
            a.get(&key).expect("read").as_ptr(),
            b.get(&key).expect("read").as_ptr(),
        )
    };
    assert!(
        shared(&read, &reread),
        "the unchanged service is not read again"
    );

    let moved = set_with("10.1.0.6");
    let moved_merged = merge(&moved);
    let changed = RouteTable::build_reusing(&moved, &moved_merged, "east-1", Some(&again))
        .expect("east-1 is known");
    let fresh = source_backends_reusing(&changed, Some(&reread));
    assert!(!shared(&reread, &fresh));
    assert_eq!(addresses_of(&fresh), [ip("10.1.0.6")]);
    assert_eq!(addresses_of(&reread), [ip("10.1.0.5")]);
}
