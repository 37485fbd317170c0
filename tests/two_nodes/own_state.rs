//! Each node's agent writes only its own node's NodePullState: the chart's admission policy admits an agents' write
//! only for the node its token is bound to, and an agent undoes anyone else's write to its own node's state.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::{Client, ResourceExt};
use local_registry_publisher::node::api::state::NodePullState;
use serde_json::json;
use testbed::RealNode;

use super::plane;
use super::support::agent::{AGENT_PODS, RESYNC_SECONDS, values, wait_pod_metrics_on};
use super::support::{SOON_ON_A_NODE, client_for, token_kubeconfig_for, wait_until};

/// The token the kubelet gave the release's agent pod on `node` (its projected ServiceAccount token, bound to the
/// pod and so to the node), read from the node's own disk.
async fn agent_token(client: &Client, ns: &str, node: &RealNode) -> String {
    let pods = Api::<Pod>::namespaced(client.clone(), ns);
    let listed = pods.list(&ListParams::default().labels(AGENT_PODS)).await.expect("agent pods");
    let on_node = |p: &&Pod| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node.name());
    let pod = listed.items.iter().find(on_node).expect("the node's agent");
    let uid = pod.uid().expect("its uid");
    let volumes = node.path_on_node(&format!("/var/lib/kubelet/pods/{uid}/volumes/kubernetes.io~projected"));
    let dir = std::fs::read_dir(&volumes)
        .expect("the pod's projected volumes")
        .flatten()
        .find(|e| e.file_name().to_string_lossy().starts_with("kube-api-access-"))
        .expect("its token volume");
    std::fs::read_to_string(dir.path().join("token")).expect("the token").trim().to_string()
}

/// What the release's agent on `node` has written: its NodePullState's version and each Event on its Pod with its
/// version (a repeated Event is a write to the same object).
async fn agent_writes(client: &Client, ns: &str, node: &RealNode) -> (Option<String>, BTreeSet<(String, String)>) {
    let state = Api::<NodePullState>::namespaced(client.clone(), ns).get_opt(node.name()).await.expect("its state");
    let pods = Api::<Pod>::namespaced(client.clone(), ns);
    let listed = pods.list(&ListParams::default().labels(AGENT_PODS)).await.expect("agent pods");
    let on_node = |p: &&Pod| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node.name());
    let agent = listed.items.iter().find(on_node).expect("the node's agent").name_any();
    let events = Api::<Event>::namespaced(client.clone(), ns).list(&ListParams::default()).await.expect("Events");
    let on_agent = |e: &&Event| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(agent.as_str());
    let told = events.items.iter().filter(on_agent).map(|e| (e.name_any(), e.resource_version().unwrap_or_default()));
    (state.and_then(|s| s.metadata.resource_version), told.collect())
}

/// The value of the sample `name` (without labels) in a /metrics text.
fn sample(text: &str, name: &str) -> Option<f64> {
    text.lines().find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

async fn condition_message(states: &Api<NodePullState>, node: &str) -> Option<String> {
    let state = states.get_opt(node).await.ok()??.status?;
    state.configured().map(|c| c.message.clone())
}

#[tokio::test]
async fn one_nodes_agent_cannot_write_another_nodes_state_and_a_forged_state_is_undone() {
    let plane = plane();
    let (client, first, second, ns) = super::both_nodes_and_a_registry("ownstate").await;
    super::support::agent::helm(plane, "install", "ownstate", &ns, &values(&ns, first, &[]));
    let states = Api::<NodePullState>::namespaced(client.clone(), &ns);
    for node in [first, second] {
        let written = wait_until(SOON_ON_A_NODE, || async { condition_message(&states, node.name()).await }).await;
        assert!(written.is_some(), "{} never wrote its state", node.name());
    }

    // The first node's agent's own token: its own state it may write, the second node's not.
    let token = agent_token(&client, &ns, first).await;
    let kubeconfig = token_kubeconfig_for(plane, &token, &format!("agent-{ns}"));
    let as_first = client_for(&kubeconfig).await;
    let theirs = Api::<NodePullState>::namespaced(as_first, &ns);
    let forged = |message: &str| {
        json!({"apiVersion": "local-registry-publisher.io/v1alpha1", "kind": "NodePullState",
            "status": {"conditions": [{"type": "Configured", "status": "True", "reason": "NodeFilesConfigured",
                "message": message, "lastTransitionTime": "2026-01-01T00:00:00Z"}]}})
    };
    let params = PatchParams::apply("forger").force();
    let refused = theirs.patch(second.name(), &params, &Patch::Apply(forged("forged by the first node"))).await;
    match refused {
        Err(kube::Error::Api(status)) => {
            assert!(status.message.contains("writes only its own node's NodePullState"), "{status:?}");
            assert!(status.message.contains(&format!("bound to node {}", first.name())), "{status:?}");
        }
        other => panic!("the first node's agent wrote the second node's state: {other:?}"),
    }
    let own = theirs.patch(first.name(), &params, &Patch::Apply(forged("forged by the first node's token"))).await;
    assert!(own.is_ok(), "its own node's state is its agent's to write: {own:?}");

    // That write, and a cluster admin's forgery of the second node's state, are undone by each node's agent.
    let admin = PatchParams::apply("admin-forger").force();
    states.patch(second.name(), &admin, &Patch::Apply(forged("forged by an admin"))).await.expect("an admin writes");
    for node in [first, second] {
        let restored = wait_until(SOON_ON_A_NODE, || async {
            condition_message(&states, node.name()).await.filter(|m| !m.contains("forged"))
        })
        .await;
        assert!(
            restored.is_some(),
            "{}'s state still forged: {:?}",
            node.name(),
            condition_message(&states, node.name()).await
        );
    }
    // And then stays: the agent's echo of its own write is no reason to write again, nor is any pass over a node
    // where nothing changed. Its only writes (its state, the Events on its Pod) counted over three passes: none.
    let writes = || agent_writes(&client, &ns, second);
    let settled = writes().await;
    let passes = |text: &str| sample(text, "local_registry_publisher_node_last_sync_timestamp_seconds");
    let scrape = || wait_pod_metrics_on(&client, &ns, "node-agent", second, |text| passes(text).is_some());
    let from = passes(&scrape().await).expect("its last pass");
    let three_passes_later = |text: &str| passes(text).is_some_and(|at| at >= from + 3.0 * RESYNC_SECONDS);
    wait_pod_metrics_on(&client, &ns, "node-agent", second, three_passes_later).await;
    assert_eq!(writes().await, settled, "a settled node costs no write");

    super::support::agent::helm_uninstall(plane, "ownstate", &ns);
    plane.delete_namespace(&client, &ns).await.expect("delete namespace");
}
