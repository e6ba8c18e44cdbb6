//! The `clusterset.local` DNS responder: the gateway answers the cluster
//! set's zone itself, so a cluster's stock CoreDNS can forward the zone to
//! it (`forward` block in deploy/examples/coredns/).
//!
//! | module | owns |
//! |---|---|
//! | `zone` | the zone: origin, TTLs, SOA, where a name sits in it (pure) |
//! | `answer` | the records of a name, from the route snapshot (pure) |
//! | `message` | decoding a query and encoding its answer within the size the query allows (pure) |
//! | `debug` | `/debug/dns`: an answer and why (pure) |
//! | `listener` | the sockets, TCP clients, their bounds and timeouts (I/O) |
//! | `udp` | the UDP worker threads: queries and answers in batches (I/O) |
//!
//! Everything but the listener is a function of its inputs, tested with no
//! sockets; the wire format is hickory-proto's.

mod answer;
mod counted;
mod debug;
mod listener;
mod message;
mod rate;
mod udp;
mod zone;

#[cfg(test)]
mod fixture;

pub use answer::{Answer, ExplainedBackend, Explanation, answer, explain};
pub use debug::{DebugError, lookup};
pub use listener::{DnsSockets, MAX_TCP_CONNECTIONS, MAX_TCP_PER_SOURCE, serve};
pub use message::{MAX_UDP_PAYLOAD, MIN_UDP_PAYLOAD, Reply, Transport, respond};
pub use rate::{RESPONSE_BURST, RESPONSES_PER_SECOND};
pub use zone::{Owner, Zone, ZoneError};
