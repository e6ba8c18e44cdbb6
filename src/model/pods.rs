//! Names of one pod and of one service port, shared by routing, the import
//! planner and DNS: a headless service's pod is named by its cluster and
//! per-pod label, as its DNS name `<label>.<cluster>.<svc>.<ns>.svc.<zone>`
//! names it.

use std::borrow::Cow;
use std::fmt;
use std::net::IpAddr;

use serde::Serialize;

use super::{ClusterId, Protocol, ServiceKey};

/// One pod of a headless service, as its per-pod DNS name names it:
/// `<label>.<cluster>.<svc>.<ns>.svc.<zone>`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct PodRef {
    pub cluster: ClusterId,
    pub label: String,
}

impl fmt::Display for PodRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.label, self.cluster)
    }
}

/// The per-pod label of an endpoint: its hostname, else its address with
/// dashes (`10-1-0-7`, `fd00--7`), as Kubernetes DNS names pods.
pub fn pod_label(hostname: Option<&str>, address: IpAddr) -> Cow<'_, str> {
    match hostname {
        Some(hostname) => Cow::Borrowed(hostname),
        None => Cow::Owned(address.to_string().replace(['.', ':'], "-")),
    }
}

/// One port of one multi-cluster service, or of one remote pod of a
/// headless service.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PortKey {
    pub service: ServiceKey,
    pub protocol: Protocol,
    pub port: u16,
    /// The pod, for a headless service's per-pod import port.
    pub pod: Option<PodRef>,
}

impl PortKey {
    /// A service port's key.
    pub fn service_port(service: ServiceKey, protocol: Protocol, port: u16) -> Self {
        Self {
            service,
            protocol,
            port,
            pod: None,
        }
    }
}

impl fmt::Display for PortKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.pod {
            None => write!(f, "{}:{}/{}", self.service, self.port, self.protocol),
            Some(pod) => write!(
                f,
                "{} pod {pod}:{}/{}",
                self.service, self.port, self.protocol
            ),
        }
    }
}
