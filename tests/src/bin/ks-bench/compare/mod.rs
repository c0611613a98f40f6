//! `ks-bench compare`: our hub and upstream KubeStellar v0.30.0's (controller-manager and OCM
//! transport controller) on the same stack, runs alternating between the two, in parts that run
//! on their own (`--scenario`): each part's results go to `docs/bench/<part>.json`, and
//! `docs/benchmarks.md` is written again from every part's results present.

mod agent;
mod bulk;
mod curves;
mod kubectl;
mod latency;
mod markdown;
mod multi_wec;
mod propagation;
mod report;
mod results;
mod simulated;
mod svg;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context;

use k8s_openapi::api::core::v1::Namespace;
use ks_shared::api::{Binding, BindingPolicy, WorkStatus};
use ks_shared::names::ORIGIN_BINDING_LABEL;
use ks_shared::ocm::{AppliedManifestWork, ManifestWork};
use ks_tests::harness::repo_root;
use ks_tests::stack::{HubOptions, Stack, Tracing};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};

pub use markdown::write_report;
use propagation::{Load, its_alone, propagate};
use report::Implementation;
pub use results::Part;
use results::{Outcome, Output, PartResult};
use simulated::remove_simulated;

use crate::fixtures::MANAGER;

const WDS: &str = "wds1";
/// For clean-up phases, which take long at 10,000 objects.
const DEADLINE: Duration = Duration::from_secs(1800);
/// For one object's change.
const LATENCY_DEADLINE: Duration = Duration::from_secs(120);
/// The real WECs of the stack (with OCM's work agent and our status agent).
const REAL_WECS: [&str; 2] = ["cluster1", "cluster2"];

/// Which parts to run and at what scale. The defaults are the full run: each part takes under
/// an hour on a 2-core machine (`make bench`); `make bench QUICK=1` passes small knobs.
#[derive(clap::Args, Clone, Debug)]
#[command(
    after_help = "Parts (--scenario, comma-separated or repeated; default: all; agent and churn run first, the others in this order):
  latency  one object at a time: delivery to both WECs, singleton status, multi-WEC status (--repeats runs each)
  bulk     --bulk-objects objects (half ConfigMaps, half Deployments) in --namespaces namespaces, each with its
           own BindingPolicy, created with `kubectl apply` (--kubectl-parallel at once) to 2 real and
           --simulated-wecs simulated WECs: time to every mailbox, hub RSS/CPU, writes, idle writes, and what
           the ITS apiserver alone needs for the same ManifestWorks
  objects  the bulk run at each of --curve-objects, to --curve-wecs-fixed WECs: the growth with objects
  objects-large  the same at each of --curve-objects-large, apart so that each part takes under an hour;
           on the same curve (upstream not tried where the objects part saw it not finish)
  wecs     the bulk run at --curve-wec-objects objects, to each of --curve-wecs WECs: the growth with WECs
  agent    ours only: --agent-objects Gauges on cluster1 (RSS every tenth), one status change each
  churn    ours only: --agent-cycles Pod create/delete cycles, --agent-pods Pods at a time, the agent's RSS
           over them (about 16 cycles a second here: the default 10,000 take about 11 minutes)

Upstream runs stop after --upstream-cap-minutes (ours after --ours-cap-minutes) and are reported as
\"did not finish in N min\"; a curve does not try upstream at larger points once one did not finish.
Each part writes <out-dir>/<part>.json; <markdown> and the plots (<out-dir>/*.svg) are written again
from every part's JSON present, so parts run on different days combine."
)]
pub struct Knobs {
    /// Parts to run (latency, bulk, objects, objects-large, wecs, agent, churn).
    #[arg(long = "scenario", value_enum, value_delimiter = ',', default_values_t = Part::ALL)]
    pub scenarios: Vec<Part>,
    /// latency: runs per implementation (alternating which goes first).
    #[arg(long, default_value_t = 3)]
    pub repeats: usize,
    /// latency: Deployments created one after another for the delivery latency.
    #[arg(long, default_value_t = 50)]
    pub objects: usize,
    /// latency: status changes timed for the status latencies.
    #[arg(long, default_value_t = 50)]
    pub changes: usize,
    /// bulk: objects (half ConfigMaps, half Deployments of 0 replicas).
    #[arg(long, default_value_t = 10_000)]
    pub bulk_objects: usize,
    /// bulk, objects, wecs: namespaces the objects are spread over, each with its own policy.
    #[arg(long, default_value_t = 10)]
    pub namespaces: usize,
    /// bulk: ManagedClusters with a mailbox but no agent, besides the 2 real WECs.
    #[arg(long, default_value_t = 50)]
    pub simulated_wecs: usize,
    /// bulk, objects, wecs: the policies select the simulated WECs only, not the 2 real ones: what
    /// the hub and the ITS take when no WEC on this machine applies anything meanwhile (to take
    /// the time apart; not the scale issue's setup, and "all on both real WECs" is not measured).
    #[arg(long)]
    pub without_real_wecs: bool,
    /// bulk: the real WECs' OCM work agents re-read every object they applied this often, in
    /// seconds, during the part, instead of OCM's default 10 s: how much of the time is that
    /// polling (to take the time apart; not as users run OCM, whose applied-status needs it).
    #[arg(long)]
    pub ocm_status_sync_seconds: Option<u64>,
    /// bulk, objects, wecs: `kubectl apply` processes at once (one file per namespace).
    #[arg(long, default_value_t = 4)]
    pub kubectl_parallel: usize,
    /// objects: the object counts of the curve.
    #[arg(long, value_delimiter = ',', default_values_t = [1000, 5000])]
    pub curve_objects: Vec<usize>,
    /// objects-large: the curve's largest object counts, a part of their own so that each part
    /// stays under an hour (ours took 44 minutes at 10,000 × 12 here on 2026-11-29, 6 on
    /// 2026-12-05).
    #[arg(long, value_delimiter = ',', default_values_t = [10_000])]
    pub curve_objects_large: Vec<usize>,
    /// objects, objects-large: the WECs (2 real, the rest simulated) of every point.
    #[arg(long, default_value_t = 12)]
    pub curve_wecs_fixed: usize,
    /// wecs: the WEC counts of the curve (2 real, the rest simulated).
    #[arg(long, value_delimiter = ',', default_values_t = [12, 52, 102])]
    pub curve_wecs: Vec<usize>,
    /// wecs: the objects of every point.
    #[arg(long, default_value_t = 1000)]
    pub curve_wec_objects: usize,
    /// bulk, objects, wecs: seconds of idle after each run during which the hub's writes are
    /// counted (target 0).
    #[arg(long, default_value_t = 60)]
    pub idle: u64,
    /// Minutes an upstream run may take to full propagation before it is stopped and reported
    /// as "did not finish". Upstream takes about 7 at 1,000 objects × 12 WECs and delivers
    /// nothing at 10,000 × 52 within 20; 10 keeps each part under an hour.
    #[arg(long, default_value_t = 10.0)]
    pub upstream_cap_minutes: f64,
    /// The same for ours (so a hang is reported, not waited on forever).
    #[arg(long, default_value_t = 30.0)]
    pub ours_cap_minutes: f64,
    /// agent: Gauges delivered to cluster1 (in ManifestWorks of 100).
    #[arg(long, default_value_t = 10_000)]
    pub agent_objects: usize,
    /// churn: Pod create/delete cycles (about 16 a second here: the 60,000 take an hour).
    #[arg(long, default_value_t = 10_000)]
    pub agent_cycles: usize,
    /// churn: Pods created (and then deleted) per round of cycles, in ManifestWorks of 100 (at
    /// most half the WEC node's 1,000 Pods, as a round's new Pods come before the old go).
    #[arg(long, default_value_t = 500)]
    pub agent_pods: usize,
    /// Where each part's results (<part>.json) and the plots (*.svg) go; a relative path is from
    /// the repository's root, wherever the bench runs.
    #[arg(long, default_value = "docs/bench")]
    pub out_dir: PathBuf,
    /// The report written from every part's results (relative: from the repository's root).
    #[arg(long, default_value = "docs/benchmarks.md")]
    pub markdown: PathBuf,
}

impl Knobs {
    /// The real WECs the bulk and curve parts deliver to.
    pub fn real_wecs(&self) -> &'static [&'static str] {
        if self.without_real_wecs { &[] } else { &REAL_WECS }
    }

    pub fn cap(&self, i: Implementation) -> f64 {
        match i {
            Implementation::Ours => self.ours_cap_minutes,
            Implementation::Upstream => self.upstream_cap_minutes,
        }
    }
}

/// `--flag value` pairs for a part's report.
fn knob(flag: &str, value: impl std::fmt::Display) -> (String, String) {
    (format!("--{flag}"), value.to_string())
}

fn list(values: &[usize]) -> String {
    values.iter().map(usize::to_string).collect::<Vec<_>>().join(",")
}

/// A path relative to the repository root, unless absolute.
pub fn in_repo(path: &Path) -> PathBuf {
    if path.is_absolute() {
        path.to_path_buf()
    } else {
        repo_root().join(path)
    }
}

/// Runs the chosen parts in turn; after each, writes its JSON and the report again. Puts the
/// stack back to our hub as `make up` runs it, whatever happened.
pub async fn run(stack: &Stack, knobs: &Knobs) -> anyhow::Result<()> {
    let mut parts = knobs.scenarios.clone();
    // The agent parts first, while the agent has seen no other part's objects (its memory
    // would start from their high-water mark).
    parts.sort_by_key(|p| (![Part::Agent, Part::Churn].contains(p), *p));
    parts.dedup();
    if parts.iter().any(|p| ![Part::Agent, Part::Churn].contains(p)) {
        anyhow::ensure!(
            stack.has_upstream_hub(),
            "upstream KubeStellar is not built: run `deps/build.sh kubestellar` (or `make bench`)"
        );
    }
    let (out_dir, markdown) = (in_repo(&knobs.out_dir), in_repo(&knobs.markdown));
    let mut outcome = Ok(());
    for part in parts {
        println!("==== part {}", part.name());
        let started = Instant::now();
        match run_part(stack, knobs, part, started).await {
            Ok(result) => {
                result.save(&out_dir)?;
                write_report(&out_dir, &markdown)?;
                println!(
                    "part {}: {:.1} min; written {} and {}",
                    part.name(),
                    result.seconds / 60.0,
                    part.json(&out_dir).display(),
                    markdown.display()
                );
            }
            Err(e) => {
                outcome = Err(e.context(format!("part {}", part.name())));
                break;
            }
        }
    }
    stack.stop_upstream_hub(WDS)?;
    stack.restart_hub(WDS, HubOptions::STACK).await?;
    outcome
}

async fn run_part(stack: &Stack, knobs: &Knobs, part: Part, started: Instant) -> anyhow::Result<PartResult> {
    install_gauges(stack).await?;
    remove_leftovers(stack).await?;
    remove_simulated(stack).await?;
    // A curve's runs are kept as each ends: its largest points can outlast a session.
    let (out_dir, markdown) = (in_repo(&knobs.out_dir), in_repo(&knobs.markdown));
    let keep_so_far = |output: &Output| {
        part_result(part, started, output.clone(), true).save(&out_dir)?;
        write_report(&out_dir, &markdown)
    };
    let output = match part {
        Part::Latency => latency::run(stack, knobs).await?,
        Part::Bulk => bulk::run(stack, knobs).await?,
        Part::Objects | Part::Wecs => curves::run(stack, knobs, part, &[], keep_so_far).await?,
        Part::ObjectsLarge => {
            let smaller = PartResult::load(&out_dir, Part::Objects)?.map(|r| r.points);
            curves::run(stack, knobs, part, &smaller.unwrap_or_default(), keep_so_far).await?
        }
        Part::Agent => agent::run(stack, knobs).await?,
        Part::Churn => agent::churn(stack, knobs).await?,
    };
    remove_simulated(stack).await?;
    let result = part_result(part, started, output, false);
    if !result.figures.figures.is_empty() {
        println!("\n{}", result.figures.text_table());
    }
    Ok(result)
}

fn part_result(part: Part, started: Instant, output: Output, partial: bool) -> PartResult {
    let Output {
        figures,
        points,
        samples,
        knobs,
    } = output;
    PartResult {
        part,
        date: results::now(),
        seconds: started.elapsed().as_secs_f64(),
        knobs,
        machine: results::machine(),
        figures,
        points,
        samples,
        partial,
    }
}

async fn install_gauges(stack: &Stack) -> anyhow::Result<()> {
    for space in [WDS, "cluster1", "cluster2"] {
        ks_tests::gauge::install(&stack.client(space).await?, MANAGER).await?;
    }
    Ok(())
}

/// Runs one implementation's hub alone: ours with its shipped defaults and tracing on (as
/// users run it), or upstream's.
async fn switch_to(stack: &Stack, implementation: Implementation) -> anyhow::Result<()> {
    match implementation {
        Implementation::Ours => {
            stack.stop_upstream_hub(WDS)?;
            let defaults = HubOptions {
                tracing: Tracing::On,
                max_num_wrapped: None,
            };
            stack.restart_hub(WDS, defaults).await
        }
        Implementation::Upstream => stack.switch_to_upstream_hub(WDS).await,
    }
}

/// Process ids of the running hub.
fn hub_pids(stack: &Stack, implementation: Implementation) -> Vec<u32> {
    let names = match implementation {
        Implementation::Ours => vec![Stack::hub_process(WDS)],
        Implementation::Upstream => Stack::upstream_processes(WDS).to_vec(),
    };
    names.iter().filter_map(|n| stack.procs.running(n)).collect()
}

/// The order of the implementations in a repeat: alternating which goes first.
fn order(repeat: usize) -> [Implementation; 2] {
    if repeat.is_multiple_of(2) {
        [Implementation::Ours, Implementation::Upstream]
    } else {
        [Implementation::Upstream, Implementation::Ours]
    }
}

fn is_bench(name: &Option<String>) -> bool {
    name.as_deref().is_some_and(|n| n.starts_with("bench-"))
}

/// Deletes what an interrupted earlier run left (the bench's objects are all named `bench-…`),
/// and waits until it is gone.
async fn remove_leftovers(stack: &Stack) -> anyhow::Result<()> {
    delete_bench_objects(stack).await?;
    clear_real_wecs(stack).await?;
    quiesce(stack, DEADLINE).await
}

/// Deletes the bench's namespaces on the real WECs, and lets go of the AppliedManifestWorks of
/// the bench's ManifestWorks there: what they list goes with the namespaces (and their
/// ownerReferences), rather than through the work agents, which remove it one object at a time
/// (about 7 a second; 10,000 objects took 400 s even with the namespaces already gone). Only once
/// the bench's ManifestWorks are being deleted: a work agent applies again what a ManifestWork
/// still holds.
async fn clear_real_wecs(stack: &Stack) -> anyhow::Result<()> {
    let no_finalizers = Patch::Merge(serde_json::json!({"metadata": {"finalizers": null}}));
    for wec in REAL_WECS {
        let client = stack.client(wec).await?;
        delete_bench_named(&Api::<Namespace>::all(client.clone())).await?;
        let applied = Api::<AppliedManifestWork>::all(client);
        for work in applied.list(&ListParams::default()).await?.items {
            if is_bench(&Some(work.spec.manifest_work_name.clone())) {
                let name = work.name_any();
                let _ = applied.patch(&name, &PatchParams::default(), &no_finalizers).await;
                let _ = applied.delete(&name, &DeleteParams::default()).await;
            }
        }
    }
    Ok(())
}

/// Deletes the bench's policies, Bindings and namespaces in the WDS, and the ManifestWorks in
/// the ITS that bench policies caused or the agent part wrote; in mailboxes without an agent
/// (the simulated WECs') their finalizers are dropped too, as no agent will.
async fn delete_bench_objects(stack: &Stack) -> anyhow::Result<()> {
    delete_wds_objects(stack).await?;
    delete_bench_named(&Api::<Binding>::all(stack.client(WDS).await?)).await?;
    let its = stack.client("its1").await?;
    let works = Api::<ManifestWork>::all(its.clone());
    let no_finalizers = Patch::Merge(serde_json::json!({"metadata": {"finalizers": null}}));
    for work in works.list_metadata(&ListParams::default()).await?.items {
        let from_bench = is_bench_work(&work.metadata);
        let (Some(name), Some(ns)) = (work.metadata.name, work.metadata.namespace) else {
            continue;
        };
        if from_bench {
            let api = Api::<ManifestWork>::namespaced(its.clone(), &ns);
            let _ = api.delete(&name, &DeleteParams::default()).await;
            if !REAL_WECS.contains(&ns.as_str()) {
                let _ = api.patch(&name, &PatchParams::default(), &no_finalizers).await;
            }
        }
    }
    delete_bench_named(&Api::<Namespace>::all(its)).await
}

/// Deletes every object of `api` named `bench-…` (failures ignored: it may be gone already).
async fn delete_bench_named<K>(api: &Api<K>) -> anyhow::Result<()>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    for object in api.list_metadata(&ListParams::default()).await?.items {
        if is_bench(&object.metadata.name) {
            let _ = api
                .delete(&object.metadata.name.unwrap_or_default(), &DeleteParams::default())
                .await;
        }
    }
    Ok(())
}

/// Whether a ManifestWork is the bench's: named by it (the agent part) or from a bench policy.
fn is_bench_work(meta: &kube::api::ObjectMeta) -> bool {
    is_bench(&meta.name) || caused_by_bench(meta)
}

/// Whether a ManifestWork or WorkStatus comes from a bench policy's Binding.
fn caused_by_bench(meta: &kube::api::ObjectMeta) -> bool {
    meta.labels
        .as_ref()
        .and_then(|l| l.get(ORIGIN_BINDING_LABEL))
        .is_some_and(|b| b.starts_with("bench-"))
}

/// One measured run of `i` with `load` (the bulk and curve parts' unit), on the stack as it is
/// (fresh: the part's start or the last run left it so): the simulated WECs, the hub, the run;
/// then, if it finished, what the ITS apiserver alone needs for the same ManifestWorks, on a
/// fresh stack; and a fresh stack for what comes next. A fresh stack (about 50 s) instead of a
/// clean-up: after 10,000 objects × 52 WECs the ITS apiserver is minutes behind its watchers at
/// 13 GB, and undoing the run through it took 20 minutes (the hub's withdrawal, OCM's agents
/// letting go); and no run inherits that backlog.
async fn run_once(
    stack: &Stack,
    knobs: &Knobs,
    i: Implementation,
    load: &Load<'_>,
) -> anyhow::Result<(Outcome, String)> {
    simulated::create(stack, load.simulated).await?;
    switch_to(stack, i).await?;
    let (mut outcome, mut notes, finals) = propagate(stack, knobs, i, load).await?;
    start_afresh(stack).await?;
    if its_alone(stack, i, load, &mut outcome, &mut notes, finals).await? {
        start_afresh(stack).await?;
    }
    Ok((outcome, notes))
}

async fn start_afresh(stack: &Stack) -> anyhow::Result<()> {
    let started = Instant::now();
    stack.start_afresh().await?;
    println!("   a fresh stack in {:.0} s", started.elapsed().as_secs_f64());
    Ok(())
}

/// Deletes the bench's policies and namespaces in the WDS (the hub removes the rest).
async fn delete_wds_objects(stack: &Stack) -> anyhow::Result<()> {
    let wds = stack.client(WDS).await?;
    delete_bench_named(&Api::<BindingPolicy>::all(wds.clone())).await?;
    delete_bench_named(&Api::<Namespace>::all(wds)).await
}

/// Waits until every scenario's leftovers are gone (namespaces in every space, ManifestWorks,
/// WorkStatuses), so that the next scenario's counts hold only its own writes. After 10,000
/// objects × 52 WECs this waits on a busy ITS for minutes: it polls every few seconds from the
/// apiservers' caches (a poll reading 20,000 WorkStatuses from etcd back to back would add to the
/// load it waits on), and says once a minute what is left.
async fn quiesce(stack: &Stack, deadline: Duration) -> anyhow::Result<()> {
    const EVERY: Duration = Duration::from_secs(2);
    const SAY_EVERY: Duration = Duration::from_secs(60);
    let mut spaces = Vec::new();
    for space in [WDS, "its1", "cluster1", "cluster2"] {
        spaces.push(stack.client(space).await?);
    }
    let its = stack.client("its1").await?;
    let started = Instant::now();
    let mut said = started;
    loop {
        let left = leftovers(&spaces, &its)
            .await
            .context("waiting for the previous scenario's objects to be gone")?;
        if left.is_empty() {
            return Ok(());
        }
        anyhow::ensure!(
            started.elapsed() < deadline,
            "the previous scenario's objects are not gone after {deadline:?}: {left}"
        );
        if said.elapsed() >= SAY_EVERY {
            println!("   after {:.0} s, left: {left}", started.elapsed().as_secs_f64());
            said = Instant::now();
        }
        tokio::time::sleep(EVERY).await;
    }
}

/// What a scenario left behind, by kind.
#[derive(Debug, Default, PartialEq)]
struct Leftovers {
    namespaces: usize,
    manifest_works: usize,
    work_statuses: usize,
}

impl Leftovers {
    fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

impl std::fmt::Display for Leftovers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} namespaces, {} ManifestWorks, {} WorkStatuses",
            self.namespaces, self.manifest_works, self.work_statuses
        )
    }
}

/// The bench's namespaces in `spaces`, and its ManifestWorks and WorkStatuses in the ITS.
async fn leftovers(spaces: &[kube::Client], its: &kube::Client) -> anyhow::Result<Leftovers> {
    let cached = ListParams::default().match_any();
    let mut left = Leftovers::default();
    for space in spaces {
        let namespaces = Api::<Namespace>::all(space.clone()).list_metadata(&cached).await?;
        left.namespaces += namespaces.items.iter().filter(|n| is_bench(&n.metadata.name)).count();
    }
    let works = Api::<ManifestWork>::all(its.clone()).list_metadata(&cached).await?;
    left.manifest_works = works.items.iter().filter(|w| is_bench_work(&w.metadata)).count();
    let statuses = Api::<WorkStatus>::all(its.clone()).list_metadata(&cached).await?;
    left.work_statuses = statuses.items.iter().filter(|w| caused_by_bench(&w.metadata)).count();
    Ok(left)
}

/// Whether `err` is worth trying again (a failed connection, not the apiserver refusing), as
/// the controllers classify it.
fn transient(err: &anyhow::Error) -> bool {
    err.chain()
        .filter_map(|e| e.downcast_ref::<kube::Error>())
        .any(|e| ks_shared::runtime::failure(e) == ks_shared::runtime::Failure::Transient)
}

/// Polls `check` until it holds (true) or `until` passes (false); a transient failure (a
/// failed connection) is one more poll, until then.
async fn within<F, Fut>(until: Instant, mut check: F) -> anyhow::Result<bool>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<bool>>,
{
    loop {
        match check().await {
            Ok(true) => return Ok(true),
            Err(err) if !transient(&err) || Instant::now() >= until => return Err(err),
            Err(err) => println!("   a poll failed ({err:#}); polling on"),
            Ok(false) => {}
        }
        if Instant::now() >= until {
            return Ok(false);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dropped_connection_is_tried_again_an_apiservers_answer_is_not() {
        let dropped = kube::Error::Service("connection closed before message completed".into());
        assert!(transient(
            &anyhow::Error::from(dropped).context("listing ManifestWorks")
        ));
        let refused = kube::Error::Api(Box::new(kube::core::Status::failure("no", "Forbidden").with_code(403)));
        assert!(!transient(&anyhow::Error::from(refused)));
        assert!(!transient(&anyhow::anyhow!("timed out")));
    }
}
