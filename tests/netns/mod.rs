//! A harness for multi-network tests in Linux network namespaces: a topology
//! of `ip netns`, veth pairs and bridges ([`topology`]), real `strait run`
//! gateways inside it ([`gateway`]), echo pods and clients whose sockets
//! live in pod namespaces ([`backend`], [`client`]), all put together by
//! [`world::World`].
//!
//! [`run`] drives one test: it skips (or, under `CI=true`, fails) when the
//! process may not build namespaces, runs one test at a time (the tests
//! measure time and share two cores), gives each test a namespace prefix
//! unique to the run, and checks after the test, passed or failed, that no
//! namespace of the run is left. `STRAIT_KEEP_NETNS=1` keeps the namespaces,
//! gateways and logs of every test for debugging.

pub mod backend;
pub mod by_name;
pub mod client;
pub mod gateway;
pub mod headless;
pub mod resilience;
pub mod scenario;
pub mod sys;
pub mod told;
pub mod topology;
pub mod transparent;
pub mod udp;
pub mod world;

use std::future::Future;
use std::io::Write;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

/// What one test is handed: its namespace prefix.
pub struct Env {
    pub test: &'static str,
    pub prefix: String,
}

impl Env {
    /// Another prefix of this run, for a second topology inside one test.
    pub fn another_prefix(&self) -> String {
        next_prefix()
    }
}

/// Writes one line to the real stderr, past the test harness's capture.
pub fn loud(message: &str) {
    let _ = writeln!(std::io::stderr().lock(), "{message}");
}

/// Whether `STRAIT_KEEP_NETNS` asks to keep what the tests made.
pub fn keep() -> bool {
    std::env::var("STRAIT_KEEP_NETNS").is_ok_and(|v| !v.is_empty() && v != "0")
}

fn ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

/// How to ask the command `tool` whether it runs, and its Debian package.
fn probe(tool: &str) -> (&'static str, &str) {
    match tool {
        "dig" => ("-v", "dnsutils"),
        "nsd" => ("-v", "nsd"),
        "haproxy" => ("-v", "haproxy"),
        "getent" => ("--version", "libc-bin"),
        _ => ("--version", tool),
    }
}

/// Why this process cannot run a test that needs the commands `tools`, if
/// it cannot.
fn cannot_run(tools: &[&str]) -> Option<String> {
    if let Err(reason) = sys::privileged() {
        return Some(reason);
    }
    if let Err(error) = sys::ip(&["-V"]) {
        return Some(format!("no usable `ip` (install iproute2): {error}"));
    }
    for tool in tools {
        let (flag, package) = probe(tool);
        if let Err(error) = sys::run(tool, &[flag]) {
            return Some(format!("no usable `{tool}` (install {package}): {error}"));
        }
    }
    None
}

static SERIAL: Mutex<()> = Mutex::new(());
static RUN: OnceLock<String> = OnceLock::new();
static TOPOLOGIES: AtomicUsize = AtomicUsize::new(0);

/// The run's prefix: `st` and the pid modulo 10000, moved on if namespaces
/// of a crashed earlier run with the same number are still there.
fn run_prefix() -> &'static str {
    RUN.get_or_init(|| {
        let existing = sys::namespaces().unwrap_or_default();
        let pid = std::process::id();
        (0..10_000)
            .map(|k| format!("st{:04}", (pid + k) % 10_000))
            .find(|prefix| !existing.iter().any(|ns| ns.starts_with(prefix.as_str())))
            .unwrap_or_else(|| format!("st{:04}", pid % 10_000))
    })
}

/// A fresh topology prefix of this run: `st0421a`, `st0421b`, …
fn next_prefix() -> String {
    let mut n = TOPOLOGIES.fetch_add(1, Ordering::SeqCst);
    let mut letters = String::new();
    loop {
        letters.insert(0, char::from(b'a' + (n % 26) as u8));
        n /= 26;
        if n == 0 {
            break;
        }
        n -= 1;
    }
    format!("{}{letters}", run_prefix())
}

/// Namespaces of this run that exist now.
pub fn namespaces_of_run() -> Vec<String> {
    let prefix = run_prefix();
    sys::namespaces()
        .unwrap_or_default()
        .into_iter()
        .filter(|ns| {
            ns.strip_prefix(prefix)
                .is_some_and(|rest| rest.starts_with(|c: char| c.is_ascii_lowercase()))
        })
        .collect()
}

/// Runs one multi-network test (see the module documentation).
pub fn run<F, Fut>(test: &'static str, needs_iptables: bool, body: F)
where
    F: FnOnce(Env) -> Fut,
    Fut: Future<Output = ()>,
{
    let tools: &[&str] = if needs_iptables { &["iptables"] } else { &[] };
    run_needing(test, tools, body);
}

/// [`run`] for a test that needs the commands `tools` besides `ip`
/// (`iptables`, `curl`, `getent`, `dig`): without one it skips, or fails
/// under `CI=true`.
pub fn run_needing<F, Fut>(test: &'static str, tools: &[&str], body: F)
where
    F: FnOnce(Env) -> Fut,
    Fut: Future<Output = ()>,
{
    if let Some(reason) = cannot_run(tools) {
        if ci() {
            panic!("multinetwork::{test} cannot run and CI=true: {reason}");
        }
        loud(&format!("SKIPPED: multinetwork::{test}: {reason}"));
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(PoisonError::into_inner);
    let env = Env {
        test,
        prefix: next_prefix(),
    };
    let started = Instant::now();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let outcome = catch_unwind(AssertUnwindSafe(|| runtime.block_on(body(env))));
    runtime.shutdown_timeout(Duration::from_secs(5));
    let left = namespaces_of_run();
    loud(&format!(
        "multinetwork::{test}: {} in {:.1} s",
        if outcome.is_ok() { "passed" } else { "FAILED" },
        started.elapsed().as_secs_f64()
    ));
    if let Err(panic) = outcome {
        resume_unwind(panic);
    }
    if !keep() {
        assert!(
            left.is_empty(),
            "namespaces of this run left behind after {test}: {left:?}"
        );
    }
}
