//! Where the import ports Strait allocated are recorded: an annotation on
//! the ServiceImport each belongs to. A ServiceImport is Strait's to write
//! (tenants hold no rights on the MCS API; docs/security.md), while a
//! derived Service sits in the tenant's namespace, where the tenant may
//! edit its `targetPort`s or forge one with Strait's labels: were the
//! record read from there, a tenant could claim another service's import
//! port and draw its clients. Pure: encoding and decoding.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{ClusterId, PodRef, PortKey, Protocol, ServiceKey};

/// One recorded import port, as the annotation's JSON lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Entry {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    cluster: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pod: Option<String>,
    protocol: String,
    port: u16,
    import_port: u16,
}

/// The annotation's value for `ports` (all of one service): JSON, in key
/// order, so equal allocations give equal text.
pub fn encode<'a>(ports: impl IntoIterator<Item = (&'a PortKey, u16)>) -> String {
    let entries: Vec<Entry> = ports
        .into_iter()
        .map(|(key, import_port)| Entry {
            cluster: key.pod.as_ref().map(|pod| pod.cluster.to_string()),
            pod: key.pod.as_ref().map(|pod| pod.label.clone()),
            protocol: key.protocol.as_str().to_owned(),
            port: key.port,
            import_port,
        })
        .collect();
    serde_json::to_string(&entries).unwrap_or_default()
}

/// The import ports `text` records for `service`; `None` when it cannot
/// be read (the record is then treated as absent, and ports allocated
/// afresh rather than guessed).
pub fn decode(service: &ServiceKey, text: &str) -> Option<BTreeMap<PortKey, u16>> {
    let entries: Vec<Entry> = serde_json::from_str(text).ok()?;
    let mut recorded = BTreeMap::new();
    for entry in entries {
        let pod = match (entry.cluster, entry.pod) {
            (Some(cluster), Some(label)) => Some(PodRef {
                cluster: ClusterId::new(&cluster).ok()?,
                label,
            }),
            (None, None) => None,
            _ => return None,
        };
        let key = PortKey {
            service: service.clone(),
            protocol: entry.protocol.parse::<Protocol>().ok()?,
            port: entry.port,
            pod,
        };
        recorded.insert(key, entry.import_port);
    }
    Some(recorded)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_reads_back_as_written() {
        let service = ServiceKey::new("shop", "cart");
        let pod = PodRef {
            cluster: ClusterId::new("c3").expect("id"),
            label: "pg-1".to_owned(),
        };
        let ports = BTreeMap::from([
            (
                PortKey::service_port(service.clone(), Protocol::Tcp, 80),
                20001,
            ),
            (
                PortKey {
                    service: service.clone(),
                    protocol: Protocol::Tcp,
                    port: 5432,
                    pod: Some(pod),
                },
                20007,
            ),
        ]);
        let text = encode(ports.iter().map(|(k, v)| (k, *v)));
        assert_eq!(decode(&service, &text), Some(ports));
        for bad in [
            "",
            "{}",
            "[{\"protocol\":\"TCP\",\"port\":80}]",
            "[{\"cluster\":\"c3\",\"protocol\":\"TCP\",\"port\":1,\"importPort\":2}]",
        ] {
            assert_eq!(decode(&service, bad), None, "{bad}");
        }
    }
}
