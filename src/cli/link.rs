//! `strait link` and `strait unlink`: connecting a remote cluster to this
//! one's gateways (the work is `controller::link`'s).

use std::io::Write;
use std::path::PathBuf;

use super::{Refused, emit, runtime};
use crate::controller::link::{self, LinkOptions};

#[derive(Debug, clap::Args)]
pub struct LinkArgs {
    /// The remote cluster's kubeconfig, with rights to create (or, to
    /// unlink, delete) Secrets in `--namespace` there; with `--api`, also
    /// ServiceAccounts, ClusterRoles and ClusterRoleBindings.
    #[arg(long, value_name = "FILE")]
    kubeconfig: PathBuf,
    /// Link through the remote API server instead of by feed: a read-only
    /// reader there, and here a Secret holding its token (one way: the
    /// local cluster reads the remote one). For a cluster set moving from
    /// such links to feeds, or whose gateways cannot reach each other.
    #[arg(long)]
    api: bool,
    /// With `--api`: the kubeconfig's context to use (default: its current
    /// context).
    #[arg(long, value_name = "CONTEXT", requires = "api")]
    context: Option<String>,
    /// With `--api`: the remote-cluster Secret's name (default: the remote
    /// cluster's id, its cluster.clusterset.k8s.io ClusterProperty).
    #[arg(long, value_name = "NAME", requires = "api")]
    name: Option<String>,
    /// The namespace of the remote-cluster Secret in the local cluster
    /// (the gateway's `kube.remoteSecretNamespace`).
    #[arg(long, value_name = "NAMESPACE", default_value = "strait-remotes")]
    namespace: String,
    /// With `--api`: the namespace of the reader's ServiceAccount in the
    /// remote cluster.
    #[arg(long, value_name = "NAMESPACE", default_value = "strait-system")]
    remote_namespace: String,
    /// The local cluster's kubeconfig (default: as kubectl finds it).
    #[arg(long, value_name = "FILE")]
    local_kubeconfig: Option<PathBuf>,
    /// With `--api`: the local cluster's id, which names its reader in the
    /// remote cluster, `strait-remote-reader-<id>` (default: the local
    /// cluster's cluster.clusterset.k8s.io ClusterProperty).
    #[arg(long, value_name = "ID", requires = "api")]
    local_cluster: Option<String>,
    /// With `--api`: how long the reader's bound token lasts (at least 10m;
    /// the remote server may cap it). Linking again renews a token past
    /// half its life.
    #[arg(long, value_name = "DURATION", default_value = "365days", value_parser = humantime::parse_duration)]
    token_lifetime: std::time::Duration,
    /// Link by feed (the default, kept for scripts that say so).
    #[arg(long, hide = true, conflicts_with = "api")]
    feed: bool,
    /// `strait unlink --api` only: also remove the link the other way, the
    /// remote cluster reading this one's API server (its Secret naming
    /// this cluster there, and its reader here).
    #[arg(long, requires = "api")]
    both: bool,
}

impl LinkArgs {
    /// The options, the local cluster's id read from it unless given.
    async fn options(&self) -> Result<LinkOptions, Refused> {
        let local_id = match &self.local_cluster {
            Some(id) => id.clone(),
            None => {
                let local = link::local_client(self.local_kubeconfig.as_deref())
                    .await
                    .map_err(refused)?;
                link::local_id(&local).await.map_err(refused)?
            }
        };
        crate::model::check_dns_subdomain(&local_id, 63)
            .map_err(|e| refused(format!("--local-cluster {local_id:?}: {e}")))?;
        if self.token_lifetime < link::MIN_TOKEN_LIFETIME {
            return Err(refused(format!(
                "--token-lifetime {}: the API server mints tokens of at least {}",
                humantime::format_duration(self.token_lifetime),
                humantime::format_duration(link::MIN_TOKEN_LIFETIME)
            )));
        }
        Ok(LinkOptions {
            remote_kubeconfig: self.kubeconfig.clone(),
            context: self.context.clone(),
            name: self.name.clone(),
            remote_namespace: self.remote_namespace.clone(),
            local_namespace: self.namespace.clone(),
            reader: link::reader_name(&local_id),
            token_lifetime: self.token_lifetime,
        })
    }
}

fn refused(error: impl std::fmt::Display) -> Refused {
    Refused(format!("error: {error}"))
}

/// What `strait link` does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkAction {
    /// Print what would be created; create nothing.
    DryRun,
    /// With `--api`: create the remote reader; print the local Secret.
    PrintSecret,
    /// Apply each cluster's peer document in the other (with `--api`:
    /// create the remote reader and the local Secret).
    Apply,
}

/// By feed (the default): applies each cluster's peer document in the
/// other, or (a dry run) prints the remote one's. With `--api`: creates
/// the reader in the remote cluster and the remote-cluster Secret in the
/// local one, prints the Secret instead, or (a dry run) prints what would
/// be created.
pub fn run_link(args: &LinkArgs, what: LinkAction, out: &mut dyn Write) -> Result<(), Refused> {
    if args.both {
        return Err(refused(
            "--both is for strait unlink --api (a link through the API server goes one way; strait link --api run from each side makes both)",
        ));
    }
    if !args.api {
        if what == LinkAction::PrintSecret {
            return Err(refused(
                "--print-secret prints a link's token Secret, made only by a link through the API server: add --api (a link by feed makes no token; without --apply it prints the remote cluster's peer document)",
            ));
        }
        return run_link_feed(args, what == LinkAction::Apply, out);
    }
    runtime()?.block_on(async {
        let options = args.options().await?;
        let remote = link::Remote::connect(&options).await.map_err(refused)?;
        if what == LinkAction::DryRun {
            remote.check(&options).await.map_err(refused)?;
            let name = remote.name(&options).await.map_err(refused)?;
            let objects = link::remote_objects(&options.remote_namespace, &options.reader);
            let mut yaml = String::new();
            for object in &objects {
                yaml.push_str("---\n");
                yaml.push_str(&crate::discovery::yaml::to_string(object).map_err(refused)?);
            }
            eprintln!(
                "dry run, nothing created: --apply would apply these in the remote cluster, mint a token of {} and create Secret {}/{name} holding it in the local cluster; --print-secret would apply these and print that Secret",
                options.reader, args.namespace
            );
            return emit(out, &yaml);
        }
        if what == LinkAction::Apply {
            let local = link::local_client(args.local_kubeconfig.as_deref())
                .await
                .map_err(refused)?;
            let linked = link::link(&remote, &options, Some(&local))
                .await
                .map_err(refused)?;
            link::apply_local(&local, &linked).await.map_err(refused)?;
            // Only now that the local Secret holds a bound token.
            let retired = linked.token != link::TokenKind::Legacy
                && link::retire_legacy_token(&remote, &options)
                    .await
                    .map_err(refused)?;
            emit(
                out,
                &format!(
                    "linked {} ({}): Secret {}/{} applied in the local cluster; {}{}\n",
                    linked.name,
                    linked.server,
                    args.namespace,
                    linked.name,
                    token_note(&linked),
                    if retired {
                        "; the legacy token Secret is deleted (its token revoked)"
                    } else {
                        ""
                    }
                ),
            )
        } else {
            let linked = link::link(&remote, &options, None)
                .await
                .map_err(refused)?;
            let yaml = crate::discovery::yaml::to_string(&linked.secret).map_err(refused)?;
            eprintln!(
                "linked {} ({}); {}; apply this Secret in the local cluster (or run again with --apply), then delete a legacy Secret {}/{} in the remote cluster if one is left:",
                linked.name,
                linked.server,
                token_note(&linked),
                args.remote_namespace,
                link::token::legacy_token_name(&options.reader),
            );
            emit(out, &yaml)
        }
    })
}

/// `strait link` by feed: the remote cluster's peer document applied here
/// and this cluster's there; or, without `apply`, the remote's printed.
fn run_link_feed(args: &LinkArgs, apply: bool, out: &mut dyn Write) -> Result<(), Refused> {
    let document = super::peer::DocumentOptions {
        tls_secret: super::peer::TLS_SECRET.to_owned(),
        namespace: args.namespace.clone(),
        timeout: std::time::Duration::from_secs(30),
        ..Default::default()
    };
    let settings = crate::config::GatewaySettings::default();
    runtime()?.block_on(async {
        let remote_document =
            super::peer::peer_document_of(Some(&args.kubeconfig), &settings, &document).await?;
        let as_value = |secret: &k8s_openapi::api::core::v1::Secret| {
            let mut value = serde_json::to_value(secret).map_err(refused)?;
            value["apiVersion"] = "v1".into();
            value["kind"] = "Secret".into();
            Ok::<_, Refused>(value)
        };
        if !apply {
            let yaml = crate::discovery::yaml::to_string(&as_value(&remote_document)?)
                .map_err(refused)?;
            eprintln!("apply this in the local cluster (or run again with --apply, which also applies the local cluster's in the remote one):");
            return emit(out, &yaml);
        }
        let local_document = super::peer::peer_document_of(
            args.local_kubeconfig.as_deref(),
            &settings,
            &document,
        )
        .await?;
        let (local, remote) = clients(args).await?;
        link::apply(&local, &as_value(&remote_document)?, "the local cluster")
            .await
            .map_err(refused)?;
        link::apply(&remote, &as_value(&local_document)?, "the remote cluster")
            .await
            .map_err(refused)?;
        let name = |secret: &k8s_openapi::api::core::v1::Secret| {
            secret.metadata.name.clone().unwrap_or_default()
        };
        emit(
            out,
            &format!(
                "linked by feed both ways: Secret {ns}/{} applied in the local cluster, {ns}/{} in the remote one; no token was made\n",
                name(&remote_document),
                name(&local_document),
                ns = args.namespace,
            ),
        )
    })
}

/// The local cluster's client and the remote one's, from their kubeconfigs.
async fn clients(args: &LinkArgs) -> Result<(kube::Client, kube::Client), Refused> {
    let local = link::local_client(args.local_kubeconfig.as_deref())
        .await
        .map_err(refused)?;
    let remote = link::local_client(Some(&args.kubeconfig))
        .await
        .map_err(refused)?;
    Ok((local, remote))
}

/// What the user should know of the link's token.
fn token_note(linked: &link::Linked) -> String {
    let until = |expires: Option<std::time::SystemTime>| {
        expires
            .map(|e| humantime::format_rfc3339_seconds(e).to_string())
            .unwrap_or_else(|| "an unknown time".to_owned())
    };
    match linked.token {
        link::TokenKind::Bound => format!(
            "a new bound token, valid until {} (run strait link again before then)",
            until(linked.expires)
        ),
        link::TokenKind::Kept => format!(
            "the token already held is kept, valid until {}",
            until(linked.expires)
        ),
        link::TokenKind::Legacy => {
            "the remote server does not serve TokenRequest: a legacy token that never expires"
                .to_owned()
        }
    }
}

/// By feed (the default): deletes the peer documents of each cluster in
/// the other, both ways as `strait link` applied them. With `--api`:
/// deletes the local remote-cluster Secret, then the reader in the remote
/// cluster.
pub fn run_unlink(args: &LinkArgs, out: &mut dyn Write) -> Result<(), Refused> {
    if !args.api {
        return run_unlink_feed(args, out);
    }
    runtime()?.block_on(async {
        let options = args.options().await?;
        let remote = link::Remote::connect(&options).await.map_err(refused)?;
        let name = remote.name(&options).await.map_err(refused)?;
        let local = link::local_client(args.local_kubeconfig.as_deref())
            .await
            .map_err(refused)?;
        link::delete_local(&local, &args.namespace, &name)
            .await
            .map_err(refused)?;
        link::unlink_remote(&remote, &options)
            .await
            .map_err(refused)?;
        let mut said = format!(
            "unlinked {name}: Secret {}/{name} and the remote reader {} deleted\n",
            args.namespace, options.reader
        );
        if args.both {
            // The other way: the remote cluster's Secret naming this
            // cluster, and the reader it reads this cluster as.
            let local_id = link::local_id(&local).await.map_err(refused)?;
            let remote_id = link::local_id(remote.client()).await.map_err(refused)?;
            link::delete_local(remote.client(), &args.namespace, &local_id)
                .await
                .map_err(refused)?;
            let reader = link::reader_name(&remote_id);
            link::delete_reader(&local, "the local cluster", &args.remote_namespace, &reader)
                .await
                .map_err(refused)?;
            said.push_str(&format!(
                "and the other way: Secret {}/{local_id} in {remote_id} and the reader {reader} here deleted\n",
                args.namespace
            ));
        } else {
            said.push_str(&format!(
                "a link the other way ({name} reading this cluster's API server), if any, is left: add --both to remove it too, or {name}'s gateway keeps importing this cluster's services and its clients get connections reset\n"
            ));
        }
        emit(out, &said)
    })
}

/// `strait unlink` by feed: each cluster stops following the other (both
/// ways), and the imports only the other fed go. Links through the API
/// servers are left alone (`--api` undoes one).
fn run_unlink_feed(args: &LinkArgs, out: &mut dyn Write) -> Result<(), Refused> {
    runtime()?.block_on(async {
        let (local, remote) = clients(args).await?;
        let local_id = link::local_id(&local).await.map_err(refused)?;
        let remote_id = link::local_id(&remote).await.map_err(refused)?;
        let here = super::peer::delete_peer_secrets(&local, &args.namespace, &remote_id).await?;
        let there = super::peer::delete_peer_secrets(&remote, &args.namespace, &local_id).await?;
        if here.is_empty() && there.is_empty() {
            return Err(refused(format!(
                "neither {local_id} nor {remote_id} holds a peer Secret in {} naming the other; a link through the API server is undone by `strait unlink --api`",
                args.namespace
            )));
        }
        let said = |deleted: &[String], cluster: &str| {
            if deleted.is_empty() {
                format!("{cluster} followed nothing to undo")
            } else {
                format!("{} deleted in {cluster}", deleted.join(", "))
            }
        };
        emit(
            out,
            &format!(
                "unlinked {local_id} and {remote_id} both ways: {}; {} (namespace {}); a link through either API server, if any, is left\n",
                said(&here, &local_id),
                said(&there, &remote_id),
                args.namespace
            ),
        )
    })
}
