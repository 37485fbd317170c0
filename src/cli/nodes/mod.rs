//! `doctor`'s node section: for each node, whether its containerd can pull every published address that needs a
//! `hosts.toml` (see [`crate::node`]), as the node agent on that node last found it (its NodePullState), and why
//! not when it cannot, and whether kube-proxy there serves a runtime address on the node's loopback ([`proxy`]).
//! [`gather`] reads, [`judge`] decides the section (pure) and [`verdict`] each node's line in it.

mod gather;
mod judge;
mod proxy;
pub(crate) mod verdict;

use kube::Client;

use crate::node::NodePlanTarget;
use crate::publish::Published;

/// What the node section found: whether all is well, and what is not failing but is not done either (an address
/// no node file is written for, agents that cover no node), for the summary to name on lines of their own.
#[derive(Debug, Default)]
pub struct Report {
    pub well: bool,
    pub not_done: Vec<String>,
}

/// Reports the node pulls of `published`: read, judged, printed. `agents` is where the running controller keeps
/// the node plan, `None` when the node agent is off. `kept`: readers keep seeing a document whose registry now has a
/// problem, so the plan stored for it stays in force.
pub async fn report(
    client: &Client,
    published: Option<&Published>,
    kept: bool,
    agents: Option<&NodePlanTarget>,
) -> Report {
    let decided = gather::decision(client, published, kept, agents).await;
    // The agents are read only where the plan gives them something to write.
    let found = match (agents, &decided) {
        (Some(agents), Ok(decision)) if !(decision.plan.hosts.is_empty() && decision.plan.relays.is_empty()) => {
            Some(gather::agents(client, agents).await)
        }
        _ => None,
    };
    // kube-proxy's mode matters only where the runtime pulls the node's loopback at the nodePort.
    let proxies = match published.and_then(proxy::loopback_pull_address) {
        Some(_) => Some(gather::proxies(client, found.as_ref().map(|found| &found.nodes)).await),
        None => None,
    };
    let (section, not_done) = judge::section(published, kept, agents, &decided, found.as_ref(), proxies.as_ref());
    Report { well: !section.show(), not_done }
}
