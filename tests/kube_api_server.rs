//! The stand-in API server itself (`kube_api::ApiServer`), driven through a
//! real kube-rs `Client`: server-side apply and field ownership, ClusterIP
//! allocation, the namespace rule, deletes with garbage collection. The
//! MCS controller relies on these behaving as a real server's do; each test
//! checks what a wrong server would get wrong.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on what they set up

mod kube_api;
#[path = "kube_api_server/schema.rs"]
mod schema;

use std::time::Duration;

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch,
    PatchParams, PostParams, Preconditions, WatchEvent, WatchParams,
};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::core::Status;
use kube::{Client, Config, Resource};
use kube_api::ApiServer;
use kube_api::fixtures::namespace;
use serde_json::{Value, json};

/// The field manager of the tests' controller.
const MANAGER: &str = "strait-mcs";

async fn start() -> (ApiServer, Client) {
    let server = ApiServer::start(&["v1beta1"]).await;
    server.apply(namespace("shop"));
    let kubeconfig = Kubeconfig::from_yaml(&server.kubeconfig("test")).expect("kubeconfig");
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .expect("client config");
    let client = Client::try_from(config).expect("client");
    (server, client)
}

fn import_resource() -> ApiResource {
    let gvk = GroupVersionKind::gvk("multicluster.x-k8s.io", "v1beta1", "ServiceImport");
    ApiResource::from_gvk_with_plural(&gvk, "serviceimports")
}

fn imports(client: &Client) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), "shop", &import_resource())
}

fn import_config(ports: &[u16]) -> Value {
    let ports: Vec<Value> = ports
        .iter()
        .map(|p| json!({"port": p, "protocol": "TCP"}))
        .collect();
    json!({"apiVersion": "multicluster.x-k8s.io/v1beta1", "kind": "ServiceImport",
        "metadata": {"name": "cart", "labels": {"app": "cart"}},
        "spec": {"type": "ClusterSetIP", "ports": ports}})
}

fn service_config(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": "shop"}, "spec": spec})
}

fn apply() -> PatchParams {
    PatchParams::apply(MANAGER)
}

/// The Status of a refused request.
fn refusal<T: std::fmt::Debug>(result: kube::Result<T>) -> Box<Status> {
    match result {
        Err(kube::Error::Api(status)) => status,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

/// The response code of the last write request.
fn last_code(server: &ApiServer) -> u16 {
    server.writes().last().expect("a write").code
}

fn revision(object: &Value) -> String {
    object["metadata"]["resourceVersion"]
        .as_str()
        .expect("a resource version")
        .to_owned()
}

fn managed_entry<'a>(object: &'a Value, manager: &str) -> &'a Value {
    object["metadata"]["managedFields"]
        .as_array()
        .and_then(|entries| entries.iter().find(|e| e["manager"] == manager))
        .unwrap_or_else(|| panic!("no managedFields entry of {manager}: {object:#}"))
}

/// The next watch event that is not a bookmark.
async fn next_event<K>(
    events: &mut (impl futures_util::Stream<Item = kube::Result<WatchEvent<K>>> + Unpin),
) -> WatchEvent<K> {
    loop {
        let event = tokio::time::timeout(Duration::from_secs(5), events.next())
            .await
            .expect("an event")
            .expect("the stream goes on")
            .expect("an event, not an error");
        if !matches!(event, WatchEvent::Bookmark(_)) {
            return event;
        }
    }
}

#[tokio::test]
async fn apply_creates_then_updates_with_managed_fields() {
    let (server, client) = start().await;
    let imports = imports(&client);
    let created = imports
        .patch("cart", &apply(), &Patch::Apply(import_config(&[80])))
        .await
        .expect("apply creates");
    assert_eq!(last_code(&server), 201, "created");
    let uid = created.metadata.uid.clone().expect("a uid");
    let entries = created
        .metadata
        .managed_fields
        .clone()
        .expect("managed fields");
    assert_eq!(entries.len(), 1, "{entries:?}");
    assert_eq!(entries[0].manager.as_deref(), Some(MANAGER));
    assert_eq!(entries[0].operation.as_deref(), Some("Apply"));
    assert_eq!(
        entries[0].api_version.as_deref(),
        Some("multicluster.x-k8s.io/v1beta1")
    );
    assert_eq!(entries[0].fields_type.as_deref(), Some("FieldsV1"));
    assert_eq!(
        entries[0].fields_v1.as_ref().map(|f| &f.0),
        Some(&json!({"f:metadata": {"f:labels": {"f:app": {}}},
            "f:spec": {"f:ports": {}, "f:type": {}}}))
    );

    let updated = imports
        .patch("cart", &apply(), &Patch::Apply(import_config(&[80, 443])))
        .await
        .expect("apply updates");
    assert_eq!(last_code(&server), 200, "updated");
    assert_eq!(updated.metadata.uid.as_deref(), Some(uid.as_str()));
    assert_ne!(
        updated.metadata.resource_version,
        created.metadata.resource_version
    );
    assert_eq!(updated.metadata.generation, Some(2), "spec changed");
    assert_eq!(updated.data["spec"]["ports"][1]["port"], 443);
    let read = imports.get("cart").await.expect("get");
    assert_eq!(read.data["spec"], updated.data["spec"]);
    assert_eq!(
        read.metadata.managed_fields,
        updated.metadata.managed_fields
    );

    // What a real server refuses: no field manager, a config of another name
    // or kind. Nothing changes.
    let status = refusal(
        imports
            .patch(
                "cart",
                &PatchParams::default(),
                &Patch::Apply(import_config(&[1])),
            )
            .await,
    );
    assert_eq!((status.code, status.reason.as_str()), (400, "BadRequest"));
    assert!(
        status.message.contains("fieldManager is required"),
        "{status:?}"
    );
    let mut other = import_config(&[1]);
    other["metadata"]["name"] = "other".into();
    let status = refusal(imports.patch("cart", &apply(), &Patch::Apply(other)).await);
    assert_eq!(status.code, 400, "{status:?}");
    let mut export = import_config(&[1]);
    export["kind"] = "ServiceExport".into();
    let status = refusal(imports.patch("cart", &apply(), &Patch::Apply(export)).await);
    assert_eq!(status.code, 400, "{status:?}");
    let stored = server
        .object("ServiceImport", "shop", "cart")
        .expect("cart");
    assert_eq!(
        revision(&stored),
        updated.metadata.resource_version.unwrap()
    );
}

#[tokio::test]
async fn a_field_another_manager_set_survives_an_apply_that_leaves_it_out() {
    let (server, client) = start().await;
    let services: Api<Service> = Api::namespaced(client, "shop");
    let config = service_config("cart", json!({"ports": [{"name": "http", "port": 80}]}));
    services
        .patch("cart", &apply(), &Patch::Apply(config))
        .await
        .expect("created");
    let edited = server.edit(
        "Service",
        "shop",
        "cart",
        json!({"metadata": {"labels": {"team": "ops"}}, "spec": {"sessionAffinity": "ClientIP"}}),
        "kubectl-edit",
    );
    let entry = managed_entry(&edited, "kubectl-edit");
    assert_eq!(entry["operation"], "Update");
    assert_eq!(
        entry["fieldsV1"],
        json!({"f:metadata": {"f:labels": {"f:team": {}}}, "f:spec": {"f:sessionAffinity": {}}})
    );

    let config = service_config("cart", json!({"ports": [{"name": "http", "port": 8080}]}));
    let applied = services
        .patch("cart", &apply(), &Patch::Apply(config))
        .await
        .expect("applied");
    let spec = applied.spec.expect("spec");
    assert_eq!(spec.ports.expect("ports")[0].port, 8080);
    assert_eq!(spec.session_affinity.as_deref(), Some("ClientIP"));
    let labels = applied.metadata.labels.expect("labels");
    assert_eq!(labels.get("team").map(String::as_str), Some("ops"));
    assert_eq!(
        server.managers("Service", "shop", "cart"),
        [MANAGER, "kubectl-edit"]
    );
}

#[tokio::test]
async fn a_conflicting_field_is_refused_without_force_and_taken_with_it() {
    let (server, client) = start().await;
    let services: Api<Service> = Api::namespaced(client, "shop");
    let config = service_config(
        "cart",
        json!({"selector": {"app": "cart"}, "ports": [{"port": 80}]}),
    );
    services
        .patch("cart", &apply(), &Patch::Apply(config.clone()))
        .await
        .expect("created");
    server.edit(
        "Service",
        "shop",
        "cart",
        json!({"spec": {"selector": {"app": "cart-v2"}}}),
        "kubectl-edit",
    );
    let before = server.object("Service", "shop", "cart").expect("cart");

    let status = refusal(
        services
            .patch("cart", &apply(), &Patch::Apply(config.clone()))
            .await,
    );
    assert_eq!((status.code, status.reason.as_str()), (409, "Conflict"));
    assert!(
        status
            .message
            .contains("conflict with \"kubectl-edit\" using v1: .spec.selector.app"),
        "{}",
        status.message
    );
    let causes = status.details.expect("details").causes;
    assert_eq!(causes.len(), 1, "{causes:?}");
    assert_eq!(causes[0].field, ".spec.selector.app");
    assert_eq!(
        server.object("Service", "shop", "cart").as_ref(),
        Some(&before),
        "nothing changed"
    );

    let forced = services
        .patch("cart", &apply().force(), &Patch::Apply(config))
        .await
        .expect("forced");
    let selector = forced.spec.expect("spec").selector.expect("selector");
    assert_eq!(selector.get("app").map(String::as_str), Some("cart"));
    // kubectl-edit owned nothing else: it is no manager any more.
    assert_eq!(server.managers("Service", "shop", "cart"), [MANAGER]);
}

#[tokio::test]
async fn a_field_the_applier_no_longer_sets_is_removed_unless_shared() {
    let (server, client) = start().await;
    let imports = imports(&client);
    let mut config = import_config(&[80]);
    config["metadata"]["labels"] = json!({"app": "cart", "tier": "web", "zone": "a"});
    config["metadata"]["annotations"] = json!({"note": "first"});
    imports
        .patch("cart", &apply(), &Patch::Apply(config))
        .await
        .expect("created");
    // Another controller applies one of the labels with the same value: no
    // conflict, both own it.
    let other = json!({"apiVersion": "multicluster.x-k8s.io/v1beta1", "kind": "ServiceImport",
        "metadata": {"name": "cart", "labels": {"zone": "a"}}});
    imports
        .patch("cart", &PatchParams::apply("zoner"), &Patch::Apply(other))
        .await
        .expect("shared");

    let applied = imports
        .patch("cart", &apply(), &Patch::Apply(import_config(&[80])))
        .await
        .expect("applied");
    let labels = applied.metadata.labels.expect("labels");
    assert_eq!(labels.get("app").map(String::as_str), Some("cart"));
    assert!(!labels.contains_key("tier"), "{labels:?}");
    assert_eq!(labels.get("zone").map(String::as_str), Some("a"), "shared");
    assert!(
        applied.metadata.annotations.is_none(),
        "the emptied annotations go"
    );
    let stored = server
        .object("ServiceImport", "shop", "cart")
        .expect("cart");
    assert!(
        stored["metadata"].get("annotations").is_none(),
        "{stored:#}"
    );
    assert_eq!(
        managed_entry(&stored, MANAGER)["fieldsV1"],
        json!({"f:metadata": {"f:labels": {"f:app": {}}}, "f:spec": {"f:ports": {}, "f:type": {}}})
    );
}

#[tokio::test]
async fn an_apply_that_changes_nothing_keeps_the_resource_version_and_sends_no_event() {
    let (server, client) = start().await;
    let imports = imports(&client);
    let created = imports
        .patch("cart", &apply(), &Patch::Apply(import_config(&[80])))
        .await
        .expect("created");
    let version = created.metadata.resource_version.clone().expect("version");
    let mut events = imports
        .watch(&WatchParams::default().timeout(10), &version)
        .await
        .expect("watch")
        .boxed();

    let again = imports
        .patch("cart", &apply(), &Patch::Apply(import_config(&[80])))
        .await
        .expect("applied again");
    assert_eq!(
        again.metadata.resource_version.as_deref(),
        Some(version.as_str())
    );
    assert_eq!(last_code(&server), 200);
    imports
        .patch("cart", &apply(), &Patch::Apply(import_config(&[81])))
        .await
        .expect("changed");
    let event = next_event(&mut events).await;
    let WatchEvent::Modified(object) = event else {
        panic!("expected MODIFIED, got {event:?}");
    };
    assert_eq!(
        object.data["spec"]["ports"][0]["port"], 81,
        "the first event is the change"
    );
}

#[tokio::test]
async fn apply_to_the_status_subresource_changes_the_status_only() {
    let (server, client) = start().await;
    let imports = imports(&client);
    let mut config = import_config(&[80]);
    config["status"] = json!({"clusters": [{"cluster": "ignored"}]});
    let created = imports
        .patch("cart", &apply(), &Patch::Apply(config))
        .await
        .expect("created");
    assert!(created.data.get("status").is_none(), "{:?}", created.data);

    let status = json!({"apiVersion": "multicluster.x-k8s.io/v1beta1", "kind": "ServiceImport",
        "metadata": {"name": "cart"},
        "spec": {"type": "Headless"},
        "status": {"clusters": [{"cluster": "c1"}, {"cluster": "c2"}]}});
    let written = imports
        .patch_status("cart", &apply(), &Patch::Apply(status))
        .await
        .expect("status applied");
    assert_eq!(written.data["status"]["clusters"][1]["cluster"], "c2");
    assert_eq!(
        written.data["spec"]["type"], "ClusterSetIP",
        "spec untouched"
    );
    assert_eq!(written.metadata.generation, Some(1));
    let stored = server
        .object("ServiceImport", "shop", "cart")
        .expect("cart");
    let entries = stored["metadata"]["managedFields"]
        .as_array()
        .expect("entries");
    assert_eq!(entries.len(), 2, "{entries:#?}");
    let on_status = entries
        .iter()
        .find(|e| e["subresource"] == "status")
        .expect("a status entry");
    assert_eq!(
        on_status["fieldsV1"],
        json!({"f:status": {"f:clusters": {}}})
    );

    // Applying the object again, status and all, changes its spec only.
    let mut config = import_config(&[81]);
    config["status"] = json!({"clusters": [{"cluster": "ignored"}]});
    let applied = imports
        .patch("cart", &apply(), &Patch::Apply(config))
        .await
        .expect("applied");
    assert_eq!(applied.data["spec"]["ports"][0]["port"], 81);
    assert_eq!(
        applied.data["status"],
        json!({"clusters": [{"cluster": "c1"}, {"cluster": "c2"}]})
    );
}

#[tokio::test]
async fn cluster_ips_are_allocated_single_and_dual_stack_and_cannot_change() {
    let (server, client) = start().await;
    // A live address the allocator must step over.
    server.apply(service_config(
        "taken",
        json!({"type": "ClusterIP", "clusterIP": "10.96.0.2"}),
    ));
    let services: Api<Service> = Api::namespaced(client, "shop");
    let single = services
        .patch(
            "single",
            &apply(),
            &Patch::Apply(service_config("single", json!({"ports": [{"port": 80}]}))),
        )
        .await
        .expect("created");
    let spec = single.spec.clone().expect("spec");
    assert_eq!(spec.cluster_ip.as_deref(), Some("10.96.0.1"));
    assert_eq!(spec.cluster_ips, Some(vec!["10.96.0.1".to_owned()]));
    assert_eq!(spec.ip_families, Some(vec!["IPv4".to_owned()]));
    assert_eq!(spec.ip_family_policy.as_deref(), Some("SingleStack"));
    assert_eq!(spec.type_.as_deref(), Some("ClusterIP"));
    assert_eq!(spec.session_affinity.as_deref(), Some("None"));
    assert_eq!(spec.internal_traffic_policy.as_deref(), Some("Cluster"));
    let port = &spec.ports.expect("ports")[0];
    assert_eq!(port.protocol.as_deref(), Some("TCP"));
    assert_eq!(
        port.target_port,
        Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(80))
    );
    // The server's values are no applier's.
    let stored = server.object("Service", "shop", "single").expect("single");
    assert_eq!(
        managed_entry(&stored, MANAGER)["fieldsV1"],
        json!({"f:spec": {"f:ports": {}}})
    );

    let mut dual: Service = serde_json::from_value(service_config(
        "dual",
        json!({"ipFamilyPolicy": "PreferDualStack", "ports": [{"port": 80}]}),
    ))
    .expect("a Service");
    dual.metadata.namespace = None;
    let dual = services
        .create(&PostParams::default(), &dual)
        .await
        .expect("created");
    let spec = dual.spec.expect("spec");
    assert_eq!(
        spec.cluster_ips,
        Some(vec!["10.96.0.3".to_owned(), "fd00:10:96::1".to_owned()]),
        "10.96.0.2 is live"
    );
    assert_eq!(
        spec.ip_families,
        Some(vec!["IPv4".to_owned(), "IPv6".to_owned()])
    );
    let six = services
        .patch(
            "six",
            &apply(),
            &Patch::Apply(service_config(
                "six",
                json!({"ipFamilyPolicy": "RequireDualStack", "ipFamilies": ["IPv6"]}),
            )),
        )
        .await
        .expect("created");
    let spec = six.spec.expect("spec");
    assert_eq!(spec.cluster_ip.as_deref(), Some("fd00:10:96::2"));
    assert_eq!(
        spec.cluster_ips,
        Some(vec!["fd00:10:96::2".to_owned(), "10.96.0.4".to_owned()])
    );
    assert_eq!(
        spec.ip_families,
        Some(vec!["IPv6".to_owned(), "IPv4".to_owned()])
    );
    let headless = services
        .patch(
            "headless",
            &apply(),
            &Patch::Apply(service_config("headless", json!({"clusterIP": "None"}))),
        )
        .await
        .expect("created");
    let spec = headless.spec.expect("spec");
    assert_eq!(spec.cluster_ips, Some(vec!["None".to_owned()]));
    assert_eq!(spec.ip_families, Some(vec!["IPv4".to_owned()]));

    // An apply that leaves the address out keeps it (and changes nothing).
    let again = services
        .patch(
            "single",
            &apply(),
            &Patch::Apply(service_config("single", json!({"ports": [{"port": 80}]}))),
        )
        .await
        .expect("applied");
    assert_eq!(
        again.metadata.resource_version,
        single.metadata.resource_version
    );
    // Changing it is invalid, as on a real server; so is a live address.
    let moved = service_config(
        "single",
        json!({"clusterIP": "10.96.0.99", "ports": [{"port": 80}]}),
    );
    let status = refusal(
        services
            .patch("single", &apply(), &Patch::Apply(moved))
            .await,
    );
    assert_eq!((status.code, status.reason.as_str()), (422, "Invalid"));
    assert!(
        status.message.contains("may not change once set"),
        "{}",
        status.message
    );
    let status = refusal(
        services
            .patch(
                "twin",
                &apply(),
                &Patch::Apply(service_config("twin", json!({"clusterIP": "10.96.0.1"}))),
            )
            .await,
    );
    assert_eq!(status.code, 422, "{status:?}");
    assert!(
        status.message.contains("already allocated"),
        "{}",
        status.message
    );
    assert!(server.object("Service", "shop", "twin").is_none());
}

#[tokio::test]
async fn creating_in_a_missing_namespace_is_not_found() {
    let (server, client) = start().await;
    let services: Api<Service> = Api::namespaced(client.clone(), "nowhere");
    let config = json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "cart"}, "spec": {"ports": [{"port": 80}]}});
    let status = refusal(
        services
            .patch("cart", &apply(), &Patch::Apply(config.clone()))
            .await,
    );
    assert_eq!((status.code, status.reason.as_str()), (404, "NotFound"));
    assert_eq!(status.message, "namespaces \"nowhere\" not found");
    let details = status.details.expect("details");
    assert_eq!(
        (details.name.as_str(), details.kind.as_str()),
        ("nowhere", "namespaces")
    );
    let service: Service = serde_json::from_value(config.clone()).expect("a Service");
    let status = refusal(services.create(&PostParams::default(), &service).await);
    assert_eq!(status.code, 404, "{status:?}");
    assert!(server.object("Service", "nowhere", "cart").is_none());

    // Once the Namespace exists, the same requests succeed.
    let namespaces: Api<Namespace> = Api::all(client);
    let mut nowhere = Namespace::default();
    nowhere.metadata.name = Some("nowhere".to_owned());
    let created = namespaces
        .create(&PostParams::default(), &nowhere)
        .await
        .expect("namespace created");
    assert_eq!(
        created.status.and_then(|s| s.phase).as_deref(),
        Some("Active")
    );
    let names: Vec<String> = namespaces
        .list(&ListParams::default())
        .await
        .expect("namespaces")
        .items
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect();
    for name in ["default", "kube-system", "shop", "nowhere"] {
        assert!(names.iter().any(|n| n == name), "{name} in {names:?}");
    }
    services
        .patch("cart", &apply(), &Patch::Apply(config))
        .await
        .expect("created in the namespace");
    assert_eq!(last_code(&server), 201);
}

/// An owner reference to `owner`.
fn owned_by(owner: &Value) -> Value {
    json!([{"apiVersion": owner["apiVersion"], "kind": owner["kind"],
        "name": owner["metadata"]["name"], "uid": owner["metadata"]["uid"],
        "controller": true, "blockOwnerDeletion": true}])
}

fn slice_config(name: &str, owners: Option<Value>, cluster: &str) -> Value {
    let mut slice = json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": name, "namespace": "shop",
            "labels": {"multicluster.kubernetes.io/service-name": "cart",
                "multicluster.kubernetes.io/source-cluster": cluster}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": ["10.2.0.1"], "conditions": {"ready": true}}]});
    if let Some(owners) = owners {
        slice["metadata"]["ownerReferences"] = owners;
    }
    slice
}

#[tokio::test]
async fn deleting_an_owner_collects_its_service_and_endpoint_slices() {
    let (server, client) = start().await;
    let imports = imports(&client);
    let services: Api<Service> = Api::namespaced(client.clone(), "shop");
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), "shop");
    let import = imports
        .patch("cart", &apply(), &Patch::Apply(import_config(&[80])))
        .await
        .expect("import");
    let import = serde_json::to_value(&import).expect("json");
    let mut derived = service_config("derived-cart", json!({"ports": [{"port": 80}]}));
    derived["metadata"]["ownerReferences"] = owned_by(&import);
    let derived = services
        .patch("derived-cart", &apply(), &Patch::Apply(derived))
        .await
        .expect("service");
    let mut derived = serde_json::to_value(&derived).expect("json");
    derived["apiVersion"] = "v1".into();
    derived["kind"] = "Service".into();
    for (name, owners) in [("cart-c2", Some(owned_by(&derived))), ("unowned", None)] {
        slices
            .patch(
                name,
                &apply(),
                &Patch::Apply(slice_config(name, owners, "c2")),
            )
            .await
            .expect("slice");
    }
    let version = server
        .object("EndpointSlice", "shop", "unowned")
        .map(|s| revision(&s))
        .expect("unowned");
    let mut events = slices
        .watch(&WatchParams::default().timeout(10), &version)
        .await
        .expect("watch")
        .boxed();

    // The wrong uid is a precondition that fails: nothing goes.
    let wrong = DeleteParams {
        preconditions: Some(Preconditions {
            uid: Some("not-the-uid".to_owned()),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    let status = refusal(imports.delete("cart", &wrong).await);
    assert_eq!((status.code, status.reason.as_str()), (409, "Conflict"));
    assert!(server.object("ServiceImport", "shop", "cart").is_some());

    let uid = import["metadata"]["uid"].as_str().expect("uid").to_owned();
    let deleted = imports
        .delete("cart", &DeleteParams::background())
        .await
        .expect("deleted")
        .left()
        .expect("the deleted object");
    assert_eq!(deleted.metadata.uid.as_deref(), Some(uid.as_str()));
    assert!(server.object("ServiceImport", "shop", "cart").is_none());
    assert!(
        server.object("Service", "shop", "derived-cart").is_none(),
        "collected"
    );
    assert!(
        server.object("EndpointSlice", "shop", "cart-c2").is_none(),
        "collected"
    );
    assert!(server.object("EndpointSlice", "shop", "unowned").is_some());
    let event = next_event(&mut events).await;
    let WatchEvent::Deleted(slice) = event else {
        panic!("expected DELETED, got {event:?}");
    };
    assert_eq!(slice.metadata.name.as_deref(), Some("cart-c2"));

    let status = refusal(imports.delete("cart", &DeleteParams::default()).await);
    assert_eq!((status.code, status.reason.as_str()), (404, "NotFound"));
    // Created again, it is another object with another uid.
    let again = imports
        .patch("cart", &apply(), &Patch::Apply(import_config(&[80])))
        .await
        .expect("created again");
    assert_ne!(again.metadata.uid.as_deref(), Some(uid.as_str()));
    assert_eq!(last_code(&server), 201);
}

#[tokio::test]
async fn delete_collection_deletes_the_labelled_objects_of_one_namespace() {
    let (server, client) = start().await;
    server.apply(namespace("other"));
    for (namespace, name, cluster) in [
        ("shop", "cart-c2-a", "c2"),
        ("shop", "cart-c2-b", "c2"),
        ("shop", "cart-c3", "c3"),
        ("other", "cart-c2", "c2"),
    ] {
        let mut slice = slice_config(name, None, cluster);
        slice["metadata"]["namespace"] = namespace.into();
        let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), namespace);
        slices
            .patch(name, &apply(), &Patch::Apply(slice))
            .await
            .expect("slice");
    }
    let slices: Api<EndpointSlice> = Api::namespaced(client, "shop");
    let selector = ListParams::default().labels(
        "multicluster.kubernetes.io/source-cluster=c2,multicluster.kubernetes.io/service-name=cart",
    );
    let deleted = slices
        .delete_collection(&DeleteParams::default(), &selector)
        .await
        .expect("deleted")
        .left()
        .expect("the list of deleted slices");
    let mut names: Vec<String> = deleted
        .items
        .iter()
        .filter_map(|s| s.meta().name.clone())
        .collect();
    names.sort();
    assert_eq!(names, ["cart-c2-a", "cart-c2-b"]);
    assert!(
        server
            .object("EndpointSlice", "shop", "cart-c2-a")
            .is_none()
    );
    assert!(server.object("EndpointSlice", "shop", "cart-c3").is_some());
    assert!(server.object("EndpointSlice", "other", "cart-c2").is_some());
}

#[tokio::test]
async fn discovery_offers_namespaces_and_the_write_verbs() {
    let (_server, client) = start().await;
    let discovery = kube::discovery::Discovery::new(client)
        .run()
        .await
        .expect("discovery");
    let core = discovery.get("").expect("the core group");
    let resources = core.versioned_resources("v1");
    let find = |plural: &str| {
        resources
            .iter()
            .find(|(r, _)| r.plural == plural)
            .unwrap_or_else(|| panic!("{plural} in {resources:?}"))
    };
    let (namespaces, capabilities) = find("namespaces");
    assert_eq!(namespaces.kind, "Namespace");
    assert_eq!(capabilities.scope, kube::discovery::Scope::Cluster);
    let (_, services) = find("services");
    for verb in ["create", "delete", "deletecollection", "patch", "watch"] {
        assert!(services.supports_operation(verb), "services: {verb}");
    }
    assert!(
        services
            .subresources
            .iter()
            .any(|(r, _)| r.plural == "status"),
        "services/status"
    );
    let mcs = discovery
        .get("multicluster.x-k8s.io")
        .expect("the MCS group");
    let (_, imports) = mcs
        .versioned_resources("v1beta1")
        .into_iter()
        .find(|(r, _)| r.plural == "serviceimports")
        .expect("serviceimports");
    assert!(imports.supports_operation("patch"));
    assert!(
        imports
            .subresources
            .iter()
            .any(|(r, _)| r.plural == "status")
    );
}
