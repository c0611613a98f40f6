//! `agent-latency` and `agent-churn`, the agent measurements: a Gauge custom resource whose
//! `.status` the bench writes on the WEC stands for "a status change", so nothing but the agent
//! sits between the two clocks.

use std::time::{Duration, Instant};

use futures::StreamExt;
use ks_shared::api::WorkStatus;
use ks_tests::harness::wait_until;
use ks_tests::stack::Stack;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::runtime::wait::conditions;
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;

use crate::fixtures::{MANAGER, deliver_in_batches};
use ks_tests::measure::{rss_kib as rss, summary};

const WEC: &str = "cluster1";
const DEADLINE: Duration = Duration::from_secs(120);

/// `agent-churn`: ManifestWorks of one Pod each deleted and recreated, round after round; the
/// agent's memory after each round.
pub async fn churn(stack: &Stack, rounds: usize, count: usize) -> anyhow::Result<()> {
    let hub = stack.client("its1").await?;
    let id = std::process::id();
    let pid = stack.wait_agent_ready(WEC, DEADLINE).await?;
    let works: Api<ks_shared::ocm::ManifestWork> = Api::namespaced(hub.clone(), WEC);
    let statuses: Api<WorkStatus> = Api::namespaced(hub.clone(), WEC);
    let ns = format!("bench-churn-{id}");
    let run_label = format!("bench.kubestellar.io/run={id}");
    let labels = json!({"transport.kubestellar.io/originWdsName": "bench", "bench.kubestellar.io/run": id.to_string()});
    let apply = PatchParams::apply(MANAGER).force();
    let namespace_work = json!({"apiVersion": "work.open-cluster-management.io/v1", "kind": "ManifestWork",
        "metadata": {"name": ns}, "spec": {"workload": {"manifests": [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}]}}});
    works.patch(&ns, &apply, &Patch::Apply(namespace_work)).await?;
    let names: Vec<String> = (0..count).map(|i| format!("{ns}-{i}")).collect();
    let mut memory = Vec::new();
    for _ in 0..rounds {
        for (i, name) in names.iter().enumerate() {
            let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": format!("pod-{i}"), "namespace": ns},
                             "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]}});
            let work = json!({"apiVersion": "work.open-cluster-management.io/v1", "kind": "ManifestWork",
                "metadata": {"name": name, "labels": labels}, "spec": {"workload": {"manifests": [pod]}}});
            works.patch(name, &apply, &Patch::Apply(work)).await?;
        }
        ks_tests::stack::wait_for("one WorkStatus per ManifestWork", DEADLINE, || async {
            Ok(statuses
                .list(&ListParams::default().labels(&run_label))
                .await?
                .items
                .len()
                == count)
        })
        .await?;
        memory.push(rss(pid));
        for name in &names {
            let uid = works.get(name).await?.metadata.uid.unwrap_or_default();
            works.delete(name, &DeleteParams::default()).await?;
            wait_until(works.clone(), name, "deleted", DEADLINE, conditions::is_deleted(&uid)).await?;
        }
    }
    let first = memory[0] as f64;
    let last = *memory.last().unwrap_or(&0) as f64;
    println!(
        "agent churn: {rounds} rounds of {count} ManifestWorks (one Pod each); RSS after each round (KiB): {memory:?}; last/first = {:.3}",
        last / first
    );
    works.delete(&ns, &DeleteParams::default()).await?;
    Ok(())
}

/// `agent-latency`: WEC status change to WorkStatus update, WorkStatus writes per change, then
/// the agent's memory at `objects` tracked ConfigMaps.
pub async fn latency(stack: &Stack, changes: usize, objects: usize) -> anyhow::Result<()> {
    let wec = stack.client(WEC).await?;
    let hub = stack.client("its1").await?;
    let id = std::process::id();
    let apply = PatchParams::apply(MANAGER).force();

    ks_tests::gauge::install(&wec, MANAGER).await?;

    let pid = stack.wait_agent_ready(WEC, DEADLINE).await?;

    let ns = format!("bench-agent-{id}");
    let works: Api<ks_shared::ocm::ManifestWork> = Api::namespaced(hub.clone(), WEC);
    let labels = json!({"transport.kubestellar.io/originWdsName": "bench", "bench.kubestellar.io/run": id.to_string()});
    let work = json!({"apiVersion": "work.open-cluster-management.io/v1", "kind": "ManifestWork",
    "metadata": {"name": ns, "labels": labels},
    "spec": {"workload": {"manifests": [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}},
        {"apiVersion": "bench.kubestellar.io/v1", "kind": "Gauge", "metadata": {"name": "g", "namespace": ns}, "spec": {}}
    ]}}});
    works.patch(&ns, &apply, &Patch::Apply(work)).await?;

    let gauges: Api<DynamicObject> = Api::namespaced_with(wec.clone(), &ns, &ks_tests::gauge::resource());
    let statuses: Api<WorkStatus> = Api::namespaced(hub.clone(), WEC);
    let run_label = format!("bench.kubestellar.io/run={id}");
    let find = || async {
        let list = statuses.list(&ListParams::default().labels(&run_label)).await?;
        anyhow::Ok(
            list.items
                .into_iter()
                .find(|w| w.spec.spec.source_ref.kind == "Gauge")
                .map(|w| w.metadata.name.unwrap_or_default()),
        )
    };
    ks_tests::stack::wait_for("the Gauge's WorkStatus", DEADLINE, || async {
        Ok(find().await?.is_some())
    })
    .await?;
    let name = find().await?.unwrap_or_default();

    // Every write to the WorkStatus is an event on this watch.
    let fields = format!("metadata.name={name}");
    let events = watcher(statuses.clone(), watcher::Config::default().fields(&fields)).applied_objects();
    let counter = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = counter.clone();
    let watching = tokio::spawn(async move {
        tokio::pin!(events);
        while events.next().await.is_some() {
            count.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    });
    ks_tests::stack::wait_for("the watch to start", DEADLINE, || async {
        Ok(counter.load(std::sync::atomic::Ordering::Relaxed) > 0)
    })
    .await?;
    let before = counter.load(std::sync::atomic::Ordering::Relaxed);

    let mut latencies = Vec::new();
    for value in 1..=changes {
        let status = json!({"apiVersion": "bench.kubestellar.io/v1", "kind": "Gauge", "metadata": {"name": "g"},
                            "status": {"value": value}});
        let started = Instant::now();
        gauges.patch_status("g", &apply, &Patch::Apply(status)).await?;
        let shows = move |w: Option<&WorkStatus>| {
            w.and_then(|w| w.status.as_ref())
                .is_some_and(|s| s.0.get("value") == Some(&json!(value)))
        };
        wait_until(statuses.clone(), &name, "showing the new status", DEADLINE, shows).await?;
        latencies.push(started.elapsed());
    }
    // Writes that were still on their way show up on the watch shortly after.
    let writes = counter.load(std::sync::atomic::Ordering::Relaxed) - before;
    watching.abort();
    println!(
        "agent: WEC status change -> WorkStatus over {} changes: {}; WorkStatus writes: {writes} for {changes} changes",
        latencies.len(),
        summary(latencies)
    );

    // Memory with many tracked objects: ConfigMaps in ManifestWorks of 100.
    let idle = rss(pid);
    let config_map = |batch: usize, i: usize| {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": format!("cm-{batch}-{i}"), "namespace": ns}, "data": {"k": "v"}})
    };
    let batches = deliver_in_batches(&works, &format!("{ns}-cms"), &labels, objects, config_map).await?;
    let started = Instant::now();
    ks_tests::stack::wait_for(
        "a WorkStatus for every delivered object",
        Duration::from_secs(600),
        || async {
            Ok(statuses
                .list(&ListParams::default().labels(&run_label))
                .await?
                .items
                .len()
                > objects)
        },
    )
    .await?;
    println!(
        "agent: {objects} ConfigMaps reported in {:?}; agent RSS {} MiB idle, {} MiB while tracking {} objects",
        started.elapsed(),
        idle / 1024,
        rss(pid) / 1024,
        objects + 2
    );

    for batch in &batches {
        works.delete(batch, &DeleteParams::default()).await?;
    }
    works.delete(&ns, &DeleteParams::default()).await?;
    Ok(())
}
