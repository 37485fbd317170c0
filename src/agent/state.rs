//! This node's state, derived once per pass from what the agent applied and what the runtime reads ([`derive`]):
//! its `NodePullState` (see [`crate::node::api::state`], kept by [`super::writer`]), the agent's Event ([`Notice`])
//! and its metrics all come from the one [`Derived`] value, so they cannot disagree. Pure: no I/O.

use k8s_openapi::api::core::v1::ObjectReference;

use super::runtime::{Reading, Report};
use crate::events::Tell;
use crate::node::api::state::{
    Address, ConfigPathCheck, Configured, ConfiguredReason, Listener, ListenerState, Relay, RelayReason, RelayServing,
    Runtime, Verdict,
};
use crate::node::{NodePlan, PLAN_FORMAT};

/// The node's state after a pass, but for who wrote it and when.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Derived {
    pub runtime: Runtime,
    /// One per planned address, sorted by address.
    pub addresses: Vec<Address>,
    pub configured: Configured,
    /// One per planned relay, sorted by port.
    pub relays: Vec<Relay>,
    /// `None` when the agent does not relay and the plan asks for no relay.
    pub relay_serving: Option<RelayServing>,
}

/// What a pass found of the node: the last pass's `report` of the runtime's files, what the runtime's config says,
/// the format of a newer plan refused meanwhile, and what the relay listens on (`None`: the agent does not relay).
#[derive(Clone, Copy, Debug)]
pub struct Found<'a> {
    pub report: &'a Report,
    pub runtime: &'a Reading,
    pub too_new: Option<u32>,
    /// Why the plan in force is not yet the one this release's controller writes (see `crate::keys::chart::PLAN_STAMP`).
    pub pending: Option<&'a str>,
    pub relays: Option<&'a [Relay]>,
    /// Whether the agent writes the runtime's configuration (`--runtime=none` does not).
    pub runtime_files: bool,
}

/// The node's state from the plan in force and what the pass `found`. An address is configured only when its file
/// is the agent's and the runtime reads the directory; a relay serves only where it listens.
pub fn derive(plan: &NodePlan, found: Found<'_>) -> Derived {
    let Found { report, runtime, too_new, pending, relays, runtime_files } = found;
    if !runtime_files {
        let (relays, relay_serving) = relay_serving(plan, relays);
        let configured = pending_first(pending, unconfigured(plan, too_new));
        let runtime = Runtime { config_path_check: ConfigPathCheck::Unchecked, ..Runtime::default() };
        return Derived { runtime, addresses: Vec::new(), configured, relays, relay_serving };
    }
    let unread = runtime.unread();
    let mut addresses: Vec<Address> = plan
        .hosts
        .iter()
        .map(|entry| {
            let failed = report.failed.iter().find(|(address, _)| *address == entry.address);
            let (verdict, message) = if report.foreign.contains(&entry.address) {
                (Verdict::Foreign, Some("a file this agent did not write configures it: left as it is".into()))
            } else if let Some((_, why)) = failed {
                (Verdict::Failed, Some(why.clone()))
            } else if unread {
                (Verdict::Unread, None)
            } else {
                (Verdict::Configured, None)
            };
            let (address, endpoint) = (entry.address.clone(), entry.endpoint.to_string());
            let server = entry.server.as_ref().map(ToString::to_string);
            Address { address, endpoint, server, verdict, message }
        })
        .collect();
    addresses.sort_by(|a, b| a.address.cmp(&b.address));
    let runtime_state = Runtime {
        config_path_check: runtime.check,
        config_file: runtime.config_file.clone(),
        config_path: runtime.config_path.clone(),
        message: runtime.said.clone(),
    };
    let configured = pending_first(pending, configured(plan, report, runtime, too_new));
    let (relays, relay_serving) = relay_serving(plan, relays);
    Derived { runtime: runtime_state, addresses, configured, relays, relay_serving }
}

/// The `Configured` condition of an agent that writes no runtime configuration (`--runtime=none`): nothing of the
/// plan's addresses is on the node, and that is what its admin chose; a plan too new is still a trouble.
fn unconfigured(plan: &NodePlan, too_new: Option<u32>) -> Configured {
    if let Some(format) = too_new {
        return Configured { configured: false, reason: ConfiguredReason::PlanTooNew, message: plan_too_new(format) };
    }
    let mut message = "this agent writes no runtime configuration (--runtime=none, nodeAgent.runtime): the node's \
                       runtime pulls only the addresses it reaches by itself, the relay's among them"
        .to_string();
    if !plan.hosts.is_empty() {
        message.push_str(&format!("; {} planned address(es) get no file here", plan.hosts.len()));
    }
    Configured { configured: true, reason: ConfiguredReason::RuntimeNotConfigured, message }
}

/// The relays as the node holds them and the `RelayServing` condition: every trouble said once, the first (by
/// [`RelayReason`]'s order) its reason. A loopback address the node lacks (no IPv6) is said, not a trouble.
fn relay_serving(plan: &NodePlan, found: Option<&[Relay]>) -> (Vec<Relay>, Option<RelayServing>) {
    let Some(found) = found else {
        if plan.relays.is_empty() {
            return (Vec::new(), None);
        }
        let relays: Vec<Relay> = plan
            .relays
            .iter()
            .map(|entry| Relay {
                port: entry.port,
                registry: entry.registry.clone(),
                target: entry.target.to_string(),
                listeners: loopback(entry.port)
                    .into_iter()
                    .map(|address| Listener { address, state: ListenerState::Off, message: None })
                    .collect(),
            })
            .collect();
        let named: Vec<String> = relays.iter().map(|r| format!("{} at port {}", r.registry, r.port)).collect();
        let message = format!(
            "the node plan relays {} on every node's loopback, but this agent does not relay: set              nodeAgent.relay.enabled=true (the agent's --relay)",
            named.join(", ")
        );
        return (relays, Some(RelayServing { serving: false, reason: RelayReason::RelayOff, message }));
    };
    let mut relays = found.to_vec();
    relays.sort_by_key(|relay| relay.port);
    if relays.is_empty() {
        let message = "the agent relays, but no registry the cluster admin relays is published".to_string();
        return (relays, Some(RelayServing { serving: true, reason: RelayReason::NothingToRelay, message }));
    }
    let mut troubles: Vec<(RelayReason, String)> = Vec::new();
    let mut notes = Vec::new();
    for relay in &relays {
        for listener in &relay.listeners {
            let why = listener.message.as_deref().unwrap_or_default();
            let at = format!("{} (the relay of {})", listener.address, relay.registry);
            match listener.state {
                ListenerState::Serving => {}
                ListenerState::Taken => troubles.push((
                    RelayReason::RelayPortTaken,
                    format!("{at} is taken by another process on this node; the agent binds it as soon as it is free"),
                )),
                ListenerState::Failed | ListenerState::Off => {
                    troubles.push((RelayReason::RelayListenFailed, format!("{at} cannot be listened on: {why}")))
                }
                ListenerState::Unavailable => notes.push(format!("{} is not served: {why}", listener.address)),
            }
        }
        if relay.listeners.iter().all(|l| l.state == ListenerState::Unavailable) {
            troubles.push((
                RelayReason::RelayListenFailed,
                format!("{} has no loopback address to listen on", relay.registry),
            ));
        }
    }
    troubles.sort_by_key(|(reason, _)| *reason);
    if let Some((reason, _)) = troubles.first() {
        let message = troubles.iter().map(|(_, said)| said.as_str()).collect::<Vec<_>>().join("; ");
        return (relays, Some(RelayServing { serving: false, reason: *reason, message }));
    }
    let serving: Vec<String> = relays
        .iter()
        .map(|relay| {
            let at: Vec<&str> = relay
                .listeners
                .iter()
                .filter(|l| l.state == ListenerState::Serving)
                .map(|l| l.address.as_str())
                .collect();
            format!("{} at {} to {}", relay.registry, at.join(" and "), relay.target)
        })
        .collect();
    let mut message = format!("relaying {}", serving.join("; "));
    if !notes.is_empty() {
        message.push_str(&format!(" ({})", notes.join("; ")));
    }
    (relays, Some(RelayServing { serving: true, reason: RelayReason::RelayServing, message }))
}

/// The loopback addresses a relay at `port` listens on, as the object names them.
pub fn loopback(port: u16) -> [String; 2] {
    [format!("127.0.0.1:{port}"), format!("[::1]:{port}")]
}

/// Why a node is pending when its plan's ConfigMap holds no plan yet: the chart made it, the controller has not
/// written it.
pub const PLAN_NOT_WRITTEN: &str = "the node plan is not written yet: this release's controller has not said what the \
     nodes need (it writes the plan within seconds of starting; if it does not, look at its pod)";

/// Why a node is pending when its plan was written for another controller configuration than the chart's now.
pub fn plan_of_another_configuration(written: Option<&str>, wanted: Option<&str>) -> String {
    format!(
        "the node plan was written by a controller of another configuration (stamp {}, this release's is {}): \
         the last plan stays in force until this release's controller writes its own",
        written.unwrap_or("none"),
        wanted.unwrap_or("none")
    )
}

/// `configured`, unless the plan is pending: then False with that reason, the other troubles after it.
fn pending_first(pending: Option<&str>, configured: Configured) -> Configured {
    let Some(why) = pending else { return configured };
    let message = if configured.configured { why.to_string() } else { format!("{why}; {}", configured.message) };
    Configured { configured: false, reason: ConfiguredReason::PlanPending, message }
}

/// Why a plan of `format` is not applied: its condition's message, and the agent's log line when no plan was ever
/// applied (so there is no condition yet).
pub fn plan_too_new(format: u32) -> String {
    format!(
        "the node plan is of format {format}, newer than this agent's {PLAN_FORMAT}: it is not applied and the last \
         plan stays in force; upgrade the agent (the chart's image) to the controller's version"
    )
}

/// The `Configured` condition: every trouble said once, the first (by [`ConfiguredReason`]'s order) its reason.
/// Its message names no address while the node is configured, so a plan change on a settled node changes nothing
/// the agent tells but its object.
fn configured(plan: &NodePlan, report: &Report, runtime: &Reading, too_new: Option<u32>) -> Configured {
    let mut troubles: Vec<(ConfiguredReason, String)> = Vec::new();
    if let Some(format) = too_new {
        troubles.push((ConfiguredReason::PlanTooNew, plan_too_new(format)));
    }
    if runtime.unread() {
        let said = runtime.said.clone().unwrap_or_else(|| "the runtime does not read the agent's files".into());
        troubles.push((ConfiguredReason::ConfigPathMismatch, said));
    }
    if !report.failed.is_empty() {
        let failures: Vec<String> = report.failed.iter().map(|(address, why)| format!("{address}: {why}")).collect();
        troubles.push((ConfiguredReason::NodeFileFailed, format!("node file not written: {}", failures.join("; "))));
    }
    if !report.foreign.is_empty() {
        troubles.push((
            ConfiguredReason::ForeignNodeFile,
            format!(
                "{}: a file this agent did not write configures them; it is left as it is, so this node pulls them as \
                 that file says (remove it to let the agent configure the address)",
                report.foreign.join(", ")
            ),
        ));
    }
    troubles.sort_by_key(|(reason, _)| *reason);
    if let Some((reason, _)) = troubles.first() {
        let message = troubles.iter().map(|(_, said)| said.as_str()).collect::<Vec<_>>().join("; ");
        return Configured { configured: false, reason: *reason, message };
    }
    let mut message = if plan.hosts.is_empty() {
        "no published address needs a node file on this node".to_string()
    } else {
        "every planned address has its node file".to_string()
    };
    match (runtime.check, &runtime.said) {
        (ConfigPathCheck::Unchecked, _) if !plan.hosts.is_empty() => message.push_str(
            " (whether containerd reads them is not checked: the agent was given no containerd config, \
             nodeAgent.runtimeConfig)",
        ),
        (_, Some(said)) => message.push_str(&format!(" ({said})")),
        _ => {}
    }
    Configured { configured: true, reason: ConfiguredReason::NodeFilesConfigured, message }
}

/// The agent's Events about its node, on its own Pod: each condition, told when it changes.
#[derive(Clone, Debug, PartialEq)]
pub struct Notice {
    pub regarding: ObjectReference,
    reason: &'static str,
    warning: bool,
    message: String,
}

/// What the agent tells of `derived`: its `Configured` condition, and its `RelayServing` condition when it has one.
pub fn notices(regarding: &ObjectReference, derived: &Derived) -> Vec<Notice> {
    let configured = &derived.configured;
    let mut notices = vec![Notice {
        regarding: regarding.clone(),
        reason: configured.reason.as_str(),
        warning: !configured.configured,
        message: configured.message.clone(),
    }];
    notices.extend(derived.relay_serving.as_ref().map(|relay| Notice {
        regarding: regarding.clone(),
        reason: relay.reason.as_str(),
        warning: !relay.serving,
        message: relay.message.clone(),
    }));
    notices
}

impl Tell for Notice {
    fn regarding(&self) -> &ObjectReference {
        &self.regarding
    }
    fn reason(&self) -> &'static str {
        self.reason
    }
    fn warning(&self) -> bool {
        self.warning
    }
    fn message(&self) -> &str {
        &self.message
    }
}

/// How many planned addresses are in each state, and what the runtime's config says: the agent's gauges.
pub fn counts(derived: &Derived) -> (Vec<(Verdict, usize)>, ConfigPathCheck) {
    let by_verdict =
        Verdict::ALL.iter().map(|v| (*v, derived.addresses.iter().filter(|a| a.verdict == *v).count())).collect();
    (by_verdict, derived.runtime.config_path_check)
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::node::fixtures::entry;

    const READS: Reading = Reading { check: ConfigPathCheck::Reads, config_file: None, config_path: None, said: None };

    /// What containerd's config check says of a config naming another directory.
    fn elsewhere() -> Reading {
        let said = "containerd's config /etc/containerd/config.toml sets config_path to /srv/certs.d; set \
                    nodeAgent.configPath to it";
        Reading {
            check: ConfigPathCheck::Elsewhere,
            config_file: Some("/etc/containerd/config.toml".into()),
            config_path: Some("/srv/certs.d".into()),
            said: Some(said.into()),
        }
    }

    /// What a pass of an agent that does not relay found.
    fn found<'a>(report: &'a Report, runtime: &'a Reading, too_new: Option<u32>) -> Found<'a> {
        Found { report, runtime, too_new, pending: None, relays: None, runtime_files: true }
    }

    fn verdicts(derived: &Derived) -> Vec<(&str, Verdict)> {
        derived.addresses.iter().map(|a| (a.address.as_str(), a.verdict)).collect()
    }

    #[test]
    fn each_planned_address_has_its_verdict_and_every_trouble_is_said_once() {
        let plan = NodePlan { hosts: vec![entry("a:5000"), entry("b:5000"), entry("c:5000")], ..NodePlan::default() };
        let report = Report {
            foreign: vec!["b:5000".into()],
            failed: vec![("c:5000".into(), "read-only file system".into())],
            ..Report::default()
        };
        let derived = derive(&plan, found(&report, &READS, None));
        assert_eq!(
            verdicts(&derived),
            [("a:5000", Verdict::Configured), ("b:5000", Verdict::Foreign), ("c:5000", Verdict::Failed)]
        );
        let configured = &derived.configured;
        assert!(!configured.configured);
        assert_eq!(configured.reason, ConfiguredReason::NodeFileFailed, "failed comes before foreign");
        assert_eq!(configured.message.matches("c:5000: read-only file system").count(), 1, "{}", configured.message);
        assert_eq!(configured.message.matches("b:5000: a file").count(), 1, "{}", configured.message);
        let (counts, check) = counts(&derived);
        assert_eq!(check, ConfigPathCheck::Reads);
        assert_eq!(
            counts,
            [(Verdict::Configured, 1), (Verdict::Unread, 0), (Verdict::Foreign, 1), (Verdict::Failed, 1)]
        );
    }

    #[test]
    fn a_settled_node_says_the_same_whatever_the_plan_names() {
        let one = derive(&NodePlan::of(vec![entry("a:5000")]), found(&Report::default(), &READS, None));
        let two =
            derive(&NodePlan::of(vec![entry("a:5000"), entry("b:5000")]), found(&Report::default(), &READS, None));
        assert!(one.configured.configured && two.configured.configured);
        assert_eq!(one.configured, two.configured, "a plan change on a settled node is told by its object alone");
        assert_ne!(one.addresses, two.addresses);
        let none = derive(&NodePlan::default(), found(&Report::default(), &READS, None));
        assert_eq!(none.configured.message, "no published address needs a node file on this node");
    }

    #[test]
    fn a_node_whose_containerd_reads_elsewhere_has_every_address_unread_and_counts_none_configured() {
        let plan = NodePlan::of(vec![entry("a:5000"), entry("b:5000")]);
        let derived = derive(&plan, found(&Report::default(), &elsewhere(), None));
        assert_eq!(derived.runtime.config_path_check, ConfigPathCheck::Elsewhere);
        assert_eq!(derived.runtime.config_path.as_deref(), Some("/srv/certs.d"));
        assert_eq!(verdicts(&derived), [("a:5000", Verdict::Unread), ("b:5000", Verdict::Unread)]);
        assert!(derived.addresses.iter().all(|a| a.message.is_none()), "the mismatch is said once, not per address");
        assert_eq!(derived.configured.reason, ConfiguredReason::ConfigPathMismatch);
        assert_eq!(Some(derived.configured.message.clone()), elsewhere().said);
        let (counts, check) = counts(&derived);
        assert_eq!((counts[0], counts[1], check), ((Verdict::Configured, 0), (Verdict::Unread, 2), check));
    }

    #[test]
    fn a_newer_plan_refused_makes_the_node_unconfigured_first_of_all() {
        let plan = NodePlan::of(vec![entry("a:5000")]);
        let derived = derive(&plan, found(&Report::default(), &READS, Some(PLAN_FORMAT + 1)));
        assert_eq!(derived.configured.reason, ConfiguredReason::PlanTooNew);
        assert!(derived.configured.message.contains(&format!("format {}", PLAN_FORMAT + 1)));
        assert_eq!(verdicts(&derived), [("a:5000", Verdict::Configured)], "the last plan's files stay in force");
    }

    #[test]
    fn a_configured_node_says_when_containerd_was_not_checked_or_with_what_caveat() {
        let plan = NodePlan::of(vec![entry("a:5000")]);
        let derived = derive(&plan, found(&Report::default(), &Reading::UNCHECKED, None));
        assert!(derived.configured.configured && derived.configured.message.contains("not checked"));
        let caveat =
            Reading { check: ConfigPathCheck::Unknown, config_file: None, config_path: None, said: Some("why".into()) };
        let derived = derive(&plan, found(&Report::default(), &caveat, None));
        assert_eq!(derived.configured.message, "every planned address has its node file (why)");
        assert_eq!(verdicts(&derived), [("a:5000", Verdict::Configured)]);
    }

    #[test]
    fn troubles_besides_a_mismatch_are_told_with_it_not_hidden_by_it() {
        let plan = NodePlan::of(vec![entry("a:5000"), entry("b:5000")]);
        let report = Report {
            written: vec!["a:5000".into()],
            foreign: vec!["b:5000".into()],
            failed: vec![("c:5000".into(), "read-only file system".into())],
            ..Report::default()
        };
        let derived = derive(&plan, found(&report, &elsewhere(), None));
        // Fixing containerd's directory would not fix these.
        assert_eq!(derived.configured.reason, ConfiguredReason::ConfigPathMismatch);
        assert!(derived.configured.message.contains("b:5000: a file this agent did not write"));
        assert!(derived.configured.message.contains("node file not written: c:5000: read-only file system"));
        assert_eq!(verdicts(&derived), [("a:5000", Verdict::Unread), ("b:5000", Verdict::Foreign)]);
    }

    #[test]
    fn containerd_reading_its_default_directory_is_configured_with_the_caveat_in_words() {
        let check = crate::agent::runtime::containerd::config::RuntimeCheck::Reads { config_path: None };
        let said = crate::agent::runtime::containerd::config::describe(
            &check,
            "/etc/containerd/config.toml",
            "/etc/containerd/certs.d",
        );
        let plan = NodePlan::of(vec![entry("a:5000")]);
        let derived = derive(&plan, found(&Report::default(), &check.reading(said), None));
        assert!(derived.configured.configured);
        assert!(derived.configured.message.starts_with("every planned address has its node file ("));
        assert!(derived.configured.message.contains("containerd 2.2 and later"), "{}", derived.configured.message);
    }

    #[test]
    fn the_event_is_the_condition() {
        let regarding = ObjectReference { name: Some("agent-x".into()), ..ObjectReference::default() };
        let plan = NodePlan::of(vec![entry("a:5000")]);
        let report = Report { foreign: vec!["a:5000".into()], ..Report::default() };
        let derived = derive(&plan, found(&report, &READS, None));
        let told = notices(&regarding, &derived);
        assert_eq!(told.len(), 1, "no relay, no relay Event");
        let notice = &told[0];
        assert_eq!((notice.reason(), notice.warning()), ("ForeignNodeFile", true));
        assert_eq!(notice.message(), derived.configured.message);
        assert_eq!(notice.regarding().name.as_deref(), Some("agent-x"), "told on the agent's own Pod");
        let settled = notices(&regarding, &derive(&plan, found(&Report::default(), &READS, None)));
        assert_eq!(
            (settled[0].reason(), settled[0].warning()),
            ("NodeFilesConfigured", false),
            "a configured node is Normal"
        );
    }

    #[test]
    fn a_node_with_nothing_planned_does_not_say_its_containerd_was_not_checked() {
        let derived = derive(&NodePlan::default(), found(&Report::default(), &Reading::UNCHECKED, None));
        assert_eq!(derived.configured.message, "no published address needs a node file on this node");
    }

    fn relay_plan() -> NodePlan {
        let relay = crate::node::RelayEntry {
            port: 5001,
            registry: "registry/registry".into(),
            target: "10.96.0.12:5000".parse().expect("an address"),
        };
        NodePlan::with_relays(vec![entry("10.96.0.12:5000")], vec![relay])
    }

    fn relay(states: [ListenerState; 2]) -> Relay {
        let [v4, v6] = super::loopback(5001);
        let listener = |address: String, state: ListenerState| Listener {
            address,
            state,
            message: (state != ListenerState::Serving).then(|| "why".into()),
        };
        Relay {
            port: 5001,
            registry: "registry/registry".into(),
            target: "10.96.0.12:5000".into(),
            listeners: vec![listener(v4, states[0]), listener(v6, states[1])],
        }
    }

    fn relaying<'a>(relays: &'a [Relay]) -> Found<'a> {
        Found { relays: Some(relays), ..found(&NO_REPORT, &READS, None) }
    }

    static NO_REPORT: Report =
        Report { written: Vec::new(), removed: Vec::new(), foreign: Vec::new(), failed: Vec::new() };

    #[test]
    fn a_relay_serving_on_both_loopbacks_is_serving_and_says_where() {
        let serving = [relay([ListenerState::Serving, ListenerState::Serving])];
        let derived = derive(&relay_plan(), relaying(&serving));
        let condition = derived.relay_serving.expect("a condition");
        assert!(condition.serving);
        assert_eq!(condition.reason, RelayReason::RelayServing);
        assert_eq!(condition.message, "relaying registry/registry at 127.0.0.1:5001 and [::1]:5001 to 10.96.0.12:5000");
        assert_eq!(derived.relays, serving);
        // A node without IPv6 loopback serves IPv4 and says so, without a trouble.
        let v4_only = [relay([ListenerState::Serving, ListenerState::Unavailable])];
        let condition = derive(&relay_plan(), relaying(&v4_only)).relay_serving.expect("a condition");
        assert!(condition.serving, "{condition:?}");
        assert!(condition.message.contains("[::1]:5001 is not served: why"), "{}", condition.message);
    }

    #[test]
    fn a_taken_port_or_a_failed_listener_is_not_serving_and_named() {
        let taken = [relay([ListenerState::Taken, ListenerState::Serving])];
        let condition = derive(&relay_plan(), relaying(&taken)).relay_serving.expect("a condition");
        assert!(!condition.serving);
        assert_eq!(condition.reason, RelayReason::RelayPortTaken);
        assert!(
            condition.message.contains("127.0.0.1:5001 (the relay of registry/registry) is taken"),
            "{}",
            condition.message
        );
        let both = [relay([ListenerState::Taken, ListenerState::Failed])];
        let condition = derive(&relay_plan(), relaying(&both)).relay_serving.expect("a condition");
        assert_eq!(condition.reason, RelayReason::RelayPortTaken, "taken comes first");
        assert!(condition.message.contains("[::1]:5001 (the relay of registry/registry) cannot be listened on: why"));
        let nowhere = [relay([ListenerState::Unavailable, ListenerState::Unavailable])];
        let condition = derive(&relay_plan(), relaying(&nowhere)).relay_serving.expect("a condition");
        assert_eq!((condition.serving, condition.reason), (false, RelayReason::RelayListenFailed));
    }

    #[test]
    fn a_plan_that_relays_on_an_agent_that_does_not_is_told_and_an_agent_that_relays_nothing_is_serving() {
        let derived = derive(&relay_plan(), found(&NO_REPORT, &READS, None));
        let condition = derived.relay_serving.expect("a condition");
        assert_eq!((condition.serving, condition.reason), (false, RelayReason::RelayOff));
        assert!(condition.message.contains("nodeAgent.relay.enabled"), "{}", condition.message);
        assert!(derived.relays[0].listeners.iter().all(|l| l.state == ListenerState::Off));
        let nothing = derive(&NodePlan::of(vec![entry("a:5000")]), relaying(&[]));
        let condition = nothing.relay_serving.expect("a condition");
        assert_eq!((condition.serving, condition.reason), (true, RelayReason::NothingToRelay));
        let neither = derive(&NodePlan::of(vec![entry("a:5000")]), found(&NO_REPORT, &READS, None));
        assert_eq!(neither.relay_serving, None, "no relay, no condition");
        assert_eq!(notices(&ObjectReference::default(), &neither).len(), 1);
        let told = notices(&ObjectReference::default(), &derive(&relay_plan(), found(&NO_REPORT, &READS, None)));
        assert_eq!(
            told.iter().map(|n| (n.reason(), n.warning())).collect::<Vec<_>>(),
            [("NodeFilesConfigured", false), ("RelayOff", true)]
        );
    }

    #[test]
    fn an_agent_that_writes_no_runtime_files_plans_no_address_and_says_why() {
        let serving = [relay([ListenerState::Serving, ListenerState::Serving])];
        let derived = derive(&relay_plan(), Found { runtime_files: false, ..relaying(&serving) });
        assert!(derived.addresses.is_empty(), "{:?}", derived.addresses);
        assert!(derived.configured.configured);
        assert_eq!(derived.configured.reason, ConfiguredReason::RuntimeNotConfigured);
        assert!(
            derived.configured.message.contains("1 planned address(es) get no file here"),
            "{}",
            derived.configured.message
        );
        assert!(derived.relay_serving.expect("a condition").serving);
        let too_new =
            derive(&relay_plan(), Found { runtime_files: false, too_new: Some(PLAN_FORMAT + 1), ..relaying(&serving) });
        assert_eq!(too_new.configured.reason, ConfiguredReason::PlanTooNew);
    }

    #[test]
    fn a_pending_plan_is_never_configured_and_says_why_before_any_other_trouble() {
        let plan = NodePlan::default();
        let pending = Found { pending: Some(PLAN_NOT_WRITTEN), ..found(&NO_REPORT, &READS, None) };
        let derived = derive(&plan, pending);
        assert!(!derived.configured.configured, "an empty plan not yet written needs nothing known, not nothing");
        assert_eq!(derived.configured.reason, ConfiguredReason::PlanPending);
        assert_eq!(derived.configured.message, PLAN_NOT_WRITTEN);
        let troubled =
            Found { runtime: &Reading { check: ConfigPathCheck::Elsewhere, ..Reading::UNCHECKED }, ..pending };
        let derived = derive(&NodePlan::of(vec![entry("a:5000")]), troubled);
        assert_eq!(derived.configured.reason, ConfiguredReason::PlanPending);
        assert!(derived.configured.message.starts_with(PLAN_NOT_WRITTEN), "{}", derived.configured.message);
        let relay_only = Found { runtime_files: false, ..pending };
        assert_eq!(derive(&plan, relay_only).configured.reason, ConfiguredReason::PlanPending);
        // Written for this release: a node that needs nothing is configured.
        let settled = derive(&plan, found(&NO_REPORT, &READS, None));
        assert!(settled.configured.configured);
    }
}
