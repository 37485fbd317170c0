//! The pull-credentials task (`--pull-secrets`): follows the registry the publisher hands on, with watches, a sync
//! gate, a retry clock, Events and metrics of its own, so a refusal in one tenant's namespace never delays or
//! retries the ConfigMap. Each pass: settle the watches, snapshot, [`pull::plan`], carry it out, report.

mod writer;

use std::sync::Arc;

use tokio::sync::watch;
use tokio::time::Instant;
use tracing::{Instrument, debug, error, info, info_span};

use super::watch::{Signals, WatchSets, settle, watch_sets};
use super::{Context, Error, Handoff};
use crate::backoff::RetryClock;
use crate::events::EventLog;
use crate::health::{HEARTBEAT, Task};
use crate::publish::Published;
use crate::pull::{self, Interest, Notice, Observed, pull_watch_sets};
use crate::settings::PullSecrets;
pub use writer::PullWriter;

watch_sets!(pull_watch_sets, Watches, Interest, Observed);

/// The label of this task's reconcile metrics.
pub const CONTROLLER: &str = "pull-secrets";

/// What the pull watches hold for `published`, once every watch it needs has listed (for `doctor`).
pub async fn observe(client: &kube::Client, published: Option<&Published>, settings: &PullSecrets) -> Observed {
    let signals = Signals::new(crate::metrics::Metrics::default(), Arc::default());
    let mut watches = Watches::new(client, &signals);
    loop {
        if let Some(observed) = settle(&mut watches, &signals, |o| pull::interest(published, o, settings)) {
            return observed;
        }
        signals.changed.notified().await;
    }
}

pub struct PullDistributor {
    settings: PullSecrets,
    signals: Signals,
    watches: Watches,
    writer: PullWriter,
    events: EventLog<Notice>,
    context: Context,
    /// The registry readers see, as the publisher hands it on.
    published: watch::Receiver<Handoff>,
}

impl PullDistributor {
    pub fn new(
        client: &kube::Client,
        settings: PullSecrets,
        context: Context,
        published: watch::Receiver<Handoff>,
    ) -> Self {
        let signals = Signals::new(context.metrics.clone(), context.health.clone());
        Self {
            writer: PullWriter::new(client.clone(), context.metrics.clone()),
            events: EventLog::start(client.clone(), "DistributePullSecret", &context.instance),
            watches: Watches::new(client, &signals),
            signals,
            settings,
            context,
            published,
        }
    }

    /// Distributes until `shutdown` completes.
    pub async fn run(mut self, shutdown: impl Future<Output = ()>) {
        info!(secret = %self.settings.name, "distributing the published registry's pull credentials");
        futures::pin_mut!(shutdown);
        let health = self.context.health.clone();
        health.start(Task::PullSecrets);
        let mut retry = RetryClock::for_writes();
        let mut heartbeat = tokio::time::interval(HEARTBEAT);
        loop {
            let trigger = tokio::select! {
                () = &mut shutdown => break,
                () = self.signals.changed.notified() => "change",
                Ok(()) = self.published.changed() => "published",
                () = retry.due() => "retry",
                Ok(()) = self.context.leading.changed() => "leadership",
                _ = heartbeat.tick() => {
                    health.beat(Task::PullSecrets, self.watches.alive());
                    continue;
                }
            };
            retry.disarm();
            let published = match self.published.borrow().clone() {
                // Until the publisher has decided, nothing is known about what readers see: nothing is withdrawn.
                Handoff::Pending => continue,
                // The Secrets of the document readers still see stay as they are.
                Handoff::Kept => {
                    health.set_synced(Task::PullSecrets, true);
                    continue;
                }
                Handoff::Decided(published) => published,
            };
            let settings = &self.settings;
            let settled =
                settle(&mut self.watches, &self.signals, |o| pull::interest(published.as_deref(), o, settings));
            health.set_synced(Task::PullSecrets, settled.is_some());
            self.context.metrics.watching(CONTROLLER, self.watches.count());
            let Some(observed) = settled else {
                debug!(trigger, "waiting for the pull watches to sync");
                continue;
            };
            if !*self.context.leading.borrow() {
                continue;
            }
            let started = Instant::now();
            let span = info_span!("reconcile", controller = CONTROLLER, trigger);
            let outcome = self.reconcile(published.as_deref(), &observed).instrument(span).await;
            self.context.metrics.reconciled(CONTROLLER, outcome.is_ok(), started.elapsed());
            match outcome {
                Ok(()) => retry.succeeded(),
                Err(error) => {
                    let after = retry.failed();
                    self.context.metrics.reconcile_failed(CONTROLLER, error.metric_label());
                    error!(%error, reason = error.metric_label(), retry_in = ?after, "pull Secret distribution failed");
                }
            }
        }
        self.events.finish().await;
    }

    /// One pass: plan, carry out, tell.
    async fn reconcile(&mut self, published: Option<&Published>, observed: &Observed) -> Result<(), Error> {
        let plan = pull::plan(published, observed, &self.settings);
        let mut notices = plan.notices.clone();
        let carried = if plan.is_empty() {
            Ok(())
        } else {
            self.writer.carry_out(&plan, published.map(|p| &p.reference), &mut notices).await
        };
        self.events.record(notices);
        carried
    }
}

/// Removes every pull Secret we wrote and every ServiceAccount entry we added, for the uninstall hook: the plan
/// with nothing published, over what a list (instead of the watches) finds.
pub async fn withdraw(client: kube::Client, settings: &PullSecrets) -> Result<(), Error> {
    use k8s_openapi::api::core::v1::{Secret, ServiceAccount};
    use kube::api::{Api, ListParams};
    let listed = |source| Error::Read { target: "pull Secrets".into(), source };
    let by_name = |name: &str| ListParams::default().fields(&format!("metadata.name={name}"));
    let secrets = Api::<Secret>::all(client.clone()).list(&by_name(&settings.name)).await.map_err(listed)?;
    let mut accounts = Vec::new();
    for name in &settings.service_accounts {
        let found = Api::<ServiceAccount>::all(client.clone()).list(&by_name(name)).await.map_err(listed)?;
        accounts.extend(found.items.into_iter().map(Arc::new));
    }
    let observed =
        Observed { secrets: secrets.items.into_iter().map(Arc::new).collect(), accounts, ..Observed::default() };
    let plan = pull::plan(None, &observed, settings);
    let writer = PullWriter::new(client, crate::metrics::Metrics::default());
    writer.carry_out(&plan, None, &mut Vec::new()).await?;
    info!(secrets = plan.delete.len(), serviceaccounts = plan.accounts.len(), "pull Secrets withdrawn");
    Ok(())
}
