//! The binding controller: watches every workload resource of the WDS, the BindingPolicies and
//! the WECs (ManagedClusters in the ITS), keeps each policy's resolution current from those
//! caches, and writes a policy's Binding and status only when they change, coalescing bursts.

mod metrics;
mod state;
mod writes;

use std::time::Duration;

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use ks_shared::api::{Binding, BindingPolicy, StatusCollector};
use ks_shared::cli::retry_until_done;
use ks_shared::names::BINDING_POLICY_FINALIZER;
use ks_shared::ocm::ManagedCluster;
use ks_shared::serve::ReadyGate;
use kube::api::{Api, DynamicObject};
use kube::discovery::ApiResource;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use tokio::sync::mpsc::{self, UnboundedSender};
use tokio_util::sync::CancellationToken;

pub use metrics::Metrics;
pub use state::{Resolutions, StatusRequest};

use crate::binding::{Labels, ObjectIdentity, Wec, WorkloadObject};
use crate::informers::{GroupResource, ResourceFilter, WorkloadEvent, WorkloadInformers};

/// Settings of the binding controller.
#[derive(Clone, Debug)]
pub struct Settings {
    pub filter: ResourceFilter,
    /// Run the transport controller too, on the same caches.
    pub transport: Option<crate::transport::controller::Settings>,
    /// Run the status controller too, on the same caches.
    pub status: Option<crate::status::controller::Settings>,
    /// How long to gather changes before writing Bindings.
    pub debounce: Duration,
}

/// Everything the loop reacts to.
enum Input {
    Policy(String),
    Binding(String),
    Namespace(String),
    Wecs,
    Crds,
    Collectors,
}

/// Feeds a watcher into a cache and turns its events into inputs.
fn cache<K>(
    api: Api<K>,
    inputs: UnboundedSender<Input>,
    to_input: impl Fn(&K) -> Input + Send + 'static,
) -> (Store<K>, impl Stream<Item = ()>)
where
    K: kube::Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
{
    let (store, writer) = reflector::store();
    let stream = reflector::reflector(writer, watcher(api, watcher::Config::default()).default_backoff()).filter_map(
        move |event| {
            let input = match event {
                Ok(watcher::Event::Apply(o) | watcher::Event::Delete(o)) => Some(to_input(&o)),
                Ok(watcher::Event::InitApply(o)) => Some(to_input(&o)),
                _ => None,
            };
            let _ = input.map(|i| inputs.send(i));
            std::future::ready(Some(()))
        },
    );
    (store, stream)
}

/// The caches the loop reads.
struct Caches {
    informers: WorkloadInformers,
    policies: Store<BindingPolicy>,
    bindings: Store<Binding>,
    namespaces: Store<Namespace>,
    clusters: Store<ManagedCluster>,
    crds: Store<CustomResourceDefinition>,
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
fn workload_object(resource: &ApiResource, object: &DynamicObject) -> WorkloadObject {
    WorkloadObject {
        identity: ObjectIdentity {
            group: resource.group.clone(),
            version: resource.version.clone(),
            resource: resource.plural.clone(),
            namespace: object.namespace().unwrap_or_default(),
            name: object.name_any(),
            kind: resource.kind.clone(),
        },
        uid: object.uid().unwrap_or_default(),
        resource_version: object.resource_version().unwrap_or_default(),
        labels: object.labels().clone(),
    }
}

/// Runs the binding controller until `shutdown`; `ready` opens once every cache is filled.
pub async fn run(
    wds: Client,
    its: Client,
    settings: Settings,
    metrics: Metrics,
    ready: ReadyGate,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let (inputs, mut received) = mpsc::unbounded_channel();
    let (workload_events, mut workload_received) = mpsc::unbounded_channel();
    let informers = WorkloadInformers::new(wds.clone(), settings.filter.clone(), workload_events, shutdown.clone());

    let (policies, policy_stream) = cache(Api::all(wds.clone()), inputs.clone(), |p: &BindingPolicy| {
        Input::Policy(p.name_any())
    });
    let (bindings, binding_stream) = cache(Api::all(wds.clone()), inputs.clone(), |b: &Binding| {
        Input::Binding(b.name_any())
    });
    let (namespaces, namespace_stream) = cache(Api::all(wds.clone()), inputs.clone(), |n: &Namespace| {
        Input::Namespace(n.name_any())
    });
    let (clusters, cluster_stream) = cache(Api::all(its.clone()), inputs.clone(), |_: &ManagedCluster| Input::Wecs);
    let (crds, crd_stream) = cache(Api::all(wds.clone()), inputs.clone(), |_: &CustomResourceDefinition| {
        Input::Crds
    });
    let (collectors, collector_stream) = cache(Api::all(wds.clone()), inputs.clone(), |_: &StatusCollector| {
        Input::Collectors
    });
    let streams = futures::stream::select_all([
        policy_stream.boxed(),
        binding_stream.boxed(),
        namespace_stream.boxed(),
        cluster_stream.boxed(),
        crd_stream.boxed(),
        collector_stream.boxed(),
    ]);
    let drive = shutdown.clone();
    tokio::spawn(async move {
        tokio::pin!(streams);
        loop {
            tokio::select! {
                _ = drive.cancelled() => break,
                next = streams.next() => if next.is_none() { break },
            }
        }
    });

    let caches = Caches {
        collectors,
        informers,
        policies,
        bindings,
        namespaces,
        clusters,
        crds,
    };
    let filled = async {
        let _ = futures::join!(
            caches.policies.wait_until_ready(),
            caches.bindings.wait_until_ready(),
            caches.namespaces.wait_until_ready(),
            caches.clusters.wait_until_ready(),
            caches.crds.wait_until_ready(),
            caches.collectors.wait_until_ready(),
        );
        let discovered = retry_until_done("discovering WDS resources", &shutdown, || {
            let (informers, crds) = (caches.informers.clone(), caches.crds.state());
            async move { informers.sync_with_discovery(&crds).await }
        });
        if discovered.await.is_some() {
            caches.informers.wait_synced().await;
        }
    };
    tokio::select! {
        _ = shutdown.cancelled() => return Ok(()),
        _ = filled => {}
    }
    if let Some(transport) = settings.transport.clone() {
        let (wds, its, informers, shutdown) = (wds.clone(), its.clone(), caches.informers.clone(), shutdown.clone());
        tokio::spawn(async move {
            if let Err(err) =
                crate::transport::controller::run(crate::transport::wrap::Ocm, wds, its, informers, transport, shutdown)
                    .await
            {
                tracing::error!(error = format!("{err:#}"), "transport controller stopped");
            }
        });
    }
    if let Some(status) = settings.status.clone() {
        let informers = caches.informers.clone();
        tokio::spawn(crate::status::controller::run(
            wds.clone(),
            its.clone(),
            informers,
            status,
            shutdown.clone(),
        ));
    }
    metrics.informers.set(caches.informers.count() as i64);
    tracing::info!(informers = caches.informers.count(), "workload caches filled");

    let policy_api: Api<BindingPolicy> = Api::all(wds.clone());
    let binding_api: Api<Binding> = Api::all(wds.clone());
    let mut resolutions = Resolutions::default();
    let labelled = labelled_at_start(&caches);
    let mut looper = Loop {
        caches,
        wds: wds.clone(),
        labelled,
        failed: Default::default(),
        resolutions: &mut resolutions,
        policy_api,
        binding_api,
        metrics,
    };
    for policy in looper.caches.policies.state() {
        looper.policy_changed(&policy.name_any()).await;
    }
    looper.flush().await;
    ready.open();

    let mut discovery_due: Option<tokio::time::Instant> = None;
    let mut flush_due: Option<tokio::time::Instant> = None;
    let mut retry_due: Option<tokio::time::Instant> = None;
    let mut retry_pause = RETRY_MIN;
    loop {
        let next_timer = [discovery_due, flush_due, retry_due].into_iter().flatten().min();
        tokio::select! {
            _ = shutdown.cancelled() => return Ok(()),
            Some(event) = workload_received.recv() => looper.workload_event(event),
            Some(input) = received.recv() => match input {
                Input::Policy(name) => looper.policy_changed(&name).await,
                Input::Binding(name) => looper.resolutions.touch(&name),
                Input::Namespace(name) => looper.namespace_changed(&name),
                Input::Wecs => looper.resolutions.set_wecs(&looper.caches.wecs()),
                // Only the policies' errors can change: re-check every policy's status.
                Input::Collectors => looper.resolutions.policy_names().iter().for_each(|n| looper.resolutions.touch(n)),
                // CRD events come in bursts (create, established); look once they settle.
                Input::Crds => discovery_due = discovery_due.or(Some(tokio::time::Instant::now() + Duration::from_millis(100))),
            },
            _ = sleep_until(next_timer) => {
                let now = tokio::time::Instant::now();
                if discovery_due.is_some_and(|t| t <= now) {
                    discovery_due = looper.sync_informers().await.then(|| now + Duration::from_millis(500));
                }
                if flush_due.is_some_and(|t| t <= now) {
                    flush_due = None;
                    looper.flush().await;
                }
                if retry_due.is_some_and(|t| t <= now) {
                    retry_due = None;
                    for name in std::mem::take(&mut looper.failed) {
                        looper.resolutions.touch(&name);
                    }
                }
            }
        }
        if looper.failed.is_empty() {
            retry_pause = RETRY_MIN;
        } else if retry_due.is_none() {
            retry_due = Some(tokio::time::Instant::now() + retry_pause);
            retry_pause = (retry_pause * 2).min(RETRY_MAX);
        }
        if looper.resolutions.has_dirty() && flush_due.is_none() {
            flush_due = Some(tokio::time::Instant::now() + settings.debounce);
        }
        looper
            .metrics
            .queue_depth
            .set(i64::from(looper.resolutions.has_dirty()));
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

/// Success, or the object is gone (nothing left to label).
fn is_gone(result: &kube::Result<()>) -> bool {
    match result {
        Ok(()) => true,
        Err(kube::Error::Api(status)) => status.code == 404,
        Err(_) => false,
    }
}

/// Back-off of failed Binding writes.
const RETRY_MIN: Duration = Duration::from_secs(1);
const RETRY_MAX: Duration = Duration::from_secs(60);

async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

struct Loop<'a> {
    caches: Caches,
    wds: Client,
    /// The status-request labels last applied (or found on objects at start-up).
    labelled: std::collections::BTreeMap<ObjectIdentity, StatusRequest>,
    /// Policies whose Binding write failed: retried after a back-off, not at once.
    failed: std::collections::BTreeSet<String>,
    resolutions: &'a mut Resolutions,
    policy_api: Api<BindingPolicy>,
    binding_api: Api<Binding>,
    metrics: Metrics,
}

impl Loop<'_> {
    fn workload_event(&mut self, event: WorkloadEvent) {
        match event {
            WorkloadEvent::Changed {
                resource,
                namespace,
                name,
            } => self.object_changed(&resource, namespace, &name),
            WorkloadEvent::Listed(resource) => {
                // After a re-list, objects deleted while the watch was down are simply absent.
                let present: Vec<ObjectIdentity> = self
                    .caches
                    .informers
                    .objects_of(&resource)
                    .iter()
                    .filter_map(|o| Some(workload_object(&self.caches.informers.api_resource(&resource)?, o).identity))
                    .collect();
                self.resolutions.retain_objects(|id| {
                    !(id.group == resource.group && id.resource == resource.resource)
                        || present.iter().any(|p| p.namespace == id.namespace && p.name == id.name)
                });
                for id in present {
                    self.object_changed(&resource, Some(id.namespace).filter(|n| !n.is_empty()), &id.name);
                }
            }
            WorkloadEvent::Stopped(resource) => {
                self.resolutions
                    .retain_objects(|id| !(id.group == resource.group && id.resource == resource.resource));
            }
        }
    }

    fn object_changed(&mut self, resource: &GroupResource, namespace: Option<String>, name: &str) {
        let cached = self.caches.informers.get(resource, namespace.as_deref(), name);
        let ar = self.caches.informers.api_resource(resource);
        match (cached, ar) {
            (Some(object), Some(ar)) => {
                let object = workload_object(&ar, &object);
                let labels = self.caches.namespace_labels(&object.identity.namespace);
                self.resolutions
                    .set_object(&object.identity.clone(), Some((&object, labels.as_ref())));
            }
            _ => {
                let identity = ObjectIdentity {
                    group: resource.group.clone(),
                    resource: resource.resource.clone(),
                    namespace: namespace.unwrap_or_default(),
                    name: name.to_string(),
                    ..Default::default()
                };
                self.resolutions.set_object(&identity, None);
            }
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
                .set_object(&object.identity.clone(), Some((&object, labels.as_ref())));
        }
    }

    async fn policy_changed(&mut self, name: &str) {
        let Some(policy) = self.caches.policies.get(&ObjectRef::new(name)) else {
            self.resolutions.remove_policy(name);
            return;
        };
        let has_finalizer = policy.finalizers().iter().any(|f| f == BINDING_POLICY_FINALIZER);
        if policy.metadata.deletion_timestamp.is_some() {
            // The Binding goes with the policy through its ownerReference.
            self.resolutions.remove_policy(name);
            if has_finalizer {
                self.write_result(
                    crate::finalizer::set(&self.policy_api, &*policy, BINDING_POLICY_FINALIZER, false).await,
                    name,
                );
            }
            return;
        }
        if !has_finalizer {
            self.write_result(
                crate::finalizer::set(&self.policy_api, &*policy, BINDING_POLICY_FINALIZER, true).await,
                name,
            );
        }
        let known = self.resolutions.policy(name).is_some();
        let generation_seen = policy.status.as_ref().map(|s| s.observed_generation) == policy.metadata.generation;
        if known && generation_seen {
            // A status or metadata update: the spec, and so the resolution, is unchanged.
            return;
        }
        let objects = self.caches.objects();
        let wecs = self.caches.wecs();
        self.resolutions
            .set_policy(name, &policy.spec, objects.iter().map(|(o, l)| (o, l.as_ref())), &wecs);
    }

    /// Re-syncs the informer set; true when an established CRD is not served yet (discovery lags).
    async fn sync_informers(&mut self) -> bool {
        let crds = self.caches.crds.state();
        if let Err(err) = self.caches.informers.sync_with_discovery(&crds).await {
            tracing::warn!(error = %err, "discovery failed; retrying");
            return true;
        }
        self.metrics.informers.set(self.caches.informers.count() as i64);
        false
    }

    fn write_result(&self, result: kube::Result<()>, policy: &str) {
        if let Err(err) = result {
            self.metrics.errors.inc();
            tracing::warn!(policy, error = %err, "write failed; will retry on the next change");
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
        for (id, request) in changes {
            let result = writes::apply_status_request_labels(&self.wds, &id, request).await;
            if let (false, Err(err)) = (is_gone(&result), &result) {
                self.metrics.errors.inc();
                tracing::warn!(object = %id.name, error = %err, "status-request labels; will retry on the next change");
            } else if request == StatusRequest::default() {
                // Applied, or the object is gone and needs no label.
                self.labelled.remove(&id);
            } else {
                self.labelled.insert(id, request);
            }
        }
    }

    /// Writes every dirty policy's Binding and status, each only if it differs.
    async fn flush(&mut self) {
        let dirty = self.resolutions.take_dirty();
        if !dirty.is_empty() {
            self.sync_status_labels().await;
        }
        for name in dirty {
            self.metrics.reconciles.inc();
            let (Some(policy), Some(desired)) = (
                self.caches.policies.get(&ObjectRef::new(&name)),
                self.resolutions.desired_spec(&name),
            ) else {
                continue;
            };
            let existing = self.caches.bindings.get(&ObjectRef::new(&name));
            let needs_write = existing
                .as_ref()
                .is_none_or(|b| crate::binding::binding_spec_differs(&b.spec, &desired));
            let selected = (
                desired.workload.cluster_scope.len() + desired.workload.namespace_scope.len(),
                desired.destinations.len(),
            );
            let mut write_error = None;
            if needs_write {
                match writes::write_binding(&self.binding_api, &policy, existing.as_deref(), desired).await {
                    Ok(()) => {
                        self.metrics.binding_writes.inc();
                    }
                    Err(err) => {
                        self.metrics.errors.inc();
                        write_error = Some(format!("writing Binding: {}", writes::error_message(&err)));
                        self.failed.insert(name.clone());
                    }
                }
            }
            let collector_exists = |c: &str| self.caches.collectors.get(&ObjectRef::new(c)).is_some();
            let errors = self.resolutions.errors(&name, collector_exists);
            let status = writes::desired_status(&policy, errors, write_error, selected);
            if writes::status_differs(&policy, &status) {
                self.write_result(writes::apply_status(&self.policy_api, &name, &status).await, &name);
            }
        }
    }
}
