//! Strait as the local cluster's MCS controller, against live API servers:
//! the mcs-api conformance expectations on ServiceImports (kubernetes-sigs/
//! mcs-api `conformance/service_import.go`), written as our own tests, and
//! the reconciler's own duties (leader-only writes, takeover, repairs,
//! other controllers' imports left alone, a full import port range).
//!
//! No Kubernetes API server can be installed on these machines, so these
//! tests run `kube_api::ApiServer`, an in-process server that speaks the
//! API's real wire protocol to the real kube-rs client, and is as strict as
//! a real one on what the reconciler relies on: server-side apply with
//! field managers (other managers' fields survive, conflicts, removal of
//! fields an applier stops setting), ClusterIP allocation and defaulting of
//! Services, garbage collection by owner reference, and refusal to create
//! objects in a namespace that does not exist, and the pruning and
//! validation of custom resources against `deploy/crds/`. What only a real
//! server shows (RBAC rules, admission webhooks, CEL and `pattern` checks,
//! kube-proxy programming the derived Service) is not covered here; the multi-network
//! suite covers the data path with iptables standing in for kube-proxy.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on what they set up

mod kube_api;

use std::path::Path;
use std::time::Duration;

use kube_api::fixtures::{Setup, Started};
use kube_api::fixtures::{export, namespace, populate, service, slice};
use kube_api::{ApiServer, until};
use serde_json::{Value, json};
use strait::controller::{ExportStatusOptions, ImportOptions, ImportsReport};
use strait::imports::PortRange;
use strait::imports::naming::derived_service_name;
use strait::model::ServiceKey;

/// Longest wait for one expected change.
const WAIT: Duration = Duration::from_secs(15);
const NAMESPACE: &str = "strait-system";

fn options(local: &Path, remotes: &[&Path], identity: &str, range: PortRange) -> Setup {
    let mut setup = Setup::reading(strait::discovery::kube::KubeOptions {
        remote_secrets: false,
        ..kube_api::fixtures::kube_options(local, remotes)
    });
    // The one Lease elects the writer of export status and of imports.
    setup.writes = strait::controller::ControllerOptions {
        export_status: Some(ExportStatusOptions {
            lease_name: "strait-export-status".to_owned(),
            lease_namespace: Some(NAMESPACE.to_owned()),
            identity: Some(identity.to_owned()),
            lease_duration: Duration::from_secs(1),
            renew_deadline: Duration::from_millis(600),
            retry_period: Duration::from_millis(100),
        }),
        imports: Some(ImportOptions {
            range,
            release_grace: Duration::from_secs(60),
            max_headless_endpoints: 8,
            quota: Default::default(),
            adopt_from: None,
            writes: Default::default(),
        }),
        ..setup.writes
    };
    setup
}

/// The gateway pods of a cluster: its gateway Service's EndpointSlice.
fn gateway_pods(pods: &[&str]) -> Value {
    let endpoints: Vec<Value> = pods
        .iter()
        .map(|ip| {
            json!({"addresses": [ip], "conditions": {"ready": true},
                "nodeName": format!("node-{ip}"), "zone": "zone-a",
                "targetRef": {"kind": "Pod", "namespace": NAMESPACE, "name": format!("gw-{ip}")}})
        })
        .collect();
    json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": "strait-gateway-1", "namespace": NAMESPACE,
            "labels": {"kubernetes.io/service-name": "strait-gateway"}},
        "addressType": "IPv4", "endpoints": endpoints,
        "ports": [{"name": "tunnel", "port": 15008, "protocol": "TCP"}]})
}

/// A local cluster c1 (net-a) and a remote c2 (net-b), both exporting
/// `shop/cart` (c1's the older export), with two gateway pods in c1.
struct World {
    local: ApiServer,
    remote: ApiServer,
    dir: tempfile::TempDir,
}

impl World {
    async fn new() -> World {
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
        local.apply(gateway_pods(&["10.1.0.50", "10.1.0.51"]));
        set_export_time(&local, "cart", "v1beta1", "2025-01-01T00:00:00Z");
        set_export_time(&remote, "cart", "v1alpha1", "2025-02-01T00:00:00Z");
        World {
            local,
            remote,
            dir: tempfile::tempdir().expect("temp dir"),
        }
    }

    async fn gateway(&self, identity: &str, range: PortRange) -> Started {
        let local = self.local.write_kubeconfig(self.dir.path(), "local");
        let remote = self.remote.write_kubeconfig(self.dir.path(), "remote");
        Started::start(options(&local, &[&remote], identity, range))
            .await
            .expect("the source starts")
    }

    fn import(&self, name: &str) -> Option<Value> {
        self.local.object("ServiceImport", "shop", name)
    }

    fn derived(&self, name: &str) -> Option<Value> {
        self.local.object(
            "Service",
            "shop",
            &derived_service_name(&ServiceKey::new("shop", name)),
        )
    }

    /// Waits for the import `shop/<name>` to satisfy `done`; returns it.
    async fn import_until(&self, name: &str, what: &str, done: impl Fn(&Value) -> bool) -> Value {
        until(
            what,
            || self.import(name).is_some_and(|i| done(&i)),
            || format!("import shop/{name}: {:#?}", self.import(name)),
        )
        .await;
        self.import(name).expect("checked")
    }

    /// Waits for the derived Service of `shop/<name>` to forward its first
    /// port to `port`.
    async fn until_target_port(&self, name: &str, port: &Value, what: &str) {
        until(
            what,
            || {
                self.derived(name)
                    .is_some_and(|d| d["spec"]["ports"][0]["targetPort"] == *port)
            },
            || format!("{:#?}", self.derived(name)),
        )
        .await;
    }

    async fn gone(&self, name: &str, what: &str) {
        until(
            what,
            || self.import(name).is_none() && self.derived(name).is_none(),
            || {
                format!(
                    "import: {:#?}; derived: {:#?}",
                    self.import(name),
                    self.derived(name)
                )
            },
        )
        .await;
    }
}

/// The first address of each endpoint of an EndpointSlice.
fn slice_addresses(slice: &Value) -> Vec<&str> {
    slice["endpoints"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| e["addresses"][0].as_str())
        .collect()
}

fn set_export_time(server: &ApiServer, name: &str, version: &str, time: &str) {
    let mut object = export(name, version);
    object["metadata"]["creationTimestamp"] = time.into();
    server.apply(object);
}

fn ready_reason(import: &Value) -> Option<String> {
    import["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Ready")
        .and_then(|c| c["reason"].as_str().map(str::to_owned))
}

fn is_ready(import: &Value) -> bool {
    ready_reason(import).as_deref() == Some("Ready")
}

fn ports(import: &Value) -> Vec<(String, u64)> {
    let mut ports: Vec<(String, u64)> = import["spec"]["ports"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| {
            (
                p["name"].as_str().unwrap_or_default().to_owned(),
                p["port"].as_u64().unwrap_or_default(),
            )
        })
        .collect();
    ports.sort();
    ports
}

async fn report_until(
    handle: &Started,
    what: &str,
    done: impl Fn(&ImportsReport) -> bool,
) -> ImportsReport {
    let mut reports = handle.imports().expect("the import reconciler runs");
    let _ = tokio::time::timeout(WAIT, reports.wait_for(|r| done(r))).await;
    let report = reports.borrow().clone();
    assert!(done(&report), "timed out waiting for {what}: {report:#?}");
    report
}

// ---- conformance: the import follows the exports ------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_import_exists_while_any_cluster_exports_with_ips_from_its_derived_service() {
    let world = World::new().await;
    let _gateway = world.gateway("gw-a", PortRange::default()).await;
    let import = world
        .import_until("cart", "a ready ClusterSetIP import", is_ready)
        .await;
    assert_eq!(import["spec"]["type"], "ClusterSetIP");
    assert_eq!(ports(&import), [("http".to_owned(), 80)]);
    assert_eq!(
        import["status"]["clusters"],
        json!([{"cluster": "c1"}, {"cluster": "c2"}])
    );
    let derived = world.derived("cart").expect("the derived Service exists");
    let name = derived_service_name(&ServiceKey::new("shop", "cart"));
    assert_eq!(
        import["metadata"]["annotations"]["multicluster.kubernetes.io/derived-service"],
        name.as_str()
    );
    // IPs: present, one per IP family, each of its family, the derived Service's.
    let ips = import["spec"]["ips"].as_array().expect("ips");
    assert_eq!(ips.len(), 1);
    assert_eq!(
        ips,
        derived["spec"]["clusterIPs"]
            .as_array()
            .expect("clusterIPs")
    );
    assert!(
        ips[0]
            .as_str()
            .is_some_and(|ip| ip.parse::<std::net::Ipv4Addr>().is_ok())
    );
    // The derived Service: owned by the import, no selector, to import ports.
    assert_eq!(
        derived["metadata"]["ownerReferences"][0]["uid"],
        import["metadata"]["uid"]
    );
    assert!(derived["spec"].get("selector").is_none());
    let import_port = derived["spec"]["ports"][0]["targetPort"]
        .as_u64()
        .expect("a numeric target port");
    assert!(PortRange::default().contains(u16::try_from(import_port).expect("a port")));
    // Its slice lists this cluster's gateway pods on the import port.
    let slice = world
        .local
        .object("EndpointSlice", "shop", &format!("{name}-ipv4"))
        .expect("the gateway slice exists");
    assert_eq!(
        slice["metadata"]["labels"]["kubernetes.io/service-name"],
        name.as_str()
    );
    assert_eq!(slice["ports"][0]["port"], import_port);
    let addresses = slice_addresses(&slice);
    assert_eq!(addresses, ["10.1.0.50", "10.1.0.51"]);
    // Each keeps its gateway pod's node and zone (topology-aware routing in
    // this cluster reads them).
    let first = &slice["endpoints"][0];
    assert_eq!(first["nodeName"], "node-10.1.0.50");
    assert_eq!(first["zone"], "zone-a");

    // One cluster unexports: the import stays, with one cluster.
    world.local.delete("ServiceExport", "shop", "cart");
    world
        .import_until("cart", "c1 to leave the import", |i| {
            i["status"]["clusters"] == json!([{"cluster": "c2"}])
        })
        .await;
    // The last export goes: the import and everything it owns go.
    world.remote.delete("ServiceExport", "shop", "cart");
    world.gone("cart", "the import to be deleted").await;
    assert!(
        world
            .local
            .object("EndpointSlice", "shop", &format!("{name}-ipv4"))
            .is_none(),
        "the slice goes with its Service"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_spec_is_the_oldest_exports_and_ports_are_the_union() {
    let world = World::new().await;
    // c2's younger export adds a port and disagrees on everything else.
    world
        .remote
        .apply(json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "cart", "namespace": "shop", "labels": {"own": "label"}},
        "spec": {"type": "ClusterIP", "clusterIP": "10.96.0.20", "sessionAffinity": "None",
            "ports": [{"name": "http", "port": 80, "protocol": "TCP"},
                      {"name": "admin", "port": 9090, "protocol": "TCP"}]}}));
    world
        .local
        .apply(json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "cart", "namespace": "shop", "annotations": {"own": "note"}},
        "spec": {"type": "ClusterIP", "clusterIP": "10.96.0.10",
            "sessionAffinity": "ClientIP",
            "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 300}},
            "internalTrafficPolicy": "Local", "trafficDistribution": "PreferClose",
            "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}}));
    let mut labelled = export("cart", "v1beta1");
    labelled["metadata"]["creationTimestamp"] = "2025-01-01T00:00:00Z".into();
    labelled["spec"] = json!({"exportedLabels": {"team": "cart"},
        "exportedAnnotations": {"runbook": "https://runbooks/cart"}});
    world.local.apply(labelled);
    let _gateway = world.gateway("gw-a", PortRange::default()).await;
    let import = world
        .import_until("cart", "the merged import", |i| {
            is_ready(i) && ports(i).len() == 2
        })
        .await;
    assert_eq!(
        ports(&import),
        [("admin".to_owned(), 9090), ("http".to_owned(), 80)],
        "the union of the constituents' ports"
    );
    let spec = &import["spec"];
    assert_eq!(spec["sessionAffinity"], "ClientIP");
    assert_eq!(
        spec["sessionAffinityConfig"]["clientIP"]["timeoutSeconds"],
        300
    );
    assert_eq!(spec["internalTrafficPolicy"], "Local");
    assert_eq!(spec["trafficDistribution"], "PreferClose");
    let metadata = &import["metadata"];
    assert_eq!(metadata["labels"]["team"], "cart");
    assert_eq!(metadata["annotations"]["runbook"], "https://runbooks/cart");
    assert!(
        metadata["labels"].get("own").is_none(),
        "never the Service's own labels"
    );
    assert!(metadata["annotations"].get("own").is_none());
    // Both derived ports lead to distinct import ports.
    let derived = world.derived("cart").expect("derived");
    let targets: std::collections::BTreeSet<u64> = derived["spec"]["ports"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| p["targetPort"].as_u64())
        .collect();
    assert_eq!(targets.len(), 2);
    // The Conflict condition is raised on the export (each cluster's own
    // gateway writes its cluster's exports; this one writes c1's).
    for server in [&world.local] {
        until(
            "Conflict on the export",
            || {
                server.export_conditions("cart").iter().any(|c| {
                    c["type"] == "Conflict"
                        && c["status"] == "True"
                        && c["reason"]
                            .as_str()
                            .is_some_and(|r| r.contains("PortConflict"))
                })
            },
            || format!("{:#?}", server.export_conditions("cart")),
        )
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_same_name_port_takes_the_oldest_number_and_headless_wins_when_oldest() {
    let world = World::new().await;
    // c1 (oldest) is headless with http on 81; c2 says ClusterIP with http on 80.
    world.local.apply(json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "cart", "namespace": "shop"},
        "spec": {"clusterIP": "None", "ports": [{"name": "http", "port": 81, "protocol": "TCP"}]}}));
    let _gateway = world.gateway("gw-a", PortRange::default()).await;
    let import = world
        // Ready comes with a later write than the spec: wait for both.
        .import_until("cart", "a ready headless import", |i| {
            i["spec"]["type"] == "Headless" && is_ready(i)
        })
        .await;
    assert_eq!(ports(&import), [("http".to_owned(), 81)]);
    assert!(
        import["spec"].get("ips").is_none(),
        "a headless import has no IPs"
    );
    assert!(
        world.derived("cart").is_none(),
        "no derived Service for headless"
    );

    // The older export goes: c2's ClusterSetIP takes over.
    world.local.delete("ServiceExport", "shop", "cart");
    let import = world
        .import_until("cart", "a ClusterSetIP import", |i| {
            i["spec"]["type"] == "ClusterSetIP" && is_ready(i)
        })
        .await;
    assert_eq!(ports(&import), [("http".to_owned(), 80)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_external_name_export_gets_no_import_and_stops_no_other() {
    let world = World::new().await;
    world
        .remote
        .apply(json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "legacy", "namespace": "shop"},
        "spec": {"type": "ExternalName", "externalName": "db.example.com"}}));
    world.remote.apply(export("legacy", "v1alpha1"));
    // And a second, valid service exported only by c2.
    world.remote.apply(service("orders", &[("grpc", 9000)]));
    world.remote.apply(export("orders", "v1alpha1"));
    world
        .remote
        .apply(slice("orders", "orders-1", &[("10.2.0.9", true)]));
    let gateway = world.gateway("gw-a", PortRange::default()).await;
    world
        .import_until("orders", "the valid service's import", is_ready)
        .await;
    world
        .import_until("cart", "the other import", is_ready)
        .await;
    assert!(
        world.import("legacy").is_none(),
        "ExternalName is not exportable"
    );
    let report = report_until(&gateway, "a plan", |r| r.imports.len() == 2).await;
    assert!(report.imports.iter().all(|i| i.key.name != "legacy"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_import_where_the_namespace_does_not_exist() {
    let world = World::new().await;
    world.remote.apply(json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "ledger", "namespace": "billing"},
        "spec": {"type": "ClusterIP", "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}}));
    world
        .remote
        .apply(json!({"apiVersion": "multicluster.x-k8s.io/v1alpha1",
        "kind": "ServiceExport", "metadata": {"name": "ledger", "namespace": "billing"}}));
    let gateway = world.gateway("gw-a", PortRange::default()).await;
    let report = report_until(&gateway, "billing/ledger skipped", |r| {
        r.skipped.contains_key("billing/ledger")
    })
    .await;
    assert_eq!(
        serde_json::to_value(report.skipped["billing/ledger"]).expect("json"),
        "no-namespace"
    );
    world.import_until("cart", "cart's import", is_ready).await;
    assert!(
        world
            .local
            .object("ServiceImport", "billing", "ledger")
            .is_none()
    );
    assert!(
        world.local.object("Namespace", "", "billing").is_none(),
        "never created"
    );

    // The namespace appears: the import follows.
    world.local.apply(namespace("billing"));
    until(
        "billing/ledger's import",
        || {
            world
                .local
                .object("ServiceImport", "billing", "ledger")
                .is_some()
        },
        || {
            format!(
                "{:#?}",
                world.local.object("ServiceImport", "billing", "ledger")
            )
        },
    )
    .await;
}

// ---- the reconciler's own duties ------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_leader_writes_and_another_takes_over_when_it_stops() {
    let world = World::new().await;
    let a = world.gateway("gw-a", PortRange::default()).await;
    let b = world.gateway("gw-b", PortRange::default()).await;
    world.import_until("cart", "the import", is_ready).await;
    let (ra, rb) = (
        a.imports().expect("a reconciles").borrow().clone(),
        b.imports().expect("b reconciles").borrow().clone(),
    );
    assert!(
        ra.leader != rb.leader,
        "exactly one leader: {ra:#?} {rb:#?}"
    );
    let (leader, follower, follower_report) = if ra.leader { (a, b, rb) } else { (b, a, ra) };
    assert_eq!(follower_report.writes, 0, "a follower never writes");
    // Nor plans: it would only redo the leader's work on every snapshot.
    world.remote.apply(service("extra", &[("http", 80)]));
    world.remote.apply(export("extra", "v1alpha1"));
    world.import_until("extra", "the import", is_ready).await;
    let follower_report = follower.imports().expect("reconciles").borrow().clone();
    assert_eq!(
        (follower_report.planned, follower_report.imports.len()),
        (0, 0),
        "a follower plans nothing: {follower_report:#?}"
    );

    // The leader stops; after its Lease expires the other reconciles.
    drop(leader);
    world.remote.apply(service("orders", &[("grpc", 9000)]));
    world.remote.apply(export("orders", "v1alpha1"));
    world
        .import_until("orders", "the new leader's import", |_| true)
        .await;
    let report = report_until(&follower, "the follower to lead", |r| {
        r.leader && r.writes > 0
    })
    .await;
    assert!(report.writes > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edited_derived_service_is_put_back_and_others_fields_survive() {
    let world = World::new().await;
    let _gateway = world.gateway("gw-a", PortRange::default()).await;
    world.import_until("cart", "the import", is_ready).await;
    let name = derived_service_name(&ServiceKey::new("shop", "cart"));
    let before = world.derived("cart").expect("derived");
    let import_port = before["spec"]["ports"][0]["targetPort"].clone();
    // Someone points the derived Service elsewhere, and adds an annotation.
    world.local.edit(
        "Service",
        "shop",
        &name,
        json!({"metadata": {"annotations": {"team.example/owner": "ops"}},
            "spec": {"ports": [{"name": "http", "port": 80, "protocol": "TCP", "targetPort": 8080}]}}),
        "kubectl-edit",
    );
    world
        .until_target_port("cart", &import_port, "the target port to be put back")
        .await;
    let after = world.derived("cart").expect("derived");
    assert_eq!(
        after["metadata"]["annotations"]["team.example/owner"], "ops",
        "another manager's field survives the repair"
    );
    assert_eq!(
        after["spec"]["clusterIP"], before["spec"]["clusterIP"],
        "the ClusterSetIP does not move"
    );
    assert!(
        world
            .local
            .managers("Service", "shop", &name)
            .contains(&"strait".to_owned())
    );
}

/// A tenant labels a Service of its own namespace as the gateway, with an
/// address for peers and a slice of its own pod: the derived slices list
/// only the gateway namespace's gateway pods, and the cluster's tunnel
/// addresses stay the real gateway's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_gateway_label_steers_neither_derived_slices_nor_tunnels() {
    let world = World::new().await;
    world
        .local
        .apply(json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "evil-gw", "namespace": "shop",
            "labels": {"strait.dev/gateway": "true"}},
        "spec": {"type": "LoadBalancer", "ports": [{"name": "tunnel", "port": 15008}]},
        "status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.66"}]}}}));
    world.local.apply(
        json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": "evil-gw-1", "namespace": "shop",
            "labels": {"kubernetes.io/service-name": "evil-gw"}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": ["10.1.0.66"], "conditions": {"ready": true}}],
        "ports": [{"name": "tunnel", "port": 15008, "protocol": "TCP"}]}),
    );
    let gateway = world.gateway("gw-a", PortRange::default()).await;
    world.import_until("cart", "the import", is_ready).await;
    let name = derived_service_name(&ServiceKey::new("shop", "cart"));
    until(
        "the derived slice",
        || {
            world
                .local
                .object("EndpointSlice", "shop", &format!("{name}-ipv4"))
                .is_some()
        },
        || "no derived slice".to_owned(),
    )
    .await;
    let slice = world
        .local
        .object("EndpointSlice", "shop", &format!("{name}-ipv4"))
        .expect("the derived slice");
    let addresses = slice_addresses(&slice);
    assert_eq!(
        addresses,
        ["10.1.0.50", "10.1.0.51"],
        "no tenant pod behind the ClusterSetIP"
    );
    let snapshot = gateway.snapshot();
    let set = snapshot.set.as_ref().expect("a set");
    let tunnels: Vec<String> = set
        .cluster("c1")
        .expect("c1")
        .gateways
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        tunnels,
        ["198.51.100.1:15008"],
        "no tenant address to tunnel to"
    );
}

/// A tenant of `shop` edits the derived Service of its own service `aaa`
/// to claim cart's import port (`aaa` sorts before `cart`, so a claim read
/// from Services wins): the record on aaa's ServiceImport, which tenants
/// cannot write, keeps each port where it is, and the edit is put back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_import_port_claimed_by_an_edited_derived_service_stays_put() {
    let world = World::new().await;
    world.local.apply(json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "aaa", "namespace": "shop"},
        "spec": {"type": "ClusterIP", "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}}));
    world.local.apply(export("aaa", "v1beta1"));
    world
        .local
        .apply(slice("aaa", "aaa-1", &[("10.1.0.7", true)]));
    let _gateway = world.gateway("gw-a", PortRange::default()).await;
    let import = world.import_until("cart", "the import", is_ready).await;
    world.import_until("aaa", "aaa's import", is_ready).await;
    let cart_port =
        world.derived("cart").expect("derived")["spec"]["ports"][0]["targetPort"].clone();
    let aaa_port = world.derived("aaa").expect("derived")["spec"]["ports"][0]["targetPort"].clone();
    assert_ne!(cart_port, aaa_port);
    let record = import["metadata"]["annotations"]["strait.dev/import-ports"].clone();
    assert!(
        record
            .as_str()
            .is_some_and(|r| r.contains(&cart_port.to_string())),
        "the import records its port: {record}"
    );
    let aaa = derived_service_name(&ServiceKey::new("shop", "aaa"));
    world.local.edit(
        "Service",
        "shop",
        &aaa,
        json!({"spec": {"ports": [{"name": "http", "port": 80, "protocol": "TCP", "targetPort": cart_port}]}}),
        "kubectl-edit",
    );
    world
        .until_target_port("aaa", &aaa_port, "aaa's edit to be put back")
        .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        world.derived("cart").expect("derived")["spec"]["ports"][0]["targetPort"],
        cart_port,
        "cart keeps its import port"
    );
    let import = world.import("cart").expect("import");
    assert_eq!(
        import["metadata"]["annotations"]["strait.dev/import-ports"],
        record
    );
}

/// A tenant made a Service with cart's derived name and a selector of its
/// own pods before Strait wrote it: Strait neither writes over it (a force
/// would keep the selector and take the Service, and the ClusterSetIP
/// would reach the tenant's pods) nor writes slices for it, and says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_squatting_the_derived_name_is_never_written_over() {
    let world = World::new().await;
    let name = derived_service_name(&ServiceKey::new("shop", "cart"));
    world
        .local
        .apply(json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": "shop"},
        "spec": {"type": "ClusterIP", "selector": {"app": "tenant"},
            "ports": [{"name": "http", "port": 80, "protocol": "TCP", "targetPort": 8080}]}}));
    let gateway = world.gateway("gw-a", PortRange::default()).await;
    report_until(&gateway, "the squatter reported", |report| {
        report
            .last_error
            .as_deref()
            .is_some_and(|e| e.contains("is not Strait's"))
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let held = world.derived("cart").expect("the tenant's Service");
    assert_eq!(held["spec"]["selector"], json!({"app": "tenant"}));
    assert!(
        held["metadata"]["labels"]["app.kubernetes.io/managed-by"].is_null(),
        "{held:#}"
    );
    assert!(
        world
            .local
            .object("EndpointSlice", "shop", &format!("{name}-ipv4"))
            .is_none(),
        "no slice of Strait's for a Service that is not Strait's"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_import_of_another_controller_is_left_alone() {
    let world = World::new().await;
    let foreign = json!({"apiVersion": "multicluster.x-k8s.io/v1beta1", "kind": "ServiceImport",
        "metadata": {"name": "cart", "namespace": "shop"},
        "spec": {"type": "ClusterSetIP", "ips": ["10.100.0.1"],
            "ports": [{"port": 80, "protocol": "TCP"}]}});
    world.local.apply(foreign.clone());
    let gateway = world.gateway("gw-a", PortRange::default()).await;
    let report = report_until(&gateway, "the foreign import reported", |r| {
        r.foreign() == 1 && r.planned > 0
    })
    .await;
    assert!(report.imports.is_empty());
    // Give the reconciler a moment to do what it should not.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let held = world.import("cart").expect("still there");
    assert_eq!(held["spec"], foreign["spec"], "not rewritten");
    assert!(world.derived("cart").is_none());
    assert!(
        !world
            .local
            .writes()
            .iter()
            .any(|w| w.path.contains("serviceimports") && w.method != "GET"),
        "no write touched an import"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_import_port_range_is_a_ready_false_condition() {
    let world = World::new().await;
    world
        .local
        .apply(service("cart", &[("http", 80), ("admin", 9090)]));
    let gateway = world
        .gateway("gw-a", PortRange::new(20000, 20000).expect("range"))
        .await;
    let import = world
        .import_until("cart", "Ready=False ImportPortsExhausted", |i| {
            ready_reason(i).as_deref() == Some("ImportPortsExhausted")
        })
        .await;
    assert_eq!(ports(&import).len(), 2, "the import still lists every port");
    // The import's Ready=False may be written in the pass before the one
    // that creates the derived Service: wait for it rather than race it.
    until(
        "the derived Service",
        || world.derived("cart").is_some(),
        || format!("{:#?}", world.derived("cart")),
    )
    .await;
    let derived = world.derived("cart").expect("derived");
    assert_eq!(
        derived["spec"]["ports"].as_array().map(Vec::len),
        Some(1),
        "only the port with an import port is forwarded: never a wrong mapping"
    );
    let report = report_until(&gateway, "the exhausted port", |r| r.exhausted.len() == 1).await;
    assert_eq!(report.exhausted.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_manage_imports_nothing_is_written() {
    let world = World::new().await;
    let local = world.local.write_kubeconfig(world.dir.path(), "local");
    let remote = world.remote.write_kubeconfig(world.dir.path(), "remote");
    let mut options = options(&local, &[&remote], "gw-a", PortRange::default());
    options.writes.imports = None;
    let handle = Started::start(options).await.expect("starts");
    assert!(handle.imports().is_none());
    let _ = handle.wait_for(WAIT, |s| s.all_synced()).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(world.import("cart").is_none());
    assert!(world.derived("cart").is_none());
    // The ClusterProperty fixture is still there: the test really ran.
    assert!(
        world
            .local
            .object("ClusterProperty", "", "cluster.clusterset.k8s.io")
            .is_some()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_is_written_when_nothing_changed_and_an_edited_slice_is_put_back() {
    let world = World::new().await;
    let gateway = world.gateway("gw-a", PortRange::default()).await;
    world.import_until("cart", "the import", is_ready).await;
    // Settled: no write for half a second.
    let mut settled = report_until(&gateway, "a leader", |r| r.leader && r.writes > 0).await;
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = gateway.imports().expect("reconciles").borrow().clone();
        if now.writes == settled.writes {
            break;
        }
        settled = now;
    }
    // An endpoint of a backend changes: the imports do not.
    world.remote.apply(slice(
        "cart",
        "cart-1",
        &[("10.2.0.1", true), ("10.2.0.2", true)],
    ));
    let later = report_until(&gateway, "the change planned", |r| {
        r.planned > settled.planned
    })
    .await;
    assert_eq!(
        later.writes,
        settled.writes,
        "no write for an unchanged plan: {:#?}",
        world
            .local
            .writes()
            .iter()
            .map(|w| format!("{} {} {}", w.method, w.path, w.code))
            .collect::<Vec<_>>()
    );

    // Someone empties the gateway slice of the derived Service: it is put back.
    let name = format!(
        "{}-ipv4",
        derived_service_name(&ServiceKey::new("shop", "cart"))
    );
    world.local.edit(
        "EndpointSlice",
        "shop",
        &name,
        json!({"endpoints": []}),
        "kubectl-edit",
    );
    until(
        "the gateway pods back in the slice",
        || {
            world
                .local
                .object("EndpointSlice", "shop", &name)
                .is_some_and(|s| s["endpoints"].as_array().map(Vec::len) == Some(2))
        },
        || format!("{:#?}", world.local.object("EndpointSlice", "shop", &name)),
    )
    .await;
}

// ---- the command line ------------------------------------------------------

#[path = "kube_imports/run.rs"]
mod run;

#[path = "kube_imports/adopt.rs"]
mod adopt;

#[path = "kube_imports/families.rs"]
mod families;

#[path = "kube_imports/mcs_slices.rs"]
mod mcs_slices;

#[path = "kube_imports/headless.rs"]
mod headless;

#[path = "kube_imports/scale.rs"]
mod scale;

#[path = "kube_imports/answered.rs"]
mod answered;
