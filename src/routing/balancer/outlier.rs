//! Passive outlier detection: failures in a row eject a backend for a
//! doubling, capped time; see the parent module for the policy.

use std::time::{Duration, Instant};

/// When backends are ejected, and for how long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutlierPolicy {
    /// Failures in a row that eject a backend; 0 turns ejection off.
    pub consecutive_failures: u32,
    /// How long the first ejection lasts; each further one doubles it.
    pub base_ejection: Duration,
    /// The longest ejection, and how long a backend must hold after one
    /// before its ejection count decays.
    pub max_ejection: Duration,
}

impl Default for OutlierPolicy {
    fn default() -> Self {
        Self {
            consecutive_failures: 3,
            base_ejection: Duration::from_secs(5),
            max_ejection: Duration::from_secs(300),
        }
    }
}

impl OutlierPolicy {
    /// How long the `times`-th ejection (counting from 1) lasts:
    /// `base_ejection * 2^(times - 1)`, at most `max_ejection`.
    pub fn ejection_time(&self, times: u32) -> Duration {
        let doublings = times.saturating_sub(1).min(31);
        self.base_ejection
            .saturating_mul(1 << doublings)
            .min(self.max_ejection)
    }
}

/// The health of one backend, kept behind a short mutex.
#[derive(Debug, Default)]
pub(super) struct Health {
    /// Failures since the last success or ejection.
    consecutive: u32,
    /// Ejections since the count last decayed: the next one lasts longer.
    ejections: u32,
    /// Set while an ejection may be in force; cleared lazily once it has passed.
    ejected_until: Option<Instant>,
    /// When the last ejection ended.
    returned_at: Option<Instant>,
    /// Whether a success was reported since the last ejection began.
    succeeded: bool,
    /// Out of rotation by active health checks, until they answer again.
    probe_down: bool,
    /// Health checks failed in a row, and answered in a row.
    probe_failures: u32,
    probe_answers: u32,
}

/// How many health checks in a row change a backend's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProbeThresholds {
    /// Failed in a row: out of rotation.
    pub unhealthy: u32,
    /// Answered in a row: back in.
    pub healthy: u32,
}

impl Health {
    /// Whether an ejection deadline is set, passed or not: the chooser counts
    /// these so that picks skip health checks while there are none.
    pub(super) fn marked(&self) -> bool {
        self.ejected_until.is_some() || self.probe_down
    }

    /// Whether health checks hold it out of rotation.
    pub(super) fn probe_down(&self) -> bool {
        self.probe_down
    }

    /// Counts a health check; `Some(true)` when it took the backend out of
    /// rotation, `Some(false)` when it brought it back.
    pub(super) fn probe(&mut self, answered: bool, thresholds: ProbeThresholds) -> Option<bool> {
        if answered {
            self.probe_failures = 0;
            self.probe_answers = self.probe_answers.saturating_add(1);
            if self.probe_down && self.probe_answers >= thresholds.healthy.max(1) {
                self.probe_down = false;
                return Some(false);
            }
        } else {
            self.probe_answers = 0;
            self.probe_failures = self.probe_failures.saturating_add(1);
            if !self.probe_down && self.probe_failures >= thresholds.unhealthy.max(1) {
                self.probe_down = true;
                return Some(true);
            }
        }
        None
    }

    /// The time left of an ejection in force at `now`; clears one that has passed.
    pub(super) fn ejected(&mut self, now: Instant) -> Option<Duration> {
        let until = self.ejected_until?;
        if until > now {
            return Some(until - now);
        }
        self.ejected_until = None;
        self.returned_at = Some(until);
        None
    }

    /// The time left of an ejection in force at `now`, changing nothing.
    pub(super) fn remaining(&self, now: Instant) -> Option<Duration> {
        self.ejected_until
            .filter(|until| *until > now)
            .map(|until| until - now)
    }

    pub(super) fn succeed(&mut self) {
        self.consecutive = 0;
        self.succeeded = true;
    }

    /// Counts a failure at `now`; returns whether it ejected the backend.
    pub(super) fn fail(&mut self, now: Instant, policy: &OutlierPolicy) -> bool {
        if policy.consecutive_failures == 0 || self.ejected(now).is_some() {
            // Ejection is off, or already in force: connections that were
            // under way (or panic-mode picks) failing do not extend it.
            return false;
        }
        self.consecutive = self.consecutive.saturating_add(1);
        if self.consecutive < policy.consecutive_failures {
            return false;
        }
        let held = self
            .returned_at
            .and_then(|returned| returned.checked_add(policy.max_ejection))
            .is_some_and(|decay_at| now >= decay_at);
        if self.succeeded && held {
            self.ejections = 0;
        }
        self.ejections = self.ejections.saturating_add(1);
        self.ejected_until = Some(later(now, policy.ejection_time(self.ejections)));
        self.consecutive = 0;
        self.succeeded = false;
        true
    }
}

/// `now + duration`, saturating far in the future instead of overflowing.
fn later(now: Instant, duration: Duration) -> Instant {
    let mut duration = duration;
    loop {
        if let Some(at) = now.checked_add(duration) {
            return at;
        }
        duration /= 2;
    }
}
