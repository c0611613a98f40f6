//! Gathering bursts of changes into one write per key ([`Debounce`]): a key is due once its
//! changes stop for a quiet pause, or a longest wait after its first unwritten change. A lone
//! change is written after the base quiet pause alone (its latency stays short); a burst (objects
//! created one after another) becomes one write, or one per longest wait while it lasts, not one
//! per quiet pause.
//!
//! The quiet pause follows the burst's own pace: [`PACE_FACTOR`] times its typical gap between
//! changes, from the base pause up to [`QUIET_GROWTH`] times it. A client that creates objects
//! one round trip after another on a busy machine leaves gaps longer than the base pause now and
//! then; a fixed pause would split its burst there, and each split rewrites all the key holds.
//! Changes further apart than the longest pause are separate (a lone change keeps the base pause).
//!
//! While a burst goes on past its longest wait, each next wait doubles (up to
//! [`LONGEST_GROWTH`] times the first): every write of a growing key rewrites all it holds, so
//! a constant pace would make a long burst cost the square of its length.

use std::collections::BTreeMap;
use std::time::Duration;

// Tokio's clock, so that tests with a paused clock drive it.
use tokio::time::Instant;

/// How far the longest wait grows while a burst goes on.
pub const LONGEST_GROWTH: u32 = 16;

/// How far the quiet pause grows with a slow burst's pace.
pub const QUIET_GROWTH: u32 = 4;

/// The quiet pause, in the burst's typical gaps between changes.
pub const PACE_FACTOR: u32 = 4;

/// The keys with unwritten changes, and when each is due.
#[derive(Debug)]
pub struct Debounce<K> {
    quiet: Quiet,
    longest: Duration,
    keys: BTreeMap<K, Burst>,
}

/// The bounds of the quiet pause.
#[derive(Clone, Copy, Debug)]
struct Quiet {
    base: Duration,
    most: Duration,
}

impl Quiet {
    /// The pause for a burst whose typical gap is `pace`, if it has one yet.
    fn after(self, pace: Option<Duration>) -> Duration {
        pace.map_or(self.base, |pace| (pace * PACE_FACTOR).clamp(self.base, self.most))
    }
}

#[derive(Clone, Copy, Debug)]
struct Burst {
    /// The first unwritten change, if any: a key written while its burst goes on stays until
    /// the burst stops, so that its next wait is longer.
    first: Option<Instant>,
    last: Instant,
    longest: Duration,
    /// The burst's typical gap between changes (a moving average), once it has one.
    pace: Option<Duration>,
}

impl Burst {
    fn quiet(self, quiet: Quiet) -> Duration {
        quiet.after(self.pace)
    }

    fn due(self, quiet: Quiet) -> Option<Instant> {
        self.first
            .map(|first| (self.last + self.quiet(quiet)).min(first + self.longest))
    }
}

impl<K: Ord + Clone> Debounce<K> {
    /// Keys are due a quiet pause after their last change (`quiet`, or up to [`QUIET_GROWTH`]
    /// times it in a slow burst), and at most `longest` after their first (never before the
    /// pause).
    pub fn new(quiet: Duration, longest: Duration) -> Debounce<K> {
        Debounce {
            quiet: Quiet {
                base: quiet,
                most: quiet * QUIET_GROWTH,
            },
            longest: longest.max(quiet),
            keys: BTreeMap::new(),
        }
    }

    /// `key` changed at `now`.
    pub fn changed(&mut self, key: K, now: Instant) {
        let (quiet, longest) = (self.quiet, self.longest);
        let burst = self.keys.entry(key).or_insert(Burst {
            first: None,
            last: now,
            longest,
            pace: None,
        });
        let gap = now.saturating_duration_since(burst.last);
        if burst.first.is_none() && gap >= burst.quiet(quiet) {
            // Written, and quiet since: the next write waits the first longest wait again.
            burst.longest = longest;
        }
        burst.pace = match burst.pace {
            _ if gap > quiet.most => None,
            // The first change of a burst has no gap yet.
            None if burst.first.is_none() && gap.is_zero() => None,
            None => Some(gap),
            Some(pace) => Some((pace * 3 + gap) / 4),
        };
        burst.last = now;
        burst.first.get_or_insert(now);
    }

    /// When the next key is due, if any waits.
    pub fn next_due(&self) -> Option<Instant> {
        self.keys.values().filter_map(|b| b.due(self.quiet)).min()
    }

    /// Hands out the keys due at `now`; a change after this starts a new wait, twice as long if
    /// the burst goes on (a change within the quiet pause of the last one).
    pub fn take_due(&mut self, now: Instant) -> Vec<K> {
        let (quiet, ceiling) = (self.quiet, self.longest * LONGEST_GROWTH);
        let mut due = Vec::new();
        self.keys.retain(|key, burst| {
            if burst.due(quiet).is_some_and(|at| at <= now) {
                due.push(key.clone());
                burst.first = None;
                burst.longest = (burst.longest * 2).min(ceiling);
            }
            // A written key is forgotten once no next change could count as its burst's.
            burst.first.is_some() || burst.last + quiet.most > now
        });
        due
    }

    /// Hands out every waiting key, due or not.
    pub fn take_all(&mut self) -> Vec<K> {
        std::mem::take(&mut self.keys)
            .into_iter()
            .filter(|(_, burst)| burst.first.is_some())
            .map(|(key, _)| key)
            .collect()
    }

    /// How many keys wait.
    pub fn len(&self) -> usize {
        self.keys.values().filter(|b| b.first.is_some()).count()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
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

    /// Changes "p" every 10 ms, `changes` times from `from`, taking what is due before each;
    /// when "p" was written, counted from `from`.
    fn steady_burst(d: &mut Debounce<&'static str>, from: Instant, changes: u64) -> Vec<Duration> {
        let mut writes = Vec::new();
        for n in 0..changes {
            let now = from + ms(10 * n);
            if !d.take_due(now).is_empty() {
                writes.push(now - from);
            }
            d.changed("p", now);
        }
        writes
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
        // A change every 10 ms for 7 s.
        let writes = steady_burst(&mut d, t0, 700);
        // Waits of 2 s, then 4 s: not every 2 s.
        assert_eq!(writes, vec![ms(2000), ms(6000)]);
    }

    #[test]
    fn a_long_burst_is_written_a_logarithmic_number_of_times() {
        let t0 = Instant::now();
        let mut d = Debounce::new(QUIET, LONGEST);
        // A change every 10 ms for 100 s: waits of 2, 4, 8, 16, then 32 s at most.
        let writes: Vec<u64> = steady_burst(&mut d, t0, 10_000).iter().map(Duration::as_secs).collect();
        assert_eq!(writes, vec![2, 6, 14, 30, 62, 94]);
        assert_eq!(d.take_due(t0 + ms(99_990) + QUIET), vec!["p"]);
        assert!(d.is_empty());
    }

    #[test]
    fn the_wait_is_short_again_once_a_burst_stops() {
        let t0 = Instant::now();
        let mut d = Debounce::new(QUIET, LONGEST);
        assert_eq!(steady_burst(&mut d, t0, 300), vec![LONGEST]);
        // Written at 2 s (the next wait would be 4 s), then quiet: written and forgotten.
        assert_eq!(d.take_due(t0 + ms(2990) + QUIET), vec!["p"]);
        assert_eq!(d.next_due(), None);
        // A new burst a second later waits 2 s again at most.
        let t1 = t0 + ms(4000);
        for n in 0..300 {
            d.changed("p", t1 + ms(10 * n));
        }
        assert_eq!(d.next_due(), Some(t1 + LONGEST));
    }

    #[test]
    fn a_burst_that_stopped_unnoticed_does_not_lengthen_the_next_wait() {
        let t0 = Instant::now();
        let mut d = Debounce::new(QUIET, LONGEST);
        for n in 0..=200 {
            d.changed("p", t0 + ms(10 * n));
        }
        // Written at its longest wait; its last change comes with it, then nothing.
        assert_eq!(d.take_due(t0 + LONGEST), vec!["p"]);
        let later = t0 + ms(60_000);
        d.changed("p", later);
        d.changed("p", later + ms(10));
        assert_eq!(d.take_due(later + ms(10) + QUIET), vec!["p"]);
        // Further apart than any quiet pause: a new burst.
        d.changed("p", later + ms(300));
        assert_eq!(d.next_due(), Some(later + ms(300) + QUIET));
        for n in 1..300 {
            d.changed("p", later + ms(300 + 10 * n));
        }
        assert_eq!(d.next_due(), Some(later + ms(300) + LONGEST));
    }

    #[test]
    fn a_burst_slower_than_the_base_pause_is_split_once_then_waited_for() {
        let t0 = Instant::now();
        let mut d = Debounce::new(QUIET, LONGEST);
        // A change every 60 ms for about a second: the first is written alone, as a lone change
        // would be; from the second on, the pause follows the burst's pace (4 x 60 ms, at most
        // 200 ms).
        let mut writes = Vec::new();
        for n in 0..17 {
            let now = t0 + ms(60 * n);
            if !d.take_due(now).is_empty() {
                writes.push(now - t0);
            }
            d.changed("p", now);
        }
        assert_eq!(writes, vec![ms(60)]);
        let last = t0 + ms(960);
        assert_eq!(d.next_due(), Some(last + QUIET * QUIET_GROWTH));
        assert_eq!(d.take_due(last + QUIET * QUIET_GROWTH), vec!["p"]);
    }

    #[test]
    fn stalls_within_a_bursts_pace_do_not_split_it() {
        let t0 = Instant::now();
        let mut d = Debounce::new(QUIET, LONGEST);
        // A client on a busy machine: a change every 40 ms, and every tenth gap a 150 ms stall,
        // which a fixed 50 ms pause would split the burst at.
        let mut now = t0;
        for n in 1..=30 {
            assert!(d.take_due(now).is_empty(), "written during the burst at {n}");
            d.changed("p", now);
            now += if n % 10 == 0 { ms(150) } else { ms(40) };
        }
        let last = d.keys["p"].last;
        assert_eq!(last - t0, ms(27 * 40 + 2 * 150));
        assert_eq!(d.take_due(d.next_due().unwrap()), vec!["p"]);
        assert!(d.is_empty());
    }

    #[test]
    fn changes_further_apart_than_the_longest_pause_each_wait_the_base_pause() {
        let t0 = Instant::now();
        let mut d = Debounce::new(QUIET, LONGEST);
        // One object after another, each delivered before the next: the latency of each stays
        // the base pause.
        for n in 0..10 {
            let now = t0 + ms(300 * n);
            d.changed("p", now);
            assert_eq!(d.next_due(), Some(now + QUIET), "change {n}");
            assert_eq!(d.take_due(now + QUIET), vec!["p"]);
        }
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
