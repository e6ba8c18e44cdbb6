//! Reloading routes: from the configuration directory (a change, debounced,
//! rebuilds the route table) or from the Kubernetes source (each snapshot
//! whose cluster set changed does; the source debounces). The new table is
//! swapped in atomically; an invalid update is logged and the last good
//! routes stay. Open connections never notice a reload: they hold their
//! upstream, not the table. The Kubernetes driver also keeps the per-cluster
//! sync metrics and `/debug/clusters` current, and the export status
//! writer's leadership and writes in `/metrics`.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use notify::{EventKind, RecursiveMode, Watcher};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::{GatewayError, GatewayOptions, Routes, load_routes_reusing};
use crate::admin::JsonView;
use crate::admin::metrics::{Metrics, ReloadKind, ReloadResult, Stage};
use crate::controller::{ExportStatusReport, ImportsReport};
use crate::diagnostics::{Diagnostic, Origin};
use crate::discovery::kube::{KubeHandle, SourceSnapshot, SyncState};
use crate::discovery::observed::ContestedPort;
use crate::model::names::IMPORT_PORTS_ANNOTATION;
use crate::routing::RouteTable;
use crate::routing::balancer::BackendId;
use crate::state::GatewayState;

/// Starts watching `dir`, or the Kubernetes source when the options hold
/// one; the returned task ends at `shutdown`.
pub(super) fn spawn(
    dir: PathBuf,
    options: GatewayOptions,
    state: Arc<GatewayState>,
    debounce: Duration,
    shutdown: CancellationToken,
) -> Result<JoinHandle<()>, GatewayError> {
    if let Some(kube) = options.kube.clone() {
        return Ok(spawn_kube(kube, options, state, shutdown));
    }
    let (changed, mut changes) = tokio::sync::mpsc::channel::<()>(1);
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        // Only changes count: reading the files (the reload itself does)
        // raises access events, which must not trigger another reload.
        let changes_content = event.is_ok_and(|event| {
            matches!(
                event.kind,
                EventKind::Any | EventKind::Create(_) | EventKind::Modify(_) | EventKind::Remove(_)
            )
        });
        if changes_content {
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
pub(super) fn reload(options: &GatewayOptions, state: &GatewayState) -> bool {
    let started = std::time::Instant::now();
    let previous = state.routes.load_full();
    match load_routes_reusing(options, Some(&previous)) {
        Ok(Routes { table, findings }) => {
            // The new routes go live first; the bookkeeping below reads them
            // after, so it never delays a change reaching connections.
            let table = Arc::new(table);
            state.routes.store(table.clone());
            state.route_updates.notify_one();
            let routed = still_routed(&table, state.chooser.known());
            state.chooser.retain(|id| routed.contains(id));
            let services = table.services().count();
            let backends = table.backend_count();
            let (addressed, unaddressed) = table.remote_pod_counts();
            state.metrics.set_route_sizes(services, backends);
            state.metrics.set_remote_pods(addressed, unaddressed);
            state.metrics.reload(ReloadKind::Routes, ReloadResult::Ok);
            report_findings(state, findings, options.kube.is_none());
            tracing::info!(
                services,
                backends,
                took_ms = started.elapsed().as_millis(),
                "routes reloaded"
            );
            true
        }
        Err(error) => {
            state
                .metrics
                .reload(ReloadKind::Routes, ReloadResult::Error);
            tracing::warn!(%error, "configuration update refused: nothing usable; the last good routes stay");
            false
        }
    }
}

/// Which of the chooser's `known` backends `table` still routes. One walk
/// over the table, allocating only for backends the chooser knows (those
/// picked since they were routed): never a set of every routed backend.
fn still_routed(table: &RouteTable, known: HashSet<BackendId>) -> HashSet<BackendId> {
    if known.is_empty() {
        return known;
    }
    let addresses: HashSet<SocketAddr> = known.iter().map(|id| id.address).collect();
    let mut routed = HashSet::new();
    for backend in table
        .services()
        .flat_map(|s| &s.ports)
        .flat_map(|p| &p.backends)
    {
        let address = SocketAddr::new(backend.backend.address, backend.backend.port);
        if addresses.contains(&address) {
            let id = BackendId::of(backend);
            if known.contains(&id) {
                routed.insert(id);
            }
        }
    }
    routed
}

/// Records the findings of the configuration now in use: the invalid
/// objects left out in `strait_invalid_objects`, and, when `log` (the
/// Kubernetes source logs its own), each new finding once.
pub(crate) fn report_findings(state: &GatewayState, findings: Vec<Diagnostic>, log: bool) {
    let mut reported = state
        .findings
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if *reported == findings {
        return;
    }
    if log {
        for finding in findings.iter().filter(|f| !reported.contains(f)) {
            if finding.is_error() {
                tracing::warn!("{finding}; left out, the rest of the cluster set is used");
            } else {
                tracing::info!("{finding}");
            }
        }
    }
    let mut invalid: std::collections::BTreeMap<(String, String), usize> = Default::default();
    for finding in findings.iter().filter(|f| f.is_error()) {
        let cluster = finding.cluster.clone().unwrap_or_default();
        let kind = finding.kind().unwrap_or("file").to_owned();
        *invalid.entry((cluster, kind)).or_default() += 1;
    }
    state.metrics.set_invalid_objects(&invalid);
    *reported = findings;
}

/// Routes of `options.cluster` from the Kubernetes source's latest snapshot:
/// its usable set, every invalid object left out.
pub(super) fn kube_routes(
    kube: &KubeHandle,
    options: &GatewayOptions,
    previous: Option<&RouteTable>,
) -> Result<Routes, GatewayError> {
    let snapshot = kube.snapshot();
    let (Some(set), Some(merged)) = (&snapshot.usable_set, &snapshot.usable_merged) else {
        return Err(GatewayError::Routes(
            "the cluster set has not been read from the Kubernetes API yet".to_owned(),
        ));
    };
    let started = std::time::Instant::now();
    let mut table = RouteTable::build_reusing(set, merged, &options.cluster, previous)
        .map_err(|e| GatewayError::Routes(e.to_string()))?;
    tracing::debug!(
        routes_ms = started.elapsed().as_millis(),
        "routes built from the kube snapshot"
    );
    // Import ports only where Strait is the MCS implementation: they are
    // recorded on its ServiceImports, which every replica reads.
    let mut contested = Vec::new();
    if options.settings.kube.manage_imports
        && let Some(local) = &snapshot.local_imports
    {
        // Only what the leader recorded: a port a replica computed on its
        // own could mean another service than kube-proxy's rules say.
        let recorded = local.observed.recorded_claims();
        // A record naming a port its service cannot have is no import's.
        let wanted = recorded
            .ports
            .iter()
            .filter(|(key, _)| crate::imports::could_want(merged, key));
        let allocation =
            crate::imports::recorded_allocation(wanted, &options.settings.imports.port_range);
        table.set_import_ports(allocation.by_import_port());
        table.set_pod_addresses(&local.observed.pod_addresses());
        contested = recorded
            .contested
            .iter()
            .map(|contested| contested_finding(contested, &options.cluster))
            .collect();
    }
    let mut findings = match &snapshot.set {
        Ok(_) => snapshot.warnings.clone(),
        Err(diagnostics) => diagnostics.0.clone(),
    };
    findings.extend(contested);
    Ok(Routes { table, findings })
}

/// An import port two records claim, as an error finding on the import of
/// each claimant that lost it: Strait writes each port once, so this is a
/// fault to look into, and never settled in a tenant's favour by key order.
fn contested_finding(contested: &ContestedPort, cluster: &str) -> Diagnostic {
    let claimants: Vec<String> = contested
        .claimants
        .iter()
        .map(ToString::to_string)
        .collect();
    let settled = match &contested.winner {
        Some(winner) => format!("kept for {winner}, whose derived Service forwards to it"),
        None => "left to none of them: no single derived Service forwards to it".to_owned(),
    };
    let first = contested
        .claimants
        .iter()
        .find(|key| Some(*key) != contested.winner.as_ref())
        .map_or_else(String::new, |key| key.service.to_string());
    Diagnostic::error(
        Origin::default(),
        format!(
            "import port {} is claimed by {}; {settled}",
            contested.port,
            claimants.join(", ")
        ),
    )
    .object(format!("ServiceImport {first}"))
    .field(format!("metadata.annotations[{IMPORT_PORTS_ANNOTATION:?}]"))
    .in_cluster(cluster)
}

/// The `/debug/clusters` view: the invalid objects left out of the
/// configuration in use (`excluded`, each with its cluster, object, field
/// and message) and its warnings, and with the Kubernetes source each
/// cluster's sync state.
pub(super) fn clusters_view(
    options: &GatewayOptions,
    state: Arc<GatewayState>,
) -> Option<JsonView> {
    let kube = options.kube.clone();
    Some(Arc::new(move || {
        let findings = state
            .findings
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        let (excluded, warnings): (Vec<Diagnostic>, Vec<Diagnostic>) =
            findings.into_iter().partition(Diagnostic::is_error);
        let mut view = match &kube {
            Some(kube) => kube.snapshot().clusters_json(),
            None => serde_json::json!({"source": "files"}),
        };
        view["excluded"] = serde_json::to_value(excluded).unwrap_or_default();
        view["warnings"] = serde_json::to_value(warnings).unwrap_or_default();
        view
    }))
}

/// The `/debug/imports` view: the import ports this gateway listens on and
/// the service port behind each, and with the Kubernetes source the import
/// reconciler's plan (every import with its VIPs, ports and state).
pub(super) fn imports_view(options: &GatewayOptions, state: Arc<GatewayState>) -> JsonView {
    let reports = options.controller.as_ref().and_then(|c| c.imports());
    Arc::new(move || {
        let table = state.routes.load();
        let mut listening: Vec<(u16, String)> = table
            .import_ports()
            .map(|(port, key)| (port, key.to_string()))
            .collect();
        listening.sort();
        let listening: Vec<serde_json::Value> = listening
            .into_iter()
            .map(|(port, service)| serde_json::json!({"importPort": port, "service": service}))
            .collect();
        let reconciler = reports
            .as_ref()
            .map(|reports| serde_json::to_value(&*reports.borrow()).unwrap_or_default());
        serde_json::json!({"listening": listening, "reconciler": reconciler})
    })
}

/// Follows the Kubernetes source: records every snapshot's sync state in
/// the metrics and reloads the routes when the cluster set changed.
fn spawn_kube(
    kube: KubeHandle,
    options: GatewayOptions,
    state: Arc<GatewayState>,
    shutdown: CancellationToken,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut snapshots = kube.subscribe();
        let mut labels = std::collections::HashSet::new();
        // With a DNS responder, the import reconciler turns an import Ready
        // only once the routes it answers from hold the import.
        let answering = options
            .controller
            .as_ref()
            .filter(|_| options.settings.listeners.dns.is_some());
        let mut loaded = {
            let snapshot = snapshots.borrow_and_update().clone();
            record_sync(&state.metrics, &snapshot, &mut labels);
            publish(&state, &options, &snapshot);
            if let Some(controller) = answering {
                controller.names_answered_from(snapshot.generation);
            }
            (snapshot.set_revision, snapshot.imports_revision)
        };
        // The export status writer's leadership and writes, when it runs.
        let mut status = options.controller.as_ref().and_then(|c| c.export_status());
        let mut imports = options.controller.as_ref().and_then(|c| c.imports());
        loop {
            tokio::select! {
                changed = snapshots.changed() => if changed.is_err() { return },
                changed = imports_changed(&mut imports) => {
                    match (changed, &mut imports) {
                        (true, Some(reports)) => {
                            // Read in place: the report holds the whole plan,
                            // and changes with every write.
                            let report = reports.borrow_and_update();
                            state.metrics.set_import_plan(
                                report.imports.len(),
                                report.foreign(),
                                report.exhausted.len(),
                            );
                            state.metrics.set_import_writes(report.writes, report.failed_writes);
                            state.metrics.set_work_total(Stage::ImportPass, report.passes);
                            state
                                .metrics
                                .set_work_total(Stage::ImportObjectRendered, report.rendered);
                            state
                                .metrics
                                .set_work_total(Stage::ImportPlanned, report.imports_planned);
                            state.metrics.set_import_queue(
                                report.queued,
                                report.unsettled,
                                report.write_seconds,
                                report.pass_seconds,
                            );
                        }
                        _ => imports = None,
                    }
                    continue;
                }
                changed = export_status_changed(&mut status) => {
                    match (changed, &mut status) {
                        (true, Some(reports)) => {
                            let report = reports.borrow_and_update().clone();
                            state.metrics.set_export_status(
                                report.leader,
                                report.writes,
                                report.failed_writes,
                            );
                        }
                        _ => status = None,
                    }
                    continue;
                }
                () = shutdown.cancelled() => return,
            }
            let snapshot = snapshots.borrow_and_update().clone();
            record_sync(&state.metrics, &snapshot, &mut labels);
            publish(&state, &options, &snapshot);
            // The import objects count where Strait records import ports.
            let imports_revision = if options.settings.kube.manage_imports {
                snapshot.imports_revision
            } else {
                loaded.1
            };
            // The routes answer for this snapshot when nothing they read
            // changed, or once rebuilt from it (or a newer one).
            // A refused reload is tried again with the next snapshot.
            let current =
                (snapshot.set_revision, imports_revision) == loaded || reload(&options, &state);
            if current {
                loaded = (snapshot.set_revision, imports_revision);
            }
            if let Some(controller) = answering.filter(|_| current) {
                controller.names_answered_from(snapshot.generation);
            }
        }
    })
}

/// Gives the feed the local cluster as the snapshot translated it.
fn publish(state: &GatewayState, options: &GatewayOptions, snapshot: &SourceSnapshot) {
    if let (Some(feed), Some(set)) = (&state.feed, &snapshot.usable_set)
        && let Some(local) = set
            .clusters
            .values()
            .find(|cluster| cluster.id.as_str() == options.cluster)
    {
        feed.update(local);
    }
}

/// Resolves when the export status writer reports something (true), or
/// when it is gone (false); never without a writer.
async fn export_status_changed(
    reports: &mut Option<tokio::sync::watch::Receiver<ExportStatusReport>>,
) -> bool {
    match reports {
        Some(reports) => reports.changed().await.is_ok(),
        None => std::future::pending().await,
    }
}

/// Resolves when the import reconciler reports something (true), or when
/// it is gone (false); never without one.
async fn imports_changed(
    reports: &mut Option<tokio::sync::watch::Receiver<ImportsReport>>,
) -> bool {
    match reports {
        Some(reports) => reports.changed().await.is_ok(),
        None => std::future::pending().await,
    }
}

/// Sets the per-cluster sync metrics and forgets clusters that are gone;
/// counts the source's publications and cluster translations.
fn record_sync(
    metrics: &Metrics,
    snapshot: &SourceSnapshot,
    labels: &mut std::collections::HashSet<String>,
) {
    metrics.set_work_total(Stage::Publication, snapshot.generation);
    metrics.set_work_total(Stage::ClusterTranslation, snapshot.translations);
    let mut current = std::collections::HashSet::new();
    // A peer's feed and its link share an id while one replaces the other:
    // the link's series is told apart, not overwritten.
    let fed: std::collections::HashSet<&str> = snapshot
        .clusters
        .iter()
        .filter(|cluster| cluster.feed)
        .map(|cluster| cluster.label())
        .collect();
    for cluster in &snapshot.clusters {
        let label = match cluster.label() {
            label if !cluster.feed && fed.contains(label) => format!("{label}/link"),
            label => label.to_owned(),
        };
        metrics.set_cluster_sync(
            &label,
            cluster.state == SyncState::Synced,
            cluster.state == SyncState::Stale,
            cluster.stale_count,
            cluster.watch_errors,
        );
        current.insert(label);
    }
    for gone in labels.difference(&current) {
        metrics.remove_cluster(gone);
    }
    *labels = current;
}
