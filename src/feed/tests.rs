//! The feed's messages, journal, subscriber and framing, as a publisher
//! and a subscriber use them.

use std::collections::BTreeSet;
use std::sync::Arc;

use super::wire::{WireKey, WireService};
use super::*;
use crate::model::{
    AccessPolicy, Cluster, ClusterId, ClusterService, GatewayAddress, GatewayHost, NetworkId,
    ServiceKey,
};
use crate::testing::{ServiceBuilder, exported_http, ip};

fn id(text: &str) -> ClusterId {
    ClusterId::new(text).expect("test id")
}

fn cluster(services: &[ClusterService]) -> Cluster {
    let mut cluster = Cluster::new(
        id("c3"),
        NetworkId::new("net-b").expect("test network"),
        "test",
    );
    cluster.clusterset = Some("set.example".to_owned());
    cluster.gateways.push(GatewayAddress {
        host: GatewayHost::Ip(ip("192.0.2.3")),
        port: 15008,
    });
    for service in services {
        cluster
            .services
            .insert(service.key.clone(), Arc::new(service.clone()));
    }
    cluster
}

fn subscriber(name: &str) -> Subscriber {
    Subscriber {
        cluster: id(name),
        network: None,
    }
}

/// Admitted only to `clusters`.
fn only_for(mut service: ClusterService, clusters: &[&str]) -> ClusterService {
    if let Some(export) = service.export.as_mut() {
        export.access = Some(AccessPolicy {
            clusters: clusters.iter().map(|c| id(c)).collect(),
            networks: BTreeSet::new(),
        });
    }
    service
}

/// What the journal sends `who` from `from`, as messages.
fn sent(journal: &Journal, from: Option<Resume>, who: &Subscriber, greet: bool) -> Vec<Message> {
    journal
        .catch_up(from, who, greet)
        .map(|batch| batch.messages().collect())
        .unwrap_or_default()
}

fn names(messages: &[Message]) -> Vec<String> {
    messages
        .iter()
        .map(|message| match message {
            Message::Hello(hello) => format!("hello snapshot={}", hello.snapshot),
            Message::Service(service) => format!("service {}", service.name),
            Message::Withdrawn(key) => format!("withdrawn {}", key.name),
            Message::Synced { revision } => format!("synced {revision}"),
            Message::Heartbeat { revision } => format!("heartbeat {revision}"),
        })
        .collect()
}

/// Every message through the framing, then applied in order.
fn deliver(follower: &mut Follower, messages: &[Message]) -> Result<Vec<Applied>, FeedError> {
    let mut frames = Frames::new(FeedLimits::default().max_message_bytes);
    let mut applied = Vec::new();
    for message in messages {
        let frame = encode(message);
        // In two pieces, as a stream may cut it.
        let (first, rest) = frame.split_at(frame.len() / 2);
        frames.push(first);
        frames.push(rest);
        let (decoded, bytes) = frames
            .next_frame()
            .expect("a frame decodes")
            .expect("a whole frame");
        assert_eq!(
            bytes + 4,
            frame.len(),
            "the frame's length, its prefix aside"
        );
        applied.push(follower.apply(decoded, bytes)?);
    }
    Ok(applied)
}

#[test]
fn a_snapshot_carries_the_exported_services_only_and_round_trips_into_the_model() {
    let headless = ServiceBuilder::new()
        .named("db")
        .headless()
        .port("sql", 5432, 5432)
        .exported_at(7)
        // The exporter's routing policy crosses the feed as it was read.
        .routing(
            crate::model::RoutingPolicy::from_annotations(
                &[
                    ("strait.dev/locality", "network"),
                    ("strait.dev/locality-minimum-healthy", "2"),
                    ("strait.dev/fence-networks", "net-a,net-b"),
                    ("strait.dev/fence-clusters", "c9"),
                ]
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect(),
            )
            .expect("a valid policy"),
        )
        .endpoint_named("10.3.0.9", "db-0");
    let unexported = ServiceBuilder::new().named("secret").port("http", 80, 80);
    let published = cluster(&[exported_http("cart", "10.3.0.1"), headless, unexported]);
    let mut journal = Journal::new(42, DEFAULT_TOMBSTONES, FeedLimits::default());
    assert!(journal.update(&published));
    let messages = sent(&journal, None, &subscriber("c1"), true);
    assert_eq!(
        names(&messages),
        [
            "hello snapshot=true",
            "service cart",
            "service db",
            "synced 2"
        ]
    );

    let mut follower = Follower::new(id("c3"), FeedLimits::default());
    let applied = deliver(&mut follower, &messages).expect("the feed applies");
    assert_eq!(
        applied.last(),
        Some(&Applied::Synced(vec![
            ServiceKey::new("shop", "cart"),
            ServiceKey::new("shop", "db")
        ]))
    );
    let state = follower.state().expect("synced");
    assert_eq!(state.gateways, ["192.0.2.3:15008"]);
    assert_eq!(state.clusterset.as_deref(), Some("set.example"));
    for name in ["cart", "db"] {
        let key = ServiceKey::new("shop", name);
        assert_eq!(
            state.services[&key].as_ref(),
            published.services[&key].as_ref(),
            "{name} arrives as it was published"
        );
    }
    assert!(
        !state
            .services
            .contains_key(&ServiceKey::new("shop", "secret"))
    );
    assert_eq!(
        follower.resume_from(),
        Some(Resume {
            epoch: 42,
            revision: 2
        })
    );
}

#[test]
fn a_service_admitting_only_some_clusters_is_never_sent_to_the_others() {
    let published = cluster(&[
        exported_http("cart", "10.3.0.1"),
        only_for(exported_http("ledger", "10.3.0.2"), &["c2"]),
    ]);
    let mut journal = Journal::new(1, DEFAULT_TOMBSTONES, FeedLimits::default());
    journal.update(&published);
    let to_c2 = names(&sent(&journal, None, &subscriber("c2"), true));
    let to_c1 = names(&sent(&journal, None, &subscriber("c1"), true));
    assert!(to_c2.contains(&"service ledger".to_owned()), "{to_c2:?}");
    assert!(!to_c1.iter().any(|m| m.contains("ledger")), "{to_c1:?}");
    // On the wire too: no byte of it.
    let bytes: Vec<u8> = sent(&journal, None, &subscriber("c1"), true)
        .iter()
        .flat_map(|m| encode(m).to_vec())
        .collect();
    assert!(!String::from_utf8_lossy(&bytes).contains("ledger"));

    // Narrowing the policy withdraws it from the one it no longer admits.
    let from = Some(Resume {
        epoch: 1,
        revision: journal.revision(),
    });
    journal.update(&cluster(&[
        exported_http("cart", "10.3.0.1"),
        only_for(exported_http("ledger", "10.3.0.2"), &["c4"]),
    ]));
    assert_eq!(
        names(&sent(&journal, from, &subscriber("c2"), false)),
        ["withdrawn ledger", "synced 3"]
    );
    assert_eq!(journal.admitted(&subscriber("c4")).len(), 2);
}

#[test]
fn a_resumed_subscriber_gets_only_what_changed_since_its_revision() {
    let mut journal = Journal::new(9, DEFAULT_TOMBSTONES, FeedLimits::default());
    let services: Vec<ClusterService> = (0..50)
        .map(|n| exported_http(&format!("s{n}"), &format!("10.3.1.{n}")))
        .collect();
    journal.update(&cluster(&services));
    let mut follower = Follower::new(id("c3"), FeedLimits::default());
    deliver(
        &mut follower,
        &sent(&journal, None, &subscriber("c1"), true),
    )
    .expect("snapshot");

    // One endpoint moves, one service is unexported, one is added.
    let mut changed = services.clone();
    changed[7] = exported_http("s7", "10.3.9.9");
    changed.remove(20);
    changed.push(exported_http("new", "10.3.2.1"));
    assert!(journal.update(&cluster(&changed)));
    assert!(
        !journal.update(&cluster(&changed)),
        "the same state again changes nothing"
    );
    let batch = sent(&journal, follower.resume_from(), &subscriber("c1"), false);
    assert_eq!(
        names(&batch),
        // In the order they changed: added and changed services in key
        // order, then the withdrawn.
        ["service new", "service s7", "withdrawn s20", "synced 53"]
    );
    let applied = deliver(&mut follower, &batch).expect("the changes apply");
    assert_eq!(
        applied.last(),
        Some(&Applied::Synced(vec![
            ServiceKey::new("shop", "new"),
            ServiceKey::new("shop", "s20"),
            ServiceKey::new("shop", "s7"),
        ]))
    );
    let state = follower.state().expect("synced");
    assert_eq!(state.services.len(), 50);
    assert!(!state.services.contains_key(&ServiceKey::new("shop", "s20")));
    assert_eq!(
        state.services[&ServiceKey::new("shop", "s7")].as_ref(),
        &changed[7]
    );
    // Nothing new: a live stream sends nothing; a new connection a hello
    // and `synced` only.
    assert!(sent(&journal, follower.resume_from(), &subscriber("c1"), false).is_empty());
    assert_eq!(
        names(&sent(
            &journal,
            follower.resume_from(),
            &subscriber("c1"),
            true
        )),
        ["hello snapshot=false", "synced 53"]
    );
}

#[test]
fn past_the_remembered_withdrawals_or_another_epoch_a_subscriber_gets_a_snapshot() {
    let mut journal = Journal::new(5, 2, FeedLimits::default());
    let all: Vec<ClusterService> = (0..4)
        .map(|n| exported_http(&format!("s{n}"), "10.3.0.1"))
        .collect();
    journal.update(&cluster(&all));
    let old = Some(Resume {
        epoch: 5,
        revision: journal.revision(),
    });
    // Three withdrawn, two remembered: the first is forgotten.
    journal.update(&cluster(&all[3..]));
    assert_eq!(
        names(&sent(&journal, old, &subscriber("c1"), false)),
        ["hello snapshot=true", "service s3", "synced 7"]
    );
    let recent = Some(Resume {
        epoch: 5,
        revision: journal.revision(),
    });
    // A gateway moving starts a new epoch: a snapshot for everyone.
    let mut moved = cluster(&all[3..]);
    moved.gateways[0].port = 15009;
    journal.update(&moved);
    assert_eq!(journal.epoch(), 6);
    let batch = sent(&journal, recent, &subscriber("c1"), false);
    assert_eq!(
        names(&batch),
        ["hello snapshot=true", "service s3", "synced 1"]
    );
    // A follower at the old epoch takes it, and the snapshot drops what
    // the old epoch held.
    let mut follower = Follower::new(id("c3"), FeedLimits::default());
    let mut first = Journal::new(5, 2, FeedLimits::default());
    first.update(&cluster(&all));
    deliver(&mut follower, &sent(&first, None, &subscriber("c1"), true)).expect("old epoch");
    deliver(&mut follower, &batch).expect("new epoch");
    let state = follower.state().expect("synced");
    assert_eq!(
        state.services.keys().collect::<Vec<_>>(),
        [&ServiceKey::new("shop", "s3")]
    );
    assert_eq!(state.gateways, ["192.0.2.3:15009"]);
}

#[test]
fn a_feed_speaking_for_another_cluster_is_refused() {
    let mut journal = Journal::new(1, DEFAULT_TOMBSTONES, FeedLimits::default());
    journal.update(&cluster(&[exported_http("cart", "10.3.0.1")]));
    // c3's feed, where c2's was subscribed to.
    let mut follower = Follower::new(id("c2"), FeedLimits::default());
    let refused = deliver(
        &mut follower,
        &sent(&journal, None, &subscriber("c1"), true),
    );
    assert!(
        matches!(&refused, Err(FeedError::WrongCluster { claimed, .. }) if claimed == "c3"),
        "{refused:?}"
    );
    assert!(follower.state().is_none());
}

#[test]
fn a_refused_batch_leaves_the_last_good_state() {
    let mut journal = Journal::new(1, DEFAULT_TOMBSTONES, FeedLimits::default());
    journal.update(&cluster(&[exported_http("cart", "10.3.0.1")]));
    let mut follower = Follower::new(id("c3"), FeedLimits::default());
    deliver(
        &mut follower,
        &sent(&journal, None, &subscriber("c1"), true),
    )
    .expect("snapshot");
    let good = follower.state().cloned().expect("synced");

    // A batch with one good change, then a bad one.
    let mut bad = WireService::of(
        &exported_http("cart", "10.3.0.9"),
        &crate::model::Export::default(),
    );
    bad.ports[0].protocol = "QUIC".to_owned();
    let changes = [
        Message::Service(Box::new(WireService::of(
            &exported_http("other", "10.3.0.5"),
            &crate::model::Export::default(),
        ))),
        Message::Service(Box::new(bad)),
    ];
    let refused = deliver(&mut follower, &changes);
    let Err(FeedError::Wire(error)) = &refused else {
        panic!("refused with a wire error: {refused:?}");
    };
    assert_eq!(
        error.to_string(),
        "shop/cart: ports[].protocol: \"QUIC\" is not valid"
    );
    assert_eq!(follower.state(), Some(&good));

    // The next connection must say hello first.
    follower.disconnected();
    assert_eq!(
        follower.apply(Message::Synced { revision: 9 }, 20),
        Err(FeedError::BeforeHello("synced"))
    );
    assert_eq!(follower.state(), Some(&good));
}

#[test]
fn a_feed_holding_more_than_its_limits_is_refused_as_it_arrives() {
    let services: Vec<ClusterService> = (0..5)
        .map(|n| exported_http(&format!("s{n}"), "10.3.0.1"))
        .collect();
    let mut journal = Journal::new(1, DEFAULT_TOMBSTONES, FeedLimits::default());
    journal.update(&cluster(&services));
    let limits = FeedLimits {
        max_services: 3,
        ..FeedLimits::default()
    };
    let mut follower = Follower::new(id("c3"), limits);
    let messages = sent(&journal, None, &subscriber("c1"), true);
    let refused = deliver(&mut follower, &messages);
    assert_eq!(
        refused,
        Err(FeedError::TooManyServices { count: 4, limit: 3 })
    );

    let many = eleven_endpoints();
    let tight = ten_endpoints_each();
    let error = WireService::of(&many, many.export.as_ref().expect("exported"))
        .into_model(&tight)
        .expect_err("11 endpoints");
    assert_eq!(
        error.to_string(),
        "shop/big: endpoints[].endpoints: 11 entries, more than the limit of 10"
    );
}

#[test]
fn reserved_metadata_keys_from_a_peer_are_dropped_on_arrival() {
    let mut service = exported_http("cart", "10.3.0.1");
    if let Some(export) = service.export.as_mut() {
        export.exported_labels.insert(
            "app.kubernetes.io/managed-by".to_owned(),
            "strait".to_owned(),
        );
        export
            .exported_labels
            .insert("team".to_owned(), "shop".to_owned());
    }
    let wire = WireService::of(&service, service.export.as_ref().expect("exported"));
    let model = wire.into_model(&FeedLimits::default()).expect("valid");
    let labels = &model.export.expect("exported").exported_labels;
    assert_eq!(labels.keys().collect::<Vec<_>>(), ["team"]);
}

#[test]
fn a_frame_longer_than_the_limit_is_refused_from_its_length_alone() {
    let mut frames = Frames::new(1024);
    // Only the length has arrived: 1 MiB announced.
    frames.push(&(1u32 << 20).to_be_bytes());
    assert!(matches!(
        frames.next_message(),
        Err(FrameError::TooLong { limit: 1024 })
    ));
    let mut frames = Frames::new(1024);
    frames.push(&encode(&Message::Withdrawn(WireKey {
        namespace: "shop".to_owned(),
        name: "cart".to_owned(),
    })));
    assert!(matches!(
        frames.next_message(),
        Ok(Some(Message::Withdrawn(_)))
    ));
    assert!(matches!(frames.next_message(), Ok(None)));
    // Unknown fields are refused, not ignored: version 1 is exact.
    let mut frames = Frames::new(1024);
    let body = br#"{"synced":{"revision":1,"extra":true}}"#;
    frames.push(&u32::try_from(body.len()).expect("short").to_be_bytes());
    frames.push(body);
    assert!(matches!(frames.next_message(), Err(FrameError::Json(_))));
}

#[test]
fn a_cluster_holds_at_most_its_cap_of_streams_and_a_closed_one_makes_room() {
    let publication = Publication::new(
        Journal::new(1, DEFAULT_TOMBSTONES, FeedLimits::default()),
        2,
    );
    let first = publication.admit(&id("c1")).expect("the first stream");
    let _second = publication.admit(&id("c1")).expect("the second stream");
    assert!(publication.admit(&id("c1")).is_none(), "past the cap");
    // Another cluster's streams count apart.
    assert!(publication.admit(&id("c2")).is_some());
    drop(first);
    assert!(
        publication.admit(&id("c1")).is_some(),
        "a closed stream makes room"
    );
}

#[test]
fn a_publication_wakes_its_streams_only_when_something_changed() {
    let publication = Publication::new(
        Journal::new(1, DEFAULT_TOMBSTONES, FeedLimits::default()),
        2,
    );
    let mut changes = publication.changes();
    let state = cluster(&[exported_http("cart", "10.3.0.1")]);
    publication.update(&state);
    assert!(changes.has_changed().expect("open"));
    assert_eq!(*changes.borrow_and_update(), 1);
    publication.update(&state);
    assert!(
        !changes.has_changed().expect("open"),
        "the same state again"
    );
    assert_eq!(
        publication.at(),
        Resume {
            epoch: 1,
            revision: 1
        }
    );
}

#[test]
fn a_subscriber_never_admitted_never_hears_a_services_name_even_as_it_changes_or_goes() {
    let ledger = |address: &str| only_for(exported_http("ledger", address), &["c2"]);
    let mut journal = Journal::new(1, DEFAULT_TOMBSTONES, FeedLimits::default());
    journal.update(&cluster(&[
        exported_http("cart", "10.3.0.1"),
        ledger("10.3.0.2"),
    ]));
    let from = Some(Resume {
        epoch: 1,
        revision: journal.revision(),
    });
    // ledger changes, then goes: c1 hears nothing of either; c2 hears both.
    journal.update(&cluster(&[
        exported_http("cart", "10.3.0.1"),
        ledger("10.3.0.3"),
    ]));
    let changed = from.map(|from| Resume {
        revision: journal.revision(),
        ..from
    });
    assert_eq!(
        names(&sent(&journal, from, &subscriber("c1"), false)),
        ["synced 3"]
    );
    assert_eq!(
        names(&sent(&journal, from, &subscriber("c2"), false)),
        ["service ledger", "synced 3"]
    );
    journal.update(&cluster(&[exported_http("cart", "10.3.0.1")]));
    assert_eq!(
        names(&sent(&journal, changed, &subscriber("c1"), false)),
        ["synced 4"]
    );
    assert_eq!(
        names(&sent(&journal, changed, &subscriber("c2"), false)),
        ["withdrawn ledger", "synced 4"]
    );
    let bytes: Vec<u8> = sent(&journal, from, &subscriber("c1"), true)
        .iter()
        .flat_map(|m| encode(m).to_vec())
        .collect();
    assert!(!String::from_utf8_lossy(&bytes).contains("ledger"));
}

/// `shop/big`, exported with 11 endpoints.
fn eleven_endpoints() -> ClusterService {
    let mut big = ServiceBuilder::new()
        .named("big")
        .port("http", 80, 80)
        .exported_at(1);
    for n in 0..11 {
        big = big.endpoint(&format!("10.3.0.{n}"));
    }
    big
}

/// Limits that take at most 10 endpoints a service.
fn ten_endpoints_each() -> FeedLimits {
    FeedLimits {
        max_endpoints_per_service: 10,
        ..FeedLimits::default()
    }
}

#[test]
fn a_service_larger_than_a_subscriber_takes_is_left_out_not_the_feed() {
    let big = eleven_endpoints();
    let limits = ten_endpoints_each();
    let mut journal = Journal::new(1, DEFAULT_TOMBSTONES, limits);
    journal.update(&cluster(&[exported_http("cart", "10.3.0.1"), big]));
    assert_eq!(
        names(&sent(&journal, None, &subscriber("c1"), true)),
        ["hello snapshot=true", "service cart", "synced 1"]
    );
    assert_eq!(
        journal
            .oversized()
            .values()
            .map(ToString::to_string)
            .collect::<Vec<_>>(),
        ["shop/big: endpoints[].endpoints: 11 entries, more than the limit of 10"]
    );
    let mut follower = Follower::new(id("c3"), limits);
    deliver(
        &mut follower,
        &sent(&journal, None, &subscriber("c1"), true),
    )
    .expect("the rest of the feed applies");

    // Within every count, but a message larger than a frame may be.
    let mut annotated = exported_http("annotated", "10.3.0.2");
    if let Some(export) = annotated.export.as_mut() {
        export
            .exported_annotations
            .insert("docs".to_owned(), "x".repeat(2_000));
    }
    let small_frames = FeedLimits {
        max_message_bytes: 1_000,
        ..FeedLimits::default()
    };
    let mut journal = Journal::new(1, DEFAULT_TOMBSTONES, small_frames);
    journal.update(&cluster(&[exported_http("cart", "10.3.0.1"), annotated]));
    assert_eq!(
        names(&sent(&journal, None, &subscriber("c1"), true)),
        ["hello snapshot=true", "service cart", "synced 1"]
    );
    let why = journal.oversized()[&ServiceKey::new("shop", "annotated")].to_string();
    assert!(why.ends_with("more than the limit of 1000"), "{why}");
}

#[test]
fn an_endpoint_a_peer_names_at_a_machine_address_is_refused() {
    for address in [
        "127.0.0.1",
        "169.254.169.254",
        "::ffff:127.0.0.1",
        "0.0.0.0",
    ] {
        let service = exported_http("cart", address);
        let error = WireService::of(&service, service.export.as_ref().expect("exported"))
            .into_model(&FeedLimits::default())
            .expect_err(address);
        assert!(
            error
                .to_string()
                .starts_with("shop/cart: endpoints[].endpoints[].address:"),
            "{error}"
        );
    }
}

#[test]
fn a_hello_saying_too_much_is_refused() {
    let hello = |clusterset: &str, gateways: usize| {
        Message::Hello(crate::feed::wire::Hello {
            version: crate::feed::FEED_VERSION,
            cluster: "c3".to_owned(),
            clusterset: Some(clusterset.to_owned()),
            epoch: 1,
            snapshot: true,
            gateways: (0..gateways)
                .map(|n| format!("192.0.2.{n}:15008"))
                .collect(),
        })
    };
    let mut follower = Follower::new(id("c3"), FeedLimits::default());
    assert_eq!(
        follower.apply(hello("set.example", crate::feed::follow::MAX_GATEWAYS), 100),
        Ok(crate::feed::Applied::Pending)
    );
    for (message, field) in [
        (
            hello("set.example", crate::feed::follow::MAX_GATEWAYS + 1),
            "gateways",
        ),
        (hello(&"s".repeat(300), 1), "clusterset"),
        (hello("Not A Set", 1), "clusterset"),
    ] {
        let mut follower = Follower::new(id("c3"), FeedLimits::default());
        let refused = follower.apply(message, 100);
        assert!(
            matches!(&refused, Err(FeedError::Hello { field: f, .. }) if *f == field),
            "{refused:?}"
        );
    }
}

/// The length of a service's message, as its frame carries it.
fn message_bytes(messages: &[Message], name: &str) -> usize {
    messages
        .iter()
        .find(|m| matches!(m, Message::Service(service) if service.name == name))
        .map(|message| encode(message).len() - 4)
        .expect("the service's message")
}

#[test]
fn a_feed_holding_more_bytes_than_its_limit_is_refused_and_the_last_good_state_kept() {
    let services: Vec<ClusterService> = (0..4)
        .map(|n| exported_http(&format!("s{n}"), &format!("10.3.0.{n}")))
        .collect();
    let mut grown = services[..3].to_vec();
    let mut big = ServiceBuilder::new()
        .named("s1")
        .port("http", 80, 80)
        .exported_at(1);
    for n in 0..3 {
        big = big.endpoint(&format!("10.3.1.{n}"));
    }
    grown[1] = big;
    let size_of = |services: &[ClusterService], name: &str| {
        let mut journal = Journal::new(1, DEFAULT_TOMBSTONES, FeedLimits::default());
        journal.update(&cluster(services));
        message_bytes(&sent(&journal, None, &subscriber("c1"), true), name)
    };
    let (one, big) = (size_of(&services, "s0"), size_of(&grown, "s1"));
    assert!(one < big && big < 3 * one, "{one} {big}");
    // Room for three services and half of what s1 grows by.
    let limits = FeedLimits {
        max_held_bytes: 3 * one + (big - one) / 2,
        ..FeedLimits::default()
    };

    // The snapshot of four is refused as its fourth service arrives,
    // before its `synced`.
    let mut journal = Journal::new(1, DEFAULT_TOMBSTONES, FeedLimits::default());
    journal.update(&cluster(&services));
    let mut follower = Follower::new(id("c3"), limits);
    let snapshot = sent(&journal, None, &subscriber("c1"), true);
    assert!(matches!(snapshot.last(), Some(Message::Synced { .. })));
    let refused = deliver(&mut follower, &snapshot[..snapshot.len() - 1]);
    assert_eq!(
        refused,
        Err(FeedError::TooManyBytes {
            bytes: 4 * one,
            limit: limits.max_held_bytes
        })
    );
    assert!(follower.state().is_none());

    // Three fit; the held bytes are their messages'.
    let mut journal = Journal::new(2, DEFAULT_TOMBSTONES, FeedLimits::default());
    journal.update(&cluster(&services[..3]));
    let mut follower = Follower::new(id("c3"), limits);
    deliver(
        &mut follower,
        &sent(&journal, None, &subscriber("c1"), true),
    )
    .expect("three fit");
    assert_eq!(follower.held_bytes(), 3 * one);
    let good = follower.state().cloned();

    // s1 growing past the room left is refused at its `synced`, though
    // its own message is small enough.
    journal.update(&cluster(&grown));
    let batch = sent(&journal, follower.resume_from(), &subscriber("c1"), false);
    let refused = deliver(&mut follower, &batch);
    assert!(
        matches!(refused, Err(FeedError::TooManyBytes { bytes, .. }) if bytes == 2 * one + big),
        "{refused:?}"
    );
    assert_eq!(
        follower.state().cloned(),
        good,
        "the last good state is kept"
    );
    assert_eq!(follower.held_bytes(), 3 * one);

    // Withdrawals give their bytes back: s1 grown alone fits.
    follower.disconnected();
    journal.update(&cluster(&grown[1..2]));
    let resumed = sent(&journal, follower.resume_from(), &subscriber("c1"), true);
    deliver(&mut follower, &resumed).expect("s1 alone fits");
    assert_eq!(follower.held_bytes(), big);
}
