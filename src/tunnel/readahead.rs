//! Batched reads under TLS. rustls asks its socket for at most one record
//! (about 16 KiB) per read, so a bulk flow over the tunnel would cost one
//! `recv` per record. [`ReadAhead`] reads up to a full copy buffer at once
//! and serves rustls from it: a quarter of the system calls for one extra
//! copy in memory, which is cheaper. The buffer is borrowed from the copy
//! buffer pool only while it holds bytes, so an idle connection keeps none.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::proxy::buffer::{BUFFER_SIZE, Buffer};

/// A stream whose small reads are served from one large read.
pub struct ReadAhead<S> {
    inner: S,
    /// Bytes read from `inner` and not yet handed out, with their buffer.
    ahead: Option<Ahead>,
}

struct Ahead {
    buffer: Buffer,
    start: usize,
    end: usize,
}

impl<S> ReadAhead<S> {
    pub fn new(inner: S) -> Self {
        Self { inner, ahead: None }
    }

    #[cfg(test)]
    fn holds_buffer(&self) -> bool {
        self.ahead.is_some()
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for ReadAhead<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if this.ahead.is_none() {
            // A reader asking for a buffer's worth gains nothing from a copy.
            if out.remaining() >= BUFFER_SIZE {
                return Pin::new(&mut this.inner).poll_read(cx, out);
            }
            let mut buffer = Buffer::take();
            let mut read = ReadBuf::new(&mut buffer);
            // On `Pending` the buffer goes straight back to the pool.
            std::task::ready!(Pin::new(&mut this.inner).poll_read(cx, &mut read))?;
            let end = read.filled().len();
            if end == 0 {
                return Poll::Ready(Ok(()));
            }
            this.ahead = Some(Ahead {
                buffer,
                start: 0,
                end,
            });
        }
        if let Some(ahead) = &mut this.ahead {
            let count = (ahead.end - ahead.start).min(out.remaining());
            out.put_slice(&ahead.buffer[ahead.start..ahead.start + count]);
            ahead.start += count;
            if ahead.start == ahead.end {
                this.ahead = None;
            }
        }
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for ReadAhead<S> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt, duplex};

    #[tokio::test]
    async fn small_reads_are_served_from_one_large_read() {
        let (mut peer, stream) = duplex(256 * 1024);
        let mut stream = ReadAhead::new(stream);
        let sent: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        peer.write_all(&sent).await.expect("write");
        drop(peer);

        let mut first = [0u8; 1000];
        stream.read_exact(&mut first).await.expect("read");
        assert_eq!(&first[..], &sent[..1000]);
        // The rest of the first large read waits in the buffer.
        assert!(stream.holds_buffer());

        let mut rest = Vec::new();
        stream.read_to_end(&mut rest).await.expect("read");
        assert_eq!(rest, &sent[1000..]);
        assert!(!stream.holds_buffer(), "drained, at end of stream");
    }

    #[tokio::test]
    async fn an_idle_stream_holds_no_buffer() {
        let (mut peer, stream) = duplex(1024);
        let mut stream = ReadAhead::new(stream);
        peer.write_all(b"hello").await.expect("write");
        let mut got = [0u8; 16];
        let n = stream.read(&mut got).await.expect("read");
        assert_eq!(&got[..n], b"hello");
        assert!(!stream.holds_buffer());

        let waker = std::task::Waker::noop();
        let mut cx = Context::from_waker(waker);
        let mut space = [0u8; 16];
        let mut read = ReadBuf::new(&mut space);
        assert!(
            Pin::new(&mut stream)
                .poll_read(&mut cx, &mut read)
                .is_pending()
        );
        assert!(!stream.holds_buffer(), "waiting for bytes");
    }

    #[tokio::test]
    async fn writes_pass_through() {
        let (mut peer, stream) = duplex(1024);
        let mut stream = ReadAhead::new(stream);
        stream.write_all(b"out").await.expect("write");
        stream.shutdown().await.expect("shutdown");
        let mut got = Vec::new();
        peer.read_to_end(&mut got).await.expect("read");
        assert_eq!(got, b"out");
    }
}
