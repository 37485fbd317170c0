//! The loop of every concern that follows the published registry (pull credentials, the node plan): it wakes on a
//! change of its own watches, a new handoff, its retry clock or leadership; settles its watches; and, when leading,
//! makes one pass and retries a failed one on its own clock. A concern says only what it watches for the registry
//! readers see and what one pass does ([`Concern`]). The publisher's loop is its own: it absorbs bursts, waits for
//! the echo of its writes and hands on.

use std::future::Future;

use tokio::sync::watch;
use tokio::time::Instant;
use tracing::{Instrument, debug, error, info_span};

use super::{Context, Error, Handoff};
use crate::backoff::RetryClock;
use crate::health::{HEARTBEAT, Task};
use crate::publish::Published;
use crate::watch::{Signals, WatchSets, settle};

type Snapshot<C> = <<C as Concern>::Watches as WatchSets>::Snapshot;
type Interest<C> = <<C as Concern>::Watches as WatchSets>::Interest;

/// What one concern that follows the published registry does.
pub(super) trait Concern: Send {
    type Watches: WatchSets + Send;
    /// Its entry in `/readyz`.
    const TASK: Task;
    /// Its metrics' `controller` label.
    const CONTROLLER: &'static str;
    /// What the log says when a pass fails.
    const FAILED: &'static str;
    /// Starts the bounded series of its own metrics at 0 (every task's are started for it).
    fn metrics_started(&self) {}

    /// The watches it needs for `published`, given what they hold now.
    fn interest(&self, published: Option<&Published>, snapshot: &Snapshot<Self>) -> Interest<Self>;
    /// One pass while leading: decide, carry out, tell.
    fn pass(
        &mut self,
        published: Option<&Published>,
        snapshot: &Snapshot<Self>,
    ) -> impl Future<Output = Result<(), Error>> + Send;
    /// Tells what is left to tell before the task ends.
    fn finish(self) -> impl Future<Output = ()> + Send;
}

/// What every following task shares: its watches, where they signal, the publisher's handoff, the process.
pub(super) struct Follow<W> {
    pub watches: W,
    pub signals: Signals,
    pub published: watch::Receiver<Handoff>,
    pub context: Context,
}

impl<W: WatchSets> Follow<W> {
    /// The shared parts of a following task, with the watches `make` builds on its signals.
    pub fn new(client: &kube::Client, context: Context, published: watch::Receiver<Handoff>) -> Self {
        let signals = Signals::new(context.metrics.clone(), context.health.clone());
        Self { watches: W::new(client, &signals), signals, published, context }
    }
}

/// Runs `concern` until `shutdown` completes.
pub(super) async fn run<C: Concern>(mut concern: C, follow: Follow<C::Watches>, shutdown: impl Future<Output = ()>) {
    let Follow { mut watches, signals, mut published, mut context } = follow;
    futures::pin_mut!(shutdown);
    let health = context.health.clone();
    health.start(C::TASK);
    context.metrics.task_started(C::CONTROLLER, &Error::LABELS);
    concern.metrics_started();
    let mut retry = RetryClock::for_writes();
    let mut heartbeat = tokio::time::interval(HEARTBEAT);
    loop {
        let trigger = tokio::select! {
            () = &mut shutdown => break,
            () = signals.changed.notified() => "change",
            Ok(()) = published.changed() => "published",
            () = retry.due() => "retry",
            Ok(()) = context.leading.changed() => "leadership",
            _ = heartbeat.tick() => {
                health.beat(C::TASK, watches.alive());
                continue;
            }
        };
        retry.disarm();
        let handoff = published.borrow().clone();
        let published = match handoff {
            // Until the publisher has decided, nothing is known about what readers see: nothing is withdrawn.
            Handoff::Pending => continue,
            // Readers keep seeing the last good document: what follows from it stays as it is.
            Handoff::Kept => {
                health.set_synced(C::TASK, true);
                continue;
            }
            Handoff::Decided(published) => published,
        };
        let settled = settle(&mut watches, &signals, |snapshot| concern.interest(published.as_deref(), snapshot));
        health.set_synced(C::TASK, settled.is_some());
        context.metrics.watching(C::CONTROLLER, watches.count());
        let Some(snapshot) = settled else {
            debug!(trigger, controller = C::CONTROLLER, "waiting for the watches to sync");
            continue;
        };
        if !*context.leading.borrow() {
            continue;
        }
        let started = Instant::now();
        let span = info_span!("reconcile", controller = C::CONTROLLER, trigger);
        let outcome = concern.pass(published.as_deref(), &snapshot).instrument(span).await;
        context.metrics.reconciled(C::CONTROLLER, outcome.is_ok(), started.elapsed());
        match outcome {
            Ok(()) => retry.succeeded(),
            Err(error) => {
                let after = retry.failed();
                context.metrics.reconcile_failed(C::CONTROLLER, error.metric_label());
                error!(%error, trigger, reason = error.metric_label(), retry_in = ?after, "{}", C::FAILED);
            }
        }
    }
    concern.finish().await;
}
