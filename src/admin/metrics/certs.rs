//! When the gateway's own certificates expire: its leaf (`tls.crt`) and the
//! first of the CAs it trusts to expire (`ca.crt`), as Unix times, set
//! whenever the TLS material is loaded or swapped. A timestamp rather than
//! the seconds left, so that the value is right between updates and an
//! alert computes what is left against `time()`.

use std::time::SystemTime;

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

label_enum! {
    /// Which of the gateway's certificates.
    Certificate {
        /// Its own leaf, `tls.crt`.
        Leaf => "leaf",
        /// The trusted CA of `ca.crt` that expires first.
        Ca => "ca",
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct CertificateLabels {
    certificate: Certificate,
}

/// `strait_tls_cert_expiry_timestamp_seconds{certificate}`.
#[derive(Debug, Default)]
pub(super) struct CertMetrics {
    expiry: Family<CertificateLabels, Gauge>,
}

impl CertMetrics {
    pub(super) fn register(&self, registry: &mut Registry) {
        registry.register(
            "tls_cert_expiry_timestamp_seconds",
            "When the gateway's certificate expires, as a Unix time: its own leaf (tls.crt) and the first CA of ca.crt to expire; subtract time() for what is left",
            self.expiry.clone(),
        );
    }

    pub(super) fn set(&self, leaf: SystemTime, ca: Option<SystemTime>) {
        let unix = |at: SystemTime| {
            at.duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0, |since| {
                    i64::try_from(since.as_secs()).unwrap_or(i64::MAX)
                })
        };
        for &certificate in Certificate::ALL {
            let labels = CertificateLabels { certificate };
            let expires = match certificate {
                Certificate::Leaf => Some(leaf),
                Certificate::Ca => ca,
            };
            match expires {
                Some(at) => {
                    self.expiry.get_or_create(&labels).set(unix(at));
                }
                None => {
                    self.expiry.remove(&labels);
                }
            }
        }
    }
}
