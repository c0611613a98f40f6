//! The status controller: returns WEC status into WDS workload objects (singleton and multi-WEC),
//! keeps one CombinedStatus per (object, BindingPolicy) that names StatusCollectors, validates the
//! collectors into their status, and tells each Binding whether its collectors are available.
//!
//! Inputs are this WDS's WorkStatuses (ITS, by the origin label), Bindings, StatusCollectors and
//! CombinedStatuses (own watches) and the workload objects (the binding controller's caches:
//! nothing is fetched). A workload object's change reaches us as a change of the Bindings listing
//! it (their entries carry the version of its last change but to its status), a change of its
//! status only straight from those caches. The unit of work is one object: every input
//! names the objects it may affect, and each is reconciled against the current caches, so the
//! order of events never matters and a start-up pass over everything converges after a restart.

mod judging;
mod watches;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::SystemTime;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use ks_shared::api::{Binding, CombinedStatus, Health, HealthRuleStatus, condition_type};
use ks_shared::names::{REPORT_NAMESPACE, TRANSPORT_FINALIZER};
use ks_shared::rollout::{self, KeyValue, attribute, stage};
use ks_shared::runtime::{Backoff, Failure, failure};
use kube::api::Api;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, ResourceExt};
use serde_json::{Value as Json, json};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::collector::{Collector, WecReport};
use super::events::StatusEvents;
use super::health;
use super::metrics::Metrics;
use super::plan::{self, StatusAction, Subject, WecStatus};
use super::report::{CachedWorkStatus, MAX_RETURNED_STATUS};
use super::rules::Rules;
use super::sandbox::{Request, Sandbox};
use super::state::{BindingView, Bindings, CachedName, Delivered, EvaluationErrors, Index, WorkloadRef};
use super::writes::{self, StatusTarget, StatusWritten};
use crate::binding::ObjectIdentity;
use crate::informers::{CachedObject, Served, WorkloadInformers};
use watches::{Input, Stores, cached_name};

/// Settings of the status controller.
#[derive(Clone, Debug)]
pub struct Settings {
    /// WorkStatuses carrying this origin WDS label are ours; others are another WDS's.
    pub wds_name: String,
    /// The transport controller runs too: a new Binding's condition waits until the transport
    /// has put its finalizer on, or our status write would make that update conflict (it
    /// carries the resourceVersion) and delay delivery by the transport's retry.
    pub after_transport: bool,
    pub metrics: Metrics,
    /// Where StatusCollectors are evaluated.
    pub sandbox: Sandbox,
}

/// The UID of the object a CombinedStatus summarises: its name is `<objectUID>.<policyUID>`.
fn summarised_uid(name: &str) -> Option<String> {
    name.split_once('.').map(|(uid, _)| uid.to_string())
}

/// What the controller takes of a Binding: nothing once it is being deleted, as it no longer
/// asks for anything.
fn live_view(binding: &Binding) -> Option<BindingView> {
    binding
        .metadata
        .deletion_timestamp
        .is_none()
        .then(|| BindingView::of(binding))
}

/// What is waiting to be reconciled.
#[derive(Default)]
struct Work {
    objects: BTreeSet<WorkloadRef>,
    bindings: BTreeSet<String>,
    /// Policies whose health to look at (paced, see [`judging::Pace`]).
    policies: BTreeSet<String>,
    collectors: BTreeSet<String>,
    rules: BTreeSet<String>,
}

impl Work {
    fn len(&self) -> usize {
        self.objects.len() + self.bindings.len() + self.policies.len() + self.collectors.len() + self.rules.len()
    }

    /// Puts `item` back to be reconciled.
    fn add(&mut self, item: Item) {
        match item {
            Item::Object(key) => self.objects.insert(key),
            Item::Binding(name) => self.bindings.insert(name),
            Item::Policy(name) => self.policies.insert(name),
            Item::Collector(name) => self.collectors.insert(name),
            Item::Rule(name) => self.rules.insert(name),
        };
    }
}

/// One item of [`Work`]. A failed item is retried after a back-off of its own, as the other
/// controllers retry their keys ([`Backoff::for_writes`]).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Item {
    Object(WorkloadRef),
    Binding(String),
    Policy(String),
    Collector(String),
    Rule(String),
}

impl std::fmt::Display for Item {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Item::Object(key) => write!(f, "{key}"),
            Item::Binding(name) => write!(f, "Binding {name}"),
            Item::Policy(name) => write!(f, "BindingPolicy {name}"),
            Item::Collector(name) => write!(f, "StatusCollector {name}"),
            Item::Rule(name) => write!(f, "HealthRule {name}"),
        }
    }
}

/// Runs the status controller until `shutdown`. `informers` are the hub's, already filled. Failures are logged and retried; it never stops on its own.
pub async fn run(
    wds: Client,
    its: Client,
    informers: WorkloadInformers,
    settings: Settings,
    shutdown: CancellationToken,
) {
    let (inputs, mut received) = mpsc::unbounded_channel();
    let stores = Stores::start(&wds, &inputs, &shutdown);
    // A status written over in the WDS (by hand, by another writer) is written back at once:
    // a change of status only does not change the Bindings, which bring every other change.
    let mut status_changes = informers.status_changes();
    tokio::select! {
        _ = shutdown.cancelled() => return,
        _ = stores.filled() => {}
    }
    // Every Binding known before the first report is cached, so that reports on what is
    // delivered are kept whole from the start.
    let mut bindings = Bindings::default();
    let delivered = Delivered::default();
    for binding in stores.bindings.state() {
        let changed = bindings.set(&binding.name_any(), live_view(&binding));
        delivered.update(&bindings, &changed);
    }
    let withheld = settings.metrics.withheld_reports.clone();
    let work_statuses = watches::reports(
        &its,
        &settings.wds_name,
        delivered.clone(),
        withheld,
        &inputs,
        &shutdown,
    );
    tokio::select! {
        _ = shutdown.cancelled() => return,
        _ = work_statuses.wait_until_ready() => {}
    }
    let events = StatusEvents::start(wds.clone(), settings.metrics.health_events_dropped.clone(), &shutdown);
    let mut controller = StatusController {
        wds,
        its,
        informers,
        stores,
        work_statuses,
        fetched: BTreeMap::new(),
        metrics: settings.metrics,
        after_transport: settings.after_transport,
        sandbox: settings.sandbox,
        bindings,
        delivered,
        reports: Index::default(),
        combined: Index::default(),
        errors: EvaluationErrors::default(),
        collectors: BTreeMap::new(),
        rules: Rules::default(),
        ruled: BTreeMap::new(),
        judged: BTreeMap::new(),
        health_left: BTreeMap::new(),
        health_pace: judging::Pace::default(),
        events,
        applied: BTreeMap::new(),
        report_namespace_exists: false,
    };
    let mut work = controller.everything();
    tracing::info!(objects = work.objects.len(), "status controller started");
    let mut retries: Backoff<Item> = Backoff::for_writes();
    loop {
        controller.process(&mut work, &mut retries).await;
        let retry_due = retries.next_due();
        let health_due = controller.health_pace.next_due();
        controller
            .metrics
            .common
            .queue_depth
            .set((work.len() + retries.waiting() + controller.health_pace.len()) as i64);
        tokio::select! {
            _ = shutdown.cancelled() => return,
            input = received.recv() => {
                // A burst of inputs becomes one pass.
                for input in input.into_iter().chain(std::iter::from_fn(|| received.try_recv().ok())) {
                    controller.handle(input, &mut work);
                }
            }
            Some(object) = status_changes.recv() => {
                work.objects.insert(object);
                work.objects.extend(std::iter::from_fn(|| status_changes.try_recv().ok()));
            }
            _ = tokio::time::sleep_until(retry_due.unwrap_or_else(Instant::now)), if retry_due.is_some() => {
                for item in retries.take_due(Instant::now()) {
                    controller.metrics.common.queue.retried();
                    work.add(item);
                }
            }
            _ = tokio::time::sleep_until(health_due.unwrap_or_else(Instant::now)), if health_due.is_some() => {
                work.policies.extend(controller.health_pace.take_due(Instant::now()));
            }
        }
    }
}

/// A status applied to one incarnation of an object, with what the apiserver stored (or, when it
/// refused it, what the object had).
struct Applied {
    uid: Option<String>,
    status: Json,
    stored: Option<Json>,
}

/// A StatusCollector as last compiled, at its generation.
struct Compiled {
    generation: Option<i64>,
    collector: Result<Collector, Vec<String>>,
}

struct StatusController {
    wds: Client,
    its: Client,
    informers: WorkloadInformers,
    stores: Stores,
    /// This WDS's WorkStatuses, those on objects not sent to their WEC withheld.
    work_statuses: Store<CachedWorkStatus>,
    /// Reports cached withheld whose object has been sent to their WEC since, fetched whole;
    /// until the cache's next word on them.
    fetched: BTreeMap<CachedName, Arc<CachedWorkStatus>>,
    metrics: Metrics,
    after_transport: bool,
    sandbox: Sandbox,
    bindings: Bindings,
    /// Where `bindings` send each object, for the WorkStatus cache.
    delivered: Delivered,
    /// WorkStatuses by the object they report on (the WorkStatus cache's copy of its reference).
    reports: Index<Arc<WorkloadRef>>,
    /// CombinedStatuses by the UID of the object they summarise (the first part of their name):
    /// their labels cannot always name it, as label values are shorter than object names.
    combined: Index<String>,
    errors: EvaluationErrors,
    collectors: BTreeMap<String, Compiled>,
    rules: Rules,
    /// The verdicts of a HealthRule on each object of its kind, per WEC, as last evaluated.
    ruled: BTreeMap<WorkloadRef, BTreeMap<String, Health>>,
    /// The verdict on each object on each WEC it is sent to, as last judged.
    judged: BTreeMap<WorkloadRef, BTreeMap<String, Health>>,
    /// Each policy's health and `Healthy` condition as last found right or written.
    health_left: BTreeMap<String, health::Ours>,
    health_pace: judging::Pace,
    events: StatusEvents,
    /// The status last applied to each object: the same status is not applied again and again
    /// to the same incarnation when the apiserver stores something else (pruning, defaults) or
    /// refuses it.
    applied: BTreeMap<WorkloadRef, Applied>,
    report_namespace_exists: bool,
}

impl StatusController {
    /// Everything, as at start-up: every object some Binding, WorkStatus or CombinedStatus is
    /// about (all new to the empty state), every object whose status we own (a policy may have
    /// gone while we were down), every Binding and every StatusCollector.
    fn everything(&mut self) -> Work {
        let mut work = Work::default();
        for input in [
            Input::WorkStatusesListed,
            Input::CombinedStatusesListed,
            Input::BindingsListed,
            Input::CollectorsListed,
            Input::HealthRulesListed,
        ] {
            self.handle(input, &mut work);
        }
        for (resource, _, object) in self.informers.all_objects() {
            if plan::owns_status(object.managed_fields()) {
                let namespace = object.namespace().unwrap_or_default();
                let key = WorkloadRef::new(&resource.group, &resource.resource, &namespace, &object.name_any());
                work.objects.insert(key);
            }
        }
        work
    }

    /// Notes an input and what it may affect.
    fn handle(&mut self, input: Input, work: &mut Work) {
        match input {
            Input::WorkStatus((namespace, name)) => {
                let found = self.work_statuses.get(&ObjectRef::new(&name).within(&namespace));
                found.as_deref().into_iter().for_each(|w| self.refuse_if_too_large(w));
                self.fetched.remove(&(namespace.clone(), name.clone()));
                let key = found.and_then(|w| w.reported.clone());
                // The object it reports on, also when only its status changed.
                work.objects.extend(key.as_deref().cloned());
                let moved = self.reports.set((namespace, name), key);
                work.objects.extend(moved.into_iter().map(Arc::unwrap_or_clone));
            }
            Input::WorkStatusesListed => {
                let all = self.work_statuses.state();
                all.iter().for_each(|w| self.refuse_if_too_large(w));
                self.fetched.clear();
                let entries: Vec<_> = all
                    .iter()
                    .filter_map(|w| Some((cached_name(&**w), w.reported.clone()?)))
                    .collect();
                // A report that changed while the watch was down shows only in the new list:
                // every reported object is looked at again (and written only if it differs).
                work.objects
                    .extend(entries.iter().map(|(_, subject)| (**subject).clone()));
                let moved = self.reports.replace(entries);
                work.objects.extend(moved.into_iter().map(Arc::unwrap_or_clone));
                work.policies.extend(self.bindings.names());
            }
            Input::CombinedStatus((namespace, name)) => {
                let found = self.stores.combined.get(&ObjectRef::new(&name).within(&namespace));
                // Reconciling its object reverts an edit by hand or recreates it.
                work.objects.extend(found.as_deref().and_then(plan::summarised_object));
                self.combined.set((namespace, name.clone()), summarised_uid(&name));
            }
            Input::CombinedStatusesListed => {
                let all = self.stores.combined.state();
                work.objects
                    .extend(all.iter().filter_map(|c| plan::summarised_object(c)));
                let entries = all.iter().filter_map(|c| {
                    let (namespace, name) = cached_name(&**c);
                    let uid = summarised_uid(&name)?;
                    Some(((namespace, name), uid))
                });
                self.combined.replace(entries);
            }
            Input::Binding(name) => self.binding_changed(&name, work),
            Input::BindingsListed => {
                let mut names: BTreeSet<String> = self.stores.bindings.state().iter().map(|b| b.name_any()).collect();
                names.extend(self.bindings.names());
                names.iter().for_each(|name| self.binding_changed(name, work));
            }
            // Its health is written from the Binding of the same name. A policy's status changes
            // with every write of the transport's and the binding controller's: its health is
            // looked at again only when ours is not as we left it.
            Input::Policy(name) => {
                let policy = self.stores.policies.get(&ObjectRef::new(&name));
                let ours = policy.as_ref().and_then(|p| p.status.as_ref()).map(health::ours);
                if ours.is_none() || ours.as_ref() != self.health_left.get(&name) {
                    work.policies.insert(name.clone());
                }
                if policy.is_none() {
                    self.health_left.remove(&name);
                }
            }
            Input::PoliciesListed => work
                .policies
                .extend(self.stores.policies.state().iter().map(|p| p.name_any())),
            Input::HealthRule(name) => self.rule_changed(&name, work),
            Input::HealthRulesListed => {
                let mut names: BTreeSet<String> = self.stores.rules.state().iter().map(|r| r.name_any()).collect();
                names.extend(self.rules.names());
                names.iter().for_each(|name| self.rule_changed(name, work));
            }
            Input::Collector(name) => self.collector_changed(&name, work),
            Input::CollectorsListed => {
                let mut names: BTreeSet<String> = self.stores.collectors.state().iter().map(|c| c.name_any()).collect();
                names.extend(self.collectors.keys().cloned());
                names.iter().for_each(|name| self.collector_changed(name, work));
            }
        }
    }

    /// A Binding being deleted no longer asks for anything.
    fn binding_changed(&mut self, name: &str, work: &mut Work) {
        let view = self
            .stores
            .bindings
            .get(&ObjectRef::new(name))
            .and_then(|b| live_view(&b));
        if view.is_some() {
            work.bindings.insert(name.to_string());
            work.policies.insert(name.to_string());
        }
        let changed = self.bindings.set(name, view);
        self.delivered.update(&self.bindings, &changed);
        work.objects.extend(changed);
    }

    /// A new spec (or a new or deleted collector) changes every result it takes part in; a
    /// status-only update (ours) needs only its own status checked.
    fn collector_changed(&mut self, name: &str, work: &mut Work) {
        let current = self.stores.collectors.get(&ObjectRef::new(name));
        let generation = current.as_ref().and_then(|c| c.metadata.generation);
        let known = self.collectors.get(name).map(|c| c.generation);
        match (&current, known) {
            (Some(_), Some(known)) if known == generation => {
                work.collectors.insert(name.to_string());
                return;
            }
            (None, None) => return,
            _ => {}
        }
        match current {
            Some(collector) => {
                let compiled = Compiled {
                    generation,
                    collector: Collector::new(name, &collector.spec),
                };
                self.collectors.insert(name.to_string(), compiled);
                work.collectors.insert(name.to_string());
            }
            None => {
                self.collectors.remove(name);
            }
        }
        let (bindings, objects) = self.bindings.using_collector(name);
        work.bindings.extend(bindings);
        work.objects.extend(objects);
    }

    /// A new spec (or a new or deleted rule) changes the verdicts on every object of its kinds,
    /// and which rule of a kind is used; a status-only update (ours) needs only its own status
    /// checked.
    fn rule_changed(&mut self, name: &str, work: &mut Work) {
        let current = self.stores.rules.get(&ObjectRef::new(name));
        let generation = current.as_ref().and_then(|r| r.metadata.generation);
        let kinds = self.rules.set(name, generation, current.as_ref().map(|r| &r.spec));
        work.rules.insert(name.to_string());
        if kinds.is_empty() {
            return;
        }
        // The other rules of those kinds: one of them may be used, or unused, now.
        for rule in self.stores.rules.state() {
            if kinds.contains(&(rule.spec.group.clone(), rule.spec.kind.clone())) {
                work.rules.insert(rule.name_any());
            }
        }
        for name in self.bindings.names() {
            let Some(view) = self.bindings.get(&name) else { continue };
            for key in view.entries.keys() {
                let kind = self
                    .informers
                    .served(&key.resource)
                    .map(|s| (s.resource.group, s.resource.kind));
                if kind.is_some_and(|k| kinds.contains(&k)) {
                    work.objects.insert(key.clone());
                }
            }
        }
    }

    fn valid_collector(&self, name: &str) -> Option<&Collector> {
        self.collectors.get(name)?.collector.as_ref().ok()
    }

    /// Reconciles what is waiting; what fails and may succeed later waits its back-off in
    /// `retries`.
    async fn process(&mut self, work: &mut Work, retries: &mut Backoff<Item>) {
        for key in std::mem::take(&mut work.objects) {
            self.metrics.common.reconciles.inc();
            let started = Instant::now();
            let reconciled = self.reconcile_object(&key).await;
            self.metrics
                .common
                .queue
                .finished(started.elapsed(), reconciled.is_ok());
            let error = match reconciled {
                Ok((collectors, judged_anew)) => {
                    work.collectors.extend(collectors);
                    if judged_anew {
                        let selecting = self.bindings.selecting(&key);
                        work.policies
                            .extend(selecting.into_iter().map(|(b, _, _)| b.to_string()));
                    }
                    None
                }
                Err(err) => Some(err),
            };
            self.settle(retries, Item::Object(key), error);
        }
        for name in std::mem::take(&mut work.bindings) {
            let error = self.reconcile_binding(&name).await.err();
            self.settle(retries, Item::Binding(name), error);
        }
        let policies = std::mem::take(&mut work.policies);
        for name in self.health_pace.take_ready(policies, Instant::now()) {
            let error = self.reconcile_health(&name).await.err();
            self.settle(retries, Item::Policy(name), error);
        }
        for name in std::mem::take(&mut work.collectors) {
            let error = self.reconcile_collector(&name).await.err();
            self.settle(retries, Item::Collector(name), error);
        }
        for name in std::mem::take(&mut work.rules) {
            let error = self.reconcile_rule(&name).await.err();
            self.settle(retries, Item::Rule(name), error);
        }
    }

    /// Notes how reconciling `item` went: a failure that trying again may help (the same
    /// classification as every controller's, [`failure`]) waits for its own back-off; anything
    /// else starts that back-off over. A failure is counted and logged.
    fn settle(&self, retries: &mut Backoff<Item>, item: Item, error: Option<kube::Error>) {
        let Some(err) = error else {
            retries.succeeded(&item);
            return;
        };
        self.metrics.common.errors.inc();
        let retry = failure(&err) == Failure::Transient;
        tracing::warn!(what = %item, error = %err, retry, "status write failed");
        if retry {
            retries.failed(item, Instant::now());
        } else {
            retries.succeeded(&item);
        }
    }

    /// Fetches whole the reports on `key` that were cached withheld, from WECs it is sent to
    /// now: a report that came before the Binding sending its object there.
    async fn fetch_withheld(&mut self, key: &WorkloadRef) -> kube::Result<()> {
        let withheld: Vec<CachedName> = self
            .reports
            .of(key)
            .filter(|(mailbox, name)| {
                let cached = self.work_statuses.get(&ObjectRef::new(name).within(mailbox));
                cached.is_some_and(|c| c.withheld)
                    && !self.fetched.contains_key(&(mailbox.clone(), name.clone()))
                    && self.delivered.to(mailbox, key)
            })
            .cloned()
            .collect();
        for (mailbox, name) in withheld {
            let api: Api<CachedWorkStatus> = Api::namespaced(self.its.clone(), &mailbox);
            if let Some(report) = api.get_opt(&name).await? {
                self.fetched.insert((mailbox, name), Arc::new(report));
            }
        }
        Ok(())
    }

    /// Counts and says a WorkStatus seen with a status too large to keep.
    fn refuse_if_too_large(&self, report: &CachedWorkStatus) {
        if let Some(bytes) = report.refused {
            self.metrics.refused_reports.inc();
            let (mailbox, name) = cached_name(report);
            tracing::warn!(
                %mailbox, %name, bytes,
                "a WorkStatus's status is larger than the {MAX_RETURNED_STATUS} bytes the hub keeps: not returned"
            );
        }
    }

    /// What each WEC reported on the object (the incarnation with `uid`; `returned`: it has
    /// had status returned), for the WECs with exactly one WorkStatus for it (more than one
    /// cannot be told apart, so none counts).
    fn wec_statuses(&self, key: &WorkloadRef, uid: &str, returned: bool) -> BTreeMap<String, WecStatus> {
        let mut by_wec: BTreeMap<&str, Vec<&CachedName>> = BTreeMap::new();
        for cached in self.reports.of(key) {
            by_wec.entry(&cached.0).or_default().push(cached);
        }
        by_wec
            .into_iter()
            .filter_map(|(wec, names)| {
                let [(namespace, name)] = names.as_slice() else {
                    return None;
                };
                let found = self.report(namespace, name)?;
                Some((wec.to_string(), found.wec_status(uid, returned)))
            })
            .collect()
    }

    /// Brings one object's returned status and CombinedStatuses in line with the caches, and
    /// judges it on its WECs anew; returns the StatusCollectors whose evaluation errors changed,
    /// and whether its health on some WEC did.
    async fn reconcile_object(&mut self, key: &WorkloadRef) -> kube::Result<(BTreeSet<String>, bool)> {
        let object = self.informers.get(key);
        let served = self.informers.served(&key.resource);
        let (Some(object), Some(served)) = (object, served) else {
            // Gone (or never here: a WorkStatus for an object this WDS does not have): nothing
            // to write to, and its CombinedStatuses go with it (they are owned by it).
            self.applied.remove(key);
            self.ruled.remove(key);
            let judged_anew = self.judged.remove(key).is_some();
            return Ok((self.errors.set(key, BTreeMap::new()), judged_anew));
        };
        let resource = served.resource.clone();
        self.fetch_withheld(key).await?;
        let selecting = self.bindings.selecting(key);
        let uid = object.uid().unwrap_or_default();
        let wecs = self.wec_statuses(key, &uid, plan::owns_status(object.managed_fields()));
        // CEL's `obj`, built only when some collector or rule will look at it.
        let rule = self.rules.for_kind(&resource.group, &resource.kind);
        let collecting = rule.is_some()
            || selecting
                .iter()
                .any(|(_, _, e)| !e.modulation.status_collectors.is_empty());
        // One whose content cannot be read is no `obj` (its collectors' expressions reading it
        // fail, and say so), not one without its spec.
        let whole = if collecting {
            object.as_served(&resource).unwrap_or_else(|err| {
                tracing::warn!(object = %key, error = %err, "status collectors see no obj");
                Json::Null
            })
        } else {
            Json::Null
        };
        let identity = ObjectIdentity {
            group: resource.group.clone(),
            version: resource.version.clone(),
            resource: key.resource.resource.clone(),
            namespace: key.namespace_or_empty().to_string(),
            name: key.name.clone(),
            kind: resource.kind.clone(),
        };
        let subject = Subject {
            identity: &identity,
            uid: &uid,
            object: &whole,
        };
        let sandboxed = |collectors: &[&Collector], object: &Json, reports: &[WecReport]| {
            self.sandbox.evaluate(&Request::new(collectors, object, reports))
        };
        let collector = |c: &str| self.valid_collector(c);
        let combine = || {
            let outcome = plan::combined_statuses(&subject, &selecting, &wecs, collector, sandboxed);
            let reports: Vec<WecReport> = wecs.iter().map(|(wec, reported)| reported.report(wec)).collect();
            let judged = rule.map(|rule| {
                let evaluate =
                    |collectors: &[&Collector], reports: &[WecReport]| sandboxed(collectors, &whole, reports);
                rule.judge(&reports, evaluate)
            });
            (outcome, judged.transpose())
        };
        // CEL evaluation is CPU work (bounded by its budget): the runtime moves this worker's
        // other tasks elsewhere meanwhile, on a thread it starts or wakes for them. Without
        // collectors or a rule there is no CEL to run, and no reason for that thread.
        let (outcome, judged) = if collecting {
            tokio::task::block_in_place(combine)
        } else {
            combine()
        };
        // The verdicts settle what the WECs' statuses disagree on in an aggregate: this
        // evaluation's HealthRule verdicts, or the last ones when it failed.
        let ruled = match &judged {
            Ok(ruled) => ruled.as_ref(),
            Err(_) => self.ruled.get(key),
        };
        let verdict = |wec: &str| {
            self.verdict_ruled(key, &object, wec, ruled.and_then(|r| r.get(wec)))
                .verdict
        };
        let action = plan::returned_status(&resource.group, &resource.kind, &selecting, &wecs, verdict);
        let started = SystemTime::now();
        if self.write_status(key, &object, &served, action).await? {
            trace_propagation(key, &wecs, started);
        }
        // Without an evaluation the CombinedStatuses stay as they are (none is emptied), and
        // the object is tried again.
        let (desired, errors) = outcome.map_err(|unavailable| kube::Error::Service(unavailable.into()))?;
        let changed = self.errors.set(key, errors);
        self.write_combined(&uid, desired).await?;
        // Without an evaluation the verdicts stay as they were, and the object is tried again.
        let judged = judged.map_err(|unavailable| kube::Error::Service(unavailable.into()))?;
        match judged {
            Some(verdicts) => self.ruled.insert(key.clone(), verdicts),
            None => self.ruled.remove(key),
        };
        Ok((changed, self.judge_anew(key, &object, &resource, &wecs)))
    }

    /// Writes the object's `.status` when it differs from what we want it to be; true when it
    /// wrote.
    async fn write_status(
        &mut self,
        key: &WorkloadRef,
        object: &CachedObject,
        served: &Served,
        action: StatusAction,
    ) -> kube::Result<bool> {
        let current = object.status();
        let status = match action {
            StatusAction::Leave => return Ok(false),
            StatusAction::Clear if !plan::owns_status(object.managed_fields()) => return Ok(false),
            StatusAction::Clear => json!({}),
            StatusAction::Set(status) if current.as_ref() == Some(&status) => return Ok(false),
            StatusAction::Set(status) => status,
        };
        let uid = object.uid();
        let unchanged_since_ours = self.applied.get(key).is_some_and(|applied| {
            applied.uid == uid && applied.status == status && applied.stored.as_ref() == current.as_ref()
        });
        if unchanged_since_ours {
            return Ok(false);
        }
        let target = match (served.status_subresource, uid.as_deref()) {
            (true, _) => StatusTarget::Subresource,
            (false, Some(uid)) => StatusTarget::Object { uid },
            (false, None) => return Ok(false),
        };
        match writes::apply_object_status(&self.wds, &served.resource, key, target, &status).await {
            Ok(StatusWritten::Stored(stored)) => {
                self.metrics.common.writes.inc();
                tracing::debug!(object = %key, "status written");
                // Told once an incarnation: an object that had no status (a restarted hub finds
                // its status there already).
                let had_none = current
                    .as_ref()
                    .is_none_or(|c| c.as_object().is_some_and(|o| o.is_empty()));
                if had_none && status.as_object().is_some_and(|o| !o.is_empty()) {
                    self.events
                        .status_returned(judging::reference(object, &served.resource));
                }
                self.applied.insert(key.clone(), Applied { uid, status, stored });
                Ok(true)
            }
            // Deleted meanwhile. One made again under its name refuses the old UID (refused
            // below): its own turn comes with its event.
            Ok(StatusWritten::Gone) => {
                tracing::debug!(object = %key, "no status to write to");
                Ok(false)
            }
            // Refused (e.g. a Job's status cannot lose its completion): not again until the
            // object's status or what we want changes.
            Err(err) if failure(&err) != Failure::Transient => {
                let stored = current;
                self.applied.insert(key.clone(), Applied { uid, status, stored });
                Err(err)
            }
            Err(err) => Err(err),
        }
    }

    /// Writes the desired CombinedStatuses that differ and deletes the other ones of the object
    /// (by its UID).
    async fn write_combined(&mut self, uid: &str, desired: Vec<CombinedStatus>) -> kube::Result<()> {
        let wanted: BTreeSet<CachedName> = desired.iter().map(cached_name).collect();
        for combined in &desired {
            let (namespace, name) = cached_name(combined);
            let existing = self.stores.combined.get(&ObjectRef::new(&name).within(&namespace));
            if existing.is_some_and(|e| !plan::combined_status_differs(&e, combined)) {
                continue;
            }
            if namespace == REPORT_NAMESPACE && !self.report_namespace_exists {
                writes::ensure_namespace(&self.wds, REPORT_NAMESPACE).await?;
                self.report_namespace_exists = true;
            }
            let written = writes::apply_combined_status(&self.wds, combined).await;
            // The report namespace may have been deleted since: create it on the retry.
            self.report_namespace_exists &= written.is_ok();
            written?;
            self.metrics.combined_status_writes.inc();
        }
        let stale: Vec<CachedName> = self
            .combined
            .of(&uid.to_string())
            .filter(|c| !wanted.contains(*c))
            .cloned()
            .collect();
        for (namespace, name) in stale {
            writes::delete_combined_status(&self.wds, &namespace, &name).await?;
            self.metrics.combined_status_writes.inc();
        }
        Ok(())
    }

    /// Sets the Binding's `StatusCollectorsAvailable` condition when it changed.
    async fn reconcile_binding(&self, name: &str) -> kube::Result<()> {
        let (Some(binding), Some(view)) = (self.stores.bindings.get(&ObjectRef::new(name)), self.bindings.get(name))
        else {
            return Ok(());
        };
        if self.after_transport && !binding.finalizers().iter().any(|f| f == TRANSPORT_FINALIZER) {
            // Its Binding event brings us back here.
            return Ok(());
        }
        let previous = binding
            .status
            .as_ref()
            .and_then(|s| s.condition(condition_type::STATUS_COLLECTORS_AVAILABLE));
        let now = Time(k8s_openapi::jiff::Timestamp::now());
        let condition = plan::collectors_condition(view, |c| self.valid_collector(c).is_some(), previous, now);
        if previous == Some(&condition) {
            return Ok(());
        }
        writes::apply_binding_condition(&self.wds, &binding, &condition).await
    }

    /// Sets the HealthRule's status (its compilation errors, or that another rule of its kind is
    /// used) when it changed.
    async fn reconcile_rule(&self, name: &str) -> kube::Result<()> {
        let Some(current) = self.stores.rules.get(&ObjectRef::new(name)) else {
            return Ok(());
        };
        let status = HealthRuleStatus {
            observed_generation: current.metadata.generation.unwrap_or_default(),
            errors: self.rules.errors(name),
        };
        if current.status.as_ref() == Some(&status) {
            return Ok(());
        }
        writes::apply_rule_status(&self.wds, name, &status).await?;
        self.metrics.common.writes.inc();
        Ok(())
    }

    /// Sets the StatusCollector's status (validation or evaluation errors) when it changed.
    async fn reconcile_collector(&self, name: &str) -> kube::Result<()> {
        let Some(current) = self.stores.collectors.get(&ObjectRef::new(name)) else {
            return Ok(());
        };
        let validation = match self.collectors.get(name).map(|c| &c.collector) {
            Some(Err(errors)) => errors.as_slice(),
            _ => &[],
        };
        let generation = current.metadata.generation.unwrap_or_default();
        let status = plan::collector_status(generation, validation, self.errors.lines(name));
        if current.status.as_ref() == Some(&status) {
            return Ok(());
        }
        writes::apply_collector_status(&self.wds, name, &status).await?;
        let before = current.status.as_ref().map(|s| s.errors.as_slice()).unwrap_or_default();
        self.events
            .collector_checked(kube::Resource::object_ref(&*current, &()), before, &status.errors);
        Ok(())
    }
}

/// The attributes of a span about the object `key` on `wec`.
fn span_attributes(key: &WorkloadRef, wec: &str) -> Vec<KeyValue> {
    vec![
        KeyValue::new(attribute::GROUP, key.resource.group.clone()),
        KeyValue::new(attribute::RESOURCE, key.resource.resource.clone()),
        KeyValue::new(attribute::NAMESPACE, key.namespace_or_empty().to_string()),
        KeyValue::new(attribute::NAME, key.name.clone()),
        KeyValue::new(attribute::WEC, wec.to_string()),
    ]
}

/// Continues the trace of each WEC's status report with the status propagation span (this
/// write), and observes the status propagation and end-to-end latencies.
fn trace_propagation(key: &WorkloadRef, wecs: &BTreeMap<String, WecStatus>, started: SystemTime) {
    let now = SystemTime::now();
    for (wec, reported) in wecs {
        let report = ks_shared::telemetry::extract_context(&reported.trace);
        if !rollout::is_traced(&report) {
            continue;
        }
        let labels = rollout::Labels::on(wec);
        rollout::record(
            stage::STATUS_PROPAGATION,
            &report,
            started,
            now,
            span_attributes(key, wec),
            &labels,
        );
        let latencies = rollout::latencies();
        if let Some(sent) = rollout::sent_at(&report) {
            latencies
                .status_propagation
                .get_or_create(&labels)
                .observe(rollout::seconds(sent, now));
        }
        if let Some(rollout_start) = rollout::started_at(&report) {
            latencies
                .end_to_end
                .get_or_create(&labels)
                .observe(rollout::seconds(rollout_start, now));
        }
    }
}
