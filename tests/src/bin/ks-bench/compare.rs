//! `ks-bench compare`: the same scenarios against our hub and upstream KubeStellar v0.30.0's
//! (controller-manager and OCM transport controller) on the same stack, runs alternating
//! between the two, each figure reported as median (min–max) over the repeats.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use ks_shared::api::{BindingPolicy, WorkStatus};
use ks_shared::names::ORIGIN_BINDING_LABEL;
use ks_shared::ocm::{ManagedCluster, ManifestWork};
use ks_tests::metrics::{Request, apiserver_writes, difference};
use ks_tests::stack::{HubOptions, Stack, Tracing};
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;

use crate::report::{Figures, Implementation, Unit};
use crate::{MANAGER, unique};

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
    let delivery = crate::delivery(stack, knobs.objects).await?;
    quiesce(stack).await?;
    figures.percentiles(i, "delivery: WDS create → on both WECs", delivery.total);
    figures.add(
        i,
        "delivery: ManifestWork generations per object",
        Unit::Count,
        delivery.writes as f64 / knobs.objects.max(1) as f64,
    );
    let (singleton, writes) = crate::status::singleton(stack, knobs.changes).await?;
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

/// A Deployment sent to both WECs with multi-WEC status: each change scales it in the WDS and
/// times until the WDS status shows the new ready replicas, aggregated over both WECs as the
/// implementation does it (ours sums them; upstream v0.30.0 takes the minimum). Upstream
/// aggregates only apps kinds, so this uses a Deployment, whose status on the WECs is the
/// kube-controller-manager's: the figure includes delivery and the WECs' own work.
async fn multi_wec_scale(stack: &Stack, i: Implementation, changes: usize) -> anyhow::Result<Vec<Duration>> {
    let wds = stack.client(WDS).await?;
    let ns = unique("bench-multi");
    let apply = PatchParams::apply(MANAGER).force();
    let label = json!({"bench.kubestellar.io/multi": ns});
    let edge = json!([{"matchLabels": {"location-group": "edge"}}]);
    let multi = json!({"wantMultiWECReportedState": true});
    let (namespaces, policies) = crate::scenario(&wds, &ns, &ns, &label, edge, multi).await?;
    let deployments: Api<Deployment> = Api::namespaced(wds.clone(), &ns);
    let scale = |replicas: usize| {
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "labels": label},
               "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
                        "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "nginx:1.27"}]}}}})
    };
    let aggregated = |replicas: usize| match i {
        Implementation::Ours => 2 * replicas,
        Implementation::Upstream => replicas,
    };
    let ready = |replicas: usize| {
        move |d: Option<&Deployment>| {
            d.and_then(|d| d.status.as_ref())
                .is_some_and(|s| s.ready_replicas.unwrap_or(0) as usize == aggregated(replicas))
        }
    };
    deployments.patch("web", &apply, &Patch::Apply(scale(1))).await?;
    ks_tests::harness::wait_until(
        deployments.clone(),
        "web",
        "1 ready replica per WEC",
        LATENCY_DEADLINE,
        ready(1),
    )
    .await?;
    let mut latencies = Vec::new();
    for change in 0..changes {
        let replicas = if change % 2 == 0 { 2 } else { 1 };
        let started = Instant::now();
        deployments.patch("web", &apply, &Patch::Apply(scale(replicas))).await?;
        ks_tests::harness::wait_until(
            deployments.clone(),
            "web",
            "the aggregated ready replicas",
            LATENCY_DEADLINE,
            ready(replicas),
        )
        .await?;
        latencies.push(started.elapsed());
    }
    policies.delete(&ns, &DeleteParams::default()).await?;
    namespaces.delete(&ns, &DeleteParams::default()).await?;
    Ok(latencies)
}

/// Peak resident memory (sum over the hub's processes) and CPU seconds, sampled until dropped.
struct Usage {
    peak_kib: Arc<Mutex<u64>>,
    cpu_start: f64,
    pids: Vec<u32>,
    sampler: tokio::task::JoinHandle<()>,
}

impl Usage {
    fn start(pids: Vec<u32>) -> Usage {
        let peak_kib = Arc::new(Mutex::new(0));
        let (peak, watched) = (peak_kib.clone(), pids.clone());
        let sampler = tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(250));
            loop {
                tick.tick().await;
                let rss: u64 = watched.iter().map(|p| crate::rss_kib(*p)).sum();
                let mut peak = peak.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                *peak = (*peak).max(rss);
            }
        });
        Usage {
            peak_kib,
            cpu_start: pids.iter().map(|p| proc_cpu_seconds(*p)).sum(),
            pids,
            sampler,
        }
    }

    /// (peak MiB, CPU seconds) so far.
    fn read(&self) -> (f64, f64) {
        let peak = *self.peak_kib.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let cpu: f64 = self.pids.iter().map(|p| proc_cpu_seconds(*p)).sum();
        (peak as f64 / 1024.0, cpu - self.cpu_start)
    }
}

impl Drop for Usage {
    fn drop(&mut self) {
        self.sampler.abort();
    }
}

/// User plus system CPU time of a process, in seconds (clock ticks of 1/100 s).
fn proc_cpu_seconds(pid: u32) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0.0;
    };
    let Some((_, rest)) = stat.rsplit_once(')') else {
        return 0.0;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After the command: state is field 0, utime 11, stime 12.
    let ticks = |i: usize| fields.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) / 100.0
}

/// Write counts of the WDS and the ITS apiservers.
async fn writes_now(stack: &Stack) -> anyhow::Result<[BTreeMap<Request, u64>; 2]> {
    Ok([
        apiserver_writes(&stack.client(WDS).await?).await?,
        apiserver_writes(&stack.client("its1").await?).await?,
    ])
}

/// WDS writes a hub makes: not the bench's own applies (of the objects, their Namespace and the
/// policy), the ServiceAccount the kube-controller-manager puts in a new Namespace, Leases or Events.
fn hub_writes_in_wds(counts: &BTreeMap<Request, u64>) -> u64 {
    let by_bench = |k: &Request| {
        k.verb == "APPLY"
            && k.subresource.is_empty()
            && ["configmaps", "deployments", "namespaces", "bindingpolicies"].contains(&k.resource.as_str())
    };
    counts
        .iter()
        .filter(|(k, _)| !["leases", "events", "serviceaccounts"].contains(&k.resource.as_str()) && !by_bench(k))
        .map(|(_, v)| v)
        .sum()
}

/// ManifestWork writes (main resource, every write verb: the hub's, and the OCM agent's
/// finalizer patches, one per new ManifestWork on a real WEC).
fn manifest_work_writes(counts: &BTreeMap<Request, u64>) -> u64 {
    ks_tests::metrics::total(counts, "manifestworks", Some(""))
}

fn describe(counts: &BTreeMap<Request, u64>) -> String {
    counts
        .iter()
        .filter(|(k, _)| !["leases", "events"].contains(&k.resource.as_str()))
        .map(|(k, v)| {
            let sub = if k.subresource.is_empty() {
                String::new()
            } else {
                format!("/{}", k.subresource)
            };
            format!("{} {}{sub} {v}", k.verb, k.resource)
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// `count` small objects (half ConfigMaps, half Deployments of 0 replicas) selected for both
/// WECs and `simulated_wecs` ManagedClusters that have a mailbox but no agent.
async fn bulk(
    stack: &Stack,
    knobs: &Knobs,
    i: Implementation,
    count: usize,
    simulated: &[String],
    figures: &mut Figures,
) -> anyhow::Result<()> {
    let wds = stack.client(WDS).await?;
    let its = stack.client("its1").await?;
    let ns = unique("bench-bulk");
    let apply = PatchParams::apply(MANAGER).force();
    let label = json!({"bench.kubestellar.io/bulk": ns});
    let name = format!("{ns}-p");

    // Every mailbox's ManifestWorks of this policy, as manifests held per mailbox.
    let held: Arc<Mutex<HashMap<(String, String), usize>>> = Arc::default();
    let works: Api<ManifestWork> = Api::all(its.clone());
    let selector = format!("{ORIGIN_BINDING_LABEL}={name}");
    let seen = held.clone();
    let tracking = tokio::spawn({
        let works = works.clone();
        let selector = selector.clone();
        async move {
            let events = watcher(works, watcher::Config::default().labels(&selector))
                .default_backoff()
                .applied_objects();
            futures::pin_mut!(events);
            while let Some(event) = events.next().await {
                let Ok(work) = event else {
                    // The watcher retries on its own.
                    continue;
                };
                let key = (
                    work.metadata.namespace.clone().unwrap_or_default(),
                    work.metadata.name.clone().unwrap_or_default(),
                );
                let n = work.spec.workload.manifests.len();
                seen.lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .insert(key, n);
            }
        }
    });

    let before = writes_now(stack).await?;
    let usage = Usage::start(hub_pids(stack, i));
    let started = Instant::now();
    let clusters = json!([{"matchLabels": {"location-group": "edge"}}, {"matchLabels": {SIMULATED_LABEL: "true"}}]);
    let (namespaces, policies) = crate::scenario(&wds, &ns, &name, &label, clusters, json!({})).await?;
    let configmaps: Api<ConfigMap> = Api::namespaced(wds.clone(), &ns);
    let deployments: Api<Deployment> = Api::namespaced(wds.clone(), &ns);
    futures::stream::iter(0..count)
        .map(|n| {
            let (configmaps, deployments, apply, label) = (configmaps.clone(), deployments.clone(), apply.clone(), label.clone());
            async move {
                let name = format!("o-{n}");
                if n % 2 == 0 {
                    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": label}, "data": {"n": n.to_string()}});
                    configmaps.patch(&name, &apply, &Patch::Apply(cm)).await.map(|_| ())
                } else {
                    let d = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "labels": label},
                        "spec": {"replicas": 0, "selector": {"matchLabels": {"app": name}},
                                 "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [{"name": "c", "image": "nginx:1.27"}]}}}});
                    deployments.patch(&name, &apply, &Patch::Apply(d)).await.map(|_| ())
                }
            }
        })
        .buffer_unordered(16)
        .try_collect::<Vec<()>>()
        .await?;
    let created = started.elapsed();

    // Full propagation: every object on both real WECs, and every mailbox holding them all
    // (the objects plus their Namespace).
    let mailboxes: Vec<String> = ["cluster1", "cluster2"]
        .iter()
        .map(|s| s.to_string())
        .chain(simulated.iter().cloned())
        .collect();
    let wecs = [stack.client("cluster1").await?, stack.client("cluster2").await?];
    let on_wecs = || async {
        let mut all = true;
        for wec in &wecs {
            let cms = Api::<ConfigMap>::namespaced(wec.clone(), &ns)
                .list_metadata(&ListParams::default().labels(&format!("bench.kubestellar.io/bulk={ns}")))
                .await?;
            let ds = Api::<Deployment>::namespaced(wec.clone(), &ns)
                .list_metadata(&ListParams::default().labels(&format!("bench.kubestellar.io/bulk={ns}")))
                .await?;
            all &= cms.items.len() + ds.items.len() == count;
        }
        anyhow::Ok(all)
    };
    ks_tests::stack::wait_for(&format!("{count} objects in every mailbox"), DEADLINE, || {
        let held = held.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let full = mailboxes.iter().all(|m| {
            held.iter()
                .filter(|((ns, _), _)| ns == m)
                .map(|(_, n)| n)
                .sum::<usize>()
                == count + 1
        });
        std::future::ready(Ok(full))
    })
    .await?;
    let in_mailboxes = started.elapsed();
    ks_tests::stack::wait_for(&format!("{count} objects on both WECs"), DEADLINE, on_wecs).await?;
    let propagated = started.elapsed();
    let (peak, cpu) = usage.read();
    drop(usage);
    let after = writes_now(stack).await?;
    let [wds_writes, its_writes] = [difference(&before[0], &after[0]), difference(&before[1], &after[1])];

    // Idle: what the hub writes when nothing changes.
    tokio::time::sleep(Duration::from_secs(knobs.idle)).await;
    let idle = writes_now(stack).await?;
    let idle_writes = [difference(&after[0], &idle[0]), difference(&after[1], &idle[1])];

    let label_of = |what: &str| format!("bulk {count} × {} WECs: {what}", mailboxes.len());
    figures.add(
        i,
        &label_of("created in the WDS (client)"),
        Unit::Seconds,
        created.as_secs_f64(),
    );
    figures.add(
        i,
        &label_of("all in every mailbox"),
        Unit::Seconds,
        in_mailboxes.as_secs_f64(),
    );
    figures.add(
        i,
        &label_of("all on both real WECs"),
        Unit::Seconds,
        propagated.as_secs_f64(),
    );
    figures.add(i, &label_of("hub peak RSS"), Unit::MiB, peak);
    figures.add(i, &label_of("hub CPU seconds"), Unit::Seconds, cpu);
    figures.add(
        i,
        &label_of("hub's writes to the WDS"),
        Unit::Count,
        hub_writes_in_wds(&wds_writes) as f64,
    );
    figures.add(
        i,
        &label_of("ManifestWork writes"),
        Unit::Count,
        manifest_work_writes(&its_writes) as f64,
    );
    figures.add(
        i,
        &label_of("Binding writes"),
        Unit::Count,
        ks_tests::metrics::total(&wds_writes, "bindings", None) as f64,
    );
    figures.add(
        i,
        &format!("bulk {count}: hub writes in {} s idle afterwards", knobs.idle),
        Unit::Count,
        (hub_writes_in_wds(&idle_writes[0]) + manifest_work_writes(&idle_writes[1])) as f64,
    );
    figures.notes.push(format!(
        "{i}, bulk {count}: WDS writes: {}\n{i}, bulk {count}: ITS writes: {}\n{i}, bulk {count}: idle writes: WDS [{}] ITS [{}]",
        describe(&wds_writes),
        describe(&its_writes),
        describe(&idle_writes[0]),
        describe(&idle_writes[1])
    ));

    tracking.abort();
    let final_works = works.list(&ListParams::default().labels(&selector)).await?.items;
    let floor = physical_limit(&its, &final_works).await?;
    figures.add(
        i,
        &label_of("apiserver alone writes the same ManifestWorks"),
        Unit::Seconds,
        floor.as_secs_f64(),
    );

    policies.delete(&name, &DeleteParams::default()).await?;
    namespaces.delete(&ns, &DeleteParams::default()).await?;
    Ok(())
}

/// The time the ITS apiserver alone needs to accept `works` (their final content, each written
/// once) from a tight client loop with 8 writes in flight, into a namespace no agent reads.
async fn physical_limit(its: &kube::Client, works: &[ManifestWork]) -> anyhow::Result<Duration> {
    let ns = unique("bench-floor");
    let namespaces = crate::apply_namespace(its, &ns, &json!({})).await?;
    let apply = PatchParams::apply(MANAGER).force();
    let api: Api<ManifestWork> = Api::namespaced(its.clone(), &ns);
    let started = Instant::now();
    futures::stream::iter(works.iter().enumerate())
        .map(|(n, w)| {
            let (api, apply) = (api.clone(), apply.clone());
            let body = json!({"apiVersion": "work.open-cluster-management.io/v1", "kind": "ManifestWork",
                              "metadata": {"name": format!("w-{n}")}, "spec": w.spec});
            async move {
                api.patch(&format!("w-{n}"), &apply, &Patch::Apply(body))
                    .await
                    .map(|_| ())
            }
        })
        .buffer_unordered(8)
        .try_collect::<Vec<()>>()
        .await?;
    let took = started.elapsed();
    // `quiesce` waits for it to be gone before the next scenario.
    namespaces.delete(&ns, &DeleteParams::default()).await?;
    Ok(took)
}

/// Marks the simulated WECs (only the bulk scenario selects them).
const SIMULATED_LABEL: &str = "bench.kubestellar.io/simulated";
const SIMULATED_PREFIX: &str = "sim-";

/// `count` ManagedClusters with mailbox namespaces but no agent.
async fn simulated_wecs(stack: &Stack, count: usize) -> anyhow::Result<Vec<String>> {
    let its = stack.client("its1").await?;
    let apply = PatchParams::apply(MANAGER).force();
    let names: Vec<String> = (0..count).map(|n| format!("{SIMULATED_PREFIX}{n}")).collect();
    for name in &names {
        Api::<Namespace>::all(its.clone())
            .patch(
                name,
                &apply,
                &Patch::Apply(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})),
            )
            .await?;
        let cluster = json!({"apiVersion": "cluster.open-cluster-management.io/v1", "kind": "ManagedCluster",
            "metadata": {"name": name, "labels": {SIMULATED_LABEL: "true", "name": name}},
            "spec": {"hubAcceptsClient": true}});
        Api::<ManagedCluster>::all(its.clone())
            .patch(name, &apply, &Patch::Apply(cluster))
            .await?;
    }
    Ok(names)
}

/// Removes every simulated WEC, leftovers of an interrupted run included. With no agent to
/// acknowledge the clean-up, their finalizers (and their add-ons') are dropped here.
async fn remove_simulated(stack: &Stack) -> anyhow::Result<()> {
    let its = stack.client("its1").await?;
    let clusters = Api::<ManagedCluster>::all(its.clone());
    let simulated = ListParams::default().labels(&format!("{SIMULATED_LABEL}=true"));
    let unblock = PatchParams::default();
    let no_finalizers = Patch::Merge(json!({"metadata": {"finalizers": null}}));
    for cluster in clusters.list_metadata(&simulated).await?.items {
        let name = cluster.metadata.name.unwrap_or_default();
        let addons = Api::<ks_shared::ocm::ManagedClusterAddOn>::namespaced(its.clone(), &name);
        for addon in addons.list_metadata(&ListParams::default()).await?.items {
            let addon = addon.metadata.name.unwrap_or_default();
            let _ = addons.delete(&addon, &DeleteParams::default()).await;
            let _ = addons.patch(&addon, &unblock, &no_finalizers).await;
        }
        let _ = clusters.delete(&name, &DeleteParams::default()).await;
        let _ = clusters.patch(&name, &unblock, &no_finalizers).await;
        let _ = Api::<Namespace>::all(its.clone())
            .delete(&name, &DeleteParams::default())
            .await;
    }
    let namespaces = Api::<Namespace>::all(its.clone());
    ks_tests::stack::wait_for(
        "the simulated WECs and their mailboxes to be gone",
        DEADLINE,
        || async {
            let mailboxes: Vec<String> = namespaces
                .list_metadata(&ListParams::default())
                .await?
                .items
                .into_iter()
                .filter_map(|n| n.metadata.name.filter(|n| n.starts_with(SIMULATED_PREFIX)))
                .collect();
            // The hub's clean-up finalizers wait for an agent that does not exist.
            for mailbox in &mailboxes {
                let works = Api::<ManifestWork>::namespaced(its.clone(), mailbox);
                for work in works.list_metadata(&ListParams::default()).await?.items {
                    let _ = works
                        .patch(&work.metadata.name.unwrap_or_default(), &unblock, &no_finalizers)
                        .await;
                }
                let bindings = Api::<k8s_openapi::api::rbac::v1::RoleBinding>::namespaced(its.clone(), mailbox);
                for binding in bindings.list_metadata(&ListParams::default()).await?.items {
                    let _ = bindings
                        .patch(&binding.metadata.name.unwrap_or_default(), &unblock, &no_finalizers)
                        .await;
                }
            }
            Ok(clusters.list_metadata(&simulated).await?.items.is_empty() && mailboxes.is_empty())
        },
    )
    .await
}

/// The agent under status churn (ours only: upstream's ocm-status-addon is not served by the
/// Go module proxy, so it cannot be built here): `agent_objects` Gauges on cluster1, then
/// rounds in which every Gauge's status changes; WorkStatus writes per second and the agent's
/// memory after each round.
async fn agent_churn(stack: &Stack, knobs: &Knobs, figures: &mut Figures) -> anyhow::Result<()> {
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
    let batches = count.div_ceil(100);
    for batch in 0..batches {
        let manifests: Vec<_> = (batch * 100..count.min(batch * 100 + 100))
            .map(|n| json!({"apiVersion": "bench.kubestellar.io/v1", "kind": "Gauge", "metadata": {"name": format!("g-{n}"), "namespace": ns}, "spec": {}}))
            .collect();
        let work = json!({"apiVersion": "work.open-cluster-management.io/v1", "kind": "ManifestWork",
            "metadata": {"name": format!("{ns}-{batch}"), "labels": labels}, "spec": {"workload": {"manifests": manifests}}});
        works
            .patch(&format!("{ns}-{batch}"), &apply, &Patch::Apply(work))
            .await?;
    }
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
    let mut memory = vec![crate::rss_kib(pid) / 1024];
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
        memory.push(crate::rss_kib(pid) / 1024);
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
    for batch in 0..batches {
        works.delete(&format!("{ns}-{batch}"), &DeleteParams::default()).await?;
    }
    works.delete(&ns, &DeleteParams::default()).await?;
    Ok(())
}

/// `docs/benchmarks.md`: what was run, how, and the table.
fn markdown(knobs: &Knobs, figures: &Figures, took: Duration) -> String {
    let machine = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines().find_map(|l| {
                l.strip_prefix("model name")
                    .map(|m| m.trim_start_matches([' ', '\t', ':']).to_string())
            })
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0);
    let notes: String = figures
        .notes
        .iter()
        .map(|n| format!("- {}\n", n.replace('\n', "\n- ")))
        .collect();
    format!(
        "# Benchmarks: ours and upstream KubeStellar side by side\n\n\
Written by `make bench` (`ks-bench compare`) on {date}; {took:.0} s in all. Every figure is the median over \
{repeats} runs per implementation, with the range (min–max) in brackets; \"ours better by\" is upstream's median \
divided by ours for times, memory and counts (for rates, ours divided by upstream), so above 1× means ours is better.\n\n\
{table}\n\
## Method\n\n\
- **Machine:** {cores} cores ({machine}), shared with the whole stack: every apiserver, etcd, OCM and Jaeger run \
on the same cores, so absolute numbers are noisy; compare within a run.\n\
- **Versions:** upstream KubeStellar v0.30.0's `controller-manager` (binding and status controllers) and \
`ocm-transport-controller`, built from the Go module proxy by `deps/build.sh kubestellar`, run with their \
binaries' defaults (QPS 5, burst 10, the same 512,000-byte and 512,000-object ManifestWork limits as ours), and \
found through KubeFlex ControlPlane objects as in a real install. Ours: `ks-hub`, a release build like every \
process of ours here (`make bench` builds them), with its shipped defaults and tracing on. Both against the same stack (`make up`): Kubernetes v1.34 apiservers, OCM v1.2.0, two WECs with \
our status agent (upstream's ocm-status-addon is not served by the module proxy, so it cannot be built here; \
upstream's status controller reads the WorkStatuses our agent writes, which are API-compatible).\n\
- **Alternation:** each repeat runs every scenario against one implementation and then the other, the order \
swapping between repeats; the hub not under test is stopped. Scenarios clean up after themselves, so each \
starts from the same stack state.\n\
- **Delivery** ({objects} Deployments, one after another): from the create call returning to the object \
existing on both WECs (a watch on each WEC). ManifestWork generations per object counts the ITS writes that \
changed a ManifestWork's spec.\n\
- **Status, singleton** ({changes} changes): a Gauge (a custom resource with a status subresource and no \
controller) bound to cluster1 with `wantSingletonReportedState`; the bench writes its `.status` on cluster1 \
and times until the WDS Gauge shows it. Between the clocks: our agent, the WorkStatus, the hub's status controller.\n\
- **Status, multi-WEC**: a Deployment bound to both WECs with `wantMultiWECReportedState`, scaled between 1 \
and 2 replicas in the WDS; timed until the WDS status shows the new ready replicas aggregated over both WECs \
(ours sums them, upstream v0.30.0 takes the minimum; upstream aggregates only apps kinds, hence a Deployment). \
This includes delivery and the WECs' own controllers.\n\
- **Bulk** ({bulk:?} objects, half ConfigMaps and half Deployments of 0 replicas, created 16 at a time) to \
both WECs and {sims} simulated WECs (ManagedClusters with a mailbox namespace but no agent, to load the hub): \
time to every mailbox holding every object (a watch on ManifestWorks) and to every object existing on both \
real WECs; the hub's peak RSS (sampled every 250 ms, summed over upstream's two processes) and CPU seconds; \
the writes the WDS and ITS apiservers served (their own `apiserver_request_total`, write verbs): the hub's \
writes to the WDS (all but the bench's own applies, the ServiceAccount a new Namespace gets, Leases and \
Events) and ManifestWork writes to the ITS (the hub's, plus the OCM agent's finalizer patch on each new \
ManifestWork of a real WEC), then the same during {idle} s of idle afterwards (target 0). Every write per \
resource and verb, the agents' WorkStatus writes included (they may still be catching up when a phase \
ends), is listed under Details.\n\
- **Physical limit:** the same final ManifestWorks, each written once into a namespace no agent reads, from \
a tight client loop with 8 writes in flight: what the ITS apiserver alone needs.\n\
- **Agent** (ours only): {agent} Gauges on cluster1 in ManifestWorks of 100, then {rounds} rounds each \
changing every Gauge's status (16 writes in flight); WorkStatus writes per second over the rounds (the ITS \
apiserver's count) and the agent's RSS after each round.\n\n\
## Details\n\n{notes}",
        date = chrono_like_now(),
        took = took.as_secs_f64(),
        repeats = knobs.repeats,
        table = figures.markdown_table(),
        objects = knobs.objects,
        changes = knobs.changes,
        bulk = knobs.bulk,
        sims = knobs.simulated_wecs,
        idle = knobs.idle,
        agent = knobs.agent_objects,
        rounds = knobs.agent_rounds,
    )
}

/// Today's date (UTC) as YYYY-MM-DD.
fn chrono_like_now() -> String {
    let ts = k8s_openapi::jiff::Timestamp::now();
    ts.strftime("%Y-%m-%d %H:%M UTC").to_string()
}
