//! What one change costs: the imports a new export makes the reconciler
//! plan, and the import objects it renders, do not grow with the services
//! it already imports. A pass plans again only the services whose inputs
//! changed (`strait::imports::plan_reusing`) and renders only those found
//! changed (`strait::imports::scope`); before, each pass planned and
//! rendered every import. Counted, not timed.

use super::*;

/// The objects one service may need rendered in a round: its import and
/// the import's status, its derived Service, the gateway slice and one MCS
/// slice per exporting cluster (two here), with room for one more; a pass
/// makes up to three rounds (the import, then its derived Service, then
/// the slices and its `ips`).
const OBJECTS_OF_ONE_SERVICE_A_PASS: u64 = 7 * 3;

/// The imports one service may need planned in a pass: in each of its
/// three rounds, the new service's own, with room for one more.
const IMPORTS_OF_ONE_SERVICE_A_PASS: u64 = 2 * 3;

/// Passes, objects rendered and imports planned, once the reconciler has
/// found every service as desired and made no pass for a while (the
/// echoes of its last writes settled).
async fn settled(gateway: &Started) -> (u64, u64, u64) {
    let reports = gateway.imports().expect("the import reconciler runs");
    let mut last = (u64::MAX, u64::MAX, u64::MAX);
    loop {
        let (now, unsettled) = {
            let report = reports.borrow();
            (
                (report.passes, report.rendered, report.imports_planned),
                report.unsettled,
            )
        };
        if now == last && unsettled == 0 {
            return now;
        }
        last = now;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Exports `one` from the remote cluster and waits for its import `Ready`.
async fn export_one(world: &World) {
    world.remote.apply(service("one", &[("http", 80)]));
    world
        .remote
        .apply(slice("one", "one-1", &[("10.2.2.1", true)]));
    world.remote.apply(export("one", "v1alpha1"));
    world
        .import_until("one", "the new import Ready", is_ready)
        .await;
}

/// The passes made, objects rendered and imports planned for one export,
/// with `held` services imported already.
async fn one_export_with(held: usize) -> (u64, u64, u64) {
    let world = World::new().await;
    for i in 0..held {
        let name = format!("held-{i}");
        world.remote.apply(service(&name, &[("http", 80)]));
        world.remote.apply(slice(
            &name,
            &format!("{name}-1"),
            &[(&format!("10.2.1.{}", i % 250 + 1), true)],
        ));
        world.remote.apply(export(&name, "v1alpha1"));
    }
    let gateway = world.gateway("gw-a", PortRange::default()).await;
    for i in 0..held {
        world
            .import_until(&format!("held-{i}"), "a held import Ready", is_ready)
            .await;
    }
    world.import_until("cart", "cart Ready", is_ready).await;
    let before = settled(&gateway).await;
    export_one(&world).await;
    let after = settled(&gateway).await;
    (after.0 - before.0, after.1 - before.1, after.2 - before.2)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_export_renders_as_much_with_forty_imports_held_as_with_none() {
    let mut rendered_at = Vec::new();
    for held in [0, 40] {
        let (passes, rendered, planned) = one_export_with(held).await;
        println!(
            "{held} held: {passes} passes planned {planned} imports, rendered {rendered} objects"
        );
        assert!(passes > 0, "the export made no pass");
        // Planning every import in a pass's first round would be 41 a
        // pass with 40 held.
        assert!(
            planned <= passes * IMPORTS_OF_ONE_SERVICE_A_PASS,
            "with {held} held, {passes} passes planned {planned} imports: \
             more than the new service's own"
        );
        // Rendering every import in a pass's first round would be at
        // least 5 objects for each of the 41 imports, 205 a pass.
        assert!(
            rendered <= passes * OBJECTS_OF_ONE_SERVICE_A_PASS,
            "with {held} held, {passes} passes rendered {rendered} objects: \
             more than the new service's own"
        );
        rendered_at.push(rendered);
    }
    // The same work, but for one pass more or less (snapshots coalesce
    // differently from run to run; here it is 16 objects at both sizes).
    assert!(
        rendered_at[1].abs_diff(rendered_at[0]) <= OBJECTS_OF_ONE_SERVICE_A_PASS,
        "objects rendered for one export: {rendered_at:?} with 0 and 40 held"
    );
}

/// The writes one new import takes: its ServiceImport twice (created, then
/// given the derived Service's ClusterIPs as its `ips`) and its status
/// twice (`Ready=False` at once, `Ready` with the slices), its derived
/// Service, the gateway slice and one MCS slice (one exporting cluster).
const WRITES_OF_ONE_IMPORT: u64 = 7;

/// Writes made in all, once settled.
async fn writes_settled(gateway: &Started) -> u64 {
    settled(gateway).await;
    gateway
        .imports()
        .expect("the import reconciler runs")
        .borrow()
        .writes
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_import_is_written_once_while_the_echoes_of_its_writes_lag() {
    let world = World::new().await;
    // Each write's answer comes 40 ms after it is sent, its watch event
    // 300 ms after that: the snapshot after a pass's first round shows
    // that round's writes and not those of its last, and a pass planned
    // from it must not make them again.
    world.local.slow_writes(Duration::from_millis(40), 64);
    world.local.lag_watches(Duration::from_millis(300));
    let gateway = world.gateway("gw-a", PortRange::default()).await;
    world.import_until("cart", "cart Ready", is_ready).await;
    let before = writes_settled(&gateway).await;
    export_one(&world).await;
    let writes = writes_settled(&gateway).await - before;
    assert_eq!(
        writes, WRITES_OF_ONE_IMPORT,
        "one new import took {writes} writes"
    );
}
