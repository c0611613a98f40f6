//! ks-bench: measurements on the running local stack (`make up` first), and the side-by-side
//! comparison with upstream KubeStellar (`compare`). Prints numbers; never asserts them.

mod compare;
mod report;

use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use futures::TryStreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use ks_shared::api::{Binding, BindingPolicy};
use ks_tests::harness::{repo_root, wait_until};
use ks_tests::stack::Stack;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;

#[derive(Parser)]
#[command(
    version,
    about = "Measurements on the running local stack (`make up` first)",
    long_about = "Measurements on the running local stack (`make up` first). `compare` runs every scenario \
                  against our hub and upstream KubeStellar v0.30.0's in turn (`make bench`); the others \
                  measure one part of ours."
)]
struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Time from a BindingPolicy change (apply returned) to its Binding showing the change.
    BindingLatency {
        /// How many policy changes to time.
        #[arg(long, default_value_t = 20)]
        changes: usize,
    },
    /// Time from creating a Deployment in the WDS to it being present on every WEC, one
    /// Deployment after another, and count ManifestWork writes.
    DeliveryLatency {
        #[arg(long, default_value_t = 50)]
        objects: usize,
    },
    /// With the stack's agent on cluster1: time WEC status change → WorkStatus update, count
    /// WorkStatus writes per change, then measure the agent's memory at many tracked objects.
    AgentLatency {
        /// How many status changes to time.
        #[arg(long, default_value_t = 50)]
        changes: usize,
        /// How many ConfigMaps to deliver for the memory measurement (in ManifestWorks of 100).
        #[arg(long, default_value_t = 1000)]
        objects: usize,
    },
    /// A Gauge bound to cluster1 with singleton status return: time WEC status change → WDS
    /// `.status` updated, and count writes to the WDS object per change.
    StatusLatency {
        /// How many status changes to time.
        #[arg(long, default_value_t = 50)]
        changes: usize,
    },
    /// With the stack's agent on cluster1: delete and recreate ManifestWorks of one Pod each, round
    /// after round, and print the agent's memory after each round.
    AgentChurn {
        #[arg(long, default_value_t = 5)]
        rounds: usize,
        #[arg(long, default_value_t = 20)]
        works: usize,
    },
    /// Delivery and singleton status latency with the hub's tracing off and on, alternating.
    TracingOverhead {
        /// Rounds per setting.
        #[arg(long, default_value_t = 2)]
        rounds: usize,
        #[arg(long, default_value_t = 30)]
        objects: usize,
        #[arg(long, default_value_t = 30)]
        changes: usize,
    },
    /// Every scenario against our hub and upstream KubeStellar v0.30.0's, alternating; prints a
    /// table and writes it as JSON and Markdown.
    Compare(compare::Knobs),
}

const MANAGER: &str = "ks-bench";

/// A scenario's namespace, labelled `label`, and a BindingPolicy named `policy` that sends
/// what carries that label to the WECs `clusters` select; `clause` adds to its downsync clause.
pub async fn scenario(
    wds: &kube::Client,
    ns: &str,
    policy: &str,
    label: &serde_json::Value,
    clusters: serde_json::Value,
    clause: serde_json::Value,
) -> anyhow::Result<(Api<Namespace>, Api<BindingPolicy>)> {
    let apply = PatchParams::apply(MANAGER).force();
    let namespaces = apply_namespace(wds, ns, label).await?;
    let mut downsync = json!({"objectSelectors": [{"matchLabels": label}]});
    if let (Some(to), Some(extra)) = (downsync.as_object_mut(), clause.as_object()) {
        to.extend(extra.clone());
    }
    let policies: Api<BindingPolicy> = Api::all(wds.clone());
    let body = json!({"apiVersion": "control.kubestellar.io/v1alpha1", "kind": "BindingPolicy", "metadata": {"name": policy},
        "spec": {"clusterSelectors": clusters, "downsync": [downsync]}});
    policies.patch(policy, &apply, &Patch::Apply(body)).await?;
    Ok((namespaces, policies))
}

/// Resident memory of a process, in KiB (0 once it is gone).
pub fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| {
                l.strip_prefix("VmRSS:")
                    .map(|v| v.trim().trim_end_matches(" kB").parse().ok())
            })
        })
        .flatten()
        .unwrap_or(0)
}

/// Applies a Namespace with `labels` (`{}` for none); returns the Namespace API of that space.
pub async fn apply_namespace(
    client: &kube::Client,
    ns: &str,
    labels: &serde_json::Value,
) -> anyhow::Result<Api<Namespace>> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let namespace = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "labels": labels}});
    namespaces
        .patch(ns, &PatchParams::apply(MANAGER).force(), &Patch::Apply(namespace))
        .await?;
    Ok(namespaces)
}

/// A name no other run or scenario of this process uses.
pub fn unique(prefix: &str) -> String {
    static COUNT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = COUNT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("{prefix}-{}-{n}", std::process::id())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let exe = std::env::current_exe()?;
    let stack = Stack::new(&repo_root(), 2, exe.parent().expect("binary directory"))?;
    anyhow::ensure!(stack.is_running(), "the stack is not running: run `make up` first");
    match Args::parse().command {
        Command::BindingLatency { changes } => binding_latency(&stack, changes).await,
        Command::AgentLatency { changes, objects } => agent::latency(&stack, changes, objects).await,
        Command::DeliveryLatency { objects } => delivery_latency(&stack, objects).await,
        Command::AgentChurn { rounds, works } => agent::churn(&stack, rounds, works).await,
        Command::StatusLatency { changes } => status::latency(&stack, changes).await,
        Command::TracingOverhead {
            rounds,
            objects,
            changes,
        } => tracing_overhead(&stack, rounds, objects, changes).await,
        Command::Compare(knobs) => compare::run(&stack, &knobs).await,
    }
}

/// Delivery and status latency with our hub's tracing off, then on, `rounds` times; the stack's
/// hub is restored afterwards.
async fn tracing_overhead(stack: &Stack, rounds: usize, objects: usize, changes: usize) -> anyhow::Result<()> {
    use ks_tests::stack::{HubOptions, Tracing};
    let mut measured: Vec<(Tracing, Vec<Duration>, Vec<Duration>)> =
        vec![(Tracing::Off, vec![], vec![]), (Tracing::On, vec![], vec![])];
    for round in 0..rounds {
        for (tracing, delivered, returned) in measured.iter_mut() {
            println!("round {} with tracing {tracing:?}", round + 1);
            let options = HubOptions {
                tracing: *tracing,
                ..HubOptions::STACK
            };
            stack.restart_hub("wds1", options).await?;
            delivered.extend(delivery(stack, objects).await?.total);
            returned.extend(status::singleton(stack, changes).await?.0);
        }
    }
    stack.restart_hub("wds1", HubOptions::STACK).await?;
    for (tracing, delivered, returned) in measured {
        println!(
            "tracing {tracing:?}: delivery (WDS create -> both WECs) {}",
            summary(delivered)
        );
        println!(
            "tracing {tracing:?}: status (WEC change -> WDS .status) {}",
            summary(returned)
        );
    }
    Ok(())
}

/// p50/p90/p99/max of some durations.
fn summary(mut latencies: Vec<Duration>) -> String {
    latencies.sort();
    let at = |q: f64| latencies[((latencies.len() as f64 - 1.0) * q).round() as usize];
    format!(
        "p50 {:?}  p90 {:?}  p99 {:?}  max {:?}",
        at(0.5),
        at(0.9),
        at(0.99),
        latencies.last().copied().unwrap_or_default()
    )
}

/// Per-object times of the delivery scenario.
pub struct Delivery {
    /// WDS create -> present on both WECs.
    pub total: Vec<Duration>,
    /// WDS create -> the Binding lists it.
    pub to_binding: Vec<Duration>,
    /// WDS create -> cluster1's ManifestWork holds it.
    pub to_work: Vec<Duration>,
    /// ManifestWork generations added.
    pub writes: i64,
}

async fn delivery_latency(stack: &Stack, objects: usize) -> anyhow::Result<()> {
    let d = delivery(stack, objects).await?;
    println!(
        "delivery: WDS create -> present on both WECs over {} Deployments: {}; ManifestWork generations added: {}",
        d.total.len(),
        summary(d.total),
        d.writes
    );
    println!("  of which WDS create -> Binding lists it: {}", summary(d.to_binding));
    println!(
        "  of which WDS create -> cluster1's ManifestWork holds it: {}",
        summary(d.to_work)
    );
    Ok(())
}

/// Creates `objects` Deployments one after another, each waited for on both WECs.
pub async fn delivery(stack: &Stack, objects: usize) -> anyhow::Result<Delivery> {
    use k8s_openapi::api::apps::v1::Deployment;
    let wds = stack.client("wds1").await?;
    let wecs = [stack.client("cluster1").await?, stack.client("cluster2").await?];
    let its = stack.client("its1").await?;
    let ns = unique("bench-delivery");
    let apply = PatchParams::apply(MANAGER).force();
    let label = json!({"bench.kubestellar.io/delivery": ns});
    let edge = json!([{"matchLabels": {"location-group": "edge"}}]);
    let (namespaces, policies) = scenario(&wds, &ns, &ns, &label, edge, json!({})).await?;
    let works: Api<ks_shared::ocm::ManifestWork> = Api::all(its);
    let generations = |list: Vec<ks_shared::ocm::ManifestWork>| -> i64 {
        list.iter()
            .filter(|w| w.metadata.name.as_deref().is_some_and(|n| n.starts_with(&ns)))
            .map(|w| w.metadata.generation.unwrap_or(0))
            .sum()
    };
    let deployments: Api<Deployment> = Api::namespaced(wds.clone(), &ns);
    let bindings: Api<Binding> = Api::all(wds.clone());
    let mailbox: Api<ks_shared::ocm::ManifestWork> = Api::namespaced(stack.client("its1").await?, "cluster1");
    let (mut latencies, mut to_binding, mut to_work) = (Vec::new(), Vec::new(), Vec::new());
    let writes_before = generations(works.list(&Default::default()).await?.items);
    for i in 0..objects {
        let name = format!("web-{i}");
        let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "labels": label},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [{"name": "c", "image": "nginx:1.27"}]}}}});
        let started = Instant::now();
        deployments.patch(&name, &apply, &Patch::Apply(deployment)).await?;
        // Where the time goes: the Binding lists it, then a ManifestWork for cluster1 holds it.
        let listed = |b: Option<&Binding>| {
            b.is_some_and(|b| b.spec.workload.namespace_scope.iter().any(|o| o.object.name == name))
        };
        wait_until(
            bindings.clone(),
            &ns,
            "listing the object",
            Duration::from_secs(60),
            listed,
        )
        .await?;
        to_binding.push(started.elapsed());
        let holds = |w: &ks_shared::ocm::ManifestWork| {
            w.spec
                .workload
                .manifests
                .iter()
                .any(|m| m["metadata"]["name"] == json!(name))
        };
        let ours = watcher::Config::default().labels(&format!("{}={ns}", ks_shared::names::ORIGIN_BINDING_LABEL));
        let held = watcher(mailbox.clone(), ours)
            .applied_objects()
            .try_filter(|w| std::future::ready(holds(w)));
        futures::pin_mut!(held);
        tokio::time::timeout(Duration::from_secs(60), held.try_next()).await??;
        to_work.push(started.elapsed());
        for wec in &wecs {
            let on_wec: Api<Deployment> = Api::namespaced(wec.clone(), &ns);
            wait_until(
                on_wec,
                &name,
                "present on the WEC",
                Duration::from_secs(60),
                |d: Option<&Deployment>| d.is_some(),
            )
            .await?;
        }
        latencies.push(started.elapsed());
    }
    let writes = generations(works.list(&Default::default()).await?.items) - writes_before;
    policies.delete(&ns, &DeleteParams::default()).await?;
    namespaces.delete(&ns, &DeleteParams::default()).await?;
    Ok(Delivery {
        total: latencies,
        to_binding,
        to_work,
        writes,
    })
}

async fn binding_latency(stack: &Stack, changes: usize) -> anyhow::Result<()> {
    let wds = stack.client("wds1").await?;
    let ns = format!("bench-{}", std::process::id());
    let namespaces = apply_namespace(&wds, &ns, &json!({})).await?;
    let apply = PatchParams::apply(MANAGER).force();
    let cms: Api<ConfigMap> = Api::namespaced(wds.clone(), &ns);
    for name in ["a", "b"] {
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"k": "v"}});
        cms.patch(name, &apply, &Patch::Apply(cm)).await?;
    }
    let policies: Api<BindingPolicy> = Api::all(wds.clone());
    let bindings: Api<Binding> = Api::all(wds.clone());
    let policy = |object: &str| {
        json!({"apiVersion": "control.kubestellar.io/v1alpha1", "kind": "BindingPolicy", "metadata": {"name": ns},
               "spec": {"clusterSelectors": [{"matchLabels": {"location-group": "edge"}}],
                        "downsync": [{"namespaces": [ns], "resources": ["configmaps"], "objectNames": [object]}]}})
    };
    let mut latencies = Vec::new();
    let mut writes = Vec::new();
    for i in 0..=changes {
        let object = if i % 2 == 0 { "a" } else { "b" };
        let generation_before = bindings
            .get_opt(&ns)
            .await?
            .and_then(|b| b.metadata.generation)
            .unwrap_or(0);
        let started = Instant::now();
        policies.patch(&ns, &apply, &Patch::Apply(policy(object))).await?;
        let shows = |b: Option<&Binding>| {
            b.is_some_and(|b| b.spec.workload.namespace_scope.iter().any(|o| o.object.name == object))
        };
        let binding = wait_until(
            bindings.clone(),
            &ns,
            "showing the change",
            Duration::from_secs(30),
            shows,
        )
        .await?;
        // The first round creates the policy and is not a change.
        if i > 0 {
            latencies.push(started.elapsed());
            writes.push(binding.and_then(|b| b.metadata.generation).unwrap_or(0) - generation_before);
        }
    }
    println!(
        "binding latency over {} policy changes: {}  (Binding writes per change: {:?})",
        latencies.len(),
        summary(latencies),
        writes
    );
    policies.delete(&ns, &DeleteParams::default()).await?;
    namespaces.delete(&ns, &DeleteParams::default()).await?;
    Ok(())
}

mod agent {
    //! The agent measurements: a Gauge custom resource whose `.status` the bench writes on the
    //! WEC stands for "a status change", so nothing but the agent sits between the two clocks.

    use std::time::{Duration, Instant};

    use futures::StreamExt;
    use ks_shared::api::WorkStatus;
    use ks_tests::harness::wait_until;
    use ks_tests::stack::Stack;
    use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
    use kube::runtime::wait::conditions;
    use kube::runtime::{WatchStreamExt, watcher};
    use serde_json::json;

    use super::{MANAGER, rss_kib as rss, summary};

    const WEC: &str = "cluster1";
    const DEADLINE: Duration = Duration::from_secs(120);

    pub async fn churn(stack: &Stack, rounds: usize, count: usize) -> anyhow::Result<()> {
        let hub = stack.client("its1").await?;
        let id = std::process::id();
        let pid = stack.wait_agent_ready(WEC, DEADLINE).await?;
        let works: Api<ks_shared::ocm::ManifestWork> = Api::namespaced(hub.clone(), WEC);
        let statuses: Api<WorkStatus> = Api::namespaced(hub.clone(), WEC);
        let ns = format!("bench-churn-{id}");
        let run_label = format!("bench.kubestellar.io/run={id}");
        let labels =
            json!({"transport.kubestellar.io/originWdsName": "bench", "bench.kubestellar.io/run": id.to_string()});
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

    pub async fn latency(stack: &Stack, changes: usize, objects: usize) -> anyhow::Result<()> {
        let wec = stack.client(WEC).await?;
        let hub = stack.client("its1").await?;
        let id = std::process::id();
        let apply = PatchParams::apply(MANAGER).force();

        ks_tests::gauge::install(&wec, MANAGER).await?;

        let pid = stack.wait_agent_ready(WEC, DEADLINE).await?;

        let ns = format!("bench-agent-{id}");
        let works: Api<ks_shared::ocm::ManifestWork> = Api::namespaced(hub.clone(), WEC);
        let labels =
            json!({"transport.kubestellar.io/originWdsName": "bench", "bench.kubestellar.io/run": id.to_string()});
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
        let batches = objects.div_ceil(100);
        for batch in 0..batches {
            let manifests: Vec<_> = (0..100.min(objects - batch * 100))
                .map(|i| {
                    json!({"apiVersion": "v1", "kind": "ConfigMap",
                                "metadata": {"name": format!("cm-{batch}-{i}"), "namespace": ns}, "data": {"k": "v"}})
                })
                .collect();
            let work = json!({"apiVersion": "work.open-cluster-management.io/v1", "kind": "ManifestWork",
                "metadata": {"name": format!("{ns}-cms-{batch}"), "labels": labels}, "spec": {"workload": {"manifests": manifests}}});
            works
                .patch(&format!("{ns}-cms-{batch}"), &apply, &Patch::Apply(work))
                .await?;
        }
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

        for batch in 0..batches {
            works
                .delete(&format!("{ns}-cms-{batch}"), &DeleteParams::default())
                .await?;
        }
        works.delete(&ns, &DeleteParams::default()).await?;
        Ok(())
    }
}

mod status {
    //! Status return: a Gauge in the WDS, bound to cluster1 with singleton status return; the
    //! bench writes the `.status` of its copy on cluster1 and waits for the WDS Gauge to show it.
    //! Between the two clocks: the status agent, the WorkStatus, and the hub's status controller.

    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::{Duration, Instant};

    use futures::StreamExt;
    use ks_shared::api::BindingPolicy;
    use ks_tests::harness::wait_until;
    use ks_tests::stack::Stack;
    use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams};
    use kube::runtime::{WatchStreamExt, watcher};
    use serde_json::json;

    use ks_tests::gauge::{self, resource as gauge_resource};

    use super::{MANAGER, summary};

    const DEADLINE: Duration = Duration::from_secs(120);

    pub async fn latency(stack: &Stack, changes: usize) -> anyhow::Result<()> {
        let (latencies, written) = singleton(stack, changes).await?;
        println!(
            "status: WEC status change -> WDS .status over {} changes: {}; writes to the WDS object: {written} for {changes} changes",
            latencies.len(),
            summary(latencies)
        );
        Ok(())
    }

    /// Times `changes` status changes of a Gauge on cluster1 until the WDS Gauge shows each;
    /// also returns the count of writes to the WDS Gauge meanwhile.
    pub async fn singleton(stack: &Stack, changes: usize) -> anyhow::Result<(Vec<Duration>, usize)> {
        let wds = stack.client("wds1").await?;
        let wec = stack.client("cluster1").await?;
        gauge::install(&wds, MANAGER).await?;
        gauge::install(&wec, MANAGER).await?;
        let ns = super::unique("bench-status");
        let apply = PatchParams::apply(MANAGER).force();
        let label = json!({"bench.kubestellar.io/status": ns});
        let namespaces = super::apply_namespace(&wds, &ns, &json!({})).await?;
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
        let shows = |value: usize| {
            move |g: Option<&DynamicObject>| g.is_some_and(|g| g.data["status"]["value"] == json!(value))
        };
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
        let events = watcher(in_wds.clone(), watcher::Config::default().fields(&fields)).applied_objects();
        let watching = tokio::spawn(async move {
            tokio::pin!(events);
            while let Some(Ok(gauge)) = events.next().await {
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

        let mut latencies = Vec::new();
        for value in 1..=changes {
            let started = Instant::now();
            write_status(value).await?;
            wait_until(in_wds.clone(), "g", "showing the new status", DEADLINE, shows(value)).await?;
            latencies.push(started.elapsed());
        }
        caught_up(changes).await?;
        let written = writes.load(Ordering::Relaxed) - before;
        watching.abort();
        policies.delete(&ns, &DeleteParams::default()).await?;
        namespaces.delete(&ns, &DeleteParams::default()).await?;
        Ok((latencies, written))
    }
}
