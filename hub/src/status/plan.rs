//! The status controller's decisions, as plain functions of what its caches hold: the `.status`
//! a workload object gets back, its CombinedStatuses, a Binding's `StatusCollectorsAvailable`
//! condition and a StatusCollector's status. The controller gathers the inputs and writes the
//! differences.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, Time};
use ks_shared::api::{
    CombinedStatus, CombinedStatusFields, Condition, NamedStatusCombination, StatusCollectorStatus, StatusDetails,
    Verdict, condition_reason, condition_type,
};
use ks_shared::names::{combined_status_label, field_manager};
use serde_json::Value as Json;

use super::aggregate::aggregate_status;
use super::collector::{Collector, WecReport, combined_status_metadata, evaluation_errors};
use super::singleton::{Report, Returned, Selecting, decide, status_never_returned};
use super::state::{BindingCollector, BindingView, Entry, WorkloadRef};
use crate::binding::ObjectIdentity;

/// What one WEC reported on the object through its one WorkStatus.
#[derive(Clone, Debug, Default)]
pub struct WecStatus {
    /// The WorkStatus's `.status`; `None` while it is null.
    pub status: Option<Json>,
    /// When that status was last written.
    pub last_update: Option<Time>,
    pub details: Option<StatusDetails>,
    /// The trace context the agent's status report handed on (its WorkStatus's annotations).
    pub trace: BTreeMap<String, String>,
}

impl WecStatus {
    /// What CEL sees of it, as the row of the WEC `wec`.
    pub fn report<'a>(&'a self, wec: &'a str) -> WecReport<'a> {
        WecReport {
            wec,
            status: self.status.as_ref(),
            last_returned_update: self.last_update.as_ref(),
            details: self.details.as_ref(),
        }
    }
}

/// The workload object a CombinedStatus summarises, from its labels.
pub fn summarised_object(combined: &CombinedStatus) -> Option<WorkloadRef> {
    let labels = combined.metadata.labels.as_ref()?;
    let label = |key: &str| labels.get(key).map(String::as_str);
    Some(WorkloadRef::new(
        label(combined_status_label::API_GROUP)?,
        label(combined_status_label::RESOURCE)?,
        label(combined_status_label::NAMESPACE)?,
        label(combined_status_label::NAME)?,
    ))
}

/// The latest write of a `.status` as `managedFields` record it: the newest entry touching it.
pub fn last_status_update(managed_fields: &[ManagedFieldsEntry]) -> Option<Time> {
    managed_fields
        .iter()
        .filter(|entry| touches_status(entry))
        .filter_map(|entry| entry.time.clone())
        .max_by_key(|time| time.0)
}

/// Whether we own any part of the object's `.status`: only then is there something to clear.
pub fn owns_status(managed_fields: &[ManagedFieldsEntry]) -> bool {
    managed_fields.iter().any(|entry| {
        entry.manager.as_deref() == Some(field_manager::STATUS)
            && entry.subresource.as_deref() == Some("status")
            && status_fields(entry)
                .and_then(Json::as_object)
                .is_some_and(|f| !f.is_empty())
    })
}

fn status_fields(entry: &ManagedFieldsEntry) -> Option<&Json> {
    entry.fields_v1.as_ref()?.0.get("f:status")
}

/// A write through the status subresource, or one that set fields of `.status`.
fn touches_status(entry: &ManagedFieldsEntry) -> bool {
    entry.subresource.as_deref() == Some("status") || status_fields(entry).is_some()
}

/// What to do with a workload object's `.status`.
#[derive(Clone, Debug, PartialEq)]
pub enum StatusAction {
    /// Leave it as it is.
    Leave,
    /// Make it this.
    Set(Json),
    /// Withdraw what we returned.
    Clear,
}

/// The `.status` an object of `group`/`kind` gets back from its WECs' reports (`wecs`, by WEC
/// name), given the Bindings that list it (docs/upstream-behaviour.md#status-return, with totals
/// for multi-WEC counts, and `verdict` on it in each WEC settling what the others disagree on).
pub fn returned_status(
    group: &str,
    kind: &str,
    selecting: &[(&str, &BindingView, &Entry)],
    wecs: &BTreeMap<String, WecStatus>,
    verdict: impl Fn(&str) -> Verdict,
) -> StatusAction {
    if status_never_returned(group, kind) {
        return StatusAction::Leave;
    }
    let reports = wecs
        .iter()
        .map(|(wec, s)| {
            let report = if s.status.is_some() {
                Report::Status
            } else {
                Report::Pending
            };
            (wec.clone(), report)
        })
        .collect();
    let selecting = selecting.iter().map(|(_, view, entry)| Selecting {
        modulation: &entry.modulation,
        destinations: &view.destinations,
    });
    let status_of = |wec: &String| wecs.get(wec).and_then(|s| s.status.as_ref());
    match decide(selecting, &reports) {
        Returned::Nothing => StatusAction::Leave,
        Returned::Clear => StatusAction::Clear,
        Returned::Singleton { wec } => status_of(&wec).cloned().map_or(StatusAction::Leave, StatusAction::Set),
        Returned::Aggregated { wecs } => {
            let statuses: Vec<(&Json, Verdict)> =
                wecs.iter().filter_map(|w| Some((status_of(w)?, verdict(w)))).collect();
            StatusAction::Set(aggregate_status(group, kind, &statuses))
        }
    }
}

/// The workload object as the CombinedStatus computation sees it.
pub struct Subject<'a> {
    pub identity: &'a ObjectIdentity,
    pub uid: &'a str,
    /// The whole object, CEL's `obj`.
    pub object: &'a Json,
}

/// The CombinedStatuses an object calls for, one per Binding whose entry for it names
/// StatusCollectors (docs/upstream-behaviour.md#combinedstatus), with the evaluation errors of
/// each (Binding, collector) pair. `collector` gives the valid collector of a name; missing and
/// invalid ones are left out. `combine` evaluates them ([`super::collector::combine`], here or in
/// the sandbox); when it cannot, there is no outcome, not an empty one.
pub fn combined_statuses<'c, E>(
    subject: &Subject,
    selecting: &[(&str, &BindingView, &Entry)],
    wecs: &BTreeMap<String, WecStatus>,
    collector: impl Fn(&str) -> Option<&'c Collector>,
    combine: impl Fn(&[&Collector], &Json, &[WecReport]) -> Result<Vec<NamedStatusCombination>, E>,
) -> Result<CombinedOutcome, E> {
    let mut combined = Vec::new();
    let mut errors = BTreeMap::new();
    let key = WorkloadRef::new(
        &subject.identity.group,
        &subject.identity.resource,
        &subject.identity.namespace,
        &subject.identity.name,
    );
    for (binding, view, entry) in selecting {
        let (Some(policy_uid), false) = (&view.policy_uid, entry.modulation.status_collectors.is_empty()) else {
            continue;
        };
        let collectors: Vec<&Collector> = entry
            .modulation
            .status_collectors
            .iter()
            .filter_map(|name| collector(name))
            .collect();
        let reports: Vec<WecReport> = view
            .destinations
            .iter()
            .map(|d| match wecs.get(&d.cluster_id) {
                Some(reported) => reported.report(&d.cluster_id),
                None => WecReport {
                    wec: &d.cluster_id,
                    ..Default::default()
                },
            })
            .collect();
        let results = combine(&collectors, subject.object, &reports)?;
        for result in &results {
            let lines = evaluation_errors(&key.to_string(), result);
            errors.insert((binding.to_string(), result.name.clone()), lines);
        }
        combined.push(CombinedStatus {
            metadata: combined_status_metadata(subject.identity, subject.uid, binding, policy_uid),
            spec: CombinedStatusFields { results },
        });
    }
    Ok((combined, errors))
}

/// The CombinedStatuses an object calls for, and the evaluation errors of each (Binding,
/// collector) pair.
pub type CombinedOutcome = (Vec<CombinedStatus>, BTreeMap<BindingCollector, Vec<String>>);

/// Whether an existing CombinedStatus lacks something of `desired`: one of its labels or its
/// owner, or the same results. Labels and owners others add are theirs.
pub fn combined_status_differs(existing: &CombinedStatus, desired: &CombinedStatus) -> bool {
    let labels = existing.metadata.labels.clone().unwrap_or_default();
    let owners = existing.metadata.owner_references.as_deref().unwrap_or_default();
    let labelled = desired
        .metadata
        .labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    let owned = desired
        .metadata
        .owner_references
        .iter()
        .flatten()
        .all(|o| owners.contains(o));
    !labelled || !owned || existing.spec.results != desired.spec.results
}

/// The `StatusCollectorsAvailable` condition of a Binding
/// (docs/upstream-behaviour.md#statuscollectors, exact strings): false while a collector it names
/// is missing or invalid. `valid` says whether a valid collector of that name exists; `previous`
/// keeps the transition time of an unchanged condition.
pub fn collectors_condition(
    view: &BindingView,
    valid: impl Fn(&str) -> bool,
    previous: Option<&Condition>,
    now: Time,
) -> Condition {
    let missing: Vec<&str> = view.collectors().into_iter().filter(|c| !valid(c)).collect();
    let (status, reason, message) = if missing.is_empty() {
        (
            "True",
            condition_reason::RECONCILE_SUCCESS,
            "All StatusCollector(s) are available".to_string(),
        )
    } else {
        (
            "False",
            condition_reason::RECONCILE_ERROR,
            format!("Missing StatusCollector(s) [{}]", missing.join(" ")),
        )
    };
    let unchanged = previous.filter(|p| p.status == status && p.reason == reason && p.message == message);
    Condition {
        type_: condition_type::STATUS_COLLECTORS_AVAILABLE.into(),
        status: status.into(),
        last_transition_time: unchanged.map_or(now, |p| p.last_transition_time.clone()),
        reason: reason.into(),
        message,
    }
}

/// A StatusCollector's status: its validation errors, or else the evaluation errors of its uses.
pub fn collector_status(generation: i64, validation: &[String], evaluation: Vec<String>) -> StatusCollectorStatus {
    StatusCollectorStatus {
        observed_generation: generation,
        errors: if validation.is_empty() {
            evaluation
        } else {
            validation.to_vec()
        },
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::FieldsV1;
    use ks_shared::api::{DownsyncModulation, NamedAggregator, StatusCollectorSpec};
    use serde_json::json;

    use super::*;
    use crate::status::collector::combine;

    fn entry(singleton: bool, multi_wec: bool, collectors: &[&str]) -> Entry {
        Entry {
            resource_version: "1".into(),
            modulation: DownsyncModulation {
                want_singleton_reported_state: singleton,
                want_multi_wec_reported_state: multi_wec,
                status_collectors: collectors.iter().map(|c| c.to_string()).collect(),
                ..Default::default()
            },
        }
    }

    fn view(wecs: &[&str]) -> BindingView {
        BindingView::sending(wecs, BTreeMap::new())
    }

    fn reported(pairs: &[(&str, Option<Json>)]) -> BTreeMap<String, WecStatus> {
        pairs
            .iter()
            .map(|(wec, status)| {
                let status = WecStatus {
                    status: status.clone(),
                    ..Default::default()
                };
                (wec.to_string(), status)
            })
            .collect()
    }

    fn available(n: i64) -> Option<Json> {
        Some(json!({"replicas": n, "availableReplicas": n}))
    }

    #[test]
    fn singleton_copies_the_one_wec_and_multi_wec_sums() {
        let c1 = view(&["cluster1"]);
        let both = view(&["cluster1", "cluster2"]);
        let wecs = reported(&[("cluster1", available(1)), ("cluster2", available(1))]);
        let singleton = entry(true, false, &[]);
        assert_eq!(
            returned_status("apps", "Deployment", &[("p", &c1, &singleton)], &wecs, |_| {
                Verdict::Healthy
            }),
            StatusAction::Set(available(1).unwrap())
        );
        let multi = entry(false, true, &[]);
        assert_eq!(
            returned_status("apps", "Deployment", &[("p", &both, &multi)], &wecs, |_| {
                Verdict::Healthy
            }),
            StatusAction::Set(json!({"replicas": 2, "availableReplicas": 2}))
        );
        assert_eq!(
            returned_status("apps", "Deployment", &[("p", &both, &singleton)], &wecs, |_| {
                Verdict::Healthy
            }),
            StatusAction::Clear
        );
        let pending = reported(&[("cluster1", None)]);
        assert_eq!(
            returned_status("apps", "Deployment", &[("p", &c1, &singleton)], &pending, |_| {
                Verdict::Healthy
            }),
            StatusAction::Leave
        );
        assert_eq!(
            returned_status("", "Namespace", &[("p", &c1, &singleton)], &wecs, |_| Verdict::Healthy),
            StatusAction::Leave
        );
    }

    fn managed(manager: &str, subresource: Option<&str>, fields: Json, time: &str) -> ManagedFieldsEntry {
        ManagedFieldsEntry {
            manager: Some(manager.into()),
            subresource: subresource.map(String::from),
            fields_v1: Some(FieldsV1(fields)),
            time: Some(Time(time.parse().unwrap())),
            ..Default::default()
        }
    }

    #[test]
    fn ownership_and_last_update_come_from_managed_fields() {
        let ours = managed(
            field_manager::STATUS,
            Some("status"),
            json!({"f:status": {"f:replicas": {}}}),
            "2025-01-01T00:00:02Z",
        );
        let cleared = managed(
            field_manager::STATUS,
            Some("status"),
            json!({"f:status": {}}),
            "2025-01-01T00:00:03Z",
        );
        let labels = managed("other", None, json!({"f:metadata": {}}), "2025-01-01T00:00:09Z");
        assert!(owns_status(&[ours.clone(), labels.clone()]));
        assert!(!owns_status(&[cleared.clone(), labels.clone()]));
        assert_eq!(
            last_status_update(&[ours, cleared, labels]).map(|t| t.0.to_string()),
            Some("2025-01-01T00:00:03Z".to_string())
        );
        assert_eq!(last_status_update(&[]), None);
    }

    fn collector(name: &str) -> Collector {
        let spec = StatusCollectorSpec {
            combined_fields: vec![NamedAggregator {
                name: "available".into(),
                type_: "SUM".into(),
                subject: Some("returned.status.availableReplicas".into()),
            }],
            limit: 10,
            ..Default::default()
        };
        Collector::new(name, &spec).unwrap()
    }

    #[test]
    fn combined_statuses_one_per_binding_naming_collectors() {
        let identity = ObjectIdentity {
            group: "apps".into(),
            version: "v1".into(),
            resource: "deployments".into(),
            namespace: "ns".into(),
            name: "web".into(),
            kind: "Deployment".into(),
        };
        let object = json!({"metadata": {"name": "web"}});
        let subject = Subject {
            identity: &identity,
            uid: "obj-uid",
            object: &object,
        };
        let both = view(&["cluster1", "cluster2"]);
        let sum = collector("sum");
        let with = entry(false, false, &["sum", "missing"]);
        let without = entry(true, false, &[]);
        let wecs = reported(&[
            ("cluster1", available(1)),
            ("cluster2", Some(json!({"availableReplicas": "x"}))),
        ]);
        let selecting = [("p", &both, &with), ("q", &both, &without)];
        let sum_named = |n: &str| (n == "sum").then_some(&sum);
        let here = |c: &[&Collector], o: &Json, r: &[WecReport]| Ok::<_, ()>(combine(c, o, r));
        let (combined, errors) = combined_statuses(&subject, &selecting, &wecs, sum_named, here).unwrap();
        assert_eq!(combined.len(), 1);
        assert_eq!(combined[0].metadata.name.as_deref(), Some("obj-uid.bp-uid"));
        let result = &combined[0].spec.results[0];
        assert_eq!(
            (result.name.as_str(), result.rows[0].columns[0].float.as_deref()),
            ("sum", Some("1"))
        );
        let lines = &errors[&("p".to_string(), "sum".to_string())];
        assert!(
            lines[0].starts_with("apps/deployments ns/web, column \"available\": for WEC cluster2"),
            "{lines:?}"
        );

        let mut existing = combined[0].clone();
        assert!(!combined_status_differs(&existing, &combined[0]));
        existing
            .metadata
            .labels
            .get_or_insert_default()
            .insert("team".into(), "a".into());
        assert!(!combined_status_differs(&existing, &combined[0]), "others' labels stay");
        existing.spec.results.clear();
        assert!(combined_status_differs(&existing, &combined[0]));
    }

    #[test]
    fn collectors_condition_uses_upstream_strings() {
        let mut v = view(&["cluster1"]);
        let key = |n: &str| WorkloadRef::new("", "configmaps", "ns", n);
        v.entries.insert(key("a"), entry(false, false, &["b", "a"]));
        v.entries.insert(key("b"), entry(false, false, &["c"]));
        let now = Time("2025-01-01T00:00:00Z".parse().unwrap());
        let missing = collectors_condition(&v, |c| c == "c", None, now.clone());
        assert_eq!(
            (
                missing.status.as_str(),
                missing.reason.as_str(),
                missing.message.as_str()
            ),
            ("False", "ReconcileError", "Missing StatusCollector(s) [a b]")
        );
        let later = Time("2025-02-01T00:00:00Z".parse().unwrap());
        let again = collectors_condition(&v, |c| c == "c", Some(&missing), later.clone());
        assert_eq!(again.last_transition_time, now, "unchanged keeps its time");
        let fine = collectors_condition(&v, |_| true, Some(&missing), later.clone());
        assert_eq!(
            (fine.status.as_str(), fine.message.as_str(), fine.last_transition_time),
            ("True", "All StatusCollector(s) are available", later)
        );
    }

    #[test]
    fn collector_status_prefers_validation_errors() {
        let invalid = collector_status(3, &["bad".into()], vec!["eval".into()]);
        assert_eq!(
            (invalid.observed_generation, invalid.errors),
            (3, vec!["bad".to_string()])
        );
        assert_eq!(collector_status(3, &[], vec!["eval".into()]).errors, ["eval"]);
    }
}
