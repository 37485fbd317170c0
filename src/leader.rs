//! Leader election on a `coordination.k8s.io/v1` Lease, as client-go does it: every replica watches and decides,
//! only the holder writes. Updates carry the resourceVersion they read, so two replicas can never both win.
//!
//! Expiry is judged by this replica's clock from when it last saw the Lease change, never by the holder's
//! timestamps, so clock skew between nodes does not matter. A follower also watches the Lease: when the leader
//! releases it on shutdown the follower takes over at once instead of waiting out the lease duration.
//! (kube-lease-manager, the usual crate, sleeps until expiry and so cannot take over at once.)
//!
//! Timing, as client-go promises it, with lease duration D (default 15 s): the holder renews every D/5; every Lease
//! request is abandoned when it has not answered by the renew deadline (2D/3 after the last renewal) or D/5, which
//! comes first; a holder that has not renewed by the renew deadline stops writing at once and /healthz fails, so it
//! has stopped D/3 before any other replica may take the Lease. A frozen connection therefore cannot keep a stale
//! leader writing.

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use std::sync::Arc;

use tokio::sync::watch;
use tokio::time::Instant;
use tracing::{error, info, warn};

use crate::backoff;
use crate::health::Health;
use crate::metrics::Metrics;

#[derive(Clone, Debug)]
pub struct LeaseSettings {
    pub namespace: String,
    pub name: String,
    pub identity: String,
    pub duration: Duration,
}

impl LeaseSettings {
    /// The holder renews this often; a renewal that keeps failing for `renew_deadline` means stepping down
    /// before anyone else may take over.
    fn retry_period(&self) -> Duration {
        (self.duration / 5).max(Duration::from_millis(500))
    }

    fn renew_deadline(&self) -> Duration {
        self.duration * 2 / 3
    }
}

/// What this replica last saw of the Lease.
struct LastSeen {
    resource_version: String,
    holder: Option<String>,
    duration: Duration,
    seen_at: Instant,
}

pub struct Elector {
    api: Api<Lease>,
    settings: LeaseSettings,
    leading: watch::Sender<bool>,
    metrics: Metrics,
    health: Arc<Health>,
}

/// Another process holds the Lease under this replica's identity.
#[derive(Debug, thiserror::Error)]
#[error(
    "another process renews Lease {lease} as {identity:?}: leader election needs a unique --leader-elect-identity \
     (the default, the pod name with a random suffix, is)"
)]
pub struct DuplicateIdentity {
    pub lease: String,
    pub identity: String,
}

impl Elector {
    pub fn new(
        client: Client,
        settings: LeaseSettings,
        metrics: Metrics,
        health: Arc<Health>,
    ) -> (Self, watch::Receiver<bool>) {
        let (leading, receiver) = watch::channel(false);
        metrics.leading(false);
        let api = Api::namespaced(client, &settings.namespace);
        (Self { api, settings, leading, metrics, health }, receiver)
    }

    /// Refuses an identity another live process uses: if the Lease names us, it must not be renewed by someone
    /// else while we watch it for two renewal periods (a crashed earlier run of ours renews nothing).
    pub async fn check_identity(&self) -> Result<(), DuplicateIdentity> {
        let duplicate =
            || DuplicateIdentity { lease: self.settings.name.clone(), identity: self.settings.identity.clone() };
        let read = || async {
            // An API server that does not answer must not hold up the start: no answer counts as no duplicate.
            let request = tokio::time::timeout(self.settings.retry_period(), self.api.get_opt(&self.settings.name));
            let lease = request.await.ok()?.ok().flatten()?;
            let ours = lease.spec.as_ref()?.holder_identity.as_deref() == Some(self.settings.identity.as_str());
            ours.then(|| lease.resource_version().unwrap_or_default())
        };
        let Some(first) = read().await else { return Ok(()) };
        tokio::time::sleep(self.settings.retry_period() * 2).await;
        match read().await {
            Some(now) if now != first => Err(duplicate()),
            _ => Ok(()),
        }
    }

    /// Campaigns and renews until `shutdown`, then releases the Lease if held.
    pub async fn run(self, shutdown: impl Future<Output = ()>) {
        futures::pin_mut!(shutdown);
        let config = watcher::Config::default().fields(&crate::watching::name_selector(&self.settings.name));
        let changes =
            watcher(self.api.clone(), config).backoff(backoff::exponential(backoff::WATCH_CAP)).touched_objects();
        futures::pin_mut!(changes);
        let mut observed: Option<LastSeen> = None;
        let mut last_renewal: Option<Instant> = None;
        loop {
            // While leading, nothing may wait past the renew deadline: not a request, not the pause between them.
            let deadline = last_renewal.map(|at| at + self.settings.renew_deadline());
            let budget = |limit: Duration| match deadline {
                Some(deadline) => limit.min(deadline.saturating_duration_since(Instant::now())),
                None => limit,
            };
            let request = budget(self.settings.retry_period()).max(Duration::from_millis(1));
            let outcome = match tokio::time::timeout(request, self.step(&mut observed)).await {
                Ok(Ok(holds)) => Ok(holds),
                Ok(Err(error)) => Err(error.to_string()),
                Err(_) => Err(format!("no answer within {request:?}")),
            };
            let wait = match outcome {
                Ok(true) => {
                    last_renewal = Some(Instant::now());
                    self.health.set_lease_overdue(false);
                    self.set_leading(true);
                    self.settings.retry_period()
                }
                Ok(false) => {
                    last_renewal = None;
                    self.health.set_lease_overdue(false);
                    self.set_leading(false);
                    self.time_to_expiry(observed.as_ref())
                }
                Err(reason) => {
                    warn!(lease = %self.settings.name, %reason, "leader election: could not read or update the Lease");
                    if deadline.is_some_and(|deadline| Instant::now() >= deadline) {
                        error!(lease = %self.settings.name, "could not renew the Lease by the renew deadline; stepping down");
                        self.health.set_lease_overdue(true);
                        last_renewal = None;
                    }
                    if last_renewal.is_none() {
                        self.set_leading(false);
                    }
                    budget(self.settings.retry_period())
                }
            };
            tokio::select! {
                () = &mut shutdown => break,
                () = tokio::time::sleep(wait) => {}
                // A follower re-checks as soon as the Lease changes (a release, most usefully).
                _ = changes.next(), if !*self.leading.borrow() => {}
            }
        }
        if *self.leading.borrow() {
            self.set_leading(false);
            self.release(observed.as_ref()).await;
        }
    }

    fn set_leading(&self, leading: bool) {
        if *self.leading.borrow() != leading {
            info!(identity = %self.settings.identity, lease = %self.settings.name, leading, "leadership changed");
        }
        self.metrics.leading(leading);
        self.leading.send_replace(leading);
    }

    fn time_to_expiry(&self, observed: Option<&LastSeen>) -> Duration {
        let Some(observed) = observed else { return self.settings.retry_period() };
        let expires = observed.seen_at + observed.duration;
        expires.saturating_duration_since(Instant::now()).max(Duration::from_millis(100))
    }

    /// Acquires, renews or observes the Lease once. `Ok(true)` when this replica holds it afterwards.
    async fn step(&self, observed: &mut Option<LastSeen>) -> Result<bool, kube::Error> {
        let now = Instant::now();
        let Some(lease) = self.api.get_opt(&self.settings.name).await? else {
            return self.create().await;
        };
        let spec = lease.spec.clone().unwrap_or_default();
        let resource_version = lease.resource_version().unwrap_or_default();
        let holder = spec.holder_identity.clone().filter(|h| !h.is_empty());
        if observed.as_ref().is_none_or(|o| o.resource_version != resource_version) {
            let duration = self.trusted_duration(spec.lease_duration_seconds, holder.as_deref());
            *observed = Some(LastSeen { resource_version, holder: holder.clone(), duration, seen_at: now });
        }
        let held_by_us = holder.as_deref() == Some(self.settings.identity.as_str());
        let expired = observed.as_ref().is_some_and(|o| o.holder.is_none() || now >= o.seen_at + o.duration);
        if !held_by_us && !expired {
            return Ok(false);
        }
        let mut updated = lease;
        let mut next = spec;
        let stamp = Some(MicroTime(Timestamp::now()));
        if !held_by_us {
            next.lease_transitions = Some(next.lease_transitions.unwrap_or(0) + 1);
            next.acquire_time = stamp.clone();
        }
        next.holder_identity = Some(self.settings.identity.clone());
        next.lease_duration_seconds = Some(self.settings.duration.as_secs().max(1) as i32);
        next.renew_time = stamp;
        updated.spec = Some(next);
        updated.metadata.managed_fields = None;
        match self.api.replace(&self.settings.name, &PostParams::default(), &updated).await {
            Ok(_) => Ok(true),
            // Someone else updated it first; look again on the next step.
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(false),
            Err(error) => Err(error),
        }
    }

    /// How long the holder's claim is honoured: what it says, but never longer than this replica's own duration,
    /// so a Lease forged with a huge duration cannot keep every replica from taking over.
    fn trusted_duration(&self, claimed_seconds: Option<i32>, holder: Option<&str>) -> Duration {
        let own = self.settings.duration;
        let Some(seconds) = claimed_seconds else { return own };
        let claimed = Duration::from_secs(u64::try_from(seconds.max(1)).unwrap_or(1));
        if claimed > own {
            self.metrics.lease_capped();
            warn!(
                lease = %self.settings.name,
                holder = holder.unwrap_or_default(),
                claimed_seconds = seconds,
                honoured_seconds = own.as_secs(),
                "the Lease claims a longer duration than this replica's; it is honoured for this replica's only"
            );
        }
        claimed.min(own)
    }

    async fn create(&self) -> Result<bool, kube::Error> {
        let mut lease = Lease::default();
        lease.metadata.name = Some(self.settings.name.clone());
        let stamp = Some(MicroTime(Timestamp::now()));
        lease.spec = Some(LeaseSpec {
            holder_identity: Some(self.settings.identity.clone()),
            lease_duration_seconds: Some(self.settings.duration.as_secs().max(1) as i32),
            acquire_time: stamp.clone(),
            renew_time: stamp,
            lease_transitions: Some(0),
            ..LeaseSpec::default()
        });
        match self.api.create(&PostParams::default(), &lease).await {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(false),
            Err(error) => Err(error),
        }
    }

    /// Clears the holder so a follower takes over at once.
    async fn release(&self, observed: Option<&LastSeen>) {
        let Ok(Some(mut lease)) = self.api.get_opt(&self.settings.name).await else { return };
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        if spec.holder_identity.as_deref() != Some(self.settings.identity.as_str()) {
            return;
        }
        spec.holder_identity = None;
        spec.acquire_time = None;
        spec.renew_time = None;
        lease.metadata.managed_fields = None;
        match self.api.replace(&self.settings.name, &PostParams::default(), &lease).await {
            Ok(_) => info!(lease = %self.settings.name, "released the leader Lease"),
            Err(error) => {
                warn!(lease = %self.settings.name, %error, seen = observed.is_some(), "could not release the Lease; it expires on its own")
            }
        }
    }
}
