//! Storing objects: the metadata a server stamps (uid, creation time,
//! generation, managed fields, resource version), the lenient seeding of
//! tests, and the test-side reads and edits of stored objects.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::Value;

use super::apply::{self, Owner};
use super::write::{Call, merge_patch, set_or_remove, text_of, update};
use super::{ApiServer, ObjectKey, Resource, Selection, Shared, State, resource_of_kind};

/// When every object was created, unless a test says otherwise.
const CREATED: &str = "2025-01-01T00:00:00Z";

/// The next uid, unique in the test process: uids are never reused, not
/// even across servers.
static NEXT_UID: AtomicU64 = AtomicU64::new(1);

fn new_uid() -> String {
    let n = NEXT_UID.fetch_add(1, Ordering::Relaxed);
    format!("5a17c0de-0000-4000-8000-{n:012x}")
}

/// How [`commit`] stores.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Commit {
    /// A client's write: nothing happens when nothing changes.
    Write,
    /// A test's: always a new resource version, an event if `notify`.
    Seed { notify: bool },
}

/// Stores `object` under `key` with its field owners, stamping the
/// metadata a server sets (uid, creation time, generation, managed
/// fields, resource version), and returns what is stored. A write that
/// changes nothing leaves the object and its resource version alone, as a
/// real server does.
pub(super) fn commit(
    shared: &Shared,
    state: &mut State,
    resource: &Resource,
    key: ObjectKey,
    mut object: Value,
    mut owners: Vec<Owner>,
    how: Commit,
) -> Value {
    let existing = state.objects.get(&key).cloned();
    let old = |field: &str| {
        existing
            .as_ref()
            .and_then(|e| e["metadata"][field].as_str())
            .map(str::to_owned)
    };
    let uid = old("uid")
        .or_else(|| object["metadata"]["uid"].as_str().map(str::to_owned))
        .unwrap_or_else(new_uid);
    let created = old("creationTimestamp")
        .or_else(|| {
            object["metadata"]["creationTimestamp"]
                .as_str()
                .map(str::to_owned)
        })
        .unwrap_or_else(|| CREATED.to_owned());
    let generation = match &existing {
        Some(existing) => {
            let old = existing["metadata"]["generation"].as_i64().unwrap_or(1);
            if existing.get("spec") == object.get("spec") {
                old
            } else {
                old + 1
            }
        }
        None => 1,
    };
    if resource.kind == "Secret" {
        secret_controllers(state, &mut object);
    }
    apply::prune(&mut owners, &object);
    let metadata = &mut object["metadata"];
    metadata["uid"] = uid.into();
    metadata["creationTimestamp"] = created.into();
    metadata["generation"] = generation.into();
    if let Some(map) = metadata.as_object_mut() {
        match apply::managed_fields(&owners) {
            Some(fields) => map.insert("managedFields".to_owned(), fields),
            None => map.remove("managedFields"),
        };
        match old("resourceVersion") {
            Some(version) => map.insert("resourceVersion".to_owned(), version.into()),
            None => map.remove("resourceVersion"),
        };
    }
    if how == Commit::Write
        && let Some(existing) = existing.as_ref().filter(|e| **e == object)
    {
        return existing.clone();
    }
    state.revision += 1;
    object["metadata"]["resourceVersion"] = state.revision.to_string().into();
    state.objects.insert(key.clone(), object.clone());
    if owners.is_empty() {
        state.fields.remove(&key);
    } else {
        state.fields.insert(key, owners);
    }
    if how != (Commit::Seed { notify: false }) {
        let event = if existing.is_some() {
            "MODIFIED"
        } else {
            "ADDED"
        };
        shared.record(state, resource.plural, event, object.clone());
    }
    object
}

impl Shared {
    /// Creates or replaces an object as a test seeds it, leniently: no
    /// namespace check, no defaults, no field ownership for the write (the
    /// owners of fields that are left keep them); a CRD's status is kept
    /// when the object exists. With `notify`, watches see `ADDED` or
    /// `MODIFIED`. Returns the object stored.
    pub(super) fn store(&self, mut object: Value, notify: bool) -> Value {
        let kind = object["kind"].as_str().expect("object kind").to_owned();
        let resource = resource_of_kind(&kind);
        let name = object["metadata"]["name"]
            .as_str()
            .expect("object name")
            .to_owned();
        let namespace = if resource.namespaced {
            let namespace = object["metadata"]["namespace"]
                .as_str()
                .unwrap_or("default")
                .to_owned();
            object["metadata"]["namespace"] = namespace.clone().into();
            namespace
        } else {
            String::new()
        };
        let key = (resource.plural, namespace, name);
        let mut state = self.state();
        let existing = state.objects.get(&key).cloned();
        // A CRD's status is written through its status subresource only.
        if resource.crd
            && let Some(existing) = &existing
        {
            set_or_remove(&mut object, "status", existing.get("status").cloned());
        }
        let owners = state.fields.get(&key).cloned().unwrap_or_default();
        commit(
            self,
            &mut state,
            &resource,
            key,
            object,
            owners,
            Commit::Seed { notify },
        )
    }
}

impl ApiServer {
    /// An object as the server holds it now.
    pub fn object(&self, kind: &str, namespace: &str, name: &str) -> Option<Value> {
        let resource = resource_of_kind(kind);
        let namespace = if resource.namespaced { namespace } else { "" };
        self.shared
            .state()
            .objects
            .get(&(resource.plural, namespace.to_owned(), name.to_owned()))
            .cloned()
    }

    /// Every object of `kind` in `namespace`, as the server holds them now.
    pub fn objects(&self, kind: &str, namespace: &str) -> Vec<Value> {
        let resource = resource_of_kind(kind);
        let namespace = if resource.namespaced { namespace } else { "" };
        self.shared
            .state()
            .objects
            .iter()
            .filter(|((plural, held, _), _)| *plural == resource.plural && held == namespace)
            .map(|(_, object)| object.clone())
            .collect()
    }

    /// The `status.conditions` of the ServiceExport `shop/<name>`.
    pub fn export_conditions(&self, name: &str) -> Vec<Value> {
        self.object("ServiceExport", "shop", name)
            .and_then(|export| export["status"]["conditions"].as_array().cloned())
            .unwrap_or_default()
    }

    /// Changes an object with a JSON merge patch as an `Update` by
    /// `manager`, as a person's `kubectl edit` does: with the server's
    /// defaults and validation (a `status` in the patch of a kind with a
    /// status subresource is ignored), a watch event if anything changed,
    /// and `manager` taking the fields it changed. Returns the object
    /// stored; panics if it does not exist or the server refuses the edit.
    pub fn edit(
        &self,
        kind: &str,
        namespace: &str,
        name: &str,
        merge_patch: Value,
        manager: &str,
    ) -> Value {
        let resource = resource_of_kind(kind);
        let namespace = resource.namespaced.then_some(namespace);
        let mut state = self.shared.state();
        let key = (
            resource.plural,
            namespace.unwrap_or("").to_owned(),
            name.to_owned(),
        );
        let Some(current) = state.objects.get(&key).cloned() else {
            panic!("{kind} {namespace:?}/{name} does not exist");
        };
        let call = Call {
            selection: Selection {
                resource,
                api_version: current["apiVersion"].as_str().unwrap_or("v1").to_owned(),
                namespace: namespace.map(str::to_owned),
                labels: Vec::new(),
            },
            namespace,
            status: false,
            query: HashMap::new(),
            manager: manager.to_owned(),
        };
        let mut object = current.clone();
        self::merge_patch(&mut object, &merge_patch);
        match update(&self.shared, &mut state, &call, name, &current, object) {
            Ok(stored) => stored,
            Err(refused) => panic!(
                "the edit of {kind} {name} was refused: {}",
                text_of(*refused)
            ),
        }
    }

    /// The field managers of an object, in the order of its
    /// `metadata.managedFields`, each once.
    pub fn managers(&self, kind: &str, namespace: &str, name: &str) -> Vec<String> {
        let resource = resource_of_kind(kind);
        let namespace = if resource.namespaced { namespace } else { "" };
        let state = self.shared.state();
        let mut managers: Vec<String> = Vec::new();
        let key = (resource.plural, namespace.to_owned(), name.to_owned());
        for owner in state.fields.get(&key).into_iter().flatten() {
            if !managers.contains(&owner.manager) {
                managers.push(owner.manager.clone());
            }
        }
        managers
    }
}

/// What a real server (and its token controller) does to a Secret:
/// `stringData` is written into `data`, base64-encoded; a
/// `kubernetes.io/service-account-token` Secret of an existing
/// ServiceAccount gets a minted `token`, the cluster's `ca.crt` and its
/// `namespace` (kept when it has them already).
fn secret_controllers(state: &mut State, object: &mut Value) {
    use data_encoding::BASE64;
    if let Some(Value::Object(strings)) = object.get_mut("stringData").map(Value::take) {
        for (key, value) in strings {
            let text = value.as_str().unwrap_or_default().to_owned();
            object["data"][key] = BASE64.encode(text.as_bytes()).into();
        }
        if let Some(map) = object.as_object_mut() {
            map.remove("stringData");
        }
    }
    if object["type"] != "kubernetes.io/service-account-token" {
        return;
    }
    let namespace = object["metadata"]["namespace"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let Some(account) = object["metadata"]["annotations"]["kubernetes.io/service-account.name"]
        .as_str()
        .map(str::to_owned)
    else {
        return;
    };
    let account_exists =
        state
            .objects
            .contains_key(&("serviceaccounts", namespace.clone(), account.clone()));
    if !account_exists || object["data"]["token"].is_string() {
        if let Some(token) = object["data"]["token"].as_str()
            && let Ok(token) = BASE64.decode(token.as_bytes())
        {
            state
                .tokens
                .insert(String::from_utf8_lossy(&token).into_owned());
        }
        return;
    }
    let token = format!("sa-{namespace}-{account}-{}", new_uid());
    state.tokens.insert(token.clone());
    object["data"]["token"] = BASE64.encode(token.as_bytes()).into();
    let ca = state.ca_pem.as_deref().unwrap_or_else(|| cluster_ca());
    object["data"]["ca.crt"] = BASE64.encode(ca.as_bytes()).into();
    object["data"]["namespace"] = BASE64.encode(namespace.as_bytes()).into();
}

/// The cluster CA the token controller publishes for a server that speaks
/// plain HTTP: a real certificate (a client parses it).
fn cluster_ca() -> &'static str {
    static CA: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    CA.get_or_init(|| {
        rcgen::generate_simple_self_signed(vec!["kubernetes".to_owned()])
            .expect("a self-signed CA")
            .cert
            .pem()
    })
}
