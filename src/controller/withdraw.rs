//! `withdraw`: remove what this controller published, for the chart's uninstall hook.
//!
//! Deleting the ConfigMap while the controller still runs is undone at once, because correcting a deleted
//! ConfigMap is the controller's job. So with `--stop-deployment` the controller's Deployment is first scaled to
//! zero and every one of its pods waited out (a terminating pod may still write until it has exited); only then is
//! the ConfigMap deleted, and only if it carries our managed-by label and was not changed in between.

use std::time::Duration;

use tokio::time::Instant;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, ListParams, Patch, PatchParams};
use tracing::info;

use super::publisher::ConfigMapWriter;
use crate::hosting::configmap::{self, Stored};
use crate::publish::{Withdrawal, withdrawal};
use crate::settings::Settings;

/// How long the controller's pods may take to exit: their termination grace period plus a margin.
const STOP_TIMEOUT: Duration = Duration::from_secs(120);
const POLL: Duration = Duration::from_millis(250);

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot stop Deployment {deployment}: {source}")]
    Stop { deployment: String, source: kube::Error },
    #[error("Deployment {deployment} still has {pods} pod(s) after {timeout:?}; not withdrawing while they may write")]
    StillRunning { deployment: String, pods: usize, timeout: Duration },
    #[error("Deployment {0} selects its pods by no matchLabels, so its pods cannot be waited for")]
    NoSelector(String),
    #[error(transparent)]
    Write(#[from] super::Error),
}

/// What happened to the published ConfigMap.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    Withdrawn,
    /// Other keys share the ConfigMap: only ours, and our label, were removed.
    RemovedKey,
    NothingPublished,
    /// Another tool wrote it; it is theirs to remove.
    NotOurs,
}

/// Stops `stop_deployment` (in `namespace`) if given, then deletes the published ConfigMap if we wrote it.
pub async fn withdraw(
    client: Client,
    settings: &Settings,
    stop_deployment: Option<(&str, &str)>,
) -> Result<Outcome, Error> {
    if let Some((namespace, name)) = stop_deployment {
        stop(client.clone(), namespace, name).await?;
    }
    // Each concern removes what it wrote.
    if let Some(pull) = &settings.pull_secrets {
        super::pull::withdraw(client.clone(), pull).await?;
    }
    let target = settings.target();
    let writer = ConfigMapWriter::new(client, settings, super::publisher::PublisherMetrics::default());
    let Some(configmap) = writer.read().await? else {
        info!(configmap = %target, "nothing to withdraw");
        return Ok(Outcome::NothingPublished);
    };
    let stored = Stored::read(&configmap);
    match withdrawal(&stored) {
        Withdrawal::Delete => {
            // Gone in between is what we wanted too.
            writer.delete(stored.uid.clone(), stored.resource_version.clone()).await?;
            info!(configmap = %target, "withdrawn");
            Ok(Outcome::Withdrawn)
        }
        Withdrawal::RemoveKey => {
            writer.apply(&configmap::released(settings)).await?;
            info!(configmap = %target, "withdrawn: removed our key; the other keys stay");
            Ok(Outcome::RemovedKey)
        }
        Withdrawal::Nothing if stored.owned => {
            info!(configmap = %target, "nothing to withdraw");
            Ok(Outcome::NothingPublished)
        }
        Withdrawal::Nothing => {
            info!(configmap = %target, "not withdrawn: another tool wrote it");
            Ok(Outcome::NotOurs)
        }
    }
}

/// Scales the Deployment to zero and waits until none of its pods exists.
async fn stop(client: Client, namespace: &str, name: &str) -> Result<(), Error> {
    let deployment = format!("{namespace}/{name}");
    let failed = |source| Error::Stop { deployment: deployment.clone(), source };
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    let Some(existing) = deployments.get_opt(name).await.map_err(failed)? else {
        info!(%deployment, "the controller's Deployment is already gone");
        return Ok(());
    };
    let labels = existing.spec.and_then(|spec| spec.selector.match_labels).unwrap_or_default();
    if labels.is_empty() {
        return Err(Error::NoSelector(deployment));
    }
    let selector: kube::core::Selector = labels.into_iter().collect();
    deployments
        .patch(name, &PatchParams::default(), &Patch::Merge(serde_json::json!({"spec": {"replicas": 0}})))
        .await
        .map_err(failed)?;
    info!(%deployment, "scaled to zero; waiting for its pods to exit");
    let pods: Api<Pod> = Api::namespaced(client, namespace);
    let deadline = Instant::now() + STOP_TIMEOUT;
    loop {
        let left = pods.list(&ListParams::default().labels_from(&selector)).await.map_err(failed)?.items.len();
        if left == 0 {
            info!(%deployment, "the controller has stopped");
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(Error::StillRunning { deployment, pods: left, timeout: STOP_TIMEOUT });
        }
        tokio::time::sleep(POLL).await;
    }
}
