//! A token bucket: a burst, refilled at a steady rate. Pure: the caller
//! passes the clock. Used for the tunnel's control frames and the DNS
//! responder's response rate.

use std::time::Instant;

#[derive(Debug, Clone)]
pub struct TokenBucket {
    per_second: f64,
    burst: f64,
    tokens: f64,
    refilled: Instant,
}

impl TokenBucket {
    /// A full bucket of `burst` tokens, refilled at `per_second`.
    pub fn new(per_second: u32, burst: u32, now: Instant) -> Self {
        Self {
            per_second: f64::from(per_second),
            burst: f64::from(burst),
            tokens: f64::from(burst),
            refilled: now,
        }
    }

    /// Spends `count` tokens at `now`; `false` once the bucket is empty.
    pub fn spend(&mut self, count: u64, now: Instant) -> bool {
        let elapsed = now.saturating_duration_since(self.refilled).as_secs_f64();
        self.refilled = now;
        self.tokens = (self.tokens + elapsed * self.per_second).min(self.burst);
        // Counts are small (frames since the last sample), so the cast is exact.
        self.tokens -= count as f64;
        self.tokens >= 0.0
    }

    /// Tokens left (negative once overspent).
    pub fn tokens(&self) -> f64 {
        self.tokens
    }

    /// Reserves one token at `now` and returns how long the caller waits
    /// until it is covered: zero while the bucket holds one, else the time
    /// the rate takes to refill every reservation made before it (a queue
    /// paced at the rate, first come first served).
    pub fn reserve(&mut self, now: Instant) -> std::time::Duration {
        self.reserve_many(1, now)
    }

    /// As [`TokenBucket::reserve`], for `count` tokens at once.
    pub fn reserve_many(&mut self, count: u64, now: Instant) -> std::time::Duration {
        self.spend(count, now);
        if self.tokens >= 0.0 || self.per_second <= 0.0 {
            return std::time::Duration::ZERO;
        }
        std::time::Duration::from_secs_f64(-self.tokens / self.per_second)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn the_bucket_refills_at_its_rate() {
        let start = Instant::now();
        let mut bucket = TokenBucket::new(10, 5, start);
        assert!(bucket.spend(5, start));
        assert!(!bucket.spend(1, start));
        // 10 per second: half a second brings back five (one already owed).
        assert!(bucket.spend(4, start + Duration::from_millis(500)));
        assert!(!bucket.spend(1, start + Duration::from_millis(500)));
        // Never more than the burst, however long the pause.
        let later = start + Duration::from_secs(3600);
        assert!(bucket.spend(5, later));
        assert!(!bucket.spend(1, later));
    }

    #[test]
    fn a_reservation_of_many_waits_for_all_of_them() {
        let start = Instant::now();
        let mut bucket = TokenBucket::new(100, 50, start);
        assert_eq!(bucket.reserve_many(50, start), Duration::ZERO);
        // 100 more at 100 a second: a second.
        assert_eq!(bucket.reserve_many(100, start), Duration::from_secs(1));
        // Queued behind them, one more: 10 ms after.
        assert_eq!(bucket.reserve_many(1, start), Duration::from_millis(1010));
    }

    #[test]
    fn reservations_queue_at_the_rate() {
        let start = Instant::now();
        let mut bucket = TokenBucket::new(10, 2, start);
        assert_eq!(bucket.reserve(start), Duration::ZERO);
        assert_eq!(bucket.reserve(start), Duration::ZERO);
        // Past the burst, each waits a tenth of a second more than the last.
        let waits: Vec<u128> = (0..3).map(|_| bucket.reserve(start).as_millis()).collect();
        assert_eq!(waits, [100, 200, 300]);
    }
}
