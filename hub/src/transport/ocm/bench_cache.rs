//! A benchmark, not a check (`make bench-transport-cache`): the heap the transport's cache of
//! ManifestWorks holds per object, at `BENCH_OBJECTS` objects (default 10,000: half Deployments,
//! half ConfigMaps, in 10 policies) to `BENCH_WECS` WECs (default 12), 2 of them real (OCM's
//! per-manifest status in their ManifestWorks).

use serde_json::{Value, json};

/// One ManifestWork as the ITS's watch sends it: policy `policy`'s objects `objects` in WEC
/// `wec`'s mailbox, with OCM's status of each when the WEC is real.
fn watched_work(policy: usize, objects: std::ops::Range<usize>, wec: usize, real: bool) -> String {
    let manifest = |i: usize| {
        let annotations = json!({
            "control.kubestellar.io/wds-generation": "1",
            "tracing.k8s.io/traceparent": format!("00-4bf92f3577b34da6a3ce929d0e0e{i:04}-00f067aa0ba902b7-01"),
            "tracing.k8s.io/kubestellar-sent": "2026-11-28T10:00:00.123456Z",
        });
        let namespace = format!("bench-{policy}");
        if i.is_multiple_of(2) {
            json!({"apiVersion": "apps/v1", "kind": "Deployment",
                   "metadata": {"name": format!("dep-{i:05}"), "namespace": namespace, "annotations": annotations,
                                "labels": {"app": "bench", "bench.kubestellar.io/set": "bulk"}, "creationTimestamp": null},
                   "spec": {"replicas": 1, "selector": {"matchLabels": {"app": format!("dep-{i:05}")}},
                            "template": {"metadata": {"labels": {"app": format!("dep-{i:05}")}, "creationTimestamp": null},
                                         "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.9",
                                                                  "resources": {}}]}}},
                   "status": {}})
        } else {
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": format!("cm-{i:05}"), "namespace": namespace, "annotations": annotations,
                                "labels": {"app": "bench"}, "creationTimestamp": null},
                   "data": {"key": format!("value of {i}, about a line of text in every ConfigMap")}})
        }
    };
    let condition = |type_: &str, reason: &str, message: &str| {
        json!({"type": type_, "status": "True", "reason": reason, "message": message, "observedGeneration": 1,
               "lastTransitionTime": "2026-11-28T10:00:05Z"})
    };
    let manifest_status = |i: usize| {
        let (group, kind, resource, name) = match i % 2 {
            0 => ("apps", "Deployment", "deployments", format!("dep-{i:05}")),
            _ => ("", "ConfigMap", "configmaps", format!("cm-{i:05}")),
        };
        json!({"resourceMeta": {"ordinal": i, "group": group, "version": "v1", "kind": kind, "resource": resource,
                                "name": name, "namespace": format!("bench-{policy}")},
               "statusFeedback": {},
               "conditions": [condition("Applied", "AppliedManifestComplete", "Apply manifest complete"),
                              condition("Available", "ResourceAvailable", "Resource is available"),
                              condition("StatusFeedbackSynced", "NoStatusFeedbackSynced", "")]})
    };
    let status = real.then(|| {
        json!({"conditions": [condition("Applied", "AppliedManifestWorkComplete", "Apply manifest work complete"),
                              condition("Available", "ResourcesAvailable", "All resources are available")],
               "resourceStatus": {"manifests": objects.clone().map(manifest_status).collect::<Vec<_>>()}})
    });
    let work_name = format!("policy-{policy}-wds1-0");
    json!({
        "apiVersion": "work.open-cluster-management.io/v1", "kind": "ManifestWork",
        "metadata": {
            "name": work_name, "namespace": format!("cluster{wec}"),
            "uid": format!("7d1c2b3a-0000-4000-8000-{policy:06}{wec:06}"), "resourceVersion": "12345",
            "generation": 1, "creationTimestamp": "2026-11-28T10:00:00Z",
            "labels": {"transport.kubestellar.io/originOwnerReferenceBindingKey": format!("policy-{policy}"),
                       "transport.kubestellar.io/originWdsName": "wds1"},
            "annotations": {"transport.kubestellar.io/originOwnerReferenceBindingGeneration": "3",
                            "transport.kubestellar.io/content-digest": "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
                            "transport.kubestellar.io/api-groups": "apps"},
            "finalizers": ["cluster.open-cluster-management.io/manifest-work-cleanup"],
            "managedFields": [{"manager": "ks-hub", "operation": "Update", "apiVersion": "work.open-cluster-management.io/v1",
                               "time": "2026-11-28T10:00:00Z", "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {}}}],
        },
        "spec": {"workload": {"manifests": objects.map(manifest).collect::<Vec<Value>>()}},
        "status": status,
    })
    .to_string()
}

#[test]
#[ignore]
fn bench_work_cache() {
    use kube::runtime::{reflector, watcher};

    let setting = |name: &str, default: usize| std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default);
    let (objects, wecs) = (setting("BENCH_OBJECTS", 10_000), setting("BENCH_WECS", 12));
    let policies = 10;
    let per_policy = objects / policies;
    let allocated = || {
        tikv_jemalloc_ctl::epoch::advance().expect("jemalloc's epoch");
        tikv_jemalloc_ctl::stats::allocated::read().expect("jemalloc's statistics")
    };
    let start = allocated();
    let mut reading = std::time::Duration::ZERO;
    let (cache, mut writer) = reflector::store::<super::cached::CachedWork>();
    let mut text = 0;
    for wec in 1..=wecs {
        for policy in 0..policies {
            let sent = watched_work(policy, policy * per_policy..(policy + 1) * per_policy, wec, wec <= 2);
            text += sent.len();
            let started = std::time::Instant::now();
            let work = serde_json::from_str(&sent).expect("a ManifestWork");
            writer.apply_watcher_event(&watcher::Event::Apply(work));
            reading += started.elapsed();
        }
    }
    let held = allocated() - start;
    println!(
        "{objects} objects to {wecs} WECs (2 real), {} ManifestWorks of {:.1} MB JSON in all: the transport's cache \
         holds {} bytes per object ({:.1} MiB); reading them took {:.2} s",
        cache.state().len(),
        text as f64 / 1e6,
        held / objects,
        held as f64 / f64::from(1 << 20),
        reading.as_secs_f64()
    );
}
