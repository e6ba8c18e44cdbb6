//! What one authenticated peer may make the gateway hold in memory: a
//! `strait run` process, a peer opening 2,000 streams to a backend that
//! stopped reading and sending 2 MiB on each.

use super::handshakes::Process;
use super::*;

const SINK: &str = "sink.app.svc.clusterset.local:42";
const STREAMS: usize = 2_000;
const PER_STREAM: usize = 2 * 1024 * 1024;

/// 2,000 streams, 2 MiB each, to a backend that reads nothing, from one
/// peer to a gateway limited to 512 MiB (a buffer budget of 256 MiB, 128
/// MiB of it for one caller). A stream is charged its window while it is
/// dialled and while it holds bytes; past the caller's budget new streams
/// are refused and a stream that starts holding bytes is closed instead of
/// buffering them: the process stays under its limit, and another peer is
/// still served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_cannot_make_the_gateway_buffer_past_its_budget() {
    let _serial = SERIAL.lock().await;
    super::handshakes::raise_own_descriptor_limit();
    // A budget of 256 MiB (half the limit); c1 may be charged half of it.
    let process = Process::start("  transport: auto\ntuning:\n  memoryLimit: 512Mi\n").await;
    let before = process.resident_kib();
    // Two connections: each carries at most 1,000 streams.
    let mut connections = [process.h2("c1").await, process.h2("c1").await];
    let payload = bytes::Bytes::from(vec![7u8; PER_STREAM]);
    let mut streams = Vec::new();
    let mut refused = 0usize;
    for index in 0..STREAMS {
        let send = &mut connections[index % 2];
        let Ok((response, mut upload)) = send.send_request(connect_request(SINK), false) else {
            refused += 1;
            continue;
        };
        let payload = payload.clone();
        streams.push(tokio::spawn(async move {
            let response = response.await.map_err(|e| e.to_string())?;
            if response.status() != 200 {
                return Err(format!("status {}", response.status()));
            }
            upload.reserve_capacity(PER_STREAM);
            upload
                .send_data(payload, false)
                .map_err(|e| e.to_string())?;
            // Held: the peer's side keeps the stream open.
            let _body = response.into_body();
            std::future::pending::<()>().await;
            Ok::<(), String>(())
        }));
    }
    let payload_sent = STREAMS * PER_STREAM;
    let mut peak = 0;
    for _ in 0..40 {
        tokio::time::sleep(Duration::from_millis(250)).await;
        peak = peak.max(process.resident_kib().saturating_sub(before));
    }
    let failed = streams.iter().filter(|stream| stream.is_finished()).count();
    // Another peer beside it.
    let legit = tokio::time::timeout(Duration::from_secs(5), process.tunnel_peer("c2"))
        .await
        .expect("the other peer in time");
    let metrics = process.metrics().await;
    println!(
        "MEMORY: {STREAMS} streams x 2 MiB ({} MiB offered) to a backend reading nothing: gateway from {} MiB, peak +{} MiB; \
         {failed} streams ended early, {refused} not sent; sink accepted {}; other peer: {legit:?}",
        payload_sent >> 20,
        before / 1024,
        peak / 1024,
        process
            .sink
            .accepted
            .load(std::sync::atomic::Ordering::Relaxed)
    );
    for line in metrics.lines().filter(|l| {
        l.starts_with("strait_limited_total") || l.starts_with("strait_tunnel_requests_refused")
    }) {
        println!("  {line}");
    }
    assert!(
        legit.as_ref().is_ok_and(|g| g.starts_with("c3-echo")),
        "{legit:?}"
    );
    let peak_mib = (before + peak) / 1024;
    assert!(
        peak_mib < 512,
        "the gateway reached {peak_mib} MiB, past its memory limit (512 MiB)"
    );
    let memory = metric(
        &metrics,
        "strait_limited_total{limit=\"memory\",transport=\"h2\"}",
    );
    assert!(memory > 0, "the memory budget refused or closed streams");
    assert!(
        failed >= 1_000,
        "most streams were refused or closed, not buffered: {failed}"
    );
    for stream in streams {
        stream.abort();
    }
}
