//! Every watch the publisher runs, and the [`Cluster`] snapshot they add up to. The fixed watches are set up once;
//! the others follow the [`Interest`] the current registries create.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::{Client, ResourceExt};

use super::watches::{Signals, WatchKey, WatchSet, WatchState};
use crate::registry::{Cluster, Interest, MICROK8S, MINIKUBE, MINIKUBE_PROXY, Workload};
use crate::settings::{ALLOWED_NAMESPACE_LABEL, ALLOWED_NAMESPACE_VALUE, Settings};

/// Every watch the publisher runs. The fixed ones are set up once; the others follow [`Interest`].
pub(super) struct Watches {
    labelled_services: WatchSet<Service>,
    deployments: WatchSet<Deployment>,
    statefulsets: WatchSet<StatefulSet>,
    daemonsets: WatchSet<DaemonSet>,
    builtin_services: WatchSet<Service>,
    proxies: WatchSet<DaemonSet>,
    pub(super) configmap: WatchSet<ConfigMap>,
    namespace_services: WatchSet<Service>,
    pods: WatchSet<Pod>,
    endpoint_slices: WatchSet<EndpointSlice>,
    nodes: WatchSet<Node>,
    /// Namespaces a cluster admin allowed to name the registry (only needed when watching every namespace).
    allowed_namespaces: WatchSet<Namespace>,
}

impl Watches {
    pub(super) fn new(client: &Client, signals: &Signals, settings: &Settings) -> Self {
        let (c, n) = (client, signals);
        let mut watches = Watches {
            labelled_services: WatchSet::namespaced(c.clone(), n.clone()),
            deployments: WatchSet::namespaced(c.clone(), n.clone()),
            statefulsets: WatchSet::namespaced(c.clone(), n.clone()),
            daemonsets: WatchSet::namespaced(c.clone(), n.clone()),
            builtin_services: WatchSet::namespaced(c.clone(), n.clone()),
            proxies: WatchSet::namespaced(c.clone(), n.clone()),
            configmap: WatchSet::namespaced(c.clone(), n.clone()),
            namespace_services: WatchSet::namespaced(c.clone(), n.clone()),
            pods: WatchSet::namespaced(c.clone(), n.clone()),
            endpoint_slices: WatchSet::namespaced(c.clone(), n.clone()),
            nodes: WatchSet::cluster_scoped(c.clone(), n.clone()),
            allowed_namespaces: WatchSet::cluster_scoped(c.clone(), n.clone()),
        };
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
        watches.labelled_services.follow(labelled());
        watches.deployments.follow(labelled());
        watches.statefulsets.follow(labelled());
        watches.daemonsets.follow(labelled());
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
    /// is complete.
    pub(super) fn follow(&mut self, interest: &Interest) -> bool {
        self.namespace_services.follow(interest.service_namespaces.iter().map(|ns| WatchKey::in_namespace(Some(ns))));
        self.pods.follow(
            interest.pod_selectors.iter().map(|(ns, selector)| WatchKey::in_namespace(Some(ns)).labels(selector)),
        );
        self.endpoint_slices.follow(interest.endpoint_services.iter().map(|id| {
            WatchKey::in_namespace(Some(&id.namespace)).labels(format!("kubernetes.io/service-name={}", id.name))
        }));
        self.nodes.follow(interest.nodes.iter().map(|name| WatchKey::default().named(name)));
        self.synced()
    }

    /// Every watch set, for questions asked of all of them.
    fn all(&self) -> [&dyn WatchState; 12] {
        [
            &self.labelled_services,
            &self.deployments,
            &self.statefulsets,
            &self.daemonsets,
            &self.builtin_services,
            &self.proxies,
            &self.configmap,
            &self.namespace_services,
            &self.pods,
            &self.endpoint_slices,
            &self.nodes,
            &self.allowed_namespaces,
        ]
    }

    fn synced(&self) -> bool {
        self.all().iter().all(|w| w.synced())
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
            workloads,
            workload_namespace_services: sorted(self.namespace_services.objects()),
            builtin_services: sorted(self.builtin_services.objects()),
            proxies: self.proxies.objects(),
            pods: self.pods.objects(),
            endpoint_slices: self.endpoint_slices.objects(),
            nodes: self.nodes.objects(),
            allowed_namespaces: self.allowed_namespaces.objects().iter().map(|n| n.name_any()).collect(),
        }
    }
}
