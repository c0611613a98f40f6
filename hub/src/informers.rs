//! One informer per listable resource of the WDS, at its preferred version, started and stopped
//! as CRDs come and go, without a restart. Each informer keeps a cache and reports every change
//! as a [`WorkloadEvent`]; nothing on the hot path reads the API server. A cache that is not
//! filled yet is never read as empty: lookups see an informer only once it has listed, a new
//! version's informer replaces the old one only then, and [`WorkloadInformers::unsynced`] names
//! the resources whose objects are not known (so nothing is removed from a WEC for their sake).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use futures::StreamExt;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService;
use kube::api::Api;
use kube::discovery::{ApiCapabilities, ApiResource, Discovery, Scope, verbs};
use kube::runtime::reflector::store::Writer;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};
use tokio_util::sync::CancellationToken;

use ks_shared::names::field_manager;
use ks_shared::runtime::watch_health::{self, WatchRole};
pub use ks_shared::workload::{GroupResource, WorkloadRef};

mod cached;
pub use cached::CachedObject;

use ks_shared::names::LAST_APPLIED_ANNOTATION as LAST_APPLIED;

/// A change seen by an informer.
#[derive(Clone, Debug)]
pub enum WorkloadEvent {
    /// The object was added, changed or deleted; look it up in the cache.
    Changed(WorkloadRef),
    /// The cache was (re)filled from a full list: anything not in it is gone.
    Listed(GroupResource),
    /// The informer was stopped (its CRD went away): everything of this resource is gone.
    Stopped(GroupResource),
    /// Its watch is stuck ([`watch_health::STUCK_AFTER`] failures in a row): until it lists again,
    /// what the cache holds of this resource may be missing or old.
    Stuck(GroupResource),
}

/// Groups never watched: cluster plumbing and KubeStellar's own API.
const EXCLUDED_GROUPS: [&str; 5] = [
    "flowcontrol.apiserver.k8s.io",
    "discovery.k8s.io",
    "apiregistration.k8s.io",
    "coordination.k8s.io",
    "control.kubestellar.io",
];
/// Resources never watched: high churn, node-bound or KubeStellar's reporting objects.
const EXCLUDED_RESOURCES: [(&str, &str); 7] = [
    ("", "events"),
    ("events.k8s.io", "events"),
    ("", "nodes"),
    ("storage.k8s.io", "csistoragecapacities"),
    ("storage.k8s.io", "csinodes"),
    ("", "endpoints"),
    ("control.kubestellar.io", "workstatuses"),
];

/// Which resources to watch: everything listable and watchable, minus the exclusions, limited
/// to an allow-list of groups when one is given (`--api-groups`; `""` is the core group).
#[derive(Clone, Debug, Default)]
pub struct ResourceFilter {
    pub allowed_groups: Option<BTreeSet<String>>,
}

impl ResourceFilter {
    /// Parses `--api-groups`: comma-separated, empty means every group. A non-empty list always
    /// includes `apiextensions.k8s.io` so CRDs can be followed.
    pub fn from_api_groups(list: &str) -> Self {
        if list.trim().is_empty() {
            return ResourceFilter::default();
        }
        let mut groups: BTreeSet<String> = list.split(',').map(|g| g.trim().to_string()).collect();
        groups.insert("apiextensions.k8s.io".into());
        ResourceFilter {
            allowed_groups: Some(groups),
        }
    }

    pub fn watches(&self, group: &str, resource: &str, caps: &ApiCapabilities) -> bool {
        caps.supports_operation(verbs::LIST) && caps.supports_operation(verbs::WATCH) && self.selects(group, resource)
    }

    /// Whether a resource is watched when it can be listed and watched.
    pub fn selects(&self, group: &str, resource: &str) -> bool {
        !resource.contains('/')
            && !EXCLUDED_GROUPS.contains(&group)
            && !EXCLUDED_RESOURCES.contains(&(group, resource))
            && self.allowed_groups.as_ref().is_none_or(|g| g.contains(group))
    }
}

/// How the WDS serves a resource.
#[derive(Clone, Debug)]
pub struct Served {
    /// The version and kind its cache holds its objects as.
    pub resource: ApiResource,
    /// Whether its objects' `.status` is written through a `status` subresource. Without one (a
    /// CRD that declares none) `.status` is part of the object: a write of it raises the
    /// object's generation, and a server-side apply of it could create the object.
    pub status_subresource: bool,
}

/// Whether discovery lists a `status` subresource among `caps`.
fn has_status_subresource(caps: &ApiCapabilities) -> bool {
    caps.subresources.iter().any(|(sub, _)| sub.plural == "status")
}

/// One informer: its cache and how to stop it.
struct Informer {
    resource: ApiResource,
    /// See [`Served::status_subresource`]; follows discovery (a CRD may gain or lose one
    /// without a new version).
    status_subresource: bool,
    namespaced: bool,
    store: Store<CachedObject>,
    stop: CancellationToken,
    /// Tells this informer from a later one of the same resource.
    id: u64,
}

/// The informers, by the state of their caches.
#[derive(Default)]
struct Informers {
    /// Filled: what lookups see.
    serving: BTreeMap<GroupResource, Informer>,
    /// Filling: a new resource, or a resource at a new version whose informer at the old version
    /// serves until this one is filled (an empty cache would read as every object deleted).
    filling: BTreeMap<GroupResource, Informer>,
    /// Resources that discovery does not list (yet) although their CRD is established or their
    /// aggregated API server is only down: unknown, not gone.
    undiscovered: BTreeSet<GroupResource>,
    next_id: u64,
}

impl Informers {
    fn unsynced(&self) -> BTreeSet<GroupResource> {
        let filling = self.filling.keys().filter(|gr| !self.serving.contains_key(*gr));
        filling.chain(&self.undiscovered).cloned().collect()
    }
}

/// The resource label of the informers' metrics, e.g. `apps/deployments`.
/// The name a workload informer's watch is followed by ([`watch_health`]): `workload:<group>/<resource>`.
pub fn workload_watch(gr: &GroupResource) -> String {
    format!("workload:{}/{}", gr.group, gr.resource)
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResourceLabel {
    pub resource: String,
}

/// What the informers count.
#[derive(Clone, Debug, Default)]
pub struct InformerMetrics {
    /// Informers serving (their cache filled).
    pub serving: Gauge,
    /// Failed lists and watches, by resource.
    pub watch_errors: Family<ResourceLabel, Counter>,
    /// Resources to watch whose cache is not filled.
    pub unsynced: Gauge,
}

impl InformerMetrics {
    /// Registers them as `kubestellar_workload_*`: they belong to no one controller.
    pub fn register(&self, registry: &mut Registry) {
        let sub = registry.sub_registry_with_prefix("kubestellar_workload");
        sub.register(
            "informers",
            "Workload informers serving on the WDS",
            self.serving.clone(),
        );
        sub.register(
            "watch_errors",
            "Failed lists and watches of a workload resource of the WDS (each retried with back-off)",
            self.watch_errors.clone(),
        );
        sub.register(
            "unsynced_resources",
            "Workload resources whose cache is not filled (their objects are kept as the Bindings list them)",
            self.unsynced.clone(),
        );
    }
}

/// The set of informers over the WDS.
#[derive(Clone)]
pub struct WorkloadInformers {
    client: Client,
    filter: ResourceFilter,
    informers: Arc<Mutex<Informers>>,
    /// Bumped whenever a cache is filled.
    filled: Arc<tokio::sync::watch::Sender<u64>>,
    events: UnboundedSender<WorkloadEvent>,
    shutdown: CancellationToken,
    first_seen: FirstSeen,
    metrics: InformerMetrics,
    /// Who follows changes of status only (which leave Bindings as they are).
    status_changes: Arc<Mutex<Option<UnboundedSender<WorkloadRef>>>>,
}

/// When each object generation (by UID) was first seen changing: where a rollout's trace starts.
#[derive(Clone, Default)]
pub struct FirstSeen(Arc<Mutex<HashMap<(String, i64), SystemTime>>>);

/// Entries older than this are dropped (the rollout has long been packaged).
const FIRST_SEEN_KEPT: Duration = Duration::from_secs(600);

impl FirstSeen {
    fn note(&self, object: &CachedObject) {
        let (Some(uid), Some(generation)) = (object.uid(), object.metadata.generation) else {
            return;
        };
        let now = SystemTime::now();
        let mut seen = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        seen.entry((uid, generation)).or_insert(now);
        if seen.len() > 1024 {
            seen.retain(|_, at| now.duration_since(*at).unwrap_or_default() < FIRST_SEEN_KEPT);
        }
    }

    /// When this generation of the object was first seen, if it changed while we watched.
    pub fn get(&self, uid: &str, generation: i64) -> Option<SystemTime> {
        let seen = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        seen.get(&(uid.to_string(), generation)).copied()
    }
}

impl WorkloadInformers {
    pub fn new(
        client: Client,
        filter: ResourceFilter,
        events: UnboundedSender<WorkloadEvent>,
        metrics: InformerMetrics,
        shutdown: CancellationToken,
    ) -> Self {
        WorkloadInformers {
            client,
            filter,
            informers: Arc::default(),
            filled: Arc::new(tokio::sync::watch::Sender::new(0)),
            events,
            shutdown,
            first_seen: FirstSeen::default(),
            metrics,
            status_changes: Arc::default(),
        }
    }

    /// The objects whose status alone changes from now on, one at each change: the status
    /// controller's, which writes a returned status that someone wrote over back at once.
    pub fn status_changes(&self) -> UnboundedReceiver<WorkloadRef> {
        let (sender, receiver) = tokio::sync::mpsc::unbounded_channel();
        *self.status_changes.lock().unwrap_or_else(PoisonError::into_inner) = Some(sender);
        receiver
    }

    fn status_changed(&self, object: WorkloadRef) {
        if let Some(follower) = &*self.status_changes.lock().unwrap_or_else(PoisonError::into_inner) {
            let _ = follower.send(object);
        }
    }

    /// When object generations were first seen.
    pub fn first_seen(&self) -> &FirstSeen {
        &self.first_seen
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Informers> {
        self.informers.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// How many informers serve.
    pub fn count(&self) -> usize {
        self.lock().serving.len()
    }

    /// Sets the gauges from `informers` while their lock is held: computed outside it, an
    /// older count could be set after a newer one and stay (a CRD deleted while its informer
    /// relisted left the gauge one too high).
    fn update_gauges(&self, informers: &Informers) {
        self.metrics.serving.set(informers.serving.len() as i64);
        self.metrics.unsynced.set(informers.unsynced().len() as i64);
    }

    /// The resources to watch whose objects are not known: their informer is still filling its
    /// cache (or cannot: its LIST fails), or discovery does not list them yet. Their objects
    /// must not be taken for deleted.
    pub fn unsynced(&self) -> BTreeSet<GroupResource> {
        self.lock().unsynced()
    }

    /// The cached object.
    pub fn get(&self, object: &WorkloadRef) -> Option<Arc<CachedObject>> {
        let informers = self.lock();
        let informer = informers.serving.get(&object.resource)?;
        let key = ObjectRef::new_with(&object.name, informer.resource.clone());
        let key = match object.namespace() {
            Some(namespace) if informer.namespaced => key.within(namespace),
            _ => key,
        };
        informer.store.get(&key)
    }

    /// How a group/resource is served: its version and kind, and where its status is written.
    pub fn served(&self, resource: &GroupResource) -> Option<Served> {
        self.lock().serving.get(resource).map(|i| Served {
            resource: i.resource.clone(),
            status_subresource: i.status_subresource,
        })
    }

    /// Every cached object of every resource, with its group/resource.
    pub fn all_objects(&self) -> Vec<(GroupResource, ApiResource, Arc<CachedObject>)> {
        let informers = self.lock();
        informers
            .serving
            .iter()
            .flat_map(|(gr, informer)| {
                informer
                    .store
                    .state()
                    .into_iter()
                    .map(move |o| (gr.clone(), informer.resource.clone(), o))
            })
            .collect()
    }

    /// Every cached object of one resource.
    pub fn objects_of(&self, resource: &GroupResource) -> Vec<Arc<CachedObject>> {
        self.lock()
            .serving
            .get(resource)
            .map(|i| i.store.state())
            .unwrap_or_default()
    }

    /// Serves `objects` of `gr` (served as `resource`) as a filled informer would: for tests of
    /// the controllers that read the cache.
    #[cfg(test)]
    pub fn serve(&self, gr: GroupResource, resource: ApiResource, namespaced: bool, objects: Vec<CachedObject>) {
        let mut writer = Writer::new(resource.clone());
        writer.apply_watcher_event(&watcher::Event::Init);
        for object in objects {
            writer.apply_watcher_event(&watcher::Event::InitApply(object));
        }
        writer.apply_watcher_event(&watcher::Event::InitDone);
        let informer = Informer {
            resource,
            status_subresource: true,
            namespaced,
            store: writer.as_reader(),
            stop: CancellationToken::new(),
            id: 0,
        };
        self.lock().serving.insert(gr, informer);
    }

    /// Brings the set of informers in line with discovery and the established CRDs: starts the
    /// missing ones, replaces those whose version changed (the old one serves until the new one
    /// is filled), stops those whose resource is gone. `crds` are the CRDs currently known.
    /// Returns whether discovery lists every established CRD's resource (if not, call again).
    pub async fn sync_with_discovery(&self, crds: &[Arc<CustomResourceDefinition>]) -> Result<bool, kube::Error> {
        let discovery = Discovery::new(self.client.clone()).run_aggregated().await?;
        let unavailable = match Api::<APIService>::all(self.client.clone())
            .list(&Default::default())
            .await
        {
            Ok(services) => unavailable_aggregated(&services.items),
            Err(err) => {
                tracing::debug!(error = %err, "listing APIServices failed; aggregated APIs missing from discovery count as gone");
                BTreeSet::new()
            }
        };
        let served_crds: BTreeSet<GroupResource> = crds
            .iter()
            .filter(|crd| crd.metadata.deletion_timestamp.is_none() && established(crd))
            .map(|crd| GroupResource {
                group: crd.spec.group.clone(),
                resource: crd.spec.names.plural.clone(),
            })
            .filter(|gr| self.filter.selects(&gr.group, &gr.resource))
            .collect();
        let mut wanted = BTreeMap::new();
        for group in discovery.groups() {
            for (resource, caps) in group.recommended_resources() {
                let gr = GroupResource {
                    group: resource.group.clone(),
                    resource: resource.plural.clone(),
                };
                // A CRD-backed resource is watched only while its CRD exists and is established:
                // discovery can lag behind a CRD's deletion.
                let is_crd_resource = crds
                    .iter()
                    .any(|c| c.spec.group == gr.group && c.spec.names.plural == gr.resource);
                if self.filter.watches(&gr.group, &gr.resource, &caps)
                    && (!is_crd_resource || served_crds.contains(&gr))
                {
                    wanted.insert(gr, (resource, caps));
                }
            }
        }
        let mut informers = self.lock();
        // Also unknown rather than gone: what an aggregated API server that is down served.
        let behind_unavailable = informers
            .serving
            .iter()
            .chain(&informers.filling)
            .filter(|(_, i)| unavailable.contains(&(i.resource.group.clone(), i.resource.version.clone())))
            .map(|(gr, _)| gr.clone());
        let undiscovered: BTreeSet<GroupResource> = served_crds
            .into_iter()
            .chain(behind_unavailable)
            .filter(|gr| !wanted.contains_key(gr))
            .collect();
        // Gone: neither discovered nor an established CRD that discovery has not caught up with.
        let gone: Vec<GroupResource> = informers
            .serving
            .keys()
            .chain(informers.filling.keys())
            .filter(|gr| !wanted.contains_key(*gr) && !undiscovered.contains(*gr))
            .cloned()
            .collect();
        for gr in gone {
            if let Some(filling) = informers.filling.remove(&gr) {
                filling.stop.cancel();
            }
            if let Some(serving) = informers.serving.remove(&gr) {
                serving.stop.cancel();
                tracing::info!(group = %gr.group, resource = %gr.resource, "stopped informer");
                let _ = self.events.send(WorkloadEvent::Stopped(gr));
            }
        }
        for (gr, (resource, caps)) in wanted {
            let status_subresource = has_status_subresource(&caps);
            let state = &mut *informers;
            for informer in [state.serving.get_mut(&gr), state.filling.get_mut(&gr)]
                .into_iter()
                .flatten()
            {
                informer.status_subresource = status_subresource;
            }
            let at = |i: Option<&Informer>| i.is_some_and(|i| i.resource.version == resource.version);
            if at(informers.filling.get(&gr)) {
                continue;
            }
            if let Some(outdated) = informers.filling.remove(&gr) {
                outdated.stop.cancel();
            }
            if at(informers.serving.get(&gr)) {
                continue;
            }
            informers.next_id += 1;
            let served = Served {
                resource,
                status_subresource,
            };
            let informer = self.start(gr.clone(), served, caps.scope == Scope::Namespaced, informers.next_id);
            tracing::info!(group = %gr.group, resource = %gr.resource, version = %informer.resource.version, "started informer");
            informers.filling.insert(gr, informer);
        }
        // Said once: discovery is asked again every 500 ms while it lasts.
        for gr in undiscovered.difference(&informers.undiscovered) {
            tracing::warn!(group = %gr.group, resource = %gr.resource, "not in discovery, but its CRD is established or its API server only down; its objects are kept as they were");
        }
        let complete = undiscovered.is_empty();
        informers.undiscovered = undiscovered;
        self.update_gauges(&informers);
        Ok(complete)
    }

    fn start(&self, gr: GroupResource, served: Served, namespaced: bool, id: u64) -> Informer {
        let Served {
            resource,
            status_subresource,
        } = served;
        let api: Api<CachedObject> = Api::all_with(self.client.clone(), &resource);
        let mut writer = Writer::new(resource.clone());
        let store = writer.as_reader();
        let stop = self.shutdown.child_token();
        let (events, token, first_seen) = (self.events.clone(), stop.clone(), self.first_seen.clone());
        let this = self.clone();
        let resource_label = ResourceLabel {
            resource: format!("{}/{}", gr.group, gr.resource),
        };
        let watched = watcher(api, watcher::Config::default()).backoff(ks_shared::runtime::WatchBackoff::default());
        let watch = workload_watch(&gr);
        let stream = watch_health::observe(watch.clone(), WatchRole::OneOfMany, watched).modify(trim);
        let errors = self.metrics.watch_errors.get_or_create(&resource_label).clone();
        // What the cache holds before an event: a change of status only keeps its content version.
        let (cached, served_as) = (store.clone(), resource.clone());
        tokio::spawn(async move {
            tokio::pin!(stream);
            let mut stuck = false;
            loop {
                let event = tokio::select! {
                    _ = token.cancelled() => break,
                    event = stream.next() => event,
                };
                let Some(event) = event else { break };
                let mut event = match event {
                    Ok(event) => {
                        stuck = false;
                        event
                    }
                    Err(err) => {
                        errors.inc();
                        tracing::warn!(group = %gr.group, resource = %gr.resource, error = %err, "listing or watching failed; retrying");
                        if !stuck && watch_health::stuck_watch(&watch).is_some() {
                            stuck = true;
                            let _ = events.send(WorkloadEvent::Stuck(gr.clone()));
                        }
                        continue;
                    }
                };
                let status_only = match &mut event {
                    watcher::Event::Apply(object) | watcher::Event::InitApply(object) => cached
                        .get(&ObjectRef::from_obj_with(object, served_as.clone()))
                        .is_some_and(|before| object.follow(&before)),
                    _ => false,
                };
                writer.apply_watcher_event(&event);
                let reference = |o: &CachedObject| WorkloadRef {
                    resource: gr.clone(),
                    namespace: o.namespace(),
                    name: o.name_any(),
                };
                // Nobody may follow the events (a hub without the binding controller): the
                // cache is kept all the same, until `stop`.
                let _ = match &event {
                    watcher::Event::Apply(o) => {
                        first_seen.note(o);
                        if status_only {
                            this.status_changed(reference(o));
                        }
                        events.send(WorkloadEvent::Changed(reference(o)))
                    }
                    watcher::Event::Delete(o) => events.send(WorkloadEvent::Changed(reference(o))),
                    watcher::Event::InitDone => {
                        this.filled(&gr, id);
                        events.send(WorkloadEvent::Listed(gr.clone()))
                    }
                    watcher::Event::Init | watcher::Event::InitApply(_) => Ok(()),
                };
            }
        });
        Informer {
            resource,
            status_subresource,
            namespaced,
            store,
            stop,
            id,
        }
    }

    /// Informer `id` of `gr` has filled its cache: if it was filling, it serves from now on, in
    /// place of the one at the old version.
    fn filled(&self, gr: &GroupResource, id: u64) {
        let mut informers = self.lock();
        if informers.filling.get(gr).is_some_and(|i| i.id == id) {
            let Some(informer) = informers.filling.remove(gr) else {
                return;
            };
            tracing::info!(group = %gr.group, resource = %gr.resource, version = %informer.resource.version, "informer serving");
            if let Some(replaced) = informers.serving.insert(gr.clone(), informer) {
                replaced.stop.cancel();
            }
        }
        self.update_gauges(&informers);
        drop(informers);
        self.filled.send_modify(|n| *n += 1);
    }

    /// Waits until no informer is filling its cache, at most `deadline`; the resources still
    /// unsynced then.
    pub async fn wait_synced(&self, deadline: Duration) -> BTreeSet<GroupResource> {
        let mut filled = self.filled.subscribe();
        let all_filled = async {
            while !self.lock().filling.is_empty() {
                if filled.changed().await.is_err() {
                    break;
                }
            }
        };
        let _ = tokio::time::timeout(deadline, all_filled).await;
        self.unsynced()
    }
}

/// What the cache keeps of a workload object's metadata. Of `managedFields`, our status
/// writer's entries only, which tell whether the object has a `.status` of ours to clear
/// (`status::plan::owns_status`): everyone else's (kubectl's, the WDS's controllers') were most
/// of a small object's cached size. Not kubectl's last-applied configuration, a copy of the
/// object that no WEC gets (`transforms::prepare_for_wec`); an empty `annotations` stays, as
/// it is delivered.
fn trim(object: &mut CachedObject) {
    if let Some(entries) = &mut object.metadata.managed_fields {
        entries.retain(|entry| entry.manager.as_deref() == Some(field_manager::STATUS));
    }
    if let Some(annotations) = &mut object.metadata.annotations {
        annotations.remove(LAST_APPLIED);
    }
}

/// The (group, version)s an aggregated API server serves (an APIService with a service) that
/// is not available now: discovery leaves them out while their server is down, which deletes
/// nothing.
fn unavailable_aggregated(services: &[APIService]) -> BTreeSet<(String, String)> {
    services
        .iter()
        .filter_map(|service| {
            let spec = service.spec.as_ref()?;
            spec.service.as_ref()?;
            let available = service
                .status
                .iter()
                .flat_map(|s| s.conditions.iter().flatten())
                .any(|c| c.type_ == "Available" && c.status == "True");
            (!available).then(|| {
                (
                    spec.group.clone().unwrap_or_default(),
                    spec.version.clone().unwrap_or_default(),
                )
            })
        })
        .collect()
}

fn established(crd: &CustomResourceDefinition) -> bool {
    crd.status
        .iter()
        .flat_map(|s| s.conditions.iter().flatten())
        .any(|c| c.type_ == "Established" && c.status == "True")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caps(verbs: &[&str]) -> ApiCapabilities {
        ApiCapabilities {
            scope: Scope::Namespaced,
            subresources: vec![],
            operations: verbs.iter().map(|v| v.to_string()).collect(),
        }
    }

    #[test]
    fn only_aggregated_apis_that_are_down_count_as_unavailable() {
        let service = |name: &str, remote: bool, available: &str| -> APIService {
            let (version, group) = name.split_once('.').unwrap();
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": name},
                "spec": {"group": group, "version": version, "groupPriorityMinimum": 100, "versionPriority": 10,
                         "service": remote.then(|| serde_json::json!({"namespace": "ns", "name": "api"}))},
                "status": {"conditions": [{"type": "Available", "status": available}]},
            }))
            .unwrap()
        };
        let services = [
            service("v1.down.example.com", true, "False"),
            service("v1beta1.up.example.com", true, "True"),
            // Served by the apiserver itself (built-in groups and CRDs): discovery is its own.
            service("v1.local.example.com", false, "False"),
        ];
        assert_eq!(
            unavailable_aggregated(&services),
            BTreeSet::from([("down.example.com".to_string(), "v1".to_string())])
        );
    }

    #[test]
    fn the_cache_keeps_neither_others_managed_fields_nor_the_last_applied_copy() {
        let mut object: CachedObject = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "cm", "annotations": {LAST_APPLIED: "{\"data\":{}}"},
                         "managedFields": [{"manager": "kubectl-client-side-apply", "operation": "Update"},
                                           {"manager": field_manager::STATUS, "operation": "Apply"}]},
            "data": {"k": "v"}
        }))
        .unwrap();
        trim(&mut object);
        let kept = object.to_value().unwrap();
        assert_eq!(
            kept["metadata"]["annotations"],
            serde_json::json!({}),
            "delivered as before"
        );
        assert_eq!(kept["metadata"]["managedFields"][0]["manager"], field_manager::STATUS);
        assert_eq!(kept["metadata"]["managedFields"].as_array().unwrap().len(), 1);
        assert_eq!(kept["data"], serde_json::json!({"k": "v"}));
    }

    #[test]
    fn excludes_plumbing_and_unlistable_resources() {
        let filter = ResourceFilter::default();
        let full = caps(&["list", "watch", "get"]);
        assert!(filter.watches("apps", "deployments", &full));
        assert!(filter.watches("", "configmaps", &full));
        assert!(!filter.watches("", "events", &full));
        assert!(!filter.watches("events.k8s.io", "events", &full));
        assert!(!filter.watches("coordination.k8s.io", "leases", &full));
        assert!(!filter.watches("control.kubestellar.io", "bindingpolicies", &full));
        assert!(!filter.watches("apps", "deployments", &caps(&["list"])));
        assert!(!filter.watches("apps", "deployments/status", &full));
    }

    #[test]
    fn api_groups_allow_list() {
        let full = caps(&["list", "watch"]);
        let core_and_apps = ResourceFilter::from_api_groups(",apps");
        assert!(core_and_apps.watches("", "configmaps", &full));
        assert!(core_and_apps.watches("apps", "deployments", &full));
        assert!(core_and_apps.watches("apiextensions.k8s.io", "customresourcedefinitions", &full));
        assert!(!core_and_apps.watches("batch", "jobs", &full));
        assert!(ResourceFilter::from_api_groups(" ").watches("batch", "jobs", &full));
    }
}
