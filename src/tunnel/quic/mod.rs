//! The QUIC tunnel transport (quinn): the same gateway certificates and
//! identity checks as the HTTP/2 tunnel, one QUIC connection per peer
//! gateway and one bidirectional stream per proxied connection, so a lost
//! packet stalls only the stream it belongs to. No 0-RTT: a tunnel request
//! is never replayable.
//!
//! Framing on each stream (all integers big-endian), documented in
//! `docs/tunnel-protocol.md`:
//! - request: `u8 version (1)`, `u16 length`, the target authority (UTF-8);
//!   or, when the target's service asks for the PROXY protocol, `u8 version
//!   (2)`, the authority as in version 1, then `u16 length` and the
//!   original client's address (UTF-8, `ip:port`); version 3 is a UDP
//!   flow, laid out as version 2 (an empty address when none is sent),
//!   whose stream then carries DATAGRAM capsules (`tunnel::capsule`);
//!   version 4 asks for the exported-state feed: `u16 length` and the
//!   path and query (`/strait.dev/feed/v1?…`), the stream then carrying
//!   the feed's frames (§10) one way;
//! - response: `u8 version (1)`, `u16 status`, `u16 length`, reason (UTF-8);
//! - then the proxied bytes; FIN is a half-close, as END_STREAM is on HTTP/2.

pub mod client;

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use quinn::crypto::rustls::{QuicClientConfig, QuicServerConfig};
use quinn::{IdleTimeout, RecvStream, SendStream, TransportConfig, VarInt};
use socket2::{Domain, Protocol, Socket, Type};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::{TunnelRequest, TunnelSettings};
use crate::tls::TlsMaterial;

/// ALPN of the QUIC tunnel; HTTP/2 uses `h2`.
pub const ALPN_QUIC: &[u8] = b"strait-tunnel/1";
/// The framing version both ends speak.
pub const FRAME_VERSION: u8 = 1;
/// A request that also carries the original client's address. Sent only
/// for a service that asks for the PROXY protocol, so a server that knows
/// only version 1 still serves every other request.
pub const FRAME_VERSION_CLIENT: u8 = 2;
/// A request for a UDP flow: as version 2, the client's address empty
/// when it is not sent.
pub const FRAME_VERSION_DATAGRAMS: u8 = 3;
/// A request for the exported-state feed: the path and query in place of
/// the authority, nothing after it.
pub const FRAME_VERSION_FEED: u8 = 4;
/// Longest authority or reason accepted on the wire.
pub const MAX_FIELD_LEN: usize = 1024;
/// UDP socket buffers: a bulk flow at WAN rates needs more than the default.
const UDP_BUFFER_BYTES: usize = 4 * 1024 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum QuicError {
    #[error("tls configuration unusable for quic: {0}")]
    Tls(String),
    #[error("udp socket on {address}: {source}")]
    Socket {
        address: SocketAddr,
        source: io::Error,
    },
    #[error("malformed tunnel frame: {0}")]
    Frame(String),
    #[error("stream: {0}")]
    Stream(String),
}

/// Bytes a QUIC connection queues for sending over all its streams.
const SEND_WINDOW: u64 = 16 * 1024 * 1024;

fn transport(settings: &TunnelSettings) -> TransportConfig {
    let mut transport = TransportConfig::default();
    transport
        .stream_receive_window(VarInt::from_u32(settings.stream_window))
        .receive_window(VarInt::from_u64(settings.quic_receive_window()).unwrap_or(VarInt::MAX))
        // What one connection queues to send, over all its streams.
        .send_window(SEND_WINDOW)
        .max_concurrent_uni_streams(VarInt::from_u32(0))
        .keep_alive_interval(Some(settings.quic_keepalive))
        .max_idle_timeout(IdleTimeout::try_from(settings.quic_idle_timeout).ok());
    // No stream before the peer has authenticated: quinn allocates the
    // state of every stream a peer may open as soon as it may open it
    // (about 150 bytes each, ~10 MiB at 65,536), so a handshake that
    // promised them would cost that much to anyone sending an Initial.
    // The server grants streams once the peer's certificate is checked
    // ([`server_streams`]); the client never accepts any.
    transport.max_concurrent_bidi_streams(VarInt::from_u32(0));
    transport
}

/// The streams an authenticated peer may have open on one connection:
/// `tunnel.maxStreamsPerPeer` bounds them over all its connections anyway.
pub fn server_streams(settings: &TunnelSettings) -> VarInt {
    let streams = u64::from(settings.quic_max_concurrent_streams)
        .min(u64::try_from(settings.peer_limits.max_streams).unwrap_or(u64::MAX));
    VarInt::from_u64(streams).unwrap_or(VarInt::MAX)
}

/// The server side: our certificate, peers must present one of our CA.
pub fn server_config(
    material: &TlsMaterial,
    settings: &TunnelSettings,
) -> Result<quinn::ServerConfig, QuicError> {
    let mut tls = (*material.server_config()).clone();
    tls.alpn_protocols = vec![ALPN_QUIC.to_vec()];
    tls.max_early_data_size = 0;
    let crypto = QuicServerConfig::try_from(tls).map_err(|e| QuicError::Tls(e.to_string()))?;
    let mut config = quinn::ServerConfig::with_crypto(Arc::new(crypto));
    config.transport_config(Arc::new(transport(settings)));
    // Clients quinn holds before the accept loop has looked at them; the
    // loop admits or refuses each at once, so a few times the handshake
    // cap is plenty.
    config.max_incoming(settings.handshakes.max.saturating_mul(4).max(64));
    Ok(config)
}

/// The client side: the same checks as the HTTP/2 client, and no 0-RTT.
pub fn client_config(
    material: &TlsMaterial,
    settings: &TunnelSettings,
) -> Result<quinn::ClientConfig, QuicError> {
    let mut tls = (*material.client_config()).clone();
    tls.alpn_protocols = vec![ALPN_QUIC.to_vec()];
    tls.enable_early_data = false;
    let crypto = QuicClientConfig::try_from(tls).map_err(|e| QuicError::Tls(e.to_string()))?;
    let mut config = quinn::ClientConfig::new(Arc::new(crypto));
    config.transport_config(Arc::new(transport(settings)));
    Ok(config)
}

/// A UDP socket with raised buffers, bound to `address`.
pub fn udp_socket(address: SocketAddr) -> Result<std::net::UdpSocket, QuicError> {
    let failed = |source| QuicError::Socket { address, source };
    let socket = Socket::new(
        Domain::for_address(address),
        Type::DGRAM,
        Some(Protocol::UDP),
    )
    .map_err(failed)?;
    // The kernel caps these at net.core.[rw]mem_max; a smaller buffer still works.
    let _ = socket.set_recv_buffer_size(UDP_BUFFER_BYTES);
    let _ = socket.set_send_buffer_size(UDP_BUFFER_BYTES);
    socket.bind(&address.into()).map_err(failed)?;
    socket.set_nonblocking(true).map_err(failed)?;
    Ok(socket.into())
}

/// The peer's end-entity certificate, as quinn hands it over.
pub(crate) fn peer_certificate(
    connection: &quinn::Connection,
) -> Option<rustls_pki_types::CertificateDer<'static>> {
    connection
        .peer_identity()?
        .downcast::<Vec<rustls_pki_types::CertificateDer<'static>>>()
        .ok()?
        .into_iter()
        .next()
}

fn field(bytes: &[u8]) -> Result<[u8; 2], QuicError> {
    if bytes.len() > MAX_FIELD_LEN {
        return Err(QuicError::Frame(format!(
            "field of {} bytes exceeds {MAX_FIELD_LEN}",
            bytes.len()
        )));
    }
    Ok(u16::try_from(bytes.len()).unwrap_or(u16::MAX).to_be_bytes())
}

/// Encodes a request frame.
pub fn encode_request<'a>(request: impl Into<TunnelRequest<'a>>) -> Result<Vec<u8>, QuicError> {
    let request = request.into();
    let authority = request.authority.as_bytes();
    let version = match (request.datagrams, request.client) {
        (true, _) => FRAME_VERSION_DATAGRAMS,
        (false, Some(_)) => FRAME_VERSION_CLIENT,
        (false, None) => FRAME_VERSION,
    };
    let mut frame = vec![version];
    frame.extend_from_slice(&field(authority)?);
    frame.extend_from_slice(authority);
    if version != FRAME_VERSION {
        let client = request.client.map(|c| c.to_string()).unwrap_or_default();
        frame.extend_from_slice(&field(client.as_bytes())?);
        frame.extend_from_slice(client.as_bytes());
    }
    Ok(frame)
}

/// Encodes a feed request frame for `path_and_query`.
pub fn encode_feed_request(path_and_query: &str) -> Result<Vec<u8>, QuicError> {
    let mut frame = vec![FRAME_VERSION_FEED];
    frame.extend_from_slice(&field(path_and_query.as_bytes())?);
    frame.extend_from_slice(path_and_query.as_bytes());
    Ok(frame)
}

/// Encodes a response frame.
pub fn encode_response(status: u16, reason: &str) -> Vec<u8> {
    // Cut at a character boundary: the reason quotes the peer's authority,
    // and a split character would make the whole answer unreadable.
    let reason = &reason[..reason.floor_char_boundary(MAX_FIELD_LEN)];
    let mut frame = vec![FRAME_VERSION];
    frame.extend_from_slice(&status.to_be_bytes());
    frame.extend_from_slice(&u16::try_from(reason.len()).unwrap_or(0).to_be_bytes());
    frame.extend_from_slice(reason.as_bytes());
    frame
}

async fn read_exact(recv: &mut RecvStream, buf: &mut [u8]) -> Result<(), QuicError> {
    recv.read_exact(buf)
        .await
        .map_err(|e| QuicError::Stream(e.to_string()))
}

async fn read_version(recv: &mut RecvStream, known: &[u8]) -> Result<u8, QuicError> {
    let mut version = [0u8; 1];
    read_exact(recv, &mut version).await?;
    if !known.contains(&version[0]) {
        return Err(QuicError::Frame(format!("unknown version {}", version[0])));
    }
    Ok(version[0])
}

async fn read_text(recv: &mut RecvStream) -> Result<String, QuicError> {
    let mut length = [0u8; 2];
    read_exact(recv, &mut length).await?;
    let length = usize::from(u16::from_be_bytes(length));
    if length > MAX_FIELD_LEN {
        return Err(QuicError::Frame(format!(
            "field of {length} bytes exceeds {MAX_FIELD_LEN}"
        )));
    }
    let mut text = vec![0u8; length];
    read_exact(recv, &mut text).await?;
    String::from_utf8(text).map_err(|_| QuicError::Frame("field is not UTF-8".to_owned()))
}

/// A request as the server reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadRequest {
    pub authority: String,
    /// The original client's address, as the calling gateway says it.
    pub client: Option<SocketAddr>,
    /// A UDP flow rather than a byte stream.
    pub datagrams: bool,
    /// The exported-state feed: `authority` holds its path and query.
    pub feed: bool,
}

/// Reads a request frame: the target authority, and in version 2 the
/// original client's address.
pub async fn read_request(recv: &mut RecvStream) -> Result<ReadRequest, QuicError> {
    let known = [
        FRAME_VERSION,
        FRAME_VERSION_CLIENT,
        FRAME_VERSION_DATAGRAMS,
        FRAME_VERSION_FEED,
    ];
    let version = read_version(recv, &known).await?;
    let authority = read_text(recv).await?;
    let client = match version {
        FRAME_VERSION | FRAME_VERSION_FEED => None,
        _ => {
            let text = read_text(recv).await?;
            if text.is_empty() && version == FRAME_VERSION_DATAGRAMS {
                None
            } else {
                Some(text.parse().map_err(|_| {
                    QuicError::Frame(format!("client address {text:?} is not ip:port"))
                })?)
            }
        }
    };
    Ok(ReadRequest {
        authority,
        client,
        datagrams: version == FRAME_VERSION_DATAGRAMS,
        feed: version == FRAME_VERSION_FEED,
    })
}

/// Reads a response frame: the status and reason.
pub async fn read_response(recv: &mut RecvStream) -> Result<(u16, String), QuicError> {
    read_version(recv, &[FRAME_VERSION]).await?;
    let mut status = [0u8; 2];
    read_exact(recv, &mut status).await?;
    Ok((u16::from_be_bytes(status), read_text(recv).await?))
}

/// One proxied connection over a QUIC stream.
pub struct QuicStream {
    send: SendStream,
    recv: RecvStream,
}

impl crate::net::splice::SpliceIo for QuicStream {}

impl QuicStream {
    pub fn new(send: SendStream, recv: RecvStream) -> Self {
        Self { send, recv }
    }
}

impl AsyncRead for QuicStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.recv).poll_read(cx, buf)
    }
}

impl AsyncWrite for QuicStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.send)
            .poll_write(cx, buf)
            .map_err(io::Error::from)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.send).poll_flush(cx)
    }

    /// Finishes the send side (FIN): a half-close.
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.send).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_carry_version_length_and_text() {
        assert_eq!(
            encode_request("10.0.0.1:80").expect("short authority"),
            [&[1u8, 0, 11][..], b"10.0.0.1:80"].concat()
        );
        let with_client = TunnelRequest {
            authority: "10.0.0.1:80",
            client: Some("10.9.0.7:4000".parse().expect("address")),
            datagrams: false,
        };
        assert_eq!(
            encode_request(with_client).expect("short fields"),
            [
                &[2u8, 0, 11][..],
                b"10.0.0.1:80",
                &[0, 13],
                b"10.9.0.7:4000"
            ]
            .concat()
        );
        assert_eq!(encode_response(403, "no"), [1u8, 1, 147, 0, 2, b'n', b'o']);
        let long = "a".repeat(MAX_FIELD_LEN + 1);
        assert!(encode_request(&long).is_err());
    }

    #[test]
    fn long_reasons_are_cut_at_a_character_boundary() {
        let reason = format!("{}é", "a".repeat(MAX_FIELD_LEN - 1));
        let frame = encode_response(403, &reason);
        let text = std::str::from_utf8(&frame[5..]).expect("still UTF-8");
        assert_eq!(text.len(), MAX_FIELD_LEN - 1);
    }
}
