//! The reconcile loop: read the watches, ask [`plan::decide`] what to do, apply it, report it. One pass per burst
//! of changes, and one more when a grace period runs out.

mod cluster;
mod events;
mod fights;
mod identities;
mod prune;
mod pull;
mod watches;
mod withdraw;
mod writer;

pub use withdraw::{Error as WithdrawError, Outcome as WithdrawOutcome, withdraw};
pub use writer::ConfigMapWriter;

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::{Client, ResourceExt};
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::{Instrument, debug, error, info, info_span, warn};

use crate::backoff::{self, Backoff};
use crate::health::{HEARTBEAT, Health};
use crate::hosting::LocalRegistryHostingV1;
use crate::metrics::Metrics;
use crate::plan::{self, Action, Existing, Readiness};
use crate::registry;
use crate::settings::Settings;
use cluster::Watches;
use watches::Signals;

/// After a write, further changes for this long are taken together: the first change of a burst is published at
/// once, the rest of the burst in one more write.
const ABSORB: Duration = Duration::from_millis(20);
/// How long to wait for our own write to come back through the ConfigMap watch.
const ECHO_TIMEOUT: Duration = Duration::from_secs(2);

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("reading {target}: {source}")]
    Read { target: String, source: kube::Error },
    #[error("applying {target}: {source}")]
    Apply { target: String, source: kube::Error },
    #[error("deleting {target}: {source}")]
    Delete { target: String, source: kube::Error },
}

impl Error {
    /// A bounded label for metrics and logs.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::Read { .. } => "read",
            Error::Apply { .. } => "apply",
            Error::Delete { .. } => "delete",
        }
    }

    /// What was being written or read.
    pub(super) fn target(&self) -> &str {
        let (Error::Read { target, .. } | Error::Apply { target, .. } | Error::Delete { target, .. }) = self;
        target
    }

    /// What the API server said, for users: its own message when it refused, else the transport error.
    pub(super) fn refusal(&self) -> String {
        let (Error::Read { source, .. } | Error::Apply { source, .. } | Error::Delete { source, .. }) = self;
        match source {
            kube::Error::Api(status) => format!("{} ({})", status.message, status.reason),
            other => other.to_string(),
        }
    }
}

/// What the controller's own watches see right now, once every watch the current registries need has synced: the
/// same snapshot a reconcile pass decides on (for `doctor`), with what the pull watches hold (empty without
/// --pull-secrets).
pub async fn snapshot(
    client: &Client,
    settings: &Settings,
) -> (registry::Cluster, Option<Existing>, crate::pull::Observed) {
    let signals = Signals::new(Metrics::default(), Arc::default());
    let mut watches = Watches::new(client, &signals, settings);
    loop {
        let interest = registry::interest(&watches.snapshot(), settings);
        if watches.follow(&interest) {
            // Every watch has listed: a snapshot taken now is complete, unless it needs watches the last did not.
            let cluster = watches.snapshot();
            if registry::interest(&cluster, settings) == interest {
                let existing = watches.configmap.objects().first().map(|cm| Existing::from_configmap(cm));
                return (cluster, existing, watches.pull_observed());
            }
            continue;
        }
        // Every watch wakes this when it has listed.
        signals.changed.notified().await;
    }
}

/// Asks the API server's own /readyz (which covers etcd) every heartbeat: watches can stay open on the API
/// server's cache while etcd is down, so their silence proves nothing.
async fn probe_api(client: Client, health: Arc<Health>) {
    loop {
        let request = http::Request::get("/readyz").body(Vec::new());
        let ok = match request {
            Ok(request) => {
                let answer = tokio::time::timeout(Duration::from_secs(2), client.request_text(request)).await;
                matches!(answer, Ok(Ok(body)) if body.trim() == "ok")
            }
            Err(_) => false,
        };
        health.set_api_reachable(ok);
        tokio::time::sleep(HEARTBEAT).await;
    }
}

struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// What the publisher shares with the rest of the process.
pub struct Context {
    pub metrics: Metrics,
    pub health: Arc<Health>,
    /// Whether this replica may write; always true without leader election.
    pub leading: watch::Receiver<bool>,
    _always_leading: Option<watch::Sender<bool>>,
}

impl Context {
    /// `leading` comes from a leader elector; `None` means this replica always leads.
    pub fn new(metrics: Metrics, health: Arc<Health>, leading: Option<watch::Receiver<bool>>) -> Self {
        match leading {
            Some(leading) => Self { metrics, health, leading, _always_leading: None },
            None => {
                let (sender, leading) = watch::channel(true);
                metrics.leading(true);
                Self { metrics, health, leading, _always_leading: Some(sender) }
            }
        }
    }

    /// A single replica without leader election, with metrics of its own.
    pub fn standalone() -> Self {
        Self::new(Metrics::default(), Arc::default(), None)
    }
}

/// What a write left: the ConfigMap's new resourceVersion, or `None` when it deleted the ConfigMap.
type Left = Option<String>;

/// Why a reconcile pass runs, recorded on its span.
#[derive(Clone, Copy, Debug)]
enum Trigger {
    /// A watch saw a change (or finished listing).
    Change,
    /// A grace period or a conflict hold ran out.
    Recheck,
    /// The last pass failed.
    Retry,
    /// This replica gained or lost the Lease.
    Leadership,
}

impl Trigger {
    fn label(self) -> &'static str {
        match self {
            Trigger::Change => "change",
            Trigger::Recheck => "recheck",
            Trigger::Retry => "retry",
            Trigger::Leadership => "leadership",
        }
    }
}

pub struct Publisher {
    client: Client,
    settings: Settings,
    writer: ConfigMapWriter,
    pull_writer: pull::PullWriter,
    signals: Signals,
    watches: Watches,
    readiness: Readiness,
    events: events::EventLog,
    context: Context,
    held_back: Option<String>,
    fights: fights::Fights,
    /// When the last write was sent; changes soon after it are absorbed into one more pass.
    last_write: Option<Instant>,
    /// When the change this pass answers arrived, until its write is sent.
    reacting_to: Option<Instant>,
}

impl Publisher {
    pub fn new(client: Client, settings: Settings, context: Context) -> Self {
        let signals = Signals::new(context.metrics.clone(), context.health.clone());
        let watches = Watches::new(&client, &signals, &settings);
        Self {
            writer: ConfigMapWriter::new(client.clone(), &settings, context.metrics.clone()),
            events: events::EventLog::start(client.clone()),
            pull_writer: pull::PullWriter::new(client.clone(), context.metrics.clone()),
            client,
            settings,
            signals,
            watches,
            readiness: Readiness::default(),
            context,
            held_back: None,
            fights: fights::Fights::default(),
            last_write: None,
            reacting_to: None,
        }
    }

    /// Reconciles until `shutdown` completes.
    pub async fn run(mut self, shutdown: impl Future<Output = ()>) {
        info!(
            target = %self.settings.target(),
            selector = %self.settings.registry_selector,
            namespaces = %if self.settings.all_namespaces() { "*".to_string() } else { self.settings.watch_namespaces.join(",") },
            "publishing the local registry"
        );
        futures::pin_mut!(shutdown);
        let probe = AbortOnDrop(tokio::spawn(probe_api(self.client.clone(), self.context.health.clone())));
        let mut wake_at: Option<(Instant, Trigger)> = None;
        let mut retry = backoff::exponential(backoff::WRITE_CAP);
        let mut heartbeat = tokio::time::interval(HEARTBEAT);
        // Only passes (and the watch changes they follow) free memory; an idle controller does not trim.
        let mut freed_since_trim = false;
        loop {
            let far = Instant::now() + Duration::from_secs(3600);
            let timer = tokio::time::sleep_until(wake_at.map_or(far, |(at, _)| at));
            let trigger = tokio::select! {
                () = &mut shutdown => break,
                () = self.signals.changed.notified() => {
                    // The leading edge of a burst is published at once; what follows a write waits out ABSORB.
                    if let Some(until) = self.last_write.map(|w| w + ABSORB).filter(|u| *u > Instant::now()) {
                        tokio::time::sleep_until(until).await;
                    }
                    Trigger::Change
                }
                () = timer, if wake_at.is_some() => wake_at.take().map_or(Trigger::Recheck, |(_, why)| why),
                Ok(()) = self.context.leading.changed() => Trigger::Leadership,
                _ = heartbeat.tick() => {
                    self.context.health.beat();
                    self.context.health.set_watches_alive(self.watches.alive());
                    // What stopped watches and passes freed goes back to the system within a heartbeat.
                    if std::mem::take(&mut freed_since_trim) {
                        crate::memory::release_free_heap();
                    }
                    continue;
                }
            };
            freed_since_trim = true;
            let cluster = self.watches.snapshot();
            let candidates = registry::survey(&cluster, &self.settings);
            let synced = self.watches.follow(&candidates.interest(&self.settings));
            self.context.health.set_synced(synced);
            self.context.metrics.watching(self.watches.count());
            if !synced {
                // Not a pass yet: a watch the registries need is still listing, and wakes us when it is done.
                debug!(trigger = trigger.label(), "waiting for watches to sync");
                continue;
            }
            let registries = candidates.registries(&self.settings);
            self.reacting_to = self.signals.take_pending();
            let started = Instant::now();
            let span = info_span!("reconcile", trigger = trigger.label(), registries = registries.len());
            let outcome = self.reconcile(registries).instrument(span).await;
            let result = if outcome.is_ok() { "success" } else { "error" };
            self.context.metrics.reconciled(result, started.elapsed());
            wake_at = match outcome {
                Ok(recheck) => {
                    retry.reset();
                    recheck.map(|after| (Instant::now() + after, Trigger::Recheck))
                }
                Err(error) => {
                    let after = retry.next().unwrap_or(backoff::WRITE_CAP);
                    self.context.metrics.reconcile_failed(error.metric_label());
                    error!(%error, reason = error.metric_label(), retry_in = ?after, "reconcile failed");
                    Some((Instant::now() + after, Trigger::Retry))
                }
            };
        }
        drop(probe);
        self.events.finish().await;
        info!("stopped");
    }

    /// One pass over a synced snapshot's registries. Returns when to look again if nothing changes before then.
    async fn reconcile(&mut self, registries: Vec<registry::Registry>) -> Result<Option<Duration>, Error> {
        let now = Instant::now();
        self.readiness.observe(&registries, now);
        let existing = self.watches.configmap.objects().first().map(|cm| Existing::from_configmap(cm));
        self.report_published(existing.as_ref(), &registries);
        let decision = plan::decide(&registries, existing.as_ref(), &self.readiness, now, &self.settings);
        if !*self.context.leading.borrow() {
            // Followers watch and decide, so they are ready to take over, but only the leader writes.
            return Ok(decision.recheck_after);
        }
        if decision.held_back != self.held_back {
            if let Some(why) = &decision.held_back {
                warn!("{why}");
            }
            self.held_back = decision.held_back.clone();
        }
        // Write first: readers wait on the ConfigMap, and an Event should tell what happened, not what will.
        let source = match &decision.action {
            Action::Apply { source, .. } => source.clone(),
            _ => None,
        };
        let mut notices = decision.notices;
        if decision.action != Action::Keep {
            let stored = existing.as_ref().and_then(|e| e.resource_version.as_deref());
            if let fights::Verdict::Hold { until, started, hold } = self.fights.before_write(stored, now) {
                if started {
                    self.context.metrics.conflict();
                    notices.push(self.conflict_notice(existing.as_ref(), hold));
                }
                self.events.record(notices);
                let left = until.saturating_duration_since(now);
                return Ok(Some(decision.recheck_after.map_or(left, |recheck| recheck.min(left))));
            }
        }
        let published = plan::published_registry(&decision.action, existing.as_ref(), &registries);
        let written = self.execute(decision.action, existing.as_ref()).await;
        let health = &self.context.health;
        match &written {
            Ok(left) => {
                health.set_failed_writes(0);
                if let Some(left) = left {
                    self.fights.wrote(left.clone());
                }
            }
            Err(error) => {
                health.set_failed_writes(health.failed_writes() + 1);
                // A refused write is told where users look: on the registry it was for, else on the ConfigMap.
                let regarding =
                    source.and_then(|id| registries.iter().find(|r| r.id == id)).map(|r| r.reference.clone());
                notices.push(self.refusal_notice(error, regarding, existing.as_ref()));
            }
        }
        // Pull Secrets follow what readers now see; after a refused write that is what they saw before.
        let distributed = match &written {
            Ok(_) => self.distribute(published, &mut notices).await,
            Err(_) => Ok(()),
        };
        self.events.record(notices);
        written?;
        distributed?;
        Ok(decision.recheck_after)
    }

    /// With --pull-secrets: the published registry's pull credentials, in every namespace that asked for them.
    async fn distribute(
        &self,
        registry: Option<&registry::Registry>,
        notices: &mut Vec<plan::Notice>,
    ) -> Result<(), Error> {
        let Some(settings) = &self.settings.pull_secrets else { return Ok(()) };
        let plan = crate::pull::plan(registry, &self.watches.pull_observed(), settings);
        notices.extend(plan.notices.iter().cloned());
        if plan.is_empty() {
            return Ok(());
        }
        self.pull_writer.carry_out(&plan, registry.map(|r| &r.reference), notices).await
    }

    fn target(&self) -> String {
        self.settings.target()
    }

    fn conflict_notice(&self, existing: Option<&Existing>, hold: Duration) -> plan::Notice {
        let other = existing.and_then(|e| e.writer.as_deref()).unwrap_or("deleted it");
        plan::Notice {
            regarding: plan::configmap_reference(&self.settings, existing),
            warning: true,
            reason: "ConflictingWriter",
            message: format!(
                "another writer keeps undoing what this controller publishes ({other}); writes wait {}s instead of \
                 fighting: run one controller per ConfigMap (a second Helm release, a local run, a script?)",
                hold.as_secs()
            )
            .into(),
        }
    }

    fn refusal_notice(
        &self,
        error: &Error,
        regarding: Option<k8s_openapi::api::core::v1::ObjectReference>,
        existing: Option<&Existing>,
    ) -> plan::Notice {
        plan::Notice {
            regarding: regarding.unwrap_or_else(|| plan::configmap_reference(&self.settings, existing)),
            warning: true,
            reason: "PublishFailed",
            message: format!(
                "could not {} {}: {}; what readers see is unchanged",
                error.metric_label(),
                self.target(),
                error.refusal()
            )
            .into(),
        }
    }

    /// The published-values metric follows what the ConfigMap holds, whoever wrote it.
    fn report_published(&self, existing: Option<&Existing>, registries: &[registry::Registry]) {
        let document = existing.filter(|e| e.owned).and_then(|e| e.document.as_ref());
        let source = document
            .and_then(|d| registries.iter().find(|r| r.document.as_ref().ok() == Some(d)))
            .map(|r| r.id.to_string());
        self.context.metrics.published(document, source);
    }

    /// Carries out `action`. For a write, returns what it left (see [`Left`]); `None` when nothing was written.
    async fn execute(&mut self, action: Action, existing: Option<&Existing>) -> Result<Option<Left>, Error> {
        let target = self.target();
        let old = match existing {
            Some(Existing { document: Some(document), .. }) => document.to_string(),
            Some(Existing { text: Some(_), .. }) => "(unparsable)".into(),
            _ => "(none)".into(),
        };
        // Metrics and the log follow the API server's answer; then wait for our watch to show the write, so
        // the next pass does not repeat it.
        let left = match action {
            Action::Keep => return Ok(None),
            Action::Apply { document, source } => {
                let reaction_us = self.sending_write();
                let written = self.apply(Some(&document)).await?;
                self.context.metrics.published(Some(&document), source.as_ref().map(ToString::to_string));
                let source = source.map_or_else(|| "none (help only)".to_string(), |s| s.to_string());
                info!(configmap = %target, %old, new = %document, %source, reaction_us, "published");
                Some(written)
            }
            Action::RemoveKey => {
                let reaction_us = self.sending_write();
                let written = self.apply(None).await?;
                self.context.metrics.published(None, None);
                info!(configmap = %target, %old, reaction_us, "withdrawn: removed our key; the other keys stay");
                Some(written)
            }
            Action::Delete => {
                let reaction_us = self.sending_write();
                if self.writer.delete(existing).await? {
                    self.context.metrics.published(None, None);
                    info!(configmap = %target, %old, reaction_us, "deleted: no registry and no help URL to publish");
                }
                None
            }
        };
        self.await_echo(|cm| cm.and_then(|c| c.resource_version()) == left).await;
        Ok(Some(left))
    }

    /// Marks a write as sent now, and returns how many microseconds after its triggering change: the time this
    /// controller adds between receiving a watch event and sending the write it calls for.
    fn sending_write(&mut self) -> Option<u128> {
        let now = Instant::now();
        self.last_write = Some(now);
        let reaction = now - self.reacting_to.take()?;
        self.context.metrics.reacted(reaction);
        Some(reaction.as_micros())
    }

    async fn apply(&self, document: Option<&LocalRegistryHostingV1>) -> Result<String, Error> {
        self.writer.apply(&plan::desired_configmap(document, &self.settings)).await
    }

    /// Waits until the ConfigMap watch shows our own write, so the next pass does not repeat it.
    async fn await_echo(&self, arrived: impl Fn(Option<&ConfigMap>) -> bool) {
        let deadline = Instant::now() + ECHO_TIMEOUT;
        loop {
            // Registered before looking, so a change stored in between still wakes us.
            let stored = self.signals.stored.notified();
            futures::pin_mut!(stored);
            stored.as_mut().enable();
            if arrived(self.watches.configmap.objects().first().map(AsRef::as_ref)) {
                return;
            }
            if tokio::time::timeout_at(deadline, stored).await.is_err() {
                return;
            }
        }
    }
}
