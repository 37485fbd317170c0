//! The node agent's flags.

use super::*;

/// The container runtimes the node agent can configure (`--runtime`): each one implementation of
/// `agent::runtime::NodeRuntime` that passes its conformance suite.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum RuntimeKind {
    /// The node's own, as its Node reports it (status.nodeInfo.containerRuntimeVersion): CRI-O for `cri-o://`,
    /// containerd otherwise (and when the Node cannot be read).
    #[default]
    Auto,
    /// containerd: a hosts.toml per planned address under its registry config_path.
    Containerd,
    /// CRI-O: a registries.conf.d drop-in per planned address (and its CA under certs.d) in the node's
    /// /etc/containers, mounted at --config-path-mount; CRI-O reloads them itself with auto_reload_registries.
    #[value(name = "crio")]
    Crio,
    /// None: the agent writes no runtime configuration and only relays (--relay). For runtimes it does not
    /// configure that pull loopback over plain HTTP by themselves (dockerd, containerd under a read-only /etc).
    None,
}

/// What the node agent reads and writes.
#[derive(Clone, Debug, clap::Args)]
pub struct NodeAgentArgs {
    /// The ConfigMap holding the node plan, in POD_NAMESPACE: the controller's --node-plan-configmap.
    #[arg(long = crate::keys::chart::NODE_PLAN_FLAG, env = "LRP_NODE_PLAN_CONFIGMAP", value_name = "NAME", value_parser = parse_dns_subdomain)]
    pub node_plan_configmap: String,

    /// The node's container runtime, whose configuration the agent writes.
    #[arg(long, env = "LRP_NODE_RUNTIME", value_enum, default_value_t = RuntimeKind::Auto)]
    pub runtime: RuntimeKind,

    /// Where the runtime's registry configuration is mounted into the agent: for containerd its registry
    /// config_path (its hosts directory, --config-path on the node), where one hosts.toml per planned address is
    /// written; for CRI-O the node's /etc/containers, where one registries.conf.d drop-in per planned address is.
    /// Only files this agent wrote are ever changed or removed. Needed unless --runtime=none.
    #[arg(
        long,
        alias = "hosts-dir",
        env = "LRP_CONFIG_PATH_MOUNT",
        value_name = "PATH",
        required_if_eq_any([("runtime", "auto"), ("runtime", "containerd"), ("runtime", "crio")])
    )]
    pub config_path_mount: Option<std::path::PathBuf>,

    /// The DaemonSet running the agent, in POD_NAMESPACE: an agent that stops while it still exists (a rolling
    /// update, a drain) leaves its files for the next one; once it is gone the agent removes them.
    #[arg(long, env = "LRP_NODE_AGENT_DAEMONSET", value_name = "NAME", value_parser = parse_dns_subdomain)]
    pub daemonset: Option<String>,

    /// How often the hosts directory is checked again even when the plan has not changed (a directory emptied by
    /// hand is written again).
    #[arg(long, env = "LRP_NODE_AGENT_RESYNC", default_value = "10s", value_parser = parse_duration)]
    pub resync: Duration,

    /// The runtime's config file, at its path on the node (mount its directory there, read-only). containerd's: the
    /// agent checks that its registry config_path names --config-path, and tells (Event ConfigPathMismatch, metric,
    /// doctor) when containerd reads another directory, where the agent's files would go unread. CRI-O's
    /// (crio.conf, with crio.conf.d beside it): the agent checks that CRI-O reloads its drop-ins by itself.
    #[arg(long, env = "LRP_RUNTIME_CONFIG", value_name = "PATH", requires = "config_path")]
    pub runtime_config: Option<std::path::PathBuf>,

    /// containerd's registry config_path as the node sees it (mounted at --config-path-mount): what containerd's
    /// config must name, and what an agent compares with its DaemonSet's as it stops (when the DaemonSet now mounts
    /// another directory, the agent removes its files from this one). Chart value nodeAgent.configPath.
    #[arg(long, alias = "node-config-path", env = "LRP_CONFIG_PATH", value_name = "PATH")]
    pub config_path: Option<String>,

    /// The node this agent runs on (the chart passes spec.nodeName): its state is kept in the NodePullState of that
    /// name in POD_NAMESPACE, which doctor reads. Without it no state is written.
    #[arg(long, env = "NODE_NAME", value_name = "NAME", value_parser = parse_dns_subdomain)]
    pub node_name: Option<String>,

    /// Serve each registry the node plan relays (the controller's --node-relays) on this node's loopback,
    /// 127.0.0.1:PORT and [::1]:PORT, relaying every connection to the registry's ClusterIP. The agent must run on
    /// the node's network (the chart's nodeAgent.relay.enabled sets hostNetwork). It binds loopback only, and only
    /// the ports the plan names.
    #[arg(long, env = "LRP_RELAY")]
    pub relay: bool,

    /// Connections the relay holds open at once, across every relayed registry; one more is closed at once and
    /// counted (local_registry_publisher_node_relay_refused_connections_total{reason="limit"}). Each holds 32 KiB
    /// of buffers.
    #[arg(long, env = "LRP_RELAY_MAX_CONNECTIONS", default_value_t = 128, value_parser = clap::value_parser!(u32).range(1..=65536), requires = "relay")]
    pub relay_max_connections: u32,

    /// A relayed connection with no byte either way for this long is closed.
    #[arg(long, env = "LRP_RELAY_IDLE_TIMEOUT", default_value = "2m", value_parser = parse_idle_timeout, requires = "relay")]
    pub relay_idle_timeout: Duration,

    /// Address serving /healthz (liveness), /readyz (ready once the plan was read) and /metrics (Prometheus: what
    /// this node's hosts directory holds of the plan, and what the relay relayed). With --relay the agent runs on the
    /// node's network, so this port is the node's: choose one nothing else on the nodes uses.
    #[arg(long, env = "LRP_HTTP_ADDRESS", default_value = "0.0.0.0:8080")]
    pub http_address: std::net::SocketAddr,
}

fn parse_idle_timeout(value: &str) -> Result<Duration, String> {
    let duration = parse_duration(value)?;
    if duration.is_zero() {
        return Err("must be longer than 0 (e.g. 2m)".into());
    }
    Ok(duration)
}
