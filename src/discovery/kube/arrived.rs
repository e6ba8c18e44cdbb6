//! An object as a watcher receives it ([`Arrived`]): its JSON text,
//! compact, without what no one reads (`managedFields` but each entry's
//! `manager`, which `kube.adoptImports` reads; the `kubectl apply` copy of
//! the object), and the few metadata fields the watcher itself reads.
//!
//! Why not kube's `DynamicObject`: a list page of 500 objects would arrive
//! as 500 trees of `serde_json::Value` (each first buffered through serde's
//! flatten), all alive until the page is consumed. A large cluster set's
//! first sync is hundreds of such pages from every cluster at once; the
//! long-lived decoded objects are allocated among that garbage, and the
//! allocator's pages stay part-filled once it is freed (tens of MiB at
//! 2,000,000 endpoints). Here a page is 500 strings, and an object becomes
//! a tree only while it is decoded, one at a time.
//!
//! The text is written by transcoding, not copied: the same code reads the
//! JSON an API server sends and anything serde buffered before handing it
//! over (a watch event whose `object` comes before its `type`).

use std::borrow::Cow;
use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::{ApiResource, DynamicResourceScope, Resource};
use serde::Deserialize;
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};

use super::slim::LAST_APPLIED;

/// A watched object as it arrived.
#[derive(Debug, Clone, Default)]
pub(super) struct Arrived {
    /// Its name, namespace and resource version: what the watcher and the
    /// store read before the object is decoded. Nothing else is filled in.
    metadata: ObjectMeta,
    /// The whole object as compact JSON, with `metadata.managedFields`
    /// cut to each entry's `manager`, without the `kubectl apply`
    /// annotation.
    text: Box<str>,
}

impl Arrived {
    pub(super) fn text(&self) -> &str {
        &self.text
    }

    pub(super) fn name(&self) -> Option<&str> {
        self.metadata.name.as_deref()
    }

    pub(super) fn namespace(&self) -> Option<&str> {
        self.metadata.namespace.as_deref()
    }
}

/// Typed by the `ApiResource` it is watched with, as `DynamicObject` is.
impl Resource for Arrived {
    type DynamicType = ApiResource;
    type Scope = DynamicResourceScope;

    fn group(resource: &ApiResource) -> Cow<'_, str> {
        resource.group.as_str().into()
    }

    fn version(resource: &ApiResource) -> Cow<'_, str> {
        resource.version.as_str().into()
    }

    fn kind(resource: &ApiResource) -> Cow<'_, str> {
        resource.kind.as_str().into()
    }

    fn api_version(resource: &ApiResource) -> Cow<'_, str> {
        resource.api_version.as_str().into()
    }

    fn plural(resource: &ApiResource) -> Cow<'_, str> {
        resource.plural.as_str().into()
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

impl<'de> Deserialize<'de> for Arrived {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(ObjectVisitor)
    }
}

/// The text of an object's map so far.
struct JsonMap<'a> {
    out: &'a mut Vec<u8>,
    empty: bool,
}

impl<'a> JsonMap<'a> {
    fn open(out: &'a mut Vec<u8>) -> Self {
        out.push(b'{');
        Self { out, empty: true }
    }

    /// Writes `"key":`, after a comma when an entry came before.
    fn key<E: de::Error>(&mut self, key: &str) -> Result<&mut Vec<u8>, E> {
        if !self.empty {
            self.out.push(b',');
        }
        self.empty = false;
        serde_json::to_writer(&mut *self.out, key).map_err(E::custom)?;
        self.out.push(b':');
        Ok(self.out)
    }

    fn close(self) {
        self.out.push(b'}');
    }
}

struct ObjectVisitor;

impl<'de> Visitor<'de> for ObjectVisitor {
    type Value = Arrived;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a Kubernetes object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Arrived, A::Error> {
        let mut out = Vec::with_capacity(1024);
        let mut json = JsonMap::open(&mut out);
        let mut metadata = ObjectMeta::default();
        while let Some(Key(key)) = map.next_key()? {
            let out = json.key(&key)?;
            if key == "metadata" {
                map.next_value_seed(MetadataSeed {
                    out,
                    metadata: &mut metadata,
                })?;
            } else {
                map.next_value_seed(Transcoded(out))?;
            }
        }
        json.close();
        let text = String::from_utf8(out).map_err(de::Error::custom)?;
        Ok(Arrived {
            metadata,
            text: text.into_boxed_str(),
        })
    }
}

/// A map key, borrowed from the text when it has no escapes.
struct Key<'de>(Cow<'de, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string key")
            }
            fn visit_borrowed_str<E: de::Error>(self, key: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(key)))
            }
            fn visit_str<E: de::Error>(self, key: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(key.to_owned())))
            }
            fn visit_string<E: de::Error>(self, key: String) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(key)))
            }
        }
        deserializer.deserialize_str(KeyVisitor)
    }
}

/// Writes whatever value comes as JSON, building nothing in between.
struct Transcoded<'a>(&'a mut Vec<u8>);

impl<'de> DeserializeSeed<'de> for Transcoded<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        let mut serializer = serde_json::Serializer::new(self.0);
        serde_transcode::transcode(deserializer, &mut serializer).map_err(de::Error::custom)
    }
}

/// Writes `metadata` with only the managers of `managedFields` and without
/// the `kubectl apply` annotation, keeping the name, namespace and
/// resource version.
struct MetadataSeed<'a> {
    out: &'a mut Vec<u8>,
    metadata: &'a mut ObjectMeta,
}

impl<'de> DeserializeSeed<'de> for MetadataSeed<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for MetadataSeed<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("object metadata")
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        self.out.extend_from_slice(b"null");
        Ok(())
    }

    fn visit_none<E: de::Error>(self) -> Result<(), E> {
        self.visit_unit()
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut json = JsonMap::open(self.out);
        while let Some(Key(key)) = map.next_key()? {
            let kept = match key.as_ref() {
                "managedFields" => {
                    // Which field managers wrote it, and nothing of the
                    // fields (most of an object's size).
                    let entries: Vec<ManagerOnly> = map.next_value()?;
                    let managers: Vec<serde_json::Value> = entries
                        .into_iter()
                        .filter_map(|entry| entry.manager)
                        .map(|manager| serde_json::json!({ "manager": manager }))
                        .collect();
                    let out = json.key(&key)?;
                    serde_json::to_writer(out, &managers).map_err(de::Error::custom)?;
                    continue;
                }
                "name" => &mut self.metadata.name,
                "namespace" => &mut self.metadata.namespace,
                "resourceVersion" => &mut self.metadata.resource_version,
                "annotations" => {
                    map.next_value_seed(AnnotationsSeed(json.key(&key)?))?;
                    continue;
                }
                _ => {
                    map.next_value_seed(Transcoded(json.key(&key)?))?;
                    continue;
                }
            };
            let value: Option<String> = map.next_value()?;
            let out = json.key(&key)?;
            serde_json::to_writer(out, &value).map_err(de::Error::custom)?;
            *kept = value;
        }
        json.close();
        Ok(())
    }
}

/// Writes `metadata.annotations` without the `kubectl apply` one.
/// One `managedFields` entry, of which only the manager is kept.
#[derive(Deserialize)]
struct ManagerOnly {
    #[serde(default)]
    manager: Option<String>,
}

struct AnnotationsSeed<'a>(&'a mut Vec<u8>);

impl<'de> DeserializeSeed<'de> for AnnotationsSeed<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for AnnotationsSeed<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("annotations")
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        self.0.extend_from_slice(b"null");
        Ok(())
    }

    fn visit_none<E: de::Error>(self) -> Result<(), E> {
        self.visit_unit()
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut json = JsonMap::open(self.0);
        while let Some(Key(key)) = map.next_key()? {
            if key == LAST_APPLIED {
                map.next_value::<IgnoredAny>()?;
            } else {
                map.next_value_seed(Transcoded(json.key(&key)?))?;
            }
        }
        json.close();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OBJECT: &str = r#"{"apiVersion":"discovery.k8s.io/v1","kind":"EndpointSlice",
        "metadata":{"name":"cart-1","namespace":"shop","resourceVersion":"42",
            "labels":{"kubernetes.io/service-name":"cart"},
            "annotations":{"kubectl.kubernetes.io/last-applied-configuration":"{\"big\":1}","note":"kept \"quoted\""},
            "managedFields":[{"manager":"kube-controller-manager","fieldsV1":{"f:endpoints":{}}}]},
        "addressType":"IPv4","endpoints":[{"addresses":["10.1.0.1"],"conditions":{"ready":true}}],
        "ports":[{"name":"http","port":8080}]}"#;

    fn expected() -> serde_json::Value {
        serde_json::json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": "cart-1", "namespace": "shop", "resourceVersion": "42",
                "labels": {"kubernetes.io/service-name": "cart"},
                "annotations": {"note": "kept \"quoted\""},
                "managedFields": [{"manager": "kube-controller-manager"}]},
            "addressType": "IPv4",
            "endpoints": [{"addresses": ["10.1.0.1"], "conditions": {"ready": true}}],
            "ports": [{"name": "http", "port": 8080}]})
    }

    #[test]
    fn an_object_arrives_as_compact_text_without_what_no_one_reads() {
        let arrived: Arrived = serde_json::from_str(OBJECT).expect("arrives");
        assert_eq!(arrived.name(), Some("cart-1"));
        assert_eq!(arrived.namespace(), Some("shop"));
        assert_eq!(arrived.meta().resource_version.as_deref(), Some("42"));
        assert!(!arrived.text().contains('\n'), "compact");
        let text: serde_json::Value = serde_json::from_str(arrived.text()).expect("valid JSON");
        assert_eq!(text, expected());
    }

    #[test]
    fn an_object_in_a_watch_event_arrives_alike_whatever_the_key_order() {
        // An API server writes `type` first, and serde reads the object
        // straight from the text; with `object` first (as the test API
        // server writes it) serde buffers it before it is read.
        for event in [
            format!(r#"{{"type":"ADDED","object":{OBJECT}}}"#),
            format!(r#"{{"object":{OBJECT},"type":"ADDED"}}"#),
        ] {
            let event: kube::core::WatchEvent<Arrived> =
                serde_json::from_str(&event).expect("event arrives");
            let kube::core::WatchEvent::Added(arrived) = event else {
                panic!("not an added event: {event:?}");
            };
            let text: serde_json::Value = serde_json::from_str(arrived.text()).expect("valid JSON");
            assert_eq!(text, expected());
            assert_eq!(arrived.meta().resource_version.as_deref(), Some("42"));
        }
    }

    #[test]
    fn null_metadata_and_annotations_stay_null() {
        let arrived: Arrived =
            serde_json::from_str(r#"{"metadata":{"name":"a","annotations":null},"spec":null}"#)
                .expect("arrives");
        let text: serde_json::Value = serde_json::from_str(arrived.text()).expect("valid JSON");
        assert_eq!(
            text,
            serde_json::json!({"metadata": {"name": "a", "annotations": null}, "spec": null})
        );
    }
}
