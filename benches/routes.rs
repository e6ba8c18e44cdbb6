//! Benchmarks the pure routing core on a large cluster set: 10 clusters
//! (c0..c9) on 3 networks (c0-c3 `net-a`, c4-c6 `net-b`, c7-c9 `net-c`), each
//! with one gateway, and 5,000 services exported by every cluster, each with
//! 2 ports and 20 ready endpoints per cluster (1,000,000 endpoints in all,
//! 2,000,000 routed backends seen from c0).
//!
//! What it measures, in the group `route_table`:
//! - `merge_and_build`: `merge::merge` then `RouteTable::build` seen from c0
//!   (dropping the result is not timed). Target: well under 1 s.
//! - `one_change`: what one endpoint change costs once its cluster is
//!   translated: `merge::merge_reusing` and `RouteTable::build_reusing`
//!   from the previous merge and table, one service of c5 changed. Target:
//!   well under the 100 ms the Kubernetes source allows a change.
//! - `one_direct_change`: the same for a service of c1, on c0's network,
//!   whose change also patches the index of direct backends.
//! - `lookup_hit`: `RouteTable::lookup` of an existing service port.
//! - `lookup_miss_port`: `RouteTable::lookup` of an existing service on a port it lacks.
//! - `lookup_vip`: `RouteTable::lookup_vip` of a ClusterSetIP VIP from c0's ServiceImports.
//!
//! Target for every lookup: under 1 µs.
//!
//! And in the group `pick`, what the chooser's policy costs one new
//! connection: `Chooser::pick` on that 200-backend port seen from c0, p2c,
//! nothing ejected, with `locality: none`, with `cluster` (the default:
//! three tiers), with `cluster` and this cluster's admin fencing the
//! service to c4-c6 (`net-b`), and with that fence among 1,000 admin entries. Side
//! by side in one run: the ratios are the policy's overhead.
//!
//! Before timing, the built table is checked (200 backends for one port, direct
//! to c0..c3 and tunnelled to the others), so a broken core fails the bench.
//!
//! Run with `cargo bench --bench routes`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on what they set up

use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use criterion::{BatchSize, Criterion, SamplingMode, criterion_group, criterion_main};
use k8s_openapi::jiff::Timestamp;
use strait::merge;
use strait::model::{
    Cluster, ClusterId, ClusterService, ClusterSet, Endpoint, EndpointGroup, EndpointPort, Export,
    GatewayAddress, GatewayHost, NetworkId, Protocol, ServiceKey, ServicePort, ServiceSpec,
};
use strait::routing::{Path, RouteTable};

const CLUSTERS: u32 = 10;
const SERVICES: u32 = 5_000;
const ENDPOINTS_PER_SERVICE: u32 = 20;
const NAMESPACES: u32 = 50;
const VIEWER: &str = "c0";
const GATEWAY_PORT: u16 = 15008;

fn network_of(cluster: u32) -> &'static str {
    match cluster {
        0..=3 => "net-a",
        4..=6 => "net-b",
        _ => "net-c",
    }
}

fn service_key(service: u32) -> ServiceKey {
    ServiceKey::new(
        format!("ns{}", service % NAMESPACES),
        format!("svc{service}"),
    )
}

/// The ClusterSetIP VIP c0 allocated to `service`: 240.0.x.y, unique per service.
fn vip(service: u32) -> IpAddr {
    IpAddr::V4(Ipv4Addr::from((240 << 24) | service))
}

/// Endpoint `index` of `service` in `cluster`: 10.{cluster * 16 + hi}.x.y, so
/// addresses are distinct per cluster and per service (5,000 × 20 < 2^20).
fn endpoint_address(cluster: u32, service: u32, index: u32) -> IpAddr {
    let n = service * ENDPOINTS_PER_SERVICE + index;
    IpAddr::V4(Ipv4Addr::from((10 << 24) | (cluster << 20) | n))
}

fn cluster_service(cluster: u32, service: u32) -> ClusterService {
    let port = |name: &str, port| ServicePort {
        name: name.to_owned(),
        protocol: Protocol::Tcp,
        port,
        app_protocol: None,
    };
    let target = |name: &str, port| EndpointPort {
        name: name.to_owned(),
        protocol: Protocol::Tcp,
        port,
    };
    let created = Timestamp::from_second(1_700_000_000 + i64::from(cluster) * 3_600)
        .expect("a valid timestamp");
    ClusterService {
        key: service_key(service),
        spec: ServiceSpec::cluster_set_ip(vec![port("http", 80), port("grpc", 9090)]),
        export: Some(Export {
            created: Some(created),
            ..Export::default()
        }),
        endpoint_groups: vec![EndpointGroup {
            ports: vec![target("http", 8080), target("grpc", 9091)].into(),
            endpoints: (0..ENDPOINTS_PER_SERVICE)
                .map(|i| Endpoint::ready(endpoint_address(cluster, service, i)))
                .collect(),
        }],
    }
}

fn cluster_set() -> ClusterSet {
    let mut set = ClusterSet::default();
    for c in 0..CLUSTERS {
        let id = ClusterId::new(&format!("c{c}")).expect("a valid cluster id");
        let network = NetworkId::new(network_of(c)).expect("a valid network id");
        let mut cluster = Cluster::new(id.clone(), network, format!("bench/c{c}"));
        cluster.gateways.push(GatewayAddress {
            host: GatewayHost::Ip(IpAddr::V4(Ipv4Addr::new(203, 0, 113, 10 + c as u8))),
            port: GATEWAY_PORT,
        });
        for s in 0..SERVICES {
            let service = cluster_service(c, s);
            cluster.services.insert(service.key.clone(), service.into());
        }
        if id.as_str() == VIEWER {
            for s in 0..SERVICES {
                cluster.imports.insert(service_key(s), vec![vip(s)]);
            }
        }
        set.clusters.insert(id, cluster);
    }
    set
}

/// Fails loudly when the core does not build the table this set implies.
fn check_table(table: &RouteTable) {
    assert_eq!(table.viewer().as_str(), VIEWER);
    assert_eq!(table.network().as_str(), "net-a");
    assert_eq!(table.services().count(), SERVICES as usize);

    let route = table
        .lookup("ns7", "svc4207", Protocol::Tcp, 80)
        .expect("ns7/svc4207 TCP/80 is routed");
    assert_eq!(route.name, "http");
    assert_eq!(
        route.backends.len(),
        (CLUSTERS * ENDPOINTS_PER_SERVICE) as usize
    );
    assert!(route.excluded.is_empty(), "excluded: {:?}", route.excluded);
    for routed in &route.backends {
        let cluster = routed.backend.cluster.as_str();
        let index: u32 = cluster[1..].parse().expect("cluster ids are c0..c9");
        assert_eq!(routed.backend.port, 8080, "target port of {cluster}");
        assert_eq!(routed.network().as_str(), network_of(index));
        match routed.path() {
            Path::Direct => assert!(index <= 3, "{cluster} should be tunnelled"),
            Path::Tunnel { gateways } => {
                assert!(index > 3, "{cluster} should be direct");
                let own = GatewayHost::Ip(IpAddr::V4(Ipv4Addr::new(203, 0, 113, 10 + index as u8)));
                assert_eq!(gateways[0].host, own, "{cluster}'s own gateway comes first");
                // net-b (c4-c6) and net-c (c7-c9) have three gateways each.
                assert_eq!(gateways.len(), 3, "gateways of {cluster}'s network");
            }
        }
    }
    let direct = route
        .backends
        .iter()
        .filter(|b| *b.path() == Path::Direct)
        .count();
    assert_eq!(direct, (4 * ENDPOINTS_PER_SERVICE) as usize);

    let grpc = table
        .lookup("ns7", "svc4207", Protocol::Tcp, 9090)
        .expect("ns7/svc4207 TCP/9090 is routed");
    assert!(grpc.backends.iter().all(|b| b.backend.port == 9091));

    assert!(table.lookup("ns7", "svc4207", Protocol::Tcp, 81).is_none());
    let (service, port) = table
        .lookup_vip(vip(4207), Protocol::Tcp, 80)
        .expect("c0's VIP of ns7/svc4207 resolves");
    assert_eq!(service.key, service_key(4207));
    assert_eq!(port.port, 80);
}

fn route_table(c: &mut Criterion) {
    let set = cluster_set();
    let merged = merge::merge(&set);
    let table = RouteTable::build(&set, &merged, VIEWER).expect("c0 is in the set");
    check_table(&table);

    let mut group = c.benchmark_group("route_table");

    // One iteration takes a large fraction of a second (and its untimed drop
    // a good part of that again): few flat samples. The first iterations,
    // which fault in fresh memory, are slower: a long warm-up keeps them out
    // of criterion's estimate.
    group
        .sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_secs(3))
        .measurement_time(Duration::from_secs(15));
    group.bench_function("merge_and_build", |b| {
        b.iter_batched(
            || (),
            |()| {
                let merged = merge::merge(black_box(&set));
                let table =
                    RouteTable::build(&set, &merged, black_box(VIEWER)).expect("c0 is in the set");
                (merged, table)
            },
            BatchSize::PerIteration,
        )
    });

    // One endpoint added to one service of `cluster`: c5 is tunnelled from
    // c0, c1 is on c0's network (its change patches the direct-backend index).
    let changed_set = |cluster_id: &'static str| {
        let set = &set;
        move || {
            let mut changed = set.clone();
            let cluster = changed
                .clusters
                .values_mut()
                .find(|c| c.id.as_str() == cluster_id)
                .expect("the cluster is in the set");
            let service = cluster
                .services
                .get_mut(&service_key(4207))
                .expect("the cluster holds svc4207");
            let index: u32 = cluster_id[1..].parse().expect("cN");
            std::sync::Arc::make_mut(service).endpoint_groups[0]
                .add_endpoint(Endpoint::ready(endpoint_address(index, 4207, 999)));
            changed
        }
    };
    for (name, cluster) in [("one_change", "c5"), ("one_direct_change", "c1")] {
        group.bench_function(name, |b| {
            b.iter_batched(
                changed_set(cluster),
                |changed| {
                    let merged = merge::merge_reusing(black_box(&changed), &merged);
                    let table = RouteTable::build_reusing(&changed, &merged, VIEWER, Some(&table))
                        .expect("c0 is in the set");
                    (changed, merged, table)
                },
                BatchSize::PerIteration,
            )
        });
    }

    group
        .sample_size(50)
        .sampling_mode(SamplingMode::Auto)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    group.bench_function("lookup_hit", |b| {
        b.iter(|| {
            table.lookup(
                black_box("ns7"),
                black_box("svc4207"),
                black_box(Protocol::Tcp),
                black_box(80),
            )
        })
    });
    group.bench_function("lookup_miss_port", |b| {
        b.iter(|| {
            table.lookup(
                black_box("ns7"),
                black_box("svc4207"),
                black_box(Protocol::Tcp),
                black_box(81),
            )
        })
    });
    let address = vip(4207);
    group.bench_function("lookup_vip", |b| {
        b.iter(|| table.lookup_vip(black_box(address), black_box(Protocol::Tcp), black_box(80)))
    });
    group.finish();
    picks(c, &table);
}

fn picks(c: &mut Criterion, table: &RouteTable) {
    use strait::model::{Fence, Locality, RoutingPolicy};
    use strait::routing::balancer::{Balancer, Chooser, OutlierPolicy};
    let service = table.service("ns7", "svc4207").expect("routed");
    let route = service.port(Protocol::Tcp, 80).expect("port 80");
    let chooser = |locality: Locality| {
        Chooser::new(
            Balancer::P2c,
            locality,
            ClusterId::new(VIEWER).expect("id"),
            NetworkId::new("net-a").expect("id"),
            OutlierPolicy::default(),
        )
    };
    let fence = RoutingPolicy {
        // By cluster: the bench's networks are not attested by a map.
        fence: Some(Fence {
            clusters: ["c4", "c5", "c6"]
                .map(|id| ClusterId::new(id).expect("id"))
                .into(),
            networks: Default::default(),
        }),
        ..RoutingPolicy::default()
    };
    let many: Vec<(ServiceKey, RoutingPolicy)> = (0..1_000)
        .map(|n| (service_key(n * 5 + 2), fence.clone()))
        .chain([(service_key(4207), fence.clone())])
        .collect();
    let choosers = [
        ("locality_none", chooser(Locality::None)),
        ("locality_cluster", chooser(Locality::Cluster)),
        (
            "fenced",
            chooser(Locality::Cluster).with_admin_policies([(service_key(4207), fence.clone())]),
        ),
        (
            "fenced_among_1000",
            chooser(Locality::Cluster).with_admin_policies(many),
        ),
    ];
    let client = IpAddr::V4(Ipv4Addr::new(10, 99, 0, 1));
    let now = std::time::Instant::now();
    // Checked before timing: local first stays on c0; the fence on net-b.
    let mut rng = fastrand::Rng::with_seed(7);
    for (name, chooser) in &choosers {
        let picked = chooser
            .pick(service, route, client, &[], now, &mut rng)
            .expect("a backend");
        let cluster = picked.backend.cluster.as_str();
        match *name {
            "locality_cluster" => assert_eq!(cluster, VIEWER),
            "fenced" | "fenced_among_1000" => assert_eq!(picked.network().as_str(), "net-b"),
            _ => {}
        }
    }
    let mut group = c.benchmark_group("pick");
    group
        .sample_size(50)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    for (name, chooser) in &choosers {
        group.bench_function(*name, |b| {
            b.iter(|| {
                chooser
                    .pick(black_box(service), route, client, &[], now, &mut rng)
                    .map(|picked| picked.backend.port)
            })
        });
    }
    group.finish();
}

criterion_group!(benches, route_table);
criterion_main!(benches);
