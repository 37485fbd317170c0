//! The node agent's loopback relay across two real nodes, the registry's pod on the first: the second node's
//! runtime pulls, and a tool there pushes, at `localhost:<relay>` and `[::1]:<relay>` with no runtime file written
//! (`nodeAgent.runtime=none`), on whatever kube-proxy mode and containerd release the run has (`LRP_KUBE_PROXY`,
//! `LRP_CONTAINERD`). A port taken on a node, the agent killed, a tenant asking for a port, and the registry taken
//! away are each seen on the node itself.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Pod, Service};
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use local_registry_publisher::node::api::state::{ListenerState, NodePullState};
use serde_json::json;
use testbed::RealNode;

use super::plane;
use super::support::agent::{AGENT_PODS, ALL_WELL, SOMETHING_WRONG, own_image, push, values};
use super::support::{SOON_ON_A_NODE, apply_in, cluster_ip, ok, wait_until};

/// The relay's port: the admin's, one no other test on these nodes uses.
const RELAY_PORT: u16 = 5101;
/// The port the admin moves the relay to, held by another process on the second node first.
const TAKEN_PORT: u16 = 5103;
/// The agents' own port on every node (they run on the nodes' network).
const AGENT_PORT: u16 = 9811;

/// The release's values: the agents relay the registry `registry` of `ns` at `port` and write nothing else.
fn relay_values(ns: &str, node: &RealNode, port: u16, extra: &[&str]) -> Vec<String> {
    let mut all = vec![
        "nodeAgent.runtime=none".to_string(),
        "nodeAgent.relay.enabled=true".into(),
        format!("nodeAgent.relay.registries[0].service.namespace={ns}"),
        "nodeAgent.relay.registries[0].service.name=registry".into(),
        format!("nodeAgent.relay.registries[0].port={port}"),
        format!("nodeAgent.httpPort={AGENT_PORT}"),
    ];
    all.extend(extra.iter().map(|v| v.to_string()));
    values(ns, node, &all.iter().map(String::as_str).collect::<Vec<_>>())
}

/// The addresses something listens on at `port` in `node`'s network, as `ss` lists them.
fn listening(node: &RealNode, port: u16) -> Vec<String> {
    let output = node.command("ss").args(["-Htln", &format!("sport = :{port}")]).output().expect("run ss");
    let text = String::from_utf8_lossy(&output.stdout);
    let mut found: Vec<String> = text.lines().filter_map(|l| l.split_whitespace().nth(3).map(String::from)).collect();
    found.sort();
    found
}

/// What the relay at `port` listens on, as [`listening`] lists it: both loopbacks.
fn loopbacks(port: u16) -> [String; 2] {
    [format!("127.0.0.1:{port}"), format!("[::1]:{port}")]
}

async fn state(client: &Client, ns: &str, node: &RealNode) -> Option<NodePullState> {
    Api::<NodePullState>::namespaced(client.clone(), ns).get_opt(node.name()).await.ok().flatten()
}

/// The node's `RelayServing` condition once its status and reason are `status` and `reason` and its message says
/// `says`: its message.
async fn wait_relay(client: &Client, ns: &str, node: &RealNode, status: &str, reason: &str, says: &str) -> String {
    let condition = || async {
        let state = state(client, ns, node).await?.status?;
        state.relay_serving().cloned()
    };
    let found = wait_until(SOON_ON_A_NODE, || async {
        condition()
            .await
            .filter(|c| c.status == status && c.reason == reason && c.message.contains(says))
            .map(|c| c.message)
    })
    .await;
    match found {
        Some(message) => message,
        None => panic!(
            "{}'s RelayServing never became {status} {reason} saying {says:?}: {:?}",
            node.name(),
            condition().await
        ),
    }
}

/// A pod on `node` running `image`: `Ok` once it runs, `Err` with its status otherwise.
async fn run_on(client: &Client, ns: &str, node: &RealNode, name: &str, image: &str) {
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"nodeName": node.name(), "containers": [{"name": "app", "image": image, "imagePullPolicy": "Always"}]}});
    apply_in(client, ns, pod).await;
    let pods = Api::<Pod>::namespaced(client.clone(), ns);
    let phase = || async { pods.get_opt(name).await.ok().flatten().and_then(|p| p.status) };
    let running = wait_until(SOON_ON_A_NODE, || async {
        phase().await.filter(|s| s.phase.as_deref() == Some("Running")).map(drop)
    })
    .await;
    assert!(running.is_some(), "pod {name} on {} never ran {image}: {:?}", node.name(), phase().await);
}

/// `doctor` on the release in `ns` run on `node`, as a developer there runs it (its loopback is the relay's), until
/// it exits with `status` and its report satisfies `check`.
async fn wait_doctor_on(node: &RealNode, ns: &str, status: i32, check: impl Fn(&str) -> bool) -> String {
    let run = || super::support::agent::doctor_on(plane(), node, ns);
    let found = wait_until(SOON_ON_A_NODE, || async {
        let (code, report) = run();
        (code == Some(status) && check(&report)).then_some(report)
    })
    .await;
    found.unwrap_or_else(|| {
        let (code, report) = run();
        panic!(
            "doctor on {} never said what was expected with exit status {status}; it exits {code:?}:\n{report}",
            node.name()
        )
    })
}

/// The agent's /metrics on `node`, at the node's own address (the agents run on the nodes' network).
fn agent_metrics(node: &RealNode) -> String {
    let url = format!("http://{}:{AGENT_PORT}/metrics", node.network().node_ip);
    let output = node.command("curl").args(["-sf", "--max-time", "5", &url]).output().expect("run curl");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The value of the series `line` (`name{labels}`) in `text`.
fn value(text: &str, series: &str) -> f64 {
    let line = text.lines().find(|l| l.starts_with(series)).unwrap_or_else(|| panic!("no {series} in\n{text}"));
    line.rsplit(' ').next().and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("{line}"))
}

/// The agent pod on `node`, the one not being deleted.
async fn agent_on(pods: &Api<Pod>, node: &RealNode) -> Option<Pod> {
    let agents = pods.list(&ListParams::default().labels(AGENT_PODS)).await.ok()?;
    agents.items.into_iter().find(|p| {
        p.metadata.deletion_timestamp.is_none()
            && p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node.name())
    })
}

/// A process on `node` that holds `port` on its IPv4 loopback until dropped (it exits at once if the port is taken).
struct Squatter(std::process::Child);

impl Squatter {
    fn on(node: &RealNode, port: u16) -> Self {
        let program = [
            "import socket, time",
            "s = socket.socket()",
            &format!("s.bind(('127.0.0.1', {port}))"),
            "s.listen()",
            "time.sleep(600)",
        ]
        .join("\n");
        let child = node.command("python3").args(["-c", &program]).spawn().expect("start the squatter");
        Self(child)
    }
}

impl Drop for Squatter {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test]
async fn the_relay_serves_a_registry_on_another_node_at_both_loopbacks_with_no_runtime_file() {
    let plane = plane();
    let (client, first, second, ns) = super::both_nodes_and_a_registry("relay").await;
    let registry = cluster_ip(&client, &ns, "registry").await;
    super::support::agent::helm(plane, "install", "relay", &ns, &relay_values(&ns, first, RELAY_PORT, &[]));

    // Tools on the node push, and its runtime pulls, at the relay: host names it, the runtime falls back to host.
    let hosting = Api::<ConfigMap>::namespaced(client.clone(), &ns);
    let published = wait_until(SOON_ON_A_NODE, || async {
        let data = hosting.get_opt("hosting").await.ok()??.data?;
        let text = data.get(local_registry_publisher::hosting::DATA_KEY)?.clone();
        text.contains(&format!("host: \"localhost:{RELAY_PORT}\"")).then_some(text)
    })
    .await
    .unwrap_or_else(|| panic!("the relay's address was never published"));
    assert!(published.contains(&format!("hostFromClusterNetwork: \"{registry}:5000\"")), "{published}");
    assert!(!published.contains("hostFromContainerRuntime"), "readers take host:\n{published}");

    for node in [first, second] {
        let said = format!("127.0.0.1:{RELAY_PORT} and [::1]:{RELAY_PORT} to {registry}:5000");
        wait_relay(&client, &ns, node, "True", "RelayServing", &said).await;
        // Loopback only, whatever the Service says.
        assert_eq!(listening(node, RELAY_PORT), loopbacks(RELAY_PORT));
        let states = state(&client, &ns, node).await.and_then(|s| s.status).expect("a state");
        assert_eq!(states.relays.len(), 1);
        assert!(states.relays[0].listeners.iter().all(|l| l.state == ListenerState::Serving), "{states:?}");
        assert_eq!(states.configured().map(|c| c.reason.as_str()), Some("RuntimeNotConfigured"));
    }

    // From the node without the registry: a tool pushes through the relay, and the image is in the registry.
    let image = own_image(plane, "relay");
    push(plane, Some(second), &image, &format!("localhost:{RELAY_PORT}/relay/app:1"), None);
    let crane = plane.tools().join("crane");
    ok(first.command(&crane).args(["digest", "--insecure", &format!("{registry}:5000/relay/app:1")]).output().unwrap());
    // Its runtime pulls at both loopbacks, with no file of ours on the node.
    run_on(&client, &ns, second, "over-ipv4", &format!("localhost:{RELAY_PORT}/relay/app:1")).await;
    run_on(&client, &ns, second, "over-ipv6", &format!("[::1]:{RELAY_PORT}/relay/app:1")).await;
    let files: Vec<String> = std::fs::read_dir(second.hosts_dir())
        .map(|entries| entries.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    assert!(files.iter().all(|f| !f.contains(&RELAY_PORT.to_string()) && !f.contains(&registry)), "{files:?}");
    let metrics = agent_metrics(second);
    let labels = format!("registry=\"{ns}/registry\"");
    assert!(value(&metrics, &format!("local_registry_publisher_node_relay_connections_total{{{labels}}}")) >= 2.0);
    let pulled = value(
        &metrics,
        &format!("local_registry_publisher_node_relay_bytes_total{{{labels},direction=\"from_registry\"}}"),
    );
    assert!(pulled > 0.0, "{metrics}");
    let report = wait_doctor_on(second, &ns, ALL_WELL, |r| r.contains(&format!("node {}: ", second.name()))).await;
    assert!(report.contains(&format!("relaying {ns}/registry at 127.0.0.1:{RELAY_PORT}")), "{report}");

    // The Service's author asks for another port and an address off loopback: the relay stays where the admin put it.
    let services = Api::<Service>::namespaced(client.clone(), &ns);
    let asks = json!({"metadata": {"annotations": {
        "local-registry-publisher.io/host-from-container-runtime": format!("127.0.0.1:{}", RELAY_PORT + 1),
        "local-registry-publisher.io/host": format!("{}:{RELAY_PORT}", second.network().node_ip)}}});
    services.patch("registry", &PatchParams::default(), &Patch::Merge(&asks)).await.expect("annotate");
    wait_until(SOON_ON_A_NODE, || async {
        let text = hosting.get_opt("hosting").await.ok()??.data?.remove(local_registry_publisher::hosting::DATA_KEY)?;
        text.contains(&format!("127.0.0.1:{}", RELAY_PORT + 1)).then_some(())
    })
    .await
    .expect("the annotations are published");
    tokio::time::sleep(Duration::from_secs(3)).await;
    for node in [first, second] {
        assert!(listening(node, RELAY_PORT + 1).is_empty(), "a tenant's port is listened on");
        assert_eq!(listening(node, RELAY_PORT), loopbacks(RELAY_PORT));
    }
    let clean = json!({"metadata": {"annotations": {
        "local-registry-publisher.io/host-from-container-runtime": null, "local-registry-publisher.io/host": null}}});
    services.patch("registry", &PatchParams::default(), &Patch::Merge(&clean)).await.expect("annotations off");

    // The agent killed: its DaemonSet brings it back by itself, and the relay serves again.
    let pods = Api::<Pod>::namespaced(client.clone(), &ns);
    let killed = agent_on(&pods, second).await.expect("the second node's agent");
    pods.delete(&killed.metadata.name.clone().unwrap_or_default(), &DeleteParams::default())
        .await
        .expect("kill the agent");
    let back = wait_until(SOON_ON_A_NODE, || async {
        let agent = agent_on(&pods, second).await?;
        let running = agent.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
        (agent.metadata.uid != killed.metadata.uid && running).then_some(())
    })
    .await;
    assert!(back.is_some(), "no agent came back on {}: {:?}", second.name(), agent_on(&pods, second).await);
    let relaying =
        wait_until(SOON_ON_A_NODE, || async { (listening(second, RELAY_PORT) == loopbacks(RELAY_PORT)).then_some(()) })
            .await;
    assert!(relaying.is_some(), "the agent came back but does not listen: {:?}", listening(second, RELAY_PORT));
    run_on(&client, &ns, second, "after-a-restart", &format!("localhost:{RELAY_PORT}/relay/app:1")).await;

    // The admin moves the relay to a port a process on the second node already holds: that node says so, doctor
    // names it, the first node serves; once the port is free the agent takes it by itself. The port is held before
    // the plan names it, so no agent can win it first.
    let port = TAKEN_PORT;
    let squatter = Squatter::on(second, port);
    let held = wait_until(SOON_ON_A_NODE, || async {
        (listening(second, port) == [format!("127.0.0.1:{port}")]).then_some(())
    })
    .await;
    assert!(held.is_some(), "the squatter never listened at 127.0.0.1:{port}: {:?}", listening(second, port));
    super::support::agent::helm(plane, "upgrade", "relay", &ns, &relay_values(&ns, first, port, &[]));
    let taken = format!("127.0.0.1:{port} (the relay of {ns}/registry) is taken");
    wait_relay(&client, &ns, second, "False", "RelayPortTaken", &taken).await;
    let both = format!("127.0.0.1:{port} and [::1]:{port}");
    wait_relay(&client, &ns, first, "True", "RelayServing", &both).await;
    let taken = format!("node {}: ", second.name());
    let report = wait_doctor_on(second, &ns, SOMETHING_WRONG, |r| {
        r.lines().any(|l| l.contains(&taken) && l.contains("RelayPortTaken"))
    })
    .await;
    assert!(
        report.contains(&format!("sport = :{port}")),
        "doctor gives the command that shows who holds it:\n{report}"
    );
    drop(squatter);
    wait_relay(&client, &ns, second, "True", "RelayServing", &both).await;
    run_on(&client, &ns, second, "after-the-squatter", &format!("localhost:{port}/relay/app:1")).await;

    // The registry taken away: the plan relays nothing and every listener closes.
    let plans = Api::<ConfigMap>::namespaced(client.clone(), &ns);
    let plan_text = || async {
        plans.get_opt("relay-local-registry-publisher-node-plan").await.ok().flatten().and_then(|c| c.data)
    };
    let before = plan_text().await;
    let unlabel = json!({"metadata": {"labels": {super::support::agent::REGISTRY_LABEL: null}}});
    services.patch("registry", &PatchParams::default(), &Patch::Merge(&unlabel)).await.expect("unlabel");
    let changed = wait_until(SOON_ON_A_NODE, || async { (plan_text().await != before).then(Instant::now) }).await;
    let changed = changed.expect("the plan changed");
    let closed = wait_until(SOON_ON_A_NODE, || async { listening(second, port).is_empty().then(Instant::now) }).await;
    let closed = closed.expect("the relay stopped listening");
    eprintln!(
        "[relay] listeners closed {:?} after the plan changed (polled)",
        closed.saturating_duration_since(changed)
    );
    wait_relay(&client, &ns, second, "True", "NothingToRelay", "").await;

    // Published again, then the relay turned off: the agents on the pods' network again, nothing left listening.
    let relabel = json!({"metadata": {"labels": {super::support::agent::REGISTRY_LABEL: &ns}}});
    services.patch("registry", &PatchParams::default(), &Patch::Merge(&relabel)).await.expect("relabel");
    wait_relay(&client, &ns, second, "True", "RelayServing", &both).await;
    let off = ["nodeAgent.relay.enabled=false".to_string(), "nodeAgent.runtime=containerd".into()];
    let mut values = relay_values(&ns, first, port, &[]);
    values.extend(off);
    super::support::agent::helm(plane, "upgrade", "relay", &ns, &values);
    for node in [first, second] {
        let closed = wait_until(SOON_ON_A_NODE, || async { listening(node, port).is_empty().then_some(()) });
        assert!(closed.await.is_some(), "{} still listens at {port} with the relay off", node.name());
        assert!(listening(node, RELAY_PORT).is_empty(), "{} listens at the relay's first port", node.name());
    }

    super::support::agent::helm_uninstall(plane, "relay", &ns);
    plane.delete_namespace(&client, &ns).await.expect("delete namespace");
}
