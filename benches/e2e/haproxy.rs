//! HAProxy, the peer Strait is measured against: finding it (or installing
//! Debian's package when root), and the configuration of its three processes:
//! `haproxy-tcp` (one `mode tcp` hop to the backend) and the two hops of
//! `haproxy-tls-tunnel` (plain TCP in, mutual TLS between the hops with the
//! certificates `strait certs` made for the gateways, plain TCP to the backend).

use crate::CLUSTERSET;
use crate::Result;
use crate::topology::run_to_completion;
use std::net::SocketAddr;
use std::path::Path;
use std::path::PathBuf;
use std::process::Command;
use std::process::Stdio;

/// Highest number of connections each HAProxy process accepts (global and
/// per frontend), when the open-file limit allows it.
const MAXCONN: u64 = 30_000;
/// Files each HAProxy process may open, when allowed: two per proxied
/// connection, plus listeners.
const ULIMIT_N: u64 = 65_536;

/// `ulimit-n` and `maxconn` for an open-file limit of `files`: HAProxy
/// refuses to start unless `ulimit-n` ≥ 2 × `maxconn` + a few, and cannot
/// raise its limit above the hard one without CAP_SYS_RESOURCE.
pub(crate) fn limits(files: u64) -> (u64, u64) {
    let ulimit_n = ULIMIT_N.min(files);
    (ulimit_n, MAXCONN.min(ulimit_n.saturating_sub(100) / 2))
}

/// The HAProxy binary and its version line, installing the Debian package
/// when it is missing and this process is root; why not otherwise.
pub(crate) fn find_or_install() -> std::result::Result<(PathBuf, String), String> {
    if let Some(found) = find() {
        return Ok(found);
    }
    if !is_root() {
        return Err(
            "`haproxy` is not installed and this is not root, so it cannot be \
                    installed (`apt-get install haproxy`)"
                .to_owned(),
        );
    }
    println!("e2e bench: haproxy is missing; running `apt-get install -y haproxy`");
    let install = || {
        Command::new("apt-get")
            .args(["install", "-y", "-qq", "haproxy"])
            .env("DEBIAN_FRONTEND", "noninteractive")
            // Asks invoke-rc.d not to start the packaged service.
            .env("RUNLEVEL", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .status()
            .map_err(|e| format!("cannot run apt-get: {e}"))
    };
    let mut status = install()?;
    if !status.success() {
        let _ = Command::new("apt-get")
            .args(["update", "-qq"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .status();
        status = install()?;
    }
    find().ok_or_else(|| {
        format!(
            "`haproxy` is missing and `apt-get install -y haproxy` did not install it ({status})"
        )
    })
}

fn find() -> Option<(PathBuf, String)> {
    ["haproxy", "/usr/sbin/haproxy", "/usr/local/sbin/haproxy"]
        .iter()
        .find_map(|candidate| {
            let output = Command::new(candidate)
                .arg("-v")
                .stdin(Stdio::null())
                .output()
                .ok()?;
            // "HAProxy version 2.6.12-1+deb12u3 2025/10/03 - https://haproxy.org/"
            let text = String::from_utf8_lossy(&output.stdout);
            let mut words = text.split_whitespace();
            let (name, _, version) = (words.next()?, words.next()?, words.next()?);
            (output.status.success() && name == "HAProxy")
                .then(|| (PathBuf::from(candidate), format!("HAProxy {version}")))
        })
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            let line = status.lines().find(|l| l.starts_with("Uid:"))?;
            Some(line.split_whitespace().nth(1)? == "0")
        })
        .unwrap_or(false)
}

/// Where the three HAProxy processes listen, and the backend they reach.
pub(crate) struct Layout {
    pub(crate) tcp: SocketAddr,
    pub(crate) hop1: SocketAddr,
    pub(crate) hop2: SocketAddr,
    pub(crate) backend: SocketAddr,
}

/// The `global` and `defaults` sections every process shares.
fn common(threads: usize, files: u64) -> String {
    let (ulimit_n, maxconn) = limits(files);
    format!(
        "global
    nbthread {threads}
    maxconn {maxconn}
    ulimit-n {ulimit_n}

defaults
    mode tcp
    maxconn {maxconn}
    timeout connect 5s
    timeout client 10m
    timeout server 10m
"
    )
}

/// Writes the configuration files of `haproxy-tcp`, `haproxy-hop1` and
/// `haproxy-hop2` (and the combined certificate-and-key PEMs HAProxy reads)
/// into `dir`; (process name, configuration file) pairs.
pub(crate) fn write_configs(
    binary: &Path,
    dir: &Path,
    certs: &Path,
    threads: usize,
    files: u64,
    layout: &Layout,
) -> Result<Vec<(&'static str, PathBuf)>> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let read = |path: PathBuf| {
        std::fs::read_to_string(&path).map_err(|e| format!("cannot read {}: {e}", path.display()))
    };
    let write = |path: &Path, text: &str| {
        std::fs::write(path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))
    };
    // HAProxy wants the certificate chain and the key in one file.
    for cluster in ["c1", "c3"] {
        let pem = read(certs.join(cluster).join("tls.crt"))?
            + &read(certs.join(cluster).join("tls.key"))?;
        write(&dir.join(format!("{cluster}.pem")), &pem)?;
    }
    let ca = certs.join("ca.crt");
    let ca = ca.display();
    let c1_pem = dir.join("c1.pem");
    let c3_pem = dir.join("c3.pem");
    let hop2_name = format!("c3.gateway.{CLUSTERSET}");
    let backend = layout.backend;
    let configs = [
        (
            "haproxy-tcp",
            format!(
                "{common}
frontend tcp_in
    bind {tcp}
    default_backend echo

backend echo
    server echo {backend}
",
                common = common(threads, files),
                tcp = layout.tcp,
            ),
        ),
        (
            "haproxy-hop1",
            format!(
                "{common}
frontend tunnel_in
    bind {hop1}
    default_backend hop2

# Mutual TLS to the second hop: this hop shows c1's certificate and checks
# that hop 2's chains to the cluster set's CA and names {hop2_name}.
backend hop2
    server hop2 {hop2} ssl verify required ca-file {ca} crt {c1} sni str({hop2_name}) verifyhost {hop2_name}
",
                common = common(threads, files),
                hop1 = layout.hop1,
                hop2 = layout.hop2,
                c1 = c1_pem.display(),
            ),
        ),
        (
            "haproxy-hop2",
            format!(
                "{common}
# Mutual TLS from the first hop: c3's certificate; clients must show one
# that chains to the cluster set's CA.
frontend tunnel_out
    bind {hop2} ssl crt {c3} verify required ca-file {ca}
    default_backend echo

backend echo
    server echo {backend}
",
                common = common(threads, files),
                hop2 = layout.hop2,
                c3 = c3_pem.display(),
            ),
        ),
    ];
    let mut written = Vec::new();
    for (name, text) in configs {
        let path = dir.join(format!("{name}.cfg"));
        write(&path, &text)?;
        check(binary, &path)?;
        written.push((name, path));
    }
    Ok(written)
}

/// `haproxy -c`: a mistake shows as a clear error before anything starts.
pub(crate) fn check(binary: &Path, config: &Path) -> Result<()> {
    let args = [
        "-c".as_ref(),
        "-q".as_ref(),
        "-f".as_ref(),
        config.as_os_str(),
    ];
    run_to_completion(
        binary,
        &args,
        &format!("haproxy -c -f {}", config.display()),
    )
}
