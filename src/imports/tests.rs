//! The plan, without I/O: the mcs-api conformance expectations on imports
//! (type, ports, affinity, families, policies, exported metadata), derived
//! Services and slices, and the diff against what a cluster holds.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};

use super::diff::{Change, changes};
use super::render::{DesiredObject, Owners, desired_objects};
use super::*;
use crate::discovery::observed::ObservedObject;
use crate::merge::merge;
use crate::model::names;
use crate::model::{ClusterService, ClusterSet, SessionAffinity};
use crate::testing::{ServiceBuilder, cluster_set};

const API: &str = "multicluster.x-k8s.io/v1alpha1";

fn now() -> Timestamp {
    Timestamp::from_second(1_800_000_000).expect("a time")
}

/// Calls `then` with the plan inputs of `merged` and `observed`, the
/// others empty or default.
fn with_inputs<T>(
    merged: &crate::merge::MergedSet,
    observed: &Observed,
    then: impl FnOnce(&PlanInputs<'_>) -> T,
) -> T {
    then(&PlanInputs {
        recorded: None,
        merged,
        observed,
        range: &PortRange::default(),
        released: &Released::new(),
        refused_families: &BTreeSet::new(),
        settling: &Default::default(),
        pods: &BTreeMap::new(),
        sources: &Sources::default(),
        pod_ranges: None,
        quota: Default::default(),
    })
}

fn plan_for(set: &ClusterSet, observed: &Observed) -> (ImportPlan, crate::merge::MergedSet) {
    let merged = merge(set);
    let plan = with_inputs(&merged, observed, plan);
    (plan, merged)
}

fn objects(set: &ClusterSet, observed: &Observed) -> Vec<DesiredObject> {
    let (plan, merged) = plan_for(set, observed);
    desired_objects(&plan, &merged, observed, API, Owners::Optional, now())
}

fn of_kind<'a>(objects: &'a [DesiredObject], kind: &str, status: bool) -> Vec<&'a Value> {
    objects
        .iter()
        .filter(|o| o.object["kind"] == kind && o.status == status)
        .map(|o| &o.object)
        .collect()
}

fn two_clusters(a: ClusterService, b: ClusterService) -> ClusterSet {
    cluster_set(&[("east-1", "net-a", a), ("west-1", "net-b", b)])
}

#[test]
fn an_import_exists_while_any_cluster_exports() {
    let set = two_clusters(
        ServiceBuilder::new().port("http", 80, 8080).exported_at(10),
        ServiceBuilder::new().port("http", 80, 8080),
    );
    let (plan, _) = plan_for(&set, &Observed::default());
    assert_eq!(plan.imports.len(), 1);
    let import = &plan.imports[0];
    assert_eq!(import.key, ServiceKey::new("shop", "cart"));
    assert_eq!(import.clusters, [ClusterId::new("east-1").expect("id")]);

    let none = two_clusters(
        ServiceBuilder::new().port("http", 80, 8080),
        ServiceBuilder::new().port("http", 80, 8080),
    );
    assert!(plan_for(&none, &Observed::default()).0.imports.is_empty());
}

#[test]
fn type_ports_and_affinity_follow_the_merge() {
    let mut oldest = ServiceBuilder::new()
        .port("http", 80, 8080)
        .port("admin", 9000, 9000)
        .exported_at(10);
    oldest.spec.session_affinity = SessionAffinity::ClientIp;
    oldest.spec.session_affinity_timeout = Some(600);
    oldest.spec.internal_traffic_policy = "Local".to_owned();
    oldest.spec.traffic_distribution = Some("PreferClose".to_owned());
    let younger = ServiceBuilder::new()
        .port("http", 80, 8080)
        .port("extra", 81, 81)
        .exported_at(20);
    let objects = objects(&two_clusters(oldest, younger), &Observed::default());
    let imports = of_kind(&objects, "ServiceImport", false);
    let spec = &imports[0]["spec"];
    assert_eq!(spec["type"], "ClusterSetIP");
    assert_eq!(
        spec["ports"],
        json!([{"name": "http", "protocol": "TCP", "port": 80},
               {"name": "admin", "protocol": "TCP", "port": 9000},
               {"name": "extra", "protocol": "TCP", "port": 81}]),
        "the union of ports, oldest first"
    );
    assert_eq!(spec["sessionAffinity"], "ClientIP");
    assert_eq!(
        spec["sessionAffinityConfig"]["clientIP"]["timeoutSeconds"],
        600
    );
    assert_eq!(spec["internalTrafficPolicy"], "Local");
    assert_eq!(spec["trafficDistribution"], "PreferClose");
    let status = &of_kind(&objects, "ServiceImport", true)[0]["status"];
    assert_eq!(
        status["clusters"],
        json!([{"cluster": "east-1"}, {"cluster": "west-1"}])
    );
}

#[test]
fn headless_imports_have_no_ips_and_no_derived_service() {
    let set = two_clusters(
        ServiceBuilder::new()
            .port("pg", 5432, 5432)
            .headless()
            .exported_at(10),
        ServiceBuilder::new().port("pg", 5432, 5432).exported_at(20),
    );
    let objects = objects(&set, &Observed::default());
    let import = of_kind(&objects, "ServiceImport", false)[0];
    assert_eq!(
        import["spec"]["type"], "Headless",
        "the oldest export's type wins"
    );
    assert!(import["spec"].get("ips").is_none());
    assert!(of_kind(&objects, "Service", false).is_empty());
    let ready = &of_kind(&objects, "ServiceImport", true)[0]["status"]["conditions"][0];
    assert_eq!(ready["status"], "True");
}

#[test]
fn only_the_oldest_exports_labels_and_annotations_are_used() {
    let mut oldest = ServiceBuilder::new().port("http", 80, 8080).exported_at(10);
    if let Some(export) = &mut oldest.export {
        export
            .exported_labels
            .insert("team".to_owned(), "a".to_owned());
        export
            .exported_annotations
            .insert("note".to_owned(), "old".to_owned());
    }
    let mut younger = ServiceBuilder::new().port("http", 80, 8080).exported_at(20);
    if let Some(export) = &mut younger.export {
        export
            .exported_labels
            .insert("team".to_owned(), "b".to_owned());
        export
            .exported_labels
            .insert("only-b".to_owned(), "x".to_owned());
    }
    let objects = objects(&two_clusters(oldest, younger), &Observed::default());
    let metadata = &of_kind(&objects, "ServiceImport", false)[0]["metadata"];
    assert_eq!(metadata["labels"]["team"], "a");
    assert!(metadata["labels"].get("only-b").is_none());
    assert_eq!(metadata["annotations"]["note"], "old");
    assert_eq!(
        metadata["annotations"][naming::DERIVED_SERVICE_ANNOTATION],
        "derived-bsqa4s8pq5"
    );
}

#[test]
fn the_derived_service_forwards_each_port_to_its_import_port() {
    let set = two_clusters(
        ServiceBuilder::new()
            .port("http", 80, 8080)
            .port("grpc", 9090, 9090)
            .exported_at(10),
        ServiceBuilder::new().port("http", 80, 8080).exported_at(20),
    );
    let mut observed = Observed::default();
    let gateway: crate::discovery::objects::EndpointSlice = serde_json::from_value(
        serde_json::json!({"addressType": "IPv4", "endpoints": [{"addresses": ["10.0.0.5"]}]}),
    )
    .expect("slice decodes");
    observed.add_gateway_slice(&gateway);
    let (plan, _) = plan_for(&set, &observed);
    let objects = objects(&set, &observed);
    let derived = of_kind(&objects, "Service", false)[0];
    assert_eq!(derived["metadata"]["name"], "derived-bsqa4s8pq5");
    assert_eq!(derived["spec"]["type"], "ClusterIP");
    assert!(derived["spec"].get("selector").is_none());
    let ports = derived["spec"]["ports"].as_array().expect("ports");
    assert_eq!(ports.len(), 2);
    for port in ports {
        let key = PortKey {
            service: ServiceKey::new("shop", "cart"),
            protocol: Protocol::Tcp,
            port: u16::try_from(port["port"].as_u64().expect("port")).expect("u16"),
            pod: None,
        };
        assert_eq!(
            port["targetPort"].as_u64(),
            plan.allocation.ports.get(&key).map(|p| u64::from(*p))
        );
    }
    let slices = of_kind(&objects, "EndpointSlice", false);
    assert_eq!(slices.len(), 1);
    let slice = slices[0];
    assert_eq!(
        slice["metadata"]["labels"]["kubernetes.io/service-name"],
        "derived-bsqa4s8pq5"
    );
    // Not an MCS slice: its endpoints are gateways, not the service's.
    assert!(
        slice["metadata"]["labels"]
            .get("multicluster.kubernetes.io/service-name")
            .is_none(),
        "{slice}"
    );
    assert_eq!(slice["endpoints"][0]["addresses"], json!(["10.0.0.5"]));
    assert_eq!(slice["ports"][0]["port"], ports[0]["targetPort"]);
}

/// `shop/cart`'s derived Service, with the ClusterIP `10.96.0.9`.
fn cart_derived_service() -> ObservedObject {
    ObservedObject::new(json!({
        "kind": "Service",
        "metadata": {"name": "derived-bsqa4s8pq5", "namespace": "shop", "uid": "u1",
            "labels": {"app.kubernetes.io/managed-by": "strait",
                "multicluster.kubernetes.io/service-name": "cart"}},
        "spec": {"clusterIPs": ["10.96.0.9"], "ports": []}
    }))
}

#[test]
fn ips_come_from_the_derived_service_and_make_the_import_ready() {
    let set = two_clusters(
        ServiceBuilder::new().port("http", 80, 8080).exported_at(10),
        ServiceBuilder::new().port("http", 80, 8080).exported_at(20),
    );
    let (pending, _) = plan_for(&set, &Observed::default());
    assert_eq!(pending.imports[0].reason, ReadyReason::Pending);
    assert!(!pending.imports[0].ready);
    let mut observed = Observed::default();
    observed.insert(cart_derived_service());
    let (ready, _) = plan_for(&set, &observed);
    assert_eq!(ready.imports[0].ips, [crate::testing::ip("10.96.0.9")]);
    assert_eq!(ready.imports[0].reason, ReadyReason::Ready);
}

#[test]
fn a_missing_namespace_or_a_foreign_import_gets_nothing() {
    let set = two_clusters(
        ServiceBuilder::new().port("http", 80, 8080).exported_at(10),
        ServiceBuilder::new().port("http", 80, 8080).exported_at(20),
    );
    let mut observed = Observed {
        namespaces: Some(BTreeSet::from(["db".to_owned()])),
        ..Observed::default()
    };
    let (plan, _) = plan_for(&set, &observed);
    assert!(plan.imports.is_empty());
    assert_eq!(
        plan.skipped.get(&ServiceKey::new("shop", "cart")),
        Some(&Skipped::NoNamespace)
    );
    observed.namespaces = None;
    observed.insert(ObservedObject::new(json!({
        "kind": "ServiceImport", "metadata": {"name": "cart", "namespace": "shop"}
    })));
    let (plan, _) = plan_for(&set, &observed);
    assert!(plan.imports.is_empty());
    assert_eq!(
        plan.skipped.get(&ServiceKey::new("shop", "cart")),
        Some(&Skipped::ForeignImport)
    );
    let desired = desired_objects(&plan, &merge(&set), &observed, API, Owners::Required, now());
    assert!(
        changes(desired, &observed).is_empty(),
        "another controller's import is never deleted"
    );
}

#[test]
fn a_full_range_leaves_the_import_not_ready() {
    let set = two_clusters(
        ServiceBuilder::new()
            .port("a", 80, 80)
            .port("b", 81, 81)
            .exported_at(10),
        ServiceBuilder::new().port("a", 80, 80).exported_at(20),
    );
    let merged = merge(&set);
    let plan = plan(&PlanInputs {
        recorded: None,
        merged: &merged,
        observed: &Observed::default(),
        range: &PortRange::new(20000, 20000).expect("range"),
        released: &Released::new(),
        refused_families: &BTreeSet::new(),
        settling: &Default::default(),
        pods: &BTreeMap::new(),
        sources: &Sources::default(),
        pod_ranges: None,
        quota: Default::default(),
    });
    let import = &plan.imports[0];
    assert!(!import.ready);
    assert_eq!(import.reason, ReadyReason::ImportPortsExhausted);
    assert_eq!(plan.allocation.exhausted.len(), 1);
    assert!(import.message.contains("20000-20000"), "{}", import.message);
}

/// One namespace exports more service ports than its quota: past the
/// quota its imports are not ready, and another namespace's imports keep
/// every port; ports a namespace already holds are never taken away.
#[test]
fn a_namespace_over_its_import_port_quota_leaves_others_unaffected() {
    let mut set = ClusterSet::default();
    for (namespace, name, ports) in [
        ("greedy", "a", 2u16),
        ("greedy", "b", 2),
        ("shop", "cart", 3),
    ] {
        let mut builder = ServiceBuilder::new().exported_at(10);
        for index in 0..ports {
            builder = builder.port(&format!("p{index}"), 80 + index, 80 + index);
        }
        builder.key = ServiceKey::new(namespace, name);
        let one = crate::testing::cluster_set(&[("c1", "net-a", builder)]);
        for (id, cluster) in one.clusters {
            let entry = set.clusters.entry(id).or_insert(cluster.clone());
            entry.services.extend(cluster.services);
        }
    }
    let merged = merge(&set);
    let quota = NamespaceQuota {
        import_ports: 3,
        pod_services: 1,
    };
    let plan_with = |observed: &Observed| {
        plan(&PlanInputs {
            recorded: None,
            merged: &merged,
            observed,
            range: &PortRange::default(),
            released: &Released::new(),
            refused_families: &BTreeSet::new(),
            settling: &Default::default(),
            pods: &BTreeMap::new(),
            sources: &Sources::default(),
            pod_ranges: None,
            quota,
        })
    };
    let plan = plan_with(&Observed::default());
    let import = |plan: &ImportPlan, name: &str| {
        plan.imports
            .iter()
            .find(|i| i.key.name == name)
            .cloned()
            .expect("planned")
    };
    let a = import(&plan, "a");
    let b = import(&plan, "b");
    let cart = import(&plan, "cart");
    assert!(a.ports.iter().all(|p| p.import_port.is_some()));
    assert_eq!(
        b.ports.iter().filter(|p| p.import_port.is_some()).count(),
        1,
        "greedy holds 3 of its 4 ports"
    );
    assert_eq!(b.reason, ReadyReason::NamespaceQuotaExceeded);
    assert!(
        b.message.contains("namespace greedy holds its quota of 3"),
        "{}",
        b.message
    );
    assert!(
        cart.ports.iter().all(|p| p.import_port.is_some()),
        "shop is untouched"
    );
    assert_eq!(plan.allocation.over_quota.len(), 1);
    assert!(plan.allocation.exhausted.is_empty());
}

#[test]
fn remote_pods_past_a_namespaces_quota_get_no_derived_service() {
    let pod = |cluster: &str, label: &str| PodRef {
        cluster: crate::model::ClusterId::new(cluster).expect("id"),
        label: label.to_owned(),
    };
    let remote = |labels: &[&str]| RemotePods {
        pods: labels.iter().map(|l| pod("c3", l)).collect(),
        over_cap: 0,
    };
    let pods = BTreeMap::from([
        (ServiceKey::new("greedy", "a"), remote(&["p1", "p2"])),
        (ServiceKey::new("greedy", "b"), remote(&["p3"])),
        (ServiceKey::new("shop", "pg"), remote(&["p4", "p5"])),
    ]);
    let kept = pods_within_quota(&pods, 2);
    let count = |namespace: &str, name: &str| {
        let held = &kept[&ServiceKey::new(namespace, name)];
        (held.pods.len(), held.over_cap)
    };
    assert_eq!(count("greedy", "a"), (2, 0));
    assert_eq!(
        count("greedy", "b"),
        (0, 1),
        "greedy's third pod is past its quota"
    );
    assert_eq!(count("shop", "pg"), (2, 0), "shop is untouched");
}

/// Plays the API server: applies `changes` to `observed` the way a server
/// would (uids assigned, ClusterIPs allocated, status kept apart).
fn serve(observed: &mut Observed, changes: Vec<Change>) {
    for change in changes {
        let Change::Apply { object, status } = change else {
            continue;
        };
        let kind = object["kind"].as_str().unwrap_or_default().to_owned();
        let name = object["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let key = ServiceKey::new("shop", "cart");
        let mut held = match kind.as_str() {
            "ServiceImport" => observed
                .imports
                .get(&key)
                .and_then(|o| o.raw().map(|raw| serde_json::Value::clone(raw))),
            "Service" => observed
                .derived
                .get(&key)
                .and_then(|o| o.raw().map(|raw| serde_json::Value::clone(raw))),
            _ => observed
                .slices
                .get(&("shop".to_owned(), name.clone()))
                .and_then(|o| o.raw().map(|raw| serde_json::Value::clone(raw))),
        }
        .unwrap_or_else(|| json!({"metadata": {"uid": format!("uid-{kind}")}}));
        if status {
            held["status"] = object["status"].clone();
        } else {
            let (uid, kept_status) = (held["metadata"]["uid"].clone(), held["status"].clone());
            let cluster_ips = held["spec"]["clusterIPs"].clone();
            held = object.clone();
            held["metadata"]["uid"] = uid;
            if !kept_status.is_null() {
                held["status"] = kept_status;
            }
            if kind == "Service" {
                held["spec"]["clusterIPs"] = if cluster_ips.is_null() {
                    json!(["10.96.0.9"])
                } else {
                    cluster_ips
                };
                held["spec"]["sessionAffinity"] = "None".into();
            }
        }
        observed.insert(ObservedObject::new(held));
    }
}

#[test]
fn a_plan_converges_and_an_edit_is_put_back() {
    let set = two_clusters(
        ServiceBuilder::new().port("http", 80, 8080).exported_at(10),
        ServiceBuilder::new().port("http", 80, 8080).exported_at(20),
    );
    let desired = |observed: &Observed| {
        let (plan, merged) = plan_for(&set, observed);
        desired_objects(&plan, &merged, observed, API, Owners::Required, now())
    };
    let mut observed = Observed::default();
    let mut rounds = 0;
    loop {
        let pending = changes(desired(&observed), &observed);
        if pending.is_empty() {
            break;
        }
        rounds += 1;
        assert!(rounds <= 4, "no convergence: {pending:?}");
        serve(&mut observed, pending);
    }
    // import → derived Service (needs the import's uid) → slices and ips.
    assert_eq!(rounds, 3);
    let import = observed.imports[&ServiceKey::new("shop", "cart")]
        .raw()
        .expect("an import is held whole");
    assert_eq!(import["spec"]["ips"], json!(["10.96.0.9"]));
    assert_eq!(import["status"]["conditions"][0]["reason"], "Ready");

    // Someone edits the derived Service's target port: it is put back.
    let key = ServiceKey::new("shop", "cart");
    let held = observed.derived.get_mut(&key).expect("derived");
    let mut edited = serde_json::Value::clone(held.raw().expect("an import is held whole"));
    edited["spec"]["ports"][0]["targetPort"] = 8080.into();
    *held = ObservedObject::new(edited);
    let repair = changes(desired(&observed), &observed);
    assert_eq!(
        repair.iter().map(Change::describe).collect::<Vec<_>>(),
        ["apply Service shop/derived-bsqa4s8pq5"]
    );
}

#[test]
fn the_last_unexport_deletes_what_strait_created() {
    let mut observed = Observed::default();
    for (kind, name) in [("ServiceImport", "cart"), ("Service", "derived-bsqa4s8pq5")] {
        observed.insert(ObservedObject::new(json!({
            "apiVersion": if kind == "Service" { "v1" } else { API },
            "kind": kind,
            "metadata": {"name": name, "namespace": "shop",
                "labels": {"app.kubernetes.io/managed-by": "strait",
                    "multicluster.kubernetes.io/service-name": "cart"}},
        })));
    }
    let set = two_clusters(
        ServiceBuilder::new().port("http", 80, 8080),
        ServiceBuilder::new().port("http", 80, 8080),
    );
    let deletes: Vec<String> = changes(objects(&set, &observed), &observed)
        .iter()
        .map(Change::describe)
        .collect();
    assert_eq!(
        deletes,
        [
            "delete ServiceImport shop/cart",
            "delete Service shop/derived-bsqa4s8pq5"
        ]
    );
}

#[test]
fn ip_families_shape_the_derived_service() {
    let mut dual = ServiceBuilder::new().port("http", 80, 8080).exported_at(10);
    dual.spec.ip_families = vec![IpFamily::IPv6, IpFamily::IPv4];
    let set = two_clusters(dual, ServiceBuilder::new().exported_at(20));
    let objects = objects(&set, &Observed::default());
    let derived = of_kind(&objects, "Service", false)[0];
    // Whatever this cluster allocates of both, in its own order: a
    // single-stack cluster gives one address rather than refusing.
    assert_eq!(derived["spec"]["ipFamilyPolicy"], "PreferDualStack");
    assert!(derived["spec"].get("ipFamilies").is_none(), "{derived}");
    // Until then the import says what the service asks for.
    let import = of_kind(&objects, "ServiceImport", false)[0];
    assert_eq!(import["spec"]["ipFamilies"], json!(["IPv6", "IPv4"]));

    // A single-stack IPv4 cluster allocated one address: the import carries
    // that family alone, so that ips[i] is of ipFamilies[i].
    let mut observed = Observed::default();
    let derived_with = |ips: &[&str]| {
        ObservedObject::new(json!({
            "kind": "Service",
            "metadata": {"name": "derived-bsqa4s8pq5", "namespace": "shop", "uid": "u1",
                "labels": {"app.kubernetes.io/managed-by": "strait",
                    "multicluster.kubernetes.io/service-name": "cart"}},
            "spec": {"clusterIPs": ips, "ports": []}
        }))
    };
    observed.insert(derived_with(&["10.96.0.9"]));
    let objects = super::tests::objects(&set, &observed);
    let import = of_kind(&objects, "ServiceImport", false)[0];
    assert_eq!(import["spec"]["ips"], json!(["10.96.0.9"]));
    assert_eq!(import["spec"]["ipFamilies"], json!(["IPv4"]));
    // A dual-stack cluster, IPv4 first: both, in the cluster's order.
    observed.insert(derived_with(&["10.96.0.9", "fd00::9"]));
    let objects = super::tests::objects(&set, &observed);
    let import = of_kind(&objects, "ServiceImport", false)[0];
    assert_eq!(import["spec"]["ips"], json!(["10.96.0.9", "fd00::9"]));
    assert_eq!(import["spec"]["ipFamilies"], json!(["IPv4", "IPv6"]));
}

#[test]
fn a_lagging_import_watch_deletes_no_derived_service() {
    let set = two_clusters(
        ServiceBuilder::new().port("http", 80, 8080).exported_at(10),
        ServiceBuilder::new().port("http", 80, 8080).exported_at(20),
    );
    // The Service and slice watches have delivered; the import's has not.
    let mut observed = Observed::default();
    for (kind, name) in [
        ("Service", "derived-bsqa4s8pq5"),
        ("EndpointSlice", "derived-bsqa4s8pq5-ipv4"),
    ] {
        observed.insert(ObservedObject::new(json!({
            "apiVersion": "v1", "kind": kind,
            "metadata": {"name": name, "namespace": "shop", "uid": format!("uid-{kind}"),
                "labels": {"app.kubernetes.io/managed-by": "strait",
                    "multicluster.kubernetes.io/service-name": "cart"}},
            "spec": {"clusterIPs": ["10.96.0.9"], "ports": [
                {"name": "http", "protocol": "TCP", "port": 80, "targetPort": 23950}]},
        })));
    }
    let (plan, merged) = plan_for(&set, &observed);
    let desired = desired_objects(&plan, &merged, &observed, API, Owners::Required, now());
    let planned: Vec<String> = changes(desired, &observed)
        .iter()
        .map(Change::describe)
        .collect();
    assert!(
        planned.iter().all(|c| c.starts_with("apply ServiceImport")),
        "{planned:?}"
    );
    assert_eq!(
        plan.allocation.ports.values().copied().collect::<Vec<_>>(),
        [23950],
        "the recorded port is kept"
    );
}

#[test]
fn a_refused_family_or_no_forwardable_port_means_no_derived_service() {
    let set = two_clusters(
        ServiceBuilder::new().port("http", 80, 8080).exported_at(10),
        ServiceBuilder::new().exported_at(20),
    );
    let merged = merge(&set);
    let observed = Observed::default();
    let refused = BTreeSet::from([ServiceKey::new("shop", "cart")]);
    let plan = plan(&PlanInputs {
        recorded: None,
        merged: &merged,
        observed: &observed,
        range: &PortRange::default(),
        released: &Released::new(),
        refused_families: &refused,
        settling: &Default::default(),
        pods: &BTreeMap::new(),
        sources: &Sources::default(),
        pod_ranges: None,
        quota: Default::default(),
    });
    assert_eq!(plan.imports[0].reason, ReadyReason::IpFamilyNotSupported);
    assert!(plan.imports[0].derived_service.is_none());
    let objects = desired_objects(&plan, &merged, &observed, API, Owners::Optional, now());
    assert!(of_kind(&objects, "Service", false).is_empty());
}

/// An import's reserved metadata is Strait's record: a headless import with
/// no import port and no derived Service still says so itself, and keys an
/// export asks for under reserved prefixes never reach it.
#[test]
fn an_imports_reserved_metadata_is_straits_even_with_nothing_to_record() {
    let forged = r#"[{"protocol":"TCP","port":80,"importPort":20001}]"#;
    let mut tenant = ServiceBuilder::new()
        .port("http", 80, 8080)
        .headless()
        .exported_at(10);
    if let Some(export) = &mut tenant.export {
        let annotations = &mut export.exported_annotations;
        annotations.insert(names::IMPORT_PORTS_ANNOTATION.to_owned(), forged.to_owned());
        annotations.insert(
            naming::DERIVED_SERVICE_ANNOTATION.to_owned(),
            "derived-victim".to_owned(),
        );
        annotations.insert("note".to_owned(), "kept".to_owned());
        export
            .exported_labels
            .insert(names::MANAGED_BY_LABEL.to_owned(), "someone".to_owned());
    }
    // Both clusters on one network: no remote pod, so nothing to record.
    let set = cluster_set(&[
        ("east-1", "net-a", tenant),
        (
            "east-2",
            "net-a",
            ServiceBuilder::new().port("http", 80, 8080).exported_at(20),
        ),
    ]);
    let objects = objects(&set, &Observed::default());
    let metadata = &of_kind(&objects, "ServiceImport", false)[0]["metadata"];
    assert_eq!(
        metadata["annotations"][names::IMPORT_PORTS_ANNOTATION],
        "[]"
    );
    assert!(
        metadata["annotations"]
            .get(naming::DERIVED_SERVICE_ANNOTATION)
            .is_none()
    );
    assert_eq!(metadata["annotations"]["note"], "kept");
    assert_eq!(metadata["labels"][names::MANAGED_BY_LABEL], "strait");
}

#[test]
fn replanning_the_services_written_gives_what_planning_every_service_gives() {
    let set = two_clusters(
        ServiceBuilder::new().port("http", 80, 8080).exported_at(10),
        ServiceBuilder::new().port("http", 80, 8080).exported_at(20),
    );
    let merged = merge(&set);
    let planned_whole = |observed: &Observed| with_inputs(&merged, observed, plan);
    let replanned = |mut earlier: ImportPlan, observed: &Observed| {
        let services = BTreeSet::from([ServiceKey::new("shop", "cart")]);
        with_inputs(&merged, observed, |inputs| {
            replan(&mut earlier, inputs, &services);
        });
        earlier
    };
    let pending = planned_whole(&Observed::default());
    assert!(!pending.imports[0].ready);

    // The derived Service got its ClusterIP: the import is Ready with it.
    let mut observed = Observed::default();
    observed.insert(cart_derived_service());
    let ready = replanned(pending.clone(), &observed);
    assert_eq!(ready.imports, planned_whole(&observed).imports);
    assert!(ready.imports[0].ready);

    // The namespace is gone: skipped, as a whole plan skips it.
    observed.namespaces = Some(BTreeSet::new());
    let gone = replanned(ready, &observed);
    let whole = planned_whole(&observed);
    assert!(gone.imports.is_empty());
    assert_eq!(gone.skipped, whole.skipped);
    assert_eq!(
        gone.skipped.get(&ServiceKey::new("shop", "cart")),
        Some(&Skipped::NoNamespace)
    );

    // And back: planned again in its place.
    observed.namespaces = None;
    assert_eq!(
        replanned(gone, &observed).imports,
        planned_whole(&observed).imports
    );
}
