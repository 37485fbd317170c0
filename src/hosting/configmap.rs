//! The ConfigMap that carries the document: what is stored (read the way readers and other writers left it), and
//! the exact fields this controller applies, so that server-side apply owns nothing else.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ConfigMap, ObjectReference};
use kube::ResourceExt;

use super::LocalRegistryHostingV1;
use crate::keys::{MANAGED_BY, MANAGER};
use crate::settings::Settings;

/// The only data key any reader reads today.
pub const DATA_KEY: &str = "localRegistryHosting.v1";

/// What the target ConfigMap holds now.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Stored {
    /// Carries our managed-by label: ours to change and delete.
    pub owned: bool,
    /// The managed-by label's value, or the first field manager, to name the other writer.
    pub writer: Option<String>,
    /// The `localRegistryHosting.v1` text.
    pub text: Option<String>,
    /// That text parsed, once; `None` when absent or unparsable.
    pub document: Option<LocalRegistryHostingV1>,
    /// Holds keys besides ours (a future `localRegistryHosting.v2`, another tool's): withdrawing removes only ours.
    pub shared: bool,
    pub uid: Option<String>,
    pub resource_version: Option<String>,
}

impl Stored {
    pub fn read(configmap: &ConfigMap) -> Self {
        let managed_by = configmap.labels().get(MANAGED_BY).cloned();
        let first_manager = configmap.managed_fields().iter().find_map(|f| f.manager.clone());
        let text = configmap.data.as_ref().and_then(|d| d.get(DATA_KEY)).cloned();
        Self {
            owned: managed_by.as_deref() == Some(MANAGER),
            writer: managed_by.or(first_manager),
            document: text.as_deref().and_then(|t| LocalRegistryHostingV1::parse(t).ok()),
            text,
            shared: configmap.data.iter().flatten().any(|(key, _)| key != DATA_KEY)
                || configmap.binary_data.as_ref().is_some_and(|b| !b.is_empty()),
            uid: configmap.metadata.uid.clone(),
            resource_version: configmap.metadata.resource_version.clone(),
        }
    }

    /// The document readers see, when this controller wrote it.
    pub fn ours(&self) -> Option<&LocalRegistryHostingV1> {
        self.document.as_ref().filter(|_| self.owned)
    }
}

/// The ConfigMap to server-side apply for `document`; with none, an apply that gives up our key (server-side apply
/// removes a field its only manager no longer sets) and keeps our label.
pub fn desired(document: Option<&LocalRegistryHostingV1>, settings: &Settings) -> ConfigMap {
    let mut configmap = released(settings);
    configmap.metadata.labels = Some(BTreeMap::from([(MANAGED_BY.to_string(), MANAGER.to_string())]));
    configmap.data = document.map(|document| BTreeMap::from([(DATA_KEY.to_string(), document.render())]));
    configmap
}

/// The ConfigMap to server-side apply to give up everything we claimed, key and label, for good (uninstall); the
/// fields other managers own stay.
pub fn released(settings: &Settings) -> ConfigMap {
    let mut configmap = ConfigMap::default();
    configmap.metadata.name = Some(settings.configmap_name.clone());
    configmap.metadata.namespace = Some(settings.configmap_namespace.clone());
    configmap
}

/// The published ConfigMap as an Event's subject, for what concerns no registry.
pub fn reference(settings: &Settings, stored: Option<&Stored>) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("ConfigMap".into()),
        namespace: Some(settings.configmap_namespace.clone()),
        name: Some(settings.configmap_name.clone()),
        uid: stored.and_then(|s| s.uid.clone()),
        ..ObjectReference::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn document() -> LocalRegistryHostingV1 {
        LocalRegistryHostingV1 { host: Some("localhost:30500".into()), ..LocalRegistryHostingV1::default() }
    }

    #[test]
    fn the_desired_configmap_carries_one_key_and_our_label() {
        let configmap = desired(Some(&document()), &Settings::default());
        assert_eq!(configmap.metadata.namespace.as_deref(), Some("kube-public"));
        assert_eq!(configmap.metadata.name.as_deref(), Some("local-registry-hosting"));
        assert_eq!(configmap.labels().get(MANAGED_BY).map(String::as_str), Some(MANAGER));
        let keys = configmap.data.as_ref().map(|d| d.keys().cloned().collect::<Vec<_>>());
        assert_eq!(keys, Some(vec![DATA_KEY.to_string()]));
        let stored = Stored::read(&configmap);
        assert!(stored.owned && !stored.shared);
        assert_eq!((stored.ours(), stored.writer.as_deref()), (Some(&document()), Some(MANAGER)));
        let ours_only = desired(None, &Settings::default());
        assert!(ours_only.data.is_none() && ours_only.labels().contains_key(MANAGED_BY));
        let released = released(&Settings::default());
        assert!(released.metadata.labels.is_none() && released.data.is_none());
    }

    #[test]
    fn other_keys_and_binary_data_make_a_configmap_shared() {
        let mut configmap = desired(Some(&document()), &Settings::default());
        configmap.data.get_or_insert_default().insert("localRegistryHosting.v2".into(), "{}".into());
        assert!(Stored::read(&configmap).shared);
        configmap.data = None;
        configmap.binary_data = Some(BTreeMap::from([("x".into(), k8s_openapi::ByteString(vec![1]))]));
        assert!(Stored::read(&configmap).shared);
    }

    #[test]
    fn a_configmap_without_our_label_is_another_writers_named_by_its_label_or_first_manager() {
        let mut configmap = desired(Some(&document()), &Settings::default());
        configmap.metadata.labels = Some(BTreeMap::from([(MANAGED_BY.to_string(), "ctlptl".to_string())]));
        let stored = Stored::read(&configmap);
        assert!(!stored.owned && stored.ours().is_none());
        assert_eq!(stored.writer.as_deref(), Some("ctlptl"));
        configmap.metadata.labels = None;
        configmap.metadata.managed_fields =
            Some(vec![k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry {
                manager: Some("kubectl-create".into()),
                ..Default::default()
            }]);
        assert_eq!(Stored::read(&configmap).writer.as_deref(), Some("kubectl-create"));
        configmap.data = Some(BTreeMap::from([(DATA_KEY.to_string(), "host: [unclosed".to_string())]));
        let broken = Stored::read(&configmap);
        assert!(broken.text.is_some() && broken.document.is_none());
    }

    #[test]
    fn the_reference_names_the_configmap_and_its_uid_when_known() {
        let stored = Stored { uid: Some("u-1".into()), ..Stored::default() };
        let reference = reference(&Settings::default(), Some(&stored));
        assert_eq!(
            (reference.kind.as_deref(), reference.namespace.as_deref(), reference.name.as_deref()),
            (Some("ConfigMap"), Some("kube-public"), Some("local-registry-hosting"))
        );
        assert_eq!(reference.uid.as_deref(), Some("u-1"));
        assert_eq!(reference.api_version.as_deref(), Some("v1"));
    }
}
