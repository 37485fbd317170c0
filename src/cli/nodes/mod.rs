//! `doctor`'s node section: for each node, whether its containerd can pull every published address that needs a
//! `hosts.toml` (see [`crate::node`]), as the node agent on that node last found it (its NodePullState), and why
//! not when it cannot; [`verdict`] decides each node's line.

pub(crate) mod verdict;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};

use super::text::say;
use crate::keys;
use crate::node::NodePlan;
use crate::node::NodePlanTarget;
use crate::node::api::state::NodePullState;
use crate::node::{self, Reason};
use crate::publish::Published;
use crate::watch::{self, sets::NodeWatches};

/// What the node section found: whether all is well, and what is not failing but is not done either (an address
/// no node file is written for, agents that cover no node), for the summary to name on lines of their own.
#[derive(Debug, Default)]
pub struct Report {
    pub well: bool,
    pub not_done: Vec<String>,
}

/// Reports the node pulls of `published`. `agents` is where the running controller keeps the node plan, `None`
/// when the node agent is off. `kept`: readers keep seeing a document whose registry now has a problem, so the
/// plan stored for it stays in force.
pub async fn report(
    client: &Client,
    published: Option<&Published>,
    kept: bool,
    agents: Option<&NodePlanTarget>,
) -> Report {
    let mut not_done = Vec::new();
    let well = section(client, published, kept, agents, &mut not_done).await;
    Report { well, not_done }
}

async fn section(
    client: &Client,
    published: Option<&Published>,
    kept: bool,
    agents: Option<&NodePlanTarget>,
    not_done: &mut Vec<String>,
) -> bool {
    say!("\n== Node pulls (containerd hosts.toml; docs/node-pulls.md)");
    let decision = match (kept, agents) {
        (true, Some(agents)) => {
            say!(
                "  the published registry has a problem (above), so its last good document stays published and the \
                 node plan written for it stays in force"
            );
            match stored_plan(client, agents).await {
                Ok(plan) => crate::node::Decision { plan, ..Default::default() },
                Err(why) => {
                    say!("  the node plan {agents} cannot be read with this identity: {why}");
                    return true;
                }
            }
        }
        _ => {
            let rules = agents.map(|a| a.rules.clone()).unwrap_or_default();
            let observed = watch::observe::<NodeWatches>(client, |_| node::interest(published, &rules)).await;
            node::decide(published, &observed, &rules)
        }
    };
    // What the controller tells of its decision, worded as its Events are (read with this identity).
    let notices = match agents {
        Some(agents) => decision.notices(published.map(|p| &p.reference), &agents.reference()),
        None => Vec::new(),
    };
    let told = |reason| notices.iter().filter(move |notice| notice.reason == reason);
    if let Some(notice) = told(Reason::CaBundleUnusable).next() {
        say!("  the registry serves TLS and {} (as read by this identity)", notice.message);
        return false;
    }
    let plan = decision.plan;
    if plan.hosts.is_empty() && published.is_some_and(|p| p.ports.tls) {
        say!(
            "  the registry serves TLS: nodes are configured for it only with its CA bundle (annotation {}, \
             readable by the controller: chart value nodeAgent.caBundles); without one each node's containerd \
             pulls the published addresses as they are",
            keys::service::CA_BUNDLE
        );
        return true;
    }
    // A refusal is the admin's rule at work, not a fault: told, without failing the exit status.
    for notice in told(Reason::AddressNotAllowed) {
        say!("  {}", notice.message);
    }
    // Refused only matters where agents write node files at all (with them off, no address gets one).
    if agents.is_some() {
        let refused = decision.refused.iter();
        not_done.extend(refused.map(|(address, refusal)| format!("{address} gets no node file: it {refusal}")));
    }
    // A mirror the admin set that cannot be used is a fault: its upstream is pulled directly.
    let mirrors_usable = told(Reason::MirrorUnusable).next().is_none();
    for notice in told(Reason::MirrorUnusable) {
        say!("  {}", notice.message);
    }
    if plan.hosts.is_empty() {
        say!("  no published address needs a hosts.toml: each node's containerd pulls them as they are");
        return mirrors_usable;
    }
    for entry in &plan.hosts {
        match &entry.server {
            Some(server) => say!(
                "  {} is mirrored: a hosts.toml sends its pulls to {} first, then to {server}",
                entry.address,
                entry.endpoint
            ),
            None => say!("  {} needs a hosts.toml mapping it to {}", entry.address, entry.endpoint),
        }
    }
    let Some(agents) = agents else {
        say!(
            "  the node agent is off: a node's containerd pulls these only if someone configured it to \
             (chart value nodeAgent.enabled=true does it on every node)"
        );
        return true;
    };
    say!(
        "  what every node pulls is decided in these namespaces, so only cluster admins should write there \
         (docs/node-pulls.md#security): {}",
        verdict::deciding_namespaces(agents).join(", ")
    );
    let nodes = match Api::<Node>::all(client.clone()).list(&ListParams::default()).await {
        Ok(list) => list.items,
        Err(error) => {
            say!("  nodes cannot be listed with this identity: {error}");
            return true;
        }
    };
    let Some(daemonset) = agents_daemonset(client, agents).await else {
        say!(
            "  no node agent DaemonSet in namespace {} follows the plan {}: is nodeAgent.enabled set?",
            agents.namespace,
            agents.name
        );
        return false;
    };
    let template = daemonset.spec.as_ref().and_then(|s| s.template.spec.clone()).unwrap_or_default();
    let selector = format!("{}={}", keys::chart::COMPONENT, keys::chart::NODE_AGENT);
    let pods = Api::<Pod>::namespaced(client.clone(), &agents.namespace);
    let pods = pods.list(&ListParams::default().labels(&selector)).await.map(|l| l.items).unwrap_or_default();
    let pods = verdict::agents(&pods, &daemonset);
    let states = Api::<NodePullState>::namespaced(client.clone(), &agents.namespace);
    let states = match states.list(&ListParams::default()).await {
        Ok(list) => list.items,
        Err(error) => {
            say!("  the nodes' states (NodePullState) cannot be read with this identity: {error}");
            Vec::new()
        }
    };
    let events = Api::<Event>::namespaced(client.clone(), &agents.namespace);
    let events = events.list(&ListParams::default()).await.map(|l| l.items).unwrap_or_default();
    let mut well = mirrors_usable;
    let mut covered = 0;
    for node in &nodes {
        let name = node.name_any();
        let pod = pods.iter().copied().find(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(&name));
        let state = states.iter().find(|s| s.name_any() == name).and_then(|s| s.status.as_ref());
        let found = verdict::Found { node, template: &template, pod, state, events: &events };
        let line = verdict::node(&found, &plan);
        well &= !line.fails();
        covered += usize::from(!matches!(line, verdict::Line::NotCovered(_)));
        say!("  node {name}: {}", line.said());
    }
    if covered == 0 {
        not_done.push(format!(
            "no node is covered by the node agent, so no node pulls {} through its files",
            plan.hosts.iter().map(|entry| entry.address.as_str()).collect::<Vec<_>>().join(", ")
        ));
    }
    well
}

/// The DaemonSet whose agents follow the plan `agents` names: its pod template passes that ConfigMap.
async fn agents_daemonset(client: &Client, agents: &NodePlanTarget) -> Option<DaemonSet> {
    let selector = format!("{}={}", keys::chart::COMPONENT, keys::chart::NODE_AGENT);
    let daemonsets = Api::<DaemonSet>::namespaced(client.clone(), &agents.namespace);
    let listed = daemonsets.list(&ListParams::default().labels(&selector)).await.ok()?;
    let wanted = format!("--{}={}", keys::chart::NODE_PLAN_FLAG, agents.name);
    listed.items.into_iter().find(|daemonset| {
        let containers = daemonset.spec.as_ref().and_then(|s| s.template.spec.as_ref()).map(|s| &s.containers);
        containers.into_iter().flatten().any(|c| c.args.iter().flatten().any(|arg| *arg == wanted))
    })
}

/// The plan the running controller keeps, as agents read it.
async fn stored_plan(client: &Client, agents: &NodePlanTarget) -> Result<NodePlan, String> {
    let configmaps = Api::<ConfigMap>::namespaced(client.clone(), &agents.namespace);
    let found = configmaps.get_opt(&agents.name).await.map_err(|error| error.to_string())?;
    let text = found.and_then(|c| c.data?.remove(crate::node::PLAN_KEY));
    text.map_or(Ok(NodePlan::default()), |text| NodePlan::from_json(&text).map_err(|error| error.to_string()))
}
