//! Writing a Binding's wrapped objects: those that differ written and the others deleted,
//! several at a time; objects that move held where they were until they land where they go.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};
use ks_shared::names::ORIGIN_BINDING_LABEL;
use kube::{Resource, ResourceExt};
use tokio::time::Instant;

use super::send::Rejection;
use super::state::{SETTLE_WAIT, Transport, WRITE_CONCURRENCY, work_key};
use crate::transport::plan::binding::Desired;
use crate::transport::plan::{binding, moves, sharers};
use crate::transport::plugin::{Error, Plugin};
use crate::transport::types::{Identity, SHARED_WITH_LABEL, WorkKey};

/// What writing a Binding's ManifestWorks did.
pub(super) struct Applied {
    /// The ITS's rejections.
    pub(super) rejections: Vec<String>,
    /// Some rejection may pass with nothing changed here (a mailbox namespace not there yet,
    /// or being deleted to be made again): the Binding is tried again after a back-off.
    pub(super) passing: bool,
    /// Some wait for objects to land in another.
    pub(super) holding: bool,
    /// Some wait for their WEC to report on the version before.
    pub(super) settling: bool,
    /// How long the writes took (zero when nothing was written).
    pub(super) writing: Duration,
}

/// Sets the [`sharers`] label of `work`, to be written at `key` holding `objects`, from `holders`.
pub(super) fn label_sharing<'o, W: Resource + Clone>(
    key: &WorkKey,
    work: &mut Cow<'_, W>,
    objects: impl IntoIterator<Item = &'o Identity>,
    holders: &sharers::Holders<'_>,
) {
    let label = sharers::label(&holders.sharers(key, objects));
    if work.labels().get(SHARED_WITH_LABEL) != Some(&label) {
        work.to_mut().labels_mut().insert(SHARED_WITH_LABEL.to_string(), label);
    }
}

impl<P: Plugin> Transport<P> {
    /// Writes the desired ManifestWorks that differ and deletes this Binding's others, several
    /// at a time (they are mostly in different WECs' mailboxes). One that would drop an object
    /// moving to another (of this Binding or another) keeps it until that one is applied (its
    /// status change brings the Binding back); one to delete waits whole. Returns the ITS's
    /// rejections of ManifestWorks, for the Binding's status, and whether any waits; other
    /// failures are errors (to retry).
    ///
    /// Writes carry no resourceVersion precondition: OCM's agents write every ManifestWork's
    /// status, and with one 24 of 43 reconciles at 10,000 objects failed with a conflict. A write
    /// planned from a cache that was behind, or one that lands late, shows in the watch of
    /// ManifestWorks, which brings the Binding back to write what it should hold. Writes and
    /// deletes of existing ones carry the UID the cache shows instead: they reach no object
    /// created under the name since.
    pub(super) async fn apply_works(
        &self,
        binding: &str,
        desired: BTreeMap<WorkKey, P::Wrapped>,
    ) -> Result<Applied, Error> {
        self.apply_works_leaving(binding, desired, &BTreeSet::new()).await
    }

    /// [`Transport::apply_works`], leaving the ManifestWorks in the `frozen` mailboxes (see
    /// [`Desired::frozen`]) as they are.
    pub(super) async fn apply_works_leaving(
        &self,
        binding: &str,
        desired: BTreeMap<WorkKey, P::Wrapped>,
        frozen: &BTreeSet<String>,
    ) -> Result<Applied, Error> {
        let mut current = self.current_works(binding);
        current.retain(|w| w.namespace().is_none_or(|mailbox| !frozen.contains(&mailbox)));
        let mut now: BTreeMap<WorkKey, moves::Current> =
            current.iter().map(|w| (work_key(&**w), self.as_is(w))).collect();
        let mut wanted: BTreeMap<WorkKey, BTreeSet<Identity>> = desired
            .iter()
            .map(|(k, w)| (k.clone(), self.plugin.gloss(w).into_iter().collect()))
            .collect();
        let dropped = moves::dropped(&now, &wanted);
        let taken = if dropped.is_empty() {
            BTreeMap::new()
        } else {
            self.add_takers(binding, &dropped, &mut now, &mut wanted)
        };
        let kept = moves::kept(&now, &wanted);
        let holding = current.iter().any(|w| kept.contains_key(&work_key(&**w)));
        if holding {
            tracing::debug!(
                binding,
                ?kept,
                "ManifestWorks keep the objects they lose until those are applied elsewhere"
            );
        }
        let around = self.around(desired.keys().chain(now.keys()));
        let holders = self.holders(&around);
        let now = Instant::now();
        let mut settling = false;
        let mut changes: Vec<BoxFuture<'_, Result<Option<Rejection>, Error>>> = Vec::new();
        for ((mailbox, name), work) in &desired {
            let work_key = (mailbox.clone(), name.clone());
            let mut work = match kept.get(&work_key) {
                Some(objects) => Cow::Owned(self.keeping(work, objects, &desired, &taken)),
                None => Cow::Borrowed(work),
            };
            let objects = wanted.get(&work_key).into_iter().chain(kept.get(&work_key)).flatten();
            label_sharing(&work_key, &mut work, objects, &holders);
            let existing = current
                .iter()
                .find(|w| w.namespace().as_deref() == Some(mailbox.as_str()) && w.name_any() == *name);
            if !existing.is_some_and(|existing| self.plugin.same_content(existing, &work)) {
                if existing.is_some_and(|existing| self.waits(existing, now)) {
                    settling = true;
                    continue;
                }
                let ours = existing.and_then(|existing| existing.uid());
                changes.push(
                    self.permitted(
                        async move { self.write_work(binding, mailbox, name, &work, ours.as_deref()).await },
                    )
                    .boxed(),
                );
            }
        }
        // One being deleted already is left to OCM's agent: it goes once the agent has removed
        // what it applied, and each pass until then would delete it again.
        for stale in current.iter().filter(|w| w.meta().deletion_timestamp.is_none()) {
            let key = work_key(&**stale);
            if desired.contains_key(&key) {
                continue;
            }
            let Some(objects) = kept.get(&key) else {
                changes.push(
                    self.permitted(self.delete_work(binding, stale).map(|r| r.map(|()| None)))
                        .boxed(),
                );
                continue;
            };
            // Going, but another takes objects it holds that have not landed there: meanwhile it
            // holds those alone (the rest goes from the WEC now).
            let mut work = Cow::Owned(self.keeping(&self.plugin.emptied(stale), objects, &desired, &taken));
            label_sharing(&key, &mut work, objects, &holders);
            // Written over the UID the cache shows (`ours`): one deleted or replaced meanwhile is
            // refused by the ITS, never made again; our origin labels made it ours.
            if !self.plugin.same_content(stale, &work) {
                if self.waits(stale, now) {
                    settling = true;
                    continue;
                }
                let ours = stale.uid();
                changes.push(
                    self.permitted(async move {
                        let (mailbox, name) = &key;
                        self.write_work(binding, mailbox, name, &work, ours.as_deref()).await
                    })
                    .boxed(),
                );
            }
        }
        // Planned again when a ManifestWork's status changes, as those that wait want.
        self.holding.set(binding, holding || settling);
        let started = Instant::now();
        let writes = changes.len();
        // Waiting for permits that other Bindings hold counts as writing: a busy ITS lengthens
        // the rest after.
        let results: Vec<Result<Option<Rejection>, Error>> = futures::stream::iter(changes)
            .buffer_unordered(WRITE_CONCURRENCY)
            .collect()
            .await;
        let writing = if writes == 0 { Duration::ZERO } else { started.elapsed() };
        if writes > 0 {
            tracing::debug!(binding, writes, ?writing, "ManifestWorks written");
        }
        let rejected = results
            .into_iter()
            .filter_map(Result::transpose)
            .collect::<Result<Vec<_>, Error>>()?;
        let passing = rejected.iter().any(|r| r.passing);
        let mut rejections: Vec<String> = rejected.into_iter().map(|r| r.message).collect();
        rejections.sort();
        Ok(Applied {
            rejections,
            passing,
            holding,
            settling,
            writing,
        })
    }

    /// Whether a write over `existing` waits (from `now`): its WEC is there and has not reported
    /// on the version before, whose new objects OCM's agent would then record nowhere and
    /// leave on the WEC for good when they go from the ManifestWork (see [`Plugin::settled`]).
    /// At most [`SETTLE_WAIT`].
    pub(super) fn waits(&self, existing: &P::Cached, now: Instant) -> bool {
        let key = work_key(existing);
        let mut since = self.unsettled.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let there = self
            .clusters
            .state()
            .iter()
            .any(|c| self.plugin.mailbox(&c.name_any()) == key.0 && P::available(c));
        if self.plugin.settled(existing) || !there {
            since.remove(&key);
            return false;
        }
        let first = *since.entry(key.clone()).or_insert(now);
        let waits = now.saturating_duration_since(first) < SETTLE_WAIT;
        if !waits {
            since.remove(&key);
        }
        waits
    }

    /// `write`, once one of the write permits shared by the Bindings is free.
    pub(super) async fn permitted<T>(&self, write: impl Future<Output = T>) -> T {
        // The semaphore is never closed: the permit is always granted.
        let _permit = self.writes.acquire().await;
        write.await
    }

    /// A wrapped object as it is.
    pub(super) fn as_is(&self, work: &P::Cached) -> moves::Current {
        let objects: BTreeSet<Identity> = self.plugin.held(work).iter().map(|h| h.identity.clone()).collect();
        let landed = if self.plugin.applied(work) {
            objects.clone()
        } else {
            let reported = self.plugin.applied_objects(work);
            objects.iter().filter(|o| reported.contains(o)).cloned().collect()
        };
        moves::Current { objects, landed }
    }

    /// `work` also holding `objects`, as the desired wrapped objects of the same mailbox that
    /// they move to (this Binding's, or the Bindings' that take them over) hold them.
    pub(super) fn keeping(
        &self,
        work: &P::Wrapped,
        objects: &BTreeSet<Identity>,
        desired: &BTreeMap<WorkKey, P::Wrapped>,
        taken: &BTreeMap<WorkKey, P::Wrapped>,
    ) -> P::Wrapped {
        let mailbox = work.namespace();
        let sources: Vec<&P::Wrapped> = desired
            .values()
            .chain(taken.values())
            .filter(|source| source.namespace() == mailbox && source.name_any() != work.name_any())
            .collect();
        self.plugin.keeping(work, &sources, objects)
    }

    /// Adds the wrapped objects, as they are and as they should be, of the other live Bindings
    /// that list an object `binding` drops: one they take over waits for them. Returns those
    /// Bindings' desired wrapped objects.
    pub(super) fn add_takers(
        &self,
        binding: &str,
        dropped: &BTreeSet<Identity>,
        now: &mut BTreeMap<WorkKey, moves::Current>,
        wanted: &mut BTreeMap<WorkKey, BTreeSet<Identity>>,
    ) -> BTreeMap<WorkKey, P::Wrapped> {
        let names: BTreeSet<(&str, &str)> = dropped
            .iter()
            .map(|(_, _, ns, name)| (ns.as_str(), name.as_str()))
            .collect();
        let mut taken = BTreeMap::new();
        let takers: BTreeSet<String> = self
            .bindings
            .state()
            .iter()
            .filter(|other| other.name_any() != binding && other.metadata.deletion_timestamp.is_none())
            .filter(|other| {
                binding::entries(other)
                    .any(|e| names.contains(&(e.object.namespace_or_empty(), e.object.name.as_str())))
            })
            .filter_map(|other| {
                // Its objects whose cache is not filled are left out: it takes over the others. A
                // mailbox holding its objects in error is left out of this plan (which reads no
                // last good content): it takes nothing over there.
                let empty = binding::LastGood::new();
                let Desired { works, .. } = self.desired(other, &BTreeSet::new(), &empty).ok()?;
                for (key, work) in works {
                    wanted.insert(key.clone(), self.plugin.gloss(&work).into_iter().collect());
                    taken.insert(key, work);
                }
                Some(other.name_any())
            })
            .collect();
        let taking = |w: &P::Cached| w.labels().get(ORIGIN_BINDING_LABEL).is_some_and(|b| takers.contains(b));
        for work in self.works_where(taking) {
            now.insert(work_key(&*work), self.as_is(&work));
        }
        taken
    }
}
