//! Everything that talks to the API server on the controller's behalf, one task per concern: the [`publisher`]
//! keeps the ConfigMap true and hands on the registry readers see; [`pull`] distributes that registry's pull
//! credentials; [`node`] keeps the plan that node agents write into each node's container runtime;
//! [`kube_proxy`] tells which published loopback nodePorts kube-proxy does not serve. Each task has
//! its own watches ([`crate::watch`]), sync gate, retries, Events and metrics, and calls its concern's pure decision.
//! [`withdraw`] is the uninstall hook.

mod follow;
pub mod kube_proxy;
pub mod node;
pub mod publisher;
pub mod pull;
mod withdraw;

pub use withdraw::{Error as WithdrawError, Outcome as WithdrawOutcome, withdraw};

use std::sync::Arc;
use std::time::Duration;

use kube::Client;
use tokio::sync::watch as channel;

use crate::health::{HEARTBEAT, Health};
use crate::metrics::Metrics;
use crate::publish::Published;
use crate::settings::Settings;

/// What the publisher hands on to the other concerns: the registry readers see.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum Handoff {
    /// Its first pass has not ended yet: nothing is known, so nothing may be withdrawn on that account.
    #[default]
    Pending,
    /// The registry readers see, if any.
    Decided(Option<Arc<Published>>),
    /// Readers keep seeing the last good document although the registry that published it now has a problem (an
    /// invalid annotation, an ambiguous port): everything that follows from that document (the node plan, pull
    /// Secrets) stays as it is too.
    Kept,
}

/// A write or read the API server refused, or that did not reach it.
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
    /// Every [`Error::metric_label`].
    pub const LABELS: [&'static str; 3] = ["read", "apply", "delete"];

    /// A bounded label for metrics and logs.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::Read { .. } => "read",
            Error::Apply { .. } => "apply",
            Error::Delete { .. } => "delete",
        }
    }

    /// What was being written or read.
    pub fn target(&self) -> &str {
        let (Error::Read { target, .. } | Error::Apply { target, .. } | Error::Delete { target, .. }) = self;
        target
    }

    /// What the API server said, for users: its own message when it refused, else the transport error.
    pub fn refusal(&self) -> String {
        let (Error::Read { source, .. } | Error::Apply { source, .. } | Error::Delete { source, .. }) = self;
        match source {
            kube::Error::Api(status) => format!("{} ({})", status.message, status.reason),
            other => other.to_string(),
        }
    }
}

/// What each concern counts of its own, beside every task's [`Metrics`]: each kept and registered by its own module,
/// so a new concern adds its metrics in its own folder and one line here.
#[derive(Clone, Debug, Default)]
pub struct ConcernMetrics {
    pub publisher: publisher::PublisherMetrics,
    pub pull: pull::PullMetrics,
    pub node_plan: node::NodePlanMetrics,
    pub kube_proxy: kube_proxy::KubeProxyMetrics,
}

impl ConcernMetrics {
    pub fn register(&self, registry: &mut prometheus_client::registry::Registry) {
        self.publisher.register(registry);
        self.pull.register(registry);
        self.node_plan.register(registry);
        self.kube_proxy.register(registry);
    }
}

/// What every task shares with the rest of the process.
#[derive(Clone)]
pub struct Context {
    pub metrics: Metrics,
    pub concerns: ConcernMetrics,
    pub health: Arc<Health>,
    /// Whether this replica may write; always true without leader election.
    pub leading: channel::Receiver<bool>,
    /// This replica's name in the Events it posts (`reportingInstance`): its pod's name, which `doctor` checks.
    pub instance: String,
    _always_leading: Option<Arc<channel::Sender<bool>>>,
}

impl Context {
    /// `leading` comes from a leader elector; `None` means this replica always leads.
    pub fn new(
        metrics: Metrics,
        concerns: ConcernMetrics,
        health: Arc<Health>,
        leading: Option<channel::Receiver<bool>>,
    ) -> Self {
        let instance = crate::pod::name();
        match leading {
            Some(leading) => Self { metrics, concerns, health, leading, instance, _always_leading: None },
            None => {
                let (sender, leading) = channel::channel(true);
                metrics.leading(true);
                Self { metrics, concerns, health, leading, instance, _always_leading: Some(Arc::new(sender)) }
            }
        }
    }

    /// A single replica without leader election, with metrics of its own.
    pub fn standalone() -> Self {
        Self::new(Metrics::default(), ConcernMetrics::default(), Arc::default(), None)
    }
}

/// The controller: every concern's task, started together and stopped together.
pub struct Controller {
    client: Client,
    settings: Settings,
    /// The node concern's own settings: where it keeps the plan, and the admin's rules; `None` plans nothing.
    node_plan: Option<crate::node::NodePlanTarget>,
    /// Where kube-proxy's configuration is read; `None` reads nothing.
    kube_proxy: Option<crate::kube_proxy::ConfigTarget>,
    context: Context,
}

impl Controller {
    /// The publisher with `settings` (and pull credentials, when they say so).
    pub fn new(client: Client, settings: Settings, context: Context) -> Self {
        Self { client, settings, node_plan: None, kube_proxy: None, context }
    }

    /// Also keeps the node plan in `target`.
    pub fn node_plan(self, target: Option<crate::node::NodePlanTarget>) -> Self {
        Self { node_plan: target, ..self }
    }

    /// Also reads kube-proxy's mode from `target`.
    pub fn kube_proxy(self, target: Option<crate::kube_proxy::ConfigTarget>) -> Self {
        Self { kube_proxy: target, ..self }
    }

    /// Runs every task until `shutdown` completes.
    pub async fn run(self, shutdown: impl Future<Output = ()>) {
        let Self { client, settings, node_plan, kube_proxy, context } = self;
        let (stop, stopping) = channel::channel(false);
        let stopped = move || {
            let mut stopping = stopping.clone();
            async move {
                let _ = stopping.wait_for(|stop| *stop).await;
            }
        };
        let probe = tokio::spawn(probe_api(client.clone(), context.health.clone()));
        let (hand_on, published) = channel::channel(Handoff::Pending);
        let pull = settings.pull_secrets.clone().map(|pull| {
            let distributor = pull::PullDistributor::new(&client, pull, context.clone(), published);
            tokio::spawn(distributor.run(stopped()))
        });
        let kube_proxy = kube_proxy.map(|target| {
            let node_agent = node_plan.is_some();
            let watcher =
                kube_proxy::KubeProxyWatcher::new(&client, target, node_agent, context.clone(), hand_on.subscribe());
            tokio::spawn(watcher.run(stopped()))
        });
        let node_plan = node_plan.map(|target| {
            let planner = node::NodePlanner::new(&client, target, context.clone(), hand_on.subscribe());
            tokio::spawn(planner.run(stopped()))
        });
        let publisher = publisher::Publisher::new(&client, settings, context, hand_on);
        let publishing = publisher.run(stopped());
        futures::pin_mut!(shutdown, publishing);
        tokio::select! {
            () = &mut shutdown => {}
            () = &mut publishing => {}
        }
        let _ = stop.send(true);
        publishing.await;
        for task in [pull, node_plan, kube_proxy].into_iter().flatten() {
            let _ = task.await;
        }
        probe.abort();
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

#[cfg(test)]
mod tests {
    use super::ConcernMetrics;
    use crate::metrics::Metrics;

    /// Every metric the controller and the node agent export, as the `# HELP` lines of their registries name them.
    fn exported() -> Vec<String> {
        // A family shows in a scrape once it has a series: each is given one, as a running controller's are.
        let (metrics, concerns) = (Metrics::default(), ConcernMetrics::default());
        metrics.task_started("publisher", &["read"]);
        metrics.watch_started("Service");
        metrics.leading(true);
        concerns.publisher.started();
        concerns.publisher.published(Some(&crate::hosting::LocalRegistryHostingV1::default()), None);
        concerns.pull.started();
        concerns.kube_proxy.observed(&[], &[]);
        let mut controller = metrics.registry();
        concerns.register(&mut controller);
        let reporting = crate::agent::Reporting::default();
        let relayed = reporting.metrics.relay.counters("registry/registry");
        relayed.refused();
        reporting.metrics.relay.serving(&[("registry/registry".into(), 1)]);
        let agent = reporting.metrics.registry();
        [Metrics::encode(&controller), Metrics::encode(&agent)]
            .iter()
            .flat_map(|text| {
                text.lines().filter_map(|l| l.strip_prefix("# HELP ")?.split(' ').next()).map(String::from)
            })
            .collect()
    }

    #[test]
    fn the_readme_names_every_metric_the_controller_and_the_agents_export() {
        let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).expect("README.md");
        let names = exported();
        assert!(names.len() > 20, "{names:?}");
        let missing: Vec<&String> = names.iter().filter(|name| !readme.contains(name.as_str())).collect();
        assert!(missing.is_empty(), "README.md (Operating it, Metrics) does not name {missing:?}");
    }
}
