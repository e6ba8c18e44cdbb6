//! `strait explain`: the routing decision for one service port, seen from one
//! cluster's gateway.

use std::fmt::Write as _;
use std::io::Write;

use crate::merge::BackendState;
use crate::model::Protocol;
use crate::routing::report::PortReport;
use crate::routing::{RouteTable, ServiceRoutes};

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

pub(super) fn run(
    source: &SourceArgs,
    from: Option<&str>,
    output: Output,
    target: &str,
    out: &mut dyn Write,
) -> Result<(), Refused> {
    let target = parse_target(target)?;
    let loaded = load_as(source, Strictness::LeaveOut)?;
    for warning in &loaded.warnings {
        eprintln!("{warning}");
    }
    let viewer = from
        .map(str::to_owned)
        .or_else(|| loaded.settings.cluster.clone())
        .or_else(|| loaded.local.clone())
        .ok_or_else(|| {
            Refused(
                "no viewing cluster: pass --from CLUSTER or set `cluster` in gateway.yaml"
                    .to_owned(),
            )
        })?;
    let table = RouteTable::build(&loaded.set, &loaded.merged, &viewer)
        .map_err(|e| Refused(e.to_string()))?;
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
        .ok_or_else(|| not_exposed(service, &target))?;
    let report = PortReport::new(&table, service, route);
    match output {
        Output::Json => {
            let json = serde_json::to_string_pretty(&report)
                .map_err(|e| Refused(format!("cannot encode report: {e}")))?;
            emit(out, &format!("{json}\n"))
        }
        Output::Text => emit(out, &render(&report)),
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

fn render(report: &PortReport) -> String {
    let mut text = String::new();
    let _ = writeln!(
        text,
        "{}:{}/{} (port {:?}) from {} on network {}",
        report.service,
        report.port,
        report.protocol,
        report.port_name,
        report.from.cluster,
        report.from.network
    );
    if !report.conflicts.is_empty() {
        let _ = writeln!(text, "conflicts: {}", report.conflicts.join(", "));
    }
    if let Some(access) = &report.access {
        let _ = writeln!(text, "access: {access}");
    }
    if let Some(told) = &report.proxy_protocol {
        let _ = writeln!(text, "proxy protocol: {told}");
    }
    if let Some(refused) = &report.refused {
        let _ = writeln!(
            text,
            "refused: {refused}; no backend is tried, and its gateways answer 403"
        );
    }
    let _ = writeln!(text, "backends ({}):", report.backends.len());
    for backend in &report.backends {
        let address = std::net::SocketAddr::new(backend.address, backend.port);
        let via = backend
            .gateways
            .as_ref()
            .map(|g| {
                let list: Vec<String> = g.iter().map(ToString::to_string).collect();
                format!(" via {}", list.join(", "))
            })
            .unwrap_or_default();
        let state = match backend.state {
            BackendState::Ready => "",
            BackendState::ServingTerminating => " (serving, terminating)",
        };
        let _ = writeln!(
            text,
            "  {:<16} {:<12} {:<24} {}{via}{state}",
            backend.cluster, backend.network, address, backend.path
        );
    }
    if !report.excluded.is_empty() {
        let _ = writeln!(text, "excluded ({}):", report.excluded.len());
        for exclusion in &report.excluded {
            let address = exclusion.address.map(|a| a.to_string()).unwrap_or_default();
            let _ = writeln!(
                text,
                "  {:<16} {:<24} {}",
                exclusion.cluster, address, exclusion.reason
            );
        }
    }
    text
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
}
