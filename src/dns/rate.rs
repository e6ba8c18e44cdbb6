//! Response rate limiting for UDP (in the manner of BIND's RRL): a UDP
//! source address can be forged, so a responder that answers every query in
//! full can be made to send its answers to a victim, larger than the
//! queries that asked (up to 1,232 bytes for a query of about 60). Answers
//! larger than their query are counted per (source network, question): an
//! IPv4 /24 or IPv6 /56 and the query's name and type. Past
//! [`RESPONSES_PER_SECOND`] (after a burst), the answer "slips": it goes as
//! its question alone with TC set, no larger than the query, so a real
//! client retries over TCP (which a forged source cannot) and a victim
//! gets nothing larger than what was sent in its name.
//!
//! The table is split in [`SHARDS`] by key, so the UDP workers seldom wait
//! for one another on it. It holds at most [`MAX_TRACKED`] entries; past
//! that, a shard starts over (a forger spraying questions resets its own counts, and can still
//! reflect no more than one full answer per question per burst).

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::Instant;

use hickory_proto::op::Message;

use crate::token_bucket::TokenBucket;

/// Full answers to one question per second for one source network.
pub const RESPONSES_PER_SECOND: u32 = 20;
/// Full answers to one question a source network may get at once.
pub const RESPONSE_BURST: u32 = 40;
/// Entries tracked before the table starts over.
pub const MAX_TRACKED: usize = 100_000;
/// Independently locked parts of the table.
pub const SHARDS: usize = 16;

/// What a source network and a question are counted under.
type Key = (u128, u64);

/// The per-(source network, question) buckets.
#[derive(Debug, Default)]
pub struct ResponseRate {
    shards: [Mutex<HashMap<Key, TokenBucket>>; SHARDS],
}

impl ResponseRate {
    /// The answer to send `source` for `query`: `reply` itself, or its
    /// truncated form when the source network is over its rate for the
    /// question. `true` with it when it slipped.
    pub fn check(
        &self,
        source: IpAddr,
        query: &[u8],
        reply: Vec<u8>,
        now: Instant,
    ) -> (Vec<u8>, bool) {
        // An answer no larger than its query amplifies nothing.
        if reply.len() <= query.len() {
            return (reply, false);
        }
        let Some(question) = question_hash(query) else {
            return (reply, false);
        };
        let key = (network_of(source), question);
        // The question hash is already uniform: its low bits pick the shard.
        let shard = &self.shards[(question as usize) % SHARDS];
        let within = {
            let mut buckets = shard.lock().unwrap_or_else(|e| e.into_inner());
            if buckets.len() >= MAX_TRACKED / SHARDS && !buckets.contains_key(&key) {
                buckets.clear();
            }
            buckets
                .entry(key)
                .or_insert_with(|| TokenBucket::new(RESPONSES_PER_SECOND, RESPONSE_BURST, now))
                .spend(1, now)
        };
        if within {
            return (reply, false);
        }
        match slip(&reply) {
            Some(slipped) if slipped.len() <= query.len() => (slipped, true),
            // Could not be cut down to the query's size: nothing is sent.
            _ => (Vec::new(), true),
        }
    }
}

/// An IPv4 /24 or an IPv6 /56, as a number (IPv4 mapped into IPv6 space).
fn network_of(source: IpAddr) -> u128 {
    match source.to_canonical() {
        IpAddr::V4(v4) => u128::from(v4.to_ipv6_mapped()) & !0xff,
        IpAddr::V6(v6) => u128::from(v6) & !((1u128 << 72) - 1),
    }
}

/// A hash of the query's question (name, case folded, type and class), or
/// `None` when it has none.
fn question_hash(query: &[u8]) -> Option<u64> {
    let mut at = 12;
    let mut hasher = DefaultHasher::new();
    loop {
        let length = usize::from(*query.get(at)?);
        if length == 0 {
            break;
        }
        // Compression cannot occur in a question; a pointer is malformed.
        if length > 63 {
            return None;
        }
        let label = query.get(at + 1..at + 1 + length)?;
        label.to_ascii_lowercase().hash(&mut hasher);
        at += 1 + length;
    }
    query.get(at + 1..at + 5)?.hash(&mut hasher);
    Some(hasher.finish())
}

/// `reply` as its question alone with TC set.
fn slip(reply: &[u8]) -> Option<Vec<u8>> {
    Message::from_vec(reply).ok()?.truncate().to_vec().ok()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use hickory_proto::op::{MessageType, OpCode, Query};
    use hickory_proto::rr::{Name, RData, Record, RecordType};

    use super::*;

    fn query(name: &str) -> Vec<u8> {
        let mut message = Message::new(9, MessageType::Query, OpCode::Query);
        message.add_query(Query::query(
            Name::from_ascii(name).expect("name"),
            RecordType::A,
        ));
        message.to_vec().expect("encodes")
    }

    fn big_reply(name: &str) -> Vec<u8> {
        let mut message = Message::new(9, MessageType::Response, OpCode::Query);
        let owner = Name::from_ascii(name).expect("name");
        message.add_query(Query::query(owner.clone(), RecordType::A));
        for n in 0..20u8 {
            message.add_answer(Record::from_rdata(
                owner.clone(),
                5,
                RData::A(std::net::Ipv4Addr::new(10, 0, 0, n).into()),
            ));
        }
        message.to_vec().expect("encodes")
    }

    fn source(text: &str) -> IpAddr {
        text.parse().expect("an address")
    }

    #[test]
    fn past_the_burst_answers_slip_to_no_larger_than_the_query() {
        let rate = ResponseRate::default();
        let now = Instant::now();
        let (q, reply) = (
            query("db.app.svc.clusterset.local."),
            big_reply("db.app.svc.clusterset.local."),
        );
        for _ in 0..RESPONSE_BURST {
            let (sent, slipped) = rate.check(source("192.0.2.7"), &q, reply.clone(), now);
            assert!(!slipped);
            assert_eq!(sent, reply);
        }
        let (sent, slipped) = rate.check(source("192.0.2.7"), &q, reply.clone(), now);
        assert!(slipped);
        assert!(
            sent.len() <= q.len(),
            "{} bytes for a {}-byte query",
            sent.len(),
            q.len()
        );
        let message = Message::from_vec(&sent).expect("a DNS message");
        assert!(message.metadata.truncation, "TC: retry over TCP");
        assert!(message.answers.is_empty());
        // The same network (another host of the /24) shares the count.
        assert!(rate.check(source("192.0.2.99"), &q, reply.clone(), now).1);
        // Another network, and another question, are answered in full.
        assert!(!rate.check(source("198.51.100.7"), &q, reply.clone(), now).1);
        let other = query("web.app.svc.clusterset.local.");
        assert!(
            !rate
                .check(
                    source("192.0.2.7"),
                    &other,
                    big_reply("web.app.svc.clusterset.local."),
                    now
                )
                .1
        );
        // A second later, the rate has refilled.
        let later = now + Duration::from_secs(1);
        assert!(!rate.check(source("192.0.2.7"), &q, reply, later).1);
    }

    #[test]
    fn answers_no_larger_than_their_query_are_never_counted() {
        let rate = ResponseRate::default();
        let now = Instant::now();
        let q = query("nothere.app.svc.clusterset.local.");
        for _ in 0..1_000 {
            let small = q.clone();
            assert!(!rate.check(source("192.0.2.7"), &q, small, now).1);
        }
    }

    #[test]
    fn the_question_is_case_folded_and_a_malformed_one_is_not_hashed() {
        assert_eq!(
            question_hash(&query("DB.App.svc.clusterset.local.")),
            question_hash(&query("db.app.svc.clusterset.local."))
        );
        assert_ne!(
            question_hash(&query("db.app.svc.clusterset.local.")),
            question_hash(&query("web.app.svc.clusterset.local."))
        );
        assert_eq!(question_hash(&[0; 12]), None);
        let mut pointer = query("db.app.svc.clusterset.local.");
        pointer[12] = 0xc0;
        assert_eq!(question_hash(&pointer), None);
    }
}
