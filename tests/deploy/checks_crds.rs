//! The CRDs in `deploy/crds/` against what docs/configuration.md says
//! Strait reads and what the kube source uses.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use crate::checks_rbac::kube_source_access;
use crate::manifests::manifests;

/// A row of the "Objects read" table in docs/configuration.md: kind, group, versions.
fn documented_kinds() -> BTreeMap<String, (String, BTreeSet<String>)> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/configuration.md");
    let text = std::fs::read_to_string(&path).expect("docs/configuration.md exists");
    let mut rows = BTreeMap::new();
    let mut in_table = false;
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with("| kind | apiVersion |") {
            in_table = true;
            continue;
        }
        if !in_table {
            continue;
        }
        if !line.starts_with('|') {
            break;
        }
        let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
        if cells.len() < 2 || cells[0].starts_with("---") {
            continue;
        }
        let kind = cells[0].trim_matches('`').to_owned();
        let mut group = String::new();
        let mut versions = BTreeSet::new();
        for (index, entry) in cells[1].split(',').enumerate() {
            let entry = entry.trim().trim_matches('`');
            // The first entry names the group (none for the core group); the
            // others are further versions of it.
            match entry.rsplit_once('/') {
                Some((g, version)) if index == 0 => {
                    group = g.to_owned();
                    versions.insert(version.to_owned());
                }
                _ => {
                    versions.insert(entry.to_owned());
                }
            }
        }
        rows.insert(kind, (group, versions));
    }
    assert!(
        !rows.is_empty(),
        "docs/configuration.md: no \"| kind | apiVersion |\" table found"
    );
    rows
}

/// API groups Kubernetes serves itself: objects of these need no CRD.
const BUILT_IN_GROUPS: &[&str] = &["", "discovery.k8s.io"];

#[test]
fn crds_serve_both_versions_and_match_what_strait_reads() {
    let documented = documented_kinds();
    let custom: BTreeMap<&String, &(String, BTreeSet<String>)> = documented
        .iter()
        .filter(|(_, (group, _))| !BUILT_IN_GROUPS.contains(&group.as_str()))
        .collect();
    let crds = &manifests().crds;
    let defined: BTreeSet<&String> = crds.iter().map(|c| &c.object.spec.names.kind).collect();
    assert_eq!(
        defined,
        custom.keys().copied().collect::<BTreeSet<_>>(),
        "deploy/crds should define exactly the custom kinds docs/configuration.md says Strait reads"
    );
    for found in crds {
        let origin = &found.origin;
        let crd = &found.object;
        let spec = &crd.spec;
        let names = &spec.names;
        let (group, versions) = custom[&names.kind];
        assert_eq!(
            &spec.group, group,
            "{origin}: group differs from docs/configuration.md"
        );
        let kind = names.kind.to_lowercase();
        let plural = match kind.strip_suffix('y') {
            Some(stem) => format!("{stem}ies"),
            None => format!("{kind}s"),
        };
        assert_eq!(names.plural, plural, "{origin}: plural name");
        assert_eq!(
            names.singular.as_deref(),
            Some(kind.as_str()),
            "{origin}: singular name"
        );
        assert_eq!(
            crd.metadata.name.as_deref(),
            Some(format!("{}.{}", names.plural, spec.group).as_str()),
            "{origin}: metadata.name must be <plural>.<group>"
        );
        let scope = if names.kind == "ClusterProperty" {
            "Cluster"
        } else {
            "Namespaced"
        };
        assert_eq!(spec.scope, scope, "{origin}: scope");
        let protected = (spec.group.ends_with(".k8s.io") || spec.group.ends_with(".kubernetes.io"))
            && !spec.group.ends_with(".x-k8s.io");
        if protected {
            let approval = crd
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get("api-approved.kubernetes.io"));
            assert!(
                approval.is_some_and(|a| a.starts_with("https://") || a.starts_with("unapproved")),
                "{origin}: {} is a protected group; the API server refuses the CRD without an api-approved.kubernetes.io annotation",
                spec.group
            );
        }

        let served: BTreeSet<String> = spec
            .versions
            .iter()
            .filter(|v| v.served)
            .map(|v| v.name.clone())
            .collect();
        let expected: BTreeSet<String> = ["v1alpha1", "v1beta1"].map(str::to_owned).into();
        assert_eq!(served, expected, "{origin}: served versions");
        assert_eq!(
            &served, versions,
            "{origin}: served versions differ from docs/configuration.md"
        );
        let storage: Vec<&str> = spec
            .versions
            .iter()
            .filter(|v| v.storage)
            .map(|v| v.name.as_str())
            .collect();
        assert_eq!(
            storage,
            ["v1beta1"],
            "{origin}: exactly one storage version, v1beta1"
        );
        let mut schemas = Vec::new();
        for version in &spec.versions {
            let at = format!("{origin}, version {}", version.name);
            let schema = version
                .schema
                .as_ref()
                .and_then(|s| s.open_api_v3_schema.as_ref())
                .unwrap_or_else(|| panic!("{at}: no openAPIV3Schema"));
            assert_eq!(
                schema.type_.as_deref(),
                Some("object"),
                "{at}: the schema's root type"
            );
            let properties = schema
                .properties
                .as_ref()
                .unwrap_or_else(|| panic!("{at}: the schema has no properties"));
            assert!(
                properties.contains_key("spec"),
                "{at}: the schema has no spec"
            );
            schemas.push(schema);
            assert!(
                !version
                    .additional_printer_columns
                    .as_deref()
                    .unwrap_or_default()
                    .is_empty(),
                "{at}: no additionalPrinterColumns"
            );
            let status = version
                .subresources
                .as_ref()
                .and_then(|s| s.status.as_ref())
                .is_some();
            if names.kind == "ClusterProperty" {
                let value = properties["spec"]
                    .properties
                    .as_ref()
                    .and_then(|p| p.get("value"))
                    .and_then(|v| v.type_.as_deref());
                assert_eq!(value, Some("string"), "{at}: spec.value is a string");
            } else {
                assert!(status, "{at}: the status subresource is required");
                assert!(
                    properties.contains_key("status"),
                    "{at}: the schema has no status"
                );
            }
        }
        assert!(
            schemas.windows(2).all(|pair| pair[0] == pair[1]),
            "{origin}: v1alpha1 and v1beta1 have the same shape, so their schemas must be identical"
        );
    }

    // The RBAC list names the CRDs' resources (written ones included).
    for access in &kube_source_access(true, true) {
        let resource = access.resource.split('/').next().expect("split yields one");
        if let Some(crd) = crds.iter().find(|c| c.object.spec.group == access.group) {
            assert!(
                crds.iter().any(|c| c.object.spec.group == access.group
                    && c.object.spec.names.plural == resource),
                "{}: no CRD of group {} has the plural {resource} the kube source uses",
                crd.origin,
                access.group
            );
        }
    }
}
