//! Splicing two byte streams together: both directions at once, a half-close
//! on one side passed on to the other, an idle timeout, and byte counts that
//! survive errors.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;

/// Copy buffer per direction. Small enough that idle connections stay
/// cheap, large enough for bulk flows to move a TLS record at a time.
const BUFFER_SIZE: usize = 16 * 1024;

/// How a splice ended.
#[derive(Debug)]
pub enum SpliceEnd {
    /// Both sides closed their halves.
    Closed,
    /// Nothing moved for the idle timeout.
    IdleTimeout,
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
pub async fn splice<C, B>(client: C, backend: B, idle_timeout: Duration) -> SpliceOutcome
where
    C: AsyncRead + AsyncWrite + Unpin,
    B: AsyncRead + AsyncWrite + Unpin,
{
    let activity = Arc::new(Activity::new());
    let mut client = Counted::new(client, activity.clone());
    let mut backend = Counted::new(backend, activity.clone());
    let copy = tokio::io::copy_bidirectional_with_sizes(
        &mut client,
        &mut backend,
        BUFFER_SIZE,
        BUFFER_SIZE,
    );
    let end = tokio::select! {
        result = copy => match result {
            Ok(_) => SpliceEnd::Closed,
            Err(error) => SpliceEnd::Error(error),
        },
        () = activity.idle_for(idle_timeout) => SpliceEnd::IdleTimeout,
    };
    SpliceOutcome {
        client_to_backend: client.bytes_read,
        backend_to_client: backend.bytes_read,
        end,
    }
}

/// When bytes last moved, in milliseconds since the splice started.
struct Activity {
    started: Instant,
    last_ms: AtomicU64,
}

impl Activity {
    fn new() -> Self {
        Self {
            started: Instant::now(),
            last_ms: AtomicU64::new(0),
        }
    }

    fn touch(&self) {
        let elapsed = u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_ms.store(elapsed, Ordering::Relaxed);
    }

    /// Resolves once nothing has moved for `timeout`; wakes only at deadlines.
    async fn idle_for(&self, timeout: Duration) {
        loop {
            let last = Duration::from_millis(self.last_ms.load(Ordering::Relaxed));
            let deadline = self.started + last + timeout;
            if Instant::now() >= deadline {
                return;
            }
            tokio::time::sleep_until(deadline).await;
        }
    }
}

/// A stream that counts the bytes read from it and records activity.
struct Counted<S> {
    inner: S,
    activity: Arc<Activity>,
    bytes_read: u64,
}

impl<S> Counted<S> {
    fn new(inner: S, activity: Arc<Activity>) -> Self {
        Self {
            inner,
            activity,
            bytes_read: 0,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Counted<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let poll = Pin::new(&mut self.inner).poll_read(cx, buf);
        let read = buf.filled().len() - before;
        if read > 0 {
            self.bytes_read += read as u64;
            self.activity.touch();
        }
        poll
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Counted<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt, duplex};

    #[tokio::test]
    async fn half_close_is_passed_on_and_the_other_direction_keeps_flowing() {
        let (mut client, client_end) = duplex(1024);
        let (backend_end, mut backend) = duplex(1024);
        let splice = tokio::spawn(splice(client_end, backend_end, Duration::from_secs(5)));

        client.write_all(b"request").await.expect("write");
        client.shutdown().await.expect("half-close");
        let mut request = Vec::new();
        backend
            .read_to_end(&mut request)
            .await
            .expect("backend sees EOF");
        assert_eq!(request, b"request");

        // The client closed its sending half; it still receives.
        backend
            .write_all(b"response after half-close")
            .await
            .expect("write");
        backend.shutdown().await.expect("close");
        let mut response = Vec::new();
        client.read_to_end(&mut response).await.expect("read");
        assert_eq!(response, b"response after half-close");

        let outcome = splice.await.expect("splice task");
        assert!(
            matches!(outcome.end, SpliceEnd::Closed),
            "{:?}",
            outcome.end
        );
        assert_eq!(outcome.client_to_backend, 7);
        assert_eq!(outcome.backend_to_client, 25);
    }

    #[tokio::test(start_paused = true)]
    async fn an_idle_splice_times_out_with_its_counts() {
        let (mut client, client_end) = duplex(1024);
        let (backend_end, mut backend) = duplex(1024);
        let splice = tokio::spawn(splice(client_end, backend_end, Duration::from_secs(30)));
        client.write_all(b"hello").await.expect("write");
        let mut buf = [0u8; 5];
        backend.read_exact(&mut buf).await.expect("read");
        let outcome = splice.await.expect("splice task");
        assert!(
            matches!(outcome.end, SpliceEnd::IdleTimeout),
            "{:?}",
            outcome.end
        );
        assert_eq!(outcome.client_to_backend, 5);
    }
}
