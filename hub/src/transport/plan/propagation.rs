//! A BindingPolicy's propagation: per WEC, how many of its objects are delivered, applied and
//! available (from OCM's reports on the ManifestWorks), a summary for `kubectl get bp`, and the
//! `Propagated` condition. The transport writes it, since it watches those ManifestWorks.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use ks_shared::api::{Condition, PolicyStatus, Propagation, WecPropagation, condition_type};

use crate::transport::types::Landed;

/// The propagation of `selected` objects to each WEC, given what landed there.
pub fn summarize(selected: usize, wecs: impl IntoIterator<Item = (String, Landed)>) -> Propagation {
    let per_wec: Vec<WecPropagation> = wecs
        .into_iter()
        .map(|(wec, landed)| WecPropagation {
            wec,
            selected: selected as i64,
            delivered: landed.delivered as i64,
            applied: landed.applied as i64,
            available: landed.available as i64,
        })
        .collect();
    let complete = per_wec.iter().filter(|w| is_complete(w)).count();
    let applied: i64 = per_wec.iter().map(|w| w.applied).sum();
    Propagation {
        wecs: format!("{complete}/{}", per_wec.len()),
        applied: format!("{applied}/{}", selected * per_wec.len()),
        per_wec,
    }
}

/// Every selected object applied and available on the WEC.
fn is_complete(wec: &WecPropagation) -> bool {
    wec.applied == wec.selected && wec.available == wec.selected
}

/// The `Propagated` condition for `propagation`; its transition time stays that of `previous`
/// while its status does not change.
pub fn condition(propagation: &Propagation, previous: Option<&Condition>, now: Time) -> Condition {
    let behind: Vec<String> = propagation
        .per_wec
        .iter()
        .filter(|w| !is_complete(w))
        .map(|w| {
            format!(
                "{}: {}/{s} applied, {}/{s} available",
                w.wec,
                w.applied,
                w.available,
                s = w.selected
            )
        })
        .collect();
    let (status, reason, message) = if propagation.per_wec.is_empty() {
        ("False", "NoWECs", "its clusterSelectors choose no WEC".to_string())
    } else if behind.is_empty() {
        (
            "True",
            "Propagated",
            format!(
                "every object is applied and available on all {} WECs",
                propagation.per_wec.len()
            ),
        )
    } else {
        ("False", "Propagating", behind.join("; "))
    };
    Condition::following(previous, now, condition_type::PROPAGATED, status, reason, message)
}

/// Whether the policy's status says something else than `propagation` and `condition`.
pub fn differs(current: Option<&PolicyStatus>, propagation: &Propagation, condition: &Condition) -> bool {
    current.is_none_or(|status| {
        status.propagation.as_ref() != Some(propagation)
            || status.condition(condition_type::PROPAGATED) != Some(condition)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn landed(delivered: usize, applied: usize, available: usize) -> Landed {
        Landed {
            delivered,
            applied,
            available,
        }
    }

    fn at(time: &str) -> Time {
        Time(time.parse().unwrap())
    }

    #[test]
    fn the_summary_counts_complete_wecs_and_applied_objects() {
        let propagation = summarize(
            7,
            [
                ("cluster1".to_string(), landed(7, 7, 7)),
                ("cluster2".to_string(), landed(7, 5, 4)),
            ],
        );
        assert_eq!(
            (propagation.wecs.as_str(), propagation.applied.as_str()),
            ("1/2", "12/14")
        );
        assert_eq!(propagation.per_wec[1].available, 4);
        let condition = condition(&propagation, None, at("2026-11-24T12:00:00Z"));
        assert_eq!(
            (condition.status.as_str(), condition.reason.as_str()),
            ("False", "Propagating")
        );
        assert_eq!(condition.message, "cluster2: 5/7 applied, 4/7 available");
    }

    #[test]
    fn the_condition_keeps_its_transition_time_while_its_status_holds() {
        let done = summarize(2, [("cluster1".to_string(), landed(2, 2, 2))]);
        let first = condition(&done, None, at("2026-11-24T12:00:00Z"));
        assert_eq!((first.status.as_str(), first.reason.as_str()), ("True", "Propagated"));
        let again = condition(&done, Some(&first), at("2026-11-24T12:05:00Z"));
        assert_eq!(again, first);
        let behind = summarize(2, [("cluster1".to_string(), landed(2, 1, 1))]);
        let changed = condition(&behind, Some(&first), at("2026-11-24T12:05:00Z"));
        assert_eq!(changed.last_transition_time, at("2026-11-24T12:05:00Z"));
        let status = PolicyStatus {
            conditions: vec![first.clone()],
            propagation: Some(done.clone()),
            ..Default::default()
        };
        assert!(!differs(Some(&status), &done, &again));
        assert!(differs(Some(&status), &behind, &changed));
        assert!(differs(None, &done, &first));
    }

    #[test]
    fn no_wec_is_not_propagated() {
        let none = summarize(3, []);
        assert_eq!((none.wecs.as_str(), none.applied.as_str()), ("0/0", "0/0"));
        let condition = condition(&none, None, at("2026-11-24T12:00:00Z"));
        assert_eq!(
            (condition.status.as_str(), condition.reason.as_str()),
            ("False", "NoWECs")
        );
    }
}
