//! A first round planned reusing the last pass's plan plans again only
//! the services whose inputs changed, and gives what a whole plan gives.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde_json::json;

use super::*;
use crate::discovery::observed::{Observed, ObservedObject};
use crate::imports::ports::{PortRange, Released};
use crate::imports::sources::{Sources, source_backends_reusing};
use crate::imports::{ImportPlan, PlanInputs, plan};
use crate::merge::{MergedSet, merge_reusing};
use crate::model::{ClusterId, ClusterSet};
use crate::routing::RouteTable;
use crate::testing::{cluster_set, exported_http};

/// `shop/cart` from east-1 (net-a) and west-1 (net-b), and `shop/till`
/// from east-1, seen from east-1.
fn two_services() -> ClusterSet {
    let mut set = cluster_set(&[
        ("east-1", "net-a", exported_http("cart", "10.1.0.5")),
        ("west-1", "net-b", exported_http("cart", "10.2.0.5")),
    ]);
    with_till(&mut set, "10.1.0.7");
    set
}

/// `set` with east-1's `shop/till` at `address`, the rest as it was.
fn with_till(set: &mut ClusterSet, address: &str) {
    let till = exported_http("till", address);
    if let Some(east) = set.clusters.get_mut(&ClusterId::new("east-1").expect("id")) {
        east.services.insert(till.key.clone(), till.into());
    }
}

/// The views a pass plans from, each built reusing the last.
struct Views {
    merged: MergedSet,
    table: RouteTable,
    sources: Sources,
}

impl Views {
    fn of(set: &ClusterSet, last: Option<&Views>) -> Self {
        let merged = merge_reusing(set, last.map_or(&MergedSet::default(), |l| &l.merged));
        let table = RouteTable::build_reusing(set, &merged, "east-1", last.map(|l| &l.table))
            .expect("east-1 is known");
        let sources = source_backends_reusing(&table, last.map(|l| &l.sources));
        Self {
            merged,
            table,
            sources,
        }
    }

    fn inputs<'a>(&'a self, observed: &'a Observed) -> PlanInputs<'a> {
        static PODS: std::sync::LazyLock<BTreeMap<ServiceKey, RemotePods>> =
            std::sync::LazyLock::new(BTreeMap::new);
        self.inputs_with(observed, &PODS)
    }

    fn inputs_with<'a>(
        &'a self,
        observed: &'a Observed,
        pods: &'a BTreeMap<ServiceKey, RemotePods>,
    ) -> PlanInputs<'a> {
        static RANGE: std::sync::LazyLock<PortRange> = std::sync::LazyLock::new(PortRange::default);
        static RELEASED: std::sync::LazyLock<Released> = std::sync::LazyLock::new(Released::new);
        static EMPTY: std::sync::LazyLock<BTreeSet<ServiceKey>> =
            std::sync::LazyLock::new(BTreeSet::new);
        PlanInputs {
            recorded: None,
            merged: &self.merged,
            observed,
            range: &RANGE,
            released: &RELEASED,
            refused_families: &EMPTY,
            settling: &EMPTY,
            pods,
            sources: &self.sources,
            pod_ranges: None,
            quota: Default::default(),
        }
    }
}

/// Plans reusing `kept`; the plan, how many imports were planned, and what
/// to keep for the next.
fn reusing(
    views: &Views,
    observed: &Observed,
    kept: Option<KeptPlan>,
) -> (ImportPlan, usize, KeptPlan) {
    let held: HashMap<ServiceKey, Vec<&ObservedObject>> = observed.by_service();
    let (planned, made) = plan_reusing(&views.inputs(observed), kept, &held);
    let count = made.planned;
    let kept = KeptPlan::of(made, &planned);
    (planned, count, kept)
}

fn same_imports(a: &ImportPlan, b: &ImportPlan) -> bool {
    a.imports.len() == b.imports.len()
        && a.imports.iter().zip(&b.imports).all(|(a, b)| **a == **b)
        && a.allocation == b.allocation
        && a.skipped == b.skipped
}

#[test]
fn a_kept_plan_plans_again_only_what_changed_and_gives_what_a_whole_plan_gives() {
    let mut set = two_services();
    let views = Views::of(&set, None);
    let mut observed = Observed::default();
    let whole = |views: &Views, observed: &Observed| plan(&views.inputs(observed));

    let (first, count, kept) = reusing(&views, &observed, None);
    assert_eq!(count, 2, "nothing kept: both planned");
    assert!(same_imports(&first, &whole(&views, &observed)));

    let (again, count, kept) = reusing(&views, &observed, Some(kept));
    assert_eq!(count, 0, "nothing changed: nothing planned");
    assert!(same_imports(&again, &first));

    // till's endpoint moves: till alone is planned again.
    with_till(&mut set, "10.1.0.8");
    let moved = Views::of(&set, Some(&views));
    let (third, count, kept) = reusing(&moved, &observed, Some(kept));
    assert_eq!(count, 1, "only till");
    assert!(same_imports(&third, &whole(&moved, &observed)));

    // cart's derived Service gets its ClusterIP: cart alone, now Ready.
    observed.insert(ObservedObject::new(json!({
        "kind": "Service",
        "metadata": {"name": "derived-bsqa4s8pq5", "namespace": "shop", "uid": "u1",
            "resourceVersion": "1",
            "labels": {"app.kubernetes.io/managed-by": "strait",
                "multicluster.kubernetes.io/service-name": "cart"}},
        "spec": {"clusterIPs": ["10.96.0.9"], "ports": []}
    })));
    let (fourth, count, kept) = reusing(&moved, &observed, Some(kept));
    assert_eq!(count, 1, "only cart");
    assert!(same_imports(&fourth, &whole(&moved, &observed)));
    let cart = fourth
        .imports
        .iter()
        .find(|p| p.key.name == "cart")
        .expect("cart planned");
    assert!(cart.ready, "{}", cart.message);

    // Every service reads the namespaces: all planned again, both skipped.
    observed.namespaces = Some(BTreeSet::new());
    let (gone, count, kept) = reusing(&moved, &observed, Some(kept));
    assert_eq!(count, 0, "skipped services are not planned");
    assert!(gone.imports.is_empty());
    assert!(same_imports(&gone, &whole(&moved, &observed)));
    observed.namespaces = None;
    let (back, count, _) = reusing(&moved, &observed, Some(kept));
    assert_eq!(count, 2);
    assert!(same_imports(&back, &whole(&moved, &observed)));
}

/// An import changed after it was planned (its `Ready` held back, or
/// planned again in a later round) is not kept: the next pass plans it.
#[test]
fn an_import_changed_after_its_planning_is_planned_again() {
    let views = Views::of(&two_services(), None);
    let observed = Observed::default();
    let held = observed.by_service();
    let (mut planned, made) = plan_reusing(&views.inputs(&observed), None, &held);
    let till = planned
        .imports
        .iter_mut()
        .find(|p| p.key.name == "till")
        .expect("till");
    Arc::make_mut(till).message = "held back".to_owned();
    let kept = KeptPlan::of(made, &planned);
    assert_eq!(kept.len(), 1, "cart is kept, till is not");
    let (next, count, _) = reusing(&views, &observed, Some(kept));
    assert_eq!(count, 1);
    assert!(same_imports(&next, &plan(&views.inputs(&observed))));
}

/// The remote pods past the cap count in the import (its message and
/// `podsOverCap`) though no pod that gets an address changed: a change in
/// their number alone plans the service again.
#[test]
fn a_change_in_the_pods_past_the_cap_alone_plans_the_service_again() {
    let views = Views::of(&two_services(), None);
    let observed = Observed::default();
    let held = observed.by_service();
    let cart = ServiceKey::new("shop", "cart");
    let pods_with = |over_cap: usize| {
        BTreeMap::from([(
            cart.clone(),
            RemotePods {
                pods: Vec::new(),
                over_cap,
            },
        )])
    };
    let few = pods_with(1);
    let (first, made) = plan_reusing(&views.inputs_with(&observed, &few), None, &held);
    let kept = KeptPlan::of(made, &first);
    let more = pods_with(3);
    let (next, made) = plan_reusing(&views.inputs_with(&observed, &more), Some(kept), &held);
    assert_eq!(made.planned, 1, "cart alone");
    assert!(same_imports(
        &next,
        &plan(&views.inputs_with(&observed, &more))
    ));
}
