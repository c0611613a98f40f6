//! CustomTransform: parts of workload objects of one GroupResource to remove before delivery.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Removes the parts named by `remove` from every delivered object of `apiGroup`/`resource`.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "control.kubestellar.io",
    version = "v1alpha1",
    kind = "CustomTransform",
    doc = "CustomTransform names parts of the workload objects of one API group and resource to remove before delivery.",
    plural = "customtransforms",
    shortname = "ct",
    category = "all",
    status = "CustomTransformStatus",
    printcolumn = r#"{"name": "SUBJECT_GROUP", "type": "string", "jsonPath": ".spec.apiGroup"}"#,
    printcolumn = r#"{"name": "SUBJECT_RESOURCE", "type": "string", "jsonPath": ".spec.resource"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct CustomTransformSpec {
    /// The API group of the subject objects (group only, no version); `""` is the core group.
    pub api_group: String,
    /// The lowercase plural resource name of the subject objects.
    pub resource: String,
    /// JSONPath expressions of the form `$.a.b["c"]` naming the parts to remove.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub remove: Vec<String>,
}

/// Problems found in a CustomTransform's spec.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CustomTransformStatus {
    pub observed_generation: i64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}
