//! Headless services with pods on another network, against the in-process
//! API servers (see the parent's doc): each ready remote pod gets a per-pod
//! derived Service, up to `max_headless_endpoints`, with its own import
//! port and a ClusterIP the API server allocates, and a gateway slice; the
//! local cluster's own pods get none; pods beyond the cap are counted in
//! the import's Ready message; a pod that goes away frees its place without
//! disturbing the others; and the gateway's DNS answers each remote pod's
//! per-pod name with its derived Service's ClusterIP.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr};

use strait::dns::{Zone, answer};
use strait::imports::naming::pod_service_name;
use strait::model::ClusterId;
use strait::model::PodRef;
use strait::routing::RouteTable;

use super::*;

const CAP: usize = 2;

fn pg() -> ServiceKey {
    ServiceKey::new("db", "pg")
}

fn remote_pod(label: &str) -> PodRef {
    PodRef {
        cluster: ClusterId::new("c2").expect("a cluster id"),
        label: label.to_owned(),
    }
}

/// The EndpointSlice of `db/pg` with `pods` (hostname, address), all ready.
fn pg_slice(pods: &[(&str, &str)]) -> Value {
    let endpoints: Vec<Value> = pods
        .iter()
        .map(|(host, ip)| json!({"addresses": [ip], "hostname": host, "conditions": {"ready": true}}))
        .collect();
    json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": "pg-abcde", "namespace": "db",
            "labels": {"kubernetes.io/service-name": "pg"}},
        "addressType": "IPv4", "endpoints": endpoints,
        "ports": [{"name": "pg", "port": 5432, "protocol": "TCP"}]})
}

/// `db/pg`, headless, exported by `server` with the ready `pods`.
fn export_pg(server: &ApiServer, version: &str, pods: &[(&str, &str)]) {
    server.apply(namespace("db"));
    server.apply(json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "pg", "namespace": "db"},
        "spec": {"clusterIP": "None",
            "ports": [{"name": "pg", "port": 5432, "protocol": "TCP"}]}}));
    let mut object = export("pg", version);
    object["metadata"]["namespace"] = "db".into();
    server.apply(object);
    server.apply(pg_slice(pods));
}

const REMOTE: [(&str, &str); 3] = [
    ("pg-0", "10.2.0.10"),
    ("pg-1", "10.2.0.11"),
    ("pg-2", "10.2.0.12"),
];

/// The parent's world (c1 on net-a, c2 on net-b) with `db/pg` exported by
/// both: three pods in c2, one in c1; a gateway capped at [`CAP`] pods.
async fn start() -> (World, Started) {
    start_in(PortRange::default()).await
}

/// As [`start`], with the import ports taken from `range`.
async fn start_in(range: PortRange) -> (World, Started) {
    let world = World::new().await;
    export_pg(&world.remote, "v1alpha1", &REMOTE);
    export_pg(&world.local, "v1beta1", &[("pg-local", "10.1.0.9")]);
    let local = world.local.write_kubeconfig(world.dir.path(), "local");
    let remote = world.remote.write_kubeconfig(world.dir.path(), "remote");
    let mut options = options(&local, &[&remote], "gw-a", range);
    options.writes.imports = options.writes.imports.map(|imports| ImportOptions {
        max_headless_endpoints: CAP,
        ..imports
    });
    let handle = Started::start(options).await.expect("the source starts");
    (world, handle)
}

fn pod_service(world: &World, pod: &PodRef) -> Option<Value> {
    world
        .local
        .object("Service", "db", &pod_service_name(&pg(), pod))
}

fn pod_slice(world: &World, pod: &PodRef) -> Option<Value> {
    let name = format!("{}-ipv4", pod_service_name(&pg(), pod));
    world.local.object("EndpointSlice", "db", &name)
}

fn ready_message(world: &World) -> String {
    let import = world.local.object("ServiceImport", "db", "pg");
    let conditions = import
        .as_ref()
        .and_then(|i| i["status"]["conditions"].as_array());
    conditions
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Ready" && c["status"] == "True")
        .and_then(|c| c["message"].as_str().map(str::to_owned))
        .unwrap_or_default()
}

/// Waits until exactly the remote pods `labels` (of pg-0..pg-2) have a
/// per-pod Service with a ClusterIP and a slice, and the Ready message
/// says `message`; returns each Service.
async fn pods_until(world: &World, labels: &[&str], message: &str) -> Vec<Value> {
    let done = || {
        REMOTE.iter().all(|(label, _)| {
            let pod = remote_pod(label);
            let service = pod_service(world, &pod);
            let slice = pod_slice(world, &pod);
            if labels.contains(label) {
                service.is_some_and(|s| s["spec"]["clusterIP"].is_string()) && slice.is_some()
            } else {
                service.is_none() && slice.is_none()
            }
        }) && ready_message(world).contains(message)
    };
    until(&format!("per-pod Services for {labels:?}"), done, || {
        let services: Vec<_> = REMOTE
            .iter()
            .map(|(l, _)| pod_service(world, &remote_pod(l)))
            .collect();
        format!("{services:#?}\nReady: {:?}", ready_message(world))
    })
    .await;
    labels
        .iter()
        .map(|label| pod_service(world, &remote_pod(label)).expect("checked"))
        .collect()
}

fn cluster_ip(service: &Value) -> IpAddr {
    let ip: Ipv4Addr = service["spec"]["clusterIP"]
        .as_str()
        .and_then(|ip| ip.parse().ok())
        .unwrap_or_else(|| panic!("an allocated ClusterIP: {service:#?}"));
    IpAddr::V4(ip)
}

fn target_port(service: &Value) -> u64 {
    service["spec"]["ports"][0]["targetPort"]
        .as_u64()
        .expect("a numeric targetPort")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remote_headless_pods_get_a_derived_service_each_up_to_the_cap() {
    let (world, handle) = start().await;
    let message = "2 of 2 pods on other networks have an address here; 1 more have none";
    let services = pods_until(&world, &["pg-0", "pg-1"], message).await;
    let import = world
        .local
        .object("ServiceImport", "db", "pg")
        .expect("the import");
    assert_eq!(import["spec"]["type"], "Headless");
    let own = derived_service_name(&pg());
    assert!(world.local.object("Service", "db", &own).is_none());
    let local_pod = PodRef {
        cluster: ClusterId::new("c1").expect("a cluster id"),
        label: "pg-local".to_owned(),
    };
    assert!(
        pod_service(&world, &local_pod).is_none(),
        "a local pod gets none"
    );

    let mut ports = Vec::new();
    for (service, label) in services.iter().zip(["pg-0", "pg-1"]) {
        let pod = remote_pod(label);
        let name = pod_service_name(&pg(), &pod);
        assert_eq!(service["metadata"]["name"], name.as_str());
        let metadata = &service["metadata"];
        assert_eq!(metadata["labels"]["app.kubernetes.io/managed-by"], "strait");
        assert_eq!(
            metadata["labels"]["multicluster.kubernetes.io/service-name"],
            "pg"
        );
        assert_eq!(metadata["annotations"]["strait.dev/pod-cluster"], "c2");
        assert_eq!(metadata["annotations"]["strait.dev/pod"], label);
        let owner = &metadata["ownerReferences"][0];
        assert_eq!(
            (&owner["kind"], &owner["name"]),
            (&json!("ServiceImport"), &json!("pg"))
        );
        assert_eq!(owner["uid"], import["metadata"]["uid"]);
        assert_eq!(service["spec"]["type"], "ClusterIP");
        assert!(service["spec"].get("selector").is_none());
        assert_eq!(service["spec"]["ports"][0]["port"], 5432);
        let port = target_port(service);
        assert!(PortRange::default().contains(u16::try_from(port).expect("a port")));
        ports.push((port, cluster_ip(service)));
        // Its slice: the gateway pods on its import port.
        let slice = pod_slice(&world, &pod).expect("checked");
        assert_eq!(
            slice["metadata"]["labels"]["kubernetes.io/service-name"],
            name.as_str()
        );
        assert_eq!(slice["ports"][0]["port"], port);
        assert_eq!(slice["addressType"], "IPv4");
        let addresses = slice_addresses(&slice);
        assert_eq!(addresses, ["10.1.0.50", "10.1.0.51"]);
    }
    assert_ne!(ports[0].0, ports[1].0, "each pod its own import port");
    assert_ne!(ports[0].1, ports[1].1, "and its own ClusterIP");
    // Nothing else was ever written as a Service in db.
    let written: BTreeSet<String> = world
        .local
        .writes()
        .iter()
        .filter_map(|w| w.path.strip_prefix("/api/v1/namespaces/db/services/"))
        .map(|rest| rest.split('/').next().unwrap_or_default().to_owned())
        .collect();
    let expected: BTreeSet<String> = ["pg-0", "pg-1"]
        .map(|l| pod_service_name(&pg(), &remote_pod(l)))
        .into();
    assert_eq!(written, expected);

    // What a replica's routes get: the two pods with their ClusterIPs.
    let want: BTreeMap<(ServiceKey, PodRef), Vec<IpAddr>> = services
        .iter()
        .zip(["pg-0", "pg-1"])
        .map(|(service, label)| ((pg(), remote_pod(label)), vec![cluster_ip(service)]))
        .collect();
    let snapshot = handle
        .wait_for(WAIT, |s| {
            s.local_imports
                .as_ref()
                .is_some_and(|l| l.observed.pod_addresses() == want)
        })
        .await;
    let local = snapshot.local_imports.as_ref().expect("local imports");
    assert_eq!(local.observed.pod_addresses(), want);
    let held: Vec<_> = local.observed.pod_services.keys().collect();
    assert_eq!(held, want.keys().collect::<Vec<_>>(), "exactly these two");
    assert!(local.observed.derived.keys().all(|key| *key != pg()));
    // The routes as `gateway::reload::kube_routes` builds them, and DNS.
    let set = snapshot.set.as_ref().expect("a valid set");
    let mut table = RouteTable::build(set, &strait::merge::merge(set), "c1").expect("routes of c1");
    table.set_pod_addresses(&local.observed.pod_addresses());
    let zone = Zone::new("clusterset.local", 5, 5).expect("a zone");
    let ask = |labels: &[&str]| -> Vec<String> {
        let name = zone.name(labels).expect("a name");
        let reply = answer(&table, &zone, &name, hickory_proto::rr::RecordType::A);
        reply.answers.iter().map(ToString::to_string).collect()
    };
    for ((_, pod), ips) in &want {
        let labels = [pod.label.as_str(), "c2", "pg", "db", "svc"];
        let name = format!("{}.c2.pg.db.svc.clusterset.local.", pod.label);
        assert_eq!(ask(&labels), [format!("{name} 5 IN A {}", ips[0])]);
    }
    assert!(
        ask(&["pg-2", "c2", "pg", "db", "svc"]).is_empty(),
        "over the cap"
    );
    assert_eq!(
        ask(&["pg-local", "c1", "pg", "db", "svc"]),
        ["pg-local.c1.pg.db.svc.clusterset.local. 5 IN A 10.1.0.9"],
        "a local pod by its own address"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_pod_that_goes_away_makes_room_without_churning_the_others() {
    let (world, _handle) = start().await;
    let before = pods_until(&world, &["pg-0", "pg-1"], "1 more have none").await;

    world.remote.apply(pg_slice(&REMOTE[1..]));
    let message = "2 of 2 pods on other networks have an address here.";
    let after = pods_until(&world, &["pg-1", "pg-2"], message).await;
    assert!(!ready_message(&world).contains("more have none"));
    assert!(
        pod_slice(&world, &remote_pod("pg-0")).is_none(),
        "its slice goes too"
    );
    // pg-1: the same Service, ClusterIP and import port.
    let (old, new) = (&before[1], &after[0]);
    assert_eq!(
        old["metadata"]["uid"], new["metadata"]["uid"],
        "not recreated"
    );
    assert_eq!(cluster_ip(old), cluster_ip(new));
    assert_eq!(target_port(old), target_port(new));
    // pg-2: its own import port, in the range.
    let pg2 = target_port(&after[1]);
    assert_ne!(pg2, target_port(new));
    assert!(PortRange::default().contains(u16::try_from(pg2).expect("a port")));
    assert_ne!(cluster_ip(&after[1]), cluster_ip(new));
}

/// A port freed by a pod that went away waits out the release grace (60 s
/// here) before another pod gets it: with a range of two ports, pg-2 gets
/// no Service while pg-0's port is in its grace period, though the cap has
/// room for it, so kube-proxy or a replica still acting on pg-0's mapping
/// cannot send a connection to pg-2.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_port_freed_by_a_pod_is_not_handed_to_another_within_its_grace() {
    let range = PortRange::new(31200, 31201).expect("a range");
    let (world, _handle) = start_in(range).await;
    let before = pods_until(&world, &["pg-0", "pg-1"], "1 more have none").await;
    world.remote.apply(pg_slice(&REMOTE[1..]));
    let message = "1 of 2 pods on other networks have an address here.";
    let after = pods_until(&world, &["pg-1"], message).await;
    assert_eq!(target_port(&before[1]), target_port(&after[0]));
    // A little longer: still nothing for pg-2.
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert!(pod_service(&world, &remote_pod("pg-2")).is_none());
}
