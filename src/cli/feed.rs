//! `strait feed`: read a peer gateway's exported-state feed over the
//! tunnel, as this cluster's gateway (its certificate), and print each
//! message as one JSON line: what that cluster tells this one about
//! itself (docs/tunnel-protocol.md §10).

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::admin::metrics::Metrics;
use crate::feed::{FEED_PATH, FeedLimits, Follower, Message};
use crate::model::{ClusterId, GatewayAddress};
use crate::net::dial::DialOptions;
use crate::tls::ReloadingTls;
use crate::tunnel::TunnelSettings;
use crate::tunnel::client::TunnelPool;
use crate::tunnel::quic::client::QuicPool;

use super::{Refused, emit};

#[derive(Debug, clap::Args)]
pub struct FeedArgs {
    /// The peer gateway's tunnel address (`host:port`).
    #[arg(long, value_name = "HOST:PORT")]
    pub peer: String,
    /// The cluster the peer must be: its certificate and its feed must name it.
    #[arg(long, value_name = "ID")]
    pub cluster: String,
    /// This gateway's certificate, key and CA bundle (`tls.crt`, `tls.key`, `ca.crt`).
    #[arg(long, value_name = "DIR")]
    pub tls_dir: PathBuf,
    /// Keep reading after the first complete state (changes and heartbeats).
    #[arg(long)]
    pub follow: bool,
    /// Give up when the feed says nothing (not even a heartbeat) this long.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = humantime::parse_duration)]
    pub stall: Duration,
    /// Read it over HTTP/2 (on TCP) or QUIC (on UDP), the tunnel port's two
    /// transports.
    #[arg(long, value_enum, default_value_t = FeedTransport::H2)]
    pub transport: FeedTransport,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum FeedTransport {
    H2,
    Quic,
}

/// Prints the feed until its first `synced` (or, with `--follow`, until
/// it ends); a refusal or a broken rule is the error.
pub(super) fn run(args: &FeedArgs, out: &mut dyn Write) -> Result<(), Refused> {
    let gateway: GatewayAddress = args
        .peer
        .parse()
        .map_err(|e| Refused(format!("--peer {e}")))?;
    let cluster = ClusterId::new(&args.cluster)
        .map_err(|e| Refused(format!("--cluster {:?}: {e}", args.cluster)))?;
    let tls = ReloadingTls::load(&args.tls_dir)
        .map_err(|e| Refused(format!("--tls-dir {}: {e}", args.tls_dir.display())))?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Refused(format!("cannot start the runtime: {e}")))?;
    runtime.block_on(async {
        let (tls, metrics) = (Arc::new(tls), Arc::new(Metrics::default()));
        let allowed = std::slice::from_ref(&cluster);
        let opened = match args.transport {
            FeedTransport::H2 => {
                let pool = TunnelPool::new(
                    TunnelSettings::default(),
                    tls,
                    DialOptions {
                        timeout: Duration::from_secs(10),
                        source: None,
                    },
                    metrics,
                );
                pool.feed(&gateway, allowed, FEED_PATH).await
            }
            FeedTransport::Quic => {
                let any = match &gateway.host {
                    crate::model::GatewayHost::Ip(ip) if ip.is_ipv6() => "[::]:0",
                    _ => "0.0.0.0:0",
                };
                let bind = any.parse().map_err(|e| Refused(format!("{any}: {e}")))?;
                let pool = QuicPool::new(bind, tls, TunnelSettings::default(), metrics)
                    .map_err(|e| Refused(format!("cannot open a QUIC endpoint: {e}")))?;
                pool.feed(&gateway, allowed, FEED_PATH).await
            }
        };
        let stream =
            opened.map_err(|e| Refused(format!("cannot read the feed of {}: {e}", args.peer)))?;
        let limits = FeedLimits::default();
        let mut follower = Follower::new(cluster, limits);
        let mut written: Result<(), Refused> = Ok(());
        let read = crate::tunnel::feed::read(
            stream,
            &mut follower,
            limits.max_message_bytes,
            args.stall,
            |message: &Message| {
                if written.is_ok() {
                    let line = serde_json::to_string(message).unwrap_or_default();
                    written = emit(out, &format!("{line}\n"));
                }
            },
            |_, _| args.follow,
        )
        .await;
        written?;
        read.map_err(|e| Refused(format!("the feed of {} failed: {e}", args.peer)))
    })
}
