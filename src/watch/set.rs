//! One set of watches of one kind: the lifecycle every watch shares (start, list, follow changes, retry with
//! backoff, stop), and the map of kept objects each one fills.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Debug;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use futures::StreamExt;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node, Pod, Secret, Service, ServiceAccount};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::core::PartialObjectMeta;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use tokio::task::JoinHandle;
use tracing::{debug, warn};

use super::Signals;
use crate::backoff;
use crate::watching::{Findings, Keep, WatchKey};

/// A kind that can be watched: how to reach it in one namespace or in all.
pub trait Watchable: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static {
    fn api(client: Client, namespace: Option<&str>) -> Api<Self>;
}

macro_rules! namespaced {
    ($($kind:ty),*) => {$(
        impl Watchable for $kind {
            fn api(client: Client, namespace: Option<&str>) -> Api<Self> {
                match namespace {
                    Some(namespace) => Api::namespaced(client, namespace),
                    None => Api::all(client),
                }
            }
        }
    )*};
}

macro_rules! cluster_scoped {
    ($($kind:ty),*) => {$(
        impl Watchable for $kind {
            fn api(client: Client, _: Option<&str>) -> Api<Self> {
                Api::all(client)
            }
        }
    )*};
}

namespaced!(
    Service,
    PartialObjectMeta<Service>,
    Deployment,
    StatefulSet,
    DaemonSet,
    Pod,
    EndpointSlice,
    ConfigMap,
    Secret,
    ServiceAccount
);
cluster_scoped!(Node, PartialObjectMeta<Node>, Namespace);

/// What the loop asks of every watch set, whatever its kind.
pub trait WatchState {
    /// Whether every watch has listed its objects at least once (or, for a set whose failures are findings, has
    /// failed with an answer).
    fn synced(&self) -> bool;
    /// Whether every watch task is still running (they only end when stopped).
    fn alive(&self) -> bool;
    /// How many watches run.
    fn count(&self) -> usize;
}

/// What a `follow` changed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Followed {
    pub started: usize,
    pub stopped: usize,
}

impl Followed {
    pub fn unchanged(self) -> bool {
        self == Self::default()
    }
}

impl std::ops::AddAssign for Followed {
    fn add_assign(&mut self, other: Self) {
        self.started += other.started;
        self.stopped += other.stopped;
    }
}

/// Kept objects by namespace and name.
type Map<T> = BTreeMap<(String, String), Arc<T>>;

struct Running<T> {
    kept: Arc<Mutex<Map<T>>>,
    synced: Arc<AtomicBool>,
    /// Why the watch fails now, for a set whose failures are findings.
    failure: Arc<Mutex<Option<String>>>,
    task: JoinHandle<()>,
}

impl<T> Drop for Running<T> {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn lock<V>(value: &Mutex<V>) -> std::sync::MutexGuard<'_, V> {
    // The guarded values are plain data, valid whatever a panicking holder was doing.
    value.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The watches of one kind `F`, keeping `T` of each object.
pub struct WatchSet<F, T> {
    client: Client,
    signals: Signals,
    running: BTreeMap<WatchKey, Running<T>>,
    /// A failing watch is an answer about what it watches (a Secret we may not read), not about the API server.
    failures_are_findings: bool,
    kind: PhantomData<fn() -> F>,
}

impl<F, T> WatchSet<F, T>
where
    F: Watchable,
    T: Keep<F> + Send + Sync + 'static,
{
    pub fn new(client: Client, signals: Signals) -> Self {
        Self { client, signals, running: BTreeMap::new(), failures_are_findings: false, kind: PhantomData }
    }

    /// A watch that fails counts as listed, with the failure as its answer (see [`WatchSet::findings`]), and does
    /// not mark the API server unreachable.
    pub fn findings(mut self) -> Self {
        self.failures_are_findings = true;
        self
    }

    /// Runs exactly the watches in `keys`: starts the new ones and stops the ones no longer wanted.
    pub fn follow(&mut self, keys: &BTreeSet<WatchKey>) -> Followed {
        let before = self.running.len();
        self.running.retain(|key, _| keys.contains(key));
        let stopped = before - self.running.len();
        let mut started = 0;
        for key in keys {
            if !self.running.contains_key(key) {
                let running = self.start(key);
                self.running.insert(key.clone(), running);
                started += 1;
            }
        }
        Followed { started, stopped }
    }

    /// Every object the watches hold, each once, by namespace and name.
    pub fn objects(&self) -> Vec<Arc<T>> {
        match self.running.values().collect::<Vec<_>>().as_slice() {
            [] => Vec::new(),
            [only] => lock(&only.kept).values().cloned().collect(),
            several => {
                let mut merged = Map::new();
                for running in several {
                    merged.extend(lock(&running.kept).iter().map(|(k, v)| (k.clone(), v.clone())));
                }
                merged.into_values().collect()
            }
        }
    }

    /// Each watch that has reported: its objects, or why it fails now.
    pub fn findings_of(&self) -> Findings<T> {
        let reported = self.running.iter().filter(|(_, r)| r.synced.load(Ordering::Acquire));
        reported
            .map(|(key, r)| {
                let found = match lock(&r.failure).clone() {
                    Some(why) => Err(why),
                    None => Ok(lock(&r.kept).values().cloned().collect()),
                };
                (key.clone(), found)
            })
            .collect()
    }

    fn start(&self, key: &WatchKey) -> Running<T> {
        self.signals.metrics.watch_started(F::kind(&()).as_ref());
        let api = F::api(self.client.clone(), key.namespace.as_deref());
        let config = watcher::Config {
            label_selector: key.label_selector(),
            field_selector: key.field_selector(),
            ..watcher::Config::default()
        };
        let (kept, synced, failure) = (Arc::default(), Arc::new(AtomicBool::new(false)), Arc::default());
        let name = format!("{} {key}", F::kind(&()));
        debug!(watch = %name, "starting watch");
        let report = Report {
            kept: Arc::clone(&kept),
            synced: Arc::clone(&synced),
            failure: self.failures_are_findings.then(|| Arc::clone(&failure)),
            signals: self.signals.clone(),
            name,
        };
        let task = tokio::spawn(watch::<F, T>(api, config, report));
        Running { kept, synced, failure, task }
    }
}

impl<F, T> WatchState for WatchSet<F, T> {
    fn synced(&self) -> bool {
        self.running.values().all(|r| r.synced.load(Ordering::Acquire))
    }

    fn alive(&self) -> bool {
        self.running.values().all(|r| !r.task.is_finished())
    }

    fn count(&self) -> usize {
        self.running.len()
    }
}

/// Where one watch reports.
struct Report<T> {
    kept: Arc<Mutex<Map<T>>>,
    synced: Arc<AtomicBool>,
    /// Set for a set whose failures are findings.
    failure: Option<Arc<Mutex<Option<String>>>>,
    signals: Signals,
    name: String,
}

impl<T> Report<T> {
    fn listed(&self, map: Map<T>) {
        *lock(&self.kept) = map;
        self.found(None);
        self.synced.store(true, Ordering::Release);
        self.signals.store_changed();
    }

    /// Records why the watch fails (`None`: it works); a changed answer wakes the loop.
    fn found(&self, why: Option<String>) {
        let Some(failure) = &self.failure else { return };
        let mut failure = lock(failure);
        if *failure != why {
            let failed = why.is_some();
            *failure = why;
            drop(failure);
            if failed {
                self.synced.store(true, Ordering::Release);
                self.signals.store_changed();
            }
        }
    }
}

fn key_of<F: Resource>(object: &F) -> (String, String) {
    let meta = object.meta();
    (meta.namespace.clone().unwrap_or_default(), meta.name.clone().unwrap_or_default())
}

async fn watch<F, T>(api: Api<F>, config: watcher::Config, report: Report<T>)
where
    F: Watchable,
    T: Keep<F>,
{
    let events = watcher(api, config).backoff(backoff::exponential(backoff::WATCH_CAP));
    futures::pin_mut!(events);
    // A (re)list is built aside and replaces the map when complete, so a pass never sees half a list.
    let mut listing: Option<Map<T>> = None;
    while let Some(event) = events.next().await {
        match event {
            Ok(watcher::Event::Init) => listing = Some(Map::new()),
            Ok(watcher::Event::InitApply(object)) => {
                let key = key_of(&object);
                listing.get_or_insert_with(Map::new).insert(key, Arc::new(T::keep(object)));
            }
            Ok(watcher::Event::InitDone) => report.listed(listing.take().unwrap_or_default()),
            Ok(watcher::Event::Apply(object)) => {
                let key = key_of(&object);
                lock(&report.kept).insert(key, Arc::new(T::keep(object)));
                report.signals.store_changed();
            }
            Ok(watcher::Event::Delete(object)) => {
                lock(&report.kept).remove(&key_of(&object));
                report.signals.store_changed();
            }
            Err(error) if report.failure.is_some() => {
                report.signals.metrics.watch_restarted(F::kind(&()).as_ref());
                debug!(watch = %report.name, %error, "watch failed; retrying with backoff");
                report.found(Some(refusal(&error)));
            }
            Err(error) => {
                report.signals.health.set_api_reachable(false);
                report.signals.metrics.watch_restarted(F::kind(&()).as_ref());
                warn!(watch = %report.name, %error, "watch failed; retrying with backoff");
            }
        }
    }
}

/// What the API server said, without the watcher's wording around it.
fn refusal(error: &watcher::Error) -> String {
    match error {
        watcher::Error::InitialListFailed(kube::Error::Api(status))
        | watcher::Error::WatchStartFailed(kube::Error::Api(status)) => status.message.clone(),
        watcher::Error::WatchError(status) => status.message.clone(),
        other => other.to_string(),
    }
}
