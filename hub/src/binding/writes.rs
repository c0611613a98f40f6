//! The binding controller's writes: the Binding (server-side apply, owned by its policy), the
//! policy's status (server-side apply on the status subresource) and the policy's finalizer.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
use ks_shared::api::{
    Binding, BindingPolicy, BindingPolicyStatus, BindingSpec, Condition, condition_reason, condition_type,
};
use ks_shared::names::field_manager;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Resource, ResourceExt};
use serde_json::json;

/// Writes the Binding of `policy` with exactly `spec`: created when absent, else its spec and
/// owner replaced by a JSON patch. We own the whole spec, so no resourceVersion: the transport's
/// finalizer writes never make ours conflict, and what others put in metadata stays. Not
/// server-side apply: an apply drops the empty lists of a Binding that selects nothing, leaving
/// no spec at all.
pub async fn write_binding(
    api: &Api<Binding>,
    policy: &BindingPolicy,
    exists: bool,
    spec: BindingSpec,
) -> kube::Result<()> {
    let name = policy.name_any();
    let owner = OwnerReference {
        api_version: BindingPolicy::api_version(&()).into_owned(),
        kind: BindingPolicy::kind(&()).into_owned(),
        name: name.clone(),
        uid: policy.uid().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(false),
    };
    if exists {
        let patch: json_patch::Patch = serde_json::from_value(json!([
            {"op": "replace", "path": "/spec", "value": spec},
            {"op": "add", "path": "/metadata/ownerReferences", "value": [owner]},
        ]))
        .expect("a well-formed JSON patch");
        let params = PatchParams {
            field_manager: Some(field_manager::BINDING.into()),
            ..Default::default()
        };
        api.patch(&name, &params, &Patch::<()>::Json(patch)).await?;
    } else {
        let params = PostParams {
            field_manager: Some(field_manager::BINDING.into()),
            ..Default::default()
        };
        let metadata = ObjectMeta {
            name: Some(name.clone()),
            owner_references: Some(vec![owner]),
            ..Default::default()
        };
        let binding = Binding {
            metadata,
            spec,
            status: None,
        };
        api.create(&params, &binding).await?;
    }
    Ok(())
}

/// Why the Binding found under `policy`'s name is not the policy's to write, if it is not: its
/// controller owner is no BindingPolicy of that name (one written by hand, or by another tool).
/// Rewriting it would take it over, and deleting the policy would then have it collected, with
/// what it delivers withdrawn from every WEC. One owned by an earlier policy of the same name
/// (another UID) is the policy's: upstream's controller writes them so, and a policy deleted and
/// created again takes its predecessor's Binding over.
pub fn foreign_binding(policy: &str, binding: &Binding) -> Option<String> {
    let controller = binding.owner_references().iter().find(|o| o.controller == Some(true));
    let ours = controller.is_some_and(|o| {
        o.kind == BindingPolicy::kind(&()) && o.api_version == BindingPolicy::api_version(&()) && o.name == policy
    });
    (!ours).then(|| {
        let owner = controller.map_or("no controller owner".to_string(), |o| {
            format!("its controller owner is {} {}", o.kind, o.name)
        });
        format!(
            "a Binding named {policy} exists that this policy does not own ({owner}): it is left as it is; \
             delete it, or rename the policy"
        )
    })
}

/// The most a Binding may take, serialized: etcd stores at most 1.5 MiB per object (its default
/// `--max-request-bytes`), and the apiserver adds metadata (managed fields, finalizers).
pub const MAX_BINDING_BYTES: usize = 1_500_000;

/// Why a Binding with `spec` cannot be stored, if it cannot: its size (a policy selecting
/// thousands of objects), so the policy's status says so rather than the write failing forever.
pub fn too_large(spec: &BindingSpec) -> Option<String> {
    let bytes = serde_json::to_vec(spec).map_or(usize::MAX, |json| json.len());
    (bytes > MAX_BINDING_BYTES).then(|| {
        format!(
            "the Binding would take {:.2} MB, more than the {:.2} MB an object may take: select fewer objects, \
             or split the policy",
            bytes as f64 / 1e6,
            MAX_BINDING_BYTES as f64 / 1e6
        )
    })
}

/// The status the policy should have: errors, plus `Synced` (is the Binding written) and
/// `Ready` (does the policy work as written), keeping transition times of unchanged conditions.
/// `resolved` is the generation the Binding and errors come from: the policy in the cache may be
/// newer, its edit not yet resolved, and claiming to have observed it would hide the edit.
pub fn desired_status(
    policy: &BindingPolicy,
    resolved: i64,
    errors: Vec<String>,
    write_error: Option<String>,
    selected: (usize, usize),
) -> BindingPolicyStatus {
    let previous = policy.status.clone().unwrap_or_default();
    let condition = |type_: &str, ok: bool, reason: &str, message: String| {
        let status = if ok { "True" } else { "False" }.to_string();
        let unchanged = previous
            .condition(type_)
            .filter(|c| c.status == status && c.reason == reason && c.message == message);
        Condition {
            type_: type_.into(),
            last_transition_time: unchanged
                .map(|c| c.last_transition_time.clone())
                .unwrap_or_else(|| Time(k8s_openapi::jiff::Timestamp::now())),
            status,
            reason: reason.into(),
            message,
        }
    };
    let synced = match &write_error {
        None => condition(
            condition_type::SYNCED,
            true,
            condition_reason::RECONCILE_SUCCESS,
            "Binding is up to date".into(),
        ),
        Some(err) => condition(
            condition_type::SYNCED,
            false,
            condition_reason::RECONCILE_ERROR,
            err.clone(),
        ),
    };
    let ready = match errors.first() {
        None => condition(
            condition_type::READY,
            write_error.is_none(),
            if write_error.is_none() {
                condition_reason::AVAILABLE
            } else {
                condition_reason::UNAVAILABLE
            },
            format!("selects {} objects for {} WECs", selected.0, selected.1),
        ),
        Some(first) => condition(
            condition_type::READY,
            false,
            condition_reason::RECONCILE_ERROR,
            first.clone(),
        ),
    };
    BindingPolicyStatus {
        observed_generation: resolved,
        conditions: vec![synced, ready],
        errors,
        // The transport's and the status controller's.
        propagation: None,
        health: None,
    }
}

/// Whether the status differs from the one the policy has, in what this controller writes
/// (ignoring condition order, the transport's condition and propagation, and the status
/// controller's condition and health).
pub fn status_differs(policy: &BindingPolicy, desired: &BindingPolicyStatus) -> bool {
    let Some(current) = &policy.status else { return true };
    let ours = |c: &&Condition| c.type_ != condition_type::PROPAGATED && c.type_ != condition_type::HEALTHY;
    current.observed_generation != desired.observed_generation
        || current.errors != desired.errors
        || current.conditions.iter().filter(ours).count() != desired.conditions.len()
        || desired
            .conditions
            .iter()
            .any(|d| current.condition(&d.type_) != Some(d))
}

pub async fn apply_status(api: &Api<BindingPolicy>, name: &str, status: &BindingPolicyStatus) -> kube::Result<()> {
    let patch = json!({
        "apiVersion": BindingPolicy::api_version(&()),
        "kind": BindingPolicy::kind(&()),
        "status": status,
    });
    api.patch_status(
        name,
        &PatchParams::apply(field_manager::BINDING).force(),
        &Patch::Apply(&patch),
    )
    .await?;
    Ok(())
}

/// What the API server said, without the debug dump of the whole response.
pub fn error_message(err: &kube::Error) -> String {
    match err {
        kube::Error::Api(status) => status.message.clone(),
        other => other.to_string(),
    }
}

/// Sets the status-request labels of a WDS object to `request` with server-side apply: labels
/// we no longer apply are removed, and labels someone else set are never touched.
///
/// The apply names the object's `uid`: an apply creates what is missing, and a user who deleted
/// the object (or deleted and created it again) must not find it brought back, or another
/// object's labels changed. The apiserver then answers 409 (a precondition failed), and the
/// controller's next try reads the object from its cache again.
pub async fn apply_status_request_labels(
    wds: &kube::Client,
    id: &crate::binding::ObjectIdentity,
    uid: &str,
    request: super::state::StatusRequest,
) -> kube::Result<()> {
    use ks_shared::names::{LABEL_TRUE, MULTI_WEC_STATUS_LABEL, SINGLETON_STATUS_LABEL};
    let resource = kube::discovery::ApiResource {
        group: id.group.clone(),
        version: id.version.clone(),
        api_version: if id.group.is_empty() {
            id.version.clone()
        } else {
            format!("{}/{}", id.group, id.version)
        },
        kind: id.kind.clone(),
        plural: id.resource.clone(),
    };
    let mut labels = serde_json::Map::new();
    if request.singleton {
        labels.insert(SINGLETON_STATUS_LABEL.into(), LABEL_TRUE.into());
    }
    if request.multi_wec {
        labels.insert(MULTI_WEC_STATUS_LABEL.into(), LABEL_TRUE.into());
    }
    let mut metadata = json!({"name": id.name, "uid": uid});
    if !labels.is_empty() {
        metadata["labels"] = labels.into();
    }
    let api: Api<kube::api::DynamicObject> = if id.namespace.is_empty() {
        Api::all_with(wds.clone(), &resource)
    } else {
        metadata["namespace"] = id.namespace.clone().into();
        Api::namespaced_with(wds.clone(), &id.namespace, &resource)
    };
    let patch = json!({"apiVersion": resource.api_version, "kind": resource.kind, "metadata": metadata});
    api.patch(
        &id.name,
        &PatchParams::apply(STATUS_REQUEST_FIELD_MANAGER).force(),
        &Patch::Apply(&patch),
    )
    .await?;
    Ok(())
}

/// Our field manager for the status-request labels on workload objects, apart from everything
/// else so that applying only these labels never releases other fields.
const STATUS_REQUEST_FIELD_MANAGER: &str = "kubestellar-status-request";

#[cfg(test)]
mod tests {
    use ks_shared::api::BindingPolicySpec;

    use super::*;

    fn condition(type_: &str, status: &str) -> Condition {
        let now = Time("2026-12-07T06:00:00Z".parse().unwrap());
        Condition::following(None, now, type_, status, "Some", String::new())
    }

    #[test]
    fn the_other_controllers_conditions_are_no_difference() {
        let ours = vec![
            condition(condition_type::SYNCED, "True"),
            condition(condition_type::READY, "True"),
        ];
        let desired = BindingPolicyStatus {
            observed_generation: 2,
            conditions: ours.clone(),
            ..Default::default()
        };
        let mut policy = BindingPolicy::new("bp", BindingPolicySpec::default());
        let mut conditions = ours;
        conditions.push(condition(condition_type::PROPAGATED, "False"));
        conditions.push(condition(condition_type::HEALTHY, "False"));
        policy.status = Some(BindingPolicyStatus {
            observed_generation: 2,
            conditions,
            ..Default::default()
        });
        assert!(!status_differs(&policy, &desired));
        policy.status.as_mut().unwrap().conditions.remove(0);
        assert!(status_differs(&policy, &desired), "one of ours missing");
    }
}
