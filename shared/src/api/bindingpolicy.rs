//! BindingPolicy: which workload objects go to which WECs, and how.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::{PolicyStatus, cluster_selectors, label_selectors};

/// Binds the workload objects selected by `downsync` to the WECs selected by `clusterSelectors`.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "control.kubestellar.io",
    version = "v1alpha1",
    kind = "BindingPolicy",
    doc = "BindingPolicy binds the workload objects selected by its downsync clauses to the WECs selected by its cluster selectors.",
    plural = "bindingpolicies",
    shortname = "bp",
    status = "BindingPolicyStatus",
    printcolumn = r#"{"name": "SYNCED", "type": "string", "jsonPath": ".status.conditions[?(@.type=='Synced')].status"}"#,
    printcolumn = r#"{"name": "READY", "type": "string", "jsonPath": ".status.conditions[?(@.type=='Ready')].status"}"#,
    printcolumn = r#"{"name": "REASON", "type": "string", "jsonPath": ".status.conditions[?(@.type=='Ready')].reason"}"#,
    printcolumn = r#"{"name": "WECS", "type": "string", "jsonPath": ".status.propagation.wecs"}"#,
    printcolumn = r#"{"name": "APPLIED", "type": "string", "jsonPath": ".status.propagation.applied"}"#,
    printcolumn = r#"{"name": "HEALTHY", "type": "string", "jsonPath": ".status.health.healthy"}"#,
    printcolumn = r#"{"name": "AGE", "type": "date", "jsonPath": ".metadata.creationTimestamp"}"#,
    printcolumn = r#"{"name": "MESSAGE", "type": "string", "jsonPath": ".status.conditions[?(@.type=='Ready')].message", "priority": 1}"#
)]
#[serde(rename_all = "camelCase")]
pub struct BindingPolicySpec {
    /// A WEC (ManagedCluster) is selected if it matches any of these; an empty list selects none,
    /// and `{}` selects all.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "cluster_selectors")]
    pub cluster_selectors: Vec<LabelSelector>,
    /// An object is selected if it matches at least one clause. When several match, `createOnly`
    /// and the want-flags are ORed and the StatusCollector sets are united.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub downsync: Vec<DownsyncPolicyClause>,
}

/// The status of a BindingPolicy.
pub type BindingPolicyStatus = PolicyStatus;

/// One downsync clause: a test on workload objects plus how to downsync what passes it.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("anyOf" = [
    {"required": ["apiGroup"]},
    {"required": ["resources"]},
    {"required": ["namespaces"]},
    {"required": ["namespaceSelectors"]},
    {"required": ["objectSelectors"]},
    {"required": ["objectNames"]}
]))]
pub struct DownsyncPolicyClause {
    #[serde(flatten)]
    pub test: DownsyncObjectTest,
    #[serde(flatten)]
    pub modulation: DownsyncModulation,
}

/// A predicate on workload objects. Every criterion given must pass; an empty list passes all.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DownsyncObjectTest {
    /// The object's API group: absent matches every group, `""` the core group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_group: Option<String>,
    /// Lowercase plural resource names; `"*"` matches all.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resources: Vec<String>,
    /// Acceptable namespaces; `"*"` matches any (and is the way to match cluster-scoped objects).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub namespaces: Vec<String>,
    /// At least one must match the labels of the object's Namespace.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "label_selectors")]
    pub namespace_selectors: Vec<LabelSelector>,
    /// At least one must match the object's labels.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "label_selectors")]
    pub object_selectors: Vec<LabelSelector>,
    /// Acceptable object names; `"*"` matches all.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub object_names: Vec<String>,
}

/// How selected objects are downsynced and how their status comes back.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DownsyncModulation {
    /// In a WEC, the object is created but never updated.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub create_only: bool,
    /// Names of the StatusCollectors to apply.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub status_collectors: Vec<String>,
    /// Expect exactly one WEC and copy the object's `.status` from it back into the WDS.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub want_singleton_reported_state: bool,
    /// Combine the object's `.status` from every WEC into the WDS object's `.status`.
    #[serde(
        default,
        rename = "wantMultiWECReportedState",
        skip_serializing_if = "std::ops::Not::not"
    )]
    pub want_multi_wec_reported_state: bool,
}
