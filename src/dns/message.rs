//! One DNS message in, one out: decoding and encoding with hickory-proto,
//! the protocol rules around the answer, and the size rules. Pure: the
//! listener hands it bytes and the current routes, and sends what it gets.
//!
//! - Only standard queries with one question of class IN are answered;
//!   other opcodes get NOTIMP, malformed queries FORMERR, other classes
//!   REFUSED, and responses are never answered (no loops between servers).
//! - EDNS(0): a query with an OPT record gets one back; version 1 and up
//!   get BADVERS. Recursion is never offered (RA clear).
//! - Size: over UDP an answer is at most what the query invites: 512 bytes
//!   without EDNS, else its advertised payload, and never more than
//!   [`MAX_UDP_PAYLOAD`]. One that does not fit is sent as the question
//!   alone with TC set, so the client asks again over TCP; a reply is never
//!   larger than the query's limit. That limit still lets an answer be
//!   many times its query: `super::rate` bounds how often one source
//!   network gets such an answer to one question.

use hickory_proto::op::{Edns, Header, Message, MessageType, Metadata, OpCode, ResponseCode};
use hickory_proto::rr::{DNSClass, RecordType};
use hickory_proto::serialize::binary::{BinDecodable, BinDecoder};

use super::answer::{Answer, answer};
use super::zone::Zone;
use crate::admin::metrics::{DnsQueryType, DnsRcode};
use crate::routing::RouteTable;

/// The largest UDP answer sent, whatever a query advertises: the EDNS
/// buffer size DNS Flag Day 2020 settled on, which avoids IP fragmentation.
pub const MAX_UDP_PAYLOAD: u16 = 1232;

/// What a UDP query without EDNS may receive (RFC 1035).
pub const MIN_UDP_PAYLOAD: u16 = 512;

/// The TC flag in the third byte of a message header (RFC 1035 §4.1.1).
const TC_BIT: u8 = 0x02;

/// The transport a query came over: it sets the size limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Udp,
    Tcp,
}

impl Transport {
    pub fn as_str(self) -> &'static str {
        match self {
            Transport::Udp => "udp",
            Transport::Tcp => "tcp",
        }
    }
}

/// The encoded answer to one query, with what the metrics count.
#[derive(Debug, Clone)]
pub struct Reply {
    pub bytes: Vec<u8>,
    pub qtype: DnsQueryType,
    pub rcode: DnsRcode,
    /// The full answer did not fit and was cut (TC set).
    pub truncated: bool,
}

/// Answers one query message; `None` when nothing may be sent back (not a
/// DNS header, or a response rather than a query).
pub fn respond(
    table: &RouteTable,
    zone: &Zone,
    query: &[u8],
    transport: Transport,
) -> Option<Reply> {
    let header = Header::read(&mut BinDecoder::new(query)).ok()?;
    if header.metadata.message_type != MessageType::Query {
        return None;
    }
    let mut reply = Message::new(
        header.metadata.id,
        MessageType::Response,
        header.metadata.op_code,
    );
    reply.metadata = Metadata::response_from_request(&header.metadata);
    let Ok(request) = Message::from_vec(query) else {
        reply.metadata.response_code = ResponseCode::FormErr;
        return Some(encode(
            reply,
            DnsQueryType::None,
            MIN_UDP_PAYLOAD,
            transport,
        ));
    };
    reply.add_queries(request.queries.iter().cloned());
    if let Some(edns) = &request.edns {
        reply.set_edns(server_edns());
        if edns.version() > 0 {
            reply.metadata.response_code = ResponseCode::BADVERS;
        }
    }
    let limit = match transport {
        Transport::Udp => request
            .edns
            .as_ref()
            .map_or(MIN_UDP_PAYLOAD, Edns::max_payload)
            .clamp(MIN_UDP_PAYLOAD, MAX_UDP_PAYLOAD),
        Transport::Tcp => u16::MAX,
    };
    let qtype = request
        .queries
        .first()
        .map_or(DnsQueryType::None, |q| query_type(q.query_type()));
    if reply.metadata.response_code != ResponseCode::NoError {
        return Some(encode(reply, qtype, limit, transport));
    }
    if request.metadata.op_code != OpCode::Query {
        reply.metadata.response_code = ResponseCode::NotImp;
        return Some(encode(reply, qtype, limit, transport));
    }
    let [question] = request.queries.as_slice() else {
        reply.metadata.response_code = ResponseCode::FormErr;
        return Some(encode(reply, qtype, limit, transport));
    };
    if question.query_class() != DNSClass::IN {
        reply.metadata.response_code = ResponseCode::Refused;
        return Some(encode(reply, qtype, limit, transport));
    }
    let Answer {
        rcode,
        authoritative,
        answers,
        authorities,
    } = answer(table, zone, question.name(), question.query_type());
    reply.metadata.response_code = rcode;
    reply.metadata.authoritative = authoritative;
    reply.answers = answers;
    reply.authorities = authorities;
    Some(encode(reply, qtype, limit, transport))
}

/// The OPT record of every EDNS answer: version 0, no DNSSEC, and the
/// largest UDP payload this server sends.
fn server_edns() -> Edns {
    let mut edns = Edns::new();
    edns.set_max_payload(MAX_UDP_PAYLOAD).set_version(0);
    edns
}

/// Encodes `reply` within `limit` bytes. Over UDP an answer that does not
/// fit goes as its question alone with TC set; over TCP (65,535 bytes per
/// message) as many answer records as fit, with TC set.
fn encode(mut reply: Message, qtype: DnsQueryType, limit: u16, transport: Transport) -> Reply {
    let rcode = rcode_label(reply.metadata.response_code);
    let limit = usize::from(limit);
    // hickory-proto stops writing records at 65,535 bytes and sets TC
    // itself, dropping the OPT record with them: that is not a fit either.
    let fits = |bytes: &Vec<u8>| {
        bytes.len() <= limit && bytes.get(2).is_some_and(|flags| flags & TC_BIT == 0)
    };
    if let Some(bytes) = to_bytes(&reply).filter(fits) {
        return Reply {
            bytes,
            qtype,
            rcode,
            truncated: false,
        };
    }
    let bytes = match transport {
        Transport::Udp => to_bytes(&reply.truncate()),
        Transport::Tcp => {
            // The largest prefix of the answers that fits.
            let all = std::mem::take(&mut reply.answers);
            let (mut kept, mut too_many) = (0, all.len());
            while too_many - kept > 1 {
                let middle = kept + (too_many - kept) / 2;
                reply.answers = all[..middle].to_vec();
                if to_bytes(&reply).is_some_and(|b| fits(&b)) {
                    kept = middle;
                } else {
                    too_many = middle;
                }
            }
            reply.answers = all[..kept].to_vec();
            reply.metadata.truncation = true;
            to_bytes(&reply)
        }
    };
    // The question and an OPT record always fit in 512 bytes; if encoding
    // still fails, a bare SERVFAIL header does.
    let bytes = bytes.filter(|b| b.len() <= limit).unwrap_or_else(|| {
        let mut failed = Message::new(reply.metadata.id, MessageType::Response, reply.op_code);
        failed.metadata.response_code = ResponseCode::ServFail;
        to_bytes(&failed).unwrap_or_default()
    });
    Reply {
        bytes,
        qtype,
        rcode,
        truncated: true,
    }
}

fn to_bytes(message: &Message) -> Option<Vec<u8>> {
    match message.to_vec() {
        Ok(bytes) => Some(bytes),
        Err(error) => {
            tracing::debug!(%error, "dns: cannot encode an answer");
            None
        }
    }
}

/// The metrics label of a query type.
pub fn query_type(qtype: RecordType) -> DnsQueryType {
    match qtype {
        RecordType::A => DnsQueryType::A,
        RecordType::AAAA => DnsQueryType::Aaaa,
        RecordType::SRV => DnsQueryType::Srv,
        RecordType::SOA => DnsQueryType::Soa,
        RecordType::NS => DnsQueryType::Ns,
        RecordType::PTR => DnsQueryType::Ptr,
        RecordType::ANY => DnsQueryType::Any,
        _ => DnsQueryType::Other,
    }
}

/// The metrics label of a response code.
pub fn rcode_label(rcode: ResponseCode) -> DnsRcode {
    match rcode {
        ResponseCode::NoError => DnsRcode::NoError,
        ResponseCode::NXDomain => DnsRcode::NxDomain,
        ResponseCode::Refused => DnsRcode::Refused,
        ResponseCode::FormErr => DnsRcode::FormErr,
        ResponseCode::NotImp => DnsRcode::NotImp,
        ResponseCode::BADVERS => DnsRcode::BadVers,
        _ => DnsRcode::ServFail,
    }
}

#[cfg(test)]
#[path = "message_tests.rs"]
mod tests;
