//! `write-cost`: what each way of writing a ManifestWork costs the ITS apiserver, in its CPU
//! seconds; how the transport writes them (`send_work` in hub/src/transport/controller/send.rs) rests
//! on it. Each way writes every ManifestWork once, 8 at a time, first without status, then once
//! OCM-like per-manifest conditions are in their status, as OCM's work agent writes them.

use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use ks_shared::ocm::ManifestWork;
use ks_tests::harness::wait_until;
use ks_tests::stack::Stack;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::wait::conditions;
use serde_json::{Value, json};

use crate::fixtures::{MANAGER, apply_namespace, unique};
use ks_tests::measure::CpuByProcess;

const ITS_APISERVER: &str = "apiserver-its1";
const DEADLINE: Duration = Duration::from_secs(300);

pub async fn run(stack: &Stack, works: usize, manifests: usize) -> anyhow::Result<()> {
    let its = stack.client("its1").await?;
    let ns = unique("bench-write-cost");
    let namespaces = apply_namespace(&its, &ns, &json!({})).await?;
    let api: Api<ManifestWork> = Api::namespaced(its, &ns);
    let work = |n: usize, round: usize| {
        json!({"apiVersion": "work.open-cluster-management.io/v1", "kind": "ManifestWork",
               "metadata": {"name": format!("w-{n}")}, "spec": spec(manifests, round)})
    };
    let kb = serde_json::to_vec(&work(0, 0))?.len() / 1000;
    println!("{works} ManifestWorks of {manifests} ConfigMaps ({kb} kB) each, 8 writes in flight:");
    let apply = PatchParams::apply(MANAGER).force();
    let status = json!({"status": ocm_status(manifests)});
    let (api, apply, status, work) = (&api, &apply, &status, &work);
    // Each way as a write of round `round`'s content into ManifestWork n.
    let applying = move |round: usize| {
        move |n: usize| async move {
            api.patch(&format!("w-{n}"), apply, &Patch::Apply(work(n, round)))
                .await?;
            Ok(())
        }
    };
    let patching = move |round: usize| {
        move |n: usize| async move {
            let patch = json!([{"op": "replace", "path": "/spec", "value": spec(manifests, round)}]);
            let patch: Patch<Value> = Patch::Json(serde_json::from_value(patch)?);
            api.patch(&format!("w-{n}"), &PatchParams::default(), &patch).await?;
            Ok(())
        }
    };
    cost(stack, "create (POST)", works, |n| async move {
        let created: ManifestWork = serde_json::from_value(work(n, 0))?;
        api.create(&PostParams::default(), &created).await?;
        Ok(())
    })
    .await?;
    cost(stack, "server-side apply", works, applying(1)).await?;
    cost(stack, "JSON patch of the spec", works, patching(2)).await?;
    cost(stack, "OCM's status (merge patch)", works, |n| async move {
        api.patch_status(&format!("w-{n}"), &PatchParams::default(), &Patch::Merge(status))
            .await?;
        Ok(())
    })
    .await?;
    // Twice each way, alternating: one way's cost here varies by half from run to run.
    for round in [3, 5] {
        cost(stack, "server-side apply, with status", works, applying(round)).await?;
        cost(stack, "JSON patch of the spec, with status", works, patching(round + 1)).await?;
    }
    // Gone before the next run starts: deleting them costs the ITS as much as writing them.
    let uid = namespaces.get(&ns).await?.metadata.uid.unwrap_or_default();
    namespaces.delete(&ns, &DeleteParams::default()).await?;
    wait_until(namespaces, &ns, "gone", DEADLINE, conditions::is_deleted(&uid)).await?;
    Ok(())
}

/// Writes `write(n)` for every n < `works`, 8 at a time, and prints the time and the ITS
/// apiserver's CPU seconds it took.
async fn cost<F, W>(stack: &Stack, way: &str, works: usize, write: W) -> anyhow::Result<()>
where
    W: Fn(usize) -> F,
    F: Future<Output = anyhow::Result<()>>,
{
    let cpu = CpuByProcess::start(&stack.procs);
    let started = Instant::now();
    futures::stream::iter(0..works)
        .map(write)
        .buffer_unordered(8)
        .try_collect::<Vec<()>>()
        .await?;
    let took = started.elapsed();
    let its = cpu
        .since()
        .into_iter()
        .find(|(name, _)| name == ITS_APISERVER)
        .map_or(0.0, |(_, cpu)| cpu);
    println!("  {way:38} {:6.2} s, ITS apiserver {its:6.2} CPU-s", took.as_secs_f64());
    Ok(())
}

/// A spec of `manifests` ConfigMaps of 300 bytes of data, different in every `round`.
fn spec(manifests: usize, round: usize) -> Value {
    let manifests: Vec<Value> = (0..manifests)
        .map(|i| {
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": format!("cm-{i}"), "namespace": "bench", "labels": {"round": round.to_string()}},
                   "data": {"k": "v".repeat(300)}})
        })
        .collect();
    json!({"workload": {"manifests": manifests}})
}

/// A status as OCM's work agent writes it: Applied, Available and StatusFeedbackSynced, for the
/// ManifestWork and for each manifest.
fn ocm_status(manifests: usize) -> Value {
    let conditions: Vec<Value> = ["Applied", "Available", "StatusFeedbackSynced"]
        .iter()
        .map(|kind| {
            json!({"type": kind, "status": "True", "reason": "AppliedManifestComplete",
                   "message": "Apply manifest complete", "lastTransitionTime": "2026-11-26T10:00:00Z",
                   "observedGeneration": 1})
        })
        .collect();
    let manifests: Vec<Value> = (0..manifests)
        .map(|i| {
            json!({"resourceMeta": {"ordinal": i, "group": "", "version": "v1", "kind": "ConfigMap",
                                    "resource": "configmaps", "name": format!("cm-{i}"), "namespace": "bench"},
                   "conditions": conditions, "statusFeedback": {}})
        })
        .collect();
    json!({"conditions": conditions, "resourceStatus": {"manifests": manifests}})
}
