//! Keeps this node's `NodePullState` true to the state the agent derived ([`super::state`]): one server-side apply
//! when something changed, none otherwise.

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, OwnerReference, Time};
use k8s_openapi::jiff::{Timestamp, Unit};
use kube::api::{Api, Patch, PatchParams};
use kube::{Client, Resource};
use serde_json::json;

use crate::keys::MANAGER;
use crate::node::api::state::{CONFIGURED, Configured, NodePullState, NodeState, RELAY_SERVING, RelayServing};

/// Keeps the object true to the node's state.
pub struct StateWriter {
    api: Api<NodePullState>,
    daemonsets: Api<DaemonSet>,
    name: String,
    namespace: String,
    /// The agents' DaemonSet, which owns the object so that it goes with the DaemonSet (uninstall, the agent turned
    /// off); looked up once.
    daemonset: Option<String>,
    owner: Option<OwnerReference>,
    /// What the object holds as far as this agent knows, without its times, and its conditions as written.
    written: Option<(NodeState, Configured, Option<RelayServing>)>,
    conditions: Vec<Condition>,
    /// The whole status last written, times and conditions included: what the object holds unless someone else
    /// changed it.
    sent: Option<NodeState>,
}

impl StateWriter {
    /// The state of node `name`, in the agents' namespace, owned by `daemonset` when given.
    pub fn new(client: &Client, namespace: &str, name: &str, daemonset: Option<&str>) -> Self {
        Self {
            api: Api::namespaced(client.clone(), namespace),
            daemonsets: Api::namespaced(client.clone(), namespace),
            name: name.to_string(),
            namespace: namespace.to_string(),
            daemonset: daemonset.map(str::to_string),
            owner: None,
            written: None,
            conditions: Vec::new(),
            sent: None,
        }
    }

    /// Writes `found` (without its `changed` time and conditions) with `configured` and `relay` unless that is
    /// what was written last; `Ok(true)` when it wrote.
    pub async fn keep(
        &mut self,
        found: NodeState,
        configured: &Configured,
        relay: Option<&RelayServing>,
    ) -> Result<bool, kube::Error> {
        let unchanged = |(state, said, relayed): &(NodeState, Configured, Option<RelayServing>)| {
            *state == found && said == configured && relayed.as_ref() == relay
        };
        if self.written.as_ref().is_some_and(unchanged) {
            return Ok(false);
        }
        if let (None, Some(name)) = (&self.owner, &self.daemonset) {
            let daemonset = self.daemonsets.get(name).await?;
            self.owner = daemonset.controller_owner_ref(&()).map(|owner| OwnerReference { controller: None, ..owner });
        }
        let now = Timestamp::now().round(Unit::Second).unwrap_or_else(|_| Timestamp::now());
        let before = |type_: &str| self.conditions.iter().find(|c| c.type_ == type_);
        let mut conditions = vec![configured.condition(before(CONFIGURED), Time(now))];
        conditions.extend(relay.map(|relay| relay.condition(before(RELAY_SERVING), Time(now))));
        let mut status = found.clone();
        status.changed = now.to_string();
        status.conditions = conditions.clone();
        let mut metadata = json!({"name": self.name, "namespace": self.namespace});
        if let Some(owner) = &self.owner {
            metadata["ownerReferences"] = json!([owner]);
        }
        let object = json!({
            "apiVersion": NodePullState::api_version(&()),
            "kind": NodePullState::kind(&()),
            "metadata": metadata,
            "status": &status,
        });
        self.api.patch(&self.name, &PatchParams::apply(MANAGER).force(), &Patch::Apply(object)).await?;
        self.written = Some((found, configured.clone(), relay.cloned()));
        self.conditions = conditions;
        self.sent = Some(status);
        Ok(true)
    }

    /// Whether `object` (the node's state as its watch sees it) holds something else than this agent wrote: written
    /// by someone else (any holder of the agents' ServiceAccount, or a cluster admin). The next [`Self::keep`] then
    /// writes what the agent found again. A state this agent has not written yet is not judged.
    pub fn overwritten(&mut self, object: &NodePullState) -> bool {
        let changed = self.sent.as_ref().is_some_and(|sent| object.status.as_ref() != Some(sent));
        if changed {
            self.written = None;
        }
        changed
    }

    /// The object is gone (deleted by someone else): the next [`Self::keep`] makes it again.
    pub fn forget(&mut self) {
        self.written = None;
        self.sent = None;
    }

    /// Deletes the object, as an agent whose DaemonSet is gone leaves: a state a later agent of a new DaemonSet has
    /// not written yet must not be read as its (the owner's garbage collection would take it, but later).
    pub async fn remove(&self) -> Result<(), kube::Error> {
        match self.api.delete(&self.name, &Default::default()).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
            Err(error) => Err(error),
        }
    }
}

#[cfg(test)]
mod tests;
