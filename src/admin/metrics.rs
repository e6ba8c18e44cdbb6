//! The gateway's Prometheus metrics: one [`Metrics`] owns a prometheus-client
//! [`Registry`] (prefix `strait`) and every metric family.
//!
//! Label sets are small and bounded: every label is an enum except `peer`,
//! which names a gateway address and so is bounded by the size of the cluster
//! set. The data plane never touches a family on the hot path: it asks for a
//! [`ConnectionMetrics`] (or [`PoolMetrics`]) once per connection, which holds
//! the already-resolved counters, and updates those.

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};

/// Declares a label-value enum with its snake_case wire names.
macro_rules! label_enum {
    ($(#[$meta:meta])* $name:ident { $($(#[$vmeta:meta])* $variant:ident => $text:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name {
            $($(#[$vmeta])* $variant),+
        }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The label value as it appears in the exposition.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text),+
                }
            }
        }

        impl EncodeLabelValue for $name {
            fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> Result<(), std::fmt::Error> {
                std::fmt::Write::write_str(encoder, self.as_str())
            }
        }
    };
}

mod certs;
mod handles;
mod health;
mod limits;
mod work;
pub use handles::{ConnectionMetrics, PoolMetrics};
pub use health::CheckResult;
pub use limits::{Limit, Listener};
pub use work::Stage;

label_enum! {
    /// How a connection reaches its backend, as seen by this gateway.
    RoutePath {
        /// This gateway dials the backend itself.
        Direct => "direct",
        /// This gateway carries the connection to a peer gateway.
        Tunnel => "tunnel",
        /// A peer's tunnelled connection, served by this gateway's tunnel server.
        Inbound => "inbound",
    }
}

label_enum! {
    /// The tunnel transport a connection uses (`none` for direct connections).
    Transport {
        None => "none",
        H2 => "h2",
        Quic => "quic",
    }
}

label_enum! {
    /// How a connection ended.
    ClosedResult {
        Ok => "ok",
        DialError => "dial_error",
        Refused => "refused",
        Timeout => "timeout",
        Error => "error",
    }
}

label_enum! {
    /// Which way bytes flowed.
    Direction {
        ClientToBackend => "client_to_backend",
        BackendToClient => "backend_to_client",
    }
}

label_enum! {
    /// Why the tunnel server refused a request.
    RefusedReason {
        Malformed => "malformed",
        UnknownCaller => "unknown_caller",
        OwnCluster => "own_cluster",
        NotAdmitted => "not_admitted",
        Forbidden => "forbidden",
        UnknownService => "unknown_service",
        NoBackend => "no_backend",
        OverLimit => "over_limit",
        Unauthenticated => "unauthenticated",
    }
}

label_enum! {
    /// What was reloaded.
    ReloadKind {
        Routes => "routes",
        Tls => "tls",
    }
}

label_enum! {
    /// Whether a reload succeeded.
    ReloadResult {
        Ok => "ok",
        Error => "error",
    }
}

label_enum! {
    /// Whether a ServiceExport status write succeeded.
    WriteResult {
        Ok => "ok",
        Error => "error",
    }
}

label_enum! {
    /// The type a DNS query asked for (`none` when it had no valid question).
    DnsQueryType {
        A => "a",
        Aaaa => "aaaa",
        Srv => "srv",
        Soa => "soa",
        Ns => "ns",
        Ptr => "ptr",
        Any => "any",
        Other => "other",
        None => "none",
    }
}

label_enum! {
    /// The response code of a DNS answer.
    DnsRcode {
        NoError => "noerror",
        NxDomain => "nxdomain",
        Refused => "refused",
        FormErr => "formerr",
        NotImp => "notimp",
        ServFail => "servfail",
        BadVers => "badvers",
    }
}

label_enum! {
    /// The transport a DNS query came over.
    DnsTransport {
        Udp => "udp",
        Tcp => "tcp",
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct DnsQueryLabels {
    r#type: DnsQueryType,
    rcode: DnsRcode,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct DnsTransportLabels {
    transport: DnsTransport,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct InvalidLabels {
    cluster: String,
    kind: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct WriteLabels {
    result: WriteResult,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct OpenedLabels {
    path: RoutePath,
    transport: Transport,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct PathLabels {
    path: RoutePath,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ClosedLabels {
    path: RoutePath,
    result: ClosedResult,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct BytesLabels {
    path: RoutePath,
    direction: Direction,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct PeerLabels {
    peer: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ClusterLabels {
    cluster: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct RefusedLabels {
    reason: RefusedReason,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ReloadLabels {
    kind: ReloadKind,
    result: ReloadResult,
}

/// Why the metrics could not be rendered.
#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    #[error("encoding the metrics failed")]
    Encode(#[from] std::fmt::Error),
}

/// Upper bounds of the dial-duration buckets, in seconds: 0.5 ms doubling up
/// to 8.192 s, then 10 s.
fn dial_buckets() -> impl Iterator<Item = f64> {
    exponential_buckets(0.0005, 2.0, 15).chain(std::iter::once(10.0))
}

fn dial_histogram() -> Histogram {
    Histogram::new(dial_buckets())
}

type DialFamily = Family<PathLabels, Histogram, fn() -> Histogram>;

/// Every metric of the gateway and the registry that exposes them.
pub struct Metrics {
    registry: Registry,
    connections_opened: Family<OpenedLabels, Counter>,
    connections_active: Family<PathLabels, Gauge>,
    connections_closed: Family<ClosedLabels, Counter>,
    connections_stalled: Family<PathLabels, Gauge>,
    connection_stalls: Family<PathLabels, Counter>,
    bytes: Family<BytesLabels, Counter>,
    dial_duration: DialFamily,
    tunnel_pool_connections: Family<PeerLabels, Gauge>,
    tunnel_pool_streams: Family<PeerLabels, Gauge>,
    tunnel_requests_refused: Family<RefusedLabels, Counter>,
    reloads: Family<ReloadLabels, Counter>,
    routes_services: Gauge,
    routes_backends: Gauge,
    cluster_synced: Family<ClusterLabels, Gauge>,
    cluster_stale: Family<ClusterLabels, Gauge>,
    cluster_stale_transitions: Family<ClusterLabels, Counter>,
    cluster_watch_errors: Family<ClusterLabels, Counter>,
    export_status_leader: Gauge,
    export_status_writes: Family<WriteLabels, Counter>,
    import_listeners: Gauge,
    import_listener_failures: Counter,
    imports_managed: Gauge,
    imports_foreign: Gauge,
    import_ports_exhausted: Gauge,
    import_writes: Family<WriteLabels, Counter>,
    remote_pods_addressed: Gauge,
    remote_pods_unaddressed: Gauge,
    invalid_objects: Family<InvalidLabels, Gauge>,
    dns_queries: Family<DnsQueryLabels, Counter>,
    dns_truncated: Family<DnsTransportLabels, Counter>,
    dns_tcp_refused: Counter,
    limits: limits::LimitMetrics,
    work: work::WorkMetrics,
    certs: certs::CertMetrics,
    health: health::HealthMetrics,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Metrics {
    /// Creates every family and registers it under the `strait` prefix.
    pub fn new() -> Self {
        let mut metrics = Self {
            registry: Registry::with_prefix("strait"),
            connections_opened: Family::default(),
            connections_active: Family::default(),
            connections_closed: Family::default(),
            connections_stalled: Family::default(),
            connection_stalls: Family::default(),
            bytes: Family::default(),
            dial_duration: Family::new_with_constructor(dial_histogram as fn() -> Histogram),
            tunnel_pool_connections: Family::default(),
            tunnel_pool_streams: Family::default(),
            tunnel_requests_refused: Family::default(),
            reloads: Family::default(),
            routes_services: Gauge::default(),
            routes_backends: Gauge::default(),
            cluster_synced: Family::default(),
            cluster_stale: Family::default(),
            cluster_stale_transitions: Family::default(),
            cluster_watch_errors: Family::default(),
            export_status_leader: Gauge::default(),
            export_status_writes: Family::default(),
            import_listeners: Gauge::default(),
            import_listener_failures: Counter::default(),
            imports_managed: Gauge::default(),
            imports_foreign: Gauge::default(),
            import_ports_exhausted: Gauge::default(),
            import_writes: Family::default(),
            remote_pods_addressed: Gauge::default(),
            remote_pods_unaddressed: Gauge::default(),
            invalid_objects: Family::default(),
            dns_queries: Family::default(),
            dns_truncated: Family::default(),
            dns_tcp_refused: Counter::default(),
            limits: limits::LimitMetrics::default(),
            work: work::WorkMetrics::default(),
            certs: certs::CertMetrics::default(),
            health: health::HealthMetrics::default(),
        };
        metrics.limits.register(&mut metrics.registry);
        metrics.work.register(&mut metrics.registry);
        metrics.certs.register(&mut metrics.registry);
        metrics.health.register(&mut metrics.registry);
        metrics.registry.register(
            "connections_opened",
            "Connections accepted, by path and tunnel transport",
            metrics.connections_opened.clone(),
        );
        metrics.registry.register(
            "connections_active",
            "Connections currently open, by path",
            metrics.connections_active.clone(),
        );
        metrics.registry.register(
            "connections_closed",
            "Connections ended, by path and result",
            metrics.connections_closed.clone(),
        );
        metrics.registry.register(
            "connections_stalled",
            "Connections now holding bytes one side does not take, with none written for tuning.stallReport, by path",
            metrics.connections_stalled.clone(),
        );
        metrics.registry.register(
            "connection_stalls",
            "Times a connection held bytes one side did not take, with none written for tuning.stallReport, by path",
            metrics.connection_stalls.clone(),
        );
        metrics.registry.register(
            "bytes",
            "Bytes relayed, by path and direction (counted when a connection ends)",
            metrics.bytes.clone(),
        );
        metrics.registry.register_with_unit(
            "dial_duration",
            "Time to reach the backend (direct dial or tunnel stream set-up), by path",
            Unit::Seconds,
            metrics.dial_duration.clone(),
        );
        metrics.registry.register(
            "tunnel_pool_connections",
            "Pooled tunnel connections, by peer gateway",
            metrics.tunnel_pool_connections.clone(),
        );
        metrics.registry.register(
            "tunnel_pool_streams",
            "Open streams on pooled tunnel connections, by peer gateway",
            metrics.tunnel_pool_streams.clone(),
        );
        metrics.registry.register(
            "tunnel_requests_refused",
            "Tunnel requests refused by this gateway's tunnel server, by reason",
            metrics.tunnel_requests_refused.clone(),
        );
        metrics.registry.register(
            "reloads",
            "Reloads of routes or TLS material, by kind and result",
            metrics.reloads.clone(),
        );
        metrics.registry.register(
            "routes_services",
            "Multi-cluster services in the current route table",
            metrics.routes_services.clone(),
        );
        metrics.registry.register(
            "routes_backends",
            "Backends in the current route table",
            metrics.routes_backends.clone(),
        );
        metrics.registry.register(
            "cluster_synced",
            "1 while the cluster's API objects are fully listed and watched (Kubernetes source)",
            metrics.cluster_synced.clone(),
        );
        metrics.registry.register(
            "cluster_stale",
            "1 while the cluster's API has been unreachable past staleAfter and its backends are dropped",
            metrics.cluster_stale.clone(),
        );
        metrics.registry.register(
            "cluster_went_stale",
            "Times the cluster went stale (its backends dropped after staleAfter)",
            metrics.cluster_stale_transitions.clone(),
        );
        metrics.registry.register(
            "cluster_watch_errors",
            "Failed list and watch requests to the cluster's API, including those ridden out without a relist",
            metrics.cluster_watch_errors.clone(),
        );
        metrics.registry.register(
            "export_status_leader",
            "1 while this replica holds the export status Lease and writes ServiceExport status",
            metrics.export_status_leader.clone(),
        );
        metrics.registry.register(
            "export_status_writes",
            "ServiceExport status writes (Valid and Conflict conditions), by result",
            metrics.export_status_writes.clone(),
        );
        metrics.registry.register(
            "import_listeners",
            "Import ports this gateway listens on (one per TCP port of each ClusterSetIP import)",
            metrics.import_listeners.clone(),
        );
        metrics.registry.register(
            "import_listener_failures",
            "Import ports that could not be bound (in use by another process, say)",
            metrics.import_listener_failures.clone(),
        );
        metrics.registry.register(
            "imports_managed",
            "ServiceImports this cluster should hold that Strait manages",
            metrics.imports_managed.clone(),
        );
        metrics.registry.register(
            "imports_foreign",
            "ServiceImports of another controller, left alone",
            metrics.imports_foreign.clone(),
        );
        metrics.registry.register(
            "import_ports_exhausted",
            "Service ports (and remote headless pods' ports) without an import port because imports.portRange is full",
            metrics.import_ports_exhausted.clone(),
        );
        metrics.registry.register(
            "invalid_objects",
            "Invalid objects of the configuration in use, each left out on its own (the rest of the cluster set is used), by cluster and kind",
            metrics.invalid_objects.clone(),
        );
        metrics.registry.register(
            "headless_remote_pods_addressed",
            "Ready pods of headless services on other networks that have an address here (answered in DNS)",
            metrics.remote_pods_addressed.clone(),
        );
        metrics.registry.register(
            "headless_remote_pods_unaddressed",
            "Ready pods of headless services on other networks without an address here (not answered: dns.maxHeadlessEndpoints, imports.podAddresses, or a ClusterIP not allocated yet)",
            metrics.remote_pods_unaddressed.clone(),
        );
        metrics.registry.register(
            "import_writes",
            "Writes of the import reconciler (applies and deletes), by result",
            metrics.import_writes.clone(),
        );
        metrics.registry.register(
            "dns_queries",
            "DNS queries answered by the clusterset.local responder, by query type and response code",
            metrics.dns_queries.clone(),
        );
        metrics.registry.register(
            "dns_truncated",
            "DNS answers cut to fit the query's size limit (TC set), by transport",
            metrics.dns_truncated.clone(),
        );
        metrics.registry.register(
            "dns_tcp_refused",
            "DNS TCP connections closed for the connection limits: the idlest of all, or of one address, closed for a newcomer",
            metrics.dns_tcp_refused.clone(),
        );
        metrics
    }

    /// Counts one DNS answer sent, and whether it was cut to fit `truncated`'s transport.
    pub fn dns_query(&self, qtype: DnsQueryType, rcode: DnsRcode, truncated: Option<DnsTransport>) {
        self.dns_queries
            .get_or_create(&DnsQueryLabels {
                r#type: qtype,
                rcode,
            })
            .inc();
        if let Some(transport) = truncated {
            self.dns_truncated
                .get_or_create(&DnsTransportLabels { transport })
                .inc();
        }
    }

    /// Counts one DNS TCP connection refused for the connection limit.
    /// Counts a UDP answer sent truncated because its source network was
    /// over its response rate.
    pub fn dns_slipped(&self) {
        self.dns_truncated
            .get_or_create(&DnsTransportLabels {
                transport: DnsTransport::Udp,
            })
            .inc();
    }

    pub fn dns_tcp_refused(&self) {
        self.dns_tcp_refused.inc();
    }

    /// Records the import listeners open now and counts failed binds.
    pub fn set_import_listeners(&self, open: usize, failed: u64) {
        self.import_listeners
            .set(i64::try_from(open).unwrap_or(i64::MAX));
        self.import_listener_failures.inc_by(failed);
    }

    /// Records the import plan: imports managed, foreign imports left
    /// alone, and service ports without an import port.
    pub fn set_import_plan(&self, managed: usize, foreign: usize, exhausted: usize) {
        let gauge = |value: usize| i64::try_from(value).unwrap_or(i64::MAX);
        self.imports_managed.set(gauge(managed));
        self.imports_foreign.set(gauge(foreign));
        self.import_ports_exhausted.set(gauge(exhausted));
    }

    /// Records a running total of control-plane work
    /// (`strait_control_plane_work_total{stage}`).
    pub fn set_work_total(&self, stage: Stage, total: u64) {
        self.work.set_total(stage, total);
    }

    /// Records the import reconciler's queue and time: see
    /// [`work::WorkMetrics::set_import_queue`].
    pub fn set_import_queue(
        &self,
        queued: usize,
        unsettled: usize,
        write_seconds: f64,
        pass_seconds: f64,
    ) {
        self.work
            .set_import_queue(queued, unsettled, write_seconds, pass_seconds);
    }

    /// Records the import reconciler's successful and failed writes in total.
    pub fn set_import_writes(&self, writes: u64, failed_writes: u64) {
        for (result, total) in [
            (WriteResult::Ok, writes),
            (WriteResult::Error, failed_writes),
        ] {
            let counter = self.import_writes.get_or_create(&WriteLabels { result });
            let counted = counter.get();
            if total > counted {
                counter.inc_by(total - counted);
            }
        }
    }

    /// Counts a connection (or one attempt to reach a backend) as opened and
    /// active, and resolves the handles it needs. Call once per connection;
    /// end it with [`ConnectionMetrics::closed`].
    pub fn connection(&self, path: RoutePath, transport: Transport) -> ConnectionMetrics {
        let bytes = |direction| {
            self.bytes
                .get_or_create_owned(&BytesLabels { path, direction })
        };
        self.connections_opened
            .get_or_create(&OpenedLabels { path, transport })
            .inc();
        let active = self
            .connections_active
            .get_or_create_owned(&PathLabels { path });
        active.inc();
        ConnectionMetrics {
            path,
            active,
            dial: self.dial_duration.get_or_create_owned(&PathLabels { path }),
            bytes_up: bytes(Direction::ClientToBackend),
            bytes_down: bytes(Direction::BackendToClient),
            closed: self.connections_closed.clone(),
            stalled: self.connections_stalled.clone(),
            stalls: self.connection_stalls.clone(),
            open: true,
            stalling: false,
        }
    }

    /// Counts one request refused by the tunnel server.
    pub fn refused(&self, reason: RefusedReason) {
        self.tunnel_requests_refused
            .get_or_create(&RefusedLabels { reason })
            .inc();
    }

    /// Counts one reload attempt.
    pub fn reload(&self, kind: ReloadKind, result: ReloadResult) {
        self.reloads
            .get_or_create(&ReloadLabels { kind, result })
            .inc();
    }

    /// Records the size of the route table now in use.
    pub fn set_route_sizes(&self, services: usize, backends: usize) {
        self.routes_services
            .set(i64::try_from(services).unwrap_or(i64::MAX));
        self.routes_backends
            .set(i64::try_from(backends).unwrap_or(i64::MAX));
    }

    /// Records the invalid objects left out of the configuration in use, by
    /// (cluster, kind); label sets no longer invalid go.
    pub fn set_invalid_objects(
        &self,
        counts: &std::collections::BTreeMap<(String, String), usize>,
    ) {
        self.invalid_objects.clear();
        for ((cluster, kind), count) in counts {
            self.invalid_objects
                .get_or_create(&InvalidLabels {
                    cluster: cluster.clone(),
                    kind: kind.clone(),
                })
                .set(i64::try_from(*count).unwrap_or(i64::MAX));
        }
    }

    /// Records how many remote headless pods have an address here and how
    /// many do not.
    pub fn set_remote_pods(&self, addressed: usize, unaddressed: usize) {
        let gauge = |value: usize| i64::try_from(value).unwrap_or(i64::MAX);
        self.remote_pods_addressed.set(gauge(addressed));
        self.remote_pods_unaddressed.set(gauge(unaddressed));
    }

    /// Records one cluster's sync state as the Kubernetes source reports it:
    /// synced, stale, how often it went stale and how many of its list and
    /// watch requests failed, in total.
    pub fn set_cluster_sync(
        &self,
        cluster: &str,
        synced: bool,
        stale: bool,
        stale_count: u64,
        watch_errors: u64,
    ) {
        let labels = ClusterLabels {
            cluster: cluster.to_owned(),
        };
        self.cluster_synced
            .get_or_create(&labels)
            .set(i64::from(synced));
        self.cluster_stale
            .get_or_create(&labels)
            .set(i64::from(stale));
        let transitions = self.cluster_stale_transitions.get_or_create(&labels);
        let counted = transitions.get();
        if stale_count > counted {
            transitions.inc_by(stale_count - counted);
        }
        let errors = self.cluster_watch_errors.get_or_create(&labels);
        let counted = errors.get();
        if watch_errors > counted {
            errors.inc_by(watch_errors - counted);
        }
    }

    /// Records what the export status writer reports: whether this replica
    /// leads, and its successful and failed writes in total.
    pub fn set_export_status(&self, leader: bool, writes: u64, failed_writes: u64) {
        self.export_status_leader.set(i64::from(leader));
        for (result, total) in [
            (WriteResult::Ok, writes),
            (WriteResult::Error, failed_writes),
        ] {
            let counter = self
                .export_status_writes
                .get_or_create(&WriteLabels { result });
            let counted = counter.get();
            if total > counted {
                counter.inc_by(total - counted);
            }
        }
    }

    /// Forgets a cluster that left the cluster set.
    pub fn remove_cluster(&self, cluster: &str) {
        let labels = ClusterLabels {
            cluster: cluster.to_owned(),
        };
        self.cluster_synced.remove(&labels);
        self.cluster_stale.remove(&labels);
        self.cluster_stale_transitions.remove(&labels);
        self.cluster_watch_errors.remove(&labels);
    }

    /// When the gateway's leaf certificate and the first of its CAs expire.
    /// Counts one active health check of a backend.
    pub fn health_check(&self, result: CheckResult) {
        self.health.checked(result);
    }

    /// How many backends active health checks hold out of rotation now.
    pub fn set_health_checks_down(&self, backends: usize) {
        self.health.set_down(backends);
    }

    pub fn set_cert_expiry(&self, leaf: std::time::SystemTime, ca: Option<std::time::SystemTime>) {
        self.certs.set(leaf, ca);
    }

    /// Resolves the pool gauges of one peer gateway. Call once per peer.
    pub fn pool(&self, peer: &str) -> PoolMetrics {
        let labels = PeerLabels {
            peer: peer.to_owned(),
        };
        PoolMetrics {
            connections: self.tunnel_pool_connections.get_or_create_owned(&labels),
            streams: self.tunnel_pool_streams.get_or_create_owned(&labels),
        }
    }

    /// Renders every metric in the OpenMetrics text format.
    pub fn try_encode(&self) -> Result<String, MetricsError> {
        let mut out = String::with_capacity(8 * 1024);
        prometheus_client::encoding::text::encode(&mut out, &self.registry)?;
        Ok(out)
    }

    /// Renders every metric in the OpenMetrics text format. Encoding into a
    /// `String` only fails if a label encoder fails, which ours never do; if it
    /// happens anyway the failure is logged and a lone `# EOF` is returned.
    pub fn encode(&self) -> String {
        self.try_encode().unwrap_or_else(|error| {
            tracing::error!(%error, "encoding metrics failed");
            "# EOF\n".to_owned()
        })
    }
}

#[cfg(test)]
mod tests;
