//! The agent parts (ours only: upstream's ocm-status-addon is not served by the Go module proxy,
//! so it cannot be built here), past the hub, straight into cluster1's mailbox:
//! (a, `agent`) `--agent-objects` Gauges in ManifestWorks of 100, the agent's RSS sampled every tenth of
//!     them (MiB per 1,000 objects), then one status change of every Gauge (WorkStatus writes
//!     per status change, from the ITS apiserver's request counts);
//! (b, `churn`) `--agent-cycles` Pod create/delete cycles: ManifestWorks holding `--agent-pods` Pods in
//!     all, each round replacing every Pod by a new one (OCM deletes the old, creates the new),
//!     the agent's RSS after each round (first, peak, last, slope).

use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use ks_shared::api::WorkStatus;
use ks_shared::ocm::ManifestWork;
use ks_tests::metrics::{apiserver_writes, difference};
use ks_tests::stack::Stack;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use serde_json::json;

use super::markdown::thousands;
use super::report::{Figures, Implementation, Unit};
use super::results::Output;
use super::{DEADLINE, Knobs, knob, switch_to, within};
use crate::fixtures::{MANAGER, deliver_in_batches, unique};
use ks_tests::measure::rss_kib;

const WEC: &str = "cluster1";
const OURS: Implementation = Implementation::Ours;
/// OCM's status-sync interval on cluster1 during the `agent` part: longer than the part.
const OCM_STATUS_SYNC: Duration = Duration::from_secs(3600);

/// The `agent` part.
pub async fn run(stack: &Stack, knobs: &Knobs) -> anyhow::Result<Output> {
    // The hub plays no part; ours runs, as `make up` has it.
    switch_to(stack, OURS).await?;
    // OCM's work agent re-reads every Gauge it applied every status-sync interval; at 10,000
    // that starves its applying, and the part would time OCM, not the agent (which reads the
    // Gauges itself and needs none of OCM's status).
    stack.restart_klusterlet(WEC, Some(OCM_STATUS_SYNC)).await?;
    let mut output = Output::default();
    let measured = objects(stack, knobs.agent_objects, &mut output.figures).await;
    stack.restart_klusterlet(WEC, None).await?;
    measured?;
    output.knobs = vec![knob("agent-objects", knobs.agent_objects)];
    Ok(output)
}

/// The `churn` part.
pub async fn churn(stack: &Stack, knobs: &Knobs) -> anyhow::Result<Output> {
    switch_to(stack, OURS).await?;
    let mut output = Output::default();
    output.samples = cycles(stack, knobs.agent_cycles, knobs.agent_pods, &mut output.figures).await?;
    output.knobs = vec![
        knob("agent-cycles", knobs.agent_cycles),
        knob("agent-pods", knobs.agent_pods),
    ];
    Ok(output)
}

fn mib(pid: u32) -> f64 {
    rss_kib(pid) as f64 / 1024.0
}

/// Labels of the bench's ManifestWorks of one run (the agent reports only works from a WDS).
fn labels(run: &str) -> serde_json::Value {
    json!({"transport.kubestellar.io/originWdsName": "bench", "bench.kubestellar.io/run": run})
}

/// A ManifestWork holding the Namespace `ns`.
async fn namespace_work(works: &Api<ManifestWork>, ns: &str) -> anyhow::Result<()> {
    let work = json!({"apiVersion": "work.open-cluster-management.io/v1", "kind": "ManifestWork",
        "metadata": {"name": ns, "labels": labels(ns)},
        "spec": {"workload": {"manifests": [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}]}}});
    works
        .patch(ns, &PatchParams::apply(MANAGER).force(), &Patch::Apply(work))
        .await?;
    Ok(())
}

/// WorkStatuses of a run, of objects of `kind`.
async fn statuses_of(statuses: &Api<WorkStatus>, run: &str, kind: &str) -> anyhow::Result<Vec<WorkStatus>> {
    let list = statuses
        .list(&ListParams::default().labels(&format!("bench.kubestellar.io/run={run}")))
        .await?;
    Ok(list
        .items
        .into_iter()
        .filter(|w| w.spec.spec.source_ref.kind == kind)
        .collect())
}

/// (a): Gauges delivered a tenth at a time, RSS after each tenth is reported; then one status
/// change each.
async fn objects(stack: &Stack, count: usize, figures: &mut Figures) -> anyhow::Result<()> {
    let hub = stack.client("its1").await?;
    let wec = stack.client(WEC).await?;
    let pid = stack.wait_agent_ready(WEC, Duration::from_secs(120)).await?;
    let run = unique("bench-agent");
    let works: Api<ManifestWork> = Api::namespaced(hub.clone(), WEC);
    let statuses: Api<WorkStatus> = Api::namespaced(hub.clone(), WEC);
    namespace_work(&works, &run).await?;
    let step = count.div_ceil(10).div_ceil(100).max(1) * 100;
    let mut memory = vec![(0.0, mib(pid))];
    let mut names = Vec::new();
    let on_wec: Api<DynamicObject> = Api::namespaced_with(wec.clone(), &run, &ks_tests::gauge::resource());
    let mut lag = Duration::ZERO;
    let started = Instant::now();
    let mut delivered = 0;
    while delivered < count {
        let batch = step.min(count - delivered);
        let first = delivered;
        let gauge = |b: usize, i: usize| {
            json!({"apiVersion": "bench.kubestellar.io/v1", "kind": "Gauge",
                   "metadata": {"name": format!("g-{}", first + b * 100 + i), "namespace": run}, "spec": {}})
        };
        let prefix = format!("{run}-{}", first / step);
        names.extend(deliver_in_batches(&works, &prefix, &labels(&run), batch, gauge).await?);
        delivered += batch;
        // OCM's work agent creates the Gauges; the agent's own part is the wait after that.
        let applied = within(Instant::now() + DEADLINE, || async {
            Ok(on_wec.list_metadata(&ListParams::default()).await?.items.len() == delivered)
        })
        .await?;
        anyhow::ensure!(
            applied,
            "OCM did not create {delivered} Gauges on {WEC} in {DEADLINE:?}"
        );
        let on_wec_at = Instant::now();
        let reported = within(Instant::now() + DEADLINE, || async {
            Ok(statuses_of(&statuses, &run, "Gauge").await?.len() == delivered)
        })
        .await?;
        anyhow::ensure!(reported, "the agent did not report {delivered} Gauges in {DEADLINE:?}");
        lag = lag.max(on_wec_at.elapsed());
        memory.push((delivered as f64, mib(pid)));
        println!("   agent: {delivered} Gauges reported, RSS {:.1} MiB", mib(pid));
    }
    let reported = started.elapsed();
    let slope = least_squares(&memory) * 1000.0;

    // One status change of every Gauge.
    let gauges = on_wec;
    let before = apiserver_writes(&hub).await?;
    let apply = PatchParams::apply(MANAGER).force();
    let changing = Instant::now();
    futures::stream::iter(0..count)
        .map(|n| {
            let (gauges, apply) = (gauges.clone(), apply.clone());
            let status = json!({"apiVersion": "bench.kubestellar.io/v1", "kind": "Gauge",
                                "metadata": {"name": format!("g-{n}")}, "status": {"value": 1}});
            async move {
                gauges
                    .patch_status(&format!("g-{n}"), &apply, &Patch::Apply(status))
                    .await
                    .map(|_| ())
            }
        })
        .buffer_unordered(16)
        .try_collect::<Vec<()>>()
        .await?;
    let shown = within(Instant::now() + DEADLINE, || async {
        let all = statuses_of(&statuses, &run, "Gauge").await?;
        Ok(all
            .iter()
            .filter(|w| w.status.as_ref().is_some_and(|s| s.0.get("value") == Some(&json!(1))))
            .count()
            == count)
    })
    .await?;
    anyhow::ensure!(shown, "the WorkStatuses did not show the change in {DEADLINE:?}");
    let changed = changing.elapsed();
    let written = ks_tests::metrics::total(
        &difference(&before, &apiserver_writes(&hub).await?),
        "workstatuses",
        None,
    );
    let peak = memory.iter().map(|m| m.1).fold(mib(pid), f64::max);
    figures.add(
        OURS,
        &format!("agent: {} Gauges, time until all reported", thousands(count)),
        Unit::Seconds,
        reported.as_secs_f64(),
    );
    figures.add(
        OURS,
        "agent: longest wait from a tenth's last Gauge on the WEC to its last WorkStatus",
        Unit::Seconds,
        lag.as_secs_f64(),
    );
    figures.add(OURS, "agent: RSS with no objects", Unit::MiB, memory[0].1);
    figures.add(
        OURS,
        &format!("agent: RSS at {} objects", thousands(count)),
        Unit::MiB,
        memory.last().map(|m| m.1).unwrap_or_default(),
    );
    figures.add(OURS, "agent: MiB per 1,000 objects", Unit::MiB, slope);
    figures.add(
        OURS,
        &format!("agent: time until {} status changes reported", thousands(count)),
        Unit::Seconds,
        changed.as_secs_f64(),
    );
    figures.add(
        OURS,
        "agent: WorkStatus writes per status change",
        Unit::Count,
        written as f64 / count.max(1) as f64,
    );
    figures.add(
        OURS,
        &format!("agent: peak RSS at {} objects", thousands(count)),
        Unit::MiB,
        peak,
    );
    figures.notes.push(format!(
        "agent: RSS (MiB) by Gauges reported: {}",
        memory
            .iter()
            .map(|(n, m)| format!("{n:.0}: {m:.1}"))
            .collect::<Vec<_>>()
            .join(", ")
    ));

    remove(&works, &statuses, &names, &run, "Gauge").await
}

/// (b): rounds of `pods` Pods, each round replacing every Pod of the last; the agent's RSS after
/// each round, as (cycles so far, MiB).
async fn cycles(stack: &Stack, cycles: usize, pods: usize, figures: &mut Figures) -> anyhow::Result<Vec<(f64, f64)>> {
    let hub = stack.client("its1").await?;
    let pid = stack.wait_agent_ready(WEC, Duration::from_secs(120)).await?;
    let run = unique("bench-pods");
    let works: Api<ManifestWork> = Api::namespaced(hub.clone(), WEC);
    let statuses: Api<WorkStatus> = Api::namespaced(hub.clone(), WEC);
    namespace_work(&works, &run).await?;
    let pods = pods.max(1);
    let rounds = cycles.div_ceil(pods);
    let mut samples = vec![(0.0, mib(pid))];
    let mut names = Vec::new();
    let started = Instant::now();
    for round in 0..=rounds {
        // Round 0 creates the first Pods; each later round deletes them and creates new ones.
        let pod = |b: usize, i: usize| {
            json!({"apiVersion": "v1", "kind": "Pod",
                   "metadata": {"name": format!("p-{round}-{}", b * 100 + i), "namespace": run},
                   "spec": {"terminationGracePeriodSeconds": 0,
                            "containers": [{"name": "c", "image": "busybox:1.36"}]}})
        };
        names = deliver_in_batches(&works, &format!("{run}-w"), &labels(&run), pods, pod).await?;
        let current = format!("p-{round}-");
        let done = within(Instant::now() + DEADLINE, || async {
            let all = statuses_of(&statuses, &run, "Pod").await?;
            Ok(all.len() == pods && all.iter().all(|w| w.spec.spec.source_ref.name.starts_with(&current)))
        })
        .await?;
        anyhow::ensure!(done, "round {round} of Pod cycles did not complete in {DEADLINE:?}");
        if round > 0 {
            samples.push(((round * pods) as f64, mib(pid)));
        }
        if round % 10 == 0 || round == rounds {
            println!(
                "   agent: {} Pod cycles in {:.0} s, RSS {:.1} MiB",
                round * pods,
                started.elapsed().as_secs_f64(),
                mib(pid)
            );
        }
    }
    let took = started.elapsed();
    let done = rounds * pods;
    let rss: Vec<f64> = samples.iter().map(|s| s.1).collect();
    let first = samples.get(1).map(|s| s.1).unwrap_or(rss[0]);
    figures.add(OURS, "agent: Pod create/delete cycles run", Unit::Count, done as f64);
    figures.add(
        OURS,
        "agent: Pod cycles per second",
        Unit::PerSecond,
        done as f64 / took.as_secs_f64(),
    );
    figures.add(OURS, "agent: RSS after the first round of Pods", Unit::MiB, first);
    figures.add(
        OURS,
        "agent: peak RSS over the cycles",
        Unit::MiB,
        rss.iter().copied().fold(0.0, f64::max),
    );
    figures.add(
        OURS,
        "agent: RSS after the last cycle",
        Unit::MiB,
        *rss.last().unwrap_or(&0.0),
    );
    // The slope after the first round: growth once the agent has seen a full set of Pods.
    figures.add(
        OURS,
        "agent: RSS slope, MiB per 10,000 cycles",
        Unit::MiB,
        least_squares(&samples[1.min(samples.len() - 1)..]) * 10_000.0,
    );
    remove(&works, &statuses, &names, &run, "Pod").await?;
    Ok(samples)
}

/// Deletes a run's ManifestWorks (`names` and the Namespace's) and waits until the agent has
/// removed the WorkStatuses of its objects of `kind`.
async fn remove(
    works: &Api<ManifestWork>,
    statuses: &Api<WorkStatus>,
    names: &[String],
    run: &str,
    kind: &str,
) -> anyhow::Result<()> {
    for name in names.iter().map(String::as_str).chain(std::iter::once(run)) {
        works.delete(name, &DeleteParams::default()).await?;
    }
    let gone = within(Instant::now() + DEADLINE, || async {
        Ok(statuses_of(statuses, run, kind).await?.is_empty())
    })
    .await?;
    anyhow::ensure!(
        gone,
        "the WorkStatuses of the {kind}s are still there after {DEADLINE:?}"
    );
    Ok(())
}

/// The slope of the least-squares line through `points` (0 for fewer than two).
pub fn least_squares(points: &[(f64, f64)]) -> f64 {
    let n = points.len() as f64;
    if points.len() < 2 {
        return 0.0;
    }
    let (mx, my) = (
        points.iter().map(|p| p.0).sum::<f64>() / n,
        points.iter().map(|p| p.1).sum::<f64>() / n,
    );
    let sxx: f64 = points.iter().map(|p| (p.0 - mx).powi(2)).sum();
    let sxy: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    if sxx == 0.0 { 0.0 } else { sxy / sxx }
}

#[cfg(test)]
mod tests {
    use super::least_squares;

    #[test]
    fn the_slope_of_a_line_is_its_slope() {
        assert!((least_squares(&[(0.0, 10.0), (1000.0, 12.0), (2000.0, 14.0)]) - 0.002).abs() < 1e-12);
        assert_eq!(least_squares(&[(0.0, 10.0)]), 0.0);
    }
}
