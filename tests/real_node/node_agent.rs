//! The node agent on the real node: a published cluster DNS name or kind-shaped host made pullable, its file kept
//! through a recreated registry, a foreign file and a withdrawn address, containerd reading another directory, and
//! nothing of its own left behind.

use super::*;

/// A release `release` in a fresh namespace (the node agent on if `agent`) publishing a plain-HTTP ClusterIP
/// registry, by its cluster DNS name if `by_name` (the annotation Camel K and in-cluster builders use) or else by
/// its ClusterIP, with an image of its own pushed by the ClusterIP as `<address>/<release>/app:1`.
struct NodePull {
    release: &'static str,
    client: Client,
    ns: String,
    ip: String,
}

impl NodePull {
    async fn start(release: &'static str, by_name: bool, agent: bool) -> Self {
        let plane = plane();
        let client = plane.client().await.expect("admin client");
        images();
        let ns = plane.namespace(&client, release).await.expect("namespace");
        apply_in(&client, &ns, registry_deployment()).await;
        let values = isolated_release_values(&ns, &if agent { agent_on() } else { Vec::new() });
        helm_install(release, &ns, &values.iter().map(String::as_str).collect::<Vec<_>>());
        let mut this = Self { release, client, ns, ip: String::new() };
        this.publish(by_name).await;
        this.ip = cluster_ip(&this.client, &this.ns, "registry").await;
        push(true, &own_image(release), &this.image(&this.by_ip()), None);
        this
    }

    /// (Re)writes the registry's Service to publish it by name or by ClusterIP, and waits until it is.
    async fn publish(&self, by_name: bool) {
        let annotations = if by_name {
            json!({"local-registry-publisher.io/host-from-cluster-network": self.name()})
        } else {
            json!({})
        };
        apply_in(&self.client, &self.ns, registry_service(&self.ns, annotations)).await;
        let ip = cluster_ip(&self.client, &self.ns, "registry").await;
        let wanted = if by_name { self.name() } else { format!("{ip}:5000") };
        wait_published(&self.client, &self.ns, "hosting", "the ClusterIP registry", |d| {
            d.host_from_cluster_network.as_deref() == Some(wanted.as_str())
        })
        .await;
    }

    fn by_ip(&self) -> String {
        format!("{}:5000", self.ip)
    }

    /// The registry's cluster DNS name and port.
    fn name(&self) -> String {
        format!("registry.{}.svc.cluster.local:5000", self.ns)
    }

    fn image(&self, address: &str) -> String {
        format!("{address}/{}/app:1", self.release)
    }

    /// A pod of the pushed image named by `address`, once it is Running.
    async fn runs(&self, pod: &str, address: &str) {
        apply_in(&self.client, &self.ns, app_pod(pod, &self.image(address))).await;
        wait_phase(&self.client, &self.ns, pod, &["Running"]).await;
    }

    fn upgrade(&self, extra: &[String]) {
        helm_upgrade(self.release, &self.ns, &isolated_release_values(&self.ns, extra));
    }

    /// Uninstalls the release and deletes its namespace.
    async fn end(self) {
        helm_uninstall(self.release, &self.ns);
        plane().delete_namespace(&self.client, &self.ns).await.expect("delete namespace");
    }
}

#[tokio::test]
async fn without_the_node_agent_the_nodes_runtime_pulls_neither_by_clusterip_nor_by_cluster_dns_name() {
    let pull = NodePull::start("nopull", true, false).await;
    // By ClusterIP, the runtime dials HTTPS, which the registry does not speak.
    apply_in(&pull.client, &pull.ns, app_pod("by-ip", &pull.image(&pull.by_ip()))).await;
    wait_waiting(&pull.client, &pull.ns, "by-ip", "server gave HTTP response to HTTPS client").await;
    // By name, it cannot even resolve it: cluster DNS is not the node's.
    apply_in(&pull.client, &pull.ns, app_pod("by-name", &pull.image(&pull.name()))).await;
    wait_waiting(&pull.client, &pull.ns, "by-name", &format!("lookup registry.{}.svc.cluster.local", pull.ns)).await;
    assert!(node_file(&pull.name()).is_none() && node_file(&pull.by_ip()).is_none());
    pull.end().await;
}

#[tokio::test]
async fn the_node_agent_maps_a_published_cluster_dns_name_to_the_clusterip_and_its_metrics_and_doctor_say_so() {
    let pull = NodePull::start("nodepull", true, true).await;
    let (text, took) = wait_node_file(&pull.name(), "agent on", |t| t.is_some()).await;
    println!("node file written {took:?} after the name was published");
    assert!(text.unwrap_or_default().contains(&sends_to_http(&pull.by_ip())));
    pull.runs("by-name", &pull.name()).await;
    // The agent's own metrics say the same (its readiness probe, on the same port, let helm --wait return).
    let configured = "local_registry_publisher_node_addresses{state=\"configured\"} 1\n";
    let metrics = wait_agent_metrics(&pull.client, &pull.ns, |text| text.contains(configured)).await;
    assert!(metrics.contains("local_registry_publisher_node_files_total{operation=\"write\"}"), "{metrics}");
    assert!(metrics.contains("local_registry_publisher_node_last_sync_timestamp_seconds "), "{metrics}");
    let reads = "local_registry_publisher_node_runtime_config{state=\"reads\"} 1\n";
    assert!(metrics.contains(reads), "the runtime reads the agent's directory: {metrics}");
    // doctor tells per node what the agent there last said of itself; the kwok node runs no containerd at all.
    let real = format!("node {}: configured by nodepull-local-registry-publisher-node-agent-", node().name());
    let report = wait_doctor(&pull.ns, ALL_WELL, |report| report.contains(&real)).await;
    // The node's line names the runtime's config file the agent read and the directory it has the runtime read.
    let line = report.lines().find(|line| line.contains(&real)).unwrap_or_default();
    let read = format!("; {} has it read {}", node().runtime_config_on_node(), node().config_path_on_node());
    assert!(line.contains(&read), "{line}");
    let needs = format!("{} needs a node file mapping it to http://{}", pull.name(), pull.by_ip());
    assert!(report.contains(&needs), "{report}");
    let simulated = "its runtime is \"kwok-";
    assert!(
        report.contains(simulated) && report.contains("whose registry files the node agent does not write"),
        "{report}"
    );

    // A look-alike: labelled as doctor finds the agents (their component), running on the node, but no pod of the
    // agents' DaemonSet (whose full selector would adopt it and delete it as one pod too many on the node). doctor
    // goes on judging the node by the DaemonSet's pod and its state, and never names the look-alike.
    let (before, _) = doctor_status(&pull.ns);
    assert_eq!(before, Some(ALL_WELL));
    let mut spec = registry_pod_spec(5000, None);
    spec["nodeName"] = json!(node().name());
    let labels = json!({"app.kubernetes.io/component": "node-agent", "app.kubernetes.io/instance": "nodepull"});
    let lookalike = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "lookalike", "labels": labels},
        "spec": spec});
    apply_in(&pull.client, &pull.ns, lookalike).await;
    wait_phase(&pull.client, &pull.ns, "lookalike", &["Running"]).await;
    let (code, report) = doctor_status(&pull.ns);
    assert_eq!(code, before, "{report}");
    let after = report.lines().find(|l| l.contains(&format!("node {}: ", node().name()))).unwrap_or_default();
    assert!(after.contains(&real) && !report.contains("lookalike"), "{report}");
    pull.end().await;
}

#[tokio::test]
async fn the_node_agents_file_follows_a_recreated_registry_and_an_emptied_directory_with_no_restart() {
    let mut pull = NodePull::start("nodemove", true, true).await;
    wait_node_file(&pull.name(), "agent on", |t| t.is_some()).await;
    // The registry moves: its Service recreated, with a new ClusterIP.
    support::delete_in(&pull.client, &pull.ns, "v1", "Service", "registry").await;
    let services = Api::<k8s_openapi::api::core::v1::Service>::namespaced(pull.client.clone(), &pull.ns);
    let gone =
        wait_until(SOON_ON_A_NODE, || async { matches!(services.get_opt("registry").await, Ok(None)).then_some(()) });
    assert!(gone.await.is_some(), "the Service was not deleted");
    pull.publish(true).await;
    let moved = cluster_ip(&pull.client, &pull.ns, "registry").await;
    assert_ne!(moved, pull.ip);
    pull.ip = moved;
    let follows = |t: Option<&str>| t.is_some_and(|t| t.contains(&sends_to_http(&format!("{}:5000", pull.ip))));
    let (_, took) = wait_node_file(&pull.name(), "after the move", follows).await;
    println!("node file followed the new ClusterIP {took:?} after the Service was recreated");
    pull.runs("moved", &pull.name()).await;
    // The node's file removed by hand (containerd's whole directory for it) is written again, with nothing restarted.
    let agents = agent_pod_uids(&pull.client, &pull.ns).await;
    support::agent::remove_node_files(node(), &pull.name());
    wait_node_file(&pull.name(), "after emptying", follows).await;
    assert_eq!(agent_pod_uids(&pull.client, &pull.ns).await, agents, "an agent was restarted");
    pull.end().await;
}

/// The node agent pods of the release in `ns`, by UID and restart count.
async fn agent_pod_uids(client: &Client, ns: &str) -> BTreeSet<(String, i32)> {
    let pods = Api::<Pod>::namespaced(client.clone(), ns);
    let listed = pods.list(&ListParams::default().labels("app.kubernetes.io/component=node-agent")).await.unwrap();
    let restarts = |pod: &Pod| {
        let statuses = pod.status.as_ref().and_then(|s| s.container_statuses.clone()).unwrap_or_default();
        statuses.iter().map(|c| c.restart_count).sum()
    };
    listed.items.iter().map(|pod| (pod.metadata.uid.clone().unwrap_or_default(), restarts(pod))).collect()
}

#[tokio::test]
async fn the_node_agent_leaves_a_foreign_file_for_its_address_as_it_is_tells_it_and_writes_its_own_once_it_is_gone() {
    let pull = NodePull::start("nodeforeign", true, true).await;
    let address = pull.name();
    wait_node_file(&address, "agent on", |t| t.is_some()).await;
    // Where that runtime's users write one: containerd's at the agent's own path, CRI-O's a drop-in of its own.
    let (their_path, theirs) = support::agent::write_foreign_file(node(), &address, &pull.by_ip());
    let report =
        wait_doctor(&pull.ns, SOMETHING_WRONG, |report| report.contains(&format!("{address} (foreign: "))).await;
    assert!(report.contains(&format!("node {}: not configured for {address}", node().name())), "{report}");
    let left_alone = "local_registry_publisher_node_addresses{state=\"foreign\"} 1\n";
    wait_agent_metrics(&pull.client, &pull.ns, |text| text.contains(left_alone)).await;
    assert_eq!(std::fs::read_to_string(&their_path).ok().as_deref(), Some(theirs.as_str()));
    if node().runtime() == testbed::node::Runtime::Crio {
        // A later drop-in replaces an earlier table of the same prefix whole: ours went, not to take theirs over.
        assert_eq!(node_file(&address), None, "the agent's drop-in stayed beside a foreign one");
    }
    std::fs::remove_file(&their_path).unwrap();
    wait_node_file(&address, "after the foreign file went", |t| t.is_some_and(|t| t.starts_with("# Written by"))).await;
    pull.end().await;
}

#[tokio::test]
async fn the_node_agent_removes_the_file_of_a_withdrawn_address_and_writes_the_one_published_instead() {
    let pull = NodePull::start("nodewithdraw", true, true).await;
    wait_node_file(&pull.name(), "agent on", |t| t.is_some()).await;
    // Published by its ClusterIP (the annotation removed), the address gets a file of its own and the name's goes.
    pull.publish(false).await;
    let (text, _) = wait_node_file(&pull.by_ip(), "by ClusterIP", |t| t.is_some()).await;
    assert!(text.unwrap_or_default().contains(&sends_to_http(&pull.by_ip())));
    pull.runs("by-ip", &pull.by_ip()).await;
    wait_node_file(&pull.name(), "the name withdrawn", |t| t.is_none()).await;
    assert!(!node_files_left(&pull.name()), "the name's file was left");
    pull.end().await;
}

#[tokio::test]
async fn the_node_agent_turned_off_or_uninstalled_leaves_nothing_of_its_own_and_every_foreign_file_as_it_was() {
    // Someone else's file for another registry, there before the agent.
    let foreign_name = format!("mirror-{}.example:5000", std::process::id());
    let (foreign_path, foreign) = support::agent::write_foreign_file(node(), &foreign_name, "127.0.0.1:1");
    let pull = NodePull::start("nodeoff", false, true).await;
    let address = pull.by_ip();
    wait_node_file(&address, "agent on", |t| t.is_some()).await;
    pull.upgrade(&["nodeAgent.enabled=false".into()]);
    wait_node_file(&address, "agent off", |t| t.is_none()).await;
    assert!(!node_files_left(&address));
    pull.upgrade(&agent_on());
    wait_node_file(&address, "agent on again", |t| t.is_some()).await;
    helm_uninstall(pull.release, &pull.ns);
    wait_node_file(&address, "after uninstall", |t| t.is_none()).await;
    assert!(!node_files_left(&address));
    assert_eq!(std::fs::read_to_string(&foreign_path).unwrap(), foreign);
    support::agent::remove_foreign_file(node(), &foreign_path);
    plane().delete_namespace(&pull.client, &pull.ns).await.expect("delete namespace");
}

#[tokio::test]
async fn the_node_agent_makes_a_kind_shaped_host_pullable_by_the_node_only_through_its_mirror_entry() {
    let plane = plane();
    let client = plane.client().await.expect("admin client");
    images();
    let ns = plane.namespace(&client, "kindhost").await.expect("namespace");
    // kind's shape: `host` is the laptop's port (localhost:5001), which nothing on the node listens at; a pod
    // naming it (as Tilt does when the document gives no hostFromContainerRuntime) can only pull through a mirror.
    let address = "localhost:5001";
    clusterip_registry(&client, &ns, json!({"local-registry-publisher.io/host": address})).await;
    let values = isolated_release_values(&ns, &[]);
    helm_install("kindhost", &ns, &values.iter().map(String::as_str).collect::<Vec<_>>());
    wait_published(&client, &ns, "hosting", "the kind-shaped registry", |d| d.host.as_deref() == Some(address)).await;
    let ip = cluster_ip(&client, &ns, "registry").await;
    push(true, &own_image("kind-host"), &format!("{ip}:5000/kindhost/app:1"), None);
    let image = format!("{address}/kindhost/app:1");

    // Without the agent the node's runtime dials its own loopback, where nothing listens.
    apply_in(&client, &ns, app_pod("without", &image)).await;
    wait_waiting(&client, &ns, "without", ":5001: connect: connection refused").await;
    assert!(node_file(address).is_none());

    // With it, and the address allowed by the admin (the chart's kind distribution allows its own), the node's
    // mirror entry for localhost:5001 sends the pull to the registry's ClusterIP.
    let mut allowed = agent_on();
    allowed.push(format!("nodeAgent.allowedAddresses={{{address}}}"));
    pulls_through_the_agents_file(&client, &ns, "kindhost", &allowed, address, &ip, &image).await;
    uninstalled(&client, "kindhost", &ns, address).await;
}

/// Turns the node agent on for `release` in `ns` (with `values`) and waits for its file for `address`, which maps it
/// to the registry's ClusterIP `ip`; a pod `with` of `image` then runs through it.
async fn pulls_through_the_agents_file(
    client: &Client,
    ns: &str,
    release: &str,
    values: &[String],
    address: &str,
    ip: &str,
    image: &str,
) {
    helm_upgrade(release, ns, &isolated_release_values(ns, values));
    let (text, _) = wait_node_file(address, "agent on", |t| t.is_some()).await;
    let proxy = node().proxy_mode().as_str();
    assert!(text.unwrap_or_default().contains(&sends_to_http(&format!("{ip}:5000"))), "kube-proxy {proxy}");
    apply_in(client, ns, app_pod("with", image)).await;
    wait_phase(client, ns, "with", &["Running"]).await;
    println!("kube-proxy {proxy}: a pod of {image} runs through the agent's file");
}

/// Uninstalls `release`, waits until its file for `address` is gone, and deletes `ns`.
async fn uninstalled(client: &Client, release: &str, ns: &str, address: &str) {
    helm_uninstall(release, ns);
    wait_node_file(address, "after uninstall", |t| t.is_none()).await;
    plane().delete_namespace(client, ns).await.expect("delete namespace");
}

#[tokio::test]
async fn the_node_agent_tells_when_the_nodes_containerd_reads_another_directory_and_the_pull_fails_until_fixed() {
    let plane = plane();
    let client = plane.client().await.expect("admin client");
    images();
    let ns = plane.namespace(&client, "configpath").await.expect("namespace");
    clusterip_registry(&client, &ns, json!({})).await;
    // A directory containerd does not read, as a wrong nodeAgent.configPath (k3s's on a kind node) makes it.
    let elsewhere = node().hosts_dir().with_file_name(format!("{ns}.d"));
    let wrong = isolated_release_values(&ns, &agent_writing_into(&elsewhere.display().to_string()));
    helm_install("configpath", &ns, &wrong.iter().map(String::as_str).collect::<Vec<_>>());
    let ip = cluster_ip(&client, &ns, "registry").await;
    let address = format!("{ip}:5000");
    wait_published(&client, &ns, "hosting", "the ClusterIP registry", |d| {
        d.host_from_cluster_network.as_deref() == Some(address.as_str())
    })
    .await;
    push(true, &own_image("config-path"), &format!("{address}/configpath/app:1"), None);
    let written =
        wait_until(SOON_ON_A_NODE, || async { elsewhere.join(&address).join("hosts.toml").exists().then_some(()) });
    assert!(written.await.is_some(), "the agent wrote nothing into {}", elsewhere.display());

    // The file is there, but containerd never reads it: the pull fails with the runtime's own error, and the
    // agent, its metrics and doctor say why and what to set.
    let image = format!("{address}/configpath/app:1");
    apply_in(&client, &ns, app_pod("unread", &image)).await;
    wait_waiting(&client, &ns, "unread", "server gave HTTP response to HTTPS client").await;
    let mismatch = "local_registry_publisher_node_runtime_config{state=\"elsewhere\"} 1\n";
    wait_agent_metrics(&client, &ns, |text| text.contains(mismatch)).await;
    // A node verdict decides the exit status, with the node section named as what is wrong.
    let report = wait_doctor(&ns, SOMETHING_WRONG, |report| report.contains("ConfigPathMismatch: ")).await;
    let summary = report.rsplit("== Summary").next().unwrap_or_default();
    assert!(summary.contains("something is wrong in: ") && summary.contains("Node pulls"), "{report}");
    assert!(report.contains(&format!("node {}: not configured for {address}", node().name())), "{report}");
    let reads = format!("reads registry hosts from {}", node().config_path_on_node());
    assert!(report.contains(&reads) && report.contains("nodeAgent.configPath"), "{report}");
    // The agent's metric, its NodePullState and doctor say the same: the address is unread, not configured.
    let metrics = wait_agent_metrics(&client, &ns, |text| text.contains(mismatch)).await;
    assert!(metrics.contains("local_registry_publisher_node_addresses{state=\"configured\"} 0\n"), "{metrics}");
    assert!(metrics.contains("local_registry_publisher_node_addresses{state=\"unread\"} 1\n"), "{metrics}");
    let state = node_state(&client, &ns).await.and_then(|s| s.status).expect("a NodePullState");
    let verdicts: Vec<(&str, &str)> =
        state.addresses.iter().map(|a| (a.address.as_str(), a.verdict.as_str())).collect();
    assert_eq!(verdicts, [(address.as_str(), "unread")]);
    assert_eq!(state.runtime.config_path_check.as_str(), "elsewhere");
    let condition = state.configured().expect("the Configured condition");
    assert_eq!((condition.status.as_str(), condition.reason.as_str()), ("False", "ConfigPathMismatch"));
    assert!(report.contains(&condition.message), "doctor says what the condition says:\n{report}");
    let waited = wait_configured(&ns, "5s");
    assert!(!waited.status.success(), "kubectl wait returned for a node whose containerd reads elsewhere");

    // Pointed at containerd's config_path, the same image pulls (a new pod: kubelet's pull backoff is not ours),
    // and the files in the old directory, which no agent reads now, are gone.
    helm_upgrade("configpath", &ns, &isolated_release_values(&ns, &agent_on()));
    wait_node_file(&address, "configPath fixed", |t| t.is_some()).await;
    assert!(!elsewhere.join(&address).exists(), "the file in the old configPath was left behind");
    apply_in(&client, &ns, app_pod("read", &image)).await;
    wait_phase(&client, &ns, "read", &["Running"]).await;
    let reads = "local_registry_publisher_node_runtime_config{state=\"reads\"} 1\n";
    wait_agent_metrics(&client, &ns, |text| text.contains(reads)).await;
    let waited = wait_configured(&ns, "60s");
    assert!(waited.status.success(), "kubectl wait: {}", String::from_utf8_lossy(&waited.stderr));
    helm_uninstall("configpath", &ns);
    wait_node_file(&address, "after uninstall", |t| t.is_none()).await;
    std::fs::remove_dir_all(&elsewhere).unwrap();
    plane.delete_namespace(&client, &ns).await.expect("delete namespace");
}

/// `kubectl wait --for=condition=Configured` on this node's state in `ns`, for at most `timeout`.
fn wait_configured(ns: &str, timeout: &str) -> Output {
    let object = format!("nodepullstate/{}", node().name());
    let timeout = format!("--timeout={timeout}");
    tool("kubectl", &["wait", "-n", ns, "--for=condition=Configured", &object, &timeout])
}

#[tokio::test]
async fn the_node_agent_maps_the_published_loopback_node_port_to_the_clusterip_which_every_proxy_mode_serves() {
    let (client, ns) = release_in_own_namespace("loopback", "loopback", isolated_values).await;
    nodeport_registry(&client, &ns).await;
    let document = wait_published(&client, &ns, "hosting", "the NodePort registry", |d| d.host.is_some()).await;
    let host = document.host.expect("a host");
    assert!(host.starts_with("localhost:3"), "published {host}");
    // The runtime pulls what the document gives it: no hostFromContainerRuntime, so `host`.
    assert_eq!(document.host_from_container_runtime, None);
    let ip = cluster_ip(&client, &ns, "registry").await;
    push(true, &own_image("loopback"), &format!("{ip}:5000/loopback/app:1"), None);
    let image = format!("{host}/loopback/app:1");

    // doctor reads kube-proxy's mode where kubeadm and kind keep it (the testbed keeps its node's there too), and
    // says per node whether the node's containerd can pull the loopback nodePort. It exits 4 in every case here:
    // this machine is not the node, so `host` does not answer from where doctor runs.
    let proxy = node().proxy_mode().as_str();
    let on_node = format!(
        "on node {}, kube-proxy runs in {proxy} mode (ConfigMap kube-system/kube-proxy (config.conf))",
        node().name()
    );
    let (code, report) = doctor_status(&ns);
    assert_eq!(code, Some(SOMETHING_WRONG), "{report}");
    match node().proxy_mode() {
        // Without the agent, iptables mode serves the loopback nodePort and the pod runs; nftables mode does not.
        testbed::node::ProxyMode::Iptables => {
            assert!(report.contains(&format!("{on_node}, which serves {host} on the node's loopback")), "{report}");
            apply_in(&client, &ns, app_pod("without", &image)).await;
            wait_phase(&client, &ns, "without", &["Running"]).await;
        }
        testbed::node::ProxyMode::Nftables => {
            let fails = format!("{on_node}, which serves no {host} on the node's loopback: its containerd cannot pull");
            assert!(report.contains(&fails), "{report}");
            apply_in(&client, &ns, app_pod("without", &image)).await;
            wait_waiting(&client, &ns, "without", "connect: connection refused").await;
        }
    }

    // The agent's file sends the pull to the ClusterIP, which both modes serve to the node.
    pulls_through_the_agents_file(&client, &ns, "loopback", &agent_on(), &host, &ip, &image).await;
    let said = match node().proxy_mode() {
        testbed::node::ProxyMode::Iptables => format!("{on_node}, which serves {host} on the node's loopback"),
        testbed::node::ProxyMode::Nftables => {
            format!("{on_node}; {host} is pulled through the agent's file, to the ClusterIP")
        }
    };
    let report = wait_doctor(&ns, SOMETHING_WRONG, |report| report.contains(&said)).await;
    assert!(!report.contains("its containerd cannot pull"), "{report}");
    uninstalled(&client, "loopback", &ns, &host).await;
}

#[tokio::test]
async fn the_node_agent_maps_a_published_ipv6_loopback_node_port_which_no_proxy_mode_serves() {
    let (client, ns) = release_in_own_namespace("loopback6", "loopback6", isolated_values).await;
    nodeport_registry(&client, &ns).await;
    let services = Api::<Service>::namespaced(client.clone(), &ns);
    let spec = services.get("registry").await.expect("the registry Service").spec;
    let node_port = spec.and_then(|s| s.ports?.first()?.node_port).expect("a nodePort");
    let host = format!("[::1]:{node_port}");
    let annotation = json!({"metadata": {"annotations": {"local-registry-publisher.io/host": host}}});
    services.patch("registry", &PatchParams::default(), &Patch::Merge(&annotation)).await.expect("annotate");
    wait_published(&client, &ns, "hosting", "the IPv6 loopback host", |d| d.host.as_deref() == Some(host.as_str()))
        .await;
    let ip = cluster_ip(&client, &ns, "registry").await;
    push(true, &own_image("loopback6"), &format!("{ip}:5000/loopback6/app:1"), None);
    let image = format!("{host}/loopback6/app:1");

    // No kube-proxy mode serves a NodePort on [::1] (iptables' route_localnet is IPv4's alone).
    let proxy = node().proxy_mode().as_str();
    apply_in(&client, &ns, app_pod("without", &image)).await;
    let refused = wait_waiting(&client, &ns, "without", "connection refused").await;
    println!("kube-proxy {proxy}, no agent: {refused}");

    pulls_through_the_agents_file(&client, &ns, "loopback6", &agent_on(), &host, &ip, &image).await;
    uninstalled(&client, "loopback6", &ns, &host).await;
}
