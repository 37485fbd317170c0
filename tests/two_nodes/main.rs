//! The node agent across two real nodes (containerd, kubelet, kube-proxy each, in network and mount namespaces of
//! their own): a node that joins after the plan was written gets its files with nothing restarted, doctor tells
//! each node, and an agent taken off one node by the node selector cleans that node and leaves the other alone.
//! Its own control plane (the other real-node tests would schedule onto a second node they do not expect).

#[path = "../support/mod.rs"]
mod support;

mod own_state;
mod relay;

use std::path::Path;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};
use testbed::{ControlPlane, RealNode};

use support::agent::{AGENT_PODS, ALL_WELL, node_file, values, wait_file};
use support::{cluster_ip, ok};

fn plane() -> &'static ControlPlane {
    ControlPlane::shared_with_two_real_nodes()
}

/// Both real nodes running with the controller's image, a fresh namespace from `prefix`, and a plain-HTTP registry
/// there on the first node.
async fn both_nodes_and_a_registry(prefix: &str) -> (Client, &'static RealNode, &'static RealNode, String) {
    let plane = plane();
    let client = plane.client().await.expect("admin client");
    let first = plane.real_node().expect("the first real node");
    let second = plane.start_second_node().await.expect("the second real node");
    for node in [first, second] {
        node.import(&support::controller_image()).expect("import the controller image");
    }
    let ns = plane.namespace(&client, prefix).await.expect("namespace");
    support::agent::registry(plane, &client, &ns, first).await;
    (client, first, second, ns)
}

fn tool(name: &str, args: &[&str]) -> std::process::Output {
    support::tool(plane(), name, args)
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
    support::agent::registry(plane, &client, &ns, first).await;
    let selector = "nodeAgent.nodeSelector.testbed\\.local/agents=on";
    label(first, "testbed.local/agents=on");
    support::agent::helm(plane, "install", "twonodes", &ns, &values(&ns, first, &[selector]));
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
    let report = support::agent::wait_doctor(plane, &ns, ALL_WELL, |r| {
        r.contains(&format!("node {}: configured by", first.name()))
            && r.contains(&format!("node {}: configured by", second.name()))
    })
    .await;
    assert!(!report.rsplit("== Summary").next().unwrap_or_default().contains("Node pulls"), "{report}");

    // The second node leaves the agents' node selector: its agent stops and cleans its node; the first node's
    // file stays, and doctor says why the second is not covered, without failing.
    ok(tool("kubectl", &["label", "node", second.name(), "testbed.local/agents-"]));
    wait_file(second, &address, false, "the node the agents left").await;
    assert!(node_file(first, &address).is_some(), "the other node's file went too");
    let uncovered =
        format!("node {}: not covered by the node agent: its nodeSelector testbed.local/agents=on", second.name());
    let report = support::agent::wait_doctor(plane, &ns, ALL_WELL, |r| r.contains(&uncovered)).await;
    assert!(report.contains(&format!("node {}: configured by", first.name())), "{report}");
    let summary = report.rsplit("== Summary").next().unwrap_or_default();
    assert!(!summary.contains("Node pulls") && !summary.contains("not done: no node"), "{report}");

    // With neither node covered nothing fails, and the summary says what is not done, on a line of its own.
    ok(tool("kubectl", &["label", "node", first.name(), "testbed.local/agents-"]));
    wait_file(first, &address, false, "the first node, left by the agents too").await;
    let none = format!("\n  not done: no node is covered by the node agent, so no node pulls {address}");
    let report = support::agent::wait_doctor(plane, &ns, ALL_WELL, |r| r.contains(&none)).await;
    let summary = report.rsplit("== Summary").next().unwrap_or_default();
    assert!(!summary.contains("Node pulls") && summary.contains(&none), "{report}");
    label(first, "testbed.local/agents=on");
    wait_file(first, &address, true, "the first node, back under the selector").await;

    // Back under the selector, it is configured again; uninstalled, neither node keeps anything of ours.
    label(second, "testbed.local/agents=on");
    wait_file(second, &address, true, "the node back under the selector").await;
    support::agent::helm_uninstall(plane, "twonodes", &ns);
    for node in [first, second] {
        wait_file(node, &address, false, "after uninstall").await;
        // An absent directory holds nothing; one that cannot be listed is not read as empty. Other tests' releases
        // on these nodes keep files of their own: none here may follow this release's plan.
        let ours: Vec<String> = match std::fs::read_dir(node.hosts_dir()) {
            Ok(entries) => entries
                .flatten()
                .filter(|e| {
                    let file = std::fs::read_to_string(e.path().join("hosts.toml")).unwrap_or_default();
                    file.contains(&format!("{ns}/"))
                })
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => panic!("list {}: {e}", Path::new(&node.hosts_dir()).display()),
        };
        assert!(
            ours.is_empty(),
            "{} keeps {ours:?} of this release in {}",
            node.name(),
            Path::new(&node.hosts_dir()).display()
        );
    }
    plane.delete_namespace(&client, &ns).await.expect("delete namespace");
}
