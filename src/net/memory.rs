//! The gateway's memory budget: the second resource new work is admitted
//! against, beside descriptors ([`super::overload`]). A spliced connection
//! holds memory beyond its small fixed state only while one of its
//! directions holds bytes its writer does not take (a backend or peer that
//! reads slower than the other side writes): then the bytes in its copy
//! slot, and for a tunnel stream the stream's flow-control window, which
//! the peer may fill. Such a connection is charged the most it can hold
//! while it holds anything, and uncharged once it holds nothing.
//!
//! The budget is half of the process's memory limit (`tuning.memoryLimit`,
//! else the cgroup's `memory.max`, else 2 GiB): the rest is for the fixed
//! state of every connection, TLS, the route table and the allocator. A
//! charge past the budget (or, for a tunnel stream, past its caller's
//! share, `tunnel.maxBufferedBytesPerPeer`) is refused: a stream being
//! dialled is refused, a connection that starts holding bytes is ended
//! rather than let buffer. New connections and streams are refused while
//! the process is short: buffers charged past three quarters of the
//! budget, or resident memory (sampled every 250 ms) past three quarters
//! of the limit.

use std::sync::atomic::{AtomicU64, Ordering};

/// The memory limit assumed when neither the configuration nor a cgroup
/// gives one.
pub const DEFAULT_LIMIT: u64 = 2 << 30;

/// The memory limit of this process's cgroup (v2 `memory.max`, or v1
/// `memory.limit_in_bytes`), when it has one.
pub fn cgroup_limit() -> Option<u64> {
    let v2 = std::fs::read_to_string("/sys/fs/cgroup/memory.max").ok();
    let v1 = || std::fs::read_to_string("/sys/fs/cgroup/memory/memory.limit_in_bytes").ok();
    v2.or_else(v1).as_deref().and_then(parse_limit)
}

/// A cgroup limit file's value: `max` (v2) or a page-rounded `i64::MAX`
/// (v1) mean no limit.
fn parse_limit(text: &str) -> Option<u64> {
    let limit: u64 = text.trim().parse().ok()?;
    (limit < 1 << 60).then_some(limit)
}

/// The process's memory limit, what it holds now (sampled), and what
/// buffers are charged for.
#[derive(Debug)]
pub struct MemoryBudget {
    limit: u64,
    budget: u64,
    /// The bytes buffers are charged for: the most they may hold.
    held: AtomicU64,
    /// The process's resident memory at the last sample.
    resident: AtomicU64,
}

impl MemoryBudget {
    /// The budget of a process limited to `limit` bytes: buffers may be
    /// charged half of it.
    pub fn for_limit(limit: u64) -> Self {
        Self {
            limit,
            budget: limit / 2,
            held: AtomicU64::new(0),
            resident: AtomicU64::new(0),
        }
    }

    pub fn limit(&self) -> u64 {
        self.limit
    }

    pub fn budget(&self) -> u64 {
        self.budget
    }

    pub fn held(&self) -> u64 {
        self.held.load(Ordering::Relaxed)
    }

    /// Whether the process is short of memory: its resident memory at the
    /// last sample is past three quarters of its limit, or buffers are
    /// charged past three quarters of the budget. New work is turned away
    /// then.
    pub fn pressed(&self) -> bool {
        self.resident.load(Ordering::Relaxed) > self.limit / 4 * 3
            || self.held() > self.budget / 4 * 3
    }

    /// Reads this process's resident memory (`VmRSS` of
    /// `/proc/self/status`); returns it.
    pub fn sample(&self) -> u64 {
        let resident = std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|status| {
                let line = status.lines().find(|line| line.starts_with("VmRSS:"))?;
                line.split_whitespace().nth(1)?.parse::<u64>().ok()
            })
            .map_or(0, |kib| kib.saturating_mul(1024));
        self.resident.store(resident, Ordering::Relaxed);
        resident
    }

    /// Charges `bytes`; refused (nothing charged) only while the process
    /// is short of memory and the charge would pass the budget.
    pub fn charge(&self, bytes: u64) -> bool {
        let held = self
            .held
            .fetch_add(bytes, Ordering::Relaxed)
            .saturating_add(bytes);
        if held > self.budget && self.pressed() {
            self.held.fetch_sub(bytes, Ordering::Relaxed);
            return false;
        }
        true
    }

    /// Gives back `bytes` charged before.
    pub fn release(&self, bytes: u64) {
        self.held.fetch_sub(bytes, Ordering::Relaxed);
    }

    #[cfg(test)]
    pub(crate) fn set_resident(&self, resident: u64) {
        self.resident.store(resident, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charges_past_the_budget_are_refused_whole() {
        let budget = MemoryBudget::for_limit(200);
        assert!(budget.charge(60));
        assert!(!budget.pressed());
        assert!(!budget.charge(50), "past the budget");
        assert_eq!(budget.held(), 60, "a refused charge holds nothing");
        assert!(budget.charge(40));
        assert!(
            budget.pressed(),
            "charged past three quarters of the budget"
        );
        budget.release(100);
        budget.set_resident(151);
        assert!(
            budget.pressed(),
            "resident past three quarters of the limit"
        );
        budget.set_resident(150);
        assert!(!budget.pressed());
    }

    #[test]
    fn the_sample_reads_this_process_resident_memory() {
        let budget = MemoryBudget::for_limit(1 << 40);
        assert!(budget.sample() > 1 << 20, "more than a MiB resident");
    }

    #[test]
    fn cgroup_files_are_read_as_limits_or_none() {
        assert_eq!(parse_limit("805306368\n"), Some(805_306_368));
        assert_eq!(parse_limit("max\n"), None);
        assert_eq!(parse_limit("9223372036854771712\n"), None);
        assert_eq!(MemoryBudget::for_limit(768 << 20).budget(), 384 << 20);
    }
}
