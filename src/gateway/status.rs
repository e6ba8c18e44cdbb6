//! The `/debug/status` view: the cluster set as this gateway sees it, on
//! one screen (what `strait status` prints). Per cluster: how it is read
//! (its own API server, a link through another's, its feed), its sync
//! state and since when, its network and whether the network map attests
//! it, its gateways and this gateway's open tunnel connections to them;
//! what it last said of this cluster's exports (which it imports, which
//! not and why); then the services the set exports (and conflicts), the imports
//! (ready, not ready and why, and services with no import and why) and
//! the findings. It reads what the gateway holds already: no request to
//! any API server or peer; each peer gateway's last answer comes from
//! the periodic question of [`probe`](super::probe).

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Value, json};

use super::GatewayOptions;
use super::probe::Probes;
use crate::admin::JsonView;
use crate::diagnostics::Diagnostic;
use crate::state::GatewayState;

/// How many of the not-ready imports and of the findings the view lists
/// (it counts them all).
const LISTED: usize = 20;

pub(super) fn status_view(
    options: &GatewayOptions,
    state: Arc<GatewayState>,
    probes: Option<Arc<Probes>>,
) -> JsonView {
    let options = options.clone();
    Arc::new(move || status(&options, &state, probes.as_deref()))
}

fn status(options: &GatewayOptions, state: &GatewayState, probes: Option<&Probes>) -> Value {
    let tunnels = tunnel_connections(state);
    let findings = state
        .findings
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    let mut view = json!({
        "cluster": options.cluster,
        "source": if options.kube.is_some() { "kubernetes" } else { "files" },
        "findings": findings_view(&findings),
    });
    let Some(kube) = &options.kube else {
        let table = state.routes.load();
        view["services"] = json!({"routed": table.services().count()});
        return view;
    };
    let snapshot = kube.snapshot();
    let set = snapshot.usable_set.as_deref();
    let mut clusters: Vec<Value> = snapshot
        .clusters
        .iter()
        .map(|status| {
            let cluster = status.id.as_deref().and_then(|id| set?.cluster(id));
            let gateways: Vec<String> = cluster
                .map(|c| c.gateways.iter().map(ToString::to_string).collect())
                .unwrap_or_default();
            // Each gateway's last answer to this gateway's question
            // (src/gateway/probe.rs); absent until the first round.
            let answers: BTreeMap<String, Value> = cluster
                .zip(probes)
                .map(|(c, probes)| {
                    c.gateways
                        .iter()
                        .filter_map(|g| Some((g.to_string(), json!(probes.get(g)?))))
                        .collect()
                })
                .unwrap_or_default();
            // What it last said of this cluster's exports: which it
            // imports, which not and why (counted; the first few named).
            let account = cluster.zip(probes).and_then(|(c, probes)| {
                c.gateways
                    .iter()
                    .find_map(|g| probes.get(g)?.imports)
            });
            let our_exports = account.map(|account| {
                json!({
                    "imported": account.imported.len(),
                    "notImported": account.not_imported.len(),
                    "notImportedListed": account
                        .not_imported
                        .iter()
                        .take(LISTED)
                        .collect::<BTreeMap<_, _>>(),
                    "unlisted": account.unlisted,
                })
            });
            let (h2, quic) = gateways.iter().fold((0, 0), |(h2, quic), gateway| {
                let (h, q) = tunnels.get(gateway).copied().unwrap_or_default();
                (h2 + h, quic + q)
            });
            let local = status.id.as_deref() == Some(options.cluster.as_str());
            json!({
                "id": status.id,
                "readFrom": if local { "local" } else if status.feed { "feed" } else { "api" },
                "source": status.source,
                "state": status.state,
                "since": status.since,
                "lastSynced": status.last_synced,
                "lastError": status.last_error,
                "network": cluster.map(|c| c.network.to_string()),
                "networkAttested": cluster.map(|c| c.network_attested),
                // The set also holds the Services a cluster declares
                // without exporting them (the per-port rule reads them).
                "exported": cluster.map(|c| {
                    c.services.values().filter(|s| s.export.is_some()).count()
                }),
                "gateways": gateways,
                "tunnelConnections": if local { Value::Null } else { json!({"h2": h2, "quic": quic}) },
                "probes": if local { Value::Null } else { json!(answers) },
                "importsOfOurs": our_exports,
            })
        })
        .collect();
    clusters.sort_by(|a, b| a["id"].to_string().cmp(&b["id"].to_string()));
    view["clusters"] = clusters.into();
    view["settled"] = snapshot.settled.into();
    if let Some(merged) = snapshot.usable_merged.as_deref() {
        let conflicted = merged
            .services
            .values()
            .filter(|service| !service.conflicts.is_empty())
            .count();
        view["services"] = json!({"exported": merged.services.len(), "inConflict": conflicted});
    }
    if let Some(reports) = options.controller.as_ref().and_then(|c| c.imports()) {
        let report = reports.borrow();
        let not_ready: Vec<Value> = report
            .imports
            .iter()
            .filter(|import| !import.ready)
            .map(|import| {
                json!({
                    "service": import.key.to_string(),
                    "reason": import.reason,
                    "message": import.message,
                })
            })
            .collect();
        let mut skipped: BTreeMap<String, usize> = BTreeMap::new();
        for why in report.skipped.values() {
            let why = serde_json::to_value(why)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default();
            *skipped.entry(why).or_default() += 1;
        }
        view["imports"] = json!({
            "leader": report.leader,
            "total": report.imports.len(),
            "ready": report.imports.len() - not_ready.len(),
            "notReady": not_ready.len(),
            "notReadyListed": not_ready.into_iter().take(LISTED).collect::<Vec<_>>(),
            "skipped": skipped,
            "lastError": report.last_error,
            // Import ports: one per TCP or UDP port of a ClusterSetIP
            // import, from the range; service ports left without one.
            "ports": {
                "range": options.settings.imports.port_range.to_string(),
                "size": options.settings.imports.port_range.len(),
                "used": report
                    .imports
                    .iter()
                    .flat_map(|import| &import.ports)
                    .filter(|port| port.import_port.is_some())
                    .count(),
                "exhausted": report.exhausted.len(),
                "exhaustedListed": report.exhausted.iter().take(LISTED).collect::<Vec<_>>(),
            },
        });
    }
    view
}

/// This gateway's open tunnel connections by peer gateway address:
/// (HTTP/2, QUIC).
fn tunnel_connections(state: &GatewayState) -> BTreeMap<String, (usize, usize)> {
    let mut counts: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    for (gateway, open) in state.pool.connection_counts() {
        counts.entry(gateway).or_default().0 += open;
    }
    if let Some(quic) = &state.quic {
        for (gateway, open) in quic.connection_counts() {
            counts.entry(gateway).or_default().1 += open;
        }
    }
    counts
}

fn findings_view(findings: &[Diagnostic]) -> Value {
    let errors = findings.iter().filter(|f| f.is_error()).count();
    let listed: Vec<String> = findings
        .iter()
        .take(LISTED)
        .map(ToString::to_string)
        .collect();
    json!({
        "errors": errors,
        "warnings": findings.len() - errors,
        "listed": listed,
    })
}
