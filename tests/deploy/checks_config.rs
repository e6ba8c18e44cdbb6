//! `gateway.yaml` agrees with the flags and the Kubernetes source; the
//! examples agree with the manifests (the CoreDNS examples forward the
//! zone gateway.yaml answers to the `cluster-edge-dns` Service).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde_json::Value;
use strait::config::GatewaySettings;
use strait::discovery::kube::{POD_NAMESPACE_ENV, REMOTE_CLUSTER_LABEL};
use strait::tls::Identity;

use crate::gateway::{Gateway, gateway};
use crate::manifests::{deploy_dir, documents, relative, string_at, yaml_files};

#[test]
fn gateway_yaml_is_valid_and_agrees_with_the_flags() {
    let gateway = gateway();
    let (config_map, settings) = gateway.settings();
    let origin = &config_map.origin;
    if uses_kube(&gateway, &settings) {
        // strait run --kube serves the cluster its cluster.clusterset.k8s.io
        // ClusterProperty names; a fixed id would override it, and a
        // ConfigMap copied unchanged to another cluster would then route as
        // the wrong cluster.
        assert_eq!(
            settings.cluster, None,
            "{origin}: with the Kubernetes source gateway.yaml should leave `cluster` out"
        );
    } else {
        let cluster = settings.cluster.as_deref().unwrap_or_else(|| {
            panic!("{origin}: gateway.yaml should set `cluster` (strait run needs it)")
        });
        assert!(!cluster.is_empty(), "{origin}: `cluster` is empty");
    }
    for (field, configured, flag) in [
        (
            "listeners.connect",
            settings.listeners.connect,
            "--connect-listen",
        ),
        (
            "listeners.tunnel",
            settings.listeners.tunnel,
            "--tunnel-listen",
        ),
        (
            "listeners.admin",
            settings.listeners.admin,
            "--admin-listen",
        ),
    ] {
        assert_eq!(
            configured,
            gateway.listen(flag),
            "{origin}: gateway.yaml {field} disagrees with {flag} of {}",
            gateway.origin()
        );
    }
    assert_eq!(
        settings.listeners.dns,
        Some(gateway.listen("--dns-listen")),
        "{origin}: gateway.yaml listeners.dns disagrees with --dns-listen of {}",
        gateway.origin()
    );
    let tls_dir = gateway.required_flag("--tls-dir");
    assert_eq!(
        settings.tls.dir,
        Path::new(tls_dir),
        "{origin}: gateway.yaml tls.dir disagrees with --tls-dir of {}",
        gateway.origin()
    );
    let tls = gateway.volume_at(tls_dir);
    let secret = tls.secret.as_ref().unwrap_or_else(|| {
        panic!(
            "{}: the volume at --tls-dir {tls_dir} is not a Secret",
            gateway.origin()
        )
    });
    assert!(
        secret.items.is_none(),
        "{}: the TLS Secret is mounted whole (tls.crt, tls.key, ca.crt)",
        gateway.origin()
    );
    assert!(
        secret.secret_name.is_some(),
        "{}: the TLS volume names no Secret",
        gateway.origin()
    );
}

/// Whether the gateway reads the cluster set from the API servers.
fn uses_kube(gateway: &Gateway, settings: &GatewaySettings) -> bool {
    gateway.args.iter().any(|a| a == "--kube") || settings.kube.enabled
}

#[test]
fn the_gateway_reads_the_cluster_set_from_the_kubernetes_api() {
    let gateway = gateway();
    let (config_map, settings) = gateway.settings();
    let origin = &config_map.origin;
    assert!(
        uses_kube(&gateway, &settings),
        "{}: the gateway should run with the Kubernetes source (--kube, or kube.enabled in {origin})",
        gateway.origin()
    );
    // With --kube the --config directory supplies gateway.yaml only: no
    // clusters/ folder is read or watched.
    let keys: Vec<&String> = config_map
        .object
        .data
        .iter()
        .flatten()
        .map(|(k, _)| k)
        .collect();
    assert_eq!(
        keys,
        ["gateway.yaml"],
        "{origin}: the config directory needs gateway.yaml only"
    );
    assert!(
        config_map.object.binary_data.is_none(),
        "{origin}: no binaryData"
    );
    assert!(
        settings.kube.kubeconfigs.is_empty(),
        "{origin}: kube.kubeconfigs names files the pod does not mount; remote clusters come from Secrets labelled {REMOTE_CLUSTER_LABEL}"
    );
    // The gateway reads Secrets only where the remote-cluster Secrets
    // live, apart from its own namespace, where a CA key may be kept.
    let remotes = settings.kube.remote_secret_namespace.as_deref();
    assert!(
        remotes.is_some_and(|ns| ns != gateway.namespace),
        "{origin}: kube.remoteSecretNamespace should name a namespace apart from the gateway's {}, so that the gateway reads no Secret where a CA key may live",
        gateway.namespace
    );
    assert!(
        crate::manifests::manifests()
            .namespaces
            .iter()
            .any(|n| n.object.metadata.name.as_deref() == remotes),
        "{origin}: kube.remoteSecretNamespace {remotes:?} is not a Namespace of deploy/"
    );
    let env = gateway.container.env.as_deref().unwrap_or_default();
    assert!(
        env.iter().any(|e| e.name == POD_NAMESPACE_ENV
            && e.value_from
                .as_ref()
                .and_then(|v| v.field_ref.as_ref())
                .is_some_and(|f| f.field_path == "metadata.namespace")),
        "{}: {POD_NAMESPACE_ENV} must come from the downward API: the remote-cluster Secrets are read there",
        gateway.origin()
    );
}

#[test]
fn examples_agree_with_the_manifests() {
    let gateway = gateway();
    let (config_map, settings) = gateway.settings();
    let tls_secret = gateway
        .volume_at(gateway.required_flag("--tls-dir"))
        .secret
        .as_ref()
        .and_then(|s| s.secret_name.clone())
        .expect("checked elsewhere");

    let mut paths = Vec::new();
    yaml_files(&deploy_dir().join("examples"), &mut paths);
    let mut trust_domain = None;
    let mut identity_cluster = None;
    let mut properties = BTreeMap::new();
    let mut corefiles = 0;
    let mut issuers: BTreeMap<String, Option<String>> = BTreeMap::new();
    let mut ca_certificate = None;
    let mut gateway_issuer = None;
    for path in &paths {
        let shown = format!("deploy/{}", relative(path));
        let text = std::fs::read_to_string(path).expect("readable");
        for (index, value) in documents(&shown, &text) {
            let api_version = string_at(&value, &["apiVersion"]).unwrap_or_default();
            let kind = string_at(&value, &["kind"]).unwrap_or_default();
            let name = string_at(&value, &["metadata", "name"]).unwrap_or("(unnamed)");
            let origin = format!("{shown}, document {index}: {kind} {name}");
            match (api_version, kind) {
                ("cert-manager.io/v1", "Issuer") => {
                    // Namespaced in the gateway's namespace: a tenant's
                    // Certificate elsewhere cannot use it.
                    assert_eq!(
                        string_at(&value, &["metadata", "namespace"]),
                        Some(gateway.namespace),
                        "{origin}: the Issuer must be in the gateway's namespace"
                    );
                    issuers.insert(
                        name.to_owned(),
                        string_at(&value, &["spec", "ca", "secretName"]).map(str::to_owned),
                    );
                }
                ("cert-manager.io/v1", "Certificate")
                    if value.get("spec").and_then(|s| s.get("isCA"))
                        == Some(&Value::Bool(true)) =>
                {
                    // The cluster's own CA: it names the cluster it issues for.
                    let uris: Vec<&str> = value["spec"]["uris"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(Value::as_str)
                        .collect();
                    assert_eq!(uris.len(), 1, "{origin}: the CA names one cluster");
                    let identity =
                        Identity::parse(uris[0]).unwrap_or_else(|e| panic!("{origin}: {e}"));
                    let secret = string_at(&value, &["spec", "secretName"])
                        .unwrap_or_else(|| panic!("{origin}: no secretName"));
                    ca_certificate = Some((origin.clone(), identity, secret.to_owned()));
                }
                ("cert-manager.io/v1", "Certificate") => {
                    assert_eq!(
                        string_at(&value, &["metadata", "namespace"]),
                        Some(gateway.namespace),
                        "{origin}: the Secret must be in the gateway's namespace"
                    );
                    assert_eq!(
                        string_at(&value, &["spec", "secretName"]),
                        Some(tls_secret.as_str()),
                        "{origin}: secretName should be the Secret {} mounts",
                        gateway.origin()
                    );
                    let spec = value.get("spec").expect("has spec");
                    let uris: Vec<&str> = spec
                        .get("uris")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                        .filter_map(Value::as_str)
                        .collect();
                    assert_eq!(uris.len(), 1, "{origin}: one URI SAN, the gateway identity");
                    let identity =
                        Identity::parse(uris[0]).unwrap_or_else(|e| panic!("{origin}: {e}"));
                    identity_cluster = Some((origin.clone(), identity.cluster.to_string()));
                    trust_domain = Some(identity.trust_domain.clone());
                    let usages: BTreeSet<&str> = spec
                        .get("usages")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                        .filter_map(Value::as_str)
                        .collect();
                    for usage in ["server auth", "client auth"] {
                        assert!(usages.contains(usage), "{origin}: usages lack {usage:?}");
                    }
                    assert_eq!(
                        string_at(spec, &["privateKey", "algorithm"]),
                        Some("ECDSA"),
                        "{origin}: privateKey.algorithm"
                    );
                    assert_eq!(
                        spec.get("privateKey")
                            .and_then(|k| k.get("size"))
                            .and_then(Value::as_u64),
                        Some(256),
                        "{origin}: privateKey.size"
                    );
                    assert_eq!(
                        string_at(spec, &["issuerRef", "kind"]),
                        Some("Issuer"),
                        "{origin}: issuerRef.kind: a namespaced Issuer, never a ClusterIssuer any namespace may use"
                    );
                    gateway_issuer = string_at(spec, &["issuerRef", "name"]).map(str::to_owned);
                }
                ("about.k8s.io/v1alpha1" | "about.k8s.io/v1beta1", "ClusterProperty") => {
                    let value = string_at(&value, &["spec", "value"])
                        .unwrap_or_else(|| panic!("{origin}: no spec.value"));
                    properties.insert(name.to_owned(), (origin.clone(), value.to_owned()));
                }
                ("v1", "ConfigMap") => {
                    assert_eq!(
                        (name, string_at(&value, &["metadata", "namespace"])),
                        ("coredns", Some("kube-system")),
                        "{origin}: the only ConfigMap example is CoreDNS's"
                    );
                    let corefile = string_at(&value, &["data", "Corefile"])
                        .unwrap_or_else(|| panic!("{origin}: no data.Corefile"));
                    check_corefile(&origin, corefile, &settings.dns.zone);
                    corefiles += 1;
                }
                ("kustomize.config.k8s.io/v1alpha1", "Component") => {
                    let dir = path.parent().expect("a file has a folder");
                    for patch in value
                        .get("patches")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                    {
                        let file = string_at(patch, &["path"])
                            .unwrap_or_else(|| panic!("{origin}: a patch without a path"));
                        assert!(
                            dir.join(file).is_file(),
                            "{origin}: patch {file} is not beside it"
                        );
                    }
                }
                _ => panic!("{origin}: unknown kind {api_version}/{kind} in the examples"),
            }
        }
    }
    let property = |name: &str| {
        properties
            .get(name)
            .unwrap_or_else(|| panic!("deploy/examples: no ClusterProperty {name}"))
    };
    let (origin, cluster) = property("cluster.clusterset.k8s.io");
    // gateway.yaml names the cluster only without the Kubernetes source.
    if let Some(configured) = &settings.cluster {
        assert_eq!(
            cluster, configured,
            "{origin}: differs from gateway.yaml's `cluster` ({})",
            config_map.origin
        );
    }
    let (certificate, identity) =
        identity_cluster.unwrap_or_else(|| panic!("deploy/examples: no Certificate"));
    assert_eq!(
        &identity, cluster,
        "{certificate}: the identity's cluster differs from the example ClusterProperty cluster.clusterset.k8s.io ({origin})"
    );
    // The gateway certificate's Issuer is the cluster's own CA, which names
    // the same cluster.
    let (ca_origin, ca_identity, ca_secret) =
        ca_certificate.unwrap_or_else(|| panic!("deploy/examples: no CA Certificate"));
    assert_eq!(
        ca_identity.cluster.as_str(),
        identity,
        "{ca_origin}: the CA must name the cluster it issues for"
    );
    let issuer = gateway_issuer.expect("checked above");
    assert_eq!(
        issuers.get(&issuer),
        Some(&Some(ca_secret)),
        "{certificate}: its Issuer {issuer} must be a CA Issuer of the cluster's CA"
    );
    let (origin, value) = property("clusterset.k8s.io");
    assert_eq!(
        Some(value),
        trust_domain.as_ref(),
        "{origin}: differs from the trust domain of the Certificate's identity"
    );
    property(&settings.network_property);

    let snippet = deploy_dir().join("examples/coredns/clusterset.server");
    let text = std::fs::read_to_string(&snippet)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", snippet.display()));
    check_corefile(
        "deploy/examples/coredns/clusterset.server",
        &text,
        &settings.dns.zone,
    );
    assert!(corefiles > 0, "deploy/examples: no CoreDNS ConfigMap patch");
}

/// What CoreDNS's `forward` names: the ClusterIP of cluster-edge-dns,
/// filled in by the operator (forward takes addresses only).
const DNS_SERVICE_PLACEHOLDER: &str = "CLUSTER_EDGE_DNS_IP";

/// A Corefile holds a server block for `zone` on port 53 whose `forward`
/// goes to the cluster-edge-dns Service on the port that Service offers.
fn check_corefile(origin: &str, corefile: &str, zone: &str) {
    let header = format!("{}:53 {{", zone.trim_end_matches('.'));
    let mut lines = corefile.lines().skip_while(|l| l.trim() != header);
    assert!(
        lines.next().is_some(),
        "{origin}: no server block `{header}` for the zone gateway.yaml answers"
    );
    // Up to the block's own closing brace, past those of nested blocks
    // (`cache 5 { … }`).
    let mut depth = 1usize;
    let block: Vec<&str> = lines
        .take_while(|l| {
            depth += l.matches('{').count();
            depth = depth.saturating_sub(l.matches('}').count());
            depth > 0
        })
        .collect();
    let target = block
        .iter()
        .find_map(|l| l.trim().strip_prefix("forward . "))
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("{origin}: the {zone} block has no `forward .`"));
    let (host, port) = target.rsplit_once(':').unwrap_or((target, "53"));
    assert_eq!(
        host, DNS_SERVICE_PLACEHOLDER,
        "{origin}: forward to the cluster-edge-dns ClusterIP"
    );
    let service = crate::manifests::manifests()
        .services
        .iter()
        .find(|s| s.object.metadata.name.as_deref() == Some("cluster-edge-dns"))
        .and_then(|s| s.object.spec.as_ref())
        .expect("deploy/ has cluster-edge-dns");
    let offered: Vec<String> = service
        .ports
        .iter()
        .flatten()
        .map(|p| p.port.to_string())
        .collect();
    assert!(
        offered.iter().any(|p| p == port),
        "{origin}: forwards to port {port}; cluster-edge-dns offers {offered:?}"
    );
}
