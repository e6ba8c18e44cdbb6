//! The gateway pod: probes and ports agree with the listener flags; it is
//! locked down, spread across nodes, and shuts down within its grace period.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::gateway::{gateway, selector_matches};
use crate::manifests::manifests;

#[test]
fn probes_use_the_admin_port() {
    let gateway = gateway();
    let origin = gateway.origin();
    let admin = gateway.listen("--admin-listen");
    assert!(
        admin.ip().is_unspecified(),
        "{origin}: --admin-listen {admin} must listen on all addresses for the kubelet's probes"
    );
    let container = gateway.container;
    for (what, probe, path) in [
        ("startupProbe", &container.startup_probe, "/healthz"),
        ("livenessProbe", &container.liveness_probe, "/healthz"),
        ("readinessProbe", &container.readiness_probe, "/readyz"),
    ] {
        let get = probe
            .as_ref()
            .and_then(|p| p.http_get.as_ref())
            .unwrap_or_else(|| {
                panic!(
                    "{origin}: container {} has no {what}.httpGet",
                    container.name
                )
            });
        assert_eq!(
            get.path.as_deref(),
            Some(path),
            "{origin}: {what} should GET {path}"
        );
        assert!(
            get.scheme.as_deref().is_none_or(|s| s == "HTTP"),
            "{origin}: {what}: the admin listener speaks plain HTTP"
        );
        let port = gateway.resolve(&get.port, "TCP").unwrap_or_else(|| {
            panic!(
                "{origin}: {what} port {:?} is not a container port",
                get.port
            )
        });
        assert_eq!(
            port,
            admin.port(),
            "{origin}: {what} probes port {port}, but --admin-listen is {admin}"
        );
    }
}

#[test]
fn container_ports_match_the_listener_flags() {
    let gateway = gateway();
    let origin = gateway.origin();
    for (name, protocol, flag) in [
        ("admin", "TCP", "--admin-listen"),
        ("connect", "TCP", "--connect-listen"),
        ("tunnel", "TCP", "--tunnel-listen"),
        ("tunnel-quic", "UDP", "--tunnel-listen"),
        ("dns", "UDP", "--dns-listen"),
        ("dns-tcp", "TCP", "--dns-listen"),
    ] {
        let address = gateway.listen(flag);
        assert!(
            address.ip().is_unspecified(),
            "{origin}: {flag} {address} must listen on all addresses to be reachable through a Service"
        );
        let port = gateway
            .resolve(&IntOrString::String(name.to_owned()), protocol)
            .unwrap_or_else(|| panic!("{origin}: no container port named {name} ({protocol})"));
        assert_eq!(
            port,
            address.port(),
            "{origin}: container port {name}/{protocol} is {port}, but {flag} is {address}"
        );
    }
}

#[test]
fn the_deployment_is_locked_down() {
    let gateway = gateway();
    let origin = gateway.origin();
    let pod = gateway.pod;
    let container = gateway.container;
    let pod_security = pod.security_context.clone().unwrap_or_default();
    let security = container.security_context.clone().unwrap_or_else(|| {
        panic!(
            "{origin}: container {} has no securityContext",
            container.name
        )
    });
    assert!(
        security.run_as_non_root.or(pod_security.run_as_non_root) == Some(true),
        "{origin}: runAsNonRoot must be true"
    );
    assert!(
        security.run_as_user.or(pod_security.run_as_user) != Some(0),
        "{origin}: must not run as uid 0"
    );
    assert_eq!(
        security.read_only_root_filesystem,
        Some(true),
        "{origin}: readOnlyRootFilesystem must be true"
    );
    assert_eq!(
        security.allow_privilege_escalation,
        Some(false),
        "{origin}: allowPrivilegeEscalation must be false"
    );
    assert_ne!(
        security.privileged,
        Some(true),
        "{origin}: must not be privileged"
    );
    let capabilities = security.capabilities.clone().unwrap_or_default();
    assert!(
        capabilities
            .drop
            .as_deref()
            .unwrap_or_default()
            .iter()
            .any(|c| c == "ALL"),
        "{origin}: capabilities.drop must hold ALL"
    );
    assert!(
        capabilities.add.as_deref().unwrap_or_default().is_empty(),
        "{origin}: no capability may be added (every port is above 1024)"
    );
    let seccomp = security
        .seccomp_profile
        .or(pod_security.seccomp_profile)
        .map(|s| s.type_);
    assert_eq!(
        seccomp.as_deref(),
        Some("RuntimeDefault"),
        "{origin}: seccompProfile must be RuntimeDefault"
    );
    for (what, set) in [
        ("hostNetwork", pod.host_network),
        ("hostPID", pod.host_pid),
        ("hostIPC", pod.host_ipc),
    ] {
        assert_ne!(set, Some(true), "{origin}: {what} must not be set");
    }
    let resources = container
        .resources
        .as_ref()
        .unwrap_or_else(|| panic!("{origin}: no resources"));
    for (what, map) in [
        ("requests", &resources.requests),
        ("limits", &resources.limits),
    ] {
        let map = map
            .as_ref()
            .unwrap_or_else(|| panic!("{origin}: no resources.{what}"));
        for resource in ["cpu", "memory"] {
            assert!(
                map.contains_key(resource),
                "{origin}: no resources.{what}.{resource}"
            );
        }
    }
    // The image, its tag or digest: checks_objects.rs
    // (the_image_is_set_in_the_kustomization_only).
    let env = container.env.as_deref().unwrap_or_default();
    let namespace_env = env
        .iter()
        .find(|e| e.name == "POD_NAMESPACE")
        .and_then(|e| e.value_from.as_ref())
        .and_then(|v| v.field_ref.as_ref())
        .map(|f| f.field_path.as_str());
    assert_eq!(
        namespace_env,
        Some("metadata.namespace"),
        "{origin}: POD_NAMESPACE must come from the downward API"
    );
}

#[test]
fn replicas_spread_across_nodes_and_a_budget_keeps_one() {
    let gateway = gateway();
    let origin = gateway.origin();
    let spec = gateway.found.object.spec.as_ref().expect("checked");
    assert!(
        spec.replicas.unwrap_or(1) >= 2,
        "{origin}: at least two replicas"
    );
    let labels = gateway.pod_labels();
    assert!(
        selector_matches(&spec.selector, labels),
        "{origin}: the selector does not match the pod template's labels"
    );
    let spread = gateway
        .pod
        .topology_spread_constraints
        .as_deref()
        .unwrap_or_default()
        .iter()
        .any(|c| {
            c.topology_key == "kubernetes.io/hostname"
                && c.label_selector
                    .as_ref()
                    .is_some_and(|s| selector_matches(s, labels))
        });
    let anti_affinity = gateway
        .pod
        .affinity
        .as_ref()
        .and_then(|a| a.pod_anti_affinity.as_ref())
        .is_some_and(|a| {
            let required = a
                .required_during_scheduling_ignored_during_execution
                .iter()
                .flatten();
            let preferred = a
                .preferred_during_scheduling_ignored_during_execution
                .iter()
                .flatten()
                .map(|w| &w.pod_affinity_term);
            required.chain(preferred).any(|term| {
                term.topology_key == "kubernetes.io/hostname"
                    && term
                        .label_selector
                        .as_ref()
                        .is_some_and(|s| selector_matches(s, labels))
            })
        });
    assert!(
        spread || anti_affinity,
        "{origin}: replicas should be spread across nodes (topologySpreadConstraints or podAntiAffinity on kubernetes.io/hostname)"
    );

    let pdbs = &manifests().pdbs;
    assert_eq!(pdbs.len(), 1, "deploy/ should hold one PodDisruptionBudget");
    let pdb = &pdbs[0];
    let pdb_spec = pdb
        .object
        .spec
        .as_ref()
        .unwrap_or_else(|| panic!("{}: no spec", pdb.origin));
    assert_eq!(
        pdb_spec.min_available,
        Some(IntOrString::Int(1)),
        "{}: minAvailable should be 1",
        pdb.origin
    );
    assert!(
        pdb_spec
            .selector
            .as_ref()
            .is_some_and(|s| selector_matches(s, labels)),
        "{}: the selector does not match the pods of {origin}",
        pdb.origin
    );
}

#[test]
fn the_grace_period_outlasts_the_drain() {
    let gateway = gateway();
    let origin = gateway.origin();
    let drain = gateway.required_flag("--drain-timeout");
    let drain: Duration = humantime::parse_duration(drain)
        .unwrap_or_else(|e| panic!("{origin}: --drain-timeout {drain:?}: {e}"));
    let pre_stop = gateway
        .container
        .lifecycle
        .as_ref()
        .and_then(|l| l.pre_stop.as_ref());
    assert!(
        pre_stop.is_none_or(|h| h.exec.is_none()),
        "{origin}: the image has no shell; a preStop exec cannot run"
    );
    let sleep = pre_stop
        .and_then(|h| h.sleep.as_ref())
        .map_or(0, |s| s.seconds);
    let grace = gateway.pod.termination_grace_period_seconds.unwrap_or(30);
    let needed = u64::try_from(sleep).expect("a sleep is not negative") + drain.as_secs();
    assert!(
        u64::try_from(grace).unwrap_or(0) > needed,
        "{origin}: terminationGracePeriodSeconds {grace} should exceed the preStop sleep ({sleep}s) plus --drain-timeout ({}s)",
        drain.as_secs()
    );
}

#[test]
fn the_startup_probe_outlasts_the_kube_sync_wait() {
    let gateway = gateway();
    let origin = gateway.origin();
    // strait run --kube opens its listeners (the admin port included) once
    // every cluster synced, or after --kube-timeout; until then every probe
    // fails, and a failing liveness probe would restart the pod.
    let wait = gateway.flag("--kube-timeout").unwrap_or("30s");
    let wait: Duration = humantime::parse_duration(wait)
        .unwrap_or_else(|e| panic!("{origin}: --kube-timeout {wait:?}: {e}"));
    let probe = gateway
        .container
        .startup_probe
        .as_ref()
        .unwrap_or_else(|| panic!("{origin}: no startupProbe"));
    let budget = |probe: &k8s_openapi::api::core::v1::Probe| {
        let seconds = probe.initial_delay_seconds.unwrap_or(0)
            + probe.period_seconds.unwrap_or(10) * probe.failure_threshold.unwrap_or(3);
        u64::try_from(seconds).expect("probe settings are not negative")
    };
    let startup = budget(probe);
    assert!(
        startup >= wait.as_secs() + 15,
        "{origin}: the startupProbe allows {startup}s; --kube-timeout is {}s, and the routes and TLS still load after it",
        wait.as_secs()
    );
}
