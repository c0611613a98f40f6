//! The bulk scenario of the comparison: many small objects to both WECs and the simulated ones,
//! timed until every mailbox and both real WECs hold them all, with the hub's memory, CPU and
//! apiserver writes meanwhile and when idle afterwards, against what the ITS apiserver alone
//! needs to write the same ManifestWorks.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use ks_shared::names::ORIGIN_BINDING_LABEL;
use ks_shared::ocm::ManifestWork;
use ks_tests::metrics::{Request, apiserver_writes, difference};
use ks_tests::stack::Stack;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;

use super::report::{Figures, Implementation, Unit};
use super::simulated::SIMULATED_LABEL;
use super::{DEADLINE, Knobs, WDS, hub_pids};
use crate::fixtures::{MANAGER, apply_namespace, scenario, unique};
use crate::measure::Usage;

/// `count` small objects (half ConfigMaps, half Deployments of 0 replicas) selected for both
/// WECs and `simulated_wecs` ManagedClusters that have a mailbox but no agent.
pub async fn bulk(
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
    let (namespaces, policies) = scenario(&wds, &ns, &name, &label, clusters, json!({})).await?;
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
    let namespaces = apply_namespace(its, &ns, &json!({})).await?;
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
