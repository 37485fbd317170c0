//! What lasts and what doctor reads: a pull through an invalid annotation, each node's NodePullState, and an
//! agent pod that does not run.

use super::*;

/// A plain-HTTP ClusterIP registry and a release named `release` with the node agent on, in a fresh namespace named
/// from it; returns the registry's address, `<ClusterIP>:5000`, once the real node's file for it is there.
async fn agent_release(release: &str) -> (Client, String, String) {
    let plane = plane();
    let client = plane.client().await.expect("admin client");
    images();
    let ns = plane.namespace(&client, release).await.expect("namespace");
    clusterip_registry(&client, &ns, json!({})).await;
    let values = isolated_release_values(&ns, &agent_on());
    helm_install(release, &ns, &values.iter().map(String::as_str).collect::<Vec<_>>());
    let address = format!("{}:5000", cluster_ip(&client, &ns, "registry").await);
    wait_node_file(&address, "agent on", |t| t.is_some()).await;
    (client, ns, address)
}

#[tokio::test]
async fn a_pull_keeps_working_while_the_published_registry_has_an_invalid_annotation() {
    let plane = plane();
    let (client, ns, address) = agent_release("keepplan").await;
    let document = wait_published(&client, &ns, "hosting", "the registry", |d| {
        d.host_from_cluster_network.as_deref() == Some(address.as_str())
    })
    .await;
    push(true, &own_image("keep-plan"), &format!("{address}/keepplan/app:1"), None);

    // An invalid annotation: the ConfigMap keeps its last good document, and the node keeps the file that makes it
    // pullable, so a pod naming the still-published address starts.
    clusterip_registry(&client, &ns, json!({"local-registry-publisher.io/host": "http://Reg.example:5000/"})).await;
    let state = wait_until(SOON_ON_A_NODE, || async { node_state(&client, &ns).await?.status }).await;
    let plan = state.expect("a NodePullState").plan;
    let told = wait_event_note(&client, &ns, "registry", "InvalidAnnotation").await;
    assert!(told.contains("local-registry-publisher.io/host"), "{told}");
    // The node plan task had the publisher's decision before the Event went out (one process); two of the agent's
    // passes after it, any change of plan would have reached the node.
    let told_at = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64();
    let passed = |metrics: &str| {
        let synced =
            metrics.lines().find_map(|l| l.strip_prefix("local_registry_publisher_node_last_sync_timestamp_seconds "));
        synced.and_then(|at| at.trim().parse::<f64>().ok()).is_some_and(|at| at > told_at + 2.0)
    };
    wait_agent_metrics(&client, &ns, passed).await;
    let now = node_state(&client, &ns).await.and_then(|s| s.status).expect("a NodePullState").plan;
    assert_eq!(now, plan, "the node plan changed with an invalid annotation");
    assert_eq!(published(&client, &ns, "hosting").await.as_ref(), Some(&document), "the last good document stays");
    assert!(node_file(&address).is_some(), "the node's file went with an invalid annotation");
    apply_in(&client, &ns, app_pod("through", &format!("{address}/keepplan/app:1"))).await;
    wait_phase(&client, &ns, "through", &["Running"]).await;
    let report = wait_doctor(&ns, SOMETHING_WRONG, |r| r.contains("the node plan written for it stays in force")).await;
    assert!(report.contains(&format!("{address} needs a node file")), "{report}");
    assert!(report.contains(&format!("node {}: configured by", node().name())), "{report}");

    // Fixed, the registry is followed again; uninstalled, nothing of ours is left.
    clusterip_registry(&client, &ns, json!({})).await;
    helm_uninstall("keepplan", &ns);
    wait_node_file(&address, "after uninstall", |t| t.is_none()).await;
    plane.delete_namespace(&client, &ns).await.expect("delete namespace");
}

#[tokio::test]
async fn doctor_reads_each_nodes_lasting_state_which_only_the_agents_write_and_calls_a_frozen_agents_state_stale() {
    let plane = plane();
    let (client, ns, address) = agent_release("nodestate").await;
    let configured = format!("node {}: configured by nodestate-local-registry-publisher-node-agent-", node().name());
    let report = wait_doctor(&ns, ALL_WELL, |r| r.contains(&configured)).await;
    // The simulated node runs no containerd: told, and not what is wrong.
    assert!(
        report.contains("its runtime is \"kwok-")
            && report.contains("whose registry files the node agent does not write")
    );
    let summary = report.rsplit("== Summary").next().unwrap_or_default();
    assert!(!summary.contains("Node pulls"), "{report}");

    // The state is structured: the address, its endpoint and verdict, the agent and the plan it applied.
    let state =
        wait_until(SOON_ON_A_NODE, || async { node_state(&client, &ns).await?.status }).await.expect("a NodePullState");
    let addresses: Vec<(&str, &str, &str)> =
        state.addresses.iter().map(|a| (a.address.as_str(), a.endpoint.as_str(), a.verdict.as_str())).collect();
    assert_eq!(addresses, [(address.as_str(), format!("http://{address}").as_str(), "configured")]);
    assert_eq!((state.node.as_str(), state.runtime.config_path_check.as_str()), (node().name(), "reads"));
    assert_eq!(state.plan.config_map, "nodestate-local-registry-publisher-node-plan");
    assert!(!state.plan.resource_version.is_empty() && !state.changed.is_empty(), "{state:?}");

    // Every Event of the namespace deleted, as --event-ttl does after an hour: doctor is still right.
    // New Events may arrive meanwhile (kubelet probes, the controller); none that doctor could have read survives.
    let events = Api::<k8s_openapi::api::events::v1::Event>::namespaced(client.clone(), &ns);
    let names = |list: kube::core::ObjectList<k8s_openapi::api::events::v1::Event>| -> Vec<String> {
        list.items.into_iter().filter_map(|e| e.metadata.name).collect()
    };
    let before = names(events.list(&Default::default()).await.expect("list Events"));
    assert!(!before.is_empty(), "the release told nothing before its Events were deleted");
    ok(tool("kubectl", &["delete", "events", "--all", "-n", &ns]));
    let after = names(events.list(&Default::default()).await.expect("list Events"));
    assert!(before.iter().all(|n| !after.contains(n)), "Events survived deletion: {after:?}");
    let (code, report) = doctor_status(&ns);
    assert!(report.contains(&configured) && code == Some(ALL_WELL), "{code:?}: {report}");

    // `edit` and `admin` in the release's own namespace cannot write a state directly (create, patch or delete);
    // and still that namespace is cluster-admin only, as docs/node-pulls.md says: both may rewrite the node plan and
    // run a pod as the agents' ServiceAccount (each tried as a server-side dry run, which is authorized as the
    // write itself).
    for role in ["edit", "admin"] {
        let holder = support::role_only_client(&client, plane.kubeconfig(), &ns, role, &format!("holder-{role}")).await;
        let states = Api::<local_registry_publisher::node::api::state::NodePullState>::namespaced(holder.clone(), &ns);
        let forged = json!({"apiVersion": "local-registry-publisher.io/v1alpha1", "kind": "NodePullState",
            "metadata": {"name": node().name()}, "status": {"addresses": []}});
        let params = kube::api::PatchParams::apply("forger").force();
        let what = |doing: &str| format!("{role}: {doing}");
        support::forbidden(
            states.patch(node().name(), &params, &kube::api::Patch::Apply(&forged)).await,
            &what("patching a node's state"),
        );
        support::forbidden(states.delete(node().name(), &Default::default()).await, &what("deleting a node's state"));
        let invented = json!({"apiVersion": "local-registry-publisher.io/v1alpha1", "kind": "NodePullState",
            "metadata": {"name": "a-node-that-is-not-there"}});
        let invented: local_registry_publisher::node::api::state::NodePullState =
            serde_json::from_value(invented).expect("a NodePullState");
        support::forbidden(states.create(&Default::default(), &invented).await, &what("creating a node's state"));

        let plans = Api::<ConfigMap>::namespaced(holder.clone(), &ns);
        let plan = &state.plan.config_map;
        let rewritten = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": plan},
            "data": {local_registry_publisher::node::PLAN_KEY: "{}"}});
        let dry = kube::api::PatchParams::apply("rewriter").force().dry_run();
        let rewrite = plans.patch(plan, &dry, &kube::api::Patch::Apply(&rewritten)).await;
        assert!(rewrite.is_ok(), "{role} may rewrite the node plan, as the docs warn: {rewrite:?}");
        let account = "nodestate-local-registry-publisher-node-agent";
        let pod: Pod = serde_json::from_value(json!({"metadata": {"name": format!("as-the-agents-{role}")},
            "spec": {"serviceAccountName": account, "containers": [{"name": "c", "image": "pause"}]}}))
        .expect("a Pod");
        let dry = kube::api::PostParams { dry_run: true, ..Default::default() };
        let run = Api::<Pod>::namespaced(holder, &ns).create(&dry, &pod).await;
        assert!(run.is_ok(), "{role} may run a pod as the agents' ServiceAccount {account}, as the docs warn: {run:?}");
    }

    // An agent whose process is frozen (SIGSTOP: its pass loop and its probes alike) turns unready, and doctor calls
    // what it last wrote stale and fails. That a pass loop late on its own makes the agent unready is the health
    // unit test `a_task_that_promised_a_pass_is_unready_once_it_is_late_and_ready_after_the_next`.
    let pods = Api::<Pod>::namespaced(client.clone(), &ns);
    let listed =
        pods.list(&ListParams::default().labels("app.kubernetes.io/component=node-agent")).await.expect("list");
    let agent = listed
        .items
        .iter()
        .find(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node().name()))
        .expect("the real node's agent");
    let container = agent.status.as_ref().and_then(|s| s.container_statuses.as_ref()).and_then(|c| c.first()).cloned();
    let container_id = container.and_then(|c| c.container_id).expect("a running container");
    let pid = container_process(container_id.rsplit('/').next().unwrap_or_default()).to_string();
    ok(Command::new("kill").args(["-STOP", &pid]).output().expect("kill -STOP"));
    let stale = wait_until(SOON_ON_A_NODE, || async {
        let (code, report) = doctor_status(&ns);
        let stale = report.contains("is not ready, so what it last wrote may be stale");
        (stale && code == Some(SOMETHING_WRONG)).then_some(report)
    })
    .await;
    let _ = Command::new("kill").args(["-CONT", &pid]).output();
    assert!(stale.is_some(), "doctor never called the frozen agent's state stale:\n{:?}", doctor_status(&ns));
    // Running again (resumed, or restarted by its liveness probe): configured.
    wait_doctor(&ns, ALL_WELL, |r| r.contains(&configured)).await;

    helm_uninstall("nodestate", &ns);
    wait_node_file(&address, "after uninstall", |t| t.is_none()).await;
    // The state goes with the agents' DaemonSet, which owns it.
    let gone = wait_until(SOON_ON_A_NODE, || async { node_state(&client, &ns).await.is_none().then_some(()) }).await;
    assert!(gone.is_some(), "the NodePullState outlived the release");
    plane.delete_namespace(&client, &ns).await.expect("delete namespace");
}

#[tokio::test]
async fn doctor_shows_why_a_node_agent_pod_is_not_running_in_the_kubelets_words() {
    let plane = plane();
    let client = plane.client().await.expect("admin client");
    images();
    let ns = plane.namespace(&client, "agentwhy").await.expect("namespace");
    clusterip_registry(&client, &ns, json!({})).await;
    // containerd's config file named where the node has no such directory: the agent's pod cannot mount it.
    let mut values = isolated_release_values(&ns, &agent_on());
    values.push(format!("nodeAgent.runtimeConfig=/nonexistent-{ns}/config.toml"));
    let chart = root().join("charts/local-registry-publisher").display().to_string();
    let mut args = vec!["install".to_string(), "agentwhy".into(), chart, "-n".into(), ns.clone()];
    args.extend(values.iter().flat_map(|v| ["--set".to_string(), v.clone()]));
    ok(tool("helm", &args.iter().map(String::as_str).collect::<Vec<_>>()));
    let ip = cluster_ip(&client, &ns, "registry").await;
    wait_published(&client, &ns, "hosting", "the registry", |d| {
        d.host_from_cluster_network.as_deref() == Some(format!("{ip}:5000").as_str())
    })
    .await;
    let line = format!("node {}: its node agent pod agentwhy-local-registry-publisher-node-agent-", node().name());
    let report = wait_doctor(&ns, SOMETHING_WRONG, |r| r.contains(&line) && r.contains("FailedMount: ")).await;
    assert!(report.contains("is Pending, not Running: ContainerCreating"), "{report}");
    assert!(report.contains(&format!("/nonexistent-{ns}")), "the kubelet's own words name the path: {report}");
    let summary = report.rsplit("== Summary").next().unwrap_or_default();
    assert!(summary.contains("Node pulls"), "{report}");
    helm_uninstall("agentwhy", &ns);
    plane.delete_namespace(&client, &ns).await.expect("delete namespace");
}
