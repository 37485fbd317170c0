//! This node's state, derived once per pass from what the agent applied and what the runtime reads ([`derive`]):
//! its `NodePullState` (see [`crate::node::api::state`], kept by [`super::writer`]), the agent's Event ([`Notice`])
//! and its metrics all come from the one [`Derived`] value, so they cannot disagree. Pure: no I/O.

use k8s_openapi::api::core::v1::ObjectReference;

use super::runtime::{Reading, Report};
use crate::events::Tell;
use crate::node::api::state::{Address, ConfigPathCheck, Configured, ConfiguredReason, Runtime, Verdict};
use crate::node::{NodePlan, PLAN_FORMAT};

/// The node's state after a pass, but for who wrote it and when.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Derived {
    pub runtime: Runtime,
    /// One per planned address, sorted by address.
    pub addresses: Vec<Address>,
    pub configured: Configured,
}

/// The node's state from the plan in force, the last pass's `report`, what the runtime's config says, and the
/// format of a newer plan refused meanwhile. An address is configured only when its file is the agent's and the
/// runtime reads the directory.
pub fn derive(plan: &NodePlan, report: &Report, runtime: &Reading, too_new: Option<u32>) -> Derived {
    let unread = runtime.unread();
    let mut addresses: Vec<Address> = plan
        .hosts
        .iter()
        .map(|entry| {
            let failed = report.failed.iter().find(|(address, _)| *address == entry.address);
            let (verdict, message) = if report.foreign.contains(&entry.address) {
                (Verdict::Foreign, Some("a hosts.toml this agent did not write is there: left as it is".into()))
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
    let configured = configured(plan, report, runtime, too_new);
    Derived { runtime: runtime_state, addresses, configured }
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
        let said = runtime.said.clone().unwrap_or_else(|| "the runtime reads another hosts directory".into());
        troubles.push((ConfiguredReason::ConfigPathMismatch, said));
    }
    if !report.failed.is_empty() {
        let failures: Vec<String> = report.failed.iter().map(|(address, why)| format!("{address}: {why}")).collect();
        troubles.push((ConfiguredReason::HostsFileFailed, format!("hosts.toml not written: {}", failures.join("; "))));
    }
    if !report.foreign.is_empty() {
        troubles.push((
            ConfiguredReason::ForeignHostsFile,
            format!(
                "{}: a hosts.toml this agent did not write is there; it is left as it is, so this node pulls them as \
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
        "no published address needs a hosts.toml on this node".to_string()
    } else {
        "every planned address has its hosts.toml".to_string()
    };
    match (runtime.check, &runtime.said) {
        (ConfigPathCheck::Unchecked, _) if !plan.hosts.is_empty() => message.push_str(
            " (whether containerd reads them is not checked: the agent was given no containerd config, \
             nodeAgent.containerdConfig)",
        ),
        (_, Some(said)) => message.push_str(&format!(" ({said})")),
        _ => {}
    }
    Configured { configured: true, reason: ConfiguredReason::HostsConfigured, message }
}

/// The agent's Event about its node, on its own Pod: the `Configured` condition, told when it changes.
#[derive(Clone, Debug, PartialEq)]
pub struct Notice {
    pub regarding: ObjectReference,
    pub configured: Configured,
}

impl Tell for Notice {
    fn regarding(&self) -> &ObjectReference {
        &self.regarding
    }
    fn reason(&self) -> &'static str {
        self.configured.reason.as_str()
    }
    fn warning(&self) -> bool {
        !self.configured.configured
    }
    fn message(&self) -> &str {
        &self.configured.message
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
        let derived = derive(&plan, &report, &READS, None);
        assert_eq!(
            verdicts(&derived),
            [("a:5000", Verdict::Configured), ("b:5000", Verdict::Foreign), ("c:5000", Verdict::Failed)]
        );
        let configured = &derived.configured;
        assert!(!configured.configured);
        assert_eq!(configured.reason, ConfiguredReason::HostsFileFailed, "failed comes before foreign");
        assert_eq!(configured.message.matches("c:5000: read-only file system").count(), 1, "{}", configured.message);
        assert_eq!(configured.message.matches("b:5000: a hosts.toml").count(), 1, "{}", configured.message);
        let (counts, check) = counts(&derived);
        assert_eq!(check, ConfigPathCheck::Reads);
        assert_eq!(
            counts,
            [(Verdict::Configured, 1), (Verdict::Unread, 0), (Verdict::Foreign, 1), (Verdict::Failed, 1)]
        );
    }

    #[test]
    fn a_settled_node_says_the_same_whatever_the_plan_names() {
        let one = derive(&NodePlan::of(vec![entry("a:5000")]), &Report::default(), &READS, None);
        let two = derive(&NodePlan::of(vec![entry("a:5000"), entry("b:5000")]), &Report::default(), &READS, None);
        assert!(one.configured.configured && two.configured.configured);
        assert_eq!(one.configured, two.configured, "a plan change on a settled node is told by its object alone");
        assert_ne!(one.addresses, two.addresses);
        let none = derive(&NodePlan::default(), &Report::default(), &READS, None);
        assert_eq!(none.configured.message, "no published address needs a hosts.toml on this node");
    }

    #[test]
    fn a_node_whose_containerd_reads_elsewhere_has_every_address_unread_and_counts_none_configured() {
        let plan = NodePlan::of(vec![entry("a:5000"), entry("b:5000")]);
        let derived = derive(&plan, &Report::default(), &elsewhere(), None);
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
        let derived = derive(&plan, &Report::default(), &READS, Some(PLAN_FORMAT + 1));
        assert_eq!(derived.configured.reason, ConfiguredReason::PlanTooNew);
        assert!(derived.configured.message.contains(&format!("format {}", PLAN_FORMAT + 1)));
        assert_eq!(verdicts(&derived), [("a:5000", Verdict::Configured)], "the last plan's files stay in force");
    }

    #[test]
    fn a_configured_node_says_when_containerd_was_not_checked_or_with_what_caveat() {
        let plan = NodePlan::of(vec![entry("a:5000")]);
        let derived = derive(&plan, &Report::default(), &Reading::UNCHECKED, None);
        assert!(derived.configured.configured && derived.configured.message.contains("not checked"));
        let caveat =
            Reading { check: ConfigPathCheck::Unknown, config_file: None, config_path: None, said: Some("why".into()) };
        let derived = derive(&plan, &Report::default(), &caveat, None);
        assert_eq!(derived.configured.message, "every planned address has its hosts.toml (why)");
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
        let derived = derive(&plan, &report, &elsewhere(), None);
        // Fixing containerd's directory would not fix these.
        assert_eq!(derived.configured.reason, ConfiguredReason::ConfigPathMismatch);
        assert!(derived.configured.message.contains("b:5000: a hosts.toml this agent did not write"));
        assert!(derived.configured.message.contains("hosts.toml not written: c:5000: read-only file system"));
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
        let derived = derive(&plan, &Report::default(), &check.reading(said), None);
        assert!(derived.configured.configured);
        assert!(derived.configured.message.starts_with("every planned address has its hosts.toml ("));
        assert!(derived.configured.message.contains("containerd 2.2 and later"), "{}", derived.configured.message);
    }

    #[test]
    fn the_event_is_the_condition() {
        let regarding = ObjectReference { name: Some("agent-x".into()), ..ObjectReference::default() };
        let plan = NodePlan::of(vec![entry("a:5000")]);
        let report = Report { foreign: vec!["a:5000".into()], ..Report::default() };
        let derived = derive(&plan, &report, &READS, None);
        let notice = Notice { regarding, configured: derived.configured.clone() };
        assert_eq!((notice.reason(), notice.warning()), ("ForeignHostsFile", true));
        assert_eq!(notice.message(), derived.configured.message);
        assert_eq!(notice.regarding().name.as_deref(), Some("agent-x"), "told on the agent's own Pod");
        let settled = Notice { configured: derive(&plan, &Report::default(), &READS, None).configured, ..notice };
        assert_eq!((settled.reason(), settled.warning()), ("HostsConfigured", false), "a configured node is Normal");
    }

    #[test]
    fn a_node_with_nothing_planned_does_not_say_its_containerd_was_not_checked() {
        let derived = derive(&NodePlan::default(), &Report::default(), &Reading::UNCHECKED, None);
        assert_eq!(derived.configured.message, "no published address needs a hosts.toml on this node");
    }
}
