//! The agent's controllers, thin on purpose: watches feed coalescing queues, and workers look
//! things up in caches, call the pure logic (`tracker`, `report`) and write the difference.
//!
//! - AppliedManifestWorks on the WEC, and the ManifestWorks on the hub saying which of their
//!   manifests were applied (see `delivered`) → the `works` queue → the tracker, which says which
//!   informers to start or stop and which objects to report on.
//! - Delivered objects (one informer per GVR), the ManifestWorks and our WorkStatuses in the
//!   mailbox namespace on the hub → the `objects` queue → one WorkStatus per object, however
//!   many AppliedManifestWorks list it (the tracker picks the reporting one). Watching our own
//!   WorkStatuses is what recreates one deleted by hand, and corrects edits, promptly.
//! - WorkStatuses no followed object owns (objects removed while the agent was down) → the
//!   `leftovers` queue → deleted.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::{Duration, SystemTime};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use ks_shared::api::WorkStatus;
use ks_shared::names;
use ks_shared::ocm::{AppliedManifestWork, ManifestWork};
use ks_shared::rollout::{self, KeyValue, attribute, stage};
use ks_shared::runtime::watch_health::{self, WatchRole};
use ks_shared::runtime::{RETRY_MAX, Seen, WorkQueue, drive};
use ks_shared::serve::ReadyGate;
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use crate::delivered;
use crate::existing::Existing;
use crate::informers::{InformerEvent, Informers, Lookup, OnEvent};
use crate::kinds::Kinds;
use crate::metrics::{Metrics, Verb};
use crate::objects::{AppliedObject, ObjectKey};
use crate::own_writes::OwnWrites;
use crate::report::{self, FIELD_MANAGER, Plan};
use crate::rollouts::Rollouts;
use crate::tracker::Tracker;

/// Workers reconciling objects concurrently (never two on one object).
const OBJECT_WORKERS: usize = 4;

/// A failed key's first retry delay, doubling up to [`RETRY_MAX`]: short, because the agent's
/// failures are mostly conflicts on its own WorkStatus writes, which clear at once.
const RETRY_FIRST: Duration = Duration::from_millis(10);

/// Why a reconcile failed; it is retried with backoff.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error(transparent)]
    Kube(#[from] kube::Error),
    #[error("the WEC does not serve {gvrs} (yet)")]
    UnknownResources { gvrs: String },
}

/// The agent's shared state.
pub struct Agent {
    /// The WEC's mailbox namespace on the hub (= its cluster name).
    mailbox: String,
    hub: Client,
    tracker: Mutex<Tracker>,
    kinds: Kinds,
    informers: Mutex<Informers>,
    works: WorkQueue<String>,
    objects: WorkQueue<ObjectKey>,
    /// WorkStatus names that may be left over (see [`Tracker::is_stale_work_status`]).
    leftovers: WorkQueue<String>,
    /// Whether every AppliedManifestWork listed at start-up has been through the tracker and
    /// the reporting deliveries were taken back from the hub (see [`Agent::settle_once`]).
    settled: AtomicBool,
    applied_listed: Arc<AtomicBool>,
    applied: Store<AppliedManifestWork>,
    manifest_works: Store<ManifestWork>,
    work_statuses: Store<Existing>,
    manifest_works_listed: Arc<AtomicBool>,
    work_statuses_listed: Arc<AtomicBool>,
    /// Our own writes the WorkStatus cache may not show yet.
    written: OwnWrites,
    rollouts: Rollouts,
    metrics: Metrics,
    shutdown: CancellationToken,
    me: Weak<Agent>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every update under these locks is a single step: a panic elsewhere leaves them consistent.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Runs the agent until `shutdown`: `wec` reaches the WEC, `hub` the ITS, `mailbox` is the
/// WEC's namespace there. `ready` opens once the AppliedManifestWorks are listed.
pub async fn run(
    wec: Client,
    hub: Client,
    mailbox: String,
    metrics: Metrics,
    ready: ReadyGate,
    shutdown: CancellationToken,
) {
    let (applied, applied_writer) = reflector::store::<AppliedManifestWork>();
    let (manifest_works, manifest_works_writer) = reflector::store::<ManifestWork>();
    let (work_statuses, work_statuses_writer) = reflector::store::<Existing>();
    let agent = Arc::new_cyclic(|me| Agent {
        mailbox: mailbox.clone(),
        hub: hub.clone(),
        tracker: Mutex::new(Tracker::default()),
        kinds: Kinds::new(wec.clone()),
        informers: Mutex::new(Informers::new(wec.clone())),
        works: WorkQueue::new(RETRY_FIRST, RETRY_MAX),
        objects: WorkQueue::new(RETRY_FIRST, RETRY_MAX)
            .measured_by(metrics.common.queue_depth.clone(), metrics.common.queue.clone()),
        leftovers: WorkQueue::new(RETRY_FIRST, RETRY_MAX),
        settled: AtomicBool::new(false),
        applied_listed: Arc::default(),
        applied,
        manifest_works,
        work_statuses,
        manifest_works_listed: Arc::default(),
        work_statuses_listed: Arc::default(),
        written: OwnWrites::default(),
        rollouts: Rollouts::default(),
        metrics,
        shutdown: shutdown.clone(),
        me: me.clone(),
    });

    let config = watcher::Config::default();
    let applied = watched(Api::<AppliedManifestWork>::all(wec.clone()), &config)
        .modify(|amw: &mut AppliedManifestWork| amw.metadata.managed_fields = None)
        .reflect(applied_writer);
    let listed = agent.applied_listed.clone();
    spawn_watch(&agent, "appliedmanifestworks", applied, listed, move |a, seen| {
        a.on_applied(seen, &ready)
    });
    let manifest_works = watched(Api::<ManifestWork>::namespaced(hub.clone(), &mailbox), &config)
        .modify(|mw: &mut ManifestWork| {
            // Only the labels, name and UID are read, the Secrets (reported as delivered, never
            // read on the WEC) and which manifests were applied: the other manifests can be large.
            mw.metadata.managed_fields = None;
            let mut manifests = std::mem::take(&mut mw.spec.workload.manifests);
            manifests.retain(|m| report::is_secret(m));
            mw.spec = Default::default();
            mw.spec.workload.manifests = manifests;
            delivered::keep_applied(&mut mw.status);
        })
        .reflect(manifest_works_writer);
    let listed = agent.manifest_works_listed.clone();
    spawn_watch(&agent, "manifestworks", manifest_works, listed, Agent::on_manifest_work);
    let work_statuses =
        watched(Api::<Existing>::namespaced(hub.clone(), &mailbox), &config).reflect(work_statuses_writer);
    let listed = agent.work_statuses_listed.clone();
    spawn_watch(&agent, "workstatuses", work_statuses, listed, Agent::on_work_status);

    let mut workers = Vec::new();
    let a = agent.clone();
    workers.push(tokio::spawn(async move {
        while let Some(name) = a.works.next(&a.shutdown).await {
            let result = a.reconcile_work(&name).await;
            a.finish(&a.works, name, result, "AppliedManifestWork");
            a.settle_once();
        }
    }));
    let a = agent.clone();
    workers.push(tokio::spawn(async move {
        while let Some(name) = a.leftovers.next(&a.shutdown).await {
            let result = a.remove_leftover(&name).await;
            a.finish(&a.leftovers, name, result, "leftover WorkStatus");
        }
    }));
    for _ in 0..OBJECT_WORKERS {
        let a = agent.clone();
        workers.push(tokio::spawn(async move {
            while let Some(key) = a.objects.next(&a.shutdown).await {
                // Its log lines carry the trace id of the rollout it reports on, once known.
                let span = tracing::info_span!("report", work_status = %key.work_status, kind = %key.kind,
                                               namespace = %key.namespace, name = %key.name,
                                               trace_id = tracing::field::Empty);
                let result = a.reconcile_object(&key, &span).instrument(span.clone()).await;
                a.metrics.common.reconciles.inc();
                a.finish(&a.objects, key, result, "object");
            }
        }));
    }
    shutdown.cancelled().await;
    for worker in workers {
        let _ = worker.await;
    }
}

/// A watch of `api`, backing off and followed by its kind ([`watch_health::observe`]).
fn watched<K>(
    api: Api<K>,
    config: &watcher::Config,
) -> impl futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + use<K>
where
    K: kube::Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let stream = watcher(api, config.clone()).backoff(ks_shared::runtime::WatchBackoff::default());
    watch_health::observe(K::kind(&()).into_owned(), WatchRole::Essential, stream)
}

/// Runs a watch (already feeding its cache) until shutdown, handing each event to `on`.
fn spawn_watch<K, S>(
    agent: &Arc<Agent>,
    what: &str,
    stream: S,
    listed: Arc<AtomicBool>,
    on: impl Fn(&Agent, Seen<'_, K>) + Send + 'static,
) where
    K: Send + 'static,
    S: futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
{
    let a = agent.clone();
    let shutdown = agent.shutdown.clone();
    tokio::spawn(drive(what.to_string(), stream, shutdown, move |seen| {
        if let Seen::Listed = seen {
            // Before `on`, which may look at it.
            listed.store(true, Ordering::Release);
        }
        on(&a, seen)
    }));
}

impl Agent {
    fn on_applied(&self, seen: Seen<'_, AppliedManifestWork>, ready: &ReadyGate) {
        match seen {
            Seen::Changed(amw) | Seen::Deleted(amw) => self.works.add(amw.name_any()),
            Seen::Listed => {
                // Also the ones deleted while the watch was down: they are only in the tracker.
                let mut names: Vec<String> = self.applied.state().iter().map(|w| w.name_any()).collect();
                names.extend(lock(&self.tracker).work_names());
                names.into_iter().for_each(|n| self.works.add(n));
                ready.open();
                self.settle_once();
            }
        }
    }

    /// A ManifestWork's labels say what its objects' WorkStatuses carry, and its status which
    /// of its objects were applied (see [`delivered`]).
    fn on_manifest_work(&self, seen: Seen<'_, ManifestWork>) {
        match seen {
            Seen::Changed(mw) | Seen::Deleted(mw) => {
                let tracker = lock(&self.tracker);
                let keys = tracker.keys_of_manifest_work(&mw.name_any());
                tracker
                    .works_of_manifest_work(&mw.name_any())
                    .for_each(|w| self.works.add(w));
                drop(tracker);
                self.enqueue(keys);
            }
            Seen::Listed => {
                let tracker = lock(&self.tracker);
                let keys = tracker.all_keys();
                tracker.work_names().into_iter().for_each(|w| self.works.add(w));
                drop(tracker);
                self.enqueue(keys);
                self.settle_once();
            }
        }
    }

    fn on_work_status(&self, seen: Seen<'_, Existing>) {
        match seen {
            Seen::Changed(ws) => {
                let key = lock(&self.tracker).by_work_status(&ws.name_any()).cloned();
                match key {
                    Some(key) => self.enqueue([key]),
                    None if self.is_leftover(ws) => self.leftovers.add(ws.name_any()),
                    None => {}
                }
            }
            Seen::Deleted(ws) => {
                self.written.forget(&ws.name_any());
                self.enqueue(lock(&self.tracker).by_work_status(&ws.name_any()).cloned());
            }
            Seen::Listed => {
                // The fresh list has everything written before it.
                self.written.clear();
                self.enqueue(lock(&self.tracker).all_keys());
                self.settle_once();
            }
        }
    }

    /// True for one of our WorkStatuses that no reporting delivery owns any more. Not before
    /// settling: until then which delivery reports an object may still change.
    fn is_leftover(&self, ws: &Existing) -> bool {
        let owner = ws
            .owner_references()
            .iter()
            .find(|o| o.controller == Some(true) && o.kind == "ManifestWork");
        self.settled.load(Ordering::Acquire)
            && owner.is_some_and(|o| lock(&self.tracker).is_stale_work_status(&ws.name_any(), &o.name))
    }

    /// Once, after start-up, when every AppliedManifestWork (with its ManifestWork) has been
    /// through the tracker: takes back from the hub which delivery reports each object (the
    /// AppliedManifestWorks were read back in any order, so a restart rewrites nothing), lets
    /// reports start, and queues the WorkStatuses left over from objects removed while the agent
    /// was not running. (Later removals delete their WorkStatus directly.)
    fn settle_once(&self) {
        // The ManifestWorks too: they say which objects of a partly applied one are delivered,
        // and its objects' WorkStatuses are no leftovers.
        let ready = self.applied_listed.load(Ordering::Acquire)
            && self.work_statuses_listed.load(Ordering::Acquire)
            && self.manifest_works_listed.load(Ordering::Acquire)
            && self.works.is_empty();
        if !ready || self.settled.load(Ordering::Acquire) {
            return;
        }
        let on_hub: HashSet<String> = self.work_statuses.state().iter().map(|ws| ws.name_any()).collect();
        let changes = {
            // Under the tracker's lock: settling runs once, and a worker that sees `settled`
            // sees the adopted choices.
            let mut tracker = lock(&self.tracker);
            if self.settled.load(Ordering::Acquire) {
                return;
            }
            let changes = tracker.adopt(|name| on_hub.contains(name));
            self.settled.store(true, Ordering::Release);
            changes
        };
        self.apply_changes(changes);
        let followed = lock(&self.tracker).all_keys();
        let reporting = followed.len();
        self.enqueue(followed);
        let mut leftovers = 0;
        for ws in self.work_statuses.state() {
            if self.is_leftover(&ws) {
                self.leftovers.add(ws.name_any());
                leftovers += 1;
            }
        }
        // Once per start: what a restart found, for telling why a WorkStatus stayed or went.
        tracing::info!(reporting, on_hub = on_hub.len(), leftovers, "settled: reports start");
    }

    async fn remove_leftover(&self, name: &str) -> Result<(), ReconcileError> {
        let cached = self.work_statuses.get(&ObjectRef::new(name).within(&self.mailbox));
        match cached {
            Some(ws) if self.is_leftover(&ws) => {
                tracing::info!(work_status = name, "deleting a WorkStatus no delivered object owns");
                self.delete(name, ws.uid()).await
            }
            _ => Ok(()),
        }
    }

    /// Deletes the WorkStatus `name`, only the one with `uid` (never one recreated since).
    /// Server-side applies a WorkStatus's `.status` (its status subresource: a WorkStatus gone
    /// meanwhile answers 404, so this never makes one again).
    async fn apply_status(
        &self,
        api: &Api<WorkStatus>,
        name: &str,
        status: &serde_json::Value,
    ) -> Result<(), ReconcileError> {
        let apply = PatchParams::apply(FIELD_MANAGER).force();
        let written = api.patch_status(name, &apply, &Patch::Apply(status)).await?;
        self.written.record(written);
        self.metrics.wrote(Verb::ApplyStatus);
        Ok(())
    }

    async fn delete(&self, name: &str, uid: Option<String>) -> Result<(), ReconcileError> {
        self.written.forget(name);
        let api: Api<WorkStatus> = Api::namespaced(self.hub.clone(), &self.mailbox);
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid,
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        match api.delete(name, &params).await {
            Ok(_) => self.metrics.wrote(Verb::Delete),
            Err(kube::Error::Api(status)) if status.is_not_found() || status.code == 409 => {}
            Err(err) => return Err(err.into()),
        }
        Ok(())
    }

    fn enqueue(&self, keys: impl IntoIterator<Item = ObjectKey>) {
        for key in keys {
            self.objects.add(key);
        }
    }

    /// What the agent's rollout spans say about an object.
    fn attributes(&self, key: &ObjectKey) -> Vec<KeyValue> {
        vec![
            KeyValue::new(attribute::GROUP, key.gvr.group.clone()),
            KeyValue::new(attribute::RESOURCE, key.gvr.resource.clone()),
            KeyValue::new(attribute::NAMESPACE, key.namespace.clone()),
            KeyValue::new(attribute::NAME, key.name.clone()),
            KeyValue::new(attribute::WEC, self.mailbox.clone()),
        ]
    }

    fn finish<K>(&self, queue: &WorkQueue<K>, key: K, result: Result<(), ReconcileError>, what: &str)
    where
        K: Clone + Eq + std::hash::Hash + Send + std::fmt::Debug + 'static,
    {
        if let Err(err) = &result {
            self.metrics.common.errors.inc();
            tracing::warn!(?key, error = %err, "reconciling {what} failed, will retry");
        }
        queue.done(key, result.is_ok());
    }

    /// Brings the tracker up to date with one AppliedManifestWork and its ManifestWork.
    async fn reconcile_work(&self, name: &str) -> Result<(), ReconcileError> {
        let Some(amw) = self.applied.get(&ObjectRef::new(name)) else {
            let changes = lock(&self.tracker).remove_work(name);
            self.apply_changes(changes);
            return Ok(());
        };
        let work = self
            .manifest_works
            .get(&ObjectRef::new(&amw.spec.manifest_work_name).within(&self.mailbox));
        let lists = amw.status.as_ref().map_or(&[][..], |s| &s.applied_resources);
        let applied = work
            .iter()
            .flat_map(|w| w.status.iter())
            .flat_map(|s| s.resource_status.manifests.iter().map(|m| &m.resource_meta));
        let mut objects = Vec::new();
        let mut unknown = BTreeSet::new();
        for id in delivered::delivered(lists, applied) {
            match self.kinds.resolve(&id.gvr).await? {
                Some(kind) => objects.push(AppliedObject {
                    namespace: if kind.namespaced { id.namespace } else { String::new() },
                    gvr: id.gvr,
                    kind: kind.resource.kind,
                    name: id.name,
                }),
                None => _ = unknown.insert(id.gvr.to_string()),
            }
        }
        let uid = amw.metadata.uid.clone().unwrap_or_default();
        let changes = lock(&self.tracker).set_work(name, &uid, &amw.spec.manifest_work_name, &objects);
        self.apply_changes(changes);
        if unknown.is_empty() {
            Ok(())
        } else {
            let gvrs: Vec<String> = unknown.into_iter().collect();
            Err(ReconcileError::UnknownResources { gvrs: gvrs.join(", ") })
        }
    }

    fn apply_changes(&self, changes: crate::changes::Changes) {
        {
            let mut informers = lock(&self.informers);
            for gvr in &changes.stop {
                informers.stop(gvr);
            }
            for gvr in changes.start.iter().filter(|gvr| !gvr.is_secrets()) {
                // Resolved just before the tracker counted it, so it is known.
                if let Some(kind) = self.kinds.known(gvr) {
                    informers.start(gvr, &kind, self.on_informer_event(), &self.shutdown);
                }
            }
            self.metrics.informers.set(informers.len() as i64);
        }
        self.enqueue(changes.added.into_iter().chain(changes.removed));
    }

    fn on_informer_event(&self) -> OnEvent {
        let me = self.me.clone();
        Arc::new(move |event| {
            let Some(agent) = me.upgrade() else { return };
            let keys = match event {
                InformerEvent::Changed(id) => lock(&agent.tracker).key_of_object(&id).into_iter().collect(),
                InformerEvent::Listed(gvr) => lock(&agent.tracker).keys_of_gvr(&gvr),
            };
            agent.enqueue(keys);
        })
    }

    /// Makes the WorkStatus of `key` what it should be, writing only what differs.
    async fn reconcile_object(&self, key: &ObjectKey, span: &tracing::Span) -> Result<(), ReconcileError> {
        if !self.manifest_works_listed.load(Ordering::Acquire) || !self.settled.load(Ordering::Acquire) {
            // The first complete list of the ManifestWorks queues every key again, and so does
            // settling (after the WorkStatuses have listed): until then the reporting delivery
            // of an object may still change.
            return Ok(());
        }
        let started = SystemTime::now();
        let mut trace_parent = None;
        let desired = if lock(&self.tracker).contains(key) {
            let work = self
                .manifest_works
                .get(&ObjectRef::new(&key.manifest_work).within(&self.mailbox));
            let object = if key.gvr.is_secrets() {
                // Applied (its AppliedManifestWork lists it), and reported as delivered.
                work.as_deref()
                    .and_then(|work| report::as_delivered(key, work))
                    .map(Arc::new)
            } else {
                match lock(&self.informers).get(&key.object()) {
                    // Its informer queues every key of the GVR once it has listed.
                    Lookup::NotSynced => return Ok(()),
                    Lookup::Missing => None,
                    Lookup::Found(object) => Some(object),
                }
            };
            match (object, work) {
                (Some(object), Some(work)) => report::desired(key, &object, &work).inspect(|desired| {
                    let applied = desired.status.is_some() && desired.last_generation_is_applied;
                    let annotations = object.metadata.annotations.clone().unwrap_or_default();
                    let parent = self.rollouts.follow(
                        key,
                        &annotations,
                        applied,
                        &self.attributes(key),
                        &rollout::Labels::on(&self.mailbox),
                    );
                    // Join the trace the object's delivery belongs to, if any.
                    let _ = span.set_parent(parent.clone());
                    if rollout::is_traced(&parent) {
                        span.record("trace_id", rollout::trace_id(&parent));
                    }
                    trace_parent = Some(parent);
                }),
                _ => None,
            }
        } else {
            None
        };
        if desired.is_none() {
            self.rollouts.forget(key);
        }
        if desired.is_none()
            && lock(&self.tracker)
                .by_work_status(&key.work_status)
                .is_some_and(|k| k != key)
        {
            // Another followed object owns this name now; its own reconcile writes it.
            return Ok(());
        }
        let cached = self
            .work_statuses
            .get(&ObjectRef::new(&key.work_status).within(&self.mailbox));
        let existing = self.written.latest(&key.work_status, cached);
        let now = Time(Timestamp::now());
        let api: Api<WorkStatus> = Api::namespaced(self.hub.clone(), &self.mailbox);
        let apply = PatchParams::apply(FIELD_MANAGER).force();
        match report::plan(&self.mailbox, desired.as_ref(), existing.as_deref(), now) {
            Plan::Nothing => {}
            Plan::Apply {
                mut main,
                status,
                status_first,
            } => {
                let (wrote_main, wrote_status) = (main.is_some(), status.is_some());
                // Only objects delivered with a trace get report spans (no stray root traces).
                if let Some(parent) = trace_parent.as_ref().filter(|p| rollout::is_traced(p)) {
                    let report = rollout::record(
                        stage::STATUS_REPORT,
                        parent,
                        started,
                        SystemTime::now(),
                        self.attributes(key),
                        &rollout::Labels::on(&self.mailbox),
                    );
                    // The WorkStatus carries the report's span, for the status controller to
                    // continue, sent when the status change was seen (where status propagation starts).
                    if let Some(main) = main.as_mut() {
                        let mut annotations = BTreeMap::new();
                        ks_shared::telemetry::inject_context(&rollout::stamp_sent(&report, started), &mut annotations);
                        if let Some(written) = main["metadata"]["annotations"].as_object_mut() {
                            written.retain(|k, _| !names::is_trace_annotation(k));
                            written.extend(annotations.into_iter().map(|(k, v)| (k, v.into())));
                        }
                    }
                }
                if status_first && let Some(status) = &status {
                    self.apply_status(&api, &key.work_status, status).await?;
                }
                if let Some(main) = main {
                    let written = api.patch(&key.work_status, &apply, &Patch::Apply(&main)).await?;
                    self.written.record(written);
                    self.metrics.wrote(Verb::Apply);
                }
                if !status_first && let Some(status) = &status {
                    self.apply_status(&api, &key.work_status, status).await?;
                }
                tracing::debug!(main = wrote_main, status = wrote_status, "wrote WorkStatus");
            }
            Plan::Delete => {
                self.delete(&key.work_status, existing.as_ref().and_then(|e| e.meta().uid.clone()))
                    .await?;
                tracing::debug!("deleted WorkStatus");
            }
        }
        Ok(())
    }
}
