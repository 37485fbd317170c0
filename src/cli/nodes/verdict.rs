//! One node's line in `doctor`: whether the agents' DaemonSet covers it, whether its runtime reads containerd's
//! hosts.toml, how its agent pod is, and what the agent's state says of the plan in force. Only a covered
//! containerd node can fail the report; the others are told with why.

use k8s_openapi::api::core::v1::{Node, Pod, PodSpec};
use k8s_openapi::api::events::v1::Event;
use kube::ResourceExt;

use crate::node::NodePlan;
use crate::node::state::{self, NodeState};

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

pub fn node(found: &Found, plan: &NodePlan) -> Line {
    if let Err(why) = crate::node::coverage::covered(found.node, found.template) {
        return Line::NotCovered(format!("not covered by the node agent: {why}"));
    }
    let runtime =
        found.node.status.as_ref().and_then(|s| s.node_info.as_ref()).map(|i| i.container_runtime_version.as_str());
    if let Some(why) = unsupported(runtime.unwrap_or_default()) {
        return Line::NotCovered(why);
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
            state::STALE_AFTER_RESYNCS
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
    match state::verdict(plan, state) {
        Ok(said) => Line::Configured(said),
        Err(said) => Line::Wrong(said),
    }
}

/// Why a node's runtime never reads the agent's files, and what to do instead; `None` for containerd.
pub fn unsupported(runtime: &str) -> Option<String> {
    let (name, _) = runtime.split_once("://").unwrap_or((runtime, ""));
    let instead = match name {
        "containerd" => return None,
        "docker" => "add the addresses to dockerd's insecure-registries (minikube: --insecure-registry 10.96.0.0/12)",
        "cri-o" => "add them as insecure registries in /etc/containers/registries.conf.d",
        _ => "configure its registries by its own means",
    };
    Some(format!("its runtime is {runtime:?}, which does not read containerd's hosts.toml: {instead}"))
}

fn ready(pod: &Pod) -> bool {
    let conditions = pod.status.as_ref().and_then(|s| s.conditions.as_deref()).unwrap_or_default();
    conditions.iter().any(|c| c.type_ == "Ready" && c.status == "True")
}

/// Why a pod is not running or not ready, in the kubelet's and the scheduler's words: a waiting container's reason,
/// an unschedulable pod's condition, and the newest Warning Event about the pod (a failed mount is told only there).
fn trouble(pod: &Pod, events: &[Event]) -> Option<String> {
    let mut said = Vec::new();
    let status = pod.status.as_ref();
    let containers = status.into_iter().flat_map(|s| s.init_container_statuses.iter().chain(&s.container_statuses));
    for waiting in containers.flatten().filter_map(|c| c.state.as_ref()?.waiting.as_ref()) {
        let reason = waiting.reason.as_deref().unwrap_or("waiting");
        said.push(match waiting.message.as_deref() {
            Some(message) => format!("{reason}: {message}"),
            None => reason.to_string(),
        });
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

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::api::core::v1::{
        ContainerState, ContainerStateWaiting, ContainerStatus, NodeSpec, NodeStatus, NodeSystemInfo, ObjectReference,
        PodCondition, PodStatus, Taint, Toleration,
    };

    use super::*;
    use crate::node::HostEntry;
    use crate::node::state::{Address, Agent, Verdict};

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
        let entry =
            HostEntry { address: "a:5000".into(), endpoint: "http://10.96.0.12:5000".into(), ca: None, server: None };
        NodePlan { hosts: vec![entry], ..NodePlan::default() }
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
        let Line::NotCovered(said) = line(&crio, &linux(), None, None, &[]) else {
            panic!("cri-o is told, not failed")
        };
        assert!(said.contains("registries.conf.d"), "{said}");
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
        assert!(!fails(line(&crio, &linux(), None, None, &[])), "another runtime");
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
}
