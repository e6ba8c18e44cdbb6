//! The caller's identity at the backend: a service whose export asks for
//! the PROXY protocol (`strait.dev/proxy-protocol: v2`) has every backend
//! connection start with a v2 header naming the original client and, in
//! TLVs 0xE0 and 0xE1, the caller's cluster and its gateway's SPIFFE
//! identity. Checked with a pod that parses the header, and with HAProxy
//! (`accept-proxy`) as a real consumer that logs the client it was told.
//! HAProxy 2.6, Debian's, reads custom TLVs in no log variable
//! (`fc_pp_tlv` came in 2.9), so the TLVs are checked by the parsing pod.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::Env;
use super::backend::{Backend, POD_PORT};
use super::client;
use super::scenario::*;
use super::topology::pod_role;
use super::world::{CLUSTERSET, Options, World};
use crate::support::ServiceSpec;

/// `app/<name>` on port 42, exported early, asking for the PROXY protocol.
fn told(name: &'static str, pods: &[(&str, u8)]) -> ServiceSpec<'static> {
    ServiceSpec {
        proxy_protocol: true,
        ..service(name, TCP_42, EARLY, pods)
    }
}

fn services(id: &str) -> Vec<ServiceSpec<'static>> {
    match id {
        // c2 shares c1's network: the direct path. `shared` reaches the
        // told pods' port too, and does not ask.
        "c2" => vec![
            told("near", &[("c2", 1)]),
            service("shared", TCP_42, EARLY, &[("c2", 1)]),
        ],
        "c3" => vec![
            told("far", &[("c3", 1)]),
            told("logged", &[("c3", 2)]),
            service("shared", TCP_42, EARLY, &[("c3", 1)]),
        ],
        // Not told, and on a pod of its own: a pod port speaks the PROXY
        // protocol or not, whichever Service selects it.
        "c4" => vec![service("echo", TCP_42, EARLY, &[("c4", 1)])],
        _ => Vec::new(),
    }
}

fn gateway_identity(cluster: &str) -> String {
    format!("spiffe://{CLUSTERSET}/cluster/{cluster}/gateway")
}

/// A c1 pod calls a told service of c2 (direct) and of c3 (through the
/// tunnel, over QUIC and over HTTP/2): each backend reads the pod's own
/// address and port, and c1 as the caller, named by c1's gateway's
/// identity. HAProxy in front of c3's second pod logs the same client.
/// A service that does not ask gets no header: its echo is exact.
pub async fn told_backends_learn_the_client_and_the_caller(env: Env, transport: &'static str) {
    let mut world = World::start(
        &env,
        Options {
            transport: Some(transport),
            ..Options::services(services)
        },
    )
    .await;
    world.start_told_pod("c2", 1);
    world.start_told_pod("c3", 1);
    world.start_pod("c4", 1);
    let haproxy = Haproxy::start(&world, "c3", 2);
    let client_ns = world.ns("c1p1");
    let gateway = world.connect_address("c1");

    for (service, pod, caller_gateway) in [("near", "c2-pod1", "c1"), ("far", "c3-pod1", "c1")] {
        let authority = format!("{service}.app.svc.clusterset.local:42");
        let held = client::Held::open(&client_ns, gateway, &authority)
            .await
            .unwrap_or_else(|e| panic!("{authority}: {e}"));
        let local = held.local_address();
        drop(held);
        let told = world.pod(pod).told();
        let last = told
            .last()
            .unwrap_or_else(|| panic!("{pod} read no header"))
            .clone()
            .unwrap_or_else(|e| panic!("{pod}: {e}"));
        assert_eq!(
            last.source, local,
            "{pod} was told the pod's own address and port"
        );
        assert_eq!(last.cluster, "c1", "{pod}");
        assert_eq!(last.gateway, gateway_identity(caller_gateway), "{pod}");
    }

    // HAProxy as the consumer: it logs the client the header named.
    let authority = "logged.app.svc.clusterset.local:42";
    let held = client::Held::open(&client_ns, gateway, authority)
        .await
        .unwrap_or_else(|e| panic!("{authority}: {e}"));
    let local = held.local_address();
    drop(held);
    let line = haproxy.wait_for_line(&local.to_string(), Duration::from_secs(5));
    assert!(
        line.is_some(),
        "HAProxy logged no connection from {local}: {}",
        haproxy.log()
    );

    // A Service that does not ask, on the told pods' port: the pods get
    // Strait's header all the same, on the direct path (c2-pod1) and
    // through the tunnel (c3-pod1), so a client's first bytes are never
    // read as one. (Decided per request, as before, no header was written
    // and the pods read the client's bytes.)
    let told_before: usize = ["c2-pod1", "c3-pod1"]
        .iter()
        .map(|pod| world.pod(pod).told().len())
        .sum();
    for _ in 0..6 {
        let authority = "shared.app.svc.clusterset.local:42";
        let held = client::Held::open(&client_ns, gateway, authority)
            .await
            .unwrap_or_else(|e| panic!("{authority}: {e}"));
        drop(held);
    }
    let told_now: Vec<Result<super::backend::Told, String>> = ["c2-pod1", "c3-pod1"]
        .iter()
        .flat_map(|pod| world.pod(pod).told())
        .collect();
    assert_eq!(told_now.len(), told_before + 6, "{told_now:?}");
    for told in &told_now {
        let told = told
            .as_ref()
            .unwrap_or_else(|e| panic!("a pod read no header: {e}"));
        assert_eq!(told.cluster, "c1");
    }

    // A service that does not ask: no header, so the echo is exact (a
    // header would come back ahead of the payload).
    client::once(&client_ns, gateway, "echo.app.svc.clusterset.local:42")
        .await
        .expect("echo answers, exactly");
}

/// HAProxy in a pod's namespace: `accept-proxy` on the pod's port,
/// forwarding to an echo server on the pod's loopback, logging each
/// connection's client (`%ci:%cp`) as soon as it is forwarded.
pub struct Haproxy {
    child: Child,
    log: PathBuf,
    _echo: Backend,
}

impl Haproxy {
    pub fn start(world: &World, cluster: &str, n: u8) -> Haproxy {
        let ns = world.ns(&pod_role(cluster, n));
        let echo_at = SocketAddr::from((Ipv4Addr::LOCALHOST, 9000));
        let echo = Backend::start(&format!("{cluster}-pod{n}-behind-haproxy"), &ns, echo_at)
            .unwrap_or_else(|e| panic!("{e}"));
        let dir = world.dir.join(format!("haproxy-{cluster}-{n}"));
        std::fs::create_dir_all(&dir).expect("haproxy dir");
        let config = dir.join("haproxy.cfg");
        let log = dir.join("haproxy.log");
        let pod = SocketAddr::new(World::pod_ip(cluster, n), POD_PORT);
        std::fs::write(
            &config,
            format!(
                "global\n  log stdout format raw local0\n\
                 defaults\n  mode tcp\n  log global\n  option logasap\n  timeout connect 2s\n  timeout client 30s\n  timeout server 30s\n\
                 frontend told\n  bind {pod} accept-proxy\n  log-format \"told %ci:%cp\"\n  default_backend echo\n\
                 backend echo\n  server echo {echo_at}\n"
            ),
        )
        .expect("haproxy.cfg");
        let out = std::fs::File::create(&log).expect("haproxy.log");
        let err = out.try_clone().expect("haproxy.log");
        let child = Command::new("ip")
            .args(["netns", "exec", &ns, "haproxy", "-db", "-f"])
            .arg(&config)
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(err))
            .spawn()
            .expect("haproxy starts");
        let haproxy = Haproxy {
            child,
            log,
            _echo: echo,
        };
        haproxy.wait_listening(&ns, pod);
        haproxy
    }

    fn wait_listening(&self, ns: &str, pod: SocketAddr) {
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            let listening = super::sys::run("ip", &["netns", "exec", ns, "ss", "-Hltn"])
                .is_ok_and(|out| out.contains(&pod.to_string()));
            if listening {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("HAProxy is not listening on {pod}: {}", self.log());
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The first log line naming `client`, waiting up to `within`.
    pub fn wait_for_line(&self, client: &str, within: Duration) -> Option<String> {
        let deadline = Instant::now() + within;
        loop {
            let wanted = format!("told {client}");
            if let Some(line) = self.log().lines().find(|l| l.contains(&wanted)) {
                return Some(line.to_owned());
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Haproxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
