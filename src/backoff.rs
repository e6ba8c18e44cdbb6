//! Exponential backoff with jitter: the one retry schedule of every caller
//! that tries again after a failure (watchers, the controller's writers,
//! tunnel dials to a peer gateway).
//!
//! The n-th delay after a success is `initial · 2ⁿ`, capped at `max`, plus
//! up to a fifth more drawn at random, so that many tasks failing together
//! (every watcher of a restarted API server, every gateway dialling one
//! peer) do not retry in step. Pure apart from its random source, which a
//! test seeds.

use std::time::Duration;

/// The largest share of a delay added as jitter.
const JITTER: f64 = 0.2;

/// Where a schedule starts and where it stops growing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retry {
    pub initial: Duration,
    pub max: Duration,
}

impl Default for Retry {
    fn default() -> Self {
        Self {
            initial: Duration::from_millis(500),
            max: Duration::from_secs(30),
        }
    }
}

/// One caller's schedule: how many failures in a row it has seen.
#[derive(Debug)]
pub struct Backoff {
    retry: Retry,
    failures: u32,
    random: fastrand::Rng,
}

impl Backoff {
    pub fn new(retry: Retry) -> Self {
        Self::with_random(retry, fastrand::Rng::new())
    }

    /// A schedule whose jitter comes from `random` (a seeded one in tests).
    pub fn with_random(retry: Retry, random: fastrand::Rng) -> Self {
        Self {
            retry,
            failures: 0,
            random,
        }
    }

    /// After a success: the next failure waits `initial` again.
    pub fn reset(&mut self) {
        self.failures = 0;
    }

    /// Failures in a row since the last success.
    pub fn failures(&self) -> u32 {
        self.failures
    }

    /// Counts one more failure and says how long to wait before the next
    /// attempt.
    pub fn next_delay(&mut self) -> Duration {
        // 2^16 · initial is past any sensible max; the cap keeps the
        // multiplication from overflowing after a long outage.
        let doubled = self
            .retry
            .initial
            .saturating_mul(1 << self.failures.min(16))
            .min(self.retry.max);
        self.failures = self.failures.saturating_add(1);
        doubled + doubled.mul_f64(self.random.f64() * JITTER)
    }
}

/// Sleeps until `deadline` (a retry's, or a debounce's), or forever
/// without one: the idle arm of a task's `select!`.
pub async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn retry(initial_ms: u64, max_ms: u64) -> Retry {
        Retry {
            initial: Duration::from_millis(initial_ms),
            max: Duration::from_millis(max_ms),
        }
    }

    fn within_jitter(delay: Duration, base_ms: u64) -> bool {
        let base = Duration::from_millis(base_ms);
        delay >= base && delay <= base.mul_f64(1.0 + JITTER)
    }

    #[test]
    fn delays_double_up_to_the_cap_with_at_most_a_fifth_added() {
        let mut backoff = Backoff::with_random(retry(100, 1_000), fastrand::Rng::with_seed(7));
        let expected = [100, 200, 400, 800, 1_000, 1_000];
        for (n, base) in expected.into_iter().enumerate() {
            let delay = backoff.next_delay();
            assert!(
                within_jitter(delay, base),
                "delay {n}: {delay:?}, base {base} ms"
            );
        }
        assert_eq!(backoff.failures(), 6);
    }

    #[test]
    fn a_success_starts_the_schedule_again() {
        let mut backoff = Backoff::with_random(retry(100, 1_000), fastrand::Rng::with_seed(7));
        backoff.next_delay();
        backoff.next_delay();
        backoff.reset();
        assert_eq!(backoff.failures(), 0);
        assert!(within_jitter(backoff.next_delay(), 100));
    }

    #[test]
    fn the_jitter_varies_and_repeats_with_the_seed() {
        let delays = |seed| {
            let mut backoff =
                Backoff::with_random(retry(1_000, 1_000), fastrand::Rng::with_seed(seed));
            (0..20).map(|_| backoff.next_delay()).collect::<Vec<_>>()
        };
        let first = delays(1);
        assert_eq!(first, delays(1), "the same seed, the same schedule");
        assert_ne!(first, delays(2));
        let distinct: std::collections::BTreeSet<_> = first.iter().collect();
        assert!(distinct.len() > 10, "jitter spreads retries: {first:?}");
    }

    #[test]
    fn a_long_outage_neither_overflows_nor_passes_the_cap() {
        let mut backoff = Backoff::with_random(retry(500, 30_000), fastrand::Rng::with_seed(3));
        for _ in 0..100 {
            backoff.next_delay();
        }
        assert!(within_jitter(backoff.next_delay(), 30_000));
        assert_eq!(backoff.failures(), 101);
    }
}
