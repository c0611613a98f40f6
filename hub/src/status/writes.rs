//! The status controller's writes, with the field manager `Status`: by server-side apply
//! (forced: these fields are ours) a workload object's `.status` (status subresource, so labels
//! and spec are never touched), CombinedStatuses, a StatusCollector's or HealthRule's status and a
//! BindingPolicy's health; by merge patch a
//! Binding's `StatusCollectorsAvailable` condition (see [`apply_binding_condition`]).

use k8s_openapi::api::core::v1::Namespace;
use ks_shared::api::{
    Binding, BindingPolicy, CombinedStatus, Condition, HealthRule, HealthRuleStatus, PolicyHealth, StatusCollector,
    StatusCollectorStatus,
};
use ks_shared::names::field_manager;
use kube::api::{Api, DeleteParams, DynamicObject, ObjectMeta, Patch, PatchParams, PostParams};
use kube::discovery::ApiResource;
use kube::{Client, Resource, ResourceExt};
use serde_json::{Value as Json, json};

use super::state::WorkloadRef;

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
/// the apiserver stored (it may prune or default). Through the status subresource, which never
/// creates an object: one deleted meanwhile stays deleted (404). A resource without one keeps
/// `.status` in the object itself, where an apply would create a missing object: the apply names
/// the object's `uid`, which the apiserver refuses (409) for an object that is gone or made again
/// under its name; it carries nothing but `.status`, so labels and spec stay the owner's.
pub async fn apply_object_status(
    wds: &Client,
    resource: &ApiResource,
    key: &WorkloadRef,
    target: StatusTarget<'_>,
    status: &Json,
) -> kube::Result<StatusWritten> {
    let mut metadata = json!({"name": key.name});
    let api: Api<DynamicObject> = match key.namespace() {
        Some(namespace) => {
            metadata["namespace"] = json!(namespace);
            Api::namespaced_with(wds.clone(), namespace, resource)
        }
        None => Api::all_with(wds.clone(), resource),
    };
    if let StatusTarget::Object { uid } = target {
        metadata["uid"] = json!(uid);
    }
    let body =
        json!({"apiVersion": resource.api_version, "kind": resource.kind, "metadata": metadata, "status": status});
    let stored = match target {
        StatusTarget::Subresource => apply_status(&api, &key.name, body).await,
        StatusTarget::Object { .. } => api.patch(&key.name, &apply_params(), &Patch::Apply(&body)).await,
    };
    match stored {
        Ok(stored) => Ok(StatusWritten::Stored(stored.data.get("status").cloned())),
        // Deleted meanwhile (named by its UID: a 409 for the object itself). One made again
        // under its name refuses the old UID with a 422, an error like any refusal.
        Err(kube::Error::Api(e))
            if e.code == 404 || (e.code == 409 && matches!(target, StatusTarget::Object { .. })) =>
        {
            Ok(StatusWritten::Gone)
        }
        Err(err) => Err(err),
    }
}

/// What a write of a workload object's `.status` came to.
#[derive(Debug, PartialEq)]
pub enum StatusWritten {
    /// Written: the status the apiserver stored (it may prune or default).
    Stored(Option<Json>),
    /// The object is gone: nothing to write to.
    Gone,
}

/// Where a workload object's `.status` is written.
#[derive(Clone, Copy, Debug)]
pub enum StatusTarget<'a> {
    /// Its `status` subresource.
    Subresource,
    /// The object itself (its resource has no status subresource), the incarnation with `uid`.
    Object { uid: &'a str },
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

/// Sets our part of the status of the BindingPolicy `policy`: its `health` and `Healthy`
/// condition (server-side apply, forced: the fields are ours; the binding controller's and the
/// transport's stay theirs). Only on a policy whose status the binding controller has written,
/// which holds the fields the schema requires; one deleted meanwhile needs none. The apply names
/// the policy's UID: one deleted and made again under its name since is not given the health
/// of its predecessor's objects (the apiserver answers 409, and the next try reads it anew).
pub async fn apply_policy_health(
    wds: &Client,
    policy: &BindingPolicy,
    health: &PolicyHealth,
    condition: &Condition,
) -> kube::Result<()> {
    let name = policy.name_any();
    let body = json!({"apiVersion": BindingPolicy::api_version(&()), "kind": BindingPolicy::kind(&()),
                      "metadata": {"name": name, "uid": policy.uid()},
                      "status": {"health": health, "conditions": [condition]}});
    let applied = apply_status(&Api::<BindingPolicy>::all(wds.clone()), &name, body).await;
    ignore_code(applied.map(|_| ()), 404)
}

/// Sets a HealthRule's status; one deleted meanwhile needs none (an apply to the status
/// subresource never creates: the apiserver answers 404).
pub async fn apply_rule_status(wds: &Client, name: &str, status: &HealthRuleStatus) -> kube::Result<()> {
    let body = json!({"apiVersion": HealthRule::api_version(&()), "kind": HealthRule::kind(&()),
                      "metadata": {"name": name}, "status": status});
    let applied = apply_status(&Api::<HealthRule>::all(wds.clone()), name, body).await;
    ignore_code(applied.map(|_| ()), 404)
}

/// Sets a StatusCollector's status; one deleted meanwhile needs none.
pub async fn apply_collector_status(wds: &Client, name: &str, status: &StatusCollectorStatus) -> kube::Result<()> {
    let body = json!({"apiVersion": StatusCollector::api_version(&()), "kind": StatusCollector::kind(&()),
                      "metadata": {"name": name}, "status": status});
    let applied = apply_status(&Api::<StatusCollector>::all(wds.clone()), name, body).await;
    ignore_code(applied.map(|_| ()), 404)
}

/// Sets the Binding's one condition of ours. The transport owns `observedGeneration` and
/// `errors`; we write only the conditions, by merge patch (an apply would have to carry the
/// `observedGeneration` the schema requires). The list is written whole, keeping the others'
/// conditions as cached, with no resourceVersion: no other writer of ours sets Binding conditions,
/// so the transport's frequent status writes never make this one conflict. A Binding without a status waits for the transport's first status write, which
/// brings it back (a status without `observedGeneration` is invalid); one deleted needs none.
pub async fn apply_binding_condition(wds: &Client, binding: &Binding, condition: &Condition) -> kube::Result<()> {
    let Some(patch) = binding_condition_patch(binding, condition) else {
        return Ok(());
    };
    let params = PatchParams {
        field_manager: Some(field_manager::STATUS.into()),
        ..Default::default()
    };
    let api = Api::<Binding>::all(wds.clone());
    let patched = api
        .patch_status(&binding.name_any(), &params, &Patch::Merge(&patch))
        .await;
    ignore_code(patched.map(|_| ()), 404)
}

/// The merge patch setting `condition` among the Binding's conditions (replacing ours, keeping
/// the others); none while the Binding has no status.
fn binding_condition_patch(binding: &Binding, condition: &Condition) -> Option<Json> {
    let mut conditions = binding.status.as_ref()?.conditions.clone();
    match conditions.iter_mut().find(|c| c.type_ == condition.type_) {
        Some(ours) => *ours = condition.clone(),
        None => conditions.push(condition.clone()),
    }
    Some(json!({"status": {"conditions": conditions}}))
}

#[cfg(test)]
mod tests {
    use ks_shared::api::BindingStatus;

    use super::*;
    use ks_tests::mock;

    fn condition(type_: &str, status: &str) -> Condition {
        Condition {
            type_: type_.into(),
            status: status.into(),
            reason: "R".into(),
            message: "M".into(),
            last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            ),
        }
    }

    fn binding(status: Option<BindingStatus>) -> Binding {
        Binding {
            metadata: ObjectMeta {
                name: Some("p".into()),
                resource_version: Some("7".into()),
                ..Default::default()
            },
            spec: Default::default(),
            status,
        }
    }

    #[tokio::test]
    async fn the_binding_condition_leaves_observed_generation_and_other_conditions_alone() {
        let ours = condition("StatusCollectorsAvailable", "True");
        let others = condition("SomeoneElses", "False");
        let binding = binding(Some(BindingStatus {
            observed_generation: 3,
            conditions: vec![others.clone(), condition("StatusCollectorsAvailable", "False")],
            ..Default::default()
        }));
        let (client, mut server) = mock::client();
        let stored = serde_json::to_value(&binding).unwrap();
        let (written, asked) = tokio::join!(
            apply_binding_condition(&client, &binding, &ours),
            server.answer(200, stored)
        );
        written.unwrap();
        assert_eq!(asked.method, "PATCH");
        assert!(
            asked
                .uri
                .starts_with("/apis/control.kubestellar.io/v1alpha1/bindings/p/status"),
            "{}",
            asked.uri
        );
        // A merge patch takes no field ownership, and others' conditions are kept.
        assert_eq!(asked.content_type, "application/merge-patch+json");
        assert_eq!(asked.body, json!({"status": {"conditions": [others, ours]}}));
    }

    #[tokio::test]
    async fn a_policys_health_is_applied_to_its_status_naming_its_uid() {
        let mut policy = BindingPolicy::new("p", Default::default());
        policy.metadata.uid = Some("uid-p".into());
        let health = PolicyHealth {
            healthy: "1/1".into(),
            per_wec: Vec::new(),
        };
        let ours = condition("Healthy", "True");
        let (client, mut server) = mock::client();
        let (written, asked) = tokio::join!(
            apply_policy_health(&client, &policy, &health, &ours),
            server.answer(200, serde_json::to_value(&policy).unwrap())
        );
        written.unwrap();
        assert!(
            asked
                .uri
                .starts_with("/apis/control.kubestellar.io/v1alpha1/bindingpolicies/p/status?"),
            "{}",
            asked.uri
        );
        assert_eq!(asked.content_type, "application/apply-patch+yaml");
        assert_eq!(
            asked.body["metadata"]["uid"], "uid-p",
            "a policy made again is not ours"
        );
        assert_eq!(asked.body["status"]["conditions"], json!([ours]));

        // A policy made again under the name: 409, an error to retry; deleted: 404, done.
        for (code, fails) in [(409, true), (404, false)] {
            let (client, mut server) = mock::client();
            let refused = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code,
                                 "reason": "Conflict", "message": "no"});
            let (written, _) = tokio::join!(
                apply_policy_health(&client, &policy, &health, &ours),
                server.answer(code, refused)
            );
            assert_eq!(written.is_err(), fails, "{code}");
        }
    }

    #[tokio::test]
    async fn a_status_without_a_subresource_is_applied_to_the_object_naming_its_uid_alone() {
        let resource = ApiResource {
            group: "example.com".into(),
            version: "v1".into(),
            api_version: "example.com/v1".into(),
            kind: "Gizmo".into(),
            plural: "gizmos".into(),
        };
        let key = WorkloadRef::new("example.com", "gizmos", "ns", "g");
        let status = json!({"phase": "Running"});
        let target = StatusTarget::Object { uid: "uid-g" };
        let stored = json!({"apiVersion": "example.com/v1", "kind": "Gizmo",
                            "metadata": {"name": "g", "namespace": "ns", "uid": "uid-g"},
                            "spec": {"size": 1}, "status": status});
        let (client, mut server) = mock::client();
        let (written, asked) = tokio::join!(
            apply_object_status(&client, &resource, &key, target, &status),
            server.answer(200, stored)
        );
        assert_eq!(written.unwrap(), StatusWritten::Stored(Some(status.clone())));
        assert_eq!(asked.method, "PATCH");
        // The object itself, not a status subresource it does not have.
        assert!(
            asked.uri.starts_with("/apis/example.com/v1/namespaces/ns/gizmos/g?"),
            "{}",
            asked.uri
        );
        assert_eq!(asked.content_type, "application/apply-patch+yaml");
        // Its UID, so that a missing object is refused rather than created, and nothing but
        // the status: labels and spec stay the owner's.
        assert_eq!(
            asked.body,
            json!({"apiVersion": "example.com/v1", "kind": "Gizmo",
                   "metadata": {"name": "g", "namespace": "ns", "uid": "uid-g"}, "status": status})
        );

        // Gone (409 for a UID that names no object; 404): nothing to write to. Made again under
        // the name (422: the UID cannot change) or failing: an error.
        for (code, gone) in [(409, true), (404, true), (422, false), (500, false)] {
            let (client, mut server) = mock::client();
            let refused = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code,
                                 "reason": "Refused", "message": "no"});
            let (written, _) = tokio::join!(
                apply_object_status(&client, &resource, &key, target, &status),
                server.answer(code, refused)
            );
            match written {
                Ok(written) => assert!(gone && written == StatusWritten::Gone, "{code}"),
                Err(_) => assert!(!gone, "{code}"),
            }
        }
        // Through a status subresource a 409 is a conflict like any other.
        let (client, mut server) = mock::client();
        let conflict = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 409,
                              "reason": "Conflict", "message": "no"});
        let (written, asked) = tokio::join!(
            apply_object_status(&client, &resource, &key, StatusTarget::Subresource, &status),
            server.answer(409, conflict)
        );
        assert!(written.is_err());
        assert!(
            asked
                .uri
                .starts_with("/apis/example.com/v1/namespaces/ns/gizmos/g/status?"),
            "{}",
            asked.uri
        );
        assert!(asked.body["metadata"].get("uid").is_none());
    }

    #[test]
    fn our_condition_is_added_after_the_others() {
        let others = condition("SomeoneElses", "False");
        let ours = condition("StatusCollectorsAvailable", "True");
        let binding = binding(Some(BindingStatus {
            observed_generation: 3,
            conditions: vec![others.clone()],
            errors: vec!["e".into()],
            ..Default::default()
        }));
        let patch = binding_condition_patch(&binding, &ours).unwrap();
        assert_eq!(patch["status"], json!({"conditions": [others, ours]}));
    }

    #[tokio::test]
    async fn a_binding_without_status_waits_for_the_transport() {
        // The schema requires observedGeneration, which only the transport writes: a status of
        // conditions alone would be refused. The transport's first write brings the Binding back.
        let (client, server) = mock::client();
        drop(server);
        let ours = condition("StatusCollectorsAvailable", "True");
        apply_binding_condition(&client, &binding(None), &ours).await.unwrap();
    }
}
