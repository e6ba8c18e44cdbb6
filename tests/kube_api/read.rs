//! Reads of collections: lists and watches, with label selectors.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use hyper::{Response, StatusCode};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::query::{LabelTerm, parse_selector};
use super::{
    BOOKMARK_EVERY, Body, RESOURCES, Resource, Shared, json_response, not_found, served_versions,
    status,
};

/// The parameters of one list or watch request.
pub(super) struct Selection {
    pub(super) resource: Resource,
    pub(super) api_version: String,
    pub(super) namespace: Option<String>,
    pub(super) labels: Vec<LabelTerm>,
}

impl Selection {
    pub(super) fn matches(&self, object: &Value) -> bool {
        let namespace_ok = self
            .namespace
            .as_deref()
            .is_none_or(|ns| object["metadata"]["namespace"].as_str() == Some(ns));
        namespace_ok
            && self
                .labels
                .iter()
                .all(|term| term.matches(&object["metadata"]["labels"]))
    }

    /// The object as this request sees it: CRDs in the requested version;
    /// list items and events of core kinds, as a real server sends them in
    /// lists, without apiVersion and kind.
    pub(super) fn render(&self, object: &Value, in_list: bool) -> Value {
        let mut object = object.clone();
        if let Some(map) = object.as_object_mut() {
            if in_list && !self.resource.crd {
                map.remove("apiVersion");
                map.remove("kind");
            } else {
                map.insert("apiVersion".into(), self.api_version.clone().into());
                map.insert("kind".into(), self.resource.kind.into());
            }
        }
        object
    }
}

pub(super) fn collection(
    shared: &Arc<Shared>,
    group: &str,
    version: &str,
    namespace: Option<&str>,
    plural: &str,
    query: &HashMap<String, String>,
    path: &str,
) -> Response<Body> {
    let Some(resource) = RESOURCES
        .iter()
        .find(|r| r.group == group && r.plural == plural)
        .filter(|r| served_versions(shared, r).contains(&version))
        .copied()
    else {
        return not_found(path);
    };
    let selection = Selection {
        resource,
        api_version: if group.is_empty() {
            version.to_owned()
        } else {
            format!("{group}/{version}")
        },
        namespace: namespace.map(str::to_owned),
        labels: query
            .get("labelSelector")
            .map(|s| parse_selector(s))
            .unwrap_or_default(),
    };
    if query.get("watch").is_some_and(|w| w == "true" || w == "1") {
        watch(shared, selection, query)
    } else {
        list(shared, &selection, query)
    }
}

/// A list, in pages when the request has `limit`: `metadata.continue`
/// names where the next page starts, with the resource version of the
/// first page; a token older than the last compaction is `410 Expired`, as
/// on a real server. Later pages see the objects as they are then, not a
/// snapshot of the first page's version.
fn list(shared: &Shared, selection: &Selection, query: &HashMap<String, String>) -> Response<Body> {
    let mut state = shared.state();
    let plural = selection.resource.plural;
    let limit: Option<usize> = query
        .get("limit")
        .and_then(|l| l.parse().ok())
        .filter(|l| *l > 0);
    let token = query.get("continue").filter(|c| !c.is_empty());
    let (revision, offset) = match token {
        None => {
            *state.lists.entry(plural).or_default() += 1;
            (state.revision, 0)
        }
        Some(token) => {
            *state.pages.entry(plural).or_default() += 1;
            let parsed = token.split_once(':').and_then(|(rv, offset)| {
                Some((rv.parse::<u64>().ok()?, offset.parse::<usize>().ok()?))
            });
            let Some((revision, offset)) = parsed else {
                return json_response(
                    StatusCode::BAD_REQUEST,
                    &status(
                        StatusCode::BAD_REQUEST,
                        "BadRequest",
                        "invalid continue token",
                    ),
                );
            };
            let expire = state.expire_continues.get(plural).copied().unwrap_or(0) > 0;
            if revision < state.compacted || expire {
                if let Some(count) = state.expire_continues.get_mut(plural) {
                    *count = count.saturating_sub(1);
                }
                *state.expired_continues.entry(plural).or_default() += 1;
                return json_response(
                    StatusCode::GONE,
                    &status(
                        StatusCode::GONE,
                        "Expired",
                        "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.",
                    ),
                );
            }
            (revision, offset)
        }
    };
    let matching: Vec<&Value> = state
        .objects
        .iter()
        .filter(|((p, _, _), object)| *p == plural && selection.matches(object))
        .map(|(_, object)| object)
        .collect();
    let end = limit.map_or(matching.len(), |l| (offset + l).min(matching.len()));
    let items: Vec<Value> = matching
        .get(offset.min(end)..end)
        .unwrap_or_default()
        .iter()
        .map(|object| selection.render(object, true))
        .collect();
    let mut metadata = json!({"resourceVersion": revision.to_string()});
    if end < matching.len() {
        metadata["continue"] = format!("{revision}:{end}").into();
        metadata["remainingItemCount"] = (matching.len() - end).into();
    }
    json_response(
        StatusCode::OK,
        &json!({
            "kind": format!("{}List", selection.resource.kind),
            "apiVersion": selection.api_version,
            "metadata": metadata,
            "items": items,
        }),
    )
}

fn event_line(event: &str, object: Value) -> Bytes {
    let mut line = json!({"type": event, "object": object}).to_string();
    line.push('\n');
    Bytes::from(line)
}

fn watch(
    shared: &Arc<Shared>,
    selection: Selection,
    query: &HashMap<String, String>,
) -> Response<Body> {
    let from: u64 = query
        .get("resourceVersion")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let bookmarks = query
        .get("allowWatchBookmarks")
        .is_some_and(|v| v == "true");
    let timeout = query
        .get("timeoutSeconds")
        .and_then(|v| v.parse().ok())
        .map(Duration::from_secs)
        .unwrap_or(Duration::from_secs(1800));
    let (sender, receiver) = mpsc::channel::<Bytes>(256);
    let mut initial = Vec::new();
    let mut live;
    let mut last_sent = from;
    {
        let mut state = shared.state();
        *state.watches.entry(selection.resource.plural).or_default() += 1;
        if from != 0 && from < state.compacted {
            *state.gone.entry(selection.resource.plural).or_default() += 1;
            let gone = status(
                StatusCode::GONE,
                "Expired",
                &format!("too old resource version: {from} ({})", state.compacted),
            );
            initial.push(event_line("ERROR", gone));
            live = None;
        } else {
            live = Some(shared.changes.subscribe());
            if from == 0 {
                for ((plural, _, _), object) in &state.objects {
                    if *plural == selection.resource.plural && selection.matches(object) {
                        initial.push(event_line("ADDED", selection.render(object, false)));
                    }
                }
                last_sent = state.revision;
            } else {
                for change in state.history.iter().filter(|c| c.revision > from) {
                    if change.plural == selection.resource.plural
                        && selection.matches(&change.object)
                    {
                        initial.push(event_line(
                            change.event,
                            selection.render(&change.object, false),
                        ));
                        last_sent = change.revision;
                    }
                }
            }
        }
    }
    let mut epoch = shared.epoch.subscribe();
    epoch.mark_unchanged();
    tokio::spawn(async move {
        for line in initial {
            if sender.send(line).await.is_err() {
                return;
            }
        }
        let Some(live) = live.as_mut() else {
            return;
        };
        let deadline = tokio::time::sleep(timeout);
        tokio::pin!(deadline);
        let mut ticks = tokio::time::interval(BOOKMARK_EVERY);
        loop {
            let line = tokio::select! {
                change = live.recv() => match change {
                    Ok(change) if change.revision > last_sent => {
                        last_sent = change.revision;
                        if change.plural != selection.resource.plural
                            || !selection.matches(&change.object)
                        {
                            continue;
                        }
                        tokio::time::sleep_until(change.deliver_at).await;
                        event_line(change.event, selection.render(&change.object, false))
                    }
                    Ok(_) => continue,
                    // Too slow or the server is gone: end the watch.
                    Err(_) => return,
                },
                _ = ticks.tick(), if bookmarks => event_line(
                    "BOOKMARK",
                    json!({"kind": selection.resource.kind, "apiVersion": selection.api_version,
                        "metadata": {"resourceVersion": last_sent.to_string()}}),
                ),
                _ = epoch.changed() => return,
                () = &mut deadline => return,
            };
            if sender.send(line).await.is_err() {
                return;
            }
        }
    });
    let stream = futures_util::stream::unfold(receiver, |mut receiver| async move {
        receiver
            .recv()
            .await
            .map(|line| (Ok::<_, Infallible>(Frame::data(line)), receiver))
    });
    let mut response = Response::new(BodyExt::boxed(StreamBody::new(stream)));
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    response
}
