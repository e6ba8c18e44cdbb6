//! One object as a cluster's store holds it ([`Stored`]), and the decoding
//! of a watched object into it: through the file source's decoder, after
//! [`slim`] has dropped what nothing reads, keeping besides the decoded
//! object only what the hub and the import reconciler read of it.

use std::sync::Arc;

use kube::core::ApiResource;

use super::arrived::Arrived;
use super::slim::slim;
use crate::diagnostics::{Diagnostic, Origin};
use crate::discovery::objects::SourcedObject;
use crate::discovery::objects::{Decoded, KubeObject, SliceInterner, decode_value};
use crate::discovery::observed::ObservedObject;
use crate::model::names::{DERIVED_NAME_PREFIX, MANAGED_BY_LABEL, MANAGED_BY_VALUE};
use crate::model::names::{
    GATEWAY_LABEL, MCS_SERVICE_NAME_LABEL, MCS_SOURCE_CLUSTER_LABEL, SERVICE_NAME_LABEL,
};

/// An object's identity within its kind: namespace (empty when
/// cluster-scoped) and name. Shared: the keys of a namespace's objects
/// hold one copy of its name, and an EndpointSlice's key is its name.
pub(super) type ObjectKey = (Arc<str>, Arc<str>);

/// One object as the store holds it, with what the hub needs to know to
/// decide whether it belongs in the cluster set. Small: a large cluster
/// set holds hundreds of thousands of them (most of them EndpointSlices),
/// each inline in its map's nodes, so what a decoded object already says
/// (its Service, its source cluster) is read from it rather than copied,
/// and what few objects carry is boxed.
#[derive(Debug, Clone)]
pub(super) struct Stored {
    /// The decoded object, or the finding that says why it could not be.
    pub(super) item: Result<SourcedObject, Box<Diagnostic>>,
    /// A Service labelled as the cluster's gateway.
    pub(super) gateway: bool,
    /// What only some objects carry; `None` for the usual one.
    extra: Option<Box<Extra>>,
}

/// The rarer parts of a [`Stored`].
#[derive(Debug, Clone, Default)]
struct Extra {
    /// An undecoded object's Service (a decoded one says it itself).
    service: Option<String>,
    /// An undecoded EndpointSlice's `multicluster.kubernetes.io/source-cluster` label.
    source_cluster: Option<String>,
    /// A local ServiceExport's `status.conditions` as the server holds them
    /// (the decoded object has no status: it is not part of the cluster
    /// set); empty for a remote cluster's, whose status Strait never writes.
    conditions: Vec<serde_json::Value>,
    /// The object as the server returned it (without `managedFields` and
    /// the `kubectl apply` annotation, with its `apiVersion` and `kind`), for
    /// the objects the import reconciler compares with what it wants: every
    /// ServiceImport, and the Services and EndpointSlices it created. Read
    /// into its [`ObservedObject`] head once, as it arrives: each
    /// publication then shares it as it is. A slice of Strait's that holds
    /// what it was written with is kept as its digest alone.
    observed: Option<ObservedObject>,
}

impl Extra {
    fn is_empty(&self) -> bool {
        self.service.is_none()
            && self.source_cluster.is_none()
            && self.conditions.is_empty()
            && self.observed.is_none()
    }
}

impl Stored {
    fn new(item: Result<SourcedObject, Box<Diagnostic>>, gateway: bool, extra: Extra) -> Self {
        Self {
            item,
            gateway,
            extra: (!extra.is_empty()).then(|| Box::new(extra)),
        }
    }

    /// The Service it belongs to: a Service's own name, an EndpointSlice's
    /// service-name label.
    pub(super) fn service(&self) -> Option<&str> {
        match self.item.as_ref() {
            Ok(sourced) => match &sourced.object {
                KubeObject::Service(service) => service.metadata.name.as_deref(),
                KubeObject::EndpointSlice(slice) => slice.metadata.service_name.as_deref(),
                _ => None,
            },
            Err(_) => self.extra.as_ref()?.service.as_deref(),
        }
    }

    /// An EndpointSlice's `multicluster.kubernetes.io/source-cluster` label.
    pub(super) fn source_cluster(&self) -> Option<&str> {
        match self.item.as_ref() {
            Ok(sourced) => match &sourced.object {
                KubeObject::EndpointSlice(slice) => slice.metadata.source_cluster.as_deref(),
                _ => None,
            },
            Err(_) => self.extra.as_ref()?.source_cluster.as_deref(),
        }
    }

    /// Shares what an object and its key repeat of those decoded before
    /// them, and an EndpointSlice's namespace and name with its key.
    pub(super) fn intern(&mut self, key: &mut ObjectKey, interner: &mut SliceInterner) {
        interner.namespace(&mut key.0);
        if let Ok(SourcedObject {
            object: KubeObject::EndpointSlice(slice),
            ..
        }) = &mut self.item
        {
            interner.intern(slice);
            let metadata = &slice.metadata;
            for (held, own) in [
                (&metadata.namespace, &mut key.0),
                (&metadata.name, &mut key.1),
            ] {
                if let Some(held) = held
                    && held == own
                {
                    *own = Arc::clone(held);
                }
            }
        }
    }

    /// A local ServiceExport's `status.conditions` as the server holds them.
    pub(super) fn conditions(&self) -> &[serde_json::Value] {
        self.extra.as_ref().map_or(&[], |extra| &extra.conditions)
    }

    /// The object as the server returned it, when the import reconciler reads it.
    pub(super) fn observed(&self) -> Option<&ObservedObject> {
        self.extra.as_ref()?.observed.as_ref()
    }
}

/// The store key of a watched object.
pub(super) fn key_of(object: &Arrived) -> ObjectKey {
    (
        object.namespace().unwrap_or_default().into(),
        object.name().unwrap_or_default().into(),
    )
}

/// Whether `manager` is among the field managers of an object's JSON.
fn written_by(object: &serde_json::Map<String, serde_json::Value>, manager: &str) -> bool {
    object
        .get("metadata")
        .and_then(|m| m.get("managedFields"))
        .and_then(serde_json::Value::as_array)
        .is_some_and(|fields| fields.iter().any(|f| f["manager"] == manager))
}

/// A label of an object's JSON.
fn label<'a>(
    object: &'a serde_json::Map<String, serde_json::Value>,
    name: &str,
) -> Option<&'a str> {
    object.get("metadata")?.get("labels")?.get(name)?.as_str()
}

/// What the store keeps of an object that did not decode: its Service and
/// source cluster, which a decoded object says itself. Read again from its
/// text (the decoder took the tree), so that the usual object, which
/// decodes, costs no copy of them.
fn undecoded(kind: &str, key: &ObjectKey, text: &str, conditions: Vec<serde_json::Value>) -> Extra {
    let object: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(text).unwrap_or_default();
    let label = |name: &str| label(&object, name).map(str::to_owned);
    let service = match kind {
        "Service" => Some(key.1.to_string()),
        "EndpointSlice" => label(SERVICE_NAME_LABEL).or_else(|| label(MCS_SERVICE_NAME_LABEL)),
        _ => None,
    };
    Extra {
        service,
        source_cluster: label(MCS_SOURCE_CLUSTER_LABEL),
        conditions,
        observed: None,
    }
}

/// Decodes a watched object into the type the file source would have read,
/// through the same decoder, so both sources read the same objects alike.
/// The fields [`slim`] drops first are not checked here (the file source
/// reports a bad value in them); the API server has validated them.
///
/// `local` says the object is the local cluster's: it keeps what only the
/// local cluster's objects are read for.
#[cfg(test)]
pub(super) fn decode(
    resource: &ApiResource,
    object: &Arrived,
    origin: &Arc<Origin>,
    local: bool,
) -> (ObjectKey, Stored) {
    decode_adopting(resource, object, origin, local, None)
}

/// [`decode`], keeping too the whole object of a local Service or
/// EndpointSlice that the field manager `adopt_from` wrote: what
/// `kube.adoptImports` may take over ([`Observed`](crate::discovery::observed::Observed)).
pub(super) fn decode_adopting(
    resource: &ApiResource,
    object: &Arrived,
    origin: &Arc<Origin>,
    local: bool,
    adopt_from: Option<&str>,
) -> (ObjectKey, Stored) {
    let key = key_of(object);
    let display = match &*key.0 {
        "" => format!("{} {}", resource.kind, key.1),
        namespace => format!("{} {namespace}/{}", resource.kind, key.1),
    };
    let invalid = |message: String, field: Option<String>| {
        let mut diagnostic =
            Diagnostic::error(Origin::clone(origin), message).object(display.clone());
        diagnostic.field = field;
        Err(Box::new(diagnostic))
    };
    // The object becomes a tree only now, one at a time (see `arrived`).
    let mut json = match serde_json::from_str::<serde_json::Value>(object.text()) {
        Ok(serde_json::Value::Object(map)) => map,
        Ok(_) => {
            let item = invalid("is not a JSON object".to_owned(), None);
            return (key, Stored::new(item, false, Extra::default()));
        }
        Err(error) => {
            let item = invalid(format!("cannot be read: {error}"), None);
            return (key, Stored::new(item, false, Extra::default()));
        }
    };
    let gateway = label(&json, GATEWAY_LABEL) == Some("true");
    // A local Service named as a derived Service is kept whoever made it:
    // the import writer must see one that is not Strait's, to leave it be.
    let derived_name = local
        && resource.kind == "Service"
        && json
            .get("metadata")
            .and_then(|m| m.get("name"))
            .and_then(serde_json::Value::as_str)
            .is_some_and(|name| name.starts_with(DERIVED_NAME_PREFIX));
    let keeps_raw = resource.kind == "ServiceImport"
        || derived_name
        || (matches!(resource.kind.as_str(), "Service" | "EndpointSlice")
            && (label(&json, MANAGED_BY_LABEL) == Some(MANAGED_BY_VALUE)
                || (local && adopt_from.is_some_and(|manager| written_by(&json, manager)))));
    // Only the local cluster's export status is ever written.
    let conditions = match resource.kind.as_str() {
        "ServiceExport" if local => json
            .get("status")
            .and_then(|status| status.get("conditions"))
            .and_then(serde_json::Value::as_array)
            .cloned()
            .unwrap_or_default(),
        _ => Vec::new(),
    };
    // List items of core kinds carry no apiVersion and kind: the watched
    // resource says what they are.
    json.insert("apiVersion".to_owned(), resource.api_version.clone().into());
    json.insert("kind".to_owned(), resource.kind.clone().into());
    let mut json = serde_json::Value::Object(json);
    let observed = keeps_raw.then(|| ObservedObject::of(&json));
    slim(&mut json, &resource.kind, local);
    let decoded = match decode_value(json) {
        Ok(Decoded::Object(decoded)) => {
            let sourced = SourcedObject {
                origin: Arc::clone(origin),
                object: *decoded,
            };
            let extra = Extra {
                conditions,
                observed,
                ..Extra::default()
            };
            Stored::new(Ok(sourced), gateway, extra)
        }
        Ok(Decoded::Unknown { api_version, kind }) => Stored::new(
            invalid(
                format!("{kind} ({api_version}) is not a kind Strait reads"),
                None,
            ),
            gateway,
            undecoded(&resource.kind, &key, object.text(), conditions),
        ),
        Err(error) => Stored::new(
            invalid(error.message, error.field),
            gateway,
            undecoded(&resource.kind, &key, object.text(), conditions),
        ),
    };
    (key, decoded)
}

#[cfg(test)]
mod tests {
    use super::super::slim::LAST_APPLIED;
    use super::*;
    use crate::model::names::GATEWAY_LABEL;

    fn arriving_slice(local: bool) -> crate::discovery::objects::EndpointSlice {
        let slice: Arrived = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "cart-1", "namespace": "shop",
                "labels": {"kubernetes.io/service-name": "cart",
                    "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io"},
                "annotations": {LAST_APPLIED: "{}", "endpoints.kubernetes.io/last-change-trigger-time": "x"},
                "ownerReferences": [{"apiVersion": "v1", "kind": "Service", "name": "cart", "uid": "u"}],
                "managedFields": [{"manager": "kube-controller-manager"}]},
            "addressType": "IPv4",
            "ports": [{"name": "http", "port": 8080}],
            "endpoints": [{"addresses": ["10.1.0.1"], "hostname": "a", "zone": "z1",
                "conditions": {"ready": true}, "nodeName": "n1",
                "targetRef": {"kind": "Pod", "name": "cart-x"},
                "hints": {"forZones": [{"name": "z1"}]}}],
        }))
        .expect("object arrives");
        let resource = ApiResource::erase::<k8s_openapi::api::discovery::v1::EndpointSlice>(&());
        let (_, stored) = decode(
            &resource,
            &slice,
            &Arc::new(Origin::file("cluster t API")),
            local,
        );
        assert_eq!(stored.service(), Some("cart"));
        let object = stored.item.expect("decodes");
        let KubeObject::EndpointSlice(slice) = object.object else {
            panic!("not a slice: {object:?}");
        };
        *slice
    }

    #[test]
    fn keys_share_their_namespace_and_a_slice_its_name() {
        let resource = ApiResource::erase::<k8s_openapi::api::discovery::v1::EndpointSlice>(&());
        let origin = Arc::new(Origin::file("cluster t API"));
        let mut interner = SliceInterner::default();
        let mut arrive = |name: &str| {
            let object: Arrived = serde_json::from_value(serde_json::json!({
                "metadata": {"name": name, "namespace": "shop",
                    "labels": {"kubernetes.io/service-name": "cart"}},
                "addressType": "IPv4", "endpoints": [],
            }))
            .expect("object arrives");
            let (mut key, mut stored) = decode(&resource, &object, &origin, false);
            stored.intern(&mut key, &mut interner);
            (key, stored)
        };
        let (first, _) = arrive("cart-1");
        let (second, stored) = arrive("cart-2");
        assert_eq!((&*second.0, &*second.1), ("shop", "cart-2"));
        assert!(Arc::ptr_eq(&first.0, &second.0), "one namespace allocation");
        let Ok(SourcedObject {
            object: KubeObject::EndpointSlice(slice),
            ..
        }) = &stored.item
        else {
            panic!("a slice decodes");
        };
        let name = slice.metadata.name.as_ref().expect("a name");
        assert!(Arc::ptr_eq(name, &second.1), "the key is the slice's name");
    }

    #[test]
    fn a_slice_that_does_not_decode_still_says_its_service_and_source() {
        let object: Arrived = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "cart-1", "namespace": "shop",
                "labels": {"multicluster.kubernetes.io/service-name": "cart",
                    "multicluster.kubernetes.io/source-cluster": "c2"}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": "10.1.0.1"}],
        }))
        .expect("object arrives");
        let resource = ApiResource::erase::<k8s_openapi::api::discovery::v1::EndpointSlice>(&());
        let (_, stored) = decode(
            &resource,
            &object,
            &Arc::new(Origin::file("cluster t API")),
            false,
        );
        assert!(stored.item.is_err(), "addresses is a list");
        assert_eq!(stored.service(), Some("cart"));
        assert_eq!(stored.source_cluster(), Some("c2"));
    }

    #[test]
    fn arriving_slices_keep_only_what_the_translation_reads() {
        let slice = arriving_slice(false);
        assert_eq!(
            slice.metadata,
            crate::discovery::objects::SliceMetadata {
                name: Some("cart-1".into()),
                namespace: Some("shop".into()),
                service_name: Some("cart".into()),
                source_cluster: None,
                imported: false,
            }
        );
        let endpoint = slice.endpoints.parsed.get(0).expect("an endpoint");
        assert_eq!(endpoint.address.to_string(), "10.1.0.1");
        assert_eq!(slice.endpoints.parsed.hostname(0), Some("a"));
        assert!(endpoint.ready);
        let placement = |slice: &crate::discovery::objects::EndpointSlice| {
            let details = slice.endpoints.parsed.details(0)?;
            Some((details.node_name.clone(), details.zone.clone()))
        };
        assert_eq!(
            placement(&slice),
            Some((None, None)),
            "a remote endpoint's placement is unread"
        );
        let local = arriving_slice(true);
        assert_eq!(
            placement(&local),
            Some((Some("n1".to_owned()), Some("z1".to_owned()))),
            "the local cluster's gateway pods' placement is copied into derived slices"
        );
    }

    fn arriving_service(labels: serde_json::Value) -> crate::discovery::objects::Service {
        let service: Arrived = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "cart", "namespace": "shop", "uid": "u-1",
                "labels": labels,
                "annotations": {LAST_APPLIED: "{}", "note": "unread"},
                "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "u"}],
                "managedFields": [{"manager": "kubectl"}]},
            "spec": {"type": "LoadBalancer", "clusterIP": "10.96.0.1",
                "clusterIPs": ["10.96.0.1"], "selector": {"app": "cart"},
                "sessionAffinity": "ClientIP", "ipFamilies": ["IPv4"],
                "ports": [{"name": "http", "port": 80, "targetPort": 8080}]},
            "status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.1"}]}},
        }))
        .expect("object arrives");
        let resource = ApiResource::erase::<k8s_openapi::api::core::v1::Service>(&());
        let (_, stored) = decode(
            &resource,
            &service,
            &Arc::new(Origin::file("cluster t API")),
            false,
        );
        let object = stored.item.expect("decodes");
        let KubeObject::Service(service) = object.object else {
            panic!("not a service: {object:?}");
        };
        *service
    }

    #[test]
    fn an_arriving_service_keeps_only_what_translation_reads() {
        let service = arriving_service(serde_json::json!({"app": "cart"}));
        let metadata = &service.metadata;
        assert_eq!(metadata.name.as_deref(), Some("cart"));
        assert_eq!(metadata.namespace.as_deref(), Some("shop"));
        assert_eq!(
            metadata.labels,
            Some(Default::default()),
            "no label is read"
        );
        assert_eq!(metadata.annotations, None);
        let spec = service.spec.expect("spec");
        assert_eq!(spec.type_.as_deref(), Some("LoadBalancer"));
        assert_eq!(spec.cluster_ip, None, "only `None` is kept as text");
        assert_eq!(spec.cluster_ips.len(), 1, "its addresses are kept");
        assert_eq!(spec.session_affinity.as_deref(), Some("ClientIP"));
        assert_eq!(spec.ip_families, Some(vec!["IPv4".into()]));
        assert_eq!(spec.ports.map(|p| p.len()), Some(1));
        // Of another Service's status only its load balancer addresses are
        // read: machinery never dialled for a peer.
        let status = service.status.expect("its load balancer addresses");
        let ingress = status.load_balancer.and_then(|lb| lb.ingress);
        let addresses: Vec<Option<String>> = ingress
            .into_iter()
            .flatten()
            .map(|ingress| {
                assert!(ingress.hostname.is_none() && ingress.ports.is_none());
                ingress.ip
            })
            .collect();
        assert_eq!(addresses, [Some("192.0.2.1".to_owned())]);
        assert_eq!(status.conditions, None);

        let gateway = arriving_service(serde_json::json!({GATEWAY_LABEL: "true"}));
        let ingress = gateway
            .status
            .and_then(|s| s.load_balancer)
            .and_then(|lb| lb.ingress)
            .unwrap_or_default();
        assert_eq!(ingress.len(), 1, "a gateway's addresses are in its status");
    }
}
