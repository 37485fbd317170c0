//! The process's one retry policy: exponential from half a second, doubling, with jitter so replicas and watches
//! do not retry in step, up to a cap. It is kube-runtime's own backoff type, built with backon (the crate kube
//! uses for its default), so the watches, the Lease watch and the reconcile loop all retry alike.

use std::time::Duration;

pub use kube::runtime::utils::Backoff;
use kube::runtime::watcher::ExponentialBackoff;

pub const FIRST: Duration = Duration::from_millis(500);
/// Watches stop growing here: kube's default grows to 30 s, which after a 20 s API outage left the ConfigMap stale
/// for another 20 s; 5 s is still far from a tight loop.
pub const WATCH_CAP: Duration = Duration::from_secs(5);
/// A write the API server refused (RBAC, admission, quota) needs a person; retrying it faster helps nobody.
pub const WRITE_CAP: Duration = Duration::from_secs(30);

/// Delays from [`FIRST`] to `cap`; `reset` starts over after a success.
pub fn exponential(cap: Duration) -> ExponentialBackoff {
    backon::ExponentialBuilder::default()
        .with_min_delay(FIRST)
        .with_max_delay(cap)
        .with_factor(2.0)
        .with_jitter()
        .without_max_times()
        .into()
}

/// When a task's failed pass runs again: a failure arms it with the next delay, a success starts the delays over.
pub struct RetryClock {
    at: Option<tokio::time::Instant>,
    delays: ExponentialBackoff,
}

impl RetryClock {
    /// For passes that write: delays up to [`WRITE_CAP`].
    pub fn for_writes() -> Self {
        Self { at: None, delays: exponential(WRITE_CAP) }
    }

    /// Completes when the retry is due; never while nothing failed.
    pub async fn due(&self) {
        match self.at {
            Some(at) => tokio::time::sleep_until(at).await,
            None => std::future::pending().await,
        }
    }

    /// A pass starts: whatever it was retrying for, it runs now.
    pub fn disarm(&mut self) {
        self.at = None;
    }

    pub fn succeeded(&mut self) {
        self.delays.reset();
    }

    /// Arms the clock; returns how long until the retry.
    pub fn failed(&mut self) -> Duration {
        let after = self.delays.next().unwrap_or(WRITE_CAP);
        self.at = Some(tokio::time::Instant::now() + after);
        after
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_from_half_a_second_to_the_cap_and_starts_over_on_reset() {
        let mut backoff = exponential(WATCH_CAP);
        let delays: Vec<Duration> = backoff.by_ref().take(8).collect();
        // Jitter adds up to one more delay: the first lies in [0.5 s, 1 s), the later ones never pass twice the cap.
        assert!(delays[0] >= FIRST && delays[0] < 2 * FIRST, "{delays:?}");
        assert!(delays.iter().all(|d| *d < 2 * WATCH_CAP), "{delays:?}");
        assert!(delays[7] >= WATCH_CAP, "reaches the cap: {delays:?}");
        backoff.reset();
        assert!(backoff.next().is_some_and(|d| d < 2 * FIRST));
    }
}
