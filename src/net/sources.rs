//! What one listener holds per source address: a cap on each source's open
//! connections and on the listener's, so that one pod (or one address on
//! the internet, before it has authenticated) cannot take every slot.
//!
//! Past the listener's cap, the refusal is fair: a new connection is
//! refused when its source already holds at least the average share of the
//! listener's connections, while a source holding less is still let in, up
//! to a hard ceiling an eighth above the cap. The heaviest sources are
//! refused first, and a light client gets through a flood. The decision is
//! pure ([`decide`]); [`SourceTable`] keeps the counts.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

/// The network prefix a source belongs to: an IPv4 /24 or an IPv6 /56
/// (about one node's pod range), as an address.
pub fn prefix_of(source: IpAddr) -> IpAddr {
    match source.to_canonical() {
        IpAddr::V4(v4) => IpAddr::V4((u32::from(v4) & !0xff).into()),
        IpAddr::V6(v6) => IpAddr::V6((u128::from(v6) & !((1_u128 << 72) - 1)).into()),
    }
}

/// The caps of one listener.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SourceLimits {
    /// Open connections of one source address.
    pub per_source: u32,
    /// Open connections of the listener, before only light sources get in.
    pub total: u32,
}

/// Why a connection was refused at accept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SourceRefusal {
    /// The source holds its cap.
    PerSource,
    /// The listener holds its cap and the source its share of it, or the
    /// listener is at the hard ceiling.
    Total,
    /// The same, at the listener's share of the process's descriptors.
    Share,
}

/// Whether a new connection of a source holding `held` is admitted to a
/// listener holding `total` connections of `sources` distinct sources.
pub fn decide(
    held: u32,
    total: u32,
    sources: usize,
    limits: SourceLimits,
) -> Result<(), SourceRefusal> {
    if held >= limits.per_source {
        return Err(SourceRefusal::PerSource);
    }
    let ceiling = limits.total.saturating_add(limits.total / 8);
    if total >= ceiling {
        return Err(SourceRefusal::Total);
    }
    if total >= limits.total {
        // The average share of the sources holding connections now.
        let share = u64::from(total) / u64::try_from(sources.max(1)).unwrap_or(1);
        if u64::from(held) >= share.max(1) {
            return Err(SourceRefusal::Total);
        }
    }
    Ok(())
}

#[derive(Debug, Default)]
struct Counts {
    by_source: HashMap<IpAddr, u32>,
    total: u32,
}

/// One listener's connections by source address.
#[derive(Debug)]
pub struct SourceTable {
    limits: SourceLimits,
    counts: Mutex<Counts>,
}

/// One admitted connection's place in its listener's table, given back
/// when dropped.
#[derive(Debug)]
pub struct SourceSlot {
    table: Arc<SourceTable>,
    source: IpAddr,
}

impl SourceTable {
    pub fn new(limits: SourceLimits) -> Arc<Self> {
        Arc::new(Self {
            limits,
            counts: Mutex::new(Counts::default()),
        })
    }

    /// Admits a connection of `source`, or says why not. `descriptor_share`
    /// is the most descriptors this listener may hold
    /// ([`super::overload::Overload::listener_share`]): where it is below
    /// the listener's cap, it is the cap, with the same fair refusal.
    pub fn admit(
        self: &Arc<Self>,
        source: IpAddr,
        descriptor_share: u64,
    ) -> Result<SourceSlot, SourceRefusal> {
        // `::ffff:10.1.2.3` is the same client as `10.1.2.3`.
        let source = source.to_canonical();
        let mut counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        let held = counts.by_source.get(&source).copied().unwrap_or(0);
        let share = u32::try_from(descriptor_share).unwrap_or(u32::MAX);
        let limits = if share < self.limits.total {
            SourceLimits {
                total: share,
                ..self.limits
            }
        } else {
            self.limits
        };
        decide(held, counts.total, counts.by_source.len(), limits).map_err(
            |refusal| match refusal {
                SourceRefusal::Total if share < self.limits.total => SourceRefusal::Share,
                other => other,
            },
        )?;
        *counts.by_source.entry(source).or_insert(0) += 1;
        counts.total += 1;
        Ok(SourceSlot {
            table: self.clone(),
            source,
        })
    }

    /// Open connections: the listener's, and `source`'s.
    #[cfg(test)]
    fn held(&self, source: IpAddr) -> (u32, u32) {
        let counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        let of_source = counts
            .by_source
            .get(&source.to_canonical())
            .copied()
            .unwrap_or(0);
        (counts.total, of_source)
    }
}

impl Drop for SourceSlot {
    fn drop(&mut self) {
        let mut counts = self.table.counts.lock().unwrap_or_else(|e| e.into_inner());
        counts.total = counts.total.saturating_sub(1);
        if let Some(held) = counts.by_source.get_mut(&self.source) {
            *held -= 1;
            if *held == 0 {
                counts.by_source.remove(&self.source);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: SourceLimits = SourceLimits {
        per_source: 4,
        total: 8,
    };

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([10, 0, 0, last])
    }

    #[test]
    fn a_source_stops_at_its_cap_and_others_go_on() {
        let table = SourceTable::new(LIMITS);
        let held: Vec<SourceSlot> = (0..4)
            .map(|_| table.admit(ip(1), u64::MAX).expect("admitted"))
            .collect();
        assert_eq!(
            table.admit(ip(1), u64::MAX).err(),
            Some(SourceRefusal::PerSource)
        );
        let other = table
            .admit(ip(2), u64::MAX)
            .expect("another source is admitted");
        drop(held);
        assert!(
            table.admit(ip(1), u64::MAX).is_ok(),
            "slots come back when dropped"
        );
        drop(other);
    }

    #[test]
    fn past_the_total_the_heaviest_sources_are_refused_and_light_ones_admitted() {
        let table = SourceTable::new(LIMITS);
        let mut held = Vec::new();
        for source in [1, 1, 1, 1, 2, 2, 2, 3] {
            held.push(table.admit(ip(source), u64::MAX).expect("under the total"));
        }
        // 8 held by 3 sources: the share is 2. Sources 1 and 2 are over it.
        assert_eq!(
            table.admit(ip(2), u64::MAX).err(),
            Some(SourceRefusal::Total)
        );
        assert_eq!(
            table.admit(ip(1), u64::MAX).err(),
            Some(SourceRefusal::PerSource)
        );
        // A new source (none held) still gets in, up to the ceiling of 9.
        held.push(table.admit(ip(4), u64::MAX).expect("a new source"));
        assert_eq!(table.held(ip(4)), (9, 1));
        assert_eq!(
            table.admit(ip(3), u64::MAX).err(),
            Some(SourceRefusal::Total)
        );
    }

    #[test]
    fn nobody_passes_the_hard_ceiling() {
        let table = SourceTable::new(SourceLimits {
            per_source: 100,
            total: 8,
        });
        // Nine sources of one connection each: the ceiling is 8 + 1.
        let held: Vec<SourceSlot> = (1..=9)
            .map(|n| table.admit(ip(n), u64::MAX).expect("admitted"))
            .collect();
        assert_eq!(
            table.admit(ip(10), u64::MAX).err(),
            Some(SourceRefusal::Total)
        );
        assert_eq!(held.len(), 9);
    }

    #[test]
    fn a_descriptor_share_below_the_cap_is_the_cap_and_says_so() {
        let table = SourceTable::new(LIMITS);
        // A share of 2: past it the heaviest source is refused, a new one
        // still gets in up to the ceiling (2 + 2/8 = 2).
        let _first = table.admit(ip(1), 2).expect("under the share");
        let _second = table.admit(ip(2), 2).expect("under the share");
        assert_eq!(table.admit(ip(3), 2).err(), Some(SourceRefusal::Share));
        assert!(table.admit(ip(3), u64::MAX).is_ok(), "the share moved up");
    }

    #[test]
    fn a_mapped_address_is_the_same_source() {
        let table = SourceTable::new(LIMITS);
        let mapped: IpAddr = "::ffff:10.0.0.1".parse().expect("an address");
        let _held: Vec<SourceSlot> = (0..2)
            .flat_map(|_| [table.admit(ip(1), u64::MAX), table.admit(mapped, u64::MAX)])
            .map(|slot| slot.expect("admitted"))
            .collect();
        assert_eq!(
            table.admit(mapped, u64::MAX).err(),
            Some(SourceRefusal::PerSource)
        );
    }

    #[test]
    fn a_prefix_is_an_ipv4_24_or_an_ipv6_56() {
        let prefix = |ip: &str| prefix_of(ip.parse().expect("ip")).to_string();
        assert_eq!(prefix("10.1.2.3"), "10.1.2.0");
        assert_eq!(prefix("::ffff:10.1.2.3"), "10.1.2.0");
        assert_eq!(prefix("fd00:1:2:3:4::5"), "fd00:1:2::");
        assert_eq!(prefix("fd00:1:2:3ff::1"), "fd00:1:2:300::");
    }
}
