//! The kube-proxy concern's decision: which published addresses on a node's loopback at the registry's nodePort
//! kube-proxy's mode does not serve, for whom, and what to tell on the registry's Service.

use std::fmt;

use super::{CONFIG_KEY, CONFIG_MAP, Mode, NFTABLES_DEFAULT, Serves};
use crate::hosting::Field;
use crate::node::{self, Notice, Reason, served_on_node_loopback};
use crate::publish::Published;
use crate::watching::WatchKey;

/// Where kube-proxy's shared configuration is read (`--kube-proxy-configmap`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigTarget {
    pub namespace: String,
    pub name: String,
}

impl fmt::Display for ConfigTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

impl ConfigTarget {
    /// Where kubeadm and kind keep it.
    pub fn kubeadm() -> Self {
        Self { namespace: CONFIG_MAP.0.to_string(), name: CONFIG_MAP.1.to_string() }
    }

    pub fn key(&self) -> WatchKey {
        WatchKey::in_namespace(&self.namespace).named(&self.name)
    }

    /// How a mode read from it is said.
    pub fn source(&self) -> String {
        format!("ConfigMap {self} ({CONFIG_KEY})")
    }
}

/// Who uses a published loopback address from a node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Reader {
    /// Tools on a node's machine (`host`): push and pull.
    Tools,
    /// The node's container runtime (`hostFromContainerRuntime`, else `host`): pulls.
    Runtime,
}

impl Reader {
    pub const ALL: [Reader; 2] = [Reader::Tools, Reader::Runtime];

    /// The metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Reader::Tools => "tools",
            Reader::Runtime => "runtime",
        }
    }
}

/// A published address a reader cannot use where kube-proxy runs as it does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unserved {
    pub reader: Reader,
    pub field: Field,
    pub address: String,
}

/// The published addresses on a node's loopback at the registry's nodePort, with who uses each from there; none
/// when the registry is reached at a hostPort instead, which every kube-proxy mode leaves to the CNI.
pub fn loopback_addresses(published: &Published) -> Vec<(Reader, Field, &str)> {
    if published.ports.host_port {
        return Vec::new();
    }
    let document = &published.document;
    let runtime_field =
        if document.host_from_container_runtime.is_some() { Field::HostFromContainerRuntime } else { Field::Host };
    [(Reader::Tools, Field::Host), (Reader::Runtime, runtime_field)]
        .into_iter()
        .filter_map(|(reader, field)| Some((reader, field, document.get(field)?)))
        .filter(|(_, _, address)| served_on_node_loopback(address, published.ports.node))
        .collect()
}

/// The concern's watches: kube-proxy's configuration, only while a loopback NodePort address is published.
pub fn interest(published: Option<&Published>, target: &ConfigTarget) -> super::Interest {
    let mut interest = super::Interest::default();
    if published.is_some_and(|p| !loopback_addresses(p).is_empty()) {
        interest.configs.insert(target.key());
    }
    interest
}

/// kube-proxy's mode as `observed` holds its configuration: `Err` with the API server's refusal, `Ok(None)` where
/// there is none (a distribution that keeps it elsewhere) or it sets no mode word.
pub fn mode(observed: &super::Observed, target: &ConfigTarget) -> Result<Option<Mode>, String> {
    match observed.configs.get(&target.key()) {
        Some(Err(refusal)) => Err(refusal.clone()),
        Some(Ok(found)) => Ok(found.iter().find_map(|config| {
            let config = Some((config.0.clone()?, target.clone()));
            super::read::shared(&super::read::Sources { config, ..super::read::Sources::default() })
        })),
        None => Ok(None),
    }
}

/// The published loopback addresses `mode` does not serve, per reader: tools' always (nothing on the node can stand
/// in for kube-proxy there), the runtime's only where the node agent (`node_agent`) maps no file for it.
pub fn unserved(published: Option<&Published>, mode: Option<&Mode>, node_agent: bool) -> Vec<Unserved> {
    let (Some(published), Some(mode)) = (published, mode) else {
        return Vec::new();
    };
    loopback_addresses(published)
        .into_iter()
        .filter(|(_, _, address)| mode.serves(address) == Serves::No)
        .filter(|(reader, _, address)| *reader == Reader::Tools || !(node_agent && node::redirects(published, address)))
        .map(|(reader, field, address)| Unserved { reader, field, address: address.to_string() })
        .collect()
}

/// The published loopback addresses kube-proxy serves today only because it runs its default mode, iptables,
/// and that it stops serving when its default becomes nftables ([`NFTABLES_DEFAULT`]), with the same gate and node
/// port addresses: per reader as [`unserved`] says them.
pub fn at_risk(published: Option<&Published>, mode: Option<&Mode>, node_agent: bool) -> Vec<Unserved> {
    let Some(flipped) = mode.and_then(Mode::after_default_flip) else {
        return Vec::new();
    };
    let served_now: Vec<String> = unserved(published, mode, node_agent).into_iter().map(|u| u.address).collect();
    unserved(published, Some(&flipped), node_agent).into_iter().filter(|u| !served_now.contains(&u.address)).collect()
}

/// What to tell of `unserved` and `at_risk` on the registry's Service: a notice each, each address with what fails
/// (or will) and the fixes.
pub fn notices(
    published: Option<&Published>,
    mode: Option<&Mode>,
    unserved: &[Unserved],
    at_risk: &[Unserved],
) -> Vec<Notice> {
    unserved_notice(published, mode, unserved).into_iter().chain(at_risk_notice(published, mode, at_risk)).collect()
}

fn at_risk_notice(published: Option<&Published>, mode: Option<&Mode>, at_risk: &[Unserved]) -> Option<Notice> {
    let (Some(published), Some(mode), false) = (published, mode, at_risk.is_empty()) else {
        return None;
    };
    let said: Vec<String> = at_risk
        .iter()
        .map(|u| {
            let who = match u.reader {
                Reader::Tools => "tools on a node's machine",
                Reader::Runtime => "each node's containerd",
            };
            format!("{who} lose {} {}", u.field.key(), u.address)
        })
        .collect();
    let message = format!(
        "kube-proxy runs its default mode, iptables ({} names no mode), which serves the published loopback NodePort \
         today; {NFTABLES_DEFAULT}, which serves none, so on that upgrade {}. To keep it, {}",
        mode.source,
        said.join(" and "),
        super::at_risk_fixes()
    );
    Some(Notice { regarding: published.reference.clone(), reason: Reason::LoopbackNodePortAtRisk, message })
}

fn unserved_notice(published: Option<&Published>, mode: Option<&Mode>, unserved: &[Unserved]) -> Option<Notice> {
    let (Some(published), Some(mode), false) = (published, mode, unserved.is_empty()) else {
        return None;
    };
    let said: Vec<String> = unserved
        .iter()
        .map(|u| {
            let (field, address, words) = (u.field.key(), &u.address, mode.unserved_words(&u.address));
            match u.reader {
                Reader::Tools => format!(
                    "tools on a node's machine reach {field} {address} only where that machine forwards its port to \
                     a node's own address (kind's extraPortMappings do): kube-proxy serves {words}"
                ),
                Reader::Runtime => {
                    format!("no node's containerd can pull {field} {address}: kube-proxy serves {words}")
                }
            }
        })
        .collect();
    let for_runtime = unserved.iter().any(|u| u.reader == Reader::Runtime);
    let message = format!(
        "kube-proxy runs in {} mode ({}): {}. To have it served, {}",
        mode.name,
        mode.source,
        said.join("; "),
        super::unserved_fixes(mode, for_runtime)
    );
    Some(Notice { regarding: published.reference.clone(), reason: Reason::LoopbackNodePortUnserved, message })
}
