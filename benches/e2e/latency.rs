//! Request/response latency at a fixed rate, open loop: a fixed set of
//! connections, each sending a 1 KiB request on a fixed schedule whatever
//! happened to the previous ones, and reading its 1 KiB echo.
//!
//! One OS thread (the pacer) sends every request at its scheduled time,
//! sleeping in between with a 1 µs timer slack; it writes straight to the
//! sockets, so a slow response never delays a later request (no coordinated
//! omission). Each request carries its sequence number and its scheduled
//! time; a tokio task per connection reads the echoes, checks them, and
//! records the time from the *scheduled* send to the last byte of the echo
//! in an HDR histogram. When the pacer itself is late, that lateness counts
//! as latency too; it is also reported on its own.

use crate::Result;
use crate::clients::Target;
use crate::cpu::Cpu;
use crate::cpu::CpuWindow;
use crate::cpu::WaitWindow;
use hdrhistogram::Histogram;
use std::io::Write as _;
use std::time::Duration;
use std::time::Instant;
use tokio::io::AsyncReadExt;
use tokio::io::AsyncWriteExt;

/// Request and response size.
pub(crate) const MESSAGE: usize = 1024;

/// The shape of the workload.
#[derive(Clone, Copy)]
pub(crate) struct LatencyPlan {
    pub(crate) connections: usize,
    /// Requests per second over all connections.
    pub(crate) rate: u32,
    pub(crate) duration: Duration,
    /// When set, an echo that takes longer than this fails the round (the
    /// soak's check that no connection stops moving).
    pub(crate) stall: Option<Duration>,
}

/// One measured round.
pub(crate) struct LatencyRound {
    /// Scheduled send to echo received, in ns.
    pub(crate) latency: Histogram<u64>,
    /// How late the pacer sent each request, in ns.
    pub(crate) pacer_late: Histogram<u64>,
    pub(crate) cpu: Cpu,
    /// Run-queue wait of the proxies and the harness, ms per second.
    pub(crate) waited: f64,
}

/// An empty histogram of nanoseconds, 1 µs to 60 s, 3 significant digits.
pub(crate) fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1_000, 60_000_000_000, 3).expect("valid histogram bounds")
}

fn request(seq: u64, scheduled_ns: u64) -> [u8; MESSAGE] {
    let mut message = [(seq % 251) as u8; MESSAGE];
    message[..8].copy_from_slice(&seq.to_le_bytes());
    message[8..16].copy_from_slice(&scheduled_ns.to_le_bytes());
    message
}

/// One round: opens the connections (each does one unmeasured exchange),
/// then runs the schedule.
pub(crate) async fn latency_round(
    target: Target,
    plan: LatencyPlan,
    pids: &[(String, u32)],
) -> Result<LatencyRound> {
    let connections = plan.connections.max(1);
    let mut opening = tokio::task::JoinSet::new();
    for _ in 0..connections {
        opening.spawn(async move {
            let mut stream = target.open().await?;
            let warm = request(u64::MAX, 0);
            let mut echo = [0u8; MESSAGE];
            stream
                .write_all(&warm)
                .await
                .map_err(|e| format!("warm-up write: {e}"))?;
            stream
                .read_exact(&mut echo)
                .await
                .map_err(|e| format!("warm-up echo: {e}"))?;
            if echo != warm {
                return Err("the warm-up echo differs from the request".to_owned());
            }
            let stream = stream.into_std().map_err(|e| format!("into_std: {e}"))?;
            let writer = stream.try_clone().map_err(|e| format!("dup: {e}"))?;
            let reader =
                tokio::net::TcpStream::from_std(stream).map_err(|e| format!("from_std: {e}"))?;
            Ok::<_, String>((reader, writer))
        });
    }
    let mut readers = Vec::with_capacity(connections);
    let mut writers = Vec::with_capacity(connections);
    while let Some(opened) = opening.join_next().await {
        let (reader, writer) = opened.map_err(|e| format!("opening task: {e}"))??;
        readers.push(reader);
        writers.push(writer);
    }

    // Connection i sends at base + offset(i) + k × interval, for k while that
    // is within the duration.
    let interval_ns = connections as u64 * 1_000_000_000 / u64::from(plan.rate.max(1));
    let duration_ns = u64::try_from(plan.duration.as_nanos()).unwrap_or(u64::MAX);
    let offset_ns = |i: usize| i as u64 * interval_ns / connections as u64;
    let count = |i: usize| {
        duration_ns
            .saturating_sub(offset_ns(i))
            .div_ceil(interval_ns)
    };
    let base = Instant::now() + Duration::from_millis(20);
    let limit = plan.duration + Duration::from_secs(10);

    let window = CpuWindow::start(pids);
    let waiting = WaitWindow::start(pids);
    let mut reading = tokio::task::JoinSet::new();
    let stall = plan.stall;
    for (i, mut reader) in readers.into_iter().enumerate() {
        let expected = count(i);
        reading.spawn(async move {
            let mut latency = histogram();
            let mut echo = [0u8; MESSAGE];
            for seq in 0..expected {
                let read = reader.read_exact(&mut echo);
                match stall {
                    None => read.await,
                    Some(limit) => tokio::time::timeout(limit, read).await.map_err(|_| {
                        format!("STALL: echo {seq} of {expected} took over {limit:?}")
                    })?,
                }
                .map_err(|e| format!("reading echo {seq} of {expected}: {e}"))?;
                let received = Instant::now();
                let scheduled = u64::from_le_bytes(echo[8..16].try_into().expect("8 bytes"));
                if echo != request(seq, scheduled) {
                    return Err(format!("echo {seq} differs from its request"));
                }
                let elapsed =
                    received.saturating_duration_since(base + Duration::from_nanos(scheduled));
                latency.saturating_record(u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX));
            }
            Ok::<_, String>(latency)
        });
    }
    let pacer = std::thread::spawn(move || pace(writers, base, interval_ns, duration_ns));
    let read = tokio::time::timeout(limit, async {
        let mut latency = histogram();
        while let Some(joined) = reading.join_next().await {
            let one = joined.map_err(|e| format!("reader task: {e}"))??;
            latency.add(&one).map_err(|e| format!("histogram: {e}"))?;
        }
        Ok::<_, String>(latency)
    })
    .await;
    let cpu = window.finish();
    let waited = waiting.finish();
    let paced = tokio::task::spawn_blocking(move || pacer.join())
        .await
        .map_err(|e| format!("pacer join: {e}"))?
        .map_err(|_| "the pacer thread panicked".to_owned())?;
    let pacer_late = paced?;
    let latency = read.map_err(|_| format!("the echoes did not all arrive within {limit:?}"))??;
    Ok(LatencyRound {
        latency,
        pacer_late,
        cpu,
        waited,
    })
}

/// The pacer: sends every request at its scheduled time, in time order; how
/// late each send was.
fn pace(
    mut writers: Vec<std::net::TcpStream>,
    base: Instant,
    interval_ns: u64,
    duration_ns: u64,
) -> Result<Histogram<u64>> {
    set_fine_timer_slack();
    let connections = writers.len() as u64;
    let mut late = histogram();
    for seq in 0.. {
        if seq * interval_ns >= duration_ns {
            break;
        }
        for (i, writer) in writers.iter_mut().enumerate() {
            let offset = seq * interval_ns + i as u64 * interval_ns / connections;
            if offset >= duration_ns {
                break;
            }
            let scheduled = base + Duration::from_nanos(offset);
            let now = Instant::now();
            if scheduled > now {
                std::thread::sleep(scheduled - now);
            }
            let sent = Instant::now();
            late.saturating_record(
                u64::try_from(sent.saturating_duration_since(scheduled).as_nanos())
                    .unwrap_or(u64::MAX),
            );
            send(writer, &request(seq, offset))
                .map_err(|e| format!("sending request {seq}: {e}"))?;
        }
    }
    Ok(late)
}

/// `write_all` on a socket that tokio put in non-blocking mode: waits out a
/// full send buffer (which only a stalled proxy causes).
fn send(writer: &mut std::net::TcpStream, mut message: &[u8]) -> std::io::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !message.is_empty() {
        match writer.write(message) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => message = &message[n..],
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_micros(50));
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Asks Linux to wake this thread's sleeps within 1 µs of their deadline
/// (the default timer slack is 50 µs, which would count as latency).
fn set_fine_timer_slack() {
    let _ = nix::sys::prctl::set_timerslack(1);
}
