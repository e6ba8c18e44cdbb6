//! With a DNS responder, an import turns `Ready` only once the responder
//! answers its ClusterSetIPs: the gateway says which snapshot its routes
//! (and so its DNS answers) are built from, and the reconciler holds
//! `Ready` back until that snapshot holds the import. An import `Ready`
//! already stays so while the responder follows newer snapshots.

use super::*;

fn held_back_for_dns(import: &Value) -> bool {
    let has_ips = import["spec"]["ips"]
        .as_array()
        .is_some_and(|ips| !ips.is_empty());
    let waiting = import["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| {
            c["type"] == "Ready"
                && c["status"] == "False"
                && c["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("DNS responder"))
        });
    has_ips && waiting
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_import_turns_ready_only_once_the_dns_responder_answers_it() {
    let world = World::new().await;
    let gateway = world.gateway("gw-a", PortRange::default()).await;
    world.import_until("cart", "cart Ready", is_ready).await;
    let controller = gateway.controller.as_ref().expect("the controller runs");
    // A DNS responder whose routes are older than any snapshot since.
    controller.names_answered_from(0);
    world.remote.apply(service("late", &[("http", 80)]));
    world
        .remote
        .apply(slice("late", "late-1", &[("10.2.3.1", true)]));
    world.remote.apply(export("late", "v1alpha1"));
    let held = world
        .import_until(
            "late",
            "its ClusterSetIP written and Ready held back",
            held_back_for_dns,
        )
        .await;
    assert_eq!(ready_reason(&held).as_deref(), Some("Pending"));
    assert!(
        world.import("cart").is_some_and(|cart| is_ready(&cart)),
        "an import Ready already stays Ready"
    );
    // The responder answers from the newest snapshot: Ready follows.
    controller.names_answered_from(u64::MAX);
    world
        .import_until("late", "Ready once answered", is_ready)
        .await;
}
