//! Serving one tunnel request, whatever the transport carries it (an HTTP/2
//! CONNECT stream or a QUIC stream): authorise the target against the route
//! table, dial it (picking a local backend when a service was named), then
//! splice (or, for a UDP flow, pump datagrams between the stream's capsules
//! and a UDP socket) and write the access-log line.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::future::Either;

use tokio::net::TcpStream;

use crate::admin::metrics::{
    ClosedResult, ConnectionMetrics, Limit, RefusedReason, RoutePath, Transport,
};
use crate::logging::connection::ConnectionId;
use crate::model::ClusterId;
use crate::model::Protocol;
use crate::net::accept::closed_result;
use crate::net::buffer::BUFFER_SIZE;
use crate::net::datagram::{ConnectedUdp, pump};
use crate::net::dial::{DialError, dial_announced};
use crate::net::memory::MemoryBudget;
use crate::net::proxy_header::{Caller, stream_header};
use crate::net::splice::{
    Flow, MemoryCharge, SpliceEnd, SpliceIo, SpliceOutcome, StallWatch, splice,
};
use crate::routing::balancer::BackendId;
use crate::routing::inbound::{InboundPlan, InboundRefusal, authorize_for, refused_target};
use crate::state::GatewayState;
use crate::tls::Identity;
use crate::tunnel::capsule::CapsulePort;
use crate::tunnel::limits::PeerBudgets;

/// What a peer gateway asked for on one stream.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Asked {
    /// The target; `None` when the request named none.
    pub authority: Option<String>,
    /// The original client's address, sent for a service that asks for
    /// the PROXY protocol. Believed because an authenticated peer gateway
    /// says it, and used only as the header's source.
    pub client: Option<SocketAddr>,
    /// A UDP flow: datagrams in capsules, to a UDP port's backend.
    pub datagrams: bool,
}

/// A refused request: the status and the reason sent back to the peer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub status: u16,
    pub reason: String,
}

/// A request whose backend is dialled, waiting for the stream to splice to.
pub struct Accepted {
    backend: Dialled,
    /// A UDP flow's charge, held until the flow ends (a TCP stream is
    /// charged by its splice while it holds bytes).
    flow_charge: Option<DialCharge>,
    finish: InboundFinish,
}

/// The backend end of an accepted request.
enum Dialled {
    Stream(TcpStream),
    Datagrams(ConnectedUdp),
}

/// What an inbound stream's access-log line and metrics need once its
/// splice ends; the splice holds it, and reports a stall through it.
struct InboundFinish {
    connection: ConnectionId,
    /// The calling gateway's cluster (shared, not copied per stream).
    caller: ClusterId,
    authority: String,
    address: SocketAddr,
    metrics: ConnectionMetrics,
    started: Instant,
    /// What the stream is charged while it holds bytes: its caller's
    /// budget and the gateway's.
    memory: InboundCharge,
}

/// The most an inbound stream holds while a direction is pushed back: its
/// flow-control window, which the peer may fill while the backend does
/// not read, and a copy buffer.
struct InboundCharge {
    peers: Arc<PeerBudgets>,
    budget: Arc<MemoryBudget>,
    hold: u64,
}

impl InboundCharge {
    fn of(state: &GatewayState) -> Self {
        Self {
            peers: state.peer_budgets.clone(),
            budget: state.overload.memory().clone(),
            hold: u64::from(state.tunnel.stream_window) + BUFFER_SIZE as u64,
        }
    }

    /// Charges `caller` and the gateway for what one stream may hold;
    /// which budget had no room when not.
    fn charge(&self, caller: &ClusterId) -> Result<(), &'static str> {
        if !self.peers.charge(caller, self.hold) {
            return Err("the caller's (tunnel.maxBufferedBytesPerPeer)");
        }
        if !self.budget.charge(self.hold) {
            self.peers.release(caller, self.hold);
            return Err("the gateway's (tuning.memoryLimit)");
        }
        Ok(())
    }

    fn release(&self, caller: &ClusterId) {
        self.peers.release(caller, self.hold);
        self.budget.release(self.hold);
    }
}

/// A stream's charge while its backend is dialled: the peer may fill the
/// stream's window before it is answered, and that is held until the
/// splice starts reading it. A UDP flow keeps it for its life: its window
/// and one capsule. Given back when dropped.
struct DialCharge {
    charge: InboundCharge,
    caller: ClusterId,
}

impl Drop for DialCharge {
    fn drop(&mut self) {
        self.charge.release(&self.caller);
    }
}

impl MemoryCharge for InboundFinish {
    fn holding(&mut self, holds: bool) -> bool {
        if !holds {
            self.memory.release(&self.caller);
            return true;
        }
        match self.memory.charge(&self.caller) {
            Ok(()) => true,
            Err(budget) => {
                tracing::debug!(caller = %self.caller, authority = %self.authority, budget, "inbound stream holding bytes past a memory budget; closed");
                false
            }
        }
    }
}

impl InboundFinish {
    fn done(self, outcome: SpliceOutcome) {
        let InboundFinish {
            connection,
            caller,
            authority,
            address,
            metrics,
            started,
            memory: _,
        } = self;
        let result = closed_result(&outcome.end);
        tracing::info!(
            target: "strait::access",
            connection = connection.get(),
            direction = "inbound",
            caller = %caller,
            authority = %authority,
            backend = %address,
            bytes_in = outcome.client_to_backend,
            bytes_out = outcome.backend_to_client,
            duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
            result = ?outcome.end,
            "connection"
        );
        metrics.closed(result, outcome.client_to_backend, outcome.backend_to_client);
    }
}

impl StallWatch for InboundFinish {
    fn stalled(&mut self, flow: Flow, held: usize) {
        self.metrics.stall_began();
        tracing::warn!(
            caller = %self.caller,
            authority = %self.authority,
            backend = %self.address,
            direction = flow.as_str(),
            held_bytes = held,
            "inbound stream stalled: it holds bytes the other side does not take"
        );
    }

    fn resumed(&mut self, stalled_for: Duration) {
        self.metrics.stall_ended();
        tracing::info!(
            caller = %self.caller,
            authority = %self.authority,
            backend = %self.address,
            stalled_ms = u64::try_from(stalled_for.as_millis()).unwrap_or(u64::MAX),
            "stalled inbound stream moved again"
        );
    }
}

/// Counts and logs a refusal decided before any dial.
pub fn refuse(
    state: &GatewayState,
    caller: &Identity,
    authority: Option<&str>,
    refusal: InboundRefusal,
) -> Refusal {
    let reason = match &refusal {
        InboundRefusal::Malformed(_) => RefusedReason::Malformed,
        InboundRefusal::UnknownCaller(_) => RefusedReason::UnknownCaller,
        InboundRefusal::OwnCluster(_) => RefusedReason::OwnCluster,
        InboundRefusal::NotAdmitted(_) => RefusedReason::NotAdmitted,
        InboundRefusal::Forbidden(_) => RefusedReason::Forbidden,
        InboundRefusal::UnknownService(_) => RefusedReason::UnknownService,
        InboundRefusal::NoBackend(_) => RefusedReason::NoBackend,
        InboundRefusal::OverLimit(_) => RefusedReason::OverLimit,
    };
    state.metrics.refused(reason);
    if state.quiet.tunnel_requests.check(reason.as_str()) {
        let authority = authority.unwrap_or("");
        if reason == RefusedReason::UnknownCaller {
            // A member's valid certificate, from a cluster this set does
            // not hold: a link made or left on one side only, which its
            // clients see as connections reset. Worth an operator's eye.
            tracing::warn!(
                caller = %caller,
                authority,
                %refusal,
                "tunnel request refused: the caller's cluster links to this one, but this one does not link back (strait link both ways, or strait unlink on its side)"
            );
        } else {
            tracing::info!(caller = %caller, authority, %refusal, "tunnel request refused");
        }
    }
    Refusal {
        status: refusal.status(),
        reason: refusal.to_string(),
    }
}

/// A stream slot of `caller`'s budget, held for the stream's lifetime, or
/// the refusal to send back when the caller is at its cap.
pub fn stream_slot(
    state: &GatewayState,
    caller: &Identity,
    authority: Option<&str>,
) -> Result<crate::tunnel::limits::Permit, Refusal> {
    state.peer_budgets.stream(&caller.cluster).map_err(|over| {
        refuse(
            state,
            caller,
            authority,
            InboundRefusal::OverLimit(over.to_string()),
        )
    })
}

/// Authorises what `caller` asked for and dials the backend, first telling
/// it who called when its service asks for that.
pub async fn open(
    state: &GatewayState,
    asked: Asked,
    caller: &Identity,
    remote: SocketAddr,
    connection: ConnectionId,
    transport: Transport,
) -> Result<Accepted, Refusal> {
    let started = Instant::now();
    let Asked {
        authority,
        client,
        datagrams,
    } = asked;
    let protocol = if datagrams {
        Protocol::Udp
    } else {
        Protocol::Tcp
    };
    let span = tracing::Span::current();
    if let Some(authority) = &authority {
        span.record("authority", authority.as_str());
    }
    let table = state.routes.load_full();
    let plan = authorize_for(
        &table,
        &caller.cluster,
        authority.as_deref(),
        protocol,
        &state.inbound,
    )
    .map_err(|refusal| refuse(state, caller, authority.as_deref(), refusal))?;
    // Held until the dial is over: a peer that resets its streams cannot
    // keep more dials than this in flight.
    let _dialling = state.peer_budgets.dial(&caller.cluster).map_err(|over| {
        refuse(
            state,
            caller,
            authority.as_deref(),
            InboundRefusal::OverLimit(over.to_string()),
        )
    })?;
    let charge = InboundCharge::of(state);
    if let Err(budget) = charge.charge(&caller.cluster) {
        state.metrics.limited(Limit::Memory, transport);
        return Err(refuse(
            state,
            caller,
            authority.as_deref(),
            InboundRefusal::OverLimit(format!("no room in {budget} memory budget")),
        ));
    }
    let mut charged = Some(DialCharge {
        charge,
        caller: caller.cluster.clone(),
    });
    // The backend socket is new work: refused while descriptors or
    // memory are short.
    if let Err(short) = state.overload.admit() {
        state.metrics.limited(short.limit(), transport);
        return Err(refuse(
            state,
            caller,
            authority.as_deref(),
            InboundRefusal::OverLimit(short.reason().to_owned()),
        ));
    }
    // The backend learns the original client (as the calling gateway
    // says it, or the gateway itself) and the caller's identity, which
    // comes from its certificate.
    // Built on the first backend owed a header only.
    let mut gateway: Option<String> = None;
    let metrics = state.metrics.connection(RoutePath::Inbound, transport);
    let mut tried: Vec<BackendId> = Vec::new();
    let mut last_error = None;
    let mut rng = fastrand::Rng::new();
    let mut attempts = 0;
    while attempts < state.dial_attempts.max(1) {
        let address = match &plan {
            InboundPlan::Dial(address) => *address,
            InboundPlan::Pick { service, route } => {
                // Session affinity keys on the calling gateway: the original
                // client's address does not cross the tunnel.
                let picked = state.chooser.pick(
                    service,
                    route,
                    remote.ip(),
                    &tried,
                    Instant::now(),
                    &mut rng,
                );
                let Some(routed) = picked else { break };
                tried.push(BackendId::of(routed));
                // Only backends of this network are dialled, and none that
                // is machinery; skip the others without spending an attempt.
                let address = SocketAddr::new(routed.backend.address, routed.backend.port);
                if !routed.peer_dialable()
                    || refused_target(&table, &state.inbound, &address).is_some()
                {
                    continue;
                }
                address
            }
        };
        attempts += 1;
        let dial_started = Instant::now();
        let announce = !datagrams && plan.proxy_protocol(&table, &address);
        let header = if announce {
            let gateway = gateway.get_or_insert_with(|| caller.uri());
            let told = Caller {
                source: client.unwrap_or(remote),
                cluster: caller.cluster.as_str(),
                gateway,
            };
            match stream_header(&told, address) {
                Ok(header) => Some(header),
                Err(error) => {
                    tracing::warn!(%address, %error, "no PROXY protocol header could be built");
                    break;
                }
            }
        } else {
            None
        };
        let dialled = async {
            let to = state.overrides.backend(address);
            if datagrams {
                ConnectedUdp::connect(to)
                    .await
                    .map(Dialled::Datagrams)
                    .map_err(|source| DialError::Failed {
                        address: to,
                        source,
                    })
            } else {
                dial_announced(to, state.dial, header.as_deref())
                    .await
                    .map(Dialled::Stream)
            }
        };
        match dialled.await {
            Ok(backend) => {
                metrics.dial(dial_started.elapsed());
                span.record("backend", tracing::field::display(address));
                return Ok(Accepted {
                    backend,
                    flow_charge: if datagrams { charged.take() } else { None },
                    finish: InboundFinish {
                        connection,
                        caller: caller.cluster.clone(),
                        authority: authority.unwrap_or_default(),
                        address,
                        metrics,
                        started,
                        memory: InboundCharge::of(state),
                    },
                });
            }
            Err(error) => {
                tracing::debug!(caller = %caller, %address, %error, "inbound dial failed");
                let fixed = matches!(plan, InboundPlan::Dial(_));
                last_error = Some(error);
                if fixed {
                    break;
                }
            }
        }
    }
    let (status, result) = match &last_error {
        Some(error) if error.is_timeout() => (504, ClosedResult::Timeout),
        Some(_) => (502, ClosedResult::DialError),
        None => (503, ClosedResult::DialError),
    };
    metrics.closed(result, 0, 0);
    Err(Refusal {
        status,
        reason: last_error.map_or_else(
            || "no ready backend left to try".to_owned(),
            |e| e.to_string(),
        ),
    })
}

impl Accepted {
    /// Splices the peer's stream to the backend until both sides are done,
    /// then writes the access-log line. Not an `async fn`: that would keep
    /// `self` and `stream` beside the splice future that owns them.
    pub fn relay<S>(
        self,
        stream: S,
        state: &GatewayState,
        transport: Transport,
    ) -> impl Future<Output = ()>
    where
        S: SpliceIo + Send,
    {
        let limits = state.metrics.clone();
        let Accepted {
            backend,
            flow_charge,
            finish,
        } = self;
        match backend {
            Dialled::Stream(backend) => {
                // A peer that stops reading (a zero window) must not hold the
                // backend's bytes for the whole idle timeout.
                let mut splice = splice(stream, backend, state.idle_timeout)
                    .stall_timeout(state.tunnel.stream_stall_timeout)
                    .watch(state.stall_report, finish);
                Either::Left(async move {
                    // By reference: awaiting by value would move it into a second slot.
                    let outcome = (&mut splice).await;
                    match outcome.end {
                        SpliceEnd::Stalled => limits.limited(Limit::StalledStream, transport),
                        SpliceEnd::OverBudget => limits.limited(Limit::Memory, transport),
                        _ => {}
                    }
                    splice.into_watch().done(outcome);
                })
            }
            Dialled::Datagrams(socket) => {
                let idle = state.udp.idle_timeout;
                let stall = state.tunnel.stream_stall_timeout;
                Either::Right(async move {
                    let _charged = flow_charge;
                    let outcome = pump(CapsulePort::new(stream), socket, idle, stall).await;
                    if matches!(outcome.end, SpliceEnd::Stalled) {
                        limits.limited(Limit::StalledStream, transport);
                    }
                    finish.done(outcome);
                })
            }
        }
    }

    /// The peer went away before the stream could be spliced.
    pub fn abandon(self, why: &str) {
        let finish = self.finish;
        tracing::debug!(caller = %finish.caller, why, "tunnel stream abandoned");
        finish.metrics.closed(ClosedResult::Error, 0, 0);
    }
}
