//! Health: the verdict on one delivered object on one WEC (carried by its WorkStatus), and a
//! BindingPolicy's summary of its objects' verdicts on each of its WECs.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Whether an object does what it is for on its WEC.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, JsonSchema)]
pub enum Verdict {
    /// It does what it is for: its controller has acted on its current spec and reports success.
    Healthy,
    /// On its way: its controller has not acted on its current spec yet, or is still rolling it out.
    Progressing,
    /// Its controller reports a failure it will not get over by waiting (a failed Job, a
    /// rollout past its deadline, a container that cannot start, a `Ready` condition `False`).
    Degraded,
    /// Nothing to judge by: no current report, or a status that does not read as expected.
    #[default]
    Unknown,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Healthy => "Healthy",
            Verdict::Progressing => "Progressing",
            Verdict::Degraded => "Degraded",
            Verdict::Unknown => "Unknown",
        }
    }
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The verdict on one object, and why (empty for a plain `Healthy`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct Health {
    pub verdict: Verdict,
    /// What the verdict rests on: the failing condition or count, or what is awaited.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
}

/// A BindingPolicy's objects' health on its WECs (written by the status controller, from the
/// WorkStatuses).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PolicyHealth {
    /// Objects healthy on their WECs, of the objects times WECs: e.g. `13/14`.
    pub healthy: String,
    /// One entry per chosen WEC.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["wec"]))]
    pub per_wec: Vec<WecHealth>,
}

/// One WEC's verdicts on a policy's objects.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WecHealth {
    pub wec: String,
    #[serde(default)]
    pub healthy: i64,
    #[serde(default)]
    pub progressing: i64,
    #[serde(default)]
    pub degraded: i64,
    /// Not reported yet, or not judged.
    #[serde(default)]
    pub unknown: i64,
    /// The first object that is not healthy (degraded first, in object order) and why: e.g.
    /// `apps/deployments default/web: Degraded: …`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub first_unhealthy: String,
}
