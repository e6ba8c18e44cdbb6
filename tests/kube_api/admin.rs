//! A gateway's admin listener, as the kube tests read it: plain HTTP/1.1
//! GETs, polled until the body says what a test waits for.

use std::net::SocketAddr;
use std::time::Duration;

/// How long [`get_until`] waits before it fails the test.
const WAIT: Duration = Duration::from_secs(10);

/// GETs `path` from an admin listener; the body, or empty while the
/// listener cannot be reached (a gateway process still starting).
pub async fn get(admin: SocketAddr, path: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Ok(mut stream) = tokio::net::TcpStream::connect(admin).await else {
        return String::new();
    };
    let request = format!("GET {path} HTTP/1.1\r\nHost: admin\r\nConnection: close\r\n\r\n");
    if stream.write_all(request.as_bytes()).await.is_err() {
        return String::new();
    }
    let mut response = Vec::new();
    let _ = stream.read_to_end(&mut response).await;
    let response = String::from_utf8_lossy(&response).into_owned();
    response
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_owned())
        .unwrap_or_default()
}

/// Polls `path` until its body satisfies `done`; that body.
pub async fn get_until(
    admin: SocketAddr,
    path: &str,
    what: &str,
    done: impl Fn(&str) -> bool,
) -> String {
    let start = tokio::time::Instant::now();
    loop {
        let body = get(admin, path).await;
        if done(&body) {
            return body;
        }
        assert!(
            start.elapsed() < WAIT,
            "timed out waiting for {what} at {path}:\n{body}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The admin address in the "gateway ready" line of a `strait run` log.
pub fn admin_address(log: &std::path::Path) -> Option<std::net::SocketAddr> {
    ready_field(log, "admin")?.parse().ok()
}

/// A field (`admin`, `tunnel`, …) of the "gateway ready" line of a
/// `strait run` log.
pub fn ready_field(log: &std::path::Path, field: &str) -> Option<String> {
    let text = std::fs::read_to_string(log).ok()?;
    let line = text.lines().find(|l| l.contains("gateway ready"))?;
    // Without the terminal colours the log may carry.
    let mut plain = String::new();
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            chars.by_ref().find(|c| *c == 'm');
        } else {
            plain.push(c);
        }
    }
    Some(
        plain
            .split(&format!("{field}="))
            .nth(1)?
            .split_whitespace()
            .next()?
            .to_owned(),
    )
}
