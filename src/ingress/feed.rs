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

use tokio_util::sync::CancellationToken;

use crate::feed::{FEED_PATH, Message, Publication, Resume, Subscriber, encode};
use crate::net::buffer::Chunk;
use crate::routing::inbound::known_caller;
use crate::state::GatewayState;
use crate::tls::Identity;
use crate::tunnel::ERROR_HEADER;

/// The feed's media type.
pub const FEED_CONTENT_TYPE: &str = "application/vnd.strait.feed.v1";

/// A heartbeat when nothing changed for this long.
pub const HEARTBEAT: Duration = Duration::from_secs(10);

/// How long one frame (at most 4 MiB) may take to be written: a
/// subscriber that reads slower than that is cut.
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
        let slot = match &*key {
            "epoch" => &mut epoch,
            "revision" => &mut revision,
            other => return Err(format!("unknown parameter {other:?}")),
        };
        if slot.replace(number).is_some() {
            return Err(format!("{key} given twice"));
        }
    }
    match (epoch, revision) {
        (Some(epoch), Some(revision)) => Ok(Some(Resume { epoch, revision })),
        (None, None) => Ok(None),
        _ => Err("epoch and revision go together".to_owned()),
    }
}

/// Answers one feed request, and streams the feed on its own task until
/// the subscriber goes or the gateway shuts down.
pub(super) fn serve(
    query: Option<&str>,
    mut respond: SendResponse<Chunk>,
    caller: &Arc<Identity>,
    state: &Arc<GatewayState>,
    shutdown: &CancellationToken,
) {
    let Some(publication) = state.feed.clone() else {
        refuse(
            respond,
            StatusCode::NOT_FOUND,
            "this gateway serves no feed",
        );
        return;
    };
    // Only a cluster of the set, as for a CONNECT: a certificate of a
    // cluster the set no longer holds reads nothing.
    let network = match known_caller(&state.routes.load(), &caller.cluster, &state.inbound) {
        Ok(network) => network.cloned(),
        Err(refusal) => {
            let refusal = super::inbound::refuse(state, caller, Some(FEED_PATH), refusal);
            refuse(respond, StatusCode::FORBIDDEN, &refusal.reason);
            return;
        }
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
        network,
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
    let task_state = Arc::clone(state);
    let shutdown = shutdown.clone();
    state.connections.spawn(async move {
        let _permit = permit;
        let ended = tokio::select! {
            ended = stream(send, &publication, &task_state, subscriber, from) => ended,
            () = shutdown.cancelled() => "the gateway is shutting down".to_owned(),
        };
        tracing::debug!(caller = %caller, reason = %ended, "feed subscriber gone");
    });
}

/// Writes the feed until the subscriber goes; why it ended.
async fn stream(
    mut send: SendStream<Chunk>,
    publication: &Publication,
    state: &GatewayState,
    mut subscriber: Subscriber,
    mut from: Option<Resume>,
) -> String {
    let mut changes = publication.changes();
    // A new stream starts with a hello; until one is written, nothing
    // else (not even a heartbeat) is.
    let mut greet = true;
    // Every batch of another epoch than the last starts with its hello.
    let mut epoch = from.map(|from| from.epoch);
    loop {
        changes.borrow_and_update();
        // What the subscriber may read depends on the network this
        // gateway attests for it: when that changes, it starts over; a
        // cluster the set no longer holds reads no more (found at the next
        // change or heartbeat).
        let network = match known_caller(&state.routes.load(), &subscriber.cluster, &state.inbound)
        {
            Ok(network) => network.cloned(),
            Err(refusal) => return format!("no longer admitted: {refusal}"),
        };
        if network != subscriber.network {
            subscriber.network = network;
            from = None;
        }
        if let Some(batch) = publication.catch_up(from, &subscriber, greet) {
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
            greet = false;
        }
        tokio::select! {
            changed = changes.changed() => if changed.is_err() {
                return "the gateway is shutting down".to_owned();
            },
            () = tokio::time::sleep(HEARTBEAT) => {
                if let Some(from) = from {
                    let beat = Message::Heartbeat { revision: from.revision };
                    if let Err(error) = write(&mut send, encode(&beat)).await {
                        return error;
                    }
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

/// Writes one frame as the subscriber's window allows, all of it within
/// [`STALL`].
async fn write(send: &mut SendStream<Chunk>, frame: Bytes) -> Result<(), String> {
    tokio::time::timeout(STALL, write_all(send, frame))
        .await
        .map_err(|_| format!("the subscriber did not take a frame within {STALL:?}"))?
}

async fn write_all(send: &mut SendStream<Chunk>, mut frame: Bytes) -> Result<(), String> {
    while !frame.is_empty() {
        send.reserve_capacity(frame.len());
        let granted = match std::future::poll_fn(|cx| send.poll_capacity(cx)).await {
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
