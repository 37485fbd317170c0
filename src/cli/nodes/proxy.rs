//! Whether each node's containerd can pull the published runtime address when it is the node's loopback at the
//! registry's nodePort, from kube-proxy's mode there as [`crate::kube_proxy::read`] reads it for the controller too
//! (what each mode serves is [`crate::kube_proxy`]'s). Pure; [`super::gather`] reads the objects.

pub use crate::kube_proxy::read::{Sources, on};
pub use crate::kube_proxy::{CONFIG_KEY, CONFIG_MAP, Mode, POD_LABEL, Serves};
use crate::kube_proxy::{NFTABLES_DEFAULT, Reader};
use crate::publish::Published;

/// The address a node's containerd pulls the published registry from, when it is the node's loopback at the
/// registry's nodePort: `hostFromContainerRuntime`, else `host`, as readers do.
pub fn loopback_pull_address(published: &Published) -> Option<&str> {
    let addresses = crate::kube_proxy::loopback_addresses(published).into_iter();
    addresses.filter(|(reader, ..)| *reader == Reader::Runtime).map(|(.., address)| address).next()
}

/// [`judge`] for a CRI-O node: it dials HTTPS on loopback too, so whatever kube-proxy serves there, only the
/// agent's drop-in (plain HTTP to the ClusterIP) makes `address` pullable; and an IPv6 literal (`[::1]:<port>`) it
/// does not take in an image name at all (CRI-O 1.36: "parse image name: invalid reference format"), drop-in or not.
pub fn judge_crio(address: &str, configured: bool) -> (String, bool) {
    if address.starts_with('[') {
        return (
            format!(
                "CRI-O takes no IPv6 address in an image name (\"invalid reference format\"), so it cannot pull \
                 {address} at all: publish a name or an IPv4 address (docs/node-pulls.md#cri-o)"
            ),
            true,
        );
    }
    if configured {
        return (format!("CRI-O pulls {address} through the agent's drop-in, to the ClusterIP"), false);
    }
    (
        format!(
            "CRI-O dials HTTPS on the node's loopback too, so {address} is pulled only through the node agent's \
             drop-in, which is not in place"
        ),
        true,
    )
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
                 {NFTABLES_DEFAULT}, which does not: to keep it, {}",
                crate::kube_proxy::at_risk_fixes()
            ),
            false,
        ),
        (Serves::Yes, _) => (format!("{running}, which serves {address} on the node's loopback"), false),
        (_, true) => (format!("{running}; {address} is pulled through the agent's file, to the ClusterIP"), false),
        (Serves::No, false) => (
            format!(
                "{running}, which serves no {address} on the node's loopback: its containerd cannot pull it; to have \
                 it served, {}",
                crate::kube_proxy::unserved_fixes(mode, true)
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
