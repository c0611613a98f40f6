//! Pacing each key's costly writes ([`Pacing`]): after writes that took `d`, the key rests
//! `factor × d` before it writes again, and changes that arrive meanwhile wait for the end of the
//! rest, to be written together. When changes kept arriving during a rest and the next writes
//! follow it, the burst goes on and the next rest is at least twice as long (up to a longest
//! rest). So a key's writes take at most 1/(factor+1) of the time, and a burst that grows a key
//! (a policy's objects created one by one, each write holding all so far) rewrites it a
//! logarithmic number of times, not once per change. A small key's writes take milliseconds, and
//! so do its rests: one change after a quiet spell is written at once.

use std::collections::BTreeMap;
use std::time::Duration;

// Tokio's clock, so that tests with a paused clock drive it.
use tokio::time::Instant;

/// When each key that wrote lately may write again.
#[derive(Debug)]
pub struct Pacing<K> {
    factor: u32,
    longest: Duration,
    rests: BTreeMap<K, Rest>,
}

#[derive(Clone, Copy, Debug)]
struct Rest {
    until: Instant,
    length: Duration,
    /// A change arrived during it.
    held: bool,
}

impl<K: Ord> Pacing<K> {
    /// Writes that took `d` make their key rest `factor × d`, doubling while a burst goes on,
    /// at most `longest`.
    pub fn new(factor: u32, longest: Duration) -> Pacing<K> {
        Pacing {
            factor,
            longest,
            rests: BTreeMap::new(),
        }
    }

    /// Whether `key`, changed at `now`, must wait: the end of its rest, if it rests.
    pub fn hold(&mut self, key: &K, now: Instant) -> Option<Instant> {
        let rest = self.rests.get_mut(key).filter(|r| r.until > now)?;
        rest.held = true;
        Some(rest.until)
    }

    /// `key`'s writes took `spent`, ending at `now` (nothing written: zero, and no rest).
    pub fn wrote(&mut self, key: K, spent: Duration, now: Instant) {
        let before = self.rests.remove(&key);
        // Rests over are forgotten, so deleted keys do not pile up.
        self.rests.retain(|_, r| r.until > now);
        let mut length = spent.saturating_mul(self.factor);
        if let Some(before) = before.filter(|r| r.held) {
            length = length.max(before.length.saturating_mul(2));
        }
        let length = length.min(self.longest);
        if !spent.is_zero() && !length.is_zero() {
            self.rests.insert(
                key,
                Rest {
                    until: now + length,
                    length,
                    held: false,
                },
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LONGEST: Duration = Duration::from_secs(30);

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn a_key_rests_its_factor_times_what_its_writes_took() {
        let mut pacing = Pacing::new(3, LONGEST);
        let t0 = Instant::now();
        pacing.wrote("p", ms(400), t0);
        assert_eq!(pacing.hold(&"p", t0 + ms(1199)), Some(t0 + ms(1200)));
        assert_eq!(pacing.hold(&"p", t0 + ms(1200)), None);
        // Other keys are not held back by it.
        assert_eq!(pacing.hold(&"q", t0), None);
    }

    #[test]
    fn nothing_written_means_no_rest() {
        let mut pacing = Pacing::new(3, LONGEST);
        let t0 = Instant::now();
        pacing.wrote("p", ms(400), t0);
        pacing.hold(&"p", t0 + ms(100));
        pacing.wrote("p", Duration::ZERO, t0 + ms(1200));
        assert_eq!(pacing.hold(&"p", t0 + ms(1200)), None);
    }

    #[test]
    fn a_burst_doubles_the_rest_up_to_the_longest() {
        let mut pacing = Pacing::new(3, LONGEST);
        let mut now = Instant::now();
        let mut rests = Vec::new();
        for _ in 0..8 {
            pacing.wrote("p", ms(100), now);
            let until = pacing.hold(&"p", now + ms(1)).expect("resting");
            rests.push((until - now).as_millis());
            now = until;
        }
        assert_eq!(rests, [300, 600, 1200, 2400, 4800, 9600, 19200, 30000]);
    }

    #[test]
    fn a_change_after_the_rest_starts_over() {
        let mut pacing = Pacing::new(3, LONGEST);
        let t0 = Instant::now();
        pacing.wrote("p", ms(100), t0);
        pacing.hold(&"p", t0 + ms(10));
        pacing.wrote("p", ms(100), t0 + ms(400));
        // Not held during the 600 ms rest: the next change comes after it, a burst no more.
        pacing.wrote("p", ms(100), t0 + ms(2000));
        assert_eq!(pacing.hold(&"p", t0 + ms(2001)), Some(t0 + ms(2300)));
    }

    #[test]
    fn rests_that_are_over_are_forgotten() {
        let mut pacing = Pacing::new(3, LONGEST);
        let t0 = Instant::now();
        pacing.wrote("gone", ms(10), t0);
        pacing.wrote("p", ms(10), t0 + ms(30));
        assert_eq!(pacing.rests.len(), 1);
    }

    /// A key whose writes grow with each change (every write holding all created so far), that
    /// changes every 10 ms for 100 s, each write costing 1 ms per 100 changes so far (100 ms at
    /// the end): 10,000 changes written 16 times (rests doubling from 3 ms to 30 s in 14 writes,
    /// then one per 30 s), under a quarter of the time spent writing.
    #[test]
    fn a_growing_burst_is_written_a_few_times() {
        let mut pacing = Pacing::new(3, LONGEST);
        let t0 = Instant::now();
        let end = t0 + Duration::from_secs(100);
        let (mut now, mut writes, mut writing) = (t0, 0, Duration::ZERO);
        while now < end {
            if let Some(until) = pacing.hold(&"p", now) {
                now = until;
                continue;
            }
            let spent = ms(((now - t0).as_millis() / 1000).max(1) as u64);
            now += spent;
            writing += spent;
            writes += 1;
            pacing.wrote("p", spent, now);
        }
        assert!(writes <= 16, "{writes} writes");
        assert!(writing * 4 <= end - t0, "{writing:?} writing");
    }
}
