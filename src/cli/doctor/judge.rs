//! What doctor concludes from what [`super::gather`] read: each section as the lines it prints and whether it
//! found something wrong, and the exit status. Pure, so every verdict is unit-tested from fixtures (`tests.rs`).

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::events::v1::Event;
use kube::ResourceExt;

use crate::cli::controllers::{self, ControllerPod};
use crate::cli::section::Section;
use crate::cli::{EXIT_READER_REJECTS, probe, published_status, readers};
use crate::hosting::LocalRegistryHostingV1;
use crate::hosting::configmap::Stored;
use crate::keys;
use crate::publish::{Action, Decision, Published};
use crate::registry::{self, Registries};
use crate::settings::{PullSecrets, Settings};
use crate::{node, pull};

/// The published document as readers read it.
pub struct Document {
    pub text: Option<String>,
    pub verdicts: Vec<readers::Verdict>,
    /// As `get` answers: nothing published (3), or a reader rejects it, an unparsable document included (4).
    pub status: u8,
    pub document: LocalRegistryHostingV1,
}

impl Document {
    pub fn of(text: Option<String>) -> Self {
        let verdicts = text.as_deref().map(readers::verdicts).unwrap_or_default();
        let status = published_status(text.as_deref(), &verdicts);
        let document = text.as_deref().and_then(|t| LocalRegistryHostingV1::parse(t).ok()).unwrap_or_default();
        Self { text, verdicts, status, document }
    }

    /// The text and each reader's problem with it.
    pub fn section(&self, target: &str) -> Section {
        let mut section = Section { lines: vec![format!("== Published: {target}")], wrong: self.status != 0 };
        match self.text.as_deref().filter(|t| !t.trim().is_empty()) {
            None => section.say("  nothing"),
            Some(text) => readers::document_lines(text).into_iter().for_each(|line| section.say(format!("  {line}"))),
        }
        for verdict in &self.verdicts {
            if let Some(problem) = &verdict.problem {
                section.say(format!("  {}: PROBLEM: {problem}", verdict.reader));
            }
        }
        section
    }
}

/// Whether `host`, probed from this machine (`probed`, `None` when nothing is published), answers.
pub fn from_this_machine(document: &LocalRegistryHostingV1, probed: Option<&probe::Probe>) -> Section {
    let mut section = Section::titled("From this machine");
    match (&document.host, probed) {
        (Some(host), Some(result)) => {
            section.wrong = !result.ok;
            section.say(format!("  host {host}: {}", result.summary));
            if let Some(hint) = loopback_hint(host, result.ok) {
                section.say(format!("  hint: {hint}"));
            }
            if let (false, Some(help)) = (result.ok, &document.help) {
                section.say(format!("  help: {help}"));
            }
        }
        _ => section.say("  no host is published, so tools outside the cluster find no registry"),
    }
    section
}

/// What to do when `host`, the node's loopback at the registry's port, does not answer here: it answers only on a
/// machine that is the node (kind, k3d, Docker Desktop); a node in a VM or elsewhere is reached at its InternalIP.
/// On the node itself a nodePort answers on loopback only where kube-proxy serves it there (not in nftables mode,
/// never on [::1]), while a hostPort does in every mode (the CNI's portmap).
pub fn loopback_hint(host: &str, answered: bool) -> Option<String> {
    let (name, port) = host.rsplit_once(':')?;
    let loopback = name == "localhost" || name == "[::1]" || name.starts_with("127.");
    (!answered && loopback && port.parse::<u16>().is_ok()).then(|| {
        format!(
            "if this machine is not the registry's node (minikube, a VM, a remote cluster), its loopback does not \
             reach the registry: publish the node's InternalIP instead, with the chart value registry.nodeAddress=internal-ip \
             (helm upgrade ... --reset-then-reuse-values --set registry.nodeAddress=internal-ip; flag --node-address internal-ip). \
             If it is the node (k3s, MicroK8s) and the port is a nodePort, kube-proxy serves it on loopback in iptables mode \
             only (not in nftables mode, never on [::1]; the node section says the mode): give the registry pod a hostPort, \
             which the CNI's portmap serves on loopback in every mode and the controller publishes before a nodePort, \
             publish the InternalIP as above, or, {}",
            crate::kube_proxy::NFTABLES_LOCALHOST_GATE
        )
    })
}

/// What the cluster section judges: the controller's own snapshot and decision, and what tells of it.
pub struct Cluster<'a> {
    pub target: &'a str,
    pub settings: &'a Settings,
    pub registries: &'a Registries,
    pub decision: &'a Decision,
    pub stored: Option<&'a Stored>,
    /// A running controller publishes the target, so the ConfigMap is someone's to keep current.
    pub kept: bool,
    /// The controller's Events in each registry's namespace.
    pub events: &'a BTreeMap<String, Vec<Event>>,
    pub pods: &'a Result<Vec<ControllerPod>, ()>,
    /// Namespace labels under our prefix that nothing reads, with what was meant.
    pub unknown_labels: &'a [(String, String)],
}

/// Every registry candidate with why it is or is not published, and whether the ConfigMap is stale (the lines after
/// the progress line, which the caller prints before reading the cluster).
pub fn from_the_cluster(found: &Cluster) -> Section {
    let Cluster { target, settings, registries, decision, stored, kept, events, pods, unknown_labels } = found;
    let mut section = Section::default();
    if registries.counted.is_empty() && registries.ignored.is_empty() {
        section.say(format!(
            "  no registry: no Service matches {:?} in an allowed namespace",
            settings.registry_selector.to_string()
        ));
    }
    let genuine: Vec<&ControllerPod> = match pods {
        Ok(pods) => pods.iter().filter(|p| p.counts()).collect(),
        Err(()) => Vec::new(),
    };
    let mut unverified = 0;
    let said = |id: &registry::ServiceId| -> String {
        let notices = decision.notices.iter().filter(|n| n.regards(&id.namespace, &id.name));
        notices.map(|n| &*n.message).collect::<Vec<_>>().join("; ")
    };
    for registry in &registries.counted {
        let state = format!(
            "{}, priority {}, {}, allowed",
            registry.origin,
            registry.priority,
            if registry.ready { "ready" } else { "not ready" }
        );
        let now = decision.published_now.as_ref().is_some_and(|p| p.registry == registry.id);
        let next = decision.published.as_ref().is_some_and(|p| p.registry == registry.id);
        let verdict = match (now, next, kept) {
            (true, true, true) => "published".to_string(),
            // Without a controller the ConfigMap is nobody's to keep current.
            (true, true, false) => format!("published, but no running controller pod keeps {target} current"),
            (_, true, true) => "to be published: the controller has not written it yet".to_string(),
            (_, true, false) => format!("would be published (no running controller pod found for {target})"),
            _ => said(&registry.id),
        };
        section.say(format!("  {} ({state}): {verdict}", registry.id));
        let (last, claimed) = last_event(events, &registry.id, &genuine);
        match last {
            Some(LastEvent { verified: true, reason, note, .. }) => {
                section.say(format!("    the controller's last Event on it: {reason}: {note}"))
            }
            Some(LastEvent { verified: false, writer, reason, note }) => section.say(format!(
                "    its last Event naming a controller pod (not verified: written in namespace {}, where anyone who \
                 may create Events can write one; by {writer}): {reason}: {note}",
                registry.id.namespace
            )),
            None => {}
        }
        unverified += claimed;
    }
    for ignored in &registries.ignored {
        section.say(format!("  {} ({}, namespace not allowed): {}", ignored.id, ignored.origin, said(&ignored.id)));
    }
    for (namespace, said) in *unknown_labels {
        section.say(format!("  namespace {namespace}: {said}"));
    }
    section.wrong = match (&decision.action, stored) {
        (_, Some(stored)) if !stored.owned => {
            let writer = stored.writer.as_deref().unwrap_or("another tool");
            section.say(format!(
                "  the ConfigMap was written by {writer}; the controller changes it only with --take-over"
            ));
            false
        }
        (Action::Keep, _) => {
            section.say(match &decision.held_back {
                Some(why) => format!("  the ConfigMap is kept as it is: {why}"),
                None => "  the ConfigMap is current: it holds what the controller would publish now".into(),
            });
            decision.held_back.is_some()
        }
        (Action::Apply { document: Some(document), .. }, _) => {
            section.say(format!("  the ConfigMap is STALE: the controller would publish {document}"));
            true
        }
        (Action::Apply { document: None, .. } | Action::Delete { .. }, _) => {
            section.say("  the ConfigMap is STALE: the controller would withdraw it");
            true
        }
    };
    if unverified > 0 {
        section.say(format!(
            "  {unverified} Event(s) on these registries claim to come from the controller but name none of its \
             pods: not shown (anyone who may create Events can write them)"
        ));
    }
    section
}

/// The newest Event on a registry Service that names a pod of the controller's Deployment (running now or replaced
/// since) as its `reportingInstance`.
struct LastEvent {
    /// Nobody but a cluster admin can have written it: it is in the controller's own namespace, which only cluster
    /// admins write (README, Security model). Anywhere else anyone who may create Events there can set any
    /// `reportingController` and `reportingInstance`.
    verified: bool,
    /// `reportingController/reportingInstance`, as it says.
    writer: String,
    reason: String,
    note: String,
}

/// The newest Event on a registry Service naming a controller pod (see [`LastEvent`]), and how many others claim to
/// be the controller's without naming one: anyone who may create Events can write `reportingController:
/// local-registry-publisher`.
fn last_event(
    events: &BTreeMap<String, Vec<Event>>,
    id: &registry::ServiceId,
    controllers: &[&ControllerPod],
) -> (Option<LastEvent>, usize) {
    let on_it = events.get(&id.namespace).into_iter().flatten();
    let on_it = on_it.filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(id.name.as_str()));
    let maker = |e: &Event| {
        let instance = e.reporting_instance.as_deref()?;
        controllers.iter().find(|p| p.made(instance))
    };
    let (named, claimed): (Vec<&Event>, Vec<&Event>) = on_it.partition(|e| maker(e).is_some());
    let newest = named.into_iter().max_by_key(|e| e.event_time.as_ref().map(|t| t.0)).map(|e| LastEvent {
        verified: maker(e).is_some_and(|pod| pod.namespace == id.namespace),
        writer: format!(
            "{}/{}",
            e.reporting_controller.as_deref().unwrap_or_default(),
            e.reporting_instance.as_deref().unwrap_or_default()
        ),
        reason: e.reason.clone().unwrap_or_default(),
        note: e.note.clone().unwrap_or_default(),
    });
    (newest, claimed.len())
}

/// Controller pods, each as the API server judged its right to write the ConfigMap, and the Leases one holds
/// (`leases`: each counting pod's namespace's Leases).
pub fn controllers(pods: &Result<Vec<ControllerPod>, ()>, leases: &[Lease]) -> Section {
    let mut section = Section::default();
    let Ok(pods) = pods else {
        section.say("  controller pods: cannot list pods with this identity");
        return section;
    };
    if pods.is_empty() {
        section.say(format!("  controller pods: none found with labels {}", controllers::selector()));
    }
    for pod in pods {
        let (namespace, name, phase) = (&pod.namespace, &pod.name, &pod.phase);
        section.say(match pod.genuine {
            Some(true) => format!("  controller pod {namespace}/{name}: {phase}"),
            None => format!(
                "  pod {namespace}/{name} looks like a controller (its labels): {phase}, but could not be verified \
                 (this identity may not create SubjectAccessReviews to ask whether its ServiceAccount may write the \
                 ConfigMap), so it is not used: its settings and Events are not read as the controller's"
            ),
            Some(false) => format!(
                "  pod {namespace}/{name} looks like a controller (its labels) but its ServiceAccount {} may not write \
                 the ConfigMap: not the controller, not used",
                pod.service_account
            ),
        });
    }
    // A leader's identity is its pod name and a random suffix (see `pod::name`), so its Lease is found by holder.
    let pods: Vec<&ControllerPod> = pods.iter().filter(|p| p.counts()).collect();
    let held_by_a_pod = |holder: &str| pods.iter().any(|p| holder.starts_with(&format!("{}_", p.name)));
    for lease in leases {
        let holder = lease.spec.as_ref().and_then(|s| s.holder_identity.clone()).unwrap_or_default();
        if held_by_a_pod(&holder) {
            let namespace = lease.namespace().unwrap_or_default();
            section.say(format!("  leader Lease {namespace}/{}: held by {holder}", lease.name_any()));
        }
    }
    section
}

/// The namespaces whose Leases tell who leads: those of the pods that count as the controller, each once.
pub fn lease_namespaces(pods: &Result<Vec<ControllerPod>, ()>) -> Vec<String> {
    let pods = pods.iter().flatten().filter(|p| p.counts());
    let namespaces: std::collections::BTreeSet<&str> = pods.map(|p| p.namespace.as_str()).collect();
    namespaces.into_iter().map(str::to_string).collect()
}

/// The pull credentials' state (`--pull-secrets`): where they should be, where they are, and what is wrong.
pub fn pull_credentials(published: Option<&Published>, observed: &pull::Observed, settings: &PullSecrets) -> Section {
    use keys::namespace::{PULL_SECRET_WANTED, PULL_SECRET_WANTED_VALUE};
    let mut section = Section::titled(&format!(
        "Pull credentials (Secret {} in namespaces labelled {PULL_SECRET_WANTED}={PULL_SECRET_WANTED_VALUE})",
        settings.name,
    ));
    section.say(match published.map(|p| (p, pull::credentials_secret(p))) {
        None => "  no registry is published, so none are distributed".into(),
        Some((p, None)) => {
            format!("  registry {} names no credentials Secret ({})", p.registry, keys::service::PULL_SECRET)
        }
        Some((p, Some((namespace, name)))) => {
            format!("  registry {} names the credentials Secret {namespace}/{name}", p.registry)
        }
    });
    let listed = |names: Vec<String>| if names.is_empty() { "none".into() } else { names.join(", ") };
    let labelled = observed.namespaces.iter().map(|n| n.name.clone()).collect();
    section.say(format!("  labelled namespaces: {}", listed(labelled)));
    let holding = observed.secrets.iter().filter(|s| pull::is_ours(s)).filter_map(|s| s.metadata.namespace.clone());
    section.say(format!("  holding the controller's Secret: {}", listed(holding.collect())));
    let plan = pull::plan(published, observed, settings);
    for notice in &plan.notices {
        section.say(format!("  PROBLEM ({}): {}", notice.reason.as_str(), notice.message));
    }
    if !plan.apply.is_empty() {
        let namespaces: Vec<String> = plan.apply.iter().filter_map(|s| s.metadata.namespace.clone()).collect();
        section.say(format!("  STALE: would write it in {}", namespaces.join(", ")));
    }
    if !plan.delete.is_empty() {
        let namespaces: Vec<String> = plan.delete.iter().map(|(ns, _)| ns.clone()).collect();
        section.say(format!("  STALE: would remove it from {}", namespaces.join(", ")));
    }
    for account in &plan.accounts {
        section.say(format!("  STALE: would update ServiceAccount {}/{}", account.namespace, account.name));
    }
    section.wrong = !(plan.notices.is_empty() && plan.is_empty());
    if !section.wrong {
        section.say("  current: every labelled namespace holds what the controller would write");
    }
    section
}

/// What became of the probe pod `--from-cluster` runs.
#[derive(Debug, PartialEq, Eq)]
pub enum ProbePod {
    NotBuilt(String),
    NotStarted {
        namespace: String,
        error: String,
    },
    /// It ran to the end (`succeeded`: the registry answered), with what it printed.
    Finished {
        succeeded: bool,
        logs: String,
    },
    /// Its container waits for a reason that waiting longer does not cure.
    Stuck(String),
    /// It did not finish in time; `phase` is where it got to.
    Unfinished {
        phase: String,
        after: Duration,
    },
}

/// What became of `--from-cluster`'s probe pod, told.
pub fn from_a_pod(probed: &ProbePod) -> Section {
    let mut section = Section::default();
    let (line, ok) = match probed {
        ProbePod::NotBuilt(error) => (format!("  cannot build the probe pod: {error}"), false),
        ProbePod::NotStarted { namespace, error } => {
            (format!("  cannot start a probe pod in {namespace}: {error}"), false)
        }
        // The probe's own output, one line per address it probed, each escaped by the probe as it printed it.
        ProbePod::Finished { succeeded, logs } => {
            let lines: Vec<String> = logs.trim().lines().map(|line| format!("  {line}")).collect();
            let last = lines.len().saturating_sub(1);
            for line in &lines[..last] {
                section.say(line.clone());
            }
            (lines.get(last).cloned().unwrap_or_default(), *succeeded)
        }
        ProbePod::Stuck(why) => (format!("  the probe pod could not run: {why}; it was removed"), false),
        ProbePod::Unfinished { phase, after } => {
            (format!("  the probe pod did not finish within {after:?} (phase {phase:?}); it was removed"), false)
        }
    };
    section.say(line);
    section.wrong = !ok;
    section
}

/// The closing summary and the exit status: `status` is the published document's (as `get` answers), `wrong` the
/// sections that found something, `not_done` what is not failing but not done either (the node section's).
pub fn summary(status: u8, wrong: &[&str], not_done: &[String]) -> (Section, u8) {
    let mut section = Section::titled("Summary");
    section.say(match (status, wrong) {
        (0, []) => "  all is well".to_string(),
        (3, _) => "  nothing is published".to_string(),
        (_, sections) => {
            let mut sections = sections.to_vec();
            if status != 0 {
                sections.insert(0, "Published");
            }
            format!("  something is wrong in: {}", sections.join(", "))
        }
    });
    // Not faults (the exit status does not change), but what a reader of "all is well" would otherwise miss.
    for not_done in not_done {
        section.say(format!("  not done: {not_done}"));
    }
    let exit = match status {
        0 if !wrong.is_empty() => EXIT_READER_REJECTS,
        status => status,
    };
    (section, exit)
}

/// What doctor judges by: a controller's settings and its node plan's, where they came from, and whether such a
/// controller runs.
pub struct Effective {
    pub settings: Settings,
    pub node_plan: Option<node::NodePlanTarget>,
    pub source: String,
    pub kept: bool,
}

/// The settings of the first running controller pod (by namespace and name) that publishes `flags`' ConfigMap,
/// parsed from its container's arguments as the controller parsed them; else `flags` (and no node plan).
pub fn effective_settings(flags: &Settings, pods: &Result<Vec<ControllerPod>, ()>) -> Effective {
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
        let settings = parsed.settings();
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
    if pods.iter().any(|p| p.genuine.is_none()) {
        return flags_alone(
            "this command's flags (a pod that looks like the controller could not be verified with this identity, \
             which may not create SubjectAccessReviews; see below)"
                .into(),
        );
    }
    flags_alone(format!("this command's flags (no running controller pod publishes {})", flags.target()))
}

#[cfg(test)]
mod tests;
