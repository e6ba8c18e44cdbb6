//! MCS conflicts (KEP-1645): which properties the constituents of a
//! multi-cluster service must agree on, and the condition message that says
//! who won. Every conflict is resolved in favour of the oldest export.

use std::fmt;

use serde::Serialize;

use crate::model::ClusterId;

/// A reason of the `Conflict` condition, spelled as KEP-1645 spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum ConflictReason {
    PortConflict,
    TypeConflict,
    SessionAffinityConflict,
    SessionAffinityConfigConflict,
    IPFamilyConflict,
    InternalTrafficPolicyConflict,
    TrafficDistributionConflict,
    LabelsConflict,
    AnnotationsConflict,
    /// Not a KEP-1645 reason: the constituents' `strait.dev/allowed-*`
    /// annotations differ.
    AccessPolicyConflict,
    /// Not a KEP-1645 reason: the constituents' `strait.dev/proxy-protocol`
    /// annotations differ.
    ProxyProtocolConflict,
    /// Not a KEP-1645 reason: the constituents' `strait.dev/locality*` or
    /// `strait.dev/fence-*` annotations differ.
    RoutingPolicyConflict,
}

impl ConflictReason {
    /// What the constituents disagree on, as the condition message names it.
    fn subject(self) -> &'static str {
        match self {
            ConflictReason::PortConflict => "ports",
            ConflictReason::TypeConflict => "type",
            ConflictReason::SessionAffinityConflict => "session affinity",
            ConflictReason::SessionAffinityConfigConflict => "session affinity config",
            ConflictReason::IPFamilyConflict => "IP families",
            ConflictReason::InternalTrafficPolicyConflict => "internal traffic policy",
            ConflictReason::TrafficDistributionConflict => "traffic distribution",
            ConflictReason::LabelsConflict => "exported labels",
            ConflictReason::AnnotationsConflict => "exported annotations",
            ConflictReason::AccessPolicyConflict => "access policy",
            ConflictReason::ProxyProtocolConflict => "PROXY protocol",
            ConflictReason::RoutingPolicyConflict => "routing policy",
        }
    }
}

impl fmt::Display for ConflictReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// One raised conflict with its KEP-style message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Conflict {
    pub reason: ConflictReason,
    pub message: String,
}

/// Compares one property across the constituents, given oldest export first.
/// Returns the conflict when any constituent disagrees with the oldest.
pub(super) fn compare<T: PartialEq>(
    reason: ConflictReason,
    values: &[(&ClusterId, T)],
    describe: impl Fn(&T) -> String,
) -> Option<Conflict> {
    let ((winner, winning), rest) = values.split_first()?;
    let disagreeing = rest.iter().filter(|(_, value)| value != winning).count();
    if disagreeing == 0 {
        return None;
    }
    let message = format!(
        "Conflicting {}. Using {} from oldest service export in \"{winner}\". {disagreeing}/{} clusters disagree.",
        reason.subject(),
        describe(winning),
        values.len(),
    );
    Some(Conflict { reason, message })
}

/// The port conflict message: the merged service exposes the union of ports.
pub(super) fn port_conflict(winner: &ClusterId, disagreeing: usize, total: usize) -> Conflict {
    Conflict {
        reason: ConflictReason::PortConflict,
        message: format!(
            "Conflicting ports. Exposing the union of ports; where two ports collide by name or by protocol and number, using the port from oldest service export in \"{winner}\". {disagreeing}/{total} clusters disagree."
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(value: &str) -> ClusterId {
        ClusterId::new(value).expect("valid test id")
    }

    #[test]
    fn agreement_raises_nothing() {
        let (c1, c2) = (id("c1"), id("c2"));
        let values = [(&c1, "None"), (&c2, "None")];
        assert_eq!(
            compare(ConflictReason::SessionAffinityConflict, &values, |v| v
                .to_string()),
            None
        );
    }

    #[test]
    fn message_names_the_winner_and_the_disagreeing_count() {
        let (c1, c2, c3) = (id("c1"), id("c2"), id("c3"));
        let values = [
            (&c1, "ClusterSetIP"),
            (&c2, "Headless"),
            (&c3, "ClusterSetIP"),
        ];
        let conflict = compare(ConflictReason::TypeConflict, &values, |v| format!("{v:?}"))
            .expect("a conflict");
        assert_eq!(conflict.reason, ConflictReason::TypeConflict);
        assert_eq!(
            conflict.message,
            "Conflicting type. Using \"ClusterSetIP\" from oldest service export in \"c1\". 1/3 clusters disagree."
        );
    }
}
