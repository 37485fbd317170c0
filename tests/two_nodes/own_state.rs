//! Each node's agent writes only its own node's NodePullState: the chart's admission policy admits an agents' write
//! only for the node its token is bound to, and an agent undoes anyone else's write to its own node's state.

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::{Client, ResourceExt};
use local_registry_publisher::node::api::state::NodePullState;
use serde_json::json;
use testbed::RealNode;

use super::plane;
use super::support::agent::{AGENT_PODS, values};
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
            "status": {"conditions": [{"type": "Configured", "status": "True", "reason": "HostsConfigured",
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
    // And then stays: the agent's echo of its own write is no reason to write again.
    let version = |state: Option<NodePullState>| state.and_then(|s| s.metadata.resource_version);
    let settled = version(states.get_opt(second.name()).await.unwrap());
    tokio::time::sleep(std::time::Duration::from_secs(8)).await;
    assert_eq!(version(states.get_opt(second.name()).await.unwrap()), settled, "a settled node costs no write");

    super::support::agent::helm_uninstall(plane, "ownstate", &ns);
    plane.delete_namespace(&client, &ns).await.expect("delete namespace");
}
