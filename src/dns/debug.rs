//! `/debug/dns?name=NAME&type=TYPE` on the admin listener: the answer the
//! responder would give now, in zone-file notation, and why (the service,
//! port and backends it came from). Pure: it reads the route snapshot it is
//! given, like a query does.

use std::str::FromStr;

use hickory_proto::rr::{Name, RecordType};
use serde_json::json;

use super::answer::explain;
use super::message::rcode_label;
use super::zone::Zone;
use crate::routing::RouteTable;

/// Why a `/debug/dns` request cannot be answered (a 400).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DebugError {
    #[error("missing name: use /debug/dns?name=<name>&type=<type>")]
    MissingName,
    #[error("{0:?} is not a domain name")]
    BadName(String),
    #[error("{0:?} is not a record type (A, AAAA, SRV, SOA, ANY, ...)")]
    BadType(String),
}

/// Answers the query string of one `/debug/dns` request.
pub fn lookup(
    table: &RouteTable,
    zone: &Zone,
    listening: Option<std::net::SocketAddr>,
    query: &str,
) -> Result<serde_json::Value, DebugError> {
    let mut name = None;
    let mut qtype = "A".to_owned();
    for (key, value) in form_urlencoded::parse(query.as_bytes()) {
        match &*key {
            "name" => name = Some(value.into_owned()),
            "type" => qtype = value.into_owned(),
            _ => {}
        }
    }
    let text = name
        .filter(|n| !n.is_empty())
        .ok_or(DebugError::MissingName)?;
    let mut parsed = Name::from_ascii(&text).map_err(|_| DebugError::BadName(text.clone()))?;
    // A name typed without its final dot still means the absolute name.
    parsed.set_fqdn(true);
    let record_type = RecordType::from_str(&qtype.to_ascii_uppercase())
        .map_err(|_| DebugError::BadType(qtype.clone()))?;
    let (answer, explanation) = explain(table, zone, &parsed, record_type);
    let records = |records: &[hickory_proto::rr::Record]| -> Vec<String> {
        records.iter().map(ToString::to_string).collect()
    };
    Ok(json!({
        "name": parsed.to_ascii(),
        "type": record_type.to_string(),
        "rcode": rcode_label(answer.rcode).as_str().to_ascii_uppercase(),
        "nodata": answer.is_nodata(),
        "authoritative": answer.authoritative,
        "answers": records(&answer.answers),
        "authority": records(&answer.authorities),
        "explanation": explanation,
        "zone": zone.origin().to_ascii(),
        "listening": listening.map(|a| a.to_string()),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dns::fixture::{table, zone};

    #[test]
    fn a_lookup_shows_the_answer_and_the_service_it_came_from() {
        let view = lookup(
            &table(),
            &zone(),
            None,
            "name=Cart.shop.svc.clusterset.local&type=a",
        )
        .expect("valid request");
        assert_eq!(view["rcode"], "NOERROR");
        assert_eq!(view["type"], "A");
        assert_eq!(
            view["answers"],
            json!(["Cart.shop.svc.clusterset.local. 5 IN A 240.0.0.10"])
        );
        assert_eq!(view["explanation"]["service"], "shop/cart");
        assert_eq!(view["explanation"]["service_type"], "ClusterSetIP");
    }

    #[test]
    fn a_headless_lookup_lists_backends_answered_and_not() {
        let view = lookup(
            &table(),
            &zone(),
            None,
            "name=replica.db.svc.clusterset.local.",
        )
        .expect("valid request");
        assert_eq!(view["rcode"], "NOERROR");
        assert_eq!(view["nodata"], true);
        let backend = &view["explanation"]["backends"][0];
        assert_eq!(backend["cluster"], "west-1");
        assert_eq!(backend["answered"], false);
        assert!(
            backend["reason"]
                .as_str()
                .is_some_and(|r| r.contains("another network")),
            "{backend}"
        );
    }

    #[test]
    fn bad_requests_say_what_is_wrong() {
        let (table, zone) = (table(), zone());
        assert_eq!(
            lookup(&table, &zone, None, "type=A"),
            Err(DebugError::MissingName)
        );
        assert_eq!(
            lookup(&table, &zone, None, "name=a..b"),
            Err(DebugError::BadName("a..b".into()))
        );
        assert_eq!(
            lookup(&table, &zone, None, "name=cart&type=NOPE"),
            Err(DebugError::BadType("NOPE".into()))
        );
    }
}
