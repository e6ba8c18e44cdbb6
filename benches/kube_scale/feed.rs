//! `--feed`: `c00` reads no other cluster's API server. Each other cluster
//! runs its own gateway (`strait run --kube` against its own server), which
//! serves its exported state over the tunnel; `c00` follows every one of
//! them as a peer (`kube.peers`), and each follows `c00` back, as a cluster
//! set linked by feed runs.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;
use std::time::{Duration, Instant};

use super::kube_api::ApiServer;
use super::topology::GatewayPorts;
use super::{Gateway, NETWORKS, READY_LIMIT, Result, cluster_id, get, spawn_strait};

/// Starts a gateway per cluster but `c00` (whose tunnel is `c00_tunnel`),
/// each reading its own server and following `c00`'s feed; returns them
/// and the `kube.peers` lines of `c00`'s `gateway.yaml` naming them.
pub(crate) fn spawn_peers(
    dir: &Path,
    servers: &[ApiServer],
    debounce: &str,
    c00_tunnel: SocketAddr,
) -> Result<(Vec<Gateway>, String)> {
    let mut peers = String::from("  peers:\n");
    let mut gateways = Vec::new();
    for (cluster, server) in servers.iter().enumerate().skip(1) {
        let id = cluster_id(cluster);
        let ports = GatewayPorts::pick(Ipv4Addr::LOCALHOST.into())?;
        let config = dir.join(format!("config-{id}"));
        std::fs::create_dir_all(&config).map_err(|e| e.to_string())?;
        std::fs::write(
            config.join("gateway.yaml"),
            format!(
                "kube:\n  peers:\n  - cluster: c00\n    network: net-0\n    gateways: [\"{c00_tunnel}\"]\ntuning:\n  reloadDebounce: {debounce}\n"
            ),
        )
        .map_err(|e| e.to_string())?;
        let kubeconfig = server.write_kubeconfig(dir, &id);
        let tls = dir.join("certs").join(&id);
        let name = format!("gateway-{id}");
        gateways.push(spawn_strait(
            dir,
            &name,
            &config,
            &kubeconfig,
            &tls,
            &ports,
            false,
        )?);
        peers.push_str(&format!(
            "  - cluster: {id}\n    network: net-{}\n    gateways: [\"{}\"]\n",
            cluster % NETWORKS,
            ports.tunnel
        ));
    }
    Ok((gateways, peers))
}

/// Waits until `c00`'s `/debug/clusters` shows each of `peers` feeds
/// synced: the time since `since`.
pub(crate) fn wait_feeds_synced(
    admin: SocketAddr,
    peers: usize,
    since: Instant,
) -> Result<Duration> {
    loop {
        let (_, body) = get(admin, "/debug/clusters")?;
        let clusters: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
        let synced = clusters["clusters"].as_array().map_or(0, |clusters| {
            clusters
                .iter()
                .filter(|c| c["feed"] == true && c["state"] == "synced")
                .count()
        });
        if synced == peers {
            return Ok(since.elapsed());
        }
        if since.elapsed() > READY_LIMIT {
            return Err(format!(
                "{synced} of {peers} feeds synced after {READY_LIMIT:?}"
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
