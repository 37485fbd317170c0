//! Wiring for the binary: logging, the Kubernetes client, the HTTP server, leader election, signals, and an
//! orderly shutdown (stop reconciling, release the Lease, stop serving).

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use tokio::sync::watch;
use tracing::{error, info, warn};
use tracing_subscriber::EnvFilter;

use crate::config::{Args, ClusterArgs, Command, LogArgs, LogFormat, OperationArgs};
use crate::controller::{Context, Controller};
use crate::escape::safe;
use crate::health::Health;
use crate::http;
use crate::leader::{Elector, LeaseSettings};
use crate::metrics::Metrics;
use crate::pod;
use crate::settings::Settings;

const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("reading kubeconfig: {0}")]
    Kubeconfig(#[from] kube::config::KubeconfigError),
    #[error("finding cluster configuration: {0}")]
    Infer(#[from] kube::config::InferConfigError),
    #[error("creating the Kubernetes client: {0}")]
    Client(#[from] kube::Error),
}

pub async fn run(args: Args) -> ExitCode {
    // Each command takes only the flags it uses; the defaults stand in for the rest.
    let default_log = LogArgs::default();
    let log = match &args.command {
        None => &args.log,
        Some(Command::Withdraw { log, .. } | Command::NodeAgent { log, .. }) => log,
        Some(_) => &default_log,
    };
    init_logging(log);
    match &args.command {
        Some(Command::Withdraw { cluster, target, pull, stop_deployment, .. }) => {
            let mut settings = Settings::default();
            target.apply(&mut settings);
            pull.apply(&mut settings);
            return match client(cluster).await {
                Ok(client) => withdraw(client, &settings, stop_deployment.as_deref()).await,
                Err(error) => {
                    error!("{}", safe(&error.to_string()));
                    ExitCode::FAILURE
                }
            };
        }
        Some(Command::Render { source, target, values, filename }) => {
            let mut settings = Settings::default();
            source.apply(&mut settings);
            target.apply(&mut settings);
            values.apply(&mut settings);
            return crate::cli::render(filename, &settings);
        }
        Some(Command::RenderPullSecret { servers, username, name, namespace }) => {
            return crate::cli::render_pull_secret(servers, username.as_deref(), name, namespace.as_deref());
        }
        Some(Command::NodeAgent { cluster, agent, .. }) => {
            return match client(cluster).await {
                Ok(client) => node_agent(client, agent).await,
                Err(error) => {
                    error!("{}", safe(&error.to_string()));
                    ExitCode::FAILURE
                }
            };
        }
        Some(Command::Crd) => {
            print!("{}", crate::node::api::state::crd_file());
            return ExitCode::SUCCESS;
        }
        Some(Command::Probe { address }) => {
            let result = crate::cli::probe::probe(address).await;
            crate::cli::text::print(&format!("{address}: {}", result.summary));
            return if result.ok { ExitCode::SUCCESS } else { ExitCode::FAILURE };
        }
        Some(Command::Doctor { cluster, publish, from_cluster, image, probe_namespace }) => {
            let from = from_cluster
                .then(|| crate::cli::doctor::FromCluster { image: image.clone(), namespace: probe_namespace.clone() });
            return match client(cluster).await {
                Ok(client) => crate::cli::doctor::doctor(client, &publish.settings(), from).await,
                Err(error) => unreachable_cluster(&error),
            };
        }
        Some(Command::Get { cluster, target, output }) => {
            let mut settings = Settings::default();
            target.apply(&mut settings);
            return match client(cluster).await {
                Ok(client) => crate::cli::get(client, &settings, *output).await,
                Err(error) => unreachable_cluster(&error),
            };
        }
        None => {}
    }
    let settings = args.settings();
    let node_plan = args.node_plan.target();
    let kube_proxy = args.kube_proxy.target();
    let listener = match http::bind(args.operation.http_address) {
        Ok(listener) => listener,
        Err(error) => {
            error!("cannot serve --http-address {}: {error}", args.operation.http_address);
            return ExitCode::FAILURE;
        }
    };
    let tls = match args.operation.tls_files().map(http::tls::acceptor).transpose() {
        Ok(tls) => tls,
        Err(error) => {
            error!("cannot serve HTTPS: {error}");
            return ExitCode::FAILURE;
        }
    };
    let client = match client(&args.cluster).await {
        Ok(client) => client,
        Err(error) => {
            error!("{}", safe(&error.to_string()));
            return ExitCode::FAILURE;
        }
    };

    let (stop, stopping) = watch::channel(false);
    let stopped = move || {
        let mut stopping = stopping.clone();
        async move {
            let _ = stopping.wait_for(|stop| *stop).await;
        }
    };
    let metrics = Metrics::default();
    let concerns = crate::controller::ConcernMetrics::default();
    let mut registry = metrics.registry();
    concerns.register(&mut registry);
    let health = Arc::new(Health::default());
    let auth = args.operation.metrics_auth.then(|| Arc::new(crate::metrics_auth::MetricsAuth::new(client.clone())));
    let server = http::spawn(listener, health.clone(), registry, auth, tls, stopped());
    let (leading, elector) = if args.operation.leader_elect {
        let settings = lease_settings(&args.operation);
        info!(lease = %format!("{}/{}", settings.namespace, settings.name), identity = %settings.identity, "leader election on");
        let (elector, leading) = Elector::new(client.clone(), settings, metrics.clone(), health.clone());
        if let Err(duplicate) = elector.check_identity().await {
            error!("{duplicate}");
            return ExitCode::FAILURE;
        }
        (Some(leading), Some(tokio::spawn(elector.run(stopped()))))
    } else {
        (None, None)
    };
    // Told once, at start: a typo in a namespace label would otherwise give nothing and say nothing. A watch of every
    // namespace for it would grow with the cluster; doctor lists them whenever it runs.
    let labels_client = client.clone();
    tokio::spawn(async move {
        for (namespace, said) in crate::cli::doctor::unknown_namespace_labels(&labels_client).await {
            warn!(namespace = %safe(&namespace), "{}", safe(&said));
        }
    });
    let controller = Controller::new(client, settings, Context::new(metrics, concerns, health, leading))
        .node_plan(node_plan)
        .kube_proxy(kube_proxy);
    tokio::spawn(async move {
        shutdown_signal().await;
        info!("shutting down");
        let _ = stop.send(true);
    });
    controller.run(stopped()).await;
    if let Some(elector) = elector
        && tokio::time::timeout(SHUTDOWN_GRACE, elector).await.is_err()
    {
        warn!("the Lease was not released in time; it expires on its own");
    }
    let _ = tokio::time::timeout(SHUTDOWN_GRACE, server).await;
    ExitCode::SUCCESS
}

#[cfg(not(target_os = "linux"))]
async fn node_agent(_: Client, _: &crate::config::NodeAgentArgs) -> ExitCode {
    error!("the node agent writes a Linux node's containerd configuration; this build is for another system");
    ExitCode::FAILURE
}

#[cfg(target_os = "linux")]
async fn node_agent(client: Client, agent: &crate::config::NodeAgentArgs) -> ExitCode {
    let settings = crate::agent::AgentSettings {
        namespace: pod::namespace(),
        configmap: agent.node_plan_configmap.clone(),
        runtime: agent.runtime,
        config_path_mount: agent.config_path_mount.clone(),
        daemonset: agent.daemonset.clone(),
        node_name: agent.node_name.clone(),
        config_path: agent.config_path.clone(),
        resync: agent.resync,
        runtime_config: agent.runtime_config.clone(),
        relay: agent.relay.then(|| crate::agent::relay::RelaySettings {
            max_connections: usize::try_from(agent.relay_max_connections).unwrap_or(usize::MAX),
            idle_timeout: agent.relay_idle_timeout,
        }),
    };
    let listener = match http::bind(agent.http_address) {
        Ok(listener) => listener,
        Err(error) => {
            error!("cannot serve --http-address {}: {error}", agent.http_address);
            return ExitCode::FAILURE;
        }
    };
    let reporting = crate::agent::Reporting::default();
    let (stop, stopped) = watch::channel(false);
    let served = async move {
        let mut stopped = stopped;
        let _ = stopped.wait_for(|stop| *stop).await;
    };
    let registry = reporting.metrics.registry();
    let server = http::spawn(listener, reporting.health.clone(), registry, None, None, served);
    let stopping = async {
        shutdown_signal().await;
        info!("shutting down");
    };
    let outcome = crate::agent::run(client, settings, reporting, stopping).await;
    let _ = stop.send(true);
    let _ = tokio::time::timeout(SHUTDOWN_GRACE, server).await;
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(reason) => {
            error!("{reason}");
            ExitCode::FAILURE
        }
    }
}

/// The commands for registry users exit 5 when they cannot even build a client.
fn unreachable_cluster(error: &Error) -> ExitCode {
    // The kubeconfig's context and user names, and a --context flag, reach the message: escaped like cluster text.
    eprintln!("error: {}", safe(&error.to_string()));
    ExitCode::from(crate::cli::EXIT_UNREACHABLE)
}

/// `withdraw`: see [`crate::controller::withdraw`].
async fn withdraw(client: Client, settings: &Settings, stop_deployment: Option<&str>) -> ExitCode {
    let namespace = pod::namespace();
    let stop = stop_deployment.map(|name| (namespace.as_str(), name));
    match crate::controller::withdraw(client, settings, stop).await {
        Ok(_) => ExitCode::SUCCESS,
        Err(error) => {
            error!("{}", safe(&error.to_string()));
            ExitCode::FAILURE
        }
    }
}

fn lease_settings(operation: &OperationArgs) -> LeaseSettings {
    let namespace = operation.leader_elect_resource_namespace.clone().unwrap_or_else(pod::namespace);
    // Unique by default, as client-go's <hostname>_<uuid>: a restarted container keeps its pod name.
    let identity =
        operation.leader_elect_identity.clone().unwrap_or_else(|| format!("{}_{}", pod::name(), random_suffix()));
    LeaseSettings {
        namespace,
        name: operation.leader_elect_resource_name.clone(),
        identity,
        duration: operation.leader_elect_lease_duration,
    }
}

/// Eight hex digits that differ between processes and runs (std's hasher keys are random per process).
fn random_suffix() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u32(std::process::id());
    format!("{:08x}", hasher.finish() as u32)
}

fn init_logging(args: &LogArgs) {
    use std::io::IsTerminal;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(&args.log_level));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    match args.log_format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Text => builder.init(),
    }
}

async fn client(args: &ClusterArgs) -> Result<Client, Error> {
    let options = KubeConfigOptions { context: args.context.clone(), ..KubeConfigOptions::default() };
    let config = match (&args.kubeconfig, &args.context) {
        (Some(path), _) => Config::from_custom_kubeconfig(Kubeconfig::read_from(path)?, &options).await?,
        (None, Some(_)) => Config::from_kubeconfig(&options).await?,
        (None, None) => Config::infer().await?,
    };
    Ok(crate::connection::client(config)?)
}

/// Completes on Ctrl-C (the CLI's commands on a laptop that is not Unix).
#[cfg(not(unix))]
async fn shutdown_signal() {
    let _ = tokio::signal::ctrl_c().await;
}

/// Completes on SIGTERM or SIGINT.
#[cfg(unix)]
async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::terminate()) {
        Ok(mut terminate) => {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = terminate.recv() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
