//! Tests of [`super::super::merge_changed`]: a merge of the changed
//! services alone against a merge of every one.

use std::sync::Arc;

use super::super::*;
use crate::testing::{ServiceBuilder, cluster_set, exported_http};

/// Merging only the services whose holders changed gives what merging every
/// service does, sharing the unchanged services' merges as they were.
#[test]
fn merging_the_changed_services_alone_equals_merging_every_one() {
    let names = ["cart", "web", "db", "auth"];
    let mut set = cluster_set(&[
        ("c1", "net-a", exported_http("cart", "10.0.0.1")),
        ("c2", "net-a", exported_http("web", "10.0.1.1")),
        ("c3", "net-b", exported_http("db", "10.0.2.1")),
    ]);
    for (cluster, name) in [("c2", "cart"), ("c3", "cart"), ("c1", "auth")] {
        let service = exported_http(name, "10.0.9.1");
        let id = ClusterId::new(cluster).expect("an id");
        let cluster = set.clusters.get_mut(&id).expect("a cluster");
        cluster
            .services
            .insert(service.key.clone(), Arc::new(service));
    }
    let mut previous = merge(&set);
    let render = |merged: &MergedSet| -> Vec<String> {
        merged
            .services
            .iter()
            .map(|(key, service)| format!("{key}: {service:?}"))
            .collect()
    };
    // (cluster, service, what happens): a new endpoint, a port added, an
    // export gone from one holder, from its last, and a new service.
    let changes: [(&str, &str, Option<ServiceBuilder>); 6] = [
        ("c2", "cart", Some(exported_http("cart", "10.0.0.7"))),
        (
            "c1",
            "cart",
            Some(exported_http("cart", "10.0.0.1").port("admin", 81, 9090)),
        ),
        ("c3", "cart", None),
        ("c3", "db", None),
        ("c3", "queue", Some(exported_http("queue", "10.0.2.9"))),
        ("c1", "auth", Some(exported_http("auth", "10.0.9.2"))),
    ];
    for (cluster, name, now) in changes {
        let key = ServiceKey::new("shop", name);
        let id = ClusterId::new(cluster).expect("an id");
        let held = &mut set.clusters.get_mut(&id).expect("a cluster").services;
        match now {
            Some(service) => held.insert(key.clone(), Arc::new(service)),
            None => held.remove(&key),
        };
        let changed = BTreeSet::from([key.clone()]);
        let alone = merge_changed(&set, &previous, &changed);
        let whole = merge_reusing(&set, &previous);
        assert_eq!(render(&alone), render(&whole), "{cluster} {name}");
        for other in names.iter().filter(|other| **other != name) {
            let other = ServiceKey::new("shop", *other);
            if let (Some(was), Some(is)) =
                (previous.services.get(&other), alone.services.get(&other))
            {
                assert!(Arc::ptr_eq(was, is), "{other} shared after {name} changed");
            }
        }
        previous = alone;
    }
    assert!(
        !previous
            .services
            .contains_key(&ServiceKey::new("shop", "db"))
    );
    assert!(
        previous
            .services
            .contains_key(&ServiceKey::new("shop", "queue"))
    );
}
