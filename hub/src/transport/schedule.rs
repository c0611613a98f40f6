//! Which Bindings the transport reconciles next: each changed one once its rest ([`Pacing`]) or
//! its back-off after a failure ([`Backoff`]) is over, a few at once so that one policy's
//! writes do not wait for another's, and never one twice at once (one changed while being
//! reconciled goes again after, reading the caches then).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use ks_shared::runtime::{Backoff, Pacing};
use tokio::time::Instant;

/// A Binding's version: its generation (status changes leave it as it was).
pub type Version = Option<i64>;

pub struct Schedule {
    concurrency: usize,
    /// Changed, not started yet.
    pending: BTreeSet<String>,
    running: BTreeSet<String>,
    /// Changed while resting, each with the end of its rest.
    resting: BTreeMap<String, Instant>,
    retries: Backoff<String>,
    pacing: Pacing<String, Version>,
}

impl Schedule {
    /// At most `concurrency` Bindings at once; their rests and back-offs as [`Pacing::new`] and
    /// [`Backoff::new`] take them.
    pub fn new(concurrency: usize, pacing: Pacing<String, Version>, retries: Backoff<String>) -> Schedule {
        Schedule {
            concurrency,
            pending: BTreeSet::new(),
            running: BTreeSet::new(),
            resting: BTreeMap::new(),
            retries,
            pacing,
        }
    }

    /// `binding` (or what it depends on) changed.
    pub fn changed(&mut self, binding: String) {
        self.pending.insert(binding);
    }

    /// When the next rest or back-off ends, if any.
    pub fn wake(&self) -> Option<Instant> {
        self.retries
            .next_due()
            .into_iter()
            .chain(self.resting.values().copied())
            .min()
    }

    /// The Bindings to reconcile at `now`, each with its version (`version` reads it); they
    /// count as running until [`Schedule::finished`].
    pub fn start(&mut self, now: Instant, version: impl Fn(&str) -> Version) -> Vec<(String, Version)> {
        self.pending.extend(self.retries.take_due(now));
        self.pending.extend(std::mem::take(&mut self.resting).into_keys());
        let startable: Vec<String> = self.pending.difference(&self.running).cloned().collect();
        let mut started = Vec::new();
        for name in startable {
            if self.running.len() >= self.concurrency {
                break;
            }
            self.pending.remove(&name);
            let version = version(&name);
            if let Some(until) = self.pacing.hold(&name, version, now) {
                self.resting.insert(name, until);
                continue;
            }
            self.running.insert(name.clone());
            started.push((name, version));
        }
        started
    }

    /// `binding`, reconciled at `version`, finished at `now`: its writes took `Ok(spent)`, or it
    /// failed and is tried again after its back-off.
    pub fn finished(&mut self, binding: String, version: Version, outcome: Result<Duration, ()>, now: Instant) {
        self.running.remove(&binding);
        match outcome {
            Ok(spent) => {
                self.retries.succeeded(&binding);
                self.pacing.wrote(binding, version, spent, now);
            }
            Err(()) => {
                self.retries.failed(binding, now);
            }
        }
    }

    /// How many Bindings wait: changed, resting or backing off.
    pub fn waiting(&self) -> usize {
        self.pending.len() + self.resting.len() + self.retries.waiting()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn schedule(concurrency: usize) -> Schedule {
        Schedule::new(
            concurrency,
            Pacing::new(3, Duration::from_secs(30)),
            Backoff::new(Duration::from_secs(1), Duration::from_secs(60)),
        )
    }

    /// Binding `a` changed, ran at version 1 and finished at `at` with `outcome`.
    fn ran_a(schedule: &mut Schedule, outcome: Result<Duration, ()>, at: Instant) {
        schedule.changed("a".into());
        assert_eq!(names(&schedule.start(at, |_| Some(1))), ["a"]);
        schedule.finished("a".into(), Some(1), outcome, at);
    }

    fn names(started: &[(String, Version)]) -> Vec<&str> {
        started.iter().map(|(n, _)| n.as_str()).collect()
    }

    #[test]
    fn at_most_its_concurrency_run_and_the_next_starts_as_one_finishes() {
        let mut schedule = schedule(2);
        let t0 = Instant::now();
        for name in ["a", "b", "c"] {
            schedule.changed(name.into());
        }
        let started = schedule.start(t0, |_| Some(1));
        assert_eq!(names(&started), ["a", "b"]);
        assert_eq!(schedule.waiting(), 1);
        assert!(schedule.start(t0, |_| Some(1)).is_empty());
        schedule.finished("b".into(), Some(1), Ok(Duration::ZERO), t0);
        assert_eq!(names(&schedule.start(t0, |_| Some(1))), ["c"]);
        assert_eq!(schedule.waiting(), 0);
    }

    #[test]
    fn a_binding_changed_while_running_goes_again_once_finished() {
        let mut schedule = schedule(4);
        let t0 = Instant::now();
        schedule.changed("a".into());
        assert_eq!(names(&schedule.start(t0, |_| Some(1))), ["a"]);
        schedule.changed("a".into());
        // Never twice at once, and not forgotten.
        assert!(schedule.start(t0, |_| Some(2)).is_empty());
        assert_eq!(schedule.waiting(), 1);
        schedule.finished("a".into(), Some(1), Ok(Duration::ZERO), t0);
        assert_eq!(schedule.start(t0, |_| Some(2)), [("a".to_string(), Some(2))]);
    }

    #[test]
    fn a_failed_binding_comes_back_after_its_back_off() {
        let mut schedule = schedule(4);
        let t0 = Instant::now();
        ran_a(&mut schedule, Err(()), t0);
        assert!(schedule.start(t0, |_| Some(1)).is_empty());
        assert_eq!(schedule.wake(), Some(t0 + Duration::from_secs(1)));
        assert_eq!(names(&schedule.start(t0 + Duration::from_secs(1), |_| Some(1))), ["a"]);
    }

    #[test]
    fn a_change_during_a_rest_waits_for_its_end_without_taking_a_place() {
        let mut schedule = schedule(1);
        let t0 = Instant::now();
        ran_a(&mut schedule, Ok(ms(400)), t0);
        schedule.changed("a".into());
        schedule.changed("b".into());
        // `a` rests 3 × 400 ms (or until quiet for half of that); `b` runs meanwhile.
        assert_eq!(names(&schedule.start(t0 + ms(10), |_| Some(2))), ["b"]);
        assert_eq!(schedule.wake(), Some(t0 + ms(610)));
        schedule.finished("b".into(), Some(2), Ok(Duration::ZERO), t0 + ms(20));
        assert_eq!(names(&schedule.start(t0 + ms(610), |_| Some(2))), ["a"]);
    }
}
