//! Whole messages through `respond`: header bits, EDNS, protocol errors
//! and the size limits of each transport.

use hickory_proto::op::Query;
use hickory_proto::rr::rdata::A;
use hickory_proto::rr::{Name, RData, Record};

use super::*;
use crate::dns::fixture::{name, table, zone};

/// A query for `qname`/`qtype` with id 4242 and RD set; `edns` is the
/// advertised UDP payload, `None` for a query without EDNS.
fn query(qname: &str, qtype: RecordType, edns: Option<u16>) -> Message {
    let mut message = Message::new(4242, MessageType::Query, OpCode::Query);
    message.metadata.recursion_desired = true;
    message.add_query(Query::query(name(qname), qtype));
    if let Some(payload) = edns {
        let mut opt = Edns::new();
        opt.set_max_payload(payload);
        message.set_edns(opt);
    }
    message
}

fn send(message: &Message, transport: Transport) -> (Reply, Message) {
    let bytes = message.to_vec().expect("query encodes");
    let reply = respond(&table(), &zone(), &bytes, transport).expect("an answer");
    let decoded = Message::from_vec(&reply.bytes).expect("the answer decodes");
    (reply, decoded)
}

#[test]
fn an_answer_echoes_id_question_and_rd_and_offers_no_recursion() {
    let (reply, answer) = send(
        &query("Cart.shop.svc.clusterset.local.", RecordType::A, None),
        Transport::Udp,
    );
    assert_eq!(answer.metadata.id, 4242);
    assert_eq!(answer.metadata.message_type, MessageType::Response);
    assert!(answer.metadata.authoritative);
    assert!(answer.metadata.recursion_desired);
    assert!(!answer.metadata.recursion_available);
    assert!(!answer.metadata.truncation);
    assert_eq!(answer.queries.len(), 1);
    assert_eq!(
        answer.queries[0].name().to_ascii(),
        "Cart.shop.svc.clusterset.local."
    );
    assert_eq!(answer.answers.len(), 1);
    assert!(answer.edns.is_none(), "no OPT for a query without one");
    assert_eq!(
        (reply.qtype, reply.rcode),
        (DnsQueryType::A, DnsRcode::NoError)
    );
}

#[test]
fn an_edns_query_gets_an_opt_record_with_this_servers_payload() {
    let (_, answer) = send(
        &query(
            "cart.shop.svc.clusterset.local.",
            RecordType::AAAA,
            Some(4096),
        ),
        Transport::Udp,
    );
    let edns = answer.edns.expect("OPT in the answer");
    assert_eq!(edns.max_payload(), MAX_UDP_PAYLOAD);
    assert_eq!(edns.version(), 0);
    assert_eq!(answer.answers.len(), 1);
}

#[test]
fn negative_answers_have_their_rcodes() {
    let (reply, nx) = send(
        &query("admin.shop.svc.clusterset.local.", RecordType::A, None),
        Transport::Udp,
    );
    assert_eq!(nx.metadata.response_code, ResponseCode::NXDomain);
    assert_eq!(nx.authorities.len(), 1);
    assert_eq!(reply.rcode, DnsRcode::NxDomain);
    let (_, refused) = send(&query("example.com.", RecordType::A, None), Transport::Udp);
    assert_eq!(refused.metadata.response_code, ResponseCode::Refused);
    assert!(!refused.metadata.authoritative);
    assert!(!refused.metadata.recursion_available);
    let (reply, nodata) = send(
        &query("cart.shop.svc.clusterset.local.", RecordType::TXT, None),
        Transport::Udp,
    );
    assert_eq!(nodata.metadata.response_code, ResponseCode::NoError);
    assert!(nodata.answers.is_empty());
    assert_eq!(nodata.authorities.len(), 1);
    assert_eq!(reply.qtype, DnsQueryType::Other);
}

#[test]
fn udp_without_edns_is_cut_at_512_bytes_with_tc_set() {
    let (reply, answer) = send(
        &query("many.big.svc.clusterset.local.", RecordType::A, None),
        Transport::Udp,
    );
    assert!(reply.bytes.len() <= 512, "{} bytes", reply.bytes.len());
    assert!(reply.truncated);
    assert!(answer.metadata.truncation);
    assert!(answer.answers.is_empty());
    assert_eq!(answer.queries.len(), 1, "the question stays");
    assert_eq!(answer.metadata.response_code, ResponseCode::NoError);
}

#[test]
fn udp_never_sends_more_than_the_query_invites() {
    // 100 addresses are about 1.7 kB: over what a 1232-byte (or a 4096-byte,
    // capped to 1232) payload allows, within what 1232 allows for postgres.
    for payload in [512, 1232, 4096, 65535] {
        let (reply, answer) = send(
            &query(
                "many.big.svc.clusterset.local.",
                RecordType::A,
                Some(payload),
            ),
            Transport::Udp,
        );
        assert!(reply.truncated, "{payload}");
        assert!(reply.bytes.len() <= usize::from(payload.min(MAX_UDP_PAYLOAD)));
        assert!(answer.metadata.truncation);
        assert!(answer.edns.is_some(), "the OPT record survives truncation");
    }
    // An advertised payload below 512 still means 512 (RFC 6891).
    let (reply, answer) = send(
        &query(
            "postgres.db.svc.clusterset.local.",
            RecordType::A,
            Some(100),
        ),
        Transport::Udp,
    );
    assert!(!reply.truncated);
    assert_eq!(answer.answers.len(), 3);
}

#[test]
fn tcp_carries_the_whole_answer() {
    let (reply, answer) = send(
        &query("many.big.svc.clusterset.local.", RecordType::A, None),
        Transport::Tcp,
    );
    assert!(!reply.truncated);
    assert!(!answer.metadata.truncation);
    assert_eq!(answer.answers.len(), 100);
}

#[test]
fn tcp_cuts_an_answer_over_65535_bytes_to_what_fits() {
    let mut message = Message::new(7, MessageType::Response, OpCode::Query);
    message.add_query(Query::query(
        name("many.big.svc.clusterset.local."),
        RecordType::A,
    ));
    let owner = name("many.big.svc.clusterset.local.");
    for n in 0..5000u32 {
        let address = std::net::Ipv4Addr::from(0x0a00_0000 + n);
        message.add_answer(Record::from_rdata(owner.clone(), 5, RData::A(A(address))));
    }
    let reply = encode(message, DnsQueryType::A, u16::MAX, Transport::Tcp);
    assert!(reply.truncated);
    assert!(reply.bytes.len() <= usize::from(u16::MAX));
    let decoded = Message::from_vec(&reply.bytes).expect("decodes");
    assert!(decoded.metadata.truncation);
    // hickory-proto compresses the first 120 names only (as Unbound does,
    // CVE-2024-8508), so about 1,500 records of this name fit.
    let kept = decoded.answers.len();
    assert!(kept > 1000 && kept < 5000, "{kept}");
    assert!(decoded.edns.is_none(), "the query had no OPT record");
    assert_eq!(decoded.queries.len(), 1);
}

#[test]
fn responses_and_garbage_are_not_answered_and_bad_queries_are_formerr() {
    let mut response = query("cart.shop.svc.clusterset.local.", RecordType::A, None);
    response.metadata.message_type = MessageType::Response;
    let bytes = response.to_vec().expect("encodes");
    assert!(respond(&table(), &zone(), &bytes, Transport::Udp).is_none());
    assert!(respond(&table(), &zone(), b"short", Transport::Udp).is_none());

    // A header followed by a question that runs off the end.
    let mut cut = query("cart.shop.svc.clusterset.local.", RecordType::A, None)
        .to_vec()
        .expect("encodes");
    cut.truncate(20);
    let reply = respond(&table(), &zone(), &cut, Transport::Udp).expect("formerr");
    let decoded = Message::from_vec(&reply.bytes).expect("decodes");
    assert_eq!(decoded.metadata.response_code, ResponseCode::FormErr);
    assert_eq!(decoded.metadata.id, 4242);
    assert_eq!(
        (reply.qtype, reply.rcode),
        (DnsQueryType::None, DnsRcode::FormErr)
    );

    let mut two = query("cart.shop.svc.clusterset.local.", RecordType::A, None);
    two.add_query(Query::query(name("example.com."), RecordType::A));
    let (_, answer) = send(&two, Transport::Udp);
    assert_eq!(answer.metadata.response_code, ResponseCode::FormErr);
}

#[test]
fn other_opcodes_classes_and_edns_versions_are_refused_by_their_rules() {
    let mut notify = query("clusterset.local.", RecordType::SOA, None);
    notify.metadata.op_code = OpCode::Notify;
    let (reply, answer) = send(&notify, Transport::Udp);
    assert_eq!(answer.metadata.response_code, ResponseCode::NotImp);
    assert_eq!(reply.rcode, DnsRcode::NotImp);

    let mut chaos = query("version.bind.", RecordType::TXT, None);
    let mut question = Query::query(
        Name::from_ascii("version.bind.").expect("name"),
        RecordType::TXT,
    );
    question.set_query_class(DNSClass::CH);
    chaos.queries = vec![question];
    let (_, answer) = send(&chaos, Transport::Udp);
    assert_eq!(answer.metadata.response_code, ResponseCode::Refused);

    let mut future = query("cart.shop.svc.clusterset.local.", RecordType::A, Some(1232));
    if let Some(edns) = future.edns.as_mut() {
        edns.set_version(1);
    }
    let (reply, answer) = send(&future, Transport::Udp);
    // 16 on the wire; hickory-proto decodes it by its other name, BADSIG.
    assert_eq!(u16::from(answer.metadata.response_code), 16);
    assert_eq!(answer.edns.map(|e| e.version()), Some(0));
    assert!(answer.answers.is_empty());
    assert_eq!(reply.rcode, DnsRcode::BadVers);
}
