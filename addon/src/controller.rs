//! The add-on controller: for each `addon-status` ManagedClusterAddOn, delivers the agent in a
//! ManifestWork, grants its hub Role, declares its registration and reports its health.
//!
//! Everything it writes into a cluster namespace is owned by the ManagedClusterAddOn, so the
//! garbage collector cleans up when the add-on (or the cluster's namespace) goes away.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ResourceQuota;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, OwnerReference, Time};
use ks_shared::cli::retry_until_done;
use ks_shared::names::{OCM_ADDON_NAME_LABEL, STATUS_ADDON_NAME, field_manager};
use ks_shared::ocm::{AddOnDeploymentConfig, ManagedClusterAddOn, ManifestWork};
use ks_shared::runtime::watch_health::{self, WatchRole};
use ks_shared::runtime::{Backoff, RETRY_MAX, RETRY_MIN};
use ks_shared::serve::ReadyGate;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Client, Resource, ResourceExt};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::digest::recorded_digest;
use crate::grants::Grants;
use crate::health::{self, AVAILABLE, Health, REASON_INVALID_CONFIG};
use crate::hub_rbac::sized_from;
use crate::manifests;
use crate::metrics::{Metrics, Object};
use crate::registration;
use crate::settings::{self, AgentSettings, Defaults};

/// Health comes back through ManifestWork status events; this is only a safety net.
const RESYNC: Duration = Duration::from_secs(300);
/// How often an add-on is looked at again while the ManifestWorks are not listed yet (their
/// first list reconciles every add-on anyway).
const UNLISTED: Duration = Duration::from_secs(5);

/// A reconcile that failed; retried with back-off (see [`Retries`]).
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error("ManagedClusterAddOn without a namespace")]
    NoNamespace,
    #[error("ManagedClusterAddOn without a uid (not read from the API server)")]
    NoUid,
    #[error("{what}: {source}")]
    Api { what: String, source: kube::Error },
    #[error(
        "{what} exists and is not this add-on's (no ownerReference to a ManagedClusterAddOn {STATUS_ADDON_NAME}, \
         no label {OCM_ADDON_NAME_LABEL}={STATUS_ADDON_NAME}): left alone; delete it to let the add-on write its own"
    )]
    NameTaken { what: String },
    #[error(
        "{what} is written by {manager} too, since this add-on last wrote it (another add-on manager of the \
         same name on this ITS?): left alone, not fought over; stop the other and delete the ManifestWork, and this add-on writes its own"
    )]
    WrittenByAnother { what: String, manager: String },
}

/// Another manager that has written the spec of an object the add-on wrote since the add-on last
/// did (a write of the add-on's own, or none: an earlier install's object is taken over once).
fn writing_too(found: &kube::api::ObjectMeta) -> Option<String> {
    let entries = found.managed_fields.as_deref().unwrap_or_default();
    let spec = |e: &&k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry| {
        e.subresource.is_none() && e.fields_v1.as_ref().is_some_and(|f| f.0.get("f:spec").is_some())
    };
    let ours = entries
        .iter()
        .filter(|e| e.manager.as_deref() == Some(field_manager::ADDON))
        .filter_map(|e| e.time.as_ref())
        .max()?;
    entries
        .iter()
        .filter(spec)
        .filter(|e| e.manager.as_deref() != Some(field_manager::ADDON))
        .find(|e| e.time.as_ref().is_some_and(|t| t > ours))
        .map(|e| e.manager.clone().unwrap_or_default())
}

/// Whether an object found under a name the add-on writes is the add-on's own: owned by a
/// ManagedClusterAddOn of its name (this one or one before it), or labelled as the add-on
/// framework labels what it writes for the add-on (an earlier install of it, ours or upstream's).
fn ours(found: &kube::api::ObjectMeta) -> bool {
    let owned = found
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.kind == "ManagedClusterAddOn" && o.name == STATUS_ADDON_NAME);
    let labelled = found
        .labels
        .as_ref()
        .is_some_and(|l| l.get(OCM_ADDON_NAME_LABEL).is_some_and(|v| v == STATUS_ADDON_NAME));
    owned || labelled
}

fn api_error(what: impl Into<String>) -> impl FnOnce(kube::Error) -> ReconcileError {
    let what = what.into();
    move |source| ReconcileError::Api { what, source }
}

struct Context {
    client: Client,
    /// Which API groups each WEC's agent may read.
    grants: Grants,
    defaults: Defaults,
    metrics: Metrics,
    /// What we last applied to each add-on's status; see [`status_is_current`].
    applied_status: Mutex<HashMap<String, AppliedStatus>>,
    retries: Retries,
}

/// Per add-on capped exponential back-off: [`RETRY_MIN`] after a failure, doubling with each
/// further one up to [`RETRY_MAX`], starting over after a success.
struct Retries(Mutex<Backoff<(String, String)>>);

impl Retries {
    fn new() -> Retries {
        Retries(Mutex::new(Backoff::new(RETRY_MIN, RETRY_MAX)))
    }

    fn key(addon: &ManagedClusterAddOn) -> (String, String) {
        (addon.namespace().unwrap_or_default(), addon.name_any())
    }

    /// `key`'s add-on succeeded or is gone: it no longer waits for a retry.
    fn forget(&self, key: &(String, String)) {
        let mut backoff = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        backoff.succeeded(key);
    }

    /// `addon` failed: the pause before it is tried again.
    fn failed(&self, addon: &ManagedClusterAddOn) -> Duration {
        let mut backoff = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        backoff.failed(Self::key(addon), tokio::time::Instant::now())
    }

    /// `addon` succeeded: its next failure waits the shortest pause again.
    fn succeeded(&self, addon: &ManagedClusterAddOn) {
        self.forget(&Self::key(addon));
    }

    /// How many add-ons wait for a retry.
    fn waiting(&self) -> usize {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).waiting()
    }
}

/// Runs until `shutdown`; opens `ready` once the add-ons can be listed.
pub async fn run(
    client: Client,
    defaults: Defaults,
    metrics: Metrics,
    ready: ReadyGate,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let addons: Api<ManagedClusterAddOn> = Api::all(client.clone());
    let addons_api = addons.clone();
    let by_name = format!("metadata.name={STATUS_ADDON_NAME}");
    let ours = watcher::Config::default().fields(&by_name);
    let works: Api<ManifestWork> = Api::all(client.clone());
    let our_works = watcher::Config::default().labels(&format!("{OCM_ADDON_NAME_LABEL}={STATUS_ADDON_NAME}"));
    let configs: Api<AddOnDeploymentConfig> = Api::all(client.clone());

    let controller = Controller::new(addons, ours).owns(works, our_works);
    // Its three watches, as one: kube's controller does not say which of them failed.
    let watches = watch_health::Followed::start("add-on controller", WatchRole::Essential);
    let store = controller.store();
    // Ready once the add-ons can be listed: the ITS answers and our objects are readable.
    let list_ours = ListParams::default().fields(&by_name);
    let listing = || addons_api.list(&list_ours);
    if retry_until_done("listing ManagedClusterAddOns", &shutdown, listing)
        .await
        .is_none()
    {
        return Ok(());
    }
    ready.open();
    // A changed AddOnDeploymentConfig re-renders every add-on that references it.
    let referencing = move |config: AddOnDeploymentConfig| {
        let (namespace, name) = (config.namespace().unwrap_or_default(), config.name_any());
        store
            .state()
            .into_iter()
            .filter(|addon| {
                settings::deployment_config_ref(addon).is_some_and(|r| r.namespace == namespace && r.name == name)
            })
            .map(|addon| ObjectRef::from_obj(addon.as_ref()))
            .collect::<Vec<_>>()
    };
    // A WEC that receives a new API group gets an agent that may read it: the add-on in its
    // mailbox is rendered again, and no other (rendering every add-on for each mailbox's first
    // group cost the ITS four reads per add-on each time: some 5,000 renders at 102 WECs).
    let (grants_changed, regrant) = tokio::sync::mpsc::unbounded_channel();
    let grants = Grants::start(client.clone(), grants_changed, sized_from, shutdown.clone());
    let addons_store = controller.store();
    let regrant = futures::stream::unfold(regrant, |mut r| async move { r.recv().await.map(|m| (m, r)) })
        .flat_map(move |mailbox| futures::stream::iter(regranted(&addons_store.state(), mailbox)));
    let context = Arc::new(Context {
        client,
        grants,
        defaults,
        metrics,
        applied_status: Mutex::new(HashMap::new()),
        retries: Retries::new(),
    });
    controller
        .watches(configs, watcher::Config::default(), referencing)
        .reconcile_on(regrant)
        .graceful_shutdown_on(shutdown.cancelled_owned())
        .run(reconcile, error_policy, context.clone())
        .for_each(|result| {
            match result {
                Ok(_) => watches.got_through(),
                // A retry of an add-on deleted meanwhile finds it gone.
                Err(controller::Error::ObjectNotFound(gone)) => {
                    context.forget(&gone.namespace.unwrap_or_default(), &gone.name)
                }
                // kube's controller hands on what its watches failed with, and retries them.
                Err(controller::Error::QueueError(err)) => {
                    tracing::warn!(error = %err, "watching add-ons, their ManifestWorks or their configs failed; retrying");
                    watches.failed(&err);
                }
                Err(_) => {}
            }
            async {}
        })
        .await;
    Ok(())
}

/// The add-ons to render again when the groups delivered to `mailbox` changed (`None`: some
/// mailboxes', seen in a (re-)list): the one in that mailbox, or every one in `addons`.
fn regranted(addons: &[Arc<ManagedClusterAddOn>], mailbox: Option<String>) -> Vec<ObjectRef<ManagedClusterAddOn>> {
    match mailbox {
        Some(mailbox) => vec![ObjectRef::new(STATUS_ADDON_NAME).within(&mailbox)],
        None => addons.iter().map(|a| ObjectRef::from_obj(a.as_ref())).collect(),
    }
}

impl Context {
    /// The add-on `name` in `cluster` is gone: forget its retry and what we wrote to it.
    fn forget(&self, cluster: &str, name: &str) {
        self.retries.forget(&(cluster.to_string(), name.to_string()));
        self.metrics.common.queue_depth.set(self.retries.waiting() as i64);
        self.metrics.agent(cluster, None);
        let prefix = format!("{cluster}/");
        self.applied_status
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|key, _| !key.starts_with(&prefix));
    }
}

fn error_policy(addon: Arc<ManagedClusterAddOn>, error: &ReconcileError, context: Arc<Context>) -> Action {
    context.metrics.common.errors.inc();
    let pause = context.retries.failed(&addon);
    context.metrics.common.queue.retried();
    context.metrics.common.queue_depth.set(context.retries.waiting() as i64);
    tracing::warn!(cluster = addon.namespace().unwrap_or_default(), error = %error, retry_in = ?pause, "reconcile failed");
    Action::requeue(pause)
}

async fn reconcile(addon: Arc<ManagedClusterAddOn>, context: Arc<Context>) -> Result<Action, ReconcileError> {
    context.metrics.common.reconciles.inc();
    if let Some(cluster) = addon.namespace() {
        let available = addon
            .metadata
            .deletion_timestamp
            .is_none()
            .then(|| agent_available(&addon));
        context.metrics.agent(&cluster, available);
    }
    // kube's controller queues the add-ons: how long one waited is not known here.
    let started = std::time::Instant::now();
    let result = reconcile_addon(&addon, &context).await;
    context.metrics.common.queue.finished(started.elapsed(), result.is_ok());
    if result.is_ok() {
        context.retries.succeeded(&addon);
        context.metrics.common.queue_depth.set(context.retries.waiting() as i64);
    }
    result
}

/// Whether OCM says the add-on's agent is available (its `Available` condition, which OCM's
/// registration sets from the agent's lease).
fn agent_available(addon: &ManagedClusterAddOn) -> bool {
    addon.status.as_ref().is_some_and(|s| {
        s.conditions
            .iter()
            .any(|c| c.type_ == "Available" && c.status == "True")
    })
}

async fn reconcile_addon(addon: &ManagedClusterAddOn, context: &Context) -> Result<Action, ReconcileError> {
    if addon.metadata.deletion_timestamp.is_some() {
        // The garbage collector removes what we wrote once the add-on is gone.
        return Ok(Action::await_change());
    }
    if !context.grants.listed() {
        // Never rendered from an unlisted cache, which would take the agent's grants away until
        // it lists; the first list brings every add-on back.
        return Ok(Action::requeue(UNLISTED));
    }
    let cluster = addon.namespace().ok_or(ReconcileError::NoNamespace)?;
    let owner = owner_reference(addon)?;
    let settings = match agent_settings(context, addon).await? {
        Ok(settings) => settings,
        Err(message) => {
            let health = Health {
                status: "False",
                reason: REASON_INVALID_CONFIG,
                message,
            };
            write_status(context, addon, &cluster, None, health).await?;
            return Ok(Action::requeue(RESYNC));
        }
    };
    let applied = async {
        let work = apply_manifest_work(context, &cluster, &settings, owner.clone()).await?;
        apply_mailbox_objects(context, &cluster, owner).await?;
        Ok(work)
    };
    let work = match applied.await {
        Err(taken @ (ReconcileError::NameTaken { .. } | ReconcileError::WrittenByAnother { .. })) => {
            tracing::warn!(cluster, error = %taken, "left alone");
            let health = Health {
                status: "False",
                reason: health::REASON_NAME_TAKEN,
                message: taken.to_string(),
            };
            write_status(context, addon, &cluster, None, health).await?;
            return Ok(Action::requeue(RESYNC));
        }
        applied => applied?,
    };
    let health = health::health(work.status.as_ref(), &settings.install_namespace);
    write_status(context, addon, &cluster, Some(&settings.install_namespace), health).await?;
    Ok(Action::requeue(RESYNC))
}

/// A controller owner reference to the add-on, blocking its deletion until dependents are gone.
fn owner_reference(addon: &ManagedClusterAddOn) -> Result<OwnerReference, ReconcileError> {
    addon.controller_owner_ref(&()).ok_or(ReconcileError::NoUid)
}

/// The settings for the add-on's cluster, or a message saying why its configuration is unusable.
async fn agent_settings(
    context: &Context,
    addon: &ManagedClusterAddOn,
) -> Result<Result<AgentSettings, String>, ReconcileError> {
    let Some(reference) = settings::deployment_config_ref(addon) else {
        return Ok(settings::resolve(&context.defaults, None).map_err(|e| e.to_string()));
    };
    let configs: Api<AddOnDeploymentConfig> = Api::namespaced(context.client.clone(), &reference.namespace);
    let what = format!("AddOnDeploymentConfig {}/{}", reference.namespace, reference.name);
    let Some(config) = configs.get_opt(&reference.name).await.map_err(api_error(&what))? else {
        return Ok(Err(format!("{what} not found")));
    };
    Ok(settings::resolve(&context.defaults, Some(&config.spec)).map_err(|e| format!("{what}: {e}")))
}

fn apply_params() -> PatchParams {
    PatchParams::apply(field_manager::ADDON).force()
}

/// Applies the ManifestWork when its content changed; returns what is on the hub now.
async fn apply_manifest_work(
    context: &Context,
    cluster: &str,
    settings: &AgentSettings,
    owner: OwnerReference,
) -> Result<ManifestWork, ReconcileError> {
    let desired = manifests::manifest_work(cluster, settings, &context.grants.delivered(cluster).groups, owner);
    let name = desired.name_any();
    let works: Api<ManifestWork> = Api::namespaced(context.client.clone(), cluster);
    let what = format!("ManifestWork {cluster}/{name}");
    let current = works.get_opt(&name).await.map_err(api_error(&what))?;
    if current.as_ref().is_some_and(|c| !ours(&c.metadata)) {
        return Err(ReconcileError::NameTaken { what });
    }
    if let Some(manager) = current.as_ref().and_then(|c| writing_too(&c.metadata)) {
        return Err(ReconcileError::WrittenByAnother { what, manager });
    }
    if let Some(current) = current.filter(|c| same_meta(&c.metadata, &desired.metadata)) {
        return Ok(current);
    }
    let written = works
        .patch(&name, &apply_params(), &Patch::Apply(&desired))
        .await
        .map_err(api_error(&what))?;
    context.metrics.wrote(Object::ManifestWork);
    tracing::info!(cluster, image = %settings.image, namespace = %settings.install_namespace, "agent ManifestWork applied");
    Ok(written)
}

/// True when `current` carries the content digest and owner of `desired`.
fn same_meta(current: &kube::api::ObjectMeta, desired: &kube::api::ObjectMeta) -> bool {
    recorded_digest(current) == recorded_digest(desired)
        && desired
            .owner_references
            .iter()
            .flatten()
            .all(|o| current.owner_references.iter().flatten().any(|c| c.uid == o.uid))
}

/// The agent's Role and RoleBinding, and its ResourceQuota, in the cluster's mailbox namespace.
async fn apply_mailbox_objects(context: &Context, cluster: &str, owner: OwnerReference) -> Result<(), ReconcileError> {
    let role = crate::hub_rbac::role(cluster, owner.clone());
    let roles: Api<Role> = Api::namespaced(context.client.clone(), cluster);
    apply_if_changed(context, &roles, &role, Object::HubRole).await?;
    let binding = crate::hub_rbac::role_binding(cluster, owner.clone());
    let bindings: Api<RoleBinding> = Api::namespaced(context.client.clone(), cluster);
    apply_if_changed(context, &bindings, &binding, Object::HubRoleBinding).await?;
    // Sized only from a listed cache (`reconcile_addon` waits for the first list), never below
    // twice what is delivered and 64 more: a smaller quota never refuses the agent's own
    // reports, and a quota lowered below what the mailbox holds deletes nothing, it only refuses
    // new WorkStatuses. `apply_if_changed` leaves a ResourceQuota of that name that is not ours.
    let delivered = context.grants.delivered(cluster);
    let Some(max) = context.defaults.max_work_statuses.for_mailbox(delivered.objects) else {
        return Ok(());
    };
    let quota = crate::hub_rbac::mailbox_quota(cluster, owner, max);
    let quotas: Api<ResourceQuota> = Api::namespaced(context.client.clone(), cluster);
    apply_if_changed(context, &quotas, &quota, Object::MailboxQuota).await
}

async fn apply_if_changed<K>(context: &Context, api: &Api<K>, desired: &K, object: Object) -> Result<(), ReconcileError>
where
    K: Resource + Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let name = desired.meta().name.clone().unwrap_or_default();
    let what = format!("{object:?} {name}");
    let current = api.get_opt(&name).await.map_err(api_error(&what))?;
    if current.as_ref().is_some_and(|c| !ours(c.meta())) {
        return Err(ReconcileError::NameTaken { what });
    }
    if current.is_some_and(|c| same_meta(c.meta(), desired.meta())) {
        return Ok(());
    }
    api.patch(&name, &apply_params(), &Patch::Apply(desired))
        .await
        .map_err(api_error(&what))?;
    context.metrics.wrote(object);
    Ok(())
}

/// Applies the add-on's status (registration, install namespace, health mode, Available)
/// when any of it differs from what is there.
async fn write_status(
    context: &Context,
    addon: &ManagedClusterAddOn,
    cluster: &str,
    install_namespace: Option<&str>,
    health: Health,
) -> Result<(), ReconcileError> {
    let current = addon.status.clone().unwrap_or_default();
    let previous = current.conditions.iter().find(|c| c.type_ == AVAILABLE);
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    let available = health::available_condition(health, previous, now, addon.metadata.generation);
    let registrations = vec![registration::registration(cluster)];
    let namespace = install_namespace.map(str::to_string).or(current.namespace.clone());
    // Customized: our work-based probe decides Available, not the registration agent's Lease check.
    let status = json!({
        "registrations": registrations,
        "namespace": namespace,
        "healthCheck": {"mode": "Customized"},
        "conditions": [available],
    });
    let key = format!("{cluster}/{}", addon.uid().unwrap_or_default());
    let digest = crate::digest::digest(&(&registrations, &namespace, condition_content(&available)));
    let cache_matches = current.registrations == registrations
        && current.namespace == namespace
        && previous.is_some_and(|p| health::same_condition(p, &available));
    let cached_version = resource_version(addon);
    let applied = context
        .applied_status
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get(&key)
        .cloned();
    if status_is_current(cache_matches, cached_version, applied.as_ref(), &digest) {
        return Ok(());
    }
    let patch = json!({
        "apiVersion": ManagedClusterAddOn::api_version(&()),
        "kind": ManagedClusterAddOn::kind(&()),
        "metadata": {"name": addon.name_any(), "namespace": cluster},
        "status": status,
    });
    let addons: Api<ManagedClusterAddOn> = Api::namespaced(context.client.clone(), cluster);
    let written = addons
        .patch_status(&addon.name_any(), &apply_params(), &Patch::Apply(&patch))
        .await
        .map_err(api_error(format!("ManagedClusterAddOn {cluster} status")))?;
    let applied = AppliedStatus {
        digest,
        resource_version: resource_version(&written),
    };
    context
        .applied_status
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .insert(key, applied);
    context.metrics.wrote(Object::AddOnStatus);
    tracing::info!(cluster, available = %available.status, reason = %available.reason, "add-on status applied");
    Ok(())
}

/// What this process last wrote to an add-on's status.
#[derive(Clone, Debug, PartialEq)]
struct AppliedStatus {
    digest: String,
    resource_version: Option<u64>,
}

fn resource_version(addon: &ManagedClusterAddOn) -> Option<u64> {
    addon.metadata.resource_version.as_deref()?.parse().ok()
}

/// True when the add-on's status need not be written: we wrote exactly this content (`digest`)
/// in this process, and either the cached add-on shows it, or the cache has not yet caught up
/// with our write (an older resourceVersion; they are etcd revisions, so they grow). The
/// typed add-on does not show every field we set (`healthCheck`), hence the record.
fn status_is_current(
    cache_matches: bool,
    cached_version: Option<u64>,
    applied: Option<&AppliedStatus>,
    digest: &str,
) -> bool {
    let Some(applied) = applied.filter(|a| a.digest == digest) else {
        return false;
    };
    cache_matches
        || matches!((cached_version, applied.resource_version), (Some(cached), Some(written)) if cached < written)
}

fn condition_content(c: &Condition) -> (&str, &str, &str, &str) {
    (&c.type_, &c.status, &c.reason, &c.message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_what_the_add_on_wrote_is_written_over() {
        let meta = |owner: Option<(&str, &str)>, label: Option<&str>| kube::api::ObjectMeta {
            owner_references: owner.map(|(kind, name)| {
                vec![OwnerReference {
                    kind: kind.into(),
                    name: name.into(),
                    ..Default::default()
                }]
            }),
            labels: label.map(|v| [(OCM_ADDON_NAME_LABEL.to_string(), v.to_string())].into()),
            ..Default::default()
        };
        assert!(ours(&meta(Some(("ManagedClusterAddOn", STATUS_ADDON_NAME)), None)));
        assert!(ours(&meta(None, Some(STATUS_ADDON_NAME))), "an earlier install's");
        assert!(!ours(&meta(None, None)), "an admin's");
        assert!(!ours(&meta(
            Some(("ManagedClusterAddOn", "other-addon")),
            Some("other-addon")
        )));
        let taken = ReconcileError::NameTaken {
            what: "ManifestWork cluster1/addon-addon-status-deploy-0".into(),
        };
        assert!(taken.to_string().contains("left alone; delete it"), "{taken}");
    }

    #[test]
    fn a_spec_another_manager_wrote_since_ours_is_not_fought_over() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry};
        let entry =
            |manager: &str, second: i64, fields: serde_json::Value, subresource: Option<&str>| ManagedFieldsEntry {
                manager: Some(manager.into()),
                time: Some(Time(k8s_openapi::jiff::Timestamp::from_second(second).unwrap())),
                fields_v1: Some(FieldsV1(fields)),
                subresource: subresource.map(String::from),
                ..Default::default()
            };
        let spec = json!({"f:spec": {"f:workload": {}}});
        let meta = |entries: Vec<ManagedFieldsEntry>| kube::api::ObjectMeta {
            managed_fields: Some(entries),
            ..Default::default()
        };
        let ours = entry(field_manager::ADDON, 10, spec.clone(), None);
        assert_eq!(writing_too(&meta(vec![ours.clone()])), None);
        // An earlier install's (no write of ours yet) is taken over once.
        assert_eq!(writing_too(&meta(vec![entry("other", 20, spec.clone(), None)])), None);
        // OCM's finalizer and status are no fight; another's spec before ours is what we took over.
        let finalizer = entry("work-agent", 20, json!({"f:metadata": {"f:finalizers": {}}}), None);
        let status = entry("work-agent", 20, json!({"f:status": {}}), Some("status"));
        let before = entry("other", 5, spec.clone(), None);
        assert_eq!(writing_too(&meta(vec![ours.clone(), finalizer, status, before])), None);
        let after = entry("addon-manager", 20, spec, None);
        assert_eq!(writing_too(&meta(vec![ours, after])).as_deref(), Some("addon-manager"));
    }

    fn addon(cluster: &str) -> ManagedClusterAddOn {
        let mut addon = ManagedClusterAddOn::new(STATUS_ADDON_NAME, Default::default());
        addon.metadata.namespace = Some(cluster.into());
        addon
    }

    #[test]
    fn a_mailboxs_new_groups_render_its_addon_again_and_a_relist_every_addon() {
        let addons: Vec<Arc<ManagedClusterAddOn>> = ["c1", "c2", "c3"].map(|c| Arc::new(addon(c))).into();
        let clusters = |refs: Vec<ObjectRef<ManagedClusterAddOn>>| -> Vec<String> {
            refs.into_iter()
                .map(|r| format!("{}/{}", r.namespace.unwrap_or_default(), r.name))
                .collect()
        };
        let one = format!("c2/{STATUS_ADDON_NAME}");
        assert_eq!(clusters(regranted(&addons, Some("c2".into()))), [one]);
        assert_eq!(clusters(regranted(&addons, None)).len(), 3);
    }

    #[test]
    fn an_addon_gone_while_waiting_for_a_retry_no_longer_counts() {
        let retries = Retries::new();
        let (a, b) = (addon("cluster-a"), addon("cluster-b"));
        retries.failed(&a);
        retries.failed(&b);
        retries.forget(&Retries::key(&a));
        assert_eq!(retries.waiting(), 1);
    }

    #[test]
    fn retries_of_an_addon_back_off_and_start_over_after_a_success() {
        let retries = Retries::new();
        let (a, b) = (addon("cluster-a"), addon("cluster-b"));
        let pauses: Vec<Duration> = (0..8).map(|_| retries.failed(&a)).collect();
        let s = Duration::from_secs;
        assert_eq!(pauses, [s(1), s(2), s(4), s(8), s(16), s(32), s(60), s(60)]);
        assert_eq!(retries.failed(&b), RETRY_MIN, "another add-on waits on its own");
        assert_eq!(retries.waiting(), 2);
        retries.succeeded(&a);
        assert_eq!(retries.waiting(), 1);
        assert_eq!(retries.failed(&a), RETRY_MIN);
        assert_eq!(retries.failed(&a), 2 * RETRY_MIN);
    }

    #[test]
    fn status_is_written_once_per_content_and_not_for_a_stale_cache() {
        let applied = AppliedStatus {
            digest: "d1".into(),
            resource_version: Some(100),
        };
        // Never written by this process: write, whatever the cache shows.
        assert!(!status_is_current(true, Some(100), None, "d1"));
        // New content: write.
        assert!(!status_is_current(true, Some(100), Some(&applied), "d2"));
        // Written, and the cache shows it.
        assert!(status_is_current(true, Some(100), Some(&applied), "d1"));
        // Written, the cache is older than our write: wait for it rather than write again.
        assert!(status_is_current(false, Some(99), Some(&applied), "d1"));
        // Written, but someone changed it since: write again.
        assert!(!status_is_current(false, Some(101), Some(&applied), "d1"));
        assert!(!status_is_current(false, None, Some(&applied), "d1"));
    }
}
