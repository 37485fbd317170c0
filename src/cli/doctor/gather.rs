//! What doctor reads from the cluster, and nothing else: each function is API calls and their answers, which
//! [`super::judge`] turns into the report. `tests.rs` proves the requests and what is made of scripted answers
//! against a mocked API server; tests/cli.rs runs them against the control plane.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DeleteParams, ListParams, LogParams, PostParams};
use kube::runtime::wait::await_condition;
use kube::{Client, ResourceExt};

use super::FromCluster;
use super::judge::ProbePod;
use crate::hosting::DATA_KEY;
use crate::publish::Published;
use crate::settings::{PullSecrets, Settings};
use crate::watch::sets::{PublisherWatches, PullWatches};
use crate::{keys, pull, registry, watch};

/// How long the cluster snapshot and the probe pod may take.
pub const CLUSTER_TIMEOUT: Duration = Duration::from_secs(60);

/// The published text of the ConfigMap `settings` name; `Ok(None)` when there is none.
pub async fn published_text(client: &Client, settings: &Settings) -> Result<Option<String>, kube::Error> {
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), &settings.configmap_namespace);
    let configmap = configmaps.get_opt(&settings.configmap_name).await?;
    Ok(configmap.and_then(|c| c.data?.remove(DATA_KEY)))
}

/// The controller's own snapshot of the registries, their endpoints and the ConfigMap; `None` when it could not be
/// read within [`CLUSTER_TIMEOUT`].
pub async fn snapshot(client: &Client, settings: &Settings) -> Option<registry::Cluster> {
    let observed = watch::observe::<PublisherWatches>(client, |c| registry::interest(c, settings));
    tokio::time::timeout(CLUSTER_TIMEOUT, observed).await.ok()
}

/// What the pull credentials' task reads for `published`; `None` when it could not be read within
/// [`CLUSTER_TIMEOUT`].
pub async fn pull_objects(
    client: &Client,
    published: Option<&Published>,
    settings: &PullSecrets,
) -> Option<pull::Observed> {
    let observed = watch::observe::<PullWatches>(client, |o| pull::interest(published, o, settings));
    tokio::time::timeout(CLUSTER_TIMEOUT, observed).await.ok()
}

/// The Events this controller recorded in each of `namespaces`, one list per namespace (none where this identity
/// may not list them).
pub async fn controller_events<'a>(
    client: &Client,
    namespaces: impl Iterator<Item = &'a str>,
) -> BTreeMap<String, Vec<Event>> {
    let mut found = BTreeMap::new();
    for namespace in namespaces.collect::<BTreeSet<_>>() {
        let api: Api<Event> = Api::namespaced(client.clone(), namespace);
        let listed = api.list(&ListParams::default()).await.map(|list| list.items).unwrap_or_default();
        let ours = listed.into_iter().filter(|e| e.reporting_controller.as_deref() == Some(keys::MANAGER));
        found.insert(namespace.to_string(), ours.collect());
    }
    found
}

/// Each namespace label under our prefix that nothing reads (a typo, a name from before a rename), said with the
/// labels that are read; none when this identity may not list namespaces.
pub async fn unknown_namespace_labels(client: &Client) -> Vec<(String, String)> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let listed = namespaces.list_metadata(&ListParams::default()).await.map(|l| l.items).unwrap_or_default();
    listed
        .iter()
        .flat_map(|namespace| {
            let labels = namespace.metadata.labels.iter().flatten();
            labels.filter_map(|(key, value)| Some((namespace.name_any(), keys::namespace::unknown(key, value)?)))
        })
        .collect()
}

/// The Leases of each of `namespaces` (none where this identity may not list them).
pub async fn leases(client: &Client, namespaces: &[String]) -> Vec<Lease> {
    let mut found = Vec::new();
    for namespace in namespaces {
        let leases: Api<Lease> = Api::namespaced(client.clone(), namespace);
        found.extend(leases.list(&ListParams::default()).await.map(|l| l.items).unwrap_or_default());
    }
    found
}

/// Starts a pod running `local-registry-publisher probe <address>` and returns its name.
pub async fn start_probe_pod(client: &Client, from: &FromCluster, address: &str) -> Result<String, ProbePod> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), &from.namespace);
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"generateName": "registry-doctor-", "labels": {keys::chart::COMPONENT: keys::chart::DOCTOR}},
        "spec": {
            "restartPolicy": "Never",
            "securityContext": {"runAsNonRoot": true, "runAsUser": 65532, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{"name": "probe", "image": from.image, "args": ["probe", address],
                "securityContext": {"allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true,
                    "capabilities": {"drop": ["ALL"]}}}]
        }
    }))
    .map_err(|error| ProbePod::NotBuilt(error.to_string()))?;
    match pods.create(&PostParams::default(), &pod).await {
        Ok(created) => Ok(created.name_any()),
        Err(error) => Err(ProbePod::NotStarted { namespace: from.namespace.clone(), error: error.to_string() }),
    }
}

/// Waits for the probe pod `name` to finish or get stuck, reads what it printed, and removes it.
pub async fn finish_probe_pod(client: &Client, from: &FromCluster, name: &str) -> ProbePod {
    let pods: Api<Pod> = Api::namespaced(client.clone(), &from.namespace);
    // Finished, or stuck where waiting longer cannot help (its image cannot be pulled, its spec is refused).
    let settled = |pod: Option<&Pod>| {
        let phase = pod.and_then(|p| p.status.as_ref()?.phase.as_deref());
        matches!(phase, Some("Succeeded" | "Failed")) || pod.and_then(stuck).is_some()
    };
    let ended = tokio::time::timeout(CLUSTER_TIMEOUT, await_condition(pods.clone(), name, settled)).await;
    let pod = match ended {
        Ok(Ok(Some(pod))) => Some(pod),
        // Timed out or lost: say where it got to.
        _ => pods.get_opt(name).await.ok().flatten(),
    };
    let phase = pod.as_ref().and_then(|p| p.status.as_ref()?.phase.clone()).unwrap_or_default();
    let logs = pods.logs(name, &LogParams::default()).await.unwrap_or_default();
    let _ = pods.delete(name, &DeleteParams::default().grace_period(0)).await;
    match (phase.as_str(), pod.as_ref().and_then(stuck).or_else(|| pod.as_ref().and_then(waiting))) {
        ("Succeeded" | "Failed", _) => ProbePod::Finished { succeeded: phase == "Succeeded", logs },
        (_, Some(why)) => ProbePod::Stuck(why),
        (_, None) => ProbePod::Unfinished { phase, after: CLUSTER_TIMEOUT },
    }
}

/// Why the pod's container waits, as the kubelet says it ("reason: message").
fn waiting(pod: &Pod) -> Option<String> {
    let statuses = pod.status.as_ref()?.container_statuses.as_ref()?;
    let waiting = statuses.first()?.state.as_ref()?.waiting.as_ref()?;
    Some(crate::cli::nodes::verdict::waiting_words(waiting))
}

/// The waiting reason when it is one that waiting longer does not cure.
fn stuck(pod: &Pod) -> Option<String> {
    const HOPELESS: [&str; 5] =
        ["ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull", "CreateContainerConfigError"];
    waiting(pod).filter(|why| HOPELESS.iter().any(|r| why.split(':').next() == Some(r)))
}

#[cfg(test)]
mod tests;
