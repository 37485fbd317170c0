//! What the probes report: written by the watches, the reconcile loop and the leader elector, read by
//! [`crate::http`]. Kept apart from the web server so the loop does not depend on it.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

/// The reconcile loop beats at least this often; twice this without a beat means it is stuck.
pub const HEARTBEAT: Duration = Duration::from_secs(5);
/// Writes the API server refused in a row before /readyz says so: one may be a conflict that the retry fixes.
pub const FAILED_WRITES_NOT_READY: u32 = 3;

/// What the probes report, written by the watches and the reconcile loop.
#[derive(Debug)]
pub struct Health {
    synced: AtomicBool,
    api_reachable: AtomicBool,
    watches_alive: AtomicBool,
    /// Milliseconds from `started` to the last beat.
    heartbeat: AtomicU64,
    started: Instant,
    failed_writes: AtomicU32,
    lease_overdue: AtomicBool,
}

impl Default for Health {
    fn default() -> Self {
        let health = Self {
            synced: AtomicBool::new(false),
            api_reachable: AtomicBool::new(false),
            watches_alive: AtomicBool::new(true),
            heartbeat: AtomicU64::new(0),
            started: Instant::now(),
            failed_writes: AtomicU32::new(0),
            lease_overdue: AtomicBool::new(false),
        };
        health.beat();
        health
    }
}

impl Health {
    fn millis_since_start(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    pub fn beat(&self) {
        self.heartbeat.store(self.millis_since_start(), Ordering::Release);
    }

    pub fn set_synced(&self, synced: bool) {
        self.synced.store(synced, Ordering::Release);
    }

    pub fn set_api_reachable(&self, reachable: bool) {
        self.api_reachable.store(reachable, Ordering::Release);
    }

    /// Writes of the ConfigMap that failed in a row; zero after one succeeds.
    pub fn set_failed_writes(&self, count: u32) {
        self.failed_writes.store(count, Ordering::Release);
    }

    pub fn failed_writes(&self) -> u32 {
        self.failed_writes.load(Ordering::Acquire)
    }

    /// This replica led and could not renew its Lease by the renew deadline (a frozen connection, most likely):
    /// it stopped writing, and liveness fails so the pod is restarted with a fresh connection.
    pub fn set_lease_overdue(&self, overdue: bool) {
        self.lease_overdue.store(overdue, Ordering::Release);
    }

    pub fn set_watches_alive(&self, alive: bool) {
        self.watches_alive.store(alive, Ordering::Release);
    }

    /// Liveness: the reconcile loop beats and no watch task has died.
    pub fn live(&self) -> Result<(), &'static str> {
        let age = self.millis_since_start().saturating_sub(self.heartbeat.load(Ordering::Acquire));
        if Duration::from_millis(age) > 12 * HEARTBEAT {
            return Err("the reconcile loop has not run for a minute");
        }
        if !self.watches_alive.load(Ordering::Acquire) {
            return Err("a watch task has stopped");
        }
        if self.lease_overdue.load(Ordering::Acquire) {
            return Err("the leader Lease could not be renewed by the renew deadline; this replica stopped writing");
        }
        Ok(())
    }

    /// Readiness: live, caches synced, and the API server answering.
    pub fn ready(&self) -> Result<(), &'static str> {
        self.live()?;
        if !self.api_reachable.load(Ordering::Acquire) {
            return Err("the API server is not reachable");
        }
        if !self.synced.load(Ordering::Acquire) {
            return Err("the watch caches are not synced yet");
        }
        if self.failed_writes() >= FAILED_WRITES_NOT_READY {
            return Err("the API server refuses every write of the ConfigMap (see the PublishFailed Events)");
        }
        Ok(())
    }
}
