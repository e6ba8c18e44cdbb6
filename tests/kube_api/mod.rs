//! An in-process stand-in for a Kubernetes API server. No real API server
//! can run on these machines, so this one speaks the real wire protocol over
//! plain HTTP/1.1, enough for kube-rs clients (typed `Api<Service>`,
//! `Api<EndpointSlice>`, `Api<Namespace>`, `Api<DynamicObject>`),
//! discovery and watchers:
//!
//! - discovery (`discovery`): `/api`, `/api/v1`, `/apis`,
//!   `/apis/{group}/{version}`, with the MCS and About groups served in the
//!   versions a test chooses; every resource with the verbs `create`,
//!   `delete`, `deletecollection`, `get`, `list`, `patch`, `update`,
//!   `watch`, and `{plural}/status` for those with a status subresource;
//! - list (`read`): `{kind: XList, apiVersion, metadata: {resourceVersion},
//!   items}`, cluster-wide or in one namespace, with label selectors
//!   (`k=v`, `k==v`, `k!=v`, `k`), in pages with `limit` and `continue`
//!   (`metadata.continue`, `remainingItemCount`; a token older than the last
//!   compaction, or one `ApiServer::expire_continues` picks, is `410
//!   Expired`; later pages see the current objects, not a snapshot);
//! - watch (`?watch=true&resourceVersion=N`): newline-delimited JSON events
//!   `ADDED`/`MODIFIED`/`DELETED` after N, `BOOKMARK` when
//!   `allowWatchBookmarks=true`, closed after `timeoutSeconds`; an `ERROR`
//!   event with a `410 Gone` Status when N is older than the last compaction;
//! - writes (`write`): GET of one object, POST, PUT, JSON merge patch and
//!   server-side apply of objects and of status subresources, DELETE of an
//!   object or a collection, with resource-version preconditions, every
//!   request recorded.
//!
//! - **Connection trouble** (`ApiServer::reset_connections`,
//!   `blackhole_connections`, `hang_lists`): every open connection reset
//!   mid-stream (TCP RST), left open but silent forever, or a list request
//!   never answered.
//!
//! - **Busy answers** (`ApiServer::fail_next`): the next requests of a
//!   resource get `429 TooManyRequests` (with `Retry-After`) or `503`.
//! - **Authentication and refusals** (`ApiServer::require_tokens`,
//!   `forbid`): `401` for a request without a known bearer token
//!   (`test-token`, or one the token controller minted), `403` worded as
//!   RBAC words it for a method on a resource. RBAC rules are not evaluated.
//! - **Secrets**: `stringData` is written into `data` (base64), and a
//!   `kubernetes.io/service-account-token` Secret of an existing
//!   ServiceAccount gets a minted `token`, a `ca.crt` and its `namespace`,
//!   as the token controller does (at once, not a moment later).
//!
//! Resources: Namespaces (cluster-scoped), Services, Secrets,
//! ServiceAccounts, ClusterRoles and ClusterRoleBindings (both
//! cluster-scoped), EndpointSlices, Leases, ClusterProperties (cluster-scoped),
//! ServiceExports and ServiceImports. Services, ServiceExports,
//! ServiceImports and Namespaces have a status subresource: a write to the
//! object ignores its `status` (on create it is dropped), a write to
//! `/status` changes nothing but `status`.
//!
//! Where a real server is strict, this one is too, for what an MCS
//! controller relies on:
//!
//! - **Namespaces.** A request that creates a namespaced object (POST, or an
//!   apply of a missing object) in a namespace without a Namespace object
//!   gets `404 NotFound`, `namespaces "X" not found`, details kind
//!   `namespaces`. `default`, `kube-system`, `kube-public` and
//!   `kube-node-lease` exist from the start. Deleting a Namespace deletes
//!   everything in it at once (a real one is `Terminating` a while).
//! - **Server-side apply** (`apply`): `PATCH` with `Content-Type:
//!   application/apply-patch+yaml` on an object or its `/status`, with
//!   `fieldManager` (required: `400` without) and `force`. The body must be
//!   JSON (valid YAML; kube-rs sends JSON), name the URL's apiVersion, kind,
//!   name and namespace (`400` otherwise) and carry no managedFields. A
//!   missing object is created (`201`); otherwise (`200`) the configuration
//!   is deep-merged into the object: maps merged, lists and scalars
//!   replaced, except `status.conditions`, merged by `type` as the CRDs'
//!   `listType=map` says. Ownership is tracked per manager as a set of leaf
//!   paths (map keys from the root, `k:{"type":"Valid"}` for a condition);
//!   **other lists are atomic leaves** — a real server merges every
//!   `listType=map` list (ports too) by key, this one owns and replaces
//!   those as a whole. A leaf the apply changes that another
//!   manager owns is a conflict: `409 Conflict` naming the fields and the
//!   manager without `force`, nothing changed; with `force=true` the
//!   ownership moves. The same value is no conflict: both own it. Leaves
//!   the applier owned before and omits now are removed unless another
//!   manager owns them too, and so are the maps that leaves empty. Nulls in
//!   the configuration neither set nor own anything. `metadata.resourceVersion`
//!   in the body is a precondition (`409` when stale); so is `metadata.uid`.
//! - **Managed fields.** Stored and returned objects carry
//!   `metadata.managedFields`: per manager, operation (`Apply`, `Update`)
//!   and subresource an entry `{manager, operation, apiVersion, time,
//!   fieldsType: FieldsV1, fieldsV1}` with the real `f:` format (`k:` keys
//!   for conditions only, no `v:` keys, no `.` entries; one fixed `time`). POST, PUT and JSON merge
//!   patches are `Update`s by the request's `fieldManager`, else by its
//!   user agent up to the first `/`, else `unknown`: the writer takes the
//!   leaves it changed (as written, before the server's defaults) from every
//!   other manager. Objects seeded by a test (`ApiServer::apply`) have no
//!   owner for what the seed wrote.
//! - **No-op writes.** A write over HTTP that changes nothing (object and
//!   managed fields alike) keeps the resource version and sends no event.
//! - **Services** (`defaults`), written over HTTP: `spec.type` defaults to
//!   `ClusterIP`, each port's `protocol` to `TCP` and `targetPort` to its
//!   `port`, `sessionAffinity` to `None`, `internalTrafficPolicy` to
//!   `Cluster`. Unless ExternalName or headless (`clusterIP: None`, then
//!   `clusterIPs: [None]`), cluster IPs are allocated sequentially from
//!   10.96.0.0/16 and fd00:10:96::/112, never an address a live Service
//!   holds; `ipFamilyPolicy` defaults to SingleStack (RequireDualStack when
//!   two families or addresses are given), `ipFamilies` to `[IPv4]`, the
//!   other family added second for dual stack; after `single_stack()` the
//!   cluster has one IPv4 range: `RequireDualStack` and IPv6 are refused
//!   (`422`, worded as a real server words it) and `PreferDualStack` gets
//!   one address. A requested address must be
//!   in range and free (`422`). These values are no applier's; a write that
//!   omits them keeps them; changing an allocated address is `422 Invalid`
//!   (may not change once set). Node ports, load balancer fields and type
//!   changes that release addresses are not emulated.
//! - **Deletes and garbage collection** (`delete`): `200` with the deleted
//!   object, `404` when missing, `409` when DeleteOptions `preconditions`
//!   fail; collections by label selector, answered with the List of
//!   deleted objects. Then every object whose ownerReferences name only
//!   gone owners is deleted too, recursively, each with a `DELETED` event —
//!   at once, where a real garbage collector takes a moment in background
//!   propagation (`Foreground` is the same here; `Orphan` drops the
//!   references instead). Finalizers are not honoured.
//! - **UIDs.** Every object gets a unique UUID-shaped uid when it is
//!   created, never reused, even after a delete; a seed may bring its own.
//!
//! One global resource version orders every change, as etcd does. Tests
//! drive it directly: apply (seed) and delete objects, edit them as a person
//! would (`ApiServer::edit`), drop every open watch, compact the history,
//! change objects without events (as if the events were lost), and stop and
//! restart the server on the same port. Seeding is lenient: no namespace
//! check, no defaults, no ownership. As on a real server,
//! `metadata.generation` counts the changes of `spec`, and seeding a CRD
//! object again keeps its `status` (its status subresource).
//!
//! - **CRD schemas** (`schema`): objects of the MCS and About kinds written
//!   over HTTP are pruned and validated against `deploy/crds/`'s structural
//!   schemas, `422 Invalid` with every cause (seeds are not).
//!
//! Not emulated: RBAC evaluation, admission webhooks, strategic merge patches and JSON patches (`415`),
//! `generateName`, field selectors, dry runs.

#![allow(dead_code)]

pub mod admin;
mod apply;
mod defaults;
mod delete;
mod discovery;
pub mod fixtures;
mod query;
mod read;
mod schema;
mod store;
mod tls;
mod token;
pub mod write;

use std::collections::{BTreeMap, HashMap};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, combinators::BoxBody};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::{broadcast, watch};
use tokio::task::{JoinHandle, JoinSet};

use query::parse_query;
use read::{Selection, collection};

/// A connection, in plain text or TLS.
trait Stream: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send {}
impl<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send> Stream for S {}

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
    /// Has a `status` subresource: writes to the object ignore `status`,
    /// writes to `/status` change nothing else.
    has_status: bool,
}

const RESOURCES: [Resource; 11] = [
    Resource {
        plural: "services",
        singular: "service",
        kind: "Service",
        group: "",
        namespaced: true,
        crd: false,
        has_status: true,
    },
    Resource {
        plural: "secrets",
        singular: "secret",
        kind: "Secret",
        group: "",
        namespaced: true,
        crd: false,
        has_status: false,
    },
    Resource {
        plural: "endpointslices",
        singular: "endpointslice",
        kind: "EndpointSlice",
        group: "discovery.k8s.io",
        namespaced: true,
        crd: false,
        has_status: false,
    },
    Resource {
        plural: "clusterproperties",
        singular: "clusterproperty",
        kind: "ClusterProperty",
        group: "about.k8s.io",
        namespaced: false,
        crd: true,
        has_status: false,
    },
    Resource {
        plural: "serviceexports",
        singular: "serviceexport",
        kind: "ServiceExport",
        group: "multicluster.x-k8s.io",
        namespaced: true,
        crd: true,
        has_status: true,
    },
    Resource {
        plural: "serviceimports",
        singular: "serviceimport",
        kind: "ServiceImport",
        group: "multicluster.x-k8s.io",
        namespaced: true,
        crd: true,
        has_status: true,
    },
    Resource {
        plural: "leases",
        singular: "lease",
        kind: "Lease",
        group: "coordination.k8s.io",
        namespaced: true,
        crd: false,
        has_status: false,
    },
    Resource {
        plural: "serviceaccounts",
        singular: "serviceaccount",
        kind: "ServiceAccount",
        group: "",
        namespaced: true,
        crd: false,
        has_status: false,
    },
    Resource {
        plural: "clusterroles",
        singular: "clusterrole",
        kind: "ClusterRole",
        group: "rbac.authorization.k8s.io",
        namespaced: false,
        crd: false,
        has_status: false,
    },
    Resource {
        plural: "clusterrolebindings",
        singular: "clusterrolebinding",
        kind: "ClusterRoleBinding",
        group: "rbac.authorization.k8s.io",
        namespaced: false,
        crd: false,
        has_status: false,
    },
    Resource {
        plural: "namespaces",
        singular: "namespace",
        kind: "Namespace",
        group: "",
        namespaced: false,
        crd: false,
        has_status: true,
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
    /// When a watch may deliver it ([`ApiServer::lag_watches`]).
    deliver_at: tokio::time::Instant,
}

type ObjectKey = (&'static str, String, String);

#[derive(Debug, Default)]
struct State {
    /// The CA the token controller publishes: the server's own when it
    /// speaks TLS.
    ca_pem: Option<String>,
    revision: u64,
    /// Watches from a resource version older than this get `410 Gone`.
    compacted: u64,
    objects: BTreeMap<ObjectKey, Value>,
    history: Vec<Change>,
    /// Lists started (first pages), by plural.
    lists: HashMap<&'static str, usize>,
    /// Later pages of paged lists served, by plural.
    pages: HashMap<&'static str, usize>,
    /// Continue tokens to refuse as expired, by plural.
    expire_continues: HashMap<&'static str, usize>,
    expired_continues: HashMap<&'static str, usize>,
    /// Requests to fail, by plural: (status, Retry-After seconds), in order.
    failures: HashMap<String, std::collections::VecDeque<(u16, Option<u64>)>>,
    /// Requests failed so far, by plural.
    failed: HashMap<String, usize>,
    /// Bearer tokens accepted when authentication is on: `test-token` and
    /// every ServiceAccount token minted here.
    tokens: std::collections::HashSet<String>,
    /// Tokens minted by TokenRequest, with what they are bound to.
    bound_tokens: HashMap<String, token::BoundToken>,
    minted_tokens: u64,
    /// Whether the TokenRequest subresource is served (by default it is).
    token_requests: bool,
    authenticate: bool,
    /// Requests answered `403 Forbidden`, as (method, plural).
    forbidden: Vec<(String, String)>,
    /// List requests to leave unanswered, by plural.
    hang_lists: HashMap<&'static str, usize>,
    /// List requests left unanswered, by plural.
    hung_lists: HashMap<&'static str, usize>,
    watches: HashMap<&'static str, usize>,
    gone: HashMap<&'static str, usize>,
    /// Every write request, in order.
    writes: Vec<write::Recorded>,
    /// Who owns which fields of each object (`metadata.managedFields`).
    fields: BTreeMap<ObjectKey, Vec<apply::Owner>>,
    /// Where the next ClusterIP search starts, per family.
    next_ip: defaults::Cursors,
    /// A single-stack IPv4 cluster (`--service-cluster-ip-range` of one
    /// family): `RequireDualStack` and IPv6 are refused, `PreferDualStack`
    /// gets one address. Dual-stack, IPv4 first, otherwise.
    single_stack: bool,
    /// How long after a change its watch event is delivered
    /// ([`ApiServer::lag_watches`]).
    watch_lag: Duration,
}

struct Shared {
    state: Mutex<State>,
    changes: broadcast::Sender<Change>,
    /// Bumped to end every open watch.
    epoch: watch::Sender<u64>,
    /// What happens to the connections open now (`ApiServer::reset_connections`,
    /// `ApiServer::blackhole_connections`).
    cut: watch::Sender<Cut>,
    crd_versions: Vec<&'static str>,
    address: SocketAddr,
    /// Set for a server that stands in for a remote cluster ([`ApiServer::start_tls`]).
    tls: Option<tls::ServerTls>,
    /// How long each write takes and how many are served at once
    /// ([`ApiServer::slow_writes`]); `None`: at once, unbounded.
    write_gate: Mutex<Option<(Duration, Arc<tokio::sync::Semaphore>)>>,
}

/// Counts of the cuts made to the connections open at the time.
#[derive(Debug, Clone, Copy, Default)]
struct Cut {
    resets: u64,
    blackholes: u64,
}

impl Shared {
    /// Whether to leave this request unanswered (`ApiServer::hang_lists`).
    fn hang(&self, request: &Request<hyper::body::Incoming>) -> bool {
        let query = parse_query(request.uri().query().unwrap_or(""));
        if request.method() != hyper::Method::GET
            || query.get("watch").is_some_and(|w| w == "true" || w == "1")
        {
            return false;
        }
        let path = request.uri().path();
        let mut state = self.state();
        let plural = state
            .hang_lists
            .iter()
            .find(|(plural, count)| **count > 0 && path.ends_with(&format!("/{plural}")))
            .map(|(plural, _)| *plural);
        let Some(plural) = plural else {
            return false;
        };
        if let Some(count) = state.hang_lists.get_mut(plural) {
            *count -= 1;
        }
        *state.hung_lists.entry(plural).or_default() += 1;
        true
    }

    /// The `401`, `403`, `429` or `503` answer to this request, if it gets
    /// one.
    fn refuse(&self, request: &Request<hyper::body::Incoming>) -> Option<Response<Body>> {
        let mut state = self.state();
        let path = request.uri().path().to_owned();
        // The resource the request names, whichever verb: a collection,
        // one object or its status.
        let plural = path
            .split('/')
            .find(|segment| RESOURCES.iter().any(|r| r.plural == *segment))
            .unwrap_or_default()
            .to_owned();
        if let Some((code, retry_after)) =
            state.failures.get_mut(&plural).and_then(|f| f.pop_front())
        {
            *state.failed.entry(plural).or_default() += 1;
            let code = StatusCode::from_u16(code).unwrap_or(StatusCode::SERVICE_UNAVAILABLE);
            let reason = match code {
                StatusCode::TOO_MANY_REQUESTS => "TooManyRequests",
                _ => "ServiceUnavailable",
            };
            let mut response =
                json_response(code, &status(code, reason, "the server is busy; try again"));
            if let Some(seconds) = retry_after
                && let Ok(value) = hyper::header::HeaderValue::from_str(&seconds.to_string())
            {
                response
                    .headers_mut()
                    .insert(hyper::header::RETRY_AFTER, value);
            }
            return Some(response);
        }
        if state.authenticate {
            let token = request
                .headers()
                .get(hyper::header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.strip_prefix("Bearer "));
            if !token.is_some_and(|t| state.tokens.contains(t) || token::authenticates(&state, t)) {
                return Some(json_response(
                    StatusCode::UNAUTHORIZED,
                    &status(StatusCode::UNAUTHORIZED, "Unauthorized", "Unauthorized"),
                ));
            }
        }
        let segments: Vec<&str> = request.uri().path().trim_matches('/').split('/').collect();
        let verb = match *request.method() {
            hyper::Method::GET => "get",
            hyper::Method::POST => "create",
            hyper::Method::PATCH => "patch",
            hyper::Method::PUT => "update",
            hyper::Method::DELETE => "delete",
            _ => "other",
        };
        let refused = state.forbidden.iter().find(|(method, plural)| {
            method.eq_ignore_ascii_case(request.method().as_str())
                && segments.iter().any(|s| s == plural)
        })?;
        let plural = &refused.1;
        Some(json_response(
            StatusCode::FORBIDDEN,
            &status(
                StatusCode::FORBIDDEN,
                "Forbidden",
                &format!(
                    "{plural} is forbidden: User \"system:serviceaccount:test:limited\" cannot {verb} resource \"{plural}\""
                ),
            ),
        ))
    }

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
            deliver_at: tokio::time::Instant::now() + state.watch_lag,
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
        Self::start_with(crd_versions, None).await
    }

    /// Starts a server like [`ApiServer::start`] that speaks HTTPS, with a
    /// CA of its own in its kubeconfig: what a remote-cluster Secret needs.
    pub async fn start_tls(crd_versions: &[&'static str]) -> ApiServer {
        Self::start_with(crd_versions, Some(tls::ServerTls::generate())).await
    }

    async fn start_with(crd_versions: &[&'static str], tls: Option<tls::ServerTls>) -> ApiServer {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the test API server");
        let address = listener.local_addr().expect("test API server address");
        let (changes, _) = broadcast::channel(4096);
        let state = State {
            ca_pem: tls.as_ref().map(|tls| tls.ca_pem.clone()),
            token_requests: true,
            ..State::default()
        };
        let shared = Arc::new(Shared {
            state: Mutex::new(state),
            changes,
            epoch: watch::channel(0).0,
            cut: watch::channel(Cut::default()).0,
            crd_versions: crd_versions.to_vec(),
            address,
            tls,
            write_gate: Mutex::new(None),
        });
        let server = ApiServer {
            shared,
            accept: Mutex::new(None),
        };
        // The namespaces every cluster has.
        for name in ["default", "kube-system", "kube-public", "kube-node-lease"] {
            server.apply(fixtures::namespace(name));
        }
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
                    let mut cut = shared.cut.subscribe();
                    let seen = *cut.borrow_and_update();
                    // Closing this socket sends a reset, not a FIN.
                    let _ = socket2::SockRef::from(&stream).set_linger(Some(Duration::ZERO));
                    let service_shared = shared.clone();
                    let service = service_fn(move |request| {
                        let shared = service_shared.clone();
                        async move {
                            if shared.hang(&request) {
                                std::future::pending::<()>().await;
                            }
                            if let Some(refusal) = shared.refuse(&request) {
                                return Ok::<_, Infallible>(refusal);
                            }
                            let gate = (request.method() != hyper::Method::GET)
                                .then(|| shared.write_gate.lock().ok().and_then(|g| g.clone()))
                                .flatten();
                            let _permit = match gate {
                                Some((delay, slots)) => {
                                    let permit = slots.acquire_owned().await.ok();
                                    tokio::time::sleep(delay).await;
                                    permit
                                }
                                None => None,
                            };
                            let response = if token::handles(&request) {
                                token::respond(&shared, request).await
                            } else if write::handles(&request) {
                                write::respond(&shared, request).await
                            } else {
                                respond(&shared, request)
                            };
                            Ok::<_, Infallible>(response)
                        }
                    });
                    let stream: Box<dyn Stream> = match &shared.tls {
                        Some(tls) => match tls.acceptor.accept(stream).await {
                            Ok(stream) => Box::new(stream),
                            Err(_) => return,
                        },
                        None => Box::new(stream),
                    };
                    let connection =
                        http1::Builder::new().serve_connection(TokioIo::new(stream), service);
                    tokio::pin!(connection);
                    loop {
                        tokio::select! {
                            _ = connection.as_mut() => return,
                            changed = cut.changed() => {
                                let now = *cut.borrow_and_update();
                                if changed.is_err() || now.resets != seen.resets {
                                    // Dropped mid-response: the client sees
                                    // the connection reset.
                                    return;
                                }
                                if now.blackholes != seen.blackholes {
                                    // Open but silent, as a peer behind a
                                    // dead path: never read or written again.
                                    std::future::pending::<()>().await;
                                }
                            }
                        }
                    }
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
        let cluster = match &self.shared.tls {
            Some(tls) => format!(
                "server: https://{address}\n    certificate-authority-data: {ca}",
                address = self.shared.address,
                ca = tls.ca_data
            ),
            None => format!("server: http://{}", self.shared.address),
        };
        format!(
            "apiVersion: v1
kind: Config
clusters:
- name: {name}
  cluster:
    {cluster}
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
"
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

    fn record(&self, state: &mut State, plural: &'static str, event: &'static str, object: Value) {
        self.shared.record(state, plural, event, object);
    }

    /// Ends every open watch, as a load balancer or an API server restart
    /// would; clients resume from their last resource version.
    pub fn drop_watches(&self) {
        self.shared.epoch.send_modify(|epoch| *epoch += 1);
    }

    /// Resets every connection open now (TCP RST, in the middle of any
    /// response or watch), as a load balancer or a crashing server does;
    /// new connections are served as before.
    pub fn reset_connections(&self) {
        self.shared.cut.send_modify(|cut| cut.resets += 1);
    }

    /// Makes every connection open now half-open: it stays open but the
    /// server never reads from or writes to it again, as when the path to
    /// the peer dies without a reset. New connections are served as before.
    pub fn blackhole_connections(&self) {
        self.shared.cut.send_modify(|cut| cut.blackholes += 1);
    }

    /// Refuses requests without a known bearer token with `401`, as a real
    /// server does: `test-token` (the kubeconfigs' own) and the tokens of
    /// ServiceAccount token Secrets minted here are known.
    pub fn require_tokens(&self) {
        let mut state = self.shared.state();
        state.authenticate = true;
        state.tokens.insert("test-token".to_owned());
    }

    /// Makes every write take `delay` and serves at most `in_flight` writes
    /// at once (the rest wait their turn), as a real server's round trip
    /// and its priority-and-fairness seats would.
    pub fn slow_writes(&self, delay: Duration, in_flight: usize) {
        if let Ok(mut gate) = self.shared.write_gate.lock() {
            *gate = Some((
                delay,
                Arc::new(tokio::sync::Semaphore::new(in_flight.max(1))),
            ));
        }
    }

    /// Delivers every watch event `lag` after its change, as a loaded
    /// server's watch cache does: a write's answer arrives before its echo.
    pub fn lag_watches(&self, lag: Duration) {
        self.shared.state().watch_lag = lag;
    }

    /// Serves the TokenRequest subresource, or not (`404`, as a server
    /// without it: `strait link` falls back to a legacy token Secret).
    pub fn serve_token_requests(&self, served: bool) {
        self.shared.state().token_requests = served;
    }

    /// Makes this a single-stack IPv4 cluster from now on, as a real one
    /// started with one service CIDR.
    pub fn single_stack(&self) {
        self.shared.state().single_stack = true;
    }

    /// Answers `method` requests on `plural` with `403 Forbidden`, worded
    /// as RBAC words it, as for a caller without the rights.
    pub fn forbid(&self, method: &str, plural: &str) {
        self.shared
            .state()
            .forbidden
            .push((method.to_owned(), plural.to_owned()));
    }

    /// Answers the next `count` requests on `plural` (any verb, a list's
    /// later pages included) with `code` (`429` or `503`), with a
    /// `Retry-After` of `retry_after` seconds when given.
    pub fn fail_next(&self, plural: &str, code: u16, count: usize, retry_after: Option<u64>) {
        self.shared
            .state()
            .failures
            .entry(plural.to_owned())
            .or_default()
            .extend(std::iter::repeat_n((code, retry_after), count));
    }

    /// Requests on `plural` failed by `fail_next` so far.
    pub fn failed(&self, plural: &str) -> usize {
        self.shared.state().failed.get(plural).copied().unwrap_or(0)
    }

    /// Refuses the next `count` continue tokens of `plural` as expired
    /// (`410`), as after a compaction during a paged list.
    pub fn expire_continues(&self, plural: &'static str, count: usize) {
        *self
            .shared
            .state()
            .expire_continues
            .entry(plural)
            .or_default() += count;
    }

    /// Continue tokens of `plural` refused as expired.
    pub fn expired_continues(&self, plural: &str) -> usize {
        self.shared
            .state()
            .expired_continues
            .get(plural)
            .copied()
            .unwrap_or(0)
    }

    /// Later pages of paged lists of `plural` served.
    pub fn pages(&self, plural: &str) -> usize {
        self.shared.state().pages.get(plural).copied().unwrap_or(0)
    }

    /// Leaves the next `count` list requests of `plural` unanswered, on an
    /// open connection, forever.
    pub fn hang_lists(&self, plural: &'static str, count: usize) {
        *self.shared.state().hang_lists.entry(plural).or_default() += count;
    }

    /// List requests of `plural` left unanswered so far.
    pub fn hung_lists(&self, plural: &str) -> usize {
        self.shared
            .state()
            .hung_lists
            .get(plural)
            .copied()
            .unwrap_or(0)
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

    /// Lists started for a resource (by plural): first pages, not the
    /// later pages of a paged list.
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
        ["api"] => discovery::versions(shared),
        ["api", "v1"] => {
            discovery::resource_list(shared, "", "v1").unwrap_or_else(|| not_found(&path))
        }
        ["apis"] => json_response(StatusCode::OK, &discovery::group_list(shared)),
        ["apis", group, version] => {
            discovery::resource_list(shared, group, version).unwrap_or_else(|| not_found(&path))
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

/// Polls `done` until it holds, failing with `what` and `state()` after
/// 15 s: what the kube tests wait for is a watch event or a Lease period away.
pub async fn until(what: &str, mut done: impl FnMut() -> bool, state: impl Fn() -> String) {
    let start = tokio::time::Instant::now();
    while !done() {
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "timed out waiting for {what}; {}",
            state()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
