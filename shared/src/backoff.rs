//! Retries per key with capped exponential back-off: a key that keeps failing is tried again
//! ever less often (never in a hot loop), and one failing key does not delay the others.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// When each failed key is due again, and the pause it waits after its next failure.
#[derive(Debug)]
pub struct Backoff<K> {
    min: Duration,
    max: Duration,
    keys: BTreeMap<K, Retry>,
}

#[derive(Debug)]
struct Retry {
    /// `None` once handed out by [`Backoff::take_due`]: it is being tried.
    due: Option<Instant>,
    pause: Duration,
}

impl<K: Ord + Clone> Backoff<K> {
    /// Pauses start at `min` and double up to `max`.
    pub fn new(min: Duration, max: Duration) -> Backoff<K> {
        Backoff {
            min,
            max,
            keys: BTreeMap::new(),
        }
    }

    /// `key` failed at `now`: it is due again after its pause, which then doubles.
    pub fn failed(&mut self, key: K, now: Instant) {
        let retry = self.keys.entry(key).or_insert(Retry {
            due: None,
            pause: self.min,
        });
        retry.due = Some(now + retry.pause);
        retry.pause = (retry.pause * 2).min(self.max);
    }

    /// `key` succeeded (or no longer needs doing): its pause starts over.
    pub fn succeeded(&mut self, key: &K) {
        self.keys.remove(key);
    }

    /// The earliest time a key is due, if any is waiting.
    pub fn next_due(&self) -> Option<Instant> {
        self.keys.values().filter_map(|r| r.due).min()
    }

    /// The keys due at `now`; each keeps its pause until it succeeds.
    pub fn take_due(&mut self, now: Instant) -> Vec<K> {
        self.keys
            .iter_mut()
            .filter(|(_, r)| r.due.is_some_and(|due| due <= now))
            .map(|(key, r)| {
                r.due = None;
                key.clone()
            })
            .collect()
    }

    /// How many keys wait for a retry.
    pub fn waiting(&self) -> usize {
        self.keys.values().filter(|r| r.due.is_some()).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn pauses_double_up_to_the_cap_and_start_over_after_success() {
        let mut backoff = Backoff::new(S, 4 * S);
        let start = Instant::now();
        let mut now = start;
        let mut pauses = Vec::new();
        for _ in 0..5 {
            backoff.failed("a", now);
            let due = backoff.next_due().unwrap();
            pauses.push((due - now).as_secs());
            assert!(
                backoff.take_due(due - Duration::from_millis(1)).is_empty(),
                "not before it is due"
            );
            assert_eq!(backoff.take_due(due), ["a"]);
            now = due;
        }
        assert_eq!(pauses, [1, 2, 4, 4, 4]);
        backoff.succeeded(&"a");
        backoff.failed("a", now);
        assert_eq!(backoff.next_due(), Some(now + S));
    }

    #[test]
    fn keys_wait_independently() {
        let mut backoff = Backoff::new(S, 60 * S);
        let now = Instant::now();
        for _ in 0..3 {
            backoff.failed("stuck", now);
        }
        backoff.failed("once", now);
        assert_eq!(backoff.waiting(), 2);
        assert_eq!(backoff.take_due(now + S), ["once"]);
        assert_eq!(backoff.next_due(), Some(now + 4 * S));
        assert_eq!(backoff.waiting(), 1);
    }
}
