//! The gateway's identity and permissions: its own ServiceAccount is bound,
//! and RBAC grants exactly what the kube source uses (least privilege):
//! what it watches, and, when the Deployment writes export status, what it
//! writes.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::rbac::v1::{PolicyRule, Subject};
use strait::controller::{IMPORT_RESOURCES, WRITTEN_RESOURCES};
use strait::discovery::kube::{
    AccessScope, POD_NAME_ENV, POD_NAMESPACE_ENV, ResourceAccess, WATCHED_RESOURCES,
};

use crate::gateway::{Gateway, gateway};
use crate::manifests::manifests;

/// Where a scope of access applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Scope {
    /// Every namespace (or a cluster-scoped resource): a ClusterRole bound by a ClusterRoleBinding.
    Cluster,
    /// The gateway's own namespace only: a Role bound by a RoleBinding.
    OwnNamespace,
    /// The remote-cluster Secret namespace only (`kube.remoteSecretNamespace`),
    /// apart from the gateway's own: a Role bound by a RoleBinding there.
    RemoteSecrets,
}

/// The namespace the gateway reads remote-cluster Secrets in, as its
/// gateway.yaml says (checks_config requires it set, and apart from the
/// gateway's own).
pub(crate) fn remote_secret_namespace(gateway: &Gateway) -> String {
    gateway
        .settings()
        .1
        .kube
        .remote_secret_namespace
        .clone()
        .unwrap_or_else(|| gateway.namespace.to_owned())
}

/// One API group and resource, and the verbs the gateway uses on it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Access {
    pub(crate) scope: Scope,
    pub(crate) group: &'static str,
    pub(crate) resource: &'static str,
    pub(crate) verbs: &'static [&'static str],
}

/// Whether the Deployment writes export status (`--write-export-status`
/// or `kube.writeExportStatus` in its gateway.yaml).
pub(crate) fn writes_export_status(gateway: &Gateway) -> bool {
    gateway.args.iter().any(|a| a == "--write-export-status")
        || gateway.settings().1.kube.write_export_status
}

/// Whether the Deployment manages imports (`--manage-imports` or
/// `kube.manageImports` in its gateway.yaml).
pub(crate) fn manages_imports(gateway: &Gateway) -> bool {
    gateway.args.iter().any(|a| a == "--manage-imports") || gateway.settings().1.kube.manage_imports
}

/// What the kube source uses: `WATCHED_RESOURCES`, `WRITTEN_RESOURCES`
/// when the Deployment writes export status, and `IMPORT_RESOURCES` when it
/// manages imports.
pub(crate) fn kube_source_access(writes: bool, imports: bool) -> Vec<Access> {
    let written: &[ResourceAccess] = if writes { WRITTEN_RESOURCES } else { &[] };
    let imported: &[ResourceAccess] = if imports { IMPORT_RESOURCES } else { &[] };
    WATCHED_RESOURCES
        .iter()
        .chain(written)
        .chain(imported)
        .map(|a| Access {
            scope: match a.scope {
                AccessScope::Cluster => Scope::Cluster,
                // The Lease namespace is the gateway's own (POD_NAMESPACE);
                // the remote-cluster Secrets live apart (checks_config).
                AccessScope::SecretNamespace => Scope::RemoteSecrets,
                AccessScope::LeaseNamespace => Scope::OwnNamespace,
            },
            group: a.group,
            resource: a.resource,
            verbs: a.verbs,
        })
        .collect()
}

#[test]
fn the_export_status_lease_is_held_by_the_pod_in_its_namespace() {
    let gateway = gateway();
    if !writes_export_status(&gateway) {
        return;
    }
    let env = gateway.container.env.as_deref().unwrap_or_default();
    for (name, path, why) in [
        (POD_NAME_ENV, "metadata.name", "the Lease holder identity"),
        (
            POD_NAMESPACE_ENV,
            "metadata.namespace",
            "the Lease namespace",
        ),
    ] {
        assert!(
            env.iter().any(|e| e.name == name
                && e.value_from
                    .as_ref()
                    .and_then(|v| v.field_ref.as_ref())
                    .is_some_and(|f| f.field_path == path)),
            "{}: {name} must come from the downward API ({path}): it is {why}",
            gateway.origin()
        );
    }
}

#[test]
fn the_service_account_is_the_subject_of_every_binding() {
    let m = manifests();
    let gateway = gateway();
    let origin = gateway.origin();
    let account = gateway
        .pod
        .service_account_name
        .as_deref()
        .unwrap_or_else(|| panic!("{origin}: no serviceAccountName"));
    assert_ne!(
        account, "default",
        "{origin}: the gateway needs its own ServiceAccount"
    );
    assert!(
        m.service_accounts.iter().any(|s| {
            s.object.metadata.name.as_deref() == Some(account)
                && s.object.metadata.namespace.as_deref() == Some(gateway.namespace)
        }),
        "{origin}: ServiceAccount {}/{account} is not defined in deploy/",
        gateway.namespace
    );
    assert_ne!(
        gateway.pod.automount_service_account_token,
        Some(false),
        "{origin}: the kube source needs the ServiceAccount token"
    );
    let is_gateway = |subject: &Subject| {
        subject.kind == "ServiceAccount"
            && subject.name == account
            && subject.namespace.as_deref() == Some(gateway.namespace)
    };
    for binding in &m.cluster_role_bindings {
        let subjects = binding.object.subjects.as_deref().unwrap_or_default();
        assert!(
            subjects.iter().any(is_gateway),
            "{}: ServiceAccount {}/{account} is not a subject",
            binding.origin,
            gateway.namespace
        );
        assert!(
            m.cluster_roles.iter().any(|r| {
                binding.object.role_ref.kind == "ClusterRole"
                    && r.object.metadata.name.as_deref() == Some(&binding.object.role_ref.name)
            }),
            "{}: roleRef {} {} is not defined in deploy/",
            binding.origin,
            binding.object.role_ref.kind,
            binding.object.role_ref.name
        );
    }
    for binding in &m.role_bindings {
        let subjects = binding.object.subjects.as_deref().unwrap_or_default();
        assert!(
            subjects.iter().any(is_gateway),
            "{}: ServiceAccount {}/{account} is not a subject",
            binding.origin,
            gateway.namespace
        );
        let role_ref = &binding.object.role_ref;
        let defined = match role_ref.kind.as_str() {
            "Role" => m.roles.iter().any(|r| {
                r.object.metadata.name.as_deref() == Some(&role_ref.name)
                    && r.object.metadata.namespace == binding.object.metadata.namespace
            }),
            "ClusterRole" => m
                .cluster_roles
                .iter()
                .any(|r| r.object.metadata.name.as_deref() == Some(&role_ref.name)),
            _ => false,
        };
        assert!(
            defined,
            "{}: roleRef {} {} is not defined in deploy/",
            binding.origin, role_ref.kind, role_ref.name
        );
    }
}

/// Every (scope, group, resource, verb) the manifests grant the gateway.
fn granted(
    account: &str,
    namespace: &str,
    remote_namespace: &str,
) -> BTreeMap<(Scope, String, String, String), String> {
    let m = manifests();
    let bound = |subjects: &Option<Vec<Subject>>| {
        subjects.iter().flatten().any(|s| {
            s.kind == "ServiceAccount"
                && s.name == account
                && s.namespace.as_deref() == Some(namespace)
        })
    };
    let cluster_role = |name: &str| {
        m.cluster_roles
            .iter()
            .find(|r| r.object.metadata.name.as_deref() == Some(name))
    };
    let mut rules: Vec<(Scope, &str, &PolicyRule)> = Vec::new();
    for binding in m
        .cluster_role_bindings
        .iter()
        .filter(|b| bound(&b.object.subjects))
    {
        if let Some(role) = cluster_role(&binding.object.role_ref.name) {
            for rule in role.object.rules.iter().flatten() {
                rules.push((Scope::Cluster, &role.origin, rule));
            }
        }
    }
    for binding in m.role_bindings.iter().filter(|b| bound(&b.object.subjects)) {
        let bound_in = binding.object.metadata.namespace.as_deref();
        let scope = if bound_in == Some(namespace) {
            Scope::OwnNamespace
        } else if bound_in == Some(remote_namespace) {
            Scope::RemoteSecrets
        } else {
            panic!("{}: binds the gateway in another namespace", binding.origin)
        };
        let role_ref = &binding.object.role_ref;
        if role_ref.kind == "ClusterRole" {
            if let Some(role) = cluster_role(&role_ref.name) {
                for rule in role.object.rules.iter().flatten() {
                    rules.push((scope, &role.origin, rule));
                }
            }
            continue;
        }
        for role in m.roles.iter().filter(|r| {
            r.object.metadata.name.as_deref() == Some(&role_ref.name)
                && r.object.metadata.namespace.as_deref() == bound_in
        }) {
            for rule in role.object.rules.iter().flatten() {
                rules.push((scope, &role.origin, rule));
            }
        }
    }
    let mut granted = BTreeMap::new();
    for (scope, origin, rule) in rules {
        assert!(
            rule.non_resource_urls
                .as_deref()
                .unwrap_or_default()
                .is_empty(),
            "{origin}: grants nonResourceURLs"
        );
        assert!(
            rule.resource_names
                .as_deref()
                .unwrap_or_default()
                .is_empty(),
            "{origin}: resourceNames are not modelled by this test"
        );
        let groups = rule.api_groups.as_deref().unwrap_or_default();
        let resources = rule.resources.as_deref().unwrap_or_default();
        for group in groups {
            for resource in resources {
                for verb in &rule.verbs {
                    for (what, value) in
                        [("apiGroup", group), ("resource", resource), ("verb", verb)]
                    {
                        assert!(
                            !value.contains('*'),
                            "{origin}: grants the wildcard {what} {value:?}"
                        );
                    }
                    granted.insert(
                        (scope, group.clone(), resource.clone(), verb.clone()),
                        origin.to_owned(),
                    );
                }
            }
        }
    }
    granted
}

#[test]
fn rbac_grants_exactly_what_the_kube_source_uses() {
    let gateway = gateway();
    let account = gateway
        .pod
        .service_account_name
        .as_deref()
        .unwrap_or_else(|| panic!("{}: no serviceAccountName", gateway.origin()));
    let granted = granted(
        account,
        gateway.namespace,
        &remote_secret_namespace(&gateway),
    );
    let needed: BTreeSet<(Scope, String, String, String)> =
        kube_source_access(writes_export_status(&gateway), manages_imports(&gateway))
            .iter()
            .flat_map(|a| {
                a.verbs.iter().map(move |verb| {
                    (
                        a.scope,
                        a.group.to_owned(),
                        a.resource.to_owned(),
                        (*verb).to_owned(),
                    )
                })
            })
            .collect();
    for key in &needed {
        let (scope, group, resource, verb) = key;
        let covered = granted.contains_key(key)
            || (*scope == Scope::OwnNamespace
                && granted.contains_key(&(
                    Scope::Cluster,
                    group.clone(),
                    resource.clone(),
                    verb.clone(),
                )));
        assert!(
            covered,
            "deploy/rbac: ServiceAccount {}/{account} may not {verb} {resource} (group {group:?}, {scope:?}); the kube source needs it",
            gateway.namespace
        );
    }
    for (key, origin) in &granted {
        let (scope, group, resource, verb) = key;
        assert!(
            needed.contains(key),
            "{origin}: grants {verb} on {resource} (group {group:?}, {scope:?}), which the kube source does not use; least privilege"
        );
    }
}

/// `deploy/admission.yaml` guards exactly the gateway's own writes: its
/// policy matches the gateway's ServiceAccount, covers every write verb the
/// ClusterRole grants on Services and EndpointSlices, and is bound to deny.
#[test]
fn the_admission_policy_guards_the_gateways_writes() {
    let m = manifests();
    let gateway = gateway();
    let account = gateway
        .pod
        .service_account_name
        .as_deref()
        .expect("checked elsewhere");
    let user = format!("system:serviceaccount:{}:{account}", gateway.namespace);
    let [policy] = m.admission_policies.as_slice() else {
        panic!("deploy/: expected one ValidatingAdmissionPolicy");
    };
    let origin = &policy.origin;
    let spec = policy.object.spec.as_ref().expect("a spec");
    let conditions = spec.match_conditions.as_deref().unwrap_or_default();
    assert!(
        conditions
            .iter()
            .any(|c| c.expression.contains(&format!("'{user}'"))),
        "{origin}: does not match the gateway's ServiceAccount {user}"
    );
    assert_eq!(spec.failure_policy.as_deref(), Some("Fail"), "{origin}");
    let rules = spec
        .match_constraints
        .as_ref()
        .and_then(|c| c.resource_rules.as_deref())
        .unwrap_or_default();
    for resource in ["services", "endpointslices"] {
        let operations: BTreeSet<&str> = rules
            .iter()
            .filter(|r| r.resources.iter().flatten().any(|r| r == resource))
            .flat_map(|r| r.operations.iter().flatten().map(String::as_str))
            .collect();
        assert_eq!(
            operations,
            BTreeSet::from(["CREATE", "UPDATE", "DELETE"]),
            "{origin}: {resource}"
        );
    }
    assert!(
        m.admission_bindings.iter().any(|b| {
            let spec = b.object.spec.as_ref();
            spec.and_then(|s| s.policy_name.as_deref()) == policy.object.metadata.name.as_deref()
                && spec
                    .and_then(|s| s.validation_actions.as_deref())
                    .is_some_and(|actions| actions.iter().any(|a| a == "Deny"))
        }),
        "{origin}: no binding denies what it refuses"
    );
}
