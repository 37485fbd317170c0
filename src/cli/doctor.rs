//! `doctor`: why readers see what they see. From this machine it probes the published `host`; from the cluster it
//! lists every registry candidate with why it is or is not published (the controller's own snapshot and decision,
//! not a copy), whether the ConfigMap is ours, foreign or stale, and which controller pods run and lead (a pod is the
//! controller only when it may write the ConfigMap, see `cli::controllers`); with `--from-cluster` it probes
//! `hostFromClusterNetwork` from a short-lived pod and removes it; for each node, whether its runtime is configured to
//! pull the published addresses that need it (its agent's NodePullState, see `cli::nodes`). A closing summary
//! names the sections that found something wrong.
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

use super::controllers::{self, ControllerPod, controller_pods};
use super::text::{say, shout};
use super::{EXIT_READER_REJECTS, EXIT_UNREACHABLE, probe, published_status, readers};
use crate::hosting::{DATA_KEY, LocalRegistryHostingV1};
use crate::keys;
use crate::publish::{self, Action, Memory, Published};
use crate::settings::{PullSecrets, Settings};
use crate::watch::sets::{PublisherWatches, PullWatches};
use crate::{pull, registry, watch};

/// How long the cluster snapshot and the probe pod may take.
const CLUSTER_TIMEOUT: Duration = Duration::from_secs(60);

/// Where and with what image `--from-cluster` runs its probe pod.
pub struct FromCluster {
    pub image: String,
    pub namespace: String,
}

/// `flags` name the ConfigMap to check; what decides it are the settings of the running controller that publishes
/// that ConfigMap (read from its pod's arguments), so a chart value that differs from a flag default is no false
/// alarm. Without such a controller, the flags stand in for it.
pub async fn doctor(client: Client, flags: &Settings, from_cluster: Option<FromCluster>) -> ExitCode {
    let target = flags.target();
    let pods = controller_pods(&client, flags).await;
    let Effective { settings, node_plan, source, kept } = effective_settings(flags, &pods);
    let settings = &settings;
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), &settings.configmap_namespace);
    let configmap = match configmaps.get_opt(&settings.configmap_name).await {
        Ok(configmap) => configmap,
        Err(error) => {
            shout!("error: cannot read ConfigMap {target}: {error}");
            return ExitCode::from(EXIT_UNREACHABLE);
        }
    };
    // The sections that found something wrong, named in the closing summary.
    let mut wrong: Vec<&str> = Vec::new();
    let text = configmap.as_ref().and_then(|c| c.data.as_ref()?.get(DATA_KEY).cloned());
    let verdicts = text.as_deref().map(readers::verdicts).unwrap_or_default();
    // As `get` answers: nothing published (3), or a reader rejects it, an unparsable document included (4).
    let status = published_status(text.as_deref(), &verdicts);
    let document = text.as_deref().and_then(|t| LocalRegistryHostingV1::parse(t).ok()).unwrap_or_default();
    say!("== Published: {target}");
    match text.as_deref().filter(|t| !t.trim().is_empty()) {
        None => say!("  nothing"),
        Some(text) => text.lines().for_each(|line| say!("  {line}")),
    }
    for verdict in &verdicts {
        if let Some(problem) = &verdict.problem {
            say!("  {}: PROBLEM: {problem}", verdict.reader);
        }
    }

    say!("\n== From this machine");
    match &document.host {
        Some(host) => {
            let result = probe::probe(host).await;
            if !result.ok {
                wrong.push("From this machine");
            }
            say!("  host {host}: {}", result.summary);
            if let Some(hint) = loopback_hint(host, result.ok) {
                say!("  hint: {hint}");
            }
            if let (false, Some(help)) = (result.ok, &document.help) {
                say!("  help: {help}");
            }
        }
        None => say!("  no host is published, so tools outside the cluster find no registry"),
    }

    say!("\n== From the cluster (what the controller sees and decides)");
    say!("  settings: {source}");
    say!("  reading the registries, their endpoints and the ConfigMap...");
    let Ok(cluster) = tokio::time::timeout(
        CLUSTER_TIMEOUT,
        watch::observe::<PublisherWatches>(&client, |c| registry::interest(c, settings)),
    )
    .await
    else {
        shout!("error: the cluster's objects could not be read within {CLUSTER_TIMEOUT:?}");
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
    if registries.counted.is_empty() && registries.ignored.is_empty() {
        say!("  no registry: no Service matches {:?} in an allowed namespace", settings.registry_selector.to_string());
    }
    let namespaces = registries.counted.iter().map(|r| &r.id).chain(registries.ignored.iter().map(|r| &r.id));
    let events = controller_events(&client, namespaces.map(|id| id.namespace.as_str())).await;
    let genuine: Vec<&ControllerPod> = match &pods {
        Ok(pods) => pods.iter().filter(|p| p.counts()).collect(),
        Err(()) => Vec::new(),
    };
    let mut unverified = 0;
    let said = |id: &registry::ServiceId| -> Vec<&publish::Notice> {
        decision.notices.iter().filter(|n| n.regards(&id.namespace, &id.name)).collect()
    };
    for registry in &registries.counted {
        let state = format!(
            "{}, priority {}, {}, allowed",
            registry.origin,
            registry.priority,
            if registry.ready { "ready" } else { "not ready" }
        );
        let notices = said(&registry.id);
        let now = decision.published_now.as_ref().is_some_and(|p| p.registry == registry.id);
        let next = decision.published.as_ref().is_some_and(|p| p.registry == registry.id);
        let verdict = match (now, next, kept) {
            (true, true, true) => "published".to_string(),
            // Without a controller the ConfigMap is nobody's to keep current.
            (true, true, false) => format!("published, but no running controller pod keeps {target} current"),
            (_, true, true) => "to be published: the controller has not written it yet".to_string(),
            (_, true, false) => format!("would be published (no running controller pod found for {target})"),
            _ => notices.iter().map(|n| &*n.message).collect::<Vec<_>>().join("; "),
        };
        say!("  {} ({state}): {verdict}", registry.id);
        let (verified, claimed) = last_event(&events, &registry.id, &genuine);
        if let Some((reason, note)) = verified {
            say!("    the controller's last Event on it: {reason}: {note}");
        }
        unverified += claimed;
    }
    for ignored in &registries.ignored {
        let verdict = said(&ignored.id).iter().map(|n| &*n.message).collect::<Vec<_>>().join("; ");
        say!("  {} ({}, namespace not allowed): {verdict}", ignored.id, ignored.origin);
    }
    for (namespace, said) in unknown_namespace_labels(&client).await {
        say!("  namespace {namespace}: {said}");
    }
    let stale = match (&decision.action, stored) {
        (_, Some(stored)) if !stored.owned => {
            let writer = stored.writer.as_deref().unwrap_or("another tool");
            say!("  the ConfigMap was written by {writer}; the controller changes it only with --take-over");
            false
        }
        (Action::Keep, _) => {
            match &decision.held_back {
                Some(why) => say!("  the ConfigMap is kept as it is: {why}"),
                None => say!("  the ConfigMap is current: it holds what the controller would publish now"),
            }
            decision.held_back.is_some()
        }
        (Action::Apply { document: Some(document), .. }, _) => {
            say!("  the ConfigMap is STALE: the controller would publish {document}");
            true
        }
        (Action::Apply { document: None, .. } | Action::Delete { .. }, _) => {
            say!("  the ConfigMap is STALE: the controller would withdraw it");
            true
        }
    };
    if unverified > 0 {
        say!(
            "  {unverified} Event(s) on these registries claim to come from the controller but name none of its \
             pods: not shown (anyone who may create Events can write them)"
        );
    }
    if stale {
        wrong.push("From the cluster");
    }
    controllers(&client, &pods).await;
    if let Some(pull) = &settings.pull_secrets {
        let published = decision.published.as_ref();
        let Ok(observed) = tokio::time::timeout(
            CLUSTER_TIMEOUT,
            watch::observe::<PullWatches>(&client, |o| pull::interest(published, o, pull)),
        )
        .await
        else {
            shout!("error: the pull credentials' objects could not be read within {CLUSTER_TIMEOUT:?}");
            return ExitCode::from(EXIT_UNREACHABLE);
        };
        if !pull_credentials(published, &observed, pull) {
            wrong.push("Pull credentials");
        }
    }
    let (published, document_kept) = (decision.published.as_ref(), decision.kept);
    let nodes = super::nodes::report(&client, published, document_kept, node_plan.as_ref()).await;
    if !nodes.well {
        wrong.push("Node pulls");
    }

    if let Some(from_cluster) = from_cluster {
        say!("\n== From a pod");
        match document.host_from_cluster_network.as_ref().or(document.host.as_ref()) {
            Some(address) => {
                if !probe_from_pod(&client, &from_cluster, address).await {
                    wrong.push("From a pod");
                }
            }
            None => say!("  nothing to probe: neither hostFromClusterNetwork nor host is published"),
        }
    }
    say!("\n== Summary");
    match (status, wrong.as_slice()) {
        (0, []) => say!("  all is well"),
        (3, _) => say!("  nothing is published"),
        (_, sections) => {
            let mut sections = sections.to_vec();
            if status != 0 {
                sections.insert(0, "Published");
            }
            say!("  something is wrong in: {}", sections.join(", "));
        }
    }
    // Not faults (the exit status does not change), but what a reader of "all is well" would otherwise miss.
    for not_done in &nodes.not_done {
        say!("  not done: {not_done}");
    }
    match status {
        0 if !wrong.is_empty() => ExitCode::from(EXIT_READER_REJECTS),
        status => ExitCode::from(status),
    }
}

/// What to do when `host`, the node's loopback at the registry's port, does not answer here: it answers only on a
/// machine that is the node (kind, k3d, Docker Desktop); a node in a VM or elsewhere is reached at its InternalIP.
fn loopback_hint(host: &str, answered: bool) -> Option<String> {
    let (name, port) = host.rsplit_once(':')?;
    let loopback = name == "localhost" || name == "[::1]" || name.starts_with("127.");
    (!answered && loopback && port.parse::<u16>().is_ok()).then(|| {
        "if this machine is not the registry's node (minikube, a VM, a remote cluster), its loopback does not \
         reach the registry: publish the node's InternalIP instead, with the chart value registry.nodeAddress=internal-ip \
         (helm upgrade ... --reset-then-reuse-values --set registry.nodeAddress=internal-ip; flag --node-address internal-ip)"
            .to_string()
    })
}

/// The pull credentials' state (`--pull-secrets`): where they should be, where they are, and what is wrong.
/// Returns whether all is well.
fn pull_credentials(published: Option<&Published>, observed: &pull::Observed, settings: &PullSecrets) -> bool {
    use keys::namespace::{PULL_SECRET_WANTED, PULL_SECRET_WANTED_VALUE};
    say!(
        "\n== Pull credentials (Secret {} in namespaces labelled {PULL_SECRET_WANTED}={PULL_SECRET_WANTED_VALUE})",
        settings.name,
    );
    match published.map(|p| (p, pull::credentials_secret(p))) {
        None => say!("  no registry is published, so none are distributed"),
        Some((p, None)) => {
            say!("  registry {} names no credentials Secret ({})", p.registry, keys::service::PULL_SECRET);
        }
        Some((p, Some((namespace, name)))) => {
            say!("  registry {} names the credentials Secret {namespace}/{name}", p.registry);
        }
    }
    let labelled: Vec<&str> = observed.namespaces.iter().map(|n| n.name.as_str()).collect();
    say!("  labelled namespaces: {}", if labelled.is_empty() { "none".into() } else { labelled.join(", ") });
    let holding: Vec<String> =
        observed.secrets.iter().filter(|s| pull::is_ours(s)).filter_map(|s| s.namespace()).collect();
    say!("  holding the controller's Secret: {}", if holding.is_empty() { "none".into() } else { holding.join(", ") });
    let plan = pull::plan(published, observed, settings);
    for notice in &plan.notices {
        say!("  PROBLEM ({}): {}", notice.reason.as_str(), notice.message);
    }
    let namespaces = |secrets: Vec<String>| secrets.join(", ");
    if !plan.apply.is_empty() {
        say!("  STALE: would write it in {}", namespaces(plan.apply.iter().filter_map(|s| s.namespace()).collect()));
    }
    if !plan.delete.is_empty() {
        say!("  STALE: would remove it from {}", namespaces(plan.delete.iter().map(|(ns, _)| ns.clone()).collect()));
    }
    for account in &plan.accounts {
        say!("  STALE: would update ServiceAccount {}/{}", account.namespace, account.name);
    }
    let well = plan.notices.is_empty() && plan.is_empty();
    if well {
        say!("  current: every labelled namespace holds what the controller would write");
    }
    well
}

/// Each namespace label under our prefix that nothing reads (a typo, a name from before a rename), said with the
/// labels that are read; none when this identity may not list namespaces.
pub(crate) async fn unknown_namespace_labels(client: &Client) -> Vec<(String, String)> {
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let listed = namespaces.list_metadata(&ListParams::default()).await.map(|l| l.items).unwrap_or_default();
    listed
        .iter()
        .flat_map(|namespace| {
            let labels = namespace.metadata.labels.iter().flatten();
            labels.filter_map(|(key, value)| Some((namespace.name_any(), keys::namespace::unknown(key, value)?)))
        })
        .collect()
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

/// The newest Event on a registry Service that the controller recorded (its `reportingInstance` is a pod of the
/// controller's Deployment, running now or replaced since), and how many others claim to be the controller's
/// without naming one: anyone who may create Events can write `reportingController: local-registry-publisher`.
fn last_event(
    events: &std::collections::BTreeMap<String, Vec<Event>>,
    id: &registry::ServiceId,
    controllers: &[&ControllerPod],
) -> (Option<(String, String)>, usize) {
    let on_it: Vec<&Event> = events
        .get(&id.namespace)
        .into_iter()
        .flatten()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(id.name.as_str()))
        .collect();
    let tied = |e: &&Event| e.reporting_instance.as_deref().is_some_and(|i| controllers.iter().any(|p| p.made(i)));
    let (verified, claimed): (Vec<&Event>, Vec<&Event>) = on_it.into_iter().partition(tied);
    let newest = verified
        .into_iter()
        .max_by_key(|e| e.event_time.as_ref().map(|t| t.0))
        .map(|e| (e.reason.clone().unwrap_or_default(), e.note.clone().unwrap_or_default()));
    (newest, claimed.len())
}

/// What doctor judges by: a controller's settings and its node plan's, where they came from, and whether such a
/// controller runs.
struct Effective {
    settings: Settings,
    node_plan: Option<crate::node::NodePlanTarget>,
    source: String,
    kept: bool,
}

/// The settings of the first running controller pod (by namespace and name) that publishes `flags`' ConfigMap,
/// parsed from its container's arguments as the controller parsed them; else `flags` (and no node plan).
fn effective_settings(flags: &Settings, pods: &Result<Vec<ControllerPod>, ()>) -> Effective {
    use clap::Parser;
    let flags_alone = |source: String| Effective { settings: flags.clone(), node_plan: None, source, kept: false };
    let Ok(pods) = pods else {
        return flags_alone("this command's flags (controller pods cannot be listed with this identity)".into());
    };
    // A look-alike (the chart's labels, but no right to write the ConfigMap) is never taken for the controller.
    let mut running: Vec<&ControllerPod> = pods.iter().filter(|p| p.phase == "Running" && p.counts()).collect();
    running.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    for pod in running {
        let argv = std::iter::once(keys::MANAGER.to_string()).chain(pod.args.iter().cloned());
        let Ok(parsed) = crate::config::Args::try_parse_from(argv) else { continue };
        let settings = parsed.publish.settings();
        // Its node plan lives in its own namespace, not in this command's.
        let mut node_plan = parsed.node_plan.target();
        if let Some(target) = &mut node_plan {
            target.namespace.clone_from(&pod.namespace);
        }
        if parsed.command.is_none() && settings.target() == flags.target() {
            let source = format!("those of controller pod {}/{} (its arguments)", pod.namespace, pod.name);
            return Effective { settings, node_plan, source, kept: true };
        }
    }
    flags_alone(format!("this command's flags (no running controller pod publishes {})", flags.target()))
}

/// Controller pods and who holds their Leases.
async fn controllers(client: &Client, pods: &Result<Vec<ControllerPod>, ()>) {
    let Ok(pods) = pods else {
        say!("  controller pods: cannot list pods with this identity");
        return;
    };
    if pods.is_empty() {
        say!("  controller pods: none found with labels {}", controllers::selector());
    }
    for pod in pods {
        match pod.genuine {
            Some(true) => say!("  controller pod {}/{}: {}", pod.namespace, pod.name, pod.phase),
            None => say!(
                "  controller pod {}/{}: {} (not verified: this identity cannot ask whether its ServiceAccount may \
                 write the ConfigMap)",
                pod.namespace,
                pod.name,
                pod.phase
            ),
            Some(false) => say!(
                "  pod {}/{} looks like a controller (its labels) but its ServiceAccount {} may not write the \
                 ConfigMap: not the controller, not used",
                pod.namespace,
                pod.name,
                pod.service_account
            ),
        }
    }
    // A leader's identity is its pod name and a random suffix (see `pod::name`), so its Lease is found by holder.
    let pods: Vec<&ControllerPod> = pods.iter().filter(|p| p.counts()).collect();
    let held_by_a_pod = |holder: &str| pods.iter().any(|p| holder.starts_with(&format!("{}_", p.name)));
    let namespaces: std::collections::BTreeSet<&str> = pods.iter().map(|p| p.namespace.as_str()).collect();
    for namespace in namespaces {
        let leases: Api<Lease> = Api::namespaced(client.clone(), namespace);
        for lease in leases.list(&ListParams::default()).await.map(|l| l.items).unwrap_or_default() {
            let holder = lease.spec.as_ref().and_then(|s| s.holder_identity.clone()).unwrap_or_default();
            if held_by_a_pod(&holder) {
                say!("  leader Lease {namespace}/{}: held by {holder}", lease.name_any());
            }
        }
    }
}

/// Runs `local-registry-publisher probe <address>` in a short-lived pod and prints its answer.
async fn probe_from_pod(client: &Client, from: &FromCluster, address: &str) -> bool {
    let pods: Api<Pod> = Api::namespaced(client.clone(), &from.namespace);
    let pod: Pod = match serde_json::from_value(serde_json::json!({
        "metadata": {"generateName": "registry-doctor-", "labels": {keys::chart::COMPONENT: keys::chart::DOCTOR}},
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
            say!("  cannot build the probe pod: {error}");
            return false;
        }
    };
    let name = match pods.create(&PostParams::default(), &pod).await {
        Ok(created) => created.name_any(),
        Err(error) => {
            say!("  cannot start a probe pod in {}: {error}", from.namespace);
            return false;
        }
    };
    say!("  probing {address} from pod {}/{name} (image {})...", from.namespace, from.image);
    // Finished, or stuck where waiting longer cannot help (its image cannot be pulled, its spec is refused).
    let settled = |pod: Option<&Pod>| {
        let phase = pod.and_then(|p| p.status.as_ref()?.phase.as_deref());
        matches!(phase, Some("Succeeded" | "Failed")) || pod.and_then(stuck).is_some()
    };
    let ended = tokio::time::timeout(CLUSTER_TIMEOUT, await_condition(pods.clone(), &name, settled)).await;
    let pod = match ended {
        Ok(Ok(Some(pod))) => Some(pod),
        // Timed out or lost: say where it got to.
        _ => pods.get_opt(&name).await.ok().flatten(),
    };
    let phase = pod.as_ref().and_then(|p| p.status.as_ref()?.phase.clone()).unwrap_or_default();
    let logs = pods.logs(&name, &LogParams::default()).await.unwrap_or_default();
    let _ = pods.delete(&name, &DeleteParams::default().grace_period(0)).await;
    match (phase.as_str(), pod.as_ref().and_then(stuck).or_else(|| pod.as_ref().and_then(waiting))) {
        ("Succeeded" | "Failed", _) => {
            say!("  {}", logs.trim());
            phase == "Succeeded"
        }
        (_, Some(why)) => {
            say!("  the probe pod could not run: {why}; it was removed");
            false
        }
        (other, None) => {
            say!("  the probe pod did not finish within {CLUSTER_TIMEOUT:?} (phase {other:?}); it was removed");
            false
        }
    }
}

/// Why the pod's container waits, as the kubelet says it ("reason: message").
fn waiting(pod: &Pod) -> Option<String> {
    let statuses = pod.status.as_ref()?.container_statuses.as_ref()?;
    let waiting = statuses.first()?.state.as_ref()?.waiting.as_ref()?;
    Some(super::nodes::verdict::waiting_words(waiting))
}

/// The waiting reason when it is one that waiting longer does not cure.
fn stuck(pod: &Pod) -> Option<String> {
    const HOPELESS: [&str; 5] =
        ["ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull", "CreateContainerConfigError"];
    waiting(pod).filter(|why| HOPELESS.iter().any(|r| why.split(':').next() == Some(r)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_loopback_host_that_does_not_answer_here_points_to_the_nodes_internal_ip() {
        for host in ["localhost:30500", "127.0.0.1:30500", "[::1]:30500"] {
            let hint = loopback_hint(host, false).unwrap_or_else(|| panic!("{host}: no hint"));
            assert!(hint.contains("registry.nodeAddress=internal-ip"), "{hint}");
        }
        assert_eq!(loopback_hint("localhost:30500", true), None, "it answers: nothing to fix");
        for host in ["registry.example:5000", "10.0.0.7:30500", "localhost", "localhost.example:5000"] {
            assert_eq!(loopback_hint(host, false), None, "{host}");
        }
    }
}
