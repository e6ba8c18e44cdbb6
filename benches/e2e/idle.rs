//! Idle memory: the RSS of a scenario's proxy processes before, while and
//! after many idle connections through them are open.

use crate::OPEN_CONCURRENCY;
use crate::Result;
use crate::Scenario;
use crate::clients::Target;
use crate::clients::ping;
use std::sync::Arc;
use std::time::Duration;

/// One proxy process's RSS, in KiB.
pub(crate) struct ProcessMemory {
    pub(crate) name: &'static str,
    pub(crate) role: &'static str,
    pub(crate) before: u64,
    pub(crate) open: u64,
    pub(crate) closed: u64,
}

/// The idle-connection measurement of one scenario.
pub(crate) struct Idle {
    /// Connections that were open (and had echoed) while RSS was read.
    pub(crate) opened: usize,
    pub(crate) processes: Vec<ProcessMemory>,
    /// Why fewer than all connections opened.
    pub(crate) error: Option<String>,
}

impl ProcessMemory {
    pub(crate) fn per_connection_kib(&self, connections: usize) -> f64 {
        (self.open as f64 - self.before as f64) / connections.max(1) as f64
    }
}

/// VmRSS of a process in KiB.
pub(crate) fn rss_kib(pid: u32) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .map_err(|e| format!("cannot read /proc/{pid}/status: {e}"))?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|value| value.split_whitespace().next()?.parse().ok())
        .ok_or_else(|| format!("no VmRSS in /proc/{pid}/status"))
}

/// RSS of the scenario's proxy processes (`pids`, in the order of
/// `scenario.processes`) before, while and after `count` connections through
/// it are open, each after one 4-byte echo, then idle for `settle`.
/// Connections that fail to open are reported, not fatal: RSS is read with
/// the ones that did.
pub(crate) async fn idle_memory(
    scenario: &Scenario,
    target: Target,
    pids: &[u32],
    count: usize,
    settle: Duration,
) -> Result<Idle> {
    let rss = || {
        pids.iter()
            .map(|pid| rss_kib(*pid))
            .collect::<Result<Vec<u64>>>()
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = rss()?;

    let permits = Arc::new(tokio::sync::Semaphore::new(OPEN_CONCURRENCY));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..count {
        let permits = permits.clone();
        tasks.spawn(async move {
            let _permit = permits.acquire_owned().await.map_err(|e| e.to_string())?;
            let limit = Duration::from_secs(10);
            let mut stream = tokio::time::timeout(limit, target.open())
                .await
                .map_err(|_| format!("not connected within {limit:?}"))??;
            tokio::time::timeout(limit, ping(&mut stream))
                .await
                .map_err(|_| format!("connected, but no echo within {limit:?}"))??;
            Ok::<_, String>(stream)
        });
    }
    let mut open = Vec::with_capacity(count);
    let mut errors = Vec::new();
    let all = tokio::time::timeout(Duration::from_secs(120), async {
        while let Some(joined) = tasks.join_next().await {
            match joined {
                Ok(Ok(stream)) => open.push(stream),
                Ok(Err(error)) => errors.push(error),
                Err(error) => errors.push(format!("connection task: {error}")),
            }
        }
    })
    .await;
    if all.is_err() {
        errors.push("opening them took over 120 s".to_owned());
    }
    let error = (!errors.is_empty()).then(|| {
        let mut kinds: Vec<String> = errors.clone();
        kinds.sort();
        kinds.dedup();
        format!(
            "{} of {count} connections opened; {} failed: {}",
            open.len(),
            count - open.len(),
            kinds.join("; ")
        )
    });
    tokio::time::sleep(settle).await;
    let while_open = rss()?;
    let opened = open.len();
    // Connections must still work after idling.
    let step = opened.div_ceil(10).max(1);
    for stream in open.iter_mut().step_by(step) {
        tokio::time::timeout(Duration::from_secs(5), ping(stream))
            .await
            .map_err(|_| format!("{}: an idle connection's echo timed out", scenario.name))?
            .map_err(|e| format!("{}: an idle connection: {e}", scenario.name))?;
    }
    drop(open);
    tokio::time::sleep(settle.min(Duration::from_secs(1))).await;
    let closed = rss()?;
    Ok(Idle {
        opened,
        processes: scenario
            .processes
            .iter()
            .enumerate()
            .map(|(index, (name, role))| ProcessMemory {
                name,
                role,
                before: before[index],
                open: while_open[index],
                closed: closed[index],
            })
            .collect(),
        error,
    })
}
