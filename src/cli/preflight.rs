//! Reading what [`installation`](super::installation)'s checks judge, from
//! the local cluster's API server with the caller's kubeconfig: a read
//! that fails (no right, a timeout) is a ⚠ naming it, never a crash.

use std::time::SystemTime;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::{Client, Resource};
use serde::de::DeserializeOwned;

use super::installation::{
    Check, INSTALL_RIGHTS, Outcome, coredns_check, crd_check, deployment_check, lease_check,
    load_balancer_check, properties_check, rights_check, tls_checks, version_check,
};
use crate::config::GatewaySettings;

/// The Lease whose holder writes export status and plans the imports.
use crate::controller::LEASE_NAME as LEASE;
const TLS_SECRET: &str = "cluster-edge-tls";
const DNS_SERVICE: &str = "cluster-edge-dns";
const DEPLOYMENT: &str = "cluster-edge";
/// How long the gateway's view may take to arrive.
const VIEW_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// An object, `None` when it does not exist, or a ⚠ saying it could not be read.
async fn read<K>(api: Api<K>, name: &str, what: &str) -> Result<Option<K>, Check>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    api.get_opt(name).await.map_err(|e| Check {
        group: "access",
        outcome: Outcome::Warning,
        message: format!("could not read {what}: {e}"),
        hint: None,
        docs: None,
    })
}

/// The CRDs Strait reads and writes: installed, their mcs-api release,
/// and whether the ServiceImport schema holds the fields Strait writes.
pub(super) async fn crd_checks(client: &Client) -> Vec<Check> {
    let mut checks = Vec::new();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for (name, mcs) in [
        ("serviceexports.multicluster.x-k8s.io", true),
        ("serviceimports.multicluster.x-k8s.io", true),
        ("clusterproperties.about.k8s.io", false),
    ] {
        match read(crds.clone(), name, &format!("CRD {name}")).await {
            Ok(found) => {
                let release = found.as_ref().map(|crd| {
                    crd.metadata
                        .labels
                        .as_ref()
                        .and_then(|l| l.get("multicluster.x-k8s.io/release-version"))
                        .map(String::as_str)
                });
                let slice_objects = found
                    .as_ref()
                    .filter(|_| name.starts_with("serviceimports."))
                    .map(serves_slice_objects);
                checks.push(crd_check(name, release, mcs, slice_objects));
            }
            Err(check) => checks.push(check),
        }
    }
    checks
}

/// Whether a served version of the ServiceImport CRD has
/// `status.endpointSliceObjects` in its schema.
fn serves_slice_objects(crd: &CustomResourceDefinition) -> bool {
    crd.spec
        .versions
        .iter()
        .filter(|v| v.served)
        .any(|version| {
            version
                .schema
                .as_ref()
                .and_then(|s| s.open_api_v3_schema.as_ref())
                .and_then(|root| root.properties.as_ref()?.get("status"))
                .and_then(|status| status.properties.as_ref())
                .is_some_and(|fields| fields.contains_key("endpointSliceObjects"))
        })
}

/// The checks before an install: the API server, the CRDs, the cluster's
/// ClusterProperties and CoreDNS.
pub(super) async fn before_install(client: &Client, settings: &GatewaySettings) -> Vec<Check> {
    let mut checks = Vec::new();
    match client.apiserver_version().await {
        Ok(info) => checks.push(version_check(&info.major, &info.minor)),
        Err(e) => checks.push(Check {
            group: "kubernetes",
            outcome: Outcome::Failed,
            message: format!("the API server did not answer /version: {e}"),
            hint: Some("check the kubeconfig and the context".to_owned()),
            docs: None,
        }),
    }
    checks.extend(crd_checks(client).await);
    let id = property(client, "cluster.clusterset.k8s.io").await;
    let clusterset = property(client, "clusterset.k8s.io").await;
    let network = property(client, &settings.network_property).await;
    checks.extend(properties_check(
        id.as_deref(),
        clusterset.as_deref(),
        network
            .as_deref()
            .map(|value| (settings.network_property.as_str(), value)),
    ));
    checks.push(install_rights(client).await);
    match Api::<Service>::all(client.clone())
        .list(&ListParams::default())
        .await
    {
        Ok(services) => {
            let balanced: Vec<bool> = services
                .items
                .iter()
                .filter(|s| {
                    s.spec.as_ref().and_then(|s| s.type_.as_deref()) == Some("LoadBalancer")
                })
                .map(|s| !load_balancer_addresses(s).is_empty())
                .collect();
            let addressed = balanced.iter().filter(|b| **b).count();
            checks.push(load_balancer_check(
                None,
                (addressed, balanced.len() - addressed),
            ));
        }
        Err(e) => checks.push(Check {
            group: "access",
            outcome: Outcome::Warning,
            message: format!(
                "could not list Services, so the LoadBalancer implementation is not checked: {e}"
            ),
            hint: None,
            docs: None,
        }),
    }
    checks
}

/// Whether the caller may create what an install makes: one
/// SelfSubjectAccessReview per kind (what `kubectl auth can-i` asks).
async fn install_rights(client: &Client) -> Check {
    let reviews: Api<SelfSubjectAccessReview> = Api::all(client.clone());
    let mut denied = Vec::new();
    for (verb, group, resource, namespace) in INSTALL_RIGHTS {
        let review = SelfSubjectAccessReview {
            spec: SelfSubjectAccessReviewSpec {
                resource_attributes: Some(ResourceAttributes {
                    verb: Some((*verb).to_owned()),
                    group: Some((*group).to_owned()),
                    resource: Some((*resource).to_owned()),
                    namespace: namespace.map(str::to_owned),
                    ..ResourceAttributes::default()
                }),
                ..SelfSubjectAccessReviewSpec::default()
            },
            ..SelfSubjectAccessReview::default()
        };
        let allowed = match reviews.create(&PostParams::default(), &review).await {
            Ok(answer) => answer.status.is_some_and(|s| s.allowed),
            Err(e) => {
                return Check {
                    group: "access",
                    outcome: Outcome::Warning,
                    message: format!(
                        "could not ask whether you may install (SelfSubjectAccessReview): {e}"
                    ),
                    hint: None,
                    docs: None,
                };
            }
        };
        if !allowed {
            let group = if group.is_empty() { "core" } else { group };
            denied.push(match namespace {
                Some(namespace) => format!("{resource} ({group}) in {namespace}"),
                None => format!("{resource} ({group})"),
            });
        }
    }
    rights_check(&denied)
}

/// A Service's load-balancer addresses (IPs or host names).
fn load_balancer_addresses(service: &Service) -> Vec<String> {
    service
        .status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|ingress| ingress.ip.clone().or_else(|| ingress.hostname.clone()))
        .collect()
}

/// A ClusterProperty's value, under either version the About API serves.
async fn property(client: &Client, name: &str) -> Option<String> {
    for version in ["v1beta1", "v1alpha1"] {
        let resource = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("about.k8s.io", version, "ClusterProperty"),
            "clusterproperties",
        );
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
        if let Ok(Some(object)) = api.get_opt(name).await {
            return object.data["spec"]["value"].as_str().map(str::to_owned);
        }
    }
    None
}

/// The checks of an installed Strait (`strait-system/cluster-edge`
/// exists): the Deployment, the Lease, the TLS Secret, CoreDNS against
/// `cluster-edge-dns`. Before an install, CoreDNS alone, and a ⚠ saying
/// Strait is not installed.
pub(super) async fn installed(
    client: &Client,
    settings: &GatewaySettings,
    cluster: Option<&str>,
    crds: bool,
) -> Vec<Check> {
    let namespace = settings.gateway_namespace.as_str();
    let mut checks = Vec::new();
    let corefile = match read(
        Api::<ConfigMap>::namespaced(client.clone(), "kube-system"),
        "coredns",
        "ConfigMap kube-system/coredns",
    )
    .await
    {
        Ok(map) => map
            .and_then(|m| m.data)
            .and_then(|mut d| d.remove("Corefile")),
        Err(check) => {
            checks.push(check);
            None
        }
    };
    let deployment = match read(
        Api::<Deployment>::namespaced(client.clone(), namespace),
        DEPLOYMENT,
        "the gateway Deployment",
    )
    .await
    {
        Ok(deployment) => deployment,
        Err(check) => {
            checks.push(check);
            None
        }
    };
    let Some(deployment) = deployment else {
        checks.push(coredns_check(corefile.as_deref(), None));
        checks.push(Check {
            group: "gateway",
            outcome: Outcome::Warning,
            message: format!("Strait is not installed: no Deployment {namespace}/{DEPLOYMENT}"),
            hint: Some("helm install, or kubectl apply -k deploy/".to_owned()),
            docs: Some("docs/kubernetes.md#the-short-path-helm"),
        });
        return checks;
    };
    // Installed: the CRDs the running code needs (`--pre` checked them
    // already, before this).
    if crds {
        checks.extend(crd_checks(client).await);
    }
    let wanted = deployment
        .spec
        .as_ref()
        .and_then(|s| s.replicas)
        .unwrap_or(1);
    let available = deployment
        .status
        .as_ref()
        .and_then(|s| s.available_replicas)
        .unwrap_or(0);
    checks.push(deployment_check(wanted, available));
    match read(
        Api::<Lease>::namespaced(client.clone(), namespace),
        LEASE,
        "the Lease",
    )
    .await
    {
        Ok(lease) => {
            let spec = lease.and_then(|l| l.spec);
            let holder = spec.as_ref().and_then(|s| s.holder_identity.clone());
            let renewed = spec
                .as_ref()
                .and_then(|s| s.renew_time.as_ref())
                .map(|t| SystemTime::from(t.0));
            checks.push(lease_check(holder.as_deref(), renewed, SystemTime::now()));
        }
        Err(check) => checks.push(check),
    }
    let dns_ip = match read(
        Api::<Service>::namespaced(client.clone(), namespace),
        DNS_SERVICE,
        "the DNS Service",
    )
    .await
    {
        Ok(service) => service
            .and_then(|s| s.spec)
            .and_then(|s| s.cluster_ip)
            .filter(|ip| ip != "None"),
        Err(check) => {
            checks.push(check);
            None
        }
    };
    checks.push(coredns_check(corefile.as_deref(), dns_ip.as_deref()));
    match read(
        Api::<Service>::namespaced(client.clone(), namespace),
        DEPLOYMENT,
        "the gateway Service",
    )
    .await
    {
        Ok(Some(service)) => {
            let addresses = load_balancer_addresses(&service);
            checks.push(load_balancer_check(Some(&addresses), (0, 0)));
        }
        Ok(None) => {}
        Err(check) => checks.push(check),
    }
    match (
        read(
            Api::<Secret>::namespaced(client.clone(), namespace),
            TLS_SECRET,
            "the gateway's TLS Secret",
        )
        .await,
        cluster,
    ) {
        (Ok(Some(secret)), Some(cluster)) => {
            let data = secret.data.unwrap_or_default();
            let bytes = |key: &str| data.get(key).map(|b| b.0.clone()).unwrap_or_default();
            checks.extend(tls_checks(
                cluster,
                &bytes("tls.crt"),
                &bytes("ca.crt"),
                SystemTime::now(),
            ));
        }
        (Ok(None), _) => checks.push(Check {
            group: "tls",
            outcome: Outcome::Failed,
            message: format!("no Secret {namespace}/{TLS_SECRET}: the gateway pods cannot start"),
            hint: Some("create it from strait certs' output, or use cert-manager".to_owned()),
            docs: Some("docs/kubernetes.md#4-issue-the-gateway-certificates"),
        }),
        (Ok(Some(_)), None) => {}
        (Err(check), _) => checks.push(check),
    }
    if available > 0 {
        checks.extend(gateway_view_checks(client, settings).await);
    }
    checks
}

/// The checks of the gateway's own view: read from a ready gateway pod's
/// `/debug/status` through the API server's port-forward.
async fn gateway_view_checks(client: &Client, settings: &GatewaySettings) -> Vec<Check> {
    let namespace = settings.gateway_namespace.as_str();
    let port = settings.listeners.admin.port();
    let view = match super::forward::gateway_pod(client, namespace).await {
        Ok(pod) => {
            super::forward::get_json(client, namespace, &pod, port, "/debug/status", VIEW_TIMEOUT)
                .await
        }
        Err(e) => Err(e),
    };
    match view {
        Ok(view) => super::linked::view_checks(&view),
        Err(e) => vec![Check {
            group: "access",
            outcome: Outcome::Warning,
            message: format!(
                "could not read the gateway's view, so the links, tunnels and import ports are not checked: {e}"
            ),
            hint: Some(format!(
                "the checks need create on pods/portforward in {namespace} (as kubectl port-forward does)"
            )),
            docs: Some("docs/kubernetes.md#10-verify-the-tunnel"),
        }],
    }
}
