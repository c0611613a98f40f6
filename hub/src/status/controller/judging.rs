//! The status controller's part in health: the verdict on an object on a WEC (its report's,
//! or its HealthRule's), each change of it said (an Event on the object, and the moment it turns
//! healthy in the rollout's trace), and each policy's health written from its Binding.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::SystemTime;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use ks_shared::api::{Health, Verdict, condition_type};
use ks_shared::rollout::{self, stage};
use kube::ResourceExt;
use kube::discovery::ApiResource;
use kube::runtime::reflector::ObjectRef;

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
        let unknown = |reason: &str| Health {
            verdict: Verdict::Unknown,
            reason: reason.to_string(),
        };
        let Some(object) = object else {
            return unknown("not in the WDS");
        };
        let reports: Vec<&CachedName> = self.reports.of(key).filter(|(mailbox, _)| mailbox == wec).collect();
        let [(mailbox, name)] = reports.as_slice() else {
            return unknown(if reports.is_empty() {
                "not reported yet"
            } else {
                "more than one report on it"
            });
        };
        let ruled = self.ruled.get(key).and_then(|wecs| wecs.get(wec));
        match self.report(mailbox, name) {
            Some(report) => report.health(&object.uid().unwrap_or_default(), object.metadata.generation, ruled),
            None => unknown("not reported yet"),
        }
    }

    /// Judges the object `key` anew on the WECs it is sent to, and says each change of verdict:
    /// an Event on the object, and, when it turns healthy, that moment in the trace of the WEC's
    /// report (`wecs`). A verdict first seen is no change (a restart says nothing), nor is a first
    /// report of a rollout under way (`Unknown` to `Progressing`). True when a verdict or its
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
        let before = self.judged.insert(key.clone(), now.clone()).unwrap_or_default();
        if before == now {
            return false;
        }
        for (wec, health) in &now {
            if !health::is_news(before.get(wec), health) {
                continue;
            }
            self.events.changed(reference(object, resource), wec, health);
            if health.verdict == Verdict::Healthy
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
        let objects: Vec<(&WorkloadRef, Option<Arc<CachedObject>>)> =
            view.entries.keys().map(|key| (key, this.informers.get(key))).collect();
        let wecs: BTreeSet<&str> = view.destinations.iter().map(|d| d.cluster_id.as_str()).collect();
        let summary = health::summarize(wecs.into_iter().map(|wec| {
            let verdicts = objects
                .iter()
                .map(move |(key, object)| (*key, this.verdict(key, object.as_deref(), wec)));
            (wec.to_string(), verdicts)
        }));
        let now = Time(k8s_openapi::jiff::Timestamp::now());
        let condition = health::condition(&summary, current.condition(condition_type::HEALTHY), now);
        if health::differs(current, &summary, &condition) {
            writes::apply_policy_health(&self.wds, name, &summary, &condition).await?;
            self.metrics.common.writes.inc();
        }
        self.health_left
            .insert(name.to_string(), (Some(summary), Some(condition)));
        Ok(())
    }
}

/// A reference to the WDS object, for its Events.
fn reference(object: &CachedObject, resource: &ApiResource) -> ObjectReference {
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
    rollout::record(stage::HEALTHY, &report, written, now, super::span_attributes(key, wec));
}
