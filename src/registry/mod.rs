//! Which Services are registries, and what each would publish. Pure: it reads a [`Cluster`] snapshot of the
//! watched objects and never talks to the API server. [`watched`] lists what the publisher watches.

mod index;
mod kept;
mod model;
mod values;
pub mod watched;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Service;
use kube::ResourceExt;
use kube::core::Selector;

use crate::hosting::configmap::Stored;
use crate::settings::Settings;
use crate::watching::{WatchKey, one_of};
use index::Index;
pub use model::*;
pub use values::needs_node_address;
pub use watched::{Cluster, Interest};

/// minikube's registry addon: Service kube-system/registry behind the registry-proxy DaemonSet's hostPort.
pub const MINIKUBE: (&str, &str) = ("kube-system", "registry");
pub const MINIKUBE_PROXY: &str = "registry-proxy";
/// MicroK8s's registry addon: NodePort Service container-registry/registry.
pub const MICROK8S: (&str, &str) = ("container-registry", "registry");

impl Cluster {
    /// Every labelled workload, sorted by namespace, name and kind.
    pub fn workloads(&self) -> Vec<&Workload> {
        let mut workloads: Vec<&Workload> =
            self.deployments.iter().chain(&self.statefulsets).chain(&self.daemonsets).map(AsRef::as_ref).collect();
        workloads.sort_by(|a, b| (&a.namespace, &a.name, a.kind).cmp(&(&b.namespace, &b.name, b.kind)));
        workloads
    }

    /// The published ConfigMap as stored, if any.
    pub fn stored(&self) -> Option<&Stored> {
        self.configmap.first().map(AsRef::as_ref)
    }

    fn labelled_allowed(&self, namespace: &str) -> bool {
        self.allowed_namespaces.iter().any(|n| n.as_str() == namespace)
    }
}

/// Finds every registry Service in the snapshot and derives what each would publish.
pub fn registries(cluster: &Cluster, settings: &Settings) -> Registries {
    survey(cluster, settings).registries(settings)
}

/// The watches the snapshot's registries need, and the fixed ones.
pub fn interest(cluster: &Cluster, settings: &Settings) -> Interest {
    survey(cluster, settings).interest(settings)
}

/// The registry Services of one snapshot, found once and then asked which watches they need or what each would
/// publish.
pub struct Candidates<'a> {
    cluster: &'a Cluster,
    /// Built when first asked for: most interest passes never look up a slice.
    index: std::cell::OnceCell<Index<'a>>,
    /// Each Service, how it was found, and whether its namespace may name the cluster's registry.
    found: Vec<(&'a Arc<Service>, Origin, bool)>,
    /// Labelled Services in namespaces that are not allowed, seen by their identity only.
    ignored: Vec<&'a Identity>,
    /// Labelled workloads in namespaces that are not allowed: told on themselves, their namespace's Services unwatched.
    ignored_workloads: Vec<&'a Workload>,
    /// Allowed namespaces that hold labelled Services, seen by their identities.
    labelled_namespaces: BTreeSet<String>,
}

pub fn survey<'a>(cluster: &'a Cluster, settings: &Settings) -> Candidates<'a> {
    let mut candidates = Candidates {
        cluster,
        index: std::cell::OnceCell::new(),
        found: Vec::new(),
        ignored: Vec::new(),
        ignored_workloads: Vec::new(),
        labelled_namespaces: BTreeSet::new(),
    };
    // A Service found several ways counts once, by the first way.
    let mut seen = BTreeSet::new();
    let mut add = |service: &'a Arc<Service>, origin: Origin, found: &mut Vec<_>| {
        let id = service_id(service);
        let allowed = allowed(&id.namespace, &origin, cluster, settings);
        if seen.insert(id) {
            found.push((service, origin, allowed));
        }
    };
    for service in &cluster.labelled_services {
        add(service, Origin::Labelled, &mut candidates.found);
    }
    for workload in cluster.workloads() {
        let origin = Origin::Workload { kind: workload.kind, name: workload.name.clone() };
        // Nothing of a namespace that is not allowed is watched beyond what its refusal needs: the workload itself.
        if !allowed(&workload.namespace, &origin, cluster, settings) {
            candidates.ignored_workloads.push(workload);
            continue;
        }
        for service in cluster.namespace_services.iter().filter(|s| selects(s, workload)) {
            add(service, origin.clone(), &mut candidates.found);
        }
    }
    if settings.builtin_registries {
        for service in &cluster.builtin_services {
            let id = service_id(service);
            match (id.namespace.as_str(), id.name.as_str()) {
                MINIKUBE => add(service, Origin::Minikube, &mut candidates.found),
                MICROK8S => add(service, Origin::MicroK8s, &mut candidates.found),
                _ => {}
            }
        }
    }
    // Seen by identity only: an allowed namespace's labelled Services are watched whole (and found above once they
    // are); the others are told they are ignored, unless found whole another way.
    for identity in &cluster.labelled_identities {
        let namespace = &identity.id.namespace;
        if allowed(namespace, &Origin::Labelled, cluster, settings) {
            candidates.labelled_namespaces.insert(namespace.clone());
        } else if !seen.contains(&identity.id) {
            candidates.ignored.push(identity);
        }
    }
    candidates
}

impl<'a> Candidates<'a> {
    fn index(&self) -> &Index<'a> {
        self.index.get_or_init(|| Index::new(self.cluster))
    }

    /// Every registry with what it would publish: the allowed ones best first, then the ignored ones.
    pub fn registries(&self, settings: &Settings) -> Registries {
        let mut registries = Registries::default();
        for (service, origin, allowed) in &self.found {
            if *allowed {
                registries.counted.push(values::derive(service, origin.clone(), self.index(), settings));
            } else {
                let identity = Identity::of(&service.metadata);
                registries.ignored.push(Ignored {
                    reference: identity.reference(),
                    id: identity.id,
                    origin: origin.clone(),
                });
            }
        }
        let ignored = self.ignored.iter().map(|identity| Ignored {
            id: identity.id.clone(),
            origin: Origin::Labelled,
            reference: identity.reference(),
        });
        registries.ignored.extend(ignored);
        let workloads = self.ignored_workloads.iter().map(|workload| Ignored {
            id: ServiceId { namespace: workload.namespace.clone(), name: workload.name.clone() },
            origin: Origin::Workload { kind: workload.kind, name: workload.name.clone() },
            reference: workload.reference(),
        });
        registries.ignored.extend(workloads);
        registries.counted.sort_by(|a, b| a.rank_key().cmp(&b.rank_key()));
        registries.ignored.sort_by(|a, b| a.id.cmp(&b.id));
        registries
    }

    /// Every watch the publisher needs: the fixed ones, and those these registries need. Nothing of an ignored
    /// registry is watched beyond its identity, so a tenant's thousand Services cost no more than their own objects.
    pub fn interest(&self, settings: &Settings) -> Interest {
        let cluster = self.cluster;
        let mut interest = Interest::default();
        watched::fixed(&mut interest, settings);
        let ignored: BTreeSet<&str> = self.ignored_workloads.iter().map(|w| w.namespace.as_str()).collect();
        let workload_namespaces: BTreeSet<&str> = cluster
            .workloads()
            .iter()
            .map(|w| w.namespace.as_str())
            .filter(|namespace| !ignored.contains(namespace))
            .collect();
        interest.namespace_services = workload_namespaces.into_iter().map(WatchKey::in_namespace).collect();
        let mut pod_selectors: BTreeSet<(&str, &PodSelector)> = BTreeSet::new();
        let mut endpoint_services: BTreeSet<ServiceId> = BTreeSet::new();
        let mut labelled_slice_namespaces: BTreeSet<&str> = BTreeSet::new();
        for (service, origin, allowed) in &self.found {
            if !allowed {
                continue;
            }
            let id = service_id(service);
            if values::needs_node_address(origin, settings) {
                let nodes = values::endpoint_nodes(self.index(), &id);
                interest.nodes.extend(nodes.iter().map(|name| WatchKey::everywhere().named(name)));
            }
            match pod_selector(service) {
                Some(selector) => {
                    pod_selectors.insert((service.metadata.namespace.as_deref().unwrap_or_default(), selector));
                    if *origin == Origin::Labelled {
                        labelled_slice_namespaces.insert(service.metadata.namespace.as_deref().unwrap_or_default());
                    } else {
                        endpoint_services.insert(id);
                    }
                }
                // Selector-less: EndpointSlices, if any, are whatever someone wrote, labels included.
                None => {
                    endpoint_services.insert(id);
                }
            }
        }
        if settings.all_namespaces() {
            let per_namespace =
                |namespace: &str| WatchKey::in_namespace(namespace).labels(settings.registry_selector.clone());
            interest.labelled_services = self.labelled_namespaces.iter().map(|ns| per_namespace(ns)).collect();
            interest.labelled_slices = labelled_slice_namespaces.into_iter().map(per_namespace).collect();
        }
        interest.pods = shared_pod_watches(&pod_selectors);
        interest.endpoint_slices = shared_slice_watches(&endpoint_services);
        interest
    }
}

/// Whether a registry in `namespace` may name the cluster's registry. Anyone who can create a Service in a
/// namespace could otherwise redirect every push and pull in the cluster, so only these count:
/// - minikube's addon in kube-system (which only cluster admins write), and MicroK8s's addon where a node says the
///   cluster is MicroK8s (elsewhere anyone who may create a namespace named `container-registry` would choose);
/// - namespaces the controller was installed to watch (`--watch-namespaces`) or allow (`--allowed-namespaces`);
/// - namespaces a cluster admin labelled `local-registry-publisher.io/registries=allowed`.
pub fn allowed(namespace: &str, origin: &Origin, cluster: &Cluster, settings: &Settings) -> bool {
    *origin == Origin::Minikube
        || (*origin == Origin::MicroK8s && !cluster.microk8s_nodes.is_empty())
        || (!settings.all_namespaces() && settings.watches_namespace(namespace))
        || settings.allowed_namespaces.iter().any(|n| n == namespace)
        || cluster.labelled_allowed(namespace)
}

/// Why a registry in a namespace that is not allowed is ignored, and what a cluster admin does about it.
pub fn not_allowed_message(namespace: &str) -> String {
    use crate::keys::namespace::{ALLOWED, ALLOWED_VALUE};
    format!(
        "ignored: namespace {namespace} is not allowed to name the cluster's registry, so this Service's priority and \
         annotations count for nothing; a cluster admin allows it with `kubectl label namespace {namespace} \
         {ALLOWED}={ALLOWED_VALUE}` or --allowed-namespaces"
    )
}

/// One pod watch per namespace and set of selector keys: `app in (zot,harbor)` holds the pods of every registry
/// there that selects on `app` alone. That is a superset when selectors have several keys; `values` narrows it to
/// each Service's own pods.
fn shared_pod_watches(selectors: &BTreeSet<(&str, &PodSelector)>) -> BTreeSet<WatchKey> {
    // (namespace, selector keys) -> each key's values.
    type Values<'a> = BTreeMap<&'a str, BTreeSet<&'a str>>;
    let mut groups: BTreeMap<(&str, Vec<&str>), Values> = BTreeMap::new();
    for (namespace, selector) in selectors {
        let keys = selector.keys().map(String::as_str).collect();
        let values = groups.entry((namespace, keys)).or_default();
        for (key, value) in selector.iter() {
            values.entry(key).or_default().insert(value);
        }
    }
    groups
        .into_iter()
        .map(|((namespace, _), values)| {
            let selector: Selector = values.into_iter().map(|(key, values)| one_of(key, values)).collect();
            WatchKey::in_namespace(namespace).labels(selector)
        })
        .collect()
}

/// One EndpointSlice watch per namespace, for the registry Services there whose slices it names.
fn shared_slice_watches(services: &BTreeSet<ServiceId>) -> BTreeSet<WatchKey> {
    let mut names: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for id in services {
        names.entry(&id.namespace).or_default().insert(&id.name);
    }
    names
        .into_iter()
        .map(|(namespace, names)| {
            let selector: Selector = one_of(crate::keys::kubernetes::SERVICE_NAME, names).into();
            WatchKey::in_namespace(namespace).labels(selector)
        })
        .collect()
}

/// Whether the Service's selector picks the workload's pods.
fn selects(service: &Service, workload: &Workload) -> bool {
    let selector = service.spec.as_ref().and_then(|s| s.selector.as_ref());
    service.namespace().as_deref() == Some(workload.namespace.as_str())
        && selector.is_some_and(|sel| !sel.is_empty() && sel.iter().all(|(k, v)| workload.pod_labels.get(k) == Some(v)))
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
    use crate::keys::service as annotations;

    /// The text of each key's label selector, and its namespace.
    fn keys(keys: &BTreeSet<WatchKey>) -> Vec<(String, String)> {
        let namespace = |k: &WatchKey| k.namespace.clone().unwrap_or_else(|| "*".into());
        keys.iter().map(|k| (namespace(k), k.label_selector().or(k.field_selector()).unwrap_or_default())).collect()
    }

    fn allow(cluster: &mut Cluster, namespace: &str) {
        cluster.allowed_namespaces.push(Arc::new(namespace.to_string()));
    }

    #[test]
    fn doctor_names_a_service_and_how_it_was_found_in_words() {
        let id = ServiceId { namespace: "reg".into(), name: "zot".into() };
        assert_eq!(id.to_string(), "reg/zot");
        let origins = [
            (Origin::Labelled, "labelled Service"),
            (Origin::Workload { kind: "Deployment", name: "zot".into() }, "Service selecting labelled Deployment zot"),
            (Origin::Minikube, "minikube registry addon"),
            (Origin::MicroK8s, "MicroK8s registry addon"),
        ];
        for (origin, said) in origins {
            assert_eq!(origin.to_string(), said);
        }
    }

    #[test]
    fn the_stored_configmap_is_the_one_its_named_watch_found() {
        let mut cluster = Cluster::default();
        assert_eq!(cluster.stored(), None);
        let stored = Stored { owned: true, text: Some("host: \"localhost:30500\"\n".into()), ..Stored::default() };
        cluster.configmap.push(Arc::new(stored.clone()));
        assert_eq!(cluster.stored(), Some(&stored));
    }

    #[test]
    fn finds_labelled_services_workload_services_and_builtins_once_each() {
        let mut cluster = Cluster::default();
        let labelled = service("reg", "zot").build();
        cluster.labelled_services.push(labelled.clone());
        cluster.namespace_services.push(labelled);
        cluster.deployments.push(workload("reg", "registry", &[("app", "registry")]));
        cluster.namespace_services.push(service("reg", "registry").selector(&[("app", "registry")]).build());
        cluster.namespace_services.push(service("reg", "other").selector(&[("app", "web")]).build());
        cluster.builtin_services.push(service("kube-system", "registry").build());
        let found = |settings: &Settings| -> Vec<(String, Origin)> {
            survey(&cluster, settings).found.into_iter().map(|(s, origin, _)| (s.name_any(), origin)).collect()
        };
        let allowed = Settings { allowed_namespaces: vec!["reg".into()], ..Settings::default() };
        assert_eq!(
            found(&allowed),
            [
                ("zot".into(), Origin::Labelled),
                ("registry".into(), Origin::Workload { kind: "Deployment", name: "registry".into() }),
                ("registry".into(), Origin::Minikube),
            ]
        );
        let settings = Settings { builtin_registries: false, ..allowed };
        assert_eq!(found(&settings).len(), 2);
        // Where the namespace is not allowed, a workload's Services are not looked at: the workload is told.
        let candidates = survey(&cluster, &Settings::default());
        assert_eq!(candidates.found.len(), 2, "the labelled Service and minikube's");
        assert_eq!(candidates.ignored_workloads.len(), 1);
    }

    #[test]
    fn labelled_identities_tell_ignored_registries_and_name_allowed_namespaces() {
        let mut cluster = Cluster::default();
        let identity = |namespace: &str, name: &str| {
            let id = ServiceId { namespace: namespace.into(), name: name.into() };
            Arc::new(Identity { id, uid: Some(format!("uid-{name}")), created: None })
        };
        cluster.labelled_identities = ["zot", "listing"].map(|name| identity("reg", name)).to_vec();
        cluster.labelled_identities.extend(["hijack", "builds"].map(|name| identity("tenant", name)));
        cluster.labelled_services.push(service("reg", "zot").port(None, 5000, Some(30500)).type_("NodePort").build());
        // Also a labelled workload, whose Service is labelled too.
        cluster.deployments.push(workload("tenant", "builder", &[("app", "builder")]));
        cluster.namespace_services.push(service("tenant", "builds").selector(&[("app", "builder")]).build());
        let settings = Settings { allowed_namespaces: vec!["reg".into()], ..Settings::default() };

        let candidates = survey(&cluster, &settings);
        let interest = candidates.interest(&settings);
        let selector = settings.registry_selector.to_string();
        assert_eq!(keys(&interest.labelled_services), [("reg".to_string(), selector)]);
        assert!(interest.namespace_services.is_empty(), "no Service of a namespace not allowed is watched");
        assert!(interest.pods.is_empty(), "{interest:?}");
        let registries = candidates.registries(&settings);
        let counted: Vec<&str> = registries.counted.iter().map(|r| r.id.name.as_str()).collect();
        // reg/listing is not found until its namespace's whole watch holds it.
        assert_eq!(counted, ["zot"]);
        let ignored: Vec<(&str, &Origin)> =
            registries.ignored.iter().map(|r| (r.id.name.as_str(), &r.origin)).collect();
        let builder = Origin::Workload { kind: "Deployment", name: "builder".into() };
        // The workload is told, on itself: its namespace's Services are not watched to find the one selecting it.
        // Its labelled Service is told by its identity, as any other there.
        assert_eq!(ignored, [("builder", &builder), ("builds", &Origin::Labelled), ("hijack", &Origin::Labelled)]);
        let deployment = &registries.ignored[0].reference;
        assert_eq!(
            (deployment.kind.as_deref(), deployment.api_version.as_deref(), deployment.name.as_deref()),
            (Some("Deployment"), Some("apps/v1"), Some("builder"))
        );
        let hijack = &registries.ignored[2].reference;
        assert_eq!(
            (hijack.kind.as_deref(), hijack.api_version.as_deref(), hijack.uid.as_deref()),
            (Some("Service"), Some("v1"), Some("uid-hijack"))
        );
    }

    #[test]
    fn only_allowed_namespaces_and_the_builtins_own_namespaces_count() {
        let mut cluster = Cluster::default();
        allow(&mut cluster, "labelled-ns");
        let everywhere = Settings::default();
        let allowing = Settings { allowed_namespaces: vec!["registry".into()], ..Settings::default() };
        let scoped = Settings { watch_namespaces: vec!["team".into()], ..Settings::default() };
        let labelled = Origin::Labelled;
        assert!(!allowed("tenant", &labelled, &cluster, &everywhere), "default: not allowed");
        assert!(allowed("labelled-ns", &labelled, &cluster, &everywhere), "a cluster admin labelled it");
        assert!(allowed("registry", &labelled, &cluster, &allowing), "--allowed-namespaces");
        assert!(allowed("team", &labelled, &cluster, &scoped), "--watch-namespaces");
        assert!(!allowed("other", &labelled, &cluster, &scoped), "not another namespace when scoped");
        assert!(allowed("kube-system", &Origin::Minikube, &cluster, &everywhere), "minikube's addon");
        assert!(!allowed("container-registry", &Origin::MicroK8s, &cluster, &everywhere), "not on another cluster");
        cluster.microk8s_nodes.push(Arc::new("node-1".into()));
        assert!(allowed("container-registry", &Origin::MicroK8s, &cluster, &everywhere), "MicroK8s's addon");
        assert!(!allowed("kube-system", &labelled, &cluster, &everywhere), "not any Service in kube-system");
    }

    #[test]
    fn ranks_by_priority_then_age_then_name() {
        let mut cluster = Cluster::default();
        for (name, priority, created) in [
            ("b-new", None, "2026-01-02T00:00:00Z"),
            ("a-new", None, "2026-01-02T00:00:00Z"),
            ("old", None, "2025-01-01T00:00:00Z"),
            ("urgent", Some("10"), "2026-06-01T00:00:00Z"),
            ("low", Some("-1"), "2020-06-01T00:00:00Z"),
        ] {
            let mut builder = service("reg", name).created(created);
            if let Some(p) = priority {
                builder = builder.annotation(annotations::PRIORITY, p);
            }
            cluster.labelled_services.push(builder.build());
        }
        let order: Vec<String> =
            allowed_registries(&cluster, &Settings::default()).into_iter().map(|r| r.id.name).collect();
        assert_eq!(order, ["urgent", "old", "a-new", "b-new", "low"]);
    }

    #[test]
    fn interest_follows_registries() {
        let mut cluster = Cluster::default();
        cluster.labelled_services.push(service("reg", "zot").selector(&[("app", "zot")]).build());
        cluster.labelled_services.push(service("reg", "external").build());
        cluster.deployments.push(workload("builds", "kaniko-cache", &[("app", "cache")]));
        cluster.namespace_services.push(service("builds", "cache").selector(&[("app", "cache")]).build());
        // A tenant's registries are only told they are ignored: nothing of theirs is watched.
        for i in 0..3 {
            let name = format!("hijack-{i}");
            cluster.labelled_services.push(service("tenant", &name).selector(&[("app", &name)]).build());
        }
        cluster.labelled_services.push(service("tenant", "bare").build());
        let settings = Settings { allowed_namespaces: vec!["reg".into(), "builds".into()], ..Settings::default() };
        let interest = interest(&cluster, &settings);
        assert_eq!(keys(&interest.namespace_services), [("builds".to_string(), String::new())]);
        assert_eq!(
            keys(&interest.pods),
            [("builds".to_string(), "app in (cache)".to_string()), ("reg".to_string(), "app in (zot)".to_string())]
        );
        assert_eq!(
            keys(&interest.endpoint_slices),
            [
                ("builds".to_string(), "kubernetes.io/service-name in (cache)".to_string()),
                ("reg".to_string(), "kubernetes.io/service-name in (external)".to_string())
            ],
            "a labelled Service's slices carry its labels; these do not"
        );
        let selector = settings.registry_selector.to_string();
        assert_eq!(keys(&interest.labelled_slices), [("reg".to_string(), selector)]);
        assert!(interest.nodes.is_empty(), "localhost needs no node");
    }

    #[test]
    fn the_fixed_watches_follow_the_settings() {
        let everywhere = interest(&Cluster::default(), &Settings::default());
        let selector = Settings::default().registry_selector.to_string();
        for set in
            [&everywhere.deployments, &everywhere.statefulsets, &everywhere.daemonsets, &everywhere.labelled_identities]
        {
            assert_eq!(keys(set), [("*".to_string(), selector.clone())]);
        }
        assert_eq!(
            keys(&everywhere.allowed_namespaces),
            [("*".to_string(), "local-registry-publisher.io/registries=allowed".to_string())]
        );
        assert_eq!(
            keys(&everywhere.builtin_services),
            [
                ("container-registry".to_string(), "metadata.name=registry".to_string()),
                ("kube-system".to_string(), "metadata.name=registry".to_string())
            ]
        );
        assert_eq!(
            keys(&everywhere.proxies),
            [("kube-system".to_string(), "metadata.name=registry-proxy".to_string())]
        );
        assert_eq!(
            keys(&everywhere.configmap),
            [("kube-public".to_string(), "metadata.name=local-registry-hosting".to_string())]
        );
        assert!(everywhere.labelled_services.is_empty() && everywhere.labelled_slices.is_empty());

        let scoped =
            Settings { watch_namespaces: vec!["team".into()], builtin_registries: false, ..Settings::default() };
        let interest = interest(&Cluster::default(), &scoped);
        for set in [&interest.deployments, &interest.labelled_services, &interest.labelled_slices] {
            assert_eq!(keys(set), [("team".to_string(), selector.clone())]);
        }
        assert!(interest.labelled_identities.is_empty() && interest.allowed_namespaces.is_empty());
        assert!(
            interest.builtin_services.is_empty() && interest.proxies.is_empty() && interest.microk8s_nodes.is_empty()
        );
        let minikube_only = Settings { watch_namespaces: vec!["kube-system".into()], ..Settings::default() };
        let interest = super::interest(&Cluster::default(), &minikube_only);
        assert_eq!(
            keys(&interest.builtin_services),
            [("kube-system".to_string(), "metadata.name=registry".to_string())]
        );
    }

    #[test]
    fn registries_share_one_pod_watch_per_namespace_and_selector_keys() {
        let mut owned: Vec<(String, PodSelector)> = Vec::new();
        let selector = |pairs: &[(&str, &str)]| -> PodSelector {
            pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
        };
        for i in 0..1000 {
            owned.push(("tenant".into(), selector(&[("app", &format!("registry-{i}"))])));
        }
        owned.push(("tenant".into(), selector(&[("app", "zot"), ("tier", "cache")])));
        owned.push(("tenant".into(), selector(&[("app", "harbor"), ("tier", "core")])));
        owned.push(("other".into(), selector(&[("app", "zot")])));
        let selectors: BTreeSet<(&str, &PodSelector)> = owned.iter().map(|(ns, s)| (ns.as_str(), s)).collect();
        let watches = keys(&shared_pod_watches(&selectors));
        assert_eq!(watches.len(), 3, "{watches:?}");
        assert_eq!(watches[0], ("other".to_string(), "app in (zot)".to_string()));
        assert_eq!(watches[1], ("tenant".to_string(), "app in (harbor,zot),tier in (cache,core)".to_string()));
        assert!(watches[2].1.starts_with("app in (registry-0,registry-1,registry-10,"), "{}", watches[2].1);
        assert!(watches[2].1.ends_with("registry-998,registry-999)"), "one watch for all thousand");

        let services: BTreeSet<ServiceId> =
            ["a", "b"].iter().map(|name| ServiceId { namespace: "tenant".into(), name: name.to_string() }).collect();
        let slices = keys(&shared_slice_watches(&services));
        assert_eq!(slices, [("tenant".to_string(), "kubernetes.io/service-name in (a,b)".to_string())]);
    }
}
