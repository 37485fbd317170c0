//! The node concern's pure decision: which published addresses a node's container runtime could not pull from as
//! they are, and where it should go instead. Nodes resolve names with their own resolver (cluster DNS is not in
//! it), and containerd speaks HTTPS to every name but the loopback one unless a `hosts.toml` says otherwise, so
//! `registry.<ns>.svc.cluster.local:5000` fails on a node until its `hosts.toml` points at an endpoint the node
//! reaches (the Service's ClusterIP) over plain HTTP. The controller publishes the [`NodePlan`]; each node's agent
//! ([`files`]) writes it.

pub mod files;

use std::net::IpAddr;

use k8s_openapi::api::core::v1::ObjectReference;
use serde::{Deserialize, Serialize};

use crate::hosting::address::Host;
use crate::publish::Published;

/// The key of the plan in its ConfigMap.
pub const PLAN_KEY: &str = "plan.json";

/// What every node's runtime needs to pull each published address.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodePlan {
    /// One entry per address, sorted by address.
    pub hosts: Vec<HostEntry>,
}

/// One published address and where a node's runtime fetches it from.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct HostEntry {
    /// As images name it, `host:port`: the name of its directory under containerd's `config_path`.
    pub address: String,
    /// `http://host:port` the node dials instead.
    pub endpoint: String,
}

/// The plan for `published`: every published address a node's runtime cannot pull from as it is, mapped to the
/// endpoint the node reaches. An address on the node's own loopback at the registry's hostPort or nodePort needs
/// nothing (containerd dials loopback over HTTP itself), and a registry with no endpoint a node reaches gets no
/// entry.
pub fn plan(published: Option<&Published>) -> NodePlan {
    // A registry that serves TLS is dialled over HTTPS as named; a plain-HTTP endpoint would be wrong for it.
    let Some(published) = published.filter(|published| !published.ports.tls) else {
        return NodePlan::default();
    };
    let Some(endpoint) = endpoint(published) else {
        return NodePlan::default();
    };
    let document = &published.document;
    let addresses = [&document.host, &document.host_from_container_runtime, &document.host_from_cluster_network];
    let mut hosts: Vec<HostEntry> = addresses
        .into_iter()
        .flatten()
        .filter(|address| !served_on_node_loopback(address, published.ports.node))
        .map(|address| HostEntry { address: address.clone(), endpoint: endpoint.clone() })
        .collect();
    hosts.sort();
    hosts.dedup();
    NodePlan { hosts }
}

/// Where a node reaches the registry without cluster DNS: an ExternalName's target, else the Service's ClusterIP
/// (kube-proxy or its replacement serves it to the node too), else the node's own loopback at its nodePort.
fn endpoint(published: &Published) -> Option<String> {
    let spec = published.service.spec.as_ref()?;
    let port = published.ports.service;
    let authority = |address: &str, port: Option<i32>| Host::normalise(address).ok().map(|host| host.with_port(port));
    let found = if spec.type_.as_deref() == Some("ExternalName") {
        authority(spec.external_name.as_deref()?, port)
    } else if let Some(ip) = spec.cluster_ip.as_deref().filter(|ip| ip.parse::<IpAddr>().is_ok()) {
        authority(ip, Some(port?))
    } else {
        authority("127.0.0.1", Some(published.ports.node?))
    };
    found.map(|authority| format!("http://{authority}"))
}

/// Whether `address` is the node's loopback at the port the node itself serves the registry on.
fn served_on_node_loopback(address: &str, node_port: Option<i32>) -> bool {
    let Ok((host, port)) = split_port(address) else {
        return false;
    };
    let loopback =
        host == "localhost" || host.trim_matches(['[', ']']).parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback());
    loopback && port.is_some() && port == node_port
}

fn split_port(address: &str) -> Result<(&str, Option<i32>), std::num::ParseIntError> {
    match address.rsplit_once(':') {
        Some((host, port)) if !port.contains(']') => Ok((host, Some(port.parse()?))),
        _ => Ok((address, None)),
    }
}

/// Why an agent tells something about its node, as the Event's reason.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    /// Which planned addresses this node's containerd pulls through the agent's files (or that none needs one).
    HostsConfigured,
    /// A planned address whose directory holds a file the agent did not write: left alone.
    ForeignHostsFile,
    /// A planned address whose file could not be written or removed.
    HostsFileFailed,
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::HostsConfigured => "HostsConfigured",
            Reason::ForeignHostsFile => "ForeignHostsFile",
            Reason::HostsFileFailed => "HostsFileFailed",
        }
    }

    pub fn warning(self) -> bool {
        self != Reason::HostsConfigured
    }
}

/// What an agent tells about its node, on its own Pod.
#[derive(Clone, Debug, PartialEq)]
pub struct Notice {
    pub regarding: ObjectReference,
    pub reason: Reason,
    pub message: String,
}

/// The state of the node after a pass, in words: the addresses configured, then each one left alone or failed.
pub fn notices(plan: &NodePlan, report: &files::Report, regarding: &ObjectReference) -> Vec<Notice> {
    let notice = |reason, message| Notice { regarding: regarding.clone(), reason, message };
    let troubled =
        |address: &str| report.foreign.iter().any(|a| a == address) || report.failed.iter().any(|(a, _)| a == address);
    let configured: Vec<String> = plan
        .hosts
        .iter()
        .filter(|entry| !troubled(&entry.address))
        .map(|entry| format!("{} via {}", entry.address, entry.endpoint))
        .collect();
    let summary = if configured.is_empty() && plan.hosts.is_empty() {
        "no published address needs a hosts.toml on this node".to_string()
    } else if configured.is_empty() {
        "no published address is configured on this node".to_string()
    } else {
        format!("this node's containerd pulls {}", configured.join(", "))
    };
    // One Event per reason: Events are kept per object and reason.
    let mut said = vec![notice(Reason::HostsConfigured, summary)];
    if !report.foreign.is_empty() {
        let addresses = report.foreign.join(", ");
        let message = format!(
            "{addresses}: a hosts.toml this agent did not write is there; it is left as it is, so this node pulls \
             them as that file says (remove it to let the agent configure the address)"
        );
        said.push(notice(Reason::ForeignHostsFile, message));
    }
    if !report.failed.is_empty() {
        let failures: Vec<String> = report.failed.iter().map(|(address, why)| format!("{address}: {why}")).collect();
        said.push(notice(Reason::HostsFileFailed, format!("hosts.toml not written: {}", failures.join("; "))));
    }
    said
}

impl NodePlan {
    /// The plan as its ConfigMap holds it.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_default()
    }

    pub fn from_json(text: &str) -> Result<Self, serde_json::Error> {
        serde_json::from_str(text)
    }
}

#[cfg(test)]
mod tests;
