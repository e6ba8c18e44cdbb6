//! Control-frame limits per tunnel connection. HTTP/2 and QUIC let a peer
//! send control frames (PING, SETTINGS, WINDOW_UPDATE, PRIORITY,
//! RST_STREAM, GOAWAY, and QUIC's equivalents) as fast as it likes, and
//! every one costs the server work; neither library limits their rate.
//! Frames that carry nothing cost work too (CVE-2019-9518): an empty DATA
//! frame that does not end its stream, an empty HEADERS frame, and every
//! HEADERS frame continued in CONTINUATION frames and each of those (a
//! header block spread thin, CVE-2024-27316's class) count as control
//! frames here. A connection
//! gets a token bucket: a burst, refilled at a steady rate, one token per
//! control frame. A peer that empties it is sent GOAWAY (HTTP/2,
//! `ENHANCE_YOUR_CALM`) or closed (QUIC).
//!
//! For HTTP/2 the frames are counted by [`FrameMeter`], which reads the
//! frame headers of the decrypted byte stream as it passes to h2 (the h2
//! crate has no hook for received control frames); [`Guarded`] is that
//! stream. For QUIC, quinn counts received frames itself and the
//! connection's task samples the count.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::Notify;

use crate::token_bucket::TokenBucket;

/// The client connection preface (RFC 9113 §3.4), which precedes frames.
const PREFACE_LEN: usize = 24;
const FRAME_HEADER_LEN: usize = 9;

/// HTTP/2 frame types, and the flags read here.
const DATA: u8 = 0x0;
const HEADERS: u8 = 0x1;
const PRIORITY: u8 = 0x2;
const RST_STREAM: u8 = 0x3;
const SETTINGS: u8 = 0x4;
const PING: u8 = 0x6;
const GOAWAY: u8 = 0x7;
const WINDOW_UPDATE: u8 = 0x8;
const CONTINUATION: u8 = 0x9;
/// The last frame type RFC 9113 defines (CONTINUATION); later ones are
/// extensions h2 ignores, and count as control frames too.
const LAST_KNOWN_TYPE: u8 = 0x9;
const ACK_FLAG: u8 = 0x1;
const END_STREAM_FLAG: u8 = 0x1;
const END_HEADERS_FLAG: u8 = 0x4;

/// The rate and burst of control frames one connection may send.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ControlFrameLimit {
    pub per_second: u32,
    pub burst: u32,
}

impl Default for ControlFrameLimit {
    /// Well above a healthy peer: keep-alive PINGs every 20 s (QUIC: every
    /// 200 ms), a RST_STREAM per stream given up, and flow-control updates
    /// as data is consumed: HTTP/2 sends a WINDOW_UPDATE per 2 MiB a stream
    /// receives, QUIC a MAX_STREAM_DATA per 512 KiB, so a 10 Gbit/s
    /// download over QUIC is about 3,000 a second. A flood costs at most
    /// this many frames' work a second before the connection is closed.
    fn default() -> Self {
        Self {
            per_second: 10_000,
            burst: 20_000,
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Position {
    /// Bytes of the preface still to pass.
    Preface(usize),
    /// Bytes of the current frame header read so far.
    Header(usize),
    /// Payload bytes of the current frame still to pass.
    Payload(u32),
}

/// Counts the control frames in a server's received HTTP/2 byte stream.
#[derive(Debug)]
pub struct FrameMeter {
    position: Position,
    header: [u8; FRAME_HEADER_LEN],
    bucket: TokenBucket,
}

impl FrameMeter {
    pub fn new(limit: ControlFrameLimit, now: Instant) -> Self {
        Self {
            position: Position::Preface(PREFACE_LEN),
            header: [0; FRAME_HEADER_LEN],
            bucket: TokenBucket::new(limit.per_second, limit.burst, now),
        }
    }

    /// Reads `bytes`, the next bytes of the stream; `false` when a control
    /// frame in them went over the limit.
    pub fn feed(&mut self, mut bytes: &[u8], now: Instant) -> bool {
        while !bytes.is_empty() {
            match self.position {
                Position::Preface(left) => {
                    let taken = left.min(bytes.len());
                    bytes = &bytes[taken..];
                    self.position = if taken == left {
                        Position::Header(0)
                    } else {
                        Position::Preface(left - taken)
                    };
                }
                Position::Header(read) => {
                    let taken = (FRAME_HEADER_LEN - read).min(bytes.len());
                    self.header[read..read + taken].copy_from_slice(&bytes[..taken]);
                    bytes = &bytes[taken..];
                    if read + taken < FRAME_HEADER_LEN {
                        self.position = Position::Header(read + taken);
                        continue;
                    }
                    let [l0, l1, l2, kind, flags, ..] = self.header;
                    let length = u32::from_be_bytes([0, l0, l1, l2]);
                    if costs_work(kind, flags, length) && !self.bucket.spend(1, now) {
                        return false;
                    }
                    self.position = if length == 0 {
                        Position::Header(0)
                    } else {
                        Position::Payload(length)
                    };
                }
                Position::Payload(left) => {
                    let taken = usize::try_from(left).unwrap_or(usize::MAX).min(bytes.len());
                    bytes = &bytes[taken..];
                    // `taken` is at most `left`, a u32.
                    let left = left - u32::try_from(taken).unwrap_or(left);
                    self.position = if left == 0 {
                        Position::Header(0)
                    } else {
                        Position::Payload(left)
                    };
                }
            }
        }
        true
    }
}

/// Whether a frame is spent from the bucket: every control frame, and the
/// frames a peer can send without moving a byte of any stream.
fn costs_work(kind: u8, flags: u8, length: u32) -> bool {
    match kind {
        PRIORITY | RST_STREAM | WINDOW_UPDATE | GOAWAY | CONTINUATION => true,
        // An acknowledgement answers a frame this side sent.
        SETTINGS | PING => flags & ACK_FLAG == 0,
        // The empty DATA frame that ends a stream is the only useful one.
        DATA => length == 0 && flags & END_STREAM_FLAG == 0,
        // A request's headers in one frame are free; an empty or continued
        // header block is not.
        HEADERS => length == 0 || flags & END_HEADERS_FLAG == 0,
        kind => kind > LAST_KNOWN_TYPE,
    }
}

/// Set when a connection went over its control-frame limit.
#[derive(Debug, Default)]
pub struct Tripped {
    flag: AtomicBool,
    notify: Notify,
}

impl Tripped {
    fn trip(&self) {
        self.flag.store(true, Ordering::Release);
        self.notify.notify_one();
    }

    /// Resolves once the limit was exceeded.
    pub async fn wait(&self) {
        while !self.flag.load(Ordering::Acquire) {
            self.notify.notified().await;
        }
    }
}

/// The decrypted stream of a server connection, metered on its way to h2.
/// Once tripped it delivers nothing more: the frames h2 already has are
/// the last it reads, while the connection's task sends GOAWAY.
pub struct Guarded<T> {
    inner: T,
    meter: FrameMeter,
    tripped: Arc<Tripped>,
}

impl<T> Guarded<T> {
    pub fn new(inner: T, limit: ControlFrameLimit) -> (Self, Arc<Tripped>) {
        let tripped = Arc::new(Tripped::default());
        let guarded = Self {
            inner,
            meter: FrameMeter::new(limit, Instant::now()),
            tripped: tripped.clone(),
        };
        (guarded, tripped)
    }

    pub fn get_ref(&self) -> &T {
        &self.inner
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Guarded<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.tripped.flag.load(Ordering::Acquire) {
            // The task that sends GOAWAY wakes the connection; nothing more
            // is read from a peer that went over its limit.
            return Poll::Pending;
        }
        let before = buf.filled().len();
        let this = &mut *self;
        let result = Pin::new(&mut this.inner).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = &result
            && !this.meter.feed(&buf.filled()[before..], Instant::now())
        {
            this.tripped.trip();
        }
        result
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Guarded<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// How long a connection that went over its limit has to take its GOAWAY.
pub const GOAWAY_GRACE: Duration = Duration::from_secs(1);

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(kind: u8, flags: u8, payload: &[u8]) -> Vec<u8> {
        let length = u32::try_from(payload.len()).expect("small").to_be_bytes();
        let mut bytes = vec![length[1], length[2], length[3], kind, flags, 0, 0, 0, 1];
        bytes.extend_from_slice(payload);
        bytes
    }

    fn preface() -> Vec<u8> {
        b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec()
    }

    const LIMIT: ControlFrameLimit = ControlFrameLimit {
        per_second: 10,
        burst: 5,
    };

    #[test]
    fn control_frames_past_the_burst_trip_and_data_never_does() {
        let now = Instant::now();
        let mut meter = FrameMeter::new(LIMIT, now);
        let mut stream = preface();
        // DATA with a payload that looks like a PING header must not count.
        for _ in 0..100 {
            stream.extend(frame(0x0, 0, &[0, 0, 8, PING, 0, 0, 0, 0, 0]));
        }
        // Acknowledgements do not count either.
        for _ in 0..100 {
            stream.extend(frame(PING, ACK_FLAG, &[0; 8]));
        }
        for _ in 0..5 {
            stream.extend(frame(PING, 0, &[0; 8]));
        }
        assert!(meter.feed(&stream, now), "within the burst");
        assert!(!meter.feed(&frame(WINDOW_UPDATE, 0, &[0, 0, 0, 1]), now));
    }

    #[test]
    fn frames_that_carry_nothing_count_and_useful_ones_do_not() {
        let now = Instant::now();
        let generous = ControlFrameLimit {
            per_second: 1,
            burst: 1_000,
        };
        let spent = |frames: &[Vec<u8>]| {
            let mut meter = FrameMeter::new(generous, now);
            let mut stream = preface();
            for frame in frames {
                stream.extend_from_slice(frame);
            }
            assert!(meter.feed(&stream, now));
            1_000.0 - meter.bucket.tokens()
        };
        let block = [0x82, 0x86, 0x84];
        // A request in one HEADERS frame, its data, and the empty DATA
        // frame that ends it: nothing spent.
        let useful = [
            frame(HEADERS, END_HEADERS_FLAG, &block),
            frame(DATA, 0, &[1, 2, 3]),
            frame(DATA, END_STREAM_FLAG, &[]),
        ];
        assert_eq!(spent(&useful), 0.0);
        // Each of these costs one token.
        for (what, costly) in [
            ("empty DATA", frame(DATA, 0, &[])),
            ("empty HEADERS", frame(HEADERS, END_HEADERS_FLAG, &[])),
            ("HEADERS to be continued", frame(HEADERS, 0, &block)),
            (
                "CONTINUATION",
                frame(CONTINUATION, END_HEADERS_FLAG, &block),
            ),
            ("empty CONTINUATION", frame(CONTINUATION, 0, &[])),
            ("GOAWAY", frame(GOAWAY, 0, &[0; 8])),
        ] {
            assert_eq!(spent(&[costly]), 1.0, "{what}");
        }
    }

    #[test]
    fn a_flood_of_empty_data_frames_trips() {
        let now = Instant::now();
        let mut meter = FrameMeter::new(LIMIT, now);
        let mut stream = preface();
        for _ in 0..5 {
            stream.extend(frame(DATA, 0, &[]));
        }
        assert!(meter.feed(&stream, now), "within the burst");
        assert!(!meter.feed(&frame(DATA, 0, &[]), now));
    }

    #[test]
    fn headers_split_across_reads_are_read_whole() {
        let now = Instant::now();
        let mut meter = FrameMeter::new(LIMIT, now);
        let mut stream = preface();
        for kind in [SETTINGS, PRIORITY, RST_STREAM, 0xf0, PING, SETTINGS] {
            stream.extend(frame(kind, 0, &[1, 2, 3, 4, 5]));
        }
        // One byte at a time: the sixth control frame trips, not before.
        let mut results = stream.iter().map(|byte| meter.feed(&[*byte], now));
        let tripped_at = results.position(|ok| !ok);
        assert_eq!(tripped_at, Some(stream.len() - 5 - 1));
    }
}
