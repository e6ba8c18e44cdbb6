//! The cluster set the DNS unit tests answer from, seen from `east-1`.
//!
//! | cluster | network | gateway |
//! |---|---|---|
//! | `east-1` (the viewer) | `net-a` | 192.0.2.10 |
//! | `e2.prod` | `net-a` | 192.0.2.11 |
//! | `west-1` | `net-b` | 192.0.2.12 |
//!
//! - `shop/cart`: ClusterSetIP, `http` 80, exported by east-1 and west-1;
//!   east-1's ServiceImport has 240.0.0.10 and fd00::10.
//! - `shop/checkout`: ClusterSetIP with a port conflict: `http` 80 (east-1,
//!   west-1), `metrics` 9100 (west-1 only: reached through a tunnel),
//!   `debug` 9200 (e2.prod only, whose one endpoint is not ready: no
//!   backend). No ServiceImport in east-1.
//! - `shop/admin`: a Service in east-1 that nobody exports.
//! - `db/postgres`: headless, `postgres` 5432: postgres-0 in east-1
//!   (10.1.0.50 and fd00::50), an endpoint without hostname (10.1.0.52), a
//!   not-ready postgres-9; postgres-1 in e2.prod (10.1.5.51); postgres-2
//!   and postgres-3 in west-1 (10.2.0.50, 10.2.0.51).
//! - `db/replica`: headless, pods in west-1 only.
//! - `db/standby`: headless, exported by e2.prod, whose one pod is not ready.
//! - `big/many`: headless, 100 pods in east-1, for the size limits.

use std::net::IpAddr;

use hickory_proto::rr::Name;

use crate::merge::merge;
use crate::model::{
    Cluster, ClusterId, ClusterService, ClusterSet, Endpoint, EndpointDetails, EndpointGroup,
    EndpointPort, EndpointsBuilder, GatewayAddress, GatewayHost, NetworkId, Protocol, ServiceKey,
    ServicePort, ServiceSpec, ServiceType,
};
use crate::routing::RouteTable;
use crate::testing::ip;

use super::zone::Zone;

pub(crate) fn zone() -> Zone {
    Zone::new("clusterset.local", 5, 5).expect("zone")
}

pub(crate) fn name(text: &str) -> Name {
    Name::from_ascii(text).expect("test name parses")
}

/// The routes of the set above, seen from east-1.
pub(crate) fn table() -> RouteTable {
    let set = set();
    RouteTable::build(&set, &merge(&set), "east-1").expect("east-1 is known")
}

/// `(name, port, target)` TCP ports.
type Ports<'a> = &'a [(&'a str, u16, u16)];

/// One exported Service with one EndpointSlice of `endpoints`.
fn service(
    key: (&str, &str),
    service_type: ServiceType,
    ports: Ports<'_>,
    endpoints: Vec<Pod>,
) -> ClusterService {
    let mut spec = ServiceSpec::cluster_set_ip(
        ports
            .iter()
            .map(|(name, port, _)| ServicePort {
                name: (*name).to_owned(),
                protocol: Protocol::Tcp,
                port: *port,
                app_protocol: None,
            })
            .collect(),
    );
    spec.service_type = service_type;
    let group = |pods: Vec<Pod>| EndpointGroup {
        ports: ports
            .iter()
            .map(|(name, _, target)| EndpointPort {
                name: (*name).to_owned(),
                protocol: Protocol::Tcp,
                port: *target,
            })
            .collect(),
        endpoints: {
            let mut endpoints = EndpointsBuilder::default();
            for (endpoint, hostname) in pods {
                let details = hostname.as_deref().and_then(EndpointDetails::hostname);
                endpoints.push(endpoint, details);
            }
            endpoints.build()
        },
    };
    // One slice per address family, as Kubernetes keeps them.
    let (v4, v6): (Vec<Pod>, Vec<Pod>) = endpoints
        .into_iter()
        .partition(|(e, _)| e.address.is_ipv4());
    let mut endpoint_groups = vec![group(v4)];
    if !v6.is_empty() {
        endpoint_groups.push(group(v6));
    }
    ClusterService {
        key: ServiceKey::new(key.0, key.1),
        spec,
        export: Some(crate::model::Export::default()),
        endpoint_groups,
    }
}

/// An endpoint and its hostname.
pub(crate) type Pod = (Endpoint, Option<String>);

pub(crate) fn pod(address: &str, hostname: Option<&str>) -> Pod {
    (Endpoint::ready(ip(address)), hostname.map(str::to_owned))
}

fn not_ready(address: &str, hostname: &str) -> Pod {
    let endpoint = Endpoint {
        ready: false,
        serving: false,
        ..Endpoint::ready(ip(address))
    };
    (endpoint, Some(hostname.to_owned()))
}

fn cluster(id: &str, network: &str, gateway: u8, services: Vec<ClusterService>) -> Cluster {
    let mut cluster = Cluster::new(
        ClusterId::new(id).expect("test cluster id"),
        NetworkId::new(network).expect("test network id"),
        format!("test:{id}"),
    );
    cluster.gateways.push(GatewayAddress {
        host: GatewayHost::Ip(IpAddr::from([192, 0, 2, gateway])),
        port: 15008,
    });
    cluster.services = services
        .into_iter()
        .map(|s| (s.key.clone(), std::sync::Arc::new(s)))
        .collect();
    cluster
}

pub(crate) fn set() -> ClusterSet {
    use ServiceType::{ClusterSetIp, Headless};
    let http: Ports<'_> = &[("http", 80, 8080)];
    let postgres: Ports<'_> = &[("postgres", 5432, 5432)];
    let many: Vec<Pod> = (0..100u8)
        .map(|n| pod(&format!("10.1.9.{n}"), Some(&format!("many-{n}"))))
        .collect();

    let mut admin = service(
        ("shop", "admin"),
        ClusterSetIp,
        http,
        vec![pod("10.1.0.9", None)],
    );
    admin.export = None;
    let mut east = cluster(
        "east-1",
        "net-a",
        10,
        vec![
            service(
                ("shop", "cart"),
                ClusterSetIp,
                http,
                vec![pod("10.1.0.1", None)],
            ),
            service(
                ("shop", "checkout"),
                ClusterSetIp,
                http,
                vec![pod("10.1.0.2", None)],
            ),
            admin,
            service(
                ("db", "postgres"),
                Headless,
                postgres,
                vec![
                    pod("10.1.0.50", Some("postgres-0")),
                    pod("fd00::50", Some("postgres-0")),
                    pod("10.1.0.52", None),
                    not_ready("10.1.0.59", "postgres-9"),
                ],
            ),
            service(("big", "many"), Headless, postgres, many),
        ],
    );
    east.imports = [(
        ServiceKey::new("shop", "cart"),
        vec![ip("fd00::10"), ip("240.0.0.10"), ip("240.0.0.10")],
    )]
    .into_iter()
    .collect();
    let e2 = cluster(
        "e2.prod",
        "net-a",
        11,
        vec![
            service(
                ("shop", "checkout"),
                ClusterSetIp,
                &[("debug", 9200, 9200)],
                vec![not_ready("10.1.5.2", "x")],
            ),
            service(
                ("db", "postgres"),
                Headless,
                postgres,
                vec![pod("10.1.5.51", Some("postgres-1"))],
            ),
            service(
                ("db", "standby"),
                Headless,
                postgres,
                vec![not_ready("10.1.5.60", "standby-0")],
            ),
        ],
    );
    let west = cluster(
        "west-1",
        "net-b",
        12,
        vec![
            service(
                ("shop", "cart"),
                ClusterSetIp,
                http,
                vec![pod("10.2.0.1", None)],
            ),
            service(
                ("shop", "checkout"),
                ClusterSetIp,
                &[("http", 80, 8080), ("metrics", 9100, 9100)],
                vec![pod("10.2.0.2", None)],
            ),
            service(
                ("db", "postgres"),
                Headless,
                postgres,
                vec![
                    pod("10.2.0.50", Some("postgres-2")),
                    pod("10.2.0.51", Some("postgres-3")),
                ],
            ),
            service(
                ("db", "replica"),
                Headless,
                postgres,
                vec![pod("10.2.0.60", Some("replica-0"))],
            ),
        ],
    );
    let mut set = ClusterSet::default();
    for cluster in [east, e2, west] {
        set.clusters.insert(cluster.id.clone(), cluster);
    }
    set
}
