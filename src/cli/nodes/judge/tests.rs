use k8s_openapi::api::apps::v1::{DaemonSet, DaemonSetSpec};
use k8s_openapi::api::core::v1::{Node, NodeStatus, NodeSystemInfo, PodSpec, PodTemplateSpec};

use super::*;
use crate::kube_proxy::ConfigTarget;
use crate::node::fixtures::{CLUSTER_IP_ENDPOINT, plan, plan_target as target};
use crate::node::mirror::{Mirror, MirrorFault, MirrorProblem, Via};
use crate::node::{CaProblem, Refusal};
use crate::pull::fixtures::registry;

const ADDRESS: &str = "registry.reg.svc.cluster.local:5000";

/// The plan mapping the published cluster DNS name to its ClusterIP, with `refused` addresses.
fn decided(refused: &[&str]) -> Result<node::Decision, String> {
    let plan = plan(&[ADDRESS]);
    let refused = refused.iter().map(|a| (a.to_string(), Refusal::NotAllowed)).collect();
    Ok(node::Decision { plan, refused, ..node::Decision::default() })
}

fn empty() -> Result<node::Decision, String> {
    Ok(node::Decision::default())
}

fn node(name: &str) -> Node {
    let mut node = Node::default();
    node.metadata.name = Some(name.into());
    let info = NodeSystemInfo { container_runtime_version: "containerd://2.4.2".into(), ..NodeSystemInfo::default() };
    node.status = Some(NodeStatus { node_info: Some(info), ..NodeStatus::default() });
    node
}

/// The agents' objects: `nodes` (a node named `docker-*` runs Docker, which no agent configures), the DaemonSet if
/// `daemonset`, no agent pod and no state.
fn agents(nodes: Result<&[&str], &str>, daemonset: bool) -> Agents {
    let nodes = nodes.map(|names| {
        let docker = |n: &Node| {
            let mut n = n.clone();
            n.status.as_mut().and_then(|s| s.node_info.as_mut()).expect("info").container_runtime_version =
                "docker://27.0.1".into();
            n
        };
        names.iter().map(|n| if n.starts_with("docker-") { docker(&node(n)) } else { node(n) }).collect()
    });
    let template = PodTemplateSpec { spec: Some(PodSpec::default()), ..PodTemplateSpec::default() };
    let daemonset = daemonset.then(|| DaemonSet {
        metadata: kube::api::ObjectMeta { uid: Some("ds-uid".into()), ..Default::default() },
        spec: Some(DaemonSetSpec { template, ..DaemonSetSpec::default() }),
        status: None,
    });
    Agents {
        nodes: nodes.map_err(str::to_string),
        daemonset,
        pods: Vec::new(),
        states: Ok(Vec::new()),
        events: Vec::new(),
    }
}

fn text(section: &Section) -> String {
    section.lines.join("\n")
}

#[test]
fn a_kept_document_judges_the_stored_plan_and_an_unreadable_one_is_told_without_failing() {
    let target = target();
    let published = registry(None);
    let unreadable = Err("configmaps \"lrp-node-plan\" is forbidden".to_string());
    let (section, not_done) = super::section(Some(&published), true, Some(&target), &unreadable, None, None);
    assert_eq!(section.lines[0], "\n== Node pulls (the node agent's files; docs/node-pulls.md)");
    assert!(section.lines[1].starts_with("  the published registry has a problem (above), so its last good document"));
    assert_eq!(
        section.lines[2],
        "  the node plan ConfigMap lrp/lrp-node-plan cannot be read with this identity: configmaps \"lrp-node-plan\" is forbidden"
    );
    assert!(!section.wrong && not_done.is_empty());
    // Not kept: no word of a problem.
    let (section, _) = super::section(Some(&published), false, Some(&target), &empty(), None, None);
    assert!(!text(&section).contains("has a problem"), "{section:?}");
}

#[test]
fn an_unusable_ca_bundle_fails_and_a_tls_registry_without_one_is_told_as_pulled_as_it_is() {
    let target = target();
    let published = registry(None);
    let problem = CaProblem::Annotation { value: "nonsense".into(), namespace: "reg".into() };
    let unusable = Ok(node::Decision { ca_problem: Some(problem), ..node::Decision::default() });
    let (failed, _) = super::section(Some(&published), false, Some(&target), &unusable, None, None);
    assert!(failed.wrong);
    assert!(failed.lines[1].starts_with("  the registry serves TLS and its CA bundle cannot be used"), "{failed:?}");
    assert!(failed.lines[1].ends_with(" (as read by this identity)"), "{failed:?}");

    let mut tls = registry(None);
    tls.ports.tls = true;
    let (told, _) = super::section(Some(&tls), false, Some(&target), &empty(), None, None);
    assert!(!told.wrong);
    assert!(
        told.lines[1].starts_with("  the registry serves TLS: nodes are configured for it only with its CA bundle")
    );
    let (plain, _) = super::section(Some(&published), false, Some(&target), &empty(), None, None);
    assert_eq!(plain.lines[1], "  no published address needs a node file: each node's runtime pulls them as they are");
    assert!(!plain.wrong);
}

#[test]
fn refused_addresses_are_not_done_only_where_agents_write_and_an_unusable_mirror_fails() {
    let target = target();
    let published = registry(None);
    let (_, not_done) = super::section(
        Some(&published),
        false,
        Some(&target),
        &decided(&["docker.io"]),
        Some(&agents(Ok(&["a"]), true)),
        None,
    );
    assert_eq!(not_done[0], format!("docker.io gets no node file: it {}", Refusal::NotAllowed));
    let (off, not_done) = super::section(Some(&published), false, None, &decided(&["docker.io"]), None, None);
    assert!(not_done.is_empty(), "with the agents off no address gets a file: {not_done:?}");
    let said = format!("  the node agent is off: a node's containerd pulls {ADDRESS} only if someone configured it to");
    assert!(text(&off).contains(&said), "{}", text(&off));
    assert!(!off.wrong);

    let mirror = Mirror {
        upstream: "docker.io".into(),
        via: Via::Service { namespace: "cache".into(), name: "zot".into(), port: 5000 },
    };
    let broken = Ok(node::Decision {
        mirror_problems: vec![MirrorProblem { mirror, fault: MirrorFault::Missing }],
        ..node::Decision::default()
    });
    let (section, _) = super::section(Some(&published), false, Some(&target), &broken, None, None);
    assert!(section.wrong, "{section:?}");
    assert!(section.lines[1].contains("docker.io"), "{section:?}");
    assert_eq!(
        section.lines.last().map(String::as_str),
        Some("  no published address needs a node file: each node's runtime pulls them as they are")
    );
}

#[test]
fn each_planned_address_is_named_then_where_it_is_decided_then_each_node() {
    let target = target();
    let published = registry(None);
    let found = agents(Ok(&["a", "docker-b"]), true);
    let (section, not_done) = super::section(Some(&published), false, Some(&target), &decided(&[]), Some(&found), None);
    assert_eq!(section.lines[1], format!("  {ADDRESS} needs a node file mapping it to {CLUSTER_IP_ENDPOINT}"));
    assert!(
        section.lines[2].starts_with("  what every node pulls is decided in these namespaces, so only cluster admins")
    );
    assert!(
        section.lines[2].contains("(docs/node-pulls.md#security): lrp (the node plan lrp-node-plan,"),
        "{section:?}"
    );
    assert_eq!(section.lines[3], "  node a: no node agent pod runs here yet, though its DaemonSet covers this node");
    assert!(section.lines[4].starts_with("  node docker-b: "), "{section:?}");
    assert!(section.wrong, "a covered node without an agent fails");
    assert!(not_done.is_empty(), "node a is covered: {not_done:?}");

    let mut mirrored = decided(&[]).expect("a decision");
    mirrored.plan.hosts[0].server = Some("https://registry-1.docker.io".into());
    let (section, _) = super::section(Some(&published), false, Some(&target), &Ok(mirrored), Some(&found), None);
    assert_eq!(
        section.lines[1],
        format!(
            "  {ADDRESS} is mirrored: a node file sends its pulls to {CLUSTER_IP_ENDPOINT} first, then to https://registry-1.docker.io"
        )
    );
}

#[test]
fn what_cannot_be_read_of_the_agents_is_told_and_only_a_missing_daemonset_fails() {
    let target = target();
    let published = registry(None);
    let unlisted = agents(Err("nodes is forbidden"), true);
    let (section, _) = super::section(Some(&published), false, Some(&target), &decided(&[]), Some(&unlisted), None);
    assert_eq!(
        section.lines.last().map(String::as_str),
        Some("  nodes cannot be listed with this identity: nodes is forbidden")
    );
    assert!(!section.wrong);

    let without = agents(Ok(&["a"]), false);
    let (section, _) = super::section(Some(&published), false, Some(&target), &decided(&[]), Some(&without), None);
    assert_eq!(
        section.lines.last().map(String::as_str),
        Some("  no node agent DaemonSet in namespace lrp follows the plan lrp-node-plan: is nodeAgent.enabled set?")
    );
    assert!(section.wrong);

    let mut stateless = agents(Ok(&["docker-a"]), true);
    stateless.states = Err("nodepullstates is forbidden".into());
    let (section, not_done) =
        super::section(Some(&published), false, Some(&target), &decided(&[]), Some(&stateless), None);
    assert!(text(&section).contains(
        "  the nodes' states (NodePullState) cannot be read with this identity: nodepullstates is forbidden"
    ));
    assert!(!section.wrong, "a node no agent covers is told, not failed");
    assert_eq!(
        not_done,
        [format!("no node is covered by the node agent, so no node pulls {ADDRESS} through its files")]
    );
}

#[test]
fn each_node_is_judged_by_its_own_agent_pod_and_its_own_state() {
    use k8s_openapi::api::core::v1::{Pod, PodCondition, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

    use crate::node::api::state::{Address, Agent, NodePullState, NodePullStateFields, NodeState, Verdict};

    let target = target();
    let published = registry(None);
    let mut found = agents(Ok(&["a", "b"]), true);
    let mut pod = Pod::default();
    pod.metadata.name = Some("agent-a".into());
    pod.metadata.uid = Some("uid-a".into());
    pod.metadata.owner_references =
        Some(vec![OwnerReference { uid: "ds-uid".into(), controller: Some(true), ..OwnerReference::default() }]);
    pod.spec = Some(PodSpec { node_name: Some("a".into()), ..PodSpec::default() });
    let ready = PodCondition { type_: "Ready".into(), status: "True".into(), ..PodCondition::default() };
    pod.status =
        Some(PodStatus { phase: Some("Running".into()), conditions: Some(vec![ready]), ..PodStatus::default() });
    found.pods = vec![pod];
    let mut state = NodePullState::new("a", NodePullStateFields {});
    state.status = Some(NodeState {
        node: "a".into(),
        agent: Agent { pod: "agent-a".into(), uid: "uid-a".into(), version: "0.1.0".into() },
        addresses: vec![Address {
            address: ADDRESS.into(),
            endpoint: CLUSTER_IP_ENDPOINT.into(),
            server: None,
            verdict: Verdict::Configured,
            message: None,
        }],
        ..NodeState::default()
    });
    found.states = Ok(vec![state]);
    let (section, _) = super::section(Some(&published), false, Some(&target), &decided(&[]), Some(&found), None);
    let said = text(&section);
    assert!(said.contains("  node a: configured by agent-a"), "{said}");
    assert!(said.contains("  node b: no node agent pod runs here yet"), "{said}");

    // kube-proxy in nftables mode: the node whose agent wrote the file pulls the loopback nodePort through it.
    let nodes = found.nodes.clone();
    let nftables =
        proxy::Sources { nodes, pods: Vec::new(), config: Some(("mode: nftables\n".into(), ConfigTarget::kubeadm())) };
    let (section, _) =
        super::section(Some(&published), false, Some(&target), &decided(&[]), Some(&found), Some(&nftables));
    let said = text(&section);
    let running = "kube-proxy runs in nftables mode (ConfigMap kube-system/kube-proxy (config.conf))";
    let through =
        format!("  on node a, {running}; localhost:30500 is pulled through the agent's file, to the ClusterIP");
    assert!(said.contains(&through), "{said}");
    assert!(said.contains(&format!("  on node b, {running}, which serves no localhost:30500")), "{said}");
}

#[test]
fn with_the_agent_off_kube_proxys_mode_decides_each_nodes_pull_of_the_loopback_node_port() {
    let published = registry(None);
    let sources = |config: &str| proxy::Sources {
        nodes: Ok(vec![node("a"), {
            let mut docker = node("docker-b");
            docker.status.as_mut().and_then(|s| s.node_info.as_mut()).expect("info").container_runtime_version =
                "docker://27.0.1".into();
            docker
        }]),
        pods: Vec::new(),
        config: Some((config.into(), ConfigTarget::kubeadm())),
    };
    let (nftables, _) =
        super::section(Some(&published), false, None, &decided(&[]), None, Some(&sources("mode: nftables\n")));
    let said = text(&nftables);
    assert!(nftables.wrong, "{said}");
    assert!(
        said.contains("  on node a, kube-proxy runs in nftables mode") && said.contains("cannot pull it"),
        "{said}"
    );
    assert!(!said.contains("on node docker-b"), "a node that reads no hosts.toml is the runtime section's: {said}");
    let (iptables, _) =
        super::section(Some(&published), false, None, &decided(&[]), None, Some(&sources("mode: iptables\n")));
    assert!(!iptables.wrong, "{:?}", iptables.lines);
    assert!(text(&iptables).contains("which serves localhost:30500 on the node's loopback"));
    let unlisted = proxy::Sources { nodes: Err("forbidden".into()), pods: Vec::new(), config: None };
    let (unlisted, _) = super::section(Some(&published), false, None, &decided(&[]), None, Some(&unlisted));
    assert!(!unlisted.wrong && text(&unlisted).contains("nodes cannot be listed with this identity, so no kube-proxy"));
}

#[test]
fn a_loopback_address_at_the_registry_pods_host_port_is_not_told_as_needing_a_file_with_the_agents_off() {
    // minikube's shape, or the README's fix for nftables mode: the runtime pulls localhost at the hostPort.
    let mut published = registry(None);
    published.ports.host_port = true;
    published.ports.node = Some(5000);
    let plan = node::NodePlan::of(vec![node::HostEntry::plain("localhost:5000", CLUSTER_IP_ENDPOINT)]);
    let decided = Ok(node::Decision { plan, ..node::Decision::default() });
    let (off, not_done) = super::section(Some(&published), false, None, &decided, None, None);
    let said = text(&off);
    assert!(!off.wrong && not_done.is_empty(), "{said}");
    assert!(!said.contains("needs a node file"), "{said}");
    assert!(said.contains("localhost:5000 is the registry pod's hostPort"), "{said}");
    assert!(
        said.contains("the node agent is off, and nothing needs it on the nodes running the registry's pod"),
        "{said}"
    );
    // At a nodePort it is kube-proxy's: told as needing the file.
    published.ports.host_port = false;
    let (off, _) = super::section(Some(&published), false, None, &decided, None, None);
    assert!(text(&off).contains("localhost:5000 needs a node file"), "{}", text(&off));
}
