//! The node-plan task (`--node-plan-configmap`): follows the registry the publisher hands on and keeps
//! [`node::plan`] of it in one ConfigMap of the controller's own namespace, which is all a node agent reads. It
//! writes only when the plan changed, and retries on its own clock, so the ConfigMap path never waits for it.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, Patch, PatchParams};
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::{error, info};

use super::{Context, Error, Handoff};
use crate::backoff::RetryClock;
use crate::health::{HEARTBEAT, Task};
use crate::keys::MANAGER;
use crate::node::{self, NodePlan, PLAN_KEY};
use crate::settings::NodePlanTarget;

/// The label of this task's reconcile metrics.
pub const CONTROLLER: &str = "node-plan";

pub struct NodePlanner {
    api: Api<ConfigMap>,
    target: NodePlanTarget,
    context: Context,
    published: watch::Receiver<Handoff>,
    /// What the ConfigMap holds as far as this task knows; `None` until read or written once.
    stored: Option<NodePlan>,
}

impl NodePlanner {
    pub fn new(
        client: &kube::Client,
        target: NodePlanTarget,
        context: Context,
        published: watch::Receiver<Handoff>,
    ) -> Self {
        Self { api: Api::namespaced(client.clone(), &target.namespace), target, context, published, stored: None }
    }

    /// Keeps the plan until `shutdown` completes.
    pub async fn run(mut self, shutdown: impl Future<Output = ()>) {
        info!(configmap = %self.target, "keeping the node plan");
        futures::pin_mut!(shutdown);
        let health = self.context.health.clone();
        health.start(Task::NodePlan);
        health.set_synced(Task::NodePlan, true);
        let mut retry = RetryClock::for_writes();
        let mut heartbeat = tokio::time::interval(HEARTBEAT);
        loop {
            let trigger = tokio::select! {
                () = &mut shutdown => break,
                Ok(()) = self.published.changed() => "published",
                () = retry.due() => "retry",
                Ok(()) = self.context.leading.changed() => "leadership",
                _ = heartbeat.tick() => {
                    health.beat(Task::NodePlan, true);
                    continue;
                }
            };
            retry.disarm();
            let Handoff::Decided(published) = self.published.borrow().clone() else {
                continue;
            };
            if !*self.context.leading.borrow() {
                continue;
            }
            let started = Instant::now();
            let outcome = self.keep(node::plan(published.as_deref())).await;
            self.context.metrics.reconciled(CONTROLLER, outcome.is_ok(), started.elapsed());
            match outcome {
                Ok(()) => retry.succeeded(),
                Err(error) => {
                    let after = retry.failed();
                    self.context.metrics.reconcile_failed(CONTROLLER, error.metric_label());
                    error!(%error, trigger, reason = error.metric_label(), retry_in = ?after, "the node plan was not written");
                }
            }
        }
    }

    /// Writes `plan` unless the ConfigMap already holds it.
    async fn keep(&mut self, plan: NodePlan) -> Result<(), Error> {
        if self.stored.is_none() {
            let found = self
                .api
                .get_opt(&self.target.name)
                .await
                .map_err(|source| Error::Read { target: self.target.to_string(), source })?;
            self.stored = found.as_ref().and_then(stored_plan);
        }
        if self.stored.as_ref() == Some(&plan) {
            return Ok(());
        }
        let params = PatchParams::apply(MANAGER).force();
        self.api
            .patch(&self.target.name, &params, &Patch::Apply(desired(&self.target, &plan)))
            .await
            .map_err(|source| Error::Apply { target: self.target.to_string(), source })?;
        self.context.metrics.wrote("apply");
        info!(configmap = %self.target, hosts = plan.hosts.len(), "node plan written");
        self.stored = Some(plan);
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
