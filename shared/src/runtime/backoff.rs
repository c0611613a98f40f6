//! Retries: which failed writes are worth trying again ([`failure`]), and per-key capped
//! exponential back-off ([`Backoff`]): a key that keeps failing is tried again ever less often
//! (never in a hot loop), and one failing key does not delay the others.

use std::collections::BTreeMap;
use std::time::Duration;

// Tokio's clock, so that tests with a paused clock drive retries too.
use tokio::time::Instant;

/// The first pause before a failed write is tried again, and the longest.
pub const RETRY_MIN: Duration = Duration::from_secs(1);
pub const RETRY_MAX: Duration = Duration::from_secs(60);

/// The pause after `failures` consecutive failures (1, 2, ...): `min`, doubling up to `max`.
pub fn pause(min: Duration, max: Duration, failures: u32) -> Duration {
    min.saturating_mul(2u32.saturating_pow(failures.saturating_sub(1).min(20)))
        .min(max)
}

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
    failures: u32,
}

impl<K: Ord + Clone> Backoff<K> {
    /// Pauses of [`RETRY_MIN`] doubling up to [`RETRY_MAX`]: for failed writes.
    pub fn for_writes() -> Backoff<K> {
        Backoff::new(RETRY_MIN, RETRY_MAX)
    }

    /// Pauses start at `min` and double up to `max`.
    pub fn new(min: Duration, max: Duration) -> Backoff<K> {
        Backoff {
            min,
            max,
            keys: BTreeMap::new(),
        }
    }

    /// `key` failed at `now`: it is due again after its pause (returned), which then doubles.
    pub fn failed(&mut self, key: K, now: Instant) -> Duration {
        let retry = self.keys.entry(key).or_insert(Retry { due: None, failures: 0 });
        retry.failures = retry.failures.saturating_add(1);
        let pause = pause(self.min, self.max, retry.failures);
        retry.due = Some(now + pause);
        pause
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

    /// Whether `key` waits for a retry.
    pub fn is_waiting(&self, key: &K) -> bool {
        self.keys.get(key).is_some_and(|r| r.due.is_some())
    }

    /// How many keys wait for a retry.
    pub fn waiting(&self) -> usize {
        self.keys.values().filter(|r| r.due.is_some()).count()
    }
}

/// What a failed write calls for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failure {
    /// The object is gone: nothing is left to write.
    Moot,
    /// Refused by the apiserver (invalid, forbidden, too large, …): trying again cannot help,
    /// only a change of what is written.
    Refused,
    /// Anything else (conflict, throttling, server or network trouble): try again later.
    Transient,
}

/// How the apiserver reports an object etcd would not store.
const ETCD_TOO_LARGE: &str = "etcdserver: request is too large";

/// What the failed write `err` calls for.
pub fn failure(err: &kube::Error) -> Failure {
    match err {
        kube::Error::Api(status) if status.code == 404 => Failure::Moot,
        kube::Error::Api(status) if (400..500).contains(&status.code) && ![409, 429].contains(&status.code) => {
            Failure::Refused
        }
        // etcd refuses an object over its request limit (1.5 MiB by default); the apiserver
        // passes that on as a 500, but the same object is refused every time.
        kube::Error::Api(status) if status.message.contains(ETCD_TOO_LARGE) => Failure::Refused,
        _ => Failure::Transient,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api_error(code: u16) -> kube::Error {
        kube::Error::Api(
            kube::core::Status {
                code,
                ..Default::default()
            }
            .boxed(),
        )
    }

    #[test]
    fn only_transient_failures_are_worth_a_retry() {
        assert_eq!(failure(&api_error(404)), Failure::Moot);
        for code in [400, 403, 413, 422] {
            assert_eq!(failure(&api_error(code)), Failure::Refused, "{code}");
        }
        for code in [409, 429, 500, 503] {
            assert_eq!(failure(&api_error(code)), Failure::Transient, "{code}");
        }
        assert_eq!(
            failure(&kube::Error::LinesCodecMaxLineLengthExceeded),
            Failure::Transient
        );
    }

    #[test]
    fn an_object_too_large_for_etcd_is_refused() {
        // What a real apiserver answers for a 2 MB custom resource.
        let too_large = kube::core::Status {
            code: 500,
            message: "etcdserver: request is too large".into(),
            ..Default::default()
        };
        assert_eq!(failure(&kube::Error::Api(too_large.boxed())), Failure::Refused);
    }

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
