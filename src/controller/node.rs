//! The node-plan task (`--node-plan-configmap`): follows the registry the publisher hands on, and the CA bundle a
//! TLS registry names, and keeps [`node::plan`] of them in one ConfigMap of the controller's own namespace, which is
//! all a node agent reads. It writes only when the plan changed, and retries on its own clock (the loop every
//! following concern shares, `follow::run`), so the ConfigMap path never waits for it.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, Patch, PatchParams};
use tokio::sync::watch;
use tracing::{info, warn};

mod metrics;

use super::follow::{self, Concern, Follow};
use super::{Context, Error, Handoff};
use crate::escape::safe;
use crate::events::EventLog;
use crate::health::Task;
use crate::keys::MANAGER;
use crate::node::NodePlanTarget;
use crate::node::{self, Interest, NodePlan, Notice, Observed, PLAN_KEY, Reason};
use crate::publish::Published;
use crate::watch::sets::NodeWatches as Watches;
pub use metrics::NodePlanMetrics;

/// The label of this task's reconcile metrics.
pub const CONTROLLER: &str = "node-plan";

/// The task: the shared follower loop (`follow::run`) around `Planning`.
pub struct NodePlanner {
    follow: Follow<Watches>,
    planning: Planning,
}

/// What is this concern's own: where the plan goes, what it holds, and the Event log.
struct Planning {
    target: NodePlanTarget,
    writer: PlanWriter,
    events: EventLog<Notice>,
    metrics: NodePlanMetrics,
    /// The problems last told (the CA bundle's, the refused addresses', the mirrors'), so each is logged once.
    logged: Vec<Notice>,
}

impl NodePlanner {
    pub fn new(
        client: &kube::Client,
        target: NodePlanTarget,
        context: Context,
        published: watch::Receiver<Handoff>,
    ) -> Self {
        let planning = Planning {
            writer: PlanWriter::new(client, &target, context.concerns.node_plan.clone()),
            events: EventLog::start(client.clone(), "PlanNodes", &context.instance),
            metrics: context.concerns.node_plan.clone(),
            target,
            logged: Vec::new(),
        };
        Self { follow: Follow::new(client, context, published), planning }
    }

    /// Keeps the plan until `shutdown` completes.
    pub async fn run(self, shutdown: impl Future<Output = ()>) {
        info!(configmap = %self.planning.target, "keeping the node plan");
        follow::run(self.planning, self.follow, shutdown).await;
    }
}

impl Concern for Planning {
    type Watches = Watches;
    const TASK: Task = Task::NodePlan;
    const CONTROLLER: &'static str = CONTROLLER;
    const FAILED: &'static str = "the node plan was not written";

    fn interest(&self, published: Option<&Published>, _: &Observed) -> Interest {
        node::interest(published, &self.target.rules)
    }

    async fn pass(&mut self, published: Option<&Published>, observed: &Observed) -> Result<(), Error> {
        let decision = node::decide(published, observed, &self.target.rules);
        self.metrics.decided(decision.refused.len(), decision.mirror_problems.len());
        self.tell_problems(published, &decision);
        // Stamped, so an agent knows the plan is this configuration's (one write after a restart with a new one).
        let plan = NodePlan { stamp: self.target.stamp.clone(), ..decision.plan };
        self.writer.keep(plan).await
    }

    async fn finish(self) {
        self.events.finish().await;
    }
}

impl Planning {
    /// Tells why the published registry, or some of its addresses, get no node file, on its Service; and why a
    /// mirror gets none, on the plan's ConfigMap (what the admin's setting feeds). Each is logged once and an Event
    /// for as long as it lasts.
    fn tell_problems(&mut self, published: Option<&Published>, decision: &node::Decision) {
        let notices = decision.notices(published.map(|p| &p.reference), &self.target.reference());
        for notice in notices.iter().filter(|notice| !self.logged.contains(notice)) {
            match published.filter(|_| notice.reason != Reason::MirrorUnusable) {
                Some(published) => warn!(registry = %published.registry, "{}", safe(&notice.message)),
                None => warn!(configmap = %self.target, "{}", safe(&notice.message)),
            }
        }
        self.logged.clone_from(&notices);
        self.events.record(notices);
    }
}

/// The one writer of the plan's ConfigMap: server-side apply of its data, only when the plan changed.
struct PlanWriter {
    api: Api<ConfigMap>,
    target: NodePlanTarget,
    metrics: NodePlanMetrics,
    /// What the ConfigMap holds as far as this task knows: `None` until read once, then the plan it holds (none in
    /// the chart's empty one) until a write replaces it.
    stored: Option<Option<NodePlan>>,
}

impl PlanWriter {
    fn new(client: &kube::Client, target: &NodePlanTarget, metrics: NodePlanMetrics) -> Self {
        Self { api: Api::namespaced(client.clone(), &target.namespace), target: target.clone(), metrics, stored: None }
    }

    /// Writes `plan` unless the ConfigMap already holds it.
    async fn keep(&mut self, plan: NodePlan) -> Result<(), Error> {
        if self.stored.is_none() {
            let found = self
                .api
                .get_opt(&self.target.name)
                .await
                .map_err(|source| Error::Read { target: self.target.to_string(), source })?;
            self.stored = Some(found.as_ref().and_then(stored_plan));
        }
        if self.stored.as_ref().is_some_and(|held| held.as_ref() == Some(&plan)) {
            return Ok(());
        }
        let params = PatchParams::apply(MANAGER).force();
        self.api
            .patch(&self.target.name, &params, &Patch::Apply(desired(&self.target, &plan)))
            .await
            .map_err(|source| Error::Apply { target: self.target.to_string(), source })?;
        self.metrics.wrote();
        info!(configmap = %self.target, hosts = plan.hosts.len(), "node plan written");
        self.stored = Some(Some(plan));
        Ok(())
    }
}

fn stored_plan(configmap: &ConfigMap) -> Option<NodePlan> {
    NodePlan::from_json(configmap.data.as_ref()?.get(PLAN_KEY)?).ok()
}

/// Exactly the fields this controller owns in the plan's ConfigMap: its data. The chart creates the ConfigMap
/// with its own labels (and `helm uninstall` deletes it), so nothing else is claimed.
fn desired(target: &NodePlanTarget, plan: &NodePlan) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(target.name.clone()),
            namespace: Some(target.namespace.clone()),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([(PLAN_KEY.to_string(), plan.to_json())])),
        ..ConfigMap::default()
    }
}

#[cfg(test)]
mod tests;
