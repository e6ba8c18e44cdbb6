//! Who may call: the tunnel server serves only callers with a certificate
//! of the cluster set's CA whose identity names a cluster of the current
//! set (not its own cluster), and a service whose export says
//! `strait.dev/allowed-clusters` admits only those callers, through the
//! tunnel and through the caller's own gateway alike.

use super::*;

/// c3 exports `echo` (open to the set) and `vault`, which admits c2 only.
fn vault_yaml(target: u16) -> String {
    format!(
        "---
apiVersion: v1
kind: Service
metadata: {{name: vault, namespace: app}}
spec:
  ports: [{{name: tcp, port: 42, targetPort: {target}}}]
---
apiVersion: multicluster.x-k8s.io/v1alpha1
kind: ServiceExport
metadata:
  name: vault
  namespace: app
  creationTimestamp: \"2026-01-01T00:00:00Z\"
  annotations: {{strait.dev/allowed-clusters: c2}}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: vault-slice
  namespace: app
  labels: {{kubernetes.io/service-name: vault}}
addressType: IPv4
ports: [{{name: tcp, port: {target}}}]
endpoints:
- addresses: [\"{}\"]
",
        pod_ip(3, 1)
    )
}

async fn refused_with(
    client: &TestClient,
    gateway: &GatewayAddress,
    authority: &str,
) -> (u16, String) {
    let allowed = [ClusterId::new("c3").expect("id")];
    match client.connect(gateway, &allowed, authority).await {
        Err(TunnelError::Refused { status, reason, .. }) => (status.as_u16(), reason),
        Err(other) => panic!("{authority}: unexpected error {other}"),
        Ok(_) => panic!("{authority} was let through"),
    }
}

fn refused_count(metrics: &str, reason: &str) -> u64 {
    let prefix = format!("strait_tunnel_requests_refused_total{{reason=\"{reason}\"}} ");
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or(0)
}

pub async fn callers_are_authorised_by_their_certificate(transport: TransportMode) {
    let backends =
        backends_on_one_port(&[("c3-echo", pod_ip(3, 0)), ("c3-vault", pod_ip(3, 1))]).await;
    let target = backends[0].address.port();
    let ports: &'static [(&str, u16, u16)] = Box::leak(Box::new([("tcp", 42, target)]));
    let world = World::start_with(
        |_| transport,
        |n| match n {
            3 => vec![echo_service(
                ports,
                EXPORTED_EARLY,
                vec![Pod::ready(pod_ip(3, 0))],
            )],
            _ => Vec::new(),
        },
        |n| {
            if n == 3 {
                vault_yaml(target)
            } else {
                String::new()
            }
        },
        Vec::new(),
    )
    .await;
    let gateway = gateway_of(world.tunnels[2]);
    let vault_address = SocketAddr::new(pod_ip(3, 1), target).to_string();

    // A certificate of the right CA for a cluster the set does not hold.
    let outsider = TestClient::new(&world.certs, "outsider", transport);
    let (status, reason) =
        refused_with(&outsider, &gateway, "echo.app.svc.clusterset.local:42").await;
    assert_eq!(status, 403);
    assert!(
        reason.contains("cluster outsider is not in the cluster set"),
        "{reason}"
    );
    // The gateway's own identity, not admitted without tunnel.admitOwnCluster.
    let own = TestClient::new(&world.certs, "c3", transport);
    let (status, reason) = refused_with(&own, &gateway, "echo.app.svc.clusterset.local:42").await;
    assert_eq!(status, 403);
    assert!(reason.contains("own cluster"), "{reason}");
    // c1 is in the set, but vault admits c2 only: by name and by address.
    let c1 = TestClient::new(&world.certs, "c1", transport);
    for authority in ["vault.app.svc.clusterset.local:42", vault_address.as_str()] {
        let (status, reason) = refused_with(&c1, &gateway, authority).await;
        assert_eq!(status, 403, "{authority}");
        assert!(reason.contains("not admitted"), "{authority}: {reason}");
    }
    assert_eq!(
        backends[0].accepted(),
        0,
        "echo was dialled for a refused caller"
    );
    assert_eq!(
        backends[1].accepted(),
        0,
        "vault was dialled for a refused caller"
    );

    // The controls: c1 reaches echo, c2 reaches vault.
    let c2 = TestClient::new(&world.certs, "c2", transport);
    for (client, service) in [(&c1, "echo"), (&c2, "vault")] {
        let allowed = [ClusterId::new("c3").expect("id")];
        let authority = format!("{service}.app.svc.clusterset.local:42");
        let mut stream = client
            .connect(&gateway, &allowed, &authority)
            .await
            .unwrap_or_else(|error| panic!("{authority} is admitted: {error}"));
        let expected = format!("c3-{service} 127.0.3.1\n");
        let mut greeting = vec![0u8; expected.len()];
        stream.read_exact(&mut greeting).await.expect("greeting");
        assert_eq!(String::from_utf8_lossy(&greeting), expected);
    }

    // Through the gateways as a pod would: c1's own gateway refuses vault
    // before any tunnel; c2's reaches it.
    let refused = connect(
        world.connect_address(1),
        "vault.app.svc.clusterset.local:42",
    )
    .await;
    assert_eq!(refused.status, 403);
    let reached = connect(
        world.connect_address(2),
        "vault.app.svc.clusterset.local:42",
    )
    .await;
    assert_eq!(
        reached.greeting, "c3-vault 127.0.3.1",
        "dialled by c3's gateway"
    );

    let metrics = admin_get(world.gateways[2].addresses().admin, "/metrics").await;
    assert_eq!(refused_count(&metrics, "unknown_caller"), 1, "{metrics}");
    assert_eq!(refused_count(&metrics, "own_cluster"), 1, "{metrics}");
    assert_eq!(refused_count(&metrics, "not_admitted"), 2, "{metrics}");
}

/// A certificate of another CA, for the same cluster set name and cluster
/// id, fails the handshake.
pub async fn a_caller_of_another_certificate_authority_is_refused(transport: TransportMode) {
    let (world, backends) = World::with_one_c3_echo_pod(transport).await;
    // Same cluster set name, same cluster id, different CA.
    let impostor = tempfile::tempdir().expect("temp dir");
    let certs = certificates(impostor.path(), &["c1"]);
    let client = TestClient::new(&certs, "c1", transport);
    let result = client
        .connect(
            &gateway_of(world.tunnels[2]),
            &[ClusterId::new("c3").expect("id")],
            "echo.app.svc.clusterset.local:42",
        )
        .await;
    assert!(
        matches!(result, Err(TunnelError::Handshake { .. })),
        "expected a refused handshake, got {:?}",
        result.err()
    );
    assert_eq!(backends[0].accepted(), 0);
}
