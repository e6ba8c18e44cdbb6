//! The CRDs in `deploy/crds/` against what docs/configuration.md says
//! Strait reads and what the kube source uses, and against upstream's
//! definitions (kubernetes-sigs/mcs-api, kubernetes-sigs/about-api), which
//! they copy unchanged so that they coexist with other implementations'.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::JSONSchemaProps;
use serde_json::Value;
use strait::discovery::objects::{ClusterProperty, MCS_GROUP, ServiceExport, ServiceImport};
use strait::export_status::MAX_MESSAGE_BYTES;

use crate::checks_rbac::kube_source_access;
use crate::manifests::{CRDS_DIR, deploy_dir, manifests, schema_items, schema_property};

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
            }
            assert!(status, "{at}: the status subresource is required");
            assert!(
                properties.contains_key("status"),
                "{at}: the schema has no status"
            );
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

/// The mcs-api release `deploy/crds/` copies ServiceExport and ServiceImport from.
const MCS_API_RELEASE: &str = "v0.5.2";
/// The labels mcs-api puts on its CRDs: MCS operators compare them with
/// their own release to tell whether the installed CRDs are current.
const MCS_RELEASE_LABEL: &str = "multicluster.x-k8s.io/release-version";
const MCS_REVISION_LABEL: &str = "multicluster.x-k8s.io/crd-schema-revision";

/// The `spec` fields of a ServiceImport that the import reconciler writes
/// (src/imports/render.rs), and of its ports: a field the schema lacks
/// would be pruned by the API server without an error.
const IMPORT_SPEC_WRITTEN: &[&str] = &[
    "type",
    "ports",
    "ips",
    "sessionAffinity",
    "sessionAffinityConfig",
    "ipFamilies",
    "internalTrafficPolicy",
    "trafficDistribution",
];
const IMPORT_PORT_WRITTEN: &[&str] = &["name", "protocol", "port", "appProtocol"];

/// The dotted paths of every field an object holds ("spec.ips"), metadata
/// and type fields aside. Of a default object, lists and maps are empty:
/// what is found is the fields of its types.
fn field_paths(value: &Value, prefix: &str, out: &mut Vec<String>) {
    let Some(object) = value.as_object() else {
        return;
    };
    for (key, value) in object {
        if prefix.is_empty() && matches!(key.as_str(), "apiVersion" | "kind" | "metadata") {
            continue;
        }
        let path = if prefix.is_empty() {
            key.clone()
        } else {
            format!("{prefix}.{key}")
        };
        field_paths(value, &path, out);
        out.push(path);
    }
}

/// `status.conditions` as mcs-api defines it: a list of metav1.Conditions keyed by type.
fn check_conditions<'a>(at: &str, schema: &'a JSONSchemaProps) -> &'a JSONSchemaProps {
    let conditions = schema_property(schema, &["status", "conditions"])
        .unwrap_or_else(|| panic!("{at}: the schema has no status.conditions"));
    assert_eq!(
        conditions.type_.as_deref(),
        Some("array"),
        "{at}: status.conditions is a list"
    );
    assert_eq!(
        conditions.x_kubernetes_list_type.as_deref(),
        Some("map"),
        "{at}: status.conditions is a map list, so each writer owns its own condition types"
    );
    assert_eq!(
        conditions.x_kubernetes_list_map_keys.as_deref(),
        Some(&["type".to_owned()][..]),
        "{at}: status.conditions is keyed by type"
    );
    let item = schema_items(conditions)
        .unwrap_or_else(|| panic!("{at}: status.conditions has no item schema"));
    let required: BTreeSet<&str> = item.required.iter().flatten().map(String::as_str).collect();
    assert_eq!(
        required,
        BTreeSet::from(["lastTransitionTime", "message", "reason", "status", "type"]),
        "{at}: the fields every condition must have"
    );
    item
}

#[test]
fn crds_are_upstreams_definitions() {
    for found in &manifests().crds {
        let origin = &found.origin;
        let crd = &found.object;
        let names = &crd.spec.names;
        let kind = names.kind.as_str();

        let short_names: BTreeSet<&str> = names
            .short_names
            .iter()
            .flatten()
            .map(String::as_str)
            .collect();
        let upstream_short_names: BTreeSet<&str> = match kind {
            "ServiceExport" => BTreeSet::from(["svcex", "svcexport"]),
            "ServiceImport" => BTreeSet::from(["svcim", "svcimport"]),
            _ => BTreeSet::new(),
        };
        assert_eq!(
            short_names, upstream_short_names,
            "{origin}: shortNames differ from upstream's"
        );

        let labels = crd.metadata.labels.clone().unwrap_or_default();
        if crd.spec.group == MCS_GROUP {
            assert_eq!(
                labels.get(MCS_RELEASE_LABEL).map(String::as_str),
                Some(MCS_API_RELEASE),
                "{origin}: the {MCS_RELEASE_LABEL} label tells MCS operators which mcs-api release the CRD is"
            );
            let revision = labels.get(MCS_REVISION_LABEL);
            assert!(
                revision.is_some_and(|r| r.parse::<u32>().is_ok()),
                "{origin}: {MCS_REVISION_LABEL} should be upstream's schema revision, a number, not {revision:?}"
            );
            assert_eq!(
                labels.len(),
                2,
                "{origin}: labels upstream does not set: {labels:?}"
            );
        } else {
            // about-api labels nothing.
            assert!(
                labels.is_empty(),
                "{origin}: labels upstream does not set: {labels:?}"
            );
        }
        if kind == "ClusterProperty" {
            assert_eq!(
                names.categories.as_deref(),
                Some(&["multicluster".to_owned()][..]),
                "{origin}: categories (upstream's)"
            );
        }

        // What Strait decodes: every field its types hold is in the schema.
        let decoded = match kind {
            "ClusterProperty" => serde_json::to_value(ClusterProperty::default()),
            "ServiceExport" => serde_json::to_value(ServiceExport::default()),
            "ServiceImport" => serde_json::to_value(ServiceImport::default()),
            other => panic!("{origin}: no Strait type for {other}"),
        }
        .expect("Strait's objects serialize");
        let mut decoded_paths = Vec::new();
        field_paths(&decoded, "", &mut decoded_paths);

        for version in &crd.spec.versions {
            let at = format!("{origin}, version {}", version.name);
            let schema = version
                .schema
                .as_ref()
                .and_then(|s| s.open_api_v3_schema.as_ref())
                .unwrap_or_else(|| panic!("{at}: no openAPIV3Schema"));
            for path in &decoded_paths {
                let keys: Vec<&str> = path.split('.').collect();
                assert!(
                    schema_property(schema, &keys).is_some(),
                    "{at}: Strait decodes {path}, which the schema does not define"
                );
            }
            match kind {
                "ServiceExport" => {
                    let condition = check_conditions(&at, schema);
                    let message =
                        schema_property(condition, &["message"]).and_then(|m| m.max_length);
                    assert_eq!(
                        message,
                        i64::try_from(MAX_MESSAGE_BYTES).ok(),
                        "{at}: MAX_MESSAGE_BYTES (src/export_status) should be the CRD's longest condition message"
                    );
                }
                "ServiceImport" => {
                    check_conditions(&at, schema);
                    // Written by the import reconciler (src/imports/render.rs):
                    // a schema without it would prune it.
                    let slices = schema_property(schema, &["status", "endpointSliceObjects"])
                        .unwrap_or_else(|| {
                            panic!("{at}: the schema has no status.endpointSliceObjects")
                        });
                    let values: Vec<String> = slices
                        .enum_
                        .iter()
                        .flatten()
                        .filter_map(|v| v.0.as_str().map(str::to_owned))
                        .collect();
                    assert_eq!(values, ["Present", "Absent"], "{at}");
                    let clusters = schema_property(schema, &["status", "clusters"])
                        .unwrap_or_else(|| panic!("{at}: the schema has no status.clusters"));
                    assert_eq!(
                        clusters.x_kubernetes_list_type.as_deref(),
                        Some("map"),
                        "{at}: status.clusters is a map list"
                    );
                    assert_eq!(
                        clusters.x_kubernetes_list_map_keys.as_deref(),
                        Some(&["cluster".to_owned()][..]),
                        "{at}: status.clusters is keyed by cluster"
                    );
                    let cluster = schema_items(clusters)
                        .unwrap_or_else(|| panic!("{at}: status.clusters has no item schema"));
                    assert_eq!(
                        cluster.required.as_deref(),
                        Some(&["cluster".to_owned()][..]),
                        "{at}: each of status.clusters names its cluster"
                    );
                    for field in ["ipFamilies", "ips"] {
                        let list = schema_property(schema, &["spec", field])
                            .unwrap_or_else(|| panic!("{at}: the schema has no spec.{field}"));
                        assert_eq!(
                            list.max_items,
                            Some(2),
                            "{at}: spec.{field} holds at most one entry per IP family"
                        );
                    }
                    for &field in IMPORT_SPEC_WRITTEN {
                        assert!(
                            schema_property(schema, &["spec", field]).is_some(),
                            "{at}: the import reconciler writes spec.{field}, which the schema does not define"
                        );
                    }
                    let port = schema_property(schema, &["spec", "ports"])
                        .and_then(schema_items)
                        .unwrap_or_else(|| panic!("{at}: spec.ports has no item schema"));
                    for &field in IMPORT_PORT_WRITTEN {
                        assert!(
                            schema_property(port, &[field]).is_some(),
                            "{at}: the import reconciler writes spec.ports[].{field}, which the schema does not define"
                        );
                    }
                }
                "ClusterProperty" => {
                    let columns: Vec<(&str, &str, &str)> = version
                        .additional_printer_columns
                        .iter()
                        .flatten()
                        .map(|c| (c.name.as_str(), c.type_.as_str(), c.json_path.as_str()))
                        .collect();
                    assert_eq!(
                        columns,
                        [
                            ("value", "string", ".spec.value"),
                            ("age", "date", ".metadata.creationTimestamp"),
                        ],
                        "{at}: printer columns (upstream's)"
                    );
                }
                other => panic!("{origin}: unexpected kind {other}"),
            }
        }
    }

    // Each copy names the upstream release it was taken from, and that is
    // the release its labels announce.
    for file in ["serviceexports.yaml", "serviceimports.yaml"] {
        let path = deploy_dir().join(CRDS_DIR).join(file);
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
        let source = format!("kubernetes-sigs/mcs-api@{MCS_API_RELEASE}");
        assert!(
            text.lines()
                .next()
                .is_some_and(|line| line.contains(&source)),
            "deploy/{CRDS_DIR}{file}: the first line should say it is a copy of {source}"
        );
    }
}
