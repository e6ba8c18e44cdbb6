//! Connection rate: a few connectors, each in a loop for a fixed time: open a
//! connection through the scenario's path to the echo backend (for Strait
//! including the `CONNECT` exchange), send 1 byte, read its echo, close.

use crate::Result;
use crate::clients::Target;
use crate::cpu::Cpu;
use crate::cpu::CpuWindow;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use std::time::Instant;
use tokio::io::AsyncReadExt;
use tokio::io::AsyncWriteExt;

/// One measured round.
pub(crate) struct RateRun {
    /// Completed connections per second.
    pub(crate) per_second: f64,
    pub(crate) cpu: Cpu,
}

/// `connectors` loops of connect / 1-byte echo / close for `duration`;
/// connections per second over the time until the last loop stopped. A
/// connection that takes longer than `each` fails the run.
pub(crate) async fn connection_rate(
    target: Target,
    connectors: usize,
    duration: Duration,
    each: Duration,
    pids: &[(String, u32)],
) -> Result<RateRun> {
    let done = Arc::new(AtomicU64::new(0));
    let window = CpuWindow::start(pids);
    let started = Instant::now();
    let deadline = started + duration;
    let mut loops = tokio::task::JoinSet::new();
    for _ in 0..connectors.max(1) {
        let done = done.clone();
        loops.spawn(async move {
            while Instant::now() < deadline {
                let one = async {
                    let mut stream = target.open().await?;
                    stream
                        .write_all(b"*")
                        .await
                        .map_err(|e| format!("writing the byte: {e}"))?;
                    let byte = stream
                        .read_u8()
                        .await
                        .map_err(|e| format!("reading the echo: {e}"))?;
                    if byte != b'*' {
                        return Err(format!("echo answered {byte} instead of 42"));
                    }
                    Ok::<_, String>(())
                };
                tokio::time::timeout(each, one)
                    .await
                    .map_err(|_| format!("STALL: a connection took over {each:?}"))??;
                done.fetch_add(1, Ordering::Relaxed);
            }
            Ok::<_, String>(())
        });
    }
    let mut error = None;
    while let Some(joined) = loops.join_next().await {
        let outcome = joined
            .map_err(|e| format!("connector task: {e}"))
            .and_then(|r| r);
        if let Err(e) = outcome {
            error.get_or_insert(e);
        }
    }
    let elapsed = started.elapsed();
    let cpu = window.finish();
    let completed = done.load(Ordering::Relaxed);
    if let Some(error) = error {
        return Err(format!("after {completed} connections: {error}"));
    }
    Ok(RateRun {
        per_second: completed as f64 / elapsed.as_secs_f64(),
        cpu,
    })
}
