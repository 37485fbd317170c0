//! What the node section reads from the cluster, and nothing else; [`super::judge`] turns it into the section.
//! `tests.rs` proves the requests and what is made of scripted answers against a mocked API server.

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use k8s_openapi::api::events::v1::Event;
use kube::Client;
use kube::api::{Api, ListParams};

use super::proxy;
use crate::keys;
use crate::node::api::state::NodePullState;
use crate::node::{self, NodePlan, NodePlanTarget};
use crate::publish::Published;
use crate::watch::{self, sets::NodeWatches};
use crate::watching::equal;

/// The node decision in force for `published`: while readers keep a document whose registry now has a problem
/// (`kept`), the plan the running controller stored for it, as agents read it (`Err` when it cannot be read);
/// else the controller's decision now.
pub async fn decision(
    client: &Client,
    published: Option<&Published>,
    kept: bool,
    agents: Option<&NodePlanTarget>,
) -> Result<node::Decision, String> {
    match (kept, agents) {
        (true, Some(agents)) => Ok(node::Decision { plan: stored_plan(client, agents).await?, ..Default::default() }),
        _ => {
            let rules = agents.map(|a| a.rules.clone()).unwrap_or_default();
            let observed = watch::observe::<NodeWatches>(client, |_| node::interest(published, &rules)).await;
            Ok(node::decide(published, &observed, &rules))
        }
    }
}

/// The plan the running controller keeps, as agents read it.
async fn stored_plan(client: &Client, agents: &NodePlanTarget) -> Result<NodePlan, String> {
    let configmaps = Api::<ConfigMap>::namespaced(client.clone(), &agents.namespace);
    let found = configmaps.get_opt(&agents.name).await.map_err(|error| error.to_string())?;
    let text = found.and_then(|c| c.data?.remove(node::PLAN_KEY));
    text.map_or(Ok(NodePlan::default()), |text| NodePlan::from_json(&text).map_err(|error| error.to_string()))
}

/// What shows kube-proxy's mode on each node (see [`super::proxy`]), as this identity may read it; `nodes` when
/// they were read already (with the agents), else read here.
pub async fn proxies(client: &Client, nodes: Option<&Result<Vec<Node>, String>>) -> proxy::Sources {
    let (namespace, name) = proxy::CONFIG_MAP;
    let nodes = match nodes {
        Some(nodes) => nodes.clone(),
        None => list_nodes(client).await,
    };
    let pods = Api::<Pod>::namespaced(client.clone(), namespace);
    let pods = pods.list(&ListParams::default().labels(proxy::POD_LABEL)).await.map(|l| l.items).unwrap_or_default();
    let configmaps = Api::<ConfigMap>::namespaced(client.clone(), namespace);
    let config = configmaps.get_opt(name).await.ok().flatten().and_then(|c| c.data?.remove(proxy::CONFIG_KEY));
    let config = config.map(|text| (text, crate::kube_proxy::ConfigTarget::kubeadm()));
    proxy::Sources { nodes, pods, config }
}

async fn list_nodes(client: &Client) -> Result<Vec<Node>, String> {
    let listed = Api::<Node>::all(client.clone()).list(&ListParams::default()).await;
    listed.map(|l| l.items).map_err(|error| error.to_string())
}

/// What the agents that follow a plan are, and what they found: each read's failure kept as what to say.
pub struct Agents {
    pub nodes: Result<Vec<Node>, String>,
    /// The DaemonSet whose pods follow the plan, if one does.
    pub daemonset: Option<DaemonSet>,
    /// The pods labelled as agents in its namespace (which of them are its own is judged, not assumed).
    pub pods: Vec<Pod>,
    pub states: Result<Vec<NodePullState>, String>,
    /// The Events of the agents' namespace.
    pub events: Vec<Event>,
}

/// The nodes, and the agents of the plan `agents` names with their states and Events.
pub async fn agents(client: &Client, agents: &NodePlanTarget) -> Agents {
    let nodes = list_nodes(client).await;
    let labelled = ListParams::default().labels_from(&equal(keys::chart::COMPONENT, keys::chart::NODE_AGENT));
    let daemonsets = Api::<DaemonSet>::namespaced(client.clone(), &agents.namespace);
    let daemonset = daemonsets.list(&labelled).await.ok().and_then(|listed| following(listed.items, agents));
    let pods = Api::<Pod>::namespaced(client.clone(), &agents.namespace);
    let pods = pods.list(&labelled).await.map(|l| l.items).unwrap_or_default();
    let states = Api::<NodePullState>::namespaced(client.clone(), &agents.namespace);
    let states = states.list(&ListParams::default()).await;
    let events = Api::<Event>::namespaced(client.clone(), &agents.namespace);
    let events = events.list(&ListParams::default()).await.map(|l| l.items).unwrap_or_default();
    Agents { nodes, daemonset, pods, states: states.map(|l| l.items).map_err(|error| error.to_string()), events }
}

/// The DaemonSet among `daemonsets` whose pod template passes the plan `agents` names to its agents.
fn following(daemonsets: Vec<DaemonSet>, agents: &NodePlanTarget) -> Option<DaemonSet> {
    let wanted = format!("--{}={}", keys::chart::NODE_PLAN_FLAG, agents.name);
    daemonsets.into_iter().find(|daemonset| {
        let containers = daemonset.spec.as_ref().and_then(|s| s.template.spec.as_ref()).map(|s| &s.containers);
        containers.into_iter().flatten().any(|c| c.args.iter().flatten().any(|arg| *arg == wanted))
    })
}

#[cfg(test)]
mod tests;
