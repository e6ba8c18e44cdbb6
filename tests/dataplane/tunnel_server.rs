//! What the tunnel server refuses: every target that is not a ready
//! backend of an exported service port on its network (own listeners,
//! loopback, link-local, strays, undeclared ports, their IPv4-mapped
//! spellings), and machinery listed as a backend (a Service's ClusterIP,
//! external IP and load balancer address, the API server's endpoint, also
//! spelled NAT64 and 6to4).

use super::*;

/// `[::ffff:a.b.c.d]:port`: an IPv4 address spelled IPv4-mapped IPv6.
fn mapped(address: SocketAddr) -> String {
    format!("[::ffff:{}]:{}", address.ip(), address.port())
}

/// `[64:ff9b::a.b.c.d]:port`: an IPv4 address through NAT64's prefix.
fn nat64(address: SocketAddr) -> String {
    format!("[64:ff9b::{}]:{}", address.ip(), address.port())
}

/// `[2002:aabb:ccdd::]:port`: an IPv4 address in 6to4's prefix.
fn six_to_four(address: SocketAddr) -> String {
    let std::net::IpAddr::V4(v4) = address.ip() else {
        panic!("an IPv4 address");
    };
    let [a, b, c, d] = v4.octets();
    format!(
        "[2002:{:02x}{:02x}:{:02x}{:02x}::]:{}",
        a,
        b,
        c,
        d,
        address.port()
    )
}

pub async fn the_tunnel_server_dials_nothing_it_should_not(transport: TransportMode) {
    let backends =
        backends_on_one_port(&[("c3-pod", pod_ip(3, 0)), ("c2-pod", pod_ip(2, 0))]).await;
    let target = backends[0].address.port();
    let at = |ip| SocketAddr::new(ip, target);
    // Listeners where a wrongly dialled connection would land.
    let not_ready = Tripwire::start(at(pod_ip(3, 1))).await;
    let unexported = Tripwire::start(at(pod_ip(3, 2))).await;
    let stray = Tripwire::start(SocketAddr::new(pod_ip(3, 9), 0)).await;
    let undeclared_port = Tripwire::start(SocketAddr::new(pod_ip(3, 0), 0)).await;
    let ports: &'static [(&str, u16, u16)] = Box::leak(Box::new([("tcp", 42, target)]));
    let world = World::start(transport, |n| match n {
        2 => vec![echo_service(
            ports,
            EXPORTED_EARLY,
            vec![Pod::ready(pod_ip(2, 0))],
        )],
        3 => vec![
            echo_service(
                ports,
                EXPORTED_LATE,
                vec![
                    Pod::ready(pod_ip(3, 0)),
                    Pod {
                        address: pod_ip(3, 1),
                        ready: false,
                    },
                ],
            ),
            ServiceSpec {
                namespace: "app",
                name: "hidden",
                ports,
                exported_at: None,
                pods: vec![Pod::ready(pod_ip(3, 2))],
                proxy_protocol: false,
                udp_ports: &[],
            },
        ],
        _ => Vec::new(),
    })
    .await;
    // c3 also holds machinery a tenant lists as an endpoint of its export:
    // the `kubernetes` Service's ClusterIP (a tripwire listens there).
    let cluster_ip = Tripwire::start(at(pod_ip(3, 7))).await;
    // And the API server's own endpoint (default/kubernetes), a Service's
    // external IP and its load balancer address.
    let api_endpoint = Tripwire::start(at(pod_ip(3, 6))).await;
    let external_ip = Tripwire::start(at(pod_ip(3, 5))).await;
    let balancer_ip = Tripwire::start(at(pod_ip(3, 4))).await;
    let c3_file = world.config.join("clusters/c3/objects.yaml");
    let mut c3_yaml = std::fs::read_to_string(&c3_file).expect("c3's objects");
    c3_yaml.push_str(&format!(
        "---
apiVersion: v1
kind: Service
metadata: {{name: kubernetes, namespace: default}}
spec:
  clusterIP: \"{api}\"
  ports: [{{name: https, port: {target}}}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {{name: kubernetes, namespace: default, labels: {{kubernetes.io/service-name: kubernetes}}}}
addressType: IPv4
ports: [{{name: https, port: {target}}}]
endpoints:
- {{addresses: [\"{api_endpoint}\"], conditions: {{ready: true}}}}
---
apiVersion: v1
kind: Service
metadata: {{name: front, namespace: app}}
spec:
  type: LoadBalancer
  externalIPs: [\"{external}\"]
  ports: [{{name: tcp, port: 80}}]
status: {{loadBalancer: {{ingress: [{{ip: \"{balancer}\"}}]}}}}
---
apiVersion: v1
kind: Service
metadata: {{name: sneaky, namespace: app}}
spec:
  ports: [{{name: tcp, port: 42, targetPort: {target}}}]
---
apiVersion: multicluster.x-k8s.io/v1alpha1
kind: ServiceExport
metadata: {{name: sneaky, namespace: app, creationTimestamp: \"2026-01-01T00:00:00Z\"}}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {{name: sneaky-1, namespace: app, labels: {{kubernetes.io/service-name: sneaky}}}}
addressType: IPv4
ports: [{{name: tcp, port: {target}}}]
endpoints:
- {{addresses: [\"{api}\"], conditions: {{ready: true}}}}
- {{addresses: [\"{api_endpoint}\"], conditions: {{ready: true}}}}
- {{addresses: [\"{external}\"], conditions: {{ready: true}}}}
- {{addresses: [\"{balancer}\"], conditions: {{ready: true}}}}
",
        api = pod_ip(3, 7),
        api_endpoint = pod_ip(3, 6),
        external = pod_ip(3, 5),
        balancer = pod_ip(3, 4),
    ));
    write_cluster(&world.config, "c3", &c3_yaml);
    let c3_state = world.gateways[2].state().clone();
    let reloaded = eventually(Duration::from_secs(10), || {
        c3_state
            .routes
            .load()
            .lookup("app", "sneaky", Protocol::Tcp, 42)
            .is_some()
    })
    .await;
    assert!(reloaded, "c3 reloaded with the sneaky export");
    let c3 = &world.gateways[2];
    let own = c3.addresses().clone();
    let client = TestClient::new(&world.certs, "c1", transport);
    let gateway = gateway_of(world.tunnels[2]);
    let allowed = [ClusterId::new("c3").expect("id")];

    let forbidden: Vec<(String, u16)> = vec![
        ("127.0.0.1:22".into(), 403),
        (format!("127.0.0.1:{target}"), 403),
        ("169.254.169.254:80".into(), 403),
        (format!("[::1]:{target}"), 403),
        (own.tunnel.to_string(), 403),
        (own.admin.to_string(), 403),
        (own.connect.to_string(), 403),
        // The same listeners and addresses, spelled IPv4-mapped.
        (mapped(own.admin), 403),
        (mapped(own.tunnel), 403),
        (mapped(stray.address), 403),
        ("[::ffff:169.254.169.254]:80".into(), 403),
        (stray.address.to_string(), 403),
        (undeclared_port.address.to_string(), 403),
        (not_ready.address.to_string(), 403),
        (unexported.address.to_string(), 403),
        (at(pod_ip(2, 0)).to_string(), 403),
        ("echo.app.svc.clusterset.local:43".into(), 403),
        (format!("echo.app.svc.clusterset.local:{target}"), 403),
        ("hidden.app.svc.clusterset.local:42".into(), 404),
        ("nope.app.svc.clusterset.local:42".into(), 404),
        ("pod-0.c3.echo.app.svc.clusterset.local:42".into(), 404),
        // Machinery listed as an endpoint: by address, and by name (its
        // only backend skipped when picked, so none is left).
        (cluster_ip.address.to_string(), 403),
        (api_endpoint.address.to_string(), 403),
        (external_ip.address.to_string(), 403),
        (balancer_ip.address.to_string(), 403),
        // The API server's endpoint spelled NAT64 and 6to4: the IPv4 it reaches.
        (nat64(api_endpoint.address), 403),
        (six_to_four(api_endpoint.address), 403),
        ("sneaky.app.svc.clusterset.local:42".into(), 503),
        ("example.com:443".into(), 400),
        ("localhost:80".into(), 400),
        ("echo.app.svc.cluster.local:42".into(), 400),
    ];
    for (authority, status) in &forbidden {
        match client.connect(&gateway, &allowed, authority).await {
            Err(TunnelError::Refused { status: got, .. }) => {
                assert_eq!(got.as_u16(), *status, "{authority}")
            }
            Err(other) => panic!("{authority}: unexpected error {other}"),
            Ok(_) => panic!("{authority} was let through"),
        }
    }
    for (name, tripwire) in [
        ("non-ready endpoint", &not_ready),
        ("unexported service", &unexported),
        ("stray address", &stray),
        ("undeclared port", &undeclared_port),
        ("Service ClusterIP", &cluster_ip),
        ("API server endpoint", &api_endpoint),
        ("external IP", &external_ip),
        ("load balancer address", &balancer_ip),
    ] {
        assert_eq!(tripwire.hits(), 0, "{name} was dialled");
    }
    assert_eq!(
        backends[1].accepted(),
        0,
        "an address of another network was dialled"
    );
    assert_eq!(backends[0].accepted(), 0);

    // The control: the same client, asking for a real backend, gets through.
    let mut stream = client
        .connect(&gateway, &allowed, &at(pod_ip(3, 0)).to_string())
        .await
        .expect("a ready backend of an exported service is allowed");
    let mut greeting = vec![0u8; "c3-pod 127.0.3.1\n".len()];
    stream.read_exact(&mut greeting).await.expect("greeting");
    assert_eq!(greeting, b"c3-pod 127.0.3.1\n");
}
