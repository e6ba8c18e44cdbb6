//! Peers named by peer Secrets, added and removed while the gateways run,
//! each trusted by the CA its Secret carries (for its own cluster alone):
//! what `strait link export` prints, applied as `kubectl apply` would, and
//! `strait unlink peer` deletes.

use std::path::Path;
use std::time::Duration;

use kube_api::admin::{get, get_until};
use kube_api::fixtures::peer_secret;

use super::{c1_and_c3, feed_gateway, kube_api, peer_state, tunnel};

/// Leaves in `certs/<id>/ca.crt` the CA naming `id` alone (so nothing but a
/// peer Secret can make the gateway trust another cluster); returns it.
fn own_ca_only(certs: &Path, id: &str) -> String {
    let path = certs.join(id).join("ca.crt");
    let bundle = std::fs::read_to_string(&path).expect("ca.crt");
    let own: Vec<&str> = bundle
        .split_inclusive("-----END CERTIFICATE-----\n")
        .filter(|pem| {
            use rustls_pki_types::CertificateDer;
            use rustls_pki_types::pem::PemObject;
            let der = CertificateDer::from_pem_slice(pem.as_bytes()).expect("a certificate");
            strait::tls::identity_of(&der).is_ok_and(|identity| identity.cluster.as_str() == id)
        })
        .collect();
    assert_eq!(own.len(), 1, "one CA names {id} in {bundle}");
    std::fs::write(&path, own[0]).expect("write ca.crt");
    own[0].to_owned()
}

fn path(path: &Path) -> &str {
    path.to_str().expect("a UTF-8 path")
}

/// Runs the `strait` binary to success: its standard output.
fn strait(args: &[&str]) -> String {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_strait"))
        .args(args)
        .output()
        .expect("strait runs");
    assert!(
        output.status.success(),
        "strait {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("UTF-8")
}

/// A Secret as the API server stores it: `stringData` moved into `data`.
fn as_applied(secret: &mut serde_json::Value) -> serde_json::Value {
    let written = secret["stringData"].take();
    let data: serde_json::Map<String, serde_json::Value> = written
        .as_object()
        .expect("stringData")
        .iter()
        .map(|(key, value)| {
            let text = value.as_str().expect("text");
            let bytes = k8s_openapi::ByteString(text.as_bytes().to_vec());
            (key.clone(), serde_json::to_value(bytes).expect("base64"))
        })
        .collect();
    secret["data"] = data.into();
    secret
        .as_object_mut()
        .expect("an object")
        .remove("stringData");
    secret.clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_secret_links_a_cluster_by_its_feed_while_the_gateways_run() {
    let (dir, c1_api, c3_api) = c1_and_c3().await;
    let certs = dir.path().join("certs");
    let (c1_ca, c3_ca) = (own_ca_only(&certs, "c1"), own_ca_only(&certs, "c3"));
    let ((c1_tunnel, c1_at), (c3_tunnel, c3_at)) = (tunnel().await, tunnel().await);
    let (c1_at, c3_at) = (c1_at.to_string(), c3_at.to_string());
    // Neither gateway names a peer, nor trusts the other's CA.
    let c1 = feed_gateway(dir.path(), "c1", &c1_api, c1_tunnel, Vec::new()).await;
    let c3 = feed_gateway(dir.path(), "c3", &c3_api, c3_tunnel, Vec::new()).await;
    let (c1_admin, c3_admin) = (c1.addresses().admin, c3.addresses().admin);
    assert!(peer_state(&get(c1_admin, "/debug/clusters").await, "c3").is_none());

    // c3 is told of c1 with c1's CA. c1 is told of c3 without one: its
    // ca.crt does not trust c3's gateway, so the feed cannot be read.
    c3_api.apply(peer_secret("c1", "c1", "net-a", &c1_at, Some(&c1_ca)));
    c1_api.apply(peer_secret("c3", "c3", "net-b", &c3_at, None));
    let refused = get_until(c1_admin, "/debug/clusters", "c3 refused", |body| {
        peer_state(body, "c3").is_some_and(|(state, status)| {
            state == "connecting" && status["lastError"].as_str().is_some_and(|e| !e.is_empty())
        })
    })
    .await;
    assert!(
        !get(c1_admin, "/debug/routes").await.contains("10.3.0.7"),
        "nothing of c3 before its gateway is trusted: {refused}"
    );

    // c3's peer document, from `strait link export` run against c3 (its
    // CA picked out of the set's bundle), applied in c1: c1 follows c3's
    // feed, no restart.
    let c3_kubeconfig = c3_api.write_kubeconfig(dir.path(), "c3-admin");
    let document = strait(&[
        "link",
        "export",
        "--local-kubeconfig",
        path(&c3_kubeconfig),
        "--gateway",
        &c3_at,
        "--ca",
        path(&certs.join("ca.crt")),
        "--namespace",
        "strait-system",
    ]);
    let mut secret = strait::discovery::yaml::parse_single(&document).expect("a Secret");
    assert_eq!(secret["metadata"]["name"], "c3-peer", "{document}");
    assert_eq!(secret["stringData"]["cluster"], "c3", "{document}");
    assert_eq!(secret["stringData"]["network"], "net-b", "{document}");
    assert_eq!(
        secret["stringData"]["ca.crt"].as_str(),
        Some(c3_ca.as_str()),
        "c3's CA alone"
    );
    c1_api.delete("Secret", "strait-system", "c3");
    c1_api.apply(as_applied(&mut secret));
    get_until(c1_admin, "/debug/clusters", "c3 synced", |body| {
        peer_state(body, "c3").is_some_and(|(state, _)| state == "synced")
    })
    .await;
    let (_, status) = peer_state(&get(c1_admin, "/debug/clusters").await, "c3").expect("c3");
    assert_eq!(status["objects"]["Service"], 1, "cart only: {status:#}");
    get_until(c1_admin, "/debug/routes", "c3's cart", |body| {
        body.contains("10.3.0.7")
    })
    .await;
    get_until(c3_admin, "/debug/clusters", "c1 synced in c3", |body| {
        peer_state(body, "c1").is_some_and(|(state, _)| state == "synced")
    })
    .await;

    // A second Secret naming c3, and one whose CA names another cluster:
    // each is a finding naming itself, and c3 is followed as before.
    c1_api.apply(peer_secret("again", "c3", "net-b", &c3_at, None));
    c1_api.apply(peer_secret("c4", "c4", "net-b", &c3_at, Some(&c3_ca)));
    let clusters = get_until(c1_admin, "/debug/clusters", "both findings", |body| {
        body.contains("Secret strait-system/again") && body.contains("data.ca.crt")
    })
    .await;
    let clusters: serde_json::Value = serde_json::from_str(&clusters).expect("JSON");
    let errors = clusters["errors"].to_string();
    assert!(
        errors.contains("names c3, already a peer by Secret strait-system/c3-peer"),
        "{errors}"
    );
    assert!(
        errors.contains("Secret strait-system/c4: data.ca.crt"),
        "{errors}"
    );
    assert!(peer_state(&get(c1_admin, "/debug/clusters").await, "c4").is_none());
    assert!(
        peer_state(&get(c1_admin, "/debug/clusters").await, "c3")
            .is_some_and(|(state, _)| state == "synced")
    );
    c1_api.delete("Secret", "strait-system", "again");
    c1_api.delete("Secret", "strait-system", "c4");

    // `strait unlink peer c3` in c1: c3 leaves c1's set and its routes.
    let c1_kubeconfig = c1_api.write_kubeconfig(dir.path(), "c1-admin");
    let said = strait(&[
        "unlink",
        "peer",
        "c3",
        "--local-kubeconfig",
        path(&c1_kubeconfig),
        "--namespace",
        "strait-system",
    ]);
    assert!(said.contains("c3-peer"), "{said}");
    get_until(c1_admin, "/debug/routes", "c3's cart gone", |body| {
        !body.contains("10.3.0.7")
    })
    .await;
    assert!(peer_state(&get(c1_admin, "/debug/clusters").await, "c3").is_none());
    c1.shutdown(Duration::from_millis(100)).await;
    c3.shutdown(Duration::from_millis(100)).await;
}

/// A peer whose link through its API server is made (`strait link --api`)
/// and whose peer Secret is then deleted (`strait unlink peer`) keeps
/// serving its last state while the link has not listed: the way from a
/// feed to a link has no gap. At most `staleAfter` (2 s here): a link that
/// never lists does not keep a departed peer forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_replaced_by_its_link_serves_until_the_link_has_listed() {
    use kube_api::fixtures::remote_secret;

    let (dir, c1_api, c3_api) = c1_and_c3().await;
    let ((c1_tunnel, c1_at), (c3_tunnel, c3_at)) = (tunnel().await, tunnel().await);
    let c1 = feed_gateway(dir.path(), "c1", &c1_api, c1_tunnel, Vec::new()).await;
    let _c3 = feed_gateway(
        dir.path(),
        "c3",
        &c3_api,
        c3_tunnel,
        vec![super::feed_peer("c1", "net-a", c1_at)],
    )
    .await;
    let c1_admin = c1.addresses().admin;
    c1_api.apply(peer_secret(
        "c3-peer",
        "c3",
        "net-b",
        &c3_at.to_string(),
        None,
    ));
    get_until(c1_admin, "/debug/routes", "c3's cart by its feed", |body| {
        body.contains("10.3.0.7")
    })
    .await;

    // The link's first list of Services is never answered: it stays
    // connecting.
    c3_api.hang_lists("services", 1);
    c1_api.apply(remote_secret("c3", &c3_api.kubeconfig("c3"), true));
    get_until(c1_admin, "/debug/clusters", "the link connecting", |body| {
        let parsed: serde_json::Value = serde_json::from_str(body).unwrap_or_default();
        parsed["clusters"].as_array().is_some_and(|clusters| {
            clusters.iter().any(|c| {
                c["source"]
                    .as_str()
                    .is_some_and(|s| s.ends_with("strait-system/c3"))
                    && c["state"] == "connecting"
            })
        })
    })
    .await;
    c1_api.delete("Secret", "strait-system", "c3-peer");
    get_until(c1_admin, "/debug/clusters", "the peer removed", |body| {
        peer_state(body, "c3").is_none()
    })
    .await;
    // Half of staleAfter: cart's backend stays all along.
    for _ in 0..10 {
        let routes = get(c1_admin, "/debug/routes").await;
        assert!(
            routes.contains("10.3.0.7"),
            "cart kept while the link connects: {routes}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Past staleAfter, with the link still not listed, it is let go.
    get_until(
        c1_admin,
        "/debug/routes",
        "the departed peer let go",
        |body| !body.contains("10.3.0.7"),
    )
    .await;
}
