//! The transport controller: each Binding becomes ManifestWorks in the mailbox namespaces of its
//! WECs, holding its objects (read from the binding controller's caches, never fetched) after
//! the built-in transforms and CustomTransforms, sharded stably, written only when they change,
//! and removed from every mailbox (found by label) when no longer wanted.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use ks_shared::api::{Binding, BindingPolicy, CustomTransform, CustomTransformStatus};
use ks_shared::names::{
    CUSTOMIZATION_PROPERTIES_NAMESPACE, EXPAND_TEMPLATES_ANNOTATION, ORIGIN_BINDING_LABEL, ORIGIN_WDS_LABEL,
    TRANSPORT_FINALIZER, WDS_GENERATION_ANNOTATION, field_manager,
};
use ks_shared::runtime::{Backoff, Failure, failure};
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::Plugin;
use super::metrics::Metrics;
use super::sharding::{self, Limits};
use super::transforms::prepare_for_wec;
use super::wrap::{Delivery, Origin, work_name};
use super::{jsonpath, moves, propagation, template, trace, wrap};
use crate::informers::{GroupResource, WorkloadInformers, WorkloadRef};

/// Settings of the transport controller.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Goes into ManifestWork names and labels: unique per ITS.
    pub wds_name: String,
    pub limits: Limits,
    pub metrics: Metrics,
}

/// Wrapped objects by (mailbox, name).
type Works<P> = BTreeMap<(String, String), <P as Plugin>::Wrapped>;

/// How many ManifestWork writes or deletes of one Binding are in flight at once.
const WRITE_CONCURRENCY: usize = 8;
/// The first and the longest pause before a failed Binding is tried again.
const RETRY_MIN: Duration = Duration::from_secs(1);
const RETRY_MAX: Duration = Duration::from_secs(60);

/// What to reconcile.
enum Input {
    Binding(String),
    /// CustomTransforms changed, or a cache was (re-)listed: every Binding may render
    /// differently, or its inputs changed unseen while a watch was down.
    All,
    /// A WEC's template properties may have changed: its Bindings may render differently.
    Cluster(String),
}

/// A cache of `api`, reporting each change as `to` says, and each completed (re-)list as
/// [`Input::All`]: the cache is swapped in only then, and deletions missed while the watch was
/// down show only as absences.
fn watch_into<K>(
    api: Api<K>,
    config: watcher::Config,
    inputs: mpsc::UnboundedSender<Input>,
    to: fn(&K) -> Option<Input>,
) -> Store<K>
where
    K: Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
{
    let (store, writer) = reflector::store();
    let stream = reflector::reflector(writer, watcher(api, config).default_backoff());
    tokio::spawn(async move {
        tokio::pin!(stream);
        while let Some(event) = stream.next().await {
            let input = match event {
                Ok(watcher::Event::Apply(o) | watcher::Event::Delete(o)) => to(&o),
                Ok(watcher::Event::InitDone) => Some(Input::All),
                Ok(watcher::Event::Init | watcher::Event::InitApply(_)) => None,
                Err(err) => {
                    tracing::warn!(kind = %K::kind(&()), error = %err, "transport watch failed; retrying");
                    None
                }
            };
            if let Some(input) = input
                && inputs.send(input).is_err()
            {
                break;
            }
        }
    });
    store
}

/// Runs the transport through `plugin` until `shutdown`. `informers` are the binding
/// controller's, already filled.
pub async fn run<P: Plugin>(
    plugin: P,
    wds: Client,
    its: Client,
    informers: WorkloadInformers,
    settings: Settings,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let (inputs, mut received) = mpsc::unbounded_channel();
    let bindings = watch_into(
        Api::<Binding>::all(wds.clone()),
        watcher::Config::default(),
        inputs.clone(),
        |b| Some(Input::Binding(b.name_any())),
    );
    let ours = format!("{ORIGIN_WDS_LABEL}={}", settings.wds_name);
    let works = watch_into(
        Api::<P::Wrapped>::all(its.clone()),
        watcher::Config::default().labels(&ours),
        inputs.clone(),
        |w| w.labels().get(ORIGIN_BINDING_LABEL).map(|b| Input::Binding(b.clone())),
    );
    // A policy's propagation status is written once its status exists (the binding controller
    // writes it right after the Binding), and again when someone else changed it.
    let policies = watch_into(
        Api::<BindingPolicy>::all(wds.clone()),
        watcher::Config::default(),
        inputs.clone(),
        |p| Some(Input::Binding(p.name_any())),
    );
    let transforms = watch_into(
        Api::<CustomTransform>::all(wds.clone()),
        watcher::Config::default(),
        inputs.clone(),
        |_| Some(Input::All),
    );
    let clusters = watch_into(
        Api::<P::Inventory>::all(its.clone()),
        watcher::Config::default(),
        inputs.clone(),
        |c| Some(Input::Cluster(c.name_any())),
    );
    let customizations = watch_into(
        Api::<ConfigMap>::namespaced(its.clone(), CUSTOMIZATION_PROPERTIES_NAMESPACE),
        watcher::Config::default(),
        inputs,
        |c| Some(Input::Cluster(c.name_any())),
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
    };
    let mut pending: BTreeSet<String> = BTreeSet::new();
    let mut retries: Backoff<String> = Backoff::new(RETRY_MIN, RETRY_MAX);
    let mut first = Some(Input::All);
    loop {
        // Take the next input (the first pass covers everything), then whatever else arrived,
        // so a burst becomes one pass.
        let retry_due = retries.next_due();
        let next = match first.take() {
            Some(input) => Some(input),
            None => tokio::select! {
                _ = shutdown.cancelled() => return Ok(()),
                input = received.recv() => match input {
                    None => return Ok(()),
                    input => input,
                },
                _ = tokio::time::sleep_until(retry_due.unwrap_or_else(Instant::now)), if retry_due.is_some() => None,
            },
        };
        let mut transforms_changed = false;
        for input in next.into_iter().chain(std::iter::from_fn(|| received.try_recv().ok())) {
            match input {
                Input::Binding(name) => {
                    pending.insert(name);
                    // A ManifestWork applied elsewhere may be what one waits for.
                    pending.extend(
                        transport
                            .holding
                            .lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner)
                            .iter()
                            .cloned(),
                    );
                }
                Input::All => transforms_changed = true,
                Input::Cluster(cluster) => pending.extend(
                    transport
                        .bindings
                        .state()
                        .iter()
                        .filter(|b| b.spec.destinations.iter().any(|d| d.cluster_id == cluster))
                        .map(|b| b.name_any()),
                ),
            }
        }
        if transforms_changed {
            transport.report_transforms().await;
            pending.extend(transport.bindings.state().iter().map(|b| b.name_any()));
        }
        pending.extend(retries.take_due(Instant::now()));
        let metrics = &transport.settings.metrics;
        metrics.queue_depth.set((pending.len() + retries.waiting()) as i64);
        for name in std::mem::take(&mut pending) {
            metrics.reconciles.inc();
            match transport.reconcile(&name).await {
                Ok(()) => retries.succeeded(&name),
                Err(err) => {
                    metrics.errors.inc();
                    tracing::warn!(binding = %name, error = format!("{err:#}"), "transport failed; retrying with back-off");
                    retries.failed(name, Instant::now());
                }
            }
        }
        metrics.queue_depth.set(retries.waiting() as i64);
    }
}

/// One object to deliver, with its WDS UID (which names its ManifestWork when there is one
/// object per ManifestWork).
#[derive(Clone)]
struct Item {
    delivery: Delivery,
    uid: String,
    /// Expanded per WEC (docs/upstream-behaviour.md#templates): it asks for it and has a template
    /// somewhere.
    templated: bool,
    /// How template errors name it: `Kind.group(namespace/name)`, as upstream.
    label: String,
}

/// What writing a Binding's ManifestWorks did.
struct Applied {
    /// The ITS's rejections.
    rejections: Vec<String>,
    /// Some wait for objects to land in another.
    holding: bool,
}

struct Transport<P: Plugin> {
    plugin: P,
    packaging: trace::Packaging,
    wds: Client,
    its: Client,
    informers: WorkloadInformers,
    settings: Settings,
    bindings: Store<Binding>,
    policies: Store<BindingPolicy>,
    works: Store<P::Wrapped>,
    transforms: Store<CustomTransform>,
    clusters: Store<P::Inventory>,
    customizations: Store<ConfigMap>,
    /// Bindings with a ManifestWork held back until the objects it loses land in another (of the
    /// same Binding or another): passed again on every Binding's change.
    holding: std::sync::Mutex<BTreeSet<String>>,
}

/// What a CustomTransform's status should say: path errors, and a warning when several
/// CustomTransforms name the same group and resource (their removals are all applied).
pub fn transform_status(transform: &CustomTransform, all: &[std::sync::Arc<CustomTransform>]) -> CustomTransformStatus {
    let (_, errors) = jsonpath::compile(&transform.spec.remove);
    let same: BTreeSet<String> = all
        .iter()
        .filter(|t| t.spec.api_group == transform.spec.api_group && t.spec.resource == transform.spec.resource)
        .map(|t| t.name_any())
        .collect();
    let warnings = if same.len() > 1 {
        let names: Vec<&str> = same.iter().map(String::as_str).collect();
        vec![format!(
            "multiple CustomTransform objects specify the same GroupResource; their names are {}",
            names.join(", ")
        )]
    } else {
        Vec::new()
    };
    CustomTransformStatus {
        observed_generation: transform.metadata.generation.unwrap_or_default(),
        errors,
        warnings,
    }
}

impl<P: Plugin> Transport<P> {
    /// Writes each CustomTransform's status where it changed.
    async fn report_transforms(&self) {
        let all = self.transforms.state();
        let api: Api<CustomTransform> = Api::all(self.wds.clone());
        for transform in &all {
            let status = transform_status(transform, &all);
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

    /// This Binding's wrapped objects, in any mailbox.
    fn current_works(&self, binding: &str) -> Vec<std::sync::Arc<P::Wrapped>> {
        self.works
            .state()
            .into_iter()
            .filter(|w| w.labels().get(ORIGIN_BINDING_LABEL).map(String::as_str) == Some(binding))
            .collect()
    }

    async fn reconcile(&self, name: &str) -> anyhow::Result<()> {
        let api: Api<Binding> = Api::all(self.wds.clone());
        let Some(binding) = self.bindings.get(&ObjectRef::new(name)) else {
            // Gone: the finalizer made us clean up while it was being deleted.
            self.set_holding(name, false);
            return Ok(());
        };
        let has_finalizer = binding.finalizers().iter().any(|f| f == TRANSPORT_FINALIZER);
        if binding.metadata.deletion_timestamp.is_some() {
            // Its ManifestWorks must all be gone before the Binding may go.
            let applied = self.apply_works(name, BTreeMap::new()).await?;
            if has_finalizer && !applied.holding {
                crate::finalizer::set(&api, &*binding, TRANSPORT_FINALIZER, false).await?;
            }
            return Ok(());
        }
        if !has_finalizer {
            crate::finalizer::set(&api, &*binding, TRANSPORT_FINALIZER, true).await?;
        }
        if let Some(unknown) = self.unknown_resource(&binding) {
            // Its objects are not known, not gone: the WECs keep what they have.
            anyhow::bail!(
                "the WDS cache of {}/{} is not filled; its ManifestWorks stay as they are",
                unknown.group,
                unknown.resource
            );
        }
        let (desired, mut errors) = self.desired_works(&binding);
        if errors.is_empty() {
            errors = self.apply_works(name, desired).await?.rejections;
        }
        // Errors leave what the WECs have untouched; they are reported on the Binding.
        let status = binding.status.clone().unwrap_or_default();
        let generation = binding.metadata.generation.unwrap_or_default();
        if status.errors != errors || status.observed_generation != generation {
            let patch = json!({"apiVersion": "control.kubestellar.io/v1alpha1", "kind": "Binding",
                               "status": {"observedGeneration": generation, "errors": errors}});
            let written = api
                .patch_status(
                    name,
                    &PatchParams::apply(field_manager::TRANSPORT).force(),
                    &Patch::Apply(&patch),
                )
                .await;
            match written {
                // Deleted meanwhile: a Binding that is gone is done.
                Err(err) if failure(&err) == Failure::Moot => {}
                written => {
                    written?;
                }
            }
        }
        self.report_propagation(&binding).await
    }

    /// Writes how far the Binding's objects got on each WEC into its BindingPolicy's status, when
    /// that changed. Bursts of ManifestWork status changes arrive as one pass, so they are
    /// written once.
    async fn report_propagation(&self, binding: &Binding) -> anyhow::Result<()> {
        let name = binding.name_any();
        let Some(policy) = self.policies.get(&ObjectRef::new(&name)) else {
            return Ok(());
        };
        // Until the binding controller has written the status, it misses required fields.
        if policy.metadata.deletion_timestamp.is_some() || policy.status.is_none() {
            return Ok(());
        }
        let works = self.current_works(&name);
        let wecs = binding.spec.destinations.iter().map(|destination| {
            let mailbox = self.plugin.mailbox(&destination.cluster_id);
            let landed = works
                .iter()
                .filter(|w| w.namespace().as_deref() == Some(mailbox.as_str()))
                .map(|w| self.plugin.landed(w))
                .sum();
            (destination.cluster_id.clone(), landed)
        });
        let propagation = propagation::summarize(entries(binding).count(), wecs);
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
        let written = Api::<BindingPolicy>::all(self.wds.clone())
            .patch_status(
                &name,
                &PatchParams::apply(field_manager::TRANSPORT).force(),
                &Patch::Apply(&patch),
            )
            .await;
        match written {
            Err(err) if failure(&err) == Failure::Moot => Ok(()),
            written => Ok(written.map(|_| ())?),
        }
    }

    /// A resource of which the Binding lists objects while its cache is not filled, if any.
    fn unknown_resource(&self, binding: &Binding) -> Option<GroupResource> {
        let unsynced = self.informers.unsynced();
        if unsynced.is_empty() {
            return None;
        }
        entries(binding)
            .map(|(group, resource, ..)| GroupResource {
                group: group.clone(),
                resource: resource.clone(),
            })
            .find(|gr| unsynced.contains(gr))
    }

    /// The wrapped objects a Binding calls for, by (mailbox, name); or the errors preventing it.
    fn desired_works(&self, binding: &Binding) -> (Works<P>, Vec<String>) {
        let mut errors = Vec::new();
        let mut removals: BTreeMap<GroupResource, Vec<Vec<String>>> = BTreeMap::new();
        for transform in self.transforms.state() {
            let (paths, _) = jsonpath::compile(&transform.spec.remove);
            let gr = GroupResource {
                group: transform.spec.api_group.clone(),
                resource: transform.spec.resource.clone(),
            };
            removals.entry(gr).or_default().extend(paths);
        }
        let entries = entries(binding);
        let mut deliveries: BTreeMap<String, Item> = BTreeMap::new();
        let current = self.current_works(&binding.name_any());
        // One look at the existing works serves the trace reuse below and the shard assignment.
        let delivered = trace::delivered(current.iter().flat_map(|w| self.plugin.manifests(w)));
        let binding_name = binding.name_any();
        let wecs: Vec<&str> = binding
            .spec
            .destinations
            .iter()
            .map(|d| d.cluster_id.as_str())
            .collect();
        let wecs = wecs.join(",");
        for (group, resource, namespace, name, create_only) in entries {
            let gr = GroupResource {
                group: group.clone(),
                resource: resource.clone(),
            };
            // Deleted from the WDS (every cache it could be in is filled): the Binding follows.
            let (Some(object), Some(served_as)) = (
                self.informers
                    .get(&WorkloadRef::new(group, resource, namespace.unwrap_or_default(), name)),
                self.informers.api_resource(&gr),
            ) else {
                continue;
            };
            let mut manifest = serde_json::to_value(&*object).unwrap_or(Value::Null);
            // Listed items need not carry their type; the informer knows it.
            manifest["apiVersion"] = json!(served_as.api_version);
            manifest["kind"] = json!(served_as.kind);
            let generation = object.metadata.generation;
            prepare_for_wec(&mut manifest);
            // Tells the status agent which WDS generation the WEC object is (statusDetails), and
            // carries the rollout's trace.
            if let Some(generation) = generation {
                let generation = generation.to_string();
                manifest["metadata"]["annotations"][WDS_GENERATION_ANNOTATION] = json!(generation);
                let already = delivered
                    .get(&wrap::identity(&manifest))
                    .filter(|(at, _)| *at == generation)
                    .map(|(_, trace)| trace);
                let subject = trace::Subject {
                    group,
                    resource,
                    binding: &binding_name,
                    wecs: &wecs,
                };
                let first_seen = self.informers.first_seen();
                trace::set(
                    &mut manifest,
                    &self.packaging.annotations(&object, already, first_seen, &subject),
                );
            }
            for path in removals.get(&gr).into_iter().flatten() {
                jsonpath::remove(&mut manifest, path);
            }
            let key = format!("{group}/{resource}/{}/{name}", namespace.unwrap_or_default());
            let uid = object.uid().unwrap_or_default();
            let templated = object
                .annotations()
                .get(EXPAND_TEMPLATES_ANNOTATION)
                .map(String::as_str)
                == Some("true")
                && template::contains_template(&manifest);
            let kind = match group.as_str() {
                "" => served_as.kind.clone(),
                group => format!("{}.{group}", served_as.kind),
            };
            let label = match namespace {
                Some(namespace) => format!("{kind}({namespace}/{name})"),
                None => format!("{kind}({name})"),
            };
            if let Some(error) = wrap::too_deep(&label, &manifest) {
                errors.push(error);
                continue;
            }
            deliveries.insert(
                key,
                Item {
                    delivery: Delivery {
                        manifest,
                        resource: resource.clone(),
                        create_only,
                    },
                    uid,
                    templated,
                    label,
                },
            );
        }
        let origin = Origin {
            binding: &binding.name_any(),
            binding_uid: &binding.uid().unwrap_or_default(),
            binding_generation: binding.metadata.generation.unwrap_or_default(),
            wds: &self.settings.wds_name,
        };
        let mut works = BTreeMap::new();
        for destination in &binding.spec.destinations {
            let mailbox = &self.plugin.mailbox(&destination.cluster_id);
            let deliveries = match self.customized(&deliveries, &destination.cluster_id) {
                Ok(deliveries) => deliveries,
                Err(expansion_errors) => {
                    errors.extend(expansion_errors);
                    continue;
                }
            };
            let sizes = deliveries
                .iter()
                .map(|(k, item)| (k.clone(), item.delivery.manifest.to_string().len()))
                .collect();
            let previous = self.previous_shards(&current, &origin, mailbox, &deliveries);
            let assigned = match sharding::assign(&sizes, &previous, self.settings.limits) {
                Ok(assigned) => assigned,
                Err(err) => {
                    errors.push(err.to_string());
                    continue;
                }
            };
            let mut shards: BTreeMap<usize, Vec<&Item>> = BTreeMap::new();
            for (key, shard) in &assigned {
                shards.entry(*shard).or_default().push(&deliveries[key]);
            }
            for (shard, mut members) in shards {
                members.sort_by_key(|item| apply_order(&item.delivery));
                let only_uid = (self.settings.limits.max_count == 1).then(|| members[0].uid.as_str());
                let name = work_name(&origin, shard, only_uid);
                let items: Vec<Delivery> = members.iter().map(|item| item.delivery.clone()).collect();
                works.insert(
                    (mailbox.clone(), name.clone()),
                    self.plugin.wrap(&origin, mailbox, &name, &items),
                );
            }
        }
        errors.sort();
        errors.dedup();
        (works, errors)
    }

    /// The objects as `wec` gets them: templates expanded with its properties, or the errors
    /// that prevent it (each naming the WEC, the object and the string's path).
    fn customized<'a>(
        &self,
        deliveries: &'a BTreeMap<String, Item>,
        wec: &str,
    ) -> Result<Cow<'a, BTreeMap<String, Item>>, Vec<String>> {
        if !deliveries.values().any(|item| item.templated) {
            return Ok(Cow::Borrowed(deliveries));
        }
        let properties = self.properties(wec);
        let mut errors = Vec::new();
        let mut customized = deliveries.clone();
        for item in customized.values_mut().filter(|item| item.templated) {
            if let Err(err) = template::expand_object(&mut item.delivery.manifest, &properties) {
                errors.push(format!("{wec}/{}.{err}", item.label));
            }
        }
        if errors.is_empty() {
            Ok(Cow::Owned(customized))
        } else {
            Err(errors)
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

    /// Which shard each object is in now, read from the existing ManifestWorks' contents.
    fn previous_shards(
        &self,
        current: &[std::sync::Arc<P::Wrapped>],
        origin: &Origin<'_>,
        mailbox: &str,
        deliveries: &BTreeMap<String, Item>,
    ) -> BTreeMap<String, usize> {
        let mut previous = BTreeMap::new();
        for work in current.iter().filter(|w| w.namespace().as_deref() == Some(mailbox)) {
            let name = work.name_any();
            let Some(shard) = wrap::shard_of(origin, &name) else {
                continue;
            };
            let contents = self.plugin.gloss(work);
            for (key, item) in deliveries {
                let wanted = self.plugin.gloss(&self.plugin.wrap(
                    origin,
                    mailbox,
                    &name,
                    std::slice::from_ref(&item.delivery),
                ));
                if contents.contains(&wanted[0]) {
                    previous.insert(key.clone(), shard);
                }
            }
        }
        previous
    }

    /// Writes the desired ManifestWorks that differ and deletes this Binding's others, several
    /// at a time (they are mostly in different WECs' mailboxes). One that would drop an object
    /// moving to another (of this Binding or another) waits until that one is applied (its
    /// status change brings the Binding back). Returns the ITS's rejections of ManifestWorks, for
    /// the Binding's status, and whether any waits; other failures are errors (to retry).
    async fn apply_works(&self, binding: &str, desired: Works<P>) -> anyhow::Result<Applied> {
        let current = self.current_works(binding);
        let key = |w: &P::Wrapped| (w.namespace().unwrap_or_default(), w.name_any());
        let mut now: BTreeMap<moves::WorkKey, moves::Current> =
            current.iter().map(|w| (key(w), self.as_is(w))).collect();
        let mut wanted: BTreeMap<moves::WorkKey, BTreeSet<wrap::Identity>> = desired
            .iter()
            .map(|(k, w)| (k.clone(), self.plugin.gloss(w).into_iter().collect()))
            .collect();
        let dropped = moves::dropped(&now, &wanted);
        if !dropped.is_empty() {
            self.add_takers(binding, &dropped, &mut now, &mut wanted);
        }
        let held = moves::held_back(&now, &wanted);
        let holding = current.iter().any(|w| held.contains(&key(w)));
        if holding {
            tracing::debug!(
                binding,
                ?held,
                "ManifestWorks wait for the objects they lose to be applied elsewhere"
            );
        }
        self.set_holding(binding, holding);
        let mut changes: Vec<BoxFuture<'_, anyhow::Result<Option<String>>>> = Vec::new();
        for ((mailbox, name), work) in &desired {
            let existing = current
                .iter()
                .find(|w| w.namespace().as_deref() == Some(mailbox.as_str()) && w.name_any() == *name);
            if !existing.is_some_and(|existing| self.plugin.same_content(existing, work))
                && !held.contains(&(mailbox.clone(), name.clone()))
            {
                changes.push(self.write_work(mailbox, name, work).boxed());
            }
        }
        for stale in &current {
            let key = key(stale);
            if !desired.contains_key(&key) && !held.contains(&key) {
                changes.push(self.delete_work(stale).map(|r| r.map(|()| None)).boxed());
            }
        }
        let results: Vec<anyhow::Result<Option<String>>> = futures::stream::iter(changes)
            .buffer_unordered(WRITE_CONCURRENCY)
            .collect()
            .await;
        let mut rejections = results
            .into_iter()
            .filter_map(Result::transpose)
            .collect::<anyhow::Result<Vec<_>>>()?;
        rejections.sort();
        Ok(Applied { rejections, holding })
    }

    /// Records whether `binding` waits for another Binding's ManifestWorks.
    fn set_holding(&self, binding: &str, holding: bool) {
        let mut waiting = self.holding.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if holding {
            waiting.insert(binding.to_string());
        } else {
            waiting.remove(binding);
        }
    }

    /// A wrapped object as it is.
    fn as_is(&self, work: &P::Wrapped) -> moves::Current {
        moves::Current {
            objects: self.plugin.gloss(work).into_iter().collect(),
            applied: self.plugin.applied(work),
        }
    }

    /// Adds the wrapped objects, as they are and as they should be, of the other live Bindings
    /// that list an object `binding` drops: one they take over waits for them.
    fn add_takers(
        &self,
        binding: &str,
        dropped: &BTreeSet<wrap::Identity>,
        now: &mut BTreeMap<moves::WorkKey, moves::Current>,
        wanted: &mut BTreeMap<moves::WorkKey, BTreeSet<wrap::Identity>>,
    ) {
        let names: BTreeSet<(&str, &str)> = dropped
            .iter()
            .map(|(_, _, ns, name)| (ns.as_str(), name.as_str()))
            .collect();
        let takers: BTreeSet<String> = self
            .bindings
            .state()
            .iter()
            .filter(|other| other.name_any() != binding && other.metadata.deletion_timestamp.is_none())
            .filter(|other| {
                entries(other).any(|(_, _, ns, name, _)| names.contains(&(ns.unwrap_or_default(), name.as_str())))
            })
            .filter_map(|other| {
                let (works, errors) = self.desired_works(other);
                // A Binding in error writes nothing, so it takes nothing over.
                errors.is_empty().then(|| {
                    for (key, work) in works {
                        wanted.insert(key, self.plugin.gloss(&work).into_iter().collect());
                    }
                    other.name_any()
                })
            })
            .collect();
        for work in self.works.state() {
            if work
                .labels()
                .get(ORIGIN_BINDING_LABEL)
                .is_some_and(|b| takers.contains(b))
            {
                now.insert(
                    (work.namespace().unwrap_or_default(), work.name_any()),
                    self.as_is(&work),
                );
            }
        }
    }

    /// Writes one wrapped object; `Some(why)` when the ITS rejects it or the mailbox is missing
    /// (retrying cannot help).
    async fn write_work(&self, mailbox: &str, name: &str, work: &P::Wrapped) -> anyhow::Result<Option<String>> {
        let api: Api<P::Wrapped> = Api::namespaced(self.its.clone(), mailbox);
        let mut body = serde_json::to_value(work)?;
        body["apiVersion"] = json!(P::Wrapped::api_version(&()));
        body["kind"] = json!(P::Wrapped::kind(&()));
        let params = PatchParams::apply(field_manager::TRANSPORT).force();
        self.settings.metrics.writes.inc();
        let Err(err) = api.patch(name, &params, &Patch::Apply(&body)).await else {
            return Ok(None);
        };
        let kube::Error::Api(status) = &err else {
            return Err(err.into());
        };
        match failure(&err) {
            Failure::Refused => Ok(Some(format!(
                "the ITS rejected {} {mailbox}/{name}: {}",
                P::Wrapped::kind(&()),
                status.message
            ))),
            // A WEC not accepted yet has no mailbox. Retrying cannot help until it is accepted,
            // and that changes its inventory object, which brings this Binding back.
            Failure::Moot => Ok(Some(format!(
                "the mailbox namespace {mailbox} does not exist (is the WEC accepted into the ITS?): {}",
                status.message
            ))),
            Failure::Transient => Err(err.into()),
        }
    }

    async fn delete_work(&self, stale: &P::Wrapped) -> anyhow::Result<()> {
        let api: Api<P::Wrapped> = Api::namespaced(self.its.clone(), &stale.namespace().unwrap_or_default());
        self.settings.metrics.writes.inc();
        match api.delete(&stale.name_any(), &DeleteParams::default()).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
            Err(err) => Err(err.into()),
        }
    }
}

/// The objects a Binding lists: group, resource, namespace (`None`: cluster-scoped), name, and
/// whether it is created only.
fn entries(binding: &Binding) -> impl Iterator<Item = (&String, &String, Option<&str>, &String, bool)> {
    let w = &binding.spec.workload;
    let cluster_scoped = w.cluster_scope.iter().map(|c| {
        let o = &c.object;
        (&o.group, &o.resource, None, &o.name, c.modulation.create_only)
    });
    let namespaced = w.namespace_scope.iter().map(|n| {
        let o = &n.object;
        (
            &o.group,
            &o.resource,
            Some(o.namespace.as_str()),
            &o.name,
            n.modulation.create_only,
        )
    });
    cluster_scoped.chain(namespaced)
}

/// Where an object goes in its ManifestWork, which OCM's work agent applies in order: what
/// others live in or are made of comes first (CustomResourceDefinitions, then Namespaces, then
/// other cluster-scoped objects), so nothing waits for a retry because its container is missing.
fn apply_order(delivery: &Delivery) -> u8 {
    let kind = delivery.manifest["kind"].as_str().unwrap_or_default();
    let api_version = delivery.manifest["apiVersion"].as_str().unwrap_or_default();
    let namespaced = delivery.manifest["metadata"]["namespace"]
        .as_str()
        .is_some_and(|n| !n.is_empty());
    match (api_version, kind) {
        ("apiextensions.k8s.io/v1", "CustomResourceDefinition") => 0,
        ("v1", "Namespace") => 1,
        _ if !namespaced => 2,
        _ => 3,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    fn transform(name: &str, resource: &str, remove: &[&str]) -> Arc<CustomTransform> {
        let mut t = CustomTransform::new(
            name,
            ks_shared::api::CustomTransformSpec {
                api_group: "apps".into(),
                resource: resource.into(),
                remove: remove.iter().map(|r| r.to_string()).collect(),
            },
        );
        t.metadata.generation = Some(3);
        Arc::new(t)
    }

    #[test]
    fn containers_are_applied_before_what_they_contain() {
        let delivery = |api_version: &str, kind: &str, namespace: Option<&str>| Delivery {
            manifest: json!({"apiVersion": api_version, "kind": kind,
                             "metadata": {"name": "x", "namespace": namespace}}),
            resource: String::new(),
            create_only: false,
        };
        let mut deliveries = [
            delivery("v1", "ConfigMap", Some("a")),
            delivery("example.com/v1", "Gauge", None),
            delivery("apps/v1", "Deployment", Some("a")),
            delivery("v1", "Namespace", None),
            delivery("apiextensions.k8s.io/v1", "CustomResourceDefinition", None),
        ];
        deliveries.sort_by_key(apply_order);
        let kinds: Vec<&str> = deliveries
            .iter()
            .map(|d| d.manifest["kind"].as_str().unwrap())
            .collect();
        assert_eq!(
            kinds,
            [
                "CustomResourceDefinition",
                "Namespace",
                "Gauge",
                "ConfigMap",
                "Deployment"
            ]
        );
    }

    #[test]
    fn transform_status_has_errors_and_shared_group_resource_warnings() {
        let a = transform("a", "deployments", &["$.spec.paused", "spec"]);
        let b = transform("b", "deployments", &[]);
        let c = transform("c", "statefulsets", &[]);
        let all = [a.clone(), b, c.clone()];
        let status = transform_status(&a, &all);
        assert_eq!(status.observed_generation, 3);
        assert_eq!(
            status.errors,
            ["Error in spec.remove[1]: syntax error at 0: the path must start with $"]
        );
        assert_eq!(
            status.warnings,
            ["multiple CustomTransform objects specify the same GroupResource; their names are a, b"]
        );
        assert!(transform_status(&c, &all).warnings.is_empty());
    }
}
