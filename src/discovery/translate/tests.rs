//! Translation tests: YAML text goes through `parse_file`, then
//! `translate_cluster` and `assemble`, exactly as the file source does.

use std::net::IpAddr;

use super::*;
use crate::diagnostics::Diagnostic;
use crate::discovery::objects::parse_file;
use crate::model::names::{
    ENDPOINTSLICE_MANAGED_BY_LABEL, IMPORTED_SLICE_MANAGER, MCS_SOURCE_CLUSTER_LABEL,
};
use crate::model::{Endpoint, SessionAffinity};
use crate::model::{GatewayHost, IpFamily, MAX_CLUSTER_ID_LEN, ServicePort, ServiceType};

const FOLDER: &str = "clusters/c1";
const FILE: &str = "clusters/c1/objects.yaml";
/// Document 1 of every `in_c1` file: the cluster names itself `c1`.
const ID: &str = "apiVersion: about.k8s.io/v1alpha1\nkind: ClusterProperty\nmetadata: {name: cluster.clusterset.k8s.io}\nspec: {value: c1}\n";
const HTTP: &str = "{ports: [{name: http, port: 80}]}";
const TUNNEL: &str = "ports: [{name: tunnel, port: 443}]";
const BY_NAME: &str = "kubernetes.io/service-name: cart";
const READY: &str = "addressType: IPv4\nendpoints: [{addresses: [10.0.0.1]}]";
/// Where findings about the slice of `cart_slice` point (it has no field).
const AT_SLICE: &str = "3 EndpointSlice shop/cart-abc -";

fn property(version: &str, name: &str, value: &str) -> String {
    format!(
        "apiVersion: about.k8s.io/{version}\nkind: ClusterProperty\nmetadata: {{name: {name}}}\nspec: {{value: {value:?}}}\n"
    )
}

fn svc(name: &str, spec: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Service\nmetadata: {{name: {name}, namespace: shop}}\nspec: {spec}\n"
    )
}

fn gateway(rest: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Service\nmetadata: {{name: gw, namespace: strait-system, labels: {{strait.dev/gateway: \"true\"}}}}\n{rest}\n"
    )
}

fn export(metadata: &str) -> String {
    format!(
        "apiVersion: multicluster.x-k8s.io/v1alpha1\nkind: ServiceExport\nmetadata: {{name: cart, namespace: shop{metadata}}}\n"
    )
}

/// The `cart` Service, then an EndpointSlice (document 3 in `in_c1`).
fn cart_slice(labels: &str, rest: &str) -> String {
    format!(
        "{}---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {{name: cart-abc, namespace: shop, labels: {{{labels}}}}}\n{rest}\n",
        svc("cart", HTTP)
    )
}

fn import(ips: &str) -> String {
    format!(
        "apiVersion: multicluster.x-k8s.io/v1alpha1\nkind: ServiceImport\nmetadata: {{name: cart, namespace: shop}}\nspec: {{ips: {ips}}}\n"
    )
}

type Translated = (Option<Cluster>, Vec<Diagnostic>);

fn translate_in(folder: &str, text: &str, options: &TranslateOptions) -> Translated {
    let (objects, mut diagnostics) = parse_file(&format!("{folder}/objects.yaml"), text);
    let (cluster, findings) =
        translate_cluster(folder, &objects.iter().collect::<Vec<_>>(), options);
    diagnostics.extend(findings);
    (cluster, diagnostics)
}

fn translate(text: &str) -> Translated {
    translate_in(FOLDER, text, &TranslateOptions::default())
}

/// Translates `text` after the `c1` id document, so its documents count from 2.
fn in_c1(text: &str) -> (Cluster, Vec<Diagnostic>) {
    let (cluster, diagnostics) = translate(&format!("{ID}---\n{text}"));
    (cluster.expect("the cluster names itself c1"), diagnostics)
}

/// A cluster whose objects raise no finding at all.
#[track_caller]
fn clean(text: &str) -> Cluster {
    let (cluster, found) = in_c1(text);
    assert!(found.is_empty(), "unexpected findings: {found:#?}");
    cluster
}

/// The one finding of a list.
#[track_caller]
fn only(found: &[Diagnostic]) -> &Diagnostic {
    assert_eq!(found.len(), 1, "expected one finding: {found:#?}");
    &found[0]
}

/// Checks where a finding points, written `document object field` with `-`
/// for what is absent (`2 Service shop/cart spec.type`), and what it says.
#[track_caller]
fn assert_at(finding: &Diagnostic, at: &str, says: &str) {
    assert_eq!(&*finding.origin.source, FILE, "{finding}");
    let document = finding.origin.document.map(|d| d.to_string());
    let document = document.as_deref().unwrap_or("-");
    let object = finding.object.as_deref().unwrap_or("-");
    let field = finding.field.as_deref().unwrap_or("-");
    assert_eq!(format!("{document} {object} {field}"), at, "{finding}");
    let mentioned = finding.message.contains(says);
    assert!(mentioned, "{finding} should mention {says:?}");
}

/// `text` in c1 must raise exactly one finding, an error, as `assert_at` checks.
#[track_caller]
fn expect_error(text: &str, at: &str, says: &str) -> Cluster {
    let (cluster, found) = in_c1(text);
    assert!(only(&found).is_error(), "{}", found[0]);
    assert_at(&found[0], at, says);
    cluster
}

/// `text` in c1 must raise exactly one finding, a warning, as `assert_at` checks.
#[track_caller]
fn expect_warning(text: &str, at: &str, says: &str) -> Cluster {
    let (cluster, found) = in_c1(text);
    assert!(!only(&found).is_error(), "{}", found[0]);
    assert_at(&found[0], at, says);
    cluster
}

fn cart(cluster: &Cluster) -> &ClusterService {
    let key = ServiceKey::new("shop", "cart");
    cluster.services.get(&key).expect("cart is translated")
}

fn ip(text: &str) -> IpAddr {
    text.parse().expect("test address parses")
}

fn cluster_in(folder: &str, id: &str, clusterset: Option<&str>) -> Cluster {
    let mut text = property("v1alpha1", CLUSTER_ID_PROPERTY, id);
    if let Some(set) = clusterset {
        text += "---\n";
        text += &property("v1alpha1", CLUSTERSET_PROPERTY, set);
    }
    let options = TranslateOptions::default();
    let (cluster, found) = translate_in(folder, &text, &options);
    assert!(found.is_empty(), "{found:#?}");
    cluster.expect("the cluster names itself")
}

#[path = "cluster_tests.rs"]
mod clusters;

// Object identity.

#[test]
fn a_duplicate_object_is_an_error_naming_the_first_place() {
    let second = svc("cart", "{ports: [{port: 81}]}");
    let text = format!("{}---\n{second}", svc("cart", HTTP));
    let first = format!("duplicate object; first defined in {FILE}, document 2");
    let cluster = expect_error(&text, "3 Service shop/cart metadata.name", &first);
    assert_eq!(cart(&cluster).spec.ports[0].port, 80, "the first is kept");
}

#[test]
fn same_name_in_another_namespace_or_kind_is_no_duplicate() {
    let other = svc("cart", HTTP).replace("namespace: shop", "namespace: other");
    let text = format!("{}---\n{other}---\n{}", svc("cart", HTTP), export(""));
    assert_eq!(clean(&text).services.len(), 2);
}

#[test]
fn an_object_without_name_is_an_error_on_metadata_name() {
    let text = "apiVersion: v1\nkind: Service\nmetadata: {namespace: shop}\nspec: {}\n";
    let cluster = expect_error(text, "2 Service shop/ metadata.name", "is missing");
    assert!(cluster.services.is_empty());
}

// Exports.

#[test]
fn an_export_without_its_service_is_an_error() {
    let at = "2 ServiceExport shop/cart metadata.name";
    let says = "exports Service shop/cart, which this cluster does not define";
    expect_error(&export(""), at, says);
}

#[test]
fn exporting_an_external_name_service_is_invalid_service_type() {
    let external = svc("cart", "{type: ExternalName, externalName: a.example}");
    let text = format!("{external}---\n{}", export(""));
    let at = "3 ServiceExport shop/cart metadata.name";
    let cluster = expect_error(&text, at, "InvalidServiceType");
    assert_eq!(cart(&cluster).spec.service_type, ServiceType::ExternalName);
}

// Services.

#[test]
fn cluster_ip_like_types_export_as_cluster_set_ip_and_none_as_headless() {
    for kind in ["ClusterIP", "NodePort", "LoadBalancer", "~"] {
        let cluster = clean(&svc("cart", &format!("{{type: {kind}}}")));
        let service_type = cart(&cluster).spec.service_type;
        assert_eq!(service_type, ServiceType::ClusterSetIp, "{kind}");
    }
    let cluster = clean(&svc("cart", "{clusterIP: None, ports: [{port: 80}]}"));
    assert_eq!(cart(&cluster).spec.service_type, ServiceType::Headless);
}

#[test]
fn service_field_errors_name_the_field() {
    let case = |spec: &str, field: &str, says: &str| {
        let at = format!("2 Service shop/cart spec.{field}");
        expect_error(&svc("cart", &format!("{{{spec}}}")), &at, says)
    };
    let cluster = case("type: Magic", "type", "\"Magic\"");
    assert!(cluster.services.is_empty(), "and the Service is dropped");
    case("ports: [{port: 0}]", "ports[0].port", "0 is not a port");
    case("ports: [{port: 70000}]", "ports[0].port", "70000 is");
    let protocol = "ports: [{port: 8, protocol: IP}]";
    case(protocol, "ports[0].protocol", "unknown protocol \"IP\"");
    let unnamed = "ports: [{name: a, port: 8}, {port: 9}]";
    case(unnamed, "ports[1].name", "is required");
    case("sessionAffinity: Sticky", "sessionAffinity", "\"Sticky\"");
    case("ipFamilies: [IPv4, ipv6]", "ipFamilies[1]", "\"ipv6\"");
    case("ipFamilies: [dual]", "ipFamilies[0]", "\"dual\"");
    let policy = "internalTrafficPolicy";
    case(&format!("{policy}: Near"), policy, "\"Near\"");
    let dup = "ports: [{name: a, port: 8}, {name: a, port: 9}]";
    case(dup, "ports[1].name", "duplicate port name \"a\"");
    let dup = "ports: [{name: a, port: 8}, {name: b, port: 8}]";
    case(dup, "ports[1].port", "duplicate port 8/TCP");
    let field = "sessionAffinityConfig.clientIP.timeoutSeconds";
    for timeout in ["0", "86401", "-5"] {
        let config = format!("sessionAffinityConfig: {{clientIP: {{timeoutSeconds: {timeout}}}}}");
        let cluster = case(&config, field, &format!("{timeout} is outside 1-86400"));
        assert_eq!(cart(&cluster).spec.session_affinity_timeout, None);
    }
}

#[test]
fn a_service_without_spec_is_an_error_on_spec() {
    let text = "apiVersion: v1\nkind: Service\nmetadata: {name: cart, namespace: shop}\n";
    let cluster = expect_error(text, "2 Service shop/cart spec", "is missing");
    assert!(cluster.services.is_empty());
}

#[test]
fn bad_ports_are_dropped_and_the_rest_kept() {
    let spec = "{ports: [{name: a, port: 0}, {name: b, port: 70000}, {name: c, port: 80}]}";
    let (cluster, found) = in_c1(&svc("cart", spec));
    assert_eq!(found.len(), 2, "{found:#?}");
    assert_at(&found[0], "2 Service shop/cart spec.ports[0].port", "0 is");
    assert_at(&found[1], "2 Service shop/cart spec.ports[1].port", "70000");
    let ports = &cart(&cluster).spec.ports;
    assert_eq!(ports.iter().map(|p| p.port).collect::<Vec<_>>(), [80]);
}

#[test]
fn ports_carry_name_protocol_number_and_app_protocol() {
    let spec = "{ports: [{name: web, port: 80, appProtocol: http}, {name: dns, port: 53, protocol: UDP}, {name: s, port: 53, protocol: SCTP}]}";
    let cluster = clean(&svc("cart", spec));
    let ports = &cart(&cluster).spec.ports;
    let seen = |p: &ServicePort| (p.name.clone(), p.protocol, p.port);
    let seen: Vec<_> = ports.iter().map(seen).collect();
    let web = ("web".to_owned(), Protocol::Tcp, 80);
    let dns = ("dns".to_owned(), Protocol::Udp, 53);
    // The same number under another protocol is no duplicate.
    assert_eq!(seen, [web, dns, ("s".to_owned(), Protocol::Sctp, 53)]);
    assert_eq!(ports[0].app_protocol.as_deref(), Some("http"));
    let single = clean(&svc("cart", "{ports: [{port: 8080}]}"));
    assert_eq!(cart(&single).spec.ports[0].name, "", "may be unnamed");
}

#[test]
fn client_ip_session_affinity_carries_its_timeout() {
    let config = "sessionAffinityConfig: {clientIP: {timeoutSeconds: 300}}";
    let spec = format!("{{sessionAffinity: ClientIP, {config}}}");
    let cluster = clean(&svc("cart", &spec));
    let spec = &cart(&cluster).spec;
    assert_eq!(spec.session_affinity, SessionAffinity::ClientIp);
    assert_eq!(spec.session_affinity_timeout, Some(300));
    let cluster = clean(&svc("cart", HTTP));
    assert_eq!(cart(&cluster).spec.session_affinity, SessionAffinity::None);
}

#[test]
fn ip_families_and_traffic_settings_are_carried() {
    let spec = "{ipFamilies: [IPv6, IPv4], trafficDistribution: PreferClose}";
    let cluster = clean(&svc("cart", spec));
    let spec = &cart(&cluster).spec;
    assert_eq!(spec.ip_families, [IpFamily::IPv6, IpFamily::IPv4]);
    assert_eq!(spec.traffic_distribution.as_deref(), Some("PreferClose"));
    assert_eq!(spec.internal_traffic_policy, "Cluster", "the default");
    let cluster = clean(&svc("cart", "{internalTrafficPolicy: Local}"));
    assert_eq!(cart(&cluster).spec.internal_traffic_policy, "Local");
}

// Gateways.

#[test]
fn gateway_addresses_come_from_load_balancer_ingress_with_the_tunnel_port() {
    let cluster = clean(&gateway(
        "spec:\n  type: LoadBalancer\n  externalIPs: [198.51.100.1]\n  ports: [{name: admin, port: 9000}, {name: tunnel, port: 15443}]\nstatus:\n  loadBalancer:\n    ingress: [{ip: 203.0.113.7}, {hostname: gw.example.com}, {ip: \"2001:db8::1\"}]",
    ));
    // External IPs are not used when the load balancer has ingress.
    let shown: Vec<_> = cluster.gateways.iter().map(ToString::to_string).collect();
    let ipv6 = "[2001:db8::1]:15443";
    assert_eq!(shown, ["203.0.113.7:15443", "gw.example.com:15443", ipv6]);
    let dns = GatewayHost::Dns("gw.example.com".to_owned());
    assert_eq!(cluster.gateways[1].host, dns);
    assert_eq!(cluster.gateways[2].host, GatewayHost::Ip(ip("2001:db8::1")));
    assert!(cluster.services.is_empty(), "the gateway is no service");
}

#[test]
fn gateway_addresses_fall_back_to_external_ips() {
    let spec = format!("spec: {{externalIPs: [198.51.100.1, 198.51.100.2], {TUNNEL}}}");
    let cluster = clean(&gateway(&spec));
    let shown: Vec<_> = cluster.gateways.iter().map(ToString::to_string).collect();
    assert_eq!(shown, ["198.51.100.1:443", "198.51.100.2:443"]);
}

#[test]
fn a_gateway_without_tunnel_port_is_an_error() {
    let text = gateway("spec: {externalIPs: [1.2.3.4], ports: [{name: web, port: 443}]}");
    let cluster = expect_error(&text, "2 Service strait-system/gw spec.ports", "\"tunnel\"");
    assert!(cluster.gateways.is_empty());
    let text = gateway("spec: {externalIPs: [1.2.3.4], ports: [{name: tunnel, port: 0}]}");
    let at = "2 Service strait-system/gw spec.ports[0].port";
    expect_error(&text, at, "0 is not a port");
}

#[test]
fn a_gateway_without_address_only_warns() {
    let text = gateway(&format!("spec: {{type: LoadBalancer, {TUNNEL}}}"));
    let cluster = expect_warning(&text, "2 Service strait-system/gw -", "has no address");
    assert!(cluster.gateways.is_empty() && cluster.services.is_empty());
}

#[test]
fn malformed_gateway_addresses_are_errors_on_their_field() {
    let status = |ingress: &str| {
        let status = format!("status: {{loadBalancer: {{ingress: [{ingress}]}}}}");
        gateway(&format!("spec: {{{TUNNEL}}}\n{status}"))
    };
    let text = status("{ip: 203.0.113.7}, {ip: 300.1.1.1}");
    let at = "2 Service strait-system/gw status.loadBalancer.ingress[1].ip";
    let cluster = expect_error(&text, at, "\"300.1.1.1\" is not an IP address");
    assert_eq!(cluster.gateways.len(), 1, "the good address is kept");
    let text = status("{hostname: Bad_Host}, {ip: 203.0.113.7}");
    let at = "2 Service strait-system/gw status.loadBalancer.ingress[0].hostname";
    expect_error(&text, at, "\"Bad_Host\"");
    let text = gateway(&format!("spec: {{externalIPs: [1.2.3.4, nope], {TUNNEL}}}"));
    expect_error(
        &text,
        "2 Service strait-system/gw spec.externalIPs[1]",
        "\"nope\"",
    );
}

#[test]
fn only_the_label_value_true_marks_a_gateway() {
    let text = gateway(&format!("spec: {{{TUNNEL}}}")).replace("\"true\"", "\"yes\"");
    let cluster = clean(&text);
    let key = ServiceKey::new("strait-system", "gw");
    assert!(cluster.services.contains_key(&key));
    assert!(cluster.gateways.is_empty());
}

#[test]
fn a_tenants_gateway_label_names_no_gateway() {
    // A tenant labels a Service of its own namespace as the gateway, with
    // an address for peers to dial and a slice of its pods: none of it may
    // become the cluster's gateway.
    let text = format!(
        "{}---\n{}",
        gateway(&format!("spec: {{externalIPs: [192.0.2.1], {TUNNEL}}}")),
        gateway(&format!("spec: {{externalIPs: [203.0.113.66], {TUNNEL}}}")).replace(
            "name: gw, namespace: strait-system",
            "name: gw, namespace: tenant"
        )
    );
    let (cluster, found) = in_c1(&text);
    assert_at(
        only(&found),
        "3 Service tenant/gw -",
        "not in the gateway namespace \"strait-system\"",
    );
    assert!(!found[0].is_error(), "{}", found[0]);
    assert_eq!(
        cluster
            .gateways
            .iter()
            .map(|g| g.host.clone())
            .collect::<Vec<_>>(),
        vec![GatewayHost::Ip(ip("192.0.2.1"))],
        "only the gateway namespace's Service gives tunnel addresses"
    );
    assert!(
        cluster
            .services
            .contains_key(&ServiceKey::new("tenant", "gw")),
        "the tenant's Service is read as an ordinary Service"
    );
}

// EndpointSlices.

#[test]
fn slices_attach_by_service_name_label_and_carry_ports() {
    let rest = "addressType: IPv6\nendpoints: [{addresses: [\"fd00::1\"]}]\nports: [{name: http, port: 8080}, {name: dns, port: 53, protocol: UDP}]";
    let (name, protocol, port) = ("http".to_owned(), Protocol::Tcp, 8080);
    let http = EndpointPort {
        name,
        protocol,
        port,
    };
    let (name, protocol, port) = ("dns".to_owned(), Protocol::Udp, 53);
    let dns = EndpointPort {
        name,
        protocol,
        port,
    };
    for label in [SERVICE_NAME_LABEL, MCS_SERVICE_NAME_LABEL] {
        let cluster = clean(&cart_slice(&format!("{label}: cart"), rest));
        let groups = &cart(&cluster).endpoint_groups;
        assert_eq!(groups.len(), 1, "{label}");
        assert_eq!(*groups[0].ports, [http.clone(), dns.clone()]);
        assert_eq!(
            groups[0].endpoints.iter().collect::<Vec<_>>(),
            [Endpoint::ready(ip("fd00::1"))]
        );
    }
}

#[test]
fn slices_of_another_source_cluster_are_ignored_with_a_warning() {
    let labels = |source: &str| format!("{BY_NAME}, {MCS_SOURCE_CLUSTER_LABEL}: {source}");
    let text = cart_slice(&labels("c2"), READY);
    let cluster = expect_warning(&text, AT_SLICE, "endpoints of cluster \"c2\"");
    assert!(cart(&cluster).endpoint_groups.is_empty());
    let cluster = clean(&cart_slice(&labels("c1"), READY));
    assert_eq!(cart(&cluster).endpoint_groups.len(), 1, "its own count");
}

/// A cluster's imported endpoints (Strait's MCS slices, its derived
/// Services' slices) are not its own: read back as its endpoints, another
/// cluster's pods would be exported under this one's name.
#[test]
fn slices_strait_imported_are_never_a_clusters_own_endpoints() {
    let imported = format!(
        "{MCS_SERVICE_NAME_LABEL}: cart, {MCS_SOURCE_CLUSTER_LABEL}: c1, {ENDPOINTSLICE_MANAGED_BY_LABEL}: {IMPORTED_SLICE_MANAGER}"
    );
    let cluster = clean(&cart_slice(&imported, READY));
    assert!(cart(&cluster).endpoint_groups.is_empty());
    let other = format!(
        "{MCS_SERVICE_NAME_LABEL}: cart, {MCS_SOURCE_CLUSTER_LABEL}: c1, {ENDPOINTSLICE_MANAGED_BY_LABEL}: another.example"
    );
    let cluster = clean(&cart_slice(&other, READY));
    assert_eq!(cart(&cluster).endpoint_groups.len(), 1, "not Strait's");
}

#[test]
fn slices_without_service_name_or_service_only_warn() {
    let text = cart_slice("app: cart", READY);
    let cluster = expect_warning(&text, AT_SLICE, SERVICE_NAME_LABEL);
    assert!(cart(&cluster).endpoint_groups.is_empty());
    let text = cart_slice("kubernetes.io/service-name: ghost", READY);
    let cluster = expect_warning(&text, AT_SLICE, "Service shop/ghost");
    assert!(cart(&cluster).endpoint_groups.is_empty());
}

#[test]
fn endpoint_conditions_follow_endpoint_slice_defaults() {
    let rest = "addressType: IPv4\nendpoints:\n- {addresses: [10.0.0.1], hostname: a, zone: z1}\n- {addresses: [10.0.0.2], conditions: {ready: false}}\n- {addresses: [10.0.0.3], conditions: {ready: false, serving: true, terminating: true}}\n- {addresses: [10.0.0.4], conditions: {}}";
    let cluster = clean(&cart_slice(BY_NAME, rest));
    let endpoints = &cart(&cluster).endpoint_groups[0].endpoints;
    let flags = |e: Endpoint| (e.ready, e.serving, e.terminating);
    let flags: Vec<_> = endpoints.iter().map(flags).collect();
    let (defaults, unready) = ((true, true, false), (false, false, false));
    assert_eq!(flags, [defaults, unready, (false, true, true), defaults]);
    assert_eq!(endpoints.hostname(0), Some("a"));
    let details = endpoints.details(0);
    assert_eq!(details.and_then(|d| d.zone.as_deref()), Some("z1"));
}

#[test]
fn fqdn_slices_are_skipped_with_a_warning() {
    let rest = "addressType: FQDN\nendpoints: [{addresses: [cart.example.com]}]";
    let text = cart_slice(BY_NAME, rest);
    let cluster = expect_warning(&text, AT_SLICE, "addressType FQDN");
    assert!(cart(&cluster).endpoint_groups.is_empty());
}

#[test]
fn bad_endpoint_addresses_are_errors_on_their_field() {
    let case = |family: &str, addresses: &str, field: &str, says: &str| {
        let rest = format!("addressType: {family}\nendpoints: [{addresses}]");
        let at = format!("3 EndpointSlice shop/cart-abc {field}");
        expect_error(&cart_slice(BY_NAME, &rest), &at, says);
    };
    let first = "endpoints[0].addresses[0]";
    case("IPv4", "{addresses: [10.0.0.300]}", first, "\"10.0.0.300\"");
    case("IPv6", "{addresses: [10.0.0.1]}", first, "addressType IPv6");
    let mixed = "{addresses: [10.0.0.1]}, {addresses: [\"::1\"]}";
    case("IPv4", mixed, "endpoints[1].addresses[0]", "IPv4");
    case("IPv4", "{addresses: []}", "endpoints[0].addresses", "empty");
    case("IPX", "", "addressType", "\"IPX\" is not an address type");
    // One address, two spellings: the mapped one is refused, loopback or not.
    let mapped = "{addresses: [\"::ffff:10.0.0.1\"]}";
    case("IPv6", mapped, first, "IPv4-mapped");
    let mapped_loopback = "{addresses: [\"::ffff:127.0.3.1\"]}";
    case(
        "IPv6",
        mapped_loopback,
        first,
        "list 127.0.3.1 in an IPv4 slice",
    );
}

#[test]
fn mapped_spellings_are_judged_as_the_ipv4_address_they_stand_for() {
    for (text, class) in [
        ("::ffff:127.0.0.1", Some("loopback")),
        ("::ffff:169.254.169.254", Some("link-local")),
        ("::ffff:0.0.0.0", Some("unspecified")),
        ("::ffff:10.0.0.1", None),
    ] {
        let address: IpAddr = text.parse().expect("an address");
        assert_eq!(
            crate::model::unroutable_endpoint(&address, false),
            class,
            "{text}"
        );
    }
}

#[test]
fn endpoint_ports_without_number_warn_and_bad_ones_are_errors() {
    let ports = format!("{READY}\nports: [{{name: all}}, {{name: http, port: 8080}}]");
    let text = cart_slice(BY_NAME, &ports);
    let cluster = expect_warning(&text, AT_SLICE, "ports[0].port is unset");
    let group = &cart(&cluster).endpoint_groups[0];
    let numbers: Vec<_> = group.ports.iter().map(|p| p.port).collect();
    assert_eq!(numbers, [8080]);

    let ports = "ports: [{port: 1}, {port: 65536}, {port: 2, protocol: tcp}]";
    let (_, found) = in_c1(&cart_slice(BY_NAME, &format!("{READY}\n{ports}")));
    assert_eq!(found.len(), 2, "{found:#?}");
    let at = "3 EndpointSlice shop/cart-abc ports[1].port";
    assert_at(&found[0], at, "65536");
    let at = "3 EndpointSlice shop/cart-abc ports[2].protocol";
    assert_at(&found[1], at, "\"tcp\"");
}

// ServiceImports and unknown kinds.

#[test]
fn service_import_ips_are_read_into_imports() {
    let cluster = clean(&import("[10.96.0.10, \"fd00::a\"]"));
    let key = ServiceKey::new("shop", "cart");
    assert_eq!(cluster.imports[&key], [ip("10.96.0.10"), ip("fd00::a")]);
}

#[test]
fn a_bad_service_import_ip_is_an_error_on_its_field() {
    let at = "2 ServiceImport shop/cart spec.ips[0]";
    let text = import("[10.96.0.999, 10.96.0.10]");
    let cluster = expect_error(&text, at, "\"10.96.0.999\"");
    let key = ServiceKey::new("shop", "cart");
    assert_eq!(cluster.imports[&key], [ip("10.96.0.10")], "good ones kept");
}

#[test]
fn unknown_kinds_only_warn() {
    let text = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: cart}\n";
    let says = "Deployment (apps/v1) is not a kind Strait reads";
    let cluster = expect_warning(text, "2 - -", says);
    assert!(cluster.services.is_empty());
}

// Robustness.

#[test]
fn hostile_input_never_panics() {
    let svc = "apiVersion: v1\nkind: Service\nmetadata: {name: a, namespace: shop}\n";
    let gw = "apiVersion: v1\nkind: Service\nmetadata: {name: g, namespace: strait-system, labels: {strait.dev/gateway: \"true\"}}\n";
    let eps = "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {name: s, labels: {kubernetes.io/service-name: a}}\n";
    let mcs = "apiVersion: multicluster.x-k8s.io/v1beta1\nmetadata: {name: a, namespace: shop}\n";
    let inputs: Vec<String> = vec![
        String::new(),
        "---".into(),
        "---\n---\n...\n".into(),
        "~".into(),
        "- a\n- b".into(),
        "\u{0}\u{1}\u{7f}\u{fffd}\u{feff}".into(),
        "\"\\xff\\x00\\uFFFF\\U0010FFFF\"".into(),
        "apiVersion: \"\\xff\\x00\"\nkind: \"\\u0000Service\"".into(),
        "!!binary aGVsbG8=".into(),
        "!Service {apiVersion: v1, kind: Service, metadata: {name: t}}".into(),
        "? [complex, key]\n: value\napiVersion: v1\nkind: Service".into(),
        "apiVersion: v1\napiVersion: v1\nkind: Service".into(),
        "apiVersion: null\nkind: 7\nmetadata: null".into(),
        "apiVersion: v1\nkind: Service".into(),
        "apiVersion: v1\nkind: Service\nmetadata: {name: \"\\u00fc/../\\0\", namespace: \"\"}\nspec: {}".into(),
        "apiVersion: v1\nkind: Service\nmetadata: {name: a, labels: [x, y]}".into(),
        "apiVersion: v1\nkind: Service\nmetadata: [name, a]".into(),
        "apiVersion: v1\nkind: Service\nmetadata: {name: a, creationTimestamp: \"99999-99-99T99:99:99Z\"}".into(),
        format!("{svc}spec: {{ports: [{{port: \"80\"}}]}}"),
        format!("{svc}spec: [1, 2]"),
        format!("{svc}spec: null"),
        format!("{svc}spec: {{ports: [{{port: 99999999999999999999999}}, {{port: 1e309}}]}}"),
        format!("{svc}spec: {{ports: [{{port: -2147483648, name: ''}}, {{port: 2147483647}}]}}"),
        format!("{svc}spec: {{type: '', clusterIP: None, ipFamilies: ['', IPv4, IPv4]}}"),
        format!("{svc}spec: {{sessionAffinityConfig: {{clientIP: {{timeoutSeconds: -2147483648}}}}}}"),
        format!("{gw}spec: {{ports: [{{name: tunnel, port: -1}}], externalIPs: [\"::::\", \"\"]}}"),
        format!("{gw}status: {{loadBalancer: {{ingress: [{{}}, {{hostname: ''}}, {{ip: '', hostname: x}}]}}}}"),
        format!("{gw}spec: {{ports: [{{name: tunnel, port: 1}}]}}\nstatus: {{loadBalancer: {{ingress: 5}}}}"),
        format!("{eps}addressType: 5\nendpoints: x"),
        format!("{eps}addressType: IPv4\nendpoints: [{{addresses: ['', '1.2.3.4']}}, {{addresses: [\"::1\"]}}]\nports: [{{port: -9}}, {{}}, {{port: 0, protocol: ''}}]"),
        format!("{eps}addressType: ''\nendpoints: [{{addresses: [\"1.2.3.4\"]}}]"),
        format!("{mcs}kind: ServiceImport\nspec: {{ips: 5}}"),
        format!("{mcs}kind: ServiceImport\nspec: {{ips: ['', '::', '0.0.0.0', '1.2.3.4/32']}}"),
        format!("{mcs}kind: ServiceExport\nspec: {{exportedLabels: [1]}}"),
        format!("{mcs}kind: ServiceExport\nspec: null"),
        "apiVersion: about.k8s.io/v1beta1\nkind: ClusterProperty\nmetadata: {name: cluster.clusterset.k8s.io}\nspec: {value: [1]}".into(),
        property("v1beta1", CLUSTER_ID_PROPERTY, ""),
        property("v1beta1", NETWORK_PROPERTY, "..."),
        property("v1beta1", CLUSTERSET_PROPERTY, "\u{0}"),
        property("v1alpha1", CLUSTER_ID_PROPERTY, &"x".repeat(100_000)),
        format!("a: {}{}", "[".repeat(5000), "]".repeat(5000)),
        format!("{}x", "{a: ".repeat(300)),
        "a: &a [x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a]\nc: &c [*b, *b, *b, *b, *b, *b, *b, *b]\nd: [*c, *c, *c, *c, *c, *c, *c, *c]\n".into(),
        "a: [unclosed\n---\napiVersion: v1\nkind: Service".into(),
        "\tkey: value\n  - broken: [".into(),
    ];
    for input in &inputs {
        let texts = [format!("{ID}---\n{input}"), format!("{input}\n---\n{ID}")];
        for text in [input].into_iter().chain(&texts) {
            let (cluster, _) = translate(text);
            let other = cluster_in("clusters/c2", "c2", Some("set"));
            let _ = assemble(cluster.into_iter().chain([other]).collect());
        }
    }
}

#[test]
fn an_invalid_service_raises_no_follow_on_errors_for_its_export_and_slices() {
    let text = format!(
        "{}---\n{}---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {{name: cart-abc, namespace: shop, labels: {{{BY_NAME}}}}}\n{READY}\n",
        svc("cart", "{type: Bogus, ports: [{name: http, port: 80}]}"),
        export("")
    );
    let (_, found) = in_c1(&text);
    assert_at(
        only(&found),
        "2 Service shop/cart spec.type",
        "not a Service type",
    );
}

#[test]
fn exporting_the_gateway_service_is_an_error_saying_so() {
    let text = format!(
        "{}---\napiVersion: multicluster.x-k8s.io/v1alpha1\nkind: ServiceExport\nmetadata: {{name: gw, namespace: strait-system}}\n",
        gateway(&format!("spec: {{externalIPs: [192.0.2.1], {TUNNEL}}}"))
    );
    let (_, found) = in_c1(&text);
    assert_at(
        only(&found),
        "3 ServiceExport strait-system/gw metadata.name",
        "is this cluster's gateway",
    );
}

#[test]
fn ingress_entries_without_address_fall_back_to_external_ips() {
    let cluster = clean(&gateway(&format!(
        "spec: {{externalIPs: [192.0.2.7], {TUNNEL}}}\nstatus: {{loadBalancer: {{ingress: [{{}}]}}}}"
    )));
    assert_eq!(cluster.gateways.len(), 1);
    assert_eq!(cluster.gateways[0].host, GatewayHost::Ip(ip("192.0.2.7")));
}

#[test]
fn client_ip_affinity_without_timeout_gets_the_api_server_default() {
    let cluster = clean(&svc(
        "cart",
        "{sessionAffinity: ClientIP, ports: [{name: http, port: 80}]}",
    ));
    assert_eq!(cart(&cluster).spec.session_affinity_timeout, Some(10_800));
    let cluster = clean(&svc("cart", HTTP));
    assert_eq!(cart(&cluster).spec.session_affinity_timeout, None);
}

#[test]
fn endpoints_kubernetes_would_refuse_are_errors() {
    for (address, class) in [
        ("169.254.169.254", "link-local"),
        ("127.0.0.1", "loopback"),
        ("0.0.0.0", "unspecified"),
        ("224.0.0.1", "multicast"),
    ] {
        let text = cart_slice(
            BY_NAME,
            &format!("addressType: IPv4\nendpoints: [{{addresses: [\"{address}\"]}}]"),
        );
        let (_, found) = in_c1(&text);
        assert_at(
            only(&found),
            "3 EndpointSlice shop/cart-abc endpoints[0].addresses[0]",
            class,
        );
    }
}

#[test]
fn loopback_endpoints_are_accepted_when_allowed() {
    let options = TranslateOptions {
        allow_loopback_endpoints: true,
        ..TranslateOptions::default()
    };
    let text = format!(
        "{ID}---\n{}",
        cart_slice(
            BY_NAME,
            "addressType: IPv4\nendpoints: [{addresses: [\"127.0.3.10\"]}]"
        )
    );
    let (cluster, found) = translate_in(FOLDER, &text, &options);
    assert!(found.is_empty(), "{found:#?}");
    let cluster = cluster.expect("cluster");
    assert_eq!(
        cart(&cluster).endpoint_groups[0]
            .endpoints
            .get(0)
            .map(|endpoint| endpoint.address),
        Some(ip("127.0.3.10"))
    );
}

#[path = "export_tests.rs"]
mod exports;
