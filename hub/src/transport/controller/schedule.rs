//! Which Bindings the transport reconciles next: each changed one once its rest ([`Pacing`]) or
//! its back-off after a failure ([`Backoff`]) is over, a few at once so that one policy's
//! writes do not wait for another's, and never one twice at once (one changed while being
//! reconciled goes again after, reading the caches then). A Binding whose WECs only reported
//! progress gets a [`Pass::Report`], neither held nor counted as writing.

use std::collections::BTreeMap;
use std::time::Duration;

use ks_shared::runtime::{Backoff, Pacing, QueueMetrics};
use tokio::time::Instant;

/// A Binding's version: its generation (status changes leave it as it was).
pub type Version = Option<i64>;

/// What a Binding's turn does; a full pass also reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Pass {
    /// Only the status of its ManifestWorks or of its policy changed: its policy's propagation
    /// status is brought in line.
    Report,
    /// It, or something it is made of, changed: it is planned and written.
    Full,
}

pub struct Schedule {
    concurrency: usize,
    /// Changed or reported on, not started yet.
    pending: BTreeMap<String, Pass>,
    /// Since when each Binding waits: changed, resting or due after its back-off, not started.
    waiting_since: BTreeMap<String, Instant>,
    /// Each running Binding, since when.
    running: BTreeMap<String, Instant>,
    /// Changed while resting, each with the end of its rest.
    resting: BTreeMap<String, Instant>,
    retries: Backoff<String>,
    pacing: Pacing<String, Version>,
    times: QueueMetrics,
}

impl Schedule {
    /// At most `concurrency` Bindings at once; their rests and back-offs as [`Pacing::new`] and
    /// [`Backoff::new`] take them.
    pub fn new(concurrency: usize, pacing: Pacing<String, Version>, retries: Backoff<String>) -> Schedule {
        Schedule {
            concurrency,
            pending: BTreeMap::new(),
            waiting_since: BTreeMap::new(),
            running: BTreeMap::new(),
            resting: BTreeMap::new(),
            retries,
            pacing,
            times: QueueMetrics::default(),
        }
    }

    /// The same, measuring into `times`.
    pub fn measured_by(self, times: QueueMetrics) -> Schedule {
        Schedule { times, ..self }
    }

    /// `binding` (or what it depends on) changed.
    pub fn changed(&mut self, binding: String) {
        self.queued(&binding);
        self.pending.insert(binding, Pass::Full);
    }

    /// `binding`'s WECs reported progress, or its policy's status changed.
    pub fn reported(&mut self, binding: String) {
        self.queued(&binding);
        self.pending.entry(binding).or_insert(Pass::Report);
    }

    /// Notes that `binding` waits from now, unless it waits already.
    fn queued(&mut self, binding: &str) {
        if !self.waiting_since.contains_key(binding) {
            self.times.added();
            self.waiting_since.insert(binding.to_string(), Instant::now());
        }
    }

    /// When the next rest or back-off ends, if any.
    pub fn wake(&self) -> Option<Instant> {
        self.retries
            .next_due()
            .into_iter()
            .chain(self.resting.values().copied())
            .min()
    }

    /// The Bindings to reconcile at `now`, each with its version (`version` reads it) and pass;
    /// they count as running until [`Schedule::finished`].
    pub fn start(&mut self, now: Instant, version: impl Fn(&str) -> Version) -> Vec<(String, Version, Pass)> {
        for name in self.retries.take_due(now) {
            self.queued(&name);
            self.pending.insert(name, Pass::Full);
        }
        let rested = std::mem::take(&mut self.resting).into_keys();
        self.pending.extend(rested.map(|name| (name, Pass::Full)));
        let startable: Vec<(String, Pass)> = self
            .pending
            .iter()
            .filter(|(name, _)| !self.running.contains_key(*name))
            .map(|(name, pass)| (name.clone(), *pass))
            .collect();
        let mut started = Vec::new();
        for (name, pass) in startable {
            if self.running.len() >= self.concurrency {
                break;
            }
            self.pending.remove(&name);
            let version = version(&name);
            if pass == Pass::Full
                && let Some(until) = self.pacing.hold(&name, version, now)
            {
                self.resting.insert(name, until);
                continue;
            }
            if let Some(since) = self.waiting_since.remove(&name) {
                self.times.started(now.saturating_duration_since(since));
            }
            self.running.insert(name.clone(), now);
            started.push((name, version, pass));
        }
        started
    }

    /// `binding`, reconciled at `version` in `pass`, finished at `now`: its writes took
    /// `Ok(spent)`, or it failed and is tried again (fully) after its back-off. A report neither
    /// ends nor starts a rest: one with a change waiting must not let that change through.
    pub fn finished(
        &mut self,
        binding: String,
        version: Version,
        pass: Pass,
        outcome: Result<Duration, ()>,
        now: Instant,
    ) {
        if let Some(since) = self.running.remove(&binding) {
            self.times
                .finished(now.saturating_duration_since(since), outcome.is_ok());
        }
        match outcome {
            Ok(_) if pass == Pass::Report => {}
            Ok(spent) => {
                self.retries.succeeded(&binding);
                self.pacing.wrote(binding, version, spent, now);
            }
            Err(()) => {
                self.times.retried();
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
            Backoff::for_writes(),
        )
    }

    /// Binding `a` changed, ran at version 1 and finished at `at` with `outcome`.
    fn ran_a(schedule: &mut Schedule, outcome: Result<Duration, ()>, at: Instant) {
        schedule.changed("a".into());
        assert_eq!(names(&schedule.start(at, |_| Some(1))), ["a"]);
        schedule.finished("a".into(), Some(1), Pass::Full, outcome, at);
    }

    fn names(started: &[(String, Version, Pass)]) -> Vec<&str> {
        started.iter().map(|(n, _, _)| n.as_str()).collect()
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
        schedule.finished("b".into(), Some(1), Pass::Full, Ok(Duration::ZERO), t0);
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
        schedule.finished("a".into(), Some(1), Pass::Full, Ok(Duration::ZERO), t0);
        assert_eq!(
            schedule.start(t0, |_| Some(2)),
            [("a".to_string(), Some(2), Pass::Full)]
        );
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
        schedule.finished("b".into(), Some(2), Pass::Full, Ok(Duration::ZERO), t0 + ms(20));
        assert_eq!(names(&schedule.start(t0 + ms(610), |_| Some(2))), ["a"]);
    }

    #[test]
    fn a_report_runs_during_a_rest_and_leaves_it_as_it_was() {
        let mut schedule = schedule(1);
        let t0 = Instant::now();
        ran_a(&mut schedule, Ok(ms(400)), t0);
        schedule.reported("a".into());
        assert_eq!(
            schedule.start(t0 + ms(10), |_| Some(1)),
            [("a".to_string(), Some(1), Pass::Report)]
        );
        schedule.finished("a".into(), Some(1), Pass::Report, Ok(Duration::ZERO), t0 + ms(20));
        // A change still waits out the rest the writes began.
        schedule.changed("a".into());
        assert!(schedule.start(t0 + ms(30), |_| Some(2)).is_empty());
        // A report meanwhile joins the waiting change: the full pass reports too.
        schedule.reported("a".into());
        assert!(schedule.start(t0 + ms(40), |_| Some(2)).is_empty());
        assert_eq!(
            schedule.start(t0 + ms(1200), |_| Some(2)),
            [("a".to_string(), Some(2), Pass::Full)]
        );
    }

    #[test]
    fn a_change_makes_a_waiting_report_a_full_pass() {
        let mut schedule = schedule(1);
        let t0 = Instant::now();
        schedule.reported("a".into());
        schedule.changed("a".into());
        schedule.reported("a".into());
        assert_eq!(
            schedule.start(t0, |_| Some(1)),
            [("a".to_string(), Some(1), Pass::Full)]
        );
        assert_eq!(schedule.waiting(), 0);
    }
}
