//! Slots held by clients that have not earned a connection of their own
//! yet, or whose cost is by the connection rather than by the request: DNS
//! over TCP clients, and tunnel handshakes not yet complete. A source
//! address may hold a few; when every slot is taken, the client idle the
//! longest (for a handshake: the oldest, it is never touched) is closed
//! for the newcomer rather than the newcomer refused. One address opening
//! connections and keeping them quiet cannot lock every other client out:
//! its own oldest connections are the ones closed. RFC 7766 §6.2.2 leaves
//! the choice to a DNS server; a TLS server has the same choice.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio_util::sync::CancellationToken;

/// One client: where from, when it last asked, and how to close it.
#[derive(Debug)]
pub struct Client {
    source: IpAddr,
    /// Milliseconds since the table's epoch.
    last_active: AtomicU64,
    close: CancellationToken,
}

impl Client {
    /// Resolves when the client is closed to make room for another.
    pub async fn evicted(&self) {
        self.close.cancelled().await;
    }
}

/// What a source at its cap gets for a new client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AtSourceCap {
    /// Nothing: the newcomer is refused (a handshake: the source's pending
    /// ones are its own to finish).
    Refuse,
    /// The source's own idlest client is closed for it (DNS over TCP: the
    /// responder's main clients, CoreDNS pods, are few sources, and one
    /// that left idle connections behind must still be answered).
    EvictOwnIdlest,
}

/// A listener's slots.
#[derive(Debug)]
pub struct Slots {
    capacity: usize,
    per_source: usize,
    at_source_cap: AtSourceCap,
    epoch: Instant,
    next_id: AtomicU64,
    clients: Mutex<HashMap<u64, Arc<Client>>>,
}

/// One admitted client's slot, given back when dropped.
#[derive(Debug)]
pub struct Slot {
    slots: Arc<Slots>,
    id: u64,
    client: Arc<Client>,
}

impl Slot {
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Marks the client as active now (it asked a question).
    pub fn touch(&self) {
        self.client
            .last_active
            .store(self.slots.now_ms(), Ordering::Relaxed);
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut clients = self.slots.clients.lock().unwrap_or_else(|e| e.into_inner());
        clients.remove(&self.id);
    }
}

impl Slots {
    /// `capacity` slots in all, at most `per_source` for one address; a
    /// source at its cap is refused.
    pub fn new(capacity: usize, per_source: usize) -> Arc<Self> {
        Self::with(capacity, per_source, AtSourceCap::Refuse)
    }

    /// As [`Slots::new`], with what a source at its cap gets.
    pub fn with(capacity: usize, per_source: usize, at_source_cap: AtSourceCap) -> Arc<Self> {
        Arc::new(Self {
            capacity: capacity.max(1),
            per_source: per_source.max(1),
            at_source_cap,
            epoch: Instant::now(),
            next_id: AtomicU64::new(0),
            clients: Mutex::new(HashMap::new()),
        })
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// A slot for a client of `source`. When that source holds its cap,
    /// `None`, or (`AtSourceCap::EvictOwnIdlest`) its own idlest client is
    /// closed for it. When every slot is taken, the idlest client is
    /// closed for it.
    pub fn admit(self: &Arc<Self>, source: IpAddr) -> Option<Slot> {
        let source = source.to_canonical();
        let mut clients = self.clients.lock().unwrap_or_else(|e| e.into_inner());
        // Among the equally idle, the oldest connection.
        let idlest = |clients: &HashMap<u64, Arc<Client>>, of: Option<IpAddr>| {
            clients
                .iter()
                .filter(|(_, c)| of.is_none_or(|of| c.source == of))
                .min_by_key(|(id, c)| (c.last_active.load(Ordering::Relaxed), **id))
                .map(|(id, _)| *id)
        };
        let of_source = clients.values().filter(|c| c.source == source).count();
        if of_source >= self.per_source {
            if self.at_source_cap == AtSourceCap::Refuse {
                return None;
            }
            if let Some(client) = idlest(&clients, Some(source)).and_then(|id| clients.remove(&id))
            {
                client.close.cancel();
            }
        }
        if clients.len() >= self.capacity
            && let Some(client) = idlest(&clients, None).and_then(|id| clients.remove(&id))
        {
            client.close.cancel();
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let client = Arc::new(Client {
            source,
            last_active: AtomicU64::new(self.now_ms()),
            close: CancellationToken::new(),
        });
        clients.insert(id, client.clone());
        Some(Slot {
            slots: self.clone(),
            id,
            client,
        })
    }

    /// Clients holding a slot.
    pub fn held(&self) -> usize {
        self.clients.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([10, 0, 1, last])
    }

    #[test]
    fn a_source_holds_at_most_its_cap() {
        let slots = Slots::new(100, 32);
        let held: Vec<Slot> = (0..32)
            .map(|_| slots.admit(ip(1)).expect("admitted"))
            .collect();
        assert!(slots.admit(ip(1)).is_none());
        assert!(slots.admit(ip(2)).is_some(), "another source is admitted");
        drop(held);
        assert!(slots.admit(ip(1)).is_some(), "slots come back");
    }

    #[test]
    fn when_full_the_idlest_client_is_closed_for_the_newcomer() {
        let slots = Slots::new(3, 32);
        let first = slots.admit(ip(1)).expect("admitted");
        std::thread::sleep(std::time::Duration::from_millis(5));
        let second = slots.admit(ip(2)).expect("admitted");
        let third = slots.admit(ip(3)).expect("admitted");
        std::thread::sleep(std::time::Duration::from_millis(5));
        // The first asks again: the second is now the idlest.
        first.touch();
        let fourth = slots.admit(ip(4)).expect("the newcomer gets a slot");
        assert!(second.client().close.is_cancelled(), "the idlest is closed");
        assert!(!first.client().close.is_cancelled());
        assert!(!third.client().close.is_cancelled());
        assert_eq!(slots.held(), 3);
        drop((first, second, third, fourth));
        assert_eq!(slots.held(), 0);
    }

    /// A DNS client at its source's cap has its own idlest connection
    /// closed for its newcomer: 300 idle connections from one address do
    /// not leave that address unanswered.
    #[test]
    fn at_its_cap_a_source_may_lose_its_own_idlest_client_instead() {
        let slots = Slots::with(100, 2, AtSourceCap::EvictOwnIdlest);
        let first = slots.admit(ip(1)).expect("admitted");
        std::thread::sleep(std::time::Duration::from_millis(5));
        let second = slots.admit(ip(1)).expect("admitted");
        let other = slots.admit(ip(2)).expect("admitted");
        second.touch();
        let third = slots.admit(ip(1)).expect("the newcomer gets a slot");
        assert!(
            first.client().close.is_cancelled(),
            "its own idlest is closed"
        );
        assert!(!second.client().close.is_cancelled());
        assert!(!other.client().close.is_cancelled(), "no other source pays");
        drop((first, second, third, other));
        let refusing = Slots::new(100, 1);
        let _held = refusing.admit(ip(1)).expect("admitted");
        assert!(refusing.admit(ip(1)).is_none(), "handshakes are refused");
    }
}
