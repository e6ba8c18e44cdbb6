//! The `strait check` and `strait explain` commands, run as the real binary on
//! the shipped demo configuration and on small hand-made ones.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on what they set up

use std::fs;
use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

const DEMO: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/gateway-config/demo");

fn strait(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_strait"))
        .args(args)
        .output()
        .expect("the strait binary runs")
}

fn json(output: &Output) -> Value {
    assert!(
        output.status.success(),
        "exit {:?}, stderr: {}",
        output.status.code(),
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("stdout is JSON")
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Writes `clusters/<folder>/objects.yaml` files under a fresh directory.
fn config(clusters: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    for (folder, yaml) in clusters {
        let folder = dir.path().join("clusters").join(folder);
        fs::create_dir_all(&folder).expect("cluster folder");
        fs::write(folder.join("objects.yaml"), yaml).expect("write yaml");
    }
    dir
}

fn cluster_yaml(id: &str, network: &str, gateway_ip: &str) -> String {
    format!(
        "apiVersion: about.k8s.io/v1alpha1
kind: ClusterProperty
metadata: {{name: cluster.clusterset.k8s.io}}
spec: {{value: {id}}}
---
apiVersion: about.k8s.io/v1alpha1
kind: ClusterProperty
metadata: {{name: network.clusterset.k8s.io}}
spec: {{value: {network}}}
---
apiVersion: v1
kind: Service
metadata:
  name: gw
  namespace: strait-system
  labels: {{strait.dev/gateway: \"true\"}}
spec:
  type: LoadBalancer
  ports: [{{name: tunnel, port: 15008}}]
status:
  loadBalancer:
    ingress: [{{ip: {gateway_ip}}}]
"
    )
}

fn exported_service(port_name: &str, port: u16, created: &str, address: &str) -> String {
    format!(
        "---
apiVersion: v1
kind: Service
metadata: {{name: echo, namespace: app}}
spec:
  ports: [{{name: {port_name}, port: {port}, targetPort: {port}}}]
---
apiVersion: multicluster.x-k8s.io/v1beta1
kind: ServiceExport
metadata: {{name: echo, namespace: app, creationTimestamp: \"{created}\"}}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: echo-1
  namespace: app
  labels: {{kubernetes.io/service-name: echo}}
addressType: IPv4
ports: [{{name: {port_name}, port: {port}}}]
endpoints:
- addresses: [\"{address}\"]
"
    )
}

#[test]
fn check_summarises_the_demo() {
    let report = json(&strait(&["check", "--config", DEMO, "--output", "json"]));
    let clusters = report["clusters"].as_array().expect("clusters");
    assert_eq!(clusters.len(), 4);
    let networks: std::collections::BTreeSet<&str> = clusters
        .iter()
        .filter_map(|c| c["network"].as_str())
        .collect();
    assert_eq!(networks.len(), 3, "three networks");
    let checkout = report["services"]
        .as_array()
        .expect("services")
        .iter()
        .find(|s| s["service"] == "shop/checkout")
        .expect("checkout");
    assert_eq!(checkout["type"], "ClusterSetIP");
    assert_eq!(checkout["conflicts"][0]["reason"], "PortConflict");
    assert!(
        checkout["conflicts"][0]["message"]
            .as_str()
            .is_some_and(|m| m.contains("oldest service export in \"west-1\""))
    );
    let ports: Vec<u64> = checkout["ports"]
        .as_array()
        .expect("ports")
        .iter()
        .filter_map(|p| p["port"].as_u64())
        .collect();
    assert_eq!(ports, vec![80, 9090, 9100]);
    let postgres = report["services"]
        .as_array()
        .expect("services")
        .iter()
        .find(|s| s["service"] == "db/postgres")
        .expect("postgres");
    assert_eq!(postgres["type"], "Headless");
}

#[test]
fn explain_follows_the_json_contract() {
    let report = json(&strait(&[
        "explain",
        "--config",
        DEMO,
        "--from",
        "east-1",
        "--output",
        "json",
        "shop/checkout:80",
    ]));
    assert_eq!(report["service"], "shop/checkout");
    assert_eq!(report["port"], 80);
    assert_eq!(report["protocol"], "TCP");
    assert_eq!(report["from"]["cluster"], "east-1");
    assert_eq!(report["from"]["network"], "net-a");
    assert_eq!(report["conflicts"][0], "PortConflict");
    let backends = report["backends"].as_array().expect("backends");
    let direct: Vec<&Value> = backends.iter().filter(|b| b["path"] == "direct").collect();
    let tunnel: Vec<&Value> = backends.iter().filter(|b| b["path"] == "tunnel").collect();
    assert!(direct.iter().all(|b| b["cluster"] == "east-1"));
    assert!(tunnel.iter().all(|b| b["cluster"] == "west-1"));
    assert_eq!(tunnel[0]["gateways"][0], "198.51.100.21:15008");
    assert_eq!(report["excluded"][0]["cluster"], "edge-1");
    assert_eq!(report["excluded"][0]["reason"], "port-not-declared");
}

#[test]
fn explain_defaults_the_viewer_to_gateway_yaml() {
    let report = json(&strait(&[
        "explain",
        "--config",
        DEMO,
        "--output",
        "json",
        "shop/cart:80/tcp",
    ]));
    assert_eq!(report["from"]["cluster"], "east-1");
}

#[test]
fn explain_refuses_an_unexposed_port_naming_the_exposed_ones() {
    let output = strait(&["explain", "--config", DEMO, "shop/checkout:81"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("it exposes http:80/TCP, grpc:9090/TCP, metrics:9100/TCP"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn explain_refuses_unknown_services_and_viewers() {
    let output = strait(&["explain", "--config", DEMO, "shop/nope:80"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(stderr(&output).contains("shop/nope is not exported"));
    let output = strait(&[
        "explain",
        "--config",
        DEMO,
        "--from",
        "mars",
        "shop/cart:80",
    ]);
    assert_eq!(output.status.code(), Some(2));
    assert!(stderr(&output).contains("unknown cluster \"mars\""));
}

#[test]
fn hand_made_set_routes_by_network_and_declared_port() {
    let c1 = cluster_yaml("c1", "net-a", "192.0.2.1")
        + &exported_service("tcp", 42, "2026-01-01T00:00:00Z", "10.0.0.1");
    let c2 = cluster_yaml("c2", "net-a", "192.0.2.2")
        + &exported_service("tcp2", 4242, "2026-01-02T00:00:00Z", "10.0.0.2");
    let c3 = cluster_yaml("c3", "net-b", "192.0.2.3")
        + &exported_service("tcp", 42, "2026-01-03T00:00:00Z", "10.0.0.1");
    let dir = config(&[("one", &c1), ("two", &c2), ("three", &c3)]);
    let dir = dir.path().to_str().expect("utf-8 path");

    let report = json(&strait(&[
        "explain",
        "--config",
        dir,
        "--from",
        "c1",
        "--output",
        "json",
        "app/echo:42",
    ]));
    let backends: Vec<(String, String)> = report["backends"]
        .as_array()
        .expect("backends")
        .iter()
        .map(|b| (b["cluster"].to_string(), b["path"].to_string()))
        .collect();
    assert_eq!(
        backends,
        vec![
            ("\"c1\"".to_owned(), "\"direct\"".to_owned()),
            ("\"c3\"".to_owned(), "\"tunnel\"".to_owned())
        ]
    );
    assert_eq!(report["excluded"][0]["cluster"], "c2");
    assert_eq!(report["excluded"][0]["reason"], "port-not-declared");

    let report = json(&strait(&[
        "explain",
        "--config",
        dir,
        "--from",
        "c3",
        "--output",
        "json",
        "app/echo:4242",
    ]));
    assert_eq!(report["backends"][0]["cluster"], "c2");
    assert_eq!(report["backends"][0]["path"], "tunnel");
    assert_eq!(report["backends"][0]["gateways"][0], "192.0.2.2:15008");
    assert_eq!(report["backends"].as_array().map(Vec::len), Some(1));
}

#[test]
fn check_fails_with_errors_naming_file_document_object_and_field() {
    let bad = cluster_yaml("c1", "net-a", "192.0.2.1")
        + "---\napiVersion: v1\nkind: Service\nmetadata: {name: web, namespace: app}\nspec:\n  ports: [{name: http, port: 70000}]\n";
    let dir = config(&[("one", &bad)]);
    let output = strait(&["check", "--config", dir.path().to_str().expect("path")]);
    assert_eq!(output.status.code(), Some(2));
    let errors = stderr(&output);
    let expected = format!(
        "error: {}, document 4: Service app/web: field spec.ports[0].port: 70000 is not a port number (1-65535)",
        Path::new(&dir.path().join("clusters/one/objects.yaml")).display()
    );
    assert!(errors.contains(&expected), "{errors}");
    assert!(errors.contains("is not valid: 1 error"), "{errors}");
    assert!(output.stdout.is_empty());
}

#[test]
fn check_refuses_a_missing_directory_and_a_duplicate_cluster_id() {
    let output = strait(&["check", "--config", "/nonexistent/strait"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(stderr(&output).contains("cannot read /nonexistent/strait/clusters"));

    let one = cluster_yaml("c1", "net-a", "192.0.2.1");
    let dir = config(&[("first", &one), ("second", &one)]);
    let output = strait(&["check", "--config", dir.path().to_str().expect("path")]);
    assert_eq!(output.status.code(), Some(2));
    let errors = stderr(&output);
    assert!(
        errors.contains("cluster id \"c1\" is claimed by"),
        "{errors}"
    );
    assert!(
        errors.contains("clusters/first") && errors.contains("clusters/second"),
        "{errors}"
    );
}

#[test]
fn a_bad_gateway_yaml_names_its_field() {
    let dir = config(&[("one", &cluster_yaml("c1", "net-a", "192.0.2.1"))]);
    fs::write(
        dir.path().join("gateway.yaml"),
        "tuning:\n  dialAttempts: 0\n",
    )
    .expect("write");
    let output = strait(&["check", "--config", dir.path().to_str().expect("path")]);
    assert_eq!(output.status.code(), Some(2));
    assert!(stderr(&output).contains("field tuning.dialAttempts: must be at least 1"));

    fs::write(
        dir.path().join("gateway.yaml"),
        "tuning:\n  localityMinimumHealthy: 0\n",
    )
    .expect("write");
    let output = strait(&["check", "--config", dir.path().to_str().expect("path")]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("field tuning.localityMinimumHealthy: must be at least 1"),
        "{}",
        stderr(&output)
    );

    fs::write(
        dir.path().join("gateway.yaml"),
        "routing:\n  - service: shop/cart\n    fence:\n      networks: [Net_A]\n",
    )
    .expect("write");
    let output = strait(&["check", "--config", dir.path().to_str().expect("path")]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("field routing[0].fence.networks: network \"Net_A\""),
        "{}",
        stderr(&output)
    );
}

/// The demo runs its gateways and pods on 127.0.0.10 and up, sends traffic
/// through every gateway and prints who answered by which path.
#[test]
fn demo_once_shows_direct_and_tunnelled_answers() {
    let output = strait(&["demo", "--once", "--rounds", "6"]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{}\n{}", stdout, stderr(&output));
    let row = |from: &str, service: &str| {
        stdout
            .lines()
            .find(|line| line.starts_with(from) && line.contains(service))
            .unwrap_or_else(|| panic!("no row for {from} {service}:\n{stdout}"))
            .to_owned()
    };
    // inventory is exported only by east-2: direct from its network, tunnelled from the others.
    assert!(
        row("east-1", "shop/inventory:80").contains("east-2/shop/inventory 10.10.2.41 (direct)")
    );
    assert!(row("west-1", "shop/inventory:80").contains("(tunnel via east-2)"));
    // checkout:9100 is declared only by west-1.
    let metrics = row("east-1", "shop/checkout:9100");
    assert!(
        !metrics.contains("east-1/") && !metrics.contains("edge-1/"),
        "{metrics}"
    );
    assert!(!stdout.contains("refused"), "{stdout}");
    // Every gateway answers clusterset.local too, and the demo says how to ask.
    assert!(
        stdout
            .lines()
            .any(|l| l.trim_start().starts_with("dig @127.0.0.10 -p ")
                && l.ends_with(" cart.shop.svc.clusterset.local")),
        "{stdout}"
    );
}

/// One bad object excludes only itself: `strait imports` (which shows what
/// a running gateway does) plans `echo` while c2's exported ExternalName
/// Service is left out and named, and `strait check` still refuses the
/// configuration (exit 2) so CI linting of configurations keeps working.
#[test]
fn a_bad_object_is_left_out_by_imports_and_refused_by_check() {
    let bad = "---
apiVersion: v1
kind: Service
metadata: {name: db, namespace: app}
spec: {type: ExternalName, externalName: db.example.com}
---
apiVersion: multicluster.x-k8s.io/v1beta1
kind: ServiceExport
metadata: {name: db, namespace: app}
";
    let one = cluster_yaml("c1", "net-a", "192.0.2.1");
    let two = cluster_yaml("c2", "net-b", "192.0.2.2")
        + &exported_service("http", 80, "2026-01-01T00:00:00Z", "10.2.0.5")
        + bad;
    let dir = config(&[("one", &one), ("two", &two)]);
    let path = dir.path().to_str().expect("path");
    let output = strait(&[
        "imports",
        "--config",
        path,
        "--cluster",
        "c1",
        "--output",
        "json",
    ]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let list = json(&output);
    let imports: Vec<&str> = list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|item| item["kind"] == "ServiceImport")
        .filter_map(|item| item["metadata"]["name"].as_str())
        .collect();
    assert_eq!(imports, ["echo"], "{list:#}");
    let errors = stderr(&output);
    assert!(
        errors.contains("ServiceExport app/db") && errors.contains("ExternalName"),
        "{errors}"
    );
    let output = strait(&["check", "--config", path]);
    assert_eq!(output.status.code(), Some(2));
}

/// A ServiceExport's `strait.dev/allowed-clusters` annotation, as `explain`
/// shows it: the admitted cluster routes, another is explained as refused
/// with the reason, and a policy that cannot be read leaves its export out
/// (closed, never open).
#[test]
fn explain_shows_an_access_policy_and_refuses_whom_it_does_not_admit() {
    let export_line =
        "metadata: {name: echo, namespace: app, creationTimestamp: \"2026-01-01T00:00:00Z\"}";
    let with_policy = |value: &str| {
        (cluster_yaml("c2", "net-b", "192.0.2.2")
            + &exported_service("http", 80, "2026-01-01T00:00:00Z", "10.2.0.5"))
            .replace(
                export_line,
                &format!(
                    "metadata:\n  name: echo\n  namespace: app\n  creationTimestamp: \"2026-01-01T00:00:00Z\"\n  annotations: {{strait.dev/allowed-clusters: \"{value}\"}}"
                ),
            )
    };
    let one = cluster_yaml("c1", "net-a", "192.0.2.1");
    let three = cluster_yaml("c3", "net-a", "192.0.2.3");
    let two = with_policy("c1");
    assert!(two.contains("strait.dev/allowed-clusters"), "{two}");
    let dir = config(&[("one", &one), ("two", &two), ("three", &three)]);
    let path = dir.path().to_str().expect("path");
    let explain = |from: &str| {
        strait(&[
            "explain",
            "--config",
            path,
            "--from",
            from,
            "--output",
            "json",
            "app/echo:80",
        ])
    };
    let admitted = json(&explain("c1"));
    assert_eq!(admitted["access"], "admits clusters c1");
    assert!(admitted.get("refused").is_none(), "{admitted:#}");
    assert_eq!(admitted["backends"][0]["path"], "tunnel");
    let refused = json(&explain("c3"));
    assert_eq!(
        refused["refused"],
        "app/echo admits clusters c1; cluster c3 is not one of them"
    );
    let text = strait(&["explain", "--config", path, "--from", "c3", "app/echo:80"]);
    let text = String::from_utf8_lossy(&text.stdout).into_owned();
    assert!(text.contains("access: admits clusters c1\n"), "{text}");
    assert!(
        text.contains("refused: app/echo admits clusters c1;"),
        "{text}"
    );

    let dir = config(&[("one", &one), ("two", &with_policy("c1,Not_An_Id"))]);
    let path = dir.path().to_str().expect("path");
    let output = strait(&["check", "--config", path]);
    assert_eq!(output.status.code(), Some(2));
    let errors = stderr(&output);
    assert!(
        errors.contains("ServiceExport app/echo: field metadata.annotations[\"strait.dev/allowed-clusters\"]: entry \"Not_An_Id\""),
        "{errors}"
    );
    let output = strait(&["explain", "--config", path, "--from", "c1", "app/echo:80"]);
    assert_eq!(output.status.code(), Some(2), "left out, so not exported");
}
