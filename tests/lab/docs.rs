//! docs/kubernetes.md is the test: its blocks marked `<!-- lab: NAME -->`,
//! taken from the page and run by bash as written, with the lab's values
//! in place of the example's on each block's first line.
//!
//! - c2, which the lab installed with the Helm chart, is uninstalled by the
//!   page's Helm uninstall block, installed afresh by the short path's
//!   (`install`) and linked to c1 and c3 by `link`;
//! - c3, which the lab installed with `kubectl apply -k deploy/`, is
//!   uninstalled by `uninstall-kustomize` and installed afresh by steps 2 to
//!   6 and the CoreDNS patch (every block marked `kustomize`, in page order),
//!   then linked by `link` too.
//!
//! After each, pods reach across the networks both ways. A step the page
//! gets wrong fails here.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use super::{Lab, wait_until};

/// The shell blocks fenced right after each `<!-- lab: NAME -->` in
/// `page`, in page order, each without the indentation of a list item.
fn blocks(page: &str, name: &str) -> Vec<String> {
    let marker = format!("<!-- lab: {name} -->");
    let found: Vec<String> = page
        .split(&marker)
        .skip(1)
        .map(|after| {
            let mut lines = after.trim_start_matches('\n').lines();
            let fence = lines.next().unwrap_or_default();
            let indent = fence.len() - fence.trim_start().len();
            assert_eq!(
                fence.trim_start(),
                "```sh",
                "{marker} is followed by a ```sh block"
            );
            let body: Vec<&str> = lines
                .take_while(|line| line.trim_start() != "```")
                .map(|line| line.get(indent..).unwrap_or(line.trim_start()))
                .collect();
            body.join("\n")
        })
        .collect();
    assert!(!found.is_empty(), "docs/kubernetes.md has no {marker}");
    found
}

/// The one block marked `name`.
fn block(page: &str, name: &str) -> String {
    let mut found = blocks(page, name);
    assert_eq!(found.len(), 1, "one block is marked {name}");
    found.remove(0)
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

fn page() -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/kubernetes.md"))
        .expect("docs/kubernetes.md")
}

/// `cluster`'s id, network and cluster set, as the page's first lines name
/// them, read from its ClusterProperties (which an uninstall leaves).
fn values_of(lab: &Lab, cluster: &str) -> BTreeMap<&'static str, String> {
    let property = |name: &str| lab.field(cluster, "", &["clusterproperty", name], "{.spec.value}");
    BTreeMap::from([
        ("CLUSTER", cluster.to_owned()),
        ("NETWORK", property("network.clusterset.k8s.io")),
        ("CLUSTERSET", property("clusterset.k8s.io")),
        ("IMAGE", "registry.example.com/strait".to_owned()),
    ])
}

/// The page's link block, from `cluster` to each of `peers`; then, as the
/// lab's kubelet mounts a ConfigMap once when the pod starts (a real one
/// refreshes it and CoreDNS's reload plugin follows), new CoreDNS pods in
/// `cluster` for the page's patch of its Corefile to take effect.
fn link_and_restart_coredns(lab: &Lab, dir: &Path, page: &str, cluster: &str, peers: &[&str]) {
    for peer in peers {
        let values = BTreeMap::from([(
            "PEER_KUBECONFIG",
            lab.kubeconfig(peer).display().to_string(),
        )]);
        run(
            lab,
            dir,
            cluster,
            &with_values(&block(page, "link"), &values),
        );
    }
    lab.kubectl(
        cluster,
        &[
            "-n",
            "kube-system",
            "rollout",
            "restart",
            "deployment/coredns",
        ],
    );
    lab.kubectl(
        cluster,
        &[
            "-n",
            "kube-system",
            "rollout",
            "status",
            "deployment/coredns",
            "--timeout=120s",
        ],
    );
}

/// A pod of each `from` reaches the service `service` that `to` exports,
/// by its clusterset.local name.
fn reach(lab: &Lab, ns: &str, paths: &[(&str, &str, &str)]) {
    lab.namespace(ns);
    for (_, service, to) in paths {
        lab.echo_service(to, ns, service, 1, &[80]);
    }
    for (from, service, to) in paths {
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

pub fn install_and_link_as_the_docs_say(lab: &Lab) {
    let page = page();
    let dir = workdir(lab);
    let values = values_of(lab, "c2");

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
    link_and_restart_coredns(lab, dir.path(), &page, "c2", &["c1", "c3"]);
    reach(lab, "docs", &[("c3", "hello", "c2"), ("c2", "there", "c3")]);
}

pub fn install_with_kustomize_as_the_docs_say(lab: &Lab) {
    let page = page();
    let dir = workdir(lab);
    let values = values_of(lab, "c3");

    run(
        lab,
        dir.path(),
        "c3",
        &with_values(&block(&page, "uninstall-kustomize"), &BTreeMap::new()),
    );
    for ns in ["strait-system", "strait-remotes"] {
        assert!(
            lab.try_kubectl("c3", &["get", "namespace", ns]).is_err(),
            "the kustomize uninstall block removes {ns}"
        );
    }

    let steps = blocks(&page, "kustomize");
    assert!(steps.len() >= 5, "steps 2, 3, 4, 6 and the CoreDNS patch");
    for step in &steps {
        run(lab, dir.path(), "c3", &with_values(step, &values));
    }
    assert!(
        dir.path().join("certs/c3/tls.crt").is_file(),
        "step 4 made c3's certificate in certs/c3"
    );
    link_and_restart_coredns(lab, dir.path(), &page, "c3", &["c1", "c2"]);
    let said = run(lab, dir.path(), "c3", "strait check --kube\n");
    assert!(
        said.contains("✓ cluster-edge has 2 of 2 replicas available"),
        "{said}"
    );
    reach(
        lab,
        "docs-kustomize",
        &[("c1", "near", "c3"), ("c3", "far", "c1")],
    );
}
