//! The snapshot's EndpointSlices and pods by where a registry looks them up, built once per survey: scanning them
//! for each registry would cost registries × slices per pass (a thousand registries took half a second of the one
//! runtime thread, during which nothing else, not even a watch, was served).

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::discovery::v1::EndpointSlice;

use super::{Cluster, ServiceId};
use crate::keys::kubernetes::SERVICE_NAME;

/// A snapshot, with its slices and pods indexed.
pub(super) struct Index<'a> {
    pub cluster: &'a Cluster,
    /// By namespace, then the Service its service-name label names.
    slices: BTreeMap<&'a str, BTreeMap<&'a str, Vec<&'a EndpointSlice>>>,
    /// By namespace.
    pods: BTreeMap<&'a str, Vec<&'a Pod>>,
}

impl<'a> Index<'a> {
    pub(super) fn new(cluster: &'a Cluster) -> Self {
        let mut slices: BTreeMap<_, BTreeMap<_, Vec<_>>> = BTreeMap::new();
        // A labelled selector-less Service's own slices may carry its labels, so both watches may hold one slice.
        let mut seen = BTreeSet::new();
        for slice in cluster.labelled_slices.iter().chain(&cluster.endpoint_slices) {
            let meta = &slice.metadata;
            let (namespace, name) = (meta.namespace.as_deref().unwrap_or_default(), meta.name.as_deref());
            let service = meta.labels.as_ref().and_then(|labels| labels.get(SERVICE_NAME));
            if let Some(service) = service
                && seen.insert((namespace, name))
            {
                slices.entry(namespace).or_default().entry(service.as_str()).or_default().push(slice.as_ref());
            }
        }
        let mut pods: BTreeMap<_, Vec<_>> = BTreeMap::new();
        for pod in &cluster.pods {
            pods.entry(pod.metadata.namespace.as_deref().unwrap_or_default()).or_default().push(pod.as_ref());
        }
        Self { cluster, slices, pods }
    }

    /// The Service's EndpointSlices.
    pub(super) fn slices_of(&self, id: &ServiceId) -> &[&'a EndpointSlice] {
        let slices = self.slices.get(id.namespace.as_str()).and_then(|services| services.get(id.name.as_str()));
        slices.map_or(&[], Vec::as_slice)
    }

    /// The pods of a namespace.
    pub(super) fn pods_in(&self, namespace: &str) -> &[&'a Pod] {
        self.pods.get(namespace).map_or(&[], Vec::as_slice)
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::{pod, slice};
    use super::*;

    #[test]
    fn slices_are_found_by_their_service_once_each_and_pods_by_namespace() {
        let mut cluster = Cluster::default();
        let zot = slice("reg", "zot", &[(true, "a")]);
        // Held by both slice watches: counted once.
        cluster.labelled_slices.push(zot.clone());
        cluster.endpoint_slices.push(zot.clone());
        cluster.endpoint_slices.push(slice("reg", "zot", &[(false, "b")]));
        cluster.endpoint_slices.push(slice("other", "zot", &[(true, "c")]));
        cluster.pods.push(pod("reg", "zot-1", &[("app", "zot")], 5000, None, None));
        let index = Index::new(&cluster);
        let names = |namespace: &str| {
            let id = ServiceId { namespace: namespace.into(), name: "zot".into() };
            index.slices_of(&id).iter().map(|s| s.metadata.name.clone().unwrap_or_default()).collect::<Vec<_>>()
        };
        assert_eq!(names("reg").len(), 2);
        assert_eq!(names("reg")[0], zot.metadata.name.clone().unwrap_or_default());
        assert_eq!(names("other").len(), 1);
        assert!(names("none").is_empty());
        assert_eq!(index.pods_in("reg").len(), 1);
        assert!(index.pods_in("other").is_empty());
    }
}
