//! What one peer may cost the tunnel server. Before it has authenticated:
//! handshakes in flight, in total and per source address
//! ([`HandshakeLimits`], held in [`crate::net::slots`]), and QUIC address
//! validation. After: concurrent streams and pending backend dials per
//! caller cluster, counted over all of its connections and both transports. A permit is held while the work lasts and given
//! back when dropped, so a stream that ends in any way (served, refused,
//! reset by the peer) frees its slot. Over a cap the request is refused
//! before any socket is opened.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::model::ClusterId;

/// The caps, from `tunnel:` in `gateway.yaml`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerLimits {
    /// Streams one caller cluster may have open at once (being dialled or spliced).
    pub max_streams: usize,
    /// Backend dials one caller cluster may have in flight at once.
    pub max_pending_dials: usize,
    /// Bytes one caller cluster's streams may hold at once
    /// ([`crate::net::memory`]); `None`: half of the memory budget.
    pub max_buffered: Option<u64>,
}

impl Default for PeerLimits {
    fn default() -> Self {
        Self {
            max_streams: 16_384,
            max_pending_dials: 256,
            max_buffered: None,
        }
    }
}

/// What an unauthenticated client may hold: a pending TLS handshake holds
/// a descriptor and up to ~80 KB of TLS buffers until it completes or
/// times out, a QUIC handshake its connection state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HandshakeLimits {
    /// Handshakes in flight on one transport; past it the oldest is shed
    /// for the newcomer (`tunnel.maxHandshakes`).
    pub max: usize,
    /// Handshakes in flight from one source address; past it the newcomer
    /// is refused (`tunnel.maxHandshakesPerSource`).
    pub per_source: usize,
    /// When a QUIC client must prove its address with a Retry first.
    pub quic_retry: QuicRetry,
}

impl Default for HandshakeLimits {
    fn default() -> Self {
        Self {
            max: 256,
            per_source: 16,
            quic_retry: QuicRetry::Auto,
        }
    }
}

impl HandshakeLimits {
    /// Whether a QUIC client whose address is not validated yet is sent a
    /// Retry, with `pending` handshakes in flight. `auto` validates once a
    /// sixteenth of the cap is pending: an idle gateway answers at once (a
    /// Retry costs a round trip), a flooded one keeps no state for a
    /// source until it answers the Retry from that address, and sends a
    /// Retry smaller than the Initial it answers.
    pub fn quic_retry_wanted(&self, pending: usize) -> bool {
        match self.quic_retry {
            QuicRetry::Always => true,
            QuicRetry::Auto => pending >= (self.max / 16).max(1),
        }
    }
}

/// `tunnel.quicRetry`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum QuicRetry {
    /// A Retry once handshakes pile up.
    #[default]
    Auto,
    /// A Retry for every new client.
    Always,
}

/// Which cap a request went over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum OverLimit {
    #[error("the caller has {0} streams open, its limit (tunnel.maxStreamsPerPeer)")]
    Streams(usize),
    #[error(
        "the caller has {0} backend dials in flight, its limit (tunnel.maxPendingDialsPerPeer)"
    )]
    PendingDials(usize),
}

#[derive(Debug, Default, Clone, Copy)]
struct Usage {
    streams: usize,
    dials: usize,
    /// Bytes charged by its streams that hold bytes.
    buffered: u64,
}

impl Usage {
    fn idle(&self) -> bool {
        self.streams == 0 && self.dials == 0 && self.buffered == 0
    }
}

/// The usage of every caller cluster with work in flight.
#[derive(Debug, Default)]
pub struct PeerBudgets {
    limits: PeerLimits,
    /// `limits.max_buffered`, resolved against the memory budget.
    max_buffered: u64,
    usage: Mutex<HashMap<ClusterId, Usage>>,
}

/// One unit of a caller's budget, given back on drop.
#[derive(Debug)]
pub struct Permit {
    budgets: Arc<PeerBudgets>,
    caller: ClusterId,
    kind: Kind,
}

#[derive(Debug, Clone, Copy)]
enum Kind {
    Stream,
    Dial,
}

impl PeerBudgets {
    /// Budgets with these limits, a caller's buffered bytes capped at
    /// `limits.max_buffered`, or else at half of `memory_budget`.
    pub fn new(limits: PeerLimits, memory_budget: u64) -> Self {
        Self {
            limits,
            max_buffered: limits.max_buffered.unwrap_or(memory_budget / 2),
            usage: Mutex::new(HashMap::new()),
        }
    }

    /// The bytes one caller's streams may hold.
    pub fn max_buffered(&self) -> u64 {
        self.max_buffered
    }

    /// Charges `caller` for `bytes` its streams may hold; refused (nothing
    /// charged) when they do not fit in the caller's budget.
    pub fn charge(&self, caller: &ClusterId, bytes: u64) -> bool {
        let mut usage = self.usage.lock().unwrap_or_else(|e| e.into_inner());
        let entry = usage.entry(caller.clone()).or_default();
        if entry.buffered.saturating_add(bytes) > self.max_buffered {
            if entry.idle() {
                usage.remove(caller);
            }
            return false;
        }
        entry.buffered += bytes;
        true
    }

    /// Gives back `bytes` charged to `caller`.
    pub fn release(&self, caller: &ClusterId, bytes: u64) {
        let mut usage = self.usage.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(entry) = usage.get_mut(caller) {
            entry.buffered = entry.buffered.saturating_sub(bytes);
            if entry.idle() {
                usage.remove(caller);
            }
        }
    }

    /// A stream slot for `caller`, or which cap it would go over.
    pub fn stream(self: &Arc<Self>, caller: &ClusterId) -> Result<Permit, OverLimit> {
        self.take(caller, Kind::Stream)
    }

    /// A pending-dial slot for `caller`, or which cap it would go over.
    pub fn dial(self: &Arc<Self>, caller: &ClusterId) -> Result<Permit, OverLimit> {
        self.take(caller, Kind::Dial)
    }

    /// Open streams and pending dials of `caller`.
    pub fn usage(&self, caller: &ClusterId) -> (usize, usize) {
        self.usage
            .lock()
            .ok()
            .and_then(|usage| usage.get(caller).map(|u| (u.streams, u.dials)))
            .unwrap_or_default()
    }

    fn take(self: &Arc<Self>, caller: &ClusterId, kind: Kind) -> Result<Permit, OverLimit> {
        // A poisoned lock means a panic while counting; refusing then
        // would stop the tunnel for good, so the recovered map is used.
        let mut usage = self.usage.lock().unwrap_or_else(|e| e.into_inner());
        let entry = usage.entry(caller.clone()).or_default();
        match kind {
            Kind::Stream if entry.streams >= self.limits.max_streams => {
                return Err(OverLimit::Streams(entry.streams));
            }
            Kind::Dial if entry.dials >= self.limits.max_pending_dials => {
                return Err(OverLimit::PendingDials(entry.dials));
            }
            Kind::Stream => entry.streams += 1,
            Kind::Dial => entry.dials += 1,
        }
        Ok(Permit {
            budgets: self.clone(),
            caller: caller.clone(),
            kind,
        })
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        let mut usage = self.budgets.usage.lock().unwrap_or_else(|e| e.into_inner());
        let Some(entry) = usage.get_mut(&self.caller) else {
            return;
        };
        match self.kind {
            Kind::Stream => entry.streams = entry.streams.saturating_sub(1),
            Kind::Dial => entry.dials = entry.dials.saturating_sub(1),
        }
        if entry.idle() {
            // Callers come and go: an idle one holds no entry.
            usage.remove(&self.caller);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster(id: &str) -> ClusterId {
        ClusterId::new(id).expect("valid test id")
    }

    #[test]
    fn each_caller_has_its_own_caps_and_permits_give_back() {
        let budgets = Arc::new(PeerBudgets::new(
            PeerLimits {
                max_streams: 2,
                max_pending_dials: 1,
                max_buffered: None,
            },
            1 << 20,
        ));
        let (c1, c2) = (cluster("c1"), cluster("c2"));
        let first = budgets.stream(&c1).expect("first stream");
        let _second = budgets.stream(&c1).expect("second stream");
        assert_eq!(budgets.stream(&c1).err(), Some(OverLimit::Streams(2)));
        // Another caller is not held back by c1.
        let _other = budgets.stream(&c2).expect("c2's own budget");
        let dial = budgets.dial(&c1).expect("a dial");
        assert_eq!(budgets.dial(&c1).err(), Some(OverLimit::PendingDials(1)));
        drop(dial);
        drop(first);
        assert_eq!(budgets.usage(&c1), (1, 0));
        let _again = budgets.stream(&c1).expect("a slot was given back");
        assert!(budgets.dial(&c1).is_ok());
    }

    #[test]
    fn quic_retry_starts_at_a_sixteenth_of_the_handshake_cap() {
        let auto = HandshakeLimits::default();
        assert!(!auto.quic_retry_wanted(0));
        assert!(!auto.quic_retry_wanted(15));
        assert!(auto.quic_retry_wanted(16));
        let small = HandshakeLimits { max: 4, ..auto };
        assert!(small.quic_retry_wanted(1), "at least one pending");
        let always = HandshakeLimits {
            quic_retry: QuicRetry::Always,
            ..auto
        };
        assert!(always.quic_retry_wanted(0));
    }

    #[test]
    fn each_caller_has_its_own_byte_budget() {
        let budgets = PeerBudgets::new(PeerLimits::default(), 200);
        assert_eq!(budgets.max_buffered(), 100, "half the memory budget");
        let (c1, c2) = (cluster("c1"), cluster("c2"));
        assert!(budgets.charge(&c1, 60));
        assert!(!budgets.charge(&c1, 60), "past c1's budget");
        assert!(budgets.charge(&c2, 60), "c2 has its own");
        budgets.release(&c1, 60);
        assert!(budgets.charge(&c1, 100));
        budgets.release(&c1, 100);
        budgets.release(&c2, 60);
        assert!(budgets.usage.lock().expect("lock").is_empty());
    }

    #[test]
    fn an_idle_caller_holds_no_entry() {
        let budgets = Arc::new(PeerBudgets::default());
        let c1 = cluster("c1");
        drop(budgets.stream(&c1).expect("stream"));
        assert!(budgets.usage.lock().expect("lock").is_empty());
    }
}
