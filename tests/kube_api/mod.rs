//! An in-process stand-in for a Kubernetes API server. No real API server
//! can run on these machines, so this one speaks the real wire protocol over
//! plain HTTP/1.1, enough for kube-rs clients, discovery and watchers:
//!
//! - discovery: `/api`, `/api/v1`, `/apis`, `/apis/{group}/{version}`, with
//!   the MCS and About groups served in the versions a test chooses;
//! - list: `{kind: XList, apiVersion, metadata: {resourceVersion}, items}`,
//!   cluster-wide or in one namespace, with label selectors
//!   (`k=v`, `k==v`, `k!=v`, `k`);
//! - watch (`?watch=true&resourceVersion=N`): newline-delimited JSON events
//!   `ADDED`/`MODIFIED`/`DELETED` after N, `BOOKMARK` when
//!   `allowWatchBookmarks=true`, closed after `timeoutSeconds`; an `ERROR`
//!   event with a `410 Gone` Status when N is older than the last compaction.
//!
//! - writes (`write`): GET of one object, the `status` subresource of
//!   ServiceExports (JSON merge patch) and Leases (create, replace), with
//!   resource-version preconditions, every request recorded.
//!
//! One global resource version orders every change, as etcd does. Tests
//! drive it directly: apply and delete objects, drop every open watch,
//! compact the history, change objects without events (as if the events were
//! lost), and stop and restart the server on the same port. As on a real
//! server, `metadata.generation` counts the changes of `spec`, and applying
//! a CRD object again keeps its `status` (its status subresource).

#![allow(dead_code)]

pub mod admin;
pub mod fixtures;
mod query;
pub mod write;

use std::collections::{BTreeMap, HashMap};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, StreamBody, combinators::BoxBody};
use hyper::body::Frame;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::{broadcast, mpsc, watch};
use tokio::task::{JoinHandle, JoinSet};

use query::{LabelTerm, parse_query, parse_selector};

/// How often an open watch that asked for bookmarks gets one.
const BOOKMARK_EVERY: Duration = Duration::from_millis(200);

/// One resource the server serves.
#[derive(Debug, Clone, Copy)]
struct Resource {
    plural: &'static str,
    singular: &'static str,
    kind: &'static str,
    /// Empty for the core group.
    group: &'static str,
    namespaced: bool,
    /// Served in the versions the test chose for the MCS and About groups.
    crd: bool,
}

const RESOURCES: [Resource; 7] = [
    Resource {
        plural: "services",
        singular: "service",
        kind: "Service",
        group: "",
        namespaced: true,
        crd: false,
    },
    Resource {
        plural: "secrets",
        singular: "secret",
        kind: "Secret",
        group: "",
        namespaced: true,
        crd: false,
    },
    Resource {
        plural: "endpointslices",
        singular: "endpointslice",
        kind: "EndpointSlice",
        group: "discovery.k8s.io",
        namespaced: true,
        crd: false,
    },
    Resource {
        plural: "clusterproperties",
        singular: "clusterproperty",
        kind: "ClusterProperty",
        group: "about.k8s.io",
        namespaced: false,
        crd: true,
    },
    Resource {
        plural: "serviceexports",
        singular: "serviceexport",
        kind: "ServiceExport",
        group: "multicluster.x-k8s.io",
        namespaced: true,
        crd: true,
    },
    Resource {
        plural: "serviceimports",
        singular: "serviceimport",
        kind: "ServiceImport",
        group: "multicluster.x-k8s.io",
        namespaced: true,
        crd: true,
    },
    Resource {
        plural: "leases",
        singular: "lease",
        kind: "Lease",
        group: "coordination.k8s.io",
        namespaced: true,
        crd: false,
    },
];

fn resource_of_kind(kind: &str) -> Resource {
    *RESOURCES
        .iter()
        .find(|r| r.kind == kind)
        .unwrap_or_else(|| panic!("the test API server does not serve {kind}"))
}

/// One change, in resource-version order.
#[derive(Debug, Clone)]
struct Change {
    revision: u64,
    plural: &'static str,
    event: &'static str,
    object: Value,
}

type ObjectKey = (&'static str, String, String);

#[derive(Debug, Default)]
struct State {
    revision: u64,
    /// Watches from a resource version older than this get `410 Gone`.
    compacted: u64,
    objects: BTreeMap<ObjectKey, Value>,
    history: Vec<Change>,
    lists: HashMap<&'static str, usize>,
    watches: HashMap<&'static str, usize>,
    gone: HashMap<&'static str, usize>,
    /// Every write request, in order.
    writes: Vec<write::Recorded>,
}

struct Shared {
    state: Mutex<State>,
    changes: broadcast::Sender<Change>,
    /// Bumped to end every open watch.
    epoch: watch::Sender<u64>,
    crd_versions: Vec<&'static str>,
    address: SocketAddr,
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
    }

    fn record(&self, state: &mut State, plural: &'static str, event: &'static str, object: Value) {
        let change = Change {
            revision: state.revision,
            plural,
            event,
            object,
        };
        state.history.push(change.clone());
        // Sent under the lock, so watches see changes in order.
        let _ = self.changes.send(change);
    }
}

/// The test API server.
pub struct ApiServer {
    shared: Arc<Shared>,
    accept: Mutex<Option<JoinHandle<()>>>,
}

impl ApiServer {
    /// Starts a server on 127.0.0.1 that serves the MCS and About groups in
    /// `crd_versions` (the first is the preferred one).
    pub async fn start(crd_versions: &[&'static str]) -> ApiServer {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the test API server");
        let address = listener.local_addr().expect("test API server address");
        let (changes, _) = broadcast::channel(4096);
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            changes,
            epoch: watch::channel(0).0,
            crd_versions: crd_versions.to_vec(),
            address,
        });
        let server = ApiServer {
            shared,
            accept: Mutex::new(None),
        };
        server.serve(listener);
        server
    }

    fn serve(&self, listener: TcpListener) {
        let shared = self.shared.clone();
        let task = tokio::spawn(async move {
            // Dropped with the task: every connection ends with the server.
            let mut connections = JoinSet::new();
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let shared = shared.clone();
                connections.spawn(async move {
                    let service = service_fn(move |request| {
                        let shared = shared.clone();
                        async move {
                            let response = if write::handles(&request) {
                                write::respond(&shared, request).await
                            } else {
                                respond(&shared, request)
                            };
                            Ok::<_, Infallible>(response)
                        }
                    });
                    let _ = http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
                while connections.try_join_next().is_some() {}
            }
        });
        *self.accept.lock().expect("accept task") = Some(task);
    }

    pub fn address(&self) -> SocketAddr {
        self.shared.address
    }

    /// Stops serving: the listener closes and every connection is cut.
    pub async fn stop(&self) {
        let task = self.accept.lock().expect("accept task").take();
        if let Some(task) = task {
            task.abort();
            let _ = task.await;
        }
        self.drop_watches();
    }

    /// Serves again on the same address, with the same objects.
    pub async fn restart(&self) {
        let listener = TcpListener::bind(self.shared.address)
            .await
            .expect("rebind the test API server");
        self.serve(listener);
    }

    /// A kubeconfig for this server, written to `dir/name.yaml`.
    pub fn write_kubeconfig(&self, dir: &Path, name: &str) -> PathBuf {
        let path = dir.join(format!("{name}.yaml"));
        std::fs::write(&path, self.kubeconfig(name)).expect("write kubeconfig");
        path
    }

    /// A kubeconfig for this server whose namespace is `strait-system`.
    pub fn kubeconfig(&self, name: &str) -> String {
        format!(
            "apiVersion: v1
kind: Config
clusters:
- name: {name}
  cluster:
    server: http://{address}
users:
- name: {name}
  user:
    token: test-token
contexts:
- name: {name}
  context:
    cluster: {name}
    user: {name}
    namespace: strait-system
current-context: {name}
",
            address = self.shared.address
        )
    }

    /// Creates or replaces an object (`ADDED` or `MODIFIED`).
    pub fn apply(&self, object: Value) {
        self.write(object, true);
    }

    /// Changes an object without any watch event, as if the event had been
    /// lost: only a relist can see it.
    pub fn apply_silently(&self, object: Value) {
        self.write(object, false);
    }

    fn write(&self, object: Value, notify: bool) {
        self.shared.store(object, notify);
    }

    /// Deletes an object (`DELETED`).
    pub fn delete(&self, kind: &str, namespace: &str, name: &str) {
        let resource = resource_of_kind(kind);
        let namespace = if resource.namespaced { namespace } else { "" };
        let key = (resource.plural, namespace.to_owned(), name.to_owned());
        let mut state = self.shared.state();
        let Some(mut object) = state.objects.remove(&key) else {
            panic!("{kind} {namespace}/{name} does not exist");
        };
        state.revision += 1;
        object["metadata"]["resourceVersion"] = state.revision.to_string().into();
        self.record(&mut state, resource.plural, "DELETED", object);
    }

    fn record(&self, state: &mut State, plural: &'static str, event: &'static str, object: Value) {
        self.shared.record(state, plural, event, object);
    }

    /// Ends every open watch, as a load balancer or an API server restart
    /// would; clients resume from their last resource version.
    pub fn drop_watches(&self) {
        self.shared.epoch.send_modify(|epoch| *epoch += 1);
    }

    /// Forgets the history up to now (as etcd compaction does) and ends
    /// every open watch: a client resuming from an older resource version
    /// gets `410 Gone` and must relist.
    pub fn compact_and_drop_watches(&self) {
        {
            let mut state = self.shared.state();
            // One more revision, so that every client's version is older.
            state.revision += 1;
            state.compacted = state.revision;
            state.history.clear();
        }
        self.drop_watches();
    }

    /// List requests served for a resource (by plural).
    pub fn lists(&self, plural: &str) -> usize {
        self.shared.state().lists.get(plural).copied().unwrap_or(0)
    }

    /// Watch requests answered with `410 Gone` for a resource (by plural).
    pub fn gone(&self, plural: &str) -> usize {
        self.shared.state().gone.get(plural).copied().unwrap_or(0)
    }

    /// Watch requests served for a resource (by plural).
    pub fn watches(&self, plural: &str) -> usize {
        self.shared
            .state()
            .watches
            .get(plural)
            .copied()
            .unwrap_or(0)
    }
}

type Body = BoxBody<Bytes, Infallible>;

fn json_response(status: StatusCode, value: &Value) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::from(value.to_string())).boxed());
    *response.status_mut() = status;
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    response
}

fn status(code: StatusCode, reason: &str, message: &str) -> Value {
    json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {},
        "status": "Failure", "message": message, "reason": reason, "code": code.as_u16(),
    })
}

fn not_found(path: &str) -> Response<Body> {
    json_response(
        StatusCode::NOT_FOUND,
        &status(
            StatusCode::NOT_FOUND,
            "NotFound",
            &format!("the server could not find the requested resource {path}"),
        ),
    )
}

fn respond(shared: &Arc<Shared>, request: Request<hyper::body::Incoming>) -> Response<Body> {
    let path = request.uri().path().to_owned();
    let query = parse_query(request.uri().query().unwrap_or(""));
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    match segments.as_slice() {
        ["api"] => json_response(
            StatusCode::OK,
            &json!({"kind": "APIVersions", "versions": ["v1"],
                "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": shared.address.to_string()}]}),
        ),
        ["api", "v1"] => resource_list(shared, "", "v1").unwrap_or_else(|| not_found(&path)),
        ["apis"] => json_response(StatusCode::OK, &group_list(shared)),
        ["apis", group, version] => {
            resource_list(shared, group, version).unwrap_or_else(|| not_found(&path))
        }
        ["api", "v1", plural] => collection(shared, "", "v1", None, plural, &query, &path),
        ["api", "v1", "namespaces", namespace, plural] => {
            collection(shared, "", "v1", Some(namespace), plural, &query, &path)
        }
        ["apis", group, version, plural] => {
            collection(shared, group, version, None, plural, &query, &path)
        }
        ["apis", group, version, "namespaces", namespace, plural] => collection(
            shared,
            group,
            version,
            Some(namespace),
            plural,
            &query,
            &path,
        ),
        _ => not_found(&path),
    }
}

fn served_versions(shared: &Shared, resource: &Resource) -> Vec<&'static str> {
    if resource.crd {
        shared.crd_versions.clone()
    } else {
        vec!["v1"]
    }
}

fn group_list(shared: &Shared) -> Value {
    let mut groups: Vec<(&str, Vec<&str>)> = Vec::new();
    for resource in RESOURCES.iter().filter(|r| !r.group.is_empty()) {
        if !groups.iter().any(|(g, _)| *g == resource.group) {
            groups.push((resource.group, served_versions(shared, resource)));
        }
    }
    let groups: Vec<Value> = groups
        .into_iter()
        .filter(|(_, versions)| !versions.is_empty())
        .map(|(group, versions)| {
            let entries: Vec<Value> = versions
                .iter()
                .map(|v| json!({"groupVersion": format!("{group}/{v}"), "version": v}))
                .collect();
            json!({"name": group, "versions": entries, "preferredVersion": entries[0]})
        })
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

fn resource_list(shared: &Shared, group: &str, version: &str) -> Option<Response<Body>> {
    let resources: Vec<Value> = RESOURCES
        .iter()
        .filter(|r| r.group == group && served_versions(shared, r).contains(&version))
        .map(|r| {
            json!({"name": r.plural, "singularName": r.singular, "namespaced": r.namespaced,
                "kind": r.kind, "verbs": ["get", "list", "watch"]})
        })
        .collect();
    if resources.is_empty() {
        return None;
    }
    let group_version = if group.is_empty() {
        version.to_owned()
    } else {
        format!("{group}/{version}")
    };
    Some(json_response(
        StatusCode::OK,
        &json!({"kind": "APIResourceList", "apiVersion": "v1",
            "groupVersion": group_version, "resources": resources}),
    ))
}

/// The parameters of one list or watch request.
struct Selection {
    resource: Resource,
    api_version: String,
    namespace: Option<String>,
    labels: Vec<LabelTerm>,
}

impl Selection {
    fn matches(&self, object: &Value) -> bool {
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
    fn render(&self, object: &Value, in_list: bool) -> Value {
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

fn collection(
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
        list(shared, &selection)
    }
}

fn list(shared: &Shared, selection: &Selection) -> Response<Body> {
    let mut state = shared.state();
    *state.lists.entry(selection.resource.plural).or_default() += 1;
    let items: Vec<Value> = state
        .objects
        .iter()
        .filter(|((plural, _, _), object)| {
            *plural == selection.resource.plural && selection.matches(object)
        })
        .map(|(_, object)| selection.render(object, true))
        .collect();
    json_response(
        StatusCode::OK,
        &json!({
            "kind": format!("{}List", selection.resource.kind),
            "apiVersion": selection.api_version,
            "metadata": {"resourceVersion": state.revision.to_string()},
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
