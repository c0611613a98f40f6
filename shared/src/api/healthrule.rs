//! HealthRule: how to judge the health of the objects of one kind on their WECs, in CEL, for
//! kinds the built-in rules and conventions do not judge well (`ks_shared::health`).

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::Verdict;

/// Checks tried in order on each WEC's report on an object of `group`/`kind`: the first whose
/// `when` holds gives the verdict, else `otherwise`. The expressions see what a StatusCollector's
/// see: `returned.status` (the WEC's `.status`), `obj` (the WDS object), `inventory.name` (the
/// WEC) and `propagation`.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "control.kubestellar.io",
    version = "v1alpha1",
    kind = "HealthRule",
    doc = "HealthRule says, in CEL over the status each WEC returns, when an object of one kind is healthy, progressing or degraded there.",
    plural = "healthrules",
    shortname = "hr",
    status = "HealthRuleStatus",
    printcolumn = r#"{"name": "GROUP", "type": "string", "jsonPath": ".spec.group"}"#,
    printcolumn = r#"{"name": "KIND", "type": "string", "jsonPath": ".spec.kind"}"#,
    printcolumn = r#"{"name": "AGE", "type": "date", "jsonPath": ".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct HealthRuleSpec {
    /// The API group of the kind judged (`""` for the core group).
    #[serde(default)]
    pub group: String,
    pub kind: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub checks: Vec<HealthCheck>,
    /// The verdict when no check holds.
    #[serde(default = "progressing")]
    pub otherwise: Verdict,
}

fn progressing() -> Verdict {
    Verdict::Progressing
}

/// One check of a HealthRule.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct HealthCheck {
    pub verdict: Verdict,
    /// A CEL boolean.
    pub when: String,
    /// A CEL string saying why; the check's place in the rule when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// Problems found in a HealthRule.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HealthRuleStatus {
    pub observed_generation: i64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<String>,
}
