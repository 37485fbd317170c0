//! Command-line flags (each with an environment twin) and their validation. Anything invalid is rejected by clap
//! with exit status 2 and one line naming the option, before the cluster is touched.

use std::time::Duration;

use clap::{Parser, ValueEnum};
use kube::core::{Expression, Selector};

use crate::hosting::Field;
pub use crate::settings::NodeAddress;
use crate::settings::Settings;
use crate::watching::{is_dns_label, is_dns_name, is_object_name};

#[derive(Clone, Debug, Parser)]
#[command(
    name = "local-registry-publisher",
    version,
    // The controller's flags go with no command; a command takes only its own, after its name.
    args_conflicts_with_subcommands = true,
    about = "Keeps kube-public/local-registry-hosting (KEP-1755) true to the registry running in the cluster.",
    long_about = "Keeps kube-public/local-registry-hosting (KEP-1755) true to the registry running in the cluster.\n\n\
        Label the registry's Service (or the Deployment, StatefulSet or DaemonSet behind it) with\n\
        local-registry-publisher.io/registry=true, or run minikube's or MicroK8s's registry addon, and the\n\
        ConfigMap that Tilt, Skaffold, ctlptl and in-cluster builders read follows it: ports, Service type,\n\
        load-balancer address, readiness and deletion.\n\n\
        A registry counts only in a namespace allowed to name the cluster's registry: one a cluster admin labelled\n\
        local-registry-publisher.io/registries=allowed, one named by --allowed-namespaces or --watch-namespaces,\n\
        or the built-in addons' own."
)]
pub struct Args {
    /// Without a command, run the controller.
    #[command(subcommand)]
    pub command: Option<Command>,

    #[command(flatten)]
    pub publish: PublishArgs,

    #[command(flatten)]
    pub node_plan: NodePlanArgs,

    #[command(flatten)]
    pub operation: OperationArgs,

    #[command(flatten)]
    pub cluster: ClusterArgs,

    #[command(flatten)]
    pub log: LogArgs,
}

/// Which cluster to talk to.
#[derive(Clone, Debug, Default, clap::Args)]
pub struct ClusterArgs {
    /// Path to a kubeconfig; without it, KUBECONFIG, ~/.kube/config or the in-cluster service account is used.
    #[arg(long, env = "LRP_KUBECONFIG", value_name = "PATH")]
    pub kubeconfig: Option<std::path::PathBuf>,

    /// Kubeconfig context to use instead of the current one.
    #[arg(long, env = "LRP_CONTEXT")]
    pub context: Option<String>,
}

/// How the process logs.
#[derive(Clone, Debug, clap::Args)]
pub struct LogArgs {
    /// Log format.
    #[arg(long, env = "LRP_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// Log level or tracing filter (error, warn, info, debug, trace, or e.g. "info,kube=debug"); RUST_LOG wins.
    #[arg(long, env = "LRP_LOG_LEVEL", default_value = "info", value_parser = parse_log_filter)]
    pub log_level: String,
}

impl Default for LogArgs {
    fn default() -> Self {
        Self { log_format: LogFormat::Text, log_level: "info".into() }
    }
}

/// Commands for the people who use the registry (see `cli`). As a kubectl plugin: `kubectl registry-hosting get`.
#[derive(Clone, Debug, clap::Subcommand)]
pub enum Command {
    /// Print the published document and what each reader (Tilt and ctlptl, Skaffold, in-cluster builders,
    /// line-based readers) will use. Exit status: 0 every reader accepts it; 3 nothing is published; 4 a reader
    /// rejects or misreads it; 5 the cluster could not be read.
    Get {
        #[command(flatten)]
        cluster: ClusterArgs,
        #[command(flatten)]
        target: TargetArgs,
        /// Output format.
        #[arg(short, long, value_enum, default_value_t = OutputFormat::Text)]
        output: OutputFormat,
    },
    /// Say why readers see what they see: probe the published host from this machine (GET /v2/ over HTTPS, then
    /// HTTP), list every registry candidate with why it is or is not published, say whether the ConfigMap is ours,
    /// foreign or stale, and which controller pods run and lead. Exit status as for get, 4 when anything is wrong.
    Doctor {
        #[command(flatten)]
        cluster: ClusterArgs,
        /// The ConfigMap to check, and the settings to judge it with when no running controller publishes it.
        #[command(flatten)]
        publish: PublishArgs,
        /// Also probe hostFromClusterNetwork from a short-lived pod running IMAGE (this program), then remove it.
        #[arg(long)]
        from_cluster: bool,
        /// The image the probe pod runs: this program's.
        #[arg(long, default_value = concat!("local-registry-publisher:", env!("CARGO_PKG_VERSION")))]
        image: String,
        /// Namespace of the probe pod.
        #[arg(long, default_value = "default", value_parser = parse_namespace)]
        probe_namespace: String,
    },
    /// Keep this node's containerd registry hosts (hosts.toml under config_path) true to the controller's node
    /// plan: what the chart's node-agent DaemonSet runs on every node (nodeAgent.enabled).
    NodeAgent {
        #[command(flatten)]
        cluster: ClusterArgs,
        #[command(flatten)]
        agent: NodeAgentArgs,
        #[command(flatten)]
        log: LogArgs,
    },
    /// Print the CustomResourceDefinition of NodePullState, generated from its type: the chart's crds/ file
    /// (`make manifests` writes it).
    #[command(hide = true)]
    Crd,
    /// Probe one registry address (GET /v2/ over HTTPS, then HTTP) and exit 0 if a registry answers; what
    /// doctor --from-cluster runs in its pod.
    #[command(hide = true)]
    Probe { address: String },
    /// Delete the published ConfigMap if this controller wrote it (only our key when other keys share it), then
    /// exit: what the chart's uninstall hook runs, so readers are not left with a stale registry. Exit status 0
    /// when nothing of ours is left, 1 when the cluster refused.
    Withdraw {
        #[command(flatten)]
        cluster: ClusterArgs,
        #[command(flatten)]
        target: TargetArgs,
        #[command(flatten)]
        pull: PullSecretArgs,
        #[command(flatten)]
        log: LogArgs,
        /// First scale this Deployment (in POD_NAMESPACE) to zero and wait until its pods have exited, so the
        /// controller it runs cannot publish again after the withdrawal. The chart's hook names its own.
        #[arg(long, value_name = "NAME", value_parser = parse_dns_subdomain)]
        stop_deployment: Option<String>,
    },
    /// Print the ConfigMap the controller would publish for the Services in FILE ("-" for stdin), without a
    /// cluster: every Service counts as ready and allowed; the controller's flags apply. Exit status: 0 printed;
    /// 3 no registry Service in the input; 4 a registry has a problem (said on stderr).
    Render {
        #[command(flatten)]
        source: SourceArgs,
        #[command(flatten)]
        target: TargetArgs,
        #[command(flatten)]
        values: ValueArgs,
        /// A YAML file of Services (several documents allowed; other kinds are skipped).
        #[arg(short = 'f', long = "filename", value_name = "FILE")]
        filename: String,
    },
    /// Print a kubernetes.io/dockerconfigjson Secret for a registry, with the password or token read from standard
    /// input: one entry per --server, and a token alone works (kubectl create secret docker-registry insists on a
    /// username and writes one address). Exit status 2 when an address or the input is unusable.
    RenderPullSecret {
        /// An address images are pulled or pushed from, host:port; repeat it for each address the registry is
        /// published under (host, hostFromContainerRuntime, hostFromClusterNetwork): the kubelet matches exactly.
        #[arg(long = "server", value_name = "HOST:PORT", required = true)]
        servers: Vec<String>,
        /// User name; without it the token placeholder "oauth2accesstoken" (see docs/pull-secrets.md).
        #[arg(long)]
        username: Option<String>,
        /// Name of the Secret.
        #[arg(long, default_value = "local-registry-pull", value_parser = parse_dns_subdomain)]
        name: String,
        /// Namespace of the Secret; left out when not given.
        #[arg(short = 'n', long, value_parser = parse_namespace)]
        namespace: Option<String>,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    Text,
    Json,
    Yaml,
}

/// What to publish and where: the flags behind [`Settings`], in groups so each command takes only those it uses.
#[derive(Clone, Debug, clap::Args)]
pub struct PublishArgs {
    #[command(flatten)]
    pub source: SourceArgs,
    #[command(flatten)]
    pub trust: TrustArgs,
    #[command(flatten)]
    pub target: TargetArgs,
    #[command(flatten)]
    pub values: ValueArgs,
    #[command(flatten)]
    pub change: ChangeArgs,
    #[command(flatten)]
    pub pull: PullSecretArgs,
}

/// Which Services are registries.
#[derive(Clone, Debug, clap::Args)]
pub struct SourceArgs {
    /// Label selector for registry Services, and for Deployments, StatefulSets and DaemonSets whose pods a
    /// registry Service selects.
    #[arg(long, env = "LRP_REGISTRY_SELECTOR", default_value_t = crate::settings::default_selector(), value_parser = parse_label_selector)]
    pub registry_selector: Selector,

    /// Do not recognise minikube's registry addon (kube-system/registry) or MicroK8s's
    /// (container-registry/registry) unless they carry the selector's label.
    #[arg(long, env = "LRP_NO_BUILTIN_REGISTRIES")]
    pub no_builtin_registries: bool,
}

/// Where registries are looked for, and which namespaces may name the cluster's registry.
#[derive(Clone, Debug, clap::Args)]
pub struct TrustArgs {
    /// Namespaces to watch for registries, comma-separated; all namespaces when empty. Namespaces named here are
    /// allowed to name the cluster's registry.
    #[arg(long, env = "LRP_WATCH_NAMESPACES", value_delimiter = ',', value_parser = parse_namespace)]
    pub watch_namespaces: Vec<String>,

    /// Namespaces allowed to name the cluster's registry, comma-separated, besides those a cluster admin labelled
    /// local-registry-publisher.io/registries=allowed. A registry Service anywhere else is ignored with a Warning
    /// Event, because anyone who may create a Service there could otherwise redirect every push in the cluster.
    #[arg(long, alias = "registry-namespaces", env = "LRP_ALLOWED_NAMESPACES", value_delimiter = ',', value_parser = parse_namespace)]
    pub allowed_namespaces: Vec<String>,
}

/// The published ConfigMap.
#[derive(Clone, Debug, clap::Args)]
pub struct TargetArgs {
    /// Namespace of the published ConfigMap.
    #[arg(long, env = "LRP_CONFIGMAP_NAMESPACE", default_value = "kube-public", value_parser = parse_namespace)]
    pub configmap_namespace: String,

    /// Name of the published ConfigMap.
    #[arg(long, env = "LRP_CONFIGMAP_NAME", default_value = "local-registry-hosting", value_parser = parse_dns_subdomain)]
    pub configmap_name: String,
}

/// How the published values are derived.
#[derive(Clone, Debug, clap::Args)]
pub struct ValueArgs {
    /// Cluster DNS domain used in hostFromClusterNetwork.
    #[arg(long, env = "LRP_CLUSTER_DOMAIN", default_value = "cluster.local", value_parser = parse_cluster_domain)]
    pub cluster_domain: String,

    /// How tools outside the cluster reach a node's hostPort or nodePort: "localhost" (MicroK8s, k3s, Docker
    /// Desktop, kind with port mappings), "internal-ip" (the node's InternalIP: minikube, VMs), or an IP
    /// address or dotted host name.
    #[arg(long, env = "LRP_NODE_ADDRESS", default_value = "localhost", value_parser = parse_node_address)]
    pub node_address: NodeAddress,

    /// Help URL published with the registry, and alone while no registry is usable (unless the registry
    /// Service has its own local-registry-publisher.io/help annotation).
    #[arg(long, env = "LRP_HELP_URL", value_parser = parse_help_url)]
    pub help_url: Option<String>,
}

/// When the controller changes what is published.
#[derive(Clone, Debug, clap::Args)]
pub struct ChangeArgs {
    /// How long a published registry may have no ready endpoint before it is withdrawn, so a rolling restart
    /// does not flap the ConfigMap.
    #[arg(long, env = "LRP_GRACE_PERIOD", default_value = "15s", value_parser = parse_duration)]
    pub grace_period: Duration,

    /// Overwrite a ConfigMap that another tool (kind's script, k3d, ctlptl, a human) created.
    #[arg(long, env = "LRP_TAKE_OVER")]
    pub take_over: bool,
}

/// Pull credentials (docs/pull-secrets.md).
#[derive(Clone, Debug, clap::Args)]
pub struct PullSecretArgs {
    /// Distribute the published registry's pull credentials: when its Service names a Secret in its namespace with
    /// the local-registry-publisher.io/pull-secret annotation, write a kubernetes.io/dockerconfigjson Secret with an
    /// entry per published address into every namespace a cluster admin labelled
    /// local-registry-publisher.io/pull-secret-wanted=true (never kube-public). Off by default: without it no Secret
    /// is read or written. See docs/pull-secrets.md.
    #[arg(long, env = "LRP_PULL_SECRETS")]
    pub pull_secrets: bool,

    /// Name of the pull Secret written in each opted-in namespace.
    #[arg(long, env = "LRP_PULL_SECRET_NAME", default_value = "local-registry-pull", value_parser = parse_dns_subdomain)]
    pub pull_secret_name: String,

    /// ServiceAccounts in each opted-in namespace whose imagePullSecrets get the pull Secret, comma-separated (e.g.
    /// "default"). Entries others put there stay; only the entry this controller added is ever removed.
    #[arg(long, env = "LRP_PULL_SECRET_SERVICE_ACCOUNTS", value_delimiter = ',', requires = "pull_secrets", value_parser = parse_dns_subdomain)]
    pub pull_secret_service_accounts: Vec<String>,
}

/// The controller's side of the node agent.
#[derive(Clone, Debug, clap::Args)]
pub struct NodePlanArgs {
    /// Keep the node plan (what each node's container runtime needs to pull every published address) in this
    /// ConfigMap of the controller's namespace (POD_NAMESPACE), for the node agents the chart's nodeAgent.enabled
    /// runs (see docs/node-pulls.md). Off by default.
    #[arg(long, env = "LRP_NODE_PLAN_CONFIGMAP", value_name = "NAME", value_parser = parse_dns_subdomain)]
    pub node_plan_configmap: Option<String>,

    /// Published addresses the nodes may be redirected for besides each registry's own (its ClusterIP, cluster DNS
    /// names, nodePort or hostPort, load balancer), comma-separated: host:port (that address), host (any port), or
    /// either with "*." before a DNS name (every name under it). A hosts.toml redirects every pull of its address on
    /// the node, from every namespace, so an address a registry's annotations name (registry.k8s.io, docker.io, a
    /// laptop's localhost:5001) gets a node file only when listed here; otherwise it stays published and the
    /// refusal is told on the registry's Service. Chart value nodeAgent.allowedAddresses.
    #[arg(
        long,
        env = "LRP_NODE_ALLOWED_ADDRESSES",
        value_name = "PATTERNS",
        value_delimiter = ',',
        requires = "node_plan_configmap"
    )]
    pub node_allowed_addresses: Vec<crate::node::AddressPattern>,

    /// Mirrors of public registries on every node, comma-separated: UPSTREAM=service:NAMESPACE/NAME:PORT (a cache
    /// Service, reached at its ClusterIP over plain HTTP) or UPSTREAM=http[s]://HOST[:PORT] (a cache the nodes reach
    /// by themselves, like a container on kind's network). Each node's containerd pulls images named UPSTREAM
    /// (docker.io, ghcr.io, ...) from the cache first and from the upstream when the cache fails. A cache in
    /// pull-through mode mirrors one upstream and takes no pushes: not the registry tools push to. One mirror per
    /// upstream. Chart value nodeAgent.mirrors.
    #[arg(
        long,
        env = "LRP_NODE_MIRRORS",
        value_name = "MIRRORS",
        value_delimiter = ',',
        requires = "node_plan_configmap"
    )]
    pub node_mirrors: Vec<crate::node::Mirror>,
}

impl NodePlanArgs {
    /// Where the node plan is kept, in this process's namespace; `None` without --node-plan-configmap.
    pub fn target(&self) -> Option<crate::node::NodePlanTarget> {
        self.node_plan_configmap.clone().map(|name| crate::node::NodePlanTarget {
            namespace: crate::pod::namespace(),
            name,
            rules: crate::node::Rules {
                allowed: self.node_allowed_addresses.clone(),
                mirrors: self.node_mirrors.clone(),
            },
        })
    }
}

/// The container runtimes the node agent can configure (`--runtime`): each one implementation of
/// `agent::runtime::NodeRuntime` that passes its conformance suite.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum RuntimeKind {
    /// containerd: a hosts.toml per planned address under its registry config_path.
    #[default]
    Containerd,
}

/// What the node agent reads and writes.
#[derive(Clone, Debug, clap::Args)]
pub struct NodeAgentArgs {
    /// The ConfigMap holding the node plan, in POD_NAMESPACE: the controller's --node-plan-configmap.
    #[arg(long, env = "LRP_NODE_PLAN_CONFIGMAP", value_name = "NAME", value_parser = parse_dns_subdomain)]
    pub node_plan_configmap: String,

    /// The node's container runtime, whose configuration the agent writes.
    #[arg(long, env = "LRP_NODE_RUNTIME", value_enum, default_value_t = RuntimeKind::Containerd)]
    pub runtime: RuntimeKind,

    /// containerd's hosts directory (its registry config_path) as mounted into the agent: one hosts.toml per
    /// planned address is written under it, and only files this agent wrote are ever changed or removed.
    #[arg(long, env = "LRP_HOSTS_DIR", value_name = "PATH")]
    pub hosts_dir: std::path::PathBuf,

    /// The DaemonSet running the agent, in POD_NAMESPACE: an agent that stops while it still exists (a rolling
    /// update, a drain) leaves its files for the next one; once it is gone the agent removes them.
    #[arg(long, env = "LRP_NODE_AGENT_DAEMONSET", value_name = "NAME", value_parser = parse_dns_subdomain)]
    pub daemonset: Option<String>,

    /// How often the hosts directory is checked again even when the plan has not changed (a directory emptied by
    /// hand is written again).
    #[arg(long, env = "LRP_NODE_AGENT_RESYNC", default_value = "10s", value_parser = parse_duration)]
    pub resync: Duration,

    /// containerd's config file, at its path on the node (mount its directory there, read-only): the agent checks
    /// that its registry config_path names --node-config-path, and tells (Event ConfigPathMismatch, metric,
    /// doctor) when containerd reads another directory, where the agent's files would go unread.
    #[arg(long, env = "LRP_CONTAINERD_CONFIG", value_name = "PATH", requires = "node_config_path")]
    pub containerd_config: Option<std::path::PathBuf>,

    /// The hosts directory (--hosts-dir) as the node sees it: what containerd's config_path must name, and what an
    /// agent compares with its DaemonSet's as it stops (when the DaemonSet now mounts another directory, the agent
    /// removes its files from this one).
    #[arg(long, env = "LRP_NODE_CONFIG_PATH", value_name = "PATH")]
    pub node_config_path: Option<String>,

    /// The node this agent runs on (the chart passes spec.nodeName): its state is kept in the NodePullState of that
    /// name in POD_NAMESPACE, which doctor reads. Without it no state is written.
    #[arg(long, env = "NODE_NAME", value_name = "NAME", value_parser = parse_dns_subdomain)]
    pub node_name: Option<String>,

    /// Address serving /healthz (liveness), /readyz (ready once the plan was read) and /metrics (Prometheus: what
    /// this node's hosts directory holds of the plan).
    #[arg(long, env = "LRP_HTTP_ADDRESS", default_value = "0.0.0.0:8080")]
    pub http_address: std::net::SocketAddr,
}

/// How the process runs: probes, metrics, leader election.
#[derive(Clone, Debug, clap::Args)]
pub struct OperationArgs {
    /// Address serving /healthz (liveness), /readyz (readiness) and /metrics (Prometheus).
    #[arg(long, env = "LRP_HTTP_ADDRESS", default_value = "0.0.0.0:8080")]
    pub http_address: std::net::SocketAddr,

    /// Serve /metrics only to callers Kubernetes authenticates (TokenReview) and authorizes for `get` on the
    /// non-resource URL /metrics (SubjectAccessReview); /healthz and /readyz stay open for kubelet.
    #[arg(long, env = "LRP_METRICS_AUTH")]
    pub metrics_auth: bool,

    /// Elect a leader on a coordination.k8s.io Lease so several replicas can run: all watch, only the leader
    /// writes. Without it, run a single replica.
    #[arg(long, env = "LRP_LEADER_ELECT")]
    pub leader_elect: bool,

    /// Namespace of the Lease; defaults to POD_NAMESPACE, then the in-cluster service account's namespace,
    /// then "default". (Also accepted as --leader-elect-namespace.)
    #[arg(long, alias = "leader-elect-namespace", env = "LRP_LEADER_ELECT_NAMESPACE", value_parser = parse_namespace)]
    pub leader_elect_resource_namespace: Option<String>,

    /// Name of the Lease. (Also accepted as --leader-elect-lease-name.)
    #[arg(long, alias = "leader-elect-lease-name", env = "LRP_LEADER_ELECT_LEASE_NAME", default_value = "local-registry-publisher", value_parser = parse_dns_subdomain)]
    pub leader_elect_resource_name: String,

    /// How long a leader that stopped renewing keeps the Lease before another replica takes over.
    #[arg(long, env = "LRP_LEADER_ELECT_LEASE_DURATION", default_value = "15s", value_parser = parse_lease_duration)]
    pub leader_elect_lease_duration: Duration,

    /// This replica's identity in the Lease; defaults to POD_NAME (else the host name) with a random suffix. It must
    /// be unique: the controller exits if another live process renews the Lease under it.
    #[arg(long, env = "LRP_LEADER_ELECT_IDENTITY")]
    pub leader_elect_identity: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

impl PublishArgs {
    /// The core's settings from the (already validated) flags.
    pub fn settings(&self) -> Settings {
        let mut settings = Settings::default();
        self.source.apply(&mut settings);
        self.target.apply(&mut settings);
        self.values.apply(&mut settings);
        self.pull.apply(&mut settings);
        self.trust.apply(&mut settings);
        self.change.apply(&mut settings);
        settings
    }
}

impl TrustArgs {
    pub fn apply(&self, settings: &mut Settings) {
        settings.watch_namespaces = self.watch_namespaces.clone();
        settings.allowed_namespaces = self.allowed_namespaces.clone();
    }
}

impl ChangeArgs {
    pub fn apply(&self, settings: &mut Settings) {
        settings.grace_period = self.grace_period;
        settings.take_over = self.take_over;
    }
}

impl SourceArgs {
    pub fn apply(&self, settings: &mut Settings) {
        settings.registry_selector = self.registry_selector.clone();
        settings.builtin_registries = !self.no_builtin_registries;
    }
}

impl TargetArgs {
    pub fn apply(&self, settings: &mut Settings) {
        settings.configmap_namespace = self.configmap_namespace.clone();
        settings.configmap_name = self.configmap_name.clone();
    }
}

impl ValueArgs {
    pub fn apply(&self, settings: &mut Settings) {
        settings.cluster_domain = self.cluster_domain.clone();
        settings.node_address = self.node_address.clone();
        settings.help_url = self.help_url.clone();
    }
}

impl PullSecretArgs {
    pub fn apply(&self, settings: &mut Settings) {
        settings.pull_secrets = self.pull_secrets.then(|| crate::settings::PullSecrets {
            name: self.pull_secret_name.clone(),
            service_accounts: self.pull_secret_service_accounts.clone(),
        });
    }
}

fn parse_duration(value: &str) -> Result<Duration, String> {
    humantime::parse_duration(value).map_err(|e| format!("{e} (use e.g. 15s, 1m, 500ms)"))
}

fn parse_lease_duration(value: &str) -> Result<Duration, String> {
    let duration = parse_duration(value)?;
    if duration < Duration::from_secs(3) {
        return Err("must be at least 3s: the leader renews several times per lease".into());
    }
    Ok(duration)
}

fn parse_help_url(value: &str) -> Result<String, String> {
    Field::Help.check(value).map(|()| value.to_string())
}

fn parse_node_address(value: &str) -> Result<NodeAddress, String> {
    use crate::hosting::address::Host;
    let hint = "use localhost, internal-ip, or an IP address or dotted host name that tools can connect to";
    match value {
        "localhost" => Ok(NodeAddress::Localhost),
        "internal-ip" => Ok(NodeAddress::InternalIp),
        literal => match Host::normalise(literal) {
            Ok(Host::Name(name)) if !name.contains('.') => Err(format!("unknown mode {literal:?}: {hint}")),
            Ok(host) => Ok(NodeAddress::Literal(host.to_string())),
            Err(reason) => Err(format!("{literal:?} {reason}: {hint}")),
        },
    }
}

fn parse_log_filter(value: &str) -> Result<String, String> {
    tracing_subscriber::EnvFilter::try_new(value).map(|_| value.to_string()).map_err(|e| e.to_string())
}

fn parse_namespace(value: &str) -> Result<String, String> {
    let valid = is_dns_label(value);
    if valid { Ok(value.to_string()) } else { Err(format!("{value:?} is not a valid namespace name")) }
}

fn parse_dns_subdomain(value: &str) -> Result<String, String> {
    if is_object_name(value) { Ok(value.to_string()) } else { Err(format!("{value:?} is not a valid object name")) }
}

fn parse_cluster_domain(value: &str) -> Result<String, String> {
    let trimmed = value.trim_end_matches('.');
    if is_dns_name(trimmed) { Ok(trimmed.to_string()) } else { Err(format!("{value:?} is not a DNS domain")) }
}

/// Reads a label selector as the API server would, so a typo exits at start instead of failing every watch.
fn parse_label_selector(value: &str) -> Result<Selector, String> {
    if value.trim().is_empty() {
        return Err("must not be empty: it would select every Service".into());
    }
    split_requirements(value)
        .into_iter()
        .map(|requirement| expression(requirement.trim()).map_err(|e| format!("{requirement:?}: {e}")))
        .collect()
}

/// Splits on commas outside parentheses: `a in (x,y),b` is two requirements.
fn split_requirements(value: &str) -> Vec<&str> {
    let (mut parts, mut depth, mut start) = (Vec::new(), 0i32, 0);
    for (i, c) in value.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&value[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&value[start..]);
    parts
}

/// One requirement: `!key`, `key!=value`, `key==value`, `key=value`, `key notin (a,b)`, `key in (a,b)` or `key`.
fn expression(requirement: &str) -> Result<Expression, String> {
    if let Some(key) = requirement.strip_prefix('!') {
        return Ok(Expression::DoesNotExist(label_key(key.trim())?));
    }
    for operator in ["!=", "==", "="] {
        if let Some((key, value)) = requirement.split_once(operator) {
            let (key, value) = (label_key(key.trim())?, label_value(value.trim())?);
            return Ok(if operator == "!=" { Expression::NotEqual(key, value) } else { Expression::Equal(key, value) });
        }
    }
    for operator in [" notin ", " in "] {
        if let Some((key, values)) = requirement.split_once(operator) {
            let key = label_key(key.trim())?;
            let inner = values
                .trim()
                .strip_prefix('(')
                .and_then(|v| v.strip_suffix(')'))
                .ok_or("a set needs parentheses, like in (a,b)")?;
            let values = inner.split(',').map(|v| label_value(v.trim())).collect::<Result<_, _>>()?;
            return Ok(if operator == " in " { Expression::In(key, values) } else { Expression::NotIn(key, values) });
        }
    }
    Ok(Expression::Exists(label_key(requirement)?))
}

fn label_key(key: &str) -> Result<String, String> {
    check_label_key(key).map(|()| key.to_string())
}

fn label_value(value: &str) -> Result<String, String> {
    check_label_value(value).map(|()| value.to_string())
}

fn check_label_key(key: &str) -> Result<(), String> {
    let (prefix, name) = match key.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    if let Some(prefix) = prefix
        && !is_object_name(prefix)
    {
        return Err(format!("label key prefix {prefix:?} is not a DNS subdomain"));
    }
    if name.is_empty() || !is_label_name(name) {
        return Err(format!("{key:?} is not a valid label key"));
    }
    Ok(())
}

fn check_label_value(value: &str) -> Result<(), String> {
    if value.is_empty() || is_label_name(value) { Ok(()) } else { Err(format!("{value:?} is not a valid label value")) }
}

fn is_label_name(name: &str) -> bool {
    name.len() <= 63
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Args, clap::Error> {
        Args::try_parse_from(std::iter::once("local-registry-publisher").chain(args.iter().copied()))
    }

    #[test]
    fn flag_defaults_are_the_settings_defaults() {
        let settings = parse(&[]).unwrap().publish.settings();
        assert_eq!(settings, Settings::default());
        assert_eq!(settings.target(), "kube-public/local-registry-hosting");
        assert_eq!(settings.registry_selector.to_string(), "local-registry-publisher.io/registry=true");
        assert_eq!(settings.grace_period, Duration::from_secs(15));
        assert!(settings.all_namespaces() && !settings.take_over && settings.builtin_registries);
    }

    #[test]
    fn accepts_valid_values() {
        let args = parse(&[
            "--registry-selector=app.kubernetes.io/name in (registry,zot),tier!=test,!legacy",
            "--node-address=internal-ip",
            "--watch-namespaces=a,b",
            "--grace-period=1m30s",
            "--help-url=https://kind.sigs.k8s.io/docs/user/local-registry/",
        ])
        .unwrap()
        .publish
        .settings();
        assert_eq!(args.node_address, NodeAddress::InternalIp);
        assert_eq!(args.watch_namespaces, ["a", "b"]);
        assert_eq!(args.grace_period, Duration::from_secs(90));
        assert_eq!(
            parse(&["--node-address=192.168.49.2"]).unwrap().publish.values.node_address,
            NodeAddress::Literal("192.168.49.2".into())
        );
        assert_eq!(
            parse(&["--node-address=registry.example.com"]).unwrap().publish.values.node_address,
            NodeAddress::Literal("registry.example.com".into()),
            "a dotted host name is an address, not a mode"
        );
        assert!(parse(&["--leader-elect-lease-duration=3s"]).is_ok(), "3s is the shortest lease");
    }

    #[test]
    fn mirrors_are_read_as_the_chart_renders_them_and_only_with_the_node_plan() {
        let flags =
            ["--node-plan-configmap=plan", "--node-mirrors=docker.io=service:cache/hub:5000,ghcr.io=http://c:5000"];
        let target = parse(&flags).unwrap().node_plan.target();
        let mirrors: Vec<String> = target.expect("on").rules.mirrors.iter().map(|m| m.to_string()).collect();
        assert_eq!(mirrors, ["docker.io=service:cache/hub:5000", "ghcr.io=http://c:5000"]);
        assert!(parse(&flags[1..]).is_err(), "mirrors need the node plan");
        let error = parse(&["--node-plan-configmap=plan", "--node-mirrors=docker.io=cache:5000"]).expect_err("refused");
        assert_eq!(error.exit_code(), 2);
        assert!(error.to_string().contains("a mirror is UPSTREAM="), "{error}");
    }

    #[test]
    fn rejects_invalid_values_with_exit_status_2_naming_the_option() {
        for (flag, needle) in [
            ("--registry-selector=app in registry", "parentheses"),
            ("--registry-selector=Bad Key=x", "label key"),
            ("--registry-selector=", "empty"),
            ("--registry-selector=tier=-test", "label value"),
            ("--node-address=external-ip", "unknown mode"),
            ("--node-address=0.0.0.0", "listen address"),
            ("--node-address=255.255.255.255", "broadcast"),
            ("--node-address=010.0.0.1", "four dotted decimal octets"),
            ("--node-address=0x7f.0.0.1", "four dotted decimal octets"),
            ("--node-address=0x7f000001", "four dotted decimal octets"),
            ("--node-address=::", "unspecified"),
            ("--help-url=https://@/", "user information"),
            ("--help-url=kind.sigs.k8s.io", "http"),
            ("--grace-period=soon", "15s"),
            ("--watch-namespaces=Kube_System", "namespace"),
            ("--log-format=xml", "xml"),
            ("--log-level=info,[", "log-level"),
            ("--http-address=8080", "http-address"),
            ("--leader-elect-lease-duration=1s", "at least 3s"),
            ("--leader-elect-resource-namespace=-x", "namespace"),
        ] {
            let error = parse(&[flag]).expect_err(flag);
            assert_eq!(error.exit_code(), 2, "{flag}");
            let option = flag.split('=').next().unwrap();
            let text = error.to_string();
            assert!(text.contains(option) && text.contains(needle), "{flag}: {text}");
        }
    }

    #[test]
    fn leader_election_flags_have_component_base_names_and_keep_the_old_ones() {
        for (namespace_flag, name_flag) in [
            ("--leader-elect-resource-namespace=ops", "--leader-elect-resource-name=lrp"),
            ("--leader-elect-namespace=ops", "--leader-elect-lease-name=lrp"),
        ] {
            let operation = parse(&[namespace_flag, name_flag]).unwrap().operation;
            assert_eq!(operation.leader_elect_resource_namespace.as_deref(), Some("ops"), "{namespace_flag}");
            assert_eq!(operation.leader_elect_resource_name, "lrp", "{name_flag}");
        }
    }

    #[test]
    fn withdraw_is_a_command_with_the_hooks_flags() {
        // Exactly what the chart's uninstall hook runs.
        let hook = ["withdraw", "--stop-deployment=lrp", "--configmap-namespace=kube-public"];
        let args =
            parse(&[&hook[..], &["--configmap-name=local-registry-hosting", "--log-format=json"]].concat()).unwrap();
        let Some(Command::Withdraw { log, target, stop_deployment, .. }) = args.command else { panic!("withdraw") };
        assert_eq!(log.log_format, LogFormat::Json);
        assert_eq!((target.configmap_namespace.as_str(), stop_deployment.as_deref()), ("kube-public", Some("lrp")));
        assert_eq!(parse(&["--stop-deployment=lrp"]).unwrap_err().exit_code(), 2, "only the command takes it");
    }

    #[test]
    fn each_command_takes_only_the_flags_it_uses_after_its_name() {
        for (args, refused) in [
            (&["get", "--take-over"][..], "--take-over"),
            (&["get", "--registry-selector=a=b"][..], "--registry-selector"),
            (&["render", "-f", "-", "--kubeconfig=k"][..], "--kubeconfig"),
            (&["render", "-f", "-", "--pull-secrets"][..], "--pull-secrets"),
            (&["render-pull-secret", "--server=localhost:5001", "--configmap-name=x"][..], "--configmap-name"),
            (&["withdraw", "--node-address=internal-ip"][..], "--node-address"),
            (&["probe", "localhost:5000", "--kubeconfig=k"][..], "--kubeconfig"),
            // A flag before the command is the controller's, not the command's: said, not silently dropped.
            (&["--kubeconfig=k", "get"][..], "--kubeconfig"),
        ] {
            let error = parse(args).expect_err(refused);
            assert_eq!(error.exit_code(), 2, "{args:?}");
            assert!(error.to_string().contains(refused), "{args:?}: {error}");
        }
        let get = parse(&["get", "--kubeconfig=k", "--context=c", "--configmap-namespace=ns", "-o", "json"]).unwrap();
        let Some(Command::Get { cluster, target, output }) = get.command else { panic!("get") };
        assert_eq!((cluster.kubeconfig, cluster.context.as_deref()), (Some("k".into()), Some("c")));
        assert_eq!((target.configmap_namespace.as_str(), output), ("ns", OutputFormat::Json));
        let render = parse(&["render", "-f", "-", "--node-address=10.0.0.1", "--no-builtin-registries"]).unwrap();
        assert!(matches!(render.command, Some(Command::Render { values, source, .. })
            if values.node_address == NodeAddress::Literal("10.0.0.1".into()) && source.no_builtin_registries));
    }

    #[test]
    fn allowed_namespaces_has_one_name_and_keeps_the_old_spelling() {
        for flag in ["--allowed-namespaces=registry,tools", "--registry-namespaces=registry,tools"] {
            let settings = parse(&[flag]).unwrap().publish.settings();
            assert_eq!(settings.allowed_namespaces, ["registry", "tools"], "{flag}");
        }
    }

    #[test]
    fn node_addresses_that_can_never_publish_are_refused_and_ipv6_is_accepted() {
        for (bad, why) in [
            ("0.0.0.0", "listen address"),
            ("::", "unspecified"),
            ("[0:0::0]", "unspecified"),
            ("fe80::1", "link-local"),
            ("aaaa", "unknown mode"),
            ("[evil.example]", "IPv6"),
            ("", "empty"),
        ] {
            let error = parse_node_address(bad).expect_err(bad);
            assert!(error.contains(why), "{bad}: {error}");
        }
        for (good, literal) in [("fd00::1", "[fd00::1]"), ("[::1]", "[::1]"), ("192.168.49.2", "192.168.49.2")] {
            assert_eq!(parse_node_address(good), Ok(NodeAddress::Literal(literal.into())), "{good}");
        }
    }

    #[test]
    fn label_selectors_are_read_into_expressions_that_match_as_the_api_server_evaluates_them() {
        use kube::core::SelectorExt;
        let labels: std::collections::BTreeMap<String, String> =
            [("app", "zot"), ("tier", "infra")].map(|(k, v)| (k.to_string(), v.to_string())).into();
        let selector_matches = |text: &str, labels| parse_label_selector(text).expect(text).matches(labels);
        for (selector, expected) in [
            ("app=zot", true),
            ("app==zot,tier=infra", true),
            ("app!=zot", false),
            ("app in (harbor, zot)", true),
            ("app notin (zot)", false),
            ("tier", true),
            ("!tier", false),
            ("missing", false),
            ("app=zot,missing=x", false),
        ] {
            assert_eq!(selector_matches(selector, &labels), expected, "{selector}");
        }
        let parsed = parse_label_selector("app.kubernetes.io/name in (registry,zot),tier!=test,!legacy").unwrap();
        assert_eq!(parsed.to_string(), "app.kubernetes.io/name in (registry,zot),tier!=test,!legacy");
        let default = crate::settings::default_selector();
        assert_eq!(parse_label_selector(&default.to_string()), Ok(default));
    }
}
