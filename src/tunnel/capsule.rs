//! UDP on a tunnel stream: each datagram is an HTTP Datagram (RFC 9297) in
//! a DATAGRAM capsule (type 0x00, §3.5), its payload a context id of 0 and
//! the UDP payload (RFC 9298 §5). Used on both transports: an HTTP/2
//! extended CONNECT stream (`:protocol connect-udp`) and a QUIC tunnel
//! stream opened with request version 3. Capsules of other types are
//! skipped, datagrams of another context id dropped (both as RFC 9297 and
//! RFC 9298 ask); a capsule longer than the largest UDP payload ends the
//! flow, so a reader never holds more than one datagram's worth.

use std::io;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadHalf, WriteHalf};

use crate::net::datagram::{DatagramIncoming, DatagramOutgoing, DatagramPort, MAX_UDP_PAYLOAD};

/// The DATAGRAM capsule type.
pub const DATAGRAM_CAPSULE: u64 = 0x00;
/// The longest capsule accepted: a context id and the largest UDP payload.
const MAX_CAPSULE: usize = MAX_UDP_PAYLOAD + 8;
/// The extended CONNECT protocol of a UDP flow on HTTP/2 (RFC 9298).
pub const CONNECT_UDP: &str = "connect-udp";

/// A capsule stream that broke the rules.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CapsuleError {
    #[error("a capsule of {0} bytes is longer than the {MAX_CAPSULE} a UDP flow may carry")]
    TooLong(u64),
    #[error("the stream ended inside a capsule")]
    Truncated,
}

/// Appends a QUIC variable-length integer (RFC 9000 §16).
pub fn put_varint(out: &mut BytesMut, value: u64) {
    match value {
        0..=0x3f => out.put_u8(value as u8),
        0x40..=0x3fff => out.put_u16(0x4000 | value as u16),
        0x4000..=0x3fff_ffff => out.put_u32(0x8000_0000 | value as u32),
        _ => out.put_u64(0xc000_0000_0000_0000 | (value & 0x3fff_ffff_ffff_ffff)),
    }
}

/// Reads a variable-length integer from the front of `bytes`, if whole.
pub fn get_varint(bytes: &[u8]) -> Option<(u64, usize)> {
    let first = *bytes.first()?;
    let length = 1usize << (first >> 6);
    let field = bytes.get(..length)?;
    let mut value = u64::from(first & 0x3f);
    for byte in &field[1..] {
        value = (value << 8) | u64::from(*byte);
    }
    Some((value, length))
}

/// A DATAGRAM capsule carrying `payload` under context id 0.
pub fn encode(payload: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(payload.len() + 10);
    put_varint(&mut out, DATAGRAM_CAPSULE);
    put_varint(&mut out, payload.len() as u64 + 1);
    put_varint(&mut out, 0);
    out.put_slice(payload);
    out.freeze()
}

/// What the front of a buffer holds.
#[derive(Debug, PartialEq, Eq)]
pub enum Decoded {
    /// Not a whole capsule yet.
    Partial,
    /// A capsule that carries no datagram of this flow, `usize` bytes long.
    Skip(usize),
    /// A UDP payload and the capsule's whole length.
    Datagram(Bytes, usize),
}

/// Decodes the capsule at the front of `buffer`.
pub fn decode(buffer: &[u8]) -> Result<Decoded, CapsuleError> {
    let Some((kind, kind_length)) = get_varint(buffer) else {
        return Ok(Decoded::Partial);
    };
    let Some((length, length_length)) = get_varint(&buffer[kind_length..]) else {
        return Ok(Decoded::Partial);
    };
    if length > MAX_CAPSULE as u64 {
        return Err(CapsuleError::TooLong(length));
    }
    let start = kind_length + length_length;
    let whole = start + length as usize;
    let Some(value) = buffer.get(start..whole) else {
        return Ok(Decoded::Partial);
    };
    if kind != DATAGRAM_CAPSULE {
        return Ok(Decoded::Skip(whole));
    }
    match get_varint(value) {
        Some((0, context_length)) => Ok(Decoded::Datagram(
            Bytes::copy_from_slice(&value[context_length..]),
            whole,
        )),
        _ => Ok(Decoded::Skip(whole)),
    }
}

/// A tunnel stream as one end of a UDP flow.
pub struct CapsulePort<S> {
    stream: S,
}

impl<S> CapsulePort<S> {
    pub fn new(stream: S) -> Self {
        Self { stream }
    }
}

/// The datagrams a tunnel stream carries in.
pub struct CapsuleIncoming<S> {
    stream: ReadHalf<S>,
    buffer: BytesMut,
}

/// The datagrams a flow sends out on a tunnel stream.
pub struct CapsuleOutgoing<S> {
    stream: WriteHalf<S>,
}

impl<S> DatagramPort for CapsulePort<S>
where
    S: AsyncRead + AsyncWrite + Unpin + Send,
{
    type Incoming = CapsuleIncoming<S>;
    type Outgoing = CapsuleOutgoing<S>;

    fn split(self) -> (CapsuleIncoming<S>, CapsuleOutgoing<S>) {
        let (read, write) = tokio::io::split(self.stream);
        let incoming = CapsuleIncoming {
            stream: read,
            buffer: BytesMut::with_capacity(4096),
        };
        (incoming, CapsuleOutgoing { stream: write })
    }
}

impl<S> DatagramIncoming for CapsuleIncoming<S>
where
    S: AsyncRead + Unpin + Send,
{
    async fn recv(&mut self) -> io::Result<Option<Bytes>> {
        loop {
            match decode(&self.buffer) {
                Ok(Decoded::Datagram(payload, length)) => {
                    self.buffer.advance(length);
                    return Ok(Some(payload));
                }
                Ok(Decoded::Skip(length)) => {
                    self.buffer.advance(length);
                    continue;
                }
                Ok(Decoded::Partial) => {}
                Err(error) => return Err(io::Error::new(io::ErrorKind::InvalidData, error)),
            }
            // Cancel-safe: what was read stays in the buffer.
            if self.stream.read_buf(&mut self.buffer).await? == 0 {
                return if self.buffer.is_empty() {
                    Ok(None)
                } else {
                    Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        CapsuleError::Truncated,
                    ))
                };
            }
        }
    }
}

impl<S> DatagramOutgoing for CapsuleOutgoing<S>
where
    S: AsyncWrite + Unpin + Send,
{
    async fn send(&mut self, datagram: Bytes) -> io::Result<()> {
        self.stream.write_all(&encode(&datagram)).await?;
        self.stream.flush().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_round_trip_at_every_length() {
        for value in [0, 63, 64, 16_383, 16_384, 1_073_741_823, 1_073_741_824] {
            let mut out = BytesMut::new();
            put_varint(&mut out, value);
            assert_eq!(get_varint(&out), Some((value, out.len())), "{value}");
        }
        // RFC 9000 §A.1's examples.
        assert_eq!(get_varint(&[0x7b, 0xbd]), Some((15_293, 2)));
        assert_eq!(get_varint(&[0x25]), Some((37, 1)));
        assert_eq!(get_varint(&[0x40]), None, "cut short");
    }

    #[test]
    fn a_datagram_capsule_is_type_length_context_payload() {
        let capsule = encode(b"dns?");
        assert_eq!(&capsule[..], &[0x00, 0x05, 0x00, b'd', b'n', b's', b'?']);
        assert_eq!(
            decode(&capsule),
            Ok(Decoded::Datagram(Bytes::from_static(b"dns?"), 7))
        );
        assert_eq!(decode(&capsule[..4]), Ok(Decoded::Partial));
    }

    #[test]
    fn other_capsules_and_contexts_are_skipped_and_long_ones_refused() {
        // An unknown capsule type, then a datagram of context 2.
        assert_eq!(decode(&[0x21, 0x01, 0xff]), Ok(Decoded::Skip(3)));
        assert_eq!(decode(&[0x00, 0x02, 0x02, b'x']), Ok(Decoded::Skip(4)));
        let mut long = BytesMut::new();
        put_varint(&mut long, 0);
        put_varint(&mut long, 1 << 20);
        assert_eq!(decode(&long), Err(CapsuleError::TooLong(1 << 20)));
    }

    #[tokio::test]
    async fn a_port_reads_capsules_split_anywhere() {
        let (near, mut far) = tokio::io::duplex(64);
        let (mut port, _) = CapsulePort::new(near).split();
        let mut bytes = encode(b"one").to_vec();
        bytes.extend_from_slice(&[0x21, 0x01, 0xff]);
        bytes.extend_from_slice(&encode(b"two"));
        let writer = tokio::spawn(async move {
            for byte in bytes {
                far.write_all(&[byte]).await.expect("write");
            }
            far
        });
        assert_eq!(
            port.recv().await.expect("read").as_deref(),
            Some(&b"one"[..])
        );
        assert_eq!(
            port.recv().await.expect("read").as_deref(),
            Some(&b"two"[..])
        );
        drop(writer.await.expect("writer"));
        assert_eq!(port.recv().await.expect("end"), None);
    }

    /// The far end of a tunnel stream writes datagrams and never reads the
    /// answers (a zero window): the flow keeps reading what it writes and
    /// passing it on, drops the answers it cannot send, and ends as stalled
    /// once its blocked send outlasts the stall timeout.
    #[tokio::test]
    async fn a_flow_keeps_reading_while_its_send_waits_and_ends_stalled() {
        use crate::net::datagram::{ConnectedUdp, pump};
        use crate::net::splice::SpliceEnd;
        use std::time::Duration;

        let backend = tokio::net::UdpSocket::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let upstream = ConnectedUdp::connect(backend.local_addr().expect("address"))
            .await
            .expect("connect");
        // A stream that holds 256 bytes each way before a write waits.
        let (near, mut far) = tokio::io::duplex(256);
        let stall = Duration::from_millis(1500);
        let flow = tokio::spawn(pump(
            CapsulePort::new(near),
            upstream,
            Duration::from_secs(30),
            stall,
        ));
        // Each datagram in turn, answered by the backend with one twice
        // its size: the answers fill the stream's 256 bytes at once, and
        // the writer must never be held back by them.
        const SENT: usize = 40;
        let mut buffer = [0_u8; 512];
        for sent in 0..SENT {
            tokio::time::timeout(Duration::from_secs(2), far.write_all(&encode(&[7; 100])))
                .await
                .unwrap_or_else(|_| panic!("datagram {sent} was held back by unread answers"))
                .expect("write");
            let (length, from) =
                tokio::time::timeout(Duration::from_secs(2), backend.recv_from(&mut buffer))
                    .await
                    .unwrap_or_else(|_| panic!("datagram {sent} never reached the backend"))
                    .expect("receive");
            assert_eq!(length, 100);
            backend.send_to(&[9; 200], from).await.expect("answer");
        }
        let outcome = tokio::time::timeout(Duration::from_secs(5), flow)
            .await
            .expect("the flow ends")
            .expect("flow");
        assert!(
            matches!(outcome.end, SpliceEnd::Stalled),
            "{:?}",
            outcome.end
        );
        assert_eq!(outcome.client_to_backend, (SENT * 100) as u64);
    }
}
