//! docs/kubernetes.md is the test: its Helm path's blocks (`<!-- lab:
//! install -->`, `<!-- lab: link -->`) and its uninstall block (`<!-- lab:
//! uninstall -->`), taken from the page and run by bash as written, with
//! the lab's values in place of the example's on each block's first line.
//! c2, which the lab installed with the Helm chart, is uninstalled by the
//! page's block and installed afresh by the short path's, linked to c1 and
//! c3 by the link block; then a c3 pod reaches a service c2 exports across
//! the networks, and a c2 pod one that c3 exports. A step the page gets
//! wrong fails here.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use super::{Lab, wait_until};

/// The shell block fenced right after `<!-- lab: NAME -->` in `page`.
fn block(page: &str, name: &str) -> String {
    let marker = format!("<!-- lab: {name} -->");
    let after = page
        .split_once(&marker)
        .unwrap_or_else(|| panic!("docs/kubernetes.md has no {marker}"))
        .1
        .trim_start();
    let body = after
        .strip_prefix("```sh\n")
        .unwrap_or_else(|| panic!("{marker} is followed by a ```sh block"));
    body.split_once("\n```")
        .unwrap_or_else(|| panic!("the block after {marker} ends"))
        .0
        .to_owned()
}

/// `block` with each `NAME=value` of its first line given the lab's value
/// for NAME; a block whose first line assigns nothing is run as it is.
fn with_values(block: &str, values: &BTreeMap<&str, String>) -> String {
    let (first, rest) = block.split_once('\n').unwrap_or((block, ""));
    let words: Vec<&str> = first.split_whitespace().collect();
    if !words.iter().all(|w| w.contains('=') && !w.starts_with('-')) {
        return format!("{block}\n");
    }
    let assigned: Vec<String> = words
        .iter()
        .map(|word| {
            let (name, _) = word.split_once('=').unwrap_or((word, ""));
            let value = values.get(name).unwrap_or_else(|| {
                panic!("the lab has no value for {name} (the block's first line: {first})")
            });
            format!("{name}={value}")
        })
        .collect();
    format!("{}\n{rest}\n", assigned.join(" "))
}

/// Runs `script` with bash in `dir`, as a user would: kubectl, helm and
/// strait on the PATH, `cluster`'s kubeconfig as kubectl's.
fn run(lab: &Lab, dir: &Path, cluster: &str, script: &str) -> String {
    let path = format!(
        "{}:{}",
        dir.join("bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let output = Command::new("bash")
        .arg("-c")
        .arg(format!("set -euo pipefail -x\n{script}"))
        .current_dir(dir)
        .env("PATH", path)
        .env("KUBECONFIG", lab.kubeconfig(cluster))
        .output()
        .expect("bash runs");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        output.status.success(),
        "a block of docs/kubernetes.md failed in {cluster}:\n{script}\n---\n{said}"
    );
    said
}

/// A folder to run the page's commands in: `deploy/` of this checkout,
/// and `bin/` with kubectl, helm and strait.
fn workdir(lab: &Lab) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    std::os::unix::fs::symlink(repo.join("deploy"), dir.path().join("deploy")).expect("deploy/");
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).expect("bin/");
    for (name, target) in [
        ("kubectl", lab.bin().join("kubectl")),
        ("helm", lab.helm()),
        ("strait", env!("CARGO_BIN_EXE_strait").into()),
    ] {
        std::os::unix::fs::symlink(target, bin.join(name)).expect("a tool");
    }
    dir
}

pub fn install_and_link_as_the_docs_say(lab: &Lab) {
    let page =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/kubernetes.md"))
            .expect("docs/kubernetes.md");
    let dir = workdir(lab);
    let network = lab.field(
        "c2",
        "",
        &["clusterproperty", "network.clusterset.k8s.io"],
        "{.spec.value}",
    );
    let clusterset = lab.field(
        "c2",
        "",
        &["clusterproperty", "clusterset.k8s.io"],
        "{.spec.value}",
    );

    run(
        lab,
        dir.path(),
        "c2",
        &with_values(&block(&page, "uninstall"), &BTreeMap::new()),
    );
    assert!(
        lab.try_kubectl("c2", &["get", "namespace", "strait-system"])
            .is_err(),
        "the uninstall block removes strait-system"
    );

    let values = BTreeMap::from([
        ("CLUSTER", "c2".to_owned()),
        ("NETWORK", network),
        ("CLUSTERSET", clusterset),
        ("IMAGE", "registry.example.com/strait".to_owned()),
    ]);
    let said = run(
        lab,
        dir.path(),
        "c2",
        &with_values(&block(&page, "install"), &values),
    );
    assert!(
        said.contains("✓ cluster-edge has 2 of 2 replicas available"),
        "{said}"
    );
    for peer in ["c1", "c3"] {
        let values = BTreeMap::from([(
            "PEER_KUBECONFIG",
            lab.kubeconfig(peer).display().to_string(),
        )]);
        run(
            lab,
            dir.path(),
            "c2",
            &with_values(&block(&page, "link"), &values),
        );
    }
    // The lab's kubelet mounts a ConfigMap once, when the pod starts (a
    // real one refreshes it and CoreDNS's reload plugin follows): the
    // page's patch of c2's Corefile takes effect with new pods.
    lab.kubectl(
        "c2",
        &[
            "-n",
            "kube-system",
            "rollout",
            "restart",
            "deployment/coredns",
        ],
    );
    lab.kubectl(
        "c2",
        &[
            "-n",
            "kube-system",
            "rollout",
            "status",
            "deployment/coredns",
            "--timeout=120s",
        ],
    );

    let ns = "docs";
    lab.namespace(ns);
    lab.echo_service("c2", ns, "hello", 1, &[80]);
    lab.echo_service("c3", ns, "there", 1, &[80]);
    for (from, service, to) in [("c3", "hello", "c2"), ("c2", "there", "c3")] {
        let client = lab.client_pod(from, ns);
        let url = format!("http://{service}.{ns}.svc.clusterset.local/");
        wait_until(
            &format!("a {from} pod reaches {to}'s {service} across the networks"),
            180,
            || {
                lab.curl(from, ns, client, &url)
                    .is_ok_and(|answer| answer.starts_with(&format!("{ns}/{service}-")))
            },
        );
    }
}
