//! On a real node (containerd, runc, kubelet, kube-proxy, CoreDNS; see testbed's `node`), nothing simulated:
//! - the chart's pod runs the image `make image` builds, hardened as the chart says, checked on its process;
//! - the whole KEP-1755 flow: a registry runs as a pod, an image is pushed to the published `host`, a pod whose
//!   image names the published runtime host runs, and a pod reaches `hostFromClusterNetwork`; for a NodePort
//!   registry and for minikube's hostPort registry addon;
//! - `helm upgrade` never runs two controllers at once, and `helm uninstall` leaves no ConfigMap behind;
//! - the node agent makes `hostFromClusterNetwork` pullable by the node's containerd (which fails without it),
//!   follows a moved registry, and leaves no file of its own and every foreign one as it was.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::time::Duration;
use support::root;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::Client;
use kube::api::{Api, ListParams, LogParams};
use kube::runtime::watcher;
use local_registry_publisher::agent::runtime::containerd::hosts::{CA_FILE, HEADER};
use local_registry_publisher::hosting::{DATA_KEY, LocalRegistryHostingV1};
use serde_json::json;
use support::agent::{ALL_WELL, SOMETHING_WRONG, registry_service};
use support::binary::status_field;
use support::{SOON_ON_A_NODE, apply_in, cluster_host, cluster_ip, ok, wait_until};
use testbed::image::Image;
use testbed::{ControlPlane, RealNode};

const CONTROLLER_LABELS: &str = "app.kubernetes.io/name=local-registry-publisher";

fn plane() -> &'static ControlPlane {
    ControlPlane::shared_with_real_node()
}

fn node() -> &'static RealNode {
    plane().real_node().expect("the control plane was started with a real node")
}

/// The controller image (`make image`) and crane's (registry and client), imported into the node once.
fn images() -> &'static Image {
    static CRANE: OnceLock<Image> = OnceLock::new();
    CRANE.get_or_init(|| {
        node().import(&support::controller_image()).expect("import the controller image");
        let crane = testbed::node::crane_image(plane().tools(), &plane().dir().join("images")).expect("crane image");
        node().import(&crane).expect("import the crane image");
        crane
    })
}

fn tool(name: &str, args: &[&str]) -> Output {
    support::tool(plane(), name, args)
}

fn helm_install(release: &str, ns: &str, values: &[&str]) {
    let values: Vec<String> = values.iter().map(|v| v.to_string()).collect();
    support::agent::helm(plane(), "install", release, ns, &values);
}

fn helm_uninstall(release: &str, ns: &str) {
    support::agent::helm_uninstall(plane(), release, ns);
}

/// `helm upgrade` of `release` in `ns` to the working tree's chart with `values`, waiting for it.
fn helm_upgrade(release: &str, ns: &str, values: &[String]) {
    support::agent::helm(plane(), "upgrade", release, ns, values);
}

/// The values of a release in `ns` that publishes its own ConfigMap for the registries labelled for `ns` only,
/// and `extra`.
fn isolated_release_values(ns: &str, extra: &[String]) -> Vec<String> {
    let mut values = own_configmap_values(ns);
    values.extend(isolated_values(ns));
    values.extend(extra.iter().cloned());
    values
}

/// The node agent on, writing into the real node's hosts directory, checking it every 2 s, and checking that the
/// node's containerd reads it.
fn agent_on() -> Vec<String> {
    agent_writing_into(&node().config_path_on_node())
}

/// The node agent writing into `dir`, a path as the node sees it.
fn agent_writing_into(dir: &str) -> Vec<String> {
    vec![
        "nodeAgent.enabled=true".into(),
        format!("nodeAgent.configPath={dir}"),
        format!("nodeAgent.containerdConfig={}", node().containerd_config_on_node()),
        "nodeAgent.resync=2s".into(),
    ]
}

/// The published document, read as readers read it.
async fn published(client: &Client, ns: &str, name: &str) -> Option<LocalRegistryHostingV1> {
    let configmap = Api::<ConfigMap>::namespaced(client.clone(), ns).get_opt(name).await.ok()??;
    let text = configmap.data?.remove(DATA_KEY)?;
    Some(LocalRegistryHostingV1::parse(&text).expect("readers parse what is published"))
}

async fn wait_published(
    client: &Client,
    ns: &str,
    name: &str,
    what: &str,
    check: impl Fn(&LocalRegistryHostingV1) -> bool,
) -> LocalRegistryHostingV1 {
    let found = wait_until(SOON_ON_A_NODE, || async { published(client, ns, name).await.filter(|d| check(d)) }).await;
    match found {
        Some(document) => document,
        None => panic!("{what} was not published; now: {:?}", published(client, ns, name).await),
    }
}

async fn pod_phase(client: &Client, ns: &str, name: &str) -> Option<String> {
    let pod = Api::<Pod>::namespaced(client.clone(), ns).get_opt(name).await.ok()??;
    pod.status?.phase
}

/// Waits until the pod reaches one of `phases`, failing with its status otherwise.
async fn wait_phase(client: &Client, ns: &str, name: &str, phases: &[&str]) -> String {
    let found = wait_until(SOON_ON_A_NODE, || async {
        pod_phase(client, ns, name).await.filter(|phase| phases.contains(&phase.as_str()))
    })
    .await;
    match found {
        Some(phase) => phase,
        None => {
            let pod = Api::<Pod>::namespaced(client.clone(), ns).get_opt(name).await.ok().flatten();
            panic!("pod {ns}/{name} never reached {phases:?}: {:?}", pod.and_then(|p| p.status))
        }
    }
}

async fn logs(client: &Client, ns: &str, pod: &str) -> String {
    Api::<Pod>::namespaced(client.clone(), ns).logs(pod, &LogParams::default()).await.unwrap_or_default()
}

/// Pushes an image to `registry` with crane, from the machine or from the node, until the path exists (kube-proxy
/// and portmap program their rules a moment after the registry is Ready). `docker_config` is a directory holding
/// the `config.json` crane takes credentials from.
fn push(from_node: bool, layout: &Path, reference: &str, docker_config: Option<&Path>) {
    support::agent::push(plane(), from_node.then(node), layout, reference, docker_config);
}

fn registry_pod_spec(port: i32, host_port: Option<i32>) -> serde_json::Value {
    support::agent::registry_pod_spec(&images().name, port, host_port)
}

/// A plain-HTTP registry Deployment `registry` (pods labelled `app=registry`) serving on port 5000.
fn registry_deployment() -> serde_json::Value {
    support::agent::registry_deployment(&images().name, None)
}

/// [`registry_deployment`] behind a NodePort Service `registry` (port 5000) labelled for `ns`'s isolated release.
async fn nodeport_registry(client: &Client, ns: &str) {
    apply_in(client, ns, registry_deployment()).await;
    let service = json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "registry", "labels": {ISOLATED_LABEL: ns}},
        "spec": {"type": "NodePort", "selector": {"app": "registry"}, "ports": [{"name": "registry", "port": 5000}]}});
    apply_in(client, ns, service).await;
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

/// The controller's process as the node runs it: found through its container's cgroup, in whichever hierarchy
/// (cgroup v1's or v2's) this machine has.
fn container_process(container_id: &str) -> u32 {
    let roots = testbed::node::cgroup_dirs(&node().network().cgroup);
    let output = Command::new("find").args(&roots).args(["-type", "d", "-name", container_id]).output().unwrap();
    let dir = String::from_utf8_lossy(&output.stdout).lines().next().map(PathBuf::from);
    let dir = dir.unwrap_or_else(|| panic!("no cgroup for container {container_id} under {roots:?}"));
    let procs = std::fs::read_to_string(dir.join("cgroup.procs")).expect("cgroup.procs");
    procs.lines().next().and_then(|pid| pid.parse().ok()).expect("a process in the container")
}

#[tokio::test]
async fn the_chart_runs_hardened_on_a_real_node() {
    let plane = plane();
    let client = plane.client().await.expect("admin client");
    images();
    helm_install("lrp", "lrp-system", &["configMap.takeOver=false"]);

    // Running and Ready through its own probes, on the real node, as the chart's hardening says.
    let pods = Api::<Pod>::namespaced(client.clone(), "lrp-system");
    let list = pods.list(&kube::api::ListParams::default().labels(CONTROLLER_LABELS)).await.expect("list pods");
    let pod = list.items.into_iter().next().expect("the controller pod");
    let spec = pod.spec.clone().expect("spec");
    assert_eq!(spec.node_name.as_deref(), Some(node().name()));
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
    // Every namespace is watched; the chart's registry.allowedNamespaces is what trusts this one.
    let (client, ns) = release_in_own_namespace("nodeport", "kep-nodeport", |ns| {
        vec![
            format!("registry.selector={ISOLATED_LABEL}={ns}"),
            "registry.builtin=false".into(),
            format!("registry.allowedNamespaces={{{ns}}}"),
        ]
    })
    .await;
    nodeport_registry(&client, &ns).await;

    // Published with the default node address: tools on the node push to localhost; pods get the ClusterIP,
    // which go-containerregistry dials over plain HTTP.
    let cluster_host = cluster_host(&client, &ns, "registry", 5000).await;
    let document = wait_published(&client, &ns, "hosting", "the NodePort registry", |d| {
        d.host_from_cluster_network.as_deref() == Some(cluster_host.as_str())
    })
    .await;
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

/// The label that marks an isolated test's registry, which no other release selects.
const ISOLATED_LABEL: &str = support::agent::REGISTRY_LABEL;

/// Values for a release that publishes its own ConfigMap, `hosting`, in `ns`.
fn own_configmap_values(ns: &str) -> Vec<String> {
    vec![format!("configMap.namespace={ns}"), "configMap.name=hosting".into()]
}

/// Values for a release that takes only the registries labelled for `ns`, which no other release selects.
fn isolated_values(ns: &str) -> Vec<String> {
    vec![
        format!("registry.watchNamespaces={{{ns}}}"),
        format!("registry.selector={ISOLATED_LABEL}={ns}"),
        "registry.builtin=false".into(),
    ]
}

/// A release named `release` in a fresh namespace (named from `prefix`) that publishes its own ConfigMap there,
/// `hosting`, so tests run side by side with the release that publishes kube-public's; `values(ns)` adds values.
async fn release_in_own_namespace(
    release: &str,
    prefix: &str,
    values: impl FnOnce(&str) -> Vec<String>,
) -> (Client, String) {
    let plane = plane();
    let client = plane.client().await.expect("admin client");
    images();
    let ns = plane.namespace(&client, prefix).await.expect("namespace");
    let mut all = own_configmap_values(&ns);
    all.extend(values(&ns));
    helm_install(release, &ns, &all.iter().map(String::as_str).collect::<Vec<_>>());
    (client, ns)
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

/// The pull Secret in `ns`, once it holds `password`; crane reads it as `<dir>/config.json`.
async fn wait_pull_secret(client: &Client, ns: &str, password: &str, dir: &Path) -> serde_json::Value {
    let secrets = Api::<k8s_openapi::api::core::v1::Secret>::namespaced(client.clone(), ns);
    let found = wait_until(SOON_ON_A_NODE, || async {
        let secret = secrets.get_opt("local-registry-pull").await.ok()??;
        let config = secret.data?.remove(".dockerconfigjson")?;
        let parsed: serde_json::Value = serde_json::from_slice(&config.0).ok()?;
        let entries = parsed["auths"].as_object()?;
        entries.values().all(|e| e["password"] == password).then_some((config.0, parsed))
    })
    .await;
    let (bytes, parsed) = found.unwrap_or_else(|| panic!("no pull Secret holding the expected token in {ns}"));
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("config.json"), bytes).unwrap();
    parsed
}

/// Why the pod's container is waiting (reason: message), if it is.
async fn waiting(client: &Client, ns: &str, name: &str) -> Option<String> {
    let pod = Api::<Pod>::namespaced(client.clone(), ns).get_opt(name).await.ok()??;
    let statuses = pod.status?.container_statuses?;
    let waiting = statuses.first()?.state.as_ref()?.waiting.clone()?;
    Some(format!("{}: {}", waiting.reason.unwrap_or_default(), waiting.message.unwrap_or_default()))
}

/// Waits until the pod's container is waiting for a reason that contains `needle` (a pull the runtime refused),
/// and returns it; fails with what it waits for otherwise.
async fn wait_waiting(client: &Client, ns: &str, pod: &str, needle: &str) -> String {
    let found =
        wait_until(SOON_ON_A_NODE, || async { waiting(client, ns, pod).await.filter(|w| w.contains(needle)) }).await;
    match found {
        Some(reason) => reason,
        None => panic!("pod {ns}/{pod} never waited with {needle:?}: {:?}", waiting(client, ns, pod).await),
    }
}

/// An image of a test's own (the pause program with a label of its own): the kubelet reports a container's image by
/// any name its digest has, so tests that run side by side and pushed one image would read each other's names.
fn own_image(name: &str) -> PathBuf {
    support::agent::own_image(plane(), name)
}

fn app_pod(name: &str, image: &str) -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"containers": [{"name": "app", "image": image, "imagePullPolicy": "Always"}]}})
}

/// A registry that accepts only the token in Secret `registry-credentials` (`first-token`), behind a NodePort
/// Service whose annotation names that Secret; a release `release` with pull Secrets on, and a namespace labelled
/// for them (`app`), whose distributed Secret the image `<host>/auth/pause:1` was pushed with. One at a time: every
/// release with pull Secrets on writes its Secret into every labelled namespace, under the same name.
struct AuthRegistry {
    _alone: tokio::sync::MutexGuard<'static, ()>,
    release: &'static str,
    client: Client,
    ns: String,
    app: String,
    host: String,
    runtime: String,
    cluster_host: String,
    /// A directory holding the first token's `config.json`, for crane.
    first: PathBuf,
    layout: PathBuf,
}

impl AuthRegistry {
    async fn start(release: &'static str) -> Self {
        static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
        let alone = ONE_AT_A_TIME.lock().await;
        let plane = plane();
        let client = plane.client().await.expect("admin client");
        images();
        let ns = plane.namespace(&client, release).await.expect("namespace");
        let app = plane.namespace(&client, &format!("{release}-app")).await.expect("namespace");
        ok(tool("kubectl", &["label", "namespace", &app, "local-registry-publisher.io/pull-secret-wanted=true"]));
        apply_in(&client, &ns, Self::source("first-token")).await;
        let registry = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "registry"},
            "spec": {"selector": {"matchLabels": {"app": "registry"}},
                "template": {"metadata": {"labels": {"app": "registry"}}, "spec": {"containers": [{
                    "name": "registry", "image": images().name, "imagePullPolicy": "Never",
                    "command": ["/authregistry", "--address", ":5000"],
                    "env": [
                        {"name": "REGISTRY_USERNAME", "value": "oauth2accesstoken"},
                        {"name": "REGISTRY_PASSWORD",
                            "valueFrom": {"secretKeyRef": {"name": "registry-credentials", "key": "token"}}}],
                    "ports": [{"name": "registry", "containerPort": 5000}],
                    "readinessProbe": {"httpGet": {"path": "/healthz", "port": 5000}, "periodSeconds": 1}}]}}}});
        apply_in(&client, &ns, registry).await;
        apply_in(&client, &ns, Self::service(&ns, true)).await;
        let pull_secrets = ["pullSecrets.enabled=true".into(), "pullSecrets.serviceAccounts={default}".into()];
        let values = isolated_release_values(&ns, &pull_secrets);
        helm_install(release, &ns, &values.iter().map(String::as_str).collect::<Vec<_>>());
        let cluster_host = cluster_host(&client, &ns, "registry", 5000).await;
        let document = wait_published(&client, &ns, "hosting", "the registry", |d| {
            d.host_from_cluster_network.as_deref() == Some(cluster_host.as_str())
        })
        .await;
        let host = document.host.clone().expect("a host");
        let runtime = document.host_from_container_runtime.clone().unwrap_or_else(|| host.clone());
        let first = plane.dir().join(format!("{ns}-first"));
        wait_pull_secret(&client, &app, "first-token", &first).await;
        let layout = own_image(&format!("pull-{release}"));
        push(true, &layout, &format!("{host}/auth/pause:1"), Some(&first));
        Self { _alone: alone, release, client, ns, app, host, runtime, cluster_host, first, layout }
    }

    fn source(token: &str) -> serde_json::Value {
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "registry-credentials"},
            "stringData": {"token": token}})
    }

    fn service(ns: &str, annotated: bool) -> serde_json::Value {
        let annotations = if annotated {
            json!({"local-registry-publisher.io/pull-secret": "registry-credentials"})
        } else {
            json!({})
        };
        json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "registry", "labels": {ISOLATED_LABEL: ns}, "annotations": annotations},
            "spec": {"type": "NodePort", "selector": {"app": "registry"}, "ports": [{"name": "registry", "port": 5000}]}})
    }

    fn accounts(&self) -> Api<k8s_openapi::api::core::v1::ServiceAccount> {
        Api::namespaced(self.client.clone(), &self.app)
    }

    /// Whether the Secret is in `app` and its default ServiceAccount names it, once that is so.
    async fn distributed(&self, wanted: bool) -> bool {
        let secrets = Api::<k8s_openapi::api::core::v1::Secret>::namespaced(self.client.clone(), &self.app);
        let found = wait_until(SOON_ON_A_NODE, || async {
            let there = secrets.get_opt("local-registry-pull").await.ok()?.is_some();
            let account = self.accounts().get("default").await.ok()?;
            let listed = account.image_pull_secrets.unwrap_or_default().iter().any(|r| r.name == "local-registry-pull");
            (there == wanted && listed == wanted).then_some(())
        });
        found.await.is_some()
    }

    async fn end(self) {
        helm_uninstall(self.release, &self.ns);
        for ns in [&self.ns, &self.app] {
            plane().delete_namespace(&self.client, ns).await.expect("delete namespace");
        }
    }
}

#[tokio::test]
async fn the_distributed_pull_secret_lets_a_labelled_namespaces_pod_pull_from_a_token_registry_and_no_other() {
    let auth = AuthRegistry::start("pullauth").await;
    // An entry per published address (the image was pushed with it).
    let config = wait_pull_secret(&auth.client, &auth.app, "first-token", &auth.first).await;
    let addresses: BTreeSet<&str> = config["auths"].as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(addresses, BTreeSet::from([auth.host.as_str(), auth.runtime.as_str(), auth.cluster_host.as_str()]));
    // A namespace nobody labelled has no Secret: the registry refuses the node.
    let plain = plane().namespace(&auth.client, "pullauth-plain").await.expect("namespace");
    let image = format!("{}/auth/pause:1", auth.runtime);
    apply_in(&auth.client, &plain, app_pod("app", &image)).await;
    wait_waiting(&auth.client, &plain, "app", "no basic auth credentials").await;
    // In the labelled one the default ServiceAccount names the Secret, so a plain pod pulls through the published
    // runtime address.
    assert!(auth.distributed(true).await, "the default ServiceAccount was not given the pull Secret");
    apply_in(&auth.client, &auth.app, app_pod("app", &image)).await;
    wait_phase(&auth.client, &auth.app, "app", &["Running"]).await;
    plane().delete_namespace(&auth.client, &plain).await.expect("delete namespace");
    auth.end().await;
}

#[tokio::test]
async fn a_rotated_registry_token_reaches_the_pull_secret_and_the_next_pull_works_with_it_alone() {
    let auth = AuthRegistry::start("pullrotate").await;
    // A new token reaches the Secret; the registry restarts with it (and empty).
    apply_in(&auth.client, &auth.ns, AuthRegistry::source("second-token")).await;
    let second = plane().dir().join(format!("{}-second", auth.ns));
    wait_pull_secret(&auth.client, &auth.app, "second-token", &second).await;
    ok(tool("kubectl", &["rollout", "restart", "deployment/registry", "-n", &auth.ns]));
    ok(tool("kubectl", &["rollout", "status", "deployment/registry", "-n", &auth.ns, "--timeout=90s"]));
    push(true, &auth.layout, &format!("{}/auth/pause:2", auth.host), Some(&second));
    assert!(auth.distributed(true).await, "the default ServiceAccount does not name the pull Secret");
    apply_in(&auth.client, &auth.app, app_pod("rotated", &format!("{}/auth/pause:2", auth.runtime))).await;
    wait_phase(&auth.client, &auth.app, "rotated", &["Running"]).await;
    auth.end().await;
}

#[tokio::test]
async fn the_pull_secret_and_its_service_account_entry_go_with_the_annotation_and_come_back_with_it() {
    let auth = AuthRegistry::start("pullwithdraw").await;
    assert!(auth.distributed(true).await, "the pull Secret was not distributed");
    apply_in(&auth.client, &auth.ns, AuthRegistry::service(&auth.ns, false)).await;
    assert!(auth.distributed(false).await, "the pull Secret or its ServiceAccount entry was left behind");
    apply_in(&auth.client, &auth.ns, AuthRegistry::service(&auth.ns, true)).await;
    wait_pull_secret(&auth.client, &auth.app, "first-token", &auth.first).await;
    assert!(auth.distributed(true).await, "the pull Secret was not distributed again");
    auth.end().await;
}

#[tokio::test]
async fn helm_uninstall_removes_the_distributed_pull_secret_and_its_service_account_entry() {
    let auth = AuthRegistry::start("pulluninstall").await;
    assert!(auth.distributed(true).await, "the pull Secret was not distributed");
    helm_uninstall(auth.release, &auth.ns);
    // Its hook removes them before it returns.
    let secrets = Api::<k8s_openapi::api::core::v1::Secret>::namespaced(auth.client.clone(), &auth.app);
    assert!(secrets.get_opt("local-registry-pull").await.expect("GET").is_none(), "uninstall removed the Secret");
    let account = auth.accounts().get("default").await.expect("GET account");
    let listed = account.image_pull_secrets.unwrap_or_default();
    assert!(listed.iter().all(|r| r.name != "local-registry-pull"), "uninstall removed our entry: {listed:?}");
    for ns in [&auth.ns, &auth.app] {
        plane().delete_namespace(&auth.client, ns).await.expect("delete namespace");
    }
}

/// The `hosts.toml` the node agent keeps for `address` on the real node, if any.
fn hosts_toml(address: &str) -> Option<String> {
    support::agent::hosts_toml(node(), address)
}

/// Waits until the node's file for `address` satisfies `check`; returns it and how long that took.
async fn wait_hosts_toml(
    address: &str,
    what: &str,
    check: impl Fn(Option<&str>) -> bool,
) -> (Option<String>, Duration) {
    let started = std::time::Instant::now();
    let found = wait_until(SOON_ON_A_NODE, || async {
        let text = hosts_toml(address);
        check(text.as_deref()).then_some(text)
    })
    .await;
    match found {
        Some(text) => (text, started.elapsed()),
        None => panic!("{what}: the node's {address}/hosts.toml is now {:?}", hosts_toml(address)),
    }
}

/// `doctor` on the release in `ns`: its exit status and its report.
fn doctor_status(ns: &str) -> (Option<i32>, String) {
    support::agent::doctor(plane(), ns)
}

/// `doctor` on the release in `ns`, run until it exits with `status` and its report satisfies `check`.
async fn wait_doctor(ns: &str, status: i32, check: impl Fn(&str) -> bool) -> String {
    support::agent::wait_doctor(plane(), ns, status, check).await
}

/// The /metrics of the release's pod of `component` on the real node in `ns`, fetched on the node (where pod IPs
/// are routed), once it satisfies `check`.
async fn wait_pod_metrics(client: &Client, ns: &str, component: &str, check: impl Fn(&str) -> bool) -> String {
    let pods = Api::<Pod>::namespaced(client.clone(), ns);
    let scrape = || async {
        let selector = format!("app.kubernetes.io/component={component}");
        let listed = pods.list(&ListParams::default().labels(&selector)).await.ok()?;
        // The DaemonSet runs on the simulated node too, whose pods have addresses nothing answers at.
        let on_node = |pod: &&Pod| pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node().name());
        let ip = listed.items.iter().find(on_node)?.status.as_ref()?.pod_ip.clone()?;
        let url = format!("http://{ip}:8080/metrics");
        let output = node().command("curl").args(["-sf", "--max-time", "5", &url]).output().ok()?;
        Some(String::from_utf8_lossy(&output.stdout).into_owned())
    };
    let found = wait_until(SOON_ON_A_NODE, || async { scrape().await.filter(|text| check(text)) }).await;
    match found {
        Some(text) => text,
        None => panic!("the {component}'s metrics never said what was expected:\n{:?}", scrape().await),
    }
}

/// The real node's agent's /metrics in `ns`, once they satisfy `check`.
async fn wait_agent_metrics(client: &Client, ns: &str, check: impl Fn(&str) -> bool) -> String {
    wait_pod_metrics(client, ns, "node-agent", check).await
}

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
    // By ClusterIP, containerd dials HTTPS, which the registry does not speak.
    apply_in(&pull.client, &pull.ns, app_pod("by-ip", &pull.image(&pull.by_ip()))).await;
    wait_waiting(&pull.client, &pull.ns, "by-ip", "server gave HTTP response to HTTPS client").await;
    // By name, it cannot even resolve it: cluster DNS is not the node's.
    apply_in(&pull.client, &pull.ns, app_pod("by-name", &pull.image(&pull.name()))).await;
    wait_waiting(&pull.client, &pull.ns, "by-name", &format!("lookup registry.{}.svc.cluster.local", pull.ns)).await;
    assert!(hosts_toml(&pull.name()).is_none() && hosts_toml(&pull.by_ip()).is_none());
    pull.end().await;
}

#[tokio::test]
async fn the_node_agent_maps_a_published_cluster_dns_name_to_the_clusterip_and_its_metrics_and_doctor_say_so() {
    let pull = NodePull::start("nodepull", true, true).await;
    let (text, took) = wait_hosts_toml(&pull.name(), "agent on", |t| t.is_some()).await;
    println!("node file written {took:?} after the name was published");
    assert!(text.unwrap_or_default().contains(&format!("[host.\"http://{}\"]", pull.by_ip())));
    pull.runs("by-name", &pull.name()).await;
    // The agent's own metrics say the same (its readiness probe, on the same port, let helm --wait return).
    let configured = "local_registry_publisher_node_addresses{state=\"configured\"} 1\n";
    let metrics = wait_agent_metrics(&pull.client, &pull.ns, |text| text.contains(configured)).await;
    assert!(metrics.contains("local_registry_publisher_node_hosts_files_total{operation=\"write\"}"), "{metrics}");
    assert!(metrics.contains("local_registry_publisher_node_last_sync_timestamp_seconds "), "{metrics}");
    let reads = "local_registry_publisher_node_containerd_config{state=\"reads\"} 1\n";
    assert!(metrics.contains(reads), "containerd's config names the agent's directory: {metrics}");
    // doctor tells per node what the agent there last said of itself; the kwok node runs no containerd at all.
    let real = format!("node {}: configured by nodepull-local-registry-publisher-node-agent-", node().name());
    let report = wait_doctor(&pull.ns, ALL_WELL, |report| report.contains(&real)).await;
    // The node's line names where the agent found the hosts directory: the config file and its config_path.
    let line = report.lines().find(|line| line.contains(&real)).unwrap_or_default();
    let read = format!(" sets config_path {}", node().config_path_on_node());
    assert!(line.contains(".toml") && line.contains(&read), "{line}");
    let needs = format!("{} needs a hosts.toml mapping it to http://{}", pull.name(), pull.by_ip());
    assert!(report.contains(&needs), "{report}");
    let simulated = "its runtime is \"kwok-";
    assert!(report.contains(simulated) && report.contains("does not read containerd's hosts.toml"), "{report}");

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
    wait_hosts_toml(&pull.name(), "agent on", |t| t.is_some()).await;
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
    let follows = |t: Option<&str>| t.is_some_and(|t| t.contains(&format!("\"http://{}:5000\"", pull.ip)));
    let (_, took) = wait_hosts_toml(&pull.name(), "after the move", follows).await;
    println!("node file followed the new ClusterIP {took:?} after the Service was recreated");
    pull.runs("moved", &pull.name()).await;
    // The node's directory emptied by hand is written again, with nothing restarted.
    let agents = agent_pod_uids(&pull.client, &pull.ns).await;
    std::fs::remove_dir_all(node().hosts_dir().join(pull.name())).unwrap();
    wait_hosts_toml(&pull.name(), "after emptying", follows).await;
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
    wait_hosts_toml(&address, "agent on", |t| t.is_some()).await;
    let theirs = format!("[host.\"http://{}\"]\n  capabilities = [\"pull\"]\n", pull.by_ip());
    std::fs::write(node().hosts_dir().join(&address).join("hosts.toml"), &theirs).unwrap();
    let report =
        wait_doctor(&pull.ns, SOMETHING_WRONG, |report| report.contains(&format!("{address} (foreign: "))).await;
    assert!(report.contains(&format!("node {}: not configured for {address}", node().name())), "{report}");
    let left_alone = "local_registry_publisher_node_addresses{state=\"foreign\"} 1\n";
    wait_agent_metrics(&pull.client, &pull.ns, |text| text.contains(left_alone)).await;
    assert_eq!(hosts_toml(&address).as_deref(), Some(theirs.as_str()));
    std::fs::remove_file(node().hosts_dir().join(&address).join("hosts.toml")).unwrap();
    wait_hosts_toml(&address, "after the foreign file went", |t| t.is_some_and(|t| t.starts_with("# Written by")))
        .await;
    pull.end().await;
}

#[tokio::test]
async fn the_node_agent_removes_the_file_of_a_withdrawn_address_and_writes_the_one_published_instead() {
    let pull = NodePull::start("nodewithdraw", true, true).await;
    wait_hosts_toml(&pull.name(), "agent on", |t| t.is_some()).await;
    // Published by its ClusterIP (the annotation removed), the address gets a file of its own and the name's goes.
    pull.publish(false).await;
    let (text, _) = wait_hosts_toml(&pull.by_ip(), "by ClusterIP", |t| t.is_some()).await;
    assert!(text.unwrap_or_default().contains(&format!("[host.\"http://{}\"]", pull.by_ip())));
    pull.runs("by-ip", &pull.by_ip()).await;
    wait_hosts_toml(&pull.name(), "the name withdrawn", |t| t.is_none()).await;
    assert!(!node().hosts_dir().join(pull.name()).exists(), "the name's directory was left");
    pull.end().await;
}

#[tokio::test]
async fn the_node_agent_turned_off_or_uninstalled_leaves_nothing_of_its_own_and_every_foreign_file_as_it_was() {
    // Someone else's file for another registry, there before the agent.
    let foreign_name = format!("mirror-{}.example:5000", std::process::id());
    let foreign_dir = node().hosts_dir().join(&foreign_name);
    std::fs::create_dir_all(&foreign_dir).unwrap();
    let foreign = format!("server = \"https://{foreign_name}\"\n[host.\"http://127.0.0.1:1\"]\n");
    std::fs::write(foreign_dir.join("hosts.toml"), &foreign).unwrap();
    let pull = NodePull::start("nodeoff", false, true).await;
    let address = pull.by_ip();
    wait_hosts_toml(&address, "agent on", |t| t.is_some()).await;
    pull.upgrade(&["nodeAgent.enabled=false".into()]);
    wait_hosts_toml(&address, "agent off", |t| t.is_none()).await;
    assert!(!node().hosts_dir().join(&address).exists());
    pull.upgrade(&agent_on());
    wait_hosts_toml(&address, "agent on again", |t| t.is_some()).await;
    helm_uninstall(pull.release, &pull.ns);
    wait_hosts_toml(&address, "after uninstall", |t| t.is_none()).await;
    assert!(!node().hosts_dir().join(&address).exists());
    assert_eq!(std::fs::read_to_string(foreign_dir.join("hosts.toml")).unwrap(), foreign);
    std::fs::remove_dir_all(&foreign_dir).unwrap();
    plane().delete_namespace(&pull.client, &pull.ns).await.expect("delete namespace");
}

/// The note of the newest Event with `reason` about the object named `regarding` in `ns`, once there is one.
async fn wait_event_note(client: &Client, ns: &str, regarding: &str, reason: &str) -> String {
    let events = Api::<k8s_openapi::api::events::v1::Event>::namespaced(client.clone(), ns);
    let named = |e: &k8s_openapi::api::events::v1::Event| e.regarding.as_ref().and_then(|r| r.name.clone());
    wait_until(SOON_ON_A_NODE, || async {
        let listed = events.list(&Default::default()).await.ok()?;
        let told = listed.items.into_iter().filter(|e| e.reason.as_deref() == Some(reason));
        let told = told.filter(|e| named(e).as_deref() == Some(regarding));
        told.max_by_key(|e| e.event_time.as_ref().map(|t| t.0)).and_then(|e| e.note)
    })
    .await
    .unwrap_or_else(|| panic!("no {reason} Event on {regarding} in {ns}"))
}

/// A plain-HTTP registry in `ns` behind a ClusterIP Service labelled for the release of `ns`, annotated so.
async fn clusterip_registry(client: &Client, ns: &str, annotations: serde_json::Value) {
    apply_in(client, ns, registry_deployment()).await;
    apply_in(client, ns, registry_service(ns, annotations)).await;
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

    // Without the agent the node's containerd dials its own loopback, where nothing listens.
    apply_in(&client, &ns, app_pod("without", &image)).await;
    wait_waiting(&client, &ns, "without", ":5001: connect: connection refused").await;
    assert!(hosts_toml(address).is_none());

    // With it, and the address allowed by the admin (the chart's kind distribution allows its own), the node's
    // mirror entry for localhost:5001 sends the pull to the registry's ClusterIP.
    let mut allowed = agent_on();
    allowed.push(format!("nodeAgent.allowedAddresses={{{address}}}"));
    helm_upgrade("kindhost", &ns, &isolated_release_values(&ns, &allowed));
    let (text, _) = wait_hosts_toml(address, "agent on", |t| t.is_some()).await;
    assert!(text.unwrap_or_default().contains(&format!("[host.\"http://{ip}:5000\"]")));
    apply_in(&client, &ns, app_pod("with", &image)).await;
    wait_phase(&client, &ns, "with", &["Running"]).await;
    helm_uninstall("kindhost", &ns);
    wait_hosts_toml(address, "after uninstall", |t| t.is_none()).await;
    plane.delete_namespace(&client, &ns).await.expect("delete namespace");
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
    let mismatch = "local_registry_publisher_node_containerd_config{state=\"elsewhere\"} 1\n";
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
    wait_hosts_toml(&address, "configPath fixed", |t| t.is_some()).await;
    assert!(!elsewhere.join(&address).exists(), "the file in the old configPath was left behind");
    apply_in(&client, &ns, app_pod("read", &image)).await;
    wait_phase(&client, &ns, "read", &["Running"]).await;
    let reads = "local_registry_publisher_node_containerd_config{state=\"reads\"} 1\n";
    wait_agent_metrics(&client, &ns, |text| text.contains(reads)).await;
    let waited = wait_configured(&ns, "60s");
    assert!(waited.status.success(), "kubectl wait: {}", String::from_utf8_lossy(&waited.stderr));
    helm_uninstall("configpath", &ns);
    wait_hosts_toml(&address, "after uninstall", |t| t.is_none()).await;
    std::fs::remove_dir_all(&elsewhere).unwrap();
    plane.delete_namespace(&client, &ns).await.expect("delete namespace");
}

/// A registry serving TLS with a private CA (its certificate names its ClusterIP and its cluster DNS name), behind
/// a NodePort Service whose annotation names the CA bundle `configmap/registry-ca`, and a release `release` in a
/// fresh namespace (with the node agent on and the bundle allowed if `agent`) publishing it by that name; an image
/// of its own pushed as `<address>/<release>/app:1`.
struct TlsRegistry {
    release: &'static str,
    client: Client,
    ns: String,
    ip: String,
    ca: String,
}

impl TlsRegistry {
    async fn start(release: &'static str, agent: bool) -> Self {
        let plane = plane();
        let client = plane.client().await.expect("admin client");
        images();
        let ns = plane.namespace(&client, release).await.expect("namespace");
        // The Service first: the certificate names its ClusterIP.
        apply_in(&client, &ns, Self::service(&ns, "configmap/registry-ca")).await;
        let ip = cluster_ip(&client, &ns, "registry").await;
        let name = format!("registry.{ns}.svc.cluster.local");
        let tls = testbed::private_tls(&[&name, &ip, "localhost", "127.0.0.1"]).expect("certificates");
        let bundle = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "registry-ca"},
            "data": {"ca.crt": tls.ca}});
        apply_in(&client, &ns, bundle).await;
        let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "registry-tls"},
            "type": "kubernetes.io/tls", "stringData": {"tls.crt": tls.certificate, "tls.key": tls.key}});
        apply_in(&client, &ns, secret).await;
        apply_in(&client, &ns, tls_registry_deployment("registry", "registry-tls")).await;
        let mut with_ca = agent_on();
        with_ca.push("nodeAgent.caBundles={registry-ca}".into());
        let values = isolated_release_values(&ns, if agent { &with_ca } else { &[] });
        helm_install(release, &ns, &values.iter().map(String::as_str).collect::<Vec<_>>());
        let this = Self { release, client, ns, ip, ca: tls.ca };
        let address = this.address();
        let document = wait_published(&this.client, &this.ns, "hosting", "the TLS registry", |d| {
            d.host_from_cluster_network.as_deref() == Some(address.as_str())
        })
        .await;
        let host = document.host.clone().expect("a host for tools outside");
        push(true, &own_image(release), &format!("{host}/{release}/app:1"), None);
        this
    }

    fn service(ns: &str, ca_bundle: &str) -> serde_json::Value {
        json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "registry", "labels": {ISOLATED_LABEL: ns},
                "annotations": {"local-registry-publisher.io/ca-bundle": ca_bundle}},
            "spec": {"type": "NodePort", "selector": {"app": "registry"},
                "ports": [{"name": "registry", "port": 5000, "appProtocol": "https"}]}})
    }

    /// The registry as pods reach it: its cluster DNS name, which the release publishes for the cluster network.
    fn address(&self) -> String {
        format!("registry.{}.svc.cluster.local:5000", self.ns)
    }

    fn image(&self, address: &str) -> String {
        format!("{address}/{}/app:1", self.release)
    }

    async fn end(self) {
        helm_uninstall(self.release, &self.ns);
        wait_hosts_toml(&self.address(), "after uninstall", |t| t.is_none()).await;
        assert!(!node().hosts_dir().join(self.address()).exists(), "a file of ours was left");
        plane().delete_namespace(&self.client, &self.ns).await.expect("delete namespace");
    }
}

#[tokio::test]
async fn without_the_node_agent_the_nodes_runtime_cannot_pull_from_a_registry_with_a_private_ca() {
    let tls = TlsRegistry::start("notls", false).await;
    // By name: cluster DNS is not the node's. By ClusterIP: the node's containerd does not know the CA.
    apply_in(&tls.client, &tls.ns, app_pod("by-name", &tls.image(&tls.address()))).await;
    let name = format!("registry.{}.svc.cluster.local", tls.ns);
    wait_waiting(&tls.client, &tls.ns, "by-name", &format!("lookup {name}")).await;
    apply_in(&tls.client, &tls.ns, app_pod("by-ip", &tls.image(&format!("{}:5000", tls.ip)))).await;
    wait_waiting(&tls.client, &tls.ns, "by-ip", "certificate signed by unknown authority").await;
    tls.end().await;
}

#[tokio::test]
async fn the_node_agent_gives_each_nodes_runtime_the_private_ca_of_a_registry_that_serves_tls() {
    let tls = TlsRegistry::start("nodetls", true).await;
    let address = tls.address();
    // Every node's containerd gets the CA beside a file that maps the name to the ClusterIP over HTTPS.
    let (text, took) = wait_hosts_toml(&address, "agent on", |t| t.is_some()).await;
    println!("node file with the CA written {took:?} after the registry was published");
    let text = text.unwrap_or_default();
    assert!(text.contains(&format!("[host.\"https://{}:5000\"]", tls.ip)), "{text}");
    assert!(text.contains(&format!("  ca = \"{CA_FILE}\"\n")), "{text}");
    let ca = std::fs::read_to_string(node().hosts_dir().join(&address).join(CA_FILE)).expect("the CA beside it");
    // Marked as this release's agent's: the header, then the node plan it follows, then the PEM.
    let owner = format!("# Following the node plan {}/nodetls-local-registry-publisher-node-plan.", tls.ns);
    assert_eq!(ca, format!("{HEADER}\n{owner}\n{}", tls.ca));
    apply_in(&tls.client, &tls.ns, app_pod("with", &tls.image(&address))).await;
    wait_phase(&tls.client, &tls.ns, "with", &["Running"]).await;
    tls.end().await;
}

#[tokio::test]
async fn the_node_agent_withdraws_the_files_of_a_tls_registry_whose_ca_bundle_cannot_be_read_and_says_why() {
    let tls = TlsRegistry::start("nodetlsgone", true).await;
    let address = tls.address();
    wait_hosts_toml(&address, "agent on", |t| t.is_some()).await;
    // A CA bundle the chart does not let the controller read: told on the registry's Service, and the node's files
    // for it go (no node would trust the registry).
    apply_in(&tls.client, &tls.ns, TlsRegistry::service(&tls.ns, "configmap/elsewhere-ca")).await;
    let told = wait_event_note(&tls.client, &tls.ns, "registry", "CaBundleUnusable").await;
    assert!(told.contains("configmap/elsewhere-ca in namespace") && told.contains("nodeAgent.caBundles"), "{told}");
    wait_hosts_toml(&address, "CA unusable", |t| t.is_none()).await;
    let report = wait_doctor(&tls.ns, SOMETHING_WRONG, |report| report.contains("its CA bundle cannot be used")).await;
    assert!(report.contains("configmap/elsewhere-ca does not exist"), "{report}");
    assert!(!node().hosts_dir().join(&address).exists(), "the CA file and the directory go with the file");
    // Readable again: the files are back.
    apply_in(&tls.client, &tls.ns, TlsRegistry::service(&tls.ns, "configmap/registry-ca")).await;
    wait_hosts_toml(&address, "CA readable again", |t| t.is_some()).await;
    tls.end().await;
}

/// `tool` run on the node, where the published `localhost:<nodePort>` answers.
fn node_tool(name: &str, args: &[&str]) -> Output {
    let plane = plane();
    support::against(plane, node().command(plane.tools().join(name)).args(args))
        .output()
        .unwrap_or_else(|e| panic!("run {name} on the node: {e}"))
}

/// The next patch version: what `make version` would move a release to.
fn next_patch(version: &str) -> String {
    let (rest, patch) = version.rsplit_once('.').expect("x.y.z");
    format!("{rest}.{}", patch.parse::<u32>().expect("a numeric patch") + 1)
}

/// A chart as `hack/dist.sh` packages it for a release, defaulting to the image at `repository`, re-versioned to
/// `version` (chart and app) when given.
fn release_chart(dir: &Path, repository: &str, version: Option<&str>) -> PathBuf {
    let crate_version = env!("CARGO_PKG_VERSION");
    let packaged = Command::new(root().join("hack/dist.sh"))
        .args(["chart"])
        .arg(dir)
        .arg(repository)
        .output()
        .expect("run hack/dist.sh");
    assert!(packaged.status.success(), "hack/dist.sh chart: {}", String::from_utf8_lossy(&packaged.stderr));
    let chart = dir.join(format!("local-registry-publisher-{crate_version}.tgz"));
    let Some(version) = version else { return chart };
    let unpacked = dir.join(format!("unpacked-{version}"));
    std::fs::create_dir_all(&unpacked).unwrap();
    let untar = Command::new("tar").arg("-xzf").arg(&chart).arg("-C").arg(&unpacked).status().unwrap();
    assert!(untar.success());
    let chart_dir = unpacked.join("local-registry-publisher").display().to_string();
    let out = dir.display().to_string();
    ok(tool("helm", &["package", &chart_dir, "--version", version, "--app-version", version, "--destination", &out]));
    dir.join(format!("local-registry-publisher-{version}.tgz"))
}

/// Names of the release's objects that remain, in every namespace and cluster-wide.
fn release_objects(release: &str) -> String {
    let selector = format!("app.kubernetes.io/instance={release}");
    let kinds = "deployments,replicasets,pods,jobs,serviceaccounts,roles,rolebindings,services,poddisruptionbudgets,\
        daemonsets,configmaps";
    ok(tool("kubectl", &["get", kinds, "-A", "-l", &selector, "-o", "name"]))
        + &ok(tool("kubectl", &["get", "clusterroles,clusterrolebindings", "-l", &selector, "-o", "name"]))
}

/// Waits until every controller pod of the namespace's release runs `image` (`<repository>:<tag>`), ready, and was
/// pulled from that repository: the image ID the kubelet reports names where its digest came from (its image name
/// may be any other name of the same digest, such as the one `make image` imported).
async fn wait_controller_image(client: &Client, ns: &str, image: &str) {
    let pods = Api::<Pod>::namespaced(client.clone(), ns);
    let selector = format!("{CONTROLLER_LABELS},app.kubernetes.io/component=controller");
    let (repository, _) = image.rsplit_once(':').expect("repository:tag");
    let pulled_from = format!("{repository}@sha256:");
    let running = wait_until(SOON_ON_A_NODE, || async {
        let list = pods.list(&kube::api::ListParams::default().labels(&selector)).await.ok()?;
        let all_run_it = list.items.iter().all(|pod| {
            let spec_image = pod.spec.as_ref().and_then(|s| s.containers.first()).and_then(|c| c.image.as_deref());
            let statuses = pod.status.as_ref().and_then(|s| s.container_statuses.as_deref()).unwrap_or_default();
            spec_image == Some(image)
                && !statuses.is_empty()
                && statuses.iter().all(|s| s.ready && s.image_id.starts_with(&pulled_from))
        });
        (!list.items.is_empty() && all_run_it).then_some(())
    })
    .await;
    let list = pods.list(&kube::api::ListParams::default().labels(&selector)).await.expect("list");
    assert!(
        running.is_some(),
        "no ready controller running {image}: {:?}",
        list.items.iter().map(|p| &p.status).collect::<Vec<_>>()
    );
}

/// The release path end to end: the image and the chart `hack/dist.sh` packages are pushed to the registry running
/// in the cluster, the chart is installed from there (`helm install oci://...`), its default image is the pushed one
/// and the node pulls it through the address the controller itself then publishes; an upgrade to the next version
/// comes from the same registry, and uninstalling leaves nothing.
#[tokio::test]
async fn the_released_chart_and_image_install_from_the_clusters_registry_upgrade_and_uninstall() {
    let plane = plane();
    let client = plane.client().await.expect("admin client");
    images();
    let ns = plane.namespace(&client, "release").await.expect("namespace");
    nodeport_registry(&client, &ns).await;
    let services = Api::<k8s_openapi::api::core::v1::Service>::namespaced(client.clone(), &ns);
    let node_port = services.get("registry").await.expect("service").spec.and_then(|s| s.ports?.first()?.node_port);
    let host = format!("localhost:{}", node_port.expect("a nodePort"));
    let repository = format!("{host}/local-registry-publisher");
    let version = env!("CARGO_PKG_VERSION");
    let next = next_patch(version);
    let listed = ok(node_tool(
        "ctr",
        &[
            "--address",
            &plane.dir().join("node/containerd.sock").display().to_string(),
            "-n",
            "k8s.io",
            "images",
            "ls",
            "-q",
        ],
    ));
    assert!(!listed.contains(&repository), "the node has {repository} before any pull: {listed}");

    // What a release publishes: the image under each version, the chart as OCI.
    let binary = root().join("target/release/local-registry-publisher");
    let image_dir = plane.dir().join("images");
    let layout = testbed::image::controller_copy(&binary, &image_dir, version, "released").expect("image").layout;
    push(true, &layout, &format!("{repository}:{version}"), None);
    push(true, &layout, &format!("{repository}:{next}"), None);
    let dir = plane.dir().join(format!("release-{ns}"));
    std::fs::create_dir_all(&dir).unwrap();
    let charts = format!("oci://{host}/charts");
    for chart in [release_chart(&dir, &repository, None), release_chart(&dir, &repository, Some(&next))] {
        ok(node_tool("helm", &["push", &chart.display().to_string(), &charts, "--plain-http"]));
    }

    // Installed from the registry with no image values: the packaged default is the pushed image.
    let reference = format!("{charts}/local-registry-publisher");
    let values = isolated_release_values(&ns, &[]);
    let install = |verb: &'static str, version: String| {
        let mut args: Vec<String> =
            [verb, "published", &reference, "--version", &version, "--plain-http", "-n", &ns].map(String::from).into();
        args.extend(["--wait".into(), "--timeout".into(), "180s".into()]);
        args.extend(values.iter().flat_map(|v| ["--set".to_string(), v.clone()]));
        args
    };
    let args = install("install", version.to_string());
    ok(node_tool("helm", &args.iter().map(String::as_str).collect::<Vec<_>>()));
    wait_controller_image(&client, &ns, &format!("{repository}:{version}")).await;
    // The controller publishes the address its own image was pulled through.
    let cluster_host = cluster_host(&client, &ns, "registry", 5000).await;
    let document = wait_published(&client, &ns, "hosting", "the registry", |d| {
        d.host_from_cluster_network.as_deref() == Some(cluster_host.as_str())
    })
    .await;
    assert_eq!(document.host.as_deref(), Some(host.as_str()), "{document:?}");

    let args = install("upgrade", next.clone());
    ok(node_tool("helm", &args.iter().map(String::as_str).collect::<Vec<_>>()));
    wait_controller_image(&client, &ns, &format!("{repository}:{next}")).await;
    let history = ok(tool("helm", &["history", "published", "-n", &ns]));
    assert!(history.contains(&format!("local-registry-publisher-{next}")), "{history}");
    wait_published(&client, &ns, "hosting", "the registry after the upgrade", |d| d.host.as_deref() == Some(&host))
        .await;

    helm_uninstall("published", &ns);
    let left =
        wait_until(SOON_ON_A_NODE, || async { release_objects("published").trim().is_empty().then_some(()) }).await;
    assert!(left.is_some(), "objects remain after uninstall: {}", release_objects("published"));
    assert_eq!(published(&client, &ns, "hosting").await, None, "uninstall withdrew the ConfigMap");
    plane.delete_namespace(&client, &ns).await.expect("delete namespace");
}

/// The release `name` in `release_ns` with the node agent on, publishing its own ConfigMap for the registries
/// labelled for `release_ns` in `release_ns` and in `tenant_ns`, which it allows; `extra` adds values.
fn tenant_release_values(release_ns: &str, tenant_ns: &str, extra: &[String]) -> Vec<String> {
    let mut values = own_configmap_values(release_ns);
    values.extend([
        format!("registry.watchNamespaces={{{release_ns},{tenant_ns}}}"),
        format!("registry.allowedNamespaces={{{tenant_ns}}}"),
        format!("registry.selector={ISOLATED_LABEL}={release_ns}"),
        "registry.builtin=false".into(),
    ]);
    values.extend(agent_on());
    values.extend(extra.iter().cloned());
    values
}

#[tokio::test]
async fn a_namespace_with_edit_cannot_redirect_what_every_node_pulls_from_a_public_registry_unless_the_admin_allows_it()
{
    let plane = plane();
    let client = plane.client().await.expect("admin client");
    images();
    let ns = plane.namespace(&client, "trust").await.expect("namespace");
    let tenant_ns = plane.namespace(&client, "trust-tenant").await.expect("namespace");
    let tenant = support::edit_only_client(&client, plane.kubeconfig(), &tenant_ns).await;

    // What a user holding only `edit` in an allowed namespace can write: a registry whose Service names
    // registry.k8s.io and quay.io as where pods and tools find it.
    apply_in(&tenant, &tenant_ns, registry_deployment()).await;
    let hijack = registry_service(
        &ns,
        json!({"local-registry-publisher.io/host": "quay.io",
        "local-registry-publisher.io/host-from-container-runtime": "registry.k8s.io"}),
    );
    apply_in(&tenant, &tenant_ns, hijack).await;
    helm_install(
        "trust",
        &ns,
        &tenant_release_values(&ns, &tenant_ns, &[]).iter().map(String::as_str).collect::<Vec<_>>(),
    );
    // Naming the cluster's registry is what the namespace was allowed: all of it is published.
    wait_published(&client, &ns, "hosting", "the tenant's registry", |d| {
        d.host.as_deref() == Some("quay.io") && d.host_from_container_runtime.as_deref() == Some("registry.k8s.io")
    })
    .await;
    let ip = cluster_ip(&client, &tenant_ns, "registry").await;
    let own = format!("{ip}:5000");

    // Its own ClusterIP gets the node's file; the public names get none, and the refusal is told on its Service,
    // in the controller's metrics and by doctor.
    wait_hosts_toml(&own, "the registry's own address", |t| t.is_some()).await;
    let told = wait_event_note(&client, &tenant_ns, "registry", "AddressNotAllowed").await;
    assert!(told.contains("quay.io does not name this Service alone"), "{told}");
    assert!(told.contains("registry.k8s.io does not name this Service alone"), "{told}");
    assert!(told.contains("nodeAgent.allowedAddresses"), "{told}");
    for public in ["quay.io", "registry.k8s.io"] {
        assert!(!node().hosts_dir().join(public).exists(), "a node file for {public} was written");
    }
    let refused = "local_registry_publisher_node_addresses_refused 2\n";
    wait_pod_metrics(&client, &ns, "controller", |text| text.contains(refused)).await;
    // It exits 4 all the same: the published host, quay.io, does not resolve on this machine.
    let report = wait_doctor(&ns, SOMETHING_WRONG, |r| {
        r.contains("registry.k8s.io is published but no node is configured to pull it")
    })
    .await;
    assert!(report.contains("quay.io is published but no node is configured to pull it"), "{report}");
    // A refusal is the admin's rule at work: the node section is not what is wrong.
    let summary = report.rsplit("== Summary").next().unwrap_or_default();
    assert!(!summary.contains("Node pulls"), "{report}");
    // Not a fault, but not done either: the summary names each such address on a line of its own.
    for public in ["quay.io", "registry.k8s.io"] {
        let line = format!("\n  not done: {public} gets no node file: it does not name this Service alone");
        assert!(summary.contains(&line), "{report}");
    }

    // Listed by the cluster admin, both are redirected to the tenant's registry on every node.
    let allowed = ["nodeAgent.allowedAddresses={registry.k8s.io,quay.io}".to_string()];
    helm_upgrade("trust", &ns, &tenant_release_values(&ns, &tenant_ns, &allowed));
    for public in ["quay.io", "registry.k8s.io"] {
        let (text, _) = wait_hosts_toml(public, "allowed by the admin", |t| t.is_some()).await;
        assert!(text.unwrap_or_default().contains(&format!("[host.\"http://{own}\"]")));
    }
    wait_pod_metrics(&client, &ns, "controller", |text| text.contains("node_addresses_refused 0\n")).await;
    helm_uninstall("trust", &ns);
    for address in ["quay.io", "registry.k8s.io", own.as_str()] {
        wait_hosts_toml(address, "after uninstall", |t| t.is_none()).await;
    }
    for ns in [&ns, &tenant_ns] {
        plane.delete_namespace(&client, ns).await.expect("delete namespace");
    }
}

/// An anonymous registry Deployment `name` (pods labelled `app=<name>`) serving HTTPS on port 5000 with the
/// `kubernetes.io/tls` Secret `secret`.
fn tls_registry_deployment(name: &str, secret: &str) -> serde_json::Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
        "spec": {"selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": {
                "containers": [{
                    "name": "registry", "image": images().name, "imagePullPolicy": "Never",
                    "command": ["/authregistry", "--address", ":5000", "--anonymous",
                        "--tls-cert", "/tls/tls.crt", "--tls-key", "/tls/tls.key"],
                    "ports": [{"name": "registry", "containerPort": 5000}],
                    "volumeMounts": [{"name": "tls", "mountPath": "/tls", "readOnly": true}],
                    "readinessProbe": {"httpGet": {"path": "/healthz", "port": 5000, "scheme": "HTTPS"},
                        "periodSeconds": 1}}],
                "volumes": [{"name": "tls", "secret": {"secretName": secret}}]}}}})
}

/// The values that make the Service `service` (port 5000) of `ns` the nodes' mirror of `upstream`, as the chart's
/// `index`th mirror.
fn mirror_values(index: usize, upstream: &str, ns: &str, service: &str) -> Vec<String> {
    let key = format!("nodeAgent.mirrors[{index}]");
    vec![
        format!("{key}.upstream={upstream}"),
        format!("{key}.service.namespace={ns}"),
        format!("{key}.service.name={service}"),
        format!("{key}.service.port=5000"),
    ]
}

/// The values that make the Service `cache` (port 5000) of `ns` the node's mirror of docker.io.
fn docker_hub_mirror(ns: &str) -> Vec<String> {
    mirror_values(0, "docker.io", ns, "cache")
}

#[tokio::test]
async fn an_admins_mirror_serves_a_public_registrys_pulls_on_the_node_live_with_the_upstream_as_fallback() {
    let plane = plane();
    let client = plane.client().await.expect("admin client");
    images();
    let ns = plane.namespace(&client, "mirror").await.expect("namespace");
    let tenant_ns = plane.namespace(&client, "mirror-tenant").await.expect("namespace");
    // The cache: a registry of the admin's, published by nobody, holding the image where Docker Hub would serve
    // it (`library/<name>`). Nothing here reaches Docker Hub, so the image exists only in the cache.
    apply_in(&client, &ns, registry_deployment()).await;
    let cache = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "cache"},
        "spec": {"selector": {"app": "registry"}, "ports": [{"name": "registry", "port": 5000}]}});
    apply_in(&client, &ns, cache).await;
    let cache_ip = cluster_ip(&client, &ns, "cache").await;
    push(true, &own_image("mirror"), &format!("{cache_ip}:5000/library/lrp-mirror:1"), None);
    let image = "docker.io/library/lrp-mirror:1";

    // A file someone else wrote for docker.io (minikube ships one) is there first.
    let docker_dir = node().hosts_dir().join("docker.io");
    std::fs::create_dir_all(&docker_dir).unwrap();
    let theirs = "server = \"https://registry-1.docker.io\"\n[host.\"http://127.0.0.1:1\"]\n";
    std::fs::write(docker_dir.join("hosts.toml"), theirs).unwrap();

    // A user holding only `edit` in an allowed namespace publishes a registry that names docker.io.
    let tenant = support::edit_only_client(&client, plane.kubeconfig(), &tenant_ns).await;
    apply_in(&tenant, &tenant_ns, registry_deployment()).await;
    let hijack = registry_service(&ns, json!({"local-registry-publisher.io/host-from-container-runtime": "docker.io"}));
    apply_in(&tenant, &tenant_ns, hijack).await;
    let values = |extra: &[String]| tenant_release_values(&ns, &tenant_ns, extra);
    // Besides it, a mirror of ghcr.io whose Service does not exist: told, and no file.
    let mut mirrors = docker_hub_mirror(&ns);
    mirrors.extend(mirror_values(1, "ghcr.io", &ns, "absent"));
    helm_install("mirror", &ns, &values(&mirrors).iter().map(String::as_str).collect::<Vec<_>>());
    let tenant_own = format!("{}:5000", cluster_ip(&client, &tenant_ns, "registry").await);
    wait_hosts_toml(&tenant_own, "the tenant registry's own address", |t| t.is_some()).await;

    // The foreign file is left byte for byte and reported; the namespace's docker.io is refused, not mirrored.
    let report = wait_doctor(&ns, SOMETHING_WRONG, |r| r.contains("not configured for docker.io (foreign: ")).await;
    assert!(report.contains(&format!("docker.io is mirrored: a hosts.toml sends its pulls to http://{cache_ip}:5000 first, then to https://registry-1.docker.io")), "{report}");
    assert!(report.contains("docker.io is published but no node is configured to pull it"), "{report}");
    wait_agent_metrics(&client, &ns, |t| t.contains("local_registry_publisher_node_addresses{state=\"foreign\"} 1\n"))
        .await;
    assert_eq!(hosts_toml("docker.io").as_deref(), Some(theirs));
    let told = wait_event_note(&client, &tenant_ns, "registry", "AddressNotAllowed").await;
    assert!(told.contains("docker.io does not name this Service alone"), "{told}");
    let plan = "mirror-local-registry-publisher-node-plan";
    let told = wait_event_note(&client, &ns, plan, "MirrorUnusable").await;
    assert!(told.contains(&format!("the mirror of ghcr.io (Service {ns}/absent port 5000): does not exist")), "{told}");
    wait_pod_metrics(&client, &ns, "controller", |t| t.contains("local_registry_publisher_node_mirrors_unusable 1\n"))
        .await;
    assert!(report.contains("the mirror of ghcr.io"), "{report}");
    assert!(!node().hosts_dir().join("ghcr.io").exists(), "no file for a mirror that cannot be used");
    // doctor names the namespaces whose writers decide every node's pulls: here one, the release's and the caches'.
    let deciding = format!(
        "only cluster admins should write there (docs/node-pulls.md#security): {ns} (the node plan {plan}, the node \
         agents' DaemonSet and ServiceAccount; the Service cache, the mirror of docker.io; the Service absent, the \
         mirror of ghcr.io)\n"
    );
    assert!(report.contains(&deciding), "{report}");

    // Once it is gone, the agent writes the mirror's file: the cache first, Docker Hub as the fallback.
    std::fs::remove_file(docker_dir.join("hosts.toml")).unwrap();
    let (text, _) = wait_hosts_toml("docker.io", "the mirror", |t| t.is_some_and(|t| t.starts_with(HEADER))).await;
    let text = text.unwrap_or_default();
    assert!(text.contains("server = \"https://registry-1.docker.io\"\n"), "{text}");
    assert!(text.contains(&format!("[host.\"http://{cache_ip}:5000\"]")), "{text}");
    assert!(text.contains("dial_timeout = \"2s\""), "{text}");
    // A pod naming Docker Hub runs from the cache, with nothing restarted.
    apply_in(&client, &ns, app_pod("through-mirror", image)).await;
    wait_phase(&client, &ns, "through-mirror", &["Running"]).await;
    // It exits 4 all the same: the mirror of ghcr.io has no Service, so the node section is wrong.
    let report = wait_doctor(&ns, SOMETHING_WRONG, |r| {
        r.contains(&format!("node {}: configured by mirror-local-registry-publisher-node-agent-", node().name()))
    })
    .await;
    assert!(report.contains(", mirroring docker.io"), "{report}");
    let state = node_state(&client, &ns).await.and_then(|s| s.status).expect("a NodePullState");
    let docker = state.addresses.iter().find(|a| a.address == "docker.io").expect("docker.io in the node's state");
    assert_eq!(docker.server.as_deref(), Some("https://registry-1.docker.io"));

    // The cache down (scaled to 0, its Service and so the node's file still there): containerd falls back to the
    // upstream. Nothing here reaches Docker Hub, so the pull fails; the kubelet shows containerd's first error (the
    // cache's), and containerd's log shows it went on to the upstream for the same image.
    let mirrored = hosts_toml("docker.io");
    ok(tool("kubectl", &["scale", "deployment/registry", "-n", &ns, "--replicas=0"]));
    let pods = Api::<Pod>::namespaced(client.clone(), &ns);
    let drained = wait_until(SOON_ON_A_NODE, || async {
        pods.list(&ListParams::default().labels("app=registry")).await.ok()?.items.is_empty().then_some(())
    })
    .await;
    assert!(drained.is_some(), "the cache's pods never went");
    assert_eq!(hosts_toml("docker.io"), mirrored, "the mirror's file changed with its cache down");
    apply_in(&client, &ns, app_pod("fallback", image)).await;
    let failed = wait_waiting(&client, &ns, "fallback", &format!("{cache_ip}:5000")).await;
    println!("with the cache down, containerd says: {failed}");
    let log = plane.log_of("containerd");
    let upstream_tried = wait_until(SOON_ON_A_NODE, || async {
        let text = std::fs::read_to_string(&log).ok()?;
        text.lines().any(|l| l.contains("host=registry-1.docker.io") && l.contains("lrp-mirror")).then_some(())
    })
    .await;
    assert!(upstream_tried.is_some(), "containerd never tried the upstream: {}", log.display());

    // The mirror taken out of the chart's values as the README says: its file goes, and the same pull fails as the
    // runtime says.
    let chart = root().join("charts/local-registry-publisher").display().to_string();
    let take_out = ["upgrade", "mirror", &chart, "-n", &ns, "--wait", "--timeout", "180s", "--reset-then-reuse-values"];
    ok(tool("helm", &[&take_out[..], &["--set", "nodeAgent.mirrors=null"]].concat()));
    wait_hosts_toml("docker.io", "mirror removed", |t| t.is_none()).await;
    apply_in(&client, &ns, app_pod("without-mirror", image)).await;
    let failed = wait_waiting(&client, &ns, "without-mirror", "registry-1.docker.io").await;
    println!("without the mirror, containerd says: {}", failed);
    helm_uninstall("mirror", &ns);
    wait_hosts_toml(&tenant_own, "after uninstall", |t| t.is_none()).await;
    assert!(!docker_dir.exists(), "nothing of ours is left for docker.io");
    for ns in [&ns, &tenant_ns] {
        plane.delete_namespace(&client, ns).await.expect("delete namespace");
    }
}

/// The other half of a mirror's fallback: with its cache down (its Service there, no pod behind it, as a cache scaled
/// to 0 leaves it) the node pulls from the upstream itself, and the pod runs. Nothing here reaches Docker Hub, so the
/// upstream is a registry in the cluster that serves HTTPS under a certificate the node's system roots trust, as a
/// public registry's is (testbed's node root CA), with no CA in the mirror's file; the mirror names it by ClusterIP.
#[tokio::test]
async fn with_its_cache_down_an_admins_mirror_falls_back_to_a_reachable_upstream_and_the_pod_runs() {
    let plane = plane();
    let client = plane.client().await.expect("admin client");
    images();
    let ns = plane.namespace(&client, "fallback").await.expect("namespace");
    let service = |name: &str| {
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
            "spec": {"selector": {"app": name}, "ports": [{"name": "registry", "port": 5000}]}})
    };
    apply_in(&client, &ns, service("cache")).await;
    let cache = format!("{}:5000", cluster_ip(&client, &ns, "cache").await);
    apply_in(&client, &ns, service("upstream")).await;
    let upstream_ip = cluster_ip(&client, &ns, "upstream").await;
    let tls = node().trusted_tls(&[&upstream_ip]).expect("a certificate the node trusts");
    let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "upstream-tls"},
        "type": "kubernetes.io/tls", "stringData": {"tls.crt": tls.certificate, "tls.key": tls.key}});
    apply_in(&client, &ns, secret).await;
    apply_in(&client, &ns, tls_registry_deployment("upstream", "upstream-tls")).await;
    let upstream = format!("{upstream_ip}:5000");
    let image = format!("{upstream}/library/lrp-upstream:1");
    push(true, &own_image("fallback"), &image, None);

    let mirror = mirror_values(0, &upstream, &ns, "cache");
    let values = isolated_release_values(&ns, &[agent_on(), mirror].concat());
    helm_install("fallback", &ns, &values.iter().map(String::as_str).collect::<Vec<_>>());
    let (text, _) = wait_hosts_toml(&upstream, "the mirror", |t| t.is_some_and(|t| t.starts_with(HEADER))).await;
    let text = text.unwrap_or_default();
    assert!(text.contains(&format!("server = \"https://{upstream}\"\n")), "{text}");
    assert!(text.contains(&format!("[host.\"http://{cache}\"]")), "{text}");
    assert!(!text.contains("ca = "), "the upstream is trusted through the node's roots alone: {text}");

    apply_in(&client, &ns, app_pod("fallback", &image)).await;
    wait_phase(&client, &ns, "fallback", &["Running"]).await;
    // Through the mirror's file: containerd tried the cache first for this image, then the upstream served it.
    let log = plane.log_of("containerd");
    let cache_tried = wait_until(SOON_ON_A_NODE, || async {
        let text = std::fs::read_to_string(&log).ok()?;
        let first = format!("http://{cache}/v2/library/lrp-upstream/");
        text.lines().any(|l| l.contains("trying next host") && l.contains(&first)).then_some(())
    })
    .await;
    let said = std::fs::read_to_string(&log).unwrap_or_default();
    let said: Vec<&str> = said.lines().filter(|l| l.contains("lrp-upstream")).collect();
    assert!(cache_tried.is_some(), "containerd never tried the cache first: {}", said.join("\n"));

    helm_uninstall("fallback", &ns);
    wait_hosts_toml(&upstream, "after uninstall", |t| t.is_none()).await;
    plane.delete_namespace(&client, &ns).await.expect("delete namespace");
}

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
    wait_hosts_toml(&address, "agent on", |t| t.is_some()).await;
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
    assert!(hosts_toml(&address).is_some(), "the node's file went with an invalid annotation");
    apply_in(&client, &ns, app_pod("through", &format!("{address}/keepplan/app:1"))).await;
    wait_phase(&client, &ns, "through", &["Running"]).await;
    let report = wait_doctor(&ns, SOMETHING_WRONG, |r| r.contains("the node plan written for it stays in force")).await;
    assert!(report.contains(&format!("{address} needs a hosts.toml")), "{report}");
    assert!(report.contains(&format!("node {}: configured by", node().name())), "{report}");

    // Fixed, the registry is followed again; uninstalled, nothing of ours is left.
    clusterip_registry(&client, &ns, json!({})).await;
    helm_uninstall("keepplan", &ns);
    wait_hosts_toml(&address, "after uninstall", |t| t.is_none()).await;
    plane.delete_namespace(&client, &ns).await.expect("delete namespace");
}

/// `kubectl wait --for=condition=Configured` on this node's state in `ns`, for at most `timeout`.
fn wait_configured(ns: &str, timeout: &str) -> Output {
    let object = format!("nodepullstate/{}", node().name());
    let timeout = format!("--timeout={timeout}");
    tool("kubectl", &["wait", "-n", ns, "--for=condition=Configured", &object, &timeout])
}

/// This node's state in `ns`, as doctor reads it.
async fn node_state(client: &Client, ns: &str) -> Option<local_registry_publisher::node::api::state::NodePullState> {
    let states = Api::<local_registry_publisher::node::api::state::NodePullState>::namespaced(client.clone(), ns);
    states.get_opt(node().name()).await.expect("read the NodePullState")
}

#[tokio::test]
async fn doctor_reads_each_nodes_lasting_state_which_only_the_agents_write_and_calls_a_frozen_agents_state_stale() {
    let plane = plane();
    let (client, ns, address) = agent_release("nodestate").await;
    let configured = format!("node {}: configured by nodestate-local-registry-publisher-node-agent-", node().name());
    let report = wait_doctor(&ns, ALL_WELL, |r| r.contains(&configured)).await;
    // The simulated node runs no containerd: told, and not what is wrong.
    assert!(report.contains("its runtime is \"kwok-") && report.contains("does not read containerd's hosts.toml"));
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

    // `edit` in the release's own namespace cannot write a state directly (create, patch or delete); that namespace
    // is still cluster-admin only, since `edit` can run a pod as the agents' ServiceAccount (docs/node-pulls.md).
    let editor = support::edit_only_client(&client, plane.kubeconfig(), &ns).await;
    let states = Api::<local_registry_publisher::node::api::state::NodePullState>::namespaced(editor, &ns);
    let forged = json!({"apiVersion": "local-registry-publisher.io/v1alpha1", "kind": "NodePullState",
        "metadata": {"name": node().name()}, "status": {"addresses": []}});
    let params = kube::api::PatchParams::apply("forger").force();
    support::forbidden(
        states.patch(node().name(), &params, &kube::api::Patch::Apply(&forged)).await,
        "patching a node's state",
    );
    support::forbidden(states.delete(node().name(), &Default::default()).await, "deleting a node's state");
    let invented = json!({"apiVersion": "local-registry-publisher.io/v1alpha1", "kind": "NodePullState",
        "metadata": {"name": "a-node-that-is-not-there"}});
    let invented: local_registry_publisher::node::api::state::NodePullState =
        serde_json::from_value(invented).expect("a NodePullState");
    support::forbidden(states.create(&Default::default(), &invented).await, "creating a node's state");

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
    wait_hosts_toml(&address, "after uninstall", |t| t.is_none()).await;
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
    values.push(format!("nodeAgent.containerdConfig=/nonexistent-{ns}/config.toml"));
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
