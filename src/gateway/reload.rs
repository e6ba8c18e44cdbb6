//! Watching the configuration directory: a change (debounced) rebuilds the
//! route table and swaps it in atomically; an invalid update is logged and
//! the last good routes stay. Open connections never notice a reload: they
//! hold their upstream, not the table.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use notify::{RecursiveMode, Watcher};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::state::GatewayState;
use super::{GatewayError, GatewayOptions, load_routes};
use crate::admin::metrics::{ReloadKind, ReloadResult};
use crate::routing::balancer::BackendId;

/// Starts watching `dir`; the returned task ends at `shutdown`.
pub(super) fn spawn(
    dir: PathBuf,
    options: GatewayOptions,
    state: Arc<GatewayState>,
    debounce: Duration,
    shutdown: CancellationToken,
) -> Result<JoinHandle<()>, GatewayError> {
    let (changed, mut changes) = tokio::sync::mpsc::channel::<()>(1);
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        if event.is_ok() {
            // A full channel already holds a pending change: nothing is lost.
            let _ = changed.try_send(());
        }
    })
    .map_err(|source| GatewayError::Watch {
        dir: dir.clone(),
        source,
    })?;
    watcher
        .watch(&dir, RecursiveMode::Recursive)
        .map_err(|source| GatewayError::Watch {
            dir: dir.clone(),
            source,
        })?;
    Ok(tokio::spawn(async move {
        // The watcher stops when dropped: keep it for the task's life.
        let _watcher = watcher;
        loop {
            tokio::select! {
                change = changes.recv() => if change.is_none() { return },
                () = shutdown.cancelled() => return,
            }
            // Let a burst of writes (an editor, a ConfigMap swap) settle.
            loop {
                tokio::select! {
                    _ = changes.recv() => continue,
                    () = tokio::time::sleep(debounce) => break,
                    () = shutdown.cancelled() => return,
                }
            }
            reload(&options, &state);
        }
    }))
}

/// Rebuilds the routes and swaps them in, or keeps the old ones.
pub(super) fn reload(options: &GatewayOptions, state: &GatewayState) {
    match load_routes(options) {
        Ok(table) => {
            let services = table.services().count();
            let backends = table.backend_count();
            let keep: std::collections::HashSet<BackendId> = table
                .services()
                .flat_map(|s| &s.ports)
                .flat_map(|p| &p.backends)
                .map(BackendId::of)
                .collect();
            state.routes.store(Arc::new(table));
            state.chooser.retain(|id| keep.contains(id));
            state.metrics.set_route_sizes(services, backends);
            state.metrics.reload(ReloadKind::Routes, ReloadResult::Ok);
            tracing::info!(services, backends, "routes reloaded");
        }
        Err(error) => {
            state
                .metrics
                .reload(ReloadKind::Routes, ReloadResult::Error);
            tracing::warn!(%error, "configuration update refused; the last good routes stay");
        }
    }
}
