//! Conditions combined: the `conditions` lists of the WECs as one list, each condition as healthy
//! as the least healthy WEC reports it (the rules are in `AGGREGATION.md`).

use std::cmp::Ordering;
use std::collections::BTreeMap;

use k8s_openapi::jiff::Timestamp;
use serde_json::{Map, Value};

use super::timestamps;

/// The condition list of every WEC under `key`, absent or null meaning none; `None` if some WEC
/// has something other than a list there.
pub(super) fn condition_lists<'o>(objects: &[&'o Map<String, Value>], key: &str) -> Option<Vec<&'o [Value]>> {
    objects
        .iter()
        .map(|o| match o.get(key) {
            None | Some(Value::Null) => Some(&[][..]),
            Some(Value::Array(list)) => Some(list.as_slice()),
            Some(_) => None,
        })
        .collect()
}

/// Condition types whose `True` means trouble: for them any WEC reporting `True` makes the
/// aggregate `True`, and a WEC without the condition counts as `False`.
const ABNORMAL_TRUE: &[&str] = &[
    "Degraded",
    "Failed",
    "FailureTarget",
    "Reconciling",
    "ReplicaFailure",
    "Stalled",
];

/// Combines the condition lists of the WECs, one condition per type, sorted by type.
///
/// Status: any `False` gives `False`, `True` everywhere gives `True`, anything else `Unknown`; a
/// WEC without the condition counts as `Unknown` (for [`ABNORMAL_TRUE`] types the roles of `True`
/// and `False` swap). Times are the latest reported; `reason` and `message` come from the latest
/// transition among the WECs whose status matches the aggregate.
pub(super) fn aggregate_conditions(per_wec: &[&[Value]]) -> Vec<Value> {
    let mut by_type: BTreeMap<&str, Vec<&Map<String, Value>>> = BTreeMap::new();
    for list in per_wec {
        for condition in list.iter().filter_map(|c| c.as_object()) {
            if let Some(kind) = condition.get("type").and_then(|t| t.as_str()) {
                by_type.entry(kind).or_default().push(condition);
            }
        }
    }
    by_type
        .into_iter()
        .map(|(kind, entries)| Value::Object(aggregate_condition(kind, &entries, per_wec)))
        .collect()
}

fn aggregate_condition(kind: &str, entries: &[&Map<String, Value>], per_wec: &[&[Value]]) -> Map<String, Value> {
    let reported_by_all = per_wec.iter().all(|list| list.iter().any(|c| c["type"] == kind));
    let status = condition_status(ABNORMAL_TRUE.contains(&kind), entries, reported_by_all);
    let mut out = Map::new();
    out.insert("type".into(), kind.into());
    out.insert("status".into(), status.into());
    let agreeing: Vec<&Map<String, Value>> = entries
        .iter()
        .copied()
        .filter(|c| status_of(c) == Some(status))
        .collect();
    let source = if agreeing.is_empty() { entries } else { &agreeing };
    if let Some(latest) = source.iter().max_by(|a, b| transition_order(a, b)) {
        for field in ["reason", "message"] {
            if let Some(text) = latest.get(field).filter(|v| v.is_string()) {
                out.insert(field.into(), text.clone());
            }
        }
    }
    for field in [
        "lastTransitionTime",
        "lastUpdateTime",
        "lastProbeTime",
        "lastHeartbeatTime",
    ] {
        let values: Vec<&Value> = entries.iter().filter_map(|c| c.get(field)).collect();
        if let Some((_, latest)) = timestamps(&values).max() {
            out.insert(field.into(), latest.into());
        }
    }
    let generations = entries.iter().filter_map(|c| c.get("observedGeneration")?.as_i64());
    if let Some(oldest) = generations.min() {
        out.insert("observedGeneration".into(), oldest.into());
    }
    out
}

/// The documented truth table; `abnormal_true` swaps the roles of `True` and `False`.
fn condition_status(abnormal_true: bool, entries: &[&Map<String, Value>], reported_by_all: bool) -> &'static str {
    let (bad, good) = if abnormal_true {
        ("True", "False")
    } else {
        ("False", "True")
    };
    let is = |value: &'static str| move |c: &&Map<String, Value>| status_of(c) == Some(value);
    if entries.iter().any(is(bad)) {
        bad
    } else if entries.iter().all(is(good)) && (reported_by_all || abnormal_true) {
        good
    } else {
        "Unknown"
    }
}

fn status_of(condition: &Map<String, Value>) -> Option<&str> {
    condition.get("status").and_then(Value::as_str)
}

/// Orders conditions by last transition, then reason and message, so ties are broken the same
/// way whatever the order of the WECs.
fn transition_order(a: &Map<String, Value>, b: &Map<String, Value>) -> Ordering {
    let key = |c: &Map<String, Value>| {
        let text = |f: &str| c.get(f).and_then(|v| v.as_str()).unwrap_or_default().to_string();
        let time = c
            .get("lastTransitionTime")
            .and_then(|v| v.as_str())
            .and_then(|s| s.parse::<Timestamp>().ok());
        (time, text("lastTransitionTime"), text("reason"), text("message"))
    };
    key(a).cmp(&key(b))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::status::aggregate::tests::{aggregate, condition};

    #[test]
    fn condition_truth_table() {
        let t = |s: &str| json!({"conditions": [condition("Available", s, "2025-01-01T00:00:00Z", s)]});
        let status = |statuses: &[Value]| aggregate("apps", "Deployment", statuses)["conditions"][0]["status"].clone();
        assert_eq!(status(&[t("True"), t("False"), t("Unknown")]), "False");
        assert_eq!(status(&[t("True"), t("True")]), "True");
        assert_eq!(status(&[t("True"), t("Unknown")]), "Unknown");
        assert_eq!(status(&[t("Unknown"), t("Unknown")]), "Unknown");
        assert_eq!(status(&[t("True"), json!({})]), "Unknown");
    }

    #[test]
    fn reason_comes_from_the_latest_transition_that_agrees_with_the_aggregate() {
        let deadline = condition(
            "Progressing",
            "False",
            "2025-01-01T00:00:00Z",
            "ProgressDeadlineExceeded",
        );
        let stuck = json!({"conditions": [deadline]});
        let fine =
            json!({"conditions": [condition("Progressing", "True", "2025-01-02T00:00:00Z", "NewReplicaSetAvailable")]});
        let progressing = &aggregate("apps", "Deployment", &[stuck, fine])["conditions"][0];
        assert_eq!(progressing["status"], "False");
        assert_eq!(progressing["reason"], "ProgressDeadlineExceeded");
        assert_eq!(progressing["lastTransitionTime"], "2025-01-02T00:00:00Z");
    }
}
