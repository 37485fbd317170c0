//! Watching every namespace, which Services carry the registry selector, everywhere, kept as their [`Identity`]
//! alone: a tenant's labelled Services are only told they are ignored, which needs no more. A reflector store would
//! keep each as a whole `ObjectMeta` (over 400 bytes before its strings) keyed by a copy of its name, so this keeps
//! its own map, filled from a metadata-only watch: about 300 bytes a Service.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Service;
use kube::core::PartialObjectMeta;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use tokio::task::JoinHandle;
use tracing::debug;

use super::watches::{Signals, WatchKey, WatchState, watch_failed};
use crate::backoff;
use crate::registry::{Identity, ServiceId};

type Map = BTreeMap<ServiceId, Arc<Identity>>;

/// At most one watch: every namespace, by the registry selector.
pub struct IdentityWatch {
    running: Option<Running>,
}

struct Running {
    identities: Arc<Mutex<Map>>,
    synced: Arc<AtomicBool>,
    task: JoinHandle<()>,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl IdentityWatch {
    /// Runs the watch `key` describes, for as long as the controller runs; `None` runs none.
    pub fn new(client: Client, signals: Signals, key: Option<WatchKey>) -> Self {
        Self { running: key.map(|key| start(client, signals, &key)) }
    }

    /// Every identity, in namespace and name order.
    pub fn identities(&self) -> Vec<Arc<Identity>> {
        let Some(running) = &self.running else { return Vec::new() };
        lock(&running.identities).values().cloned().collect()
    }
}

fn start(client: Client, signals: Signals, key: &WatchKey) -> Running {
    let api: Api<PartialObjectMeta<Service>> = match &key.namespace {
        Some(namespace) => Api::namespaced(client, namespace),
        None => Api::all(client),
    };
    let config = watcher::Config { label_selector: key.labels.clone(), ..watcher::Config::default() };
    let identities: Arc<Mutex<Map>> = Arc::default();
    let synced = Arc::new(AtomicBool::new(false));
    let name = format!("Service metadata {key}");
    debug!(watch = %name, "starting watch");
    let task = tokio::spawn(watch(api, config, identities.clone(), synced.clone(), signals, name));
    Running { identities, synced, task }
}

impl WatchState for IdentityWatch {
    fn synced(&self) -> bool {
        self.running.as_ref().is_none_or(|r| r.synced.load(Ordering::Acquire))
    }

    fn alive(&self) -> bool {
        self.running.as_ref().is_none_or(|r| !r.task.is_finished())
    }

    fn count(&self) -> usize {
        usize::from(self.running.is_some())
    }
}

fn lock(identities: &Mutex<Map>) -> std::sync::MutexGuard<'_, Map> {
    // The map holds plain values, valid whatever a panicking holder was doing.
    identities.lock().unwrap_or_else(PoisonError::into_inner)
}

fn entry(object: &PartialObjectMeta<Service>) -> (ServiceId, Arc<Identity>) {
    let identity = Identity::of(&object.metadata);
    (identity.id.clone(), Arc::new(identity))
}

async fn watch(
    api: Api<PartialObjectMeta<Service>>,
    config: watcher::Config,
    identities: Arc<Mutex<Map>>,
    synced: Arc<AtomicBool>,
    signals: Signals,
    name: String,
) {
    let events = watcher(api, config).backoff(backoff::exponential(backoff::WATCH_CAP));
    futures::pin_mut!(events);
    // A (re)list is built aside and replaces the map when complete, so a pass never sees half a list.
    let mut listing: Option<Map> = None;
    while let Some(event) = events.next().await {
        match event {
            Ok(watcher::Event::Init) => listing = Some(Map::new()),
            Ok(watcher::Event::InitApply(object)) => {
                listing.get_or_insert_with(Map::new).extend([entry(&object)]);
            }
            Ok(watcher::Event::InitDone) => {
                *lock(&identities) = listing.take().unwrap_or_default();
                synced.store(true, Ordering::Release);
                signals.store_changed();
            }
            Ok(watcher::Event::Apply(object)) => {
                let (id, identity) = entry(&object);
                lock(&identities).insert(id, identity);
                signals.store_changed();
            }
            Ok(watcher::Event::Delete(object)) => {
                lock(&identities).remove(&Identity::of(&object.metadata).id);
                signals.store_changed();
            }
            Err(error) => watch_failed(&signals, "Service", &name, &error),
        }
    }
}
