//! Splicing two byte streams together: both directions at once, a half-close
//! on one side passed on to the other, an idle timeout, byte counts that
//! survive errors, and a watch that reports a connection which holds bytes
//! one side does not take and moves none of them ([`StallWatch`]).
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
    /// A side began holding bytes the memory budget had no room for.
    OverBudget,
    Error(io::Error),
}

/// One direction of a spliced connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    ClientToBackend,
    BackendToClient,
}

impl Flow {
    pub fn as_str(self) -> &'static str {
        match self {
            Flow::ClientToBackend => "client_to_backend",
            Flow::BackendToClient => "backend_to_client",
        }
    }
}

/// Told when a spliced connection stops making progress while it holds
/// bytes (read from one side, not taken by the other for a whole watch
/// period), and when it moves again: what makes a stall visible while it
/// lasts, not only when the connection ends. `()` watches nothing.
pub trait StallWatch {
    /// `flow` has held `held` bytes its writer did not take, and written
    /// none, for at least the watch period.
    fn stalled(&mut self, flow: Flow, held: usize);
    /// The stalled direction wrote again, or the splice ended, `stalled_for`
    /// after the stall was first seen.
    fn resumed(&mut self, stalled_for: Duration);
}

impl StallWatch for () {
    fn stalled(&mut self, _flow: Flow, _held: usize) {}
    fn resumed(&mut self, _stalled_for: Duration) {}
}

/// Charged for what a spliced connection may hold while it holds bytes
/// ([`super::memory`]): told when a direction starts holding bytes its
/// writer pushed back (`true`), and when neither does any more or the
/// splice ends (`false`). Refusing the charge (returning `false` when told
/// `true`) ends the splice ([`SpliceEnd::OverBudget`]).
pub trait MemoryCharge {
    fn holding(&mut self, holds: bool) -> bool;
}

impl MemoryCharge for () {
    fn holding(&mut self, _holds: bool) -> bool {
        true
    }
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
        watch: (),
        watch_every_ms: 0,
        watch_armed: false,
        stalled: None,
        stalled_periods: 0,
        charged: false,
    }
}

/// The future [`splice`] returns. A plain struct rather than an `async fn`:
/// an `async fn` keeps a second copy of its arguments beside its locals, and
/// this future lives as long as the connection. It is `Unpin` (the timer is
/// boxed), so a caller can await it by reference instead of moving it again.
pub struct Splice<C, B, W = ()> {
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
    /// The one timer: the idle deadline, the stall timeout's period, and
    /// the watch period while a direction holds bytes.
    idle: Pin<Box<Sleep>>,
    watch: W,
    /// The watch period in milliseconds; 0: not watched. (Small fields:
    /// this future lives as long as the connection.)
    watch_every_ms: u32,
    /// The timer is set within a watch period: a direction held bytes.
    watch_armed: bool,
    /// The stalled direction (sampling pauses while it is).
    stalled: Option<Flow>,
    /// Watch periods the stall has lasted: its length, to a period.
    stalled_periods: u32,
    /// The watch is charged for bytes held ([`MemoryCharge`]).
    charged: bool,
}

impl<C, B> Splice<C, B> {
    /// Reports to `watch` a direction that holds bytes and writes none of
    /// them for `every` (seen within twice that). The timer is only moved
    /// to the watch period when a direction holds bytes its writer pushed
    /// back, so an idle connection never wakes for it.
    pub fn watch<W: StallWatch>(self, every: Duration, watch: W) -> Splice<C, B, W> {
        Splice {
            client: self.client,
            backend: self.backend,
            up: self.up,
            down: self.down,
            idle_timeout: self.idle_timeout,
            stall_timeout: self.stall_timeout,
            last_activity: self.last_activity,
            idle: self.idle,
            watch,
            watch_every_ms: u32::try_from(every.as_millis()).unwrap_or(u32::MAX),
            watch_armed: false,
            stalled: None,
            stalled_periods: 0,
            charged: false,
        }
    }
}

impl<C, B, W> Splice<C, B, W> {
    /// The watch, back once the splice is over (it may own what the
    /// connection's log line needs).
    pub fn into_watch(self) -> W {
        self.watch
    }

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

impl<C, B, W> Future for Splice<C, B, W>
where
    C: SpliceIo,
    B: SpliceIo,
    W: StallWatch + MemoryCharge + Unpin,
{
    type Output = SpliceOutcome;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<SpliceOutcome> {
        let this = self.get_mut();
        let end = ready!(this.poll_end(cx));
        this.end_stall();
        if this.charged {
            this.charged = false;
            this.watch.holding(false);
        }
        Poll::Ready(SpliceOutcome {
            client_to_backend: this.up.bytes,
            backend_to_client: this.down.bytes,
            end,
        })
    }
}

impl<C, B, W> Splice<C, B, W>
where
    C: SpliceIo,
    B: SpliceIo,
    W: StallWatch + MemoryCharge,
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
        // Charged on the change only: a flow whose writer keeps up never
        // holds bytes across a poll, and is never charged.
        let holds = self.holds_unsent();
        if holds != self.charged {
            if !self.watch.holding(holds) {
                return Poll::Ready(SpliceEnd::OverBudget);
            }
            self.charged = holds;
        }
        if self.moved() != moved {
            self.last_activity = Instant::now();
            self.note_progress();
        }
        self.arm_watch();
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
            let mut next = idle_deadline;
            if let Some(stall) = self.stall_timeout {
                let stall_deadline = self.last_activity + stall;
                if now >= stall_deadline && self.holds_unsent() {
                    return Poll::Ready(SpliceEnd::Stalled);
                }
                next = next.min(if stall_deadline > now {
                    stall_deadline
                } else {
                    now + stall
                });
            }
            if let Some(every) = self.watch_every().filter(|_| self.watch_armed) {
                self.check_progress();
                if self.stalled.is_some() || self.holds_unsent() {
                    next = next.min(now + every);
                } else {
                    self.watch_armed = false;
                }
            }
            self.idle.as_mut().reset(next);
        }
        Poll::Pending
    }

    /// Sets the timer within a watch period when a direction starts holding
    /// bytes its writer pushed back (once per such spell, not per write).
    fn arm_watch(&mut self) {
        if self.watch_armed || !self.holds_unsent() {
            return;
        }
        let Some(every) = self.watch_every() else {
            return;
        };
        let now = Instant::now();
        self.watch_armed = true;
        self.sample();
        if now + every < self.idle.deadline() {
            self.idle.as_mut().reset(now + every);
        }
    }

    /// At a watch period's end: a direction that held bytes at the last
    /// sample, holds bytes now and wrote nothing in between is stalled.
    fn check_progress(&mut self) {
        if self.stalled.is_some() {
            self.stalled_periods = self.stalled_periods.saturating_add(1);
            return;
        }
        for (flow, direction) in [
            (Flow::ClientToBackend, &self.up),
            (Flow::BackendToClient, &self.down),
        ] {
            if direction.stuck() {
                self.stalled = Some(flow);
                self.stalled_periods = 1;
                let held = direction.held.as_ref().map_or(0, Buf::remaining);
                self.watch.stalled(flow, held);
                return;
            }
        }
        self.sample();
    }

    /// How long the stall has lasted, to a watch period.
    fn stalled_for(&self) -> Duration {
        self.watch_every()
            .unwrap_or_default()
            .saturating_mul(self.stalled_periods)
    }

    fn watch_every(&self) -> Option<Duration> {
        Some(Duration::from_millis(u64::from(self.watch_every_ms))).filter(|d| !d.is_zero())
    }

    fn sample(&mut self) {
        self.up.sample();
        self.down.sample();
    }

    /// Bytes moved: a stalled direction that wrote again has resumed.
    fn note_progress(&mut self) {
        let Some(flow) = self.stalled else {
            return;
        };
        let direction = match flow {
            Flow::ClientToBackend => &self.up,
            Flow::BackendToClient => &self.down,
        };
        if direction.sent != direction.sent_at_check {
            self.end_stall();
        }
    }

    /// Tells the watch that a stall, if any, is over.
    fn end_stall(&mut self) {
        if self.stalled.take().is_some() {
            let stalled_for = self.stalled_for();
            self.watch.resumed(stalled_for);
        }
    }

    /// Either direction holds read bytes its writer has not taken.
    fn holds_unsent(&self) -> bool {
        self.up.holds_unsent() || self.down.holds_unsent()
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
    /// `sent` and whether bytes were held, at the watch's last sample.
    sent_at_check: u64,
    held_at_check: bool,
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

    fn sample(&mut self) {
        self.sent_at_check = self.sent;
        self.held_at_check = self.holds_unsent();
    }

    /// Held bytes at the last sample and now, and wrote none in between.
    fn stuck(&self) -> bool {
        self.held_at_check && self.holds_unsent() && self.sent == self.sent_at_check
    }

    #[cfg(test)]
    fn holds_buffer(&self) -> bool {
        self.held.is_some()
    }
}

#[cfg(test)]
#[path = "splice_tests.rs"]
mod tests;
