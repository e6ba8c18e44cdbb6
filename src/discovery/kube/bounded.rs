//! A bound on what an API server may make the gateway hold: no line of a
//! response (a watch event, a whole list page, an error) may grow past
//! [`MAX_LINE`] bytes after decompression. A remote cluster's API server is
//! a member's, not the gateway's: without the bound, one endless line or
//! one gzip bomb (kilobytes inflating to gigabytes) would be buffered
//! whole by the client before a single object is decoded.

use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};
use tower::BoxError;

/// The longest line a response may hold. A list page of 500 objects is
/// one line; the largest object etcd stores is 1.5 MiB by default, and
/// Strait asks for pages of slim objects, well under this.
pub(super) const MAX_LINE: usize = 64 * 1024 * 1024;

/// A response body that fails once a line is longer than its bound.
pub(super) struct LineBounded<B> {
    inner: Pin<Box<B>>,
    /// Bytes since the last newline (or the start).
    line: usize,
    limit: usize,
}

/// A line longer than the bound.
#[derive(Debug, thiserror::Error)]
#[error("the API server sent a line longer than {limit} bytes; the response is dropped")]
pub(super) struct LineTooLong {
    limit: usize,
}

impl<B> LineBounded<B> {
    pub(super) fn new(inner: B) -> Self {
        Self::with_limit(inner, MAX_LINE)
    }

    fn with_limit(inner: B, limit: usize) -> Self {
        Self {
            inner: Box::pin(inner),
            line: 0,
            limit,
        }
    }

    /// Counts `data`'s lines; false when one is over the limit.
    fn admit(&mut self, data: &[u8]) -> bool {
        let mut rest = data;
        while let Some(newline) = rest.iter().position(|byte| *byte == b'\n') {
            if self.line + newline > self.limit {
                return false;
            }
            self.line = 0;
            rest = &rest[newline + 1..];
        }
        self.line += rest.len();
        self.line <= self.limit
    }
}

impl<B> Body for LineBounded<B>
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        let frame = match ready!(this.inner.as_mut().poll_frame(cx)) {
            Some(Ok(frame)) => frame,
            Some(Err(error)) => return Poll::Ready(Some(Err(error.into()))),
            None => return Poll::Ready(None),
        };
        if let Some(data) = frame.data_ref()
            && !this.admit(data)
        {
            let limit = this.limit;
            return Poll::Ready(Some(Err(Box::new(LineTooLong { limit }))));
        }
        Poll::Ready(Some(Ok(frame)))
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::{BodyExt, StreamBody};

    async fn read(chunks: &[&'static [u8]], limit: usize) -> Result<usize, BoxError> {
        let frames = chunks
            .iter()
            .map(|chunk| Ok::<_, std::convert::Infallible>(Frame::data(Bytes::from_static(chunk))));
        let body =
            LineBounded::with_limit(StreamBody::new(futures_util::stream::iter(frames)), limit);
        Ok(body.collect().await?.to_bytes().len())
    }

    #[tokio::test]
    async fn lines_within_the_bound_pass_in_any_chunking() {
        assert_eq!(read(&[b"12345\n1234", b"5\n12345"], 5).await.ok(), Some(17));
        assert_eq!(
            read(&[b"1", b"2", b"3", b"4", b"5", b"\n"], 5).await.ok(),
            Some(6)
        );
        assert_eq!(read(&[b"\n\n\n"], 0).await.ok(), Some(3));
    }

    #[tokio::test]
    async fn a_line_past_the_bound_fails_the_body() {
        // Across chunks, within one, and as the unterminated tail.
        for chunks in [
            &[b"123".as_slice(), b"456\n"][..],
            &[b"1\n123456\n1".as_slice()][..],
            &[b"12\n".as_slice(), b"123", b"456"][..],
        ] {
            let error = read(chunks, 5).await.expect_err("over the bound");
            assert!(error.to_string().contains("longer than 5 bytes"), "{error}");
        }
    }
}
