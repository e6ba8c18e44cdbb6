//! The mixed workload: the fixed-rate 1 KiB request/response of
//! `latency.rs` while bulk flows (a backup, a replica sync) run through the
//! same path, and optionally the connection-rate loop too. On Strait's
//! tunnels every one of these shares the one connection to the peer
//! gateway; HAProxy gives each its own TLS connection.
//!
//! The bulk flows start first and run until the request/response schedule
//! is over, so every request meets them; each is echoed and checked byte for
//! byte like the bulk workload's. They are paced (the e2e bench's mixed
//! workload: a transfer at a fixed rate well below what any path carries
//! here, so the host's two cores are not what the requests queue for) or
//! as fast as they go (the soak, where starving the gateways is the point).

use crate::Result;
use crate::bulk::{Amount, echo_bulk};
use crate::clients::Target;
use crate::connrate::connection_rate;
use crate::latency::{LatencyPlan, LatencyRound, latency_round};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// The bulk flows' head start, so they fill their windows before the
/// first request is scheduled.
const HEAD_START: Duration = Duration::from_millis(200);

/// What runs beside the request/response schedule.
#[derive(Clone, Copy)]
pub(crate) struct Beside {
    pub(crate) bulk_streams: usize,
    /// Bytes a second each bulk flow sends; `None`: as fast as it can.
    pub(crate) bulk_rate: Option<u64>,
    /// Connection-rate loops (0: none).
    pub(crate) connectors: usize,
    /// When set, any flow or connection that stops moving for this long
    /// fails the round.
    pub(crate) stall: Option<Duration>,
}

/// One mixed round.
pub(crate) struct MixedRound {
    pub(crate) latency: LatencyRound,
    /// Gbit/s the bulk flows echoed meanwhile, one way.
    pub(crate) bulk_gbps: f64,
    /// Connections the connection-rate loops completed.
    pub(crate) connections: u64,
}

/// One round: the bulk flows, then the schedule (with the connection-rate
/// loops over the same time), then the bulk flows are told to finish.
pub(crate) async fn mixed_round(
    target: Target,
    plan: LatencyPlan,
    beside: Beside,
    pids: &[(String, u32)],
) -> Result<MixedRound> {
    let stop = Arc::new(AtomicBool::new(false));
    let mut flows = tokio::task::JoinSet::new();
    let started = Instant::now();
    for _ in 0..beside.bulk_streams {
        let stream = target.open().await.map_err(|e| format!("bulk flow: {e}"))?;
        let amount = match beside.bulk_rate {
            Some(rate) => Amount::Paced(rate, stop.clone()),
            None => Amount::Until(stop.clone()),
        };
        flows.spawn(echo_bulk(stream, amount, beside.stall));
    }
    tokio::time::sleep(HEAD_START).await;
    let each = beside.stall.unwrap_or(Duration::from_secs(5));
    let rate = async {
        if beside.connectors == 0 {
            return Ok(0);
        }
        connection_rate(target, beside.connectors, plan.duration, each, &[])
            .await
            .map(|run| (run.per_second * plan.duration.as_secs_f64()).round() as u64)
    };
    let (latency, connections) = tokio::join!(latency_round(target, plan, pids), rate);
    stop.store(true, Ordering::Relaxed);
    let limit = Duration::from_secs(30);
    let bulk = tokio::time::timeout(limit, async {
        let mut echoed = 0;
        let mut error = None;
        while let Some(flow) = flows.join_next().await {
            match flow.map_err(|e| format!("flow task: {e}")).and_then(|r| r) {
                Ok(bytes) => echoed += bytes,
                Err(e) => {
                    error.get_or_insert(e);
                }
            }
        }
        error.map_or(Ok(echoed), Err)
    })
    .await
    .map_err(|_| format!("the bulk flows did not finish within {limit:?} of being told to"))
    .and_then(|r| r);
    let elapsed = started.elapsed();
    // A stall in any workload is the finding; the others' errors follow from it.
    let latency = latency.map_err(|e| format!("request/response: {e}"));
    let connections = connections.map_err(|e| format!("connection rate: {e}"));
    let echoed = bulk.map_err(|e| format!("bulk flows: {e}"));
    let stall = [
        latency.as_ref().err(),
        connections.as_ref().err(),
        echoed.as_ref().err(),
    ]
    .into_iter()
    .flatten()
    .find(|e| e.contains("STALL"));
    if let Some(stall) = stall {
        return Err(stall.clone());
    }
    let (latency, connections, echoed) = (latency?, connections?, echoed?);
    Ok(MixedRound {
        latency,
        bulk_gbps: echoed as f64 * 8.0 / elapsed.as_secs_f64() / 1e9,
        connections,
    })
}
