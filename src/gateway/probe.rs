//! Asking every peer gateway about itself, periodically: a `GET` of
//! `/strait.dev/about/v1` (docs/tunnel-protocol.md §11) on the tunnel
//! pools as traffic and the feed go (QUIC first under `auto`), the very
//! connections traffic takes. It tells whether each
//! gateway address of each cluster of the set answers a mutually
//! authenticated request from this gateway, how far its clock is from
//! ours, what network its cluster says it is on, and whether its network
//! map agrees with ours. `/debug/status` shows the last answer of each
//! gateway and `strait check` judges it; nothing here steers traffic.
//!
//! Cost: one small request per peer gateway per interval, a few at a
//! time, on a connection the pool holds anyway (or one handshake when it
//! holds none).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use serde::Serialize;
use tokio::task::{JoinHandle, JoinSet};
use tokio_util::sync::CancellationToken;

use crate::controller::Controller;
use crate::discovery::kube::KubeHandle;
use crate::export_status::{AccountOf, ImportAccount, PeerImports};
use crate::ingress::about::{ABOUT_LIMIT, ABOUT_PATH, About};
use crate::model::{ClusterId, ClusterSet, GatewayAddress};
use crate::state::GatewayState;

/// How often each peer gateway is asked (a fifth more at random, so the
/// replicas of a set do not ask in step).
const INTERVAL: Duration = Duration::from_secs(30);
/// The first round waits this long for the cluster set to be read.
const FIRST_ROUND: Duration = Duration::from_secs(5);
/// How long one answer may take, handshake included.
const TIMEOUT: Duration = Duration::from_secs(5);
/// How many gateways are asked at once.
const CONCURRENCY: usize = 8;

/// The last answer of one peer gateway, as `/debug/status` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Probe {
    /// When it was asked (RFC 3339).
    pub checked_at: String,
    /// Why it did not answer; `None` when it did.
    pub error: Option<String>,
    /// Round trip of the request, handshake included when the pool had
    /// no connection.
    pub round_trip_ms: Option<u64>,
    /// Its clock minus ours at the middle of the request, in milliseconds.
    pub clock_skew_ms: Option<i64>,
    /// The network its cluster says it is on.
    pub network: Option<String>,
    /// Where its network map and ours differ, one line per cluster;
    /// empty when they agree.
    pub network_map_differences: Vec<String>,
    /// Which of this cluster's exports its cluster imports, when it said
    /// (`/debug/status` shows it per cluster, counted).
    #[serde(skip)]
    pub imports: Option<Arc<ImportAccount>>,
}

/// Every peer gateway's last answer.
#[derive(Debug, Default)]
pub struct Probes {
    last: Mutex<BTreeMap<GatewayAddress, Probe>>,
}

impl Probes {
    /// The last answer of `gateway`, if it was asked yet.
    pub fn get(&self, gateway: &GatewayAddress) -> Option<Probe> {
        self.last
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(gateway)
            .cloned()
    }
}

/// Asks each remote cluster's gateways every interval, until `stop`;
/// hands what they say of the local exports to `controller`'s export
/// status writer.
pub(super) fn spawn(
    state: &Arc<GatewayState>,
    kube: &KubeHandle,
    controller: Option<Arc<Controller>>,
    stop: &CancellationToken,
) -> (JoinHandle<()>, Arc<Probes>) {
    let probes = Arc::new(Probes::default());
    let (state, kube, stop, task_probes) =
        (state.clone(), kube.clone(), stop.clone(), probes.clone());
    let task = tokio::spawn(async move {
        let mut wait = FIRST_ROUND;
        // Each cluster's last account: kept through a round its gateway
        // does not answer, so one lost answer rewrites no export status.
        let mut accounts: BTreeMap<ClusterId, Arc<ImportAccount>> = BTreeMap::new();
        loop {
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                () = stop.cancelled() => return,
            }
            wait = INTERVAL + INTERVAL.mul_f64(fastrand::f64() / 5.0);
            let snapshot = kube.snapshot();
            let Some(set) = snapshot.usable_set.clone() else {
                continue;
            };
            let own = state.routes.load().viewer().clone();
            let gateways: Vec<(ClusterId, GatewayAddress)> = set
                .clusters
                .values()
                .filter(|cluster| cluster.id != own)
                .flat_map(|cluster| {
                    cluster
                        .gateways
                        .iter()
                        .map(|gateway| (cluster.id.clone(), gateway.clone()))
                })
                .collect();
            let answers = tokio::select! {
                answers = round(&state, gateways.clone()) => answers,
                () = stop.cancelled() => return,
            };
            if let Some(controller) = &controller {
                let peers = peer_imports(&set, &own, &gateways, &answers, &mut accounts);
                controller.peer_imports_answered(Arc::new(peers));
            }
            *task_probes
                .last
                .lock()
                .unwrap_or_else(PoisonError::into_inner) = answers;
        }
    });
    (task, probes)
}

/// What each other cluster of `set` last said of the local exports: this
/// round's answer from any of its gateways, else the last one kept in
/// `accounts` (which forgets clusters that left the set).
fn peer_imports(
    set: &ClusterSet,
    own: &ClusterId,
    gateways: &[(ClusterId, GatewayAddress)],
    answers: &BTreeMap<GatewayAddress, Probe>,
    accounts: &mut BTreeMap<ClusterId, Arc<ImportAccount>>,
) -> PeerImports {
    for (cluster, gateway) in gateways {
        if let Some(account) = answers.get(gateway).and_then(|probe| probe.imports.clone()) {
            accounts.insert(cluster.clone(), account);
        }
    }
    accounts.retain(|cluster, _| set.clusters.contains_key(cluster));
    PeerImports {
        clusters: set
            .clusters
            .values()
            .filter(|cluster| cluster.id != *own)
            .map(|cluster| {
                let account = accounts.get(&cluster.id).cloned();
                (cluster.id.clone(), (cluster.network.clone(), account))
            })
            .collect(),
    }
}

/// Says, for an exporter that asks, which of its services this cluster
/// imports: from the source's latest snapshot and the namespaces the
/// import reconciler watches. `None` when this gateway writes no imports.
pub(super) fn account_of(
    kube: Option<&KubeHandle>,
    controller: Option<&Controller>,
) -> Option<AccountOf> {
    let kube = kube?.clone();
    let namespaces = controller?.namespaces()?;
    Some(Arc::new(move |exporter: &ClusterId| {
        let snapshot = kube.snapshot();
        let merged = snapshot.usable_merged.as_deref()?;
        let observed = &snapshot.local_imports.as_deref()?.observed;
        let namespaces = namespaces.borrow();
        Some(ImportAccount::of(
            exporter,
            merged,
            namespaces.as_ref()?,
            observed,
        ))
    }))
}

/// Asks every gateway, a few at a time.
async fn round(
    state: &Arc<GatewayState>,
    gateways: Vec<(ClusterId, GatewayAddress)>,
) -> BTreeMap<GatewayAddress, Probe> {
    let mut answers = BTreeMap::new();
    let mut asking = JoinSet::new();
    for (cluster, gateway) in gateways {
        while asking.len() >= CONCURRENCY {
            if let Some(Ok((gateway, probe))) = asking.join_next().await {
                answers.insert(gateway, probe);
            }
        }
        let state = state.clone();
        asking.spawn(async move {
            let probe = ask(&state, &cluster, &gateway).await;
            (gateway, probe)
        });
    }
    while let Some(answer) = asking.join_next().await {
        if let Ok((gateway, probe)) = answer {
            answers.insert(gateway, probe);
        }
    }
    answers
}

/// One request to one gateway, whose certificate must name `cluster`.
async fn ask(state: &GatewayState, cluster: &ClusterId, gateway: &GatewayAddress) -> Probe {
    let sent = SystemTime::now();
    let started = tokio::time::Instant::now();
    let answer = tokio::time::timeout(TIMEOUT, async {
        // As traffic and the feed go (QUIC first under `auto`): the
        // question costs no connection traffic does not hold.
        let mut stream =
            super::peers::open_feed(state, gateway, std::slice::from_ref(cluster), ABOUT_PATH)
                .await
                .map_err(|e| e.to_string())?;
        let mut body = Vec::new();
        while let Some(data) = stream.next_bytes().await {
            let data = data?;
            if body.len() + data.len() > ABOUT_LIMIT {
                return Err(format!("the answer is over {ABOUT_LIMIT} bytes"));
            }
            body.extend_from_slice(&data);
        }
        serde_json::from_slice::<About>(&body).map_err(|e| format!("not an answer: {e}"))
    })
    .await
    .unwrap_or_else(|_| Err(format!("no answer within {TIMEOUT:?}")));
    let round_trip = started.elapsed();
    judge(cluster, answer, &state.network_map, sent, round_trip)
}

/// What one answer says, against this gateway's own view: pure.
pub fn judge(
    cluster: &ClusterId,
    answer: Result<About, String>,
    ours: &BTreeMap<String, String>,
    sent: SystemTime,
    round_trip: Duration,
) -> Probe {
    let checked_at = humantime::format_rfc3339_seconds(sent).to_string();
    let about = match answer {
        Ok(about) if about.cluster == cluster.as_str() => about,
        Ok(about) => {
            return failed(
                checked_at,
                format!("it says it is cluster {}, not {cluster}", about.cluster),
            );
        }
        Err(error) => return failed(checked_at, error),
    };
    let millis = |at: SystemTime| {
        at.duration_since(SystemTime::UNIX_EPOCH)
            .map(|since| i64::try_from(since.as_millis()).unwrap_or(i64::MAX))
            .unwrap_or_default()
    };
    let middle = millis(sent + round_trip / 2);
    let theirs = i64::try_from(about.time_ms).unwrap_or(i64::MAX);
    Probe {
        checked_at,
        error: None,
        round_trip_ms: Some(u64::try_from(round_trip.as_millis()).unwrap_or(u64::MAX)),
        clock_skew_ms: Some(theirs.saturating_sub(middle)),
        network: Some(about.network),
        network_map_differences: map_differences(ours, &about.networks),
        imports: about.imports.map(Arc::new),
    }
}

fn failed(checked_at: String, error: String) -> Probe {
    Probe {
        checked_at,
        error: Some(error),
        round_trip_ms: None,
        clock_skew_ms: None,
        network: None,
        network_map_differences: Vec::new(),
        imports: None,
    }
}

/// Each cluster the two network maps (gateway.yaml `networks`) do not
/// agree on; none when neither has one.
fn map_differences(
    ours: &BTreeMap<String, String>,
    theirs: &BTreeMap<String, String>,
) -> Vec<String> {
    let mut clusters: Vec<&String> = ours.keys().chain(theirs.keys()).collect();
    clusters.sort();
    clusters.dedup();
    clusters
        .into_iter()
        .filter_map(|cluster| match (ours.get(cluster), theirs.get(cluster)) {
            (Some(here), Some(there)) if here == there => None,
            (Some(here), Some(there)) => Some(format!("{cluster}: {here} here, {there} there")),
            (Some(here), None) => Some(format!("{cluster}: {here} here, not in its map")),
            (None, Some(there)) => Some(format!("{cluster}: not in our map, {there} there")),
            (None, None) => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::time::{Duration, SystemTime};

    use super::judge;
    use crate::ingress::about::About;
    use crate::merge::merge;
    use crate::model::ClusterId;
    use crate::routing::RouteTable;
    use crate::testing::{cluster_set, exported_http};

    fn table() -> RouteTable {
        let set = cluster_set(&[
            ("c1", "net-a", exported_http("cart", "10.1.0.5")),
            ("c3", "net-b", exported_http("cart", "10.3.0.5")),
        ]);
        RouteTable::build(&set, &merge(&set), "c1").expect("viewer")
    }

    fn map(entries: &[(&str, &str)]) -> BTreeMap<String, String> {
        entries
            .iter()
            .map(|(c, n)| ((*c).to_owned(), (*n).to_owned()))
            .collect()
    }

    fn at(ms: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_millis(ms)
    }

    fn c3() -> ClusterId {
        ClusterId::new("c3").expect("id")
    }

    fn c3_about(networks: BTreeMap<String, String>, time_ms: u64) -> About {
        let mut about = About::of(&table(), &networks, at(time_ms));
        about.cluster = "c3".to_owned();
        about.network = "net-b".to_owned();
        about
    }

    #[test]
    fn an_answer_gives_the_skew_at_the_middle_of_the_request_and_agrees_with_our_map() {
        let ours = map(&[("c1", "net-a"), ("c3", "net-b")]);
        // Sent at 1000 ms, answered at 1100 ms: the middle is 1050 ms.
        let about = c3_about(ours.clone(), 1_050 + 3_000);
        let probe = judge(
            &c3(),
            Ok(about),
            &ours,
            at(1_000),
            Duration::from_millis(100),
        );
        assert_eq!(probe.error, None);
        assert_eq!(probe.clock_skew_ms, Some(3_000));
        assert_eq!(probe.round_trip_ms, Some(100));
        assert_eq!(probe.network.as_deref(), Some("net-b"));
        assert!(probe.network_map_differences.is_empty(), "{probe:?}");
    }

    #[test]
    fn a_map_that_differs_is_named_cluster_by_cluster() {
        let ours = map(&[("c1", "net-a"), ("c3", "net-b")]);
        let theirs = map(&[("c1", "net-c"), ("c9", "net-a")]);
        let probe = judge(&c3(), Ok(c3_about(theirs, 0)), &ours, at(0), Duration::ZERO);
        assert_eq!(
            probe.network_map_differences,
            [
                "c1: net-a here, net-c there",
                "c3: net-b here, not in its map",
                "c9: not in our map, net-a there",
            ]
        );
    }

    #[test]
    fn no_map_on_either_side_agrees_and_a_map_on_one_side_only_does_not() {
        let none = BTreeMap::new();
        let probe = judge(
            &c3(),
            Ok(c3_about(none.clone(), 0)),
            &none,
            at(0),
            Duration::ZERO,
        );
        assert!(probe.network_map_differences.is_empty(), "{probe:?}");
        let theirs = map(&[("c1", "net-a")]);
        let probe = judge(&c3(), Ok(c3_about(theirs, 0)), &none, at(0), Duration::ZERO);
        assert_eq!(
            probe.network_map_differences,
            ["c1: not in our map, net-a there"]
        );
    }

    #[test]
    fn an_answer_from_another_cluster_or_none_is_an_error() {
        let none = BTreeMap::new();
        let about = About::of(&table(), &none, at(0)); // says c1
        let probe = judge(&c3(), Ok(about), &none, at(0), Duration::ZERO);
        assert_eq!(
            probe.error.as_deref(),
            Some("it says it is cluster c1, not c3")
        );
        let probe = judge(
            &c3(),
            Err("refused".to_owned()),
            &none,
            at(0),
            Duration::ZERO,
        );
        assert_eq!(probe.error.as_deref(), Some("refused"));
        assert_eq!(probe.clock_skew_ms, None);
    }

    #[test]
    fn the_about_answer_carries_the_configured_map() {
        let about = About::of(&table(), &map(&[("c3", "net-b")]), at(1_234));
        assert_eq!(about.cluster, "c1");
        assert_eq!(about.network, "net-a");
        assert_eq!(about.time_ms, 1_234);
        assert_eq!(about.networks, map(&[("c3", "net-b")]));
    }
}
