//! Keeps this node's `NodePullState` (see [`crate::node::state`]) true to what the agent found: one server-side
//! apply when something changed, none otherwise.

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, Patch, PatchParams};
use kube::{Client, Resource};
use serde_json::json;

use crate::keys::MANAGER;
use crate::node::state::{GROUP, KIND, NodePullState, NodeState, VERSION};

pub struct StateWriter {
    api: Api<NodePullState>,
    daemonsets: Api<DaemonSet>,
    name: String,
    namespace: String,
    /// The agents' DaemonSet, which owns the object so that it goes with the DaemonSet (uninstall, the agent turned
    /// off); looked up once.
    daemonset: Option<String>,
    owner: Option<OwnerReference>,
    /// What the object holds as far as this agent knows, without its `changed` time.
    written: Option<NodeState>,
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
        }
    }

    /// Writes `found` unless it is what was written last; `Ok(true)` when it wrote.
    pub async fn keep(&mut self, found: NodeState) -> Result<bool, kube::Error> {
        if self.written.as_ref() == Some(&found) {
            return Ok(false);
        }
        if let (None, Some(name)) = (&self.owner, &self.daemonset) {
            let daemonset = self.daemonsets.get(name).await?;
            self.owner = daemonset.controller_owner_ref(&()).map(|owner| OwnerReference { controller: None, ..owner });
        }
        let mut status = found.clone();
        status.changed = k8s_openapi::jiff::Timestamp::now().to_string();
        let mut metadata = json!({"name": self.name, "namespace": self.namespace});
        if let Some(owner) = &self.owner {
            metadata["ownerReferences"] = json!([owner]);
        }
        let object = json!({
            "apiVersion": format!("{GROUP}/{VERSION}"),
            "kind": KIND,
            "metadata": metadata,
            "status": status,
        });
        self.api.patch(&self.name, &PatchParams::apply(MANAGER).force(), &Patch::Apply(object)).await?;
        self.written = Some(found);
        Ok(true)
    }
}
