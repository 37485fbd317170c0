//! Watches filtered on the server side, one per [`WatchKey`], whose set can change as registries come and go.
//! Every watch feeds its own reflector store and wakes the reconcile loop on each change.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use k8s_openapi::{ClusterResourceScope, NamespaceResourceScope};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::{debug, warn};

use crate::backoff;
use crate::health::Health;
use crate::metrics::Metrics;

const NAME_FIELD: &str = "metadata.name=";

/// One server-side filtered watch: a namespace (or all) and label and field selectors.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct WatchKey {
    pub namespace: Option<String>,
    pub labels: Option<String>,
    pub fields: Option<String>,
}

impl WatchKey {
    pub fn in_namespace(namespace: Option<&str>) -> Self {
        Self { namespace: namespace.map(Into::into), ..Self::default() }
    }

    pub fn labels(mut self, selector: impl Into<String>) -> Self {
        self.labels = Some(selector.into());
        self
    }

    /// Only the object with this name, as a `metadata.name` field selector.
    pub fn named(mut self, name: &str) -> Self {
        self.fields = Some(format!("{NAME_FIELD}{name}"));
        self
    }

    /// The name [`WatchKey::named`] watches.
    pub fn name(&self) -> Option<&str> {
        self.fields.as_deref()?.strip_prefix(NAME_FIELD)
    }
}

impl std::fmt::Display for WatchKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "namespace={}", self.namespace.as_deref().unwrap_or("*"))?;
        if let Some(labels) = &self.labels {
            write!(f, " labels={labels}")?;
        }
        if let Some(fields) = &self.fields {
            write!(f, " fields={fields}")?;
        }
        Ok(())
    }
}

struct Running<K: Resource<DynamicType = ()> + 'static> {
    store: Store<K>,
    synced: Arc<AtomicBool>,
    /// Why the watch fails now, for a set whose failures are findings.
    failure: Option<Arc<Mutex<Option<String>>>>,
    task: JoinHandle<()>,
}

impl<K: Resource<DynamicType = ()> + 'static> Drop for Running<K> {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// What the reconcile loop asks of every watch set, whatever its kind.
pub trait WatchState {
    /// Whether every watch has listed its objects at least once.
    fn synced(&self) -> bool;
    /// Whether every watch task is still running (they only end when stopped).
    fn alive(&self) -> bool;
    /// How many watches run.
    fn count(&self) -> usize;
}

impl<K: Resource<DynamicType = ()> + 'static> WatchState for WatchSet<K> {
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

/// The default pruning: only the field managers go.
pub fn strip_managed_fields<K: Resource>(object: &mut K) {
    object.meta_mut().managed_fields = None;
}

/// A watch's objects, or why it fails now.
pub type Finding<K> = Result<Vec<Arc<K>>, String>;

type ApiFor<K> = fn(Client, Option<&str>) -> Api<K>;

/// Where every watch reports: a change to reconcile, a failure to count, the API server's reachability.
#[derive(Clone)]
pub struct Signals {
    /// Wakes the reconcile loop; changes that arrive while it is busy are taken by its next pass.
    pub changed: Arc<Notify>,
    /// Wakes every waiter on every stored change (the loop waiting for the echo of its own write).
    pub stored: Arc<Notify>,
    /// When the oldest change no pass has taken yet arrived: where the controller's reaction time starts.
    pending_since: Arc<Mutex<Option<Instant>>>,
    pub metrics: Metrics,
    pub health: Arc<Health>,
}

impl Signals {
    pub fn new(metrics: Metrics, health: Arc<Health>) -> Self {
        Self { changed: Arc::default(), stored: Arc::default(), pending_since: Arc::default(), metrics, health }
    }

    /// A watch stored a change (or finished listing).
    pub(super) fn store_changed(&self) {
        self.pending().get_or_insert_with(Instant::now);
        self.changed.notify_one();
        self.stored.notify_waiters();
    }

    /// When the oldest change not yet taken arrived, and takes it: the pass starting now covers it.
    pub fn take_pending(&self) -> Option<Instant> {
        self.pending().take()
    }

    fn pending(&self) -> std::sync::MutexGuard<'_, Option<Instant>> {
        // The guarded value is a plain timestamp, valid whatever a panicking holder was doing.
        self.pending_since.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The watches of one resource kind.
pub struct WatchSet<K: Resource<DynamicType = ()> + 'static> {
    client: Client,
    api_for: ApiFor<K>,
    signals: Signals,
    running: BTreeMap<WatchKey, Running<K>>,
    /// What is dropped from each object before it is stored: by default its field managers, often its largest part
    /// and read only for the ConfigMap; per kind, every field the controller never reads.
    prune: fn(&mut K),
    /// A failing watch is an answer about what it watches (a Secret we may not read), not about the API server.
    failures_are_findings: bool,
}

impl<K> WatchSet<K>
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + Debug
        + Send
        + Sync
        + 'static,
{
    pub fn namespaced(client: Client, signals: Signals) -> Self {
        let api_for: ApiFor<K> = |client, namespace| match namespace {
            Some(namespace) => Api::namespaced(client, namespace),
            None => Api::all(client),
        };
        Self::with_api(client, signals, api_for)
    }
}

impl<K> WatchSet<K>
where
    K: Resource<DynamicType = (), Scope = ClusterResourceScope>
        + Clone
        + DeserializeOwned
        + Debug
        + Send
        + Sync
        + 'static,
{
    pub fn cluster_scoped(client: Client, signals: Signals) -> Self {
        let api_for: ApiFor<K> = |client, _| Api::all(client);
        Self::with_api(client, signals, api_for)
    }
}

impl<K> WatchSet<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    fn with_api(client: Client, signals: Signals, api_for: ApiFor<K>) -> Self {
        let running = BTreeMap::new();
        Self { client, api_for, signals, running, prune: strip_managed_fields::<K>, failures_are_findings: false }
    }

    /// Stores objects whole, field managers included.
    pub fn keeping_managed_fields(mut self) -> Self {
        self.prune = |_| {};
        self
    }

    /// Stores what `prune` leaves of each object (it drops the field managers too).
    pub fn pruned(mut self, prune: fn(&mut K)) -> Self {
        self.prune = prune;
        self
    }

    /// A watch that fails counts as listed, with the failure as its answer (see [`WatchSet::findings`]), and does
    /// not mark the API server unreachable.
    pub fn failures_are_findings(mut self) -> Self {
        self.failures_are_findings = true;
        self
    }

    /// Each watch's objects, or why it fails now.
    pub fn findings(&self) -> Vec<(&WatchKey, Finding<K>)> {
        let failure =
            |r: &Running<K>| r.failure.as_ref()?.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
        self.running.iter().map(|(key, r)| (key, failure(r).map_or_else(|| Ok(r.store.state()), Err))).collect()
    }

    /// Runs exactly the watches in `keys`: starts the new ones and stops the ones no longer wanted.
    pub fn follow(&mut self, keys: impl IntoIterator<Item = WatchKey>) {
        let wanted: std::collections::BTreeSet<WatchKey> = keys.into_iter().collect();
        self.running.retain(|key, _| wanted.contains(key));
        for key in wanted {
            if !self.running.contains_key(&key) {
                let running = self.start(&key);
                self.running.insert(key, running);
            }
        }
    }

    /// Every object the watches hold.
    pub fn objects(&self) -> Vec<Arc<K>> {
        self.running.values().flat_map(|r| r.store.state()).collect()
    }

    fn start(&self, key: &WatchKey) -> Running<K> {
        let api = (self.api_for)(self.client.clone(), key.namespace.as_deref());
        let config = watcher::Config {
            label_selector: key.labels.clone(),
            field_selector: key.fields.clone(),
            ..watcher::Config::default()
        };
        let (store, writer) = reflector::store();
        let synced = Arc::new(AtomicBool::new(false));
        let name = format!("{} {key}", K::kind(&()));
        debug!(watch = %name, "starting watch");
        let failure = self.failures_are_findings.then(Arc::default);
        let outcome = Outcome { synced: synced.clone(), failure: failure.clone(), signals: self.signals.clone(), name };
        let task = tokio::spawn(watch(api, config, self.prune, writer, outcome));
        Running { store, synced, failure, task }
    }
}

/// Where one watch reports.
struct Outcome {
    synced: Arc<AtomicBool>,
    /// Set for a set whose failures are findings.
    failure: Option<Arc<Mutex<Option<String>>>>,
    signals: Signals,
    name: String,
}

impl Outcome {
    /// Records why the watch fails (`None`: it works); a changed answer wakes the reconcile loop.
    fn found(&self, why: Option<String>) {
        let Some(failure) = &self.failure else { return };
        let mut failure = failure.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if *failure != why {
            *failure = why;
            drop(failure);
            self.synced.store(true, Ordering::Release);
            self.signals.store_changed();
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

async fn watch<K>(
    api: Api<K>,
    config: watcher::Config,
    prune: fn(&mut K),
    writer: reflector::store::Writer<K>,
    outcome: Outcome,
) where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    let events = watcher(api, config).backoff(backoff::exponential(backoff::WATCH_CAP)).modify(prune);
    let stream = reflector::reflector(writer, events);
    futures::pin_mut!(stream);
    while let Some(event) = stream.next().await {
        let Outcome { synced, signals, name, .. } = &outcome;
        match event {
            Ok(watcher::Event::InitDone) => {
                outcome.found(None);
                synced.store(true, Ordering::Release);
                signals.store_changed();
            }
            Ok(watcher::Event::Apply(_) | watcher::Event::Delete(_)) => signals.store_changed(),
            Ok(watcher::Event::Init | watcher::Event::InitApply(_)) => {}
            Err(error) if outcome.failure.is_some() => {
                signals.metrics.watch_restarted(K::kind(&()).as_ref());
                debug!(watch = %name, %error, "watch failed; retrying with backoff");
                outcome.found(Some(refusal(&error)));
            }
            Err(error) => watch_failed(signals, K::kind(&()).as_ref(), name, &error),
        }
    }
}

/// A watch of `kind` failed: the API server may be out of reach. The watcher retries with backoff.
pub(super) fn watch_failed(signals: &Signals, kind: &str, name: &str, error: &watcher::Error) {
    signals.health.set_api_reachable(false);
    signals.metrics.watch_restarted(kind);
    warn!(watch = %name, %error, "watch failed; retrying with backoff");
}
