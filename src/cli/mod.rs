//! The `strait` command line: argument parsing and the subcommands. Each
//! subcommand is a thin layer over the library; exit status 0 means success,
//! 2 means the input (flags or configuration) was refused.

mod certs;
mod check;
mod demo;
mod explain;
mod feed;
mod forward;
mod imports;
mod installation;
mod link;
mod linked;
mod load;
mod peer;
mod preflight;
mod run;
mod status;

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

/// Exit status for refused input: invalid configuration, unknown names.
pub const EXIT_INVALID: u8 = 2;

#[derive(Debug, Parser)]
#[command(
    name = "strait",
    version,
    about = "East-west gateway for multi-network Kubernetes cluster sets"
)]
pub struct Cli {
    /// How log lines are written to stderr: `text` (colour only on a
    /// terminal) or `json`, one object per line, for a log pipeline.
    #[arg(
        long,
        global = true,
        value_enum,
        default_value_t,
        env = "STRAIT_LOG_FORMAT"
    )]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Clone, Copy, ValueEnum, Default, PartialEq, Eq)]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

#[derive(Debug, Clone, Copy, ValueEnum, Default)]
pub enum Output {
    #[default]
    Text,
    Json,
}

/// `strait link`'s other modes.
#[derive(Debug, Subcommand)]
enum LinkMode {
    /// Print this cluster's peer document: a Secret that another cluster
    /// applies to follow this cluster's exported-state feed over the
    /// tunnel, with no credential for this cluster's API server.
    Export(peer::ExportArgs),
}

/// `strait unlink`'s other modes.
#[derive(Debug, Subcommand)]
enum UnlinkMode {
    /// Stop following a peer's feed: delete this cluster's peer Secrets
    /// naming it.
    Peer(peer::UnpeerArgs),
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Validate a configuration and summarise clusters, networks and
    /// services; with `--kube`, also check the installation (the gateway,
    /// its Lease, its TLS Secret, CoreDNS). `--pre`: check a cluster before
    /// installing Strait.
    Check {
        #[command(flatten)]
        source: load::SourceArgs,
        #[arg(long, value_enum, default_value_t)]
        output: Output,
        /// Before installing: the API server's version, the CRDs and their
        /// release, the cluster's ClusterProperties and CoreDNS, in the
        /// local cluster (`--kubeconfig`, else as kubectl finds it).
        #[arg(long, conflicts_with = "config")]
        pre: bool,
    },
    /// Show which backends may carry a connection to a service port, and by which path.
    Explain {
        #[command(flatten)]
        source: load::SourceArgs,
        /// The cluster whose gateway makes the decision (default: gateway.yaml's cluster).
        #[arg(long, value_name = "CLUSTER")]
        from: Option<String>,
        /// With --kube: the namespace of the gateway pod asked for its
        /// own routes.
        #[arg(long, value_name = "NAMESPACE", default_value = "strait-system")]
        gateway_namespace: String,
        /// With --kube: explain from the objects this command reads, not
        /// from the gateway's own routes (which hold the clusters it
        /// follows by feed, and the addresses local pods dial).
        #[arg(long, requires = "kube")]
        objects: bool,
        #[arg(long, value_enum, default_value_t)]
        output: Output,
        /// NAMESPACE/NAME:PORT[/PROTOCOL], protocol TCP when left out.
        #[arg(value_name = "SERVICE_PORT")]
        target: String,
    },
    /// Print the ServiceImports, derived Services and EndpointSlices the
    /// import reconciler would write for one cluster.
    Imports {
        #[command(flatten)]
        source: load::SourceArgs,
        /// The cluster whose objects to print (default: gateway.yaml's cluster).
        #[arg(long, value_name = "ID")]
        cluster: Option<String>,
        #[arg(long, value_enum, default_value_t)]
        output: imports::ObjectsOutput,
    },
    /// Link a remote cluster by feed, both ways and with no credential:
    /// each cluster's peer document applied in the other, so each gateway
    /// follows the other's exported state over the tunnel. `--api` links
    /// through the remote API server instead (a read-only token). `strait
    /// link export` prints this cluster's peer document, for an admin with
    /// no access to the other cluster.
    #[command(args_conflicts_with_subcommands = true)]
    Link {
        #[command(subcommand)]
        mode: Option<LinkMode>,
        #[command(flatten)]
        args: Option<link::LinkArgs>,
        /// Apply each peer document in the other cluster (with `--api`:
        /// create the reader in the remote cluster and the Secret in the
        /// local one). Without it (or `--print-secret`), a dry run: what
        /// would be created is printed, and nothing is.
        #[arg(long)]
        apply: bool,
        /// With `--api`: create the reader in the remote cluster and print
        /// the local Secret, with its live token, instead of creating it.
        #[arg(long, conflicts_with = "apply")]
        print_secret: bool,
    },
    /// Undo `strait link`: delete each cluster's peer document in the other
    /// (`--api`: the local remote-cluster Secret and the reader in the
    /// remote cluster; `strait unlink peer CLUSTER`: only this cluster's
    /// peer Secrets naming CLUSTER).
    #[command(args_conflicts_with_subcommands = true)]
    Unlink {
        #[command(subcommand)]
        mode: Option<UnlinkMode>,
        #[command(flatten)]
        args: Option<link::LinkArgs>,
    },
    /// Read a peer gateway's exported-state feed over the tunnel, as this
    /// cluster's gateway: each message as a JSON line.
    Feed(feed::FeedArgs),
    /// The cluster set on one screen, as one gateway sees it: clusters,
    /// how each is read and its state, tunnel connections, services,
    /// imports and findings (from its admin port's `/debug/status`).
    Status(status::StatusArgs),
    /// Run one gateway.
    Run(run::RunArgs),
    /// Run the demo cluster set on loopback: gateways, pods and sample traffic.
    Demo(demo::DemoArgs),
    /// Write a CA per cluster (trusted for that cluster only) and its gateway certificate.
    Certs {
        /// Output directory: ca.crt and <cluster>/{tls.crt,tls.key,ca.crt}.
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
        /// The cluster set id (the trust domain of gateway identities).
        #[arg(long, value_name = "ID")]
        clusterset: String,
        /// A cluster to issue a gateway certificate for (repeatable).
        #[arg(long = "cluster", value_name = "ID", required = true)]
        clusters: Vec<String>,
        /// How long the gateway certificates are valid (the CA: ten years).
        /// Short by default: nothing revokes a certificate before it expires.
        #[arg(long, value_name = "DURATION", default_value = "30d", value_parser = humantime::parse_duration)]
        validity: std::time::Duration,
    },
}

/// A failure to report on stderr before exiting with [`EXIT_INVALID`].
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Refused(pub String);

/// Parses the arguments, runs the subcommand and returns the exit status.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let mut stdout = std::io::stdout().lock();
    let result = match cli.command {
        Command::Check {
            source,
            output,
            pre: true,
        } => check::run_pre(&source, output, &mut stdout),
        Command::Check { source, output, .. } => check::run(&source, output, &mut stdout),
        Command::Explain {
            source,
            from,
            gateway_namespace,
            objects,
            output,
            target,
        } => explain::run(
            &explain::ExplainArgs {
                source: &source,
                from: from.as_deref(),
                gateway_namespace: &gateway_namespace,
                objects,
            },
            output,
            &target,
            &mut stdout,
        ),
        Command::Imports {
            source,
            cluster,
            output,
        } => imports::run(&source, cluster.as_deref(), output, &mut stdout),
        Command::Link {
            mode: Some(LinkMode::Export(args)),
            ..
        } => {
            init_logging(cli.log_format, "warn");
            peer::run_export(&args, &mut stdout)
        }
        Command::Link {
            mode: None,
            args: Some(args),
            apply,
            print_secret,
        } => {
            init_logging(cli.log_format, "warn");
            let what = match (apply, print_secret) {
                (true, _) => link::LinkAction::Apply,
                (false, true) => link::LinkAction::PrintSecret,
                (false, false) => link::LinkAction::DryRun,
            };
            link::run_link(&args, what, &mut stdout)
        }
        Command::Link { .. } => Err(Refused(
            "error: strait link needs --kubeconfig (the remote cluster, linked by feed; with --api, through its API server) or `export` (this cluster's peer document)".to_owned(),
        )),
        Command::Unlink {
            mode: Some(UnlinkMode::Peer(args)),
            ..
        } => {
            init_logging(cli.log_format, "warn");
            peer::run_unpeer(&args, &mut stdout)
        }
        Command::Unlink {
            mode: None,
            args: Some(args),
        } => {
            init_logging(cli.log_format, "warn");
            link::run_unlink(&args, &mut stdout)
        }
        Command::Unlink { .. } => Err(Refused(
            "error: strait unlink needs --kubeconfig (the remote cluster; with --api, a link through its API server) or `peer CLUSTER` (this cluster's peer Secrets naming it)".to_owned(),
        )),
        Command::Status(args) => status::run(&args, &mut stdout),
        Command::Feed(args) => {
            init_logging(cli.log_format, "warn");
            feed::run(&args, &mut stdout)
        }
        Command::Run(args) => {
            init_logging(cli.log_format, "info");
            run::run(&args)
        }
        Command::Demo(args) => {
            init_logging(cli.log_format, "warn");
            demo::run(&args)
        }
        Command::Certs {
            out,
            clusterset,
            clusters,
            validity,
        } => certs::run(&out, &clusterset, &clusters, validity),
    };
    let _ = stdout.flush();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(refused) => {
            eprintln!("{refused}");
            ExitCode::from(EXIT_INVALID)
        }
    }
}

/// Writes to stdout; a closed pipe (`strait check | head`) is not an error worth a panic.
fn emit(out: &mut dyn Write, text: &str) -> Result<(), Refused> {
    out.write_all(text.as_bytes())
        .map_err(|e| Refused(format!("cannot write output: {e}")))
}

/// Logs to stderr, filtered by `RUST_LOG` (default `default_filter`: the
/// demo logs warnings only, its own output being the table). Text lines
/// carry colour codes only when stderr is a terminal and `NO_COLOR` is not
/// set (no-color.org): a log collector reading a pod's output gets plain
/// text.
fn init_logging(format: LogFormat, default_filter: &str) {
    use std::io::IsTerminal;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_filter));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => builder
            .with_ansi(
                std::io::stderr().is_terminal()
                    && std::env::var_os("NO_COLOR").is_none_or(|value| value.is_empty()),
            )
            .try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
}

/// The multi-threaded runtime the data plane runs on.
fn runtime() -> Result<tokio::runtime::Runtime, Refused> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| Refused(format!("cannot start the runtime: {e}")))
}
