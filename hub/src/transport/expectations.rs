//! The transport's own ManifestWork writes that its cache has not shown yet. A Binding is planned
//! from the cache, so one planned while the cache is behind what the transport itself wrote
//! places objects again that are already placed: under load (10,000 objects to 52 WECs) objects
//! moved between a mailbox's ManifestWorks, and a ManifestWork written from that stale view drops
//! objects the WEC then deletes and creates again. As kube-controller-manager does with its
//! expectations, a Binding waits until its writes have come back through the watch, or
//! [`EXPIRY`] has passed (a watch re-listed or stuck must not stop it for good).
//!
//! A write's outcome is known only once its reply arrives, and the watch may deliver it before
//! that: while a request is in flight, what the watch shows of that ManifestWork is remembered,
//! so nothing already seen is waited for.

use std::collections::HashMap;
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::histogram::Histogram;
use tokio::time::Instant;

use super::moves::WorkKey;

/// How long a Binding waits at most, from a write's reply, for the watch to show it: as long as
/// kube-controller-manager's. At 10,000 objects × 52 WECs the ITS's watch showed the writes 94 s
/// after their replies on average; a minute from the request expired 1,146 of them, and each
/// Binding planned past its writes placed objects again (2,089 writes instead of 1,248).
pub const EXPIRY: Duration = Duration::from_secs(300);

/// How soon the watch shows the transport's own writes. Clones share the values.
#[derive(Clone, Debug)]
pub struct Lag {
    /// Seconds from a write's reply to the watch showing it (0 when it showed first).
    pub seen: Histogram,
    /// Writes the watch had not shown after [`EXPIRY`].
    pub given_up: Counter,
    /// Seconds a changed Binding waited, from when its own writes first held it back until it
    /// was planned again: the time these waits add to delivery.
    pub held: Histogram,
}

impl Default for Lag {
    fn default() -> Self {
        Lag {
            seen: Histogram::new([0.05, 0.25, 1.0, 5.0, 15.0, 60.0, 300.0]),
            given_up: Counter::default(),
            held: Histogram::new([0.05, 0.25, 1.0, 5.0, 15.0, 60.0, 300.0]),
        }
    }
}

/// What a finished request leaves to be seen in the watch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The ManifestWork at this resourceVersion (the write's reply).
    Version(String),
    /// The ManifestWork deleted, or being deleted (OCM's agent holds it with a finalizer).
    Deleted,
}

/// One ManifestWork as the watch shows it.
#[derive(Clone, Copy, Debug)]
pub struct Sight<'a> {
    pub version: &'a str,
    /// Gone, or carrying a deletionTimestamp.
    pub deleted: bool,
}

impl Outcome {
    fn seen_in(&self, sight: Sight<'_>) -> bool {
        match self {
            Outcome::Version(version) => version == sight.version,
            Outcome::Deleted => sight.deleted,
        }
    }

    /// Whether a cache holding `cached` (`None`: not holding it) has seen it.
    fn cached_in(&self, cached: Option<Sight<'_>>) -> bool {
        match self {
            Outcome::Version(_) => cached.is_some_and(|sight| self.seen_in(sight)),
            Outcome::Deleted => cached.is_none_or(|sight| sight.deleted),
        }
    }
}

struct Awaited {
    binding: String,
    /// When the request was sent; once it finished, when its reply came.
    since: Instant,
    /// `None` while the request is in flight.
    outcome: Option<Outcome>,
    /// What the watch showed while the request was in flight.
    seen: Vec<(String, bool)>,
}

/// The writes not seen yet, by ManifestWork.
#[derive(Default)]
pub struct Expectations {
    awaited: HashMap<WorkKey, Awaited>,
    lag: Lag,
}

impl Expectations {
    pub fn new(lag: Lag) -> Self {
        Expectations {
            awaited: HashMap::new(),
            lag,
        }
    }

    fn seen(&mut self, work: &WorkKey, now: Instant) {
        if let Some(awaited) = self.awaited.remove(work) {
            self.lag.seen.observe((now - awaited.since).as_secs_f64());
        }
    }

    /// `binding` is about to write or delete `work`.
    pub fn sending(&mut self, work: WorkKey, binding: &str, now: Instant) {
        let awaited = Awaited {
            binding: binding.to_string(),
            since: now,
            outcome: None,
            seen: Vec::new(),
        };
        self.awaited.insert(work, awaited);
    }

    /// The request for `work` finished: `None` when it failed (nothing is known to wait for);
    /// `cached` is what the cache holds of it now.
    pub fn sent(&mut self, work: &WorkKey, outcome: Option<Outcome>, cached: Option<Sight<'_>>, now: Instant) {
        let Some(outcome) = outcome else {
            self.awaited.remove(work);
            return;
        };
        let Some(awaited) = self.awaited.get_mut(work) else {
            return;
        };
        let seen = awaited.seen.iter().any(|(version, deleted)| {
            outcome.seen_in(Sight {
                version,
                deleted: *deleted,
            })
        });
        awaited.since = now;
        if seen || outcome.cached_in(cached) {
            self.seen(work, now);
        } else {
            awaited.seen = Vec::new();
            awaited.outcome = Some(outcome);
        }
    }

    /// The watch shows `work` as `sight`.
    pub fn observed(&mut self, work: &WorkKey, sight: Sight<'_>, now: Instant) {
        let Some(awaited) = self.awaited.get_mut(work) else {
            return;
        };
        match &awaited.outcome {
            None => awaited.seen.push((sight.version.to_string(), sight.deleted)),
            Some(outcome) if outcome.seen_in(sight) => self.seen(work, now),
            Some(_) => {}
        }
    }

    /// The watch re-listed: the events of the writes may never come, and the cache holds what
    /// the ITS held at some point after the watch failed.
    pub fn relisted(&mut self) {
        self.awaited.clear();
    }

    /// Until when `binding` waits for its writes to show, if it does. What has waited longer than
    /// [`EXPIRY`] since its reply (any Binding's, also one deleted since) is given up on, and
    /// logged; a request in flight is not (its client times it out).
    pub fn wait_of(&mut self, binding: &str, now: Instant) -> Option<Instant> {
        self.awaited.retain(|(mailbox, name), awaited| {
            let expired = awaited.outcome.is_some() && now >= awaited.since + EXPIRY;
            if expired {
                self.lag.given_up.inc();
                tracing::warn!(binding = awaited.binding, mailbox, name, outcome = ?awaited.outcome,
                    "the watch did not show this ManifestWork write in time; planning without it");
            }
            !expired
        });
        self.awaited
            .values()
            .filter(|awaited| awaited.binding == binding)
            .map(|awaited| awaited.since + EXPIRY)
            .min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> WorkKey {
        ("c1".into(), name.into())
    }

    fn at(version: &str) -> Sight<'_> {
        Sight {
            version,
            deleted: false,
        }
    }

    fn version(v: &str) -> Option<Outcome> {
        Some(Outcome::Version(v.into()))
    }

    #[test]
    fn a_write_waits_until_the_watch_shows_its_version() {
        let lag = Lag::default();
        let mut expectations = Expectations::new(lag.clone());
        let now = Instant::now();
        expectations.sending(key("w-0"), "b", now);
        assert_eq!(expectations.wait_of("b", now), Some(now + EXPIRY), "in flight");
        let replied = now + Duration::from_secs(10);
        expectations.sent(&key("w-0"), version("7"), Some(at("5")), replied);
        expectations.observed(&key("w-0"), at("6"), replied);
        assert!(
            expectations.wait_of("b", now).is_some(),
            "an older version is not the write"
        );
        assert_eq!(expectations.wait_of("other", now), None, "other Bindings do not wait");
        expectations.observed(&key("w-0"), at("7"), replied + Duration::from_secs(2));
        assert_eq!(expectations.wait_of("b", now), None);
        let mut registry = prometheus_client::registry::Registry::default();
        registry.register("seen", "", lag.seen);
        ks_shared::runtime::assert_exports(&registry, &["seen_sum 2.0", "seen_count 1"]); // from the reply
    }

    #[test]
    fn what_the_watch_showed_while_in_flight_or_the_cache_holds_is_not_waited_for() {
        let mut expectations = Expectations::default();
        let now = Instant::now();
        expectations.sending(key("w-0"), "b", now);
        expectations.observed(&key("w-0"), at("7"), now);
        expectations.observed(&key("w-0"), at("8"), now);
        expectations.sent(&key("w-0"), version("7"), Some(at("8")), now);
        assert_eq!(expectations.wait_of("b", now), None, "seen before the reply");
        // A write that changed nothing answers with the version the cache holds.
        expectations.sending(key("w-0"), "b", now);
        expectations.sent(&key("w-0"), version("8"), Some(at("8")), now);
        assert_eq!(expectations.wait_of("b", now), None);
    }

    #[test]
    fn a_deletion_waits_until_the_watch_shows_it_deleted_or_deleting() {
        let mut expectations = Expectations::default();
        let now = Instant::now();
        expectations.sending(key("w-0"), "b", now);
        expectations.sent(&key("w-0"), Some(Outcome::Deleted), Some(at("5")), now);
        expectations.observed(&key("w-0"), at("6"), now);
        assert!(expectations.wait_of("b", now).is_some());
        let deleting = Sight {
            version: "7",
            deleted: true,
        };
        expectations.observed(&key("w-0"), deleting, now);
        assert_eq!(expectations.wait_of("b", now), None);
        // Already out of the cache when the reply came.
        expectations.sending(key("w-1"), "b", now);
        expectations.sent(&key("w-1"), Some(Outcome::Deleted), None, now);
        assert_eq!(expectations.wait_of("b", now), None);
    }

    #[test]
    fn a_failed_request_a_relist_or_expiry_ends_the_wait() {
        let mut expectations = Expectations::default();
        let now = Instant::now();
        expectations.sending(key("w-0"), "b", now);
        expectations.sent(&key("w-0"), None, None, now);
        assert_eq!(expectations.wait_of("b", now), None, "failed");
        expectations.sending(key("w-0"), "b", now);
        expectations.sent(&key("w-0"), version("7"), None, now);
        expectations.relisted();
        assert_eq!(expectations.wait_of("b", now), None, "relisted");
        expectations.sending(key("w-0"), "b", now);
        let late = now + 2 * EXPIRY;
        assert!(
            expectations.wait_of("b", late).is_some(),
            "in flight, it does not expire"
        );
        expectations.sent(&key("w-0"), version("7"), None, late);
        assert!(expectations.wait_of("b", late).is_some(), "counted from the reply");
        assert_eq!(expectations.wait_of("b", late + EXPIRY), None, "expired");
        assert_eq!(expectations.wait_of("b", late), None, "and forgotten");
        assert_eq!(expectations.lag.given_up.get(), 1, "counted");
    }
}
