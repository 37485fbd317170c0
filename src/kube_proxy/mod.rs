//! kube-proxy's mode, read where distributions show it, and which NodePort addresses on a node's own loopback it
//! serves there: its iptables mode serves IPv4 loopback NodePorts (`localhostNodePorts`, on by default), its
//! nftables mode serves none (until KEP-6032's `KubeProxyNFTablesLocalhostNodePorts` gate, alpha in 1.37), and no
//! mode serves `[::1]`. Measured on the project's real node in both modes (docs/development.md); other modes are
//! told as not measured. [`unserved`] is what the controller's kube-proxy concern decides from it; doctor reads
//! more sources per node (`cli::nodes::proxy`). Pure.

mod unserved;
mod watched;

use serde::Deserialize;

pub use unserved::{ConfigTarget, Reader, Unserved, interest, loopback_addresses, mode, notices, unserved};
pub(crate) use watched::proxy_watch_sets;
pub use watched::{Interest, Observed, ProxyConfig};

/// kubeadm and kind keep kube-proxy's configuration here, and their kube-proxy pods read it.
pub const CONFIG_MAP: (&str, &str) = ("kube-system", "kube-proxy");
pub const CONFIG_KEY: &str = "config.conf";
/// The label kubeadm, kind and Talos give kube-proxy's pods.
pub const POD_LABEL: &str = "k8s-app=kube-proxy";
/// k3s and RKE2 run kube-proxy inside their own process and record its arguments on the node.
pub const NODE_ARGS: [&str; 2] = ["k3s.io/node-args", "rke2.io/node-args"];

/// KEP-6032's fix for nftables mode (IPv4 and IPv6 loopback), as every message that suggests it says it.
pub const NFTABLES_LOCALHOST_GATE: &str = "from Kubernetes 1.37, turn on kube-proxy's alpha feature gate \
     KubeProxyNFTablesLocalhostNodePorts with localhost in its --nodeport-addresses";

/// kube-proxy's mode and where it was read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mode {
    pub name: String,
    pub source: String,
    /// iptables mode's `localhostNodePorts`, when the configuration turns it off.
    pub localhost_node_ports_off: bool,
}

/// Whether a mode serves a loopback NodePort address, as measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Serves {
    Yes,
    No,
    NotMeasured,
}

impl Mode {
    /// A mode read from `source`; `None` unless `name` is a mode word.
    pub fn new(name: &str, source: String) -> Option<Self> {
        is_mode_name(name).then(|| Mode { name: name.to_string(), source, localhost_node_ports_off: false })
    }

    /// The mode a KubeProxyConfiguration (`text`, YAML) sets, read from `source`: an empty mode is kube-proxy's
    /// default, iptables.
    pub fn from_configuration(text: &str, source: String) -> Option<Self> {
        let config: Configuration = serde_saphyr::from_str(text).ok()?;
        let name = config.mode.filter(|m| !m.is_empty()).unwrap_or_else(|| "iptables".into());
        let mut mode = Mode::new(&name, source)?;
        mode.localhost_node_ports_off = config.iptables.and_then(|i| i.localhost_node_ports) == Some(false);
        Some(mode)
    }

    pub fn serves(&self, address: &str) -> Serves {
        match self.name.as_str() {
            _ if address.starts_with('[') => Serves::No,
            "iptables" if self.localhost_node_ports_off => Serves::No,
            "iptables" => Serves::Yes,
            "nftables" => Serves::No,
            _ => Serves::NotMeasured,
        }
    }

    /// What it does not serve of `address`, in words: "no NodePort on a node's loopback" and the like.
    pub fn unserved_words(&self, address: &str) -> &'static str {
        if address.starts_with('[') {
            "no NodePort on a node's IPv6 loopback (no mode does)"
        } else if self.localhost_node_ports_off {
            "no NodePort on a node's loopback (its iptables.localhostNodePorts is false)"
        } else {
            "no NodePort on a node's loopback"
        }
    }
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct Configuration {
    #[serde(default)]
    mode: Option<String>,
    #[serde(default)]
    iptables: Option<IptablesConfiguration>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct IptablesConfiguration {
    #[serde(default)]
    localhost_node_ports: Option<bool>,
}

/// The value of `--name=value` or `--name value` among `args`.
pub fn flag<'a>(mut args: impl Iterator<Item = &'a str>, name: &str) -> Option<&'a str> {
    while let Some(arg) = args.next() {
        if arg == name {
            return args.next();
        }
        if let Some(value) = arg.strip_prefix(name).and_then(|rest| rest.strip_prefix('=')) {
            return Some(value);
        }
    }
    None
}

/// A mode is a short lowercase word; anything else from the cluster is not shown as one.
fn is_mode_name(name: &str) -> bool {
    (1..=16).contains(&name.len()) && name.chars().all(|c| c.is_ascii_lowercase())
}

#[cfg(test)]
mod tests;
