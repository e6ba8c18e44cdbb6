//! How the import reconciler's writes reach the API server: a round's
//! writes go out concurrently (`imports.writes.concurrency`), paced by a
//! token bucket (`qps`, `burst`, as client-go's controllers are) and each
//! bounded by a timeout. Writes of one round are independent of each other
//! by construction (a derived Service waits a round for its import's uid,
//! slices for their Service), with one exception kept here: an import's
//! status (its `Ready`) goes only after the round's other writes, so it
//! never comes before its slices. Never two writes of one object are in
//! flight: a round holds at most one change per object.

use std::sync::Mutex;
use std::time::Duration;

use futures_util::StreamExt;

use crate::imports::diff::Change;
use crate::token_bucket::TokenBucket;

/// `imports.writes`: how fast and how wide the reconciler writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteLimits {
    /// Writes in flight at once.
    pub concurrency: usize,
    /// Writes per second, sustained.
    pub qps: u32,
    /// Writes that may go at once after a quiet spell.
    pub burst: u32,
    /// How long one write may take before it counts as failed.
    pub timeout: Duration,
}

impl Default for WriteLimits {
    fn default() -> Self {
        Self {
            concurrency: 16,
            qps: 200,
            burst: 400,
            timeout: Duration::from_secs(10),
        }
    }
}

/// Why one write failed.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error(transparent)]
    Api(#[from] kube::Error),
    #[error("no answer within {}", humantime::format_duration(*.0))]
    TimedOut(Duration),
}

/// Paces writes at the limits' rate.
#[derive(Debug)]
pub struct Pacer {
    bucket: Mutex<TokenBucket>,
}

impl Pacer {
    pub fn new(limits: &WriteLimits) -> Self {
        Self {
            bucket: Mutex::new(TokenBucket::new(
                limits.qps.max(1),
                limits.burst.max(1),
                std::time::Instant::now(),
            )),
        }
    }

    /// Waits for this write's turn.
    async fn turn(&self) {
        let wait = match self.bucket.lock() {
            Ok(mut bucket) => bucket.reserve(std::time::Instant::now()),
            // A panic elsewhere poisoned it: pacing is not worth a second one.
            Err(_) => Duration::ZERO,
        };
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
    }
}

/// The waves of one round, in order: every write but the imports'
/// statuses, then those.
pub fn waves(pending: &[Change]) -> [Vec<&Change>; 2] {
    let (statuses, others): (Vec<&Change>, Vec<&Change>) = pending
        .iter()
        .partition(|change| matches!(change, Change::Apply { status: true, .. }));
    [others, statuses]
}

/// Makes a wave's writes (one future per change, not yet polled),
/// `limits.concurrency` at a time, paced; the outcomes in the wave's order
/// (`None`: not written, as `go` said no when its turn came).
pub async fn run_wave<F>(
    writes: Vec<F>,
    limits: &WriteLimits,
    pacer: &Pacer,
    go: &(dyn Fn() -> bool + Sync),
) -> Vec<Option<Result<Option<serde_json::Value>, WriteError>>>
where
    F: std::future::Future<Output = Result<Option<serde_json::Value>, kube::Error>>,
{
    let timeout = limits.timeout;
    let mut outcomes: Vec<(usize, Option<Result<_, WriteError>>)> =
        futures_util::stream::iter(writes.into_iter().enumerate())
            .map(|(index, write)| async move {
                pacer.turn().await;
                if !go() {
                    return (index, None);
                }
                let outcome = match tokio::time::timeout(timeout, write).await {
                    Ok(result) => result.map_err(WriteError::from),
                    Err(_) => Err(WriteError::TimedOut(timeout)),
                };
                (index, Some(outcome))
            })
            .buffer_unordered(limits.concurrency.max(1))
            .collect()
            .await;
    outcomes.sort_by_key(|(index, _)| *index);
    outcomes.into_iter().map(|(_, outcome)| outcome).collect()
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use serde_json::json;

    use super::*;

    fn apply(name: &str, status: bool) -> Change {
        Change::Apply {
            object: json!({"kind": "ServiceImport", "metadata": {"namespace": "n", "name": name}}),
            status,
        }
    }

    #[test]
    fn an_imports_status_waits_for_the_rounds_other_writes() {
        let pending = [apply("a", true), apply("a", false), apply("b", false)];
        let [first, second] = waves(&pending);
        assert!(
            first
                .iter()
                .all(|c| !matches!(c, Change::Apply { status: true, .. }))
        );
        assert_eq!(first.len(), 2);
        assert_eq!(second.len(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_wave_writes_concurrently_up_to_its_limit_and_keeps_order() {
        let changes: Vec<Change> = (0..10).map(|n| apply(&n.to_string(), false)).collect();
        let wave: Vec<&Change> = changes.iter().collect();
        let limits = WriteLimits {
            concurrency: 4,
            qps: 1000,
            burst: 1000,
            timeout: Duration::from_secs(5),
        };
        let pacer = Pacer::new(&limits);
        let (in_flight, most) = (AtomicUsize::new(0), AtomicUsize::new(0));
        let started = tokio::time::Instant::now();
        let writes: Vec<_> = wave
            .iter()
            .map(|change| {
                let (in_flight, most) = (&in_flight, &most);
                async move {
                    let now = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    in_flight.fetch_sub(1, Ordering::SeqCst);
                    let Change::Apply { object, .. } = change else {
                        return Ok(None);
                    };
                    Ok(Some(object["metadata"]["name"].clone()))
                }
            })
            .collect();
        let outcomes = run_wave(writes, &limits, &pacer, &|| true).await;
        assert_eq!(most.load(Ordering::SeqCst), 4);
        // 10 writes of 100 ms, 4 at a time: 3 turns.
        assert_eq!(started.elapsed(), Duration::from_millis(300));
        let names: Vec<String> = outcomes
            .into_iter()
            .map(|o| {
                o.expect("written")
                    .expect("ok")
                    .expect("a result")
                    .to_string()
            })
            .collect();
        let expected: Vec<String> = (0..10).map(|n| format!("\"{n}\"")).collect();
        assert_eq!(names, expected);
    }

    #[tokio::test(start_paused = true)]
    async fn writes_are_paced_and_a_slow_one_times_out() {
        let changes: Vec<Change> = (0..5).map(|n| apply(&n.to_string(), false)).collect();
        let wave: Vec<&Change> = changes.iter().collect();
        let limits = WriteLimits {
            concurrency: 16,
            qps: 10,
            burst: 1,
            timeout: Duration::from_secs(1),
        };
        let pacer = Pacer::new(&limits);
        let started = tokio::time::Instant::now();
        let quick = || wave.iter().map(|_| async { Ok::<_, kube::Error>(None) });
        let outcomes = run_wave(quick().collect(), &limits, &pacer, &|| true).await;
        // One at once, then one per 100 ms.
        assert_eq!(started.elapsed(), Duration::from_millis(400));
        assert!(outcomes.iter().all(|o| matches!(o, Some(Ok(None)))));

        let slow = vec![async {
            tokio::time::sleep(Duration::from_secs(5)).await;
            Ok::<_, kube::Error>(None)
        }];
        let slow = run_wave(slow, &limits, &pacer, &|| true).await;
        assert!(matches!(slow[0], Some(Err(WriteError::TimedOut(_)))));

        let stopped = run_wave(quick().collect(), &limits, &pacer, &|| false).await;
        assert!(stopped.iter().all(Option::is_none));
    }
}
