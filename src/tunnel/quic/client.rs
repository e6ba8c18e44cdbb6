//! The QUIC tunnel client: one QUIC connection per peer gateway, one
//! bidirectional stream per proxied connection. Dials are one at a time per
//! peer; a peer that does not answer over QUIC within the connect deadline
//! is marked down for a while, so `auto` mode falls back to HTTP/2 and
//! retries QUIC later.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use http::StatusCode;
use quinn::{Connection, Endpoint};

use super::{
    QuicStream, client_config, encode_feed_request, encode_request, peer_certificate, read_response,
};
use crate::admin::metrics::{Metrics, PoolMetrics};
use crate::model::{ClusterId, GatewayAddress, GatewayHost};
use crate::tls::lifetime::PeerLifetime;
use crate::tls::{ReloadingTls, identity_of};
use crate::tunnel::client::{FeedStream, TunnelError};
use crate::tunnel::{TunnelRequest, TunnelSettings};

/// Connections to peer gateways over QUIC.
pub struct QuicPool {
    endpoint: Endpoint,
    tls: Arc<ReloadingTls>,
    settings: TunnelSettings,
    metrics: Arc<Metrics>,
    peers: Mutex<HashMap<GatewayAddress, Arc<Peer>>>,
}

struct Peer {
    label: String,
    connection: Mutex<Option<(Connection, ClusterId)>>,
    dialing: tokio::sync::Mutex<()>,
    /// Until when QUIC is not tried again after a failed connect.
    down_until: Mutex<Option<Instant>>,
    metrics: PoolMetrics,
}

impl QuicPool {
    /// A client endpoint on an ephemeral UDP port of `bind`.
    pub fn new(
        bind: SocketAddr,
        tls: Arc<ReloadingTls>,
        settings: TunnelSettings,
        metrics: Arc<Metrics>,
    ) -> Result<Self, super::QuicError> {
        let socket = super::udp_socket(bind)?;
        let endpoint = Endpoint::new(
            quinn::EndpointConfig::default(),
            None,
            socket,
            Arc::new(quinn::TokioRuntime),
        )
        .map_err(|source| super::QuicError::Socket {
            address: bind,
            source,
        })?;
        Ok(Self {
            endpoint,
            tls,
            settings,
            metrics,
            peers: Mutex::new(HashMap::new()),
        })
    }

    /// Whether QUIC to `gateway` failed recently and should not be tried yet.
    pub fn is_down(&self, gateway: &GatewayAddress) -> bool {
        let peer = self.peer(gateway);
        let down = peer.down_until.lock().unwrap_or_else(|e| e.into_inner());
        down.is_some_and(|until| until > Instant::now())
    }

    /// Opens a stream to `authority` through `gateway`, whose peer must be
    /// one of `allowed`.
    pub async fn connect(
        &self,
        gateway: &GatewayAddress,
        dial_to: Option<SocketAddr>,
        allowed: &[ClusterId],
        request: impl Into<TunnelRequest<'_>>,
    ) -> Result<QuicStream, TunnelError> {
        let request = request.into();
        let peer = self.peer(gateway);
        match self
            .connect_once(&peer, gateway, dial_to, allowed, request)
            .await
        {
            // The server is ending that connection (its age, or our
            // certificate changed): the stream was not served, and goes
            // once more, on a new connection.
            Err(TunnelError::Refused { status, .. })
                if status == StatusCode::MISDIRECTED_REQUEST =>
            {
                self.connect_once(&peer, gateway, dial_to, allowed, request)
                    .await
            }
            other => other,
        }
    }

    /// Asks `gateway`, whose peer must be one of `allowed`, for its
    /// exported-state feed at `path_and_query` (request frame version 4).
    pub async fn feed(
        &self,
        gateway: &GatewayAddress,
        allowed: &[ClusterId],
        path_and_query: &str,
    ) -> Result<FeedStream, TunnelError> {
        let peer = self.peer(gateway);
        let connection = self.connection(&peer, gateway, None, allowed).await?;
        let identity = peer_certificate(&connection)
            .ok_or_else(|| "no peer certificate".to_owned())
            .and_then(|cert| identity_of(&cert).map_err(|e| e.to_string()))
            .map_err(|reason| TunnelError::Quic {
                gateway: peer.label.clone(),
                reason,
            })?;
        let request = encode_feed_request(path_and_query);
        // The feed flows one way: nothing more is sent.
        let (_, recv) = self
            .exchange(&peer, &connection, request, path_and_query, true)
            .await?;
        Ok(FeedStream::quic(identity, recv))
    }

    async fn connect_once(
        &self,
        peer: &Arc<Peer>,
        gateway: &GatewayAddress,
        dial_to: Option<SocketAddr>,
        allowed: &[ClusterId],
        request: TunnelRequest<'_>,
    ) -> Result<QuicStream, TunnelError> {
        let authority = request.authority;
        let connection = self.connection(peer, gateway, dial_to, allowed).await?;
        let (send, recv) = self
            .exchange(peer, &connection, encode_request(request), authority, false)
            .await?;
        Ok(QuicStream::new(send, recv))
    }

    /// Opens a stream on `connection`, writes `request` (finishing the
    /// side when `finish`) and reads the answer: the stream, once `200`.
    /// `asked` names what was asked in a refusal.
    async fn exchange(
        &self,
        peer: &Peer,
        connection: &Connection,
        request: Result<Vec<u8>, super::QuicError>,
        asked: &str,
        finish: bool,
    ) -> Result<(quinn::SendStream, quinn::RecvStream), TunnelError> {
        let failed = |reason: String| TunnelError::Quic {
            gateway: peer.label.clone(),
            reason,
        };
        // A peer that died leaves the connection silent; the idle timeout
        // ends it within a second, and the deadline bounds the wait anyway.
        let exchange = async {
            let (mut send, mut recv) = connection.open_bi().await.map_err(|e| e.to_string())?;
            let request = request.map_err(|e| e.to_string())?;
            send.write_all(&request).await.map_err(|e| e.to_string())?;
            if finish {
                send.finish().map_err(|e| e.to_string())?;
            }
            let (status, reason) = read_response(&mut recv).await.map_err(|e| e.to_string())?;
            Ok::<_, String>((send, recv, status, reason))
        };
        let (send, recv, status, reason) =
            match tokio::time::timeout(self.settings.handshake_timeout, exchange).await {
                Ok(Ok(answer)) => answer,
                // A dead connection has closed itself (idle timeout) and is
                // no longer offered; a live one keeps serving its other streams.
                Ok(Err(reason)) => return Err(failed(reason)),
                Err(_) => return Err(failed("no answer from the peer".to_owned())),
            };
        if status == StatusCode::MISDIRECTED_REQUEST.as_u16() {
            peer.retire(connection);
        }
        if status != 200 {
            return Err(TunnelError::Refused {
                gateway: peer.label.clone(),
                authority: asked.to_owned(),
                status: StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY),
                reason,
            });
        }
        Ok((send, recv))
    }

    fn peer(&self, gateway: &GatewayAddress) -> Arc<Peer> {
        let mut peers = self.peers.lock().unwrap_or_else(|e| e.into_inner());
        peers
            .entry(gateway.clone())
            .or_insert_with(|| {
                let label = gateway.to_string();
                Arc::new(Peer {
                    metrics: self.metrics.pool(&format!("{label}/quic")),
                    label,
                    connection: Mutex::new(None),
                    dialing: tokio::sync::Mutex::new(()),
                    down_until: Mutex::new(None),
                })
            })
            .clone()
    }

    async fn connection(
        &self,
        peer: &Arc<Peer>,
        gateway: &GatewayAddress,
        dial_to: Option<SocketAddr>,
        allowed: &[ClusterId],
    ) -> Result<Connection, TunnelError> {
        if let Some(connection) = peer.live(allowed) {
            return Ok(connection);
        }
        let _dialing = peer.dialing.lock().await;
        if let Some(connection) = peer.live(allowed) {
            return Ok(connection);
        }
        match self.dial(peer, gateway, dial_to, allowed).await {
            Ok((connection, cluster)) => {
                *peer.down_until.lock().unwrap_or_else(|e| e.into_inner()) = None;
                *peer.connection.lock().unwrap_or_else(|e| e.into_inner()) =
                    Some((connection.clone(), cluster));
                let metrics = peer.metrics.clone();
                metrics.connections_add(1);
                let watched = connection.clone();
                let silent_peer = peer.clone();
                let retry_after = self.settings.quic_retry_after;
                // Used until the server's certificate expires or the
                // material in use stops trusting it; the server retires it
                // by age itself.
                let mut lifetime = peer_certificate(&connection)
                    .map(|leaf| PeerLifetime::new(leaf, &self.tls, Duration::MAX));
                let (tls, grace) = (self.tls.clone(), self.settings.close_grace);
                let label = peer.label.clone();
                tokio::spawn(async move {
                    let retired = async {
                        match lifetime.as_mut() {
                            Some(lifetime) => lifetime.retired(&tls).await,
                            None => std::future::pending().await,
                        }
                    };
                    let reason = tokio::select! {
                        reason = watched.closed() => reason,
                        retirement = retired => {
                            tracing::info!(gateway = %label, reason = %retirement,
                                "retiring a pooled QUIC tunnel connection");
                            // No new stream on it; the open ones get a grace.
                            {
                                let mut held = silent_peer
                                    .connection
                                    .lock()
                                    .unwrap_or_else(|e| e.into_inner());
                                if held
                                    .as_ref()
                                    .is_some_and(|(c, _)| c.stable_id() == watched.stable_id())
                                {
                                    *held = None;
                                }
                            }
                            let _ = tokio::time::timeout(grace, watched.closed()).await;
                            watched.close(0u32.into(), b"retired");
                            watched.closed().await
                        }
                    };
                    metrics.connections_add(-1);
                    // Silence until the idle timeout means the peer is gone:
                    // redialling it now would only wait out a connect timeout.
                    if matches!(reason, quinn::ConnectionError::TimedOut) {
                        *silent_peer
                            .down_until
                            .lock()
                            .unwrap_or_else(|e| e.into_inner()) =
                            Some(Instant::now() + retry_after);
                    }
                });
                Ok(connection)
            }
            Err(error) => {
                *peer.down_until.lock().unwrap_or_else(|e| e.into_inner()) =
                    Some(Instant::now() + self.settings.quic_retry_after);
                Err(error)
            }
        }
    }

    async fn dial(
        &self,
        peer: &Peer,
        gateway: &GatewayAddress,
        dial_to: Option<SocketAddr>,
        allowed: &[ClusterId],
    ) -> Result<(Connection, ClusterId), TunnelError> {
        let failed = |reason: String| TunnelError::Quic {
            gateway: peer.label.clone(),
            reason,
        };
        let address = match dial_to {
            Some(address) => address,
            None => crate::tunnel::client::resolve(gateway).await?,
        };
        let config = client_config(&self.tls.current(), &self.settings)
            .map_err(|e| failed(e.to_string()))?;
        let server_name = match &gateway.host {
            GatewayHost::Dns(name) => name.clone(),
            // Identity is the certificate's URI, not the name: any valid name will do.
            GatewayHost::Ip(_) => "gateway.strait.invalid".to_owned(),
        };
        let connecting = self
            .endpoint
            .connect_with(config, address, &server_name)
            .map_err(|e| failed(e.to_string()))?;
        let connection = tokio::time::timeout(self.settings.quic_connect_timeout, connecting)
            .await
            .map_err(|_| {
                failed(format!(
                    "no answer within {:?}",
                    self.settings.quic_connect_timeout
                ))
            })?
            .map_err(|e| TunnelError::Handshake {
                gateway: peer.label.clone(),
                reason: e.to_string(),
            })?;
        let identity = peer_certificate(&connection)
            .ok_or_else(|| failed("no peer certificate".to_owned()))
            .and_then(|cert| identity_of(&cert).map_err(|e| failed(e.to_string())))?;
        if !allowed.contains(&identity.cluster) {
            connection.close(1u32.into(), b"wrong peer");
            return Err(TunnelError::WrongPeer {
                gateway: peer.label.clone(),
                identity: identity.to_string(),
            });
        }
        tracing::debug!(gateway = %peer.label, peer = %identity, "quic tunnel connection established");
        Ok((connection, identity.cluster))
    }

    /// Open QUIC connections per peer, for debugging.
    pub fn connection_counts(&self) -> Vec<(String, usize)> {
        let peers = self.peers.lock().unwrap_or_else(|e| e.into_inner());
        peers
            .values()
            .map(|peer| {
                let open = peer
                    .connection
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .as_ref()
                    .is_some_and(|(c, _)| c.close_reason().is_none());
                (peer.label.clone(), usize::from(open))
            })
            .collect()
    }
}

impl Peer {
    /// Takes no new stream to `connection`; its open streams go on.
    fn retire(&self, connection: &Connection) {
        let mut current = self.connection.lock().unwrap_or_else(|e| e.into_inner());
        if current
            .as_ref()
            .is_some_and(|(c, _)| c.stable_id() == connection.stable_id())
        {
            *current = None;
        }
    }

    fn live(&self, allowed: &[ClusterId]) -> Option<Connection> {
        let connection = self.connection.lock().unwrap_or_else(|e| e.into_inner());
        connection
            .as_ref()
            .filter(|(c, cluster)| c.close_reason().is_none() && allowed.contains(cluster))
            .map(|(c, _)| c.clone())
    }
}

/// How long QUIC is not retried with a peer after it failed, by default.
pub const DEFAULT_RETRY_AFTER: Duration = Duration::from_secs(30);
