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

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use h2::SendStream;
use h2::server::SendResponse;
use http::{HeaderValue, Response, StatusCode};

use tokio_util::sync::CancellationToken;

use crate::feed::{FEED_PATH, Message, Publication, Resume, StreamPermit, Subscriber, encode};
use crate::net::buffer::Chunk;
use crate::routing::inbound::known_caller;
use crate::state::GatewayState;
use crate::tls::Identity;
use crate::tunnel::ERROR_HEADER;
use crate::tunnel::quic::encode_response;

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

/// A feed request that may be served: what it reads, for whom, from
/// where, and its place among its cluster's streams.
pub(super) struct Admitted {
    publication: Arc<Publication>,
    subscriber: Subscriber,
    from: Option<Resume>,
    permit: StreamPermit,
}

/// The checks every transport makes before a feed stream starts: the
/// status and reason to answer otherwise.
pub(super) fn admit(
    query: Option<&str>,
    caller: &Arc<Identity>,
    state: &Arc<GatewayState>,
) -> Result<Admitted, (StatusCode, String)> {
    let Some(publication) = state.feed.clone() else {
        return Err((
            StatusCode::NOT_FOUND,
            "this gateway serves no feed".to_owned(),
        ));
    };
    // Only a cluster of the set, as for a CONNECT: a certificate of a
    // cluster the set no longer holds reads nothing.
    let network = match known_caller(&state.routes.load(), &caller.cluster, &state.inbound) {
        Ok(network) => network.cloned(),
        Err(refusal) => {
            let refusal = super::inbound::refuse(state, caller, Some(FEED_PATH), refusal);
            return Err((StatusCode::FORBIDDEN, refusal.reason));
        }
    };
    let from = resume_of(query).map_err(|reason| {
        (
            StatusCode::BAD_REQUEST,
            format!("malformed feed request: {reason}"),
        )
    })?;
    let Some(permit) = publication.admit(&caller.cluster) else {
        return Err((
            StatusCode::TOO_MANY_REQUESTS,
            "too many feed streams of this cluster".to_owned(),
        ));
    };
    Ok(Admitted {
        publication,
        subscriber: Subscriber {
            cluster: caller.cluster.clone(),
            network,
        },
        from,
        permit,
    })
}

/// Answers one feed request over HTTP/2, and streams the feed on its own
/// task until the subscriber goes or the gateway shuts down.
pub(super) fn serve(
    query: Option<&str>,
    mut respond: SendResponse<Chunk>,
    caller: &Arc<Identity>,
    state: &Arc<GatewayState>,
    shutdown: &CancellationToken,
) {
    let admitted = match admit(query, caller, state) {
        Ok(admitted) => admitted,
        Err((status, reason)) => return refuse(respond, status, &reason),
    };
    let mut response = Response::new(());
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static(FEED_CONTENT_TYPE),
    );
    let Ok(send) = respond.send_response(response, false) else {
        return;
    };
    tracing::debug!(caller = %caller, from = ?admitted.from, "feed subscriber connected");
    let caller = caller.clone();
    let task_state = Arc::clone(state);
    let shutdown = shutdown.clone();
    state.connections.spawn(async move {
        let ended = tokio::select! {
            ended = run(H2Sink(send), admitted, &task_state) => ended,
            () = shutdown.cancelled() => "the gateway is shutting down".to_owned(),
        };
        tracing::debug!(caller = %caller, reason = %ended, "feed subscriber gone");
    });
}

/// Answers one feed request over QUIC (request frame version 4, its path
/// and query read), and streams the feed on `send` until the subscriber
/// goes.
pub(super) async fn serve_quic(
    path_and_query: &str,
    mut send: quinn::SendStream,
    caller: &Arc<Identity>,
    state: &Arc<GatewayState>,
) {
    let (path, query) = match path_and_query.split_once('?') {
        Some((path, query)) => (path, Some(query)),
        None => (path_and_query, None),
    };
    if path == super::about::ABOUT_PATH {
        return super::about::serve_quic(send, caller, state).await;
    }
    let admitted = if path == FEED_PATH {
        admit(query, caller, state)
    } else {
        Err((StatusCode::NOT_FOUND, format!("no feed at {path:?}")))
    };
    let admitted = match admitted {
        Ok(admitted) => admitted,
        Err((status, reason)) => {
            let _ = send
                .write_all(&encode_response(status.as_u16(), &reason))
                .await;
            let _ = send.finish();
            return;
        }
    };
    if send.write_all(&encode_response(200, "")).await.is_err() {
        return;
    }
    tracing::debug!(caller = %caller, from = ?admitted.from, "feed subscriber connected over quic");
    let ended = run(QuicSink(send), admitted, state).await;
    tracing::debug!(caller = %caller, reason = %ended, "feed subscriber gone");
}

/// Where a feed stream's frames go.
trait FeedSink: Send {
    /// Writes one frame as the subscriber takes it, all of it within
    /// [`STALL`].
    fn write(&mut self, frame: Bytes) -> impl Future<Output = Result<(), String>> + Send;
    /// Resolves when the subscriber has gone: why.
    fn gone(&mut self) -> impl Future<Output = String> + Send;
}

struct H2Sink(SendStream<Chunk>);

impl FeedSink for H2Sink {
    async fn write(&mut self, frame: Bytes) -> Result<(), String> {
        write(&mut self.0, frame).await
    }

    async fn gone(&mut self) -> String {
        match std::future::poll_fn(|cx| self.0.poll_reset(cx)).await {
            Ok(reason) => format!("reset by the subscriber ({reason:?})"),
            Err(error) => error.to_string(),
        }
    }
}

struct QuicSink(quinn::SendStream);

impl FeedSink for QuicSink {
    async fn write(&mut self, frame: Bytes) -> Result<(), String> {
        // QUIC's stream flow control holds what the subscriber has not read.
        tokio::time::timeout(STALL, self.0.write_chunk(frame))
            .await
            .map_err(|_| format!("the subscriber did not take a frame within {STALL:?}"))?
            .map_err(|error| error.to_string())
    }

    async fn gone(&mut self) -> String {
        match self.0.stopped().await {
            Ok(Some(code)) => format!("stopped by the subscriber ({code})"),
            Ok(None) => "the stream ended".to_owned(),
            Err(error) => error.to_string(),
        }
    }
}

/// Streams an admitted feed into `sink` until the subscriber goes.
async fn run(mut sink: impl FeedSink, admitted: Admitted, state: &GatewayState) -> String {
    let Admitted {
        publication,
        subscriber,
        from,
        permit,
    } = admitted;
    let _permit = permit;
    stream(&mut sink, &publication, state, subscriber, from).await
}

/// Writes the feed until the subscriber goes; why it ended.
async fn stream(
    send: &mut impl FeedSink,
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
                if let Err(error) = send.write(encode(&message)).await {
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
                    if let Err(error) = send.write(encode(&beat)).await {
                        return error;
                    }
                }
            }
            gone = send.gone() => return gone,
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
