//! `strait status`: the cluster set on one screen, as one gateway sees it,
//! read from its admin port's `/debug/status`, which answers loopback
//! only: `--kube` reads it through the API server's port-forward to a
//! gateway pod ([`forward`](super::forward)); else through `kubectl -n
//! strait-system port-forward deploy/cluster-edge 15021`. Clusters with how each is read, its
//! state, network, gateways and this gateway's tunnel connections; the
//! services exported and in conflict; the imports, ready and not; the
//! findings. `--watch` prints it again at an interval.

use std::fmt::Write as _;
use std::io::Write;
use std::time::Duration;

use clap::ValueEnum;
use http_body_util::{BodyExt, Empty, Limited};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;

use super::{Refused, emit, runtime};

/// The most of `/debug/status` read: it lists at most a few dozen lines.
const MAX_BODY: usize = 4 << 20;

#[derive(Debug, Clone, Copy, ValueEnum, Default)]
pub enum StatusOutput {
    /// A table per part, for people.
    #[default]
    Text,
    /// The gateway's view as it is, one JSON object.
    Json,
}

#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    /// The gateway's admin address (`listeners.admin`), reached on
    /// loopback: through `kubectl port-forward`, or from inside the pod.
    #[arg(long, value_name = "URL", default_value = "http://127.0.0.1:15021")]
    admin: String,
    #[arg(long, value_enum, default_value_t)]
    output: StatusOutput,
    /// Print it again every interval until interrupted.
    #[arg(long, value_name = "INTERVAL", num_args = 0..=1, default_missing_value = "2s", value_parser = humantime::parse_duration)]
    watch: Option<Duration>,
    /// How long to wait for the gateway.
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = humantime::parse_duration)]
    timeout: Duration,
    /// Read a gateway pod's view through the Kubernetes API server (its
    /// port-forward to the pod's admin port, `--admin`'s port): no local
    /// port-forward, nothing run in the pod. The Lease holder is asked
    /// when it is ready (it alone plans the imports), else any ready pod.
    #[arg(long)]
    kube: bool,
    /// With --kube: the kubeconfig (default: as kubectl finds it).
    #[arg(long, value_name = "FILE", requires = "kube")]
    kubeconfig: Option<std::path::PathBuf>,
    /// With --kube: the gateway's namespace.
    #[arg(long, value_name = "NAMESPACE", default_value = "strait-system")]
    gateway_namespace: String,
    /// With --kube: this gateway pod rather than the Lease holder.
    #[arg(long, value_name = "POD", requires = "kube")]
    pod: Option<String>,
}

pub(super) fn run(args: &StatusArgs, out: &mut dyn Write) -> Result<(), Refused> {
    let url: hyper::Uri = format!("{}/debug/status", args.admin.trim_end_matches('/'))
        .parse()
        .map_err(|e| Refused(format!("error: --admin {}: {e}", args.admin)))?;
    runtime()?.block_on(async {
        let client = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
        let kube = match args.kube {
            true => Some(
                crate::controller::link::local_client(args.kubeconfig.as_deref())
                    .await
                    .map_err(|e| Refused(format!("error: {e}")))?,
            ),
            false => None,
        };
        loop {
            let view = match &kube {
                Some(kube) => {
                    let namespace = &args.gateway_namespace;
                    let pod = match &args.pod {
                        Some(pod) => pod.clone(),
                        None => super::forward::gateway_pod(kube, namespace)
                            .await
                            .map_err(|e| Refused(format!("error: {e}")))?,
                    };
                    let port = url.port_u16().unwrap_or(15021);
                    super::forward::get_json(
                        kube,
                        namespace,
                        &pod,
                        port,
                        "/debug/status",
                        args.timeout,
                    )
                    .await
                    .map_err(|e| Refused(format!("error: {e}")))?
                }
                None => fetch(&client, &url, args.timeout).await?,
            };
            let text = match args.output {
                StatusOutput::Json => {
                    let mut text = serde_json::to_string_pretty(&view)
                        .map_err(|e| Refused(format!("error: {e}")))?;
                    text.push('\n');
                    text
                }
                StatusOutput::Text => render(&view),
            };
            emit(out, &text)?;
            let Some(every) = args.watch else {
                return Ok(());
            };
            out.flush()
                .map_err(|e| Refused(format!("cannot write output: {e}")))?;
            tokio::time::sleep(every).await;
            emit(out, "\n")?;
        }
    })
}

async fn fetch(
    client: &Client<hyper_util::client::legacy::connect::HttpConnector, Empty<Bytes>>,
    url: &hyper::Uri,
    timeout: Duration,
) -> Result<Value, Refused> {
    let failed = |e: &dyn std::fmt::Display| {
        Refused(format!(
            "error: {url}: {e} (the admin port answers on loopback only: give --kube to read it through the API server, or `kubectl -n strait-system port-forward deploy/cluster-edge 15021`)"
        ))
    };
    let response = tokio::time::timeout(timeout, client.get(url.clone()))
        .await
        .map_err(|_| failed(&"no answer in time"))?
        .map_err(|e| failed(&e))?;
    let status = response.status();
    let body = tokio::time::timeout(
        timeout,
        Limited::new(response.into_body(), MAX_BODY).collect(),
    )
    .await
    .map_err(|_| failed(&"no answer in time"))?
    .map_err(|e| failed(&e))?
    .to_bytes();
    if !status.is_success() {
        return Err(failed(&format!(
            "{status}: {}",
            String::from_utf8_lossy(&body).trim()
        )));
    }
    serde_json::from_slice(&body).map_err(|e| failed(&format!("not JSON: {e}")))
}

/// The view as text: a header, a line per cluster, then services, imports
/// and findings.
fn render(view: &Value) -> String {
    let text = |v: &Value| match v {
        Value::String(s) => s.clone(),
        Value::Null => "-".to_owned(),
        other => other.to_string(),
    };
    let mut out = String::new();
    let _ = writeln!(
        out,
        "cluster {} ({}){}",
        text(&view["cluster"]),
        text(&view["source"]),
        if view["settled"] == false {
            ", not settled yet: some cluster has not spoken"
        } else {
            ""
        }
    );
    if let Some(clusters) = view["clusters"].as_array() {
        let mut rows = vec![[
            "CLUSTER".to_owned(),
            "READ FROM".to_owned(),
            "STATE".to_owned(),
            "SINCE".to_owned(),
            "NETWORK".to_owned(),
            "EXPORTED".to_owned(),
            "GATEWAYS".to_owned(),
            "TUNNEL h2/quic".to_owned(),
            "ANSWERED".to_owned(),
        ]];
        for cluster in clusters {
            let network = match (&cluster["network"], &cluster["networkAttested"]) {
                (Value::String(n), Value::Bool(false)) => format!("{n} (its own word)"),
                (network, _) => text(network),
            };
            let tunnel = &cluster["tunnelConnections"];
            rows.push([
                text(&cluster["id"]),
                text(&cluster["readFrom"]),
                text(&cluster["state"]),
                text(&cluster["since"]),
                network,
                text(&cluster["exported"]),
                cluster["gateways"]
                    .as_array()
                    .map(|g| g.iter().map(text).collect::<Vec<_>>().join(","))
                    .filter(|g| !g.is_empty())
                    .unwrap_or_else(|| "-".to_owned()),
                if tunnel.is_null() {
                    "-".to_owned()
                } else {
                    format!("{}/{}", text(&tunnel["h2"]), text(&tunnel["quic"]))
                },
                match cluster["probes"].as_object() {
                    None => "-".to_owned(),
                    Some(probes) => format!(
                        "{}/{}",
                        probes.values().filter(|p| p["error"].is_null()).count(),
                        cluster["gateways"].as_array().map_or(0, Vec::len)
                    ),
                },
            ]);
        }
        table(&mut out, &rows);
        for cluster in clusters {
            if let Some(error) = cluster["lastError"].as_str() {
                let _ = writeln!(out, "  {}: {error}", text(&cluster["id"]));
            }
            for (gateway, probe) in cluster["probes"].as_object().into_iter().flatten() {
                let id = text(&cluster["id"]);
                if let Some(error) = probe["error"].as_str() {
                    let _ = writeln!(out, "  {id} gateway {gateway} did not answer: {error}");
                }
                if let Some(skew) = probe["clockSkewMs"].as_i64().filter(|s| s.abs() >= 1_000) {
                    let _ = writeln!(
                        out,
                        "  {id} gateway {gateway}: its clock is {skew} ms from ours"
                    );
                }
                for difference in probe["networkMapDifferences"]
                    .as_array()
                    .into_iter()
                    .flatten()
                {
                    let _ = writeln!(
                        out,
                        "  {id} gateway {gateway}: network maps differ, {}",
                        text(difference)
                    );
                }
            }
        }
    }
    let services = &view["services"];
    if services.is_object() {
        let _ = writeln!(
            out,
            "services: {} exported in the set, {} in conflict",
            text(&services["exported"]),
            text(&services["inConflict"])
        );
    }
    let imports = &view["imports"];
    if imports["leader"] == false {
        let _ = writeln!(
            out,
            "imports: planned and written by the Lease holder, another replica (ask it)"
        );
    } else if imports.is_object() {
        let skipped = imports["skipped"]
            .as_object()
            .map(|s| {
                s.iter()
                    .map(|(why, n)| format!(", {n} not imported: {why}"))
                    .collect::<String>()
            })
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "imports: {} ({} ready, {} not){skipped}{}",
            text(&imports["total"]),
            text(&imports["ready"]),
            text(&imports["notReady"]),
            if imports["leader"] == true {
                "; this replica writes them"
            } else {
                ""
            }
        );
        let ports = &imports["ports"];
        if ports.is_object() {
            let _ = writeln!(
                out,
                "import ports: {} of {} in use ({}){}",
                text(&ports["used"]),
                text(&ports["size"]),
                text(&ports["range"]),
                match ports["exhausted"].as_u64() {
                    Some(n) if n > 0 =>
                        format!(", {n} service port(s) without one: the range is full"),
                    _ => String::new(),
                }
            );
        }
        for import in imports["notReadyListed"].as_array().into_iter().flatten() {
            let _ = writeln!(
                out,
                "  {} not ready, {}: {}",
                text(&import["service"]),
                text(&import["reason"]),
                text(&import["message"])
            );
        }
    }
    let findings = &view["findings"];
    let _ = writeln!(
        out,
        "findings: {} errors (objects left out), {} warnings",
        text(&findings["errors"]),
        text(&findings["warnings"])
    );
    for finding in findings["listed"].as_array().into_iter().flatten() {
        let _ = writeln!(out, "  {}", text(finding));
    }
    out
}

/// Left-aligned columns, two spaces apart.
fn table<const N: usize>(out: &mut String, rows: &[[String; N]]) {
    let mut widths = [0; N];
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    for row in rows {
        let mut line = String::new();
        for (cell, width) in row.iter().zip(widths) {
            let _ = write!(line, "{cell:width$}  ");
        }
        let _ = writeln!(out, "{}", line.trim_end());
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::render;

    #[test]
    fn the_text_names_each_cluster_its_state_and_what_is_wrong() {
        let view = json!({
            "cluster": "c1", "source": "kubernetes", "settled": true,
            "clusters": [
                {"id": "c1", "readFrom": "local", "state": "synced", "since": "2026-12-07T10:00:00Z",
                 "network": "net-a", "networkAttested": true, "exported": 3, "gateways": ["172.31.100.11:15008"],
                 "tunnelConnections": null, "lastError": null},
                {"id": "c3", "readFrom": "feed", "state": "stale", "since": "2026-12-07T10:05:00Z",
                 "network": "net-b", "networkAttested": false, "exported": 2, "gateways": ["172.31.100.13:15008"],
                 "tunnelConnections": {"h2": 1, "quic": 0}, "lastError": "connection refused",
                 "probes": {"172.31.100.13:15008": {"error": null, "clockSkewMs": -4200,
                            "networkMapDifferences": ["c2: net-a here, net-c there"]}}},
            ],
            "services": {"exported": 5, "inConflict": 1},
            "imports": {"leader": true, "total": 4, "ready": 3, "notReady": 1,
                        "notReadyListed": [{"service": "shop/cart", "reason": "ImportPortsExhausted", "message": "the range is full"}],
                        "skipped": {"no-namespace": 2},
                        "ports": {"range": "30000-30009", "size": 10, "used": 10, "exhausted": 1}},
            "findings": {"errors": 1, "warnings": 0, "listed": ["ServiceExport shop/x: no Service"]},
        });
        let text = render(&view);
        for said in [
            "cluster c1 (kubernetes)",
            "c3       feed",
            "stale",
            "net-b (its own word)",
            "1/0",
            "c3: connection refused",
            "1/1",
            "c3 gateway 172.31.100.13:15008: its clock is -4200 ms from ours",
            "c3 gateway 172.31.100.13:15008: network maps differ, c2: net-a here, net-c there",
            "5 exported in the set, 1 in conflict",
            "imports: 4 (3 ready, 1 not), 2 not imported: no-namespace; this replica writes them",
            "shop/cart not ready, ImportPortsExhausted: the range is full",
            "import ports: 10 of 10 in use (30000-30009), 1 service port(s) without one: the range is full",
            "findings: 1 errors",
            "ServiceExport shop/x: no Service",
        ] {
            assert!(text.contains(said), "{said:?} in:\n{text}");
        }
    }
}
