//! The commands for the people who use the registry (`get`, `doctor`, `render`, ...).

use clap::ValueEnum;

use super::*;

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
