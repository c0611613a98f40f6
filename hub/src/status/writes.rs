//! The status controller's writes, all by server-side apply with the field manager `Status`
//! (forced: these fields are ours): a workload object's `.status` (status subresource, so labels
//! and spec are never touched), CombinedStatuses, a StatusCollector's status and a Binding's
//! `StatusCollectorsAvailable` condition.

use k8s_openapi::api::core::v1::Namespace;
use ks_shared::api::{Binding, CombinedStatus, Condition, StatusCollector, StatusCollectorStatus};
use ks_shared::names::field_manager;
use kube::api::{Api, DeleteParams, DynamicObject, ObjectMeta, Patch, PatchParams, PostParams};
use kube::discovery::ApiResource;
use kube::{Client, Resource, ResourceExt};
use serde_json::{Value as Json, json};

use super::state::ObjectKey;

fn apply_params() -> PatchParams {
    PatchParams::apply(field_manager::STATUS).force()
}

/// Applies `status` to the status subresource of `name`; returns the stored object.
async fn apply_status<K>(api: &Api<K>, name: &str, body: Json) -> kube::Result<K>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.patch_status(name, &apply_params(), &Patch::Apply(&body)).await
}

/// Sets a workload object's `.status` to `status` as far as we own it: fields we applied before
/// and leave out now are removed, so `{}` withdraws everything we returned. Returns the status
/// the apiserver stored (it may prune or default). The status subresource never creates an
/// object, so a workload object deleted meanwhile stays deleted (404).
pub async fn apply_object_status(
    wds: &Client,
    resource: &ApiResource,
    key: &ObjectKey,
    status: &Json,
) -> kube::Result<Option<Json>> {
    let mut metadata = json!({"name": key.name});
    let api: Api<DynamicObject> = match key.namespace() {
        Some(namespace) => {
            metadata["namespace"] = json!(namespace);
            Api::namespaced_with(wds.clone(), namespace, resource)
        }
        None => Api::all_with(wds.clone(), resource),
    };
    let body =
        json!({"apiVersion": resource.api_version, "kind": resource.kind, "metadata": metadata, "status": status});
    let stored = apply_status(&api, &key.name, body).await?;
    Ok(stored.data.get("status").cloned())
}

/// Writes a CombinedStatus (labels, owner and results are ours; what others add stays).
pub async fn apply_combined_status(wds: &Client, combined: &CombinedStatus) -> kube::Result<()> {
    let namespace = combined.namespace().unwrap_or_default();
    let api: Api<CombinedStatus> = Api::namespaced(wds.clone(), &namespace);
    let mut body = serde_json::to_value(combined).map_err(kube::Error::SerdeError)?;
    body["apiVersion"] = json!(CombinedStatus::api_version(&()));
    body["kind"] = json!(CombinedStatus::kind(&()));
    api.patch(&combined.name_any(), &apply_params(), &Patch::Apply(&body))
        .await?;
    Ok(())
}

/// Deletes a CombinedStatus no longer wanted; one already gone is fine.
pub async fn delete_combined_status(wds: &Client, namespace: &str, name: &str) -> kube::Result<()> {
    let api: Api<CombinedStatus> = Api::namespaced(wds.clone(), namespace);
    ignore_code(api.delete(name, &DeleteParams::default()).await.map(|_| ()), 404)
}

/// Creates a namespace (for CombinedStatuses of cluster-scoped objects) unless it exists.
pub async fn ensure_namespace(wds: &Client, name: &str) -> kube::Result<()> {
    let namespace = Namespace {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            ..Default::default()
        },
        ..Default::default()
    };
    let params = PostParams {
        field_manager: Some(field_manager::STATUS.into()),
        ..Default::default()
    };
    let created = Api::<Namespace>::all(wds.clone()).create(&params, &namespace).await;
    ignore_code(created.map(|_| ()), 409)
}

fn ignore_code(result: kube::Result<()>, code: u16) -> kube::Result<()> {
    match result {
        Err(kube::Error::Api(status)) if status.code == code => Ok(()),
        other => other,
    }
}

/// Sets a StatusCollector's status; one deleted meanwhile needs none.
pub async fn apply_collector_status(wds: &Client, name: &str, status: &StatusCollectorStatus) -> kube::Result<()> {
    let body = json!({"apiVersion": StatusCollector::api_version(&()), "kind": StatusCollector::kind(&()),
                      "metadata": {"name": name}, "status": status});
    let applied = apply_status(&Api::<StatusCollector>::all(wds.clone()), name, body).await;
    ignore_code(applied.map(|_| ()), 404)
}

/// Sets the Binding's one condition of ours. The schema requires `observedGeneration`, which is
/// the transport's: we apply the value it has (0 before the transport's first write) without
/// forcing, so we share it and never overwrite a newer one (that conflicts and is retried). A
/// Binding deleted meanwhile needs none.
pub async fn apply_binding_condition(wds: &Client, binding: &Binding, condition: &Condition) -> kube::Result<()> {
    let observed = binding.status.as_ref().map_or(0, |s| s.observed_generation);
    let name = binding.name_any();
    let body = json!({"apiVersion": Binding::api_version(&()), "kind": Binding::kind(&()), "metadata": {"name": name},
                      "status": {"observedGeneration": observed, "conditions": [condition]}});
    let api = Api::<Binding>::all(wds.clone());
    let params = PatchParams::apply(field_manager::STATUS);
    let applied = api.patch_status(&name, &params, &Patch::Apply(&body)).await;
    ignore_code(applied.map(|_| ()), 404)
}

/// Whether trying again can help: not when the apiserver rejected the request itself (invalid
/// status, no status subresource), which only a change of input can fix.
pub fn worth_retrying(err: &kube::Error) -> bool {
    match err {
        kube::Error::Api(status) => !(400..500).contains(&status.code) || [409, 429].contains(&status.code),
        _ => true,
    }
}
