//! Where the clusters of the set come from and how Strait talks to them:
//! building a kube client (on the `connect` stack) from the local configuration, a kubeconfig file or
//! a remote-cluster Secret, and discovering which version of each watched
//! kind the server offers (`v1beta1`, else `v1alpha1`, for the CRDs).

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Client;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::core::ApiResource;
use kube::discovery::Discovery;

use super::KubeError;
use super::bearer::Expiry;
use super::connect::build_client;
use super::kubeconfig::check_secret_kubeconfig;
use crate::discovery::objects::{ABOUT_GROUP, CRD_VERSIONS, MCS_GROUP};

/// Where one cluster's API server is configured.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ClusterSource {
    /// The cluster the gateway runs in.
    Local,
    /// A kubeconfig file named in `gateway.yaml`.
    Kubeconfig(PathBuf),
    /// A Secret labelled `strait.dev/remote-cluster: "true"`.
    Secret { namespace: String, name: String },
}

impl ClusterSource {
    pub fn is_local(&self) -> bool {
        matches!(self, ClusterSource::Local)
    }

    /// Whether the source is named after cluster `id`, as a link to that
    /// cluster is: a remote-cluster Secret of that name (as `strait link`
    /// names it), or a kubeconfig file of that name (`id.yaml`). Only such
    /// a link may stand in for a peer read from its feed.
    pub fn is_named(&self, id: &str) -> bool {
        match self {
            ClusterSource::Local => false,
            ClusterSource::Kubeconfig(path) => {
                path.file_stem().and_then(|stem| stem.to_str()) == Some(id)
            }
            ClusterSource::Secret { name, .. } => name == id,
        }
    }
}

impl fmt::Display for ClusterSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClusterSource::Local => f.write_str("local"),
            ClusterSource::Kubeconfig(path) => write!(f, "kubeconfig {}", path.display()),
            ClusterSource::Secret { namespace, name } => write!(f, "secret {namespace}/{name}"),
        }
    }
}

/// The local cluster's client: from `path`, else inferred as kubectl does.
pub(crate) async fn local_client(
    path: Option<&Path>,
    watch_timeout: Duration,
) -> Result<Client, KubeError> {
    let config = match path {
        Some(path) => return file_client(path, watch_timeout).await,
        None => kube::Config::infer().await?,
    };
    build_client(config, watch_timeout).map_err(|source| KubeError::Client {
        what: "the local cluster".to_owned(),
        source,
    })
}

/// A client from a kubeconfig file's current context.
pub(super) async fn file_client(path: &Path, watch_timeout: Duration) -> Result<Client, KubeError> {
    let kubeconfig = Kubeconfig::read_from(path).map_err(|source| KubeError::Kubeconfig {
        path: path.to_owned(),
        source,
    })?;
    kubeconfig_client(kubeconfig, &path.display().to_string(), watch_timeout)
        .await
        .map_err(|error| match error {
            ClientError::Kubeconfig(source) => KubeError::Kubeconfig {
                path: path.to_owned(),
                source,
            },
            ClientError::Client(source) => KubeError::Client {
                what: path.display().to_string(),
                source,
            },
            ClientError::Unsafe(source) => KubeError::Unsafe {
                what: path.display().to_string(),
                source,
            },
        })
}

/// Why a client could not be built from a kubeconfig.
#[derive(Debug, thiserror::Error)]
pub(super) enum ClientError {
    #[error("invalid kubeconfig: {0}")]
    Kubeconfig(#[from] kube::config::KubeconfigError),
    #[error("cannot build a client: {0}")]
    Client(#[from] kube::Error),
    #[error("refused kubeconfig: {0}")]
    Unsafe(#[from] super::kubeconfig::UnsafeKubeconfig),
}

/// A client from kubeconfig text, as held by a remote-cluster Secret:
/// only a server, its CA and inline credentials are accepted
/// ([`check_secret_kubeconfig`]).
pub(super) async fn yaml_client(
    text: &str,
    what: &str,
    watch_timeout: Duration,
) -> Result<Client, ClientError> {
    let kubeconfig = Kubeconfig::from_yaml(text)?;
    check_secret_kubeconfig(&kubeconfig)?;
    report_token_expiry(&kubeconfig, what);
    kubeconfig_client(kubeconfig, what, watch_timeout).await
}

/// Says when a Secret's bearer token expires: `strait link` mints bound
/// tokens that do, and a link whose token ran out reads nothing. Logged
/// each time the Secret is read; a warning within a month of the end.
fn report_token_expiry(kubeconfig: &Kubeconfig, what: &str) {
    use secrecy::ExposeSecret;
    let now = std::time::SystemTime::now();
    for named in &kubeconfig.auth_infos {
        let Some(token) = named.auth_info.as_ref().and_then(|a| a.token.as_ref()) else {
            continue;
        };
        let Some(claims) = super::bearer::token_claims(token.expose_secret()) else {
            continue;
        };
        let expires = claims
            .expires
            .map(|e| humantime::format_rfc3339_seconds(e).to_string())
            .unwrap_or_default();
        match claims.expiry(now) {
            Some(Expiry::Expired) => tracing::error!(
                cluster = what, %expires,
                "the remote cluster's token has expired: run `strait link` again to renew it"
            ),
            Some(Expiry::Soon(left)) => tracing::warn!(
                cluster = what, %expires,
                left = %humantime::format_duration(round_to_hours(left)),
                "the remote cluster's token expires soon: run `strait link` again to renew it"
            ),
            Some(Expiry::Later(_)) => tracing::info!(
                cluster = what, %expires,
                "the remote cluster's token is bound and expiring"
            ),
            None => tracing::info!(
                cluster = what,
                "the remote cluster's token never expires (a legacy token Secret): run `strait link` again to replace it with a bound one"
            ),
        }
    }
}

fn round_to_hours(duration: Duration) -> Duration {
    Duration::from_secs(duration.as_secs() / 3600 * 3600)
}

async fn kubeconfig_client(
    kubeconfig: Kubeconfig,
    what: &str,
    watch_timeout: Duration,
) -> Result<Client, ClientError> {
    let config =
        kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?;
    tracing::debug!(cluster = what, server = %config.cluster_url, "kube client configured");
    Ok(build_client(config, watch_timeout)?)
}

/// A kind Strait watches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Kind {
    ClusterProperty,
    ServiceExport,
    ServiceImport,
    Service,
    EndpointSlice,
}

impl Kind {
    pub(crate) const ALL: [Kind; 5] = [
        Kind::ClusterProperty,
        Kind::ServiceExport,
        Kind::ServiceImport,
        Kind::Service,
        Kind::EndpointSlice,
    ];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Kind::ClusterProperty => "ClusterProperty",
            Kind::ServiceExport => "ServiceExport",
            Kind::ServiceImport => "ServiceImport",
            Kind::Service => "Service",
            Kind::EndpointSlice => "EndpointSlice",
        }
    }

    /// The resource (plural) name the watcher lists and watches.
    pub(crate) fn resource(self) -> &'static str {
        match self {
            Kind::ClusterProperty => "clusterproperties",
            Kind::ServiceExport => "serviceexports",
            Kind::ServiceImport => "serviceimports",
            Kind::Service => "services",
            Kind::EndpointSlice => "endpointslices",
        }
    }

    pub(crate) fn group(self) -> &'static str {
        match self {
            Kind::ClusterProperty => ABOUT_GROUP,
            Kind::ServiceExport | Kind::ServiceImport => MCS_GROUP,
            Kind::Service => "",
            Kind::EndpointSlice => "discovery.k8s.io",
        }
    }

    /// Watched in this cluster: ServiceImports only in the local one.
    pub(super) fn watched_in(self, source: &ClusterSource) -> bool {
        self != Kind::ServiceImport || source.is_local()
    }
}

/// The resource to watch for each kind the server offers.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Resources {
    pub(crate) served: Vec<(Kind, ApiResource)>,
    /// Kinds the server does not offer in any version Strait reads.
    pub(crate) missing: Vec<Kind>,
}

/// Asks the server which versions of the CRDs it serves and picks, per
/// kind, the first of `v1beta1`, `v1alpha1` that offers it. Service and
/// EndpointSlice are core APIs and always `v1`.
pub(crate) async fn discover(client: &Client, source: &ClusterSource) -> kube::Result<Resources> {
    let discovery = Discovery::new(client.clone())
        .filter(&[ABOUT_GROUP, MCS_GROUP])
        .run()
        .await?;
    let mut resources = Resources::default();
    for kind in Kind::ALL {
        if !kind.watched_in(source) {
            continue;
        }
        let resource = match kind {
            Kind::Service => Some(ApiResource::erase::<Service>(&())),
            Kind::EndpointSlice => Some(ApiResource::erase::<EndpointSlice>(&())),
            _ => discovery.get(kind.group()).and_then(|group| {
                CRD_VERSIONS.iter().find_map(|version| {
                    group
                        .versioned_resources(version)
                        .into_iter()
                        .map(|(resource, _)| resource)
                        .find(|resource| resource.plural == kind.resource())
                })
            }),
        };
        match resource {
            Some(resource) => resources.served.push((kind, resource)),
            None => resources.missing.push(kind),
        }
    }
    Ok(resources)
}
