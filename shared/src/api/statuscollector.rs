//! StatusCollector: how to summarise the status of an object across its WECs.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// CEL expressions that filter, select, group and combine the status returned from WECs.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "control.kubestellar.io",
    version = "v1alpha1",
    kind = "StatusCollector",
    doc = "StatusCollector says how to filter, select, group and combine the status of an object returned from its WECs.",
    plural = "statuscollectors",
    shortname = "sc",
    status = "StatusCollectorStatus"
)]
#[serde(rename_all = "camelCase")]
pub struct StatusCollectorSpec {
    /// A CEL boolean; rows for which it is false (or null) are dropped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filter: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub group_by: Vec<NamedExpression>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub combined_fields: Vec<NamedAggregator>,
    /// When non-empty, one row per WEC with these columns; `groupBy` and `combinedFields` must be empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub select: Vec<NamedExpression>,
    /// The most rows to report; 0 (what a Go client sends when it is unset) means no limit.
    pub limit: i64,
}

/// A named CEL expression.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct NamedExpression {
    pub name: String,
    pub def: String,
}

/// A named aggregation over a CEL subject.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct NamedAggregator {
    pub name: String,
    /// `COUNT`, `SUM`, `AVG`, `MIN` or `MAX`. Kept a plain string, as upstream's CRD does not
    /// validate it: a bad value is reported in the collector's status instead.
    #[serde(rename = "type")]
    pub type_: String,
    /// The CEL expression aggregated; required for every type but `COUNT`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
}

/// Problems found in a StatusCollector.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StatusCollectorStatus {
    pub observed_generation: i64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<String>,
}
