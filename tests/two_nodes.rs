//! The node agent across two real nodes (containerd, kubelet, kube-proxy each, in network and mount namespaces of
//! their own): a node that joins after the plan was written gets its files with nothing restarted, doctor tells
//! each node, and an agent taken off one node by the node selector cleans that node and leaves the other alone.
//! Its own control plane (the other real-node tests would schedule onto a second node they do not expect).

mod support;

use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};
use serde_json::json;
use testbed::{ControlPlane, RealNode};

use support::{apply_in, cluster_ip, ok, root, wait_until};

/// Pod starts and agent passes take a moment on a shared 2-core machine; tests never assert on speed.
const SOON: Duration = Duration::from_secs(90);
const REGISTRY_LABEL: &str = "testbed.local/isolated-registry";
const AGENT_PODS: &str = "app.kubernetes.io/component=node-agent";

fn plane() -> &'static ControlPlane {
    ControlPlane::shared_with_two_real_nodes()
}

fn tool(name: &str, args: &[&str]) -> std::process::Output {
    support::tool(plane(), name, args)
}

fn helm(verb: &str, release: &str, ns: &str, values: &[String]) {
    let chart = root().join("charts/local-registry-publisher").display().to_string();
    let mut args = vec![verb, release, &chart, "-n", ns, "--wait", "--timeout", "180s"];
    args.extend(values.iter().flat_map(|v| ["--set", v.as_str()]));
    ok(tool("helm", &args));
}

/// A release publishing its own ConfigMap `hosting` in `ns` for the registry labelled for `ns`, with the node agent
/// on: the same hosts directory and containerd config path on every node, as a cluster's nodes have them.
fn values(ns: &str, node: &RealNode, extra: &[&str]) -> Vec<String> {
    let mut values = vec![
        format!("configMap.namespace={ns}"),
        "configMap.name=hosting".into(),
        format!("registry.watchNamespaces={{{ns}}}"),
        format!("registry.selector={REGISTRY_LABEL}={ns}"),
        "registry.builtin=false".into(),
        "nodeAgent.enabled=true".into(),
        format!("nodeAgent.configPath={}", node.hosts_dir_on_node()),
        format!("nodeAgent.containerdConfig={}", node.containerd_config_on_node()),
        "nodeAgent.resync=2s".into(),
    ];
    values.extend(extra.iter().map(|v| v.to_string()));
    values
}

/// A plain-HTTP registry (crane's) on the first node behind a ClusterIP Service labelled for `ns`'s release.
async fn registry(client: &Client, ns: &str, first: &RealNode) {
    let crane = testbed::node::crane_image(plane().tools(), &plane().dir().join("images")).expect("crane image");
    first.import(&crane).expect("import the crane image");
    let spec = json!({
        "nodeSelector": {"kubernetes.io/hostname": first.name()},
        "containers": [{"name": "registry", "image": crane.name, "imagePullPolicy": "Never",
            "args": ["registry", "serve", "--address", ":5000"],
            "ports": [{"containerPort": 5000}],
            "readinessProbe": {"httpGet": {"path": "/v2/", "port": 5000}, "periodSeconds": 1}}]
    });
    apply_in(
        client,
        ns,
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "registry"},
        "spec": {"selector": {"matchLabels": {"app": "registry"}},
            "template": {"metadata": {"labels": {"app": "registry"}}, "spec": spec}}}),
    )
    .await;
    apply_in(
        client,
        ns,
        json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "registry", "labels": {REGISTRY_LABEL: ns}},
        "spec": {"selector": {"app": "registry"}, "ports": [{"name": "registry", "port": 5000}]}}),
    )
    .await;
}

fn hosts_toml(node: &RealNode, address: &str) -> Option<String> {
    std::fs::read_to_string(node.hosts_dir().join(address).join("hosts.toml")).ok()
}

async fn wait_file(node: &RealNode, address: &str, present: bool, what: &str) {
    let done = wait_until(SOON, || async { (hosts_toml(node, address).is_some() == present).then_some(()) }).await;
    assert!(done.is_some(), "{what}: {}'s {address}/hosts.toml is still {:?}", node.name(), hosts_toml(node, address));
}

fn doctor(ns: &str) -> String {
    let output = support::doctor(plane(), &[&format!("--configmap-namespace={ns}"), "--configmap-name=hosting"]);
    String::from_utf8_lossy(&output.stdout).into_owned()
}

async fn wait_doctor(ns: &str, check: impl Fn(&str) -> bool) -> String {
    let found = wait_until(SOON, || async { Some(doctor(ns)).filter(|r| check(r)) }).await;
    found.unwrap_or_else(|| panic!("doctor never said what was expected:\n{}", doctor(ns)))
}

/// The agent pods by node: (node, pod uid, restarts).
async fn agents(client: &Client, ns: &str) -> Vec<(String, String, i32)> {
    let pods = Api::<Pod>::namespaced(client.clone(), ns);
    let listed = pods.list(&ListParams::default().labels(AGENT_PODS)).await.expect("list agent pods");
    let mut found: Vec<(String, String, i32)> = listed
        .items
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(|p| {
            let node = p.spec.as_ref().and_then(|s| s.node_name.clone()).unwrap_or_default();
            let statuses = p.status.as_ref().and_then(|s| s.container_statuses.clone()).unwrap_or_default();
            (node, p.uid().unwrap_or_default(), statuses.iter().map(|c| c.restart_count).sum())
        })
        .collect();
    found.sort();
    found
}

fn label(node: &RealNode, label: &str) {
    ok(tool("kubectl", &["label", "node", node.name(), label, "--overwrite"]));
}

#[tokio::test]
async fn a_node_that_joins_later_is_configured_and_one_the_agents_leave_is_cleaned_while_the_other_keeps_its_files() {
    let plane = plane();
    let client = plane.client().await.expect("admin client");
    let first = plane.real_node().expect("the first real node");
    first.import(&support::controller_image()).expect("import the controller image");
    let ns = plane.namespace(&client, "twonodes").await.expect("namespace");
    registry(&client, &ns, first).await;
    let selector = "nodeAgent.nodeSelector.testbed\\.local/agents=on";
    label(first, "testbed.local/agents=on");
    helm("install", "twonodes", &ns, &values(&ns, first, &[selector]));
    let address = format!("{}:5000", cluster_ip(&client, &ns, "registry").await);
    wait_file(first, &address, true, "the first node, agent on").await;
    let before = agents(&client, &ns).await;
    assert_eq!(before.len(), 1, "one agent, on the first node: {before:?}");

    // A second node joins after the plan was written: its agent writes its files; nothing else restarts.
    let second = plane.start_second_node().await.expect("the second real node");
    second.import(&support::controller_image()).expect("import the controller image");
    label(second, "testbed.local/agents=on");
    wait_file(second, &address, true, "the node that joined").await;
    let after = agents(&client, &ns).await;
    assert!(after.contains(&before[0]), "the first node's agent was replaced or restarted: {before:?} -> {after:?}");
    assert_eq!(after.len(), 2, "{after:?}");
    let report = wait_doctor(&ns, |r| {
        r.contains(&format!("node {}: configured by", first.name()))
            && r.contains(&format!("node {}: configured by", second.name()))
    })
    .await;
    assert!(!report.rsplit("== Summary").next().unwrap_or_default().contains("Node pulls"), "{report}");

    // The second node leaves the agents' node selector: its agent stops and cleans its node; the first node's
    // file stays, and doctor says why the second is not covered, without failing.
    ok(tool("kubectl", &["label", "node", second.name(), "testbed.local/agents-"]));
    wait_file(second, &address, false, "the node the agents left").await;
    assert!(hosts_toml(first, &address).is_some(), "the other node's file went too");
    let uncovered =
        format!("node {}: not covered by the node agent: its nodeSelector testbed.local/agents=on", second.name());
    let report = wait_doctor(&ns, |r| r.contains(&uncovered)).await;
    assert!(report.contains(&format!("node {}: configured by", first.name())), "{report}");
    assert!(!report.rsplit("== Summary").next().unwrap_or_default().contains("Node pulls"), "{report}");

    // Back under the selector, it is configured again; uninstalled, neither node keeps anything of ours.
    label(second, "testbed.local/agents=on");
    wait_file(second, &address, true, "the node back under the selector").await;
    ok(tool("helm", &["uninstall", "twonodes", "-n", &ns, "--wait", "--timeout", "180s"]));
    for node in [first, second] {
        wait_file(node, &address, false, "after uninstall").await;
        let leftover = std::fs::read_dir(node.hosts_dir()).map(|d| d.count()).unwrap_or(0);
        assert_eq!(leftover, 0, "{} keeps something in {}", node.name(), Path::new(&node.hosts_dir()).display());
    }
    plane.delete_namespace(&client, &ns).await.expect("delete namespace");
}
