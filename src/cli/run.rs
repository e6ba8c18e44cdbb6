//! `strait run`: one gateway, until SIGTERM or Ctrl-C, then a bounded drain.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::config::GatewaySettings;
use crate::gateway::{Gateway, GatewayOptions, Listeners};
use crate::tunnel::TunnelSettings;

use super::Refused;

/// Command-line overrides of `gateway.yaml`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// The configuration directory (holds clusters/ and gateway.yaml).
    #[arg(long, value_name = "DIR")]
    pub config: PathBuf,
    /// The cluster this gateway serves (default: gateway.yaml's cluster).
    #[arg(long, value_name = "ID")]
    pub cluster: Option<String>,
    #[arg(long, value_name = "ADDR")]
    pub connect_listen: Option<SocketAddr>,
    #[arg(long, value_name = "ADDR")]
    pub tunnel_listen: Option<SocketAddr>,
    #[arg(long, value_name = "ADDR")]
    pub admin_listen: Option<SocketAddr>,
    /// ClusterSetIP listener (repeatable; replaces gateway.yaml's list).
    #[arg(long, value_name = "ADDR")]
    pub cluster_set_ip_listen: Vec<SocketAddr>,
    /// Holds tls.crt, tls.key and ca.crt (default: gateway.yaml's tls.dir).
    #[arg(long, value_name = "DIR")]
    pub tls_dir: Option<PathBuf>,
    /// How long open connections may take to finish after SIGTERM.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = humantime::parse_duration)]
    pub drain_timeout: Duration,
}

/// Reads gateway.yaml and applies the flags over it.
pub(super) fn options(args: &RunArgs) -> Result<GatewayOptions, Refused> {
    let mut settings = GatewaySettings::load(&args.config).map_err(|e| Refused(e.to_string()))?;
    let listeners = &mut settings.listeners;
    if let Some(address) = args.connect_listen {
        listeners.connect = address;
    }
    if let Some(address) = args.tunnel_listen {
        listeners.tunnel = address;
    }
    if let Some(address) = args.admin_listen {
        listeners.admin = address;
    }
    if !args.cluster_set_ip_listen.is_empty() {
        listeners.cluster_set_ip = args.cluster_set_ip_listen.clone();
    }
    if let Some(dir) = &args.tls_dir {
        settings.tls.dir = dir.clone();
    }
    let cluster = args
        .cluster
        .clone()
        .or_else(|| settings.cluster.clone())
        .ok_or_else(|| {
            Refused("no cluster: pass --cluster ID or set `cluster` in gateway.yaml".to_owned())
        })?;
    Ok(GatewayOptions {
        config_dir: args.config.clone(),
        tls_dir: settings.tls.dir.clone(),
        settings,
        cluster,
        dial_source: None,
        overrides: Default::default(),
        tunnel: TunnelSettings::default(),
    })
}

pub(super) fn run(args: &RunArgs) -> Result<(), Refused> {
    let options = options(args)?;
    let runtime = super::runtime()?;
    runtime.block_on(async {
        let listeners = Listeners::bind(&options.settings)
            .await
            .map_err(|e| Refused(e.to_string()))?;
        let gateway = Gateway::start(options, listeners)
            .await
            .map_err(|e| Refused(e.to_string()))?;
        shutdown_signal().await;
        tracing::info!("shutting down");
        gateway.shutdown(args.drain_timeout).await;
        Ok(())
    })
}

/// Resolves on SIGTERM (how Kubernetes stops a pod) or Ctrl-C.
pub(super) async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut terminate) => {
                tokio::select! {
                    _ = terminate.recv() => {},
                    _ = tokio::signal::ctrl_c() => {},
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
