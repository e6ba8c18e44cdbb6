//! `deploy/rbac.yaml` against a real API server's RBAC: the gateways run
//! with exactly its rules, and the lab's API servers audit every request
//! of a ServiceAccount of `strait-system` (manifests/audit-policy.yaml).

use std::collections::BTreeSet;

use serde_json::Value;

use super::{CLUSTERS, Lab, wait_until};

const GATEWAY: &str = "system:serviceaccount:strait-system:cluster-edge";

/// The audited requests of the cluster: (user, apiGroup, resource with
/// its subresource, verb, answer code).
fn audited(lab: &Lab, cluster: &str) -> Vec<(String, String, String, String, u64)> {
    let path = lab.state().join(cluster).join("audit.log");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .map(|event| {
            let field = |v: &Value| v.as_str().unwrap_or_default().to_owned();
            let object = &event["objectRef"];
            let mut resource = field(&object["resource"]);
            if let Some(sub) = object["subresource"].as_str() {
                resource = format!("{resource}/{sub}");
            }
            (
                field(&event["user"]["username"]),
                field(&object["apiGroup"]),
                resource,
                field(&event["verb"]),
                event["responseStatus"]["code"].as_u64().unwrap_or(0),
            )
        })
        .collect()
}

/// Every (group, resource, verb) the gateway's ClusterRole and Role grant,
/// as the API server holds them.
fn granted(lab: &Lab, cluster: &str) -> BTreeSet<(String, String, String)> {
    let mut granted = BTreeSet::new();
    for args in [
        [
            "get",
            "clusterrole",
            "strait-cluster-edge",
            "-o",
            "json",
            "-n",
            "default",
        ],
        [
            "get",
            "role",
            "cluster-edge",
            "-o",
            "json",
            "-n",
            "strait-system",
        ],
        [
            "get",
            "role",
            "cluster-edge-remotes",
            "-o",
            "json",
            "-n",
            "strait-remotes",
        ],
    ] {
        let role: Value =
            serde_json::from_str(&lab.kubectl(cluster, &args)).expect("a role as JSON");
        for rule in role["rules"].as_array().into_iter().flatten() {
            let words = |key: &str| -> Vec<String> {
                rule[key]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|v| v.as_str().map(str::to_owned))
                    .collect()
            };
            for group in words("apiGroups") {
                for resource in words("resources") {
                    for verb in words("verbs") {
                        granted.insert((group.clone(), resource.clone(), verb));
                    }
                }
            }
        }
    }
    granted
}

/// After the other scenarios, every right the gateways hold was used by a
/// request the API server authorized, and the API servers refused no request of a
/// gateway or of a `strait link` reader. (An apply that creates is
/// audited as `patch`: the `create` rights are shown needed by
/// [`an_import_needs_create`].)
pub fn every_right_is_used_and_none_is_missing(lab: &Lab) {
    let mut used = BTreeSet::new();
    let mut refused = Vec::new();
    for cluster in CLUSTERS {
        for (user, group, resource, verb, code) in audited(lab, cluster) {
            if code == 403 {
                refused.push(format!("{cluster}: {user} {verb} {group}/{resource}"));
            } else if user == GATEWAY && code != 401 {
                // Authorized, whatever the answer: a delete of a slice the
                // garbage collector removed first is a 404 that used the right.
                used.insert((group, resource, verb));
            }
        }
    }
    assert!(refused.is_empty(), "refused: {refused:#?}");
    let unused: Vec<_> = granted(lab, "c1")
        .into_iter()
        .filter(|right| {
            let (group, resource, verb) = right;
            let create_by_apply = verb == "create"
                && ["serviceimports", "services", "endpointslices"].contains(&resource.as_str());
            !create_by_apply && !used.contains(&(group.clone(), resource.clone(), verb.clone()))
        })
        .collect();
    assert!(
        unused.is_empty(),
        "rights of deploy/rbac.yaml no request used: {unused:#?}\nused: {used:#?}"
    );
}

/// Without `create` on ServiceImports, c2's gateways cannot write the
/// import of a service c3 exports (the API server refuses the apply that
/// would create it); with the rule back, the import appears.
pub fn an_import_needs_create(lab: &Lab) {
    let ns = "rbac";
    lab.namespace(ns);
    let role = lab.kubectl(
        "c2",
        &["get", "clusterrole", "strait-cluster-edge", "-o", "json"],
    );
    let mut role: Value = serde_json::from_str(&role).expect("the ClusterRole as JSON");
    let mut removed = false;
    for rule in role["rules"].as_array_mut().expect("rules") {
        if rule["resources"] == serde_json::json!(["serviceimports"])
            && let Some(verbs) = rule["verbs"].as_array_mut()
        {
            verbs.retain(|v| v != "create");
            removed = true;
        }
    }
    assert!(removed, "deploy/rbac.yaml has a serviceimports rule");
    lab.replace("c2", &role.to_string());

    lab.echo_service("c3", ns, "late", 1, &[80]);
    wait_until(
        "c2's gateways are refused the apply that creates the import",
        120,
        || {
            lab.pod_logs("c2", "strait-system", "cluster-edge-")
                .contains(r#"cannot create resource \"serviceimports\""#)
        },
    );
    assert!(
        lab.try_kubectl("c2", &["-n", ns, "get", "serviceimport", "late"])
            .is_err(),
        "no import without create"
    );
    lab.apply_file("c2", "deploy/rbac.yaml");
    wait_until("c2 imports late once create is granted again", 120, || {
        lab.try_kubectl("c2", &["-n", ns, "get", "serviceimport", "late"])
            .is_ok()
    });
}

/// The gateway reads Secrets only in `strait-remotes`: not its own TLS
/// Secret (a mounted volume needs no right) nor a CA key kept beside it in
/// `strait-system`, as deploy/examples/certificate.yaml keeps cert-manager's.
pub fn the_gateway_reads_no_secret_where_a_ca_key_lives(lab: &Lab) {
    let can = |cluster: &str, args: &[&str]| -> bool {
        let mut all = vec!["auth", "can-i"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--as", GATEWAY]);
        // `can-i` exits 1 and says "no" when the answer is no.
        match lab.try_kubectl(cluster, &all) {
            Ok(answer) => answer.trim() == "yes",
            Err(error) => {
                assert!(error.contains("no"), "kubectl auth can-i {args:?}: {error}");
                false
            }
        }
    };
    for cluster in CLUSTERS {
        lab.kubectl(
            cluster,
            &[
                "-n",
                "strait-system",
                "create",
                "secret",
                "generic",
                "strait-ca",
                "--from-literal=tls.key=not-a-real-key",
            ],
        );
        for args in [
            &["get", "secret/strait-ca", "-n", "strait-system"][..],
            &["get", "secret/cluster-edge-tls", "-n", "strait-system"],
            &["list", "secrets", "-n", "strait-system"],
            &["watch", "secrets", "-n", "strait-system"],
            &["list", "secrets", "-n", "default"],
        ] {
            assert!(!can(cluster, args), "{cluster}: the gateway may {args:?}");
        }
        assert!(
            can(cluster, &["list", "secrets", "-n", "strait-remotes"]),
            "{cluster}: the gateway reads the remote-cluster Secrets"
        );
        lab.kubectl(
            cluster,
            &["-n", "strait-system", "delete", "secret", "strait-ca"],
        );
    }
}

/// `deploy/admission.yaml` against the real API server: as the gateway's
/// ServiceAccount, a Service with a selector, an external IP or without
/// Strait's label is denied, and so are an EndpointSlice of another manager
/// and deleting a tenant's Service; a derived Service of Strait's shape
/// passes. (The other scenarios show Strait's own writes pass: every import
/// in them was written under this policy.)
pub fn the_admission_policy_denies_the_gateway_anything_but_its_own_objects(lab: &Lab) {
    let ns = "admission";
    lab.namespace(ns);
    let as_gateway = |args: &[&str]| -> Result<String, String> {
        let mut all = vec!["--as", GATEWAY, "-n", ns];
        all.extend_from_slice(args);
        lab.try_kubectl("c1", &all)
    };
    let apply = |object: Value| -> Result<String, String> {
        let path = lab
            .state()
            .join(format!("admission-{}.json", std::process::id()));
        std::fs::write(&path, object.to_string()).expect("write the object");
        let path = path.to_str().expect("utf-8 path").to_owned();
        as_gateway(&[
            "apply",
            "--server-side",
            "--field-manager",
            "imports.strait.dev",
            "-f",
            &path,
        ])
    };
    let service = |name: &str, labels: Value, spec: Value| {
        serde_json::json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name, "namespace": ns, "labels": labels}, "spec": spec})
    };
    let ports =
        serde_json::json!([{"name": "http", "port": 80, "protocol": "TCP", "targetPort": 20001}]);
    let ours = serde_json::json!({"app.kubernetes.io/managed-by": "strait"});
    let denied = [
        (
            "a selector",
            service(
                "with-selector",
                ours.clone(),
                serde_json::json!({"ports": ports, "selector": {"app": "victim"}}),
            ),
        ),
        (
            "an external IP",
            service(
                "with-external-ip",
                ours.clone(),
                serde_json::json!({"ports": ports, "externalIPs": ["192.0.2.77"]}),
            ),
        ),
        (
            "no Strait label",
            service(
                "not-ours",
                serde_json::json!({}),
                serde_json::json!({"ports": ports}),
            ),
        ),
        (
            "another manager's slice",
            serde_json::json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                "metadata": {"name": "forged", "namespace": ns,
                    "labels": {"kubernetes.io/service-name": "victim",
                        "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io"}},
                "addressType": "IPv4", "endpoints": [{"addresses": ["10.1.0.99"]}],
                "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}),
        ),
    ];
    for (what, object) in denied {
        let refusal = apply(object).expect_err(what);
        assert!(
            refusal.contains("strait-gateway-writes"),
            "{what}: denied, but not by the policy: {refusal}"
        );
    }
    // A tenant's own Service, created by the admin: the gateway may not
    // delete it.
    lab.kubectl(
        "c1",
        &[
            "-n",
            ns,
            "create",
            "service",
            "clusterip",
            "tenant",
            "--tcp=80:8080",
        ],
    );
    let refusal = as_gateway(&["delete", "service", "tenant"]).expect_err("a tenant's Service");
    assert!(refusal.contains("strait-gateway-writes"), "{refusal}");
    // A derived Service of Strait's shape, and its slice, pass.
    apply(service(
        "derived-admission",
        ours,
        serde_json::json!({"ports": ports}),
    ))
    .unwrap_or_else(|e| panic!("Strait's derived Service is denied: {e}"));
    apply(
        serde_json::json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": "derived-admission-ipv4", "namespace": ns,
            "labels": {"kubernetes.io/service-name": "derived-admission",
                "endpointslice.kubernetes.io/managed-by": "imports.strait.dev"}},
        "addressType": "IPv4", "endpoints": [{"addresses": ["10.1.0.98"]}],
        "ports": [{"name": "http", "port": 20001, "protocol": "TCP"}]}),
    )
    .unwrap_or_else(|e| panic!("Strait's slice is denied: {e}"));
    as_gateway(&["delete", "endpointslice", "derived-admission-ipv4"])
        .unwrap_or_else(|e| panic!("deleting Strait's slice is denied: {e}"));
    as_gateway(&["delete", "service", "derived-admission"])
        .unwrap_or_else(|e| panic!("deleting Strait's derived Service is denied: {e}"));
}
