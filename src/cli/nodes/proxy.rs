//! Which mode kube-proxy runs in on each node, read where distributions show it, and so whether the node's
//! containerd can pull the published runtime address when it is the node's loopback at the registry's nodePort:
//! kube-proxy's iptables mode serves IPv4 loopback NodePorts (`localhostNodePorts`, on by default), its nftables
//! mode serves none (until KEP-6032's `KubeProxyNFTablesLocalhostNodePorts` gate, alpha in 1.37), and no mode
//! serves `[::1]`. Pure; [`super::gather`] reads the objects. Measured on the project's real node in both modes
//! (docs/development.md); other modes are told as not measured.

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::ResourceExt;
use serde::Deserialize;

use crate::publish::Published;

/// kubeadm and kind keep kube-proxy's configuration here, and their kube-proxy pods read it.
pub const CONFIG_MAP: (&str, &str) = ("kube-system", "kube-proxy");
pub const CONFIG_KEY: &str = "config.conf";
/// The label kubeadm, kind and Talos give kube-proxy's pods.
pub const POD_LABEL: &str = "k8s-app=kube-proxy";
/// k3s and RKE2 run kube-proxy inside their own process and record its arguments on the node.
const NODE_ARGS: [&str; 2] = ["k3s.io/node-args", "rke2.io/node-args"];

/// What doctor read of kube-proxy, each read's failure left out (the mode is then not known).
#[derive(Debug)]
pub struct Sources {
    pub nodes: Result<Vec<Node>, String>,
    /// kube-proxy's pods in kube-system.
    pub pods: Vec<Pod>,
    /// `config.conf` of ConfigMap kube-system/kube-proxy.
    pub config: Option<String>,
}

/// kube-proxy's mode on a node and where it was read.
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
    pub fn serves(&self, address: &str) -> Serves {
        match self.name.as_str() {
            _ if address.starts_with('[') => Serves::No,
            "iptables" if self.localhost_node_ports_off => Serves::No,
            "iptables" => Serves::Yes,
            "nftables" => Serves::No,
            _ => Serves::NotMeasured,
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

/// kube-proxy's mode on `node`: its pod's `--proxy-mode` flag, else the node's k3s or RKE2 arguments, else the
/// shared configuration (an empty mode there is kube-proxy's default, iptables). `None` where none shows it.
pub fn on(node: &Node, sources: &Sources) -> Option<Mode> {
    let name = node.name_any();
    let pod = sources.pods.iter().find(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(&name));
    let from_pod = pod.and_then(|pod| {
        let containers = pod.spec.as_ref().map(|s| s.containers.as_slice()).unwrap_or_default();
        let args = containers.iter().flat_map(|c| c.command.iter().flatten().chain(c.args.iter().flatten()));
        let mode = flag(args.flat_map(|a| a.split_whitespace()), "--proxy-mode")?;
        Some(found(mode, format!("the --proxy-mode flag of kube-proxy pod kube-system/{}", pod.name_any())))
    });
    let from_node = || {
        NODE_ARGS.iter().find_map(|key| {
            let args: Vec<String> = serde_json::from_str(node.annotations().get(*key)?).ok()?;
            let proxy_args = args.windows(2).filter(|w| w[0] == "--kube-proxy-arg").map(|w| w[1].as_str());
            let inline = args.iter().filter_map(|a| a.strip_prefix("--kube-proxy-arg="));
            let mode = proxy_args.chain(inline).find_map(|a| a.strip_prefix("proxy-mode="))?;
            Some(found(mode, format!("node annotation {key}")))
        })
    };
    let from_config = || {
        let text = sources.config.as_deref()?;
        let config: Configuration = serde_saphyr::from_str(text).ok()?;
        let name = config.mode.filter(|m| !m.is_empty()).unwrap_or_else(|| "iptables".into());
        let mut mode = found(&name, format!("ConfigMap {}/{} ({CONFIG_KEY})", CONFIG_MAP.0, CONFIG_MAP.1));
        mode.localhost_node_ports_off = config.iptables.and_then(|i| i.localhost_node_ports) == Some(false);
        Some(mode)
    };
    from_pod.or_else(from_node).or_else(from_config).filter(|mode| is_mode_name(&mode.name))
}

fn found(name: &str, source: String) -> Mode {
    Mode { name: name.to_string(), source, localhost_node_ports_off: false }
}

/// The value of `--name=value` or `--name value` among `args`.
fn flag<'a>(mut args: impl Iterator<Item = &'a str>, name: &str) -> Option<&'a str> {
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

/// The address a node's containerd pulls the published registry from, when it is the node's loopback at the
/// registry's nodePort: `hostFromContainerRuntime`, else `host`, as readers do.
pub fn loopback_pull_address(published: &Published) -> Option<&str> {
    let document = &published.document;
    let address = document.host_from_container_runtime.as_deref().or(document.host.as_deref())?;
    crate::node::served_on_node_loopback(address, published.ports.node).then_some(address)
}

/// What `mode` means for pulls of `address` on a node: the line's text and whether it fails doctor. `configured`:
/// the node agent's file for the address is in place there.
pub fn judge(mode: Option<&Mode>, address: &str, configured: bool) -> (String, bool) {
    let Some(mode) = mode else {
        return (
            format!(
                "kube-proxy's mode is not shown where doctor reads it (kube-proxy pods' --proxy-mode, node \
                 annotation k3s.io/node-args, ConfigMap kube-system/kube-proxy): in nftables mode it serves no \
                 NodePort on the node's loopback, and {address} is pulled only {}",
                if configured {
                    "through the agent's file, which is in place"
                } else {
                    "through the node agent's file"
                }
            ),
            false,
        );
    };
    let running = format!("kube-proxy runs in {} mode ({})", mode.name, mode.source);
    match (mode.serves(address), configured) {
        (Serves::Yes, _) => (format!("{running}, which serves {address} on the node's loopback"), false),
        (_, true) => (format!("{running}; {address} is pulled through the agent's file, to the ClusterIP"), false),
        (Serves::No, false) => (
            format!(
                "{running}, which serves no {address} on the node's loopback: its containerd cannot pull it; turn on \
                 the node agent (nodeAgent.enabled=true), whose file maps it to the ClusterIP, give the registry \
                 a hostPort, or, from Kubernetes 1.37, turn on kube-proxy's alpha feature gate \
                 KubeProxyNFTablesLocalhostNodePorts with localhost in its --nodeport-addresses"
            ),
            true,
        ),
        (Serves::NotMeasured, false) => (
            format!(
                "{running}, not measured for NodePorts on the node's loopback: if {address} is refused there, turn on the node agent"
            ),
            false,
        ),
    }
}

#[cfg(test)]
mod tests;
