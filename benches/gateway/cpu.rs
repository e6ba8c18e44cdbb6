//! CPU sampling from /proc: a process's user plus system time and the host's
//! counters (softirq work, other load).

use std::time::Duration;

/// User plus system CPU time of a process, from /proc/<pid>/stat (clock ticks of 10 ms).
pub(crate) fn cpu_time(pid: u32) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after_name = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    // Fields 14 and 15 of proc(5); field 3 (state) is the first after the name.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(Duration::from_millis((utime + stime) * 10))
}

/// The host's CPU counters: the first line of /proc/stat, in clock ticks.
pub(crate) struct HostCpu {
    pub(crate) busy: u64,
    /// Interrupt and softirq time: on loopback, much of the TCP/UDP receive
    /// path, which no process is billed for.
    pub(crate) interrupts: u64,
    pub(crate) total: u64,
    pub(crate) cores: usize,
}

pub(crate) fn host_cpu() -> Option<HostCpu> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let ticks: Vec<u64> = stat
        .lines()
        .next()?
        .strip_prefix("cpu ")?
        .split_whitespace()
        .map(|field| field.parse().ok())
        .collect::<Option<_>>()?;
    // user nice system idle iowait irq softirq steal (guest time is in user).
    let total: u64 = ticks.iter().take(8).sum();
    let idle = ticks.get(3)? + ticks.get(4)?;
    let cores = stat
        .lines()
        .filter(|l| l.starts_with("cpu") && l.as_bytes().get(3).is_some_and(u8::is_ascii_digit))
        .count();
    Some(HostCpu {
        busy: total - idle,
        interrupts: ticks.get(5)? + ticks.get(6)?,
        total,
        cores,
    })
}

impl HostCpu {
    /// Busy time of all cores since `before`, in % of one core (so 200% is
    /// two cores saturated); includes kernel work billed to no process.
    pub(crate) fn busy_since(&self, before: &HostCpu) -> f64 {
        self.share(self.busy.saturating_sub(before.busy), before)
    }

    /// Interrupt and softirq time since `before`, in % of one core.
    pub(crate) fn interrupts_since(&self, before: &HostCpu) -> f64 {
        self.share(self.interrupts.saturating_sub(before.interrupts), before)
    }

    pub(crate) fn share(&self, ticks: u64, before: &HostCpu) -> f64 {
        let total = self.total.saturating_sub(before.total).max(1) as f64;
        ticks as f64 / total * 100.0 * self.cores.max(1) as f64
    }
}
