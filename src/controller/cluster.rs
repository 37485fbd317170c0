//! Every watch the publisher runs, and the [`Cluster`] snapshot they add up to. The fixed watches are set up once;
//! the others follow the [`Interest`] the current registries create.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node, Pod, Secret, Service, ServiceAccount};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::{Client, ResourceExt};

use super::identities::IdentityWatch;
use super::prune;
use super::watches::{Signals, WatchKey, WatchSet, WatchState};
use crate::pull;
use crate::registry::{Cluster, Interest, MICROK8S, MINIKUBE, MINIKUBE_PROXY, PodSelector, ServiceId, Workload};
use crate::settings::{ALLOWED_NAMESPACE_LABEL, ALLOWED_NAMESPACE_VALUE, PullSecrets, Settings};

/// Every watch the publisher runs. The fixed ones are set up once; the others follow [`Interest`].
pub(super) struct Watches {
    /// Watching every namespace: per trusted namespace holding labelled Services; otherwise per watched namespace.
    labelled_services: WatchSet<Service>,
    /// Watching every namespace: every labelled Service's identity, which is all an untrusted one needs.
    labelled_identities: IdentityWatch,
    deployments: WatchSet<Deployment>,
    statefulsets: WatchSet<StatefulSet>,
    daemonsets: WatchSet<DaemonSet>,
    builtin_services: WatchSet<Service>,
    proxies: WatchSet<DaemonSet>,
    pub(super) configmap: WatchSet<ConfigMap>,
    namespace_services: WatchSet<Service>,
    pods: WatchSet<Pod>,
    /// Slices of labelled registry Services: they carry their Service's labels. Per watched namespace, or, watching
    /// every namespace, per namespace holding trusted labelled registries.
    labelled_slices: WatchSet<EndpointSlice>,
    /// Slices of the other registry Services, by Service name.
    endpoint_slices: WatchSet<EndpointSlice>,
    nodes: WatchSet<Node>,
    /// Namespaces a cluster admin allowed to name the registry (only needed when watching every namespace).
    allowed_namespaces: WatchSet<Namespace>,
    /// With --pull-secrets: the source Secrets registries name, each by name.
    pull_sources: WatchSet<Secret>,
    /// With --pull-secrets: namespaces labelled to receive the pull Secret.
    pull_namespaces: WatchSet<Namespace>,
    /// With --pull-secrets: every Secret with the pull Secret's name, ours or not.
    pull_secrets: WatchSet<Secret>,
    /// With --pull-secrets: the chosen ServiceAccounts, each by name, where our Secret is or should be.
    pull_accounts: WatchSet<ServiceAccount>,
    pull: Option<PullSecrets>,
    /// Wakes the reconcile loop.
    changed: Arc<tokio::sync::Notify>,
    /// Watching every namespace: the registry selector, for the watches run per trusted namespace.
    trusted_selector: Option<String>,
}

impl Watches {
    pub(super) fn new(client: &Client, signals: &Signals, settings: &Settings) -> Self {
        let (c, n) = (client, signals);
        let mut watches = Watches {
            labelled_services: WatchSet::namespaced(c.clone(), n.clone()).pruned(prune::service),
            labelled_identities: IdentityWatch::new(
                c.clone(),
                n.clone(),
                settings.all_namespaces().then(|| WatchKey::default().labels(&settings.registry_selector)),
            ),
            deployments: WatchSet::namespaced(c.clone(), n.clone()),
            statefulsets: WatchSet::namespaced(c.clone(), n.clone()),
            daemonsets: WatchSet::namespaced(c.clone(), n.clone()),
            builtin_services: WatchSet::namespaced(c.clone(), n.clone()).pruned(prune::service),
            proxies: WatchSet::namespaced(c.clone(), n.clone()),
            // The stored ConfigMap's field managers tell who else writes it.
            configmap: WatchSet::namespaced(c.clone(), n.clone()).keeping_managed_fields(),
            namespace_services: WatchSet::namespaced(c.clone(), n.clone()).pruned(prune::service),
            pods: WatchSet::namespaced(c.clone(), n.clone()).pruned(prune::pod),
            labelled_slices: WatchSet::namespaced(c.clone(), n.clone()).pruned(prune::endpoint_slice),
            endpoint_slices: WatchSet::namespaced(c.clone(), n.clone()).pruned(prune::endpoint_slice),
            nodes: WatchSet::cluster_scoped(c.clone(), n.clone()),
            allowed_namespaces: WatchSet::cluster_scoped(c.clone(), n.clone()),
            pull_sources: WatchSet::namespaced(c.clone(), n.clone()).failures_are_findings(),
            pull_namespaces: WatchSet::cluster_scoped(c.clone(), n.clone()),
            pull_secrets: WatchSet::namespaced(c.clone(), n.clone()),
            pull_accounts: WatchSet::namespaced(c.clone(), n.clone()),
            pull: settings.pull_secrets.clone(),
            changed: signals.changed.clone(),
            trusted_selector: settings.all_namespaces().then(|| settings.registry_selector.clone()),
        };
        if let Some(pull) = &settings.pull_secrets {
            let wanted = format!("{}={}", pull::NAMESPACE_LABEL, pull::NAMESPACE_VALUE);
            watches.pull_namespaces.follow([WatchKey::default().labels(wanted)]);
            watches.pull_secrets.follow([WatchKey::default().named(&pull.name)]);
        }
        if settings.all_namespaces() {
            let allowed = format!("{ALLOWED_NAMESPACE_LABEL}={ALLOWED_NAMESPACE_VALUE}");
            watches.allowed_namespaces.follow([WatchKey::default().labels(allowed)]);
        }
        let scope: Vec<Option<&str>> = if settings.all_namespaces() {
            vec![None]
        } else {
            settings.watch_namespaces.iter().map(|n| Some(n.as_str())).collect()
        };
        let labelled = || scope.iter().map(|ns| WatchKey::in_namespace(*ns).labels(&settings.registry_selector));
        watches.deployments.follow(labelled());
        watches.statefulsets.follow(labelled());
        watches.daemonsets.follow(labelled());
        // Every watched namespace is trusted; watching all, only trusted namespaces' Services and slices are watched
        // whole (see `follow`), and every labelled Service by its identity.
        if !settings.all_namespaces() {
            watches.labelled_services.follow(labelled());
            watches.labelled_slices.follow(labelled());
        }
        if settings.builtin_registries {
            let builtins = [MINIKUBE, MICROK8S].into_iter().filter(|(ns, _)| settings.watches_namespace(ns));
            watches.builtin_services.follow(builtins.map(|(ns, name)| WatchKey::in_namespace(Some(ns)).named(name)));
            if settings.watches_namespace(MINIKUBE.0) {
                watches.proxies.follow([WatchKey::in_namespace(Some(MINIKUBE.0)).named(MINIKUBE_PROXY)]);
            }
        }
        watches
            .configmap
            .follow([WatchKey::in_namespace(Some(&settings.configmap_namespace)).named(&settings.configmap_name)]);
        watches
    }

    /// Runs exactly the watches `interest` needs; returns whether every watch has listed, so a snapshot taken now
    /// is complete. Registries share watches (one per namespace and kind), so a thousand registries in a namespace
    /// cost no more connections than one.
    pub(super) fn follow(&mut self, interest: &Interest) -> bool {
        let running = self.count();
        self.namespace_services.follow(interest.service_namespaces.iter().map(|ns| WatchKey::in_namespace(Some(ns))));
        self.pods.follow(shared_pod_watches(&interest.pod_selectors));
        self.endpoint_slices.follow(shared_slice_watches(&interest.endpoint_services));
        if let Some(selector) = &self.trusted_selector {
            let per_namespace = |namespaces: &BTreeSet<String>| {
                let keys = namespaces.iter().map(|ns| WatchKey::in_namespace(Some(ns)).labels(selector));
                keys.collect::<Vec<_>>()
            };
            self.labelled_services.follow(per_namespace(&interest.labelled_service_namespaces));
            self.labelled_slices.follow(per_namespace(&interest.labelled_slice_namespaces));
        }
        self.nodes.follow(interest.nodes.iter().map(|name| WatchKey::default().named(name)));
        self.pull_sources
            .follow(interest.pull_sources.iter().map(|(ns, name)| WatchKey::in_namespace(Some(ns)).named(name)));
        if let Some(pull) = &self.pull {
            // Where our Secret should be, and where it still is until removed (its entries go first).
            let mut namespaces: BTreeSet<String> =
                self.pull_namespaces.objects().iter().map(|n| n.name_any()).collect();
            let ours = self.pull_secrets.objects();
            namespaces.extend(ours.iter().filter(|s| pull::is_ours(s)).filter_map(|s| s.namespace()));
            let keys = namespaces.iter().flat_map(|ns| {
                pull.service_accounts.iter().map(move |name| WatchKey::in_namespace(Some(ns)).named(name))
            });
            self.pull_accounts.follow(keys.collect::<Vec<_>>());
        }
        if self.count() < running {
            // A snapshot taken before still holds what the stopped watches stored (the Delete that made a watch
            // unneeded may arrive only on that watch): not complete, so look again at once.
            self.changed.notify_one();
            return false;
        }
        self.synced()
    }

    /// What the pull watches hold.
    pub(super) fn pull_observed(&self) -> pull::Observed {
        let sources = self.pull_sources.findings().into_iter().filter_map(|(key, found)| {
            let source = (key.namespace.clone()?, key.name()?.to_string());
            Some((source, found.map(|secrets| secrets.into_iter().next())))
        });
        pull::Observed {
            sources: sources.collect(),
            namespaces: self.pull_namespaces.objects().iter().map(|n| n.name_any()).collect(),
            secrets: self.pull_secrets.objects(),
            accounts: self.pull_accounts.objects(),
        }
    }

    /// Every watch set, for questions asked of all of them.
    fn all(&self) -> [&dyn WatchState; 18] {
        [
            &self.labelled_services,
            &self.labelled_identities,
            &self.deployments,
            &self.statefulsets,
            &self.daemonsets,
            &self.builtin_services,
            &self.proxies,
            &self.configmap,
            &self.namespace_services,
            &self.pods,
            &self.labelled_slices,
            &self.endpoint_slices,
            &self.nodes,
            &self.allowed_namespaces,
            &self.pull_sources,
            &self.pull_namespaces,
            &self.pull_secrets,
            &self.pull_accounts,
        ]
    }

    fn synced(&self) -> bool {
        self.all().iter().all(|w| w.synced())
    }

    /// How many watches run, over every kind.
    pub(super) fn count(&self) -> usize {
        self.all().iter().map(|w| w.count()).sum()
    }

    /// Whether every watch task is still running.
    pub(super) fn alive(&self) -> bool {
        self.all().iter().all(|w| w.alive())
    }

    pub(super) fn snapshot(&self) -> Cluster {
        let mut workloads: Vec<Workload> = Vec::new();
        let mut add = |kind: &'static str, meta: &kube::api::ObjectMeta, labels: Option<&BTreeMap<String, String>>| {
            workloads.push(Workload {
                kind,
                namespace: meta.namespace.clone().unwrap_or_default(),
                name: meta.name.clone().unwrap_or_default(),
                pod_labels: labels.cloned().unwrap_or_default(),
            });
        };
        for d in self.deployments.objects() {
            add("Deployment", &d.metadata, d.spec.as_ref().and_then(|s| s.template.metadata.as_ref()?.labels.as_ref()));
        }
        for s in self.statefulsets.objects() {
            add(
                "StatefulSet",
                &s.metadata,
                s.spec.as_ref().and_then(|s| s.template.metadata.as_ref()?.labels.as_ref()),
            );
        }
        for d in self.daemonsets.objects() {
            add("DaemonSet", &d.metadata, d.spec.as_ref().and_then(|s| s.template.metadata.as_ref()?.labels.as_ref()));
        }
        workloads.sort_by(|a, b| (&a.namespace, &a.name, a.kind).cmp(&(&b.namespace, &b.name, b.kind)));
        let sorted = |mut services: Vec<Arc<Service>>| {
            services.sort_by_key(|s| (s.namespace(), s.name_any()));
            services
        };
        Cluster {
            labelled_services: sorted(self.labelled_services.objects()),
            labelled_identities: self.labelled_identities.identities(),
            workloads,
            workload_namespace_services: sorted(self.namespace_services.objects()),
            builtin_services: sorted(self.builtin_services.objects()),
            proxies: self.proxies.objects(),
            pods: self.pods.objects(),
            endpoint_slices: union(self.labelled_slices.objects(), self.endpoint_slices.objects()),
            nodes: self.nodes.objects(),
            allowed_namespaces: self.allowed_namespaces.objects().iter().map(|n| n.name_any()).collect(),
        }
    }
}

/// One pod watch per namespace and set of selector keys: `app in (zot,harbor)` holds the pods of every registry
/// there that selects on `app` alone. That is a superset when selectors have several keys; `registry` narrows it to
/// each Service's own pods.
fn shared_pod_watches(selectors: &BTreeSet<(String, PodSelector)>) -> Vec<WatchKey> {
    // (namespace, selector keys) -> each key's values.
    type Values<'a> = BTreeMap<&'a str, BTreeSet<&'a str>>;
    let mut groups: BTreeMap<(&str, Vec<&str>), Values> = BTreeMap::new();
    for (namespace, selector) in selectors {
        let keys = selector.keys().map(String::as_str).collect();
        let values = groups.entry((namespace, keys)).or_default();
        for (key, value) in selector {
            values.entry(key).or_default().insert(value);
        }
    }
    groups
        .into_iter()
        .map(|((namespace, _), values)| {
            let requirements: Vec<String> = values.iter().map(|(key, values)| one_of(key, values)).collect();
            WatchKey::in_namespace(Some(namespace)).labels(requirements.join(","))
        })
        .collect()
}

/// One EndpointSlice watch per namespace, for the registry Services there whose slices it names.
fn shared_slice_watches(services: &BTreeSet<ServiceId>) -> Vec<WatchKey> {
    let mut names: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for id in services {
        names.entry(&id.namespace).or_default().insert(&id.name);
    }
    names
        .into_iter()
        .map(|(namespace, names)| {
            WatchKey::in_namespace(Some(namespace)).labels(one_of("kubernetes.io/service-name", &names))
        })
        .collect()
}

/// A set-based label requirement. Keys and values come from objects the API server validated, so they hold no
/// separators.
fn one_of(key: &str, values: &BTreeSet<&str>) -> String {
    format!("{key} in ({})", values.iter().copied().collect::<Vec<_>>().join(","))
}

/// Slices from both watches, each once (a labelled selector-less Service's own slices may carry its labels).
fn union(mut slices: Vec<Arc<EndpointSlice>>, more: Vec<Arc<EndpointSlice>>) -> Vec<Arc<EndpointSlice>> {
    let mut seen: BTreeSet<(String, String)> =
        slices.iter().map(|s| (s.namespace().unwrap_or_default(), s.name_any())).collect();
    slices.extend(more.into_iter().filter(|s| seen.insert((s.namespace().unwrap_or_default(), s.name_any()))));
    slices
}

#[cfg(test)]
mod tests {
    use super::*;

    fn selector(pairs: &[(&str, &str)]) -> PodSelector {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn registries_share_one_watch_per_namespace_and_selector_keys() {
        let mut selectors = BTreeSet::new();
        for i in 0..1000 {
            selectors.insert(("tenant".to_string(), selector(&[("app", &format!("registry-{i}"))])));
        }
        selectors.insert(("tenant".to_string(), selector(&[("app", "zot"), ("tier", "cache")])));
        selectors.insert(("tenant".to_string(), selector(&[("app", "harbor"), ("tier", "core")])));
        selectors.insert(("other".to_string(), selector(&[("app", "zot")])));
        let keys = shared_pod_watches(&selectors);
        let labels: Vec<(&str, &str)> =
            keys.iter().map(|k| (k.namespace.as_deref().unwrap_or(""), k.labels.as_deref().unwrap_or(""))).collect();
        assert_eq!(labels.len(), 3, "{labels:?}");
        assert_eq!(labels[0], ("other", "app in (zot)"));
        assert!(labels[1].1.starts_with("app in (registry-0,registry-1,registry-10,"), "{}", labels[1].1);
        assert_eq!(labels[2], ("tenant", "app in (harbor,zot),tier in (cache,core)"));

        let services: BTreeSet<ServiceId> =
            ["a", "b"].iter().map(|name| ServiceId { namespace: "tenant".into(), name: name.to_string() }).collect();
        let slices = shared_slice_watches(&services);
        assert_eq!(slices.len(), 1);
        assert_eq!(slices[0].labels.as_deref(), Some("kubernetes.io/service-name in (a,b)"));
    }
}
