//! IP families: an import carries the families this cluster can allocate
//! (KEP-1645), so a dual-stack service imported by a single-stack cluster
//! gets one ClusterSetIP rather than none, and `ips[i]` is always of
//! `ipFamilies[i]` (mcs-api `conformance/service_import.go`).

use super::*;

/// `shop/cart` as a dual-stack Service in the remote cluster.
fn dual_stack_cart(world: &World) {
    let mut cart = service("cart", &[("http", 80)]);
    cart["spec"]["clusterIPs"] = json!(["10.96.0.10", "fd00:10:96::10"]);
    cart["spec"]["ipFamilies"] = json!(["IPv4", "IPv6"]);
    cart["spec"]["ipFamilyPolicy"] = "PreferDualStack".into();
    world.remote.apply(cart);
    // Only c2 exports: its families are the service's.
    world.local.delete("ServiceExport", "shop", "cart");
}

fn families_and_ips(import: &Value) -> (Value, Value) {
    (
        import["spec"]["ipFamilies"].clone(),
        import["spec"]["ips"].clone(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_stack_cluster_imports_a_dual_stack_service_with_its_one_family() {
    let world = World::new().await;
    world.local.single_stack();
    dual_stack_cart(&world);
    let _gateway = world.gateway("gw-a", PortRange::default()).await;
    let import = world
        .import_until("cart", "a ready import with one ClusterSetIP", is_ready)
        .await;
    let (families, ips) = families_and_ips(&import);
    assert_eq!(families, json!(["IPv4"]), "{import:#}");
    assert_eq!(ips.as_array().map(Vec::len), Some(1), "{import:#}");
    let derived = world.derived("cart").expect("the derived Service");
    assert_eq!(derived["spec"]["ipFamilyPolicy"], "PreferDualStack");
    assert_eq!(derived["spec"]["clusterIPs"], ips);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dual_stack_cluster_imports_it_with_both_in_its_own_order() {
    let world = World::new().await;
    dual_stack_cart(&world);
    let _gateway = world.gateway("gw-a", PortRange::default()).await;
    let import = world
        .import_until("cart", "a ready import with two ClusterSetIPs", |i| {
            is_ready(i) && i["spec"]["ips"].as_array().map(Vec::len) == Some(2)
        })
        .await;
    let (families, ips) = families_and_ips(&import);
    assert_eq!(families, json!(["IPv4", "IPv6"]), "{import:#}");
    let ips: Vec<std::net::IpAddr> = ips
        .as_array()
        .expect("ips")
        .iter()
        .map(|ip| ip.as_str().expect("text").parse().expect("an address"))
        .collect();
    assert!(ips[0].is_ipv4() && ips[1].is_ipv6(), "{ips:?}");
}
