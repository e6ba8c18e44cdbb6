//! One running gateway: loads its routes, binds its listeners, serves
//! clients and peers, swaps routes when the configuration changes, and drains
//! open connections on shutdown.

mod peers;
pub mod probe;
mod reload;
mod status;

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use arc_swap::ArcSwap;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::admin::metrics::Metrics;
use crate::admin::{AdminState, serve as serve_admin};
use crate::config::GatewaySettings;
use crate::discovery::observed::Observed;
use crate::dns::DnsSockets;
use crate::net::dial::DialOptions;
use crate::routing::RouteTable;
use crate::routing::balancer::{Chooser, OutlierPolicy};
use crate::state::{DialOverrides, GatewayState};
use crate::tls::ReloadingTls;
use crate::tunnel::client::TunnelPool;
use crate::tunnel::quic::client::QuicPool;
use crate::tunnel::{TransportMode, TunnelSettings};

/// How often the TLS files are checked for a renewed certificate.
const TLS_POLL_INTERVAL: Duration = Duration::from_secs(5);

#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    #[error("cannot bind {what} listener on {address}: {source}")]
    Bind {
        what: &'static str,
        address: SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot load TLS material: {0}")]
    Tls(#[from] crate::tls::TlsError),
    #[error("cannot start quic: {0}")]
    Quic(#[from] crate::tunnel::quic::QuicError),
    #[error("cannot load routes:\n{0}")]
    Routes(String),
    #[error("cannot watch {}: {source}", dir.display())]
    Watch { dir: PathBuf, source: notify::Error },
    #[error("cannot serve dns: {0}")]
    Dns(#[from] crate::dns::ZoneError),
    #[error("settings field {field}: {message}")]
    Settings { field: String, message: String },
}

/// Everything a gateway needs besides its listeners.
#[derive(Debug, Clone)]
pub struct GatewayOptions {
    pub config_dir: PathBuf,
    /// `gateway.yaml` with command-line overrides applied.
    pub settings: GatewaySettings,
    /// The cluster this gateway serves.
    pub cluster: String,
    pub tls_dir: PathBuf,
    pub dial_source: Option<IpAddr>,
    pub overrides: DialOverrides,
    pub tunnel: TunnelSettings,
    /// Routes come from this Kubernetes source instead of `config_dir`.
    pub kube: Option<crate::discovery::kube::KubeHandle>,
    /// The controller writing to the local cluster, when it runs.
    pub controller: Option<Arc<crate::controller::Controller>>,
}

/// The gateway's bound sockets.
pub struct Listeners {
    pub connect: TcpListener,
    pub tunnel: TcpListener,
    pub admin: TcpListener,
    pub cluster_set_ip: Vec<TcpListener>,
    /// The DNS responder's UDP and TCP sockets, when it is on.
    pub dns: Option<DnsSockets>,
}

impl Listeners {
    /// Binds every listener the settings name.
    pub async fn bind(settings: &GatewaySettings) -> Result<Self, GatewayError> {
        let bind = |what: &'static str, address: SocketAddr| async move {
            crate::net::listen::bind(address).map_err(|source| GatewayError::Bind {
                what,
                address,
                source,
            })
        };
        let listeners = &settings.listeners;
        let mut cluster_set_ip = Vec::new();
        for address in &listeners.cluster_set_ip {
            cluster_set_ip.push(bind("cluster-set-ip", *address).await?);
        }
        let dns = match listeners.dns {
            Some(address) => {
                Some(
                    DnsSockets::bind(address)
                        .await
                        .map_err(|source| GatewayError::Bind {
                            what: "dns",
                            address,
                            source,
                        })?,
                )
            }
            None => None,
        };
        Ok(Self {
            connect: bind("connect", listeners.connect).await?,
            tunnel: bind("tunnel", listeners.tunnel).await?,
            admin: bind("admin", listeners.admin).await?,
            cluster_set_ip,
            dns,
        })
    }
}

/// Where a started gateway listens.
#[derive(Debug, Clone)]
pub struct BoundAddresses {
    pub connect: SocketAddr,
    pub tunnel: SocketAddr,
    pub admin: SocketAddr,
    pub cluster_set_ip: Vec<SocketAddr>,
    /// The DNS responder (UDP and TCP), when it is on.
    pub dns: Option<SocketAddr>,
}

/// A started gateway.
pub struct Gateway {
    state: Arc<GatewayState>,
    addresses: BoundAddresses,
    ready: Arc<AtomicBool>,
    /// Stops the listeners; open connections continue.
    stop_accepting: CancellationToken,
    /// Stops the admin listener and background tasks, after draining.
    stop_admin: CancellationToken,
    tasks: Vec<JoinHandle<()>>,
    /// The QUIC listener, closed at the end of the drain: its peers are
    /// told at once rather than at their idle timeout.
    quic_endpoint: Option<quinn::Endpoint>,
}

/// Routes, and the findings of the configuration they were built from.
pub struct Routes {
    pub table: RouteTable,
    /// Invalid objects left out (errors) and warnings.
    pub findings: Vec<crate::diagnostics::Diagnostic>,
}

/// Loads the routes of `options.cluster` from the configuration directory
/// (or the Kubernetes source), with every invalid object left out: one bad
/// object excludes only itself. Fails only when nothing usable is left
/// (no cluster, or not this gateway's own).
pub fn load_routes(options: &GatewayOptions) -> Result<Routes, GatewayError> {
    load_routes_reusing(options, None)
}

/// Loads the routes like [`load_routes`]; from the Kubernetes source, the
/// routes of every service unchanged since `previous` are reused.
pub(crate) fn load_routes_reusing(
    options: &GatewayOptions,
    previous: Option<&RouteTable>,
) -> Result<Routes, GatewayError> {
    if let Some(kube) = &options.kube {
        return reload::kube_routes(kube, options, previous);
    }
    let usable = crate::discovery::files::load_usable(
        &options.config_dir,
        &options.settings.translate_options(),
    )
    .map_err(|e| GatewayError::Routes(e.to_string()))?;
    let merged = crate::merge::merge(&usable.set);
    let mut table = RouteTable::build(&usable.set, &merged, &options.cluster)
        .map_err(|e| GatewayError::Routes(e.to_string()))?;
    apply_file_imports(&mut table, &merged, &options.settings);
    Ok(Routes {
        table,
        findings: usable.diagnostics,
    })
}

/// Gives a file setup's routes their import ports and remote pods'
/// addresses. A file setup records nothing, so they are computed: the same
/// files give the same ones as `strait imports` prints.
pub(crate) fn apply_file_imports(
    table: &mut RouteTable,
    merged: &crate::merge::MergedSet,
    settings: &GatewaySettings,
) {
    let pods = crate::imports::remote_pods(table, settings.dns.max_headless_endpoints);
    let observed = Observed::default();
    let inputs = crate::imports::PlanInputs {
        recorded: None,
        merged,
        observed: &observed,
        range: &settings.imports.port_range,
        released: &Default::default(),
        refused_families: &Default::default(),
        settling: &Default::default(),
        pods: &pods,
        // Only the allocation is used here: no slices are rendered.
        sources: &Default::default(),
        pod_ranges: Some(&settings.imports.pod_addresses),
        quota: settings.imports.namespace_quota.into(),
    };
    let allocation = crate::imports::allocate_ports(&inputs);
    table.set_import_ports(allocation.by_import_port());
    let addresses = crate::imports::file_addresses(&inputs);
    table.set_pod_addresses(&addresses.addresses);
}

impl Gateway {
    /// Loads routes and TLS material, then serves on `listeners`.
    pub async fn start(
        options: GatewayOptions,
        listeners: Listeners,
    ) -> Result<Self, GatewayError> {
        let Routes { table, findings } = load_routes(&options)?;
        let zone = Arc::new(options.settings.dns.zone()?);
        let tls = Arc::new(ReloadingTls::load(&options.tls_dir)?);
        let metrics = Arc::new(Metrics::new());
        metrics.set_route_sizes(table.services().count(), table.backend_count());
        let (addressed, unaddressed) = table.remote_pod_counts();
        metrics.set_remote_pods(addressed, unaddressed);
        let tuning = &options.settings.tuning;
        let dial = DialOptions {
            timeout: tuning.connect_timeout,
            source: options.dial_source,
        };
        let addresses = BoundAddresses {
            connect: local(&listeners.connect),
            tunnel: local(&listeners.tunnel),
            admin: local(&listeners.admin),
            cluster_set_ip: listeners.cluster_set_ip.iter().map(local).collect(),
            dns: listeners
                .dns
                .as_ref()
                .map(|dns| dns.local_addr().unwrap_or_else(|_| local(&dns.tcp))),
        };
        let quic_enabled = options.tunnel.transport != TransportMode::H2
            || options
                .tunnel
                .peer_transports
                .values()
                .any(|mode| *mode != TransportMode::H2);
        let quic = if quic_enabled {
            let bind = SocketAddr::new(
                options
                    .dial_source
                    .unwrap_or(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED)),
                0,
            );
            Some(QuicPool::new(
                bind,
                tls.clone(),
                options.tunnel.clone(),
                metrics.clone(),
            )?)
        } else {
            None
        };
        // The QUIC listener shares the tunnel listener's port number, on UDP.
        let quic_endpoint = if quic_enabled {
            let socket = crate::tunnel::quic::udp_socket(addresses.tunnel)?;
            let config = crate::tunnel::quic::server_config(&tls.current(), &options.tunnel)?;
            Some(
                quinn::Endpoint::new(
                    quinn::EndpointConfig::default(),
                    Some(config),
                    socket,
                    Arc::new(quinn::TokioRuntime),
                )
                .map_err(|source| GatewayError::Bind {
                    what: "tunnel (udp)",
                    address: addresses.tunnel,
                    source,
                })?,
            )
        } else {
            None
        };
        let mut own_listeners = vec![addresses.connect, addresses.tunnel, addresses.admin];
        // Import listeners bind where local clients reach the gateway (the
        // CONNECT listener), never by default where peers of other networks
        // do: an import port is as open as a CONNECT. The tunnel refuses
        // any import port on that address (`routing::inbound`).
        let import_address = options
            .settings
            .imports
            .address
            .unwrap_or_else(|| crate::proxy::imports::default_address(addresses.connect.ip()));
        own_listeners.push(SocketAddr::new(import_address, 0));
        own_listeners.extend(&addresses.cluster_set_ip);
        own_listeners.extend(addresses.dns);
        let admin_policies = options
            .settings
            .admin_policies()
            .map_err(|(field, message)| GatewayError::Settings { field, message })?;
        options
            .settings
            .health
            .check()
            .map_err(|(field, message)| GatewayError::Settings {
                field: field.to_owned(),
                message,
            })?;
        let (memory_limit, limit_from) = tuning.memory_limit();
        let memory = Arc::new(crate::net::memory::MemoryBudget::for_limit(memory_limit));
        tracing::info!(
            memory_limit,
            from = limit_from,
            buffer_budget = memory.budget(),
            "memory budget"
        );
        let state = Arc::new(GatewayState {
            chooser: Chooser::new(
                tuning.balancer,
                tuning.locality,
                table.viewer().clone(),
                table.network().clone(),
                OutlierPolicy::default(),
            )
            .with_locality_minimum(tuning.locality_minimum_healthy)
            .with_admin_policies(admin_policies),
            routes: ArcSwap::from_pointee(table),
            pool: TunnelPool::new(options.tunnel.clone(), tls.clone(), dial, metrics.clone()),
            quic,
            tls: tls.clone(),
            metrics: metrics.clone(),
            dial,
            idle_timeout: tuning.idle_timeout,
            stall_report: tuning.stall_report,
            dial_attempts: tuning.dial_attempts,
            tunnel: options.tunnel.clone(),
            inbound: crate::routing::inbound::InboundGuard {
                own_listeners,
                interface_addresses: interface_addresses(),
                denied_networks: options.tunnel.denied_networks.clone(),
                admit_own_cluster: options.tunnel.admit_own_cluster,
            },
            overrides: options.overrides.clone(),
            connections: TaskTracker::new(),
            route_updates: tokio::sync::Notify::new(),
            findings: std::sync::Mutex::new(Vec::new()),
            quiet: crate::logging::QuietLogs::default(),
            overload: crate::net::overload::Overload::for_process(
                tuning.descriptor_reserve,
                memory.clone(),
            ),
            sources: crate::state::ListenerSources::new(tuning.source_limits()),
            udp: crate::state::UdpFlows {
                idle_timeout: tuning.udp_idle_timeout,
                flows: crate::net::sources::SourceTable::new(crate::net::sources::SourceLimits {
                    per_source: tuning.max_udp_flows_per_source,
                    total: tuning.max_udp_flows,
                }),
                prefixes: crate::net::sources::SourceTable::new(
                    crate::net::sources::SourceLimits {
                        per_source: tuning.max_udp_flows_per_prefix,
                        total: tuning.max_udp_flows,
                    },
                ),
                answers: crate::net::datagram::AnswerRule {
                    per_request: tuning.udp_answers_per_request,
                    unconfirmed_timeout: tuning.udp_unconfirmed_timeout,
                },
            },
            handshakes: crate::state::Handshakes::new(options.tunnel.handshakes),
            // Each replica serves its own: it reads the local cluster for
            // its own routes already (docs/tunnel-protocol.md §10).
            feed: options.kube.as_ref().map(|_| {
                crate::feed::Publication::new(
                    crate::feed::Journal::new(
                        fastrand::u64(..),
                        crate::feed::DEFAULT_TOMBSTONES,
                        crate::feed::FeedLimits::default(),
                    ),
                    crate::feed::DEFAULT_STREAMS_PER_CLUSTER,
                )
            }),
            peer_budgets: Arc::new(crate::tunnel::limits::PeerBudgets::new(
                options.tunnel.peer_limits,
                memory.budget(),
            )),
            network_map: options
                .settings
                .network_map()
                .ok()
                .flatten()
                .unwrap_or_default()
                .into_iter()
                .map(|(cluster, network)| (cluster.to_string(), network.to_string()))
                .collect(),
            import_account: probe::account_of(options.kube.as_ref(), options.controller.as_deref()),
        });
        reload::report_findings(&state, findings, options.kube.is_none());

        let stop_accepting = CancellationToken::new();
        let stop_admin = CancellationToken::new();
        let ready = Arc::new(AtomicBool::new(false));
        let mut tasks = vec![
            tls.spawn_watcher(TLS_POLL_INTERVAL),
            reload::spawn(
                options.config_dir.clone(),
                options.clone(),
                state.clone(),
                tuning.reload_debounce,
                stop_admin.clone(),
            )?,
            tokio::spawn(crate::proxy::connect::serve(
                listeners.connect,
                state.clone(),
                stop_accepting.clone(),
            )),
            tokio::spawn(crate::ingress::h2::serve(
                listeners.tunnel,
                state.clone(),
                stop_accepting.clone(),
            )),
        ];
        if let Some(endpoint) = quic_endpoint.clone() {
            tasks.push(tokio::spawn(crate::ingress::quic::serve(
                endpoint,
                state.clone(),
                stop_accepting.clone(),
            )));
        }
        if options.settings.imports.listen {
            let mut imports = crate::proxy::imports::ImportListeners::new(
                import_address,
                state.clone(),
                stop_accepting.clone(),
            );
            // The first ports are open before the gateway says it is ready.
            imports.sync();
            tasks.push(imports.spawn());
        }
        for listener in listeners.cluster_set_ip {
            tasks.push(tokio::spawn(crate::proxy::vip::serve(
                listener,
                state.clone(),
                stop_accepting.clone(),
            )));
        }
        // DNS answers through the drain: the name of a service still
        // resolves for clients whose connections are finishing.
        if let Some(sockets) = listeners.dns {
            tasks.push(tokio::spawn(crate::dns::serve(
                sockets,
                state.clone(),
                zone.clone(),
                stop_admin.clone(),
            )));
        }
        tasks.push(tokio::spawn(housekeeping(
            state.clone(),
            stop_admin.clone(),
        )));
        if options.settings.health.enabled() {
            tasks.push(tokio::spawn(crate::proxy::health_check::run(
                state.clone(),
                options.settings.health,
                stop_admin.clone(),
            )));
        }
        let mut probes = None;
        if let Some(kube) = &options.kube {
            tasks.push(peers::follow(&state, kube, &stop_admin));
            let (task, asked) = probe::spawn(&state, kube, options.controller.clone(), &stop_admin);
            tasks.push(task);
            probes = Some(asked);
        }
        let routes_state = state.clone();
        let dns_state = state.clone();
        let dns_listening = addresses.dns;
        let admin = AdminState {
            metrics,
            ready: ready.clone(),
            routes_json: Arc::new(move |query| {
                let table = routes_state.routes.load();
                let mut ports = crate::routing::report::query(&table, query)?;
                let chooser = &routes_state.chooser;
                crate::routing::report::add_locality(
                    &mut ports,
                    &table,
                    chooser,
                    std::time::Instant::now(),
                );
                Ok(serde_json::to_value(ports).unwrap_or_default())
            }),
            clusters_json: reload::clusters_view(&options, state.clone()),
            imports_json: reload::imports_view(&options, state.clone()),
            status_json: status::status_view(&options, state.clone(), probes),
            dns_json: Arc::new(move |query| {
                let table = dns_state.routes.load();
                crate::dns::lookup(&table, &zone, dns_listening, query)
                    .map_err(crate::admin::QueryError::from)
            }),
        };
        let admin_stop = stop_admin.clone();
        let admin_listener = listeners.admin;
        tasks.push(tokio::spawn(async move {
            if let Err(error) = serve_admin(admin_listener, admin, async move {
                admin_stop.cancelled().await
            })
            .await
            {
                tracing::error!(%error, "admin listener failed");
            }
        }));
        ready.store(true, Ordering::Release);
        tracing::info!(
            cluster = %state.routes.load().viewer(),
            network = %state.routes.load().network(),
            connect = %addresses.connect,
            tunnel = %addresses.tunnel,
            admin = %addresses.admin,
            dns = ?addresses.dns,
            "gateway ready"
        );
        Ok(Self {
            state,
            addresses,
            ready,
            stop_accepting,
            stop_admin,
            tasks,
            quic_endpoint,
        })
    }

    pub fn addresses(&self) -> &BoundAddresses {
        &self.addresses
    }

    pub fn state(&self) -> &Arc<GatewayState> {
        &self.state
    }

    /// Stops accepting, waits up to `drain` for open connections to finish,
    /// then stops everything else.
    pub async fn shutdown(self, drain: Duration) {
        self.ready.store(false, Ordering::Release);
        self.stop_accepting.cancel();
        self.state.connections.close();
        let open = self.state.connections.len();
        if open > 0 {
            tracing::info!(open, ?drain, "draining connections");
        }
        if tokio::time::timeout(drain, self.state.connections.wait())
            .await
            .is_err()
        {
            tracing::warn!(
                open = self.state.connections.len(),
                "drain deadline passed; closing the remaining connections"
            );
        }
        self.stop_admin.cancel();
        for task in self.tasks {
            task.abort();
        }
        if let Some(endpoint) = self.quic_endpoint {
            endpoint.close(0u32.into(), b"shutting down");
            // Closed connections linger while they drain (a few round
            // trips); bounded, as the drain above is.
            let _ = tokio::time::timeout(QUIC_CLOSE_WAIT, endpoint.wait_idle()).await;
        }
    }
}

/// How long shutdown waits for closed QUIC connections to drain.
const QUIC_CLOSE_WAIT: Duration = Duration::from_secs(2);

fn local(listener: &TcpListener) -> SocketAddr {
    listener
        .local_addr()
        .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)))
}

/// How often the descriptor count is sampled: often enough that a flood
/// meets the reserve within a fraction of a second.
const DESCRIPTOR_SAMPLE_INTERVAL: Duration = Duration::from_millis(250);

/// Samples the descriptor and memory budgets and writes the quiet logs' summaries.
async fn housekeeping(state: Arc<GatewayState>, stop: CancellationToken) {
    let mut sample = tokio::time::interval(DESCRIPTOR_SAMPLE_INTERVAL);
    sample.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut summaries = tokio::time::interval(crate::logging::DEFAULT_INTERVAL);
    summaries.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = sample.tick() => {
                let open = state.overload.sample();
                state.metrics.set_descriptors(open, state.overload.limit());
                let memory = state.overload.memory();
                let resident = memory.sample();
                state.metrics.set_memory(resident, memory.limit(), memory.held());
                // The material in use, whichever reload swapped it in.
                let material = state.tls.current();
                state.metrics.set_cert_expiry(material.not_after(), material.ca_not_after());
            }
            _ = summaries.tick() => state.quiet.flush(),
            () = stop.cancelled() => return,
        }
    }
}

/// The addresses of the host's interfaces, where a wildcard-bound listener
/// also answers; empty when they cannot be listed (the loopback and
/// unspecified checks still apply).
fn interface_addresses() -> Vec<IpAddr> {
    let Ok(interfaces) = nix::ifaddrs::getifaddrs() else {
        return Vec::new();
    };
    let mut addresses: Vec<IpAddr> = interfaces
        .filter_map(|interface| {
            let address = interface.address?;
            address
                .as_sockaddr_in()
                .map(|v4| IpAddr::V4(v4.ip()))
                .or_else(|| address.as_sockaddr_in6().map(|v6| IpAddr::V6(v6.ip())))
        })
        .collect();
    addresses.sort_unstable();
    addresses.dedup();
    addresses
}
