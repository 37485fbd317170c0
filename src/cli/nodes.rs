//! `doctor`'s node section: for each node, whether its containerd can pull every published address that needs a
//! `hosts.toml` (see [`crate::node`]), as the node agent on that node last told on its own Pod.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};

use super::text::say;
use crate::keys;
use crate::node::{NodePlan, Reason};
use crate::publish::Published;
use crate::settings::NodePlanTarget;

/// Reports the node pulls of `published`; returns whether all is well. `agents` is where the running controller
/// keeps the node plan, `None` when the node agent is off.
pub async fn report(client: &Client, published: Option<&Published>, agents: Option<&NodePlanTarget>) -> bool {
    let (plan, ca_problem) = crate::controller::node::observe(client, published).await;
    say!("\n== Node pulls (containerd hosts.toml; docs/node-pulls.md)");
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
    if plan.hosts.is_empty() {
        say!("  no published address needs a hosts.toml: each node's containerd pulls them as they are");
        return true;
    }
    for entry in &plan.hosts {
        say!("  {} needs a hosts.toml mapping it to {}", entry.address, entry.endpoint);
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
    let selector = format!("{}={}", keys::chart::COMPONENT, keys::chart::NODE_AGENT);
    let pods = Api::<Pod>::namespaced(client.clone(), &agents.namespace);
    let pods = pods.list(&ListParams::default().labels(&selector)).await.map(|l| l.items).unwrap_or_default();
    let events = Api::<Event>::namespaced(client.clone(), &agents.namespace);
    let events = events.list(&ListParams::default()).await.map(|l| l.items).unwrap_or_default();
    let mut well = true;
    for node in &nodes {
        let name = node.name_any();
        let pod = pods.iter().find(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(name.as_str()));
        let runtime =
            node.status.as_ref().and_then(|s| s.node_info.as_ref()).map(|i| i.container_runtime_version.as_str());
        let verdict = match (unsupported(runtime.unwrap_or_default()), pod) {
            (Some(why), _) => Err(why),
            (None, None) => {
                Err("no node agent pod runs here (a taint it does not tolerate, or nodeAgent.nodeSelector)".into())
            }
            (None, Some(pod)) => agent_verdict(pod, &plan, &events),
        };
        match verdict {
            Ok(said) => say!("  node {name}: {said}"),
            Err(said) => {
                well = false;
                say!("  node {name}: {said}");
            }
        }
    }
    well
}

/// Why a node's runtime never reads the agent's files, and what to do instead; `None` for containerd.
fn unsupported(runtime: &str) -> Option<String> {
    let (name, _) = runtime.split_once("://").unwrap_or((runtime, ""));
    let instead = match name {
        "containerd" => return None,
        "docker" => "add the addresses to dockerd's insecure-registries (minikube: --insecure-registry 10.96.0.0/12)",
        "cri-o" => "add them as insecure registries in /etc/containers/registries.conf.d",
        _ => "configure its registries by its own means",
    };
    Some(format!("its runtime is {runtime:?}, which does not read containerd's hosts.toml: {instead}"))
}

/// What the agent on one node last told, checked against the plan: `Ok` when every planned address is configured.
fn agent_verdict(pod: &Pod, plan: &NodePlan, events: &[Event]) -> Result<String, String> {
    let pod_name = pod.name_any();
    let phase = pod.status.as_ref().and_then(|s| s.phase.clone()).unwrap_or_default();
    if phase != "Running" {
        return Err(format!("its node agent pod {pod_name} is {phase}, not Running"));
    }
    let latest = latest_told(&pod_name, events);
    let summary = latest.get(Reason::HostsConfigured.as_str());
    let configured = summary.map(|(note, _)| *note);
    let missing: Vec<&str> = plan
        .hosts
        .iter()
        .filter(|e| !configured.is_some_and(|note| note.contains(&format!("{} via {}", e.address, e.endpoint))))
        .map(|e| e.address.as_str())
        .collect();
    if missing.is_empty() {
        return Ok(format!("configured by {pod_name}"));
    }
    let mut said = format!("not configured for {} (agent {pod_name})", missing.join(", "));
    // Only what was told with or after the latest summary: an older trouble was resolved since (the agent tells a
    // new summary whenever what it configured changes).
    let since = summary.and_then(|(_, told)| *told);
    for reason in [Reason::ConfigPathMismatch, Reason::ForeignHostsFile, Reason::HostsFileFailed] {
        match latest.get(reason.as_str()) {
            Some((note, told)) if *told >= since => said.push_str(&format!("; {}: {note}", reason.as_str())),
            _ => {}
        }
    }
    Err(said)
}

/// The newest note per reason, with when it was told, that the agent pod itself recorded about itself (its
/// `reportingInstance` is its own name: anyone who may create Events could write others).
fn latest_told<'a>(pod_name: &str, events: &'a [Event]) -> BTreeMap<&'a str, (&'a str, Option<Timestamp>)> {
    let mut told: Vec<&Event> = events
        .iter()
        .filter(|e| e.reporting_controller.as_deref() == Some(keys::MANAGER))
        .filter(|e| e.reporting_instance.as_deref() == Some(pod_name))
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(pod_name))
        .collect();
    told.sort_by_key(|e| e.event_time.as_ref().map(|t| t.0));
    told.into_iter()
        .filter_map(|e| Some((e.reason.as_deref()?, (e.note.as_deref()?, e.event_time.as_ref().map(|t| t.0)))))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn told(pod: &str, reason: Reason, note: &str, second: i64) -> Event {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
        Event {
            reason: Some(reason.as_str().into()),
            note: Some(note.into()),
            event_time: Timestamp::from_second(second).ok().map(MicroTime),
            reporting_controller: Some(keys::MANAGER.into()),
            reporting_instance: Some(pod.into()),
            regarding: Some(k8s_openapi::api::core::v1::ObjectReference {
                name: Some(pod.into()),
                ..Default::default()
            }),
            ..Event::default()
        }
    }

    #[test]
    fn doctor_shows_only_the_troubles_told_with_or_after_the_agents_latest_summary() {
        let mut pod = Pod::default();
        pod.metadata.name = Some("agent-x".into());
        pod.status =
            Some(k8s_openapi::api::core::v1::PodStatus { phase: Some("Running".into()), ..Default::default() });
        let entry =
            crate::node::HostEntry { address: "a:5000".into(), endpoint: "http://10.0.0.1:5000".into(), ca: None };
        let plan = NodePlan { hosts: vec![entry] };
        let unread = "no published address is configured on this node: its containerd does not read this agent's files";
        // A foreign file told before the containerd mismatch: resolved since, so not shown.
        let events = [
            told("agent-x", Reason::ForeignHostsFile, "a:5000: a hosts.toml this agent did not write", 1),
            told("agent-x", Reason::HostsConfigured, unread, 2),
            told("agent-x", Reason::ConfigPathMismatch, "containerd's config reads registry hosts from /srv", 2),
        ];
        let said = agent_verdict(&pod, &plan, &events).expect_err("not configured");
        assert!(said.contains("ConfigPathMismatch: containerd's config reads"), "{said}");
        assert!(!said.contains("ForeignHostsFile"), "{said}");
        // Told after the summary: current, shown.
        let events = [
            told("agent-x", Reason::HostsConfigured, "no published address is configured on this node", 1),
            told("agent-x", Reason::ForeignHostsFile, "a:5000: a hosts.toml this agent did not write", 3),
        ];
        let said = agent_verdict(&pod, &plan, &events).expect_err("not configured");
        assert!(said.contains("ForeignHostsFile: a:5000"), "{said}");
        // What another pod told about this one never counts.
        let events = [told(
            "someone",
            Reason::HostsConfigured,
            "this node's containerd pulls a:5000 via http://10.0.0.1:5000",
            4,
        )];
        assert!(agent_verdict(&pod, &plan, &events).is_err());
    }

    #[test]
    fn only_containerd_reads_the_agents_files_and_the_others_are_told_what_to_do() {
        assert_eq!(unsupported("containerd://2.4.2"), None);
        assert!(unsupported("docker://27.3.1").is_some_and(|why| why.contains("insecure-registries")));
        assert!(unsupported("cri-o://1.33.0").is_some_and(|why| why.contains("registries.conf.d")));
        assert!(unsupported("").is_some_and(|why| why.contains("by its own means")));
    }
}
