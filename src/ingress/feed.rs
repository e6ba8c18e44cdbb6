//! The exported-state feed on the tunnel port (docs/tunnel-protocol.md
//! §10): `GET /strait.dev/feed/v1` from an authenticated peer gateway,
//! answered with this cluster's journal as frames: a snapshot, or the
//! changes since the revision the caller asks from, then each change as
//! it happens, and a heartbeat when nothing changed for a while. The
//! caller's cluster comes from its certificate; it gets only the services
//! whose access policy admits it. Bounded per caller cluster (streams
//! open), per stream in bytes (HTTP/2 flow control: nothing is queued
//! for a subscriber that does not read, the next batch is computed only
//! once the last one is written) and in time (a subscriber that takes no
//! bytes for the stall timeout is cut).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use h2::SendStream;
use h2::server::SendResponse;
use http::{HeaderValue, Response, StatusCode};

use crate::feed::{Message, Publication, Resume, Subscriber, encode};
use crate::net::buffer::Chunk;
use crate::state::GatewayState;
use crate::tls::Identity;
use crate::tunnel::ERROR_HEADER;

/// The feed's media type.
pub const FEED_CONTENT_TYPE: &str = "application/vnd.strait.feed.v1";

/// A heartbeat when nothing changed for this long.
pub const HEARTBEAT: Duration = Duration::from_secs(10);

/// How long one frame may wait for the subscriber's flow-control window.
pub const STALL: Duration = Duration::from_secs(30);

fn refuse(mut respond: SendResponse<Chunk>, status: StatusCode, reason: &str) {
    let mut response = Response::new(());
    *response.status_mut() = status;
    if let Ok(value) = HeaderValue::from_str(reason) {
        response.headers_mut().insert(ERROR_HEADER, value);
    }
    let _ = respond.send_response(response, true);
}

/// Where the caller resumes from: `?epoch=E&revision=R`, both or
/// neither.
pub fn resume_of(query: Option<&str>) -> Result<Option<Resume>, String> {
    let Some(query) = query.filter(|q| !q.is_empty()) else {
        return Ok(None);
    };
    let (mut epoch, mut revision) = (None, None);
    for (key, value) in form_urlencoded::parse(query.as_bytes()) {
        let number = value
            .parse::<u64>()
            .map_err(|_| format!("{key}={value:?} is not a number"))?;
        match &*key {
            "epoch" => epoch = Some(number),
            "revision" => revision = Some(number),
            other => return Err(format!("unknown parameter {other:?}")),
        }
    }
    match (epoch, revision) {
        (Some(epoch), Some(revision)) => Ok(Some(Resume { epoch, revision })),
        (None, None) => Ok(None),
        _ => Err("epoch and revision go together".to_owned()),
    }
}

/// Answers one feed request, and streams the feed on its own task.
pub(super) fn serve(
    query: Option<&str>,
    mut respond: SendResponse<Chunk>,
    caller: &Arc<Identity>,
    state: &Arc<GatewayState>,
) {
    let Some(publication) = state.feed.clone() else {
        refuse(
            respond,
            StatusCode::NOT_FOUND,
            "this gateway serves no feed",
        );
        return;
    };
    let from = match resume_of(query) {
        Ok(from) => from,
        Err(reason) => {
            refuse(
                respond,
                StatusCode::BAD_REQUEST,
                &format!("malformed feed request: {reason}"),
            );
            return;
        }
    };
    let Some(permit) = publication.admit(&caller.cluster) else {
        refuse(
            respond,
            StatusCode::TOO_MANY_REQUESTS,
            "too many feed streams of this cluster",
        );
        return;
    };
    let subscriber = Subscriber {
        cluster: caller.cluster.clone(),
        network: state
            .routes
            .load()
            .attested_network(&caller.cluster)
            .cloned(),
    };
    let mut response = Response::new(());
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static(FEED_CONTENT_TYPE),
    );
    let Ok(send) = respond.send_response(response, false) else {
        return;
    };
    tracing::debug!(caller = %caller, ?from, "feed subscriber connected");
    let caller = caller.clone();
    state.connections.spawn(async move {
        let _permit = permit;
        let ended = stream(send, &publication, &subscriber, from).await;
        tracing::debug!(caller = %caller, reason = %ended, "feed subscriber gone");
    });
}

/// Writes the feed until the subscriber goes; why it ended.
async fn stream(
    mut send: SendStream<Chunk>,
    publication: &Publication,
    subscriber: &Subscriber,
    mut from: Option<Resume>,
) -> String {
    let mut changes = publication.changes();
    let mut greet = true;
    // Every batch of another epoch than the last starts with its hello.
    let mut epoch = from.map(|from| from.epoch);
    loop {
        changes.borrow_and_update();
        if let Some(batch) = publication.catch_up(from, subscriber, greet) {
            if let Some(hello) = &batch.hello {
                epoch = Some(hello.epoch);
            }
            for message in batch.messages() {
                if let Err(error) = write(&mut send, encode(&message)).await {
                    return error;
                }
            }
            from = epoch.map(|epoch| Resume {
                epoch,
                revision: batch.revision,
            });
        }
        greet = false;
        tokio::select! {
            changed = changes.changed() => if changed.is_err() {
                return "the gateway is shutting down".to_owned();
            },
            () = tokio::time::sleep(HEARTBEAT) => {
                let revision = from.map_or(0, |from| from.revision);
                if let Err(error) = write(&mut send, encode(&Message::Heartbeat { revision })).await {
                    return error;
                }
            }
            reset = std::future::poll_fn(|cx| send.poll_reset(cx)) => {
                return match reset {
                    Ok(reason) => format!("reset by the subscriber ({reason:?})"),
                    Err(error) => error.to_string(),
                };
            }
        }
    }
}

/// Writes one frame as the subscriber's window allows, within [`STALL`].
async fn write(send: &mut SendStream<Chunk>, mut frame: Bytes) -> Result<(), String> {
    while !frame.is_empty() {
        send.reserve_capacity(frame.len());
        let granted =
            tokio::time::timeout(STALL, std::future::poll_fn(|cx| send.poll_capacity(cx)))
                .await
                .map_err(|_| format!("the subscriber took no bytes for {STALL:?}"))?;
        let granted = match granted {
            Some(Ok(granted)) => granted,
            Some(Err(error)) => return Err(error.to_string()),
            None => return Err("the stream closed".to_owned()),
        };
        if granted == 0 {
            continue;
        }
        let piece = frame.split_to(granted.min(frame.len()));
        send.send_data(Chunk::Shared(piece), false)
            .map_err(|error| error.to_string())?;
    }
    Ok(())
}
