//! Gathering bursts of changes into one write per key ([`Debounce`]): a key is due once its
//! changes stop for a quiet pause, or a longest wait after its first unwritten change. A lone
//! change is written after the quiet pause alone (its latency stays short); a burst (objects
//! created one after another) becomes one write, or one per longest wait while it lasts, not one
//! per quiet pause.

use std::collections::BTreeMap;
use std::time::Duration;

// Tokio's clock, so that tests with a paused clock drive it.
use tokio::time::Instant;

/// The keys with unwritten changes, and when each is due.
#[derive(Debug)]
pub struct Debounce<K> {
    quiet: Duration,
    longest: Duration,
    keys: BTreeMap<K, Burst>,
}

#[derive(Clone, Copy, Debug)]
struct Burst {
    first: Instant,
    last: Instant,
}

impl Burst {
    fn due(self, quiet: Duration, longest: Duration) -> Instant {
        (self.last + quiet).min(self.first + longest)
    }
}

impl<K: Ord + Clone> Debounce<K> {
    /// Keys are due `quiet` after their last change, and at most `longest` after their first
    /// (never before `quiet`).
    pub fn new(quiet: Duration, longest: Duration) -> Debounce<K> {
        Debounce {
            quiet,
            longest: longest.max(quiet),
            keys: BTreeMap::new(),
        }
    }

    /// `key` changed at `now`.
    pub fn changed(&mut self, key: K, now: Instant) {
        self.keys
            .entry(key)
            .and_modify(|burst| burst.last = now)
            .or_insert(Burst { first: now, last: now });
    }

    /// When the next key is due, if any waits.
    pub fn next_due(&self) -> Option<Instant> {
        self.keys.values().map(|b| b.due(self.quiet, self.longest)).min()
    }

    /// Hands out the keys due at `now`; a change after this starts a new burst.
    pub fn take_due(&mut self, now: Instant) -> Vec<K> {
        let (quiet, longest) = (self.quiet, self.longest);
        let due: Vec<K> = self
            .keys
            .iter()
            .filter(|(_, burst)| burst.due(quiet, longest) <= now)
            .map(|(key, _)| key.clone())
            .collect();
        for key in &due {
            self.keys.remove(key);
        }
        due
    }

    /// Hands out every waiting key, due or not.
    pub fn take_all(&mut self) -> Vec<K> {
        std::mem::take(&mut self.keys).into_keys().collect()
    }

    /// How many keys wait.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const QUIET: Duration = Duration::from_millis(50);
    const LONGEST: Duration = Duration::from_secs(2);

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn a_lone_change_is_due_after_the_quiet_pause() {
        let t0 = Instant::now();
        let mut d = Debounce::new(QUIET, LONGEST);
        assert_eq!(d.next_due(), None);
        d.changed("p", t0);
        assert_eq!(d.next_due(), Some(t0 + QUIET));
        assert!(d.take_due(t0 + ms(49)).is_empty());
        assert_eq!(d.take_due(t0 + QUIET), vec!["p"]);
        assert!(d.is_empty());
    }

    #[test]
    fn a_burst_is_one_write_when_it_stops() {
        let t0 = Instant::now();
        let mut d = Debounce::new(QUIET, LONGEST);
        // A change every 10 ms for a second: never quiet for 50 ms.
        for n in 0..100 {
            let now = t0 + ms(10 * n);
            assert!(d.take_due(now).is_empty(), "written during the burst at {n}");
            d.changed("p", now);
        }
        let last = t0 + ms(990);
        assert_eq!(d.next_due(), Some(last + QUIET));
        assert_eq!(d.take_due(last + QUIET), vec!["p"]);
    }

    #[test]
    fn a_burst_longer_than_the_longest_wait_is_written_at_that_pace() {
        let t0 = Instant::now();
        let mut d = Debounce::new(QUIET, LONGEST);
        let mut writes = Vec::new();
        // A change every 10 ms for 5 s.
        for n in 0..500 {
            let now = t0 + ms(10 * n);
            if !d.take_due(now).is_empty() {
                writes.push(now - t0);
            }
            d.changed("p", now);
        }
        assert_eq!(writes, vec![ms(2000), ms(4000)]);
    }

    #[test]
    fn keys_wait_independently() {
        let t0 = Instant::now();
        let mut d = Debounce::new(QUIET, LONGEST);
        // "busy" changes every 10 ms; "lone" changes once in the middle and is not held back.
        for n in 0..20 {
            d.changed("busy", t0 + ms(10 * n));
        }
        d.changed("lone", t0 + ms(100));
        assert_eq!(d.take_due(t0 + ms(150)), vec!["lone"]);
        assert_eq!(d.len(), 1);
        assert_eq!(d.take_due(t0 + ms(240)), vec!["busy"]);
    }

    #[test]
    fn the_longest_wait_is_never_below_the_quiet_pause() {
        let t0 = Instant::now();
        let mut d = Debounce::new(QUIET, ms(10));
        d.changed("p", t0);
        assert_eq!(d.next_due(), Some(t0 + QUIET));
    }
}
