//! The agent scenario of the comparison (ours only).

use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use ks_shared::api::WorkStatus;
use ks_shared::ocm::ManifestWork;
use ks_tests::metrics::{apiserver_writes, difference};
use ks_tests::stack::Stack;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use serde_json::json;

use super::report::{Figures, Implementation, Unit};
use super::{DEADLINE, Knobs};
use crate::fixtures::{MANAGER, deliver_in_batches, unique};
use crate::measure::rss_kib;

/// The agent under status churn (ours only: upstream's ocm-status-addon is not served by the
/// Go module proxy, so it cannot be built here): `agent_objects` Gauges on cluster1, then
/// rounds in which every Gauge's status changes; WorkStatus writes per second and the agent's
/// memory after each round.
pub async fn agent_churn(stack: &Stack, knobs: &Knobs, figures: &mut Figures) -> anyhow::Result<()> {
    const WEC: &str = "cluster1";
    let (count, rounds) = (knobs.agent_objects, knobs.agent_rounds);
    let hub = stack.client("its1").await?;
    let wec = stack.client(WEC).await?;
    let pid = stack.wait_agent_ready(WEC, Duration::from_secs(120)).await?;
    let ns = unique("bench-churn");
    let run_label = format!("bench.kubestellar.io/run={ns}");
    let labels = json!({"transport.kubestellar.io/originWdsName": "bench", "bench.kubestellar.io/run": ns});
    let apply = PatchParams::apply(MANAGER).force();
    let works: Api<ManifestWork> = Api::namespaced(hub.clone(), WEC);
    let namespace_work = json!({"apiVersion": "work.open-cluster-management.io/v1", "kind": "ManifestWork",
        "metadata": {"name": ns, "labels": labels},
        "spec": {"workload": {"manifests": [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}]}}});
    works.patch(&ns, &apply, &Patch::Apply(namespace_work)).await?;
    let gauge = |batch: usize, i: usize| {
        let n = batch * 100 + i;
        json!({"apiVersion": "bench.kubestellar.io/v1", "kind": "Gauge", "metadata": {"name": format!("g-{n}"), "namespace": ns}, "spec": {}})
    };
    let batches = deliver_in_batches(&works, &ns, &labels, count, gauge).await?;
    let statuses: Api<WorkStatus> = Api::namespaced(hub.clone(), WEC);
    let showing = |value: Option<u64>| {
        let statuses = statuses.clone();
        let run_label = run_label.clone();
        async move {
            let list = statuses.list(&ListParams::default().labels(&run_label)).await?;
            let gauges = list.items.iter().filter(|w| w.spec.spec.source_ref.kind == "Gauge");
            anyhow::Ok(
                gauges
                    .filter(|w| {
                        value.is_none_or(|v| w.status.as_ref().is_some_and(|s| s.0.get("value") == Some(&json!(v))))
                    })
                    .count(),
            )
        }
    };
    ks_tests::stack::wait_for("a WorkStatus for every Gauge", DEADLINE, || async {
        Ok(showing(None).await? == count)
    })
    .await?;
    let gauges: Api<DynamicObject> = Api::namespaced_with(wec.clone(), &ns, &ks_tests::gauge::resource());
    let mut memory = vec![rss_kib(pid) / 1024];
    let before = apiserver_writes(&hub).await?;
    let started = Instant::now();
    for round in 1..=rounds as u64 {
        futures::stream::iter(0..count)
            .map(|n| {
                let (gauges, apply) = (gauges.clone(), apply.clone());
                let status = json!({"apiVersion": "bench.kubestellar.io/v1", "kind": "Gauge", "metadata": {"name": format!("g-{n}")}, "status": {"value": round}});
                async move { gauges.patch_status(&format!("g-{n}"), &apply, &Patch::Apply(status)).await.map(|_| ()) }
            })
            .buffer_unordered(16)
            .try_collect::<Vec<()>>()
            .await?;
        ks_tests::stack::wait_for("every WorkStatus to show the round", DEADLINE, || async {
            Ok(showing(Some(round)).await? == count)
        })
        .await?;
        memory.push(rss_kib(pid) / 1024);
    }
    let took = started.elapsed();
    let written = ks_tests::metrics::total(
        &difference(&before, &apiserver_writes(&hub).await?),
        "workstatuses",
        None,
    );
    let i = Implementation::Ours;
    figures.add(
        i,
        &format!("agent: {count} objects, WorkStatus writes per second under churn"),
        Unit::PerSecond,
        written as f64 / took.as_secs_f64(),
    );
    figures.add(
        i,
        &format!("agent: {count} objects, WorkStatus writes per status change"),
        Unit::Count,
        written as f64 / (count * rounds) as f64,
    );
    figures.add(
        i,
        &format!("agent: {count} objects, peak RSS"),
        Unit::MiB,
        memory.iter().copied().max().unwrap_or(0) as f64,
    );
    figures.notes.push(format!(
        "ours, agent: RSS (MiB) before and after each of {rounds} churn rounds: {memory:?}"
    ));
    for batch in &batches {
        works.delete(batch, &DeleteParams::default()).await?;
    }
    works.delete(&ns, &DeleteParams::default()).await?;
    Ok(())
}
