//! One node's line in `doctor`: whether the agents' DaemonSet covers it, whether its runtime reads containerd's
//! hosts.toml, how its agent pod is, and what the agent's state says of the plan in force. Only a covered
//! containerd node can fail the report; the others are told with why.

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{ContainerStateWaiting, Node, Pod, PodSpec};
use k8s_openapi::api::events::v1::Event;
use kube::ResourceExt;

use crate::node::NodePlan;
use crate::node::NodePlanTarget;
use crate::node::api::state::{Address, ConfigPathCheck, NodeState, STALE_AFTER_RESYNCS, Verdict};
use crate::node::mirror::Via;

/// What is known of one node.
pub struct Found<'a> {
    pub node: &'a Node,
    /// The agents' DaemonSet's pod template.
    pub template: &'a PodSpec,
    /// The DaemonSet's pod on this node.
    pub pod: Option<&'a Pod>,
    pub state: Option<&'a NodeState>,
    /// The Events of the agents' namespace: why a pod is not running, in the kubelet's and scheduler's words.
    pub events: &'a [Event],
}

/// One node's line.
#[derive(Debug, PartialEq, Eq)]
pub enum Line {
    Configured(String),
    /// Not the agents' to configure: told, never a failure.
    NotCovered(String),
    Wrong(String),
}

impl Line {
    /// Whether this line fails doctor's exit status: only a covered containerd node that is not configured does.
    pub fn fails(&self) -> bool {
        matches!(self, Line::Wrong(_))
    }

    pub fn said(&self) -> &str {
        match self {
            Line::Configured(said) | Line::NotCovered(said) | Line::Wrong(said) => said,
        }
    }
}

/// The agents among `pods`: only the DaemonSet's own pods (it is their controller), since anyone who may create pods
/// in its namespace could copy its labels and write a state in its name.
pub fn agents<'a>(pods: &'a [Pod], daemonset: &DaemonSet) -> Vec<&'a Pod> {
    let Some(uid) = daemonset.uid() else {
        return Vec::new();
    };
    let controlled = |pod: &&Pod| pod.owner_references().iter().any(|o| o.controller == Some(true) && o.uid == uid);
    pods.iter().filter(controlled).collect()
}

pub fn node(found: &Found, plan: &NodePlan) -> Line {
    if let Err(why) = crate::node::coverage::covered(found.node, found.template) {
        return Line::NotCovered(format!("not covered by the node agent: {why}"));
    }
    // dockerd reads none of the agent's files, but pulls the relay's loopback addresses over plain HTTP all the
    // same; an unknown runtime (a simulated node's) is not judged.
    let other_runtime = unsupported(runtime(found.node));
    let pulls_loopback = ["containerd://", "docker://"].iter().any(|r| runtime(found.node).starts_with(r));
    if let Some(why) = &other_runtime
        && (plan.relays.is_empty() || !pulls_loopback)
    {
        return Line::NotCovered(why.clone());
    }
    let Some(pod) = found.pod else {
        return Line::Wrong("no node agent pod runs here yet, though its DaemonSet covers this node".into());
    };
    let name = pod.name_any();
    let phase = pod.status.as_ref().and_then(|s| s.phase.clone()).unwrap_or_default();
    let trouble = trouble(pod, found.events).map(|why| format!(": {why}")).unwrap_or_default();
    if phase != "Running" {
        return Line::Wrong(format!("its node agent pod {name} is {phase}, not Running{trouble}"));
    }
    if !ready(pod) {
        return Line::Wrong(format!(
            "its node agent pod {name} is not ready, so what it last wrote may be stale (an agent is unready once it \
             has not passed over its directory for {} resyncs, or while it cannot write its state){trouble}",
            STALE_AFTER_RESYNCS
        ));
    }
    let Some(state) = found.state else {
        return Line::Wrong(format!("its node agent {name} has not written its state (NodePullState) yet"));
    };
    if pod.uid().as_deref() != Some(state.agent.uid.as_str()) {
        return Line::Wrong(format!(
            "its state was written by {}, not by its running node agent {name}: stale until that agent writes",
            state.agent.pod
        ));
    }
    if let Some(said) = said_of_itself(state) {
        return Line::Wrong(said);
    }
    let files = match (writes_no_files(state), other_runtime) {
        // CRI-O speaks HTTPS to loopback too: a relay is pulled there only through the drop-in the agent writes.
        (true, _) if runs_crio(found.node) && !plan.relays.is_empty() => Err(format!(
            "{name} writes no runtime configuration (nodeAgent.runtime none), and CRI-O dials the relay's loopback \
             addresses over HTTPS: set nodeAgent.runtime=crio so the agents write a plain-HTTP drop-in for each"
        )),
        (true, _) => Ok(format!("{name} writes no runtime configuration (nodeAgent.runtime none)")),
        (false, Some(why)) => Ok(why),
        (false, None) => verdict(plan, state),
    };
    match (files, relay_verdict(plan, state)) {
        (Ok(files), Ok(None)) => Line::Configured(files),
        (Ok(files), Ok(Some(relayed))) => Line::Configured(format!("{files}; {relayed}")),
        (Err(files), Ok(_)) => Line::Wrong(files),
        (Ok(_), Err(relay)) => Line::Wrong(relay),
        (Err(files), Err(relay)) => Line::Wrong(format!("{files}; {relay}")),
    }
}

/// What the agent's `Configured` condition says that nothing else can: it refused a plan too new for it, or the plan
/// is not yet the one this release's controller writes. Then that is the node's verdict, in the agent's words; any
/// other reason is judged again against the plan in force, which the agent may not have read yet.
fn said_of_itself(state: &NodeState) -> Option<String> {
    use crate::node::api::state::ConfiguredReason;
    let condition = state.configured()?;
    let agent = &state.agent.pod;
    if condition.reason == ConfiguredReason::PlanTooNew.as_str() {
        return Some(format!(
            "its agent {agent} (version {}) is older than the node plan and applies none of it (PlanTooNew): {}",
            state.agent.version, condition.message
        ));
    }
    if condition.reason == ConfiguredReason::PlanPending.as_str() {
        return Some(format!("PlanPending (agent {agent}): {}", condition.message));
    }
    None
}

/// Whether the agent says it writes no runtime configuration (`--runtime=none`): its addresses are not judged.
fn writes_no_files(state: &NodeState) -> bool {
    let reason = crate::node::api::state::ConfiguredReason::RuntimeNotConfigured.as_str();
    state.configured().is_some_and(|c| c.reason == reason)
}

/// The plan's relays as the node's state says they serve: `Ok(None)` when the plan relays nothing, `Ok` what serves,
/// `Err` what does not, in the agent's words, with the fix.
fn relay_verdict(plan: &NodePlan, state: &NodeState) -> Result<Option<String>, String> {
    if plan.relays.is_empty() {
        return Ok(None);
    }
    for entry in &plan.relays {
        let applied =
            state.relays.iter().any(|relay| relay.port == entry.port && relay.target == entry.target.to_string());
        if !applied {
            return Err(format!(
                "the relay of {} at port {} is not in what its agent applied yet (agent {})",
                entry.registry, entry.port, state.agent.pod
            ));
        }
    }
    let Some(condition) = state.relay_serving() else {
        return Err(format!(
            "its agent {} says nothing of the relay: an agent older than the controller (upgrade its image)",
            state.agent.pod
        ));
    };
    if condition.status == "True" {
        return Ok(Some(condition.message.clone()));
    }
    let ports: Vec<String> = plan.relays.iter().map(|entry| entry.port.to_string()).collect();
    let fix = match condition.reason.as_str() {
        "RelayPortTaken" => format!(
            "; find what holds it on the node (`ss -ltnp 'sport = :{}'`) and stop it, or give the registry another              port in nodeAgent.relay.registries: the agent takes the port once it is free",
            ports.join("' 'sport = :")
        ),
        "RelayOff" => "; set nodeAgent.relay.enabled=true".into(),
        _ => format!("; the agent's log on the node says more (agent {})", state.agent.pod),
    };
    Err(format!("relay not serving, {}: {}{fix}", condition.reason, condition.message))
}

/// A node's state checked against the plan now in force: `Ok` says what is configured when every planned address
/// is, `Err` what is not and why, each trouble once (a runtime reading another directory is said once for all the
/// addresses it leaves unread).
fn verdict(plan: &NodePlan, state: &NodeState) -> Result<String, String> {
    let mut missing = Vec::new();
    for entry in &plan.hosts {
        let found =
            state.addresses.iter().find(|a| a.address == entry.address && a.endpoint == entry.endpoint.to_string());
        match found {
            Some(Address { verdict: Verdict::Configured, .. }) => {}
            Some(address) => {
                let why = address.message.as_deref().map(|m| format!(": {m}")).unwrap_or_default();
                missing.push(format!("{} ({}{why})", entry.address, address.verdict.as_str()));
            }
            None => missing.push(format!("{} (not in the plan its agent applied yet)", entry.address)),
        }
    }
    if missing.is_empty() {
        let mirrored: Vec<&str> =
            plan.hosts.iter().filter(|entry| entry.server.is_some()).map(|entry| entry.address.as_str()).collect();
        let mirrors = if mirrored.is_empty() { String::new() } else { format!(", mirroring {}", mirrored.join(", ")) };
        Ok(format!("configured by {}{mirrors}{}", state.agent.pod, read_in(state)))
    } else {
        let mut said = format!("not configured for {} (agent {})", missing.join(", "), state.agent.pod);
        if state.runtime.config_path_check == ConfigPathCheck::Elsewhere {
            said.push_str("; ConfigPathMismatch: ");
            said.push_str(state.runtime.message.as_deref().unwrap_or("the runtime reads another directory"));
        }
        Err(said)
    }
}

/// Where the agent found the runtime's hosts directory, first thing to look at when a node is not what it seems:
/// `; <config file> sets config_path <directory>`; nothing when it did not read the config.
fn read_in(state: &NodeState) -> String {
    match (&state.runtime.config_file, &state.runtime.config_path) {
        (Some(file), Some(path)) => format!("; {file} has it read {path}"),
        (Some(file), None) => format!("; {file} sets no config_path"),
        (None, _) => String::new(),
    }
}

/// `node`'s container runtime as its kubelet reports it (`containerd://2.4.2`), empty when not reported.
fn runtime(node: &Node) -> &str {
    let info = node.status.as_ref().and_then(|s| s.node_info.as_ref());
    info.map_or("", |i| i.container_runtime_version.as_str())
}

/// Whether `node`'s runtime reads the agent's files at all (containerd's hosts.toml, CRI-O's drop-ins).
pub fn reads_agent_files(node: &Node) -> bool {
    unsupported(runtime(node)).is_none()
}

/// Whether `node` runs CRI-O, which dials HTTPS on loopback too: a loopback nodePort served there is not enough.
pub fn runs_crio(node: &Node) -> bool {
    runtime(node).starts_with("cri-o://")
}

/// Why a node's runtime never reads the agent's files, and what to do instead; `None` for containerd and CRI-O.
pub fn unsupported(runtime: &str) -> Option<String> {
    let (name, _) = runtime.split_once("://").unwrap_or((runtime, ""));
    let instead = match name {
        "containerd" | "cri-o" => return None,
        "docker" => "add the addresses to dockerd's insecure-registries (minikube: --insecure-registry 10.96.0.0/12)",
        _ => "configure its registries by its own means",
    };
    Some(format!("its runtime is {runtime:?}, whose registry files the node agent does not write: {instead}"))
}

fn ready(pod: &Pod) -> bool {
    let conditions = pod.status.as_ref().and_then(|s| s.conditions.as_deref()).unwrap_or_default();
    conditions.iter().any(|c| c.type_ == "Ready" && c.status == "True")
}

/// Why a container waits, as the kubelet says it: "reason: message", or the reason alone.
pub(crate) fn waiting_words(waiting: &ContainerStateWaiting) -> String {
    let reason = waiting.reason.as_deref().unwrap_or("Waiting");
    match waiting.message.as_deref() {
        Some(message) if !message.is_empty() => format!("{reason}: {message}"),
        _ => reason.to_string(),
    }
}

/// Why a pod is not running or not ready, in the kubelet's and the scheduler's words: a waiting container's reason,
/// an unschedulable pod's condition, and the newest Warning Event about the pod (a failed mount is told only there).
fn trouble(pod: &Pod, events: &[Event]) -> Option<String> {
    let mut said = Vec::new();
    let status = pod.status.as_ref();
    let containers = status.into_iter().flat_map(|s| s.init_container_statuses.iter().chain(&s.container_statuses));
    for waiting in containers.flatten().filter_map(|c| c.state.as_ref()?.waiting.as_ref()) {
        said.push(waiting_words(waiting));
    }
    let conditions = status.and_then(|s| s.conditions.as_deref()).unwrap_or_default();
    if let Some(unscheduled) = conditions.iter().find(|c| c.type_ == "PodScheduled" && c.status == "False") {
        let reason = unscheduled.reason.as_deref().unwrap_or("Unschedulable");
        said.push(format!("{reason}: {}", unscheduled.message.as_deref().unwrap_or_default()));
    }
    let name = pod.name_any();
    let newest = events
        .iter()
        .filter(|e| e.type_.as_deref() == Some("Warning"))
        .filter(|e| {
            e.regarding.as_ref().is_some_and(|r| r.kind.as_deref() == Some("Pod") && r.name.as_ref() == Some(&name))
        })
        .max_by_key(|e| {
            let at = e.event_time.as_ref().map(|t| t.0);
            at.or(e.deprecated_last_timestamp.as_ref().map(|t| t.0)).or(e
                .metadata
                .creation_timestamp
                .as_ref()
                .map(|t| t.0))
        });
    if let Some(event) = newest {
        said.push(format!(
            "{}: {}",
            event.reason.as_deref().unwrap_or_default(),
            event.note.as_deref().unwrap_or_default().trim()
        ));
    }
    (!said.is_empty()).then(|| said.join("; "))
}

/// The namespaces whose objects decide what every node pulls, release first, each with what in it does: the
/// release's (the node plan, the agents' DaemonSet and ServiceAccount) and each mirror Service's (whoever changes
/// its selector serves every node's pulls of the upstream). Only cluster admins should write in any of them.
pub fn deciding_namespaces(agents: &NodePlanTarget) -> Vec<String> {
    let mut namespaces: Vec<(&str, Vec<String>)> = vec![(
        &agents.namespace,
        vec![format!("the node plan {}, the node agents' DaemonSet and ServiceAccount", agents.name)],
    )];
    for mirror in &agents.rules.mirrors {
        if let Via::Service { namespace, name, .. } = &mirror.via {
            let what = format!("the Service {name}, the mirror of {}", mirror.upstream);
            match namespaces.iter_mut().find(|(known, _)| known == namespace) {
                Some((_, said)) => said.push(what),
                None => namespaces.push((namespace, vec![what])),
            }
        }
    }
    namespaces.into_iter().map(|(namespace, said)| format!("{namespace} ({})", said.join("; "))).collect()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::api::core::v1::{
        ContainerState, ContainerStateWaiting, ContainerStatus, NodeSpec, NodeStatus, NodeSystemInfo, ObjectReference,
        PodCondition, PodStatus, Taint, Toleration,
    };

    use super::*;
    use crate::node::HostEntry;
    use crate::node::api::state::{Agent, Runtime};

    fn node(name: &str, runtime: &str, labels: &[(&str, &str)], taints: &[(&str, &str)]) -> Node {
        let mut node = Node::default();
        node.metadata.name = Some(name.into());
        node.metadata.labels = Some(labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect());
        let taints = taints.iter().map(|(key, effect)| Taint {
            key: key.to_string(),
            effect: effect.to_string(),
            ..Taint::default()
        });
        node.spec = Some(NodeSpec { taints: Some(taints.collect()), ..NodeSpec::default() });
        let info = NodeSystemInfo { container_runtime_version: runtime.into(), ..NodeSystemInfo::default() };
        node.status = Some(NodeStatus { node_info: Some(info), ..NodeStatus::default() });
        node
    }

    fn template(selector: &[(&str, &str)], tolerations: Vec<Toleration>) -> PodSpec {
        let selector: BTreeMap<String, String> = selector.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        PodSpec { node_selector: Some(selector), tolerations: Some(tolerations), ..PodSpec::default() }
    }

    fn linux() -> PodSpec {
        template(
            &[("kubernetes.io/os", "linux")],
            vec![Toleration { operator: Some("Exists".into()), ..Toleration::default() }],
        )
    }

    fn pod(phase: &str, ready: bool) -> Pod {
        let mut pod = Pod::default();
        pod.metadata.name = Some("agent-x".into());
        pod.metadata.uid = Some("uid-x".into());
        let condition = PodCondition {
            type_: "Ready".into(),
            status: if ready { "True" } else { "False" }.into(),
            ..PodCondition::default()
        };
        pod.status =
            Some(PodStatus { phase: Some(phase.into()), conditions: Some(vec![condition]), ..PodStatus::default() });
        pod
    }

    fn plan() -> NodePlan {
        crate::node::fixtures::plan(&["a:5000"])
    }

    fn state(uid: &str, verdict: Verdict) -> NodeState {
        let address = Address {
            address: "a:5000".into(),
            endpoint: "http://10.96.0.12:5000".into(),
            server: None,
            verdict,
            message: None,
        };
        NodeState {
            agent: Agent { pod: "agent-x".into(), uid: uid.into(), version: "0.1.0".into() },
            addresses: vec![address],
            ..NodeState::default()
        }
    }

    fn line(node: &Node, template: &PodSpec, pod: Option<&Pod>, state: Option<&NodeState>, events: &[Event]) -> Line {
        super::node(&Found { node, template, pod, state, events }, &plan())
    }

    #[test]
    fn only_a_covered_containerd_node_is_judged_the_others_are_told_why_not() {
        let linux_node = node("n1", "containerd://2.4.2", &[("kubernetes.io/os", "linux")], &[]);
        let windows = node("w1", "containerd://1.7.0", &[("kubernetes.io/os", "windows")], &[]);
        let crio = node("c1", "cri-o://1.33.0", &[("kubernetes.io/os", "linux")], &[]);
        let configured = state("uid-x", Verdict::Configured);
        let running = pod("Running", true);
        assert_eq!(
            line(&linux_node, &linux(), Some(&running), Some(&configured), &[]),
            Line::Configured("configured by agent-x".into())
        );
        let Line::NotCovered(said) = line(&windows, &linux(), None, None, &[]) else {
            panic!("windows is not covered")
        };
        assert!(
            said.contains("nodeSelector kubernetes.io/os=linux does not match: the node has kubernetes.io/os=windows"),
            "{said}"
        );
        // CRI-O reads the agents' drop-ins: judged by its state as a containerd node is.
        assert_eq!(
            line(&crio, &linux(), Some(&running), Some(&configured), &[]),
            Line::Configured("configured by agent-x".into())
        );
    }

    #[test]
    fn an_agent_too_old_for_the_plan_or_waiting_for_it_is_said_to_be_that_before_its_addresses() {
        use crate::node::api::state::{Configured, ConfiguredReason};
        let linux_node = node("n1", "containerd://2.4.2", &[("kubernetes.io/os", "linux")], &[]);
        let running = pod("Running", true);
        let saying = |reason: ConfiguredReason, verdict: Verdict| {
            let mut state = state("uid-x", verdict);
            let configured = Configured { configured: false, reason, message: "in its words".into() };
            let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH);
            state.conditions = vec![configured.condition(None, now)];
            state
        };
        // Its addresses are those of the last plan it applied: the condition says why the new one is not.
        let too_old = saying(ConfiguredReason::PlanTooNew, Verdict::Configured);
        assert_eq!(
            line(&linux_node, &linux(), Some(&running), Some(&too_old), &[]),
            Line::Wrong(
                "its agent agent-x (version 0.1.0) is older than the node plan and applies none of it (PlanTooNew): \
                 in its words"
                    .into()
            )
        );
        let pending = saying(ConfiguredReason::PlanPending, Verdict::Configured);
        assert_eq!(
            line(&linux_node, &linux(), Some(&running), Some(&pending), &[]),
            Line::Wrong("PlanPending (agent agent-x): in its words".into())
        );
        // Any other reason is judged again against the plan in force.
        let foreign = saying(ConfiguredReason::ForeignNodeFile, Verdict::Configured);
        assert_eq!(
            line(&linux_node, &linux(), Some(&running), Some(&foreign), &[]),
            Line::Configured("configured by agent-x".into())
        );
    }

    #[test]
    fn only_a_covered_node_that_is_not_configured_fails_the_exit_status() {
        let linux_node = node("n1", "containerd://2.4.2", &[("kubernetes.io/os", "linux")], &[]);
        let windows = node("w1", "containerd://1.7.0", &[("kubernetes.io/os", "windows")], &[]);
        let crio = node("c1", "cri-o://1.33.0", &[("kubernetes.io/os", "linux")], &[]);
        let (running, configured) = (pod("Running", true), state("uid-x", Verdict::Configured));
        let fails = |line: Line| line.fails();
        assert!(!fails(line(&linux_node, &linux(), Some(&running), Some(&configured), &[])));
        assert!(!fails(line(&windows, &linux(), None, None, &[])), "not covered");
        assert!(fails(line(&crio, &linux(), None, None, &[])), "CRI-O is covered: no agent pod fails");
        assert!(fails(line(&linux_node, &linux(), None, None, &[])), "covered, no agent pod");
        assert!(fails(line(&linux_node, &linux(), Some(&running), Some(&state("uid-x", Verdict::Foreign)), &[])));
    }

    #[test]
    fn a_taint_the_agents_do_not_tolerate_leaves_the_node_uncovered_but_condition_taints_do_not() {
        let only_exists_for_one_key = template(
            &[],
            vec![Toleration {
                key: Some("dedicated".into()),
                operator: Some("Exists".into()),
                ..Toleration::default()
            }],
        );
        let gpu = node("g1", "containerd://2.4.2", &[], &[("nvidia.com/gpu", "NoSchedule")]);
        let Line::NotCovered(said) = line(&gpu, &only_exists_for_one_key, None, None, &[]) else {
            panic!("not covered")
        };
        assert!(said.contains("taint nvidia.com/gpu:NoSchedule is not tolerated"), "{said}");
        let dedicated = node(
            "d1",
            "containerd://2.4.2",
            &[],
            &[("dedicated", "NoExecute"), ("node.kubernetes.io/not-ready", "NoExecute")],
        );
        assert!(
            matches!(line(&dedicated, &only_exists_for_one_key, None, None, &[]), Line::Wrong(_)),
            "covered: judged"
        );
        let preferred = node("p1", "containerd://2.4.2", &[], &[("anything", "PreferNoSchedule")]);
        assert!(matches!(line(&preferred, &only_exists_for_one_key, None, None, &[]), Line::Wrong(_)));
    }

    #[test]
    fn a_waiting_container_is_worded_as_the_kubelet_says_it() {
        let words = |reason: Option<&str>, message: Option<&str>| {
            waiting_words(&ContainerStateWaiting { reason: reason.map(Into::into), message: message.map(Into::into) })
        };
        assert_eq!(words(Some("ErrImagePull"), Some("not found")), "ErrImagePull: not found");
        assert_eq!(words(Some("ContainerCreating"), None), "ContainerCreating");
        assert_eq!(words(Some("ContainerCreating"), Some("")), "ContainerCreating");
        assert_eq!(words(None, None), "Waiting");
    }

    #[test]
    fn a_pending_agent_pod_says_why_in_the_kubelets_words() {
        let n1 = node("n1", "containerd://2.4.2", &[("kubernetes.io/os", "linux")], &[]);
        let mut pending = pod("Pending", false);
        let waiting = ContainerStateWaiting { reason: Some("ContainerCreating".into()), message: None };
        let status = ContainerStatus {
            state: Some(ContainerState { waiting: Some(waiting), ..ContainerState::default() }),
            ..ContainerStatus::default()
        };
        pending.status.as_mut().unwrap().container_statuses = Some(vec![status]);
        let mount = Event {
            type_: Some("Warning".into()),
            reason: Some("FailedMount".into()),
            note: Some("MountVolume.SetUp failed for volume \"containerd-config\" : hostPath type check failed: /etc/containerd is not a directory".into()),
            regarding: Some(ObjectReference { kind: Some("Pod".into()), name: Some("agent-x".into()), ..ObjectReference::default() }),
            ..Event::default()
        };
        let Line::Wrong(said) = line(&n1, &linux(), Some(&pending), None, &[mount]) else { panic!("pending is wrong") };
        assert!(
            said.starts_with(
                "its node agent pod agent-x is Pending, not Running: ContainerCreating; FailedMount: MountVolume"
            ),
            "{said}"
        );
        assert!(said.contains("/etc/containerd is not a directory"), "{said}");
    }

    #[test]
    fn a_state_an_unready_agent_or_another_pod_wrote_is_stale_and_a_missing_one_is_said() {
        let n1 = node("n1", "containerd://2.4.2", &[("kubernetes.io/os", "linux")], &[]);
        let configured = state("uid-x", Verdict::Configured);
        let Line::Wrong(said) = line(&n1, &linux(), Some(&pod("Running", false)), Some(&configured), &[]) else {
            panic!()
        };
        assert!(said.contains("not ready, so what it last wrote may be stale") && said.contains("3 resyncs"), "{said}");
        let older = state("uid-old", Verdict::Configured);
        let Line::Wrong(said) = line(&n1, &linux(), Some(&pod("Running", true)), Some(&older), &[]) else { panic!() };
        assert!(said.contains("not by its running node agent agent-x"), "{said}");
        let Line::Wrong(said) = line(&n1, &linux(), Some(&pod("Running", true)), None, &[]) else { panic!() };
        assert!(said.contains("has not written its state"), "{said}");
        let foreign = state("uid-x", Verdict::Foreign);
        assert!(
            matches!(line(&n1, &linux(), Some(&pod("Running", true)), Some(&foreign), &[]), Line::Wrong(s) if s.contains("a:5000 (foreign"))
        );
    }

    #[test]
    fn an_unscheduled_pod_says_the_schedulers_words_and_no_other_pods_warning() {
        let n1 = node("n1", "containerd://2.4.2", &[("kubernetes.io/os", "linux")], &[]);
        let mut unscheduled = pod("Pending", false);
        unscheduled.status.as_mut().unwrap().conditions.as_mut().unwrap().push(PodCondition {
            type_: "PodScheduled".into(),
            status: "False".into(),
            reason: Some("Unschedulable".into()),
            message: Some("0/2 nodes are available: 2 Insufficient memory.".into()),
            ..PodCondition::default()
        });
        let about = |kind: &str, name: &str| Event {
            type_: Some("Warning".into()),
            reason: Some(format!("About{kind}")),
            note: Some(format!("{kind} {name}")),
            regarding: Some(ObjectReference {
                kind: Some(kind.into()),
                name: Some(name.into()),
                ..ObjectReference::default()
            }),
            ..Event::default()
        };
        let events = [about("Pod", "agent-y"), about("Node", "agent-x")];
        let Line::Wrong(said) = line(&n1, &linux(), Some(&unscheduled), None, &events) else { panic!("pending") };
        assert_eq!(
            said,
            "its node agent pod agent-x is Pending, not Running: Unschedulable: 0/2 nodes are available: 2 Insufficient \
             memory."
        );
    }

    #[test]
    fn docker_is_told_its_own_setting_and_every_line_says_its_text() {
        let said = unsupported("docker://28.1.1").expect("docker does not read hosts.toml");
        assert!(said.contains("\"docker://28.1.1\"") && said.contains("dockerd's insecure-registries"), "{said}");
        assert_eq!(unsupported("containerd://2.4.2"), None);
        for line in [Line::Configured("a".into()), Line::NotCovered("a".into()), Line::Wrong("a".into())] {
            assert_eq!(line.said(), "a", "{line:?}");
        }
    }

    use crate::node::fixtures::entry;

    fn found(addresses: &[(&str, Verdict, Option<&str>)]) -> NodeState {
        let addresses = addresses.iter().map(|(address, verdict, message)| Address {
            address: address.to_string(),
            endpoint: "http://10.96.0.12:5000".into(),
            server: None,
            verdict: *verdict,
            message: message.map(str::to_string),
        });
        NodeState {
            agent: Agent { pod: "agent-x".into(), ..Agent::default() },
            addresses: addresses.collect(),
            ..NodeState::default()
        }
    }

    #[test]
    fn only_a_node_with_every_planned_address_configured_passes_and_each_other_says_why() {
        let plan = NodePlan::of(vec![entry("a:5000"), entry("b:5000"), entry("c:5000")]);
        let state = found(&[
            ("a:5000", Verdict::Configured, None),
            ("b:5000", Verdict::Foreign, Some("a file this agent did not write configures it")),
            ("c:5000", Verdict::Failed, Some("read-only file system")),
        ]);
        let said = verdict(&plan, &state).expect_err("two are not configured");
        assert!(said.starts_with("not configured for b:5000 (foreign: a file"), "{said}");
        assert!(said.contains("c:5000 (failed: read-only file system)"), "{said}");
        let mut clean = found(&[("a:5000", Verdict::Configured, None)]);
        assert_eq!(verdict(&NodePlan::of(vec![entry("a:5000")]), &clean), Ok("configured by agent-x".into()));
        // What the agent read of the runtime's config comes first when a node is not what it seems.
        clean.runtime.config_file = Some("/etc/containerd/config.toml".into());
        clean.runtime.config_path = Some("/etc/containerd/certs.d".into());
        let said = verdict(&NodePlan::of(vec![entry("a:5000")]), &clean);
        assert_eq!(
            said,
            Ok("configured by agent-x; /etc/containerd/config.toml has it read /etc/containerd/certs.d".into())
        );
        clean.runtime.config_path = None;
        let said = verdict(&NodePlan::of(vec![entry("a:5000")]), &clean);
        assert_eq!(said, Ok("configured by agent-x; /etc/containerd/config.toml sets no config_path".into()));
    }

    #[test]
    fn a_mirror_is_named_on_a_configured_node() {
        let mirror = HostEntry { server: Some("https://registry-1.docker.io".into()), ..entry("docker.io") };
        let plan = NodePlan::of(vec![entry("a:5000"), mirror]);
        let state = found(&[("a:5000", Verdict::Configured, None), ("docker.io", Verdict::Configured, None)]);
        assert_eq!(verdict(&plan, &state), Ok("configured by agent-x, mirroring docker.io".into()));
    }

    #[test]
    fn a_plan_the_agent_has_not_applied_yet_or_a_moved_endpoint_is_not_configured() {
        let state = found(&[("a:5000", Verdict::Configured, None)]);
        let newer = NodePlan::of(vec![entry("a:5000"), entry("b:5000")]);
        assert!(verdict(&newer, &state).is_err_and(|s| s.contains("b:5000 (not in the plan its agent applied")));
        let moved = NodePlan::of(vec![HostEntry { endpoint: "http://10.96.0.99:5000".into(), ..entry("a:5000") }]);
        assert!(verdict(&moved, &state).is_err());
    }

    #[test]
    fn a_node_whose_containerd_reads_elsewhere_says_the_mismatch_once() {
        let plan = NodePlan::of(vec![entry("a:5000"), entry("b:5000")]);
        let mut state = found(&[("a:5000", Verdict::Unread, None), ("b:5000", Verdict::Unread, None)]);
        state.runtime = Runtime {
            config_path_check: ConfigPathCheck::Elsewhere,
            config_file: Some("/etc/containerd/config.toml".into()),
            config_path: Some("/srv/certs.d".into()),
            message: Some("containerd's config sets config_path to /srv/certs.d; set nodeAgent.configPath".into()),
        };
        let said = verdict(&plan, &state).expect_err("unread");
        assert!(said.starts_with("not configured for a:5000 (unread), b:5000 (unread) (agent agent-x)"), "{said}");
        assert_eq!(said.matches("nodeAgent.configPath").count(), 1, "{said}");
        assert!(said.contains("; ConfigPathMismatch: containerd's config"), "{said}");
    }

    #[test]
    fn only_the_daemonsets_own_pods_are_agents_whatever_their_labels() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
        let owned = |name: &str, uid: &str, controller: Option<bool>| {
            let mut pod = Pod::default();
            pod.metadata.name = Some(name.into());
            pod.metadata.owner_references = Some(vec![OwnerReference {
                uid: uid.into(),
                controller,
                kind: "DaemonSet".into(),
                ..OwnerReference::default()
            }]);
            pod
        };
        let mut daemonset = DaemonSet::default();
        daemonset.metadata.uid = Some("ds-uid".into());
        let pods = [
            owned("agent", "ds-uid", Some(true)),
            owned("copied-labels", "other-uid", Some(true)),
            owned("owned-not-controlled", "ds-uid", None),
            Pod::default(),
        ];
        let names: Vec<String> = agents(&pods, &daemonset).iter().map(|p| p.name_any()).collect();
        assert_eq!(names, ["agent"]);
        assert!(agents(&pods, &DaemonSet::default()).is_empty(), "a DaemonSet with no UID owns nothing");
    }

    #[test]
    fn the_namespaces_deciding_every_nodes_pulls_are_the_releases_and_each_mirror_services_once_each() {
        let mirror = |text: &str| text.parse::<crate::node::mirror::Mirror>().expect("a mirror");
        let mut agents = crate::node::fixtures::plan_target();
        let release = "lrp (the node plan lrp-node-plan, the node agents' DaemonSet and ServiceAccount)";
        assert_eq!(deciding_namespaces(&agents), [release]);
        agents.rules.mirrors = vec![
            mirror("docker.io=service:cache/docker-hub:5000"),
            mirror("quay.io=http://quay-cache.example:5000"),
            mirror("ghcr.io=service:cache/ghcr:5000"),
            mirror("gcr.io=service:lrp/gcr:5000"),
        ];
        assert_eq!(
            deciding_namespaces(&agents),
            [
                "lrp (the node plan lrp-node-plan, the node agents' DaemonSet and ServiceAccount; the Service gcr, \
                 the mirror of gcr.io)",
                "cache (the Service docker-hub, the mirror of docker.io; the Service ghcr, the mirror of ghcr.io)",
            ]
        );
    }

    fn relay_plan() -> NodePlan {
        let relay = crate::node::RelayEntry {
            port: 5001,
            registry: "registry/registry".into(),
            target: "10.96.0.12:5000".parse().expect("an address"),
        };
        NodePlan::with_relays(plan().hosts, vec![relay])
    }

    /// A state whose relay is as `condition` says, written by an agent that writes files or not.
    fn relaying(status: &str, reason: &str, message: &str, writes_files: bool) -> NodeState {
        use crate::node::api::state::{Configured, ConfiguredReason, Relay, RelayReason, RelayServing};
        let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH);
        let configured =
            if writes_files { ConfiguredReason::NodeFilesConfigured } else { ConfiguredReason::RuntimeNotConfigured };
        let configured = Configured { configured: true, reason: configured, message: "m".into() };
        let reason = [RelayReason::RelayServing, RelayReason::RelayPortTaken, RelayReason::RelayOff]
            .into_iter()
            .find(|r| r.as_str() == reason)
            .expect("a reason");
        let relay = RelayServing { serving: status == "True", reason, message: message.into() };
        let relayed = Relay {
            port: 5001,
            registry: "registry/registry".into(),
            target: "10.96.0.12:5000".into(),
            listeners: Vec::new(),
        };
        NodeState {
            relays: vec![relayed],
            conditions: vec![configured.condition(None, now.clone()), relay.condition(None, now)],
            ..state("uid-x", Verdict::Configured)
        }
    }

    #[test]
    fn a_relay_is_judged_on_every_covered_node_whatever_its_runtime_with_the_fix_when_it_does_not_serve() {
        let judge = |node: &Node, state: &NodeState| {
            super::node(
                &Found { node, template: &linux(), pod: Some(&pod("Running", true)), state: Some(state), events: &[] },
                &relay_plan(),
            )
        };
        let containerd = node("n1", "containerd://2.4.2", &[("kubernetes.io/os", "linux")], &[]);
        let serving = relaying("True", "RelayServing", "relaying registry/registry at 127.0.0.1:5001", true);
        assert_eq!(
            judge(&containerd, &serving),
            Line::Configured("configured by agent-x; relaying registry/registry at 127.0.0.1:5001".into())
        );
        let taken = relaying("False", "RelayPortTaken", "127.0.0.1:5001 is taken", true);
        let Line::Wrong(said) = judge(&containerd, &taken) else { panic!("a taken port fails") };
        assert!(said.contains("RelayPortTaken: 127.0.0.1:5001 is taken"), "{said}");
        assert!(said.contains("ss -ltnp 'sport = :5001'"), "{said}");
        let off = relaying("False", "RelayOff", "the plan relays", true);
        let Line::Wrong(said) = judge(&containerd, &off) else { panic!("an agent that does not relay fails") };
        assert!(said.ends_with("set nodeAgent.relay.enabled=true"), "{said}");
        // dockerd reads none of containerd's files, but pulls the relay's address: judged by the relay alone.
        let docker = node("d1", "docker://28.2.2", &[("kubernetes.io/os", "linux")], &[]);
        let relay_only = relaying("True", "RelayServing", "relaying registry/registry", false);
        assert_eq!(
            judge(&docker, &relay_only),
            Line::Configured(
                "agent-x writes no runtime configuration (nodeAgent.runtime none); relaying registry/registry".into()
            )
        );
        let mut moved = serving.clone();
        moved.relays[0].target = "10.96.0.99:5000".into();
        let Line::Wrong(said) = judge(&containerd, &moved) else { panic!("a relay to an old target fails") };
        assert!(said.contains("not in what its agent applied yet"), "{said}");
        let mut silent = serving.clone();
        silent.conditions.truncate(1);
        let Line::Wrong(said) = judge(&containerd, &silent) else { panic!("an agent that does not say fails") };
        assert!(said.contains("older than the controller"), "{said}");
        // CRI-O speaks HTTPS to loopback too: an agent writing no drop-in fails there, with the value to set.
        let crio = node("c1", "cri-o://1.33.0", &[("kubernetes.io/os", "linux")], &[]);
        assert!(matches!(judge(&crio, &relay_only), Line::Wrong(said) if said.contains("nodeAgent.runtime=crio")));
        assert_eq!(
            judge(&crio, &serving),
            Line::Configured("configured by agent-x; relaying registry/registry at 127.0.0.1:5001".into())
        );
    }
}
