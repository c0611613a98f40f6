//! What the WorkStatus of one delivered object should say, and what has to be written to get
//! there from what the hub has: pure functions over plain data.
//!
//! How the WDS generation travels: the transport annotates every object it wraps with
//! [`WDS_GENERATION_ANNOTATION`] (the object's generation in the WDS). The WEC object carries
//! it, so `statusDetails.lastGeneration` is that value (0 when absent or not a number), and
//! `lastGenerationIsApplied` says whether the WEC has acted on that delivery: true when the WEC
//! object's `status.observedGeneration` has reached its own `metadata.generation`, or, for kinds
//! that do not report `observedGeneration`, as soon as the object is there (the work agent
//! applied it). `lastCurrencyUpdateTime` changes only when one of those two values does.
//! Where the WDS raises an object's generation on a write of its status (no status
//! subresource), the transport sends a digest of its content instead
//! ([`WDS_CONTENT_ANNOTATION`]): `lastGeneration` is then 0, and the digest is handed on as an
//! annotation of the WorkStatus, as the WDS UID is.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
use ks_shared::api::{Health, SourceRef, StatusDetails};
use ks_shared::health;
use ks_shared::names::{
    self, SINGLETON_STATUS_LABEL, WDS_CONTENT_ANNOTATION, WDS_GENERATION_ANNOTATION, WDS_UID_ANNOTATION,
};
use ks_shared::ocm::ManifestWork;
use kube::api::DynamicObject;
use serde_json::{Map, Value, json};

use crate::existing::Existing;
use crate::objects::Key;

/// The field manager of every write the agent makes.
pub use ks_shared::names::field_manager::AGENT as FIELD_MANAGER;

/// The content the WorkStatus of one object should have.
#[derive(Clone, Debug, PartialEq)]
pub struct Desired {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    /// Trace context copied from the WEC object; never a change on its own.
    pub trace_annotations: BTreeMap<String, String>,
    /// The WDS object's UID the WEC object carries ([`WDS_UID_ANNOTATION`]), handed on as the
    /// same annotation of the WorkStatus: the hub returns only a report on the incarnation it
    /// holds.
    pub wds_uid: Option<String>,
    /// The WDS object's content digest the WEC object carries ([`WDS_CONTENT_ANNOTATION`], in
    /// place of its generation where a status write raises that), handed on the same way: the
    /// hub counts a verdict only on the content the WDS holds now.
    pub wds_content: Option<String>,
    pub owner: OwnerReference,
    pub source_ref: SourceRef,
    pub last_generation: i64,
    pub last_generation_is_applied: bool,
    /// The object's `.status`; `None` for objects without one.
    pub status: Option<Map<String, Value>>,
    /// The verdict on the object, from the whole of it as the WEC has it.
    pub health: Health,
}

/// Whether a manifest is a Secret.
pub fn is_secret(manifest: &Value) -> bool {
    manifest["apiVersion"] == "v1" && manifest["kind"] == "Secret"
}

/// The object `key` as the ManifestWork `work` delivered it: what the agent reports on for
/// objects it does not read on the WEC (Secrets, which have no status to report).
pub fn as_delivered(key: &Key, work: &ManifestWork) -> Option<DynamicObject> {
    let api_version = key.gvr.api_version();
    work.spec
        .workload
        .manifests
        .iter()
        .find(|m| {
            m["apiVersion"] == api_version.as_str()
                && m["kind"] == key.kind.as_str()
                && m["metadata"]["name"] == key.name.as_str()
                && m["metadata"]["namespace"].as_str().unwrap_or_default() == key.namespace
        })
        .and_then(|m| serde::Deserialize::deserialize(&**m).ok())
}

/// What the WorkStatus of `key` should be, given the WEC object and the ManifestWork that
/// delivered it; `None` when the ManifestWork is not KubeStellar's (no WorkStatus then).
pub fn desired(key: &Key, object: &DynamicObject, manifest_work: &ManifestWork) -> Option<Desired> {
    let work_labels = manifest_work.metadata.labels.clone().unwrap_or_default();
    if !work_labels.keys().any(|k| names::is_kubestellar_label(k)) {
        return None;
    }
    let mut labels = work_labels;
    let object_labels = object.metadata.labels.as_ref();
    if let Some(singleton) = object_labels.and_then(|l| l.get(SINGLETON_STATUS_LABEL)) {
        labels.insert(SINGLETON_STATUS_LABEL.to_string(), singleton.clone());
    }
    let annotations = object.metadata.annotations.as_ref();
    let trace_annotations = annotations
        .into_iter()
        .flatten()
        .filter(|(k, _)| names::is_trace_annotation(k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let wds_uid = annotations.and_then(|a| a.get(WDS_UID_ANNOTATION)).cloned();
    let wds_content = annotations.and_then(|a| a.get(WDS_CONTENT_ANNOTATION)).cloned();
    let last_generation = annotations
        .and_then(|a| a.get(WDS_GENERATION_ANNOTATION))
        .and_then(|g| g.trim().parse().ok())
        .unwrap_or(0);
    // An empty `.status` is no status: both are reported as none, so they never differ.
    let status = match object.data.get("status") {
        Some(Value::Object(status)) if !status.is_empty() => Some(status.clone()),
        _ => None,
    };
    let observed = status
        .as_ref()
        .and_then(|s| s.get("observedGeneration"))
        .and_then(Value::as_i64);
    let last_generation_is_applied = match observed {
        Some(observed) => observed >= object.metadata.generation.unwrap_or(0),
        None => true,
    };
    Some(Desired {
        name: key.work_status.clone(),
        labels,
        trace_annotations,
        wds_uid,
        wds_content,
        owner: OwnerReference {
            api_version: "work.open-cluster-management.io/v1".into(),
            kind: "ManifestWork".into(),
            name: manifest_work.metadata.name.clone().unwrap_or_default(),
            uid: manifest_work.metadata.uid.clone().unwrap_or_default(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        },
        source_ref: SourceRef {
            group: key.gvr.group.clone(),
            version: key.gvr.version.clone(),
            resource: key.gvr.resource.clone(),
            kind: key.kind.clone(),
            name: key.name.clone(),
            namespace: key.namespace.clone(),
        },
        last_generation,
        last_generation_is_applied,
        status,
        health: health::judge(&key.gvr.group, &key.kind, object.metadata.generation, &object.data),
    })
}

/// The writes that bring the hub's WorkStatus (as cached) to what is desired.
#[derive(Clone, Debug, PartialEq)]
pub enum Plan {
    /// Already as desired (or absent and not wanted).
    Nothing,
    /// Server-side apply `main` (metadata, spec, statusDetails, health) and/or `status` (to the status
    /// subresource), each only when it differs; `main` first unless `status_first`.
    Apply {
        main: Option<Value>,
        status: Option<Value>,
        status_first: bool,
    },
    /// The WorkStatus exists but should not.
    Delete,
}

/// Compares `desired` with `existing`, ignoring trace annotations and any field another
/// manager owns. `now` stamps `lastCurrencyUpdateTime` when the generation facts change.
pub fn plan(namespace: &str, desired: Option<&Desired>, existing: Option<&Existing>, now: Time) -> Plan {
    let Some(desired) = desired else {
        return if existing.is_some() {
            Plan::Delete
        } else {
            Plan::Nothing
        };
    };
    let existing_details = existing.and_then(|e| e.status_details.as_ref());
    let generation_same = existing_details.is_some_and(|d| {
        d.last_generation == desired.last_generation
            && d.last_generation_is_applied == desired.last_generation_is_applied
    });
    let existing_uid = existing.and_then(|e| annotation(&e.metadata, WDS_UID_ANNOTATION));
    let existing_content = existing.and_then(|e| annotation(&e.metadata, WDS_CONTENT_ANNOTATION));
    let main_same = existing.is_some_and(|e| {
        generation_same
            && existing_uid == desired.wds_uid.as_deref()
            && existing_content == desired.wds_content.as_deref()
            && e.source_ref == desired.source_ref
            && e.health.as_ref() == Some(&desired.health)
            && e.metadata
                .owner_references
                .iter()
                .flatten()
                .any(|o| o == &desired.owner)
            && e.metadata
                .labels
                .as_ref()
                .map_or(desired.labels.is_empty(), |l| *l == desired.labels)
    });
    let status_same = match (existing, &desired.status) {
        (None, None) => true,
        (None, Some(_)) => false,
        (Some(e), wanted) => e.status.as_ref() == wanted.as_ref(),
    };
    if main_same && status_same {
        return Plan::Nothing;
    }
    let main = (!main_same).then(|| {
        let time = match existing_details {
            Some(d) if generation_same => d.last_currency_update_time.clone(),
            _ => now,
        };
        let details = StatusDetails {
            last_generation: desired.last_generation,
            last_generation_is_applied: desired.last_generation_is_applied,
            last_currency_update_time: time,
        };
        let mut annotations = desired.trace_annotations.clone();
        if let Some(uid) = &desired.wds_uid {
            annotations.insert(WDS_UID_ANNOTATION.to_string(), uid.clone());
        }
        if let Some(content) = &desired.wds_content {
            annotations.insert(WDS_CONTENT_ANNOTATION.to_string(), content.clone());
        }
        json!({
            "apiVersion": "control.kubestellar.io/v1alpha1",
            "kind": "WorkStatus",
            "metadata": {
                "name": desired.name,
                "namespace": namespace,
                "labels": desired.labels,
                "annotations": annotations,
                "ownerReferences": [desired.owner],
            },
            "spec": {"sourceRef": desired.source_ref},
            "statusDetails": details,
            "health": desired.health,
        })
    });
    let status = (!status_same).then(|| {
        let mut object = json!({
            "apiVersion": "control.kubestellar.io/v1alpha1",
            "kind": "WorkStatus",
            "metadata": {"name": desired.name, "namespace": namespace},
        });
        if let Some(status) = &desired.status {
            object["status"] = Value::Object(status.clone());
        }
        object
    });
    // The facts the hub judges a status by (which incarnation and content, whether the WEC has
    // acted on its generation) never run ahead of the status: written first, they would for a
    // moment pass an old status (a predecessor's, or one from before the WEC acted) as a
    // current one.
    let now_applied =
        desired.last_generation_is_applied && existing_details.is_some_and(|d| !d.last_generation_is_applied);
    let status_first = existing.is_some()
        && (existing_uid != desired.wds_uid.as_deref()
            || existing_content != desired.wds_content.as_deref()
            || now_applied);
    Plan::Apply {
        main,
        status,
        status_first,
    }
}

/// A WorkStatus's annotation `name`: the WDS UID or content digest it names.
fn annotation<'m>(
    metadata: &'m k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    name: &str,
) -> Option<&'m str> {
    metadata.annotations.as_ref()?.get(name).map(String::as_str)
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry};
    use k8s_openapi::jiff::Timestamp;
    use ks_shared::api::{Verdict, WorkStatus};

    use super::*;
    use crate::objects::Gvr;

    fn key() -> Key {
        Key {
            amw_uid: "uid".into(),
            manifest_work: "mw".into(),
            gvr: Gvr {
                group: "apps".into(),
                version: "v1".into(),
                resource: "deployments".into(),
            },
            kind: "Deployment".into(),
            namespace: "ns".into(),
            name: "web".into(),
            work_status: "uid-appsv1-deployment-ns-web".into(),
        }
    }

    fn work(labels: &[(&str, &str)]) -> ManifestWork {
        let mut mw = ManifestWork::new("mw", Default::default());
        mw.metadata.uid = Some("mw-uid".into());
        mw.metadata.labels = Some(labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect());
        mw
    }

    fn object(value: Value) -> DynamicObject {
        serde_json::from_value(value).unwrap()
    }

    fn deployment(generation: i64, status: Value) -> DynamicObject {
        object(json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "ns", "generation": generation,
                         "labels": {SINGLETON_STATUS_LABEL: "true"},
                         "annotations": {WDS_GENERATION_ANNOTATION: "7",
                                         WDS_UID_ANNOTATION: "wds-uid-1",
                                         names::TRACEPARENT_ANNOTATION: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}},
            "status": status,
        }))
    }

    fn time(seconds: i64) -> Time {
        Time(Timestamp::from_second(seconds).unwrap())
    }

    const KS: (&str, &str) = (names::ORIGIN_WDS_LABEL, "wds1");

    #[test]
    fn a_secret_is_reported_as_delivered() {
        let secret = Key {
            gvr: Gvr {
                group: String::new(),
                version: "v1".into(),
                resource: "secrets".into(),
            },
            kind: "Secret".into(),
            name: "creds".into(),
            ..key()
        };
        let mut mw = work(&[KS]);
        mw.spec.workload.manifests = vec![
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "creds", "namespace": "ns"}}).into(),
            json!({"apiVersion": "v1", "kind": "Secret",
                   "metadata": {"name": "creds", "namespace": "ns", "annotations": {WDS_GENERATION_ANNOTATION: "2"}},
                   "data": {"password": "c2VjcmV0"}})
            .into(),
        ];
        let delivered = as_delivered(&secret, &mw).unwrap();
        let d = desired(&secret, &delivered, &mw).unwrap();
        assert_eq!((d.last_generation, d.last_generation_is_applied), (2, true));
        assert_eq!(d.status, None, "nothing of its data");
        assert!(
            as_delivered(
                &Key {
                    name: "other".into(),
                    ..secret
                },
                &mw
            )
            .is_none()
        );
    }

    #[test]
    fn desired_copies_status_labels_and_generation() {
        let d = desired(
            &key(),
            &deployment(3, json!({"observedGeneration": 3, "availableReplicas": 1})),
            &work(&[KS]),
        )
        .unwrap();
        assert_eq!(d.labels.get(names::ORIGIN_WDS_LABEL).map(String::as_str), Some("wds1"));
        assert_eq!(d.labels.get(SINGLETON_STATUS_LABEL).map(String::as_str), Some("true"));
        assert_eq!(d.last_generation, 7);
        assert!(d.last_generation_is_applied);
        assert_eq!(d.status.unwrap()["availableReplicas"], 1);
        assert_eq!(d.trace_annotations.len(), 1);
        assert_eq!(d.owner.uid, "mw-uid");
        assert_eq!(d.source_ref.kind, "Deployment");

        assert_eq!(
            d.health.verdict,
            Verdict::Progressing,
            "a Deployment without spec.replicas wants 1, updated and available"
        );

        let behind = desired(&key(), &deployment(4, json!({"observedGeneration": 3})), &work(&[KS])).unwrap();
        assert!(!behind.last_generation_is_applied);
        assert_eq!(
            (behind.health.verdict, behind.health.reason.as_str()),
            (Verdict::Progressing, "its controller has seen generation 3 of 4")
        );
    }

    #[test]
    fn a_new_verdict_is_written_with_the_main_apply() {
        let rolling = json!({"observedGeneration": 1, "replicas": 1, "updatedReplicas": 1});
        let d = desired(&key(), &deployment(1, rolling), &work(&[KS])).unwrap();
        let Plan::Apply {
            main: Some(main),
            status: Some(status),
            ..
        } = plan("cluster1", Some(&d), None, time(5))
        else {
            panic!("a new WorkStatus is written whole");
        };
        assert_eq!(
            main["health"],
            json!({"verdict": "Progressing", "reason": "waiting for its updated replicas to become available"})
        );
        let existing = as_written(&main, Some(&status));
        let done = json!({"observedGeneration": 1, "replicas": 1, "updatedReplicas": 1, "availableReplicas": 1});
        let d = desired(&key(), &deployment(1, done), &work(&[KS])).unwrap();
        let Plan::Apply {
            main: Some(main),
            status: Some(_),
            ..
        } = plan("cluster1", Some(&d), Some(&existing), time(6))
        else {
            panic!("the new verdict and status are written");
        };
        assert_eq!(main["health"], json!({"verdict": "Healthy"}));
    }

    #[test]
    fn legacy_labels_count_and_foreign_works_get_nothing() {
        let legacy = work(&[("managed-by.kubestellar.io/something", "x")]);
        assert!(desired(&key(), &deployment(1, json!({})), &legacy).is_some());
        assert!(desired(&key(), &deployment(1, json!({})), &work(&[("app", "x")])).is_none());
        assert!(desired(&key(), &deployment(1, json!({})), &work(&[])).is_none());
    }

    #[test]
    fn objects_without_status_report_none() {
        let config_map = object(json!({"apiVersion": "v1", "kind": "ConfigMap",
                                       "metadata": {"name": "web", "namespace": "ns"}, "data": {"a": "b"}}));
        let d = desired(&key(), &config_map, &work(&[KS])).unwrap();
        assert_eq!(d.status, None);
        let empty = desired(&key(), &deployment(1, json!({})), &work(&[KS])).unwrap();
        assert_eq!(empty.status, None, "an empty status is none");
        assert_eq!(d.last_generation, 0);
        assert!(d.last_generation_is_applied);
        let Plan::Apply { main, status, .. } = plan("cluster1", Some(&d), None, time(5)) else {
            panic!("a new WorkStatus is written");
        };
        assert!(main.is_some());
        assert!(status.is_none(), "no status to write");
    }

    /// The WorkStatus as the hub would return it after our applies of `main` and `status`.
    fn work_status(main: &Value, status: Option<&Value>) -> WorkStatus {
        let mut ws: WorkStatus = serde_json::from_value(main.clone()).unwrap();
        let labels: Map<String, Value> = main["metadata"]["labels"]
            .as_object()
            .unwrap()
            .keys()
            .map(|k| (format!("f:{k}"), json!({})))
            .collect();
        ws.metadata.managed_fields = Some(vec![ManagedFieldsEntry {
            manager: Some(FIELD_MANAGER.into()),
            operation: Some("Apply".into()),
            fields_v1: Some(FieldsV1(json!({"f:metadata": {"f:labels": labels}}))),
            ..Default::default()
        }]);
        ws.status = status.and_then(|s| serde_json::from_value(s["status"].clone()).ok());
        ws
    }

    /// The main part of `d`'s new WorkStatus (both parts written), and the WorkStatus as written.
    fn written_new(d: &Desired) -> (Value, Existing) {
        let Plan::Apply {
            main: Some(main),
            status: Some(status),
            ..
        } = plan("cluster1", Some(d), None, time(5))
        else {
            panic!("a new WorkStatus is written");
        };
        let existing = as_written(&main, Some(&status));
        (main, existing)
    }

    /// What the agent keeps of it.
    fn as_written(main: &Value, status: Option<&Value>) -> Existing {
        Existing::from(work_status(main, status))
    }

    #[test]
    fn writes_only_what_changed() {
        let d = desired(&key(), &deployment(1, json!({"replicas": 1})), &work(&[KS])).unwrap();
        let Plan::Apply {
            main: Some(main),
            status: Some(status),
            status_first: false,
        } = plan("cluster1", Some(&d), None, time(5))
        else {
            panic!("both parts of a new WorkStatus are written, the object first");
        };
        assert_eq!(main["statusDetails"]["lastGeneration"], 7);
        assert_eq!(main["statusDetails"]["lastCurrencyUpdateTime"], "1970-01-01T00:00:05Z");
        let existing = as_written(&main, Some(&status));
        assert_eq!(plan("cluster1", Some(&d), Some(&existing), time(9)), Plan::Nothing);

        // Only the status changed: only the status is written.
        let newer = desired(&key(), &deployment(1, json!({"replicas": 2})), &work(&[KS])).unwrap();
        assert!(matches!(
            plan("cluster1", Some(&newer), Some(&existing), time(9)),
            Plan::Apply {
                main: None,
                status: Some(_),
                ..
            }
        ));

        // A new trace context alone is no change.
        let mut traced = d.clone();
        traced.trace_annotations.clear();
        assert_eq!(plan("cluster1", Some(&traced), Some(&existing), time(9)), Plan::Nothing);

        // A label added by someone else is theirs; a label of ours that is no longer wanted goes.
        let mut with_foreign = work_status(&main, Some(&status));
        with_foreign
            .metadata
            .labels
            .as_mut()
            .unwrap()
            .insert("team".into(), "a".into());
        let with_foreign = Existing::from(with_foreign);
        assert_eq!(plan("cluster1", Some(&d), Some(&with_foreign), time(9)), Plan::Nothing);
        let mut unlabelled = d.clone();
        unlabelled.labels.remove(SINGLETON_STATUS_LABEL);
        let Plan::Apply { main: Some(main), .. } = plan("cluster1", Some(&unlabelled), Some(&existing), time(9)) else {
            panic!("the label removal is written");
        };
        assert!(main["metadata"]["labels"].get(SINGLETON_STATUS_LABEL).is_none());
        assert_eq!(
            main["statusDetails"]["lastCurrencyUpdateTime"], "1970-01-01T00:00:05Z",
            "the generation facts did not change"
        );

        // A new WDS generation stamps the time.
        let mut next = d.clone();
        next.last_generation = 8;
        let Plan::Apply { main: Some(main), .. } = plan("cluster1", Some(&next), Some(&existing), time(9)) else {
            panic!("the generation is written");
        };
        assert_eq!(main["statusDetails"]["lastCurrencyUpdateTime"], "1970-01-01T00:00:09Z");
    }

    #[test]
    fn a_report_on_another_incarnation_gets_its_status_before_it_names_it() {
        let d = desired(&key(), &deployment(1, json!({"replicas": 1})), &work(&[KS])).unwrap();
        assert_eq!(d.wds_uid.as_deref(), Some("wds-uid-1"));
        let (main, existing) = written_new(&d);
        assert_eq!(main["metadata"]["annotations"][WDS_UID_ANNOTATION], "wds-uid-1");
        // The WDS object was deleted and made again: the WEC copy names the new one.
        let mut again = desired(&key(), &deployment(1, json!({"replicas": 0})), &work(&[KS])).unwrap();
        again.wds_uid = Some("wds-uid-2".into());
        let Plan::Apply {
            main: Some(main),
            status: Some(_),
            status_first: true,
        } = plan("cluster1", Some(&again), Some(&existing), time(9))
        else {
            panic!("both are written, the status first");
        };
        assert_eq!(main["metadata"]["annotations"][WDS_UID_ANNOTATION], "wds-uid-2");
        // The WEC acting on what it was sent: the status it has then goes first too.
        let mut lagging = d.clone();
        lagging.last_generation_is_applied = false;
        let (_, behind) = written_new(&lagging);
        let caught_up = desired(&key(), &deployment(1, json!({"replicas": 3})), &work(&[KS])).unwrap();
        assert!(matches!(
            plan("cluster1", Some(&caught_up), Some(&behind), time(9)),
            Plan::Apply {
                main: Some(_),
                status: Some(_),
                status_first: true
            }
        ));
        // The UID alone is a change.
        let mut renamed = d.clone();
        renamed.wds_uid = Some("wds-uid-2".into());
        assert!(matches!(
            plan("cluster1", Some(&renamed), Some(&existing), time(9)),
            Plan::Apply { main: Some(_), .. }
        ));
    }

    #[test]
    fn a_content_digest_is_handed_on_and_a_new_one_gets_its_status_first() {
        let with_content = |digest: &str| {
            let mut object = deployment(1, json!({"replicas": 1}));
            let annotations = object.metadata.annotations.as_mut().unwrap();
            annotations.remove(WDS_GENERATION_ANNOTATION);
            annotations.insert(WDS_CONTENT_ANNOTATION.into(), digest.into());
            desired(&key(), &object, &work(&[KS])).unwrap()
        };
        let d = with_content("c1");
        assert_eq!((d.wds_content.as_deref(), d.last_generation), (Some("c1"), 0));
        let (main, existing) = written_new(&d);
        assert_eq!(main["metadata"]["annotations"][WDS_CONTENT_ANNOTATION], "c1");
        assert_eq!(plan("cluster1", Some(&d), Some(&existing), time(9)), Plan::Nothing);
        // New content: its status (a WEC controller's, or none) goes before the digest naming it.
        let next = with_content("c2");
        let Plan::Apply {
            main: Some(main),
            status_first: true,
            ..
        } = plan("cluster1", Some(&next), Some(&existing), time(9))
        else {
            panic!("the digest is written, after the status");
        };
        assert_eq!(main["metadata"]["annotations"][WDS_CONTENT_ANNOTATION], "c2");
    }

    #[test]
    fn unwanted_work_statuses_are_deleted() {
        assert_eq!(plan("c", None, Some(&Existing::default()), time(1)), Plan::Delete);
        assert_eq!(plan("c", None, None, time(1)), Plan::Nothing);
    }
}
