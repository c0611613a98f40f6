//! What the transport controller reports: the CustomTransforms' status, the Binding's errors
//! when a cache it needs is stuck, the policy's propagation, and Events on objects a WEC could
//! not apply.

use std::sync::Arc;

use ks_shared::api::{Binding, BindingPolicy, CustomTransform};
use ks_shared::names::field_manager;
use ks_shared::runtime::watch_health;
use ks_shared::runtime::{Failure, failure};
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use serde_json::json;

use super::state::{Transport, of_binding};
use crate::informers::{GroupResource, WorkloadRef, workload_watch};
use crate::transport::plan::{binding, propagation, works};
use crate::transport::plugin::{Error, Plugin};
use crate::transport::types::Unapplied;

impl<P: Plugin> Transport<P> {
    /// Writes each CustomTransform's status where it changed.
    pub(super) async fn report_transforms(&self) {
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

    /// Says in the Binding's status (so on its policy) that the WDS cache of `gr`, which it
    /// needs, cannot be filled, once that cache's watch is stuck (a cache filling at start-up
    /// is no error): the Binding waits, its ManifestWorks stay as they are, and until now only
    /// the hub's log said why. The next full pass replaces it.
    pub(super) async fn report_stuck_cache(
        &self,
        api: &Api<Binding>,
        binding: &Binding,
        gr: &GroupResource,
    ) -> Result<(), Error> {
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

    /// Writes how far the Binding's objects got on each WEC into its BindingPolicy's status, when
    /// that changed. Bursts of ManifestWork status changes arrive as one pass, so they are
    /// written once.
    pub(super) async fn report_propagation(&self, binding: &Binding) -> Result<(), Error> {
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

    /// Tells each WDS object of `objects` that the WEC of `mailbox` could not apply it (an Event
    /// on it, through the paced queue). OCM's mailbox is its WEC's name.
    pub(super) fn tell_unapplied(&self, mailbox: &str, objects: &[Unapplied]) {
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
}

/// Applies our part of the status of `name` (forced: the fields are ours). One deleted meanwhile
/// is done.
pub(super) async fn apply_status<K>(api: &Api<K>, name: &str, status: &serde_json::Value) -> Result<(), Error>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let params = PatchParams::apply(field_manager::TRANSPORT).force();
    match api.patch_status(name, &params, &Patch::Apply(status)).await {
        Err(err) if failure(&err) == Failure::Moot => Ok(()),
        written => Ok(written.map(|_| ())?),
    }
}
