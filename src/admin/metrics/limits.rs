//! The metrics of the tunnel server's limits: what a peer or the gateway's
//! own descriptor budget cut short, so an operator sees a limit at work
//! rather than guessing from refusals.

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::Transport;

label_enum! {
    /// Which limit ended a connection or refused new work.
    Limit {
        /// Control frames over their rate (`tunnel.maxControlFramesPerSecond`).
        ControlFrames => "control_frames",
        /// A tunnel stream whose peer stopped reading (`tunnel.streamStallTimeout`).
        StalledStream => "stalled_stream",
        /// Descriptors near the process limit (`tuning.descriptorReserve`).
        Descriptors => "descriptors",
        /// Buffers holding most of the memory budget (`tuning.memoryLimit`),
        /// or a connection or tunnel stream that began holding bytes past
        /// it (or past its peer's, `tunnel.maxBufferedBytesPerPeer`).
        Memory => "memory",
        /// A source address at its cap on one listener
        /// (`tuning.maxConnectionsPerSource`).
        PerSource => "per_source",
        /// A listener at its cap, refusing its heaviest sources
        /// (`tuning.maxConnectionsPerListener`).
        ListenerConnections => "listener_connections",
        /// A listener holding its share of the descriptors left for new
        /// work, while another may still need them.
        ListenerShare => "listener_share",
        /// A source address with its cap of handshakes in flight
        /// (`tunnel.maxHandshakesPerSource`).
        HandshakesPerSource => "handshakes_per_source",
        /// The oldest handshake in flight, closed for a newcomer at
        /// `tunnel.maxHandshakes`.
        HandshakeShed => "handshake_shed",
        /// A QUIC client sent a Retry to prove its address (`tunnel.quicRetry`).
        QuicRetry => "quic_retry",
        /// A peer connection ended: its certificate is no longer trusted
        /// (revoked, or its CA removed).
        Revoked => "revoked",
        /// A peer connection ended: its certificate expired.
        CertificateExpired => "certificate_expired",
        /// A peer connection ended at `tunnel.maxConnectionAge`.
        MaxConnectionAge => "max_connection_age",
        /// A new UDP flow of a source at `tuning.maxUdpFlowsPerSource`;
        /// its datagram is dropped.
        UdpFlowsPerSource => "udp_flows_per_source",
        /// A new UDP flow while the gateway holds `tuning.maxUdpFlows`,
        /// refusing its heaviest sources; its datagram is dropped.
        UdpFlows => "udp_flows",
        /// A datagram dropped because its flow had a full queue (its
        /// upstream not yet open, or slower than the client).
        UdpQueue => "udp_queue",
        /// A new UDP flow while its source's prefix holds
        /// `tuning.maxUdpFlowsPerPrefix`; its datagram is dropped.
        UdpFlowsPerPrefix => "udp_flows_per_prefix",
        /// An answer dropped: its flow's client had asked for no more
        /// (`tuning.udpAnswersPerRequest`).
        UdpAnswers => "udp_answers",
    }
}

label_enum! {
    /// A listener, for accept errors.
    Listener {
        Tunnel => "tunnel",
        Connect => "connect",
        ClusterSetIp => "cluster_set_ip",
        Import => "import",
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct TransportLabels {
    transport: Transport,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct LimitLabels {
    limit: Limit,
    transport: Transport,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ListenerLabels {
    listener: Listener,
}

/// The families; registered by [`super::Metrics::new`].
#[derive(Default)]
pub(super) struct LimitMetrics {
    streams_cancelled: Family<TransportLabels, Counter>,
    limited: Family<LimitLabels, Counter>,
    accept_errors: Family<ListenerLabels, Counter>,
    open_descriptors: Gauge,
    descriptor_limit: Gauge,
    resident_memory: Gauge,
    memory_limit: Gauge,
    buffers_charged: Gauge,
}

impl LimitMetrics {
    pub(super) fn register(&self, registry: &mut Registry) {
        registry.register(
            "tunnel_streams_cancelled",
            "Tunnel streams the peer reset while their backend was being dialled (the dial is cancelled), by transport",
            self.streams_cancelled.clone(),
        );
        registry.register(
            "limited",
            "Connections ended or new work refused by a limit, by limit and transport (none: not a tunnel)",
            self.limited.clone(),
        );
        registry.register(
            "accept_errors",
            "Failed accepts (out of descriptors, say), by listener; the listener backs off",
            self.accept_errors.clone(),
        );
        registry.register(
            "open_descriptors",
            "File descriptors the process has open, as last sampled",
            self.open_descriptors.clone(),
        );
        registry.register(
            "descriptor_limit",
            "The process's descriptor limit (RLIMIT_NOFILE)",
            self.descriptor_limit.clone(),
        );
        registry.register(
            "resident_memory_bytes",
            "The process's resident memory, as last sampled",
            self.resident_memory.clone(),
        );
        registry.register(
            "memory_limit_bytes",
            "The memory limit the budget is taken from (tuning.memoryLimit, the cgroup's memory.max, or 2 GiB)",
            self.memory_limit.clone(),
        );
        registry.register(
            "buffers_charged_bytes",
            "The most the connections holding bytes may hold, as charged to the memory budget (half the limit)",
            self.buffers_charged.clone(),
        );
    }
}

impl super::Metrics {
    /// Counts a tunnel stream reset by its peer during the backend dial.
    pub fn stream_cancelled(&self, transport: Transport) {
        self.limits
            .streams_cancelled
            .get_or_create(&TransportLabels { transport })
            .inc();
    }

    /// Counts a connection ended, or work refused, by `limit`.
    pub fn limited(&self, limit: Limit, transport: Transport) {
        self.limited_by(limit, transport, 1);
    }

    /// Counts `count` things `limit` cut short at once.
    pub fn limited_by(&self, limit: Limit, transport: Transport, count: u64) {
        self.limits
            .limited
            .get_or_create(&LimitLabels { limit, transport })
            .inc_by(count);
    }

    /// Counts a failed accept on `listener`.
    pub fn accept_error(&self, listener: Listener) {
        self.limits
            .accept_errors
            .get_or_create(&ListenerLabels { listener })
            .inc();
    }

    /// Records the sampled descriptor count and the limit.
    pub fn set_descriptors(&self, open: u64, limit: u64) {
        let gauge = |value: u64| i64::try_from(value).unwrap_or(i64::MAX);
        self.limits.open_descriptors.set(gauge(open));
        self.limits.descriptor_limit.set(gauge(limit));
    }

    /// Records the last memory sample.
    pub fn set_memory(&self, resident: u64, limit: u64, charged: u64) {
        let gauge = |value: u64| i64::try_from(value).unwrap_or(i64::MAX);
        self.limits.resident_memory.set(gauge(resident));
        self.limits.memory_limit.set(gauge(limit));
        self.limits.buffers_charged.set(gauge(charged));
    }
}
