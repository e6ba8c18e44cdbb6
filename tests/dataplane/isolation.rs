//! One bad object excludes only itself, with a gateway running and
//! traffic flowing (issue: "one tenant's mistake never stops the others").
//! c3 gains, in one write, an exported `ExternalName` Service, an
//! EndpointSlice with a link-local address beside a good one, and a Service
//! port of 70000; at the same moment c2's `echo` gains an endpoint. c1's
//! routes follow c2 within the debounce, c3's `far` keeps working (its good
//! endpoint included), and each bad object is reported once, with its file.

use std::net::SocketAddr;
use std::time::Duration;

use super::*;

/// `far` (port 43) of c3 with `pods`; an ExternalName export, a slice with a
/// link-local address, and a Service port out of range beside it.
fn c3_with_mistakes(tunnel: SocketAddr, far_port: u16, pods: Vec<Pod>) -> String {
    let ports: &'static [(&str, u16, u16)] = Box::leak(Box::new([("tcp", 43, far_port)]));
    let far = ServiceSpec {
        namespace: "app",
        name: "far",
        ports,
        exported_at: EXPORTED_EARLY,
        pods,
        proxy_protocol: false,
        udp_ports: &[],
    };
    cluster_yaml("c3", "net-b", tunnel, &[far])
        + "---
apiVersion: v1
kind: Service
metadata: {name: db, namespace: app}
spec: {type: ExternalName, externalName: db.example.com}
---
apiVersion: multicluster.x-k8s.io/v1alpha1
kind: ServiceExport
metadata: {name: db, namespace: app}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: far-extra
  namespace: app
  labels: {kubernetes.io/service-name: far}
addressType: IPv4
ports: [{name: tcp, port: 9}]
endpoints:
- addresses: [\"169.254.1.1\"]
---
apiVersion: v1
kind: Service
metadata: {name: wide, namespace: app}
spec:
  ports: [{name: tcp, port: 70000}]
---
apiVersion: multicluster.x-k8s.io/v1alpha1
kind: ServiceExport
metadata: {name: wide, namespace: app}
"
}

pub async fn a_bad_object_stops_only_itself_under_traffic(transport: TransportMode) {
    let backends = backends_on_one_port(&[
        ("c2-a", pod_ip(2, 0)),
        ("c2-b", pod_ip(2, 1)),
        ("c3-far", pod_ip(3, 0)),
    ])
    .await;
    let target = backends[0].address.port();
    let ports: &'static [(&str, u16, u16)] = Box::leak(Box::new([("tcp", 42, target)]));
    let far_ports: &'static [(&str, u16, u16)] = Box::leak(Box::new([("tcp", 43, target)]));
    let world = World::start(transport, |n| match n {
        2 => vec![echo_service(
            ports,
            EXPORTED_EARLY,
            vec![Pod::ready(pod_ip(2, 0))],
        )],
        3 => vec![ServiceSpec {
            namespace: "app",
            name: "far",
            ports: far_ports,
            exported_at: EXPORTED_EARLY,
            pods: vec![Pod::ready(pod_ip(3, 0))],
            proxy_protocol: false,
            udp_ports: &[],
        }],
        _ => Vec::new(),
    })
    .await;
    let gateway = world.connect_address(1);
    let c1 = world.gateways[0].state().clone();
    // Traffic flows before, during and after the change.
    let traffic = tokio::spawn(async move {
        let mut greetings = Vec::new();
        for _ in 0..200 {
            let connected = connect(gateway, "echo.app.svc.clusterset.local:42").await;
            greetings.push((connected.status, connected.greeting));
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        greetings
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    write_cluster(
        &world.config,
        "c3",
        &c3_with_mistakes(world.tunnels[2], target, vec![Pod::ready(pod_ip(3, 0))]),
    );
    write_cluster(
        &world.config,
        "c2",
        &cluster_yaml(
            "c2",
            "net-a",
            world.tunnels[1],
            &[echo_service(
                ports,
                EXPORTED_EARLY,
                vec![Pod::ready(pod_ip(2, 0)), Pod::ready(pod_ip(2, 1))],
            )],
        ),
    );
    let followed = eventually(Duration::from_secs(5), || {
        c1.routes
            .load()
            .lookup("app", "echo", Protocol::Tcp, 42)
            .is_some_and(|route| route.backends.len() == 2)
    })
    .await;
    assert!(
        followed,
        "c2's new endpoint is routed despite c3's mistakes"
    );
    let greetings = traffic.await.expect("traffic");
    assert!(
        greetings.iter().all(|(status, _)| *status == 200),
        "no connection refused: {greetings:?}"
    );
    assert!(
        greetings.iter().any(|(_, g)| g.starts_with("c2-b ")),
        "the new endpoint carries connections"
    );
    // c3's good service still works, through the tunnel.
    let far = connect(gateway, "far.app.svc.clusterset.local:43").await;
    assert_eq!(far.greeting, "c3-far 127.0.3.1");
    let table = c1.routes.load();
    let far_route = table
        .lookup("app", "far", Protocol::Tcp, 43)
        .expect("far is routed");
    assert_eq!(
        far_route.backends.len(),
        1,
        "the link-local endpoint is left out"
    );
    assert!(
        table.service("app", "db").is_none(),
        "ExternalName is left out"
    );
    // Each mistake is reported once, with its file.
    let findings = c1.findings.lock().expect("findings").clone();
    let errors: Vec<String> = findings
        .iter()
        .filter(|f| f.is_error())
        .map(ToString::to_string)
        .collect();
    for mistake in ["ExternalName", "169.254.1.1", "70000"] {
        let found: Vec<&String> = errors.iter().filter(|e| e.contains(mistake)).collect();
        assert_eq!(found.len(), 1, "{mistake} reported once: {errors:#?}");
        assert!(
            found[0].contains("clusters/c3/objects.yaml"),
            "{}",
            found[0]
        );
    }
    let invalid = c1
        .metrics
        .encode()
        .lines()
        .filter(|line| line.starts_with("strait_invalid_objects{cluster=\"c3\""))
        .count();
    assert!(invalid >= 1, "counted by cluster and kind");
}
