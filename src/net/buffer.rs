//! Copy buffers lent out per read, so an idle connection holds none.
//!
//! A spliced connection needs a buffer only from the moment a read returns
//! bytes until those bytes are written on; a connection waiting for its peer
//! needs nothing. Each worker thread keeps a few spare buffers: a direction
//! takes one when it reads, and gives it back as soon as it has written
//! everything and its next read would block. With thousands of mostly idle
//! connections the gateway holds a handful of buffers instead of two per
//! connection, which is what lets buffers be large enough for bulk flows
//! (fewer, larger system calls) without making idle connections expensive.

use std::cell::RefCell;
use std::ops::{Deref, DerefMut};

use bytes::{Buf, Bytes};

/// Size of one copy buffer: four TLS records, one full HTTP/2 DATA frame at
/// the tunnel's frame size, and a quarter of the syscalls of 16 KiB reads on
/// bulk flows.
pub const BUFFER_SIZE: usize = 64 * 1024;

/// Spare buffers kept per thread. A thread only needs as many as connections
/// it is copying for at one instant; a burst beyond that is freed on return.
const SPARES_PER_THREAD: usize = 16;

thread_local! {
    static SPARES: RefCell<Vec<Box<[u8]>>> = const { RefCell::new(Vec::new()) };
}

/// A copy buffer of [`BUFFER_SIZE`] bytes, returned to the current thread's
/// spares when dropped.
pub struct Buffer {
    bytes: Option<Box<[u8]>>,
}

impl Buffer {
    /// A spare buffer of this thread, or a new one.
    pub fn take() -> Buffer {
        let spare = SPARES
            .try_with(|spares| spares.borrow_mut().pop())
            .ok()
            .flatten();
        Buffer {
            bytes: Some(spare.unwrap_or_else(|| vec![0; BUFFER_SIZE].into_boxed_slice())),
        }
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        let Some(bytes) = self.bytes.take() else {
            return;
        };
        // During thread teardown the spares are gone: the buffer is freed.
        let _ = SPARES.try_with(|spares| {
            let mut spares = spares.borrow_mut();
            if spares.len() < SPARES_PER_THREAD {
                spares.push(bytes);
            }
        });
    }
}

impl Deref for Buffer {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        self.bytes.as_deref().unwrap_or_default()
    }
}

impl DerefMut for Buffer {
    fn deref_mut(&mut self) -> &mut [u8] {
        self.bytes.as_deref_mut().unwrap_or_default()
    }
}

/// Bytes on their way from one side of a splice to the other: read into a
/// lent [`Buffer`], or received already owned (an HTTP/2 `DATA` frame). It is
/// a [`Buf`], so a stream that sends owned bytes (HTTP/2) takes it whole
/// instead of copying it; a lent buffer returns to the pool once sent.
pub enum Chunk {
    Lent {
        buffer: Buffer,
        start: usize,
        end: usize,
    },
    Shared(Bytes),
}

impl Chunk {
    /// The first `len` bytes of `buffer`.
    pub fn lent(buffer: Buffer, len: usize) -> Chunk {
        let end = len.min(buffer.len());
        Chunk::Lent {
            buffer,
            start: 0,
            end,
        }
    }

    /// The buffer behind a lent chunk, to read into again.
    pub fn into_buffer(self) -> Option<Buffer> {
        match self {
            Chunk::Lent { buffer, .. } => Some(buffer),
            Chunk::Shared(_) => None,
        }
    }
}

impl Buf for Chunk {
    fn remaining(&self) -> usize {
        match self {
            Chunk::Lent { start, end, .. } => end - start,
            Chunk::Shared(bytes) => bytes.len(),
        }
    }

    fn chunk(&self) -> &[u8] {
        match self {
            Chunk::Lent { buffer, start, end } => &buffer[*start..*end],
            Chunk::Shared(bytes) => bytes,
        }
    }

    fn advance(&mut self, count: usize) {
        match self {
            Chunk::Lent { start, end, .. } => *start = (*start + count).min(*end),
            Chunk::Shared(bytes) => bytes.advance(count.min(bytes.len())),
        }
    }
}

/// Spare buffers the current thread holds (for tests).
#[cfg(test)]
pub(crate) fn spares() -> usize {
    SPARES.with(|spares| spares.borrow().len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_returned_buffer_is_lent_again() {
        // Tests run on their own threads, so these spares are this test's.
        let first = Buffer::take();
        assert_eq!(first.len(), BUFFER_SIZE);
        let address = first.as_ptr();
        drop(first);
        assert_eq!(spares(), 1);
        let again = Buffer::take();
        assert_eq!(again.as_ptr(), address);
        assert_eq!(spares(), 0);
    }

    #[test]
    fn a_lent_chunk_reads_its_bytes_and_gives_its_buffer_back() {
        let mut buffer = Buffer::take();
        buffer[..5].copy_from_slice(b"hello");
        let mut chunk = Chunk::lent(buffer, 5);
        assert_eq!(chunk.remaining(), 5);
        chunk.advance(2);
        assert_eq!(chunk.chunk(), b"llo");
        chunk.advance(10);
        assert!(!chunk.has_remaining());
        let before = spares();
        drop(chunk);
        assert_eq!(spares(), before + 1, "sent, so back to the pool");
    }

    #[test]
    fn a_shared_chunk_is_its_bytes() {
        let mut chunk = Chunk::Shared(Bytes::from_static(b"frame"));
        chunk.advance(1);
        assert_eq!(chunk.chunk(), b"rame");
        assert!(chunk.into_buffer().is_none());
    }

    #[test]
    fn spares_are_bounded() {
        let many: Vec<Buffer> = (0..SPARES_PER_THREAD + 5).map(|_| Buffer::take()).collect();
        drop(many);
        assert_eq!(spares(), SPARES_PER_THREAD);
    }
}
