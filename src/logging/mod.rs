//! Logs that stay quiet under attack: a peer that sends ten thousand bad
//! requests must not write ten thousand log lines. Each kind of line (a
//! tunnel refusal, a refused handshake, a refused local connection) gets a
//! budget per interval; past it, lines are counted instead, and one summary
//! line per interval says how many were left out, by reason. The metrics
//! still count every event. The budget is pure (the caller passes the
//! clock); [`QuietLogs`] and [`LogBudget::check`] write the lines.
//! [`connection`] gives every proxied connection a span and an id.

pub mod connection;

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Lines logged per interval before the rest are only counted.
pub const DEFAULT_BURST: u32 = 20;
/// The interval a budget covers, and how often a summary may be written.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(10);

/// What one event may do.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Admitted {
    /// Write this event's own line.
    pub log: bool,
    /// Write first the summary of the interval that just ended.
    pub summary: Option<Suppressed>,
}

/// The lines an interval left out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Suppressed {
    pub total: u64,
    /// Left-out lines per reason, in reason order.
    pub by_reason: BTreeMap<&'static str, u64>,
    pub interval: Duration,
}

impl Suppressed {
    /// `forbidden=3 not_admitted=9997`: the counts for a log field.
    pub fn reasons(&self) -> String {
        let parts: Vec<String> = self
            .by_reason
            .iter()
            .map(|(reason, count)| format!("{reason}={count}"))
            .collect();
        parts.join(" ")
    }
}

/// One kind of line's budget.
#[derive(Debug)]
pub struct LogBudget {
    /// What the lines are, for the summary: `tunnel request refusals`.
    what: &'static str,
    burst: u32,
    interval: Duration,
    window: Mutex<Window>,
}

#[derive(Debug)]
struct Window {
    started: Option<Instant>,
    logged: u32,
    suppressed: BTreeMap<&'static str, u64>,
}

impl LogBudget {
    pub fn new(what: &'static str, burst: u32, interval: Duration) -> Self {
        Self {
            what,
            burst,
            interval,
            window: Mutex::new(Window {
                started: None,
                logged: 0,
                suppressed: BTreeMap::new(),
            }),
        }
    }

    /// Whether to write the line of one event of `reason` now; writes the
    /// summary of the interval that just ended first, when there is one.
    pub fn check(&self, reason: &'static str) -> bool {
        let admitted = self.admit(reason, Instant::now());
        if let Some(summary) = admitted.summary {
            self.report(&summary);
        }
        admitted.log
    }

    fn report(&self, summary: &Suppressed) {
        tracing::info!(
            left_out = summary.total,
            reasons = %summary.reasons(),
            interval = ?summary.interval,
            "{}: lines left out under load; the metrics count every one",
            self.what
        );
    }

    /// Decides one event of `reason` at `now`.
    pub fn admit(&self, reason: &'static str, now: Instant) -> Admitted {
        let Ok(mut window) = self.window.lock() else {
            // A poisoned lock only means a panic elsewhere; logging goes on.
            return Admitted {
                log: true,
                summary: None,
            };
        };
        let summary = self.roll(&mut window, now);
        let log = window.logged < self.burst;
        if log {
            window.logged += 1;
        } else {
            *window.suppressed.entry(reason).or_default() += 1;
        }
        Admitted { log, summary }
    }

    /// The summary of an interval that ended with lines left out, if any:
    /// for a timer, so that the last interval of an attack is reported
    /// even when no further event comes.
    pub fn flush(&self, now: Instant) -> Option<Suppressed> {
        let mut window = self.window.lock().ok()?;
        self.roll(&mut window, now)
    }

    /// Starts a new interval when the current one is over, returning what
    /// the old one left out.
    fn roll(&self, window: &mut Window, now: Instant) -> Option<Suppressed> {
        let over = window
            .started
            .is_none_or(|started| now.saturating_duration_since(started) >= self.interval);
        if !over {
            return None;
        }
        window.started = Some(now);
        window.logged = 0;
        let by_reason = std::mem::take(&mut window.suppressed);
        let total: u64 = by_reason.values().sum();
        (total > 0).then_some(Suppressed {
            total,
            by_reason,
            interval: self.interval,
        })
    }
}

/// The budgets of a gateway's lines that a peer or a client can cause at will.
#[derive(Debug)]
pub struct QuietLogs {
    /// A tunnel request refused (unknown caller, not admitted, forbidden, ...).
    pub tunnel_requests: LogBudget,
    /// A tunnel handshake refused or timed out (TLS, QUIC).
    pub tunnel_handshakes: LogBudget,
    /// A local client's connection refused (CONNECT, ClusterSetIP, import port).
    pub local_connections: LogBudget,
}

impl Default for QuietLogs {
    fn default() -> Self {
        let budget = |what| LogBudget::new(what, DEFAULT_BURST, DEFAULT_INTERVAL);
        Self {
            tunnel_requests: budget("tunnel request refusals"),
            tunnel_handshakes: budget("tunnel handshake refusals"),
            local_connections: budget("local connection refusals"),
        }
    }
}

impl QuietLogs {
    /// Writes the summaries of intervals that ended: run every
    /// [`DEFAULT_INTERVAL`], so that an attack's last interval is reported
    /// even when nothing follows it.
    pub fn flush(&self) {
        let now = Instant::now();
        for budget in [
            &self.tunnel_requests,
            &self.tunnel_handshakes,
            &self.local_connections,
        ] {
            if let Some(summary) = budget.flush(now) {
                budget.report(&summary);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flood_logs_its_burst_then_one_summary_per_interval() {
        let budget = LogBudget::new("test lines", 3, Duration::from_secs(10));
        let start = Instant::now();
        let mut logged = 0;
        for i in 0..10_000u32 {
            let reason = if i % 2 == 0 {
                "forbidden"
            } else {
                "not_admitted"
            };
            let admitted = budget.admit(reason, start + Duration::from_micros(u64::from(i)));
            assert_eq!(admitted.summary, None);
            logged += u32::from(admitted.log);
        }
        assert_eq!(logged, 3);
        // Within the interval nothing is flushed yet.
        assert_eq!(budget.flush(start + Duration::from_secs(5)), None);
        let summary = budget
            .flush(start + Duration::from_secs(10))
            .expect("a summary once the interval is over");
        assert_eq!(summary.total, 9_997);
        assert_eq!(summary.reasons(), "forbidden=4998 not_admitted=4999");
        // The next interval starts with a fresh burst and nothing to report.
        let admitted = budget.admit("forbidden", start + Duration::from_secs(11));
        assert_eq!(
            admitted,
            Admitted {
                log: true,
                summary: None
            }
        );
    }

    #[test]
    fn the_next_event_after_a_quiet_interval_carries_the_summary() {
        let budget = LogBudget::new("test lines", 1, Duration::from_secs(1));
        let start = Instant::now();
        assert!(budget.admit("forbidden", start).log);
        assert!(!budget.admit("forbidden", start).log);
        let admitted = budget.admit("malformed", start + Duration::from_secs(2));
        assert!(admitted.log);
        let summary = admitted.summary.expect("the last interval's summary");
        assert_eq!(summary.total, 1);
        assert_eq!(summary.reasons(), "forbidden=1");
        assert_eq!(budget.flush(start + Duration::from_secs(4)), None);
    }
}
