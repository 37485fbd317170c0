//! The node section from what [`super::gather`] read: the plan in force, each node's line (see [`verdict`]), and
//! what is not failing but not done either. Pure; `tests.rs` runs it from fixtures.

use kube::ResourceExt;

use super::gather::Agents;
use super::{proxy, verdict};
use crate::cli::section::Section;
use crate::keys;
use crate::node::{self, NodePlanTarget, Reason};
use crate::publish::Published;

/// The node pulls of `published` as `decided` (see [`super::gather::decision`]); `agents` is where the running
/// controller keeps the node plan (`None`: the node agent is off), `found` what its agents are (read only when
/// the plan has an address for them). Returns the section and what the summary names as not done.
pub fn section(
    published: Option<&Published>,
    kept: bool,
    agents: Option<&NodePlanTarget>,
    decided: &Result<node::Decision, String>,
    found: Option<&Agents>,
    proxies: Option<&proxy::Sources>,
) -> (Section, Vec<String>) {
    let mut section = Section::titled("Node pulls (the node agent's files; docs/node-pulls.md)");
    let mut noted = Noted::default();
    let well = judge(&mut section, &mut noted, published, kept, agents, decided, found);
    let address = published.and_then(proxy::loopback_pull_address);
    let served = match (address, proxies) {
        (Some(address), Some(proxies)) => loopback(&mut section, address, proxies, &noted.configured),
        _ => true,
    };
    section.wrong = !(well && served);
    (section, noted.not_done)
}

/// Says, for each containerd node, whether kube-proxy there serves `address` (the runtime's, on the node's loopback
/// at the nodePort) or the agent's file makes up for it (`configured`: the nodes whose file is in place); returns
/// whether every node pulls it.
fn loopback(section: &mut Section, address: &str, proxies: &proxy::Sources, configured: &[String]) -> bool {
    let nodes = match &proxies.nodes {
        Ok(nodes) => nodes,
        Err(error) => {
            section.say(format!("  nodes cannot be listed with this identity, so no kube-proxy mode is read: {error}"));
            return true;
        }
    };
    let mut well = true;
    for node in nodes.iter().filter(|node| verdict::reads_agent_files(node)) {
        let name = node.name_any();
        let (said, fails) = if verdict::runs_crio(node) {
            proxy::judge_crio(address, configured.contains(&name))
        } else {
            proxy::judge(proxy::on(node, proxies).as_ref(), address, configured.contains(&name))
        };
        well &= !fails;
        section.say(format!("  on node {name}, {said}"));
    }
    well
}

/// What [`judge`] notes beside the lines it says: what is not done (for the summary), and the nodes whose file is
/// in place (for [`loopback`]).
#[derive(Default)]
struct Noted {
    not_done: Vec<String>,
    configured: Vec<String>,
}

/// Says the section into `section`; returns whether all is well.
fn judge(
    section: &mut Section,
    noted: &mut Noted,
    published: Option<&Published>,
    kept: bool,
    agents: Option<&NodePlanTarget>,
    decided: &Result<node::Decision, String>,
    found: Option<&Agents>,
) -> bool {
    if let (true, Some(_)) = (kept, agents) {
        section.say(
            "  the published registry has a problem (above), so its last good document stays published and the \
             node plan written for it stays in force",
        );
    }
    let decision = match (decided, agents) {
        (Ok(decision), _) => decision,
        (Err(why), agents) => {
            let plan = agents.map(ToString::to_string).unwrap_or_default();
            section.say(format!("  the node plan {plan} cannot be read with this identity: {why}"));
            return true;
        }
    };
    // What the controller tells of its decision, worded as its Events are (read with this identity).
    let notices = match agents {
        Some(agents) => decision.notices(published.map(|p| &p.reference), &agents.reference()),
        None => Vec::new(),
    };
    let told = |reason| notices.iter().filter(move |notice| notice.reason == reason);
    if let Some(notice) = told(Reason::CaBundleUnusable).next() {
        section.say(format!("  the registry serves TLS and {} (as read by this identity)", notice.message));
        return false;
    }
    let plan = &decision.plan;
    if plan.hosts.is_empty() && published.is_some_and(|p| p.ports.tls) {
        section.say(format!(
            "  the registry serves TLS: nodes are configured for it only with its CA bundle (annotation {}, \
             readable by the controller: chart value nodeAgent.caBundles); without one each node's containerd \
             pulls the published addresses as they are",
            keys::service::CA_BUNDLE
        ));
        if plan.relays.is_empty() {
            return true;
        }
    }
    // A refusal is the admin's rule at work, not a fault: told, without failing the exit status.
    for notice in told(Reason::AddressNotAllowed) {
        section.say(format!("  {}", notice.message));
    }
    // Refused only matters where agents write node files at all (with them off, no address gets one).
    if agents.is_some() {
        let refused = decision.refused.iter();
        noted.not_done.extend(refused.map(|(address, refusal)| format!("{address} gets no node file: it {refusal}")));
    }
    // A mirror the admin set that cannot be used is a fault: its upstream is pulled directly.
    let mirrors_usable = told(Reason::MirrorUnusable).next().is_none();
    for notice in told(Reason::MirrorUnusable) {
        section.say(format!("  {}", notice.message));
    }
    let relay_usable = told(Reason::RelayUnusable).next().is_none();
    for notice in told(Reason::RelayUnusable) {
        section.say(format!("  {}", notice.message));
    }
    for relay in &plan.relays {
        section.say(format!(
            "  {} is relayed on every node's loopback, 127.0.0.1:{port} and [::1]:{port}, to {}",
            relay.registry,
            relay.target,
            port = relay.port
        ));
    }
    if plan.hosts.is_empty() && plan.relays.is_empty() {
        section.say("  no published address needs a node file: each node's runtime pulls them as they are");
        return mirrors_usable && relay_usable;
    }
    // A loopback address at the registry pod's hostPort: the CNI's portmap serves it on the nodes running that pod,
    // in every kube-proxy mode, as the publisher counts it; only other nodes need the file.
    let at_host_port = |address: &str| {
        published.is_some_and(|p| p.ports.host_port && node::served_on_node_loopback(address, p.ports.node))
    };
    for entry in &plan.hosts {
        section.say(match &entry.server {
            Some(server) => format!(
                "  {} is mirrored: a node file sends its pulls to {} first, then to {server}",
                entry.address, entry.endpoint
            ),
            None if at_host_port(&entry.address) => format!(
                "  {} is the registry pod's hostPort, which the CNI serves on the nodes running that pod in every \
                 kube-proxy mode (every node, for a DaemonSet such as minikube's registry-proxy); a node file \
                 mapping it to {} lets the other nodes pull it too",
                entry.address, entry.endpoint
            ),
            None => format!("  {} needs a node file mapping it to {}", entry.address, entry.endpoint),
        });
    }
    let (Some(agents), Some(found)) = (agents, found) else {
        let needing: Vec<&str> =
            plan.hosts.iter().map(|entry| entry.address.as_str()).filter(|address| !at_host_port(address)).collect();
        if needing.is_empty() {
            section.say(
                "  the node agent is off, and nothing needs it on the nodes running the registry's pod (on other \
                 nodes, nodeAgent.enabled=true maps the hostPort's address too)",
            );
        } else {
            section.say(format!(
                "  the node agent is off: a node's containerd pulls {} only if someone configured it to (chart value \
                 nodeAgent.enabled=true does it on every node)",
                needing.join(", ")
            ));
        }
        return true;
    };
    section.say(format!(
        "  what every node pulls is decided in these namespaces, so only cluster admins should write there \
         (docs/node-pulls.md#security): {}",
        verdict::deciding_namespaces(agents).join(", ")
    ));
    let nodes = match &found.nodes {
        Ok(nodes) => nodes,
        Err(error) => {
            section.say(format!("  nodes cannot be listed with this identity: {error}"));
            return true;
        }
    };
    let Some(daemonset) = &found.daemonset else {
        section.say(format!(
            "  no node agent DaemonSet in namespace {} follows the plan {}: is nodeAgent.enabled set?",
            agents.namespace, agents.name
        ));
        return false;
    };
    let template = daemonset.spec.as_ref().and_then(|s| s.template.spec.clone()).unwrap_or_default();
    let pods = verdict::agents(&found.pods, daemonset);
    let states = match &found.states {
        Ok(states) => states.as_slice(),
        Err(error) => {
            section.say(format!("  the nodes' states (NodePullState) cannot be read with this identity: {error}"));
            &[]
        }
    };
    let mut well = mirrors_usable && relay_usable;
    let mut covered = 0;
    for node in nodes {
        let name = node.name_any();
        let pod = pods.iter().copied().find(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(&name));
        let state = states.iter().find(|s| s.name_any() == name).and_then(|s| s.status.as_ref());
        let found = verdict::Found { node, template: &template, pod, state, events: &found.events };
        let line = verdict::node(&found, plan);
        well &= !line.fails();
        if matches!(line, verdict::Line::Configured(_)) {
            noted.configured.push(name.clone());
        }
        covered += usize::from(!matches!(line, verdict::Line::NotCovered(_)));
        section.say(format!("  node {name}: {}", line.said()));
    }
    if covered == 0 {
        noted.not_done.push(format!(
            "no node is covered by the node agent, so no node pulls {} through its files",
            plan.hosts.iter().map(|entry| entry.address.as_str()).collect::<Vec<_>>().join(", ")
        ));
    }
    well
}

#[cfg(test)]
mod tests;
