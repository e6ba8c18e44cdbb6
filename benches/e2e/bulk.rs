//! Bulk throughput: `streams` connections at once, each writing its share of
//! the bytes and reading the echo back (checked byte for byte), with the CPU
//! every process used meanwhile.

use crate::CHUNK;
use crate::Result;
use crate::clients::Target;
use crate::cpu::Cpu;
use crate::cpu::CpuWindow;
use crate::report::size_label;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use std::time::Instant;
use tokio::io::AsyncReadExt;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

/// One measured bulk round.
pub(crate) struct BulkRun {
    pub(crate) gbps: f64,
    pub(crate) cpu: Cpu,
}

/// Opens `streams` connections through `target`, then echoes `total` bytes
/// split evenly over them, all at once; Gbit/s of payload one way, from the
/// first write to the last byte of the last echo.
pub(crate) async fn bulk_round(
    target: Target,
    streams: usize,
    total: u64,
    pids: &[(String, u32)],
) -> Result<BulkRun> {
    let streams = streams.max(1);
    let mut connections = Vec::with_capacity(streams);
    for _ in 0..streams {
        connections.push(target.open().await?);
    }
    let each = total / streams as u64;
    // At least 30 s, and never slower than 40 MB/s.
    let limit = Duration::from_secs(30).max(Duration::from_secs(total / 40_000_000));
    let window = CpuWindow::start(pids);
    let started = Instant::now();
    let mut flows = tokio::task::JoinSet::new();
    for stream in connections {
        flows.spawn(echo_bulk(stream, Amount::Bytes(each), None));
    }
    let all = tokio::time::timeout(limit, async {
        while let Some(flow) = flows.join_next().await {
            flow.map_err(|e| format!("flow task: {e}"))??;
        }
        Ok::<_, String>(())
    })
    .await;
    let elapsed = started.elapsed();
    let cpu = window.finish();
    match all {
        Err(_) => Err(format!(
            "{} over {streams} connection(s) were not echoed within {limit:?}",
            size_label(total)
        )),
        Ok(Err(error)) => Err(error),
        Ok(Ok(())) => Ok(BulkRun {
            gbps: (each * streams as u64) as f64 * 8.0 / elapsed.as_secs_f64() / 1e9,
            cpu,
        }),
    }
}

/// The pattern the bulk flows send: byte i of every chunk is `i % 251`.
pub(crate) fn pattern() -> Arc<Vec<u8>> {
    Arc::new((0..CHUNK).map(|i| (i % 251) as u8).collect())
}

/// How much a bulk flow sends.
#[derive(Clone)]
pub(crate) enum Amount {
    Bytes(u64),
    /// Whole chunks until the flag is set.
    Until(Arc<AtomicBool>),
    /// [`PACED_WRITE`]-byte writes at this many bytes a second, until the
    /// flag is set.
    Paced(u64, Arc<AtomicBool>),
}

/// The write size of a paced flow.
const PACED_WRITE: usize = 64 * 1024;

/// Writes the pattern (byte i of every chunk is `i % 251`) and half-closes,
/// while reading the echo to its end and checking it byte for byte; the
/// bytes echoed. With `stall`, a read that waits longer than that while
/// echoes are outstanding fails the flow: the path stopped moving.
pub(crate) async fn echo_bulk(
    stream: TcpStream,
    amount: Amount,
    stall: Option<Duration>,
) -> Result<u64> {
    let chunk = pattern();
    let (mut read, mut write) = stream.into_split();
    let sent = chunk.clone();
    let writer = tokio::spawn(async move {
        let started = tokio::time::Instant::now();
        let mut written: u64 = 0;
        loop {
            let n = match &amount {
                Amount::Bytes(total) => (*total - written).min(CHUNK as u64),
                Amount::Until(stop) | Amount::Paced(_, stop) if stop.load(Ordering::Relaxed) => 0,
                Amount::Until(_) => CHUNK as u64,
                Amount::Paced(rate, _) => {
                    let due = Duration::from_secs_f64(written as f64 / (*rate).max(1) as f64);
                    tokio::time::sleep_until(started + due).await;
                    // Whole writes of the pattern: it repeats every CHUNK bytes.
                    (CHUNK - (written % CHUNK as u64) as usize).min(PACED_WRITE) as u64
                }
            };
            if n == 0 {
                break;
            }
            let n = usize::try_from(n).unwrap_or(CHUNK);
            let offset = (written % CHUNK as u64) as usize;
            write.write_all(&sent[offset..offset + n]).await?;
            written += n as u64;
        }
        write.shutdown().await?;
        Ok::<_, std::io::Error>((write, written))
    });
    let mut buffer = vec![0u8; CHUNK];
    let mut received: u64 = 0;
    loop {
        let reading = read.read(&mut buffer);
        let n = match stall {
            None => reading.await,
            Some(limit) => tokio::time::timeout(limit, reading).await.map_err(|_| {
                format!("STALL: no echo for {limit:?} after {received} bytes were echoed")
            })?,
        }
        .map_err(|e| format!("reading the echo after {received} bytes: {e}"))?;
        if n == 0 {
            break;
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
    let (_write, written) = writer
        .await
        .map_err(|e| format!("writer task: {e}"))?
        .map_err(|e| format!("writing: {e}"))?;
    if received != written {
        return Err(format!("sent {written} bytes but {received} came back"));
    }
    Ok(received)
}
