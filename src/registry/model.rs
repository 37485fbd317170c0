//! What the survey finds: a registry Service and what it would publish, the problems that keep a value out, and
//! the ones ignored for their namespace.

use std::collections::BTreeMap;
use std::net::IpAddr;

use k8s_openapi::api::core::v1::{ObjectReference, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::core::Resource;

use crate::hosting::LocalRegistryHostingV1;

/// Which Service it is, and when it was made: all an ignored registry is told by.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    pub id: ServiceId,
    pub uid: Option<String>,
    pub created: Option<Time>,
}

impl Identity {
    pub fn of(meta: &ObjectMeta) -> Self {
        Self { id: meta_id(meta), uid: meta.uid.clone(), created: meta.creation_timestamp.clone() }
    }

    /// Its reference for Events: without the version that happened to be current.
    pub fn reference(&self) -> ObjectReference {
        ObjectReference {
            api_version: Some(Service::api_version(&()).into()),
            kind: Some(Service::kind(&()).into()),
            namespace: Some(self.id.namespace.clone()),
            name: Some(self.id.name.clone()),
            uid: self.uid.clone(),
            ..ObjectReference::default()
        }
    }
}

/// A labelled workload, reduced to what matching needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Workload {
    pub kind: &'static str,
    pub namespace: String,
    pub name: String,
    pub pod_labels: BTreeMap<String, String>,
}

impl Workload {
    pub fn of(kind: &'static str, meta: ObjectMeta, pod_labels: Option<BTreeMap<String, String>>) -> Self {
        Self {
            kind,
            namespace: meta.namespace.unwrap_or_default(),
            name: meta.name.unwrap_or_default(),
            pod_labels: pod_labels.unwrap_or_default(),
        }
    }

    /// The workload, as an Event about it names it.
    pub fn reference(&self) -> ObjectReference {
        ObjectReference {
            api_version: Some("apps/v1".into()),
            kind: Some(self.kind.into()),
            namespace: Some(self.namespace.clone()),
            name: Some(self.name.clone()),
            ..ObjectReference::default()
        }
    }
}

/// namespace/name of a Service.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ServiceId {
    pub namespace: String,
    pub name: String,
}

impl std::fmt::Display for ServiceId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// How a Service was found to be a registry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Origin {
    Labelled,
    Workload { kind: &'static str, name: String },
    Minikube,
    MicroK8s,
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Origin::Labelled => f.write_str("labelled Service"),
            Origin::Workload { kind, name } => write!(f, "Service selecting labelled {kind} {name}"),
            Origin::Minikube => f.write_str("minikube registry addon"),
            Origin::MicroK8s => f.write_str("MicroK8s registry addon"),
        }
    }
}

/// What is wrong with a registry's configuration: a bounded label for Events and metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Fault {
    /// An annotation's value breaks its rule.
    InvalidAnnotation,
    /// A derived value breaks a reader's rule.
    InvalidValue,
    /// Several ports and none chosen.
    AmbiguousPort,
    NoPort,
}

impl Fault {
    pub fn as_str(self) -> &'static str {
        match self {
            Fault::InvalidAnnotation => "InvalidAnnotation",
            Fault::InvalidValue => "InvalidValue",
            Fault::AmbiguousPort => "AmbiguousPort",
            Fault::NoPort => "NoPort",
        }
    }
}

/// A problem with one registry's configuration, reported as a Warning Event on its Service.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    pub fault: Fault,
    pub message: String,
}

/// The registry's port on its Service, and the port every node serves it at on its own addresses (a hostPort,
/// else a nodePort); `None` where there is none.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Ports {
    pub service: Option<i32>,
    /// The port every node serves the registry at: a hostPort when it has one, else the Service's nodePort.
    pub node: Option<i32>,
    /// `node` is a hostPort, which the CNI's portmap serves on a node's loopback in every kube-proxy mode; a
    /// nodePort there is kube-proxy's to serve.
    pub host_port: bool,
    /// The Service port says it serves TLS (see `values::serves_tls`); otherwise the registry is taken to speak
    /// plain HTTP, as local registries do.
    pub tls: bool,
    /// The port every node's agent relays the registry at on the node's loopback, when the cluster admin gave it
    /// one (`Settings::relays`) and it has a ClusterIP to relay to.
    pub relay: Option<u16>,
}

/// A registry Service in an allowed namespace, and what it would publish.
#[derive(Clone, Debug)]
pub struct Registry {
    pub id: ServiceId,
    pub origin: Origin,
    pub priority: i32,
    pub created: Option<Time>,
    /// At least one ready endpoint, or nothing to be ready (ExternalName, selector-less without slices).
    pub ready: bool,
    pub document: Result<LocalRegistryHostingV1, Problem>,
    pub ports: Ports,
    /// The addresses that name this Service alone, whatever its annotations say (see `values::own_addresses`).
    pub own_addresses: Vec<String>,
    pub reference: ObjectReference,
    /// What the concerns that follow the published registry read of its Service.
    pub wiring: Wiring,
}

/// What the concerns that follow the published registry (pull credentials, the node plan) read of its Service,
/// parsed once when the Service is surveyed, so that none of them reads the Service again.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Wiring {
    /// The name an ExternalName Service points at: where nodes reach the registry.
    pub external_name: Option<String>,
    /// Its ClusterIP, when it has one (not headless, not ExternalName).
    pub cluster_ip: Option<IpAddr>,
    /// Its CA-bundle annotation as written: the node concern says what is wrong with it.
    pub ca_bundle: Option<String>,
    /// The Secret (in its namespace) its pull-secret annotation names; an empty annotation names none.
    pub pull_secret: Option<String>,
}

impl Registry {
    /// Higher priority first, then the oldest, then by namespace/name: a total, stable order.
    pub fn rank_key(&self) -> (std::cmp::Reverse<i32>, Option<&Time>, &ServiceId) {
        (std::cmp::Reverse(self.priority), self.created.as_ref(), &self.id)
    }
}

/// A registry Service in a namespace that may not name the cluster's registry: it takes no part, whatever its
/// priority or annotations, and is only told why.
#[derive(Clone, Debug, PartialEq)]
pub struct Ignored {
    pub id: ServiceId,
    pub origin: Origin,
    pub reference: ObjectReference,
}

/// Every registry of a snapshot: those that count (in a namespace allowed to name the cluster's registry) best
/// first, and those ignored elsewhere.
#[derive(Clone, Debug, Default)]
pub struct Registries {
    pub counted: Vec<Registry>,
    pub ignored: Vec<Ignored>,
}

/// A Service's pod selector: label keys to the values they must equal.
pub type PodSelector = BTreeMap<String, String>;

pub fn service_id(service: &Service) -> ServiceId {
    meta_id(&service.metadata)
}

fn meta_id(meta: &ObjectMeta) -> ServiceId {
    ServiceId { namespace: meta.namespace.clone().unwrap_or_default(), name: meta.name.clone().unwrap_or_default() }
}
