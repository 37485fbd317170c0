//! kube-proxy's mode, read where distributions show it, and which NodePort addresses on a node's own loopback it
//! serves there: its iptables mode serves IPv4 loopback NodePorts (`localhostNodePorts`, on by default), its
//! nftables mode serves none (until KEP-6032's `KubeProxyNFTablesLocalhostNodePorts` gate, alpha in 1.37), and no
//! mode serves `[::1]`. Measured on the project's real node in both modes (docs/development.md); other modes are
//! told as not measured. [`read`] is the one reader of the mode, for the controller and doctor; [`unserved`] is what
//! the controller's kube-proxy concern decides from it. Pure.

pub mod read;
mod unserved;
mod watched;

use serde::Deserialize;

pub use unserved::{ConfigTarget, Reader, Unserved, at_risk, interest, loopback_addresses, mode, notices, unserved};
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
/// KEP-6032's feature gate, as kube-proxy's `featureGates` and `--feature-gates` name it.
pub const LOCALHOST_GATE: &str = "KubeProxyNFTablesLocalhostNodePorts";
/// When kube-proxy's default mode becomes nftables (KEP-5343), as every message that warns of it says it.
pub const NFTABLES_DEFAULT: &str = "from Kubernetes 1.40 kube-proxy's default mode is nftables (KEP-5343)";

/// What has a published loopback NodePort address served where kube-proxy's mode does not serve it, as the
/// controller's Event and doctor both say it: any one of them. `for_runtime`: the node's runtime is among those that
/// cannot pull it, which the node agent's file fixes (tools on the node it does not).
pub fn unserved_fixes(mode: &Mode, for_runtime: bool) -> String {
    let mut fixes = vec!["relay the registry on every node's loopback (nodeAgent.relay, served in every mode)"];
    if for_runtime {
        fixes.push("turn on the node agent (nodeAgent.enabled=true), whose file maps the address to the ClusterIP for the node's runtime");
    }
    fixes.push(
        "give the registry's pod a hostPort (served on the loopback in every mode, and published before its nodePort)",
    );
    if mode.name == "nftables" {
        fixes.push(NFTABLES_LOCALHOST_GATE);
    }
    format!("any of: {}", fixes.join("; "))
}

/// What keeps serving a published loopback NodePort address that kube-proxy serves only in its default mode, once
/// that default becomes nftables ([`NFTABLES_DEFAULT`]), as the controller's Event and doctor both say it.
pub fn at_risk_fixes() -> String {
    format!(
        "any of: set mode: iptables in kube-proxy's configuration; relay the registry on every node's loopback \
         (nodeAgent.relay, served in every mode); give the registry's pod a hostPort; {NFTABLES_LOCALHOST_GATE}"
    )
}

/// kube-proxy's mode and where it was read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mode {
    pub name: String,
    pub source: String,
    /// iptables mode's `localhostNodePorts`, when the configuration turns it off.
    pub localhost_node_ports_off: bool,
    /// The mode is named where it was read; otherwise kube-proxy runs its default, which changes with its release.
    pub explicit: bool,
    /// KEP-6032's gate ([`LOCALHOST_GATE`]) is on.
    pub localhost_gate: bool,
    /// `nodePortAddresses` (`--nodeport-addresses`): empty serves NodePorts on every address of the node.
    pub node_port_addresses: Vec<String>,
}

/// Whether a mode serves a loopback NodePort address, as measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Serves {
    Yes,
    No,
    NotMeasured,
}

impl Mode {
    /// A mode named (explicitly) at `source`; `None` unless `name` is a mode word.
    pub fn new(name: &str, source: String) -> Option<Self> {
        is_mode_name(name).then(|| Mode {
            name: name.to_string(),
            source,
            localhost_node_ports_off: false,
            explicit: true,
            localhost_gate: false,
            node_port_addresses: Vec::new(),
        })
    }

    /// The mode a KubeProxyConfiguration (`text`, YAML) sets, read from `source`: an empty mode is kube-proxy's
    /// default, iptables until 1.40 ([`NFTABLES_DEFAULT`]), and not explicit.
    pub fn from_configuration(text: &str, source: String) -> Option<Self> {
        let config: Configuration = serde_saphyr::from_str(text).ok()?;
        let named = config.mode.filter(|m| !m.is_empty());
        let mut mode = Mode::new(named.as_deref().unwrap_or("iptables"), source)?;
        mode.explicit = named.is_some();
        mode.localhost_node_ports_off = config.iptables.and_then(|i| i.localhost_node_ports) == Some(false);
        mode.localhost_gate = config.feature_gates.get(LOCALHOST_GATE) == Some(&true);
        mode.node_port_addresses = config.node_port_addresses.unwrap_or_default();
        Some(mode)
    }

    /// The gate and node port addresses of kube-proxy's flags (`--feature-gates`, `--nodeport-addresses`), which
    /// win over its configuration.
    pub fn with_flags<'a>(mut self, args: impl Iterator<Item = &'a str> + Clone) -> Self {
        if let Some(gates) = flag(args.clone(), "--feature-gates") {
            let on = gates
                .split(',')
                .filter_map(|g| g.split_once('='))
                .any(|(name, value)| name.trim() == LOCALHOST_GATE && value.trim().eq_ignore_ascii_case("true"));
            self.localhost_gate = on;
        }
        if let Some(addresses) = flag(args, "--nodeport-addresses") {
            self.node_port_addresses =
                addresses.split(',').map(|a| a.trim().to_string()).filter(|a| !a.is_empty()).collect();
        }
        self
    }

    pub fn serves(&self, address: &str) -> Serves {
        match self.name.as_str() {
            // KEP-6032 serves both loopbacks in nftables mode; nothing else serves [::1].
            "nftables" if self.localhost_gate && self.node_port_addresses.iter().any(|a| a == "localhost") => {
                Serves::Yes
            }
            _ if address.starts_with('[') => Serves::No,
            "iptables" if self.localhost_node_ports_off || !self.node_ports_on_ipv4_loopback() => Serves::No,
            "iptables" => Serves::Yes,
            "nftables" => Serves::No,
            _ => Serves::NotMeasured,
        }
    }

    /// The mode kube-proxy runs once its default becomes nftables ([`NFTABLES_DEFAULT`]), when this one is its
    /// default (not explicit) today; the same gate and addresses. Only asked what it serves (iptables' own
    /// `localhostNodePorts` means nothing to nftables).
    pub fn after_default_flip(&self) -> Option<Mode> {
        (!self.explicit && self.name == "iptables").then(|| Mode { name: "nftables".into(), ..self.clone() })
    }

    /// Whether `nodePortAddresses` takes in 127.0.0.1: none given (every address), `localhost`, or a CIDR holding it.
    fn node_ports_on_ipv4_loopback(&self) -> bool {
        let holds_loopback = |cidr: &str| {
            let Some((network, bits)) = cidr.split_once('/') else { return cidr == "localhost" };
            let (Ok(network), Ok(bits)) = (network.parse::<std::net::Ipv4Addr>(), bits.parse::<u32>()) else {
                return false;
            };
            let mask = u32::MAX.checked_shl(32 - bits.min(32)).unwrap_or(0);
            u32::from(network) & mask == u32::from(std::net::Ipv4Addr::LOCALHOST) & mask
        };
        self.node_port_addresses.is_empty() || self.node_port_addresses.iter().any(|a| holds_loopback(a))
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
    #[serde(default)]
    feature_gates: std::collections::BTreeMap<String, bool>,
    #[serde(default)]
    node_port_addresses: Option<Vec<String>>,
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
