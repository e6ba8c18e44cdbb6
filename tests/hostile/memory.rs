//! What one authenticated peer may make the gateway hold in memory: a
//! `strait run` process, a peer opening 2,000 streams to a backend that
//! stopped reading and sending 2 MiB on each, and 2,000 UDP flows whose
//! answers it never reads.

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
    let peak = watch_peak(&process, before).await;
    let failed = streams.iter().filter(|stream| stream.is_finished()).count();
    let (legit, metrics) = other_peer_and_metrics(&process).await;
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
    assert_bounded(&legit, &metrics, before + peak);
    assert!(
        failed >= 1_000,
        "most streams were refused or closed, not buffered: {failed}"
    );
    for stream in streams {
        stream.abort();
    }
}

/// The most the gateway's resident memory grew over `before` in 10 s.
async fn watch_peak(process: &Process, before: u64) -> u64 {
    let mut peak = 0;
    for _ in 0..40 {
        tokio::time::sleep(Duration::from_millis(250)).await;
        peak = peak.max(process.resident_kib().saturating_sub(before));
    }
    peak
}

/// Another peer's greeting beside the flood, and the metrics after it
/// (their limit lines printed).
async fn other_peer_and_metrics(process: &Process) -> (Result<String, String>, String) {
    let legit = tokio::time::timeout(Duration::from_secs(5), process.tunnel_peer("c2"))
        .await
        .expect("the other peer in time");
    let metrics = process.metrics().await;
    for line in metrics.lines().filter(|l| {
        l.starts_with("strait_limited_total") || l.starts_with("strait_tunnel_requests_refused")
    }) {
        println!("  {line}");
    }
    (legit, metrics)
}

/// The other peer was served, the gateway stayed under its 512 MiB limit
/// (`peak_kib` resident at most), and the memory budget refused or closed
/// some of the flood.
fn assert_bounded(legit: &Result<String, String>, metrics: &str, peak_kib: u64) {
    assert!(
        legit.as_ref().is_ok_and(|g| g.starts_with("c3-echo")),
        "{legit:?}"
    );
    let peak_mib = peak_kib / 1024;
    assert!(
        peak_mib < 512,
        "the gateway reached {peak_mib} MiB, past its memory limit (512 MiB)"
    );
    let memory = metric(
        metrics,
        "strait_limited_total{limit=\"memory\",transport=\"h2\"}",
    );
    assert!(memory > 0, "the memory budget refused or closed streams");
}

const UDP_ECHO: &str = "udpecho.app.svc.clusterset.local:53";

/// 2,000 `connect-udp` flows from one peer whose HTTP/2 connections grant
/// no receive window (the gateway can send it nothing), each sending 2 MiB
/// of datagrams to a UDP backend that answers every one, to a gateway
/// limited to 512 MiB. A flow is charged its window and a copy buffer for
/// its life: past the caller's budget new flows are refused, and the
/// admitted ones never buffer what the peer sends while their answers wait
/// (each direction is read on its own; a blocked send ends the flow after
/// the stall timeout). The process stays under its limit and another peer
/// is still served. Before, the pump stopped reading while an answer
/// waited, and the peer's datagrams piled up to the window, uncharged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_cannot_make_the_gateway_buffer_udp_flows_past_its_budget() {
    let _serial = SERIAL.lock().await;
    super::handshakes::raise_own_descriptor_limit();
    let process = Process::start(
        "  transport: auto\n  streamStallTimeout: 3s\ntuning:\n  memoryLimit: 512Mi\n",
    )
    .await;
    let before = process.resident_kib();
    let mut connections = Vec::new();
    for _ in 0..2 {
        // The gateway may send this peer nothing at all on a stream.
        let send = process.h2_with_window("c1", 0).await;
        // Once the gateway's SETTINGS have arrived.
        let offered = Instant::now();
        while !send.is_extended_connect_protocol_enabled() {
            assert!(
                offered.elapsed() < Duration::from_secs(5),
                "connect-udp is offered"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        connections.push(send);
    }
    // 2 MiB of capsules, each a 1,200-byte datagram.
    let mut capsules = Vec::with_capacity(PER_STREAM + 2_048);
    let datagram = strait::tunnel::capsule::encode(&[7u8; 1_200]);
    while capsules.len() < PER_STREAM {
        capsules.extend_from_slice(&datagram);
    }
    let payload = bytes::Bytes::from(capsules);
    let mut flows = Vec::new();
    let mut refused = 0usize;
    for index in 0..STREAMS {
        let send = &mut connections[index % 2];
        let request = http::Request::builder()
            .method(http::Method::CONNECT)
            .uri(format!("https://{UDP_ECHO}/"))
            .extension(h2::ext::Protocol::from_static("connect-udp"))
            .body(())
            .expect("request");
        let Ok((response, mut upload)) = send.send_request(request, false) else {
            refused += 1;
            continue;
        };
        let payload = payload.clone();
        flows.push(tokio::spawn(async move {
            let response = response.await.map_err(|e| e.to_string())?;
            if response.status() != 200 {
                return Err(format!("status {}", response.status()));
            }
            upload.reserve_capacity(payload.len());
            upload
                .send_data(payload, false)
                .map_err(|e| e.to_string())?;
            // Held, and never read: no window for the answers.
            let _body = response.into_body();
            std::future::pending::<()>().await;
            Ok::<(), String>(())
        }));
    }
    let peak = watch_peak(&process, before).await;
    let ended = flows.iter().filter(|flow| flow.is_finished()).count();
    let (legit, metrics) = other_peer_and_metrics(&process).await;
    println!(
        "MEMORY (UDP): {STREAMS} connect-udp flows x 2 MiB to an echo, answers never read: gateway from {} MiB, peak +{} MiB; \
         {ended} flows refused or ended, {refused} not sent; other peer: {legit:?}",
        before / 1024,
        peak / 1024,
    );
    assert_bounded(&legit, &metrics, before + peak);
    assert!(
        ended >= 1_000,
        "most flows were refused or ended, not held: {ended}"
    );
    for flow in flows {
        flow.abort();
    }
}

/// The gateway turns transparent huge pages off for itself: mimalloc asks
/// for them on what it maps, and a 2 MiB page behind a few touched bytes
/// cost every idle connection 1.5–2 KiB (docs/performance.md). The
/// kernel's own account of the process says so (`THP_enabled: 0`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_runs_without_transparent_huge_pages() {
    let _serial = SERIAL.lock().await;
    let process = Process::start("  transport: auto\n").await;
    let status = std::fs::read_to_string(format!("/proc/{}/status", process.pid()))
        .expect("the gateway's /proc status");
    let Some(line) = status.lines().find(|line| line.starts_with("THP_enabled:")) else {
        eprintln!(
            "SKIPPED: the_gateway_runs_without_transparent_huge_pages: this kernel's /proc/PID/status has no THP_enabled line"
        );
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "under CI=true the kernel must say whether THP is enabled"
        );
        return;
    };
    assert_eq!(line.split_whitespace().nth(1), Some("0"), "{line}");
}
