//! Turns a concern's notices into `events.k8s.io/v1` Events, once each: a notice is posted when it first appears or
//! its message changes, and forgotten when it goes away, so a condition that comes back is told again. Each concern
//! has its own log, since each pass hands over everything that concern has to say.
//!
//! kube's `Recorder` is not used: it keys Events without their note, so a changed message ("published host A",
//! then "published host B") would only bump the first Event's count and users would read the stale note.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use futures::StreamExt;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, PostParams};
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::Duration;
use tracing::{info, warn};

use k8s_openapi::api::core::v1::ObjectReference;

use crate::keys::MANAGER;

/// What an Event is made of; every concern's notice type says it, beside its own definition.
pub trait Tell: Send + Sync + 'static {
    fn regarding(&self) -> &ObjectReference;
    /// A bounded PascalCase label.
    fn reason(&self) -> &'static str;
    fn warning(&self) -> bool;
    fn message(&self) -> &str;
    /// Something that happened (told once), not a state (told while it lasts): a later pass's notices, which
    /// replace those not yet told, do not drop it.
    fn occurrence(&self) -> bool {
        false
    }
}

/// `Tell` for a notice of the usual shape (`regarding`, a `reason` enum with `as_str`, a `message`), written beside
/// the notice: `impl_tell!(Notice, |n| warning, |n| occurrence)`.
macro_rules! impl_tell {
    ($notice:ty, $warning:expr) => {
        $crate::events::impl_tell!($notice, $warning, |_: &$notice| false);
    };
    ($notice:ty, $warning:expr, $occurrence:expr) => {
        impl $crate::events::Tell for $notice {
            fn regarding(&self) -> &k8s_openapi::api::core::v1::ObjectReference {
                &self.regarding
            }
            fn reason(&self) -> &'static str {
                self.reason.as_str()
            }
            fn warning(&self) -> bool {
                $warning(self)
            }
            fn message(&self) -> &str {
                &self.message
            }
            fn occurrence(&self) -> bool {
                $occurrence(self)
            }
        }
    };
}
pub(crate) use impl_tell;

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
pub struct EventLog<N> {
    latest: Arc<Latest<N>>,
    task: JoinHandle<()>,
}

/// One slot: while Events are being posted, a burst of passes leaves only its last notices waiting, and once told
/// they are not kept.
struct Latest<N> {
    notices: Mutex<Option<Vec<N>>>,
    wake: Notify,
    closed: AtomicBool,
}

impl<N: Tell> Latest<N> {
    /// Replaces the notices not yet told, keeping their occurrences.
    fn put(&self, mut notices: Vec<N>) {
        let mut slot = self.slot();
        if let Some(untold) = slot.take() {
            let kept: Vec<N> =
                untold.into_iter().filter(|n| n.occurrence() && !notices.iter().any(|m| same(m, n))).collect();
            notices.extend(kept);
        }
        *slot = Some(notices);
    }
}

impl<N> Latest<N> {
    fn slot(&self) -> std::sync::MutexGuard<'_, Option<Vec<N>>> {
        // The slot holds plain values, valid whatever a panicking holder was doing.
        self.notices.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl<N: Tell> EventLog<N> {
    /// `action` names what the concern does, in each Event's `action` field; `instance` names this replica.
    pub fn start(client: Client, action: &'static str, instance: &str) -> Self {
        let latest =
            Arc::new(Latest { notices: Mutex::new(None), wake: Notify::new(), closed: AtomicBool::new(false) });
        let poster = Poster { client, action, instance: instance.to_string(), said: HashMap::new() };
        Self { task: tokio::spawn(poster.run(latest.clone())), latest }
    }

    /// What the current pass has to say; replaces what an earlier pass said and was not yet told, but for its
    /// occurrences.
    pub fn record(&self, notices: Vec<N>) {
        self.latest.put(notices);
        self.latest.wake.notify_one();
    }

    /// Posts what is still pending, for a stopping controller.
    pub async fn finish(self) {
        let Self { latest, task } = self;
        latest.closed.store(true, Ordering::Release);
        latest.wake.notify_one();
        if tokio::time::timeout(FLUSH_TIMEOUT, task).await.is_err() {
            warn!("stopped before every Event was recorded");
        }
    }
}

/// The same notice: about the same object, for the same reason, saying the same.
fn same(a: &impl Tell, b: &impl Tell) -> bool {
    let object = |n: &dyn Tell| (n.regarding().namespace.clone(), n.regarding().name.clone());
    a.reason() == b.reason() && a.message() == b.message() && object(a) == object(b)
}

struct Poster {
    client: Client,
    action: &'static str,
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

/// One Event to create. Posts run concurrently inside the spawned task, a few at a time, and each builds its Event
/// only when it starts: a thousand losing registries' Events are never all in memory at once.
struct Post<N> {
    key: Key,
    digest: u64,
    object: String,
    namespace: String,
    name: String,
    notices: Arc<Vec<N>>,
    index: usize,
}

impl Poster {
    async fn run<N: Tell>(mut self, latest: Arc<Latest<N>>) {
        loop {
            latest.wake.notified().await;
            let notices = latest.slot().take();
            if let Some(notices) = notices {
                self.tell(Arc::new(notices)).await;
            }
            // Ends when the log is finished and its last notices were told.
            if latest.closed.load(Ordering::Acquire) && latest.slot().is_none() {
                break;
            }
        }
    }

    /// Posts what is new or changed ([`posting_order`]), and forgets the notices that went away.
    async fn tell<N: Tell>(&mut self, notices: Arc<Vec<N>>) {
        let keyed: Vec<Keyed> = notices.iter().map(Keyed::of).collect();
        let order = posting_order(&self.said, &keyed);
        let current: BTreeSet<Key> = keyed.iter().map(|k| k.key).collect();
        let mut keyed: Vec<Option<Keyed>> = keyed.into_iter().map(Some).collect();
        let mut posts = Vec::new();
        for index in order {
            let Some(Keyed { key, digest, object, namespace, name }) = keyed[index].take() else { continue };
            let notice = &notices[index];
            if notice.warning() {
                warn!(object = %object, reason = notice.reason(), "{}", notice.message());
            } else {
                info!(object = %object, reason = notice.reason(), "{}", notice.message());
            }
            posts.push(Post { key, digest, object, namespace, name, notices: notices.clone(), index });
        }
        self.said.retain(|key, _| current.contains(key));
        let posts = posts.into_iter().map(|p| post(self.client.clone(), self.action, &self.instance, p));
        let posted: Vec<Option<(Key, u64)>> =
            futures::stream::iter(posts).buffer_unordered(CONCURRENT_POSTS).collect().await;
        self.said.extend(posted.into_iter().flatten());
    }
}

/// A notice's object and its keys in [`Poster::said`].
struct Keyed {
    key: Key,
    digest: u64,
    object: String,
    namespace: String,
    name: String,
}

impl Keyed {
    fn of(notice: &impl Tell) -> Self {
        let reference = notice.regarding();
        let namespace = reference.namespace.clone().unwrap_or_else(|| "default".into());
        let name = reference.name.clone().unwrap_or_default();
        let object = format!("{namespace}/{name}");
        let key = digest((&object, reference.uid.as_deref(), notice.reason()));
        Self { key, digest: digest(notice.message()), object, namespace, name }
    }
}

/// The indexes of the notices to post: each one new or whose message changed since it was told.
fn posting_order(said: &HashMap<Key, u64>, keyed: &[Keyed]) -> Vec<usize> {
    (0..keyed.len()).filter(|&i| said.get(&keyed[i].key) != Some(&keyed[i].digest)).collect()
}

/// Creates the Event; returns what is now said, or `None` to try again with the next notices.
async fn post<N: Tell>(client: Client, action: &str, instance: &str, post: Post<N>) -> Option<(Key, u64)> {
    let event = event(action, instance, &post.notices[post.index], &post.namespace, &post.name);
    let events: Api<Event> = Api::namespaced(client, &post.namespace);
    match events.create(&PostParams::default(), &event).await {
        Ok(_) => Some((post.key, post.digest)),
        Err(error) => {
            warn!(service = %post.object, %error, "could not record an Event; will try again");
            None
        }
    }
}

fn event(action: &str, instance: &str, notice: &impl Tell, namespace: &str, name: &str) -> Event {
    let now = Timestamp::now();
    let mut note = notice.message().to_string();
    if note.len() > NOTE_LIMIT {
        let cut = (0..=NOTE_LIMIT - 3).rev().find(|i| note.is_char_boundary(*i)).unwrap_or(0);
        note.truncate(cut);
        note.push_str("...");
    }
    let mut event = Event {
        action: Some(action.into()),
        reason: Some(notice.reason().into()),
        note: Some(note),
        type_: Some(if notice.warning() { "Warning" } else { "Normal" }.into()),
        event_time: Some(MicroTime(now)),
        regarding: Some(notice.regarding().clone()),
        reporting_controller: Some(MANAGER.into()),
        reporting_instance: Some(instance.chars().take(128).collect()),
        ..Event::default()
    };
    event.metadata.namespace = Some(namespace.to_string());
    event.metadata.name = Some(format!("{name}.{:x}", now.as_nanosecond()));
    event
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A concern's notice as the Event task sees it: a state told while it lasts, or an occurrence told once.
    #[derive(Clone, Debug)]
    struct Notice {
        regarding: ObjectReference,
        reason: Reason,
        message: String,
    }

    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    enum Reason {
        NotPublished,
        Published,
        ConflictingWriter,
    }

    impl Reason {
        fn as_str(self) -> &'static str {
            match self {
                Reason::NotPublished => "NotPublished",
                Reason::Published => "Published",
                Reason::ConflictingWriter => "ConflictingWriter",
            }
        }
    }

    impl_tell!(Notice, |_: &Notice| false, |n: &Notice| n.reason == Reason::ConflictingWriter);

    fn notice(name: &str, reason: Reason, message: &str) -> Notice {
        let regarding = ObjectReference { name: Some(name.into()), ..ObjectReference::default() };
        Notice { regarding, reason, message: message.to_string() }
    }

    #[test]
    fn only_a_new_notice_or_one_whose_message_changed_is_posted() {
        let first =
            [notice("zot", Reason::NotPublished, "no ready endpoint"), notice("harbor", Reason::Published, "a")];
        let mut said = HashMap::new();
        let keyed: Vec<Keyed> = first.iter().map(Keyed::of).collect();
        assert_eq!(posting_order(&said, &keyed), [0, 1], "all new");
        said.extend(keyed.iter().map(|k| (k.key, k.digest)));
        assert_eq!(posting_order(&said, &keyed), [0usize; 0], "nothing changed");
        let second =
            [notice("zot", Reason::NotPublished, "no ready endpoint"), notice("harbor", Reason::Published, "b")];
        let keyed: Vec<Keyed> = second.iter().map(Keyed::of).collect();
        assert_eq!(posting_order(&said, &keyed), [1], "only the changed message");
    }

    #[test]
    fn a_later_pass_replaces_untold_states_but_keeps_untold_occurrences_once() {
        let latest = Latest { notices: Mutex::new(None), wake: Notify::new(), closed: AtomicBool::new(false) };
        let hold = notice("local-registry-hosting", Reason::ConflictingWriter, "writes wait 30s");
        latest.put(vec![notice("zot", Reason::NotPublished, "no ready endpoint"), hold.clone()]);
        latest.put(vec![notice("zot", Reason::Published, "published")]);
        latest.put(vec![hold.clone()]);
        let untold = latest.slot().take().expect("notices");
        let told: Vec<(&str, Reason)> = untold.iter().map(|n| (n.message.as_ref(), n.reason)).collect();
        assert_eq!(
            told,
            [("writes wait 30s", Reason::ConflictingWriter)],
            "the state went, the occurrence stayed once"
        );
        // An untold occurrence outlives a later pass that does not repeat it.
        latest.put(vec![hold.clone()]);
        latest.put(vec![notice("zot", Reason::Published, "published")]);
        let untold = latest.slot().take().expect("notices");
        let told: Vec<Reason> = untold.iter().map(|n| n.reason).collect();
        assert_eq!(told, [Reason::Published, Reason::ConflictingWriter]);
    }

    #[test]
    fn the_same_notice_is_about_the_same_object_for_the_same_reason_saying_the_same() {
        let zot = notice("zot", Reason::NotPublished, "no ready endpoint");
        assert!(same(&zot, &zot.clone()));
        assert!(!same(&zot, &notice("harbor", Reason::NotPublished, "no ready endpoint")), "another object");
        assert!(!same(&zot, &notice("zot", Reason::Published, "no ready endpoint")), "another reason");
        assert!(!same(&zot, &notice("zot", Reason::NotPublished, "published")), "another message");
    }

    #[test]
    fn an_event_says_the_notice_in_the_events_api_shape_with_its_note_cut_to_the_limit() {
        let zot = notice("zot", Reason::NotPublished, "no ready endpoint");
        let told = event("Publish", "lrp-7d9f8b6c5d-x2x4z", &zot, "registry", "zot");
        assert_eq!(told.action.as_deref(), Some("Publish"));
        assert_eq!(told.reason.as_deref(), Some("NotPublished"));
        assert_eq!(told.note.as_deref(), Some("no ready endpoint"));
        assert_eq!(told.type_.as_deref(), Some("Normal"));
        assert!(told.event_time.is_some());
        assert_eq!(told.regarding.as_ref(), Some(&zot.regarding));
        assert_eq!(told.reporting_controller.as_deref(), Some(MANAGER));
        assert_eq!(told.reporting_instance.as_deref(), Some("lrp-7d9f8b6c5d-x2x4z"));
        assert_eq!(told.metadata.namespace.as_deref(), Some("registry"));
        assert!(told.metadata.name.as_deref().is_some_and(|n| n.starts_with("zot.")), "{:?}", told.metadata.name);
        // At the limit a note is whole; over it, cut on a character boundary and marked, within the limit.
        let whole = "a".repeat(NOTE_LIMIT);
        let told = event("Publish", "lrp", &notice("zot", Reason::NotPublished, &whole), "registry", "zot");
        assert_eq!(told.note, Some(whole));
        let long = "\u{e9}".repeat(NOTE_LIMIT);
        let told = event("Publish", "lrp", &notice("zot", Reason::NotPublished, &long), "registry", "zot");
        let note = told.note.expect("a note");
        assert!(note.ends_with("...") && (NOTE_LIMIT - 4..=NOTE_LIMIT).contains(&note.len()), "{}", note.len());
    }

    /// A notice type that says nothing of occurrences.
    struct Plain(Notice);

    impl Tell for Plain {
        fn regarding(&self) -> &ObjectReference {
            &self.0.regarding
        }
        fn reason(&self) -> &'static str {
            self.0.reason.as_str()
        }
        fn warning(&self) -> bool {
            false
        }
        fn message(&self) -> &str {
            &self.0.message
        }
    }

    #[test]
    fn a_notice_is_a_state_unless_its_type_says_it_is_an_occurrence() {
        let latest = Latest { notices: Mutex::new(None), wake: Notify::new(), closed: AtomicBool::new(false) };
        latest.put(vec![Plain(notice("zot", Reason::NotPublished, "no ready endpoint"))]);
        latest.put(Vec::new());
        assert!(latest.slot().take().expect("notices").is_empty(), "a state is not told once it is gone");
    }
}
