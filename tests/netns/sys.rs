//! The few system calls and commands the harness needs: running `ip` and
//! `iptables` with errors that say what failed, signalling processes, and
//! making sockets inside a network namespace.
//!
//! A socket belongs to the network namespace of the thread that created it,
//! for its whole life. [`in_netns`] runs a closure on a fresh thread that has
//! entered a namespace (`setns(2)`); the sockets it makes are then driven by
//! tokio on any thread, exactly as if a process inside the namespace owned
//! them. The thread ends right after, so no pooled thread is ever left in a
//! foreign namespace.

use std::fs::File;
use std::io;
use std::net::SocketAddr;
use std::process::Command;

use nix::sched::CloneFlags;
use nix::sys::signal::Signal;
use nix::unistd::Pid;

pub const SIGKILL: Signal = Signal::SIGKILL;

/// Runs `program args…` and returns its stdout, or an error naming the
/// command and quoting its stderr.
pub fn run(program: &str, args: &[&str]) -> Result<String, String> {
    let output = Command::new(program)
        .args(args)
        .output()
        .map_err(|e| format!("`{program} {}` did not start: {e}", args.join(" ")))?;
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    } else {
        Err(format!(
            "`{program} {}` failed ({}): {}",
            args.join(" "),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        ))
    }
}

/// `ip args…`
pub fn ip(args: &[&str]) -> Result<String, String> {
    run("ip", args)
}

/// `ip netns exec ns iptables args…`
pub fn iptables(ns: &str, args: &[&str]) -> Result<String, String> {
    let mut full = vec!["netns", "exec", ns, "iptables"];
    full.extend_from_slice(args);
    run("ip", &full)
}

/// The names of every network namespace on the host.
pub fn namespaces() -> Result<Vec<String>, String> {
    let listing = ip(&["netns", "list"])?;
    Ok(listing
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .map(str::to_owned)
        .collect())
}

/// The pids of the processes inside namespace `ns`.
pub fn pids_in(ns: &str) -> Vec<i32> {
    ip(&["netns", "pids", ns])
        .map(|out| out.lines().filter_map(|l| l.trim().parse().ok()).collect())
        .unwrap_or_default()
}

/// Sends `signal` to one process this harness started.
pub fn signal(pid: u32, signal: Signal) -> io::Result<()> {
    let pid = i32::try_from(pid).map_err(|_| io::Error::other("pid out of range"))?;
    nix::sys::signal::kill(Pid::from_raw(pid), signal).map_err(io::Error::from)
}

/// Runs `f` on a new thread that has entered the network namespace `ns`.
pub fn in_netns<T, F>(ns: &str, f: F) -> io::Result<T>
where
    T: Send + 'static,
    F: FnOnce() -> io::Result<T> + Send + 'static,
{
    let path = format!("/run/netns/{ns}");
    std::thread::spawn(move || {
        let handle = File::open(&path).map_err(|e| io::Error::other(format!("{path}: {e}")))?;
        // CLONE_NEWNET changes only this thread's network namespace.
        nix::sched::setns(&handle, CloneFlags::CLONE_NEWNET)
            .map_err(|error| io::Error::other(format!("setns {path}: {error}")))?;
        f()
    })
    .join()
    .map_err(|_| io::Error::other("the namespace thread panicked"))?
}

/// A TCP client socket created inside `ns`, not yet connected.
pub fn socket_in(ns: &str) -> io::Result<tokio::net::TcpSocket> {
    in_netns(ns, || {
        let socket = tokio::net::TcpSocket::new_v4()?;
        socket.set_nodelay(true)?;
        Ok(socket)
    })
}

/// Connects from inside `ns` to `address`, giving up after `timeout`.
pub async fn connect_in(
    ns: &str,
    address: SocketAddr,
    timeout: std::time::Duration,
) -> io::Result<tokio::net::TcpStream> {
    let socket = socket_in(ns)?;
    match tokio::time::timeout(timeout, socket.connect(address)).await {
        Ok(result) => result,
        Err(_) => Err(io::Error::new(
            io::ErrorKind::TimedOut,
            format!("connect to {address} from {ns} timed out after {timeout:?}"),
        )),
    }
}

/// A listening socket bound to `address` inside `ns`. Call from within a
/// tokio runtime.
pub fn listen_in(ns: &str, address: SocketAddr) -> io::Result<tokio::net::TcpListener> {
    let listener = in_netns(ns, move || {
        let listener = std::net::TcpListener::bind(address)?;
        listener.set_nonblocking(true)?;
        Ok(listener)
    })?;
    tokio::net::TcpListener::from_std(listener)
}

/// Whether this process may build namespaces: effective uid 0, or both
/// CAP_SYS_ADMIN and CAP_NET_ADMIN. `Err` says why not.
pub fn privileged() -> Result<(), String> {
    let status = std::fs::read_to_string("/proc/self/status")
        .map_err(|e| format!("cannot read /proc/self/status: {e}"))?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .map(|rest| rest.trim().to_owned())
    };
    let euid = field("Uid:")
        .and_then(|uids| uids.split_whitespace().nth(1).map(str::to_owned))
        .unwrap_or_default();
    let caps = field("CapEff:")
        .and_then(|hex| u64::from_str_radix(&hex, 16).ok())
        .unwrap_or(0);
    let needed = (1u64 << 21) | (1u64 << 12);
    if caps & needed == needed {
        Ok(())
    } else if euid != "0" {
        Err(format!("not root (effective uid {euid})"))
    } else {
        Err("root without CAP_SYS_ADMIN and CAP_NET_ADMIN".to_owned())
    }
}
