//! Each node's state as its agent last found it, kept in a `NodePullState` object of the release's namespace named
//! after the node: what `doctor` reads. Events expire (the API server drops them after `--event-ttl`, an hour by
//! default) and are prose; this object is structured, lasts as long as the node's agent, and only the agents'
//! ServiceAccount (and cluster admins) may write it: the chart's CustomResourceDefinition is aggregated to no
//! built-in role. An agent writes it only when what it found changed, so a settled node costs no write.

use std::borrow::Cow;

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};

use super::runtime::RuntimeCheck;
use super::{NodePlan, RuntimeFinding, files};

pub const GROUP: &str = "local-registry-publisher.io";
pub const VERSION: &str = "v1alpha1";
pub const KIND: &str = "NodePullState";
pub const PLURAL: &str = "nodepullstates";

/// The object: a node's state in its `status`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NodePullState {
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub status: NodeState,
}

impl kube::Resource for NodePullState {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        KIND.into()
    }
    fn group(_: &()) -> Cow<'_, str> {
        GROUP.into()
    }
    fn version(_: &()) -> Cow<'_, str> {
        VERSION.into()
    }
    fn plural(_: &()) -> Cow<'_, str> {
        PLURAL.into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// What one agent found on its node.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct NodeState {
    pub node: String,
    pub agent: Agent,
    pub plan: PlanApplied,
    pub runtime: Runtime,
    /// One per planned address, sorted by address.
    pub addresses: Vec<Address>,
    /// How often the agent passes over its directory; it is unready after [`STALE_AFTER_RESYNCS`] without one.
    pub resync_seconds: u64,
    /// When the agent last found something different (RFC 3339): written only then.
    pub changed: String,
}

/// How many resyncs without a pass make an agent unready, and so its node's state stale.
pub const STALE_AFTER_RESYNCS: u32 = 3;

/// The agent that wrote the state.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Agent {
    pub pod: String,
    pub uid: String,
    pub version: String,
}

/// Which plan the agent applied: its ConfigMap, the version of it, and the plan format.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct PlanApplied {
    pub config_map: String,
    pub resource_version: String,
    pub format: u32,
}

/// Whether this node's containerd reads the agent's directory.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Runtime {
    /// `reads`, `elsewhere`, `unknown` or `unchecked` (see [`RuntimeCheck::label`]).
    pub config_path_check: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub config_path: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// One planned address on this node.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Address {
    pub address: String,
    pub endpoint: String,
    /// A mirror's upstream, which the node falls back to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    pub verdict: Verdict,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// What a planned address is on this node.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Verdict {
    /// The agent's file is there and containerd reads the directory.
    Configured,
    /// The agent's file is there, but containerd reads another directory.
    Unread,
    /// A file someone else wrote is there: left as it is.
    Foreign,
    /// The file could not be written.
    #[default]
    Failed,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Configured => "configured",
            Verdict::Unread => "unread",
            Verdict::Foreign => "foreign",
            Verdict::Failed => "failed",
        }
    }
}

/// The addresses and runtime part of a node's state after a pass (the rest is the agent's identity).
pub fn found(plan: &NodePlan, report: &files::Report, runtime: &RuntimeFinding) -> (Runtime, Vec<Address>) {
    let config_path = match &runtime.check {
        RuntimeCheck::Reads { config_path } | RuntimeCheck::Elsewhere { config_path } => config_path.clone(),
        RuntimeCheck::ListIgnored { config_path, .. } => Some(config_path.clone()),
        RuntimeCheck::Unchecked | RuntimeCheck::Unknown(_) => None,
    };
    let runtime_state =
        Runtime { config_path_check: runtime.check.label().into(), config_path, message: runtime.said.clone() };
    let unread = runtime.check.unread();
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
                (Verdict::Unread, runtime.said.clone())
            } else {
                (Verdict::Configured, None)
            };
            let (address, endpoint, server) = (entry.address.clone(), entry.endpoint.clone(), entry.server.clone());
            Address { address, endpoint, server, verdict, message }
        })
        .collect();
    addresses.sort_by(|a, b| a.address.cmp(&b.address));
    (runtime_state, addresses)
}

/// A node's state checked against the plan now in force: `Ok` says what is configured when every planned address
/// is, `Err` what is not and why, in words.
pub fn verdict(plan: &NodePlan, state: &NodeState) -> Result<String, String> {
    let mut missing = Vec::new();
    for entry in &plan.hosts {
        let found = state.addresses.iter().find(|a| a.address == entry.address && a.endpoint == entry.endpoint);
        match found {
            Some(Address { verdict: Verdict::Configured, .. }) => {}
            Some(address) => {
                let why = address.message.as_deref().map(|m| format!(": {m}")).unwrap_or_default();
                missing.push(format!("{} ({}{why})", entry.address, address.verdict.as_str()));
            }
            None => missing.push(format!("{} (not in the plan its agent applied yet)", entry.address)),
        }
    }
    if missing.is_empty() {
        let mirrored: Vec<&str> =
            plan.hosts.iter().filter(|entry| entry.server.is_some()).map(|entry| entry.address.as_str()).collect();
        let mirrors = if mirrored.is_empty() { String::new() } else { format!(", mirroring {}", mirrored.join(", ")) };
        Ok(format!("configured by {}{mirrors}", state.agent.pod))
    } else {
        let mut said = format!("not configured for {} (agent {})", missing.join(", "), state.agent.pod);
        if state.runtime.config_path_check == "elsewhere" {
            said.push_str("; ConfigPathMismatch: ");
            said.push_str(state.runtime.message.as_deref().unwrap_or("containerd reads another directory"));
        }
        Err(said)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::HostEntry;
    use crate::node::runtime;

    fn entry(address: &str) -> HostEntry {
        HostEntry { address: address.into(), endpoint: "http://10.96.0.12:5000".into(), ca: None, server: None }
    }

    fn state(plan: &NodePlan, report: &files::Report, runtime: &RuntimeFinding) -> NodeState {
        let (runtime, addresses) = found(plan, report, runtime);
        NodeState {
            agent: Agent { pod: "agent-x".into(), ..Agent::default() },
            runtime,
            addresses,
            ..NodeState::default()
        }
    }

    const READS: RuntimeFinding = RuntimeFinding { check: RuntimeCheck::Reads { config_path: None }, said: None };

    #[test]
    fn each_planned_address_has_its_verdict_and_only_a_fully_configured_node_passes() {
        let plan = NodePlan { hosts: vec![entry("a:5000"), entry("b:5000"), entry("c:5000")], ..NodePlan::default() };
        let report = files::Report {
            foreign: vec!["b:5000".into()],
            failed: vec![("c:5000".into(), "read-only file system".into())],
            ..files::Report::default()
        };
        let found = state(&plan, &report, &READS);
        let verdicts: Vec<(&str, Verdict)> = found.addresses.iter().map(|a| (a.address.as_str(), a.verdict)).collect();
        assert_eq!(
            verdicts,
            [("a:5000", Verdict::Configured), ("b:5000", Verdict::Foreign), ("c:5000", Verdict::Failed)]
        );
        let said = verdict(&plan, &found).expect_err("two are not configured");
        assert!(said.starts_with("not configured for b:5000 (foreign: a hosts.toml"), "{said}");
        assert!(said.contains("c:5000 (failed: read-only file system)"), "{said}");
        let clean = state(&plan, &files::Report::default(), &READS);
        assert_eq!(verdict(&plan, &clean), Ok("configured by agent-x".into()));
    }

    #[test]
    fn a_mirror_is_a_planned_address_with_its_fallback_and_is_named_on_a_configured_node() {
        let mirror = HostEntry { server: Some("https://registry-1.docker.io".into()), ..entry("docker.io") };
        let plan = NodePlan::of(vec![entry("a:5000"), mirror]);
        let found = state(&plan, &files::Report::default(), &READS);
        assert_eq!(found.addresses[1].server.as_deref(), Some("https://registry-1.docker.io"));
        assert_eq!(verdict(&plan, &found), Ok("configured by agent-x, mirroring docker.io".into()));
        let report = files::Report { foreign: vec!["docker.io".into()], ..files::Report::default() };
        let foreign = state(&plan, &report, &READS);
        assert!(verdict(&plan, &foreign).is_err_and(|s| s.starts_with("not configured for docker.io (foreign")));
    }

    #[test]
    fn a_plan_the_agent_has_not_applied_yet_or_a_moved_endpoint_is_not_configured() {
        let applied = NodePlan { hosts: vec![entry("a:5000")], ..NodePlan::default() };
        let found = state(&applied, &files::Report::default(), &READS);
        let newer = NodePlan { hosts: vec![entry("a:5000"), entry("b:5000")], ..NodePlan::default() };
        assert!(verdict(&newer, &found).is_err_and(|s| s.contains("b:5000 (not in the plan its agent applied")));
        let hosts = vec![HostEntry { endpoint: "http://10.96.0.99:5000".into(), ..entry("a:5000") }];
        let moved = NodePlan { hosts, ..NodePlan::default() };
        assert!(verdict(&moved, &found).is_err());
    }

    #[test]
    fn a_node_whose_containerd_reads_elsewhere_has_every_address_unread_and_says_what_to_set() {
        let plan = NodePlan { hosts: vec![entry("a:5000")], ..NodePlan::default() };
        let check = runtime::RuntimeCheck::Elsewhere { config_path: Some("/srv/certs.d".into()) };
        let said = runtime::describe(&check, "/etc/containerd/config.toml", "/etc/containerd/certs.d");
        let found = state(&plan, &files::Report::default(), &RuntimeFinding { check, said });
        assert_eq!(found.runtime.config_path_check, "elsewhere");
        assert_eq!(found.runtime.config_path.as_deref(), Some("/srv/certs.d"));
        assert_eq!(found.addresses[0].verdict, Verdict::Unread);
        let said = verdict(&plan, &found).expect_err("unread");
        assert!(said.contains("ConfigPathMismatch: containerd's config"), "{said}");
        assert!(said.contains("nodeAgent.configPath"), "{said}");
    }

    #[test]
    fn the_state_reads_back_as_written_with_camel_case_keys() {
        let plan = NodePlan { hosts: vec![entry("a:5000")], ..NodePlan::default() };
        let found = state(&plan, &files::Report::default(), &READS);
        let json = serde_json::to_value(&found).expect("serialises");
        assert_eq!(json["addresses"][0]["verdict"], "configured");
        assert_eq!(json["runtime"]["configPathCheck"], "reads");
        assert!(json.get("resyncSeconds").is_some());
        assert_eq!(serde_json::from_value::<NodeState>(json).expect("reads back"), found);
    }

    #[test]
    fn the_api_path_and_kind_are_the_ones_the_charts_crd_serves() {
        use kube::Resource;
        // What the chart's CustomResourceDefinition and RBAC name (templates/node-agent.yaml and its CRD).
        assert_eq!(NodePullState::kind(&()), "NodePullState");
        assert_eq!(NodePullState::api_version(&()), "local-registry-publisher.io/v1alpha1");
        assert_eq!(NodePullState::plural(&()), "nodepullstates");
        let mut state = NodePullState {
            metadata: ObjectMeta { name: Some("node-1".into()), ..ObjectMeta::default() },
            status: NodeState::default(),
        };
        assert_eq!(state.meta().name.as_deref(), Some("node-1"));
        state.meta_mut().namespace = Some("lrp".into());
        assert_eq!(state.metadata.namespace.as_deref(), Some("lrp"));
    }
}
