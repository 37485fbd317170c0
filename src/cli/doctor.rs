//! `doctor`: why readers see what they see. From this machine it probes the published `host`; from the cluster it
//! lists every registry candidate with why it is or is not published (the controller's own snapshot and decision,
//! not a copy), whether the ConfigMap is ours, foreign or stale, and which controller pods run and lead; with
//! `--from-cluster` it probes `hostFromClusterNetwork` from a short-lived pod and removes it.
//!
//! Exit status as `get`: 0 all is well; 3 nothing is published; 4 something is wrong (said in the output);
//! 5 the cluster could not be read.

use std::process::ExitCode;
use std::time::Duration;

use tokio::time::Instant;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, DeleteParams, ListParams, LogParams, PostParams};
use kube::runtime::wait::await_condition;
use kube::{Client, ResourceExt};

use super::{EXIT_NONE, EXIT_READER_REJECTS, EXIT_UNREACHABLE, probe, readers};
use crate::controller::{publisher, pull as pull_task};
use crate::hosting::{DATA_KEY, LocalRegistryHostingV1};
use crate::keys;
use crate::publish::{self, Action, Memory, Published, Reason};
use crate::settings::{PullSecrets, Settings};
use crate::{pull, registry};

/// How long the cluster snapshot and the probe pod may take.
const CLUSTER_TIMEOUT: Duration = Duration::from_secs(60);

/// Where and with what image `--from-cluster` runs its probe pod.
pub struct FromCluster {
    pub image: String,
    pub namespace: String,
}

pub async fn doctor(client: Client, settings: &Settings, from_cluster: Option<FromCluster>) -> ExitCode {
    let target = settings.target();
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), &settings.configmap_namespace);
    let configmap = match configmaps.get_opt(&settings.configmap_name).await {
        Ok(configmap) => configmap,
        Err(error) => {
            eprintln!("error: cannot read ConfigMap {target}: {error}");
            return ExitCode::from(EXIT_UNREACHABLE);
        }
    };
    let mut wrong = false;
    let text = configmap.as_ref().and_then(|c| c.data.as_ref()?.get(DATA_KEY).cloned()).unwrap_or_default();
    let document = LocalRegistryHostingV1::parse(&text).unwrap_or_default();
    println!("== Published: {target}");
    if document.is_empty() {
        println!("  nothing");
    } else {
        text.lines().for_each(|line| println!("  {line}"));
        for verdict in readers::verdicts(&text) {
            if let Some(problem) = &verdict.problem {
                wrong = true;
                println!("  {}: PROBLEM: {problem}", verdict.reader);
            }
        }
    }

    println!("\n== From this machine");
    match &document.host {
        Some(host) => {
            let result = probe::probe(host).await;
            wrong |= !result.ok;
            println!("  host {host}: {}", result.summary);
            if let (false, Some(help)) = (result.ok, &document.help) {
                println!("  help: {help}");
            }
        }
        None => println!("  no host is published, so tools outside the cluster find no registry"),
    }

    println!("\n== From the cluster (what the controller sees and decides)");
    println!("  reading the registries, their endpoints and the ConfigMap...");
    let Ok(cluster) = tokio::time::timeout(CLUSTER_TIMEOUT, publisher::observe(&client, settings)).await else {
        eprintln!("error: the cluster's objects could not be read within {CLUSTER_TIMEOUT:?}");
        return ExitCode::from(EXIT_UNREACHABLE);
    };
    let registries = registry::registries(&cluster, settings);
    let memory = Memory::default();
    let stored = cluster.stored();
    let input = publish::Input {
        registries: &registries,
        stored,
        memory: &memory,
        leading: true,
        now: Instant::now(),
        settings,
    };
    let decision = publish::decide(&input);
    if registries.allowed.is_empty() && registries.ignored.is_empty() {
        println!(
            "  no registry: no Service matches {:?} in an allowed namespace",
            settings.registry_selector.to_string()
        );
    }
    let namespaces = registries.allowed.iter().map(|r| &r.id).chain(registries.ignored.iter().map(|r| &r.id));
    let events = controller_events(&client, namespaces.map(|id| id.namespace.as_str())).await;
    let said = |id: &registry::ServiceId| -> Vec<&publish::Notice> {
        decision.notices.iter().filter(|n| n.regards(&id.namespace, &id.name)).collect()
    };
    for registry in &registries.allowed {
        let state = format!(
            "{}, priority {}, {}, allowed",
            registry.origin,
            registry.priority,
            if registry.ready { "ready" } else { "not ready" }
        );
        let notices = said(&registry.id);
        let verdict = if notices.iter().any(|n| n.reason == Reason::Published) {
            "published".to_string()
        } else {
            notices.iter().map(|n| &*n.message).collect::<Vec<_>>().join("; ")
        };
        println!("  {} ({state}): {verdict}", registry.id);
        if let Some((reason, note)) = last_event(&events, &registry.id) {
            println!("    the controller's last Event on it: {reason}: {note}");
        }
    }
    for ignored in &registries.ignored {
        let verdict = said(&ignored.id).iter().map(|n| &*n.message).collect::<Vec<_>>().join("; ");
        println!("  {} ({}, namespace not allowed): {verdict}", ignored.id, ignored.origin);
    }
    let stale = match (&decision.action, stored) {
        (_, Some(stored)) if !stored.owned => {
            let writer = stored.writer.as_deref().unwrap_or("another tool");
            println!("  the ConfigMap was written by {writer}; the controller changes it only with --take-over");
            false
        }
        (Action::Keep, _) => {
            match &decision.held_back {
                Some(why) => println!("  the ConfigMap is kept as it is: {why}"),
                None => println!("  the ConfigMap is current: it holds what the controller would publish now"),
            }
            decision.held_back.is_some()
        }
        (Action::Apply { document: Some(document), .. }, _) => {
            println!("  the ConfigMap is STALE: the controller would publish {document}");
            true
        }
        (Action::Apply { document: None, .. } | Action::Delete { .. }, _) => {
            println!("  the ConfigMap is STALE: the controller would withdraw it");
            true
        }
    };
    wrong |= stale;
    controllers(&client).await;
    if let Some(pull) = &settings.pull_secrets {
        let published = decision.published.as_ref();
        let Ok(observed) = tokio::time::timeout(CLUSTER_TIMEOUT, pull_task::observe(&client, published, pull)).await
        else {
            eprintln!("error: the pull credentials' objects could not be read within {CLUSTER_TIMEOUT:?}");
            return ExitCode::from(EXIT_UNREACHABLE);
        };
        wrong |= !pull_credentials(published, &observed, pull);
    }

    if let Some(from_cluster) = from_cluster {
        println!("\n== From a pod");
        match document.host_from_cluster_network.as_ref().or(document.host.as_ref()) {
            Some(address) => wrong |= !probe_from_pod(&client, &from_cluster, address).await,
            None => println!("  nothing to probe: neither hostFromClusterNetwork nor host is published"),
        }
    }
    if document.is_empty() {
        ExitCode::from(EXIT_NONE)
    } else if wrong {
        ExitCode::from(EXIT_READER_REJECTS)
    } else {
        ExitCode::SUCCESS
    }
}

/// The pull credentials' state (`--pull-secrets`): where they should be, where they are, and what is wrong.
/// Returns whether all is well.
fn pull_credentials(published: Option<&Published>, observed: &pull::Observed, settings: &PullSecrets) -> bool {
    use keys::namespace::{PULL_SECRET_WANTED, PULL_SECRET_WANTED_VALUE};
    println!(
        "\n== Pull credentials (Secret {} in namespaces labelled {PULL_SECRET_WANTED}={PULL_SECRET_WANTED_VALUE})",
        settings.name,
    );
    match published.map(|p| (p, pull::credentials_secret(p))) {
        None => println!("  no registry is published, so none are distributed"),
        Some((p, None)) => {
            println!("  registry {} names no credentials Secret ({})", p.registry, keys::service::PULL_SECRET);
        }
        Some((p, Some((namespace, name)))) => {
            println!("  registry {} names the credentials Secret {namespace}/{name}", p.registry);
        }
    }
    let labelled: Vec<&str> = observed.namespaces.iter().map(|n| n.as_str()).collect();
    println!("  labelled namespaces: {}", if labelled.is_empty() { "none".into() } else { labelled.join(", ") });
    let holding: Vec<String> =
        observed.secrets.iter().filter(|s| pull::is_ours(s)).filter_map(|s| s.namespace()).collect();
    println!(
        "  holding the controller's Secret: {}",
        if holding.is_empty() { "none".into() } else { holding.join(", ") }
    );
    let plan = pull::plan(published, observed, settings);
    for notice in &plan.notices {
        println!("  PROBLEM ({}): {}", notice.reason.as_str(), notice.message);
    }
    let namespaces = |secrets: Vec<String>| secrets.join(", ");
    if !plan.apply.is_empty() {
        println!(
            "  STALE: would write it in {}",
            namespaces(plan.apply.iter().filter_map(|s| s.namespace()).collect())
        );
    }
    if !plan.delete.is_empty() {
        println!(
            "  STALE: would remove it from {}",
            namespaces(plan.delete.iter().map(|(ns, _)| ns.clone()).collect())
        );
    }
    for account in &plan.accounts {
        println!("  STALE: would update ServiceAccount {}/{}", account.namespace, account.name);
    }
    let well = plan.notices.is_empty() && plan.is_empty();
    if well {
        println!("  current: every labelled namespace holds what the controller would write");
    }
    well
}

type Event = k8s_openapi::api::events::v1::Event;

/// The Events this controller recorded in each of `namespaces`, one list per namespace.
async fn controller_events<'a>(
    client: &Client,
    namespaces: impl Iterator<Item = &'a str>,
) -> std::collections::BTreeMap<String, Vec<Event>> {
    let mut found = std::collections::BTreeMap::new();
    for namespace in namespaces.collect::<std::collections::BTreeSet<_>>() {
        let api: Api<Event> = Api::namespaced(client.clone(), namespace);
        let ours = api.list(&ListParams::default()).await.map(|list| list.items).unwrap_or_default();
        let ours = ours.into_iter().filter(|e| e.reporting_controller.as_deref() == Some(keys::MANAGER));
        found.insert(namespace.to_string(), ours.collect());
    }
    found
}

/// The newest Event a running controller recorded on a registry Service: proof that one is at work, and what it said.
fn last_event(
    events: &std::collections::BTreeMap<String, Vec<Event>>,
    id: &registry::ServiceId,
) -> Option<(String, String)> {
    events
        .get(&id.namespace)?
        .iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(id.name.as_str()))
        .max_by_key(|e| e.event_time.as_ref().map(|t| t.0))
        .map(|e| (e.reason.clone().unwrap_or_default(), e.note.clone().unwrap_or_default()))
}

/// The chart's controller pods, whatever the release or name overrides, and the Leases they hold.
const CONTROLLER_PODS: &str =
    "app.kubernetes.io/part-of=local-registry-publisher,app.kubernetes.io/component=controller";

/// Controller pods and who holds their Leases.
async fn controllers(client: &Client) {
    let pods: Api<Pod> = Api::all(client.clone());
    let Ok(list) = pods.list(&ListParams::default().labels(CONTROLLER_PODS)).await else {
        println!("  controller pods: cannot list pods with this identity");
        return;
    };
    if list.items.is_empty() {
        println!("  controller pods: none found with labels {CONTROLLER_PODS}");
    }
    for pod in &list.items {
        let phase = pod.status.as_ref().and_then(|s| s.phase.clone()).unwrap_or_default();
        println!("  controller pod {}/{}: {phase}", pod.namespace().unwrap_or_default(), pod.name_any());
    }
    // A leader's identity is its pod name and a random suffix (see `pod::name`), so its Lease is found by holder.
    let held_by_a_pod = |holder: &str| list.items.iter().any(|p| holder.starts_with(&format!("{}_", p.name_any())));
    let namespaces: std::collections::BTreeSet<String> = list.items.iter().filter_map(|p| p.namespace()).collect();
    for namespace in namespaces {
        let leases: Api<Lease> = Api::namespaced(client.clone(), &namespace);
        for lease in leases.list(&ListParams::default()).await.map(|l| l.items).unwrap_or_default() {
            let holder = lease.spec.as_ref().and_then(|s| s.holder_identity.clone()).unwrap_or_default();
            if held_by_a_pod(&holder) {
                println!("  leader Lease {namespace}/{}: held by {holder}", lease.name_any());
            }
        }
    }
}

/// Runs `local-registry-publisher probe <address>` in a short-lived pod and prints its answer.
async fn probe_from_pod(client: &Client, from: &FromCluster, address: &str) -> bool {
    let pods: Api<Pod> = Api::namespaced(client.clone(), &from.namespace);
    let pod: Pod = match serde_json::from_value(serde_json::json!({
        "metadata": {"generateName": "registry-doctor-", "labels": {"app.kubernetes.io/component": "registry-doctor"}},
        "spec": {
            "restartPolicy": "Never",
            "securityContext": {"runAsNonRoot": true, "runAsUser": 65532, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{"name": "probe", "image": from.image, "args": ["probe", address],
                "securityContext": {"allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true,
                    "capabilities": {"drop": ["ALL"]}}}]
        }
    })) {
        Ok(pod) => pod,
        Err(error) => {
            println!("  cannot build the probe pod: {error}");
            return false;
        }
    };
    let name = match pods.create(&PostParams::default(), &pod).await {
        Ok(created) => created.name_any(),
        Err(error) => {
            println!("  cannot start a probe pod in {}: {error}", from.namespace);
            return false;
        }
    };
    println!("  probing {address} from pod {}/{name} (image {})...", from.namespace, from.image);
    let finished = |pod: Option<&Pod>| {
        let phase = pod.and_then(|p| p.status.as_ref()?.phase.as_deref());
        matches!(phase, Some("Succeeded" | "Failed"))
    };
    let ended = tokio::time::timeout(CLUSTER_TIMEOUT, await_condition(pods.clone(), &name, finished)).await;
    let phase = match ended {
        Ok(Ok(Some(pod))) => pod.status.and_then(|s| s.phase).unwrap_or_default(),
        // Timed out or lost: say where it got to.
        _ => pods.get_opt(&name).await.ok().flatten().and_then(|p| p.status?.phase).unwrap_or_default(),
    };
    let logs = pods.logs(&name, &LogParams::default()).await.unwrap_or_default();
    let _ = pods.delete(&name, &DeleteParams::default().grace_period(0)).await;
    match phase.as_str() {
        "Succeeded" | "Failed" => {
            println!("  {}", logs.trim());
            phase == "Succeeded"
        }
        other => {
            println!("  the probe pod did not finish within {CLUSTER_TIMEOUT:?} (phase {other:?}); it was removed");
            false
        }
    }
}
