//! The one place the published ConfigMap is written, by the reconcile loop and by `withdraw` alike: server-side
//! apply under our field manager, and a delete that removes only the version that was read, where "already gone"
//! counts as done. Every write is counted in the writes metric.

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use kube::{Client, ResourceExt};

use super::Error;
use super::PublisherMetrics;
use crate::keys::MANAGER;
use crate::settings::Settings;

pub struct ConfigMapWriter {
    api: Api<ConfigMap>,
    name: String,
    target: String,
    metrics: PublisherMetrics,
}

impl ConfigMapWriter {
    pub fn new(client: Client, settings: &Settings, metrics: PublisherMetrics) -> Self {
        Self {
            api: Api::namespaced(client, &settings.configmap_namespace),
            name: settings.configmap_name.clone(),
            target: settings.target(),
            metrics,
        }
    }

    /// Reads the ConfigMap as it is now (for `withdraw`, which has no watch).
    pub async fn read(&self) -> Result<Option<ConfigMap>, Error> {
        self.api.get_opt(&self.name).await.map_err(|source| Error::Read { target: self.target.clone(), source })
    }

    /// Applies exactly the fields in `configmap` as ours (see [`crate::hosting::configmap::desired`]); returns the
    /// resourceVersion written.
    pub async fn apply(&self, configmap: &ConfigMap) -> Result<String, Error> {
        let params = PatchParams::apply(MANAGER).force();
        let written = self
            .api
            .patch(&self.name, &params, &Patch::Apply(configmap))
            .await
            .map_err(|source| Error::Apply { target: self.target.clone(), source })?;
        self.metrics.wrote("apply");
        Ok(written.resource_version().unwrap_or_default())
    }

    /// Deletes the ConfigMap if it is still the version read (its uid and resourceVersion). `Ok(false)` when it was
    /// already gone.
    pub async fn delete(&self, uid: Option<String>, resource_version: Option<String>) -> Result<bool, Error> {
        let preconditions = Some(Preconditions { uid, resource_version });
        let params = DeleteParams { preconditions, ..DeleteParams::default() };
        match self.api.delete(&self.name, &params).await {
            Ok(_) => {
                self.metrics.wrote("delete");
                Ok(true)
            }
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(false),
            Err(source) => Err(Error::Delete { target: self.target.clone(), source }),
        }
    }
}

#[cfg(test)]
mod tests;
