//! Since when each allowed registry has had no ready endpoint, so an unready published registry keeps its place for
//! the grace period (a rolling restart does not flap the ConfigMap).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use tokio::time::Instant;

use crate::registry::{Registry, ServiceId};

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Readiness {
    unready_since: BTreeMap<ServiceId, Instant>,
}

impl Readiness {
    pub fn observe(&mut self, registries: &[Registry], now: Instant) {
        let unready: BTreeSet<&ServiceId> = registries.iter().filter(|r| !r.ready).map(|r| &r.id).collect();
        self.unready_since.retain(|id, _| unready.contains(id));
        for id in unready {
            self.unready_since.entry(id.clone()).or_insert(now);
        }
    }

    /// Time left before an unready registry is withdrawn; `None` once it is past, or when it is ready.
    pub fn grace_left(&self, id: &ServiceId, now: Instant, grace: Duration) -> Option<Duration> {
        let since = self.unready_since.get(id)?;
        grace.checked_sub(now.saturating_duration_since(*since)).filter(|left| !left.is_zero())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::fixtures::registry;

    #[test]
    fn the_grace_runs_from_when_a_registry_was_first_seen_unready_and_ends_when_it_is_ready() {
        let grace = Duration::from_secs(15);
        let start = Instant::now();
        let (unready, ready) = (registry("zot", 0, false), registry("other", 0, true));
        let mut readiness = Readiness::default();
        readiness.observe(&[unready.clone(), ready.clone()], start);
        let later = start + Duration::from_secs(5);
        readiness.observe(&[unready.clone(), ready.clone()], later);
        assert_eq!(readiness.grace_left(&unready.id, later, grace), Some(Duration::from_secs(10)), "from the first");
        assert_eq!(readiness.grace_left(&ready.id, later, grace), None, "a ready registry has no grace to count");
        assert_eq!(readiness.grace_left(&unready.id, start + grace, grace), None, "exactly at the end: none left");
        readiness.observe(&[registry("zot", 0, true)], later);
        assert_eq!(readiness.grace_left(&unready.id, later, grace), None, "ready again: forgotten");
        readiness.observe(std::slice::from_ref(&unready), start + Duration::from_secs(20));
        assert_eq!(
            readiness.grace_left(&unready.id, start + Duration::from_secs(21), grace),
            Some(Duration::from_secs(14)),
            "unready again: a fresh grace"
        );
    }
}
