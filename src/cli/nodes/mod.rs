//! `doctor`'s node section: for each node, whether its containerd can pull every published address that needs a
//! `hosts.toml` (see [`crate::node`]), as the node agent on that node last found it (its NodePullState), and why
//! not when it cannot; [`verdict`] decides each node's line.

mod verdict;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};

use super::text::say;
use crate::keys;
use crate::node::state::NodePullState;
use crate::node::{NodePlan, Refusal};
use crate::publish::Published;
use crate::settings::NodePlanTarget;

/// Reports the node pulls of `published`; returns whether all is well. `agents` is where the running controller
/// keeps the node plan, `None` when the node agent is off. `kept`: readers keep seeing a document whose registry
/// now has a problem, so the plan stored for it stays in force.
pub async fn report(
    client: &Client,
    published: Option<&Published>,
    kept: bool,
    agents: Option<&NodePlanTarget>,
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
            crate::controller::node::observe(client, published, &rules).await
        }
    };
    let (plan, ca_problem) = (decision.plan, decision.ca_problem);
    if let (Some(why), Some(_)) = (&ca_problem, agents) {
        say!("  the registry serves TLS and its CA bundle cannot be used (as read by this identity): {why}");
        return false;
    }
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
    if agents.is_some() {
        for (address, refusal) in &decision.refused {
            let why = match refusal {
                Refusal::NotAllowed => "it does not name the registry's Service alone and matches no allowed address \
                     (chart value nodeAgent.allowedAddresses)"
                    .to_string(),
                Refusal::Invalid(why) => why.clone(),
                Refusal::Mirrored => "the cluster admin mirrors it (chart value nodeAgent.mirrors), so its node \
                     file sends pulls to that mirror"
                    .to_string(),
            };
            say!("  {address} is published but no node is configured to pull it: {why}");
        }
    }
    // A mirror the admin set that cannot be used is a fault: its upstream is pulled directly.
    let mirrors_usable = decision.mirror_problems.is_empty();
    for problem in &decision.mirror_problems {
        say!("  {problem}; each node pulls it from the upstream directly");
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
    // Only the DaemonSet's own pods are agents: anyone who may create pods there could copy its labels.
    let owned = |pod: &&Pod| {
        pod.owner_references().iter().any(|o| o.controller == Some(true) && Some(&o.uid) == daemonset.uid().as_ref())
    };
    let pods: Vec<&Pod> = pods.iter().filter(owned).collect();
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
    for node in &nodes {
        let name = node.name_any();
        let pod = pods.iter().copied().find(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(&name));
        let state = states.iter().find(|s| s.name_any() == name).map(|s| &s.status);
        let found = verdict::Found { node, template: &template, pod, state, events: &events };
        let line = verdict::node(&found, &plan);
        well &= !line.fails();
        say!("  node {name}: {}", line.said());
    }
    well
}

/// The DaemonSet whose agents follow the plan `agents` names: its pod template passes that ConfigMap.
async fn agents_daemonset(client: &Client, agents: &NodePlanTarget) -> Option<DaemonSet> {
    let selector = format!("{}={}", keys::chart::COMPONENT, keys::chart::NODE_AGENT);
    let daemonsets = Api::<DaemonSet>::namespaced(client.clone(), &agents.namespace);
    let listed = daemonsets.list(&ListParams::default().labels(&selector)).await.ok()?;
    let wanted = format!("--node-plan-configmap={}", agents.name);
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
