//! Another writer undoing our document: a second release with its own Lease, a local debug run beside the chart, a
//! script. Each time we must write over a ConfigMap state we did not leave, that is a correction; a manual edit
//! causes one. Three in a minute is a fight: rather than rewrite the ConfigMap a dozen times a second, each further
//! write waits, from 30 s doubling to 5 min, and the fight is reported. A minute without corrections ends it. Trying
//! again over the same state (our write was refused, say by an immutable ConfigMap) is not another correction.

use std::collections::VecDeque;
use std::time::Duration;

use tokio::time::Instant;

const WINDOW: Duration = Duration::from_secs(60);
const CORRECTIONS_TO_FIGHT: usize = 3;
const FIRST_HOLD: Duration = Duration::from_secs(30);
const LONGEST_HOLD: Duration = Duration::from_secs(300);
/// How many of our own writes are remembered; the stored state is one of them unless someone else wrote since.
const REMEMBERED: usize = 8;
/// The state "no ConfigMap", as left by our own delete.
const ABSENT: &str = "";

/// Whether a write may go now.
#[derive(Debug, PartialEq, Eq)]
pub enum Gate {
    Write,
    /// Do not write before `until`; `started` is true when this correction started (or escalated) the hold.
    Hold {
        until: Instant,
        started: bool,
        hold: Duration,
    },
}

#[derive(Clone, Debug)]
pub struct Fights {
    ours: VecDeque<String>,
    corrections: VecDeque<Instant>,
    /// The last state counted as a correction: writing over it again is a retry, not another correction.
    corrected: Option<String>,
    hold: Duration,
    hold_until: Option<Instant>,
}

impl Default for Fights {
    fn default() -> Self {
        Self {
            ours: VecDeque::new(),
            corrections: VecDeque::new(),
            corrected: None,
            hold: FIRST_HOLD,
            hold_until: None,
        }
    }
}

impl Fights {
    /// Our write left the ConfigMap at `resource_version` (`None`: we deleted it).
    pub fn wrote(&mut self, resource_version: Option<String>) {
        self.ours.push_back(resource_version.unwrap_or_else(|| ABSENT.to_string()));
        if self.ours.len() > REMEMBERED {
            self.ours.pop_front();
        }
    }

    /// Asked before each write, with the stored ConfigMap's resourceVersion (`None`: there is none).
    pub fn before_write(&mut self, stored: Option<&str>, now: Instant) -> Gate {
        self.corrections.retain(|at| now.duration_since(*at) < WINDOW);
        if self.corrections.is_empty() && self.hold_until.is_none_or(|until| now >= until + WINDOW) {
            self.hold = FIRST_HOLD;
        }
        if let Some(until) = self.hold_until.filter(|until| now < *until) {
            return Gate::Hold { until, started: false, hold: self.hold };
        }
        let stored = stored.unwrap_or(ABSENT);
        let correction = !self.ours.is_empty()
            && !self.ours.iter().any(|rv| rv == stored)
            && self.corrected.as_deref() != Some(stored);
        if !correction {
            return Gate::Write;
        }
        self.corrected = Some(stored.to_string());
        self.corrections.push_back(now);
        if self.corrections.len() < CORRECTIONS_TO_FIGHT {
            return Gate::Write;
        }
        let hold = self.hold;
        let until = now + hold;
        self.hold_until = Some(until);
        self.hold = (self.hold * 2).min(LONGEST_HOLD);
        self.corrections.clear();
        Gate::Hold { until, started: true, hold }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_manual_edit_is_corrected_at_once_and_a_fight_backs_off_doubling() {
        let start = Instant::now();
        let mut fights = Fights::default();
        assert_eq!(fights.before_write(None, start), Gate::Write, "the first write");
        fights.wrote(Some("1".into()));
        assert_eq!(fights.before_write(Some("1"), start), Gate::Write, "our own state: no correction");
        assert_eq!(fights.before_write(Some("2"), start), Gate::Write, "one manual edit");
        fights.wrote(Some("3".into()));
        assert_eq!(fights.before_write(Some("4"), start), Gate::Write);
        fights.wrote(Some("5".into()));
        let third = start + Duration::from_secs(1);
        let Gate::Hold { until, started: true, hold } = fights.before_write(Some("6"), third) else {
            panic!("three corrections in a minute are a fight")
        };
        assert_eq!((until - third, hold), (FIRST_HOLD, FIRST_HOLD));
        assert!(matches!(
            fights.before_write(Some("7"), third + Duration::from_secs(10)),
            Gate::Hold { started: false, .. }
        ));
        // After the hold, the fight goes on: the next hold is twice as long.
        let later = until;
        for (i, rv) in ["8", "9"].into_iter().enumerate() {
            assert_eq!(fights.before_write(Some(rv), later + Duration::from_secs(i as u64)), Gate::Write);
            fights.wrote(Some(format!("ours-{i}")));
        }
        let Gate::Hold { hold, .. } = fights.before_write(Some("10"), later + Duration::from_secs(2)) else {
            panic!("still fighting")
        };
        assert_eq!(hold, FIRST_HOLD * 2);
    }

    #[test]
    fn a_correction_counts_for_one_minute_exactly_and_our_last_eight_writes_are_ours() {
        let start = Instant::now();
        let mut fights = Fights::default();
        fights.wrote(Some("1".into()));
        assert_eq!(fights.before_write(Some("a"), start), Gate::Write);
        assert_eq!(fights.before_write(Some("b"), start), Gate::Write);
        // A minute after the first two corrections they no longer count: a third is no fight.
        assert_eq!(fights.before_write(Some("c"), start + WINDOW), Gate::Write, "the two earlier ones expired");
        assert_eq!(fights.corrections.len(), 1);

        let mut fights = Fights::default();
        for rv in 1..=REMEMBERED + 1 {
            fights.wrote(Some(rv.to_string()));
        }
        assert_eq!(fights.ours.len(), REMEMBERED, "only the last {REMEMBERED} are remembered");
        assert_eq!(fights.before_write(Some(&(REMEMBERED + 1).to_string()), start), Gate::Write);
        assert_eq!(fights.before_write(Some("2"), start), Gate::Write);
        assert_eq!(fights.corrections.len(), 0, "the eighth-last write of ours is still ours");
        assert_eq!(fights.before_write(Some("1"), start), Gate::Write);
        assert_eq!(fights.corrections.len(), 1, "the one before is forgotten: seen again, it is someone else's");
    }

    #[test]
    fn retrying_over_the_same_state_is_not_another_correction() {
        let start = Instant::now();
        let mut fights = Fights::default();
        fights.wrote(Some("1".into()));
        // Someone made the ConfigMap immutable (version 2); every write over it is refused and retried.
        for retry in 0..10 {
            assert_eq!(fights.before_write(Some("2"), start + Duration::from_secs(retry)), Gate::Write, "{retry}");
        }
        // A real writer makes new states: those still count.
        assert_eq!(fights.before_write(Some("3"), start), Gate::Write);
        assert!(matches!(fights.before_write(Some("4"), start), Gate::Hold { started: true, .. }));
    }

    #[test]
    fn our_own_delete_is_not_a_correction_and_a_quiet_minute_ends_a_fight() {
        let start = Instant::now();
        let mut fights = Fights::default();
        fights.wrote(Some("1".into()));
        fights.wrote(None);
        assert_eq!(fights.before_write(None, start), Gate::Write, "absent because we deleted it");
        for (i, rv) in ["a", "b"].into_iter().enumerate() {
            assert_eq!(fights.before_write(Some(rv), start), Gate::Write);
            fights.wrote(Some(format!("ours-{i}")));
        }
        assert!(matches!(fights.before_write(Some("c"), start), Gate::Hold { .. }));
        let quiet = start + FIRST_HOLD + WINDOW + Duration::from_secs(1);
        assert_eq!(fights.before_write(Some("ours-1"), quiet), Gate::Write);
        assert_eq!(fights.hold, FIRST_HOLD, "the next fight starts from the first hold again");
    }
}
