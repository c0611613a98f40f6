//! `ks-bench compare`: the same scenarios against our hub and upstream KubeStellar v0.30.0's
//! (controller-manager and OCM transport controller) on the same stack, runs alternating
//! between the two, each figure reported as median (min–max) over the repeats.

mod agent;
mod bulk;
mod multi_wec;
mod report;
mod simulated;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Namespace;
use ks_shared::api::{BindingPolicy, WorkStatus};
use ks_shared::names::ORIGIN_BINDING_LABEL;
use ks_shared::ocm::ManifestWork;
use ks_tests::stack::{HubOptions, Stack, Tracing};
use kube::api::{Api, DeleteParams, ListParams};

use agent::agent_churn;
use bulk::bulk;
use multi_wec::multi_wec_scale;
use report::{Figures, Implementation, Unit, markdown};
use simulated::{remove_simulated, simulated_wecs};

use crate::fixtures::MANAGER;
use crate::scenarios::delivery::delivery;
use crate::scenarios::status::singleton;

const WDS: &str = "wds1";
/// For bulk phases, which take long at 10,000 objects.
const DEADLINE: Duration = Duration::from_secs(1800);
/// For one object's change.
const LATENCY_DEADLINE: Duration = Duration::from_secs(120);

/// Scale knobs of one comparison.
#[derive(clap::Args, Clone, Debug)]
pub struct Knobs {
    /// Runs of every scenario per implementation (alternating which goes first).
    #[arg(long, default_value_t = 3)]
    pub repeats: usize,
    /// Deployments created one after another for the delivery latency.
    #[arg(long, default_value_t = 50)]
    pub objects: usize,
    /// Status changes timed for the status latencies.
    #[arg(long, default_value_t = 50)]
    pub changes: usize,
    /// Object counts of the bulk scenario, comma-separated (half ConfigMaps, half Deployments).
    #[arg(long, value_delimiter = ',', default_values_t = [1000, 10000])]
    pub bulk: Vec<usize>,
    /// Extra ManagedClusters with a mailbox but no agent, loading the hub in the bulk scenario.
    #[arg(long, default_value_t = 50)]
    pub simulated_wecs: usize,
    /// Seconds of idle after each bulk run during which writes are counted.
    #[arg(long, default_value_t = 60)]
    pub idle: u64,
    /// Objects on cluster1 for the agent scenario (ours only).
    #[arg(long, default_value_t = 1000)]
    pub agent_objects: usize,
    /// Rounds of status churn over those objects.
    #[arg(long, default_value_t = 5)]
    pub agent_rounds: usize,
    /// Where to write the figures as JSON.
    #[arg(long, default_value = "target/bench/benchmarks.json")]
    pub json: PathBuf,
    /// Where to write the Markdown report (method and table).
    #[arg(long, default_value = "docs/benchmarks.md")]
    pub markdown: PathBuf,
}

/// Runs the comparison, puts the stack back to our hub as `make up` runs it, and writes the
/// figures as JSON and the Markdown report.
pub async fn run(stack: &Stack, knobs: &Knobs) -> anyhow::Result<()> {
    anyhow::ensure!(
        stack.has_upstream_hub(),
        "upstream KubeStellar is not built: run `deps/build.sh kubestellar` (or `make bench`)"
    );
    let started = Instant::now();
    let mut figures = Figures::default();
    let outcome = compare(stack, knobs, &mut figures).await;
    // Whatever happened, the stack goes back to running our hub as `make up` does.
    stack.stop_upstream_hub(WDS)?;
    stack.restart_hub(WDS, HubOptions::STACK).await?;
    outcome?;
    println!("\n{}", figures.text_table());
    for note in &figures.notes {
        println!("{note}");
    }
    if let Some(dir) = knobs.json.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(&knobs.json, serde_json::to_string_pretty(&figures)?)?;
    std::fs::write(&knobs.markdown, markdown(knobs, &figures, started.elapsed()))?;
    println!(
        "written: {} and {} ({:.0} s in all)",
        knobs.json.display(),
        knobs.markdown.display(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

async fn compare(stack: &Stack, knobs: &Knobs, figures: &mut Figures) -> anyhow::Result<()> {
    install_gauges(stack).await?;
    remove_leftovers(stack).await?;
    remove_simulated(stack).await?;
    let simulated = simulated_wecs(stack, knobs.simulated_wecs).await?;
    let outcome = alternate(stack, knobs, &simulated, figures).await;
    remove_simulated(stack).await?;
    outcome
}

async fn alternate(stack: &Stack, knobs: &Knobs, simulated: &[String], figures: &mut Figures) -> anyhow::Result<()> {
    for repeat in 0..knobs.repeats {
        let order = if repeat % 2 == 0 {
            [Implementation::Ours, Implementation::Upstream]
        } else {
            [Implementation::Upstream, Implementation::Ours]
        };
        for implementation in order {
            println!("== run {} of {}: {implementation}", repeat + 1, knobs.repeats);
            let started = Instant::now();
            switch_to(stack, implementation).await?;
            one_run(stack, knobs, implementation, simulated, figures).await?;
            println!("   ({:.0} s)", started.elapsed().as_secs_f64());
        }
    }
    switch_to(stack, Implementation::Ours).await?;
    agent_churn(stack, knobs, figures).await
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

async fn one_run(
    stack: &Stack,
    knobs: &Knobs,
    i: Implementation,
    simulated: &[String],
    figures: &mut Figures,
) -> anyhow::Result<()> {
    let delivery = delivery(stack, knobs.objects).await?;
    quiesce(stack).await?;
    figures.percentiles(i, "delivery: WDS create → on both WECs", delivery.total);
    figures.add(
        i,
        "delivery: ManifestWork generations per object",
        Unit::Count,
        delivery.writes as f64 / knobs.objects.max(1) as f64,
    );
    let (singleton, writes) = singleton(stack, knobs.changes).await?;
    figures.percentiles(i, "status: WEC change → WDS .status (singleton)", singleton);
    figures.add(
        i,
        "status: WDS writes per change (singleton)",
        Unit::Count,
        writes as f64 / knobs.changes.max(1) as f64,
    );
    quiesce(stack).await?;
    let multi = multi_wec_scale(stack, i, (knobs.changes / 5).max(2)).await?;
    quiesce(stack).await?;
    figures.percentiles(i, "status: WDS scale → aggregated readyReplicas (2 WECs)", multi);
    for &count in &knobs.bulk {
        bulk(stack, knobs, i, count, simulated, figures).await?;
        quiesce(stack).await?;
    }
    Ok(())
}

/// Deletes what an interrupted earlier run left (the bench's objects are all named `bench-…`),
/// and waits until it is gone.
async fn remove_leftovers(stack: &Stack) -> anyhow::Result<()> {
    let bench = |name: &Option<String>| name.as_deref().is_some_and(|n| n.starts_with("bench-"));
    let wds = stack.client(WDS).await?;
    let policies = Api::<BindingPolicy>::all(wds.clone());
    for policy in policies.list_metadata(&ListParams::default()).await?.items {
        if bench(&policy.metadata.name) {
            policies
                .delete(&policy.metadata.name.unwrap_or_default(), &DeleteParams::default())
                .await?;
        }
    }
    let its = stack.client("its1").await?;
    let works = Api::<ManifestWork>::all(its.clone());
    for work in works.list_metadata(&ListParams::default()).await?.items {
        let (Some(name), Some(ns)) = (work.metadata.name, work.metadata.namespace) else {
            continue;
        };
        // Only the agent scenario writes ManifestWorks itself; the hubs remove their own.
        if name.starts_with("bench-churn") {
            Api::<ManifestWork>::namespaced(its.clone(), &ns)
                .delete(&name, &DeleteParams::default())
                .await?;
        }
    }
    for client in [wds, its] {
        let namespaces = Api::<Namespace>::all(client);
        for ns in namespaces.list_metadata(&ListParams::default()).await?.items {
            if bench(&ns.metadata.name) {
                namespaces
                    .delete(&ns.metadata.name.unwrap_or_default(), &DeleteParams::default())
                    .await?;
            }
        }
    }
    quiesce(stack).await
}

/// Waits until every scenario's leftovers are gone (namespaces in every space, ManifestWorks,
/// WorkStatuses), so that the next scenario's counts hold only its own writes.
async fn quiesce(stack: &Stack) -> anyhow::Result<()> {
    let spaces = [WDS, "its1", "cluster1", "cluster2"];
    let mut clients = Vec::new();
    for space in spaces {
        clients.push(stack.client(space).await?);
    }
    let its = stack.client("its1").await?;
    let bench = |name: &Option<String>| name.as_deref().is_some_and(|n| n.starts_with("bench-"));
    ks_tests::stack::wait_for("the previous scenario's objects to be gone", DEADLINE, || async {
        for client in &clients {
            let namespaces = Api::<Namespace>::all(client.clone())
                .list_metadata(&ListParams::default())
                .await?;
            if namespaces.items.iter().any(|n| bench(&n.metadata.name)) {
                return Ok(false);
            }
        }
        let works = Api::<ManifestWork>::all(its.clone())
            .list_metadata(&ListParams::default())
            .await?;
        let statuses = Api::<WorkStatus>::all(its.clone())
            .list_metadata(&ListParams::default())
            .await?;
        Ok(!works.items.iter().any(|w| bench(&w.metadata.name))
            && !statuses.items.iter().any(|w| {
                w.metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(ORIGIN_BINDING_LABEL))
                    .is_some_and(|b| b.starts_with("bench-"))
            }))
    })
    .await
}
