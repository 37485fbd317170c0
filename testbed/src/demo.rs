//! `testbed demo <controller>`: the controller publishing a sample registry on the local control plane, then
//! following the registry as it moves to another port. With a real node (where the machine allows one) the registry
//! really runs, an image is pushed to the published host and a pod runs from it: the KEP-1755 flow.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams};
use kube::core::DynamicObject;
use kube::discovery::ApiResource;

use crate::{ControlPlane, Error, wait_until};

const NAMESPACE: &str = "registry";

/// Where the node serves the registry: its Service's nodePort and, on a node whose kube-proxy serves no NodePort on
/// its loopback (nftables mode), a hostPort on the registry pod as well, which the CNI's portmap serves there and
/// which the controller publishes before a nodePort (README, rules).
#[derive(Clone, Copy)]
struct Ports {
    node_port: i32,
    host_port: Option<i32>,
}

impl Ports {
    fn first(loopback_node_ports: bool) -> Self {
        Self { node_port: 30500, host_port: (!loopback_node_ports).then_some(5001) }
    }

    fn second(loopback_node_ports: bool) -> Self {
        Self { node_port: 30600, host_port: (!loopback_node_ports).then_some(5002) }
    }

    /// The `host` the controller publishes with its default node address.
    fn host(self) -> String {
        format!("localhost:{}", self.host_port.unwrap_or(self.node_port))
    }

    fn describe(self) -> String {
        match self.host_port {
            Some(host_port) => format!("nodePort {} and hostPort {host_port}", self.node_port),
            None => format!("nodePort {}", self.node_port),
        }
    }
}

pub async fn run(plane: &ControlPlane, controller: &Path) -> Result<(), Error> {
    let client = plane.client().await?;
    let mut loopback_node_ports = true;
    if let Some(node) = plane.real_node() {
        let (containerd, proxy) = (&node.containerd_release().minor, node.proxy_mode());
        step(&format!(
            "The real node {} runs containerd {containerd} and kube-proxy in {} mode (LRP_CONTAINERD, LRP_KUBE_PROXY)",
            node.name(),
            proxy.as_str()
        ));
        loopback_node_ports = proxy == crate::node::ProxyMode::Iptables;
        if !loopback_node_ports {
            println!(
                "    kube-proxy serves no NodePort on the node's loopback in this mode, so the registry pod takes a \
                 hostPort too, which the CNI's portmap serves there and the controller publishes before the nodePort"
            );
        }
    }
    let (first, second) = (Ports::first(loopback_node_ports), Ports::second(loopback_node_ports));
    step(
        "Deploying a sample registry: namespace registry labelled local-registry-publisher.io/registries=allowed (a cluster admin's consent), Deployment registry/registry and a NodePort Service labelled local-registry-publisher.io/registry=true",
    );
    // Only namespaces a cluster admin allowed may name the cluster's registry.
    let namespace = serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE,
        "labels": {"local-registry-publisher.io/registries": "allowed"}}});
    apply(&client, namespace).await?;
    // On the real node the registry is crane's, imported from the tools built here; kwok runs no image at all.
    let container = match plane.real_node() {
        Some(node) => {
            let crane = crate::node::crane_image(plane.tools(), &plane.dir().join("images"))?;
            node.import(&crane)?;
            serde_json::json!({"name": "registry", "image": crane.name, "imagePullPolicy": "Never",
                "args": ["registry", "serve", "--address", ":5000"],
                "readinessProbe": {"httpGet": {"path": "/v2/", "port": 5000}, "periodSeconds": 1}})
        }
        None => serde_json::json!({"name": "registry", "image": "registry:2"}),
    };
    apply(&client, registry_deployment(&container, first)).await?;
    apply(&client, registry_service(first)).await?;

    step(&format!("Starting the controller: {}", controller.display()));
    let mut child = Command::new(controller)
        .arg(format!("--kubeconfig={}", plane.kubeconfig().display()))
        // The standard itself: a page that exists, unlike a home page this project does not have yet.
        .arg("--help-url=https://github.com/kubernetes/enhancements/tree/master/keps/sig-cluster-lifecycle/generic/1755-communicating-a-local-registry")
        // Any free port: the demo must not depend on 8080 being free.
        .arg("--http-address=127.0.0.1:0")
        .stdin(Stdio::null())
        .spawn()
        .map_err(|source| Error::Spawn { program: controller.to_path_buf(), source })?;
    let result = show(&client, plane, (first, second), &container).await;
    step("Stopping the controller (SIGTERM)");
    stop(&mut child);
    result
}

async fn show(
    client: &kube::Client,
    plane: &ControlPlane,
    (first, second): (Ports, Ports),
    container: &serde_json::Value,
) -> Result<(), Error> {
    let started = Instant::now();
    let text = wait_for_host(client, &first.host()).await?;
    step(&format!("Published in {:.1}s: kube-public/local-registry-hosting holds", started.elapsed().as_secs_f64()));
    print_document(&text);
    if let Some(node) = plane.real_node() {
        kep_flow(client, plane, node, &first.host()).await?;
    }

    step(&format!("Moving the registry from {} to {}", first.describe(), second.describe()));
    let changed = Instant::now();
    if second.host_port.is_some() {
        apply(client, registry_deployment(container, second)).await?;
    }
    apply(client, registry_service(second)).await?;
    let text = wait_for_host(client, &second.host()).await?;
    step(&format!("The ConfigMap followed in {} ms:", changed.elapsed().as_millis()));
    print_document(&text);
    let events =
        kubectl(plane, &["get", "events", "-n", NAMESPACE, "--field-selector", "involvedObject.name=registry"]);
    step("Events on the registry Service (kubectl get events -n registry):");
    println!("{}", events.trim_end());
    println!(
        "\nTo explore by hand: `make up` (or `make up-node`, with a real node) starts the same cluster and prints its \
         KUBECONFIG."
    );
    Ok(())
}

/// What Tilt or Skaffold then do with the published values, for real: push to `host` from the node (where
/// `localhost` is the node, as on a single-node cluster), and run a pod whose image names that host.
async fn kep_flow(
    client: &kube::Client,
    plane: &ControlPlane,
    node: &crate::RealNode,
    host: &str,
) -> Result<(), Error> {
    let image = format!("{host}/demo/pause:1");
    step(&format!("Pushing an image to the published host, as a tool on the node would: crane push ... {image}"));
    let crane = plane.tools().join("crane");
    let layout = plane.dir().join("images/pause");
    let mut pushed = None;
    // kube-proxy programs the nodePort (portmap the hostPort) a moment after the registry is Ready.
    for _ in 0..60 {
        let output = node.command(&crane).arg("push").arg(&layout).arg(&image).arg("--insecure").output()?;
        if output.status.success() {
            pushed = Some(String::from_utf8_lossy(&output.stdout).trim().to_string());
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let digest =
        pushed.ok_or_else(|| Error::Timeout { what: format!("pushing {image}"), timeout: Duration::from_secs(30) })?;
    println!("    pushed {digest}");
    step(&format!("Running a pod from {image}: the node's containerd pulls it from the registry"));
    apply(
        client,
        serde_json::json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "app", "namespace": NAMESPACE},
        "spec": {"containers": [{"name": "app", "image": image, "imagePullPolicy": "Always"}]}}),
    )
    .await?;
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let timeout = Duration::from_secs(60);
    wait_until(timeout, || async {
        let pod = pods.get_opt("app").await.ok().flatten()?;
        (pod.status?.phase.as_deref() == Some("Running")).then_some(())
    })
    .await
    .ok_or_else(|| Error::Timeout { what: "the pod to run".into(), timeout })?;
    println!("{}", kubectl(plane, &["get", "pods", "-n", NAMESPACE, "-o", "wide"]).trim_end());
    Ok(())
}

fn kubectl(plane: &ControlPlane, args: &[&str]) -> String {
    let output = Command::new(plane.tools().join("kubectl"))
        .arg(format!("--kubeconfig={}", plane.kubeconfig().display()))
        .args(args)
        .output();
    match output {
        Ok(output) => String::from_utf8_lossy(&output.stdout).into_owned() + &String::from_utf8_lossy(&output.stderr),
        Err(error) => format!("kubectl: {error}"),
    }
}

fn registry_deployment(container: &serde_json::Value, ports: Ports) -> serde_json::Value {
    let mut container = container.clone();
    let port = match ports.host_port {
        Some(host_port) => serde_json::json!({"containerPort": 5000, "hostPort": host_port}),
        None => serde_json::json!({"containerPort": 5000}),
    };
    container["ports"] = serde_json::json!([port]);
    serde_json::json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "registry", "namespace": NAMESPACE},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "registry"}},
            "template": {"metadata": {"labels": {"app": "registry"}}, "spec": {"containers": [container]}}}
    })
}

fn registry_service(ports: Ports) -> serde_json::Value {
    let node_port = ports.node_port;
    serde_json::json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "registry", "namespace": NAMESPACE,
            "labels": {"local-registry-publisher.io/registry": "true"}},
        "spec": {"type": "NodePort", "selector": {"app": "registry"},
            "ports": [{"name": "registry", "port": 5000, "nodePort": node_port}]}
    })
}

async fn wait_for_host(client: &kube::Client, host: &str) -> Result<String, Error> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "kube-public");
    let wanted = format!("host: \"{host}\"");
    let timeout = Duration::from_secs(60);
    wait_until(timeout, || async {
        let configmap = api.get_opt("local-registry-hosting").await.ok().flatten()?;
        let text = configmap.data?.get("localRegistryHosting.v1")?.clone();
        text.contains(&wanted).then_some(text)
    })
    .await
    .ok_or_else(|| Error::Timeout { what: format!("the ConfigMap to show {host}"), timeout })
}

async fn apply(client: &kube::Client, manifest: serde_json::Value) -> Result<(), Error> {
    let object: DynamicObject =
        serde_json::from_value(manifest).map_err(|e| std::io::Error::other(format!("demo manifest: {e}")))?;
    let types = object.types.clone().unwrap_or_default();
    let (group, version) = types.api_version.rsplit_once('/').unwrap_or(("", &types.api_version));
    let resource = ApiResource::from_gvk(&kube::core::GroupVersionKind::gvk(group, version, &types.kind));
    let name = object.metadata.name.clone().unwrap_or_default();
    let api: Api<DynamicObject> = match &object.metadata.namespace {
        Some(namespace) => Api::namespaced_with(client.clone(), namespace, &resource),
        None => Api::all_with(client.clone(), &resource),
    };
    api.patch(&name, &PatchParams::apply("testbed-demo").force(), &Patch::Apply(&object)).await?;
    Ok(())
}

fn print_document(text: &str) {
    println!("    localRegistryHosting.v1: |");
    for line in text.lines() {
        println!("      {line}");
    }
}

fn step(message: &str) {
    println!("\n==> {message}");
}

fn stop(child: &mut Child) {
    // SAFETY: kill(2) on our own child's pid has no memory-safety preconditions.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGTERM);
    }
    let _ = child.wait();
}
