//! This gateway's own settings, read from `gateway.yaml` at the top of a
//! configuration directory: its cluster, listeners, TLS files and tuning.
//! Every field is optional; command-line flags override what the file says.
//! Errors name the file and the field, with the line where YAML can tell.

mod dns;
mod health;
mod imports;
mod peers;
mod routing;
mod tunnel;

pub use dns::DnsSettings;
pub use health::HealthSettings;
pub use imports::ImportSettings;
pub use routing::{FenceSettings, ServiceRouting};
pub use tunnel::TunnelConfig;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::backoff::Retry;
use crate::controller::{ControllerOptions, ExportStatusOptions, ImportOptions};
use crate::diagnostics::{Diagnostic, Origin};
use crate::discovery::kube::KubeOptions;
use crate::discovery::translate::TranslateOptions;
use crate::model::names::{GATEWAY_NAMESPACE, NETWORK_PROPERTY};
use crate::model::{ClusterId, NetworkId, check_dns_subdomain};
use crate::net::sources::SourceLimits;
pub use crate::routing::balancer::{Balancer, Locality};

/// The settings file's name inside a configuration directory.
pub const SETTINGS_FILE: &str = "gateway.yaml";

/// `gateway.yaml`, documented field by field in `docs/configuration.md`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GatewaySettings {
    /// The cluster this gateway runs in; the default for `--from` and `--cluster`.
    #[serde(default)]
    pub cluster: Option<String>,
    /// The ClusterProperty naming a cluster's network.
    #[serde(default = "default_network_property")]
    pub network_property: String,
    /// Strait's own namespace in every cluster of the set: the only one
    /// whose Service labelled `strait.dev/gateway` names the gateway.
    #[serde(default = "default_gateway_namespace")]
    pub gateway_namespace: String,
    /// The network map: network → its clusters, as this cluster's admin
    /// attests them. Unset: networks are what clusters say of themselves,
    /// and `strait.dev/allowed-networks` admits no one by network.
    #[serde(default)]
    pub networks: Option<BTreeMap<String, Vec<String>>>,
    #[serde(default)]
    pub listeners: Listeners,
    #[serde(default)]
    pub tls: TlsSettings,
    #[serde(default)]
    pub tuning: Tuning,
    /// Which transport carries tunnelled connections.
    #[serde(default)]
    pub tunnel: TunnelConfig,
    /// Reading the cluster set from Kubernetes API servers instead of files.
    #[serde(default)]
    pub kube: KubeSettings,
    /// The transparent path: import ports and the objects behind them.
    #[serde(default)]
    pub imports: ImportSettings,
    /// The `clusterset.local` DNS responder: zone and TTLs.
    #[serde(default)]
    pub dns: DnsSettings,
    /// Active health checks of the backends reached through a tunnel.
    #[serde(default)]
    pub health: HealthSettings,
    /// Accept loopback endpoint addresses: only for single-host setups and
    /// tests, never in a real cluster set.
    #[serde(default)]
    pub allow_loopback_endpoints: bool,
    /// This cluster's admin's routing policy per imported service, over
    /// what each exporter says.
    #[serde(default)]
    pub routing: Vec<ServiceRouting>,
}

fn default_network_property() -> String {
    NETWORK_PROPERTY.to_owned()
}

fn default_gateway_namespace() -> String {
    GATEWAY_NAMESPACE.to_owned()
}

impl Default for GatewaySettings {
    fn default() -> Self {
        Self {
            cluster: None,
            network_property: default_network_property(),
            gateway_namespace: default_gateway_namespace(),
            networks: None,
            listeners: Listeners::default(),
            tls: TlsSettings::default(),
            tuning: Tuning::default(),
            tunnel: TunnelConfig::default(),
            kube: KubeSettings::default(),
            imports: ImportSettings::default(),
            dns: DnsSettings::default(),
            health: HealthSettings::default(),
            allow_loopback_endpoints: false,
            routing: Vec::new(),
        }
    }
}

/// Where the gateway listens.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Listeners {
    /// HTTP CONNECT egress listener for local clients.
    #[serde(default = "default_connect")]
    pub connect: SocketAddr,
    /// mTLS tunnel listener for peer gateways (TCP for HTTP/2, UDP for QUIC).
    #[serde(default = "default_tunnel")]
    pub tunnel: SocketAddr,
    /// Health, readiness, metrics and debug endpoints.
    #[serde(default = "default_admin")]
    pub admin: SocketAddr,
    /// Addresses on which ClusterSetIP VIP traffic arrives.
    #[serde(default)]
    pub cluster_set_ip: Vec<SocketAddr>,
    /// The DNS responder (UDP and TCP on one port); none when unset.
    #[serde(default)]
    pub dns: Option<SocketAddr>,
}

fn default_connect() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 15001))
}
fn default_tunnel() -> SocketAddr {
    SocketAddr::from(([0, 0, 0, 0], 15008))
}
fn default_admin() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 15021))
}

impl Default for Listeners {
    fn default() -> Self {
        Self {
            connect: default_connect(),
            tunnel: default_tunnel(),
            admin: default_admin(),
            cluster_set_ip: Vec::new(),
            dns: None,
        }
    }
}

/// Where the gateway's certificate, key and CA live (Kubernetes secret layout).
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TlsSettings {
    /// Holds `tls.crt`, `tls.key` and `ca.crt`.
    #[serde(default = "default_tls_dir")]
    pub dir: PathBuf,
}

fn default_tls_dir() -> PathBuf {
    PathBuf::from("/etc/strait/tls")
}

impl Default for TlsSettings {
    fn default() -> Self {
        Self {
            dir: default_tls_dir(),
        }
    }
}

/// Timeouts and limits of the data plane.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Tuning {
    #[serde(default = "default_connect_timeout", with = "humantime_serde")]
    pub connect_timeout: Duration,
    #[serde(default = "default_idle_timeout", with = "humantime_serde")]
    pub idle_timeout: Duration,
    /// A proxied connection that holds bytes one side does not take, and
    /// writes none of them for this long, is logged and counted as stalled
    /// (`0s`: not watched). It is not closed for it.
    #[serde(default = "default_stall_report", with = "humantime_serde")]
    pub stall_report: Duration,
    /// How many backends one connection may try before it fails.
    #[serde(default = "default_dial_attempts")]
    pub dial_attempts: u8,
    #[serde(default)]
    pub balancer: Balancer,
    #[serde(default)]
    pub locality: Locality,
    /// Candidate backends a locality tier needs to take every new
    /// connection it is asked for; with fewer it takes that fraction of
    /// them, and the next tier the rest (1: all or nothing).
    #[serde(default = "default_locality_minimum_healthy")]
    pub locality_minimum_healthy: u32,
    /// How long configuration changes settle before routes are rebuilt.
    #[serde(default = "default_reload_debounce", with = "humantime_serde")]
    pub reload_debounce: Duration,
    /// Descriptors kept free for the admin listener and open connections:
    /// new work is refused within this many of the process limit. `None`:
    /// a sixteenth of the limit, 64 to 1,024.
    #[serde(default)]
    pub descriptor_reserve: Option<u64>,
    /// Open connections one source address may hold on one listener
    /// (CONNECT, ClusterSetIP, import ports, the tunnel port): one pod, or
    /// one address before it has authenticated, cannot take every slot.
    #[serde(default = "default_max_connections_per_source")]
    pub max_connections_per_source: u32,
    /// Open connections of one listener before only sources holding less
    /// than their share are admitted (an eighth more at most).
    #[serde(default = "default_max_connections_per_listener")]
    pub max_connections_per_listener: u32,
    /// The process's memory limit, half of which buffers may hold
    /// (`768Mi`, `2GiB`, bytes). `None`: the cgroup's `memory.max`, else 2 GiB.
    #[serde(default)]
    pub memory_limit: Option<bytesize::ByteSize>,
    /// A UDP flow (a client address on one import port) ends after this
    /// long with no datagram either way: the kernel's conntrack default
    /// for UDP, which kube-proxy keeps.
    #[serde(default = "default_udp_idle_timeout", with = "humantime_serde")]
    pub udp_idle_timeout: Duration,
    /// UDP flows one source address may hold, over every import port.
    #[serde(default = "default_max_udp_flows_per_source")]
    pub max_udp_flows_per_source: u32,
    /// UDP flows of the gateway, before only light sources get in.
    #[serde(default = "default_max_udp_flows")]
    pub max_udp_flows: u32,
    /// UDP flows the sources of one network prefix (an IPv4 /24, an IPv6
    /// /56: about one node's pods) may hold, over every import port: one
    /// tenant's pods, or one spoofer, cannot fill the gateway's table.
    #[serde(default = "default_max_udp_flows_per_prefix")]
    pub max_udp_flows_per_prefix: u32,
    /// A new UDP flow whose client has sent one datagram ends after this
    /// long without a second: a client that never speaks again (a forged
    /// source among them) holds its flow, and the tunnel stream behind it,
    /// briefly.
    #[serde(default = "default_udp_unconfirmed_timeout", with = "humantime_serde")]
    pub udp_unconfirmed_timeout: Duration,
    /// Answers a UDP flow may send its client per datagram the client sent
    /// (banked up to four times this), once the client has spoken twice;
    /// before that, 4. Past it answers are dropped (`limit="udp_answers"`):
    /// a forged source cannot be flooded with answers.
    #[serde(default = "default_udp_answers_per_request")]
    pub udp_answers_per_request: u32,
}

fn default_max_udp_flows_per_prefix() -> u32 {
    1_024
}
fn default_udp_unconfirmed_timeout() -> Duration {
    Duration::from_secs(5)
}
fn default_udp_answers_per_request() -> u32 {
    64
}

fn default_udp_idle_timeout() -> Duration {
    Duration::from_secs(30)
}
fn default_max_udp_flows_per_source() -> u32 {
    256
}
fn default_max_udp_flows() -> u32 {
    4_096
}

fn default_max_connections_per_source() -> u32 {
    1_024
}
fn default_max_connections_per_listener() -> u32 {
    8_192
}

impl Tuning {
    /// The memory limit the buffers' budget is half of, and where it came from.
    pub fn memory_limit(&self) -> (u64, &'static str) {
        if let Some(limit) = self.memory_limit {
            return (limit.as_u64(), "tuning.memoryLimit");
        }
        match crate::net::memory::cgroup_limit() {
            Some(limit) => (limit, "cgroup memory.max"),
            None => (crate::net::memory::DEFAULT_LIMIT, "default"),
        }
    }

    /// The per-source caps every listener gets.
    pub fn source_limits(&self) -> SourceLimits {
        SourceLimits {
            per_source: self.max_connections_per_source,
            total: self.max_connections_per_listener,
        }
    }
}

fn default_connect_timeout() -> Duration {
    Duration::from_secs(5)
}
fn default_idle_timeout() -> Duration {
    Duration::from_secs(3600)
}
fn default_stall_report() -> Duration {
    Duration::from_secs(10)
}
fn default_dial_attempts() -> u8 {
    3
}
fn default_locality_minimum_healthy() -> u32 {
    1
}

fn default_reload_debounce() -> Duration {
    Duration::from_millis(250)
}

impl Default for Tuning {
    fn default() -> Self {
        Self {
            connect_timeout: default_connect_timeout(),
            idle_timeout: default_idle_timeout(),
            stall_report: default_stall_report(),
            dial_attempts: default_dial_attempts(),
            balancer: Balancer::default(),
            locality: Locality::default(),
            locality_minimum_healthy: default_locality_minimum_healthy(),
            reload_debounce: default_reload_debounce(),
            descriptor_reserve: None,
            max_connections_per_source: default_max_connections_per_source(),
            max_connections_per_listener: default_max_connections_per_listener(),
            memory_limit: None,
            udp_idle_timeout: default_udp_idle_timeout(),
            max_udp_flows_per_source: default_max_udp_flows_per_source(),
            max_udp_flows: default_max_udp_flows(),
            max_udp_flows_per_prefix: default_max_udp_flows_per_prefix(),
            udp_unconfirmed_timeout: default_udp_unconfirmed_timeout(),
            udp_answers_per_request: default_udp_answers_per_request(),
        }
    }
}

/// The Kubernetes discovery source: the local cluster from in-cluster
/// config or `KUBECONFIG`, remote clusters from kubeconfig files and from
/// Secrets labelled `strait.dev/remote-cluster: "true"`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KubeSettings {
    /// Read the cluster set from the API servers (same as `--kube`).
    #[serde(default)]
    pub enabled: bool,
    /// Kubeconfig files of remote clusters; relative paths are relative to
    /// the directory holding `gateway.yaml`.
    #[serde(default)]
    pub kubeconfigs: Vec<PathBuf>,
    /// Where remote-cluster Secrets live (default: `POD_NAMESPACE`, else the
    /// local kubeconfig's namespace).
    #[serde(default)]
    pub remote_secret_namespace: Option<String>,
    /// How long a cluster whose API is unreachable keeps its last known
    /// state before its backends are dropped.
    #[serde(default = "default_stale_after", with = "humantime_serde")]
    pub stale_after: Duration,
    /// Write the `Valid` and `Conflict` conditions on the local cluster's
    /// ServiceExports (same as `strait run --write-export-status`); one
    /// replica writes, elected by a Lease in the gateway's namespace.
    #[serde(default)]
    pub write_export_status: bool,
    /// Act as the cluster's MCS controller: the Lease holder writes the
    /// ServiceImports, derived Services and their EndpointSlices (same as
    /// `strait run --manage-imports`). Off: another MCS implementation owns
    /// the imports and Strait only reads them.
    #[serde(default)]
    pub manage_imports: bool,
    /// Take over the imports a previous MCS implementation left, named by
    /// its field manager (`metadata.managedFields[].manager` of what it
    /// wrote): its ServiceImports, the derived Services they name (kept
    /// under their name, so their ClusterIPs survive) and those Services'
    /// EndpointSlices. Unset: another controller's import is left alone.
    /// Needs `manageImports`.
    #[serde(default)]
    pub adopt_imports: Option<String>,
    /// Clusters whose exported state is read from their feed over the
    /// tunnel rather than from their API servers (docs/tunnel-protocol.md
    /// §10): no credential for their API servers is needed.
    #[serde(default)]
    pub peers: Vec<peers::PeerSettings>,
}

fn default_stale_after() -> Duration {
    Duration::from_secs(300)
}

impl Default for KubeSettings {
    fn default() -> Self {
        Self {
            enabled: false,
            kubeconfigs: Vec::new(),
            remote_secret_namespace: None,
            stale_after: default_stale_after(),
            write_export_status: false,
            manage_imports: false,
            adopt_imports: None,
            peers: Vec::new(),
        }
    }
}

impl GatewaySettings {
    /// The Kubernetes source's options `gateway.yaml` describes; what the
    /// controller reads on top is asked for by
    /// [`ControllerOptions::request_inputs`].
    pub fn kube_options(&self) -> KubeOptions {
        KubeOptions {
            remote_kubeconfigs: self.kube.kubeconfigs.clone(),
            remote_secret_namespace: self.kube.remote_secret_namespace.clone(),
            translate: self.translate_options(),
            stale_after: self.kube.stale_after,
            debounce: self.tuning.reload_debounce,
            // Checked when the settings were read.
            peers: self.feed_peers().unwrap_or_default(),
            ..KubeOptions::default()
        }
    }

    /// What the controller writes, as `gateway.yaml` (and
    /// `--write-export-status`) ask.
    pub fn controller_options(&self) -> ControllerOptions {
        ControllerOptions {
            export_status: self
                .kube
                .write_export_status
                .then(ExportStatusOptions::default),
            imports: self.kube.manage_imports.then_some(ImportOptions {
                range: self.imports.port_range,
                release_grace: self.imports.release_grace,
                max_headless_endpoints: self.dns.max_headless_endpoints,
                quota: self.imports.namespace_quota.into(),
                adopt_from: self.kube.adopt_imports.clone(),
                writes: self.imports.writes.into(),
            }),
            retry: Retry::default(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct SettingsError(pub Box<Diagnostic>);

impl GatewaySettings {
    /// Reads `dir/gateway.yaml`; a missing file means every default.
    pub fn load(dir: &Path) -> Result<Self, SettingsError> {
        let path = dir.join(SETTINGS_FILE);
        match std::fs::read_to_string(&path) {
            Ok(text) => {
                let mut settings = Self::parse(&path.display().to_string(), &text)?;
                for kubeconfig in &mut settings.kube.kubeconfigs {
                    if kubeconfig.is_relative() {
                        *kubeconfig = dir.join(&*kubeconfig);
                    }
                }
                Ok(settings)
            }
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(Self::default()),
            Err(error) => Err(SettingsError(Box::new(Diagnostic::error(
                Origin::file(path.display()),
                format!("cannot read: {error}"),
            )))),
        }
    }

    /// Parses and validates settings; `source` names the file in errors.
    pub fn parse(source: &str, text: &str) -> Result<Self, SettingsError> {
        let error = |field: Option<String>, message: String| {
            let mut diagnostic = Diagnostic::error(Origin::file(source), message);
            diagnostic.field = field;
            SettingsError(Box::new(diagnostic))
        };
        if text.trim().is_empty() {
            return Ok(Self::default());
        }
        let value = crate::discovery::yaml::parse_single(text)
            .map_err(|e| error(None, format!("invalid YAML: {e}")))?;
        let settings: Self = serde_path_to_error::deserialize(value).map_err(|e| {
            let path = e.path().to_string();
            error((path != ".").then_some(path), e.into_inner().to_string())
        })?;
        if let Some(cluster) = &settings.cluster {
            ClusterId::new(cluster).map_err(|e| {
                error(
                    Some("cluster".to_owned()),
                    format!("invalid cluster id: {e}"),
                )
            })?;
        }
        check_dns_subdomain(&settings.network_property, 253).map_err(|e| {
            error(
                Some("networkProperty".to_owned()),
                format!("invalid property name: {e}"),
            )
        })?;
        check_dns_subdomain(&settings.gateway_namespace, 63).map_err(|e| {
            error(
                Some("gatewayNamespace".to_owned()),
                format!("invalid namespace: {e}"),
            )
        })?;
        settings
            .network_map()
            .map_err(|message| error(Some("networks".to_owned()), message))?;
        settings
            .feed_peers()
            .map_err(|(field, message)| error(Some(field), message))?;
        settings
            .admin_policies()
            .map_err(|(field, message)| error(Some(field), message))?;
        if let Some(namespace) = &settings.kube.remote_secret_namespace {
            check_dns_subdomain(namespace, 63).map_err(|e| {
                error(
                    Some("kube.remoteSecretNamespace".to_owned()),
                    format!("invalid namespace: {e}"),
                )
            })?;
        }
        settings
            .dns
            .check()
            .map_err(|(field, message)| error(Some(field.to_owned()), message))?;
        settings
            .health
            .check()
            .map_err(|(field, message)| error(Some(field.to_owned()), message))?;
        if settings.tuning.dial_attempts == 0 {
            return Err(error(
                Some("tuning.dialAttempts".to_owned()),
                "must be at least 1".to_owned(),
            ));
        }
        if settings.tuning.locality_minimum_healthy == 0 {
            return Err(error(
                Some("tuning.localityMinimumHealthy".to_owned()),
                "must be at least 1 (1: a tier with any backend takes every connection)".to_owned(),
            ));
        }
        Ok(settings)
    }

    /// The network map by cluster, checked: ids valid, no cluster on two
    /// networks. `None` when `networks` is unset.
    pub fn network_map(&self) -> Result<Option<BTreeMap<ClusterId, NetworkId>>, String> {
        let Some(networks) = &self.networks else {
            return Ok(None);
        };
        let mut map = BTreeMap::new();
        for (network, clusters) in networks {
            let network =
                NetworkId::new(network).map_err(|e| format!("network {network:?}: {e}"))?;
            for cluster in clusters {
                let id = ClusterId::new(cluster)
                    .map_err(|e| format!("network {network}: cluster {cluster:?}: {e}"))?;
                if let Some(first) = map.insert(id, network.clone()) {
                    return Err(format!(
                        "cluster {cluster:?} is on both {first} and {network}; a cluster is on one network"
                    ));
                }
            }
        }
        Ok(Some(map))
    }

    /// `kube.peers`, checked against the network map and this cluster's id.
    pub fn feed_peers(&self) -> Result<Vec<crate::feed::FeedPeer>, (String, String)> {
        let networks = self.network_map().ok().flatten();
        peers::feed_peers(&self.kube.peers, networks.as_ref(), self.cluster.as_deref())
    }

    /// `routing`, checked: the admin's policy layer by service.
    pub fn admin_policies(
        &self,
    ) -> Result<Vec<(crate::model::ServiceKey, crate::model::RoutingPolicy)>, (String, String)>
    {
        routing::admin_policies(&self.routing)
    }

    pub fn translate_options(&self) -> TranslateOptions {
        TranslateOptions {
            network_property: self.network_property.clone(),
            gateway_namespace: self.gateway_namespace.clone(),
            // Checked when the settings were read.
            networks: self.network_map().ok().flatten().map(std::sync::Arc::new),
            allow_loopback_endpoints: self.allow_loopback_endpoints,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_file_means_defaults() {
        assert_eq!(
            GatewaySettings::parse("g.yaml", "").ok(),
            Some(GatewaySettings::default())
        );
    }

    #[test]
    fn fields_parse_with_units() {
        let text = "cluster: c1\nlisteners:\n  connect: 0.0.0.0:9000\ntuning:\n  connectTimeout: 2s\n  balancer: round-robin\n";
        let settings = GatewaySettings::parse("g.yaml", text).expect("valid settings");
        assert_eq!(settings.cluster.as_deref(), Some("c1"));
        assert_eq!(
            settings.listeners.connect,
            "0.0.0.0:9000".parse().expect("addr")
        );
        assert_eq!(settings.tuning.connect_timeout, Duration::from_secs(2));
        assert_eq!(settings.tuning.balancer, Balancer::RoundRobin);
        assert_eq!(settings.listeners.tunnel, default_tunnel());
    }

    #[test]
    fn a_typo_names_the_file_and_field() {
        let error = GatewaySettings::parse("g.yaml", "listeners:\n  conect: 0.0.0.0:1\n")
            .expect_err("unknown field");
        assert_eq!(&*error.0.origin.source, "g.yaml");
        assert!(
            error.0.message.contains("unknown field `conect`"),
            "{}",
            error.0.message
        );
    }

    #[test]
    fn a_bad_address_names_its_field() {
        let error = GatewaySettings::parse("g.yaml", "listeners:\n  admin: nowhere\n")
            .expect_err("bad address");
        assert_eq!(error.0.field.as_deref(), Some("listeners.admin"));
    }

    #[test]
    fn the_kube_section_parses_with_defaults() {
        let settings =
            GatewaySettings::parse("g.yaml", "kube:\n  enabled: true\n").expect("valid settings");
        assert!(settings.kube.enabled);
        assert_eq!(settings.kube.stale_after, Duration::from_secs(300));
        assert!(!settings.kube.write_export_status);
        let settings = GatewaySettings::parse("g.yaml", "kube:\n  writeExportStatus: true\n")
            .expect("valid settings");
        assert!(settings.kube.write_export_status);
        let text = "kube:\n  kubeconfigs: [remote.yaml]\n  remoteSecretNamespace: strait-system\n  staleAfter: 30s\n";
        let settings = GatewaySettings::parse("g.yaml", text).expect("valid settings");
        assert_eq!(
            settings.kube.kubeconfigs,
            vec![PathBuf::from("remote.yaml")]
        );
        assert_eq!(settings.kube.stale_after, Duration::from_secs(30));
        let error = GatewaySettings::parse("g.yaml", "kube:\n  remoteSecretNamespace: Bad_NS\n")
            .expect_err("bad namespace");
        assert_eq!(error.0.field.as_deref(), Some("kube.remoteSecretNamespace"));
    }

    #[test]
    fn feed_peers_are_read_from_gateway_yaml_and_checked_there() {
        let text = "networks:\n  net-a: [c1]\n  net-b: [c3]\nkube:\n  peers:\n  - cluster: c3\n    gateways: [\"gw.c3.example:15008\"]\n";
        let settings = GatewaySettings::parse("g.yaml", text).expect("valid settings");
        let peers = settings.kube_options().peers;
        assert_eq!(peers.len(), 1);
        assert_eq!(peers[0].network.as_str(), "net-b", "the map's word");
        let text = "kube:\n  peers:\n  - cluster: c3\n    gateways: [\"gw:1\"]\n";
        let error = GatewaySettings::parse("g.yaml", text).expect_err("no network");
        assert_eq!(error.0.field.as_deref(), Some("kube.peers[0].network"));
        let text = "kube:\n  peers:\n  - cluster: c3\n    network: n\n    gateway: [\"gw:1\"]\n";
        let error = GatewaySettings::parse("g.yaml", text).expect_err("a misspelt field");
        assert!(error.to_string().contains("gateway"), "{error}");
    }

    #[test]
    fn the_network_map_is_checked_and_read_by_cluster() {
        let text = "networks:\n  net-a: [c1, c2]\n  net-b: [c3]\n";
        let settings = GatewaySettings::parse("g.yaml", text).expect("valid settings");
        let options = settings.translate_options();
        let map = options.networks.expect("a map");
        let on = |cluster: &str| {
            map.get(&ClusterId::new(cluster).expect("id"))
                .map(|n| n.as_str().to_owned())
        };
        assert_eq!(on("c2").as_deref(), Some("net-a"));
        assert_eq!(on("c3").as_deref(), Some("net-b"));
        assert_eq!(on("c4"), None);
        assert!(
            GatewaySettings::default()
                .translate_options()
                .networks
                .is_none()
        );
        for (text, says) in [
            (
                "networks:\n  net-a: [c1]\n  net-b: [c1]\n",
                "on both net-a and net-b",
            ),
            ("networks:\n  Net_A: [c1]\n", "network \"Net_A\""),
            ("networks:\n  net-a: [Bad_Id]\n", "cluster \"Bad_Id\""),
        ] {
            let error = GatewaySettings::parse("g.yaml", text).expect_err(text);
            assert_eq!(error.0.field.as_deref(), Some("networks"), "{text}");
            assert!(error.0.message.contains(says), "{}", error.0.message);
        }
    }

    #[test]
    fn an_invalid_cluster_id_is_refused() {
        let error = GatewaySettings::parse("g.yaml", "cluster: Bad_Id\n").expect_err("bad id");
        assert_eq!(error.0.field.as_deref(), Some("cluster"));
    }
}
