//! The import reconciler's own writes that the snapshots do not show yet:
//! a pass plans as if they did, so that a lagging watch neither undoes nor
//! repeats them.

use std::collections::HashMap;

use super::objects::{identity_object, resource_version};
use crate::discovery::observed::{Observed, ObservedObject};
use crate::imports::diff::Change;

/// The last write of an object and the resource versions that come before
/// it: the one the snapshot held before the first of these writes, and
/// what each earlier write of them returned. While a snapshot holds one of
/// those, the last write is not in it yet, and the plan is made as if it
/// were (so an object just created is not deleted, nor its import port
/// handed out again, nor the same object applied twice). A snapshot that
/// shows an earlier write's echo but not the last one's is still behind:
/// planning from it would write the last change again.
struct Written {
    behind: Vec<Option<String>>,
    /// What the server returned; `None` for a deletion.
    result: Option<ObservedObject>,
}

impl Written {
    /// Whether a snapshot holding the object at `held` (`None`: not at
    /// all) has yet to show this write.
    fn pending_at(&self, held: Option<&str>) -> bool {
        // A deletion shows as the object's absence, whatever came before.
        if self.result.is_none() && held.is_none() {
            return false;
        }
        self.behind.iter().any(|version| version.as_deref() == held)
    }
}

/// The last write of each object (by kind, namespace and name) that the
/// snapshots may not show yet.
#[derive(Default)]
pub(super) struct WrittenObjects(HashMap<(String, String, String), Written>);

impl WrittenObjects {
    /// Lays the writes the snapshot does not show yet over `observed`, and
    /// forgets those it shows (or that someone else changed since).
    pub(super) fn overlay(&mut self, observed: &mut Observed) {
        self.0.retain(|(kind, namespace, name), written| {
            let held = observed.get(&identity_object(kind, namespace, name));
            if !written.pending_at(held.and_then(resource_version).as_deref()) {
                return false;
            }
            match &written.result {
                Some(result) => observed.insert(result.clone()),
                None => observed.remove(kind, namespace, name),
            }
            true
        });
    }

    /// Notes a write the server accepted, and what it returned (`None`
    /// for a deletion), made over `observed` as it was before it.
    pub(super) fn remember(
        &mut self,
        change: &Change,
        observed: &Observed,
        result: Option<ObservedObject>,
    ) {
        let identity = change.identity();
        // A write over an overlaid one keeps what came before that one:
        // the snapshot may show any of those until it catches up.
        let behind = match self.0.remove(&identity) {
            Some(mut earlier) => {
                let returned = earlier.result.as_ref().and_then(resource_version);
                earlier.behind.push(returned);
                earlier.behind
            }
            None => vec![
                observed
                    .get(&identity_object(&identity.0, &identity.1, &identity.2))
                    .and_then(resource_version),
            ],
        };
        self.0.insert(identity, Written { behind, result });
    }
}
