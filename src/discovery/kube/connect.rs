//! The HTTP stack under every kube client Strait builds: bounded connects,
//! reads and writes, TCP keepalive, gzip-compressed responses bounded in
//! line length after decompression ([`LineBounded`]), and retries of
//! `429`/`503`/`504` that honour `Retry-After`.
//!
//! kube-rs's default stack has no read timeout (a half-open connection
//! hangs a list or a status write forever) and no TCP keepalive (a dead
//! pooled connection is found only when a request hangs on it), so the
//! stack is put together here from the same parts kube-rs uses
//! ([`ConfigExt`]), with those two added.

use std::time::Duration;

use hyper_timeout::TimeoutConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use kube::Client;
use kube::client::ConfigExt;
use kube::client::retry::RetryPolicy;
use tower::{BoxError, ServiceBuilder};
use tower_http::decompression::DecompressionLayer;

use super::bounded::LineBounded;

/// Longest wait for a TCP (and TLS) connection to an API server.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest wait for a request to be written.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// Idle time before the first keepalive probe of an API connection, the
/// time between probes, and how many go unanswered before the kernel
/// drops it: a dead peer is found within about 50 s, idle or not.
const KEEPALIVE_IDLE: Duration = Duration::from_secs(20);
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(10);
const KEEPALIVE_PROBES: u32 = 3;
/// Added to the watch timeout for the read timeout: a watch the server
/// ends on time never trips it, and the watcher's own idle timeout (the
/// watch timeout plus 5 s) notices a silent watch first.
const READ_TIMEOUT_MARGIN: Duration = Duration::from_secs(10);
/// Retries of a `429`, `503` or `504` answer: a few, soon, within
/// `Retry-After` when the server says how long.
const RETRY_FIRST: Duration = Duration::from_millis(100);
const RETRY_LONGEST: Duration = Duration::from_secs(10);
const RETRIES: u32 = 4;
/// The largest an API connection's read buffer grows.
const READ_BUFFER_MAX: usize = 64 * 1024;

/// The longest any one response may stay silent, for watches of
/// `watch_timeout`: lists, discovery and writes on a half-open connection
/// fail after this instead of hanging.
pub(super) fn read_timeout(watch_timeout: Duration) -> Duration {
    watch_timeout + READ_TIMEOUT_MARGIN
}

/// A client for `config` on Strait's HTTP stack.
pub(crate) fn build_client(
    mut config: kube::Config,
    watch_timeout: Duration,
) -> Result<Client, kube::Error> {
    config.connect_timeout = Some(CONNECT_TIMEOUT);
    config.read_timeout = Some(read_timeout(watch_timeout));
    config.write_timeout = Some(WRITE_TIMEOUT);
    let mut tcp = HttpConnector::new();
    // The TLS connector decides on the scheme; this one only connects.
    tcp.enforce_http(false);
    tcp.set_nodelay(true);
    tcp.set_keepalive(Some(KEEPALIVE_IDLE));
    tcp.set_keepalive_interval(Some(KEEPALIVE_INTERVAL));
    tcp.set_keepalive_retries(Some(KEEPALIVE_PROBES));
    let tls = config.rustls_https_connector_with_connector(tcp)?;
    let mut timed = TimeoutConnector::new(tls);
    timed.set_connect_timeout(config.connect_timeout);
    timed.set_read_timeout(config.read_timeout);
    timed.set_write_timeout(config.write_timeout);
    // The read timeout counts from the request, not from when a pooled
    // connection went idle.
    timed.set_reset_reader_on_write(true);
    // A connection's read buffer grows to this and keeps its size while
    // the connection lives: with hyper's default (about 400 KiB) the
    // watches of a large cluster set each held what their lists had grown
    // it to, idle.
    let http = hyper_util::client::legacy::Client::builder(TokioExecutor::new())
        .http1_max_buf_size(READ_BUFFER_MAX)
        .build(timed);
    let retry = RetryPolicy::new(RETRY_FIRST, RETRY_LONGEST, RETRIES, true)
        .map_err(|error| kube::Error::Service(Box::new(error)))?;
    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        // Outside the decompression: the bound counts inflated bytes.
        .map_response(|response: http::Response<_>| response.map(LineBounded::new))
        .layer(DecompressionLayer::new())
        .layer(tower::retry::RetryLayer::new(retry))
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .map_err(BoxError::from)
        .service(http);
    Ok(Client::new(service, config.default_namespace))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_read_timeout_outlasts_a_watch_and_the_watchers_idle_timeout() {
        let watch = Duration::from_secs(60);
        // kube-runtime's watcher gives up on a silent watch after the
        // watch timeout plus 5 s; the read timeout must not fire first.
        assert!(read_timeout(watch) > watch + Duration::from_secs(5));
    }

    #[tokio::test]
    async fn a_client_builds_for_http_and_https_servers() {
        for server in ["http://127.0.0.1:6443", "https://127.0.0.1:6443"] {
            let url = server.parse().expect("url");
            let config = kube::Config::new(url);
            build_client(config, Duration::from_secs(60)).expect("client builds");
        }
    }
}
