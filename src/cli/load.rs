//! Loading the cluster set for the commands that report on it, from a
//! configuration directory or, with `--kube` (or `kube.enabled` in
//! `gateway.yaml`), from the clusters' API servers: settings, the cluster
//! set, the merged services and any warnings.

use std::path::PathBuf;
use std::time::Duration;

use crate::config::GatewaySettings;
use crate::diagnostics::Diagnostic;
use crate::discovery::files::{LoadError, load_clusters, load_usable};
use crate::discovery::kube::{KubeLoadError, load_once};
use crate::merge::{MergedSet, merge};
use crate::model::ClusterSet;

use super::Refused;

/// Where a command reads the cluster set.
#[derive(Debug, Clone, clap::Args)]
pub struct SourceArgs {
    /// The configuration directory (holds clusters/ and gateway.yaml);
    /// needed unless `--kube` (or `strait check --pre`) reads the API
    /// servers.
    #[arg(long, value_name = "DIR")]
    pub config: Option<PathBuf>,
    /// Read the cluster set from the Kubernetes API servers: the local
    /// cluster from KUBECONFIG or in-cluster config, remote clusters from
    /// gateway.yaml's kube.kubeconfigs and remote-cluster Secrets.
    #[arg(long)]
    pub kube: bool,
    /// How long to wait for every cluster's API to sync.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = humantime::parse_duration)]
    pub kube_timeout: Duration,
    /// With --kube: the local cluster's kubeconfig (default: as kubectl
    /// finds it).
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// With --kube: the namespace of the remote-cluster Secrets in the
    /// local cluster (default: gateway.yaml's kube.remoteSecretNamespace,
    /// else $POD_NAMESPACE, else `strait-remotes`, where `strait link`
    /// writes them).
    #[arg(long, value_name = "NAMESPACE")]
    pub namespace: Option<String>,
}

/// Where `strait link` writes the remote-cluster Secrets by default.
const DEFAULT_SECRET_NAMESPACE: &str = "strait-remotes";

impl SourceArgs {
    /// `gateway.yaml` of the configuration directory, or every default.
    pub(super) fn settings(&self) -> Result<GatewaySettings, Refused> {
        match &self.config {
            Some(dir) => GatewaySettings::load(dir).map_err(|e| Refused(e.to_string())),
            None => Ok(GatewaySettings::default()),
        }
    }

    /// Whether the Kubernetes source is selected (by flag or settings).
    pub(super) fn uses_kube(&self, settings: &GatewaySettings) -> bool {
        self.kube || settings.kube.enabled
    }
}

pub(super) struct Loaded {
    pub settings: GatewaySettings,
    pub set: ClusterSet,
    pub merged: MergedSet,
    pub warnings: Vec<Diagnostic>,
    /// What was read, for messages: the directory or the API servers.
    pub label: String,
    /// The local cluster's id, when read from the API servers.
    pub local: Option<String>,
    /// What the local cluster holds for its imports, when read from the API servers.
    pub observed: Option<crate::discovery::observed::Observed>,
    /// The ServiceImport version the local API server offers.
    pub import_api_version: Option<String>,
    /// The local cluster's ServiceExports with their status, when read
    /// from the API servers.
    pub local_exports: Option<std::sync::Arc<crate::discovery::kube::LocalExports>>,
}

/// The label of a cluster set read from the API servers.
const KUBE_LABEL: &str = "the cluster set read from the Kubernetes API";

/// How invalid objects of a configuration directory are taken. Read from
/// the API servers, an invalid object is always left out and its finding
/// told as a warning: there, objects are the tenants' and the other
/// clusters', and one of them must not switch off the operator's view of
/// every other service (`load_once`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Strictness {
    /// Any error refuses the whole set (`strait check`).
    Refuse,
    /// Invalid objects are left out as `strait run` leaves them out, and
    /// reported among the warnings (`explain`, `imports`: so they show
    /// what a running gateway does).
    LeaveOut,
}

pub(super) fn load(source: &SourceArgs) -> Result<Loaded, Refused> {
    load_as(source, Strictness::Refuse)
}

pub(super) fn load_as(source: &SourceArgs, strictness: Strictness) -> Result<Loaded, Refused> {
    let settings = source.settings()?;
    let mut imports = None;
    let mut exports = None;
    let (loaded, label, local) = if source.uses_kube(&settings) {
        let mut options = settings.kube_options();
        // The local exports' status: `explain` shows who imports them.
        options.local_exports = true;
        if source.kubeconfig.is_some() {
            options.local_kubeconfig.clone_from(&source.kubeconfig);
        }
        // Never the kubeconfig's namespace, as a gateway without
        // $POD_NAMESPACE would: a command run by hand would then read no
        // remote-cluster Secret and call the local cluster alone valid.
        let namespace = source
            .namespace
            .clone()
            .or_else(|| options.remote_secret_namespace.clone())
            .or_else(|| std::env::var(crate::discovery::kube::POD_NAMESPACE_ENV).ok())
            .unwrap_or_else(|| DEFAULT_SECRET_NAMESPACE.to_owned());
        eprintln!("reading remote-cluster Secrets in namespace {namespace} (--namespace)");
        options.remote_secret_namespace = Some(namespace);
        // A peer is read from its feed by the gateway, as its cluster's
        // certificate; this command has neither, and says so.
        let peers = std::mem::take(&mut options.peers);
        options.follow_peer_secrets = false;
        let runtime = super::runtime()?;
        let mut loaded = runtime
            .block_on(load_once(options, source.kube_timeout))
            .map_err(|e| match e {
                KubeLoadError::Invalid(diagnostics) => invalid(&diagnostics, KUBE_LABEL),
                other => Refused(other.to_string()),
            })?;
        loaded.loaded.warnings.extend(peers.iter().map(|peer| {
            crate::diagnostics::Diagnostic::warning(
                crate::diagnostics::Origin::file(peer.source()),
                format!(
                    "{} is read from its feed by the gateway (kube.peers), not by this command: only what a link named after it reads is in this view",
                    peer.cluster
                ),
            )
            .in_cluster(peer.cluster.as_str())
        }));
        imports = loaded.local_imports.clone();
        exports = loaded.local_exports.clone();
        (loaded.loaded, KUBE_LABEL.to_owned(), loaded.local)
    } else {
        let dir = source
            .config
            .as_deref()
            .ok_or_else(|| Refused("pass --config DIR or --kube".to_owned()))?;
        let label = dir.display().to_string();
        let refused = |e| match e {
            LoadError::Invalid(diagnostics) => invalid(&diagnostics, &label),
            io => Refused(io.to_string()),
        };
        let loaded = match strictness {
            Strictness::Refuse => {
                load_clusters(dir, &settings.translate_options()).map_err(refused)?
            }
            Strictness::LeaveOut => {
                let usable = load_usable(dir, &settings.translate_options()).map_err(refused)?;
                crate::discovery::files::Loaded {
                    set: usable.set,
                    warnings: usable.diagnostics,
                }
            }
        };
        (loaded, label, None)
    };
    let merged = merge(&loaded.set);
    Ok(Loaded {
        settings,
        set: loaded.set,
        merged,
        warnings: loaded.warnings,
        label,
        local,
        observed: imports.as_ref().map(|i| i.observed.clone()),
        import_api_version: imports.map(|i| i.api_version.clone()),
        local_exports: exports,
    })
}

fn invalid(diagnostics: &crate::diagnostics::Diagnostics, label: &str) -> Refused {
    let errors = diagnostics.errors().count();
    Refused(format!(
        "{diagnostics}\n{label} is not valid: {errors} error{}",
        if errors == 1 { "" } else { "s" }
    ))
}
