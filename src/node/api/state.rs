//! Each node's state as its agent last found it, kept in a `NodePullState` object of the release's namespace named
//! after the node: what `doctor` reads, what `kubectl wait --for=condition=Configured` waits on, and what the
//! agent's Events and metrics are derived from. Events expire (the API server drops them after `--event-ttl`, an
//! hour by default) and are prose; this object is structured, lasts as long as the node's agent, and only the
//! agents' ServiceAccount (and cluster admins) may write it: the chart's CustomResourceDefinition, generated from
//! this type (`local-registry-publisher crd`), is aggregated to no built-in role, and the chart's admission policy
//! admits an agent's write only for the node its token is bound to. An agent writes it only when what it found
//! changed, so a settled node costs no write, and writes it again when anyone else changed it.
//!
//! The state is all `status`, and has no status subresource: the agent writes its object whole, in one request
//! that also creates it on a node's first pass.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{CustomResourceDefinition, JSONSchemaProps};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The object (`NodePullState`, generated with its CustomResourceDefinition): a node's state in its `status`.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "local-registry-publisher.io",
    version = "v1alpha1",
    kind = "NodePullState",
    plural = "nodepullstates",
    namespaced,
    no_spec,
    doc = "A node's state as its node agent last found it: the plan it applied, whether the node's runtime reads its files, each planned address's verdict and the Configured condition.",
    status = "NodeState",
    printcolumn = r#"{"name": "Configured", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Configured\")].status"}"#,
    printcolumn = r#"{"name": "Reason", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Configured\")].reason"}"#,
    printcolumn = r#"{"name": "Addresses", "type": "integer", "description": "Planned addresses on the node", "jsonPath": ".status.addressCount"}"#,
    printcolumn = r#"{"name": "Relay", "type": "string", "description": "Whether the loopback relay serves (RelayServing)", "jsonPath": ".status.conditions[?(@.type==\"RelayServing\")].status"}"#,
    printcolumn = r#"{"name": "Agent", "type": "string", "jsonPath": ".status.agent.pod"}"#,
    printcolumn = r#"{"name": "Changed", "type": "date", "description": "When the agent last found something different", "jsonPath": ".status.changed"}"#
)]
pub struct NodePullStateFields {}

/// The condition `kubectl wait --for=condition=Configured nodepullstate/<node>` waits on.
pub const CONFIGURED: &str = "Configured";
/// The condition `kubectl wait --for=condition=RelayServing nodepullstate/<node>` waits on: present when the agent
/// relays (`nodeAgent.relay.enabled`) or the plan asks it to.
pub const RELAY_SERVING: &str = "RelayServing";

/// What one agent found on its node.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct NodeState {
    /// The node's name.
    pub node: String,
    pub agent: Agent,
    pub plan: PlanApplied,
    pub runtime: Runtime,
    /// One per planned address, sorted by address.
    pub addresses: Vec<Address>,
    /// One per registry the plan relays on the node's loopback, sorted by port.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub relays: Vec<Relay>,
    /// How many addresses the plan names (for `kubectl get`'s column).
    pub address_count: u32,
    /// How often the agent passes over its directory; it is unready after [`STALE_AFTER_RESYNCS`] without one.
    pub resync_seconds: u64,
    /// When the agent last found something different (RFC 3339, in seconds): written only then.
    pub changed: String,
    /// `Configured`: True when every planned address is configured and read by the node's runtime (NodeFilesConfigured,
    /// or RuntimeNotConfigured where the agent writes none), else False with the first trouble as its reason
    /// (PlanPending: the controller has not written this release's plan yet; PlanTooNew, ConfigPathMismatch,
    /// NodeFileFailed, ForeignNodeFile)
    /// and every trouble in its message. `RelayServing` (when the agent relays or the plan asks it to): True when
    /// every planned relay listens on the node's loopback (RelayServing, NothingToRelay), else False (RelayOff,
    /// RelayPortTaken, RelayListenFailed).
    #[schemars(schema_with = "conditions_schema")]
    pub conditions: Vec<Condition>,
}

/// How many resyncs without a pass make an agent unready, and so its node's state stale.
pub const STALE_AFTER_RESYNCS: u32 = 3;

/// The agent that wrote the state.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct Agent {
    /// The agent's pod.
    pub pod: String,
    /// Its UID: a state written by another pod than the node's running agent is stale.
    pub uid: String,
    /// The agent's version.
    pub version: String,
}

/// Which plan the agent applied: its ConfigMap, the version of it, and the plan format.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct PlanApplied {
    pub config_map: String,
    pub resource_version: String,
    pub format: u32,
}

/// Whether this node's runtime reads the files the agent writes.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct Runtime {
    /// Whether the runtime reads the agent's directory (the chart's `nodeAgent.configPath`, whatever the runtime):
    /// containerd's `config_path` names it; CRI-O reloads the drop-ins under it (`auto_reload_registries`).
    pub config_path_check: ConfigPathCheck,
    /// The runtime's config file the agent read, as the node names it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub config_file: Option<String>,
    /// Where the runtime reads registry files from, when its config says: containerd's `config_path` (a directory or
    /// a list), CRI-O's `registries.conf.d`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub config_path: Option<String>,
    /// What the agent found, in words, when there is something to say.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// What the runtime's config says of the agent's directory.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum ConfigPathCheck {
    /// It reads the agent's directory.
    Reads,
    /// It reads another directory, or none: the agent's files go unread.
    Elsewhere,
    /// The config could not be read or understood.
    Unknown,
    /// Not checked: the agent was given no config file.
    #[default]
    Unchecked,
}

impl ConfigPathCheck {
    pub const ALL: [ConfigPathCheck; 4] =
        [ConfigPathCheck::Reads, ConfigPathCheck::Elsewhere, ConfigPathCheck::Unknown, ConfigPathCheck::Unchecked];

    /// The bounded label of the agent's metric, and the word the object holds.
    pub fn as_str(self) -> &'static str {
        match self {
            ConfigPathCheck::Reads => "reads",
            ConfigPathCheck::Elsewhere => "elsewhere",
            ConfigPathCheck::Unknown => "unknown",
            ConfigPathCheck::Unchecked => "unchecked",
        }
    }
}

/// One planned address on this node.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct Address {
    /// As images name it, `host:port`.
    pub address: String,
    /// Where the node's runtime fetches it from.
    pub endpoint: String,
    /// A mirror's upstream, which the node falls back to when the endpoint fails.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    pub verdict: Verdict,
    /// Why it is not configured, when it is not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// A registry the agent relays on the node's loopback.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct Relay {
    /// The loopback port, the cluster admin's.
    pub port: u16,
    /// The registry's Service, `namespace/name`.
    pub registry: String,
    /// Where each connection goes: the Service's ClusterIP and port.
    pub target: String,
    /// One per loopback address: `127.0.0.1:<port>` and `[::1]:<port>`.
    pub listeners: Vec<Listener>,
}

/// One loopback address of a relay.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct Listener {
    /// `127.0.0.1:<port>` or `[::1]:<port>`.
    pub address: String,
    pub state: ListenerState,
    /// Why it does not listen, when it does not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// Whether the relay listens at a loopback address.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum ListenerState {
    /// It listens.
    Serving,
    /// Another process on the node holds the address: the agent binds it as soon as it is free.
    Taken,
    /// The node has no such address (no IPv6 loopback): nothing to serve there.
    Unavailable,
    /// Binding failed for another reason, in its message.
    Failed,
    /// The agent does not relay (`nodeAgent.relay.enabled` is off).
    #[default]
    Off,
}

/// What a planned address is on this node.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum Verdict {
    /// The agent's file is there and the runtime reads the directory.
    Configured,
    /// The agent's file is there, but the runtime reads another directory.
    Unread,
    /// A file someone else wrote is there: left as it is.
    Foreign,
    /// The file could not be written.
    #[default]
    Failed,
}

impl Verdict {
    pub const ALL: [Verdict; 4] = [Verdict::Configured, Verdict::Unread, Verdict::Foreign, Verdict::Failed];

    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Configured => "configured",
            Verdict::Unread => "unread",
            Verdict::Foreign => "foreign",
            Verdict::Failed => "failed",
        }
    }
}

/// Why the node is or is not `Configured`: the condition's reason, and the reason of the agent's Event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum ConfiguredReason {
    /// Every planned address is configured (or none needs a file).
    NodeFilesConfigured,
    /// The agent writes no runtime configuration (`--runtime=none`): it only relays.
    RuntimeNotConfigured,
    /// The node plan is not yet the one this release's controller writes: the chart's empty ConfigMap, or a plan
    /// stamped for another controller configuration. Nothing is known yet of what the node needs.
    PlanPending,
    /// The node plan is of a newer format than the agent knows: not applied, the last one stays in force.
    PlanTooNew,
    /// The node's runtime reads another directory than the one the agent writes into.
    ConfigPathMismatch,
    /// A planned address whose file could not be written or removed.
    NodeFileFailed,
    /// A planned address whose directory holds a file the agent did not write: left alone.
    ForeignNodeFile,
}

impl ConfiguredReason {
    pub fn as_str(self) -> &'static str {
        match self {
            ConfiguredReason::NodeFilesConfigured => "NodeFilesConfigured",
            ConfiguredReason::RuntimeNotConfigured => "RuntimeNotConfigured",
            ConfiguredReason::PlanPending => "PlanPending",
            ConfiguredReason::PlanTooNew => "PlanTooNew",
            ConfiguredReason::ConfigPathMismatch => "ConfigPathMismatch",
            ConfiguredReason::NodeFileFailed => "NodeFileFailed",
            ConfiguredReason::ForeignNodeFile => "ForeignNodeFile",
        }
    }
}

/// Why the relay does or does not serve on the node: the `RelayServing` condition's reason.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum RelayReason {
    /// Every planned relay listens on every loopback address the node has.
    RelayServing,
    /// The agent relays, but the plan relays nothing (no registry the admin relays is published).
    NothingToRelay,
    /// The plan relays a registry, but this agent was started without `--relay` (`nodeAgent.relay.enabled`).
    RelayOff,
    /// Another process on the node holds a relay's port.
    RelayPortTaken,
    /// A relay's port could not be bound for another reason.
    RelayListenFailed,
}

impl RelayReason {
    pub fn as_str(self) -> &'static str {
        match self {
            RelayReason::RelayServing => "RelayServing",
            RelayReason::NothingToRelay => "NothingToRelay",
            RelayReason::RelayOff => "RelayOff",
            RelayReason::RelayPortTaken => "RelayPortTaken",
            RelayReason::RelayListenFailed => "RelayListenFailed",
        }
    }
}

/// The node's `Configured` condition as the agent derives it: one value, from which the object's condition, the
/// agent's Event and its log line are made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Configured {
    pub configured: bool,
    /// The first trouble, by [`ConfiguredReason`]'s order.
    pub reason: ConfiguredReason,
    /// Every trouble, each said once; or what is configured.
    pub message: String,
}

impl Configured {
    /// The condition as the object holds it, its transition time kept from `before` while its status is the same.
    pub fn condition(&self, before: Option<&Condition>, now: Time) -> Condition {
        condition(CONFIGURED, self.configured, self.reason.as_str(), &self.message, before, now)
    }
}

/// The node's `RelayServing` condition as the agent derives it, like [`Configured`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RelayServing {
    pub serving: bool,
    /// The first trouble, by [`RelayReason`]'s order.
    pub reason: RelayReason,
    pub message: String,
}

impl RelayServing {
    pub fn condition(&self, before: Option<&Condition>, now: Time) -> Condition {
        condition(RELAY_SERVING, self.serving, self.reason.as_str(), &self.message, before, now)
    }
}

/// A condition of `type_`, its transition time kept from `before` while its status is the same.
fn condition(
    type_: &str,
    status: bool,
    reason: &str,
    message: &str,
    before: Option<&Condition>,
    now: Time,
) -> Condition {
    let status = if status { "True" } else { "False" };
    let last_transition_time = before.filter(|c| c.status == status).map_or(now, |c| c.last_transition_time.clone());
    Condition {
        type_: type_.into(),
        status: status.into(),
        reason: reason.into(),
        message: message.into(),
        last_transition_time,
        observed_generation: None,
    }
}

impl NodeState {
    /// The `Configured` condition, when the agent has written one.
    pub fn configured(&self) -> Option<&Condition> {
        self.conditions.iter().find(|c| c.type_ == CONFIGURED)
    }

    /// The `RelayServing` condition, when the agent has written one.
    pub fn relay_serving(&self) -> Option<&Condition> {
        self.conditions.iter().find(|c| c.type_ == RELAY_SERVING)
    }
}

/// Kubernetes' own schema of a condition list (`metav1.Condition`), as structural as the API server wants it.
fn conditions_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "array",
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["type"],
        "items": {
            "type": "object",
            "required": ["type", "status", "lastTransitionTime", "reason", "message"],
            "properties": {
                "type": {"type": "string"},
                "status": {"type": "string", "enum": ["True", "False", "Unknown"]},
                "reason": {"type": "string"},
                "message": {"type": "string"},
                "lastTransitionTime": {"type": "string", "format": "date-time"},
                "observedGeneration": {"type": "integer", "format": "int64"}
            }
        }
    })
}

/// The CustomResourceDefinition generated from [`NodePullState`], labelled as part of the project and without a
/// status subresource (the agent writes its object whole).
pub fn crd() -> CustomResourceDefinition {
    let mut crd = <NodePullState as kube::CustomResourceExt>::crd();
    for version in &mut crd.spec.versions {
        version.subresources = None;
        if let Some(validation) = &mut version.schema
            && let Some(schema) = validation.open_api_v3_schema.take()
        {
            validation.open_api_v3_schema = Some(known_formats_only(schema));
        }
    }
    crd.metadata.labels = Some([("app.kubernetes.io/part-of".to_string(), crate::keys::MANAGER.to_string())].into());
    crd
}

/// The schema without the formats the API server does not know (schemars' `uint16`, `uint32`, `uint64`, which it
/// warns about at every install): their `minimum` and `maximum` say the same and are kept.
fn known_formats_only(schema: JSONSchemaProps) -> JSONSchemaProps {
    fn strip(value: &mut serde_json::Value) {
        match value {
            serde_json::Value::Object(map) => {
                if map.get("format").and_then(|f| f.as_str()).is_some_and(|f| f.starts_with("uint")) {
                    map.remove("format");
                }
                map.values_mut().for_each(strip);
            }
            serde_json::Value::Array(items) => items.iter_mut().for_each(strip),
            _ => {}
        }
    }
    let Ok(mut value) = serde_json::to_value(&schema) else { return schema };
    strip(&mut value);
    serde_json::from_value(value).unwrap_or(schema)
}

/// The chart's CRD file (`crds/nodepullstates.yaml`): a comment, then [`crd`].
pub fn crd_file() -> String {
    let yaml = serde_saphyr::to_string(&crd()).unwrap_or_default();
    format!(
        "# Generated from src/node/api/state.rs by `make manifests` (local-registry-publisher crd); do not edit.\n\
         # Each node's state as its node agent last found it (docs/node-pulls.md), one object per node in the release's\n\
         # namespace, written only by the agents' ServiceAccount: this type is aggregated to no built-in role, so a user\n\
         # with `edit` or `admin` in that namespace cannot write it. Helm installs it with every release, whatever its\n\
         # values, and never upgrades or deletes it (README, Uninstall); each object is owned by its agents' DaemonSet\n\
         # and goes with it.\n{yaml}"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::Resource;

    #[test]
    fn the_api_path_and_kind_are_the_ones_the_charts_crd_serves() {
        // What the chart's CustomResourceDefinition and RBAC name (templates/node-agent.yaml and its CRD).
        assert_eq!(NodePullState::kind(&()), "NodePullState");
        assert_eq!(NodePullState::api_version(&()), "local-registry-publisher.io/v1alpha1");
        assert_eq!(NodePullState::plural(&()), "nodepullstates");
        let mut state = NodePullState::new("node-1", NodePullStateFields {});
        assert_eq!(state.meta().name.as_deref(), Some("node-1"));
        state.meta_mut().namespace = Some("lrp".into());
        assert_eq!(state.metadata.namespace.as_deref(), Some("lrp"));
    }

    #[test]
    fn the_charts_crd_is_the_one_generated_from_the_type() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/charts/local-registry-publisher/crds/nodepullstates.yaml");
        let file = std::fs::read_to_string(path).expect("the chart's CRD");
        assert_eq!(file, crd_file(), "the chart's CRD differs from the type's: run `make manifests`");
    }

    #[test]
    fn an_unknown_format_is_taken_out_wherever_it_is_nested_in_objects_and_lists() {
        let schema = serde_json::from_value(serde_json::json!({"type": "object", "properties": {
            "port": {"type": "integer", "format": "uint16", "minimum": 0},
            "either": {"anyOf": [{"type": "integer", "format": "uint32"}, {"type": "string", "format": "date-time"}]},
        }}))
        .expect("a schema");
        let text = serde_json::to_string(&known_formats_only(schema)).expect("JSON");
        assert!(!text.contains("uint"), "{text}");
        assert!(text.contains("\"minimum\":0") && text.contains("date-time"), "the rest stays: {text}");
    }

    #[test]
    fn the_generated_crd_has_no_status_subresource_and_the_columns_kubectl_shows() {
        let crd = crd();
        let version = &crd.spec.versions[0];
        assert!(version.subresources.is_none(), "the agent writes its object whole, in one request");
        let columns: Vec<&str> = version.additional_printer_columns.iter().flatten().map(|c| c.name.as_str()).collect();
        assert_eq!(columns, ["Configured", "Reason", "Addresses", "Relay", "Agent", "Changed"]);
        let schema = serde_json::to_value(&version.schema).expect("schema");
        let status = &schema["openAPIV3Schema"]["properties"]["status"]["properties"];
        assert_eq!(status["runtime"]["properties"]["configPathCheck"]["enum"].as_array().map(Vec::len), Some(4));
        assert_eq!(status["addresses"]["items"]["properties"]["verdict"]["enum"].as_array().map(Vec::len), Some(4));
        assert_eq!(status["conditions"]["x-kubernetes-list-map-keys"][0], "type");
        assert_eq!(
            status["relays"]["items"]["properties"]["listeners"]["items"]["properties"]["state"]["enum"]
                .as_array()
                .map(Vec::len),
            Some(5)
        );
        // The API server warns at every install about a format it does not know (schemars' uint32, uint64).
        let text = schema.to_string();
        assert!(!text.contains("\"uint"), "a format the API server does not know: {text}");
        assert_eq!(status["relays"]["items"]["properties"]["port"]["maximum"], 65535.0, "the bound stays");
    }

    #[test]
    fn a_conditions_transition_time_moves_only_with_its_status() {
        let then = Time(k8s_openapi::jiff::Timestamp::from_second(1_000).expect("a time"));
        let now = Time(k8s_openapi::jiff::Timestamp::from_second(2_000).expect("a time"));
        let trouble = Configured {
            configured: false,
            reason: ConfiguredReason::ForeignNodeFile,
            message: "a:1: someone else's".into(),
        };
        let before = trouble.condition(None, then.clone());
        assert_eq!((before.status.as_str(), before.reason.as_str()), ("False", "ForeignNodeFile"));
        let other = Configured { reason: ConfiguredReason::NodeFileFailed, ..trouble.clone() };
        assert_eq!(other.condition(Some(&before), now.clone()).last_transition_time, then, "still False");
        let fixed =
            Configured { configured: true, reason: ConfiguredReason::NodeFilesConfigured, message: "ok".into() };
        let after = fixed.condition(Some(&before), now.clone());
        assert_eq!((after.status.as_str(), after.last_transition_time.clone()), ("True", now));
        // What `kubectl wait --for=condition=Configured` reads, found by its type among others.
        let other = Condition { type_: "Other".into(), ..after.clone() };
        let state = NodeState { conditions: vec![other, after.clone()], ..NodeState::default() };
        assert_eq!(state.configured(), Some(&after));
        assert_eq!(NodeState::default().configured(), None);
    }

    #[test]
    fn the_state_reads_back_as_written_with_camel_case_keys() {
        let state = NodeState {
            runtime: Runtime { config_path_check: ConfigPathCheck::Reads, ..Runtime::default() },
            addresses: vec![Address { address: "a:5000".into(), verdict: Verdict::Configured, ..Address::default() }],
            ..NodeState::default()
        };
        let json = serde_json::to_value(&state).expect("serialises");
        assert_eq!(json["addresses"][0]["verdict"], "configured");
        assert_eq!(json["runtime"]["configPathCheck"], "reads");
        assert!(json.get("resyncSeconds").is_some() && json.get("addressCount").is_some());
        assert_eq!(serde_json::from_value::<NodeState>(json).expect("reads back"), state);
        for (check, word) in ConfigPathCheck::ALL.iter().map(|c| (c, c.as_str())) {
            assert_eq!(serde_json::to_value(check).expect("a word"), word);
        }
        for (verdict, word) in Verdict::ALL.iter().map(|v| (v, v.as_str())) {
            assert_eq!(serde_json::to_value(verdict).expect("a word"), word);
        }
    }
}
