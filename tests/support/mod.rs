//! A loopback cluster set for integration tests: real gateways (the library's
//! `Gateway`, real TLS, real sockets) and echo backends, each on its own
//! 127.0.0.0/8 address so a backend can tell who dialled it.
//!
//! Addresses: cluster `cN`'s gateway listens on 127.0.N.1 and dials from it;
//! its pods use 127.0.N.10 and up.

#![allow(dead_code)]

use std::collections::HashMap;
use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use strait::config::GatewaySettings;
use strait::gateway::{Gateway, GatewayOptions, Listeners};
use strait::model::ClusterId;
use strait::state::DialOverrides;
use strait::tunnel::{TransportMode, TunnelSettings};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

pub const CLUSTERSET: &str = "test.strait.dev";

/// The gateway address of cluster number `n`.
pub fn gateway_ip(n: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, n, 1))
}

/// The address of pod `pod` of cluster number `n`.
pub fn pod_ip(n: u8, pod: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, n, 10 + pod))
}

/// An echo server standing in for a pod: it greets with its name and the
/// address that dialled it, then echoes every byte back.
pub struct Backend {
    pub name: String,
    pub address: SocketAddr,
    pub accepted: Arc<AtomicUsize>,
    pub peers: Arc<Mutex<Vec<SocketAddr>>>,
}

impl Backend {
    pub async fn start(name: &str, address: SocketAddr) -> Backend {
        let listener = TcpListener::bind(address).await.expect("bind backend");
        let address = listener.local_addr().expect("backend address");
        let accepted = Arc::new(AtomicUsize::new(0));
        let peers = Arc::new(Mutex::new(Vec::new()));
        let (task_accepted, task_peers, greeting_name) =
            (accepted.clone(), peers.clone(), name.to_owned());
        tokio::spawn(async move {
            while let Ok((mut stream, peer)) = listener.accept().await {
                task_accepted.fetch_add(1, Ordering::SeqCst);
                task_peers.lock().expect("peers").push(peer);
                let greeting = format!("{greeting_name} {}\n", peer.ip());
                tokio::spawn(async move {
                    if stream.write_all(greeting.as_bytes()).await.is_err() {
                        return;
                    }
                    let (mut read, mut write) = stream.split();
                    let _ = tokio::io::copy(&mut read, &mut write).await;
                    let _ = write.shutdown().await;
                });
            }
        });
        Backend {
            name: name.to_owned(),
            address,
            accepted,
            peers,
        }
    }

    pub fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }
}

/// A listener that only counts connection attempts: a target that must never be dialled.
pub struct Tripwire {
    pub address: SocketAddr,
    pub hits: Arc<AtomicUsize>,
}

impl Tripwire {
    pub async fn start(address: SocketAddr) -> Tripwire {
        let listener = TcpListener::bind(address).await.expect("bind tripwire");
        let address = listener.local_addr().expect("tripwire address");
        let hits = Arc::new(AtomicUsize::new(0));
        let counter = hits.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                counter.fetch_add(1, Ordering::SeqCst);
                drop(stream);
            }
        });
        Tripwire { address, hits }
    }

    pub fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }
}

/// One endpoint of an EndpointSlice.
pub struct Pod {
    pub address: IpAddr,
    pub ready: bool,
}

impl Pod {
    pub fn ready(address: IpAddr) -> Pod {
        Pod {
            address,
            ready: true,
        }
    }
}

/// One Service of one cluster: `(name, port, target)` ports, its export's
/// creation time (`None`: not exported) and its pods.
pub struct ServiceSpec<'a> {
    pub namespace: &'a str,
    pub name: &'a str,
    pub ports: &'a [(&'a str, u16, u16)],
    pub exported_at: Option<&'a str>,
    pub pods: Vec<Pod>,
    /// The export asks for the PROXY protocol (`strait.dev/proxy-protocol: v2`).
    pub proxy_protocol: bool,
    /// Ports of protocol UDP, as `ports`.
    pub udp_ports: &'a [(&'a str, u16, u16)],
}

/// The objects of one cluster folder whose gateway is at `tunnel`.
pub fn cluster_yaml(
    id: &str,
    network: &str,
    tunnel: SocketAddr,
    services: &[ServiceSpec<'_>],
) -> String {
    cluster_yaml_with_gateways(id, network, &[tunnel.ip()], tunnel.port(), services)
}

/// An exported headless Service with one `(name, port, target)` port and
/// these `(hostname, address)` pods, ready.
pub fn headless_yaml(
    namespace: &str,
    name: &str,
    (port_name, port, target): (&str, u16, u16),
    pods: &[(&str, IpAddr)],
) -> String {
    let mut endpoints = String::new();
    for (hostname, address) in pods {
        let _ = writeln!(
            endpoints,
            "- {{addresses: [\"{address}\"], hostname: {hostname}, conditions: {{ready: true}}}}"
        );
    }
    format!(
        "---
apiVersion: v1
kind: Service
metadata: {{name: {name}, namespace: {namespace}}}
spec:
  clusterIP: None
  ports: [{{name: {port_name}, port: {port}, targetPort: {target}}}]
---
apiVersion: multicluster.x-k8s.io/v1alpha1
kind: ServiceExport
metadata: {{name: {name}, namespace: {namespace}, creationTimestamp: \"2026-01-01T00:00:00Z\"}}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: {name}-slice
  namespace: {namespace}
  labels: {{kubernetes.io/service-name: {name}}}
addressType: IPv4
ports: [{{name: {port_name}, port: {target}}}]
endpoints:
{endpoints}"
    )
}

/// The whole HTTP/1.1 response (status line, headers, body) of `GET path`
/// on an admin listener.
pub async fn admin_get(admin: SocketAddr, path: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(admin)
        .await
        .expect("reach admin");
    let request = format!("GET {path} HTTP/1.1\r\nHost: admin\r\nConnection: close\r\n\r\n");
    stream
        .write_all(request.as_bytes())
        .await
        .expect("send request");
    let mut response = String::new();
    stream
        .read_to_string(&mut response)
        .await
        .expect("read response");
    response
}

/// What `strait imports --config CONFIG --cluster CLUSTER --output json`
/// prints: the objects a file setup's gateway works from, as one `v1` List.
pub fn strait_imports(config: &Path, cluster: &str) -> serde_json::Value {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_strait"))
        .args(["imports", "--config"])
        .arg(config)
        .args(["--cluster", cluster, "--output", "json"])
        .output()
        .expect("strait imports runs");
    assert!(
        output.status.success(),
        "strait imports: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let list: serde_json::Value = serde_json::from_slice(&output.stdout).expect("a JSON List");
    assert_eq!(list["kind"], "List", "{list:#}");
    list
}

/// One per-pod derived Service (of a remote headless pod) as `strait
/// imports` prints it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PerPodService {
    /// Its `clusterIP`, when one is chosen (a file setup's podAddresses).
    pub cluster_ip: Option<IpAddr>,
    /// The port it exposes (the pod's own) and the import port behind it.
    pub port: u16,
    pub import_port: u16,
}

/// The per-pod derived Services of service `name` in a `strait imports`
/// List (see [`strait_imports`]), by the pod they stand for.
pub fn per_pod_services(
    list: &serde_json::Value,
    name: &str,
) -> std::collections::BTreeMap<String, PerPodService> {
    let items = list["items"].as_array().into_iter().flatten();
    items
        .filter(|item| {
            item["kind"] == "Service"
                && item["metadata"]["labels"]["multicluster.kubernetes.io/service-name"] == name
        })
        .filter_map(|item| {
            let pod = item["metadata"]["annotations"]["strait.dev/pod"].as_str()?;
            let number = |value: &serde_json::Value| {
                value
                    .as_u64()
                    .and_then(|n| u16::try_from(n).ok())
                    .unwrap_or_else(|| panic!("a port in {item}"))
            };
            let port = &item["spec"]["ports"][0];
            let service = PerPodService {
                cluster_ip: item["spec"]["clusterIP"]
                    .as_str()
                    .and_then(|ip| ip.parse().ok()),
                port: number(&port["port"]),
                import_port: number(&port["targetPort"]),
            };
            Some((pod.to_owned(), service))
        })
        .collect()
}

/// A ServiceImport giving `app/<name>` the ClusterSetIP `vip` in this cluster.
pub fn import_yaml(name: &str, vip: IpAddr) -> String {
    format!(
        "---
apiVersion: multicluster.x-k8s.io/v1alpha1
kind: ServiceImport
metadata: {{name: {name}, namespace: app}}
spec: {{type: ClusterSetIP, ips: [\"{vip}\"]}}
"
    )
}

/// The objects of one cluster folder whose gateway Service lists several
/// addresses (tried in order by peers) on one tunnel port.
pub fn cluster_yaml_with_gateways(
    id: &str,
    network: &str,
    gateway_ips: &[IpAddr],
    tunnel_port: u16,
    services: &[ServiceSpec<'_>],
) -> String {
    let external: Vec<String> = gateway_ips.iter().map(|ip| format!("\"{ip}\"")).collect();
    let mut yaml = format!(
        "apiVersion: about.k8s.io/v1beta1
kind: ClusterProperty
metadata: {{name: cluster.clusterset.k8s.io}}
spec: {{value: {id}}}
---
apiVersion: about.k8s.io/v1beta1
kind: ClusterProperty
metadata: {{name: network.clusterset.k8s.io}}
spec: {{value: {network}}}
---
apiVersion: v1
kind: Service
metadata:
  name: cluster-edge
  namespace: strait-system
  labels: {{strait.dev/gateway: \"true\"}}
spec:
  type: LoadBalancer
  ports: [{{name: tunnel, port: {tunnel_port}}}]
  externalIPs: [{}]
",
        external.join(", ")
    );
    for service in services {
        let all_ports = || {
            let tcp = service.ports.iter().map(|port| (port, "TCP"));
            tcp.chain(service.udp_ports.iter().map(|port| (port, "UDP")))
        };
        let ports: Vec<String> = all_ports()
            .map(|((name, port, target), protocol)| {
                format!(
                    "{{name: {name}, protocol: {protocol}, port: {port}, targetPort: {target}}}"
                )
            })
            .collect();
        let slice_ports: Vec<String> = all_ports()
            .map(|((name, _, target), protocol)| {
                format!("{{name: {name}, protocol: {protocol}, port: {target}}}")
            })
            .collect();
        let _ = write!(
            yaml,
            "---
apiVersion: v1
kind: Service
metadata: {{name: {name}, namespace: {ns}}}
spec:
  ports: [{ports}]
",
            name = service.name,
            ns = service.namespace,
            ports = ports.join(", ")
        );
        if let Some(created) = service.exported_at {
            let annotations = if service.proxy_protocol {
                ", annotations: {strait.dev/proxy-protocol: v2}"
            } else {
                ""
            };
            let _ = write!(
                yaml,
                "---
apiVersion: multicluster.x-k8s.io/v1alpha1
kind: ServiceExport
metadata: {{name: {name}, namespace: {ns}, creationTimestamp: \"{created}\"{annotations}}}
",
                name = service.name,
                ns = service.namespace,
            );
        }
        let endpoints: Vec<String> = service
            .pods
            .iter()
            .map(|pod| {
                format!(
                    "- addresses: [\"{}\"]\n  conditions: {{ready: {}}}",
                    pod.address, pod.ready
                )
            })
            .collect();
        let _ = write!(
            yaml,
            "---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: {name}-slice
  namespace: {ns}
  labels: {{kubernetes.io/service-name: {name}}}
addressType: IPv4
ports: [{slice_ports}]
endpoints:
{endpoints}
",
            name = service.name,
            ns = service.namespace,
            slice_ports = slice_ports.join(", "),
            // Indented: a flow sequence at column 0 would end the mapping.
            endpoints = if endpoints.is_empty() {
                "  []".to_owned()
            } else {
                endpoints.join("\n")
            },
        );
    }
    yaml
}

/// Writes `clusters/<id>/objects.yaml` atomically (write, then rename), as a
/// ConfigMap update would land.
pub fn write_cluster(config: &Path, id: &str, yaml: &str) {
    let folder = config.join("clusters").join(id);
    std::fs::create_dir_all(&folder).expect("cluster folder");
    let staging = folder.join(".objects.yaml.tmp");
    std::fs::write(&staging, yaml).expect("write cluster yaml");
    std::fs::rename(&staging, folder.join("objects.yaml")).expect("rename cluster yaml");
}

/// Certificates of the test cluster set, in a temporary directory.
pub fn certificates(dir: &Path, clusters: &[&str]) -> PathBuf {
    let ids: Vec<ClusterId> = clusters
        .iter()
        .map(|c| ClusterId::new(c).expect("cluster id"))
        .collect();
    let out = dir.join("certs");
    strait::tls::write_cluster_set(&out, CLUSTERSET, &ids).expect("write certificates");
    out
}

/// As [`certificates`], keeping each cluster's CA (by cluster id) to sign
/// what a test needs later, such as a revocation list.
pub fn certificates_keeping_cas(
    dir: &Path,
    clusters: &[&str],
) -> (
    PathBuf,
    std::collections::HashMap<String, strait::tls::CertificateAuthority>,
) {
    let out = dir.join("certs");
    let cas: Vec<(ClusterId, strait::tls::CertificateAuthority)> = clusters
        .iter()
        .map(|c| {
            let id = ClusterId::new(c).expect("cluster id");
            let ca = strait::tls::generate_cluster_ca(CLUSTERSET, &id).expect("cluster CA");
            (id, ca)
        })
        .collect();
    let bundle: String = cas.iter().map(|(_, ca)| ca.cert_pem()).collect();
    std::fs::create_dir_all(&out).expect("certs dir");
    std::fs::write(out.join(strait::tls::CA_FILE), &bundle).expect("ca bundle");
    for (id, ca) in &cas {
        let leaf = strait::tls::generate_leaf(ca, id).expect("leaf");
        let folder = out.join(id.as_str());
        std::fs::create_dir_all(&folder).expect("cluster dir");
        std::fs::write(folder.join(strait::tls::CERT_FILE), &leaf.cert_pem).expect("cert");
        std::fs::write(folder.join(strait::tls::KEY_FILE), &leaf.key_pem).expect("key");
        std::fs::write(folder.join(strait::tls::CA_FILE), &bundle).expect("ca");
    }
    let cas = cas
        .into_iter()
        .map(|(id, ca)| (id.as_str().to_owned(), ca))
        .collect();
    (out, cas)
}

/// Listeners of gateway number `n`, bound before the configuration is
/// written so it can name their ports, as `strait run` binds them.
pub async fn bind_gateway(n: u8) -> Listeners {
    let bind = |port| async move {
        strait::net::listen::bind(SocketAddr::new(gateway_ip(n), port))
            .expect("bind gateway listener")
    };
    Listeners {
        connect: bind(0).await,
        tunnel: bind(0).await,
        admin: bind(0).await,
        cluster_set_ip: Vec::new(),
        dns: None,
    }
}

/// Starts the gateway of cluster `id` (number `n`) on its bound listeners,
/// with no import listeners: tests run side by side in one process on the
/// same loopback addresses, and import ports are the same for the same
/// service in every test, so only a test that asks for them (with a range
/// of its own, [`start_gateway_importing`]) gets them.
pub async fn start_gateway(
    config: &Path,
    certs: &Path,
    id: &str,
    n: u8,
    listeners: Listeners,
    transport: TransportMode,
) -> Gateway {
    let imports = strait::config::ImportSettings {
        listen: false,
        ..Default::default()
    };
    start_gateway_importing(config, certs, id, n, listeners, transport, imports).await
}

/// As [`start_gateway`], with these import settings.
pub async fn start_gateway_importing(
    config: &Path,
    certs: &Path,
    id: &str,
    n: u8,
    listeners: Listeners,
    transport: TransportMode,
    imports: strait::config::ImportSettings,
) -> Gateway {
    let tunnel = TunnelSettings {
        transport,
        ..TunnelSettings::default()
    };
    start_gateway_tuned(config, certs, id, n, listeners, tunnel, |settings| {
        settings.imports = imports;
    })
    .await
}

/// As [`start_gateway`], with these tunnel settings and `tune` applied to
/// the test defaults of `gateway.yaml`.
pub async fn start_gateway_tuned(
    config: &Path,
    certs: &Path,
    id: &str,
    n: u8,
    listeners: Listeners,
    tunnel: TunnelSettings,
    tune: impl FnOnce(&mut GatewaySettings),
) -> Gateway {
    let mut settings = test_settings();
    tune(&mut settings);
    let options = GatewayOptions {
        config_dir: config.to_owned(),
        settings,
        cluster: id.to_owned(),
        tls_dir: certs.join(id),
        dial_source: Some(gateway_ip(n)),
        overrides: DialOverrides::default(),
        tunnel,
        kube: None,
        controller: None,
    };
    Gateway::start(options, listeners)
        .await
        .expect("gateway starts")
}

/// As [`start_gateway`], its routes from a Kubernetes source (`config` is
/// then only its working directory).
pub async fn start_kube_gateway(
    config: &Path,
    certs: &Path,
    id: &str,
    n: u8,
    listeners: Listeners,
    kube: strait::discovery::kube::KubeHandle,
) -> Gateway {
    let options = GatewayOptions {
        config_dir: config.to_owned(),
        settings: test_settings(),
        cluster: id.to_owned(),
        tls_dir: certs.join(id),
        dial_source: Some(gateway_ip(n)),
        overrides: DialOverrides::default(),
        tunnel: TunnelSettings::default(),
        kube: Some(kube),
        controller: None,
    };
    Gateway::start(options, listeners)
        .await
        .expect("gateway starts")
}

/// `gateway.yaml`'s defaults for this loopback world: quick reloads and
/// connect timeouts, stalls reported within two seconds, and no import
/// listeners.
fn test_settings() -> GatewaySettings {
    let mut settings = GatewaySettings {
        imports: strait::config::ImportSettings {
            listen: false,
            ..Default::default()
        },
        ..GatewaySettings::default()
    };
    settings.tuning.reload_debounce = Duration::from_millis(100);
    settings.tuning.connect_timeout = Duration::from_secs(2);
    // A stalled connection shows in /metrics within two seconds.
    settings.tuning.stall_report = Duration::from_secs(1);
    // Pods of this loopback world live on 127.0.0.0/8.
    settings.allow_loopback_endpoints = true;
    settings
}

/// What a CONNECT through a gateway gave: the HTTP status, and on 200 the
/// open stream and the backend's greeting (`name dialler-ip`).
pub struct Connected {
    pub status: u16,
    pub stream: Option<BufReader<TcpStream>>,
    pub greeting: String,
}

/// Sends `CONNECT authority` to a gateway's connect listener.
pub async fn connect(gateway: SocketAddr, authority: &str) -> Connected {
    let stream = TcpStream::connect(gateway)
        .await
        .expect("reach the connect listener");
    let mut stream = BufReader::new(stream);
    let request = format!("CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n");
    stream
        .get_mut()
        .write_all(request.as_bytes())
        .await
        .expect("send CONNECT");
    let mut status_line = String::new();
    stream
        .read_line(&mut status_line)
        .await
        .expect("status line");
    let status = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let mut headers = HashMap::new();
    loop {
        let mut line = String::new();
        if stream.read_line(&mut line).await.expect("header line") == 0 || line == "\r\n" {
            break;
        }
        if let Some((name, value)) = line.trim_end().split_once(':') {
            headers.insert(name.to_ascii_lowercase(), value.trim().to_owned());
        }
    }
    if status != 200 {
        return Connected {
            status,
            stream: None,
            greeting: String::new(),
        };
    }
    let mut greeting = String::new();
    stream
        .read_line(&mut greeting)
        .await
        .expect("backend greeting");
    Connected {
        status,
        stream: Some(stream),
        greeting: greeting.trim_end().to_owned(),
    }
}

/// Writes `payload` and reads it back through an open connection, both at once.
pub async fn echo(stream: BufReader<TcpStream>, payload: &[u8]) -> Vec<u8> {
    let (mut read, mut write) = tokio::io::split(stream);
    let sent = payload.to_vec();
    let writer = tokio::spawn(async move {
        write.write_all(&sent).await.expect("write payload");
        write.shutdown().await.expect("half-close");
        write
    });
    let mut received = Vec::with_capacity(payload.len());
    read.read_to_end(&mut received).await.expect("read echo");
    writer.await.expect("writer task");
    received
}

/// Polls `condition` every 20 ms for up to `deadline`.
pub async fn eventually(deadline: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let start = tokio::time::Instant::now();
    while start.elapsed() < deadline {
        if condition() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    condition()
}
