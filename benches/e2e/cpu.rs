//! CPU accounting from /proc: a process's user plus system time, the host's
//! counters (softirq work, other load), and [`CpuWindow`], which turns both
//! into "% of one core" per process over one measurement.

use std::time::Duration;
use std::time::Instant;

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

/// CPU use over one measurement: every proxy process, the harness (client
/// and echo backend), the host and its softirq time, in % of one core.
#[derive(Clone, Debug, Default)]
pub(crate) struct Cpu {
    pub(crate) entries: Vec<(String, f64)>,
}

impl Cpu {
    pub(crate) fn of(&self, process: &str) -> Option<f64> {
        self.entries
            .iter()
            .find(|(name, _)| name == process)
            .map(|(_, cpu)| *cpu)
    }

    /// Host CPU used by neither this harness, nor a proxy, nor softirq work:
    /// other load on the host, which makes the figures too low.
    pub(crate) fn other_load(&self) -> Option<f64> {
        let ours: f64 = self
            .entries
            .iter()
            .filter(|(name, _)| !name.starts_with("host"))
            .map(|(_, cpu)| cpu)
            .sum();
        let host = self.of("host")? - self.of("host softirq")?;
        Some((host - ours).max(0.0))
    }

    /// The average of several measurements of equal length.
    pub(crate) fn mean(all: &[Cpu]) -> Cpu {
        let mut entries: Vec<(String, f64)> = Vec::new();
        for cpu in all {
            for (name, value) in &cpu.entries {
                match entries.iter_mut().find(|(n, _)| n == name) {
                    Some((_, sum)) => *sum += value,
                    None => entries.push((name.clone(), *value)),
                }
            }
        }
        for (_, sum) in &mut entries {
            *sum /= all.len().max(1) as f64;
        }
        Cpu { entries }
    }
}

/// The counters at the start of a measurement.
pub(crate) struct CpuWindow {
    processes: Vec<(String, u32)>,
    before: Vec<Option<Duration>>,
    host: Option<HostCpu>,
    started: Instant,
}

impl CpuWindow {
    /// Starts counting for `processes` (name, pid); the harness is added.
    pub(crate) fn start(processes: &[(String, u32)]) -> CpuWindow {
        let processes: Vec<(String, u32)> = processes
            .iter()
            .cloned()
            .chain([("harness".to_owned(), std::process::id())])
            .collect();
        let before = processes.iter().map(|(_, pid)| cpu_time(*pid)).collect();
        CpuWindow {
            processes,
            before,
            host: host_cpu(),
            started: Instant::now(),
        }
    }

    pub(crate) fn finish(self) -> Cpu {
        let elapsed = self.started.elapsed().as_secs_f64().max(1e-3);
        let mut entries: Vec<(String, f64)> = self
            .processes
            .iter()
            .zip(self.before)
            .filter_map(|((name, pid), before)| {
                let used = cpu_time(*pid)?.checked_sub(before?)?;
                Some((name.clone(), used.as_secs_f64() / elapsed * 100.0))
            })
            .collect();
        if let (Some(before), Some(after)) = (self.host, host_cpu()) {
            entries.push(("host".to_owned(), after.busy_since(&before)));
            entries.push(("host softirq".to_owned(), after.interrupts_since(&before)));
        }
        Cpu { entries }
    }
}

/// How long the threads of a process were runnable but waited for a CPU
/// (the run queue), summed over its threads: the second field of each
/// `/proc/<pid>/task/<tid>/schedstat`, in ns. A thread that ended takes its
/// share with it; the proxies' and the harness's threads live for the run.
pub(crate) fn run_queue_wait(pid: u32) -> Option<Duration> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    let waited: u64 = tasks
        .flatten()
        .filter_map(|task| std::fs::read_to_string(task.path().join("schedstat")).ok())
        .filter_map(|stat| stat.split_whitespace().nth(1)?.parse::<u64>().ok())
        .sum();
    Some(Duration::from_nanos(waited))
}

/// The run-queue wait of several processes (the proxies and the harness)
/// from a start: what the scheduler, not the proxies, added to latency.
pub(crate) struct WaitWindow {
    pids: Vec<u32>,
    before: Duration,
    started: Instant,
}

impl WaitWindow {
    pub(crate) fn start(processes: &[(String, u32)]) -> WaitWindow {
        let pids: Vec<u32> = processes
            .iter()
            .map(|(_, pid)| *pid)
            .chain([std::process::id()])
            .collect();
        WaitWindow {
            before: pids.iter().filter_map(|pid| run_queue_wait(*pid)).sum(),
            pids,
            started: Instant::now(),
        }
    }

    /// Milliseconds waited per second of the window, all processes together.
    pub(crate) fn finish(self) -> f64 {
        let after: Duration = self
            .pids
            .iter()
            .filter_map(|pid| run_queue_wait(*pid))
            .sum();
        let elapsed = self.started.elapsed().as_secs_f64().max(1e-3);
        after.saturating_sub(self.before).as_secs_f64() * 1000.0 / elapsed
    }
}
