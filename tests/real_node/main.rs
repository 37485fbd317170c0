//! On a real node (containerd, runc, kubelet, kube-proxy, CoreDNS; see testbed's `node`), nothing simulated:
//! - the chart's pod runs the image `make image` builds, hardened as the chart says, checked on its process;
//! - the whole KEP-1755 flow: a registry runs as a pod, an image is pushed to the published `host`, a pod whose
//!   image names the published runtime host runs, and a pod reaches `hostFromClusterNetwork`; for a NodePort
//!   registry and for minikube's hostPort registry addon;
//! - `helm upgrade` never runs two controllers at once, and `helm uninstall` leaves no ConfigMap behind;
//! - the node agent makes `hostFromClusterNetwork` pullable by the node's containerd (which fails without it),
//!   follows a moved registry, and leaves no file of its own and every foreign one as it was;
//! - the chart's NetworkPolicies under a real enforcer (kube-router's firewall) leave the controller and the agent
//!   working and their metrics port open only to the pods the values name.

#[path = "../support/mod.rs"]
mod support;

mod doctor;
mod mirrors;
mod network_policy;
mod node_agent;
mod publisher;
mod pull_secrets;
mod release;
mod tenancy;
mod tls_registry;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::time::Duration;
use support::root;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Service};
use kube::Client;
use kube::api::{Api, ListParams, LogParams, Patch, PatchParams};
use kube::runtime::watcher;
use local_registry_publisher::agent::runtime::containerd::hosts::{CA_FILE, HEADER};
use local_registry_publisher::hosting::{DATA_KEY, LocalRegistryHostingV1};
use serde_json::json;
use support::agent::{ALL_WELL, SOMETHING_WRONG, registry_service};
use support::binary::status_field;
use support::{SOON_ON_A_NODE, apply_in, cluster_host, cluster_ip, ok, wait_until};
use testbed::{ControlPlane, RealNode};
use xtask::image::Image;

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
        format!("nodeAgent.runtime={}", node().runtime().as_str()),
        format!("nodeAgent.configPath={dir}"),
        format!("nodeAgent.runtimeConfig={}", node().runtime_config_on_node()),
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

/// The controller's process as the node runs it: found through its container's cgroup, in whichever hierarchy
/// (cgroup v1's or v2's) this machine has.
fn container_process(container_id: &str) -> u32 {
    let roots = testbed::node::cgroup_dirs(&node().network().cgroup);
    // containerd names the cgroup after the container, CRI-O (cgroupfs) `crio-<id>`.
    let crio = format!("crio-{container_id}");
    let names = ["(", "-name", container_id, "-o", "-name", &crio, ")"];
    let output = Command::new("find").args(&roots).args(["-type", "d"]).args(names).output().unwrap();
    let dir = String::from_utf8_lossy(&output.stdout).lines().next().map(PathBuf::from);
    let dir = dir.unwrap_or_else(|| panic!("no cgroup for container {container_id} under {roots:?}"));
    let procs = std::fs::read_to_string(dir.join("cgroup.procs")).expect("cgroup.procs");
    procs.lines().next().and_then(|pid| pid.parse().ok()).expect("a process in the container")
}

/// The label that marks an isolated test's registry, which no other release selects.
const ISOLATED_LABEL: &str = support::agent::REGISTRY_LABEL;

/// Values for a release that publishes its own ConfigMap, `hosting`, in `ns`.
fn own_configmap_values(ns: &str) -> Vec<String> {
    vec![format!("configMap.namespace={ns}"), "configMap.name=hosting".into()]
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

/// Values for a release that takes only the registries labelled for `ns`, which no other release selects.
fn isolated_values(ns: &str) -> Vec<String> {
    vec![
        format!("registry.watchNamespaces={{{ns}}}"),
        format!("registry.selector={ISOLATED_LABEL}={ns}"),
        "registry.builtin=false".into(),
    ]
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

/// The agent's file for `address` on the node, whichever runtime it runs (containerd's hosts.toml, CRI-O's drop-in).
fn node_file(address: &str) -> Option<String> {
    support::agent::node_file(node(), address)
}

/// Whether anything of a file for `address` is left on the node.
fn node_files_left(address: &str) -> bool {
    support::agent::node_files_left(node(), address)
}

/// How the node's file says an address's pulls go to the plain-HTTP registry at `endpoint` (`host:port`).
fn sends_to_http(endpoint: &str) -> String {
    support::agent::sends_to_http(node(), endpoint)
}

/// Waits until the node's file for `address` satisfies `check`; returns it and how long that took.
async fn wait_node_file(address: &str, what: &str, check: impl Fn(Option<&str>) -> bool) -> (Option<String>, Duration) {
    let started = std::time::Instant::now();
    let found = wait_until(SOON_ON_A_NODE, || async {
        let text = node_file(address);
        check(text.as_deref()).then_some(text)
    })
    .await;
    match found {
        Some(text) => (text, started.elapsed()),
        None => panic!(
            "{what}: the node's {} is now {:?}",
            support::agent::node_file_path(node(), address).display(),
            node_file(address)
        ),
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

async fn pod_ip_on_node(client: &Client, ns: &str, component: &str) -> Option<String> {
    support::agent::pod_ip_on(client, ns, component, node()).await
}

async fn wait_pod_metrics(client: &Client, ns: &str, component: &str, check: impl Fn(&str) -> bool) -> String {
    support::agent::wait_pod_metrics_on(client, ns, component, node(), check).await
}

/// The real node's agent's /metrics in `ns`, once they satisfy `check`.
async fn wait_agent_metrics(client: &Client, ns: &str, check: impl Fn(&str) -> bool) -> String {
    wait_pod_metrics(client, ns, "node-agent", check).await
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

/// This node's state in `ns`, as doctor reads it.
async fn node_state(client: &Client, ns: &str) -> Option<local_registry_publisher::node::api::state::NodePullState> {
    let states = Api::<local_registry_publisher::node::api::state::NodePullState>::namespaced(client.clone(), ns);
    states.get_opt(node().name()).await.expect("read the NodePullState")
}
