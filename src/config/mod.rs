//! Command-line flags (each with an environment twin) and their validation. Anything invalid is rejected by clap
//! with exit status 2 and one line naming the option, before the cluster is touched. One file per process: the
//! controller's flags (controller.rs), the node agent's (agent.rs) and the commands' (cli.rs); here what they share.

use std::time::Duration;

use clap::{Parser, ValueEnum};

use crate::hosting::Field;
pub use crate::settings::NodeAddress;
use crate::watching::{is_dns_label, is_dns_name, is_object_name};

mod agent;
mod cli;
mod controller;

pub use agent::*;
pub use cli::*;
pub use controller::*;

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
    pub kube_proxy: KubeProxyArgs,

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

    /// Serve the --http-address port over HTTPS with this PEM certificate chain (with --tls-private-key-file), so
    /// a scraper's token never crosses the network in clear; kubelet's probes must then use HTTPS too. The files
    /// are read again when they change (a renewed, mounted Secret).
    #[arg(long, env = "LRP_TLS_CERT_FILE", value_name = "PATH", requires = "tls_private_key_file")]
    pub tls_cert_file: Option<std::path::PathBuf>,

    /// The PEM private key (PKCS#8, PKCS#1 or SEC1) of --tls-cert-file.
    #[arg(long, env = "LRP_TLS_PRIVATE_KEY_FILE", value_name = "PATH", requires = "tls_cert_file")]
    pub tls_private_key_file: Option<std::path::PathBuf>,

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

impl OperationArgs {
    /// The serving certificate's files, when HTTPS was asked for.
    pub fn tls_files(&self) -> Option<crate::http::tls::CertificateFiles> {
        match (&self.tls_cert_file, &self.tls_private_key_file) {
            (Some(cert), Some(key)) => {
                Some(crate::http::tls::CertificateFiles { cert: cert.clone(), key: key.clone() })
            }
            _ => None,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::Settings;

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
    fn kube_proxys_configmap_is_kube_system_kube_proxy_unless_set_and_empty_reads_none() {
        let target = |args: &[&str]| parse(args).unwrap().kube_proxy.target().map(|t| t.to_string());
        assert_eq!(target(&[]).as_deref(), Some("kube-system/kube-proxy"));
        assert_eq!(target(&["--kube-proxy-configmap=ops/proxy"]).as_deref(), Some("ops/proxy"));
        assert_eq!(target(&["--kube-proxy-configmap="]), None);
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
            ("--kube-proxy-configmap=kube-proxy", "NAMESPACE/NAME"),
            ("--kube-proxy-configmap=Kube_System/kube-proxy", "namespace"),
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
    fn the_agents_config_path_has_one_name_and_keeps_the_old_spellings() {
        let plan = "--node-plan-configmap=plan";
        for (mount, on_node) in [
            ("--config-path-mount=/hosts", "--config-path=/etc/containerd/certs.d"),
            ("--hosts-dir=/hosts", "--node-config-path=/etc/containerd/certs.d"),
        ] {
            let parsed = parse(&["node-agent", plan, mount, on_node, "--runtime-config=/etc/containerd/config.toml"]);
            let Some(Command::NodeAgent { agent, .. }) = parsed.expect(mount).command else { panic!("node-agent") };
            assert_eq!(agent.config_path_mount.as_deref(), Some(std::path::Path::new("/hosts")), "{mount}");
            assert_eq!(agent.config_path.as_deref(), Some("/etc/containerd/certs.d"), "{on_node}");
        }
        // The old spellings stay out of --help.
        let help = parse(&["node-agent", "--help"]).expect_err("help").to_string();
        assert!(help.contains("--config-path-mount") && !help.contains("--hosts-dir"), "{help}");
        assert!(!help.contains("--node-config-path"), "{help}");
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
}
