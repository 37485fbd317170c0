//! Watches filtered on the server side, one per [`WatchKey`](crate::watching::WatchKey), grouped in sets of one kind whose keys change as the
//! pure core's interest does. Every watch keeps what its kind's [`Keep`](crate::watching::Keep) says of each object, in a map of its own
//! that a relist replaces whole, and wakes its concern's loop on each change. `watch_sets!` makes a concern's
//! sets from the same list its pure interest and snapshot come from; [`settle`] is the one way any caller (a
//! reconcile loop, `doctor`) gets a complete snapshot.

mod set;
pub mod sets;

use std::sync::{Arc, Mutex};

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::health::Health;
use crate::metrics::Metrics;
pub use set::{Followed, WatchSet, WatchState};

/// Where every watch of one concern reports: a change to reconcile, a failure to count, the API server's
/// reachability.
#[derive(Clone)]
pub struct Signals {
    /// Wakes the concern's loop; changes that arrive while it is busy are taken by its next pass.
    pub changed: Arc<Notify>,
    /// Wakes every waiter on every stored change (a loop waiting for the echo of its own write).
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
    fn store_changed(&self) {
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

/// A concern's watch sets, made by `watch_sets!`.
pub trait WatchSets: Sized {
    type Interest: PartialEq;
    type Snapshot;
    /// The sets with no watch running yet; each watch reports to `signals`.
    fn new(client: &kube::Client, signals: &Signals) -> Self;
    /// Runs exactly the watches `interest` names.
    fn follow(&mut self, interest: &Self::Interest) -> Followed;
    fn snapshot(&self) -> Self::Snapshot;
    fn states(&self) -> Vec<&dyn WatchState>;

    /// Whether every watch has listed its objects at least once.
    fn synced(&self) -> bool {
        self.states().iter().all(|s| s.synced())
    }

    /// Whether every watch task is still running (they only end when stopped).
    fn alive(&self) -> bool {
        self.states().iter().all(|s| s.alive())
    }

    /// How many watches run.
    fn count(&self) -> usize {
        self.states().iter().map(|s| s.count()).sum()
    }
}

/// Makes the watches follow the interest of what they hold, and returns a snapshot when it is complete: every
/// watch the snapshot's interest needs was running and had listed when it was taken. Otherwise `None`, and the
/// concern's `changed` signal fires when looking again can help (a new watch has listed, a stopped one's objects
/// are gone).
pub fn settle<W: WatchSets>(
    watches: &mut W,
    signals: &Signals,
    interest_of: impl Fn(&W::Snapshot) -> W::Interest,
) -> Option<W::Snapshot> {
    // Checked before the snapshot: a watch that lists in between would otherwise leave it incomplete unseen.
    let synced = watches.synced();
    let snapshot = watches.snapshot();
    let followed = watches.follow(&interest_of(&snapshot));
    if followed.stopped > 0 {
        // The snapshot still holds what the stopped watches stored (the Delete that made a watch unneeded may arrive
        // only on that watch): look again at once.
        signals.changed.notify_one();
    }
    // A started watch wakes the loop when it has listed.
    (synced && followed.unchanged()).then_some(snapshot)
}

/// A complete snapshot of what `interest_of` asks for, read once by watches that stop when it is returned: what
/// a running task would decide on, for `doctor`, which reads with its own identity.
pub async fn observe<W: WatchSets>(
    client: &kube::Client,
    interest_of: impl Fn(&W::Snapshot) -> W::Interest,
) -> W::Snapshot {
    let signals = Signals::new(Metrics::default(), Arc::default());
    let mut watches = W::new(client, &signals);
    loop {
        if let Some(snapshot) = settle(&mut watches, &signals, &interest_of) {
            return snapshot;
        }
        signals.changed.notified().await;
    }
}

/// Makes a concern's runtime watch sets from its list (the same list its pure `Interest` and snapshot come from):
/// `watch_sets!(list, Watches, Interest, Snapshot)`.
macro_rules! watch_sets {
    ($list:ident, $watches:ident, $interest:ty, $snapshot:path) => {
        $list!(watch_sets! { @make $watches, $interest, $snapshot, });
    };
    (@make $watches:ident, $interest:ty, $snapshot:path,
     $( $(#[$doc:meta])* $name:ident : $from:ty => $kept:ty $([$view:ident])? ),* $(,)?) => {
        pub struct $watches {
            $( pub(crate) $name: $crate::watch::WatchSet<$from, $kept>, )*
        }

        impl $crate::watch::WatchSets for $watches {
            type Interest = $interest;
            type Snapshot = $snapshot;

            fn new(client: &kube::Client, signals: &$crate::watch::Signals) -> Self {
                Self {
                    $( $name: $crate::watch::WatchSet::new(client.clone(), signals.clone())
                        $(.$view())?, )*
                }
            }

            fn follow(&mut self, interest: &$interest) -> $crate::watch::Followed {
                let mut followed = $crate::watch::Followed::default();
                $( followed += self.$name.follow(&interest.$name); )*
                followed
            }

            fn snapshot(&self) -> $snapshot {
                $snapshot { $( $name: $crate::watch::snapshot_of!(self.$name $(, $view)?), )* }
            }

            fn states(&self) -> Vec<&dyn $crate::watch::WatchState> {
                vec![ $( &self.$name, )* ]
            }
        }
    };
}
pub(crate) use watch_sets;

/// What a snapshot takes of one set: its objects, or per watch its findings.
macro_rules! snapshot_of {
    ($set:expr) => {
        $set.objects()
    };
    ($set:expr, findings) => {
        $set.findings_of()
    };
}
pub(crate) use snapshot_of;
