//! A WorkStatus as the status controller's cache keeps it: what the controller reads of it and
//! nothing else. Its name and namespace key it, the object it reports on is parsed once, and its
//! `.status` stays the JSON text the apiserver sent, parsed only when that object's status is
//! planned. As a typed WorkStatus, a Deployment's report (its status three B-tree maps and a few
//! dozen strings, its trace annotations a B-tree node of their own) took over twice its text,
//! and 20,000 of them (10,000 objects on 2 WECs) were most of what the hub's heap gained while
//! status came back.

use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use ks_shared::api::{Health, StatusDetails, Verdict, WorkStatus, WorkStatusSpec};
use ks_shared::health;
use ks_shared::names::{WDS_CONTENT_ANNOTATION, WDS_UID_ANNOTATION, is_trace_annotation};
use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;

use super::plan::{WecStatus, last_status_update};
use super::state::WorkloadRef;
use crate::informers::CachedObject;
use kube::ResourceExt;

/// The largest `.status` the cache keeps, in bytes of JSON. A WEC's agent credential may write
/// any WorkStatus in its mailbox; a larger status is refused (kept as none, counted and said by
/// the controller), so that forged reports cost the hub little. Objects' statuses are rarely a
/// tenth of this.
pub const MAX_RETURNED_STATUS: usize = 256 << 10;
/// The longest trace annotation value kept: a `traceparent` is 55 characters.
const MAX_TRACE_VALUE: usize = 1024;

/// One cached WorkStatus; its type is WorkStatus's.
#[derive(Clone, Debug, Deserialize)]
#[serde(from = "SentWorkStatus")]
pub struct CachedWorkStatus {
    /// Its metadata but its labels, annotations, owners and managed fields.
    pub metadata: ObjectMeta,
    /// The object it reports on; `None` when its `sourceRef` does not say.
    pub reported: Option<Arc<WorkloadRef>>,
    /// `.status` as sent; `None` while it is null.
    status: Option<Box<RawValue>>,
    /// When `.status` was last written (its newest `managedFields` entry touching it).
    last_update: Option<Time>,
    details: Option<StatusDetails>,
    /// The agent's verdict on the object.
    health: Option<Health>,
    /// Its trace annotations.
    trace: Vec<(String, String)>,
    /// The incarnation of the WDS object it reports on, when its agent says.
    wds_uid: Option<Box<str>>,
    /// The content of the WDS object it reports on, when the transport sent a digest of it
    /// (where a status write raises the generation) and its agent says.
    wds_content: Option<Box<str>>,
    /// The size of a `.status` larger than [`MAX_RETURNED_STATUS`], refused.
    pub refused: Option<usize>,
    /// Whether its status and trace were left out because no Binding sends the object it
    /// reports on to its WEC when it was cached ([`CachedWorkStatus::withhold`]).
    pub withheld: bool,
}

impl CachedWorkStatus {
    /// Leaves out what it reports (its status, details and trace): kept for a report on an
    /// object no Binding sends to its WEC, which a WEC's agent credential can write as often as
    /// its quota allows. Its name and the object it names stay, so that the report is fetched
    /// whole if a Binding comes to send that object there.
    pub fn withhold(&mut self) {
        self.status = None;
        self.details = None;
        self.health = None;
        self.trace.clear();
        self.last_update = None;
        self.withheld = true;
    }

    /// What the WEC reported on the WDS object with `uid`, `.status` parsed (the CRD admits only
    /// objects there). Nothing yet, as from a WEC that has not reported, while it reports on
    /// another incarnation (one deleted since, under the same name), or, to an object that has
    /// had no status returned (`returned`), while the WEC has not acted on what it was sent:
    /// OCM updates the WEC copy of an object made again in place, and until the WEC's
    /// controllers catch up its status is its predecessor's. A report naming no incarnation (an
    /// agent before this one, or upstream's, which keeps no `statusDetails`) is taken as it is.
    pub fn wec_status(&self, uid: &str, returned: bool) -> WecStatus {
        if self.withheld {
            return WecStatus::default();
        }
        let current = match self.wds_uid.as_deref() {
            None => true,
            Some(reported) => {
                reported == uid && (returned || self.details.as_ref().is_some_and(|d| d.last_generation_is_applied))
            }
        };
        if !current {
            return WecStatus::default();
        }
        let status = self
            .status
            .as_ref()
            .and_then(|raw| serde_json::from_str(raw.get()).ok());
        WecStatus {
            status: status.map(Value::Object),
            last_update: self.last_update.clone(),
            details: self.details.clone(),
            trace: self.trace.iter().cloned().collect(),
        }
    }

    /// The verdict to count for the WDS `object` (as it is now) on this report's WEC: once the
    /// report is about that incarnation and the WEC runs that version (its generation, as the
    /// WDS generation annotation says when it says; or its content, where the report names a
    /// content digest), `ruled` (a HealthRule's verdict on it) or else the agent's; before, what
    /// is awaited. An object without a UID (none comes from an apiserver so) matches no report.
    pub fn health(&self, object: &CachedObject, ruled: Option<&Health>) -> Health {
        let awaited = |verdict, reason: &str| Health {
            verdict,
            reason: reason.to_string(),
        };
        let uid = object.uid().unwrap_or_default();
        if self.withheld || self.wds_uid.as_deref().is_some_and(|reported| reported != uid) {
            return awaited(Verdict::Unknown, "not reported on this object yet");
        }
        let running = self.details.as_ref().map_or(0, |d| d.last_generation);
        if let Some(generation) = object.metadata.generation
            && running > 0
            && running < generation
        {
            return Health {
                verdict: Verdict::Progressing,
                reason: format!("the WEC runs generation {running} of {generation}"),
            };
        }
        if let Some(reported) = self.wds_content.as_deref()
            && object.content_digest().is_ok_and(|now| now != reported)
        {
            return awaited(
                Verdict::Progressing,
                "the WEC does not run the object's current content yet",
            );
        }
        match ruled.or(self.health.as_ref()) {
            Some(health) => health.clone(),
            None => awaited(Verdict::Unknown, "its agent gives no verdict"),
        }
    }
}

/// A WorkStatus as the apiserver sends it, as far as the cache reads it.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SentWorkStatus {
    metadata: ObjectMeta,
    #[serde(default)]
    spec: WorkStatusSpec,
    #[serde(default)]
    status_details: Option<StatusDetails>,
    /// Read strictly, as `statusDetails` is: the CRD's schema admits only the four verdicts (an
    /// older CRD prunes the field, read as none).
    #[serde(default)]
    health: Option<Health>,
    #[serde(default)]
    status: Option<Box<RawValue>>,
}

impl From<SentWorkStatus> for CachedWorkStatus {
    fn from(sent: SentWorkStatus) -> CachedWorkStatus {
        let SentWorkStatus {
            mut metadata,
            spec,
            status_details,
            health,
            status,
        } = sent;
        let last_update = last_status_update(metadata.managed_fields.as_deref().unwrap_or_default());
        let annotations = metadata.annotations.take().unwrap_or_default();
        let wds_uid = annotations.get(WDS_UID_ANNOTATION).map(|u| u.as_str().into());
        let wds_content = annotations.get(WDS_CONTENT_ANNOTATION).map(|c| c.as_str().into());
        let trace = annotations.into_iter();
        metadata.managed_fields = None;
        metadata.labels = None;
        metadata.owner_references = None;
        let refused = status
            .as_ref()
            .map(|s| s.get().len())
            .filter(|&len| len > MAX_RETURNED_STATUS);
        // Kept as none, as from a WEC that has not reported: the object's returned status is left
        // as it was (`plan::returned_status` leaves it), never emptied by a refused report.
        let status = status.filter(|_| refused.is_none());
        let source = spec.source_ref;
        let named = !source.resource.is_empty() && !source.name.is_empty();
        CachedWorkStatus {
            metadata,
            reported: named.then(|| {
                Arc::new(WorkloadRef::new(
                    &source.group,
                    &source.resource,
                    &source.namespace,
                    &source.name,
                ))
            }),
            status,
            last_update,
            details: status_details,
            health: health.map(|h| Health {
                reason: health::bounded_reason(h.reason),
                ..h
            }),
            trace: trace
                .filter(|(key, value)| is_trace_annotation(key) && value.len() <= MAX_TRACE_VALUE)
                .collect(),
            wds_uid,
            wds_content,
            refused,
            withheld: false,
        }
    }
}

ks_shared::watched_as!(CachedWorkStatus, WorkStatus);

#[cfg(test)]
mod tests {
    use kube::Resource;
    use kube::core::{ObjectList, WatchEvent};
    use serde_json::json;

    use super::*;

    /// A report as an agent writes it, a hand-written status edit after the agent's.
    const REPORT: &str = r#"{"apiVersion":"control.kubestellar.io/v1alpha1","kind":"WorkStatus",
        "metadata":{"name":"appsv1-deployment-ns-web","namespace":"wec1","resourceVersion":"7",
            "labels":{"transport.kubestellar.io/originWdsName":"wds1"},
            "annotations":{"tracing.k8s.io/traceparent":"00-abc-def-01","other":"dropped",
                "transport.kubestellar.io/wds-uid":"uid-web"},
            "managedFields":[
                {"manager":"agent","time":"2025-01-01T00:00:09Z","fieldsType":"FieldsV1","fieldsV1":{"f:spec":{"f:sourceRef":{}}}},
                {"manager":"agent","time":"2025-01-01T00:00:05Z","subresource":"status","fieldsType":"FieldsV1","fieldsV1":{"f:status":{"f:replicas":{}}}},
                {"manager":"hand","time":"2025-01-01T00:00:07Z","subresource":"status","fieldsType":"FieldsV1","fieldsV1":{"f:status":{}}}]},
        "spec":{"sourceRef":{"group":"apps","version":"v1","resource":"deployments","kind":"Deployment","name":"web","namespace":"ns"}},
        "statusDetails":{"lastGeneration":3,"lastGenerationIsApplied":true,"lastCurrencyUpdateTime":"2025-01-01T00:00:00Z"},
        "status":{"replicas":1,"conditions":[{"type":"Available","status":"False","message":"a \"quoted\" ü"}]}}"#;

    /// The shapes kube's watcher parses: a watch event line and a list page (both straight from
    /// serde_json's reader, which keeps raw text), and a tree.
    fn parsed_every_way(report: &str) -> [CachedWorkStatus; 3] {
        let event = format!(r#"{{"type":"ADDED","object":{report}}}"#);
        let Ok(WatchEvent::Added(from_event)) = serde_json::from_str(&event) else {
            panic!("not parsed as an addition");
        };
        let list = format!(r#"{{"metadata":{{"resourceVersion":"9"}},"items":[{report}]}}"#);
        let from_list = serde_json::from_str::<ObjectList<_>>(&list).unwrap().items.remove(0);
        let from_tree = serde_json::from_value(serde_json::from_str(report).unwrap()).unwrap();
        [from_event, from_list, from_tree]
    }

    /// The WDS Deployment `web` as the cache holds it: incarnation `uid`, at `generation`, with
    /// `spec`.
    fn wds_object(uid: &str, generation: Option<i64>, spec: serde_json::Value) -> CachedObject {
        serde_json::from_value(
            json!({"metadata": {"name": "web", "namespace": "ns", "uid": uid, "generation": generation},
                                      "spec": spec}),
        )
        .unwrap()
    }

    #[test]
    fn the_agents_verdict_counts_only_for_the_incarnation_and_generation_the_wds_has() {
        let with_health =
            |health: &str| REPORT.replace(r#""statusDetails":"#, &format!(r#""health":{health},"statusDetails":"#));
        let degraded = with_health(r#"{"verdict":"Degraded","reason":"Progressing: ProgressDeadlineExceeded"}"#);
        let at = |uid: &str, generation: Option<i64>| wds_object(uid, generation, json!({}));
        for report in parsed_every_way(&degraded) {
            let said = |uid: &str, generation: Option<i64>| {
                let health = report.health(&at(uid, generation), None);
                (health.verdict, health.reason)
            };
            assert_eq!(
                said("uid-web", Some(3)),
                (Verdict::Degraded, "Progressing: ProgressDeadlineExceeded".into())
            );
            assert_eq!(
                said("uid-web", None),
                (Verdict::Degraded, "Progressing: ProgressDeadlineExceeded".into())
            );
            assert_eq!(
                said("uid-web", Some(4)),
                (Verdict::Progressing, "the WEC runs generation 3 of 4".into())
            );
            assert_eq!(
                said("uid-other", Some(3)).0,
                Verdict::Unknown,
                "a predecessor's verdict"
            );
            let mut withheld = report.clone();
            withheld.withhold();
            assert_eq!(withheld.health(&at("uid-web", Some(3)), None).verdict, Verdict::Unknown);
            let ruled = Health {
                verdict: Verdict::Healthy,
                reason: String::new(),
            };
            assert_eq!(
                report.health(&at("uid-web", Some(3)), Some(&ruled)),
                ruled,
                "a HealthRule's verdict first"
            );
            assert_eq!(
                report.health(&at("uid-web", Some(4)), Some(&ruled)).verdict,
                Verdict::Progressing,
                "but not on what the WEC does not run yet"
            );
        }
        let [unjudged, ..] = parsed_every_way(REPORT);
        assert_eq!(
            unjudged.health(&at("uid-web", Some(3)), None).reason,
            "its agent gives no verdict",
            "an agent before this one"
        );
        let long = with_health(&format!(
            r#"{{"verdict":"Degraded","reason":"{}"}}"#,
            "x".repeat(100_000)
        ));
        let [forged, ..] = parsed_every_way(&long);
        assert!(forged.health(&at("uid-web", Some(3)), None).reason.len() <= ks_shared::health::MAX_REASON);
    }

    #[test]
    fn a_verdict_on_content_counts_only_for_the_content_the_wds_has() {
        let object = wds_object("uid-web", Some(9), json!({"replicas": 2}));
        let digest = object.content_digest().unwrap();
        let report = REPORT
            .replace(
                r#""transport.kubestellar.io/wds-uid":"uid-web""#,
                &format!(r#""transport.kubestellar.io/wds-uid":"uid-web","{WDS_CONTENT_ANNOTATION}":"{digest}""#),
            )
            .replace(r#""lastGeneration":3"#, r#""lastGeneration":0"#)
            .replace(
                r#""statusDetails":"#,
                r#""health":{"verdict":"Healthy","reason":""},"statusDetails":"#,
            );
        for report in parsed_every_way(&report) {
            assert_eq!(report.health(&object, None).verdict, Verdict::Healthy, "any generation");
            let edited = wds_object("uid-web", Some(10), json!({"replicas": 3}));
            assert_eq!(
                report.health(&edited, None),
                Health {
                    verdict: Verdict::Progressing,
                    reason: "the WEC does not run the object's current content yet".into()
                }
            );
        }
    }

    #[test]
    fn a_status_too_large_and_a_long_trace_value_are_not_kept() {
        let large = format!(r#"{{"blob":"{}"}}"#, "x".repeat(MAX_RETURNED_STATUS));
        let report = REPORT
            .replace(
                r#""status":{"replicas":1,"conditions":[{"type":"Available","status":"False","message":"a \"quoted\" ü"}]}"#,
                &format!(r#""status":{large}"#),
            )
            .replace("00-abc-def-01", &"0".repeat(MAX_TRACE_VALUE + 1));
        assert_ne!(report, REPORT);
        for cached in parsed_every_way(&report) {
            assert_eq!(cached.refused, Some(large.len()));
            let read = cached.wec_status("uid-web", true);
            assert_eq!((read.status, read.trace.len()), (None, 0));
            assert!(read.details.is_some(), "what else it says is kept");
        }
        for cached in parsed_every_way(REPORT) {
            assert_eq!(cached.refused, None);
        }
    }

    #[test]
    fn a_withheld_report_keeps_only_what_it_is_about() {
        for mut cached in parsed_every_way(REPORT) {
            cached.withhold();
            let read = cached.wec_status("uid-web", true);
            assert!(read.status.is_none() && read.details.is_none() && read.trace.is_empty());
            assert_eq!(
                cached.reported.as_deref(),
                Some(&WorkloadRef::new("apps", "deployments", "ns", "web"))
            );
            assert!(cached.withheld && cached.status.is_none() && cached.trace.is_empty());
        }
    }

    #[test]
    fn a_report_keeps_what_is_read_of_it() {
        let typed: WorkStatus = serde_json::from_str(REPORT).unwrap();
        for cached in parsed_every_way(REPORT) {
            let earlier = cached.wec_status("uid-of-the-web-deleted-before", true);
            assert_eq!(
                (earlier.status, earlier.details, earlier.trace.len()),
                (None, None, 0),
                "a report on another incarnation is none yet"
            );
            let read = cached.wec_status("uid-web", false);
            assert_eq!(read.status, typed.status.as_ref().map(|s| Value::Object(s.0.clone())));
            assert_eq!(
                read.last_update.map(|t| t.0.to_string()).as_deref(),
                Some("2025-01-01T00:00:07Z")
            );
            assert_eq!(read.details, typed.spec.status_details);
            assert_eq!(
                read.trace,
                [("tracing.k8s.io/traceparent".into(), "00-abc-def-01".into())].into()
            );
            assert_eq!(
                cached.reported.as_deref(),
                Some(&WorkloadRef::new("apps", "deployments", "ns", "web"))
            );
            let ObjectMeta {
                name,
                namespace,
                resource_version,
                ..
            } = &typed.metadata;
            let kept = ObjectMeta {
                name: name.clone(),
                namespace: namespace.clone(),
                resource_version: resource_version.clone(),
                ..Default::default()
            };
            assert_eq!(cached.metadata, kept);
        }
    }

    #[test]
    fn a_report_the_wec_has_not_acted_on_is_returned_only_where_status_was_returned_before() {
        let lagging = REPORT.replace(
            r#""lastGenerationIsApplied":true"#,
            r#""lastGenerationIsApplied":false"#,
        );
        let unnamed = lagging.replace(r#""transport.kubestellar.io/wds-uid":"uid-web""#, r#""x":"y""#);
        for cached in parsed_every_way(&lagging) {
            assert_eq!(
                cached.wec_status("uid-web", false).status,
                None,
                "a new incarnation waits"
            );
            assert!(cached.wec_status("uid-web", true).status.is_some(), "a rollout goes on");
        }
        for cached in parsed_every_way(&unnamed) {
            assert!(cached.wec_status("uid-web", false).status.is_some(), "an older agent's");
        }
    }

    #[test]
    fn a_report_never_written_or_naming_no_object_has_none_of_that() {
        let report =
            json!({"metadata": {"name": "w"}, "spec": {"sourceRef": {"group": "", "namespace": "ns"}}, "status": null});
        for cached in parsed_every_way(&report.to_string()) {
            let read = cached.wec_status("uid", false);
            assert_eq!((read.status, read.last_update, read.details), (None, None, None));
            assert!(read.trace.is_empty());
            assert_eq!(cached.reported, None);
        }
    }

    #[test]
    fn it_is_watched_as_a_work_status() {
        assert_eq!(
            CachedWorkStatus::url_path(&(), Some("wec1")),
            WorkStatus::url_path(&(), Some("wec1"))
        );
        assert_eq!(CachedWorkStatus::kind(&()), "WorkStatus");
    }

    /// The report WEC `wec` makes on object `i`: a Deployment whose pod is not ready when `i` is
    /// even, else a ConfigMap.
    #[cfg(feature = "jemalloc")]
    fn report(i: usize, wec: usize) -> String {
        let (group, resource, kind, name, status) = match i % 2 {
            0 => (
                "apps",
                "deployments",
                "Deployment",
                format!("dep-{i:05}"),
                json!({"observedGeneration": 1, "replicas": 1, "updatedReplicas": 1, "unavailableReplicas": 1,
                "conditions": [
                    {"type": "Available", "status": "False", "reason": "MinimumReplicasUnavailable",
                     "message": "Deployment does not have minimum availability.",
                     "lastTransitionTime": "2026-11-27T10:00:01Z", "lastUpdateTime": "2026-11-27T10:00:01Z"},
                    {"type": "Progressing", "status": "True", "reason": "ReplicaSetUpdated",
                     "message": format!("ReplicaSet \"dep-{i:05}-5d8f7c6b9\" is progressing."),
                     "lastTransitionTime": "2026-11-27T10:00:01Z", "lastUpdateTime": "2026-11-27T10:00:02Z"}]}),
            ),
            _ => ("", "configmaps", "ConfigMap", format!("cm-{i:05}"), Value::Null),
        };
        let namespace = format!("bench-{}", i % 10);
        let managed = |fields: Value, subresource: Option<&str>| {
            json!({"manager": "ks-agent", "operation": "Apply", "apiVersion": "control.kubestellar.io/v1alpha1",
                   "time": "2026-11-27T10:00:02Z", "fieldsType": "FieldsV1", "fieldsV1": fields, "subresource": subresource})
        };
        json!({
            "apiVersion": "control.kubestellar.io/v1alpha1", "kind": "WorkStatus",
            "metadata": {
                "name": format!("v1-{resource}-{namespace}-{name}"), "namespace": format!("cluster{wec}"),
                "uid": format!("0c2f1c5e-8a0b-4f1e-9a3b-{i:012}"), "resourceVersion": (1000 + i).to_string(),
                "generation": 1, "creationTimestamp": "2026-11-27T10:00:00Z",
                "labels": {"transport.kubestellar.io/originWdsName": "wds1"},
                "annotations": {"tracing.k8s.io/traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
                "managedFields": [managed(json!({"f:spec": {"f:sourceRef": {}}}), None),
                                  managed(json!({"f:status": {}}), Some("status"))],
            },
            "spec": {"sourceRef": {"group": group, "version": "v1", "resource": resource, "kind": kind,
                                   "name": name, "namespace": namespace}},
            "statusDetails": {"lastGeneration": 1, "lastGenerationIsApplied": true,
                              "lastCurrencyUpdateTime": "2026-11-27T10:00:02Z"},
            "status": status,
        })
        .to_string()
    }

    /// A benchmark, not a check (`make bench-status-cache`): the heap the status controller holds
    /// per WEC report, in its WorkStatus cache and in its index of what each reports on, for
    /// `BENCH_REPORTS` reports (default 20,000: 10,000 objects, half Deployments and half
    /// ConfigMaps, on 2 WECs).
    #[cfg(feature = "jemalloc")]
    #[test]
    #[ignore]
    fn bench_report_cache() {
        use kube::ResourceExt;
        use kube::runtime::{reflector, watcher};

        use crate::status::state::Index;
        let n: usize = std::env::var("BENCH_REPORTS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(20_000);
        let sent: Vec<String> = (0..n).map(|i| report(i / 2, 1 + i % 2)).collect();
        let text: usize = sent.iter().map(String::len).sum();
        let allocated = || {
            tikv_jemalloc_ctl::epoch::advance().expect("jemalloc's epoch");
            tikv_jemalloc_ctl::stats::allocated::read().expect("jemalloc's statistics")
        };
        let start = allocated();
        let (cache, mut writer) = reflector::store::<CachedWorkStatus>();
        for report in &sent {
            let cached = serde_json::from_str(report).expect("a WorkStatus");
            writer.apply_watcher_event(&watcher::Event::Apply(cached));
        }
        let cached = allocated();
        let mut index: Index<Arc<WorkloadRef>> = Index::default();
        for report in cache.state() {
            let name = (report.namespace().unwrap_or_default(), report.name_any());
            index.set(name, report.reported.clone());
        }
        let indexed = allocated();
        let per_report = |bytes: usize| bytes / n;
        println!(
            "{n} WEC reports ({} bytes of JSON each): the WorkStatus cache holds {} bytes per report, the index of \
             what each reports on {}; {:.1} MiB in all",
            per_report(text),
            per_report(cached - start),
            per_report(indexed - cached),
            (indexed - start) as f64 / f64::from(1 << 20)
        );
    }
}
