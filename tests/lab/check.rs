//! `strait check --pre` and `strait check --kube` against a real cluster:
//! c1, installed, passes; with its CoreDNS block pointed at another address
//! than `cluster-edge-dns`'s (what a re-created Service leaves behind), the
//! check fails naming both addresses; mended, it passes again. The checks
//! of the gateway's own view, read through the API server's port-forward
//! (as `strait status --kube` reads it): each linked cluster synced and each
//! of its gateways answering; with c3's gateway stopped, the check fails
//! naming it; with c3's network map changed, it fails naming the
//! difference; with c1's certificate expired, it fails naming the expiry;
//! mended, each passes again. An export in a namespace one cluster lacks:
//! its `Ready` message and the check name that cluster, until the
//! namespace is created there.

use std::process::Command;

use serde_json::Value;

use super::{Lab, wait_until};

/// `strait check ARGS --kubeconfig <c1>`: whether it succeeded, and its
/// stdout and stderr.
fn check(lab: &Lab, args: &[&str]) -> (bool, String) {
    let mut args = args.to_vec();
    args.insert(0, "check");
    strait_in_c1(lab, &args)
}

/// `strait ARGS --kubeconfig <c1>`: whether it succeeded, and its stdout
/// and stderr.
fn strait_in_c1(lab: &Lab, args: &[&str]) -> (bool, String) {
    let kubeconfig = lab.kubeconfig("c1");
    let output = Command::new(env!("CARGO_BIN_EXE_strait"))
        .args(args)
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .output()
        .expect("strait runs");
    (
        output.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ),
    )
}

fn corefile(lab: &Lab) -> String {
    lab.field(
        "c1",
        "kube-system",
        &["configmap", "coredns"],
        "{.data.Corefile}",
    )
}

fn set_corefile(lab: &Lab, corefile: &str) {
    let patch = serde_json::json!({"data": {"Corefile": corefile}}).to_string();
    lab.kubectl(
        "c1",
        &[
            "-n",
            "kube-system",
            "patch",
            "configmap",
            "coredns",
            "--type",
            "merge",
            "-p",
            &patch,
        ],
    );
}

pub fn check_names_what_is_wrong_and_passes_when_mended(lab: &Lab) {
    let (passed, said) = check(lab, &["--pre"]);
    assert!(passed, "--pre on an installed cluster: {said}");
    for line in [
        "✓ the API server is Kubernetes 1.",
        "✓ serviceimports.multicluster.x-k8s.io is mcs-api v0.5.2",
        "✓ the cluster id is c1",
        "✓ you may create every object an install makes",
        "✓ a LoadBalancer implementation answers",
    ] {
        assert!(said.contains(line), "{line:?} in:\n{said}");
    }
    let (passed, said) = check(lab, &["--kube"]);
    assert!(passed, "check --kube on the lab's c1: {said}");
    let dns_ip = lab.field(
        "c1",
        "strait-system",
        &["service", "cluster-edge-dns"],
        "{.spec.clusterIP}",
    );
    for line in [
        "✓ cluster-edge has 2 of 2 replicas available",
        "holds the Lease strait-export-status",
        "✓ the gateway Service cluster-edge is at 172.31.100.11",
        &format!("✓ CoreDNS forwards clusterset.local to cluster-edge-dns ({dns_ip})"),
        "✓ the gateway's certificate is spiffe://clusterset.lab/cluster/c1/gateway",
    ] {
        assert!(said.contains(line), "{line:?} in:\n{said}");
    }

    let kept = corefile(lab);
    assert!(
        kept.contains(&dns_ip),
        "the lab's Corefile forwards to {dns_ip}"
    );
    let stale = "10.96.255.254";
    set_corefile(lab, &kept.replace(&dns_ip, stale));
    let (passed, said) = check(lab, &["--kube"]);
    set_corefile(lab, &kept);
    assert!(!passed, "a stale CoreDNS target fails the check: {said}");
    assert!(
        said.contains(&format!(
            "✗ CoreDNS forwards clusterset.local to {stale}, but cluster-edge-dns is {dns_ip}"
        )),
        "{said}"
    );
    let (passed, said) = check(lab, &["--kube"]);
    assert!(passed, "mended: {said}");
}

/// `strait status --kube --output json` in `cluster`, read through its API
/// server's port-forward to a gateway pod.
fn status(lab: &Lab, cluster: &str) -> Result<Value, String> {
    let output = Command::new(env!("CARGO_BIN_EXE_strait"))
        .args(["status", "--kube", "--output", "json", "--timeout", "10s"])
        .arg("--kubeconfig")
        .arg(lab.kubeconfig(cluster))
        .output()
        .expect("strait runs");
    serde_json::from_slice(&output.stdout).map_err(|_| {
        format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    })
}

/// c1's gateway's last answers from c3's gateways: (answered, failed).
fn c3_answers(lab: &Lab) -> (usize, usize) {
    let Ok(view) = status(lab, "c1") else {
        return (0, 0);
    };
    let c3 = view["clusters"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["id"] == "c3")
        .cloned()
        .unwrap_or_default();
    let probes = c3["probes"].as_object().cloned().unwrap_or_default();
    let answered = probes.values().filter(|p| p["error"].is_null()).count();
    (answered, probes.len() - answered)
}

fn scale_c3_gateway(lab: &Lab, replicas: u32) {
    let replicas = format!("--replicas={replicas}");
    lab.kubectl(
        "c3",
        &[
            "-n",
            "strait-system",
            "scale",
            "deployment/cluster-edge",
            &replicas,
        ],
    );
}

/// Sets (or, with `None`, removes) `networks` in c3's gateway.yaml and
/// restarts its gateway, as an operator does.
fn set_c3_network_map(lab: &Lab, map: Option<&str>) {
    lab.edit_gateway_yaml("c3", |lines| {
        let mut lines: Vec<String> = lines
            .into_iter()
            .filter(|line| !line.starts_with("networks:"))
            .collect();
        if let Some(map) = map {
            lines.push(format!("networks: {map}"));
        }
        lines
    });
}

pub fn check_judges_the_links_and_fails_when_a_peer_breaks(lab: &Lab) {
    // The first round of questions goes 5 s after a gateway starts, the
    // next every 30 to 36 s.
    wait_until("c1's gateway has asked c3's gateways", 90, || {
        c3_answers(lab).0 > 0
    });
    let (passed, said) = check(lab, &["--kube"]);
    assert!(passed, "check --kube with every link healthy: {said}");
    for line in [
        "✓ c3 is read from its feed over the tunnel, synced since",
        "✓ c2 is read from its feed over the tunnel, synced since",
        "answered over mutual TLS in",
        "✓ the import port range",
    ] {
        assert!(said.contains(line), "{line:?} in:\n{said}");
    }

    // c3's gateway stopped: c1's next question goes unanswered.
    scale_c3_gateway(lab, 0);
    wait_until("c1's gateway finds c3's gateway silent", 120, || {
        c3_answers(lab) == (0, 1)
    });
    let (passed, said) = check(lab, &["--kube"]);
    scale_c3_gateway(lab, 2);
    assert!(!passed, "a stopped peer gateway fails the check: {said}");
    assert!(
        said.contains("✗ c3's gateway ") && said.contains("did not answer this gateway"),
        "{said}"
    );
    lab.kubectl(
        "c3",
        &[
            "-n",
            "strait-system",
            "rollout",
            "status",
            "deployment/cluster-edge",
            "--timeout=180s",
        ],
    );
    wait_until("c3's gateway answers c1's again", 120, || {
        c3_answers(lab) == (1, 0)
    });

    // c3 given a network map c1 does not hold: c1's check names it.
    set_c3_network_map(lab, Some("{net-a: [c1, c2], net-b: [c3]}"));
    let differs = || {
        let (passed, said) = check(lab, &["--kube"]);
        (!passed
            && said.contains(
                "✗ c3's network map differs from this cluster's: c1: not in our map, net-a there",
            ))
        .then_some(said)
    };
    let mut said = None;
    wait_until("c1's check names c3's network map", 120, || {
        said = differs();
        said.is_some()
    });
    set_c3_network_map(lab, None);
    wait_until("c1's check passes with c3's map removed", 120, || {
        check(lab, &["--kube"]).0
    });

    // c1's TLS Secret given an expired leaf (the running pods keep the
    // one they started with): the check fails naming the expiry.
    let kept = lab.field(
        "c1",
        "strait-system",
        &["secret", "cluster-edge-tls"],
        "{.data.tls\\.crt}",
    );
    set_tls_crt(
        lab,
        &data_encoding::BASE64.encode(expired_leaf().as_bytes()),
    );
    let (passed, said) = check(lab, &["--kube"]);
    set_tls_crt(lab, &kept);
    assert!(!passed, "an expired certificate fails the check: {said}");
    assert!(
        said.contains("✗ the certificate expired at 2020-02-01T00:00:00Z"),
        "{said}"
    );
    let (passed, said) = check(lab, &["--kube"]);
    assert!(passed, "mended: {said}");
}

/// A leaf naming c1's gateway that expired in 2020.
fn expired_leaf() -> String {
    let uri = rcgen::string::Ia5String::try_from("spiffe://clusterset.lab/cluster/c1/gateway")
        .expect("an ASCII URI");
    let mut params = rcgen::CertificateParams::default();
    params.subject_alt_names = vec![rcgen::SanType::URI(uri)];
    params.not_before = rcgen::date_time_ymd(2020, 1, 1);
    params.not_after = rcgen::date_time_ymd(2020, 2, 1);
    let key = rcgen::KeyPair::generate().expect("a key");
    params.self_signed(&key).expect("a certificate").pem()
}

/// Sets `tls.crt` (base64, as the Secret holds it) of c1's gateway Secret.
fn set_tls_crt(lab: &Lab, base64: &str) {
    let patch = serde_json::json!({"data": {"tls.crt": base64}}).to_string();
    lab.kubectl(
        "c1",
        &[
            "-n",
            "strait-system",
            "patch",
            "secret",
            "cluster-edge-tls",
            "--type",
            "merge",
            "-p",
            &patch,
        ],
    );
}

/// The `Ready` message of c1's export `acct/ledger`.
fn ledger_ready(lab: &Lab) -> String {
    lab.field(
        "c1",
        "acct",
        &["serviceexport", "ledger"],
        "{.status.conditions[?(@.type==\"Ready\")].message}",
    )
}

fn create_namespace(lab: &Lab, cluster: &str, name: &str) {
    lab.apply(
        cluster,
        &format!("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {name}\n"),
    );
}

pub fn export_status_names_the_clusters_that_cannot_import(lab: &Lab) {
    // `acct` exists in c1 and c3, not in c2: c2 cannot import what c1
    // exports there, and c1's export says so.
    for cluster in ["c1", "c3"] {
        create_namespace(lab, cluster, "acct");
    }
    lab.echo_service("c1", "acct", "ledger", 1, &[80]);
    // Every gateway asks every other every 30 to 36 s; c3 writes its
    // import, and says so at the next question.
    wait_until(
        "c1's export names c2 as lacking the namespace and c3 as importing",
        150,
        || {
            let message = ledger_ready(lab);
            message.contains(
                "Not imported in c2: namespace acct does not exist there (Strait never creates one).",
            ) && message.contains("Imported in c3.")
        },
    );
    let (explained, said) = strait_in_c1(lab, &["explain", "--kube", "acct/ledger:80"]);
    assert!(explained, "{said}");
    assert!(
        said.contains("exported here: Ready=True (Ready): Service acct/ledger is exported")
            && said.contains("Not imported in c2: namespace acct does not exist there"),
        "{said}"
    );
    let (passed, said) = check(lab, &["--kube"]);
    assert!(
        passed,
        "a missing namespace is a warning, not a failure: {said}"
    );
    assert!(
        said.contains("⚠ c2 imports") && said.contains("acct/ledger (no namespace acct there)"),
        "{said}"
    );
    // c2's admin creates the namespace: c2 imports, and c1's export says so.
    create_namespace(lab, "c2", "acct");
    wait_until("c1's export names c2 and c3 as importing", 150, || {
        ledger_ready(lab).contains("Imported in c2, c3.")
    });
    let (passed, said) = check(lab, &["--kube"]);
    assert!(passed, "{said}");
    assert!(!said.contains("no namespace acct"), "{said}");
    for cluster in ["c1", "c2", "c3"] {
        lab.kubectl(cluster, &["delete", "namespace", "acct", "--wait=false"]);
    }
}
