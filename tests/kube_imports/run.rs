//! `strait run --kube --manage-imports`, the real binary, against the
//! in-process API servers: it writes the imports, listens on the recorded
//! import port, shows both in `/debug/imports` and `/metrics`, and `strait
//! imports --kube` reads the allocation back. A tenant's export that
//! names Strait's import-port record in its `exportedAnnotations` moves
//! nothing.

use serde_json::Value;

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strait_run_manages_imports_and_listens_on_the_recorded_import_port() {
    let world = World::new().await;
    let dir = world.dir.path();
    let kubeconfig = world.local.write_kubeconfig(dir, "local");
    world.remote.write_kubeconfig(dir, "remote");
    std::fs::write(
        dir.join("gateway.yaml"),
        "kube:\n  kubeconfigs: [remote.yaml]\nimports:\n  portRange: 31000-31999\n",
    )
    .expect("gateway.yaml");
    let certs = dir.join("certs");
    let ids = ["c1", "c2"].map(|id| strait::model::ClusterId::new(id).expect("cluster id"));
    strait::tls::write_cluster_set(&certs, "test.strait.dev", &ids).expect("certificates");
    let config = dir.to_str().expect("utf-8 path");
    let tls = certs.join("c1");
    let command = |args: &[&str]| {
        let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_strait"));
        command
            .args(args)
            .env("KUBECONFIG", &kubeconfig)
            .env("HOME", dir)
            .env("POD_NAMESPACE", NAMESPACE)
            .env("POD_NAME", "cluster-edge-0")
            .kill_on_drop(true)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        command
    };
    // The flag needs the Kubernetes source.
    let output = command(&[
        "run",
        "--config",
        config,
        "--cluster",
        "c1",
        "--manage-imports",
    ])
    .output()
    .await
    .expect("strait runs");
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("needs the Kubernetes source"));

    let log = dir.join("strait-run.log");
    let mut run = command(&[
        "run",
        "--kube",
        "--manage-imports",
        "--config",
        config,
        "--tls-dir",
        tls.to_str().expect("utf-8 path"),
        "--admin-listen",
        "127.0.0.1:0",
        "--connect-listen",
        "127.0.0.1:0",
        "--tunnel-listen",
        "127.0.0.1:0",
    ]);
    run.env("RUST_LOG", "info")
        .stderr(std::fs::File::create(&log).expect("log file"));
    let _child = run.spawn().expect("strait run starts");
    let import = world
        .import_until("cart", "strait run's import", is_ready)
        .await;
    assert!(
        import["spec"]["ips"]
            .as_array()
            .is_some_and(|ips| !ips.is_empty())
    );
    let derived = world.derived("cart").expect("derived");
    let import_port = derived["spec"]["ports"][0]["targetPort"]
        .as_u64()
        .expect("import port");
    assert!(
        (31000..=31999).contains(&import_port),
        "from imports.portRange"
    );
    until(
        "strait run ready",
        || kube_api::admin::admin_address(&log).is_some(),
        || std::fs::read_to_string(&log).unwrap_or_default(),
    )
    .await;
    let admin = kube_api::admin::admin_address(&log).expect("checked");
    // Its gateway.yaml sets no network map: said at start, as an error.
    let started = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        started
            .lines()
            .any(|line| line.contains("ERROR") && line.contains("sets no `networks`")),
        "{started}"
    );
    // Every replica listens on the port recorded in the derived Service.
    let listening =
        format!("\"importPort\": {import_port},\n      \"service\": \"shop/cart:80/TCP\"");
    let view = kube_api::admin::get_until(admin, "/debug/imports", "the import port", |body| {
        body.contains(&listening)
    })
    .await;
    assert!(view.contains("\"leader\": true"), "{view}");
    let metrics = kube_api::admin::get_until(admin, "/metrics", "import metrics", |body| {
        body.contains("strait_imports_managed 1") && body.contains("strait_import_listeners 1")
    })
    .await;
    assert!(
        metrics.contains("strait_import_writes_total{result=\"ok\"}"),
        "{metrics}"
    );
    let port = u16::try_from(import_port).expect("a port");
    tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("the gateway accepts on its import port");

    forged_import_port_record_steers_nothing(&world, admin, import_port).await;

    // The dry run reads the same allocation back from the cluster.
    let output = command(&["imports", "--kube", "--config", config, "--output", "json"])
        .output()
        .await
        .expect("strait imports runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let list: Value = serde_json::from_slice(&output.stdout).expect("a JSON List");
    let planned = list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|item| item["kind"] == "Service")
        .expect("the derived Service");
    assert_eq!(planned["spec"]["ports"][0]["targetPort"], import_port);
    assert_eq!(
        planned["metadata"]["ownerReferences"][0]["uid"], import["metadata"]["uid"],
        "planned against what the cluster holds"
    );
}

/// A tenant exports a headless Service `aaa` (its pods all on this network:
/// its import has no import port and no derived Service) whose
/// `exportedAnnotations` name cart's import port as its own, in Strait's
/// record key. `shop/aaa` sorts before `shop/cart`, so a duplicate settled
/// by key order would hand it cart's clients. The key is dropped, Strait's
/// record on aaa's import is its own (`[]`), and the data plane still
/// sends the port to cart.
async fn forged_import_port_record_steers_nothing(
    world: &World,
    admin: std::net::SocketAddr,
    import_port: u64,
) {
    let forged = format!(r#"[{{"protocol":"TCP","port":80,"importPort":{import_port}}}]"#);
    world
        .local
        .apply(json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "aaa", "namespace": "shop"},
        "spec": {"type": "ClusterIP", "clusterIP": "None",
            "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}}));
    let mut export = export("aaa", "v1beta1");
    export["spec"] = json!({"exportedAnnotations": {
        "strait.dev/import-ports": forged,
        "multicluster.kubernetes.io/derived-service": derived_service_name(&ServiceKey::new("shop", "cart")),
        "team": "aaa"}});
    world.local.apply(export);
    world
        .local
        .apply(slice("aaa", "aaa-1", &[("10.1.0.7", true)]));
    let import = world
        .import_until("aaa", "the tenant's import", |i| {
            i["metadata"]["annotations"]["team"] == "aaa"
        })
        .await;
    let annotations = &import["metadata"]["annotations"];
    assert_eq!(annotations["strait.dev/import-ports"], "[]", "{import:#}");
    assert!(
        annotations
            .get("multicluster.kubernetes.io/derived-service")
            .is_none(),
        "{import:#}"
    );
    let listening =
        format!("\"importPort\": {import_port},\n      \"service\": \"shop/cart:80/TCP\"");
    // Every reload from here on (aaa's import, as written, is read back
    // within this time) maps the port to cart, and never to aaa.
    let watched = tokio::time::Instant::now();
    while watched.elapsed() < Duration::from_secs(3) {
        let view = kube_api::admin::get(admin, "/debug/imports").await;
        assert!(view.contains(&listening), "{view}");
        assert!(!view.contains("\"service\": \"shop/aaa"), "{view}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
