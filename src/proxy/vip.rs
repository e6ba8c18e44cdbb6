//! ClusterSetIP listeners: a client dials a service's VIP (from this
//! cluster's ServiceImport) and the address it dialled selects the service
//! and port. Connections redirected by iptables (`REDIRECT`/`TPROXY` to a
//! VIP listener) are accepted too: their original destination is read with
//! `SO_ORIGINAL_DST`. Import listeners (`proxy::imports`) serve their
//! connections here too, the port they arrived on selecting the service.
//! A remote headless pod's address, or its per-pod import port, selects
//! that one pod.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use socket2::SockRef;
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

use super::Finish;
use super::upstream::{Carry, Selection, open};
use crate::admin::metrics::{Limit, Listener, Transport};
use crate::logging::connection::{ConnectionId, record_service};
use crate::model::Protocol;
use crate::net::splice::{SpliceEnd, splice};
use crate::state::GatewayState;

/// What selects the service of a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Selector {
    /// The address the client dialled: a ClusterSetIP VIP.
    DialledAddress,
    /// The gateway port it arrived on: an import port, behind kube-proxy's DNAT.
    ImportPort,
}

impl Selector {
    fn listener(self) -> Listener {
        match self {
            Selector::DialledAddress => Listener::ClusterSetIp,
            Selector::ImportPort => Listener::Import,
        }
    }
}

/// Accepts VIP connections until `shutdown`.
pub async fn serve(listener: TcpListener, state: Arc<GatewayState>, shutdown: CancellationToken) {
    serve_with(listener, state, shutdown, Selector::DialledAddress).await;
}

/// Accepts connections until `shutdown`, the service chosen by `selector`.
pub(crate) async fn serve_with(
    listener: TcpListener,
    state: Arc<GatewayState>,
    shutdown: CancellationToken,
    selector: Selector,
) {
    let tracker = state.connections.clone();
    crate::net::accept::accept_until(
        listener,
        selector.listener(),
        state.clone().admission(selector.listener()),
        shutdown,
        tracker,
        move |stream, remote, id| serve_connection(stream, remote, id, state.clone(), selector),
    )
    .await;
}

/// The address the client meant: the pre-NAT destination when iptables
/// redirected the connection, else the address it reached.
fn dialled_address(stream: &TcpStream) -> Option<SocketAddr> {
    let local = stream.local_addr().ok()?;
    let original = SockRef::from(stream)
        .original_dst_v4()
        .ok()
        .and_then(|address| address.as_socket());
    Some(original.unwrap_or(local))
}

/// Serves one VIP connection. Not an `async fn`: this task lives as long as
/// the connection, and an `async fn` would keep a second copy of its
/// arguments for all that time.
#[expect(
    clippy::manual_async_fn,
    reason = "an async fn would store its arguments twice"
)]
fn serve_connection(
    stream: TcpStream,
    remote: SocketAddr,
    id: ConnectionId,
    state: Arc<GatewayState>,
    selector: Selector,
) -> impl Future<Output = ()> + Send {
    async move {
        let started = Instant::now();
        let dialled = match selector {
            Selector::DialledAddress => dialled_address(&stream),
            Selector::ImportPort => stream.local_addr().ok(),
        };
        let Some(dialled) = dialled else {
            return;
        };
        let opened = {
            let table = state.routes.load_full();
            let found = match selector {
                Selector::DialledAddress => table
                    .lookup_vip(dialled.ip(), Protocol::Tcp, dialled.port())
                    .map(|(service, route)| (service, route, None))
                    .or_else(|| {
                        table
                            .lookup_pod_vip(dialled.ip(), Protocol::Tcp, dialled.port())
                            .map(|(service, route, pod)| (service, route, Some(pod)))
                    }),
                Selector::ImportPort => table.lookup_import_port(dialled.port()),
            };
            let Some((service, route, pod)) = found else {
                // Closing without a byte is all TCP can say: nothing is exported there.
                tracing::debug!(client = %remote, %dialled, "no service behind this address");
                return;
            };
            record_service(&service.key, route.port);
            // Boxed: opening (a dial, maybe a tunnel handshake) needs far
            // more state than the splice that follows.
            // A remote pod's address or import port reaches that pod only.
            let selection = Selection::of(pod);
            Box::pin(open(
                &state,
                &table,
                service,
                route,
                selection,
                remote,
                Carry::Stream,
            ))
            .await
            .map(|opened| {
                Finish::split(
                    opened,
                    id,
                    remote,
                    service.key.clone(),
                    route.port,
                    started,
                    super::EgressCharge::of(&state),
                )
            })
            // The table is released here: a long connection must not pin old routes.
        };
        // No `match` spans the splice: its scrutinee would be kept beside it.
        let (upstream, finish) = match opened {
            Ok(opened) => opened,
            Err(error) => {
                if state.quiet.local_connections.check(error.kind()) {
                    tracing::info!(client = %remote, %dialled, %error, "cluster-set-ip connection refused");
                }
                return;
            }
        };
        let mut splice =
            splice(stream, upstream, state.idle_timeout).watch(state.stall_report, finish);
        // By reference: awaiting by value would move it into a second slot.
        let outcome = (&mut splice).await;
        if matches!(outcome.end, SpliceEnd::OverBudget) {
            state.metrics.limited(Limit::Memory, Transport::None);
        }
        splice.into_watch().done(outcome);
    }
}
