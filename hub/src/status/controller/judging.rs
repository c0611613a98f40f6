//! The status controller's part in health: the verdict on an object on a WEC (its report's,
//! or its HealthRule's), each change of it said (an Event on the object, and the moment it turns
//! healthy in the rollout's trace), and each policy's health written from its Binding.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use ks_shared::api::{Health, Verdict, condition_type};
use ks_shared::rollout::{self, stage};
use kube::ResourceExt;
use kube::discovery::ApiResource;
use kube::runtime::reflector::ObjectRef;
use tokio::time::Instant;

use super::StatusController;
use crate::informers::CachedObject;
use crate::status::health;
use crate::status::plan::WecStatus;
use crate::status::report::CachedWorkStatus;
use crate::status::state::{CachedName, WorkloadRef};
use crate::status::writes;

impl StatusController {
    /// The WorkStatus `name` in `mailbox`: as fetched whole when the cache withheld it.
    pub(super) fn report(&self, mailbox: &str, name: &str) -> Option<Arc<CachedWorkStatus>> {
        match self.fetched.get(&(mailbox.to_string(), name.to_string())) {
            Some(fetched) => Some(fetched.clone()),
            None => self.work_statuses.get(&ObjectRef::new(name).within(mailbox)),
        }
    }

    /// The verdict on the object `key` on `wec`: its one report's there, judged against the
    /// object the WDS has now (see [`CachedWorkStatus::health`]).
    pub(super) fn verdict(&self, key: &WorkloadRef, object: Option<&CachedObject>, wec: &str) -> Health {
        let ruled = self.ruled.get(key).and_then(|wecs| wecs.get(wec));
        match object {
            Some(object) => self.verdict_ruled(key, object, wec, ruled),
            None => Health {
                verdict: Verdict::Unknown,
                reason: "not in the WDS".into(),
            },
        }
    }

    /// The verdict on the WDS `object` (`key`) on `wec`, with `ruled` its HealthRule's there.
    pub(super) fn verdict_ruled(
        &self,
        key: &WorkloadRef,
        object: &CachedObject,
        wec: &str,
        ruled: Option<&Health>,
    ) -> Health {
        let unknown = |reason: &str| Health {
            verdict: Verdict::Unknown,
            reason: reason.to_string(),
        };
        let reports: Vec<&CachedName> = self.reports.of(key).filter(|(mailbox, _)| mailbox == wec).collect();
        let [(mailbox, name)] = reports.as_slice() else {
            return unknown(if reports.is_empty() {
                "not reported yet"
            } else {
                "more than one report on it"
            });
        };
        match self.report(mailbox, name) {
            Some(report) => report.health(object, ruled),
            None => unknown("not reported yet"),
        }
    }

    /// The verdict on `key` on `wec` as last judged ([`StatusController::judge_anew`]), or
    /// judged now when it has not been there yet.
    fn judged_on(&self, key: &WorkloadRef, wec: &str) -> Cow<'_, Health> {
        match self.judged.get(key).and_then(|wecs| wecs.get(wec)) {
            Some(health) => Cow::Borrowed(health),
            None => Cow::Owned(self.verdict(key, self.informers.get(key).as_deref(), wec)),
        }
    }

    /// Judges the object `key` anew on the WECs it is sent to, and says each change of verdict:
    /// an Event on the object, and, when it turns healthy, that moment in the trace of the WEC's
    /// report (`wecs`); Events only for news ([`health::is_news`]). True when a verdict or its
    /// reason changed: the health of the policies sending it may have.
    pub(super) fn judge_anew(
        &mut self,
        key: &WorkloadRef,
        object: &CachedObject,
        resource: &ApiResource,
        wecs: &BTreeMap<String, WecStatus>,
    ) -> bool {
        let now: BTreeMap<String, Health> = self
            .bindings
            .wecs_of(key)
            .into_iter()
            .map(|wec| {
                let health = self.verdict(key, Some(object), &wec);
                (wec, health)
            })
            .collect();
        // An object sent nowhere keeps no entry.
        let before = match now.is_empty() {
            true => self.judged.remove(key),
            false => self.judged.insert(key.clone(), now.clone()),
        }
        .unwrap_or_default();
        if before == now {
            return false;
        }
        for (wec, health) in &now {
            let was = before.get(wec);
            if health::is_news(was, health) {
                self.events.changed(reference(object, resource), wec, health);
            }
            if health.verdict == Verdict::Healthy
                && was.is_some_and(|was| was.verdict != Verdict::Healthy)
                && let Some(reported) = wecs.get(wec)
            {
                trace_healthy(key, wec, reported);
            }
        }
        true
    }

    /// Sets the policy's `health` and `Healthy` condition when they changed, from the verdicts
    /// on its Binding's objects on its Binding's WECs.
    pub(super) async fn reconcile_health(&mut self, name: &str) -> kube::Result<()> {
        let this = &*self;
        let (Some(policy), Some(view)) = (this.stores.policies.get(&ObjectRef::new(name)), this.bindings.get(name))
        else {
            return Ok(());
        };
        // Until the binding controller has written the status, it misses required fields.
        let Some(current) = policy
            .status
            .as_ref()
            .filter(|_| policy.metadata.deletion_timestamp.is_none())
        else {
            return Ok(());
        };
        let wecs: BTreeSet<&str> = view.destinations.iter().map(|d| d.cluster_id.as_str()).collect();
        let summary = health::summarize(wecs.into_iter().map(|wec| {
            let verdicts = view.entries.keys().map(move |key| (key, this.judged_on(key, wec)));
            (wec.to_string(), verdicts)
        }));
        let now = Time(k8s_openapi::jiff::Timestamp::now());
        let condition = health::condition(&summary, current.condition(condition_type::HEALTHY), now);
        if health::differs(current, &summary, &condition) {
            writes::apply_policy_health(&self.wds, &policy, &summary, &condition).await?;
            self.metrics.common.writes.inc();
        }
        self.health_left
            .insert(name.to_string(), (Some(summary), Some(condition)));
        Ok(())
    }
}

/// How often a policy's health is looked at: at most once per [`Pace::PERIOD`]; what comes
/// sooner waits until then. While a rollout of thousands of objects changes verdicts in every
/// pass, counting them all at each pass would cost the hub more than the rest of the status
/// return; a lone change is counted at once.
#[derive(Default)]
pub(super) struct Pace {
    last: BTreeMap<String, Instant>,
    waiting: BTreeSet<String>,
}

impl Pace {
    pub(super) const PERIOD: Duration = Duration::from_secs(1);

    /// Of `policies`, those whose health may be looked at `now`; the others wait.
    pub(super) fn take_ready(&mut self, policies: BTreeSet<String>, now: Instant) -> Vec<String> {
        self.last.retain(|_, at| now.duration_since(*at) < Self::PERIOD);
        let mut ready = Vec::new();
        for policy in policies {
            if self.last.contains_key(&policy) {
                self.waiting.insert(policy);
            } else {
                self.waiting.remove(&policy);
                self.last.insert(policy.clone(), now);
                ready.push(policy);
            }
        }
        ready
    }

    /// When the first waiting policy may be looked at.
    pub(super) fn next_due(&self) -> Option<Instant> {
        self.waiting
            .iter()
            .map(|p| self.last.get(p).map_or_else(Instant::now, |at| *at + Self::PERIOD))
            .min()
    }

    /// The waiting policies whose turn has come by `now`.
    pub(super) fn take_due(&mut self, now: Instant) -> Vec<String> {
        let due: Vec<String> = self
            .waiting
            .iter()
            .filter(|p| {
                self.last
                    .get(*p)
                    .is_none_or(|at| now.duration_since(*at) >= Self::PERIOD)
            })
            .cloned()
            .collect();
        due.iter().for_each(|p| {
            self.waiting.remove(p);
        });
        due
    }

    pub(super) fn len(&self) -> usize {
        self.waiting.len()
    }
}

/// A reference to the WDS object, for its Events.
pub(super) fn reference(object: &CachedObject, resource: &ApiResource) -> ObjectReference {
    ObjectReference {
        api_version: Some(resource.api_version.clone()),
        kind: Some(resource.kind.clone()),
        name: Some(object.name_any()),
        namespace: object.namespace(),
        uid: object.uid(),
        ..Default::default()
    }
}

/// Continues the trace of the WEC's status report with a `healthy` span: from the report's
/// status write to the hub judging the object healthy on that WEC.
fn trace_healthy(key: &WorkloadRef, wec: &str, reported: &WecStatus) {
    let report = ks_shared::telemetry::extract_context(&reported.trace);
    if !rollout::is_traced(&report) {
        return;
    }
    let now = SystemTime::now();
    let written = reported.last_update.as_ref().map_or(now, |t| SystemTime::from(t.0));
    rollout::record(
        stage::HEALTHY,
        &report,
        written,
        now,
        super::span_attributes(key, wec),
        &rollout::Labels::on(wec),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> BTreeSet<String> {
        list.iter().map(|n| n.to_string()).collect()
    }

    #[test]
    fn a_policy_looked_at_waits_a_period_before_the_next_look() {
        let mut pace = Pace::default();
        let start = Instant::now();
        assert_eq!(pace.take_ready(names(&["a", "b"]), start), ["a", "b"]);
        assert_eq!(pace.next_due(), None, "nothing waits");
        let soon = start + Duration::from_millis(100);
        assert!(pace.take_ready(names(&["a"]), soon).is_empty(), "a waits");
        assert_eq!(pace.len(), 1);
        assert_eq!(pace.next_due(), Some(start + Pace::PERIOD));
        assert!(pace.take_due(soon).is_empty());
        assert_eq!(pace.take_due(start + Pace::PERIOD), ["a"]);
        assert_eq!(pace.len(), 0);
        let later = start + Pace::PERIOD * 2;
        assert_eq!(
            pace.take_ready(names(&["a", "c"]), later),
            ["a", "c"],
            "a period on, at once"
        );
    }
}
