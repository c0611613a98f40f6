//! What the transport controller holds: its settings, its caches and what it marks of the
//! Bindings, and how it reads its own wrapped objects (the cache, with its writes not shown yet
//! laid over it) and who shares their objects.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use ks_shared::api::{Binding, BindingPolicy, CustomTransform};
use ks_shared::names::ORIGIN_BINDING_LABEL;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, Resource, ResourceExt};
use tokio::time::Instant;

use super::expectations::{Expectations, Outcome, Sight};
use super::metrics::Metrics;
use super::schedule::Schedule;
use crate::informers::WorkloadInformers;
use crate::transport::plan::sharding::Limits;
use crate::transport::plan::{sharers, trace};
use crate::transport::plugin::Plugin;
use crate::transport::types::{Identity, SHARED_WITH_LABEL, WorkKey, Written};

/// Settings of the transport controller.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Goes into ManifestWork names and labels: unique per ITS.
    pub wds_name: String,
    pub limits: Limits,
    pub metrics: Metrics,
}

/// How many ManifestWork writes or deletes are in flight at once, over all Bindings: what the
/// ITS is asked at a time, and the writes' memory (up to 512 kB each), do not grow with them.
pub(super) const WRITE_CONCURRENCY: usize = 8;

/// How long a ManifestWork to write over waits, at most, for its WEC to report on the version
/// before (see [`Plugin::settled`]): an agent that applies nothing for that long is not applying
/// that version now.
pub(super) const SETTLE_WAIT: Duration = Duration::from_secs(10);

pub(super) struct Transport<P: Plugin> {
    pub(super) plugin: Arc<P>,
    pub(super) packaging: trace::Packaging,
    pub(super) wds: Client,
    pub(super) its: Client,
    pub(super) informers: WorkloadInformers,
    pub(super) settings: Settings,
    pub(super) bindings: Store<Binding>,
    pub(super) policies: Store<BindingPolicy>,
    pub(super) works: Store<P::Cached>,
    pub(super) transforms: Store<CustomTransform>,
    pub(super) clusters: Store<P::Inventory>,
    pub(super) customizations: Store<ConfigMap>,
    /// Bindings with a ManifestWork held back until the objects it loses land in another (of the
    /// same Binding or another), or until its WEC reports on its last version: passed again on
    /// every Binding's change and every ManifestWork status change.
    pub(super) holding: Marked,
    /// Bindings whose last plan read their WECs' properties (templates) or was kept from some
    /// (errors: a mailbox missing until the WEC is accepted, say): passed again when one of
    /// their WECs changes. The others' ManifestWorks do not depend on their WECs' inventory
    /// objects, which OCM writes often (267 times during a run of 1,000 objects to 102 WECs, as
    /// it registered the new ones).
    pub(super) reading_wecs: Marked,
    /// Its own ManifestWork writes that the cache has not shown yet: a Binding is planned from
    /// them laid over the cache.
    pub(super) expectations: Arc<std::sync::Mutex<Expectations<P::Cached>>>,
    /// Permits for ManifestWork writes, [`WRITE_CONCURRENCY`] in all, shared by the Bindings.
    pub(super) writes: tokio::sync::Semaphore,
    /// Since when a write over each ManifestWork has waited for its WEC to report on the
    /// version before.
    pub(super) unsettled: std::sync::Mutex<std::collections::HashMap<WorkKey, Instant>>,
    /// Events on the policies, when their propagation reaches an outcome, and on the delivered
    /// objects, when a WEC cannot apply one.
    pub(super) events: crate::events::Paced,
}

/// Bindings marked for something, shared by the reconciles running at once.
#[derive(Default)]
pub(super) struct Marked(std::sync::Mutex<BTreeSet<String>>);

impl Marked {
    pub(super) fn set(&self, binding: &str, marked: bool) {
        let mut names = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if marked {
            names.insert(binding.to_string());
        } else {
            names.remove(binding);
        }
    }

    pub(super) fn names(&self) -> BTreeSet<String> {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }
}

/// What the watch of wrapped objects shows, taken into `expectations` and `revisions`, and the
/// input it is.
/// Each object `works` hold, with how its wrapped object has the destination write it.
pub(super) fn written<'a, P: Plugin>(
    plugin: &'a P,
    works: Vec<&'a Arc<P::Cached>>,
) -> impl Iterator<Item = (&'a Identity, Written)> + 'a {
    works.into_iter().flat_map(move |w| {
        let held = plugin.held(w).iter().map(|h| &h.identity);
        held.zip(plugin.written(w).iter().copied())
    })
}

/// What a wrapped object holds, and what its destination holds for it (reported applied, also
/// what it no longer holds until the destination has let it go).
pub(super) fn holds<'a, P: Plugin>(plugin: &'a P, work: &'a P::Cached) -> impl Iterator<Item = &'a Identity> + 'a {
    let held = plugin.held(work).iter().map(|h| &h.identity);
    held.chain(plugin.applied_objects(work))
}

/// Whether a wrapped object is `binding`'s.
pub(super) fn of_binding<W: Resource>(work: &W, binding: &str) -> bool {
    work.labels().get(ORIGIN_BINDING_LABEL).map(String::as_str) == Some(binding)
}

/// A wrapped object's (mailbox, name).
pub(super) fn work_key<W: Resource>(work: &W) -> WorkKey {
    (work.meta().namespace.clone().unwrap_or_default(), work.name_any())
}

impl<P: Plugin> Transport<P> {
    pub(super) fn expectations(&self) -> std::sync::MutexGuard<'_, Expectations<P::Cached>> {
        self.expectations
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// `request` for the wrapped object `work` of `binding`, with what it leaves to be seen in
    /// the watch (`None` if nothing) expected until it is.
    pub(super) async fn expecting<T>(
        &self,
        binding: &str,
        work: WorkKey,
        request: impl Future<Output = (Option<Outcome<P::Cached>>, T)>,
    ) -> T {
        self.expectations().sending(work.clone(), binding, Instant::now());
        let (outcome, result) = request.await;
        let cached = self.works.get(&ObjectRef::new(&work.1).within(&work.0));
        let version = cached.as_ref().map(|w| w.resource_version().unwrap_or_default());
        let sight = cached.as_ref().zip(version.as_deref()).map(|(w, version)| Sight {
            version,
            deleted: w.meta().deletion_timestamp.is_some(),
        });
        self.expectations().sent(&work, outcome, sight, Instant::now());
        result
    }

    /// This Binding's wrapped objects, in any mailbox, as a plan starts from them: see
    /// [`Transport::works_where`].
    pub(super) fn current_works(&self, binding: &str) -> Vec<Arc<P::Cached>> {
        self.works_where(|w| of_binding(w, binding))
    }

    /// The wrapped objects `wanted` picks, as the cache holds them with the transport's own
    /// writes that the watch has not shown yet in place of what it holds: a plan from the cache
    /// alone, while the watch lags, would place again what is already placed.
    pub(super) fn works_where(&self, wanted: impl Fn(&P::Cached) -> bool) -> Vec<Arc<P::Cached>> {
        let mut works: BTreeMap<WorkKey, Arc<P::Cached>> = self
            .works
            .state()
            .into_iter()
            .filter(|w| wanted(w))
            .map(|w| (work_key(&*w), w))
            .collect();
        for (key, written) in self.expectations().unseen(Instant::now()) {
            match written {
                Some(work) if wanted(work) => works.insert(key.clone(), work.clone()),
                _ => works.remove(key),
            };
        }
        works.into_values().collect()
    }

    /// A ManifestWork applied elsewhere may be what a holding Binding waits for: each goes again.
    pub(super) fn holding_changed(&self, schedule: &mut Schedule) {
        self.holding.names().into_iter().for_each(|b| schedule.changed(b));
    }

    /// The Bindings to plan again when the WEC `wec` changed: those sending to it that read
    /// their WECs.
    pub(super) fn depending_on(&self, wec: &str) -> Vec<String> {
        self.reading_wecs
            .names()
            .into_iter()
            .filter(|name| {
                self.bindings
                    .get(&ObjectRef::new(name))
                    .is_some_and(|b| b.spec.destinations.iter().any(|d| d.cluster_id == wec))
            })
            .collect()
    }

    /// The Bindings whose wrapped objects' [`sharers`] labels may have changed in `mailboxes`:
    /// those labelled, who may have lost a sharer, and those holding an object another there
    /// holds.
    pub(super) fn sharing(&self, mailboxes: &BTreeSet<String>) -> BTreeSet<String> {
        if mailboxes.is_empty() {
            return BTreeSet::new();
        }
        let around = self.works_where(|w| w.namespace().is_some_and(|m| mailboxes.contains(&m)));
        let holders = self.holders(&around);
        let shares = |w: &P::Cached| {
            let labelled = w.labels().get(SHARED_WITH_LABEL).is_some_and(|v| !v.is_empty());
            labelled || !holders.sharers(&work_key(w), holds(&*self.plugin, w)).is_empty()
        };
        around
            .iter()
            .filter(|w| shares(w))
            .filter_map(|w| w.labels().get(ORIGIN_BINDING_LABEL).cloned())
            .collect()
    }

    /// Which of the wrapped objects `around` hold each object (or have their destination hold it).
    pub(super) fn holders<'a>(&'a self, around: &'a [Arc<P::Cached>]) -> sharers::Holders<'a> {
        sharers::Holders::new(around.iter().map(|w| {
            let meta = w.meta();
            let (mailbox, name) = (meta.namespace.as_deref(), meta.name.as_deref());
            (
                mailbox.unwrap_or_default(),
                name.unwrap_or_default(),
                holds(&*self.plugin, w),
            )
        }))
    }

    /// The wrapped objects in the mailboxes of `keys`.
    pub(super) fn around<'a>(&self, keys: impl Iterator<Item = &'a WorkKey>) -> Vec<Arc<P::Cached>> {
        let mailboxes: BTreeSet<&str> = keys.map(|(mailbox, _)| mailbox.as_str()).collect();
        self.works_where(|w| w.namespace().is_some_and(|m| mailboxes.contains(m.as_str())))
    }
}
