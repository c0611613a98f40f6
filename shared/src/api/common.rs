//! Pieces shared by several kinds: conditions, the policy-style status, label-selector schemas.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};

use super::PolicyHealth;

/// A condition on a BindingPolicy or Binding. Upstream requires all five fields.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// `Ready`, `Synced`, `StatusCollectorsAvailable`, `Propagated` or `Healthy`.
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    pub last_transition_time: Time,
    pub reason: String,
    pub message: String,
}

/// Condition types defined by upstream.
pub mod condition_type {
    pub const READY: &str = "Ready";
    pub const SYNCED: &str = "Synced";
    pub const STATUS_COLLECTORS_AVAILABLE: &str = "StatusCollectorsAvailable";
    /// Ours: every object of a BindingPolicy applied and available on every WEC it chose.
    pub const PROPAGATED: &str = "Propagated";
    /// Ours: every object of a BindingPolicy healthy on every WEC it chose.
    pub const HEALTHY: &str = "Healthy";
}

/// Condition reasons defined by upstream.
pub mod condition_reason {
    pub const AVAILABLE: &str = "Available";
    pub const UNAVAILABLE: &str = "Unavailable";
    pub const CREATING: &str = "Creating";
    pub const DELETING: &str = "Deleting";
    pub const RECONCILE_SUCCESS: &str = "ReconcileSuccess";
    pub const RECONCILE_ERROR: &str = "ReconcileError";
    pub const RECONCILE_PAUSED: &str = "ReconcilePaused";
}

/// Status shape shared by BindingPolicy and Binding.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PolicyStatus {
    pub observed_generation: i64,
    /// Keyed by type, so that each controller server-side applies its own conditions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<String>,
    /// BindingPolicy only: how far its objects got on each WEC (written by the transport).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub propagation: Option<Propagation>,
    /// BindingPolicy only: its objects' health on each WEC (written by the status controller).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health: Option<PolicyHealth>,
}

/// How far a policy's objects got on its WECs, from OCM's reports on the ManifestWorks.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Propagation {
    /// WECs with every object applied and available, of the WECs chosen: e.g. `2/2`.
    pub wecs: String,
    /// Objects applied on their WECs, of the objects times WECs: e.g. `14/14`.
    pub applied: String,
    /// One entry per chosen WEC.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["wec"]))]
    pub per_wec: Vec<WecPropagation>,
}

/// One WEC's counts of a policy's objects.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WecPropagation {
    pub wec: String,
    /// Selected by the policy (in its Binding).
    pub selected: i64,
    /// In a ManifestWork for this WEC.
    pub delivered: i64,
    /// Applied on the WEC, as OCM reports.
    pub applied: i64,
    /// Present on the WEC, as OCM reports.
    pub available: i64,
}

impl Condition {
    /// The condition `type_` as now said, following `previous`: its transition time stays that
    /// of `previous` while its status does not change.
    pub fn following(
        previous: Option<&Condition>,
        now: Time,
        type_: &str,
        status: &str,
        reason: &str,
        message: String,
    ) -> Condition {
        Condition {
            type_: type_.to_string(),
            status: status.to_string(),
            last_transition_time: previous
                .filter(|p| p.status == status)
                .map_or(now, |p| p.last_transition_time.clone()),
            reason: reason.to_string(),
            message,
        }
    }
}

impl PolicyStatus {
    /// The condition of the given type, if set.
    pub fn condition(&self, type_: &str) -> Option<&Condition> {
        self.conditions.iter().find(|c| c.type_ == type_)
    }
}

/// Label value syntax (empty, or alphanumeric ends with `-_.` inside; at most 63 characters).
const LABEL_VALUE_PATTERN: &str = "^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$";
/// Qualified label key syntax: optional DNS-subdomain prefix and `/`, then a name.
const LABEL_KEY_PATTERN: &str =
    "^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$";
const OPERATOR_PATTERN: &str = "^(In|NotIn|Exists|DoesNotExist)$";

/// Schema of one `metav1.LabelSelector`, atomic as upstream declares it. With `strict`, keys,
/// values and operators carry the patterns upstream puts on `clusterSelectors`.
fn label_selector_schema(strict: bool) -> serde_json::Value {
    let string = |pattern: &str| {
        if strict {
            serde_json::json!({"type": "string", "pattern": pattern})
        } else {
            serde_json::json!({"type": "string"})
        }
    };
    let value = string(LABEL_VALUE_PATTERN);
    serde_json::json!({
        "type": "object",
        "description": "A label query over a set of resources: matchLabels and matchExpressions are ANDed; {} matches everything.",
        "properties": {
            "matchLabels": {"type": "object", "additionalProperties": value},
            "matchExpressions": {
                "type": "array",
                "x-kubernetes-list-type": "atomic",
                "items": {
                    "type": "object",
                    "required": ["key", "operator"],
                    "properties": {
                        "key": string(LABEL_KEY_PATTERN),
                        "operator": string(OPERATOR_PATTERN),
                        "values": {"type": "array", "x-kubernetes-list-type": "atomic", "items": value}
                    }
                }
            }
        },
        "x-kubernetes-map-type": "atomic"
    })
}

fn selector_list(strict: bool) -> Schema {
    let items = label_selector_schema(strict);
    json_schema!({"type": "array", "items": items})
}

/// Schema for a list of label selectors (object and namespace selectors).
pub(crate) fn label_selectors(_: &mut SchemaGenerator) -> Schema {
    selector_list(false)
}

/// Schema for `clusterSelectors`, with upstream's syntax patterns.
pub(crate) fn cluster_selectors(_: &mut SchemaGenerator) -> Schema {
    selector_list(true)
}

/// Schema for a free-form JSON value: any type, kept verbatim by the apiserver.
pub(crate) fn free_form(_: &mut SchemaGenerator) -> Schema {
    json_schema!({"x-kubernetes-preserve-unknown-fields": true})
}
