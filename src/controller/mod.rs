//! The reconcile loop: read the watches, ask [`plan::decide`] what to do, apply it, report it. One pass per burst
//! of changes, and one more when a grace period runs out.

mod events;
mod watches;

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use kube::{Client, ResourceExt};
use tokio::sync::Notify;
use tokio::time::Instant;
use tracing::{debug, error, info, warn};

use crate::config::PublishArgs;
use crate::hosting::LocalRegistryHostingV1;
use crate::plan::{self, Action, Existing, MANAGER, Readiness};
use crate::registry::{self, Cluster, Interest, MICROK8S, MINIKUBE, MINIKUBE_PROXY, Workload};
pub use watches::WatchKey;
use watches::WatchSet;

/// Changes that arrive this close together are handled in one pass.
const SETTLE: Duration = Duration::from_millis(20);
/// How long to wait for our own write to come back through the ConfigMap watch.
const ECHO_TIMEOUT: Duration = Duration::from_secs(2);
const RETRY_MIN: Duration = Duration::from_millis(500);
const RETRY_MAX: Duration = Duration::from_secs(30);

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("applying {target}: {source}")]
    Apply { target: String, source: kube::Error },
    #[error("deleting {target}: {source}")]
    Delete { target: String, source: kube::Error },
}

impl Error {
    /// A bounded label for metrics and logs.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::Apply { .. } => "apply",
            Error::Delete { .. } => "delete",
        }
    }
}

pub struct Publisher {
    settings: PublishArgs,
    configmaps: Api<ConfigMap>,
    changed: Arc<Notify>,
    watches: Watches,
    readiness: Readiness,
    events: events::EventLog,
    held_back: Option<String>,
}

impl Publisher {
    pub fn new(client: Client, settings: PublishArgs) -> Self {
        let changed = Arc::new(Notify::new());
        let watches = Watches::new(&client, &changed, &settings);
        Self {
            configmaps: Api::namespaced(client.clone(), &settings.configmap_namespace),
            events: events::EventLog::new(client),
            settings,
            changed,
            watches,
            readiness: Readiness::default(),
            held_back: None,
        }
    }

    /// Reconciles until `shutdown` completes.
    pub async fn run(mut self, shutdown: impl Future<Output = ()>) {
        info!(
            target = %format!("{}/{}", self.settings.configmap_namespace, self.settings.configmap_name),
            selector = %self.settings.registry_selector,
            namespaces = %if self.settings.all_namespaces() { "*".to_string() } else { self.settings.watch_namespaces.join(",") },
            "publishing the local registry"
        );
        futures::pin_mut!(shutdown);
        let mut wake_at: Option<Instant> = None;
        let mut retry = RETRY_MIN;
        loop {
            let timer = tokio::time::sleep_until(wake_at.unwrap_or_else(|| Instant::now() + Duration::from_secs(3600)));
            tokio::select! {
                () = &mut shutdown => break,
                () = self.changed.notified() => tokio::time::sleep(SETTLE).await,
                () = timer, if wake_at.is_some() => {}
            }
            wake_at = match self.reconcile().await {
                Ok(recheck) => {
                    retry = RETRY_MIN;
                    recheck.map(|after| Instant::now() + after)
                }
                Err(error) => {
                    error!(%error, reason = error.metric_label(), retry_in = ?retry, "reconcile failed");
                    let at = Instant::now() + retry;
                    retry = (retry * 2).min(RETRY_MAX);
                    Some(at)
                }
            };
        }
        info!("stopped");
    }

    /// One pass. Returns when to look again if nothing changes before then.
    async fn reconcile(&mut self) -> Result<Option<Duration>, Error> {
        let cluster = self.watches.snapshot();
        self.watches.follow(&registry::interest(&cluster, &self.settings));
        if !self.watches.synced() {
            // A watch is still listing; it wakes us when it is done.
            debug!("waiting for watches to sync");
            return Ok(None);
        }
        let registries = registry::registries(&cluster, &self.settings);
        let now = Instant::now().into_std();
        self.readiness.observe(&registries, now);
        let existing = self.watches.configmap.objects().first().map(|cm| Existing::from_configmap(cm));
        let decision = plan::decide(&registries, existing.as_ref(), &self.readiness, now, &self.settings);
        if decision.held_back != self.held_back {
            if let Some(why) = &decision.held_back {
                warn!("{why}");
            }
            self.held_back = decision.held_back.clone();
        }
        // Write first: readers wait on the ConfigMap, and an Event should tell what happened, not what will.
        let written = self.execute(decision.action, existing.as_ref()).await;
        self.events.record(&decision.notices).await;
        written?;
        Ok(decision.recheck_after)
    }

    async fn execute(&mut self, action: Action, existing: Option<&Existing>) -> Result<(), Error> {
        let target = format!("{}/{}", self.settings.configmap_namespace, self.settings.configmap_name);
        let old = existing.and_then(|e| e.text.as_deref()).map(LocalRegistryHostingV1::parse);
        let old = match old {
            Some(Ok(document)) => document.to_string(),
            Some(Err(_)) => "(unparsable)".into(),
            None => "(none)".into(),
        };
        match action {
            Action::Keep => Ok(()),
            Action::Apply { document, source } => {
                let configmap = plan::desired_configmap(&document, &self.settings);
                let params = PatchParams::apply(MANAGER).force();
                let written = self
                    .configmaps
                    .patch(&self.settings.configmap_name, &params, &Patch::Apply(&configmap))
                    .await
                    .map_err(|source| Error::Apply { target: target.clone(), source })?;
                let source = source.map_or_else(|| "none (help only)".to_string(), |s| s.to_string());
                info!(configmap = %target, %old, new = %document, %source, "published");
                self.await_echo(|cm| cm.map(|c| c.resource_version()) == Some(written.resource_version())).await;
                Ok(())
            }
            Action::Delete => {
                let preconditions = existing
                    .map(|e| Preconditions { uid: e.uid.clone(), resource_version: e.resource_version.clone() });
                let params = DeleteParams { preconditions, ..DeleteParams::default() };
                match self.configmaps.delete(&self.settings.configmap_name, &params).await {
                    Ok(_) => {
                        info!(configmap = %target, %old, "deleted: no registry and no help URL to publish")
                    }
                    Err(kube::Error::Api(status)) if status.code == 404 => {}
                    Err(source) => return Err(Error::Delete { target, source }),
                }
                self.await_echo(|cm| cm.is_none()).await;
                Ok(())
            }
        }
    }

    /// Waits until the ConfigMap watch shows our own write, so the next pass does not repeat it.
    async fn await_echo(&self, arrived: impl Fn(Option<&ConfigMap>) -> bool) {
        let deadline = Instant::now() + ECHO_TIMEOUT;
        while Instant::now() < deadline {
            if arrived(self.watches.configmap.objects().first().map(AsRef::as_ref)) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

/// Every watch the publisher runs. The fixed ones are set up once; the others follow [`Interest`].
struct Watches {
    labelled_services: WatchSet<Service>,
    deployments: WatchSet<Deployment>,
    statefulsets: WatchSet<StatefulSet>,
    daemonsets: WatchSet<DaemonSet>,
    builtin_services: WatchSet<Service>,
    proxies: WatchSet<DaemonSet>,
    configmap: WatchSet<ConfigMap>,
    namespace_services: WatchSet<Service>,
    pods: WatchSet<Pod>,
    endpoint_slices: WatchSet<EndpointSlice>,
    nodes: WatchSet<Node>,
}

impl Watches {
    fn new(client: &Client, changed: &Arc<Notify>, settings: &PublishArgs) -> Self {
        let (c, n) = (client, changed);
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
        };
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
        if !settings.no_builtin_registries {
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

    fn follow(&mut self, interest: &Interest) {
        self.namespace_services.follow(interest.service_namespaces.iter().map(|ns| WatchKey::in_namespace(Some(ns))));
        self.pods.follow(
            interest.pod_selectors.iter().map(|(ns, selector)| WatchKey::in_namespace(Some(ns)).labels(selector)),
        );
        self.endpoint_slices.follow(interest.endpoint_services.iter().map(|id| {
            WatchKey::in_namespace(Some(&id.namespace)).labels(format!("kubernetes.io/service-name={}", id.name))
        }));
        self.nodes.follow(interest.nodes.iter().map(|name| WatchKey::default().named(name)));
    }

    fn synced(&self) -> bool {
        self.labelled_services.synced()
            && self.deployments.synced()
            && self.statefulsets.synced()
            && self.daemonsets.synced()
            && self.builtin_services.synced()
            && self.proxies.synced()
            && self.configmap.synced()
            && self.namespace_services.synced()
            && self.pods.synced()
            && self.endpoint_slices.synced()
            && self.nodes.synced()
    }

    fn snapshot(&self) -> Cluster {
        let mut workloads: Vec<Workload> = Vec::new();
        let mut add = |kind: &'static str,
                       meta: &kube::api::ObjectMeta,
                       labels: Option<&std::collections::BTreeMap<String, String>>| {
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
        }
    }
}
