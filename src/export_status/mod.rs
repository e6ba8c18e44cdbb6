//! The status Strait writes on the local cluster's ServiceExports (KEP-1645):
//! `Valid`, from whether the export's Service can be exported, `Conflict`,
//! from the merged service that the routes are built from, and `Ready`
//! (mcs-api v1beta1), from both: `True` (`Ready`, the reason of a pull
//! model: every cluster reads the exports itself) once the export is a
//! constituent of the merged service (its message naming whom an access
//! policy admits, when one scopes it), `False` with `Failed` when it cannot
//! be exported, `False` with `Pending` while it is valid but not yet
//! merged. Pure:
//! the objects, the merged set and the clock come in as arguments;
//! `controller::status` does the writing; whether each export can be
//! exported at all is read with the objects (`discovery::export_validity`).
//!
//! Nothing is rewritten that already says the same: a condition whose
//! status, reason, message and `observedGeneration` are what Strait wants is
//! left alone, and `lastTransitionTime` moves only when the status flips.
//! Conditions of other types (written by other controllers) are kept as the
//! API server holds them.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use serde_json::{Map, Value};

pub use crate::discovery::export_validity::{LocalExport, Validity};
mod importers;
use crate::merge::MergedSet;
use crate::model::ClusterId;
pub use importers::{AccountOf, ImportAccount, Importer, NotImported, PeerImports};

/// The condition saying whether the export can be exported at all.
pub const VALID_CONDITION: &str = "Valid";
/// The condition saying whether the constituents of the service disagree.
pub const CONFLICT_CONDITION: &str = "Conflict";
/// The condition saying whether the export can be imported by the set.
pub const READY_CONDITION: &str = "Ready";
/// `Ready` reasons (mcs-api v1beta1 `ServiceExportReason*`).
pub const READY_REASON_READY: &str = "Ready";
pub const READY_REASON_PENDING: &str = "Pending";
pub const READY_REASON_FAILED: &str = "Failed";
/// `Conflict` reason when the constituents agree.
pub const NO_CONFLICTS: &str = "NoConflicts";
/// The longest condition message the ServiceExport CRD accepts.
pub const MAX_MESSAGE_BYTES: usize = 32_768;

/// One condition as Strait wants it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WantedCondition {
    pub type_: &'static str,
    pub status: bool,
    pub reason: String,
    pub message: String,
}

/// What Strait wants for the conditions of one export: conditions to set and
/// condition types to remove. A type in neither is left as it is.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Wanted {
    pub set: Vec<WantedCondition>,
    pub remove: Vec<&'static str>,
}

/// The Ready message of an export that is part of the merged service:
/// to whom it is exported, and when this cluster has no ready endpoint
/// for it, that importers get none from here.
fn exported_message(
    export: &LocalExport,
    service: &crate::merge::MergedService,
    local: &ClusterId,
    peers: Option<&PeerImports>,
) -> String {
    let account = peers
        .filter(|peers| !peers.clusters.is_empty())
        .map(|peers| importers(service, peers));
    let mut message = match (service.access.as_deref(), &account) {
        (None, Some(_)) => format!(
            "Service {} is exported to every cluster of the set.",
            export.key
        ),
        (Some(policy), Some(_)) => format!(
            "Service {} is exported to {} only (its access policy): the other clusters of the set are not told of it and do not import it.",
            export.key,
            admitted(policy),
        ),
        (None, None) => format!(
            "Service {} is exported to every cluster of the set. Each imports it where namespace {} exists (Strait never creates one); which did is in their ServiceImports, and `strait status` there.",
            export.key, export.key.namespace
        ),
        // Scoped: the clusters it does not admit are never told of it
        // (not even its name, in the feed), so they import nothing.
        (Some(policy), None) => format!(
            "Service {} is exported to {} only (its access policy): the other clusters of the set are not told of it and do not import it. Those admitted import it where namespace {} exists.",
            export.key,
            admitted(policy),
            export.key.namespace
        ),
    };
    // Said rather than left to look healthy: clients elsewhere get an
    // empty answer from a service whose every copy has no ready pod.
    if service.ready_endpoints(local) == Some(0) {
        message.push_str(
            " It has no ready endpoint in this cluster: importers send its traffic to the other exporting clusters, and get no backend where none has one.",
        );
    }
    if let Some(account) = account {
        message.push(' ');
        message.push_str(&account);
    }
    message
}

/// Who imports `service` and who does not, and why, as each other
/// cluster's gateway last answered this one's (`peers`).
fn importers(service: &crate::merge::MergedService, peers: &PeerImports) -> String {
    let mut imports = Vec::new();
    let mut does_not: BTreeMap<NotImported, Vec<&str>> = BTreeMap::new();
    let mut not_heard = Vec::new();
    let mut unknown = Vec::new();
    for (cluster, importer) in peers.of(service) {
        match importer {
            Importer::Imports => imports.push(cluster.as_str()),
            Importer::DoesNot(why) => does_not.entry(why).or_default().push(cluster.as_str()),
            Importer::NotHeard => not_heard.push(cluster.as_str()),
            Importer::Unknown => unknown.push(cluster.as_str()),
        }
    }
    let mut sentences = Vec::new();
    if !imports.is_empty() {
        sentences.push(format!("Imported in {}.", imports.join(", ")));
    }
    for (why, clusters) in does_not {
        sentences.push(format!(
            "Not imported in {}: {}.",
            clusters.join(", "),
            why.reason(&service.key.namespace)
        ));
    }
    if !not_heard.is_empty() {
        sentences.push(format!("Not read yet by {}.", not_heard.join(", ")));
    }
    if !unknown.is_empty() {
        sentences.push(format!(
            "No account from {} (its gateway has not answered this one's question yet).",
            unknown.join(", ")
        ));
    }
    if sentences.is_empty() {
        return "No other cluster is told of it.".to_owned();
    }
    sentences.push("(As each cluster's gateway last said; asked every 30 s.)".to_owned());
    sentences.join(" ")
}

/// The conditions Strait wants on the local export `export` of cluster
/// `local`. `merged` is the merged set the routes are built from, `None`
/// while the cluster set is invalid: `Conflict` is then left as it is.
/// An invalid export takes no part in the merged service and carries no
/// `Conflict` condition.
pub fn wanted(
    export: &LocalExport,
    local: &ClusterId,
    merged: Option<&MergedSet>,
    peers: Option<&PeerImports>,
) -> Wanted {
    let mut wanted = Wanted::default();
    wanted.set.push(WantedCondition {
        type_: VALID_CONDITION,
        status: export.validity.is_valid(),
        reason: export.validity.reason().to_owned(),
        message: export.validity.message(&export.key),
    });
    if !export.validity.is_valid() {
        wanted.set.push(WantedCondition {
            type_: READY_CONDITION,
            status: false,
            reason: READY_REASON_FAILED.to_owned(),
            message: export.validity.message(&export.key),
        });
        wanted.remove.push(CONFLICT_CONDITION);
        return wanted;
    }
    // Without a valid set nothing is merged: Ready, like Conflict, is
    // left as it is rather than flipped for a set that will be mended.
    let Some(merged) = merged else {
        return wanted;
    };
    let service = merged
        .services
        .get(&export.key)
        .filter(|service| service.constituents.contains(local));
    wanted.set.push(match service {
        Some(service) => WantedCondition {
            type_: READY_CONDITION,
            status: true,
            reason: READY_REASON_READY.to_owned(),
            // Who it is exported to, whether it has a ready endpoint here,
            // and who imports it as they last said: Ready stays True while
            // a cluster lacks the namespace (the export is fine; that
            // cluster's admin decides), and the message names it.
            message: exported_message(export, service, local, peers),
        },
        None => WantedCondition {
            type_: READY_CONDITION,
            status: false,
            reason: READY_REASON_PENDING.to_owned(),
            message: format!(
                "Service {} is valid, and not yet part of the merged service (this cluster is not yet usable in the set).",
                export.key
            ),
        },
    });
    if let Some(service) = service {
        // A fixed message when clear: a cluster joining or leaving the
        // service does not rewrite every export's condition.
        let message = if service.conflicts.is_empty() {
            "The exporting clusters agree on the service's properties.".to_owned()
        } else {
            let mut messages: Vec<String> = service
                .conflicts
                .iter()
                .map(|c| c.message.clone())
                .collect();
            // The losing side is told what it lost: its ports the merged
            // service does not carry, which its clients elsewhere cannot
            // reach through the set.
            let dropped: Vec<String> = service
                .dropped_ports(local)
                .into_iter()
                .map(|port| {
                    let name = if port.name.is_empty() {
                        "(unnamed)"
                    } else {
                        &port.name
                    };
                    format!("{name} {}/{}", port.port, port.protocol)
                })
                .collect();
            if !dropped.is_empty() {
                messages.push(format!(
                    "This cluster's ports not exposed (each collides with an older export's): {}.",
                    dropped.join(", ")
                ));
            }
            messages.join(" ")
        };
        wanted.set.push(WantedCondition {
            type_: CONFLICT_CONDITION,
            status: !service.conflicts.is_empty(),
            reason: service.conflict_condition_reason(),
            message,
        });
    }
    wanted
}

/// Who `policy` admits, as the Ready message names them.
fn admitted(policy: &crate::model::AccessPolicy) -> String {
    let names = |label: &str, ids: Vec<&str>| {
        (!ids.is_empty()).then(|| format!("{label} {}", ids.join(", ")))
    };
    [
        names(
            "clusters",
            policy.clusters.iter().map(|c| c.as_str()).collect(),
        ),
        names(
            "networks",
            policy.networks.iter().map(|n| n.as_str()).collect(),
        ),
    ]
    .into_iter()
    .flatten()
    .collect::<Vec<_>>()
    .join(" and ")
}

fn status_text(status: bool) -> &'static str {
    if status { "True" } else { "False" }
}

/// Cuts `message` to what the CRD accepts, at a character boundary.
fn bounded(message: &str) -> &str {
    &message[..message.floor_char_boundary(MAX_MESSAGE_BYTES)]
}

/// Whether `current` already says what `wanted` says for `generation`.
fn says(current: &Value, wanted: &WantedCondition, generation: Option<i64>) -> bool {
    let text = |key: &str| current.get(key).and_then(Value::as_str);
    text("status") == Some(status_text(wanted.status))
        && text("reason") == Some(wanted.reason.as_str())
        && text("message") == Some(bounded(&wanted.message))
        && current.get("observedGeneration").and_then(Value::as_i64) == generation
        && text("lastTransitionTime").is_some()
}

fn type_of(condition: &Value) -> Option<&str> {
    condition.get("type").and_then(Value::as_str)
}

/// The export's conditions with `wanted` applied, or `None` when they
/// already say it and nothing is to be written. `generation` is the export's
/// `metadata.generation`, `now` the time of a status flip.
pub fn updated_conditions(
    current: &[Value],
    wanted: &Wanted,
    generation: Option<i64>,
    now: Timestamp,
) -> Option<Vec<Value>> {
    let mut changed = false;
    let mut conditions: Vec<Value> = current
        .iter()
        .filter(|condition| {
            let removed = type_of(condition).is_some_and(|t| wanted.remove.contains(&t));
            changed |= removed;
            !removed
        })
        .cloned()
        .collect();
    for want in &wanted.set {
        let position = conditions
            .iter()
            .position(|c| type_of(c) == Some(want.type_));
        if let Some(index) = position
            && says(&conditions[index], want, generation)
        {
            continue;
        }
        changed = true;
        let previous = position.map(|index| &conditions[index]);
        let flipped = previous.is_none_or(|previous| {
            previous.get("status").and_then(Value::as_str) != Some(status_text(want.status))
        });
        let transition = match previous.and_then(|p| p.get("lastTransitionTime")) {
            Some(Value::String(kept)) if !flipped => Value::String(kept.clone()),
            _ => serde_json::to_value(Time(now)).unwrap_or(Value::Null),
        };
        let mut condition = Map::new();
        condition.insert("type".to_owned(), want.type_.into());
        condition.insert("status".to_owned(), status_text(want.status).into());
        condition.insert("reason".to_owned(), want.reason.clone().into());
        condition.insert("message".to_owned(), bounded(&want.message).into());
        if let Some(generation) = generation {
            condition.insert("observedGeneration".to_owned(), generation.into());
        }
        condition.insert("lastTransitionTime".to_owned(), transition);
        match position {
            Some(index) => conditions[index] = Value::Object(condition),
            None => conditions.push(Value::Object(condition)),
        }
    }
    changed.then_some(conditions)
}

#[cfg(test)]
mod tests;
