//! The Grafana dashboard: shipped when asked, every query on a metric that is exported.

use super::*;
use crate::alerts::controller_and_agent;

/// The shipped dashboard, as the chart carries it.
fn dashboard() -> serde_json::Value {
    let path = root().join("charts/local-registry-publisher/dashboards/local-registry-publisher.json");
    serde_json::from_str(&std::fs::read_to_string(&path).expect("the dashboard")).expect("dashboard JSON")
}

/// Every metric name a panel's queries name (ours, controller-runtime's, leader election's, the process').
fn dashboard_metrics(dashboard: &serde_json::Value) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let panels = dashboard["panels"].as_array().expect("panels");
    for expr in panels.iter().flat_map(|p| p["targets"].as_array().into_iter().flatten()).map(|t| &t["expr"]) {
        let expr = expr.as_str().expect("an expr");
        for start in ["local_registry_publisher_", "controller_runtime_", "leader_election_", "process_"] {
            for (at, _) in expr.match_indices(start) {
                let name: String = expr[at..].chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
                names.insert(name);
            }
        }
    }
    names
}

/// The sample names a /metrics text exports, each family's by its type (a family with no sample yet included).
fn exported_metrics(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for line in text.lines() {
        let Some(family) = line.strip_prefix("# TYPE ") else { continue };
        let mut words = family.split_whitespace();
        let (Some(name), Some(kind)) = (words.next(), words.next()) else { continue };
        let suffixes: &[&str] = match kind {
            "counter" => &["_total"],
            "histogram" => &["_bucket", "_sum", "_count"],
            "info" => &["_info"],
            _ => &[""],
        };
        names.extend(suffixes.iter().map(|suffix| format!("{name}{suffix}")));
    }
    names
}

#[test]
fn the_grafana_dashboard_ships_as_the_sidecars_configmap_only_when_asked() {
    let all_on = root().join("charts/local-registry-publisher/ci/all-on-values.yaml").display().to_string();
    let rendered = ok(tool("helm", &["template", "lrp", &chart(), "-n", "tools", "-f", &all_on]));
    let shipped: Vec<serde_json::Value> = rendered_objects(&rendered, "ConfigMap")
        .into_iter()
        .filter(|c| c["metadata"]["name"] == "lrp-local-registry-publisher-dashboard")
        .collect();
    let [configmap] = shipped.as_slice() else { panic!("one dashboard ConfigMap: {shipped:?}") };
    assert_eq!(configmap["metadata"]["namespace"], "tools");
    assert_eq!(configmap["metadata"]["labels"]["grafana_dashboard"], "1", "the sidecar's default label");
    assert_eq!(configmap["metadata"]["annotations"]["grafana_folder"], "Registry");
    let text = configmap["data"]["local-registry-publisher.json"].as_str().expect("the dashboard's key");
    assert_eq!(serde_json::from_str::<serde_json::Value>(text).expect("JSON"), dashboard(), "the file, unchanged");
    let elsewhere = ok(tool(
        "helm",
        &["template", "lrp", &chart(), "--set", "grafanaDashboard.enabled=true,grafanaDashboard.namespace=monitoring"],
    ));
    let moved = rendered_objects(&elsewhere, "ConfigMap");
    assert!(moved.iter().any(|c| c["metadata"]["namespace"] == "monitoring"), "where the sidecar searches");
    let defaults = ok(tool("helm", &["template", "lrp", &chart()]));
    assert!(!defaults.contains("grafana_dashboard"), "opt-in");
}

#[tokio::test]
async fn every_dashboard_query_names_a_metric_the_controller_or_the_node_agent_exports() {
    let plane = ControlPlane::shared();
    let admin = plane.client().await.unwrap();
    let ns = plane.namespace(&admin, "dashboard").await.unwrap();
    // Every task on (the publisher, pull Secrets, the node plan, kube-proxy's), each series starting at 0, and a
    // registry published, so every family has its samples; one node agent reading the plan.
    let hosts = plane.dir().join(format!("dashboard-hosts-{ns}"));
    // The agent relays the registry on this machine's loopback, at a port free now.
    let relay_port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let controller_flags = ["--pull-secrets".into(), format!("--node-relays={ns}/registry={relay_port}")];
    let (controller, agent) = controller_and_agent(&admin, &ns, &hosts, &controller_flags, &["--relay".into()]).await;
    let spec = json!({"type": "NodePort", "ports": [{"port": 5000}]});
    apply_in(&admin, &ns, service("registry", registry_label(), json!({}), spec)).await;
    let scrape = |process: &Controller, once: &'static str| {
        let text = process.get("/metrics").filter(|(status, _)| *status == 200).map(|(_, body)| body);
        async move { text.filter(|text| text.contains(once)) }
    };
    let published = "local_registry_publisher_published_info{";
    let controller_text = wait_until(SOON, || scrape(&controller, published)).await;
    let controller_text = controller_text.unwrap_or_else(|| panic!("the controller published:\n{}", controller.logs()));
    let passed = "local_registry_publisher_node_relay_listeners{";
    let agent_text = wait_until(SOON, || scrape(&agent, passed)).await;
    let agent_text = agent_text.unwrap_or_else(|| panic!("the node agent passed:\n{}", agent.logs()));
    let exported: BTreeSet<String> =
        exported_metrics(&controller_text).union(&exported_metrics(&agent_text)).cloned().collect();

    let queried = dashboard_metrics(&dashboard());
    let missing: Vec<&String> = queried.difference(&exported).collect();
    assert!(missing.is_empty(), "the dashboard queries metrics nothing exports: {missing:?}\nexported: {exported:?}");
    // And every family of ours has a panel (a histogram by its buckets), so a new metric is not left off it.
    let ours =
        |name: &&String| name.starts_with("local_registry_publisher_") || name.starts_with("controller_runtime_");
    let unshown: Vec<&String> = exported
        .iter()
        .filter(ours)
        .filter(|name| !name.ends_with("_sum") && !name.ends_with("_count"))
        .filter(|name| !queried.contains(*name))
        .collect();
    assert!(unshown.is_empty(), "metrics no panel shows: {unshown:?}");
    println!("the dashboard's {} metrics are among the {} the binaries export", queried.len(), exported.len());
}
