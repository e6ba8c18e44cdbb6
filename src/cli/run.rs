//! `strait run`: one gateway, until SIGTERM or Ctrl-C, then a bounded drain.
//! Routes come from the configuration directory or, with `--kube` (or
//! `kube.enabled`), from the clusters' API servers.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use std::sync::Arc;

use crate::controller::Controller;
use crate::discovery::kube::KubeHandle;
use crate::gateway::{Gateway, GatewayOptions, Listeners};

use super::Refused;
use super::load::SourceArgs;

/// Longest wait for the export status Lease to be released at shutdown.
const LEASE_RELEASE_TIMEOUT: Duration = Duration::from_secs(2);

/// Command-line overrides of `gateway.yaml`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub source: SourceArgs,
    /// The cluster this gateway serves (default: gateway.yaml's cluster, or
    /// with --kube the local cluster's id).
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
    /// Answer the clusterset.local zone over DNS (UDP and TCP) on this
    /// address (default: gateway.yaml's listeners.dns; none: no DNS).
    #[arg(long, value_name = "ADDR")]
    pub dns_listen: Option<SocketAddr>,
    /// Holds tls.crt, tls.key and ca.crt (default: gateway.yaml's tls.dir).
    #[arg(long, value_name = "DIR")]
    pub tls_dir: Option<PathBuf>,
    /// How long open connections may take to finish after SIGTERM.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = humantime::parse_duration)]
    pub drain_timeout: Duration,
    /// Write the Valid and Conflict conditions on the local cluster's
    /// ServiceExports (needs --kube; one replica writes, elected by a Lease
    /// in $POD_NAMESPACE). Same as gateway.yaml's kube.writeExportStatus.
    #[arg(long)]
    pub write_export_status: bool,
    /// Act as the local cluster's MCS controller: write the ServiceImports,
    /// derived Services and their EndpointSlices (needs --kube; one replica
    /// writes, elected by the same Lease). Same as kube.manageImports.
    #[arg(long)]
    pub manage_imports: bool,
}

/// Reads gateway.yaml and applies the flags over it.
pub(super) fn options(args: &RunArgs) -> Result<GatewayOptions, Refused> {
    let mut settings = args.source.settings()?;
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
    if let Some(address) = args.dns_listen {
        listeners.dns = Some(address);
    }
    if let Some(dir) = &args.tls_dir {
        settings.tls.dir = dir.clone();
    }
    if args.write_export_status {
        settings.kube.write_export_status = true;
    }
    if args.manage_imports {
        settings.kube.manage_imports = true;
    }
    if settings.kube.manage_imports && !args.source.uses_kube(&settings) {
        return Err(Refused(
            "--manage-imports (kube.manageImports) needs the Kubernetes source: pass --kube"
                .to_owned(),
        ));
    }
    if settings.kube.write_export_status && !args.source.uses_kube(&settings) {
        return Err(Refused(
            "--write-export-status (kube.writeExportStatus) needs the Kubernetes source: pass --kube".to_owned(),
        ));
    }
    let cluster = args.cluster.clone().or_else(|| settings.cluster.clone());
    if cluster.is_none() && !args.source.uses_kube(&settings) {
        return Err(Refused(
            "no cluster: pass --cluster ID or set `cluster` in gateway.yaml".to_owned(),
        ));
    }
    Ok(GatewayOptions {
        config_dir: args.source.config.clone().unwrap_or_default(),
        tls_dir: settings.tls.dir.clone(),
        tunnel: settings.tunnel.settings(),
        settings,
        cluster: cluster.unwrap_or_default(),
        dial_source: None,
        overrides: Default::default(),
        kube: None,
        controller: None,
    })
}

/// Starts the Kubernetes source and waits (up to `--kube-timeout`) for
/// every cluster to sync or fail once; the gateway then starts with what
/// is known, and clusters that come later are added by reloads.
async fn start_kube(args: &RunArgs, options: &mut GatewayOptions) -> Result<(), Refused> {
    if options.settings.networks.is_none() {
        tracing::error!(
            "gateway.yaml sets no `networks` (the network map): every member's network is its own word, so \
             this gateway's tunnel server dials only its own cluster's backends for peers, \
             `strait.dev/allowed-networks` admits no one, and a cluster sharing this network is reached only \
             through its own gateways; write the map to attest each cluster's network (docs/security.md, \
             \"Networks are attested, not claimed\")"
        );
    }
    let writes = options.settings.controller_options();
    let mut reads = options.settings.kube_options();
    writes.request_inputs(&mut reads);
    let handle = KubeHandle::start(reads)
        .await
        .map_err(|e| Refused(e.to_string()))?;
    // The controller follows the source's snapshots from the first one; it
    // writes nothing before every cluster has synced or failed once.
    options.controller = Controller::start(writes, &handle).map(Arc::new);
    // The peers read from their feed (`kube.peers`) sync once the
    // gateway runs their followers: not waited for here.
    let snapshot = handle
        .wait_for(args.source.kube_timeout, |s| s.api_synced())
        .await;
    for cluster in snapshot.clusters.iter().filter(|c| c.last_error.is_some()) {
        tracing::warn!(cluster = %cluster.source, error = cluster.last_error.as_deref().unwrap_or(""),
            state = ?cluster.state, "cluster not synced at start");
    }
    if options.cluster.is_empty() {
        options.cluster = snapshot.local.clone().ok_or_else(|| {
            Refused(
                "no cluster: the local cluster has no cluster.clusterset.k8s.io ClusterProperty yet; pass --cluster ID".to_owned(),
            )
        })?;
    }
    options.kube = Some(handle);
    Ok(())
}

pub(super) fn run(args: &RunArgs) -> Result<(), Refused> {
    let mut options = options(args)?;
    let runtime = super::runtime()?;
    runtime.block_on(async {
        if args.source.uses_kube(&options.settings) {
            start_kube(args, &mut options).await?;
        } else if !options.settings.kube.peers.is_empty() {
            // Peers join a set read from the API servers; from files
            // there is none for them to join.
            tracing::warn!(
                peers = options.settings.kube.peers.len(),
                "kube.peers is set, but the cluster set is read from files (no --kube, kube.enabled false): the peers are not followed"
            );
        }
        let listeners = Listeners::bind(&options.settings)
            .await
            .map_err(|e| Refused(e.to_string()))?;
        let controller = options.controller.clone();
        let gateway = Gateway::start(options, listeners)
            .await
            .map_err(|e| Refused(e.to_string()))?;
        shutdown_signal().await;
        tracing::info!("shutting down");
        // Hand the export status Lease over first: another replica writes
        // while this one drains.
        if let Some(controller) = &controller {
            controller.release_leadership(LEASE_RELEASE_TIMEOUT).await;
        }
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
