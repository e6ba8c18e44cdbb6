//! Tests of [`super`]: the observed view and what the planner reads of it.

use serde_json::json;

use super::*;

fn import(name: &str, uid: &str, record: Option<&str>) -> ObservedObject {
    let mut import = json!({
        "kind": "ServiceImport",
        "metadata": {"name": name, "namespace": "shop", "uid": uid,
            "labels": {"app.kubernetes.io/managed-by": "strait"}},
    });
    if let Some(record) = record {
        import["metadata"]["annotations"] = json!({IMPORT_PORTS_ANNOTATION: record});
    }
    ObservedObject::new(import)
}

fn derived(name: &str, service: &str, owner_uid: &str, target: u16) -> ObservedObject {
    ObservedObject::new(json!({
        "kind": "Service",
        "metadata": {"name": name, "namespace": "shop",
            "labels": {"app.kubernetes.io/managed-by": "strait",
                "multicluster.kubernetes.io/service-name": service},
            "ownerReferences": [{"kind": "ServiceImport", "name": service, "uid": owner_uid}]},
        "spec": {"ports": [{"port": 80, "protocol": "TCP", "targetPort": target}]}
    }))
}

/// A tenant may edit the derived Service in its namespace, or make one
/// with Strait's labels: neither is read as a record where the
/// ServiceImport, which only Strait writes, records the ports.
#[test]
fn recorded_ports_are_read_from_straits_imports_not_from_services_a_tenant_writes() {
    let mut observed = Observed::default();
    // till: recorded on its import; its derived Service was edited to
    // claim 20001, cart's port.
    observed.insert(import(
        "till",
        "u-till",
        Some(r#"[{"protocol":"TCP","port":80,"importPort":20005}]"#),
    ));
    observed.insert(derived("derived-t", "till", "u-till", 20001));
    // A labelled Service for a service with no import of Strait's.
    observed.insert(derived("derived-f", "forged", "u-none", 20002));
    // A foreign import's owned "derived" Service.
    let foreign = import("other", "u-other", None);
    let mut unlabelled = Value::clone(foreign.raw().expect("an import is held whole"));
    unlabelled["metadata"]["labels"] = json!({});
    observed.insert(ObservedObject::new(unlabelled));
    observed.insert(derived("derived-o", "other", "u-other", 20003));
    // An import an older version wrote (no record): its owned derived
    // Service is read; one owned by nobody is not.
    observed.insert(import("old", "u-old", None));
    observed.insert(derived("derived-old", "old", "u-old", 20004));
    observed.insert(import("older", "u-older", None));
    observed.insert(derived("derived-older", "older", "u-someone", 20006));
    let recorded: Vec<(String, u16)> = observed
        .recorded_ports()
        .into_iter()
        .map(|(key, port)| (key.service.name, port))
        .collect();
    assert_eq!(
        recorded,
        [("old".to_owned(), 20004), ("till".to_owned(), 20005)]
    );
}

#[test]
fn recorded_ports_and_cluster_ips_come_from_derived_services() {
    let mut observed = Observed::default();
    observed.insert(import("cart", "u-cart", None));
    observed.insert(ObservedObject::new(json!({
        "kind": "Service",
        "metadata": {"name": "derived-x", "namespace": "shop",
            "ownerReferences": [{"kind": "ServiceImport", "name": "cart", "uid": "u-cart"}],
            "labels": {"app.kubernetes.io/managed-by": "strait",
                "multicluster.kubernetes.io/service-name": "cart"}},
        "spec": {"clusterIPs": ["10.96.0.7", "fd00::7"],
            "ports": [{"port": 80, "protocol": "TCP", "targetPort": 20001},
                      {"port": 81, "targetPort": "named"}]}
    })));
    // Not Strait's: ignored.
    observed.insert(ObservedObject::new(json!({
        "kind": "Service",
        "metadata": {"name": "derived-y", "namespace": "shop",
            "labels": {"multicluster.kubernetes.io/service-name": "other"}},
        "spec": {"ports": [{"port": 80, "targetPort": 20002}]}
    })));
    let cart = ServiceKey::new("shop", "cart");
    let recorded = observed.recorded_ports();
    assert_eq!(recorded.len(), 1, "{recorded:?}");
    let key = PortKey::service_port(cart.clone(), Protocol::Tcp, 80);
    assert_eq!(recorded[&key], 20001);
    let ips: Vec<String> = observed
        .derived_cluster_ips(&cart)
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(ips, ["10.96.0.7", "fd00::7"]);
    assert!(
        observed
            .derived_cluster_ips(&ServiceKey::new("shop", "other"))
            .is_empty()
    );
}

/// Two records claiming one import port: the claimant whose owned
/// derived Service forwards to it keeps it, whatever the key order;
/// when none does, no one does. Each is reported.
#[test]
fn a_port_two_records_claim_stays_with_the_one_kube_proxy_forwards_to() {
    let record = |port: u16| format!(r#"[{{"protocol":"TCP","port":80,"importPort":{port}}}]"#);
    let mut observed = Observed::default();
    // "aaa" sorts before "api": key order would hand it the port.
    observed.insert(import("aaa", "u-aaa", Some(&record(20001))));
    observed.insert(import("api", "u-api", Some(&record(20001))));
    observed.insert(derived("derived-api", "api", "u-api", 20001));
    // Neither of these two has a derived Service forwarding to 20002.
    observed.insert(import("x1", "u-x1", Some(&record(20002))));
    observed.insert(import("x2", "u-x2", Some(&record(20002))));
    observed.insert(derived("derived-x2", "x2", "u-x2", 20009));
    let claims = observed.recorded_claims();
    let held: Vec<(String, u16)> = claims
        .ports
        .iter()
        .map(|(key, port)| (key.service.name.clone(), *port))
        .collect();
    assert_eq!(held, [("api".to_owned(), 20001)]);
    let contested: Vec<(u16, usize, Option<String>)> = claims
        .contested
        .iter()
        .map(|c| {
            let winner = c.winner.as_ref().map(|w| w.service.name.clone());
            (c.port, c.claimants.len(), winner)
        })
        .collect();
    assert_eq!(
        contested,
        [(20001, 2, Some("api".to_owned())), (20002, 2, None)]
    );
}

#[test]
fn namespaces_unknown_means_present() {
    let mut observed = Observed::default();
    assert!(observed.namespace_exists("anything"));
    observed.insert(ObservedObject::new(
        json!({"kind": "Namespace", "metadata": {"name": "shop"}}),
    ));
    assert!(observed.namespace_exists("shop"));
    assert!(!observed.namespace_exists("db"));
}

/// One object of the pool the following test changes, at `version`.
fn pooled(index: usize, version: u32) -> ObservedObject {
    let managed = json!({"app.kubernetes.io/managed-by": "strait"});
    let labelled = |service: &str| json!({"app.kubernetes.io/managed-by": "strait", MCS_SERVICE_NAME_LABEL: service});
    let (kind, name, labels, annotations) = match index {
        0 => ("ServiceImport", "a", managed, json!({})),
        1 => ("ServiceImport", "b", json!({}), json!({})),
        // Two derived Services claiming service a's place.
        2 => ("Service", "derived-a1", labelled("a"), json!({})),
        3 => ("Service", "derived-a2", labelled("a"), json!({})),
        4 => ("Service", "derived-b", labelled("b"), json!({})),
        5 => (
            "Service",
            "derived-a-pod",
            labelled("a"),
            json!({POD_CLUSTER_ANNOTATION: "c2", POD_ANNOTATION: "pod-0"}),
        ),
        // Strait's label without the service's: held nowhere.
        6 => ("Service", "derived-x", managed, json!({})),
        7 => ("EndpointSlice", "a-1", labelled("a"), json!({})),
        8 => ("EndpointSlice", "b-1", managed, json!({})),
        9 => ("Service", "legacy", json!({}), json!({})),
        _ => ("EndpointSlice", "legacy-1", json!({}), json!({})),
    };
    ObservedObject::new(json!({
        "kind": kind,
        "metadata": {"name": name, "namespace": "shop", "uid": format!("uid-{index}"),
            "resourceVersion": version.to_string(),
            "labels": labels, "annotations": annotations},
    }))
}

/// Following each object's change with [`Observed::replace`] (reading every
/// object again where it says it cannot follow) holds exactly what
/// inserting every object anew does, as the source reads the store: by
/// kind, then namespace and name.
#[test]
fn following_one_change_at_a_time_holds_what_reading_every_object_does() {
    let kind_order = |kind: &str| match kind {
        "ServiceImport" => 0,
        "Service" => 1,
        _ => 2,
    };
    let whole = |store: &BTreeMap<(u8, String), ObservedObject>| {
        let mut observed = Observed::default();
        for object in store.values() {
            observed.insert(object.clone());
        }
        observed
    };
    let mut store: BTreeMap<(u8, String), ObservedObject> = BTreeMap::new();
    let mut view = Observed::default();
    let (mut followed, mut read_again) = (0, 0);
    // A fixed xorshift sequence: the same steps every run.
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    for step in 0..4_000u32 {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let index = usize::try_from(state % 11).expect("small");
        let object = pooled(index, step);
        let key = (kind_order(object.kind()), object.name().to_owned());
        let old = store.get(&key).cloned();
        let new = !(state >> 8).is_multiple_of(3);
        if new {
            store.insert(key, object.clone());
        } else {
            store.remove(&key);
        }
        if view.replace(old.as_ref(), new.then_some(object)) {
            followed += 1;
        } else {
            read_again += 1;
            view = whole(&store);
        }
        assert_eq!(
            view,
            whole(&store),
            "step {step}: object {index}, kept {new}"
        );
    }
    assert!(
        followed > 1_500,
        "followed {followed}, read again {read_again}"
    );
    assert!(
        read_again > 0,
        "the colliding derived Services were never read again"
    );
}
