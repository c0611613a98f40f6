use proptest::prelude::*;
use serde_json::json;

use super::*;

/// The verdict on `object`, whose `metadata.generation` is its generation.
fn judged_whole(group: &str, kind: &str, object: &Value) -> Health {
    judge(group, kind, object["metadata"]["generation"].as_i64(), object)
}

fn verdict(group: &str, kind: &str, object: Value) -> (Verdict, String) {
    let health = judged_whole(group, kind, &object);
    (health.verdict, health.reason)
}

fn deployment(spec: Value, status: Value) -> Value {
    json!({"metadata": {"generation": 2}, "spec": spec, "status": status})
}

#[test]
fn a_deployment_is_healthy_once_every_replica_is_updated_and_available() {
    let rolled_out = json!({"observedGeneration": 2, "replicas": 3, "updatedReplicas": 3, "availableReplicas": 3});
    assert_eq!(
        verdict("apps", "Deployment", deployment(json!({"replicas": 3}), rolled_out)).0,
        Verdict::Healthy
    );
    let rolling = json!({"observedGeneration": 2, "replicas": 4, "updatedReplicas": 3, "availableReplicas": 3});
    assert_eq!(
        verdict("apps", "Deployment", deployment(json!({"replicas": 3}), rolling)),
        (Verdict::Progressing, "waiting for its old replicas to terminate".into())
    );
    let unavailable = json!({"observedGeneration": 2, "replicas": 1, "updatedReplicas": 1});
    assert_eq!(
        verdict("apps", "Deployment", deployment(json!({}), unavailable)),
        (
            Verdict::Progressing,
            "waiting for its updated replicas to become available".into()
        ),
        "replicas default to 1, a missing count is 0"
    );
}

#[test]
fn a_deployment_past_its_progress_deadline_is_degraded() {
    let stuck = json!({
        "observedGeneration": 2, "replicas": 1, "updatedReplicas": 1, "unavailableReplicas": 1,
        "conditions": [
            {"type": "Available", "status": "False", "reason": "MinimumReplicasUnavailable"},
            {"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded",
             "message": "ReplicaSet \"web-5d\" has timed out progressing."}
        ]
    });
    assert_eq!(
        verdict("apps", "Deployment", deployment(json!({"replicas": 1}), stuck)),
        (
            Verdict::Degraded,
            "Progressing: ProgressDeadlineExceeded: ReplicaSet \"web-5d\" has timed out progressing.".into()
        )
    );
}

#[test]
fn a_status_about_an_older_generation_is_progressing_whatever_it_says() {
    let old = json!({"observedGeneration": 1, "replicas": 1, "updatedReplicas": 1, "availableReplicas": 1});
    assert_eq!(
        verdict("apps", "Deployment", deployment(json!({"replicas": 1}), old)),
        (Verdict::Progressing, "its controller has seen generation 1 of 2".into())
    );
}

#[test]
fn a_job_goes_from_suspended_or_running_to_complete_or_failed() {
    let job = |spec: Value, status: Value| json!({"spec": spec, "status": status});
    assert_eq!(
        verdict("batch", "Job", job(json!({"suspend": true}), json!({}))),
        (Verdict::Progressing, "it is suspended".into())
    );
    assert_eq!(
        verdict(
            "batch",
            "Job",
            job(json!({}), json!({"active": 1, "startTime": "2026-12-07T06:00:00Z"}))
        ),
        (Verdict::Progressing, "running".into())
    );
    let complete = json!({"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]});
    assert_eq!(verdict("batch", "Job", job(json!({}), complete)).0, Verdict::Healthy);
    let failing = json!({"conditions": [
        {"type": "FailureTarget", "status": "True", "reason": "DeadlineExceeded", "message": "Job was active longer than specified deadline"}]});
    assert_eq!(
        verdict("batch", "Job", job(json!({}), failing)),
        (
            Verdict::Degraded,
            "Failed: DeadlineExceeded: Job was active longer than specified deadline".into()
        ),
        "the failure to come is said as the failure"
    );
    let failed = json!({"failed": 1, "conditions": [
        {"type": "FailureTarget", "status": "True", "reason": "DeadlineExceeded"},
        {"type": "Failed", "status": "True", "reason": "DeadlineExceeded", "message": "Job was active longer than specified deadline"}
    ]});
    assert_eq!(
        verdict("batch", "Job", job(json!({}), failed)),
        (
            Verdict::Degraded,
            "Failed: DeadlineExceeded: Job was active longer than specified deadline".into()
        )
    );
}

#[test]
fn a_pod_with_a_container_that_cannot_start_is_degraded() {
    let crashing = json!({"status": {"phase": "Running",
        "conditions": [{"type": "Ready", "status": "False", "reason": "ContainersNotReady"}],
        "containerStatuses": [{"name": "app", "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 5m0s restarting failed container"}}}]}});
    assert_eq!(
        verdict("", "Pod", crashing),
        (Verdict::Degraded, "container app: CrashLoopBackOff".into())
    );
    // Between a crash and its back-off, as a real kubelet reports it.
    let exited = json!({"status": {"phase": "Running",
        "conditions": [{"type": "Ready", "status": "False", "reason": "ContainersNotReady"}],
        "containerStatuses": [{"name": "app", "restartCount": 1,
                               "state": {"terminated": {"exitCode": 1, "reason": "Error"}}}]}});
    assert_eq!(
        verdict("", "Pod", exited),
        (Verdict::Degraded, "container app: exited with code 1 (Error)".into())
    );
    let completed_init = json!({"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}],
        "initContainerStatuses": [{"name": "setup", "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}]}});
    assert_eq!(verdict("", "Pod", completed_init).0, Verdict::Healthy);
    let ready = json!({"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}});
    assert_eq!(verdict("", "Pod", ready).0, Verdict::Healthy);
    let pending = json!({"status": {"phase": "Pending"}});
    assert_eq!(verdict("", "Pod", pending).0, Verdict::Progressing);
    let failed = json!({"status": {"phase": "Failed", "reason": "Evicted"}});
    assert_eq!(
        verdict("", "Pod", failed),
        (Verdict::Degraded, "phase Failed: Evicted".into())
    );
}

#[test]
fn statefulsets_daemonsets_and_replicasets_count_their_replicas() {
    let sts = json!({"spec": {"replicas": 2}, "status": {"readyReplicas": 2, "updatedReplicas": 2,
        "currentRevision": "a", "updateRevision": "a"}});
    assert_eq!(verdict("apps", "StatefulSet", sts).0, Verdict::Healthy);
    let rolling = json!({"spec": {"replicas": 2}, "status": {"readyReplicas": 2, "updatedReplicas": 2,
        "currentRevision": "a", "updateRevision": "b"}});
    assert_eq!(verdict("apps", "StatefulSet", rolling).0, Verdict::Progressing);
    let partitioned = json!({"spec": {"replicas": 3, "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 2}}},
        "status": {"readyReplicas": 3, "updatedReplicas": 1, "currentRevision": "a", "updateRevision": "b"}});
    assert_eq!(verdict("apps", "StatefulSet", partitioned).0, Verdict::Healthy);
    let ds = json!({"status": {"desiredNumberScheduled": 3, "updatedNumberScheduled": 3, "numberAvailable": 2}});
    assert_eq!(
        verdict("apps", "DaemonSet", ds),
        (Verdict::Progressing, "waiting for its pods to become available".into())
    );
    let rs = json!({"spec": {"replicas": 2}, "status": {"replicas": 0, "conditions": [
        {"type": "ReplicaFailure", "status": "True", "reason": "FailedCreate", "message": "pods \"web-\" is forbidden: exceeded quota"}]}});
    assert_eq!(verdict("apps", "ReplicaSet", rs).0, Verdict::Degraded);
}

#[test]
fn services_claims_namespaces_and_crds_by_their_own_signs() {
    let lb = |status: Value| json!({"spec": {"type": "LoadBalancer"}, "status": status});
    assert_eq!(
        verdict("", "Service", lb(json!({"loadBalancer": {}}))).0,
        Verdict::Progressing
    );
    assert_eq!(
        verdict(
            "",
            "Service",
            lb(json!({"loadBalancer": {"ingress": [{"ip": "10.0.0.1"}]}}))
        )
        .0,
        Verdict::Healthy
    );
    assert_eq!(
        verdict(
            "",
            "Service",
            json!({"spec": {"type": "ClusterIP"}, "status": {"loadBalancer": {}}})
        )
        .0,
        Verdict::Healthy
    );
    let pvc = |phase: &str| json!({"status": {"phase": phase}});
    assert_eq!(verdict("", "PersistentVolumeClaim", pvc("Bound")).0, Verdict::Healthy);
    assert_eq!(
        verdict("", "PersistentVolumeClaim", pvc("Pending")).0,
        Verdict::Progressing
    );
    assert_eq!(
        verdict("", "PersistentVolumeClaim", pvc("Lost")),
        (Verdict::Degraded, "phase Lost".into())
    );
    assert_eq!(verdict("", "Namespace", pvc("Active")).0, Verdict::Healthy);
    assert_eq!(verdict("", "Namespace", pvc("Terminating")).0, Verdict::Progressing);
    let crd = |conditions: Value| json!({"status": {"conditions": conditions}});
    let established = json!([{"type": "NamesAccepted", "status": "True"}, {"type": "Established", "status": "True"}]);
    assert_eq!(
        verdict("apiextensions.k8s.io", "CustomResourceDefinition", crd(established)).0,
        Verdict::Healthy
    );
    let conflict = json!([{"type": "NamesAccepted", "status": "False", "reason": "MultipleNamesNotAllowed"}]);
    assert_eq!(
        verdict("apiextensions.k8s.io", "CustomResourceDefinition", crd(conflict)),
        (Verdict::Degraded, "NamesAccepted: MultipleNamesNotAllowed".into())
    );
}

#[test]
fn other_kinds_follow_the_ready_available_and_stalled_conventions() {
    let object = |conditions: Value| json!({"metadata": {"generation": 3}, "status": {"conditions": conditions}});
    let cases = [
        (
            json!([{"type": "Ready", "status": "True", "observedGeneration": 3}]),
            Verdict::Healthy,
        ),
        (
            json!([{"type": "Ready", "status": "False", "reason": "Failed"}]),
            Verdict::Degraded,
        ),
        (
            json!([{"type": "Ready", "status": "False"}, {"type": "Reconciling", "status": "True"}]),
            Verdict::Progressing,
        ),
        (json!([{"type": "Ready", "status": "Unknown"}]), Verdict::Progressing),
        (
            json!([{"type": "Ready", "status": "True", "observedGeneration": 2}]),
            Verdict::Progressing,
        ),
        (json!([{"type": "Available", "status": "True"}]), Verdict::Healthy),
        (json!([{"type": "Succeeded", "status": "False"}]), Verdict::Degraded),
        (
            json!([{"type": "Ready", "status": "True"}, {"type": "Stalled", "status": "True", "reason": "BadSpec"}]),
            Verdict::Degraded,
        ),
        (json!([{"type": "Synced", "status": "False"}]), Verdict::Healthy),
        (json!([]), Verdict::Healthy),
    ];
    for (conditions, expected) in cases {
        assert_eq!(
            judged_whole("example.com", "Widget", &object(conditions.clone())).verdict,
            expected,
            "{conditions}"
        );
    }
    assert_eq!(
        verdict("", "ConfigMap", json!({"data": {"a": "b"}})),
        (Verdict::Healthy, String::new()),
        "no status: healthy once applied"
    );
    assert_eq!(
        verdict(
            "apps",
            "Deployment",
            json!({"metadata": {"generation": 1}, "spec": {"replicas": 2}})
        ),
        (Verdict::Progressing, "waiting for its replicas to be updated".into()),
        "a kind with a rule waits for its controller's first status"
    );
}

#[test]
fn a_status_of_unexpected_types_is_unknown_and_says_which_field() {
    assert_eq!(
        verdict(
            "apps",
            "Deployment",
            json!({"spec": {}, "status": {"updatedReplicas": "three"}})
        ),
        (Verdict::Unknown, "its updatedReplicas is not an integer".into())
    );
    assert_eq!(
        verdict(
            "example.com",
            "Widget",
            json!({"status": {"conditions": {"Ready": true}}})
        ),
        (Verdict::Unknown, "its status.conditions is not a list".into())
    );
    assert_eq!(verdict("", "Pod", json!({"status": "Running"})).0, Verdict::Unknown);
}

#[test]
fn a_long_reason_is_cut() {
    let message = "é".repeat(2 * MAX_REASON);
    let object = json!({"status": {"conditions": [{"type": "Ready", "status": "False", "message": message}]}});
    let reason = judged_whole("example.com", "Widget", &object).reason;
    assert!(reason.len() <= MAX_REASON && reason.ends_with('…'), "{}", reason.len());
}

/// Any JSON, shaped like an object of the kinds the rules know or not.
fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        (-3i64..5).prop_map(Value::from),
        prop::sample::select(vec![
            "True",
            "False",
            "Unknown",
            "Ready",
            "Available",
            "Complete",
            "Failed",
            "Stalled",
            "Running",
            "Progressing",
            "ProgressDeadlineExceeded",
            "LoadBalancer",
            "OnDelete",
            "CrashLoopBackOff",
        ])
        .prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(
                prop::sample::select(vec![
                    "type",
                    "status",
                    "reason",
                    "observedGeneration",
                    "generation",
                    "conditions",
                    "replicas",
                    "updatedReplicas",
                    "availableReplicas",
                    "readyReplicas",
                    "phase",
                    "spec",
                    "metadata",
                    "containerStatuses",
                    "state",
                    "waiting",
                    "active",
                    "suspend",
                ]),
                inner,
                0..5,
            )
            .prop_map(|m| Value::Object(m.into_iter().map(|(k, v)| (k.to_string(), v)).collect())),
        ]
    })
}

const KINDS: [(&str, &str); 11] = [
    ("apps", "Deployment"),
    ("apps", "StatefulSet"),
    ("apps", "DaemonSet"),
    ("apps", "ReplicaSet"),
    ("batch", "Job"),
    ("", "Pod"),
    ("", "Service"),
    ("", "PersistentVolumeClaim"),
    ("", "Namespace"),
    ("apiextensions.k8s.io", "CustomResourceDefinition"),
    ("example.com", "Widget"),
];

proptest! {
    /// Whatever a WEC's object holds: a verdict with a bounded reason, never a panic; never
    /// `Healthy` while the object's controller has not seen its generation; with no status, the
    /// same verdict as with an empty one.
    #[test]
    fn every_object_gets_a_verdict_and_an_unseen_generation_is_never_healthy(
        kind in prop::sample::select(KINDS.to_vec()),
        spec in any_json(),
        status in any_json(),
        generation in 1i64..4,
        observed in prop::option::of(0i64..4),
    ) {
        let mut status = status;
        if let (Some(observed), Value::Object(map)) = (observed, &mut status) {
            map.insert("observedGeneration".into(), observed.into());
        }
        let object = json!({"metadata": {"generation": generation}, "spec": spec, "status": status});
        let health = judged_whole(kind.0, kind.1, &object);
        prop_assert!(health.reason.len() <= MAX_REASON);
        if observed.is_some_and(|o| o < generation) && status.is_object() {
            prop_assert_eq!(health.verdict, Verdict::Progressing);
        }
        let bare = json!({"metadata": {"generation": generation}, "spec": object["spec"].clone()});
        let empty = json!({"metadata": {"generation": generation}, "spec": object["spec"].clone(), "status": {}});
        prop_assert_eq!(judged_whole(kind.0, kind.1, &bare), judged_whole(kind.0, kind.1, &empty));
    }
}
