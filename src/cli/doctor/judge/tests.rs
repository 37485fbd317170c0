use k8s_openapi::api::coordination::v1::LeaseSpec;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};

use super::*;
use crate::cli::probe::Probe;
use crate::hosting::configmap::Stored;
use crate::publish::{Input, Memory, Reason};
use crate::registry::Registry;
use crate::registry::fixtures::{ignored, registry};

const TARGET: &str = "kube-public/local-registry-hosting";

fn text(section: &Section) -> String {
    section.lines.join("\n")
}

fn pod(name: &str, genuine: Option<bool>) -> ControllerPod {
    ControllerPod::fixture(name, Some("lrp"), genuine)
}

/// The controller's decision on `counted` (best first), `ignored` and what the ConfigMap holds.
fn decide(counted: Vec<Registry>, ignored: Vec<registry::Ignored>, stored: Option<&Stored>) -> (Registries, Decision) {
    let registries = Registries { counted, ignored };
    let (settings, memory) = (Settings::default(), Memory::default());
    let decision = crate::publish::decide(&Input::new(&registries, stored, &memory, true, &settings));
    (registries, decision)
}

/// The ConfigMap as the controller wrote it for `registry`.
fn ours(registry: &Registry) -> Stored {
    let document = registry.document.as_ref().ok();
    Stored::read(&crate::hosting::configmap::desired(document, &Settings::default()))
}

/// The cluster section of `decision`, with the controller running (`kept`), `events` in namespace `reg` and `pods`.
fn cluster(
    registries: &Registries,
    decision: &Decision,
    stored: Option<&Stored>,
    kept: bool,
    events: Vec<Event>,
    pods: &Result<Vec<ControllerPod>, ()>,
) -> Section {
    let settings = Settings::default();
    let events: BTreeMap<String, Vec<Event>> = [("reg".to_string(), events)].into();
    let labels = [("tools".to_string(), "label x is read by nothing".to_string())];
    let found = Cluster {
        target: TARGET,
        settings: &settings,
        registries,
        decision,
        stored,
        kept,
        events: &events,
        pods,
        unknown_labels: &labels,
    };
    from_the_cluster(&found)
}

fn event(on: &str, instance: &str, reason: &str, second: i64) -> Event {
    let time = k8s_openapi::jiff::Timestamp::from_second(1_800_000_000 + second).expect("a time");
    Event {
        regarding: Some(ObjectReference { name: Some(on.into()), ..ObjectReference::default() }),
        reporting_instance: Some(instance.into()),
        reason: Some(reason.into()),
        note: Some(format!("{reason} note")),
        event_time: Some(MicroTime(time)),
        ..Event::default()
    }
}

#[test]
fn the_published_section_shows_the_text_and_each_readers_problem() {
    let nothing = Document::of(None);
    assert_eq!(nothing.section(TARGET).lines, [format!("== Published: {TARGET}"), "  nothing".into()]);
    assert_eq!(nothing.status, crate::cli::EXIT_NONE);
    let blank = Document::of(Some("  \n".into()));
    assert_eq!(blank.section(TARGET).lines[1], "  nothing");
    let fine = Document::of(Some("host: \"localhost:5001\"\nhelp: \"https://example.com\"\n".into()));
    assert_eq!(fine.section(TARGET).lines[1..], ["  host: \"localhost:5001\"", "  help: \"https://example.com\""]);
    assert_eq!((fine.status, fine.document.host.as_deref()), (0, Some("localhost:5001")));
    assert!(!fine.section(TARGET).wrong);
    let rejected = Document::of(Some("host: \"http://localhost:5001\"\n".into()));
    let said = text(&rejected.section(TARGET));
    assert!(said.contains(": PROBLEM: "), "{said}");
    assert!(rejected.section(TARGET).wrong && rejected.status == EXIT_READER_REJECTS);
}

#[test]
fn this_machines_section_probes_the_host_and_hints_at_the_internal_ip_for_a_loopback_that_does_not_answer() {
    let document = |host: Option<&str>, help: Option<&str>| LocalRegistryHostingV1 {
        host: host.map(String::from),
        help: help.map(String::from),
        ..LocalRegistryHostingV1::default()
    };
    let probe = |ok| Probe { address: "localhost:30500".into(), ok, summary: format!("answered {ok}") };
    let none = from_this_machine(&document(None, None), None);
    assert_eq!(none.lines[1], "  no host is published, so tools outside the cluster find no registry");
    assert!(!none.wrong);
    let answered = from_this_machine(&document(Some("localhost:30500"), Some("https://help")), Some(&probe(true)));
    assert_eq!(answered.lines[1..], ["  host localhost:30500: answered true"]);
    assert!(!answered.wrong);
    let silent = from_this_machine(&document(Some("localhost:30500"), Some("https://help")), Some(&probe(false)));
    assert!(silent.wrong);
    assert_eq!(silent.lines[1], "  host localhost:30500: answered false");
    assert!(silent.lines[2].starts_with("  hint: ") && silent.lines[2].contains("registry.nodeAddress=internal-ip"));
    assert_eq!(silent.lines[3], "  help: https://help");
    let elsewhere = from_this_machine(&document(Some("registry.example:5000"), None), Some(&probe(false)));
    assert_eq!(elsewhere.lines.len(), 2, "no hint, no help: {elsewhere:?}");
}

#[test]
fn a_loopback_host_that_does_not_answer_here_points_to_the_nodes_internal_ip_or_a_host_port() {
    for host in ["localhost:30500", "127.0.0.1:30500", "[::1]:30500"] {
        let hint = loopback_hint(host, false).unwrap_or_else(|| panic!("{host}: no hint"));
        assert!(hint.contains("registry.nodeAddress=internal-ip"), "{hint}");
        assert!(hint.contains("not in nftables mode") && hint.contains("give the registry pod a hostPort"), "{hint}");
        assert!(hint.contains("KubeProxyNFTablesLocalhostNodePorts"), "{hint}");
    }
    assert_eq!(loopback_hint("localhost:30500", true), None, "it answers: nothing to fix");
    for host in ["registry.example:5000", "10.0.0.7:30500", "localhost", "localhost.example:5000"] {
        assert_eq!(loopback_hint(host, false), None, "{host}");
    }
}

#[test]
fn each_registry_is_published_to_be_published_or_not_with_the_controllers_words() {
    let (zot, spare) = (registry("zot", 10, true), registry("spare", 1, true));
    let stored = ours(&zot);
    let (registries, decision) = decide(vec![zot.clone(), spare], Vec::new(), Some(&stored));
    let pods = Ok(vec![pod("lrp-7d9f8b6c5-x2k4p", Some(true))]);
    let kept = text(&cluster(&registries, &decision, Some(&stored), true, Vec::new(), &pods));
    assert!(kept.contains("  reg/zot (labelled Service, priority 10, ready, allowed): published\n"), "{kept}");
    assert!(kept.contains("  reg/spare (labelled Service, priority 1, ready, allowed): "), "{kept}");
    assert!(!kept.contains("reg/spare (labelled Service, priority 1, ready, allowed): published"), "{kept}");
    assert!(kept.contains("the ConfigMap is current: it holds what the controller would publish now"), "{kept}");
    let nobody = text(&cluster(&registries, &decision, Some(&stored), false, Vec::new(), &pods));
    assert!(nobody.contains(&format!("reg/zot (labelled Service, priority 10, ready, allowed): published, but no running controller pod keeps {TARGET} current")), "{nobody}");

    // Nothing written yet.
    let (registries, decision) = decide(vec![registry("zot", 10, true)], Vec::new(), None);
    let section = cluster(&registries, &decision, None, true, Vec::new(), &pods);
    let said = text(&section);
    let line = "  reg/zot (labelled Service, priority 10, ready, allowed): to be published: the controller has not written it yet";
    assert!(said.contains(line), "{said}");
    assert!(said.contains("  the ConfigMap is STALE: the controller would publish "), "{said}");
    assert!(section.wrong);
    let unrun = text(&cluster(&registries, &decision, None, false, Vec::new(), &pods));
    assert!(unrun.contains(&format!(": would be published (no running controller pod found for {TARGET})")), "{unrun}");
}

#[test]
fn a_registry_not_published_is_told_with_the_notices_of_the_decision_and_an_ignored_one_with_its_namespace() {
    let (registries, mut decision) = decide(vec![registry("zot", 10, true)], vec![ignored("tenant", "hijack")], None);
    decision.published = None;
    decision.published_now = None;
    let zot = registries.counted[0].reference.clone();
    decision.notices = vec![
        crate::publish::Notice::new(&zot, Reason::NotPublished, "first"),
        crate::publish::Notice::new(&zot, Reason::NotPublished, "second"),
        crate::publish::Notice::new(&registries.ignored[0].reference, Reason::NamespaceNotAllowed, "not allowed here"),
    ];
    let said = text(&cluster(&registries, &decision, None, true, Vec::new(), &Ok(Vec::new())));
    assert!(said.contains("  reg/zot (labelled Service, priority 10, ready, allowed): first; second\n"), "{said}");
    assert!(said.contains("  tenant/hijack (labelled Service, namespace not allowed): not allowed here\n"), "{said}");
    assert!(said.contains("  namespace tools: label x is read by nothing"), "{said}");
    assert!(!said.contains("no registry:"), "{said}");
}

#[test]
fn with_no_registry_the_selector_is_named_and_a_withdrawal_or_a_foreign_configmap_is_told() {
    let (registries, decision) = decide(Vec::new(), Vec::new(), None);
    let section = cluster(&registries, &decision, None, true, Vec::new(), &Ok(Vec::new()));
    let said = text(&section);
    let selector = Settings::default().registry_selector.to_string();
    assert!(
        said.starts_with(&format!("  no registry: no Service matches {selector:?} in an allowed namespace")),
        "{said}"
    );
    assert!(said.contains("the ConfigMap is current"), "{said}");
    assert!(!section.wrong);
    // A Service that matches counts as a registry found, allowed or not: only with neither is the selector named.
    for (counted, ignored) in
        [(vec![registry("zot", 10, true)], Vec::new()), (Vec::new(), vec![ignored("tenant", "x")])]
    {
        let (registries, decision) = decide(counted, ignored, None);
        let said = text(&cluster(&registries, &decision, None, true, Vec::new(), &Ok(Vec::new())));
        assert!(!said.contains("no registry:"), "{said}");
    }

    let stored = ours(&registry("gone", 10, true));
    let (registries, decision) = decide(Vec::new(), Vec::new(), Some(&stored));
    let section = cluster(&registries, &decision, Some(&stored), true, Vec::new(), &Ok(Vec::new()));
    assert!(text(&section).contains("  the ConfigMap is STALE: the controller would withdraw it"), "{section:?}");
    assert!(section.wrong);

    let foreign = Stored { owned: false, writer: Some("kind".into()), ..ours(&registry("zot", 10, true)) };
    let (registries, decision) = decide(vec![registry("zot", 10, true)], Vec::new(), Some(&foreign));
    let section = cluster(&registries, &decision, Some(&foreign), true, Vec::new(), &Ok(Vec::new()));
    assert!(
        text(&section).contains("  the ConfigMap was written by kind; the controller changes it only with --take-over")
    );
    assert!(!section.wrong, "another writer's ConfigMap is not a fault of ours");
    let unnamed = Stored { writer: None, ..foreign };
    let section = cluster(&registries, &decision, Some(&unnamed), true, Vec::new(), &Ok(Vec::new()));
    assert!(text(&section).contains("written by another tool;"), "{section:?}");
}

#[test]
fn a_held_back_write_is_told_and_counts_as_wrong() {
    let zot = registry("zot", 10, true);
    let stored = ours(&zot);
    let (registries, mut decision) = decide(vec![zot], Vec::new(), Some(&stored));
    decision.held_back = Some("another writer keeps undoing ours".into());
    let section = cluster(&registries, &decision, Some(&stored), true, Vec::new(), &Ok(Vec::new()));
    assert!(text(&section).contains("  the ConfigMap is kept as it is: another writer keeps undoing ours"));
    assert!(section.wrong);
}

#[test]
fn only_events_a_controller_pod_made_are_shown_the_newest_and_the_others_are_counted() {
    let zot = registry("zot", 10, true);
    let stored = ours(&zot);
    let (registries, decision) = decide(vec![zot], Vec::new(), Some(&stored));
    let pods = Ok(vec![pod("lrp-7d9f8b6c5-x2k4p", Some(true)), pod("lrp-5c6b7d8f9-abcde", Some(false))]);
    let events = vec![
        event("zot", "lrp-7d9f8b6c5-x2k4p", "Older", 1),
        event("zot", "lrp-1a2b3c4d5-zzzzz", "Newest", 3),
        event("zot", "lrp-7d9f8b6c5-x2k4p", "Newer", 2),
        event("other", "lrp-7d9f8b6c5-x2k4p", "Elsewhere", 9),
        event("zot", "forger", "Forged", 9),
    ];
    let said = text(&cluster(&registries, &decision, Some(&stored), true, events.clone(), &pods));
    // In the registry's namespace anyone who may create Events could have written it: shown, not as the controller's.
    assert!(
        said.contains(
            "    its last Event naming a controller pod (not verified: written in namespace reg, where anyone who may \
             create Events can write one; by /lrp-1a2b3c4d5-zzzzz): Newest: Newest note"
        ),
        "{said}"
    );
    assert!(!said.contains("the controller's last Event"), "{said}");
    // In the controller's own namespace (cluster admins only), it is the controller's.
    let mut at_home = pod("lrp-7d9f8b6c5-x2k4p", Some(true));
    at_home.namespace = "reg".into();
    let at_home = vec![at_home];
    let said = text(&cluster(&registries, &decision, Some(&stored), true, events, &Ok(at_home)));
    assert!(said.contains("    the controller's last Event on it: Newest: Newest note"), "{said}");
    assert!(
        said.contains("  1 Event(s) on these registries claim to come from the controller but name none"),
        "{said}"
    );
    // A look-alike's pods make no Event the controller's.
    let events = vec![event("zot", "lrp-5c6b7d8f9-abcde", "Lookalike", 1)];
    let pods = Ok(vec![pod("lrp-5c6b7d8f9-abcde", Some(false))]);
    let said = text(&cluster(&registries, &decision, Some(&stored), true, events, &pods));
    assert!(!said.contains("last Event") && said.contains("  1 Event(s)"), "{said}");
    let said = text(&cluster(&registries, &decision, Some(&stored), true, Vec::new(), &Err(())));
    assert!(!said.contains("Event(s)"), "{said}");
}

fn lease(namespace: &str, name: &str, holder: &str) -> Lease {
    Lease {
        metadata: ObjectMeta { namespace: Some(namespace.into()), name: Some(name.into()), ..ObjectMeta::default() },
        spec: Some(LeaseSpec { holder_identity: Some(holder.into()), ..LeaseSpec::default() }),
    }
}

#[test]
fn controller_pods_are_listed_as_the_api_server_judged_them_and_a_lease_only_when_one_of_them_holds_it() {
    assert_eq!(controllers(&Err(()), &[]).lines, ["  controller pods: cannot list pods with this identity"]);
    let none = controllers(&Ok(Vec::new()), &[]);
    assert_eq!(none.lines.len(), 1);
    assert!(none.lines[0].starts_with("  controller pods: none found with labels app.kubernetes.io/"), "{none:?}");
    let pods = Ok(vec![pod("lrp-a", Some(true)), pod("lrp-b", None), pod("lrp-c", Some(false))]);
    let leases = [lease("lrp", "lrp-leader", "lrp-a_x1"), lease("lrp", "other", "lrp-c_x2"), lease("lrp", "free", "")];
    let section = controllers(&pods, &leases);
    assert_eq!(
        section.lines,
        [
            "  controller pod lrp/lrp-a: Running",
            "  pod lrp/lrp-b looks like a controller (its labels): Running, but could not be verified (this identity \
             may not create SubjectAccessReviews to ask whether its ServiceAccount may write the ConfigMap), so it is \
             not used: its settings and Events are not read as the controller's",
            "  pod lrp/lrp-c looks like a controller (its labels) but its ServiceAccount lrp may not write the \
             ConfigMap: not the controller, not used",
            "  leader Lease lrp/lrp-leader: held by lrp-a_x1",
        ]
    );
    assert!(!section.wrong, "pods are told, never judged wrong");
    // An identity that starts with a pod's name but no `_` is not that pod's.
    assert_eq!(controllers(&Ok(vec![pod("lrp-a", Some(true))]), &[lease("lrp", "l", "lrp-ab_1")]).lines.len(), 1);
}

#[test]
fn leases_are_read_in_each_namespace_of_a_counting_pod_once() {
    let mut elsewhere = pod("lrp-x", None);
    elsewhere.namespace = "tools".into();
    let pods = Ok(vec![pod("lrp-a", Some(true)), pod("lrp-b", Some(true)), pod("fake", Some(false)), elsewhere]);
    assert_eq!(lease_namespaces(&pods), ["lrp"], "a pod not verified is not taken for the controller");
    let mut fake = pod("fake", Some(false));
    fake.namespace = "tenant".into();
    assert!(lease_namespaces(&Ok(vec![fake])).is_empty());
    assert!(lease_namespaces(&Err(())).is_empty());
}

#[test]
fn the_pull_credentials_section_says_what_the_controller_would_change_and_is_current_only_when_nothing() {
    use crate::pull::fixtures::{observed, registry, settings};
    let settings = settings(&["default"]);
    let nothing = pull_credentials(None, &pull::Observed::default(), &settings);
    assert_eq!(nothing.lines[1], "  no registry is published, so none are distributed");
    assert_eq!(nothing.lines[2..4], ["  labelled namespaces: none", "  holding the controller's Secret: none"]);
    assert!(nothing.lines.last().is_some_and(|l| l.starts_with("  current: ")) && !nothing.wrong, "{nothing:?}");
    let unnamed = pull_credentials(Some(&registry(None)), &pull::Observed::default(), &settings);
    assert!(unnamed.lines[1].starts_with("  registry reg/registry names no credentials Secret ("), "{unnamed:?}");
    let published = registry(Some("creds"));
    let stale = pull_credentials(Some(&published), &observed(&["app", "ci"], "t0ken"), &settings);
    let said = text(&stale);
    assert!(stale.lines[0].contains(&format!("Pull credentials (Secret {} in namespaces labelled ", settings.name)));
    assert_eq!(stale.lines[1], "  registry reg/registry names the credentials Secret reg/creds");
    assert!(said.contains("  labelled namespaces: app, ci\n"), "{said}");
    assert!(said.contains("  STALE: would write it in app, ci"), "{said}");
    assert!(stale.wrong && !said.contains("  current: "), "{said}");
    assert!(!text(&nothing).contains("STALE") && !said.contains("would remove"), "{said}");
    // Our Secret is still in `gone`, whose label was removed.
    let earlier = pull::plan(Some(&published), &observed(&["gone"], "t0ken"), &settings);
    let mut left = observed(&["app"], "t0ken");
    left.secrets = earlier.apply.into_iter().map(pull::fixtures::stored).collect();
    let said = text(&pull_credentials(Some(&published), &left, &settings));
    assert!(said.lines().any(|l| l == "  STALE: would remove it from gone"), "{said}");
}

#[test]
fn each_end_of_the_probe_pod_is_told_and_only_a_success_is_well() {
    let cases = [
        (ProbePod::NotBuilt("bad".into()), "  cannot build the probe pod: bad", true),
        (
            ProbePod::NotStarted { namespace: "ns".into(), error: "forbidden".into() },
            "  cannot start a probe pod in ns: forbidden",
            true,
        ),
        (ProbePod::Finished { succeeded: true, logs: "\n  host x: answered\n".into() }, "  host x: answered", false),
        (ProbePod::Finished { succeeded: false, logs: "refused".into() }, "  refused", true),
        (
            ProbePod::Stuck("ErrImagePull: no".into()),
            "  the probe pod could not run: ErrImagePull: no; it was removed",
            true,
        ),
        (
            ProbePod::Unfinished { phase: "Pending".into(), after: std::time::Duration::from_secs(60) },
            "  the probe pod did not finish within 60s (phase \"Pending\"); it was removed",
            true,
        ),
    ];
    for (probed, line, wrong) in cases {
        let section = from_a_pod(&probed);
        assert_eq!((section.lines.as_slice(), section.wrong), ([line.to_string()].as_slice(), wrong), "{probed:?}");
    }
}

#[test]
fn the_summary_names_what_is_wrong_and_the_exit_status_follows_the_published_document_first() {
    let not_done = ["x gets no node file".to_string()];
    let (well, status) = summary(0, &[], &not_done);
    assert_eq!(well.lines, ["\n== Summary", "  all is well", "  not done: x gets no node file"]);
    assert_eq!(status, 0);
    let (wrong, status) = summary(0, &["From this machine", "Node pulls"], &[]);
    assert_eq!(wrong.lines[1], "  something is wrong in: From this machine, Node pulls");
    assert_eq!(status, EXIT_READER_REJECTS);
    let (nothing, status) = summary(crate::cli::EXIT_NONE, &["From the cluster"], &[]);
    assert_eq!((nothing.lines[1].as_str(), status), ("  nothing is published", crate::cli::EXIT_NONE));
    let (rejected, status) = summary(EXIT_READER_REJECTS, &["Pull credentials"], &[]);
    assert_eq!(rejected.lines[1], "  something is wrong in: Published, Pull credentials");
    assert_eq!(status, EXIT_READER_REJECTS);
    let (rejected, _) = summary(EXIT_READER_REJECTS, &[], &[]);
    assert_eq!(rejected.lines[1], "  something is wrong in: Published");
}

#[test]
fn the_settings_are_those_of_the_first_running_genuine_controller_publishing_the_same_configmap() {
    let flags = Settings::default();
    let with = |name: &str, namespace: &str, args: &[&str], genuine: Option<bool>, phase: &str| {
        let mut pod = ControllerPod::fixture(name, None, genuine);
        (pod.namespace, pod.phase) = (namespace.into(), phase.into());
        pod.args = args.iter().map(|a| a.to_string()).collect();
        pod
    };
    let unlisted = effective_settings(&flags, &Err(()));
    assert!(!unlisted.kept && unlisted.node_plan.is_none());
    assert_eq!(unlisted.source, "this command's flags (controller pods cannot be listed with this identity)");

    let plan = "--node-plan-configmap=lrp-node-plan";
    let pods = Ok(vec![
        with("b-real", "lrp", &["--cluster-domain=corp.local", plan], Some(true), "Running"),
        with("a-fake", "lrp", &["--cluster-domain=evil.example"], Some(false), "Running"),
        with("a-pending", "lrp", &["--cluster-domain=pending.local"], Some(true), "Pending"),
        with("a-other", "lrp", &["--configmap-name=other", "--cluster-domain=other.local"], None, "Running"),
        with("a-broken", "lrp", &["--no-such-flag"], Some(true), "Running"),
        with("a-command", "lrp", &["get"], Some(true), "Running"),
    ]);
    let found = effective_settings(&flags, &pods);
    assert!(found.kept);
    assert_eq!(found.settings.cluster_domain, "corp.local");
    assert_eq!(found.source, "those of controller pod lrp/b-real (its arguments)");
    let target = found.node_plan.expect("its node plan");
    assert_eq!((target.namespace.as_str(), target.name.as_str()), ("lrp", "lrp-node-plan"));

    let only_others = Ok(vec![with("a-other", "lrp", &["--configmap-name=other"], Some(true), "Running")]);
    let alone = effective_settings(&flags, &only_others);
    assert!(!alone.kept);
    assert_eq!(alone.source, format!("this command's flags (no running controller pod publishes {TARGET})"));
    // By namespace, then name: the same pods in another order give the same answer.
    let first = |pods: Vec<ControllerPod>| effective_settings(&flags, &Ok(pods)).source;
    let (x, y) = (with("x", "b", &[], Some(true), "Running"), with("y", "a", &[], Some(true), "Running"));
    assert_eq!(first(vec![x, y]), "those of controller pod a/y (its arguments)");
}
