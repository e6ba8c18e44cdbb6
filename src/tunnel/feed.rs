//! Reading a peer's exported-state feed from its tunnel stream
//! (docs/tunnel-protocol.md §10): the body's bytes cut into frames, each
//! frame's length checked before it is held, each message applied to the
//! peer's [`Follower`]. A feed that says nothing (not even a heartbeat)
//! for the stall time is given up, as is one that breaks a rule: the
//! follower keeps the last good state either way.

use std::time::Duration;

use bytes::Bytes;

use super::client::FeedStream;
use crate::feed::{Applied, FeedError, Follower, FrameError, Frames, Message};
use crate::model::ServiceKey;

/// Why reading a feed stopped.
#[derive(Debug, thiserror::Error)]
pub enum FeedReadError {
    #[error("the feed said nothing for {0:?} (no change and no heartbeat)")]
    Stalled(Duration),
    #[error("the feed's stream failed: {0}")]
    Stream(String),
    #[error("the feed ended")]
    Ended,
    #[error(transparent)]
    Frame(#[from] FrameError),
    #[error(transparent)]
    Refused(#[from] FeedError),
}

/// A feed being read: its stream and the frames not yet taken whole.
pub struct FeedReader {
    stream: FeedStream,
    frames: Frames,
    stall: Duration,
}

impl FeedReader {
    /// Reads `stream` in frames of at most `frame_limit` bytes, giving up
    /// when it says nothing for `stall`.
    pub fn new(stream: FeedStream, frame_limit: usize, stall: Duration) -> Self {
        Self {
            stream,
            frames: Frames::new(frame_limit),
            stall,
        }
    }

    /// Applies messages to `follower` until a batch is synced: the
    /// services it changed. `observe` sees each message before it is
    /// applied. An error ends the feed; the follower keeps its last good
    /// state.
    pub async fn next_batch(
        &mut self,
        follower: &mut Follower,
        mut observe: impl FnMut(&Message),
    ) -> Result<Vec<ServiceKey>, FeedReadError> {
        loop {
            while let Some((message, bytes)) = self.frames.next_frame()? {
                observe(&message);
                if let Applied::Synced(changed) = follower.apply(message, bytes)? {
                    return Ok(changed);
                }
            }
            let data: Bytes = match tokio::time::timeout(self.stall, self.stream.next_bytes()).await
            {
                Err(_) => return Err(FeedReadError::Stalled(self.stall)),
                Ok(None) => return Err(FeedReadError::Ended),
                Ok(Some(data)) => data.map_err(FeedReadError::Stream)?,
            };
            self.frames.push(&data);
        }
    }
}

/// Reads `stream` into `follower` until the feed ends or fails, or
/// `synced` (called after each batch applied, with the services it
/// changed) returns `false`. `observe` sees each message before it is
/// applied.
pub async fn read(
    stream: FeedStream,
    follower: &mut Follower,
    frame_limit: usize,
    stall: Duration,
    mut observe: impl FnMut(&Message),
    mut synced: impl FnMut(&Follower, Vec<ServiceKey>) -> bool,
) -> Result<(), FeedReadError> {
    let mut reader = FeedReader::new(stream, frame_limit, stall);
    loop {
        let changed = reader.next_batch(follower, &mut observe).await?;
        if !synced(follower, changed) {
            return Ok(());
        }
    }
}
