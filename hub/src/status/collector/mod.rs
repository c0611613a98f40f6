//! StatusCollectors: their validation (docs/upstream-behaviour.md#statuscollectors) and the
//! CombinedStatus they compute with CEL (docs/upstream-behaviour.md#combinedstatus), free of the
//! upstream defects listed there: a null filter drops the row, `limit` is enforced (0, what a Go
//! client sends when it is unset, is no limit), COUNT of a subject counts its non-null values, AVG
//! divides by the values it averaged, a failing subject spoils only its own column, every
//! evaluation error is reported, and an unhashable `groupBy` value is an error.
//!
//! A collector is compiled once ([`Collector::new`], `compile`): its spec is validated and each
//! CEL expression parsed and checked against limits that bound its evaluation (`expression`). It
//! is then evaluated against one workload object and the reports of its WECs ([`combine`],
//! `evaluate`): one row per WEC, filtered, then selected or grouped and aggregated into
//! CombinedStatus cells (`cells`). Everything is sorted, so equal inputs give equal results and a
//! controller can compare them to decide whether to write.

mod cells;
mod compile;
mod estimate;
mod evaluate;
mod expression;
#[cfg(test)]
mod tests;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use ks_shared::api::NamedStatusCombination;
use ks_shared::names::{REPORT_NAMESPACE, combined_status_label};

pub use compile::Collector;
pub use evaluate::{WecReport, combine, probe};
pub use expression::CEL_STACK;

/// Whether `expression` compiles as a collector's expressions do (parsed and checked against
/// the limits that bound its evaluation); the compiler's error if not.
pub fn check_expression(expression: &str) -> Result<(), String> {
    expression::compile(expression).map(drop)
}

use crate::binding::ObjectIdentity;

/// Name, namespace, the five labels and the owner reference of the CombinedStatus for an object
/// and a BindingPolicy (docs/upstream-behaviour.md#combinedstatus): named `<objectUID>.<policyUID>`,
/// in the object's namespace or `kubestellar-report` for a cluster-scoped object, owned (not
/// controlled) by the object. A label whose value cannot be a label value (object and policy names
/// may be longer than 63 characters, RBAC names hold `:`) is left out: the apiserver would refuse
/// the whole CombinedStatus, as it does upstream's.
pub fn combined_status_metadata(
    object: &ObjectIdentity,
    object_uid: &str,
    policy: &str,
    policy_uid: &str,
) -> ObjectMeta {
    let namespace = if object.is_cluster_scoped() {
        REPORT_NAMESPACE
    } else {
        object.namespace.as_str()
    };
    let labels = [
        (combined_status_label::API_GROUP, object.group.as_str()),
        (combined_status_label::RESOURCE, object.resource.as_str()),
        (combined_status_label::NAMESPACE, object.namespace.as_str()),
        (combined_status_label::NAME, object.name.as_str()),
        (combined_status_label::BINDING_POLICY, policy),
    ];
    let api_version = if object.group.is_empty() {
        object.version.clone()
    } else {
        format!("{}/{}", object.group, object.version)
    };
    ObjectMeta {
        name: Some(format!("{object_uid}.{policy_uid}")),
        namespace: Some(namespace.to_string()),
        labels: Some(
            labels
                .iter()
                .filter(|(_, v)| is_label_value(v))
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        ),
        owner_references: Some(vec![OwnerReference {
            api_version,
            kind: object.kind.clone(),
            name: object.name.clone(),
            uid: object_uid.to_string(),
            ..Default::default()
        }]),
        ..Default::default()
    }
}

/// Whether the apiserver accepts `value` as a label value: at most 63 characters, alphanumeric
/// at both ends, `-`, `_` and `.` inside.
fn is_label_value(value: &str) -> bool {
    let alphanumeric = |c: Option<char>| c.is_none_or(|c| c.is_ascii_alphanumeric());
    value.len() <= 63
        && value.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        && alphanumeric(value.chars().next())
        && alphanumeric(value.chars().last())
}

/// Lines for a StatusCollector's `status.errors` from one of its results, for the object that
/// `subject` names (e.g. `apps/deployments ns1/web`): evaluation errors reach the collector's
/// owner, not only the CombinedStatus (fixing upstream's defect,
/// docs/upstream-behaviour.md#combinedstatus).
pub fn evaluation_errors(subject: &str, result: &NamedStatusCombination) -> Vec<String> {
    let column = |name: &str| {
        if name.is_empty() {
            "filter".to_string()
        } else {
            format!("column {name:?}")
        }
    };
    let rows = result.row_errors.iter().map(|e| {
        format!(
            "{subject}, WEC {}, {}: {}",
            e.wec.cluster_id,
            column(&e.column_name),
            e.error
        )
    });
    // One without a column is the whole evaluation's (`sandbox`).
    let aggregations = result.aggregation_errors.iter().map(|e| match e.column_name.as_str() {
        "" => format!("{subject}: {}", e.error),
        name => format!("{subject}, {}: {}", column(name), e.error),
    });
    rows.chain(aggregations).collect()
}
