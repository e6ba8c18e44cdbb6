//! UDP import listeners: one UDP socket per UDP import port. kube-proxy
//! DNATs a ClusterSetIP's UDP port to a gateway pod's import port as it
//! does TCP; here a **flow** is one client address on one import port,
//! kept until `tuning.udpIdleTimeout` passes with no datagram either way
//! and bounded per source prefix, per source and in total
//! (`tuning.maxUdpFlowsPerPrefix`, `tuning.maxUdpFlowsPerSource`,
//! `tuning.maxUdpFlows`, with the TCP listeners' fair refusal: the heaviest
//! sources first). A source address is only what a datagram says: a flow
//! whose client spoke once ends after `tuning.udpUnconfirmedTimeout`
//! without a second datagram, and answers are earned per datagram the
//! client sent (`tuning.udpAnswersPerRequest`, [`AnswerRule`](crate::net::datagram::AnswerRule)). A flow's datagrams go to one backend of the
//! service port, picked when the flow starts like a TCP connection's
//! (`upstream::open`): a UDP socket on the same network, else a tunnel
//! stream to a gateway of the backend's network carrying capsules
//! (`tunnel::capsule`). Answers leave from the import port, so the client
//! and kube-proxy's connection tracking see the address it sent to.
//!
//! Nothing is held beyond a few datagrams per flow: a datagram that finds
//! its flow's queue full (32 datagrams or 64 KiB) is dropped and counted
//! (`limit="udp_queue"`).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use bytes::Bytes;
use tokio::net::UdpSocket;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::upstream::{Carry, Selection, Upstream, open};
use super::{EgressCharge, Finish};
use crate::admin::metrics::{Limit, Transport};
use crate::logging::connection::ConnectionId;
use crate::model::Protocol;
use crate::net::datagram::{AnswerCredit, ListenerClient, pump, receive};
use crate::net::sources::{SourceRefusal, SourceSlot, prefix_of};
use crate::net::splice::{MemoryCharge, SpliceEnd, SpliceOutcome};
use crate::state::GatewayState;
use crate::tunnel::capsule::CapsulePort;

/// Datagrams a flow may have waiting: enough for a burst while its
/// upstream opens, few enough that a stuck flow costs little.
const FLOW_QUEUE: usize = 32;
/// How long a listener waits after a failed receive before the next.
const RECEIVE_BACKOFF: std::time::Duration = std::time::Duration::from_millis(10);
/// Bytes a flow may have waiting, whatever their number.
const FLOW_QUEUE_BYTES: usize = 64 * 1024;

/// One open flow as its listener sees it.
struct Flow {
    id: u64,
    queue: mpsc::Sender<Bytes>,
    queued: Arc<AtomicUsize>,
}

impl Flow {
    /// Queues `datagram` for the flow; gives it back when the flow ended,
    /// drops it (false) when the queue is full.
    fn offer(&self, datagram: Bytes) -> Result<bool, Bytes> {
        let length = datagram.len();
        if self.queued.load(Ordering::Relaxed) + length > FLOW_QUEUE_BYTES {
            return Ok(false);
        }
        self.queued.fetch_add(length, Ordering::Relaxed);
        match self.queue.try_send(datagram) {
            Ok(()) => Ok(true),
            Err(refused) => {
                self.queued.fetch_sub(length, Ordering::Relaxed);
                match refused {
                    mpsc::error::TrySendError::Full(_) => Ok(false),
                    mpsc::error::TrySendError::Closed(datagram) => Err(datagram),
                }
            }
        }
    }
}

/// The open flows of one listener, by client address.
struct Flows {
    by_client: HashMap<SocketAddr, Flow>,
    next_id: u64,
}

/// Serves one UDP import port until `shutdown`.
pub async fn serve(socket: UdpSocket, state: Arc<GatewayState>, shutdown: CancellationToken) {
    let socket = Arc::new(socket);
    let Ok(local) = socket.local_addr() else {
        return;
    };
    let mut flows = Flows {
        by_client: HashMap::new(),
        next_id: 0,
    };
    // Flows say when they end, so the table forgets them (by id: a newer
    // flow of the same client is not the one that ended).
    let (ended, mut endings) = mpsc::unbounded_channel::<(SocketAddr, u64)>();
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            Some((client, id)) = endings.recv() => {
                if flows.by_client.get(&client).is_some_and(|flow| flow.id == id) {
                    flows.by_client.remove(&client);
                }
            }
            received = receive(&socket) => {
                let (datagram, client) = match received {
                    Ok(received) => received,
                    Err(error) => {
                        // A socket that keeps failing (out of buffers)
                        // must not spin the loop: wait before reading again.
                        tracing::debug!(%local, %error, "udp import port receive failed");
                        tokio::time::sleep(RECEIVE_BACKOFF).await;
                        continue;
                    }
                };
                let datagram = match flows.by_client.get(&client) {
                    None => datagram,
                    Some(flow) => match flow.offer(datagram) {
                        Ok(true) => continue,
                        Ok(false) => {
                            state.metrics.limited(Limit::UdpQueue, Transport::None);
                            continue;
                        }
                        // Its flow just ended: this datagram starts another.
                        Err(datagram) => datagram,
                    },
                };
                // Admitted by its source's prefix first, then by its
                // address: many addresses of one prefix (one node's pods, or
                // one spoofer) cannot take every flow.
                let admitted = state
                    .udp
                    .prefixes
                    .admit(prefix_of(client.ip()), u64::MAX)
                    .map_err(|refusal| match refusal {
                        SourceRefusal::PerSource => Limit::UdpFlowsPerPrefix,
                        SourceRefusal::Total | SourceRefusal::Share => Limit::UdpFlows,
                    })
                    .and_then(|prefix| {
                        let source = state.udp.flows.admit(client.ip(), u64::MAX);
                        source.map(|source| (prefix, source)).map_err(|refusal| match refusal {
                            SourceRefusal::PerSource => Limit::UdpFlowsPerSource,
                            SourceRefusal::Total | SourceRefusal::Share => Limit::UdpFlows,
                        })
                    });
                let slots = match admitted {
                    Ok(slots) => slots,
                    Err(limit) => {
                        state.metrics.limited(limit, Transport::None);
                        flows.by_client.remove(&client);
                        continue;
                    }
                };
                let (queue, arrivals) = mpsc::channel(FLOW_QUEUE);
                flows.next_id += 1;
                let flow = Flow {
                    id: flows.next_id,
                    queue,
                    queued: Arc::new(AtomicUsize::new(0)),
                };
                let _ = flow.offer(datagram);
                let (id, queued) = (flow.id, flow.queued.clone());
                flows.by_client.insert(client, flow);
                let credit = Arc::new(AnswerCredit::default());
                let port_end = ListenerClient {
                    socket: socket.clone(),
                    client,
                    arrivals,
                    queued,
                    rule: state.udp.answers,
                    credit: credit.clone(),
                };
                let (state, ended) = (state.clone(), ended.clone());
                let task_state = state.clone();
                state.connections.spawn(async move {
                    run_flow(&task_state, port_end, local.port(), slots).await;
                    let dropped = credit.dropped();
                    if dropped > 0 {
                        task_state.metrics.limited_by(Limit::UdpAnswers, Transport::None, dropped);
                    }
                    let _ = ended.send((client, id));
                });
            }
        }
    }
}

/// One flow: opens its upstream, pumps until idle, writes the access line.
async fn run_flow(
    state: &Arc<GatewayState>,
    client_end: ListenerClient,
    import_port: u16,
    _slots: (SourceSlot, SourceSlot),
) {
    let started = Instant::now();
    let client = client_end.client;
    let opened = {
        let table = state.routes.load_full();
        let found = table
            .lookup_import_port(import_port)
            .filter(|(_, route, _)| route.protocol == Protocol::Udp);
        let Some((service, route, pod)) = found else {
            tracing::debug!(%client, import_port, "no UDP service port behind this import port");
            return;
        };
        Box::pin(open(
            state,
            &table,
            service,
            route,
            Selection::of(pod),
            client,
            Carry::Datagrams,
        ))
        .await
        .map(|opened| {
            Finish::split(
                opened,
                ConnectionId::next(),
                client,
                service.key.clone(),
                route.port,
                started,
                EgressCharge::of(state),
            )
        })
    };
    let (upstream, mut finish) = match opened {
        Ok(opened) => opened,
        Err(error) => {
            if state.quiet.local_connections.check(error.kind()) {
                tracing::info!(%client, import_port, %error, "udp flow refused");
            }
            return;
        }
    };
    // A tunnelled flow is charged its stream's window and a datagram for
    // its life, as the TCP splice is while it holds bytes.
    let transport = upstream.transport();
    let tunnelled = matches!(upstream, Upstream::Tunnel(_) | Upstream::Quic(_));
    if tunnelled && !finish.holding(true) {
        state.metrics.limited(Limit::Memory, transport);
        finish.done(SpliceOutcome {
            client_to_backend: 0,
            backend_to_client: 0,
            end: SpliceEnd::OverBudget,
        });
        return;
    }
    let (idle, stall) = (state.udp.idle_timeout, state.tunnel.stream_stall_timeout);
    let outcome = match upstream {
        Upstream::Udp(socket) => pump(client_end, socket, idle, stall).await,
        Upstream::Tunnel(stream) => pump(client_end, CapsulePort::new(stream), idle, stall).await,
        Upstream::Quic(stream) => pump(client_end, CapsulePort::new(stream), idle, stall).await,
        Upstream::Direct(_) => SpliceOutcome {
            client_to_backend: 0,
            backend_to_client: 0,
            end: SpliceEnd::Error(std::io::Error::other("a TCP upstream for a UDP flow")),
        },
    };
    if tunnelled {
        finish.holding(false);
    }
    if matches!(outcome.end, SpliceEnd::Stalled) {
        state.metrics.limited(Limit::StalledStream, transport);
    }
    finish.done(outcome);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flow() -> (Flow, mpsc::Receiver<Bytes>) {
        let (queue, arrivals) = mpsc::channel(FLOW_QUEUE);
        let flow = Flow {
            id: 1,
            queue,
            queued: Arc::new(AtomicUsize::new(0)),
        };
        (flow, arrivals)
    }

    #[test]
    fn a_flows_queue_is_bounded_in_datagrams_and_in_bytes() {
        let (flow, _arrivals) = flow();
        for _ in 0..FLOW_QUEUE {
            assert_eq!(flow.offer(Bytes::from_static(b"small")), Ok(true));
        }
        assert_eq!(flow.offer(Bytes::from_static(b"one more")), Ok(false));

        let (flow, _arrivals) = self::flow();
        let large = Bytes::from(vec![0u8; 30_000]);
        assert_eq!(flow.offer(large.clone()), Ok(true));
        assert_eq!(flow.offer(large.clone()), Ok(true));
        assert_eq!(flow.offer(large), Ok(false), "past 64 KiB");
        assert_eq!(flow.queued.load(Ordering::Relaxed), 60_000);

        // An ended flow gives the datagram back, to start another.
        let (ended, arrivals) = self::flow();
        drop(arrivals);
        assert_eq!(
            ended.offer(Bytes::from_static(b"again")),
            Err(Bytes::from_static(b"again"))
        );
    }
}
