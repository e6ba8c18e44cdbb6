//! The exported-state feed: what one cluster tells its peers about itself
//! over the tunnel port, instead of each peer reading its API server
//! (docs/tunnel-protocol.md §10).
//!
//! - [`wire`]: the messages, version 1, and their checked conversion to
//!   the model;
//! - [`journal`]: the publisher's exported services by revision, a
//!   snapshot or the changes since a revision per subscriber, scoped by
//!   each export's access policy;
//! - [`publication`]: the journal shared by the tunnel server's feed
//!   streams, with a notification per change and a cap per caller;
//! - [`follow`]: the subscriber's side, applying a peer's batches whole
//!   and only for the cluster subscribed to;
//! - [`peer`]: a peer followed by its feed as a cluster of the set;
//! - [`record`]: a peer as the admin records it (`kube.peers`, a peer
//!   Secret), checked field by field;
//! - [`Frames`]: the framing, one message per length-prefixed frame, the
//!   length checked before the frame is read.
//!
//! No I/O here: the tunnel's server (`ingress::feed`) and client move
//! the frames.

pub mod follow;
pub mod journal;
pub mod peer;
pub mod publication;
pub mod record;
pub mod wire;

#[cfg(test)]
mod tests;

use bytes::{BufMut, Bytes, BytesMut};
use tokio_util::codec::{Decoder, LengthDelimitedCodec};

pub use follow::{Applied, FeedError, Follower, PeerState};
pub use journal::{Batch, DEFAULT_TOMBSTONES, Journal, Resume, Subscriber};
pub use peer::{FeedPeer, PeerOrigin};
pub use publication::{DEFAULT_STREAMS_PER_CLUSTER, Publication, StreamPermit};
pub use wire::{FEED_PATH, FEED_VERSION, FeedLimits, Message, WireError};

/// Why a frame could not be read.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("a frame longer than the limit of {limit} bytes")]
    TooLong { limit: usize },
    #[error("a frame that is not a feed message: {0}")]
    Json(#[from] serde_json::Error),
}

/// One message as a frame: its length (4 bytes, big-endian), then its
/// JSON.
pub fn encode(message: &Message) -> Bytes {
    // Serialising a message of owned strings and numbers cannot fail.
    let body = serde_json::to_vec(message).unwrap_or_default();
    let mut frame = BytesMut::with_capacity(4 + body.len());
    frame.put_u32(u32::try_from(body.len()).unwrap_or(u32::MAX));
    frame.put_slice(&body);
    frame.freeze()
}

/// Messages out of a byte stream that arrives in pieces.
#[derive(Debug)]
pub struct Frames {
    codec: LengthDelimitedCodec,
    buffered: BytesMut,
    limit: usize,
}

impl Frames {
    /// Frames of at most `limit` bytes each.
    pub fn new(limit: usize) -> Self {
        Self {
            codec: LengthDelimitedCodec::builder()
                .length_field_length(4)
                .max_frame_length(limit)
                .new_codec(),
            buffered: BytesMut::new(),
            limit,
        }
    }

    /// Takes the next piece of the stream.
    pub fn push(&mut self, piece: &[u8]) {
        self.buffered.extend_from_slice(piece);
    }

    /// Bytes held for a frame not complete yet (at most one frame's
    /// limit and one piece).
    pub fn buffered(&self) -> usize {
        self.buffered.len()
    }

    /// The next complete message, if one is.
    pub fn next_message(&mut self) -> Result<Option<Message>, FrameError> {
        Ok(self.next_frame()?.map(|(message, _)| message))
    }

    /// The next whole message and its frame's length, if one has arrived.
    pub fn next_frame(&mut self) -> Result<Option<(Message, usize)>, FrameError> {
        match self.codec.decode(&mut self.buffered) {
            Ok(Some(frame)) => Ok(Some((serde_json::from_slice(&frame)?, frame.len()))),
            Ok(None) => Ok(None),
            Err(_) => Err(FrameError::TooLong { limit: self.limit }),
        }
    }
}
