//! The controller on the real node: its hardened pod, the KEP-1755 flow for a NodePort registry and minikube's
//! hostPort addon, and helm upgrade and uninstall.

use super::*;

async fn logs(client: &Client, ns: &str, pod: &str) -> String {
    Api::<Pod>::namespaced(client.clone(), ns).logs(pod, &LogParams::default()).await.unwrap_or_default()
}

/// The KEP flow against whatever is published now: push to `host` from `push_from_node`'s side, run a pod from
/// the runtime host, and list the registry from a pod through the cluster network.
/// Each flow pushes an image of its own (see `own_image`), named `kep/<name>:1`.
async fn kep_flow(client: &Client, ns: &str, name: &str, document: &LocalRegistryHostingV1, push_from_node: bool) {
    let host = document.host.clone().expect("a host for tools outside the cluster");
    let runtime = document.host_from_container_runtime.clone().unwrap_or_else(|| host.clone());
    let cluster = document.host_from_cluster_network.clone().expect("a host for pods");
    push(push_from_node, &own_image(name), &format!("{host}/kep/{name}:1"), None);

    // The node's runtime pulls the pushed image through the published runtime host.
    let image = format!("{runtime}/kep/{name}:1");
    let app = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "app"},
        "spec": {"containers": [{"name": "app", "image": image, "imagePullPolicy": "Always"}]}});
    apply_in(client, ns, app).await;
    wait_phase(client, ns, "app", &["Running"]).await;
    let pod = Api::<Pod>::namespaced(client.clone(), ns).get("app").await.expect("app pod");
    let statuses = pod.status.and_then(|s| s.container_statuses).unwrap_or_default();
    assert!(statuses.iter().all(|s| s.image == image && s.ready), "{statuses:?}");

    // An in-cluster builder (crane is go-containerregistry, as ko, kpack and Knative are) pushes to the published
    // cluster-network address and lists it, with no --insecure: go-containerregistry picks HTTP for it by itself.
    let crane = |pod: &str, args: Vec<String>| {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": pod},
            "spec": {"restartPolicy": "Never", "containers": [{"name": "crane", "image": images().name,
                "imagePullPolicy": "Never", "args": args}]}})
    };
    let copy = ["copy".into(), format!("{cluster}/kep/{name}:1"), format!("{cluster}/kep/{name}-built:1")];
    apply_in(client, ns, crane("build", copy.into())).await;
    let phase = wait_phase(client, ns, "build", &["Succeeded", "Failed"]).await;
    assert_eq!(phase, "Succeeded", "crane copy within {cluster}: {}", logs(client, ns, "build").await);
    apply_in(client, ns, crane("catalog", vec!["catalog".into(), cluster.clone()])).await;
    let phase = wait_phase(client, ns, "catalog", &["Succeeded", "Failed"]).await;
    let listed = logs(client, ns, "catalog").await;
    for repository in [format!("kep/{name}"), format!("kep/{name}-built")] {
        assert!(phase == "Succeeded" && listed.lines().any(|l| l == repository), "{cluster}/v2/: {phase}: {listed}");
    }
}

#[tokio::test]
async fn the_chart_runs_hardened_on_a_real_node() {
    let plane = plane();
    let client = plane.client().await.expect("admin client");
    images();
    // metricsAuth: the port speaks HTTPS with the certificate the release made, mounted into the read-only root.
    helm_install("lrp", "lrp-system", &["configMap.takeOver=false", "metricsAuth=true"]);

    // Running and Ready through its own probes (over HTTPS), on the real node, as the chart's hardening says.
    let pods = Api::<Pod>::namespaced(client.clone(), "lrp-system");
    let list = pods.list(&kube::api::ListParams::default().labels(CONTROLLER_LABELS)).await.expect("list pods");
    let pod = list.items.into_iter().next().expect("the controller pod");
    let spec = pod.spec.clone().expect("spec");
    assert_eq!(spec.node_name.as_deref(), Some(node().name()));
    let probe = spec.containers[0].readiness_probe.as_ref().and_then(|p| p.http_get.as_ref()).expect("an HTTP probe");
    assert_eq!(probe.scheme.as_deref(), Some("HTTPS"));
    let status = pod.status.clone().expect("status");
    let container = &status.container_statuses.expect("container statuses")[0];
    assert!(container.ready, "{container:?}");
    let container_id = container.container_id.as_deref().and_then(|id| id.strip_prefix("containerd://")).unwrap();
    let pid = container_process(container_id);
    assert_eq!(status_field(pid, "Uid").split_whitespace().collect::<Vec<_>>(), ["65532"; 4], "runs as 65532");
    assert_eq!(status_field(pid, "Seccomp"), "2", "a seccomp filter (RuntimeDefault) is in force");
    assert_eq!(status_field(pid, "NoNewPrivs"), "1");
    assert_eq!(status_field(pid, "CapEff"), "0000000000000000", "no capabilities");
    let mounts = std::fs::read_to_string(format!("/proc/{pid}/mountinfo")).expect("mountinfo");
    let root_mount = mounts.lines().find(|l| l.split_whitespace().nth(4) == Some("/")).expect("root mount");
    assert!(root_mount.split_whitespace().nth(5).is_some_and(|o| o.split(',').any(|o| o == "ro")), "{root_mount}");
    let environment = std::fs::read(format!("/proc/{pid}/environ")).expect("environ");
    assert!(!String::from_utf8_lossy(&environment).contains("KUBECONFIG"), "in-cluster config, no kubeconfig");
    helm_uninstall("lrp", "lrp-system");
}

#[tokio::test]
async fn a_nodeport_registry_in_an_allowed_namespace_is_pushed_pulled_and_probed_as_published() {
    let plane = plane();
    // Published with the default node address: tools on the node push to localhost; pods get the ClusterIP,
    // which go-containerregistry dials over plain HTTP.
    let (client, ns, document) = published_nodeport_registry("nodeport", "kep-nodeport").await;
    let cluster_host = cluster_host(&client, &ns, "registry", 5000).await;
    assert!(document.host.as_deref().is_some_and(|h| h.starts_with("localhost:3")), "{document:?}");
    kep_flow(&client, &ns, "nodeport", &document, true).await;

    // doctor --from-cluster probes hostFromClusterNetwork from a pod running the controller's own image.
    let kubeconfig = format!("--kubeconfig={}", plane.kubeconfig().display());
    // Only the ConfigMap is named: doctor decides with the running controller's settings (its selector, no
    // built-in addons, the allowed namespace), read from its pod, not with its own flag defaults, which would
    // call this ConfigMap stale.
    let settings =
        [format!("--configmap-namespace={ns}"), "--configmap-name=hosting".into(), format!("--probe-namespace={ns}")];
    let image = format!("--image=docker.io/library/local-registry-publisher:{}", env!("CARGO_PKG_VERSION"));
    let doctor = Command::new(support::binary::BINARY)
        .args(["doctor", &kubeconfig, "--from-cluster", &image])
        .args(&settings)
        .output()
        .expect("run doctor");
    let report = String::from_utf8_lossy(&doctor.stdout);
    // It exits 4 all the same: this machine is not the node, so localhost:<nodePort> does not answer here.
    assert_eq!(doctor.status.code(), Some(SOMETHING_WRONG), "{report}");
    let source = format!("settings: those of controller pod {ns}/nodeport-local-registry-publisher-");
    assert!(report.contains(&source), "{report}");
    assert!(report.contains("the ConfigMap is current"), "{report}");
    assert!(
        report.contains("== From a pod") && report.contains(&format!("{cluster_host}: a registry answers over HTTP")),
        "{report}"
    );
    assert!(report.contains(&format!("controller pod {ns}/nodeport-local-registry-publisher-")), "{report}");
    let pods = Api::<Pod>::namespaced(client.clone(), &ns);
    let left = pods.list(&kube::api::ListParams::default().labels("app.kubernetes.io/component=registry-doctor")).await;
    assert!(
        left.expect("list").items.iter().all(|p| p.metadata.deletion_timestamp.is_some()),
        "the probe pod is removed"
    );
    // A probe image the node cannot pull: doctor says the kubelet's reason, not just that the pod is Pending.
    let missing = Command::new(support::binary::BINARY)
        .args(["doctor", &kubeconfig, "--from-cluster", "--image=testbed.local/no-such-image:1"])
        .args(&settings)
        .output()
        .expect("run doctor");
    let report = String::from_utf8_lossy(&missing.stdout);
    assert_eq!(missing.status.code(), Some(SOMETHING_WRONG), "{report}");
    assert!(
        report.contains("the probe pod could not run: ErrImagePull: ")
            || report.contains("the probe pod could not run: ImagePullBackOff: "),
        "{report}"
    );
    helm_uninstall("nodeport", &ns);
    plane.delete_namespace(&client, &ns).await.expect("delete namespace");
}

#[tokio::test]
async fn minikubes_hostport_registry_is_recognised_without_a_label_and_pushed_and_pulled_as_published() {
    // This release watches kube-system only, so it sees minikube's registry and no other test's.
    let (client, ns) =
        release_in_own_namespace("hostport", "kep-hostport", |_| vec!["registry.watchNamespaces={kube-system}".into()])
            .await;

    // minikube's registry addon: Service kube-system/registry behind the registry-proxy DaemonSet's hostPort 5000;
    // the machine pushes to the node's address, the runtime pulls from 127.0.0.1.
    let proxy = json!({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "registry-proxy"},
        "spec": {"selector": {"matchLabels": {"registry-proxy": "true"}},
            "template": {"metadata": {"labels": {"registry-proxy": "true"}}, "spec": registry_pod_spec(80, Some(5000))}}});
    apply_in(&client, "kube-system", proxy).await;
    let service = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "registry"},
        "spec": {"selector": {"registry-proxy": "true"}, "ports": [{"name": "http", "port": 80, "targetPort": 80}]}});
    apply_in(&client, "kube-system", service).await;
    let cluster_host = cluster_host(&client, "kube-system", "registry", 80).await;
    let document = wait_published(&client, &ns, "hosting", "minikube's registry", |d| {
        d.host_from_cluster_network.as_deref() == Some(cluster_host.as_str())
    })
    .await;
    let node_ip = node().network().node_ip;
    assert_eq!(document.host.as_deref(), Some(format!("{node_ip}:5000").as_str()));
    assert_eq!(document.host_from_container_runtime.as_deref(), Some("127.0.0.1:5000"));
    kep_flow(&client, &ns, "hostport", &document, false).await;
    helm_uninstall("hostport", &ns);
    assert_eq!(published(&client, &ns, "hosting").await, None, "uninstall withdrew it");
}

#[tokio::test]
async fn tools_on_the_node_push_to_a_loopback_node_port_in_iptables_mode_only_and_through_a_host_port_in_every_mode() {
    let plane = plane();
    let (client, ns, document) = published_nodeport_registry("nodepush", "kep-nodepush").await;
    let host = document.host.clone().expect("a host");
    let node_port = host.strip_prefix("localhost:").unwrap_or_else(|| panic!("a loopback nodePort host: {host}"));
    let layout = own_image("nodepush");

    // kube-proxy serves the nodePort on the node's own address in every mode (retried until it is programmed)...
    push(true, &layout, &format!("{}:{node_port}/kep/nodepush:0", node().network().node_ip), None);
    // ...and on its loopback in iptables mode only, which doctor run on the node says, with what to do.
    let crane = plane.tools().join("crane");
    let on_loopback = format!("{host}/kep/nodepush:0");
    let pushed = node().command(&crane).arg("push").arg(&layout).arg(&on_loopback).arg("--insecure").output();
    let pushed = pushed.expect("run crane");
    let (code, report) = support::agent::doctor_on(plane, node(), &ns);
    match node().proxy_mode() {
        testbed::node::ProxyMode::Iptables => {
            assert!(pushed.status.success(), "{}", String::from_utf8_lossy(&pushed.stderr));
            assert!(report.contains(&format!("host {host}: a registry answers")), "{report}");
            assert_eq!(code, Some(ALL_WELL), "{report}");
        }
        testbed::node::ProxyMode::Nftables => {
            let refused = String::from_utf8_lossy(&pushed.stderr);
            assert!(!pushed.status.success() && refused.contains("connection refused"), "{refused}");
            assert!(report.contains(&format!("host {host}: ")), "{report}");
            assert!(report.contains("not in nftables mode") && report.contains("a hostPort"), "{report}");
            assert_eq!(code, Some(SOMETHING_WRONG), "{report}");
        }
    }
    // The controller tells it as well, from kube-proxy's configuration (the testbed keeps its node's where kubeadm
    // does), with a Warning on the registry's Service and a gauge per reader (no node agent here: the runtime too).
    let (tools, runtime) = match node().proxy_mode() {
        testbed::node::ProxyMode::Iptables => (0, 0),
        testbed::node::ProxyMode::Nftables => (1, 1),
    };
    loopback_metrics(&client, &ns, 1, tools, runtime).await;
    if node().proxy_mode() == testbed::node::ProxyMode::Nftables {
        let note = wait_event_note(&client, &ns, "registry", "LoopbackNodePortUnserved").await;
        for part in [
            "kube-proxy runs in nftables mode (ConfigMap kube-system/kube-proxy (config.conf))",
            &format!("reach host {host} only where"),
            &format!("no node's containerd can pull host {host}"),
            "nodeAgent.enabled=true",
            "a hostPort",
            "nodeAgent.relay",
        ] {
            assert!(note.contains(part), "{part:?} in {note}");
        }
        println!("kube-proxy nftables, LoopbackNodePortUnserved: {note}");
    }

    // A hostPort on the registry pod is published instead, and the CNI's portmap serves it on loopback in both
    // modes: the whole KEP flow runs from the node.
    // The README's command for it, as written (Troubleshooting), with this test's names and free port.
    let patch = readme_host_port_patch().replace("<ns>", &ns).replace("<registry>", "registry");
    let patch = patch.replace("\"value\": 5000", &format!("\"value\": {LOOPBACK_HOST_PORT}"));
    let path = format!("{}:{}", plane.tools().display(), std::env::var("PATH").unwrap_or_default());
    let mut ran = Command::new("bash");
    ran.arg("-c").arg(&patch).env("KUBECONFIG", plane.kubeconfig()).env("PATH", path);
    ok(ran.output().expect("run the README's kubectl patch"));
    let with_host_port = format!("localhost:{LOOPBACK_HOST_PORT}");
    let document =
        wait_published(&client, &ns, "hosting", "the hostPort", |d| d.host.as_deref() == Some(&with_host_port)).await;
    kep_flow(&client, &ns, "nodepush", &document, true).await;
    // doctor on the node, agent off, in either mode: nothing to fix, and the hostPort not told as needing a file.
    let (code, report) = support::agent::doctor_on(plane, node(), &ns);
    assert_eq!(code, Some(ALL_WELL), "{report}");
    assert!(!report.contains(&format!("{with_host_port} needs a node file")), "{report}");
    assert!(report.contains(&format!("{with_host_port} is the registry pod's hostPort")), "{report}");
    let off = report.lines().find(|l| l.contains("the node agent is off")).unwrap_or_default();
    assert!(!off.contains(&with_host_port), "the hostPort's address is not among what needs the agent: {off}");
    // Nothing is published at the nodePort on loopback now: kube-proxy's configuration is no longer watched.
    loopback_metrics(&client, &ns, 0, 0, 0).await;
    helm_uninstall("nodepush", &ns);
    plane.delete_namespace(&client, &ns).await.expect("delete namespace");
}

/// Waits until the controller in `ns` watches kube-proxy's configuration `watches` times and counts `tools` and
/// `runtime` published loopback addresses kube-proxy does not serve.
async fn loopback_metrics(client: &Client, ns: &str, watches: u32, tools: u32, runtime: u32) {
    let wanted = [
        format!("local_registry_publisher_watches{{controller=\"kube-proxy\"}} {watches}"),
        format!("local_registry_publisher_loopback_addresses_unserved{{reader=\"tools\"}} {tools}"),
        format!("local_registry_publisher_loopback_addresses_unserved{{reader=\"runtime\"}} {runtime}"),
    ];
    wait_pod_metrics(client, ns, "controller", |text| wanted.iter().all(|w| text.lines().any(|l| l == w))).await;
}

/// The README's command that gives the registry pod a hostPort (Troubleshooting), as written.
fn readme_host_port_patch() -> String {
    let readme = std::fs::read_to_string(root().join("README.md")).expect("README.md");
    let from = readme.find("`kubectl patch deployment -n <ns> <registry>").expect("the README's hostPort command");
    let command = &readme[from + 1..];
    command[..command.find("]'`").expect("its end") + 2].to_string()
}

/// The hostPort of the loopback test's registry: no other test's pod takes it on the node.
const LOOPBACK_HOST_PORT: i32 = 5077;

/// [`nodeport_registry`] in a fresh namespace (named from `prefix`) whose release `release` watches every namespace
/// and trusts this one alone (the chart's registry.allowedNamespaces), once it is published.
async fn published_nodeport_registry(release: &str, prefix: &str) -> (Client, String, LocalRegistryHostingV1) {
    let (client, ns) = release_in_own_namespace(release, prefix, |ns| {
        vec![
            format!("registry.selector={ISOLATED_LABEL}={ns}"),
            "registry.builtin=false".into(),
            format!("registry.allowedNamespaces={{{ns}}}"),
        ]
    })
    .await;
    nodeport_registry(&client, &ns).await;
    let cluster_host = cluster_host(&client, &ns, "registry", 5000).await;
    let document = wait_published(&client, &ns, "hosting", "the NodePort registry", |d| {
        d.host_from_cluster_network.as_deref() == Some(cluster_host.as_str())
    })
    .await;
    (client, ns, document)
}

/// A release named `release` in a fresh namespace of the same name, publishing an ExternalName registry there.
async fn isolated_release(release: &str) -> (Client, String) {
    isolated_release_with(release, &[]).await
}

/// The same, with more chart values.
async fn isolated_release_with(release: &str, extra: &[&str]) -> (Client, String) {
    let (client, ns) = release_in_own_namespace(release, release, |ns| {
        let mut values = isolated_values(ns);
        values.extend(extra.iter().map(|v| v.to_string()));
        values
    })
    .await;
    let service = json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "registry", "labels": {ISOLATED_LABEL: ns},
            "annotations": {"local-registry-publisher.io/host": "localhost:5001"}},
        "spec": {"type": "ExternalName", "externalName": "kind-registry", "ports": [{"name": "registry", "port": 5000}]}});
    apply_in(&client, &ns, service).await;
    wait_published(&client, &ns, "hosting", "the registry", |d| d.host.as_deref() == Some("localhost:5001")).await;
    (client, ns)
}

#[tokio::test]
async fn helm_upgrade_of_a_single_replica_never_runs_two_controllers_at_once() {
    let (client, ns) = isolated_release("upgrade").await;

    // Follow every pod of the Deployment through the upgrade: which exist and have not finished, after each
    // change the API server reports.
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
    // What the follower has seen: (listed, each pod not yet deleted: (not finished, Ready), every pod seen).
    type Seen = (bool, BTreeMap<String, (bool, bool)>, BTreeSet<String>);
    let (report, mut reports) = tokio::sync::watch::channel::<Seen>((false, BTreeMap::new(), BTreeSet::new()));
    let follower = tokio::spawn(async move {
        let mut live: BTreeMap<String, (bool, bool)> = BTreeMap::new();
        let (mut most, mut seen, mut listed) = (0, BTreeSet::new(), false);
        let mut events = watcher::watcher(pods, watcher::Config::default().labels(CONTROLLER_LABELS)).boxed();
        loop {
            let event = tokio::select! {
                _ = &mut stopped => break,
                event = events.try_next() => event,
            };
            match event {
                Ok(Some(watcher::Event::Apply(pod) | watcher::Event::InitApply(pod))) => {
                    let phase = pod.status.as_ref().and_then(|s| s.phase.clone()).unwrap_or_default();
                    let ready = pod
                        .status
                        .as_ref()
                        .and_then(|s| s.conditions.as_ref())
                        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
                    let name = pod.metadata.name.clone().unwrap_or_default();
                    seen.insert(name.clone());
                    live.insert(name, (!matches!(phase.as_str(), "Succeeded" | "Failed"), ready));
                }
                Ok(Some(watcher::Event::Delete(pod))) => {
                    live.remove(&pod.metadata.name.unwrap_or_default());
                }
                Ok(Some(watcher::Event::InitDone)) => listed = true,
                Ok(_) => {}
                Err(error) => panic!("watching the controller's pods: {error}"),
            }
            most = most.max(live.values().filter(|(alive, _)| *alive).count());
            let _ = report.send((listed, live.clone(), seen.clone()));
        }
        (most, seen)
    });
    // The watch lists the current pod before anything changes.
    let listed =
        tokio::time::timeout(SOON_ON_A_NODE, reports.wait_for(|(listed, _, _)| *listed)).await.is_ok_and(|r| r.is_ok());
    assert!(listed, "the pod watch listed the current pod");
    let original: BTreeSet<String> = reports.borrow().2.clone();
    let chart = root().join("charts/local-registry-publisher").display().to_string();
    let mut args = vec!["upgrade", "upgrade", &chart, "-n", &ns, "--reuse-values", "--wait", "--timeout", "180s"];
    args.extend(["--set", "logging.level=debug"]);
    let args: Vec<String> = args.into_iter().map(String::from).collect();
    let upgraded =
        tokio::task::spawn_blocking(move || tool("helm", &args.iter().map(String::as_str).collect::<Vec<_>>()));
    ok(upgraded.await.expect("helm upgrade"));
    // Until the watch itself has seen the old pod gone and exactly one new one live.
    let replaced = tokio::time::timeout(
        SOON_ON_A_NODE,
        reports.wait_for(|(_, live, _)| {
            live.len() == 1 && live.iter().all(|(pod, (alive, ready))| *alive && *ready && !original.contains(pod))
        }),
    )
    .await
    .is_ok_and(|r| r.is_ok());
    assert!(replaced, "the watch saw the pod replaced: {:?}", *reports.borrow());
    let _ = stop.send(());
    let (most, seen) = follower.await.expect("the pod follower");
    assert!(seen.len() >= 2, "the upgrade replaced the pod: {seen:?}");
    assert_eq!(most, 1, "at most one controller pod existed at any time during the upgrade ({seen:?})");
    wait_published(&client, &ns, "hosting", "the registry after the upgrade", |d| {
        d.host.as_deref() == Some("localhost:5001")
    })
    .await;
    helm_uninstall("upgrade", &ns);
}

#[tokio::test]
async fn helm_uninstall_stops_the_controller_before_withdrawing_so_no_configmap_is_left() {
    let (client, ns) = isolated_release("uninstall").await;

    helm_uninstall("uninstall", &ns);
    let pods = Api::<Pod>::namespaced(client.clone(), &ns);
    let left = pods.list(&kube::api::ListParams::default().labels(CONTROLLER_LABELS)).await.expect("list pods");
    let names: Vec<_> = left.items.iter().filter_map(|p| p.metadata.name.clone()).collect();
    assert!(names.is_empty(), "the controller still runs after uninstall: {names:?}");
    // Before the hook stopped the controller first, the running controller republished within milliseconds.
    for _ in 0..10 {
        assert_eq!(published(&client, &ns, "hosting").await, None, "nothing is left published after uninstall");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let configmaps = Api::<ConfigMap>::namespaced(client.clone(), &ns);
    assert!(configmaps.get_opt("hosting").await.expect("GET").is_none(), "no ConfigMap at all");
}

#[tokio::test]
async fn with_withdraw_on_uninstall_off_the_configmap_outlives_helm_uninstall() {
    let (client, ns) = isolated_release_with("keep", &["configMap.withdrawOnUninstall=false"]).await;
    helm_uninstall("keep", &ns);
    // Without the hook nothing scales the controller down first: its pod goes with the garbage collector.
    let pods = Api::<Pod>::namespaced(client.clone(), &ns);
    let gone = wait_until(SOON_ON_A_NODE, || async {
        let left = pods.list(&kube::api::ListParams::default().labels(CONTROLLER_LABELS)).await.ok()?;
        left.items.is_empty().then_some(())
    })
    .await;
    assert!(gone.is_some(), "the controller is gone after uninstall");
    let hooks = Api::<k8s_openapi::api::batch::v1::Job>::namespaced(client.clone(), &ns);
    assert!(hooks.list(&Default::default()).await.expect("list Jobs").items.is_empty(), "no uninstall hook ran");
    let document = published(&client, &ns, "hosting").await;
    assert_eq!(document.and_then(|d| d.host), Some("localhost:5001".into()), "the ConfigMap is kept as asked");
}
