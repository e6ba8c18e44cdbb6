//! Stock CoreDNS with the `multicluster` option of its kubernetes plugin
//! (CoreDNS 1.12.2 and later) answers `clusterset.local` from what Strait
//! writes alone (ServiceImports and MCS EndpointSlices), the same as
//! Strait's own responder, and the addresses it answers work from the
//! cluster: a cluster that runs CoreDNS's multicluster support needs no
//! forward block.

use std::collections::BTreeSet;
use std::process::{Child, Command, Stdio};

use super::{Lab, wait_until};

/// Where the CoreDNS under test listens, on the host.
const PORT: &str = "15353";

/// A CoreDNS process, killed when dropped.
struct CoreDns(Child);

impl Drop for CoreDns {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// CoreDNS for `clusterset.local` from c1's API, as the kubernetes
/// plugin's documentation configures the multicluster zone, reading as
/// c1's admin.
fn start_coredns(lab: &Lab) -> CoreDns {
    let dir = lab.state().join("coredns-multicluster");
    std::fs::create_dir_all(&dir).expect("its folder");
    let corefile = dir.join("Corefile");
    std::fs::write(
        &corefile,
        format!(
            "clusterset.local:{PORT} {{\n    kubernetes cluster.local clusterset.local {{\n        kubeconfig {}\n        multicluster clusterset.local\n    }}\n}}\n",
            lab.kubeconfig("c1").display()
        ),
    )
    .expect("the Corefile");
    let log = std::fs::File::create(dir.join("log")).expect("its log");
    let child = Command::new(lab.bin().join("coredns"))
        .arg("-conf")
        .arg(&corefile)
        .stdout(Stdio::from(log.try_clone().expect("log")))
        .stderr(Stdio::from(log))
        .spawn()
        .expect("coredns starts");
    CoreDns(child)
}

/// `dig +short` against the CoreDNS under test: its records, sorted.
fn ask_coredns(qtype: &str, name: &str) -> BTreeSet<String> {
    let output = Command::new("dig")
        .args([
            "@127.0.0.1",
            "-p",
            PORT,
            "+short",
            "+time=2",
            "+tries=1",
            qtype,
            name,
        ])
        .output()
        .expect("dig runs");
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter(|line| !line.starts_with(';'))
        .map(str::to_owned)
        .collect()
}

/// `dig +short` from a pod of c1, through its resolver: c1's CoreDNS,
/// which forwards the zone to Strait.
fn ask_strait(lab: &Lab, ns: &str, pod: &str, qtype: &str, name: &str) -> BTreeSet<String> {
    lab.exec(
        "c1",
        ns,
        pod,
        &["dig", "+short", "+time=2", "+tries=1", qtype, name],
    )
    .unwrap_or_default()
    .lines()
    .filter(|line| !line.starts_with(';'))
    .map(str::to_owned)
    .collect()
}

pub fn multicluster_answers_from_mcs_objects(lab: &Lab) {
    let ns = "mcdns";
    lab.namespace(ns);
    lab.echo_service("c3", ns, "cart", 1, &[80]);
    lab.headless_db("c3", ns);
    let client = lab.client_pod("c1", ns);
    let _coredns = start_coredns(lab);
    let cart = format!("cart.{ns}.svc.clusterset.local.");
    let db = format!("db.{ns}.svc.clusterset.local.");

    // A ClusterSetIP service: the import's ClusterSetIP, from both.
    wait_until("CoreDNS answers cart with its ClusterSetIP", 120, || {
        let ip = lab.field("c1", ns, &["serviceimport", "cart"], "{.spec.ips[0]}");
        !ip.is_empty() && ask_coredns("A", &cart) == BTreeSet::from([ip])
    });
    assert_eq!(
        ask_coredns("A", &cart),
        ask_strait(lab, ns, client, "A", &cart),
        "CoreDNS and Strait agree on {cart}"
    );
    let url = format!(
        "http://{}/",
        ask_coredns("A", &cart).pop_first().unwrap_or_default()
    );
    // The import is Ready before kube-proxy and the gateways follow it.
    wait_until("CoreDNS's answer for cart reaches cart", 60, || {
        lab.curl("c1", ns, client, &url)
            .is_ok_and(|a| a.starts_with(&format!("{ns}/cart-")))
    });

    // A headless service on another network: each pod by its address
    // here, per pod name and for the service, from both.
    wait_until("CoreDNS answers db with both pods", 120, || {
        let answered = ask_coredns("A", &db);
        answered.len() == 2 && answered == ask_strait(lab, ns, client, "A", &db)
    });
    for name in ["db-0", "db-1"] {
        let pod = format!("{name}.c3.db.{ns}.svc.clusterset.local.");
        let from_coredns = ask_coredns("A", &pod);
        assert_eq!(from_coredns.len(), 1, "{pod}: {from_coredns:?}");
        assert_eq!(
            from_coredns,
            ask_strait(lab, ns, client, "A", &pod),
            "CoreDNS and Strait agree on {pod}"
        );
        let address = from_coredns.first().cloned().unwrap_or_default();
        let url = format!("http://{address}:8080/");
        // The name is answered as soon as the MCS slice is written; the
        // per-pod Service behind the address is reachable once kube-proxy
        // has programmed it (and refuses until then), as for any new Service.
        wait_until(&format!("{pod} at {address} answers"), 60, || {
            lab.curl("c1", ns, client, &url).is_ok()
        });
        let answer = lab
            .curl("c1", ns, client, &url)
            .unwrap_or_else(|e| panic!("{pod} at {address}: {e}"));
        assert!(
            answer.starts_with(&format!("{ns}/{name} ")),
            "CoreDNS's address for {pod} reaches {name}: {answer}"
        );
    }
    let srv = ask_coredns("SRV", &format!("_http._tcp.{db}"));
    assert_eq!(srv.len(), 2, "an SRV record per pod: {srv:?}");
}
