//! `strait link export`: this cluster as a peer document, a Secret that
//! another cluster's admin applies (`kubectl apply -f`) to follow this
//! cluster's feed over the tunnel. It names this cluster, its network,
//! its gateways' tunnel addresses and the CA that issues its gateway
//! identity, and holds no credential: it can be carried to a cluster whose
//! API server this admin cannot reach.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;

use super::{Refused, emit, runtime};
use crate::config::GatewaySettings;
use crate::discovery::kube::{REMOTE_CLUSTER_LABEL, load_once};
use crate::feed::record::{PEER_CA_KEY, PEER_CLUSTER_KEY, PEER_GATEWAYS_KEY, PEER_NETWORK_KEY};
use crate::model::{ClusterId, GatewayAddress};

/// The default name of the gateway's TLS Secret (deploy/deployment.yaml).
pub(super) const TLS_SECRET: &str = "cluster-edge-tls";

#[derive(Debug, clap::Args)]
pub struct ExportArgs {
    /// This cluster's kubeconfig (default: as kubectl finds it).
    #[arg(long, value_name = "FILE")]
    local_kubeconfig: Option<PathBuf>,
    /// The configuration directory holding `gateway.yaml`, for its
    /// network property and gateway namespace (default: the defaults).
    #[arg(long, value_name = "DIR")]
    config: Option<PathBuf>,
    /// This cluster's gateways' tunnel addresses, `host:port`, repeated
    /// (default: the addresses of its gateway Service, as the gateway
    /// itself publishes them).
    #[arg(long = "gateway", value_name = "HOST:PORT")]
    gateways: Vec<String>,
    /// The PEM file holding the CA that issues this cluster's gateway
    /// identity (default: `ca.crt` of the gateway's TLS Secret); of several
    /// certificates, the one naming this cluster is used.
    #[arg(long, value_name = "FILE", conflicts_with = "no_ca")]
    ca: Option<PathBuf>,
    /// The gateway's TLS Secret in the gateway namespace.
    #[arg(long, value_name = "NAME", default_value = TLS_SECRET)]
    tls_secret: String,
    /// Carry no CA: the other cluster's `ca.crt` must already trust this
    /// cluster's gateways.
    #[arg(long)]
    no_ca: bool,
    /// The namespace of the remote-cluster Secrets in the other cluster.
    #[arg(long, value_name = "NAMESPACE", default_value = "strait-remotes")]
    namespace: String,
    /// The Secret's name (default: `<this cluster's id>-peer`, beside a
    /// link named after the id that it replaces without a gap).
    #[arg(long, value_name = "NAME")]
    name: Option<String>,
    /// How long to wait for this cluster's API server.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = humantime::parse_duration)]
    timeout: Duration,
}

/// What a peer document says beyond what its cluster says of itself.
#[derive(Debug, Clone, Default)]
pub(super) struct DocumentOptions {
    pub gateways: Vec<String>,
    pub ca: Option<PathBuf>,
    pub no_ca: bool,
    pub tls_secret: String,
    /// Where it goes in the cluster that applies it.
    pub namespace: String,
    pub name: Option<String>,
    pub timeout: Duration,
}

impl ExportArgs {
    fn document(&self) -> DocumentOptions {
        DocumentOptions {
            gateways: self.gateways.clone(),
            ca: self.ca.clone(),
            no_ca: self.no_ca,
            tls_secret: self.tls_secret.clone(),
            namespace: self.namespace.clone(),
            name: self.name.clone(),
            timeout: self.timeout,
        }
    }
}

/// Prints this cluster's peer document.
pub fn run_export(args: &ExportArgs, out: &mut dyn Write) -> Result<(), Refused> {
    let settings = match &args.config {
        Some(path) => GatewaySettings::load(path).map_err(|e| Refused(format!("error: {e}")))?,
        None => GatewaySettings::default(),
    };
    let secret = runtime()?.block_on(peer_document_of(
        args.local_kubeconfig.as_deref(),
        &settings,
        &args.document(),
    ))?;
    let yaml =
        crate::discovery::yaml::to_string(&secret).map_err(|e| Refused(format!("error: {e}")))?;
    emit(out, &yaml)
}

/// The peer document of the cluster `kubeconfig` reaches (kubectl's when
/// `None`), read from what that cluster says of itself.
pub(super) async fn peer_document_of(
    kubeconfig: Option<&Path>,
    settings: &GatewaySettings,
    document: &DocumentOptions,
) -> Result<Secret, Refused> {
    let mut options = settings.kube_options();
    options.local_kubeconfig = kubeconfig.map(Path::to_owned);
    // That cluster alone: what it says of itself.
    options.remote_kubeconfigs.clear();
    options.remote_secrets = false;
    options.peers.clear();
    let loaded = load_once(options, document.timeout)
        .await
        .map_err(|e| Refused(format!("error: reading the cluster: {e}")))?;
    let id = loaded.local.ok_or_else(|| {
        Refused(
            "error: the cluster has no id (ClusterProperty cluster.clusterset.k8s.io)".to_owned(),
        )
    })?;
    let cluster = loaded
        .loaded
        .set
        .clusters
        .values()
        .find(|c| c.id.as_str() == id)
        .ok_or_else(|| Refused(format!("error: cluster {id} is not in what was read")))?
        .clone();
    let gateways = if document.gateways.is_empty() {
        cluster.gateways.iter().map(ToString::to_string).collect()
    } else {
        for (index, text) in document.gateways.iter().enumerate() {
            text.parse::<GatewayAddress>()
                .map_err(|e| Refused(format!("error: --gateway #{}: {e}", index + 1)))?;
        }
        document.gateways.clone()
    };
    let gateway_namespace = settings.translate_options().gateway_namespace;
    if gateways.is_empty() {
        return Err(Refused(format!(
            "error: {id}'s gateway Service (namespace {gateway_namespace}) has no load-balancer address or external IP to publish; give --gateway HOST:PORT"
        )));
    }
    let ca = if document.no_ca {
        None
    } else {
        let (pem, from) = match &document.ca {
            Some(path) => (
                std::fs::read(path)
                    .map_err(|e| Refused(format!("error: --ca {}: {e}", path.display())))?,
                path.display().to_string(),
            ),
            None => {
                let client = crate::controller::link::local_client(kubeconfig)
                    .await
                    .map_err(|e| Refused(format!("error: {e}")))?;
                let api: Api<Secret> = Api::namespaced(client, &gateway_namespace);
                let from = format!("Secret {gateway_namespace}/{}", document.tls_secret);
                let secret = api
                    .get(&document.tls_secret)
                    .await
                    .map_err(|e| Refused(format!("error: reading {from}: {e} (give --ca FILE)")))?;
                let pem = secret
                    .data
                    .and_then(|mut data| data.remove("ca.crt"))
                    .ok_or_else(|| {
                        Refused(format!("error: {from} has no ca.crt (give --ca FILE)"))
                    })?;
                (pem.0, from)
            }
        };
        Some(own_ca(&pem, &id, &from)?)
    };
    eprintln!(
        "the peer document of {id} on network {}: applied in another cluster, that cluster's admin attests this network and follows {id}'s feed at {}",
        cluster.network,
        gateways.join(", ")
    );
    Ok(peer_document(
        document,
        &id,
        cluster.network.as_str(),
        &gateways,
        ca.as_deref(),
    ))
}

/// Of the PEM certificates in `pem` (from `from`), the one CA naming
/// `id`, as its PEM block.
pub(super) fn own_ca(pem: &[u8], id: &str, from: &str) -> Result<String, Refused> {
    let cluster = ClusterId::new(id).map_err(|e| Refused(format!("error: {id}: {e}")))?;
    let text =
        std::str::from_utf8(pem).map_err(|_| Refused(format!("error: {from}: not PEM text")))?;
    const END: &str = "-----END CERTIFICATE-----";
    let mut own = Vec::new();
    for block in text.split_inclusive(END).filter(|b| b.contains(END)) {
        let certificate = CertificateDer::from_pem_slice(block.as_bytes())
            .map_err(|e| Refused(format!("error: {from}: not a PEM certificate: {e}")))?;
        if crate::tls::identity_of(&certificate).is_ok_and(|identity| identity.cluster == cluster) {
            own.push(format!("{}\n", block.trim()));
        }
    }
    match own.len() {
        1 => Ok(own.remove(0)),
        0 => Err(Refused(format!(
            "error: no CA in {from} names {id}: a peer document carries the CA that issues {id}'s identity alone (`strait certs` makes one per cluster); give --ca FILE, or --no-ca when the other cluster's ca.crt already trusts it"
        ))),
        count => Err(Refused(format!(
            "error: {count} CAs in {from} name {id}; give --ca FILE with the one in use"
        ))),
    }
}

/// The peer Secret another cluster applies.
fn peer_document(
    args: &DocumentOptions,
    id: &str,
    network: &str,
    gateways: &[String],
    ca: Option<&str>,
) -> Secret {
    let mut secret = Secret::default();
    secret.metadata.name = Some(args.name.clone().unwrap_or_else(|| format!("{id}-peer")));
    secret.metadata.namespace = Some(args.namespace.clone());
    secret.metadata.labels = Some([(REMOTE_CLUSTER_LABEL.to_owned(), "true".to_owned())].into());
    let mut data: std::collections::BTreeMap<String, String> = [
        (PEER_CLUSTER_KEY, id.to_owned()),
        (PEER_NETWORK_KEY, network.to_owned()),
        (PEER_GATEWAYS_KEY, gateways.join(",")),
    ]
    .into_iter()
    .map(|(key, value)| (key.to_owned(), value))
    .collect();
    if let Some(ca) = ca {
        data.insert(PEER_CA_KEY.to_owned(), ca.to_owned());
    }
    secret.string_data = Some(data);
    secret
}

#[derive(Debug, clap::Args)]
pub struct UnpeerArgs {
    /// The peer cluster's id.
    #[arg(value_name = "CLUSTER")]
    cluster: String,
    /// This cluster's kubeconfig (default: as kubectl finds it).
    #[arg(long, value_name = "FILE")]
    local_kubeconfig: Option<PathBuf>,
    /// The namespace of the remote-cluster Secrets in this cluster.
    #[arg(long, value_name = "NAMESPACE", default_value = "strait-remotes")]
    namespace: String,
}

/// Deletes this cluster's peer Secrets naming the cluster: the gateways
/// stop following its feed, and the imports only it fed go.
pub fn run_unpeer(args: &UnpeerArgs, out: &mut dyn Write) -> Result<(), Refused> {
    runtime()?.block_on(async {
        let client = crate::controller::link::local_client(args.local_kubeconfig.as_deref())
            .await
            .map_err(|e| Refused(format!("error: {e}")))?;
        let deleted = delete_peer_secrets(&client, &args.namespace, &args.cluster).await?;
        if deleted.is_empty() {
            return Err(Refused(format!(
                "error: no peer Secret in {} names {} (a link through its API server is undone by `strait unlink --api --kubeconfig`)",
                args.namespace, args.cluster
            )));
        }
        emit(
            out,
            &format!(
                "unlinked {}: peer Secret {} deleted in {}; the gateways stop following its feed\n",
                args.cluster,
                deleted.join(", "),
                args.namespace
            ),
        )
    })
}

/// Deletes the peer Secrets in `namespace` that name `cluster`, returning
/// their names (none: nothing named it).
pub(super) async fn delete_peer_secrets(
    client: &kube::Client,
    namespace: &str,
    cluster: &str,
) -> Result<Vec<String>, Refused> {
    let refused = |e: &dyn std::fmt::Display| Refused(format!("error: {e}"));
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let listed = api
        .list(&kube::api::ListParams::default().labels(&format!("{REMOTE_CLUSTER_LABEL}=true")))
        .await
        .map_err(|e| {
            refused(&format!(
                "listing the remote-cluster Secrets of {namespace}: {e}"
            ))
        })?;
    let naming: Vec<String> = listed
        .items
        .into_iter()
        .filter(|secret| {
            secret
                .data
                .as_ref()
                .and_then(|data| data.get(PEER_CLUSTER_KEY))
                .is_some_and(|value| value.0.trim_ascii() == cluster.as_bytes())
        })
        .filter_map(|secret| secret.metadata.name)
        .collect();
    for name in &naming {
        crate::controller::link::delete_local(client, namespace, name)
            .await
            .map_err(|e| refused(&e))?;
    }
    Ok(naming)
}
