//! Following each peer's exported-state feed (`kube.peers` and peer
//! Secrets) on the tunnel pool, as this cluster's gateway, and reporting
//! every batch applied (and every failure) to the Kubernetes source's hub,
//! which holds the peer as a cluster of the set (docs/tunnel-protocol.md
//! §10). One task per peer, following the hub's list of peers; a
//! feed that ends, stalls or breaks a rule is read again after a backoff,
//! from the last revision applied, at the peer's next configured gateway.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use std::time::Instant;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::backoff::{Backoff, Retry};
use crate::discovery::kube::{KubeHandle, PeerReports};
use crate::feed::{FEED_PATH, FeedLimits, FeedPeer, Follower};
use crate::model::{ClusterId, GatewayAddress};
use crate::state::GatewayState;
use crate::tls::PeerAuthority;
use crate::token_bucket::TokenBucket;
use crate::tunnel::TransportMode;
use crate::tunnel::client::{FeedStream, TunnelError};
use crate::tunnel::feed::FeedReader;

/// How long a feed may say nothing (it sends a heartbeat after 10 s quiet)
/// before it is given up and read again.
const STALL: Duration = Duration::from_secs(30);

/// Follows the source's peers as the admin names them: a follower per
/// peer, started when it is added, started again when its record changes,
/// stopped when it is removed; each peer's recorded CA is trusted (for its
/// cluster alone) before its follower dials.
pub(super) fn follow(
    state: &Arc<GatewayState>,
    kube: &KubeHandle,
    stop: &CancellationToken,
) -> JoinHandle<()> {
    let (state, stop) = (state.clone(), stop.clone());
    let reports = kube.peer_reports();
    let mut peers = kube.peers();
    tokio::spawn(async move {
        let mut running: BTreeMap<ClusterId, (FeedPeer, CancellationToken)> = BTreeMap::new();
        loop {
            let wanted = Arc::clone(&peers.borrow_and_update());
            trust(&state, &wanted);
            running.retain(|_, (peer, follower)| {
                let keep = wanted.contains(peer);
                if !keep {
                    follower.cancel();
                }
                keep
            });
            for peer in wanted.iter() {
                if !running.contains_key(&peer.cluster) {
                    let follower = stop.child_token();
                    tokio::spawn(follow_peer(
                        state.clone(),
                        peer.clone(),
                        reports.clone(),
                        follower.clone(),
                    ));
                    running.insert(peer.cluster.clone(), (peer.clone(), follower));
                }
            }
            tokio::select! {
                changed = peers.changed() => if changed.is_err() { return },
                () = stop.cancelled() => return,
            }
        }
    })
}

/// Trusts the CAs the peers' records carry, each for its own cluster.
fn trust(state: &GatewayState, peers: &[FeedPeer]) {
    let authorities = peers
        .iter()
        .filter_map(|peer| {
            let certificate = peer.authority.clone()?;
            Some(PeerAuthority {
                cluster: peer.cluster.clone(),
                certificate,
            })
        })
        .collect();
    match state.tls.set_peer_authorities(authorities) {
        Ok(true) => tracing::info!("the peers' recorded CAs are trusted, each for its own cluster"),
        Ok(false) => {}
        Err(error) => {
            tracing::warn!(%error, "the peers' recorded CAs could not be added; trusting ca.crt alone as before")
        }
    }
}

/// Opens the feed of `gateway` (or, with another path, the answer of
/// another `GET` served beside it) as traffic to it goes (`tunnel.transport`,
/// `tunnel.peers`): over QUIC when that is the mode, or first when it is
/// `auto` (HTTP/2 then, on any failure: a peer that knows no QUIC feed
/// request refuses it); over HTTP/2 otherwise.
pub(super) async fn open_feed(
    state: &GatewayState,
    gateway: &GatewayAddress,
    allowed: &[ClusterId],
    path: &str,
) -> Result<FeedStream, TunnelError> {
    let mode = state.tunnel.transport_for(gateway);
    if let (Some(quic), TransportMode::Quic | TransportMode::Auto) = (&state.quic, mode)
        && (mode == TransportMode::Quic || !quic.is_down(gateway))
    {
        match quic.feed(gateway, allowed, path).await {
            Ok(stream) => return Ok(stream),
            Err(error) if mode == TransportMode::Quic => return Err(error),
            Err(error) => {
                tracing::debug!(%gateway, %error, "feed over quic failed; reading it over http/2");
            }
        }
    }
    state.pool.feed(gateway, allowed, path).await
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
    // Services taken per second, across reconnects: a peer flooding
    // changes is read no faster (flow control holds it back), and costs
    // the hub and the other peers no more than this.
    let burst = u32::try_from(limits.max_services).unwrap_or(u32::MAX);
    let mut pace = TokenBucket::new(limits.max_changes_per_second, burst, Instant::now());
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
            let stream = match open_feed(&state, gateway, &allowed, &path).await {
                Ok(stream) => stream,
                Err(error) => return error.to_string(),
            };
            let mut reader = FeedReader::new(stream, limits.max_message_bytes, STALL);
            loop {
                let changed = match reader.next_batch(&mut follower, |_| {}).await {
                    Ok(changed) => changed,
                    Err(error) => return error.to_string(),
                };
                let taken = u64::try_from(changed.len().max(1)).unwrap_or(u64::MAX);
                if let Some(held) = follower.state() {
                    applied = true;
                    reports
                        .synced(peer.cluster.clone(), Arc::clone(held), changed)
                        .await;
                }
                let wait = pace.reserve_many(taken, Instant::now());
                if !wait.is_zero() {
                    tracing::debug!(peer = %peer.cluster, ?wait, "peer's feed over its rate; reading on later");
                    tokio::time::sleep(wait).await;
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
