//! Export status tests: YAML objects go through `parse_file`,
//! `translate_cluster`, `assemble` and `merge`, as the sources do, and the
//! conditions come out of the result.

use std::collections::BTreeMap;

use serde_json::json;

use super::*;
use crate::diagnostics::Diagnostic;
use crate::discovery::export_validity::export_validity;
use crate::discovery::objects::SourcedObject;
use crate::discovery::objects::parse_file;
use crate::discovery::translate::{TranslateOptions, assemble, translate_cluster};
use crate::merge::merge;
use crate::model::names::GATEWAY_LABEL;
use crate::model::{Cluster, ServiceKey};

fn property(value: &str) -> String {
    format!(
        "apiVersion: about.k8s.io/v1alpha1\nkind: ClusterProperty\nmetadata: {{name: cluster.clusterset.k8s.io}}\nspec: {{value: {value}}}\n"
    )
}

fn service(name: &str, spec: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Service\nmetadata: {{name: {name}, namespace: shop}}\nspec: {spec}\n"
    )
}

fn export(name: &str, created: &str) -> String {
    format!(
        "apiVersion: multicluster.x-k8s.io/v1beta1\nkind: ServiceExport\nmetadata: {{name: {name}, namespace: shop, creationTimestamp: \"{created}\"}}\n"
    )
}

const HTTP: &str = "{ports: [{name: http, port: 80}]}";
const OLDER: &str = "2025-01-01T00:00:00Z";
const YOUNGER: &str = "2025-02-01T00:00:00Z";

/// One cluster's objects, translated.
struct Translated {
    objects: Vec<SourcedObject>,
    cluster: Cluster,
    findings: Vec<Diagnostic>,
}

fn translated(id: &str, documents: &[String]) -> Translated {
    let mut text = property(id);
    for document in documents {
        text.push_str("---\n");
        text.push_str(document);
    }
    let (objects, parse_findings) = parse_file(&format!("clusters/{id}/objects.yaml"), &text);
    assert!(parse_findings.is_empty(), "{parse_findings:?}");
    let (cluster, findings) = translate_cluster(
        &format!("clusters/{id}"),
        &objects.iter().collect::<Vec<_>>(),
        &TranslateOptions::default(),
    );
    Translated {
        objects,
        cluster: cluster.expect("the cluster names itself"),
        findings,
    }
}

fn validity_of(cluster: &Translated) -> BTreeMap<ServiceKey, Validity> {
    export_validity(
        &cluster.objects.iter().collect::<Vec<_>>(),
        &cluster.cluster,
        &cluster.findings,
        crate::model::names::GATEWAY_NAMESPACE,
    )
}

fn key(name: &str) -> ServiceKey {
    ServiceKey::new("shop", name)
}

fn id(value: &str) -> ClusterId {
    ClusterId::new(value).expect("valid test id")
}

fn local_export(name: &str, validity: Validity, conditions: Vec<Value>) -> LocalExport {
    LocalExport {
        key: key(name),
        generation: Some(1),
        resource_version: Some("7".to_owned()),
        conditions,
        validity,
    }
}

fn at(seconds: i64) -> Timestamp {
    Timestamp::from_second(seconds).expect("valid timestamp")
}

fn time_text(seconds: i64) -> String {
    serde_json::to_value(Time(at(seconds)))
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .expect("a time encodes as text")
}

fn condition<'a>(conditions: &'a [Value], type_: &str) -> &'a Value {
    conditions
        .iter()
        .find(|c| c["type"] == type_)
        .unwrap_or_else(|| panic!("no {type_} condition in {conditions:?}"))
}

/// c1 exports `cart` first; c2 exports it later with another port and
/// ClientIP affinity: a port and a session affinity conflict.
fn conflicting() -> (Translated, MergedSet) {
    let c1 = translated("c1", &[service("cart", HTTP), export("cart", OLDER)]);
    let c2 = translated(
        "c2",
        &[
            service(
                "cart",
                "{ports: [{name: http, port: 80}, {name: admin, port: 9090}], sessionAffinity: ClientIP}",
            ),
            export("cart", YOUNGER),
        ],
    );
    let (set, errors) = assemble(vec![c1.cluster.clone(), c2.cluster]);
    assert!(errors.is_empty(), "a valid set: {errors:?}");
    (c1, merge(&set))
}

#[test]
fn validity_follows_the_translation_of_the_service() {
    let cluster = translated(
        "c1",
        &[
            service("cart", HTTP),
            export("cart", OLDER),
            service("ext", "{type: ExternalName, externalName: db.example.com}"),
            export("ext", OLDER),
            export("ghost", OLDER),
            service("odd", "{type: Magic, ports: [{name: http, port: 80}]}"),
            export("odd", OLDER),
            "apiVersion: v1\nkind: Service\nmetadata: {name: gw, namespace: strait-system, labels: {strait.dev/gateway: \"true\"}}\nspec: {type: LoadBalancer, ports: [{name: tunnel, port: 15008}]}\n".to_owned(),
            "apiVersion: multicluster.x-k8s.io/v1alpha1\nkind: ServiceExport\nmetadata: {name: gw, namespace: strait-system}\n".to_owned(),
            // A tenant's label names no gateway: its Service exports as any other.
            "apiVersion: v1\nkind: Service\nmetadata: {name: fake-gw, namespace: shop, labels: {strait.dev/gateway: \"true\"}}\nspec: {type: LoadBalancer, ports: [{name: tunnel, port: 15008}]}\n".to_owned(),
            export("fake-gw", OLDER),
        ],
    );
    let validity = validity_of(&cluster);
    assert_eq!(validity.len(), 6, "{validity:?}");
    assert_eq!(validity[&key("fake-gw")], Validity::Valid);
    assert_eq!(validity[&key("cart")], Validity::Valid);
    assert_eq!(validity[&key("ext")], Validity::InvalidServiceType);
    assert_eq!(validity[&key("ghost")], Validity::NoService);
    let Validity::InvalidService(why) = &validity[&key("odd")] else {
        panic!("a Service of an unknown type is refused: {validity:?}");
    };
    assert!(why.starts_with("field spec.type: "), "{why}");
    let Validity::InvalidService(why) = &validity[&ServiceKey::new("strait-system", "gw")] else {
        panic!("the gateway Service is not exportable: {validity:?}");
    };
    assert!(why.contains(GATEWAY_LABEL), "{why}");

    assert_eq!(Validity::InvalidServiceType.reason(), "InvalidServiceType");
    assert_eq!(Validity::NoService.reason(), "NoService");
    assert_eq!(
        Validity::InvalidServiceType.message(&key("ext")),
        "Service shop/ext is of type ExternalName, which cannot be exported."
    );
}

#[test]
fn a_conflict_is_true_with_the_reasons_comma_joined_and_the_merge_messages() {
    let (c1, merged) = conflicting();
    let validity = validity_of(&c1);
    let export = local_export("cart", validity[&key("cart")].clone(), Vec::new());
    let wanted = wanted(&export, &id("c1"), Some(&merged), None);
    assert!(wanted.remove.is_empty());
    let conditions =
        updated_conditions(&export.conditions, &wanted, Some(1), at(100)).expect("a first write");
    let valid = condition(&conditions, VALID_CONDITION);
    assert_eq!(valid["status"], "True");
    assert_eq!(valid["reason"], "Valid");
    assert_eq!(valid["observedGeneration"], 1);
    // A constituent of the merged service, conflict or not: exported.
    let ready = condition(&conditions, READY_CONDITION);
    assert_eq!(ready["status"], "True");
    assert_eq!(ready["reason"], READY_REASON_READY);
    assert_eq!(valid["lastTransitionTime"], time_text(100));
    let conflict = condition(&conditions, CONFLICT_CONDITION);
    assert_eq!(conflict["status"], "True");
    assert_eq!(
        conflict["reason"],
        "PortConflict,SessionAffinityConflict,SessionAffinityConfigConflict"
    );
    let message = conflict["message"].as_str().expect("a message");
    let service = &merged.services[&key("cart")];
    for raised in &service.conflicts {
        assert!(message.contains(&raised.message), "{message}");
    }
    assert!(
        message.contains("Conflicting session affinity. Using \"None\" from oldest service export in \"c1\". 1/2 clusters disagree."),
        "{message}"
    );

    // Written once: the same wish against what was written changes nothing.
    assert_eq!(
        updated_conditions(&conditions, &wanted, Some(1), at(200)),
        None
    );
}

#[test]
fn clearing_a_conflict_flips_only_that_condition() {
    let (c1, merged) = conflicting();
    let export = local_export("cart", validity_of(&c1)[&key("cart")].clone(), Vec::new());
    let first = updated_conditions(
        &[],
        &wanted(&export, &id("c1"), Some(&merged), None),
        Some(1),
        at(100),
    )
    .expect("a first write");

    // c2 withdraws its export: c1 is the only constituent.
    let alone = merge(&assemble(vec![c1.cluster.clone()]).0);
    let clear = wanted(&export, &id("c1"), Some(&alone), None);
    let second = updated_conditions(&first, &clear, Some(1), at(200)).expect("the flip is written");
    let conflict = condition(&second, CONFLICT_CONDITION);
    assert_eq!(conflict["status"], "False");
    assert_eq!(conflict["reason"], NO_CONFLICTS);
    assert_eq!(conflict["lastTransitionTime"], time_text(200));
    assert_eq!(
        condition(&second, VALID_CONDITION),
        condition(&first, VALID_CONDITION),
        "Valid did not change and is kept as it was"
    );
    assert_eq!(updated_conditions(&second, &clear, Some(1), at(300)), None);
}

#[test]
fn a_new_message_or_generation_keeps_the_transition_time() {
    let wanted = Wanted {
        set: vec![WantedCondition {
            type_: VALID_CONDITION,
            status: true,
            reason: "Valid".to_owned(),
            message: "one".to_owned(),
        }],
        remove: Vec::new(),
    };
    let first = updated_conditions(&[], &wanted, Some(1), at(100)).expect("written");
    let mut reworded = wanted.clone();
    reworded.set[0].message = "two".to_owned();
    let second = updated_conditions(&first, &reworded, Some(1), at(200)).expect("rewritten");
    assert_eq!(second[0]["message"], "two");
    assert_eq!(second[0]["lastTransitionTime"], time_text(100));
    let third = updated_conditions(&second, &reworded, Some(2), at(300)).expect("rewritten");
    assert_eq!(third[0]["observedGeneration"], 2);
    assert_eq!(third[0]["lastTransitionTime"], time_text(100));
    // A condition without a transition time is repaired.
    let mut broken = third.clone();
    if let Some(map) = broken[0].as_object_mut() {
        map.remove("lastTransitionTime");
    }
    let repaired = updated_conditions(&broken, &reworded, Some(2), at(400)).expect("repaired");
    assert_eq!(repaired[0]["lastTransitionTime"], time_text(400));
}

#[test]
fn an_invalid_export_is_not_valid_and_has_no_conflict_condition() {
    let (_, merged) = conflicting();
    let other = json!({"type": "example.com/Synced", "status": "True", "reason": "Synced",
        "message": "", "lastTransitionTime": time_text(50)});
    let old_conflict = json!({"type": "Conflict", "status": "True", "reason": "PortConflict",
        "message": "old", "lastTransitionTime": time_text(50), "observedGeneration": 1});
    let export = local_export(
        "cart",
        Validity::InvalidServiceType,
        vec![other.clone(), old_conflict],
    );
    let wanted = wanted(&export, &id("c1"), Some(&merged), None);
    assert_eq!(wanted.remove, [CONFLICT_CONDITION]);
    let conditions =
        updated_conditions(&export.conditions, &wanted, Some(1), at(100)).expect("written");
    assert_eq!(conditions.len(), 3, "{conditions:?}");
    assert_eq!(
        conditions[0], other,
        "another controller's condition is kept"
    );
    let ready = condition(&conditions, READY_CONDITION);
    assert_eq!(ready["status"], "False");
    assert_eq!(ready["reason"], READY_REASON_FAILED);
    assert_eq!(
        ready["message"],
        "Service shop/cart is of type ExternalName, which cannot be exported."
    );
    let valid = condition(&conditions, VALID_CONDITION);
    assert_eq!(valid["status"], "False");
    assert_eq!(valid["reason"], "InvalidServiceType");
    assert_eq!(
        valid["message"],
        "Service shop/cart is of type ExternalName, which cannot be exported."
    );
    assert_eq!(
        updated_conditions(&conditions, &wanted, Some(1), at(200)),
        None
    );
}

#[test]
fn without_a_valid_set_conflict_is_left_alone() {
    let existing = json!({"type": "Conflict", "status": "True", "reason": "PortConflict",
        "message": "m", "lastTransitionTime": time_text(50), "observedGeneration": 1});
    let export = local_export("cart", Validity::Valid, vec![existing.clone()]);
    let wanted = wanted(&export, &id("c1"), None, None);
    assert_eq!(wanted.set.len(), 1, "only Valid, not Ready: {wanted:?}");
    assert!(wanted.remove.is_empty());
    let conditions =
        updated_conditions(&export.conditions, &wanted, Some(1), at(100)).expect("Valid added");
    assert_eq!(conditions[0], existing);
    assert_eq!(condition(&conditions, VALID_CONDITION)["status"], "True");

    // Nor is it set for a cluster that is not a constituent, whose export
    // is pending.
    let (_, merged) = conflicting();
    let wanted_elsewhere = super::wanted(&export, &id("c9"), Some(&merged), None);
    let types: Vec<&str> = wanted_elsewhere.set.iter().map(|c| c.type_).collect();
    assert_eq!(types, [VALID_CONDITION, READY_CONDITION]);
    assert!(!wanted_elsewhere.set[1].status);
    assert_eq!(wanted_elsewhere.set[1].reason, READY_REASON_PENDING);
}

#[test]
fn long_messages_are_cut_at_a_character_boundary() {
    let message = "é".repeat(MAX_MESSAGE_BYTES);
    let cut = bounded(&message);
    assert!(cut.len() <= MAX_MESSAGE_BYTES);
    assert_eq!(
        cut.len(),
        MAX_MESSAGE_BYTES,
        "two-byte characters fill it exactly"
    );
    let odd = format!("a{message}");
    assert_eq!(bounded(&odd).len(), MAX_MESSAGE_BYTES - 1);
    let wanted = Wanted {
        set: vec![WantedCondition {
            type_: CONFLICT_CONDITION,
            status: true,
            reason: "PortConflict".to_owned(),
            message: odd.clone(),
        }],
        remove: Vec::new(),
    };
    let written = updated_conditions(&[], &wanted, None, at(1)).expect("written");
    assert!(written[0].get("observedGeneration").is_none());
    assert_eq!(
        updated_conditions(&written, &wanted, None, at(2)),
        None,
        "a cut message still counts as the same"
    );
}

#[test]
fn ready_names_whom_a_scoped_export_reaches() {
    let scoped = "apiVersion: multicluster.x-k8s.io/v1beta1\nkind: ServiceExport\nmetadata: {name: ledger, namespace: shop, creationTimestamp: \"2025-01-01T00:00:00Z\", annotations: {strait.dev/allowed-clusters: \"c2,c4\", strait.dev/allowed-networks: net-a}}\n";
    let c1 = translated(
        "c1",
        &[
            service("cart", HTTP),
            export("cart", OLDER),
            service("ledger", HTTP),
            scoped.to_owned(),
        ],
    );
    let (set, errors) = assemble(vec![c1.cluster.clone()]);
    assert!(errors.is_empty(), "a valid set: {errors:?}");
    let merged = merge(&set);
    let validity = validity_of(&c1);
    let ready = |name: &str| {
        let export = local_export(name, validity[&key(name)].clone(), Vec::new());
        wanted(&export, &id("c1"), Some(&merged), None)
            .set
            .into_iter()
            .find(|c| c.type_ == READY_CONDITION)
            .expect("Ready")
    };
    // It says to whom, and not that they import it: a cluster without
    // the namespace does not.
    let cart = ready("cart").message;
    assert!(
        cart.contains("exported to every cluster of the set")
            && cart.contains("where namespace shop exists")
            && !cart.contains("imports it."),
        "{cart}"
    );
    let ledger = ready("ledger");
    assert!(ledger.status);
    assert!(
        ledger.message.starts_with(
        "Service shop/ledger is exported to clusters c2, c4 and networks net-a only (its access policy): the other clusters of the set are not told of it and do not import it. Those admitted import it where namespace shop exists."
        ),
        "{}",
        ledger.message
    );
    // Neither has an EndpointSlice here: said, not left to look healthy.
    assert!(
        cart.ends_with(" It has no ready endpoint in this cluster: importers send its traffic to the other exporting clusters, and get no backend where none has one."),
        "{cart}"
    );
}

#[test]
fn an_export_with_a_ready_endpoint_does_not_say_it_has_none() {
    let slice = "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {name: cart-1, namespace: shop, labels: {kubernetes.io/service-name: cart}}\naddressType: IPv4\nports: [{name: http, port: 8080, protocol: TCP}]\nendpoints: [{addresses: [10.1.0.5], conditions: {ready: true}}]\n";
    let ready_message = |objects: &[String]| {
        let c1 = translated("c1", objects);
        let (set, errors) = assemble(vec![c1.cluster.clone()]);
        assert!(errors.is_empty(), "a valid set: {errors:?}");
        let merged = merge(&set);
        let validity = validity_of(&c1);
        let export = local_export("cart", validity[&key("cart")].clone(), Vec::new());
        wanted(&export, &id("c1"), Some(&merged), None)
            .set
            .into_iter()
            .find(|c| c.type_ == READY_CONDITION)
            .expect("Ready")
            .message
    };
    let with = ready_message(&[
        service("cart", HTTP),
        export("cart", OLDER),
        slice.to_owned(),
    ]);
    assert!(!with.contains("no ready endpoint"), "{with}");
    let unready = slice.replace("ready: true", "ready: false");
    let without = ready_message(&[service("cart", HTTP), export("cart", OLDER), unready]);
    assert!(without.contains("no ready endpoint"), "{without}");
}

#[test]
fn the_losing_side_of_a_port_conflict_is_told_which_of_its_ports_are_not_exposed() {
    let c1 = translated("c1", &[service("cart", HTTP), export("cart", OLDER)]);
    let c2 = translated(
        "c2",
        &[
            // `http` on another number: it collides by name with c1's,
            // which is older; `metrics` is new and joins the union.
            service(
                "cart",
                "{ports: [{name: http, port: 8080}, {name: metrics, port: 9100}]}",
            ),
            export("cart", YOUNGER),
        ],
    );
    let (set, errors) = assemble(vec![c1.cluster.clone(), c2.cluster.clone()]);
    assert!(errors.is_empty(), "a valid set: {errors:?}");
    let merged = merge(&set);
    let message_of = |cluster: &Translated, id_text: &str| {
        let validity = validity_of(cluster);
        let export = local_export("cart", validity[&key("cart")].clone(), Vec::new());
        let wanted = wanted(&export, &id(id_text), Some(&merged), None);
        let conditions =
            updated_conditions(&export.conditions, &wanted, Some(1), at(100)).expect("written");
        condition(&conditions, CONFLICT_CONDITION)["message"]
            .as_str()
            .expect("a message")
            .to_owned()
    };
    let losing = message_of(&c2, "c2");
    assert!(
        losing.ends_with(
            "This cluster's ports not exposed (each collides with an older export's): http 8080/TCP."
        ),
        "{losing}"
    );
    let winning = message_of(&c1, "c1");
    assert!(!winning.contains("not exposed"), "{winning}");
}

#[test]
fn ready_names_who_imports_and_who_cannot_as_they_last_said() {
    use std::sync::Arc;

    let (c1, merged) = conflicting();
    let export = local_export("cart", validity_of(&c1)[&key("cart")].clone(), Vec::new());
    let network = |n: &str| crate::model::NetworkId::new(n).expect("network");
    let said = |imports: bool| {
        let mut account = ImportAccount::default();
        if imports {
            account.imported.insert("shop/cart".to_owned());
        } else {
            account
                .not_imported
                .insert("shop/cart".to_owned(), NotImported::NoNamespace);
        }
        Some(Arc::new(account))
    };
    let peers = |c2_imports: bool| PeerImports {
        clusters: BTreeMap::from([
            (id("c2"), (network("net-b"), said(c2_imports))),
            (id("c3"), (network("net-b"), None)),
        ]),
    };
    let ready_message = |conditions: &[Value]| {
        condition(conditions, READY_CONDITION)["message"]
            .as_str()
            .expect("a message")
            .to_owned()
    };
    let missing = wanted(&export, &id("c1"), Some(&merged), Some(&peers(false)));
    let first = updated_conditions(&[], &missing, Some(1), at(100)).expect("a first write");
    let message = ready_message(&first);
    assert!(
        message.starts_with("Service shop/cart is exported to every cluster of the set."),
        "{message}"
    );
    assert!(
        message.ends_with(" Not imported in c2: namespace shop does not exist there (Strait never creates one). No account from c3 (its gateway has not answered this one's question yet). (As each cluster's gateway last said; asked every 30 s.)"),
        "{message}"
    );
    assert_eq!(condition(&first, READY_CONDITION)["status"], "True");
    // The same account again writes nothing.
    assert_eq!(updated_conditions(&first, &missing, Some(1), at(150)), None);
    // c2's admin creates the namespace: the message changes, the status
    // and its transition time do not.
    let imported = wanted(&export, &id("c1"), Some(&merged), Some(&peers(true)));
    let second = updated_conditions(&first, &imported, Some(1), at(200)).expect("rewritten");
    assert!(
        ready_message(&second).contains("Imported in c2. No account from c3"),
        "{}",
        ready_message(&second)
    );
    assert_eq!(
        condition(&second, READY_CONDITION)["lastTransitionTime"],
        time_text(100)
    );
    // Without any account the message says where to look instead.
    let none = wanted(
        &export,
        &id("c1"),
        Some(&merged),
        Some(&PeerImports::default()),
    );
    let third = updated_conditions(&[], &none, Some(1), at(100)).expect("written");
    assert!(
        ready_message(&third).contains("which did is in their ServiceImports"),
        "{}",
        ready_message(&third)
    );
}
