//! Leader election on a `coordination.k8s.io/v1` Lease, the way client-go's
//! `leaderelection` does it with a Lease lock, so that one replica at a time
//! writes export status.
//!
//! Every `retryPeriod` each replica reads the Lease. It creates it when it is
//! absent; it takes it when it is free (no holder) or expired; the holder
//! renews it. Every write replaces the Lease read, conditional on its
//! `resourceVersion`, so of two replicas racing for it one gets `409
//! Conflict` and stays a follower. A Lease held by another replica expires
//! when its record has not changed for `leaseDurationSeconds`, measured on
//! this replica's own clock from when it saw the record change (never by
//! comparing clocks across machines).
//!
//! A leader that cannot renew stops acting as leader `renewDeadline` after
//! its last successful renewal, before any other replica may take over
//! (`renewDeadline` < `leaseDuration`). On a graceful stop the holder frees
//! the Lease, so another replica takes over at its next attempt.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, PostParams};
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Where the Lease is and how it is held.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct LeaseSettings {
    pub(super) namespace: String,
    pub(super) name: String,
    /// This replica's holder identity.
    pub(super) identity: String,
    /// How long a Lease whose record does not change stays held.
    pub(super) duration: Duration,
    /// How long a leader keeps acting as leader after its last renewal.
    pub(super) renew_deadline: Duration,
    /// How often every replica tries to acquire or renew.
    pub(super) retry_period: Duration,
}

impl LeaseSettings {
    /// `leaseDurationSeconds`: the duration in whole seconds, at least 1.
    fn duration_seconds(&self) -> i32 {
        let seconds = self.duration.as_secs() + u64::from(self.duration.subsec_nanos() > 0);
        i32::try_from(seconds).unwrap_or(i32::MAX).max(1)
    }
}

/// Why one attempt on the Lease failed.
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    #[error("lease {namespace}/{name}: {source}")]
    Api {
        namespace: String,
        name: String,
        source: kube::Error,
    },
    #[error("lease {namespace}/{name}: no answer within {}", humantime::format_duration(*waited))]
    Timeout {
        namespace: String,
        name: String,
        waited: Duration,
    },
}

/// What one attempt found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Attempt {
    /// This replica holds the Lease, renewed just now.
    Leader,
    /// Another replica holds it (or won the race for it).
    Follower { holder: Option<String> },
}

/// The Lease record last seen and when, on this replica's clock.
#[derive(Debug, Clone)]
struct Observed {
    resource_version: Option<String>,
    spec: LeaseSpec,
    at: Instant,
}

/// Acquires and renews one Lease.
pub(super) struct Elector {
    api: Api<Lease>,
    settings: LeaseSettings,
    observed: Option<Observed>,
}

impl Elector {
    pub(super) fn new(client: Client, settings: LeaseSettings) -> Self {
        Self {
            api: Api::namespaced(client, &settings.namespace),
            settings,
            observed: None,
        }
    }

    fn error(&self, source: kube::Error) -> LeaseError {
        LeaseError::Api {
            namespace: self.settings.namespace.clone(),
            name: self.settings.name.clone(),
            source,
        }
    }

    /// Notes the record read or written; the expiry clock restarts when
    /// the record changed.
    fn observe(&mut self, lease: &Lease) {
        let spec = lease.spec.clone().unwrap_or_default();
        let resource_version = lease.metadata.resource_version.clone();
        let unchanged = self
            .observed
            .as_ref()
            .is_some_and(|o| o.resource_version == resource_version && o.spec == spec);
        if !unchanged {
            self.observed = Some(Observed {
                resource_version,
                spec,
                at: Instant::now(),
            });
        }
    }

    /// Whether the record last seen has not changed for its lease duration.
    fn observed_expired(&self) -> bool {
        self.observed.as_ref().is_none_or(|observed| {
            let seconds = observed
                .spec
                .lease_duration_seconds
                .and_then(|s| u64::try_from(s).ok())
                .map(Duration::from_secs)
                .unwrap_or(self.settings.duration);
            observed.at + seconds <= Instant::now()
        })
    }

    /// One round: read the Lease, then create, take or renew it if this
    /// replica may.
    pub(super) async fn try_acquire_or_renew(&mut self) -> Result<Attempt, LeaseError> {
        let now = MicroTime(Timestamp::now());
        let identity = self.settings.identity.clone();
        let current = self
            .api
            .get_opt(&self.settings.name)
            .await
            .map_err(|e| self.error(e))?;
        let Some(mut lease) = current else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.settings.name.clone()),
                    namespace: Some(self.settings.namespace.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(identity),
                    lease_duration_seconds: Some(self.settings.duration_seconds()),
                    acquire_time: Some(now.clone()),
                    renew_time: Some(now),
                    lease_transitions: Some(0),
                    ..LeaseSpec::default()
                }),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(created) => {
                    self.observe(&created);
                    Ok(Attempt::Leader)
                }
                // Another replica created it first.
                Err(kube::Error::Api(status))
                    if status.is_already_exists() || status.is_conflict() =>
                {
                    Ok(Attempt::Follower { holder: None })
                }
                Err(error) => Err(self.error(error)),
            };
        };
        self.observe(&lease);
        let mut spec = lease.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.clone().filter(|h| !h.is_empty());
        if holder.as_deref().is_some_and(|h| h != identity) && !self.observed_expired() {
            return Ok(Attempt::Follower { holder });
        }
        if holder.as_deref() != Some(identity.as_str()) {
            spec.acquire_time = Some(now.clone());
            spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0).saturating_add(1));
        }
        spec.holder_identity = Some(identity);
        spec.renew_time = Some(now);
        spec.lease_duration_seconds = Some(self.settings.duration_seconds());
        lease.spec = Some(spec);
        // The read's resourceVersion stays: the replace is conditional on it.
        match self
            .api
            .replace(&self.settings.name, &PostParams::default(), &lease)
            .await
        {
            Ok(replaced) => {
                self.observe(&replaced);
                Ok(Attempt::Leader)
            }
            Err(kube::Error::Api(status)) if status.is_conflict() => {
                Ok(Attempt::Follower { holder })
            }
            Err(error) => Err(self.error(error)),
        }
    }

    /// Frees the Lease if this replica holds it: no holder, a one-second
    /// duration, so that the next replica to try takes it.
    pub(super) async fn release(&mut self) -> Result<(), LeaseError> {
        let Some(mut lease) = self
            .api
            .get_opt(&self.settings.name)
            .await
            .map_err(|e| self.error(e))?
        else {
            return Ok(());
        };
        let mut spec = lease.spec.clone().unwrap_or_default();
        if spec.holder_identity.as_deref() != Some(self.settings.identity.as_str()) {
            return Ok(());
        }
        let now = MicroTime(Timestamp::now());
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(now.clone());
        spec.acquire_time = Some(now);
        lease.spec = Some(spec);
        match self
            .api
            .replace(&self.settings.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => Ok(()),
            // Someone else changed it meanwhile: it is not ours to free.
            Err(kube::Error::Api(status)) if status.is_conflict() => Ok(()),
            Err(error) => Err(self.error(error)),
        }
    }
}

/// Whether this replica is the leader now, shared between the Lease task
/// and the writer.
#[derive(Debug)]
pub(super) struct Leadership {
    /// Until when this replica may act as leader; `None` when it is not.
    valid_until: Mutex<Option<Instant>>,
    /// Changes when this replica becomes or stops being the leader.
    changes: watch::Sender<bool>,
}

impl Leadership {
    pub(super) fn new() -> Arc<Self> {
        Arc::new(Self {
            valid_until: Mutex::new(None),
            changes: watch::channel(false).0,
        })
    }

    /// This replica may act as leader at this instant.
    pub(super) fn is_leader(&self) -> bool {
        self.valid_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_some_and(|until| Instant::now() < until)
    }

    /// Wakes on every change of leadership.
    pub(super) fn subscribe(&self) -> watch::Receiver<bool> {
        self.changes.subscribe()
    }

    fn set(&self, until: Option<Instant>) {
        *self
            .valid_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = until;
        let leader = until.is_some();
        self.changes.send_if_modified(|current| {
            let changed = *current != leader;
            *current = leader;
            changed
        });
    }
}

/// Runs the election until `stop`, then frees the Lease if held. `leader`
/// hears every change of this replica's leadership.
pub(super) async fn run(
    mut elector: Elector,
    leadership: Arc<Leadership>,
    leader: impl Fn(bool),
    stop: CancellationToken,
) {
    let settings = elector.settings.clone();
    let mut was_leader = false;
    loop {
        let started = Instant::now();
        let attempt = tokio::select! {
            attempt = tokio::time::timeout(settings.renew_deadline, elector.try_acquire_or_renew()) => {
                attempt.unwrap_or_else(|_| Err(LeaseError::Timeout {
                    namespace: settings.namespace.clone(),
                    name: settings.name.clone(),
                    waited: settings.renew_deadline,
                }))
            }
            () = stop.cancelled() => break,
        };
        match attempt {
            Ok(Attempt::Leader) => leadership.set(Some(started + settings.renew_deadline)),
            Ok(Attempt::Follower { holder }) => {
                if was_leader {
                    tracing::warn!(lease = %settings.name, holder = holder.as_deref().unwrap_or(""),
                        "export status lease taken by another replica");
                }
                leadership.set(None);
            }
            Err(error) => {
                // A leader failing to renew matters; a follower failing to
                // read the Lease does not (the watchers report API trouble).
                if was_leader {
                    tracing::warn!(%error, "export status lease not renewed");
                } else {
                    tracing::debug!(%error, "export status lease not read");
                }
                if !leadership.is_leader() {
                    leadership.set(None);
                }
            }
        }
        let is_leader = leadership.is_leader();
        if is_leader != was_leader {
            if is_leader {
                tracing::info!(lease = %settings.name, identity = %settings.identity,
                    "this replica now writes export status (lease acquired)");
            } else {
                tracing::info!(lease = %settings.name, identity = %settings.identity,
                    "this replica no longer writes export status");
            }
            was_leader = is_leader;
            leader(is_leader);
        }
        // A little jitter, so that followers do not try in step.
        let pause = settings
            .retry_period
            .mul_f64(1.0 + fastrand::f64() * if is_leader { 0.0 } else { 0.2 });
        tokio::select! {
            () = tokio::time::sleep(pause) => {}
            () = stop.cancelled() => break,
        }
    }
    leadership.set(None);
    if was_leader {
        leader(false);
        tracing::info!(lease = %settings.name, identity = %settings.identity,
            "this replica no longer writes export status (stopping)");
        match tokio::time::timeout(settings.renew_deadline, elector.release()).await {
            Ok(Ok(())) => tracing::info!(lease = %settings.name, "export status lease released"),
            Ok(Err(error)) => tracing::warn!(%error, "export status lease not released"),
            Err(_) => {
                tracing::warn!(lease = %settings.name, "export status lease not released: no answer in time")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_duration_is_written_in_whole_seconds_rounded_up() {
        let settings = |duration| LeaseSettings {
            namespace: "ns".to_owned(),
            name: "lease".to_owned(),
            identity: "me".to_owned(),
            duration,
            renew_deadline: Duration::from_secs(1),
            retry_period: Duration::from_secs(1),
        };
        assert_eq!(settings(Duration::from_secs(15)).duration_seconds(), 15);
        assert_eq!(settings(Duration::from_millis(1500)).duration_seconds(), 2);
        assert_eq!(settings(Duration::from_millis(10)).duration_seconds(), 1);
        assert_eq!(settings(Duration::ZERO).duration_seconds(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn leadership_lapses_at_its_deadline() {
        let leadership = Leadership::new();
        let mut changes = leadership.subscribe();
        assert!(!leadership.is_leader());
        leadership.set(Some(Instant::now() + Duration::from_secs(10)));
        assert!(leadership.is_leader());
        assert!(changes.has_changed().unwrap_or(false));
        changes.mark_unchanged();
        // Renewing does not wake the writer.
        leadership.set(Some(Instant::now() + Duration::from_secs(20)));
        assert!(!changes.has_changed().unwrap_or(true));
        tokio::time::advance(Duration::from_secs(21)).await;
        assert!(!leadership.is_leader(), "not renewed in time");
        leadership.set(None);
        assert!(changes.has_changed().unwrap_or(false));
    }
}
