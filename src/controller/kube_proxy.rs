//! The kube-proxy task (`--kube-proxy-configmap`): follows the registry the publisher hands on and, only while it
//! is published at its nodePort on a node's loopback, kube-proxy's shared configuration; tells (a Warning Event on
//! the registry's Service, a metric per reader, a log line once) which of those addresses kube-proxy's mode does
//! not serve there and the fixes ([`kube_proxy::unserved`]). It writes nothing but Events.

mod metrics;

use tokio::sync::watch;
use tracing::{info, warn};

use super::follow::{self, Concern, Follow};
use super::{Context, Error, Handoff};
use crate::escape::safe;
use crate::events::EventLog;
use crate::health::Task;
use crate::kube_proxy::{self, ConfigTarget, Interest, Mode, Observed};
use crate::node::Notice;
use crate::publish::Published;
use crate::watch::sets::ProxyWatches as Watches;
pub use metrics::KubeProxyMetrics;

/// The label of this task's reconcile metrics.
pub const CONTROLLER: &str = "kube-proxy";

/// The task: the shared follower loop (`follow::run`) around `Watching`.
pub struct KubeProxyWatcher {
    follow: Follow<Watches>,
    watching: Watching,
}

/// What is this concern's own: where kube-proxy's configuration is, whether node agents run, and what was told.
struct Watching {
    target: ConfigTarget,
    /// The controller keeps a node plan, so node agents map what they may to the ClusterIP.
    node_agent: bool,
    events: EventLog<Notice>,
    metrics: KubeProxyMetrics,
    /// The mode (or refusal) and the notices last logged, so each is logged once.
    logged_mode: Option<Result<Option<Mode>, String>>,
    logged: Vec<Notice>,
}

impl KubeProxyWatcher {
    pub fn new(
        client: &kube::Client,
        target: ConfigTarget,
        node_agent: bool,
        context: Context,
        published: watch::Receiver<Handoff>,
    ) -> Self {
        let watching = Watching {
            target,
            node_agent,
            events: EventLog::start(client.clone(), "CheckKubeProxy", &context.instance),
            metrics: context.concerns.kube_proxy.clone(),
            logged_mode: None,
            logged: Vec::new(),
        };
        Self { follow: Follow::new(client, context, published), watching }
    }

    /// Watches until `shutdown` completes.
    pub async fn run(self, shutdown: impl Future<Output = ()>) {
        info!(configmap = %self.watching.target, "reading kube-proxy's mode while a loopback nodePort is published");
        follow::run(self.watching, self.follow, shutdown).await;
    }
}

impl Concern for Watching {
    type Watches = Watches;
    const TASK: Task = Task::KubeProxy;
    const CONTROLLER: &'static str = CONTROLLER;
    const FAILED: &'static str = "kube-proxy's mode was not checked";

    fn metrics_started(&self) {
        self.metrics.observed(&[], &[]);
    }

    fn interest(&self, published: Option<&Published>, _: &Observed) -> Interest {
        kube_proxy::interest(published, &self.target)
    }

    async fn pass(&mut self, published: Option<&Published>, observed: &Observed) -> Result<(), Error> {
        let mode = kube_proxy::mode(observed, &self.target);
        // Said only while kube-proxy's configuration is watched, that is while it matters.
        if observed.configs.contains_key(&self.target.key()) {
            self.log_mode(&mode);
        }
        let mode = mode.ok().flatten();
        let unserved = kube_proxy::unserved(published, mode.as_ref(), self.node_agent);
        let at_risk = kube_proxy::at_risk(published, mode.as_ref(), self.node_agent);
        self.metrics.observed(&unserved, &at_risk);
        let notices = kube_proxy::notices(published, mode.as_ref(), &unserved, &at_risk);
        for notice in notices.iter().filter(|notice| !self.logged.contains(notice)) {
            let registry = published.map(|p| p.registry.to_string()).unwrap_or_default();
            warn!(registry = %registry, "{}", safe(&notice.message));
        }
        self.logged.clone_from(&notices);
        self.events.record(notices);
        Ok(())
    }

    async fn finish(self) {
        self.events.finish().await;
    }
}

impl Watching {
    /// Says once what was read of kube-proxy's mode, or why nothing was.
    fn log_mode(&mut self, mode: &Result<Option<Mode>, String>) {
        if self.logged_mode.as_ref() == Some(mode) {
            return;
        }
        match mode {
            Ok(Some(mode)) => info!(
                mode = %mode.name,
                explicit = mode.explicit,
                localhost_gate = mode.localhost_gate,
                node_port_addresses = %safe(&mode.node_port_addresses.join(",")),
                source = %mode.source,
                "kube-proxy's mode"
            ),
            Ok(None) => info!(
                configmap = %self.target,
                "kube-proxy's mode is not shown there (no such ConfigMap, or no mode word in it): not checked"
            ),
            Err(refusal) => warn!(
                configmap = %self.target,
                "kube-proxy's mode cannot be read, so loopback nodePorts are not checked: {}",
                safe(refusal)
            ),
        }
        self.logged_mode = Some(mode.clone());
    }
}
