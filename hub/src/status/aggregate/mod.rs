//! Multi-WEC aggregation of `.status`: one status for the WDS object from the statuses its WECs
//! reported. The rules are in `AGGREGATION.md` beside this directory; in short, counts are totals
//! over the WECs, conditions look as healthy as the least healthy WEC (see [`conditions`]), and
//! nothing depends on the order the WECs come in.

mod conditions;

use std::cmp::Ordering;
use std::collections::BTreeSet;

use k8s_openapi::jiff::Timestamp;
use ks_shared::api::Verdict;
use serde_json::{Map, Value};

use conditions::{aggregate_conditions, condition_lists};

/// The aggregated `.status` of an object of `group`/`kind` from the statuses of its WECs, each
/// with the verdict on the object there.
///
/// Statuses that are not JSON objects are ignored; none at all gives `{}`. Deployment,
/// ReplicaSet, StatefulSet, DaemonSet and Job keep only the fields their health depends on;
/// every other kind goes by the general rules, where the verdicts settle what the WECs disagree
/// on.
pub fn aggregate_status(group: &str, kind: &str, statuses: &[(&Value, Verdict)]) -> Value {
    let (objects, severities): (Vec<&Map<String, Value>>, Vec<u8>) = statuses
        .iter()
        .filter_map(|(status, verdict)| Some((status.as_object()?, severity(*verdict))))
        .unzip();
    if objects.is_empty() {
        return Value::Object(Map::new());
    }
    let aggregated = match kind_rules(group, kind) {
        Some(rules) => by_rules(rules, &objects),
        None => general_object(&objects, &severities),
    };
    Value::Object(aggregated)
}

/// How far from healthy a verdict is, least first: Healthy, Unknown, Progressing, Degraded.
fn severity(verdict: Verdict) -> u8 {
    match verdict {
        Verdict::Healthy => 0,
        Verdict::Unknown => 1,
        Verdict::Progressing => 2,
        Verdict::Degraded => 3,
    }
}

/// How one field of a well-known kind is combined.
#[derive(Clone, Copy, Debug)]
enum Rule {
    /// An integer, absent meaning 0 (Kubernetes omits zero counts): the smallest.
    Min,
    /// An integer count, absent meaning 0: the total over the WECs.
    Sum,
    /// Kept only when every WEC reports the same value.
    Agree,
    /// A timestamp: the earliest reported.
    Earliest,
    /// A timestamp: the latest, and only once every WEC reports one.
    LatestOfAll,
    /// A list of Kubernetes conditions (see [`aggregate_conditions`]).
    Conditions,
}

// Counts are totals: each WEC runs the object's full spec, so the WDS object stands for the
// rollout across all of them (1 replica on each of 2 WECs is 2 replicas). `observedGeneration`
// is the oldest, so the aggregate is current only once every WEC is.

const DEPLOYMENT: &[(&str, Rule)] = &[
    ("observedGeneration", Rule::Min),
    ("replicas", Rule::Sum),
    ("updatedReplicas", Rule::Sum),
    ("readyReplicas", Rule::Sum),
    ("availableReplicas", Rule::Sum),
    ("unavailableReplicas", Rule::Sum),
    ("terminatingReplicas", Rule::Sum),
    ("conditions", Rule::Conditions),
];

const REPLICA_SET: &[(&str, Rule)] = &[
    ("observedGeneration", Rule::Min),
    ("replicas", Rule::Sum),
    ("fullyLabeledReplicas", Rule::Sum),
    ("readyReplicas", Rule::Sum),
    ("availableReplicas", Rule::Sum),
    ("terminatingReplicas", Rule::Sum),
    ("conditions", Rule::Conditions),
];

const STATEFUL_SET: &[(&str, Rule)] = &[
    ("observedGeneration", Rule::Min),
    ("replicas", Rule::Sum),
    ("readyReplicas", Rule::Sum),
    ("currentReplicas", Rule::Sum),
    ("updatedReplicas", Rule::Sum),
    ("availableReplicas", Rule::Sum),
    ("currentRevision", Rule::Agree),
    ("updateRevision", Rule::Agree),
    ("conditions", Rule::Conditions),
];

const DAEMON_SET: &[(&str, Rule)] = &[
    ("observedGeneration", Rule::Min),
    ("desiredNumberScheduled", Rule::Sum),
    ("currentNumberScheduled", Rule::Sum),
    ("updatedNumberScheduled", Rule::Sum),
    ("numberReady", Rule::Sum),
    ("numberAvailable", Rule::Sum),
    ("numberUnavailable", Rule::Sum),
    ("numberMisscheduled", Rule::Sum),
    ("conditions", Rule::Conditions),
];

const JOB: &[(&str, Rule)] = &[
    ("active", Rule::Sum),
    ("ready", Rule::Sum),
    ("terminating", Rule::Sum),
    ("succeeded", Rule::Sum),
    ("failed", Rule::Sum),
    ("startTime", Rule::Earliest),
    ("completionTime", Rule::LatestOfAll),
    ("conditions", Rule::Conditions),
];

fn kind_rules(group: &str, kind: &str) -> Option<&'static [(&'static str, Rule)]> {
    match (group, kind) {
        ("apps", "Deployment") => Some(DEPLOYMENT),
        ("apps", "ReplicaSet") => Some(REPLICA_SET),
        ("apps", "StatefulSet") => Some(STATEFUL_SET),
        ("apps", "DaemonSet") => Some(DAEMON_SET),
        ("batch", "Job") => Some(JOB),
        _ => None,
    }
}

/// Only the listed fields, each by its rule; a field appears when at least one WEC reports it.
fn by_rules(rules: &[(&str, Rule)], objects: &[&Map<String, Value>]) -> Map<String, Value> {
    let mut out = Map::new();
    for &(field, rule) in rules {
        let present: Vec<&Value> = objects
            .iter()
            .filter_map(|o| o.get(field))
            .filter(|v| !v.is_null())
            .collect();
        if present.is_empty() {
            continue;
        }
        let everywhere = present.len() == objects.len();
        if let Some(value) = apply(rule, &present, everywhere, objects) {
            out.insert(field.to_string(), value);
        }
    }
    out
}

fn apply(rule: Rule, present: &[&Value], everywhere: bool, objects: &[&Map<String, Value>]) -> Option<Value> {
    match rule {
        Rule::Min | Rule::Sum => count(rule, present, objects.len()),
        Rule::Agree => everywhere.then(|| agreed(present)).flatten(),
        Rule::Earliest => timestamps(present)
            .filter(|(t, _)| t.is_some())
            .min()
            .map(|(_, s)| Value::from(s)),
        Rule::LatestOfAll => everywhere
            .then(|| timestamps(present).max().map(|(_, s)| Value::from(s)))
            .flatten(),
        Rule::Conditions => {
            condition_lists(objects, "conditions").map(|lists| Value::Array(aggregate_conditions(&lists)))
        }
    }
}

/// A count over `wecs` WECs of which `present` report an integer; the others count as 0.
fn count(rule: Rule, present: &[&Value], wecs: usize) -> Option<Value> {
    let mut values: Vec<i64> = present.iter().filter_map(|v| v.as_i64()).collect();
    if values.is_empty() {
        return None;
    }
    values.resize(wecs, 0);
    let result = match rule {
        Rule::Min => values.into_iter().min(),
        _ => Some(values.into_iter().fold(0i64, i64::saturating_add)),
    };
    result.map(Value::from)
}

/// The value every WEC reports, if they agree.
fn agreed(values: &[&Value]) -> Option<Value> {
    let first = *values.first()?;
    values.iter().all(|v| *v == first).then(|| first.clone())
}

/// The strings among `values`, each with its parsed time; unparsable strings order before all
/// times, and equal times by their text, so the choice never depends on the WECs' order.
fn timestamps<'v>(values: &[&'v Value]) -> impl Iterator<Item = (Option<Timestamp>, &'v str)> {
    values
        .iter()
        .filter_map(|v| v.as_str())
        .map(|s| (s.parse::<Timestamp>().ok(), s))
}

// ---- general rules ----

/// An object from objects (with the severity of each WEC's verdict): a field is kept when every
/// WEC reports it (not null) and the values combine; a `conditions` list is combined when any
/// WEC reports one.
fn general_object(objects: &[&Map<String, Value>], severities: &[u8]) -> Map<String, Value> {
    let keys: BTreeSet<&String> = objects.iter().flat_map(|o| o.keys()).collect();
    let mut out = Map::new();
    for key in keys {
        let lists = (key == "conditions").then(|| condition_lists(objects, key)).flatten();
        let combined = match lists {
            Some(lists) => Some(Value::Array(aggregate_conditions(&lists))),
            None => values_everywhere(objects, key).and_then(|values| general(&values, severities)),
        };
        if let Some(value) = combined {
            out.insert(key.clone(), value);
        }
    }
    out
}

/// The non-null values of `key` in every object, or `None` if some object lacks it.
fn values_everywhere<'o>(objects: &[&'o Map<String, Value>], key: &str) -> Option<Vec<&'o Value>> {
    objects.iter().map(|o| o.get(key).filter(|v| !v.is_null())).collect()
}

/// One value from the WECs' values of a field, by their common JSON type; else, when the WECs
/// also differ in health, the value the least healthy ones agree on; else `None` (the field is
/// left out).
fn general(values: &[&Value], severities: &[u8]) -> Option<Value> {
    by_type(values, severities).or_else(|| least_healthy(values, severities))
}

fn by_type(values: &[&Value], severities: &[u8]) -> Option<Value> {
    let first = *values.first()?;
    match first {
        Value::Object(_) => {
            let objects: Option<Vec<&Map<String, Value>>> = values.iter().map(|v| v.as_object()).collect();
            Some(Value::Object(general_object(&objects?, severities)))
        }
        Value::Bool(_) => {
            let bools: Option<Vec<bool>> = values.iter().map(|v| v.as_bool()).collect();
            Some(Value::Bool(bools?.into_iter().all(|b| b)))
        }
        Value::Number(_) => values.iter().try_fold(first, |min, v| smaller_number(min, v)).cloned(),
        Value::String(_) => agreed(values).or_else(|| latest_if_all_times(values)),
        Value::Array(_) | Value::Null => agreed(values),
    }
}

/// The value the least healthy WECs agree on, when not every WEC is as unhealthy: a phase or a
/// message that differs between a degraded WEC and healthy ones is the degraded one's.
fn least_healthy(values: &[&Value], severities: &[u8]) -> Option<Value> {
    let worst = *severities.iter().max()?;
    if severities.iter().all(|&s| s == worst) {
        return None;
    }
    let theirs: Vec<&Value> = values
        .iter()
        .zip(severities)
        .filter(|&(_, &s)| s == worst)
        .map(|(v, _)| *v)
        .collect();
    agreed(&theirs)
}

/// The smaller of two JSON numbers (`None` if `b` is not a number); equal values are ordered by
/// their text, so `1` and `1.0` give the same answer whatever the order.
fn smaller_number<'v>(a: &'v Value, b: &'v Value) -> Option<&'v Value> {
    let (x, y) = (a.as_f64()?, b.as_f64()?);
    let order = x.total_cmp(&y).then_with(|| a.to_string().cmp(&b.to_string()));
    Some(if order == Ordering::Greater { b } else { a })
}

/// The latest of strings that are all timestamps.
fn latest_if_all_times(values: &[&Value]) -> Option<Value> {
    let times: Vec<(Option<Timestamp>, &str)> = timestamps(values).collect();
    if times.len() != values.len() || times.iter().any(|(t, _)| t.is_none()) {
        return None;
    }
    times.into_iter().max().map(|(_, s)| Value::from(s))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;

    /// The aggregate of `statuses` from WECs where the object is equally healthy.
    pub(super) fn aggregate(group: &str, kind: &str, statuses: &[Value]) -> Value {
        judged(
            group,
            kind,
            &statuses
                .iter()
                .map(|s| (s.clone(), Verdict::Healthy))
                .collect::<Vec<_>>(),
        )
    }

    fn judged(group: &str, kind: &str, statuses: &[(Value, Verdict)]) -> Value {
        aggregate_status(group, kind, &statuses.iter().map(|(s, v)| (s, *v)).collect::<Vec<_>>())
    }

    pub(super) fn condition(kind: &str, status: &str, time: &str, reason: &str) -> Value {
        json!({"type": kind, "status": status, "lastTransitionTime": time, "reason": reason, "message": reason})
    }

    #[test]
    fn deployment_counts_are_totals_and_its_generation_the_oldest() {
        let rolled_out = json!({"observedGeneration": 3, "replicas": 3, "updatedReplicas": 3,
            "readyReplicas": 3, "availableReplicas": 3, "collisionCount": 1});
        let rolling = json!({"observedGeneration": 2, "replicas": 4, "updatedReplicas": 1,
            "readyReplicas": 3, "availableReplicas": 3, "unavailableReplicas": 1});
        assert_eq!(
            aggregate("apps", "Deployment", &[rolled_out, rolling]),
            json!({"observedGeneration": 2, "replicas": 7, "updatedReplicas": 4, "readyReplicas": 6,
                "availableReplicas": 6, "unavailableReplicas": 1})
        );
    }

    #[test]
    fn one_replica_on_each_of_two_wecs_is_two_replicas() {
        let one = json!({"replicas": 1, "readyReplicas": 1, "availableReplicas": 1, "updatedReplicas": 1});
        assert_eq!(
            aggregate("apps", "Deployment", &[one.clone(), one]),
            json!({"replicas": 2, "readyReplicas": 2, "availableReplicas": 2, "updatedReplicas": 2})
        );
    }

    #[test]
    fn absent_numbers_are_zero_but_only_reported_fields_appear() {
        let ready = json!({"observedGeneration": 2, "replicas": 1, "readyReplicas": 1});
        let starting = json!({"replicas": 1});
        assert_eq!(
            aggregate("apps", "ReplicaSet", &[ready, starting]),
            json!({"observedGeneration": 0, "replicas": 2, "readyReplicas": 1})
        );
    }

    #[test]
    fn daemonset_counts_are_totals_too() {
        let a = json!({"desiredNumberScheduled": 2, "numberReady": 2, "observedGeneration": 4});
        let b = json!({"desiredNumberScheduled": 3, "numberReady": 1, "numberUnavailable": 2, "observedGeneration": 5});
        assert_eq!(
            aggregate("apps", "DaemonSet", &[a, b]),
            json!({"desiredNumberScheduled": 5, "numberReady": 3, "numberUnavailable": 2, "observedGeneration": 4})
        );
    }

    #[test]
    fn statefulset_revisions_are_kept_only_when_every_wec_agrees() {
        let a = json!({"replicas": 2, "currentRevision": "web-1", "updateRevision": "web-2"});
        let b = json!({"replicas": 2, "currentRevision": "web-1", "updateRevision": "web-1"});
        assert_eq!(
            aggregate("apps", "StatefulSet", &[a, b]),
            json!({"replicas": 4, "currentRevision": "web-1"})
        );
    }

    #[test]
    fn job_completes_only_when_every_wec_completed() {
        let done = json!({"succeeded": 1, "startTime": "2025-01-01T00:00:05Z", "completionTime": "2025-01-01T00:01:00Z",
            "conditions": [condition("Complete", "True", "2025-01-01T00:01:00Z", "Done")]});
        let running = json!({"active": 1, "startTime": "2025-01-01T00:00:01Z"});
        assert_eq!(
            aggregate("batch", "Job", &[done.clone(), running]),
            json!({"active": 1, "succeeded": 1, "startTime": "2025-01-01T00:00:01Z",
                "conditions": [{"type": "Complete", "status": "Unknown", "reason": "Done", "message": "Done",
                    "lastTransitionTime": "2025-01-01T00:01:00Z"}]})
        );
        let both = aggregate("batch", "Job", &[done.clone(), done]);
        assert_eq!(both["completionTime"], "2025-01-01T00:01:00Z");
        assert_eq!(both["conditions"][0]["status"], "True");
    }

    #[test]
    fn one_failed_wec_fails_the_job() {
        let backoff = condition("Failed", "True", "2025-01-01T00:02:00Z", "BackoffLimitExceeded");
        let failed = json!({"failed": 6, "conditions": [backoff]});
        let done =
            json!({"succeeded": 1, "conditions": [condition("Complete", "True", "2025-01-01T00:01:00Z", "Done")]});
        let job = aggregate("batch", "Job", &[failed, done]);
        assert_eq!(job["failed"], 6);
        assert_eq!(job["conditions"][0]["type"], "Complete");
        assert_eq!(job["conditions"][0]["status"], "Unknown");
        assert_eq!(job["conditions"][1]["type"], "Failed");
        assert_eq!(job["conditions"][1]["status"], "True");
        assert_eq!(job["conditions"][1]["reason"], "BackoffLimitExceeded");
    }

    #[test]
    fn general_kinds_take_min_numbers_and_all_booleans_and_agreed_strings() {
        let a = json!({"count": 3, "ready": true, "phase": "Running", "seen": "2025-01-01T00:00:00Z",
            "nested": {"n": 1.5, "name": "x"}, "list": [1, 2], "only": 1, "odd": 1});
        let b = json!({"count": 2, "ready": false, "phase": "Pending", "seen": "2025-02-01T00:00:00Z",
            "nested": {"n": 2, "name": "x"}, "list": [1, 2], "odd": "1"});
        assert_eq!(
            aggregate("example.com", "Widget", &[a, b]),
            json!({"count": 2, "ready": false, "seen": "2025-02-01T00:00:00Z", "nested": {"n": 1.5, "name": "x"},
                "list": [1, 2]})
        );
    }

    #[test]
    fn where_wecs_differ_in_health_the_least_healthy_settle_what_they_disagree_on() {
        let status = |phase: &str, message: &str, tags: Value| json!({"phase": phase, "message": message, "tags": tags, "replicas": 2, "note": "same"});
        let healthy = status("Healthy", "all good", json!(["a"]));
        let degraded = status("Degraded", "no quorum", json!(["b"]));
        let also_degraded = status("Degraded", "no disk", json!(["b"]));
        assert_eq!(
            judged(
                "argoproj.io",
                "Rollout",
                &[
                    (healthy.clone(), Verdict::Healthy),
                    (degraded.clone(), Verdict::Degraded),
                    (also_degraded, Verdict::Degraded),
                    (status("Progressing", "rolling", json!([])), Verdict::Progressing),
                ]
            ),
            json!({"phase": "Degraded", "tags": ["b"], "replicas": 2, "note": "same"}),
            "the degraded WECs agree on the phase and tags, not on the message"
        );
        assert_eq!(
            judged(
                "argoproj.io",
                "Rollout",
                &[
                    (healthy.clone(), Verdict::Healthy),
                    (degraded.clone(), Verdict::Healthy)
                ]
            ),
            json!({"replicas": 2, "note": "same"}),
            "equally healthy WECs that disagree say nothing"
        );
        assert_eq!(
            judged(
                "apps",
                "Deployment",
                &[
                    (json!({"replicas": 1}), Verdict::Healthy),
                    (json!({"replicas": 1}), Verdict::Degraded)
                ]
            ),
            json!({"replicas": 2}),
            "the kinds with their own rules keep them"
        );
    }

    #[test]
    fn general_conditions_combine_even_when_some_wecs_have_none() {
        let a = json!({});
        let b = json!({"conditions": [condition("Ready", "True", "2025-01-01T00:00:00Z", "Ok"), "junk"]});
        let combined = aggregate("example.com", "Widget", &[a, b]);
        assert_eq!(combined["conditions"][0]["status"], "Unknown");
        assert_eq!(combined["conditions"].as_array().unwrap().len(), 1);
    }

    #[test]
    fn nothing_to_aggregate_gives_an_empty_status() {
        assert_eq!(aggregate("apps", "Deployment", &[]), json!({}));
        assert_eq!(aggregate("apps", "Deployment", &[json!(3), json!(null)]), json!({}));
    }

    // ---- properties ----

    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            (-1e6f64..1e6).prop_map(Value::from),
            prop::sample::select(vec!["True", "False", "Unknown", "2025-01-01T00:00:00Z", "x"]).prop_map(Value::from),
        ];
        leaf.prop_recursive(4, 32, 6, |inner| {
            let keys = prop::sample::select(vec![
                "type",
                "status",
                "conditions",
                "replicas",
                "readyReplicas",
                "reason",
                "lastTransitionTime",
                "a",
            ]);
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::btree_map(keys, inner, 0..5)
                    .prop_map(|m| Value::Object(m.into_iter().map(|(k, v)| (k.to_string(), v)).collect())),
            ]
        })
    }

    fn verdict() -> impl Strategy<Value = Verdict> {
        prop::sample::select(vec![
            Verdict::Healthy,
            Verdict::Progressing,
            Verdict::Degraded,
            Verdict::Unknown,
        ])
    }

    fn kind() -> impl Strategy<Value = (&'static str, &'static str)> {
        prop::sample::select(vec![
            ("apps", "Deployment"),
            ("apps", "ReplicaSet"),
            ("apps", "StatefulSet"),
            ("apps", "DaemonSet"),
            ("batch", "Job"),
            ("example.com", "Widget"),
        ])
    }

    /// Every count and generation field of the well-known kinds.
    const ALL_COUNTS: [&str; 21] = [
        "observedGeneration",
        "replicas",
        "updatedReplicas",
        "readyReplicas",
        "availableReplicas",
        "unavailableReplicas",
        "terminatingReplicas",
        "fullyLabeledReplicas",
        "currentReplicas",
        "desiredNumberScheduled",
        "currentNumberScheduled",
        "updatedNumberScheduled",
        "numberReady",
        "numberAvailable",
        "numberUnavailable",
        "numberMisscheduled",
        "active",
        "ready",
        "terminating",
        "succeeded",
        "failed",
    ];

    /// A well-known kind and a status with random values for some of its count fields.
    fn well_known_counts() -> impl Strategy<Value = (&'static str, &'static str, Value)> {
        kind()
            .prop_filter_map("well-known kinds", |(g, k)| Some((g, k, kind_rules(g, k)?)))
            .prop_flat_map(|(g, k, rules)| (Just(g), Just(k), counts_status(rules)))
    }

    /// A status with random counts for some of the count fields of `rules`.
    fn counts_status(rules: &'static [(&'static str, Rule)]) -> impl Strategy<Value = Value> {
        let count_fields: Vec<&str> = rules
            .iter()
            .filter(|(_, r)| matches!(r, Rule::Min | Rule::Sum))
            .map(|(f, _)| *f)
            .collect();
        prop::collection::vec(prop::option::of(0i64..1_000_000), count_fields.len()).prop_map(move |values| {
            let fields = count_fields
                .iter()
                .zip(values)
                .filter_map(|(f, v)| Some((f.to_string(), v?.into())));
            Value::Object(fields.collect())
        })
    }

    proptest! {
        #[test]
        fn never_panics_on_arbitrary_json(
            (group, kind) in kind(),
            statuses in prop::collection::vec(json_value(), 0..4),
        ) {
            let _ = aggregate(group, kind, &statuses);
        }

        #[test]
        fn order_of_the_wecs_never_matters(
            (group, kind) in kind(),
            (statuses, shuffled) in prop::collection::vec(json_value(), 1..5)
                .prop_flat_map(|v| (Just(v.clone()), Just(v).prop_shuffle())),
        ) {
            prop_assert_eq!(aggregate(group, kind, &statuses), aggregate(group, kind, &shuffled));
        }

        #[test]
        fn order_of_the_wecs_never_matters_whatever_their_health(
            (group, kind) in kind(),
            (statuses, shuffled) in prop::collection::vec((json_value(), verdict()), 1..5)
                .prop_flat_map(|v| (Just(v.clone()), Just(v).prop_shuffle())),
        ) {
            prop_assert_eq!(judged(group, kind, &statuses), judged(group, kind, &shuffled));
        }

        #[test]
        fn one_wec_keeps_its_counts((group, kind, status) in well_known_counts()) {
            prop_assert_eq!(aggregate(group, kind, std::slice::from_ref(&status)), status);
        }

        #[test]
        fn counts_are_totals_and_generations_the_oldest(
            (group, kind, rules) in kind().prop_filter_map("well-known kinds", |(g, k)| Some((g, k, kind_rules(g, k)?))),
            statuses in prop::collection::vec(
                prop::collection::btree_map(prop::sample::select(ALL_COUNTS.to_vec()), 0i64..1_000_000, 0..4), 1..5),
        ) {
            let statuses: Vec<Value> = statuses.into_iter().map(|m| json!(m)).collect();
            let aggregated = aggregate(group, kind, &statuses);
            for &(field, rule) in rules {
                let values = statuses.iter().map(|s| s[field].as_i64());
                let expected = match rule {
                    _ if values.clone().all(|v| v.is_none()) => Value::Null,
                    Rule::Sum => values.flatten().sum::<i64>().into(),
                    Rule::Min => values.map(|v| v.unwrap_or(0)).min().into(),
                    _ => continue,
                };
                prop_assert_eq!(&aggregated[field], &expected, "{}", field);
            }
        }

        #[test]
        fn one_wec_of_a_general_kind_keeps_its_plain_fields(status in json_value()) {
            let plain = without_nulls_and_conditions(&status);
            prop_assume!(plain.is_object());
            prop_assert_eq!(aggregate("example.com", "Widget", std::slice::from_ref(&plain)), plain);
        }
    }

    /// `value` without null fields and `conditions` keys, which the general rules rewrite.
    fn without_nulls_and_conditions(value: &Value) -> Value {
        match value {
            Value::Object(map) => Value::Object(
                map.iter()
                    .filter(|(k, v)| !v.is_null() && *k != "conditions")
                    .map(|(k, v)| (k.clone(), without_nulls_and_conditions(v)))
                    .collect(),
            ),
            other => other.clone(),
        }
    }
}
