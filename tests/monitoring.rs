//! The monitoring files of `deploy/observability/` against the metrics the
//! gateway exposes. `Metrics::new()`, with a value recorded for every label
//! value of every family, is rendered; its `# TYPE` lines and samples are the
//! truth. Every `strait_*` series named in a PromQL expression (the
//! dashboard's panel targets and template variables, the PrometheusRule's
//! alerts) must be one it exposes, its label matchers must name labels the
//! series has (and, for labels whose values the code fixes, values it
//! takes), and every `by`/`without`/`on`/`ignoring` clause, legend and
//! `$labels.*` in an annotation must name a label the expression's series
//! have (or one the scrape adds).
//!
//! | test | checks |
//! |---|---|
//! | `the_exposition_is_read_as_the_checks_assume` | every family has samples, and every sample belongs to a family (counters `_total`, gauges bare, histograms `_bucket`/`_sum`/`_count`) |
//! | `the_scanner_reads_selectors_matchers_and_grouping` | the PromQL scan itself: selectors, matchers, grouping, strings skipped, legends and `$labels` |
//! | `dashboard_names_only_exposed_series_and_shows_every_family` | `dashboard.json`'s expressions; every family is on a panel |
//! | `dashboard_panels_have_unique_ids_and_use_the_datasource_variable` | panel ids (rows and panels inside rows included), the `${datasource}` variable |
//! | `alerts_name_only_exposed_series_and_say_what_is_wrong` | `alerts.yaml`: the PrometheusRule, its expressions, `severity`, `summary` and `description` of every alert |
//! | `pod_monitor_scrapes_the_admin_port` | `podmonitor.yaml` selects the gateway pods and scrapes the port and path their `prometheus.io/*` annotations name |

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on what they set up

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::OnceLock;
use std::time::Duration;

use serde_json::Value;
use strait::admin::metrics::{
    CheckResult, ClosedResult, DnsQueryType, DnsRcode, DnsTransport, Limit, Listener, Metrics,
    RefusedReason, ReloadKind, ReloadResult, RoutePath, Transport,
};

const DASHBOARD: &str = "deploy/observability/dashboard.json";
const ALERTS: &str = "deploy/observability/alerts.yaml";
const POD_MONITOR: &str = "deploy/observability/podmonitor.yaml";
const DEPLOYMENT: &str = "deploy/deployment.yaml";

/// Labels the scrape adds to every series (the target labels of a
/// PodMonitor or of a Kubernetes pod scrape); expressions may match and
/// group on them.
const SCRAPE_LABELS: [&str; 6] = [
    "job",
    "instance",
    "namespace",
    "pod",
    "container",
    "endpoint",
];

/// The severities the alerts may carry.
const SEVERITIES: [&str; 3] = ["critical", "warning", "info"];

/// Whether `label` of `series` takes its values from the configuration or
/// the traffic (cluster ids, peer addresses, object kinds, bucket bounds)
/// rather than from an enum of the code; only the latter's values are checked.
fn free_form(series: &str, label: &str) -> bool {
    matches!(label, "cluster" | "peer" | "le")
        || (series == "strait_invalid_objects" && label == "kind")
}

fn repo_file(relative: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(relative);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{relative}: {e}"))
}

fn yaml_file(relative: &str) -> Value {
    strait::discovery::yaml::parse_single(&repo_file(relative))
        .unwrap_or_else(|e| panic!("{relative}: not YAML: {e}"))
}

fn string_at<'a>(value: &'a Value, pointer: &str) -> Option<&'a str> {
    value.pointer(pointer).and_then(Value::as_str)
}

// ---------------------------------------------------------------------------
// The exposition

/// What the gateway exposes.
struct Exposed {
    /// Family name (from its `# TYPE` line) → its type.
    families: BTreeMap<String, String>,
    /// Series name → label name → the values seen.
    series: BTreeMap<String, BTreeMap<String, BTreeSet<String>>>,
}

impl Exposed {
    /// The family a series belongs to.
    fn family_of(&self, series: &str) -> Option<&str> {
        self.families
            .iter()
            .find(|(family, kind)| series_names(family, kind).iter().any(|s| s == series))
            .map(|(family, _)| family.as_str())
    }
}

/// The series a family of `kind` exposes.
fn series_names(family: &str, kind: &str) -> Vec<String> {
    match kind {
        "counter" => vec![format!("{family}_total")],
        "gauge" => vec![family.to_owned()],
        "histogram" => ["_bucket", "_sum", "_count"]
            .iter()
            .map(|suffix| format!("{family}{suffix}"))
            .collect(),
        other => panic!("{family}: a {other}; teach tests/monitoring.rs the series it exposes"),
    }
}

/// Records a value for every label value of every family, so that every
/// family has samples and every enum label shows each of its values.
fn record_everything(metrics: &Metrics) {
    for &path in RoutePath::ALL {
        for &transport in Transport::ALL {
            let mut connection = metrics.connection(path, transport);
            connection.dial(Duration::from_millis(2));
            connection.stall_began();
            connection.closed(ClosedResult::Ok, 10, 20);
        }
        for &result in ClosedResult::ALL {
            metrics
                .connection(path, Transport::None)
                .closed(result, 0, 0);
        }
    }
    let pool = metrics.pool("203.0.113.8:15008");
    pool.connections_add(1);
    pool.streams_add(1);
    for &reason in RefusedReason::ALL {
        metrics.refused(reason);
    }
    for &transport in Transport::ALL {
        metrics.stream_cancelled(transport);
        for &limit in Limit::ALL {
            metrics.limited(limit, transport);
        }
    }
    for &listener in Listener::ALL {
        metrics.accept_error(listener);
    }
    metrics.set_descriptors(100, 1024);
    for &kind in ReloadKind::ALL {
        for &result in ReloadResult::ALL {
            metrics.reload(kind, result);
        }
    }
    metrics.set_route_sizes(2, 3);
    metrics.set_invalid_objects(&BTreeMap::from([(
        ("c2".to_owned(), "Service".to_owned()),
        1,
    )]));
    metrics.set_cluster_sync("c2", true, false, 1, 2);
    metrics.set_export_status(true, 2, 1);
    metrics.set_import_listeners(2, 1);
    metrics.set_import_plan(1, 1, 1);
    metrics.set_import_writes(2, 1);
    metrics.set_remote_pods(1, 1);
    for &qtype in DnsQueryType::ALL {
        for &rcode in DnsRcode::ALL {
            metrics.dns_query(qtype, rcode, None);
        }
    }
    for &transport in DnsTransport::ALL {
        metrics.dns_query(DnsQueryType::A, DnsRcode::NoError, Some(transport));
    }
    metrics.dns_tcp_refused();
    for &result in CheckResult::ALL {
        metrics.health_check(result);
    }
    metrics.set_health_checks_down(1);
    let now = std::time::SystemTime::now();
    metrics.set_cert_expiry(now, Some(now));
}

/// A sample line's series name and labels: `name{a="x",b="y"} value`.
fn sample(line: &str) -> (String, Vec<(String, String)>) {
    let end = line
        .find(['{', ' '])
        .unwrap_or_else(|| panic!("exposition: not a sample: {line}"));
    let name = line[..end].to_owned();
    let mut labels = Vec::new();
    if let Some(mut rest) = line[end..].strip_prefix('{') {
        while !rest.starts_with('}') {
            let (label, after) = rest
                .split_once("=\"")
                .unwrap_or_else(|| panic!("exposition: not a label: {line}"));
            let mut value = String::new();
            let mut escaped = false;
            let mut close = None;
            for (at, c) in after.char_indices() {
                if escaped {
                    value.push(if c == 'n' { '\n' } else { c });
                    escaped = false;
                } else if c == '\\' {
                    escaped = true;
                } else if c == '"' {
                    close = Some(at);
                    break;
                } else {
                    value.push(c);
                }
            }
            let close =
                close.unwrap_or_else(|| panic!("exposition: unterminated label value: {line}"));
            labels.push((label.to_owned(), value));
            rest = &after[close + 1..];
            rest = rest.strip_prefix(',').unwrap_or(rest);
        }
    }
    (name, labels)
}

fn read_exposition() -> Exposed {
    let metrics = Metrics::new();
    record_everything(&metrics);
    let text = metrics.try_encode().expect("the metrics render");
    let mut families = BTreeMap::new();
    let mut series: BTreeMap<String, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest
                .split_once(' ')
                .unwrap_or_else(|| panic!("exposition: a TYPE line without a type: {line}"));
            families.insert(name.to_owned(), kind.to_owned());
        } else if !line.starts_with('#') && !line.trim().is_empty() {
            let (name, labels) = sample(line);
            let known = series.entry(name).or_default();
            for (label, value) in labels {
                known.entry(label).or_default().insert(value);
            }
        }
    }
    Exposed { families, series }
}

fn exposed() -> &'static Exposed {
    static EXPOSED: OnceLock<Exposed> = OnceLock::new();
    EXPOSED.get_or_init(read_exposition)
}

#[test]
fn the_exposition_is_read_as_the_checks_assume() {
    let exposed = exposed();
    assert!(
        exposed.families.len() > 20,
        "exposition: only {} families read: {:?}",
        exposed.families.len(),
        exposed.families.keys().collect::<Vec<_>>()
    );
    for (family, kind) in &exposed.families {
        assert!(
            family.starts_with("strait_"),
            "exposition: family {family} lacks the strait_ prefix"
        );
        for name in series_names(family, kind) {
            assert!(
                exposed.series.contains_key(&name),
                "exposition: the {kind} {family} has no sample {name}; record one in record_everything (tests/monitoring.rs)"
            );
        }
    }
    for name in exposed.series.keys() {
        assert!(
            exposed.family_of(name).is_some(),
            "exposition: the sample {name} belongs to no # TYPE family"
        );
    }
    // The names the dashboard and alerts rely on, spelt out once.
    for name in [
        "strait_tunnel_requests_refused_total",
        "strait_dial_duration_seconds_bucket",
        "strait_connections_active",
        "strait_open_descriptors",
    ] {
        assert!(
            exposed.series.contains_key(name),
            "exposition: no series {name}"
        );
    }
}

#[path = "monitoring/promql.rs"]
mod promql;
use promql::scan;

// ---------------------------------------------------------------------------
// PromQL checks

/// What an expression uses: the families of its series, and every label
/// they have (the scrape's included).
struct Checked {
    families: BTreeSet<String>,
    labels: BTreeSet<String>,
}

/// Checks one expression against the exposition; `origin` names the file
/// and the panel or alert.
fn check_expr(exposed: &Exposed, origin: &str, expr: &str) -> Checked {
    let scanned =
        scan(expr).unwrap_or_else(|e| panic!("{origin}: cannot read the expression ({e}): {expr}"));
    let mut checked = Checked {
        families: BTreeSet::new(),
        labels: SCRAPE_LABELS.into_iter().map(str::to_owned).collect(),
    };
    for selector in &scanned.selectors {
        let name = selector.series.as_str();
        let Some(known) = exposed.series.get(name) else {
            let hint = exposed.families.get(name).map_or_else(String::new, |kind| {
                format!(
                    "; {name} is a {kind} family, whose series are {:?}",
                    series_names(name, kind)
                )
            });
            panic!(
                "{origin}: {name} is not a series the gateway exposes{hint} (expression: {expr})"
            );
        };
        let family = exposed
            .family_of(name)
            .expect("every exposed series has a family");
        checked.families.insert(family.to_owned());
        for (label, op, value) in &selector.matchers {
            if SCRAPE_LABELS.contains(&label.as_str()) {
                continue;
            }
            let Some(values) = known.get(label) else {
                let has: Vec<&String> = known.keys().collect();
                panic!(
                    "{origin}: {name} has no label {label} (its labels: {has:?}; expression: {expr})"
                );
            };
            if free_form(name, label) || value.contains('$') {
                continue;
            }
            let regex = op.ends_with('~');
            let alternatives: Vec<&str> = if regex {
                value.split('|').collect()
            } else {
                vec![value.as_str()]
            };
            let plain = alternatives.iter().all(|alternative| {
                alternative
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
            });
            if regex && !plain {
                // A real regular expression: its matches are not enumerated.
                continue;
            }
            for alternative in alternatives {
                assert!(
                    values.contains(alternative),
                    "{origin}: {name} never has {label}=\"{alternative}\" (its values: {values:?}; expression: {expr})"
                );
            }
        }
        checked.labels.extend(known.keys().cloned());
    }
    for label in &scanned.grouping {
        assert!(
            checked.labels.contains(label),
            "{origin}: groups or matches on {label}, a label no series of the expression has (expression: {expr})"
        );
    }
    checked
}

/// The labels a legend format names: `{{path}} {{result}}`.
fn legend_labels(legend: &str) -> Vec<&str> {
    legend
        .split("{{")
        .skip(1)
        .filter_map(|part| part.split_once("}}"))
        .map(|(label, _)| label.trim())
        .collect()
}

/// The labels an alert template names: `{{ $labels.cluster }}`.
fn template_labels(text: &str) -> Vec<&str> {
    text.match_indices("$labels.")
        .map(|(found, marker)| {
            let rest = &text[found + marker.len()..];
            let end = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            &rest[..end]
        })
        .collect()
}

#[test]
fn the_scanner_reads_selectors_matchers_and_grouping() {
    let scanned = scan(
        r#"histogram_quantile(0.99, sum by (le, path) (rate(strait_dial_duration_seconds_bucket{job=~".*strait_x.*", path!="inbound"}[$__rate_interval]))) / on(pod) strait_open_descriptors"#,
    )
    .unwrap();
    let names: Vec<&str> = scanned
        .selectors
        .iter()
        .map(|s| s.series.as_str())
        .collect();
    assert_eq!(
        names,
        [
            "strait_dial_duration_seconds_bucket",
            "strait_open_descriptors"
        ]
    );
    assert_eq!(
        scanned.selectors[0].matchers,
        [
            ("job".to_owned(), "=~".to_owned(), ".*strait_x.*".to_owned()),
            ("path".to_owned(), "!=".to_owned(), "inbound".to_owned()),
        ]
    );
    assert!(scanned.selectors[1].matchers.is_empty());
    assert_eq!(scanned.grouping, ["le", "path", "pod"]);
    assert!(scan(r#"strait_bytes_total{path="direct"#).is_err());
    assert_eq!(
        legend_labels("p99 {{path}} {{ result }}"),
        ["path", "result"]
    );
    assert_eq!(
        template_labels("{{ $labels.pod }} and {{$labels.cluster}}"),
        ["pod", "cluster"]
    );
}

// ---------------------------------------------------------------------------
// The dashboard

fn dashboard() -> Value {
    serde_json::from_str(&repo_file(DASHBOARD))
        .unwrap_or_else(|e| panic!("{DASHBOARD}: not JSON: {e}"))
}

/// Every panel of the dashboard, rows and the panels inside collapsed rows included.
fn panels(dashboard: &Value) -> Vec<&Value> {
    let top = dashboard
        .get("panels")
        .and_then(Value::as_array)
        .unwrap_or_else(|| panic!("{DASHBOARD}: no panels"));
    let mut all = Vec::new();
    for panel in top {
        all.push(panel);
        if let Some(inner) = panel.get("panels").and_then(Value::as_array) {
            all.extend(inner);
        }
    }
    all
}

fn title(panel: &Value) -> &str {
    panel
        .get("title")
        .and_then(Value::as_str)
        .unwrap_or("(untitled)")
}

fn is_row(panel: &Value) -> bool {
    panel.get("type").and_then(Value::as_str) == Some("row")
}

#[test]
fn dashboard_names_only_exposed_series_and_shows_every_family() {
    let exposed = exposed();
    let dashboard = dashboard();
    let mut shown = BTreeSet::new();
    for panel in panels(&dashboard) {
        let title = title(panel);
        let targets = panel
            .get("targets")
            .and_then(Value::as_array)
            .map_or(&[][..], Vec::as_slice);
        assert!(
            is_row(panel) || !targets.is_empty(),
            "{DASHBOARD}: panel \"{title}\" has no targets"
        );
        for target in targets {
            let ref_id = target.get("refId").and_then(Value::as_str).unwrap_or("?");
            let origin = format!("{DASHBOARD}: panel \"{title}\", target {ref_id}");
            let expr = target
                .get("expr")
                .and_then(Value::as_str)
                .unwrap_or_else(|| panic!("{origin}: no expr"));
            let checked = check_expr(exposed, &origin, expr);
            let legend = target
                .get("legendFormat")
                .and_then(Value::as_str)
                .unwrap_or("");
            for label in legend_labels(legend) {
                assert!(
                    checked.labels.contains(label),
                    "{origin}: the legend names {label}, a label the expression does not have (expression: {expr})"
                );
            }
            shown.extend(checked.families);
        }
    }
    let variables = dashboard
        .pointer("/templating/list")
        .and_then(Value::as_array)
        .unwrap_or_else(|| panic!("{DASHBOARD}: no templating.list"));
    for variable in variables {
        let name = string_at(variable, "/name").unwrap_or("(unnamed)");
        let origin = format!("{DASHBOARD}: variable {name}");
        for pointer in ["/definition", "/query/query"] {
            if let Some(expr) = string_at(variable, pointer) {
                check_expr(exposed, &origin, expr);
            }
        }
    }
    let missing: Vec<&String> = exposed
        .families
        .keys()
        .filter(|family| !shown.contains(*family))
        .collect();
    assert!(
        missing.is_empty(),
        "{DASHBOARD}: no panel shows {missing:?}; every family the gateway exposes belongs on the dashboard"
    );
}

#[test]
fn dashboard_panels_have_unique_ids_and_use_the_datasource_variable() {
    let dashboard = dashboard();
    let mut ids: BTreeMap<u64, &str> = BTreeMap::new();
    for panel in panels(&dashboard) {
        let title = title(panel);
        let id = panel
            .get("id")
            .and_then(Value::as_u64)
            .unwrap_or_else(|| panic!("{DASHBOARD}: panel \"{title}\" has no numeric id"));
        if let Some(other) = ids.insert(id, title) {
            panic!("{DASHBOARD}: panels \"{other}\" and \"{title}\" share the id {id}");
        }
        if is_row(panel) {
            continue;
        }
        assert_eq!(
            string_at(panel, "/datasource/uid"),
            Some("${datasource}"),
            "{DASHBOARD}: panel \"{title}\": datasource.uid should be the ${{datasource}} variable"
        );
        for target in panel
            .get("targets")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let uid = string_at(target, "/datasource/uid");
            assert!(
                uid.is_none() || uid == Some("${datasource}"),
                "{DASHBOARD}: panel \"{title}\": a target's datasource.uid is {uid:?}, not ${{datasource}}"
            );
        }
    }
    let variables = dashboard
        .pointer("/templating/list")
        .and_then(Value::as_array)
        .unwrap_or_else(|| panic!("{DASHBOARD}: no templating.list"));
    let datasource = variables
        .iter()
        .find(|variable| string_at(variable, "/name") == Some("datasource"))
        .unwrap_or_else(|| panic!("{DASHBOARD}: no variable named datasource"));
    assert_eq!(
        (
            string_at(datasource, "/type"),
            string_at(datasource, "/query")
        ),
        (Some("datasource"), Some("prometheus")),
        "{DASHBOARD}: the datasource variable should pick a Prometheus data source"
    );
}

// ---------------------------------------------------------------------------
// The alerts and the PodMonitor

/// The namespace of the gateway Deployment.
fn gateway_namespace(deployment: &Value) -> &str {
    string_at(deployment, "/metadata/namespace")
        .unwrap_or_else(|| panic!("{DEPLOYMENT}: no metadata.namespace"))
}

/// Checks an object's apiVersion, kind and namespace.
fn check_object(file: &str, object: &Value, kind: &str, namespace: &str) {
    assert_eq!(
        (string_at(object, "/apiVersion"), string_at(object, "/kind")),
        (Some("monitoring.coreos.com/v1"), Some(kind)),
        "{file}: should be a monitoring.coreos.com/v1 {kind}"
    );
    assert_eq!(
        string_at(object, "/metadata/namespace"),
        Some(namespace),
        "{file}: metadata.namespace should be the gateway's, as in {DEPLOYMENT}"
    );
}

#[test]
fn alerts_name_only_exposed_series_and_say_what_is_wrong() {
    let exposed = exposed();
    let object = yaml_file(ALERTS);
    let deployment = yaml_file(DEPLOYMENT);
    check_object(
        ALERTS,
        &object,
        "PrometheusRule",
        gateway_namespace(&deployment),
    );
    assert_eq!(
        string_at(&object, "/metadata/name"),
        Some("strait"),
        "{ALERTS}: metadata.name"
    );
    let groups = object
        .pointer("/spec/groups")
        .and_then(Value::as_array)
        .unwrap_or_else(|| panic!("{ALERTS}: no spec.groups"));
    let mut names = BTreeSet::new();
    for group in groups {
        let group_name =
            string_at(group, "/name").unwrap_or_else(|| panic!("{ALERTS}: a group without a name"));
        let rules = group
            .get("rules")
            .and_then(Value::as_array)
            .unwrap_or_else(|| panic!("{ALERTS}: group {group_name} has no rules"));
        for rule in rules {
            let Some(alert) = string_at(rule, "/alert") else {
                panic!("{ALERTS}: group {group_name}: a rule that is not an alert: {rule}");
            };
            let origin = format!("{ALERTS}: alert {alert}");
            assert!(names.insert(alert), "{origin}: defined twice");
            let expr = string_at(rule, "/expr").unwrap_or_else(|| panic!("{origin}: no expr"));
            let checked = check_expr(exposed, &origin, expr);
            let severity = string_at(rule, "/labels/severity")
                .unwrap_or_else(|| panic!("{origin}: no labels.severity"));
            assert!(
                SEVERITIES.contains(&severity),
                "{origin}: severity {severity} is none of {SEVERITIES:?}"
            );
            for annotation in ["summary", "description"] {
                let text = string_at(rule, &format!("/annotations/{annotation}"))
                    .unwrap_or_else(|| panic!("{origin}: no annotations.{annotation}"));
                assert!(
                    !text.trim().is_empty(),
                    "{origin}: annotations.{annotation} is empty"
                );
                for label in template_labels(text) {
                    assert!(
                        checked.labels.contains(label),
                        "{origin}: annotations.{annotation} names $labels.{label}, a label the expression does not have (expression: {expr})"
                    );
                }
            }
            if let Some(duration) = rule.get("for") {
                let duration = duration.as_str().unwrap_or("");
                let (number, unit) = duration.split_at(duration.len().saturating_sub(1));
                assert!(
                    !number.is_empty()
                        && number.bytes().all(|b| b.is_ascii_digit())
                        && matches!(unit, "s" | "m" | "h" | "d"),
                    "{origin}: for should be a duration such as 5m, not {duration:?}"
                );
            }
        }
    }
    assert!(!names.is_empty(), "{ALERTS}: no alerts");
}

#[test]
fn pod_monitor_scrapes_the_admin_port() {
    let monitor = yaml_file(POD_MONITOR);
    let deployment = yaml_file(DEPLOYMENT);
    check_object(
        POD_MONITOR,
        &monitor,
        "PodMonitor",
        gateway_namespace(&deployment),
    );
    let pod_labels = deployment
        .pointer("/spec/template/metadata/labels")
        .and_then(Value::as_object)
        .unwrap_or_else(|| panic!("{DEPLOYMENT}: no spec.template.metadata.labels"));
    let selector = monitor
        .pointer("/spec/selector/matchLabels")
        .and_then(Value::as_object)
        .unwrap_or_else(|| panic!("{POD_MONITOR}: no spec.selector.matchLabels"));
    assert!(
        !selector.is_empty(),
        "{POD_MONITOR}: an empty selector selects every pod of the namespace"
    );
    for (key, value) in selector {
        assert_eq!(
            pod_labels.get(key),
            Some(value),
            "{POD_MONITOR}: spec.selector.matchLabels {key}: {value} does not select the pods of {DEPLOYMENT}"
        );
    }
    let annotations = deployment
        .pointer("/spec/template/metadata/annotations")
        .and_then(Value::as_object)
        .unwrap_or_else(|| panic!("{DEPLOYMENT}: no spec.template.metadata.annotations"));
    let annotation = |key: &str| {
        annotations
            .get(key)
            .and_then(Value::as_str)
            .unwrap_or_else(|| panic!("{DEPLOYMENT}: no pod annotation {key}"))
    };
    let port: u64 = annotation("prometheus.io/port")
        .parse()
        .unwrap_or_else(|e| panic!("{DEPLOYMENT}: prometheus.io/port: {e}"));
    let path = annotation("prometheus.io/path");
    let containers = deployment
        .pointer("/spec/template/spec/containers")
        .and_then(Value::as_array)
        .unwrap_or_else(|| panic!("{DEPLOYMENT}: no containers"));
    let port_name = containers
        .iter()
        .filter_map(|container| container.get("ports").and_then(Value::as_array))
        .flatten()
        .find(|p| {
            p.get("containerPort").and_then(Value::as_u64) == Some(port)
                && string_at(p, "/protocol").unwrap_or("TCP") == "TCP"
        })
        .and_then(|p| string_at(p, "/name"))
        .unwrap_or_else(|| panic!("{DEPLOYMENT}: no named TCP container port {port}"));
    let endpoints = monitor
        .pointer("/spec/podMetricsEndpoints")
        .and_then(Value::as_array)
        .unwrap_or_else(|| panic!("{POD_MONITOR}: no spec.podMetricsEndpoints"));
    assert_eq!(
        endpoints.len(),
        1,
        "{POD_MONITOR}: one endpoint, the admin port"
    );
    assert_eq!(
        (
            string_at(&endpoints[0], "/port"),
            string_at(&endpoints[0], "/path")
        ),
        (Some(port_name), Some(path)),
        "{POD_MONITOR}: the endpoint should be the port and path of {DEPLOYMENT}'s prometheus.io annotations"
    );
}
