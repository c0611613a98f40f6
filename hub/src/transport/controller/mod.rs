//! The transport controller: each Binding becomes ManifestWorks in the mailbox namespaces of its
//! WECs, holding its objects (read from the binding controller's caches, never fetched) after
//! the built-in transforms and CustomTransforms, sharded stably, written only when they change,
//! and removed from every mailbox (found by label) when no longer wanted.

mod expectations;
mod metrics;
mod schedule;

pub use self::metrics::Metrics;

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use ks_shared::api::{Binding, BindingPolicy, CustomTransform};
use ks_shared::names::{
    CUSTOMIZATION_PROPERTIES_NAMESPACE, ORIGIN_BINDING_LABEL, ORIGIN_WDS_LABEL, TRANSPORT_FINALIZER, field_manager,
};
use ks_shared::runtime::watch_health;
use ks_shared::runtime::{
    Backoff, Failure, Pacing, Seen, failure, watch_into_inputs, watch_seen_into_inputs, watch_trimmed_into_inputs,
    without_managed_fields,
};
use kube::api::{Api, DeleteParams, GetParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Client, Resource, ResourceExt};
use serde_json::json;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use self::expectations::{Expectations, Outcome, Sight};
use self::schedule::{Pass, Schedule};
use crate::informers::{GroupResource, WorkloadInformers, WorkloadRef, workload_watch};
use crate::transport::plan::binding::{Cached, Desired, Entry};
use crate::transport::plan::in_place::in_place;
use crate::transport::plan::revisions::Revisions;
use crate::transport::plan::sharding::Limits;
use crate::transport::plan::{binding, moves, propagation, sharers, template, trace, works};
use crate::transport::plugin::{Error, Plugin};
use crate::transport::types::{Identity, SHARED_WITH_LABEL, Unapplied, WorkKey, Written, identity};

/// Settings of the transport controller.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Goes into ManifestWork names and labels: unique per ITS.
    pub wds_name: String,
    pub limits: Limits,
    pub metrics: Metrics,
}

/// How many Bindings are reconciled at once. One: at 10,000 objects to 12 WECs on 2 cores, 4 at
/// once saturated the ITS apiserver (504s) and the mailboxes were not full after 25 min, while one
/// at a time filled them. (An earlier run with 4 lost objects: a ManifestWork that lost some was
/// held back whole, gains included; now only what it loses waits.) Plans rely on it too: with
/// more, one could read another Binding's ManifestWorks while its writes are in flight, which
/// `expectations` does not lay over the cache.
const BINDING_CONCURRENCY: usize = 1;
/// How many ManifestWork writes or deletes are in flight at once, over all Bindings: what the
/// ITS is asked at a time, and the writes' memory (up to 512 kB each), do not grow with them.
const WRITE_CONCURRENCY: usize = 8;
/// The first and the longest pause before a failed Binding is tried again.
const RETRY_MIN: Duration = Duration::from_secs(1);
const RETRY_MAX: Duration = Duration::from_secs(60);
/// A Binding whose ManifestWork writes took `d` rests `PACE × d` before its next (doubling while
/// its changes keep coming, up to `LONGEST_REST`; over once it has not changed for half of it;
/// a change after `d` without one is not held):
/// while kubectl creates a policy's objects one by one, its ever larger ManifestWorks are
/// rewritten a few times, not after every Binding write, and the ITS keeps most of its time for
/// everything else.
const PACE: u32 = 3;
const LONGEST_REST: Duration = Duration::from_secs(30);
/// How long a ManifestWork to write over waits, at most, for its WEC to report on the version
/// before (see [`Plugin::settled`]): an agent that applies nothing for that long is not applying
/// that version now.
pub(super) const SETTLE_WAIT: Duration = Duration::from_secs(10);

/// What to reconcile.
enum Input {
    Binding(String),
    /// Only the status of the Binding's ManifestWorks or of its policy changed.
    Reported(String),
    /// CustomTransforms changed, or a cache was (re-)listed: every Binding may render
    /// differently, or its inputs changed unseen while a watch was down.
    All,
    /// A WEC's inventory object or customization changed: its template properties may have, or
    /// it may have been accepted.
    Cluster(String),
    /// What a wrapped object holds, or has its destination hold for it, changed, or it went: the
    /// [`sharers`] labels of the others in its mailbox may.
    Holdings(String),
    /// The destination of a mailbox reports objects it could not apply, not reported before.
    Unapplied(String, Vec<Unapplied>),
}

/// Runs the transport through `plugin` until `shutdown`. `informers` are the hub's, already
/// filled.
pub async fn run<P: Plugin>(
    plugin: P,
    wds: Client,
    its: Client,
    informers: WorkloadInformers,
    settings: Settings,
    shutdown: CancellationToken,
) -> Result<(), Error> {
    let plugin = Arc::new(plugin);
    let (inputs, mut received) = mpsc::unbounded_channel();
    // Every (re-)list is `Input::All`: deletions missed while a watch was down show only as
    // absences.
    let bindings = watch_trimmed_into_inputs(
        Api::<Binding>::all(wds.clone()),
        watcher::Config::default(),
        without_managed_fields,
        &shutdown,
        &inputs,
        |b| Some(Input::Binding(b.name_any())),
        || Input::All,
    );
    let ours = format!("{ORIGIN_WDS_LABEL}={}", settings.wds_name);
    let lag = settings.metrics.lag.clone();
    let expectations = Arc::new(std::sync::Mutex::new(Expectations::new(lag)));
    let seeing = expectations.clone();
    let mut revisions = Revisions::default();
    let mut policy_revisions = Revisions::default();
    // Listed 50 at a time: a page holds whole ManifestWorks (up to 512 kB each of JSON text) until
    // each is read into what the cache keeps.
    let mut fingerprints = HashMap::new();
    let mut told = HashMap::new();
    let holder = plugin.clone();
    let works = watch_seen_into_inputs(
        Api::<P::Cached>::all(its.clone()),
        watcher::Config::default().labels(&ours).page_size(50),
        |_| {},
        &shutdown,
        &inputs,
        move |seen| {
            let fingerprint = |w: &P::Cached| sharers::fingerprint(holds(&*holder, w));
            let holdings = holdings_changed(&mut fingerprints, &seen, fingerprint);
            let unapplied = newly_unapplied(&mut told, &seen, |w| holder.unapplied(w));
            seen_work(&seeing, &mut revisions, seen)
                .into_iter()
                .chain(holdings)
                .chain(unapplied)
        },
    );
    let policies = watch_seen_into_inputs(
        Api::<BindingPolicy>::all(wds.clone()),
        watcher::Config::default(),
        |_| {},
        &shutdown,
        &inputs,
        move |seen| seen_policy(&mut policy_revisions, seen),
    );
    let transforms = watch_into_inputs(
        Api::<CustomTransform>::all(wds.clone()),
        watcher::Config::default(),
        &shutdown,
        &inputs,
        |_| Some(Input::All),
        || Input::All,
    );
    let clusters = watch_into_inputs(
        Api::<P::Inventory>::all(its.clone()),
        watcher::Config::default(),
        &shutdown,
        &inputs,
        |c| Some(Input::Cluster(c.name_any())),
        || Input::All,
    );
    let customizations = watch_into_inputs(
        Api::<ConfigMap>::namespaced(its.clone(), CUSTOMIZATION_PROPERTIES_NAMESPACE),
        watcher::Config::default(),
        &shutdown,
        &inputs,
        |c| Some(Input::Cluster(c.name_any())),
        || Input::All,
    );
    tokio::select! {
        _ = shutdown.cancelled() => return Ok(()),
        _ = async {
            let _ = futures::join!(
                bindings.wait_until_ready(),
                policies.wait_until_ready(),
                works.wait_until_ready(),
                transforms.wait_until_ready(),
                clusters.wait_until_ready(),
                customizations.wait_until_ready(),
            );
        } => {}
    }
    let events = crate::events::Paced::start(
        wds.clone(),
        "kubestellar.io/transport-controller",
        settings.metrics.events_dropped.clone(),
        &shutdown,
    );
    let transport = Transport {
        plugin,
        packaging: trace::Packaging::default(),
        wds,
        its,
        informers,
        settings,
        bindings,
        policies,
        works,
        transforms,
        clusters,
        customizations,
        holding: Default::default(),
        reading_wecs: Default::default(),
        expectations,
        writes: tokio::sync::Semaphore::new(WRITE_CONCURRENCY),
        unsettled: Default::default(),
        events,
    };
    let mut schedule = Schedule::new(
        BINDING_CONCURRENCY,
        Pacing::new(PACE, LONGEST_REST),
        Backoff::new(RETRY_MIN, RETRY_MAX),
    )
    .measured_by(transport.settings.metrics.common.queue.clone());
    let transport = &transport;
    let mut running: FuturesUnordered<BoxFuture<'_, Reconciled>> = FuturesUnordered::new();
    let metrics = &transport.settings.metrics;
    let mut first = Some(Input::All);
    loop {
        // Take the next input or finished reconcile (the first pass covers everything), then
        // whatever else arrived, so a burst becomes one pass.
        let wake = schedule.wake();
        let next = match first.take() {
            Some(input) => Some(input),
            None => tokio::select! {
                _ = shutdown.cancelled() => break,
                input = received.recv() => match input {
                    None => break,
                    input => input,
                },
                Some((name, generation, pass, result)) = running.next() => {
                    let outcome = result.map_err(|err| match err {
                        Error::Settling => tracing::debug!(binding = %name, "a ManifestWork waits for its WEC"),
                        err => {
                            metrics.common.errors.inc();
                            tracing::warn!(binding = %name, error = chain(&err), "transport failed; retrying with back-off");
                        }
                    });
                    schedule.finished(name, generation, pass, outcome, Instant::now());
                    None
                }
                _ = tokio::time::sleep_until(wake.unwrap_or_else(Instant::now)), if wake.is_some() => None,
            },
        };
        let mut transforms_changed = false;
        let mut holdings_changed = BTreeSet::new();
        for input in next.into_iter().chain(std::iter::from_fn(|| received.try_recv().ok())) {
            match input {
                Input::Binding(name) => {
                    schedule.changed(name);
                    transport.holding_changed(&mut schedule);
                }
                Input::Reported(name) => {
                    schedule.reported(name);
                    transport.holding_changed(&mut schedule);
                }
                Input::All => transforms_changed = true,
                Input::Cluster(cluster) => transport
                    .depending_on(&cluster)
                    .into_iter()
                    .for_each(|b| schedule.changed(b)),
                Input::Holdings(mailbox) => {
                    holdings_changed.insert(mailbox);
                }
                Input::Unapplied(mailbox, objects) => transport.tell_unapplied(&mailbox, &objects),
            }
        }
        let sharing = transport.sharing(&holdings_changed);
        if !sharing.is_empty() {
            tracing::debug!(mailboxes = ?holdings_changed, bindings = ?sharing, "what ManifestWorks share may have changed");
        }
        sharing.into_iter().for_each(|b| schedule.changed(b));
        if transforms_changed {
            transport.report_transforms().await;
            transport
                .bindings
                .state()
                .iter()
                .for_each(|b| schedule.changed(b.name_any()));
        }
        // A new generation is a change of what to write; the status of the ManifestWorks, the
        // policy's, is not.
        let generation = |name: &str| {
            transport
                .bindings
                .get(&ObjectRef::new(name))
                .and_then(|b| b.metadata.generation)
        };
        for (name, generation, pass) in schedule.start(Instant::now(), generation) {
            match pass {
                Pass::Full => metrics.common.reconciles.inc(),
                Pass::Report => metrics.reports.inc(),
            };
            running.push(
                async move {
                    let result = match pass {
                        Pass::Full => transport.reconcile(&name).await,
                        Pass::Report => transport.report(&name).await.map(|()| Duration::ZERO),
                    };
                    (name, generation, pass, result)
                }
                .boxed(),
            );
        }
        metrics.common.queue_depth.set(schedule.waiting() as i64);
    }
    // Writes under way finish rather than land half done (or late, after the next leader's).
    while running.next().await.is_some() {}
    Ok(())
}

/// A Binding reconciled: its name, the generation it was at, the pass, and what its writes took.
type Reconciled = (String, Option<i64>, Pass, Result<Duration, Error>);

/// What writing a Binding's ManifestWorks did.
struct Applied {
    /// The ITS's rejections.
    rejections: Vec<String>,
    /// Some rejection may pass with nothing changed here (a mailbox namespace not there yet,
    /// or being deleted to be made again): the Binding is tried again after a back-off.
    passing: bool,
    /// Some wait for objects to land in another.
    holding: bool,
    /// Some wait for their WEC to report on the version before.
    settling: bool,
    /// How long the writes took (zero when nothing was written).
    writing: Duration,
}

struct Transport<P: Plugin> {
    plugin: Arc<P>,
    packaging: trace::Packaging,
    wds: Client,
    its: Client,
    informers: WorkloadInformers,
    settings: Settings,
    bindings: Store<Binding>,
    policies: Store<BindingPolicy>,
    works: Store<P::Cached>,
    transforms: Store<CustomTransform>,
    clusters: Store<P::Inventory>,
    customizations: Store<ConfigMap>,
    /// Bindings with a ManifestWork held back until the objects it loses land in another (of the
    /// same Binding or another), or until its WEC reports on its last version: passed again on
    /// every Binding's change and every ManifestWork status change.
    holding: Marked,
    /// Bindings whose last plan read their WECs' properties (templates) or was kept from some
    /// (errors: a mailbox missing until the WEC is accepted, say): passed again when one of
    /// their WECs changes. The others' ManifestWorks do not depend on their WECs' inventory
    /// objects, which OCM writes often (267 times during a run of 1,000 objects to 102 WECs, as
    /// it registered the new ones).
    reading_wecs: Marked,
    /// Its own ManifestWork writes that the cache has not shown yet: a Binding is planned from
    /// them laid over the cache.
    expectations: Arc<std::sync::Mutex<Expectations<P::Cached>>>,
    /// Permits for ManifestWork writes, [`WRITE_CONCURRENCY`] in all, shared by the Bindings.
    writes: tokio::sync::Semaphore,
    /// Since when a write over each ManifestWork has waited for its WEC to report on the
    /// version before.
    unsettled: std::sync::Mutex<std::collections::HashMap<WorkKey, Instant>>,
    /// Events on the policies, when their propagation reaches an outcome, and on the delivered
    /// objects, when a WEC cannot apply one.
    events: crate::events::Paced,
}

/// Bindings marked for something, shared by the reconciles running at once.
#[derive(Default)]
struct Marked(std::sync::Mutex<BTreeSet<String>>);

impl Marked {
    fn set(&self, binding: &str, marked: bool) {
        let mut names = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if marked {
            names.insert(binding.to_string());
        } else {
            names.remove(binding);
        }
    }

    fn names(&self) -> BTreeSet<String> {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }
}

/// What the watch of wrapped objects shows, taken into `expectations` and `revisions`, and the
/// input it is.
/// Each object `works` hold, with how its wrapped object has the destination write it.
fn written<'a, P: Plugin>(
    plugin: &'a P,
    works: Vec<&'a Arc<P::Cached>>,
) -> impl Iterator<Item = (&'a Identity, Written)> + 'a {
    works.into_iter().flat_map(move |w| {
        let held = plugin.held(w).iter().map(|h| &h.identity);
        held.zip(plugin.written(w).iter().copied())
    })
}

/// Sets the [`sharers`] label of `work`, to be written at `key` holding `objects`, from `holders`.
fn label_sharing<'o, W: Resource + Clone>(
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

/// What a wrapped object holds, and what its destination holds for it (reported applied, also
/// what it no longer holds until the destination has let it go).
fn holds<'a, P: Plugin>(plugin: &'a P, work: &'a P::Cached) -> impl Iterator<Item = &'a Identity> + 'a {
    let held = plugin.held(work).iter().map(|h| &h.identity);
    held.chain(plugin.applied_objects(work))
}

/// The mailbox whose [`sharers`] labels may change, when the watch shows a wrapped object whose
/// holdings (by `fingerprint`, kept in `fingerprints`) changed or that went.
fn holdings_changed<W: Resource>(
    fingerprints: &mut HashMap<WorkKey, u64>,
    seen: &Seen<'_, W>,
    fingerprint: impl Fn(&W) -> u64,
) -> Option<Input> {
    match seen {
        Seen::Changed(work) => {
            let key = work_key(*work);
            let print = fingerprint(work);
            (fingerprints.insert(key.clone(), print) != Some(print)).then_some(Input::Holdings(key.0))
        }
        Seen::Deleted(work) => {
            let key = work_key(*work);
            fingerprints.remove(&key);
            Some(Input::Holdings(key.0))
        }
        // Every Binding is planned again (`Input::All`), and the next change of each wrapped
        // object counts as one (the list does not show them one by one).
        Seen::Listed => {
            fingerprints.clear();
            None
        }
    }
}

/// What the watch shows a wrapped object's destination could not apply that it had not shown
/// for that wrapped object before (`told`: what it has shown, by wrapped object).
fn newly_unapplied<'a, W: Resource + 'a>(
    told: &mut HashMap<WorkKey, BTreeSet<Unapplied>>,
    seen: &Seen<'a, W>,
    unapplied: impl Fn(&'a W) -> &'a [Unapplied],
) -> Option<Input> {
    match seen {
        Seen::Changed(work) => {
            let key = work_key(*work);
            let now: BTreeSet<Unapplied> = unapplied(work).iter().cloned().collect();
            let before = told.remove(&key).unwrap_or_default();
            let new: Vec<Unapplied> = now.difference(&before).cloned().collect();
            if !now.is_empty() {
                told.insert(key.clone(), now);
            }
            (!new.is_empty()).then_some(Input::Unapplied(key.0, new))
        }
        Seen::Deleted(work) => {
            told.remove(&work_key(*work));
            None
        }
        Seen::Listed => None,
    }
}

fn seen_work<W: Resource>(
    expectations: &std::sync::Mutex<Expectations<W>>,
    revisions: &mut Revisions<WorkKey>,
    seen: Seen<'_, W>,
) -> Option<Input> {
    let mut expectations = expectations.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let (work, gone) = match seen {
        Seen::Changed(work) => (work, false),
        Seen::Deleted(work) => (work, true),
        Seen::Listed => {
            expectations.relisted();
            revisions.clear();
            return Some(Input::All);
        }
    };
    let key = work_key(work);
    let deleted = gone || work.meta().deletion_timestamp.is_some();
    let changed = if gone {
        revisions.forget(&key);
        true
    } else {
        revisions.changed(&key, work.meta())
    };
    let version = work.meta().resource_version.clone().unwrap_or_default();
    let sight = Sight {
        version: &version,
        deleted,
    };
    // Its Binding's plans and propagation counts have read this write since its reply: planning
    // it again for it, one Binding at a time, only delays those with something to write.
    if expectations.observed(&key, sight, Instant::now()) {
        return None;
    }
    let binding = work.labels().get(ORIGIN_BINDING_LABEL)?.clone();
    Some(if changed {
        Input::Binding(binding)
    } else {
        Input::Reported(binding)
    })
}

/// What the watch of BindingPolicies shows, and the input it is. A Binding is planned only while
/// its policy is there and staying (see [`binding::policy_leaving`]), so a policy seen for the first
/// time (also after its Binding), replaced or leaving has its Binding planned again. Its status
/// changing (the binding controller's, or the propagation this controller writes) only needs the
/// propagation written again: once its status exists (the binding controller writes it right
/// after the Binding), and when someone else changed it.
fn seen_policy(revisions: &mut Revisions<String>, seen: Seen<'_, BindingPolicy>) -> Option<Input> {
    match seen {
        Seen::Changed(policy) => {
            let name = policy.name_any();
            Some(if revisions.changed(&name, &policy.metadata) {
                Input::Binding(name)
            } else {
                Input::Reported(name)
            })
        }
        Seen::Deleted(policy) => {
            let name = policy.name_any();
            revisions.forget(&name);
            Some(Input::Binding(name))
        }
        Seen::Listed => {
            revisions.clear();
            Some(Input::All)
        }
    }
}

/// Whether a wrapped object is `binding`'s.
fn of_binding<W: Resource>(work: &W, binding: &str) -> bool {
    work.labels().get(ORIGIN_BINDING_LABEL).map(String::as_str) == Some(binding)
}

/// A wrapped object's (mailbox, name).
fn work_key<W: Resource>(work: &W) -> WorkKey {
    (work.meta().namespace.clone().unwrap_or_default(), work.name_any())
}

/// The media type that asks an apiserver for an object's metadata alone.
const METADATA_ONLY: &str = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1";

/// The ITS's reply about a ManifestWork, as far as it is read: the version written, which
/// object it is and whose.
#[derive(serde::Deserialize)]
struct Reply {
    metadata: ReplyMeta,
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct ReplyMeta {
    resource_version: Option<String>,
    uid: Option<String>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
}

/// What a write of a wrapped object came to.
enum Sent {
    Written(Reply),
    /// Another's wrapped object has the name: left alone.
    Foreign,
}

impl Reply {
    /// What a cache would keep of `work` as this reply says it was written: its version and UID.
    fn outcome<P: Plugin>(&self, work: &P::Wrapped) -> Option<Outcome<P::Cached>> {
        let (Some(version), Some(uid)) = (&self.metadata.resource_version, &self.metadata.uid) else {
            return None;
        };
        let mut cached = P::cached(work);
        cached.meta_mut().uid = Some(uid.clone());
        Some(Outcome::Written(version.clone(), Arc::new(cached)))
    }
}

/// Whether the ITS refused a write for the UID it names: the object of that name is another
/// one (the apiserver will not change an object's immutable `metadata.uid`, 422; one gone is
/// 409).
fn uid_refused(status: &kube::core::Status) -> bool {
    status
        .details
        .as_ref()
        .is_some_and(|d| d.causes.iter().any(|c| c.field == "metadata.uid"))
}

/// Whether labels say a wrapped object is `binding`'s of the WDS `wds`. A name alone says
/// nothing: an admin's ManifestWork may have it, or another WDS's.
fn of_origin(labels: &BTreeMap<String, String>, binding: &str, wds: &str) -> bool {
    labels.get(ORIGIN_BINDING_LABEL).map(String::as_str) == Some(binding)
        && labels.get(ORIGIN_WDS_LABEL).map(String::as_str) == Some(wds)
}

impl<P: Plugin> Transport<P> {
    /// Writes each CustomTransform's status where it changed.
    async fn report_transforms(&self) {
        let all = self.transforms.state();
        let api: Api<CustomTransform> = Api::all(self.wds.clone());
        for transform in &all {
            let status = binding::transform_status(transform, &all);
            if transform.status.as_ref() == Some(&status) {
                continue;
            }
            let patch =
                json!({"apiVersion": "control.kubestellar.io/v1alpha1", "kind": "CustomTransform", "status": status});
            let params = PatchParams::apply(field_manager::TRANSPORT).force();
            if let Err(err) = api
                .patch_status(&transform.name_any(), &params, &Patch::Apply(&patch))
                .await
            {
                tracing::warn!(transform = %transform.name_any(), error = %err, "writing CustomTransform status");
            }
        }
    }

    fn expectations(&self) -> std::sync::MutexGuard<'_, Expectations<P::Cached>> {
        self.expectations
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// `request` for the wrapped object `work` of `binding`, with what it leaves to be seen in
    /// the watch (`None` if nothing) expected until it is.
    async fn expecting<T>(
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

    /// By mailbox of `binding`'s WECs, the objects whose copies there the WEC is to go on
    /// writing in place, from how every wrapped object there writes them ([`in_place`]).
    fn written_in_place(&self, binding: &Binding) -> BTreeMap<String, BTreeSet<Identity>> {
        let name = binding.name_any();
        let mailboxes: BTreeSet<String> = binding
            .spec
            .destinations
            .iter()
            .map(|d| self.plugin.mailbox(&d.cluster_id))
            .collect();
        let in_mailboxes = |w: &P::Cached| w.namespace().is_some_and(|ns| mailboxes.contains(&ns));
        let mut by_mailbox: BTreeMap<String, Vec<Arc<P::Cached>>> = BTreeMap::new();
        for work in self.works_where(in_mailboxes) {
            by_mailbox
                // Every wrapped object is namespaced (its mailbox), and picked by it above.
                .entry(work.namespace().unwrap_or_default())
                .or_default()
                .push(work);
        }
        by_mailbox
            .iter()
            .map(|(mailbox, works)| {
                let (own, others): (Vec<_>, Vec<_>) = works.iter().partition(|w| of_binding(&***w, &name));
                let in_place = in_place(written(&*self.plugin, own), written(&*self.plugin, others));
                (mailbox.clone(), in_place)
            })
            .collect()
    }

    /// This Binding's wrapped objects, in any mailbox, as a plan starts from them: see
    /// [`Transport::works_where`].
    fn current_works(&self, binding: &str) -> Vec<Arc<P::Cached>> {
        self.works_where(|w| of_binding(w, binding))
    }

    /// The wrapped objects `wanted` picks, as the cache holds them with the transport's own
    /// writes that the watch has not shown yet in place of what it holds: a plan from the cache
    /// alone, while the watch lags, would place again what is already placed.
    fn works_where(&self, wanted: impl Fn(&P::Cached) -> bool) -> Vec<Arc<P::Cached>> {
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

    /// Brings the Binding's ManifestWorks and statuses in line; how long the ManifestWork writes
    /// took.
    async fn reconcile(&self, name: &str) -> Result<Duration, Error> {
        let api: Api<Binding> = Api::all(self.wds.clone());
        let Some(binding) = self.bindings.get(&ObjectRef::new(name)) else {
            // Gone: the finalizer made us clean up while it was being deleted.
            self.holding.set(name, false);
            self.reading_wecs.set(name, false);
            return Ok(Duration::ZERO);
        };
        let has_finalizer = binding.finalizers().iter().any(|f| f == TRANSPORT_FINALIZER);
        if binding.metadata.deletion_timestamp.is_some() {
            self.reading_wecs.set(name, false);
            // Its ManifestWorks must all be gone before the Binding may go.
            let applied = self.apply_works(name, BTreeMap::new()).await?;
            if has_finalizer && !applied.holding {
                crate::finalizer::set(&api, &*binding, TRANSPORT_FINALIZER, false).await?;
            }
            if applied.settling {
                return Err(Error::Settling);
            }
            return Ok(applied.writing);
        }
        let policy = self.policies.get(&ObjectRef::new(name));
        if binding::policy_leaving(&binding, policy.as_deref()) {
            // Withdrawn when the Binding goes: only then have the Bindings taking its objects
            // over been written (the same watch shows them first).
            return Ok(Duration::ZERO);
        }
        if !has_finalizer {
            crate::finalizer::set(&api, &*binding, TRANSPORT_FINALIZER, true).await?;
        }
        let desired = match self.desired_keeping_last_good(&binding).await {
            Err(Error::Unfilled(gr)) => {
                self.report_stuck_cache(&api, &binding, &gr).await?;
                return Err(Error::Unfilled(gr));
            }
            desired => desired?,
        };
        let Desired {
            works,
            mut errors,
            templated,
            frozen,
            ..
        } = desired;
        // An object in error keeps its last good content on the WECs (see `plan::plan`); it
        // holds back nothing else.
        let applied = self.apply_works_leaving(name, works, &frozen).await?;
        let passing = applied.passing;
        errors.extend(applied.rejections);
        errors.sort();
        self.reading_wecs.set(name, templated || !errors.is_empty());
        let status = binding.status.clone().unwrap_or_default();
        let generation = binding.metadata.generation.unwrap_or_default();
        if status.errors != errors || status.observed_generation != generation {
            let patch = json!({"apiVersion": "control.kubestellar.io/v1alpha1", "kind": "Binding",
                               "status": {"observedGeneration": generation, "errors": errors}});
            apply_status(&api, name, &patch).await?;
        }
        self.report_propagation(&binding).await?;
        if passing {
            return Err(Error::MailboxMissing);
        }
        if applied.settling {
            return Err(Error::Settling);
        }
        Ok(applied.writing)
    }

    /// Says in the Binding's status (so on its policy) that the WDS cache of `gr`, which it
    /// needs, cannot be filled, once that cache's watch is stuck (a cache filling at start-up
    /// is no error): the Binding waits, its ManifestWorks stay as they are, and until now only
    /// the hub's log said why. The next full pass replaces it.
    async fn report_stuck_cache(&self, api: &Api<Binding>, binding: &Binding, gr: &GroupResource) -> Result<(), Error> {
        let Some(stuck) = watch_health::stuck_watch(&workload_watch(gr)) else {
            return Ok(());
        };
        let status = binding.status.clone().unwrap_or_default();
        let error = format!(
            "{}; {} failures in a row listing or watching it, the last: {}",
            Error::Unfilled(gr.clone()),
            stuck.failures,
            stuck.last_error
        );
        // Said once while it stays stuck: not a write per failure as its count and error change.
        let unfilled = Error::Unfilled(gr.clone()).to_string();
        if status.errors.iter().any(|e| e.starts_with(&unfilled)) {
            return Ok(());
        }
        let mut errors = status.errors.clone();
        errors.push(error);
        errors.sort();
        // The generation observed stays as it was: this one is not planned. Through the status
        // subresource, which answers 404 for a Binding that is gone: it cannot make one again,
        // and it names only this manager's two fields, so the status controller's stay.
        let patch = json!({"apiVersion": "control.kubestellar.io/v1alpha1", "kind": "Binding",
                           "status": {"observedGeneration": status.observed_generation, "errors": errors}});
        apply_status(api, &binding.name_any(), &patch).await?;
        Ok(())
    }

    /// A pass for what its WECs reported: the propagation status, as the full pass leaves it.
    async fn report(&self, name: &str) -> Result<(), Error> {
        let Some(binding) = self.bindings.get(&ObjectRef::new(name)) else {
            return Ok(());
        };
        let policy = self.policies.get(&ObjectRef::new(name));
        if binding.metadata.deletion_timestamp.is_some() || binding::policy_leaving(&binding, policy.as_deref()) {
            return Ok(());
        }
        self.report_propagation(&binding).await
    }

    /// Writes how far the Binding's objects got on each WEC into its BindingPolicy's status, when
    /// that changed. Bursts of ManifestWork status changes arrive as one pass, so they are
    /// written once.
    async fn report_propagation(&self, binding: &Binding) -> Result<(), Error> {
        let name = binding.name_any();
        let Some(policy) = self.policies.get(&ObjectRef::new(&name)) else {
            return Ok(());
        };
        // Until the binding controller has written the status, it misses required fields.
        if policy.metadata.deletion_timestamp.is_some() || policy.status.is_none() {
            return Ok(());
        }
        // What the WECs reported is in the cache's; a write not shown yet has no status.
        let reported: Vec<Arc<P::Cached>> = self
            .works
            .state()
            .into_iter()
            .filter(|w| of_binding(&**w, &name))
            .collect();
        let propagation = works::propagation(&*self.plugin, binding, &self.current_works(&name), &reported);
        let current = policy.status.as_ref();
        let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::now());
        let condition = propagation::condition(
            &propagation,
            current.and_then(|s| s.condition(ks_shared::api::condition_type::PROPAGATED)),
            now,
        );
        if !propagation::differs(current, &propagation, &condition) {
            return Ok(());
        }
        let patch = json!({"apiVersion": BindingPolicy::api_version(&()), "kind": BindingPolicy::kind(&()),
                           "status": {"propagation": propagation, "conditions": [condition]}});
        apply_status(&Api::<BindingPolicy>::all(self.wds.clone()), &name, &patch).await?;
        let before = current.and_then(|s| s.condition(ks_shared::api::condition_type::PROPAGATED));
        if let Some(told) = crate::events::propagation(before, &condition) {
            self.events.tell(policy.object_ref(&()), told);
        }
        Ok(())
    }

    /// The wrapped objects `binding` calls for, from what the caches hold, with the last good
    /// content of its objects in error read from the ITS where the plan needs it (the cache
    /// keeps no manifests): only then, and only the wrapped objects holding them.
    async fn desired_keeping_last_good(&self, binding: &Binding) -> Result<Desired<P::Wrapped>, Error> {
        let unfilled = self.informers.unsynced();
        let desired = self.desired(binding, &unfilled, &binding::LastGood::new())?;
        if desired.unread.is_empty() {
            return Ok(desired);
        }
        let mut last_good = binding::LastGood::new();
        for (mailbox, name) in &desired.unread {
            // One deleted meanwhile holds nothing: the plan leaves its mailbox as it is.
            let Some(work) = Api::<P::Wrapped>::namespaced(self.its.clone(), mailbox)
                .get_opt(name)
                .await?
            else {
                continue;
            };
            for manifest in self.plugin.delivered(&work) {
                last_good.insert((mailbox.clone(), identity(&manifest)), manifest);
            }
        }
        self.desired(binding, &unfilled, &last_good)
    }

    /// The wrapped objects `binding` calls for, from what the caches hold and `last_good`; the
    /// objects of a resource in `unfilled` are not known.
    fn desired(
        &self,
        binding: &Binding,
        unfilled: &BTreeSet<GroupResource>,
        last_good: &binding::LastGood,
    ) -> Result<Desired<P::Wrapped>, Error> {
        let objects = binding::entries(binding)
            .map(|entry| {
                let cached = self.cached(&entry, unfilled);
                (entry, cached)
            })
            .collect();
        let current = self.current_works(&binding.name_any());
        let in_place = self.written_in_place(binding);
        works::plan(&binding::Inputs {
            plugin: &*self.plugin,
            binding,
            objects,
            removals: &binding::removals(&self.transforms.state()),
            properties: &|wec| self.properties(wec),
            current: &current,
            last_good,
            in_place: &in_place,
            wds_name: &self.settings.wds_name,
            limits: self.settings.limits,
            packaging: &self.packaging,
            first_seen: self.informers.first_seen(),
        })
    }

    /// What the WDS caches hold of a listed object.
    fn cached(&self, entry: &Entry, unfilled: &BTreeSet<GroupResource>) -> Cached {
        if unfilled.contains(&entry.object.resource) {
            return Cached::Unfilled;
        }
        match (
            self.informers.get(&entry.object),
            self.informers.served(&entry.object.resource),
        ) {
            (Some(object), Some(served)) => Cached::Found(object, served),
            _ => Cached::Gone,
        }
    }

    /// A WEC's template properties, from its ManagedCluster and its customization ConfigMap.
    fn properties(&self, wec: &str) -> BTreeMap<String, String> {
        let cluster = self.clusters.get(&ObjectRef::new(wec));
        let config = self
            .customizations
            .get(&ObjectRef::new(wec).within(CUSTOMIZATION_PROPERTIES_NAMESPACE));
        let data = config.as_ref().and_then(|c| c.data.clone()).unwrap_or_default();
        let binary_data = config
            .as_ref()
            .and_then(|c| c.binary_data.clone())
            .unwrap_or_default()
            .into_iter()
            .map(|(key, value)| (key, value.0))
            .collect();
        let none = BTreeMap::new();
        let (labels, annotations) = match &cluster {
            Some(cluster) => P::properties_of(cluster),
            None => (&none, &none),
        };
        template::properties(&data, &binary_data, annotations, labels, wec)
    }

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
    async fn apply_works(&self, binding: &str, desired: BTreeMap<WorkKey, P::Wrapped>) -> Result<Applied, Error> {
        self.apply_works_leaving(binding, desired, &BTreeSet::new()).await
    }

    /// [`Transport::apply_works`], leaving the ManifestWorks in the `frozen` mailboxes (see
    /// [`Desired::frozen`]) as they are.
    async fn apply_works_leaving(
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
    fn waits(&self, existing: &P::Cached, now: Instant) -> bool {
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
    async fn permitted<T>(&self, write: impl Future<Output = T>) -> T {
        // The semaphore is never closed: the permit is always granted.
        let _permit = self.writes.acquire().await;
        write.await
    }

    /// A ManifestWork applied elsewhere may be what a holding Binding waits for: each goes again.
    fn holding_changed(&self, schedule: &mut Schedule) {
        self.holding.names().into_iter().for_each(|b| schedule.changed(b));
    }

    /// The Bindings to plan again when the WEC `wec` changed: those sending to it that read
    /// their WECs.
    fn depending_on(&self, wec: &str) -> Vec<String> {
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
    fn sharing(&self, mailboxes: &BTreeSet<String>) -> BTreeSet<String> {
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
    fn holders<'a>(&'a self, around: &'a [Arc<P::Cached>]) -> sharers::Holders<'a> {
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
    fn around<'a>(&self, keys: impl Iterator<Item = &'a WorkKey>) -> Vec<Arc<P::Cached>> {
        let mailboxes: BTreeSet<&str> = keys.map(|(mailbox, _)| mailbox.as_str()).collect();
        self.works_where(|w| w.namespace().is_some_and(|m| mailboxes.contains(m.as_str())))
    }

    /// Tells each WDS object of `objects` that the WEC of `mailbox` could not apply it (an Event
    /// on it, through the paced queue). OCM's mailbox is its WEC's name.
    fn tell_unapplied(&self, mailbox: &str, objects: &[Unapplied]) {
        for object in objects {
            let key = WorkloadRef::new(&object.group, &object.resource, &object.namespace, &object.name);
            let gr = GroupResource::new(&object.group, &object.resource);
            let (Some(cached), Some(served)) = (self.informers.get(&key), self.informers.served(&gr)) else {
                continue;
            };
            let regarding = k8s_openapi::api::core::v1::ObjectReference {
                api_version: Some(served.resource.api_version.clone()),
                kind: Some(served.resource.kind.clone()),
                name: Some(object.name.clone()),
                namespace: (!object.namespace.is_empty()).then(|| object.namespace.clone()),
                uid: cached.uid(),
                ..Default::default()
            };
            self.events
                .tell(regarding, crate::events::delivery_failed(mailbox, &object.message));
        }
    }

    /// A wrapped object as it is.
    fn as_is(&self, work: &P::Cached) -> moves::Current {
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
    fn keeping(
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
    fn add_takers(
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

    /// Writes one wrapped object of `binding`: applied over the one the cache shows (`ours`, its
    /// UID), else created. A [`Rejection`] when it cannot be written as things are: the ITS
    /// rejects it, another's wrapped object has the name, or the mailbox is missing or being
    /// deleted.
    async fn write_work(
        &self,
        binding: &str,
        mailbox: &str,
        name: &str,
        work: &P::Wrapped,
        ours: Option<&str>,
    ) -> Result<Option<Rejection>, Error> {
        let answer = self
            .expecting(binding, (mailbox.to_string(), name.to_string()), async {
                let answer = match ours {
                    Some(uid) => self.send_work(mailbox, name, work, Some(uid)).await.map(Sent::Written),
                    None => self.create_work(binding, mailbox, name, work).await,
                };
                let outcome = match &answer {
                    Ok(Sent::Written(reply)) => reply.outcome::<P>(work),
                    _ => None,
                };
                (outcome, answer)
            })
            .await;
        let err = match answer {
            Ok(Sent::Written(_)) => return Ok(None),
            Ok(Sent::Foreign) => {
                return Ok(Some(Rejection::lasting(format!(
                    "name conflict: {} {mailbox}/{name} exists without this Binding's labels \
                     {ORIGIN_BINDING_LABEL}={binding} and {ORIGIN_WDS_LABEL}={}: it is left alone, and what \
                     it would hold does not reach {mailbox}",
                    P::Wrapped::kind(&()),
                    self.settings.wds_name
                ))));
            }
            Err(err) => err,
        };
        let kube::Error::Api(status) = &err else {
            return Err(err.into());
        };
        match failure(&err) {
            // Replaced since the cache showed it: planned again from a cache that shows it.
            Failure::Refused if uid_refused(status) => Err(err.into()),
            // Deleted, to be made again by OCM (an admin deleted it, or the WEC was accepted
            // again): nothing in what the hub watches changes when it is back.
            Failure::Refused if namespace_terminating(status) => Ok(Some(Rejection::passing(format!(
                "the mailbox namespace {mailbox} is being deleted; trying again: {}",
                status.message
            )))),
            Failure::Refused => Ok(Some(Rejection::lasting(format!(
                "the ITS rejected {} {mailbox}/{name}: {}",
                P::Wrapped::kind(&()),
                status.message
            )))),
            // A WEC not accepted yet: accepting it changes its inventory object, which brings
            // the Binding back. An accepted WEC's mailbox deleted and not made again yet: its
            // coming back changes nothing the hub watches, so the Binding is tried again.
            Failure::Moot => {
                let message = format!(
                    "the mailbox namespace {mailbox} does not exist (is the WEC accepted into the ITS?): {}",
                    status.message
                );
                let accepted = self
                    .clusters
                    .state()
                    .iter()
                    .any(|c| self.plugin.mailbox(&c.name_any()) == mailbox && P::accepted(c));
                Ok(Some(if accepted {
                    Rejection::passing(message)
                } else {
                    Rejection::lasting(message)
                }))
            }
            Failure::Transient => Err(err.into()),
        }
    }

    /// Creates a wrapped object of `binding`. One found under its name (the cache was behind, or
    /// it is another's) is written over only if its labels say it is `binding`'s of this WDS, and
    /// then only that object (its UID); otherwise it is [`Sent::Foreign`], and nothing is sent.
    async fn create_work(
        &self,
        binding: &str,
        mailbox: &str,
        name: &str,
        work: &P::Wrapped,
    ) -> Result<Sent, kube::Error> {
        let taken = match self.send_work(mailbox, name, work, None).await {
            Err(kube::Error::Api(status)) if status.code == 409 => status,
            answer => return answer.map(Sent::Written),
        };
        let request = kube::core::Request::new(P::Wrapped::url_path(&(), Some(mailbox)))
            .get(name, &GetParams::default())
            .map_err(kube::Error::BuildRequest)?;
        let found = match self.answered_in_metadata("get", request).await {
            Ok(found) => found.metadata,
            // Gone meanwhile: created on the next try.
            Err(kube::Error::Api(status)) if status.code == 404 => return Err(kube::Error::Api(taken)),
            Err(err) => return Err(err),
        };
        if !of_origin(&found.labels, binding, &self.settings.wds_name) {
            return Ok(Sent::Foreign);
        }
        let Some(uid) = found.uid else {
            return Err(kube::Error::Api(taken));
        };
        self.send_work(mailbox, name, work, Some(&uid)).await.map(Sent::Written)
    }

    /// The ITS's answer to a write of one wrapped object: server-side applied over the object of
    /// the UID `ours` (the ITS refuses one deleted or replaced meanwhile, with 409), else created
    /// (POST). See `ks-bench write-cost`: for 100 ManifestWorks of 213 kB the
    /// ITS used 5 to 6 CPU-s to create them against 8 to 9 to apply them, as it parses an apply's
    /// body as YAML. Once OCM's per-manifest status is in them, a JSON patch cost it more than an
    /// apply in each of 6 paired runs (26 to 34 against 24 to 28 CPU-s): the ITS turns the whole
    /// object, status and all, into JSON and back to patch it. Written as this WDS's own field
    /// manager.
    async fn send_work(
        &self,
        mailbox: &str,
        name: &str,
        work: &P::Wrapped,
        ours: Option<&str>,
    ) -> Result<Reply, kube::Error> {
        self.settings.metrics.common.writes.inc();
        // Serialized straight into the request: as a JSON value tree, 8 large ones in flight
        // took a quarter of the hub's peak heap. The reply is read for its version and UID
        // only: the watch brings what the hub keeps of the ManifestWork.
        let request = kube::core::Request::new(P::Wrapped::url_path(&(), Some(mailbox)));
        let manager = field_manager::transport_of(&self.settings.wds_name);
        let (verb, request) = match ours {
            Some(uid) => {
                // Shares its manifests: no copy of the objects.
                let mut work = work.clone();
                work.meta_mut().uid = Some(uid.to_string());
                let params = PatchParams::apply(&manager).force();
                ("patch", request.patch(name, &params, &Patch::Apply(&work)))
            }
            None => {
                let params = PostParams {
                    field_manager: Some(manager),
                    ..Default::default()
                };
                let body = serde_json::to_vec(work).map_err(kube::Error::SerdeError)?;
                ("create", request.create(&params, body))
            }
        };
        let request = request.map_err(kube::Error::BuildRequest)?;
        self.settings.metrics.written_bytes.inc_by(request.body().len() as u64);
        self.answered_in_metadata(verb, request).await
    }

    /// The ITS's answer to a request about a ManifestWork, asked for as metadata only
    /// (`as=PartialObjectMetadata`). The whole ManifestWork, status and all, is up to a few MB
    /// once OCM's per-manifest status is in it: the ITS would encode it and the hub hold all of
    /// it, only for its version.
    async fn answered_in_metadata(
        &self,
        verb: &'static str,
        mut request: http::Request<Vec<u8>>,
    ) -> Result<Reply, kube::Error> {
        request.extensions_mut().insert(verb);
        request
            .headers_mut()
            .insert(http::header::ACCEPT, http::HeaderValue::from_static(METADATA_ONLY));
        self.its.request::<Reply>(request).await
    }

    /// Deletes a wrapped object of `binding` no longer wanted: only the object the cache shows
    /// (its UID, which every cached one has), so one created under its name meanwhile stays (the
    /// ITS answers 409, retried from a cache that shows what happened).
    async fn delete_work(&self, binding: &str, stale: &P::Cached) -> Result<(), Error> {
        self.settings.metrics.common.writes.inc();
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: stale.uid(),
                resource_version: None,
            }),
            ..Default::default()
        };
        let request = kube::core::Request::new(P::Cached::url_path(&(), stale.namespace().as_deref()))
            .delete(&stale.name_any(), &params)
            .map_err(kube::Error::BuildRequest)?;
        self.expecting(binding, work_key(stale), async {
            let deleted = match self.answered_in_metadata("delete", request).await {
                Ok(_) => Ok(()),
                Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
                Err(err) => Err(err.into()),
            };
            (deleted.is_ok().then_some(Outcome::Deleted), deleted)
        })
        .await
    }
}

/// What the ITS refused of one wrapped object's write, for the Binding's status.
#[derive(Debug)]
struct Rejection {
    message: String,
    /// It may pass with nothing changed here: the Binding is tried again after a back-off.
    passing: bool,
}

impl Rejection {
    /// One that only a change (of the Binding, its objects, or the ITS's object) can end.
    fn lasting(message: String) -> Rejection {
        Rejection {
            message,
            passing: false,
        }
    }

    fn passing(message: String) -> Rejection {
        Rejection { message, passing: true }
    }
}

/// Whether the apiserver refused a write into a namespace because that namespace is being
/// deleted (its NamespaceLifecycle admission's answer, with the cause `NamespaceTerminating`).
fn namespace_terminating(status: &kube::core::Status) -> bool {
    status.code == 403
        && status
            .details
            .as_ref()
            .is_some_and(|d| d.causes.iter().any(|c| c.reason == "NamespaceTerminating"))
}

/// Applies our part of the status of `name` (forced: the fields are ours). One deleted meanwhile
/// is done.
async fn apply_status<K>(api: &Api<K>, name: &str, status: &serde_json::Value) -> Result<(), Error>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let params = PatchParams::apply(field_manager::TRANSPORT).force();
    match api.patch_status(name, &params, &Patch::Apply(status)).await {
        Err(err) if failure(&err) == Failure::Moot => Ok(()),
        written => Ok(written.map(|_| ())?),
    }
}

/// `err` and its sources, `: `-separated, for the logs.
fn chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests;
