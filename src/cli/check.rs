//! `strait check`: validate a configuration and summarise it.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write;

use serde::Serialize;

use crate::merge::{Conflict, MergedSet};
use crate::model::{ClusterId, ClusterSet, GatewayAddress, NetworkId, ServicePort, ServiceType};

use super::installation::{Check, Outcome};
use super::load::{SourceArgs, load};
use super::{Output, Refused, emit};

#[derive(Debug, Serialize)]
struct Report {
    valid: bool,
    /// With `--kube`: the installation's checks.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    checks: Vec<Check>,
    clusters: Vec<ClusterReport>,
    networks: Vec<NetworkReport>,
    services: Vec<ServiceReport>,
    warnings: Vec<String>,
}

#[derive(Debug, Serialize)]
struct ClusterReport {
    id: ClusterId,
    network: NetworkId,
    gateways: Vec<GatewayAddress>,
    source: String,
}

#[derive(Debug, Serialize)]
struct NetworkReport {
    id: NetworkId,
    clusters: Vec<ClusterId>,
    gateways: Vec<GatewayAddress>,
}

#[derive(Debug, Serialize)]
struct ServiceReport {
    service: String,
    #[serde(rename = "type")]
    service_type: ServiceType,
    ports: Vec<ServicePort>,
    conflicts: Vec<Conflict>,
    /// Exporting clusters, oldest export first.
    clusters: Vec<ClusterId>,
    #[serde(rename = "notExported")]
    not_exported: Vec<ClusterId>,
}

pub(super) fn run(source: &SourceArgs, output: Output, out: &mut dyn Write) -> Result<(), Refused> {
    let loaded = load(source)?;
    for warning in &loaded.warnings {
        eprintln!("{warning}");
    }
    let mut report = report(&loaded.set, &loaded.merged, &loaded.warnings);
    if source.uses_kube(&loaded.settings) {
        report.checks = super::runtime()?.block_on(async {
            let client = crate::controller::link::local_client(source.kubeconfig.as_deref())
                .await
                .map_err(|e| Refused(format!("error: {e}")))?;
            Ok::<_, Refused>(
                super::preflight::installed(
                    &client,
                    &loaded.settings,
                    loaded.local.as_deref(),
                    true,
                )
                .await,
            )
        })?;
    }
    match output {
        Output::Json => {
            let json = serde_json::to_string_pretty(&report)
                .map_err(|e| Refused(format!("cannot encode report: {e}")))?;
            emit(out, &format!("{json}\n"))?;
        }
        Output::Text => {
            let mut text = render(&loaded.label, &report);
            if !report.checks.is_empty() {
                text.push_str("\ninstallation:\n");
                text.push_str(&super::installation::render(&report.checks));
            }
            emit(out, &text)?;
        }
    }
    failed(&report.checks)
}

/// `strait check --pre`: the local cluster before Strait is installed.
pub(super) fn run_pre(
    source: &SourceArgs,
    output: Output,
    out: &mut dyn Write,
) -> Result<(), Refused> {
    let settings = source.settings()?;
    let checks = super::runtime()?.block_on(async {
        let client = crate::controller::link::local_client(source.kubeconfig.as_deref())
            .await
            .map_err(|e| Refused(format!("error: {e}")))?;
        let mut checks = super::preflight::before_install(&client, &settings).await;
        checks.extend(super::preflight::installed(&client, &settings, None, false).await);
        Ok::<_, Refused>(checks)
    })?;
    match output {
        Output::Json => {
            let json = serde_json::to_string_pretty(&serde_json::json!({ "checks": checks }))
                .map_err(|e| Refused(format!("cannot encode report: {e}")))?;
            emit(out, &format!("{json}\n"))?;
        }
        Output::Text => emit(out, &super::installation::render(&checks))?,
    }
    failed(&checks)
}

/// A ✗ among the checks fails the command.
fn failed(checks: &[Check]) -> Result<(), Refused> {
    let failed = checks
        .iter()
        .filter(|c| c.outcome == Outcome::Failed)
        .count();
    if failed == 0 {
        Ok(())
    } else {
        Err(Refused(format!("{failed} check(s) failed (✗ above)")))
    }
}

fn report(
    set: &ClusterSet,
    merged: &MergedSet,
    warnings: &[crate::diagnostics::Diagnostic],
) -> Report {
    let clusters = set
        .clusters
        .values()
        .map(|c| ClusterReport {
            id: c.id.clone(),
            network: c.network.clone(),
            gateways: c.gateways.clone(),
            source: c.source.clone(),
        })
        .collect();
    let mut by_network: BTreeMap<&NetworkId, Vec<ClusterId>> = BTreeMap::new();
    for cluster in set.clusters.values() {
        by_network
            .entry(&cluster.network)
            .or_default()
            .push(cluster.id.clone());
    }
    let networks = by_network
        .into_iter()
        .map(|(network, clusters)| NetworkReport {
            id: network.clone(),
            gateways: clusters
                .first()
                .map(|first| set.network_gateways(network, first))
                .unwrap_or_default(),
            clusters,
        })
        .collect();
    let services = merged
        .services
        .values()
        .map(|s| ServiceReport {
            service: s.key.to_string(),
            service_type: s.service_type,
            ports: s
                .ports
                .iter()
                .map(|p| ServicePort {
                    name: p.name.clone(),
                    protocol: p.protocol,
                    port: p.port,
                    app_protocol: p.app_protocol.clone(),
                })
                .collect(),
            conflicts: s.conflicts.clone(),
            clusters: s.constituents.clone(),
            not_exported: s.not_exported.clone(),
        })
        .collect();
    Report {
        valid: true,
        checks: Vec::new(),
        clusters,
        networks,
        services,
        warnings: warnings.iter().map(ToString::to_string).collect(),
    }
}

fn join<T: ToString>(items: &[T]) -> String {
    if items.is_empty() {
        return "none".to_owned();
    }
    items
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

fn render(label: &str, report: &Report) -> String {
    let mut text = String::new();
    let _ = writeln!(
        text,
        "{label} is valid ({} warning{})",
        report.warnings.len(),
        if report.warnings.len() == 1 { "" } else { "s" }
    );
    let _ = writeln!(text, "\nclusters ({}):", report.clusters.len());
    for cluster in &report.clusters {
        let _ = writeln!(
            text,
            "  {:<16} network {:<12} gateways {}",
            cluster.id,
            cluster.network,
            join(&cluster.gateways)
        );
    }
    let _ = writeln!(text, "\nnetworks ({}):", report.networks.len());
    for network in &report.networks {
        let _ = writeln!(
            text,
            "  {:<16} clusters {}; gateways {}",
            network.id,
            join(&network.clusters),
            join(&network.gateways)
        );
    }
    let _ = writeln!(text, "\nservices ({}):", report.services.len());
    for service in &report.services {
        let ports: Vec<String> = service
            .ports
            .iter()
            .map(|p| format!("{}:{}/{}", p.name, p.port, p.protocol))
            .collect();
        let _ = writeln!(
            text,
            "  {:<24} {:<12} ports {}; exported by {}",
            service.service,
            service.service_type.to_string(),
            join(&ports),
            join(&service.clusters)
        );
        if !service.not_exported.is_empty() {
            let _ = writeln!(text, "    not exported by {}", join(&service.not_exported));
        }
        for conflict in &service.conflicts {
            let _ = writeln!(text, "    {}: {}", conflict.reason, conflict.message);
        }
    }
    text
}
