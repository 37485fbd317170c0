//! What the probes report: written by every task, the API probe and the leader elector, read by [`crate::http`].
//! Kept apart from the web server so the tasks do not depend on it.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

/// Every task beats at least this often; twelve times this without a beat means it is stuck.
pub const HEARTBEAT: Duration = Duration::from_secs(5);
/// Writes the API server refused in a row before /readyz says so: one may be a conflict that the retry fixes.
pub const FAILED_WRITES_NOT_READY: u32 = 3;

/// The tasks of a process, each with its own watches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Task {
    Publisher,
    PullSecrets,
    NodePlan,
    /// Whether kube-proxy serves the published loopback NodePort addresses.
    KubeProxy,
    /// The node agent's one loop (the `node-agent` command runs nothing else).
    NodeAgent,
}

impl Task {
    const ALL: [Task; 5] = [Task::Publisher, Task::PullSecrets, Task::NodePlan, Task::KubeProxy, Task::NodeAgent];

    fn index(self) -> usize {
        match self {
            Task::Publisher => 0,
            Task::PullSecrets => 1,
            Task::NodePlan => 2,
            Task::KubeProxy => 3,
            Task::NodeAgent => 4,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Task::Publisher => "publisher",
            Task::PullSecrets => "pull-secrets",
            Task::NodePlan => "node-plan",
            Task::KubeProxy => "kube-proxy",
            Task::NodeAgent => "node-agent",
        }
    }
}

/// One task's state.
#[derive(Debug, Default)]
struct TaskHealth {
    running: AtomicBool,
    synced: AtomicBool,
    watches_alive: AtomicBool,
    /// Milliseconds from `started` to the last beat.
    heartbeat: AtomicU64,
    /// When the next pass is due at the latest, in milliseconds from `started`; 0 when the task promises none.
    pass_due: AtomicU64,
}

#[derive(Debug)]
pub struct Health {
    tasks: [TaskHealth; Task::ALL.len()],
    api_reachable: AtomicBool,
    started: Instant,
    failed_writes: AtomicU32,
    lease_overdue: AtomicBool,
}

impl Default for Health {
    fn default() -> Self {
        Self {
            tasks: Default::default(),
            api_reachable: AtomicBool::new(false),
            started: Instant::now(),
            failed_writes: AtomicU32::new(0),
            lease_overdue: AtomicBool::new(false),
        }
    }
}

impl Health {
    fn millis_since_start(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn task(&self, task: Task) -> &TaskHealth {
        &self.tasks[task.index()]
    }

    /// A task starts: from now on the probes answer for it too.
    pub fn start(&self, task: Task) {
        let state = self.task(task);
        state.watches_alive.store(true, Ordering::Release);
        state.heartbeat.store(self.millis_since_start(), Ordering::Release);
        state.running.store(true, Ordering::Release);
    }

    /// The task's loop is alive, and whether its watch tasks are.
    pub fn beat(&self, task: Task, watches_alive: bool) {
        let state = self.task(task);
        state.heartbeat.store(self.millis_since_start(), Ordering::Release);
        state.watches_alive.store(watches_alive, Ordering::Release);
    }

    /// A pass of `task` ended; the next is due `within`, and the task is unready once it is late.
    pub fn passed(&self, task: Task, within: Duration) {
        let within = u64::try_from(within.as_millis()).unwrap_or(u64::MAX);
        self.task(task).pass_due.store(self.millis_since_start().saturating_add(within).max(1), Ordering::Release);
    }

    pub fn set_synced(&self, task: Task, synced: bool) {
        self.task(task).synced.store(synced, Ordering::Release);
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

    fn running(&self) -> impl Iterator<Item = (Task, &TaskHealth)> {
        Task::ALL.into_iter().map(|t| (t, self.task(t))).filter(|(_, s)| s.running.load(Ordering::Acquire))
    }

    /// Liveness: every task's loop beats and none of its watch tasks has died.
    pub fn live(&self) -> Result<(), String> {
        let now = self.millis_since_start();
        for (task, state) in self.running() {
            let age = now.saturating_sub(state.heartbeat.load(Ordering::Acquire));
            if Duration::from_millis(age) > 12 * HEARTBEAT {
                return Err(format!("the {} loop has not run for a minute", task.name()));
            }
            if !state.watches_alive.load(Ordering::Acquire) {
                return Err(format!("a watch task of the {} has stopped", task.name()));
            }
        }
        if self.lease_overdue.load(Ordering::Acquire) {
            return Err(
                "the leader Lease could not be renewed by the renew deadline; this replica stopped writing".into()
            );
        }
        Ok(())
    }

    /// Readiness: live, every task's caches synced, and the API server answering.
    pub fn ready(&self) -> Result<(), String> {
        self.live()?;
        if !self.api_reachable.load(Ordering::Acquire) {
            return Err("the API server is not reachable".into());
        }
        if self.running().next().is_none() {
            return Err("no task has started yet".into());
        }
        if let Some((task, _)) = self.running().find(|(_, s)| !s.synced.load(Ordering::Acquire)) {
            return Err(format!("the {}'s watch caches are not synced yet", task.name()));
        }
        let now = self.millis_since_start();
        let late = |state: &TaskHealth| matches!(state.pass_due.load(Ordering::Acquire), due if due != 0 && due < now);
        if let Some((task, _)) = self.running().find(|(_, s)| late(s)) {
            return Err(format!("the {} has not passed over its work in time", task.name()));
        }
        if self.failed_writes() >= FAILED_WRITES_NOT_READY {
            return Err("the API server refuses every write of the ConfigMap (see the PublishFailed Events)".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_once_every_started_task_has_synced_and_the_api_answers() {
        let health = Health::default();
        health.set_api_reachable(true);
        assert!(health.ready().is_err_and(|why| why.contains("no task")));
        health.start(Task::Publisher);
        assert!(health.ready().is_err_and(|why| why.contains("publisher")));
        health.set_synced(Task::Publisher, true);
        assert_eq!(health.ready(), Ok(()), "a task not started does not count");
        health.start(Task::PullSecrets);
        assert!(health.ready().is_err_and(|why| why.contains("pull-secrets")));
        health.set_synced(Task::PullSecrets, true);
        assert_eq!(health.ready(), Ok(()));
        health.set_api_reachable(false);
        assert!(health.ready().is_err_and(|why| why.contains("API server")));
        health.set_api_reachable(true);
        health.set_failed_writes(FAILED_WRITES_NOT_READY - 1);
        assert_eq!(health.ready(), Ok(()), "two refusals may be a conflict the retry fixes");
        health.set_failed_writes(FAILED_WRITES_NOT_READY);
        assert!(health.ready().is_err_and(|why| why.contains("refuses")));
    }

    #[test]
    fn a_dead_watch_or_an_overdue_lease_fails_liveness() {
        let health = Health::default();
        health.start(Task::PullSecrets);
        assert_eq!(health.live(), Ok(()));
        health.beat(Task::PullSecrets, false);
        assert!(health.live().is_err_and(|why| why.contains("pull-secrets")));
        health.beat(Task::PullSecrets, true);
        health.set_lease_overdue(true);
        assert!(health.live().is_err_and(|why| why.contains("Lease")));
    }

    #[tokio::test(start_paused = true)]
    async fn a_loop_is_live_for_twelve_heartbeats_after_its_last_beat_and_not_a_moment_longer() {
        let health = Health::default();
        health.start(Task::PullSecrets);
        tokio::time::advance(12 * HEARTBEAT).await;
        assert_eq!(health.live(), Ok(()), "twelve heartbeats late is still live");
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(health.live().is_err_and(|why| why.contains("pull-secrets loop has not run")));
        health.beat(Task::PullSecrets, true);
        assert_eq!(health.live(), Ok(()));
    }

    #[tokio::test(start_paused = true)]
    async fn a_task_that_promised_a_pass_is_unready_once_it_is_late_and_ready_after_the_next() {
        let health = Health::default();
        health.set_api_reachable(true);
        health.start(Task::NodeAgent);
        health.set_synced(Task::NodeAgent, true);
        health.passed(Task::NodeAgent, Duration::from_secs(30));
        tokio::time::advance(Duration::from_secs(29)).await;
        health.beat(Task::NodeAgent, true);
        assert_eq!(health.ready(), Ok(()));
        tokio::time::advance(Duration::from_secs(2)).await;
        health.beat(Task::NodeAgent, true);
        assert!(health.ready().is_err_and(|why| why.contains("node-agent has not passed")), "{:?}", health.ready());
        assert_eq!(health.live(), Ok(()), "a late pass is no reason to restart the agent");
        health.passed(Task::NodeAgent, Duration::from_secs(30));
        assert_eq!(health.ready(), Ok(()));
    }
}
