//! Splicing two byte streams together: both directions at once, a half-close
//! on one side passed on to the other, an idle timeout, and byte counts that
//! survive errors.
//!
//! A direction borrows a copy buffer ([`super::buffer`]) when it reads and
//! gives it back once everything read is written and the next read would
//! block, so an idle connection holds no buffer: it costs its sockets and
//! this future, not two buffers. Bytes move as [`Chunk`]s through
//! [`SpliceIo`], so a side that receives or sends owned bytes (an HTTP/2
//! tunnel stream) takes or hands over a chunk instead of copying it.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::Buf;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::{Instant, Sleep};

use super::buffer::{Buffer, Chunk};

/// How a splice ended.
#[derive(Debug)]
pub enum SpliceEnd {
    /// Both sides closed their halves.
    Closed,
    /// Nothing moved for the idle timeout.
    IdleTimeout,
    /// A side held bytes the other would not take for the stall timeout.
    Stalled,
    Error(io::Error),
}

/// What a splice moved, and how it ended.
#[derive(Debug)]
pub struct SpliceOutcome {
    pub client_to_backend: u64,
    pub backend_to_client: u64,
    pub end: SpliceEnd,
}

/// Copies between `client` and `backend` until both directions are done, an
/// error occurs, or nothing moves for `idle_timeout`.
pub fn splice<C, B>(client: C, backend: B, idle_timeout: Duration) -> Splice<C, B>
where
    C: SpliceIo,
    B: SpliceIo,
{
    let now = Instant::now();
    Splice {
        client,
        backend,
        up: Direction::default(),
        down: Direction::default(),
        idle_timeout,
        stall_timeout: None,
        last_activity: now,
        idle: Box::pin(tokio::time::sleep_until(now + idle_timeout)),
    }
}

/// The future [`splice`] returns. A plain struct rather than an `async fn`:
/// an `async fn` keeps a second copy of its arguments beside its locals, and
/// this future lives as long as the connection. It is `Unpin` (the timer is
/// boxed), so a caller can await it by reference instead of moving it again.
pub struct Splice<C, B> {
    client: C,
    backend: B,
    /// Client to backend.
    up: Direction,
    /// Backend to client.
    down: Direction,
    idle_timeout: Duration,
    /// How long a direction may hold bytes its writer does not take (a
    /// peer that stopped reading, a zero flow-control window): `None`, as
    /// long as the idle timeout.
    stall_timeout: Option<Duration>,
    last_activity: Instant,
    idle: Pin<Box<Sleep>>,
}

impl<C, B> Splice<C, B> {
    /// Ends the splice when a side holds bytes the other does not take for
    /// `timeout`, even while the idle timeout is far off.
    pub fn stall_timeout(mut self, timeout: Duration) -> Self {
        self.stall_timeout = Some(timeout);
        // The timer wakes at least once per stall period; see `poll_end`.
        let first = self.last_activity + timeout.min(self.idle_timeout);
        self.idle.as_mut().reset(first);
        self
    }
}

impl<C, B> Future for Splice<C, B>
where
    C: SpliceIo,
    B: SpliceIo,
{
    type Output = SpliceOutcome;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<SpliceOutcome> {
        let this = self.get_mut();
        let end = ready!(this.poll_end(cx));
        Poll::Ready(SpliceOutcome {
            client_to_backend: this.up.bytes,
            backend_to_client: this.down.bytes,
            end,
        })
    }
}

impl<C, B> Splice<C, B>
where
    C: SpliceIo,
    B: SpliceIo,
{
    fn poll_end(&mut self, cx: &mut Context<'_>) -> Poll<SpliceEnd> {
        let moved = self.moved();
        let up = self.up.poll_copy(cx, &mut self.client, &mut self.backend);
        if let Poll::Ready(Err(error)) = up {
            return Poll::Ready(SpliceEnd::Error(error));
        }
        let down = self.down.poll_copy(cx, &mut self.backend, &mut self.client);
        if let Poll::Ready(Err(error)) = down {
            return Poll::Ready(SpliceEnd::Error(error));
        }
        if self.up.done && self.down.done {
            return Poll::Ready(SpliceEnd::Closed);
        }
        if self.moved() != moved {
            self.last_activity = Instant::now();
        }
        // The timer is moved when it fires, not on every read or every
        // time a writer pushes back: a busy connection touches the timer
        // wheel once per period. With a stall timeout the period is the
        // stall timeout, and whether a side holds unsent bytes is judged
        // when the timer fires.
        while self.idle.as_mut().poll(cx).is_ready() {
            let now = Instant::now();
            let idle_deadline = self.last_activity + self.idle_timeout;
            if now >= idle_deadline {
                return Poll::Ready(SpliceEnd::IdleTimeout);
            }
            let Some(stall) = self.stall_timeout else {
                self.idle.as_mut().reset(idle_deadline);
                continue;
            };
            let stall_deadline = self.last_activity + stall;
            if now >= stall_deadline && (self.up.holds_unsent() || self.down.holds_unsent()) {
                return Poll::Ready(SpliceEnd::Stalled);
            }
            let next = if stall_deadline > now {
                stall_deadline
            } else {
                now + stall
            };
            self.idle.as_mut().reset(next.min(idle_deadline));
        }
        Poll::Pending
    }

    /// Bytes read and written so far, both ways: what counts as activity.
    fn moved(&self) -> u64 {
        self.up.bytes + self.down.bytes + self.up.sent + self.down.sent
    }
}

/// One side of a splice. Every stream reads into a lent buffer and writes
/// from a slice by default; a stream that receives or sends owned bytes
/// (an HTTP/2 stream: `DATA` frames are `Bytes`) overrides the two methods
/// to hand chunks over without copying them.
pub trait SpliceIo: AsyncRead + AsyncWrite + Unpin {
    /// Reads the next bytes into `slot`, reusing the buffer of an emptied
    /// lent chunk there. `Ready(Ok(0))` is the end of the stream. On
    /// `Pending` the slot may be left empty.
    fn poll_fill(
        &mut self,
        cx: &mut Context<'_>,
        slot: &mut Option<Chunk>,
    ) -> Poll<io::Result<usize>> {
        let mut buffer = slot
            .take()
            .and_then(Chunk::into_buffer)
            .unwrap_or_else(Buffer::take);
        let mut read = ReadBuf::new(&mut buffer);
        // On `Pending` the buffer is dropped: back to the pool.
        ready!(Pin::new(&mut *self).poll_read(cx, &mut read))?;
        let len = read.filled().len();
        if len > 0 {
            *slot = Some(Chunk::lent(buffer, len));
        }
        Poll::Ready(Ok(len))
    }

    /// Writes some of the chunk in `slot` and returns how much: either
    /// advancing the chunk, or taking it whole (leaving the slot empty).
    fn poll_send(
        &mut self,
        cx: &mut Context<'_>,
        slot: &mut Option<Chunk>,
    ) -> Poll<io::Result<usize>> {
        let Some(chunk) = slot else {
            return Poll::Ready(Ok(0));
        };
        let written = ready!(Pin::new(&mut *self).poll_write(cx, chunk.chunk()))?;
        chunk.advance(written);
        Poll::Ready(Ok(written))
    }
}

impl SpliceIo for TcpStream {}

impl<T> SpliceIo for TokioIo<T> where TokioIo<T>: AsyncRead + AsyncWrite + Unpin {}

#[cfg(test)]
impl SpliceIo for tokio::io::DuplexStream {}

/// One direction of a splice: reads from one side, writes to the other.
#[derive(Default)]
struct Direction {
    /// Bytes read and not yet (all) written; or, once written, the emptied
    /// chunk whose buffer the next read reuses.
    held: Option<Chunk>,
    /// The reader reached its end.
    eof: bool,
    /// The end was passed on (the writer is shut down): nothing more to do.
    done: bool,
    /// Bytes were written since the last flush.
    need_flush: bool,
    /// Bytes read so far.
    bytes: u64,
    /// Bytes written so far.
    sent: u64,
}

impl Direction {
    /// Copies until the reader would block (`Pending`, holding no buffer
    /// unless the writer is the one blocking), the end has been passed on
    /// (`Ready(Ok)`), or either side fails.
    fn poll_copy<R, W>(
        &mut self,
        cx: &mut Context<'_>,
        reader: &mut R,
        writer: &mut W,
    ) -> Poll<io::Result<()>>
    where
        R: SpliceIo + ?Sized,
        W: SpliceIo + ?Sized,
    {
        if self.done {
            return Poll::Ready(Ok(()));
        }
        loop {
            while self.held.as_ref().is_some_and(Buf::has_remaining) {
                let written = ready!(writer.poll_send(cx, &mut self.held))?;
                if written == 0 {
                    return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
                }
                self.sent += written as u64;
                self.need_flush = true;
            }
            if self.eof {
                self.held = None;
                if self.need_flush {
                    ready!(Pin::new(&mut *writer).poll_flush(cx))?;
                    self.need_flush = false;
                }
                ready!(Pin::new(&mut *writer).poll_shutdown(cx))?;
                self.done = true;
                return Poll::Ready(Ok(()));
            }
            match reader.poll_fill(cx, &mut self.held) {
                Poll::Ready(Ok(0)) => {
                    self.eof = true;
                }
                Poll::Ready(Ok(read)) => self.bytes += read as u64,
                Poll::Ready(Err(error)) => return Poll::Ready(Err(error)),
                Poll::Pending => {
                    // Waiting for bytes: nothing is held meanwhile.
                    self.held = None;
                    if self.need_flush {
                        ready!(Pin::new(&mut *writer).poll_flush(cx))?;
                        self.need_flush = false;
                    }
                    return Poll::Pending;
                }
            }
        }
    }

    /// Read bytes are waiting for the writer.
    fn holds_unsent(&self) -> bool {
        self.held.as_ref().is_some_and(Buf::has_remaining)
    }

    #[cfg(test)]
    fn holds_buffer(&self) -> bool {
        self.held.is_some()
    }
}

#[cfg(test)]
#[path = "splice_tests.rs"]
mod tests;
