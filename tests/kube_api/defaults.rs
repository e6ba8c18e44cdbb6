//! What a real server fills in and checks when a Service, a Namespace or an
//! EndpointSlice is written over HTTP: defaults, ClusterIP allocation from
//! 10.96.0.0/16 and fd00:10:96::/112, the immutability of allocated
//! addresses, and a slice's empty endpoints stored as null.

use std::collections::HashSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use serde_json::{Value, json};

use super::write::{Refused, invalid};
use super::{ObjectKey, Resource, State};

/// The IPv4 service range, 10.96.0.0/16: offsets 1 to 65534.
const V4_BASE: u32 = u32::from_be_bytes([10, 96, 0, 0]);
const V4_SIZE: u32 = (1 << 16) - 2;
/// The IPv6 service range, fd00:10:96::/112: offsets 1 to 65535.
const V6_BASE: u128 = 0xfd00_0010_0096_0000_0000_0000_0000_0000;
const V6_SIZE: u32 = (1 << 16) - 1;

/// Where the next sequential search for a free address starts, per family.
#[derive(Debug, Default)]
pub(super) struct Cursors {
    v4: u32,
    v6: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Family {
    V4,
    V6,
}

impl Family {
    fn parse(name: &str) -> Option<Family> {
        match name {
            "IPv4" => Some(Family::V4),
            "IPv6" => Some(Family::V6),
            _ => None,
        }
    }

    fn of(address: &IpAddr) -> Family {
        match address {
            IpAddr::V4(_) => Family::V4,
            IpAddr::V6(_) => Family::V6,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Family::V4 => "IPv4",
            Family::V6 => "IPv6",
        }
    }

    fn other(self) -> Family {
        match self {
            Family::V4 => Family::V6,
            Family::V6 => Family::V4,
        }
    }

    fn range(self) -> &'static str {
        match self {
            Family::V4 => "10.96.0.0/16",
            Family::V6 => "fd00:10:96::/112",
        }
    }

    /// The address at `offset` (from 1) of the service range.
    fn address(self, offset: u32) -> IpAddr {
        match self {
            Family::V4 => IpAddr::V4(Ipv4Addr::from(V4_BASE + offset)),
            Family::V6 => IpAddr::V6(Ipv6Addr::from(V6_BASE + u128::from(offset))),
        }
    }

    fn in_range(self, address: &IpAddr) -> bool {
        match (self, address) {
            (Family::V4, IpAddr::V4(a)) => {
                let a = u32::from(*a);
                a > V4_BASE && a <= V4_BASE + V4_SIZE
            }
            (Family::V6, IpAddr::V6(a)) => {
                let a = u128::from(*a);
                a > V6_BASE && a <= V6_BASE + u128::from(V6_SIZE)
            }
            _ => false,
        }
    }

    fn size(self) -> u32 {
        match self {
            Family::V4 => V4_SIZE,
            Family::V6 => V6_SIZE,
        }
    }
}

/// Defaults of an object created over HTTP; `Err` is the server's refusal.
pub(super) fn on_create(
    state: &mut State,
    resource: &Resource,
    key: &ObjectKey,
    object: &mut Value,
) -> Result<(), Refused> {
    match resource.kind {
        "Service" => service(state, key, None, object),
        "Namespace" => {
            namespace(&key.2, object);
            if object["spec"]["finalizers"].is_null() {
                object["spec"]["finalizers"] = json!(["kubernetes"]);
            }
            object["status"] = json!({"phase": "Active"});
            Ok(())
        }
        "EndpointSlice" => {
            empty_endpoints_as_null(object);
            Ok(())
        }
        _ => Ok(()),
    }
}

/// Defaults and checks of an object changed over HTTP from `old`.
pub(super) fn on_update(
    state: &mut State,
    resource: &Resource,
    key: &ObjectKey,
    old: &Value,
    object: &mut Value,
) -> Result<(), Refused> {
    match resource.kind {
        "Service" => service(state, key, Some(old), object),
        "Namespace" => {
            namespace(&key.2, object);
            Ok(())
        }
        "EndpointSlice" => {
            empty_endpoints_as_null(object);
            Ok(())
        }
        _ => Ok(()),
    }
}

/// A real server stores an EndpointSlice without endpoints with
/// `"endpoints": null` (Go's nil list), whether it was written as `[]` or
/// left out, and answers it so.
fn empty_endpoints_as_null(object: &mut Value) {
    if object["endpoints"].as_array().is_none_or(Vec::is_empty) {
        object["endpoints"] = Value::Null;
    }
}

/// Every Namespace carries its name as a label.
fn namespace(name: &str, object: &mut Value) {
    object["metadata"]["labels"]["kubernetes.io/metadata.name"] = name.into();
}

fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v.as_str().map(str::to_owned))
        .collect()
}

fn quoted(values: &[String]) -> String {
    Value::from(values.to_vec()).to_string()
}

/// A Service's defaults, its cluster IPs checked and allocated.
fn service(
    state: &mut State,
    key: &ObjectKey,
    old: Option<&Value>,
    object: &mut Value,
) -> Result<(), Refused> {
    let name = key.2.clone();
    let refuse =
        |field: &str, message: String| Box::new(invalid("Service", &name, field, &message));
    if !object["spec"].is_object() {
        object["spec"] = json!({});
    }
    let spec = object["spec"].as_object_mut().expect("spec is a map");
    let kind = spec
        .entry("type")
        .or_insert_with(|| "ClusterIP".into())
        .as_str()
        .unwrap_or("")
        .to_owned();
    if !["ClusterIP", "NodePort", "LoadBalancer", "ExternalName"].contains(&kind.as_str()) {
        return Err(refuse(
            "spec.type",
            format!(
                "Unsupported value: {kind:?}: supported values: \"ClusterIP\", \"ExternalName\", \"LoadBalancer\", \"NodePort\""
            ),
        ));
    }
    for port in spec
        .get_mut("ports")
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
        .filter_map(Value::as_object_mut)
    {
        port.entry("protocol").or_insert_with(|| "TCP".into());
        if !port.contains_key("targetPort")
            && let Some(number) = port.get("port").cloned()
        {
            port.insert("targetPort".to_owned(), number);
        }
    }
    spec.entry("sessionAffinity")
        .or_insert_with(|| "None".into());
    if kind == "ExternalName" {
        return Ok(());
    }
    spec.entry("internalTrafficPolicy")
        .or_insert_with(|| "Cluster".into());
    let old_spec = old.map(|old| &old["spec"]);
    let old_ips = old_spec.map(ips_of).unwrap_or_default();
    if let Some(old_spec) = old_spec {
        // What the server allocated stays when a write leaves it out.
        if spec.get("clusterIP").is_none() && spec.get("clusterIPs").is_none() {
            for field in ["clusterIP", "clusterIPs"] {
                if let Some(value) = old_spec.get(field) {
                    spec.insert(field.to_owned(), value.clone());
                }
            }
        }
        for field in ["ipFamilies", "ipFamilyPolicy"] {
            if spec.get(field).is_none()
                && let Some(value) = old_spec.get(field)
            {
                spec.insert(field.to_owned(), value.clone());
            }
        }
        // A changed clusterIP with the old clusterIPs: the new primary.
        let ip = spec.get("clusterIP").and_then(Value::as_str);
        if ip.is_some_and(|ip| !ip.is_empty())
            && ip != old_spec["clusterIP"].as_str()
            && spec.get("clusterIPs") == old_spec.get("clusterIPs")
            && let Some(Value::Array(ips)) = spec.get("clusterIPs").cloned()
        {
            let mut ips = ips;
            if let Some(first) = ips.first_mut() {
                *first = ip.unwrap_or_default().into();
            }
            spec.insert("clusterIPs".to_owned(), Value::Array(ips));
        }
    }
    let mut ips = strings(spec.get("clusterIPs").unwrap_or(&Value::Null));
    match spec.get("clusterIP").and_then(Value::as_str) {
        Some(ip) if !ip.is_empty() => {
            if ips.is_empty() {
                ips.push(ip.to_owned());
            } else if ips[0] != ip {
                return Err(refuse(
                    "spec.clusterIPs[0]",
                    format!(
                        "Invalid value: {}: must match clusterIP when set",
                        quoted(&ips)
                    ),
                ));
            }
        }
        _ => {}
    }
    for (i, (new, old)) in ips.iter().zip(&old_ips).enumerate() {
        if new != old {
            return Err(refuse(
                &format!("spec.clusterIPs[{i}]"),
                format!("Invalid value: {}: may not change once set", quoted(&ips)),
            ));
        }
    }
    let headless = ips.first().is_some_and(|ip| ip == "None");
    let mut families = Vec::new();
    for name in strings(spec.get("ipFamilies").unwrap_or(&Value::Null)) {
        let Some(family) = Family::parse(&name) else {
            return Err(refuse(
                "spec.ipFamilies",
                format!("Unsupported value: {name:?}: supported values: \"IPv4\", \"IPv6\""),
            ));
        };
        families.push(family);
    }
    let mut parsed = Vec::new();
    if !headless {
        for (i, ip) in ips.iter().enumerate() {
            let Ok(address) = ip.parse::<IpAddr>() else {
                return Err(refuse(
                    &format!("spec.clusterIPs[{i}]"),
                    format!("Invalid value: {ip:?}: must be a valid IP address"),
                ));
            };
            parsed.push(address);
        }
        if families.is_empty() {
            families = parsed.iter().map(Family::of).collect();
        }
    }
    let policy = match spec.get("ipFamilyPolicy").and_then(Value::as_str) {
        Some(policy) => policy.to_owned(),
        None if families.len() > 1 || ips.len() > 1 => "RequireDualStack".to_owned(),
        None => "SingleStack".to_owned(),
    };
    let dual = match policy.as_str() {
        "SingleStack" => false,
        "PreferDualStack" | "RequireDualStack" => true,
        other => {
            return Err(refuse(
                "spec.ipFamilyPolicy",
                format!(
                    "Unsupported value: {other:?}: supported values: \"PreferDualStack\", \"RequireDualStack\", \"SingleStack\""
                ),
            ));
        }
    };
    if !dual && (families.len() > 1 || ips.len() > 1) {
        return Err(refuse(
            "spec.ipFamilyPolicy",
            "Invalid value: \"SingleStack\": must be RequireDualStack or PreferDualStack when multiple IP families are specified".to_owned(),
        ));
    }
    if families.len() > 2 || (families.len() == 2 && families[0] == families[1]) {
        return Err(refuse(
            "spec.ipFamilies",
            "Invalid value: two families of one kind, or more than two".to_owned(),
        ));
    }
    if families.is_empty() {
        families.push(Family::V4);
    }
    if state.single_stack {
        // As the real server words it, for a cluster with one service CIDR.
        if policy == "RequireDualStack" {
            return Err(refuse(
                "spec.ipFamilyPolicy",
                "Invalid value: \"RequireDualStack\": this cluster is not configured for dual-stack services".to_owned(),
            ));
        }
        if let Some(i) = families.iter().position(|f| *f != Family::V4) {
            return Err(refuse(
                &format!("spec.ipFamilies[{i}]"),
                format!(
                    "Invalid value: {:?}: not configured on this cluster",
                    families[i].name()
                ),
            ));
        }
    } else if dual && families.len() == 1 {
        families.push(families[0].other());
    }
    if ips.len() > families.len() {
        return Err(refuse(
            "spec.clusterIPs",
            format!(
                "Invalid value: {}: more addresses than IP families",
                quoted(&ips)
            ),
        ));
    }
    if headless {
        ips = vec!["None".to_owned()];
    } else {
        let live = live_addresses(state, key);
        for (i, address) in parsed.iter().enumerate() {
            let family = families[i];
            if Family::of(address) != family {
                return Err(refuse(
                    &format!("spec.clusterIPs[{i}]"),
                    format!(
                        "Invalid value: {:?}: expected an {} address",
                        ips[i],
                        family.name()
                    ),
                ));
            }
            if old_ips.contains(&ips[i]) {
                continue;
            }
            if !family.in_range(address) {
                return Err(refuse(
                    "spec.clusterIPs",
                    format!(
                        "Invalid value: {}: failed to allocate IP {}: provided IP is not in the valid range. The range of valid IPs is {}",
                        quoted(&ips),
                        ips[i],
                        family.range()
                    ),
                ));
            }
            if live.contains(address) {
                return Err(refuse(
                    "spec.clusterIPs",
                    format!(
                        "Invalid value: {}: failed to allocate IP {}: provided IP is already allocated",
                        quoted(&ips),
                        ips[i]
                    ),
                ));
            }
        }
        for &family in &families[ips.len()..] {
            match allocate(state, &live, family) {
                Some(address) => ips.push(address.to_string()),
                None => {
                    return Err(refuse(
                        "spec.clusterIPs",
                        format!(
                            "Invalid value: {}: range {} is full",
                            quoted(&ips),
                            family.range()
                        ),
                    ));
                }
            }
        }
    }
    let spec = object["spec"].as_object_mut().expect("spec is a map");
    spec.insert("clusterIP".to_owned(), ips[0].clone().into());
    spec.insert("clusterIPs".to_owned(), ips.into());
    let families: Vec<Value> = families.iter().map(|f| f.name().into()).collect();
    spec.insert("ipFamilies".to_owned(), families.into());
    spec.insert("ipFamilyPolicy".to_owned(), policy.into());
    Ok(())
}

/// The cluster IPs a Service spec names: `clusterIPs`, else `clusterIP`.
fn ips_of(spec: &Value) -> Vec<String> {
    let ips = strings(&spec["clusterIPs"]);
    if !ips.is_empty() {
        return ips;
    }
    spec["clusterIP"]
        .as_str()
        .filter(|ip| !ip.is_empty())
        .map(|ip| vec![ip.to_owned()])
        .unwrap_or_default()
}

/// The addresses of every Service but `key`.
fn live_addresses(state: &State, key: &ObjectKey) -> HashSet<IpAddr> {
    state
        .objects
        .iter()
        .filter(|(k, _)| k.0 == "services" && *k != key)
        .flat_map(|(_, service)| ips_of(&service["spec"]))
        .filter_map(|ip| ip.parse().ok())
        .collect()
}

/// The next free address of `family`, searching on from the last one.
fn allocate(state: &mut State, live: &HashSet<IpAddr>, family: Family) -> Option<IpAddr> {
    let cursor = match family {
        Family::V4 => &mut state.next_ip.v4,
        Family::V6 => &mut state.next_ip.v6,
    };
    let size = family.size();
    for step in 0..size {
        let offset = (*cursor + step) % size + 1;
        let address = family.address(offset);
        if !live.contains(&address) {
            *cursor = offset % size;
            return Some(address);
        }
    }
    None
}
