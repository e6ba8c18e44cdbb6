//! Bulk throughput: one connection writing a pattern and reading the echo back,
//! with the CPU every process used meanwhile.

use crate::AUTHORITY;
use crate::CHUNK;
use crate::MIB;
use crate::Result;
use crate::Scenario;
use crate::clients::connect_through;
use crate::cpu::cpu_time;
use crate::cpu::host_cpu;
use crate::processes::Gateways;
use crate::report::size_label;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use std::time::Instant;
use tokio::io::AsyncReadExt;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

pub(crate) struct Flow {
    pub(crate) bytes: u64,
    pub(crate) elapsed: Duration,
    /// (process, % of one core) while the flow ran: every gateway, the
    /// harness, the host and the host's softirq time.
    pub(crate) cpu: Vec<(String, f64)>,
    /// Gbit/s of every measured run, slowest first; this flow is the median one.
    pub(crate) runs: Vec<f64>,
}

impl Flow {
    pub(crate) fn gbps(&self) -> f64 {
        self.bytes as f64 * 8.0 / self.elapsed.as_secs_f64() / 1e9
    }

    pub(crate) fn cpu_of(&self, process: &str) -> Option<f64> {
        self.cpu
            .iter()
            .find(|(name, _)| name == process)
            .map(|(_, cpu)| *cpu)
    }

    /// Host CPU used by neither this harness, nor a gateway, nor softirq
    /// work: other load on the host, which makes the figure too low.
    pub(crate) fn other_load(&self) -> Option<f64> {
        let ours: f64 = self
            .cpu
            .iter()
            .filter(|(name, _)| !name.starts_with("host"))
            .map(|(_, cpu)| cpu)
            .sum();
        let host = self.cpu_of("host")? - self.cpu_of("host softirq")?;
        Some((host - ours).max(0.0))
    }
}

/// A short warm-up flow, then `repeats` measured ones of `total` bytes; the
/// median one, with the spread.
pub(crate) async fn bulk_flow<'a>(
    gateways: &Gateways,
    scenario: &'a Scenario,
    backend: SocketAddr,
    total: u64,
    repeats: usize,
) -> (&'a Scenario, Result<Flow>) {
    if let Err(error) = one_flow(gateways, scenario, backend, 8 * MIB).await {
        return (scenario, Err(format!("warm-up: {error}")));
    }
    let mut flows = Vec::new();
    for _ in 0..repeats.max(1) {
        match one_flow(gateways, scenario, backend, total).await {
            Ok(flow) => flows.push(flow),
            Err(error) => return (scenario, Err(error)),
        }
    }
    flows.sort_by(|a, b| a.gbps().total_cmp(&b.gbps()));
    let runs: Vec<f64> = flows.iter().map(Flow::gbps).collect();
    let mut median = flows.swap_remove(flows.len() / 2);
    median.runs = runs;
    (scenario, Ok(median))
}

/// Sends `total` bytes through one connection while reading the echo, with
/// the CPU every process used meanwhile.
pub(crate) async fn one_flow(
    gateways: &Gateways,
    scenario: &Scenario,
    backend: SocketAddr,
    total: u64,
) -> Result<Flow> {
    let stream = match scenario.via {
        Some(via) => connect_through(gateways.get(via).connect, AUTHORITY).await?,
        None => {
            let stream = TcpStream::connect(backend)
                .await
                .map_err(|e| format!("cannot reach the backend {backend}: {e}"))?;
            let _ = stream.set_nodelay(true);
            stream
        }
    };
    // At least 30 s, and never slower than 40 MB/s.
    let limit = Duration::from_secs(30).max(Duration::from_secs(total / 40_000_000));
    let processes: Vec<(String, u32)> = gateways
        .children
        .iter()
        .map(|g| (g.name.to_owned(), g.child.id()))
        .chain([("harness".to_owned(), std::process::id())])
        .collect();
    let cpu_before: Vec<Option<Duration>> =
        processes.iter().map(|(_, pid)| cpu_time(*pid)).collect();
    let host_before = host_cpu();
    let elapsed = tokio::time::timeout(limit, echo_bulk(stream, total))
        .await
        .map_err(|_| format!("{} were not echoed within {limit:?}", size_label(total)))??;
    let mut cpu: Vec<(String, f64)> = processes
        .iter()
        .zip(cpu_before)
        .filter_map(|((name, pid), before)| {
            let used = cpu_time(*pid)?.checked_sub(before?)?;
            Some((
                name.clone(),
                used.as_secs_f64() / elapsed.as_secs_f64() * 100.0,
            ))
        })
        .collect();
    if let (Some(before), Some(after)) = (host_before, host_cpu()) {
        cpu.push(("host".to_owned(), after.busy_since(&before)));
        cpu.push(("host softirq".to_owned(), after.interrupts_since(&before)));
    }
    Ok(Flow {
        bytes: total,
        elapsed,
        cpu,
        runs: Vec::new(),
    })
}

/// The pattern the bulk flows send: byte i of every chunk is `i % 251`.
pub(crate) fn pattern() -> Arc<Vec<u8>> {
    Arc::new((0..CHUNK).map(|i| (i % 251) as u8).collect())
}

/// Writes `total` bytes (whole chunks of the pattern) and half-closes, while
/// reading the echo to its end; the time from the first write to the last byte.
pub(crate) async fn echo_bulk(stream: TcpStream, total: u64) -> Result<Duration> {
    let chunk = pattern();
    let (mut read, mut write) = stream.into_split();
    let started = Instant::now();
    let sent = chunk.clone();
    let writer = tokio::spawn(async move {
        let mut left = total;
        while left > 0 {
            let n = usize::try_from(left.min(CHUNK as u64)).unwrap_or(CHUNK);
            write.write_all(&sent[..n]).await?;
            left -= n as u64;
        }
        write.shutdown().await?;
        Ok::<_, std::io::Error>(write)
    });
    let mut buffer = vec![0u8; CHUNK];
    let mut received: u64 = 0;
    loop {
        let n = read
            .read(&mut buffer)
            .await
            .map_err(|e| format!("reading the echo after {received} bytes: {e}"))?;
        if n == 0 {
            break;
        }
        if received + n as u64 > total {
            return Err(format!("echoed more than the {total} bytes sent"));
        }
        // The echo must be the pattern, continued across chunk boundaries.
        let mut checked = 0;
        while checked < n {
            let offset = ((received + checked as u64) % CHUNK as u64) as usize;
            let len = (n - checked).min(CHUNK - offset);
            if buffer[checked..checked + len] != chunk[offset..offset + len] {
                return Err(format!(
                    "the echo differs from what was sent near byte {}",
                    received + checked as u64
                ));
            }
            checked += len;
        }
        received += n as u64;
    }
    let elapsed = started.elapsed();
    let _write = writer
        .await
        .map_err(|e| format!("writer task: {e}"))?
        .map_err(|e| format!("writing: {e}"))?;
    if received != total {
        return Err(format!("sent {total} bytes but {received} came back"));
    }
    Ok(elapsed)
}
