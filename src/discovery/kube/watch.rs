//! The task of one cluster: connect, discover the served API versions, run
//! one kube-rs watcher per kind and report every event to the hub.
//!
//! A watch that ends or fails is resumed by the kube watcher from its last
//! resource version, after a backoff; a `410 Gone` makes it relist by
//! itself. A failure before the kind's first complete list marks the kind
//! unsynced; after it, failures are ridden out (reported as trouble, the
//! kind stays synced) unless they last longer than `outage_grace`: then
//! the kind is unsynced and its watcher starts over, so a cluster back from
//! a long outage resyncs from a full list. The served versions are checked
//! again now and then; when they change the watchers restart.

use std::pin::pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use futures_util::future::join_all;
use kube::Client;
use kube::api::Api;
use kube::core::ApiResource;
use kube::runtime::watcher;
use tokio::sync::mpsc;

use super::KubeOptions;
use super::arrived::Arrived;
use super::client::{ClusterSource, Kind, Resources, discover, yaml_client};
use super::connect::read_timeout;
use super::report::{ClusterReport, HubMessage};
use super::store::StoreEvent;
use super::stored::{decode_adopting, key_of};
use crate::backoff::Backoff;
use crate::diagnostics::Origin;
use crate::discovery::objects::SliceInterner;

/// Longest wait for one discovery round trip.
const DISCOVERY_TIMEOUT: Duration = Duration::from_secs(15);

/// How a cluster task gets its client.
#[derive(Clone)]
pub(super) enum Connect {
    Client(Client),
    /// Kubeconfig text from a Secret, or why the Secret holds none.
    Kubeconfig(Result<String, String>),
}

impl std::fmt::Debug for Connect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Connect::Client(_) => f.write_str("Connect::Client"),
            // Never print credentials.
            Connect::Kubeconfig(_) => f.write_str("Connect::Kubeconfig"),
        }
    }
}

/// The identity of a cluster task's messages.
#[derive(Debug, Clone)]
pub(super) struct TaskId {
    pub(super) source: ClusterSource,
    pub(super) generation: u64,
}

struct Reporter {
    id: TaskId,
    hub: mpsc::Sender<HubMessage>,
}

impl Reporter {
    /// Sends a report; false when the hub is gone and the task should end.
    async fn send(&self, report: ClusterReport) -> bool {
        self.hub
            .send(HubMessage::Cluster {
                source: self.id.source.clone(),
                generation: self.id.generation,
                report,
            })
            .await
            .is_ok()
    }
}

/// Runs one cluster until the hub drops it.
pub(super) async fn run_cluster(
    id: TaskId,
    connect: Connect,
    options: Arc<KubeOptions>,
    hub: mpsc::Sender<HubMessage>,
) {
    let reporter = Reporter { id, hub };
    let source = reporter.id.source.clone();
    let client = match connect {
        Connect::Client(client) => client,
        Connect::Kubeconfig(Err(error)) => {
            // Nothing to retry until the Secret changes.
            reporter
                .send(ClusterReport::Failed { kind: None, error })
                .await;
            return;
        }
        Connect::Kubeconfig(Ok(text)) => {
            match yaml_client(&text, &source.to_string(), options.watch_timeout).await {
                Ok(client) => client,
                Err(error) => {
                    reporter
                        .send(ClusterReport::Failed {
                            kind: None,
                            error: error.to_string(),
                        })
                        .await;
                    return;
                }
            }
        }
    };
    let mut backoff = Backoff::new(options.retry);
    loop {
        let resources = match discover_within(&client, &source).await {
            Ok(resources) => resources,
            Err(error) => {
                tracing::debug!(cluster = %source, %error, "discovery failed");
                if !reporter
                    .send(ClusterReport::Failed { kind: None, error })
                    .await
                {
                    return;
                }
                tokio::time::sleep(backoff.next_delay()).await;
                continue;
            }
        };
        backoff.reset();
        let report = ClusterReport::Resources {
            watched: resources.served.iter().map(|(kind, _)| *kind).collect(),
            versions: resources
                .served
                .iter()
                .map(|(kind, resource)| (kind.name().to_owned(), resource.api_version.clone()))
                .collect(),
            missing: resources.missing.clone(),
        };
        if !reporter.send(report).await {
            return;
        }
        let watchers = join_all(
            resources
                .served
                .iter()
                .map(|(kind, resource)| watch_kind(&client, *kind, resource, &options, &reporter)),
        );
        tokio::select! {
            // Every watcher ends only when the hub is gone.
            _ = watchers => return,
            () = served_versions_change(&client, &source, &resources, options.rediscover_every) => {
                tracing::info!(cluster = %source, "served API versions changed; watching again");
            }
        }
    }
}

async fn discover_within(client: &Client, source: &ClusterSource) -> Result<Resources, String> {
    match tokio::time::timeout(DISCOVERY_TIMEOUT, discover(client, source)).await {
        Ok(Ok(resources)) => Ok(resources),
        Ok(Err(error)) => Err(format!("api discovery failed: {error}")),
        Err(_) => Err(format!(
            "api discovery timed out after {}",
            humantime::format_duration(DISCOVERY_TIMEOUT)
        )),
    }
}

/// Resolves when discovery, asked every `every`, answers differently.
async fn served_versions_change(
    client: &Client,
    source: &ClusterSource,
    current: &Resources,
    every: Duration,
) {
    loop {
        tokio::time::sleep(every).await;
        // A failed rediscovery says nothing new: the watchers report failures.
        if let Ok(resources) = discover_within(client, source).await
            && resources != *current
        {
            return;
        }
    }
}

/// The label selector of a kind in a remote cluster: the import objects
/// another cluster's Strait writes there (derived Services, and the
/// EndpointSlices it manages) are never read. Nothing of the set comes
/// from them, and each of that Strait's writes would otherwise wake every
/// replica of every other cluster. The local cluster's are read: they are
/// this cluster's import objects.
pub(super) fn remote_selector(kind: Kind, local: bool) -> Option<String> {
    use crate::model::names::{
        ENDPOINTSLICE_MANAGED_BY_LABEL, IMPORTED_SLICE_MANAGER, MANAGED_BY_LABEL, MANAGED_BY_VALUE,
    };
    match (kind, local) {
        (_, true) => None,
        (Kind::Service, false) => Some(format!("{MANAGED_BY_LABEL}!={MANAGED_BY_VALUE}")),
        (Kind::EndpointSlice, false) => Some(format!(
            "{ENDPOINTSLICE_MANAGED_BY_LABEL}!={IMPORTED_SLICE_MANAGER}"
        )),
        _ => None,
    }
}

/// Watches one kind for as long as the hub listens.
///
/// One kube-runtime watcher serves the kind for as long as it works: after
/// an error it is polled again (after a backoff) and resumes from its last
/// resource version, so a dropped or reset watch and a short API outage
/// cost no relist. An error before the first complete list counts against
/// the sync state at once; after it, only an outage longer than
/// `outage_grace` does, and then the watcher starts over from a list.
async fn watch_kind(
    client: &Client,
    kind: Kind,
    resource: &ApiResource,
    options: &KubeOptions,
    reporter: &Reporter,
) {
    let api: Api<Arrived> = Api::all_with(client.clone(), resource);
    let timeout = u32::try_from(options.watch_timeout.as_secs())
        .unwrap_or(u32::MAX)
        .max(1);
    let local = reporter.id.source == ClusterSource::Local;
    let mut config = watcher::Config::default().timeout(timeout);
    if let Some(selector) = remote_selector(kind, local) {
        config = config.labels(&selector);
    }
    let origin = Arc::new(Origin::file(format!("cluster {} API", reporter.id.source)));
    let adopt_from = options.adopt_from.as_deref();
    let mut backoff = Backoff::new(options.retry);
    // An error a retry away from the last one belongs to the same outage;
    // one that comes later follows a watch that worked in between.
    let same_outage = options.retry.max + read_timeout(options.watch_timeout);
    let mut interner = SliceInterner::default();
    loop {
        let mut stream = pin!(watcher(api.clone(), config.clone()));
        let mut listed = false;
        let mut outage = Outage::default();
        while let Some(item) = stream.next().await {
            let event = match item {
                Ok(watcher::Event::Init) => StoreEvent::Init,
                Ok(watcher::Event::InitApply(object)) => {
                    let (mut key, mut stored) =
                        decode_adopting(resource, &object, &origin, local, adopt_from);
                    stored.intern(&mut key, &mut interner);
                    StoreEvent::InitApply(key, stored)
                }
                Ok(watcher::Event::InitDone) => {
                    listed = true;
                    StoreEvent::InitDone
                }
                Ok(watcher::Event::Apply(object)) => {
                    let (mut key, mut stored) =
                        decode_adopting(resource, &object, &origin, local, adopt_from);
                    stored.intern(&mut key, &mut interner);
                    StoreEvent::Apply(key, stored)
                }
                Ok(watcher::Event::Delete(object)) => StoreEvent::Delete(key_of(&object)),
                Err(error) => {
                    let gone =
                        matches!(&error, watcher::Error::WatchError(status) if status.code == 410);
                    if gone {
                        // Our resource version is too old: the watcher
                        // relists by itself, and the list's events follow.
                        tracing::debug!(cluster = %reporter.id.source, kind = kind.name(),
                            "resource version expired; relisting");
                        continue;
                    }
                    let error = format!("{} watch: {error}", kind.name());
                    let now = Instant::now();
                    let verdict = if listed {
                        outage.failed(now, same_outage, options.outage_grace)
                    } else {
                        Verdict::Unsynced
                    };
                    tracing::debug!(cluster = %reporter.id.source, kind = kind.name(), %error,
                        ?verdict, "watch failed");
                    let report = match verdict {
                        Verdict::RideOut => ClusterReport::Trouble { kind, error },
                        Verdict::Unsynced | Verdict::StartOver => ClusterReport::Failed {
                            kind: Some(kind),
                            error,
                        },
                    };
                    if !reporter.send(report).await {
                        return;
                    }
                    if verdict == Verdict::StartOver {
                        break;
                    }
                    // The watcher resumes at the next poll: from its resource
                    // version once listed, else with a new list.
                    tokio::time::sleep(backoff.next_delay()).await;
                    continue;
                }
            };
            backoff.reset();
            outage = Outage::default();
            if !reporter
                .send(ClusterReport::Event(kind, Box::new(event)))
                .await
            {
                return;
            }
        }
        tokio::time::sleep(backoff.next_delay()).await;
    }
}

/// What a watch error after the first complete list means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    /// A transient failure: resume from the resource version, stay synced.
    RideOut,
    /// Not listed yet: the kind is not synced.
    Unsynced,
    /// Failing for longer than the grace: unsynced, and relisted once the
    /// API answers again.
    StartOver,
}

/// The run of consecutive watch errors a watcher is in, if any.
#[derive(Debug, Default)]
struct Outage {
    /// When the first and the latest error of the run came.
    first: Option<Instant>,
    last: Option<Instant>,
}

impl Outage {
    /// Records an error at `now`. An error more than `same_outage` after
    /// the previous one starts a new run (the watch worked in between);
    /// a run longer than `grace` is an outage the cluster is unsynced for.
    fn failed(&mut self, now: Instant, same_outage: Duration, grace: Duration) -> Verdict {
        let continues = self
            .last
            .is_some_and(|last| now.saturating_duration_since(last) <= same_outage);
        if !continues {
            self.first = Some(now);
        }
        self.last = Some(now);
        let first = self.first.unwrap_or(now);
        if now.saturating_duration_since(first) >= grace {
            Verdict::StartOver
        } else {
            Verdict::RideOut
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAME: Duration = Duration::from_secs(10);
    const GRACE: Duration = Duration::from_secs(30);

    #[test]
    fn errors_are_ridden_out_until_the_grace_ends() {
        let start = Instant::now();
        let mut outage = Outage::default();
        for seconds in [0, 5, 12, 20, 29] {
            let verdict = outage.failed(start + Duration::from_secs(seconds), SAME, GRACE);
            assert_eq!(verdict, Verdict::RideOut, "at {seconds} s");
        }
        assert_eq!(
            outage.failed(start + Duration::from_secs(31), SAME, GRACE),
            Verdict::StartOver
        );
    }

    #[test]
    fn an_error_long_after_the_last_starts_a_new_run() {
        let start = Instant::now();
        let mut outage = Outage::default();
        assert_eq!(outage.failed(start, SAME, GRACE), Verdict::RideOut);
        // The watch worked for a minute in between: not a 60 s outage.
        let later = start + Duration::from_secs(60);
        assert_eq!(outage.failed(later, SAME, GRACE), Verdict::RideOut);
        assert_eq!(
            outage.failed(later + Duration::from_secs(8), SAME, GRACE),
            Verdict::RideOut
        );
    }

    #[test]
    fn a_zero_grace_starts_over_at_the_first_error() {
        let mut outage = Outage::default();
        assert_eq!(
            outage.failed(Instant::now(), SAME, Duration::ZERO),
            Verdict::StartOver
        );
    }
}
