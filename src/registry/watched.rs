//! What the publisher watches, said by the pure core: the one list of its watch sets (`publisher_watch_sets`),
//! from which both the [`Interest`] (the watches wanted now) and the [`Cluster`] (what they hold) are made, and
//! the controller's own watch sets too, so the three cannot drift apart. Each set is one kind of object, reduced on
//! arrival to what the decision reads ([`Keep`]).

use std::collections::BTreeSet;

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{ConfigMap, Node, Service};
use kube::core::PartialObjectMeta;

use super::{Identity, Workload};
use crate::hosting::configmap::Stored;
use crate::watching::{Keep, WatchKey, interest_and_snapshot};

/// Calls `$then!` with the publisher's watch sets: `name: watched kind => what is kept of each object` (full
/// paths: the list is expanded where it is used).
macro_rules! publisher_watch_sets {
    ($then:ident! { $($args:tt)* }) => {
        $then! { $($args)*
            /// Services matching the registry selector, whole. Watching every namespace, only in allowed
            /// namespaces that hold some; otherwise in each watched namespace.
            labelled_services: ::k8s_openapi::api::core::v1::Service => ::k8s_openapi::api::core::v1::Service,
            /// Watching every namespace: every Service matching the registry selector, by its identity only (all a
            /// registry in a namespace that is not allowed is told by).
            labelled_identities: ::kube::core::PartialObjectMeta<::k8s_openapi::api::core::v1::Service> => $crate::registry::Identity,
            /// Workloads matching the registry selector: the Services selecting their pods are registries.
            deployments: ::k8s_openapi::api::apps::v1::Deployment => $crate::registry::Workload,
            statefulsets: ::k8s_openapi::api::apps::v1::StatefulSet => $crate::registry::Workload,
            daemonsets: ::k8s_openapi::api::apps::v1::DaemonSet => $crate::registry::Workload,
            /// Every Service of a namespace holding a labelled workload.
            namespace_services: ::k8s_openapi::api::core::v1::Service => ::k8s_openapi::api::core::v1::Service,
            /// The built-in addons' Services, by name.
            builtin_services: ::k8s_openapi::api::core::v1::Service => ::k8s_openapi::api::core::v1::Service,
            /// minikube's registry-proxy DaemonSet, by name.
            proxies: ::k8s_openapi::api::apps::v1::DaemonSet => ::k8s_openapi::api::apps::v1::DaemonSet,
            /// Pods selected by registry Services, one watch per namespace and set of selector keys.
            pods: ::k8s_openapi::api::core::v1::Pod => ::k8s_openapi::api::core::v1::Pod,
            /// EndpointSlices of labelled registry Services: the EndpointSlice controller copies a Service's labels
            /// onto its slices, so one watch per namespace on the registry selector holds all of them.
            labelled_slices: ::k8s_openapi::api::discovery::v1::EndpointSlice => ::k8s_openapi::api::discovery::v1::EndpointSlice,
            /// EndpointSlices of the other registry Services, by Service name.
            endpoint_slices: ::k8s_openapi::api::discovery::v1::EndpointSlice => ::k8s_openapi::api::discovery::v1::EndpointSlice,
            /// Nodes whose InternalIP a published value needs, by name.
            nodes: ::k8s_openapi::api::core::v1::Node => ::k8s_openapi::api::core::v1::Node,
            /// Nodes labelled `microk8s.io/cluster=true`, by name: the cluster is MicroK8s, so its registry addon's
            /// namespace is the distribution's own.
            microk8s_nodes: ::kube::core::PartialObjectMeta<::k8s_openapi::api::core::v1::Node> => String,
            /// Watching every namespace: namespaces a cluster admin labelled as allowed to name the registry.
            allowed_namespaces: ::k8s_openapi::api::core::v1::Namespace => String,
            /// The published ConfigMap, by name.
            configmap: ::k8s_openapi::api::core::v1::ConfigMap => $crate::hosting::configmap::Stored,
        }
    };
}
pub(crate) use publisher_watch_sets;

interest_and_snapshot!(publisher_watch_sets, Interest, Cluster);

impl Keep<Deployment> for Workload {
    fn keep(object: Deployment) -> Self {
        let labels = object.spec.and_then(|s| s.template.metadata?.labels);
        Workload::of("Deployment", object.metadata, labels)
    }
}

impl Keep<StatefulSet> for Workload {
    fn keep(object: StatefulSet) -> Self {
        let labels = object.spec.and_then(|s| s.template.metadata?.labels);
        Workload::of("StatefulSet", object.metadata, labels)
    }
}

impl Keep<DaemonSet> for Workload {
    fn keep(object: DaemonSet) -> Self {
        let labels = object.spec.and_then(|s| s.template.metadata?.labels);
        Workload::of("DaemonSet", object.metadata, labels)
    }
}

impl Keep<PartialObjectMeta<Service>> for Identity {
    fn keep(object: PartialObjectMeta<Service>) -> Self {
        Identity::of(&object.metadata)
    }
}

impl Keep<PartialObjectMeta<Node>> for String {
    fn keep(object: PartialObjectMeta<Node>) -> Self {
        object.metadata.name.unwrap_or_default()
    }
}

impl Keep<ConfigMap> for Stored {
    fn keep(object: ConfigMap) -> Self {
        Stored::read(&object)
    }
}

/// The watch keys the publisher always runs, whatever registries exist.
pub(super) fn fixed(interest: &mut Interest, settings: &crate::settings::Settings) {
    use super::{MICROK8S, MINIKUBE, MINIKUBE_PROXY};
    let selector = settings.registry_selector.clone();
    let scopes: Vec<WatchKey> = if settings.all_namespaces() {
        vec![WatchKey::everywhere()]
    } else {
        settings.watch_namespaces.iter().map(|ns| WatchKey::in_namespace(ns)).collect()
    };
    let labelled: BTreeSet<WatchKey> = scopes.iter().map(|scope| scope.clone().labels(selector.clone())).collect();
    interest.deployments.clone_from(&labelled);
    interest.statefulsets.clone_from(&labelled);
    interest.daemonsets.clone_from(&labelled);
    if settings.all_namespaces() {
        interest.labelled_identities.insert(WatchKey::everywhere().labels(selector));
        interest.allowed_namespaces.insert(
            WatchKey::everywhere()
                .labels(crate::watching::equal(crate::keys::namespace::ALLOWED, crate::keys::namespace::ALLOWED_VALUE)),
        );
    } else {
        // Every watched namespace is allowed: its labelled Services and their slices are watched whole.
        interest.labelled_services.clone_from(&labelled);
        interest.labelled_slices = labelled;
    }
    if settings.builtin_registries {
        for (namespace, name) in [MINIKUBE, MICROK8S].into_iter().filter(|(ns, _)| settings.watches_namespace(ns)) {
            interest.builtin_services.insert(WatchKey::in_namespace(namespace).named(name));
        }
        if settings.watches_namespace(MINIKUBE.0) {
            interest.proxies.insert(WatchKey::in_namespace(MINIKUBE.0).named(MINIKUBE_PROXY));
        }
        if settings.watches_namespace(MICROK8S.0) {
            use crate::keys::distribution::{MICROK8S_NODE, MICROK8S_NODE_VALUE};
            let microk8s = crate::watching::equal(MICROK8S_NODE, MICROK8S_NODE_VALUE);
            interest.microk8s_nodes.insert(WatchKey::everywhere().labels(microk8s));
        }
    }
    interest.configmap.insert(WatchKey::in_namespace(&settings.configmap_namespace).named(&settings.configmap_name));
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_nodes_name_and_the_stored_configmap_are_what_is_kept() {
        let node: PartialObjectMeta<Node> =
            serde_json::from_value(json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
                "metadata": {"name": "microk8s-1", "labels": {"microk8s.io/cluster": "true"}}}))
            .unwrap();
        assert_eq!(<String as Keep<PartialObjectMeta<Node>>>::keep(node), "microk8s-1");

        let configmap: ConfigMap = serde_json::from_value(json!({
            "metadata": {"name": "local-registry-hosting", "namespace": "kube-public", "uid": "u-1",
                "resourceVersion": "7", "labels": {"app.kubernetes.io/managed-by": "kind"}},
            "data": {"localRegistryHosting.v1": "host: \"localhost:5001\"\n"}
        }))
        .unwrap();
        let stored = Stored::keep(configmap.clone());
        assert_eq!(stored, Stored::read(&configmap));
        assert_eq!(stored.writer.as_deref(), Some("kind"));
        assert_eq!(stored.uid.as_deref(), Some("u-1"));
    }
}
