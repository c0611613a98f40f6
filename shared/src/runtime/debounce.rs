//! Gathering bursts of changes into one write per key ([`Debounce`]): a key is due once its
//! changes stop for a quiet pause, or a longest wait after its first unwritten change. A lone
//! change is written after the base quiet pause alone (its latency stays short); a burst (objects
//! created one after another) becomes one write, or one per longest wait while it lasts, not one
//! per quiet pause.
//!
//! In a stream of arrivals (objects created or deleted one after another) the quiet pause follows
//! the stream's pace: [`PACE_FACTOR`] times its typical gap between arrivals, from the base pause
//! up to [`QUIET_GROWTH`] times it. A client that creates objects one round trip after another on
//! a busy machine leaves gaps longer than the base pause now and then; a fixed pause would split
//! its burst there, and each split rewrites all the key holds. Arrivals further apart than
//! [`QUIET_GROWTH`] base pauses set no pace, and other changes (an object updated, its status
//! written back) keep the base pause: a user waiting on one change at a time sees its latency
//! unchanged.
//!
//! A fast stream (its arrivals on average at most [`FAST_GAP`] times the base pause apart) also
//! waits out stalls of up to a [`STALL_SHARE`]th of how long it has lasted, up to
//! [`STREAM_HORIZON`] times the base pause: a long burst holds many objects, each split rewrites
//! them all, and the last of them waits at most that share longer. Early in a stream that share
//! is short, and a busy machine stalls a client for longer than that just as it begins (a file's
//! first objects written alone, then all of them again): so a fast stream also waits out
//! [`ARRIVAL_STALL`] base pauses per arrival so far, up to [`ARRIVALS_STALL_MOST`] base pauses. A
//! client creating objects one at a time, each after the last was delivered, is never that fast
//! (every delivery itself takes more than the base pause), so its objects keep their latency.
//!
//! While a burst goes on past its longest wait, each next wait doubles (up to
//! [`LONGEST_GROWTH`] times the first): every write of a growing key rewrites all it holds, so
//! a constant pace would make a long burst cost the square of its length. A fast stream is a
//! batch being created, not a user waiting on each object: its longest wait is at least
//! [`FAST_LONGEST_GROWTH`] times the first, so that a file `kubectl` applies on a busy machine
//! (100 objects in 4 to 9 s here) is one write when it ends, not one every few seconds while it
//! lasts (each of which a transport writes to every WEC).

use std::collections::BTreeMap;
use std::time::Duration;

// Tokio's clock, so that tests with a paused clock drive it.
use super::metrics::QueueMetrics;
use tokio::time::Instant;

/// How far the longest wait grows while a burst goes on.
pub const LONGEST_GROWTH: u32 = 16;

/// A fast stream's longest wait, at least, in first longest waits.
pub const FAST_LONGEST_GROWTH: u32 = 4;

/// How far the quiet pause grows with a slow stream's pace.
pub const QUIET_GROWTH: u32 = 4;

/// The quiet pause, in the stream's typical gaps between arrivals.
pub const PACE_FACTOR: u32 = 4;

/// How far apart arrivals still belong to one stream, and the longest quiet pause, in base
/// pauses.
pub const STREAM_HORIZON: u32 = 60;

/// A fast stream's arrivals are on average at most this many base pauses apart.
pub const FAST_GAP: u32 = 2;

/// A fast stream waits out stalls of up to this fraction (1/N) of how long it has lasted.
pub const STALL_SHARE: u32 = 4;

/// A fast stream waits out stalls of up to this many base pauses per arrival so far...
pub const ARRIVAL_STALL: u32 = 2;

/// ...up to this many base pauses.
pub const ARRIVALS_STALL_MOST: u32 = 30;

/// The keys with unwritten changes, and when each is due.
#[derive(Debug)]
pub struct Debounce<K> {
    quiet: Quiet,
    longest: Duration,
    keys: BTreeMap<K, Burst>,
    /// Keys added, and how long each waited from its first change to being handed out.
    times: QueueMetrics,
}

/// The bounds of the quiet pause, and the longest wait of a fast stream.
#[derive(Clone, Copy, Debug)]
struct Quiet {
    base: Duration,
    /// The most a stream's pace makes the pause.
    most: Duration,
    /// Arrivals further apart start a new stream; the most any pause is.
    horizon: Duration,
    /// A fast stream's longest wait, at least.
    fast_longest: Duration,
}

impl Quiet {
    /// The pause for a burst whose typical gap is `pace`, if it has one yet.
    fn after(self, pace: Option<Duration>) -> Duration {
        pace.map_or(self.base, |pace| (pace * PACE_FACTOR).clamp(self.base, self.most))
    }

    /// Whether `stream`'s arrivals came on average at most [`FAST_GAP`] base pauses apart.
    fn fast(self, stream: Stream) -> bool {
        let gaps = stream.arrivals.saturating_sub(1);
        gaps > 0 && stream.lasted() <= self.base * FAST_GAP * gaps
    }

    /// The stall `stream` waits out: none unless it is fast.
    fn stall(self, stream: Stream) -> Duration {
        if self.fast(stream) {
            let by_arrivals = self.base * ARRIVAL_STALL.saturating_mul(stream.arrivals).min(ARRIVALS_STALL_MOST);
            (stream.lasted() / STALL_SHARE).max(by_arrivals).min(self.horizon)
        } else {
            Duration::ZERO
        }
    }
}

/// Arrivals no further apart than the horizon, one after another.
#[derive(Clone, Copy, Debug)]
struct Stream {
    from: Instant,
    last: Instant,
    arrivals: u32,
    /// The typical gap between its arrivals (a moving average) while they come no further
    /// apart than the most a pace makes the pause.
    pace: Option<Duration>,
}

impl Stream {
    fn lasted(self) -> Duration {
        self.last.saturating_duration_since(self.from)
    }
}

#[derive(Clone, Copy, Debug)]
struct Burst {
    /// The first unwritten change, if any: a key written while its burst goes on stays until
    /// the burst stops, so that its next wait is longer.
    first: Option<Instant>,
    last: Instant,
    longest: Duration,
    /// The stream of arrivals, once there was one.
    stream: Option<Stream>,
}

impl Burst {
    /// Its stream of arrivals, unless that has stopped.
    fn stream(self, quiet: Quiet) -> Option<Stream> {
        self.stream.filter(|s| self.last - s.last <= quiet.horizon)
    }

    fn quiet(self, quiet: Quiet) -> Duration {
        // A stream of arrivals that has stopped no longer applies, nor its pace once a pause
        // of that pace has passed.
        let Some(stream) = self.stream(quiet) else {
            return quiet.base;
        };
        let paced = self.last - stream.last <= quiet.most;
        quiet.after(stream.pace.filter(|_| paced)).max(quiet.stall(stream))
    }

    /// Its longest wait, longer while a fast stream goes on.
    fn longest(self, quiet: Quiet) -> Duration {
        if self.stream(quiet).is_some_and(|s| quiet.fast(s)) {
            self.longest.max(quiet.fast_longest)
        } else {
            self.longest
        }
    }

    fn due(self, quiet: Quiet) -> Option<Instant> {
        self.first
            .map(|first| (self.last + self.quiet(quiet)).min(first + self.longest(quiet)))
    }
}

impl<K: Ord + Clone> Debounce<K> {
    /// Keys are due a quiet pause after their last change (`quiet`, or up to [`QUIET_GROWTH`]
    /// times it in a slow stream of arrivals), and at most `longest` after their first (never
    /// before `quiet`; [`FAST_LONGEST_GROWTH`] times `longest` in a fast stream).
    pub fn new(quiet: Duration, longest: Duration) -> Debounce<K> {
        let longest = longest.max(quiet);
        Debounce {
            quiet: Quiet {
                base: quiet,
                most: quiet * QUIET_GROWTH,
                horizon: quiet * STREAM_HORIZON,
                fast_longest: longest * FAST_LONGEST_GROWTH,
            },
            longest,
            keys: BTreeMap::new(),
            times: QueueMetrics::default(),
        }
    }

    /// The same, measuring into `times`.
    pub fn measured_by(self, times: QueueMetrics) -> Debounce<K> {
        Debounce { times, ..self }
    }

    /// `key` changed at `now`.
    pub fn changed(&mut self, key: K, now: Instant) {
        self.burst(key, now);
    }

    /// `key` changed at `now` by `count` arrivals (objects created or deleted): arrivals one
    /// after another set the pace the quiet pause follows.
    pub fn arrived(&mut self, key: K, now: Instant, count: u32) {
        let Quiet { most, horizon, .. } = self.quiet;
        let burst = self.burst(key, now);
        let going_on = burst.stream.map(|s| (s, now.saturating_duration_since(s.last)));
        burst.stream = Some(match going_on {
            Some((stream, gap)) if gap <= horizon => Stream {
                last: now,
                arrivals: stream.arrivals.saturating_add(count),
                pace: match stream.pace {
                    _ if gap > most => None,
                    None => Some(gap),
                    Some(pace) => Some((pace * 3 + gap) / 4),
                },
                ..stream
            },
            _ => Stream {
                from: now,
                last: now,
                arrivals: count,
                pace: None,
            },
        });
    }

    /// Notes a change of `key` at `now`; its burst.
    fn burst(&mut self, key: K, now: Instant) -> &mut Burst {
        let (quiet, longest) = (self.quiet, self.longest);
        let burst = self.keys.entry(key).or_insert(Burst {
            first: None,
            last: now,
            longest,
            stream: None,
        });
        if burst.first.is_none() && now.saturating_duration_since(burst.last) >= burst.quiet(quiet) {
            // Written, and quiet since: the next write waits the first longest wait again.
            burst.longest = longest;
        }
        burst.last = now;
        if burst.first.is_none() {
            self.times.added();
        }
        burst.first.get_or_insert(now);
        burst
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
                if let Some(first) = burst.first.take() {
                    self.times.started(now.saturating_duration_since(first));
                }
                burst.longest = (burst.longest(quiet) * 2).min(ceiling);
            }
            // A written key is forgotten once no next arrival could count as its stream's.
            burst.first.is_some() || burst.last + quiet.horizon > now
        });
        due
    }

    /// Hands out every waiting key at `now`, due or not.
    pub fn take_all(&mut self, now: Instant) -> Vec<K> {
        std::mem::take(&mut self.keys)
            .into_iter()
            .filter_map(|(key, burst)| {
                self.times.started(now.saturating_duration_since(burst.first?));
                Some(key)
            })
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

    /// Arrivals every 40 ms (kubectl creating a file's objects) for `lasting`, taking what is
    /// due before each; when "p" was written, counted from the first.
    fn fast_stream(d: &mut Debounce<&'static str>, from: Instant, lasting: Duration) -> Vec<Duration> {
        let mut writes = Vec::new();
        let mut now = from;
        while now - from <= lasting {
            if !d.take_due(now).is_empty() {
                writes.push(now - from);
            }
            d.arrived("p", now, 1);
            now += ms(40);
        }
        writes
    }

    #[test]
    fn a_fast_stream_within_its_longer_wait_is_one_write_when_it_ends() {
        let t0 = Instant::now();
        let mut d = Debounce::new(QUIET, LONGEST);
        // 6 s of creates, three times the longest wait of other bursts: none written meanwhile.
        assert!(fast_stream(&mut d, t0, ms(6000)).is_empty());
        // Written once it stops, having waited out a stall of a quarter of its length.
        let last = t0 + ms(6000);
        assert_eq!(d.next_due(), Some(last + ms(1500)));
        assert_eq!(d.take_due(last + ms(1500)), vec!["p"]);
    }

    #[test]
    fn a_longer_fast_stream_is_written_at_doubling_waits_from_its_own() {
        let t0 = Instant::now();
        let mut d = Debounce::new(QUIET, LONGEST);
        // Waits of 8 s (4 x 2 s), then 16 s, then 32 s at most.
        let writes: Vec<u64> = fast_stream(&mut d, t0, ms(100_000))
            .iter()
            .map(Duration::as_secs)
            .collect();
        assert_eq!(writes, vec![8, 24, 56, 88]);
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
        d.changed("p", later + ms(100));
        assert_eq!(d.next_due(), Some(later + ms(100) + QUIET));
        for n in 1..300 {
            d.changed("p", later + ms(100 + 10 * n));
        }
        assert_eq!(d.next_due(), Some(later + ms(100) + LONGEST));
    }

    #[test]
    fn arrivals_slower_than_the_base_pause_are_split_once_then_waited_for() {
        let t0 = Instant::now();
        let mut d = Debounce::new(QUIET, LONGEST);
        // An arrival every 60 ms for about a second: the first is written alone, as a lone
        // change would be; from the second on, the pause follows their pace (4 x 60 ms, at most
        // 200 ms), and, a fast stream, waits out stalls of 2 base pauses per arrival (at most
        // 1.5 s).
        let mut writes = Vec::new();
        for n in 0..17 {
            let now = t0 + ms(60 * n);
            if !d.take_due(now).is_empty() {
                writes.push(now - t0);
            }
            d.arrived("p", now, 1);
        }
        assert_eq!(writes, vec![ms(60)]);
        let last = t0 + ms(960);
        assert_eq!(d.next_due(), Some(last + ms(1500)));
        assert_eq!(d.take_due(last + ms(1500)), vec!["p"]);
    }

    #[test]
    fn stalls_within_a_streams_pace_do_not_split_it() {
        let t0 = Instant::now();
        let mut d = Debounce::new(QUIET, LONGEST);
        // A client on a busy machine: an object created every 40 ms, and every tenth gap a
        // 150 ms stall, which a fixed 50 ms pause would split the burst at.
        let mut now = t0;
        for n in 1..=30 {
            assert!(d.take_due(now).is_empty(), "written during the burst at {n}");
            d.arrived("p", now, 1);
            now += if n % 10 == 0 { ms(150) } else { ms(40) };
        }
        let last = d.keys["p"].last;
        assert_eq!(last - t0, ms(27 * 40 + 2 * 150));
        assert_eq!(d.take_due(d.next_due().unwrap()), vec!["p"]);
        assert!(d.is_empty());
    }

    #[test]
    fn a_fast_stream_waits_out_a_stall_of_a_quarter_of_how_long_it_has_lasted() {
        // kubectl creating objects every 40 ms, then stalling on a busy machine: after 8 s of
        // creates the stream waits out 2 s, and after 12 s (or more) 3 s.
        assert!(!stalled_stream_is_split(ms(8000), ms(1990)));
        assert!(stalled_stream_is_split(ms(8000), ms(2010)));
        assert!(!stalled_stream_is_split(ms(20_000), ms(2990)));
        // No stream waits out more than the horizon.
        assert!(stalled_stream_is_split(ms(20_000), ms(3010)));
    }

    #[test]
    fn a_young_fast_stream_waits_out_two_base_pauses_per_arrival() {
        // 5 objects in 160 ms: a stall of 500 ms (not 40, a quarter of 160) is waited out.
        assert!(!stalled_stream_is_split(ms(160), ms(490)));
        assert!(stalled_stream_is_split(ms(160), ms(510)));
        // From 15 arrivals on, 1.5 s, until a quarter of the stream's length is more.
        assert!(!stalled_stream_is_split(ms(1000), ms(1490)));
        assert!(stalled_stream_is_split(ms(1000), ms(1510)));
        assert!(stalled_stream_is_split(ms(4000), ms(1510)));
    }

    #[test]
    fn objects_seen_together_are_a_fast_stream_of_that_many_arrivals() {
        let t0 = Instant::now();
        let mut d = Debounce::new(QUIET, LONGEST);
        // A file's first 4 objects, seen at once by a controller that was busy: they wait out a
        // stall of 400 ms for the rest, instead of being written alone after 50 ms.
        d.arrived("p", t0, 4);
        assert_eq!(d.next_due(), Some(t0 + ms(400)));
        // One object alone keeps the base pause.
        d.arrived("q", t0, 1);
        assert_eq!(d.take_due(t0 + QUIET), vec!["q"]);
    }

    /// Whether "p" is written during a stall of `stall` after arrivals every 40 ms for
    /// `lasting`, with a longest wait that never comes.
    fn stalled_stream_is_split(lasting: Duration, stall: Duration) -> bool {
        let t0 = Instant::now();
        let mut d = Debounce::new(QUIET, ms(60_000));
        let mut now = t0;
        while now - t0 <= lasting {
            assert!(d.take_due(now).is_empty(), "written before the stall");
            d.arrived("p", now, 1);
            now += ms(40);
        }
        // The next arrival, had it come.
        let resumed = now - ms(40) + stall;
        !d.take_due(resumed - ms(1)).is_empty()
    }

    #[test]
    fn arrivals_too_slow_for_a_pace_or_a_fast_stream_each_wait_the_base_pause() {
        let t0 = Instant::now();
        let mut d = Debounce::new(QUIET, LONGEST);
        // One object after another, each delivered before the next (300 ms apart: one stream,
        // never a fast one): the latency of each stays the base pause.
        each_waits_the_base_pause(&mut d, t0, ms(300), |d, key, now| d.arrived(key, now, 1));
    }

    /// Ten changes `gap` apart from `from`, each noted by `note`: each is due the base pause
    /// after it.
    fn each_waits_the_base_pause(
        d: &mut Debounce<&'static str>,
        from: Instant,
        gap: Duration,
        note: fn(&mut Debounce<&'static str>, &'static str, Instant),
    ) {
        for n in 0..10 {
            let now = from + gap * n;
            note(d, "p", now);
            assert_eq!(d.next_due(), Some(now + QUIET), "change {n}");
            assert_eq!(d.take_due(now + QUIET), vec!["p"]);
        }
    }

    #[test]
    fn other_changes_keep_the_base_pause() {
        let t0 = Instant::now();
        let mut d = Debounce::new(QUIET, LONGEST);
        // Objects updated, or their status written back, every 60 ms: each is written after
        // 50 ms, as a fixed pause would.
        each_waits_the_base_pause(&mut d, t0, ms(60), Debounce::changed);
        // Once a stream of arrivals has stopped for longer than any stall, an update waits the
        // base pause again.
        for n in 0..10 {
            d.arrived("p", t0 + ms(1000 + 40 * n), 1);
        }
        let last = t0 + ms(1360);
        assert_eq!(d.take_due(d.next_due().unwrap()), vec!["p"]);
        d.changed("p", last + QUIET * STREAM_HORIZON + ms(1));
        assert_eq!(d.next_due(), Some(last + QUIET * STREAM_HORIZON + ms(1) + QUIET));
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
