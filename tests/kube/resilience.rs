//! API trouble the watchers ride out: a watch connection reset mid-stream,
//! an API server restart, a half-open connection, a list that never
//! answers. What is asserted is what a gateway's users see: no relist
//! (counted at the server), no unsynced state in any snapshot, no change of
//! the routes, and changes made after the trouble still arrive.

use std::sync::Mutex;

use super::*;

/// Every resource the source lists in a local cluster.
const PLURALS: [&str; 5] = [
    "clusterproperties",
    "serviceexports",
    "serviceimports",
    "services",
    "endpointslices",
];

/// The set revision and the cluster states of each snapshot.
type Seen = Arc<Mutex<Vec<(u64, Vec<SyncState>)>>>;

/// Records the cluster states and set revisions of every snapshot the
/// source publishes until dropped.
struct Recorder {
    seen: Seen,
    task: tokio::task::JoinHandle<()>,
}

impl Recorder {
    fn start(handle: &KubeHandle) -> Recorder {
        let seen: Seen = Arc::default();
        let mut snapshots = handle.subscribe();
        let record = seen.clone();
        let task = tokio::spawn(async move {
            loop {
                let snapshot = snapshots.borrow_and_update().clone();
                let states = snapshot.clusters.iter().map(|c| c.state).collect();
                record.lock().unwrap().push((snapshot.set_revision, states));
                if snapshots.changed().await.is_err() {
                    return;
                }
            }
        });
        Recorder { seen, task }
    }

    /// Every state seen so far; panics naming the first that was not
    /// `Synced`.
    fn assert_always_synced(&self) {
        for (revision, states) in self.seen.lock().unwrap().iter() {
            assert!(
                states.iter().all(|s| *s == SyncState::Synced),
                "a snapshot (set revision {revision}) showed {states:?}"
            );
        }
    }

    /// The set revisions seen so far, without repeats.
    fn revisions(&self) -> Vec<u64> {
        let mut revisions: Vec<u64> = self.seen.lock().unwrap().iter().map(|s| s.0).collect();
        revisions.dedup();
        revisions
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn lists(server: &ApiServer) -> Vec<usize> {
    PLURALS.iter().map(|p| server.lists(p)).collect()
}

/// A synced source on one cluster whose outages are ridden out for a
/// minute, with `watch_timeout`.
async fn synced_source(
    dir: &Path,
    server: &ApiServer,
    watch_timeout: Duration,
) -> (KubeHandle, Recorder) {
    populate(server, "c1", "net-a", "v1beta1", "198.51.100.1", "10.1.0.1");
    let mut options = options(&server.write_kubeconfig(dir, "c1"), &[]);
    options.outage_grace = Duration::from_secs(60);
    options.watch_timeout = watch_timeout;
    let handle = KubeHandle::start(options).await.expect("source starts");
    until(&handle, "c1 synced", |s| s.all_synced()).await;
    let recorder = Recorder::start(&handle);
    (handle, recorder)
}

/// Waits until every kind was watched again since `before`.
async fn until_watched_again(server: &ApiServer, before: &[usize]) {
    kube_api::until(
        "every kind watched again",
        || {
            PLURALS
                .iter()
                .zip(before)
                .all(|(plural, count)| server.watches(plural) > *count)
        },
        || format!("watches: {:?}", PLURALS.map(|p| server.watches(p))),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_reset_mid_stream_resumes_without_a_relist_or_an_unsynced_state() {
    let dir = tempfile::tempdir().expect("temp dir");
    let server = ApiServer::start(&["v1beta1"]).await;
    let (handle, recorder) = synced_source(dir.path(), &server, Duration::from_secs(30)).await;
    let listed = lists(&server);
    let watches: Vec<usize> = PLURALS.iter().map(|p| server.watches(p)).collect();
    let revision = handle.snapshot().set_revision;

    server.reset_connections();
    until_watched_again(&server, &watches).await;
    assert_eq!(
        recorder.revisions(),
        [revision],
        "the reset changed the routes"
    );
    server.apply(slice("cart", "cart-1", &[("10.1.0.7", true)]));
    until(&handle, "the change after the reset", |s| {
        backends(s, "c1", "cart") == ["c1 10.1.0.7:8080"]
    })
    .await;
    assert_eq!(lists(&server), listed, "resumed without a relist");
    recorder.assert_always_synced();
    let status = handle.snapshot();
    assert!(
        status.clusters[0].watch_errors >= 1,
        "the reset was counted: {:?}",
        status.clusters
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_server_restart_within_the_grace_costs_no_relist() {
    let dir = tempfile::tempdir().expect("temp dir");
    let server = ApiServer::start(&["v1beta1"]).await;
    let (handle, recorder) = synced_source(dir.path(), &server, Duration::from_secs(30)).await;
    let listed = lists(&server);

    server.stop().await;
    // Down for a while: the watchers' reconnects are refused meanwhile.
    tokio::time::sleep(Duration::from_secs(1)).await;
    server.restart().await;
    server.apply(slice("cart", "cart-1", &[("10.1.0.8", true)]));
    until(&handle, "the change after the restart", |s| {
        backends(s, "c1", "cart") == ["c1 10.1.0.8:8080"]
    })
    .await;
    assert_eq!(lists(&server), listed, "resumed without a relist");
    recorder.assert_always_synced();
}

/// kube-runtime's own idle timeout (the watch timeout plus 5 s) gives up a
/// silent watch; the clients' read timeout bounds the requests that have no
/// such timeout (the next test). Both together must bring the change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_half_open_connection_is_given_up_and_the_watch_resumes() {
    let dir = tempfile::tempdir().expect("temp dir");
    let server = ApiServer::start(&["v1beta1"]).await;
    // A 1 s watch timeout: the watcher's idle timeout is 6 s, the clients'
    // read timeout 11 s.
    let (handle, recorder) = synced_source(dir.path(), &server, Duration::from_secs(1)).await;
    let listed = lists(&server);

    // Every connection goes silent, the watches' and any idle pooled one
    // (a request sent on one of those waits out the read timeout).
    server.blackhole_connections();
    server.apply(slice("cart", "cart-1", &[("10.1.0.9", true)]));
    let snapshot = handle
        .wait_for(Duration::from_secs(30), |s| {
            backends(s, "c1", "cart") == ["c1 10.1.0.9:8080"]
        })
        .await;
    assert_eq!(
        backends(&snapshot, "c1", "cart"),
        ["c1 10.1.0.9:8080"],
        "the change never arrived over a new connection"
    );
    assert_eq!(lists(&server), listed, "resumed without a relist");
    recorder.assert_always_synced();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_list_that_never_answers_is_retried_after_the_read_timeout() {
    let dir = tempfile::tempdir().expect("temp dir");
    let server = ApiServer::start(&["v1beta1"]).await;
    populate(
        &server,
        "c1",
        "net-a",
        "v1beta1",
        "198.51.100.1",
        "10.1.0.1",
    );
    server.hang_lists("endpointslices", 1);
    let mut options = options(&server.write_kubeconfig(dir.path(), "c1"), &[]);
    // A read timeout of 11 s.
    options.watch_timeout = Duration::from_secs(1);
    let handle = KubeHandle::start(options).await.expect("source starts");
    let snapshot = handle
        .wait_for(Duration::from_secs(30), |s| s.all_synced())
        .await;
    assert_eq!(
        server.hung_lists("endpointslices"),
        1,
        "the first list hung"
    );
    assert!(
        snapshot.all_synced(),
        "the hung list was never retried: {:#?}",
        snapshot.clusters
    );
    assert_eq!(backends(&snapshot, "c1", "cart"), ["c1 10.1.0.1:8080"]);
    assert!(
        server.lists("endpointslices") >= 1,
        "listed again after the timeout"
    );
}

/// `cart`'s slices `cart-0` .. `cart-{count-1}`, one endpoint each.
fn many_slices(server: &ApiServer, count: usize) {
    for n in 0..count {
        let address = format!("10.1.{}.{}", n / 200, n % 200 + 1);
        server.apply(slice("cart", &format!("cart-{n}"), &[(&address, true)]));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_kind_is_listed_in_pages_and_an_expired_page_lists_again() {
    let dir = tempfile::tempdir().expect("temp dir");
    let server = ApiServer::start(&["v1beta1"]).await;
    populate(
        &server,
        "c1",
        "net-a",
        "v1beta1",
        "198.51.100.1",
        "10.1.0.1",
    );
    // The watcher asks for pages of 500: 1,200 slices are 3 pages.
    many_slices(&server, 1_200);
    server.expire_continues("endpointslices", 1);
    let handle = KubeHandle::start(options(&server.write_kubeconfig(dir.path(), "c1"), &[]))
        .await
        .expect("source starts");
    let snapshot = until(&handle, "every slice listed", |s| {
        s.all_synced() && backends(s, "c1", "cart").len() == 1_200
    })
    .await;
    assert_eq!(
        server.expired_continues("endpointslices"),
        1,
        "a page expired"
    );
    assert!(
        server.lists("endpointslices") >= 2,
        "the expired list was started again"
    );
    assert!(
        server.pages("endpointslices") >= 3,
        "listed in pages: {} later pages",
        server.pages("endpointslices")
    );
    assert_eq!(state_of(&snapshot, "c1"), Some(SyncState::Synced));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn busy_answers_are_retried_by_the_client_after_retry_after() {
    let dir = tempfile::tempdir().expect("temp dir");
    let server = ApiServer::start(&["v1beta1"]).await;
    populate(
        &server,
        "c1",
        "net-a",
        "v1beta1",
        "198.51.100.1",
        "10.1.0.1",
    );
    server.fail_next("endpointslices", 429, 1, Some(1));
    server.fail_next("services", 503, 2, None);
    let started = tokio::time::Instant::now();
    let handle = KubeHandle::start(options(&server.write_kubeconfig(dir.path(), "c1"), &[]))
        .await
        .expect("source starts");
    let snapshot = until(&handle, "c1 synced", |s| s.all_synced()).await;
    assert_eq!(server.failed("endpointslices"), 1);
    assert_eq!(server.failed("services"), 2);
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "synced {:?} after a 429 with Retry-After: 1",
        started.elapsed()
    );
    // Retried below the watcher: no failed request reached it.
    assert_eq!(
        snapshot.clusters[0].watch_errors, 0,
        "{:#?}",
        snapshot.clusters
    );
    assert_eq!(backends(&snapshot, "c1", "cart"), ["c1 10.1.0.1:8080"]);
}
