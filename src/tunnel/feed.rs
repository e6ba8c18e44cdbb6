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
    Http(#[from] h2::Error),
    #[error("the feed ended")]
    Ended,
    #[error(transparent)]
    Frame(#[from] FrameError),
    #[error(transparent)]
    Refused(#[from] FeedError),
}

/// Reads `stream` into `follower` until the feed ends or fails, or
/// `synced` (called after each batch applied, with the services it
/// changed) returns `false`. `observe` sees each message before it is
/// applied.
pub async fn read(
    mut stream: FeedStream,
    follower: &mut Follower,
    frame_limit: usize,
    stall: Duration,
    mut observe: impl FnMut(&Message),
    mut synced: impl FnMut(&Follower, Vec<ServiceKey>) -> bool,
) -> Result<(), FeedReadError> {
    let mut frames = Frames::new(frame_limit);
    loop {
        let data: Bytes = match tokio::time::timeout(stall, stream.body.data()).await {
            Err(_) => return Err(FeedReadError::Stalled(stall)),
            Ok(None) => return Err(FeedReadError::Ended),
            Ok(Some(data)) => data?,
        };
        // The window opens again only for what was taken out of it.
        let _ = stream.body.flow_control().release_capacity(data.len());
        frames.push(&data);
        while let Some(message) = frames.next_message()? {
            observe(&message);
            if let Applied::Synced(changed) = follower.apply(message)?
                && !synced(follower, changed)
            {
                return Ok(());
            }
        }
    }
}
