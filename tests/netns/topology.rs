//! The multi-network topology, built from `ip netns`, veth pairs and bridges,
//! and removed again by [`Topology::teardown`] (or on drop, also while a
//! failing test unwinds).
//!
//! Every namespace is named `<prefix>-<role>` with a prefix unique to the run
//! and the test (`st0421a`). The bridges live in the run's own `hub`
//! namespace, so nothing is added to the host's namespace and deleting the
//! namespaces removes every interface. Addresses (all /24):
//!
//! | cluster | network | pods (`cNp1`, `cNp2`) | gateway replicas, pod side | gateway replicas, WAN |
//! |---|---|---|---|---|
//! | c1 | net-a | 10.10.0.11, 10.10.0.12 | 10.10.0.201, .202 | 172.31.0.11, .12 |
//! | c2 | net-a | 10.10.0.21, 10.10.0.22 | 10.10.0.203, .204 | 172.31.0.21, .22 |
//! | c3 | net-b | 10.10.0.12, 10.10.0.33 | 10.10.0.231, .232 | 172.31.0.31, .32 |
//! | c4 | net-c | 10.30.0.11, 10.30.0.12 | 10.30.0.201, .202 | 172.31.0.41, .42 |
//!
//! c3's first pod has the address of c1's second pod: net-a and net-b
//! overlap. An optional `rogue` namespace sits on the WAN only (172.31.0.99).

use std::net::Ipv4Addr;

use super::sys;

/// One cluster of the plan.
pub struct ClusterPlan {
    pub id: &'static str,
    pub network: &'static str,
    /// The pod bridge of the cluster's network (in the hub namespace).
    pub bridge: &'static str,
    pub pods: [Ipv4Addr; 2],
    /// Each gateway replica's address on the pod network.
    pub gateways: [Ipv4Addr; 2],
    /// Each gateway replica's address on the WAN.
    pub wan: [Ipv4Addr; 2],
}

const fn a(c: u8, d: u8) -> Ipv4Addr {
    Ipv4Addr::new(10, c, 0, d)
}

const fn wan(d: u8) -> Ipv4Addr {
    Ipv4Addr::new(172, 31, 0, d)
}

/// The four clusters of the main suite.
pub const CLUSTERS: [ClusterPlan; 4] = [
    ClusterPlan {
        id: "c1",
        network: "net-a",
        bridge: "pods-a",
        pods: [a(10, 11), a(10, 12)],
        gateways: [a(10, 201), a(10, 202)],
        wan: [wan(11), wan(12)],
    },
    ClusterPlan {
        id: "c2",
        network: "net-a",
        bridge: "pods-a",
        pods: [a(10, 21), a(10, 22)],
        gateways: [a(10, 203), a(10, 204)],
        wan: [wan(21), wan(22)],
    },
    ClusterPlan {
        id: "c3",
        network: "net-b",
        bridge: "pods-b",
        pods: [a(10, 12), a(10, 33)],
        gateways: [a(10, 231), a(10, 232)],
        wan: [wan(31), wan(32)],
    },
    ClusterPlan {
        id: "c4",
        network: "net-c",
        bridge: "pods-c",
        pods: [a(30, 11), a(30, 12)],
        gateways: [a(30, 201), a(30, 202)],
        wan: [wan(41), wan(42)],
    },
];

/// The WAN address of the `rogue` namespace.
pub const ROGUE_WAN: Ipv4Addr = wan(99);

const WAN_BRIDGE: &str = "wan";

/// The plan of cluster `id`.
pub fn plan(id: &str) -> &'static ClusterPlan {
    CLUSTERS
        .iter()
        .find(|c| c.id == id)
        .unwrap_or_else(|| panic!("no cluster {id} in the plan"))
}

/// The role of pod `n` (1 or 2) of `cluster`: `c1p1`.
pub fn pod_role(cluster: &str, n: u8) -> String {
    format!("{cluster}p{n}")
}

/// The role of gateway replica `n` (1 or 2) of `cluster`: `c1g1`.
pub fn gateway_role(cluster: &str, n: u8) -> String {
    format!("{cluster}g{n}")
}

/// The namespaces of one test; removes them when torn down or dropped.
pub struct Topology {
    pub prefix: String,
    created: Vec<String>,
    keep: bool,
}

impl Topology {
    /// Builds the whole plan (and the rogue namespace if asked). On error,
    /// whatever was made is removed before returning.
    pub fn build(prefix: &str, keep: bool, rogue: bool) -> Result<Topology, String> {
        let mut topology = Topology {
            prefix: prefix.to_owned(),
            created: Vec::new(),
            keep: false,
        };
        // Drops (and so tears down) on the early return of an error.
        topology.make(rogue)?;
        topology.keep = keep;
        Ok(topology)
    }

    /// The full name of the namespace of `role`.
    pub fn ns(&self, role: &str) -> String {
        format!("{}-{role}", self.prefix)
    }

    /// Every namespace made so far.
    pub fn namespaces(&self) -> &[String] {
        &self.created
    }

    fn make(&mut self, rogue: bool) -> Result<(), String> {
        let hub = self.add_ns("hub")?;
        for bridge in [WAN_BRIDGE, "pods-a", "pods-b", "pods-c"] {
            sys::ip(&["-n", &hub, "link", "add", bridge, "type", "bridge"])?;
            sys::ip(&["-n", &hub, "link", "set", bridge, "up"])?;
        }
        for cluster in &CLUSTERS {
            for (n, address) in (1u8..).zip(cluster.pods) {
                let role = pod_role(cluster.id, n);
                let ns = self.add_ns(&role)?;
                self.link(&role, cluster.bridge, &ns, "eth0", address)?;
            }
            for (n, (pod_side, wan_side)) in (1u8..).zip(cluster.gateways.iter().zip(cluster.wan)) {
                let role = gateway_role(cluster.id, n);
                let ns = self.add_ns(&role)?;
                self.link(&format!("{role}p"), cluster.bridge, &ns, "pod0", *pod_side)?;
                self.link(&format!("{role}w"), WAN_BRIDGE, &ns, "wan0", wan_side)?;
            }
        }
        if rogue {
            let ns = self.add_ns("rogue")?;
            self.link("roguew", WAN_BRIDGE, &ns, "wan0", ROGUE_WAN)?;
        }
        Ok(())
    }

    fn add_ns(&mut self, role: &str) -> Result<String, String> {
        let name = self.ns(role);
        sys::ip(&["netns", "add", &name])?;
        self.created.push(name.clone());
        sys::ip(&["-n", &name, "link", "set", "lo", "up"])?;
        Ok(name)
    }

    /// A veth pair: `hub_if` on `bridge` in the hub, `ns_if` with `address`/24 in `ns`.
    fn link(
        &self,
        hub_if: &str,
        bridge: &str,
        ns: &str,
        ns_if: &str,
        address: Ipv4Addr,
    ) -> Result<(), String> {
        let hub = self.ns("hub");
        sys::ip(&[
            "-n", &hub, "link", "add", hub_if, "type", "veth", "peer", "name", ns_if, "netns", ns,
        ])?;
        sys::ip(&["-n", &hub, "link", "set", hub_if, "master", bridge, "up"])?;
        sys::ip(&[
            "-n",
            ns,
            "addr",
            "add",
            &format!("{address}/24"),
            "dev",
            ns_if,
        ])?;
        sys::ip(&["-n", ns, "link", "set", ns_if, "up"])?;
        Ok(())
    }

    /// Kills any process left inside the namespaces, deletes them, and
    /// checks that none is left.
    pub fn teardown(&mut self) -> Result<(), String> {
        for ns in self.created.iter().rev() {
            for pid in sys::pids_in(ns) {
                if let Ok(pid) = u32::try_from(pid) {
                    let _ = sys::signal(pid, sys::SIGKILL);
                }
            }
        }
        let mut errors = Vec::new();
        for ns in self.created.iter().rev() {
            if let Err(error) = sys::ip(&["netns", "del", ns]) {
                errors.push(error);
            }
        }
        let left: Vec<String> = sys::namespaces()?
            .into_iter()
            .filter(|name| self.created.contains(name))
            .collect();
        self.created.clear();
        if left.is_empty() && errors.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "namespaces left behind: {left:?}; errors: {}",
                errors.join("; ")
            ))
        }
    }
}

impl Drop for Topology {
    fn drop(&mut self) {
        if self.created.is_empty() {
            return;
        }
        if self.keep {
            super::loud(&format!(
                "STRAIT_KEEP_NETNS: keeping {} namespaces {}-*; remove them with:\n  \
                 for ns in $(ip netns list | awk '/^{}-/{{print $1}}'); do \
                 ip netns pids $ns | xargs -r kill; ip netns del $ns; done",
                self.created.len(),
                self.prefix,
                self.prefix
            ));
            return;
        }
        if let Err(error) = self.teardown() {
            super::loud(&format!("CLEANUP FAILED: {error}"));
        }
    }
}
