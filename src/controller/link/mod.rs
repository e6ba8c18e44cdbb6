//! `strait link` and `strait unlink`: giving a gateway read access to a
//! remote cluster. In the remote cluster, a ServiceAccount, a ClusterRole
//! with exactly the verbs the source needs there (list and watch of
//! ClusterProperties, ServiceExports, Services and EndpointSlices), its
//! binding and the anchor Secret its bound, expiring token is tied to
//! ([`token`]); in the local cluster, the labelled remote-cluster Secret
//! whose inline kubeconfig holds that token. Every write is a server-side
//! apply by the field manager `strait-link`, and a token is kept while
//! more than half of its life is left, so linking again changes nothing.
//!
//! The objects are built by pure functions ([`remote_objects`],
//! [`kubeconfig_for`], [`local_secret`]); the rest is thin I/O.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use data_encoding::BASE64;
use k8s_openapi::api::core::v1::{Namespace, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use serde_json::{Value, json};

use crate::discovery::kube::client::{ClusterSource, Kind, Resources, discover};
use crate::discovery::kube::connect::build_client;
use crate::discovery::kube::kubeconfig::{UnsafeKubeconfig, check_secret_kubeconfig};
use crate::discovery::kube::{
    AccessScope, KubeError, REMOTE_CLUSTER_LABEL, REMOTE_KUBECONFIG_KEY, WATCH_VERBS,
    WATCHED_RESOURCES,
};
use crate::model::names::{ALT_CLUSTER_ID_PROPERTY, CLUSTER_ID_PROPERTY};

pub mod token;

pub use token::{Credential, MIN_TOKEN_LIFETIME, TokenKind, retire_legacy_token};

/// The field manager of every write `strait link` makes.
pub const LINK_FIELD_MANAGER: &str = "strait-link";
/// The start of a reader's name in the remote cluster: each linking
/// cluster has its own (`strait-remote-reader-<its id>`: ServiceAccount,
/// ClusterRole and binding; the anchor Secret adds `-anchor`), so that one
/// cluster's unlink or token rotation leaves the others' access alone.
pub const READER_PREFIX: &str = "strait-remote-reader";

/// The reader of the linking cluster `local_id` in a remote cluster.
pub fn reader_name(local_id: &str) -> String {
    format!("{READER_PREFIX}-{local_id}")
}
/// The watch timeout of the clients `link` builds (only their read
/// timeout follows from it).
const CLIENT_WATCH_TIMEOUT: Duration = Duration::from_secs(20);

/// What to link and where.
#[derive(Debug, Clone)]
pub struct LinkOptions {
    /// The remote cluster's kubeconfig, with rights to create the reader.
    pub remote_kubeconfig: PathBuf,
    /// Its context (default: the current one).
    pub context: Option<String>,
    /// The local Secret's name (default: the remote cluster's id).
    pub name: Option<String>,
    /// Where the reader lives in the remote cluster.
    pub remote_namespace: String,
    /// Where the remote-cluster Secret goes in the local cluster.
    pub local_namespace: String,
    /// The reader's name in the remote cluster ([`reader_name`] of the
    /// local cluster's id).
    pub reader: String,
    /// How long a token minted now lasts (the server may cap it).
    pub token_lifetime: Duration,
}

/// Why linking or unlinking failed.
#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    #[error("cannot read kubeconfig {}: {source}", path.display())]
    Kubeconfig {
        path: PathBuf,
        source: kube::config::KubeconfigError,
    },
    #[error("kubeconfig {}: {what}", path.display())]
    Unusable { path: PathBuf, what: String },
    #[error("cannot build a client for {what}: {source}")]
    Client { what: String, source: kube::Error },
    #[error(
        "the remote cluster ({server}) lacks the CRDs of {}: apply deploy/crds/ there first (docs/kubernetes.md, step 2)",
        kinds.join(", ")
    )]
    MissingCrds { server: String, kinds: Vec<String> },
    #[error(
        "not allowed to {action} in {cluster}: {message} (linking needs rights to create ServiceAccounts and their tokens, Secrets, ClusterRoles and ClusterRoleBindings there; unlinking to delete them)"
    )]
    Forbidden {
        action: String,
        cluster: String,
        message: String,
    },
    #[error("cannot {action} in {cluster}: {source}")]
    Api {
        action: String,
        cluster: String,
        source: kube::Error,
    },
    #[error(
        "the remote cluster did not fill in the token of Secret {namespace}/{name} within {}: is its token controller running?",
        humantime::format_duration(*waited)
    )]
    NoToken {
        namespace: String,
        name: String,
        waited: Duration,
    },
    #[error("{cluster} answered a TokenRequest for ServiceAccount {account} without a token")]
    NoIssuedToken { cluster: String, account: String },
    #[error(
        "the remote cluster has no {CLUSTER_ID_PROPERTY} (nor {ALT_CLUSTER_ID_PROPERTY}) ClusterProperty to name it by: pass --name"
    )]
    NoName,
    #[error(
        "the local cluster has no {CLUSTER_ID_PROPERTY} (nor {ALT_CLUSTER_ID_PROPERTY}) ClusterProperty to name its reader in the remote cluster by: pass --local-cluster"
    )]
    NoLocalName,
    #[error(
        "{name:?} cannot name a linked cluster: {reason} (a cluster id is an RFC-1123 DNS subdomain of at most 63 characters; pass --name)"
    )]
    BadName { name: String, reason: String },
    #[error(
        "Secret {namespace}/{name} already links {existing}, not {server}: it belongs to another link; unlink that one first or pass another --name"
    )]
    Taken {
        namespace: String,
        name: String,
        existing: String,
        server: String,
    },
    #[error("the kubeconfig this link would write is one the gateway refuses: {0}")]
    Unsafe(#[from] UnsafeKubeconfig),
}

/// The outcome of `link`: the local Secret to create.
#[derive(Debug, Clone)]
pub struct Linked {
    pub name: String,
    pub server: String,
    /// The remote-cluster Secret, as an object for the local cluster.
    pub secret: Value,
    /// When its token expires (`None`: a legacy token, never).
    pub expires: Option<std::time::SystemTime>,
    pub token: TokenKind,
}

/// The resources a remote cluster's reader may list and watch: those the
/// source watches in every cluster of the set (no ServiceImports: they are
/// read in the local cluster only).
fn reader_rules() -> Vec<Value> {
    let mut by_group: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for access in WATCHED_RESOURCES {
        if access.scope == AccessScope::Cluster
            && access.verbs == WATCH_VERBS
            && access.resource != Kind::ServiceImport.resource()
        {
            by_group
                .entry(access.group)
                .or_default()
                .push(access.resource);
        }
    }
    by_group
        .into_iter()
        .map(|(group, resources)| {
            json!({"apiGroups": [group], "resources": resources, "verbs": WATCH_VERBS})
        })
        .collect()
}

pub(crate) fn labels() -> Value {
    json!({"app.kubernetes.io/part-of": "strait", "app.kubernetes.io/managed-by": LINK_FIELD_MANAGER})
}

/// The objects `link` applies in the remote cluster, in order: the
/// namespace, the ServiceAccount, the ClusterRole, its binding and the
/// anchor Secret its tokens are bound to.
pub fn remote_objects(namespace: &str, reader: &str) -> Vec<Value> {
    vec![
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}),
        json!({"apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": reader, "namespace": namespace, "labels": labels()}}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": reader, "labels": labels()},
            "rules": reader_rules()}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": reader, "labels": labels()},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": reader},
            "subjects": [{"kind": "ServiceAccount", "name": reader, "namespace": namespace}]}),
        token::anchor_secret(namespace, reader),
    ]
}

/// Where the remote API server is and how to trust it, from the chosen
/// context of its kubeconfig.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteServer {
    pub server: String,
    /// PEM, base64 as kubeconfigs hold it.
    pub certificate_authority_data: Option<String>,
    pub tls_server_name: Option<String>,
    pub insecure_skip_tls_verify: bool,
}

/// A kubeconfig that reaches `server` with `token`, nothing else in it.
pub fn kubeconfig_for(name: &str, reader: &str, server: &RemoteServer, token: &str) -> Value {
    let mut cluster = json!({"server": server.server});
    if let Some(ca) = &server.certificate_authority_data {
        cluster["certificate-authority-data"] = ca.clone().into();
    }
    if let Some(tls_name) = &server.tls_server_name {
        cluster["tls-server-name"] = tls_name.clone().into();
    }
    if server.insecure_skip_tls_verify {
        cluster["insecure-skip-tls-verify"] = true.into();
    }
    json!({"apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": name, "cluster": cluster}],
        "users": [{"name": reader, "user": {"token": token}}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": reader}}],
        "current-context": name})
}

/// The labelled remote-cluster Secret for the local cluster.
pub fn local_secret(name: &str, namespace: &str, kubeconfig: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
        "metadata": {"name": name, "namespace": namespace,
            "labels": {REMOTE_CLUSTER_LABEL: "true", "app.kubernetes.io/part-of": "strait",
                "app.kubernetes.io/managed-by": LINK_FIELD_MANAGER}},
        "stringData": {REMOTE_KUBECONFIG_KEY: kubeconfig}})
}

/// A remote cluster, connected to once per command.
pub struct Remote {
    server: RemoteServer,
    client: Client,
    /// How messages name it: `the remote cluster (https://…)`.
    label: String,
}

impl Remote {
    /// The client of the remote cluster.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Reads the kubeconfig's chosen context and builds a client for it.
    pub async fn connect(options: &LinkOptions) -> Result<Remote, LinkError> {
        let path = &options.remote_kubeconfig;
        let kubeconfig = Kubeconfig::read_from(path).map_err(|source| LinkError::Kubeconfig {
            path: path.clone(),
            source,
        })?;
        let server = remote_server(&kubeconfig, options.context.as_deref(), path)?;
        let config_options = KubeConfigOptions {
            context: options.context.clone(),
            ..KubeConfigOptions::default()
        };
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &config_options)
            .await
            .map_err(|source| LinkError::Kubeconfig {
                path: path.clone(),
                source,
            })?;
        let client =
            build_client(config, CLIENT_WATCH_TIMEOUT).map_err(|source| LinkError::Client {
                what: path.display().to_string(),
                source,
            })?;
        let label = format!("the remote cluster ({})", server.server);
        Ok(Remote {
            server,
            client,
            label,
        })
    }

    /// The APIs it serves, refusing a cluster without the CRDs the gateway
    /// reads there.
    async fn resources(&self, options: &LinkOptions) -> Result<Resources, LinkError> {
        let source = ClusterSource::Kubeconfig(options.remote_kubeconfig.clone());
        let resources = discover(&self.client, &source)
            .await
            .map_err(|source| api_error("discover the APIs".to_owned(), &self.label, source))?;
        if !resources.missing.is_empty() {
            return Err(LinkError::MissingCrds {
                server: self.server.server.clone(),
                kinds: resources
                    .missing
                    .iter()
                    .map(|k| k.name().to_owned())
                    .collect(),
            });
        }
        Ok(resources)
    }

    /// Checks, reading only, that the remote server serves what a link
    /// needs (the MCS CRDs): what a dry run can tell before anything is
    /// made.
    pub async fn check(&self, options: &LinkOptions) -> Result<(), LinkError> {
        self.resources(options).await.map(drop)
    }

    /// The local Secret's name: `--name`, else the cluster's id (its
    /// `cluster.clusterset.k8s.io` ClusterProperty).
    pub async fn name(&self, options: &LinkOptions) -> Result<String, LinkError> {
        if let Some(name) = &options.name {
            return Ok(name.clone());
        }
        let resources = self.resources(options).await?;
        self.id(&resources).await
    }

    /// The cluster's id: its `cluster.clusterset.k8s.io` ClusterProperty,
    /// else its `id.k8s.io` one.
    async fn id(&self, resources: &Resources) -> Result<String, LinkError> {
        let (_, resource) = resources
            .served
            .iter()
            .find(|(kind, _)| *kind == Kind::ClusterProperty)
            .ok_or(LinkError::NoName)?;
        let api: Api<kube::api::DynamicObject> = Api::all_with(self.client.clone(), resource);
        for name in [CLUSTER_ID_PROPERTY, ALT_CLUSTER_ID_PROPERTY] {
            let property = api.get_opt(name).await.map_err(|source| {
                api_error(format!("read ClusterProperty {name}"), &self.label, source)
            })?;
            if let Some(value) = property
                .as_ref()
                .and_then(|p| p.data["spec"]["value"].as_str())
            {
                return Ok(value.to_owned());
            }
        }
        Err(LinkError::NoName)
    }
}

/// The server entry of `context` (default: the current one).
fn remote_server(
    kubeconfig: &Kubeconfig,
    context: Option<&str>,
    path: &Path,
) -> Result<RemoteServer, LinkError> {
    let unusable = |what: String| LinkError::Unusable {
        path: path.to_owned(),
        what,
    };
    let wanted = context
        .map(str::to_owned)
        .or_else(|| kubeconfig.current_context.clone())
        .ok_or_else(|| unusable("no context chosen and no current-context".to_owned()))?;
    let cluster_name = kubeconfig
        .contexts
        .iter()
        .find(|c| c.name == wanted)
        .and_then(|c| c.context.as_ref())
        .map(|c| c.cluster.clone())
        .ok_or_else(|| unusable(format!("no context {wanted:?}")))?;
    let cluster = kubeconfig
        .clusters
        .iter()
        .find(|c| c.name == cluster_name)
        .and_then(|c| c.cluster.as_ref())
        .ok_or_else(|| unusable(format!("no cluster {cluster_name:?} (context {wanted:?})")))?;
    let server = cluster
        .server
        .clone()
        .ok_or_else(|| unusable(format!("cluster {cluster_name:?} has no server")))?;
    // The Secret must stand alone: a CA file becomes inline data.
    let certificate_authority_data = match (
        &cluster.certificate_authority_data,
        &cluster.certificate_authority,
    ) {
        (Some(data), _) => Some(data.clone()),
        (None, Some(file)) => {
            let pem = std::fs::read(file).map_err(|error| {
                unusable(format!("cannot read certificate-authority {file}: {error}"))
            })?;
            Some(BASE64.encode(&pem))
        }
        (None, None) => None,
    };
    Ok(RemoteServer {
        server,
        certificate_authority_data,
        tls_server_name: cluster.tls_server_name.clone(),
        insecure_skip_tls_verify: cluster.insecure_skip_tls_verify.unwrap_or(false),
    })
}

pub(crate) fn api_error(action: String, cluster: &str, source: kube::Error) -> LinkError {
    match source {
        kube::Error::Api(status) if status.code == 403 => LinkError::Forbidden {
            action,
            cluster: cluster.to_owned(),
            message: status.message,
        },
        source => LinkError::Api {
            action,
            cluster: cluster.to_owned(),
            source,
        },
    }
}

/// Applies `object` (a Namespace, ServiceAccount, ClusterRole,
/// ClusterRoleBinding or Secret) with the link's field manager.
pub(crate) async fn apply(client: &Client, object: &Value, cluster: &str) -> Result<(), LinkError> {
    let kind = object["kind"].as_str().unwrap_or_default();
    let name = object["metadata"]["name"].as_str().unwrap_or_default();
    let namespace = object["metadata"]["namespace"].as_str().unwrap_or_default();
    let params = PatchParams::apply(LINK_FIELD_MANAGER).force();
    let patch = Patch::Apply(object);
    let action = || format!("apply {kind} {name}");
    let result = match kind {
        "Namespace" => {
            let namespaces = Api::<Namespace>::all(client.clone());
            // One that exists is left alone: creating it may be allowed
            // where patching an existing one is not.
            match namespaces.get_opt(name).await {
                Ok(Some(_)) => Ok(()),
                _ => namespaces.patch(name, &params, &patch).await.map(drop),
            }
        }
        "ServiceAccount" => Api::<ServiceAccount>::namespaced(client.clone(), namespace)
            .patch(name, &params, &patch)
            .await
            .map(drop),
        "ClusterRole" => Api::<ClusterRole>::all(client.clone())
            .patch(name, &params, &patch)
            .await
            .map(drop),
        "ClusterRoleBinding" => Api::<ClusterRoleBinding>::all(client.clone())
            .patch(name, &params, &patch)
            .await
            .map(drop),
        _ => Api::<Secret>::namespaced(client.clone(), namespace)
            .patch(name, &params, &patch)
            .await
            .map(drop),
    };
    result.map_err(|source| api_error(action(), cluster, source))
}

/// Creates the reader in the remote cluster and returns the local Secret
/// that lets a gateway read it. With the local cluster at hand, a token
/// its Secret already holds for this link is kept while it may be.
pub async fn link(
    remote: &Remote,
    options: &LinkOptions,
    local: Option<&Client>,
) -> Result<Linked, LinkError> {
    let resources = remote.resources(options).await?;
    let name = match &options.name {
        Some(name) => name.clone(),
        None => remote.id(&resources).await?,
    };
    // The remote's own ClusterProperty is its word: it names a local
    // Secret only as a cluster id, never as anything else.
    crate::model::ClusterId::new(&name)
        .map_err(|error| error.to_string())
        .and_then(|_| crate::model::check_dns_subdomain(&name, 63).map_err(|e| e.to_string()))
        .map_err(|reason| LinkError::BadName {
            name: name.clone(),
            reason,
        })?;
    let (client, cluster) = (&remote.client, remote.label.as_str());
    for object in remote_objects(&options.remote_namespace, &options.reader) {
        apply(client, &object, cluster).await?;
    }
    let held = match local {
        Some(local) => {
            token::held_token(local, &options.local_namespace, &name, &remote.server).await?
        }
        None => None,
    };
    let credential = token::credential(
        client,
        &options.remote_namespace,
        &options.reader,
        options.token_lifetime,
        held.as_deref(),
        cluster,
    )
    .await?;
    let server = RemoteServer {
        // The CA the cluster publishes with the token, else the kubeconfig's.
        certificate_authority_data: credential
            .ca
            .clone()
            .or_else(|| remote.server.certificate_authority_data.clone()),
        ..remote.server.clone()
    };
    let kubeconfig = crate::discovery::yaml::to_string(&kubeconfig_for(
        &name,
        &options.reader,
        &server,
        &credential.token,
    ))
    .map_err(|error| LinkError::Unusable {
        path: options.remote_kubeconfig.clone(),
        what: format!("cannot write the kubeconfig: {error}"),
    })?;
    // Refused here rather than by every gateway that reads the Secret.
    let written = Kubeconfig::from_yaml(&kubeconfig).map_err(|source| LinkError::Kubeconfig {
        path: options.remote_kubeconfig.clone(),
        source,
    })?;
    check_secret_kubeconfig(&written)?;
    Ok(Linked {
        secret: local_secret(&name, &options.local_namespace, &kubeconfig),
        server: server.server,
        name,
        expires: credential.expires,
        token: credential.kind,
    })
}

/// Creates (or updates) the remote-cluster Secret in the local cluster.
/// A Secret of that name that links another server, or that no link
/// wrote, is left alone: a remote cluster naming itself after another
/// must not take that cluster's place.
pub async fn apply_local(local: &Client, linked: &Linked) -> Result<(), LinkError> {
    let at = "the local cluster";
    let namespace = linked.secret["metadata"]["namespace"]
        .as_str()
        .unwrap_or_default();
    let secrets: Api<Secret> = Api::namespaced(local.clone(), namespace);
    let existing = secrets.get_opt(&linked.name).await.map_err(|source| {
        api_error(
            format!("read Secret {namespace}/{}", linked.name),
            at,
            source,
        )
    })?;
    if let Some(existing) = existing {
        let linked_server = linked_server(&existing);
        if linked_server.as_deref() != Some(linked.server.as_str()) {
            return Err(LinkError::Taken {
                namespace: namespace.to_owned(),
                name: linked.name.clone(),
                existing: linked_server.unwrap_or_else(|| "no server this link wrote".to_owned()),
                server: linked.server.clone(),
            });
        }
    }
    apply(local, &linked.secret, at).await
}

/// The server a Secret that `strait link` wrote links to; `None` for a
/// Secret no link wrote.
fn linked_server(secret: &Secret) -> Option<String> {
    linked_kubeconfig(secret)?
        .clusters
        .first()?
        .cluster
        .as_ref()?
        .server
        .clone()
}

/// The kubeconfig of a Secret that `strait link` wrote; `None` for a
/// Secret no link wrote.
fn linked_kubeconfig(secret: &Secret) -> Option<Kubeconfig> {
    let labels = secret.metadata.labels.as_ref()?;
    if labels
        .get("app.kubernetes.io/managed-by")
        .map(String::as_str)
        != Some(LINK_FIELD_MANAGER)
    {
        return None;
    }
    let text = secret.data.as_ref()?.get(REMOTE_KUBECONFIG_KEY)?;
    Kubeconfig::from_yaml(std::str::from_utf8(&text.0).ok()?).ok()
}

/// Deletes the reader from the remote cluster: its binding, role, anchor
/// (revoking every bound token), legacy token Secret and account (those
/// already gone are no error). The namespace stays.
pub async fn unlink_remote(remote: &Remote, options: &LinkOptions) -> Result<(), LinkError> {
    delete_reader(
        &remote.client,
        &remote.label,
        &options.remote_namespace,
        &options.reader,
    )
    .await
}

/// Deletes the reader `reader` (in `namespace`) from the cluster `client`
/// reaches (`at` names it in messages), as [`unlink_remote`] does.
pub async fn delete_reader(
    client: &Client,
    at: &str,
    namespace: &str,
    reader: &str,
) -> Result<(), LinkError> {
    delete(Api::<ClusterRoleBinding>::all(client.clone()), reader, at).await?;
    delete(Api::<ClusterRole>::all(client.clone()), reader, at).await?;
    let secrets = Api::<Secret>::namespaced(client.clone(), namespace);
    delete(secrets.clone(), &token::anchor_name(reader), at).await?;
    delete(secrets, &token::legacy_token_name(reader), at).await?;
    delete(
        Api::<ServiceAccount>::namespaced(client.clone(), namespace),
        reader,
        at,
    )
    .await
}

/// The local cluster's id, its `cluster.clusterset.k8s.io` ClusterProperty,
/// else its `id.k8s.io` one (About API `v1beta1`, else `v1alpha1`).
pub async fn local_id(local: &Client) -> Result<String, LinkError> {
    let at = "the local cluster";
    for version in ["v1beta1", "v1alpha1"] {
        let resource = kube::core::ApiResource::from_gvk_with_plural(
            &kube::core::GroupVersionKind::gvk("about.k8s.io", version, "ClusterProperty"),
            "clusterproperties",
        );
        let api: Api<kube::api::DynamicObject> = Api::all_with(local.clone(), &resource);
        let mut served = true;
        for name in [CLUSTER_ID_PROPERTY, ALT_CLUSTER_ID_PROPERTY] {
            match api.get_opt(name).await {
                Ok(Some(property)) => {
                    return property.data["spec"]["value"]
                        .as_str()
                        .map(str::to_owned)
                        .ok_or(LinkError::NoLocalName);
                }
                Ok(None) => {}
                // This version is not served: try the next.
                Err(kube::Error::Api(status)) if status.code == 404 => {
                    served = false;
                    break;
                }
                Err(source) => {
                    return Err(api_error(
                        format!("read ClusterProperty {name}"),
                        at,
                        source,
                    ));
                }
            }
        }
        if served {
            return Err(LinkError::NoLocalName);
        }
    }
    Err(LinkError::NoLocalName)
}

/// Deletes the remote-cluster Secret `name` from the local cluster.
pub async fn delete_local(local: &Client, namespace: &str, name: &str) -> Result<(), LinkError> {
    let secrets = Api::<Secret>::namespaced(local.clone(), namespace);
    delete(secrets, name, "the local cluster").await
}

/// Deletes one object; one already gone is no error.
async fn delete<K>(api: Api<K>, name: &str, cluster: &str) -> Result<(), LinkError>
where
    K: kube::Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(source) => Err(api_error(
            format!("delete {} {name}", K::kind(&())),
            cluster,
            source,
        )),
    }
}

/// A client for the local cluster: `path`, else as kubectl infers it.
pub async fn local_client(path: Option<&Path>) -> Result<Client, KubeError> {
    crate::discovery::kube::client::local_client(path, CLIENT_WATCH_TIMEOUT).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reader_may_list_and_watch_exactly_what_a_remote_cluster_is_read_for() {
        let objects = remote_objects("strait-system", &reader_name("c1"));
        let kinds: Vec<&str> = objects.iter().filter_map(|o| o["kind"].as_str()).collect();
        assert_eq!(
            kinds,
            [
                "Namespace",
                "ServiceAccount",
                "ClusterRole",
                "ClusterRoleBinding",
                "Secret"
            ]
        );
        let rules = &objects[2]["rules"];
        let mut granted: Vec<String> = Vec::new();
        for rule in rules.as_array().expect("rules") {
            assert_eq!(rule["verbs"], json!(["list", "watch"]), "{rule}");
            for resource in rule["resources"].as_array().expect("resources") {
                granted.push(format!(
                    "{}/{}",
                    rule["apiGroups"][0].as_str().unwrap_or("?"),
                    resource.as_str().unwrap_or("?")
                ));
            }
        }
        granted.sort();
        assert_eq!(
            granted,
            [
                "/services",
                "about.k8s.io/clusterproperties",
                "discovery.k8s.io/endpointslices",
                "multicluster.x-k8s.io/serviceexports"
            ]
        );
        assert_eq!(objects[3]["subjects"][0]["namespace"], "strait-system");
        assert_eq!(
            objects[4]["metadata"]["name"],
            "strait-remote-reader-c1-anchor"
        );
        assert_eq!(objects[4]["type"], "Opaque", "no legacy token is asked for");
    }

    #[test]
    fn the_kubeconfig_holds_only_the_server_and_the_token() {
        let server = RemoteServer {
            server: "https://203.0.113.9:6443".to_owned(),
            certificate_authority_data: Some("Q0E=".to_owned()),
            tls_server_name: None,
            insecure_skip_tls_verify: false,
        };
        let config = kubeconfig_for("c2", "strait-remote-reader-c1", &server, "t0ken");
        assert_eq!(
            config["clusters"][0]["cluster"]["server"],
            "https://203.0.113.9:6443"
        );
        assert_eq!(
            config["clusters"][0]["cluster"]["certificate-authority-data"],
            "Q0E="
        );
        assert_eq!(config["users"][0]["user"], json!({"token": "t0ken"}));
        assert_eq!(config["current-context"], "c2");
        let text = crate::discovery::yaml::to_string(&config).expect("yaml");
        let parsed = Kubeconfig::from_yaml(&text).expect("a kubeconfig kube reads");
        assert_eq!(parsed.current_context.as_deref(), Some("c2"));
        let secret = local_secret("c2", "strait-system", &text);
        assert_eq!(secret["metadata"]["labels"][REMOTE_CLUSTER_LABEL], "true");
        assert_eq!(secret["stringData"][REMOTE_KUBECONFIG_KEY], text);
    }

    #[test]
    fn a_missing_context_is_named() {
        let kubeconfig = Kubeconfig::from_yaml(
            "apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\ncurrent-context: gone\n",
        )
        .expect("kubeconfig");
        let error =
            remote_server(&kubeconfig, None, Path::new("remote.yaml")).expect_err("no context");
        assert_eq!(
            error.to_string(),
            "kubeconfig remote.yaml: no context \"gone\""
        );
    }
}
