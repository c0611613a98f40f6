//! The binding controller: follows the workload objects of the WDS (through the shared
//! informers), the BindingPolicies and the WECs (ManagedClusters in the ITS), keeps each
//! policy's resolution current from those caches, and writes a policy's Binding and status only
//! when they change, coalescing bursts.

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use ks_shared::api::{Binding, BindingPolicy, StatusCollector};
use ks_shared::names::BINDING_POLICY_FINALIZER;
use ks_shared::ocm::ManagedCluster;
use ks_shared::runtime::watch_health;
use ks_shared::runtime::{
    Backoff, Debounce, Failure, failure, watch_into_inputs, watch_trimmed_into_inputs, without_managed_fields,
};
use ks_shared::serve::ReadyGate;
use kube::api::Api;
use kube::discovery::ApiResource;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Client, Resource, ResourceExt};
use tokio::sync::mpsc::{self, UnboundedReceiver};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::Metrics;
use super::state::{Change, Resolutions, StatusRequest};
use super::writes;
use super::{Labels, ObjectIdentity, Wec, WorkloadObject};
use crate::informers::{CachedObject, GroupResource, WorkloadEvent, WorkloadInformers, WorkloadRef, workload_watch};

/// Settings of the binding controller.
#[derive(Clone, Debug)]
pub struct Settings {
    /// How long a policy's changes must pause before its Binding is written.
    pub debounce: Duration,
    /// The longest a policy's changes wait while they keep coming (objects created one after
    /// another): a burst becomes one write per this, not one per change.
    pub debounce_max: Duration,
    pub metrics: Metrics,
}

/// Everything the loop reacts to.
enum Input {
    Policy(String),
    /// The policies were (re-)listed: one deleted while the watch was down is only absent.
    Policies,
    Binding(String),
    Namespace(String),
    /// The namespaces were (re-)listed.
    Namespaces,
    Wecs,
    /// The Bindings were (re-)listed, or a StatusCollector changed (the policies' errors may
    /// change): re-check each policy's Binding and status.
    Recheck,
}

/// The caches the loop reads.
struct Caches {
    informers: WorkloadInformers,
    policies: Store<BindingPolicy>,
    bindings: Store<Binding>,
    namespaces: Store<Namespace>,
    clusters: Store<ManagedCluster>,
    collectors: Store<StatusCollector>,
}

impl Caches {
    fn namespace_labels(&self, namespace: &str) -> Option<Labels> {
        if namespace.is_empty() {
            return None;
        }
        self.namespaces
            .get(&ObjectRef::new(namespace))
            .map(|ns| ns.labels().clone())
    }

    /// The WECs; one being deleted is no longer a destination, even while finalizers hold it.
    fn wecs(&self) -> Vec<Wec> {
        self.clusters
            .state()
            .iter()
            .filter(|c| c.metadata.deletion_timestamp.is_none())
            .map(|c| Wec {
                name: c.name_any(),
                labels: c.labels().clone(),
            })
            .collect()
    }

    /// Every cached workload object with its namespace's labels.
    fn objects(&self) -> Vec<(WorkloadObject, Option<Labels>)> {
        self.informers
            .all_objects()
            .into_iter()
            .map(|(_, ar, o)| {
                let object = workload_object(&ar, &o);
                let labels = self.namespace_labels(&object.identity.namespace);
                (object, labels)
            })
            .collect()
    }
}

/// The selection view of a cached object.
fn workload_object(resource: &ApiResource, object: &CachedObject) -> WorkloadObject {
    WorkloadObject {
        identity: ObjectIdentity {
            group: resource.group.clone(),
            version: resource.version.clone(),
            resource: resource.plural.clone(),
            namespace: object.namespace().unwrap_or_default(),
            name: object.name_any(),
            kind: resource.kind.clone(),
        },
        // A status written back is nothing new to deliver: the Binding stays as it is.
        resource_version: object.content_version(),
        labels: object.labels().clone(),
    }
}

/// Runs the binding controller until `shutdown`, on `informers` (filled) and their `events`;
/// `ready` opens once its first pass over the policies is written.
pub async fn run(
    wds: Client,
    its: Client,
    informers: WorkloadInformers,
    mut workload_received: UnboundedReceiver<WorkloadEvent>,
    settings: Settings,
    ready: ReadyGate,
    shutdown: CancellationToken,
) {
    let (inputs, mut received) = mpsc::unbounded_channel();
    let caches = Caches {
        policies: watch_into_inputs(
            Api::all(wds.clone()),
            watcher::Config::default(),
            &shutdown,
            &inputs,
            |p| Some(Input::Policy(p.name_any())),
            || Input::Policies,
        ),
        // Only the Binding's content matters, which its policy's check compares.
        bindings: watch_trimmed_into_inputs(
            Api::all(wds.clone()),
            watcher::Config::default(),
            without_managed_fields,
            &shutdown,
            &inputs,
            |b| Some(Input::Binding(b.name_any())),
            || Input::Recheck,
        ),
        namespaces: watch_into_inputs(
            Api::all(wds.clone()),
            watcher::Config::default(),
            &shutdown,
            &inputs,
            |n| Some(Input::Namespace(n.name_any())),
            || Input::Namespaces,
        ),
        clusters: watch_into_inputs(
            Api::all(its.clone()),
            watcher::Config::default(),
            &shutdown,
            &inputs,
            |_| Some(Input::Wecs),
            || Input::Wecs,
        ),
        collectors: watch_into_inputs(
            Api::all(wds.clone()),
            watcher::Config::default(),
            &shutdown,
            &inputs,
            |_| Some(Input::Recheck),
            || Input::Recheck,
        ),
        informers,
    };
    let filled = async {
        futures::join!(
            caches.policies.wait_until_ready(),
            caches.bindings.wait_until_ready(),
            caches.namespaces.wait_until_ready(),
            caches.clusters.wait_until_ready(),
            caches.collectors.wait_until_ready(),
        )
    };
    tokio::select! {
        _ = shutdown.cancelled() => return,
        _ = filled => {}
    }

    let policy_api: Api<BindingPolicy> = Api::all(wds.clone());
    let binding_api: Api<Binding> = Api::all(wds.clone());
    let mut resolutions = Resolutions::default();
    let labelled = labelled_at_start(&caches);
    let mut looper = Loop {
        caches,
        wds: wds.clone(),
        labelled,
        retries: Backoff::for_writes(),
        gathering: Debounce::new(settings.debounce, settings.debounce_max).measured_by(settings.metrics.queue.clone()),
        resolutions: &mut resolutions,
        policy_api,
        binding_api,
        metrics: settings.metrics,
        events: crate::events::Events::new(wds.clone(), "kubestellar.io/binding-controller"),
    };
    for policy in looper.caches.policies.state() {
        looper.policy_changed(&policy.name_any()).await;
    }
    looper.flush_all().await;
    ready.open();

    loop {
        looper.gather(Instant::now());
        looper.metrics.queue_depth.set(looper.gathering.len() as i64);
        let next_timer = [looper.gathering.next_due(), looper.retries.next_due()]
            .into_iter()
            .flatten()
            .min();
        tokio::select! {
            _ = shutdown.cancelled() => return,
            Some(event) = workload_received.recv() => looper.workload_event(event),
            Some(input) = received.recv() => match input {
                Input::Policy(name) => looper.policy_changed(&name).await,
                Input::Policies => looper.policies_listed().await,
                Input::Binding(name) => looper.resolutions.touch(&name),
                Input::Namespace(name) => looper.namespace_changed(&name),
                Input::Namespaces => looper.namespaces_listed(),
                Input::Wecs => looper.resolutions.set_wecs(&looper.caches.wecs()),
                Input::Recheck => looper.resolutions.policy_names().iter().for_each(|n| looper.resolutions.touch(n)),
            },
            _ = tokio::time::sleep_until(next_timer.unwrap_or_else(Instant::now)), if next_timer.is_some() => {
                let now = Instant::now();
                let due = looper.gathering.take_due(now);
                if !due.is_empty() {
                    looper.flush(due).await;
                }
                looper.retry(now).await;
            }
        }
    }
}

/// The status-request labels objects carry now; applying from this baseline removes ours from
/// objects no longer requested, even across a restart (server-side apply only removes what we own).
fn labelled_at_start(caches: &Caches) -> std::collections::BTreeMap<ObjectIdentity, StatusRequest> {
    use ks_shared::names::{LABEL_TRUE, MULTI_WEC_STATUS_LABEL, SINGLETON_STATUS_LABEL};
    caches
        .objects()
        .into_iter()
        .filter_map(|(o, _)| {
            let has = |key: &str| o.labels.get(key).is_some_and(|v| v == LABEL_TRUE);
            let request = StatusRequest {
                singleton: has(SINGLETON_STATUS_LABEL),
                multi_wec: has(MULTI_WEC_STATUS_LABEL),
            };
            (request.singleton || request.multi_wec).then_some((o.identity, request))
        })
        .collect()
}

const TRANSIENT: Option<Failure> = Some(Failure::Transient);

/// A failed write, tried again after a back-off.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Retry {
    /// A policy's finalizer, Binding or status.
    Policy(String),
    /// The status-request labels of WDS objects.
    Labels,
}

struct Loop<'a> {
    caches: Caches,
    wds: Client,
    /// The status-request labels last applied (or found on objects at start-up).
    labelled: std::collections::BTreeMap<ObjectIdentity, StatusRequest>,
    /// Writes that failed and may succeed later: retried after a back-off, not at once.
    retries: Backoff<Retry>,
    /// Policies whose Binding may have changed, each written once its changes pause.
    gathering: Debounce<String>,
    resolutions: &'a mut Resolutions,
    policy_api: Api<BindingPolicy>,
    binding_api: Api<Binding>,
    metrics: Metrics,
    /// Events on the policies, when what their status says changes.
    events: crate::events::Events,
}

impl Loop<'_> {
    fn workload_event(&mut self, event: WorkloadEvent) {
        match event {
            WorkloadEvent::Changed(object) => self.object_changed(&object),
            WorkloadEvent::Listed(resource) => {
                // After a re-list, objects deleted while the watch was down are simply absent.
                let present: BTreeSet<WorkloadRef> = self
                    .caches
                    .informers
                    .objects_of(&resource)
                    .iter()
                    .map(|o| WorkloadRef {
                        resource: resource.clone(),
                        namespace: o.namespace(),
                        name: o.name_any(),
                    })
                    .collect();
                self.resolutions
                    .retain_objects(|key| key.resource != resource || present.contains(key));
                for object in &present {
                    self.object_changed(object);
                }
                // Bindings kept this resource's objects as they were while its cache filled.
                for name in self.resolutions.policy_names() {
                    self.resolutions.touch(&name);
                }
            }
            WorkloadEvent::Stopped(resource) => {
                self.resolutions.retain_objects(|key| key.resource != resource);
            }
            // The policies that may select its objects say so (`stuck_caches`).
            WorkloadEvent::Stuck(resource) => {
                for name in self.resolutions.policy_names() {
                    let may_select = self
                        .resolutions
                        .policy(&name)
                        .is_some_and(|p| p.compiled.may_select(&resource.group, &resource.resource));
                    if may_select {
                        self.resolutions.touch(&name);
                    }
                }
            }
        }
    }

    fn object_changed(&mut self, key: &WorkloadRef) {
        let cached = self.caches.informers.get(key);
        let ar = self.caches.informers.served(&key.resource).map(|s| s.resource);
        match (cached, ar) {
            (Some(object), Some(ar)) => {
                let object = workload_object(&ar, &object);
                let labels = self.caches.namespace_labels(&object.identity.namespace);
                self.resolutions.set_object(key, Some((&object, labels.as_ref())));
            }
            _ => self.resolutions.set_object(key, None),
        }
    }

    /// Every policy cached or resolved: those deleted unseen are dropped.
    async fn policies_listed(&mut self) {
        let mut names: std::collections::BTreeSet<String> = self.resolutions.policy_names().into_iter().collect();
        names.extend(self.caches.policies.state().iter().map(|p| p.name_any()));
        for name in names {
            self.policy_changed(&name).await;
        }
    }

    fn namespaces_listed(&mut self) {
        for namespace in self.caches.namespaces.state() {
            self.namespace_changed(&namespace.name_any());
        }
    }

    /// A namespace's labels feed `namespaceSelectors`: re-evaluate the objects in it.
    fn namespace_changed(&mut self, namespace: &str) {
        let labels = self.caches.namespace_labels(namespace);
        for (object, _) in self
            .caches
            .objects()
            .into_iter()
            .filter(|(o, _)| o.identity.namespace == namespace)
        {
            self.resolutions
                .set_object(&object.identity.workload_ref(), Some((&object, labels.as_ref())));
        }
    }

    async fn policy_changed(&mut self, name: &str) {
        let Some(policy) = self.caches.policies.get(&ObjectRef::new(name)) else {
            self.resolutions.remove_policy(name);
            self.retries.succeeded(&Retry::Policy(name.into()));
            return;
        };
        let has_finalizer = policy.finalizers().iter().any(|f| f == BINDING_POLICY_FINALIZER);
        if policy.metadata.deletion_timestamp.is_some() {
            // The Binding goes with the policy through its ownerReference.
            self.resolutions.remove_policy(name);
            if has_finalizer {
                // Another policy may take its objects over (one policy replaced by another):
                // that Binding is written first, so the transport sees it before this one goes,
                // and keeps the objects on the WECs until the other's ManifestWorks hold them.
                self.flush_all().await;
                let removed = crate::finalizer::set(&self.policy_api, &*policy, BINDING_POLICY_FINALIZER, false).await;
                if self.settle(removed, Retry::Policy(name.into()), "removing the finalizer") != TRANSIENT {
                    self.retries.succeeded(&Retry::Policy(name.into()));
                }
            }
            return;
        }
        if !has_finalizer {
            let added = crate::finalizer::set(&self.policy_api, &*policy, BINDING_POLICY_FINALIZER, true).await;
            self.settle(added, Retry::Policy(name.into()), "adding the finalizer");
        }
        let generation = policy.metadata.generation.unwrap_or_default();
        if self
            .resolutions
            .policy(name)
            .is_some_and(|s| s.generation == generation)
        {
            // A status or metadata update: the spec, and so the resolution, is unchanged.
            return;
        }
        let objects = self.caches.objects();
        let wecs = self.caches.wecs();
        self.resolutions.set_policy(
            name,
            generation,
            &policy.spec,
            objects.iter().map(|(o, l)| (o, l.as_ref())),
            &wecs,
        );
    }

    /// Counts and logs a failed write, and schedules `retry` when trying again may help: not
    /// when the object is gone, nor when the apiserver refused the write (only a change can fix
    /// that, and a change brings its own try). Returns what the failure calls for.
    fn settle(&mut self, result: kube::Result<()>, retry: Retry, what: &str) -> Option<Failure> {
        let err = result.err()?;
        let failure = failure(&err);
        match failure {
            Failure::Moot => tracing::debug!(?retry, what, "object gone; nothing to write"),
            Failure::Refused => {
                self.metrics.errors.inc();
                tracing::error!(?retry, what, error = %err, "write refused; not retried");
            }
            Failure::Transient => {
                self.metrics.errors.inc();
                self.metrics.queue.retried();
                tracing::warn!(?retry, what, error = %err, "write failed; retrying with back-off");
                self.retries.failed(retry, Instant::now());
            }
        }
        Some(failure)
    }

    /// Tries the failed writes due at `now` again. A policy is re-read, so one being deleted
    /// gets its finalizer removal again and a live one its finalizer, Binding and status checked.
    async fn retry(&mut self, now: Instant) {
        for retry in self.retries.take_due(now) {
            match retry {
                Retry::Policy(name) => {
                    self.policy_changed(&name).await;
                    if self.resolutions.policy(&name).is_some() {
                        self.resolutions.touch(&name);
                    }
                }
                Retry::Labels => self.sync_status_labels().await,
            }
        }
    }

    /// Brings the status-request labels of WDS objects in line with what the policies request.
    async fn sync_status_labels(&mut self) {
        let wanted = self.resolutions.status_requests();
        let mut changes: Vec<(ObjectIdentity, StatusRequest)> = wanted
            .iter()
            .filter(|(id, r)| self.labelled.get(*id) != Some(*r))
            .map(|(id, r)| (id.clone(), *r))
            .collect();
        changes.extend(
            self.labelled
                .keys()
                .filter(|id| !wanted.contains_key(*id))
                .map(|id| (id.clone(), StatusRequest::default())),
        );
        let mut failed = false;
        for (id, request) in changes {
            // The object as the cache holds it now. Gone (deleted by its user): it has no label
            // to change, and an apply would create it again.
            let Some(uid) = self
                .caches
                .informers
                .get(&id.workload_ref())
                .and_then(|o| o.metadata.uid.clone())
            else {
                self.labelled.remove(&id);
                continue;
            };
            let result = writes::apply_status_request_labels(&self.wds, &id, &uid, request).await;
            let what = format!("status-request labels of {}", id.name);
            if self.settle(result, Retry::Labels, &what) == Some(Failure::Transient) {
                failed = true;
                continue;
            }
            // Applied; or the object is gone and needs no label; or refused, and then not tried
            // again until what is wanted changes.
            if request == StatusRequest::default() {
                self.labelled.remove(&id);
            } else {
                self.labelled.insert(id, request);
            }
        }
        if !failed {
            self.retries.succeeded(&Retry::Labels);
        }
    }

    /// Gathers the policies the inputs so far changed, as changed at `now`: objects joining or
    /// leaving a selection one after another set the pace its quiet pause follows, each one an
    /// arrival even when several are seen at once.
    fn gather(&mut self, now: Instant) {
        for (name, change) in self.resolutions.take_changes() {
            match change {
                Change::Membership(count) => self.gathering.arrived(name, now, count),
                Change::Content => self.gathering.changed(name, now),
            }
        }
    }

    /// Writes every policy with changes now, whether or not its changes paused.
    async fn flush_all(&mut self) {
        let mut all = self.gathering.take_all(Instant::now());
        all.extend(self.resolutions.take_dirty());
        self.flush(all).await;
    }

    /// Writes the Binding and status of each policy of `dirty`, each only if it differs.
    async fn flush(&mut self, dirty: impl IntoIterator<Item = String>) {
        let dirty: BTreeSet<String> = dirty.into_iter().collect();
        if !dirty.is_empty() {
            self.sync_status_labels().await;
        }
        let unknown = self.caches.informers.unsynced();
        for name in dirty {
            self.metrics.reconciles.inc();
            let started = Instant::now();
            let (Some(policy), Some(resolved), Some(mut desired)) = (
                self.caches.policies.get(&ObjectRef::new(&name)),
                self.resolutions.policy(&name).map(|s| s.generation),
                self.resolutions.desired_spec(&name),
            ) else {
                self.metrics.queue.finished(started.elapsed(), true);
                continue;
            };
            let existing = self.caches.bindings.get(&ObjectRef::new(&name));
            if let Some(existing) = &existing
                && !unknown.is_empty()
            {
                crate::binding::keep_unknown(&mut desired, &existing.spec, |group, resource| {
                    unknown.iter().any(|gr| gr.group == group && gr.resource == resource)
                });
            }
            let needs_write = existing
                .as_ref()
                .is_none_or(|b| crate::binding::binding_spec_differs(&b.spec, &desired));
            let selected = (
                desired.workload.cluster_scope.len() + desired.workload.namespace_scope.len(),
                desired.destinations.len(),
            );
            let mut write_error = None;
            let mut failed = false;
            let foreign = existing.as_deref().and_then(|b| writes::foreign_binding(&name, b));
            if let Some(foreign) = foreign {
                // Someone else's: left as it is, and not retried until it or the policy changes.
                self.metrics.errors.inc();
                tracing::error!(policy = %name, "{foreign}");
                write_error = Some(foreign);
            } else if needs_write && let Some(too_large) = writes::too_large(&desired) {
                // Not written, and not retried until the selection changes: the Binding as it
                // is stays, and with it what the WECs have.
                self.metrics.errors.inc();
                tracing::error!(policy = %name, "{too_large}");
                write_error = Some(too_large);
            } else if needs_write {
                let written = writes::write_binding(&self.binding_api, &policy, existing.is_some(), desired).await;
                match &written {
                    Ok(()) => {
                        self.metrics.writes.inc();
                        tracing::debug!(policy = %name, objects = selected.0, wecs = selected.1, "Binding written");
                    }
                    Err(err) => write_error = Some(format!("writing Binding: {}", writes::error_message(err))),
                }
                failed |= self.settle(written, Retry::Policy(name.clone()), "writing the Binding") == TRANSIENT;
            }
            let collector_exists = |c: &str| self.caches.collectors.get(&ObjectRef::new(c)).is_some();
            let mut errors = self.resolutions.errors(&name, collector_exists);
            // A cache that cannot be filled: the policy may select objects nobody can see.
            if let Some(state) = self.resolutions.policy(&name) {
                errors.extend(stuck_caches(&unknown, |g, r| state.compiled.may_select(g, r)));
            }
            // What the transport could not deliver (a ManifestWork the ITS refused, a template
            // that failed), as it reports it on the Binding: the policy is where users look.
            errors.extend(
                existing
                    .iter()
                    .filter(|_| write_error.is_none())
                    .filter_map(|b| b.status.as_ref())
                    .flat_map(|s| s.errors.clone()),
            );
            let refused = write_error.is_some();
            let status = writes::desired_status(&policy, resolved, errors, write_error, selected);
            if writes::status_differs(&policy, &status) {
                let written = writes::apply_status(&self.policy_api, &name, &status).await;
                if written.is_ok() {
                    let before = policy
                        .status
                        .as_ref()
                        .map(|s| s.conditions.as_slice())
                        .unwrap_or_default();
                    let told = crate::events::policy_resolution(before, &status.conditions);
                    self.events.publish(&policy.object_ref(&()), told).await;
                }
                failed |= self.settle(written, Retry::Policy(name.clone()), "writing the policy status") == TRANSIENT;
            }
            self.metrics.queue.finished(started.elapsed(), !failed && !refused);
            // A missing finalizer is still to be added: its retry stays.
            if !failed && policy.finalizers().iter().any(|f| f == BINDING_POLICY_FINALIZER) {
                self.retries.succeeded(&Retry::Policy(name));
            }
        }
    }
}

/// What a policy that `may_select` objects of a resource whose WDS cache is not filled (`unknown`)
/// is told while that cache's watch is stuck (a cache filling at start-up is no error).
fn stuck_caches(unknown: &BTreeSet<GroupResource>, may_select: impl Fn(&str, &str) -> bool) -> Vec<String> {
    unknown
        .iter()
        .filter(|gr| may_select(&gr.group, &gr.resource))
        .filter_map(|gr| {
            let stuck = watch_health::stuck_watch(&workload_watch(gr))?;
            Some(format!(
                "the WDS cache of {}/{} cannot be filled ({} failures in a row, the last: {}): the objects of it \
                 this policy selects are not known, and its Binding keeps what it lists of them",
                gr.group, gr.resource, stuck.failures, stuck.last_error
            ))
        })
        .collect()
}

#[cfg(test)]
mod tests;
