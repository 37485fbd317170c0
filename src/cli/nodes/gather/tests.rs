use serde_json::json;

use super::*;
use crate::mock_api::{self, list, status};
use crate::node::fixtures::{plan, plan_target as target};

const PLAN: &str = "/api/v1/namespaces/lrp/configmaps/lrp-node-plan";

/// The decision doctor takes for a kept document when the plan's ConfigMap is answered with `code` and `body`.
async fn kept(code: u16, body: serde_json::Value) -> Result<node::Decision, String> {
    let (client, mut server) = mock_api::pair();
    let target = target();
    let (decided, ()) = tokio::join!(decision(&client, None, true, Some(&target)), server.get(PLAN, code, body));
    decided
}

#[tokio::test]
async fn a_kept_documents_plan_is_the_one_stored_read_as_agents_read_it() {
    let plan = plan(&["a:5000"]);
    let stored =
        kept(200, json!({"metadata": {"name": "lrp-node-plan"}, "data": {node::PLAN_KEY: plan.to_json()}})).await;
    assert_eq!(stored.expect("the stored plan").plan, plan);
    let absent = kept(404, status(404, "NotFound")).await;
    assert_eq!(absent.expect("no plan").plan, NodePlan::default(), "no ConfigMap: no plan in force");
    let keyless = kept(200, json!({"metadata": {"name": "lrp-node-plan"}, "data": {}})).await;
    assert_eq!(keyless.expect("no plan").plan, NodePlan::default());
    let refused = kept(403, status(403, "Forbidden")).await;
    assert!(refused.is_err_and(|why| why.contains("Forbidden")));
    let garbled = kept(200, json!({"metadata": {"name": "lrp-node-plan"}, "data": {node::PLAN_KEY: "{"}})).await;
    assert!(garbled.is_err(), "a plan agents cannot read is no empty plan");
}

fn daemonset(name: &str, plan_flag: &str) -> serde_json::Value {
    json!({"metadata": {"name": name, "namespace": "lrp", "uid": format!("uid-{name}")},
        "spec": {"selector": {}, "template": {"spec": {"containers": [
            {"name": "node-agent", "image": "i", "args": ["node-agent", plan_flag]}]}}}})
}

type Answer = (u16, serde_json::Value);

/// What `agents` reads when the API server answers its five lists (nodes, the labelled DaemonSets and pods, the
/// states, the Events, in that order) with `answers`.
async fn agents_answered(answers: [Answer; 5]) -> Agents {
    let (client, mut server) = mock_api::pair();
    let labelled = "labelSelector=app.kubernetes.io%2Fcomponent%3Dnode-agent";
    let uris = [
        "/api/v1/nodes?".to_string(),
        format!("/apis/apps/v1/namespaces/lrp/daemonsets?&{labelled}"),
        format!("/api/v1/namespaces/lrp/pods?&{labelled}"),
        "/apis/local-registry-publisher.io/v1alpha1/namespaces/lrp/nodepullstates?".to_string(),
        "/apis/events.k8s.io/v1/namespaces/lrp/events?".to_string(),
    ];
    let script = async {
        for (uri, (code, body)) in uris.iter().zip(answers) {
            server.get(uri, code, body).await;
        }
    };
    let target = target();
    let (found, ()) = tokio::join!(agents(&client, &target), script);
    found
}

fn forbidden() -> Answer {
    (403, status(403, "Forbidden"))
}

#[tokio::test]
async fn the_agents_are_the_daemonset_passing_the_plan_its_labelled_pods_their_states_and_events() {
    let daemonsets = vec![
        daemonset("other", "--node-plan-configmap=other-plan"),
        daemonset("ours", &format!("--{}=lrp-node-plan", keys::chart::NODE_PLAN_FLAG)),
    ];
    let found = agents_answered([
        (200, list("NodeList", vec![json!({"metadata": {"name": "a"}})])),
        (200, list("DaemonSetList", daemonsets)),
        (200, list("PodList", vec![json!({"metadata": {"name": "agent-a"}})])),
        forbidden(),
        (200, list("EventList", Vec::new())),
    ])
    .await;
    assert_eq!(found.nodes.expect("nodes").len(), 1);
    assert_eq!(found.daemonset.and_then(|d| d.metadata.name).as_deref(), Some("ours"));
    assert_eq!(found.pods.len(), 1);
    assert!(found.states.is_err_and(|why| why.contains("Forbidden")));
    assert!(found.events.is_empty());
}

#[tokio::test]
async fn without_a_daemonset_passing_the_plan_there_is_none_and_refused_reads_are_kept_as_what_to_say() {
    let found = agents_answered([
        forbidden(),
        (200, list("DaemonSetList", vec![daemonset("prefix", "--node-plan-configmap=lrp-node-plan-2")])),
        forbidden(),
        (200, list("NodePullStateList", Vec::new())),
        forbidden(),
    ])
    .await;
    assert!(found.nodes.is_err_and(|why| why.contains("Forbidden")));
    assert!(found.daemonset.is_none(), "a plan named alike is another plan");
    assert!(found.pods.is_empty() && found.events.is_empty());
    assert!(found.states.is_ok_and(|s| s.is_empty()));
}

/// What `proxies` reads when the API server answers the nodes, kube-proxy's pods and its ConfigMap with `answers`.
async fn proxies_answered(answers: [Answer; 3]) -> proxy::Sources {
    let (client, mut server) = mock_api::pair();
    let uris = [
        "/api/v1/nodes?",
        "/api/v1/namespaces/kube-system/pods?&labelSelector=k8s-app%3Dkube-proxy",
        "/api/v1/namespaces/kube-system/configmaps/kube-proxy",
    ];
    let script = async {
        for (uri, (code, body)) in uris.iter().zip(answers) {
            server.get(uri, code, body).await;
        }
    };
    let (found, ()) = tokio::join!(proxies(&client, None), script);
    found
}

#[tokio::test]
async fn kube_proxys_mode_is_read_from_the_nodes_its_pods_and_its_configmap_each_refusal_leaving_it_unknown() {
    let config = json!({"metadata": {"name": "kube-proxy"}, "data": {proxy::CONFIG_KEY: "mode: nftables\n"}});
    let found = proxies_answered([
        (200, list("NodeList", vec![json!({"metadata": {"name": "a"}})])),
        (200, list("PodList", vec![json!({"metadata": {"name": "kube-proxy-a"}})])),
        (200, config),
    ])
    .await;
    assert_eq!(found.nodes.expect("nodes").len(), 1);
    assert_eq!(found.pods.len(), 1);
    assert_eq!(found.config.as_ref().map(|(text, _)| text.as_str()), Some("mode: nftables\n"));
    let refused = proxies_answered([forbidden(), forbidden(), forbidden()]).await;
    assert!(refused.nodes.is_err_and(|why| why.contains("Forbidden")));
    assert!(refused.pods.is_empty() && refused.config.is_none());
    let absent = proxies_answered([
        (200, list("NodeList", Vec::new())),
        (200, list("PodList", Vec::new())),
        (404, status(404, "NotFound")),
    ])
    .await;
    assert_eq!(absent.config, None);
}

#[tokio::test]
async fn nodes_read_with_the_agents_are_not_listed_again_for_kube_proxys_mode() {
    let (client, mut server) = mock_api::pair();
    let script = async {
        server
            .get(
                "/api/v1/namespaces/kube-system/pods?&labelSelector=k8s-app%3Dkube-proxy",
                403,
                status(403, "Forbidden"),
            )
            .await;
        server.get("/api/v1/namespaces/kube-system/configmaps/kube-proxy", 404, status(404, "NotFound")).await;
    };
    let known = Ok(vec![Node::default()]);
    let (found, ()) = tokio::join!(proxies(&client, Some(&known)), script);
    assert_eq!(found.nodes.expect("the nodes given").len(), 1);
}
