//! What the node agent's tests on their own control planes share (tests/two_nodes.rs, tests/containerd_config.rs):
//! a release with the agent on, a plain-HTTP registry on a given node, the node's files and doctor's report.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, ListParams};
use local_registry_publisher::agent::runtime::crio::dropins;
use serde_json::json;
use testbed::node::Runtime;
use testbed::{ControlPlane, RealNode};

use super::{SOON_ON_A_NODE, apply_in, ok, root, wait_until};

pub const REGISTRY_LABEL: &str = "testbed.local/isolated-registry";
pub const AGENT_PODS: &str = "app.kubernetes.io/component=node-agent";
/// How often the agents of [`values`] pass over their node with nothing changed.
pub const RESYNC_SECONDS: f64 = 2.0;

/// `helm install` or `helm upgrade` of the working tree's chart as `release` in `ns` with `values`, waiting for it
/// (an install creates the namespace when it is missing).
pub fn helm(plane: &ControlPlane, verb: &str, release: &str, ns: &str, values: &[String]) {
    let chart = root().join("charts/local-registry-publisher").display().to_string();
    let mut args = vec![verb, release, &chart, "-n", ns, "--wait", "--timeout", "180s"];
    if verb == "install" {
        args.push("--create-namespace");
    }
    args.extend(values.iter().flat_map(|v| ["--set", v.as_str()]));
    ok(super::tool(plane, "helm", &args));
}

pub fn helm_uninstall(plane: &ControlPlane, release: &str, ns: &str) {
    ok(super::tool(plane, "helm", &["uninstall", release, "-n", ns, "--wait", "--timeout", "180s"]));
}

/// A release publishing its own ConfigMap `hosting` in `ns` for the registry labelled for `ns`, with the node agent
/// on: the same hosts directory and containerd config path on every node, as a cluster's nodes have them.
pub fn values(ns: &str, node: &RealNode, extra: &[&str]) -> Vec<String> {
    let mut values = vec![
        format!("configMap.namespace={ns}"),
        "configMap.name=hosting".into(),
        format!("registry.watchNamespaces={{{ns}}}"),
        format!("registry.selector={REGISTRY_LABEL}={ns}"),
        "registry.builtin=false".into(),
        "nodeAgent.enabled=true".into(),
        format!("nodeAgent.configPath={}", node.config_path_on_node()),
        format!("nodeAgent.runtimeConfig={}", node.runtime_config_on_node()),
        format!("nodeAgent.resync={RESYNC_SECONDS}s"),
    ];
    values.extend(extra.iter().map(|v| v.to_string()));
    values
}

/// A registry pod (crane's `registry serve`, plain HTTP) serving on `port`, on `host_port` of its node too if given.
pub fn registry_pod_spec(image: &str, port: i32, host_port: Option<i32>) -> serde_json::Value {
    json!({
        "containers": [{"name": "registry", "image": image, "imagePullPolicy": "Never",
            "args": ["registry", "serve", "--address", format!(":{port}")],
            "ports": [{"name": "registry", "containerPort": port, "hostPort": host_port}],
            "readinessProbe": {"httpGet": {"path": "/v2/", "port": port}, "periodSeconds": 1}}]
    })
}

/// A Deployment `registry` of [`registry_pod_spec`] on port 5000 (pods labelled `app=registry`), on the node named
/// `node` if given.
pub fn registry_deployment(image: &str, node: Option<&str>) -> serde_json::Value {
    let mut spec = registry_pod_spec(image, 5000, None);
    if let Some(node) = node {
        spec["nodeSelector"] = json!({"kubernetes.io/hostname": node});
    }
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "registry"},
        "spec": {"selector": {"matchLabels": {"app": "registry"}},
            "template": {"metadata": {"labels": {"app": "registry"}}, "spec": spec}}})
}

/// The ClusterIP Service `registry` (port 5000) of [`registry_deployment`], labelled for `ns`'s release.
pub fn registry_service(ns: &str, annotations: serde_json::Value) -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "registry", "labels": {REGISTRY_LABEL: ns}, "annotations": annotations},
        "spec": {"selector": {"app": "registry"}, "ports": [{"name": "registry", "port": 5000}]}})
}

/// The crane image (crane, and authregistry beside it), written once per test binary: tests side by side would
/// otherwise rewrite the archive another is importing.
pub fn crane_image(plane: &ControlPlane) -> &'static xtask::image::Image {
    static CRANE: std::sync::OnceLock<xtask::image::Image> = std::sync::OnceLock::new();
    CRANE.get_or_init(|| testbed::node::crane_image(plane.tools(), &plane.dir().join("images")).expect("crane image"))
}

/// A plain-HTTP registry (crane's) on `node` behind a ClusterIP Service `registry` labelled for `ns`'s release.
pub async fn registry(plane: &ControlPlane, client: &Client, ns: &str, node: &RealNode) {
    let crane = crane_image(plane);
    node.import(crane).expect("import the crane image");
    apply_in(client, ns, registry_deployment(&crane.name, Some(node.name()))).await;
    apply_in(client, ns, registry_service(ns, json!({}))).await;
}

/// Where `node`'s agent keeps its file for `address`, whichever runtime the node runs: containerd's
/// `<address>/hosts.toml` in its hosts directory, CRI-O's drop-in in `registries.conf.d`.
pub fn node_file_path(node: &RealNode, address: &str) -> PathBuf {
    match node.runtime() {
        Runtime::Containerd => node.hosts_dir().join(address).join("hosts.toml"),
        Runtime::Crio => node.containers_dir().join(dropins::DROP_IN_DIR).join(dropins::drop_in_name(address)),
    }
}

/// The text of `node`'s file for `address` ([`node_file_path`]), if it is there.
pub fn node_file(node: &RealNode, address: &str) -> Option<String> {
    std::fs::read_to_string(node_file_path(node, address)).ok()
}

/// Whether anything of a file for `address` is left on `node`: containerd's directory for it (a CA beside the
/// file goes with it), CRI-O's drop-in.
pub fn node_files_left(node: &RealNode, address: &str) -> bool {
    match node.runtime() {
        Runtime::Containerd => node.hosts_dir().join(address).exists(),
        Runtime::Crio => node_file_path(node, address).exists(),
    }
}

/// Removes `node`'s file for `address` by hand, as a user might: containerd's whole directory for it, CRI-O's drop-in.
pub fn remove_node_files(node: &RealNode, address: &str) {
    let path = match node.runtime() {
        Runtime::Containerd => node.hosts_dir().join(address),
        Runtime::Crio => node_file_path(node, address),
    };
    let removed = if path.is_dir() { std::fs::remove_dir_all(&path) } else { std::fs::remove_file(&path) };
    removed.unwrap_or_else(|e| panic!("remove {}: {e}", path.display()));
}

/// How `node`'s file for an address says its pulls go to the plain-HTTP registry at `endpoint` (`host:port`):
/// containerd's host table, CRI-O's location marked insecure.
pub fn sends_to_http(node: &RealNode, endpoint: &str) -> String {
    match node.runtime() {
        Runtime::Containerd => format!("[host.\"http://{endpoint}\"]"),
        Runtime::Crio => format!("location = \"{endpoint}\"\ninsecure = true\n"),
    }
}

/// Someone else's file on `node` sending `address`'s pulls to `endpoint` (plain HTTP), where that runtime's users
/// write one: containerd's at the agent's own path, CRI-O's a drop-in of another name for the same prefix. Returns
/// its path and text.
pub fn write_foreign_file(node: &RealNode, address: &str, endpoint: &str) -> (PathBuf, String) {
    let (path, text) = match node.runtime() {
        Runtime::Containerd => (
            node_file_path(node, address),
            format!("server = \"https://{address}\"\n[host.\"http://{endpoint}\"]\n  capabilities = [\"pull\"]\n"),
        ),
        Runtime::Crio => (
            node.containers_dir().join(dropins::DROP_IN_DIR).join(format!("zz-theirs-{address}.conf")),
            format!("[[registry]]\nprefix = \"{address}\"\nlocation = \"{endpoint}\"\ninsecure = true\n"),
        ),
    };
    std::fs::create_dir_all(path.parent().expect("a directory")).expect("the foreign file's directory");
    std::fs::write(&path, &text).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    (path, text)
}

/// Removes a file [`write_foreign_file`] wrote, and containerd's directory for it.
pub fn remove_foreign_file(node: &RealNode, path: &Path) {
    std::fs::remove_file(path).unwrap_or_else(|e| panic!("remove {}: {e}", path.display()));
    if node.runtime() == Runtime::Containerd {
        let dir = path.parent().expect("a directory");
        std::fs::remove_dir(dir).unwrap_or_else(|e| panic!("remove {}: {e}", dir.display()));
    }
}

/// Waits until `node`'s file for `address` is there (`present`) or gone.
pub async fn wait_file(node: &RealNode, address: &str, present: bool, what: &str) {
    let done =
        wait_until(SOON_ON_A_NODE, || async { (node_file(node, address).is_some() == present).then_some(()) }).await;
    assert!(
        done.is_some(),
        "{what}: {}'s {} is still {:?}",
        node.name(),
        node_file_path(node, address).display(),
        node_file(node, address)
    );
}

/// doctor's exit status when all is well, and when a section is wrong (a reader rejects a value, a node is not
/// configured).
pub const ALL_WELL: i32 = 0;
pub const SOMETHING_WRONG: i32 = local_registry_publisher::cli::EXIT_READER_REJECTS as i32;

/// `doctor` on the release in `ns` (its own ConfigMap): its exit status and its report.
pub fn doctor(plane: &ControlPlane, ns: &str) -> (Option<i32>, String) {
    let output = super::doctor(plane, &[&format!("--configmap-namespace={ns}"), "--configmap-name=hosting"]);
    (output.status.code(), String::from_utf8_lossy(&output.stdout).into_owned())
}

/// `doctor` on the release in `ns` (its own ConfigMap `hosting`), run in `node`'s network as a developer on the node
/// runs it: its exit status and its report.
pub fn doctor_on(plane: &ControlPlane, node: &RealNode, ns: &str) -> (Option<i32>, String) {
    let output = node
        .command(super::binary::BINARY)
        .args(["doctor", &format!("--kubeconfig={}", plane.kubeconfig().display())])
        .args([format!("--configmap-namespace={ns}"), "--configmap-name=hosting".into()])
        .output()
        .expect("run doctor on the node");
    (output.status.code(), String::from_utf8_lossy(&output.stdout).into_owned())
}

/// `doctor` on the release in `ns`, run until its report satisfies `check` and it exits with `status`: a test
/// that reads a verdict asserts the exit status scripts act on too.
pub async fn wait_doctor(plane: &ControlPlane, ns: &str, status: i32, check: impl Fn(&str) -> bool) -> String {
    let found = wait_until(SOON_ON_A_NODE, || async {
        let (code, report) = doctor(plane, ns);
        (code == Some(status) && check(&report)).then_some(report)
    })
    .await;
    found.unwrap_or_else(|| {
        let (code, report) = doctor(plane, ns);
        panic!("doctor never said what was expected with exit status {status}; it exits {code:?} saying:\n{report}")
    })
}

/// A small image of this test's own (pause as its entrypoint), written as an OCI layout to push.
pub fn own_image(plane: &ControlPlane, name: &str) -> PathBuf {
    let dir = plane.dir().join("images");
    let spec = xtask::image::ImageSpec {
        name: format!("testbed.local/{name}:1"),
        files: vec![("/pause".into(), dir.join("pause.bin"))],
        entrypoint: vec!["/pause".into()],
        user: Some("65535:65535".into()),
        labels: [("testbed.local/image".to_string(), name.to_string())].into(),
        ..Default::default()
    };
    spec.write(&dir, name).expect("write the image").layout
}

/// Pushes `layout` to `reference` with crane, from `node`'s network (where ClusterIPs route) or the machine's,
/// retrying while the registry comes up.
pub fn push(
    plane: &ControlPlane,
    node: Option<&RealNode>,
    layout: &Path,
    reference: &str,
    docker_config: Option<&Path>,
) {
    let crane = plane.tools().join("crane");
    let mut last = String::new();
    for _ in 0..60 {
        let mut command = node.map_or_else(|| Command::new(&crane), |node| node.command(&crane));
        if let Some(dir) = docker_config {
            command.env("DOCKER_CONFIG", dir);
        }
        let output = command.arg("push").arg(layout).arg(reference).arg("--insecure").output().expect("run crane");
        if output.status.success() {
            return;
        }
        last = String::from_utf8_lossy(&output.stderr).into_owned();
        std::thread::sleep(Duration::from_millis(500));
    }
    panic!("pushing {reference} failed: {last}");
}

/// The address of the release's pod of `component` in `ns` on `node`, once it has one. A DaemonSet runs on the
/// simulated node too, whose pods have addresses nothing answers at.
pub async fn pod_ip_on(client: &Client, ns: &str, component: &str, node: &RealNode) -> Option<String> {
    let selector = format!("app.kubernetes.io/component={component}");
    let listed =
        Api::<Pod>::namespaced(client.clone(), ns).list(&ListParams::default().labels(&selector)).await.ok()?;
    let on_node = |pod: &&Pod| pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node.name());
    listed.items.iter().find(on_node)?.status.as_ref()?.pod_ip.clone()
}

/// The /metrics of the release's pod of `component` in `ns` on `node`, fetched on the node (where pod IPs are
/// routed); `None` while it does not answer.
pub async fn pod_metrics_on(client: &Client, ns: &str, component: &str, node: &RealNode) -> Option<String> {
    let ip = pod_ip_on(client, ns, component, node).await?;
    let url = format!("http://{ip}:8080/metrics");
    let output = node.command("curl").args(["-sf", "--max-time", "5", &url]).output().ok()?;
    output.status.success().then(|| String::from_utf8_lossy(&output.stdout).into_owned())
}

/// [`pod_metrics_on`] once they satisfy `check`, else a panic with the last scrape.
pub async fn wait_pod_metrics_on(
    client: &Client,
    ns: &str,
    component: &str,
    node: &RealNode,
    check: impl Fn(&str) -> bool,
) -> String {
    let scrape = || pod_metrics_on(client, ns, component, node);
    let found = wait_until(SOON_ON_A_NODE, || async { scrape().await.filter(|text| check(text)) }).await;
    match found {
        Some(text) => text,
        None => panic!("the {component}'s metrics never said what was expected:\n{:?}", scrape().await),
    }
}
