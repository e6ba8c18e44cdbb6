//! The `tunnel:` section of `gateway.yaml`: which transport carries
//! tunnelled connections, per peer when needed.

use std::collections::HashMap;
use std::time::Duration;

use serde::Deserialize;

use crate::tunnel::{TransportMode, TunnelSettings};

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TunnelConfig {
    /// `auto` (QUIC, falling back to HTTP/2), `h2` or `quic`.
    #[serde(default)]
    pub transport: TransportMode,
    /// Per peer gateway, keyed `host:port` as the gateway Service names it.
    #[serde(default)]
    pub peers: HashMap<String, TransportMode>,
    /// How long a QUIC handshake may take before `auto` uses HTTP/2.
    #[serde(default = "default_quic_connect_timeout", with = "humantime_serde")]
    pub quic_connect_timeout: Duration,
    /// How long `auto` stays on HTTP/2 with a peer whose QUIC failed.
    #[serde(default = "default_quic_retry_after", with = "humantime_serde")]
    pub quic_retry_after: Duration,
    /// Serve tunnel callers that present this gateway's own cluster. Off:
    /// a gateway never tunnels to its own network, so such a caller holds
    /// a copy of this cluster's key.
    #[serde(default)]
    pub admit_own_cluster: bool,
    /// Networks the tunnel server never dials for a peer, whatever endpoint
    /// lists them: the cluster's service CIDRs and its nodes' addresses.
    #[serde(default)]
    pub denied_networks: Vec<ipnet::IpNet>,
    /// Streams one caller cluster may have open on this gateway's tunnel
    /// server, over all its connections and both transports.
    #[serde(default = "default_max_streams_per_peer")]
    pub max_streams_per_peer: usize,
    /// Backend dials one caller cluster may have in flight.
    #[serde(default = "default_max_pending_dials_per_peer")]
    pub max_pending_dials_per_peer: usize,
    /// Bytes one caller cluster's streams may hold (`64Mi`); `None`: half
    /// of the memory budget.
    #[serde(default)]
    pub max_buffered_bytes_per_peer: Option<bytesize::ByteSize>,
    /// Control frames (PING, SETTINGS, WINDOW_UPDATE, PRIORITY,
    /// RST_STREAM; QUIC's equivalents) a peer's connection may send per
    /// second once its burst is spent; past it the connection is closed.
    #[serde(default = "default_control_frames_per_second")]
    pub max_control_frames_per_second: u32,
    #[serde(default = "default_control_frame_burst")]
    pub control_frame_burst: u32,
    /// How long an inbound tunnel stream may hold bytes its peer does not
    /// read (a zero flow-control window) before it is closed.
    #[serde(default = "default_stream_stall_timeout", with = "humantime_serde")]
    pub stream_stall_timeout: Duration,
    /// Handshakes in flight on each transport of the tunnel port; past it
    /// the oldest is shed for a newcomer.
    #[serde(default = "default_max_handshakes")]
    pub max_handshakes: usize,
    /// Handshakes in flight from one source address; past it a newcomer
    /// is refused.
    #[serde(default = "default_max_handshakes_per_source")]
    pub max_handshakes_per_source: usize,
    /// `auto` (a QUIC Retry once handshakes pile up) or `always`.
    #[serde(default)]
    pub quic_retry: crate::tunnel::limits::QuicRetry,
    /// How long a peer's connection may live (less up to a tenth at random).
    #[serde(default = "default_max_connection_age", with = "humantime_serde")]
    pub max_connection_age: Duration,
    /// How long the open streams of a connection being ended may run.
    #[serde(default = "default_close_grace", with = "humantime_serde")]
    pub close_grace: Duration,
}

fn default_max_connection_age() -> Duration {
    TunnelSettings::default().max_connection_age
}

fn default_close_grace() -> Duration {
    TunnelSettings::default().close_grace
}

fn default_max_handshakes() -> usize {
    crate::tunnel::limits::HandshakeLimits::default().max
}

fn default_max_handshakes_per_source() -> usize {
    crate::tunnel::limits::HandshakeLimits::default().per_source
}

fn default_stream_stall_timeout() -> Duration {
    TunnelSettings::default().stream_stall_timeout
}

fn default_control_frames_per_second() -> u32 {
    crate::tunnel::frames::ControlFrameLimit::default().per_second
}

fn default_control_frame_burst() -> u32 {
    crate::tunnel::frames::ControlFrameLimit::default().burst
}

fn default_max_streams_per_peer() -> usize {
    crate::tunnel::limits::PeerLimits::default().max_streams
}

fn default_max_pending_dials_per_peer() -> usize {
    crate::tunnel::limits::PeerLimits::default().max_pending_dials
}

fn default_quic_connect_timeout() -> Duration {
    TunnelSettings::default().quic_connect_timeout
}

fn default_quic_retry_after() -> Duration {
    TunnelSettings::default().quic_retry_after
}

impl Default for TunnelConfig {
    fn default() -> Self {
        Self {
            transport: TransportMode::default(),
            peers: HashMap::new(),
            quic_connect_timeout: default_quic_connect_timeout(),
            quic_retry_after: default_quic_retry_after(),
            admit_own_cluster: false,
            denied_networks: Vec::new(),
            max_streams_per_peer: default_max_streams_per_peer(),
            max_pending_dials_per_peer: default_max_pending_dials_per_peer(),
            max_buffered_bytes_per_peer: None,
            max_control_frames_per_second: default_control_frames_per_second(),
            control_frame_burst: default_control_frame_burst(),
            stream_stall_timeout: default_stream_stall_timeout(),
            max_handshakes: default_max_handshakes(),
            max_handshakes_per_source: default_max_handshakes_per_source(),
            quic_retry: crate::tunnel::limits::QuicRetry::default(),
            max_connection_age: default_max_connection_age(),
            close_grace: default_close_grace(),
        }
    }
}

impl TunnelConfig {
    /// The tunnel settings with these choices applied to the defaults.
    pub fn settings(&self) -> TunnelSettings {
        TunnelSettings {
            transport: self.transport,
            peer_transports: self.peers.clone(),
            quic_connect_timeout: self.quic_connect_timeout,
            quic_retry_after: self.quic_retry_after,
            admit_own_cluster: self.admit_own_cluster,
            denied_networks: self.denied_networks.clone(),
            peer_limits: crate::tunnel::limits::PeerLimits {
                max_streams: self.max_streams_per_peer.max(1),
                max_pending_dials: self.max_pending_dials_per_peer.max(1),
                max_buffered: self.max_buffered_bytes_per_peer.map(|bytes| bytes.as_u64()),
            },
            control_frames: crate::tunnel::frames::ControlFrameLimit {
                per_second: self.max_control_frames_per_second,
                burst: self.control_frame_burst.max(1),
            },
            stream_stall_timeout: self.stream_stall_timeout,
            handshakes: crate::tunnel::limits::HandshakeLimits {
                max: self.max_handshakes.max(1),
                per_source: self.max_handshakes_per_source.max(1),
                quic_retry: self.quic_retry,
            },
            max_connection_age: self.max_connection_age,
            close_grace: self.close_grace,
            ..TunnelSettings::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::GatewaySettings;

    #[test]
    fn transports_parse_per_gateway_and_per_peer() {
        let text = "tunnel:\n  transport: h2\n  peers:\n    \"192.0.2.1:15008\": quic\n  quicConnectTimeout: 500ms\n";
        let settings = GatewaySettings::parse("g.yaml", text).expect("valid");
        let tunnel = settings.tunnel.settings();
        assert_eq!(tunnel.transport, TransportMode::H2);
        assert_eq!(tunnel.quic_connect_timeout, Duration::from_millis(500));
        let peer = crate::model::GatewayAddress {
            host: crate::model::GatewayHost::Ip("192.0.2.1".parse().expect("ip")),
            port: 15008,
        };
        assert_eq!(tunnel.transport_for(&peer), TransportMode::Quic);
    }

    #[test]
    fn an_unknown_transport_names_its_field() {
        let error = GatewaySettings::parse("g.yaml", "tunnel:\n  transport: udp\n")
            .expect_err("unknown transport");
        assert_eq!(error.0.field.as_deref(), Some("tunnel.transport"));
    }
}
