//! One HTTP/2 CONNECT stream as a byte stream: `DATA` frames in, `DATA`
//! frames out, `END_STREAM` as a half-close.
//!
//! The tunnel drives the `h2` crate directly rather than through hyper's
//! upgrade machinery, which gives every upgraded stream its own task and
//! channel to feed the send half and copies every write. Here a write goes
//! straight to the stream's send half under HTTP/2 flow control, and a
//! splice ([`SpliceIo`]) hands chunks over without copying: a received
//! `DATA` frame is written on from h2's own bytes, and a lent read buffer
//! is sent as a frame and returns to the pool once h2 has written it.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::{Buf, Bytes};
use h2::{Reason, RecvStream, SendStream};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::net::buffer::Chunk;
use crate::net::splice::SpliceIo;

/// Lent chunks smaller than this are copied rather than handed to h2: a
/// copy of a few KiB costs less than a 64 KiB buffer held until h2 writes it.
const COPY_BELOW: usize = 16 * 1024;

/// An open CONNECT stream, either end of the tunnel.
pub struct H2Stream {
    send: SendStream<Chunk>,
    recv: RecvStream,
    /// Received bytes not read yet (the rest of the last `DATA` frame).
    unread: Bytes,
    /// `END_STREAM` was sent: the sending half is closed.
    finished: bool,
}

impl H2Stream {
    pub fn new(send: SendStream<Chunk>, recv: RecvStream) -> Self {
        Self {
            send,
            recv,
            unread: Bytes::new(),
            finished: false,
        }
    }

    /// The next received bytes, `None` at the end of the stream.
    fn poll_received(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<Option<Bytes>>> {
        if !self.unread.is_empty() {
            return Poll::Ready(Ok(Some(std::mem::take(&mut self.unread))));
        }
        loop {
            match ready!(self.recv.poll_data(cx)) {
                Some(Ok(data)) if data.is_empty() => {}
                Some(Ok(data)) => {
                    // Credit goes back as soon as a frame is taken: the
                    // splice takes the next one only once this one is
                    // written on, so at most a frame waits beyond the window.
                    let _ = self.recv.flow_control().release_capacity(data.len());
                    return Poll::Ready(Ok(Some(data)));
                }
                // END_STREAM: the peer half-closed.
                None => return Poll::Ready(Ok(None)),
                // A reset with NO_ERROR or CANCEL ends the stream the way a
                // FIN would; the reads so far stand.
                Some(Err(error)) => {
                    return Poll::Ready(match error.reason() {
                        Some(Reason::NO_ERROR | Reason::CANCEL) => Ok(None),
                        _ => Err(io_error(error)),
                    });
                }
            }
        }
    }

    /// Waits until the stream may send (some window is open), asking for
    /// `len` bytes of it.
    fn poll_send_capacity(&mut self, cx: &mut Context<'_>, len: usize) -> Poll<io::Result<()>> {
        if self.finished {
            return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
        }
        self.send.reserve_capacity(len);
        while self.send.capacity() == 0 {
            match ready!(self.send.poll_capacity(cx)) {
                Some(Ok(_)) => {}
                Some(Err(error)) => return Poll::Ready(Err(io_error(error))),
                None => return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into())),
            }
        }
        Poll::Ready(Ok(()))
    }
}

/// The peer's reset, or a connection error, as the error a socket would give.
fn io_error(error: h2::Error) -> io::Error {
    if error.is_io() {
        return error
            .into_io()
            .unwrap_or_else(|| io::Error::other("http/2 connection failed"));
    }
    let kind = match error.reason() {
        Some(Reason::STREAM_CLOSED) => io::ErrorKind::BrokenPipe,
        Some(Reason::CANCEL | Reason::NO_ERROR) => io::ErrorKind::ConnectionReset,
        _ => io::ErrorKind::Other,
    };
    io::Error::new(kind, error)
}

impl SpliceIo for H2Stream {
    fn poll_fill(
        &mut self,
        cx: &mut Context<'_>,
        slot: &mut Option<Chunk>,
    ) -> Poll<io::Result<usize>> {
        match ready!(self.poll_received(cx))? {
            Some(data) => {
                let len = data.len();
                *slot = Some(Chunk::Shared(data));
                Poll::Ready(Ok(len))
            }
            None => Poll::Ready(Ok(0)),
        }
    }

    fn poll_send(
        &mut self,
        cx: &mut Context<'_>,
        slot: &mut Option<Chunk>,
    ) -> Poll<io::Result<usize>> {
        let len = slot.as_ref().map_or(0, Buf::remaining);
        if len == 0 {
            return Poll::Ready(Ok(0));
        }
        ready!(self.poll_send_capacity(cx, len))?;
        // The whole chunk goes, even past the window: h2 holds the excess
        // until the peer opens it, so at most one chunk waits per stream.
        let chunk = match slot.take() {
            // A few bytes in a lent buffer are copied out instead: the
            // buffer stays with the splice (and goes back to the pool when
            // it waits) rather than waiting in h2's queue, so thousands of
            // chatty connections do not each pin a buffer's worth of memory.
            Some(Chunk::Lent { buffer, start, end }) if end - start < COPY_BELOW => {
                let data = Bytes::copy_from_slice(&buffer[start..end]);
                *slot = Some(Chunk::Lent {
                    buffer,
                    start: end,
                    end,
                });
                Chunk::Shared(data)
            }
            Some(chunk) => chunk,
            None => return Poll::Ready(Ok(0)),
        };
        self.send.send_data(chunk, false).map_err(io_error)?;
        Poll::Ready(Ok(len))
    }
}

impl AsyncRead for H2Stream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        let Some(mut data) = ready!(this.poll_received(cx))? else {
            return Poll::Ready(Ok(()));
        };
        let count = data.len().min(buf.remaining());
        buf.put_slice(&data[..count]);
        data.advance(count);
        this.unread = data;
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for H2Stream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if buf.is_empty() {
            return Poll::Ready(Ok(0));
        }
        let this = &mut *self;
        ready!(this.poll_send_capacity(cx, buf.len()))?;
        // Within the window: an idle stream then pins none of the
        // connection's window for data it never sends.
        let count = this.send.capacity().min(buf.len());
        let data = Chunk::Shared(Bytes::copy_from_slice(&buf[..count]));
        this.send.send_data(data, false).map_err(io_error)?;
        Poll::Ready(Ok(count))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // The connection's task writes frames out as soon as they are queued.
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if !this.finished {
            this.finished = true;
            this.send
                .send_data(Chunk::Shared(Bytes::new()), true)
                .map_err(io_error)?;
        }
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
#[path = "stream_tests.rs"]
mod tests;
