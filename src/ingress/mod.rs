//! The tunnel server: peer gateways' CONNECT requests, over HTTP/2 (`h2`)
//! and QUIC (`quic`), authenticated by their certificates, authorised and
//! dialled to local backends (`inbound`, shared by both transports); a
//! peer's connection ends as [`crate::tls::lifetime`] says.

pub mod about;
pub mod feed;
pub mod h2;
pub mod inbound;
pub mod quic;

/// How a retired peer connection counts in `strait_limited_total`.
pub(crate) fn retirement_limit(
    retirement: &crate::tls::lifetime::Retirement,
) -> crate::admin::metrics::Limit {
    use crate::admin::metrics::Limit;
    use crate::tls::lifetime::Retirement;
    match retirement {
        Retirement::NoLongerTrusted(_) => Limit::Revoked,
        Retirement::Expired => Limit::CertificateExpired,
        Retirement::MaxAge => Limit::MaxConnectionAge,
    }
}
