//! What the pure core needs to know: which Services are registries, what to publish and where. A plain value built
//! from the command line ([`crate::config::PublishArgs::settings`]) or directly, so the core and its unit tests
//! never go through the argument parser.

use std::time::Duration;

use kube::core::Selector;

use crate::keys;

/// The default registry selector, `local-registry-publisher.io/registry=true`.
pub fn default_selector() -> Selector {
    crate::watching::equal(keys::registry::LABEL, keys::registry::LABEL_VALUE)
}

/// See the flags of the same names (`local-registry-publisher --help`) for what each means.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    pub registry_selector: Selector,
    pub builtin_registries: bool,
    /// Empty: every namespace.
    pub watch_namespaces: Vec<String>,
    /// Namespaces allowed to name the cluster's registry, besides those a cluster admin labelled.
    pub allowed_namespaces: Vec<String>,
    pub configmap_namespace: String,
    pub configmap_name: String,
    pub cluster_domain: String,
    pub node_address: NodeAddress,
    pub help_url: Option<String>,
    pub grace_period: Duration,
    pub take_over: bool,
    /// Distribute the published registry's pull credentials; `None` (the default) does not touch Secrets at all.
    pub pull_secrets: Option<PullSecrets>,
    /// Keep the node plan (see [`crate::node`]) in this ConfigMap; `None` (the default) plans nothing.
    pub node_plan: Option<NodePlanTarget>,
}

/// The ConfigMap node agents read their plan from: in the controller's own namespace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodePlanTarget {
    pub namespace: String,
    pub name: String,
    /// What the cluster admin lets node files redirect (see [`crate::node::trust`]) and the mirrors it sets (see
    /// [`crate::node::mirror`]).
    pub rules: crate::node::Rules,
}

impl std::fmt::Display for NodePlanTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ConfigMap {}/{}", self.namespace, self.name)
    }
}

/// Where the published registry's pull credentials go (see [`crate::pull`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PullSecrets {
    /// The name of the Secret written in each opted-in namespace.
    pub name: String,
    /// ServiceAccounts in those namespaces whose `imagePullSecrets` get that Secret.
    pub service_accounts: Vec<String>,
}

impl Default for PullSecrets {
    fn default() -> Self {
        Self { name: "local-registry-pull".into(), service_accounts: Vec::new() }
    }
}

/// How tools outside the cluster reach a node's hostPort or nodePort.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NodeAddress {
    Localhost,
    InternalIp,
    /// An IP address (IPv6 in brackets) or dotted host name, already normalised.
    Literal(String),
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            registry_selector: default_selector(),
            builtin_registries: true,
            watch_namespaces: Vec::new(),
            allowed_namespaces: Vec::new(),
            configmap_namespace: "kube-public".into(),
            configmap_name: "local-registry-hosting".into(),
            cluster_domain: "cluster.local".into(),
            node_address: NodeAddress::Localhost,
            help_url: None,
            grace_period: Duration::from_secs(15),
            take_over: false,
            pull_secrets: None,
            node_plan: None,
        }
    }
}

impl Settings {
    /// Whether the watches span every namespace.
    pub fn all_namespaces(&self) -> bool {
        self.watch_namespaces.is_empty()
    }

    pub fn watches_namespace(&self, namespace: &str) -> bool {
        self.all_namespaces() || self.watch_namespaces.iter().any(|n| n == namespace)
    }

    /// `namespace/name` of the published ConfigMap.
    pub fn target(&self) -> String {
        format!("{}/{}", self.configmap_namespace, self.configmap_name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_plan_error_names_the_configmap_it_was_about() {
        let target = NodePlanTarget {
            namespace: "local-registry-publisher".into(),
            name: "lrp-node-plan".into(),
            rules: crate::node::Rules::default(),
        };
        // The controller's read and apply errors say this (and so its logs and Events).
        assert_eq!(target.to_string(), "ConfigMap local-registry-publisher/lrp-node-plan");
    }
}
