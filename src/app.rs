//! Wiring for the binary: logging, the Kubernetes client, signals.

use std::process::ExitCode;

use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use tracing::error;
use tracing_subscriber::EnvFilter;

use crate::config::{Args, LogFormat};
use crate::controller::Publisher;

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
    init_logging(&args);
    let client = match client(&args).await {
        Ok(client) => client,
        Err(error) => {
            error!("{error}");
            return ExitCode::FAILURE;
        }
    };
    Publisher::new(client, args.publish).run(shutdown_signal()).await;
    ExitCode::SUCCESS
}

fn init_logging(args: &Args) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(&args.log_level));
    use std::io::IsTerminal;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    match args.log_format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Text => builder.init(),
    }
}

async fn client(args: &Args) -> Result<Client, Error> {
    let options = KubeConfigOptions { context: args.context.clone(), ..KubeConfigOptions::default() };
    let config = match (&args.kubeconfig, &args.context) {
        (Some(path), _) => Config::from_custom_kubeconfig(Kubeconfig::read_from(path)?, &options).await?,
        (None, Some(_)) => Config::from_kubeconfig(&options).await?,
        (None, None) => Config::infer().await?,
    };
    Ok(Client::try_from(config)?)
}

/// Completes on SIGTERM or SIGINT.
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
