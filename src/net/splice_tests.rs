use super::*;
use crate::net::buffer::BUFFER_SIZE;
use tokio::io::{AsyncReadExt, AsyncWriteExt, duplex};

#[tokio::test]
async fn half_close_is_passed_on_and_the_other_direction_keeps_flowing() {
    let (mut client, client_end) = duplex(1024);
    let (backend_end, mut backend) = duplex(1024);
    let splice = tokio::spawn(splice(client_end, backend_end, Duration::from_secs(5)));

    client.write_all(b"request").await.expect("write");
    client.shutdown().await.expect("half-close");
    let mut request = Vec::new();
    backend
        .read_to_end(&mut request)
        .await
        .expect("backend sees EOF");
    assert_eq!(request, b"request");

    // The client closed its sending half; it still receives.
    backend
        .write_all(b"response after half-close")
        .await
        .expect("write");
    backend.shutdown().await.expect("close");
    let mut response = Vec::new();
    client.read_to_end(&mut response).await.expect("read");
    assert_eq!(response, b"response after half-close");

    let outcome = splice.await.expect("splice task");
    assert!(
        matches!(outcome.end, SpliceEnd::Closed),
        "{:?}",
        outcome.end
    );
    assert_eq!(outcome.client_to_backend, 7);
    assert_eq!(outcome.backend_to_client, 25);
}

#[tokio::test(start_paused = true)]
async fn an_idle_splice_times_out_with_its_counts() {
    let (mut client, client_end) = duplex(1024);
    let (backend_end, mut backend) = duplex(1024);
    let splice = tokio::spawn(splice(client_end, backend_end, Duration::from_secs(30)));
    client.write_all(b"hello").await.expect("write");
    let mut buf = [0u8; 5];
    backend.read_exact(&mut buf).await.expect("read");
    let started = Instant::now();
    let outcome = splice.await.expect("splice task");
    assert!(
        matches!(outcome.end, SpliceEnd::IdleTimeout),
        "{:?}",
        outcome.end
    );
    assert_eq!(outcome.client_to_backend, 5);
    assert!(
        started.elapsed() >= Duration::from_secs(29),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test(start_paused = true)]
async fn traffic_in_either_direction_defers_the_idle_timeout() {
    let (mut client, client_end) = duplex(1024);
    let (backend_end, mut backend) = duplex(1024);
    let splice = tokio::spawn(splice(client_end, backend_end, Duration::from_secs(30)));
    let started = Instant::now();
    let mut byte = [0u8; 1];
    for _ in 0..4 {
        tokio::time::sleep(Duration::from_secs(20)).await;
        backend.write_all(b"x").await.expect("write");
        client.read_exact(&mut byte).await.expect("read");
    }
    let outcome = splice.await.expect("splice task");
    assert!(matches!(outcome.end, SpliceEnd::IdleTimeout));
    assert_eq!(outcome.backend_to_client, 4);
    // Last byte at 80 s, timeout 30 s after it.
    assert!(
        started.elapsed() >= Duration::from_secs(110),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn a_large_transfer_arrives_byte_for_byte_both_ways() {
    let (client, client_end) = duplex(7 * 1024);
    let (backend_end, backend) = duplex(5 * 1024);
    let splice = tokio::spawn(splice(client_end, backend_end, Duration::from_secs(30)));
    // Not a multiple of the buffer size, and not repeating with it.
    let size = 3 * BUFFER_SIZE + 12_345;
    let pattern = |seed: u8| -> Vec<u8> {
        (0..size)
            .map(|i| (i as u32).wrapping_mul(2_654_435_761).to_le_bytes()[0] ^ seed)
            .collect()
    };
    let (up, down) = (pattern(1), pattern(2));
    let exchange = |mut stream: tokio::io::DuplexStream, send: Vec<u8>| async move {
        let (mut reader, mut writer) = tokio::io::split(&mut stream);
        let write = async {
            writer.write_all(&send).await.expect("write");
            writer.shutdown().await.expect("shutdown");
        };
        let mut received = Vec::new();
        let read = reader.read_to_end(&mut received);
        let ((), read) = tokio::join!(write, read);
        read.expect("read");
        received
    };
    let (at_client, at_backend) = tokio::join!(
        exchange(client, up.clone()),
        exchange(backend, down.clone())
    );
    assert!(at_backend == up, "client → backend bytes differ");
    assert!(at_client == down, "backend → client bytes differ");
    let outcome = splice.await.expect("splice task");
    assert!(
        matches!(outcome.end, SpliceEnd::Closed),
        "{:?}",
        outcome.end
    );
    assert_eq!(outcome.client_to_backend, size as u64);
    assert_eq!(outcome.backend_to_client, size as u64);
}

#[tokio::test]
async fn an_error_keeps_the_counts() {
    let (mut client, client_end) = duplex(1024);
    let (backend_end, backend) = duplex(1024);
    let splice = tokio::spawn(splice(client_end, backend_end, Duration::from_secs(30)));
    drop(backend);
    // The backend is gone: writing what the client sends fails.
    client.write_all(b"lost").await.expect("write");
    let outcome = splice.await.expect("splice task");
    assert!(
        matches!(outcome.end, SpliceEnd::Error(_)),
        "{:?}",
        outcome.end
    );
    assert_eq!(outcome.client_to_backend, 4);
}

/// Polls one direction once, as the splice's task would.
fn poll_once(
    direction: &mut Direction,
    reader: &mut tokio::io::DuplexStream,
    writer: &mut tokio::io::DuplexStream,
) -> Poll<io::Result<()>> {
    let waker = std::task::Waker::noop();
    let mut cx = Context::from_waker(waker);
    direction.poll_copy(&mut cx, reader, writer)
}

#[tokio::test]
async fn a_direction_waiting_for_bytes_holds_no_buffer() {
    let (mut source, mut reader) = duplex(1024);
    let (mut writer, mut sink) = duplex(1024);
    let mut direction = Direction::default();

    assert!(poll_once(&mut direction, &mut reader, &mut writer).is_pending());
    assert!(!direction.holds_buffer(), "idle before any byte");

    source.write_all(b"ping").await.expect("write");
    assert!(poll_once(&mut direction, &mut reader, &mut writer).is_pending());
    assert!(!direction.holds_buffer(), "idle after copying");
    let mut got = [0u8; 4];
    sink.read_exact(&mut got).await.expect("read");
    assert_eq!(&got, b"ping");
    assert_eq!(direction.bytes, 4);
}

#[tokio::test]
async fn a_direction_blocked_on_its_writer_holds_its_buffer_until_drained() {
    let (mut source, mut reader) = duplex(64 * 1024);
    // The writer side takes 16 bytes before it blocks.
    let (mut writer, mut sink) = duplex(16);
    let mut direction = Direction::default();

    source.write_all(&[7u8; 100]).await.expect("write");
    assert!(poll_once(&mut direction, &mut reader, &mut writer).is_pending());
    assert!(direction.holds_buffer(), "84 bytes wait for the writer");

    let mut drained = Vec::new();
    while drained.len() < 100 {
        let mut chunk = [0u8; 64];
        let n = sink.read(&mut chunk).await.expect("read");
        drained.extend_from_slice(&chunk[..n]);
        let _ = poll_once(&mut direction, &mut reader, &mut writer);
    }
    assert_eq!(drained, vec![7u8; 100]);
    assert!(!direction.holds_buffer(), "everything written, reader idle");

    drop(source);
    assert!(poll_once(&mut direction, &mut reader, &mut writer).is_ready());
    assert!(direction.done && !direction.holds_buffer());
    let mut rest = Vec::new();
    sink.read_to_end(&mut rest)
        .await
        .expect("the end is passed on");
    assert!(rest.is_empty());
}

#[test]
fn a_splice_between_two_sockets_stays_small() {
    // This future lives as long as the connection: 2 sockets, 2 directions,
    // the timer's box, a time and the stall watch's samples. Growth here is
    // growth of every idle connection.
    let size = std::mem::size_of::<Splice<TcpStream, TcpStream>>();
    assert!(size <= 280, "Splice<TcpStream, TcpStream> is {size} bytes");
}

/// A client that stops reading while the backend has bytes for it (a peer
/// advertising a zero window) is cut off after the stall timeout, long
/// before the idle timeout; a client that is only quiet is not.
#[tokio::test(start_paused = true)]
async fn a_side_that_stops_reading_is_cut_off_after_the_stall_timeout() {
    // A 1-byte pipe to the client: it fills at once and nobody reads it.
    let (_client, client_end) = duplex(1);
    let (backend_end, mut backend) = duplex(BUFFER_SIZE);
    let stalled = tokio::spawn(
        splice(client_end, backend_end, Duration::from_secs(3600))
            .stall_timeout(Duration::from_secs(60)),
    );
    let started = Instant::now();
    backend.write_all(&[7u8; 4096]).await.expect("write");
    let outcome = stalled.await.expect("splice task");
    assert!(
        matches!(outcome.end, SpliceEnd::Stalled),
        "{:?}",
        outcome.end
    );
    let elapsed = started.elapsed();
    assert!(
        elapsed >= Duration::from_secs(60) && elapsed < Duration::from_secs(120),
        "{elapsed:?}"
    );

    // Quiet both ways, nothing held: only the idle timeout applies.
    let (_client, client_end) = duplex(1024);
    let (backend_end, _backend) = duplex(1024);
    let started = Instant::now();
    let outcome = splice(client_end, backend_end, Duration::from_secs(600))
        .stall_timeout(Duration::from_secs(60))
        .await;
    assert!(
        matches!(outcome.end, SpliceEnd::IdleTimeout),
        "{:?}",
        outcome.end
    );
    assert!(started.elapsed() >= Duration::from_secs(600));
}

/// What a [`StallWatch`] was told, shared with the test.
#[derive(Clone, Default)]
struct Recorded(std::sync::Arc<std::sync::Mutex<Vec<String>>>);

impl Recorded {
    fn events(&self) -> Vec<String> {
        self.0.lock().expect("not poisoned").clone()
    }
}

impl StallWatch for Recorded {
    fn stalled(&mut self, flow: Flow, held: usize) {
        let event = format!("stalled {} {held}", flow.as_str());
        self.0.lock().expect("not poisoned").push(event);
    }

    fn resumed(&mut self, stalled_for: Duration) {
        let event = format!("resumed after {}s", stalled_for.as_secs());
        self.0.lock().expect("not poisoned").push(event);
    }
}

impl MemoryCharge for Recorded {
    fn holding(&mut self, _holds: bool) -> bool {
        true
    }
}

/// What a [`MemoryCharge`] was asked, shared with the test; it refuses
/// every charge when `refuse`.
#[derive(Clone, Default)]
struct Charges {
    refuse: bool,
    asked: std::sync::Arc<std::sync::Mutex<Vec<bool>>>,
}

impl StallWatch for Charges {
    fn stalled(&mut self, _flow: Flow, _held: usize) {}
    fn resumed(&mut self, _stalled_for: Duration) {}
}

impl MemoryCharge for Charges {
    fn holding(&mut self, holds: bool) -> bool {
        self.asked.lock().expect("not poisoned").push(holds);
        !(holds && self.refuse)
    }
}

/// A connection whose writer keeps up is never charged; one whose writer
/// pushes back is charged while it holds bytes and released when it does
/// not; and a refused charge ends the splice.
#[tokio::test]
async fn a_splice_is_charged_only_while_it_holds_bytes() {
    let (mut client, client_end) = duplex(BUFFER_SIZE);
    let (backend_end, mut backend) = duplex(BUFFER_SIZE);
    let charges = Charges::default();
    let flowing = tokio::spawn(
        splice(client_end, backend_end, Duration::from_secs(3600))
            .watch(Duration::from_secs(10), charges.clone()),
    );
    client.write_all(b"hello").await.expect("write");
    let mut received = [0u8; 5];
    backend.read_exact(&mut received).await.expect("read");
    assert!(
        charges.asked.lock().expect("lock").is_empty(),
        "kept up: never charged"
    );

    // 16 bytes fit on the way to this backend, which reads nothing yet.
    drop((client, backend));
    let _ = flowing.await;
    let (mut client, client_end) = duplex(BUFFER_SIZE);
    let (backend_end, mut backend) = duplex(16);
    let charges = Charges::default();
    let slow = tokio::spawn(
        splice(client_end, backend_end, Duration::from_secs(3600))
            .watch(Duration::from_secs(10), charges.clone()),
    );
    client.write_all(&[7u8; 100]).await.expect("write");
    let mut received = [0u8; 100];
    backend.read_exact(&mut received).await.expect("read");
    drop((client, backend));
    let outcome = slow.await.expect("splice");
    assert!(matches!(
        outcome.end,
        SpliceEnd::Closed | SpliceEnd::Error(_)
    ));
    let asked = charges.asked.lock().expect("lock").clone();
    assert_eq!(
        asked.first(),
        Some(&true),
        "charged when pushed back: {asked:?}"
    );
    assert_eq!(asked.last(), Some(&false), "released in the end: {asked:?}");

    let (mut client, client_end) = duplex(BUFFER_SIZE);
    let (backend_end, _backend) = duplex(16);
    let refused = Charges {
        refuse: true,
        ..Charges::default()
    };
    let over = tokio::spawn(
        splice(client_end, backend_end, Duration::from_secs(3600))
            .watch(Duration::from_secs(10), refused),
    );
    client.write_all(&[7u8; 100]).await.expect("write");
    let outcome = tokio::time::timeout(Duration::from_secs(5), over)
        .await
        .expect("ended at once")
        .expect("splice");
    assert!(
        matches!(outcome.end, SpliceEnd::OverBudget),
        "{:?}",
        outcome.end
    );
}

/// A backend that takes none of the client's bytes is reported once,
/// within two watch periods, and again as moving once it reads; the splice
/// is not ended for it.
#[tokio::test(start_paused = true)]
async fn a_connection_that_holds_bytes_and_moves_none_is_reported_while_it_lasts() {
    let (mut client, client_end) = duplex(BUFFER_SIZE);
    // 16 bytes fit on the way to the backend; nobody reads them yet.
    let (backend_end, mut backend) = duplex(16);
    let recorded = Recorded::default();
    let watched = tokio::spawn(
        splice(client_end, backend_end, Duration::from_secs(3600))
            .watch(Duration::from_secs(10), recorded.clone()),
    );
    client.write_all(&[7u8; 100]).await.expect("write");
    tokio::time::sleep(Duration::from_secs(9)).await;
    assert!(recorded.events().is_empty(), "{:?}", recorded.events());
    tokio::time::sleep(Duration::from_secs(12)).await;
    assert_eq!(recorded.events(), ["stalled client_to_backend 84"]);
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(recorded.events().len(), 1, "reported once per stall");

    let mut received = [0u8; 100];
    backend.read_exact(&mut received).await.expect("read");
    assert_eq!(received, [7u8; 100]);
    tokio::task::yield_now().await;
    let events = recorded.events();
    assert_eq!(events.len(), 2, "{events:?}");
    assert!(events[1].starts_with("resumed after"), "{events:?}");
    assert!(!watched.is_finished(), "a stall is reported, not cut off");
}

/// A slow reader that takes some bytes every period is not stalled, and
/// a quiet connection holds nothing: neither is reported.
#[tokio::test(start_paused = true)]
async fn a_slow_or_quiet_connection_is_not_reported() {
    let (mut client, client_end) = duplex(BUFFER_SIZE);
    let (backend_end, mut backend) = duplex(16);
    let recorded = Recorded::default();
    let slow = tokio::spawn(
        splice(client_end, backend_end, Duration::from_secs(3600))
            .watch(Duration::from_secs(10), recorded.clone()),
    );
    client.write_all(&[7u8; 200]).await.expect("write");
    let mut byte = [0u8; 1];
    for _ in 0..40 {
        tokio::time::sleep(Duration::from_secs(4)).await;
        backend.read_exact(&mut byte).await.expect("read");
    }
    assert!(recorded.events().is_empty(), "{:?}", recorded.events());
    slow.abort();

    let (_client, client_end) = duplex(1024);
    let (backend_end, _backend) = duplex(1024);
    let quiet = splice(client_end, backend_end, Duration::from_secs(600))
        .watch(Duration::from_secs(10), recorded.clone());
    let outcome = quiet.await;
    assert!(matches!(outcome.end, SpliceEnd::IdleTimeout));
    assert!(recorded.events().is_empty(), "{:?}", recorded.events());
}
