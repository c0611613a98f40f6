//! `status-latency`, status return: a Gauge in the WDS, bound to cluster1 with singleton status return; the
//! bench writes the `.status` of its copy on cluster1 and waits for the WDS Gauge to show it.
//! Between the two clocks: the status agent, the WorkStatus, and the hub's status controller.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use ks_shared::api::{Binding, BindingPolicy};
use ks_tests::harness::wait_until;
use ks_tests::stack::Stack;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;

use ks_tests::gauge::{self, resource as gauge_resource};

use crate::fixtures::{MANAGER, apply_namespace, unique};
use ks_tests::measure::summary;

const DEADLINE: Duration = Duration::from_secs(120);

/// Times `changes` status changes; prints their percentiles and the WDS writes they took.
pub async fn latency(stack: &Stack, changes: usize) -> anyhow::Result<()> {
    let returned = singleton(stack, changes).await?;
    println!(
        "status: WEC status change -> WDS .status over {} changes: {}; writes to the WDS object: {} and Binding writes: {} for {changes} changes",
        returned.latencies.len(),
        summary(returned.latencies),
        returned.writes,
        returned.binding_writes
    );
    Ok(())
}

/// What the singleton status changes took.
pub struct Singleton {
    /// WEC status change -> the WDS Gauge shows it, per change.
    pub latencies: Vec<Duration>,
    /// Writes to the WDS Gauge meanwhile.
    pub writes: usize,
    /// New generations of the policy's Binding from the first change until the WDS shows the
    /// last: a status written back is nothing to deliver.
    pub binding_writes: i64,
}

/// Times `changes` status changes of a Gauge on cluster1 until the WDS Gauge shows each.
pub async fn singleton(stack: &Stack, changes: usize) -> anyhow::Result<Singleton> {
    let wds = stack.client("wds1").await?;
    let wec = stack.client("cluster1").await?;
    gauge::install(&wds, MANAGER).await?;
    gauge::install(&wec, MANAGER).await?;
    let ns = unique("bench-status");
    let apply = PatchParams::apply(MANAGER).force();
    let label = json!({"bench.kubestellar.io/status": ns});
    let namespaces = apply_namespace(&wds, &ns, &json!({})).await?;
    let gauge = json!({"apiVersion": "bench.kubestellar.io/v1", "kind": "Gauge",
                       "metadata": {"name": "g", "namespace": ns, "labels": label}, "spec": {}});
    let in_wds: Api<DynamicObject> = Api::namespaced_with(wds.clone(), &ns, &gauge_resource());
    in_wds.patch("g", &apply, &Patch::Apply(gauge)).await?;
    let policies: Api<BindingPolicy> = Api::all(wds.clone());
    let policy = json!({"apiVersion": "control.kubestellar.io/v1alpha1", "kind": "BindingPolicy", "metadata": {"name": ns},
        "spec": {"clusterSelectors": [{"matchLabels": {"name": "cluster1"}}],
                 "downsync": [{"apiGroup": "", "resources": ["namespaces"], "objectNames": [ns]},
                              {"namespaces": [ns], "objectSelectors": [{"matchLabels": label}], "wantSingletonReportedState": true}]}});
    policies.patch(&ns, &apply, &Patch::Apply(policy)).await?;
    let on_wec: Api<DynamicObject> = Api::namespaced_with(wec.clone(), &ns, &gauge_resource());
    wait_until(
        on_wec.clone(),
        "g",
        "delivered to cluster1",
        DEADLINE,
        |g: Option<&DynamicObject>| g.is_some(),
    )
    .await?;
    // The status-request label is written before the first change: from then on, every
    // write to the WDS Gauge is a status write.
    let shows =
        |value: usize| move |g: Option<&DynamicObject>| g.is_some_and(|g| g.data["status"]["value"] == json!(value));
    let write_status = |value: usize| {
        let status = json!({"apiVersion": "bench.kubestellar.io/v1", "kind": "Gauge", "metadata": {"name": "g"},
                            "status": {"value": value}});
        let on_wec = on_wec.clone();
        let apply = apply.clone();
        async move { on_wec.patch_status("g", &apply, &Patch::Apply(status)).await }
    };
    write_status(0).await?;
    wait_until(in_wds.clone(), "g", "returning status", DEADLINE, shows(0)).await?;

    // Every write to the WDS Gauge is an event on this watch, which also notes the last
    // value it saw (so counting waits for the watch to catch up).
    let writes = Arc::new(AtomicUsize::new(0));
    let last_seen = Arc::new(AtomicUsize::new(usize::MAX));
    let (counted, seen) = (writes.clone(), last_seen.clone());
    let fields = "metadata.name=g".to_string();
    let events = watcher(in_wds.clone(), watcher::Config::default().fields(&fields))
        .default_backoff()
        .applied_objects();
    let watching = tokio::spawn(async move {
        tokio::pin!(events);
        // Watch errors (an expired resource version) are retried by the backoff and skipped.
        while let Some(event) = events.next().await {
            let Ok(gauge) = event else { continue };
            counted.fetch_add(1, Ordering::Relaxed);
            let value = gauge.data["status"]["value"].as_u64().unwrap_or(u64::MAX);
            seen.store(usize::try_from(value).unwrap_or(usize::MAX), Ordering::Relaxed);
        }
    });
    let caught_up = |value: usize| {
        let seen = last_seen.clone();
        ks_tests::stack::wait_for("the watch to catch up", DEADLINE, move || {
            let seen = seen.clone();
            async move { Ok(seen.load(Ordering::Relaxed) == value) }
        })
    };
    caught_up(0).await?;
    let before = writes.load(Ordering::Relaxed);
    let bindings: Api<Binding> = Api::all(wds.clone());
    let binding_generation = || async { anyhow::Ok(bindings.get(&ns).await?.metadata.generation.unwrap_or(0)) };
    let binding_before = binding_generation().await?;

    let mut latencies = Vec::new();
    for value in 1..=changes {
        let started = Instant::now();
        write_status(value).await?;
        wait_until(in_wds.clone(), "g", "showing the new status", DEADLINE, shows(value)).await?;
        latencies.push(started.elapsed());
    }
    caught_up(changes).await?;
    let written = writes.load(Ordering::Relaxed) - before;
    let binding_writes = binding_generation().await? - binding_before;
    watching.abort();
    policies.delete(&ns, &DeleteParams::default()).await?;
    namespaces.delete(&ns, &DeleteParams::default()).await?;
    Ok(Singleton {
        latencies,
        writes: written,
        binding_writes,
    })
}
