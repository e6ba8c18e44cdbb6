//! The import reconciler: Strait as the local cluster's MCS controller
//! (`kube.manageImports`). It follows the source's snapshots like the
//! export status writer: observe (the snapshot's ServiceImports, derived
//! Services and slices, plus the namespaces it watches itself) → desired
//! (`imports::plan`, from the cluster set with invalid objects left out, so
//! one bad object stops only itself) → diff (`imports::diff`) → apply, each
//! a function. Only the Lease holder plans and writes (its
//! `/debug/imports` shows the plan); a follower stays idle until it wins
//! the Lease, then plans from the snapshot it holds.
//!
//! Writes are server-side applies under the field manager `strait`
//! (forced: these objects are Strait's), so other controllers' fields
//! survive; an import is applied before its derived Service (whose owner
//! reference needs the import's uid) and the Service before its slices and
//! the import's `ips`, so one pass makes up to three rounds, each round's
//! responses feeding the next. Deletions remove only objects labelled as
//! Strait's; the API server's garbage collector follows the owner
//! references. A released import port is not handed out again for
//! `releaseGrace` (remembered by the leader; a new leader starts afresh).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::Api;
use kube::runtime::watcher;
use serde::Serialize;
use tokio::sync::watch;
use tokio::time::Instant;

use super::ImportOptions;
use super::lease::Leadership;
use super::writes::{Outcome, WriteError};
use crate::backoff::Backoff;
use crate::backoff::Retry;
use crate::discovery::kube::client::ClusterSource;
use crate::discovery::kube::{SourceSnapshot, SyncState};
use crate::discovery::observed::Observed;
use crate::imports::diff::{Change, applies};
use crate::imports::render::{Owners, desired_objects_of};
use crate::imports::scope::Settled;
use crate::imports::{
    ImportPlan, KeptPlan, MadePlan, PlanInputs, ReleasedPorts, RemotePods, Skipped, Sources,
    hold_until_answered, plan_reusing, remote_pods, replan, source_backends_reusing,
};
use crate::merge::MergedSet;
use crate::model::ServiceKey;
use crate::model::names::MCS_SERVICE_NAME_LABEL;
use crate::routing::RouteTable;
use tokio_util::task::AbortOnDropHandle;

mod objects;
mod round;
mod write;
mod written;

use objects::{
    apply_result, derived_owners, imported_with, is_family_refusal, owner_of, ready_with,
    services_of, squatted_by_another,
};
use written::WrittenObjects;

/// How many apply rounds one pass makes at most (import, then derived
/// Service, then slices and ips).
const ROUNDS: usize = 3;
/// How long a derived Service refused for its IP families is not retried.
const REFUSED_RETRY: Duration = Duration::from_secs(60);
/// How long an adopted derived Service keeps forwarding where the previous
/// implementation sent it after Strait took its ServiceImport over: every
/// gateway replica reads the import's new import ports and opens their
/// listeners first (a watch event and a reload, well under a second), so
/// no connection kube-proxy sends to a gateway finds its port closed.
const ADOPT_SETTLE: Duration = Duration::from_secs(5);
/// How often a pass renders every service, not only those whose inputs
/// changed: what a scoped pass cannot see (a slice of Strait's that names
/// no service it knows) is found within this.
const FULL_PASS_EVERY: Duration = Duration::from_secs(300);

/// What the reconciler knows, for metrics and `/debug/imports`.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ImportsReport {
    /// This replica holds the Lease and writes.
    pub leader: bool,
    /// Writes the server accepted, and those that failed.
    pub writes: u64,
    pub failed_writes: u64,
    /// The generation of the last snapshot planned (0: none yet).
    pub planned: u64,
    /// Every planned import with its VIPs, ports and state.
    pub imports: Arc<Vec<Arc<crate::imports::PlannedImport>>>,
    /// Services without an import, and why.
    pub skipped: BTreeMap<String, Skipped>,
    /// Service ports without an import port (the range is full).
    pub exhausted: Vec<String>,
    /// The last write error, if the last pass had one.
    pub last_error: Option<String>,
    /// Passes made while leading, and the objects they rendered in all:
    /// the work counters of `strait_control_plane_work_total`.
    pub passes: u64,
    pub rendered: u64,
    /// Imports planned in those passes (those kept from the pass before
    /// are not).
    pub imports_planned: u64,
    /// Services the last pass did not find as desired (writes pending or
    /// failed, or not allowed yet): the next pass renders them again.
    pub unsettled: usize,
    /// Writes of the current round not made yet: the write queue's depth.
    pub queued: usize,
    /// Seconds spent in writes (from a write slot to the server's answer)
    /// and in passes, in all: with `writes` and `passes`, their averages.
    pub write_seconds: f64,
    pub pass_seconds: f64,
}

impl ImportsReport {
    pub fn foreign(&self) -> usize {
        self.skipped
            .values()
            .filter(|s| **s == Skipped::ForeignImport)
            .count()
    }
}

/// Starts the reconciler on the local cluster's `client`.
pub(super) fn start(
    options: ImportOptions,
    client: Client,
    (snapshots, names_answered): (
        watch::Receiver<Arc<SourceSnapshot>>,
        watch::Receiver<Option<u64>>,
    ),
    leadership: Arc<Leadership>,
    retry: Retry,
) -> ImportTasks {
    let (reports, receiver) = watch::channel(ImportsReport::default());
    let (namespaces_sender, namespaces) = watch::channel(None);
    let namespaces_held = namespaces.clone();
    let namespace_task = tokio::spawn(watch_namespaces(client.clone(), namespaces_sender));
    let reconciler = Reconciler {
        client,
        leadership,
        reports,
        merged: None,
        local_routes: None,
        released: ReleasedPorts::default(),
        refused: BTreeMap::new(),
        settling: BTreeMap::new(),
        written: WrittenObjects::default(),
        pacer: super::writes::Pacer::new(&options.writes),
        quiet: None,
        settled: Settled::default(),
        full_pass_at: None,
        kept: None,
        made: None,
        names_answered,
        imported_since: HashMap::new(),
        options,
    };
    let task = tokio::spawn(async move {
        let _namespaces = AbortOnDropHandle::new(namespace_task);
        reconciler.run(snapshots, namespaces, retry).await;
    });
    ImportTasks {
        _task: AbortOnDropHandle::new(task),
        reports: receiver,
        namespaces: namespaces_held,
    }
}

/// The running reconciler, what it reports, and the local cluster's
/// namespaces it watches (on every replica, leading or not).
pub(super) struct ImportTasks {
    _task: AbortOnDropHandle<()>,
    pub(super) reports: watch::Receiver<ImportsReport>,
    /// `None` until listed.
    pub(super) namespaces: watch::Receiver<Option<BTreeSet<String>>>,
}

/// Keeps the set of the local cluster's namespaces (`None` until listed):
/// Strait never creates a namespace, so an import goes only where its
/// namespace exists. A namespace being deleted counts as gone: the API
/// server refuses new objects there, and its imports are to be removed,
/// not written again.
async fn watch_namespaces(client: Client, sender: watch::Sender<Option<BTreeSet<String>>>) {
    let api: Api<Namespace> = Api::all(client);
    let mut listing: BTreeSet<String> = BTreeSet::new();
    let live = |namespace: Namespace| {
        let terminating = namespace.metadata.deletion_timestamp.is_some();
        namespace.metadata.name.map(|name| (name, !terminating))
    };
    // Whole objects rather than metadata-only requests: a Namespace is small.
    let mut stream = watcher::watcher(api, watcher::Config::default()).boxed();
    while let Some(event) = stream.next().await {
        match event {
            Ok(watcher::Event::Init) => listing.clear(),
            Ok(watcher::Event::InitApply(namespace)) => {
                if let Some((name, true)) = live(namespace) {
                    listing.insert(name);
                }
            }
            Ok(watcher::Event::InitDone) => {
                sender.send_replace(Some(listing.clone()));
            }
            Ok(watcher::Event::Apply(namespace)) => {
                if let Some((name, live)) = live(namespace) {
                    sender.send_if_modified(|held| {
                        held.as_mut().is_some_and(|held| {
                            if live {
                                held.insert(name.clone())
                            } else {
                                held.remove(&name)
                            }
                        })
                    });
                }
            }
            Ok(watcher::Event::Delete(namespace)) => {
                if let Some(name) = namespace.metadata.name {
                    sender.send_if_modified(|held| {
                        held.as_mut().is_some_and(|held| held.remove(&name))
                    });
                }
            }
            Err(error) => {
                tracing::debug!(%error, "watching namespaces failed; retrying");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}

struct Reconciler {
    client: Client,
    options: ImportOptions,
    leadership: Arc<Leadership>,
    reports: watch::Sender<ImportsReport>,
    /// The last merge and the remote headless pods it gives, by the set
    /// revision it was made from.
    merged: Option<(u64, Merged)>,
    /// The local cluster's routes that `merged`'s pods were read from; the
    /// next build reuses their unchanged services.
    local_routes: Option<RouteTable>,
    /// Import ports released recently: not handed out for the grace period.
    released: ReleasedPorts,
    /// Services whose derived Service was refused for its IP families, until when.
    refused: BTreeMap<ServiceKey, Instant>,
    /// Services whose import was just taken over (`kube.adoptImports`):
    /// their derived Service is left as it is until when ([`ADOPT_SETTLE`]).
    settling: BTreeMap<ServiceKey, Instant>,
    /// Writes the snapshots may not show yet.
    written: WrittenObjects,
    /// Paces the writes at `imports.writes`.
    pacer: super::writes::Pacer,
    /// The inputs of the last pass that ended with nothing left to write:
    /// a pass over the same inputs is skipped (the echo of its own writes
    /// arriving, a snapshot that changed nothing of the imports).
    quiet: Option<PassInputs>,
    /// The services found as desired, and what from: a pass renders only
    /// the others ([`crate::imports::scope`]).
    settled: Settled,
    /// When the last pass over every service was made: one is made at
    /// least every [`FULL_PASS_EVERY`].
    full_pass_at: Option<Instant>,
    /// The last pass's plan, each import with what it was planned from:
    /// the next pass's first round plans again only the services whose
    /// inputs changed ([`plan_reusing`]).
    kept: Option<KeptPlan>,
    /// The first round's plan of the pass under way, kept once it is over.
    made: Option<MadePlan>,
    /// The newest snapshot this replica's DNS responder answers from, once
    /// a gateway serving DNS says ([`super::Controller::names_answered_from`]).
    names_answered: watch::Receiver<Option<u64>>,
    /// The first snapshot whose cluster set held each import with the
    /// ClusterSetIPs it is waiting to turn Ready with.
    imported_since: HashMap<ServiceKey, u64>,
}

/// What a pass's outcome depends on.
#[derive(Debug, Clone, PartialEq)]
struct PassInputs {
    set_revision: u64,
    /// The observed view after the overlay of pending writes: a copy that
    /// shares the view's maps, so comparing an unchanged view costs no walk
    /// over its objects.
    observed: Observed,
    refused: BTreeSet<ServiceKey>,
    settling: BTreeSet<ServiceKey>,
    may_write: bool,
    may_delete: bool,
    names_answered: Option<u64>,
}

/// One merge of the usable set, and the remote headless pods of the local
/// cluster's view of it.
#[derive(Clone)]
struct Merged {
    set: Arc<MergedSet>,
    pods: Arc<BTreeMap<ServiceKey, RemotePods>>,
    /// Each service's exporting clusters as the local cluster reaches them.
    sources: Arc<Sources>,
}

/// What one pass found.
struct Pass {
    plan: Option<ImportPlan>,
    /// Its inputs were those of the last quiet pass: nothing was planned.
    skipped: bool,
    /// Objects rendered in all its rounds.
    rendered: u64,
    /// Imports planned in all its rounds (those kept from the last pass
    /// are not).
    planned: u64,
    failed: bool,
    last_error: Option<String>,
}

impl Reconciler {
    async fn run(
        mut self,
        mut snapshots: watch::Receiver<Arc<SourceSnapshot>>,
        mut namespaces: watch::Receiver<Option<BTreeSet<String>>>,
        retry: Retry,
    ) {
        let mut leader = self.leadership.subscribe();
        let mut backoff = Backoff::new(retry);
        loop {
            let snapshot = snapshots.borrow_and_update().clone();
            let known = namespaces.borrow_and_update().clone();
            leader.borrow_and_update();
            let is_leader = self.leadership.is_leader();
            if !is_leader {
                // A follower plans nothing: it would only redo the leader's
                // work on every snapshot. It takes over from the snapshot
                // it holds when it wins the Lease.
                self.merged = None;
                self.local_routes = None;
                self.settled = Settled::default();
                self.full_pass_at = None;
                self.kept = None;
                self.made = None;
                self.imported_since.clear();
                self.reports.send_if_modified(|report| {
                    let was_leader = std::mem::replace(&mut report.leader, false);
                    if was_leader {
                        report.imports = Arc::default();
                        report.skipped.clear();
                        report.exhausted.clear();
                    }
                    was_leader
                });
                tokio::select! {
                    changed = leader.changed() => if changed.is_err() { return },
                    // Followed only so the next pass sees the latest.
                    changed = snapshots.changed() => if changed.is_err() { return },
                    changed = namespaces.changed() => if changed.is_err() { return },
                }
                continue;
            }
            let started = Instant::now();
            let mut pass = self.evaluate(&snapshot, known).await;
            if let (Some(made), Some(plan)) = (self.made.take(), pass.plan.as_ref()) {
                self.kept = Some(KeptPlan::of(made, plan));
            }
            let is_leader = self.leadership.is_leader();
            let spent = started.elapsed().as_secs_f64();
            if !pass.skipped {
                tracing::debug!(
                    generation = snapshot.generation,
                    rendered = pass.rendered,
                    took_ms = started.elapsed().as_millis(),
                    "import pass made"
                );
            }
            self.reports.send_modify(|report| {
                report.leader = is_leader;
                if !pass.skipped {
                    report.pass_seconds += spent;
                }
                report.planned = snapshot.generation;
                report.passes += u64::from(!pass.skipped);
                report.rendered += pass.rendered;
                report.imports_planned += pass.planned;
                report.last_error = pass.last_error.clone();
                // Moved, not copied: the plan holds every import.
                if let Some(plan) = pass.plan.take() {
                    report.imports = Arc::new(plan.imports);
                    report.skipped = plan
                        .skipped
                        .iter()
                        .map(|(key, why)| (key.to_string(), *why))
                        .collect();
                    report.exhausted = plan
                        .allocation
                        .exhausted
                        .iter()
                        .map(ToString::to_string)
                        .collect();
                }
            });
            let retry_at = if pass.failed {
                Some(Instant::now() + backoff.next_delay())
            } else {
                backoff.reset();
                // A refused service is tried again, and a settling one
                // taken over, when its wait is over.
                self.refused
                    .values()
                    .chain(self.settling.values())
                    .min()
                    .copied()
            };
            let names_answered = &mut self.names_answered;
            tokio::select! {
                changed = snapshots.changed() => if changed.is_err() { return },
                changed = namespaces.changed() => if changed.is_err() { return },
                changed = leader.changed() => if changed.is_err() { return },
                // The DNS responder caught up: an import held back may turn Ready.
                changed = names_answered.changed() => if changed.is_err() { return },
                () = crate::backoff::sleep_until(retry_at) => {}
            }
        }
    }

    fn merged(&mut self, snapshot: &SourceSnapshot) -> Option<Merged> {
        let set = snapshot.usable_set.as_ref()?;
        let merged = snapshot.usable_merged.clone()?;
        match &self.merged {
            Some((revision, merged)) if *revision == snapshot.set_revision => Some(merged.clone()),
            _ => {
                // The pods on other networks than the local cluster's.
                let previous = self.local_routes.take();
                self.local_routes = snapshot.local.as_deref().and_then(|local| {
                    RouteTable::build_reusing(set, &merged, local, previous.as_ref()).ok()
                });
                let pods = self
                    .local_routes
                    .as_ref()
                    .map(|table| remote_pods(table, self.options.max_headless_endpoints))
                    .unwrap_or_default();
                let previous_sources = self.merged.as_ref().map(|(_, m)| &*m.sources);
                let sources = self
                    .local_routes
                    .as_ref()
                    .map(|table| source_backends_reusing(table, previous_sources))
                    .unwrap_or_default();
                let merged = Merged {
                    set: merged,
                    pods: Arc::new(pods),
                    sources: Arc::new(sources),
                };
                self.merged = Some((snapshot.set_revision, merged.clone()));
                Some(merged)
            }
        }
    }

    async fn evaluate(
        &mut self,
        snapshot: &SourceSnapshot,
        namespaces: Option<BTreeSet<String>>,
    ) -> Pass {
        let mut pass = Pass {
            plan: None,
            skipped: false,
            rendered: 0,
            planned: 0,
            failed: false,
            last_error: None,
        };
        let local_synced = snapshot
            .clusters
            .iter()
            .any(|c| c.source == ClusterSource::Local.to_string() && c.state == SyncState::Synced);
        let Some(local) = snapshot.local_imports.clone() else {
            return pass;
        };
        let Some(Merged {
            set: merged,
            pods,
            sources,
        }) = self.merged(snapshot)
        else {
            return pass;
        };
        let now = Instant::now();
        self.refused.retain(|_, until| *until > now);
        self.settling.retain(|_, until| *until > now);
        let mut observed = local.observed.clone();
        observed.adopt_from = self.options.adopt_from.clone();
        let namespaces_known = namespaces.is_some();
        observed.namespaces = namespaces;
        self.written.overlay(&mut observed);
        // Nothing is written before every cluster has synced or failed
        // once, and nothing deleted while a cluster has never synced: its
        // exports are not known, and its imports must not go for that.
        let may_write = snapshot.settled && local_synced && namespaces_known;
        let may_delete = snapshot
            .clusters
            .iter()
            .all(|c| c.state != SyncState::Connecting);
        let names_answered = *self.names_answered.borrow_and_update();
        // What the pass starts from; if its first round writes nothing, the
        // inputs of a quiet pass (refusals and takeovers change only with
        // writes).
        let pass_inputs = PassInputs {
            set_revision: snapshot.set_revision,
            observed: observed.clone(),
            refused: self.refused.keys().cloned().collect(),
            settling: self.settling.keys().cloned().collect(),
            may_write,
            may_delete,
            names_answered,
        };
        if self.quiet.as_ref() == Some(&pass_inputs) {
            pass.skipped = true;
            return pass;
        }
        self.quiet = None;
        // After the first round, only the services the last round wrote
        // can need more (a derived Service after its import, slices after
        // their Service): the others were settled by the first.
        let mut touched: Option<BTreeSet<ServiceKey>> = None;
        for round in 0..ROUNDS {
            // The objects held by service, read once for the first round's
            // plan and its scope.
            let mut held_by_service = None;
            let refused: BTreeSet<ServiceKey> = self.refused.keys().cloned().collect();
            let settling: BTreeSet<ServiceKey> = self.settling.keys().cloned().collect();
            // A later round plans again only what the last one wrote, with
            // the import ports the first allocated.
            let earlier = if touched.is_some() {
                pass.plan.take()
            } else {
                None
            };
            let (recorded, released) = match earlier {
                Some(_) => (None, Default::default()),
                None => {
                    let recorded = observed.recorded_ports();
                    let released = self.released.observe(
                        &recorded,
                        now.into_std(),
                        self.options.release_grace,
                    );
                    (Some(recorded), released)
                }
            };
            let plan_inputs = PlanInputs {
                recorded: recorded.as_ref(),
                merged: &merged,
                observed: &observed,
                range: &self.options.range,
                released: &released,
                refused_families: &refused,
                settling: &settling,
                pods: &pods,
                sources: &sources,
                pod_ranges: None,
                quota: self.options.quota,
            };
            let mut plan = match (earlier, &touched) {
                (Some(mut earlier), Some(touched)) => {
                    replan(&mut earlier, &plan_inputs, touched);
                    pass.planned += u64::try_from(touched.len()).unwrap_or(u64::MAX);
                    earlier
                }
                _ => {
                    // The pass over every service that is due now and then
                    // plans them all again too.
                    let every_due = self
                        .full_pass_at
                        .is_none_or(|at| now.duration_since(at) >= FULL_PASS_EVERY);
                    let kept = self.kept.take().filter(|_| !every_due);
                    let held = observed.by_service();
                    let (plan, made) = plan_reusing(&plan_inputs, kept, &held);
                    pass.planned += u64::try_from(made.planned).unwrap_or(u64::MAX);
                    self.made = Some(made);
                    held_by_service = Some(held);
                    plan
                }
            };
            if let Some(answered) = names_answered {
                let since = &mut self.imported_since;
                hold_until_answered(&mut plan, |key, ips| {
                    if ready_with(&observed, key, ips) {
                        since.remove(key);
                        return true;
                    }
                    if !imported_with(snapshot, key, ips) {
                        since.remove(key);
                        return false;
                    }
                    // Routes built from this snapshot or any later one hold
                    // it: snapshots arriving faster than the routes are
                    // rebuilt do not keep it waiting.
                    let first = *since.entry(key.clone()).or_insert(snapshot.generation);
                    answered >= first
                });
                if !since.is_empty() {
                    let planned: HashSet<&ServiceKey> =
                        plan.imports.iter().map(|p| &p.key).collect();
                    since.retain(|key, _| planned.contains(key));
                }
            }
            let owners = derived_owners(&observed);
            let (rendered, mut pending) = match &touched {
                None => {
                    let held = held_by_service
                        .take()
                        .unwrap_or_else(|| observed.by_service());
                    let round = round::FirstRound {
                        plan: &plan,
                        merged: &merged,
                        observed: &observed,
                        held,
                    };
                    self.first_round(round, &owners, &local.api_version, now)
                }
                Some(touched) => {
                    let desired = desired_objects_of(
                        &plan,
                        &merged,
                        &observed,
                        &local.api_version,
                        Owners::Required,
                        Timestamp::now(),
                        Some(touched),
                    );
                    (desired.len(), applies(desired, &observed))
                }
            };
            pass.rendered += u64::try_from(rendered).unwrap_or(u64::MAX);
            if !may_delete {
                pending.retain(|change| matches!(change, Change::Apply { .. }));
            }
            pass.plan = Some(plan);
            if pending.is_empty() {
                // Only a pass that wrote nothing is quiet: after writes, the
                // pass their echo starts renders the services written, and
                // finds them as desired (settled) with what the server holds.
                if round == 0 {
                    self.quiet = Some(pass_inputs.clone());
                }
                break;
            }
            if !may_write || !self.leadership.is_leader() {
                break;
            }
            tracing::debug!(
                round,
                writes = pending.len(),
                planned_ms = now.elapsed().as_millis(),
                "reconciling imports"
            );
            let owner = owner_of(&owners);
            touched = Some(services_of(&pending, &owner));
            let admitted = self.admit(pending.iter(), &observed, &mut pass, now);
            let queued = admitted.len();
            self.reports.send_modify(|report| report.queued = queued);
            let chains = super::writes::chains(admitted, &owner);
            let leadership = &self.leadership;
            let (local_ref, observed_ref) = (&*local, &observed);
            let this = &*self;
            let outcomes = super::writes::run_chains(
                &chains,
                &self.options.writes,
                &self.pacer,
                &|| leadership.is_leader(),
                &|change| this.timed_write(change, local_ref, observed_ref),
            )
            .await;
            self.reports.send_modify(|report| report.queued = 0);
            let written = chains
                .iter()
                .zip(outcomes)
                .flat_map(|(chain, (children, status))| {
                    chain
                        .children
                        .iter()
                        .zip(children)
                        .chain(chain.status.iter().zip(status))
                })
                .map(|(change, outcome)| (*change, outcome))
                .collect::<Vec<_>>();
            for (change, outcome) in written {
                match outcome {
                    Outcome::NotTried => {}
                    Outcome::Written(result) => {
                        self.count(true);
                        tracing::info!(change = %change.describe(), "import object written");
                        self.written.remember(change, &observed, result.clone());
                        apply_result(&mut observed, change, result);
                    }
                    Outcome::Failed(error) => {
                        self.count(false);
                        pass.failed = true;
                        self.note_refusal(change, &error, now);
                        tracing::warn!(change = %change.describe(), %error,
                            "import object not written");
                        pass.last_error = Some(format!("{}: {error}", change.describe()));
                    }
                }
            }
            // Leadership lost during the round: the next leader takes over.
            if !self.leadership.is_leader() {
                return pass;
            }
            // A refused write is tried again after a backoff, not in the
            // next round of the same pass.
            if pass.failed {
                break;
            }
        }
        pass
    }

    /// The changes of a round that may be written: a Service of that name
    /// that Strait did not make, nor takes over, is never written over (a
    /// force would take its selector along), and no slice is written for
    /// it. Taking over a previous implementation's import starts its
    /// derived Service's wait.
    fn admit<'c>(
        &mut self,
        pending: impl Iterator<Item = &'c Change>,
        observed: &Observed,
        pass: &mut Pass,
        now: Instant,
    ) -> Vec<&'c Change> {
        let mut admitted = Vec::new();
        for change in pending {
            if let Some(squatted) = squatted_by_another(change, observed) {
                self.count(false);
                tracing::warn!(change = %change.describe(), service = %squatted,
                    "import object not written: a Service of that name is not Strait's");
                pass.last_error = Some(format!(
                    "{}: Service {squatted} exists and is not Strait's; delete or rename it",
                    change.describe()
                ));
                continue;
            }
            if let Change::Apply {
                object,
                status: false,
            } = change
                && object["kind"] == "ServiceImport"
                && observed
                    .get(object)
                    .is_some_and(|held| observed.adoptable(held))
            {
                let key = ServiceKey::new(
                    object["metadata"]["namespace"].as_str().unwrap_or_default(),
                    object["metadata"]["name"].as_str().unwrap_or_default(),
                );
                self.settling.insert(key, now + ADOPT_SETTLE);
            }
            admitted.push(change);
        }
        admitted
    }

    /// A derived Service refused for its IP families is not tried again for
    /// [`REFUSED_RETRY`].
    fn note_refusal(&mut self, change: &Change, error: &WriteError, now: Instant) {
        if let (Change::Apply { object, .. }, WriteError::Api(error)) = (change, error)
            && is_family_refusal(error)
            && let Some(service) = object["metadata"]["labels"][MCS_SERVICE_NAME_LABEL].as_str()
        {
            let namespace = object["metadata"]["namespace"].as_str().unwrap_or_default();
            self.refused
                .insert(ServiceKey::new(namespace, service), now + REFUSED_RETRY);
        }
    }

    fn count(&self, ok: bool) {
        self.reports.send_modify(|report| {
            if ok {
                report.writes += 1;
            } else {
                report.failed_writes += 1;
            }
        });
    }
}
