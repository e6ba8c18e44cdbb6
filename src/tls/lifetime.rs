//! How long a tunnel peer's connection may live, on either side (the
//! tunnel server's accepted connections, the client pool's dialled ones).
//! A peer is authenticated
//! once, at the handshake; its connection then ends when its certificate
//! expires, when it is no longer trusted by the material in use (a
//! revocation list that names it, a CA bundle that no longer issues it),
//! or at `tunnel.maxConnectionAge` (jittered, so the connections made
//! together do not all end together). The transport then refuses new
//! streams (GOAWAY on HTTP/2, 421 on QUIC, where the client moves to a new
//! connection), lets the open ones run for at most `tunnel.closeGrace`,
//! and closes.

use std::time::{Duration, Instant, SystemTime};

use rustls_pki_types::CertificateDer;
use tokio::sync::watch;

use super::{ReloadingTls, TlsError, certificate_not_after};

/// Why a live peer connection is being ended.
#[derive(Debug, thiserror::Error)]
pub enum Retirement {
    /// The current material does not trust the peer's certificate now.
    #[error("{0}")]
    NoLongerTrusted(#[source] TlsError),
    #[error("the peer's certificate expired")]
    Expired,
    #[error("the connection reached tunnel.maxConnectionAge")]
    MaxAge,
}

impl Retirement {
    /// The reason sent to the peer and logged.
    pub fn as_str(&self) -> &'static str {
        match self {
            Retirement::NoLongerTrusted(_) => "certificate no longer trusted",
            Retirement::Expired => "certificate expired",
            Retirement::MaxAge => "maximum connection age",
        }
    }
}

/// One connection's peer certificate and the moments it must end by.
pub struct PeerLifetime {
    leaf: CertificateDer<'static>,
    expires: Instant,
    max_age: Instant,
    changes: watch::Receiver<u64>,
}

/// `max_age` less up to a tenth, at random.
fn jittered(max_age: Duration) -> Duration {
    let tenth = max_age / 10;
    max_age.saturating_sub(tenth.mul_f64(fastrand::f64()))
}

/// `after` from now, or a century when that is past what an `Instant` holds.
fn from_now(after: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(after)
        .or_else(|| now.checked_add(Duration::from_secs(100 * 365 * 86_400)))
        .unwrap_or(now)
}

impl PeerLifetime {
    /// The lifetime of a connection whose peer presented `leaf`, watching
    /// `tls` for changes from now on.
    pub fn new(leaf: CertificateDer<'static>, tls: &ReloadingTls, max_age: Duration) -> Self {
        let expires = certificate_not_after(&leaf)
            .ok()
            .map_or(Duration::ZERO, |not_after| {
                not_after
                    .duration_since(SystemTime::now())
                    .unwrap_or(Duration::ZERO)
            });
        let mut changes = tls.changes();
        changes.mark_unchanged();
        Self {
            leaf,
            expires: from_now(expires),
            max_age: from_now(jittered(max_age)),
            changes,
        }
    }

    /// Resolves when the connection must end, and why. Cancel-safe.
    pub async fn retired(&mut self, tls: &ReloadingTls) -> Retirement {
        loop {
            tokio::select! {
                () = tokio::time::sleep_until(self.expires.into()) => return Retirement::Expired,
                () = tokio::time::sleep_until(self.max_age.into()) => return Retirement::MaxAge,
                changed = self.changes.changed() => {
                    if changed.is_err() {
                        // The material can no longer change: only time ends it.
                        std::future::pending::<()>().await;
                    }
                    if let Err(error) = tls.current().still_trusts(&self.leaf) {
                        return Retirement::NoLongerTrusted(error);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_jitter_takes_at_most_a_tenth_off() {
        let hour = Duration::from_secs(3600);
        for _ in 0..1000 {
            let age = jittered(hour);
            assert!(age <= hour && age >= hour - hour / 10, "{age:?}");
        }
    }

    #[test]
    fn an_age_past_what_an_instant_holds_is_far_away_not_now() {
        assert!(from_now(Duration::MAX) > Instant::now() + Duration::from_secs(86_400));
    }
}
