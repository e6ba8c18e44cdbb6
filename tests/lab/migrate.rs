//! Moving a live cluster set to Strait (docs/kubernetes.md, "Migrating
//! from another MCS implementation"): a stand-in previous controller
//! (field manager `lab-previous`) left c1 an import of c2's `cart`, its
//! derived Service and a slice listing c2's pod; c1's Strait leaves it
//! alone, then takes it over with `kube.adoptImports` while a pod of c1
//! keeps calling the ClusterSetIP. No call fails, the ClusterSetIP stays,
//! and afterwards the calls go through Strait's gateways.

use std::sync::atomic::{AtomicBool, Ordering};

use super::{Lab, wait_until};

const PREVIOUS: &str = "lab-previous";

/// Server-side applies `yaml` in c1 as the previous controller.
fn apply_as_previous(lab: &Lab, yaml: &str) {
    let file = lab.state().join("previous.yaml");
    std::fs::write(&file, yaml).expect("the previous controller's object");
    lab.kubectl(
        "c1",
        &[
            "apply",
            "--server-side",
            &format!("--field-manager={PREVIOUS}"),
            "-f",
            file.to_str().expect("a UTF-8 path"),
        ],
    );
}

/// The previous controller's ServiceImport of `cart`, naming its derived
/// Service, with its ClusterSetIP once it has one.
fn previous_import(ns: &str, vip: Option<&str>) -> String {
    let ips = vip
        .map(|vip| format!("  ips: [{vip}]\n"))
        .unwrap_or_default();
    format!(
        "apiVersion: multicluster.x-k8s.io/v1alpha1
kind: ServiceImport
metadata:
  name: cart
  namespace: {ns}
  annotations: {{multicluster.kubernetes.io/derived-service: derived-previous}}
spec:
  type: ClusterSetIP
{ips}  ports: [{{name: http, port: 80, protocol: TCP}}]
"
    )
}

/// Sets (or, with `None`, removes) `kube.adoptImports` in c1's
/// gateway.yaml and restarts the gateway Deployment, as an operator does.
fn set_adoption(lab: &Lab, from: Option<&str>) {
    lab.edit_gateway_yaml("c1", |lines| {
        let mut lines: Vec<String> = lines
            .into_iter()
            .filter(|line| !line.trim_start().starts_with("adoptImports:"))
            .collect();
        if let Some(from) = from {
            let at = lines
                .iter()
                .position(|line| line.trim_start().starts_with("manageImports:"))
                .expect("gateway.yaml has kube.manageImports");
            lines.insert(at + 1, format!("  adoptImports: {from}"));
        }
        lines
    });
}

pub fn traffic_flows_while_strait_takes_over(lab: &Lab) {
    let ns = "migrate";
    lab.namespace(ns);
    // c2's cart, not exported yet: the previous controller comes first.
    lab.apply("c2", &super::echo_deployment(ns, "cart", 1));
    lab.apply(
        "c2",
        &format!(
            "apiVersion: v1\nkind: Service\nmetadata: {{name: cart, namespace: {ns}}}\n\
             spec:\n  selector: {{app: cart}}\n  ports: [{{name: http, port: 80, targetPort: 8080}}]\n"
        ),
    );
    let mut pod_ip = Vec::new();
    wait_until("c2's cart pod has an address", 120, || {
        pod_ip = lab.pod_ips("c2", ns, "cart-");
        pod_ip.len() == 1
    });
    let pod_ip = &pod_ip[0];

    // What the previous controller left in c1: a flat-network import whose
    // derived Service lists c2's pod itself.
    apply_as_previous(lab, &previous_import(ns, None));
    let import_uid = lab.field("c1", ns, &["serviceimport", "cart"], "{.metadata.uid}");
    apply_as_previous(
        lab,
        &format!(
            "apiVersion: v1
kind: Service
metadata:
  name: derived-previous
  namespace: {ns}
  ownerReferences:
  - {{apiVersion: multicluster.x-k8s.io/v1alpha1, kind: ServiceImport, name: cart, uid: {import_uid}, controller: true}}
spec:
  type: ClusterIP
  ports: [{{name: http, port: 80, protocol: TCP, targetPort: 8080}}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: derived-previous-1
  namespace: {ns}
  labels: {{kubernetes.io/service-name: derived-previous, endpointslice.kubernetes.io/managed-by: previous.example}}
addressType: IPv4
endpoints: [{{addresses: [{pod_ip}], conditions: {{ready: true}}}}]
ports: [{{name: http, port: 8080, protocol: TCP}}]
"
        ),
    );
    let vip = lab.field(
        "c1",
        ns,
        &["service", "derived-previous"],
        "{.spec.clusterIP}",
    );
    // The whole import again (a server-side apply drops what its manager
    // leaves out), now with the ClusterSetIP.
    apply_as_previous(lab, &previous_import(ns, Some(&vip)));
    lab.apply(
        "c2",
        &format!(
            "apiVersion: multicluster.x-k8s.io/v1alpha1\nkind: ServiceExport\n\
             metadata: {{name: cart, namespace: {ns}}}\n"
        ),
    );
    let client = lab.client_pod("c1", ns);
    let url = format!("http://{vip}/");
    wait_until("the previous path answers", 60, || {
        lab.curl("c1", ns, client, &url)
            .is_ok_and(|a| a.starts_with(&format!("{ns}/cart-")))
    });

    // Calls every 200 ms for as long as the takeover lasts.
    let stop = AtomicBool::new(false);
    let calls = std::thread::scope(|scope| {
        let caller = scope.spawn(|| {
            let mut results = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                results.push(lab.curl("c1", ns, client, &url));
                std::thread::sleep(std::time::Duration::from_millis(200));
            }
            results
        });
        set_adoption(lab, Some(PREVIOUS));
        // A wait that fails must still stop the caller, or the scope would
        // wait for it forever.
        let held = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            wait_until(
                "Strait holds the import and its derived Service",
                120,
                || {
                    let managed = lab.field(
                        "c1",
                        ns,
                        &["service", "derived-previous"],
                        "{.metadata.labels.app\\.kubernetes\\.io/managed-by}",
                    );
                    let old_slice = lab.try_kubectl(
                        "c1",
                        &["-n", ns, "get", "endpointslice", "derived-previous-1"],
                    );
                    managed == "strait" && old_slice.is_err()
                },
            )
        }));
        // A while on the new path, then stop.
        if held.is_ok() {
            std::thread::sleep(std::time::Duration::from_secs(5));
        }
        stop.store(true, Ordering::Relaxed);
        let calls = caller.join().expect("the caller thread");
        if let Err(failed) = held {
            std::panic::resume_unwind(failed);
        }
        calls
    });
    let failed: Vec<&String> = calls.iter().filter_map(|c| c.as_ref().err()).collect();
    assert!(calls.len() > 20, "calls were made: {}", calls.len());
    assert!(
        failed.is_empty(),
        "{} of {} calls failed during the takeover: {failed:?}",
        failed.len(),
        calls.len()
    );
    // The same ClusterSetIP, now Strait's import, forwarding to an import port.
    let import = lab.field(
        "c1",
        ns,
        &["serviceimport", "cart"],
        "{.spec.ips[0]} {.metadata.labels.app\\.kubernetes\\.io/managed-by}",
    );
    assert_eq!(import, format!("{vip} strait"));
    let target = lab.field(
        "c1",
        ns,
        &["service", "derived-previous"],
        "{.spec.ports[0].targetPort}",
    );
    assert_ne!(target, "8080", "forwards to a gateway import port now");
    set_adoption(lab, None);
}
