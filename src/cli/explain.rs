//! `strait explain`: the routing decision for one service port, seen from one
//! cluster's gateway.

use std::fmt::Write as _;
use std::io::Write;

use std::time::Duration;

use serde_json::Value;

use crate::model::Protocol;
use crate::routing::report::PortReport;
use crate::routing::{RouteTable, ServiceRoutes};

use super::linked::text;
use super::load::{SourceArgs, Strictness, load_as};
use super::{Output, Refused, emit};

/// A parsed `NAMESPACE/NAME:PORT[/PROTOCOL]`.
#[derive(Debug, PartialEq, Eq)]
struct Target {
    namespace: String,
    name: String,
    port: u16,
    protocol: Protocol,
}

fn parse_target(text: &str) -> Result<Target, Refused> {
    let usage = |why: &str| {
        Refused(format!(
            "invalid target {text:?}: {why}; expected NAMESPACE/NAME:PORT[/PROTOCOL], e.g. shop/cart:80/TCP"
        ))
    };
    let (service, port_part) = text.rsplit_once(':').ok_or_else(|| usage("no port"))?;
    let (namespace, name) = service
        .split_once('/')
        .ok_or_else(|| usage("no namespace"))?;
    if namespace.is_empty() || name.is_empty() {
        return Err(usage("empty namespace or name"));
    }
    let (port, protocol) = match port_part.split_once('/') {
        Some((port, protocol)) => (
            port,
            Protocol::parse_loose(protocol).map_err(|e| usage(&e.to_string()))?,
        ),
        None => (port_part, Protocol::Tcp),
    };
    let port = port
        .parse::<u16>()
        .ok()
        .filter(|p| *p != 0)
        .ok_or_else(|| usage("the port must be a number in 1-65535"))?;
    Ok(Target {
        namespace: namespace.to_owned(),
        name: name.to_owned(),
        port,
        protocol,
    })
}

/// How `strait explain` reads the decision.
pub(super) struct ExplainArgs<'a> {
    pub source: &'a SourceArgs,
    /// The viewing cluster, when not the local one.
    pub from: Option<&'a str>,
    /// With `--kube`: the gateway's namespace, whose pod is asked.
    pub gateway_namespace: &'a str,
    /// With `--kube`: explain from the objects read here, not the gateway.
    pub objects: bool,
}

/// The admin port of a gateway pod (deploy/deployment.yaml).
const ADMIN_PORT: u16 = 15021;
/// How long the gateway's answer may take, port-forward included.
const GATEWAY_TIMEOUT: Duration = Duration::from_secs(15);

pub(super) fn run(
    args: &ExplainArgs<'_>,
    output: Output,
    target: &str,
    out: &mut dyn Write,
) -> Result<(), Refused> {
    let target = parse_target(target)?;
    // Read from the API servers, the local gateway's own routes are the
    // truth: it reads the peers by their feed (which this command cannot),
    // and holds the addresses local pods dial. The objects are read here
    // only when asked, for another viewer, or with no gateway to ask.
    if args.source.kube && args.from.is_none() && !args.objects {
        match super::runtime()?.block_on(from_gateway(args, &target)) {
            Ok((pod, report, ready)) => {
                eprintln!(
                    "explained by the gateway pod {}/{pod}, from its own routes (--objects: from the objects read here)",
                    args.gateway_namespace
                );
                return print(output, report, ready, out);
            }
            Err(GatewayAnswer::Refused(refused)) => return Err(refused),
            Err(GatewayAnswer::Unreachable(why)) => {
                eprintln!("cannot ask the gateway ({why}); explaining from the objects read here");
            }
        }
    }
    from_objects(args, &target, output, out)
}

/// Why the gateway gave no report.
enum GatewayAnswer {
    /// It answered: the service or port is not there.
    Refused(Refused),
    /// It could not be asked.
    Unreachable(String),
}

/// The gateway's report for `target`, and the local export's `Ready`
/// condition when there is one: (pod asked, report, ready).
async fn from_gateway(
    args: &ExplainArgs<'_>,
    target: &Target,
) -> Result<(String, Value, Option<Value>), GatewayAnswer> {
    let unreachable = |e: String| GatewayAnswer::Unreachable(e);
    let client = crate::controller::link::local_client(args.source.kubeconfig.as_deref())
        .await
        .map_err(|e| unreachable(e.to_string()))?;
    let namespace = args.gateway_namespace;
    let pod = super::forward::gateway_pod(&client, namespace)
        .await
        .map_err(unreachable)?;
    let path = format!("/debug/routes?service={}/{}", target.namespace, target.name);
    let ports =
        super::forward::get_json(&client, namespace, &pod, ADMIN_PORT, &path, GATEWAY_TIMEOUT)
            .await
            .map_err(unreachable)?;
    let ports = ports.as_array().cloned().unwrap_or_default();
    if ports.is_empty() {
        return Err(GatewayAnswer::Refused(Refused(format!(
            "service {}/{} is not exported by any cluster the gateway {namespace}/{pod} knows",
            target.namespace, target.name
        ))));
    }
    let report = ports
        .iter()
        .find(|p| {
            p["port"].as_u64() == Some(u64::from(target.port))
                && p["protocol"].as_str() == Some(target.protocol.as_str())
        })
        .cloned()
        .ok_or_else(|| {
            let exposed: Vec<String> = ports
                .iter()
                .map(|p| {
                    format!(
                        "{}:{}/{}",
                        text(&p["portName"]),
                        text(&p["port"]),
                        text(&p["protocol"])
                    )
                })
                .collect();
            GatewayAnswer::Refused(Refused(format!(
                "service {}/{} does not expose port {}/{}; it exposes {}",
                target.namespace,
                target.name,
                target.port,
                target.protocol,
                exposed.join(", ")
            )))
        })?;
    let ready = export_ready(&client, target).await;
    Ok((pod, report, ready))
}

/// The local ServiceExport's `Ready` condition, when it is exported here.
async fn export_ready(client: &kube::Client, target: &Target) -> Option<Value> {
    use crate::discovery::kube::client::Kind;
    let resource = kube::api::ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk(
        Kind::ServiceExport.group(),
        "v1alpha1",
        "ServiceExport",
    ));
    let api: kube::Api<kube::api::DynamicObject> =
        kube::Api::namespaced_with(client.clone(), &target.namespace, &resource);
    let export = api.get_opt(&target.name).await.ok().flatten()?;
    export.data["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == crate::export_status::READY_CONDITION)
        .cloned()
}

/// Explains from the objects read here (a directory, or the API servers).
fn from_objects(
    args: &ExplainArgs<'_>,
    target: &Target,
    output: Output,
    out: &mut dyn Write,
) -> Result<(), Refused> {
    let loaded = load_as(args.source, Strictness::LeaveOut)?;
    for warning in &loaded.warnings {
        eprintln!("{warning}");
    }
    let viewer = args
        .from
        .map(str::to_owned)
        .or_else(|| loaded.settings.cluster.clone())
        .or_else(|| loaded.local.clone())
        .ok_or_else(|| {
            Refused(
                "no viewing cluster: pass --from CLUSTER or set `cluster` in gateway.yaml"
                    .to_owned(),
            )
        })?;
    let mut table = RouteTable::build(&loaded.set, &loaded.merged, &viewer)
        .map_err(|e| Refused(e.to_string()))?;
    let local_viewer = loaded.local.as_deref() == Some(viewer.as_str());
    // A remote pod of a headless service is dialled here at its per-pod
    // derived Service.
    if let Some(observed) = loaded.observed.as_ref().filter(|_| local_viewer) {
        table.set_pod_addresses(observed.pod_addresses().iter());
    }
    let service = table
        .service(&target.namespace, &target.name)
        .ok_or_else(|| {
            Refused(format!(
                "service {}/{} is not exported by any cluster",
                target.namespace, target.name
            ))
        })?;
    let route = service
        .port(target.protocol, target.port)
        .ok_or_else(|| not_exposed(service, target))?;
    let report = serde_json::to_value(PortReport::new(&table, service, route))
        .map_err(|e| Refused(format!("cannot encode report: {e}")))?;
    // The local export's Ready condition says who imports the service.
    let ready = loaded
        .local_exports
        .as_deref()
        .filter(|_| local_viewer)
        .and_then(|exports| exports.exports.iter().find(|e| e.key == service.key))
        .and_then(|export| {
            export
                .conditions
                .iter()
                .find(|c| c["type"] == crate::export_status::READY_CONDITION)
                .cloned()
        });
    print(output, report, ready, out)
}

/// Prints one port's report, with the local export's `Ready` condition.
fn print(
    output: Output,
    mut report: Value,
    ready: Option<Value>,
    out: &mut dyn Write,
) -> Result<(), Refused> {
    match output {
        Output::Json => {
            if let Some(ready) = ready {
                report["exportedHere"] = serde_json::json!({
                    "ready": ready["status"], "reason": ready["reason"], "message": ready["message"],
                });
            }
            let json = serde_json::to_string_pretty(&report)
                .map_err(|e| Refused(format!("cannot encode report: {e}")))?;
            emit(out, &format!("{json}\n"))
        }
        Output::Text => {
            let mut text = render(&report);
            if let Some(ready) = ready {
                let _ = writeln!(
                    text,
                    "exported here: Ready={} ({}): {}",
                    self::text(&ready["status"]),
                    self::text(&ready["reason"]),
                    self::text(&ready["message"])
                );
            }
            emit(out, &text)
        }
    }
}

fn not_exposed(service: &ServiceRoutes, target: &Target) -> Refused {
    let exposed: Vec<String> = service
        .ports
        .iter()
        .map(|p| format!("{}:{}/{}", p.name, p.port, p.protocol))
        .collect();
    Refused(format!(
        "service {} does not expose port {}/{}; it exposes {}",
        service.key,
        target.port,
        target.protocol,
        if exposed.is_empty() {
            "no ports".to_owned()
        } else {
            exposed.join(", ")
        }
    ))
}

/// The text of a port's report (`PortReport` as JSON, from this command's
/// own table or the gateway's `/debug/routes`).
fn render(report: &Value) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{}:{}/{} (port {:?}) from {} on network {}",
        text(&report["service"]),
        text(&report["port"]),
        text(&report["protocol"]),
        text(&report["portName"]),
        text(&report["from"]["cluster"]),
        text(&report["from"]["network"])
    );
    let listed = |key: &str| -> Vec<String> {
        report[key]
            .as_array()
            .into_iter()
            .flatten()
            .map(text)
            .collect()
    };
    let conflicts = listed("conflicts");
    if !conflicts.is_empty() {
        let _ = writeln!(out, "conflicts: {}", conflicts.join(", "));
    }
    if let Some(access) = report["access"].as_str() {
        let _ = writeln!(out, "access: {access}");
    }
    if let Some(told) = report["proxyProtocol"].as_str() {
        let _ = writeln!(out, "proxy protocol: {told}");
    }
    if let Some(refused) = report["refused"].as_str() {
        let _ = writeln!(
            out,
            "refused: {refused}; no backend is tried, and its gateways answer 403"
        );
    }
    let backends = report["backends"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    let _ = writeln!(out, "backends ({}):", backends.len());
    for backend in backends {
        let address = match backend["address"].as_str() {
            Some(ip) if ip.contains(':') => format!("[{ip}]:{}", text(&backend["port"])),
            _ => format!("{}:{}", text(&backend["address"]), text(&backend["port"])),
        };
        let gateways: Vec<String> = backend["gateways"]
            .as_array()
            .into_iter()
            .flatten()
            .map(text)
            .collect();
        let mut via = if gateways.is_empty() {
            String::new()
        } else {
            format!(" via {}", gateways.join(", "))
        };
        let dialled = texts(&backend["dialHere"]);
        if !dialled.is_empty() {
            let _ = write!(via, "; pods here dial {}", dialled.join(", "));
        }
        let state = if backend["state"] == "serving-terminating" {
            " (serving, terminating)"
        } else {
            ""
        };
        let _ = writeln!(
            out,
            "  {:<16} {:<12} {:<24} {}{via}{state}",
            text(&backend["cluster"]),
            text(&backend["network"]),
            address,
            text(&backend["path"])
        );
    }
    render_locality(&mut out, &report["locality"]);
    let excluded = report["excluded"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    if !excluded.is_empty() {
        let _ = writeln!(out, "excluded ({}):", excluded.len());
        for exclusion in excluded {
            let address = exclusion["address"].as_str().unwrap_or_default();
            let _ = writeln!(
                out,
                "  {:<16} {:<24} {}",
                text(&exclusion["cluster"]),
                address,
                text(&exclusion["reason"])
            );
        }
    }
    out
}

/// The gateway's locality tiers of a port and what each takes of new
/// connections now (only in the gateway's answer, not from objects).
fn render_locality(out: &mut String, locality: &Value) {
    let Some(tiers) = locality["tiers"].as_array() else {
        return;
    };
    let grading = match locality["minimumHealthy"].as_u64() {
        Some(minimum) if minimum > 1 => {
            format!("a tier short of {minimum} backends keeps that fraction")
        }
        _ => "the nearest tier with a backend takes all".to_owned(),
    };
    let _ = writeln!(
        out,
        "locality {} ({grading}), new connections now:",
        text(&locality["locality"]),
    );
    let layer = |from: &Value| match from.as_str() {
        Some("admin") => "this cluster's routing settings",
        Some("export") => "the export's annotations",
        Some("traffic-distribution") => "the Service's trafficDistribution",
        _ => "this gateway's tuning",
    };
    let _ = writeln!(
        out,
        "  locality set by {}",
        layer(&locality["localityFrom"])
    );
    if let Some(fence) = locality["fence"].as_str() {
        let _ = writeln!(
            out,
            "  fenced to {fence} (set by {}); {} backends outside are never used",
            layer(&locality["fenceFrom"]),
            text(&locality["outsideFence"])
        );
    }
    for tier in tiers {
        let _ = writeln!(
            out,
            "  {:<16} {:>5.1} %  ({} of {} backends not ejected)",
            text(&tier["tier"]),
            tier["share"].as_f64().unwrap_or_default() * 100.0,
            text(&tier["candidates"]),
            text(&tier["backends"])
        );
    }
    for (field, label) in [
        ("ejected", "ejected now"),
        ("downByHealthCheck", "of which down by health checks"),
    ] {
        let listed = texts(&locality[field]);
        if !listed.is_empty() {
            let _ = writeln!(out, "  {label}: {}", listed.join(", "));
        }
    }
}

/// A JSON array's items as text; nothing when it is not an array.
fn texts(value: &Value) -> Vec<String> {
    value.as_array().into_iter().flatten().map(text).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_parse_with_an_optional_protocol() {
        assert_eq!(
            parse_target("shop/cart:80").ok(),
            Some(Target {
                namespace: "shop".into(),
                name: "cart".into(),
                port: 80,
                protocol: Protocol::Tcp
            })
        );
        assert_eq!(
            parse_target("shop/dns:53/udp").map(|t| t.protocol).ok(),
            Some(Protocol::Udp)
        );
        for bad in [
            "shop/cart",
            "cart:80",
            "/cart:80",
            "shop/cart:0",
            "shop/cart:99999",
            "shop/cart:80/icmp",
        ] {
            assert!(parse_target(bad).is_err(), "{bad} should be refused");
        }
    }

    #[test]
    fn the_gateways_locality_tiers_are_printed() {
        let report = serde_json::json!({
            "service": "shop/cart", "port": 80, "protocol": "TCP", "portName": "http",
            "from": {"cluster": "c1", "network": "net-a"},
            "backends": [], "excluded": [],
            "locality": {
                "locality": "cluster", "localityFrom": "export", "minimumHealthy": 4,
                "fence": "networks net-a,net-b", "fenceFrom": "admin", "outsideFence": 2,
                "tiers": [
                    {"tier": "this cluster", "backends": 4, "candidates": 2, "share": 0.5},
                    {"tier": "this network", "backends": 3, "candidates": 3, "share": 0.375},
                    {"tier": "other networks", "backends": 3, "candidates": 3, "share": 0.125}
                ],
                "ejected": ["net-a/10.1.0.1:8042"],
                "downByHealthCheck": ["net-a/10.1.0.1:8042"]
            }
        });
        let text = render(&report);
        for line in [
            "locality cluster (a tier short of 4 backends keeps that fraction), new connections now:",
            "  locality set by the export's annotations",
            "  fenced to networks net-a,net-b (set by this cluster's routing settings); 2 backends outside are never used",
            "  this cluster      50.0 %  (2 of 4 backends not ejected)",
            "  other networks    12.5 %  (3 of 3 backends not ejected)",
            "  ejected now: net-a/10.1.0.1:8042",
            "  of which down by health checks: net-a/10.1.0.1:8042",
        ] {
            assert!(text.contains(line), "{line:?} in:\n{text}");
        }
        let mut all_or_nothing = report.clone();
        all_or_nothing["locality"]["minimumHealthy"] = 1.into();
        assert!(render(&all_or_nothing).contains(
            "locality cluster (the nearest tier with a backend takes all), new connections now:"
        ));
        // From objects there is no chooser: no locality lines.
        let mut without = report.clone();
        without["locality"] = Value::Null;
        assert!(!render(&without).contains("locality"));
    }
}
