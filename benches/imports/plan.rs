//! The import reconciler's pure work for one cluster of a large set: the
//! plan, the desired objects and the diff against what the cluster holds,
//! against an empty cluster and against a converged one. Built with the
//! crate's public API only (as `benches/routes.rs` builds its set).

use std::collections::BTreeSet;
use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};
use strait::discovery::objects::EndpointSlice;
use strait::discovery::observed::{Observed, ObservedObject};
use strait::imports::diff::{Change, changes};
use strait::imports::render::{Owners, desired_objects};
use strait::imports::{ImportPlan, PlanInputs, PortRange, plan};
use strait::merge::{self, MergedSet};
use strait::model::{
    Cluster, ClusterId, ClusterService, ClusterSet, Endpoint, EndpointGroup, EndpointPort, Export,
    GatewayAddress, GatewayHost, NetworkId, Protocol, ServiceKey, ServicePort, ServiceSpec,
};

use crate::{Result, Row, spread};

const CLUSTERS: u32 = 10;
const PORTS_PER_SERVICE: usize = 2;
const ENDPOINTS_PER_SERVICE: u32 = 3;
const NAMESPACES: u32 = 50;
const GATEWAY_PODS: u8 = 3;
/// Twice the ports the full set needs, so probing stays short (the default
/// 20000-29999 would be exactly full with 5,000 × 2 import ports).
const RANGE: (u16, u16) = (20_000, 39_999);
const API: &str = "multicluster.x-k8s.io/v1alpha1";

fn network_of(cluster: u32) -> &'static str {
    match cluster {
        0..=3 => "net-a",
        4..=6 => "net-b",
        _ => "net-c",
    }
}

fn service_key(service: u32) -> ServiceKey {
    ServiceKey::new(
        format!("ns{}", service % NAMESPACES),
        format!("svc{service}"),
    )
}

fn cluster_service(cluster: u32, service: u32) -> ClusterService {
    let port = |name: &str, port| ServicePort {
        name: name.to_owned(),
        protocol: Protocol::Tcp,
        port,
        app_protocol: None,
    };
    let target = |name: &str, port| EndpointPort {
        name: name.to_owned(),
        protocol: Protocol::Tcp,
        port,
    };
    let created = Timestamp::from_second(1_700_000_000 + i64::from(cluster) * 3_600)
        .expect("a valid timestamp");
    let address = |index: u32| {
        let n = service * ENDPOINTS_PER_SERVICE + index;
        IpAddr::V4(Ipv4Addr::from((10 << 24) | (cluster << 20) | n))
    };
    ClusterService {
        key: service_key(service),
        spec: ServiceSpec::cluster_set_ip(vec![port("http", 80), port("grpc", 9090)]),
        export: Some(Export {
            created: Some(created),
            ..Export::default()
        }),
        endpoint_groups: vec![EndpointGroup {
            ports: vec![target("http", 8080), target("grpc", 9091)].into(),
            endpoints: (0..ENDPOINTS_PER_SERVICE)
                .map(|i| Endpoint::ready(address(i)))
                .collect(),
        }],
    }
}

fn cluster_set(services: u32) -> ClusterSet {
    let mut set = ClusterSet::default();
    for c in 0..CLUSTERS {
        let id = ClusterId::new(&format!("c{c}")).expect("a valid cluster id");
        let network = NetworkId::new(network_of(c)).expect("a valid network id");
        let mut cluster = Cluster::new(id.clone(), network, format!("bench/c{c}"));
        cluster.gateways.push(GatewayAddress {
            host: GatewayHost::Ip(IpAddr::V4(Ipv4Addr::new(203, 0, 113, 10 + c as u8))),
            port: 15008,
        });
        for s in 0..services {
            let service = cluster_service(c, s);
            cluster.services.insert(service.key.clone(), service.into());
        }
        set.clusters.insert(id, cluster);
    }
    set
}

/// The viewer's cluster before any import: its namespaces and the
/// EndpointSlice of its gateway Service (three ready pods).
fn empty_cluster() -> Observed {
    let mut observed = Observed::default();
    let namespaces = (0..NAMESPACES)
        .map(|n| format!("ns{n}"))
        .chain(["default".to_owned(), "strait-system".to_owned()]);
    for namespace in namespaces {
        observed.insert(ObservedObject::new(
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}),
        ));
    }
    let endpoints: Vec<Value> = (0..GATEWAY_PODS)
        .map(|pod| {
            json!({"addresses": [format!("10.244.{pod}.7")],
                "nodeName": format!("node-{pod}"), "zone": format!("zone-{pod}")})
        })
        .collect();
    let gateway: EndpointSlice =
        serde_json::from_value(json!({"addressType": "IPv4", "endpoints": endpoints}))
            .expect("the gateway slice decodes");
    observed.add_gateway_slice(&gateway);
    observed
}

fn range() -> PortRange {
    PortRange::new(RANGE.0, RANGE.1).expect("a valid range")
}

fn now() -> Timestamp {
    Timestamp::from_second(1_800_000_000).expect("a valid timestamp")
}

/// What the reconciler computes in one pass, and how long each step took.
struct Pass {
    plan: ImportPlan,
    /// How many objects it rendered.
    desired: usize,
    changes: Vec<Change>,
    times: [Duration; 3],
}

fn pass(merged: &MergedSet, observed: &Observed, now: Timestamp) -> Pass {
    let (released, refused) = (Default::default(), BTreeSet::new());
    let started = Instant::now();
    let plan = plan(&PlanInputs {
        recorded: None,
        merged: black_box(merged),
        observed: black_box(observed),
        range: &range(),
        released: &released,
        refused_families: &refused,
        settling: &Default::default(),
        pods: &Default::default(),
        sources: &Default::default(),
        pod_ranges: None,
        quota: Default::default(),
    });
    let planned = Instant::now();
    let desired = desired_objects(&plan, merged, observed, API, Owners::Required, now);
    let rendered = Instant::now();
    let rendered_count = desired.len();
    let changes = changes(black_box(desired), observed);
    let diffed = Instant::now();
    Pass {
        plan,
        desired: rendered_count,
        changes,
        times: [planned - started, rendered - planned, diffed - rendered],
    }
}

/// Plays the API server: applies `changes` the way a server would, adding
/// what it adds (uid, resourceVersion, creationTimestamp, generation; for a
/// Service its ClusterIPs and spec defaults) and keeping `status` apart.
/// There are no deletes to serve in this set.
fn serve(observed: &mut Observed, changes: Vec<Change>, served: &mut u32) {
    for change in changes {
        let Change::Apply { object, status } = change else {
            panic!("a delete in a set that only grows: {change:?}");
        };
        let text = |value: &Value| value.as_str().unwrap_or_default().to_owned();
        let (kind, namespace, name) = (
            text(&object["kind"]),
            text(&object["metadata"]["namespace"]),
            text(&object["metadata"]["name"]),
        );
        let held = match kind.as_str() {
            "ServiceImport" => observed.imports.get(&ServiceKey::new(&*namespace, &*name)),
            "Service" => {
                let service =
                    text(&object["metadata"]["labels"]["multicluster.kubernetes.io/service-name"]);
                observed
                    .derived
                    .get(&ServiceKey::new(&*namespace, &*service))
            }
            "EndpointSlice" => observed.slices.get(&(namespace.clone(), name.clone())),
            other => panic!("the plan wrote a {other}"),
        };
        let mut held = held
            .and_then(|o| o.raw().map(|raw| serde_json::Value::clone(raw)))
            .unwrap_or_else(|| {
                *served += 1;
                json!({"metadata": {
                    "uid": format!("00000000-0000-4000-8000-{:012x}", *served),
                    "resourceVersion": served.to_string(),
                    "creationTimestamp": "2026-12-01T00:00:00Z",
                    "generation": 1,
                }})
            });
        if status {
            held["status"] = object["status"].clone();
        } else {
            let server = held["metadata"].clone();
            let kept_status = held["status"].clone();
            let kept_ips = held["spec"]["clusterIPs"].clone();
            held = object;
            for field in ["uid", "resourceVersion", "creationTimestamp", "generation"] {
                held["metadata"][field] = server[field].clone();
            }
            if !kept_status.is_null() {
                held["status"] = kept_status;
            }
            if kind == "Service" {
                let ips = if kept_ips.is_null() {
                    *served += 1;
                    let ip = Ipv4Addr::from((10 << 24) | (96 << 16) | *served);
                    json!([ip.to_string()])
                } else {
                    kept_ips
                };
                let spec = &mut held["spec"];
                spec["clusterIP"] = ips[0].clone();
                spec["clusterIPs"] = ips;
                spec["ipFamilies"] = json!(["IPv4"]);
                spec["sessionAffinity"] = "None".into();
                spec["internalTrafficPolicy"] = "Cluster".into();
            }
        }
        observed.insert(ObservedObject::new(held));
    }
}

/// Applies what the plan asks for until it asks for nothing: the cluster
/// after the reconciler's passes. The number of passes it took.
fn converge(merged: &MergedSet, observed: &mut Observed) -> Result<usize> {
    let mut served = 0;
    for passes in 1..=6 {
        let Pass { changes, .. } = pass(merged, observed, now());
        if changes.is_empty() {
            return Ok(passes - 1);
        }
        serve(observed, changes, &mut served);
    }
    Err("the plan did not converge within 5 passes".to_owned())
}

fn check_empty(pass: &Pass, services: usize) -> Result<()> {
    let ports = services * PORTS_PER_SERVICE;
    if pass.plan.imports.len() != services || pass.plan.allocation.ports.len() != ports {
        return Err(format!(
            "against an empty cluster: {} imports and {} import ports, not {services} and {ports}",
            pass.plan.imports.len(),
            pass.plan.allocation.ports.len()
        ));
    }
    // Without the import's uid, the derived Service waits for the next pass.
    if pass.desired != 2 * services || pass.changes.len() != pass.desired {
        return Err(format!(
            "against an empty cluster: {} desired objects and {} changes, not {} of each",
            pass.desired,
            pass.changes.len(),
            2 * services
        ));
    }
    Ok(())
}

fn check_converged(pass: &Pass, observed: &Observed, services: usize) -> Result<()> {
    // Import, its status, derived Service, one IPv4 slice.
    if pass.desired != 4 * services {
        return Err(format!(
            "converged: {} desired objects, not {}",
            pass.desired,
            4 * services
        ));
    }
    if let Some(change) = pass.changes.first() {
        return Err(format!(
            "converged, yet {} changes, the first: {}",
            pass.changes.len(),
            change.describe()
        ));
    }
    let ready = pass.plan.imports.iter().filter(|i| i.ready).count();
    if ready != services || observed.derived.len() != services {
        return Err(format!(
            "converged: {ready} ready imports, {} derived Services, not {services}",
            observed.derived.len()
        ));
    }
    Ok(())
}

/// The JSON text size of the objects held as JSON (Strait's intact slices
/// are held as their digest), in MiB.
fn size_mib(observed: &Observed) -> f64 {
    let objects = observed
        .imports
        .values()
        .chain(observed.derived.values())
        .chain(observed.slices.values());
    let bytes: usize = objects
        .map(|o| o.raw().map_or(0, |raw| raw.to_string().len()))
        .sum();
    bytes as f64 / (1024.0 * 1024.0)
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

/// Measures `rounds` rounds for a set of `services` services (after one
/// untimed warm-up when `warm_up`).
pub(crate) fn run(services: u32, rounds: usize, warm_up: bool, rows: &mut Vec<Row>) -> Result<()> {
    let built = Instant::now();
    let set = cluster_set(services);
    let merged = merge::merge(&set);
    let empty = empty_cluster();
    let mut converged = empty.clone();
    let passes = converge(&merged, &mut converged)?;
    println!(
        "imports bench: plan: {CLUSTERS} clusters, {services} services × {PORTS_PER_SERVICE} ports \
         exported by every cluster, import ports in {}-{}, {GATEWAY_PODS} gateway pods; converged \
         in {passes} passes ({} objects, {:.1} MiB of JSON held); set up in {:.1} s",
        RANGE.0,
        RANGE.1,
        converged.imports.len() + converged.derived.len() + converged.slices.len(),
        size_mib(&converged),
        built.elapsed().as_secs_f64()
    );

    // Rows: merge, then plan / desired / diff / total for each cluster state.
    let states = ["empty cluster", "converged cluster"];
    let mut merge_ms = Vec::new();
    let mut phases: [[Vec<f64>; 4]; 2] = Default::default();
    let mut counts = [(0, 0); 2];
    for round in 0..rounds + usize::from(warm_up) {
        let timed = !warm_up || round > 0;
        let started = Instant::now();
        let merged = merge::merge(black_box(&set));
        let merge_time = started.elapsed();
        // One minute later: an unchanged condition must keep its time.
        let later = Timestamp::from_second(now().as_second() + 60).expect("a valid timestamp");
        for (index, observed) in [&empty, &converged].into_iter().enumerate() {
            let pass = pass(&merged, observed, later);
            match index {
                0 => check_empty(&pass, services as usize)?,
                _ => check_converged(&pass, observed, services as usize)?,
            }
            counts[index] = (pass.desired, pass.changes.len());
            if timed {
                let total: Duration = pass.times.iter().sum();
                for (phase, time) in pass.times.iter().chain([&total]).enumerate() {
                    phases[index][phase].push(ms(*time));
                }
            }
            drop(pass);
        }
        if timed {
            merge_ms.push(ms(merge_time));
        }
        drop(merged);
    }

    let variant = if rounds > 1 {
        format!("median (min–max) of {rounds} rounds")
    } else {
        "one round".to_owned()
    };
    println!("\n### Import plan for one cluster of {services} services, ms, {variant}\n");
    println!(
        "| cluster holds | desired objects | changes | plan | desired_objects | diff | plan + desired + diff |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for (index, state) in states.iter().enumerate() {
        let cells: Vec<String> = phases[index].iter().map(|v| spread(v, 1)).collect();
        println!(
            "| {state} | {} | {} | {} |",
            counts[index].0,
            counts[index].1,
            cells.join(" | ")
        );
    }
    println!(
        "\n`merge::merge` of the set (the input of every pass, not in the rows above): {} ms",
        spread(&merge_ms, 1)
    );

    let names = ["plan", "desired_objects", "diff", "plan + desired + diff"];
    for (index, state) in states.iter().enumerate() {
        for (phase, name) in names.iter().enumerate() {
            for value in &phases[index][phase] {
                rows.push(Row {
                    scenario: format!("plan: {state}"),
                    workload: format!("{name}: round"),
                    value: *value,
                    unit: "ms",
                });
            }
        }
    }
    for value in &merge_ms {
        rows.push(Row {
            scenario: "plan".to_owned(),
            workload: "merge: round".to_owned(),
            value: *value,
            unit: "ms",
        });
    }
    Ok(())
}
