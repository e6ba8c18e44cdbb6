//! A translation made for the changed services alone must equal one made
//! whole from the same store: the same services, gateways and imports, and
//! the same findings (each bad object reported once, a fixed one no more).

use kube::core::ApiResource;
use std::sync::Arc;

use serde_json::{Value, json};

use super::*;
use crate::diagnostics::Origin;
use crate::discovery::kube::arrived::Arrived;
use crate::discovery::kube::store::StoreEvent;
use crate::discovery::kube::stored::decode;

fn resource(kind: &str) -> ApiResource {
    match kind {
        "Service" => ApiResource::erase::<k8s_openapi::api::core::v1::Service>(&()),
        "EndpointSlice" => {
            ApiResource::erase::<k8s_openapi::api::discovery::v1::EndpointSlice>(&())
        }
        "ServiceExport" => ApiResource {
            group: "multicluster.x-k8s.io".into(),
            version: "v1beta1".into(),
            api_version: "multicluster.x-k8s.io/v1beta1".into(),
            kind: kind.into(),
            plural: "serviceexports".into(),
        },
        "ServiceImport" => ApiResource {
            group: "multicluster.x-k8s.io".into(),
            version: "v1beta1".into(),
            api_version: "multicluster.x-k8s.io/v1beta1".into(),
            kind: kind.into(),
            plural: "serviceimports".into(),
        },
        _ => ApiResource {
            group: "about.k8s.io".into(),
            version: "v1alpha1".into(),
            api_version: "about.k8s.io/v1alpha1".into(),
            kind: "ClusterProperty".into(),
            plural: "clusterproperties".into(),
        },
    }
}

fn kind_of(name: &str) -> Kind {
    match name {
        "Service" => Kind::Service,
        "EndpointSlice" => Kind::EndpointSlice,
        "ServiceExport" => Kind::ServiceExport,
        "ServiceImport" => Kind::ServiceImport,
        _ => Kind::ClusterProperty,
    }
}

fn apply(store: &mut ClusterStore, kind: &str, object: Value) -> bool {
    let object: Arrived = serde_json::from_value(object).expect("object arrives");
    let (key, stored) = decode(
        &resource(kind),
        &object,
        &std::sync::Arc::new(Origin::file("cluster c1 API")),
        false,
    );
    store.apply(kind_of(kind), StoreEvent::Apply(key, stored))
}

fn delete(store: &mut ClusterStore, kind: &str, namespace: &str, name: &str) -> bool {
    store.apply(
        kind_of(kind),
        StoreEvent::Delete((namespace.into(), name.into())),
    )
}

fn property(name: &str, value: &str) -> Value {
    json!({"metadata": {"name": name}, "spec": {"value": value}})
}

fn service(name: &str, port: u32) -> Value {
    json!({"metadata": {"name": name, "namespace": "shop"},
        "spec": {"type": "ClusterIP", "clusterIP": "10.96.0.10",
            "ports": [{"name": "http", "port": port, "protocol": "TCP"}]}})
}

fn gateway() -> Value {
    json!({"metadata": {"name": "strait-gateway", "namespace": "strait-system",
            "labels": {"strait.dev/gateway": "true"}},
        "spec": {"type": "LoadBalancer", "ports": [{"name": "tunnel", "port": 15008}]},
        "status": {"loadBalancer": {"ingress": [{"ip": "198.51.100.1"}]}}})
}

fn export(name: &str) -> Value {
    json!({"metadata": {"name": name, "namespace": "shop"}, "spec": {}})
}

fn import(name: &str, ips: &[&str]) -> Value {
    json!({"metadata": {"name": name, "namespace": "shop"},
        "spec": {"type": "ClusterSetIP", "ips": ips,
            "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}})
}

fn slice(name: &str, service: &str, addresses: &[&str]) -> Value {
    let endpoints: Vec<Value> = addresses
        .iter()
        .map(|a| json!({"addresses": [a], "conditions": {"ready": true}}))
        .collect();
    json!({"metadata": {"name": name, "namespace": "shop",
            "labels": {"kubernetes.io/service-name": service}},
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
        "endpoints": endpoints})
}

struct Fixture {
    source: ClusterSource,
    store: ClusterStore,
    options: KubeOptions,
    exported: Exported,
    /// The set's exports revision, and what came or went at it.
    exports: u64,
    exports_changed: BTreeSet<ObjectKey>,
    translation: Translation,
    revision: u64,
}

impl Fixture {
    fn new() -> Self {
        Self::of(
            ClusterSource::Kubeconfig("c1.kubeconfig".into()),
            KubeOptions::default(),
        )
    }

    /// The local cluster of a gateway writing export status: its
    /// translation carries each export's validity.
    fn local() -> Self {
        Self::of(
            ClusterSource::Local,
            KubeOptions {
                local_exports: true,
                ..KubeOptions::default()
            },
        )
    }

    fn of(source: ClusterSource, options: KubeOptions) -> Self {
        let mut store = ClusterStore::default();
        store.set_watched(Kind::ALL.into_iter().collect());
        apply(
            &mut store,
            "ClusterProperty",
            property("cluster.clusterset.k8s.io", "c1"),
        );
        apply(
            &mut store,
            "ClusterProperty",
            property("network.clusterset.k8s.io", "net-a"),
        );
        apply(&mut store, "Service", gateway());
        for name in ["cart", "web", "idle"] {
            apply(&mut store, "Service", service(name, 80));
            apply(&mut store, "ServiceExport", export(name));
        }
        apply(
            &mut store,
            "EndpointSlice",
            slice("cart-1", "cart", &["10.1.0.1", "10.1.0.2"]),
        );
        apply(
            &mut store,
            "EndpointSlice",
            slice("cart-2", "cart", &["10.1.0.3"]),
        );
        apply(
            &mut store,
            "EndpointSlice",
            slice("web-1", "web", &["10.1.0.9"]),
        );
        let exported: Exported =
            [("shop".into(), ["cart", "web", "idle"].map(Arc::from).into())].into();
        store.take_changes();
        let translation = {
            let none = BTreeSet::new();
            let inputs = inputs(&source, &store, (&exported, 1, &none), &options, 0);
            translate_whole(&inputs, None)
        };
        Self {
            source,
            store,
            options,
            exported,
            exports: 1,
            exports_changed: BTreeSet::new(),
            translation,
            revision: 0,
        }
    }

    /// Translates the changes, checks the result against a whole
    /// translation, and returns whether it was made partially.
    fn step(&mut self, what: &str) -> bool {
        let source = self.source.clone();
        let changes = self.store.take_changes();
        // A store that changed moves the cluster's revision; a set whose
        // exports alone changed does not.
        if !matches!(changes, Changes::Nothing) {
            self.revision += 1;
        }
        let inputs = inputs(
            &source,
            &self.store,
            (&self.exported, self.exports, &self.exports_changed),
            &self.options,
            self.revision,
        );
        let next = translate(&inputs, Some(&self.translation), &changes);
        let whole = translate_whole(&inputs, None);
        let (got, want) = (
            next.cluster.as_ref().expect("a cluster"),
            whole.cluster.as_ref().expect("a cluster"),
        );
        assert_eq!(got.services, want.services, "{what}: services");
        assert_eq!(got.gateways, want.gateways, "{what}: gateways");
        assert_eq!(got.imports, want.imports, "{what}: imports");
        assert_eq!(next.validity, whole.validity, "{what}: validity");
        assert_eq!(
            sorted(&next.findings),
            sorted(&whole.findings),
            "{what}: findings"
        );
        // Unchanged services stay the same allocation.
        for (key, service) in &got.services {
            if let Some(before) = self
                .translation
                .cluster
                .as_ref()
                .and_then(|c| c.services.get(key))
                && before == service
            {
                assert!(Arc::ptr_eq(before, service), "{what}: {key} shared");
            }
        }
        let partial = next.partial;
        self.translation = next;
        partial
    }
}

fn inputs<'a>(
    source: &'a ClusterSource,
    store: &'a ClusterStore,
    (exported, exports, exports_changed): (&'a Exported, u64, &'a BTreeSet<ObjectKey>),
    options: &'a KubeOptions,
    revision: u64,
) -> Inputs<'a> {
    Inputs {
        source,
        store,
        stale: false,
        revision,
        exported,
        exports,
        exports_changed,
        options,
    }
}

fn sorted(findings: &[Diagnostic]) -> Vec<String> {
    let mut texts: Vec<String> = findings.iter().map(ToString::to_string).collect();
    texts.sort();
    texts
}

#[test]
fn a_translation_of_the_changed_services_equals_a_whole_one() {
    let mut fixture = Fixture::new();

    assert!(apply(
        &mut fixture.store,
        "EndpointSlice",
        slice("cart-1", "cart", &["10.1.0.5"])
    ));
    assert!(fixture.step("an endpoint moved"), "translated alone");

    apply(
        &mut fixture.store,
        "EndpointSlice",
        slice("cart-3", "cart", &["127.0.0.1", "10.1.0.6"]),
    );
    assert!(fixture.step("a loopback endpoint"));
    assert_eq!(
        fixture.translation.findings.len(),
        1,
        "reported once: {:?}",
        fixture.translation.findings
    );
    assert_eq!(
        fixture.translation.findings[0].object.as_deref(),
        Some("EndpointSlice shop/cart-3")
    );

    apply(
        &mut fixture.store,
        "EndpointSlice",
        slice("cart-3", "cart", &["10.1.0.6"]),
    );
    assert!(fixture.step("the loopback endpoint fixed"));
    assert!(
        fixture.translation.findings.is_empty(),
        "{:?}",
        fixture.translation.findings
    );

    apply(
        &mut fixture.store,
        "EndpointSlice",
        slice("cart-2", "web", &["10.1.0.3"]),
    );
    assert!(fixture.step("a slice moved to another service"));

    assert!(delete(
        &mut fixture.store,
        "EndpointSlice",
        "shop",
        "cart-1"
    ));
    assert!(fixture.step("a slice deleted"));

    apply(
        &mut fixture.store,
        "EndpointSlice",
        slice("web-1", "web", &["127.0.0.2"]),
    );
    apply(&mut fixture.store, "Service", service("cart", 70_000));
    assert!(fixture.step("a bad port and a bad slice at once"));
    assert_eq!(
        fixture.translation.findings.len(),
        2,
        "{:?}",
        fixture.translation.findings
    );

    apply(&mut fixture.store, "Service", service("cart", 80));
    assert!(delete(&mut fixture.store, "EndpointSlice", "shop", "web-1"));
    assert!(fixture.step("both fixed"));
    assert!(
        fixture.translation.findings.is_empty(),
        "{:?}",
        fixture.translation.findings
    );

    assert!(delete(&mut fixture.store, "ServiceExport", "shop", "idle"));
    assert!(fixture.step("an export deleted"));

    apply(&mut fixture.store, "Service", gateway());
    apply(
        &mut fixture.store,
        "ClusterProperty",
        property("network.clusterset.k8s.io", "net-b"),
    );
    assert!(
        !fixture.step("the network changed"),
        "a property translates the whole cluster"
    );
}

#[test]
fn a_relist_or_a_state_change_translates_the_whole_cluster() {
    let mut fixture = Fixture::new();
    fixture.store.apply(Kind::EndpointSlice, StoreEvent::Init);
    let object: Arrived =
        serde_json::from_value(slice("cart-9", "cart", &["10.1.0.7"])).expect("object arrives");
    let (key, stored) = decode(
        &resource("EndpointSlice"),
        &object,
        &std::sync::Arc::new(Origin::file("cluster c1 API")),
        false,
    );
    fixture
        .store
        .apply(Kind::EndpointSlice, StoreEvent::InitApply(key, stored));
    assert!(
        fixture
            .store
            .apply(Kind::EndpointSlice, StoreEvent::InitDone)
    );
    assert!(!fixture.step("a relist"));

    // The index follows the relist: a later change of the new slice is
    // translated alone, and right.
    apply(
        &mut fixture.store,
        "EndpointSlice",
        slice("cart-9", "cart", &["10.1.0.8"]),
    );
    assert!(fixture.step("a slice from the relist moved"));

    fixture.store.all_changed();
    assert!(!fixture.step("the sync state changed"));
}

/// The real API server's load-balancer controller writes the gateway
/// Service's address after it is created: a change to the gateway Service
/// alone translates the changed service once, with no duplicate finding.
#[test]
fn a_change_to_the_gateway_service_alone_translates_it_once() {
    let mut fixture = Fixture::new();
    let mut gateway = gateway();
    gateway["status"] = json!({"loadBalancer": {"ingress": [{"ip": "172.31.100.11"}]}});
    apply(&mut fixture.store, "Service", gateway);
    fixture.step("the gateway's load-balancer address written");
    assert!(
        fixture.translation.findings.is_empty(),
        "{:?}",
        fixture.translation.findings
    );
}

impl Fixture {
    /// The set's exports as they are now: `name` exported (by any cluster)
    /// or not, one exports revision on.
    fn set_exported(&mut self, name: &str, exported: bool) {
        let names = self.exported.entry("shop".into()).or_default();
        if exported {
            names.insert(name.into());
        } else {
            names.remove(name);
        }
        self.exports += 1;
        self.exports_changed = BTreeSet::from([("shop".into(), name.into())]);
    }
}

#[test]
fn an_export_coming_or_going_translates_only_its_service() {
    let mut fixture = Fixture::new();
    // This cluster has a Service `extra`, exported by no cluster yet.
    apply(&mut fixture.store, "Service", service("extra", 80));
    apply(
        &mut fixture.store,
        "EndpointSlice",
        slice("extra-1", "extra", &["10.1.0.7"]),
    );
    assert!(fixture.step("a Service nobody exports"));
    let service_of = |fixture: &Fixture, name: &str| {
        fixture
            .translation
            .cluster
            .as_ref()
            .is_some_and(|c| c.services.contains_key(&ServiceKey::new("shop", name)))
    };
    assert!(!service_of(&fixture, "extra"));

    // Another cluster exports `extra`: this one's Service joins the set.
    fixture.set_exported("extra", true);
    assert!(fixture.step("extra exported elsewhere"), "translated alone");
    assert!(service_of(&fixture, "extra"));

    // `web` is exported by no cluster any more.
    fixture.set_exported("web", false);
    assert!(fixture.step("web unexported"), "translated alone");
    assert!(!service_of(&fixture, "web"));

    // Two revisions on at once: what came or went in between is not
    // known, so the whole cluster is translated.
    fixture.set_exported("web", true);
    fixture.exports += 1;
    assert!(!fixture.step("two revisions at once"));
    assert!(service_of(&fixture, "web"));
}

/// The local cluster of a gateway writing export status is translated per
/// changed service too, each export's validity spliced like its service;
/// a ServiceImport changed (Strait's own writes of ClusterSetIPs) is its
/// service changed.
#[test]
fn the_local_cluster_with_export_status_is_translated_per_service() {
    let mut fixture = Fixture::local();
    assert!(
        fixture
            .translation
            .validity
            .as_ref()
            .is_some_and(|v| v.len() == 3),
        "every export has a validity: {:?}",
        fixture.translation.validity
    );

    apply(&mut fixture.store, "ServiceImport", import("cart", &[]));
    assert!(fixture.step("an import created"), "translated alone");
    apply(
        &mut fixture.store,
        "ServiceImport",
        import("cart", &["10.96.9.1"]),
    );
    assert!(
        fixture.step("its ClusterSetIP recorded"),
        "translated alone"
    );
    let ips = |fixture: &Fixture| {
        fixture
            .translation
            .cluster
            .as_ref()
            .and_then(|c| c.imports.get(&ServiceKey::new("shop", "cart")).cloned())
    };
    assert_eq!(
        ips(&fixture),
        Some(vec!["10.96.9.1".parse().expect("an IP")])
    );

    apply(&mut fixture.store, "Service", service("web", 70_000));
    assert!(fixture.step("a Service turned invalid"), "translated alone");
    assert!(matches!(
        fixture
            .translation
            .validity
            .as_ref()
            .and_then(|v| v.get(&ServiceKey::new("shop", "web"))),
        Some(Validity::InvalidService(_))
    ));
    assert!(delete(&mut fixture.store, "Service", "shop", "idle"));
    assert!(
        fixture.step("an exported Service deleted"),
        "translated alone"
    );
    apply(&mut fixture.store, "Service", service("web", 80));
    assert!(delete(&mut fixture.store, "ServiceExport", "shop", "cart"));
    assert!(
        fixture.step("fixed, and an export deleted"),
        "translated alone"
    );
    assert!(delete(&mut fixture.store, "ServiceImport", "shop", "cart"));
    assert!(fixture.step("the import deleted"), "translated alone");
    assert_eq!(ips(&fixture), None);
}
