//! What the bench reads of a process from `/proc`: its memory and CPU time.

use super::Result;

/// The CPU time a process has used (user and system), in seconds.
pub(crate) fn cpu_seconds(pid: u32) -> Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map_err(|e| format!("cannot read /proc/{pid}/stat: {e}"))?;
    let (_, rest) = stat
        .rsplit_once(") ")
        .ok_or_else(|| format!("no command in /proc/{pid}/stat"))?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime, fields 14 and 15 of the whole line (11 and 12 here).
    let ticks = |at: usize| -> Result<f64> {
        fields
            .get(at)
            .and_then(|t| t.parse::<f64>().ok())
            .ok_or_else(|| format!("no CPU times in /proc/{pid}/stat"))
    };
    // In USER_HZ, which Linux fixes at 100 for what it tells user space.
    Ok((ticks(11)? + ticks(12)?) / 100.0)
}

/// `VmRSS` and `VmHWM` of a process, in KiB.
pub(crate) fn memory_kib(pid: u32) -> Result<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .map_err(|e| format!("cannot read /proc/{pid}/status: {e}"))?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|kib| kib.parse().ok())
            .ok_or_else(|| format!("no {name} in /proc/{pid}/status"))
    };
    Ok((field("VmRSS:")?, field("VmHWM:")?))
}
