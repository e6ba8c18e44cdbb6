//! Where [`Observed`] holds each object, and following one object's
//! change in place (what the source does for each event of the local
//! cluster, instead of reading every object again).

use super::{Held, Observed, ObservedObject};
use crate::model::names::MCS_SERVICE_NAME_LABEL;
use crate::model::{PodRef, ServiceKey};

impl Observed {
    /// Follows one object's change, `old` as held before it and `new`
    /// after (`None`: absent), in place of reading every object again;
    /// false, having changed nothing or part, when the change is not
    /// exactly one object's (two derived Services claim one service's
    /// place, or `old` is not the one held): then only reading every
    /// object again gives what [`Observed::insert`] of each would.
    #[must_use]
    pub fn replace(&mut self, old: Option<&ObservedObject>, new: Option<ObservedObject>) -> bool {
        if self.shadowed > 0 {
            return false;
        }
        if let Some(old) = old
            && !self.take(old)
        {
            return false;
        }
        new.is_none_or(|new| self.put(new))
    }

    /// Removes `object` from its place, if it is the one held there.
    fn take(&mut self, object: &ObservedObject) -> bool {
        fn take_from<K: Ord + Clone>(held: &mut Held<K>, key: K, object: &ObservedObject) -> bool {
            let same = held.get(&key).is_some_and(|held| {
                held.namespace() == object.namespace() && held.name() == object.name()
            });
            if same {
                held.remove(&key);
            }
            same
        }
        match Slot::of(object) {
            None => true,
            Some(Slot::Import(key)) => take_from(&mut self.imports, key, object),
            Some(Slot::Derived(key)) => take_from(&mut self.derived, key, object),
            Some(Slot::Pod(key)) => take_from(&mut self.pod_services, key, object),
            Some(Slot::Slice(key)) => take_from(&mut self.slices, key, object),
            Some(Slot::ForeignService(key)) => take_from(&mut self.foreign_services, key, object),
            Some(Slot::ForeignSlice(key)) => take_from(&mut self.foreign_slices, key, object),
        }
    }

    /// Puts `object` in its place, if that place is free.
    fn put(&mut self, object: ObservedObject) -> bool {
        fn put_into<K: Ord + Clone>(held: &mut Held<K>, key: K, object: ObservedObject) -> bool {
            if held.contains_key(&key) {
                return false;
            }
            held.insert(key, object);
            true
        }
        match Slot::of(&object) {
            None => true,
            Some(Slot::Import(key)) => put_into(&mut self.imports, key, object),
            Some(Slot::Derived(key)) => put_into(&mut self.derived, key, object),
            Some(Slot::Pod(key)) => put_into(&mut self.pod_services, key, object),
            Some(Slot::Slice(key)) => put_into(&mut self.slices, key, object),
            Some(Slot::ForeignService(key)) => put_into(&mut self.foreign_services, key, object),
            Some(Slot::ForeignSlice(key)) => put_into(&mut self.foreign_slices, key, object),
        }
    }
}

/// Removes every object named `namespace`/`name` from `held`, whatever
/// key holds it (a derived Service is held by the service it names).
pub(super) fn remove_named<K: Ord + Clone>(held: &mut Held<K>, namespace: &str, name: &str) {
    let keys: Vec<K> = held
        .iter()
        .filter(|(_, object)| object.namespace() == namespace && object.name() == name)
        .map(|(key, _)| key.clone())
        .collect();
    for key in keys {
        held.remove(&key);
    }
}

/// Where [`Observed`] holds an object, and by which key.
pub(super) enum Slot {
    Import(ServiceKey),
    /// By the service its MCS label names.
    Derived(ServiceKey),
    Pod((ServiceKey, PodRef)),
    Slice((String, String)),
    ForeignService((String, String)),
    ForeignSlice((String, String)),
}

impl Slot {
    /// The place of `object`; `None` for what is not held (other kinds, a
    /// Service of Strait's without the label naming its service).
    pub(super) fn of(object: &ObservedObject) -> Option<Self> {
        let by_name = || (object.namespace().to_owned(), object.name().to_owned());
        Some(match object.kind() {
            "ServiceImport" => Slot::Import(ServiceKey::new(object.namespace(), object.name())),
            "Service" if object.ours() => {
                let key =
                    ServiceKey::new(object.namespace(), object.label(MCS_SERVICE_NAME_LABEL)?);
                match object.pod() {
                    Some(pod) => Slot::Pod((key, pod)),
                    None => Slot::Derived(key),
                }
            }
            "EndpointSlice" if object.ours() => Slot::Slice(by_name()),
            "Service" => Slot::ForeignService(by_name()),
            "EndpointSlice" => Slot::ForeignSlice(by_name()),
            _ => return None,
        })
    }
}
