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
    /// The registries the cluster admin has every node agent relay on the node's loopback, each at its port
    /// (`--node-relays`): the published registry among them is published at its relay (see `crate::node::relay`).
    pub relays: Vec<RelayRule>,
}

/// A registry Service the cluster admin has relayed on every node's loopback (`127.0.0.1:<port>` and
/// `[::1]:<port>`), at a port the admin chose: a tenant names neither the registry nor the port.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct RelayRule {
    pub namespace: String,
    pub name: String,
    pub port: u16,
}

impl std::str::FromStr for RelayRule {
    type Err = String;

    /// `NAMESPACE/NAME=PORT`.
    fn from_str(value: &str) -> Result<Self, String> {
        let rule = "a relay is NAMESPACE/NAME=PORT: a registry Service and the port (1-65535) every node's \
                    loopback serves it at";
        let (service, port) = value.trim().split_once('=').ok_or_else(|| format!("{value:?}: {rule}"))?;
        let (namespace, name) = service.split_once('/').ok_or_else(|| format!("{value:?}: {rule}"))?;
        if !crate::watching::is_dns_label(namespace) || !crate::watching::is_dns_label(name) {
            return Err(format!("{value:?}: {namespace:?}/{name:?} is not a Service's namespace/name ({rule})"));
        }
        let number = port.parse::<u16>().ok().filter(|n| *n > 0 && !port.starts_with(['0', '+']));
        let port = number.ok_or_else(|| format!("{value:?}: {port:?} is not a port ({rule})"))?;
        Ok(Self { namespace: namespace.into(), name: name.into(), port })
    }
}

impl std::fmt::Display for RelayRule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}={}", self.namespace, self.name, self.port)
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
            relays: Vec::new(),
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

    /// The loopback port the admin relays the registry `namespace/name` at, if any.
    pub fn relay_port(&self, namespace: &str, name: &str) -> Option<u16> {
        self.relays.iter().find(|rule| rule.namespace == namespace && rule.name == name).map(|rule| rule.port)
    }

    /// `namespace/name` of the published ConfigMap.
    pub fn target(&self) -> String {
        format!("{}/{}", self.configmap_namespace, self.configmap_name)
    }
}
