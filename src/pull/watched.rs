//! What the pull credentials watch: the one list of their watch sets ([`pull_watch_sets`]), from which the
//! [`Interest`], the [`Observed`] snapshot and the controller's watch sets are made.

use k8s_openapi::api::core::v1::{Namespace, Secret, ServiceAccount};

use crate::watching::{Keep, interest_and_snapshot};

/// Calls `$then!` with the pull credentials' watch sets: `name: watched kind => what is kept of each object`.
macro_rules! pull_watch_sets {
    ($then:ident! { $($args:tt)* }) => {
        $then! { $($args)*
            /// The Secret holding the published registry's credentials, by name. A refused watch is an answer (the
            /// Secret may not be read), not an outage.
            credentials: ::k8s_openapi::api::core::v1::Secret => ::k8s_openapi::api::core::v1::Secret [findings],
            /// Namespaces a cluster admin labelled to receive the pull Secret.
            namespaces: ::k8s_openapi::api::core::v1::Namespace => $crate::pull::WantedNamespace,
            /// Every Secret with the pull Secret's name, ours or not.
            secrets: ::k8s_openapi::api::core::v1::Secret => ::k8s_openapi::api::core::v1::Secret,
            /// The chosen ServiceAccounts, each by name, where our Secret is or should be.
            accounts: ::k8s_openapi::api::core::v1::ServiceAccount => ::k8s_openapi::api::core::v1::ServiceAccount,
        }
    };
}
pub(crate) use pull_watch_sets;

interest_and_snapshot!(pull_watch_sets, Interest, Observed);

/// A namespace labelled to receive the pull Secret: its name, and whether it is being deleted, when the API
/// server refuses anything new in it and its Secret and ServiceAccounts go with it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WantedNamespace {
    pub name: String,
    pub terminating: bool,
}

impl Keep<Namespace> for WantedNamespace {
    fn keep(namespace: Namespace) -> Self {
        let terminating = namespace.metadata.deletion_timestamp.is_some();
        Self { name: namespace.metadata.name.unwrap_or_default(), terminating }
    }
}

/// Secrets are kept whole but for other managers' field entries: their data is what is compared and copied, and
/// our field manager's entry is what makes one ours.
impl Keep<Secret> for Secret {
    fn keep(mut secret: Secret) -> Self {
        if let Some(entries) = &mut secret.metadata.managed_fields {
            entries.retain(|e| e.manager.as_deref() == Some(crate::keys::MANAGER));
            entries.iter_mut().for_each(|e| e.fields_v1 = None);
        }
        secret
    }
}

/// Accounts are kept whole but for their field managers: a patch tests their resourceVersion.
impl Keep<ServiceAccount> for ServiceAccount {
    fn keep(mut account: ServiceAccount) -> Self {
        account.metadata.managed_fields = None;
        account
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_secret_keeps_its_data_and_only_our_managers_entry_and_an_account_all_but_its_managers() {
        let secret: Secret = serde_json::from_value(json!({
            "metadata": {"name": "local-registry-pull", "namespace": "team-a", "resourceVersion": "9",
                "managedFields": [
                    {"manager": "kubectl", "operation": "Update", "fieldsType": "FieldsV1", "fieldsV1": {"f:data": {}}},
                    {"manager": crate::keys::MANAGER, "operation": "Apply", "fieldsType": "FieldsV1",
                        "fieldsV1": {"f:data": {}}}]},
            "type": "kubernetes.io/dockerconfigjson",
            "data": {".dockerconfigjson": "e30="}
        }))
        .unwrap();
        let kept = serde_json::to_value(Secret::keep(secret)).unwrap();
        assert_eq!(kept["data"], json!({".dockerconfigjson": "e30="}));
        assert_eq!(kept["type"], "kubernetes.io/dockerconfigjson");
        assert_eq!(kept["metadata"]["resourceVersion"], "9");
        assert_eq!(
            kept["metadata"]["managedFields"],
            json!([{"manager": crate::keys::MANAGER, "operation": "Apply", "fieldsType": "FieldsV1"}])
        );

        let account: ServiceAccount = serde_json::from_value(json!({
            "metadata": {"name": "default", "namespace": "team-a", "resourceVersion": "3",
                "managedFields": [{"manager": "kube-controller-manager", "operation": "Update"}]},
            "imagePullSecrets": [{"name": "local-registry-pull"}]
        }))
        .unwrap();
        let kept = serde_json::to_value(ServiceAccount::keep(account)).unwrap();
        assert_eq!(kept["imagePullSecrets"], json!([{"name": "local-registry-pull"}]));
        assert_eq!(kept["metadata"]["resourceVersion"], "3");
        assert!(kept["metadata"].get("managedFields").is_none());
    }
}
