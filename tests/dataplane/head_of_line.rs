//! Connections whose clients stopped reading must not stop the others that
//! share their tunnel connection. Each tunnelled connection is one stream of
//! a pooled HTTP/2 (or QUIC) connection; what a stream receives and cannot
//! pass on (its client does not read) holds its flow-control credit, and
//! when the credit held by such streams adds up to the connection's whole
//! window, no other stream on that connection receives a byte again, for as
//! long as those clients do not read: a silent, unbounded stall.

use super::*;

/// Clients that write and never read, each to its own tunnelled
/// connection to an echo pod: more than a connection window's worth of
/// stream windows between them.
const STUCK: usize = 12;
/// What each stuck client tries to write: beyond its stream window, the
/// sockets' buffers and the splice's chunk, so it blocks with its stream's
/// credit all held.
const STUCK_BYTES: usize = 12 * 1024 * 1024;

pub(super) async fn stuck_readers_do_not_stall_the_other_streams_of_their_connection(
    transport: TransportMode,
) {
    let (world, _backends) = World::with_one_c3_echo_pod(transport).await;
    let authority = "echo.app.svc.clusterset.local:42";

    // The stuck clients: each writes until the echo of what it wrote fills
    // every buffer on the way back to it, and then its writes block.
    let written = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut stuck = Vec::new();
    for client in 0..STUCK {
        let connected = within(connect(world.connect_address(1), authority), || {
            format!("stuck client {client}: CONNECT and greeting")
        })
        .await;
        assert_eq!(connected.status, 200);
        let stream = connected.stream.expect("an open stream");
        let written = written.clone();
        stuck.push(tokio::spawn(async move {
            let mut stream = stream;
            let chunk = vec![7u8; 64 * 1024];
            for _ in 0..STUCK_BYTES / chunk.len() {
                if stream.get_mut().write_all(&chunk).await.is_err() {
                    break;
                }
                written.fetch_add(chunk.len(), std::sync::atomic::Ordering::Relaxed);
            }
            // Held open, never read, until the test ends.
            std::future::pending::<()>().await;
            drop(stream);
        }));
    }
    // Until the stuck clients' writes have stopped moving.
    let mut last = 0;
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = written.load(std::sync::atomic::Ordering::Relaxed);
        if now == last {
            break;
        }
        last = now;
    }

    // A fresh connection on the same tunnel connection still echoes.
    for round in 0..3 {
        let connected = within(connect(world.connect_address(1), authority), || {
            format!("round {round}: CONNECT and greeting beside {STUCK} stuck clients")
        })
        .await;
        assert_eq!(connected.status, 200);
        let payload = vec![round as u8; 1024];
        let stream = connected.stream.expect("an open stream");
        let echoed = within(echo(stream, &payload), || {
            format!(
                "round {round}: echo beside {STUCK} stuck clients ({last} bytes written by them)"
            )
        })
        .await;
        assert_eq!(echoed, payload, "round {round}");
    }

    // The stuck connections are seen while they last: each gateway's stall
    // watch (`tuning.stallReport`, 1 s here) counts them as stalled, c1's
    // outbound ones and c3's inbound streams alike, without closing them.
    let stalled = |gateway: usize, path: &str| {
        let metrics = world.gateways[gateway].state().metrics.encode();
        let series = format!("strait_connections_stalled{{path=\"{path}\"}} ");
        metrics
            .lines()
            .find_map(|line| line.strip_prefix(series.as_str()))
            .and_then(|value| value.trim().parse::<i64>().ok())
            .unwrap_or(0)
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while (stalled(0, "tunnel") == 0 || stalled(2, "inbound") == 0)
        && tokio::time::Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (outbound, inbound) = (stalled(0, "tunnel"), stalled(2, "inbound"));
    assert!(
        (1..=STUCK as i64).contains(&outbound) && (1..=STUCK as i64).contains(&inbound),
        "stalled now: c1 tunnel {outbound}, c3 inbound {inbound} (of {STUCK} stuck clients)"
    );

    // Once the stuck clients go, so do their stalls.
    for task in stuck {
        task.abort();
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while (stalled(0, "tunnel") != 0 || stalled(2, "inbound") != 0)
        && tokio::time::Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        (stalled(0, "tunnel"), stalled(2, "inbound")),
        (0, 0),
        "stalls left after the stuck clients closed"
    );
}

/// `future`'s output, or a panic naming `what` after 5 s.
async fn within<T>(future: impl std::future::Future<Output = T>, what: impl Fn() -> String) -> T {
    match tokio::time::timeout(Duration::from_secs(5), future).await {
        Ok(output) => output,
        Err(_) => panic!("{}: nothing within 5 s", what()),
    }
}
