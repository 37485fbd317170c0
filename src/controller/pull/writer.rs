//! Carries out a [`pull::Plan`]: ServiceAccount patches first (their namespaces are watched while our Secret is
//! there), then Secret applies and deletes. A refusal in one namespace does not stop the others; each is told on
//! the registry Service, counted and logged, and the pass is retried.

use k8s_openapi::api::core::v1::{ObjectReference, Secret, ServiceAccount};
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use kube::{Client, ResourceExt};
use tracing::{debug, info, warn};

use super::PullMetrics;
use crate::controller::Error;
use crate::keys::MANAGER;
use crate::pull::{AccountPatch, Notice, Plan, Reason};

pub struct PullWriter {
    client: Client,
    metrics: PullMetrics,
}

impl PullWriter {
    pub fn new(client: Client, metrics: PullMetrics) -> Self {
        Self { client, metrics }
    }

    /// Writes what `plan` says; refusals become notices on `regarding` (the registry) and the first is returned.
    pub async fn carry_out(
        &self,
        plan: &Plan,
        regarding: Option<&ObjectReference>,
        notices: &mut Vec<Notice>,
    ) -> Result<(), Error> {
        let mut first_error = None;
        let mut refused = |operation: &'static str, error: Error, notices: &mut Vec<Notice>| {
            self.metrics.wrote(operation, false);
            warn!(%error, operation, "pull Secret write refused");
            if let Some(regarding) = regarding {
                notices.push(Notice {
                    regarding: regarding.clone(),
                    reason: Reason::PullSecretFailed,
                    message: format!("could not {operation} {}: {}", error.target(), error.refusal()).into(),
                });
            }
            first_error.get_or_insert(error);
        };
        // Our Secret stays where an account still names it: its namespace stays watched until the entry is gone.
        let mut unpatched = std::collections::BTreeSet::new();
        for account in &plan.accounts {
            match self.patch_account(account).await {
                Ok(()) => {
                    self.metrics.wrote("patch-serviceaccount", true);
                    info!(serviceaccount = %format!("{}/{}", account.namespace, account.name), "imagePullSecrets updated");
                }
                // Changed since the watch showed it: the newer version is on its way and the next pass uses it.
                Err(Error::Apply { source: kube::Error::Api(status), target }) if [409, 422].contains(&status.code) => {
                    unpatched.insert(account.namespace.as_str());
                    debug!(serviceaccount = %target, "changed meanwhile; patched again on its next version");
                }
                Err(error) => {
                    unpatched.insert(account.namespace.as_str());
                    refused("patch-serviceaccount", error, notices);
                }
            }
        }
        for secret in &plan.apply {
            let namespace = secret.namespace().unwrap_or_default();
            let api: Api<Secret> = Api::namespaced(self.client.clone(), &namespace);
            let target = format!("Secret {namespace}/{}", secret.name_any());
            let params = PatchParams::apply(MANAGER).force();
            match api.patch(&secret.name_any(), &params, &Patch::Apply(secret)).await {
                Ok(_) => {
                    self.metrics.wrote("apply", true);
                    info!(secret = %target, "pull Secret written");
                }
                Err(source) => refused("apply", Error::Apply { target, source }, notices),
            }
        }
        for (namespace, uid) in plan.delete.iter().filter(|(ns, _)| !unpatched.contains(ns.as_str())) {
            let api: Api<Secret> = Api::namespaced(self.client.clone(), namespace);
            let name = &plan.secret_name;
            let preconditions = Some(Preconditions { uid: uid.clone(), resource_version: None });
            let target = format!("Secret {namespace}/{name}");
            match api.delete(name, &DeleteParams { preconditions, ..DeleteParams::default() }).await {
                Ok(_) => {
                    self.metrics.wrote("delete", true);
                    info!(secret = %target, "pull Secret removed");
                }
                Err(kube::Error::Api(status)) if status.code == 404 => {}
                Err(source) => refused("delete", Error::Delete { target, source }, notices),
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// A JSON patch: `imagePullSecrets` is an atomic list, so server-side apply would take the whole list from
    /// whoever else set it.
    async fn patch_account(&self, account: &AccountPatch) -> Result<(), Error> {
        let target = format!("ServiceAccount {}/{}", account.namespace, account.name);
        let url =
            format!("/api/v1/namespaces/{}/serviceaccounts/{}?fieldManager={MANAGER}", account.namespace, account.name);
        let body = serde_json::to_vec(&account.patch).unwrap_or_default();
        let request = http::Request::patch(url)
            .header(http::header::CONTENT_TYPE, "application/json-patch+json")
            .body(body)
            .map_err(|e| Error::Apply { target: target.clone(), source: kube::Error::HttpError(e) })?;
        self.client.request::<ServiceAccount>(request).await.map(drop).map_err(|source| Error::Apply { target, source })
    }
}

#[cfg(test)]
mod tests;
