//! A pass's first round: which services it renders and diffs (those whose
//! inputs changed since they were last found as desired), and settling
//! those found so.

use std::collections::{BTreeSet, HashMap};

use k8s_openapi::jiff::Timestamp;
use tokio::time::Instant;

use super::{FULL_PASS_EVERY, Reconciler, owner_of, services_of};
use crate::discovery::observed::{Observed, ObservedObject};
use crate::imports::ImportPlan;
use crate::imports::diff::{Change, changes, changes_of};
use crate::imports::render::{Owners, desired_objects_of};
use crate::imports::scope::{PassView, Scope};
use crate::merge::MergedSet;
use crate::model::ServiceKey;

/// What a pass's first round reads: its plan, the merge the plan was
/// made from, and what the cluster holds, also by service.
pub(super) struct FirstRound<'a> {
    pub(super) plan: &'a ImportPlan,
    pub(super) merged: &'a MergedSet,
    pub(super) observed: &'a Observed,
    pub(super) held: HashMap<ServiceKey, Vec<&'a ObservedObject>>,
}

impl Reconciler {
    /// A pass's first round: renders and diffs only the services whose
    /// inputs changed since they were last found as desired (every
    /// service after a shared input changed, and every [`FULL_PASS_EVERY`]),
    /// and settles those found so again. The objects rendered, and the
    /// writes.
    pub(super) fn first_round(
        &mut self,
        round: FirstRound<'_>,
        owners: &HashMap<(String, String), String>,
        api_version: &str,
        now: Instant,
    ) -> (usize, Vec<Change>) {
        let FirstRound {
            plan,
            merged,
            observed,
            held,
        } = round;
        let refused: BTreeSet<ServiceKey> = self.refused.keys().cloned().collect();
        let settling: BTreeSet<ServiceKey> = self.settling.keys().cloned().collect();
        let view = PassView::new(plan, merged, observed, held, &refused, &settling);
        let every = self
            .full_pass_at
            .is_none_or(|at| now.duration_since(at) >= FULL_PASS_EVERY);
        let scope = self.settled.scope(&view, every);
        if scope == Scope::Every {
            self.full_pass_at = Some(now);
        }
        let desired = desired_objects_of(
            plan,
            merged,
            observed,
            api_version,
            Owners::Required,
            Timestamp::now(),
            scope.services(),
        );
        let rendered = desired.len();
        let pending = match scope.services() {
            None => changes(desired, observed),
            Some(services) => changes_of(desired, observed, view.held_in(services)),
        };
        let unsettled = services_of(&pending, &owner_of(owners));
        self.settled.settle(&view, &scope, &unsettled);
        let unsettled = self.settled.unsettled(&view);
        self.reports.send_if_modified(|report| {
            std::mem::replace(&mut report.unsettled, unsettled) != unsettled
        });
        (rendered, pending)
    }
}
