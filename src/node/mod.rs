//! The node concern's pure decision: which published addresses a node's container runtime could not pull from as
//! they are, and where it should go instead. Nodes resolve names with their own resolver (cluster DNS is not in
//! it), and containerd speaks HTTPS to every name but the loopback one unless a `hosts.toml` says otherwise, so
//! `registry.<ns>.svc.cluster.local:5000` fails on a node until its `hosts.toml` points at an endpoint the node
//! reaches (the Service's ClusterIP) over plain HTTP. A registry that serves TLS is reached there over HTTPS, and
//! only with the CA bundle its Service names ([`CA_BUNDLE`]). The controller publishes the [`NodePlan`] ([`api`]);
//! each node's agent writes it (`crate::agent`).

pub mod api;
pub mod coverage;
pub mod mirror;
pub mod relay;
pub mod trust;
mod watched;

use std::fmt;
use std::net::IpAddr;

use k8s_openapi::api::core::v1::ObjectReference;

use crate::hosting::Field;
use crate::hosting::address::Host;
use crate::keys::service::CA_BUNDLE;
use crate::publish::Published;
use crate::watching::{WatchKey, is_object_name};
pub use api::{Endpoint, HostEntry, NodePlan, PLAN_FORMAT, PLAN_KEY, RelayEntry};
pub use mirror::{Mirror, MirrorProblem};
pub use trust::{AddressPattern, Refusal};
pub(crate) use watched::node_watch_sets;
pub use watched::{CaBundle, Interest, Observed};

/// Where a CA bundle is in its ConfigMap or Secret: the key Kubernetes' own `kube-root-ca.crt`, cert-manager's
/// Secrets and trust-manager's bundles use.
pub const CA_KEY: &str = "ca.crt";
/// The largest CA bundle the plan takes for a registry: every address of it carries a copy, and the plan is one
/// ConfigMap (at most 1 MiB) with the mirrors' entries beside it. A larger one is refused for its registry alone.
pub const CA_LIMIT: usize = 64 * 1024;

/// The ConfigMap node agents read their plan from: in the controller's own namespace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodePlanTarget {
    pub namespace: String,
    pub name: String,
    /// What the cluster admin lets node files redirect (see [`crate::node::trust`]) and the mirrors it sets (see
    /// [`crate::node::mirror`]).
    pub rules: Rules,
    /// The stamp of this controller's configuration (`--node-plan-stamp`), written into every plan.
    pub stamp: Option<String>,
}

impl NodePlanTarget {
    /// The plan's ConfigMap, as the Events about it name it.
    pub fn reference(&self) -> ObjectReference {
        ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("ConfigMap".into()),
            namespace: Some(self.namespace.clone()),
            name: Some(self.name.clone()),
            ..ObjectReference::default()
        }
    }
}

impl std::fmt::Display for NodePlanTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ConfigMap {}/{}", self.namespace, self.name)
    }
}

/// What a cluster admin decides of node files: the addresses besides each registry's own that may be redirected,
/// and the mirrors of public registries.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Rules {
    pub allowed_addresses: Vec<AddressPattern>,
    pub mirrors: Vec<Mirror>,
    /// The registries every node's agent relays on its loopback, each at the port the admin chose.
    pub relays: Vec<crate::settings::RelayRule>,
}

/// The node concern's whole decision about the published registry.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Decision {
    pub plan: NodePlan,
    /// Why the CA bundle the registry names cannot be used, when it cannot (the plan then has no entry for it).
    pub ca_problem: Option<CaProblem>,
    /// Published addresses that get no node file, each with why (see [`trust`]).
    pub refused: Vec<(String, Refusal)>,
    /// Why a mirror gets no node file (see [`mirror::entries`]).
    pub mirror_problems: Vec<MirrorProblem>,
    /// Why the published registry, which the cluster admin relays, gets no relay (see [`relay::problem`]).
    pub relay_problem: Option<relay::RelayProblem>,
}

impl Decision {
    /// What the controller tells of this decision, each worded here once: why the registry's CA bundle cannot be
    /// used and which of its addresses get no node file (on its Service, `registry`), and which mirrors get none
    /// (on the plan's ConfigMap, `plan`). doctor prints the same messages.
    pub fn notices(&self, registry: Option<&ObjectReference>, plan: &ObjectReference) -> Vec<Notice> {
        let ca = self.ca_problem.as_ref().map(|problem| {
            (
                Reason::CaBundleUnusable,
                format!("its CA bundle cannot be used, so no node is configured to pull it: {problem}"),
            )
        });
        let refused = (!self.refused.is_empty()).then(|| {
            let said: Vec<String> = self
                .refused
                .iter()
                .map(|(address, refusal)| {
                    format!("{address} is published but no node is configured to pull it: {address} {refusal}")
                })
                .collect();
            (Reason::AddressNotAllowed, said.join("; "))
        });
        let mirrors = (!self.mirror_problems.is_empty()).then(|| {
            let said: Vec<String> = self.mirror_problems.iter().map(ToString::to_string).collect();
            (Reason::MirrorUnusable, format!("each node pulls these upstreams directly: {}", said.join("; ")))
        });
        let relay = self.relay_problem.as_ref().map(|problem| (Reason::RelayUnusable, problem.to_string()));
        let on_registry = [ca, refused, relay]
            .into_iter()
            .flatten()
            .filter_map(|(reason, message)| Some(Notice { regarding: registry?.clone(), reason, message }));
        let on_plan = mirrors.map(|(reason, message)| Notice { regarding: plan.clone(), reason, message });
        on_registry.chain(on_plan).collect()
    }
}

/// The plan for `published`: every published address a node's runtime cannot pull from as it is, mapped to the
/// endpoint the node reaches, if [`trust::admit`] lets `allowed` and the registry's own addresses redirect it (the
/// others are returned, refused). A plain-HTTP registry's address on the node's own loopback at its nodePort is
/// mapped too, though containerd dials loopback over HTTP itself: kube-proxy's nftables mode serves no NodePort on
/// loopback, and no mode serves one on `[::1]`, while every mode serves the ClusterIP to the node. Only where the
/// node reaches the registry at that loopback alone (no ClusterIP) does it get no entry, and a registry with no
/// endpoint a node reaches gets none at all. A registry that serves TLS gets entries only with its CA bundle (`ca`), every address
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
    let relays: Vec<RelayEntry> = relay::entry(published).into_iter().collect();
    let (tls, ca) = match (published.ports.tls, ca) {
        (false, _) => (false, None),
        (true, Some(ca)) => (true, Some(ca.to_string())),
        (true, None) => return (NodePlan::with_relays(Vec::new(), relays), Vec::new()),
    };
    let Some(endpoint) = authority(published).and_then(|authority| Endpoint::new(tls, &authority).ok()) else {
        return (NodePlan::with_relays(Vec::new(), relays), Vec::new());
    };
    let document = &published.document;
    let mut hosts = Vec::new();
    let mut refused = Vec::new();
    let addresses = Field::ALL.into_iter().filter(|field| field.is_address()).filter_map(|field| document.get(field));
    for address in addresses {
        let node_port = published.ports.node;
        // The relay serves its own addresses on every node: no file stands in for it.
        if relay::serves(address, published.ports.relay) {
            continue;
        }
        if ca.is_none()
            && served_on_node_loopback(address, node_port)
            && served_on_node_loopback(endpoint.authority(), node_port)
        {
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
    (NodePlan::with_relays(hosts, relays), refused)
}

/// Whether the plan for `published` maps `address` to an endpoint a node reaches, so the node agent's file stands
/// in for whatever serves it, the CA bundle aside (the node concern tells when a TLS registry's cannot be used)
/// and the admin's allowed addresses too (a published address that is not the registry's own is told there).
pub fn redirects(published: &Published, address: &str) -> bool {
    let ca = published.ports.tls.then_some("");
    plan(Some(published), ca, &[]).0.hosts.iter().any(|entry| entry.address == address)
}

/// The node concern's whole decision: the plan for `published` with the CA bundle `observed` holds and the
/// addresses the admin allowed, and the admin's mirrors as far as their Services are usable; why the bundle it
/// names cannot be used, which addresses get no file, and which mirrors get none. A published address that is also
/// a mirror's upstream is the mirror's: its file must fall back to the upstream.
pub fn decide(published: Option<&Published>, observed: &Observed, rules: &Rules) -> Decision {
    let ca = published.map_or(Ok(None), |published| ca_bundle(published, observed));
    let (registry, mut refused) =
        plan(published, ca.as_ref().ok().and_then(Option::as_deref), &rules.allowed_addresses);
    let (mirrors, mirror_problems) = mirror::entries(&rules.mirrors, &observed.mirror_services);
    let mirrored = |address: &str| rules.mirrors.iter().any(|m| m.upstream == address);
    let (taken, mut hosts): (Vec<HostEntry>, Vec<HostEntry>) =
        registry.hosts.into_iter().partition(|entry| mirrored(&entry.address));
    refused.extend(taken.into_iter().map(|entry| (entry.address, Refusal::Mirrored)));
    refused.sort_by(|a, b| a.0.cmp(&b.0));
    hosts.extend(mirrors);
    hosts.sort();
    let relay_problem = published.and_then(|published| relay::problem(published, &rules.relays));
    Decision {
        plan: NodePlan::with_relays(hosts, registry.relays),
        ca_problem: ca.err(),
        refused,
        mirror_problems,
        relay_problem,
    }
}

/// Where (`host:port`) a node reaches the registry without cluster DNS: an ExternalName's target, else the
/// Service's ClusterIP (kube-proxy or its replacement serves it to the node too), else the node's own loopback at
/// its nodePort.
fn authority(published: &Published) -> Option<String> {
    let wiring = &published.wiring;
    let port = published.ports.service;
    let authority = |address: &str, port: Option<i32>| Host::normalise(address).ok().map(|host| host.with_port(port));
    if let Some(name) = &wiring.external_name {
        authority(name, port)
    } else if let Some(ip) = wiring.cluster_ip {
        authority(&ip.to_string(), Some(port?))
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

impl CaSource {
    fn key(&self) -> &WatchKey {
        match self {
            CaSource::ConfigMap(key) | CaSource::Secret(key) => key,
        }
    }

    fn namespace(&self) -> &str {
        self.key().namespace.as_deref().unwrap_or_default()
    }
}

/// `configmap/<name>` or `secret/<name>`, as the annotation names it.
impl fmt::Display for CaSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self {
            CaSource::ConfigMap(_) => "configmap",
            CaSource::Secret(_) => "secret",
        };
        write!(f, "{kind}/{}", self.key().name.as_deref().unwrap_or_default())
    }
}

/// Why the CA bundle a TLS registry names cannot be used, so that no node is configured for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CaProblem {
    /// The annotation names no `configmap/<name>` or `secret/<name>`.
    Annotation {
        value: String,
        namespace: String,
    },
    /// Its watch has not reported yet (the snapshot was settled, so it is not seen).
    NotReadYet(CaSource),
    /// The controller may not read it: the chart lets it read only the names in `nodeAgent.caBundles`.
    Unreadable(CaSource, String),
    Missing(CaSource),
    NoKey(CaSource),
    NotPem(CaSource),
    /// Larger than [`CA_LIMIT`], in bytes.
    TooLarge(CaSource, usize),
}

impl fmt::Display for CaProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CaProblem::Annotation { value, namespace } => write!(
                f,
                "annotation {CA_BUNDLE}={value:?} must be configmap/<name> or secret/<name>: an object in namespace \
                 {namespace} whose {CA_KEY} holds the registry's CA bundle"
            ),
            CaProblem::NotReadYet(source) => {
                write!(f, "{source} in namespace {} has not been read yet", source.namespace())
            }
            CaProblem::Unreadable(source, refused) => write!(
                f,
                "{source} in namespace {} cannot be read ({refused}): the chart lets the controller read only the \
                 names in nodeAgent.caBundles",
                source.namespace()
            ),
            CaProblem::Missing(source) => write!(f, "{source} does not exist in namespace {}", source.namespace()),
            CaProblem::NoKey(source) => write!(f, "{source} in namespace {} has no {CA_KEY}", source.namespace()),
            CaProblem::NotPem(source) => {
                write!(f, "{source} in namespace {}: its {CA_KEY} holds no PEM certificate", source.namespace())
            }
            CaProblem::TooLarge(source, bytes) => write!(
                f,
                "{source} in namespace {}: its {CA_KEY} is {bytes} bytes, more than the {CA_LIMIT} the node plan takes \
                 for one registry (every node's copy of it rides in one ConfigMap); keep only the CAs that sign the \
                 registry's certificate",
                source.namespace()
            ),
        }
    }
}

/// Where the CA bundle `published` names is (its [`CA_BUNDLE`] annotation), `None` when it names none; `Err` says
/// why the annotation cannot be used.
pub fn ca_source(published: &Published) -> Option<Result<CaSource, CaProblem>> {
    let value = published.wiring.ca_bundle.as_ref()?;
    let namespace = &published.registry.namespace;
    let key = |name: &str| WatchKey::in_namespace(namespace).named(name);
    Some(match value.trim().split_once('/') {
        Some(("configmap", name)) if is_object_name(name) => Ok(CaSource::ConfigMap(key(name))),
        Some(("secret", name)) if is_object_name(name) => Ok(CaSource::Secret(key(name))),
        _ => Err(CaProblem::Annotation { value: value.clone(), namespace: namespace.clone() }),
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
pub fn ca_bundle(published: &Published, observed: &Observed) -> Result<Option<String>, CaProblem> {
    if !published.ports.tls {
        return Ok(None);
    }
    let source = match ca_source(published) {
        None => return Ok(None),
        Some(source) => source?,
    };
    let found = match &source {
        CaSource::ConfigMap(key) => observed.ca_configmaps.get(key),
        CaSource::Secret(key) => observed.ca_secrets.get(key),
    };
    let bundle = match found {
        None => return Err(CaProblem::NotReadYet(source)),
        Some(Err(refused)) => return Err(CaProblem::Unreadable(source, refused.clone())),
        Some(Ok(objects)) => objects.first().map(|kept| kept.0.clone()),
    };
    match bundle {
        None => Err(CaProblem::Missing(source)),
        Some(None) => Err(CaProblem::NoKey(source)),
        Some(Some(pem)) if pem.len() > CA_LIMIT => Err(CaProblem::TooLarge(source, pem.len())),
        Some(Some(pem)) if pem.contains("-----BEGIN CERTIFICATE-----") => Ok(Some(pem)),
        Some(Some(_)) => Err(CaProblem::NotPem(source)),
    }
}

/// Whether `address` is the node's loopback at the port the node itself serves the registry on.
pub fn served_on_node_loopback(address: &str, node_port: Option<i32>) -> bool {
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

/// Why the controller's node concerns (the node plan, kube-proxy's: `crate::kube_proxy`) tell something about a
/// registry, as the Event's reason (what an agent tells of its node is its `Configured` condition:
/// [`api::state::ConfiguredReason`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Reason {
    /// A registry that serves TLS names a CA bundle the controller cannot use: no node is configured for it.
    CaBundleUnusable,
    /// A published address no node file is written for: not the registry's own, and not allowed by the admin.
    AddressNotAllowed,
    /// A mirror the cluster admin set whose Service cannot be used: no node file for its upstream.
    MirrorUnusable,
    /// A published address on a node's loopback at the registry's nodePort that kube-proxy's mode does not serve.
    LoopbackNodePortUnserved,
    /// The published registry is one the cluster admin relays, but it has nothing the agents can relay to.
    RelayUnusable,
    /// A published loopback NodePort kube-proxy serves only in its default mode, which becomes nftables in 1.40.
    LoopbackNodePortAtRisk,
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::CaBundleUnusable => "CaBundleUnusable",
            Reason::AddressNotAllowed => "AddressNotAllowed",
            Reason::MirrorUnusable => "MirrorUnusable",
            Reason::LoopbackNodePortUnserved => "LoopbackNodePortUnserved",
            Reason::RelayUnusable => "RelayUnusable",
            Reason::LoopbackNodePortAtRisk => "LoopbackNodePortAtRisk",
        }
    }
}

/// What the controller's node concerns tell about a registry or the plan.
#[derive(Clone, Debug, PartialEq)]
pub struct Notice {
    pub regarding: ObjectReference,
    pub reason: Reason,
    pub message: String,
}

// Each is a registry, mirror or address some node cannot pull.
crate::events::impl_tell!(Notice, |_: &Notice| true);

#[cfg(test)]
pub(crate) mod fixtures;
#[cfg(test)]
mod tests;
