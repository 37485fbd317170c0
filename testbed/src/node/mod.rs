//! A real node beside the kwok one: containerd (the main pin, or another release of the window: see
//! [`ContainerdRelease`]) with runc and the CNI bridge, kubelet, kube-proxy and CoreDNS, all built from pinned sources
//! by `hack/tools.sh`.
//!
//! The daemons run in the node's own network namespace (a veth to the machine; see [`host`]) and share one
//! private mount namespace whose /run, /var/lib and /var/log are fresh tmpfs mounts and whose /etc is an overlay
//! of the machine's (what the node writes there, `/etc/containerd/certs.d` for one, stays the node's), held open by
//! a `sleep` that is the first component started. So the node writes nothing outside the testbed's directory and that namespace,
//! and everything it mounted vanishes when its last process exits.

mod config;
mod pause;
pub use config::PAUSE_IMAGE;
pub(crate) mod host;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Instant;

use k8s_openapi::api::core::v1::{ConfigMap, Node};
use kube::api::{Api, Patch, PatchParams};

use crate::components::Recipe;
use crate::{ControlPlane, Error};
pub use host::{HostNetwork, cgroup_dirs};
use xtask::image::{Image, ImageSpec};

/// The real node's name (and its kubelet's identity, `system:node:testbed-real`).
pub const REAL_NODE_NAME: &str = "testbed-real";

/// Which real node: the first (every real-node run has it) or the second, which a test starts when it needs a
/// node that joins later ([`crate::Options::second_node`]). Each has its own name, directory, components, pod
/// subnet and network namespace; they share the control plane and the containerd release.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Slot {
    First,
    Second,
}

impl Slot {
    pub fn node_name(self) -> String {
        match self {
            Slot::First => REAL_NODE_NAME.into(),
            Slot::Second => format!("{REAL_NODE_NAME}-2"),
        }
    }

    /// Its directory under the control plane's: `node`, `node-2`.
    pub(crate) fn dir_name(self) -> &'static str {
        match self {
            Slot::First => "node",
            Slot::Second => "node-2",
        }
    }

    /// A component's name in the control plane's list: `kubelet`, `kubelet-2`.
    pub(crate) fn component(self, name: &str) -> String {
        match self {
            Slot::First => name.into(),
            Slot::Second => format!("{name}-2"),
        }
    }

    pub(crate) fn pod_subnet(self) -> &'static str {
        match self {
            Slot::First => "10.88.0.0/24",
            Slot::Second => "10.88.1.0/24",
        }
    }
}
/// The taint the kwok node gets while a real node runs, so pods land on the real one unless they tolerate it.
pub const SIMULATED_TAINT: &str = "testbed.local/simulated";

/// The node components in start order; the namespace holder comes first.
const HOLDER: &str = "node-namespace";
const COMPONENTS: [&str; 4] = ["containerd", "kubelet", "kube-proxy", "coredns"];

/// The containerd release of the main pin (tools/containerd), the newest end of the window.
pub const CONTAINERD_MAIN_MINOR: &str = "2.4";
/// The containerd releases the real node can run, oldest first: what kind, k3s, minikube and MicroK8s ship.
pub const CONTAINERD_WINDOW: [&str; 4] = ["1.7", "2.2", "2.3", CONTAINERD_MAIN_MINOR];

/// The containerd release the real node runs: `LRP_CONTAINERD` (`1.7`, `2.2`, `2.3`, built by hack/tools.sh into
/// `containerd-<minor>/` beside the other tools), else the main pin. The node checks what the started containerd
/// reports against it, so a wrong binary can never pass for another release.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContainerdRelease {
    /// `2.4`.
    pub minor: String,
}

impl ContainerdRelease {
    pub fn from_env() -> Result<Self, Error> {
        let minor = std::env::var("LRP_CONTAINERD").ok().filter(|v| !v.is_empty());
        let minor = minor.unwrap_or_else(|| CONTAINERD_MAIN_MINOR.into());
        if !CONTAINERD_WINDOW.contains(&minor.as_str()) {
            return Err(Error::Version(format!(
                "LRP_CONTAINERD={minor:?} is not a containerd release of the window ({})",
                CONTAINERD_WINDOW.join(", ")
            )));
        }
        Ok(Self { minor })
    }

    /// Where its containerd, shim and ctr are.
    pub(crate) fn bin_dir(&self, tools: &Path) -> PathBuf {
        if self.minor == CONTAINERD_MAIN_MINOR {
            tools.to_path_buf()
        } else {
            tools.join(format!("containerd-{}", self.minor))
        }
    }

    /// The config version it reads natively: 2 for containerd 1.x, 3 for 2.x.
    pub fn config_version(&self) -> u8 {
        if self.minor.starts_with("1.") { 2 } else { 3 }
    }
}

/// How the real node's kube-proxy serves Services: `LRP_KUBE_PROXY`, `iptables` (the default) or `nftables` (GA since
/// Kubernetes 1.33, Talos's default, a kind and k0s option), which does not serve NodePorts on the node's loopback.
/// The node checks the mode the started kube-proxy reports (`/proxyMode`), so a run never passes for the other mode.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ProxyMode {
    #[default]
    Iptables,
    Nftables,
}

impl ProxyMode {
    pub fn from_env() -> Result<Self, Error> {
        Self::parse(std::env::var("LRP_KUBE_PROXY").ok().as_deref())
    }

    /// `LRP_KUBE_PROXY`'s value: unset or empty is iptables.
    pub fn parse(value: Option<&str>) -> Result<Self, Error> {
        match value.filter(|v| !v.is_empty()) {
            None | Some("iptables") => Ok(Self::Iptables),
            Some("nftables") => Ok(Self::Nftables),
            Some(other) => Err(Error::Version(format!("LRP_KUBE_PROXY={other:?} is not iptables or nftables"))),
        }
    }

    /// As kube-proxy's `mode` and its `/proxyMode` name it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Iptables => "iptables",
            Self::Nftables => "nftables",
        }
    }
}

/// The real node's container runtime: `LRP_NODE_RUNTIME`, `containerd` (the default, its release chosen by
/// `LRP_CONTAINERD`) or `crio` (CRI-O of tools/crio, behind Debian's conmon and the same runc). The node checks what
/// its Node reports (`containerRuntimeVersion`), so a run never passes for the other runtime.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Runtime {
    #[default]
    Containerd,
    Crio,
}

impl Runtime {
    pub fn from_env() -> Result<Self, Error> {
        Self::parse(std::env::var("LRP_NODE_RUNTIME").ok().as_deref())
    }

    /// `LRP_NODE_RUNTIME`'s value: unset or empty is containerd.
    pub fn parse(value: Option<&str>) -> Result<Self, Error> {
        match value.filter(|v| !v.is_empty()) {
            None | Some("containerd") => Ok(Self::Containerd),
            Some("crio") => Ok(Self::Crio),
            Some(other) => Err(Error::Version(format!("LRP_NODE_RUNTIME={other:?} is not containerd or crio"))),
        }
    }

    /// Its component's name, as the node agent's `--runtime` names it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Containerd => "containerd",
            Self::Crio => "crio",
        }
    }

    /// What its Node's `containerRuntimeVersion` starts with.
    fn reported_prefix(self) -> &'static str {
        match self {
            Self::Containerd => "containerd://",
            Self::Crio => "cri-o://",
        }
    }
}

/// What a run chose for its real nodes, each from the environment: the runtime (and containerd's release) and
/// kube-proxy's mode.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeSoftware {
    pub runtime: Runtime,
    pub containerd: ContainerdRelease,
    pub proxy: ProxyMode,
}

impl NodeSoftware {
    pub fn from_env() -> Result<Self, Error> {
        Ok(Self {
            runtime: Runtime::from_env()?,
            containerd: ContainerdRelease::from_env()?,
            proxy: ProxyMode::from_env()?,
        })
    }
}

/// Whether this machine can run a real node; the error names what it lacks (root, cgroups, a program).
pub fn preflight() -> Result<(), Error> {
    host::preflight()
}

/// What tests use of the real node.
#[derive(Debug)]
pub struct RealNode {
    name: String,
    network: HostNetwork,
    /// Its own directory (`<plane>/node`).
    dir: PathBuf,
    /// Where its containerd release's binaries are (ctr among them).
    containerd_bin: PathBuf,
    release: ContainerdRelease,
    runtime: Runtime,
    /// Where the tools are (crioimage among them).
    tools: PathBuf,
    proxy: ProxyMode,
    /// The control plane's certificates, the node's own root CA among them.
    pki: PathBuf,
}

impl RealNode {
    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn network(&self) -> &HostNetwork {
        &self.network
    }

    /// The containerd release it runs (with containerd).
    pub fn containerd_release(&self) -> &ContainerdRelease {
        &self.release
    }

    /// The container runtime it runs.
    pub fn runtime(&self) -> Runtime {
        self.runtime
    }

    /// The mode its kube-proxy runs in (checked against what kube-proxy reports).
    pub fn proxy_mode(&self) -> ProxyMode {
        self.proxy
    }

    /// The mode kube-proxy reports on its metrics port (`/proxyMode`), if it answers.
    fn reported_proxy_mode(&self) -> Option<String> {
        let output = self
            .command("curl")
            .args(["--silent", "--fail", "--max-time", "2", &format!("http://{}/proxyMode", config::PROXY_METRICS)])
            .output()
            .ok()?;
        output.status.success().then(|| String::from_utf8_lossy(&output.stdout).trim().to_string())
    }

    /// A serving certificate for `names` that this node trusts through its system roots, with no CA in any of its
    /// files: as a public registry's, or one signed by the CA an admin installed on every node.
    pub fn trusted_tls(&self, names: &[&str]) -> Result<crate::PrivateTls, Error> {
        crate::pki::node_trusted_tls(&self.pki, names)
    }

    /// A command that runs in the node's network namespace: there `localhost` is the node, as it is for a
    /// developer on a single-node cluster such as MicroK8s or minikube's none driver.
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut command = Command::new("nsenter");
        command.arg(format!("--net=/run/netns/{}", self.network.netns)).arg("--").arg(program);
        command
    }

    /// Loads an image into the node's runtime, where kubelet finds it without a pull.
    pub fn import(&self, image: &Image) -> Result<(), Error> {
        if self.runtime == Runtime::Crio {
            return import_into_crio(&self.tools, &self.dir, image);
        }
        let output = Command::new(self.containerd_bin.join("ctr"))
            .arg("--address")
            .arg(self.dir.join("containerd.sock"))
            .args(["-n", "k8s.io", "images", "import"])
            .arg(&image.archive)
            .output()?;
        checked(&format!("importing {}", image.name), output).map(drop)
    }

    /// `ctr` of the node's containerd release.
    pub fn ctr_binary(&self) -> PathBuf {
        self.containerd_bin.join("ctr")
    }

    /// The socket the node's containerd serves its API on (`ctr --address`).
    pub fn containerd_socket(&self) -> PathBuf {
        self.dir.join("containerd.sock")
    }

    /// Fails unless the running containerd reports a version of the release asked for.
    fn check_release(&self) -> Result<(), Error> {
        let output = Command::new(self.containerd_bin.join("ctr"))
            .arg("--address")
            .arg(self.dir.join("containerd.sock"))
            .arg("version")
            .output()?;
        let output = checked("asking containerd its version", output)?;
        let text = String::from_utf8_lossy(&output.stdout);
        // `Server:` then `  Version:  v1.7.35`.
        let server = text.split("Server:").nth(1).unwrap_or_default();
        let version = server.lines().find_map(|l| l.trim().strip_prefix("Version:")).map(str::trim);
        match version {
            Some(v) if v.strip_prefix('v').unwrap_or(v).starts_with(&format!("{}.", self.release.minor)) => Ok(()),
            _ => Err(Error::Version(format!(
                "the node's containerd reports {:?}, not the {} this run asked for (LRP_CONTAINERD)",
                version.unwrap_or("no version"),
                self.release.minor
            ))),
        }
    }

    /// containerd's registry hosts directory (its `config_path`): where a node agent writes `hosts.toml` files.
    pub fn hosts_dir(&self) -> PathBuf {
        self.dir.join(config::HOSTS_DIR)
    }

    /// `path` (absolute) as the node's daemons see it, read from the machine: the node's /etc is its own.
    pub fn path_on_node(&self, path: &str) -> PathBuf {
        let holder = std::fs::read_to_string(self.dir.join("holder.pid")).unwrap_or_default();
        PathBuf::from(format!("/proc/{}/root{path}", holder.trim()))
    }

    /// [`Self::hosts_dir`] as the node's daemons and pods see it, and as containerd's `config_path` names it: the
    /// same path on every node (`nodeAgent.configPath`). On CRI-O's node, its /etc/containers.
    pub fn config_path_on_node(&self) -> String {
        match self.runtime {
            Runtime::Containerd => config::Paths::on_node(config::HOSTS_DIR),
            Runtime::Crio => "/etc/containers".into(),
        }
    }

    /// The runtime's config file as the node sees it, the same path on every node (`nodeAgent.runtimeConfig`).
    pub fn runtime_config_on_node(&self) -> String {
        match self.runtime {
            Runtime::Containerd => config::Paths::on_node("containerd.toml"),
            Runtime::Crio => config::Paths::on_node("crio.conf"),
        }
    }

    /// CRI-O's node: its /etc/containers, read from the machine (drop-ins in `registries.conf.d`, CAs in `certs.d`).
    pub fn containers_dir(&self) -> PathBuf {
        self.dir.join(config::CONTAINERS_DIR)
    }

    /// Where CRI-O would pull `image` from, in order, as CRI-O's own image library (the version it links) resolves
    /// it from the registry configuration in `containers_dir` (the node's: [`Self::containers_dir`]): one
    /// `<location> insecure=<bool> <reference>` per line.
    pub fn crio_pull_sources(&self, containers_dir: &Path, image: &str) -> Result<Vec<String>, Error> {
        let dir = containers_dir;
        let output = Command::new(self.tools.join("crioimage"))
            .arg("resolve")
            .arg(dir.join("registries.conf"))
            .arg(dir.join("registries.conf.d"))
            .arg(image)
            .output()?;
        let output = checked(&format!("resolving {image}"), output)?;
        Ok(String::from_utf8_lossy(&output.stdout).lines().map(str::to_string).collect())
    }

    /// The most memory the node's daemons and pods used together so far.
    pub fn peak_memory_bytes(&self) -> Option<u64> {
        self.network.peak_memory_bytes()
    }
}

/// Recipes for the node's components. Each joins the node's cgroup, then enters its network and mount namespaces.
pub(crate) fn recipes(
    tools: &Path,
    dir: &Path,
    slot: Slot,
    network: &HostNetwork,
    cgroup_procs: &[PathBuf],
    software: &NodeSoftware,
) -> BTreeMap<String, Recipe> {
    let release = &software.containerd;
    let node = |file: &str| dir.join(slot.dir_name()).join(file).display().to_string();
    let join_cgroup = cgroup_procs.iter().map(|p| format!("echo $$ >'{}'\n", p.display())).collect::<String>();
    // containerd looks its shim up in PATH: its own release's comes first.
    let containerd_bin = release.bin_dir(tools);
    let path = format!(
        "export PATH='{}':'{}':/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n",
        containerd_bin.display(),
        tools.display()
    );
    let holder = format!(
        "{join_cgroup}exec unshare --mount --propagation private -- sh -c \
         'mount -t tmpfs -o mode=755 tmpfs /run && mount -t tmpfs tmpfs /var/lib && mount -t tmpfs tmpfs /var/log \
         && mkdir -p {mount} && mount --bind {own} {mount} \
         && mkdir -p /run/testbed-etc/upper /run/testbed-etc/work \
         && mount -t overlay overlay -o lowerdir=/etc,upperdir=/run/testbed-etc/upper,workdir=/run/testbed-etc/work /etc \
         && mkdir -p /etc/ssl/certs && cp {mount}/{roots}.crt /etc/ssl/certs/ {containers}\
         && echo $$ >{pid} && exec sleep infinity'",
        mount = config::NODE_MOUNT,
        roots = crate::pki::NODE_ROOTS,
        own = dir.join(slot.dir_name()).display(),
        pid = node("holder.pid"),
        // CRI-O's node: its /etc/containers is the node directory's, so a test reads what the agent wrote there.
        containers = match software.runtime {
            Runtime::Containerd => String::new(),
            // And no huge page sizes: this VM has hugetlb on the cgroup2 hierarchy only, which runc's cgroup v1
            // manager cannot reach ("cannot set hugetlb limit: container could not join or create cgroup"), and
            // CRI-O, unlike containerd (tolerate_missing_hugetlb_controller), passes on the per-size limits kubelet
            // sends for every size in /sys/kernel/mm/hugepages; with none there, kubelet sends none.
            Runtime::Crio => format!(
                "&& mkdir -p /etc/containers && mount --bind {mount}/{dir} /etc/containers \
                 && mount -t tmpfs -o ro tmpfs /sys/kernel/mm/hugepages ",
                mount = config::NODE_MOUNT,
                dir = config::CONTAINERS_DIR
            ),
        },
    );
    let enter = format!(
        "{join_cgroup}{path}exec nsenter --net=/run/netns/{netns} --mount=/proc/$(cat '{pid}')/ns/mnt -- \"$@\"",
        netns = network.netns,
        pid = node("holder.pid"),
    );
    let tool = |name: &str| tools.join(name).display().to_string();
    let runtime = match software.runtime {
        Runtime::Containerd => vec![
            containerd_bin.join("containerd").display().to_string(),
            format!("--config={}", node("containerd.toml")),
        ],
        Runtime::Crio => vec![
            tool("crio"),
            format!("--config={}", config::Paths::on_node("crio.conf")),
            format!("--config-dir={}", config::Paths::on_node("crio.conf.d")),
        ],
    };
    let commands: [(&str, Vec<String>); 4] = [
        (software.runtime.as_str(), runtime),
        (
            "kubelet",
            vec![
                tool("kubelet"),
                format!("--config={}", node("kubelet.yaml")),
                format!("--kubeconfig={}", node("kubelet.kubeconfig")),
                format!("--hostname-override={}", slot.node_name()),
                format!("--node-ip={}", network.node_ip),
                "--v=1".into(),
            ],
        ),
        ("kube-proxy", vec![tool("kube-proxy"), format!("--config={}", node("kube-proxy.yaml"))]),
        ("coredns", vec![tool("coredns"), "-conf".into(), node("Corefile")]),
    ];
    let shell = |script: &str, command: Vec<String>| Recipe {
        program: PathBuf::from("/bin/sh"),
        args: [vec!["-c".to_string(), script.to_string(), "sh".to_string()], command].concat(),
    };
    let mut recipes = BTreeMap::from([(slot.component(HOLDER), shell(&holder, Vec::new()))]);
    for (name, command) in commands {
        recipes.insert(slot.component(name), shell(&enter, command));
    }
    recipes
}

/// Writes every configuration file the node's daemons read.
pub(crate) fn write_configs(
    dir: &Path,
    tools: &Path,
    pki: &crate::pki::Pki,
    server: &str,
    slot: Slot,
    network: &HostNetwork,
    software: &NodeSoftware,
) -> Result<(), Error> {
    let node = dir.join(slot.dir_name());
    let paths = config::Paths { dir: &node, tools, ca_cert: &pki.ca_cert };
    let (node_cert, node_key) = pki.node_credentials(slot);
    std::fs::create_dir_all(node.join("cni"))?;
    std::fs::create_dir_all(node.join(config::HOSTS_DIR))?;
    let kubeconfig = |cert: &Path, key: &Path| crate::components::kubeconfig_yaml(server, &pki.ca_cert, cert, key);
    let files = [
        ("containerd.toml", config::containerd(&paths, &software.containerd)),
        ("crio.conf", config::crio(&paths)),
        ("cni/10-testbed.conflist", config::cni_conflist(slot.pod_subnet())),
        ("kubelet.yaml", config::kubelet(&paths, network.node_ip, &network.cgroup, software.runtime)),
        ("kube-proxy.yaml", config::kube_proxy(&paths, &slot.node_name(), software.proxy)),
        ("Corefile", config::corefile(&paths, network.node_ip)),
        ("resolv.conf", String::new()),
        ("kubelet.kubeconfig", kubeconfig(&node_cert, &node_key)),
        ("kube-proxy.kubeconfig", kubeconfig(&pki.proxy_cert, &pki.proxy_key)),
        // CoreDNS lists Services, EndpointSlices and Namespaces cluster-wide; admin is more than it needs, but the
        // node is throw-away and its kubelet and kube-proxy have identities of their own.
        ("coredns.kubeconfig", kubeconfig(&pki.admin_cert, &pki.admin_key)),
    ];
    for (file, contents) in files {
        std::fs::write(node.join(file), contents)?;
    }
    if software.runtime == Runtime::Crio {
        let containers = node.join(config::CONTAINERS_DIR);
        std::fs::create_dir_all(containers.join("registries.conf.d"))?;
        std::fs::create_dir_all(node.join("crio.conf.d"))?;
        for (file, contents) in config::containers_files() {
            std::fs::write(containers.join(file), contents)?;
        }
        let runc = node.join(config::RESTRICTED_RUNC);
        std::fs::write(&runc, config::restricted_runc(&paths))?;
        std::fs::set_permissions(&runc, std::os::unix::fs::PermissionsExt::from_mode(0o755))?;
    }
    // The node's own root CA, which its holder adds to the system roots of the node's `/etc`.
    let roots = format!("{}.crt", crate::pki::NODE_ROOTS);
    std::fs::copy(pki.ca_cert.with_file_name(&roots), node.join(&roots))?;
    Ok(())
}

impl ControlPlane {
    /// Rewrites the first real node's containerd config with `edit` and restarts containerd (its containers keep
    /// running), as an admin does after changing it; returns once containerd answers again.
    pub async fn reconfigure_containerd(&self, edit: impl FnOnce(&str) -> String) -> Result<(), Error> {
        let node = self.real_node().ok_or_else(|| Error::NodeUnsupported("no real node was started".into()))?;
        let config = node.dir.join("containerd.toml");
        let edited = edit(&std::fs::read_to_string(&config)?);
        self.stop_component("containerd")?;
        std::fs::write(&config, edited)?;
        self.start_component("containerd")?;
        let (ctr, socket) = (node.containerd_bin.join("ctr"), node.dir.join("containerd.sock"));
        self.wait_for("containerd to answer again", || {
            let answers = answers(&ctr, &socket);
            async move { answers }
        })
        .await
    }

    /// Starts the real node's daemons and waits until the node is Ready.
    pub(crate) async fn start_real_node(
        &self,
        client: &kube::Client,
        slot: Slot,
        network: &HostNetwork,
        software: &NodeSoftware,
    ) -> Result<RealNode, Error> {
        let (release, proxy) = (&software.containerd, software.proxy);
        let started = Instant::now();
        let dir = self.dir().join(slot.dir_name());
        // The kwok node would take pods meant for the real one.
        let taint = serde_json::json!({"spec": {"taints": [{"key": SIMULATED_TAINT, "effect": "NoSchedule"}]}});
        Api::<Node>::all(client.clone())
            .patch(crate::NODE_NAME, &PatchParams::default(), &Patch::Merge(&taint))
            .await?;

        self.start_component(&slot.component(HOLDER))?;
        let holder_pid = dir.join("holder.pid");
        self.wait_for("the node's mount namespace", || {
            let ready = holder_pid.exists();
            async move { ready }
        })
        .await?;
        let containerd_bin = release.bin_dir(self.tools());
        let node = RealNode {
            name: slot.node_name(),
            network: network.clone(),
            dir: dir.clone(),
            containerd_bin: containerd_bin.clone(),
            release: release.clone(),
            runtime: software.runtime,
            tools: self.tools().to_path_buf(),
            proxy,
            pki: self.dir().join("pki"),
        };
        let pause = pause::pause(&self.dir().join("images"))?;
        match software.runtime {
            Runtime::Containerd => {
                self.start_component(&slot.component("containerd"))?;
                let ctr = containerd_bin.join("ctr");
                let socket = dir.join("containerd.sock");
                self.wait_for("containerd to answer", || {
                    let answers = answers(&ctr, &socket);
                    async move { answers }
                })
                .await?;
                node.check_release()?;
                node.import(&pause)?;
            }
            Runtime::Crio => {
                // In the store before CRI-O starts, which takes its pause image from there.
                node.import(&pause)?;
                self.start_component(&slot.component("crio"))?;
                let (crio, socket) = (self.tools().join("crio"), dir.join(config::CRIO_SOCKET));
                self.wait_for("CRI-O to answer", || {
                    let answers = Command::new(&crio)
                        .arg("status")
                        .arg(format!("--socket={}", socket.display()))
                        .arg("info")
                        .output()
                        .is_ok_and(|o| o.status.success());
                    async move { answers }
                })
                .await?;
            }
        }
        host::record_sysctls(&dir)?;
        for name in &COMPONENTS[1..] {
            self.start_component(&slot.component(name))?;
        }
        let name = slot.node_name();
        self.wait_for("the real node to be Ready", || {
            let api: Api<Node> = Api::all(client.clone());
            let name = name.clone();
            async move { api.get_opt(&name).await.ok().flatten().is_some_and(|n| crate::node_ready(&n)) }
        })
        .await?;
        let runtime_version = Api::<Node>::all(client.clone()).get(&name).await?;
        let runtime_version = runtime_version.status.and_then(|s| s.node_info).map(|i| i.container_runtime_version);
        if !runtime_version.as_deref().is_some_and(|v| v.starts_with(software.runtime.reported_prefix())) {
            return Err(Error::Version(format!(
                "the node reports runtime {:?}, not the {} this run asked for (LRP_NODE_RUNTIME)",
                runtime_version.as_deref().unwrap_or("none"),
                software.runtime.as_str()
            )));
        }
        let mut reported = None;
        let answered = self
            .wait_for("kube-proxy to report its mode", || {
                reported = node.reported_proxy_mode();
                let answered = reported.is_some();
                async move { answered }
            })
            .await;
        if answered.is_err() || reported.as_deref() != Some(proxy.as_str()) {
            return Err(Error::Version(format!(
                "the node's kube-proxy reports mode {:?}, not the {} this run asked for (LRP_KUBE_PROXY)",
                reported.as_deref().unwrap_or("none"),
                proxy.as_str()
            )));
        }
        // kubeadm and kind keep kube-proxy's configuration in this ConfigMap, which their kube-proxy pods read and
        // `doctor` reads the mode from; this node's kube-proxy reads the same text from its file.
        let config = std::fs::read_to_string(dir.join("kube-proxy.yaml"))?;
        let configmap = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "kube-proxy", "namespace": "kube-system"}, "data": {"config.conf": config}});
        Api::<ConfigMap>::namespaced(client.clone(), "kube-system")
            .patch("kube-proxy", &PatchParams::apply("testbed").force(), &Patch::Apply(&configmap))
            .await?;
        let runtime = match software.runtime {
            Runtime::Containerd => format!("containerd {}", release.minor),
            Runtime::Crio => runtime_version.unwrap_or_default(),
        };
        eprintln!(
            "[testbed] real node {name} ({runtime}, kube-proxy {}) Ready in {:.1}s",
            proxy.as_str(),
            started.elapsed().as_secs_f64()
        );
        Ok(node)
    }
}

/// Whether containerd answers on `socket`.
fn answers(ctr: &Path, socket: &Path) -> bool {
    Command::new(ctr).arg("--address").arg(socket).arg("version").output().is_ok_and(|o| o.status.success())
}

fn checked(what: &str, output: Output) -> Result<Output, Error> {
    if output.status.success() {
        return Ok(output);
    }
    Err(Error::Io(std::io::Error::other(format!(
        "{what} failed ({}): {}",
        output.status,
        String::from_utf8_lossy(&output.stderr).trim()
    ))))
}

/// Copies `image`'s OCI layout into the CRI-O node's image store, inside the node's mount namespace (its store is on
/// the node's private /var/lib), with the image library CRI-O links; CRI-O may be running (the store is locked).
fn import_into_crio(tools: &Path, dir: &Path, image: &Image) -> Result<(), Error> {
    let holder = std::fs::read_to_string(dir.join("holder.pid"))?;
    // The name ctr would give it: the layout's own (with its tag), else the image's.
    let index: serde_json::Value = serde_json::from_slice(&std::fs::read(image.layout.join("index.json"))?)
        .map_err(|error| std::io::Error::other(format!("{}: {error}", image.layout.display())))?;
    let named = index["manifests"][0]["annotations"]["io.containerd.image.name"].as_str().unwrap_or(&image.name);
    let output = Command::new("nsenter")
        .arg(format!("--mount=/proc/{}/ns/mnt", holder.trim()))
        .arg("--")
        .arg(tools.join("crioimage"))
        .args(["import", "/var/lib/containers/storage", "/run/containers/storage"])
        .arg(&image.layout)
        .arg(named)
        .output()?;
    checked(&format!("importing {} into CRI-O's store", image.name), output).map(drop)
}

/// Images every real-node test can use, built from the tools already on this machine.
pub fn crane_image(tools: &Path, dir: &Path) -> Result<Image, Error> {
    ImageSpec {
        name: "testbed.local/crane:1".into(),
        // authregistry: the same registry behind basic authentication (tools/crane/authregistry).
        files: vec![("/crane".into(), tools.join("crane")), ("/authregistry".into(), tools.join("authregistry"))],
        entrypoint: vec!["/crane".into()],
        ..ImageSpec::default()
    }
    .write(dir, "crane")
    .map_err(Error::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_proxy_mode_is_iptables_unless_nftables_is_asked_for_and_anything_else_is_refused() {
        assert_eq!(ProxyMode::parse(None).unwrap(), ProxyMode::Iptables);
        assert_eq!(ProxyMode::parse(Some("")).unwrap(), ProxyMode::Iptables);
        assert_eq!(ProxyMode::parse(Some("nftables")).unwrap().as_str(), "nftables");
        let refused = ProxyMode::parse(Some("ipvs")).unwrap_err().to_string();
        assert!(refused.contains("LRP_KUBE_PROXY=\"ipvs\" is not iptables or nftables"), "{refused}");
    }
}
