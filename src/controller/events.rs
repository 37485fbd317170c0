//! Turns the decision's notices into `events.k8s.io/v1` Events, once each: a notice is published when it first
//! appears or its message changes, and forgotten when it goes away, so a condition that comes back is told again.
//!
//! kube's `Recorder` is not used: it keys Events without their note, so a changed message ("published host A",
//! then "published host B") would only bump the first Event's count and users would read the stale note.

use std::collections::{BTreeSet, HashMap};

use futures::StreamExt;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, PostParams};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Duration;
use tracing::{info, warn};

use crate::plan::{MANAGER, Notice};

/// The Events API rejects longer notes.
const NOTE_LIMIT: usize = 1024;

/// How many Events are posted at once: enough that a thousand losing registries are told within a second or two,
/// few enough not to crowd the API server.
const CONCURRENT_POSTS: usize = 8;
/// How long a stopping controller waits for the Events still being posted.
const FLUSH_TIMEOUT: Duration = Duration::from_secs(5);

/// Hands each pass's notices to a background task, so a pass never waits for its Events: a change is published
/// first, and losing registries are told right after, concurrently. Only the latest notices matter; a condition that
/// came and went before it was told is not told.
pub struct EventLog {
    latest: mpsc::UnboundedSender<Vec<Notice>>,
    task: JoinHandle<()>,
}

impl EventLog {
    pub fn start(client: Client) -> Self {
        let (latest, receiver) = mpsc::unbounded_channel();
        let poster = Poster { client, instance: crate::pod::name(), said: HashMap::new() };
        Self { latest, task: tokio::spawn(poster.run(receiver)) }
    }

    /// What the current pass has to say; replaces what an earlier pass said and was not yet told.
    pub fn record(&self, notices: Vec<Notice>) {
        // Fails only when the task has ended, with the process.
        let _ = self.latest.send(notices);
    }

    /// Posts what is still pending, for a stopping controller.
    pub async fn finish(self) {
        let Self { latest, task } = self;
        drop(latest);
        if tokio::time::timeout(FLUSH_TIMEOUT, task).await.is_err() {
            warn!("stopped before every Event was recorded");
        }
    }
}

struct Poster {
    client: Client,
    instance: String,
    said: HashMap<Key, u64>,
}

/// A hash of (regarding object, reason), to a hash of the message last published for it: a thousand losing
/// registries' names and long messages need not stay in memory to be compared.
type Key = u64;

fn digest(value: impl std::hash::Hash) -> u64 {
    use std::hash::Hasher;
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    value.hash(&mut hasher);
    hasher.finish()
}

/// One Event to create, owned whole: posts run concurrently inside the spawned task.
struct Post {
    key: Key,
    digest: u64,
    object: String,
    events: Api<Event>,
    event: Event,
}

/// Creates the Event; returns what is now said, or `None` to try again with the next notices.
async fn post(post: Post) -> Option<(Key, u64)> {
    match post.events.create(&PostParams::default(), &post.event).await {
        Ok(_) => Some((post.key, post.digest)),
        Err(error) => {
            warn!(service = %post.object, %error, "could not record an Event; will try again");
            None
        }
    }
}

impl Poster {
    async fn run(mut self, mut latest: mpsc::UnboundedReceiver<Vec<Notice>>) {
        while let Some(mut notices) = latest.recv().await {
            // Only the newest pass's notices matter; what they replace is dropped, not kept.
            while let Ok(newer) = latest.try_recv() {
                notices = newer;
            }
            self.tell(&notices).await;
        }
    }

    /// Posts each notice that is new or whose message changed, and forgets the ones that went away.
    async fn tell(&mut self, notices: &[Notice]) {
        let mut current = BTreeSet::new();
        let mut posts = Vec::new();
        for notice in notices {
            let reference = &notice.regarding;
            let namespace = reference.namespace.clone().unwrap_or_else(|| "default".into());
            let name = reference.name.clone().unwrap_or_default();
            let object = format!("{namespace}/{name}");
            let key = digest((&object, reference.uid.as_deref(), notice.reason));
            current.insert(key);
            let digest = digest(&notice.message);
            if self.said.get(&key) == Some(&digest) {
                continue;
            }
            if notice.warning {
                warn!(service = %object, reason = notice.reason, "{}", notice.message);
            } else {
                info!(service = %object, reason = notice.reason, "{}", notice.message);
            }
            posts.push(Post {
                event: self.event(notice, &namespace, &name),
                events: Api::namespaced(self.client.clone(), &namespace),
                key,
                digest,
                object,
            });
        }
        self.said.retain(|key, _| current.contains(key));
        let posted: Vec<Option<(Key, u64)>> =
            futures::stream::iter(posts).map(post).buffer_unordered(CONCURRENT_POSTS).collect().await;
        self.said.extend(posted.into_iter().flatten());
    }

    fn event(&self, notice: &Notice, namespace: &str, name: &str) -> Event {
        let now = Timestamp::now();
        let mut note = notice.message.clone();
        if note.len() > NOTE_LIMIT {
            let cut = (0..=NOTE_LIMIT - 3).rev().find(|i| note.is_char_boundary(*i)).unwrap_or(0);
            note.truncate(cut);
            note.push_str("...");
        }
        let mut event = Event {
            action: Some("Publish".into()),
            reason: Some(notice.reason.into()),
            note: Some(note),
            type_: Some(if notice.warning { "Warning" } else { "Normal" }.into()),
            event_time: Some(MicroTime(now)),
            regarding: Some(notice.regarding.clone()),
            reporting_controller: Some(MANAGER.into()),
            reporting_instance: Some(self.instance.chars().take(128).collect()),
            ..Event::default()
        };
        event.metadata.namespace = Some(namespace.to_string());
        event.metadata.name = Some(format!("{name}.{:x}", now.as_nanosecond()));
        event
    }
}
