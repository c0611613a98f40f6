//! CombinedStatus: the result of applying StatusCollectors to one object's returned status.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::binding::Destination;
use super::common::free_form;

/// Written only by the status controller; named `<objectUID>.<bindingPolicyUID>`.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "control.kubestellar.io",
    version = "v1alpha1",
    kind = "CombinedStatus",
    doc = "CombinedStatus holds the result of applying the StatusCollectors of one BindingPolicy to one workload object.",
    plural = "combinedstatuses",
    shortname = "cs",
    namespaced,
    no_spec,
    printcolumn = r#"{"name": "SUBJECT_GROUP", "type": "string", "jsonPath": ".metadata.labels['status\\.kubestellar\\.io/api-group']"}"#,
    printcolumn = r#"{"name": "SUBJECT_RSC", "type": "string", "jsonPath": ".metadata.labels['status\\.kubestellar\\.io/resource']"}"#,
    printcolumn = r#"{"name": "SUBJECT_NS", "type": "string", "jsonPath": ".metadata.labels['status\\.kubestellar\\.io/namespace']"}"#,
    printcolumn = r#"{"name": "SUBJECT_NAME", "type": "string", "jsonPath": ".metadata.labels['status\\.kubestellar\\.io/name']"}"#,
    printcolumn = r#"{"name": "BINDINGPOLICY", "type": "string", "jsonPath": ".metadata.labels['status\\.kubestellar\\.io/binding-policy']"}"#
)]
pub struct CombinedStatusFields {
    /// One entry per StatusCollector.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub results: Vec<NamedStatusCombination>,
}

/// The table one StatusCollector produced.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NamedStatusCombination {
    /// The StatusCollector's name.
    pub name: String,
    pub column_names: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rows: Vec<StatusCombinationRow>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub row_errors: Vec<RowError>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub aggregation_errors: Vec<AggregationError>,
}

/// One row of a combination.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct StatusCombinationRow {
    pub columns: Vec<Value>,
}

/// An evaluation error for one WEC; `columnName` `""` means the filter.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RowError {
    pub wec: Destination,
    pub column_name: String,
    pub error: String,
}

/// An error while combining one column.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AggregationError {
    pub column_name: String,
    pub error: String,
}

/// A typed cell: `type` says which one of the other fields holds the value.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct Value {
    /// `String`, `Number`, `Bool`, `Null`, `Object` or `Array`.
    #[serde(rename = "type")]
    pub type_: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub string: Option<String>,
    /// A number, rendered as a JSON decimal string.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub float: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bool: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "free_form")]
    pub object: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "free_form")]
    pub array: Option<serde_json::Value>,
}
