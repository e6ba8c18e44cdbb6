//! The load generator: one `dnsperf` run against one server, and what it
//! printed.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use crate::Result;

/// dnsperf's version line ("DNS Performance Testing Tool Version 2.10.0").
pub(crate) fn version(binary: &std::path::Path) -> String {
    Command::new(binary)
        .arg("-h")
        .stdin(Stdio::null())
        .output()
        .ok()
        .and_then(|output| {
            let text = String::from_utf8_lossy(&output.stderr).into_owned()
                + &String::from_utf8_lossy(&output.stdout);
            let line = text.lines().find(|l| l.starts_with("Version "))?;
            Some(format!("dnsperf {}", line.trim_start_matches("Version ")))
        })
        .unwrap_or_else(|| "dnsperf (version unknown)".to_owned())
}

pub(crate) struct Load {
    pub(crate) binary: PathBuf,
    /// The query file: one `name A` a line.
    pub(crate) queries: PathBuf,
    pub(crate) clients: usize,
    pub(crate) outstanding: usize,
    /// `-Q`: queries per second at most (open loop up to `outstanding`).
    pub(crate) rate: Option<usize>,
    /// The CPU dnsperf is pinned to.
    pub(crate) cpu: Option<usize>,
}

/// What one dnsperf run printed.
#[derive(Debug, Default)]
pub(crate) struct Report {
    pub(crate) sent: u64,
    pub(crate) completed: u64,
    pub(crate) lost: u64,
    /// "NOERROR 1234 (100.00%)": the count of NOERROR responses.
    pub(crate) noerror: u64,
    pub(crate) response_codes: String,
    pub(crate) qps: f64,
    pub(crate) avg_latency_ms: f64,
    pub(crate) max_latency_ms: f64,
    pub(crate) stddev_latency_ms: f64,
}

impl Report {
    /// Every completed query was answered NOERROR, and nearly all completed.
    pub(crate) fn check(&self, server: &str) -> Result<()> {
        if self.completed == 0 || self.noerror != self.completed {
            return Err(format!(
                "{server}: {} of {} queries completed, response codes: {}",
                self.completed, self.sent, self.response_codes
            ));
        }
        if self.lost * 100 > self.sent {
            return Err(format!(
                "{server}: {} of {} queries lost (more than 1%)",
                self.lost, self.sent
            ));
        }
        Ok(())
    }
}

impl Load {
    pub(crate) fn run(&self, server: SocketAddr, seconds: f64) -> Result<Report> {
        let mut command = match self.cpu {
            Some(cpu) => {
                let mut command = Command::new("taskset");
                command.args(["-c", &cpu.to_string()]).arg(&self.binary);
                command
            }
            None => Command::new(&self.binary),
        };
        command
            .args(["-m", "udp", "-s", &server.ip().to_string()])
            .args(["-p", &server.port().to_string()])
            .arg("-d")
            .arg(&self.queries)
            .args(["-l", &seconds.to_string(), "-T", "1", "-t", "2"])
            .args(["-c", &self.clients.to_string()])
            .args(["-q", &self.outstanding.to_string()])
            .stdin(Stdio::null());
        if let Some(rate) = self.rate {
            command.args(["-Q", &rate.to_string()]);
        }
        let output = command
            .output()
            .map_err(|e| format!("cannot run dnsperf: {e}"))?;
        let stdout = String::from_utf8_lossy(&output.stdout);
        if !output.status.success() {
            return Err(format!(
                "dnsperf failed ({}): {stdout}{}",
                output.status,
                String::from_utf8_lossy(&output.stderr)
            ));
        }
        parse(&stdout).ok_or_else(|| format!("cannot read dnsperf's statistics:\n{stdout}"))
    }
}

/// The first number in `text` (digits and dots).
fn number(text: &str) -> Option<f64> {
    let start = text.find(|c: char| c.is_ascii_digit())?;
    let rest = &text[start..];
    let end = rest
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(rest.len());
    rest[..end].parse().ok()
}

/// dnsperf 2.x's statistics block:
///
/// ```text
///   Queries sent:         1000
///   Queries completed:    1000 (100.00%)
///   Queries lost:         0 (0.00%)
///   Response codes:       NOERROR 1000 (100.00%)
///   Queries per second:   50000.123456
///   Average Latency (s):  0.001234 (min 0.000012, max 0.004321)
///   Latency StdDev (s):   0.000321
/// ```
fn parse(text: &str) -> Option<Report> {
    let mut report = Report::default();
    let mut found = 0;
    for line in text.lines().map(str::trim) {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        match key {
            "Queries sent" => report.sent = number(value)? as u64,
            "Queries completed" => report.completed = number(value)? as u64,
            "Queries lost" => report.lost = number(value)? as u64,
            "Response codes" => {
                report.response_codes = value.to_owned();
                for code in value.split(',') {
                    if let Some(count) = code.trim().strip_prefix("NOERROR ") {
                        report.noerror = number(count)? as u64;
                    }
                }
            }
            "Queries per second" => report.qps = number(value)?,
            "Average Latency (s)" => {
                report.avg_latency_ms = number(value)? * 1000.0;
                let max = value.split("max ").nth(1)?;
                report.max_latency_ms = number(max)? * 1000.0;
            }
            "Latency StdDev (s)" => report.stddev_latency_ms = number(value)? * 1000.0,
            _ => continue,
        }
        found += 1;
    }
    (found >= 6).then_some(report)
}
