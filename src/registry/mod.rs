//! Which Services are registries, and what each would publish. Pure: it reads a [`Cluster`] snapshot of the
//! watched objects and never talks to the API server.

mod values;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, ObjectReference, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::ResourceExt;
use kube::core::Resource;

use crate::hosting::LocalRegistryHostingV1;
use crate::settings::Settings;

pub use values::annotations;

/// minikube's registry addon: Service kube-system/registry behind the registry-proxy DaemonSet's hostPort.
pub const MINIKUBE: (&str, &str) = ("kube-system", "registry");
pub const MINIKUBE_PROXY: &str = "registry-proxy";
/// MicroK8s's registry addon: NodePort Service container-registry/registry.
pub const MICROK8S: (&str, &str) = ("container-registry", "registry");

/// Everything the watches hold right now.
#[derive(Clone, Debug, Default)]
pub struct Cluster {
    /// Services matching the registry selector, whole. Watching every namespace, only those in trusted namespaces
    /// (see [`Interest::labelled_service_namespaces`]).
    pub labelled_services: Vec<Arc<Service>>,
    /// Watching every namespace: which Services match the registry selector, everywhere. A tenant's registries are
    /// only told they are ignored, which needs no more.
    pub labelled_identities: Vec<Arc<Identity>>,
    /// Deployments, StatefulSets and DaemonSets matching the registry selector.
    pub workloads: Vec<Workload>,
    /// Every Service in a namespace that holds a labelled workload.
    pub workload_namespace_services: Vec<Arc<Service>>,
    /// The built-in addons' Services, when recognition is on.
    pub builtin_services: Vec<Arc<Service>>,
    /// minikube's registry-proxy DaemonSet.
    pub proxies: Vec<Arc<DaemonSet>>,
    /// Pods selected by registry Services.
    pub pods: Vec<Arc<Pod>>,
    pub endpoint_slices: Vec<Arc<EndpointSlice>>,
    pub nodes: Vec<Arc<Node>>,
    /// Namespaces a cluster admin labelled as allowed to name the cluster's registry.
    pub allowed_namespaces: BTreeSet<String>,
}

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

/// Why a Service counts as a registry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    Labelled,
    Workload { kind: &'static str, name: String },
    Minikube,
    MicroK8s,
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Labelled => f.write_str("labelled Service"),
            Source::Workload { kind, name } => {
                write!(f, "Service selecting labelled {kind} {name}")
            }
            Source::Minikube => f.write_str("minikube registry addon"),
            Source::MicroK8s => f.write_str("MicroK8s registry addon"),
        }
    }
}

/// A problem with one registry's configuration, reported as a Warning Event on its Service.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// A bounded, PascalCase label for Events and metrics.
    pub reason: &'static str,
    pub message: String,
}

/// One registry Service and what it would publish.
#[derive(Clone, Debug)]
pub struct Registry {
    pub id: ServiceId,
    pub source: Source,
    pub priority: i32,
    pub created: Option<Time>,
    /// At least one ready endpoint, or nothing to be ready (ExternalName, selector-less without slices).
    pub ready: bool,
    pub document: Result<LocalRegistryHostingV1, Problem>,
    pub reference: ObjectReference,
    /// Its namespace may name the cluster's registry (see [`trusted`]); an untrusted one is never published, its
    /// priority and annotations count for nothing, and it is told why.
    pub trusted: bool,
    /// The source Secret (in its namespace) its `local-registry-publisher.io/pull-secret` annotation names.
    pub pull_secret: Option<String>,
}

impl Registry {
    /// Higher priority first, then the oldest, then by namespace/name: a total, stable order.
    pub fn rank_key(&self) -> (std::cmp::Reverse<i32>, Option<&Time>, &ServiceId) {
        (std::cmp::Reverse(self.priority), self.created.as_ref(), &self.id)
    }
}

/// A Service's pod selector: label keys to the values they must equal.
pub type PodSelector = BTreeMap<String, String>;

/// What the watches must hold for the next snapshot to be complete, for trusted registries only. The EndpointSlices
/// of labelled Services with a pod selector are not listed one by one: the EndpointSlice controller copies a
/// Service's labels onto its slices, so one watch per namespace on the registry selector holds all of them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Interest {
    /// Namespaces whose Services must all be watched (they hold labelled workloads).
    pub service_namespaces: BTreeSet<String>,
    /// (namespace, pod selector) of each registry Service with one.
    pub pod_selectors: BTreeSet<(String, PodSelector)>,
    /// Registry Services whose EndpointSlices decide readiness and do not carry the registry selector's labels.
    pub endpoint_services: BTreeSet<ServiceId>,
    /// Namespaces whose labelled registries' EndpointSlices are watched by the registry selector.
    pub labelled_slice_namespaces: BTreeSet<String>,
    /// Watching every namespace: trusted namespaces holding labelled Services, whose labelled Services are watched
    /// whole.
    pub labelled_service_namespaces: BTreeSet<String>,
    /// Nodes whose InternalIP a published value needs.
    pub nodes: BTreeSet<String>,
    /// (namespace, name) of the pull-credential source Secrets that trusted registries name, when pull Secrets are
    /// distributed.
    pub pull_sources: BTreeSet<(String, String)>,
}

/// Finds every registry Service in the snapshot and derives what it would publish.
pub fn registries(cluster: &Cluster, settings: &Settings) -> Vec<Registry> {
    survey(cluster, settings).registries(settings)
}

/// The registry Services of one snapshot, found once per reconcile pass and then asked both which watches they
/// need and what each would publish.
pub struct Candidates<'a> {
    cluster: &'a Cluster,
    /// Each Service, why it is a registry, and whether its namespace may name the cluster's registry.
    found: Vec<(&'a Service, Source, bool)>,
    /// Labelled Services in untrusted namespaces, seen by their identity only.
    ignored: Vec<&'a Identity>,
    /// Trusted namespaces that hold labelled Services, seen by their identities.
    labelled_namespaces: BTreeSet<String>,
}

pub fn survey<'a>(cluster: &'a Cluster, settings: &Settings) -> Candidates<'a> {
    let mut candidates =
        Candidates { cluster, found: Vec::new(), ignored: Vec::new(), labelled_namespaces: BTreeSet::new() };
    // A Service found several ways counts once, by its first source.
    let mut seen = BTreeSet::new();
    let mut add = |service: &'a Service, source: Source, found: &mut Vec<_>| {
        let id = service_id(service);
        let trusted = trusted(&id.namespace, &source, cluster, settings);
        if seen.insert(id) {
            found.push((service, source, trusted));
        }
    };
    for service in &cluster.labelled_services {
        add(service, Source::Labelled, &mut candidates.found);
    }
    for workload in &cluster.workloads {
        for service in cluster.workload_namespace_services.iter().filter(|s| selects(s, workload)) {
            add(service, Source::Workload { kind: workload.kind, name: workload.name.clone() }, &mut candidates.found);
        }
    }
    if settings.builtin_registries {
        for service in &cluster.builtin_services {
            let id = service_id(service);
            if (id.namespace.as_str(), id.name.as_str()) == MINIKUBE {
                add(service, Source::Minikube, &mut candidates.found);
            } else if (id.namespace.as_str(), id.name.as_str()) == MICROK8S {
                add(service, Source::MicroK8s, &mut candidates.found);
            }
        }
    }
    // Seen by identity only: a trusted namespace's labelled Services are watched whole (and found above once they
    // are); the others are told they are ignored, unless found whole another way.
    for identity in &cluster.labelled_identities {
        let namespace = &identity.id.namespace;
        if trusted(namespace, &Source::Labelled, cluster, settings) {
            candidates.labelled_namespaces.insert(namespace.clone());
        } else if !seen.contains(&identity.id) {
            candidates.ignored.push(identity);
        }
    }
    candidates
}

impl Candidates<'_> {
    /// Every registry with what it would publish, best first.
    pub fn registries(&self, settings: &Settings) -> Vec<Registry> {
        let cluster = self.cluster;
        let whole = self.found.iter().map(|(service, source, trusted)| {
            if *trusted {
                Registry { trusted: true, ..values::derive(service, source.clone(), cluster, settings) }
            } else {
                values::ignored(&Identity::of(&service.metadata), source.clone())
            }
        });
        let ignored = self.ignored.iter().map(|identity| values::ignored(identity, Source::Labelled));
        let mut registries: Vec<Registry> = whole.chain(ignored).collect();
        registries.sort_by(|a, b| a.rank_key().cmp(&b.rank_key()));
        registries
    }

    /// The watches these registries need.
    pub fn interest(&self, settings: &Settings) -> Interest {
        let cluster = self.cluster;
        let mut interest = Interest {
            service_namespaces: cluster.workloads.iter().map(|w| w.namespace.clone()).collect(),
            labelled_service_namespaces: self.labelled_namespaces.clone(),
            ..Interest::default()
        };
        for (service, source, trusted) in &self.found {
            // An untrusted registry is only told why it is ignored: nothing about it is watched, so a tenant's
            // thousand Services cost no more than their own objects.
            if !trusted {
                continue;
            }
            let id = service_id(service);
            if settings.pull_secrets.is_some()
                && let Some(name) = values::pull_secret(service)
            {
                interest.pull_sources.insert((id.namespace.clone(), name));
            }
            if values::needs_node_address(source, settings) {
                interest.nodes.extend(values::endpoint_nodes(cluster, &id));
            }
            match pod_selector(service) {
                Some(selector) => {
                    interest.pod_selectors.insert((id.namespace.clone(), selector.clone()));
                    if *source == Source::Labelled {
                        interest.labelled_slice_namespaces.insert(id.namespace.clone());
                    } else {
                        interest.endpoint_services.insert(id);
                    }
                }
                // Selector-less: EndpointSlices, if any, are whatever someone wrote, labels included.
                None => {
                    interest.endpoint_services.insert(id);
                }
            }
        }
        interest
    }
}

/// Whether a registry in `namespace` may name the cluster's registry. Anyone who can create a Service in a
/// namespace could otherwise redirect every push and pull in the cluster, so only these count:
/// - the built-in addons, in the fixed namespaces their installers own;
/// - namespaces the controller was installed to watch (`--watch-namespaces`) or trust (`--registry-namespaces`);
/// - namespaces a cluster admin labelled `local-registry-publisher.io/registries=allowed`.
pub fn trusted(namespace: &str, source: &Source, cluster: &Cluster, settings: &Settings) -> bool {
    matches!(source, Source::Minikube | Source::MicroK8s)
        || (!settings.all_namespaces() && settings.watches_namespace(namespace))
        || settings.registry_namespaces.iter().any(|n| n == namespace)
        || cluster.allowed_namespaces.contains(namespace)
}

/// Why an untrusted registry is ignored, and what a cluster admin does about it.
pub fn untrusted_message(namespace: &str) -> String {
    format!(
        "ignored: namespace {namespace} is not allowed to name the cluster's registry, so this Service's priority and \
         annotations count for nothing; a cluster admin allows it with `kubectl label namespace {namespace} {}={}` or \
         --registry-namespaces",
        crate::settings::ALLOWED_NAMESPACE_LABEL,
        crate::settings::ALLOWED_NAMESPACE_VALUE
    )
}

/// The watches the current registries need.
pub fn interest(cluster: &Cluster, settings: &Settings) -> Interest {
    survey(cluster, settings).interest(settings)
}

/// Whether the Service's selector picks the workload's pods.
fn selects(service: &Service, workload: &Workload) -> bool {
    let selector = service.spec.as_ref().and_then(|s| s.selector.as_ref());
    service.namespace().as_deref() == Some(workload.namespace.as_str())
        && selector.is_some_and(|sel| !sel.is_empty() && sel.iter().all(|(k, v)| workload.pod_labels.get(k) == Some(v)))
}

pub fn service_id(service: &Service) -> ServiceId {
    meta_id(&service.metadata)
}

fn meta_id(meta: &ObjectMeta) -> ServiceId {
    ServiceId { namespace: meta.namespace.clone().unwrap_or_default(), name: meta.name.clone().unwrap_or_default() }
}

/// The Service's pod selector, `None` for selector-less Services.
fn pod_selector(service: &Service) -> Option<&PodSelector> {
    service.spec.as_ref()?.selector.as_ref().filter(|s| !s.is_empty())
}

#[cfg(test)]
pub(crate) mod fixtures;

#[cfg(test)]
mod tests {
    use super::fixtures::*;
    use super::*;

    #[test]
    fn finds_labelled_services_workload_services_and_builtins_once_each() {
        let mut cluster = Cluster::default();
        let labelled = service("reg", "zot").build();
        cluster.labelled_services.push(labelled.clone());
        cluster.workload_namespace_services.push(labelled);
        cluster.workloads.push(workload("reg", "registry", &[("app", "registry")]));
        cluster.workload_namespace_services.push(service("reg", "registry").selector(&[("app", "registry")]).build());
        cluster.workload_namespace_services.push(service("reg", "other").selector(&[("app", "web")]).build());
        cluster.builtin_services.push(service("kube-system", "registry").build());
        let found = |settings: &Settings| -> Vec<(String, Source)> {
            survey(&cluster, settings).found.into_iter().map(|(s, src, _)| (s.name_any(), src)).collect()
        };
        assert_eq!(
            found(&Settings::default()),
            [
                ("zot".into(), Source::Labelled),
                ("registry".into(), Source::Workload { kind: "Deployment", name: "registry".into() }),
                ("registry".into(), Source::Minikube),
            ]
        );
        let settings = Settings { builtin_registries: false, ..Settings::default() };
        assert_eq!(found(&settings).len(), 2);
    }

    #[test]
    fn labelled_identities_tell_untrusted_registries_and_name_trusted_namespaces() {
        let mut cluster = Cluster::default();
        let identity = |namespace: &str, name: &str| {
            let id = ServiceId { namespace: namespace.into(), name: name.into() };
            Arc::new(Identity { id, uid: Some(format!("uid-{name}")), created: None })
        };
        cluster.labelled_identities = ["zot", "listing"].map(|name| identity("reg", name)).to_vec();
        cluster.labelled_identities.extend(["hijack", "builds"].map(|name| identity("tenant", name)));
        cluster.labelled_services.push(service("reg", "zot").port(None, 5000, Some(30500)).type_("NodePort").build());
        // Also a labelled workload's Service: found whole, and told once.
        cluster.workloads.push(workload("tenant", "builder", &[("app", "builder")]));
        cluster.workload_namespace_services.push(service("tenant", "builds").selector(&[("app", "builder")]).build());
        let settings = Settings { registry_namespaces: vec!["reg".into()], ..Settings::default() };

        let candidates = survey(&cluster, &settings);
        let interest = candidates.interest(&settings);
        assert_eq!(interest.labelled_service_namespaces, BTreeSet::from(["reg".to_string()]));
        assert!(interest.pod_selectors.iter().all(|(ns, _)| ns != "tenant"), "{interest:?}");
        let mut registries = candidates.registries(&settings);
        registries.sort_by(|a, b| a.id.cmp(&b.id));
        let seen: Vec<(&str, bool, Option<&str>)> = registries
            .iter()
            .map(|r| (r.id.name.as_str(), r.trusted, r.document.as_ref().err().map(|p| p.reason)))
            .collect();
        // reg/listing is not found until its namespace's whole watch holds it.
        assert_eq!(
            seen,
            [
                ("zot", true, None),
                ("builds", false, Some("NamespaceNotAllowed")),
                ("hijack", false, Some("NamespaceNotAllowed"))
            ]
        );
        let hijack = &registries[2];
        assert_eq!(hijack.source, Source::Labelled);
        assert_eq!(registries[1].source, Source::Workload { kind: "Deployment", name: "builder".into() });
        assert_eq!(
            (
                hijack.reference.kind.as_deref(),
                hijack.reference.api_version.as_deref(),
                hijack.reference.uid.as_deref()
            ),
            (Some("Service"), Some("v1"), Some("uid-hijack"))
        );
    }

    #[test]
    fn only_allowed_namespaces_and_the_builtins_own_namespaces_are_trusted() {
        let mut cluster = Cluster::default();
        cluster.allowed_namespaces.insert("labelled-ns".into());
        let everywhere = Settings::default();
        let trusting = Settings { registry_namespaces: vec!["registry".into()], ..Settings::default() };
        let scoped = Settings { watch_namespaces: vec!["team".into()], ..Settings::default() };
        let labelled = Source::Labelled;
        assert!(!trusted("tenant", &labelled, &cluster, &everywhere), "default: not trusted");
        assert!(trusted("labelled-ns", &labelled, &cluster, &everywhere), "a cluster admin labelled it");
        assert!(trusted("registry", &labelled, &cluster, &trusting), "--registry-namespaces");
        assert!(trusted("team", &labelled, &cluster, &scoped), "--watch-namespaces");
        assert!(trusted("kube-system", &Source::Minikube, &cluster, &everywhere), "minikube's addon");
        assert!(!trusted("kube-system", &labelled, &cluster, &everywhere), "not any Service in kube-system");
    }

    #[test]
    fn ranks_by_priority_then_age_then_name() {
        let mut cluster = Cluster::default();
        for (name, priority, created) in [
            ("b-new", None, "2026-01-02T00:00:00Z"),
            ("a-new", None, "2026-01-02T00:00:00Z"),
            ("old", None, "2025-01-01T00:00:00Z"),
            ("urgent", Some("10"), "2026-06-01T00:00:00Z"),
        ] {
            let mut builder = service("reg", name).created(created);
            if let Some(p) = priority {
                builder = builder.annotation(annotations::PRIORITY, p);
            }
            cluster.labelled_services.push(builder.build());
        }
        let order: Vec<String> =
            trusted_registries(&cluster, &Settings::default()).into_iter().map(|r| r.id.name).collect();
        assert_eq!(order, ["urgent", "old", "a-new", "b-new"]);
    }

    #[test]
    fn interest_follows_registries() {
        let mut cluster = Cluster::default();
        cluster.labelled_services.push(service("reg", "zot").selector(&[("app", "zot")]).build());
        cluster.labelled_services.push(service("reg", "external").build());
        cluster.workloads.push(workload("builds", "kaniko-cache", &[("app", "cache")]));
        cluster.workload_namespace_services.push(service("builds", "cache").selector(&[("app", "cache")]).build());
        // A tenant's registries are only told they are ignored: nothing of theirs is watched.
        for i in 0..3 {
            let name = format!("hijack-{i}");
            cluster.labelled_services.push(service("tenant", &name).selector(&[("app", &name)]).build());
        }
        cluster.labelled_services.push(service("tenant", "bare").build());
        let settings = Settings { registry_namespaces: vec!["reg".into(), "builds".into()], ..Settings::default() };
        let interest = interest(&cluster, &settings);
        assert_eq!(interest.service_namespaces, BTreeSet::from(["builds".to_string()]));
        let selector = |ns: &str, app: &str| (ns.to_string(), PodSelector::from([("app".into(), app.into())]));
        assert_eq!(interest.pod_selectors, BTreeSet::from([selector("reg", "zot"), selector("builds", "cache")]));
        let names: Vec<&str> = interest.endpoint_services.iter().map(|id| id.name.as_str()).collect();
        assert_eq!(names, ["cache", "external"], "a labelled Service's slices carry its labels; these do not");
        assert_eq!(interest.labelled_slice_namespaces, BTreeSet::from(["reg".to_string()]));
        assert!(interest.nodes.is_empty(), "localhost needs no node");
    }
}
