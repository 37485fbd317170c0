//! A real, throw-away Kubernetes control plane for tests and the demo: etcd, kube-apiserver (TLS, RBAC,
//! service-account signing), kube-controller-manager, kube-scheduler and kwok with one simulated node, all on free
//! loopback ports in a fresh temporary directory. Optionally ([`Options::real_node`]) a real node joins it:
//! containerd, runc, kubelet, kube-proxy and CoreDNS in a network namespace of its own (see [`node`]).
//!
//! Tests in one binary share one control plane ([`ControlPlane::shared`]) and isolate themselves in a fresh
//! namespace each ([`ControlPlane::namespace`]). Nothing outlives the process: see [`process`].

mod components;
pub mod demo;
pub mod node;
mod pki;
pub use pki::{PrivateTls, private_tls};
mod process;
pub mod tools;

use std::collections::BTreeMap;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Namespace, Node, ServiceAccount};
use kube::api::{Api, DeleteParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

pub use node::RealNode;
pub use process::Component;

/// The simulated node every pod is scheduled to.
pub const NODE_NAME: &str = "testbed-node";
/// The InternalIP kwok gives that node.
pub const NODE_IP: &str = "10.0.0.10";
const POD_CIDR: &str = "10.244.0.0/16";
pub const SERVICE_CIDR: &str = "10.96.0.0/16";
const START_TIMEOUT: Duration = Duration::from_secs(120);

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    #[error("image: {0}")]
    Image(#[from] xtask::Error),
    #[error("certificates: {0}")]
    Certificates(#[from] rcgen::Error),
    #[error("cannot start {program}: {source}")]
    Spawn { program: PathBuf, source: std::io::Error },
    #[error("building the Go tools failed (hack/tools.sh exited with {0})")]
    Tools(std::process::ExitStatus),
    #[error("{component} exited with {status} while starting; last log lines:\n{log}")]
    Exited { component: String, status: std::process::ExitStatus, log: String },
    #[error("timed out after {timeout:?} waiting for {what}")]
    Timeout { what: String, timeout: Duration },
    #[error("kubeconfig: {0}")]
    Kubeconfig(#[from] kube::config::KubeconfigError),
    #[error("kubernetes: {0}")]
    Kube(#[from] kube::Error),
    #[error("{0} is not a component of this control plane")]
    UnknownComponent(String),
    #[error("this machine cannot run the testbed's real node: {0}")]
    NodeUnsupported(String),
    #[error("Kubernetes version: {0}")]
    Version(String),
}

/// The minor of Kubernetes this process's control planes run: `LRP_KUBE_VERSION` (`1.25`, `1.37`: the other ends of
/// the tested window, built by hack/tools.sh), else the main pin. Every control plane checks its API server's
/// `/version` against it before anything uses it, so a wrong tools folder can never pass for another version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KubeVersion {
    /// `1.36`.
    pub minor: String,
    /// What the binaries' names end with: empty for the main pin, `-1.25` for another minor.
    suffix: String,
}

/// The main pin's minor (tools/k8s: v1.36.3).
pub const MAIN_MINOR: &str = "1.36";

impl KubeVersion {
    pub fn from_env() -> Result<Self, Error> {
        match std::env::var("LRP_KUBE_VERSION").ok().filter(|v| !v.is_empty()) {
            None => Ok(Self { minor: MAIN_MINOR.into(), suffix: String::new() }),
            Some(minor) if minor == MAIN_MINOR => Ok(Self { minor, suffix: String::new() }),
            Some(minor) => {
                let valid =
                    minor.strip_prefix("1.").is_some_and(|m| !m.is_empty() && m.bytes().all(|b| b.is_ascii_digit()));
                if !valid {
                    return Err(Error::Version(format!("LRP_KUBE_VERSION={minor:?} is not a minor like 1.25")));
                }
                Ok(Self { suffix: format!("-{minor}"), minor })
            }
        }
    }
}

/// What to start besides the control plane.
#[derive(Clone, Copy, Debug, Default)]
pub struct Options {
    /// A real node (containerd, kubelet, kube-proxy, CoreDNS) beside the kwok one, which is then tainted. Needs
    /// root and cgroups; without them starting fails with [`Error::NodeUnsupported`] naming what is missing.
    pub real_node: bool,
    /// With `real_node`: a second real node, prepared (its namespace, cgroups, configs) but started only by
    /// [`ControlPlane::start_second_node`], so a test can show what happens when a node joins later.
    pub second_node: bool,
    /// The real nodes' runtime, whatever `LRP_NODE_RUNTIME` says (a test binary of one runtime's own).
    pub runtime: Option<node::Runtime>,
}

pub struct ControlPlane {
    dir: PathBuf,
    kubeconfig: PathBuf,
    server: String,
    tools: PathBuf,
    recipes: BTreeMap<String, components::Recipe>,
    /// In start order; stopped in reverse.
    running: Mutex<Vec<Component>>,
    real_node: OnceLock<RealNode>,
    /// The second node's network, prepared at start; its daemons run once [`ControlPlane::start_second_node`] is
    /// called.
    second_network: Option<node::HostNetwork>,
    second_node: tokio::sync::OnceCell<RealNode>,
    software: node::NodeSoftware,
    _watchdog: process::Watchdog,
}

impl ControlPlane {
    /// The control plane shared by every test in this test binary, started on first use.
    pub fn shared() -> &'static ControlPlane {
        static SHARED: OnceLock<ControlPlane> = OnceLock::new();
        SHARED.get_or_init(|| Self::start_or_panic(Options::default()))
    }

    /// Like [`ControlPlane::shared`], with a real node (see [`Options::real_node`]).
    pub fn shared_with_real_node() -> &'static ControlPlane {
        static SHARED: OnceLock<ControlPlane> = OnceLock::new();
        SHARED.get_or_init(|| Self::start_or_panic(Options { real_node: true, ..Options::default() }))
    }

    /// Like [`ControlPlane::shared_with_real_node`], its node running CRI-O (see [`node::Runtime`]).
    pub fn shared_with_crio_node() -> &'static ControlPlane {
        static SHARED: OnceLock<ControlPlane> = OnceLock::new();
        let options = Options { real_node: true, runtime: Some(node::Runtime::Crio), ..Options::default() };
        SHARED.get_or_init(|| Self::start_or_panic(options))
    }

    /// Like [`ControlPlane::shared_with_real_node`], with a second real node ready to start (see
    /// [`Options::second_node`]).
    pub fn shared_with_two_real_nodes() -> &'static ControlPlane {
        static SHARED: OnceLock<ControlPlane> = OnceLock::new();
        SHARED.get_or_init(|| Self::start_or_panic(Options { real_node: true, second_node: true, runtime: None }))
    }

    fn start_or_panic(options: Options) -> ControlPlane {
        match ControlPlane::start_with(options) {
            Ok(plane) => plane,
            Err(error) => panic!("the test control plane did not start: {error}"),
        }
    }

    /// Starts every component and waits until the cluster can run pods. Blocking; safe to call from async code.
    pub fn start() -> Result<Self, Error> {
        Self::start_with(Options::default())
    }

    /// [`ControlPlane::start`] with options.
    pub fn start_with(options: Options) -> Result<Self, Error> {
        // kube's client needs a runtime, and the caller may already be inside one.
        std::thread::spawn(move || {
            tokio::runtime::Builder::new_current_thread().enable_all().build()?.block_on(Self::start_async(options))
        })
        .join()
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    }

    async fn start_async(options: Options) -> Result<Self, Error> {
        let started = Instant::now();
        let version = KubeVersion::from_env()?;
        if options.real_node {
            if version.minor != MAIN_MINOR {
                return Err(Error::Version(format!(
                    "the real node runs the main pin ({MAIN_MINOR}) only, not LRP_KUBE_VERSION={}",
                    version.minor
                )));
            }
            node::host::preflight()?;
        }
        let mut software = node::NodeSoftware::from_env()?;
        software.runtime = options.runtime.unwrap_or(software.runtime);
        let tools = tools::bin_dir()?;
        let dir = tempfile::Builder::new().prefix("testbed-").tempdir()?.keep();
        let watchdog = process::Watchdog::guard(&dir)?;
        let first = node::Slot::First;
        let network = options.real_node.then(|| node::HostNetwork::create(&dir, first, None)).transpose()?;
        // With a real node the API server listens on the machine's end of the node's veth, where pods and the
        // node reach it too; otherwise on loopback.
        let api_ip = network.as_ref().map_or(std::net::Ipv4Addr::LOCALHOST, |n| n.host_ip);
        let second = node::Slot::Second;
        let second_network = (options.real_node && options.second_node)
            .then(|| node::HostNetwork::create(&dir, second, Some(api_ip)))
            .transpose()?;
        if let (Some(first_network), Some(second_network)) = (&network, &second_network) {
            first_network.link(first.pod_subnet(), second_network, second.pod_subnet())?;
        }
        let pki = pki::write(&dir.join("pki"), api_ip)?;
        let [etcd_port, etcd_peer_port, api_port, kcm_port, scheduler_port, kwok_port] = free_ports()?;
        let server = format!("https://{api_ip}:{api_port}");
        let kubeconfig = dir.join("kubeconfig");
        std::fs::write(
            &kubeconfig,
            components::kubeconfig_yaml(&server, &pki.ca_cert, &pki.admin_cert, &pki.admin_key),
        )?;
        std::fs::write(dir.join("kwok.yaml"), std::fs::read(tools.join("kwok-stages.yaml"))?)?;
        let mut recipes = components::recipes(
            &tools,
            &dir,
            &pki,
            &kubeconfig,
            api_ip,
            [etcd_port, etcd_peer_port, api_port, kcm_port, scheduler_port, kwok_port],
            &version.suffix,
        );
        if let Some(network) = &network {
            let cgroups = network.create_cgroups()?;
            recipes.extend(node::recipes(&tools, &dir, first, network, &cgroups, &software));
            node::write_configs(&dir, &tools, &pki, &server, first, network, &software)?;
        }
        if let Some(network) = &second_network {
            let cgroups = network.create_cgroups()?;
            recipes.extend(node::recipes(&tools, &dir, second, network, &cgroups, &software));
            node::write_configs(&dir, &tools, &pki, &server, second, network, &software)?;
        }

        let plane = Self {
            recipes,
            dir,
            kubeconfig,
            server,
            tools,
            running: Mutex::new(Vec::new()),
            real_node: OnceLock::new(),
            second_network,
            second_node: tokio::sync::OnceCell::new(),
            software: software.clone(),
            _watchdog: watchdog,
        };
        plane.start_component("etcd")?;
        plane.wait_for("etcd to be healthy", || async move { etcd_healthy(etcd_port) }).await?;
        plane.start_component("kube-apiserver")?;
        let client = plane.wait_for_client().await?;
        let serving = client.apiserver_version().await?;
        let serving_minor = format!("{}.{}", serving.major, serving.minor.trim_end_matches('+'));
        if serving_minor != version.minor {
            return Err(Error::Version(format!(
                "the API server reports {} ({serving_minor}), not the {} this run asked for",
                serving.git_version, version.minor
            )));
        }
        for name in ["kube-controller-manager", "kube-scheduler", "kwok"] {
            plane.start_component(name)?;
        }
        plane
            .wait_for("namespace kube-public", || {
                let api: Api<Namespace> = Api::all(client.clone());
                async move { matches!(api.get_opt("kube-public").await, Ok(Some(_))) }
            })
            .await?;
        create_node(&client).await?;
        plane
            .wait_for("the simulated node to be Ready", || {
                let api: Api<Node> = Api::all(client.clone());
                async move { api.get_opt(NODE_NAME).await.ok().flatten().is_some_and(|node| node_ready(&node)) }
            })
            .await?;
        if let Some(network) = &network {
            let node = plane.start_real_node(&client, first, network, &software).await?;
            plane.set_real_node(node);
        }
        eprintln!(
            "[testbed] Kubernetes {} control plane ready in {:.1}s; KUBECONFIG={}",
            serving.git_version,
            started.elapsed().as_secs_f64(),
            plane.kubeconfig.display()
        );
        Ok(plane)
    }

    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// The real node, when the control plane was started with one.
    pub fn real_node(&self) -> Option<&RealNode> {
        self.real_node.get()
    }

    pub(crate) fn set_real_node(&self, node: RealNode) {
        let _ = self.real_node.set(node);
    }

    /// Starts the second real node (once; later calls return it) and waits until it is Ready. Fails unless the
    /// control plane was started with [`Options::second_node`].
    pub async fn start_second_node(&self) -> Result<&RealNode, Error> {
        let network = self.second_network.as_ref().ok_or_else(|| {
            Error::NodeUnsupported("this control plane was started without Options::second_node".into())
        })?;
        self.second_node
            .get_or_try_init(|| async {
                let client = self.client().await?;
                self.start_real_node(&client, node::Slot::Second, network, &self.software).await
            })
            .await
    }

    /// The second real node, once [`ControlPlane::start_second_node`] started it.
    pub fn second_node(&self) -> Option<&RealNode> {
        self.second_node.get()
    }

    /// The API server's URL, `https://127.0.0.1:<port>` (with a real node, the machine's end of its veth).
    pub fn server(&self) -> &str {
        &self.server
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The directory holding the built tools (kubectl, helm, ...).
    pub fn tools(&self) -> &Path {
        &self.tools
    }

    /// An admin client. Make one per test: a client belongs to the runtime it was made on.
    pub async fn client(&self) -> Result<Client, Error> {
        let kubeconfig = Kubeconfig::read_from(&self.kubeconfig)?;
        let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?;
        Ok(Client::try_from(config)?)
    }

    /// Creates a fresh namespace named `<prefix>-<random>` and waits until pods can be created in it.
    pub async fn namespace(&self, client: &Client, prefix: &str) -> Result<String, Error> {
        let name = format!("{prefix}-{}", random_suffix());
        let api: Api<Namespace> = Api::all(client.clone());
        let mut namespace = Namespace::default();
        namespace.metadata.name = Some(name.clone());
        api.create(&PostParams::default(), &namespace).await?;
        // Pods are rejected until the controller-manager has made the namespace's default ServiceAccount.
        let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), &name);
        self.wait_for(&format!("the default ServiceAccount in {name}"), || {
            let accounts = accounts.clone();
            async move { matches!(accounts.get_opt("default").await, Ok(Some(_))) }
        })
        .await?;
        Ok(name)
    }

    pub async fn delete_namespace(&self, client: &Client, name: &str) -> Result<(), Error> {
        Api::<Namespace>::all(client.clone()).delete(name, &DeleteParams::default()).await?;
        Ok(())
    }

    /// Stops one component (SIGTERM, then SIGKILL), to simulate an outage.
    pub fn stop_component(&self, name: &str) -> Result<(), Error> {
        let mut running = self.lock_running();
        let index =
            running.iter().position(|c| c.name == name).ok_or_else(|| Error::UnknownComponent(name.to_string()))?;
        running.remove(index).stop(Duration::from_secs(10));
        Ok(())
    }

    /// Starts a stopped component again with the same flags and ports.
    pub fn start_component(&self, name: &str) -> Result<(), Error> {
        let recipe = self.recipes.get(name).ok_or_else(|| Error::UnknownComponent(name.to_string()))?;
        let component = Component::spawn(name, &recipe.program, &recipe.args, &self.dir)?;
        self.lock_running().push(component);
        Ok(())
    }

    /// Where the component `name` (`containerd` is the first real node's) writes its log.
    pub fn log_of(&self, name: &str) -> PathBuf {
        process::log_path(&self.dir, name)
    }

    /// Process ids of the running components, by name.
    pub fn pids(&self) -> BTreeMap<String, u32> {
        self.lock_running().iter().map(|c| (c.name.clone(), c.pid())).collect()
    }

    /// Stops everything in reverse start order and removes the directory.
    pub fn stop(self) {
        drop(self);
    }

    fn lock_running(&self) -> std::sync::MutexGuard<'_, Vec<Component>> {
        self.running.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Polls `ready` until it holds, failing early with the log of any component that exited.
    pub async fn wait_for<F, Fut>(&self, what: &str, mut ready: F) -> Result<(), Error>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = bool>,
    {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if ready().await {
                return Ok(());
            }
            self.fail_if_exited()?;
            if Instant::now() > deadline {
                return Err(Error::Timeout { what: what.to_string(), timeout: START_TIMEOUT });
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn fail_if_exited(&self) -> Result<(), Error> {
        for component in self.lock_running().iter_mut() {
            if let Some(status) = component.exited() {
                return Err(Error::Exited { component: component.name.clone(), status, log: component.log_tail() });
            }
        }
        Ok(())
    }

    async fn wait_for_client(&self) -> Result<Client, Error> {
        let client = self.client().await?;
        self.wait_for("kube-apiserver /readyz", || {
            let client = client.clone();
            async move {
                let request = http::Request::get("/readyz").body(Vec::new());
                match request {
                    Ok(request) => client.request_text(request).await.is_ok_and(|body| body.trim() == "ok"),
                    Err(_) => false,
                }
            }
        })
        .await?;
        Ok(client)
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        let mut running = self.lock_running();
        while let Some(mut component) = running.pop() {
            component.stop(Duration::from_secs(10));
        }
        // Containers, shims, cgroups, sysctls and the network namespace of a real node.
        node::host::teardown(&self.dir);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

async fn create_node(client: &Client) -> Result<(), Error> {
    let node: Node = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": NODE_NAME,
            "annotations": {"kwok.x-k8s.io/node": "fake"},
            "labels": {"kubernetes.io/hostname": NODE_NAME, "kubernetes.io/os": "linux", "type": "kwok"}
        },
        "spec": {},
        "status": {
            "allocatable": {"cpu": "32", "memory": "256Gi", "pods": "110"},
            "capacity": {"cpu": "32", "memory": "256Gi", "pods": "110"}
        }
    }))
    .map_err(|e| std::io::Error::other(e.to_string()))?;
    Api::<Node>::all(client.clone()).create(&PostParams::default(), &node).await?;
    Ok(())
}

pub(crate) fn node_ready(node: &Node) -> bool {
    let conditions = node.status.as_ref().and_then(|s| s.conditions.as_ref());
    conditions.is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn etcd_healthy(port: u16) -> bool {
    use std::io::{Read, Write};
    let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    if stream.write_all(b"GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").is_err() {
        return false;
    }
    let mut response = String::new();
    let _ = stream.read_to_string(&mut response);
    response.contains(r#""health":"true""#)
}

/// Polls `probe` every 50 ms until it returns a value or `timeout` passes.
pub async fn wait_until<T, F, Fut>(timeout: Duration, mut probe: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(value) = probe().await {
            return Some(value);
        }
        if tokio::time::Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn free_ports<const N: usize>() -> Result<[u16; N], Error> {
    // Hold every listener until all ports are chosen so no two are the same.
    let listeners = (0..N).map(|_| TcpListener::bind("127.0.0.1:0")).collect::<Result<Vec<_>, _>>()?;
    let mut ports = [0; N];
    for (port, listener) in ports.iter_mut().zip(&listeners) {
        *port = listener.local_addr()?.port();
    }
    Ok(ports)
}

fn random_suffix() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(Instant::now().elapsed().as_nanos());
    format!("{:08x}", hasher.finish() as u32)
}
