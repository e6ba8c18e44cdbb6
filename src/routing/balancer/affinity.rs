//! ClientIP session affinity: which backend each client of one service port
//! last used, and when. The table is bounded; see [`AffinityTable::remember`].

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use super::BackendId;

/// The most clients one service port remembers.
pub const AFFINITY_CAPACITY: usize = 65_536;

/// The table size at which expired entries are first swept.
const SWEEP_MIN: usize = 1_024;

#[derive(Debug)]
struct Sticky {
    backend: BackendId,
    last_used: Instant,
}

impl Sticky {
    fn live(&self, now: Instant, timeout: Duration) -> bool {
        now.saturating_duration_since(self.last_used) < timeout
    }
}

/// Client IP → the backend it last used, for one service port.
#[derive(Debug)]
pub(super) struct AffinityTable {
    entries: HashMap<IpAddr, Sticky>,
    /// The size at which the next insert sweeps; never above `capacity`.
    sweep_at: usize,
    capacity: usize,
}

impl AffinityTable {
    pub(super) fn new(capacity: usize) -> Self {
        let capacity = capacity.max(2);
        Self {
            entries: HashMap::new(),
            sweep_at: SWEEP_MIN.min(capacity),
            capacity,
        }
    }

    pub(super) fn len(&self) -> usize {
        self.entries.len()
    }

    /// The backend `client` used less than `timeout` ago, when `usable` finds
    /// it among the candidates (returning its index); its use is refreshed.
    pub(super) fn reuse(
        &mut self,
        client: IpAddr,
        now: Instant,
        timeout: Duration,
        usable: impl FnOnce(&BackendId) -> Option<usize>,
    ) -> Option<usize> {
        let sticky = self.entries.get_mut(&client)?;
        if !sticky.live(now, timeout) {
            return None;
        }
        let index = usable(&sticky.backend)?;
        sticky.last_used = now;
        Some(index)
    }

    /// Remembers that `client` now uses `backend`.
    ///
    /// Bounded so that a scan of client addresses cannot grow memory without
    /// end: when the table reaches its sweep threshold, expired entries are
    /// dropped; if more than half the capacity is still in use, the least
    /// recently used entries are dropped down to half; the next threshold is
    /// twice what is left (at least 1024, at most the capacity). A sweep costs
    /// O(n) once per Ω(n) inserts, so O(1) amortised.
    pub(super) fn remember(
        &mut self,
        client: IpAddr,
        backend: impl FnOnce() -> BackendId,
        now: Instant,
        timeout: Duration,
    ) {
        if let Some(sticky) = self.entries.get_mut(&client) {
            *sticky = Sticky {
                backend: backend(),
                last_used: now,
            };
            return;
        }
        if self.entries.len() >= self.sweep_at {
            self.entries.retain(|_, sticky| sticky.live(now, timeout));
            let half = self.capacity / 2;
            if self.entries.len() > half {
                self.keep_newest(half);
            }
            self.sweep_at =
                (self.entries.len() * 2).clamp(SWEEP_MIN.min(self.capacity), self.capacity);
        }
        self.entries.insert(
            client,
            Sticky {
                backend: backend(),
                last_used: now,
            },
        );
    }

    /// Drops the least recently used entries until `keep` are left.
    fn keep_newest(&mut self, keep: usize) {
        let Some(drop) = self.entries.len().checked_sub(keep).filter(|n| *n > 0) else {
            return;
        };
        let mut by_use: Vec<(Instant, IpAddr)> = self
            .entries
            .iter()
            .map(|(client, sticky)| (sticky.last_used, *client))
            .collect();
        by_use.select_nth_unstable(drop - 1);
        for (_, client) in &by_use[..drop] {
            self.entries.remove(client);
        }
    }

    /// The backends some client is remembered as using.
    pub(super) fn backends(&self) -> impl Iterator<Item = &BackendId> {
        self.entries.values().map(|sticky| &sticky.backend)
    }

    /// Forgets clients whose backend is not kept.
    pub(super) fn retain(&mut self, keep: &impl Fn(&BackendId) -> bool) {
        self.entries.retain(|_, sticky| keep(&sticky.backend));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::NetworkId;

    const SECOND: Duration = Duration::from_secs(1);

    fn backend(last: u8) -> BackendId {
        BackendId {
            network: NetworkId::default_network(),
            address: (IpAddr::from([10, 0, 0, last]), 80).into(),
        }
    }

    fn client(n: u8) -> IpAddr {
        IpAddr::from([192, 168, 0, n])
    }

    /// The backend remembered for `client` at `now`, refreshing it.
    fn remembered(table: &mut AffinityTable, n: u8, now: Instant) -> Option<u8> {
        let mut found = None;
        table.reuse(client(n), now, 60 * SECOND, |id| {
            found = match id.address.ip() {
                IpAddr::V4(v4) => Some(v4.octets()[3]),
                IpAddr::V6(_) => None,
            };
            Some(0)
        });
        found
    }

    #[test]
    fn a_full_table_keeps_its_most_recently_used_half() {
        let mut table = AffinityTable::new(4);
        let t0 = Instant::now();
        for n in 1..=4 {
            table.remember(
                client(n),
                || backend(n),
                t0 + u32::from(n) * SECOND,
                60 * SECOND,
            );
        }
        assert_eq!(table.len(), 4);
        // Client 1 was used last: it survives, with client 4.
        assert_eq!(remembered(&mut table, 1, t0 + 5 * SECOND), Some(1));
        table.remember(client(5), || backend(5), t0 + 6 * SECOND, 60 * SECOND);
        assert_eq!(table.len(), 3);
        let now = t0 + 7 * SECOND;
        let left: Vec<Option<u8>> = (1..=5).map(|n| remembered(&mut table, n, now)).collect();
        assert_eq!(left, vec![Some(1), None, None, Some(4), Some(5)]);
    }

    #[test]
    fn expired_entries_are_swept_before_live_ones() {
        let mut table = AffinityTable::new(4);
        let t0 = Instant::now();
        for n in 1..=3 {
            table.remember(client(n), || backend(n), t0, 60 * SECOND);
        }
        table.remember(client(4), || backend(4), t0 + 30 * SECOND, 60 * SECOND);
        let t1 = t0 + 61 * SECOND;
        table.remember(client(5), || backend(5), t1, 60 * SECOND);
        // Clients 1–3 expired and were swept; 4 and 5 are live.
        assert_eq!(table.len(), 2);
        assert_eq!(remembered(&mut table, 4, t1), Some(4));
        assert_eq!(remembered(&mut table, 5, t1), Some(5));
    }

    #[test]
    fn remembering_a_known_client_replaces_its_backend() {
        let mut table = AffinityTable::new(4);
        let t0 = Instant::now();
        table.remember(client(1), || backend(1), t0, 60 * SECOND);
        table.remember(client(1), || backend(2), t0, 60 * SECOND);
        assert_eq!(table.len(), 1);
        assert_eq!(remembered(&mut table, 1, t0), Some(2));
        table.retain(&|id: &BackendId| id != &backend(2));
        assert_eq!(table.len(), 0);
    }
}
