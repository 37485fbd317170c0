//! The node concern's pure decision: which published addresses a node's container runtime could not pull from as
//! they are, and where it should go instead. Nodes resolve names with their own resolver (cluster DNS is not in
//! it), and containerd speaks HTTPS to every name but the loopback one unless a `hosts.toml` says otherwise, so
//! `registry.<ns>.svc.cluster.local:5000` fails on a node until its `hosts.toml` points at an endpoint the node
//! reaches (the Service's ClusterIP) over plain HTTP. A registry that serves TLS is reached there over HTTPS, and
//! only with the CA bundle its Service names ([`CA_BUNDLE`]). The controller publishes the [`NodePlan`]; each
//! node's agent ([`files`]) writes it.

pub mod coverage;
pub mod files;
pub mod mirror;
pub mod runtime;
pub mod state;
pub mod trust;
mod watched;

use std::net::IpAddr;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::ResourceExt;
use serde::{Deserialize, Serialize};

use crate::hosting::Field;
use crate::hosting::address::Host;
use crate::keys::service::CA_BUNDLE;
use crate::publish::Published;
use crate::watching::{WatchKey, is_object_name};
pub use mirror::Mirror;
pub use trust::{AddressPattern, Refusal};
pub(crate) use watched::node_watch_sets;
pub use watched::{CaBundle, Interest, Observed};

/// The key of the plan in its ConfigMap.
pub const PLAN_KEY: &str = "plan.json";
/// Where a CA bundle is in its ConfigMap or Secret: the key Kubernetes' own `kube-root-ca.crt`, cert-manager's
/// Secrets and trust-manager's bundles use.
pub const CA_KEY: &str = "ca.crt";

/// The newest plan format this build writes and reads. A plan of a newer format is refused whole by an older agent,
/// which then touches nothing: a field it does not know could change what a file must say. A plan is written in the
/// oldest format that holds it (2 only with a mirror's fallback `server`), so an agent one release behind keeps
/// working until a feature it lacks is used.
pub const PLAN_FORMAT: u32 = 2;

/// What every node's runtime needs to pull each published address.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodePlan {
    /// [`PLAN_FORMAT`] of the controller that wrote it (plans written before it had one are format 1).
    #[serde(default = "first_format")]
    pub format: u32,
    /// One entry per address, sorted by address.
    pub hosts: Vec<HostEntry>,
}

impl Default for NodePlan {
    fn default() -> Self {
        Self::of(Vec::new())
    }
}

fn first_format() -> u32 {
    1
}

/// One published address and where a node's runtime fetches it from.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct HostEntry {
    /// As images name it, `host:port`: the name of its directory under containerd's `config_path`.
    pub address: String,
    /// `http://host:port` (or `https://` for a registry that serves TLS) the node dials instead.
    pub endpoint: String,
    /// The PEM CA bundle an `https://` endpoint's certificate chains to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca: Option<String>,
    /// For a mirror ([`mirror`]): the upstream the node falls back to when `endpoint` fails.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
}

/// What a cluster admin decides of node files: the addresses besides each registry's own that may be redirected,
/// and the mirrors of public registries.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Rules {
    pub allowed: Vec<AddressPattern>,
    pub mirrors: Vec<Mirror>,
}

/// The node concern's whole decision about the published registry.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Decision {
    pub plan: NodePlan,
    /// Why the CA bundle the registry names cannot be used, when it cannot (the plan then has no entry for it).
    pub ca_problem: Option<String>,
    /// Published addresses that get no node file, each with why (see [`trust`]).
    pub refused: Vec<(String, Refusal)>,
    /// Why a mirror gets no node file, one sentence each (see [`mirror::entries`]).
    pub mirror_problems: Vec<String>,
}

/// The plan for `published`: every published address a node's runtime cannot pull from as it is, mapped to the
/// endpoint the node reaches, if [`trust::admit`] lets `allowed` and the registry's own addresses redirect it (the
/// others are returned, refused). A plain-HTTP registry's address on the node's own loopback at its hostPort or
/// nodePort needs nothing (containerd dials loopback over HTTP itself), and a registry with no endpoint a node
/// reaches gets no entry. A registry that serves TLS gets entries only with its CA bundle (`ca`), every address
/// to the same `https://` endpoint: a plain-HTTP endpoint would be wrong for it, and without its CA no node trusts
/// its certificate.
pub fn plan(
    published: Option<&Published>,
    ca: Option<&str>,
    allowed: &[AddressPattern],
) -> (NodePlan, Vec<(String, Refusal)>) {
    let Some(published) = published else {
        return Default::default();
    };
    let (scheme, ca) = match (published.ports.tls, ca) {
        (false, _) => ("http", None),
        (true, Some(ca)) => ("https", Some(ca.to_string())),
        (true, None) => return Default::default(),
    };
    let Some(authority) = authority(published) else {
        return Default::default();
    };
    let endpoint = format!("{scheme}://{authority}");
    let document = &published.document;
    let mut hosts = Vec::new();
    let mut refused = Vec::new();
    let addresses = Field::ALL.into_iter().filter(|field| field.is_address()).filter_map(|field| document.get(field));
    for address in addresses {
        if ca.is_none() && served_on_node_loopback(address, published.ports.node) {
            continue;
        }
        match trust::admit(address, &published.own_addresses, allowed) {
            Ok(()) => hosts.push(HostEntry {
                address: address.to_string(),
                endpoint: endpoint.clone(),
                ca: ca.clone(),
                server: None,
            }),
            Err(refusal) => refused.push((address.to_string(), refusal)),
        }
    }
    hosts.sort();
    hosts.dedup();
    refused.sort_by(|a, b| a.0.cmp(&b.0));
    refused.dedup();
    (NodePlan::of(hosts), refused)
}

/// The node concern's whole decision: the plan for `published` with the CA bundle `observed` holds and the
/// addresses the admin allowed, and the admin's mirrors as far as their Services are usable; why the bundle it
/// names cannot be used, which addresses get no file, and which mirrors get none. A published address that is also
/// a mirror's upstream is the mirror's: its file must fall back to the upstream.
pub fn decide(published: Option<&Published>, observed: &Observed, rules: &Rules) -> Decision {
    let ca = published.map_or(Ok(None), |published| ca_bundle(published, observed));
    let (registry, mut refused) = plan(published, ca.as_ref().ok().and_then(Option::as_deref), &rules.allowed);
    let (mirrors, mirror_problems) = mirror::entries(&rules.mirrors, &observed.mirror_services);
    let mirrored = |address: &str| rules.mirrors.iter().any(|m| m.upstream == address);
    let (taken, mut hosts): (Vec<HostEntry>, Vec<HostEntry>) =
        registry.hosts.into_iter().partition(|entry| mirrored(&entry.address));
    refused.extend(taken.into_iter().map(|entry| (entry.address, Refusal::Mirrored)));
    refused.sort_by(|a, b| a.0.cmp(&b.0));
    hosts.extend(mirrors);
    hosts.sort();
    Decision { plan: NodePlan::of(hosts), ca_problem: ca.err(), refused, mirror_problems }
}

/// What a refused address's Event says: the address, why, and what would let it through.
pub fn refusal_message(refused: &[(String, Refusal)]) -> Option<String> {
    let said: Vec<String> = refused
        .iter()
        .map(|(address, refusal)| match refusal {
            Refusal::NotAllowed => format!(
                "{address} does not name this Service alone (its ClusterIP, cluster DNS names, nodePort or \
                 hostPort) and matches no address a cluster admin allowed (chart value nodeAgent.allowedAddresses)"
            ),
            Refusal::Invalid(why) => format!("{address:?} is no address a node file may be written for: {why}"),
            Refusal::Mirrored => format!(
                "{address} is a public registry the cluster admin mirrors (nodeAgent.mirrors): its node file sends \
                 pulls to that mirror, not to this registry"
            ),
        })
        .collect();
    (!said.is_empty()).then(|| format!("published, but no node is configured to pull it: {}", said.join("; ")))
}

/// Where (`host:port`) a node reaches the registry without cluster DNS: an ExternalName's target, else the
/// Service's ClusterIP (kube-proxy or its replacement serves it to the node too), else the node's own loopback at
/// its nodePort.
fn authority(published: &Published) -> Option<String> {
    let spec = published.service.spec.as_ref()?;
    let port = published.ports.service;
    let authority = |address: &str, port: Option<i32>| Host::normalise(address).ok().map(|host| host.with_port(port));
    if spec.type_.as_deref() == Some("ExternalName") {
        authority(spec.external_name.as_deref()?, port)
    } else if let Some(ip) = spec.cluster_ip.as_deref().filter(|ip| ip.parse::<IpAddr>().is_ok()) {
        authority(ip, Some(port?))
    } else {
        authority("127.0.0.1", Some(published.ports.node?))
    }
}

/// Where a registry's CA bundle is: a ConfigMap or a Secret of its Service's namespace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CaSource {
    ConfigMap(WatchKey),
    Secret(WatchKey),
}

/// Where the CA bundle `published` names is (its [`CA_BUNDLE`] annotation), `None` when it names none; `Err` says
/// why the annotation cannot be used.
pub fn ca_source(published: &Published) -> Option<Result<CaSource, String>> {
    let value = published.service.annotations().get(CA_BUNDLE)?;
    let namespace = &published.registry.namespace;
    let key = |name: &str| WatchKey::in_namespace(namespace).named(name);
    Some(match value.trim().split_once('/') {
        Some(("configmap", name)) if is_object_name(name) => Ok(CaSource::ConfigMap(key(name))),
        Some(("secret", name)) if is_object_name(name) => Ok(CaSource::Secret(key(name))),
        _ => Err(format!(
            "annotation {CA_BUNDLE}={value:?} must be configmap/<name> or secret/<name>: an object in namespace \
             {namespace} whose {CA_KEY} holds the registry's CA bundle"
        )),
    })
}

/// The watches the plan of `published` needs: the object holding its CA bundle, when it serves TLS and names one,
/// and the Service of each mirror that is one.
pub fn interest(published: Option<&Published>, rules: &Rules) -> Interest {
    let mut interest = Interest::default();
    interest.mirror_services.extend(rules.mirrors.iter().filter_map(Mirror::service_key));
    match published.filter(|p| p.ports.tls).and_then(ca_source) {
        Some(Ok(CaSource::ConfigMap(key))) => {
            interest.ca_configmaps.insert(key);
        }
        Some(Ok(CaSource::Secret(key))) => {
            interest.ca_secrets.insert(key);
        }
        Some(Err(_)) | None => {}
    }
    interest
}

/// The CA bundle of `published` as `observed` holds it: `Ok(None)` when it needs none (plain HTTP, or no
/// annotation), `Err` with what its owner must fix when it names one that cannot be used.
pub fn ca_bundle(published: &Published, observed: &Observed) -> Result<Option<String>, String> {
    if !published.ports.tls {
        return Ok(None);
    }
    let source = match ca_source(published) {
        None => return Ok(None),
        Some(source) => source?,
    };
    let (found, key, kind) = match &source {
        CaSource::ConfigMap(key) => (observed.ca_configmaps.get(key), key, "configmap"),
        CaSource::Secret(key) => (observed.ca_secrets.get(key), key, "secret"),
    };
    let name = format!("{kind}/{}", key.name.as_deref().unwrap_or_default());
    let namespace = key.namespace.as_deref().unwrap_or_default();
    let bundle = match found {
        // A watch that has not reported yet: the snapshot was settled, so this is not seen.
        None => return Err(format!("{name} in namespace {namespace} has not been read yet")),
        Some(Err(refused)) => {
            return Err(format!(
                "{name} in namespace {namespace} cannot be read ({refused}): the chart lets the controller read \
                 only the names in nodeAgent.caBundles"
            ));
        }
        Some(Ok(objects)) => objects.first().map(|kept| kept.0.clone()),
    };
    match bundle {
        None => Err(format!("{name} does not exist in namespace {namespace}")),
        Some(None) => Err(format!("{name} in namespace {namespace} has no {CA_KEY}")),
        Some(Some(pem)) if pem.contains("-----BEGIN CERTIFICATE-----") => Ok(Some(pem)),
        Some(Some(_)) => Err(format!("{name} in namespace {namespace}: its {CA_KEY} holds no PEM certificate")),
    }
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
        // `[::1]` alone splits inside the brackets, and its "port" does not parse: no port.
        Some((host, port)) => Ok((host, Some(port.parse()?))),
        _ => Ok((address, None)),
    }
}

/// Why the node concern tells something (an agent about its node, the controller about a registry's CA bundle),
/// as the Event's reason.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    /// Which planned addresses this node's containerd pulls through the agent's files (or that none needs one).
    HostsConfigured,
    /// A planned address whose directory holds a file the agent did not write: left alone.
    ForeignHostsFile,
    /// A planned address whose file could not be written or removed.
    HostsFileFailed,
    /// A registry that serves TLS names a CA bundle the controller cannot use: no node is configured for it.
    CaBundleUnusable,
    /// This node's containerd reads another hosts directory than the one the agent writes into.
    ConfigPathMismatch,
    /// A published address no node file is written for: not the registry's own, and not allowed by the admin.
    AddressNotAllowed,
    /// The node plan is of a newer format than the agent knows: not applied.
    PlanTooNew,
    /// A mirror the cluster admin set whose Service cannot be used: no node file for its upstream.
    MirrorUnusable,
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::HostsConfigured => "HostsConfigured",
            Reason::ForeignHostsFile => "ForeignHostsFile",
            Reason::HostsFileFailed => "HostsFileFailed",
            Reason::CaBundleUnusable => "CaBundleUnusable",
            Reason::ConfigPathMismatch => "ConfigPathMismatch",
            Reason::AddressNotAllowed => "AddressNotAllowed",
            Reason::PlanTooNew => "PlanTooNew",
            Reason::MirrorUnusable => "MirrorUnusable",
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

/// What the agent found of its node's containerd: the check, and what it says in words (see [`runtime::describe`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuntimeFinding {
    pub check: runtime::RuntimeCheck,
    pub said: Option<String>,
}

/// The state of the node after a pass, in words: the addresses configured, then each one left alone or failed.
/// None is configured while containerd reads another directory, whatever the agent wrote.
pub fn notices(
    plan: &NodePlan,
    report: &files::Report,
    runtime: &RuntimeFinding,
    regarding: &ObjectReference,
) -> Vec<Notice> {
    let notice = |reason, message| Notice { regarding: regarding.clone(), reason, message };
    let unread = runtime.check.unread();
    let troubled =
        |address: &str| report.foreign.iter().any(|a| a == address) || report.failed.iter().any(|(a, _)| a == address);
    let configured: Vec<String> = plan
        .hosts
        .iter()
        .filter(|entry| !troubled(&entry.address))
        .map(|entry| format!("{} via {}", entry.address, entry.endpoint))
        .collect();
    let summary = if plan.hosts.is_empty() {
        "no published address needs a hosts.toml on this node".to_string()
    } else if unread {
        "no published address is configured on this node: its containerd does not read this agent's files".into()
    } else if configured.is_empty() {
        "no published address is configured on this node".to_string()
    } else {
        format!("this node's containerd pulls {}", configured.join(", "))
    };
    // One Event per reason: Events are kept per object and reason. A mismatch is its own Warning; any other word
    // on containerd's config (a caveat, or why it could not be read) goes with the summary.
    let mut said = match (&runtime.said, unread) {
        (Some(why), true) => {
            vec![notice(Reason::HostsConfigured, summary), notice(Reason::ConfigPathMismatch, why.clone())]
        }
        (Some(why), false) => vec![notice(Reason::HostsConfigured, format!("{summary} ({why})"))],
        (None, _) => vec![notice(Reason::HostsConfigured, summary)],
    };
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
    /// The plan of `hosts` (sorted), in the oldest format that holds them.
    pub fn of(hosts: Vec<HostEntry>) -> Self {
        let format = if hosts.iter().any(|entry| entry.server.is_some()) { 2 } else { 1 };
        Self { format, hosts }
    }

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
