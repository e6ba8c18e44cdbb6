//! The exported-state feed end to end: a real `strait run --kube` serving
//! its cluster's feed on the tunnel port, read by `strait feed` with
//! another cluster's certificate. Asserted on what crosses the wire: what
//! each subscriber is sent, that a service admitting only some clusters is
//! never sent to the others, that a change arrives as one service, and
//! that a gateway is read only as the cluster its certificate names.
//!
//! The local cluster's API server is `kube_api::ApiServer`, the in-process
//! stand-in the other Kubernetes tests use (tests/kube_status.rs).

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on what they set up

mod kube_api;
#[path = "feed/peer_secrets.rs"]
mod peer_secrets;

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use kube_api::ApiServer;
use kube_api::admin::ready_field;
use kube_api::fixtures::{export, gateway, namespace, property, service, slice};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};

const WAIT: Duration = Duration::from_secs(20);

/// A cluster's API server with its ids and gateway, nothing exported.
async fn cluster(id: &str, network: &str, gateway_ip: &str) -> ApiServer {
    let server = ApiServer::start(&["v1alpha1"]).await;
    server.apply(namespace("strait-system"));
    server.apply(namespace("shop"));
    server.apply(property("cluster.clusterset.k8s.io", id, "v1alpha1"));
    server.apply(property("clusterset.k8s.io", "feed.strait.dev", "v1alpha1"));
    server.apply(property("network.clusterset.k8s.io", network, "v1alpha1"));
    server.apply(gateway(gateway_ip));
    server
}

/// c3's API server: `shop/cart` exported to all, `shop/ledger` admitted
/// only to c2, `shop/hidden` not exported.
async fn c3() -> ApiServer {
    let server = cluster("c3", "net-b", "203.0.113.3").await;
    for name in ["cart", "ledger", "hidden"] {
        server.apply(service(name, &[("http", 80)]));
        server.apply(slice(name, &format!("{name}-1"), &[("10.3.0.7", true)]));
    }
    server.apply(export("cart", "v1alpha1"));
    let mut ledger = export("ledger", "v1alpha1");
    ledger["metadata"]["annotations"] = json!({"strait.dev/allowed-clusters": "c2"});
    server.apply(ledger);
    server
}

fn feed_command(
    certs: &Path,
    as_cluster: &str,
    peer: &str,
    cluster: &str,
) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_strait"));
    command
        .args(["feed", "--peer", peer, "--cluster", cluster, "--tls-dir"])
        .arg(certs.join(as_cluster))
        .env("RUST_LOG", "warn")
        .kill_on_drop(true)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

/// `strait feed` up to its first `synced`: its messages.
async fn read_once(certs: &Path, as_cluster: &str, peer: &str) -> Vec<Value> {
    let output = tokio::time::timeout(WAIT, feed_command(certs, as_cluster, peer, "c3").output())
        .await
        .expect("strait feed answers in time")
        .expect("strait feed runs");
    assert!(
        output.status.success(),
        "strait feed as {as_cluster}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).expect("a JSON line"))
        .collect()
}

/// `strait feed` refused: its error.
async fn refused(certs: &Path, as_cluster: &str, peer: &str, cluster: &str) -> String {
    let output = feed_command(certs, as_cluster, peer, cluster)
        .output()
        .await
        .expect("strait feed runs");
    assert!(
        !output.status.success(),
        "strait feed as {as_cluster} read {cluster}"
    );
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn services(messages: &[Value]) -> Vec<String> {
    messages
        .iter()
        .filter_map(|m| m["service"]["name"].as_str().map(str::to_owned))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_serves_its_exported_state_to_each_peer_as_its_policy_admits() {
    let dir = tempfile::tempdir().expect("temp dir");
    let server = c3().await;
    let kubeconfig = server.write_kubeconfig(dir.path(), "c3");
    // c1 and c2 are the set's other clusters, read through their API
    // servers; c4 has a certificate of the set's trust domain but is not
    // in the set.
    let c1 = cluster("c1", "net-a", "203.0.113.1").await;
    let c2 = cluster("c2", "net-a", "203.0.113.2").await;
    c1.write_kubeconfig(dir.path(), "c1");
    c2.write_kubeconfig(dir.path(), "c2");
    std::fs::write(
        dir.path().join("gateway.yaml"),
        "kube:\n  kubeconfigs: [c1.yaml, c2.yaml]\n",
    )
    .expect("gateway.yaml");
    let certs = dir.path().join("certs");
    let ids = ["c1", "c2", "c3", "c4"].map(|id| strait::model::ClusterId::new(id).expect("id"));
    strait::tls::write_cluster_set(&certs, "feed.strait.dev", &ids).expect("certificates");
    let log = dir.path().join("run.log");
    let mut run = tokio::process::Command::new(env!("CARGO_BIN_EXE_strait"));
    run.args(["run", "--kube", "--config"])
        .arg(dir.path())
        .arg("--tls-dir")
        .arg(certs.join("c3"))
        .args([
            "--admin-listen",
            "127.0.0.1:0",
            "--connect-listen",
            "127.0.0.1:0",
            "--tunnel-listen",
            "127.0.0.1:0",
        ])
        .env("KUBECONFIG", &kubeconfig)
        .env("POD_NAMESPACE", "strait-system")
        .env("RUST_LOG", "info")
        .kill_on_drop(true)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log file"));
    let _gateway = run.spawn().expect("strait run starts");
    kube_api::until(
        "strait run ready",
        || ready_field(&log, "tunnel").is_some(),
        || std::fs::read_to_string(&log).unwrap_or_default(),
    )
    .await;
    let peer = ready_field(&log, "tunnel").expect("checked");
    // The gateway is ready before its remote clusters have synced: the
    // feed is read once c1 is a cluster of its set.
    let started = std::time::Instant::now();
    while !feed_command(&certs, "c1", &peer, "c3")
        .output()
        .await
        .expect("strait feed runs")
        .status
        .success()
    {
        assert!(
            started.elapsed() < WAIT,
            "c1 never admitted:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // c1 gets cart only; c2 gets cart and ledger; nobody gets hidden.
    let to_c1 = read_once(&certs, "c1", &peer).await;
    assert_eq!(to_c1[0]["hello"]["cluster"], "c3", "{to_c1:#?}");
    assert_eq!(to_c1[0]["hello"]["snapshot"], true);
    assert_eq!(to_c1[0]["hello"]["gateways"], json!(["203.0.113.3:15008"]));
    assert_eq!(services(&to_c1), ["cart"]);
    assert!(to_c1.last().expect("messages")["synced"].is_object());
    let cart = &to_c1[1]["service"];
    assert_eq!(cart["namespace"], "shop");
    assert_eq!(
        cart["ports"],
        json!([{"name": "http", "protocol": "TCP", "port": 80}])
    );
    assert_eq!(cart["endpoints"][0]["endpoints"][0]["address"], "10.3.0.7");
    assert_eq!(
        services(&read_once(&certs, "c2", &peer).await),
        ["cart", "ledger"]
    );
    // Over QUIC (the tunnel port on UDP), the same feed, scoped the same.
    let over_quic = |as_cluster: &'static str| {
        let mut command = feed_command(&certs, as_cluster, &peer, "c3");
        command.args(["--transport", "quic"]);
        async move {
            let output = tokio::time::timeout(WAIT, command.output())
                .await
                .expect("strait feed over quic answers in time")
                .expect("strait feed runs");
            assert!(
                output.status.success(),
                "strait feed --transport quic as {as_cluster}: {}",
                String::from_utf8_lossy(&output.stderr)
            );
            String::from_utf8_lossy(&output.stdout)
                .lines()
                .map(|line| serde_json::from_str(line).expect("a JSON line"))
                .collect::<Vec<Value>>()
        }
    };
    assert_eq!(
        over_quic("c1").await,
        to_c1,
        "the same messages as over HTTP/2"
    );
    assert_eq!(services(&over_quic("c2").await), ["cart", "ledger"]);

    // A cluster outside the set reads nothing.
    let stderr = refused(&certs, "c4", &peer, "c3").await;
    assert!(
        stderr.contains("403") && stderr.contains("cluster c4 is not in the cluster set"),
        "{stderr}"
    );

    // A gateway is read only as the cluster its certificate names.
    let stderr = refused(&certs, "c1", &peer, "c2").await;
    assert!(
        stderr.contains("not a gateway of the network being reached"),
        "{stderr}"
    );

    // Following: one endpoint change arrives as that one service.
    let mut follow = feed_command(&certs, "c1", &peer, "c3");
    follow.arg("--follow");
    let mut child = follow.spawn().expect("strait feed --follow runs");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let mut next = async || -> Value {
        let line = tokio::time::timeout(WAIT, lines.next_line())
            .await
            .expect("a message in time")
            .expect("stdout reads")
            .expect("the feed goes on");
        serde_json::from_str(&line).expect("a JSON line")
    };
    loop {
        if next().await["synced"].is_object() {
            break;
        }
    }
    server.apply(slice("cart", "cart-1", &[("10.3.0.8", true)]));
    let mut changed = Vec::new();
    loop {
        let message = next().await;
        if message["heartbeat"].is_object() {
            continue;
        }
        let synced = message["synced"].is_object();
        changed.push(message);
        if synced {
            break;
        }
    }
    assert_eq!(services(&changed), ["cart"], "{changed:#?}");
    assert_eq!(
        changed.len(),
        2,
        "no hello, one service, synced: {changed:#?}"
    );
    assert_eq!(
        changed[0]["service"]["endpoints"][0]["endpoints"][0]["address"],
        "10.3.0.8"
    );

    // c1's API server now names another cluster: c1 is no longer in the
    // set, and its open stream ends (as a new one would be refused).
    c1.apply(property("cluster.clusterset.k8s.io", "c9", "v1alpha1"));
    let ended = tokio::time::timeout(WAIT, async {
        while let Some(line) = lines.next_line().await.expect("stdout reads") {
            let message: Value = serde_json::from_str(&line).expect("a JSON line");
            assert!(
                message["heartbeat"].is_object() || message["synced"].is_object(),
                "nothing more for a cluster that left: {message:#?}"
            );
        }
    })
    .await;
    assert!(ended.is_ok(), "the stream of a cluster that left goes on");
}

/// A gateway of `id` in process, reading its own cluster from `server` and
/// the peers from their feeds alone (`kube.peers`): no kubeconfig of any
/// other cluster. `tunnel` is its tunnel listener, bound beforehand so each
/// peer can be told the other's address.
async fn feed_gateway(
    dir: &Path,
    id: &str,
    server: &ApiServer,
    tunnel: tokio::net::TcpListener,
    peers: Vec<strait::feed::FeedPeer>,
) -> strait::gateway::Gateway {
    gateway_reading(dir, id, server, &[], tunnel, peers, Duration::from_secs(2)).await
}

/// As [`feed_gateway`], also reading the clusters of `remotes`
/// (kubeconfig files) through their API servers.
async fn gateway_reading(
    dir: &Path,
    id: &str,
    server: &ApiServer,
    remotes: &[&Path],
    tunnel: tokio::net::TcpListener,
    peers: Vec<strait::feed::FeedPeer>,
    stale_after: Duration,
) -> strait::gateway::Gateway {
    use strait::gateway::{Gateway, GatewayOptions, Listeners};
    let mut source = kube_api::fixtures::kube_options(&server.write_kubeconfig(dir, id), remotes);
    source.peers = peers;
    source.stale_after = stale_after;
    let handle = strait::discovery::kube::KubeHandle::start(source)
        .await
        .expect("source starts");
    // As `strait run` does: the peers sync once the gateway follows them.
    let snapshot = handle.wait_for(WAIT, |s| s.api_synced()).await;
    assert!(snapshot.api_synced(), "{:#?}", snapshot.clusters);
    let bind = || async {
        tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind")
    };
    let listeners = Listeners {
        connect: bind().await,
        tunnel,
        admin: bind().await,
        cluster_set_ip: Vec::new(),
        dns: None,
    };
    let options = GatewayOptions {
        config_dir: dir.to_owned(),
        settings: strait::config::GatewaySettings::default(),
        cluster: id.to_owned(),
        tls_dir: dir.join("certs").join(id),
        dial_source: None,
        overrides: strait::state::DialOverrides::default(),
        tunnel: strait::tunnel::TunnelSettings::default(),
        kube: Some(handle),
        controller: None,
    };
    Gateway::start(options, listeners)
        .await
        .expect("gateway starts")
}

fn feed_peer(id: &str, network: &str, tunnel: std::net::SocketAddr) -> strait::feed::FeedPeer {
    strait::feed::FeedPeer::configured(
        strait::model::ClusterId::new(id).expect("id"),
        strait::model::NetworkId::new(network).expect("network"),
        vec![tunnel.to_string().parse().expect("address")],
    )
}

/// A directory holding the set's certificates (`certs/`), c1's API server
/// and c3's ([`c3`]).
async fn c1_and_c3() -> (tempfile::TempDir, ApiServer, ApiServer) {
    let dir = tempfile::tempdir().expect("temp dir");
    let ids = ["c1", "c3"].map(|id| strait::model::ClusterId::new(id).expect("id"));
    strait::tls::write_cluster_set(&dir.path().join("certs"), "feed.strait.dev", &ids)
        .expect("certificates");
    let c1_api = cluster("c1", "net-a", "203.0.113.1").await;
    (dir, c1_api, c3().await)
}

/// A tunnel listener bound beforehand, so each peer can be told the
/// other's address, and its address.
async fn tunnel() -> (tokio::net::TcpListener, std::net::SocketAddr) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let at = listener.local_addr().expect("address");
    (listener, at)
}

/// The state of peer `id` (read from its feed) in a gateway's
/// `/debug/clusters`, and its whole entry.
fn peer_state(clusters: &str, id: &str) -> Option<(String, Value)> {
    let clusters: Value = serde_json::from_str(clusters).ok()?;
    clusters["clusters"].as_array()?.iter().find_map(|c| {
        (c["id"] == id && c["feed"] == true)
            .then(|| (c["state"].as_str().unwrap_or("").to_owned(), c.clone()))
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peers_take_each_others_exported_state_from_their_feeds_alone() {
    use kube_api::admin::{get, get_until};

    let (dir, c1_api, c3_api) = c1_and_c3().await;
    let (c1_tunnel, c1_at) = tunnel().await;
    let (c3_tunnel, c3_at) = tunnel().await;
    // Each knows the other only as a peer: its id, the network its admin
    // attests, and where its gateway listens. Neither can reach the
    // other's API server.
    // c3 first: c1's first dial finds c3 listening.
    let c3 = feed_gateway(
        dir.path(),
        "c3",
        &c3_api,
        c3_tunnel,
        vec![feed_peer("c1", "net-a", c1_at)],
    )
    .await;
    let c1 = feed_gateway(
        dir.path(),
        "c1",
        &c1_api,
        c1_tunnel,
        vec![feed_peer("c3", "net-b", c3_at)],
    )
    .await;
    let (c1_admin, c3_admin) = (c1.addresses().admin, c3.addresses().admin);

    // Both feeds sync, though each gateway admits the other only as the
    // peer its admin named: c1 imports what c3 exports to it.
    for (admin, peer) in [(c1_admin, "c3"), (c3_admin, "c1")] {
        get_until(admin, "/debug/clusters", "the peer synced", |body| {
            peer_state(body, peer).is_some_and(|(state, _)| state == "synced")
        })
        .await;
    }
    let (_, status) = peer_state(&get(c1_admin, "/debug/clusters").await, "c3").expect("c3");
    assert_eq!(status["source"], "feed c3", "{status:#}");
    // c1 reads c3's feed over QUIC, as traffic to c3 goes by default
    // (`auto`; c3, which dialled c1 before c1 was up, fell back to HTTP/2).
    let metrics = get(c1_admin, "/metrics").await;
    assert!(
        metrics.contains(&format!(
            "strait_tunnel_pool_connections{{peer=\"{c3_at}/quic\"}} 1"
        )) && !metrics.contains(&format!(
            "strait_tunnel_pool_connections{{peer=\"{c3_at}\"}} 1"
        )),
        "no HTTP/2 connection to c3: {metrics}"
    );
    assert_eq!(status["objects"]["Service"], 1, "cart only: {status:#}");
    let routes = get_until(c1_admin, "/debug/routes", "c3's cart", |body| {
        body.contains("10.3.0.7")
    })
    .await;
    assert!(
        !routes.contains("ledger") && !routes.contains("hidden"),
        "only what c3 exports to c1: {routes}"
    );

    // One endpoint change in c3 reaches c1's routes by the feed.
    c3_api.apply(slice("cart", "cart-1", &[("10.3.0.8", true)]));
    get_until(c1_admin, "/debug/routes", "c3's new endpoint", |body| {
        body.contains("10.3.0.8") && !body.contains("10.3.0.7")
    })
    .await;

    // c3's gateway goes: c1 keeps its last state, then past the stale
    // time keeps cart without backends.
    c3.shutdown(Duration::from_millis(100)).await;
    get_until(c1_admin, "/debug/clusters", "c3 stale", |body| {
        peer_state(body, "c3").is_some_and(|(state, status)| {
            state == "stale" && status["lastError"].as_str().is_some_and(|e| !e.is_empty())
        })
    })
    .await;
    let routes = get(c1_admin, "/debug/routes").await;
    assert!(
        routes.contains("cart") && !routes.contains("10.3.0.8"),
        "cart kept, without backends, once stale: {routes}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_linked_cluster_moves_to_its_feed_without_a_gap() {
    use kube_api::admin::{get, get_until};

    let (dir, c1_api, c3_api) = c1_and_c3().await;
    // A link is named after the cluster it reads (as `strait link` names
    // its Secret): only such a link may stand in for a peer.
    let c3_link = c3_api.write_kubeconfig(dir.path(), "c3");
    // Another member, linked as `x`, says it is c3 too.
    let impostor = cluster("c3", "net-b", "203.0.113.9").await;
    impostor.apply(service("cart", &[("http", 80)]));
    impostor.apply(slice("cart", "cart-1", &[("10.9.9.9", true)]));
    impostor.apply(export("cart", "v1alpha1"));
    let x_link = impostor.write_kubeconfig(dir.path(), "x");
    let (c1_tunnel, c1_at) = tunnel().await;
    let (c3_tunnel, c3_at) = tunnel().await;
    // c1 reads c3 through its link and is told of c3 as a peer; c3's
    // gateway is not up yet, so its feed cannot be read.
    let c1 = gateway_reading(
        dir.path(),
        "c1",
        &c1_api,
        &[&c3_link, &x_link],
        c1_tunnel,
        vec![feed_peer("c3", "net-b", c3_at)],
        Duration::from_secs(2),
    )
    .await;
    let c1_admin = c1.addresses().admin;
    get_until(c1_admin, "/debug/routes", "cart through the link", |body| {
        body.contains("10.3.0.7")
    })
    .await;
    assert!(!get(c1_admin, "/debug/routes").await.contains("10.9.9.9"));
    let clusters = get(c1_admin, "/debug/clusters").await;
    let parsed: Value = serde_json::from_str(&clusters).expect("JSON");
    // c3 is one cluster, not two (no duplicate excluded), and the
    // impostor alone is left out, named.
    let excluded = parsed["excluded"].as_array().expect("excluded");
    assert_eq!(excluded.len(), 1, "only the impostor: {clusters}");
    assert!(
        excluded[0]["message"]
            .as_str()
            .is_some_and(|m| m.contains("says it is c3"))
            && excluded[0]["origin"]["source"]
                .as_str()
                .is_some_and(|s| s.ends_with("x.yaml")),
        "the impostor is named: {clusters}"
    );

    // c3's gateway comes up: its feed is read and c3 speaks for itself.
    let _c3 = gateway_reading(
        dir.path(),
        "c3",
        &c3_api,
        &[],
        c3_tunnel,
        vec![feed_peer("c1", "net-a", c1_at)],
        Duration::from_secs(300),
    )
    .await;
    get_until(c1_admin, "/debug/clusters", "c3's feed synced", |body| {
        peer_state(body, "c3")
            .is_some_and(|(state, status)| state == "synced" && status["source"] == "feed c3")
    })
    .await;
    // Both are seen in the metrics, the link's series apart from the feed's.
    get_until(
        c1_admin,
        "/metrics",
        "the feed's and the link's series",
        |body| {
            body.contains(r#"strait_cluster_synced{cluster="c3"} 1"#)
                && body.contains(r#"strait_cluster_synced{cluster="c3/link"} 1"#)
        },
    )
    .await;
    // c3's API server goes: the link goes stale, and its backends would go
    // with it; the feed (c3's gateway keeps what it read) still holds them.
    c3_api.stop().await;
    get_until(
        c1_admin,
        "/debug/clusters",
        "the link to c3 stale",
        |body| {
            let parsed: Value = serde_json::from_str(body).unwrap_or_default();
            parsed["clusters"].as_array().is_some_and(|clusters| {
                clusters
                    .iter()
                    .any(|c| c["feed"] == false && c["id"] == "c3" && c["state"] == "stale")
            })
        },
    )
    .await;
    let routes = get(c1_admin, "/debug/routes").await;
    assert!(
        routes.contains("10.3.0.7") && !routes.contains("10.9.9.9"),
        "c3's feed, not its stale link nor the impostor, holds cart's backends: {routes}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_back_before_it_went_stale_brings_its_changes() {
    use kube_api::admin::{get, get_until};

    let (dir, c1_api, c3_api) = c1_and_c3().await;
    let (c1_tunnel, c1_at) = tunnel().await;
    let (c3_tunnel, c3_at) = tunnel().await;
    let c1 = gateway_reading(
        dir.path(),
        "c1",
        &c1_api,
        &[],
        c1_tunnel,
        vec![feed_peer("c3", "net-b", c3_at)],
        Duration::from_secs(300),
    )
    .await;
    let c1_admin = c1.addresses().admin;
    let start_c3 = |tunnel| {
        gateway_reading(
            dir.path(),
            "c3",
            &c3_api,
            &[],
            tunnel,
            vec![feed_peer("c1", "net-a", c1_at)],
            Duration::from_secs(300),
        )
    };
    let c3 = start_c3(c3_tunnel).await;
    get_until(c1_admin, "/debug/routes", "c3's cart", |body| {
        body.contains("10.3.0.7")
    })
    .await;

    // c3's gateway goes, c3's endpoint moves meanwhile, and c3's gateway
    // comes back well within the stale time: c1 was unsynced, never stale.
    c3.shutdown(Duration::from_millis(100)).await;
    get_until(c1_admin, "/debug/clusters", "c3 unsynced", |body| {
        peer_state(body, "c3").is_some_and(|(state, _)| state == "unsynced")
    })
    .await;
    c3_api.apply(slice("cart", "cart-1", &[("10.3.0.9", true)]));
    // The old QUIC listener's socket goes once its endpoint has wound down,
    // a moment after shutdown returns (a process that exits frees it at once).
    let started = std::time::Instant::now();
    while std::net::UdpSocket::bind(c3_at).is_err() {
        assert!(started.elapsed() < WAIT, "c3's UDP port never freed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let _c3 = start_c3(
        tokio::net::TcpListener::bind(c3_at)
            .await
            .expect("bind again"),
    )
    .await;
    // The follower retries with a backoff: up to a few seconds.
    let started = std::time::Instant::now();
    loop {
        let routes = get(c1_admin, "/debug/routes").await;
        if routes.contains("10.3.0.9") && !routes.contains("10.3.0.7") {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(40),
            "the batch after the reconnect never reached c1's routes: {routes}\n{}",
            get(c1_admin, "/debug/clusters").await
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_feed_hands_back_to_the_link() {
    use kube_api::admin::{get, get_until};
    // cart's routes alone: the link also reads ledger, which c3's feed
    // never sends c1.
    const CART: &str = "/debug/routes?service=shop/cart";

    let (dir, c1_api, c3_api) = c1_and_c3().await;
    let c3_link = c3_api.write_kubeconfig(dir.path(), "c3");
    let (c1_tunnel, c1_at) = tunnel().await;
    let (c3_tunnel, c3_at) = tunnel().await;
    let c1 = gateway_reading(
        dir.path(),
        "c1",
        &c1_api,
        &[&c3_link],
        c1_tunnel,
        vec![feed_peer("c3", "net-b", c3_at)],
        Duration::from_secs(3),
    )
    .await;
    let c1_admin = c1.addresses().admin;
    let c3 = gateway_reading(
        dir.path(),
        "c3",
        &c3_api,
        &[],
        c3_tunnel,
        vec![feed_peer("c1", "net-a", c1_at)],
        Duration::from_secs(300),
    )
    .await;
    get_until(c1_admin, "/debug/clusters", "c3's feed synced", |body| {
        peer_state(body, "c3").is_some_and(|(state, _)| state == "synced")
    })
    .await;
    // c3's gateway goes; while its feed is only unsynced it still speaks
    // for c3, so an endpoint change the link reads meanwhile is not used.
    c3.shutdown(Duration::from_millis(100)).await;
    get_until(c1_admin, "/debug/clusters", "c3's feed unsynced", |body| {
        peer_state(body, "c3").is_some_and(|(state, _)| state == "unsynced")
    })
    .await;
    c3_api.apply(slice("cart", "cart-1", &[("10.3.0.8", true)]));
    tokio::time::sleep(Duration::from_millis(500)).await;
    let routes = get(c1_admin, CART).await;
    assert!(
        routes.contains("10.3.0.7") && !routes.contains("10.3.0.8"),
        "the unsynced feed still speaks for c3: {routes}"
    );
    // Stale, the feed hands c3 back to its link, which has the change.
    get_until(c1_admin, "/debug/clusters", "c3's feed stale", |body| {
        peer_state(body, "c3").is_some_and(|(state, _)| state == "stale")
    })
    .await;
    get_until(c1_admin, CART, "the link's endpoint", |body| {
        body.contains("10.3.0.8") && !body.contains("10.3.0.7")
    })
    .await;
}
