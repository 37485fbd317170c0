//! The controller's flags: what to publish and where, and the node plan.

use std::time::Duration;

use kube::core::Selector;

use super::*;
use crate::settings::Settings;

/// What to publish and where: the flags behind [`Settings`], in groups so each command takes only those it uses.
#[derive(Clone, Debug, clap::Args)]
pub struct PublishArgs {
    #[command(flatten)]
    pub source: SourceArgs,
    #[command(flatten)]
    pub namespaces: NamespaceArgs,
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
    #[arg(long, env = "LRP_REGISTRY_SELECTOR", default_value_t = crate::settings::default_selector(), value_parser = crate::selector::parse)]
    pub registry_selector: Selector,

    /// Do not recognise minikube's registry addon (kube-system/registry) or MicroK8s's
    /// (container-registry/registry) unless they carry the selector's label.
    #[arg(long, env = "LRP_NO_BUILTIN_REGISTRIES")]
    pub no_builtin_registries: bool,
}

/// Where registries are looked for, and which namespaces may name the cluster's registry.
#[derive(Clone, Debug, clap::Args)]
pub struct NamespaceArgs {
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
    #[arg(long = crate::keys::chart::NODE_PLAN_FLAG, env = "LRP_NODE_PLAN_CONFIGMAP", value_name = "NAME", value_parser = parse_dns_subdomain)]
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

    /// Mirrors of public registries on every node, comma-separated: `UPSTREAM=service:NAMESPACE/NAME:PORT` (a cache
    /// Service, reached at its ClusterIP over plain HTTP) or `UPSTREAM=http[s]://HOST[:PORT]` (a cache the nodes reach
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

    /// Registries every node agent serves on its node's loopback, comma-separated NAMESPACE/NAME=PORT: the
    /// registry Service NAMESPACE/NAME at 127.0.0.1:PORT and [::1]:PORT on every node, each connection relayed to
    /// its ClusterIP (the agents need --relay). Every runtime pulls loopback over plain HTTP with no file, in every
    /// kube-proxy mode, so the published registry among them is published there: hostFromContainerRuntime, and
    /// host where tools run on the node (--node-address localhost). The port is the admin's: no Service chooses
    /// one. Chart value nodeAgent.relay.registries.
    #[arg(
        long,
        env = "LRP_NODE_RELAYS",
        value_name = "RELAYS",
        value_delimiter = ',',
        requires = "node_plan_configmap",
        value_parser = parse_relay
    )]
    pub node_relays: Vec<crate::settings::RelayRule>,

    /// The stamp of this controller's configuration, written into every node plan: the chart sets the same on the
    /// plan's ConfigMap (annotation local-registry-publisher.io/plan-stamp), and an agent takes a plan as current
    /// only once it carries that stamp, so right after helm install or upgrade a node is PlanPending rather than
    /// configured for what the previous controller planned. The chart derives it from the controller's arguments
    /// and image.
    #[arg(long, env = "LRP_NODE_PLAN_STAMP", value_name = "STAMP", requires = "node_plan_configmap", value_parser = parse_stamp)]
    pub node_plan_stamp: Option<String>,
}

fn parse_stamp(value: &str) -> Result<String, String> {
    let fits = (1..=64).contains(&value.len()) && value.chars().all(|c| c.is_ascii_alphanumeric() || c == '-');
    fits.then(|| value.to_string()).ok_or_else(|| format!("{value:?}: a stamp is 1 to 64 letters, digits or '-'"))
}

fn parse_relay(value: &str) -> Result<crate::settings::RelayRule, String> {
    value.parse()
}

/// What the controller reads of kube-proxy.
#[derive(Clone, Debug, clap::Args)]
pub struct KubeProxyArgs {
    /// kube-proxy's shared configuration, NAMESPACE/NAME (kubeadm and kind keep it there, key config.conf), read by
    /// name only while a registry is published at its nodePort on a node's loopback: where its mode serves no such
    /// address (nftables, or [::1] in any mode) a Warning Event LoopbackNodePortUnserved on the registry's Service
    /// and the metric local_registry_publisher_loopback_addresses_unserved say who cannot use it and the fixes.
    /// Empty: not read. Chart value registry.kubeProxyConfigMap.
    #[arg(long, env = "LRP_KUBE_PROXY_CONFIGMAP", value_name = "NAMESPACE/NAME", default_value = "kube-system/kube-proxy", value_parser = parse_kube_proxy_configmap)]
    pub kube_proxy_configmap: String,
}

impl KubeProxyArgs {
    /// Where kube-proxy's configuration is read; `None` when the flag is empty.
    pub fn target(&self) -> Option<crate::kube_proxy::ConfigTarget> {
        parse_config_target(&self.kube_proxy_configmap).ok().flatten()
    }
}

fn parse_kube_proxy_configmap(value: &str) -> Result<String, String> {
    parse_config_target(value).map(|_| value.to_string())
}

/// `NAMESPACE/NAME`, or empty for none.
fn parse_config_target(value: &str) -> Result<Option<crate::kube_proxy::ConfigTarget>, String> {
    if value.is_empty() {
        return Ok(None);
    }
    let (namespace, name) = value.split_once('/').ok_or_else(|| format!("{value:?} is not NAMESPACE/NAME"))?;
    Ok(Some(crate::kube_proxy::ConfigTarget {
        namespace: parse_namespace(namespace)?,
        name: parse_dns_subdomain(name)?,
    }))
}

impl NodePlanArgs {
    /// Where the node plan is kept, in this process's namespace; `None` without --node-plan-configmap.
    pub fn target(&self) -> Option<crate::node::NodePlanTarget> {
        self.node_plan_configmap.clone().map(|name| crate::node::NodePlanTarget {
            namespace: crate::pod::namespace(),
            name,
            rules: crate::node::Rules {
                allowed_addresses: self.node_allowed_addresses.clone(),
                mirrors: self.node_mirrors.clone(),
                relays: self.node_relays.clone(),
            },
            stamp: self.node_plan_stamp.clone(),
        })
    }
}

impl Args {
    /// The controller's settings: what it publishes ([`PublishArgs::settings`]) and where the cluster admin relays
    /// registries on the nodes (`--node-relays`), which changes what is published.
    pub fn settings(&self) -> Settings {
        let mut settings = self.publish.settings();
        settings.relays = self.node_plan.node_relays.clone();
        settings
    }
}

impl PublishArgs {
    /// The core's settings from the (already validated) flags; [`Args::settings`] adds the node relays.
    pub fn settings(&self) -> Settings {
        let mut settings = Settings::default();
        self.source.apply(&mut settings);
        self.target.apply(&mut settings);
        self.values.apply(&mut settings);
        self.pull.apply(&mut settings);
        self.namespaces.apply(&mut settings);
        self.change.apply(&mut settings);
        settings
    }
}

impl NamespaceArgs {
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
