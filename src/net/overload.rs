//! The gateway's overload manager: new work (an accepted connection, a
//! tunnel stream's backend dial) is refused while the process's open
//! descriptors are within a reserve of its limit, or while buffers hold
//! most of the memory budget ([`super::memory`]). Descriptors are kept
//! within the reserve so that the admin
//! listener, DNS and the connections already open keep working when a
//! flood would otherwise take every descriptor. The count is sampled from
//! `/proc/self/fd` and every admission since the last sample is added to
//! it, so between samples the estimate errs high, never low. Before work
//! is refused on the estimate, the count is sampled again (at most every
//! 10 ms): a flood of short connections, each closed soon after it was
//! admitted, is not refused for descriptors it no longer holds.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::memory::MemoryBudget;
use crate::admin::metrics::Limit;
use std::time::{Duration, Instant};

/// How often a refusal may sample the count again.
const RESAMPLE_EVERY: Duration = Duration::from_millis(10);

/// Descriptors kept free when the configuration does not say: a sixteenth
/// of the limit, at least 64 and at most 1,024.
pub fn default_reserve(limit: u64) -> u64 {
    (limit / 16).clamp(64, 1024)
}

/// Which resource is short.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Short {
    Descriptors,
    Memory,
}

impl Short {
    /// How a refusal for it counts in `strait_limited_total`.
    pub fn limit(self) -> Limit {
        match self {
            Short::Descriptors => Limit::Descriptors,
            Short::Memory => Limit::Memory,
        }
    }

    pub fn reason(self) -> &'static str {
        match self {
            Short::Descriptors => "this gateway is short of descriptors",
            Short::Memory => "this gateway is short of memory",
        }
    }
}

#[derive(Debug)]
pub struct Overload {
    memory: Arc<MemoryBudget>,
    limit: u64,
    reserve: u64,
    /// The last sample plus every admission since.
    open: AtomicU64,
    created: Instant,
    /// When the count was last sampled, in milliseconds since `created`.
    sampled_at_ms: AtomicU64,
}

impl Overload {
    /// A budget under the process's soft `RLIMIT_NOFILE` (unbounded when
    /// it cannot be read) keeping `reserve` descriptors free.
    /// with `memory` as its buffers' budget.
    pub fn for_process(reserve: Option<u64>, memory: Arc<MemoryBudget>) -> Self {
        let limit = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
            .map_or(u64::MAX, |(soft, _)| soft);
        let reserve = reserve.unwrap_or_else(|| default_reserve(limit));
        let overload = Self::with_memory(limit, reserve, memory);
        overload.sample();
        overload
    }

    /// A descriptor budget alone (an unbounded memory budget).
    pub fn new(limit: u64, reserve: u64) -> Self {
        Self::with_memory(limit, reserve, Arc::new(MemoryBudget::for_limit(u64::MAX)))
    }

    fn with_memory(limit: u64, reserve: u64, memory: Arc<MemoryBudget>) -> Self {
        Self {
            memory,
            limit,
            reserve,
            open: AtomicU64::new(0),
            created: Instant::now(),
            sampled_at_ms: AtomicU64::new(0),
        }
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.created.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// The buffers' memory budget.
    pub fn memory(&self) -> &Arc<MemoryBudget> {
        &self.memory
    }

    /// The descriptors one listener kind's connections may hold: half of
    /// those outside the reserve. A flood of one listener then leaves the
    /// other half to the rest, however the flood is spread over sources.
    pub fn listener_share(&self) -> u64 {
        self.limit.saturating_sub(self.reserve) / 2
    }

    /// Whether new work may start: memory is not pressed, and one more
    /// descriptor may be spent (counted when so).
    pub fn admit(&self) -> Result<(), Short> {
        if self.memory.pressed() {
            return Err(Short::Memory);
        }
        if self.admit_descriptor() {
            Ok(())
        } else {
            Err(Short::Descriptors)
        }
    }

    fn admit_descriptor(&self) -> bool {
        if self.try_admit() {
            return true;
        }
        // The estimate may be high by every connection closed since the
        // last sample; look again before refusing, unless just looked.
        let now = self.now_ms();
        let last = self.sampled_at_ms.load(Ordering::Relaxed);
        if now.saturating_sub(last) < RESAMPLE_EVERY.as_millis() as u64 {
            return false;
        }
        self.sample();
        self.try_admit()
    }

    fn try_admit(&self) -> bool {
        let open = self.open.fetch_add(1, Ordering::Relaxed).saturating_add(1);
        if open.saturating_add(self.reserve) > self.limit {
            self.open.fetch_sub(1, Ordering::Relaxed);
            return false;
        }
        true
    }

    /// Replaces the estimate with the real count; returns it. Keeps the
    /// estimate when `/proc` cannot be read.
    pub fn sample(&self) -> u64 {
        match std::fs::read_dir("/proc/self/fd") {
            Ok(entries) => {
                // The directory being read holds a descriptor of its own.
                let open = (entries.count() as u64).saturating_sub(1);
                self.open.store(open, Ordering::Relaxed);
                self.sampled_at_ms.store(self.now_ms(), Ordering::Relaxed);
                open
            }
            Err(_) => self.open.load(Ordering::Relaxed),
        }
    }

    /// A pretend sample, taken now.
    #[cfg(test)]
    fn set_open(&self, open: u64) {
        self.open.store(open, Ordering::Relaxed);
        self.sampled_at_ms.store(self.now_ms(), Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn work_is_refused_within_the_reserve_and_admitted_after_a_sample_shows_room() {
        let overload = Overload::new(100, 10);
        overload.set_open(88);
        assert!(overload.admit().is_ok(), "89 open, 11 free");
        assert!(overload.admit().is_ok(), "90 open, 10 free");
        assert_eq!(
            overload.admit(),
            Err(Short::Descriptors),
            "the reserve is kept"
        );
        assert!(overload.admit().is_err(), "a refusal spends nothing");
        overload.set_open(50);
        assert!(overload.admit().is_ok());
    }

    #[test]
    fn a_refusal_looks_again_when_the_last_sample_is_old() {
        let real = Overload::new(u64::MAX, 0).sample();
        let overload = Overload::new(real + 1_000, 10);
        // An estimate of connections long closed.
        overload.set_open(real + 995);
        assert!(overload.admit().is_err(), "refused on a fresh estimate");
        std::thread::sleep(RESAMPLE_EVERY * 2);
        assert!(
            overload.admit().is_ok(),
            "the count is sampled again and has room"
        );
    }

    #[test]
    fn the_sample_reads_this_process_descriptors() {
        let overload = Overload::new(u64::MAX, 0);
        // At least stdin, stdout and stderr; the exact count moves with
        // the other tests of this process.
        assert!(overload.sample() >= 3);
    }

    #[test]
    fn new_work_is_refused_while_memory_is_pressed() {
        let overload = Overload::with_memory(u64::MAX, 0, Arc::new(MemoryBudget::for_limit(100)));
        overload.memory().set_resident(80);
        assert_eq!(overload.admit(), Err(Short::Memory));
        overload.memory().set_resident(70);
        assert!(overload.admit().is_ok());
    }

    #[test]
    fn a_listener_may_hold_half_of_what_the_reserve_leaves() {
        assert_eq!(Overload::new(1024, 64).listener_share(), 480);
        assert_eq!(Overload::new(10, 64).listener_share(), 0);
    }

    #[test]
    fn the_default_reserve_scales_within_bounds() {
        assert_eq!(default_reserve(1024), 64);
        assert_eq!(default_reserve(4096), 256);
        assert_eq!(default_reserve(1 << 20), 1024);
    }
}
