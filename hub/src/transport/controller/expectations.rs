//! The transport's own ManifestWork writes that its cache has not shown yet, and what they
//! wrote. A Binding is planned from the cache, so one planned while the cache is behind what the
//! transport itself wrote places objects again that are already placed: under load (10,000
//! objects to 52 WECs) objects moved between a mailbox's ManifestWorks, and a ManifestWork written
//! from that stale view drops objects the WEC then deletes and creates again. So each write's
//! result (as the cache keeps it) or deletion is laid over the cache until the watch
//! shows it, it re-lists, or it has shown nothing for [`EXPIRY`] (a stuck watch must not keep it
//! for good). A watch that is only behind shows every write, however late: giving up on one
//! there planned its Binding from the stale cache, to be written again (at 10,000 objects × 52
//! WECs, the ITS's watch 182 s behind the writes on average, 471 given up on and 1,996
//! ManifestWork writes, 1.71× the final bytes, against 1,444 and 1.18× the run before), adding
//! to the load that kept the watch behind.
//! Waiting for the watch instead, as kube-controller-manager's expectations do, held each
//! Binding 122 s on average at 10,000 objects × 52 WECs, after kubectl's last creates.
//!
//! A write's outcome is known only once its reply arrives, and the watch may deliver it before
//! that: while a request is in flight, what the watch shows of that ManifestWork is remembered,
//! so nothing already seen is laid over the cache. (A Binding's requests are all answered before
//! its reconcile ends, and one Binding is reconciled at a time, so no plan, of it or of another
//! Binding taking its objects over, reads one in flight.)

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::histogram::Histogram;
use tokio::time::Instant;

use crate::transport::types::WorkKey;

/// How long, from a write's reply or the watch's last event, whichever came later, the write is
/// laid over the cache at most while the watch does not show it: as long as
/// kube-controller-manager's expectations last.
pub const EXPIRY: Duration = Duration::from_secs(300);

/// How soon the watch shows the transport's own writes. Clones share the values.
#[derive(Clone, Debug)]
pub struct Lag {
    /// Seconds from a write's reply to the watch showing it (0 when it showed first).
    pub seen: Histogram,
    /// Writes given up on after the watch had shown nothing for [`EXPIRY`].
    pub given_up: Counter,
}

impl Default for Lag {
    fn default() -> Self {
        Lag {
            seen: Histogram::new([0.05, 0.25, 1.0, 5.0, 15.0, 60.0, 300.0]),
            given_up: Counter::default(),
        }
    }
}

/// What a finished request leaves to be seen in the watch.
#[derive(Debug)]
pub enum Outcome<W> {
    /// The wrapped object as written, as the cache keeps it, at the resourceVersion of the write's reply.
    Written(String, Arc<W>),
    /// The wrapped object deleted, or being deleted (OCM's agent holds it with a finalizer).
    Deleted,
}

/// One wrapped object as the watch shows it.
#[derive(Clone, Copy, Debug)]
pub struct Sight<'a> {
    pub version: &'a str,
    /// Gone, or carrying a deletionTimestamp.
    pub deleted: bool,
}

impl<W> Outcome<W> {
    fn seen_in(&self, sight: Sight<'_>) -> bool {
        match self {
            Outcome::Written(version, _) => version == sight.version,
            Outcome::Deleted => sight.deleted,
        }
    }

    /// Whether a cache holding `cached` (`None`: not holding it) has seen it.
    fn cached_in(&self, cached: Option<Sight<'_>>) -> bool {
        match self {
            Outcome::Written(..) => cached.is_some_and(|sight| self.seen_in(sight)),
            Outcome::Deleted => cached.is_none_or(|sight| sight.deleted),
        }
    }
}

struct Awaited<W> {
    /// The Binding that wrote it, for the log.
    binding: String,
    /// When the request was sent; once it finished, when its reply came.
    since: Instant,
    /// `None` while the request is in flight.
    outcome: Option<Outcome<W>>,
    /// What the watch showed while the request was in flight.
    seen: Vec<(String, bool)>,
}

/// The writes not seen yet, by wrapped object.
pub struct Expectations<W> {
    awaited: HashMap<WorkKey, Awaited<W>>,
    /// When the watch last showed a ManifestWork (a re-list ends every overlay anyway).
    watched: Option<Instant>,
    lag: Lag,
}

impl<W> Default for Expectations<W> {
    fn default() -> Self {
        Expectations::new(Lag::default())
    }
}

impl<W> Expectations<W> {
    pub fn new(lag: Lag) -> Self {
        Expectations {
            awaited: HashMap::new(),
            watched: None,
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

    /// The request for `work` finished: `None` when it failed (nothing is known to lay over the
    /// cache); `cached` is what the cache holds of it now.
    pub fn sent(&mut self, work: &WorkKey, outcome: Option<Outcome<W>>, cached: Option<Sight<'_>>, now: Instant) {
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

    /// The watch shows `work` as `sight`. Whether that is a finished write's outcome: what plans
    /// have read since its reply, so nothing new.
    pub fn observed(&mut self, work: &WorkKey, sight: Sight<'_>, now: Instant) -> bool {
        self.watched = Some(now);
        let Some(awaited) = self.awaited.get_mut(work) else {
            return false;
        };
        match &awaited.outcome {
            None => awaited.seen.push((sight.version.to_string(), sight.deleted)),
            Some(outcome) if outcome.seen_in(sight) => {
                self.seen(work, now);
                return true;
            }
            Some(_) => {}
        }
        false
    }

    /// The watch re-listed: the events of the writes may never come, and the cache holds what
    /// the ITS held at some point after the watch failed.
    pub fn relisted(&mut self) {
        self.awaited.clear();
    }

    /// The finished writes the watch has not shown yet at `now`, by wrapped object: what each
    /// wrote, or `None` where it deleted. Plans read them in place of what the cache holds.
    pub fn unseen(&mut self, now: Instant) -> impl Iterator<Item = (&WorkKey, Option<&Arc<W>>)> {
        self.expire(now);
        self.awaited
            .iter()
            .filter_map(|(work, awaited)| match &awaited.outcome {
                Some(Outcome::Written(_, written)) => Some((work, Some(written))),
                Some(Outcome::Deleted) => Some((work, None)),
                None => None,
            })
    }

    /// Gives up on what the watch has not shown when it has shown nothing for [`EXPIRY`] since
    /// the reply (any Binding's write, also one deleted since), and logs it; a request in flight
    /// is not given up on (its client times it out).
    fn expire(&mut self, now: Instant) {
        let watched = self.watched;
        self.awaited.retain(|(mailbox, name), awaited| {
            let quiet_since = watched.map_or(awaited.since, |w| w.max(awaited.since));
            let expired = awaited.outcome.is_some() && now >= quiet_since + EXPIRY;
            if expired {
                self.lag.given_up.inc();
                let deleted = matches!(awaited.outcome, Some(Outcome::Deleted));
                tracing::warn!(
                    binding = awaited.binding,
                    mailbox,
                    name,
                    deleted,
                    "the watch has shown nothing since long after this ManifestWork write; planning from the cache"
                );
            }
            !expired
        });
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

    /// Written at `version`; what was written is `what`.
    fn written(version: &str, what: u8) -> Option<Outcome<u8>> {
        Some(Outcome::Written(version.into(), Arc::new(what)))
    }

    /// What is laid over the cache: each wrapped object with what was written (`None`: deleted).
    fn unseen(expectations: &mut Expectations<u8>, now: Instant) -> Vec<(String, Option<u8>)> {
        let mut unseen: Vec<_> = expectations
            .unseen(now)
            .map(|((_, name), work)| (name.clone(), work.map(|w| **w)))
            .collect();
        unseen.sort();
        unseen
    }

    #[test]
    fn a_write_is_laid_over_the_cache_until_the_watch_shows_its_version() {
        let lag = Lag::default();
        let mut expectations = Expectations::new(lag.clone());
        let now = Instant::now();
        expectations.sending(key("w-0"), "b", now);
        assert_eq!(unseen(&mut expectations, now), [], "in flight, not known yet");
        let replied = now + Duration::from_secs(10);
        expectations.sent(&key("w-0"), written("7", 1), Some(at("5")), replied);
        assert_eq!(unseen(&mut expectations, now), [("w-0".into(), Some(1))]);
        assert!(
            !expectations.observed(&key("w-0"), at("6"), replied),
            "an older version"
        );
        assert_eq!(unseen(&mut expectations, now), [("w-0".into(), Some(1))]);
        assert!(expectations.observed(&key("w-0"), at("7"), replied + Duration::from_secs(2)));
        assert_eq!(unseen(&mut expectations, now), []);
        let mut registry = prometheus_client::registry::Registry::default();
        registry.register("seen", "", lag.seen);
        ks_shared::runtime::assert_exports(&registry, &["seen_sum 2.0", "seen_count 1"]); // from the reply
    }

    #[test]
    fn what_the_watch_showed_while_in_flight_or_the_cache_holds_is_not_laid_over_it() {
        let mut expectations = Expectations::default();
        let now = Instant::now();
        expectations.sending(key("w-0"), "b", now);
        expectations.observed(&key("w-0"), at("7"), now);
        expectations.observed(&key("w-0"), at("8"), now);
        expectations.sent(&key("w-0"), written("7", 1), Some(at("8")), now);
        assert_eq!(unseen(&mut expectations, now), [], "seen before the reply");
        // A write that changed nothing answers with the version the cache holds.
        expectations.sending(key("w-0"), "b", now);
        expectations.sent(&key("w-0"), written("8", 1), Some(at("8")), now);
        assert_eq!(unseen(&mut expectations, now), []);
    }

    #[test]
    fn a_deletion_is_laid_over_the_cache_until_the_watch_shows_it_deleted_or_deleting() {
        let mut expectations = Expectations::default();
        let now = Instant::now();
        expectations.sending(key("w-0"), "b", now);
        expectations.sent(&key("w-0"), Some(Outcome::Deleted), Some(at("5")), now);
        expectations.observed(&key("w-0"), at("6"), now);
        assert_eq!(unseen(&mut expectations, now), [("w-0".into(), None)]);
        let deleting = Sight {
            version: "7",
            deleted: true,
        };
        expectations.observed(&key("w-0"), deleting, now);
        assert_eq!(unseen(&mut expectations, now), []);
        // Already out of the cache when the reply came.
        expectations.sending(key("w-1"), "b", now);
        expectations.sent(&key("w-1"), Some(Outcome::Deleted), None, now);
        assert_eq!(unseen(&mut expectations, now), []);
    }

    #[test]
    fn a_failed_request_a_relist_or_expiry_ends_the_overlay() {
        let mut expectations = Expectations::default();
        let now = Instant::now();
        expectations.sending(key("w-0"), "b", now);
        expectations.sent(&key("w-0"), None, None, now);
        assert_eq!(unseen(&mut expectations, now), [], "failed");
        expectations.sending(key("w-0"), "b", now);
        expectations.sent(&key("w-0"), written("7", 1), None, now);
        expectations.relisted();
        assert_eq!(unseen(&mut expectations, now), [], "relisted");
        expectations.sending(key("w-0"), "b", now);
        let late = now + 2 * EXPIRY;
        assert_eq!(
            unseen(&mut expectations, late),
            [],
            "in flight: not laid over the cache"
        );
        assert_eq!(expectations.awaited.len(), 1, "nor expired");
        expectations.sent(&key("w-0"), written("7", 1), None, late);
        let before = late + EXPIRY - Duration::from_secs(1);
        assert_eq!(unseen(&mut expectations, before).len(), 1, "counted from the reply");
        assert_eq!(unseen(&mut expectations, late + EXPIRY), [], "expired");
        assert_eq!(expectations.lag.given_up.get(), 1, "counted");
    }

    #[test]
    fn a_watch_that_is_behind_but_showing_other_writes_is_waited_for() {
        let mut expectations = Expectations::default();
        let now = Instant::now();
        expectations.sending(key("w-0"), "b", now);
        expectations.sent(&key("w-0"), written("7", 1), None, now);
        // The watch works through older events: others' writes, and this one's older version.
        let later = now + EXPIRY - Duration::from_secs(1);
        expectations.observed(&key("w-1"), at("3"), later);
        expectations.observed(&key("w-0"), at("4"), later);
        let past_expiry = now + EXPIRY + Duration::from_secs(10);
        assert_eq!(
            unseen(&mut expectations, past_expiry),
            [("w-0".into(), Some(1))],
            "still laid over the cache"
        );
        assert_eq!(
            unseen(&mut expectations, later + EXPIRY),
            [],
            "given up once the watch has shown nothing for EXPIRY"
        );
        assert_eq!(expectations.lag.given_up.get(), 1);
    }
}
