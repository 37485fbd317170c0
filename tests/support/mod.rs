//! Runs the publisher against the shared real control plane, isolated in a fresh namespace that is both the only
//! watched namespace and where the ConfigMap is published, so tests run side by side without touching kube-public.

#![allow(dead_code)] // each test binary uses its own part of this module

pub mod agent;
pub mod binary;
pub mod proxy;

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::core::{DynamicObject, GroupVersionKind};
use kube::discovery::ApiResource;
use kube::{Client, ResourceExt};
use local_registry_publisher::controller::{Context, Controller};
use local_registry_publisher::hosting::{DATA_KEY, LocalRegistryHostingV1};
use local_registry_publisher::settings::Settings;
use serde_json::{Value, json};
use testbed::ControlPlane;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

pub use testbed::wait_until;

pub const TARGET: &str = "local-registry-hosting";
/// Long enough for anything the control plane does under load; tests never assert on speed.
pub const SOON: Duration = Duration::from_secs(30);
/// Pulls, pod starts, kube-proxy rules and agent passes on a real node take longer than the control plane's own work
/// on a shared 2-core machine; tests never assert on speed.
pub const SOON_ON_A_NODE: Duration = Duration::from_secs(90);

pub struct Running {
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<()>,
}

impl Running {
    /// Stops the controller and waits for it to finish, bounded: a shutdown that hangs fails the test instead of
    /// holding CI for its whole limit.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let stopped = tokio::time::timeout(SOON, &mut self.task).await;
        assert!(stopped.is_ok(), "the controller did not stop within {SOON:?} of being asked to");
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The ConfigMap versions a watch saw; see [`Scenario::watch_configmap_versions`].
pub struct Versions {
    receiver: tokio::sync::mpsc::UnboundedReceiver<String>,
    task: JoinHandle<()>,
}

impl Versions {
    /// Every version seen so far, beyond the one stored when the watch started.
    pub fn seen(&mut self) -> Vec<String> {
        let mut seen = Vec::new();
        while let Ok(version) = self.receiver.try_recv() {
            seen.push(version);
        }
        seen
    }
}

impl Drop for Versions {
    fn drop(&mut self) {
        self.task.abort();
    }
}

pub struct Scenario {
    pub client: Client,
    pub ns: String,
    pub settings: Settings,
}

/// The controller's arguments for `settings`, spelled as the chart writes them: what `doctor` reads from a
/// controller pod to judge with the controller's own settings.
pub fn controller_args(settings: &Settings) -> Vec<String> {
    use local_registry_publisher::settings::NodeAddress;
    let mut args = vec![format!("--registry-selector={}", settings.registry_selector)];
    if !settings.builtin_registries {
        args.push("--no-builtin-registries".into());
    }
    if !settings.watch_namespaces.is_empty() {
        args.push(format!("--watch-namespaces={}", settings.watch_namespaces.join(",")));
    }
    if !settings.allowed_namespaces.is_empty() {
        args.push(format!("--allowed-namespaces={}", settings.allowed_namespaces.join(",")));
    }
    let node_address = match &settings.node_address {
        NodeAddress::Localhost => "localhost",
        NodeAddress::InternalIp => "internal-ip",
        NodeAddress::Literal(address) => address,
    };
    args.extend([
        format!("--configmap-namespace={}", settings.configmap_namespace),
        format!("--configmap-name={}", settings.configmap_name),
        format!("--cluster-domain={}", settings.cluster_domain),
        format!("--node-address={node_address}"),
        format!("--grace-period={}ms", settings.grace_period.as_millis()),
    ]);
    args.extend(settings.help_url.iter().map(|url| format!("--help-url={url}")));
    if settings.take_over {
        args.push("--take-over".into());
    }
    if let Some(pull) = &settings.pull_secrets {
        args.extend(["--pull-secrets".into(), format!("--pull-secret-name={}", pull.name)]);
        if !pull.service_accounts.is_empty() {
            args.push(format!("--pull-secret-service-accounts={}", pull.service_accounts.join(",")));
        }
    }
    args
}

impl Scenario {
    /// A fresh namespace and settings scoped to it, with a short grace period and no built-in recognition.
    pub async fn new(prefix: &str) -> Self {
        let plane = ControlPlane::shared();
        let client = plane.client().await.expect("admin client");
        let ns = plane.namespace(&client, prefix).await.expect("test namespace");
        let settings = Settings {
            watch_namespaces: vec![ns.clone()],
            configmap_namespace: ns.clone(),
            configmap_name: TARGET.into(),
            grace_period: Duration::from_secs(2),
            builtin_registries: false,
            ..Settings::default()
        };
        Self { client, ns, settings }
    }

    /// Starts the publisher with the current settings.
    pub fn start(&self) -> Running {
        self.start_with(Context::standalone())
    }

    /// Starts the publisher and returns the health its probes report.
    pub fn start_with_health(&self) -> (Running, std::sync::Arc<local_registry_publisher::health::Health>) {
        let health = std::sync::Arc::new(local_registry_publisher::health::Health::default());
        let metrics = local_registry_publisher::metrics::Metrics::default();
        let context = Context::new(metrics, Default::default(), health.clone(), None);
        (self.start_with(context), health)
    }

    /// Starts the publisher as if it ran in a controller pod: a pod with the chart's labels (kwok makes it Running)
    /// whose name the publisher's Events carry, as a pod's do.
    pub async fn start_in_pod(&self) -> Running {
        let name = format!("lrp-controller-{}", self.ns);
        // Its ServiceAccount may write the ConfigMap, as the chart's may: what makes doctor take it for the
        // controller.
        let (configmap_ns, configmap) = (&self.settings.configmap_namespace, &self.settings.configmap_name);
        self.apply(serde_json::json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "lrp"}}))
            .await;
        let role = serde_json::json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": format!("lrp-{}", self.ns), "namespace": configmap_ns},
            "rules": [{"apiGroups": [""], "resources": ["configmaps"], "resourceNames": [configmap],
                "verbs": ["get", "create", "patch"]}]});
        apply_in(&self.client, configmap_ns, role).await;
        let binding = serde_json::json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": format!("lrp-{}", self.ns), "namespace": configmap_ns},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": format!("lrp-{}", self.ns)},
            "subjects": [{"kind": "ServiceAccount", "name": "lrp", "namespace": self.ns}]});
        apply_in(&self.client, configmap_ns, binding).await;
        self.apply(serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {
                "app.kubernetes.io/part-of": "local-registry-publisher",
                "app.kubernetes.io/component": "controller"}},
            "spec": {"serviceAccountName": "lrp", "containers": [{"name": "controller",
                "image": "local-registry-publisher:test", "args": controller_args(&self.settings)}]}
        }))
        .await;
        let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(self.client.clone(), &self.ns);
        let running = wait_until(SOON, || async {
            let phase = pods.get(&name).await.ok()?.status?.phase?;
            (phase == "Running").then_some(())
        })
        .await;
        assert!(running.is_some(), "the controller pod {name} runs");
        let mut context = Context::standalone();
        context.instance = name;
        self.start_with(context)
    }

    pub fn start_with(&self, context: Context) -> Running {
        let (stop, stopped) = oneshot::channel();
        let controller = Controller::new(self.client.clone(), self.settings.clone(), context);
        let task = tokio::spawn(controller.run(async move {
            let _ = stopped.await;
        }));
        Running { stop: Some(stop), task }
    }

    pub fn configmaps(&self) -> Api<ConfigMap> {
        Api::namespaced(self.client.clone(), &self.settings.configmap_namespace)
    }

    pub async fn configmap(&self) -> Option<ConfigMap> {
        self.configmaps().get_opt(&self.settings.configmap_name).await.expect("GET the ConfigMap")
    }

    /// The published document read the way readers read it: GET, take `localRegistryHosting.v1`, parse YAML.
    pub async fn published(&self) -> Option<LocalRegistryHostingV1> {
        let configmap = self.configmap().await?;
        let text = configmap.data.as_ref()?.get(DATA_KEY)?.clone();
        Some(LocalRegistryHostingV1::parse(&text).expect("readers can parse what is published"))
    }

    /// Waits until the published document satisfies `check`, and returns it.
    pub async fn wait_published(
        &self,
        what: &str,
        check: impl Fn(&Option<LocalRegistryHostingV1>) -> bool,
    ) -> Option<LocalRegistryHostingV1> {
        let found = wait_until(SOON, || async {
            let published = self.published().await;
            check(&published).then_some(published)
        })
        .await;
        match found {
            Some(published) => published,
            None => panic!("timed out waiting for {what}; published now: {:?}", self.published().await),
        }
    }

    pub async fn wait_host(&self, host: &str) -> LocalRegistryHostingV1 {
        self.wait_published(&format!("host {host}"), |d| d.as_ref().and_then(|d| d.host.as_deref()) == Some(host))
            .await
            .expect("a document")
    }

    /// What a plain-HTTP registry behind `service` in this namespace publishes for pods on `port`.
    pub async fn cluster_host(&self, service: &str, port: u16) -> String {
        cluster_host(&self.client, &self.ns, service, port).await
    }

    /// Waits until `hostFromClusterNetwork` is `service`'s ClusterIP in this namespace, on `port`.
    pub async fn wait_cluster_host(&self, service: &str, port: u16) -> LocalRegistryHostingV1 {
        let wanted = self.cluster_host(service, port).await;
        self.wait_published(&format!("hostFromClusterNetwork {wanted}"), |d| {
            d.as_ref().and_then(|d| d.host_from_cluster_network.as_deref()) == Some(wanted.as_str())
        })
        .await
        .expect("a document")
    }

    /// Creates or updates any namespaced object from JSON (apiVersion, kind and metadata.name required).
    pub async fn apply(&self, manifest: Value) {
        apply_in(&self.client, &self.ns, manifest).await;
    }

    pub async fn delete(&self, api_version: &str, kind: &str, name: &str) {
        delete_in(&self.client, &self.ns, api_version, kind, name).await;
    }

    /// Patches the status subresource (for LoadBalancer ingress, which no controller sets here).
    pub async fn patch_status(&self, api_version: &str, kind: &str, name: &str, status: Value) {
        let api = dynamic_api(&self.client, &self.ns, api_version, kind);
        let patch = serde_json::json!({"status": status});
        api.patch_status(name, &PatchParams::default(), &Patch::Merge(&patch)).await.expect("patch status");
    }

    /// Adds a registry that ranks last and waits for its `NotPublished` Event. The Event task posts a pass's Events
    /// before it takes a later pass's, so once this one is there, every Event of the passes before it has landed:
    /// "nothing else was told" can then be checked.
    pub async fn wait_marker(&self) {
        let annotations = serde_json::json!({"local-registry-publisher.io/priority": "-2147483648"});
        let spec =
            serde_json::json!({"type": "ExternalName", "externalName": "marker.example", "ports": [{"port": 5000}]});
        self.apply(service("zz-marker", registry_label(), annotations, spec)).await;
        self.wait_event("zz-marker", "NotPublished").await;
    }

    /// Records every version of the published ConfigMap from now on, as a watch sees them (a poll would miss states
    /// that come and go between two reads).
    pub fn watch_configmap_versions(&self) -> Versions {
        use futures::StreamExt;
        use kube::runtime::{WatchStreamExt, watcher};
        let config = watcher::Config::default().fields(&format!("metadata.name={}", self.settings.configmap_name));
        let (sender, receiver) = tokio::sync::mpsc::unbounded_channel();
        let watch = watcher(self.configmaps(), config).touched_objects();
        let task = tokio::spawn(async move {
            futures::pin_mut!(watch);
            let mut first = true;
            while let Some(event) = watch.next().await {
                let Ok(configmap) = event else { continue };
                // The first is what was stored when the watch started.
                if !std::mem::take(&mut first) {
                    let _ = sender.send(resource_version(&configmap));
                }
            }
        });
        Versions { receiver, task }
    }

    /// Waits until the Service's EndpointSlices hold exactly `ready` ready endpoints.
    pub async fn wait_ready_endpoints(&self, service: &str, ready: usize) {
        let slices: Api<k8s_openapi::api::discovery::v1::EndpointSlice> =
            Api::namespaced(self.client.clone(), &self.ns);
        let by_service = kube::api::ListParams::default().labels(&format!("kubernetes.io/service-name={service}"));
        let count = || async {
            let list = slices.list(&by_service).await.ok()?;
            let endpoints = list.items.iter().flat_map(|s| s.endpoints.iter().flatten());
            Some(endpoints.filter(|e| e.conditions.as_ref().and_then(|c| c.ready).unwrap_or(true)).count())
        };
        let found = wait_until(SOON, || async { (count().await? == ready).then_some(()) }).await;
        assert!(found.is_some(), "{service} never had {ready} ready endpoints; now {:?}", count().await);
    }

    /// How many times an Event with `reason` on `name` was recorded, counting the repeats a Recorder folds into
    /// one Event's series.
    pub async fn occurrences(&self, name: &str, reason: &str) -> i32 {
        let events: Api<Event> = Api::namespaced(self.client.clone(), &self.ns);
        let list = events.list(&Default::default()).await.expect("list events");
        list.items
            .iter()
            .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
            .filter(|e| e.reason.as_deref() == Some(reason))
            .map(|e| e.series.as_ref().map_or(1, |series| series.count))
            .sum()
    }

    /// Events regarding the named object: (type, reason, note).
    pub async fn events_for(&self, name: &str) -> Vec<(String, String, String)> {
        let events: Api<Event> = Api::namespaced(self.client.clone(), &self.ns);
        let list = events.list(&Default::default()).await.expect("list events");
        list.items
            .into_iter()
            .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
            .map(|e| (e.type_.unwrap_or_default(), e.reason.unwrap_or_default(), e.note.unwrap_or_default()))
            .collect()
    }

    /// Waits for an Event with `reason` on `name` and returns its note.
    pub async fn wait_event(&self, name: &str, reason: &str) -> String {
        self.wait_event_saying(name, reason, "").await
    }

    /// Waits for an Event with `reason` on `name` whose note says `says`, and returns its note: where other tests'
    /// objects can cause Events of the same reason (a namespace every test's controller serves), the first is not
    /// necessarily this test's.
    pub async fn wait_event_saying(&self, name: &str, reason: &str, says: &str) -> String {
        let found = wait_until(SOON, || async {
            let mut events = self.events_for(name).await.into_iter();
            events.find(|(_, r, note)| r == reason && note.contains(says)).map(|(_, _, note)| note)
        })
        .await;
        match found {
            Some(note) => note,
            None => {
                panic!("no {reason} Event saying {says:?} on {name}; its events: {:?}", self.events_for(name).await)
            }
        }
    }
}

/// The ClusterIP of Service `name` in `ns`.
pub async fn cluster_ip(client: &Client, ns: &str, name: &str) -> String {
    let service = Api::<k8s_openapi::api::core::v1::Service>::namespaced(client.clone(), ns).get(name).await;
    let service = service.unwrap_or_else(|e| panic!("Service {ns}/{name}: {e}"));
    service.spec.and_then(|s| s.cluster_ip).unwrap_or_else(|| panic!("Service {ns}/{name} has no ClusterIP"))
}

/// `hostFromClusterNetwork` of a plain-HTTP registry behind Service `ns/name` on `port`: its ClusterIP and port.
pub async fn cluster_host(client: &Client, ns: &str, name: &str, port: u16) -> String {
    format!("{}:{port}", cluster_ip(client, ns, name).await)
}

pub async fn apply_in(client: &Client, ns: &str, manifest: Value) {
    let api_version = manifest["apiVersion"].as_str().expect("apiVersion").to_string();
    let kind = manifest["kind"].as_str().expect("kind").to_string();
    let name = manifest["metadata"]["name"].as_str().expect("metadata.name").to_string();
    let api = dynamic_api(client, ns, &api_version, &kind);
    let object: DynamicObject = serde_json::from_value(manifest).expect("a Kubernetes object");
    api.patch(&name, &PatchParams::apply("publisher-tests").force(), &Patch::Apply(&object))
        .await
        .unwrap_or_else(|e| panic!("apply {kind} {name}: {e}"));
}

pub async fn delete_in(client: &Client, ns: &str, api_version: &str, kind: &str, name: &str) {
    let api = dynamic_api(client, ns, api_version, kind);
    match api.delete(name, &DeleteParams::foreground()).await {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 404 => {}
        Err(e) => panic!("delete {kind} {name}: {e}"),
    }
}

fn dynamic_api(client: &Client, ns: &str, api_version: &str, kind: &str) -> Api<DynamicObject> {
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind));
    Api::namespaced_with(client.clone(), ns, &resource)
}

/// A Deployment whose pods kwok makes Ready, labelled `app=<name>`.
pub fn deployment(name: &str, replicas: i32, labels: Value, container_ports: Value) -> Value {
    serde_json::json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "registry", "image": "registry:2", "ports": container_ports}]}
            }
        }
    })
}

/// A Service; `labels`, `annotations` and `spec` are merged in as given.
pub fn service(name: &str, labels: Value, annotations: Value, spec: Value) -> Value {
    serde_json::json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "labels": labels, "annotations": annotations},
        "spec": spec
    })
}

pub fn registry_label() -> Value {
    serde_json::json!({"local-registry-publisher.io/registry": "true"})
}

/// Runs a tool built by hack/tools.sh (helm, kubectl) against `plane`, with helm's state in its directory.
/// The project's root: Cargo.toml, charts/, hack/, the README.
pub fn root() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The controller image `make image` built (`make test` does), to import into a real node.
pub fn controller_image() -> xtask::image::Image {
    let archive = root().join("target/image/local-registry-publisher.tar");
    assert!(archive.exists(), "{} is missing: run `make image` (make test does)", archive.display());
    xtask::image::Image {
        name: "docker.io/library/local-registry-publisher".into(),
        layout: root().join("target/image/local-registry-publisher"),
        archive,
        compressed_size: 0,
    }
}

/// `doctor` run against `plane` with `args`.
pub fn doctor(plane: &ControlPlane, args: &[&str]) -> std::process::Output {
    std::process::Command::new(binary::BINARY)
        .arg("doctor")
        .arg(format!("--kubeconfig={}", plane.kubeconfig().display()))
        .args(args)
        .output()
        .expect("run doctor")
}

pub fn tool(plane: &ControlPlane, name: &str, args: &[&str]) -> std::process::Output {
    against(plane, std::process::Command::new(plane.tools().join(name)).args(args))
        .output()
        .unwrap_or_else(|e| panic!("run {name}: {e}"))
}

/// `command` pointed at `plane`: its kubeconfig, and helm's directories (registry logins, caches) inside it.
/// `command` without the variables cargo gives a test (CARGO_MANIFEST_DIR, CARGO_PKG_*, ...), as a user's shell runs
/// it: handed down to a cargo that the command runs (`make install`), they change build scripts' fingerprints (ring's
/// reruns on CARGO_MANIFEST_DIR) and the release build `make image` left starts over, minutes of CI for nothing.
pub fn as_a_user(command: &mut std::process::Command) -> &mut std::process::Command {
    let given = |name: &str| {
        ["CARGO_PKG_", "CARGO_MANIFEST_", "CARGO_CRATE_", "CARGO_BIN_", "CARGO_PRIMARY_PACKAGE"]
            .iter()
            .any(|prefix| name.starts_with(prefix))
            || ["CARGO_TARGET_TMPDIR", "CARGO_RUSTC_CURRENT_DIR"].contains(&name)
    };
    for (name, _) in std::env::vars_os() {
        if name.to_str().is_some_and(given) {
            command.env_remove(name);
        }
    }
    command
}

pub fn against<'a>(plane: &ControlPlane, command: &'a mut std::process::Command) -> &'a mut std::process::Command {
    command
        .env("KUBECONFIG", plane.kubeconfig())
        .env("HELM_CACHE_HOME", plane.dir().join("helm/cache"))
        .env("HELM_CONFIG_HOME", plane.dir().join("helm/config"))
        .env("HELM_DATA_HOME", plane.dir().join("helm/data"))
}

/// A tool's stdout, after asserting it succeeded.
pub fn ok(output: std::process::Output) -> String {
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(output.status.success(), "failed: {}\n{}", String::from_utf8_lossy(&output.stderr), text);
    text
}

/// The nodePort allocated to the first port of a Service in the scenario's namespace.
pub async fn node_port(scenario: &Scenario, name: &str) -> i32 {
    let api = Api::<k8s_openapi::api::core::v1::Service>::namespaced(scenario.client.clone(), &scenario.ns);
    let service = api.get(name).await.expect("service");
    let ports = service.spec.and_then(|s| s.ports).unwrap_or_default();
    ports.first().and_then(|p| p.node_port).expect("an allocated nodePort")
}

pub fn resource_version(configmap: &ConfigMap) -> String {
    configmap.resource_version().unwrap_or_default()
}

pub async fn create_foreign_configmap(scenario: &Scenario, text: &str) -> ConfigMap {
    let mut configmap = ConfigMap::default();
    configmap.metadata.name = Some(scenario.settings.configmap_name.clone());
    configmap.data = Some([(DATA_KEY.to_string(), text.to_string())].into());
    scenario.configmaps().create(&PostParams::default(), &configmap).await.expect("create foreign ConfigMap")
}

/// A kubeconfig for the shared control plane that authenticates with `token` and nothing else.
pub fn token_kubeconfig(token: &str, name: &str) -> std::path::PathBuf {
    token_kubeconfig_for(ControlPlane::shared(), token, name)
}

/// A kubeconfig for `plane` that authenticates with `token` and nothing else.
pub fn token_kubeconfig_for(plane: &ControlPlane, token: &str, name: &str) -> std::path::PathBuf {
    let path = plane.dir().join(format!("{name}.kubeconfig"));
    let ca = plane.dir().join("pki/ca.crt");
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {}\n    certificate-authority: {}\n\
             users:\n- name: u\n  user:\n    token: {token}\ncontexts:\n- name: c\n  context: {{cluster: c, user: u}}\ncurrent-context: c\n",
            plane.server(),
            ca.display()
        ),
    )
    .expect("write the kubeconfig");
    path
}

pub async fn client_for(kubeconfig: &std::path::Path) -> Client {
    let kubeconfig = kube::config::Kubeconfig::read_from(kubeconfig).expect("read the kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await.expect("a config");
    Client::try_from(config).expect("a client")
}

/// Asserts the API server refused `what` with 403.
pub fn forbidden<T: std::fmt::Debug>(result: Result<T, kube::Error>, what: &str) {
    match result {
        Err(kube::Error::Api(status)) if status.code == 403 => {}
        other => panic!("{what} should be forbidden, got {other:?}"),
    }
}

/// A client acting as `system:serviceaccount:<ns>:tenant` (impersonated by the admin of `kubeconfig`), which holds
/// the built-in `edit` role in `ns` and nothing else: what a namespace's ordinary user may do.
pub async fn edit_only_client(admin: &Client, kubeconfig: &std::path::Path, ns: &str) -> Client {
    role_only_client(admin, kubeconfig, ns, "edit", "tenant").await
}

/// A client acting as `system:serviceaccount:<ns>:<account>`, which holds the built-in ClusterRole `role` (`edit`,
/// `admin`) in `ns` and nothing else.
pub async fn role_only_client(
    admin: &Client,
    kubeconfig: &std::path::Path,
    ns: &str,
    role: &str,
    account: &str,
) -> Client {
    use k8s_openapi::api::rbac::v1::RoleBinding;
    let accounts = Api::<k8s_openapi::api::core::v1::ServiceAccount>::namespaced(admin.clone(), ns);
    let made = serde_json::from_value(json!({"metadata": {"name": account}})).expect("a ServiceAccount");
    accounts.create(&PostParams::default(), &made).await.expect("create the tenant's ServiceAccount");
    let binding: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": format!("{account}-{role}")},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": ns}],
    }))
    .expect("a RoleBinding");
    Api::<RoleBinding>::namespaced(admin.clone(), ns).create(&PostParams::default(), &binding).await.expect("bind");
    let kubeconfig = kube::config::Kubeconfig::read_from(kubeconfig).expect("kubeconfig");
    let options = kube::config::KubeConfigOptions::default();
    let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &options).await.expect("a config");
    config.auth_info.impersonate = Some(format!("system:serviceaccount:{ns}:{account}"));
    let tenant = Client::try_from(config).expect("the tenant's client");
    // The authorizer sees a new RoleBinding a moment later: wait until it grants what `edit` grants.
    use k8s_openapi::api::authorization::v1::{
        ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
    };
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                namespace: Some(ns.into()),
                verb: Some("patch".into()),
                group: Some("apps".into()),
                resource: Some("deployments".into()),
                ..ResourceAttributes::default()
            }),
            ..SelfSubjectAccessReviewSpec::default()
        },
        ..SelfSubjectAccessReview::default()
    };
    let reviews = Api::<SelfSubjectAccessReview>::all(tenant.clone());
    let granted = wait_until(SOON, || async {
        let answer = reviews.create(&PostParams::default(), &review).await.ok()?;
        answer.status.is_some_and(|s| s.allowed).then_some(())
    })
    .await;
    assert!(granted.is_some(), "the {account}'s {role} RoleBinding in {ns} never took effect");
    tenant
}

/// A real registry process on loopback (crane's), stopped on drop.
pub struct LocalRegistry {
    child: std::process::Child,
    pub port: u16,
}

impl LocalRegistry {
    /// Runs `crane registry serve` from `tools` (hack/tools.sh's directory).
    pub fn start(tools: &std::path::Path) -> Self {
        use std::process::{Command, Stdio};
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let child = Command::new(tools.join("crane"))
            .args(["registry", "serve", "--address", &format!("127.0.0.1:{port}")])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start crane's registry");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(std::time::Instant::now() < deadline, "crane's registry never listened on 127.0.0.1:{port}");
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        Self { child, port }
    }
}

impl Drop for LocalRegistry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A kubeconfig like the shared one whose server is `address`.
pub fn kubeconfig_via(address: std::net::SocketAddr, name: &str) -> std::path::PathBuf {
    let plane = testbed::ControlPlane::shared();
    let text = std::fs::read_to_string(plane.kubeconfig()).expect("kubeconfig");
    let path = plane.dir().join(format!("{name}.kubeconfig"));
    std::fs::write(&path, text.replace(plane.server(), &format!("https://{address}"))).expect("write kubeconfig");
    path
}
