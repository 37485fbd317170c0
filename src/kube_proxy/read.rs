//! The one reader of kube-proxy's mode, for the controller and doctor alike: its pod's `--proxy-mode` flag on a node,
//! else that node's k3s or RKE2 arguments, else the shared configuration; its feature gates and node port addresses
//! likewise, the flags winning. Each caller passes what it may read: doctor every source, the controller only the
//! shared configuration (reading kube-system's pods would take a grant on every pod spec there, and following every
//! Node's annotations would grow with the cluster).

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::ResourceExt;

use super::{ConfigTarget, Mode, NODE_ARGS, flag};

/// What was read of kube-proxy, each read's failure left out (the mode is then not known).
#[derive(Debug)]
pub struct Sources {
    pub nodes: Result<Vec<Node>, String>,
    /// kube-proxy's pods (kubeadm, kind and Talos run it as a DaemonSet in kube-system).
    pub pods: Vec<Pod>,
    /// The shared KubeProxyConfiguration (`config.conf`), and where it was read.
    pub config: Option<(String, ConfigTarget)>,
}

impl Default for Sources {
    fn default() -> Self {
        Self { nodes: Ok(Vec::new()), pods: Vec::new(), config: None }
    }
}

/// kube-proxy's mode where no node says more: the shared configuration's (an empty mode there is kube-proxy's
/// default, iptables until 1.40, and not explicit).
pub fn shared(sources: &Sources) -> Option<Mode> {
    let (text, target) = sources.config.as_ref()?;
    Mode::from_configuration(text, target.source())
}

/// kube-proxy's mode on `node`: see the module. `None` where nothing shows the mode.
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
    let mode = from_pod.or_else(from_node).or_else(|| shared(sources))?;
    let node_flags = node_args.iter().flat_map(|(_, args)| args.iter().map(String::as_str));
    Some(mode.with_flags(pod_args.iter().copied().chain(node_flags).collect::<Vec<_>>().into_iter()))
}
