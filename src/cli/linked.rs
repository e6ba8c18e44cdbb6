//! The checks `strait check --kube` makes of an installed gateway's own
//! view (`/debug/status`, read through the API server's port-forward):
//! each cluster it links (read and synced, its network attested here and
//! what it says of itself), each of that cluster's gateways (answering a
//! request from this gateway over the tunnel's mutual TLS, its clock, its
//! network map against this one), the import port range against the
//! ports imported, and the objects left out. Pure: judged from the view.

use serde_json::Value;

use super::installation::{Check, Outcome};

/// Clocks further apart than this get a warning: the oldest export wins a
/// port conflict by its creation time, and a certificate is not valid
/// before its start.
const SKEW_WARNING_MS: i64 = 5_000;
/// A range more used than this gets a warning.
const RANGE_WARNING: f64 = 0.9;

const DOCS_LINK: &str = "docs/kubernetes.md#8-connect-the-other-clusters";
const DOCS_NETWORKS: &str = "docs/configuration.md#gatewayyaml";
const DOCS_IMPORTS: &str = "docs/configuration.md#import-ports-and-strait-imports";
const DOCS_TUNNEL: &str = "docs/kubernetes.md#10-verify-the-tunnel";

/// A field of a JSON view as text: a string as it is, anything else as
/// JSON, absent as `-`.
pub(super) fn text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Null => "-".to_owned(),
        other => other.to_string(),
    }
}

/// Every check of the gateway's view.
pub fn view_checks(view: &Value) -> Vec<Check> {
    let mut checks = Vec::new();
    let own = view["cluster"].as_str().unwrap_or_default();
    let clusters = view["clusters"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    let remote: Vec<&Value> = clusters
        .iter()
        .filter(|c| c["readFrom"] != "local" && c["id"] != own)
        .collect();
    if remote.is_empty() {
        checks.push(
            Check::new(
                "links",
                Outcome::Warning,
                "this cluster is linked to no other",
            )
            .hint("strait link --kubeconfig OTHER --apply", DOCS_LINK),
        );
    }
    for cluster in remote {
        checks.extend(cluster_checks(cluster));
    }
    checks.extend(import_checks(&view["imports"]));
    let findings = &view["findings"];
    let errors = findings["errors"].as_u64().unwrap_or(0);
    if errors > 0 {
        let listed: Vec<String> = findings["listed"]
            .as_array()
            .into_iter()
            .flatten()
            .take(3)
            .map(text)
            .collect();
        checks.push(
            Check::new(
                "objects",
                Outcome::Warning,
                format!("{errors} object(s) left out: {}", listed.join("; ")),
            )
            .hint(
                "each is excluded alone; strait check --kube lists them all above",
                "docs/kubernetes.md#export-status-and-leader-election",
            ),
        );
    } else {
        checks.push(Check::new(
            "objects",
            Outcome::Ok,
            "the gateway left out no object",
        ));
    }
    checks
}

/// One linked cluster: its sync, its network, each of its gateways.
fn cluster_checks(cluster: &Value) -> Vec<Check> {
    let id = text(&cluster["id"]);
    let read_from = text(&cluster["readFrom"]);
    let mut checks = Vec::new();
    let how = if read_from == "feed" {
        "its feed over the tunnel"
    } else {
        "its API server"
    };
    match cluster["state"].as_str() {
        Some("synced") => checks.push(Check::new(
            "links",
            Outcome::Ok,
            format!("{id} is read from {how}, synced since {}", text(&cluster["since"])),
        )),
        state => checks.push(
            Check::new(
                "links",
                if matches!(state, Some("connecting" | "unsynced")) {
                    Outcome::Warning
                } else {
                    Outcome::Failed
                },
                format!(
                    "{id} is read from {how}, {} since {}{}",
                    state.unwrap_or("in no known state"),
                    text(&cluster["since"]),
                    cluster["lastError"]
                        .as_str()
                        .map(|e| format!(": {e}"))
                        .unwrap_or_default()
                ),
            )
            .hint(
                if read_from == "feed" {
                    "its gateway must answer on its tunnel address and admit this cluster; strait link --kubeconfig OTHER --apply again if its CA changed"
                } else {
                    "its kubeconfig or token may be revoked or expired: strait link --api again"
                },
                DOCS_LINK,
            ),
        ),
    }
    let network = cluster["network"].as_str();
    if cluster["networkAttested"] == false {
        checks.push(
            Check::new(
                "links",
                Outcome::Warning,
                format!(
                    "{id}'s network {} is its own word: this cluster's network map does not attest it",
                    network.unwrap_or("-")
                ),
            )
            .hint(
                "add it to gateway.yaml's networks (the Helm value networks) in every cluster",
                DOCS_NETWORKS,
            ),
        );
    }
    let gateways = cluster["gateways"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    if gateways.is_empty() {
        checks.push(
            Check::new(
                "tunnel",
                Outcome::Failed,
                format!("{id} names no gateway address"),
            )
            .hint(
                "its cluster-edge Service needs a load-balancer address",
                DOCS_TUNNEL,
            ),
        );
    }
    for gateway in gateways {
        let gateway = text(gateway);
        let probe = &cluster["probes"][&gateway];
        checks.extend(gateway_checks(&id, network, &gateway, probe));
    }
    checks.extend(importer_checks(&id, &cluster["importsOfOurs"]));
    checks
}

/// What the cluster `id` said of this cluster's exports: which it
/// imports, and each it does not for a reason its admin must act on (a
/// missing namespace, another controller's ServiceImport).
fn importer_checks(id: &str, account: &Value) -> Option<Check> {
    if account.is_null() {
        return None;
    }
    let imported = account["imported"].as_u64().unwrap_or(0);
    let listed = account["notImportedListed"]
        .as_object()
        .map(|listed| {
            listed
                .iter()
                .map(|(service, why)| (service.as_str(), why.as_str().unwrap_or_default()))
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    let blocked: Vec<String> = listed
        .iter()
        .filter(|(_, why)| *why != "pending")
        .map(|(service, why)| {
            let namespace = service.split_once('/').map_or("", |(ns, _)| ns);
            match *why {
                "no-namespace" => format!("{service} (no namespace {namespace} there)"),
                "foreign-import" => {
                    format!("{service} (another controller's ServiceImport holds the name)")
                }
                other => format!("{service} ({other})"),
            }
        })
        .collect();
    let not_imported = account["notImported"].as_u64().unwrap_or(0);
    if blocked.is_empty() {
        let pending = if not_imported > 0 {
            format!(", {not_imported} being written")
        } else {
            String::new()
        };
        return Some(Check::new(
            "imports",
            Outcome::Ok,
            format!("{id} imports {imported} of the services this cluster exports{pending}"),
        ));
    }
    Some(
        Check::new(
            "imports",
            Outcome::Warning,
            format!(
                "{id} imports {imported} of the services this cluster exports, and not {not_imported}: {}",
                blocked.join(", ")
            ),
        )
        .hint(
            "Strait never creates a namespace: its admin creates the namespace there if that cluster should import the service",
            "docs/kubernetes.md#export-status-and-leader-election",
        ),
    )
}

/// One gateway's last answer to this gateway's question.
fn gateway_checks(id: &str, network: Option<&str>, gateway: &str, probe: &Value) -> Vec<Check> {
    if probe.is_null() {
        return vec![Check::new(
            "tunnel",
            Outcome::Warning,
            format!("{id}'s gateway {gateway} was not asked yet (every 30 s)"),
        )];
    }
    if let Some(error) = probe["error"].as_str() {
        return vec![
            Check::new(
                "tunnel",
                Outcome::Failed,
                format!(
                    "{id}'s gateway {gateway} did not answer this gateway at {}: {error}",
                    text(&probe["checkedAt"])
                ),
            )
            .hint(
                "its pods must run, its address must be reachable from this network, and its certificate must be signed by the CA this cluster trusts for it",
                DOCS_TUNNEL,
            ),
        ];
    }
    let mut checks = vec![Check::new(
        "tunnel",
        Outcome::Ok,
        format!(
            "{id}'s gateway {gateway} answered over mutual TLS in {} ms",
            text(&probe["roundTripMs"])
        ),
    )];
    if let Some(skew) = probe["clockSkewMs"].as_i64()
        && skew.abs() >= SKEW_WARNING_MS
    {
        checks.push(
            Check::new(
                "tunnel",
                Outcome::Warning,
                format!("{id}'s clock is {skew} ms from this cluster's"),
            )
            .hint(
                "synchronise the nodes' clocks (NTP): the oldest export wins a conflict by its time",
                DOCS_TUNNEL,
            ),
        );
    }
    if let (Some(said), Some(here)) = (probe["network"].as_str(), network)
        && said != here
    {
        checks.push(
            Check::new(
                "tunnel",
                Outcome::Warning,
                format!("{id} says it is on {said}; here it is on {here}"),
            )
            .hint(
                "its ClusterProperty or its network map disagrees with this cluster's: make them name one network",
                DOCS_NETWORKS,
            ),
        );
    }
    let differences: Vec<String> = probe["networkMapDifferences"]
        .as_array()
        .into_iter()
        .flatten()
        .map(text)
        .collect();
    if !differences.is_empty() {
        checks.push(
            Check::new(
                "tunnel",
                Outcome::Failed,
                format!(
                    "{id}'s network map differs from this cluster's: {}",
                    differences.join("; ")
                ),
            )
            .hint(
                "give every cluster the same networks in gateway.yaml: a cluster placed on two networks is reached directly from one side and through a gateway from the other",
                DOCS_NETWORKS,
            ),
        );
    }
    checks
}

/// The import port range against the ports imported.
fn import_checks(imports: &Value) -> Vec<Check> {
    let ports = &imports["ports"];
    let (Some(size), Some(used)) = (ports["size"].as_u64(), ports["used"].as_u64()) else {
        return Vec::new();
    };
    let range = text(&ports["range"]);
    let exhausted = ports["exhausted"].as_u64().unwrap_or(0);
    let hint = "widen imports.portRange (the Helm value imports.portRange) and the NetworkPolicy that admits it";
    if exhausted > 0 {
        let listed: Vec<String> = ports["exhaustedListed"]
            .as_array()
            .into_iter()
            .flatten()
            .map(text)
            .collect();
        return vec![Check::new(
            "imports",
            Outcome::Failed,
            format!(
                "the import port range {range} is full: {exhausted} service port(s) have none ({})",
                listed.join(", ")
            ),
        )
        .hint(hint, DOCS_IMPORTS)];
    }
    #[allow(
        clippy::cast_precision_loss,
        reason = "a share of at most 65,535 ports"
    )]
    let share = used as f64 / size.max(1) as f64;
    if share >= RANGE_WARNING {
        vec![
            Check::new(
                "imports",
                Outcome::Warning,
                format!("the import port range {range} holds {size} ports, {used} in use"),
            )
            .hint(hint, DOCS_IMPORTS),
        ]
    } else {
        vec![Check::new(
            "imports",
            Outcome::Ok,
            format!("the import port range {range} holds {size} ports, {used} in use"),
        )]
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::view_checks;
    use crate::cli::installation::Outcome;

    fn view(probe: serde_json::Value, state: &str, used: u64) -> serde_json::Value {
        json!({
            "cluster": "c1",
            "clusters": [
                {"id": "c1", "readFrom": "local", "state": "synced", "gateways": ["10.0.0.1:15008"]},
                {"id": "c3", "readFrom": "feed", "state": state, "since": "2026-12-07T10:00:00Z",
                 "lastError": if state == "synced" { json!(null) } else { json!("connection refused") },
                 "network": "net-b", "networkAttested": true,
                 "gateways": ["172.31.100.13:15008"], "probes": {"172.31.100.13:15008": probe}},
            ],
            "imports": {"ports": {"range": "30000-30009", "size": 10, "used": used, "exhausted": 0}},
            "findings": {"errors": 0, "warnings": 0, "listed": []},
        })
    }

    fn ok_probe() -> serde_json::Value {
        json!({"checkedAt": "2026-12-07T10:00:00Z", "error": null, "roundTripMs": 3,
               "clockSkewMs": 20, "network": "net-b", "networkMapDifferences": []})
    }

    fn outcomes(view: &serde_json::Value) -> Vec<(Outcome, String)> {
        view_checks(view)
            .into_iter()
            .map(|c| (c.outcome, c.message))
            .collect()
    }

    #[test]
    fn a_healthy_link_passes_every_check() {
        let checks = outcomes(&view(ok_probe(), "synced", 3));
        assert!(checks.iter().all(|(o, _)| *o == Outcome::Ok), "{checks:#?}");
        assert!(
            checks
                .iter()
                .any(|(_, m)| m
                    == "c3's gateway 172.31.100.13:15008 answered over mutual TLS in 3 ms")
        );
        assert!(
            checks
                .iter()
                .any(|(_, m)| m.starts_with("c3 is read from its feed over the tunnel, synced"))
        );
    }

    #[test]
    fn a_gateway_that_does_not_answer_fails() {
        let probe = json!({"checkedAt": "t", "error": "connection refused"});
        let checks = outcomes(&view(probe, "synced", 3));
        assert!(checks.contains(&(
            Outcome::Failed,
            "c3's gateway 172.31.100.13:15008 did not answer this gateway at t: connection refused".to_owned()
        )), "{checks:#?}");
    }

    #[test]
    fn a_stale_feed_fails_and_names_its_error() {
        let checks = outcomes(&view(ok_probe(), "stale", 3));
        assert!(checks.contains(&(
            Outcome::Failed,
            "c3 is read from its feed over the tunnel, stale since 2026-12-07T10:00:00Z: connection refused".to_owned()
        )), "{checks:#?}");
    }

    #[test]
    fn skewed_clocks_warn_and_differing_maps_fail() {
        let mut probe = ok_probe();
        probe["clockSkewMs"] = json!(-7_000);
        probe["network"] = json!("net-c");
        probe["networkMapDifferences"] = json!(["c2: net-a here, net-c there"]);
        let checks = outcomes(&view(probe, "synced", 3));
        for expected in [
            (
                Outcome::Warning,
                "c3's clock is -7000 ms from this cluster's",
            ),
            (
                Outcome::Warning,
                "c3 says it is on net-c; here it is on net-b",
            ),
            (
                Outcome::Failed,
                "c3's network map differs from this cluster's: c2: net-a here, net-c there",
            ),
        ] {
            assert!(
                checks.contains(&(expected.0, expected.1.to_owned())),
                "{expected:?} in {checks:#?}"
            );
        }
    }

    #[test]
    fn a_cluster_that_cannot_import_an_export_is_named_with_why() {
        let mut healthy = view(ok_probe(), "synced", 3);
        healthy["clusters"][1]["importsOfOurs"] = json!({
            "imported": 4, "notImported": 1,
            "notImportedListed": {"shop/web": "pending"}, "unlisted": 0});
        let checks = outcomes(&healthy);
        assert!(
            checks.contains(&(
                Outcome::Ok,
                "c3 imports 4 of the services this cluster exports, 1 being written".to_owned()
            )),
            "{checks:#?}"
        );
        let mut missing = view(ok_probe(), "synced", 3);
        missing["clusters"][1]["importsOfOurs"] = json!({
            "imported": 3, "notImported": 2,
            "notImportedListed": {"shop/cart": "no-namespace", "shop/web": "pending"},
            "unlisted": 0});
        let checks = outcomes(&missing);
        assert!(
            checks.contains(&(
                Outcome::Warning,
                "c3 imports 3 of the services this cluster exports, and not 2: shop/cart (no namespace shop there)".to_owned()
            )),
            "{checks:#?}"
        );
    }

    #[test]
    fn a_range_nearly_full_warns_and_a_full_one_fails() {
        let checks = outcomes(&view(ok_probe(), "synced", 9));
        assert!(checks.contains(&(
            Outcome::Warning,
            "the import port range 30000-30009 holds 10 ports, 9 in use".to_owned()
        )));
        let mut full = view(ok_probe(), "synced", 10);
        full["imports"]["ports"]["exhausted"] = json!(2);
        full["imports"]["ports"]["exhaustedListed"] = json!(["shop/a:80/TCP", "shop/b:80/TCP"]);
        let checks = outcomes(&full);
        assert!(
            checks.iter().any(|(o, m)| *o == Outcome::Failed
                && m.contains(
                    "is full: 2 service port(s) have none (shop/a:80/TCP, shop/b:80/TCP)"
                )),
            "{checks:#?}"
        );
    }
}
