//! One test's cluster set: the topology, certificates from `strait certs`,
//! a gateway-config directory (cluster folders written with the loopback
//! tests' YAML helpers), two `strait run` replicas per cluster and the pods
//! a test starts.
//!
//! Dropping a world kills its gateways, stops its pods and removes its
//! namespaces; while a test is failing it first prints the end of every
//! gateway's log. With `STRAIT_KEEP_NETNS=1` gateways, namespaces and files
//! are left in place and their location is printed.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use crate::support::{self, ServiceSpec};

use super::backend::{Backend, POD_PORT};
use super::gateway::{GatewayProcess, GatewaySpec, Scrape, TUNNEL_PORT};
use super::topology::{CLUSTERS, Topology, gateway_role, plan, pod_role};
use super::{Env, loud, sys};

pub const CLUSTERSET: &str = "netns.strait.dev";

/// What a world starts with.
pub struct Options {
    /// The services of each cluster (by id) at start.
    pub services: fn(&str) -> Vec<ServiceSpec<'static>>,
    /// Gateway replicas (`c3g1`) that are not started.
    pub stopped: &'static [&'static str],
    /// Adds the WAN-only `rogue` namespace.
    pub rogue: bool,
    /// `tunnel.transport` in gateway.yaml (`h2`, `quic`; default `auto`).
    pub transport: Option<&'static str>,
    /// More of gateway.yaml (whole top-level sections), appended as it is.
    pub settings: &'static str,
    /// More settings of the `tuning` section (lines indented by two).
    pub tuning: &'static str,
    /// Keeps everything when `STRAIT_KEEP_NETNS` is set (false: never keep).
    pub may_keep: bool,
}

impl Options {
    pub fn services(services: fn(&str) -> Vec<ServiceSpec<'static>>) -> Options {
        Options {
            services,
            stopped: &[],
            rogue: false,
            transport: None,
            settings: "",
            tuning: "",
            may_keep: true,
        }
    }
}

/// A running cluster set (fields drop in order: gateways, pods, namespaces, files).
pub struct World {
    pub gateways: BTreeMap<String, GatewayProcess>,
    pub backends: BTreeMap<String, Backend>,
    pub topology: Topology,
    pub dir: PathBuf,
    pub config: PathBuf,
    pub certs: PathBuf,
    keep: bool,
    _temp: Option<tempfile::TempDir>,
}

impl World {
    pub async fn start(env: &Env, options: Options) -> World {
        Self::try_start(&env.prefix, options)
            .await
            .unwrap_or_else(|error| panic!("{}: the world did not start: {error}", env.test))
    }

    pub async fn try_start(prefix: &str, options: Options) -> Result<World, String> {
        let keep = options.may_keep && super::keep();
        let temp = tempfile::Builder::new()
            .prefix(&format!("{prefix}-"))
            .tempdir()
            .map_err(|e| format!("temp dir: {e}"))?;
        let dir = temp.path().to_owned();
        let topology = Topology::build(prefix, keep, options.rogue)?;
        let certs = dir.join("certs");
        let mut args = vec![
            "certs".to_owned(),
            "--out".to_owned(),
            certs.display().to_string(),
            "--clusterset".to_owned(),
            CLUSTERSET.to_owned(),
        ];
        for cluster in &CLUSTERS {
            args.extend(["--cluster".to_owned(), cluster.id.to_owned()]);
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        sys::run(env!("CARGO_BIN_EXE_strait"), &args)?;
        let config = dir.join("config");
        std::fs::create_dir_all(&config).map_err(|e| format!("config dir: {e}"))?;
        let mut settings = format!("tuning:\n  connectTimeout: 2s\n{}", options.tuning);
        if let Some(transport) = options.transport {
            settings.push_str(&format!("tunnel:\n  transport: {transport}\n"));
        }
        settings.push_str(options.settings);
        std::fs::write(config.join("gateway.yaml"), settings)
            .map_err(|e| format!("gateway.yaml: {e}"))?;
        let mut world = World {
            gateways: BTreeMap::new(),
            backends: BTreeMap::new(),
            topology,
            dir: dir.clone(),
            config,
            certs,
            keep,
            _temp: Some(temp),
        };
        for cluster in &CLUSTERS {
            world.write_cluster(cluster.id, &(options.services)(cluster.id));
        }
        for cluster in &CLUSTERS {
            for (n, (pod_side, wan)) in (1u8..).zip(cluster.gateways.iter().zip(cluster.wan)) {
                let name = gateway_role(cluster.id, n);
                let (connect, tunnel, admin) = GatewayProcess::addresses(*pod_side, wan);
                let gateway = GatewayProcess::new(GatewaySpec {
                    namespace: world.topology.ns(&name),
                    name: name.clone(),
                    cluster: cluster.id,
                    config: &world.config,
                    tls_dir: world.certs.join(cluster.id),
                    connect,
                    tunnel,
                    admin,
                    log_dir: &world.dir,
                });
                world.gateways.insert(name, gateway);
            }
        }
        for (name, gateway) in &mut world.gateways {
            if !options.stopped.contains(&name.as_str()) {
                gateway.spawn()?;
            }
        }
        for (name, gateway) in &mut world.gateways {
            if !options.stopped.contains(&name.as_str()) {
                gateway.wait_ready(Duration::from_secs(20)).await?;
            }
        }
        if keep {
            loud(&format!(
                "STRAIT_KEEP_NETNS: {prefix}: files and gateway logs in {}",
                world.dir.display()
            ));
        }
        Ok(world)
    }

    /// The full namespace name of `role` (`c1p1`, `c3g2`, `rogue`).
    pub fn ns(&self, role: &str) -> String {
        self.topology.ns(role)
    }

    /// Gateway replica `name` (`c3g1`).
    pub fn gateway(&self, name: &str) -> &GatewayProcess {
        self.gateways
            .get(name)
            .unwrap_or_else(|| panic!("no gateway {name}"))
    }

    pub fn gateway_mut(&mut self, name: &str) -> &mut GatewayProcess {
        self.gateways
            .get_mut(name)
            .unwrap_or_else(|| panic!("no gateway {name}"))
    }

    /// Where pods of `cluster` send CONNECT: its first replica.
    pub fn connect_address(&self, cluster: &str) -> SocketAddr {
        self.gateway(&gateway_role(cluster, 1)).connect
    }

    /// The pod-side address of replica `n` of `cluster`'s gateway.
    pub fn gateway_ip(cluster: &str, n: u8) -> IpAddr {
        IpAddr::V4(plan(cluster).gateways[usize::from(n - 1)])
    }

    /// The address of pod `n` of `cluster`.
    pub fn pod_ip(cluster: &str, n: u8) -> IpAddr {
        IpAddr::V4(plan(cluster).pods[usize::from(n - 1)])
    }

    /// Starts the echo server of pod `n` of `cluster`, named `c3-pod1`.
    pub fn start_pod(&mut self, cluster: &str, n: u8) -> &Backend {
        let name = format!("{cluster}-pod{n}");
        let address = SocketAddr::new(Self::pod_ip(cluster, n), POD_PORT);
        let backend = Backend::start(&name, &self.ns(&pod_role(cluster, n)), address)
            .unwrap_or_else(|e| panic!("{e}"));
        self.backends.entry(name).or_insert(backend)
    }

    /// Starts pod `n` of `cluster` as an HTTP responder instead (see
    /// [`Backend::start_http`]), on the same port, named `c3-pod1`.
    pub fn start_http_pod(&mut self, cluster: &str, n: u8) -> &Backend {
        let name = format!("{cluster}-pod{n}");
        let address = SocketAddr::new(Self::pod_ip(cluster, n), POD_PORT);
        let backend = Backend::start_http(&name, &self.ns(&pod_role(cluster, n)), address)
            .unwrap_or_else(|e| panic!("{e}"));
        self.backends.entry(name).or_insert(backend)
    }

    /// Starts pod `n` of `cluster` as a PROXY protocol reader instead (see
    /// [`Backend::start_told`]), on the same port, named `c3-pod1`.
    pub fn start_told_pod(&mut self, cluster: &str, n: u8) -> &Backend {
        let name = format!("{cluster}-pod{n}");
        let address = SocketAddr::new(Self::pod_ip(cluster, n), POD_PORT);
        let backend = Backend::start_told(&name, &self.ns(&pod_role(cluster, n)), address)
            .unwrap_or_else(|e| panic!("{e}"));
        self.backends.entry(name).or_insert(backend)
    }

    /// The echo server named `name` (`c3-pod1`).
    pub fn pod(&self, name: &str) -> &Backend {
        self.backends
            .get(name)
            .unwrap_or_else(|| panic!("pod {name} was not started"))
    }

    /// Writes `clusters/<id>/objects.yaml` with `services` (atomically).
    pub fn write_cluster(&self, id: &str, services: &[ServiceSpec<'_>]) {
        let cluster = plan(id);
        let gateways: Vec<IpAddr> = cluster.wan.iter().map(|ip| IpAddr::V4(*ip)).collect();
        let yaml = support::cluster_yaml_with_gateways(
            id,
            cluster.network,
            &gateways,
            TUNNEL_PORT,
            services,
        );
        support::write_cluster(&self.config, id, &yaml);
    }

    /// Starts one more gateway of `cluster` in the namespace of `role`, with
    /// the certificate in `tls_dir`, listening on the namespace's loopback
    /// (connect, admin) and `wan` (tunnel) at ports 15x01, 15x21 and 15x08
    /// for `slot` x; returns its connect address once it is ready.
    pub async fn add_gateway(
        &mut self,
        name: &str,
        role: &str,
        cluster: &str,
        tls_dir: PathBuf,
        wan: Ipv4Addr,
        slot: u16,
    ) -> SocketAddr {
        let base = 15_000 + 100 * slot;
        let connect = SocketAddr::from((Ipv4Addr::LOCALHOST, base + 1));
        let mut gateway = GatewayProcess::new(GatewaySpec {
            name: name.to_owned(),
            namespace: self.ns(role),
            cluster,
            config: &self.config,
            tls_dir,
            connect,
            tunnel: SocketAddr::from((wan, base + 8)),
            admin: SocketAddr::from((Ipv4Addr::LOCALHOST, base + 21)),
            log_dir: &self.dir,
        });
        gateway
            .start()
            .await
            .unwrap_or_else(|e| panic!("gateway {name}: {e}"));
        self.gateways.insert(name.to_owned(), gateway);
        connect
    }

    /// A TLS directory for `cluster` whose certificate comes from a CA of
    /// its own (same cluster set name) but which trusts the real CA too.
    pub fn impostor_certificates(&self, cluster: &str) -> PathBuf {
        let other_ca = self.dir.join("other-ca");
        let out = other_ca.display().to_string();
        let args = [
            "certs",
            "--out",
            &out,
            "--clusterset",
            CLUSTERSET,
            "--cluster",
            cluster,
        ];
        sys::run(env!("CARGO_BIN_EXE_strait"), &args).unwrap_or_else(|e| panic!("{e}"));
        let tls = self.dir.join("impostor");
        std::fs::create_dir_all(&tls).expect("impostor dir");
        for file in ["tls.crt", "tls.key"] {
            std::fs::copy(other_ca.join(cluster).join(file), tls.join(file)).expect("copy");
        }
        let read = |path: PathBuf| std::fs::read_to_string(path).expect("read a CA");
        let trusted = read(other_ca.join("ca.crt")) + &read(self.certs.join("ca.crt"));
        std::fs::write(tls.join("ca.crt"), trusted).expect("write ca.crt");
        tls
    }

    /// Removes cluster `id` from the cluster set (its folder goes away).
    pub fn remove_cluster(&self, id: &str) {
        let folder = self.config.join("clusters").join(id);
        let parked = self.config.join("clusters").join(format!(".{id}.removed"));
        std::fs::rename(&folder, &parked).expect("move the cluster folder away");
        std::fs::remove_dir_all(&parked).expect("remove the cluster folder");
    }

    /// Scrapes every running gateway.
    pub async fn scrape(&self) -> BTreeMap<String, Scrape> {
        let mut scrapes = BTreeMap::new();
        for (name, gateway) in &self.gateways {
            if gateway.pid().is_some() {
                let scrape = gateway
                    .metrics()
                    .await
                    .unwrap_or_else(|e| panic!("scrape {name}: {e}"));
                scrapes.insert(name.clone(), scrape);
            }
        }
        scrapes
    }

    /// Waits until every gateway of `gateways` routes to exactly `expected`
    /// (as [`GatewayProcess::backends`] writes them).
    pub async fn wait_backends(&self, gateways: &[&str], expected: &[&str]) {
        let expected: BTreeSet<String> = expected.iter().map(|b| (*b).to_owned()).collect();
        let started = std::time::Instant::now();
        for name in gateways {
            loop {
                let seen = self.gateway(name).backends().await;
                if seen.as_ref() == Ok(&expected) {
                    break;
                }
                assert!(
                    started.elapsed() < Duration::from_secs(15),
                    "{name} did not route to {expected:?} within 15 s; it routes to {seen:?}"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

impl Drop for World {
    fn drop(&mut self) {
        if std::thread::panicking() {
            for (name, gateway) in &self.gateways {
                // Captured by the test harness: shown with the failure.
                eprintln!(
                    "---- last lines of {name}'s log ----\n{}",
                    gateway.log_tail(12)
                );
            }
        }
        if self.keep {
            for gateway in self.gateways.values_mut() {
                gateway.detach();
            }
            if let Some(temp) = self._temp.take() {
                let _ = temp.keep();
            }
            return;
        }
        for gateway in self.gateways.values_mut() {
            gateway.kill();
        }
    }
}
