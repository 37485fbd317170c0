//! The node agent (`local-registry-publisher node-agent`), which the chart's opt-in DaemonSet runs on every node:
//! it watches the one ConfigMap holding the node plan (nothing cluster-wide) and keeps its node's runtime
//! configuration true to it, through [`runtime::NodeRuntime`] (containerd's hosts directory). It re-checks the directory every `resync`, so a directory emptied by hand or
//! a node's fresh disk is written again without a restart. When its DaemonSet is gone (uninstall, or the feature
//! turned off), or now mounts another hosts directory (`nodeAgent.configPath` changed), it removes what it wrote
//! before it exits; any other rolling update keeps the files for the next pod. It keeps its node's NodePullState
//! ([`crate::node::api::state`]) for `doctor`, and serves /healthz, /readyz and its own /metrics ([`AgentMetrics`]).

mod metrics;
pub mod relay;
pub mod runtime;
mod state;
mod writer;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{ConfigMap, Node, ObjectReference};
use kube::Client;
use kube::api::Api;
use kube::runtime::watcher::Event;
use kube::runtime::{WatchStreamExt, watcher};
use tracing::{error, info, warn};

use crate::backoff;
use crate::config::RuntimeKind;
use crate::escape::safe;
use crate::events::EventLog;
use crate::health::{HEARTBEAT, Health, Task};
use crate::node::api::state::ConfigPathCheck;
use crate::node::api::state::{Agent, NodePullState, NodeState, PlanApplied, STALE_AFTER_RESYNCS};
use crate::node::{NodePlan, PLAN_FORMAT, PLAN_KEY};
pub use metrics::AgentMetrics;
use runtime::containerd::Containerd;
use runtime::crio::Crio;
use runtime::owner::Owner;
pub use runtime::{NodeRuntime, Placement, Reading, Report};

/// What the agent is told by its flags.
#[derive(Clone, Debug)]
pub struct AgentSettings {
    pub namespace: String,
    pub configmap: String,
    /// The node's runtime.
    pub runtime: RuntimeKind,
    /// Where `config_path` is mounted into the agent (containerd).
    pub config_path_mount: Option<PathBuf>,
    /// The DaemonSet running this agent: while it exists, a stopping agent leaves its files for the next pod.
    pub daemonset: Option<String>,
    /// The node it runs on, whose NodePullState it keeps; `None` keeps none.
    pub node_name: Option<String>,
    /// containerd's registry config_path (its hosts directory) as the node sees it: what containerd's config must
    /// name, and, when the DaemonSet's pods mount another one, where a stopping agent removes its files, which no
    /// agent would see again.
    pub config_path: Option<String>,
    pub resync: Duration,
    /// containerd's config file, mounted at its path on the node, to check that containerd reads `config_path`.
    pub runtime_config: Option<PathBuf>,
    /// Serve the plan's relays on the node's loopback (`--relay`); `None`: the agent does not relay.
    pub relay: Option<relay::RelaySettings>,
}

/// What the agent reports through: its probes and its metrics.
#[derive(Clone, Debug, Default)]
pub struct Reporting {
    pub health: Arc<Health>,
    pub metrics: AgentMetrics,
}

/// Keeps the hosts directory until `shutdown` completes; `Err` names why it could not start.
pub async fn run(
    client: Client,
    settings: AgentSettings,
    reporting: Reporting,
    shutdown: impl Future<Output = ()>,
) -> Result<(), String> {
    let Reporting { health, metrics } = reporting;
    let runtime_version = runtime_version(&client, settings.node_name.as_deref()).await;
    let kind = match settings.runtime {
        RuntimeKind::Auto => runtime_of(runtime_version.as_deref()),
        chosen => chosen,
    };
    // Told in the node's state as files that go unread: the runtime chosen is not the node's.
    let mismatch = mismatch(kind, runtime_version.as_deref());
    let node_runtime: Box<dyn NodeRuntime> = match (kind, &settings.config_path_mount) {
        // Auto is resolved above; it would be containerd, the runtime a node that says nothing runs most likely.
        (RuntimeKind::Auto | RuntimeKind::Containerd, Some(mount)) => {
            let placement = Placement {
                config_path_mount: mount.clone(),
                config_path: settings.config_path.clone(),
                config: settings.runtime_config.clone(),
            };
            let owner = Owner::new(&settings.namespace, &settings.configmap);
            Box::new(Containerd::new(placement, owner, runtime_version.as_deref())?)
        }
        (RuntimeKind::Crio, Some(mount)) => {
            let placement = Placement {
                config_path_mount: mount.clone(),
                config_path: settings.config_path.clone(),
                config: settings.runtime_config.clone(),
            };
            Box::new(Crio::new(placement, Owner::new(&settings.namespace, &settings.configmap))?)
        }
        (RuntimeKind::Auto | RuntimeKind::Containerd | RuntimeKind::Crio, None) => {
            return Err("--runtime auto, containerd and crio need --config-path-mount".into());
        }
        (RuntimeKind::None, _) => Box::new(runtime::Unconfigured),
    };
    let mut relays = settings.relay.map(|relay| relay::Relays::new(relay, metrics.relay.clone()));
    let node_runtime: &dyn NodeRuntime = node_runtime.as_ref();
    info!(
        configmap = %format!("{}/{}", settings.namespace, settings.configmap),
        config_path_mount = %safe(&node_runtime.location()),
        "keeping this node's registry hosts"
    );
    let api = Api::<ConfigMap>::namespaced(client.clone(), &settings.namespace);
    let config = watcher::Config::default().fields(&crate::watching::name_selector(&settings.configmap));
    let events = watcher(api, config).backoff(backoff::exponential(backoff::WATCH_CAP));
    // Its own state, by name: anyone else's write to it is undone at once (the chart's admission policy keeps other
    // nodes' agents out; a cluster admin's hand is not).
    let own_state = match settings.node_name.as_deref() {
        Some(node) => {
            let api = Api::<NodePullState>::namespaced(client.clone(), &settings.namespace);
            let config = watcher::Config::default().fields(&crate::watching::name_selector(node));
            watcher(api, config).backoff(backoff::exponential(backoff::WATCH_CAP)).boxed()
        }
        None => futures::stream::pending().boxed(),
    };
    futures::pin_mut!(events, shutdown, own_state);
    let mut resync = tokio::time::interval(settings.resync);
    // Ready once a plan was read; live while this loop turns.
    health.start(Task::NodeAgent);
    let mut heartbeat = tokio::time::interval(HEARTBEAT);
    // What it did and left alone is told as Events on its own Pod, which `doctor` reads per node.
    let instance = crate::pod::name();
    let told = EventLog::start(client.clone(), "ConfigureNodeRuntime", &instance);
    let regarding = ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        name: Some(instance),
        namespace: Some(settings.namespace.clone()),
        uid: std::env::var("POD_UID").ok(),
        ..ObjectReference::default()
    };
    let mut following = Following::default();
    let mut last = Report::default();
    let mut runtime = Reading::UNCHECKED;
    let daemonset = settings.daemonset.as_deref();
    let mut state = settings
        .node_name
        .as_deref()
        .map(|node| writer::StateWriter::new(&client, &settings.namespace, node, daemonset));
    if state.is_none() {
        warn!("no --node-name (NODE_NAME): this node's state is not kept, so doctor cannot tell it");
    }
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            event = events.next() => match event {
                Some(Ok(event)) => {
                    health.set_api_reachable(true);
                    following.on(event);
                }
                Some(Err(error)) => {
                    health.set_api_reachable(false);
                    metrics.watch_restarted();
                    warn!(%error, "watching the node plan failed; retrying");
                    continue;
                }
                None => break,
            },
            event = own_state.next() => match (event, &mut state) {
                (Some(Ok(Event::Apply(found) | Event::InitApply(found))), Some(writer)) => {
                    if !writer.overwritten(&found) {
                        continue;
                    }
                    warn!("this node's NodePullState was changed by someone else; writing what this agent found again");
                }
                (Some(Ok(Event::Delete(_))), Some(writer)) => writer.forget(),
                (Some(Err(error)), _) => {
                    warn!(%error, "watching this node's state failed; retrying");
                    continue;
                }
                _ => continue,
            },
            _ = heartbeat.tick() => {
                health.beat(Task::NodeAgent, true);
                continue;
            }
            _ = resync.tick() => {}
        }
        if let Some(applied) = &following.plan {
            // A ConfigMap the controller has not written yet (the chart's empty one) holds no plan: touch nothing.
            if applied.written
                && let Some(report) = sync(node_runtime, &applied.plan, &last)
            {
                metrics.files_changed(&report);
                last = report;
            }
            let found = match &mismatch {
                Some(said) => {
                    Reading { check: ConfigPathCheck::Elsewhere, said: Some(said.clone()), ..node_runtime.check() }
                }
                None => node_runtime.check(),
            };
            if found != runtime {
                tell_runtime(&found);
                runtime = found;
            }
            let relayed = relays.as_mut().map(|relays| relays.apply(&applied.plan.relays));
            // One derivation: the object, the Events and the metrics all say this.
            let found = state::Found {
                report: &last,
                runtime: &runtime,
                too_new: following.too_new,
                pending: applied.pending.as_deref(),
                relays: relayed.as_deref(),
                runtime_files: node_runtime.writes_files(),
            };
            let derived = state::derive(&applied.plan, found);
            metrics.observed(&derived);
            told.record(state::notices(&regarding, &derived));
            let kept = match &mut state {
                Some(writer) => keep_state(writer, &settings, applied, derived).await,
                None => true,
            };
            health.set_synced(Task::NodeAgent, kept);
            health.passed(Task::NodeAgent, settings.resync * STALE_AFTER_RESYNCS);
        }
    }
    told.finish().await;
    // Listeners close now, before the clean-up's API calls.
    drop(relays);
    if let Some(why) = leaving(&client, &settings).await {
        // Its state first: once the files are gone, nothing of this agent says the node is configured.
        if let Some(writer) = &state
            && let Err(error) = writer.remove().await
        {
            warn!(%error, "this node's state (NodePullState) was not deleted; its DaemonSet's garbage collection takes it");
        }
        let removed = sync(node_runtime, &NodePlan::default(), &Report::default()).map_or(0, |r| r.removed.len());
        info!(removed, "{}: this agent's files are removed", safe(&why));
    }
    Ok(())
}

/// Which plan is in force, as the watch of its ConfigMap reports it. None (nothing on the node is touched) until a
/// plan was read; a relist replaces it only once it has ended.
#[derive(Debug, Default)]
struct Following {
    /// The plan a (re)list under way found.
    listing: Option<Applied>,
    plan: Option<Applied>,
    /// A plan of a newer format than this agent knows: refused whole, the last plan stays in force.
    too_new: Option<u32>,
}

impl Following {
    fn on(&mut self, event: Event<ConfigMap>) {
        match event {
            Event::Init => self.listing = None,
            Event::InitApply(configmap) => self.listing = self.read(&configmap).or_else(|| self.plan.clone()),
            Event::InitDone => self.plan = self.listing.take().or(self.plan.take()),
            Event::Apply(configmap) => self.plan = self.read(&configmap).or(self.plan.take()),
            // Only an uninstall deletes it, and then the DaemonSet goes too: its removal is what clears the node.
            // A ConfigMap deleted by hand leaves the last plan in force.
            Event::Delete(_) => warn!("the node plan's ConfigMap was deleted; the last plan stays in force"),
        }
    }

    fn read(&mut self, configmap: &ConfigMap) -> Option<Applied> {
        let (found, refused) = read_plan(configmap);
        self.too_new = refused;
        // The chart's empty ConfigMap, met after a plan: the last plan stays in force, pending.
        match (found, &self.plan) {
            (Some(empty), Some(last)) if !empty.written => Some(Applied { pending: empty.pending, ..last.clone() }),
            (found, _) => found,
        }
    }
}

/// This node's runtime and its release (`containerd://2.3.7`), from its Node (read once: the runtime is upgraded with
/// the node, and the agent restarts with it); `None` when it cannot be read, and then the runtime's configuration is
/// checked as most releases read it.
/// The runtime a node's `containerRuntimeVersion` names: CRI-O for `cri-o://`, containerd for anything else.
fn runtime_of(version: Option<&str>) -> RuntimeKind {
    match version {
        Some(version) if version.starts_with("cri-o://") => RuntimeKind::Crio,
        _ => RuntimeKind::Containerd,
    }
}

/// Why the files of runtime `chosen` go unread on a node reporting `version`, when it names another runtime the agent
/// configures.
fn mismatch(chosen: RuntimeKind, version: Option<&str>) -> Option<String> {
    let version = version?;
    let (runs, should) = match (chosen, runtime_of(Some(version))) {
        (RuntimeKind::Containerd, RuntimeKind::Crio) => ("CRI-O", "crio"),
        (RuntimeKind::Crio, RuntimeKind::Containerd) if version.starts_with("containerd://") => {
            ("containerd", "containerd")
        }
        _ => return None,
    };
    Some(format!(
        "this node runs {runs} ({}), which does not read what --runtime={} writes: set nodeAgent.runtime={should} \
         (--runtime={should}), or leave --runtime to auto",
        safe(version),
        chosen_name(chosen)
    ))
}

fn chosen_name(kind: RuntimeKind) -> &'static str {
    match kind {
        RuntimeKind::Auto => "auto",
        RuntimeKind::Containerd => "containerd",
        RuntimeKind::Crio => "crio",
        RuntimeKind::None => "none",
    }
}

async fn runtime_version(client: &Client, node: Option<&str>) -> Option<String> {
    let found = Api::<Node>::all(client.clone()).get_opt(node?).await;
    let found = found.inspect_err(|error| warn!(%error, "cannot read this node's runtime release")).ok()??;
    let version = found.status?.node_info?.container_runtime_version;
    info!(runtime = %safe(&version), "this node's container runtime");
    Some(version)
}

/// A plan and the version of its ConfigMap it was read from.
#[derive(Clone, Debug)]
struct Applied {
    plan: NodePlan,
    resource_version: String,
    /// The ConfigMap holds a plan the controller wrote (not the chart's empty one).
    written: bool,
    /// Why the plan is not yet the one this release's controller configuration writes, while it is not.
    pending: Option<String>,
}

/// Writes this node's state when it changed; whether the object now holds it.
async fn keep_state(
    writer: &mut writer::StateWriter,
    settings: &AgentSettings,
    applied: &Applied,
    derived: state::Derived,
) -> bool {
    let state::Derived { runtime, addresses, configured, relays, relay_serving } = derived;
    let found = NodeState {
        node: settings.node_name.clone().unwrap_or_default(),
        agent: Agent {
            pod: crate::pod::name(),
            uid: std::env::var("POD_UID").unwrap_or_default(),
            version: env!("CARGO_PKG_VERSION").into(),
        },
        plan: PlanApplied {
            config_map: settings.configmap.clone(),
            resource_version: applied.resource_version.clone(),
            format: applied.plan.format,
        },
        runtime,
        address_count: u32::try_from(addresses.len()).unwrap_or(u32::MAX),
        addresses,
        relays,
        resync_seconds: settings.resync.as_secs(),
        changed: String::new(),
        conditions: Vec::new(),
    };
    match writer.keep(found, &configured, relay_serving.as_ref()).await {
        Ok(wrote) => {
            if wrote {
                info!("this node's state written (NodePullState)");
            }
            true
        }
        Err(error) => {
            warn!(%error, "this node's state (NodePullState) was not written; retrying at the next pass");
            false
        }
    }
}

/// One pass; logs what changed, and a foreign directory or failure only when it differs from the last pass.
/// `None` when the directory could not be read.
fn sync(node_runtime: &dyn NodeRuntime, plan: &NodePlan, last: &Report) -> Option<Report> {
    let report = match node_runtime.apply(plan) {
        Ok(report) => report,
        Err(error) => {
            error!(%error, "reading the runtime's registry directory failed");
            return None;
        }
    };
    for address in &report.written {
        info!(address = %safe(address), "node file written");
    }
    for address in &report.removed {
        info!(address = %safe(address), "node file removed: the address is no longer published");
    }
    let news = News::of(&report, last);
    if news.foreign {
        for address in &report.foreign {
            warn!(address = %safe(address), "a file this agent did not write configures it: left as it is, so this node pulls the address as that file says");
        }
    }
    if news.failed {
        for (address, reason) in &report.failed {
            error!(address = %safe(address), reason = %safe(reason), "node file not written");
        }
    }
    Some(report)
}

/// Which of a pass's standing troubles are news: each is logged when it changes, not on every pass (every 2 s).
#[derive(Debug, PartialEq, Eq)]
struct News {
    foreign: bool,
    failed: bool,
}

impl News {
    fn of(report: &Report, last: &Report) -> Self {
        Self { foreign: report.foreign != last.foreign, failed: report.failed != last.failed }
    }
}

fn tell_runtime(found: &Reading) {
    let said = found.said.as_deref().map(safe);
    match (found.check, said) {
        (ConfigPathCheck::Elsewhere, Some(said)) => error!("{said}"),
        (ConfigPathCheck::Unknown, Some(said)) => warn!("{said}"),
        (ConfigPathCheck::Reads, said) => {
            info!(note = said.as_deref().unwrap_or_default(), "the runtime reads the agent's directory")
        }
        _ => {}
    }
}

/// The plan a ConfigMap holds; `None` (keep the last plan) when it holds one this agent cannot read, with the format
/// of a plan refused as newer than this agent's. A ConfigMap without a plan, or with one stamped for another
/// controller configuration than the stamp the chart put on it, is pending: the controller of this release has not
/// said yet what the nodes need.
fn read_plan(configmap: &ConfigMap) -> (Option<Applied>, Option<u32>) {
    let resource_version = configmap.metadata.resource_version.clone().unwrap_or_default();
    let wanted = configmap.metadata.annotations.as_ref().and_then(|a| a.get(crate::keys::chart::PLAN_STAMP));
    let Some(text) = configmap.data.as_ref().and_then(|data| data.get(PLAN_KEY)) else {
        let pending = Some(state::PLAN_NOT_WRITTEN.to_string());
        return (Some(Applied { plan: NodePlan::default(), resource_version, written: false, pending }), None);
    };
    match NodePlan::from_json(text) {
        Ok(plan) if plan.format > PLAN_FORMAT => {
            error!("{}", state::plan_too_new(plan.format));
            (None, Some(plan.format))
        }
        Ok(plan) => {
            let pending = (!plan.written_for(wanted.map(String::as_str)))
                .then(|| state::plan_of_another_configuration(plan.stamp.as_deref(), wanted.map(String::as_str)));
            (Some(Applied { plan, resource_version, written: true, pending }), None)
        }
        Err(error) => {
            error!(%error, "the node plan cannot be read; the last plan stays in force");
            (None, None)
        }
    }
}

/// Why this node's files go as the agent stops, if they do: its DaemonSet is gone or going (uninstall, the agent
/// turned off), or its pods now write into another directory (`nodeAgent.configPath` changed), where the next agent
/// will not see them. Anything short of seeing it alive counts as gone: on uninstall its Role and ServiceAccount go
/// at the same moment, so the answer may be a refusal rather than "not found".
async fn leaving(client: &Client, settings: &AgentSettings) -> Option<String> {
    let name = settings.daemonset.as_ref()?;
    let api = Api::<DaemonSet>::namespaced(client.clone(), &settings.namespace);
    match api.get_opt(name).await {
        Ok(Some(daemonset)) if daemonset.metadata.deletion_timestamp.is_some() => {
            Some("the agent's DaemonSet is being deleted".into())
        }
        Ok(Some(daemonset)) => match settings.config_path.as_deref().and_then(|mine| moved(&daemonset, mine)) {
            Some(why) => Some(why),
            None => uncovered(client, &daemonset, settings).await,
        },
        Ok(None) => Some("the agent's DaemonSet is gone".into()),
        Err(error) => Some(format!("cannot tell whether the agent's DaemonSet still exists ({error})")),
    }
}

/// Why this node's files go: the DaemonSet no longer runs a pod on this node (its node selector or tolerations
/// changed, or the node's labels or taints did), so no agent comes back to keep or remove them. A node that cannot
/// be read keeps its files: an agent that is only being replaced must not take the node's pulls away.
async fn uncovered(client: &Client, daemonset: &DaemonSet, settings: &AgentSettings) -> Option<String> {
    let name = settings.node_name.as_deref()?;
    let template = daemonset.spec.as_ref()?.template.spec.as_ref()?;
    match Api::<Node>::all(client.clone()).get_opt(name).await {
        Ok(Some(node)) => crate::node::coverage::covered(&node, template)
            .err()
            .map(|why| format!("the agents' DaemonSet no longer runs on this node: {why}")),
        Ok(None) => Some("this node is gone".into()),
        Err(error) => {
            warn!(%error, "cannot read this node to tell whether the agents still run here; its files stay");
            None
        }
    }
}

/// Why the files in `mine` (the hosts directory as the node sees it) go: `daemonset`'s pods mount another one.
fn moved(daemonset: &DaemonSet, mine: &str) -> Option<String> {
    let volumes = daemonset.spec.as_ref()?.template.spec.as_ref()?.volumes.as_ref()?;
    let next = volumes.iter().find(|v| v.name == crate::keys::chart::HOSTS_VOLUME)?.host_path.as_ref()?.path.as_str();
    (next.trim_end_matches('/') != mine.trim_end_matches('/'))
        .then(|| format!("the agent's DaemonSet now writes into {next} (nodeAgent.configPath changed from {mine})"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_runtime_chosen_against_what_the_node_reports_is_said_with_the_value_to_set() {
        let said = mismatch(RuntimeKind::Containerd, Some("cri-o://1.36.1")).expect("containerd's files on CRI-O");
        assert!(said.contains("this node runs CRI-O (cri-o://1.36.1)") && said.contains("nodeAgent.runtime=crio"));
        let said = mismatch(RuntimeKind::Crio, Some("containerd://2.4.2")).expect("drop-ins on containerd");
        assert!(said.contains("nodeAgent.runtime=containerd"), "{said}");
        assert_eq!(mismatch(RuntimeKind::Crio, Some("cri-o://1.36.1")), None);
        assert_eq!(mismatch(RuntimeKind::Containerd, Some("containerd://2.4.2")), None);
        assert_eq!(mismatch(RuntimeKind::Crio, Some("kwok-0.8.0")), None, "a runtime it cannot tell is not judged");
        assert_eq!(mismatch(RuntimeKind::Containerd, None), None);
    }

    #[test]
    fn the_runtime_is_crio_where_the_node_says_cri_o_and_containerd_anywhere_else() {
        assert_eq!(runtime_of(Some("cri-o://1.36.1")), RuntimeKind::Crio);
        assert_eq!(runtime_of(Some("containerd://2.4.2")), RuntimeKind::Containerd);
        assert_eq!(runtime_of(Some("docker://28.0.1")), RuntimeKind::Containerd);
        assert_eq!(runtime_of(None), RuntimeKind::Containerd, "a Node that cannot be read");
    }

    fn daemonset(hosts: &str) -> DaemonSet {
        serde_json::from_value(serde_json::json!({
            "spec": {"selector": {}, "template": {"spec": {"containers": [], "volumes": [
                {"name": "containerd-config", "hostPath": {"path": "/etc/containerd"}},
                {"name": crate::keys::chart::HOSTS_VOLUME, "hostPath": {"path": hosts}},
            ]}}}
        }))
        .expect("a DaemonSet")
    }

    fn plan_configmap(plan: &str) -> ConfigMap {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "plan", "resourceVersion": "42"},
            "data": {PLAN_KEY: plan}
        }))
        .expect("a ConfigMap")
    }

    /// A runtime whose every pass finds `found` (`None`: its directory cannot be read).
    struct Passes(Option<Report>);

    impl NodeRuntime for Passes {
        fn apply(&self, _: &NodePlan) -> std::io::Result<Report> {
            self.0.clone().ok_or_else(|| std::io::Error::other("unreadable"))
        }
        fn check(&self) -> Reading {
            unreachable!("a pass does not check the runtime's config")
        }
        fn location(&self) -> String {
            "/hosts".into()
        }
    }

    #[test]
    fn a_pass_reports_what_the_runtime_did_and_nothing_when_its_directory_cannot_be_read() {
        let did = Report { written: vec!["10.96.0.10:5000".into()], ..Report::default() };
        assert_eq!(sync(&Passes(Some(did.clone())), &NodePlan::default(), &Report::default()), Some(did));
        assert_eq!(sync(&Passes(None), &NodePlan::default(), &Report::default()), None);
    }

    #[test]
    fn a_foreign_file_or_a_failure_is_news_only_when_it_differs_from_the_last_pass() {
        let foreign = Report { foreign: vec!["docker.io".into()], ..Report::default() };
        let failed = Report { failed: vec![("docker.io".into(), "read-only".into())], ..Report::default() };
        assert_eq!(News::of(&foreign, &Report::default()), News { foreign: true, failed: false });
        assert_eq!(News::of(&foreign, &foreign), News { foreign: false, failed: false });
        assert_eq!(News::of(&failed, &Report::default()), News { foreign: false, failed: true });
        assert_eq!(News::of(&failed, &failed), News { foreign: false, failed: false });
        assert_eq!(News::of(&Report::default(), &failed), News { foreign: false, failed: true }, "cleared is news");
    }

    #[test]
    fn a_plan_of_a_newer_format_is_refused_whole_and_an_unreadable_one_is_kept_from_before() {
        let current = format!("{{\"format\": {PLAN_FORMAT}, \"hosts\": []}}");
        let (applied, refused) = read_plan(&plan_configmap(&current));
        assert_eq!(refused, None);
        assert_eq!(applied.map(|a| a.resource_version), Some("42".to_string()));
        // Written before plans had a format: the first.
        let (applied, _) = read_plan(&plan_configmap("{\"hosts\": []}"));
        assert_eq!(applied.map(|a| a.plan.format), Some(1));
        let newer = format!("{{\"format\": {}, \"hosts\": [], \"mirrors\": []}}", PLAN_FORMAT + 1);
        let (applied, refused) = read_plan(&plan_configmap(&newer));
        assert!(applied.is_none(), "nothing of a newer plan is applied");
        assert_eq!(refused, Some(PLAN_FORMAT + 1));
        let (applied, refused) = read_plan(&plan_configmap("{not json"));
        assert!(applied.is_none() && refused.is_none());
    }

    #[test]
    fn the_last_plan_stays_in_force_when_its_configmap_is_deleted_or_a_relist_finds_none() {
        let with = |version: &str, address: &str| {
            let mut configmap = plan_configmap(&format!(
                "{{\"format\": 1, \"hosts\": [{{\"address\": \"{address}\", \"endpoint\": \"http://{address}\"}}]}}"
            ));
            configmap.metadata.resource_version = Some(version.into());
            configmap
        };
        let in_force = |following: &Following| following.plan.as_ref().map(|a| a.resource_version.clone());
        let mut following = Following::default();
        assert_eq!(in_force(&following), None, "nothing is touched before a plan is read");
        following.on(Event::Init);
        following.on(Event::InitApply(with("1", "10.0.0.1:5000")));
        assert_eq!(in_force(&following), None, "a list under way is not in force");
        following.on(Event::InitDone);
        assert_eq!(in_force(&following), Some("1".into()));
        following.on(Event::Apply(with("2", "10.0.0.2:5000")));
        assert_eq!(in_force(&following), Some("2".into()));
        // Deleted by hand: the files stay as they are.
        following.on(Event::Delete(with("2", "10.0.0.2:5000")));
        assert_eq!(in_force(&following), Some("2".into()), "a deleted ConfigMap clears nothing");
        // A relist that finds no ConfigMap at all keeps it too.
        following.on(Event::Init);
        following.on(Event::InitDone);
        assert_eq!(in_force(&following), Some("2".into()), "an empty relist clears nothing");
        // An unreadable plan keeps the last one; a newer format is refused and said.
        following.on(Event::Apply(plan_configmap("{not json")));
        assert_eq!(in_force(&following), Some("2".into()));
        following.on(Event::Apply(plan_configmap(&format!("{{\"format\": {}, \"hosts\": []}}", PLAN_FORMAT + 1))));
        assert_eq!((in_force(&following), following.too_new), (Some("2".into()), Some(PLAN_FORMAT + 1)));
    }

    #[test]
    fn a_plan_not_yet_written_for_this_releases_configuration_is_pending_and_keeps_the_last_in_force() {
        let stamped = |stamp: Option<&str>, wanted: Option<&str>| {
            let stamp = stamp.map(|s| format!(", \"stamp\": \"{s}\"")).unwrap_or_default();
            let mut configmap = plan_configmap(&format!(
                "{{\"format\": 1, \"hosts\": [{{\"address\": \"a:1\", \"endpoint\": \"http://10.0.0.1:1\"}}]{stamp}}}"
            ));
            if let Some(wanted) = wanted {
                configmap.metadata.annotations =
                    Some([(crate::keys::chart::PLAN_STAMP.to_string(), wanted.to_string())].into());
            }
            configmap
        };
        let pending = |configmap: &ConfigMap| read_plan(configmap).0.expect("a plan").pending;
        assert_eq!(pending(&stamped(Some("abc"), Some("abc"))), None, "written for this configuration");
        assert_eq!(pending(&stamped(None, None)), None, "a ConfigMap the chart did not stamp takes any plan");
        let other = pending(&stamped(Some("old"), Some("new"))).expect("pending");
        assert!(other.contains("stamp old, this release's is new"), "{other}");
        assert!(pending(&stamped(None, Some("new"))).is_some(), "a plan of a controller without a stamp");
        // The chart's empty ConfigMap: nothing written, nothing to apply.
        let empty: ConfigMap = serde_json::from_value(serde_json::json!({"metadata": {"name": "plan"}})).unwrap();
        let (applied, _) = read_plan(&empty);
        let applied = applied.expect("pending");
        assert!(!applied.written && applied.pending.as_deref() == Some(state::PLAN_NOT_WRITTEN));
        // Met after a plan (its data emptied), the last plan stays in force, pending.
        let mut following = Following::default();
        following.on(Event::Apply(stamped(Some("abc"), Some("abc"))));
        following.on(Event::Apply(empty));
        let in_force = following.plan.expect("in force");
        assert!(in_force.written && in_force.pending.is_some());
        assert_eq!(in_force.plan.hosts.len(), 1);
    }

    #[test]
    fn an_agent_whose_daemonset_now_mounts_another_directory_leaves_nothing_in_its_own() {
        assert_eq!(moved(&daemonset("/etc/containerd/certs.d/"), "/etc/containerd/certs.d"), None);
        let said = moved(&daemonset("/var/lib/rancher/k3s/agent/etc/containerd/certs.d"), "/etc/containerd/certs.d");
        assert!(said.is_some_and(|s| s.contains("nodeAgent.configPath changed from /etc/containerd/certs.d")));
    }
}
