//! How the import reconciler's writes reach the API server: a round's
//! writes go out concurrently (`imports.writes.concurrency`), paced by a
//! token bucket (`qps`, `burst`, as client-go's controllers are) and each
//! bounded by a timeout. Writes of one round are independent of each other
//! by construction (a derived Service waits a round for its import's uid,
//! slices for their Service), with one exception kept here: an import's
//! status (its `Ready`) goes only after its own service's other writes of
//! the round have succeeded, so it never comes before its slices, while
//! other services' statuses need not wait for it. Never two writes of one
//! object are in flight: a round holds at most one change per object.

use std::sync::Mutex;
use std::time::Duration;

use futures_util::future::join_all;

use crate::imports::diff::Change;
use crate::model::names::{MCS_SERVICE_NAME_LABEL, SERVICE_NAME_LABEL};
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
            // A new import takes 6 to 7 writes: a burst of 1,000 imports
            // is written in about 12 s (docs/performance.md).
            qps: 500,
            burst: 1000,
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

/// One service's writes of a round: its objects, then its import's status.
#[derive(Debug, Default)]
pub struct Chain<'c> {
    pub children: Vec<&'c Change>,
    pub status: Vec<&'c Change>,
}

/// Which service a derived Service belongs to, by its namespace and name
/// (a gateway slice names only its derived Service).
pub type DerivedOwner<'a> = &'a dyn Fn(&str, &str) -> Option<String>;

/// A round's changes by the service they belong to ([`service_of`]), in
/// the order each service first appears.
pub fn chains<'c>(
    pending: impl IntoIterator<Item = &'c Change>,
    derived: DerivedOwner<'_>,
) -> Vec<Chain<'c>> {
    let mut order: Vec<(String, String)> = Vec::new();
    let mut by_service: std::collections::HashMap<(String, String), Chain<'c>> =
        std::collections::HashMap::new();
    for change in pending {
        let key = service_of(change, derived);
        let chain = by_service.entry(key.clone()).or_insert_with(|| {
            order.push(key);
            Chain::default()
        });
        match change {
            Change::Apply { status: true, .. } => chain.status.push(change),
            _ => chain.children.push(change),
        }
    }
    order
        .into_iter()
        .filter_map(|key| by_service.remove(&key))
        .collect()
}

/// The service a change belongs to, as `(namespace, name)`: an import's
/// own; a derived Service's and an MCS slice's by their MCS service-name
/// label; a gateway slice's through the derived Service it names
/// (`derived`); anything else alone.
pub fn service_of(change: &Change, derived: DerivedOwner<'_>) -> (String, String) {
    let (kind, namespace, name) = change.identity();
    let label = match change {
        Change::Apply { object, .. } if kind != "ServiceImport" => {
            let labels = &object["metadata"]["labels"];
            labels[MCS_SERVICE_NAME_LABEL]
                .as_str()
                .map(str::to_owned)
                .or_else(|| {
                    let derived_name = labels[SERVICE_NAME_LABEL].as_str()?;
                    derived(&namespace, derived_name)
                })
        }
        _ => None,
    };
    match (kind.as_str(), label) {
        ("ServiceImport", _) => (namespace, name),
        (_, Some(service)) => (namespace, service),
        // Alone: the kind keeps it apart from a service of that name.
        _ => (namespace, format!("{kind}/{name}")),
    }
}

/// What became of one write.
#[derive(Debug)]
pub enum Outcome<T = serde_json::Value> {
    /// The object the server returned, as the writer keeps it (`None` for
    /// a deletion).
    Written(Option<T>),
    Failed(WriteError),
    /// Not made: leadership was lost before its turn, or (a status) one of
    /// its service's other writes failed, so its `Ready` would come early.
    NotTried,
}

/// Makes a round's writes: every service's chain at once, each chain's
/// objects concurrently and then its status; at most
/// `limits.concurrency` writes in flight in all, paced. `write` makes a
/// change's write (a future, not yet polled). The outcomes come per chain:
/// its children's, then its status's, each in order.
pub async fn run_chains<'c, F, T>(
    chains: &[Chain<'c>],
    limits: &WriteLimits,
    pacer: &Pacer,
    go: &(dyn Fn() -> bool + Sync),
    write: &(dyn Fn(&'c Change) -> F + Sync),
) -> Vec<(Vec<Outcome<T>>, Vec<Outcome<T>>)>
where
    F: std::future::Future<Output = Result<Option<T>, kube::Error>>,
{
    let slots = tokio::sync::Semaphore::new(limits.concurrency.max(1));
    let timeout = limits.timeout;
    let one = |change: &'c Change| {
        let slots = &slots;
        async move {
            let Ok(_slot) = slots.acquire().await else {
                return Outcome::NotTried;
            };
            pacer.turn().await;
            if !go() {
                return Outcome::NotTried;
            }
            match tokio::time::timeout(timeout, write(change)).await {
                Ok(Ok(result)) => Outcome::Written(result),
                Ok(Err(error)) => Outcome::Failed(WriteError::Api(error)),
                Err(_) => Outcome::Failed(WriteError::TimedOut(timeout)),
            }
        }
    };
    join_all(chains.iter().map(|chain| async {
        let children = join_all(chain.children.iter().map(|change| one(change))).await;
        let whole = children.iter().all(|o| matches!(o, Outcome::Written(_)));
        let status = if whole {
            join_all(chain.status.iter().map(|change| one(change))).await
        } else {
            chain.status.iter().map(|_| Outcome::NotTried).collect()
        };
        (children, status)
    }))
    .await
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use serde_json::json;

    use super::*;

    fn import(name: &str, status: bool) -> Change {
        Change::Apply {
            object: json!({"kind": "ServiceImport", "metadata": {"namespace": "n", "name": name}}),
            status,
        }
    }

    fn slice(service: &str, name: &str) -> Change {
        Change::Apply {
            object: json!({"kind": "EndpointSlice", "metadata": {"namespace": "n", "name": name,
                "labels": {MCS_SERVICE_NAME_LABEL: service}}}),
            status: false,
        }
    }

    fn name(change: &Change) -> String {
        change.identity().2
    }

    fn gateway_slice(derived: &str, name: &str) -> Change {
        Change::Apply {
            object: json!({"kind": "EndpointSlice", "metadata": {"namespace": "n", "name": name,
                "labels": {SERVICE_NAME_LABEL: derived}}}),
            status: false,
        }
    }

    /// The derived Service `derived-<service>` belongs to `<service>`.
    fn owner(_namespace: &str, derived: &str) -> Option<String> {
        derived.strip_prefix("derived-").map(str::to_owned)
    }

    #[test]
    fn a_rounds_changes_chain_by_service_with_the_status_last() {
        let pending = [
            import("a", true),
            slice("a", "a-1"),
            import("b", false),
            gateway_slice("derived-a", "a-2"),
            slice("b", "b-1"),
            gateway_slice("unknown", "u-1"),
        ];
        let chains = chains(&pending, &owner);
        let names: Vec<(Vec<String>, Vec<String>)> = chains
            .iter()
            .map(|c| {
                (
                    c.children.iter().map(|c| name(c)).collect(),
                    c.status.iter().map(|c| name(c)).collect(),
                )
            })
            .collect();
        assert_eq!(
            names,
            [
                (
                    vec!["a-1".to_owned(), "a-2".to_owned()],
                    vec!["a".to_owned()]
                ),
                (vec!["b".to_owned(), "b-1".to_owned()], vec![]),
                (vec!["u-1".to_owned()], vec![]),
            ]
        );
    }

    /// Writes that take 100 ms and record when each started.
    async fn timed_write(
        change: &Change,
        in_flight: &AtomicUsize,
        most: &AtomicUsize,
        started: tokio::time::Instant,
        log: &std::sync::Mutex<Vec<(String, u128)>>,
    ) -> Result<Option<serde_json::Value>, kube::Error> {
        let now = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        most.fetch_max(now, Ordering::SeqCst);
        if let Ok(mut log) = log.lock() {
            log.push((name(change), started.elapsed().as_millis()));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        in_flight.fetch_sub(1, Ordering::SeqCst);
        Ok(Some(json!(name(change))))
    }

    #[tokio::test(start_paused = true)]
    async fn chains_write_concurrently_up_to_the_limit_each_status_after_its_own_service() {
        // Service b: 1 slice then its status; a: 8 slices then its status.
        let mut pending = vec![slice("b", "b-0"), import("b", true)];
        pending.extend((0..8).map(|n| slice("a", &format!("a-{n}"))));
        pending.push(import("a", true));
        let chains = chains(&pending, &owner);
        let limits = WriteLimits {
            concurrency: 4,
            qps: 1000,
            burst: 1000,
            timeout: Duration::from_secs(5),
        };
        let pacer = Pacer::new(&limits);
        let (in_flight, most) = (AtomicUsize::new(0), AtomicUsize::new(0));
        let log = std::sync::Mutex::new(Vec::new());
        let started = tokio::time::Instant::now();
        let outcomes = run_chains(&chains, &limits, &pacer, &|| true, &|change| {
            timed_write(change, &in_flight, &most, started, &log)
        })
        .await;
        assert_eq!(most.load(Ordering::SeqCst), 4);
        assert!(
            outcomes
                .iter()
                .flat_map(|(c, s)| c.iter().chain(s))
                .all(|o| matches!(o, Outcome::Written(Some(_))))
        );
        let log = log.lock().expect("log").clone();
        let at = |wanted: &str| {
            log.iter()
                .find(|(name, _)| name == wanted)
                .map(|(_, at)| *at)
                .expect("written")
        };
        let last_a_slice = (0..8).map(|n| at(&format!("a-{n}"))).max().expect("slices");
        assert!(
            at("a") > last_a_slice,
            "a's status after its slices: {log:?}"
        );
        assert!(at("b") > at("b-0"), "b's status after its slice: {log:?}");
        assert!(
            at("b") < at("a"),
            "b's status does not wait for a's slices: {log:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn writes_are_paced_a_slow_one_times_out_and_a_failed_child_holds_its_status() {
        let pending: Vec<Change> = (0..5).map(|n| slice(&n.to_string(), "s")).collect();
        let five = chains(&pending, &owner);
        let limits = WriteLimits {
            concurrency: 16,
            qps: 10,
            burst: 1,
            timeout: Duration::from_secs(1),
        };
        let pacer = Pacer::new(&limits);
        let started = tokio::time::Instant::now();
        let quick = |_: &Change| async { Ok::<_, kube::Error>(None::<serde_json::Value>) };
        let outcomes = run_chains(&five, &limits, &pacer, &|| true, &quick).await;
        // One at once, then one per 100 ms.
        assert_eq!(started.elapsed(), Duration::from_millis(400));
        assert!(
            outcomes
                .iter()
                .all(|(c, _)| matches!(c[0], Outcome::Written(None)))
        );

        let pending = [slice("a", "a-1"), import("a", true)];
        let chained = chains(&pending, &owner);
        let slow = |_: &Change| async {
            tokio::time::sleep(Duration::from_secs(5)).await;
            Ok::<_, kube::Error>(None::<serde_json::Value>)
        };
        let outcomes = run_chains(&chained, &limits, &pacer, &|| true, &slow).await;
        assert!(matches!(
            outcomes[0].0[0],
            Outcome::Failed(WriteError::TimedOut(_))
        ));
        assert!(
            matches!(outcomes[0].1[0], Outcome::NotTried),
            "no Ready before its slice"
        );

        let stopped = run_chains(&chained, &limits, &pacer, &|| false, &quick).await;
        assert!(matches!(stopped[0].0[0], Outcome::NotTried));
    }
}
