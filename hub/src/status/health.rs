//! A BindingPolicy's health: per WEC, how many of its objects are healthy, progressing,
//! degraded or unknown (the verdicts the WECs' agents report, see [`ks_shared::health`]), the
//! first that is not healthy and why, a summary for `kubectl get bp`, and the `Healthy`
//! condition. The status controller writes it, since it holds the reports; the transport writes
//! the policy's `propagation` beside it, and either runs without the other.

use std::borrow::Cow;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use ks_shared::api::{Condition, Health, PolicyHealth, PolicyStatus, Verdict, WecHealth, condition_type};

use super::state::WorkloadRef;

/// The health of a policy's objects on each of its WECs: per WEC, each object (in the order
/// the Binding lists them) with its verdict there.
pub fn summarize<'a, O>(wecs: impl IntoIterator<Item = (String, O)>) -> PolicyHealth
where
    O: IntoIterator<Item = (&'a WorkloadRef, Cow<'a, Health>)>,
{
    let per_wec: Vec<WecHealth> = wecs
        .into_iter()
        .map(|(wec, objects)| {
            let mut counts = WecHealth {
                wec,
                ..WecHealth::default()
            };
            // The first degraded object, else the first progressing, else the first unknown.
            let mut first: Option<(Verdict, String)> = None;
            for (object, health) in objects {
                let count = match health.verdict {
                    Verdict::Healthy => &mut counts.healthy,
                    Verdict::Progressing => &mut counts.progressing,
                    Verdict::Degraded => &mut counts.degraded,
                    Verdict::Unknown => &mut counts.unknown,
                };
                *count += 1;
                if health.verdict != Verdict::Healthy
                    && first.as_ref().is_none_or(|(v, _)| rank(health.verdict) < rank(*v))
                {
                    first = Some((health.verdict, said(object, &health)));
                }
            }
            counts.first_unhealthy = first.map(|(_, said)| said).unwrap_or_default();
            counts
        })
        .collect();
    let healthy: i64 = per_wec.iter().map(|w| w.healthy).sum();
    let total: i64 = per_wec.iter().map(total).sum();
    PolicyHealth {
        healthy: format!("{healthy}/{total}"),
        per_wec,
    }
}

/// Which unhealthy verdict is named first.
fn rank(verdict: Verdict) -> u8 {
    match verdict {
        Verdict::Degraded => 0,
        Verdict::Progressing => 1,
        Verdict::Unknown => 2,
        Verdict::Healthy => 3,
    }
}

/// `apps/deployments ns/web: Degraded: <reason>`.
fn said(object: &WorkloadRef, health: &Health) -> String {
    if health.reason.is_empty() {
        format!("{object}: {}", health.verdict)
    } else {
        format!("{object}: {}: {}", health.verdict, health.reason)
    }
}

fn total(wec: &WecHealth) -> i64 {
    wec.healthy + wec.progressing + wec.degraded + wec.unknown
}

/// The `Healthy` condition for `health`; its transition time stays that of `previous` while
/// its status does not change.
pub fn condition(health: &PolicyHealth, previous: Option<&Condition>, now: Time) -> Condition {
    let unhealthy: Vec<&WecHealth> = health.per_wec.iter().filter(|w| w.healthy < total(w)).collect();
    let (status, reason, message) = if health.per_wec.is_empty() {
        ("False", "NoWECs", "its clusterSelectors choose no WEC".to_string())
    } else if unhealthy.is_empty() {
        (
            "True",
            "Healthy",
            format!("every object is healthy on all {} WECs", health.per_wec.len()),
        )
    } else {
        let reason = if unhealthy.iter().any(|w| w.degraded > 0) {
            "Degraded"
        } else if unhealthy.iter().any(|w| w.progressing > 0) {
            "Progressing"
        } else {
            "Unknown"
        };
        let message = unhealthy
            .iter()
            .map(|w| format!("{}: {}", w.wec, w.first_unhealthy))
            .collect::<Vec<_>>()
            .join("; ");
        ("False", reason, message)
    };
    Condition::following(previous, now, condition_type::HEALTHY, status, reason, message)
}

/// Whether an object's verdict on a WEC going from `was` to `now` is news to say (an Event):
/// it turns degraded (also when first seen so: after a restart, or by a hub that came to it
/// late), it is no longer degraded, or it is no longer healthy. A rollout's routine (unknown
/// until reported, progressing, healthy) is not, nor another verdict first seen: a rollout of
/// thousands of objects would be thousands of Events.
pub fn is_news(was: Option<&Health>, now: &Health) -> bool {
    match was {
        None => now.verdict == Verdict::Degraded,
        Some(was) => {
            was.verdict != now.verdict
                && (now.verdict == Verdict::Degraded
                    || was.verdict == Verdict::Degraded
                    || was.verdict == Verdict::Healthy)
        }
    }
}

/// What the status controller writes of a policy's status: its health and `Healthy` condition.
pub type Ours = (Option<PolicyHealth>, Option<Condition>);

/// Our part of `status`, as it is.
pub fn ours(status: &PolicyStatus) -> Ours {
    (
        status.health.clone(),
        status.condition(condition_type::HEALTHY).cloned(),
    )
}

/// Whether the policy's status says something else than `health` and `condition`.
pub fn differs(current: &PolicyStatus, health: &PolicyHealth, condition: &Condition) -> bool {
    ours(current) != (Some(health.clone()), Some(condition.clone()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn health(verdict: Verdict, reason: &str) -> Health {
        Health {
            verdict,
            reason: reason.into(),
        }
    }

    fn judged(verdict: Verdict, reason: &str) -> Cow<'static, Health> {
        Cow::Owned(health(verdict, reason))
    }

    fn at(time: &str) -> Time {
        Time(time.parse().unwrap())
    }

    #[test]
    fn each_wec_counts_its_verdicts_and_names_the_worst_first() {
        let (web, job, cm) = (
            WorkloadRef::new("apps", "deployments", "ns", "web"),
            WorkloadRef::new("batch", "jobs", "ns", "migrate"),
            WorkloadRef::new("", "configmaps", "ns", "settings"),
        );
        let summary = summarize([
            (
                "cluster1".to_string(),
                vec![
                    (&cm, judged(Verdict::Healthy, "")),
                    (&job, judged(Verdict::Progressing, "running")),
                    (&web, judged(Verdict::Degraded, "Progressing: ProgressDeadlineExceeded")),
                ],
            ),
            (
                "cluster2".to_string(),
                vec![
                    (&cm, judged(Verdict::Healthy, "")),
                    (&job, judged(Verdict::Healthy, "")),
                    (&web, judged(Verdict::Healthy, "")),
                ],
            ),
        ]);
        assert_eq!(summary.healthy, "4/6");
        let first = &summary.per_wec[0];
        assert_eq!(
            (first.healthy, first.progressing, first.degraded, first.unknown),
            (1, 1, 1, 0)
        );
        assert_eq!(
            first.first_unhealthy,
            "apps/deployments ns/web: Degraded: Progressing: ProgressDeadlineExceeded"
        );
        assert_eq!(summary.per_wec[1].first_unhealthy, "");
        let condition = condition(&summary, None, at("2026-12-07T06:00:00Z"));
        assert_eq!(
            (
                condition.status.as_str(),
                condition.reason.as_str(),
                condition.message.as_str()
            ),
            (
                "False",
                "Degraded",
                "cluster1: apps/deployments ns/web: Degraded: Progressing: ProgressDeadlineExceeded"
            )
        );
    }

    #[test]
    fn news_is_turning_degraded_leaving_it_or_losing_health_not_a_rollouts_routine() {
        let (unknown, progressing, healthy, degraded) = (
            health(Verdict::Unknown, "not reported yet"),
            health(Verdict::Progressing, "running"),
            health(Verdict::Healthy, ""),
            health(Verdict::Degraded, "Failed"),
        );
        assert!(is_news(None, &degraded), "first seen degraded");
        assert!(!is_news(None, &healthy), "first seen");
        for (was, now) in [(&unknown, &progressing), (&progressing, &healthy), (&unknown, &healthy)] {
            assert!(!is_news(Some(was), now), "{was:?} → {now:?}");
        }
        assert!(!is_news(Some(&progressing), &health(Verdict::Progressing, "other")));
        for (was, now) in [
            (&progressing, &degraded),
            (&unknown, &degraded),
            (&degraded, &healthy),
            (&degraded, &progressing),
            (&healthy, &progressing),
            (&healthy, &unknown),
        ] {
            assert!(is_news(Some(was), now), "{was:?} → {now:?}");
        }
    }

    #[test]
    fn the_condition_holds_its_transition_time_and_no_wec_is_not_healthy() {
        let cm = WorkloadRef::new("", "configmaps", "ns", "settings");
        let done = summarize([("cluster1".to_string(), vec![(&cm, judged(Verdict::Healthy, ""))])]);
        let first = condition(&done, None, at("2026-12-07T06:00:00Z"));
        assert_eq!((first.status.as_str(), first.reason.as_str()), ("True", "Healthy"));
        assert_eq!(condition(&done, Some(&first), at("2026-12-07T06:05:00Z")), first);
        let status = PolicyStatus {
            conditions: vec![first.clone()],
            health: Some(done.clone()),
            ..Default::default()
        };
        assert!(!differs(&status, &done, &first));
        let waiting = summarize([(
            "cluster1".to_string(),
            vec![(&cm, judged(Verdict::Unknown, "not reported on this object yet"))],
        )]);
        let now = condition(&waiting, Some(&first), at("2026-12-07T06:05:00Z"));
        assert_eq!(
            (now.reason.as_str(), now.last_transition_time.clone()),
            ("Unknown", at("2026-12-07T06:05:00Z"))
        );
        assert!(differs(&status, &waiting, &now));
        let none = summarize(Vec::<(String, Vec<(&WorkloadRef, Cow<Health>)>)>::new());
        assert_eq!(none.healthy, "0/0");
        assert_eq!(condition(&none, None, at("2026-12-07T06:00:00Z")).reason, "NoWECs");
    }
}
