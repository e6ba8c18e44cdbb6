//! One query answered from the routes current at that moment, and counted
//! in the metrics: the step the UDP workers and the TCP connections share.

use super::message::{Transport, respond};
use super::zone::Zone;
use crate::admin::metrics::DnsTransport;
use crate::state::GatewayState;

/// Answers one query from the routes current now, and counts it.
pub(super) fn answer(
    state: &GatewayState,
    zone: &Zone,
    query: &[u8],
    transport: Transport,
) -> Option<Vec<u8>> {
    let routes = state.routes.load();
    let reply = respond(&routes, zone, query, transport).filter(|r| !r.bytes.is_empty())?;
    let truncated = reply.truncated.then_some(match transport {
        Transport::Udp => DnsTransport::Udp,
        Transport::Tcp => DnsTransport::Tcp,
    });
    state.metrics.dns_query(reply.qtype, reply.rcode, truncated);
    Some(reply.bytes)
}
