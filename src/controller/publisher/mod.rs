//! The publisher task: keeps the ConfigMap true to the registries. Each pass goes one way: settle the watches,
//! snapshot, [`publish::decide`], apply the action, report (metrics, log, Events, readiness, and the registry readers
//! see, handed to the other concerns). One pass per burst of changes, and one more when a grace period or a hold
//! runs out.

mod metrics;
mod writer;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;
use tracing::{Instrument, debug, error, info, info_span, warn};

use super::{Context, Error, Handoff};
use crate::backoff::RetryClock;
use crate::events::EventLog;
use crate::health::{HEARTBEAT, Task};
use crate::hosting::configmap::Stored;
use crate::publish::{self, Action, Decision, Memory, Notice, Published, Reason};
use crate::registry::{self, Cluster};
use crate::settings::Settings;
use crate::watch::sets::PublisherWatches as Watches;
use crate::watch::{Signals, WatchSets, settle};
pub use metrics::PublisherMetrics;
pub use writer::ConfigMapWriter;

/// The label of this task's reconcile metrics.
pub const CONTROLLER: &str = "publisher";
/// A change within this long of a write starts a burst, and a burst ends after this long without a change: the
/// first change of a burst is published at once, the rest in one more write, however fast the API server answers
/// (a fixed window after the write took one write per window's worth of changes, more on a slower machine).
const ABSORB: Duration = Duration::from_millis(20);
/// The longest a burst holds back its changes, from the write that started it, so a stream of changes that never
/// goes quiet is still published this often.
const BURST_HOLD: Duration = Duration::from_millis(250);
/// How long to wait for our own write to come back through the ConfigMap watch.
const ECHO_TIMEOUT: Duration = Duration::from_secs(2);

/// Why a pass runs, recorded on its span.
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

/// The leading edge of a burst is published at once; a change within [`ABSORB`] of that write waits until the
/// changes have been quiet for [`ABSORB`] (at most [`BURST_HOLD`] after the write), taking each one it sees.
async fn absorb_burst(changed: &tokio::sync::Notify, last_write: Option<Instant>) {
    let Some(written) = last_write.filter(|w| Instant::now() < *w + ABSORB) else { return };
    let hold_until = written + BURST_HOLD;
    loop {
        let quiet_until = (Instant::now() + ABSORB).min(hold_until);
        if tokio::time::timeout_at(quiet_until, changed.notified()).await.is_err() || Instant::now() >= hold_until {
            return;
        }
    }
}

/// What a write left: the ConfigMap's new resourceVersion, or `None` when it deleted the ConfigMap.
type Left = Option<String>;

pub struct Publisher {
    settings: Settings,
    writer: ConfigMapWriter,
    signals: Signals,
    watches: Watches,
    events: EventLog<Notice>,
    context: Context,
    /// Readiness and another writer's corrections, carried from pass to pass.
    memory: Memory,
    held_back: Option<String>,
    /// The registry readers see, for the other concerns.
    published: watch::Sender<Handoff>,
    /// When the last write was sent; changes soon after it are absorbed into one more pass.
    last_write: Option<Instant>,
    /// When the change this pass answers arrived, until its write is sent.
    reacting_to: Option<Instant>,
}

impl Publisher {
    pub fn new(client: &kube::Client, settings: Settings, context: Context, published: watch::Sender<Handoff>) -> Self {
        let signals = Signals::new(context.metrics.clone(), context.health.clone());
        Self {
            writer: ConfigMapWriter::new(client.clone(), &settings, context.concerns.publisher.clone()),
            events: EventLog::start(client.clone(), "Publish", &context.instance),
            watches: Watches::new(client, &signals),
            signals,
            settings,
            context,
            memory: Memory::default(),
            held_back: None,
            published,
            last_write: None,
            reacting_to: None,
        }
    }

    /// Reconciles until `shutdown` completes.
    pub async fn run(mut self, shutdown: impl Future<Output = ()>) {
        let namespaces =
            if self.settings.all_namespaces() { "*".into() } else { self.settings.watch_namespaces.join(",") };
        info!(target = %self.settings.target(), selector = %self.settings.registry_selector, %namespaces, "publishing the local registry");
        futures::pin_mut!(shutdown);
        let health = self.context.health.clone();
        health.start(Task::Publisher);
        self.context.metrics.task_started(CONTROLLER, &Error::LABELS);
        self.context.concerns.publisher.started();
        // When to look again though nothing changed (a grace period, a conflict hold), and when a failed pass runs
        // again: the same retry clock as the other tasks'.
        let mut recheck_at: Option<Instant> = None;
        let mut retry = RetryClock::for_writes();
        let mut heartbeat = tokio::time::interval(HEARTBEAT);
        // Only passes (and the watch changes they follow) free memory; an idle controller does not trim.
        let mut freed_since_trim = false;
        // Start the watches the core always needs now; each wakes the loop when it has listed.
        let settings = &self.settings;
        let _ = settle(&mut self.watches, &self.signals, |c| registry::interest(c, settings));
        loop {
            let far = Instant::now() + Duration::from_secs(3600);
            let recheck = tokio::time::sleep_until(recheck_at.unwrap_or(far));
            let trigger = tokio::select! {
                () = &mut shutdown => break,
                () = self.signals.changed.notified() => {
                    absorb_burst(&self.signals.changed, self.last_write).await;
                    Trigger::Change
                }
                () = recheck, if recheck_at.is_some() => {
                    recheck_at = None;
                    Trigger::Recheck
                }
                () = retry.due() => Trigger::Retry,
                Ok(()) = self.context.leading.changed() => Trigger::Leadership,
                _ = heartbeat.tick() => {
                    health.beat(Task::Publisher, self.watches.alive());
                    // What stopped watches and passes freed goes back to the system within a heartbeat.
                    if std::mem::take(&mut freed_since_trim) {
                        let _ = crate::memory::release_free_heap();
                    }
                    continue;
                }
            };
            // Whatever armed it, the retry is this pass, or the one the watches wake when they have listed.
            retry.disarm();
            freed_since_trim = true;
            let settings = &self.settings;
            let settled = settle(&mut self.watches, &self.signals, |c| registry::interest(c, settings));
            health.set_synced(Task::Publisher, settled.is_some());
            self.context.metrics.watching(CONTROLLER, self.watches.count());
            let Some(cluster) = settled else {
                // Not a pass yet: a watch the registries need is still listing, and wakes us when it is done.
                debug!(trigger = trigger.label(), "waiting for watches to sync");
                continue;
            };
            self.reacting_to = self.signals.take_pending();
            let started = Instant::now();
            let span = info_span!("reconcile", controller = CONTROLLER, trigger = trigger.label());
            let outcome = self.reconcile(&cluster).instrument(span).await;
            self.context.metrics.reconciled(CONTROLLER, outcome.is_ok(), started.elapsed());
            recheck_at = match outcome {
                Ok(recheck) => {
                    retry.succeeded();
                    recheck.map(|after| Instant::now() + after)
                }
                Err(error) => {
                    let after = retry.failed();
                    self.context.metrics.reconcile_failed(CONTROLLER, error.metric_label());
                    error!(%error, reason = error.metric_label(), retry_in = ?after, "reconcile failed");
                    None
                }
            };
        }
        self.events.finish().await;
        info!("stopped");
    }

    /// One pass over a complete snapshot: decide, apply, report. Returns when to look again if nothing changes.
    async fn reconcile(&mut self, cluster: &Cluster) -> Result<Option<Duration>, Error> {
        let registries = registry::registries(cluster, &self.settings);
        let stored = cluster.stored();
        let leading = *self.context.leading.borrow();
        let input = publish::Input::new(&registries, stored, &self.memory, leading, &self.settings);
        let mut decision = publish::decide(&input);
        self.memory = std::mem::take(&mut decision.memory);
        let registry = decision.published.as_ref().map(|p| &p.registry);
        let written = self.carry_out(&decision.action, stored, registry).await;
        let recheck_after = decision.recheck_after;
        self.report(decision, &written);
        written.map(|_| recheck_after)
    }

    /// Carries out `action`. For a write, returns what it left (see [`Left`]); `None` when nothing was written.
    async fn carry_out(
        &mut self,
        action: &Action,
        stored: Option<&Stored>,
        registry: Option<&registry::ServiceId>,
    ) -> Result<Option<Left>, Error> {
        let target = self.settings.target();
        let old = match stored {
            Some(Stored { document: Some(document), .. }) => document.to_string(),
            Some(Stored { text: Some(_), .. }) => "(unparsable)".into(),
            _ => "(none)".into(),
        };
        // The log follows the API server's answer; then wait for our watch to show the write, so the next pass
        // does not repeat it.
        let left = match action {
            Action::Keep => return Ok(None),
            Action::Apply { configmap, document } => {
                let reaction_us = self.sending_write();
                let version = self.writer.apply(configmap).await?;
                match document {
                    Some(document) => {
                        let registry = registry.map_or_else(|| "none (help only)".into(), ToString::to_string);
                        info!(configmap = %target, %old, new = %document, %registry, reaction_us, "published");
                    }
                    None => {
                        info!(configmap = %target, %old, reaction_us, "withdrawn: removed our key; the other keys stay")
                    }
                }
                Some(version)
            }
            Action::Delete { uid, resource_version } => {
                let reaction_us = self.sending_write();
                if self.writer.delete(uid.clone(), resource_version.clone()).await? {
                    info!(configmap = %target, %old, reaction_us, "deleted: no registry and no help URL to publish");
                }
                None
            }
        };
        self.await_echo(left.as_deref()).await;
        Ok(Some(left))
    }

    /// Tells what the pass did: readiness, metrics, the log, Events, and the registry readers see now. A follower's
    /// decision writes and tells nothing (see [`publish::decide`]), so for a follower this reports what readers see.
    fn report(&mut self, decision: Decision, written: &Result<Option<Left>, Error>) {
        let Decision {
            action,
            published,
            published_now,
            kept,
            document,
            subject,
            mut notices,
            confirmation,
            held_back,
            held,
            ..
        } = decision;
        if held_back != self.held_back {
            if let Some(why) = &held_back {
                warn!("{why}");
            }
            self.held_back = held_back;
        }
        if notices.iter().any(|n| n.reason == Reason::ConflictingWriter) {
            self.context.concerns.publisher.conflict();
        }
        let health = &self.context.health;
        match written {
            Ok(left) => {
                if let Some(left) = left {
                    self.memory.fights.wrote(left.clone());
                }
                // A refused write is forgiven only by a write that went through, or by nothing being due.
                if left.is_some() || (action == Action::Keep && !held) {
                    health.set_failed_writes(0);
                }
                self.context
                    .concerns
                    .publisher
                    .published(document.as_ref(), published.as_ref().map(|p| p.registry.to_string()));
                self.hand_on(published, kept);
                notices.extend(confirmation);
            }
            Err(error) => {
                // Readers keep seeing what they saw before.
                self.hand_on(published_now, kept);
                health.set_failed_writes(health.failed_writes() + 1);
                let target = self.settings.target();
                notices.push(Notice::publish_failed(&subject, error.metric_label(), &target, &error.refusal()));
            }
        }
        self.events.record(notices);
    }

    /// Hands the registry readers see to the other concerns, when it changed; `kept` when readers keep seeing a
    /// document its registry no longer derives.
    fn hand_on(&self, published: Option<Published>, kept: bool) {
        let handoff = if kept { Handoff::Kept } else { Handoff::Decided(published.map(Arc::new)) };
        self.published.send_if_modified(|current| {
            let changed = *current != handoff;
            if changed {
                current.clone_from(&handoff);
            }
            changed
        });
    }

    /// Marks a write as sent now, and returns how many microseconds after its triggering change: the time this
    /// controller adds between receiving a watch event and sending the write it calls for.
    fn sending_write(&mut self) -> Option<u128> {
        let now = Instant::now();
        self.last_write = Some(now);
        let reaction = now - self.reacting_to.take()?;
        self.context.concerns.publisher.reacted(reaction);
        Some(reaction.as_micros())
    }

    /// Waits until the ConfigMap watch shows our own write (`left`), so the next pass does not repeat it.
    async fn await_echo(&self, left: Option<&str>) {
        let deadline = Instant::now() + ECHO_TIMEOUT;
        loop {
            // Registered before looking, so a change stored in between still wakes us.
            let stored = self.signals.stored.notified();
            futures::pin_mut!(stored);
            stored.as_mut().enable();
            let seen = self.watches.configmap.objects().first().and_then(|s| s.resource_version.clone());
            if seen.as_deref() == left {
                return;
            }
            if tokio::time::timeout_at(deadline, stored).await.is_err() {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use tokio::sync::Notify;
    use tokio::time::{Duration, Instant};

    use super::{ABSORB, BURST_HOLD, absorb_burst};

    /// Changes every `gap`, `count` of them, starting `gap` from now.
    fn changes(changed: &Arc<Notify>, gap: Duration, count: u32) {
        let changed = changed.clone();
        tokio::spawn(async move {
            for _ in 0..count {
                tokio::time::sleep(gap).await;
                changed.notify_one();
            }
        });
    }

    #[tokio::test(start_paused = true)]
    async fn a_change_long_after_the_last_write_is_published_at_once() {
        let changed = Arc::new(Notify::new());
        let written = Instant::now();
        tokio::time::sleep(ABSORB * 2).await;
        let started = Instant::now();
        absorb_burst(&changed, Some(written)).await;
        absorb_burst(&changed, None).await;
        assert_eq!(started.elapsed(), Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn a_burst_is_absorbed_until_it_goes_quiet_whatever_its_pace() {
        // 10 ms apart (a slow API server) and 3 ms apart: both taken whole, ending ABSORB after the last change.
        for gap in [Duration::from_millis(10), Duration::from_millis(3)] {
            let changed = Arc::new(Notify::new());
            let written = Instant::now();
            changes(&changed, gap, 9);
            absorb_burst(&changed, Some(written)).await;
            assert_eq!(written.elapsed(), gap * 9 + ABSORB, "{gap:?} apart");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_burst_that_never_goes_quiet_is_published_at_the_hold() {
        let changed = Arc::new(Notify::new());
        let written = Instant::now();
        changes(&changed, Duration::from_millis(5), 1000);
        absorb_burst(&changed, Some(written)).await;
        assert_eq!(written.elapsed(), BURST_HOLD);
    }
}
