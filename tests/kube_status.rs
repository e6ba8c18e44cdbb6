//! Export status against live API servers: the `Valid` and `Conflict`
//! conditions on the local cluster's ServiceExports, written by the one
//! gateway that holds the export status Lease, and only when they change.
//!
//! No Kubernetes API server can be installed on these machines, so these
//! tests run `kube_api::ApiServer`, an in-process server that stands in for
//! one and speaks the API's real wire protocol over HTTP: list and watch
//! with resource versions, GET, POST and PUT of Leases with
//! resource-version preconditions (`409 Conflict`, `409 AlreadyExists`),
//! and JSON merge patches of the ServiceExport `status` subresource. The
//! real kube-rs client reaches it through ordinary kubeconfig files. What
//! only a real server shows (RBAC, admission, validation of the conditions
//! against the CRD schema, clock skew between nodes) is not covered here.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on what they set up

mod kube_api;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use kube_api::admin::{admin_address, get_until};
use kube_api::fixtures::{Setup, Started};
use kube_api::fixtures::{export, populate, service, slice};
use kube_api::{ApiServer, until};
use serde_json::{Value, json};
use strait::controller::{ExportStatusOptions, ExportStatusReport};
use strait::discovery::kube::{KubeHandle, SourceSnapshot, load_once};
use strait::model::ServiceKey;

/// Longest wait for one expected change.
const WAIT: Duration = Duration::from_secs(10);
/// The Lease the writers compete for.
const LEASE: &str = "strait-export-status";
const NAMESPACE: &str = "strait-system";

/// Export status with short Lease timings, so that leadership moves fast.
fn status_options(identity: &str, lease_duration: Duration) -> ExportStatusOptions {
    ExportStatusOptions {
        lease_name: LEASE.to_owned(),
        lease_namespace: Some(NAMESPACE.to_owned()),
        identity: Some(identity.to_owned()),
        lease_duration,
        renew_deadline: lease_duration.mul_f64(0.6),
        retry_period: Duration::from_millis(100),
    }
}

fn options(local: &Path, remotes: &[&Path], identity: Option<&str>) -> Setup {
    let mut setup = Setup::reading(kube_api::fixtures::kube_options(local, remotes));
    setup.writes.export_status = identity.map(|id| status_options(id, Duration::from_secs(1)));
    setup
}

// ---- waiting ---------------------------------------------------------------

/// Waits until the local ServiceExport `shop/<name>` has conditions that
/// satisfy `done`, and returns them.
async fn conditions_until(
    server: &ApiServer,
    name: &str,
    what: &str,
    done: impl Fn(&[Value]) -> bool,
) -> Vec<Value> {
    until(
        what,
        || done(&server.export_conditions(name)),
        || {
            format!(
                "conditions of shop/{name}: {:#?}",
                server.export_conditions(name)
            )
        },
    )
    .await;
    server.export_conditions(name)
}

async fn report_until(
    handle: &Started,
    what: &str,
    done: impl Fn(&ExportStatusReport) -> bool,
) -> ExportStatusReport {
    let mut reports = handle.export_status().expect("export status runs");
    let _ = tokio::time::timeout(WAIT, reports.wait_for(|r| done(r))).await;
    let report = reports.borrow().clone();
    assert!(done(&report), "timed out waiting for {what}: {report:?}");
    report
}

async fn snapshot_until(
    handle: &KubeHandle,
    what: &str,
    done: impl Fn(&SourceSnapshot) -> bool,
) -> Arc<SourceSnapshot> {
    let snapshot = handle.wait_for(WAIT, |s| done(s)).await;
    assert!(done(&snapshot), "timed out waiting for {what}");
    snapshot
}

// ---- reading conditions ----------------------------------------------------

fn condition<'a>(conditions: &'a [Value], type_: &str) -> Option<&'a Value> {
    conditions.iter().find(|c| c["type"] == type_)
}

/// `(status, reason)` of a condition, if present.
fn says(conditions: &[Value], type_: &str) -> Option<(String, String)> {
    let c = condition(conditions, type_)?;
    Some((
        c["status"].as_str()?.to_owned(),
        c["reason"].as_str()?.to_owned(),
    ))
}

fn is(conditions: &[Value], type_: &str, status: &str, reason: &str) -> bool {
    says(conditions, type_) == Some((status.to_owned(), reason.to_owned()))
}

fn holder(server: &ApiServer) -> Option<String> {
    server
        .object("Lease", NAMESPACE, LEASE)
        .and_then(|lease| lease["spec"]["holderIdentity"].as_str().map(str::to_owned))
}

fn generation(server: &ApiServer, name: &str) -> i64 {
    server
        .object("ServiceExport", "shop", name)
        .and_then(|e| e["metadata"]["generation"].as_i64())
        .expect("the export has a generation")
}

/// The ready endpoint addresses of the local `shop/cart`.
fn cart_endpoints(snapshot: &SourceSnapshot) -> Vec<String> {
    let Ok(set) = &snapshot.set else {
        return Vec::new();
    };
    set.cluster("c1")
        .and_then(|c| c.services.get(&ServiceKey::new("shop", "cart")))
        .map(|s| {
            s.endpoint_groups
                .iter()
                .flat_map(|g| g.endpoints.iter())
                .map(|e| e.address.to_string())
                .collect()
        })
        .unwrap_or_default()
}

// ---- fixtures ----------------------------------------------------------------

/// `shop/cart` in c2 disagrees with c1's: one more port and ClientIP
/// affinity, exported a month after c1's.
fn conflicting_cart(version: &str) -> [Value; 2] {
    [
        json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "cart", "namespace": "shop"},
            "spec": {"type": "ClusterIP", "clusterIP": "10.96.0.20", "sessionAffinity": "ClientIP",
                "ports": [{"name": "http", "port": 80, "protocol": "TCP"},
                          {"name": "admin", "port": 9090, "protocol": "TCP"}]}}),
        json!({"apiVersion": format!("multicluster.x-k8s.io/{version}"), "kind": "ServiceExport",
            "metadata": {"name": "cart", "namespace": "shop",
                "creationTimestamp": "2025-02-01T00:00:00Z"}}),
    ]
}

fn external_name(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": "shop"},
        "spec": {"type": "ExternalName", "externalName": "db.example.com"}})
}

/// Two clusters whose `shop/cart` exports conflict.
async fn two_conflicting_clusters() -> (ApiServer, ApiServer) {
    let local = ApiServer::start(&["v1beta1", "v1alpha1"]).await;
    let remote = ApiServer::start(&["v1alpha1"]).await;
    populate(&local, "c1", "net-a", "v1beta1", "198.51.100.1", "10.1.0.1");
    populate(
        &remote,
        "c2",
        "net-b",
        "v1alpha1",
        "198.51.100.2",
        "10.2.0.1",
    );
    for object in conflicting_cart("v1alpha1") {
        remote.apply(object);
    }
    (local, remote)
}

// ---- tests -------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conflict_is_written_then_cleared_when_the_conflicting_export_goes() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (local, remote) = two_conflicting_clusters().await;
    let handle = Started::start(options(
        &local.write_kubeconfig(dir.path(), "local"),
        &[&remote.write_kubeconfig(dir.path(), "remote")],
        Some("gw-a"),
    ))
    .await
    .expect("source starts");

    let conditions = conditions_until(&local, "cart", "the conflict", |c| {
        is(
            c,
            "Conflict",
            "True",
            "PortConflict,SessionAffinityConflict,SessionAffinityConfigConflict",
        )
    })
    .await;
    assert!(is(&conditions, "Valid", "True", "Valid"), "{conditions:#?}");
    let conflict = condition(&conditions, "Conflict").expect("checked");
    let message = conflict["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with("Conflicting ports. Exposing the union of ports;"),
        "{message}"
    );
    assert!(
        message.contains("Conflicting session affinity. Using \"None\" from oldest service export in \"c1\". 1/2 clusters disagree."),
        "{message}"
    );
    for c in &conditions {
        assert_eq!(c["observedGeneration"], generation(&local, "cart"), "{c}");
        assert!(c["lastTransitionTime"].is_string(), "{c}");
    }
    // Its three conditions in one write, in the best version the server offers;
    // the remote cluster is never written.
    assert_eq!(local.status_writes(), 1, "{:#?}", local.writes());
    let patch = local
        .writes()
        .into_iter()
        .find(|w| w.is_status_write())
        .expect("checked");
    assert_eq!(
        patch.path,
        "/apis/multicluster.x-k8s.io/v1beta1/namespaces/shop/serviceexports/cart/status"
    );
    // A server-side apply of Strait's three conditions, and nothing else.
    assert_eq!(patch.body["kind"], "ServiceExport", "{:#}", patch.body);
    let applied: Vec<&str> = patch.body["status"]["conditions"]
        .as_array()
        .expect("conditions")
        .iter()
        .filter_map(|c| c["type"].as_str())
        .collect();
    assert_eq!(applied, ["Valid", "Ready", "Conflict"], "{:#}", patch.body);
    let stored = local.object("ServiceExport", "shop", "cart").expect("cart");
    let strait = stored["metadata"]["managedFields"]
        .as_array()
        .expect("managedFields")
        .iter()
        .find(|entry| entry["manager"] == "strait")
        .expect("Strait's entry")
        .clone();
    assert_eq!(strait["operation"], "Apply");
    assert_eq!(strait["subresource"], "status");
    let owned: Vec<&String> = strait["fieldsV1"]["f:status"]["f:conditions"]
        .as_object()
        .expect("owned conditions")
        .keys()
        .collect();
    assert_eq!(
        owned,
        [
            r#"k:{"type":"Conflict"}"#,
            r#"k:{"type":"Ready"}"#,
            r#"k:{"type":"Valid"}"#
        ]
    );
    assert_eq!(remote.writes().len(), 0, "{:#?}", remote.writes());
    let valid_before = condition(&conditions, "Valid").cloned();

    // c2 withdraws its export: no conflict is left.
    remote.delete("ServiceExport", "shop", "cart");
    let conditions = conditions_until(&local, "cart", "the conflict cleared", |c| {
        is(c, "Conflict", "False", "NoConflicts")
    })
    .await;
    assert_eq!(
        condition(&conditions, "Valid").cloned(),
        valid_before,
        "Valid did not change and was not rewritten"
    );
    assert_eq!(local.status_writes(), 2, "{:#?}", local.writes());
    let report = report_until(&handle, "two writes", |r| r.writes == 2).await;
    assert!(report.leader);
    assert_eq!(report.identity, "gw-a");
    assert_eq!(holder(&local).as_deref(), Some("gw-a"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_external_name_service_is_not_valid_until_it_changes_type() {
    let dir = tempfile::tempdir().expect("temp dir");
    // A server that offers v1alpha1 only: the status is written in it.
    let local = ApiServer::start(&["v1alpha1"]).await;
    populate(&local, "c1", "net-a", "v1beta1", "198.51.100.1", "10.1.0.1");
    // Another controller's condition on cart, written before Strait starts.
    let ready = json!({"type": "Synced", "status": "True", "reason": "Synced",
        "message": "imported elsewhere", "lastTransitionTime": "2025-01-02T00:00:00Z"});
    let mut cart = export("cart", "v1beta1");
    cart["status"] = json!({"conditions": [ready.clone()]});
    // Created with its status (applying it again would keep the old one).
    local.delete("ServiceExport", "shop", "cart");
    local.apply(cart);
    local.apply(external_name("db"));
    local.apply(export("db", "v1beta1"));
    local.apply(export("ghost", "v1beta1"));
    let _handle = Started::start(options(
        &local.write_kubeconfig(dir.path(), "local"),
        &[],
        Some("gw-a"),
    ))
    .await
    .expect("source starts");

    let db = conditions_until(&local, "db", "db not valid nor ready", |c| {
        is(c, "Valid", "False", "InvalidServiceType") && is(c, "Ready", "False", "Failed")
    })
    .await;
    assert_eq!(
        condition(&db, "Valid").and_then(|c| c["message"].as_str()),
        Some("Service shop/db is of type ExternalName, which cannot be exported.")
    );
    assert!(condition(&db, "Conflict").is_none(), "{db:#?}");
    let ghost = conditions_until(&local, "ghost", "ghost not valid", |c| {
        is(c, "Valid", "False", "NoService")
    })
    .await;
    assert!(condition(&ghost, "Conflict").is_none(), "{ghost:#?}");
    // db and ghost leave only themselves out: cart is judged as usual.
    let cart = conditions_until(&local, "cart", "cart valid and judged", |c| {
        is(c, "Valid", "True", "Valid") && says(c, "Conflict").is_some()
    })
    .await;
    assert_eq!(cart[0], ready, "another controller's condition is kept");

    // db becomes a ClusterIP Service and ghost's export goes: all valid.
    local.apply(service("db", &[("sql", 5432)]));
    local.delete("ServiceExport", "shop", "ghost");
    let db = conditions_until(&local, "db", "db valid and ready", |c| {
        is(c, "Valid", "True", "Valid")
            && is(c, "Conflict", "False", "NoConflicts")
            && is(c, "Ready", "True", "Ready")
    })
    .await;
    assert_eq!(
        condition(&db, "Valid").and_then(|c| c["observedGeneration"].as_i64()),
        Some(1)
    );
    let cart = conditions_until(&local, "cart", "cart without conflict", |c| {
        is(c, "Conflict", "False", "NoConflicts")
    })
    .await;
    assert_eq!(cart[0], ready, "another controller's condition is kept");
    let writes = local.writes();
    assert!(
        writes
            .iter()
            .all(|w| !w.is_status_write()
                || w.path.starts_with("/apis/multicluster.x-k8s.io/v1alpha1/")),
        "{writes:#?}"
    );
}

/// Two gateways of one cluster: the leader and the other.
struct Pair {
    leader: Started,
    follower: Started,
    leader_id: String,
    follower_id: String,
}

async fn two_gateways(local: &ApiServer, dir: &Path, lease_duration: Duration) -> Pair {
    let kubeconfig = local.write_kubeconfig(dir, "local");
    let start = |id: &'static str| {
        let mut options = options(&kubeconfig, &[], Some(id));
        options.writes.export_status = Some(status_options(id, lease_duration));
        Started::start(options)
    };
    let a = start("gw-a").await.expect("gateway a starts");
    let b = start("gw-b").await.expect("gateway b starts");
    until(
        "a lease holder",
        || holder(local).is_some(),
        || format!("lease: {:?}", local.object("Lease", NAMESPACE, LEASE)),
    )
    .await;
    let leader_id = holder(local).expect("checked");
    let (leader, follower, follower_id) = if leader_id == "gw-a" {
        (a, b, "gw-b")
    } else {
        (b, a, "gw-a")
    };
    report_until(&leader, "the holder to lead", |r| r.leader).await;
    Pair {
        leader,
        follower,
        leader_id,
        follower_id: follower_id.to_owned(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_leader_writes_and_unchanged_status_is_not_rewritten() {
    let dir = tempfile::tempdir().expect("temp dir");
    let local = ApiServer::start(&["v1beta1"]).await;
    populate(&local, "c1", "net-a", "v1beta1", "198.51.100.1", "10.1.0.1");
    let pair = two_gateways(&local, dir.path(), Duration::from_secs(1)).await;
    conditions_until(&local, "cart", "cart's status", |c| {
        is(c, "Valid", "True", "Valid") && is(c, "Conflict", "False", "NoConflicts")
    })
    .await;
    let leader = report_until(&pair.leader, "the write counted", |r| r.writes == 1).await;
    assert_eq!(leader.identity, pair.leader_id);
    let follower = pair
        .follower
        .export_status()
        .expect("runs")
        .borrow()
        .clone();
    assert!(!follower.leader, "{follower:?}");
    assert_eq!((follower.writes, follower.failed_writes), (0, 0));
    assert_eq!(local.status_requests(), 1, "{:#?}", local.writes());

    // A change that leaves the status as it is: a new endpoint. Once the
    // leader has evaluated a snapshot that holds it, nothing was written.
    local.apply(slice(
        "cart",
        "cart-1",
        &[("10.1.0.1", true), ("10.1.0.2", true)],
    ));
    let snapshot = snapshot_until(&pair.leader, "the new endpoint", |s| {
        cart_endpoints(s).contains(&"10.1.0.2".to_owned())
    })
    .await;
    report_until(&pair.leader, "the endpoint change evaluated", |r| {
        r.evaluated >= snapshot.generation
    })
    .await;
    assert_eq!(local.status_requests(), 1, "{:#?}", local.writes());

    // A new export generation is written, keeping the transition times.
    let before = local.export_conditions("cart");
    let mut changed = export("cart", "v1beta1");
    changed["spec"] = json!({"exportedLabels": {"tier": "web"}});
    local.apply(changed);
    let after = conditions_until(&local, "cart", "observedGeneration 2", |c| {
        c.iter().all(|c| c["observedGeneration"] == 2)
    })
    .await;
    for type_ in ["Valid", "Conflict"] {
        assert_eq!(
            condition(&after, type_).map(|c| &c["lastTransitionTime"]),
            condition(&before, type_).map(|c| &c["lastTransitionTime"]),
            "{type_} did not flip"
        );
    }
    assert_eq!(local.status_requests(), 2, "{:#?}", local.writes());
    let follower = pair
        .follower
        .export_status()
        .expect("runs")
        .borrow()
        .clone();
    assert_eq!((follower.writes, follower.failed_writes), (0, 0));
    assert_eq!(holder(&local), Some(pair.leader_id));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leadership_moves_when_the_leader_stops() {
    let dir = tempfile::tempdir().expect("temp dir");
    let local = ApiServer::start(&["v1beta1"]).await;
    populate(&local, "c1", "net-a", "v1beta1", "198.51.100.1", "10.1.0.1");
    let pair = two_gateways(&local, dir.path(), Duration::from_secs(1)).await;
    conditions_until(&local, "cart", "cart's status", |c| {
        is(c, "Valid", "True", "Valid")
    })
    .await;

    // The leader stops without a word (a crash): its Lease expires.
    drop(pair.leader);
    report_until(&pair.follower, "the other gateway to lead", |r| r.leader).await;
    assert_eq!(holder(&local), Some(pair.follower_id.clone()));
    let lease = local.object("Lease", NAMESPACE, LEASE).expect("the lease");
    assert_eq!(lease["spec"]["leaseTransitions"], 1, "{lease:#}");

    // The new leader writes what changes.
    local.apply(external_name("cart"));
    conditions_until(&local, "cart", "cart not valid", |c| {
        is(c, "Valid", "False", "InvalidServiceType")
    })
    .await;
    let report = pair
        .follower
        .export_status()
        .expect("runs")
        .borrow()
        .clone();
    assert!(report.writes >= 1, "{report:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_that_stops_gracefully_hands_over_before_its_lease_expires() {
    let dir = tempfile::tempdir().expect("temp dir");
    let local = ApiServer::start(&["v1beta1"]).await;
    populate(&local, "c1", "net-a", "v1beta1", "198.51.100.1", "10.1.0.1");
    // Far longer than WAIT: only a release lets the other gateway lead in time.
    let pair = two_gateways(&local, dir.path(), Duration::from_secs(60)).await;
    pair.leader.release_leadership(WAIT).await;
    let report = pair.leader.export_status().expect("runs").borrow().clone();
    assert!(!report.leader, "{report:?}");
    report_until(&pair.follower, "the other gateway to lead", |r| r.leader).await;
    assert_eq!(holder(&local), Some(pair.follower_id));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_export_status_nothing_is_written() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (local, remote) = two_conflicting_clusters().await;
    let kubeconfig = local.write_kubeconfig(dir.path(), "local");
    let remote_kubeconfig = remote.write_kubeconfig(dir.path(), "remote");
    let handle = Started::start(options(&kubeconfig, &[&remote_kubeconfig], None))
        .await
        .expect("source starts");
    assert!(handle.export_status().is_none());
    let snapshot = snapshot_until(&handle, "both clusters synced", |s| s.all_synced()).await;
    assert!(snapshot.local_exports.is_none());
    let set = snapshot.set.as_ref().expect("a valid set");
    let merged = strait::merge::merge(set);
    assert!(
        !merged.services[&ServiceKey::new("shop", "cart")]
            .conflicts
            .is_empty(),
        "there is a conflict that could be written"
    );

    // A one-shot read never writes, even when asked to.
    let setup = options(&kubeconfig, &[&remote_kubeconfig], Some("check"));
    let mut reads = setup.reads;
    setup.writes.request_inputs(&mut reads);
    let loaded = load_once(reads, WAIT).await.expect("the set loads");
    assert_eq!(loaded.local.as_deref(), Some("c1"));
    assert_eq!(local.writes().len(), 0, "{:#?}", local.writes());
    assert_eq!(remote.writes().len(), 0, "{:#?}", remote.writes());
    assert!(local.export_conditions("cart").is_empty());
}

// ---- the command line ------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strait_run_writes_export_status_with_the_flag_and_releases_the_lease_on_sigterm() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (local, remote) = two_conflicting_clusters().await;
    let kubeconfig = local.write_kubeconfig(dir.path(), "local");
    remote.write_kubeconfig(dir.path(), "remote");
    std::fs::write(
        dir.path().join("gateway.yaml"),
        "kube:\n  kubeconfigs: [remote.yaml]\n",
    )
    .expect("gateway.yaml");
    let certs = dir.path().join("certs");
    let ids = ["c1", "c2"].map(|id| strait::model::ClusterId::new(id).expect("cluster id"));
    strait::tls::write_cluster_set(&certs, "test.strait.dev", &ids).expect("certificates");
    let config = dir.path().to_str().expect("utf-8 path");
    let tls = certs.join("c1");
    let tls = tls.to_str().expect("utf-8 path");
    let command = |args: &[&str]| {
        let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_strait"));
        command
            .args(args)
            .env("KUBECONFIG", &kubeconfig)
            .env("HOME", dir.path())
            .env("POD_NAMESPACE", NAMESPACE)
            .env("POD_NAME", "cluster-edge-0")
            .env("RUST_LOG", "warn")
            .kill_on_drop(true)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped());
        command
    };
    let log = dir.path().join("strait-run.log");
    let listen = [
        "--admin-listen",
        "127.0.0.1:0",
        "--connect-listen",
        "127.0.0.1:0",
        "--tunnel-listen",
        "127.0.0.1:0",
    ];

    // The flag needs the Kubernetes source.
    let output = command(&[
        "run",
        "--config",
        config,
        "--cluster",
        "c1",
        "--write-export-status",
    ])
    .output()
    .await
    .expect("strait runs");
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("needs the Kubernetes source"), "{stderr}");

    // `check` never writes, even with kube.writeExportStatus set.
    std::fs::write(
        dir.path().join("gateway.yaml"),
        "kube:\n  kubeconfigs: [remote.yaml]\n  writeExportStatus: true\n",
    )
    .expect("gateway.yaml");
    let output = command(&["check", "--kube", "--config", config])
        .output()
        .await
        .expect("strait check runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(local.writes().len(), 0, "{:#?}", local.writes());
    std::fs::write(
        dir.path().join("gateway.yaml"),
        "kube:\n  kubeconfigs: [remote.yaml]\n",
    )
    .expect("gateway.yaml");

    let mut args = vec![
        "run",
        "--kube",
        "--write-export-status",
        "--config",
        config,
        "--tls-dir",
        tls,
    ];
    args.extend(listen);
    let mut run = command(&args);
    run.env("RUST_LOG", "info")
        .stderr(std::fs::File::create(&log).expect("log file"));
    let mut child = run.spawn().expect("strait run starts");
    until(
        "the conflict, written by strait run",
        || {
            let c = local.export_conditions("cart");
            is(
                &c,
                "Conflict",
                "True",
                "PortConflict,SessionAffinityConflict,SessionAffinityConfigConflict",
            ) && is(&c, "Valid", "True", "Valid")
        },
        || {
            format!(
                "conditions: {:#?}\nstrait run's log:\n{}",
                local.export_conditions("cart"),
                std::fs::read_to_string(&log).unwrap_or_default()
            )
        },
    )
    .await;
    assert_eq!(holder(&local).as_deref(), Some("cluster-edge-0"));
    assert_eq!(remote.writes().len(), 0, "{:#?}", remote.writes());
    // Ready (its SIGTERM handler is in place), and the metrics say it writes.
    until(
        "strait run ready",
        || admin_address(&log).is_some(),
        || std::fs::read_to_string(&log).unwrap_or_default(),
    )
    .await;
    let admin = admin_address(&log).expect("checked");
    get_until(admin, "/readyz", "readiness", |body| body == "ready").await;
    get_until(admin, "/metrics", "the export status metrics", |body| {
        body.contains("strait_export_status_leader 1")
            && body.contains(r#"strait_export_status_writes_total{result="ok"} 1"#)
    })
    .await;

    // SIGTERM: the Lease is released before the gateway drains and exits.
    let pid = child.id().expect("the child runs");
    let signalled = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .expect("kill runs");
    assert!(signalled.success());
    let status = tokio::time::timeout(Duration::from_secs(40), child.wait())
        .await
        .expect("strait run exits after SIGTERM")
        .expect("exit status");
    assert!(status.success(), "{status:?}");
    let lease = local.object("Lease", NAMESPACE, LEASE).expect("the lease");
    assert!(lease["spec"]["holderIdentity"].is_null(), "{lease:#}");
}

/// Another controller's condition on the same export is its own: Strait's
/// apply neither removes nor takes it, and it survives Strait's rewrites.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_controllers_condition_survives_strait_writes() {
    use kube::api::{Api, DynamicObject, Patch, PatchParams};
    let dir = tempfile::tempdir().expect("temp dir");
    let (local, remote) = two_conflicting_clusters().await;
    let local_config = local.write_kubeconfig(dir.path(), "local");
    // Another MCS controller says Ready, by server-side apply.
    let config = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::read_from(&local_config).expect("kubeconfig"),
        &kube::config::KubeConfigOptions::default(),
    )
    .await
    .expect("config");
    let client = kube::Client::try_from(config).expect("client");
    let resource = kube::core::ApiResource {
        group: "multicluster.x-k8s.io".into(),
        version: "v1beta1".into(),
        api_version: "multicluster.x-k8s.io/v1beta1".into(),
        kind: "ServiceExport".into(),
        plural: "serviceexports".into(),
    };
    let exports: Api<DynamicObject> = Api::namespaced_with(client, "shop", &resource);
    let ready = json!({"apiVersion": "multicluster.x-k8s.io/v1beta1", "kind": "ServiceExport",
        "metadata": {"name": "cart", "namespace": "shop"},
        "status": {"conditions": [{"type": "Synced", "status": "True", "reason": "Synced",
            "message": "", "lastTransitionTime": "2026-12-01T00:00:00Z"}]}});
    exports
        .patch_status(
            "cart",
            &PatchParams::apply("other-mcs"),
            &Patch::Apply(&ready),
        )
        .await
        .expect("the other controller's apply");

    let handle = Started::start(options(
        &local_config,
        &[&remote.write_kubeconfig(dir.path(), "remote")],
        Some("gw-a"),
    ))
    .await
    .expect("source starts");
    conditions_until(&local, "cart", "Strait's conflict beside Synced", |c| {
        is(
            c,
            "Conflict",
            "True",
            "PortConflict,SessionAffinityConflict,SessionAffinityConfigConflict",
        ) && is(c, "Synced", "True", "Synced")
            && is(c, "Ready", "True", "Ready")
    })
    .await;
    // The conflict clears: Strait rewrites its conditions, Synced stays.
    remote.delete("ServiceExport", "shop", "cart");
    let conditions = conditions_until(&local, "cart", "the conflict cleared beside Synced", |c| {
        is(c, "Conflict", "False", "NoConflicts")
    })
    .await;
    assert!(
        is(&conditions, "Synced", "True", "Synced"),
        "{conditions:#?}"
    );
    assert!(is(&conditions, "Valid", "True", "Valid"), "{conditions:#?}");
    drop(handle);
}
