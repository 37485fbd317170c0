//! Values on every shape of cluster, against the real control plane: IPv6 and dual-stack load balancers and node
//! addresses, a host override beside a nodePort, an ExternalName with its root dot, and a ConfigMap shared with
//! another writer's key.

mod support;

use k8s_openapi::api::core::v1::{ConfigMap, Node};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use local_registry_publisher::hosting::DATA_KEY;
use local_registry_publisher::settings::NodeAddress;
use serde_json::json;
use support::*;

fn typed(name: &str, type_: &str, annotations: serde_json::Value) -> serde_json::Value {
    service(name, registry_label(), annotations, json!({"type": type_, "ports": [{"name": "registry", "port": 5000}]}))
}

#[tokio::test]
async fn an_ipv6_load_balancer_is_published_in_brackets_and_dual_stack_prefers_ipv4() {
    let s = Scenario::new("lb-v6").await;
    let _run = s.start();
    s.apply(typed("zot", "LoadBalancer", json!({}))).await;
    s.patch_status("v1", "Service", "zot", json!({"loadBalancer": {"ingress": [{"ip": "172.18.0.50"}]}})).await;
    s.wait_host("172.18.0.50:5000").await;
    // The load balancer moves to IPv6: the old IPv4 address must not stay published.
    s.patch_status("v1", "Service", "zot", json!({"loadBalancer": {"ingress": [{"ip": "fd00:10::200"}]}})).await;
    let document = s.wait_host("[fd00:10::200]:5000").await;
    let node_port = node_port(&s, "zot").await;
    assert_eq!(document.host_from_container_runtime, Some(format!("127.0.0.1:{node_port}")));
    let dual = json!({"loadBalancer": {"ingress": [{"ip": "fd00:10::200"}, {"ip": "172.18.0.60"}]}});
    s.patch_status("v1", "Service", "zot", dual).await;
    s.wait_host("172.18.0.60:5000").await;
}

/// A node of our own with the given InternalIPs, and a selector-less NodePort registry whose only ready endpoint
/// is on it.
async fn registry_on_node(s: &Scenario, node: &str, addresses: &[&str]) {
    let nodes: Api<Node> = Api::all(s.client.clone());
    let manifest: Node = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node", "metadata": {"name": node},
        "spec": {"taints": [{"key": "testbed.local/not-for-pods", "effect": "NoSchedule"}]},
    }))
    .expect("a Node");
    nodes.create(&PostParams::default(), &manifest).await.expect("create the node");
    set_node_addresses(s, node, addresses).await;
    s.apply(typed("zot", "NodePort", json!({}))).await;
    s.apply(json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": "zot-manual", "labels": {"kubernetes.io/service-name": "zot"}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": ["10.0.0.77"], "conditions": {"ready": true}, "nodeName": node}],
        "ports": [{"name": "registry", "port": 5000, "protocol": "TCP"}],
    }))
    .await;
}

async fn set_node_addresses(s: &Scenario, node: &str, addresses: &[&str]) {
    let nodes: Api<Node> = Api::all(s.client.clone());
    let addresses: Vec<_> = addresses.iter().map(|a| json!({"type": "InternalIP", "address": a})).collect();
    let status = json!({"status": {"addresses": addresses}});
    nodes.patch_status(node, &PatchParams::default(), &Patch::Merge(&status)).await.expect("node addresses");
}

#[tokio::test]
async fn ipv6_and_dual_stack_node_addresses_are_published_in_brackets_ipv4_first() {
    let mut s = Scenario::new("node-v6").await;
    s.settings.node_address = NodeAddress::InternalIp;
    let node = format!("{}-node", s.ns);
    let _run = s.start();
    registry_on_node(&s, &node, &["fd00::77", "10.0.0.77"]).await;
    let port = node_port(&s, "zot").await;
    s.wait_host(&format!("10.0.0.77:{port}")).await;
    set_node_addresses(&s, &node, &["fd00::77"]).await;
    let document = s.wait_host(&format!("[fd00::77]:{port}")).await;
    assert_eq!(document.host_from_container_runtime, Some(format!("127.0.0.1:{port}")));
    Api::<Node>::all(s.client.clone()).delete(&node, &DeleteParams::default()).await.expect("delete the node");
}

#[tokio::test]
async fn an_ipv6_node_address_flag_is_published_in_brackets() {
    let mut s = Scenario::new("flag-v6").await;
    let args = ["local-registry-publisher", "--node-address", "fd00::1"];
    s.settings.node_address = <local_registry_publisher::config::Args as clap::Parser>::try_parse_from(args)
        .expect("an IPv6 literal is a valid node address")
        .publish
        .values
        .node_address;
    let _run = s.start();
    s.apply(typed("zot", "NodePort", json!({}))).await;
    let port = node_port(&s, "zot").await;
    s.wait_host(&format!("[fd00::1]:{port}")).await;
}

#[tokio::test]
async fn a_host_override_keeps_the_runtime_value_at_the_node_port() {
    let s = Scenario::new("override").await;
    let _run = s.start();
    s.apply(typed("zot", "NodePort", json!({"local-registry-publisher.io/host": "registry.localhost:5000"}))).await;
    let document = s.wait_host("registry.localhost:5000").await;
    let port = node_port(&s, "zot").await;
    assert_eq!(
        document.host_from_container_runtime,
        Some(format!("127.0.0.1:{port}")),
        "the node pulls from the nodePort"
    );
}

#[tokio::test]
async fn withdrawing_removes_only_our_key_when_another_writer_shares_the_configmap() {
    let s = Scenario::new("shared").await;
    let _run = s.start();
    s.apply(typed("zot", "ClusterIP", json!({}))).await;
    s.wait_cluster_host("zot", 5000).await;
    // A future writer adds its own key with its own field manager.
    let other: ConfigMap = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": TARGET},
        "data": {"localRegistryHosting.v2": "registries: []\n"},
    }))
    .expect("a ConfigMap");
    s.configmaps().patch(TARGET, &PatchParams::apply("future-writer"), &Patch::Apply(&other)).await.expect("apply v2");

    s.delete("v1", "Service", "zot").await;
    let left = wait_until(SOON, || async {
        let configmap = s.configmap().await?;
        let data = configmap.data.clone().unwrap_or_default();
        (!data.contains_key(DATA_KEY)).then_some(data)
    })
    .await
    .expect("our key is withdrawn and the ConfigMap stays");
    assert_eq!(left.keys().collect::<Vec<_>>(), ["localRegistryHosting.v2"], "the other writer's key stays");
}
