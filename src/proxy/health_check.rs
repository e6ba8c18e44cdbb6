//! Active health checks: the backends this gateway reaches through a
//! tunnel, probed through that very tunnel (a CONNECT that the peer
//! gateway authorises and dials as any other, so it answers only for
//! backends this cluster may reach). A backend its own cluster still calls
//! Ready but that cannot be reached from here (a cut network, a peer
//! gateway that lost its way to it) leaves rotation after
//! `unhealthyThreshold` failed probes in a row, and comes back after
//! `healthyThreshold` answered ones. The results feed the chooser beside
//! passive outlier detection: a backend is picked only while both count it
//! in, and the locality tiers count it as missing meanwhile.
//!
//! A probe is a connection opened to the backend and closed: it proves
//! reachability, not service. A process that still accepts (a stopped one
//! whose listen backlog is not full) passes it.
//!
//! Cost: every backend at most once per `interval`; at most
//! `maxProbesPerSecond` probes started per second over every backend (past
//! that, a round takes longer than `interval`); starts are spread over the
//! round with jitter, so replicas do not probe in step.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::admin::metrics::CheckResult;
use crate::config::HealthSettings;
use crate::proxy::upstream::{ProbeOutcome, probe};
use crate::routing::balancer::{BackendId, ProbeThresholds};
use crate::routing::{Path, RouteTable, RoutedBackend};
use crate::state::GatewayState;

/// Probes the tunnelled backends of the routes in force, round after
/// round, until `stop`.
pub async fn run(state: Arc<GatewayState>, settings: HealthSettings, stop: CancellationToken) {
    let thresholds = ProbeThresholds {
        unhealthy: settings.unhealthy_threshold,
        healthy: settings.healthy_threshold,
    };
    let fastest = Duration::from_secs(1) / settings.max_probes_per_second.max(1);
    let mut rng = fastrand::Rng::new();
    loop {
        let round = Instant::now();
        let table = state.routes.load_full();
        let targets = tunnelled(&table);
        let spacing = settings
            .interval
            .checked_div(u32::try_from(targets.len()).unwrap_or(u32::MAX).max(1))
            .unwrap_or(settings.interval)
            .max(fastest);
        let mut in_flight = FuturesUnordered::new();
        let mut start = round + jitter(&mut rng, spacing);
        for backend in targets {
            loop {
                tokio::select! {
                    () = tokio::time::sleep_until(start) => break,
                    Some((id, verdict)) = in_flight.next() => report(&state, &id, verdict, thresholds),
                    () = stop.cancelled() => return,
                }
            }
            start += spacing;
            let state = &state;
            let table = &table;
            in_flight.push(async move {
                let id = BackendId::of(backend);
                let checked = tokio::time::timeout(settings.timeout, probe(state, table, backend));
                let verdict = match checked.await {
                    Ok(ProbeOutcome::Answered) => Some(true),
                    Ok(ProbeOutcome::Failed(error)) => {
                        tracing::debug!(backend = %id, %error, "health check failed");
                        Some(false)
                    }
                    Ok(ProbeOutcome::NoVerdict(error)) => {
                        tracing::debug!(backend = %id, %error, "health check refused by the peer");
                        None
                    }
                    Err(_) => Some(false),
                };
                (id, verdict)
            });
        }
        loop {
            tokio::select! {
                next = in_flight.next() => match next {
                    Some((id, verdict)) => report(&state, &id, verdict, thresholds),
                    None => break,
                },
                () = stop.cancelled() => return,
            }
        }
        drop(in_flight);
        state
            .metrics
            .set_health_checks_down(state.chooser.probed_down_count());
        tokio::select! {
            () = tokio::time::sleep_until(round + settings.interval) => {}
            () = stop.cancelled() => return,
        }
    }
}

/// The backends of `table` reached through a tunnel, each once.
fn tunnelled(table: &RouteTable) -> Vec<RoutedBackend<'_>> {
    let mut seen = HashSet::new();
    table
        .services()
        .flat_map(|service| &service.ports)
        .flat_map(|port| port.backends.iter())
        .filter(|routed| matches!(routed.path(), Path::Tunnel { .. }))
        .filter(|routed| seen.insert(BackendId::of(*routed)))
        .collect()
}

/// Counts a verdict (`None`: the check said nothing of the backend).
fn report(
    state: &GatewayState,
    id: &BackendId,
    verdict: Option<bool>,
    thresholds: ProbeThresholds,
) {
    let Some(answered) = verdict else {
        return;
    };
    state.metrics.health_check(if answered {
        CheckResult::Answered
    } else {
        CheckResult::Failed
    });
    match state.chooser.report_probe(id, answered, thresholds) {
        Some(true) => {
            tracing::warn!(backend = %id, "backend out of rotation: health checks failed")
        }
        Some(false) => {
            tracing::info!(backend = %id, "backend back in rotation: health checks answered")
        }
        None => {}
    }
}

/// A random delay in `0..spacing / 2`: replicas starting together drift apart.
fn jitter(rng: &mut fastrand::Rng, spacing: Duration) -> Duration {
    spacing.mul_f64(rng.f64() / 2.0)
}
