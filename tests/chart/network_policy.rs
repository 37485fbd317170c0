//! The opt-in NetworkPolicies as rendered.

use super::*;

/// The opt-in NetworkPolicies: one per workload, selecting exactly its pods, open only on its probe and metrics port
/// to the peers the values name (none by default), and egress only to the API server's addresses and port.
#[test]
fn the_network_policies_open_only_the_metrics_port_to_named_peers_and_egress_only_to_the_api_server() {
    let all_on = root().join("charts/local-registry-publisher/ci/all-on-values.yaml").display().to_string();
    let rendered = ok(tool(
        "helm",
        &["template", "lrp", &chart(), "-n", "tools", "-f", &all_on, "--set", "httpPort=9090,nodeAgent.httpPort=9191"],
    ));
    let policies = rendered_objects(&rendered, "NetworkPolicy");
    let names: Vec<_> = policies.iter().map(|p| p["metadata"]["name"].as_str().unwrap_or_default()).collect();
    assert_eq!(names, ["lrp-local-registry-publisher", "lrp-local-registry-publisher-node-agent"]);
    let workloads =
        [(&rendered_objects(&rendered, "Deployment")[0], 9090), (&rendered_objects(&rendered, "DaemonSet")[0], 9191)];
    for (policy, (workload, port)) in policies.iter().zip(workloads) {
        let spec = &policy["spec"];
        // The port the policy opens is the one the workload's container serves.
        let served = &workload["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"];
        assert_eq!(served, &json!(port), "{}", workload["kind"]);
        let pod_labels = workload["spec"]["template"]["metadata"]["labels"].as_object().expect("pod labels");
        let selector = spec["podSelector"]["matchLabels"].as_object().expect("matchLabels");
        assert!(selector.iter().all(|(k, v)| pod_labels.get(k) == Some(v)), "{selector:?} selects {pod_labels:?}");
        assert!(selector.contains_key("app.kubernetes.io/component"), "one workload's pods only: {selector:?}");
        assert_eq!(spec["policyTypes"], json!(["Ingress", "Egress"]));
        assert_eq!(
            spec["ingress"],
            json!([{"from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}],
                "ports": [{"protocol": "TCP", "port": port}]}])
        );
        assert_eq!(
            spec["egress"],
            json!([{"to": [{"ipBlock": {"cidr": "172.18.0.2/32"}}], "ports": [{"protocol": "TCP", "port": 6443}]}])
        );
    }
    // Nobody named: no pod at all (the kubelet's probes come from the node); no agent, no agent policy; off by default.
    let api = ["--set", "networkPolicy.enabled=true,networkPolicy.apiServer.cidrs={10.0.0.1/32,fd00::1/128}"];
    let closed = ok(tool(
        "helm",
        &["template", "lrp", &chart(), api[0], api[1], "--set", "networkPolicy.apiServer.ports={443,6443}"],
    ));
    let policies = rendered_objects(&closed, "NetworkPolicy");
    assert_eq!(policies.len(), 1, "no node agent, no policy for it");
    assert_eq!(policies[0]["spec"]["ingress"], json!([]));
    assert_eq!(
        policies[0]["spec"]["egress"],
        json!([{"to": [{"ipBlock": {"cidr": "10.0.0.1/32"}}, {"ipBlock": {"cidr": "fd00::1/128"}}],
            "ports": [{"protocol": "TCP", "port": 443}, {"protocol": "TCP", "port": 6443}]}])
    );
    let defaults = ok(tool("helm", &["template", "lrp", &chart(), "--set", "nodeAgent.enabled=true"]));
    assert!(rendered_objects(&defaults, "NetworkPolicy").is_empty());
}
