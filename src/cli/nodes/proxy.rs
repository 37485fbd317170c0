//! Which mode kube-proxy runs in on each node, read where distributions show it (what each mode serves is
//! [`crate::kube_proxy`]'s), and so whether the node's containerd can pull the published runtime address when it
//! is the node's loopback at the registry's nodePort. Pure; [`super::gather`] reads the objects.

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::ResourceExt;

pub use crate::kube_proxy::{CONFIG_KEY, CONFIG_MAP, Mode, POD_LABEL, Serves};
use crate::kube_proxy::{ConfigTarget, NFTABLES_DEFAULT, NFTABLES_LOCALHOST_GATE, NODE_ARGS, Reader, flag};
use crate::publish::Published;

/// What doctor read of kube-proxy, each read's failure left out (the mode is then not known).
#[derive(Debug)]
pub struct Sources {
    pub nodes: Result<Vec<Node>, String>,
    /// kube-proxy's pods in kube-system.
    pub pods: Vec<Pod>,
    /// `config.conf` of ConfigMap kube-system/kube-proxy.
    pub config: Option<String>,
}

/// kube-proxy's mode on `node`: its pod's `--proxy-mode` flag, else the node's k3s or RKE2 arguments, else the
/// shared configuration (an empty mode there is kube-proxy's default, iptables until 1.40); its feature gates and
/// node port addresses likewise, the flags winning. `None` where none shows the mode.
pub fn on(node: &Node, sources: &Sources) -> Option<Mode> {
    let name = node.name_any();
    let pod = sources.pods.iter().find(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(&name));
    let pod_args: Vec<&str> = pod
        .map(|pod| {
            let containers = pod.spec.as_ref().map(|s| s.containers.as_slice()).unwrap_or_default();
            containers
                .iter()
                .flat_map(|c| c.command.iter().flatten().chain(c.args.iter().flatten()))
                .flat_map(|a| a.split_whitespace())
                .collect()
        })
        .unwrap_or_default();
    let from_pod = pod.and_then(|pod| {
        let mode = flag(pod_args.iter().copied(), "--proxy-mode")?;
        Mode::new(mode, format!("the --proxy-mode flag of kube-proxy pod kube-system/{}", pod.name_any()))
    });
    // k3s and RKE2 give kube-proxy `--kube-proxy-arg=proxy-mode=nftables`: as kube-proxy's own flags.
    let node_args: Option<(&str, Vec<String>)> = NODE_ARGS.iter().find_map(|key| {
        let args: Vec<String> = serde_json::from_str(node.annotations().get(*key)?).ok()?;
        let separate = args.windows(2).filter(|w| w[0] == "--kube-proxy-arg").map(|w| w[1].clone());
        let inline = args.iter().filter_map(|a| a.strip_prefix("--kube-proxy-arg=").map(String::from));
        Some((*key, separate.chain(inline).map(|a| format!("--{a}")).collect()))
    });
    let from_node = || {
        let (key, args) = node_args.as_ref()?;
        Mode::new(flag(args.iter().map(String::as_str), "--proxy-mode")?, format!("node annotation {key}"))
    };
    let from_config = || Mode::from_configuration(sources.config.as_deref()?, ConfigTarget::kubeadm().source());
    let mode = from_pod.or_else(from_node).or_else(from_config)?;
    let node_flags = node_args.iter().flat_map(|(_, args)| args.iter().map(String::as_str));
    Some(mode.with_flags(pod_args.iter().copied().chain(node_flags).collect::<Vec<_>>().into_iter()))
}

/// The address a node's containerd pulls the published registry from, when it is the node's loopback at the
/// registry's nodePort: `hostFromContainerRuntime`, else `host`, as readers do.
pub fn loopback_pull_address(published: &Published) -> Option<&str> {
    let addresses = crate::kube_proxy::loopback_addresses(published).into_iter();
    addresses.filter(|(reader, ..)| *reader == Reader::Runtime).map(|(.., address)| address).next()
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
        (Serves::Yes, false) if mode.after_default_flip().is_some_and(|next| next.serves(address) != Serves::Yes) => (
            format!(
                "{running}, its default as no mode is set, which serves {address} on the node's loopback today; \
                 {NFTABLES_DEFAULT}, which does not: set mode: iptables in kube-proxy's configuration, or relay the \
                 registry on every node (nodeAgent.relay), to keep it"
            ),
            false,
        ),
        (Serves::Yes, _) => (format!("{running}, which serves {address} on the node's loopback"), false),
        (_, true) => (format!("{running}; {address} is pulled through the agent's file, to the ClusterIP"), false),
        (Serves::No, false) => (
            format!(
                "{running}, which serves no {address} on the node's loopback: its containerd cannot pull it; turn on \
                 the node agent (nodeAgent.enabled=true), whose file maps it to the ClusterIP, give the registry \
                 a hostPort, or, {NFTABLES_LOCALHOST_GATE}"
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
