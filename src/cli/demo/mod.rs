//! `strait demo`: the demo cluster set on loopback, in one process. One
//! gateway per cluster on its own 127.0.0.x address, small servers standing
//! in for pods (their demo addresses mapped onto loopback), sample traffic
//! through every gateway, and a table of which pod answered by which path.

mod assets;
mod backend;

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

use super::Refused;
use crate::config::GatewaySettings;
use crate::discovery::files::load_clusters;
use crate::dns::DnsSockets;
use crate::gateway::{Gateway, GatewayOptions, Listeners};
use crate::merge::merge;
use crate::model::{ClusterId, ClusterSet, Protocol};
use crate::state::DialOverrides;
use crate::tunnel::TunnelSettings;

/// The cluster set id used when the demo's clusters do not state one.
const DEFAULT_CLUSTERSET: &str = "demo.strait.dev";
const CONNECT_PORT: u16 = 15001;
const TUNNEL_PORT: u16 = 15008;
const ADMIN_PORT: u16 = 15021;
/// Where each demo gateway answers `clusterset.local` (UDP and TCP).
const DNS_PORT: u16 = 15053;

#[derive(Debug, clap::Args)]
pub struct DemoArgs {
    /// A configuration directory to run instead of the built-in demo set.
    #[arg(long, value_name = "DIR")]
    pub config: Option<PathBuf>,
    /// Send the sample traffic, print the table and exit.
    #[arg(long)]
    pub once: bool,
    /// Connections per gateway and service port in the sample traffic.
    #[arg(long, default_value_t = 4)]
    pub rounds: usize,
}

/// The most clusters the demo lays out on loopback (127.0.0.10 and up).
const MAX_CLUSTERS: usize = 200;

/// The demo gateway address of the cluster at `index` (in id order); the
/// index is below [`MAX_CLUSTERS`], checked when the set is loaded.
fn gateway_ip(index: usize) -> IpAddr {
    let last = u8::try_from(10 + index.min(MAX_CLUSTERS)).unwrap_or(u8::MAX);
    IpAddr::V4(Ipv4Addr::new(127, 0, 0, last))
}

/// Where the demo runs: a scratch directory removed on exit.
struct Workdir(PathBuf);

impl Drop for Workdir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub(super) fn run(args: &DemoArgs) -> Result<(), Refused> {
    let runtime = super::runtime()?;
    runtime.block_on(demo(args))
}

async fn demo(args: &DemoArgs) -> Result<(), Refused> {
    let failed =
        |what: &str, error: &dyn std::fmt::Display| Refused(format!("demo: {what}: {error}"));
    let workdir = Workdir(std::env::temp_dir().join(format!("strait-demo-{}", std::process::id())));
    let config_dir = match &args.config {
        Some(dir) => dir.clone(),
        None => {
            let dir = workdir.0.join("config");
            for (path, contents) in assets::FILES {
                let file = dir.join(path);
                if let Some(parent) = file.parent() {
                    std::fs::create_dir_all(parent)
                        .map_err(|e| failed("cannot write the demo set", &e))?;
                }
                std::fs::write(&file, contents)
                    .map_err(|e| failed("cannot write the demo set", &e))?;
            }
            dir
        }
    };
    let settings = GatewaySettings::load(&config_dir).map_err(|e| Refused(e.to_string()))?;
    let loaded = load_clusters(&config_dir, &settings.translate_options())
        .map_err(|e| Refused(e.to_string()))?;
    let set = loaded.set;
    let ids: Vec<ClusterId> = set.clusters.keys().cloned().collect();
    if ids.len() > MAX_CLUSTERS {
        return Err(Refused(format!(
            "demo: {} clusters; the demo lays out at most {MAX_CLUSTERS} on loopback",
            ids.len()
        )));
    }
    let clusterset = set
        .clusters
        .values()
        .find_map(|c| c.clusterset.clone())
        .unwrap_or_else(|| DEFAULT_CLUSTERSET.to_owned());
    let certs = workdir.0.join("certs");
    crate::tls::write_cluster_set(&certs, &clusterset, &ids)
        .map_err(|e| failed("cannot issue certificates", &e))?;

    // Bind every gateway first: the peers' address mapping needs their ports.
    let mut listeners = Vec::new();
    for index in 0..ids.len() {
        listeners.push(
            bind_gateway(gateway_ip(index))
                .await
                .map_err(|e| failed("cannot bind", &e))?,
        );
    }
    let mut overrides = DialOverrides::default();
    for (index, cluster) in set.clusters.values().enumerate() {
        let tunnel = listeners[index]
            .tunnel
            .local_addr()
            .map_err(|e| failed("listener", &e))?;
        for gateway in &cluster.gateways {
            overrides.gateways.insert(gateway.clone(), tunnel);
        }
    }
    let pods = start_pods(&set)
        .await
        .map_err(|e| failed("cannot start the demo pods", &e))?;

    let mut gateways = Vec::new();
    for ((index, (id, cluster)), bound) in set.clusters.iter().enumerate().zip(listeners) {
        let mut gateway_overrides = overrides.clone();
        // A gateway dials only pods of its own network, where addresses are unique.
        for ((network, pod), address) in &pods {
            if network == cluster.network.as_str() {
                gateway_overrides.backends.insert(*pod, *address);
            }
        }
        let options = GatewayOptions {
            config_dir: config_dir.clone(),
            settings: settings.clone(),
            cluster: id.to_string(),
            tls_dir: certs.join(id.as_str()),
            dial_source: Some(gateway_ip(index)),
            overrides: gateway_overrides,
            tunnel: TunnelSettings::default(),
            kube: None,
            controller: None,
        };
        gateways.push(
            Gateway::start(options, bound)
                .await
                .map_err(|e| Refused(e.to_string()))?,
        );
    }

    let table = sample_traffic(&set, &gateways, args.rounds).await;
    println!("{table}");
    println!("{}", try_it(&set, &gateways));
    if !args.once {
        println!("Press Ctrl-C to stop.");
        super::run::shutdown_signal().await;
    }
    for gateway in gateways {
        gateway.shutdown(Duration::from_secs(1)).await;
    }
    Ok(())
}

async fn bind_gateway(ip: IpAddr) -> std::io::Result<Listeners> {
    // The usual ports when free, so the printed commands are easy to type.
    async fn bind(ip: IpAddr, port: u16) -> std::io::Result<TcpListener> {
        match TcpListener::bind(SocketAddr::new(ip, port)).await {
            Ok(listener) => Ok(listener),
            Err(_) => TcpListener::bind(SocketAddr::new(ip, 0)).await,
        }
    }
    let dns = match DnsSockets::bind(SocketAddr::new(ip, DNS_PORT)).await {
        Ok(sockets) => sockets,
        Err(_) => DnsSockets::bind(SocketAddr::new(ip, 0)).await?,
    };
    Ok(Listeners {
        connect: bind(ip, CONNECT_PORT).await?,
        tunnel: bind(ip, TUNNEL_PORT).await?,
        admin: bind(ip, ADMIN_PORT).await?,
        cluster_set_ip: Vec::new(),
        dns: Some(dns),
    })
}

/// (network, pod address with target port) → the loopback server standing in for it.
type Pods = HashMap<(String, SocketAddr), SocketAddr>;

/// Starts a loopback server for every endpoint port of every cluster.
async fn start_pods(set: &ClusterSet) -> std::io::Result<Pods> {
    let mut pods = Pods::new();
    let mut next: u32 = 0;
    for (cluster_index, cluster) in set.clusters.values().enumerate() {
        for service in cluster.services.values() {
            for group in &service.endpoint_groups {
                for endpoint in group.endpoints.iter() {
                    for port in group.ports.iter().filter(|p| p.protocol == Protocol::Tcp) {
                        next += 1;
                        let ip = IpAddr::V4(Ipv4Addr::new(
                            127,
                            1,
                            u8::try_from(cluster_index).unwrap_or(u8::MAX),
                            u8::try_from(next % 250).unwrap_or(0) + 1,
                        ));
                        let listener = match TcpListener::bind(SocketAddr::new(ip, port.port)).await
                        {
                            Ok(listener) => listener,
                            Err(_) => TcpListener::bind(SocketAddr::new(ip, 0)).await?,
                        };
                        let address = listener.local_addr()?;
                        let name = format!("{}/{} {}", cluster.id, service.key, endpoint.address);
                        backend::spawn(listener, name);
                        pods.insert(
                            (
                                cluster.network.to_string(),
                                SocketAddr::new(endpoint.address, port.port),
                            ),
                            address,
                        );
                    }
                }
            }
        }
    }
    Ok(pods)
}

/// Connects through every gateway to every TCP service port a few times and
/// tabulates who answered and by which path.
async fn sample_traffic(set: &ClusterSet, gateways: &[Gateway], rounds: usize) -> String {
    let merged = merge(set);
    let gateway_cluster: HashMap<IpAddr, &ClusterId> = set
        .clusters
        .keys()
        .enumerate()
        .map(|(index, id)| (gateway_ip(index), id))
        .collect();
    let mut text = String::from("FROM        SERVICE PORT                 ANSWERED BY (PATH)\n");
    for ((index, from), gateway) in set.clusters.keys().enumerate().zip(gateways) {
        for service in merged.services.values() {
            for port in service.ports.iter().filter(|p| p.protocol == Protocol::Tcp) {
                let authority = format!(
                    "{}.{}.svc.clusterset.local:{}",
                    service.key.name, service.key.namespace, port.port
                );
                let mut answers: BTreeMap<String, usize> = BTreeMap::new();
                for _ in 0..rounds {
                    let answer = match ask(gateway.addresses().connect, &authority).await {
                        Ok((pod, dialler)) => {
                            let path = if dialler == gateway_ip(index) {
                                "direct".to_owned()
                            } else {
                                let via = gateway_cluster
                                    .get(&dialler)
                                    .map_or("?".to_owned(), |c| c.to_string());
                                format!("tunnel via {via}")
                            };
                            format!("{pod} ({path})")
                        }
                        Err(error) => error,
                    };
                    *answers.entry(answer).or_default() += 1;
                }
                let answers: Vec<String> = answers
                    .into_iter()
                    .map(|(answer, count)| format!("{count}× {answer}"))
                    .collect();
                let _ = writeln!(
                    text,
                    "{:<11} {:<28} {}",
                    from.as_str(),
                    format!("{}:{}", service.key, port.port),
                    answers.join("; ")
                );
            }
        }
    }
    text
}

/// One CONNECT through a gateway: the answering pod's name and the address
/// that dialled it, or the gateway's refusal.
async fn ask(gateway: SocketAddr, authority: &str) -> Result<(String, IpAddr), String> {
    let stream = TcpStream::connect(gateway)
        .await
        .map_err(|e| e.to_string())?;
    let mut stream = BufReader::new(stream);
    let request = format!("CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n");
    stream
        .get_mut()
        .write_all(request.as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let mut status = String::new();
    stream
        .read_line(&mut status)
        .await
        .map_err(|e| e.to_string())?;
    let mut body = String::new();
    loop {
        let mut line = String::new();
        if stream
            .read_line(&mut line)
            .await
            .map_err(|e| e.to_string())?
            == 0
            || line == "\r\n"
        {
            break;
        }
    }
    let code = status.split_whitespace().nth(1).unwrap_or("?").to_owned();
    if code != "200" {
        let _ = tokio::time::timeout(Duration::from_secs(1), stream.read_line(&mut body)).await;
        return Err(format!("refused {code}: {}", body.trim()));
    }
    stream
        .get_mut()
        .write_all(b"hello\n")
        .await
        .map_err(|e| e.to_string())?;
    let mut greeting = String::new();
    stream
        .read_line(&mut greeting)
        .await
        .map_err(|e| e.to_string())?;
    let (pod, dialler) = greeting
        .trim_end()
        .rsplit_once(" dialled-by ")
        .ok_or_else(|| format!("unexpected greeting {greeting:?}"))?;
    let dialler = dialler
        .parse()
        .map_err(|_| format!("unexpected greeting {greeting:?}"))?;
    Ok((pod.to_owned(), dialler))
}

fn try_it(set: &ClusterSet, gateways: &[Gateway]) -> String {
    let mut text = String::from("Gateways:\n");
    for (id, gateway) in set.clusters.keys().zip(gateways) {
        let addresses = gateway.addresses();
        let dns = addresses
            .dns
            .map_or_else(String::new, |dns| format!("  dns {dns}"));
        let _ = writeln!(
            text,
            "  {:<10} connect {}  tunnel {}  admin http://{}/metrics{dns}",
            id.as_str(),
            addresses.connect,
            addresses.tunnel,
            addresses.admin
        );
    }
    if let Some(first) = gateways.first() {
        let addresses = first.addresses();
        let _ = write!(
            text,
            "\nTry:\n  curl -p -x http://{} http://cart.shop.svc.clusterset.local/\n",
            addresses.connect
        );
        if let Some(dns) = addresses.dns {
            let _ = write!(
                text,
                "  dig @{} -p {} cart.shop.svc.clusterset.local\n  dig @{} -p {} SRV _http._tcp.cart.shop.svc.clusterset.local\n  curl 'http://{}/debug/dns?name=cart.shop.svc.clusterset.local&type=A'\n",
                dns.ip(),
                dns.port(),
                dns.ip(),
                dns.port(),
                addresses.admin
            );
        }
        // The transparent path: what kube-proxy's DNAT of cart's
        // ClusterSetIP would reach, no proxy protocol at all.
        let import_port = first
            .state()
            .routes
            .load()
            .import_ports()
            .find(|(_, key)| key.service.namespace == "shop" && key.service.name == "cart")
            .map(|(port, _)| port);
        if let Some(port) = import_port {
            let _ = writeln!(
                text,
                "  curl http://{}:{port}/    # shop/cart:80's import port: no proxy settings",
                addresses.connect.ip()
            );
        }
        let _ = writeln!(text, "  curl http://{}/debug/routes", addresses.admin);
        let _ = writeln!(text, "  curl http://{}/debug/imports", addresses.admin);
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::path::Path;

    #[test]
    fn the_embedded_set_is_the_whole_demo_directory() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("gateway-config/demo");
        let mut on_disk = Vec::new();
        let mut stack = vec![root.clone()];
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).expect("demo dir") {
                let path = entry.expect("entry").path();
                if path.is_dir() {
                    stack.push(path);
                } else if let Ok(relative) = path.strip_prefix(&root) {
                    on_disk.push(relative.to_string_lossy().into_owned());
                }
            }
        }
        on_disk.sort();
        let embedded: Vec<&str> = assets::FILES.iter().map(|(path, _)| *path).collect();
        assert_eq!(
            embedded, on_disk,
            "src/cli/demo/assets.rs must list every demo file"
        );
    }
}
