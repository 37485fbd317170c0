//! The pull-credentials task (`--pull-secrets`): follows the registry the publisher hands on, with watches, a sync
//! gate, a retry clock, Events and metrics of its own, so a refusal in one tenant's namespace never delays or
//! retries the ConfigMap. Each pass (in the loop every following concern shares, `follow::run`): settle the
//! watches, snapshot, [`pull::plan`], carry it out, report.

mod metrics;
mod writer;

use std::sync::Arc;

use tokio::sync::watch;
use tracing::info;

use super::follow::{self, Concern, Follow};
use super::{Context, Error, Handoff};
use crate::events::EventLog;
use crate::health::Task;
use crate::publish::Published;
use crate::pull::{self, Interest, Notice, Observed};
use crate::settings::PullSecrets;
use crate::watch::sets::PullWatches as Watches;
pub use metrics::PullMetrics;
pub use writer::PullWriter;

/// The label of this task's reconcile metrics.
pub const CONTROLLER: &str = "pull-secrets";

/// The task: the shared follower loop (`follow::run`) around `Distribution`.
pub struct PullDistributor {
    follow: Follow<Watches>,
    distribution: Distribution,
}

/// What is this concern's own: the settings, the writer and the Event log.
struct Distribution {
    settings: PullSecrets,
    writer: PullWriter,
    events: EventLog<Notice>,
    metrics: PullMetrics,
}

impl PullDistributor {
    pub fn new(
        client: &kube::Client,
        settings: PullSecrets,
        context: Context,
        published: watch::Receiver<Handoff>,
    ) -> Self {
        let distribution = Distribution {
            writer: PullWriter::new(client.clone(), context.concerns.pull.clone()),
            events: EventLog::start(client.clone(), "DistributePullSecret", &context.instance),
            metrics: context.concerns.pull.clone(),
            settings,
        };
        Self { follow: Follow::new(client, context, published), distribution }
    }

    /// Distributes until `shutdown` completes.
    pub async fn run(self, shutdown: impl Future<Output = ()>) {
        info!(secret = %self.distribution.settings.name, "distributing the published registry's pull credentials");
        follow::run(self.distribution, self.follow, shutdown).await;
    }
}

impl Concern for Distribution {
    type Watches = Watches;
    const TASK: Task = Task::PullSecrets;
    const CONTROLLER: &'static str = CONTROLLER;
    const FAILED: &'static str = "pull Secret distribution failed";

    fn metrics_started(&self) {
        self.metrics.started();
    }

    fn interest(&self, published: Option<&Published>, observed: &Observed) -> Interest {
        pull::interest(published, observed, &self.settings)
    }

    /// One pass: plan, carry out, tell.
    async fn pass(&mut self, published: Option<&Published>, observed: &Observed) -> Result<(), Error> {
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

    async fn finish(self) {
        self.events.finish().await;
    }
}

/// Removes every pull Secret we wrote and every ServiceAccount entry we added, for the uninstall hook: the plan
/// with nothing published, over what a list (instead of the watches) finds.
pub async fn withdraw(client: kube::Client, settings: &PullSecrets) -> Result<(), Error> {
    use k8s_openapi::api::core::v1::{Secret, ServiceAccount};
    use kube::api::{Api, ListParams};
    let listed = |source| Error::Read { target: "pull Secrets".into(), source };
    let by_name = |name: &str| ListParams::default().fields(&crate::watching::name_selector(name));
    let secrets = Api::<Secret>::all(client.clone()).list(&by_name(&settings.name)).await.map_err(listed)?;
    let mut accounts = Vec::new();
    for name in &settings.service_accounts {
        let found = Api::<ServiceAccount>::all(client.clone()).list(&by_name(name)).await.map_err(listed)?;
        accounts.extend(found.items.into_iter().map(Arc::new));
    }
    let observed =
        Observed { secrets: secrets.items.into_iter().map(Arc::new).collect(), accounts, ..Observed::default() };
    let plan = pull::plan(None, &observed, settings);
    let writer = PullWriter::new(client, PullMetrics::default());
    writer.carry_out(&plan, None, &mut Vec::new()).await?;
    info!(secrets = plan.delete.len(), serviceaccounts = plan.accounts.len(), "pull Secrets withdrawn");
    Ok(())
}
