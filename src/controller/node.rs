//! The node-plan task (`--node-plan-configmap`): follows the registry the publisher hands on, and the CA bundle a
//! TLS registry names, and keeps [`node::plan`] of them in one ConfigMap of the controller's own namespace, which is
//! all a node agent reads. It writes only when the plan changed, and retries on its own clock (the loop every
//! following concern shares, `follow::run`), so the ConfigMap path never waits for it.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{ConfigMap, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, Patch, PatchParams};
use tokio::sync::watch;
use tracing::{info, warn};

use super::follow::{self, Concern, Follow};
use super::watch::{Signals, settle, watch_sets};
use super::{Context, Error, Handoff};
use crate::escape::safe;
use crate::events::EventLog;
use crate::health::Task;
use crate::keys::MANAGER;
use crate::node::{self, Interest, NodePlan, Notice, Observed, PLAN_KEY, Reason, node_watch_sets};
use crate::publish::Published;
use crate::settings::NodePlanTarget;

watch_sets!(node_watch_sets, Watches, Interest, Observed);

/// The label of this task's reconcile metrics.
pub const CONTROLLER: &str = "node-plan";

/// The node decision about `published` as the running controller would make it with the admin's `rules`, once the
/// CA bundle it names and the mirrors' Services were read (for `doctor`, which reads with its own identity).
pub async fn observe(client: &kube::Client, published: Option<&Published>, rules: &node::Rules) -> node::Decision {
    let signals = Signals::new(crate::metrics::Metrics::default(), Arc::default());
    let mut watches = Watches::new(client, &signals);
    loop {
        if let Some(observed) = settle(&mut watches, &signals, |_| node::interest(published, rules)) {
            return node::decide(published, &observed, rules);
        }
        signals.changed.notified().await;
    }
}

/// The task: the shared follower loop (`follow::run`) around `Planning`.
pub struct NodePlanner {
    follow: Follow<Watches>,
    planning: Planning,
}

/// What is this concern's own: where the plan goes, what it holds, and the Event log.
struct Planning {
    api: Api<ConfigMap>,
    target: NodePlanTarget,
    events: EventLog<Notice>,
    metrics: crate::metrics::Metrics,
    /// What the ConfigMap holds as far as this task knows; `None` until read or written once.
    stored: Option<NodePlan>,
    /// The last problems logged (the CA bundle's, the refused addresses', the mirrors'), so each is logged once.
    logged: (Option<String>, Option<String>, Option<String>),
}

impl NodePlanner {
    pub fn new(
        client: &kube::Client,
        target: NodePlanTarget,
        context: Context,
        published: watch::Receiver<Handoff>,
    ) -> Self {
        let planning = Planning {
            api: Api::namespaced(client.clone(), &target.namespace),
            events: EventLog::start(client.clone(), "PlanNodes", &context.instance),
            metrics: context.metrics.clone(),
            target,
            stored: None,
            logged: (None, None, None),
        };
        Self { follow: Follow::new(context, published, |signals| Watches::new(client, signals)), planning }
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
        self.metrics.node_addresses_refused(decision.refused.len());
        self.metrics.node_mirrors_unusable(decision.mirror_problems.len());
        self.tell_problems(published, &decision);
        self.keep(decision.plan).await
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
        let ca = decision.ca_problem.as_ref().map(|why| format!("no node is configured to pull it: {why}"));
        let refused = node::refusal_message(&decision.refused);
        let mirrors = (!decision.mirror_problems.is_empty())
            .then(|| format!("each node pulls these upstreams directly: {}", decision.mirror_problems.join("; ")));
        if let Some(published) = published {
            for (said, logged) in [(&ca, &self.logged.0), (&refused, &self.logged.1)] {
                if said != logged
                    && let Some(why) = said
                {
                    warn!(registry = %published.registry, "{}", safe(why));
                }
            }
        }
        if mirrors != self.logged.2
            && let Some(why) = &mirrors
        {
            warn!(configmap = %self.target, "{}", safe(why));
        }
        self.logged = (ca.clone(), refused.clone(), mirrors.clone());
        let plan = ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("ConfigMap".into()),
            namespace: Some(self.target.namespace.clone()),
            name: Some(self.target.name.clone()),
            ..ObjectReference::default()
        };
        let on_registry =
            [(Reason::CaBundleUnusable, ca), (Reason::AddressNotAllowed, refused)].into_iter().filter_map(
                |(reason, message)| Some(Notice { regarding: published?.reference.clone(), reason, message: message? }),
            );
        let on_plan = mirrors.map(|message| Notice { regarding: plan, reason: Reason::MirrorUnusable, message });
        self.events.record(on_registry.chain(on_plan).collect());
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
        self.metrics.wrote("apply");
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
