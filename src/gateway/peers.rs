//! Following each peer's exported-state feed (`kube.peers`) on the tunnel
//! pool, as this cluster's gateway, and reporting every batch applied (and
//! every failure) to the Kubernetes source's hub, which holds the peer as a
//! cluster of the set (docs/tunnel-protocol.md §10). One task per peer; a
//! feed that ends, stalls or breaks a rule is read again after a backoff,
//! from the last revision applied, at the peer's next configured gateway.

use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::backoff::{Backoff, Retry};
use crate::discovery::kube::{KubeHandle, PeerReports};
use crate::feed::{FEED_PATH, FeedLimits, FeedPeer, Follower};
use crate::state::GatewayState;
use crate::tunnel::feed::FeedReader;

/// How long a feed may say nothing (it sends a heartbeat after 10 s quiet)
/// before it is given up and read again.
const STALL: Duration = Duration::from_secs(30);

/// Starts a follower for each of the source's peers.
pub(super) fn follow(
    state: &Arc<GatewayState>,
    kube: &KubeHandle,
    stop: &CancellationToken,
) -> Vec<JoinHandle<()>> {
    let reports = kube.peer_reports();
    kube.peers()
        .iter()
        .map(|peer| {
            tokio::spawn(follow_peer(
                state.clone(),
                peer.clone(),
                reports.clone(),
                stop.clone(),
            ))
        })
        .collect()
}

/// The feed's path, resuming from what `follower` holds when it can.
fn feed_path(follower: &Follower) -> String {
    match follower.resume_from() {
        Some(from) => format!(
            "{FEED_PATH}?epoch={}&revision={}",
            from.epoch, from.revision
        ),
        None => FEED_PATH.to_owned(),
    }
}

async fn follow_peer(
    state: Arc<GatewayState>,
    peer: FeedPeer,
    reports: PeerReports,
    stop: CancellationToken,
) {
    let limits = FeedLimits::default();
    let mut follower = Follower::new(peer.cluster.clone(), limits);
    let mut backoff = Backoff::new(Retry::default());
    let allowed = [peer.cluster.clone()];
    if peer.gateways.is_empty() {
        // `gateway.yaml` refuses such a peer; one made in code is said.
        reports
            .failed(
                peer.cluster.clone(),
                "no gateway address to read its feed at".to_owned(),
            )
            .await;
        return;
    }
    for gateway in peer.gateways.iter().cycle() {
        let path = feed_path(&follower);
        let mut applied = false;
        // Reads until the feed fails: why it did.
        let read = async {
            let stream = match state.pool.feed(gateway, &allowed, &path).await {
                Ok(stream) => stream,
                Err(error) => return error.to_string(),
            };
            let mut reader = FeedReader::new(stream, limits.max_message_bytes, STALL);
            loop {
                let changed = match reader.next_batch(&mut follower, |_| {}).await {
                    Ok(changed) => changed,
                    Err(error) => return error.to_string(),
                };
                if let Some(held) = follower.state() {
                    applied = true;
                    reports
                        .synced(peer.cluster.clone(), Arc::clone(held), changed)
                        .await;
                }
            }
        };
        let error = tokio::select! {
            error = read => error,
            () = stop.cancelled() => return,
        };
        follower.disconnected();
        reports
            .failed(
                peer.cluster.clone(),
                format!("feed of {} at {gateway}: {error}", peer.cluster),
            )
            .await;
        if applied {
            backoff.reset();
        }
        tokio::select! {
            () = tokio::time::sleep(backoff.next_delay()) => {}
            () = stop.cancelled() => return,
        }
    }
}
