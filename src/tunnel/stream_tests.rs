//! H2Stream over a real HTTP/2 connection (client and server in memory):
//! bytes both ways, byte for byte through a splice, half-closes as
//! END_STREAM, and a reset as an error.

use super::*;
use crate::net::buffer::BUFFER_SIZE;
use crate::net::splice::{SpliceEnd, splice};
use http::{Method, Request, Response};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt, duplex};

/// A CONNECT stream's two ends: (client side, server side).
async fn stream_pair() -> (H2Stream, H2Stream) {
    let (client_io, server_io) = duplex(256 * 1024);
    let server = tokio::spawn(async move {
        let mut connection = h2::server::Builder::new()
            .initial_window_size(1024 * 1024)
            .handshake::<_, Chunk>(server_io)
            .await
            .expect("server handshake");
        let (request, mut respond) = connection
            .accept()
            .await
            .expect("a request")
            .expect("a good request");
        assert_eq!(request.method(), Method::CONNECT);
        let send = respond
            .send_response(Response::new(()), false)
            .expect("respond");
        let stream = H2Stream::new(send, request.into_body());
        // Keep driving the connection.
        tokio::spawn(async move { while connection.accept().await.is_some() {} });
        stream
    });
    let (sender, connection) = h2::client::Builder::new()
        .initial_window_size(1024 * 1024)
        .handshake::<_, Chunk>(client_io)
        .await
        .expect("client handshake");
    tokio::spawn(async move {
        let _ = connection.await;
    });
    let mut sender = sender.ready().await.expect("ready");
    let request = Request::builder()
        .method(Method::CONNECT)
        .uri("10.0.0.1:80")
        .body(())
        .expect("request");
    let (response, send) = sender.send_request(request, false).expect("send");
    let response = response.await.expect("response");
    let client = H2Stream::new(send, response.into_body());
    (client, server.await.expect("server task"))
}

#[tokio::test]
async fn bytes_cross_both_ways_and_end_stream_is_a_half_close() {
    let (mut client, mut server) = stream_pair().await;
    client.write_all(b"ping").await.expect("write");
    client.shutdown().await.expect("half-close");
    let mut got = Vec::new();
    server
        .read_to_end(&mut got)
        .await
        .expect("read to END_STREAM");
    assert_eq!(got, b"ping");
    // The other direction still flows.
    server.write_all(b"pong").await.expect("write");
    server.shutdown().await.expect("close");
    let mut got = Vec::new();
    client.read_to_end(&mut got).await.expect("read");
    assert_eq!(got, b"pong");
}

#[tokio::test]
async fn a_splice_moves_chunks_through_byte_for_byte() {
    let (client, server) = stream_pair().await;
    // Server end spliced to a "backend" that echoes what it reads.
    let (backend_end, mut backend) = duplex(64 * 1024);
    let relay = tokio::spawn(splice(server, backend_end, Duration::from_secs(30)));
    let echo = tokio::spawn(async move {
        let mut buf = vec![0u8; 10_000];
        loop {
            let n = backend.read(&mut buf).await.expect("backend read");
            if n == 0 {
                backend.shutdown().await.expect("backend close");
                return;
            }
            backend.write_all(&buf[..n]).await.expect("backend write");
        }
    });
    // The client end spliced to a local socket, as the tunnel client does.
    let (local_end, local) = duplex(64 * 1024);
    let client_relay = tokio::spawn(splice(local_end, client, Duration::from_secs(30)));
    let size = 5 * BUFFER_SIZE + 777;
    let sent: Vec<u8> = (0..size).map(|i| (i % 253) as u8).collect();
    let (mut reader, mut writer) = tokio::io::split(local);
    let write = {
        let sent = sent.clone();
        async move {
            writer.write_all(&sent).await.expect("write");
            writer.shutdown().await.expect("shutdown");
        }
    };
    let mut received = Vec::new();
    let ((), read) = tokio::join!(write, reader.read_to_end(&mut received));
    read.expect("read");
    assert!(received == sent, "echo differs");
    echo.await.expect("echo task");
    for outcome in [
        relay.await.expect("relay"),
        client_relay.await.expect("relay"),
    ] {
        assert!(
            matches!(outcome.end, SpliceEnd::Closed),
            "{:?}",
            outcome.end
        );
        assert_eq!(outcome.client_to_backend, size as u64);
        assert_eq!(outcome.backend_to_client, size as u64);
    }
}

#[tokio::test]
async fn a_reset_is_an_error_for_the_other_end() {
    let (mut client, server) = stream_pair().await;
    let H2Stream { mut send, .. } = server;
    send.send_reset(Reason::REFUSED_STREAM);
    let mut buf = [0u8; 8];
    let error = client.read(&mut buf).await.expect_err("reset");
    assert_eq!(error.kind(), io::ErrorKind::Other, "{error}");
}

#[tokio::test]
async fn a_small_lent_chunk_is_copied_and_its_buffer_stays_with_the_splice() {
    let (mut client, mut server) = stream_pair().await;
    let mut buffer = crate::net::buffer::Buffer::take();
    buffer[..4].copy_from_slice(b"ping");
    let mut slot = Some(Chunk::lent(buffer, 4));
    let sent = std::future::poll_fn(|cx| client.poll_send(cx, &mut slot))
        .await
        .expect("send");
    assert_eq!(sent, 4);
    assert!(
        matches!(
            &slot,
            Some(Chunk::Lent {
                start: 4,
                end: 4,
                ..
            })
        ),
        "the emptied buffer is still the splice's"
    );
    let mut got = [0u8; 4];
    server.read_exact(&mut got).await.expect("read");
    assert_eq!(&got, b"ping");
}

#[tokio::test]
async fn a_full_lent_chunk_is_handed_to_h2_without_a_copy() {
    let (mut client, mut server) = stream_pair().await;
    let mut buffer = crate::net::buffer::Buffer::take();
    buffer.fill(7);
    let mut slot = Some(Chunk::lent(buffer, BUFFER_SIZE));
    let sent = std::future::poll_fn(|cx| client.poll_send(cx, &mut slot))
        .await
        .expect("send");
    assert_eq!(sent, BUFFER_SIZE);
    assert!(slot.is_none(), "h2 owns the buffer until it is written");
    let mut got = vec![0u8; BUFFER_SIZE];
    server.read_exact(&mut got).await.expect("read");
    assert!(got.iter().all(|&b| b == 7));
}
