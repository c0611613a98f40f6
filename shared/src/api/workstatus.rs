//! WorkStatus: the status of one delivered object in one WEC, kept by the status add-on agent
//! in that WEC's mailbox namespace in the ITS.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::CustomResource;
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};

use super::Health;

/// `spec` and the top-level `statusDetails` of a WorkStatus; `status` is the copied `.status`.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "control.kubestellar.io",
    version = "v1alpha1",
    kind = "WorkStatus",
    doc = "WorkStatus carries the status of one workload object in one WEC, in that WEC's mailbox namespace.",
    plural = "workstatuses",
    shortname = "ws",
    shortname = "wss",
    namespaced,
    no_spec,
    status = "ReportedStatus",
    printcolumn = r#"{"name": "CLUSTER", "type": "string", "jsonPath": ".metadata.namespace", "priority": 1}"#,
    printcolumn = r#"{"name": "KIND", "type": "string", "jsonPath": ".spec.sourceRef.kind"}"#,
    printcolumn = r#"{"name": "OBJECT_NS", "type": "string", "jsonPath": ".spec.sourceRef.namespace"}"#,
    printcolumn = r#"{"name": "OBJECT_NAME", "type": "string", "jsonPath": ".spec.sourceRef.name"}"#,
    printcolumn = r#"{"name": "HEALTH", "type": "string", "jsonPath": ".health.verdict"}"#,
    printcolumn = r#"{"name": "AGE", "type": "date", "jsonPath": ".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct WorkStatusFields {
    #[serde(default)]
    pub spec: WorkStatusSpec,
    /// Bookkeeping about the WDS generation; a sibling of `status`, not inside it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_details: Option<StatusDetails>,
    /// The agent's verdict on the object (a sibling of `status`, like `statusDetails`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health: Option<Health>,
}

/// What the WorkStatus reports on.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkStatusSpec {
    #[serde(default)]
    pub source_ref: SourceRef,
}

/// The workload object in the WEC; `namespace` is `""` for cluster-scoped objects.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub struct SourceRef {
    pub group: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub version: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub resource: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub kind: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    pub namespace: String,
}

/// Which WDS generation of the object has reached the WEC.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StatusDetails {
    /// The last WDS generation propagated; 0 means none.
    pub last_generation: i64,
    pub last_generation_is_applied: bool,
    /// When the two fields above were last brought up to date (the epoch before the first time).
    pub last_currency_update_time: Time,
}

/// A verbatim copy of the WEC object's `.status`: any JSON object, replaced as a whole.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(transparent)]
pub struct ReportedStatus(pub serde_json::Map<String, serde_json::Value>);

impl JsonSchema for ReportedStatus {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "ReportedStatus".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": "object",
            "description": "The workload object's .status as the WEC reports it.",
            "x-kubernetes-preserve-unknown-fields": true,
            "x-kubernetes-map-type": "atomic"
        })
    }
}
