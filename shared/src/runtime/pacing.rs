//! Pacing each key's costly writes ([`Pacing`]): after writes that took `d`, the key rests
//! `factor × d` before it writes again, and changes that arrive meanwhile wait, to be written
//! together. A rest ends early once its key has been quiet for half of it: the burst is over and
//! what waits is final, so it is not held back for nothing. When changes kept coming to the end
//! of a rest, the burst goes on and the next rest is at least twice as long (up to a longest
//! rest). So a key's writes take at most 1/(factor+1) of the time while it keeps changing, and a
//! burst that grows a key (a policy's objects created one by one, each write holding all so far)
//! rewrites it a logarithmic number of times, not once per change. A small key's writes take
//! milliseconds, and so do its rests: one change after a quiet spell is written at once.
//!
//! Nor is a change that comes once its key has been quiet for at least as long as its last
//! writes took: it starts no burst of its own. A user who creates objects one at a time, each
//! once the last is delivered, changes a Binding every half second or so; on a busy machine its
//! writes take 50 to 400 ms, and a rest of three times that held most of those changes (from the
//! Binding listing an object to a ManifestWork holding it, 450 ms at the median in one run
//! against 170 ms unheld). A key that keeps changing still writes at most half the time.
//!
//! A change is a new version of the key (a Binding's generation): inputs that leave the version
//! as it was (the status of what was written) are never held, so they neither delay nor
//! lengthen anything.

use std::collections::BTreeMap;
use std::time::Duration;

// Tokio's clock, so that tests with a paused clock drive it.
use tokio::time::Instant;

/// When each key that wrote lately may write again.
#[derive(Debug)]
pub struct Pacing<K, V> {
    factor: u32,
    longest: Duration,
    rests: BTreeMap<K, Rest<V>>,
}

#[derive(Clone, Copy, Debug)]
struct Rest<V> {
    until: Instant,
    length: Duration,
    /// The version written, or the last one seen since.
    version: V,
    /// The last change seen during the rest, which waits for its end.
    waiting: Option<Instant>,
    /// From when a first change is not held: once the key has been quiet for as long as the
    /// writes that began the rest took.
    unheld_from: Instant,
}

impl<V> Rest<V> {
    /// When the waiting change, if any, may be written: at the end of the rest, or once the key
    /// has been quiet for half of it.
    fn due(&self) -> Option<Instant> {
        self.waiting.map(|last| self.until.min(last + self.length / 2))
    }
}

impl<K: Ord, V: PartialEq> Pacing<K, V> {
    /// Writes that took `d` make their key rest `factor × d`, doubling while a burst goes on,
    /// at most `longest`.
    pub fn new(factor: u32, longest: Duration) -> Pacing<K, V> {
        Pacing {
            factor,
            longest,
            rests: BTreeMap::new(),
        }
    }

    /// Whether `key`, now at `version`, must wait at `now`: until when, if it must.
    pub fn hold(&mut self, key: &K, version: V, now: Instant) -> Option<Instant> {
        let rest = self.rests.get_mut(key).filter(|r| r.until > now)?;
        if rest.version != version {
            if rest.waiting.is_none() && now >= rest.unheld_from {
                return None;
            }
            rest.version = version;
            rest.waiting = Some(now);
        }
        rest.due().filter(|due| *due > now)
    }

    /// `key`'s writes of `version` took `spent`, ending at `now` (nothing written: zero, and the
    /// rest it was in goes on).
    pub fn wrote(&mut self, key: K, version: V, spent: Duration, now: Instant) {
        // Rests over are forgotten, so deleted keys do not pile up.
        let before = self.rests.remove(&key);
        self.rests.retain(|_, r| r.until > now);
        if spent.is_zero() {
            if let Some(mut rest) = before.filter(|r| r.until > now) {
                (rest.version, rest.waiting) = (version, None);
                self.rests.insert(key, rest);
            }
            return;
        }
        let mut length = spent.saturating_mul(self.factor);
        // A change waited to the end of the rest before these writes: the burst goes on. One due
        // because the key had gone quiet ended it: doubling then made a user's one-at-a-time
        // changes, each in the last one's rest, wait ever longer (15 s each).
        if let Some(before) = before.filter(|r| r.due() == Some(r.until)) {
            length = length.max(before.length.saturating_mul(2));
        }
        let length = length.min(self.longest);
        self.rests.insert(
            key,
            Rest {
                until: now + length,
                length,
                version,
                waiting: None,
                unheld_from: now + spent,
            },
        );
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
        pacing.wrote("p", 1, ms(400), t0);
        assert_eq!(pacing.hold(&"p", 2, t0 + ms(100)), Some(t0 + ms(700)));
        // Changes keep coming: they wait for the end of the rest.
        assert_eq!(pacing.hold(&"p", 3, t0 + ms(700)), Some(t0 + ms(1200)));
        assert_eq!(pacing.hold(&"p", 3, t0 + ms(1200)), None);
        // Other keys are not held back by it.
        assert_eq!(pacing.hold(&"q", 1, t0), None);
    }

    /// A user's next change, once the last was delivered: its key was quiet for longer than
    /// the writes took, so it starts no burst.
    #[test]
    fn a_change_after_a_quiet_spell_as_long_as_the_writes_is_not_held() {
        let mut pacing = Pacing::new(3, LONGEST);
        let t0 = Instant::now();
        pacing.wrote("p", 1, ms(200), t0);
        pacing.wrote("q", 1, ms(200), t0);
        assert_eq!(pacing.hold(&"p", 2, t0 + ms(200)), None);
        assert_eq!(pacing.hold(&"q", 2, t0 + ms(199)), Some(t0 + ms(499)));
        // One that came sooner and waits makes the next wait too: the burst goes on.
        assert_eq!(pacing.hold(&"q", 3, t0 + ms(450)), Some(t0 + ms(600)));
    }

    #[test]
    fn the_same_version_is_never_held() {
        let mut pacing = Pacing::new(3, LONGEST);
        let t0 = Instant::now();
        pacing.wrote("p", 1, ms(400), t0);
        assert_eq!(pacing.hold(&"p", 1, t0 + ms(10)), None);
        // Nor does it count as a change: a new version is quiet from its own arrival.
        assert_eq!(pacing.hold(&"p", 2, t0 + ms(20)), Some(t0 + ms(620)));
        assert_eq!(pacing.hold(&"p", 2, t0 + ms(500)), Some(t0 + ms(620)));
    }

    #[test]
    fn a_rest_ends_once_its_key_is_quiet_for_half_of_it() {
        let mut pacing = Pacing::new(3, LONGEST);
        let t0 = Instant::now();
        pacing.wrote("p", 1, ms(1000), t0);
        pacing.hold(&"p", 2, t0 + ms(100));
        assert_eq!(pacing.hold(&"p", 3, t0 + ms(1000)), Some(t0 + ms(2500)));
        assert_eq!(pacing.hold(&"p", 3, t0 + ms(2500)), None);
        // The burst is over: the next rest is the writes' own.
        pacing.wrote("p", 3, ms(100), t0 + ms(2600));
        assert_eq!(pacing.hold(&"p", 4, t0 + ms(2601)), Some(t0 + ms(2751)));
    }

    #[test]
    fn nothing_written_leaves_the_rest_as_it_was() {
        let mut pacing = Pacing::new(3, LONGEST);
        let t0 = Instant::now();
        pacing.wrote("p", 1, ms(400), t0);
        pacing.wrote("p", 1, Duration::ZERO, t0 + ms(150));
        assert_eq!(pacing.hold(&"p", 2, t0 + ms(200)), Some(t0 + ms(800)));
        // A change that needed no writes waits no more.
        pacing.wrote("p", 2, Duration::ZERO, t0 + ms(800));
        assert_eq!(pacing.hold(&"p", 2, t0 + ms(900)), None);
        // Once the rest is over, nothing written means no rest.
        pacing.wrote("p", 3, Duration::ZERO, t0 + ms(1200));
        assert_eq!(pacing.hold(&"p", 4, t0 + ms(1200)), None);
    }

    /// Drives `pacing` with a change of "p" every 10 ms from `start` until `end`, each write
    /// taking `cost` of the time since `start`; each write's time and the rest that followed.
    fn burst(
        pacing: &mut Pacing<&'static str, u128>,
        start: Instant,
        end: Instant,
        cost: impl Fn(Duration) -> Duration,
    ) -> Vec<(Duration, Duration)> {
        let (mut now, mut writes, mut written) = (start, Vec::new(), None);
        while now < end {
            let version = (now - start).as_millis() / 10;
            if written == Some(version) {
                now = start + ms(10) * (version as u32 + 1);
                continue;
            }
            if let Some(until) = pacing.hold(&"p", version, now) {
                now = until.min(now + ms(10));
                continue;
            }
            let spent = cost(now - start);
            now += spent;
            pacing.wrote("p", version, spent, now);
            written = Some(version);
            writes.push((spent, pacing.rests["p"].length));
        }
        writes
    }

    /// A user creating objects one at a time, each once the last is delivered: a change 350 ms
    /// after each write. After one slow write (a 3 s rest), the wait for each change must not
    /// climb, rest after doubled rest, to half the longest (15 s each, as it did).
    #[test]
    fn changes_one_after_another_are_not_held_ever_longer() {
        let mut pacing = Pacing::new(3, LONGEST);
        let mut now = Instant::now();
        pacing.wrote("p", 0, ms(1000), now);
        let mut waits = Vec::new();
        for version in 1..30 {
            let change = now + ms(350);
            let due = pacing.hold(&"p", version, change).unwrap_or(change);
            assert_eq!(pacing.hold(&"p", version, due), None);
            waits.push((due - change).as_millis());
            now = due + ms(30);
            pacing.wrote("p", version, ms(30), now);
        }
        assert!(waits[1..].iter().all(|wait| *wait == 0), "{waits:?}");
    }

    #[test]
    fn a_burst_doubles_the_rest_up_to_the_longest() {
        let mut pacing = Pacing::new(3, LONGEST);
        let t0 = Instant::now();
        let writes = burst(&mut pacing, t0, t0 + Duration::from_secs(70), |_| ms(100));
        let rests: Vec<u128> = writes.iter().map(|(_, rest)| rest.as_millis()).collect();
        assert_eq!(rests, [300, 600, 1200, 2400, 4800, 9600, 19200, 30000, 30000]);
    }

    #[test]
    fn a_change_after_the_rest_starts_over() {
        let mut pacing = Pacing::new(3, LONGEST);
        let t0 = Instant::now();
        pacing.wrote("p", 1, ms(100), t0);
        pacing.hold(&"p", 2, t0 + ms(50));
        pacing.hold(&"p", 3, t0 + ms(200));
        // Written at the end of the rest: the burst went on, the next rest is twice as long.
        pacing.wrote("p", 3, ms(100), t0 + ms(400));
        assert_eq!(pacing.hold(&"p", 4, t0 + ms(401)), Some(t0 + ms(701)));
        pacing.wrote("p", 4, ms(100), t0 + ms(1100));
        // Not held during that rest: the next change comes after it, a burst no more.
        pacing.wrote("p", 5, ms(100), t0 + ms(3000));
        assert_eq!(pacing.hold(&"p", 6, t0 + ms(3001)), Some(t0 + ms(3151)));
    }

    #[test]
    fn rests_that_are_over_are_forgotten() {
        let mut pacing = Pacing::new(3, LONGEST);
        let t0 = Instant::now();
        pacing.wrote("gone", 1, ms(10), t0);
        pacing.wrote("p", 1, ms(10), t0 + ms(30));
        assert_eq!(pacing.rests.len(), 1);
    }

    /// A key whose writes grow with each change (every write holding all created so far), that
    /// changes every 10 ms for 100 s, each write costing 1 ms per 100 changes so far (100 ms at
    /// the end). While its writes are cheaper than a third of the pause between changes, each
    /// change is written at once; from then on its rests double, and the costly writes (from
    /// 10 ms on, the last 90 s) are a few. Under a quarter of the time goes to writing.
    #[test]
    fn a_growing_burst_is_written_a_few_times() {
        let mut pacing = Pacing::new(3, LONGEST);
        let t0 = Instant::now();
        let writes = burst(&mut pacing, t0, t0 + Duration::from_secs(100), |elapsed| {
            ms((elapsed.as_millis() / 1000).max(1) as u64)
        });
        let costly = writes.iter().filter(|(spent, _)| *spent >= ms(10)).count();
        assert!(costly <= 6, "{costly} writes of 10 ms or more: {writes:?}");
        let writing: Duration = writes.iter().map(|(spent, _)| *spent).sum();
        assert!(writing * 4 <= Duration::from_secs(100), "{writing:?} writing");
    }

    /// Once the burst stops, its last change is written after half the rest, not all of it.
    #[test]
    fn the_end_of_a_burst_is_written_before_its_rest_is_over() {
        let mut pacing = Pacing::new(3, LONGEST);
        let t0 = Instant::now();
        pacing.wrote("p", 1, Duration::from_secs(10), t0);
        let last = t0 + Duration::from_secs(1);
        assert_eq!(pacing.hold(&"p", 2, last), Some(last + Duration::from_secs(15)));
        assert_eq!(pacing.hold(&"p", 2, last + Duration::from_secs(15)), None);
    }
}
